/* test_sampler.c — Check suite for common/sample/sampler.c.
 *
 * Every expectation is computed from a known distribution: hand-made logits
 * whose softmax is written out analytically, or a brute-force reference
 * (double softmax + full sort) for the larger cases. Statistical tests use
 * fixed seeds, so they are deterministic; their thresholds are the 99.9%
 * chi-square critical values quoted beside them. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "vecmath.h"
#include "logprob.h"
#include "exsum.h"
#include "sampler.h"
#include "testutil.h"

#define EPS 1e-6

static sd_sampling sampled(float temperature)
{
    sd_sampling s = sd_sampling_default();
    s.temperature = temperature;
    return s;
}

/* Distribution of logits[0..n) under s, with a fresh sampler; returns count. */
static size_t dist_of(const sd_sampling *s, const float *logits, int n, sd_tokprob *out)
{
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(n, &sp, NULL, 0), SD_OK);
    size_t k = sd_sampler_distribution(sp, s, logits, n, out, (size_t)n);
    sd_sampler_free(sp);
    return k;
}

/* Analytic softmax(l / T) in double. */
static void softmax_ref(const float *l, int n, double T, double *p)
{
    double mx = -INFINITY, sum = 0.0;
    for (int i = 0; i < n; i++)
        if (l[i] > mx) mx = l[i];
    for (int i = 0; i < n; i++) {
        p[i] = l[i] == -INFINITY ? 0.0 : exp((l[i] - mx) / T);
        sum += p[i];
    }
    for (int i = 0; i < n; i++) p[i] /= sum;
}

/* The sampler's own numerators (float, sd_exp_weights; their accuracy
 * against exp() is test_cpu_kernels') normalised in double: the large-vocab
 * comparison below is about the filter chain, and near-ties must order the
 * same way on both sides. */
static void softmax_ref_f(const float *l, int n, double T, double *p)
{
    float mx = -INFINITY, *w = malloc((size_t)n * sizeof *w);
    double sum = 0.0;
    for (int i = 0; i < n; i++)
        if (l[i] > mx) mx = l[i];
    sd_exp_weights(l, n, mx, (float)T, w);
    for (int i = 0; i < n; i++) {
        p[i] = l[i] == -INFINITY ? 0.0 : l[i] == mx ? 1.0 : (double)w[i];
        sum += p[i];
    }
    for (int i = 0; i < n; i++) p[i] /= sum;
    free(w);
}

/* Hot loops count failures and assert once: every ck_assert records its
 * location through a write(2), which would dominate the run time. */
static void check_sorted(const sd_tokprob *d, size_t n)
{
    size_t bad = 0;
    for (size_t i = 1; i < n; i++)
        if (d[i - 1].prob < d[i].prob || (d[i - 1].prob == d[i].prob && d[i - 1].token >= d[i].token)) bad++;
    ck_assert_msg(bad == 0, "%zu entries out of order", bad);
}

static void check_sums_to_one(const sd_tokprob *d, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++) s += d[i].prob;
    ck_assert_double_eq_tol(s, 1.0, 1e-5);
}

/* ---- softmax and temperature ------------------------------------------- */

/* Log-softmax of a raw row: the chosen token's value, the top n descending
 * (lower id first on ties), NaN counted as -inf, padding past the vocabulary. */
START_TEST(test_logprob_row)
{
    const float l[5] = {1.0f, 2.0f, 3.0f, 0.0f, 3.0f};
    double lse = log(exp(1.0) + exp(2.0) + 2 * exp(3.0) + 1.0);
    sd_token_lp o;
    sd_logprob_row(l, 5, 1, 3, &o);
    ck_assert_double_eq_tol(o.lp, 2.0 - lse, 1e-6);
    ck_assert_int_eq(o.top_id[0], 2);
    ck_assert_int_eq(o.top_id[1], 4);
    ck_assert_int_eq(o.top_id[2], 1);
    ck_assert_double_eq_tol(o.top_lp[0], 3.0 - lse, 1e-6);
    ck_assert_double_eq_tol(o.top_lp[2], 2.0 - lse, 1e-6);
    const float m[3] = {NAN, 0.0f, -INFINITY};
    sd_logprob_row(m, 3, 0, 4, &o);
    ck_assert(isinf(o.lp) && o.lp < 0);
    ck_assert_int_eq(o.top_id[0], 1);
    ck_assert_double_eq_tol(o.top_lp[0], 0.0, 1e-7);
    ck_assert_int_eq(o.top_id[1], 2);
    ck_assert_int_eq(o.top_id[2], -1);
    ck_assert_int_eq(o.top_id[3], -1);
    sd_logprob_row(l, 5, 7, 0, &o); /* an id outside the vocabulary: -inf */
    ck_assert(isinf(o.lp));
}
END_TEST

START_TEST(test_softmax_analytic)
{
    /* e^1, e^2, e^3, e^0 over their sum (31.1928...): */
    const float l[4] = {1.0f, 2.0f, 3.0f, 0.0f};
    const double want[4] = {0.0871443187, 0.2368828181, 0.6439142599, 0.0320586033};
    sd_sampling s = sampled(1.0f);
    sd_tokprob d[4];
    size_t n = dist_of(&s, l, 4, d);
    ck_assert_uint_eq(n, 4);
    ck_assert_int_eq(d[0].token, 2);
    ck_assert_int_eq(d[1].token, 1);
    ck_assert_int_eq(d[2].token, 0);
    ck_assert_int_eq(d[3].token, 3);
    for (size_t i = 0; i < n; i++) ck_assert_double_eq_tol(d[i].prob, want[d[i].token], EPS);
    ck_assert_double_eq_tol(sd_sparse_prob(d, n, 1), want[1], EPS);
    ck_assert_float_eq(sd_sparse_prob(d, n, 7), 0.0f);
}
END_TEST

START_TEST(test_temperature_scaling)
{
    const float l[5] = {0.5f, -1.0f, 2.0f, 1.5f, 0.0f};
    const float temps[3] = {0.5f, 2.0f, 10.0f};
    for (int t = 0; t < 3; t++) {
        double p[5];
        softmax_ref(l, 5, temps[t], p);
        sd_sampling s = sampled(temps[t]);
        sd_tokprob d[5];
        size_t n = dist_of(&s, l, 5, d);
        ck_assert_uint_eq(n, 5);
        check_sorted(d, n);
        for (size_t i = 0; i < n; i++) ck_assert_double_eq_tol(d[i].prob, p[d[i].token], EPS);
    }
    /* Higher temperature flattens: max prob at T=0.5 > at T=2. */
    sd_sampling lo = sampled(0.5f), hi = sampled(2.0f);
    sd_tokprob a[5], b[5];
    dist_of(&lo, l, 5, a);
    dist_of(&hi, l, 5, b);
    ck_assert(a[0].prob > b[0].prob);
}
END_TEST

