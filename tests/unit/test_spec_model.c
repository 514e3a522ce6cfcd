/* test_spec_model.c — the measured models of adaptive speculation
 * (common/spec/spec_model.c): step cost per row count, interpolated between
 * measured neighbours and extended beyond them,
 * corrected for the sequences the rows are spread over (beyond the noise),
 * a size never dearer than a larger one measured, a seldom measured size
 * leaning on the sizes near it, the accept cost of greedy and
 * sampled rows, per-position acceptance with its expected tokens, and the
 * proposer's supply (drafts offered when asked for more). */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "spec_model.h"
#include "testutil.h"

START_TEST(cost_by_rows)
{
    sd_cost c;
    sd_cost_init(&c);
    ck_assert(!sd_cost_known(&c));
    ck_assert(sd_cost_forward_ms(&c, 3, 0) == 0);
    sd_cost_forward(&c, 2, 1, 1.0);
    /* one row count only: proportional to rows */
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 4, 0), 2.0, 1e-9);
    for (int i = 0; i < 50; i++) {
        sd_cost_forward(&c, 1, 1, 1.0);
        sd_cost_forward(&c, 7, 1, 1.6);
        sd_cost_forward(&c, 8, 1, 2.4); /* a tile boundary: far above the line */
    }
    ck_assert(sd_cost_known(&c));
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 1, 0), 1.0, 0.01);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 7, 0), 1.6, 0.016);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 8, 0), 2.4, 0.024); /* measured sizes keep their own time */
    double l4 = sd_cost_forward_ms(&c, 4, 0), l20 = sd_cost_forward_ms(&c, 20, 0);
    ck_assert(l4 > 1.0 && l4 < 1.6); /* unmeasured sizes: between the measured neighbours (2 and 7) */
    /* beyond the largest: the slope of the last two, at most the largest's cost per row (a tile's jump
     * is no slope: 2.4 + 0.3 * 12) — and not warm, at most in proportion to the warm count below of
     * the least cost per row (7) */
    ck_assert_double_eq_tol(l20, 1.6 * 20 / 7, 0.05);
    /* a cold first pass is replaced by a faster second (and two samples borrow from the counts near) */
    sd_cost_forward(&c, 3, 1, 9.0);
    sd_cost_forward(&c, 3, 1, 1.2);
    double l3 = sd_cost_forward_ms(&c, 3, 0), l5 = sd_cost_forward_ms(&c, 5, 0);
    ck_assert_msg(l3 < 1.6, "3 rows: %.3f", l3); /* not the cold pass's 9 (the speed it moved aside) */
    ck_assert_msg(l5 >= l3 && l5 <= sd_cost_forward_ms(&c, 7, 0), "5 rows: %.3f", l5); /* now between 3 and 7 */
}
END_TEST

START_TEST(unwarmed_counts_at_most_in_proportion)
{
    /* the start-up measure: 1..13 rows of one sequence (1 ms + 0.05 a row); then plain steps of 16
     * requests, 16 rows at 4.4 ms — dearer by their sequences, not their rows. The slope from 13 to 16
     * rows (about 1 ms a row) priced each draft of a 16-request step at ten times its cost and none
     * ever ran (CPU, 1 thread, 16 greedy requests: 17 rows predicted 0.47 ms above 16, drafting steps
     * measured 0.17 ms a row); an added row costs at most the average row of the largest count, and a
     * count not warm at most in proportion to a warm one below of as many sequences */
    sd_cost c;
    sd_cost_init(&c);
    for (int i = 0; i < 3; i++)
        for (int r = 1; r <= 13; r++) sd_cost_forward(&c, r, 1, 1.0 + 0.05 * r);
    for (int i = 0; i < 50; i++) sd_cost_forward(&c, 16, 16, 4.4);
    double t16 = sd_cost_forward_ms(&c, 16, 16), t17 = sd_cost_forward_ms(&c, 17, 16);
    double t32 = sd_cost_forward_ms(&c, 32, 16);
    ck_assert_double_eq_tol(t16, 4.4, 0.1);
    ck_assert_msg(t17 - t16 <= t16 / 16 + 1e-9, "17 rows %.3f, 16 rows %.3f", t17, t16);
    ck_assert_double_eq_tol(t32, 2 * t16, 0.1);
    /* drafting steps of 34 rows measured often (8 ms), 48 rows once in a slow pass (15 ms): not warm,
     * 48 rows cost at most in proportion to 34; the counts between are not priced from it either;
     * once warm, its own figure holds */
    for (int i = 0; i < 50; i++) sd_cost_forward(&c, 34, 16, 8.0);
    sd_cost_forward(&c, 48, 16, 15.0);
    double t34 = sd_cost_forward_ms(&c, 34, 16);
    ck_assert_double_le(sd_cost_forward_ms(&c, 48, 16), t34 * 48 / 34 + 1e-9);
    ck_assert_double_le(sd_cost_forward_ms(&c, 40, 16), t34 * 40 / 34 + 1e-9);
    for (int i = 0; i < 10; i++) sd_cost_forward(&c, 48, 16, 15.0);
    ck_assert_double_gt(sd_cost_forward_ms(&c, 48, 16), 13.0);
}
END_TEST

