/* test_vf_adapt.c — the verifier's adaptive speculation loop (adapt.c)
 * on a synthetic engine: a CPU-like step cost and drafts accepted with a
 * chosen probability. Good drafts get long spans; a sudden drop to useless
 * drafts is followed within a few steps (K = 0), probes then cost little and
 * notice when the drafts recover; after a slow spell of the drafting steps
 * drafting resumes although no probe pays; a plain step measured once in a
 * slow spell is measured again; a new request starts from its kind's
 * server-wide estimate (a kind never seen: tried); fixed requests keep their length; the KV budget and
 * per-request budgets hold; the report names the kinds observed; the fallback proposer's drafts are
 * chosen by their own acceptance, which never touches the drafter's; drafts in hand are priced in full,
 * drafts without a span at hand at what such drafts gave. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "adapt.h"
#include "vf_convert.h"

/* 1 ms + 0.1 ms per row beyond the first, verification 0.01 ms per row. */
static sd_step_timing timing_of(int rows)
{
    return (sd_step_timing){
        .rows = rows, .greedy_rows = rows, .forward_ms = 1.0 + 0.1 * (rows - 1), .accept_ms = 0.01 * rows};
}

static sd_req make_req(float temperature)
{
    sd_req r;
    memset(&r, 0, sizeof r);
    r.n_prompt = r.n_prefilled = 8;
    r.n_tokens = 9;
    r.kv.len = 8;
    r.kv.n_blocks = 1;
    r.p.sampling = sd_sampling_default();
    r.p.sampling.temperature = temperature;
    r.p.verify = SD_VERIFY_AUTO;
    r.p.speculate = true;
    return r;
}

typedef struct sim {
    sd_adapt ad;
    sd_req r[4];
    sd_req *rp[4];
    sd_areq q[4];
    sd_areq *qp[4];
    int n;
    double p_accept;
    unsigned seed;
    int calls;
    double call_ms; /* a drafting step's time outside the engine beyond the drafter's passes */
    double slow;    /* drafting steps take this many times longer (a slow spell; 0: 1) */
    bool cycle;     /* the cycle time is known (the regime test runs) */
    double hidden;  /* a drafting step's cycle costs this much more, outside the step's wall time */
    double between; /* every step's cycle costs this much more (the work between steps) */
    double once;    /* the next step's wall time is this much longer (a hiccup) */
} sim;

static void sim_init(sim *s, int n, bool fixed)
{
    memset(s, 0, sizeof *s);
    sd_adapt_init(&s->ad);
    s->n = n;
    s->seed = 7;
    for (int i = 0; i < n; i++) {
        s->r[i] = make_req(0);
        s->rp[i] = &s->r[i];
        sd_areq_init(&s->q[i], fixed);
        s->qp[i] = &s->q[i];
    }
}

/* One request with drafts accepted at p_accept, a drafting step call_ms
 * dearer outside the engine. */
static void sim_one(sim *s, double p_accept, double call_ms)
{
    sim_init(s, 1, false);
    s->p_accept = p_accept;
    s->call_ms = call_ms;
}

/* One step with budgets of 12 (or b): returns request 0's k. */
static int sim_step(sim *s, const int *budget_in)
{
    int budgets[4], offered[4], accepted[4];
    bool had_q[4] = {0}, ready[4] = {0};
    int catchup[4] = {0};
    double dms[4] = {0};
    int rows = 0;
    s->calls++;
    for (int i = 0; i < s->n; i++) budgets[i] = budget_in ? budget_in[i] : 12;
    ck_assert_int_eq(sd_adapt_plan(&s->ad, s->rp, s->qp, budgets, NULL, NULL, NULL, s->n, -1, 16, NULL, false), SD_OK);
    for (int i = 0; i < s->n; i++) {
        offered[i] = budgets[i];
        accepted[i] = 0;
        while (accepted[i] < offered[i] && (double)rand_r(&s->seed) / RAND_MAX < s->p_accept) accepted[i]++;
        rows += 1 + budgets[i];
        dms[i] = 0.02 * budgets[i];
    }
    sd_step_timing t = timing_of(rows);
    double wall = t.forward_ms + t.accept_ms + (s->ad.maxk > 0 ? 0.1 + s->call_ms + 0.02 * s->ad.maxk : 0.02);
    if (s->ad.maxk > 0 && s->slow > 0) wall *= s->slow;
    wall += s->once;
    s->once = 0;
    double cycle = s->cycle ? wall + 0.05 + s->between + (s->ad.maxk > 0 ? s->hidden : 0) : 0;
    sd_adapt_done(&s->ad, &t, wall, cycle, s->rp, s->qp, offered, accepted, had_q, catchup, dms, ready, s->n, false);
    return budgets[0];
}

START_TEST(follows_acceptance)
{
    sim s;
    sim_init(&s, 1, false);
    s.p_accept = 0.9;
    int k = 0;
    for (int i = 0; i < 300; i++) k = sim_step(&s, NULL);
    ck_assert_int_ge(k, 4);
    ck_assert(s.ad.pred_us > 0 && s.ad.meas_us > 0);
    ck_assert_msg(s.ad.err_us < s.ad.meas_us / 10, "prediction error %llu of %llu us", (unsigned long long)s.ad.err_us,
                  (unsigned long long)s.ad.meas_us);
    /* the drafts turn useless: no drafts within a few steps */
    s.p_accept = 0;
    int steps = 0;
    while (sim_step(&s, NULL) > 0 && steps < 100) steps++;
    ck_assert_int_le(steps, 8);
    /* then probes only: rare, never zero */
    int with = 0;
    for (int i = 0; i < 500; i++) with += sim_step(&s, NULL) > 0;
    ck_assert_int_gt(with, 0);
    ck_assert_int_lt(with, 25);
    /* the drafts recover: noticed by a probe, long spans again */
    s.p_accept = 0.9;
    steps = 0;
    while (sim_step(&s, NULL) < 4 && steps < 500) steps++;
    ck_assert_int_lt(steps, 150);
    ck_assert_uint_gt(s.q[0].st.k_zero, 0);
    ck_assert_uint_eq(s.q[0].st.k_steps, (uint64_t)s.calls);
    sd_adapt_free(&s.ad);
}
END_TEST

/* A slow spell of the drafting steps (a neighbour, the drafter's cores)
 * makes them dearer than predicted and the step goes plain; where a lone
 * draft never pays for the call (a probe does not either), no drafting step
 * measures the spell's end — the error it left fades, and drafting resumes. */
START_TEST(drafting_resumes_after_a_spell)
{
    sim s;
    sim_one(&s, 0.9, 1.5);
    int k = 0;
    for (int i = 0; i < 200; i++) { /* drafting (a plain step now and then re-measures plain's figure) */
        int ki = sim_step(&s, NULL);
        k = i % 4 == 0 || ki > k ? ki : k;
    }
    ck_assert_int_ge(k, 4);
    s.slow = 3;
    int steps = 0;
    while (sim_step(&s, NULL) > 0 && steps < 200) steps++;
    ck_assert_int_lt(steps, 200);
    s.slow = 0;
    steps = 0;
    while (sim_step(&s, NULL) < 4 && steps < 300) steps++;
    ck_assert_msg(steps < 120, "drafting resumed after %d steps (bias %.3f, overhead %.3f ms)", steps, s.ad.bias_draft,
                  s.ad.draft_ms);
    sd_adapt_free(&s.ad);
}
END_TEST