START_TEST(test_greedy_argmax)
{
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(6, &sp, NULL, 0), SD_OK);
    sd_sampling s = sd_sampling_default(); /* temperature 0 */
    float l[6] = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f, 2.9f};
    ck_assert_int_eq(sd_sampler_sample(sp, &s, l, 6, NULL, 0, NULL, 0, 0), 1); /* tie → lowest */
    ck_assert_int_eq(sd_argmax(l, 6), 1);
    float nan_first[3] = {NAN, -5.0f, -6.0f};
    ck_assert_int_eq(sd_argmax(nan_first, 3), 1);
    float nan_mid[3] = {-5.0f, NAN, -6.0f};
    ck_assert_int_eq(sd_argmax(nan_mid, 3), 0);
    float all_nan[2] = {NAN, NAN};
    ck_assert_int_eq(sd_argmax(all_nan, 2), -1);
    float ninf[3] = {-INFINITY, -INFINITY, -INFINITY};
    ck_assert_int_eq(sd_argmax(ninf, 3), 0);
    /* Greedy with penalties: the penalty applies before the argmax. */
    s.repetition_penalty = 2.0f;
    float l2[6] = {0.1f, 3.0f, -2.0f, 3.0f, 1.0f, 2.9f};
    int32_t prompt[1] = {1};
    ck_assert_int_eq(sd_sampler_sample(sp, &s, l2, 6, prompt, 1, NULL, 0, 0), 3);
    sd_sampler_free(sp);
}
END_TEST

/* ---- filters ------------------------------------------------------------ */

START_TEST(test_top_k_one_hot)
{
    const float l[6] = {0.3f, 1.2f, -0.7f, 2.5f, 2.4f, 0.0f};
    sd_sampling s = sampled(1.0f);
    s.top_k = 1;
    sd_tokprob d[6];
    size_t n = dist_of(&s, l, 6, d);
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(d[0].token, 3);
    ck_assert_float_eq(d[0].prob, 1.0f);
}
END_TEST

START_TEST(test_top_k_keeps_k_largest)
{
    const float l[8] = {0.3f, 1.2f, -0.7f, 2.5f, 2.4f, 0.0f, 1.9f, -3.0f};
    sd_sampling s = sampled(1.0f);
    s.top_k = 3; /* the three largest: ids 3, 4, 6 */
    sd_tokprob d[8];
    size_t n = dist_of(&s, l, 8, d);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(d[0].token, 3);
    ck_assert_int_eq(d[1].token, 4);
    ck_assert_int_eq(d[2].token, 6);
    double z = exp(2.5) + exp(2.4) + exp(1.9);
    ck_assert_double_eq_tol(d[0].prob, exp(2.5) / z, EPS);
    ck_assert_double_eq_tol(d[1].prob, exp(2.4) / z, EPS);
    ck_assert_double_eq_tol(d[2].prob, exp(1.9) / z, EPS);
    /* top_k >= vocab is off. */
    s.top_k = 100;
    ck_assert_uint_eq(dist_of(&s, l, 8, d), 8);
}
END_TEST

START_TEST(test_top_p)
{
    /* Softmax of log(p) recovers p = {0.05, 0.5, 0.15, 0.3}. Sorted: 1 (.5),
     * 3 (.3), 2 (.15), 0 (.05); cumulative .5, .8, .95, 1. */
    const float l[4] = {logf(0.05f), logf(0.5f), logf(0.15f), logf(0.3f)};
    sd_sampling s = sampled(1.0f);
    sd_tokprob d[4];

    s.top_p = 1e-6f; /* only the max */
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 1);
    ck_assert_int_eq(d[0].token, 1);
    ck_assert_float_eq(d[0].prob, 1.0f);

    s.top_p = 0.45f; /* .5 >= .45 → {1} */
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 1);

    s.top_p = 0.75f; /* .8 >= .75 → {1, 3} */
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 2);
    ck_assert_int_eq(d[1].token, 3);
    ck_assert_double_eq_tol(d[0].prob, 0.5 / 0.8, EPS);
    ck_assert_double_eq_tol(d[1].prob, 0.3 / 0.8, EPS);

    s.top_p = 0.9f; /* .8 < .9 ≤ .95 → {1, 3, 2} */
    size_t n = dist_of(&s, l, 4, d);
    ck_assert_uint_eq(n, 3);
    ck_assert_int_eq(d[2].token, 2);
    ck_assert_double_eq_tol(d[0].prob, 0.5 / 0.95, EPS);
    ck_assert_double_eq_tol(d[1].prob, 0.3 / 0.95, EPS);
    ck_assert_double_eq_tol(d[2].prob, 0.15 / 0.95, EPS);
    ck_assert_float_eq(sd_sparse_prob(d, n, 0), 0.0f);

    /* top-p applies to the top-k renormalised distribution (HF order):
     * top_k 2 → {.5/.8, .3/.8} = {.625, .375}; top_p .6 keeps only id 1. */
    s.top_k = 2;
    s.top_p = 0.6f;
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 1);
    s.top_p = 0.7f;
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 2);
}
END_TEST

START_TEST(test_min_p)
{
    const float l[4] = {logf(0.05f), logf(0.5f), logf(0.15f), logf(0.3f)};
    sd_sampling s = sampled(1.0f);
    sd_tokprob d[4];
    s.min_p = 0.2f; /* threshold .1: keep .5, .3, .15 */
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 3);
    ck_assert_double_eq_tol(d[2].prob, 0.15 / 0.95, EPS);
    s.min_p = 0.7f; /* threshold .35: keep .5 */
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 1);
    s.min_p = 1.0f; /* only the max survives */
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 1);
    ck_assert_int_eq(d[0].token, 1);
    /* with top-p .99 (keeps all 4) and min-p .5 (threshold .25): {.5, .3} */
    s.min_p = 0.5f;
    s.top_p = 0.99f;
    ck_assert_uint_eq(dist_of(&s, l, 4, d), 2);
    ck_assert_double_eq_tol(d[1].prob, 0.3 / 0.8, EPS);
}
END_TEST

