/* cuda_attention.cu — attention over the paged KV cache: the one-pass
 * kernel (a block per row and head), the split kernels for long contexts
 * (partial softmax per split, then a combine in split order) and the tiled
 * kernel for prefill chunks. CPU reference: kernels/cpu/cpu_attn.c. The
 * split and combine orders depend on the context length and the launch shape
 * only; the tiled prefill kernel is used outside batch-invariant mode (a row
 * is tiled or not by its sequence's rows in the pass).
 *
 * Threading: launchers only enqueue on the caller's stream. */
#include <math.h>
#include <stdint.h>

#include "cuda_common.cuh"
#include "cuda_kernels.h"

/* ---------------------------------------------------------- attention */

#define ATT_THREADS 128 /* 4 warps; thread d owns out[d] and out[d + 128] */
#define ATT_CHUNK 128   /* positions scored per step of the second pass */

/* q · k_j with lane-strided partial sums and a butterfly (all lanes). */
template <typename KV> __device__ __forceinline__ float att_dot(const float *qs, const KV *kr, int hd, int lane)
{
    float s = 0.0f;
    for (int d = lane; d < hd; d += 32) s = fmaf(qs[d], kv_ld(kr + d), s);
    return warp_sum(s);
}

__device__ __forceinline__ size_t att_slot(const int32_t *tab, int bs, int j)
{
    return (size_t)tab[j / bs] * bs + j % bs;
}

/* A block's (row, head): its block table, its KV head's K and V (vc may be
 * NULL), and q copied to shared qs (every thread calls it; synchronises). */
template <typename KV>
__device__ __forceinline__ void att_begin(float *qs, const float *q, const KV *kc, const KV *vc, const int32_t *meta,
                                          int T, int nh, int nkv, int hd, const int32_t **tab, const KV **kb,
                                          const KV **vb)
{
    int row = blockIdx.x, h = blockIdx.y;
    *tab = meta + 3 * (size_t)T + meta[T + row];
    size_t head = (size_t)(h / (nh / nkv)) * hd;
    *kb = kc + head;
    *vb = vc ? vc + head : NULL;
    const float *qr = q + ((size_t)row * nh + h) * hd;
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) qs[d] = qr[d];
    __syncthreads();
}

/* One chunk of m positions from j0 of a block's (row, head): scores
 * p_j = exp(s_j - M) into sc (slots into sl), their sum added by thread 0
 * in ascending j, p_j v_j (p_j rounded to bf16 in bf16 mode) accumulated by
 * thread d into acc0 (d) and acc1 (d + ATT_THREADS). */
template <typename KV>
__device__ __forceinline__ void att_chunk(const float *qs, const KV *kb, const KV *vb, const int32_t *tab, size_t kvd,
                                          int bs, int j0, int m, int hd, float scale, float M, int bf16, float *sc,
                                          int *sl, float &sum, float &acc0, float &acc1)
{
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, nw = ATT_THREADS / 32;
    for (int jj = warp; jj < m; jj += nw) {
        size_t slot = att_slot(tab, bs, j0 + jj);
        float s = att_dot(qs, kb + slot * kvd, hd, lane) * scale;
        if (lane == 0) {
            sc[jj] = expf(s - M);
            sl[jj] = (int)slot;
        }
    }
    __syncthreads();
    if (tid == 0)
        for (int jj = 0; jj < m; jj++) sum += sc[jj];
    for (int jj = 0; jj < m; jj++) {
        float p = bf16 ? bf16r(sc[jj]) : sc[jj];
        const KV *vr = vb + (size_t)sl[jj] * kvd;
        if (tid < hd) acc0 = fmaf(p, kv_ld(vr + tid), acc0);
        if (tid + ATT_THREADS < hd) acc1 = fmaf(p, kv_ld(vr + tid + ATT_THREADS), acc1);
    }
    __syncthreads();
}

