/* spec_run.c — the in-process adaptive speculative loop (see spec_run.h). */
#include "spec_run.h"

#include <stdlib.h>
#include <string.h>

#include "adapt.h"
#include "clock.h"
#include "kv_pool.h"
#include "model.h"

#define RUN_MAX 64

/* One run's scratch, per request. */
typedef struct run_state {
    sd_adapt ad;
    sd_areq aq[RUN_MAX];
    sd_areq *aqs[RUN_MAX];
    int budgets[RUN_MAX], chunk[RUN_MAX], catchup[RUN_MAX], known[RUN_MAX];
    int offered[RUN_MAX], accepted[RUN_MAX];
    uint64_t seen_draft[RUN_MAX], seen_acc[RUN_MAX];
    bool had_q[RUN_MAX], ready[RUN_MAX];
    double draft_ms[RUN_MAX];
    sd_proposal props[RUN_MAX];
} run_state;

/* The most drafts each request may verify, the prompt chunks, and what the
 * proposer must first catch up on (as the verifier's plan_step). */
static void plan(run_state *s, sd_engine *e, sd_proposer *pr, sd_req *const *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        const sd_req *r = reqs[i];
        int behind = r->n_tokens - s->known[i];
        s->budgets[i] = pr ? sd_req_draft_budget(e, r) : 0;
        s->catchup[i] = s->known[i] == 0 ? r->n_tokens : behind > SD_MAX_DRAFT + 1 ? behind : 0;
        s->ready[i] = false;
    }
    sd_engine_prefill_plan(e, reqs, n, s->chunk);
    const sd_kv_pool *pool = sd_model_kv_pool(sd_engine_model(e));
    sd_adapt_plan(&s->ad, reqs, s->aqs, s->budgets, NULL, s->catchup, NULL, n, sd_kv_pool_free_count(pool),
                  sd_kv_pool_block_size(pool), s->chunk, false); /* out of memory: budgets stay the most allowed */
}

/* Asks pr for the drafts chosen (one batched call); its time is each
 * drafted request's drafter time. */
static void draft(run_state *s, sd_engine *e, sd_proposer *pr, sd_req *const *reqs, int n)
{
    sd_propose_item items[RUN_MAX];
    sd_proposal out[RUN_MAX];
    int map[RUN_MAX], m = 0;
    memset(s->props, 0, (size_t)n * sizeof *s->props);
    for (int i = 0; i < n; i++) {
        s->draft_ms[i] = 0;
        if (s->budgets[i] > 0 && sd_req_propose_item(e, reqs[i], &items[m])) {
            items[m].k = s->budgets[i];
            map[m++] = i;
        }
    }
    if (m == 0) return;
    char err[256];
    double t0 = sd_now_ms();
    if (pr->ops->propose(pr, items, m, out, err, sizeof err) != SD_OK) return; /* no drafts: slower, never wrong */
    double ms = sd_now_ms() - t0;
    for (int j = 0; j < m; j++) {
        int i = map[j];
        s->props[i] = out[j];
        if (s->props[i].n > s->budgets[i]) s->props[i].n = s->budgets[i];
        s->known[i] = reqs[i]->n_tokens; /* it has caught up on the committed tokens */
        s->draft_ms[i] = s->props[i].n > 0 ? ms : 0;
    }
}

/* What each request verified and accepted, for the adaptive model. */
static void note(run_state *s, const sd_engine *e, sd_req *const *reqs, int n, double wall_ms, double cycle_ms)
{
    for (int i = 0; i < n; i++) {
        const sd_req *r = reqs[i];
        s->offered[i] = (int)(r->stats.draft_tokens - s->seen_draft[i]);
        s->accepted[i] = (int)(r->stats.accepted_tokens - s->seen_acc[i]);
        s->seen_draft[i] = r->stats.draft_tokens;
        s->seen_acc[i] = r->stats.accepted_tokens;
        s->had_q[i] = s->props[i].n > 0 && s->props[i].q[0] != NULL;
    }
    sd_adapt_done(&s->ad, sd_engine_last_timing(e), wall_ms, cycle_ms, reqs, s->aqs, s->offered, s->accepted, s->had_q,
                  s->catchup, s->draft_ms, s->ready, n, false);
}

static sd_status run_adaptive(run_state *s, sd_engine *e, sd_proposer *pr, sd_req *const *reqs, int n,
                              const sd_spec_run_opts *o, sd_step_cb cb, void *ctx, char *err, size_t errlen)
{
    int kmax = 0;
    for (int i = 0; i < n; i++) {
        sd_areq_init(&s->aq[i], false);
        s->aqs[i] = &s->aq[i];
        s->seen_draft[i] = reqs[i]->stats.draft_tokens;
        s->seen_acc[i] = reqs[i]->stats.accepted_tokens;
        if (reqs[i]->p.num_draft > kmax) kmax = reqs[i]->p.num_draft;
    }
    if (pr && o->calibrate_ms > 0 && kmax > 0) {
        char cerr[256]; /* a calibration cut short only leaves more to learn online */
        sd_adapt_calibrate(&s->ad, e, kmax, n, o->calibrate_ms, cerr, sizeof cerr);
        bool sampled = false;
        for (int i = 0; i < n; i++) sampled |= reqs[i]->p.sampling.temperature > 0;
        sd_adapt_seed_plain(&s->ad, n, sampled);
    }
    double last_end = 0;
    for (;;) {
        int live = 0;
        for (int i = 0; i < n; i++) live += reqs[i]->finish == SD_FINISH_NONE;
        if (!live) return SD_OK;
        double t = sd_now_ms();
        plan(s, e, pr, reqs, n);
        if (pr) draft(s, e, pr, reqs, n);
        sd_status st = sd_engine_step(e, reqs, n, pr ? s->props : NULL, err, errlen);
        if (st != SD_OK) return st;
        double t1 = sd_now_ms();
        note(s, e, reqs, n, t1 - t, last_end > 0 ? t1 - last_end : 0);
        last_end = t1;
        for (int i = 0; cb && i < n; i++)
            if (reqs[i]->n_new > 0 || reqs[i]->finish != SD_FINISH_NONE) cb(ctx, reqs[i]);
    }
}

sd_status sd_spec_run(sd_engine *e, sd_proposer *pr, sd_req *const *reqs, int n, const sd_spec_run_opts *o,
                      sd_step_cb cb, void *ctx, char *err, size_t errlen)
{
    if (!o || !o->adaptive || !pr) return sd_engine_run(e, pr, reqs, n, cb, ctx, err, errlen);
    if (n < 1 || n > RUN_MAX) return sd_seterr(err, errlen, SD_ERR_ARG, "sd_spec_run takes 1..%d requests", RUN_MAX);
    run_state *s = calloc(1, sizeof *s);
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "sd_spec_run: out of memory");
    sd_adapt_init(&s->ad);
    sd_status st = run_adaptive(s, e, pr, reqs, n, o, cb, ctx, err, errlen);
    for (int i = 0; i < n; i++) pr->ops->release(pr, reqs[i]->id);
    sd_adapt_free(&s->ad);
    free(s);
    return st;
}