/* Steps of first..13 rows measured three times each at their true cost (timing_of). */
static void measure_spans(sd_cost *c, int first)
{
    for (int r = first; r <= 13; r++)
        for (int i = 0; i < 3; i++) {
            sd_cost_forward(c, r, 1, timing_of(r).forward_ms);
            sd_cost_accept(c, r, 0, timing_of(r).accept_ms);
        }
}

/* n requests, spans measured at their true cost (timing_of), a drafting
 * step's time outside the engine draft_ms (a plain one's 0.02), request 0's
 * acceptance 0.9 over 300 steps of 12 drafts. */
static void sim_measured(sim *s, int n, double draft_ms)
{
    sim_init(s, n, false);
    measure_spans(&s->ad.cost, 2);
    s->ad.draft_ms = draft_ms;
    s->ad.plain_ms = 0.02;
    s->ad.n_draft = s->ad.n_plain = 10;
    for (int i = 0; i < 300; i++) {
        int acc = 0;
        while (acc < 12 && (double)rand_r(&s->seed) / RAND_MAX < 0.9) acc++;
        sd_accept_observe(&s->q[0].acc, 12, 12, acc, 0.1, false);
    }
}

/* One request's plan from a set state: spans of every length measured at
 * their true cost (timing_of), acceptance 0.9, a drafting step's time
 * outside the engine 0.1 + call_ms; the plain step (1 row) measured
 * plain_n times at plain_ms, then older passes of 13 rows. Returns its k. */
static int plan_with(double call_ms, int plain_n, double plain_ms, int older)
{
    sim s;
    sim_measured(&s, 1, 0.1 + call_ms);
    for (int i = 0; i < plain_n; i++) sd_cost_forward(&s.ad.cost, 1, 1, plain_ms);
    for (int i = 0; i < older; i++) sd_cost_forward(&s.ad.cost, 13, 1, timing_of(13).forward_ms);
    int budget = 12;
    ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, &budget, NULL, NULL, NULL, 1, -1, 16, NULL, false), SD_OK);
    sd_adapt_free(&s.ad);
    return budget;
}

/* A plan is measured only when it runs: a plain step measured once in a
 * slow spell (1.4 ms where it takes 1.03) must not keep drafting that makes
 * fewer tokens a ms than plain really does (~0.87 here) in place for good —
 * its figure is measured again while it could win; not while drafting is
 * far better, nor while the figure is fresh. */
START_TEST(plain_measured_again)
{
    ck_assert_int_eq(plan_with(6.1, 1, 1.4, 0), 0);  /* measured once: again */
    ck_assert_int_eq(plan_with(6.1, 3, 1.03, 0), 0); /* truly better */
    ck_assert_int_gt(plan_with(1.0, 1, 1.4, 0), 0);  /* drafting far better: no refresh */
    ck_assert_int_gt(plan_with(6.1, 5, 1.4, 0), 0);  /* fresh: its figure stands */
    ck_assert_int_eq(plan_with(6.1, 5, 1.4, 21), 0); /* old (4 passes a sample): again */
}
END_TEST

/* One request 100 tokens behind the drafter (0.1 ms a token to catch up on,
 * drafting runs measured at 2 steps) planned at step `into` of a drafting
 * block of the regime test, max_tokens its limit (1 token out). Spans
 * measured, acceptance 0.9. Returns its k. */
static int resume_k(int into, int max_tokens)
{
    sim s;
    sim_measured(&s, 2, 1.1);
    s.r[0].p.max_tokens = max_tokens;
    for (int i = 0; i < 3; i++) sd_cost_forward(&s.ad.cost, 1, 1, timing_of(1).forward_ms);
    s.ad.catch_ms = 0.1;
    s.ad.run_steps = 2;
    s.ad.n_catch = s.ad.n_run = 10;
    s.r[1].finish = SD_FINISH_LENGTH; /* out of the schedule */
    for (int i = 0; i < into; i++) {
        ck_assert(!sd_regime_plain(&s.ad.rg, sd_regime_key(1, false)));
        sd_regime_note(&s.ad.rg, 2.0, 1.0, true);
    }
    int budgets[2] = {12, 0}, catchup[2] = {100, 0};
    ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, NULL, catchup, NULL, 2, -1, 16, NULL, false), SD_OK);
    sd_adapt_free(&s.ad);
    return budgets[0];
}

/* The drafter's catching up on a request is paid once and spread over the
 * steps it then drafts: at least the drafting block's steps left (the test
 * drafts through them) — priced over the short runs measured alone, a plain
 * block's backlog kept every request plain through the drafting blocks
 * that followed (measured on a CPU, 2 cores, 4 requests: 18-70 tokens
 * behind, no drafts chosen, plain winning the test at 0.91x a plain
 * server's rate while 4 drafts a step made 1.03x). */
START_TEST(catching_up_spread_over_the_block)
{
    ck_assert_int_gt(resume_k(0, 16), 0);
    ck_assert_int_gt(resume_k(10, 16), 0);
    ck_assert_int_eq(resume_k(SD_REGIME_WARM + SD_REGIME_STEPS - 1, 16), 0); /* its last step */
}
END_TEST

/* ... and over the steps the request has left, once caught up: with 400
 * tokens to go it drafts even at the block's last step (the drafter then
 * drafts for it until the plan stops). Priced over runs of 2-4 steps alone,
 * a fresh request's prompt kept it plain through whole drafting blocks, and
 * its backlog grew (CPU, 2 cores, 4 greedy requests: 20-150 tokens behind,
 * adaptive at 1.01x plain where drafting 6 a step made 1.26x). */
START_TEST(catching_up_spread_over_the_request)
{
    int last = SD_REGIME_WARM + SD_REGIME_STEPS - 1;
    ck_assert_int_gt(resume_k(last, 400), 0);
    ck_assert_int_eq(resume_k(last, 12), 0); /* a few tokens left: not worth it */
}
END_TEST

/* Three requests with acceptance 0.9, two of them 50 and 30 tokens behind
 * the drafter, planned with the catching up never measured (n_catch 0) or
 * measured cheap: their ks in k[]. */
static void catchup_plan(int n_catch, int k[3])
{
    sim s;
    sim_measured(&s, 3, 0.2);
    for (int i = 0; i < 3; i++) sd_cost_forward(&s.ad.cost, 1, 1, timing_of(1).forward_ms);
    s.q[1].acc = s.q[2].acc = s.q[0].acc;
    s.ad.catch_ms = n_catch ? 0.001 : 0;
    s.ad.n_catch = (unsigned)n_catch;
    int catchup[3] = {50, 30, 0};
    k[0] = k[1] = k[2] = 12;
    ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, k, NULL, catchup, NULL, 3, -1, 16, NULL, false), SD_OK);
    sd_adapt_free(&s.ad);
}

/* The price of catching up is unknown until measured: one request (the
 * least behind) catches up first, not every request at once. */
START_TEST(first_catching_up_on_one_request)
{
    int k[3];
    catchup_plan(0, k);
    ck_assert_int_eq(k[0], 0);
    ck_assert_int_gt(k[1], 0);
    ck_assert_int_gt(k[2], 0); /* not behind: drafts as ever */
    catchup_plan(10, k);
    ck_assert(k[0] > 0 && k[1] > 0 && k[2] > 0);
}
END_TEST

/* A serial drafting step of request 0 (12 drafts: its own num_draft) whose drafter call
 * caught up on `behind` tokens and took drafter_ms. */
