// A hardware probe, not part of rgdn: the DRAM bandwidth one H200 reaches for the byte mixes of
// a GDN verify step — one state read and W states written (W = T snapshots; W = 1 for the replay
// step's one commit), with 4-byte stores (what rgdn's and ggml's row-to-lane layout issue: a
// warp's store instruction covers 128 contiguous bytes) and with 16-byte stores. It answers
// what floor a write-heavy step can reach, which the 4.3 TB/s copy figure does not say.
// Build and run on the GPU machine: nvcc -O3 -arch=sm_90 -o stream_mix stream_mix.cu && ./stream_mix
#include <cstdio>
#include <cstdlib>
#include <cuda_runtime.h>

#define CHECK(x) do { cudaError_t e = (x); if (e != cudaSuccess) { printf("CUDA error %s at %s:%d\n", cudaGetErrorString(e), __FILE__, __LINE__); exit(1); } } while (0)

// Each thread streams elements i = tid, tid + stride, …: reads src[i], writes it to W buffers.
template <int W>
__global__ void mix_scalar(const float* __restrict__ src, float* __restrict__ dst, size_t n, size_t dst_stride, float* sink) {
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float x = src[i];
        if (W == 0) acc += x;
#pragma unroll
        for (int w = 0; w < W; w++) dst[w * dst_stride + i] = x;
    }
    if (W == 0 && acc == 1234.5f) *sink = acc;
}

template <int W>
__global__ void mix_vec(const float4* __restrict__ src, float4* __restrict__ dst, size_t n4, size_t dst_stride4, float* sink) {
    float acc = 0.f;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n4; i += (size_t)gridDim.x * blockDim.x) {
        float4 x = src[i];
        if (W == 0) acc += x.x + x.y + x.z + x.w;
#pragma unroll
        for (int w = 0; w < W; w++) dst[w * dst_stride4 + i] = x;
    }
    if (W == 0 && acc == 1234.5f) *sink = acc;
}

template <int W>
void run(const char* label, int sms, float* src, float* dst, size_t n, float* sink) {
    cudaEvent_t a, b;
    CHECK(cudaEventCreate(&a));
    CHECK(cudaEventCreate(&b));
    for (int vec = 0; vec < 2; vec++) {
        for (int blocks_per_sm : {4, 8, 16}) {
            int blocks = sms * blocks_per_sm, threads = 256;
            auto launch = [&] {
                if (vec) mix_vec<W><<<blocks, threads>>>((const float4*)src, (float4*)dst, n / 4, n / 4, sink);
                else mix_scalar<W><<<blocks, threads>>>(src, dst, n, n, sink);
            };
            for (int i = 0; i < 3; i++) launch();
            CHECK(cudaEventRecord(a));
            const int iters = 20;
            for (int i = 0; i < iters; i++) launch();
            CHECK(cudaEventRecord(b));
            CHECK(cudaEventSynchronize(b));
            float ms;
            CHECK(cudaEventElapsedTime(&ms, a, b));
            double s = ms / 1e3 / iters;
            double bytes = (double)n * 4 * (1 + W);
            printf("%-28s %-7s %2d blocks/SM: %8.2f us, %6.3f TB/s (read %.0f MB, write %.0f MB)\n", label, vec ? "16-byte" : "4-byte",
                   blocks_per_sm, s * 1e6, bytes / s / 1e12, n * 4 / 1e6, (double)n * 4 * W / 1e6);
        }
    }
    CHECK(cudaEventDestroy(a));
    CHECK(cudaEventDestroy(b));
}

int main() {
    cudaDeviceProp p;
    CHECK(cudaGetDeviceProperties(&p, 0));
    printf("GPU: %s, %d SMs, L2 %d MB\n", p.name, p.multiProcessorCount, p.l2CacheSize >> 20);
    // 64 sequences' 2 MiB states (Qwen3.5-9B, F32): 128 MiB read; W × 128 MiB written.
    size_t n = (size_t)64 * 2 * 1024 * 1024 / 4;
    float *src, *dst, *sink;
    CHECK(cudaMalloc(&src, n * 4));
    CHECK(cudaMalloc(&dst, n * 4 * 8));
    CHECK(cudaMalloc(&sink, 4));
    CHECK(cudaMemset(src, 0, n * 4));
    CHECK(cudaMemset(dst, 0, n * 4 * 8));
    int sms = p.multiProcessorCount;
    run<0>("read only", sms, src, dst, n, sink);
    run<1>("read 1, write 1 (replay)", sms, src, dst, n, sink);
    run<4>("read 1, write 4 (T = 4)", sms, src, dst, n, sink);
    run<8>("read 1, write 8 (T = 8)", sms, src, dst, n, sink);
    return 0;
}