START_TEST(test_uniform_ties)
{
    float l[8];
    for (int i = 0; i < 8; i++) l[i] = 0.25f;
    sd_sampling s = sampled(0.7f);
    sd_tokprob d[8];
    ck_assert_uint_eq(dist_of(&s, l, 8, d), 8);
    for (int i = 0; i < 8; i++) {
        ck_assert_int_eq(d[i].token, i);
        ck_assert_double_eq_tol(d[i].prob, 0.125, EPS);
    }
    s.top_k = 3; /* ties at the boundary: the lowest ids */
    ck_assert_uint_eq(dist_of(&s, l, 8, d), 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(d[i].token, i);
        ck_assert_double_eq_tol(d[i].prob, 1.0 / 3.0, EPS);
    }
    s.top_k = 0;
    s.top_p = 0.3f; /* cumulative .125, .25, .375 → 3 lowest ids */
    ck_assert_uint_eq(dist_of(&s, l, 8, d), 3);
    ck_assert_int_eq(d[2].token, 2);
}
END_TEST

START_TEST(test_neg_inf_excluded)
{
    const float l[5] = {-INFINITY, 1.0f, -INFINITY, 1.0f, NAN};
    sd_sampling s = sampled(1.0f);
    sd_tokprob d[5];
    size_t n = dist_of(&s, l, 5, d);
    ck_assert_uint_eq(n, 2);
    ck_assert_int_eq(d[0].token, 1);
    ck_assert_int_eq(d[1].token, 3);
    ck_assert_double_eq_tol(d[0].prob, 0.5, EPS);
    const float none[2] = {-INFINITY, -INFINITY};
    ck_assert_uint_eq(dist_of(&s, none, 2, d), 0);
    /* a sampled step with no live token falls back to argmax (lowest id) */
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(2, &sp, NULL, 0), SD_OK);
    float none2[2] = {-INFINITY, -INFINITY};
    ck_assert_int_eq(sd_sampler_sample(sp, &s, none2, 2, NULL, 0, NULL, 0, 0), 0);
    sd_sampler_free(sp);
}
END_TEST

START_TEST(test_cap_truncates_and_renormalises)
{
    const float l[4] = {logf(0.05f), logf(0.5f), logf(0.15f), logf(0.3f)};
    sd_sampling s = sampled(1.0f);
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(4, &sp, NULL, 0), SD_OK);
    sd_tokprob d[2];
    size_t n = sd_sampler_distribution(sp, &s, l, 4, d, 2);
    ck_assert_uint_eq(n, 2);
    ck_assert_double_eq_tol(d[0].prob, 0.5 / 0.8, EPS);
    ck_assert_double_eq_tol(d[1].prob, 0.3 / 0.8, EPS);
    /* temperature 0 in the distribution call: one-hot argmax */
    sd_sampling g = sd_sampling_default();
    ck_assert_uint_eq(sd_sampler_distribution(sp, &g, l, 4, d, 2), 1);
    ck_assert_int_eq(d[0].token, 1);
    ck_assert_float_eq(d[0].prob, 1.0f);
    /* vocab larger than the sampler's: refused */
    float big[8] = {0};
    ck_assert_uint_eq(sd_sampler_distribution(sp, &s, big, 8, d, 2), 0);
    sd_sampler_free(sp);
}
END_TEST

/* Brute-force reference of the filter chain on a large vocabulary (full
 * sort on double probabilities, HF semantics), compared with the
 * partial-selection / banded-sort paths. */
typedef struct ref_ent {
    double p;
    int32_t token;
} ref_ent;

static int ref_cmp(const void *pa, const void *pb)
{
    const ref_ent *a = pa, *b = pb;
    if (a->p != b->p) return a->p > b->p ? -1 : 1;
    return a->token < b->token ? -1 : 1;
}

static size_t ref_chain(const float *l, int V, const sd_sampling *s, double *p, ref_ent *o)
{
    softmax_ref_f(l, V, s->temperature, p);
    for (int i = 0; i < V; i++) {
        o[i].token = i;
        o[i].p = p[i];
    }
    qsort(o, (size_t)V, sizeof *o, ref_cmp);
    size_t n = (size_t)V;
    if (s->top_k > 0 && (size_t)s->top_k < n) n = (size_t)s->top_k;
    double tot = 0.0;
    for (size_t i = 0; i < n; i++) tot += o[i].p;
    if (s->top_p < 1.0f) {
        double cum = 0.0;
        size_t i = 0;
        for (; i < n && (i == 0 || cum < s->top_p * tot); i++) cum += o[i].p;
        n = i;
    }
    while (n > 1 && o[n - 1].p < s->min_p * o[0].p) n--;
    return n;
}

static void check_chain_against_reference(sd_sampler *sp, const float *l, int V, double *p, ref_ent *ref, sd_tokprob *d)
{
    const struct {
        int k;
        float p, minp;
    } cfg[] = {
        {0, 1.0f, 0.0f},  {50, 1.0f, 0.0f},  {0, 0.9f, 0.0f},    {0, 0.999f, 0.0f},   {0, 0.5f, 0.0f},
        {0, 1.0f, 0.05f}, {100, 0.8f, 0.0f}, {0, 0.95f, 0.001f}, {0, 0.9999f, 1e-6f}, {5000, 0.99f, 0.0f},
    };
    for (size_t c = 0; c < sizeof cfg / sizeof cfg[0]; c++) {
        sd_sampling s = sampled(0.8f);
        s.top_k = cfg[c].k;
        s.top_p = cfg[c].p;
        s.min_p = cfg[c].minp;
        size_t rn = ref_chain(l, V, &s, p, ref);
        size_t n = sd_sampler_distribution(sp, &s, l, V, d, V);
        ck_assert_msg(n == rn, "config %zu: %zu entries, reference %zu", c, n, rn);
        check_sorted(d, n);
        check_sums_to_one(d, n);
        double tot = 0.0;
        for (size_t i = 0; i < rn; i++) tot += ref[i].p;
        size_t bad = 0;
        for (size_t i = 0; i < n; i++)
            if (d[i].token != ref[i].token || fabs(d[i].prob - ref[i].p / tot) > EPS) bad++;
        ck_assert_msg(bad == 0, "config %zu: %zu entries differ", c, bad);
    }
}

START_TEST(test_large_vocab_matches_reference)
{
    enum { V = 20000 };
    float *l = malloc(V * sizeof *l);
    double *p = malloc(V * sizeof *p);
    ref_ent *ref = malloc(V * sizeof *ref);
    sd_tokprob *d = malloc(V * sizeof *d);
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
    for (int set = 0; set < 2; set++) {
        /* set 0: distinct logits spread over ~40 nats, so the weights span
         * many bands; set 1: only 5 distinct values, so large tie groups
         * straddle every cut (ties must go to the lowest ids). */
        for (int i = 0; i < V; i++)
            l[i] = set == 0 ? (float)(-40.0 * sd_rng_uniform(7, (uint64_t)i, 3)) : -0.5f * (float)((i * 7) % 5);
        check_chain_against_reference(sp, l, V, p, ref, d);
    }
    sd_sampler_free(sp);
    free(l);
    free(p);
    free(ref);
    free(d);
}
END_TEST

