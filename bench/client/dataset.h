/* dataset.h — prompt sets for specd-bench: a JSONL file or the built-in set
 * of short Python code prompts.
 *
 * Every prompt is held in both request shapes, so either endpoint can use
 * any dataset: `prompt` (text for /v1/completions) and `messages` (a JSON
 * array for /v1/chat/completions). A line with only "prompt" becomes one
 * user message; a line with only "messages" gives a prompt made of the
 * message contents joined by newlines.
 *
 * Ownership: the dataset owns every prompt; sd_dataset_free releases all. */
#ifndef SD_BENCH_DATASET_H
#define SD_BENCH_DATASET_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include <stdint.h>

#include "status.h"

typedef struct {
    char *prompt;     /* NUL-terminated text */
    json_t *messages; /* array of {"role", "content"}; owned by the dataset */
    size_t len_chars; /* bytes of prompt text (sum of contents for chat) */
    json_t *ids;      /* random prompts: an array of token ids sent as "prompt" (completions), else NULL */
    long max_tokens;  /* random prompts: this request's max_tokens; 0: the run's --max-tokens */
} sd_prompt;

typedef struct sd_dataset sd_dataset;

/* Loads a JSONL file: one JSON object per line with a "prompt" string or a
 * "messages" array. Blank lines are ignored. Bad lines are reported on
 * `warn` (if not NULL) as "FILE:LINE: reason" and skipped, unless strict is
 * non-zero, in which case the first bad line fails the load.
 * Returns SD_OK with *out set (free with sd_dataset_free), SD_ERR_IO,
 * SD_ERR_FORMAT (strict bad line, or no valid prompt at all), SD_ERR_NOMEM;
 * a message is written to err on failure. */
sd_status sd_dataset_load(const char *path, int strict, FILE *warn, sd_dataset **out, char *err, size_t errlen);

/* Builds the built-in set (~32 Python code prompts). Returns SD_OK or
 * SD_ERR_NOMEM. Free with sd_dataset_free. */
sd_status sd_dataset_builtin(sd_dataset **out);

/* Builds n random prompts, as vLLM's random dataset: each of
 * in_len * (1 ± range) token ids drawn uniformly from
 * [SD_RANDOM_ID_LO, SD_RANDOM_ID_HI) — ids every tokenizer has — with a
 * max_tokens of out_len * (1 ± range) (lengths uniform in the range, at
 * least 1). The same seed gives the same prompts. For /v1/completions only
 * (a chat message cannot be token ids). SD_OK, SD_ERR_ARG (n, in_len or
 * out_len < 1, range outside [0, 1)) or SD_ERR_NOMEM. */
#define SD_RANDOM_ID_LO 100
#define SD_RANDOM_ID_HI 1000
sd_status sd_dataset_random(size_t n, long in_len, long out_len, double range, uint64_t seed, sd_dataset **out);

/* Number of prompts (> 0 for any dataset returned by the loaders). */
size_t sd_dataset_count(const sd_dataset *ds);

/* Returns prompt i (i < count), owned by ds. */
const sd_prompt *sd_dataset_get(const sd_dataset *ds, size_t i);

/* Frees ds and every prompt; NULL is a no-op. */
void sd_dataset_free(sd_dataset *ds);

#endif
