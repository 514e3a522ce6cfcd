/* cuda_gemm.cu — the matmul kernels of the CUDA backend and their
 * launchers: bf16 conversion of activations, the matmul epilogue (bias,
 * rounding, fused residual add), the deterministic GEMM (the batch-invariant
 * matmul), the tensor-core GEMM, the GEMV for decode rows and the epilogue of
 * a packed cuBLAS GEMM. CPU references are named above each kernel
 * (kernels/cpu/cpu_backend.c, cpu_dot.c). Every reduction runs in an order
 * fixed by K and the launch shape chosen from it, never by T; the GEMV's
 * order is not the tensor-core kernel's, so the backend uses it only outside
 * batch-invariant mode.
 *
 * Threading: launchers only enqueue on the caller's stream. */
#include <math.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

/* ---------------------------------------------------------- conversion */

__global__ void f32_to_bf16_kernel(uint16_t *dst, const float *src, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x)
        dst[i] = bf16_bits(src[i]);
}

extern "C" cudaError_t sd_cu_f32_to_bf16(cudaStream_t stream, uint16_t *dst, const float *src, size_t n)
{
    f32_to_bf16_kernel<<<grid_for(n, 256), 256, 0, stream>>>(dst, src, n);
    return cudaGetLastError();
}

/* CPU reference: the epilogue of mm_task() in cpu_backend.c, then (res not
 * NULL) add_range(): res += y, the same two roundings as the matmul and add
 * ops one after the other. y, res: [T, N], bias: [N] or NULL */

__global__ void bias_round_kernel(float *y, const float *bias, float *res, int T, int N, int bf16)
{
    size_t n = (size_t)T * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = bias_round1(y[i], bias, (int)(i % N), bf16);
        y[i] = v;
        if (res) {
            float r = __fadd_rn(res[i], v);
            res[i] = bf16 ? bf16r(r) : r;
        }
    }
}

extern "C" cudaError_t sd_cu_bias_round(cudaStream_t stream, float *y, const float *bias, float *res, int T, int N,
                                        int bf16)
{
    bias_round_kernel<<<grid_for((size_t)T * N, 256), 256, 0, stream>>>(y, bias, res, T, N, bf16);
    return cudaGetLastError();
}

/* -------------------------------------------------------------- GEMM */

#define GEMM_WARPS 8 /* output features per block (one warp each) */
#define GEMM_TOK 4   /* tokens per block; a warp reuses its W chunk for them */