START_TEST(test_vocab_150k_deterministic)
{
    enum { V = 151936 };
    float *l = malloc(V * sizeof *l);
    sd_tokprob *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    for (int i = 0; i < V; i++) l[i] = (float)(8.0 * sd_rng_uniform(11, (uint64_t)i, 0));
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
    sd_sampling s = sampled(1.0f);
    s.top_k = 40;
    size_t na = sd_sampler_distribution(sp, &s, l, V, a, V);
    ck_assert_uint_eq(na, 40);
    s.top_p = 0.95f; /* trims the top-40 further */
    na = sd_sampler_distribution(sp, &s, l, V, a, V);
    size_t nb = sd_sampler_distribution(sp, &s, l, V, b, V);
    ck_assert(na >= 1 && na < 40);
    ck_assert_uint_eq(na, nb);
    ck_assert(memcmp(a, b, na * sizeof *a) == 0);
    s.top_p = 1.0f;
    s.top_k = 0; /* unfiltered: every token, sorted */
    na = sd_sampler_distribution(sp, &s, l, V, a, V);
    ck_assert_uint_eq(na, V);
    check_sorted(a, na);
    check_sums_to_one(a, na);
    sd_sampler_free(sp);
    free(l);
    free(a);
    free(b);
}
END_TEST

/* ---- penalties ---------------------------------------------------------- */

START_TEST(test_repetition_penalty)
{
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(5, &sp, NULL, 0), SD_OK);
    sd_sampling s = sd_sampling_default();
    s.repetition_penalty = 2.0f;
    float l[5] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    int32_t prompt[3] = {0, 1, 1};
    int32_t output[4] = {0, 0, 1, 4};
    sd_sampler_process_logits(sp, &s, l, 5, prompt, 3, output, 4);
    ck_assert_float_eq_tol(l[0], 1.0f, 1e-7f);  /* positive: divided, once */
    ck_assert_float_eq_tol(l[1], -4.0f, 1e-7f); /* negative: multiplied, once */
    ck_assert_float_eq(l[2], 1.0f);             /* unseen */
    ck_assert_float_eq(l[3], 0.5f);
    ck_assert_float_eq(l[4], 0.0f);
    /* Scratch is clean afterwards: the same call again gives the same change. */
    float l2[5] = {2.0f, -2.0f, 1.0f, 0.5f, 0.0f};
    int32_t bad[2] = {-1, 99}; /* out of range ids are ignored */
    sd_sampler_process_logits(sp, &s, l2, 5, prompt, 3, bad, 2);
    ck_assert_float_eq_tol(l2[0], 1.0f, 1e-7f);
    ck_assert_float_eq_tol(l2[1], -4.0f, 1e-7f);
    sd_sampler_free(sp);
}
END_TEST

START_TEST(test_presence_frequency)
{
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(5, &sp, NULL, 0), SD_OK);
    sd_sampling s = sd_sampling_default();
    s.presence_penalty = 1.0f;
    s.frequency_penalty = 0.5f;
    int32_t prompt[2] = {0, 1}; /* prompt tokens are not counted */
    int32_t output[4] = {2, 2, 3, 2};
    for (int rep = 0; rep < 2; rep++) { /* twice: counts must be cleared */
        float l[5] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
        sd_sampler_process_logits(sp, &s, l, 5, prompt, 2, output, 4);
        ck_assert_float_eq(l[0], 1.0f);
        ck_assert_float_eq(l[1], 1.0f);
        ck_assert_float_eq_tol(l[2], 1.0f - (0.5f * 3 + 1.0f), 1e-6f);
        ck_assert_float_eq_tol(l[3], 1.0f - (0.5f * 1 + 1.0f), 1e-6f);
        ck_assert_float_eq(l[4], 1.0f);
    }
    /* negative values encourage repetition */
    s.presence_penalty = -0.5f;
    s.frequency_penalty = 0.0f;
    float l[5] = {0};
    sd_sampler_process_logits(sp, &s, l, 5, NULL, 0, output, 4);
    ck_assert_float_eq_tol(l[2], 0.5f, 1e-7f);
    ck_assert_float_eq_tol(l[3], 0.5f, 1e-7f);
    /* combined with repetition: repetition first, then presence/frequency */
    s = sd_sampling_default();
    s.repetition_penalty = 2.0f;
    s.frequency_penalty = 1.0f;
    float m[5] = {4.0f, 4.0f, 4.0f, 4.0f, 4.0f};
    sd_sampler_process_logits(sp, &s, m, 5, prompt, 2, output, 4);
    ck_assert_float_eq_tol(m[0], 2.0f, 1e-6f);
    ck_assert_float_eq_tol(m[2], 4.0f / 2.0f - 3.0f, 1e-6f);
    ck_assert_float_eq(m[4], 4.0f);
    sd_sampler_free(sp);
}
END_TEST

/* allowed_token_ids, min_tokens and logit_bias before the penalties (vLLM's
 * order); the scratch marks are clean after (the same call twice). */
START_TEST(test_logits_processors)
{
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(6, &sp, NULL, 0), SD_OK);
    sd_sampling s = sd_sampling_default();
    ck_assert(!sd_sampling_processes(&s));
    static const int32_t ids[3] = {1, 2, 99}, allowed[4] = {0, 1, 2, -3}, ban[2] = {2, 5};
    static const float bias[3] = {-1.5f, 2.0f, 100.0f};
    s.bias_ids = ids;
    s.bias_values = bias;
    s.n_bias = 3; /* id 99: outside the row, skipped */
    ck_assert(sd_sampling_processes(&s));
    for (int rep = 0; rep < 2; rep++) {
        float l[6] = {1.0f, 1.0f, 1.0f, 1.0f, 1.0f, 1.0f};
        sd_sampler_process_logits(sp, &s, l, 6, NULL, 0, NULL, 0);
        ck_assert_float_eq(l[0], 1.0f);
        ck_assert_float_eq(l[1], -0.5f);
        ck_assert_float_eq(l[2], 3.0f);
        ck_assert_float_eq(l[3], 1.0f);
    }
    s.allowed = allowed;
    s.n_allowed = 4;
    s.min_tokens = 2;
    s.early_ban = ban;
    s.n_early_ban = 2;
    s.repetition_penalty = 2.0f;
    int32_t out[1] = {0};
    for (size_t n_out = 0; n_out <= 2; n_out++) {
        float l[6] = {4.0f, 4.0f, 4.0f, 4.0f, 4.0f, 4.0f};
        sd_sampler_process_logits(sp, &s, l, 6, NULL, 0, n_out ? out : NULL, n_out);
        ck_assert_float_eq(l[0], n_out ? 2.0f : 4.0f); /* repetition after the bias: 4 / 2 */
        ck_assert_float_eq(l[1], 2.5f);
        if (n_out < 2) ck_assert(isinf(l[2]) && l[2] < 0); /* held back before 2 output tokens */
        else ck_assert_float_eq(l[2], 6.0f);
        ck_assert(isinf(l[3]) && isinf(l[4]) && isinf(l[5])); /* not allowed (5 is banned too) */
    }
    /* greedy sampling picks within the allowed tokens */
    float l[6] = {0.0f, 0.1f, 0.2f, 9.0f, 9.0f, 9.0f};
    s.repetition_penalty = 1.0f;
    ck_assert_int_eq(sd_sampler_sample(sp, &s, l, 6, NULL, 0, NULL, 0, 0), 0); /* 1: -1.4, 2: banned */
    sd_sampling_drop_processors(&s);
    ck_assert(!sd_sampling_processes(&s));
    ck_assert(!s.bias_ids && !s.allowed && !s.early_ban && s.min_tokens == 0);
    sd_sampler_free(sp);
}
END_TEST