/* CPU reference: sd_attn_row() in cpu_attn.c (via attn_one() in
 * cpu_backend.c). out, q: [T, nh, hd]; kc, vc: [n_blocks*bs, nkv, hd].
 * Grid (T, nh), one block per (query row, head), so a row's result never
 * depends on the batch. Pass 1 finds the max score; pass 2 recomputes the
 * scores chunk by chunk (same code, same values), exponentiates them into
 * shared memory and accumulates p_j * v_j in ascending j. The softmax sum is
 * accumulated by thread 0 in ascending j; out = acc / sum. bf16: p_j rounded
 * to bf16 before use, sum of the unrounded p_j, result rounded (as the CPU).
 * Recomputing scores costs a second read of K but needs no scratch sized by
 * the context and keeps bf16 rounding relative to the global max exact. */
template <typename KV>
__global__ void __launch_bounds__(ATT_THREADS)
    attention_kernel(float *out, const float *q, const KV *kc, const KV *vc, const int32_t *meta, int T, int nh,
                     int nkv, int hd, int bs, float scale, int bf16)
{
    __shared__ float qs[SD_CU_MAX_HEAD_DIM];
    __shared__ float sc[ATT_CHUNK];
    __shared__ int sl[ATT_CHUNK];
    __shared__ float red[32];
    int row = blockIdx.x, h = blockIdx.y, tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
    int nw = ATT_THREADS / 32;
    int n = meta[row] + 1;
    size_t kvd = (size_t)nkv * hd;
    const int32_t *tab;
    const KV *kb, *vb;
    att_begin(qs, q, kc, vc, meta, T, nh, nkv, hd, &tab, &kb, &vb);

    float mx = -INFINITY;
    for (int j = warp; j < n; j += nw) mx = fmaxf(mx, att_dot(qs, kb + att_slot(tab, bs, j) * kvd, hd, lane) * scale);
    mx = block_reduce(mx, red, 1);

    float acc0 = 0.0f, acc1 = 0.0f, sum = 0.0f;
    for (int j0 = 0; j0 < n; j0 += ATT_CHUNK)
        att_chunk(qs, kb, vb, tab, kvd, bs, j0, min(ATT_CHUNK, n - j0), hd, scale, mx, bf16, sc, sl, sum, acc0, acc1);
    if (tid == 0) red[0] = sum;
    __syncthreads();
    sum = red[0];
    float *orow = out + ((size_t)row * nh + h) * hd;
    if (tid < hd) orow[tid] = bf16 ? bf16r(acc0 / sum) : acc0 / sum;
    if (tid + ATT_THREADS < hd) orow[tid + ATT_THREADS] = bf16 ? bf16r(acc1 / sum) : acc1 / sum;
}

extern "C" cudaError_t sd_cu_attention(cudaStream_t stream, float *out, const float *q, const void *kc, const void *vc,
                                       const int32_t *meta, int T, int nh, int nkv, int hd, int bs, float scale,
                                       int bf16, int kv_bf16)
{
    if (hd > SD_CU_MAX_HEAD_DIM || nh > 65535) return cudaErrorInvalidValue;
    if (T <= 0) return cudaSuccess;
    dim3 grid((unsigned)T, (unsigned)nh);
    if (kv_bf16)
        attention_kernel<<<grid, ATT_THREADS, 0, stream>>>(out, q, (const uint16_t *)kc, (const uint16_t *)vc, meta, T,
                                                           nh, nkv, hd, bs, scale, bf16);
    else
        attention_kernel<<<grid, ATT_THREADS, 0, stream>>>(out, q, (const float *)kc, (const float *)vc, meta, T, nh,
                                                           nkv, hd, bs, scale, bf16);
    return cudaGetLastError();
}

