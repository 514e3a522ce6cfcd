/* http_api.c — see http_api.h. One small getter per JSON type keeps the
 * per-field checks uniform: each returns SD_OK when the field is absent or
 * null (leaving the default), SD_ERR_ARG with *e filled when it has the wrong
 * type or range. */
#include "http_api.h"

#include "json_num.h"
#include "json_schema.h"
#include "regex_mask.h"

#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define INVALID "invalid_request_error"

/* Replaces every byte that does not start a complete, valid UTF-8 sequence with '?', so that the
 * message can always become a JSON string (json_string refuses invalid UTF-8). */
static void utf8_scrub(char *s)
{
    unsigned char *p = (unsigned char *)s;
    while (*p) {
        int need = *p < 0x80                  ? 0
                   : *p >= 0xC2 && *p <= 0xDF ? 1
                   : *p >= 0xE0 && *p <= 0xEF ? 2
                   : *p >= 0xF0 && *p <= 0xF4 ? 3
                                              : -1;
        unsigned char lo = *p == 0xE0 ? 0xA0 : *p == 0xF0 ? 0x90 : 0x80;
        unsigned char hi = *p == 0xED ? 0x9F : *p == 0xF4 ? 0x8F : 0xBF;
        int k = 0;
        while (need > 0 && k < need && p[k + 1] >= (k == 0 ? lo : 0x80) && p[k + 1] <= (k == 0 ? hi : 0xBF)) k++;
        if (need < 0 || k < need) {
            *p++ = '?';
            continue;
        }
        p += need + 1;
    }
}

