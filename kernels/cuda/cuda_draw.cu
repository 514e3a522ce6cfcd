/* cuda_draw.cu — the row draw on the device: a sampled row's token and
 * p(token) from its logits, without the row crossing to the host.
 *
 * CPU reference: sd_cpu_draw_row() in kernels/cpu/cpu_draw.c, pass for pass
 * (the functions named in each step below). The per-element arithmetic is
 * rowdraw.h's and exact.h's, compiled here for the device with the same
 * IEEE operations, so every value — weights, probabilities, exact sums, the
 * walk's running sum — has the host's bits, and so has the token.
 *
 * One block per row. Threading: the launcher only enqueues on the caller's
 * stream. */
#include <math.h>
#include <stdint.h>

#include "cuda_kernels.h"
#include "exact.h"
#include "rowdraw.h"

#define DRAW_THREADS 512
#define LIMBS 3

static_assert(sizeof(sd_cu_draw_row) == 40, "sd_cu_draw_row layout");

/* The largest of every thread's v (NaN never present: the passes skip them). */
__device__ float blk_max(float v, float *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = DRAW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s)
            sh[threadIdx.x] = sh[threadIdx.x + s] > sh[threadIdx.x] ? sh[threadIdx.x + s] : sh[threadIdx.x];
        __syncthreads();
    }
    float r = sh[0];
    __syncthreads();
    return r;
}

/* The sum of every thread's count. */
__device__ unsigned long long blk_count(unsigned long long v, unsigned long long *sh)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = DRAW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] += sh[threadIdx.x + s];
        __syncthreads();
    }
    unsigned long long r = sh[0];
    __syncthreads();
    return r;
}

/* acc (every thread's) becomes the exact sum of all threads' acc: integer
 * adds, so the tree's order does not matter. */
__device__ void blk_wide(uint64_t *acc, uint64_t (*sh)[DRAW_THREADS])
{
    for (int l = 0; l < LIMBS; l++) sh[l][threadIdx.x] = acc[l];
    __syncthreads();
    for (int s = DRAW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) {
            uint64_t a[LIMBS], b[LIMBS];
            for (int l = 0; l < LIMBS; l++) {
                a[l] = sh[l][threadIdx.x];
                b[l] = sh[l][threadIdx.x + s];
            }
            sd_wide_add(a, b, LIMBS);
            for (int l = 0; l < LIMBS; l++) sh[l][threadIdx.x] = a[l];
        }
        __syncthreads();
    }
    for (int l = 0; l < LIMBS; l++) acc[l] = sh[l][0];
    __syncthreads();
}

/* slice_count(): tokens of positive probability with keys in [lo, hi]. */
__device__ unsigned long long slice_count(const float *p, int n, uint64_t lo, uint64_t hi, unsigned long long *sh)
{
    unsigned long long c = 0;
    for (int i = threadIdx.x; i < n; i += DRAW_THREADS) {
        float v = p[i];
        if (!(v > 0.0f)) continue;
        uint64_t k = sd_rd_key(v, i);
        c += k >= lo && k <= hi;
    }
    return blk_count(c, sh);
}

/* slice_select(): the key of rank `rank` among the keys >= lo, a radix
 * select 8 bits a pass from the top (a shared histogram a pass; thread 0
 * walks it with the rank). */
__device__ uint64_t slice_select(const float *p, int n, uint64_t lo, unsigned long long rank, unsigned int *hist,
                                 uint64_t *result)
{
    uint64_t prefix = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        for (int i = threadIdx.x; i < 256; i += DRAW_THREADS) hist[i] = 0;
        __syncthreads();
        uint64_t above = shift == 56 ? 0 : ~0ull << (shift + 8);
        for (int i = threadIdx.x; i < n; i += DRAW_THREADS) {
            float v = p[i];
            if (!(v > 0.0f)) continue;
            uint64_t k = sd_rd_key(v, i);
            if (k >= lo && (k & above) == prefix) atomicAdd(&hist[(k >> shift) & 255], 1u);
        }
        __syncthreads();
        if (threadIdx.x == 0) {
            int d = 0;
            while (d < 255 && rank > hist[d]) rank -= hist[d++];
            *result = prefix | (uint64_t)d << shift;
        }
        __syncthreads();
        prefix = *result; /* thread 0 keeps the rank left */
        __syncthreads();
    }
    return prefix;
}

/* The slice [lo, hi] gathered into keys and sorted ascending (bitonic over
 * the next power of two, padded with the largest key); returns its size. */
