/* test_spec_sched.c — the adaptive draft-length scheduler
 * (common/spec/spec_sched.c) on synthetic cost and acceptance: low acceptance
 * gives no drafts, K grows with acceptance, a flat (GPU-like) cost takes
 * the most, larger batches take fewer, the drafter's exposed time shortens
 * spans, a sampled request pays sampling per token committed and a drafter
 * call's fixed work once, a drafter far behind on a request keeps it plain, kmin / kmax and
 * the KV budget are respected, nothing measured means
 * kmin, and the choice is the best by brute force over every combination
 * (by its rate, or beside a prompt chunk by the tokens net of the time at
 * the decoding requests' own best rate), and the drafter's passes follow the
 * expected longest of several spans. */
#include <check.h>
#include <math.h>

#include "spec_sched.h"
#include "testutil.h"

/* A CPU-like cost: 1 ms for one row, 0.1 ms per further row. */
static void cpu_cost(sd_cost *c)
{
    sd_cost_init(c);
    for (int i = 0; i < 20; i++) {
        sd_cost_forward(c, 1, 1, 1.0);
        sd_cost_forward(c, 11, 1, 2.0);
    }
}

/* A GPU-like cost: flat up to 64 rows. */
static void flat_cost(sd_cost *c)
{
    sd_cost_init(c);
    for (int i = 0; i < 20; i++) {
        sd_cost_forward(c, 1, 1, 1.0);
        sd_cost_forward(c, 64, 1, 1.0);
    }
}

static void uniform(sd_accept *a, double p)
{
    sd_accept_init(a, NULL, 0);
    for (int i = 0; i < SD_MAX_DRAFT; i++) {
        a->a[i] = p;
        a->n[i] = 100; /* well observed */
    }
}

static sd_sched_step step_of(const sd_cost *c) { return (sd_sched_step){.cost = c, .kv_free = -1, .block_size = 16}; }

static sd_sched_req req_of(const sd_accept *a, int kmax)
{
    return (sd_sched_req){.acc = a, .kmin = 0, .kmax = kmax, .kv_len = 10, .kv_blocks = 1};
}

/* k for one request of uniform acceptance p under cost c. */
static int k_alone(const sd_cost *c, double p, int kmax)
{
    sd_accept a;
    uniform(&a, p);
    sd_sched_step st = step_of(c);
    sd_sched_req r = req_of(&a, kmax);
    int k;
    sd_sched_cand cand[SD_MAX_DRAFT];
    sd_sched_choose(&st, &r, 1, &k, cand);
    return k;
}

START_TEST(acceptance_drives_k)
{
    sd_cost c;
    cpu_cost(&c);
    ck_assert_int_eq(k_alone(&c, 0.05, 12), 0); /* drafts that are never accepted: none */
    int prev = 0;
    const double ps[] = {0.2, 0.4, 0.6, 0.8, 0.9, 0.97};
    for (size_t i = 0; i < sizeof ps / sizeof ps[0]; i++) {
        int k = k_alone(&c, ps[i], 12);
        ck_assert_msg(k >= prev, "p %.2f: k %d after %d", ps[i], k, prev);
        prev = k;
    }
    ck_assert_int_ge(prev, 6);
    ck_assert_int_eq(k_alone(&c, 0.999, 12), 12);
    sd_cost f;
    flat_cost(&f);
    ck_assert_int_eq(k_alone(&f, 0.5, 12), 12); /* extra rows free: all of them */
    ck_assert_int_eq(k_alone(&f, 0.5, 5), 5);   /* never beyond kmax */
}
END_TEST

START_TEST(batch_takes_fewer)
{
    sd_cost c;
    cpu_cost(&c);
    sd_accept a;
    uniform(&a, 0.8);
    sd_sched_req r[16];
    int k[16], k1 = k_alone(&c, 0.8, 12);
    sd_sched_cand cand[16 * SD_MAX_DRAFT];
    for (int i = 0; i < 16; i++) r[i] = req_of(&a, 12);
    sd_sched_step st = step_of(&c);
    sd_sched_plan p = sd_sched_choose(&st, r, 16, k, cand);
    int sum = 0;
    for (int i = 0; i < 16; i++) sum += k[i];
    ck_assert_int_lt(sum, 16 * k1);
    ck_assert_int_eq(p.drafts, sum);
    ck_assert(p.step_ms > 0 && p.tokens >= 16);
}
END_TEST

