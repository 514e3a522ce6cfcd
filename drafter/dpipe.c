/* dpipe.c — see dpipe.h. */
#include "dpipe.h"

#include <string.h>

sd_status sd_dpipe_note(sd_dreq *r, const Specd__DraftItem *it, const uint8_t *peer, size_t peer_len, bool ahead)
{
    sd_dreq_pipe *p = &r->pipe;
    int n_in = ahead ? (int)(it->n_in_flight < SD_MAX_DRAFT ? it->n_in_flight : SD_MAX_DRAFT) : 0;
    int k = it->num_draft < SD_MAX_DRAFT ? (int)it->num_draft : SD_MAX_DRAFT;
    if (sd_dstate_reserve(r, r->n_ctx + (size_t)n_in + 1) != SD_OK) return SD_ERR_NOMEM;
    bool same = p->n_in_flight == n_in && !memcmp(p->in_flight, it->in_flight, (size_t)n_in * sizeof *p->in_flight);
    /* the committed sequence moved when the item carried tokens (advance already appended them) */
    if (it->n_new_tokens > 0 || !same || p->k != k) p->dirty = k > 0;
    p->k = k;
    p->want_q = it->sample;
    p->n_prompt = (int64_t)it->committed_len - (int64_t)it->output_pos;
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
        /* in_flight goes right after the committed tokens (room made by note) */
        memcpy(r->ctx + r->n_ctx, p->in_flight, (size_t)p->n_in_flight * sizeof *r->ctx);
        int n_ctx = (int)r->n_ctx + p->n_in_flight;
        int k = p->k + 1 < SD_MAX_DRAFT ? p->k + 1 : SD_MAX_DRAFT;
        int64_t pos = (int64_t)n_ctx - p->n_prompt;
        items[n] = (sd_propose_item){.seq_id = r->id, .context = r->ctx, .n_context = n_ctx, .k = k,
                                     .sampling = &r->sampling, .want_q = p->want_q,
                                     .out_pos = pos > 0 ? (uint64_t)pos : 0};
        reqs[n++] = r;
    }
    return n;
}

bool sd_dpipe_pending(sd_dstate *t)
{
    for (int i = 0; i < sd_dstate_capacity(t); i++) {
        const sd_dreq *r = sd_dstate_at(t, i);
        if (r && r->pipe.dirty) return true;
    }
    return false;
}
