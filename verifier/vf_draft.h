/* vf_draft.h — the bookkeeping half of the verifier ⇄ drafter protocol.
 *
 * Pure (no sockets): builds one step's DraftOpen messages and DraftBatch from
 * the decoding requests, and turns the drafter's DraftReply back into
 * sd_proposals the engine can verify. vf_link.c does the I/O around it.
 *
 * Protocol (verifier side): per request, drafter_known = committed tokens the
 * drafter has (0 = unknown). A request the drafter does not know gets a
 * DraftOpen{context = all committed tokens} before the batch and an item with
 * no new tokens; otherwise the item carries r->tokens[drafter_known ..
 * n_tokens). After building, drafter_known = committed_len. need_open in a
 * result resets drafter_known to 0 (re-open next step). Drafts are only ever
 * hints: a bad reply means "no draft", never a changed token.
 *
 * Ownership: a batch borrows the slots' token arrays (and, pipelined, their
 * proposals) until the next build; proposals' q lists live in each slot's
 * span store until its next add / pick. */
#ifndef SD_VF_DRAFT_H
#define SD_VF_DRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "engine.h"
#include "specd.pb-c.h"
#include "vf_span.h"

/* One request as the drafter link sees it. */
typedef struct sd_vf_slot {
    uint64_t id;            /* drafter-side request id (unique in this verifier) */
    sd_req *r;              /* the engine request (borrowed) */
    int drafter_known;      /* committed tokens the drafter has; 0 = unknown */
    bool opened;            /* a DraftOpen was sent (DraftClose owed at the end) */
    sd_proposal prop;       /* this step's drafts (n == 0: none); q points into spans */
    sd_vf_spans spans;      /* the drafter's spans (serial: this step's reply) */
    double told_ms;         /* pipelined: when the drafter was last told the committed state */
    uint32_t prop_draft_us; /* drafter time behind prop */
    sd_pipe_stats ps;
} sd_vf_slot;

/* Frees what a slot owns (its spans). */
void sd_vf_slot_release(sd_vf_slot *s);

/* The slot's statistics (spans_stale from its span store). */
sd_pipe_stats sd_vf_slot_stats(const sd_vf_slot *s);

/* One step's messages (reusable across steps; grows as needed). */
typedef struct sd_vf_batch {
    Specd__DraftBatch batch; /* batch.items -> item_ptrs */
    Specd__DraftItem *items;
    Specd__DraftItem **item_ptrs;
    int *item_slot; /* item index -> slot index */
    Specd__DraftOpen *opens;
    Specd__SamplingParams *open_sampling;
    int n_items, n_opens;
    size_t cap;
} sd_vf_batch;

void sd_vf_batch_init(sd_vf_batch *b);
void sd_vf_batch_release(sd_vf_batch *b);

/* True when the request wants q (sampled drafts): temperature > 0 and verify
 * mode auto or rejection. */
bool sd_vf_wants_q(const sd_req *r);

/* Drafting for one step of n active requests: request i keeps its budget
 * while n <= its limit — max_sampled when sampled[i] (temperature > 0),
 * else max_greedy; 0 = no limit — else it gets 0 and decodes plainly: a
 * large batch already shares each weight read and drafts only add work
 * (docs/BENCHMARKS.md). Returns the requests left with a budget. */
int sd_vf_limit_budgets(int *budgets, const bool *sampled, int n, int max_greedy, int max_sampled);

/* True when a request (sampled or not) may draft in a step of n requests
 * under those limits (the rule of sd_vf_limit_budgets). */
bool sd_vf_spec_allowed(bool sampled, int n, int max_greedy, int max_sampled);

/* Builds step `step`'s messages for slots[i] with budgets[i] > 0 (others are
 * skipped): a DraftOpen for requests the drafter does not know, one item per
 * request with the committed tokens since drafter_known; updates
 * drafter_known / opened. Serial (pipeline false): clears every slot's
 * proposal first. Pipelined: the batch says so, and each item carries the
 * slot's current proposal as in_flight (pass in_flight false for an
 * outcome-only message sent before the proposals are chosen).
 * Returns the number of items, or SD_ERR_NOMEM. */
int sd_vf_batch_build(sd_vf_batch *b, uint64_t step, sd_vf_slot *const *slots, const int *budgets, int n, bool pipeline,
                      bool in_flight);

/* Applies a reply to the batch built last: fills the proposals of the slots
 * it names (clamped to their budget; dropped when a token is >= vocab),
 * resets drafter_known on need_open. Unknown request ids are ignored.
 * Returns the number of slots that got drafts. */
int sd_vf_batch_apply(const sd_vf_batch *b, const Specd__DraftReply *reply, sd_vf_slot *const *slots,
                      const int *budgets, int vocab);

/* Converts one serial DraftResult (drafts continuing the slot's committed
 * sequence) into slot->prop (at most budget tokens), through the slot's span
 * store (vf_span.h: the same checks of tokens and q lists as pipelined
 * spans). Any token id outside [0, vocab) drops the whole draft; unusable q
 * lists are dropped, the drafts kept. Returns prop.n. */
int sd_vf_proposal_from_result(sd_vf_slot *slot, const Specd__DraftResult *res, int budget, int vocab);

#endif
