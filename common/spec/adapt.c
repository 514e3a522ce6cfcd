/* adapt.c — see adapt.h. */
#include "adapt.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "clock.h"

#define ACC_ALPHA 0.1       /* a request's acceptance (a change shows faster: spec_model.h) */
#define ACC_FADE 0.02       /* a step without drafts: a request's later positions fade towards its kind's */
#define PRIOR_ALPHA 0.05    /* the server-wide estimates: many requests feed them */
#define SEED_WEIGHT 4       /* a new request's estimate starts as this many observations of its kind's */
#define OVER_ALPHA 0.1      /* overheads and the drafter's pace */
#define HICCUP 1.5          /* an overhead sample beyond this many times its average counts as that many */
#define FADE 0.02           /* a step without drafts: drafting steps' overhead and bias fade (half in ~35 steps) */
#define REFRESH_AGE 64      /* passes after which a plain step's figure is measured again, if it could win */
#define REFRESH_OPT 0.7     /* ... at this share of its figure */
#define CATCH_SPREAD_MAX 64 /* steps at most that one catching up is spread over (a request's steps left) */
#define LATE_MIN 8          /* requests given drafts without their span measured before their yield discounts plans */

void sd_adapt_init(sd_adapt *ad)
{
    memset(ad, 0, sizeof *ad);
    sd_cost_init(&ad->cost);
    sd_cost_init(&ad->drafter);
    sd_regime_init(&ad->rg);
    sd_regime_init(&ad->pipe_rg);
    for (int k = 0; k < SD_ADAPT_ACCEPT_KEYS; k++) {
        sd_accept_init(&ad->prior[k], NULL, 0);
        sd_accept_init(&ad->fb_prior[k], NULL, 0);
        for (int c = 0; c < SD_ADAPT_MATCH_CLASSES; c++) sd_accept_init(&ad->m_prior[k][c], NULL, 0);
        ad->probe_every[k] = SD_ADAPT_PROBE_FIRST;
    }
}

void sd_adapt_free(sd_adapt *ad)
{
    free(ad->sr);
    free(ad->cand);
    free(ad->kk);
    free(ad->map);
    free(ad->k0);
    free(ad->known);
    ad->known = NULL;
    ad->sr = NULL;
    ad->cand = NULL;
    ad->kk = ad->map = ad->k0 = NULL;
    ad->cap = 0;
}

void sd_areq_init(sd_areq *q, bool fixed)
{
    memset(q, 0, sizeof *q);
    sd_accept_init(&q->acc, NULL, 0);
    sd_accept_init(&q->fb_acc, NULL, 0);
    for (int c = 0; c < SD_ADAPT_MATCH_CLASSES; c++) sd_accept_init(&q->m_acc[c], NULL, 0);
    q->key = -1;
    q->fixed = fixed;
    q->probe_every = SD_ADAPT_PROBE_FIRST;
    q->k = -1;
    q->late_gain = -1;
}

/* Calibration with n throwaway requests at temperature t (n <= SD_ADAPT_CALIB_MAX). */
static sd_status calibrate_n(sd_adapt *ad, sd_engine *e, int kmax, int n, float t, double until_ms, char *err,
                             size_t errlen)
{
    int32_t prompt[16];
    int vocab = sd_model_cfg(sd_engine_model(e))->vocab_size;
    sd_req_params p = sd_req_params_default();
    p.sampling.temperature = t;
    p.max_tokens = 3 * (kmax + 1) * (kmax + 2) + 4; /* more than all its passes could commit */
    p.ignore_eos = true;
    p.speculate = true;
    p.num_draft = kmax;
    sd_req *r[SD_ADAPT_CALIB_MAX];
    sd_proposal prop[SD_ADAPT_CALIB_MAX];
    memset(prop, 0, sizeof prop);
    sd_status st = SD_OK;
    int m = 0;
    for (; m < n && st == SD_OK; m++) {
        for (int i = 0; i < 16; i++) prompt[i] = (int32_t)((i * 37 + m * 101 + 1) % vocab);
        st = sd_req_new(e, (uint64_t)m, prompt, 16, &p, &r[m], err, errlen);
    }
    if (st != SD_OK) m--;
    for (int pass = 0; pass < 3 * (kmax + 1) && st == SD_OK && sd_now_ms() < until_ms; pass++) {
        /* a large model on a slow device stops early: what was measured will do */
        bool prefill = false, done = false;
        for (int j = 0; j < m; j++) {
            prefill |= sd_req_prefilling(r[j]);
            done |= r[j]->finish != SD_FINISH_NONE;
        }
        if (done) break;
        if (prefill) pass--; /* the prompts first (in chunks, as the engine plans them) */
        for (int j = 0; j < m; j++) {
            prop[j].n = prefill ? 0 : pass % (kmax + 1); /* 0..kmax drafts, three rounds */
            for (int i = 0; i < prop[j].n; i++) prop[j].tokens[i] = (int32_t)((i * 37 + 1) % vocab);
        }
        st = sd_engine_step(e, r, m, prop, err, errlen);
        const sd_step_timing *tm = sd_engine_last_timing(e);
        if (st == SD_OK && !prefill && tm->rows > 0) {
            sd_cost_forward(&ad->cost, tm->rows, tm->seqs, tm->forward_ms);
            sd_cost_accept(&ad->cost, tm->greedy_rows, tm->sampled_pos, tm->accept_ms);
        }
    }
    for (int j = 0; j < m; j++) sd_req_free(e, r[j]);
    return st;
}