START_TEST(test_validate_processors)
{
    char err[128];
    sd_sampling s = sd_sampling_default();
    static const int32_t ids[2] = {1, -2}, neg[1] = {-1};
    static const float bias[2] = {100.0f, -100.5f}, nan_bias[1] = {NAN};
    s.bias_ids = ids;
    s.bias_values = bias;
    s.n_bias = 1;
    ck_assert_int_eq(sd_sampling_validate(&s, err, sizeof err), SD_OK);
    s.n_bias = 2;
    ck_assert_int_eq(sd_sampling_validate(&s, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, "logit_bias") && strstr(err, "negative"), "%s", err);
    s.bias_ids = (const int32_t[2]){1, 2};
    ck_assert_int_eq(sd_sampling_validate(&s, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, "[-100, 100]"), "%s", err);
    s.bias_values = nan_bias;
    s.n_bias = 1;
    ck_assert_int_eq(sd_sampling_validate(&s, err, sizeof err), SD_ERR_ARG);
    s.n_bias = SD_MAX_LOGIT_BIAS + 1;
    ck_assert_int_eq(sd_sampling_validate(&s, err, sizeof err), SD_ERR_ARG);
    s = sd_sampling_default();
    s.allowed = neg;
    s.n_allowed = 1;
    ck_assert_int_eq(sd_sampling_validate(&s, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, "allowed_token_ids"), "%s", err);
    s.allowed = NULL; /* counted but missing */
    ck_assert_int_eq(sd_sampling_validate(&s, err, sizeof err), SD_ERR_ARG);
}
END_TEST

/* ---- validation --------------------------------------------------------- */

static void expect_invalid(sd_sampling s, const char *field)
{
    char err[128] = "";
    ck_assert_int_eq(sd_sampling_validate(&s, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, field) != NULL, "message '%s' does not name %s", err, field);
}

START_TEST(test_validate)
{
    sd_sampling d = sd_sampling_default();
    char err[128];
    ck_assert_int_eq(sd_sampling_validate(&d, err, sizeof err), SD_OK);
    ck_assert_float_eq(d.temperature, 0.0f);
    ck_assert_int_eq(d.top_k, 0);
    ck_assert_float_eq(d.top_p, 1.0f);
    ck_assert_float_eq(d.repetition_penalty, 1.0f);
    sd_sampling s;
    s = d;
    s.temperature = -0.1f;
    expect_invalid(s, "temperature");
    s = d;
    s.temperature = NAN;
    expect_invalid(s, "temperature");
    s = d;
    s.temperature = INFINITY;
    expect_invalid(s, "temperature");
    s = d;
    s.top_k = -1;
    expect_invalid(s, "top_k");
    s = d;
    s.top_p = 0.0f;
    expect_invalid(s, "top_p");
    s = d;
    s.top_p = 1.01f;
    expect_invalid(s, "top_p");
    s = d;
    s.top_p = NAN;
    expect_invalid(s, "top_p");
    s = d;
    s.min_p = -0.01f;
    expect_invalid(s, "min_p");
    s = d;
    s.min_p = 1.5f;
    expect_invalid(s, "min_p");
    s = d;
    s.repetition_penalty = 0.0f;
    expect_invalid(s, "repetition_penalty");
    s = d;
    s.repetition_penalty = -1.0f;
    expect_invalid(s, "repetition_penalty");
    s = d;
    s.presence_penalty = 2.5f;
    expect_invalid(s, "presence_penalty");
    s = d;
    s.frequency_penalty = -2.01f;
    expect_invalid(s, "frequency_penalty");
    s = d;
    s.frequency_penalty = NAN;
    expect_invalid(s, "frequency_penalty");
    s = d;
    s.temperature = 0.7f;
    s.top_k = 50;
    s.top_p = 0.9f;
    s.min_p = 0.05f;
    s.repetition_penalty = 1.1f;
    s.presence_penalty = -2.0f;
    s.frequency_penalty = 2.0f;
    ck_assert_int_eq(sd_sampling_validate(&s, NULL, 0), SD_OK);
}
END_TEST

/* ---- randomness --------------------------------------------------------- */

START_TEST(test_reproducible_sampling)
{
    enum { V = 64 };
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
    sd_sampling s = sampled(1.0f);
    s.seed = 1234;
    float base[V];
    for (int i = 0; i < V; i++) base[i] = (float)(i % 7) * 0.3f; /* fairly flat: many likely tokens */
    int32_t first[32];
    int differs = 0;
    for (uint64_t pos = 0; pos < 32; pos++) {
        float l[V];
        memcpy(l, base, sizeof l);
        first[pos] = sd_sampler_sample(sp, &s, l, V, NULL, 0, NULL, 0, pos);
        ck_assert(first[pos] >= 0 && first[pos] < V);
        memcpy(l, base, sizeof l);
        ck_assert_int_eq(sd_sampler_sample(sp, &s, l, V, NULL, 0, NULL, 0, pos), first[pos]);
        if (pos > 0 && first[pos] != first[pos - 1]) differs = 1;
    }
    ck_assert(differs); /* positions draw different uniforms */
    /* In any order, same answer (pure function of seed and position). */
    for (int pos = 31; pos >= 0; pos--) {
        float l[V];
        memcpy(l, base, sizeof l);
        ck_assert_int_eq(sd_sampler_sample(sp, &s, l, V, NULL, 0, NULL, 0, (uint64_t)pos), first[pos]);
    }
    /* Another seed gives another sequence. */
    s.seed = 1235;
    int other = 0;
    for (uint64_t pos = 0; pos < 32; pos++) {
        float l[V];
        memcpy(l, base, sizeof l);
        if (sd_sampler_sample(sp, &s, l, V, NULL, 0, NULL, 0, pos) != first[pos]) other = 1;
    }
    ck_assert(other);
    sd_sampler_free(sp);
}
END_TEST