/* Split attention ("flash-decoding"). Grid (T, n_kv_heads, S splits): a
 * block takes one query row and one KV head with all G = nh / nkv query
 * heads that share it (K and V read once for the group), and a share of the
 * positions: chunks of CH positions, block z taking chunks z, z + S, ...
 * A position's K (and V) row of hd values is read by LP = hd / 8 lanes at 8
 * values (16 bytes of bf16) each, 32 / LP positions a warp, AS_UNROLL
 * positions per thread loaded before any is used, so that many loads are in
 * flight (the previous kernels read one position per warp at a time, 2
 * bytes a lane: 67 GB/s at an 8k context on an H200). Three passes with
 * attention_kernel's rounding points: (1) each block's maximum score per
 * head; (2) with the row's maximum M over the blocks, p_j = exp(s_j - M)
 * (rounded to bf16 for PV in bf16 mode, as the CPU), each block's sum of
 * the unrounded p_j and its p_j v_j; (3) the blocks' sums and accumulators
 * added in z order, out = acc / sum. Only the blocks holding positions of
 * the row (the first ceil(n / CH)) run and are read: at a short context a
 * row's maxima, sums and accumulators are one block's, and where that one
 * is all, pass 2 divides and writes out itself (the combine's very
 * operations: 0 + x is x here). Every sum runs in an order fixed by the
 * row's context length, hd and G (lane order within a position, positions
 * in loop order per thread, a butterfly over a warp's positions, warps in
 * order, blocks in order), never by T: batch-invariant; the grid depends on
 * T and the heads only (CUDA graphs replay it at any context). Shapes it does
 * not cover (hd not a power of two in 32..256, G > 8) run attention_kernel.
 * part: [T, nh, S] maxima, [T, nh, S] sums, [T, nh, S, hd] accumulators. */
#define AS_THREADS 256
#define AS_WARPS (AS_THREADS / 32)
#define AS_SPLITS_MAX 256
#define AS_UNROLL 4
#define AS_GMAX 8

extern "C" size_t sd_cu_attention_split_floats(int T, int nh, int hd, int splits)
{
    return (size_t)T * nh * splits * ((size_t)hd + 2);
}

/* Eight consecutive KV values: one 16-byte load (bf16) or two (f32). */
template <typename KV> struct kv8;
template <> struct kv8<uint16_t> {
    uint4 r;
    __device__ __forceinline__ void load(const uint16_t *p) { r = __ldg((const uint4 *)p); }
    __device__ __forceinline__ void zero() { r = make_uint4(0u, 0u, 0u, 0u); }
    __device__ __forceinline__ void get(float *f) const
    {
        const uint32_t w[4] = {r.x, r.y, r.z, r.w};
#pragma unroll
        for (int i = 0; i < 4; i++) { /* little-endian: the lower half is the earlier value */
            f[2 * i] = __uint_as_float(w[i] << 16);
            f[2 * i + 1] = __uint_as_float(w[i] & 0xffff0000u);
        }
    }
};
template <> struct kv8<float> {
    float4 a, b;
    __device__ __forceinline__ void load(const float *p)
    {
        a = __ldg((const float4 *)p);
        b = __ldg((const float4 *)p + 1);
    }
    __device__ __forceinline__ void zero() { a = b = make_float4(0.0f, 0.0f, 0.0f, 0.0f); }
    __device__ __forceinline__ void get(float *f) const
    {
        f[0] = a.x, f[1] = a.y, f[2] = a.z, f[3] = a.w, f[4] = b.x, f[5] = b.y, f[6] = b.z, f[7] = b.w;
    }
};

/* q · k over a position's LP lanes (8 values each, then a butterfly within
 * the LP-lane group), times scale: every lane of the group gets it. */
template <int LP> __device__ __forceinline__ float as_score(const float *qg, const float *kf, float scale)
{
    float s = 0.0f;
#pragma unroll
    for (int e = 0; e < 8; e++) s = fmaf(qg[e], kf[e], s);
#pragma unroll
    for (int o = LP / 2; o > 0; o >>= 1) s += __shfl_xor_sync(FULL_MASK, s, o);
    return s * scale;
}

/* The splits of a row holding positions: the first ceil(n / CH), at most S.
 * Blocks from there on hold none and write nothing; the PV pass and the
 * combine read the first ones only (the rest would add identities: -inf to
 * a maximum, zeros to sums that start from +0.0 — the same bits). */
__device__ __forceinline__ int as_used(int n, int ch, int S) { return min(S, (n + ch - 1) / ch); }