/* 1 + 0.1 ms a row, every pass within +-20% */
static double noisy_line(int rows, int i)
{
    static const double wiggle[5] = {0.8, 1.2, 1.0, 0.9, 1.1};
    return (1.0 + 0.1 * rows) * wiggle[(rows + i) % 5];
}

START_TEST(rare_counts_borrow_from_near_ones)
{
    /* row counts 10..40 measured twice each with the machine's noise, 25 once in a lucky pass at 60%
     * of the line: a chooser would pick the step sizes that happen to look cheap (measured on a CPU,
     * 16 requests with n-gram drafts: steps planned at 10.0 ms took 11.9, while counts' own figures
     * predicted the rows they had within 3%), and the least figure above a count, which caps it, is
     * the luckiest of many (here 12-40% low before); a seldom measured count's figure leans on the
     * line of the counts near it, one measured often keeps its own, a jump included */
    sd_cost c;
    sd_cost_init(&c);
    for (int i = 0; i < 2; i++)
        for (int r = 10; r <= 40; r++)
            if (r != 25) sd_cost_forward(&c, r, 8, noisy_line(r, i));
    sd_cost_forward(&c, 25, 8, 0.6 * (1.0 + 0.1 * 25));
    for (int i = 0; i < 10; i++) sd_cost_forward(&c, 40, 8, 1.0 + 0.1 * 40); /* the speed settles */
    for (int r = 12; r <= 38; r++) {
        double want = 1.0 + 0.1 * r, got = sd_cost_forward_ms(&c, r, 8);
        ck_assert_msg(fabs(got / want - 1) < 0.1, "%d rows: %.3f, the line %.3f", r, got, want);
    }
    sd_cost d; /* a tile's step at 24 rows (1 ms more from there on), measured often: kept */
    sd_cost_init(&d);
    for (int i = 0; i < 100; i++)
        for (int r = 18; r <= 30; r += 2) sd_cost_forward(&d, r, 4, (r >= 24 ? 2.0 : 1.0) + 0.1 * r);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&d, 24, 4), 4.4, 0.15);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&d, 22, 4), 3.2, 0.15);
}
END_TEST

START_TEST(cost_by_sequences)
{
    /* 16 rows cost 1.5 ms as one sequence and 2.1 ms as sixteen (0.04 ms a sequence) */
    sd_cost c;
    sd_cost_init(&c);
    for (int i = 0; i < 300; i++) {
        int seqs = i % 2 ? 16 : 1 + i % 7;
        sd_cost_forward(&c, 16, seqs, 1.46 + 0.04 * seqs);
        sd_cost_forward(&c, 4, i % 2 ? 4 : 1, 1.0 + 0.04 * (i % 2 ? 4 : 1));
    }
    ck_assert_double_eq_tol(sd_cost_per_seq(&c), 0.04, 0.005);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 16, 16), 2.1, 0.1);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 16, 1), 1.5, 0.1);
    /* an unmeasured size: the line, uncorrected (an optimistic guess gets it tried and measured) */
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 10, 10), sd_cost_forward_ms(&c, 10, 1), 1e-12);
    /* far more sequences than a size was measured with: not extrapolated upwards either */
    sd_cost d;
    sd_cost_init(&d);
    for (int i = 0; i < 50; i++) {
        sd_cost_forward(&d, 8, 1, 1.0);
        sd_cost_forward(&d, 8, 2, 1.04);
    }
    ck_assert(sd_cost_per_seq(&d) > 0.03);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&d, 8, 2), 1.04, 0.02);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&d, 8, 8), sd_cost_forward_ms(&d, 8, 0), 1e-12);
}
END_TEST