/* Loads 8 consecutive elements; vec selects 16-byte loads (same values). */
__device__ __forceinline__ void load8_bf16(const uint16_t *p, float *f, int vec)
{
    if (vec) {
        uint4 u = *(const uint4 *)p;
        uint32_t w[4] = {u.x, u.y, u.z, u.w};
        for (int i = 0; i < 4; i++) {
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    } else {
        for (int i = 0; i < 8; i++) f[i] = bf16_to_f32(p[i]);
    }
}

__device__ __forceinline__ void load8_f32(const float *p, float *f, int vec)
{
    if (vec) {
        float4 a = *(const float4 *)p, b = *(const float4 *)(p + 4);
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w;
        f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    } else {
        for (int i = 0; i < 8; i++) f[i] = p[i];
    }
}

/* CPU reference: mm_task() / sd_dot_tile_bf16() in kernels/cpu.
 * y: [T, N], x: [T, K], w: [N, K] bf16, bias: [N] or NULL.
 * Grid (ceil(T/GEMM_TOK), ceil(N/GEMM_WARPS)), GEMM_WARPS warps. Warp w owns
 * feature n; lane l accumulates the 8-element chunks l, l+32, l+64, ... of
 * the row in order (fma), then lane l < K%8 adds tail element K8+l, then a
 * butterfly warp sum. That order depends on K alone: batch-invariant. */
__global__ void gemm_bf16_kernel(float *y, const float *x, const uint16_t *w, const float *bias, int T, int N, int K,
                                 int bf16, int vec)
{
    int lane = threadIdx.x & 31;
    int n = blockIdx.y * GEMM_WARPS + (threadIdx.x >> 5);
    int t0 = blockIdx.x * GEMM_TOK;
    if (n >= N) return; /* no block-wide barrier below */
    int nt = min(GEMM_TOK, T - t0);
    const uint16_t *wr = w + (size_t)n * K;
    float acc[GEMM_TOK] = {0.0f};
    int nchunk = K / 8, k8 = nchunk * 8;
    for (int c = lane; c < nchunk; c += 32) {
        float wf[8];
        load8_bf16(wr + (size_t)c * 8, wf, vec);
#pragma unroll
        for (int t = 0; t < GEMM_TOK; t++) {
            if (t >= nt) break;
            float xf[8];
            load8_f32(x + (size_t)(t0 + t) * K + (size_t)c * 8, xf, vec);
            for (int i = 0; i < 8; i++) acc[t] = fmaf(wf[i], xf[i], acc[t]);
        }
    }
    if (k8 + lane < K) {
        float wv = bf16_to_f32(wr[k8 + lane]);
#pragma unroll
        for (int t = 0; t < GEMM_TOK; t++)
            if (t < nt) acc[t] = fmaf(wv, x[(size_t)(t0 + t) * K + k8 + lane], acc[t]);
    }
#pragma unroll
    for (int t = 0; t < GEMM_TOK; t++) {
        float s = warp_sum(acc[t]);
        if (lane == 0 && t < nt) {
            float v = bias ? __fadd_rn(s, bias[n]) : s;
            y[(size_t)(t0 + t) * N + n] = bf16 ? bf16r(v) : v;
        }
    }
}

extern "C" cudaError_t sd_cu_gemm_bf16(cudaStream_t stream, float *y, const float *x, const uint16_t *w,
                                       const float *bias, int T, int N, int K, int bf16)
{
    int vec = K % 8 == 0 && ((uintptr_t)x & 15u) == 0 && ((uintptr_t)w & 15u) == 0;
    dim3 grid((unsigned)((T + GEMM_TOK - 1) / GEMM_TOK), (unsigned)((N + GEMM_WARPS - 1) / GEMM_WARPS));
    if (grid.y > 65535u) return cudaErrorInvalidConfiguration;
    gemm_bf16_kernel<<<grid, GEMM_WARPS * 32, 0, stream>>>(y, x, w, bias, T, N, K, bf16, vec);
    return cudaGetLastError();
}

/* Batch-invariant matmul on tensor cores (sm_80 and later), for bf16
 * activations: y[T, N] = x[T, K] · W[N, K]^T for up to three weights that
 * share x (q/k/v; gate/up), then per output v = y (+ bias), rounded to bf16,
 * and (res not NULL) res = round(res + v) — the epilogue of gemm_cublas and
 * the add op, fused. A block owns 16 output features of one weight (an m16
 * tile of mma.m16n8k16, W's rows as A, x's rows as the columns of B) and
 * every token, 8 at a time (n8 tiles, up to TC_NT of them per read of its
 * weights: a span of up to 64 positions reads the weights once). Its 8 warps
 * split K in chunks of 32 (warp w: chunks w, w + 8, ...; TC_UNROLL chunks'
 * weights loaded, 16 bytes a lane, before any is used). Inside a chunk, lane
 * (g, t) holds W's rows g and g + 8 at k = 8t .. 8t + 7 and x's token g at
 * the same k; a chunk is two mma steps whose logical k order is a fixed
 * permutation of the physical one, the same for A and B, so the sum is
 * unchanged. Per output, the order of the reduction is fixed by K alone:
 * each warp's chunks in ascending order, then the warps 0..7 in order — never
 * by T (a token's column of B does not enter another's sums; missing tokens
 * are zeros): batch-invariant, and a weight's result the same alone or in a
 * group. x must hold bf16 values (bf16 activations): it is read as f32 and
 * packed to bf16 without loss. */
#define TC_WARPS 8
#define TC_ROWS 16
#define TC_KC 32
#define TC_UNROLL 4
#define TC_NT 8

typedef struct tc_job {
    const uint16_t *w[3];
    const float *bias[3];
    float *y[3];
    int N[3];
    int first[4]; /* first block of each weight; first[n] = blocks in all */
    int n;
    float *res;
} tc_job;

/* job from mm, each weight's rows in units of `unit` rows (first[]); false
 * when a weight has no rows or is not 16-byte aligned. */
static bool make_job(const sd_cu_mm_job *mm, int unit, tc_job *job)
{
    *job = tc_job{};
    job->n = mm->n;
    job->res = mm->res;
    for (int i = 0; i < mm->n; i++) {
        if (mm->N[i] <= 0 || ((uintptr_t)mm->w[i] & 15u) != 0) return false;
        job->w[i] = mm->w[i], job->bias[i] = mm->bias[i], job->y[i] = mm->y[i], job->N[i] = mm->N[i];
        job->first[i + 1] = job->first[i] + (mm->N[i] + unit - 1) / unit;
    }
    return true;
}

/* Two values as a bf16 pair (lower half first), NaN as f32_to_bf16_kernel. */
__device__ __forceinline__ uint32_t bf16_pair(float lo, float hi)
{
    uint32_t a = isnan(lo) ? 0x7fc0u : __float_as_uint(bf16r(lo)) >> 16;
    uint32_t b = isnan(hi) ? 0x7fc0u : __float_as_uint(bf16r(hi)) >> 16;
    return a | (b << 16);
}

/* c += A · B, one m16n8k16 step, f32 accumulation. */
__device__ __forceinline__ void mma_16816(float *c, uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                          uint32_t b1)
{
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap(); /* never launched: sd_cu_gemm_tc_supported() said no */
#endif
}

/* One read of the block's weights for the tokens [tg, tg + 8 nt): each
 * warp's partial sums into acc[nt][4] (lane (g, t): rows g, g + 8 of the
 * tile, tokens 2t, 2t + 1 of each n8 tile). */
__device__ __forceinline__ void tc_sweep(float (*acc)[4], const uint16_t *w0, const uint16_t *w1, const float *x,
                                         int tg, int nt, int T, int K, int warp, int g, int t)
{
    int nchunk = K / TC_KC;
    for (int c0 = warp; c0 < nchunk; c0 += TC_WARPS * TC_UNROLL) {
        uint4 wa[TC_UNROLL], wb[TC_UNROLL];
#pragma unroll
        for (int u = 0; u < TC_UNROLL; u++) {
            int c = c0 + u * TC_WARPS;
            wa[u] = wb[u] = make_uint4(0u, 0u, 0u, 0u);
            if (c < nchunk) {
                wa[u] = __ldg((const uint4 *)(w0 + (size_t)c * TC_KC));
                wb[u] = __ldg((const uint4 *)(w1 + (size_t)c * TC_KC));
            }
        }
#pragma unroll
        for (int u = 0; u < TC_UNROLL; u++) {
            int c = c0 + u * TC_WARPS;
            if (c >= nchunk) break; /* the same for the whole warp */
#pragma unroll
            for (int j = 0; j < TC_NT; j++) {
                if (j >= nt) break;
                int tok = tg + j * 8 + g;
                uint32_t xb[4] = {0u, 0u, 0u, 0u};
                if (tok < T) {
                    const float4 *xp = (const float4 *)(x + (size_t)tok * K + (size_t)c * TC_KC + t * 8);
                    float4 p = xp[0], q = xp[1];
                    xb[0] = bf16_pair(p.x, p.y), xb[1] = bf16_pair(p.z, p.w);
                    xb[2] = bf16_pair(q.x, q.y), xb[3] = bf16_pair(q.z, q.w);
                }
                mma_16816(acc[j], wa[u].x, wb[u].x, wa[u].y, wb[u].y, xb[0], xb[1]);
                mma_16816(acc[j], wa[u].z, wb[u].z, wa[u].w, wb[u].w, xb[2], xb[3]);
            }
        }
    }
}

__global__ void __launch_bounds__(TC_WARPS * 32) gemm_tc_kernel(tc_job job, const float *x, int T, int K, int bf16)
{
    __shared__ float red[TC_WARPS][TC_NT * 8][TC_ROWS];
    int b = blockIdx.x, i = 0;
    while (i + 1 < job.n && b >= job.first[i + 1]) i++;
    int N = job.N[i], n0 = (b - job.first[i]) * TC_ROWS;
    int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const uint16_t *w0 = job.w[i] + (size_t)min(n0 + g, N - 1) * K + t * 8; /* rows past N: read, never written */
    const uint16_t *w1 = job.w[i] + (size_t)min(n0 + g + 8, N - 1) * K + t * 8;
    const float *bias = job.bias[i];
    float *y = job.y[i];
    for (int tg = 0; tg < T; tg += TC_NT * 8) {
        int nt = min(TC_NT, (T - tg + 7) / 8);
        float acc[TC_NT][4];
#pragma unroll
        for (int j = 0; j < TC_NT; j++) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;
        tc_sweep(acc, w0, w1, x, tg, nt, T, K, warp, g, t);
#pragma unroll
        for (int j = 0; j < TC_NT; j++) {
            if (j >= nt) break;
            red[warp][j * 8 + 2 * t][g] = acc[j][0];
            red[warp][j * 8 + 2 * t + 1][g] = acc[j][1];
            red[warp][j * 8 + 2 * t][g + 8] = acc[j][2];
            red[warp][j * 8 + 2 * t + 1][g + 8] = acc[j][3];
        }
        __syncthreads();
        for (int o = threadIdx.x; o < nt * 8 * TC_ROWS; o += TC_WARPS * 32) {
            int tk = o / TC_ROWS, f = o % TC_ROWS, tok = tg + tk, n = n0 + f;
            float v = red[0][tk][f];
            for (int w = 1; w < TC_WARPS; w++) v = __fadd_rn(v, red[w][tk][f]);
            if (tok >= T || n >= N) continue;
            if (bias) v = __fadd_rn(v, bias[n]);
            if (bf16) v = bf16r(v);
            size_t yi = (size_t)tok * N + n;
            y[yi] = v;
            if (job.res) {
                float r = __fadd_rn(job.res[yi], v);
                job.res[yi] = bf16 ? bf16r(r) : r;
            }
        }
        __syncthreads();
    }
}

extern "C" int sd_cu_gemm_tc_supported(int device)
{
    int major = 0;
    cudaFuncAttributes fa;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess ||
        cudaFuncGetAttributes(&fa, gemm_tc_kernel) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return major >= 8 && fa.binaryVersion >= 80;
}

extern "C" cudaError_t sd_cu_gemm_tc(cudaStream_t stream, const sd_cu_mm_job *mm, const float *x, int T, int K,
                                     int bf16)
{
    if (mm->n < 1 || mm->n > 3 || K % TC_KC != 0 || ((uintptr_t)x & 15u) != 0 || (mm->res && mm->n != 1))
        return cudaErrorInvalidValue;
    if (T <= 0) return cudaSuccess;
    tc_job job;
    if (!make_job(mm, TC_ROWS, &job)) return cudaErrorInvalidValue;
    gemm_tc_kernel<<<(unsigned)job.first[mm->n], TC_WARPS * 32, 0, stream>>>(job, x, T, K, bf16);
    return cudaGetLastError();
}

/* ---------------------------------------------------------------- GEMV */

/* A matmul for decode steps and verify spans (T <= 8 rows) with bf16
 * activations, in place of cuBLAS + the bias/rounding kernel (opt-in,
 * SD_CUDA_GEMV=1): at such T a matmul is a read of the weights, and cuBLAS's
 * kernels read an 8B model's at 1.3-3.5 TB/s of an H200's 4.5, plus split-K
 * reduce and epilogue launches. As written it is slower than cuBLAS on an
 * H200 but at T = 2 (7.48 against 6.89 ms a Qwen3-8B decode step); a
 * likely cause, not yet profiled: about 8 warps an SM for a 4096-row
 * weight, 128 bytes in flight a lane, too few loads in flight to cover the
 * memory latency. A warp owns GV_ROWS output features of one weight (up to three
 * weights that share x in one launch, as the tensor-core kernel's job); its
 * lanes stride K in 16-byte chunks of every row (GV_UNROLL chunks a row
 * loaded before any is used), each chunk of x loaded once for the rows, f32
 * accumulation in chunk order, then a butterfly over the lanes, then the
 * epilogue of gemm_cublas + bias_round (+ add when res): per output v = y
 * (+ bias), rounded to bf16, res = round(res + v). A token's sums never see
 * another token's values (the same bits at any T <= 8), but their order is
 * not the tensor-core kernel's: not for batch-invariant mode. x must hold
 * bf16 values (as cuBLAS's input, which is x rounded to bf16); K a multiple
 * of 8; x and the weights 16-byte aligned. */
#define GV_WARPS 4
#define GV_ROWS 4
#define GV_UNROLL 2

template <int T>
__global__ void __launch_bounds__(GV_WARPS * 32) gemv_kernel(tc_job job, const float *x, int K, int bf16)
{
    int wid = blockIdx.x * GV_WARPS + (threadIdx.x >> 5), lane = threadIdx.x & 31, i = 0;
    if (wid >= job.first[job.n]) return; /* the whole warp */
    while (i + 1 < job.n && wid >= job.first[i + 1]) i++;
    int N = job.N[i], n0 = (wid - job.first[i]) * GV_ROWS, nc = K / 8;
    const uint16_t *wr[GV_ROWS];
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++) wr[r] = job.w[i] + (size_t)min(n0 + r, N - 1) * K; /* past N: never written */
    float acc[GV_ROWS][T];
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.0f;
    for (int c0 = lane; c0 < nc; c0 += 32 * GV_UNROLL) {
        uint4 wv[GV_UNROLL][GV_ROWS];
#pragma unroll
        for (int u = 0; u < GV_UNROLL; u++)
#pragma unroll
            for (int r = 0; r < GV_ROWS; r++)
                wv[u][r] = c0 + u * 32 < nc ? __ldg((const uint4 *)(wr[r] + (size_t)(c0 + u * 32) * 8))
                                            : make_uint4(0u, 0u, 0u, 0u);
#pragma unroll
        for (int u = 0; u < GV_UNROLL; u++) {
            int c = c0 + u * 32;
            if (c >= nc) break;
            float xf[T][8];
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float4 *xp = (const float4 *)(x + (size_t)t * K + (size_t)c * 8);
                float4 a = __ldg(xp), b = __ldg(xp + 1);
                xf[t][0] = a.x, xf[t][1] = a.y, xf[t][2] = a.z, xf[t][3] = a.w;
                xf[t][4] = b.x, xf[t][5] = b.y, xf[t][6] = b.z, xf[t][7] = b.w;
            }
#pragma unroll
            for (int r = 0; r < GV_ROWS; r++) {
                const uint32_t wp[4] = {wv[u][r].x, wv[u][r].y, wv[u][r].z, wv[u][r].w};
                float wf[8];
#pragma unroll
                for (int e = 0; e < 4; e++) { /* little-endian: the lower half is the earlier value */
                    wf[2 * e] = __uint_as_float(wp[e] << 16);
                    wf[2 * e + 1] = __uint_as_float(wp[e] & 0xffff0000u);
                }
#pragma unroll
                for (int t = 0; t < T; t++)
#pragma unroll
                    for (int e = 0; e < 8; e++) acc[r][t] = fmaf(wf[e], xf[t][e], acc[r][t]);
            }
        }
    }
    float mine = 0.0f; /* lane r * T + t ends with output (n0 + r, token t) */
