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

static_assert(sizeof(sd_cu_draw_row) == 48, "sd_cu_draw_row layout");

/* Every thread's v combined by op (max, min or +: each order-free on
 * these values — NaNs never reach it), a shared tree; every thread gets it. */
template <typename T, typename Op> __device__ T blk_reduce(T v, T *sh, Op op)
{
    sh[threadIdx.x] = v;
    __syncthreads();
    for (int s = DRAW_THREADS / 2; s > 0; s >>= 1) {
        if ((int)threadIdx.x < s) sh[threadIdx.x] = op(sh[threadIdx.x], sh[threadIdx.x + s]);
        __syncthreads();
    }
    T r = sh[0];
    __syncthreads();
    return r;
}

__device__ float blk_max(float v, float *sh)
{
    return blk_reduce(v, sh, [](float a, float b) { return b > a ? b : a; });
}

__device__ unsigned long long blk_min(unsigned long long v, unsigned long long *sh)
{
    return blk_reduce(v, sh, [](unsigned long long a, unsigned long long b) { return b < a ? b : a; });
}

__device__ unsigned long long blk_count(unsigned long long v, unsigned long long *sh)
{
    return blk_reduce(v, sh, [](unsigned long long a, unsigned long long b) { return a + b; });
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

/* The walk's state, in shared memory (thread 0 adds; every thread reads).
 * A draw adds weights until the sum passes the target (the token there,
 * else the last live one); top-p's walk adds the kept weights until, before
 * an entry after the first, the sum reaches the target (the key of the last
 * entry kept). */
struct walk_state {
    double cum, target;
    uint64_t cut;      /* slice_select's result */
    uint64_t last_key; /* top-p: the last entry kept */
    unsigned long long kept;
    int32_t last, x;
    int marks, topp, nm, count, done;
};

/* The block's shared scratch. */
struct draw_smem {
    uint64_t wide[LIMBS][DRAW_THREADS];
    uint64_t keys[SD_DRAW_CAP];
    float f[DRAW_THREADS];
    unsigned long long c[DRAW_THREADS];
    unsigned int hist[256];
    walk_state w;
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

/* slice_walk() (thread 0): the sorted slice walked in order; w->done when
 * the walk ends in it. */
__device__ void slice_walk(const float *p, const uint64_t *keys, int m, const int32_t *mark, const double *rd,
                           walk_state *w)
{
    for (int i = 0; i < m; i++) {
        int32_t id = sd_rd_key_id(keys[i]);
        if (w->topp) {
            if (w->kept > 0 && w->cum >= w->target) {
                w->done = 1;
                return;
            }
            w->cum = __dadd_rn(w->cum, (double)p[id]);
            w->last_key = keys[i];
            w->kept++;
            continue;
        }
        double x = w->marks && mark[id] >= 0 ? rd[mark[id]] : (double)p[id];
        if (!(x > 0.0)) continue;
        w->cum = __dadd_rn(w->cum, x);
        if (w->cum > w->target) {
            w->x = id;
            w->done = 1;
            return;
        }
        w->last = id;
    }
}

/* row_walk(): the keys up to bound in bands of p >= top 2^-10, 2^-20, ...
 * (eight, then the rest), each in slices of at most SD_DRAW_CAP tokens. */
__device__ void row_walk(const float *p, int n, float top, uint64_t bound, const int32_t *mark, const double *rd,
                         draw_smem *sm)
{
    walk_state *w = &sm->w;
    uint64_t lo = 0;
    float t = top;
    for (int round = 0;; round++) {
        t = round < 8 ? __fmul_rn(t, 0x1.0p-10f) : 0.0f;
        uint64_t cut = t > 0.0f ? band_cut(t) : UINT64_MAX;
        if (cut > bound) cut = bound;
        while (lo <= cut) {
            uint64_t hi = cut;
            if (slice_count(p, n, lo, hi, sm->c) > SD_DRAW_CAP)
                hi = slice_select(p, n, lo, SD_DRAW_CAP, sm->hist, &w->cut);
            int m = slice_gather(p, n, lo, hi, sm->keys, &w->count);
            if (threadIdx.x == 0) slice_walk(p, sm->keys, m, mark, rd, w);
            __syncthreads();
            int done = w->done;
            __syncthreads();
            if (done || hi >= bound) return;
            lo = hi + 1;
        }
    }
}

/* key_sum(): the exact sum of the positive weights with keys up to bound
 * (every thread gets it). */
__device__ double key_sum(const float *v, int n, uint64_t bound, draw_smem *sm)
{
    uint64_t acc[LIMBS] = {0, 0, 0};
    for (int i = threadIdx.x; i < n; i += DRAW_THREADS)
        if (v[i] > 0.0f && sd_rd_key(v[i], i) <= bound) sd_wide_add_float(acc, LIMBS, v[i]);
    blk_wide(acc, sm->wide);
    return sd_wide_to_double(acc, LIMBS);
}

/* row_kept(): the sorted path's kept set of the weights w (floor 0): the
 * top_k largest (the sum then theirs), those at or above min-p, then top-p's
 * prefix; the key of its last token (every thread gets it). */
__device__ uint64_t row_kept(const float *w, int n, double sum, const sd_cu_draw_row &r, draw_smem *sm)
{
    uint64_t bound = UINT64_MAX;
    if (r.top_k > 0 && (unsigned long long)r.top_k < slice_count(w, n, 0, UINT64_MAX, sm->c)) {
        bound = slice_select(w, n, 0, (unsigned long long)r.top_k, sm->hist, &sm->w.cut);
        sum = key_sum(w, n, bound, sm);
    }
    if (r.min_p > 0.0f && band_cut(r.min_p) < bound) bound = band_cut(r.min_p);
    if (!(r.top_p > 0.0f && r.top_p < 1.0f)) return bound;
    if (threadIdx.x == 0) {
        sm->w = walk_state{};
        sm->w.target = __dmul_rn((double)r.top_p, sum);
        sm->w.topp = 1;
        sm->w.last = sm->w.x = -1;
    }
    __syncthreads();
    row_walk(w, n, 1.0f, bound, NULL, NULL, sm);
    uint64_t k = sm->w.last_key;
    __syncthreads();
    return k;
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
    __shared__ draw_smem sm;
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
    float mx = blk_max(m, sm.f);
    if (mx == -INFINITY) { /* the one-hot argmax: the first logit that is not NaN */
        unsigned long long first = (unsigned long long)vocab;
        for (int i = threadIdx.x; i < vocab; i += DRAW_THREADS)
            if (x[i] == x[i] && (unsigned long long)i < first) first = (unsigned long long)i;
        first = blk_min(first, sm.c);
        if (threadIdx.x == 0)
            out[blockIdx.x] = first == (unsigned long long)vocab
                                  ? sd_draw_out{-1, -1.0f}
                                  : sd_draw_out{(int32_t)first, r.token == (int32_t)first ? 1.0f : 0.0f};
        return;
    }
    bool sorted = (r.top_k > 0 && r.top_k < vocab) || (r.top_p > 0.0f && r.top_p < 1.0f); /* row_sorted() */
    float floor = r.min_p > 0.0f && !sorted ? r.min_p : 0.0f;                             /* row_weights() */
    uint64_t acc[LIMBS] = {0, 0, 0};
    for (int i = threadIdx.x; i < vocab; i += DRAW_THREADS) {
        float wi = sd_rd_keep(x[i], mx, sd_rd_exp_weight(x[i], mx, r.temperature), floor);
        p[i] = wi;
        sd_wide_add_float(acc, LIMBS, wi);
    }
    blk_wide(acc, sm.wide);
    double sum = sd_wide_to_double(acc, LIMBS);
    if (sorted) { /* the kept set's weights, the rest 0; their sum */
        uint64_t bound = row_kept(p, vocab, sum, r, &sm);
        for (int i = threadIdx.x; i < vocab; i += DRAW_THREADS)
            if (p[i] > 0.0f && sd_rd_key(p[i], i) > bound) p[i] = 0.0f;
        __syncthreads();
        sum = key_sum(p, vocab, UINT64_MAX, &sm);
    }
    uint64_t sp[LIMBS] = {0, 0, 0}; /* row_probs() */
    float pm = 0.0f;
    for (int i = threadIdx.x; i < vocab; i += DRAW_THREADS) {
        float pi = __double2float_rn(__ddiv_rn((double)p[i], sum));
        p[i] = pi;
        pm = pi > pm ? pi : pm;
        sd_wide_add_float(sp, LIMBS, pi);
    }
    float pmax = blk_max(pm, sm.f);
    blk_wide(sp, sm.wide);
    if (threadIdx.x == 0) {
        sm.w = walk_state{};
        sm.w.last = sm.w.x = -1;
        if (r.nq > 0) {
            double mass = residual_mass(r, q, p, vocab, sp, mark, qtok, rd, &sm.w.nm);
            if (mass > 0.0) {
                sm.w.marks = 1;
                sm.w.target = __dmul_rn(r.u, mass);
            }
        }
        if (!sm.w.marks) sm.w.target = __dmul_rn(r.u, sd_wide_to_double(sp, LIMBS));
    }
    __syncthreads();
    row_walk(p, vocab, pmax, UINT64_MAX, mark, rd, &sm);
    if (threadIdx.x == 0) {
        for (int i = 0; i < sm.w.nm; i++) mark[qtok[i]] = -1;
        int32_t tok = sm.w.x >= 0 ? sm.w.x : sm.w.last; /* rounding left the sum <= target: the last live entry */
        out[blockIdx.x] = sd_draw_out{tok, r.token >= 0 && r.token < vocab ? p[r.token] : 0.0f};
    }
}

extern "C" cudaError_t sd_cu_draw_rows(cudaStream_t stream, const sd_cu_draw_args *a, int n, int vocab)
{
    if (n <= 0) return cudaSuccess;
    draw_kernel<<<n, DRAW_THREADS, 0, stream>>>(*a, vocab);
    return cudaGetLastError();
}