sd_status sd_adapt_calibrate(sd_adapt *ad, sd_engine *e, int kmax, int max_batch, double budget_ms, char *err,
                             size_t errlen)
{
    if (kmax > SD_MAX_DRAFT) kmax = SD_MAX_DRAFT;
    double until = sd_now_ms() + budget_ms;
    sd_status st = calibrate_n(ad, e, kmax, 1, 0.0f, until, err, errlen);
    if (st == SD_OK) st = calibrate_n(ad, e, kmax, 1, 0.8f, until, err, errlen);
    /* batches: the rows of many sequences cost more than one sequence's (CPU, 1 thread: 16 rows of 16
     * requests 4.4 ms, 13 of one 2.4); measured only from serving, the counts beyond the plain step of a
     * full batch were priced from one or two passes or not at all */
    for (int b = 4; b <= max_batch && b <= SD_ADAPT_CALIB_MAX && st == SD_OK; b *= 4)
        st = calibrate_n(ad, e, kmax, b, 0.0f, until, err, errlen);
    return st;
}

bool sd_adapt_seed_plain(sd_adapt *ad, int decoding, bool sampled)
{
    if (decoding < 1 || sd_cost_samples(&ad->cost, decoding) == 0) return false;
    double ms = sd_cost_forward_ms(&ad->cost, decoding, decoding) +
                sd_cost_accept_ms(&ad->cost, sampled ? 0 : decoding, sampled ? decoding : 0);
    if (!(ms > 0)) return false;
    sd_regime_seed(&ad->rg, sd_regime_key(decoding, sampled), SD_VF_PLAIN, (double)decoding * SD_REGIME_STEPS,
                   ms * SD_REGIME_STEPS);
    return true;
}

static int temp_bucket(float t) { return t <= 0 ? 0 : t <= 0.5f ? 1 : t <= 1.0f ? 2 : t <= 1.5f ? 3 : 4; }

static int key_of(sd_verify_mode m, float temperature)
{
    int mi = m == SD_VERIFY_GREEDY ? 0 : m == SD_VERIFY_MATCH ? 1 : 2;
    return mi * SD_ADAPT_TEMP_BUCKETS + temp_bucket(temperature);
}

static bool wants_q(const sd_req *r)
{
    return r->p.sampling.temperature > 0 && (r->p.verify == SD_VERIFY_AUTO || r->p.verify == SD_VERIFY_REJECTION);
}

int sd_adapt_key(const sd_adapt *ad, const sd_req *r)
{
    return key_of(sd_req_verify_mode(r, ad->drafter_q && wants_q(r)), r->p.sampling.temperature);
}

static sd_status fit(sd_adapt *ad, int n)
{
    if (n <= ad->cap) return SD_OK;
    size_t cap = (size_t)ad->cap, want = (size_t)n;
    const sd_grow_item items[] = {SD_GROW_ITEM(ad->sr),    SD_GROW_ITEM(ad->kk),
                                  SD_GROW_ITEM(ad->map),   SD_GROW_ITEM(ad->k0),
                                  SD_GROW_ITEM(ad->known), {&ad->cand, SD_MAX_DRAFT * sizeof *ad->cand}};
    if (sd_grow_all(items, 6, &cap, want) != SD_OK) return SD_ERR_NOMEM;
    ad->cap = (int)cap;
    return SD_OK;
}

/* A request's estimate, seeded from its kind's at its first use. */
static void seed(sd_adapt *ad, const sd_req *r, sd_areq *q)
{
    if (q->key >= 0) return;
    q->key = sd_adapt_key(ad, r);
    q->probe_every = ad->probe_every[q->key];
    const sd_accept *prior = &ad->prior[q->key];
    if (prior->steps > 0) sd_accept_init(&q->acc, prior, SEED_WEIGHT);
}

/* The class of q->match (> 0): its index in m_acc. */
static int match_class(const sd_areq *q)
{
    return (q->match < SD_ADAPT_MATCH_CLASSES ? q->match : SD_ADAPT_MATCH_CLASSES) - 1;
}

/* The estimate q's drafts of this step are priced and judged by: its own,
 * or for an n-gram lookup's (q->match > 0) its estimate for the length
 * that matched, seeded at its first use from its kind's for that length —
 * or, before any, from its own. A lookup's drafts are as good as the
 * n-gram that found them: measured on a CPU, demo target, C = 1, T = 0,
 * 1-gram matches had their first draft accepted 34% of the time, 4-gram
 * matches 96%, each later one 97% — one estimate for both drafted 3.8
 * after 1-grams and 5.1 after 4-grams, with 10 at hand. After seed(). */
static sd_accept *estimate(sd_adapt *ad, sd_areq *q)
{
    if (q->match <= 0 || q->key < 0) return &q->acc;
    int c = match_class(q);
    if (!(q->m_seeded & 1u << c)) {
        const sd_accept *prior = &ad->m_prior[q->key][c];
        if (prior->steps > 0) sd_accept_init(&q->m_acc[c], prior, SEED_WEIGHT);
        else q->m_acc[c] = q->acc;
        q->m_seeded |= 1u << c;
    }
    return &q->m_acc[c];
}

/* acc, or where a request's n drafts are at hand (a span, the fallback's
 * lookup), its copy in slot j of ad->known with their supply certain: the
 * estimate's supply is for drafts still to come, and pricing drafts in hand
 * at it planned steps short of the rows they had (measured on a CPU, 16
 * requests, n-gram spans: 32.4 rows planned, 37 verified). n < 0: a span
 * not at hand (pipelined) — its drafts come only as often as such requests'
 * drafts were measured to (the span during a wait, the fallback's): plans
 * priced as if every span came promised 16% more tokens than steps gave. */
