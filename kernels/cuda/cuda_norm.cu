/* cuda_norm.cu — the kernels around the matmuls of a layer: RMSNorm (and
 * the fused residual add + RMSNorm), embedding lookup, RoPE, the KV cache
 * write, and q/k-norm + RoPE + KV write fused in one launch. CPU references
 * are named above each kernel (kernels/cpu/cpu_backend.c, cpu_elem.c);
 * bf16 rounding points as there, f32 accumulation, reductions in an order
 * fixed by the row's length.
 *
 * Threading: launchers only enqueue on the caller's stream. */
#include <math.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

/* ------------------------------------------------------------ rmsnorm */

/* CPU reference: rmsnorm_rows() in cpu_backend.c.
 * x, y: [T, D] (y may equal x), w: [D] f32. One block per row. Each thread
 * reads only the elements it later writes, so in place is safe. */

__global__ void rmsnorm_kernel(float *y, const float *x, const float *w, int D, float eps, int bf16, uint16_t *ybf)
{
    __shared__ float sh[32];
    const float *xr = x + (size_t)blockIdx.x * D;
    float *yr = y + (size_t)blockIdx.x * D;
    float ss = 0.0f;
    for (int d = threadIdx.x; d < D; d += blockDim.x) ss = fmaf(xr[d], xr[d], ss);
    ss = block_reduce(ss, sh, 0);
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
    for (int d = threadIdx.x; d < D; d += blockDim.x) {
        float v = xr[d];
        float o = rms_out(v, inv, w[d], bf16);
        yr[d] = o;
        if (ybf) ybf[(size_t)blockIdx.x * D + d] = bf16_bits(o);
    }
}

extern "C" cudaError_t sd_cu_rmsnorm(cudaStream_t stream, float *y, const float *x, const float *w, int T, int D,
                                     float eps, int bf16, uint16_t *ybf)
{
    /* fixed by D: order independent of T. Four elements a thread at most: a row is one block, and a
     * decode step's single row waits on each thread's serial loads (profiled: 256 threads took 15 us
     * for D = 4096 on an H200, a tenth of the layer) */
    int threads = rms_threads(D);
    if (T <= 0) return cudaSuccess;
    rmsnorm_kernel<<<T, threads, 0, stream>>>(y, x, w, D, eps, bf16, ybf);
    return cudaGetLastError();
}

/* bias_round_kernel's residual add (y = bias_round1(y), res += y rounded),
 * then rmsnorm_kernel over each new row of res into yn (and ybf): a block a
 * row with rms_threads(N) threads, each reading the elements it wrote, so
 * the values and the sums of the two kernels one after the other. */
__global__ void residual_norm_kernel(float *y, const float *bias, float *res, int N, int bf16, const float *w,
                                     float eps, float *yn, uint16_t *ybf)
{
    __shared__ float sh[32];
    size_t row = (size_t)blockIdx.x * N;
    float ss = 0.0f;
    for (int d = threadIdx.x; d < N; d += blockDim.x) {
        float v = bias_round1(y[row + d], bias, d, bf16), r = __fadd_rn(res[row + d], v);
        r = bf16 ? bf16r(r) : r;
        y[row + d] = v;
        res[row + d] = r;
        ss = fmaf(r, r, ss);
    }
    ss = block_reduce(ss, sh, 0);
    float inv = 1.0f / sqrtf(ss / (float)N + eps);
    for (int d = threadIdx.x; d < N; d += blockDim.x) {
        float o = rms_out(res[row + d], inv, w[d], bf16);
        yn[row + d] = o;
        if (ybf) ybf[row + d] = bf16_bits(o);
    }
}

extern "C" cudaError_t sd_cu_residual_norm(cudaStream_t stream, float *y, const float *bias, float *res, int T, int N,
                                           int bf16, const float *w, float eps, float *yn, uint16_t *ybf)
{
    if (T <= 0) return cudaSuccess;
    residual_norm_kernel<<<T, rms_threads(N), 0, stream>>>(y, bias, res, N, bf16, w, eps, yn, ybf);
    return cudaGetLastError();
}

/* -------------------------------------------------------------- embed */

/* CPU reference: cpu_embed(). y: [T, C], E: [V, C] bf16, ids: [T] */
__global__ void embed_kernel(float *y, const uint16_t *E, const int32_t *ids, int C)
{
    const uint16_t *row = E + (size_t)ids[blockIdx.x] * C;
    float *yr = y + (size_t)blockIdx.x * C;
    for (int d = threadIdx.x; d < C; d += blockDim.x) yr[d] = bf16_to_f32(row[d]);
}

extern "C" cudaError_t sd_cu_embed(cudaStream_t stream, float *y, const uint16_t *E, const int32_t *ids, int T, int C)
{
    if (T <= 0) return cudaSuccess;
    embed_kernel<<<T, 256, 0, stream>>>(y, E, ids, C);
    return cudaGetLastError();
}

/* --------------------------------------------------------------- rope */

/* CPU reference: cpu_rope(). x: [T, nh, hd] in place, cs/sn: [T, hd/2].
 * One thread per (t, h, i < hd/2) pair of rotated elements. */

__global__ void rope_kernel(float *x, const float *cs, const float *sn, int T, int nh, int hd, int bf16)
{
    int half = hd / 2;
    size_t n = (size_t)T * nh * half;
    for (size_t idx = blockIdx.x * (size_t)blockDim.x + threadIdx.x; idx < n; idx += (size_t)gridDim.x * blockDim.x) {
        int i = (int)(idx % half);
        size_t th = idx / half; /* t * nh + h */
        size_t t = th / nh;
        float *v = x + th * hd;
        rope_pair(v[i], v[i + half], cs[t * half + i], sn[t * half + i], bf16, &v[i], &v[i + half]);
    }
}