#pragma unroll
    for (int r = 0; r < GV_ROWS; r++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            float v = warp_sum(acc[r][t]);
            if (lane == r * T + t) mine = v;
        }
    int r = lane / T, t = lane % T, n = n0 + r;
    if (lane >= GV_ROWS * T || n >= N) return;
    const float *bias = job.bias[i];
    float v = bias ? __fadd_rn(mine, bias[n]) : mine;
    if (bf16) v = bf16r(v);
    size_t yi = (size_t)t * N + n;
    job.y[i][yi] = v;
    if (job.res) {
        float rr = __fadd_rn(job.res[yi], v);
        job.res[yi] = bf16 ? bf16r(rr) : rr;
    }
}

template <int T> static void gemv_run(cudaStream_t stream, const tc_job &job, const float *x, int K, int bf16)
{
    unsigned blocks = (unsigned)((job.first[job.n] + GV_WARPS - 1) / GV_WARPS);
    gemv_kernel<T><<<blocks, GV_WARPS * 32, 0, stream>>>(job, x, K, bf16);
}

extern "C" cudaError_t sd_cu_gemv(cudaStream_t stream, const sd_cu_mm_job *mm, const float *x, int T, int K, int bf16)
{
    if (mm->n < 1 || mm->n > 3 || K % 8 != 0 || T > SD_CU_GEMV_MAX_T || ((uintptr_t)x & 15u) != 0 ||
        (mm->res && mm->n != 1))
        return cudaErrorInvalidValue;
    if (T <= 0) return cudaSuccess;
    tc_job job;
    if (!make_job(mm, GV_ROWS, &job)) return cudaErrorInvalidValue; /* first[]: in warps */
    switch (T) {
    case 1: gemv_run<1>(stream, job, x, K, bf16); break;
    case 2: gemv_run<2>(stream, job, x, K, bf16); break;
    case 3: gemv_run<3>(stream, job, x, K, bf16); break;
    case 4: gemv_run<4>(stream, job, x, K, bf16); break;
    case 5: gemv_run<5>(stream, job, x, K, bf16); break;
    case 6: gemv_run<6>(stream, job, x, K, bf16); break;
    case 7: gemv_run<7>(stream, job, x, K, bf16); break;
    default: gemv_run<8>(stream, job, x, K, bf16); break;
    }
    return cudaGetLastError();
}