static const sd_accept *supply_of(sd_adapt *ad, int j, const sd_accept *acc, int n)
{
    if (n == 0 || (n < 0 && ad->n_late < LATE_MIN)) return acc;
    ad->known[j] = *acc;
    if (n > 0) sd_accept_supply_known(&ad->known[j], n);
    else sd_accept_supply_scaled(&ad->known[j], ad->late_pred > 0 ? ad->late_real / ad->late_pred : 1);
    return &ad->known[j];
}

/* A decoding request's place in the schedule (slot j): its estimate (seeded
 * from its kind's at its first decode step), and the drafts it may verify. */
static sd_sched_req sched_req(sd_adapt *ad, int j, const sd_req *r, sd_areq *q, int budget, int avail, double resume_ms,
                              bool pipelined)
{
    seed(ad, r, q);
    int kmax = avail >= 0 && avail < budget ? avail : budget;
    return (sd_sched_req){supply_of(ad, j, estimate(ad, q),
                                    avail > 0                ? kmax
                                    : avail < 0 && pipelined ? -1
                                                             : 0),
                          q->fixed ? kmax : 0,
                          kmax,
                          r->p.sampling.temperature > 0,
                          r->kv.len,
                          r->kv.n_blocks,
                          resume_ms};
}

/* Whether the figure of a step of rows is due to be measured again: fewer
 * than three samples (none: interpolated; a size's first passes are often
 * slow, the first steps after a wave of prompts), or none for 4 passes per
 * sample it has (at most REFRESH_AGE); not beyond the table (such steps
 * are mostly prompt). */
static bool stale(const sd_cost *c, int rows)
{
    if (rows > SD_COST_ROWS) return false;
    unsigned n = sd_cost_samples(c, rows);
    unsigned long long due = 4ull * n < REFRESH_AGE ? 4ull * n : REFRESH_AGE;
    return n < 3 || sd_cost_age(c, rows) > due;
}

/* The plan without drafts beyond the fixed ones, instead of plan, when it
 * is better once each prediction is corrected by the average error of its
 * kind of step (with drafts, without) — or when its figure is due to be
 * measured again and the plain step would win were its time REFRESH_OPT of
 * the figure: a plan is measured only when it runs, and a plain step
 * measured once in a slow spell would otherwise stay dear for good while
 * drafting runs at a lower rate than plain steps really make (measured on
 * a CPU, 2 cores, 16 requests: 16 rows kept 4.9 ms from one step after the
 * prompts while they took 3.6, and steps drafted at 3.2 tokens a ms against
 * plain's 4.3). */
static sd_sched_plan debiased(sd_adapt *ad, int m, sd_sched_plan plan)
{
    bool extra = false;
    for (int j = 0; j < m; j++) extra |= ad->kk[j] > ad->k0[j];
    double t = ad->alt_ms, tokens = ad->alt_tok, t_plan = plan.step_ms * (1 + ad->bias_draft);
    if (!extra || plan.step_ms <= 0 || t <= 0) return plan;
    bool better = !sd_sched_beats(&plan, plan.tokens, t_plan, tokens, t * (1 + ad->bias_plain));
    bool refresh = !better && stale(&ad->cost, (int)(ad->alt_rows + 0.5)) &&
                   !sd_sched_beats(&plan, plan.tokens, t_plan, tokens, REFRESH_OPT * t);
    if (!better && !refresh) return plan;
    memcpy(ad->kk, ad->k0, (size_t)m * sizeof *ad->kk);
    return (sd_sched_plan){t, tokens, 0, plan.rate};
}

/* The plan without drafts beyond the fixed ones, in ad->k0: its predicted
 * time (ad->alt_ms, 0: unknown), tokens and rows. */
static void plain_alt(sd_adapt *ad, const sd_sched_step *st, int m)
{
    double tokens = st->fixed_tokens, rows = st->fixed_rows;
    for (int j = 0; j < m; j++) {
        ad->k0[j] = ad->sr[j].kmin;
        tokens += sd_accept_expected(ad->sr[j].acc, ad->k0[j]);
        rows += 1 + sd_accept_drafts(ad->sr[j].acc, ad->k0[j]);
    }
    double t = sd_sched_step_ms(st, ad->sr, m, ad->k0);
    ad->alt_ms = t > 0 ? t : 0;
    ad->alt_tok = tokens;
    ad->alt_rows = rows;
}

/* This step's plan: the regime test's plain block (regime.h) runs the
 * plain alternative; otherwise the scheduler's choice, debiased. */
static sd_sched_plan choose(sd_adapt *ad, sd_sched_step *st, int m)
{
    plain_alt(ad, st, m);
    if (ad->step_plain) {
        memcpy(ad->kk, ad->k0, (size_t)m * sizeof *ad->kk);
        return (sd_sched_plan){ad->alt_ms, ad->alt_tok, 0, 0};
    }
    return debiased(ad, m, sd_sched_choose(st, ad->sr, m, ad->kk, ad->cand));
}

/* At most one probe per step: the request left without drafts longest,
 * once its probe is due, gets one draft — if even a draft sure to be
 * accepted could pay for its cost beside this plan (otherwise the cost,
 * not the acceptance, keeps it plain, and only a refresh is due now and
 * then, to re-measure that cost). Returns the request's index or -1. */