/* sd_sampler_sample with temperature > 0 is exactly sd_sample_sparse over
 * sd_sampler_distribution with u = sd_rng_uniform(seed, position, 0), so a
 * verifier that builds the distribution itself draws the same tokens. */
START_TEST(test_sample_equals_distribution_draw)
{
    enum { V = 3000 };
    float *base = malloc(V * sizeof *base), *l = malloc(V * sizeof *l);
    sd_tokprob *d = malloc(V * sizeof *d);
    for (int i = 0; i < V; i++) base[i] = (float)(6.0 * sd_rng_uniform(3, (uint64_t)i, 2));
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
    sd_sampling s = sampled(0.9f);
    s.seed = 555;
    s.top_p = 0.97f;
    size_t bad = 0;
    for (uint64_t pos = 0; pos < 200; pos++) {
        memcpy(l, base, V * sizeof *l);
        int32_t t = sd_sampler_sample(sp, &s, l, V, NULL, 0, NULL, 0, pos);
        size_t n = sd_sampler_distribution(sp, &s, base, V, d, V);
        if (t != sd_sample_sparse(d, n, sd_rng_uniform(s.seed, pos, 0))) bad++;
    }
    ck_assert_uint_eq(bad, 0);
    sd_sampler_free(sp);
    free(base);
    free(l);
    free(d);
}
END_TEST

/* Logits for the draw tests: a spread, ties (equal logits, so the order of
 * equal probabilities by id matters), -inf and NaN entries, a peak. */
static void draw_logits(float *l, int V, uint64_t seed)
{
    for (int i = 0; i < V; i++) l[i] = (float)(8.0 * sd_rng_uniform(seed, (uint64_t)i, 2) - 4.0);
    for (int i = 0; i < V; i += 5) l[i] = l[i / 2]; /* ties */
    l[V / 3] = -INFINITY;
    l[V / 4] = NAN;
    l[V - 1] += 9.0f;
}

/* sd_sampler_draw is sd_sample_sparse over the full sd_sampler_distribution
 * — the same token for every u — without the full sort; and sd_sampler_prob
 * is sd_sparse_prob of that distribution, bit for bit. Temperatures from
 * peaked to flat, min-p on and off, top-k / top-p (the sorted path), vocab
 * sizes on both sides of the radix sort's threshold. */
START_TEST(test_draw_and_prob_equal_sorted)
{
    static const int vocabs[] = {7, 300, 3000, 8192};
    static const float temps[] = {0.2f, 0.8f, 1.5f, 8.0f};
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        int V = vocabs[vi];
        float *l = malloc((size_t)V * sizeof *l);
        sd_tokprob *d = malloc((size_t)V * sizeof *d);
        sd_sampler *sp;
        ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
        draw_logits(l, V, 40u + (uint64_t)vi);
        for (size_t ti = 0; ti < sizeof temps / sizeof temps[0]; ti++)
            for (int f = 0; f < 4; f++) {
                sd_sampling s = sampled(temps[ti]);
                s.min_p = f == 1 ? 0.05f : 0.0f;
                s.top_k = f == 2 ? 50 : 0;
                s.top_p = f == 3 ? 0.9f : 1.0f;
                size_t n = sd_sampler_distribution(sp, &s, l, V, d, (size_t)V);
                ck_assert_uint_gt(n, 0);
                for (int k = 0; k < 400; k++) {
                    double u = k == 399 ? 0x1.fffffffffffffp-1 : k / 399.0;
                    int32_t want = sd_sample_sparse(d, n, u), got = sd_sampler_draw(sp, &s, l, V, u);
                    ck_assert_msg(got == want, "V %d T %g filter %d u %a: %d, sorted %d", V, temps[ti], f, u, got,
                                  want);
                }
                for (int t = 0; t<V; t += V> 1000 ? 7 : 1) {
                    float want = sd_sparse_prob(d, n, t), got = sd_sampler_prob(sp, &s, l, V, t);
                    ck_assert_msg(memcmp(&want, &got, sizeof got) == 0,
                                  "V %d T %g filter %d token %d: %a, "
                                  "sorted %a",
                                  V, temps[ti], f, t, got, want);
                }
            }
        sd_sampler_free(sp);
        free(l);
        free(d);
    }
}
END_TEST

/* The residual draw written out over the sorted distribution (the rule of
 * sampler.h: r = p - q, exact mass, walk in p's order, p itself when no
 * mass is left): sd_sampler_residual must give its token for every u. */
static int32_t residual_ref(const sd_tokprob *p, size_t np, const sd_tokprob *q, size_t nq, int V, double u)
{
    double *r = calloc((size_t)V, sizeof *r);
    for (size_t j = 0; j < np; j++) r[p[j].token] = p[j].prob;
    for (size_t j = 0; j < nq; j++)
        if (q[j].token >= 0 && q[j].token < V && q[j].prob > 0.0f) r[q[j].token] -= q[j].prob;
    sd_exsum m;
    sd_exsum_init(&m);
    for (size_t j = 0; j < np; j++)
        if (r[p[j].token] > 0.0) sd_exsum_add_double(&m, r[p[j].token]);
    double total = sd_exsum_value(&m), cum = 0.0;
    int32_t x = -1;
    for (size_t j = 0; j < np && total > 0.0; j++) {
        if (!(r[p[j].token] > 0.0)) continue;
        x = p[j].token;
        cum += r[p[j].token];
        if (cum > u * total) break;
    }
    free(r);
    return total > 0.0 ? x : sd_sample_sparse(p, np, u);
}