__device__ int slice_gather(const float *p, int n, uint64_t lo, uint64_t hi, uint64_t *keys, int *count)
{
    if (threadIdx.x == 0) *count = 0;
    __syncthreads();
    for (int i = threadIdx.x; i < n; i += DRAW_THREADS) {
        float v = p[i];
        if (!(v > 0.0f)) continue;
        uint64_t k = sd_rd_key(v, i);
        if (k >= lo && k <= hi) keys[atomicAdd(count, 1)] = k;
    }
    __syncthreads();
    int m = *count, n2 = 1;
    while (n2 < m) n2 <<= 1;
    for (int i = m + (int)threadIdx.x; i < n2; i += DRAW_THREADS) keys[i] = UINT64_MAX;
    __syncthreads();
    for (int k = 2; k <= n2; k <<= 1)
        for (int j = k >> 1; j > 0; j >>= 1) {
            for (int i = threadIdx.x; i < n2; i += DRAW_THREADS) {
                int ixj = i ^ j;
                if (ixj <= i) continue;
                uint64_t a = keys[i], b = keys[ixj];
                if ((a > b) == ((i & k) == 0)) {
                    keys[i] = b;
                    keys[ixj] = a;
                }
            }
            __syncthreads();
        }
    return m;
}

/* band_cut(): the largest key of the band p >= t. */
__device__ uint64_t band_cut(float t) { return (uint64_t)(~__float_as_uint(t)) << 32 | 0xffffffffu; }

/* The walk's state, in shared memory (thread 0 adds; every thread reads). */
struct walk_state {
    double cum, target;
    uint64_t cut; /* slice_select's result */
    int32_t last, x;
    int marks, nm, count;
};

/* residual_mass() (thread 0): q's distinct tokens marked, their residuals
 * p - q in double in q's order; the exact mass. */
__device__ double residual_mass(const sd_cu_draw_row &r, const sd_tokprob *q, const float *p, int vocab,
                                const uint64_t *sp, int32_t *mark, int32_t *qtok, double *rd, int *nm)
{
    uint64_t m[LIMBS], marked[LIMBS] = {0, 0, 0};
    for (int l = 0; l < LIMBS; l++) m[l] = sp[l];
    int k = 0;
    for (int j = 0; j < r.nq; j++) {
        int32_t t = q[j].token;
        if (t < 0 || t >= vocab || !(q[j].prob > 0.0f)) continue;
        if (mark[t] < 0) {
            mark[t] = k;
            qtok[k] = t;
            rd[k++] = (double)p[t];
            sd_wide_add_float(marked, LIMBS, p[t]);
        }
        rd[mark[t]] = __dsub_rn(rd[mark[t]], (double)q[j].prob);
    }
    sd_wide_sub(m, marked, LIMBS);
    for (int i = 0; i < k; i++)
        if (rd[i] > 0.0) sd_wide_add_double(m, LIMBS, rd[i]);
    *nm = k;
    return sd_wide_to_double(m, LIMBS);
}

/* slice_walk() (thread 0): the sorted slice's weights added in order. */
__device__ void slice_walk(const float *p, const uint64_t *keys, int m, const int32_t *mark, const double *rd,
                           walk_state *w)
{
    for (int i = 0; i < m; i++) {
        int32_t id = sd_rd_key_id(keys[i]);
        double x = w->marks && mark[id] >= 0 ? rd[mark[id]] : (double)p[id];
        if (!(x > 0.0)) continue;
        w->cum = __dadd_rn(w->cum, x);
        if (w->cum > w->target) {
            w->x = id;
            return;
        }
        w->last = id;
    }
}

/* row_walk(): bands of p >= pmax 2^-10, 2^-20, ... (eight, then the rest),
 * each in slices of at most SD_DRAW_CAP tokens. Every thread returns the
 * token. */
__device__ int32_t row_walk(const float *p, int n, float pmax, const int32_t *mark, const double *rd, walk_state *w,
                            uint64_t *keys, unsigned long long *shc, unsigned int *hist)
{
    uint64_t lo = 0;
    float t = pmax;
    for (int round = 0;; round++) {
        t = round < 8 ? __fmul_rn(t, 0x1.0p-10f) : 0.0f;
        uint64_t cut = t > 0.0f ? band_cut(t) : UINT64_MAX;
        while (lo <= cut) {
            uint64_t hi = cut;
            if (slice_count(p, n, lo, hi, shc) > SD_DRAW_CAP) hi = slice_select(p, n, lo, SD_DRAW_CAP, hist, &w->cut);
            int m = slice_gather(p, n, lo, hi, keys, &w->count);
            if (threadIdx.x == 0) slice_walk(p, keys, m, mark, rd, w);
            __syncthreads();
            int32_t x = w->x;
            __syncthreads();
            if (x >= 0) return x;
            if (hi == UINT64_MAX) return w->last;
            lo = hi + 1;
        }
    }
}

/* row_edit(): the allowed-token mask over every token, then the edits an op
 * at a time (each op's entries name distinct tokens, in parallel), but
 * logit_bias's, which thread 0 applies in order. */
