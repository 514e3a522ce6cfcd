/* response.h — interpretation of one OpenAI-style response object for
 * specd-bench: a streamed chunk ("data: {...}") or a whole non-streaming body
 * of /v1/completions or /v1/chat/completions.
 *
 * It extracts only what the benchmark measures: how much generated text the
 * object carries, token usage, an error object, and specd's per-request
 * speculation stats, accepted in either shape:
 *   {"speculative": {"steps": n, "draft_tokens": n, "accepted_tokens": n,
 *                    "mean_accepted_per_step": x}, ...}
 *   {"usage": {..., "speculative": {...}}}
 * Pure: no state, no allocation that outlives the call. */
#ifndef SD_BENCH_RESPONSE_H
#define SD_BENCH_RESPONSE_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

typedef struct {
    size_t content_len; /* bytes of generated text over all choices */
    bool has_usage;     /* "usage" object with completion_tokens */
    long completion_tokens;
    long prompt_tokens; /* usage.prompt_tokens; -1 when absent */
    long cached_tokens; /* usage.prompt_tokens_details.cached_tokens; -1 when absent */
    bool has_spec;      /* a "speculative" object was found */
    long spec_steps, spec_draft, spec_accepted;
    double spec_mean; /* mean_accepted_per_step (computed if absent) */
    bool is_error;    /* body carried an "error" member */
    char errmsg[160];
} sd_resp_info;

/* Parses json[0..len) as one response object. chat selects the chat shape
 * (choices[].delta.content / .message.content, plus reasoning_content) over
 * completions (choices[].text). Fills *out (zeroed first).
 * Returns SD_OK, or SD_ERR_FORMAT with a message in err when the text is not
 * a JSON object. A well-formed object without choices is SD_OK with
 * content_len 0 (e.g. the final usage-only chunk). */
sd_status sd_resp_parse(const char *json, size_t len, bool chat, sd_resp_info *out, char *err, size_t errlen);

#endif