/* A split block's results: each thread's maxima (pass 1) or sums and
 * accumulators (pass 2) combined over the warp's positions (a butterfly
 * over lanes with the same l), then over the warps in order, and written. */
template <int LP, int GM, bool PV>
__device__ __forceinline__ void as_finish(float (&mx)[GM], float (&sum)[GM], float (&acc)[GM][PV ? 8 : 1], float *red,
                                          float (*redg)[AS_GMAX], float *pmax, float *psum, float *pacc, size_t head0,
                                          int z, int G, int hd, float *out, int bf16)
{
    int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, sub = lane / LP, l = lane % LP, S = (int)gridDim.z;
#pragma unroll
    for (int g = 0; g < GM; g++) {
#pragma unroll
        for (int o = LP; o < 32; o <<= 1) {
            if (PV) sum[g] += __shfl_xor_sync(FULL_MASK, sum[g], o);
            else mx[g] = fmaxf(mx[g], __shfl_xor_sync(FULL_MASK, mx[g], o));
#pragma unroll
            for (int e = 0; e < (PV ? 8 : 0); e++) acc[g][e] += __shfl_xor_sync(FULL_MASK, acc[g][e], o);
        }
        if (lane == 0 && g < G) redg[warp][g] = PV ? sum[g] : mx[g];
    }
    if (PV)
        for (int w = 0; w < AS_WARPS; w++) {
            if (warp == w && sub == 0)
#pragma unroll
                for (int g = 0; g < GM; g++)
                    for (int e = 0; e < 8 && g < G; e++) {
                        float *r = &red[g * hd + l * 8 + e];
                        *r = (w ? *r : 0.0f) + acc[g][e];
                    }
            __syncthreads();
        }
    else __syncthreads();
    for (int g = tid; g < G; g += AS_THREADS) {
        float v = redg[0][g];
        for (int w = 1; w < AS_WARPS; w++) v = PV ? v + redg[w][g] : fmaxf(v, redg[w][g]);
        if (out) redg[0][g] = v; /* column g is this thread's alone */
        else if (PV) psum[(head0 + g) * S + z] = v;
        else pmax[(head0 + g) * S + z] = v;
    }
    if (PV && out) { /* the row's only split: the combine's result (0 + sum, 0 + acc: the same values) */
        __syncthreads();
        for (int i = tid; i < G * hd; i += AS_THREADS) {
            float o = red[i] / redg[0][i / hd];
            out[head0 * hd + i] = bf16 ? bf16r(o) : o;
        }
    } else if (PV)
        for (int i = tid; i < G * hd; i += AS_THREADS) pacc[((head0 + i / hd) * S + z) * hd + i % hd] = red[i];
}

/* Pass 1 (PV false) or 2 (PV true) of the split attention, for a (row, KV
 * head, split) block; GM >= G bounds the per-thread arrays. */
