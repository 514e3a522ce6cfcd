/* cuda_common.cuh — PRIVATE to kernels/cuda: the device helpers every
 * kernel file shares — bf16 rounding and conversion, warp and block
 * reductions in a fixed order, grid sizing, and the per-element arithmetic of
 * the ops that fused kernels compose (bias + rounding, SwiGLU, RMSNorm's
 * output, a RoPE pair, KV cache loads and stores), so a fused kernel and the
 * ops one after the other compute the same bits. Header-only (every function
 * inline or static: each translation unit has its own copy). */
#ifndef SD_CUDA_COMMON_CUH
#define SD_CUDA_COMMON_CUH

#include <math.h>
#include <stdint.h>

#include "cuda_kernels.h"

#define FULL_MASK 0xffffffffu

/* ------------------------------------------------------------ helpers */

/* bf16 round-to-nearest-even returned as f32; NaN kept (sd_round_bf16). */
__device__ __forceinline__ float bf16r(float f)
{
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return f;
    u = (u + 0x7fffu + ((u >> 16) & 1u)) & 0xffff0000u;
    return __uint_as_float(u);
}

__device__ __forceinline__ float bf16_to_f32(uint16_t h) { return __uint_as_float((uint32_t)h << 16); }

/* Butterfly sum: every lane ends with the same value (a+b == b+a). */
__device__ __forceinline__ float warp_sum(float v)
{
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(FULL_MASK, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v)
{
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(FULL_MASK, v, o));
    return v;
}

/* Sum (is_max == 0) or max over the block; sh holds 32 floats. The order is
 * fixed by blockDim.x. All threads must call it; returns to all. */
static __device__ float block_reduce(float v, float *sh, int is_max)
{
    int lane = threadIdx.x & 31, w = threadIdx.x >> 5, nw = (blockDim.x + 31) >> 5;
    v = is_max ? warp_max(v) : warp_sum(v);
    if (lane == 0) sh[w] = v;
    __syncthreads();
    if (w == 0) {
        float id = is_max ? -INFINITY : 0.0f;
        v = lane < nw ? sh[lane] : id;
        v = is_max ? warp_max(v) : warp_sum(v);
        if (lane == 0) sh[0] = v;
    }
    __syncthreads();
    float r = sh[0];
    __syncthreads();
    return r;
}

static inline int grid_for(size_t n, int threads)
{
    size_t b = (n + (size_t)threads - 1) / (size_t)threads;
    return b > 65535u * 16u ? 65535 * 16 : (int)(b ? b : 1);
}

/* CPU reference: sd_round_bf16 (backend.h); NaN becomes a quiet bf16 NaN
 * (truncating its low mantissa bits could give inf). src, dst: [n] */
__device__ __forceinline__ uint16_t bf16_bits(float f)
{
    return isnan(f) ? (uint16_t)0x7fc0u : (uint16_t)(__float_as_uint(bf16r(f)) >> 16);
}

/* The epilogue of a matmul element (CPU reference: mm_task() in
 * cpu_backend.c): + bias[n] when there is one, rounded to bf16 when bf16. */
__device__ __forceinline__ float bias_round1(float y, const float *bias, int n, int bf16)
{
    float v = bias ? __fadd_rn(y, bias[n]) : y;
    return bf16 ? bf16r(v) : v;
}

/* silu(g) * u with the CPU's rounding points (silu_range() in cpu_backend.c). */
__device__ __forceinline__ float silu_mul1(float g, float u, int bf16)
{
    float s = __fdiv_rn(g, __fadd_rn(1.0f, expf(-g)));
    return bf16 ? bf16r(__fmul_rn(bf16r(s), u)) : __fmul_rn(s, u);
}

/* One element of an RMSNorm row: v * inv * w, rounded as rmsnorm_rows(). */
__device__ __forceinline__ float rms_out(float v, float inv, float w, int bf16)
{
    return bf16 ? bf16r(__fmul_rn(w, bf16r(__fmul_rn(v, inv)))) : __fmul_rn(__fmul_rn(v, inv), w);
}

/* Threads of a row's block: fixed by D, so the order of its sum is too. */
static inline int rms_threads(int D)
{
    int threads = (D + 3) / 4;
    return threads >= 1024 ? 1024 : (threads + 31) / 32 * 32;
}

/* One rotated pair of RoPE (cpu_rope()): (a, b) by (c, s). */
__device__ __forceinline__ void rope_pair(float a, float b, float c, float s, int bf16, float *lo, float *hi)
{
    if (bf16) {
        *lo = bf16r(bf16r(__fmul_rn(a, c)) + bf16r(__fmul_rn(-b, s)));
        *hi = bf16r(bf16r(__fmul_rn(b, c)) + bf16r(__fmul_rn(a, s)));
    } else {
        *lo = __fsub_rn(__fmul_rn(a, c), __fmul_rn(b, s));
        *hi = __fadd_rn(__fmul_rn(b, c), __fmul_rn(a, s));
    }
}

/* A KV cache element, f32 or bf16 (as the CPU backend: stored rounded to
 * the nearest bf16, read back exactly). */
__device__ __forceinline__ float kv_ld(const float *p) { return *p; }
__device__ __forceinline__ float kv_ld(const uint16_t *p) { return bf16_to_f32(*p); }
__device__ __forceinline__ void kv_st(float *p, float x) { *p = x; }
__device__ __forceinline__ void kv_st(uint16_t *p, float x)
{
    *p = isnan(x) ? (uint16_t)0x7fc0u : (uint16_t)(__float_as_uint(bf16r(x)) >> 16);
}

#endif
