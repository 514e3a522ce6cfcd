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
    json_array_foreach(c, j, p)
    {
        const char *type = json_string_value(json_object_get(p, "type"));
        json_t *text = json_object_get(p, "text");
        if (!type || (strcmp(type, "input_text") && strcmp(type, "output_text") && strcmp(type, "text")) ||
            !json_is_string(text)) {
            json_decref(parts);
            BADF(param,
                 "'%s[%zu]' must be an input_text / output_text part with a string 'text' (%s is not "
                 "supported)",
                 param, j, type ? type : "a part without a type");
            return NULL;
        }
        json_array_append_new(parts, json_pack("{s:s, s:O}", "type", "text", "text", text));
    }
    return parts;
}

/* A function_call item (the model's call, as a previous response gave it)
 * or a function_call_output item (its result) → chat messages: the calls
 * join an assistant message's tool_calls (consecutive calls one message),
 * a result becomes a tool message. */
static sd_status tool_item(json_t *msgs, json_t *it, size_t i, sd_api_err *e)
{
    char param[32];
    snprintf(param, sizeof param, "input[%zu]", i);
    json_t *id = json_object_get(it, "call_id");
    if (!json_is_string(id)) return BADF(param, "'%s' needs a string 'call_id'", param);
    if (!strcmp(json_string_value(json_object_get(it, "type")), "function_call_output")) {
        json_t *out = json_object_get(it, "output");
        if (!json_is_string(out)) return BADF(param, "'%s' needs a string 'output'", param);
        json_array_append_new(msgs, json_pack("{s:s, s:O, s:O}", "role", "tool", "tool_call_id", id, "content", out));
        return SD_OK;
    }
    json_t *name = json_object_get(it, "name"), *args = json_object_get(it, "arguments");
    if (!json_is_string(name) || !json_is_string(args))
        return BADF(param, "'%s' needs a string 'name' and 'arguments' (JSON text)", param);
    json_t *call = json_pack("{s:O, s:s, s:{s:O, s:O}}", "id", id, "type", "function", "function", "name", name,
                             "arguments", args);
    json_t *last = json_array_get(msgs, json_array_size(msgs) - 1);
    json_t *calls = json_object_get(last, "tool_calls");
    if (json_is_array(calls) && json_is_null(json_object_get(last, "content")))
        return json_array_append_new(calls, call), SD_OK;
    json_array_append_new(msgs, json_pack("{s:s, s:n, s:[o]}", "role", "assistant", "content", "tool_calls", call));
    return SD_OK;
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
    json_array_foreach(input, i, it)
    {
        const char *type = json_string_value(json_object_get(it, "type"));
        if (type && (!strcmp(type, "function_call") || !strcmp(type, "function_call_output"))) {
            if (tool_item(msgs, it, i, e) != SD_OK) {
                json_decref(msgs);
                return NULL;
            }
            continue;
        }
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
    json_t *tools = field(o, "tools"), *text = field(o, "text"), *t;
    size_t i;
    if (tools && !json_is_array(tools)) return BADF("tools", "'tools' must be an array of function tools");
    json_array_foreach(tools, i, t)
    {
        const char *type = json_string_value(json_object_get(t, "type"));
        if (!type || strcmp(type, "function") || !json_is_string(json_object_get(t, "name")))
            return BADF("tools",
                        "'tools[%zu]' must be {\"type\": \"function\", \"name\": ...} (%s tools are not "
                        "supported)",
                        i, type ? type : "untyped");
    }
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
    if (inc && !(json_is_array(inc) && json_array_size(inc) == 0)) return BADF("include", "'include' is not supported");
    return SD_OK;
}

/* Responses' function tools and tool_choice → chat's (the chat parser
 * checks them further). */
static void chat_tools(json_t *o, json_t *chat)
{
    json_t *tools = field(o, "tools"), *tc = field(o, "tool_choice"), *t;
    size_t i;
    if (tools) {
        json_t *ct = json_array();
        json_array_foreach(tools, i, t)
        {
            json_t *fn = json_pack("{s:O}", "name", json_object_get(t, "name"));
            static const char *const more[] = {"description", "parameters"};
            for (size_t k = 0; k < 2; k++)
                if (field(t, more[k])) json_object_set(fn, more[k], json_object_get(t, more[k]));
            json_array_append_new(ct, json_pack("{s:s, s:o}", "type", "function", "function", fn));
        }
        json_object_set_new(chat, "tools", ct);
    }
    if (json_is_object(tc) && json_object_get(tc, "name")) /* {"type": "function", "name"} */
        json_object_set_new(chat, "tool_choice",
                            json_pack("{s:O, s:{s:O}}", "type", json_object_get(tc, "type"), "function", "name",
                                      json_object_get(tc, "name")));
    else if (tc) json_object_set(chat, "tool_choice", tc);
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
    if (st == SD_OK && mot &&
        (!json_is_integer(mot) || json_integer_value(mot) < 1 || json_integer_value(mot) > INT32_MAX))
        st = BADF("max_output_tokens", "'max_output_tokens' must be a positive integer");
    if (st != SD_OK) {
        json_decref(msgs);
        json_decref(o);
        return st;
    }
    /* the chat request: the same sampling names, messages, max_tokens */
    static const char *const keep[] = {"model",
                                       "temperature",
                                       "top_p",
                                       "top_k",
                                       "min_p",
                                       "seed",
                                       "stream",
                                       "presence_penalty",
                                       "frequency_penalty",
                                       "repetition_penalty",
                                       "stop",
                                       "stop_token_ids",
                                       "ignore_eos",
                                       "speculative",
                                       "parallel_tool_calls"};
    json_t *chat = json_object();
    for (size_t i = 0; i < sizeof keep / sizeof *keep; i++)
        if (json_object_get(o, keep[i])) json_object_set(chat, keep[i], json_object_get(o, keep[i]));
    json_object_set_new(chat, "messages", msgs);
    chat_tools(o, chat);
    if (mot) json_object_set(chat, "max_tokens", mot);
    json_t *fmt = json_object_get(json_object_get(o, "text"), "format");
    const char *ft = json_string_value(json_object_get(fmt, "type"));
    if (ft && !strcmp(ft, "json_schema")) /* {type, name, schema, strict} → chat's {type, json_schema: {...}} */
        json_object_set_new(chat, "response_format",
                            json_pack("{s:s, s:{s:O}}", "type", "json_schema", "json_schema", "schema",
                                      json_object_get(fmt, "schema")));
    else if (fmt) json_object_set(chat, "response_format", fmt); /* text or json_object (checked above) */
    char *text = json_dumps(chat, JSON_COMPACT);
    json_decref(chat);
    json_decref(o);
    if (!text) return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    st = sd_api_parse(SD_API_CHAT, text, strlen(text), r, e);
    free(text);
    if (st == SD_OK && r->provenance) {
        sd_api_req_clear(r);
        return sd_api_fail(e, 400, "invalid_request_error", "speculative.provenance", "unsupported",
                           "'speculative.provenance' is available on /v1/chat/completions and /v1/completions");
    }
    if (st == SD_OK) r->responses = true;
    return st;
}

json_t *sd_resp_message(const sd_resp *r, bool done)
{
    json_t *content = json_array();
    if (done)
        json_array_append_new(content, json_pack("{s:s, s:s%, s:[]}", "type", "output_text", "text",
                                                 r->text ? r->text : "", r->text ? r->len : 0, "annotations"));
    return json_pack("{s:s, s:s, s:s, s:s, s:o}", "type", "message", "id", r->msg_id, "status",
                     done ? "completed" : "in_progress", "role", "assistant", "content", content);
}

json_t *sd_resp_call(const json_t *call, bool done)
{
    json_t *fn = json_object_get(call, "function");
    const char *id = json_string_value(json_object_get(call, "id"));
    char fc[96];
    snprintf(fc, sizeof fc, "fc_%s", id && !strncmp(id, "call_", 5) ? id + 5 : id ? id : "");
    return json_pack("{s:s, s:s, s:O, s:O, s:O, s:s}", "type", "function_call", "id", fc, "call_id",
                     json_object_get(call, "id"), "name", json_object_get(fn, "name"), "arguments",
                     done ? json_object_get(fn, "arguments") : json_string(""), "status",
                     done ? "completed" : "in_progress");
}

/* The tools and tool_choice as the request gave them (Responses' shapes). */
static void echo_tools(json_t *o, const sd_api_req *q)
{
    json_t *tools = json_array(), *t;
    size_t i;
    json_array_foreach(q->tools, i, t)
    {
        json_t *fn = json_deep_copy(json_object_get(t, "function"));
        json_object_set_new(fn, "type", json_string("function"));
        json_array_append_new(tools, fn);
    }
    json_object_set_new(o, "tools", tools);
    json_t *choice = !q->tools          ? json_string("none")
                     : !q->tools_forced ? json_string("auto")
                     : q->tool_name     ? json_pack("{s:s, s:s}", "type", "function", "name", q->tool_name)
                                        : json_string("required");
    json_object_set_new(o, "tool_choice", choice);
}

json_t *sd_resp_object(const sd_resp *r)
{
    bool started = strcmp(r->status, "in_progress") != 0;
    json_t *output = json_array(), *call;
    size_t i;
    if (started && (r->streamed || r->len || !r->tool_calls)) json_array_append_new(output, sd_resp_message(r, true));
    json_array_foreach((json_t *)r->tool_calls, i, call) json_array_append_new(output, sd_resp_call(call, true));
    json_t *usage = started ? json_pack("{s:i, s:{s:i}, s:i, s:{s:i}, s:i}", "input_tokens", (int)r->input_tokens,
                                        "input_tokens_details", "cached_tokens", (int)r->cached_tokens, "output_tokens",
                                        (int)r->output_tokens, "output_tokens_details", "reasoning_tokens", 0,
                                        "total_tokens", (int)(r->input_tokens + r->output_tokens))
                            : json_null();
    const sd_api_req *q = r->req;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:s, s:o, s:o, s:n, s:o, s:f, s:f, s:o, s:s, s:[], s:b, s:{s:{s:s}},"
                          " s:s, s:n}",
                          "id", r->id, "object", "response", "created_at", (json_int_t)r->created, "status", r->status,
                          "model", r->model, "output", output, "usage", usage, "error", "incomplete_details",
                          r->length ? json_pack("{s:s}", "reason", "max_output_tokens") : json_null(), "temperature",
                          (double)q->sampling.temperature, "top_p", (double)q->sampling.top_p, "max_output_tokens",
                          q->max_tokens > 0 ? json_integer(q->max_tokens) : json_null(), "tool_choice", "none", "tools",
                          "parallel_tool_calls", 1, "text", "format", "type",
                          q->sampling.json_object ? "json_object" : "text", "truncation", "disabled", "instructions");
    echo_tools(o, q);
    json_t *schema = q->json_schema && !q->tools_forced ? json_loads(q->json_schema, JSON_DECODE_ANY, NULL) : NULL;
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
