/* logprobs.h — the "logprobs" object of a completion choice, built from the
 * verifier's per-token log-probabilities (specd.TokenLogprob).
 *
 * Chat:        {"content": [{token, logprob, bytes, top_logprobs: [{token,
 *              logprob, bytes}]}]}   (top_logprobs: the N likeliest)
 * Completions: {"tokens": [...], "token_logprobs": [...], "top_logprobs":
 *              [{token: logprob}], "text_offset": [...]}   (each dict holds
 *              the N likeliest and the chosen token; an echoed prompt's first
 *              token has null entries, as in vLLM)
 * A token's text is its own decoding (special tokens included; a byte that
 * completes no character becomes U+FFFD, as vLLM shows it); text_offset
 * counts characters of those texts. -inf is reported as -9999.0 (JSON has
 * no infinities), as vLLM does. Streaming takes the entries gathered since
 * the last chunk; text offsets run on across chunks. */
#ifndef SD_ROUTER_LOGPROBS_H
#define SD_ROUTER_LOGPROBS_H

#include <jansson.h>
#include <stdint.h>

#include "http_api.h"
#include "specd.pb-c.h"
#include "tokenizer.h"

typedef struct sd_lp sd_lp;

/* An empty accumulator for a request of the given kind with top
 * alternatives per token in *out (the caller frees it with sd_lp_free); tok
 * is borrowed (NULL: tokens without text). Returns SD_OK, or SD_ERR_NOMEM
 * with a message in err and *out NULL. */
sd_status sd_lp_new(const sd_tok *tok, sd_api_kind kind, int top, sd_lp **out, char *err, size_t errlen);
void sd_lp_free(sd_lp *a);

/* Appends the entry of token at one position; lp NULL: a position with no
 * value (an echoed prompt's first token). Tokens whose id the tokenizer does
 * not know show as "". */
void sd_lp_add(sd_lp *a, int32_t token, const Specd__TokenLogprob *lp);

/* Entries added since the last take (0 when none). */
size_t sd_lp_pending(const sd_lp *a);

/* The logprobs object of the entries added since the last take (new
 * reference; the caller decrefs), or NULL when out of memory. */
json_t *sd_lp_take(sd_lp *a);

#endif