START_TEST(test_residual_equals_sorted)
{
    static const int vocabs[] = {7, 3000, 8192};
    for (size_t vi = 0; vi < sizeof vocabs / sizeof vocabs[0]; vi++) {
        int V = vocabs[vi];
        float *l = malloc((size_t)V * sizeof *l);
        sd_tokprob *d = malloc((size_t)V * sizeof *d), q[70];
        sd_sampler *sp;
        ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
        draw_logits(l, V, 70u + (uint64_t)vi);
        for (int f = 0; f < 3; f++)
            for (int qk = 0; qk < 4; qk++) {
                sd_sampling s = sampled(f == 2 ? 1.5f : 0.8f);
                s.min_p = f == 1 ? 0.02f : 0.0f;
                size_t n = sd_sampler_distribution(sp, &s, l, V, d, (size_t)V), nq = 0;
                if (qk == 0) /* a one-hot draft on the most probable token */
                    q[nq++] = (sd_tokprob){d[0].token, 1.0f};
                else if (qk == 1) /* q equal to p's head: little residual mass there */
                    for (size_t j = 0; j < n && nq < 64; j++) q[nq++] = d[j];
                else if (qk == 2) { /* spread, a duplicate, a token outside, one p leaves out */
                    for (int j = 0; j < 40; j++) q[nq++] = (sd_tokprob){(int32_t)((j * 7919) % V), 0.02f};
                    q[nq++] = q[3];
                    q[nq++] = (sd_tokprob){V + 5, 0.3f};
                    q[nq++] = (sd_tokprob){V / 3, 0.1f}; /* -inf logit */
                } else { /* q = p on a small vocabulary: no residual mass, a draw from p */
                    for (size_t j = 0; j < n && nq < 64; j++) q[nq++] = d[j];
                }
                for (int k = 0; k < 200; k++) {
                    double u = k == 199 ? 0x1.fffffffffffffp-1 : k / 199.0;
                    int32_t want = residual_ref(d, n, q, nq, V, u);
                    int32_t got = sd_sampler_residual(sp, &s, l, V, q, nq, u);
                    ck_assert_msg(got == want, "V %d filter %d q %d u %a: %d, sorted %d", V, f, qk, u, got, want);
                }
            }
        sd_sampler_free(sp);
        free(l);
        free(d);
    }
}
END_TEST

START_TEST(test_draw_and_prob_edges)
{
    enum { V = 16 };
    float l[V];
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
    sd_sampling s = sampled(1.0f);
    for (int i = 0; i < V; i++) l[i] = -INFINITY;
    ck_assert_int_eq(sd_sampler_draw(sp, &s, l, V, 0.5), -1); /* no token with probability */
    ck_assert(sd_sampler_prob(sp, &s, l, V, 3) < 0.0f);
    for (int i = 0; i < V; i++) l[i] = NAN;
    ck_assert_int_eq(sd_sampler_draw(sp, &s, l, V, 0.5), -1);
    ck_assert(sd_sampler_prob(sp, &s, l, V, 3) < 0.0f);
    for (int i = 0; i < V; i++) l[i] = (float)i;
    l[4] = l[9] = INFINITY; /* the +inf logits share all the mass */
    for (int k = 0; k < 10; k++) {
        int32_t x = sd_sampler_draw(sp, &s, l, V, k / 10.0);
        ck_assert(x == 4 || x == 9);
    }
    ck_assert(sd_sampler_prob(sp, &s, l, V, 4) == 0.5f);
    ck_assert(sd_sampler_prob(sp, &s, l, V, 5) == 0.0f);
    ck_assert(sd_sampler_prob(sp, &s, l, V, -1) == 0.0f);
    sd_sampling g = sampled(0.0f); /* greedy: the argmax, one-hot */
    ck_assert_int_eq(sd_sampler_draw(sp, &g, l, V, 0.7), 4);
    ck_assert(sd_sampler_prob(sp, &g, l, V, 4) == 1.0f && sd_sampler_prob(sp, &g, l, V, 9) == 0.0f);
    ck_assert_int_eq(sd_sampler_draw(sp, &s, l, V + 1, 0.5), -1); /* vocab past the sampler's */
    sd_sampler_free(sp);
}
END_TEST

START_TEST(test_rng_basic)
{
    ck_assert(sd_rng_uniform(1, 2, 3) == sd_rng_uniform(1, 2, 3));
    ck_assert(sd_rng_uniform(1, 2, 0) != sd_rng_uniform(1, 3, 0));
    ck_assert(sd_rng_uniform(1, 2, 0) != sd_rng_uniform(1, 2, 1));
    ck_assert(sd_rng_uniform(1, 2, 0) != sd_rng_uniform(2, 2, 0));
    ck_assert(sd_rng_uniform(0, 0, 0) != sd_rng_uniform(0, 1, 0));
    /* seed and position are not interchangeable */
    ck_assert(sd_rng_uniform(5, 9, 0) != sd_rng_uniform(9, 5, 0));
}
END_TEST

/* Mean, variance and a 100-bin chi-square over 10^6 draws along one axis.
 * Mean of U[0,1) is 1/2 (sd of the sample mean 2.9e-4; tolerance 2e-3 ≈ 7
 * sd); variance 1/12 (sd of the sample variance ≈ 7.5e-5; tolerance 5e-4).
 * Chi-square with 99 degrees of freedom: 99.9% critical value 148.23. */
static void check_uniform_stream(int axis)
{
    enum { N = 1000000, BINS = 100 };
    static long bins[BINS];
    memset(bins, 0, sizeof bins);
    double sum = 0.0, sum2 = 0.0;
    long out_of_range = 0;
    for (uint64_t i = 0; i < N; i++) {
        double u = axis == 0   ? sd_rng_uniform(42, i, 0)
                   : axis == 1 ? sd_rng_uniform(i, 17, 0)
                               : sd_rng_uniform(99, 5, (uint32_t)i);
        if (!(u >= 0.0 && u < 1.0)) {
            out_of_range++;
            continue;
        }
        sum += u;
        sum2 += u * u;
        bins[(int)(u * BINS)]++;
    }
    ck_assert_int_eq(out_of_range, 0);
    double mean = sum / N, var = sum2 / N - mean * mean;
    ck_assert_double_eq_tol(mean, 0.5, 2e-3);
    ck_assert_double_eq_tol(var, 1.0 / 12.0, 5e-4);
    double e = (double)N / BINS, chi2 = 0.0;
    for (int b = 0; b < BINS; b++) chi2 += (bins[b] - e) * (bins[b] - e) / e;
    ck_assert_msg(chi2 < 148.23, "axis %d: chi2 %.2f >= 148.23 (df 99, 99.9%%)", axis, chi2);
}

START_TEST(test_rng_uniformity)
{
    check_uniform_stream(0); /* over positions */
    check_uniform_stream(1); /* over seeds */
    check_uniform_stream(2); /* over streams */
}
END_TEST

