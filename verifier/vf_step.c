/* vf_step.c — one step of the verifier server: plan the active set,
 * choose each request's drafts (adapt.h), get them (the drafter, serial
 * or pipelined; the lookup; the draft model in this process), run the engine
 * step and its bookkeeping (see vf_server_impl.h). */
#include "vf_server_impl.h"

/* Fills the step scratch for the active set: requests, slots, whether they
 * sample, and the most drafts each may verify (its num_draft or the
 * adaptive maximum, the room left, the --spec-max-batch* caps). */
static void plan_step(sd_vf_server *s)
{
    sd_vfs_preempt_for_kv(s);
    int n = s->n_active;
    for (int i = 0; i < n; i++) {
        s->reqs[i] = s->active[i]->slot.r;
        s->slots[i] = &s->active[i]->slot;
        s->aqs[i] = &s->active[i]->aq;
        s->aqs[i]->match = 0;
        s->budgets[i] = sd_vfs_speculates(s) ? sd_req_draft_budget(s->e, s->reqs[i]) : 0;
        s->sampled[i] = s->reqs[i]->p.sampling.temperature > 0.0f;
        s->ready[i] = false;
        /* drafting for a request the drafter must first catch up on costs more than its drafts (the
         * verifier's own lookup has nothing to catch up on) */
        const sd_vf_slot *sl = s->slots[i];
        int behind = s->reqs[i]->n_tokens - sl->drafter_known;
        s->catchup[i] = !s->link && !s->local       ? 0
                        : sl->drafter_known == 0    ? s->reqs[i]->n_tokens
                        : behind > SD_MAX_DRAFT + 1 ? behind
                                                    : 0;
    }
    sd_engine_share_prefixes(s->e, s->reqs, n);
    sd_engine_prefill_plan(s->e, s->reqs, n, s->chunk);
    if (sd_vfs_speculates(s))
        sd_vf_limit_budgets(s->budgets, s->sampled, n, s->cfg->spec_max_batch, s->cfg->spec_max_batch_sampled);
}

/* Chooses the drafts each request verifies this step (adapt.h): budgets
 * become the choice; avail (NULL: serial) the drafts at hand; tell (NULL:
 * serial) how far ahead the drafter drafts. Returns the requests with drafts. */
static int choose_drafts(sd_vf_server *s, const int *avail, int *tell, bool pipelined)
{
    int n = s->n_active, free = sd_kv_pool_free_count(s->pool) - sd_vfs_promised_blocks(s), drafting = 0;
    if (sd_adapt_plan(&s->ad, s->reqs, s->aqs, s->budgets, avail, s->catchup, tell, n, free,
                      sd_kv_pool_block_size(s->pool), s->chunk, pipelined) != SD_OK)
        SD_WARN("out of memory choosing draft lengths: drafting as many as allowed");
    for (int i = 0; i < n; i++) drafting += s->budgets[i] > 0;
    return drafting;
}

/* After the engine step: what each request verified and accepted, for the
 * adaptive model (before emit, which may retire requests). */
static void note_step(sd_vf_server *s, double wall_ms, double cycle_ms, bool pipelined)
{
    int n = s->n_active;
    for (int i = 0; i < n; i++) {
        const vf_req *vr = s->active[i];
        const sd_req *r = vr->slot.r;
        s->offered[i] = (int)(r->stats.draft_tokens - vr->seen.draft_tokens);
        s->accepted[i] = (int)(r->stats.accepted_tokens - vr->seen.accepted_tokens);
        s->had_q[i] = s->props[i].n > 0 && s->props[i].q[0] != NULL;
        s->draft_ms[i] = s->props[i].n > 0 ? vr->slot.prop_draft_us / 1e3 : 0;
    }
    const sd_step_timing *tm = sd_engine_last_timing(s->e);
    if ((uint32_t)tm->rows > s->step_rows_max) s->step_rows_max = (uint32_t)tm->rows;
    sd_adapt_done(&s->ad, tm, wall_ms, cycle_ms, s->reqs, s->aqs, s->offered, s->accepted, s->had_q, s->catchup,
                  s->draft_ms, s->ready, n, pipelined);
}

/* What request i's last step verified, for its token event (StepInfo):
 * the lookup's drafts (--ngram, the fallback, the lookup asked first) or
 * the drafter's. */