START_TEST(per_sequence_cost_beyond_noise_only)
{
    /* 16 rows over 8-16 sequences, each pass within +-20%: the passes with 16 sequences happen to be
     * slower (2.5, 2.0, 2.3 ms), a slope of the noise. The per-sequence cost used is the fitted one
     * less twice its standard error, so the noise does not price the plain step (the most sequences
     * for its rows) dear: at most 5% above the average here, against 9% with the fitted slope */
    static const int seqs[10] = {8, 16, 10, 16, 12, 8, 16, 10, 12, 8};
    static const double ms[10] = {1.9, 2.5, 1.8, 2.0, 2.2, 1.7, 2.3, 2.1, 1.9, 2.2};
    sd_cost c;
    sd_cost_init(&c);
    for (int i = 0; i < 30; i++) sd_cost_forward(&c, 16, seqs[i % 10], ms[i % 10]);
    double all = sd_cost_forward_ms(&c, 16, 0), most = sd_cost_forward_ms(&c, 16, 16);
    ck_assert_msg(most <= 1.05 * all, "16 sequences %.3f ms, on average %.3f", most, all);
}
END_TEST

START_TEST(fewer_rows_never_dearer)
{
    /* 16 rows measured twice in a slow start (10 ms), 42 rows many times since (7.5 ms): 16 rows,
     * and any size below 42, are predicted at no more than 42's figure */
    sd_cost c;
    sd_cost_init(&c);
    sd_cost_forward(&c, 4, 1, 1.0);
    sd_cost_forward(&c, 16, 2, 10.0);
    sd_cost_forward(&c, 16, 2, 10.0);
    for (int i = 0; i < 40; i++) {
        sd_cost_forward(&c, 4, 1, 1.0);
        sd_cost_forward(&c, 42, 16, 7.5);
    }
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 42, 16), 7.5, 0.1);
    ck_assert(sd_cost_forward_ms(&c, 16, 16) <= sd_cost_forward_ms(&c, 42, 16) + 1e-9);
    ck_assert(sd_cost_forward_ms(&c, 30, 16) <= sd_cost_forward_ms(&c, 42, 16) + 1e-9);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 4, 1), 1.0, 0.05); /* below: its own figure */
    /* once measured cheaper, 16 rows keep their own figure */
    for (int i = 0; i < 60; i++) sd_cost_forward(&c, 16, 16, 3.0);
    ck_assert(sd_cost_forward_ms(&c, 16, 16) < 4.0);
}
END_TEST

/* c with sizes 1 and 8 measured 100 times each, at 1.0 and 2.0 ms. */
static void one_and_eight(sd_cost *c)
{
    sd_cost_init(c);
    for (int i = 0; i < 100; i++) {
        sd_cost_forward(c, 1, 1, 1.0);
        sd_cost_forward(c, 8, 1, 2.0);
    }
}

START_TEST(speed_drift)
{
    /* sizes measured in a fast spell, then the machine slows to 1.5x: a size measured only in the
     * fast spell is predicted at the slow speed too, so comparisons across sizes stay fair */
    sd_cost c;
    one_and_eight(&c);
    for (int i = 0; i < 30; i++) sd_cost_forward(&c, 1, 1, 1.5);
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 1, 1), 1.5, 0.05);
    ck_assert(sd_cost_forward_ms(&c, 8, 1) > 2.7 &&
              sd_cost_forward_ms(&c, 8, 1) < 3.1); /* not the 2.0 of the fast spell */
}
END_TEST

/* One size measured for minutes (single-row plain steps), with a shared
 * machine's hiccups (1 pass in 10 three times as long), the machine's
 * speed unchanged: the other sizes' predictions stay near their cost.
 * With the speed and the size's figure moved by differently clipped
 * samples, the speed drifted to 30 in 3000 passes, 8 rows predicted at
 * 60 ms. */
START_TEST(speed_stays_on_one_size)
{
    sd_cost c;
    one_and_eight(&c);
    unsigned seed = 1;
    for (int i = 0; i < 3000; i++) {
        double u = (double)rand_r(&seed) / RAND_MAX;
        sd_cost_forward(&c, 1, 1, u < 0.1 ? 3.0 : 0.9 + 0.2 * (double)rand_r(&seed) / RAND_MAX);
        double p8 = sd_cost_forward_ms(&c, 8, 1);
        ck_assert_msg(p8 > 1.5 && p8 < 3.5, "pass %d: 8 rows predicted at %.2f ms", i, p8);
    }
    ck_assert_double_eq_tol(sd_cost_forward_ms(&c, 8, 1), 2.0, 0.4);
}
END_TEST

/* A size's prediction is the mean of its passes, not their geometric mean
 * (the step's time is a sum over steps): passes alternating 0.6 and 1.4 ms
 * are predicted at 1.0 on average (moved by log q instead: 0.86). */
