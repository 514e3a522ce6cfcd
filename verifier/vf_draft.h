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
 * Ownership: a batch borrows the slots' token arrays until the next build;
 * proposals' q lists live in each slot's qbuf until the next apply. */
#ifndef SD_VF_DRAFT_H
#define SD_VF_DRAFT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "engine.h"
#include "specd.pb-c.h"

/* One request as the drafter link sees it. */
typedef struct sd_vf_slot {
    uint64_t id;            /* drafter-side request id (unique in this verifier) */
    sd_req *r;              /* the engine request (borrowed) */
    int drafter_known;      /* committed tokens the drafter has; 0 = unknown */
    bool opened;            /* a DraftOpen was sent (DraftClose owed at the end) */
    sd_proposal prop;       /* this step's drafts (n == 0: none) */
    sd_tokprob *qbuf;       /* owned storage behind prop.q */
    size_t qcap;
} sd_vf_slot;

/* One step's messages (reusable across steps; grows as needed). */
typedef struct sd_vf_batch {
    Specd__DraftBatch batch;           /* batch.items -> item_ptrs */
    Specd__DraftItem *items;
    Specd__DraftItem **item_ptrs;
    int *item_slot;                    /* item index -> slot index */
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

/* Builds step `step`'s messages for slots[i] with budgets[i] > 0 (others are
 * skipped); clears every slot's proposal, updates drafter_known / opened.
 * Returns the number of items, or SD_ERR_NOMEM. */
/* Drafting for one step of n active requests: request i keeps its budget
 * while n <= its limit — max_sampled when sampled[i] (temperature > 0),
 * else max_greedy; 0 = no limit — else it gets 0 and decodes plainly: a
 * large batch already shares each weight read and drafts only add work
 * (docs/BENCHMARKS.md). Returns the requests left with a budget. */
int sd_vf_limit_budgets(int *budgets, const bool *sampled, int n, int max_greedy, int max_sampled);

int sd_vf_batch_build(sd_vf_batch *b, uint64_t step, sd_vf_slot *const *slots, const int *budgets, int n);

/* Applies a reply to the batch built last: fills the proposals of the slots
 * it names (clamped to their budget; dropped when a token is >= vocab),
 * resets drafter_known on need_open. Unknown request ids are ignored.
 * Returns the number of slots that got drafts. */
int sd_vf_batch_apply(const sd_vf_batch *b, const Specd__DraftReply *reply, sd_vf_slot *const *slots,
                      const int *budgets, int vocab);

/* Converts one DraftResult into slot->prop (at most budget tokens). q is
 * kept only when there is one list per token, every entry is a valid token
 * with a finite probability in [0, 1], and each draft token has q > 0;
 * otherwise the drafts stay, without q (the engine then uses match / greedy).
 * Any token id outside [0, vocab) drops the whole draft. Returns prop.n. */
int sd_vf_proposal_from_result(sd_vf_slot *slot, const Specd__DraftResult *res, int budget, int vocab);

#endif