/* The epilogue of one cuBLAS GEMM over packed weights: the composed ops'
 * roundings (bias_round1 per matmul, then silu_mul1 for a SwiGLU pair), so
 * the same arithmetic on each GEMM result. ycat: [T, Ntot], y[i]: [T, N[i]] */
__global__ void split_epilogue_kernel(sd_cu_split s, int T, int Ntot, int bf16)
{
    size_t n = (size_t)T * (s.swiglu ? s.N[0] : Ntot);
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        if (s.swiglu) {
            size_t t = i / (size_t)s.N[0], j = i % (size_t)s.N[0];
            const float *r = s.ycat + t * (size_t)Ntot;
            float v = silu_mul1(bias_round1(r[j], NULL, 0, bf16), bias_round1(r[s.N[0] + j], NULL, 0, bf16), bf16);
            s.y[0][i] = v;
            if (s.ybf) s.ybf[i] = bf16_bits(v);
            continue;
        }
        size_t t = i / (size_t)Ntot;
        int c = (int)(i % (size_t)Ntot), k = 0;
        while (k + 1 < s.n && c >= s.N[k]) c -= s.N[k++];
        s.y[k][t * (size_t)s.N[k] + c] = bias_round1(s.ycat[i], s.bias[k], c, bf16);
    }
}