static void catchup_step(sim *s, int behind, double drafter_ms)
{
    int budgets[1] = {12}, offered[1], accepted[1] = {3}, catchup[1] = {behind};
    bool had_q[1] = {false}, ready[1] = {false};
    double dms[1] = {drafter_ms};
    ck_assert_int_eq(sd_adapt_plan(&s->ad, s->rp, s->qp, budgets, NULL, NULL, NULL, 1, -1, 16, NULL, false), SD_OK);
    ck_assert_int_eq(budgets[0], 12);
    offered[0] = budgets[0];
    sd_step_timing t = timing_of(1 + budgets[0]);
    sd_adapt_done(&s->ad, &t, t.forward_ms + drafter_ms, 0, s->rp, s->qp, offered, accepted, had_q, catchup, dms, ready,
                  1, false);
}

/* The drafter's catching up priced per token over the tokens caught up on:
 * a few tokens cost nothing beyond the passes, a backlog of 1,600 costs
 * 100 ms — after ten of the first and one of the second, a token costs what
 * the backlog says (0.05-0.06 ms), not the average of the steps (0.006). */
START_TEST(catching_up_priced_by_its_tokens)
{
    sim s;
    sim_measured(&s, 1, 0.2);
    sd_areq_init(&s.q[0], true);
    for (int i = 0; i < 3; i++) sd_cost_forward(&s.ad.drafter, 1, 1, 0.1);
    for (int i = 0; i < 10; i++) catchup_step(&s, 20, 1.3); /* 13 passes of 0.1 ms: nothing beyond them */
    ck_assert(s.ad.n_catch == 10 && s.ad.catch_ms < 1e-6);
    catchup_step(&s, 1600, 1.3 + 100);
    ck_assert_msg(s.ad.catch_ms > 0.04 && s.ad.catch_ms < 0.065, "%.4f ms a token", s.ad.catch_ms);
    sd_adapt_free(&s.ad);
}
END_TEST

/* A drafting step whose drafter caught up is measured with all of that
 * and priced with a share: its error is not drafting's (catch_ms prices
 * it). Taken for drafting's, one such step priced every plan out while it
 * faded (bias 1: a step twice as dear as predicted). */
START_TEST(catching_up_teaches_no_bias)
{
    sim s;
    sim_measured(&s, 1, 0.2);
    sd_areq_init(&s.q[0], true);
    for (int i = 0; i < 3; i++) sd_cost_forward(&s.ad.drafter, 1, 1, 0.1);
    catchup_step(&s, 400, 1.3 + 20); /* 20 ms of catching up */
    ck_assert_double_eq_tol(s.ad.bias_draft, 0, 1e-12);
    catchup_step(&s, 0, 1.3 + 20); /* as slow, nothing caught up on: drafting is dearer than predicted */
    ck_assert_double_gt(s.ad.bias_draft, 0.5);
    sd_adapt_free(&s.ad);
}
END_TEST

START_TEST(new_requests_start_from_their_kind)
{
    sim s;
    sim_init(&s, 1, false);
    s.p_accept = 0.95;
    for (int i = 0; i < 200; i++) sim_step(&s, NULL);
    /* a second greedy request: long spans at its first step */
    s.r[1] = make_req(0);
    s.rp[1] = &s.r[1];
    sd_areq_init(&s.q[1], false);
    s.qp[1] = &s.q[1];
    s.n = 2;
    int budgets[2] = {12, 12};
    ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, NULL, NULL, NULL, 2, -1, 16, NULL, false), SD_OK);
    ck_assert_int_ge(budgets[1], 3);
    /* a sampled request is another kind: nothing known of it yet, tried (an optimistic start), not beyond
     * the kind known to be good */
    s.r[1] = make_req(0.8f);
    sd_areq_init(&s.q[1], false);
    budgets[0] = budgets[1] = 12;
    ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, NULL, NULL, NULL, 2, -1, 16, NULL, false), SD_OK);
    ck_assert_int_gt(budgets[1], 0);
    ck_assert_int_le(budgets[1], budgets[0]);
    ck_assert_int_ne(s.q[1].key, s.q[0].key);
    /* the report: greedy observed, with a high first-position estimate */
    Specd__AcceptEstimate est[SD_ADAPT_ACCEPT_KEYS];
    float buf[SD_ADAPT_ACCEPT_KEYS][SD_MAX_DRAFT];
    int m = sd_vf_accept_estimates(&s.ad, est, buf, SD_ADAPT_ACCEPT_KEYS);
    ck_assert_int_eq(m, 1);
    ck_assert_str_eq(est[0].mode, "greedy");
    ck_assert_str_eq(est[0].temperature, "0");
    ck_assert_uint_ge(est[0].n_accept, 3);
    ck_assert(est[0].accept[0] > 0.8f);
    ck_assert_uint_le(est[0].steps, 200); /* the steps that offered drafts */
    ck_assert_uint_ge(est[0].steps, 190);
    sd_adapt_free(&s.ad);
}
END_TEST

START_TEST(fixed_and_budgets)
{
    sim s;
    sim_init(&s, 2, true);
    s.p_accept = 0; /* even useless drafts: a fixed request keeps its length */
    int b[2] = {6, 3};
    for (int i = 0; i < 20; i++) ck_assert_int_eq(sim_step(&s, b), 6);
    ck_assert_uint_eq(s.q[1].st.k_sum, 20 * 3);
    ck_assert_uint_eq(s.ad.k_hist[6], 20);
    ck_assert_uint_eq(s.ad.k_hist[3], 20);
    sd_adapt_free(&s.ad);
    /* adaptive: never beyond the budget, 0 for a request that takes no drafts */
    sim_init(&s, 2, false);
    s.p_accept = 0.99;
    int b2[2] = {2, 0};
    for (int i = 0; i < 100; i++) ck_assert_int_le(sim_step(&s, b2), 2);
    ck_assert_int_eq(s.q[1].k, -1);
    ck_assert_uint_eq(s.q[1].st.k_steps, 0);
    /* pipelined: spans at hand bound the choice; the drafter is told a little more */
    int budgets[2] = {12, 12}, avail[2] = {3, -1}, tell[2] = {0, 0};
    ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, NULL, tell, 2, -1, 16, NULL, true), SD_OK);
    ck_assert_int_le(budgets[0], 3);
    ck_assert_int_gt(budgets[0], 0);
    ck_assert_int_eq(tell[0], budgets[0] + 2);
    sd_adapt_free(&s.ad);
}
END_TEST

/* Pipelined, a request's first steps find no span for their base (the
 * drafter still catching up on the prompt): steps that asked for drafts and
 * verified none teach neither acceptance nor supply, so the request keeps
 * asking and drafts at length once the spans come. */
START_TEST(late_spans_teach_nothing)
{
    sim s;
    sim_init(&s, 1, false);
    int offered[1] = {0}, accepted[1] = {0}, catchup[1] = {0};
    bool had_q[1] = {false}, ready[1] = {false};
    double dms[1] = {0};
    int asked = 0;
    for (int i = 0; i < 12; i++) {
        int budgets[1] = {12}, avail[1] = {-1}, tell[1] = {0};
        ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, catchup, tell, 1, -1, 16, NULL, true), SD_OK);
        asked += budgets[0] > 0;
        sd_step_timing t = timing_of(1);
        sd_adapt_done(&s.ad, &t, t.forward_ms + t.accept_ms + 0.5, 0, s.rp, s.qp, offered, accepted, had_q, catchup,
                      dms, ready, 1, true);
    }
    ck_assert_int_ge(asked, 2);
    ck_assert_uint_eq(s.q[0].acc.steps, 0);
    ck_assert_uint_eq(s.q[0].acc.nc[0], 0);
    /* the spans come, drafts are good: long spans */
    s.p_accept = 0.9;
    int k = 0;
    for (int i = 0; i < 100; i++) {
        int budgets[1] = {12}, avail[1] = {12}, tell[1] = {0};
        ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, catchup, tell, 1, -1, 16, NULL, true), SD_OK);
        k = offered[0] = budgets[0];
        accepted[0] = 0;
        while (accepted[0] < k && (double)rand_r(&s.seed) / RAND_MAX < s.p_accept) accepted[0]++;
        ready[0] = k > 0;
        sd_step_timing t = timing_of(1 + k);
        sd_adapt_done(&s.ad, &t, t.forward_ms + t.accept_ms + 0.05, 0, s.rp, s.qp, offered, accepted, had_q, catchup,
                      dms, ready, 1, true);
    }
    ck_assert_int_ge(k, 4);
    sd_adapt_free(&s.ad);
}
END_TEST