static int probe(sd_adapt *ad, const sd_sched_step *st, sd_areq *const *aq, int m, sd_sched_plan plan)
{
    int best = -1;
    for (int j = 0; j < m; j++) {
        const sd_areq *q = aq[ad->map[j]];
        if (ad->kk[j] == 0 && ad->sr[j].kmax > 0 && q->zero_run >= q->probe_every &&
            (best < 0 || q->zero_run > aq[ad->map[best]]->zero_run))
            best = j;
    }
    if (best < 0 || plan.step_ms <= 0) return -1;
    ad->kk[best] = 1;
    double t = sd_sched_step_ms(st, ad->sr, m, ad->kk);
    if (aq[ad->map[best]]->zero_run < SD_ADAPT_PROBE_REFRESH &&
        !sd_sched_beats(&plan, plan.tokens + 1, t, plan.tokens, plan.step_ms)) {
        ad->kk[best] = 0;
        return -1;
    }
    ad->pred_ms = t;
    return best;
}

/* Until the drafter's catching up is measured its price is unknown (0): of
 * the requests the plan has catch up, only the one least behind does, so
 * that the first measure does not cost a step of every request's backlog
 * (on a CPU, 2 cores, 16 requests 49-67 tokens behind after the regime
 * test's plain blocks: one step of 78 ms where 4 were usual). */
static void explore_catchup(sd_adapt *ad, const sd_sched_step *st, const int *catchup, int m)
{
    if (ad->n_catch > 0 || !catchup) return;
    int keep = -1;
    for (int j = 0; j < m; j++) {
        int c = catchup[ad->map[j]];
        if (ad->kk[j] > 0 && c > 0 && (keep < 0 || c < catchup[ad->map[keep]])) keep = j;
    }
    bool cut = false;
    for (int j = 0; j < m; j++)
        if (j != keep && ad->kk[j] > 0 && catchup[ad->map[j]] > 0) {
            ad->kk[j] = 0;
            cut = true;
        }
    if (cut) ad->pred_ms = sd_sched_step_ms(st, ad->sr, m, ad->kk);
}

/* A prompt chunk of r in the step: fixed rows; its last one verifies a row
 * (chunk 0: its prompt waits for a later step). */
static void add_chunk(sd_sched_step *st, const sd_req *r, int chunk)
{
    if (chunk == 0) return;
    st->fixed_rows += chunk;
    st->seqs++;
    if (sd_req_prefill_samples(r, chunk)) {
        st->fixed_tokens += 1;
        if (r->p.sampling.temperature > 0) st->fixed_sampled++;
        else st->fixed_greedy++;
    }
}

/* Pipelined, the drafter drafts while the verifier verifies: the time a
 * step spends outside the engine is measured apart for steps whose requests
 * with drafts all have their span at hand (the drafter's time hidden: the
 * messages only) and for steps where some have not (a wait, or the
 * fallback's lookup), and the one of this step's kind counts in full. Until
 * that kind is measured, the drafter's time counts by the share of steps
 * without their span (1 - hit). */
static void pipe_overhead(sd_adapt *ad, sd_req *const *reqs, const int *budgets, const int *avail, int n,
                          sd_sched_step *st)
{
    bool ready = true;
    for (int i = 0; i < n && avail; i++)
        if (budgets[i] > 0 && avail[i] < 0 && reqs[i]->finish == SD_FINISH_NONE && !sd_req_prefilling(reqs[i]))
            ready = false;
    ad->step_ready = ready;
    if (ready ? ad->n_ready : ad->n_miss) {
        st->exposure = 0;
        st->draft_ms = ready ? ad->ready_ms : ad->miss_ms;
    } else {
        st->exposure = 1 - ad->hit;
    }
}

/* The regime test's choice for this step (ad->step_plain), by the load of
 * its decoding requests. Returns whether the step is one the test may
 * measure: a request whose drafts the scheduler chooses could draft. */
static bool regime_step(sd_adapt *ad, sd_req *const *reqs, sd_areq *const *aq, const int *budgets, int n)
{
    int m = 0;
    bool testable = false, sampled = false;
    for (int i = 0; i < n; i++) {
        const sd_req *r = reqs[i];
        if (r->finish != SD_FINISH_NONE || sd_req_prefilling(r)) continue;
        m++;
        sampled |= r->p.sampling.temperature > 0;
        testable |= !aq[i]->fixed && budgets[i] > 0;
    }
    ad->step_plain = testable && sd_regime_plain(&ad->rg, sd_regime_key(m, sampled));
    return testable;
}

/* The steps one catching up of request r serves: once caught up, the drafter
 * drafts for it each step until the plan stops — at most its steps left (at
 * its expected tokens a step, CATCH_SPREAD_MAX at most), at least the
 * measured length of a drafting run or the drafting block's steps left
 * (spread). A fresh request once sat out whole drafting blocks: the prompt
 * it first had to catch up on, spread over runs of 2-4 steps (probes are
 * runs of one), cost more than its drafts gained; the backlog grew each
 * plain step, and its drafts never paid (CPU, 2 cores, 4 greedy requests). */
static double catch_spread(sd_adapt *ad, const sd_req *r, sd_areq *q, int budget, double spread)
{
    seed(ad, r, q);
    double e = budget > 0 ? sd_accept_expected(estimate(ad, q), budget) : 1;
    double steps = (r->p.max_tokens - sd_req_n_output(r)) / (e > 1 ? e : 1);
    if (steps > CATCH_SPREAD_MAX) steps = CATCH_SPREAD_MAX;
    return steps > spread ? steps : spread;
}

