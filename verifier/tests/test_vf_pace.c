/* test_vf_pace.c — the pipelined verifier's wait decision (vf_pace.c):
 * step-time estimates by batch rows (from the shared sd_cost), the wait budget of vf_pace.h's
 * formulas (a drafter quicker and slower than a plain step) on numbers worked by hand, the
 * latency estimate (the drafter's time until a
 * wait measures the latency itself, never discounted between waits), and
 * that a timeout stops further waits but for a probe every
 * SD_VF_PACE_PROBE-th time; steps that went on with the fallback's drafts
 * lower the budget. */
#include <check.h>

#include "testutil.h"
#include "vf_pace.h"

/* A step cost measured at 1 row (1.0 ms) and 7 rows (1.6 ms): the line
 * through them is t = 0.9 + 0.1 rows. */
static void measured_cost(sd_cost *c)
{
    sd_cost_init(c);
    for (int i = 0; i < 50; i++) {
        sd_cost_forward(c, 1, 1, 1.0);
        sd_cost_forward(c, 7, 1, 1.6);
    }
}

/* A pace over that cost whose steps with drafts committed 4 tokens. */
static void yielding_4(sd_vf_pace *p, sd_cost *c)
{
    measured_cost(c);
    sd_vf_pace_init(p, c);
    sd_vf_pace_yield(p, 4);
}

START_TEST(step_time_by_rows)
{
    sd_cost c;
    sd_cost_init(&c);
    sd_vf_pace p;
    sd_vf_pace_init(&p, &c);
    ck_assert(sd_vf_pace_step_ms(&p, 3) == 0); /* nothing measured */
    measured_cost(&c);
    ck_assert_double_eq_tol(sd_vf_pace_step_ms(&p, 1), 1.0, 0.01);
    ck_assert_double_eq_tol(sd_vf_pace_step_ms(&p, 4), 1.3, 0.013);
}
END_TEST

START_TEST(wait_budget)
{
    sd_cost c;
    measured_cost(&c);
    sd_vf_pace p;
    sd_vf_pace_init(&p, &c);
    /* no yield measured yet: the acceptance estimates' expectation stands in */
    ck_assert(sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 1.0) == 0);
    ck_assert_double_eq_tol(sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 4.0), 0.6, 0.01);
    sd_vf_pace_yield(&p, 4);
    ck_assert_double_eq_tol(sd_vf_pace_expected(&p), 4.0, 1e-9);
    /* alone: t_plain - t_spec / e = 1.0 - 1.6 / 4 (the measured yield, not the estimate, counts now) */
    ck_assert_double_eq_tol(sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 1.0), 0.6, 0.01);
    /* beside a ready request (7 rows, 4 tokens): t_without = t(8) = 1.7, t_with = t(14) = 2.3,
     * E_without = 5, E_with = 8: 1.7 - 5 * 2.3 / 8 */
    ck_assert_double_eq_tol(sd_vf_pace_wait_budget(&p, 7, 4, 1, 6, 1.0), 1.7 - 5 * 2.3 / 8, 0.02);
    /* drafts that commit little never pay a wait */
    sd_vf_pace q = p;
    for (int i = 0; i < 200; i++) sd_vf_pace_yield(&q, 1);
    ck_assert(sd_vf_pace_wait_budget(&q, 0, 0, 1, 6, 4.0) == 0);
}
END_TEST

/* Going on without the span with the fallback proposer's drafts: a request
 * that measured 2 tokens from 3 rows so instead of 1 from 1 waits less. */
START_TEST(fallback_lowers_the_budget)
{
    sd_cost c;
    sd_vf_pace p;
    yielding_4(&p, &c);
    sd_vf_pace_fallback(&p, 1, 1); /* a plain step: as before */
    ck_assert_double_eq_tol(sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 1.0), 0.6, 0.01);
    yielding_4(&p, &c);
    sd_vf_pace_fallback(&p, 3, 2);
    /* t_without = t(3) = 1.2, E_without = 2: 1.2 - 2 * 1.6 / 4 */
    ck_assert_double_eq_tol(sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 1.0), 1.2 - 2 * 1.6 / 4, 0.01);
    /* a fallback as good as the drafter's span: no wait pays */
    yielding_4(&p, &c);
    sd_vf_pace_fallback(&p, 7, 4);
    ck_assert(sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 1.0) == 0);
}
END_TEST