__device__ void row_edit(float *x, int n, const sd_cu_draw_row &r, const uint32_t *allow, const sd_logit_edit *e)
{
    if (r.allow_off >= 0)
        for (int i = threadIdx.x; i < n; i += DRAW_THREADS)
            if (!sd_rd_allowed(allow + r.allow_off, i)) x[i] = -INFINITY;
    __syncthreads();
    e += r.e_off;
    for (int op = SD_EDIT_BAN; op <= SD_EDIT_SUB; op++) {
        bool serial = op == SD_EDIT_BIAS;
        if (!serial || threadIdx.x == 0)
            for (int j = serial ? 0 : threadIdx.x; j < r.n_edits; j += serial ? 1 : DRAW_THREADS)
                if (e[j].op == op && e[j].token >= 0 && e[j].token < n)
                    x[e[j].token] = sd_rd_edit(x[e[j].token], op, e[j].v);
        __syncthreads();
    }
}

/* One block per row; the arrays as sd_cu_draw_args says. */
__global__ void __launch_bounds__(DRAW_THREADS) draw_kernel(sd_cu_draw_args a, int vocab)
{
    __shared__ uint64_t shw[LIMBS][DRAW_THREADS];
    __shared__ uint64_t keys[SD_DRAW_CAP];
    __shared__ float shf[DRAW_THREADS];
    __shared__ unsigned long long shc[DRAW_THREADS];
    __shared__ walk_state w;
    __shared__ unsigned int hist[256];
    const sd_cu_draw_row r = a.rows[blockIdx.x];
    float *x = a.logits + (size_t)blockIdx.x * vocab;
    float *p = a.p + (size_t)blockIdx.x * vocab;
    int32_t *mark = a.mark + (size_t)blockIdx.x * vocab;
    const sd_tokprob *q = a.q + r.q_off;
    int32_t *qtok = a.qtok + r.q_off;
    double *rd = a.rd + r.q_off;
    sd_draw_out *out = a.out;
    row_edit(x, vocab, r, a.allow, a.edits);

    float m = -INFINITY; /* row_max() */
    for (int i = threadIdx.x; i < vocab; i += DRAW_THREADS)
        if (x[i] > m) m = x[i];
    float mx = blk_max(m, shf);
    if (mx == -INFINITY) {
        if (threadIdx.x == 0) out[blockIdx.x] = sd_draw_out{-1, -1.0f};
        return;
    }
    float floor = r.min_p > 0.0f ? r.min_p : 0.0f; /* row_weights() */
    uint64_t acc[LIMBS] = {0, 0, 0};
    for (int i = threadIdx.x; i < vocab; i += DRAW_THREADS) {
        float wi = sd_rd_keep(x[i], mx, sd_rd_exp_weight(x[i], mx, r.temperature), floor);
        p[i] = wi;
        sd_wide_add_float(acc, LIMBS, wi);
    }
    blk_wide(acc, shw);
    double sum = sd_wide_to_double(acc, LIMBS);
    uint64_t sp[LIMBS] = {0, 0, 0}; /* row_probs() */
    float pm = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += DRAW_THREADS) {
        float pi = __double2float_rn(__ddiv_rn((double)p[i], sum));
        p[i] = pi;
        pm = pi > pm ? pi : pm;
        sd_wide_add_float(sp, LIMBS, pi);
    }
    float pmax = blk_max(pm, shf);
    blk_wide(sp, shw);
    if (threadIdx.x == 0) {
        w.cum = 0.0;
        w.last = -1;
        w.x = -1;
        w.marks = 0;
        w.nm = 0;
        if (r.nq > 0) {
            double mass = residual_mass(r, q, p, vocab, sp, mark, qtok, rd, &w.nm);
            if (mass > 0.0) {
                w.marks = 1;
                w.target = __dmul_rn(r.u, mass);
            }
        }
        if (!w.marks) w.target = __dmul_rn(r.u, sd_wide_to_double(sp, LIMBS));
    }
    __syncthreads();
    int32_t tok = row_walk(p, vocab, pmax, mark, rd, &w, keys, shc, hist);
    if (threadIdx.x == 0) {
        for (int i = 0; i < w.nm; i++) mark[qtok[i]] = -1;
        out[blockIdx.x] = sd_draw_out{tok, r.token >= 0 && r.token < vocab ? p[r.token] : 0.0f};
    }
}

extern "C" cudaError_t sd_cu_draw_rows(cudaStream_t stream, const sd_cu_draw_args *a, int n, int vocab)
{
    if (n <= 0) return cudaSuccess;
    draw_kernel<<<n, DRAW_THREADS, 0, stream>>>(*a, vocab);
    return cudaGetLastError();
}