START_TEST(exposed_drafting_shortens)
{
    sd_cost c;
    cpu_cost(&c);
    sd_accept a;
    uniform(&a, 0.8);
    sd_sched_req r = req_of(&a, 12);
    sd_sched_cand cand[SD_MAX_DRAFT];
    int k_hidden, k_exposed, k_costly;
    sd_sched_step st = step_of(&c);
    sd_sched_choose(&st, &r, 1, &k_hidden, cand);
    sd_cost drafter; /* 0.2 ms per drafter pass */
    sd_cost_init(&drafter);
    for (int i = 0; i < 5; i++) sd_cost_forward(&drafter, 1, 1, 0.2);
    st.drafter = &drafter;
    st.exposure = 1;
    sd_sched_choose(&st, &r, 1, &k_exposed, cand);
    ck_assert_int_lt(k_exposed, k_hidden);
    st.exposure = 0.1; /* mostly hidden behind verification: longer again */
    int k_mostly_hidden;
    sd_sched_choose(&st, &r, 1, &k_mostly_hidden, cand);
    ck_assert_int_gt(k_mostly_hidden, k_exposed);
    st.drafter = NULL;
    st.draft_ms = 5; /* a drafter round trip dearer than anything drafts bring */
    sd_sched_choose(&st, &r, 1, &k_costly, cand);
    ck_assert_int_eq(k_costly, 0);
}
END_TEST

/* Sampling verifies a span position by position up to its first rejection:
 * a sampled request pays the sampling cost for the tokens it commits, not
 * for its rows; a drafter call's fixed work is priced once, not per pass. */
START_TEST(sampled_pays_per_token)
{
    sd_cost c;
    flat_cost(&c);
    for (int i = 0; i < 20; i++) sd_cost_accept(&c, 0, 1, 0.5); /* 0.5 ms per sampled position */
    sd_accept a;
    uniform(&a, 0.5);
    sd_sched_req r = req_of(&a, 12);
    r.sampled = true;
    sd_sched_step st = step_of(&c);
    int k = 4;
    double e = sd_accept_expected(&a, 4); /* 1 + .5 + .25 + .125 + .0625 */
    double fw = sd_cost_forward_at(&c, 5, 0);
    ck_assert_double_eq_tol(sd_cost_accept_ms(&c, 0, 1), 0.5, 1e-2);
    ck_assert_double_eq_tol(sd_sched_step_ms(&st, &r, 1, &k), fw + sd_cost_accept_ms(&c, 0, e), 1e-9);
    uniform(&a, 0.0);
    ck_assert_double_eq_tol(sd_sched_step_ms(&st, &r, 1, &k), fw + sd_cost_accept_ms(&c, 0, 1),
                            1e-9); /* one position */
    sd_cost drafter;
    sd_cost_init(&drafter);
    for (int i = 0; i < 5; i++) sd_cost_forward(&drafter, 1, 1, 0.1);
    st.drafter = &drafter;
    st.exposure = 1;
    double t0 = sd_sched_step_ms(&st, &r, 1, &k);
    st.drafter_fixed = 2; /* two passes' worth per call */
    ck_assert_double_eq_tol(sd_sched_step_ms(&st, &r, 1, &k) - t0, 0.2, 1e-9);
}
END_TEST

START_TEST(catching_up_costs_once)
{
    /* two equal requests; the drafter is far behind on the second: resuming it costs 5 ms */
    sd_cost c;
    cpu_cost(&c);
    sd_accept a;
    uniform(&a, 0.8);
    sd_sched_req r[2] = {req_of(&a, 12), req_of(&a, 12)};
    r[1].resume_ms = 5;
    sd_sched_cand cand[2 * SD_MAX_DRAFT];
    int k[2];
    sd_sched_step st = step_of(&c);
    sd_sched_choose(&st, r, 2, k, cand);
    ck_assert_int_gt(k[0], 0);
    ck_assert_int_eq(k[1], 0);
    r[1].resume_ms = 0;
    sd_sched_choose(&st, r, 2, k, cand);
    ck_assert_int_gt(k[1], 0);
}
END_TEST

