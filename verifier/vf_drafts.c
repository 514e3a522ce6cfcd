/* vf_drafts.c — the drafts a step verifies, where they do not come from a
 * serial exchange with the drafter: the verifier's own n-gram lookup (for
 * --ngram, the fallback and the lookup asked first) and the pipelined
 * drafter's spans, picked and waited for (see vf_server_impl.h). */
#include "vf_server_impl.h"

/* Batch rows request i puts into this step. */
static int rows_of(const sd_vf_server *s, int i)
{
    const sd_req *r = s->reqs[i];
    if (r->finish != SD_FINISH_NONE) return 0;
    if (sd_req_prefilling(r)) return s->chunk[i];
    return 1 + s->slots[i]->prop.n;
}

/* The item for request i of a proposer in this process (the n-gram lookup,
 * the draft model), at most k drafts. */
sd_propose_item sd_vfs_lookup_item(const sd_vf_server *s, int i, int k)
{
    const sd_req *r = s->reqs[i];
    return (sd_propose_item){.seq_id = s->slots[i]->id,
                             .context = r->tokens,
                             .n_context = r->n_tokens,
                             .k = k,
                             .sampling = &r->p.sampling,
                             .want_q = sd_vf_wants_q(r),
                             .out_pos = (uint64_t)sd_req_n_output(r)};
}

/* Runs the lookup over the m items in s->fb_items (request order) into
 * s->fb_out; s->lk_us its time per item. Returns m, or 0 on failure. */
static int run_lookup(sd_vf_server *s, int m)
{
    char err[128];
    double t0 = sd_now_ms();
    if (m == 0 || s->ngram->ops->propose(s->ngram, s->fb_items, m, s->fb_out, err, sizeof err) != SD_OK) return 0;
    s->lk_us = (uint32_t)((sd_now_ms() - t0) * 1e3 / m);
    return m;
}

/* Gives each request i of the m looked up with k[i] > 0 the lookup's drafts,
 * at most k[i] (drafter time: the lookup's, or none). */
void sd_vfs_lookup_props(sd_vf_server *s, int m, const int *k, bool timed)
{
    for (int i = 0, j = 0; i < s->n_active && j < m; i++) {
        if (s->fb_items[j].seq_id != s->slots[i]->id) continue;
        const sd_proposal *o = &s->fb_out[j++];
        if (k[i] <= 0 || o->n == 0) continue;
        sd_vf_slot *sl = s->slots[i];
        sl->prop = *o;
        sl->prop.n = k[i] < o->n ? k[i] : o->n;
        sl->prop_draft_us = timed ? s->lk_us : 0;
    }
}

/* The lookup for every decoding request that may verify drafts, as many as
 * its budget: s->avail[i] the drafts found (0: none), s->lk_match[i] the
 * length of the n-gram that matched. Returns the requests looked up. */
int sd_vfs_look_up(sd_vf_server *s)
{
    int n = s->n_active, m = 0;
    for (int i = 0; i < n; i++) {
        s->avail[i] = 0;
        s->lk_match[i] = 0;
        if (s->budgets[i] > 0 && !sd_req_prefilling(s->reqs[i]))
            s->fb_items[m++] = sd_vfs_lookup_item(s, i, s->budgets[i]);
    }
    m = run_lookup(s, m);
    for (int i = 0, j = 0; i < n && j < m; i++) {
        if (s->fb_items[j].seq_id != s->slots[i]->id) continue;
        s->avail[i] = s->fb_out[j].n;
        s->lk_match[i] = s->fb_out[j++].match;
    }
    return m;
}

/* The fallback (--spec-fallback, adapt.h): each decoding request that was
 * to verify drafts but has none from the drafter as the step runs gets the
 * n-gram lookup's over its committed tokens (one-hot q where it samples
 * with q), as many as sd_adapt_fallback chooses. Exact as any drafts:
 * the engine verifies them. */
void sd_vfs_fallback_drafts(sd_vf_server *s)
{
    int n = s->n_active, m = 0;
    for (int i = 0; i < n; i++) {
        s->fb_avail[i] = 0;
        if (!s->ngram || s->budgets[i] <= 0 || s->slots[i]->prop.n > 0 || sd_req_prefilling(s->reqs[i])) continue;
        s->fb_items[m++] = sd_vfs_lookup_item(s, i, s->budgets[i]);
    }
    if ((m = run_lookup(s, m)) == 0) return;
    for (int i = 0, j = 0; i < n && j < m; i++)
        if (s->fb_items[j].seq_id == s->slots[i]->id) s->fb_avail[i] = s->fb_out[j++].n;
    int *k = s->fb_k;
    for (int i = 0; i < n; i++) k[i] = s->fb_avail[i] > 0 ? s->budgets[i] : s->slots[i]->prop.n;
    sd_adapt_fallback(&s->ad, s->reqs, s->aqs, k, s->fb_avail, n, s->chunk);
    for (int i = 0; i < n; i++) k[i] = s->fb_avail[i] > 0 ? k[i] : 0;
    sd_vfs_lookup_props(s, m, k, false);
}

/* Serial, the lookup asked before the drafter (m requests, look_up): when
 * its drafts make a better step than the plan's (sd_adapt_lookup), the
 * requests verify them and the drafter is not asked. Counted as the
 * fallback's drafts. Returns whether they do. */