/* A new request starts probing at its kind's interval: after the kind's
 * probes were rejected a while, a fresh request of it takes no probe in
 * its first 60 steps (at 4, 12, 28 and 60 before); once the kind's drafts
 * are good again, a fresh request drafts within its first steps (seeded
 * from the kind's estimate, no probe needed). */
START_TEST(new_request_probes_at_kinds_interval)
{
    sim s;
    sim_one(&s, 0, 0);
    for (int i = 0; i < 600; i++) sim_step(&s, NULL); /* useless drafts: probes rejected */
    ck_assert_int_eq(s.ad.probe_every[s.q[0].key], SD_ADAPT_PROBE_MAX);
    sd_areq_init(&s.q[0], false);
    int probes = 0;
    for (int i = 0; i < 60; i++) probes += sim_step(&s, NULL) > 0;
    ck_assert_int_eq(probes, 0);
    s.p_accept = 1; /* the drafts recover: a probe notices, the request drafts again */
    for (int i = 0; i < 300; i++) sim_step(&s, NULL);
    ck_assert_int_lt(s.ad.probe_every[s.q[0].key], SD_ADAPT_PROBE_MAX);
    sd_areq_init(&s.q[0], false);
    s.p_accept = 0;
    int first = -1;
    for (int i = 0; i < 8 && first < 0; i++)
        if (sim_step(&s, NULL) > 0) first = i;
    ck_assert_int_ge(first, 0);
    sd_adapt_free(&s.ad);
}
END_TEST

/* Pipelined, a request left without drafts has nothing in flight: the
 * span the drafter drafts for it begins with its guess of the step's token.
 * Before a probe the drafter is told two drafts, so that one is left once
 * the guess is matched: told one, the span was used up by the guess and the
 * probe never had its draft at hand (CPU, 16 requests: every probe late). */
START_TEST(probe_span_past_the_guess)
{
    sim s;
    sim_init(&s, 1, false);
    int offered[1] = {0}, accepted[1] = {0}, catchup[1] = {0}, told = 0, probes = 0;
    bool had_q[1] = {false}, ready[1] = {true};
    double dms[1] = {0};
    for (int i = 0; i < 200; i++) {
        int budgets[1] = {12}, avail[1] = {12}, tell[1] = {0};
        ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, catchup, tell, 1, -1, 16, NULL, true), SD_OK);
        if (budgets[0] == 0 && tell[0] > 0) {
            ck_assert_int_eq(tell[0], 2);
            told++;
        }
        probes += s.q[0].probing;
        offered[0] = budgets[0];
        accepted[0] = 0; /* useless drafts: the request soon drafts only in probes */
        sd_step_timing t = timing_of(1 + budgets[0]);
        sd_adapt_done(&s.ad, &t, t.forward_ms + t.accept_ms + 0.05, 0, s.rp, s.qp, offered, accepted, had_q, catchup,
                      dms, ready, 1, true);
    }
    ck_assert_int_ge(probes, 2);
    ck_assert_int_ge(told, probes - 1); /* each probe told the step before (the first one perhaps not) */
    sd_adapt_free(&s.ad);
}
END_TEST

/* Pipelined: request 0's spans are always at hand, request 1's never (the
 * drafter keeps guessing wrong for it) and it gets no drafts in its steps.
 * Its acceptance stays what the kind's is (late steps teach nothing), but
 * drafts chosen without a span at hand are priced at what such drafts gave
 * — nothing — so the steps are predicted at the rows they have, not at the
 * rows of spans that do not come, while request 0 keeps long spans. */
START_TEST(late_drafts_priced_at_their_yield)
{
    sim s;
    sim_init(&s, 2, false);
    s.p_accept = 0.9;
    int catchup[2] = {0}, k0 = 0;
    bool had_q[2] = {false};
    double dms[2] = {0.1, 0.1};
    for (int i = 0; i < 200; i++) {
        int budgets[2] = {12, 12}, avail[2] = {12, -1}, tell[2] = {0}, offered[2] = {0}, accepted[2] = {0};
        ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, catchup, tell, 2, -1, 16, NULL, true), SD_OK);
        k0 = offered[0] = budgets[0];
        while (accepted[0] < k0 && (double)rand_r(&s.seed) / RAND_MAX < s.p_accept) accepted[0]++;
        if (i == 150) s.ad.pred_us = s.ad.meas_us = s.ad.err_us = 0; /* the last 50 steps */
        bool ready[2] = {k0 > 0, false};
        sd_step_timing t = timing_of(2 + k0);
        t.seqs = 2;
        sd_adapt_done(&s.ad, &t, t.forward_ms + t.accept_ms + 0.05, 0, s.rp, s.qp, offered, accepted, had_q, catchup,
                      dms, ready, 2, true);
    }
    ck_assert_int_ge(k0, 4);
    ck_assert(s.ad.late_real < 0.1 * s.ad.late_pred);
    ck_assert_msg(s.ad.err_us < s.ad.meas_us / 20, "prediction error %llu of %llu us", (unsigned long long)s.ad.err_us,
                  (unsigned long long)s.ad.meas_us);
    sd_adapt_free(&s.ad);
}
END_TEST

/* Pipelined: good drafts, then the proposer has nothing (n-gram without a
 * match). Its dry answers teach the supply (the estimate that a draft is
 * offered at all falls, and with it what the scheduler expects of drafting);
 * steps that only lacked their span (late) leave it where it was. */
static double supply_after(bool dry)
{
    sim s;
    sim_init(&s, 1, false);
    int offered[1] = {0}, accepted[1] = {0}, catchup[1] = {0};
    bool had_q[1] = {false}, ready[1] = {false};
    double dms[1] = {0};
    s.p_accept = 0.9;
    for (int i = 0; i < 160; i++) {
        int budgets[1] = {12}, avail[1] = {i < 100 ? 12 : -1}, tell[1] = {0};
        ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, catchup, tell, 1, -1, 16, NULL, true), SD_OK);
        int k = offered[0] = i < 100 ? budgets[0] : 0;
        accepted[0] = 0;
        while (accepted[0] < k && (double)rand_r(&s.seed) / RAND_MAX < s.p_accept) accepted[0]++;
        ready[0] = k > 0;
        if (i >= 100 && dry) sd_adapt_dry(&s.ad, s.rp[0], s.qp[0]); /* the answer for the state told */
        sd_step_timing t = timing_of(1 + k);
        sd_adapt_done(&s.ad, &t, t.forward_ms + t.accept_ms + 0.05, 0, s.rp, s.qp, offered, accepted, had_q, catchup,
                      dms, ready, 1, true);
        if (i == 99) ck_assert_double_gt(sd_accept_offered(&s.q[0].acc, 1), 0.9);
    }
    double off = sd_accept_offered(&s.q[0].acc, 1);
    sd_adapt_free(&s.ad);
    return off;
}

