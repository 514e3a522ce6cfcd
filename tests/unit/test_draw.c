/* test_draw.c — Check suite for the row draw (kernels/rowdraw.h,
 * kernels/exact.h, kernels/cpu/cpu_draw.c, the backends' draw_rows): the
 * reference of the CUDA kernel must be the host sampler, bit for bit.
 *
 * The rows are random — peaked and flat softmaxes, ties, -inf and NaN
 * logits — and every answer is compared with sd_sampler_draw,
 * sd_sampler_residual and sd_sampler_prob on the same row (the token, the
 * probability's bits). Small slice capacities make the walk cut its
 * slices by a radix select, as a flat row does on the device. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "cpu_draw.h"
#include "exact.h"
#include "exsum.h"
#include "rowdraw.h"
#include "sampler.h"
#include "testutil.h"
#include "vecmath.h"

/* xorshift64*: the test's own deterministic stream. */
static uint64_t rs = 0x9e3779b97f4a7c15ull;
static uint64_t rnd(void)
{
    rs ^= rs >> 12;
    rs ^= rs << 25;
    rs ^= rs >> 27;
    return rs * 0x2545f4914f6cdd1dull;
}
static double unif(void) { return (double)(rnd() >> 11) * 0x1.0p-53; }
static float gauss(void)
{
    double a = unif() + 1e-12, b = unif();
    return (float)(sqrt(-2.0 * log(a)) * cos(6.283185307179586 * b));
}

static uint32_t bits_of(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    return u;
}

/* The vectorised numerators (sd_exp_weights, AVX2 where the CPU has it)
 * and the scalar formula give the same bits, over the whole range. */
START_TEST(exp_weight_is_one_formula)
{
    enum { N = 4096 };
    float *x = malloc(N * sizeof *x), *w = malloc(N * sizeof *w);
    const float temps[] = {1.0f, 0.7f, 0.05f, 3.0f};
    for (int round = 0; round < 64; round++) {
        for (int i = 0; i < N; i++) x[i] = (float)(unif() * 200.0 - 180.0);
        x[7] = NAN;
        x[8] = -INFINITY;
        x[9] = -87.3f;
        x[10] = 20.0f;
        float mx = 20.0f, t = temps[round % 4];
        sd_exp_weights(x, N, mx, t, w);
        for (int i = 0; i < N; i++) ck_assert_uint_eq(bits_of(w[i]), bits_of(sd_rd_exp_weight(x[i], mx, t)));
        for (int i = 0; i < N; i++) {
            float a = (x[i] - mx) / t; /* the argument's own rounding aside */
            double e = a != a ? 0.0 : exp((double)a);
            if (e > 1e-37) ck_assert_msg(fabs(w[i] - e) <= 4e-7 * e, "exp off at %g: %g vs %g", x[i], w[i], e);
        }
    }
    free(x);
    free(w);
}
END_TEST

/* exact.h's sums are exsum's, and exsum's rounding is exact: against a
 * long sum in double-double of few terms. */
START_TEST(wide_sums_are_exsum)
{
    for (int round = 0; round < 200; round++) {
        int n = 1 + (int)(rnd() % 5000);
        sd_exsum e;
        sd_exsum_init(&e);
        uint64_t a[3] = {0}, b[3] = {0};
        for (int i = 0; i < n; i++) {
            float f = round % 3 == 0 ? (float)unif() : (float)ldexp(unif(), -(int)(rnd() % 140));
            sd_exsum_add_float(&e, f);
            sd_wide_add_float(i % 2 ? a : b, 3, f);
        }
        double d = unif() * 0.25;
        d = ldexp(floor(ldexp(d, 60)), -60); /* on the grid */
        sd_exsum_add_double(&e, d);
        sd_wide_add_double(a, 3, d);
        sd_wide_add(a, b, 3);
        ck_assert(sd_wide_to_double(a, 3) == sd_exsum_value(&e));
        uint64_t c[3];
        memcpy(c, a, sizeof c);
        sd_wide_sub(c, b, 3);
        sd_wide_add(c, b, 3);
        ck_assert(memcmp(c, a, sizeof c) == 0);
    }
    uint64_t t[3] = {0}; /* a tie rounds to even: 2^53 + 1 units */
    sd_wide_add_shifted(t, 3, (1ull << 53) + 1, 0);
    ck_assert(sd_wide_to_double(t, 3) == ldexp(1.0, 53 - 149));
    sd_wide_add_shifted(t, 3, 2, 0); /* 2^53 + 3: up */
    ck_assert(sd_wide_to_double(t, 3) == ldexp((double)((1ull << 53) + 4), -149));
}
END_TEST