sd_status sd_adapt_plan(sd_adapt *ad, sd_req *const *reqs, sd_areq *const *aq, int *budgets, const int *avail,
                        const int *catchup, int *tell, int n, int kv_free, int bs, const int *chunk, bool pipelined)
{
    if (fit(ad, n) != SD_OK) return SD_ERR_NOMEM;
    sd_sched_step st = {.cost = &ad->cost,
                        .plain_ms = ad->plain_ms,
                        .draft_ms = ad->draft_ms,
                        .drafter = &ad->drafter,
                        .drafter_fixed = ad->drafter_fixed,
                        .exposure = 1,
                        .kv_free = kv_free,
                        .block_size = bs};
    if (pipelined) pipe_overhead(ad, reqs, budgets, avail, n, &st);
    bool testable = regime_step(ad, reqs, aq, budgets, n);
    /* the drafter's catching up is paid once and serves the steps the request then keeps drafting: spread
     * over their measured number, or the drafting block's steps left if more (it drafts through them) */
    double left = sd_regime_left(&ad->rg), spread = ad->run_steps > left ? ad->run_steps : left;
    if (spread < 1) spread = 1;
    int m = 0;
    for (int i = 0; i < n; i++) {
        const sd_req *r = reqs[i];
        aq[i]->k = -1;
        if (r->finish != SD_FINISH_NONE) continue;
        if (sd_req_prefilling(r)) {
            add_chunk(&st, r, chunk ? chunk[i] : 0);
            continue;
        }
        double resume = catchup && catchup[i] > 0
                            ? st.exposure * catchup[i] * ad->catch_ms / catch_spread(ad, r, aq[i], budgets[i], spread)
                            : 0;
        ad->sr[m] = sched_req(ad, m, r, aq[i], budgets[i], avail ? avail[i] : -1, resume, pipelined);
        ad->map[m++] = i;
        st.seqs++;
    }
    ad->step_test = testable && st.fixed_rows == 0;
    bool may_draft = false;
    for (int j = 0; j < m; j++) may_draft |= budgets[ad->map[j]] > 0;
    ad->pipe_measure = ad->pipe_asked && may_draft && st.fixed_rows == 0 && !ad->step_plain;
    ad->pipe_rows = m;
    sd_sched_plan plan = choose(ad, &st, m);
    ad->pred_ms = plan.step_ms;
    explore_catchup(ad, &st, catchup, m);
    int probing = ad->step_plain ? -1 : probe(ad, &st, aq, m, plan);
    ad->maxk = 0;
    for (int j = 0; j < m; j++) {
        int i = ad->map[j], k = ad->kk[j];
        sd_areq *q = aq[i];
        bool eligible = budgets[i] > 0;
        if (eligible) {
            q->k = k;
            q->probing = j == probing;
        }
        bool late = pipelined && eligible && k > 0 && avail && avail[i] < 0;
        q->late_gain = late ? sd_accept_expected(&q->acc, k) - 1 : -1;
        /* pipelined: the drafter drafts a little beyond this step's choice (room to grow), and just
         * before a probe may come one draft past its guess of this step's token (with nothing in
         * flight a span's first token is that guess: told one, the probe found nothing left) */
        if (tell && eligible)
            tell[i] = q->fixed                                               ? budgets[i]
                      : k > 0                                                ? (k + 2 < budgets[i] ? k + 2 : budgets[i])
                      : !ad->step_plain && q->zero_run + 1 >= q->probe_every ? (budgets[i] < 2 ? budgets[i] : 2)
                                                                             : 0;
        budgets[i] = k;
        if (k > ad->maxk) ad->maxk = k;
    }
    ad->plan = plan;
    ad->plan.step_ms = ad->pred_ms;
    return SD_OK;
}

/* The lookup step's place in the schedule for request i (slot j): its
 * lookup drafts priced by its estimate for the match length, or none. */
static sd_sched_req lookup_req(sd_adapt *ad, int j, const sd_req *r, sd_areq *q, int avail, int match)
{
    seed(ad, r, q);
    const sd_accept *acc = &q->acc;
    if (avail > 0) {
        q->match = match;
        acc = supply_of(ad, j, estimate(ad, q), avail);
        q->match = 0;
    }
    return (sd_sched_req){acc, 0, avail > 0 ? avail : 0, r->p.sampling.temperature > 0, r->kv.len, r->kv.n_blocks, 0};
}

bool sd_adapt_lookup(sd_adapt *ad, sd_req *const *reqs, sd_areq *const *aq, int *k, const int *lk_avail,
                     const int *match, int n, int kv_free, int bs, const int *chunk)
{
    if (ad->step_plain || ad->plan.step_ms <= 0 || fit(ad, n) != SD_OK) return false;
    sd_sched_step st = {
        .cost = &ad->cost, .plain_ms = ad->plain_ms, .draft_ms = ad->plain_ms, .kv_free = kv_free, .block_size = bs};
    int m = 0;
    for (int i = 0; i < n; i++) {
        const sd_req *r = reqs[i];
        if (r->finish != SD_FINISH_NONE) continue;
        if (sd_req_prefilling(r)) {
            add_chunk(&st, r, chunk ? chunk[i] : 0);
            continue;
        }
        if (aq[i]->fixed && aq[i]->k > 0) return false; /* its own num_draft: the drafter's */
        ad->sr[m] = lookup_req(ad, m, r, aq[i], aq[i]->k >= 0 ? lk_avail[i] : 0, match[i]);
        ad->map[m++] = i;
        st.seqs++;
    }
    sd_sched_plan lp = sd_sched_choose(&st, ad->sr, m, ad->kk, ad->cand);
    double bias = ad->maxk > 0 ? ad->bias_draft : ad->bias_plain;
    if (lp.drafts == 0 || lp.step_ms <= 0 ||
        !sd_sched_beats(&ad->plan, lp.tokens, lp.step_ms * (1 + ad->bias_plain), ad->plan.tokens,
                        ad->plan.step_ms * (1 + bias)))
        return false;
    for (int j = 0; j < m; j++) {
        int i = ad->map[j];
        sd_areq *q = aq[i];
        k[i] = ad->kk[j];
        if (q->k < 0) continue;
        q->k = k[i];
        q->probing = false;
        q->lookup = k[i] > 0;
        q->match = k[i] > 0 ? match[i] : 0;
    }
    ad->maxk = 0;
    ad->step_lookup = true;
    ad->pred_ms = lp.step_ms;
    ad->plan = lp;
    return true;
}