START_TEST(bounds_and_kv)
{
    sd_cost c;
    flat_cost(&c);
    sd_accept lo, hi;
    uniform(&lo, 0.01);
    uniform(&hi, 0.9);
    sd_sched_cand cand[3 * SD_MAX_DRAFT];
    int k[3];
    sd_sched_step st = step_of(&c);
    sd_sched_req r[3] = {req_of(&lo, 8), req_of(&hi, 8), req_of(&hi, 8)};
    r[0].kmin = 3; /* fixed lengths are kept even when they look poor */
    r[0].kmax = 3;
    sd_sched_choose(&st, r, 3, k, cand);
    ck_assert_int_eq(k[0], 3);
    ck_assert_int_eq(k[1], 8);
    ck_assert_int_eq(k[2], 8);
    /* KV: request 1 holds 16 positions in 1 block (its plain step needs a second block),
     * request 2 holds 10 in 1 (drafts up to 5 fit its block); one free block */
    r[1].kv_len = 16;
    st.kv_free = 1;
    sd_sched_choose(&st, r, 3, k, cand);
    ck_assert_int_eq(k[1], 8); /* its plain step takes the free block, which holds the drafts too */
    ck_assert_int_eq(k[2], 5); /* no block left beyond position 15 */
    st.kv_free = 0;
    sd_sched_choose(&st, r, 3, k, cand);
    ck_assert_int_le(k[2], 5);
    /* nothing measured: kmin */
    sd_cost none;
    sd_cost_init(&none);
    st = step_of(&none);
    sd_sched_plan p = sd_sched_choose(&st, r, 3, k, cand);
    ck_assert_int_eq(k[0], 3);
    ck_assert_int_eq(k[1], 0);
    ck_assert_int_eq(k[2], 0);
    ck_assert(p.step_ms == 0);
}
END_TEST

/* The rate of a choice under the model. */
static double rate(const sd_sched_step *st, const sd_sched_req *r, int n, const int *k)
{
    double tokens = st->fixed_tokens;
    for (int i = 0; i < n; i++) tokens += sd_accept_expected(r[i].acc, k[i]);
    return tokens / sd_sched_step_ms(st, r, n, k);
}

/* The plan's measure (spec_sched.h): with prompt chunks in the step, the
 * tokens net of the time at the scheduled requests' best rate on their own. */
static double brute_best_rate(const sd_sched_step *st, const sd_sched_req *r, int n, int kmax)
{
    double best = 0;
    int k[4] = {0};
    for (int c = 0; c < (int)pow(kmax + 1, n); c++) {
        for (int i = 0, x = c; i < n; i++, x /= kmax + 1) k[i] = x % (kmax + 1);
        double v = rate(st, r, n, k);
        if (v > best) best = v;
    }
    return best;
}

static double value(const sd_sched_step *st, const sd_sched_req *r, int n, const int *k, double worth)
{
    double tokens = st->fixed_tokens;
    for (int i = 0; i < n; i++) tokens += sd_accept_expected(r[i].acc, k[i]);
    return tokens - worth * sd_sched_step_ms(st, r, n, k);
}

/* A prompt chunk makes the step dear whatever is chosen: by the step's rate
 * every draft would look worth its rows. Priced at the decoding requests'
 * own rate, drafts beside a chunk are those worth their time anyway: under
 * a cost linear beyond one row exactly the plan without the chunk. */
START_TEST(prompt_chunk_priced_at_decode_rate)
{
    sd_cost c;
    sd_cost_init(&c);
    for (int rows = 1; rows <= 160; rows++)
        for (int i = 0; i < 3; i++) sd_cost_forward(&c, rows, 1, 1.0 + 0.1 * (rows - 1));
    sd_accept a;
    uniform(&a, 0.6);
    sd_sched_req r[4] = {req_of(&a, 12), req_of(&a, 12), req_of(&a, 12), req_of(&a, 12)};
    sd_sched_cand cand[4 * SD_MAX_DRAFT];
    int k_own[4], k_chunk[4];
    sd_sched_step own = step_of(&c);
    own.seqs = 4;
    sd_sched_plan p_own = sd_sched_choose(&own, r, 4, k_own, cand);
    ck_assert_double_eq(p_own.rate, 0);
    sd_sched_step chunk = own;
    chunk.fixed_rows = 100;
    chunk.fixed_greedy = 1;
    chunk.fixed_tokens = 1;
    chunk.seqs = 5;
    sd_sched_plan p = sd_sched_choose(&chunk, r, 4, k_chunk, cand);
    ck_assert_double_eq_tol(p.rate, p_own.tokens / p_own.step_ms, 1e-9);
    int sum_own = 0, sum_chunk = 0;
    for (int i = 0; i < 4; i++) sum_own += k_own[i], sum_chunk += k_chunk[i];
    ck_assert_int_eq(sum_chunk, sum_own);
    /* the step's own rate would have taken more: K 6 each beats the plan on it */
    int k6[4] = {6, 6, 6, 6};
    ck_assert_int_lt(sum_chunk, 24);
    ck_assert(rate(&chunk, r, 4, k6) > rate(&chunk, r, 4, k_chunk));
    ck_assert(!sd_sched_beats(&p, 1 + 4 * sd_accept_expected(&a, 6), sd_sched_step_ms(&chunk, r, 4, k6), p.tokens,
                              p.step_ms));
}
END_TEST

/* Requests stop at different lengths (the proposer's supply): the drafter's
 * passes follow the longest span, whose expected length exceeds every
 * request's own: sum_j 1 - prod_i (1 - offered_i(j)). */