/* A random row of n logits of one of several shapes. */
static void make_row(float *x, int n, int shape)
{
    float scale = shape == 0 ? 1.0f : shape == 1 ? 6.0f : shape == 2 ? 0.05f : 3.0f;
    for (int i = 0; i < n; i++) x[i] = gauss() * scale;
    if (shape == 3) /* ties: a few values repeated */
        for (int i = 0; i < n; i++) x[i] = (float)(int)(x[i] * 2.0f) * 0.5f;
    if (shape == 4) /* flat: every logit equal */
        for (int i = 0; i < n; i++) x[i] = 1.25f;
    if (shape == 5) /* mostly -inf (a structured-output mask), a NaN */
        for (int i = 0; i < n; i++)
            if (rnd() % 8) x[i] = i == 3 ? NAN : -INFINITY;
}

typedef struct cmp_ctx {
    sd_sampler *sp;
    sd_cpu_draw_scratch *scr[3];
    sd_backend *be;
} cmp_ctx;

/* The row draw of x against the sampler, at every capacity. */
static void check_row(cmp_ctx *c, float *x, int n, const sd_sampling *s, const sd_draw_row *r)
{
    int32_t want =
        r->nq ? sd_sampler_residual(c->sp, s, x, n, r->q, (size_t)r->nq, r->u) : sd_sampler_draw(c->sp, s, x, n, r->u);
    float wp = r->token >= 0 ? sd_sampler_prob(c->sp, s, x, n, r->token) : 0.0f;
    int a = sd_argmax(x, n);
    if (a < 0 || x[a] == -INFINITY) { /* no token of positive probability: the one-hot argmax (the host's fallback) */
        want = a;
        wp = a < 0 ? -1.0f : r->token == a ? 1.0f : 0.0f;
    }
    for (int k = 0; k < 3; k++) {
        if (c->scr[k]->cap * 200 < n) continue; /* a slice a token over a large row: slow, the same path */
        sd_draw_out o = sd_cpu_draw_row(x, n, r, c->scr[k]);
        ck_assert_msg(o.token == want, "cap %d: token %d, the sampler %d (n %d, T %g, min_p %g, u %g, nq %d)",
                      c->scr[k]->cap, o.token, want, n, r->temperature, r->min_p, r->u, r->nq);
        ck_assert_msg(bits_of(o.prob) == bits_of(wp), "cap %d: p %a, the sampler %a", c->scr[k]->cap, o.prob, wp);
    }
    sd_draw_out o;
    ck_assert_int_eq(c->be->ops->draw_rows(c->be, &o, x, r, 1, n), SD_OK);
    ck_assert_int_eq(o.token, want);
}