sd_status sd_adapt_fallback(sd_adapt *ad, sd_req *const *reqs, sd_areq *const *aq, int *k, const int *fb_avail, int n,
                            const int *chunk)
{
    for (int i = 0; i < n; i++) aq[i]->fb_k = 0;
    if (fit(ad, n) != SD_OK) {
        for (int i = 0; i < n; i++) k[i] = fb_avail[i] > 0 ? 0 : k[i];
        return SD_ERR_NOMEM;
    }
    /* the drafter's time is spent or hidden whatever is chosen now: the overhead is one figure */
    double over = ad->n_miss ? ad->miss_ms : ad->draft_ms;
    sd_sched_step st = {.cost = &ad->cost, .plain_ms = over, .draft_ms = over, .kv_free = -1};
    int m = 0;
    for (int i = 0; i < n; i++) {
        const sd_req *r = reqs[i];
        sd_areq *q = aq[i];
        if (r->finish != SD_FINISH_NONE) continue;
        if (sd_req_prefilling(r)) {
            add_chunk(&st, r, chunk ? chunk[i] : 0);
            continue;
        }
        seed(ad, r, q);
        bool sampled = r->p.sampling.temperature > 0;
        if (fb_avail[i] > 0) {
            const sd_accept *prior = &ad->fb_prior[q->key];
            if (!q->fb_seeded && prior->steps > 0) sd_accept_init(&q->fb_acc, prior, SEED_WEIGHT);
            q->fb_seeded = true;
            int kmax = fb_avail[i] < k[i] ? fb_avail[i] : k[i];
            ad->sr[m] = (sd_sched_req){
                supply_of(ad, m, &q->fb_acc, kmax), q->fixed ? kmax : 0, kmax, sampled, r->kv.len, r->kv.n_blocks, 0};
        } else {
            ad->sr[m] =
                (sd_sched_req){supply_of(ad, m, &q->acc, k[i]), k[i], k[i], sampled, r->kv.len, r->kv.n_blocks, 0};
        }
        ad->map[m++] = i;
        st.seqs++;
    }
    sd_sched_plan plan = sd_sched_choose(&st, ad->sr, m, ad->kk, ad->cand);
    if (plan.step_ms > 0 && ad->pred_ms > 0) ad->pred_ms = plan.step_ms; /* the step that runs */
    for (int j = 0; j < m; j++) {
        int i = ad->map[j];
        sd_areq *q = aq[i];
        if (fb_avail[i] <= 0) continue;
        k[i] = ad->kk[j];
        if (k[i] > 0) q->fb_zero_run = 0;
        else if (++q->fb_zero_run >= SD_ADAPT_FB_PROBE && ad->sr[j].kmax > 0) k[i] = 1, q->fb_zero_run = 0;
        q->fb_k = k[i];
    }
    return SD_OK;
}

/* An overhead's average: once a few samples came, one beyond HICCUP times
 * the average (plus 0.1 ms, for an average near zero) counts as that much —
 * one slow step of a shared machine (5 ms outside the engine where 0.3 was
 * usual, on a CPU, 2 cores, one request) otherwise priced every draft out
 * for some 60 steps while its mark faded. */
static double over_update(double avg, double x, unsigned *n)
{
    double cap = HICCUP * avg + 0.1;
    return sd_avg_update(avg, *n >= 3 && x > cap ? cap : x, n, OVER_ALPHA);
}

/* The step's time outside the engine (step_ms: its cycle, or its wall time
 * where the cycle is unknown) feeds the overhead estimates; drafter_ms: the
 * drafter's time behind this step's drafts; catching_up: that call first
 * took in tokens it was behind on (the step's error is then not drafting's). */