sd_status sd_api_fail(sd_api_err *e, int status, const char *type, const char *param, const char *code, const char *fmt,
                      ...)
{
    e->status = status;
    snprintf(e->type, sizeof e->type, "%s", type ? type : INVALID);
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    snprintf(e->code, sizeof e->code, "%s", code ? code : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    utf8_scrub(e->message); /* jansson's "near '...'" may quote half a character; so may truncation */
    return SD_ERR_ARG;
}

#define BADF(field, ...) sd_api_fail(e, 400, INVALID, field, NULL, __VA_ARGS__)

/* ------------------------------------------------------------ typed getters */

static json_t *field(json_t *o, const char *name)
{
    json_t *v = json_object_get(o, name);
    return json_is_null(v) ? NULL : v;
}

static sd_status get_bool(json_t *o, const char *name, bool *out, sd_api_err *e)
{
    json_t *v = field(o, name);
    if (!v) return SD_OK;
    if (!json_is_boolean(v)) return BADF(name, "'%s' must be a boolean", name);
    *out = json_is_true(v);
    return SD_OK;
}

/* Integers; an integral real (e.g. 16.0) is accepted as well. */
static sd_status get_int(json_t *o, const char *name, long long lo, long long hi, long long *out, bool *given,
                         sd_api_err *e)
{
    json_t *v = field(o, name);
    if (given) *given = false;
    if (!v) return SD_OK;
    long long x;
    if (!sd_json_whole(v, &x)) return BADF(name, "'%s' must be an integer", name);
    if (x < lo || x > hi) return BADF(name, "'%s' must be between %lld and %lld, got %lld", name, lo, hi, x);
    *out = x;
    if (given) *given = true;
    return SD_OK;
}

static sd_status get_num(json_t *o, const char *name, double lo, double hi, float *out, sd_api_err *e)
{
    json_t *v = field(o, name);
    if (!v) return SD_OK;
    if (!json_is_number(v)) return BADF(name, "'%s' must be a number", name);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return BADF(name, "'%s' must be between %g and %g, got %g", name, lo, hi, x);
    *out = (float)x;
    return SD_OK;
}

static sd_status dup_str(const char *s, char **out, const char *name, sd_api_err *e)
{
    *out = strdup(s);
    if (!*out) return sd_api_fail(e, 500, "server_error", name, NULL, "out of memory");
    return SD_OK;
}

/* ------------------------------------------------------------ fields */

static sd_status parse_prompt_ids(json_t *arr, sd_api_req *r, sd_api_err *e)
{
    size_t n = json_array_size(arr);
    r->prompt_ids = malloc((n ? n : 1) * sizeof *r->prompt_ids);
    if (!r->prompt_ids) return sd_api_fail(e, 500, "server_error", "prompt", NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(arr, i);
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return BADF("prompt", "'prompt' token ids must be non-negative integers (element %zu)", i);
        r->prompt_ids[i] = (int32_t)json_integer_value(v);
    }
    r->n_prompt_ids = n;
    return SD_OK;
}

/* prompt: a string, an array of token ids, or an array holding one string or
 * one id array (a batch of one). Batches of more are refused. */
static sd_status parse_prompt(json_t *o, sd_api_req *r, sd_api_err *e)
{
    json_t *p = field(o, "prompt");
    if (!p) return BADF("prompt", "'prompt' is required");
    if (json_is_array(p) && json_array_size(p) == 1 &&
        (json_is_string(json_array_get(p, 0)) || json_is_array(json_array_get(p, 0))))
        p = json_array_get(p, 0);
    if (json_is_string(p)) return dup_str(json_string_value(p), &r->prompt, "prompt", e);
    if (!json_is_array(p)) return BADF("prompt", "'prompt' must be a string or an array of token ids");
    if (json_array_size(p) == 0) return BADF("prompt", "'prompt' must not be empty");
    json_t *first = json_array_get(p, 0);
    if (json_is_string(first) || json_is_array(first))
        return BADF("prompt", "'prompt' with several prompts (batch) is not supported; send one per request");
    return parse_prompt_ids(p, r, e);
}

/* content: a string, null, or an array of {"type": "text", "text": ...}. */
static sd_status parse_content(json_t *c, size_t i, char **out, sd_api_err *e)
{
    char param[48];
    snprintf(param, sizeof param, "messages[%zu].content", i);
    if (!c || json_is_null(c)) return dup_str("", out, param, e);
    if (json_is_string(c)) return dup_str(json_string_value(c), out, param, e);
    if (!json_is_array(c)) return BADF(param, "'%s' must be a string or an array of text parts", param);
    size_t total = 1, k;
    json_t *part;
    json_array_foreach(c, k, part)
    {
        const char *type = json_string_value(json_object_get(part, "type"));
        json_t *text = json_object_get(part, "text");
        if (!type || strcmp(type, "text") || !json_is_string(text))
            return BADF(param, "'%s' parts must be {\"type\": \"text\", \"text\": string} (part %zu)", param, k);
        total += json_string_length(text);
    }
    *out = malloc(total);
    if (!*out) return sd_api_fail(e, 500, "server_error", param, NULL, "out of memory");
    (*out)[0] = '\0';
    json_array_foreach(c, k, part) strcat(*out, json_string_value(json_object_get(part, "text")));
    return SD_OK;
}

/* A message's tool fields, for the chat template: an assistant's
 * tool_calls ([{"type": "function", "function": {"name", "arguments"}}],
 * arguments an object or JSON text), a tool message's tool_call_id and
 * name. *out: an object of those given, or NULL. */
static sd_status parse_msg_fields(json_t *msg, const char *role, size_t i, json_t **out, sd_api_err *e)
{
    char param[64];
    json_t *calls = json_object_get(msg, "tool_calls"), *id = json_object_get(msg, "tool_call_id");
    json_t *name = json_object_get(msg, "name");
    *out = NULL;
    if (calls && !json_is_null(calls)) {
        snprintf(param, sizeof param, "messages[%zu].tool_calls", i);
        if (strcmp(role, "assistant") || !json_is_array(calls))
            return BADF(param, "'%s' must be an array, on an assistant message", param);
        size_t k;
        json_t *c;
        json_array_foreach(calls, k, c)
        {
            json_t *fn = json_object_get(c, "function"), *args = json_object_get(fn, "arguments");
            bool args_ok = !args || json_is_string(args) || json_is_object(args);
            if (!json_is_string(json_object_get(fn, "name")) || !args_ok)
                return BADF(param,
                            "'%s[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": string, "
                            "\"arguments\": string or object}}",
                            param, k);
        }
    }
    snprintf(param, sizeof param, "messages[%zu].tool_call_id", i);
    if (id && !json_is_null(id) && !json_is_string(id)) return BADF(param, "'%s' must be a string", param);
    snprintf(param, sizeof param, "messages[%zu].name", i);
    if (name && !json_is_null(name) && !json_is_string(name)) return BADF(param, "'%s' must be a string", param);
    json_t *f = json_object();
    if (calls && json_is_array(calls)) json_object_set(f, "tool_calls", calls);
    if (json_is_string(id)) json_object_set(f, "tool_call_id", id);
    if (json_is_string(name)) json_object_set(f, "name", name);
    if (json_object_size(f)) *out = f;
    else json_decref(f);
    return SD_OK;
}

static sd_status parse_messages(json_t *o, sd_api_req *r, sd_api_err *e)
{
    static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};
    json_t *m = field(o, "messages");
    if (!m) return BADF("messages", "'messages' is required");
    if (!json_is_array(m) || json_array_size(m) == 0) return BADF("messages", "'messages' must be a non-empty array");
    size_t n = json_array_size(m);
    r->messages = calloc(n, sizeof *r->messages);
    if (!r->messages) return sd_api_fail(e, 500, "server_error", "messages", NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *msg = json_array_get(m, i);
        char param[48];
        snprintf(param, sizeof param, "messages[%zu].role", i);
        if (!json_is_object(msg)) return BADF(param, "'messages[%zu]' must be an object", i);
        const char *role = json_string_value(json_object_get(msg, "role"));
        bool known = false;
        for (size_t k = 0; role && k < sizeof roles / sizeof *roles; k++) known |= !strcmp(role, roles[k]);
        if (!known) return BADF(param, "'%s' must be one of system, user, assistant, tool", param);
        if (!strcmp(role, "developer")) role = "system";
        r->n_messages = i + 1;
        sd_status st = dup_str(role, (char **)&r->messages[i].role, param, e);
        if (st == SD_OK) st = parse_content(json_object_get(msg, "content"), i, (char **)&r->messages[i].content, e);
        if (st == SD_OK) st = parse_msg_fields(msg, role, i, &r->messages[i].fields, e);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}

static sd_status parse_stop(json_t *o, sd_api_req *r, sd_api_err *e)
{
    json_t *s = field(o, "stop");
    if (!s) return SD_OK;
    if (json_is_string(s)) {
        if (json_string_length(s) == 0) return SD_OK;
        if (json_string_length(s) > SD_API_MAX_STOP_LEN)
            return BADF("stop", "'stop' strings are limited to %d bytes", SD_API_MAX_STOP_LEN);
        r->n_stop = 1;
        return dup_str(json_string_value(s), &r->stop[0], "stop", e);
    }
    if (!json_is_array(s)) return BADF("stop", "'stop' must be a string or an array of strings");
    if (json_array_size(s) > SD_API_MAX_STOP) return BADF("stop", "'stop' accepts at most %d strings", SD_API_MAX_STOP);
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v)
    {
        if (!json_is_string(v)) return BADF("stop", "'stop' must be a string or an array of strings");
        if (json_string_length(v) == 0) continue;
        if (json_string_length(v) > SD_API_MAX_STOP_LEN)
            return BADF("stop", "'stop' strings are limited to %d bytes", SD_API_MAX_STOP_LEN);
        sd_status st = dup_str(json_string_value(v), &r->stop[r->n_stop], "stop", e);
        if (st != SD_OK) return st;
        r->n_stop++;
    }
    return SD_OK;
}