template <typename KV, int LP, int GM, bool PV>
__global__ void __launch_bounds__(AS_THREADS)
    att_split_pass(float *part, float *out, const float *q, const KV *kc, const KV *vc, const int32_t *meta, int T,
                   int nh, int nkv, int hd, int bs, float scale, int bf16, int tiled)
{
    if (tiled && meta[2 * T + blockIdx.x] >= 0) return; /* a prefill row: att_tile_kernel's */
    constexpr int PPW = 32 / LP, STEP = AS_WARPS * PPW, CH = STEP * AS_UNROLL;
    __shared__ float qs[AS_GMAX * SD_CU_MAX_HEAD_DIM];
    __shared__ float red[PV ? AS_GMAX * SD_CU_MAX_HEAD_DIM : 1];
    __shared__ float redg[AS_WARPS][AS_GMAX];
    int row = blockIdx.x, kvh = blockIdx.y, z = blockIdx.z, S = (int)gridDim.z, G = nh / nkv, tid = threadIdx.x;
    int lane = tid & 31, warp = tid >> 5, sub = lane / LP, l = lane % LP, n = meta[row] + 1;
    size_t rows = (size_t)T * nh * S, head0 = (size_t)row * nh + (size_t)kvh * G;
    float *pmax = part, *psum = part + rows, *pacc = part + 2 * rows;
    int used = as_used(n, CH, S);
    if (z >= used) return; /* no position of this row here (z * CH >= n) */
    const int32_t *tab = meta + 3 * (size_t)T + meta[T + row];
    for (int i = tid; i < G * hd; i += AS_THREADS) qs[i] = q[head0 * hd + i];
    float M[GM], mx[GM], sum[GM], acc[GM][PV ? 8 : 1];
#pragma unroll
    for (int g = 0; g < GM; g++) {
        M[g] = -INFINITY, mx[g] = -INFINITY, sum[g] = 0.0f;
#pragma unroll
        for (int e = 0; e < (PV ? 8 : 1); e++) acc[g][e] = 0.0f;
        if (PV && g < G) { /* unrolled: eight loads in flight, not one L2 round trip each (max in k order) */
            const float *pm = pmax + (head0 + g) * S;
#pragma unroll 8
            for (int k = 0; k < used; k++) M[g] = fmaxf(M[g], __ldg(pm + k));
        }
    }
    __syncthreads();
    size_t kvd = (size_t)nkv * hd, off = (size_t)kvh * hd + (size_t)l * 8;
    for (int c0 = z * CH; c0 < n; c0 += S * CH) {
        kv8<KV> kr[AS_UNROLL], vr[AS_UNROLL];
#pragma unroll
        for (int u = 0; u < AS_UNROLL; u++) { /* every load of the chunk first */
            int j = c0 + u * STEP + warp * PPW + sub;
            kr[u].zero();
            if (PV) vr[u].zero();
            if (j < n) {
                size_t slot = att_slot(tab, bs, j);
                kr[u].load(kc + slot * kvd + off);
                if (PV) vr[u].load(vc + slot * kvd + off);
            }
        }
#pragma unroll
        for (int u = 0; u < AS_UNROLL; u++) {
            bool ok = c0 + u * STEP + warp * PPW + sub < n; /* the same for a position's LP lanes */
            float kf[8], vf[8];
            kr[u].get(kf);
            if (PV) vr[u].get(vf);
#pragma unroll
            for (int g = 0; g < GM; g++) {
                if (g >= G) break;
                float s = as_score<LP>(qs + g * hd + l * 8, kf, scale);
                if (!ok) continue;
                if (!PV) {
                    mx[g] = fmaxf(mx[g], s);
                    continue;
                }
                float p = expf(s - M[g]), pr = bf16 ? bf16r(p) : p;
                sum[g] += p;
#pragma unroll
                for (int e = 0; e < (PV ? 8 : 1); e++) acc[g][e] = fmaf(pr, vf[e], acc[g][e]);
            }
        }
    }
    as_finish<LP, GM, PV>(mx, sum, acc, red, redg, pmax, psum, pacc, head0, z, G, hd, PV && used == 1 ? out : NULL,
                          bf16);
}

__global__ void __launch_bounds__(ATT_THREADS)
    att_split_combine(float *out, const float *part, const int32_t *meta, int T, int nh, int hd, int bf16, int tiled,
                      int S, int ch)
{
    int row = blockIdx.x, h = blockIdx.y;
    if (tiled && meta[2 * T + row] >= 0) return;
    int used = as_used(meta[row] + 1, ch, S);
    if (used == 1) return; /* the PV pass wrote it */
    size_t base = ((size_t)row * nh + h) * S, rows = (size_t)T * nh * S;
    const float *sums = part + rows, *acc = part + 2 * rows + base * hd;
    float sum = 0.0f;
    /* unrolled so that eight loads are in flight; the sums still run in k order */
#pragma unroll 8
    for (int k = 0; k < used; k++) sum += __ldg(sums + base + k);
    float *orow = out + ((size_t)row * nh + h) * hd;
    for (int d = threadIdx.x; d < hd; d += ATT_THREADS) {
        float a = 0.0f;
#pragma unroll 8
        for (int k = 0; k < used; k++) a += __ldg(acc + (size_t)k * hd + d);
        orow[d] = bf16 ? bf16r(a / sum) : a / sum;
    }
}

