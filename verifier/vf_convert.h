/* vf_convert.h — protobuf messages ↔ engine parameters for the verifier.
 *
 * Pure functions: no I/O, no global state. Proto3 defaults are mapped to the
 * engine's neutral values (max_tokens 0 → 256, num_draft 0 → the server
 * default; sampling settings through proto/convert.h). */
#ifndef SD_VF_CONVERT_H
#define SD_VF_CONVERT_H

#include <stdbool.h>
#include <stddef.h>

#include "adapt.h"
#include "engine.h"
#include "specd.pb-c.h"

#define SD_VF_DEFAULT_MAX_TOKENS 256
#define SD_VF_MAX_MAX_TOKENS (1 << 24)

/* Request parameters from a Submit. default_k: the server's --num-draft;
 * have_drafter: speculation is possible at all. Returns SD_OK, or SD_ERR_ARG
 * with a message (too many stop ids, unknown verify mode); ranges that the
 * engine checks (temperature, top_p...) are left to sd_req_new. */
sd_status sd_vf_params_from_submit(const Specd__Submit *s, int default_k, bool have_drafter, sd_req_params *out,
                                   char *err, size_t errlen);

/* The proto finish reason of f. */
Specd__FinishReason sd_vf_finish_to_proto(sd_finish f);

/* Fills *out from st; accepted_at points into st (n entries, n <= SD_MAX_DRAFT). */
void sd_vf_stats_to_proto(const sd_spec_stats *st, int n, Specd__SpecStats *out);

/* Proto views of lp[0..n) with up to top alternatives each, all in one
 * malloc'd block that the returned array starts (free() it); NULL when out
 * of memory. */
Specd__TokenLogprob **sd_vf_logprobs_to_proto(const sd_token_lp *lp, size_t n, int top);

/* The ErrorEvent code for a request that finished with SD_FINISH_ERROR:
 * "kv_exhausted" when its message mentions KV, else "internal". */
const char *sd_vf_error_code(const char *msg);

/* The acceptance estimates to report: fills up to cap entries (names and
 * buffers owned by ad / bufs) of the kinds observed. Returns how many. */
int sd_vf_accept_estimates(const sd_adapt *ad, Specd__AcceptEstimate *out, float (*bufs)[SD_MAX_DRAFT], int cap);

/* A request's figures as specd.AdaptStats (acc: room for its estimate,
 * which out borrows). */
void sd_vf_adapt_stats_to_proto(const sd_areq *q, float acc[SD_MAX_DRAFT], Specd__AdaptStats *out);

#endif