static sd_status parse_stop_ids(json_t *o, sd_api_req *r, sd_api_err *e)
{
    json_t *s = field(o, "stop_token_ids");
    if (!s) return SD_OK;
    if (!json_is_array(s) || json_array_size(s) > SD_API_MAX_STOP)
        return BADF("stop_token_ids", "'stop_token_ids' must be an array of at most %d token ids", SD_API_MAX_STOP);
    size_t i;
    json_t *v;
    json_array_foreach(s, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return BADF("stop_token_ids", "'stop_token_ids' must hold non-negative integers");
        r->stop_ids[r->n_stop_ids++] = (int32_t)json_integer_value(v);
    }
    return SD_OK;
}

static sd_status parse_spec(json_t *o, sd_api_req *r, sd_api_err *e)
{
    static const char *const modes[] = {"auto", "greedy", "match", "rejection"};
    json_t *s = field(o, "speculative");
    if (!s) return SD_OK;
    if (json_is_boolean(s)) {
        r->spec_enabled = json_is_true(s);
        return SD_OK;
    }
    if (!json_is_object(s)) return BADF("speculative", "'speculative' must be an object or a boolean");
    json_t *en = field(s, "enabled");
    if (en && !json_is_boolean(en)) return BADF("speculative.enabled", "'speculative.enabled' must be a boolean");
    if (en) r->spec_enabled = json_is_true(en);
    long long k = 0;
    bool given = false;
    sd_status st = get_int(s, "num_draft", 0, SD_API_MAX_NUM_DRAFT, &k, &given, e);
    if (st != SD_OK) {
        snprintf(e->param, sizeof e->param, "speculative.num_draft");
        return st;
    }
    if (given) r->num_draft = (unsigned)k;
    json_t *pv = field(s, "provenance");
    if (pv && !json_is_boolean(pv)) return BADF("speculative.provenance", "'speculative.provenance' must be a boolean");
    r->provenance = json_is_true(pv);
    json_t *v = field(s, "verify");
    if (!v) return SD_OK;
    for (int i = 0; json_is_string(v) && i < 4; i++)
        if (!strcmp(json_string_value(v), modes[i])) {
            r->verify = (sd_api_verify)i;
            return SD_OK;
        }
    return BADF("speculative.verify", "'speculative.verify' must be one of auto, greedy, match, rejection");
}

static sd_status parse_stream(json_t *o, sd_api_req *r, sd_api_err *e)
{
    sd_status st = get_bool(o, "stream", &r->stream, e);
    json_t *so = field(o, "stream_options");
    if (st != SD_OK || !so) return st;
    if (!json_is_object(so)) return BADF("stream_options", "'stream_options' must be an object");
    if (!r->stream) return BADF("stream_options", "'stream_options' is only allowed when 'stream' is true");
    st = get_bool(so, "include_usage", &r->include_usage, e);
    if (st != SD_OK) snprintf(e->param, sizeof e->param, "stream_options.include_usage");
    return st;
}

/* Log-probabilities. Completions: "logprobs": N alternatives (0..20).
 * Chat: "logprobs": true, with "top_logprobs": N (0..20). */
static sd_status parse_logprobs(json_t *o, sd_api_req *r, sd_api_err *e)
{
    long long n = 0;
    bool given = false;
    json_t *lp = field(o, "logprobs");
    if (r->kind == SD_API_COMPLETION) {
        if (json_is_boolean(lp))
            return BADF("logprobs",
                        "'logprobs' on /v1/completions is the number of alternatives per token "
                        "(0..%d), not a boolean",
                        SD_API_MAX_LOGPROBS);
        sd_status st = get_int(o, "logprobs", 0, SD_API_MAX_LOGPROBS, &n, &given, e);
        r->logprobs = given;
        r->top_logprobs = (int)n;
        return st;
    }
    sd_status st = get_bool(o, "logprobs", &r->logprobs, e);
    if (st == SD_OK) st = get_int(o, "top_logprobs", 0, SD_API_MAX_LOGPROBS, &n, &given, e);
    if (st == SD_OK && given && n > 0 && !r->logprobs)
        return BADF("top_logprobs", "'top_logprobs' needs 'logprobs' set to true");
    r->top_logprobs = (int)n;
    return st;
}

/* n, best_of, echo (taken on completions), and the features of the OpenAI API specd does not
 * implement: refused, not ignored. */
static sd_status parse_unsupported(json_t *o, sd_api_req *r, sd_api_err *e)
{
    long long n = 1, best_of = 1;
    bool given = false;
    sd_status st = get_int(o, "n", 1, SD_API_MAX_N, &n, NULL, e);
    if (st == SD_OK) st = get_int(o, "best_of", 1, SD_API_MAX_N, &best_of, &given, e);
    if (st != SD_OK) return st;
    r->n = (unsigned)n;
    r->best_of = given ? (unsigned)best_of : r->n;
    if (given && r->kind == SD_API_CHAT && best_of != 1)
        return BADF("best_of", "'best_of' is supported on /v1/completions only");
    if (r->best_of < r->n) return BADF("best_of", "'best_of' (%u) must be at least 'n' (%u)", r->best_of, r->n);
    if (r->stream && r->best_of != r->n)
        return BADF("best_of", "'best_of' other than 'n' cannot be streamed: set 'stream' to false");
    if (st == SD_OK) st = get_bool(o, "echo", &r->echo, e);
    if (st == SD_OK && r->echo && r->kind == SD_API_CHAT)
        return BADF("echo", "'echo' is supported on /v1/completions only");
    if (st != SD_OK) return st;
    /* what is not supported: a client relying on it must not get plain text back */
    json_t *functions = field(o, "functions");
    if (functions && !(json_is_array(functions) && json_array_size(functions) == 0))
        return BADF("functions", "'functions' (deprecated) is not supported: use 'tools'");
    json_t *fc = field(o, "function_call");
    if (fc &&
        !(json_is_string(fc) && (!strcmp(json_string_value(fc), "none") || !strcmp(json_string_value(fc), "auto"))))
        return BADF("function_call", "'function_call' (deprecated) may only be \"none\" or \"auto\": use 'tools'");
    if (field(o, "guided_grammar"))
        return BADF("guided_grammar", "'guided_grammar' is not supported: output is constrained by a JSON schema, "
                                      "a regular expression or a list of choices");
    /* which library does it: specd has its own; vLLM's option "NAME:disable-any-whitespace" is honoured */
    json_t *backend = field(o, "guided_decoding_backend");
    if (backend && !json_is_string(backend))
        return BADF("guided_decoding_backend", "'guided_decoding_backend' "
                                               "must be a string");
    if (backend && strstr(json_string_value(backend), "disable-any-whitespace")) r->sampling.json_compact = true;
    return SD_OK;
}