START_TEST(dry_answers_teach_supply)
{
    double late = supply_after(false), dry = supply_after(true);
    ck_assert_msg(late > 0.9, "late spans changed the supply estimate: %g", late);
    ck_assert_msg(dry < 0.3, "dry answers left the supply estimate at %g", dry);
}
END_TEST

/* The fallback (pipelined): request 0 has its span every step (its drafts
 * accepted at 0.9), request 1 never (the drafter always late); the n-gram
 * lookup offers request 1 eight drafts, accepted at p_fb. Returns request
 * 1's mean fallback drafts over the last 50 of 150 steps; checks on the way
 * that request 0's choice is left alone, that request 1 is never given more
 * than it was planned or the lookup had, and that the fallback's outcomes
 * teach its own estimate, never the drafter's. */
static double fallback_k(double p_fb, bool fixed)
{
    sim s;
    sim_init(&s, 2, false);
    s.q[1].fixed = fixed;
    int catchup[2] = {0}, sum = 0;
    bool had_q[2] = {false}, ready[2] = {true, false};
    double dms[2] = {0.3, 0};
    for (int i = 0; i < 150; i++) {
        int budgets[2] = {12, 12}, avail[2] = {6, -1}, tell[2] = {0}, offered[2], accepted[2] = {0};
        ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, catchup, tell, 2, -1, 16, NULL, true), SD_OK);
        int planned = budgets[1], k[2] = {budgets[0], planned}, fb_avail[2] = {0, 8};
        ck_assert_int_eq(sd_adapt_fallback(&s.ad, s.rp, s.qp, k, fb_avail, 2, NULL), SD_OK);
        ck_assert_int_eq(k[0], budgets[0]);
        ck_assert_int_le(k[1], planned < 8 ? planned : 8);
        ck_assert_int_eq(s.q[1].fb_k, k[1]);
        if (fixed) ck_assert_int_eq(k[1], planned < 8 ? planned : 8);
        for (int j = 0; j < 2; j++) {
            offered[j] = k[j];
            double p = j == 0 ? 0.9 : p_fb;
            while (accepted[j] < k[j] && (double)rand_r(&s.seed) / RAND_MAX < p) accepted[j]++;
        }
        if (i >= 100) sum += k[1];
        sd_step_timing t = timing_of(2 + k[0] + k[1]);
        sd_adapt_done(&s.ad, &t, t.forward_ms + t.accept_ms + 0.05, 0, s.rp, s.qp, offered, accepted, had_q, catchup,
                      dms, ready, 2, true);
        ck_assert_int_eq(s.q[1].fb_k, 0);
    }
    ck_assert_uint_eq(s.q[1].acc.steps, 0); /* the drafter's estimate: nothing learnt from the fallback */
    ck_assert_uint_gt(s.q[1].fb_acc.steps, 0);
    sd_adapt_free(&s.ad);
    return sum / 50.0;
}

/* Pipelined, every other step's span is not at hand and the verifier waits
 * 0.5 ms for it; the others spend 0.05 ms outside the engine. Each kind's
 * time is learnt apart, so the predictions follow both (one average of the
 * two would be 0.2 ms off at every step). */
START_TEST(pipelined_predictions_by_kind)
{
    sim s;
    sim_init(&s, 1, true);
    int catchup[1] = {0};
    bool had_q[1] = {false};
    double dms[1] = {0.3};
    for (int i = 0; i < 400; i++) {
        bool ready[1] = {i % 2 == 0};
        int budgets[1] = {4}, avail[1] = {ready[0] ? 4 : -1}, tell[1] = {0}, offered[1] = {4}, accepted[1] = {2};
        ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, catchup, tell, 1, -1, 16, NULL, true), SD_OK);
        ck_assert_int_eq(budgets[0], 4);
        if (i == 200) s.ad.pred_us = s.ad.meas_us = s.ad.err_us = 0; /* the second half only */
        sd_step_timing t = timing_of(5);
        sd_adapt_done(&s.ad, &t, t.forward_ms + t.accept_ms + (ready[0] ? 0.05 : 0.5), 0, s.rp, s.qp, offered, accepted,
                      had_q, catchup, dms, ready, 1, true);
    }
    ck_assert_msg(s.ad.err_us < s.ad.meas_us / 50, "prediction error %llu of %llu us", (unsigned long long)s.ad.err_us,
                  (unsigned long long)s.ad.meas_us);
    sd_adapt_free(&s.ad);
}
END_TEST

/* A span at hand has its drafts: a request whose proposer seldom offers more
 * than one of four drafts asked for, with a span of four in hand, is priced
 * at five rows — not at the two its supply estimate expects of drafts still
 * to come (planned steps then fell short of the rows they verified). */
START_TEST(drafts_at_hand_priced_in_full)
{
    sim s;
    sim_init(&s, 1, true);
    measure_spans(&s.ad.cost, 1);
    for (int i = 0; i < 100; i++) sd_accept_observe(&s.q[0].acc, 4, 1, 1, 0.1, false);
    ck_assert(sd_accept_drafts(&s.q[0].acc, 4) < 1.5);
    s.ad.ready_ms = 0.05;
    s.ad.n_ready = 10;
    int catchup[1] = {0}, budgets[1] = {4}, avail[1] = {4}, tell[1] = {0};
    ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, avail, catchup, tell, 1, -1, 16, NULL, true), SD_OK);
    double want = sd_cost_forward_ms(&s.ad.cost, 5, 1) + sd_cost_accept_ms(&s.ad.cost, 5, 0) + 0.05;
    ck_assert_msg(fabs(s.ad.pred_ms - want) < 0.01, "predicted %.3f ms, five rows take %.3f", s.ad.pred_ms, want);
    sd_adapt_free(&s.ad);
}
END_TEST

/* The pipelining test (sd_adapt_pipelines): steps run through the sim, each
 * cycle extra_ms dearer when the test chose the pipelined protocol for it.
 * Returns the share of pipelined steps over the second half of n steps. */
static double pipelined_share(double extra_ms, int n, sim *s)
{
    sim_one(s, 0.8, 0);
    s->cycle = true;
    int piped = 0;
    for (int i = 0; i < n; i++) {
        bool on = sd_adapt_pipelines(&s->ad, 1, false);
        s->between = on ? extra_ms : 0;
        sim_step(s, NULL);
        if (i >= n / 2) piped += on;
    }
    return (double)piped / (n - n / 2);
}

