/* http_api.h — the OpenAI-compatible request and response shapes.
 *
 * Parsing turns a request body into an sd_api_req (every field checked for
 * type and range; the first problem becomes an sd_api_err with the HTTP
 * status, OpenAI error type, the offending param and a message naming it).
 * Builders turn results into response / SSE chunk JSON with jansson. Pure: no
 * I/O, no libevent, no tokenizer, so every shape is unit-tested. */
#ifndef SD_HTTP_API_H
#define SD_HTTP_API_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "convert.h"
#include "sampler.h"
#include "status.h"

#define SD_API_MAX_STOP 16       /* stop strings per request */
#define SD_API_MAX_STOP_LEN 1024 /* bytes per stop string */
#define SD_API_MAX_NUM_DRAFT 64
#define SD_API_MAX_LOGPROBS 20       /* alternatives per token (as vLLM's default max_logprobs) */
#define SD_API_MAX_N 128             /* n and best_of (OpenAI's bound on n) */
#define SD_API_MAX_CHOICES 1024      /* guided_choice / structured_outputs.choice strings */
#define SD_API_MAX_ALLOWED (1 << 20) /* allowed_token_ids entries */

/* The generation endpoints. A parsed request is a completion or a chat; a
 * /v1/responses one is a chat with sd_api_req.responses set. */
typedef enum { SD_API_COMPLETION = 0, SD_API_CHAT = 1, SD_API_RESPONSES = 2 } sd_api_kind;

typedef enum {
    SD_API_VERIFY_AUTO = 0, /* values match specd.VerifyMode */
    SD_API_VERIFY_GREEDY = 1,
    SD_API_VERIFY_MATCH = 2,
    SD_API_VERIFY_REJECTION = 3,
} sd_api_verify;

/* An error in the OpenAI shape: {"error": {message, type, param, code}}. */
typedef struct sd_api_err {
    int status;     /* HTTP status: 400, 401, 404, 413, 429, 503, ... */
    char type[40];  /* "invalid_request_error", "server_error", ... */
    char param[48]; /* offending field ("" → null) */
    char code[40];  /* machine code ("" → null) */
    char message[480];
} sd_api_err;

/* A parsed request. Strings are owned by the struct (sd_api_req_clear). */
typedef struct sd_api_req {
    sd_api_kind kind;
    char *model;         /* NULL when absent */
    char *prompt;        /* completions: text prompt, or NULL */
    int32_t *prompt_ids; /* completions: token-id prompt, or NULL */
    size_t n_prompt_ids;
    sd_chat_msg *messages; /* chat: role/content owned here */
    size_t n_messages;
    int max_tokens;       /* -1: not given */
    sd_sampling sampling; /* its logits processors' lists point to the four below */
    int32_t *bias_ids;    /* "logit_bias" token ids (NULL when absent) */
    float *bias_values;   /* ... and their biases */
    int32_t *allowed;     /* "allowed_token_ids" (vLLM extension; NULL when absent) */
    char *json_schema;    /* response_format json_schema's schema, compact (NULL when absent) */
    char *regex;          /* structured_outputs regex / choice (choices as a pattern; NULL when absent) */
    struct json_t *tools; /* chat "tools" for the template and tool-call parsing (tool_calls.h); NULL when
                                * absent, empty or tool_choice "none" */
    bool tools_forced;    /* tool_choice "required" or a named function: the output is JSON by a schema of */
    char *tool_name;      /* ... the tools (json_schema), read as tool calls; the named function, or NULL */
    bool seed_set;        /* "seed" given (else the server picks one) */
    char *stop[SD_API_MAX_STOP];
    size_t n_stop;
    int32_t stop_ids[SD_API_MAX_STOP]; /* "stop_token_ids" (vLLM extension) */
    size_t n_stop_ids;
    bool stream;
    bool include_usage; /* stream_options.include_usage */
    bool ignore_eos;
    unsigned n;           /* choices to return (1..SD_API_MAX_N) */
    unsigned best_of;     /* completions: choices to generate, the n likeliest returned (>= n; = n
                                * unless given) */
    bool echo;            /* completions: the prompt's text comes first in the output */
    bool responses;       /* a /v1/responses request (responses.h): chat, answered in that API's shapes */
    bool logprobs;        /* report the output tokens' log-probabilities (completions: "logprobs" given) */
    int top_logprobs;     /* ... with this many alternatives each (0..SD_API_MAX_LOGPROBS) */
    bool spec_enabled;    /* speculative.enabled (default true) */
    unsigned num_draft;   /* speculative.num_draft (0 = server default) */
    sd_api_verify verify; /* speculative.verify */
    bool provenance;      /* speculative.provenance: each token's source and step (gen.c) */
} sd_api_req;

/* Fills e and returns SD_ERR_ARG (so callers can `return sd_api_fail(...)`).
 * param / code may be NULL. */