/* A JSON schema (an object, or its text) for the request's output: compiled
 * here to refuse what the verifier would, then carried as compact text. */
static sd_status set_schema(json_t *schema, const char *param, sd_api_req *r, sd_api_err *e)
{
    json_t *parsed = json_is_string(schema) ? json_loads(json_string_value(schema), JSON_DECODE_ANY, NULL) : NULL;
    if (json_is_string(schema) && !parsed) return BADF(param, "'%s' is not JSON", param);
    if (parsed) schema = parsed;
    char msg[400];
    sd_json_schema *c;
    sd_status st = sd_json_schema_compile(schema, &c, msg, sizeof msg);
    sd_json_schema_free(c);
    r->json_schema = st == SD_OK ? json_dumps(schema, JSON_COMPACT | JSON_ENCODE_ANY) : NULL;
    json_decref(parsed);
    if (st != SD_OK) return BADF(param, "'%s': %s", param, msg);
    if (!r->json_schema) return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (strlen(r->json_schema) > SD_MAX_JSON_SCHEMA)
        return BADF(param, "'%s' is longer than %d bytes written compactly", param, SD_MAX_JSON_SCHEMA);
    r->sampling.json_schema = r->json_schema;
    return SD_OK;
}

/* A regular expression for the request's output: compiled here to refuse
 * what the verifier would (regex_mask.h). */
static sd_status set_regex(json_t *re, const char *param, sd_api_req *r, sd_api_err *e)
{
    if (!json_is_string(re)) return BADF(param, "'%s' must be a string (a regular expression)", param);
    char msg[400];
    sd_regex *c;
    sd_status st = sd_regex_compile(json_string_value(re), &c, msg, sizeof msg);
    sd_regex_free(c);
    if (st != SD_OK) return BADF(param, "'%s': %s", param, msg);
    return dup_str(json_string_value(re), &r->regex, param, e) == SD_OK ? (r->sampling.regex = r->regex, SD_OK)
                                                                        : SD_ERR_ARG;
}

/* choice: the output is exactly one of the strings (a regular expression of
 * them, every character literal). */
static sd_status set_choice(json_t *ch, const char *param, sd_api_req *r, sd_api_err *e)
{
    size_t n = json_is_array(ch) ? json_array_size(ch) : 0, i;
    if (n == 0 || n > SD_API_MAX_CHOICES)
        return BADF(param, "'%s' must be an array of 1 to %d strings", param, SD_API_MAX_CHOICES);
    const char *texts[SD_API_MAX_CHOICES];
    size_t lens[SD_API_MAX_CHOICES];
    json_t *c;
    json_array_foreach(ch, i, c)
    {
        if (!json_is_string(c)) return BADF(param, "'%s[%zu]' must be a string", param, i);
        texts[i] = json_string_value(c);
        lens[i] = json_string_length(c);
    }
    char msg[200];
    char *pattern = sd_regex_of_choices(texts, lens, n, msg, sizeof msg);
    if (!pattern) return BADF(param, "'%s': %s", param, msg);
    json_t *s = json_string(pattern);
    free(pattern);
    sd_status st = s ? set_regex(s, param, r, e) : sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    json_decref(s);
    return st;
}

/* vLLM's structured_outputs: one of json, json_object (true), regex,
 * choice. */
static sd_status set_structured(json_t *so, sd_api_req *r, sd_api_err *e)
{
    static const char *const keys[] = {"json", "json_object", "regex", "choice"};
    const char *key = NULL;
    int given = 0;
    for (size_t i = 0; json_is_object(so) && i < sizeof keys / sizeof *keys; i++)
        if (json_object_get(so, keys[i])) key = keys[i], given++;
    json_t *ws = json_is_object(so) ? json_object_get(so, "disable_any_whitespace") : NULL;
    if (ws && !json_is_boolean(ws))
        return BADF("structured_outputs", "'structured_outputs.disable_any_whitespace' must be a boolean");
    if (json_is_true(ws)) r->sampling.json_compact = true;
    if (given == 0 && ws && json_object_size(so) == 1) return SD_OK; /* the option alone: JSON given elsewhere */
    if (!json_is_object(so) || given != 1 || json_object_size(so) != 1 + (ws != NULL))
        return BADF("structured_outputs",
                    "'structured_outputs' must hold one of 'json' (a schema), 'json_object' "
                    "(true), 'regex' and 'choice' (and 'disable_any_whitespace'): grammar and structural tags are "
                    "not supported");
    json_t *v = json_object_get(so, key);
    if (!strcmp(key, "json")) return set_schema(v, "structured_outputs", r, e);
    if (!strcmp(key, "regex")) return set_regex(v, "structured_outputs", r, e);
    if (!strcmp(key, "choice")) return set_choice(v, "structured_outputs", r, e);
    if (!json_is_true(v)) return BADF("structured_outputs", "'structured_outputs.json_object' must be true");
    r->sampling.json_object = true;
    return SD_OK;
}

/* Output by a format: response_format (OpenAI), or vLLM's
 * structured_outputs / guided_json / guided_regex / guided_choice; at most
 * one of them. */
