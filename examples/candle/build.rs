// The GPU machine's CUDA toolkit libraries (cuBLAS, cuRAND, NVRTC, which candle links) are
// found through this run path; libcuda comes from the driver's own location.
fn main() {
    for dir in ["/usr/local/cuda/lib64", "/usr/local/cuda/targets/x86_64-linux/lib"] {
        println!("cargo:rustc-link-arg=-Wl,-rpath,{dir}");
    }
}
