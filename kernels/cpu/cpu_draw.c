/* cpu_draw.c — see cpu_draw.h. Each static function below is one pass of
 * the CUDA kernel (draw_kernel in kernels/cuda/cuda_draw.cu), which runs it
 * over a block's threads. */
#include "cpu_draw.h"

#include <math.h>
#include <stdbool.h>
#include <stdlib.h>

#include "exact.h"

#define LIMBS 3 /* sums below 2^43 units of 2^-149: a vocabulary's weights (each <= 1) */

sd_status sd_cpu_draw_scratch_new(int vocab, int cap, sd_cpu_draw_scratch **out, char *err, size_t errlen)
{
    *out = NULL;
    if (vocab < 1 || cap < 1) return sd_seterr(err, errlen, SD_ERR_ARG, "row draw: vocab %d, cap %d", vocab, cap);
    sd_cpu_draw_scratch *s = calloc(1, sizeof *s);
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "row draw: out of memory");
    s->vocab = vocab;
    s->cap = cap;
    s->p = malloc((size_t)vocab * sizeof *s->p);
    s->mark = malloc((size_t)vocab * sizeof *s->mark);
    s->qtok = malloc((size_t)vocab * sizeof *s->qtok);
    s->rd = malloc((size_t)vocab * sizeof *s->rd);
    s->keys = malloc((size_t)cap * sizeof *s->keys);
    if (!s->p || !s->mark || !s->qtok || !s->rd || !s->keys) {
        sd_cpu_draw_scratch_free(s);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "row draw: out of memory for a vocabulary of %d", vocab);
    }
    for (int i = 0; i < vocab; i++) s->mark[i] = -1;
    *out = s;
    return SD_OK;
}

void sd_cpu_draw_scratch_free(sd_cpu_draw_scratch *s)
{
    if (!s) return;
    free(s->p);
    free(s->mark);
    free(s->qtok);
    free(s->rd);
    free(s->keys);
    free(s);
}

/* Pass 0: the allowed-token mask (every token in parallel), then the edits
 * (each op's entries in parallel on the device: distinct tokens but for
 * logit_bias, which one thread applies in order). */
static void row_edit(float *x, int n, const sd_draw_row *r)
{
    if (r->allow)
        for (int i = 0; i < n; i++)
            if (!sd_rd_allowed(r->allow, i)) x[i] = -INFINITY;
    for (int j = 0; j < r->n_edits; j++) {
        const sd_logit_edit *e = &r->edits[j];
        if (e->token >= 0 && e->token < n) x[e->token] = sd_rd_edit(x[e->token], e->op, e->v);
    }
}

/* Pass 1: the largest logit, NaNs ignored. */
static float row_max(const float *x, int n)
{
    float mx = -INFINITY;
    for (int i = 0; i < n; i++)
        if (x[i] > mx) mx = x[i];
    return mx;
}

/* Pass 2: the kept weights into w, and their exact sum (min-p's floor
 * later on the sorted path, as the sampler's). */
static double row_weights(const float *x, int n, float mx, const sd_draw_row *r, bool sorted, float *w)
{
    float floor = r->min_p > 0.0f && !sorted ? r->min_p : 0.0f;
    uint64_t acc[LIMBS] = {0};
    for (int i = 0; i < n; i++) {
        w[i] = sd_rd_keep(x[i], mx, sd_rd_exp_weight(x[i], mx, r->temperature), floor);
        sd_wide_add_float(acc, LIMBS, w[i]);
    }
    return sd_wide_to_double(acc, LIMBS);
}

/* Pass 3: the probabilities in place of the weights, their largest, their
 * exact sum in sp. */
static float row_probs(float *p, int n, double sum, uint64_t *sp)
{
    float pmax = 0.0f;
    for (int i = 0; i < n; i++) {
        p[i] = (float)((double)p[i] / sum);
        pmax = p[i] > pmax ? p[i] : pmax;
        sd_wide_add_float(sp, LIMBS, p[i]);
    }
    return pmax;
}

/* The residual's mass (one thread on the device): q's distinct tokens
 * marked, each weighing its p less every q entry of it (in q's order, in
 * double), the others their p; the positive weights' exact sum. Returns the
 * count of marked tokens in *nm. */