static sd_status parse_response_format(json_t *o, sd_api_req *r, sd_api_err *e)
{
    json_t *rf = field(o, "response_format"), *so = field(o, "structured_outputs"), *gj = field(o, "guided_json");
    json_t *gr = field(o, "guided_regex"), *gc = field(o, "guided_choice");
    /* structured_outputs holding only disable_any_whitespace is an option of the others, not a format */
    bool so_option = json_is_object(so) && json_object_size(so) == 1 && json_object_get(so, "disable_any_whitespace");
    if ((rf != NULL) + (so && !so_option) + (gj != NULL) + (gr != NULL) + (gc != NULL) > 1)
        return BADF(rf   ? "response_format"
                    : so ? "structured_outputs"
                         : "guided_json",
                    "give one of "
                    "'response_format', 'structured_outputs', 'guided_json', 'guided_regex' and 'guided_choice'");
    sd_status st = so ? set_structured(so, r, e) : SD_OK;
    if (st != SD_OK || (so && !so_option)) return st;
    if (gj) return set_schema(gj, "guided_json", r, e);
    if (gr) return set_regex(gr, "guided_regex", r, e);
    if (gc) return set_choice(gc, "guided_choice", r, e);
    json_t *rft = json_is_object(rf) ? json_object_get(rf, "type") : NULL;
    const char *type = json_is_string(rft) ? json_string_value(rft) : "";
    if (!rf || !strcmp(type, "text")) return SD_OK;
    if (!strcmp(type, "json_object")) return r->sampling.json_object = true, SD_OK;
    if (strcmp(type, "json_schema"))
        return BADF("response_format", "'response_format.type' must be \"text\", \"json_object\" or "
                                       "\"json_schema\"");
    json_t *js = json_object_get(rf, "json_schema");
    json_t *name = json_object_get(js, "name"), *schema = json_object_get(js, "schema");
    if (!json_is_object(js) || !schema || (name && !json_is_string(name)))
        return BADF("response_format", "'response_format.json_schema' must be an object with the schema in "
                                       "'schema' (and a string 'name')");
    return set_schema(schema, "response_format", r, e);
}

static sd_status parse_sampling(json_t *o, sd_api_req *r, sd_api_err *e)
{
    sd_sampling *s = &r->sampling;
    long long k = 0, seed = 0;
    sd_status st = get_num(o, "temperature", 0.0, 2.0, &s->temperature, e);
    if (st == SD_OK) st = get_num(o, "top_p", 0.0, 1.0, &s->top_p, e);
    if (st == SD_OK && s->top_p <= 0.0f) return BADF("top_p", "'top_p' must be in (0, 1], got %g", s->top_p);
    if (st == SD_OK) st = get_int(o, "top_k", -1, 1 << 30, &k, NULL, e);
    if (st == SD_OK) s->top_k = k < 0 ? 0 : (int)k;
    if (st == SD_OK) st = get_num(o, "min_p", 0.0, 1.0, &s->min_p, e);
    if (st == SD_OK) st = get_num(o, "presence_penalty", -2.0, 2.0, &s->presence_penalty, e);
    if (st == SD_OK) st = get_num(o, "frequency_penalty", -2.0, 2.0, &s->frequency_penalty, e);
    if (st == SD_OK) st = get_num(o, "repetition_penalty", 1e-6, 100.0, &s->repetition_penalty, e);
    if (st == SD_OK) st = get_int(o, "seed", INT64_MIN, INT64_MAX, &seed, &r->seed_set, e);
    if (st == SD_OK) s->seed = (uint64_t)seed;
    if (st != SD_OK) return st;
    char msg[256] = "";
    if (sd_sampling_validate(s, msg, sizeof msg) != SD_OK) {
        static const char *const names[] = {
            "temperature",       "top_k", "top_p", "min_p", "repetition_penalty", "presence_penalty",
            "frequency_penalty", "seed"};
        const char *param = NULL;
        for (size_t i = 0; i < sizeof names / sizeof *names && !param; i++)
            if (strstr(msg, names[i])) param = names[i];
        return BADF(param, "%s", msg);
    }
    return SD_OK;
}

/* logit_bias: {"token id": bias in [-100, 100]} (OpenAI; keys decimal). */
static sd_status parse_logit_bias(json_t *o, sd_api_req *r, sd_api_err *e)
{
    json_t *b = field(o, "logit_bias");
    if (!b) return SD_OK;
    if (!json_is_object(b)) return BADF("logit_bias", "'logit_bias' must be an object mapping token ids to biases");
    size_t n = json_object_size(b);
    if (n > SD_MAX_LOGIT_BIAS)
        return BADF("logit_bias", "'logit_bias' has %zu entries (at most %d)", n, SD_MAX_LOGIT_BIAS);
    if (n == 0) return SD_OK;
    r->bias_ids = malloc(n * sizeof *r->bias_ids);
    r->bias_values = malloc(n * sizeof *r->bias_values);
    if (!r->bias_ids || !r->bias_values) return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    const char *key;
    json_t *v;
    size_t i = 0;
    json_object_foreach(b, key, v)
    {
        char *end = NULL;
        errno = 0;
        long long id = key[0] >= '0' && key[0] <= '9' ? strtoll(key, &end, 10) : -1;
        if (id < 0 || errno || !end || *end || id > INT32_MAX)
            return BADF("logit_bias", "'logit_bias' keys must be token ids (non-negative integers), got \"%.40s\"",
                        key);
        if (!json_is_number(v) || !(json_number_value(v) >= -100.0 && json_number_value(v) <= 100.0))
            return BADF("logit_bias", "'logit_bias' values must be numbers between -100 and 100 (token %lld)", id);
        r->bias_ids[i] = (int32_t)id;
        r->bias_values[i++] = (float)json_number_value(v);
    }
    r->sampling.bias_ids = r->bias_ids;
    r->sampling.bias_values = r->bias_values;
    r->sampling.n_bias = (uint32_t)n;
    return SD_OK;
}

