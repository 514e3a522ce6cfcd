/* dreply.h — packs the drafter's answers into one DraftReply message.
 *
 * A span is one DraftResult: the request, need_open, the base it continues
 * (proto/span.h), the tokens — assumed ones first (pipelined: the drafts in
 * flight), then the proposal's drafts — and, when asked, one q list per
 * token: the proposal's (a proposer without q, or an assumed token, gives
 * the one-hot {token: 1}; the verifier only reads the q of drafts it
 * verifies). The reply owns its buffers and borrows the spans' token and q
 * arrays until sd_dreply_free. Not thread-safe. */
#ifndef SD_DREPLY_H
#define SD_DREPLY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proposer.h"
#include "specd.pb-c.h"
#include "status.h"

typedef struct sd_dspan {
    uint64_t id;
    bool need_open;
    uint32_t base_len;
    uint64_t base_hash;
    const int32_t *assumed; /* tokens before the drafts (may be NULL when n_assumed is 0) */
    int n_assumed;
    const sd_proposal *p; /* the drafts; NULL: none */
    bool with_q;
    uint32_t draft_us;
    bool dry; /* the proposer had no drafts past these tokens (DraftResult.dry) */
} sd_dspan;

typedef struct sd_dreply {
    Specd__DraftReply rep; /* ready to send after a successful build */
    Specd__DraftResult *res;
    Specd__DraftResult **resp;
    int32_t *toks; /* assumed + drafts, per span */
    Specd__Proposal *pb;
    Specd__Proposal **pp;
    Specd__TokenProb *tb;
    Specd__TokenProb **tp;
} sd_dreply;

/* Builds the reply of step for spans[0..n). SD_ERR_NOMEM (r is then empty). */
sd_status sd_dreply_build(sd_dreply *r, uint64_t step, const sd_dspan *spans, size_t n);

/* Frees what a build allocated; r is empty afterwards. */
void sd_dreply_free(sd_dreply *r);

#endif