START_TEST(the_pipelining_test_keeps_the_faster_protocol)
{
    sim s;
    double slow = pipelined_share(0.6, 1200, &s); /* pipelined steps dearer: serial wins */
    printf("pipelining test, pipelined 0.6 ms dearer a step: %.2f of the steps pipelined, rates %.3f / %.3f\n", slow,
           sd_regime_rate(&s.ad.pipe_rg, SD_PIPE_PIPELINED), sd_regime_rate(&s.ad.pipe_rg, SD_PIPE_SERIAL));
    ck_assert_double_lt(slow, 0.25);
    ck_assert_double_lt(sd_regime_rate(&s.ad.pipe_rg, SD_PIPE_PIPELINED),
                        sd_regime_rate(&s.ad.pipe_rg, SD_PIPE_SERIAL));
    ck_assert_uint_gt(s.ad.pipe_rg.plain_steps, 600);
    sd_adapt_free(&s.ad);
    double fast = pipelined_share(0.0, 1200, &s); /* the same: either may win, both are measured */
    ck_assert_uint_gt(s.ad.pipe_rg.plain_steps, 0);
    ck_assert_double_gt(fast, 0.0);
    sd_adapt_free(&s.ad);
    double faster = pipelined_share(-0.3, 1200, &s); /* pipelined cheaper: it wins */
    printf("pipelining test, pipelined 0.3 ms cheaper a step: %.2f of the steps pipelined\n", faster);
    ck_assert_double_gt(faster, 0.75);
    sd_adapt_free(&s.ad);
    /* steps whose protocol the test did not choose measure nothing */
    sim_one(&s, 0.8, 0);
    s.cycle = true;
    for (int i = 0; i < 200; i++) sim_step(&s, NULL);
    ck_assert_uint_eq(s.ad.pipe_rg.load[sd_regime_key(1, false)].blocks[0], 0);
    ck_assert_uint_eq(s.ad.pipe_rg.load[sd_regime_key(1, false)].blocks[1], 0);
    sd_adapt_free(&s.ad);
}
END_TEST

/* The regime test alone (regime.h): drafting's block first, the two
 * alternating until each has its three, then the better one with the
 * other's block after 4, 8, 16, 32 of its own — back to 4 when the winner changes;
 * none of plain's (after its first) while drafting makes 1.4 times plain's rate; each load its own
 * figures. */
static int block_at(sd_regime *g, int key, double plain_rate, double draft_rate)
{
    int r = sd_regime_plain(g, key) ? SD_VF_PLAIN : SD_VF_DRAFTING;
    for (int i = 0; i < SD_REGIME_WARM + SD_REGIME_STEPS; i++) {
        ck_assert_int_eq(sd_regime_plain(g, key) ? SD_VF_PLAIN : SD_VF_DRAFTING, r);
        double rate = r == SD_VF_PLAIN ? plain_rate : draft_rate;
        sd_regime_note(g, rate, 1.0, r == SD_VF_DRAFTING);
    }
    return r;
}

static int block(sd_regime *g, double plain_rate, double draft_rate)
{
    return block_at(g, sd_regime_key(16, false), plain_rate, draft_rate);
}

/* A seeded plain rate (sd_regime_seed, the in-process loop's calibrated
 * plain step) stands for plain's first block: where drafting's first block
 * beats it by far, no plain block runs; where it does not, the test goes on
 * measuring plain. sd_adapt_seed_plain seeds from the calibrated cost only. */
START_TEST(a_seeded_plain_rate_spares_the_plain_block)
{
    sd_regime g;
    sd_regime_init(&g);
    int key = sd_regime_key(1, false);
    sd_regime_seed(&g, key, SD_VF_PLAIN, 16.0, 16.0); /* 1 token a ms */
    char seq[16] = {0};
    for (int b = 0; b < 10; b++) seq[b] = block_at(&g, key, 1.0, 2.0) == SD_VF_PLAIN ? 'p' : 'd';
    ck_assert_str_eq(seq, "dddddddddd");
    ck_assert_uint_eq(g.plain_steps, 0);
    sd_regime_init(&g);
    sd_regime_seed(&g, key, SD_VF_PLAIN, 16.0, 16.0);
    for (int b = 0; b < 6; b++) seq[b] = block_at(&g, key, 1.0, 1.1) == SD_VF_PLAIN ? 'p' : 'd';
    seq[6] = 0;
    ck_assert_msg(strchr(seq, 'p') != NULL, "%s", seq);
    sd_regime_seed(&g, -1, SD_VF_PLAIN, 16.0, 16.0); /* out of range: ignored */
    sd_regime_seed(&g, key, SD_VF_PLAIN, 16.0, 0.0);
    /* from the adaptive model: nothing without a calibrated plain step, the step's price with one */
    sd_adapt ad;
    sd_adapt_init(&ad);
    ck_assert(!sd_adapt_seed_plain(&ad, 1, false));
    for (int i = 0; i < 3; i++) sd_cost_forward(&ad.cost, 1, 1, 2.0);
    ck_assert(sd_adapt_seed_plain(&ad, 1, false));
    ck_assert_uint_eq(ad.rg.load[key].blocks[SD_VF_PLAIN], 1);
    ck_assert_double_eq_tol(ad.rg.load[key].tok[SD_VF_PLAIN] / ad.rg.load[key].ms[SD_VF_PLAIN], 0.5, 0.05);
    sd_adapt_free(&ad);
}
END_TEST

START_TEST(regime_blocks)
{
    sd_regime g;
    sd_regime_init(&g);
    char seq[64] = {0};
    for (int b = 0; b < 40; b++) seq[b] = block(&g, 1.2, 1.0) == SD_VF_PLAIN ? 'p' : 'd';
    ck_assert_str_eq(seq, "dpdpdpppppdppppppppdppppppppppppppppdppp");
    ck_assert_double_eq_tol(sd_regime_rate(&g, SD_VF_PLAIN), 1.2, 1e-9);
    ck_assert_uint_eq(g.plain_steps, 34 * (SD_REGIME_WARM + SD_REGIME_STEPS));
    /* the load changes, drafting now better: noticed at drafting's next block (at most 32 of plain's
     * later), then its turn */
    memset(seq, 0, sizeof seq);
    for (int b = 0; b < 40; b++) seq[b] = block(&g, 1.0, 1.3) == SD_VF_PLAIN ? 'p' : 'd';
    const char *d = strchr(seq, 'd');
    ck_assert_msg(d != NULL && d - seq <= SD_REGIME_GAP_MAX, "%s", seq);
    int after = 0;
    for (const char *c = d; *c; c++) after += *c == 'p';
    ck_assert_msg(after <= 2, "%s", seq);
    /* another load (one greedy request) has figures of its own: drafting far better there, so after
     * plain's first block (always measured) no plain block runs; back at the first load, the test
     * resumes where it was */
    uint64_t plain = g.plain_steps;
    memset(seq, 0, sizeof seq);
    for (int b = 0; b < 20; b++) seq[b] = block_at(&g, sd_regime_key(1, false), 1.0, 1.5) == SD_VF_PLAIN ? 'p' : 'd';
    ck_assert_str_eq(seq, "dpdddddddddddddddddd");
    ck_assert_uint_eq(g.plain_steps, plain + SD_REGIME_WARM + SD_REGIME_STEPS);
    ck_assert_int_eq(block(&g, 1.0, 1.3), SD_VF_DRAFTING);
    ck_assert_double_eq_tol(sd_regime_rate(&g, SD_VF_PLAIN), 1.0, 0.01);
    /* an unknown cycle time measures nothing */
    sd_regime_init(&g);
    for (int i = 0; i < 100; i++) {
        ck_assert(!sd_regime_plain(&g, 0));
        sd_regime_note(&g, 1.0, 0, true);
    }
    ck_assert_double_lt(sd_regime_rate(&g, SD_VF_DRAFTING), 0);
}
END_TEST

/* Figures age with the load's blocks, whichever regime ran them: three
 * cold drafting blocks (2.6) and a lucky plain one (3.5) make plain the
 * winner; once both settle at drafting 3.2, plain 3.0, drafting's first
 * block tested again wins it back (when only a regime's own blocks aged
 * its figures, its cold ones outweighed that block: a second test, 8 of
 * plain's blocks later, was needed). */