/* allowed_token_ids (vLLM): a non-empty array of token ids. */
static sd_status parse_allowed(json_t *o, sd_api_req *r, sd_api_err *e)
{
    json_t *a = field(o, "allowed_token_ids");
    if (!a) return SD_OK;
    size_t n = json_is_array(a) ? json_array_size(a) : 0;
    if (n == 0 || n > SD_API_MAX_ALLOWED)
        return BADF("allowed_token_ids", "'allowed_token_ids' must be a non-empty array of at most %d token ids",
                    SD_API_MAX_ALLOWED);
    r->allowed = malloc(n * sizeof *r->allowed);
    if (!r->allowed) return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    size_t i;
    json_t *v;
    json_array_foreach(a, i, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX)
            return BADF("allowed_token_ids", "'allowed_token_ids' must hold non-negative integers");
        r->allowed[i] = (int32_t)json_integer_value(v);
    }
    r->sampling.allowed = r->allowed;
    r->sampling.n_allowed = (uint32_t)n;
    return SD_OK;
}

/* A tool's parameters schema (absent: any object); new reference. */
static json_t *params_of(json_t *tool)
{
    json_t *p = json_object_get(json_object_get(tool, "function"), "parameters");
    return p ? json_incref(p) : json_pack("{s:s}", "type", "object");
}

static const char *tool_name(json_t *tool)
{
    return json_string_value(json_object_get(json_object_get(tool, "function"), "name"));
}

/* tool_choice naming a function: the output is its arguments, by its
 * parameters schema. */
static sd_status force_named(json_t *tools, const char *name, sd_api_req *r, sd_api_err *e)
{
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        if (strcmp(tool_name(t), name)) continue;
        json_t *p = params_of(t);
        sd_status st = set_schema(p, "tools", r, e);
        json_decref(p);
        r->tools_forced = st == SD_OK;
        return st == SD_OK ? dup_str(name, &r->tool_name, "tool_choice", e) : st;
    }
    return BADF("tool_choice", "'tool_choice' names the function '%s', which is not among 'tools'", name);
}

/* tool_choice "required": the output is a JSON array of {"name",
 * "parameters"} calls (one at most with parallel_tool_calls false), each by
 * its tool's schema (the name picks it: a discriminated union). */
static sd_status force_required(json_t *o, json_t *tools, sd_api_req *r, sd_api_err *e)
{
    json_t *alts = json_array(), *t;
    size_t i;
    json_array_foreach(tools, i, t) json_array_append_new(
        alts, json_pack("{s:s, s:{s:{s:s}, s:o}, s:[s, s]}", "type", "object", "properties", "name", "const",
                        tool_name(t), "parameters", params_of(t), "required", "name", "parameters"));
    json_t *schema = json_pack("{s:s, s:i, s:{s:o}}", "type", "array", "minItems", 1, "items", "anyOf", alts);
    if (json_is_false(field(o, "parallel_tool_calls"))) json_object_set_new(schema, "maxItems", json_integer(1));
    sd_status st = set_schema(schema, "tools", r, e);
    json_decref(schema);
    r->tools_forced = st == SD_OK;
    return st;
}

/* tools (chat) and tool_choice: "auto" (the default), "none" (the tools are
 * then left out of the prompt), "required" or {"type": "function",
 * "function": {"name"}} (forced: the output is JSON by a schema of the
 * tools, after response_format). Each tool {"type": "function", "function":
 * {"name": ...}}; kept whole for the chat template. */
static sd_status parse_tools(json_t *o, sd_api_req *r, sd_api_err *e)
{
    json_t *tools = field(o, "tools"), *tc = field(o, "tool_choice");
    const char *choice = json_is_string(tc) ? json_string_value(tc) : NULL;
    json_t *fn = json_is_object(tc) ? json_object_get(tc, "function") : NULL, *named = json_object_get(fn, "name");
    bool named_ok = json_is_string(named) && json_is_string(json_object_get(tc, "type")) &&
                    !strcmp(json_string_value(json_object_get(tc, "type")), "function");
    bool known = choice && (!strcmp(choice, "none") || !strcmp(choice, "auto") || !strcmp(choice, "required"));
    if (tc && !named_ok && !known)
        return BADF("tool_choice", "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", "
                                   "\"function\": {\"name\": ...}}");
    bool forced = named_ok || (choice && !strcmp(choice, "required"));
    if (!tools || (json_is_array(tools) && json_array_size(tools) == 0))
        return forced ? BADF("tool_choice", "this 'tool_choice' needs 'tools'") : SD_OK;
    if (!json_is_array(tools)) return BADF("tools", "'tools' must be an array of {\"type\": \"function\", ...}");
    if (r->kind != SD_API_CHAT) return BADF("tools", "'tools' is supported on /v1/chat/completions only");
    size_t i;
    json_t *t;
    json_array_foreach(tools, i, t)
    {
        json_t *f = json_object_get(t, "function"), *name = json_object_get(f, "name");
        if (!json_is_object(t) || !json_is_string(json_object_get(t, "type")) ||
            strcmp(json_string_value(json_object_get(t, "type")), "function") || !json_is_object(f) ||
            !json_is_string(name) || json_string_length(name) == 0)
            return BADF("tools", "'tools[%zu]' must be {\"type\": \"function\", \"function\": {\"name\": ...}}", i);
    }
    if (choice && !strcmp(choice, "none")) return SD_OK;
    r->tools = json_incref(tools);
    if (!forced) return SD_OK;
    if (r->sampling.json_object || r->json_schema || r->regex)
        return BADF("tool_choice",
                    "a forced 'tool_choice' (required, or a named function) constrains the output "
                    "itself: it cannot come with JSON or regex output ('response_format', 'structured_outputs')");
    return named_ok ? force_named(tools, json_string_value(named), r, e) : force_required(o, tools, r, e);
}

/* The logits processors: logit_bias, allowed_token_ids, min_tokens (<=
 * max_tokens when that is given). */