sd_status sd_api_fail(sd_api_err *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                      ...) __attribute__((format(printf, 6, 7)));

/* Parses and validates a request body of the given kind. On SD_OK *r is
 * filled (free with sd_api_req_clear); on failure *e says why (400 unless
 * noted) and *r holds nothing to free. Sampling ranges are checked with
 * sd_sampling_validate plus the OpenAI bounds; a JSON schema is compiled
 * (json_schema.h) so that what the verifier would refuse is a 400 here.
 * A regular expression likewise (regex_mask.h). best_of on chat or with
 * stream (unless = n), echo on chat, vLLM's guided_grammar are refused (400,
 * unsupported). */
sd_status sd_api_parse(sd_api_kind kind, const char *body, size_t len, sd_api_req *r, sd_api_err *e);

/* Frees what sd_api_parse allocated and zeroes *r; safe on a zeroed struct. */
void sd_api_req_clear(sd_api_req *r);

/* The error object as JSON text (malloc'd, caller frees). */
char *sd_api_error_json(const sd_api_err *e);

/* The draft lengths adaptive speculation chose for a request
 * (specd.AdaptStats). */
typedef struct sd_api_adapt {
    uint64_t k_sum, k_steps, k_zero;
    float accept[16]; /* its acceptance estimate per draft position */
    size_t n_accept;
} sd_api_adapt;

/* Per-request speculation statistics, reported in responses. */
typedef struct sd_api_spec {
    uint64_t steps, draft_tokens, accepted_tokens;
    const uint64_t *accepted_at; /* accepted_at[i]: steps where draft i+1 was accepted */
    size_t n_accepted_at;
    const sd_pipe_stats *drafting; /* NULL: not reported */
    const sd_api_adapt *adapt;     /* NULL: not reported */
} sd_api_spec;

struct json_t;

/* What a finished (or in-progress) generation reports. */
typedef struct sd_api_result {
    const char *id; /* "cmpl-…" / "chatcmpl-…" */
    const char *model;
    long long created;  /* Unix seconds */
    const char *finish; /* "stop" | "length" | NULL (not finished) */
    unsigned prompt_tokens, completion_tokens;
    const sd_api_spec *spec;   /* may be NULL */
    struct json_t *logprobs;   /* a chunk's choice's logprobs (borrowed; NULL: null) */
    unsigned index;            /* a chunk's choice index */
    unsigned cached_tokens;    /* usage.prompt_tokens_details.cached_tokens: prompt tokens from the prefix cache */
    struct json_t *tool_calls; /* a chat chunk's delta.tool_calls (borrowed; tool_calls.h; NULL: none) */
    struct json_t *provenance; /* a chunk's choice's "provenance" (borrowed; NULL: none) */
} sd_api_result;

/* One choice of a non-streamed response. */
typedef struct sd_api_choice {
    const char *text;
    size_t len;
    const char *finish;        /* "stop" | "length" | "tool_calls" */
    struct json_t *logprobs;   /* borrowed; NULL: null */
    struct json_t *tool_calls; /* chat: message.tool_calls (borrowed; NULL: none), content null when empty */
    struct json_t *provenance; /* "provenance" (borrowed; NULL: none) */
} sd_api_choice;

/* Non-streaming response body: text_completion or chat.completion with
 * choices[i].text / choices[i].message (index i) for ch[0..n), usage and
 * "speculative" from res (its finish / logprobs / index are not used).
 * malloc'd. */
char *sd_api_response_json(sd_api_kind kind, const sd_api_result *res, const sd_api_choice *ch, size_t n);

/* One SSE event "data: {...}\n\n" for a streaming chunk (malloc'd).
 * text / len: new text (chat: delta.content). first: chat's first chunk carries
 * delta.role. res->finish non-NULL: the final choice chunk, which also carries
 * "speculative". with_usage_null: add "usage": null (include_usage mode). */
char *sd_api_chunk_sse(sd_api_kind kind, const sd_api_result *res, const char *text, size_t len, bool first,
                       bool with_usage_null);

/* The include_usage chunk: choices [] plus usage and "speculative" (malloc'd SSE). */
char *sd_api_usage_sse(sd_api_kind kind, const sd_api_result *res);

/* The "speculative" object: steps, draft_tokens, accepted_tokens,
 * mean_accepted_per_step, acceptance_rate, accepted_per_position and, when
 * reported, "drafting": spans_used, spans_stale, pre_draft_hit_rate
 * (spans_ready / spec_steps), wait_ms, draft_ms, step_ms, verify_ms and
 * draft_time_hidden (sd_pipe_stats_hidden), and "draft_length":
 * mean (drafts chosen per decode step), steps_without_drafts and
 * acceptance_estimate (per position). New ref. */
struct json_t *sd_api_spec_json(const sd_api_spec *s);

#endif