static void note_source(sd_vf_server *s, int i)
{
    vf_req *vr = s->active[i];
    vr->step_drafted = s->offered[i];
    vr->step_accepted = s->accepted[i];
    bool lookup = s->cfg->ngram || (s->budgets[i] > 0 && s->fb_avail[i] > 0 && s->fb_k[i] > 0);
    vr->step_source = s->offered[i] <= 0 ? SPECD__DRAFT_SOURCE__DRAFT_NONE
                      : lookup           ? SPECD__DRAFT_SOURCE__DRAFT_NGRAM
                                         : SPECD__DRAFT_SOURCE__DRAFT_DRAFTER;
}

/* Runs the engine step with the slots' proposals, then the bookkeeping of
 * the requests that took drafts (wait_ms: spent waiting for them) and the
 * token events. */
static void run_step(sd_vf_server *s, double wait_ms, bool pipelined)
{
    int n = s->n_active;
    for (int i = 0; i < n; i++) s->props[i] = s->slots[i]->prop;
    char err[256];
    double t0 = sd_now_ms();
    if (sd_engine_step(s->e, s->reqs, n, sd_vfs_speculates(s) ? s->props : NULL, err, sizeof err) != SD_OK) {
        SD_ERROR("engine step failed: %s", err);
        if (sd_model_lost(sd_engine_model(s->e))) {
            /* no token events: the requests are not failed but left to the router, which resumes them
             * on a verifier that works (as after a crash) */
            SD_ERROR("the device is lost (a sticky error): exiting, so that a supervisor starts a new verifier");
            s->lost = true;
            return;
        }
    }
    double t1 = sd_now_ms();
    note_step(s, t1 - s->step_begin_ms, s->last_step_end_ms > 0 ? t1 - s->last_step_end_ms : 0, pipelined);
    for (int i = 0; i < n; i++) {
        sd_vf_slot *sl = s->slots[i];
        note_source(s, i);
        if (s->budgets[i] <= 0) continue; /* no drafts wanted this step */
        sd_pipe_stats *ps = &sl->ps;
        ps->spec_steps++;
        ps->wait_us += (uint64_t)(wait_ms * 1e3);
        ps->verify_us += (uint64_t)((t1 - t0) * 1e3);
        if (s->last_step_end_ms > 0) ps->step_us += (uint64_t)((t1 - s->last_step_end_ms) * 1e3);
        int fb = s->fb_avail[i] > 0 ? s->fb_k[i] : 0; /* the fallback's drafts it verified */
        if (fb > 0) {
            ps->fallback_used++;
            ps->fallback_accepted += (uint64_t)s->accepted[i];
        } else if (sl->prop.n > 0) {
            ps->spans_used++;
            ps->draft_us += sl->prop_draft_us;
            sd_vf_pace_yield(&s->pace, s->reqs[i]->n_new);
        }
        if (pipelined && (fb > 0 || sl->prop.n == 0)) sd_vf_pace_fallback(&s->pace, 1 + fb, s->reqs[i]->n_new);
        ps->spans_ready += s->ready[i];
    }
    s->last_step_end_ms = t1;
    sd_vfs_emit(s);
}

/* Serial: choose the drafts — the lookup's instead where they pay more
 * (--spec-fallback ngram) — ask the drafter and wait for its reply
 * (vf_link.h), then verify. */
static void step_serial(sd_vf_server *s)
{
    int n = s->n_active;
    double t = sd_now_ms();
    plan_step(s);
    int looked = s->link && s->ngram && s->cfg->spec_lookup_first ? sd_vfs_look_up(s) : 0;
    int drafting = s->link ? choose_drafts(s, NULL, NULL, false) : 0;
    for (int i = 0; i < n; i++) s->slots[i]->prop.n = 0;
    if (looked > 0 && sd_vfs_lookup_first(s, looked)) {
        run_step(s, sd_now_ms() - t, false);
        return;
    }
    if (drafting > 0) sd_vf_link_draft(s->link, s->slots, s->budgets, n);
    sd_vfs_fallback_drafts(s);
    run_step(s, sd_now_ms() - t, false);
}

