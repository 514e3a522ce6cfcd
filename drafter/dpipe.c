/* dpipe.c — see dpipe.h. */
#include "dpipe.h"

#include <string.h>

#include "span.h"

sd_status sd_dpipe_note(sd_dreq *r, const Specd__DraftItem *it, const uint8_t *peer, size_t peer_len, bool ahead,
                        double now_ms, double step_ms)
{
    sd_dreq_pipe *p = &r->pipe;
    int n_in = ahead ? (int)(it->n_in_flight < SD_MAX_DRAFT ? it->n_in_flight : SD_MAX_DRAFT) : 0;
    int k = it->num_draft < SD_MAX_DRAFT ? (int)it->num_draft : SD_MAX_DRAFT;
    if (sd_dstate_reserve(r, r->n_ctx + (size_t)n_in + 1) != SD_OK) return SD_ERR_NOMEM;
    bool same = p->n_in_flight == n_in &&
                (n_in == 0 || !memcmp(p->in_flight, it->in_flight, (size_t)n_in * sizeof *p->in_flight));
    /* the committed sequence moved when the item carried tokens (advance already appended them) */
    if (it->n_new_tokens > 0 || !same || p->k != k) {
        p->dirty = k > 0;
        p->branches_owed = false;
        p->told_ms = now_ms;
        p->step_ms = step_ms;
    }
    p->k = k;
    p->want_q = it->sample;
    /* output_pos is a peer's uint64: an output position beyond the committed length is nonsense (and
     * (int64_t) of a value >= 2^63 made this subtraction overflow) */
    p->n_prompt = it->output_pos <= it->committed_len ? (int64_t)(it->committed_len - it->output_pos) : 0;
    p->n_in_flight = n_in;
    if (n_in) memcpy(p->in_flight, it->in_flight, (size_t)n_in * sizeof *p->in_flight);
    size_t pl = peer_len < sizeof p->peer ? peer_len : sizeof p->peer;
    memcpy(p->peer, peer, pl);
    p->peer_len = pl;
    return SD_OK;
}

int sd_dpipe_collect(sd_dstate *t, sd_propose_item *items, sd_dreq **reqs, int cap)
{
    int n = 0;
    for (int i = 0; i < sd_dstate_capacity(t) && n < cap; i++) {
        sd_dreq *r = sd_dstate_at(t, i);
        if (!r || !r->pipe.dirty) continue;
        sd_dreq_pipe *p = &r->pipe;
        p->dirty = false;
        if (r->n_ctx == 0) continue;
        p->branches_owed = !p->want_q;
        /* in_flight goes right after the committed tokens (room made by note) */
        memcpy(r->ctx + r->n_ctx, p->in_flight, (size_t)p->n_in_flight * sizeof *r->ctx);
        int n_ctx = (int)r->n_ctx + p->n_in_flight;
        /* with drafts in flight: a guess of the next token, then k drafts; with none the
         * verifier is waiting for this span (or decoding one token plainly): k are enough */
        int k = p->n_in_flight > 0 ? p->k + 1 : p->k;
        if (k > SD_MAX_DRAFT) k = SD_MAX_DRAFT;
        int64_t pos = (int64_t)n_ctx - p->n_prompt;
        /* the first token guesses the verifier's next one (with nothing in flight: the token of a
         * plain step, unless the verifier waits for this span): a doubt there does not end it */
        items[n] = (sd_propose_item){.seq_id = r->id,
                                     .context = r->ctx,
                                     .n_context = n_ctx,
                                     .k = k,
                                     .sampling = &r->sampling,
                                     .want_q = p->want_q,
                                     .want_alt = !p->want_q,
                                     .out_pos = pos > 0 ? (uint64_t)pos : 0,
                                     .n_guess = 1};
        reqs[n++] = r;
    }
    return n;
}

bool sd_dpipe_pending(sd_dstate *t, bool main)
{
    for (int i = 0; i < sd_dstate_capacity(t); i++) {
        const sd_dreq *r = sd_dstate_at(t, i);
        if (r && (r->pipe.dirty || (!main && r->pipe.branches_owed))) return true;
    }
    return false;
}