typedef sd_cu_att_args att_args;

template <typename KV, int LP, int GM> static void att_split_run(cudaStream_t stream, const att_args &a)
{
    dim3 split((unsigned)a.T, (unsigned)a.nkv, (unsigned)a.splits), rows((unsigned)a.T, (unsigned)a.nh);
    const KV *kc = (const KV *)a.kc, *vc = (const KV *)a.vc;
    const int ch = AS_WARPS * (32 / LP) * AS_UNROLL; /* att_split_pass's CH */
    att_split_pass<KV, LP, GM, false><<<split, AS_THREADS, 0, stream>>>(a.part, a.out, a.q, kc, vc, a.meta, a.T, a.nh,
                                                                        a.nkv, a.hd, a.bs, a.scale, a.bf16, a.tiled);
    att_split_pass<KV, LP, GM, true><<<split, AS_THREADS, 0, stream>>>(a.part, a.out, a.q, kc, vc, a.meta, a.T, a.nh,
                                                                       a.nkv, a.hd, a.bs, a.scale, a.bf16, a.tiled);
    att_split_combine<<<rows, ATT_THREADS, 0, stream>>>(a.out, a.part, a.meta, a.T, a.nh, a.hd, a.bf16, a.tiled,
                                                        a.splits, ch);
}

/* The instance for G (query heads a KV head): GM = 2, 4 or 8 >= G. */
template <typename KV, int LP> static void att_split_g(cudaStream_t stream, const att_args &a)
{
    int G = a.nh / a.nkv;
    if (G <= 2) att_split_run<KV, LP, 2>(stream, a);
    else if (G <= 4) att_split_run<KV, LP, 4>(stream, a);
    else att_split_run<KV, LP, 8>(stream, a);
}

/* The instance for hd (LP = hd / 8 lanes a position); false when none. */
template <typename KV> static bool att_split_launch(cudaStream_t stream, const att_args &a)
{
    if (a.nh / a.nkv > AS_GMAX) return false;
    switch (a.hd) {
    case 32: att_split_g<KV, 4>(stream, a); return true;
    case 64: att_split_g<KV, 8>(stream, a); return true;
    case 128: att_split_g<KV, 16>(stream, a); return true;
    case 256: att_split_g<KV, 32>(stream, a); return true;
    default: return false;
    }
}

/* Tiled attention for the rows of prefill chunks ("flash attention" on the
 * CUDA cores). The split kernels give each row its own blocks, which read
 * the row's whole context: for a chunk of rows of one sequence the same K
 * and V are read (and scored, twice) once per row, so that prefilling 8192
 * tokens of Qwen3-8B's shapes took ~15 s on an H200. Here a block takes a
 * tile of consecutive rows of one sequence and one KV head, with its G query
 * heads: TQ = 32 query vectors (32 / G rows), and walks the positions up to
 * the tile's last in steps of TK = 16, K and V of a step loaded once into
 * shared memory for all of them. Softmax online (running maximum m, sum l,
 * accumulators rescaled by exp(m_old - m_new)); bf16 mode rounds p_j to
 * bf16 before p_j v_j, as the CPU, but relative to the running maximum, not
 * the row's maximum: results differ from the other kernels' in the last
 * bits. Which rows are tiled depends on the sequence's rows in the pass, so
 * this is not batch-invariant: the backend uses it only in the default mode.
 * meta[2T + row]: the row's index among its sequence's rows in the pass when
 * the sequence has enough of them to be tiled, else -1 (the split kernels
 * skip rows with an index when `tiled`). Grid (T, nkv): a block whose row
 * does not start a tile (index not a multiple of 32 / G) leaves. */
#define AT_THREADS 256
#define AT_TQ 32
#define AT_TK 16

