/* ngram.h — the n-gram (prompt lookup) proposer: drafts without a model.
 *
 * For each sequence it takes the last n tokens of the committed context
 * (n from n_max down to n_min), finds the most recent earlier occurrence of
 * that n-gram in the context and proposes the tokens that followed it, up to
 * k (fewer when the context ends first). The first n with a match wins; no
 * match gives no draft. Code, structured text and edits of the prompt repeat
 * themselves a lot, so this is a cheap and surprisingly good draft source.
 *
 * Drafts are deterministic, so when a caller asks for q (want_q) each token
 * comes with the one-hot distribution {token: 1.0}. That is a valid proposal
 * distribution: rejection sampling with a one-hot q accepts d with
 * probability p(d) and otherwise samples from p with d removed, which is
 * exactly p. The proposer keeps no per-sequence state (one backwards scan of
 * the context per call, O(n_context * n_max)), so release is a no-op.
 * Not thread-safe: one owner thread (proposer.h). */
#ifndef SD_NGRAM_H
#define SD_NGRAM_H

#include <stddef.h>

#include "proposer.h"
#include "status.h"

#define SD_NGRAM_MAX_N 8
#define SD_NGRAM_DEFAULT_MIN 1
#define SD_NGRAM_DEFAULT_MAX 4

/* Creates an n-gram proposer matching n-grams of n_min..n_max tokens
 * (defaults SD_NGRAM_DEFAULT_MIN / _MAX: 1 and 4). Requires
 * 1 <= n_min <= n_max <= SD_NGRAM_MAX_N, else SD_ERR_ARG with a message;
 * SD_ERR_NOMEM on allocation failure. On success *out is owned by the
 * caller: free it with sd_proposer_free. */
sd_status sd_ngram_new(int n_min, int n_max, sd_proposer **out, char *err, size_t errlen);

/* The longest-first lookup for one context, exposed for tests and tools:
 * writes up to k (<= SD_MAX_DRAFT) proposed tokens to out and returns how
 * many (0 when no n-gram of n_min..n_max recurs). *matched_n (may be NULL)
 * receives the n that matched, 0 when none. */
int sd_ngram_lookup(const int32_t *context, int n_context, int n_min, int n_max, int k, int32_t *out, int *matched_n);

#endif