/* --ngram: the verifier's own n-gram lookup drafts (no drafter: no messages, no waits, nothing to catch
 * up on). Each decoding request that may verify drafts looks up as many; the plan then chooses how many
 * of those at hand it verifies (adapt.h), the lookup's time counting as the drafter's. */
static void step_local(sd_vf_server *s)
{
    int n = s->n_active;
    double t = sd_now_ms();
    plan_step(s);
    for (int i = 0; i < n; i++) {
        s->slots[i]->prop.n = 0;
        s->slots[i]->prop_draft_us = 0;
        s->fb_avail[i] = 0;
    }
    int m = sd_vfs_look_up(s);
    for (int i = 0; i < n; i++) s->aqs[i]->match = s->lk_match[i]; /* priced by the n-gram length (adapt.h) */
    choose_drafts(s, s->avail, NULL, false);
    sd_vfs_lookup_props(s, m, s->budgets, true);
    run_step(s, sd_now_ms() - t, false);
}

/* --draft-model: as a serial step (the lookup asked first where
 * --spec-fallback ngram, its drafts verified instead where they pay more),
 * but the draft model in this process drafts, in one batched call on the
 * target's backend, as many as the plan allows each request that may verify
 * drafts (its time counting as the drafter's, its catching up on new tokens
 * priced as a drafter's); then the target verifies them. */
static void step_model(sd_vf_server *s)
{
    int n = s->n_active, m = 0;
    double t = sd_now_ms();
    plan_step(s);
    int looked = s->ngram && s->cfg->spec_lookup_first ? sd_vfs_look_up(s) : 0;
    choose_drafts(s, NULL, NULL, false);
    for (int i = 0; i < n; i++) s->slots[i]->prop.n = 0;
    if (looked > 0 && sd_vfs_lookup_first(s, looked)) {
        run_step(s, sd_now_ms() - t, false);
        return;
    }
    for (int i = 0; i < n; i++) {
        s->slots[i]->prop.n = 0;
        s->slots[i]->prop_draft_us = 0;
        if (s->budgets[i] > 0 && !sd_req_prefilling(s->reqs[i]))
            s->fb_items[m++] = sd_vfs_lookup_item(s, i, s->budgets[i]);
    }
    char err[256] = "";
    double t0 = sd_now_ms();
    if (m > 0 && s->local->ops->propose(s->local, s->fb_items, m, s->fb_out, err, sizeof err) != SD_OK) {
        SD_WARN("the draft model failed (%s): verifying without drafts", err);
        m = 0;
    }
    uint32_t us = (uint32_t)((sd_now_ms() - t0) * 1e3);
    for (int i = 0, j = 0; i < n && j < m; i++) {
        sd_vf_slot *sl = s->slots[i];
        if (s->fb_items[j].seq_id != sl->id) continue;
        const sd_proposal *o = &s->fb_out[j++];
        sl->drafter_known = s->reqs[i]->n_tokens; /* it has caught up on the committed tokens */
        sl->prop = *o;
        if (sl->prop.n > s->budgets[i]) sl->prop.n = s->budgets[i];
        sl->prop_draft_us = us;
    }
    sd_vfs_fallback_drafts(s);
    run_step(s, sd_now_ms() - t, false);
}

/* Pipelined step (proto/specd.proto): use the spans that are there, choose
 * how many of their drafts to verify, wait for missing ones only when the
 * measured pace says it pays (vf_pace.h), tell the drafter the outcome and
 * the drafts in flight, and verify while it drafts the next spans. */
