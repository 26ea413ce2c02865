// mul_mat_vec_f twin — a MEASURING TOOL, never the product.
//
// A CUDA C++ replica of ggml's `mul_mat_vec_f` written from spec §2.9 (ggml-gdn-chain.md), with
// ggml's loop structure and expressions (block size a template parameter, `int` indices,
// `__restrict__` const pointers, `sumf[j] += x*y` contracted by nvcc, half2 accumulation via
// `sumh2[j] += x2 * make_half2(y.x, y.y)`), compiled with ggml's flags
// (`nvcc -O3 -use_fast_math -arch=sm_90`). Its SASS is the yardstick for the Rust kernel
// (kernels-gpu/src/mmvf.rs): `tools/twins/build.sh` prints both; `tools/twins/ncu-mmvf.sh`
// times both on the GPU.
//
// The host `main` launches every instance at E = 4096, 32 rows (the Qwen3.5-9B alpha/beta
// projection) on zero-filled buffers, REPS times each, so that ncu can time them:
//   ./mmvf_twin [REPS]
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cstdio>
#include <cstdlib>
#include <type_traits>

static __device__ __forceinline__ float warp_reduce_sum(float x) {
#pragma unroll
    for (int offset = 16; offset > 0; offset >>= 1) {
        x += __shfl_xor_sync(0xffffffff, x, offset, 32);
    }
    return x;
}

static __device__ __forceinline__ void ggml_cuda_mad(float & acc, const float v, const float u) {
    acc += v * u;
}

// T: float, half or nv_bfloat16; type_acc: float, or half for half2 accumulation (F16 only).
// PAIR: grid.y = 2 picks one of two weight/dst pairs (the MUL_MAT_VEC_PAIR shape).
template <typename T, typename type_acc, int ncols_dst, int block_size, bool PAIR = false>
static __global__ void mul_mat_vec_f(
        const T * __restrict__ x, const T * __restrict__ x_b, const float * __restrict__ y,
        float * __restrict__ dst, float * __restrict__ dst_b,
        const int ncols2, const int stride_row, const int stride_col_y2, const int stride_col_dst) {
    const int row = blockIdx.x;
    const int tid = threadIdx.x;
    constexpr int warp_size = 32;

    if (PAIR && blockIdx.y == 1) {
        x   = x_b;
        dst = dst_b;
    }
    x += row * stride_row;

    const float2 * y2 = (const float2 *) y;

    extern __shared__ char data_mmv[];
    float * buf_iw = (float *) data_mmv;

    if (block_size > warp_size) {
        if (tid < warp_size) {
            buf_iw[tid] = 0.0f;
        }
        __syncthreads();
    }

    float sumf[ncols_dst] = {0.0f};

    if constexpr (std::is_same_v<T, float>) {
        const float2 * x2 = (const float2 *) x;
        for (int col2 = tid; col2 < ncols2; col2 += block_size) {
            const float2 tmpx = x2[col2];
#pragma unroll
            for (int j = 0; j < ncols_dst; ++j) {
                const float2 tmpy = y2[j * stride_col_y2 + col2];
                ggml_cuda_mad(sumf[j], tmpx.x, tmpy.x);
                ggml_cuda_mad(sumf[j], tmpx.y, tmpy.y);
            }
        }
    } else if constexpr (std::is_same_v<T, half>) {
        const half2 * x2 = (const half2 *) x;
        if constexpr (std::is_same_v<type_acc, float>) {
            for (int col2 = tid; col2 < ncols2; col2 += block_size) {
                const float2 tmpx = __half22float2(x2[col2]);
#pragma unroll
                for (int j = 0; j < ncols_dst; ++j) {
                    const float2 tmpy = y2[j * stride_col_y2 + col2];
                    ggml_cuda_mad(sumf[j], tmpx.x, tmpy.x);
                    ggml_cuda_mad(sumf[j], tmpx.y, tmpy.y);
                }
            }
        } else {
            half2 sumh2[ncols_dst] = {{0.0f, 0.0f}};
            for (int col2 = tid; col2 < ncols2; col2 += block_size) {
                const half2 tmpx = x2[col2];
#pragma unroll
                for (int j = 0; j < ncols_dst; ++j) {
                    const float2 tmpy = y2[j * stride_col_y2 + col2];
                    sumh2[j] += tmpx * make_half2(tmpy.x, tmpy.y);
                }
            }
#pragma unroll
            for (int j = 0; j < ncols_dst; ++j) {
                sumf[j] = __low2float(sumh2[j]) + __high2float(sumh2[j]);
            }
        }
    } else if constexpr (std::is_same_v<T, nv_bfloat16>) {
        const int * x2 = (const int *) x;
        for (int col2 = tid; col2 < ncols2; col2 += block_size) {
            const int tmpx = x2[col2];
#pragma unroll
            for (int j = 0; j < ncols_dst; ++j) {
                const float2 tmpy = y2[j * stride_col_y2 + col2];
                ggml_cuda_mad(sumf[j], __bfloat162float(reinterpret_cast<const nv_bfloat16 *>(&tmpx)[0]), tmpy.x);
                ggml_cuda_mad(sumf[j], __bfloat162float(reinterpret_cast<const nv_bfloat16 *>(&tmpx)[1]), tmpy.y);
            }
        }
    }

#pragma unroll
    for (int j = 0; j < ncols_dst; ++j) {
        sumf[j] = warp_reduce_sum(sumf[j]);
        if (block_size > warp_size) {
            buf_iw[tid / warp_size] = sumf[j];
            __syncthreads();
            if (tid < warp_size) {
                sumf[j] = buf_iw[tid];
                sumf[j] = warp_reduce_sum(sumf[j]);
            }
            __syncthreads();
        }
    }

    if (tid >= ncols_dst) {
        return;
    }
    dst[tid * stride_col_dst + row] = sumf[tid];
}