extern "C" cudaError_t sd_cu_rope(cudaStream_t stream, float *x, const float *cs, const float *sn, int T, int nh,
                                  int hd, int bf16)
{
    size_t n = (size_t)T * nh * (hd / 2);
    if (n == 0) return cudaSuccess;
    rope_kernel<<<grid_for(n, 256), 256, 0, stream>>>(x, cs, sn, T, nh, hd, bf16);
    return cudaGetLastError();
}

/* ----------------------------------------------------------- kv_write */

/* CPU reference: cpu_kv_write(). k, v: [T, kv_dim]; kc, vc: [slots, kv_dim] */
template <typename KV>
__global__ void kv_write_kernel(KV *kc, KV *vc, const float *k, const float *v, const int32_t *slots, int T, int kv_dim)
{
    size_t n = (size_t)T * kv_dim;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        size_t t = i / kv_dim, d = i % kv_dim;
        size_t off = (size_t)slots[t] * kv_dim + d;
        kv_st(kc + off, k[i]);
        kv_st(vc + off, v[i]);
    }
}

extern "C" cudaError_t sd_cu_kv_write(cudaStream_t stream, void *kc, void *vc, const float *k, const float *v,
                                      const int32_t *slots, int T, int kv_dim, int kv_bf16)
{
    size_t n = (size_t)T * kv_dim;
    if (n == 0) return cudaSuccess;
    if (kv_bf16)
        kv_write_kernel<<<grid_for(n, 256), 256, 0, stream>>>((uint16_t *)kc, (uint16_t *)vc, k, v, slots, T, kv_dim);
    else kv_write_kernel<<<grid_for(n, 256), 256, 0, stream>>>((float *)kc, (float *)vc, k, v, slots, T, kv_dim);
    return cudaGetLastError();
}

/* rmsnorm_kernel (per head, when a norm is given), rope_kernel and
 * kv_write_kernel in one launch, with their arithmetic: block (t, h) takes
 * head h of row t — the q heads, then the k heads (written to the cache
 * too), then the v heads (copied to the cache); the block has the rmsnorm's
 * threads for D = hd, so its sum runs in the same order. */
template <typename KV> __global__ void qk_rope_kv_kernel(sd_cu_qkrk a, KV *kc, KV *vc)
{
    __shared__ float sh[32];
    __shared__ float xs[SD_CU_MAX_HEAD_DIM];
    int t = blockIdx.x, h = blockIdx.y, hd = a.hd, half = hd / 2, tid = threadIdx.x, kvd = a.nkv * hd;
    int kind = h < a.nh ? 0 : h < a.nh + a.nkv ? 1 : 2, hh = kind == 0 ? h : kind == 1 ? h - a.nh : h - a.nh - a.nkv;
    size_t cache = (size_t)a.slots[t] * kvd + (size_t)hh * hd;
    if (kind == 2) {
        const float *v = a.v + (size_t)t * kvd + (size_t)hh * hd;
        for (int d = tid; d < hd; d += blockDim.x) kv_st(vc + cache + d, v[d]);
        return;
    }
    float *x = kind == 0 ? a.q + ((size_t)t * a.nh + hh) * hd : a.k + (size_t)t * kvd + (size_t)hh * hd;
    const float *w = kind == 0 ? a.qn : a.kn;
    if (w) {
        float ss = 0.0f;
        for (int d = tid; d < hd; d += blockDim.x) ss = fmaf(x[d], x[d], ss);
        ss = block_reduce(ss, sh, 0);
        float inv = 1.0f / sqrtf(ss / (float)hd + a.eps);
        for (int d = tid; d < hd; d += blockDim.x) xs[d] = rms_out(x[d], inv, w[d], a.bf16);
    } else {
        for (int d = tid; d < hd; d += blockDim.x) xs[d] = x[d];
    }
    __syncthreads();
    for (int i = tid; i < half; i += blockDim.x) {
        float lo, hi;
        rope_pair(xs[i], xs[i + half], a.cs[(size_t)t * half + i], a.sn[(size_t)t * half + i], a.bf16, &lo, &hi);
        x[i] = lo;
        x[i + half] = hi;
        if (kind == 1) {
            kv_st(kc + cache + i, lo);
            kv_st(kc + cache + i + half, hi);
        }
    }
}

extern "C" cudaError_t sd_cu_qk_rope_kv(cudaStream_t stream, const sd_cu_qkrk *a, void *kc, void *vc, int kv_bf16)
{
    if (a->hd < 2 || a->hd % 2 || a->hd > SD_CU_MAX_HEAD_DIM || a->nh < 1 || a->nkv < 1) return cudaErrorInvalidValue;
    if (a->T <= 0) return cudaSuccess;
    dim3 grid((unsigned)a->T, (unsigned)(a->nh + 2 * a->nkv));
    int threads = rms_threads(a->hd);
    if (kv_bf16) qk_rope_kv_kernel<<<grid, threads, 0, stream>>>(*a, (uint16_t *)kc, (uint16_t *)vc);
    else qk_rope_kv_kernel<<<grid, threads, 0, stream>>>(*a, (float *)kc, (float *)vc);
    return cudaGetLastError();
}
