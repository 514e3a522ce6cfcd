/* vf_draft.c — DraftBatch building and DraftReply application (see vf_draft.h). */
#include "vf_draft.h"

#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "convert.h"
#include "regex_mask.h"

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

bool sd_vf_spec_allowed(bool sampled, int n, int max_greedy, int max_sampled)
{
    int limit = sampled ? max_sampled : max_greedy;
    return limit <= 0 || n <= limit;
}

int sd_vf_limit_budgets(int *budgets, const bool *sampled, int n, int max_greedy, int max_sampled)
{
    int left = 0;
    for (int i = 0; i < n; i++) {
        if (!sd_vf_spec_allowed(sampled && sampled[i], n, max_greedy, max_sampled)) budgets[i] = 0;
        left += budgets[i] > 0;
    }
    return left;
}

void sd_vf_slot_release(sd_vf_slot *s) { sd_vf_spans_release(&s->spans); }

sd_pipe_stats sd_vf_slot_stats(const sd_vf_slot *s)
{
    sd_pipe_stats ps = s->ps;
    ps.spans_stale = s->spans.stale;
    return ps;
}

int sd_vf_batch_build(sd_vf_batch *b, uint64_t step, sd_vf_slot *const *slots, const int *budgets, int n, bool pipeline,
                      bool in_flight)
{
    if (batch_grow(b, n > 0 ? n : 1) != SD_OK) return SD_ERR_NOMEM;
    b->n_items = b->n_opens = 0;
    for (int i = 0; i < n; i++) {
        sd_vf_slot *s = slots[i];
        if (!pipeline) s->prop.n = 0;
        if (budgets[i] <= 0) continue;
        sd_req *r = s->r;
        if (s->drafter_known <= 0 || s->drafter_known > r->n_tokens) {
            Specd__DraftOpen *o = &b->opens[b->n_opens];
            specd__draft_open__init(o);
            o->request_id = s->id;
            o->context = r->tokens;
            o->n_context = (size_t)r->n_tokens;
            sd_sampling ds = r->p.sampling;
            sd_sampling_drop_processors(&ds);           /* the drafter drafts without them, */
            ds.json_object = r->p.sampling.json_object; /* but keeps to JSON output (draft.c) */
            ds.json_compact = r->p.sampling.json_compact;
            ds.json_schema = r->schema_text;
            ds.regex = sd_regex_pattern(r->rx);
            sd_pb_sampling_set(&ds, &b->open_sampling[b->n_opens]);
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
        if (pipeline && in_flight && s->prop.n > 0) {
            it->in_flight = s->prop.tokens;
            it->n_in_flight = (size_t)s->prop.n;
        }
        b->item_ptrs[b->n_items] = it;
        b->item_slot[b->n_items] = i;
        b->n_items++;
        s->drafter_known = r->n_tokens;
    }
    specd__draft_batch__init(&b->batch);
    b->batch.step = step;
    b->batch.pipeline = pipeline;
    b->batch.items = b->item_ptrs;
    b->batch.n_items = (size_t)b->n_items;
    return b->n_items;
}

int sd_vf_proposal_from_result(sd_vf_slot *s, const Specd__DraftResult *res, int budget, int vocab)
{
    const sd_req *r = s->r;
    memset(&s->prop, 0, sizeof s->prop);
    s->prop_draft_us = 0;
    if (sd_vf_spans_sync(&s->spans, r->tokens, r->n_tokens) != SD_OK) return 0;
    Specd__DraftResult based = *res; /* a serial reply continues the committed sequence of its batch */
    based.base_len = (uint32_t)r->n_tokens;
    based.base_hash = sd_vf_spans_hash(&s->spans, r->n_tokens);
    sd_vf_spans_clear(&s->spans);
    if (!sd_vf_spans_add(&s->spans, &based, vocab, 0)) return 0;
    const sd_vf_span *used;
    int n = sd_vf_spans_pick(&s->spans, r->tokens, r->n_tokens, budget, true, &s->prop, &used);
    if (used) s->prop_draft_us = used->draft_us;
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
