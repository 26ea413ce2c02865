// [speed] A measuring yardstick, never the product: a CUDA C++ twin of GATED_DELTA_NET
// (scalar gate, D = 128), written from spec §2.10 (../../../shared/spec/ggml-gdn-chain.md) in
// the shape upstream ggml's kernel has — int64 strides, a fast-modulo key head, a warp per
// value column, `__launch_bounds__(128, 2)`, the snapshot store in the token loop when K > 1
// and after it when K = 1 — compiled with ggml's flags (`-O3 -use_fast_math`, sm_90) so that
// its SASS can be compared with the SASS ptxas makes of our PTX (instructions per token, where
// loads are issued, registers), and timed next to ours under ncu (tools/twins/ncu-gdn.sh).
//
// Build: tools/twins/build-gdn.sh (cubin + SASS without a GPU; the runnable twin with nvcc on
// the GPU machine). Run: gdn_twin N_TOKENS K [N_REPS] — 9B shapes: H_k = 16, H_v = 32, n_s = 1,
// q/k/v as the layer's views of one contiguous conv output, g/beta contiguous.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

constexpr int D = 128;

// Fast unsigned modulo by a runtime divisor d ≥ 1 (magic multiplier, as ggml's fastmodulo).
struct FastDiv {
    uint32_t mp, l, d;
};
[[maybe_unused]] static FastDiv make_fastdiv(uint32_t d) {
    uint32_t l = 0;
    while (l < 32 && (uint32_t{1} << l) < d) l++;
    uint32_t mp = (uint32_t)(((uint64_t{1} << 32) * ((uint64_t{1} << l) - d)) / d + 1);
    return FastDiv{mp, l, d};
}
__device__ __forceinline__ uint32_t fastdiv(uint32_t n, FastDiv f) {
    uint32_t hi = __umulhi(n, f.mp);
    return (hi + n) >> f.l;
}
__device__ __forceinline__ uint32_t fastmod(uint32_t n, FastDiv f) { return n - fastdiv(n, f) * f.d; }

__device__ __forceinline__ float butterfly(float x) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) x += __shfl_xor_sync(0xffffffff, x, o, 32);
    return x;
}

template <bool KEEP_SLOTS>
__global__ void __launch_bounds__(128, 2)
gdn_twin(const float * q, const float * k, const float * v, const float * g, const float * beta,
         const float * state_in, float * dst, float * state_out,
         int64_t H, int64_t n_tokens,
         int64_t sq1, int64_t sq2, int64_t sq3, int64_t sv1, int64_t sv2, int64_t sv3,
         int64_t sb1, int64_t sb2, int64_t sb3, FastDiv key_heads, float scale,
         int64_t slot_stride, int K) {
    const uint32_t h = blockIdx.x;
    const uint32_t s = blockIdx.y;
    const int lane = threadIdx.x;
    const int col = blockIdx.z * blockDim.y + threadIdx.y;
    const uint32_t kh = fastmod(h, key_heads);

    state_in += ((int64_t)s * H + h) * D * D + (int64_t)col * D;
    state_out += ((int64_t)s * H + h) * D * D;
    float * out = dst + ((int64_t)s * n_tokens * H + h) * D;

    float st[4];
#pragma unroll
    for (int r = 0; r < 4; r++) st[r] = state_in[32 * r + lane];

    for (int t = 0; t < n_tokens; t++) {
        const float * q_t = q + s * sq3 + t * sq2 + kh * sq1;
        const float * k_t = k + s * sq3 + t * sq2 + kh * sq1;
        const float * v_t = v + s * sv3 + t * sv2 + h * sv1;
        const int64_t gb = s * sb3 + t * sb2 + h * sb1;
        const float b_t = beta[gb];
        float kr[4], qr[4];
#pragma unroll
        for (int r = 0; r < 4; r++) {
            kr[r] = k_t[32 * r + lane];
            qr[r] = q_t[32 * r + lane];
        }
        const float gamma = expf(g[gb]);
        float kv = 0.0f;
#pragma unroll
        for (int r = 0; r < 4; r++) kv += st[r] * kr[r];
        kv = butterfly(kv);
        const float delta = (v_t[col] - gamma * kv) * b_t;
        float a = 0.0f;
#pragma unroll
        for (int r = 0; r < 4; r++) {
            st[r] = gamma * st[r] + kr[r] * delta;
            a += st[r] * qr[r];
        }
        a = butterfly(a);
        if (lane == 0) out[col] = a * scale;
        out += D * H;
        if (KEEP_SLOTS) {
            const int slot = (int)n_tokens - 1 - t;
            if (slot >= 0 && slot < K) {
#pragma unroll
                for (int r = 0; r < 4; r++) state_out[slot * slot_stride + col * D + 32 * r + lane] = st[r];
            }
        }
    }
    if (!KEEP_SLOTS) {
#pragma unroll
        for (int r = 0; r < 4; r++) state_out[col * D + 32 * r + lane] = st[r];
    }
}

