/* spec_sched.c — see spec_sched.h. */
#include "spec_sched.h"

#include <stdlib.h>

/* KV blocks request r needs beyond those it owns for a step with k drafts. */
static int extra_blocks(const sd_sched_req *r, int k, int bs)
{
    if (bs <= 0) return 0;
    int need = (r->kv_len + k + 1 + bs - 1) / bs - r->kv_blocks;
    return need > 0 ? need : 0;
}

/* The drafts of the longest span, expected: the drafter runs a pass per
 * position of it. Requests stop at different lengths (an n-gram match ends,
 * a drafter doubts a token), so the longest of several is longer than the
 * longest expected one: E(max) = sum over positions j of P(some request is
 * offered a j-th draft) = sum_j 1 - prod_i (1 - [k_i >= j] offered_i(j)). */
typedef struct longest {
    double none[SD_MAX_DRAFT + 1]; /* P(no request is offered a j-th draft) */
    double e;                      /* E(max) */
} longest;

static void longest_init(longest *l)
{
    for (int j = 0; j <= SD_MAX_DRAFT; j++) l->none[j] = 1;
    l->e = 0;
}

/* A request with estimate a now asks for its j-th draft. */
static void longest_add(longest *l, const sd_accept *a, int j)
{
    double o = sd_accept_offered(a, j);
    l->e += l->none[j] * o;
    l->none[j] *= 1 - o;
}

/* The model's step time with greedy / sampled verified rows (expected:
 * fractional) beside the fixed rows, sv sampled positions reached (the
 * tokens the sampled requests commit: verification stops at a span's first
 * rejection), maxd expected drafts in the longest span (longest) and nd requests
 * drafted for (0: no drafting). */
static double time_of(const sd_sched_step *st, double greedy, double sampled, double sv, double maxd, int nd,
                      double resume)
{
    double rows = st->fixed_rows + (greedy - st->fixed_greedy) + (sampled - st->fixed_sampled);
    double t = sd_cost_forward_at(st->cost, rows, st->seqs) + sd_cost_accept_ms(st->cost, greedy, sv);
    if (nd == 0) return t + st->plain_ms;
    double pass = st->drafter && sd_cost_known(st->drafter) ? sd_cost_forward_ms(st->drafter, nd, nd) : 0;
    return t + st->draft_ms + st->exposure * (1 + maxd + st->drafter_fixed) * pass + resume;
}

double sd_sched_step_ms(const sd_sched_step *st, const sd_sched_req *reqs, int n, const int *k)
{
    double g = st->fixed_greedy, s = st->fixed_sampled, sv = st->fixed_sampled, resume = 0;
    int nd = 0;
    longest lg;
    longest_init(&lg);
    for (int i = 0; i < n; i++) {
        double d = sd_accept_drafts(reqs[i].acc, k[i]);
        for (int j = 1; j <= k[i] && j <= SD_MAX_DRAFT; j++) longest_add(&lg, reqs[i].acc, j);
        if (reqs[i].sampled) {
            s += 1 + d;
            sv += sd_accept_expected(reqs[i].acc, k[i]);
        } else {
            g += 1 + d;
        }
        nd += k[i] > 0;
        resume += k[i] > 0 ? reqs[i].resume_ms : 0;
    }
    return sd_cost_known(st->cost) ? time_of(st, g, s, sv, lg.e, nd, resume) : 0;
}

/* Larger acceptance reach first (the expected tokens a candidate adds per
 * row it costs); for equal values the earlier draft first (a request's
 * drafts must be taken in order). */
static int by_reach(const void *pa, const void *pb)
{
    const sd_sched_cand *a = pa, *b = pb;
    if (a->reach != b->reach) return a->reach > b->reach ? -1 : 1;
    if (a->j != b->j) return a->j < b->j ? -1 : 1;
    return a->req < b->req ? -1 : a->req > b->req;
}

/* The measure a plan is chosen by: its rate, or, given the worth of the step's
 * time (rate > 0), the tokens net of that worth. */
static double value_of(double rate, double tokens, double ms) { return rate > 0 ? tokens - rate * ms : tokens / ms; }

bool sd_sched_beats(const sd_sched_plan *p, double tokens_a, double ms_a, double tokens_b, double ms_b)
{
    return value_of(p->rate, tokens_a, ms_a) > value_of(p->rate, tokens_b, ms_b);
}

