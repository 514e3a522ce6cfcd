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

/* The model's step time with greedy / sampled verified rows (expected:
 * fractional) beside the fixed rows, sv sampled positions reached (the
 * tokens the sampled requests commit: verification stops at a span's first
 * rejection), maxd expected drafts in the longest span and nd requests
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
    double g = st->fixed_greedy, s = st->fixed_sampled, sv = st->fixed_sampled, maxd = 0, resume = 0;
    int nd = 0;
    for (int i = 0; i < n; i++) {
        double d = sd_accept_drafts(reqs[i].acc, k[i]);
        if (reqs[i].sampled) {
            s += 1 + d;
            sv += sd_accept_expected(reqs[i].acc, k[i]);
        } else {
            g += 1 + d;
        }
        if (d > maxd) maxd = d;
        nd += k[i] > 0;
        resume += k[i] > 0 ? reqs[i].resume_ms : 0;
    }
    return sd_cost_known(st->cost) ? time_of(st, g, s, sv, maxd, nd, resume) : 0;
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

sd_sched_plan sd_sched_choose(const sd_sched_step *st, const sd_sched_req *reqs, int n, int *k_out,
                              sd_sched_cand *cand)
{
    double g = st->fixed_greedy, s = st->fixed_sampled, sv = st->fixed_sampled, maxd = 0, tokens = st->fixed_tokens,
           resume = 0;
    int nc = 0, free = st->kv_free, nd = 0;
    for (int i = 0; i < n; i++) {
        const sd_sched_req *r = &reqs[i];
        double d = sd_accept_drafts(r->acc, r->kmin), e = sd_accept_expected(r->acc, r->kmin);
        k_out[i] = r->kmin;
        if (r->sampled) {
            s += 1 + d;
            sv += e;
        } else {
            g += 1 + d;
        }
        if (d > maxd) maxd = d;
        nd += r->kmin > 0;
        resume += r->kmin > 0 ? r->resume_ms : 0;
        tokens += e;
        free -= extra_blocks(r, r->kmin, st->block_size);
        for (int j = r->kmin + 1; j <= r->kmax && j <= SD_MAX_DRAFT; j++) {
            double off = sd_accept_offered(r->acc, j), reach = sd_accept_reach(r->acc, j);
            cand[nc++] = (sd_sched_cand){.reach = reach, .gain = off * reach, .rows = off, .req = i, .j = j};
        }
    }
    sd_sched_plan plan = {0, tokens, 0};
    for (int i = 0; i < n; i++) plan.drafts += k_out[i];
    if (!sd_cost_known(st->cost)) return plan;
    qsort(cand, (size_t)nc, sizeof *cand, by_reach);
    double t = time_of(st, g, s, sv, maxd, nd, resume), best = tokens / t, best_t = t, best_tokens = tokens;
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
        double d = sd_accept_drafts(r->acc, j);
        if (d > maxd) maxd = d;
        tokens += cand[c].gain;
        t = time_of(st, g, s, sv, maxd, nd, resume);
        if (t > 0 && tokens / t > best * (1 + 1e-9)) {
            best = tokens / t;
            best_c = c + 1;
            best_t = t;
            best_tokens = tokens;
        }
    }
    for (int i = 0; i < n; i++) k_out[i] = reqs[i].kmin;
    for (int c = 0; c < best_c; c++)
        if (cand[c].j > 0) k_out[cand[c].req] = cand[c].j;
    plan = (sd_sched_plan){best_t, best_tokens, 0};
    for (int i = 0; i < n; i++) plan.drafts += k_out[i];
    return plan;
}
