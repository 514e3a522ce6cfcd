/* responses.c — the Responses API over the chat machinery (see responses.h). */
#include "responses.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID "invalid_request_error"
#define BADF(field, ...) sd_api_fail(e, 400, INVALID, field, NULL, __VA_ARGS__)

static json_t *field(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    return json_is_null(v) ? NULL : v;
}

/* One input item's content as a string (new ref), or NULL with e set. */
static json_t *item_text(json_t *c, size_t i, sd_api_err *e)
{
    char param[48];
    snprintf(param, sizeof param, "input[%zu].content", i);
    if (json_is_string(c)) return json_incref(c);
    if (!json_is_array(c)) {
        BADF(param, "'%s' must be a string or an array of text parts", param);
        return NULL;
    }
    json_t *parts = json_array();
    size_t j;
    json_t *p;
    json_array_foreach(c, j, p) {
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *text = json_object_get(p, "text");
        if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text")) ||
            !json_is_string(text)) {
            json_decref(parts);
            BADF(param, "'%s[%zu]' must be an input_text / output_text part with a string 'text' (%s is not "
                 "supported)", param, j, type ? type : "a part without a type");
            return NULL;
        }
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", text));
    }
    return parts;
}

/* input (string or items) + instructions → chat messages (new ref) or NULL. */
static json_t *messages_of(json_t *o, sd_api_err *e)
{
    json_t *input = field(o, "input"), *ins = field(o, "instructions");
    if (!input) {
        BADF("input", "'input' is required");
        return NULL;
    }
    if (ins && !json_is_string(ins)) {
        BADF("instructions", "'instructions' must be a string");
        return NULL;
    }
    json_t *msgs = json_array();
    if (ins) json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "system", "content", ins));
    if (json_is_string(input)) {
        json_array_append_new(msgs, json_pack("{s:s, s:O}", "role", "user", "content", input));
        return msgs;
    }
    if (!json_is_array(input) || json_array_size(input) == 0) {
        json_decref(msgs);
        BADF("input", "'input' must be a string or a non-empty array of messages");
        return NULL;
    }
    size_t i;
    json_t *it;
    json_array_foreach(input, i, it) {
        const char *type = json_string_value(json_object_get(it, "type"));
        json_t *role = json_object_get(it, "role");
        json_t *content = json_is_object(it) ? item_text(json_object_get(it, "content"), i, e) : NULL;
        if (!json_is_object(it) || (type && strcmp(type, "message")) || !json_is_string(role) || !content) {
            json_decref(content);
            json_decref(msgs);
            char param[32];
            snprintf(param, sizeof param, "input[%zu]", i);
            if (!json_is_object(it) || (type && strcmp(type, "message")) || !json_is_string(role))
                BADF(param, "'%s' must be a message with a 'role' (items of type %s are not supported)", param,
                     type ? type : "other than message");
            return NULL;
        }
        json_array_append_new(msgs, json_pack("{s:O, s:o}", "role", role, "content", content));
    }
    return msgs;
}

/* The Responses fields specd refuses rather than ignores. */
static sd_status refuse_unsupported(json_t *o, sd_api_err *e)
{
    json_t *tools = field(o, "tools"), *tc = field(o, "tool_choice"), *text = field(o, "text");
    if (tools && !(json_is_array(tools) && json_array_size(tools) == 0))
        return BADF("tools", "'tools' is not supported: this server does not call tools");
    if (tc && !(json_is_string(tc) && (!strcmp(json_string_value(tc), "none") || !strcmp(json_string_value(tc), "auto"))))
        return BADF("tool_choice", "'tool_choice' may only be \"none\" or \"auto\": this server does not call tools");
    json_t *fmt = json_is_object(text) ? field(text, "format") : NULL;
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (fmt && !(ft && (!strcmp(ft, "text") || !strcmp(ft, "json_object") || !strcmp(ft, "json_schema"))))
        return BADF("text.format", "'text.format.type' must be \"text\", \"json_object\" or \"json_schema\"");
    if (ft && !strcmp(ft, "json_schema") && !json_object_get(fmt, "schema"))
        return BADF("text.format", "'text.format' of type json_schema needs the schema in 'schema'");
    if (field(o, "previous_response_id"))
        return BADF("previous_response_id", "'previous_response_id' is not supported: responses are not stored; "
                    "send the conversation in 'input'");
    if (json_is_true(field(o, "background"))) return BADF("background", "'background' is not supported");
    json_t *inc = field(o, "include");
    if (inc && !(json_is_array(inc) && json_array_size(inc) == 0))
        return BADF("include", "'include' is not supported");
    return SD_OK;
}