START_TEST(row_draw_is_the_samplers)
{
    enum { MAXV = 6000 };
    cmp_ctx c;
    ck_assert_int_eq(sd_sampler_new(MAXV, &c.sp, NULL, 0), SD_OK);
    const int caps[3] = {1, 37, SD_DRAW_CAP};
    for (int k = 0; k < 3; k++) ck_assert_int_eq(sd_cpu_draw_scratch_new(MAXV, caps[k], &c.scr[k], NULL, 0), SD_OK);
    char err[128];
    sd_cpu_draw_scratch *none;
    ck_assert_int_eq(sd_cpu_draw_scratch_new(0, 4, &none, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(none);
    ck_assert_ptr_nonnull(strstr(err, "vocab 0"));
    ck_assert_int_eq(sd_backend_cpu_new(1, &c.be, NULL, 0), SD_OK);
    float *x = malloc(MAXV * sizeof *x);
    sd_tokprob q[8];
    const int sizes[] = {1, 2, 7, 100, 1000, MAXV};
    const float temps[] = {0.3f, 0.7f, 1.0f, 1.6f};
    const float minps[] = {0.0f, 0.05f, 0.3f};
    for (int round = 0; round < 360; round++) {
        int n = sizes[round % 6], shape = (round / 6) % 6;
        make_row(x, n, shape);
        sd_sampling s = sd_sampling_default();
        s.temperature = temps[round % 4];
        s.min_p = minps[(round / 4) % 3];
        const int ks[] = {0, 0, 1, 5, 50, n - 1, n + 3};
        const float ps[] = {1.0f, 1.0f, 0.9f, 0.5f, 0.05f};
        s.top_k = ks[(round / 3) % 7];
        s.top_p = ps[(round / 5) % 5];
        sd_draw_row r = {.temperature = s.temperature,
                         .min_p = s.min_p,
                         .token = (int32_t)(rnd() % (unsigned)n),
                         .top_k = s.top_k,
                         .top_p = s.top_p};
        r.u = round % 7 == 0 ? 0.0 : round % 7 == 1 ? 0.9999999 : unif();
        check_row(&c, x, n, &s, &r);
        /* a residual draw: q of a few tokens (one repeated, one outside, one of p 0) */
        int nq = 1 + (int)(rnd() % 6);
        for (int j = 0; j < nq; j++) q[j] = (sd_tokprob){(int32_t)(rnd() % (unsigned)n), (float)unif() * 0.5f};
        if (nq > 2) q[2] = q[0];
        if (nq > 3) q[3].token = n + 5;
        if (nq > 4) q[4].prob = 0.0f;
        r.q = q;
        r.nq = nq;
        r.token = q[0].token;
        check_row(&c, x, n, &s, &r);
        /* q covering p: no residual mass, a draw from p */
        sd_tokprob all = {sd_argmax(x, n), 1.0f};
        r.q = &all;
        r.nq = 1;
        if (n == 1 || shape == 5) check_row(&c, x, n, &s, &r);
    }
    /* no token of positive probability: the one-hot argmax (the first logit not NaN); every logit NaN: -1, -1 */
    for (int i = 0; i < 10; i++) x[i] = i % 2 ? -INFINITY : NAN;
    sd_draw_row r = {.temperature = 1.0f, .u = 0.5, .token = 1};
    sd_draw_out o = sd_cpu_draw_row(x, 10, &r, c.scr[2]);
    ck_assert_int_eq(o.token, 1);
    ck_assert(o.prob == 1.0f);
    for (int i = 0; i < 10; i++) x[i] = NAN;
    o = sd_cpu_draw_row(x, 10, &r, c.scr[2]);
    ck_assert_int_eq(o.token, -1);
    ck_assert(o.prob == -1.0f);
    free(x);
    for (int k = 0; k < 3; k++) sd_cpu_draw_scratch_free(c.scr[k]);
    sd_sampler_free(c.sp);
    sd_backend_free(c.be);
}
END_TEST

/* The logits processors as a mask and edits on the row (what a device
 * applies) against the host's sd_sampler_process_logits: the same token,
 * the same p. */
START_TEST(row_edits_are_the_processors)
{
    enum { V = 3000, H = 300 };
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
    sd_cpu_draw_scratch *scr;
    ck_assert_int_eq(sd_cpu_draw_scratch_new(V, SD_DRAW_CAP, &scr, NULL, 0), SD_OK);
    float *x = malloc(V * sizeof *x), *a = malloc(V * sizeof *a), *b = malloc(V * sizeof *b);
    int32_t prompt[H], output[H], bias_ids[16], allowed[64], ban[3] = {0, 7, 7};
    float bias_v[16];
    uint32_t bits[(V + 31) / 32];
    int drawn_diff = 0;
    for (int round = 0; round < 200; round++) {
        make_row(x, V, round % 4);
        for (int i = 0; i < H; i++) {
            prompt[i] = (int32_t)(rnd() % 400);
            output[i] = (int32_t)(rnd() % 400);
        }
        sd_sampling s = sd_sampling_default();
        s.temperature = 0.6f + 0.2f * (float)(round % 5);
        s.min_p = round % 3 == 0 ? 0.05f : 0.0f;
        s.repetition_penalty = round % 2 ? 1.3f : 1.0f;
        s.presence_penalty = round % 4 < 2 ? 0.7f : 0.0f;
        s.frequency_penalty = round % 8 < 4 ? 0.35f : 0.0f;
        for (int i = 0; i < 16; i++) {
            bias_ids[i] = (int32_t)(rnd() % 400);
            bias_v[i] = (float)(unif() * 20.0 - 10.0);
        }
        bias_ids[3] = bias_ids[2]; /* a repeated id: added in order */
        s.bias_ids = bias_ids;
        s.bias_values = bias_v;
        s.n_bias = round % 5 ? 16 : 0;
        for (int i = 0; i < 64; i++) allowed[i] = (int32_t)(rnd() % 500);
        allowed[5] = V + 3; /* outside: skipped */
        s.allowed = allowed;
        s.n_allowed = round % 6 == 1 ? 64 : 0;
        s.min_tokens = round % 7 == 2 ? 400 : 0;
        s.early_ban = ban;
        s.n_early_ban = 3;
        size_t no = 1 + rnd() % H;
        memcpy(a, x, V * sizeof *a);
        memcpy(b, x, V * sizeof *b);
        sd_sampler_process_logits(sp, &s, a, V, prompt, H, output, no);
        sd_draw_row r = {.temperature = s.temperature, .min_p = s.min_p, .u = unif(), .token = output[0]};
        const sd_logit_edit *ed;
        r.n_edits = (int32_t)sd_sampler_edits(sp, &s, V, prompt, H, output, no, &ed);
        r.edits = ed;
        if (s.n_allowed) {
            sd_sampling_allow_bits(&s, V, bits);
            r.allow = bits;
        }
        sd_tokprob q[2] = {{output[0], 0.5f}, {output[1], 0.25f}};
        if (round % 2) {
            r.q = q;
            r.nq = 2;
        }
        sd_draw_out o = sd_cpu_draw_row(b, V, &r, scr);
        for (int i = 0; i < V; i++)
            ck_assert_msg(bits_of(a[i]) == bits_of(b[i]), "round %d: logit %d edited to %a, host %a", round, i, b[i],
                          a[i]);
        int32_t want = r.nq ? sd_sampler_residual(sp, &s, a, V, q, 2, r.u) : sd_sampler_draw(sp, &s, a, V, r.u);
        ck_assert_int_eq(o.token, want);
        ck_assert(bits_of(o.prob) == bits_of(sd_sampler_prob(sp, &s, a, V, r.token)));
        int32_t plain = sd_sampler_draw(sp, &s, x, V, r.u);
        drawn_diff += plain != want;
    }
    ck_assert_int_gt(drawn_diff, 20); /* the processors changed the draws: the comparison means something */
    free(x);
    free(a);
    free(b);
    sd_cpu_draw_scratch_free(scr);
    sd_sampler_free(sp);
}
END_TEST

/* The backend op over several rows at once, each its own settings. */
START_TEST(draw_rows_takes_many_rows)
{
    enum { V = 3000, R = 9 };
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(1, &be, NULL, 0), SD_OK);
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(V, &sp, NULL, 0), SD_OK);
    float *x = malloc((size_t)R * V * sizeof *x);
    sd_draw_row rows[R];
    sd_draw_out out[R];
    for (int j = 0; j < R; j++) {
        make_row(x + (size_t)j * V, V, j % 6);
        rows[j] =
            (sd_draw_row){.temperature = 0.5f + 0.1f * (float)j, .min_p = j % 2 ? 0.1f : 0.0f, .u = unif(), .token = j};
    }
    ck_assert_int_eq(be->ops->draw_rows(be, out, x, rows, R, V), SD_OK);
    for (int j = 0; j < R; j++) {
        sd_sampling s = sd_sampling_default();
        s.temperature = rows[j].temperature;
        s.min_p = rows[j].min_p;
        ck_assert_int_eq(out[j].token, sd_sampler_draw(sp, &s, x + (size_t)j * V, V, rows[j].u));
        ck_assert(bits_of(out[j].prob) == bits_of(sd_sampler_prob(sp, &s, x + (size_t)j * V, V, j)));
    }
    ck_assert_int_eq(be->ops->draw_rows(be, out, x, rows, -1, V), SD_ERR_ARG);
    free(x);
    sd_sampler_free(sp);
    sd_backend_free(be);
}
END_TEST

static Suite *draw_suite(void)
{
    Suite *s = suite_create("draw");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, exp_weight_is_one_formula);
    tcase_add_test(tc, wide_sums_are_exsum);
    tcase_add_test(tc, row_draw_is_the_samplers);
    tcase_add_test(tc, row_edits_are_the_processors);
    tcase_add_test(tc, draw_rows_takes_many_rows);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(draw_suite()); }