void sd_dpipe_record(sd_dreq *r, int64_t pos0, uint64_t ctx_hash, const sd_proposal *p)
{
    if (p->n <= 0 || p->alt[0] < 0) return; /* nothing, or drafted without alternatives */
    sd_dreq_pipe *pp = &r->pipe;
    sd_drun *run = &pp->runs[pp->next_run];
    pp->next_run = (pp->next_run + 1) % SD_DRUN_KEEP;
    run->pos0 = pos0;
    run->n = p->n < SD_DRUN_MAX ? p->n : SD_DRUN_MAX;
    run->hcum[0] = ctx_hash;
    for (int i = 0; i < run->n; i++) {
        run->t[i] = p->tokens[i];
        run->p[i] = p->p[i];
        run->alt[i] = p->alt[i];
        run->alt_p[i] = p->alt_p[i];
        run->hcum[i + 1] = sd_span_hash(run->hcum[i], &p->tokens[i], 1);
    }
}

/* The run that drafted the len tokens after a context of pos0 tokens whose
 * sequence so far (pos0 + len tokens) hashes to h, or NULL. */
static const sd_drun *find_run(const sd_dreq_pipe *p, int64_t pos0, int len, uint64_t h)
{
    for (int i = 0; i < SD_DRUN_KEEP; i++) {
        const sd_drun *run = &p->runs[i];
        int64_t off = pos0 - run->pos0;
        if (run->n == 0 || off < 0 || off + len > run->n) continue;
        if (run->hcum[off + len] == h) return run;
    }
    return NULL;
}

/* Appends the branches of r with prob >= min_prob to out[*n..cap). */
static void request_branches(sd_dreq *r, sd_dbranch *out, int *n, int cap, double min_prob)
{
    const sd_dreq_pipe *p = &r->pipe;
    int m = p->n_in_flight;
    int64_t L = (int64_t)r->n_ctx;
    uint64_t h_all = sd_span_hash(r->ctx_hash, p->in_flight, (size_t)m);
    const sd_drun *inflight = m > 0 ? find_run(p, L, m, h_all) : NULL;
    if (m > 0 && (!inflight || inflight->pos0 > L)) return; /* no confidence figures for what is in flight */
    const sd_drun *next = find_run(p, L + m, 0, h_all);     /* the main chain just drafted: its guess first */
    double acc = 1.0;                                       /* P(the first j in-flight drafts accepted) */
    for (int j = 0; j <= m && *n < cap; j++) {
        int32_t alt;
        double pa;
        if (j < m) {
            int64_t i = L + j - inflight->pos0;
            alt = inflight->alt[i];
            pa = inflight->alt_p[i];
        } else {
            if (!next || next->n == 0) break;
            alt = next->alt[0];
            pa = next->alt_p[0];
        }
        if (alt >= 0 && acc * pa >= min_prob) out[(*n)++] = (sd_dbranch){r, j, alt, acc * pa};
        if (j < m) acc *= inflight->p[L + j - inflight->pos0];
    }
}

int sd_dpipe_branches(sd_dstate *t, sd_dbranch *out, int cap, double min_prob)
{
    sd_dbranch all[4 * (SD_MAX_DRAFT + 1)];
    int n = 0;
    for (int i = 0; i < sd_dstate_capacity(t); i++) {
        sd_dreq *r = sd_dstate_at(t, i);
        if (!r || !r->pipe.branches_owed) continue;
        r->pipe.branches_owed = false;
        if (n + SD_MAX_DRAFT + 1 > (int)(sizeof all / sizeof all[0])) continue;
        request_branches(r, all, &n, (int)(sizeof all / sizeof all[0]), min_prob);
    }
    for (int i = 1; i < n; i++) /* best first (insertion sort: a few dozen at most) */
        for (int j = i; j > 0 && all[j].prob > all[j - 1].prob; j--) {
            sd_dbranch x = all[j];
            all[j] = all[j - 1];
            all[j - 1] = x;
        }
    int take = n < cap ? n : cap;
    memcpy(out, all, (size_t)take * sizeof *out);
    return take;
}

double sd_dpipe_time_left(const sd_dreq *r, double now_ms) { return r->pipe.told_ms + r->pipe.step_ms - now_ms; }