sd_status sd_api_parse_responses(const char *body, size_t len, sd_api_req *r, sd_api_err *e)
{
    memset(r, 0, sizeof *r);
    json_error_t jerr;
    json_t *o = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return BADF(NULL, "We could not parse the JSON body of your request: %s (line %d, column %d)", jerr.text,
                    jerr.line, jerr.column);
    if (!json_is_object(o)) {
        json_decref(o);
        return BADF(NULL, "The request body must be a JSON object");
    }
    sd_status st = refuse_unsupported(o, e);
    json_t *msgs = st == SD_OK ? messages_of(o, e) : NULL;
    json_t *mot = field(o, "max_output_tokens");
    if (st == SD_OK && !msgs) st = SD_ERR_ARG;
    if (st == SD_OK && mot && (!json_is_integer(mot) || json_integer_value(mot) < 1 || json_integer_value(mot) > INT32_MAX))
        st = BADF("max_output_tokens", "'max_output_tokens' must be a positive integer");
    if (st != SD_OK) {
        json_decref(msgs);
        json_decref(o);
        return st;
    }
    /* the chat request: the same sampling names, messages, max_tokens */
    static const char *const keep[] = {"model", "temperature", "top_p", "top_k", "min_p", "seed", "stream",
                                       "presence_penalty", "frequency_penalty", "repetition_penalty", "stop",
                                       "stop_token_ids", "ignore_eos", "speculative"};
    json_t *chat = json_object();
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
        if (json_object_get(o, keep[i])) json_object_set(chat, keep[i], json_object_get(o, keep[i]));
    json_object_set_new(chat, "messages", msgs);
    if (mot) json_object_set(chat, "max_tokens", mot);
    json_t *fmt = json_object_get(json_object_get(o, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (ft && !strcmp(ft, "json_schema")) /* {type, name, schema, strict} → chat's {type, json_schema: {...}} */
        json_object_set_new(chat, "response_format", json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema",
                                                                "schema", json_object_get(fmt, "schema")));
    else if (fmt) json_object_set(chat, "response_format", fmt); /* text or json_object (checked above) */
    char *text = json_dumps(chat, JSON_COMPACT);
    json_decref(chat);
    json_decref(o);
    if (!text) return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    st = sd_api_parse(SD_API_CHAT, text, strlen(text), r, e);
    free(text);
    if (st == SD_OK) r->responses = true;
    return st;
}

json_t *sd_resp_message(const sd_resp *r, bool done)
{
    json_t *content = json_array();
    if (done)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:[]}", "type", "output_text", "text", r->text ? r->text : "",
                                                 r->text ? r->len : 0, "annotations"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", r->msg_id, "status",
                     done ? "completed" : "in_progress", "role", "assistant", "content", content);
}

json_t *sd_resp_object(const sd_resp *r)
{
    bool started = strcmp(r->status, "in_progress") != 0;
    json_t *output = json_array();
    if (started) json_array_append_new(output, sd_resp_message(r, true));
    json_t *usage = started ? json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", (int)r->input_tokens,
                                        "input_tokens_details", "cached_tokens", (int)r->cached_tokens, "output_tokens",
                                        (int)r->output_tokens, "output_tokens_details", "reasoning_tokens", 0,
                                        "total_tokens", (int)(r->input_tokens + r->output_tokens))
                            : json_null();
    const sd_api_req *q = r->req;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o, s:n, s:o, s:f, s:f, s:o, s:s, s:[], s:b, s:{s:{s:s}},"
                          " s:s, s:n}",
                          "id", r->id, "object", "response", "created_at", (json_int_t)r->created, "status",
                          r->status, "model", r->model, "output", output, "usage", usage, "error",
                          "incomplete_details",
                          r->length ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(),
                          "temperature", (double)q->sampling.temperature, "top_p", (double)q->sampling.top_p,
                          "max_output_tokens", q->max_tokens > 0 ? json_integer(q->max_tokens) : json_null(),
                          "tool_choice", "none", "tools", "parallel_tool_calls", 0, "text", "format", "type",
                          q->sampling.json_object ? "json_object" : "text",
                          "truncation", "disabled", "instructions");
    json_t *schema = q->json_schema ? json_loads(q->json_schema, JSON_DECODE_ANY, NULL) : NULL;
    if (schema)
        json_object_set_new(json_object_get(o, "text"), "format",
                            json_pack("{s:s, s:o}", "type", "json_schema", "schema", schema));
    return o;
}

char *sd_resp_event(const char *type, json_t *fields, unsigned *seq)
{
    json_t *o = fields ? fields : json_object();
    json_object_set_new(o, "type", json_string(type));
    json_object_set_new(o, "sequence_number", json_integer((json_int_t)(*seq)++));
    char *j = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8));
    json_decref(o);
    if (!j) return NULL;
    size_t n = strlen(type) + strlen(j) + 20;
    char *s = malloc(n);
    if (s) snprintf(s, n, "event: %s\ndata: %s\n\n", type, j);
    free(j);
    return s;
}