bool sd_vfs_lookup_first(sd_vf_server *s, int m)
{
    int n = s->n_active, *k = s->fb_k;
    int free = sd_kv_pool_free_count(s->pool) - sd_vfs_promised_blocks(s);
    memset(k, 0, (size_t)n * sizeof *k);
    if (!sd_adapt_lookup(&s->ad, s->reqs, s->aqs, k, s->avail, s->lk_match, n, free, sd_kv_pool_block_size(s->pool),
                         s->chunk))
        return false;
    for (int i = 0; i < n; i++) {
        if (s->aqs[i]->k >= 0) s->budgets[i] = k[i];
        s->fb_avail[i] = k[i] > 0 ? s->avail[i] : 0;
    }
    sd_vfs_lookup_props(s, m, k, false);
    return true;
}

/* Pipelined: files the spans that came and picks each request's drafts
 * (vf_span.h), at most its budget; sets ready, and avail (the drafts at
 * hand, -1 for a request still without a span) and tell for a prefilling
 * request (told early, so the drafter's mirror fills while the target
 * prefills). */
void sd_vfs_pick_spans(sd_vf_server *s, double now)
{
    int n = s->n_active;
    double lat, draft;
    sd_vf_link_pipe_recv(s->link, s->slots, n, now, &lat, &draft);
    if (draft >= 0) sd_vf_pace_span(&s->pace, draft);
    for (int i = 0; i < n; i++) {
        sd_vf_slot *sl = s->slots[i];
        sd_req *r = s->reqs[i];
        bool allowed = sd_vf_spec_allowed(s->sampled[i], n, s->cfg->spec_max_batch, s->cfg->spec_max_batch_sampled);
        s->tell[i] = allowed && r->p.speculate && sd_req_prefilling(r) ? r->p.num_draft : 0;
        sl->prop.n = 0;
        sl->prop_draft_us = 0;
        s->avail[i] = 0;
        if (s->budgets[i] <= 0) continue;
        const sd_vf_span *used = NULL;
        if (sd_vf_spans_sync(&sl->spans, r->tokens, r->n_tokens) == SD_OK)
            sd_vf_spans_pick(&sl->spans, r->tokens, r->n_tokens, s->budgets[i], sd_vf_wants_q(r), &sl->prop, &used);
        if (sl->spans.dry) { /* the proposer had nothing (adapt.h): its supply, not a late drafter */
            sd_adapt_dry(&s->ad, r, s->aqs[i]);
            sl->spans.dry = 0;
        }
        if (used) sl->prop_draft_us = used->draft_us;
        s->ready[i] = sl->prop.n > 0;
        s->avail[i] = s->ready[i] ? sl->prop.n : -1;
    }
}

/* Pipelined, after the choice: trims each ready request's drafts to its
 * choice and sizes the step's rows and expected tokens of the requests that
 * do not wait. Returns how many wait for a span; *k_sum their budgets,
 * *e_span their mean expected tokens with the span (acceptance estimates). */
int sd_vfs_waiting_for_spans(sd_vf_server *s, int *rows, double *e_ready, int *k_sum, double *e_span)
{
    int n = s->n_active, waiting = 0;
    *rows = 0;
    *e_ready = 0;
    *k_sum = 0;
    *e_span = 0;
    for (int i = 0; i < n; i++) {
        sd_vf_slot *sl = s->slots[i];
        if (sl->prop.n > s->budgets[i]) sl->prop.n = s->budgets[i];
        if (s->budgets[i] > 0 && sl->prop.n == 0) {
            waiting++;
            *k_sum += s->budgets[i];
            *e_span += sd_accept_expected(&s->aqs[i]->acc, s->budgets[i]);
            continue;
        }
        *rows += rows_of(s, i);
        if (!sd_req_prefilling(s->reqs[i])) *e_ready += sl->prop.n > 0 ? sd_vf_pace_expected(&s->pace) : 1;
    }
    if (waiting > 0) *e_span /= waiting;
    return waiting;
}

/* Pipelined wait: until every waiting request has a span or budget_ms is
 * over, whichever is first. Returns the time waited (ms). */
double sd_vfs_wait_spans(sd_vf_server *s, double budget_ms)
{
    int n = s->n_active;
    double t0 = sd_now_ms(), deadline = t0 + budget_ms;
    int left = 1;
    while (left > 0) {
        double now = sd_now_ms();
        if (now >= deadline || !sd_vf_link_wait(s->link, deadline - now)) break;
        double lat, draft;
        sd_vf_link_pipe_recv(s->link, s->slots, n, sd_now_ms(), &lat, &draft);
        if (lat >= 0) sd_vf_pace_waited(&s->pace, lat, draft);
        left = 0;
        for (int i = 0; i < n; i++) {
            sd_vf_slot *sl = s->slots[i];
            const sd_req *r = s->reqs[i];
            if (s->budgets[i] <= 0 || s->ready[i] || sl->prop.n > 0) continue;
            const sd_vf_span *used = NULL;
            sd_vf_spans_pick(&sl->spans, r->tokens, r->n_tokens, s->budgets[i], sd_vf_wants_q(r), &sl->prop, &used);
            if (used) sl->prop_draft_us = used->draft_us;
            left += sl->prop.n == 0 && !sl->spans.dry; /* a dry answer ends the wait: nothing is coming */
        }
    }
    if (left > 0) sd_vf_pace_timeout(&s->pace, budget_ms);
    return sd_now_ms() - t0;
}