/* A drafter slower than a plain step (a launch-bound drafter on a GPU): its
 * span comes after the plain step has moved on, so the budget is the wait
 * after which the step with drafts commits no faster than a plain one:
 * E_with * t_without / E_without - t_with; and such a wait is made. */
START_TEST(slow_drafter_budget)
{
    sd_cost c;
    sd_vf_pace p;
    yielding_4(&p, &c);
    sd_vf_pace_span(&p, 2.0); /* 2 ms per span, a plain step takes 1 ms */
    /* alone: 4 * 1.0 / 1 - 1.6 */
    ck_assert_double_eq_tol(sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 1.0), 2.4, 0.02);
    ck_assert(sd_vf_pace_should_wait(&p, sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 1.0)));
    /* beside a ready request: E_with 8, E_without 5, t_without 1.7, t_with 2.3 */
    ck_assert_double_eq_tol(sd_vf_pace_wait_budget(&p, 7, 4, 1, 6, 1.0), 8 * 1.7 / 5 - 2.3, 0.03);
    /* a drafter that slow next to drafts that commit little: still no wait */
    for (int i = 0; i < 400; i++) sd_vf_pace_yield(&p, 1);
    ck_assert(sd_vf_pace_wait_budget(&p, 0, 0, 1, 6, 4.0) < 0.5);
    /* measured waits that come in longer than the budget stop the waits (but for probes) */
    sd_vf_pace r;
    sd_vf_pace_init(&r, &c);
    sd_vf_pace_yield(&r, 4);
    for (int i = 0; i < 10; i++) sd_vf_pace_waited(&r, 3.0, 2.0);
    ck_assert(!sd_vf_pace_should_wait(&r, sd_vf_pace_wait_budget(&r, 0, 0, 1, 6, 1.0)));
}
END_TEST

START_TEST(latency_and_timeouts)
{
    sd_cost c;
    measured_cost(&c);
    sd_vf_pace p;
    sd_vf_pace_init(&p, &c);
    ck_assert(sd_vf_pace_should_wait(&p, 0.5)); /* nothing known: try */
    ck_assert(!sd_vf_pace_should_wait(&p, -1));
    ck_assert(!sd_vf_pace_should_wait(&p, 0));
    sd_vf_pace_span(&p, 0.3);
    ck_assert_double_eq_tol(sd_vf_pace_latency(&p), 0.3, 1e-9);
    sd_vf_pace_waited(&p, 0.4, 0.3); /* a wait measures the latency itself */
    ck_assert_double_eq_tol(sd_vf_pace_latency(&p), 0.4, 1e-9);
    sd_vf_pace_span(&p, 0.1); /* the drafter's time no longer moves it */
    sd_vf_pace_waited(&p, 0.6, 0.3);
    ck_assert_double_eq_tol(sd_vf_pace_latency(&p), 0.5, 1e-9); /* plain mean of the first waits */
    for (int i = 0; i < 100; i++) sd_vf_pace_span(&p, 0.1);     /* steps pass: no discount */
    ck_assert_double_eq_tol(sd_vf_pace_latency(&p), 0.5, 1e-9);
    ck_assert(sd_vf_pace_should_wait(&p, 0.55));
    sd_vf_pace_timeout(&p, 0.55);
    ck_assert(sd_vf_pace_latency(&p) > 0.55); /* no more waits ... */
    int declined = 0;
    while (!sd_vf_pace_should_wait(&p, 0.55) && declined < 1000) declined++;
    ck_assert_int_eq(declined, SD_VF_PACE_PROBE - 1); /* ... but for a probe now and then */
    ck_assert(!sd_vf_pace_should_wait(&p, 0.55));
    /* the probe finds the drafter fast again: waits resume */
    for (int i = 0; i < 20; i++) sd_vf_pace_waited(&p, 0.2, 0.1);
    ck_assert(sd_vf_pace_should_wait(&p, 0.55));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vf_pace");
    TCase *tc = tcase_create("pace");
    tcase_add_test(tc, step_time_by_rows);
    tcase_add_test(tc, wait_budget);
    tcase_add_test(tc, fallback_lowers_the_budget);
    tcase_add_test(tc, slow_drafter_budget);
    tcase_add_test(tc, latency_and_timeouts);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