START_TEST(prediction_is_the_mean)
{
    sd_cost c;
    sd_cost_init(&c);
    double sum = 0;
    for (int i = 0; i < 2000; i++) {
        if (i >= 1000) sum += sd_cost_forward_ms(&c, 4, 1);
        sd_cost_forward(&c, 4, 1, i % 2 ? 1.4 : 0.6);
    }
    ck_assert_double_eq_tol(sum / 1000, 1.0, 0.03);
}
END_TEST

START_TEST(accept_cost)
{
    sd_cost c;
    sd_cost_init(&c);
    ck_assert(sd_cost_accept_ms(&c, 3, 3) == 0);
    /* greedy rows 0.01 ms, sampled 0.05 ms, mixed steps */
    for (int i = 0; i < 40; i++) {
        int g = 1 + i % 5, s = i % 3;
        sd_cost_accept(&c, g, s, 0.01 * g + 0.05 * s);
    }
    ck_assert_double_eq_tol(sd_cost_accept_ms(&c, 4, 0), 0.04, 1e-9);
    ck_assert_double_eq_tol(sd_cost_accept_ms(&c, 0, 2), 0.10, 1e-9);
    /* only greedy rows ever seen: sampled ones cost nothing known */
    sd_cost d;
    sd_cost_init(&d);
    sd_cost_accept(&d, 7, 0, 0.07);
    ck_assert_double_eq_tol(sd_cost_accept_ms(&d, 2, 0), 0.02, 1e-9);
}
END_TEST

START_TEST(acceptance)
{
    sd_accept a;
    sd_accept_init(&a, NULL, 0);
    ck_assert_double_eq_tol(sd_accept_expected(&a, 0), 1.0, 1e-12);
    ck_assert_double_eq_tol(sd_accept_expected(&a, 2), 1 + SD_ACCEPT_START + SD_ACCEPT_START * SD_ACCEPT_START, 1e-12);
    /* 3 drafts offered, 2 accepted: positions 1, 2 accepted, 3 rejected */
    for (int i = 0; i < 100; i++) sd_accept_observe(&a, 3, 3, 2, 0.25, true);
    ck_assert_double_eq_tol(a.a[0], 1.0, 1e-3);
    ck_assert_double_eq_tol(a.a[1], 1.0, 1e-3);
    ck_assert_double_eq_tol(a.a[2], 0.0, 1e-3);
    ck_assert_double_eq_tol(a.a[3], SD_ACCEPT_START, 1e-12); /* never judged */
    ck_assert_double_eq_tol(sd_accept_reach(&a, 2), 1.0, 2e-2);
    ck_assert_double_eq_tol(sd_accept_expected(&a, 3), 3.0, 2e-2);
    ck_assert_double_eq_tol(sd_accept_expected(&a, 6), 3.0, 5e-2); /* little beyond a position always rejected */
    /* a position judged once borrows from the others: one rejection does not rule it out */
    sd_accept u;
    sd_accept_init(&u, NULL, 0);
    for (int i = 0; i < 50; i++) sd_accept_observe(&u, 3, 3, 3, 0.25, true);
    sd_accept_observe(&u, 4, 4, 3, 0.25, true);
    ck_assert_double_eq_tol(u.a[3], SD_ACCEPT_START / 2, 1e-12); /* the start and one rejection */
    double r4 = sd_accept_reach(&u, 4) / sd_accept_reach(&u, 3);
    ck_assert_msg(r4 > 0.5, "position 4 estimated at %.3f", r4);
    /* a drop shows within a few steps */
    for (int i = 0; i < 4; i++) sd_accept_observe(&a, 3, 3, 0, 0.25, true);
    ck_assert(a.a[0] < 0.35);
    /* seeded from a prior: its figures, as few observations */
    sd_accept b;
    sd_accept_init(&b, &a, 4);
    ck_assert_double_eq_tol(b.a[0], a.a[0], 1e-12);
    ck_assert_uint_eq(b.n[0], 4);
    sd_accept_observe(&b, 1, 1, 1, 0.1, true); /* weight 1/5 */
    ck_assert_double_eq_tol(b.a[0], a.a[0] + (1 - a.a[0]) / 5, 1e-12);
    /* bad observations are ignored */
    sd_accept_observe(&b, 2, 2, 3, 0.25, true);
    sd_accept_observe(&b, 2, 3, 1, 0.25, true);
    sd_accept_observe(&b, 0, 0, 0, 0.25, true);
    ck_assert_uint_eq(b.steps, 1);
}
END_TEST

/* Fading: the positions from `from` on move a share of the way towards the
 * other estimate's, where it has observed them; the rest stay. */
