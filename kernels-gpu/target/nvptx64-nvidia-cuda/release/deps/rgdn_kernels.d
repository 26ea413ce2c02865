/work/main/kernels-gpu/target/nvptx64-nvidia-cuda/release/deps/rgdn_kernels.s: src/lib.rs src/abi.rs src/device/mod.rs src/device/atomic.rs src/device/half.rs src/device/math.rs src/device/shared.rs src/device/thread.rs src/device/warp.rs src/fast_math.rs src/l2_norm.rs src/ssm_conv.rs src/test_support.rs

/work/main/kernels-gpu/target/nvptx64-nvidia-cuda/release/deps/rgdn_kernels.d: src/lib.rs src/abi.rs src/device/mod.rs src/device/atomic.rs src/device/half.rs src/device/math.rs src/device/shared.rs src/device/thread.rs src/device/warp.rs src/fast_math.rs src/l2_norm.rs src/ssm_conv.rs src/test_support.rs

/work/main/kernels-gpu/target/nvptx64-nvidia-cuda/release/deps/rgdn_kernels.ptx: src/lib.rs src/abi.rs src/device/mod.rs src/device/atomic.rs src/device/half.rs src/device/math.rs src/device/shared.rs src/device/thread.rs src/device/warp.rs src/fast_math.rs src/l2_norm.rs src/ssm_conv.rs src/test_support.rs

src/lib.rs:
src/abi.rs:
src/device/mod.rs:
src/device/atomic.rs:
src/device/half.rs:
src/device/math.rs:
src/device/shared.rs:
src/device/thread.rs:
src/device/warp.rs:
src/fast_math.rs:
src/l2_norm.rs:
src/ssm_conv.rs:
src/test_support.rs:
