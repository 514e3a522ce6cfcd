/* logprob.h — token log-probabilities as OpenAI's and vLLM's APIs report them.
 *
 * Values are log-softmax of the target's raw logits at a position: before
 * penalties, temperature, top-k / top-p / min-p (vLLM's default
 * "raw_logprobs"). They therefore depend only on the tokens before the
 * position, never on the request's sampling settings or on speculation. */
#ifndef SD_LOGPROB_H
#define SD_LOGPROB_H

#include <stdint.h>

#define SD_MAX_LOGPROBS 20 /* alternatives per position (vLLM's default max_logprobs) */

/* One position: the chosen token's log-probability and the n_top likeliest
 * tokens (descending; lowest id first on ties). */
typedef struct sd_token_lp {
    float lp;
    int32_t top_id[SD_MAX_LOGPROBS];
    float top_lp[SD_MAX_LOGPROBS];
} sd_token_lp;

/* Fills *out from one row of raw logits: the log-probability of tok and the
 * n_top (0..SD_MAX_LOGPROBS) best tokens. NaN logits count as -inf. */
void sd_logprob_row(const float *logits, int vocab, int32_t tok, int n_top, sd_token_lp *out);

#endif