// Explicit instances (block 256 = ggml's choice for E = 2560, 4096, 5120), so that -cubin keeps
// them all for the SASS listing.
#define INST(T, ACC, N)                                                                              \
    template __global__ void mul_mat_vec_f<T, ACC, N, 256, false>(const T *, const T *, const float *, \
        float *, float *, int, int, int, int);                                                       \
    template __global__ void mul_mat_vec_f<T, ACC, N, 256, true>(const T *, const T *, const float *,  \
        float *, float *, int, int, int, int);
#define INST8(T, ACC) INST(T, ACC, 1) INST(T, ACC, 2) INST(T, ACC, 3) INST(T, ACC, 4) \
                      INST(T, ACC, 5) INST(T, ACC, 6) INST(T, ACC, 7) INST(T, ACC, 8)
INST8(float, float)
INST8(half, half)
INST8(half, float)
INST8(nv_bfloat16, float)

#ifndef TWIN_NO_MAIN
#define CHECK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

template <typename T, typename ACC, int N, bool PAIR>
static void launch(const void * w, const void * w2, const float * y, float * d, float * d2, int E, int rows) {
    dim3 grid(rows, PAIR ? 2 : 1, 1);
    mul_mat_vec_f<T, ACC, N, 256, PAIR><<<grid, 256, 32 * sizeof(float)>>>(
        (const T *) w, (const T *) w2, y, d, d2, E / 2, E, E / 2, rows);
}

template <typename T, typename ACC>
static void all_cols(const void * w, const void * w2, const float * y, float * d, float * d2, int E, int rows) {
    launch<T, ACC, 1, false>(w, w2, y, d, d2, E, rows); launch<T, ACC, 1, true>(w, w2, y, d, d2, E, rows);
    launch<T, ACC, 2, false>(w, w2, y, d, d2, E, rows); launch<T, ACC, 2, true>(w, w2, y, d, d2, E, rows);
    launch<T, ACC, 3, false>(w, w2, y, d, d2, E, rows); launch<T, ACC, 3, true>(w, w2, y, d, d2, E, rows);
    launch<T, ACC, 4, false>(w, w2, y, d, d2, E, rows); launch<T, ACC, 4, true>(w, w2, y, d, d2, E, rows);
    launch<T, ACC, 5, false>(w, w2, y, d, d2, E, rows); launch<T, ACC, 5, true>(w, w2, y, d, d2, E, rows);
    launch<T, ACC, 6, false>(w, w2, y, d, d2, E, rows); launch<T, ACC, 6, true>(w, w2, y, d, d2, E, rows);
    launch<T, ACC, 7, false>(w, w2, y, d, d2, E, rows); launch<T, ACC, 7, true>(w, w2, y, d, d2, E, rows);
    launch<T, ACC, 8, false>(w, w2, y, d, d2, E, rows); launch<T, ACC, 8, true>(w, w2, y, d, d2, E, rows);
}

int main(int argc, char ** argv) {
    const int reps = argc > 1 ? atoi(argv[1]) : 5;
    const int E = 4096, rows = 32, cols = 8;
    void * w; void * w2; float * y; float * d; float * d2;
    CHECK(cudaMalloc(&w, sizeof(float) * E * rows));
    CHECK(cudaMalloc(&w2, sizeof(float) * E * rows));
    CHECK(cudaMalloc(&y, sizeof(float) * E * cols));
    CHECK(cudaMalloc(&d, sizeof(float) * rows * cols));
    CHECK(cudaMalloc(&d2, sizeof(float) * rows * cols));
    CHECK(cudaMemset(w, 0, sizeof(float) * E * rows));
    CHECK(cudaMemset(w2, 0, sizeof(float) * E * rows));
    CHECK(cudaMemset(y, 0, sizeof(float) * E * cols));
    for (int r = 0; r < reps; ++r) {
        all_cols<float, float>(w, w2, y, d, d2, E, rows);
        all_cols<half, half>(w, w2, y, d, d2, E, rows);
        all_cols<half, float>(w, w2, y, d, d2, E, rows);
        all_cols<nv_bfloat16, float>(w, w2, y, d, d2, E, rows);
    }
    CHECK(cudaGetLastError());
    CHECK(cudaDeviceSynchronize());
    printf("mmvf_twin: %d reps of 64 launches done\n", reps);
    return 0;
}
#endif