static double residual_mass(const sd_draw_row *r, int vocab, const uint64_t *sp, sd_cpu_draw_scratch *s, int *nm)
{
    uint64_t m[LIMBS], marked[LIMBS] = {0};
    memcpy(m, sp, sizeof m);
    int k = 0;
    for (int j = 0; j < r->nq; j++) {
        int32_t t = r->q[j].token;
        if (t < 0 || t >= vocab || !(r->q[j].prob > 0.0f)) continue;
        if (s->mark[t] < 0) {
            s->mark[t] = k;
            s->qtok[k] = t;
            s->rd[k++] = s->p[t];
            sd_wide_add_float(marked, LIMBS, s->p[t]);
        }
        s->rd[s->mark[t]] -= r->q[j].prob;
    }
    sd_wide_sub(m, marked, LIMBS);
    for (int i = 0; i < k; i++)
        if (s->rd[i] > 0.0) sd_wide_add_double(m, LIMBS, s->rd[i]);
    *nm = k;
    return sd_wide_to_double(m, LIMBS);
}

/* How many tokens of positive probability have keys in [lo, hi]. */
static size_t slice_count(const float *p, int n, uint64_t lo, uint64_t hi)
{
    size_t c = 0;
    for (int i = 0; i < n; i++) {
        if (!(p[i] > 0.0f)) continue;
        uint64_t k = sd_rd_key(p[i], i);
        c += k >= lo && k <= hi;
    }
    return c;
}

/* The key of rank `rank` (1 = the smallest) among the keys >= lo of the
 * tokens of positive probability: a radix select, 8 bits a pass from the
 * top. The slice [lo, that key] then holds exactly rank tokens. */
static uint64_t slice_select(const float *p, int n, uint64_t lo, size_t rank)
{
    uint64_t prefix = 0;
    for (int shift = 56; shift >= 0; shift -= 8) {
        size_t h[256] = {0};
        uint64_t above = shift == 56 ? 0 : ~0ull << (shift + 8); /* the digits fixed so far */
        for (int i = 0; i < n; i++) {
            if (!(p[i] > 0.0f)) continue;
            uint64_t k = sd_rd_key(p[i], i);
            if (k >= lo && (k & above) == prefix) h[(k >> shift) & 255]++;
        }
        int d = 0;
        while (d < 255 && rank > h[d]) rank -= h[d++];
        prefix |= (uint64_t)d << shift;
    }
    return prefix;
}

static int key_cmp(const void *pa, const void *pb)
{
    uint64_t a = *(const uint64_t *)pa, b = *(const uint64_t *)pb;
    return a < b ? -1 : a > b;
}

/* The walk's state. A draw adds weights until the sum passes the target
 * (the token there, else the last live one); top-p's walk adds the kept
 * weights until, before an entry after the first, the sum reaches the
 * target (the key of the last entry kept). */
typedef struct walk {
    double cum, target;
    int32_t last, x; /* draw: the last token added; the token drawn (-1: none yet) */
    bool marks;      /* draw: q's tokens weigh their residual */
    bool topp;       /* top-p's walk */
    size_t kept;     /* top-p: entries kept so far */
    uint64_t last_key;
} walk;

/* Gathers the slice [lo, hi] (at most cap keys), sorts it and walks it;
 * true when the walk ends in it. */
static bool slice_walk(const float *p, int n, uint64_t lo, uint64_t hi, sd_cpu_draw_scratch *s, walk *w)
{
    size_t m = 0;
    for (int i = 0; i < n; i++) {
        if (!(p[i] > 0.0f)) continue;
        uint64_t k = sd_rd_key(p[i], i);
        if (k >= lo && k <= hi) s->keys[m++] = k;
    }
    qsort(s->keys, m, sizeof *s->keys, key_cmp);
    for (size_t i = 0; i < m; i++) {
        int32_t id = sd_rd_key_id(s->keys[i]);
        if (w->topp) {
            if (w->kept > 0 && w->cum >= w->target) return true;
            w->cum += (double)p[id];
            w->last_key = s->keys[i];
            w->kept++;
            continue;
        }
        double x = w->marks && s->mark[id] >= 0 ? s->rd[s->mark[id]] : (double)p[id];
        if (!(x > 0.0)) continue;
        w->cum += x;
        if (w->cum > w->target) {
            w->x = id;
            return true;
        }
        w->last = id;
    }
    return false;
}

/* The key of the last token with p >= t: every key of the band p >= t is at
 * most this. */
static uint64_t band_cut(float t)
{
    uint32_t b;
    memcpy(&b, &t, sizeof b);
    return (uint64_t)(~b) << 32 | 0xffffffffu;
}

/* The walk over the keys up to bound in bands of p >= top 2^-10, 2^-20, ...
 * (eight, then the rest), each in slices of at most cap tokens. */