/* The tile's online softmax over one step of AT_TK scores per query vector
 * (ps, in place: the scores become p_j, rounded to bf16 in bf16 mode): a
 * warp takes 4 query vectors, 8 lanes each with 2 positions; the running
 * maximum (mrow) and sum of the unrounded p_j (lrow) move on, corr gets the
 * factor exp(m_old - m_new) the accumulators take. Called by every thread. */
__device__ __forceinline__ void at_softmax_step(float (*ps)[AT_TK + 1], float *mrow, float *lrow, float *corr, int nq,
                                                int bf16)
{
    int lane = threadIdx.x & 31, qi = (threadIdx.x >> 5) * 4 + (lane >> 3), j = (lane & 7) * 2;
    float s0 = ps[qi][j], s1 = ps[qi][j + 1], mx = fmaxf(s0, s1);
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(FULL_MASK, mx, o));
    float mo = mrow[qi], mn = fmaxf(mo, mx);
    bool live = qi < nq && mn > -INFINITY;
    float e0 = live ? expf(s0 - mn) : 0.0f, e1 = live ? expf(s1 - mn) : 0.0f, sum = e0 + e1;
#pragma unroll
    for (int o = 1; o < 8; o <<= 1) sum += __shfl_xor_sync(FULL_MASK, sum, o);
    ps[qi][j] = bf16 ? bf16r(e0) : e0, ps[qi][j + 1] = bf16 ? bf16r(e1) : e1;
    __syncwarp();
    if ((lane & 7) == 0) {
        float c = live && mo > -INFINITY ? expf(mo - mn) : 0.0f;
        corr[qi] = c, lrow[qi] = lrow[qi] * c + sum, mrow[qi] = live ? mn : mo;
    }
}