static void note_overhead(sd_adapt *ad, double engine_ms, double step_ms, double drafter_ms, bool catching_up,
                          bool pipelined)
{
    if (step_ms <= 0 || engine_ms <= 0) return;
    double exposed = step_ms > engine_ms ? step_ms - engine_ms : 0;
    if (ad->maxk > 0) {
        double x = exposed - (pipelined ? 1 - ad->hit : 1) * drafter_ms;
        ad->draft_ms = over_update(ad->draft_ms, x > 0 ? x : 0, &ad->n_draft);
        if (pipelined && ad->step_ready) ad->ready_ms = over_update(ad->ready_ms, exposed, &ad->n_ready);
        else if (pipelined) ad->miss_ms = over_update(ad->miss_ms, exposed, &ad->n_miss);
    } else {
        ad->plain_ms = over_update(ad->plain_ms, exposed, &ad->n_plain);
        /* what only drafting steps renew fades towards what plain steps show: a plan kept out by an old
         * error (a slow spell of the drafter, its messages) would never be measured again (the regime
         * test's plain blocks chose nothing: they end and drafting is measured again; a lookup step is priced
         * against the drafter's plan every time) */
        double fade = ad->step_plain || ad->step_lookup ? 0 : FADE;
        ad->bias_draft *= 1 - fade;
        if (ad->n_draft) ad->draft_ms += fade * (ad->plain_ms - ad->draft_ms);
        if (ad->n_ready) ad->ready_ms += fade * (ad->plain_ms - ad->ready_ms);
        if (ad->n_miss) ad->miss_ms += fade * (ad->plain_ms - ad->miss_ms);
    }
    if (ad->pred_ms > 0) {
        double bias = (step_ms - ad->pred_ms) / ad->pred_ms;
        if (bias > 1) bias = 1; /* a hiccup */
        /* a step whose drafter caught up is priced with a share of that (resume_ms) and measured with all of
         * it: its error is the catching up's, measured apart (catch_ms). Taken for drafting's, it priced
         * every plan out until it faded, so that requests fell behind again and the next drafting step
         * caught up too (CPU, 2 cores, 2-4 greedy requests: bias 1 from the first step on, plain for good) */
        if (ad->maxk > 0 && !catching_up)
            ad->bias_draft = sd_avg_update(ad->bias_draft, bias, &ad->n_bias_draft, OVER_ALPHA);
        else if (ad->maxk == 0) ad->bias_plain = sd_avg_update(ad->bias_plain, bias, &ad->n_bias_plain, OVER_ALPHA);
        ad->pred_us += (uint64_t)(ad->pred_ms * 1e3);
        ad->meas_us += (uint64_t)(step_ms * 1e3);
        ad->err_us += (uint64_t)(fabs(ad->pred_ms - step_ms) * 1e3);
    }
}

/* A scheduled request's step: its figures, its acceptance, its probe rhythm.
 * Pipelined, a step that asked for drafts and verified none had no span for
 * its base in time (the drafter late, still catching up, or its span stale):
 * that is the drafter's pace, priced by the hit rate and the wait, not the
 * proposer's supply nor a failed probe — it teaches the estimate nothing. */
static void note_request(sd_adapt *ad, const sd_req *r, sd_areq *q, int offered, int accepted, bool had_q,
                         bool pipelined)
{
    int k = q->k;
    bool late = pipelined && k > 0 && offered == 0;
    q->st.k_sum += (uint64_t)k;
    q->st.k_steps++;
    q->st.k_zero += k == 0;
    ad->k_hist[k]++;
    /* a request left without drafts is judged by its probes, one draft each: the later positions' figures
     * (a bad spell's) would freeze, so they fade towards its kind's */
    if (k == 0 && !q->fixed && q->key >= 0 && ad->prior[q->key].steps > 0)
        sd_accept_fade(&q->acc, &ad->prior[q->key], ACC_FADE, 1);
    if (ad->step_plain && !q->fixed) return; /* the regime test's plain block: its runs and probes wait */
    if (k > 0 && !late) {
        sd_verify_mode mode = sd_req_verify_mode(r, had_q);
        int key = key_of(mode, r->p.sampling.temperature);
        if (!q->lookup) { /* the lookup's drafts chosen first: nothing of the drafter's */
            sd_accept_observe(&q->acc, k, offered, accepted, ACC_ALPHA, true);
            sd_accept_observe(&ad->prior[key], k, offered, accepted, PRIOR_ALPHA, false);
        }
        if (q->match > 0) { /* an n-gram lookup's: its estimate for the length that matched too */
            sd_accept_observe(estimate(ad, q), k, offered, accepted, ACC_ALPHA, true);
            sd_accept_observe(&ad->m_prior[key][match_class(q)], k, offered, accepted, PRIOR_ALPHA, false);
        }
        if (wants_q(r) && offered > 0 && !q->lookup) ad->drafter_q = had_q;
    }
    if (k > 0) {
        q->draft_run++;
    } else if (q->draft_run > 0) { /* a drafting run ended: how long they last */
        ad->run_steps = sd_avg_update(ad->run_steps, q->draft_run, &ad->n_run, OVER_ALPHA);
        q->draft_run = 0;
    }
    if (k == 0) {
        q->zero_run++;
    } else if (late && q->probing) { /* a probe without its draft: due again next step */
        q->zero_run = q->probe_every;
    } else if (q->probing && accepted == 0) { /* a probe that failed: wait longer for the next */
        q->zero_run = 0;
        q->probe_every = q->probe_every * 2 < SD_ADAPT_PROBE_MAX ? q->probe_every * 2 : SD_ADAPT_PROBE_MAX;
    } else {
        q->zero_run = 0;
        q->probe_every = SD_ADAPT_PROBE_FIRST;
    }
    if (q->probing && !late && q->key >= 0) { /* the kind's interval, for its new requests */
        int *e = &ad->probe_every[q->key];
        *e = accepted == 0 ? (*e * 2 < SD_ADAPT_PROBE_MAX ? *e * 2 : SD_ADAPT_PROBE_MAX)
                           : (*e / 2 > SD_ADAPT_PROBE_FIRST ? *e / 2 : SD_ADAPT_PROBE_FIRST);
    }
}

/* The regime test's measure of a decode step (regime.h): the tokens it
 * committed. */
static void note_regime(sd_adapt *ad, sd_areq *const *aq, const int *accepted, int n, double cycle_ms)
{
    if (!ad->step_test) return;
    int got = 0;
    for (int i = 0; i < n; i++)
        if (aq[i]->k >= 0) got += 1 + accepted[i];
    sd_regime_note(&ad->rg, got, cycle_ms, ad->maxk > 0 || ad->step_lookup);
    ad->step_test = false;
}

bool sd_adapt_pipelines(sd_adapt *ad, int decoding, bool sampled)
{
    ad->pipe_asked = true;
    return !sd_regime_plain(&ad->pipe_rg, sd_regime_key(decoding, sampled));
}

