/* cuda_elem.cu — element-wise kernels (SwiGLU, residual add), the argmax
 * of logits rows, and the read kernel that measures the device's bandwidth
 * for specd-bench-decode. CPU references are named above each kernel.
 *
 * Threading: launchers only enqueue on the caller's stream. */
#include <math.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

/* -------------------------------------------------------- elementwise */

/* CPU reference: silu_range() in cpu_backend.c. out, gate, up: [n] */

__global__ void silu_mul_kernel(float *out, const float *gate, const float *up, size_t n, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        out[i] = silu_mul1(gate[i], up[i], bf16);
}

extern "C" cudaError_t sd_cu_silu_mul(cudaStream_t stream, float *out, const float *gate, const float *up, size_t n,
                                      int bf16)
{
    if (n == 0) return cudaSuccess;
    silu_mul_kernel<<<grid_for(n, 256), 256, 0, stream>>>(out, gate, up, n, bf16);
    return cudaGetLastError();
}

/* CPU reference: add_range() in cpu_backend.c. y, x: [n] */
__global__ void add_kernel(float *y, const float *x, size_t n, int bf16)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = __fadd_rn(y[i], x[i]);
        y[i] = bf16 ? bf16r(v) : v;
    }
}

extern "C" cudaError_t sd_cu_add(cudaStream_t stream, float *y, const float *x, size_t n, int bf16)
{
    if (n == 0) return cudaSuccess;
    add_kernel<<<grid_for(n, 256), 256, 0, stream>>>(y, x, n, bf16);
    return cudaGetLastError();
}

/* ------------------------------------------------------------- argmax */

#define ARGMAX_THREADS 256

/* Better of two candidates: larger value, lower id on ties, -1 = none. */
__device__ __forceinline__ void argmax_merge(float *bv, int *bi, float v, int i)
{
    if (i < 0) return;
    if (*bi < 0 || v > *bv || (v == *bv && i < *bi)) {
        *bv = v;
        *bi = i;
    }
}

/* CPU reference: sd_argmax() in common/sample/sampler.c.
 * logits: [rows, vocab], out: [rows]. One block per row; each thread scans a
 * strided slice in ascending order (strict > keeps its lowest id), then a
 * shared-memory tree merges with the tie rule. */
__global__ void argmax_kernel(int32_t *out, const float *logits, int vocab)
{
    __shared__ float sv[ARGMAX_THREADS];
    __shared__ int si[ARGMAX_THREADS];
    const float *row = logits + (size_t)blockIdx.x * vocab;
    float bv = 0.0f;
    int bi = -1;
    for (int i = threadIdx.x; i < vocab; i += ARGMAX_THREADS) {
        float l = row[i];
        if (isnan(l)) continue;
        if (bi < 0 || l > bv) {
            bv = l;
            bi = i;
        }
    }
    sv[threadIdx.x] = bv;
    si[threadIdx.x] = bi;
    __syncthreads();
    for (int s = ARGMAX_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            float v = sv[threadIdx.x];
            int i = si[threadIdx.x];
            argmax_merge(&v, &i, sv[threadIdx.x + s], si[threadIdx.x + s]);
            sv[threadIdx.x] = v;
            si[threadIdx.x] = i;
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) out[blockIdx.x] = si[0];
}

extern "C" cudaError_t sd_cu_argmax(cudaStream_t stream, int32_t *out, const float *logits, int rows, int vocab)
{
    if (rows <= 0) return cudaSuccess;
    argmax_kernel<<<rows, ARGMAX_THREADS, 0, stream>>>(out, logits, vocab);
    return cudaGetLastError();
}

/* ---------------------------------------------------------- bandwidth */

/* Reads n 16-byte words (a grid-stride loop, several loads in flight per
 * thread) and folds them into one word per block, so that nothing is
 * optimised away; the device's read bandwidth for specd-bench-decode's
 * roofline. */
__global__ void read_kernel(uint4 *out, const uint4 *in, size_t n)
{
    uint4 acc = make_uint4(0, 0, 0, 0);
    size_t stride = (size_t)gridDim.x * blockDim.x, i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    for (; i + 3 * stride < n; i += 4 * stride) {
        uint4 a = in[i], b = in[i + stride], c = in[i + 2 * stride], d = in[i + 3 * stride];
        acc.x ^= a.x ^ b.x ^ c.x ^ d.x;
        acc.y ^= a.y ^ b.y ^ c.y ^ d.y;
        acc.z ^= a.z ^ b.z ^ c.z ^ d.z;
        acc.w ^= a.w ^ b.w ^ c.w ^ d.w;
    }
    for (; i < n; i += stride) {
        uint4 a = in[i];
        acc.x ^= a.x;
        acc.y ^= a.y;
        acc.z ^= a.z;
        acc.w ^= a.w;
    }
    if ((acc.x | acc.y | acc.z | acc.w) == 0x5eed) out[blockIdx.x] = acc; /* practically never: keeps the reads */
}

extern "C" cudaError_t sd_cu_read(cudaStream_t stream, void *out, const void *in, size_t bytes, int sms)
{
    size_t n = bytes / sizeof(uint4);
    if (n == 0) return cudaSuccess;
    read_kernel<<<(unsigned)(sms > 0 ? sms * 8 : 1024), 256, 0, stream>>>((uint4 *)out, (const uint4 *)in, n);
    return cudaGetLastError();
}