template <typename KV, int HD>
__global__ void __launch_bounds__(AT_THREADS)
    att_tile_kernel(float *out, const float *q, const KV *kc, const KV *vc, const int32_t *meta, int T, int nh, int nkv,
                    int bs, float scale, int bf16)
{
    constexpr int QPT = AT_TQ * HD / AT_THREADS; /* accumulators a thread: query vectors at its d */
    __shared__ float qs[AT_TQ][HD + 1], ks[AT_TK][HD + 1], vs[AT_TK][HD], ps[AT_TQ][AT_TK + 1];
    __shared__ float mrow[AT_TQ], lrow[AT_TQ], corr[AT_TQ];
    __shared__ int qpos[AT_TQ];
    int r0 = blockIdx.x, kvh = blockIdx.y, tid = threadIdx.x, G = nh / nkv, TR = AT_TQ / G;
    int idx = meta[2 * T + r0];
    if (idx < 0 || idx % TR != 0) return;
    int nr = 1; /* the tile's rows: the next rows of the same sequence, up to TR */
    while (nr < TR && r0 + nr < T && meta[2 * T + r0 + nr] == idx + nr) nr++;
    int nq = nr * G;
    const int32_t *tab = meta + 3 * (size_t)T + meta[T + r0];
    size_t kvd = (size_t)nkv * HD;
    for (int i = tid; i < AT_TQ * HD; i += AT_THREADS) {
        int qi = i / HD, d = i % HD;
        qs[qi][d] = qi < nq ? q[((size_t)(r0 + qi / G) * nh + kvh * G + qi % G) * HD + d] : 0.0f;
    }
    if (tid < AT_TQ) {
        qpos[tid] = tid < nq ? meta[r0 + tid / G] : -1;
        mrow[tid] = -INFINITY, lrow[tid] = 0.0f;
    }
    float acc[QPT];
#pragma unroll
    for (int i = 0; i < QPT; i++) acc[i] = 0.0f;
    int last = meta[r0 + nr - 1], d = tid % HD, q0 = (tid / HD) * QPT;
    __syncthreads();
    for (int p0 = 0; p0 <= last; p0 += AT_TK) {
        for (int i = tid; i < AT_TK * HD; i += AT_THREADS) { /* K and V of positions p0 .. p0 + TK */
            int j = i / HD, e = i % HD, p = p0 + j;
            float kv = 0.0f, vv = 0.0f;
            if (p <= last) {
                size_t at = att_slot(tab, bs, p) * kvd + (size_t)kvh * HD + e;
                kv = kv_ld(kc + at), vv = kv_ld(vc + at);
            }
            ks[j][e] = kv, vs[j][e] = vv;
        }
        __syncthreads();
        { /* scores: thread -> (query vector tid / 8, positions 2 (tid % 8), + 1) */
            int qi = tid >> 3, j = (tid & 7) * 2;
            float s0 = 0.0f, s1 = 0.0f;
#pragma unroll 8
            for (int e = 0; e < HD; e++) {
                float x = qs[qi][e];
                s0 = fmaf(x, ks[j][e], s0), s1 = fmaf(x, ks[j + 1][e], s1);
            }
            ps[qi][j] = p0 + j <= qpos[qi] ? s0 * scale : -INFINITY;
            ps[qi][j + 1] = p0 + j + 1 <= qpos[qi] ? s1 * scale : -INFINITY;
        }
        __syncthreads();
        at_softmax_step(ps, mrow, lrow, corr, nq, bf16);
        __syncthreads();
        float v[AT_TK]; /* p_j v_j: thread -> d, query vectors q0 .. q0 + QPT */
#pragma unroll
        for (int j = 0; j < AT_TK; j++) v[j] = vs[j][d];
#pragma unroll
        for (int i = 0; i < QPT; i++) {
            float a = acc[i] * corr[q0 + i];
#pragma unroll
            for (int j = 0; j < AT_TK; j++) a = fmaf(ps[q0 + i][j], v[j], a);
            acc[i] = a;
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < QPT; i++) {
        int qi = q0 + i;
        if (qi >= nq) break;
        float o = acc[i] / lrow[qi];
        out[((size_t)(r0 + qi / G) * nh + kvh * G + qi % G) * HD + d] = bf16 ? bf16r(o) : o;
    }
}

template <typename KV, int HD> static void att_tile_run(cudaStream_t stream, const att_args &a)
{
    att_tile_kernel<KV, HD><<<dim3((unsigned)a.T, (unsigned)a.nkv), AT_THREADS, 0, stream>>>(
        a.out, a.q, (const KV *)a.kc, (const KV *)a.vc, a.meta, a.T, a.nh, a.nkv, a.bs, a.scale, a.bf16);
}

template <typename KV> static void att_tile_launch(cudaStream_t stream, const att_args &a)
{
    if (a.hd == 32) att_tile_run<KV, 32>(stream, a);
    else if (a.hd == 64) att_tile_run<KV, 64>(stream, a);
    else att_tile_run<KV, 128>(stream, a);
}

extern "C" int sd_cu_attention_tile_rows(int nh, int nkv, int hd)
{
    if (nkv <= 0 || nh % nkv != 0 || nh / nkv > AS_GMAX || (hd != 32 && hd != 64 && hd != 128)) return 0;
    return AT_TQ / (nh / nkv);
}

extern "C" cudaError_t sd_cu_attention_split(cudaStream_t stream, const sd_cu_att_args *a)
{
    if (a->hd > SD_CU_MAX_HEAD_DIM || a->nh > 65535 || a->nkv <= 0 || a->nh % a->nkv != 0 || a->splits < 1 ||
        a->splits > AS_SPLITS_MAX)
        return cudaErrorInvalidValue;
    if (a->tiled && !sd_cu_attention_tile_rows(a->nh, a->nkv, a->hd)) return cudaErrorInvalidValue;
    if (a->T <= 0) return cudaSuccess;
    bool done = a->kv_bf16 ? att_split_launch<uint16_t>(stream, *a) : att_split_launch<float>(stream, *a);
    if (!done)
        return sd_cu_attention(stream, a->out, a->q, a->kc, a->vc, a->meta, a->T, a->nh, a->nkv, a->hd, a->bs, a->scale,
                               a->bf16, a->kv_bf16);
    if (a->tiled) {
        if (a->kv_bf16) att_tile_launch<uint16_t>(stream, *a);
        else att_tile_launch<float>(stream, *a);
    }
    return cudaGetLastError();
}