START_TEST(regime_figures_age_with_the_load)
{
    sd_regime g;
    sd_regime_init(&g);
    const double d0[3] = {2.6, 2.6, 2.6}, p0[3] = {2.8, 2.8, 3.5};
    for (int b = 0; b < 3; b++) {
        ck_assert_int_eq(block(&g, p0[b], d0[b]), SD_VF_DRAFTING);
        ck_assert_int_eq(block(&g, p0[b], d0[b]), SD_VF_PLAIN);
    }
    int r, plains = 0;
    while ((r = block(&g, 3.0, 3.2)) == SD_VF_PLAIN && plains < 40) plains++;
    ck_assert_int_eq(r, SD_VF_DRAFTING); /* the test of drafting after 4 of plain's */
    ck_assert_int_le(plains, SD_REGIME_GAP_FIRST);
    ck_assert_int_eq(block(&g, 3.0, 3.2), SD_VF_DRAFTING); /* and it won */
}
END_TEST

/* A drafting block whose steps chose no drafts measured plain steps: not
 * taken for drafting's rate (nor counted), so the next block drafts again;
 * one that drafted in a step counts. */
START_TEST(a_drafting_block_without_drafts_measures_nothing)
{
    sd_regime g;
    sd_regime_init(&g);
    int key = sd_regime_key(4, false);
    for (int b = 0; b < 3; b++)
        for (int i = 0; i < SD_REGIME_WARM + SD_REGIME_STEPS; i++) {
            ck_assert(!sd_regime_plain(&g, key));
            sd_regime_note(&g, 1.0, 1.0, false);
        }
    ck_assert_double_lt(sd_regime_rate(&g, SD_VF_DRAFTING), 0);
    ck_assert_uint_eq(g.load[key].blocks[SD_VF_DRAFTING], 0);
    for (int i = 0; i < SD_REGIME_WARM + SD_REGIME_STEPS; i++) {
        ck_assert(!sd_regime_plain(&g, key));
        sd_regime_note(&g, 2.0, 1.0, i == SD_REGIME_WARM + 3);
    }
    ck_assert_double_eq_tol(sd_regime_rate(&g, SD_VF_DRAFTING), 2.0, 1e-9);
    ck_assert(sd_regime_plain(&g, key)); /* then plain's first block */
}
END_TEST

/* Four requests whose drafts the step model finds worth ~1.1x plain: the
 * plain steps among steps 200..1200 (cycle: the cycle time is known — the
 * regime test runs — and counts its plain steps; else the steps without
 * drafts). */
static uint64_t plain_share(bool cycle, double hidden)
{
    sim s;
    sim_init(&s, 4, false);
    s.p_accept = 0.6;
    s.cycle = cycle;
    s.hidden = hidden;
    for (int i = 0; i < 200; i++) sim_step(&s, NULL);
    uint64_t p0 = s.ad.rg.plain_steps;
    uint64_t drafted = 0;
    for (int i = 0; i < 1000; i++) drafted += sim_step(&s, NULL) > 0;
    sd_adapt_free(&s.ad);
    return cycle ? s.ad.rg.plain_steps - p0 : 1000 - drafted;
}

/* What the step model does not see (a cost between steps, of drafting
 * steps only) makes drafting slower than plain: the regime test finds it
 * and runs plain; without the cycle time (the model alone) it drafts in
 * most steps (the model finds drafts worth ~1.1x plain, near a tie: its
 * plain steps vary from 25 to 370 of 1000 with the simulation's seed,
 * 946-948 with the regime test). */
START_TEST(regime_catches_what_the_model_misses)
{
    uint64_t without = plain_share(false, 1.0), with = plain_share(true, 1.0);
    ck_assert_msg(without < 400, "the model alone: %llu of 1000 steps plain", (unsigned long long)without);
    ck_assert_msg(with > 800, "the regime test: %llu of 1000 steps plain", (unsigned long long)with);
    /* nothing hidden: drafting pays and stays, plain's blocks rare */
    uint64_t fair = plain_share(true, 0);
    ck_assert_msg(fair < 200, "the regime test, drafting paying: %llu of 1000 steps plain", (unsigned long long)fair);
}
END_TEST

/* One slow step (5 ms more outside the engine, where drafting steps spend
 * ~0.6) is a hiccup, not the cost of drafting: drafting goes on. */
START_TEST(one_slow_step_is_a_hiccup)
{
    sim s;
    sim_one(&s, 0.8, 0.5);
    for (int i = 0; i < 300; i++) sim_step(&s, NULL);
    int before = 0, plain = 0;
    for (int i = 0; i < 30; i++) before += sim_step(&s, NULL) == 0;
    ck_assert_int_le(before, 10);
    s.once = 5;
    sim_step(&s, NULL);
    for (int i = 0; i < 30; i++) plain += sim_step(&s, NULL) == 0;
    ck_assert_msg(plain <= before + 3, "%d of 30 steps after the hiccup without drafts, %d before (overhead %.3f ms)",
                  plain, before, s.ad.draft_ms);
    sd_adapt_free(&s.ad);
}
END_TEST

/* The work between steps (1 ms a step here) is paid per step, so fewer,
 * longer steps pay: drafts accepted 40% of the time, which lose to plain
 * steps by the steps' own times, win by their cycles — and the scheduler
 * drafts, where before it priced steps by their wall time and drafted only
 * its probes. */
START_TEST(the_work_between_steps_counts)
{
    sim s;
    sim_one(&s, 0.4, 0.3);
    s.cycle = true;
    s.between = 1.0;
    for (int i = 0; i < 300; i++) sim_step(&s, NULL);
    int drafted = 0;
    for (int i = 0; i < 1000; i++) drafted += sim_step(&s, NULL) > 0;
    ck_assert_msg(drafted > 500, "%d of 1000 steps drafted", drafted);
    s.between = 0; /* nothing between steps: such drafts lose */
    for (int i = 0; i < 300; i++) sim_step(&s, NULL);
    drafted = 0;
    for (int i = 0; i < 1000; i++) drafted += sim_step(&s, NULL) > 0;
    ck_assert_msg(drafted < 200, "%d of 1000 steps drafted", drafted);
    sd_adapt_free(&s.ad);
}
END_TEST

START_TEST(fallback_follows_its_own_acceptance)
{
    double good = fallback_k(0.9, false), useless = fallback_k(0.0, false), fixed = fallback_k(0.0, true);
    ck_assert_msg(good >= 2, "good fallback drafts: %g a step", good);
    /* useless ones: a one-draft probe every SD_ADAPT_FB_PROBE steps, nothing else */
    ck_assert_msg(useless > 0 && useless <= 1.5 / SD_ADAPT_FB_PROBE, "useless fallback drafts: %g a step", useless);
    ck_assert_msg(fixed >= 1, "a request with its own num_draft verifies what the fallback has: %g", fixed);
}
END_TEST

/* One step of request 0 with 12 n-gram lookup drafts at hand whose n-gram
 * of length match matched: accepted at 0.97 each after 4-grams, never after
 * 1-grams. Returns the drafts chosen. */
static int lookup_step(sim *s, int match)
{
    int budgets[1] = {12}, avail[1] = {12}, offered[1], accepted[1] = {0}, catchup[1] = {0};
    bool had_q[1] = {0}, ready[1] = {0};
    double dms[1] = {0};
    s->q[0].match = match;
    ck_assert_int_eq(sd_adapt_plan(&s->ad, s->rp, s->qp, budgets, avail, catchup, NULL, 1, -1, 16, NULL, false), SD_OK);
    double p = match >= 4 ? 0.97 : 0.0;
    offered[0] = budgets[0];
    while (accepted[0] < offered[0] && (double)rand_r(&s->seed) / RAND_MAX < p) accepted[0]++;
    sd_step_timing t = timing_of(1 + budgets[0]);
    sd_adapt_done(&s->ad, &t, t.forward_ms + t.accept_ms + 0.05, 0, s->rp, s->qp, offered, accepted, had_q, catchup,
                  dms, ready, 1, false);
    return budgets[0];
}