static sd_status parse_processors(json_t *o, sd_api_req *r, sd_api_err *e)
{
    long long mt = 0;
    sd_status st = parse_logit_bias(o, r, e);
    if (st == SD_OK) st = parse_allowed(o, r, e);
    if (st == SD_OK) st = get_int(o, "min_tokens", 0, INT32_MAX, &mt, NULL, e);
    if (st == SD_OK && r->max_tokens > 0 && mt > r->max_tokens)
        return BADF("min_tokens", "'min_tokens' (%lld) must not exceed max_tokens (%d)", mt, r->max_tokens);
    r->sampling.min_tokens = (uint32_t)mt;
    return st;
}

static sd_status parse_fields(json_t *o, sd_api_kind kind, sd_api_req *r, sd_api_err *e)
{
    json_t *model = field(o, "model");
    if (model && !json_is_string(model)) return BADF("model", "'model' must be a string");
    sd_status st = model ? dup_str(json_string_value(model), &r->model, "model", e) : SD_OK;
    if (st == SD_OK) st = kind == SD_API_CHAT ? parse_messages(o, r, e) : parse_prompt(o, r, e);
    long long mt = -1;
    if (st == SD_OK) st = get_int(o, "max_tokens", 1, INT32_MAX, &mt, NULL, e);
    if (st == SD_OK && mt < 0) st = get_int(o, "max_completion_tokens", 1, INT32_MAX, &mt, NULL, e);
    r->max_tokens = (int)mt;
    if (st == SD_OK) st = parse_sampling(o, r, e);
    if (st == SD_OK) st = parse_processors(o, r, e);
    if (st == SD_OK) st = parse_stop(o, r, e);
    if (st == SD_OK) st = parse_stop_ids(o, r, e);
    if (st == SD_OK) st = parse_stream(o, r, e);
    if (st == SD_OK) st = get_bool(o, "ignore_eos", &r->ignore_eos, e);
    if (st == SD_OK) st = parse_spec(o, r, e);
    if (st == SD_OK) st = parse_unsupported(o, r, e);
    if (st == SD_OK) st = parse_response_format(o, r, e);
    if (st == SD_OK) st = parse_tools(o, r, e);
    if (st == SD_OK && r->sampling.json_compact && !r->sampling.json_object && !r->json_schema)
        st = BADF("structured_outputs", "'disable_any_whitespace' applies to JSON output: give a JSON schema or "
                                        "json_object");
    if (st == SD_OK) st = parse_logprobs(o, r, e);
    return st;
}

sd_status sd_api_parse(sd_api_kind kind, const char *body, size_t len, sd_api_req *r, sd_api_err *e)
{
    memset(r, 0, sizeof *r);
    r->kind = kind;
    r->max_tokens = -1;
    r->sampling = sd_sampling_default();
    r->sampling.temperature = 1.0f;
    r->spec_enabled = true;
    r->n = r->best_of = 1;
    json_error_t jerr;
    json_t *o = json_loadb(body ? body : "", len, JSON_REJECT_DUPLICATES, &jerr);
    if (!o)
        return BADF(NULL, "We could not parse the JSON body of your request: %s (line %d, column %d)", jerr.text,
                    jerr.line, jerr.column);
    sd_status st =
        json_is_object(o) ? parse_fields(o, kind, r, e) : BADF(NULL, "The request body must be a JSON object");
    json_decref(o);
    if (st != SD_OK) sd_api_req_clear(r);
    return st;
}

void sd_api_req_clear(sd_api_req *r)
{
    free(r->model);
    free(r->prompt);
    free(r->prompt_ids);
    for (size_t i = 0; i < r->n_messages; i++) {
        free((char *)r->messages[i].role);
        free((char *)r->messages[i].content);
        json_decref(r->messages[i].fields);
    }
    free(r->messages);
    for (size_t i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->bias_ids);
    free(r->bias_values);
    free(r->allowed);
    free(r->json_schema);
    free(r->regex);
    free(r->tool_name);
    json_decref(r->tools);
    sd_api_kind kind = r->kind;
    memset(r, 0, sizeof *r);
    r->kind = kind;
}

/* ------------------------------------------------------------ responses */

/* A JSON string of len bytes; the decoder only emits valid UTF-8, anything
 * else would be a bug upstream and is replaced rather than sent broken. */
static json_t *text_json(const char *text, size_t len)
{
    json_t *t = json_stringn(text ? text : "", text ? len : 0);
    return t ? t : json_string("\xef\xbf\xbd");
}

static json_t *str_or_null(const char *s) { return s && s[0] ? json_string(s) : json_null(); }

char *sd_api_error_json(const sd_api_err *e)
{
    json_t *o = json_pack("{s:{s:s, s:s, s:o, s:o}}", "error", "message", e->message, "type", e->type, "param",
                          str_or_null(e->param), "code", str_or_null(e->code));
    char *s = o ? json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8)) : NULL;
    json_decref(o);
    return s;
}

json_t *sd_api_spec_json(const sd_api_spec *s)
{
    sd_api_spec z = {0};
    if (!s) s = &z;
    json_t *pos = json_array();
    for (size_t i = 0; i < s->n_accepted_at; i++)
        json_array_append_new(pos, json_integer((json_int_t)s->accepted_at[i]));
    double mean = s->steps ? (double)s->accepted_tokens / (double)s->steps : 0.0;
    double rate = s->draft_tokens ? (double)s->accepted_tokens / (double)s->draft_tokens : 0.0;
    json_t *o = json_pack("{s:I, s:I, s:I, s:f, s:f, s:o}", "steps", (json_int_t)s->steps, "draft_tokens",
                          (json_int_t)s->draft_tokens, "accepted_tokens", (json_int_t)s->accepted_tokens,
                          "mean_accepted_per_step", mean, "acceptance_rate", rate, "accepted_per_position", pos);
    const sd_pipe_stats *d = s->drafting;
    if (o && d) {
        double hit = d->spec_steps ? (double)d->spans_ready / (double)d->spec_steps : 0.0;
        double hidden = sd_pipe_stats_hidden(d);
        json_object_set_new(o, "drafting",
                            json_pack("{s:I, s:I, s:f, s:f, s:f, s:f, s:f, s:f, s:I, s:I}", "spans_used",
                                      (json_int_t)d->spans_used, "spans_stale", (json_int_t)d->spans_stale,
                                      "pre_draft_hit_rate", hit, "wait_ms", d->wait_us / 1e3, "draft_ms",
                                      d->draft_us / 1e3, "step_ms", d->step_us / 1e3, "verify_ms", d->verify_us / 1e3,
                                      "draft_time_hidden", hidden, "fallback_used", (json_int_t)d->fallback_used,
                                      "fallback_accepted", (json_int_t)d->fallback_accepted));
    }
    const sd_api_adapt *a = s->adapt;
    if (o && a && a->k_steps > 0) {
        json_t *acc = json_array();
        for (size_t i = 0; i < a->n_accept && acc; i++) json_array_append_new(acc, json_real(a->accept[i]));
        json_object_set_new(o, "draft_length",
                            json_pack("{s:f, s:I, s:I, s:o*}", "mean", (double)a->k_sum / (double)a->k_steps,
                                      "decode_steps", (json_int_t)a->k_steps, "steps_without_drafts",
                                      (json_int_t)a->k_zero, "acceptance_estimate", acc));
    }
    return o;
}