START_TEST(test_sample_sparse_edges)
{
    const sd_tokprob d[4] = {{7, 0.5f}, {3, 0.0f}, {9, 0.3f}, {2, 0.2f}};
    ck_assert_int_eq(sd_sample_sparse(d, 4, 0.0), 7);
    ck_assert_int_eq(sd_sample_sparse(d, 4, 0.4999), 7);
    ck_assert_int_eq(sd_sample_sparse(d, 4, 0.5001), 9);
    ck_assert_int_eq(sd_sample_sparse(d, 4, 0.7999), 9);
    ck_assert_int_eq(sd_sample_sparse(d, 4, 0.8001), 2);
    ck_assert_int_eq(sd_sample_sparse(d, 4, 1.0 - 0x1.0p-53), 2);
    ck_assert_int_eq(sd_sample_sparse(d, 4, 1.0), 2); /* rounding guard */
    ck_assert_int_eq(sd_sample_sparse(d, 0, 0.5), -1);
    const sd_tokprob z[2] = {{1, 0.0f}, {2, 0.0f}};
    ck_assert_int_eq(sd_sample_sparse(z, 2, 0.5), -1);
    /* unnormalised input: the total is used */
    const sd_tokprob w[2] = {{4, 2.0f}, {5, 6.0f}};
    ck_assert_int_eq(sd_sample_sparse(w, 2, 0.24), 4);
    ck_assert_int_eq(sd_sample_sparse(w, 2, 0.26), 5);
    /* trailing zero-probability entry is never drawn */
    const sd_tokprob t[2] = {{4, 1.0f}, {5, 0.0f}};
    ck_assert_int_eq(sd_sample_sparse(t, 2, 0.999999), 4);
}
END_TEST

/* 200,000 draws from a known 10-token distribution; chi-square goodness of
 * fit with 9 degrees of freedom, 99.9% critical value 27.877. */
START_TEST(test_empirical_sampling)
{
    enum { K = 10, N = 200000 };
    const float p[K] = {0.25f, 0.2f, 0.15f, 0.1f, 0.08f, 0.07f, 0.06f, 0.05f, 0.03f, 0.01f};
    sd_tokprob d[K];
    for (int i = 0; i < K; i++) {
        d[i].token = 100 + i;
        d[i].prob = p[i];
    }
    long cnt[K] = {0}, bad = 0;
    for (uint64_t i = 0; i < N; i++) {
        int32_t t = sd_sample_sparse(d, K, sd_rng_uniform(2024, i, 1));
        if (t >= 100 && t < 100 + K) cnt[t - 100]++;
        else bad++;
    }
    ck_assert_int_eq(bad, 0);
    double chi2 = 0.0;
    for (int i = 0; i < K; i++) {
        double e = (double)N * p[i];
        chi2 += (cnt[i] - e) * (cnt[i] - e) / e;
    }
    ck_assert_msg(chi2 < 27.877, "chi2 %.2f >= 27.877 (df 9, 99.9%%)", chi2);
}
END_TEST

/* Full chain end to end: sampled tokens from sd_sampler_sample follow the
 * filtered distribution (top_k 3 over 5 tokens). Chi-square df 2, 99.9%
 * critical value 13.816. */
START_TEST(test_chain_sampling_distribution)
{
    enum { V = 5, N = 30000 };
    const float base[V] = {0.0f, 1.0f, 0.5f, -1.0f, 0.8f};
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
    sd_sampling s = sampled(1.0f);
    s.top_k = 3;
    s.seed = 77;
    double z = exp(1.0) + exp(0.8) + exp(0.5);
    const int ids[3] = {1, 4, 2};
    const double want[3] = {exp(1.0) / z, exp(0.8) / z, exp(0.5) / z};
    long cnt[V] = {0}, bad = 0;
    for (uint64_t pos = 0; pos < N; pos++) {
        float l[V];
        memcpy(l, base, sizeof l);
        int32_t t = sd_sampler_sample(sp, &s, l, V, NULL, 0, NULL, 0, pos);
        if (t >= 0 && t < V) cnt[t]++;
        else bad++;
    }
    ck_assert_int_eq(bad, 0);
    ck_assert_int_eq(cnt[0] + cnt[3], 0);
    double chi2 = 0.0;
    for (int i = 0; i < 3; i++) {
        double e = N * want[i];
        chi2 += (cnt[ids[i]] - e) * (cnt[ids[i]] - e) / e;
    }
    ck_assert_msg(chi2 < 13.816, "chi2 %.2f >= 13.816 (df 2, 99.9%%)", chi2);
    sd_sampler_free(sp);
}
END_TEST

/* No scratch for an empty vocabulary: a status, no sampler, a message. */
START_TEST(test_new_refuses_empty_vocab)
{
    char err[128] = "";
    sd_sampler *sp = (sd_sampler *)err; /* not NULL: the call clears it */
    ck_assert_int_eq(sd_sampler_new(0, &sp, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(sp);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(sd_sampler_new(-5, &sp, NULL, 0), SD_ERR_ARG);
    sd_sampler_free(NULL);
}
END_TEST

static Suite *sampler_suite(void)
{
    Suite *s = suite_create("sampler");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_softmax_analytic);
    tcase_add_test(tc, test_temperature_scaling);
    tcase_add_test(tc, test_greedy_argmax);
    tcase_add_test(tc, test_top_k_one_hot);
    tcase_add_test(tc, test_top_k_keeps_k_largest);
    tcase_add_test(tc, test_top_p);
    tcase_add_test(tc, test_min_p);
    tcase_add_test(tc, test_uniform_ties);
    tcase_add_test(tc, test_neg_inf_excluded);
    tcase_add_test(tc, test_cap_truncates_and_renormalises);
    tcase_add_test(tc, test_large_vocab_matches_reference);
    tcase_add_test(tc, test_vocab_150k_deterministic);
    tcase_add_test(tc, test_repetition_penalty);
    tcase_add_test(tc, test_presence_frequency);
    tcase_add_test(tc, test_validate);
    tcase_add_test(tc, test_logits_processors);
    tcase_add_test(tc, test_validate_processors);
    tcase_add_test(tc, test_reproducible_sampling);
    tcase_add_test(tc, test_sample_equals_distribution_draw);
    tcase_add_test(tc, test_draw_and_prob_equal_sorted);
    tcase_add_test(tc, test_draw_and_prob_edges);
    tcase_add_test(tc, test_residual_equals_sorted);
    tcase_add_test(tc, test_rng_basic);
    tcase_add_test(tc, test_rng_uniformity);
    tcase_add_test(tc, test_sample_sparse_edges);
    tcase_add_test(tc, test_empirical_sampling);
    tcase_add_test(tc, test_chain_sampling_distribution);
    tcase_add_test(tc, test_logprob_row);
    tcase_add_test(tc, test_new_refuses_empty_vocab);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(sampler_suite()); }