/* A lookup's drafts are priced by the length of the n-gram that found them
 * (adapt.h): long runs after 4-grams, none after 1-grams, where one
 * estimate for both would choose alike for either. */
START_TEST(lookup_drafts_priced_by_their_match)
{
    sim s;
    sim_init(&s, 1, false);
    for (int i = 0; i < 400; i++) lookup_step(&s, rand_r(&s.seed) % 2 ? 4 : 1);
    int k4 = 0, k1 = 0;
    for (int i = 0; i < 100; i++) {
        k4 += lookup_step(&s, 4);
        k1 += lookup_step(&s, 1);
    }
    ck_assert_msg(k4 >= 800, "after 4-grams: %d drafts in 100 steps", k4);
    ck_assert_msg(k1 <= 20, "after 1-grams: %d drafts in 100 steps", k1);
    /* a request without a match length (another proposer's drafts) keeps its own estimate */
    ck_assert(s.q[0].acc.steps > 0);
    sd_adapt_free(&s.ad);
}
END_TEST

/* Serial, one request: the plan, then the lookup's step priced against it
 * (12 lookup drafts at hand, found by an n-gram of length match, accepted
 * at p_lookup each); the drafter's drafts are accepted at s->p_accept and
 * its call takes 0.3 ms + 0.05 ms a draft, which the step waits for.
 * Returns whether the lookup's drafts ran; the drafter's estimate must not
 * learn from them. */
static bool lookup_first_step(sim *s, int match, double p_lookup)
{
    int budgets[1] = {12}, k[1] = {0}, avail[1] = {12}, mt[1] = {match}, offered[1], accepted[1] = {0};
    int catchup[1] = {0};
    bool had_q[1] = {0}, ready[1] = {0};
    double dms[1] = {0};
    ck_assert_int_eq(sd_adapt_plan(&s->ad, s->rp, s->qp, budgets, NULL, catchup, NULL, 1, -1, 16, NULL, false), SD_OK);
    bool used = sd_adapt_lookup(&s->ad, s->rp, s->qp, k, avail, mt, 1, -1, 16, NULL);
    if (used) ck_assert_int_gt(k[0], 0);
    ck_assert(s->q[0].lookup == used);
    offered[0] = used ? k[0] : budgets[0];
    double p = used ? p_lookup : s->p_accept;
    while (accepted[0] < offered[0] && (double)rand_r(&s->seed) / RAND_MAX < p) accepted[0]++;
    dms[0] = used || offered[0] == 0 ? 0 : 0.3 + 0.05 * offered[0];
    sd_step_timing t = timing_of(1 + offered[0]);
    uint64_t drafter_steps = s->q[0].acc.steps;
    sd_adapt_done(&s->ad, &t, t.forward_ms + t.accept_ms + 0.05 + dms[0], 0, s->rp, s->qp, offered, accepted, had_q,
                  catchup, dms, ready, 1, false);
    if (used) ck_assert_uint_eq(s->q[0].acc.steps, drafter_steps);
    ck_assert(!s->q[0].lookup && !s->ad.step_lookup);
    return used;
}

/* Lookup drafts after long n-grams, accepted as often as the drafter's,
 * win the step (no drafter call to wait for); after 1-grams that are never
 * accepted they lose it, and the drafter keeps drafting. */
START_TEST(lookup_first_where_it_pays)
{
    sim s;
    sim_one(&s, 0.8, 0);
    int won = 0;
    for (int i = 0; i < 400; i++) won += lookup_first_step(&s, 4, 0.97) && i >= 200;
    ck_assert_msg(won >= 180, "lookup drafts after 4-grams ran in %d of 200 steps", won);
    sim_one(&s, 0.8, 0);
    won = 0;
    for (int i = 0; i < 400; i++) won += lookup_first_step(&s, 1, 0.0) && i >= 200;
    ck_assert_msg(won <= 20, "lookup drafts after 1-grams ran in %d of 200 steps", won);
    ck_assert_uint_gt(s.q[0].acc.steps, 150); /* the drafter drafted meanwhile */
    sd_adapt_free(&s.ad);
}
END_TEST

/* No lookup step in the regime test's plain block, nor where a request's
 * own num_draft asks the drafter. */
START_TEST(lookup_first_not_against_the_rules)
{
    sim s;
    sim_one(&s, 0.8, 0);
    for (int i = 0; i < 50; i++) lookup_first_step(&s, 4, 0.97);
    int budgets[1] = {12}, k[1] = {0}, avail[1] = {12}, mt[1] = {4};
    ck_assert_int_eq(sd_adapt_plan(&s.ad, s.rp, s.qp, budgets, NULL, NULL, NULL, 1, -1, 16, NULL, false), SD_OK);
    s.ad.step_plain = true;
    ck_assert(!sd_adapt_lookup(&s.ad, s.rp, s.qp, k, avail, mt, 1, -1, 16, NULL));
    ck_assert_int_eq(k[0], 0);
    sd_adapt_free(&s.ad);
    sim_init(&s, 1, true);
    s.p_accept = 0.8;
    for (int i = 0; i < 50; i++) ck_assert(!lookup_first_step(&s, 4, 0.97));
    sd_adapt_free(&s.ad);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vf_adapt");
    TCase *tc = tcase_create("loop");
    tcase_add_test(tc, follows_acceptance);
    tcase_add_test(tc, drafting_resumes_after_a_spell);
    tcase_add_test(tc, plain_measured_again);
    tcase_add_test(tc, new_requests_start_from_their_kind);
    tcase_add_test(tc, fixed_and_budgets);
    tcase_add_test(tc, late_spans_teach_nothing);
    tcase_add_test(tc, probe_span_past_the_guess);
    tcase_add_test(tc, new_request_probes_at_kinds_interval);
    tcase_add_test(tc, late_drafts_priced_at_their_yield);
    tcase_add_test(tc, dry_answers_teach_supply);
    tcase_add_test(tc, pipelined_predictions_by_kind);
    tcase_add_test(tc, drafts_at_hand_priced_in_full);
    tcase_add_test(tc, fallback_follows_its_own_acceptance);
    tcase_add_test(tc, lookup_drafts_priced_by_their_match);
    tcase_add_test(tc, lookup_first_where_it_pays);
    tcase_add_test(tc, lookup_first_not_against_the_rules);
    tcase_add_test(tc, regime_blocks);
    tcase_add_test(tc, regime_catches_what_the_model_misses);
    tcase_add_test(tc, catching_up_spread_over_the_block);
    tcase_add_test(tc, catching_up_spread_over_the_request);
    tcase_add_test(tc, catching_up_teaches_no_bias);
    tcase_add_test(tc, first_catching_up_on_one_request);
    tcase_add_test(tc, a_drafting_block_without_drafts_measures_nothing);
    tcase_add_test(tc, regime_figures_age_with_the_load);
    tcase_add_test(tc, catching_up_priced_by_its_tokens);
    tcase_add_test(tc, one_slow_step_is_a_hiccup);
    tcase_add_test(tc, the_work_between_steps_counts);
    tcase_add_test(tc, the_pipelining_test_keeps_the_faster_protocol);
    tcase_add_test(tc, a_seeded_plain_rate_spares_the_plain_block);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