/* sd_sched_choose by value_of(rate, ...). */
static sd_sched_plan choose(const sd_sched_step *st, const sd_sched_req *reqs, int n, int *k_out, sd_sched_cand *cand,
                            double rate)
{
    double g = st->fixed_greedy, s = st->fixed_sampled, sv = st->fixed_sampled, tokens = st->fixed_tokens, resume = 0;
    int nc = 0, free = st->kv_free, nd = 0;
    longest lg;
    longest_init(&lg);
    for (int i = 0; i < n; i++) {
        const sd_sched_req *r = &reqs[i];
        double d = sd_accept_drafts(r->acc, r->kmin), e = sd_accept_expected(r->acc, r->kmin);
        for (int j = 1; j <= r->kmin && j <= SD_MAX_DRAFT; j++) longest_add(&lg, r->acc, j);
        k_out[i] = r->kmin;
        if (r->sampled) {
            s += 1 + d;
            sv += e;
        } else {
            g += 1 + d;
        }
        nd += r->kmin > 0;
        resume += r->kmin > 0 ? r->resume_ms : 0;
        tokens += e;
        free -= extra_blocks(r, r->kmin, st->block_size);
        double reach = 1; /* tokens per row, non-increasing in j (a later draft never sorts first) */
        for (int j = r->kmin + 1; j <= r->kmax && j <= SD_MAX_DRAFT; j++) {
            double off = sd_accept_offered(r->acc, j), gain = sd_accept_yield(r->acc, j);
            double x = off > 0 ? gain / off : 0;
            reach = x < reach ? x : reach;
            cand[nc++] = (sd_sched_cand){.reach = reach, .gain = gain, .rows = off, .req = i, .j = j};
        }
    }
    sd_sched_plan plan = {0, tokens, 0, rate};
    for (int i = 0; i < n; i++) plan.drafts += k_out[i];
    if (!sd_cost_known(st->cost)) return plan;
    qsort(cand, (size_t)nc, sizeof *cand, by_reach);
    double t = time_of(st, g, s, sv, lg.e, nd, resume), best = value_of(rate, tokens, t), best_t = t,
           best_tokens = tokens;
    int best_c = 0;
    for (int c = 0; c < nc; c++) {
        int i = cand[c].req, j = cand[c].j;
        const sd_sched_req *r = &reqs[i];
        int eb = extra_blocks(r, j, st->block_size) - extra_blocks(r, j - 1, st->block_size);
        if (k_out[i] != j - 1 || (st->kv_free >= 0 && eb > free)) {
            cand[c].j = -1; /* skipped: an earlier draft of the request was, or no KV is left */
            continue;
        }
        free -= eb;
        if (k_out[i] == 0) {
            nd++;
            resume += r->resume_ms;
        }
        k_out[i] = j;
        if (r->sampled) {
            s += cand[c].rows;
            sv += cand[c].gain;
        } else {
            g += cand[c].rows;
        }
        longest_add(&lg, r->acc, j);
        tokens += cand[c].gain;
        t = time_of(st, g, s, sv, lg.e, nd, resume);
        double v = t > 0 ? value_of(rate, tokens, t) : best;
        if (v > best + 1e-9 * (best > 0 ? best : -best)) {
            best = v;
            best_c = c + 1;
            best_t = t;
            best_tokens = tokens;
        }
    }
    for (int i = 0; i < n; i++) k_out[i] = reqs[i].kmin;
    for (int c = 0; c < best_c; c++)
        if (cand[c].j > 0) k_out[cand[c].req] = cand[c].j;
    plan = (sd_sched_plan){best_t, best_tokens, 0, rate};
    for (int i = 0; i < n; i++) plan.drafts += k_out[i];
    return plan;
}

sd_sched_plan sd_sched_choose(const sd_sched_step *st, const sd_sched_req *reqs, int n, int *k_out, sd_sched_cand *cand)
{
    double rate = 0;
    if (st->fixed_rows > 0 && n > 0 && sd_cost_known(st->cost)) {
        /* the worth of the step's time: the scheduled requests' best rate in a step of their own */
        sd_sched_step own = *st;
        own.fixed_rows = own.fixed_greedy = own.fixed_sampled = 0;
        own.fixed_tokens = 0;
        own.seqs = n;
        sd_sched_plan p = choose(&own, reqs, n, k_out, cand, 0);
        rate = p.step_ms > 0 ? p.tokens / p.step_ms : 0;
    }
    return choose(st, reqs, n, k_out, cand, rate);
}