static json_t *usage_json(const sd_api_result *res)
{
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", (int)res->prompt_tokens, "completion_tokens",
                     (int)res->completion_tokens, "total_tokens", (int)(res->prompt_tokens + res->completion_tokens),
                     "prompt_tokens_details", "cached_tokens", (int)res->cached_tokens);
}

static json_t *head_json(const sd_api_result *res, const char *object)
{
    return json_pack("{s:s, s:s, s:I, s:s}", "id", res->id, "object", object, "created", (json_int_t)res->created,
                     "model", res->model);
}

/* choices[0] without its text: index, logprobs, finish_reason. */
static json_t *choice_json(unsigned index, json_t *logprobs, const char *finish)
{
    json_t *lp = logprobs ? json_incref(logprobs) : json_null();
    return json_pack("{s:i, s:o, s:o}", "index", (int)index, "logprobs", lp, "finish_reason", str_or_null(finish));
}

char *sd_api_response_json(sd_api_kind kind, const sd_api_result *res, const sd_api_choice *ch, size_t n)
{
    bool chat = kind == SD_API_CHAT;
    json_t *o = head_json(res, chat ? "chat.completion" : "text_completion");
    json_t *choices = json_array();
    for (size_t i = 0; i < n; i++) {
        json_t *choice = choice_json((unsigned)i, ch[i].logprobs, ch[i].finish);
        json_t *t = text_json(ch[i].text, ch[i].len);
        if (chat && ch[i].tool_calls) {
            json_decref(t);
            t = ch[i].len ? text_json(ch[i].text, ch[i].len) : json_null();
            json_object_set_new(
                choice, "message",
                json_pack("{s:s, s:o, s:O}", "role", "assistant", "content", t, "tool_calls", ch[i].tool_calls));
        } else if (chat) {
            json_object_set_new(choice, "message", json_pack("{s:s, s:o}", "role", "assistant", "content", t));
        } else {
            json_object_set_new(choice, "text", t);
        }
        if (ch[i].provenance) json_object_set(choice, "provenance", ch[i].provenance);
        json_array_append_new(choices, choice);
    }
    json_object_set_new(o, "choices", choices);
    json_object_set_new(o, "usage", usage_json(res));
    json_object_set_new(o, "speculative", sd_api_spec_json(res->spec));
    char *s = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8));
    json_decref(o);
    return s;
}

/* Tool calls as a streamed delta carries them: each with its "index". */
static json_t *indexed_calls(json_t *calls)
{
    json_t *a = json_array();
    size_t i;
    json_t *c;
    json_array_foreach(calls, i, c)
    {
        json_t *d = json_deep_copy(c);
        json_object_set_new(d, "index", json_integer((json_int_t)i));
        json_array_append_new(a, d);
    }
    return a;
}

/* Wraps a JSON object as "data: …\n\n" and releases it. */
static char *sse_wrap(json_t *o)
{
    char *j = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8));
    json_decref(o);
    if (!j) return NULL;
    size_t n = strlen(j) + 9;
    char *s = malloc(n);
    if (s) snprintf(s, n, "data: %s\n\n", j);
    free(j);
    return s;
}

char *sd_api_chunk_sse(sd_api_kind kind, const sd_api_result *res, const char *text, size_t len, bool first,
                       bool with_usage_null)
{
    bool chat = kind == SD_API_CHAT;
    json_t *o = head_json(res, chat ? "chat.completion.chunk" : "text_completion");
    json_t *choice = choice_json(res->index, res->logprobs, res->finish);
    if (chat) {
        json_t *delta = json_object();
        if (first) json_object_set_new(delta, "role", json_string("assistant"));
        if (len || (first && !res->finish)) json_object_set_new(delta, "content", text_json(text, len));
        if (res->tool_calls) json_object_set_new(delta, "tool_calls", indexed_calls(res->tool_calls));
        json_object_set_new(choice, "delta", delta);
    } else {
        json_object_set_new(choice, "text", text_json(text, len));
    }
    if (res->provenance) json_object_set(choice, "provenance", res->provenance);
    json_object_set_new(o, "choices", json_pack("[o]", choice));
    if (res->finish) json_object_set_new(o, "speculative", sd_api_spec_json(res->spec));
    if (with_usage_null) json_object_set_new(o, "usage", json_null());
    return sse_wrap(o);
}

char *sd_api_usage_sse(sd_api_kind kind, const sd_api_result *res)
{
    json_t *o = head_json(res, kind == SD_API_CHAT ? "chat.completion.chunk" : "text_completion");
    json_object_set_new(o, "choices", json_array());
    json_object_set_new(o, "usage", usage_json(res));
    json_object_set_new(o, "speculative", sd_api_spec_json(res->spec));
    return sse_wrap(o);
}