static void row_walk(const float *p, int n, float top, uint64_t bound, sd_cpu_draw_scratch *s, walk *w)
{
    uint64_t lo = 0;
    float t = top;
    for (int round = 0;; round++) {
        t = round < 8 ? t * 0x1.0p-10f : 0.0f;
        uint64_t cut = t > 0.0f ? band_cut(t) : UINT64_MAX;
        if (cut > bound) cut = bound;
        while (lo <= cut) {
            uint64_t hi = cut;
            if (slice_count(p, n, lo, hi) > (size_t)s->cap) hi = slice_select(p, n, lo, (size_t)s->cap);
            if (slice_walk(p, n, lo, hi, s, w) || hi >= bound) return;
            lo = hi + 1;
        }
    }
}

/* The exact sum of the positive weights with keys up to bound. */
static double key_sum(const float *v, int n, uint64_t bound)
{
    uint64_t acc[LIMBS] = {0};
    for (int i = 0; i < n; i++)
        if (v[i] > 0.0f && sd_rd_key(v[i], i) <= bound) sd_wide_add_float(acc, LIMBS, v[i]);
    return sd_wide_to_double(acc, LIMBS);
}

/* Whether r's distribution needs the order (top-k or top-p, as the
 * sampler's sorted path). */
static bool row_sorted(const sd_draw_row *r, int vocab)
{
    return (r->top_k > 0 && r->top_k < vocab) || (r->top_p > 0.0f && r->top_p < 1.0f);
}

/* The sorted path's kept set (the weights w in p, floor 0): the top_k
 * largest (the sum of the kept set then theirs), those at or above min-p,
 * then top-p's prefix; returns the key of its last token. */
static uint64_t row_kept(const float *w, int n, double sum, const sd_draw_row *r, sd_cpu_draw_scratch *s)
{
    uint64_t bound = UINT64_MAX;
    if (r->top_k > 0 && (size_t)r->top_k < slice_count(w, n, 0, UINT64_MAX)) {
        bound = slice_select(w, n, 0, (size_t)r->top_k);
        sum = key_sum(w, n, bound);
    }
    if (r->min_p > 0.0f && band_cut(r->min_p) < bound) bound = band_cut(r->min_p);
    if (!(r->top_p > 0.0f && r->top_p < 1.0f)) return bound;
    walk t = {.target = (double)r->top_p * sum, .last = -1, .x = -1, .topp = true};
    row_walk(w, n, 1.0f, bound, s, &t);
    return t.last_key;
}

sd_draw_out sd_cpu_draw_row(float *logits, int vocab, const sd_draw_row *r, sd_cpu_draw_scratch *s)
{
    sd_draw_out none = {-1, -1.0f};
    if (vocab < 1 || vocab > s->vocab) return none;
    row_edit(logits, vocab, r);
    float mx = row_max(logits, vocab);
    if (mx == -INFINITY) { /* the one-hot argmax: the first logit that is not NaN */
        int a = 0;
        while (a < vocab && logits[a] != logits[a]) a++;
        if (a == vocab) return none;
        return (sd_draw_out){a, r->token == a ? 1.0f : 0.0f};
    }
    bool sorted = row_sorted(r, vocab);
    double sum = row_weights(logits, vocab, mx, r, sorted, s->p);
    if (sorted) { /* the kept set's weights, the rest 0; their sum */
        uint64_t bound = row_kept(s->p, vocab, sum, r, s);
        for (int i = 0; i < vocab; i++)
            if (s->p[i] > 0.0f && sd_rd_key(s->p[i], i) > bound) s->p[i] = 0.0f;
        sum = key_sum(s->p, vocab, UINT64_MAX);
    }
    uint64_t sp[LIMBS] = {0};
    float pmax = row_probs(s->p, vocab, sum, sp);
    sd_draw_out out = {-1, r->token >= 0 && r->token < vocab ? s->p[r->token] : 0.0f};
    walk w = {.last = -1, .x = -1};
    int nm = 0;
    if (r->nq > 0) {
        double mass = residual_mass(r, vocab, sp, s, &nm);
        if (mass > 0.0) {
            w.marks = true;
            w.target = r->u * mass;
        }
    }
    if (!w.marks) w.target = r->u * sd_wide_to_double(sp, LIMBS);
    row_walk(s->p, vocab, pmax, UINT64_MAX, s, &w);
    out.token = w.x >= 0 ? w.x : w.last; /* rounding left the sum <= target: the last live entry */
    for (int i = 0; i < nm; i++) s->mark[s->qtok[i]] = -1;
    return out;
}