START_TEST(fade)
{
    sd_accept a, to;
    sd_accept_init(&a, NULL, 0);
    sd_accept_init(&to, NULL, 0);
    for (int i = 0; i < 20; i++) {
        sd_accept_observe(&a, 2, 2, 0, 0.1, false);  /* position 1 rejected every time */
        sd_accept_observe(&to, 2, 2, 2, 0.1, false); /* both accepted */
    }
    a.a[2] = 0.3;
    double a0 = a.a[0], a1 = a.a[1], c0 = a.c[0];
    ck_assert_double_lt(a0, 0.1);
    ck_assert_double_gt(to.a[1], 0.9);
    sd_accept_fade(&a, &to, 0.5, 1);
    ck_assert_double_eq(a.a[0], a0);
    ck_assert_double_eq(a.c[0], c0);
    ck_assert_double_eq_tol(a.a[1], a1 + 0.5 * (to.a[1] - a1), 1e-12);
    ck_assert_double_eq(a.a[2], 0.3); /* toward never observed position 3 */
    sd_accept_fade(&a, &to, 1, 0);
    ck_assert_double_eq(a.a[0], to.a[0]);
}
END_TEST

START_TEST(supply)
{
    /* a proposer that offers 2 of the 6 drafts asked for: asking for more costs nothing more */
    sd_accept a;
    sd_accept_init(&a, NULL, 0);
    for (int i = 0; i < 100; i++) sd_accept_observe(&a, 6, 2, 2, 0.25, true);
    ck_assert_double_eq_tol(sd_accept_offered(&a, 2), 1.0, 0.02);
    ck_assert(sd_accept_offered(&a, 3) < 0.05);
    ck_assert_double_eq_tol(sd_accept_drafts(&a, 6), 2.0, 0.1);
    ck_assert_double_eq_tol(sd_accept_expected(&a, 6), 3.0, 0.1);
    /* nothing offered: nothing judged, no acceptance step counted */
    sd_accept b;
    sd_accept_init(&b, NULL, 0);
    for (int i = 0; i < 100; i++) sd_accept_observe(&b, 4, 0, 0, 0.25, true);
    ck_assert_uint_eq(b.steps, 0);
    ck_assert(sd_accept_drafts(&b, 4) < 0.05);
    ck_assert_double_eq_tol(sd_accept_expected(&b, 4), 1.0, 0.05);
}
END_TEST

/* A proposer that doubts where its drafts fail: half its steps offer all 6
 * drafts asked for and all are accepted, half offer one, rejected. A step
 * commits 4 tokens on average (7 or 1) and verifies 3.5 drafts: the tokens
 * are estimated from the supply where the drafts before were accepted (the
 * average supply would expect 2.75 tokens). */
START_TEST(supply_after_accepted_drafts)
{
    sd_accept a;
    sd_accept_init(&a, NULL, 0);
    for (int i = 0; i < 400; i++) sd_accept_observe(&a, 6, i % 2 ? 6 : 1, i % 2 ? 6 : 0, 0.05, false);
    ck_assert_double_eq_tol(sd_accept_drafts(&a, 6), 3.5, 0.15);
    ck_assert_double_eq_tol(sd_accept_offered(&a, 2), 0.5, 0.05);
    ck_assert_double_eq_tol(sd_accept_yield(&a, 2), 0.5, 0.05);
    ck_assert_double_eq_tol(sd_accept_expected(&a, 6), 4.0, 0.15);
    /* a span at hand (supply known) and one that comes with probability 1/2 */
    sd_accept k = a, h = a;
    sd_accept_supply_known(&k, 6);
    ck_assert_double_eq_tol(sd_accept_expected(&k, 6), 4.0, 0.15);
    sd_accept_supply_scaled(&h, 0.5);
    ck_assert_double_eq_tol(sd_accept_expected(&h, 6), 2.5, 0.1);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spec_model");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, cost_by_rows);
    tcase_add_test(tc, unwarmed_counts_at_most_in_proportion);
    tcase_add_test(tc, rare_counts_borrow_from_near_ones);
    tcase_add_test(tc, cost_by_sequences);
    tcase_add_test(tc, per_sequence_cost_beyond_noise_only);
    tcase_add_test(tc, fewer_rows_never_dearer);
    tcase_add_test(tc, speed_drift);
    tcase_add_test(tc, speed_stays_on_one_size);
    tcase_add_test(tc, prediction_is_the_mean);
    tcase_add_test(tc, accept_cost);
    tcase_add_test(tc, acceptance);
    tcase_add_test(tc, supply);
    tcase_add_test(tc, supply_after_accepted_drafts);
    tcase_add_test(tc, fade);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