static void step_pipe(sd_vf_server *s)
{
    int n = s->n_active, rows, k_sum;
    double e_ready, e_span, waited = 0, now = sd_now_ms();
    plan_step(s);
    sd_vfs_pick_spans(s, now);
    choose_drafts(s, s->avail, s->tell, true);
    int waiting = sd_vfs_waiting_for_spans(s, &rows, &e_ready, &k_sum, &e_span);
    uint32_t step_us = (uint32_t)(sd_vf_pace_step_ms(&s->pace, rows + waiting) * 1e3);
    /* tells the committed tokens (and the in-flight drafts of the ready requests) */
    sd_vf_link_pipe_send(s->link, s->slots, s->tell, n, true, step_us, now);
    if (waiting > 0 && sd_vf_link_up(s->link)) {
        int k = (k_sum + waiting - 1) / waiting;
        double budget = sd_vf_pace_wait_budget(&s->pace, rows, e_ready, waiting, k, e_span);
        SD_DEBUG("%d without a span: wait budget %.3f ms, expected latency %.3f ms", waiting, budget,
                 sd_vf_pace_latency(&s->pace));
        if (sd_vf_pace_should_wait(&s->pace, budget)) {
            /* a late span is mostly a scheduling hiccup away, and giving up adds a plain step to
             * the time already spent: the wait may run to twice the budget */
            waited = sd_vfs_wait_spans(s, 2 * budget);
            /* the drafts now in flight for the requests whose span came during the wait */
            for (int i = 0; i < n; i++) s->tell[i] = !s->ready[i] && s->slots[i]->prop.n > 0 ? s->tell[i] : 0;
            sd_vf_link_pipe_send(s->link, s->slots, s->tell, n, true, step_us, sd_now_ms());
        }
    }
    sd_vfs_fallback_drafts(s);
    run_step(s, waited, true);
}

/* Whether the drafter computes on this verifier's hardware, so that drafting
 * ahead cannot overlap verifying: the same host, and both on the CPU with more
 * threads than the cores this process may use, or both on the same GPU
 * (processes time-slice a GPU; measured on an H200 with the demo pair, both on
 * cuda:0, C = 1: pipelined 933 tok/s, serial 1561, plain about 1480). */
static bool shares_compute(const sd_vf_server *s, const sd_vf_drafter_stats *d)
{
    if (strcmp(d->host, s->host) != 0) return false;
    if (!strcmp(d->device, "cpu")) return s->threads > 0 && s->threads + (int)d->threads > s->ncpu;
    return !strcmp(d->device, s->cfg->device);
}

/* The pipelining test's choice for this step (adapt.h sd_adapt_pipelines),
 * by the load of the requests decoding. */
static bool pipe_test(sd_vf_server *s)
{
    int decoding = 0;
    bool sampled = false;
    for (int i = 0; i < s->n_active; i++) {
        const sd_req *r = s->active[i]->slot.r;
        if (r->finish != SD_FINISH_NONE || sd_req_prefilling(r)) continue;
        decoding++;
        sampled |= r->p.sampling.temperature > 0.0f;
    }
    bool on = sd_adapt_pipelines(&s->ad, decoding, sampled);
    if (on != s->pipe_on)
        SD_DEBUG("the pipelining test runs a %s block (measured: pipelined %.3f, serial %.3f tokens a ms)",
                 on ? "pipelined" : "serial", sd_regime_rate(&s->ad.pipe_rg, SD_PIPE_PIPELINED),
                 sd_regime_rate(&s->ad.pipe_rg, SD_PIPE_SERIAL));
    return on;
}

/* Whether this step runs the pipelined protocol (--spec-pipeline; in auto
 * mode not before the drafter said where it runs, nor when it shares this
 * verifier's cores, and else as the pipelining test finds faster). Logs
 * each change of reason. */
static bool pipelined(sd_vf_server *s)
{
    if (!s->link || s->cfg->spec_pipeline == SD_VF_PIPE_OFF) return false;
    bool on = true;
    const char *why = "--spec-pipeline on";
    sd_vf_drafter_stats d = sd_vf_link_drafter_stats(s->link);
    if (s->cfg->spec_pipeline == SD_VF_PIPE_AUTO) {
        bool own = d.known && !shares_compute(s, &d);
        on = own && pipe_test(s);
        why = !d.known ? "the drafter has not said where it runs"
              : own    ? "the drafter has cores or a device of its own: measuring pipelined against serial"
                       : "the drafter shares this verifier's cores or device";
    }
    if (why != s->pipe_why) {
        SD_INFO("pipelined speculation %s: %s (verifier %d threads on %s, drafter %u on %s %s, %d CPUs)",
                on ? "on" : "off", why, s->threads, s->cfg->device, d.threads, d.host, d.device, s->ncpu);
        s->pipe_why = why;
    }
    s->pipe_on = on;
    return on;
}

void sd_vfs_step(sd_vf_server *s)
{
    s->step_begin_ms = sd_now_ms();
    if (s->cfg->ngram) step_local(s);
    else if (s->local) step_model(s);
    else if (pipelined(s)) step_pipe(s);
    else step_serial(s);
}
