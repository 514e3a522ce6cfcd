/* responses.h — OpenAI's Responses API (POST /v1/responses), text in / text
 * out, on top of the chat machinery.
 *
 * A Responses body becomes a chat request: `instructions` → a system
 * message, `input` (a string, or a list of messages whose content is a
 * string or input_text / output_text parts) → the messages,
 * `max_output_tokens` → max_tokens; temperature, top_p, seed, stream and the
 * vLLM sampling extensions keep their names. Function tools and
 * tool_choice become chat's (function_call / function_call_output input
 * items: an assistant message's tool_calls, tool messages), and the calls
 * come back as function_call output items. Other tools, a text format other
 * than text / json_object / json_schema, previous_response_id, background
 * and include are refused with a 400 naming them; store,
 * metadata, user, reasoning, parallel_tool_calls, truncation and
 * service_tier are accepted and have no effect (nothing is stored).
 * Builders turn a generation into the `response` object and into the
 * streaming events (`event: <type>` + `data: {…, "sequence_number"}`).
 * Pure: no I/O. */
#ifndef SD_ROUTER_RESPONSES_H
#define SD_ROUTER_RESPONSES_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>

#include "http_api.h"

/* Parses a Responses body into a chat request (r->kind SD_API_CHAT,
 * r->responses set). As sd_api_parse otherwise. */
sd_status sd_api_parse_responses(const char *body, size_t len, sd_api_req *r, sd_api_err *e);

/* What a response reports. text: the output so far. */
typedef struct sd_resp {
    const char *id;     /* "resp_…" */
    const char *msg_id; /* "msg_…" */
    const char *model;
    long long created;
    const char *status; /* "in_progress" | "completed" | "incomplete" */
    bool length;        /* incomplete because of max_output_tokens */
    unsigned input_tokens, output_tokens;
    unsigned cached_tokens; /* input_tokens_details.cached_tokens */
    const sd_api_req *req;  /* for temperature, top_p, max_output_tokens */
    const char *text;
    size_t len;
    const json_t *tool_calls; /* the answer's tool calls (chat tool_call objects), or NULL */
    bool streamed;            /* the message item was announced (streaming): it stays, even empty */
} sd_resp;

/* A function_call output item for a chat tool_call object ("in_progress":
 * arguments ""). New reference. */
json_t *sd_resp_call(const json_t *call, bool done);

/* The `response` object (new reference). */
json_t *sd_resp_object(const sd_resp *r);

/* The output message item ("in_progress": no content yet). */
json_t *sd_resp_message(const sd_resp *r, bool done);

/* One streaming event, "event: TYPE\ndata: {type, sequence_number, …}\n\n";
 * fields (stolen; may be NULL) are added to the payload. *seq is
 * incremented. malloc'd. */
char *sd_resp_event(const char *type, json_t *fields, unsigned *seq);

#endif
