/* vf_span.h — the spans a pipelined drafter sent for one request, and the
 * choice of this step's drafts among them.
 *
 * A span (proto/specd.proto, DraftResult in pipelined mode) names the
 * committed sequence it continues — its length and hash (proto/span.h) — and
 * carries tokens: first the ones the drafter assumed would be committed (the
 * drafts in flight when it drafted, and its guess of the next token), then
 * its drafts. With the committed sequence C of length L, a span of base
 * (len b, hash h) and tokens t[0..n) is valid when b <= L, the hash of
 * C[0..b) is h, and t[0..L-b) == C[b..L); its drafts are then t[L-b..n).
 * Nothing else is ever offered to the engine: a span that fails the test is
 * stale and dropped (counted). Validity does not depend on the q lists, so a
 * span is used exactly when its base is the real prefix.
 *
 * The store keeps the hash of every prefix of C (extended as tokens commit)
 * and at most SD_VF_MAX_SPANS spans (when full, an add drops the oldest span
 * that the last pick did not use). Spans own copies of their tokens and q
 * lists; a proposal filled by sd_vf_spans_pick points into them and stays
 * valid until the next pick or clear.
 * Pure: no sockets, no clock. One thread owns a store. */
#ifndef SD_VF_SPAN_H
#define SD_VF_SPAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proposer.h"
#include "specd.pb-c.h"
#include "status.h"

#define SD_VF_MAX_SPANS 8
/* Tokens of one span: in-flight drafts, the guessed next token, new drafts. */
#define SD_VF_SPAN_MAX_TOKENS (2 * SD_MAX_DRAFT + 2)

typedef struct sd_vf_span {
    uint32_t base_len;
    uint64_t base_hash;
    int n; /* tokens */
    int32_t tokens[SD_VF_SPAN_MAX_TOKENS];
    bool has_q;                         /* one q list per token */
    size_t qoff[SD_VF_SPAN_MAX_TOKENS]; /* q of token i: qbuf[qoff[i] .. + nq[i]) */
    size_t nq[SD_VF_SPAN_MAX_TOKENS];
    sd_tokprob *qbuf; /* owned */
    size_t qcap;
    uint32_t draft_us; /* drafter time behind it */
    bool dry;          /* DraftResult.dry: no drafts past its tokens */
    double arrived_ms; /* caller's clock, when added */
    bool in_use;       /* the last pick's: never evicted by an add */
} sd_vf_span;

typedef struct sd_vf_spans {
    sd_vf_span s[SD_VF_MAX_SPANS];
    int n;
    uint64_t *hash; /* hash[i] = hash of C[0..i), i <= n_hash - 1 */
    size_t hash_cap;
    int n_hash;
    uint64_t stale; /* spans dropped because their base was not C */
    unsigned dry;   /* valid dry spans dropped since the caller last reset it */
} sd_vf_spans;

/* An empty store. */
void sd_vf_spans_init(sd_vf_spans *sp);

/* Frees what the store owns; it is empty (and reusable) afterwards. */
void sd_vf_spans_release(sd_vf_spans *sp);

/* Drops every span (the prefix hashes stay: committed tokens never change). */
void sd_vf_spans_clear(sd_vf_spans *sp);

/* Extends the prefix hashes to the committed tokens c[0..L) (c must extend
 * what was synced before). SD_ERR_NOMEM when the table cannot grow. */
sd_status sd_vf_spans_sync(sd_vf_spans *sp, const int32_t *c, int L);

/* Hash of c[0..len) (len <= the last synced L). */
uint64_t sd_vf_spans_hash(const sd_vf_spans *sp, int len);

/* Stores a DraftResult as a span. Refused (returns false, nothing stored)
 * when it has no tokens (unless dry: "nothing past the base"), more than SD_VF_SPAN_MAX_TOKENS, or a token outside
 * [0, vocab). Its q lists are kept only when there is one valid list per
 * token (entries in [0, vocab) with finite probabilities in [0, 1], each
 * token having q > 0); otherwise the tokens are stored without q (the engine
 * then verifies them by match / greedy). arrived_ms is stored with it. */
bool sd_vf_spans_add(sd_vf_spans *sp, const Specd__DraftResult *res, int vocab, double arrived_ms);

/* Chooses this step's drafts for the committed sequence c[0..L) (synced):
 * drops the stale spans (counted) and those with nothing left past L (a
 * dry one counted in sp->dry: the proposer had nothing at a position of C), then
 * fills *prop from the valid span with the most drafts (at most budget;
 * ties: the newest), with q when the span has it and want_q. Returns the
 * number of drafts (0: none; prop->n is 0 then) and, when a span was used,
 * writes it to *used (may be NULL). */
int sd_vf_spans_pick(sd_vf_spans *sp, const int32_t *c, int L, int budget, bool want_q, sd_proposal *prop,
                     const sd_vf_span **used);

#endif