START_TEST(longest_of_several)
{
    sd_cost c;
    flat_cost(&c);
    sd_cost drafter; /* 1 ms a pass, with one request or two */
    sd_cost_init(&drafter);
    for (int i = 0; i < 5; i++) {
        sd_cost_forward(&drafter, 1, 1, 1.0);
        sd_cost_forward(&drafter, 2, 2, 1.0);
    }
    sd_accept a;
    uniform(&a, 1.0);
    for (int i = 0; i < SD_MAX_DRAFT; i++) {
        a.c[i] = 0.5; /* each further draft offered half the time */
        a.nc[i] = 100;
    }
    sd_sched_step st = step_of(&c);
    st.drafter = &drafter;
    st.exposure = 1;
    sd_sched_req r[2] = {req_of(&a, 4), req_of(&a, 4)};
    int k[2] = {4, 4};
    double one = sd_sched_step_ms(&st, r, 1, k), two = sd_sched_step_ms(&st, r, 2, k);
    double e1 = 0.5 + 0.25 + 0.125 + 0.0625, e2 = 0;
    for (int j = 1; j <= 4; j++) e2 += 1 - pow(1 - pow(0.5, j), 2);
    st.drafter = NULL; /* the drafter's passes: (1 + longest) x its time per pass */
    double passes1 = (one - sd_sched_step_ms(&st, r, 1, k)) / sd_cost_forward_ms(&drafter, 1, 1);
    double passes2 = (two - sd_sched_step_ms(&st, r, 2, k)) / sd_cost_forward_ms(&drafter, 2, 2);
    ck_assert_double_eq_tol(passes1, 1 + e1, 1e-6);
    ck_assert_double_eq_tol(passes2, 1 + e2, 1e-6);
}
END_TEST

START_TEST(best_by_brute_force)
{
    sd_cost c;
    sd_cost_init(&c);
    /* an irregular measured curve: tiles of 4 rows */
    for (int rows = 1; rows <= 20; rows++)
        for (int i = 0; i < 3; i++) sd_cost_forward(&c, rows, 1, 1.0 + 0.4 * ((rows + 3) / 4) + 0.01 * rows);
    sd_accept a[3];
    const double ps[3][4] = {{0.9, 0.8, 0.7, 0.3}, {0.6, 0.6, 0.6, 0.6}, {0.95, 0.2, 0.9, 0.9}};
    for (int i = 0; i < 3; i++) {
        uniform(&a[i], 0.5);
        for (int j = 0; j < 4; j++) a[i].a[j] = ps[i][j];
    }
    sd_sched_req r[3] = {req_of(&a[0], 4), req_of(&a[1], 4), req_of(&a[2], 4)};
    sd_sched_step st = step_of(&c);
    st.fixed_rows = 2;
    st.fixed_greedy = 1;
    st.fixed_tokens = 1;
    int k[3];
    sd_sched_cand cand[3 * SD_MAX_DRAFT];
    sd_sched_plan p = sd_sched_choose(&st, r, 3, k, cand);
    /* with a prompt chunk in the step, its time is worth the requests' best rate on their own */
    sd_sched_step own = step_of(&c);
    double worth = brute_best_rate(&own, r, 3, 4);
    ck_assert_double_eq_tol(p.rate, worth, 1e-9);
    double got = value(&st, r, 3, k, worth), best = -1e300;
    for (int x = 0; x <= 4; x++)
        for (int y = 0; y <= 4; y++)
            for (int z = 0; z <= 4; z++) {
                int kk[3] = {x, y, z};
                double v = value(&st, r, 3, kk, worth);
                if (v > best) best = v;
            }
    ck_assert_msg(got >= best - 1e-9, "chosen %d %d %d: value %.6f, best %.6f", k[0], k[1], k[2], got, best);
    /* without it, the best rate */
    sd_sched_plan q = sd_sched_choose(&own, r, 3, k, cand);
    ck_assert_double_eq(q.rate, 0);
    ck_assert_double_ge(rate(&own, r, 3, k), brute_best_rate(&own, r, 3, 4) * (1 - 1e-9));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spec_sched");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, acceptance_drives_k);
    tcase_add_test(tc, batch_takes_fewer);
    tcase_add_test(tc, exposed_drafting_shortens);
    tcase_add_test(tc, sampled_pays_per_token);
    tcase_add_test(tc, catching_up_costs_once);
    tcase_add_test(tc, bounds_and_kv);
    tcase_add_test(tc, best_by_brute_force);
    tcase_add_test(tc, prompt_chunk_priced_at_decode_rate);
    tcase_add_test(tc, longest_of_several);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