extern "C" cudaError_t sd_cu_split_epilogue(cudaStream_t stream, const sd_cu_split *s, int T, int bf16)
{
    int Ntot = 0;
    for (int i = 0; i < s->n; i++) Ntot += s->N[i];
    if (s->n < 1 || s->n > 3 || (s->swiglu && (s->n != 2 || s->N[0] != s->N[1]))) return cudaErrorInvalidValue;
    if (T <= 0) return cudaSuccess;
    size_t n = (size_t)T * (s->swiglu ? s->N[0] : Ntot);
    split_epilogue_kernel<<<grid_for(n, 256), 256, 0, stream>>>(*s, T, Ntot, bf16);
    return cudaGetLastError();
}

/* CPU reference: reduce_rows() in cpu_backend.c, whose tree_sum(lo, hi) is
 * tree_sum(lo, mid) + tree_sum(mid, hi) with mid = lo + (hi - lo) / 2:
 * written out here for each count. parts: [n_parts][T, N], stride T * N */
__device__ __forceinline__ float tree_sum(const float *p, size_t s, int n)
{
#define P(k) p[(size_t)(k)*s]
    switch (n) {
    case 1: return P(0);
    case 2: return P(0) + P(1);
    case 3: return P(0) + (P(1) + P(2));
    case 4: return (P(0) + P(1)) + (P(2) + P(3));
    case 5: return (P(0) + P(1)) + (P(2) + (P(3) + P(4)));
    case 6: return (P(0) + (P(1) + P(2))) + (P(3) + (P(4) + P(5)));
    case 7: return (P(0) + (P(1) + P(2))) + ((P(3) + P(4)) + (P(5) + P(6)));
    default: return ((P(0) + P(1)) + (P(2) + P(3))) + ((P(4) + P(5)) + (P(6) + P(7)));
    }
#undef P
}

__global__ void reduce_parts_kernel(float *y, const float *parts, int n_parts, int T, int N, const float *bias,
                                    int bf16)
{
    size_t n = (size_t)T * N;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        float v = tree_sum(parts + i, n, n_parts);
        y[i] = bias_round1(v, bias, (int)(i % (size_t)N), bf16);
    }
}

extern "C" cudaError_t sd_cu_reduce_parts(cudaStream_t stream, float *y, const float *parts, int n_parts, int T, int N,
                                          const float *bias, int bf16)
{
    if (n_parts < 1 || n_parts > 8) return cudaErrorInvalidValue;
    size_t n = (size_t)T * N;
    if (n == 0) return cudaSuccess;
    reduce_parts_kernel<<<grid_for(n, 256), 256, 0, stream>>>(y, parts, n_parts, T, N, bias, bf16);
    return cudaGetLastError();
}