// Explicit instantiations, so that `-cubin` without a host main still emits both kernels.
template __global__ void gdn_twin<true>(const float *, const float *, const float *, const float *, const float *,
                                        const float *, float *, float *, int64_t, int64_t, int64_t, int64_t,
                                        int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, FastDiv,
                                        float, int64_t, int);
template __global__ void gdn_twin<false>(const float *, const float *, const float *, const float *, const float *,
                                         const float *, float *, float *, int64_t, int64_t, int64_t, int64_t,
                                         int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, FastDiv,
                                         float, int64_t, int);

#ifndef GDN_TWIN_NO_MAIN
__global__ void fill(float * x, size_t n, uint32_t seed, float lo, float hi) {
    size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i < n) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15; h *= 0x2c1b3c6du; h ^= h >> 12;
        x[i] = lo + (hi - lo) * (h >> 8) * (1.0f / 16777216.0f);
    }
}
static float * alloc_fill(size_t n, uint32_t seed, float lo, float hi) {
    float * p;
    if (cudaMalloc(&p, n * sizeof(float)) != cudaSuccess) { fprintf(stderr, "cudaMalloc failed\n"); exit(1); }
    fill<<<(unsigned)((n + 255) / 256), 256>>>(p, n, seed, lo, hi);
    return p;
}

int main(int argc, char ** argv) {
    if (argc < 3) { fprintf(stderr, "usage: %s N_TOKENS K [N_REPS]\n", argv[0]); return 2; }
    const int64_t n_t = atoi(argv[1]);
    const int K = atoi(argv[2]);
    const int reps = argc > 3 ? atoi(argv[3]) : 12;
    const int64_t H_k = 16, H_v = 32, n_s = 1;
    // The layer's views of one conv output row per token: [q (H_k·D) | k (H_k·D) | v (H_v·D)].
    const int64_t row = (2 * H_k + H_v) * D;
    float * conv = alloc_fill(row * n_t * n_s, 1, -0.1f, 0.1f);
    float * g = alloc_fill(H_v * n_t * n_s, 2, -2.0f, 0.0f);
    float * beta = alloc_fill(H_v * n_t * n_s, 3, 0.0f, 1.0f);
    float * st = alloc_fill(D * D * H_v * n_s, 4, -0.05f, 0.05f);
    float * dst = alloc_fill(D * H_v * n_t * n_s + (int64_t)D * D * H_v * n_s * (K > 1 ? K : 1), 5, 0, 0);
    const float * q = conv, * k = conv + H_k * D, * v = conv + 2 * H_k * D;
    const int64_t slot_stride = D * D * H_v * n_s;
    float * state_out = dst + D * H_v * n_t * n_s;
    dim3 grid(H_v, n_s, D / 4), block(32, 4, 1);
    for (int i = 0; i < reps; i++) {
        if (K > 1)
            gdn_twin<true><<<grid, block>>>(q, k, v, g, beta, st, dst, state_out, H_v, n_t, D, row, row * n_t, D, row,
                                            row * n_t, 1, H_v, H_v * n_t, make_fastdiv(H_k), 1.0f / sqrtf((float)D),
                                            slot_stride, K);
        else
            gdn_twin<false><<<grid, block>>>(q, k, v, g, beta, st, dst, state_out, H_v, n_t, D, row, row * n_t, D, row,
                                             row * n_t, 1, H_v, H_v * n_t, make_fastdiv(H_k), 1.0f / sqrtf((float)D),
                                             slot_stride, K);
    }
    cudaError_t e = cudaDeviceSynchronize();
    if (e != cudaSuccess) { fprintf(stderr, "gdn_twin: %s\n", cudaGetErrorString(e)); return 1; }
    printf("gdn_twin n_t=%lld K=%d reps=%d ok\n", (long long)n_t, K, reps);
    return 0;
}
#endif