void sd_adapt_dry(sd_adapt *ad, const sd_req *r, sd_areq *q)
{
    if (q->fixed) return;
    seed(ad, r, q);
    sd_accept_observe(&q->acc, 1, 0, 0, ACC_ALPHA, true);
    sd_accept_observe(&ad->prior[q->key], 1, 0, 0, PRIOR_ALPHA, false);
}

void sd_adapt_done(sd_adapt *ad, const sd_step_timing *t, double wall_ms, double cycle_ms, sd_req *const *reqs,
                   sd_areq *const *aq, const int *offered, const int *accepted, const bool *had_q, const int *catchup,
                   const double *draft_ms, const bool *ready, int n, bool pipelined)
{
    /* the drafter's call behind this step: the requests asked, its passes (one per position of the
     * longest span, one to take in the committed tokens, pipelined one for the guess of the next),
     * and the tokens it first had to catch up on */
    int asked = 0, longest = 0, behind = 0;
    double drafter_ms = 0;
    for (int i = 0; i < n; i++) {
        if (aq[i]->k <= 0 || ad->step_lookup) continue;
        asked++;
        behind += catchup[i];
        int off = aq[i]->fb_k > 0 ? 0 : offered[i]; /* the drafter's drafts */
        if (off > longest) longest = off;
        if (draft_ms[i] > drafter_ms) drafter_ms = draft_ms[i];
    }
    if (t->rows > 0) {
        sd_cost_forward(&ad->cost, t->rows, t->seqs, t->forward_ms);
        sd_cost_accept(&ad->cost, t->greedy_rows, t->sampled_pos, t->accept_ms);
        /* the work between steps (the router's messages, the token events) is paid per step too: a plan
         * is priced, and its prediction judged, by the whole cycle where known */
        note_overhead(ad, t->forward_ms + t->accept_ms, cycle_ms > wall_ms ? cycle_ms : wall_ms, drafter_ms, behind > 0,
                      pipelined);
    }
    int passes = longest + 1 + pipelined;
    if (asked > 0 && drafter_ms > 0) {
        double pass = sd_cost_known(&ad->drafter) ? sd_cost_forward_ms(&ad->drafter, asked, asked) : 0;
        if (behind == 0) {
            /* a plain drafting call: its pace per pass, and what a call costs beyond its passes (in passes:
             * a call of one draft is not a sixth of a call of six, and pricing long spans from short ones
             * alone would make them look dearer than they are) */
            if (pass > 0) {
                double fixed = drafter_ms / pass - passes;
                fixed = fixed < 0 ? 0 : fixed > 8 ? 8 : fixed;
                ad->drafter_fixed = sd_avg_update(ad->drafter_fixed, fixed, &ad->n_drafter_fixed, OVER_ALPHA);
            }
            sd_cost_forward(&ad->drafter, asked, asked, drafter_ms / (passes + ad->drafter_fixed));
        } else if (pass > 0) {
            /* what the passes do not explain is the catching up: its time over the tokens caught up on, summed
             * — a few tokens hide in the passes, and as an average of steps their zeros priced a backlog of
             * 1,600 tokens (16 requests after the regime test's plain blocks) at nothing: a 134 ms step where
             * 14 was predicted (CPU, 2 cores) */
            double extra = drafter_ms - (passes + ad->drafter_fixed) * pass;
            ad->catch_x = ad->catch_x * (1 - OVER_ALPHA) + (extra > 0 ? extra : 0);
            ad->catch_w = ad->catch_w * (1 - OVER_ALPHA) + behind;
            ad->catch_ms = ad->catch_x / ad->catch_w;
            ad->n_catch++;
        }
    }
    for (int i = 0; i < n; i++) {
        sd_areq *q = aq[i];
        if (q->k < 0) continue;
        if (q->fb_k > 0) { /* the fallback's drafts: its estimates; for the drafter's, a step without its drafts */
            sd_accept_observe(&q->fb_acc, q->fb_k, offered[i], accepted[i], ACC_ALPHA, false);
            sd_accept_observe(&ad->fb_prior[q->key], q->fb_k, offered[i], accepted[i], PRIOR_ALPHA, false);
            note_request(ad, reqs[i], q, 0, 0, false, pipelined);
            q->fb_k = 0;
        } else {
            note_request(ad, reqs[i], q, offered[i], accepted[i], had_q[i], pipelined);
        }
        if (pipelined && q->k > 0) ad->hit = sd_avg_update(ad->hit, ready[i], &ad->n_hit, OVER_ALPHA);
        if (pipelined && q->late_gain >= 0) { /* drafts chosen without the span at hand: what they gave */
            unsigned n0 = ad->n_late;
            ad->late_real = sd_avg_update(ad->late_real, accepted[i], &n0, OVER_ALPHA);
            ad->late_pred = sd_avg_update(ad->late_pred, q->late_gain, &ad->n_late, OVER_ALPHA);
        }
        q->late_gain = -1;
        q->lookup = false;
    }
    note_regime(ad, aq, accepted, n, cycle_ms);
    if (ad->pipe_measure) { /* the pipelining test: every decoding request's tokens, drafted or not */
        int got = ad->pipe_rows;
        for (int i = 0; i < n; i++) got += aq[i]->k >= 0 ? accepted[i] : 0;
        sd_regime_note(&ad->pipe_rg, got, cycle_ms, true);
    }
    ad->pipe_asked = ad->pipe_measure = false;
    ad->pred_ms = 0;
    ad->step_lookup = false;
}
