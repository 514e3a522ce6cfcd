/* vf_draft.c — DraftBatch building and DraftReply application (see vf_draft.h). */
#include "vf_draft.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "convert.h"
#include "vf_convert.h"

void sd_vf_batch_init(sd_vf_batch *b) { memset(b, 0, sizeof *b); }

void sd_vf_batch_release(sd_vf_batch *b)
{
    free(b->items);
    free(b->item_ptrs);
    free(b->item_slot);
    free(b->opens);
    free(b->open_sampling);
    memset(b, 0, sizeof *b);
}

static sd_status batch_grow(sd_vf_batch *b, int n)
{
    const sd_grow_item per_item[] = {SD_GROW_ITEM(b->items), SD_GROW_ITEM(b->item_ptrs), SD_GROW_ITEM(b->item_slot),
                                     SD_GROW_ITEM(b->opens), SD_GROW_ITEM(b->open_sampling)};
    return sd_grow_all(per_item, 5, &b->cap, (size_t)n);
}

bool sd_vf_wants_q(const sd_req *r)
{
    return r->p.sampling.temperature > 0.0f && (r->p.verify == SD_VERIFY_AUTO || r->p.verify == SD_VERIFY_REJECTION);
}

int sd_vf_limit_budgets(int *budgets, const bool *sampled, int n, int max_greedy, int max_sampled)
{
    int left = 0;
    for (int i = 0; i < n; i++) {
        int limit = sampled && sampled[i] ? max_sampled : max_greedy;
        if (limit > 0 && n > limit) budgets[i] = 0;
        left += budgets[i] > 0;
    }
    return left;
}

int sd_vf_batch_build(sd_vf_batch *b, uint64_t step, sd_vf_slot *const *slots, const int *budgets, int n)
{
    if (batch_grow(b, n > 0 ? n : 1) != SD_OK) return SD_ERR_NOMEM;
    b->n_items = b->n_opens = 0;
    for (int i = 0; i < n; i++) {
        sd_vf_slot *s = slots[i];
        s->prop.n = 0;
        if (budgets[i] <= 0) continue;
        sd_req *r = s->r;
        if (s->drafter_known <= 0 || s->drafter_known > r->n_tokens) {
            Specd__DraftOpen *o = &b->opens[b->n_opens];
            specd__draft_open__init(o);
            o->request_id = s->id;
            o->context = r->tokens;
            o->n_context = (size_t)r->n_tokens;
            sd_pb_sampling_set(&r->p.sampling, &b->open_sampling[b->n_opens]);
            o->sampling = &b->open_sampling[b->n_opens];
            b->n_opens++;
            s->drafter_known = r->n_tokens;
            s->opened = true;
        }
        Specd__DraftItem *it = &b->items[b->n_items];
        specd__draft_item__init(it);
        it->request_id = s->id;
        it->committed_len = (uint32_t)r->n_tokens;
        it->new_tokens = r->tokens + s->drafter_known;
        it->n_new_tokens = (size_t)(r->n_tokens - s->drafter_known);
        it->num_draft = (uint32_t)budgets[i];
        it->sample = sd_vf_wants_q(r);
        it->output_pos = (uint64_t)sd_req_n_output(r);
        b->item_ptrs[b->n_items] = it;
        b->item_slot[b->n_items] = i;
        b->n_items++;
        s->drafter_known = r->n_tokens;
    }
    specd__draft_batch__init(&b->batch);
    b->batch.step = step;
    b->batch.items = b->item_ptrs;
    b->batch.n_items = (size_t)b->n_items;
    return b->n_items;
}

/* True when proposal list q is usable for draft token d. */
static bool q_valid(const Specd__Proposal *p, int32_t d, int vocab)
{
    if (!p || p->n_q == 0) return false;
    bool has_d = false;
    for (size_t j = 0; j < p->n_q; j++) {
        const Specd__TokenProb *tp = p->q[j];
        if (!tp || tp->token < 0 || tp->token >= vocab || !isfinite(tp->prob) || tp->prob < 0.0f || tp->prob > 1.0f)
            return false;
        if (tp->token == d && tp->prob > 0.0f) has_d = true;
    }
    return has_d;
}

/* Copies the q lists of the first n drafts into slot->qbuf; false on failure. */
static bool copy_q(sd_vf_slot *s, const Specd__DraftResult *res, int n, int vocab)
{
    size_t total = 0;
    for (int i = 0; i < n; i++) {
        if (!q_valid(res->q[i], s->prop.tokens[i], vocab)) return false;
        total += res->q[i]->n_q;
    }
    if (sd_grow(&s->qbuf, &s->qcap, total, sizeof *s->qbuf) != SD_OK) return false;
    size_t off = 0;
    for (int i = 0; i < n; i++) {
        const Specd__Proposal *p = res->q[i];
        for (size_t j = 0; j < p->n_q; j++) s->qbuf[off + j] = (sd_tokprob){p->q[j]->token, p->q[j]->prob};
        s->prop.q[i] = s->qbuf + off;
        s->prop.nq[i] = p->n_q;
        off += p->n_q;
    }
    return true;
}

int sd_vf_proposal_from_result(sd_vf_slot *s, const Specd__DraftResult *res, int budget, int vocab)
{
    sd_proposal *p = &s->prop;
    memset(p, 0, sizeof *p);
    if (budget > SD_MAX_DRAFT) budget = SD_MAX_DRAFT;
    int n = res->n_tokens < (size_t)(budget > 0 ? budget : 0) ? (int)res->n_tokens : (budget > 0 ? budget : 0);
    for (int i = 0; i < n; i++) {
        if (res->tokens[i] < 0 || res->tokens[i] >= vocab) return 0; /* p->n stays 0: no draft */
        p->tokens[i] = res->tokens[i];
    }
    p->n = n;
    if (n > 0 && res->n_q == res->n_tokens && !copy_q(s, res, n, vocab)) {
        for (int i = 0; i < n; i++) {
            p->q[i] = NULL;
            p->nq[i] = 0;
        }
    }
    return n;
}

int sd_vf_batch_apply(const sd_vf_batch *b, const Specd__DraftReply *reply, sd_vf_slot *const *slots,
                      const int *budgets, int vocab)
{
    int got = 0;
    for (size_t j = 0; j < reply->n_results; j++) {
        const Specd__DraftResult *res = reply->results[j];
        if (!res) continue;
        for (int k = 0; k < b->n_items; k++) {
            if (b->items[k].request_id != res->request_id) continue;
            int i = b->item_slot[k];
            sd_vf_slot *s = slots[i];
            if (res->need_open) {
                s->drafter_known = 0;
                s->prop.n = 0;
            } else if (sd_vf_proposal_from_result(s, res, budgets[i], vocab) > 0) {
                got++;
            }
            break;
        }
    }
    return got;
}
