/* tool_calls.c — see tool_calls.h. */
#include "tool_calls.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *find(const char *p, size_t n, const char *needle) { return memmem(p, n, needle, strlen(needle)); }

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

static bool blank(const char *p, size_t n)
{
    for (size_t i = 0; i < n; i++)
        if (!is_ws(p[i])) return false;
    return true;
}

/* A tool_call object for a name and its arguments (an object, or JSON text
 * of one); NULL when they are not that. */
static json_t *make_call(json_t *name, json_t *args, const char *id_base, size_t index)
{
    if (!json_is_string(name) || json_string_length(name) == 0) return NULL;
    json_t *parsed = json_is_string(args) ? json_loads(json_string_value(args), 0, NULL) : NULL;
    json_t *obj = json_is_object(args) ? args : json_is_object(parsed) ? parsed : NULL;
    char *text = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    char id[96];
    snprintf(id, sizeof id, "%s-%zu", id_base ? id_base : "call", index);
    json_t *call = text ? json_pack("{s:s, s:s, s:{s:O, s:s}}", "id", id, "type", "function", "function", "name", name,
                                    "arguments", text)
                        : NULL;
    free(text);
    json_decref(parsed);
    return call;
}

/* One block's JSON → a tool_call object; NULL when malformed. */
static json_t *one_call(const char *p, size_t n, const char *id_base, size_t index)
{
    json_t *o = json_loadb(p, n, 0, NULL);
    json_t *call = json_is_object(o)
                       ? make_call(json_object_get(o, "name"), json_object_get(o, "arguments"), id_base, index)
                       : NULL;
    json_decref(o);
    return call;
}

json_t *sd_tool_calls_forced(const char *text, size_t len, const char *name, const char *id_base)
{
    json_t *o = json_loadb(text ? text : "", len, 0, NULL), *calls = NULL;
    if (name && json_is_object(o)) {
        json_t *n = json_string(name), *call = make_call(n, o, id_base, 0);
        calls = call ? json_pack("[o]", call) : NULL;
        json_decref(n);
    } else if (!name && json_is_array(o) && json_array_size(o) > 0) {
        calls = json_array();
        size_t i;
        json_t *c;
        json_array_foreach(o, i, c)
        {
            json_t *call = make_call(json_object_get(c, "name"), json_object_get(c, "parameters"), id_base, i);
            if (!call || json_array_append_new(calls, call)) {
                json_decref(calls);
                calls = NULL;
                break;
            }
        }
    }
    json_decref(o);
    return calls;
}

json_t *sd_tool_calls_parse(const char *text, size_t len, const char *id_base)
{
    const size_t ol = strlen(SD_TOOL_CALL_OPEN), cl = strlen(SD_TOOL_CALL_CLOSE);
    json_t *calls = json_array();
    size_t i = 0;
    while (calls && i < len) {
        const char *at = find(text + i, len - i, SD_TOOL_CALL_OPEN);
        if (!at) {
            if (!blank(text + i, len - i)) break; /* text after the calls: malformed */
            return calls;
        }
        if (!blank(text + i, (size_t)(at - (text + i)))) break;
        size_t start = (size_t)(at - text) + ol;
        const char *end = find(text + start, len - start, SD_TOOL_CALL_CLOSE);
        size_t stop = end ? (size_t)(end - text) : len;
        json_t *call = one_call(text + start, stop - start, id_base, json_array_size(calls));
        if (!call) break;
        json_array_append_new(calls, call);
        i = end ? stop + cl : len;
    }
    if (calls && i >= len && json_array_size(calls) > 0) return calls;
    json_decref(calls);
    return NULL;
}

/* The length of the longest suffix of p[0..n) that is a proper prefix of the marker. */
static size_t marker_tail(const char *p, size_t n)
{
    const size_t ol = strlen(SD_TOOL_CALL_OPEN);
    for (size_t k = ol - 1 < n ? ol - 1 : n; k > 0; k--)
        if (!memcmp(p + n - k, SD_TOOL_CALL_OPEN, k)) return k;
    return 0;
}

static void json_feed(sd_tool_split *s, const char *text, size_t len, sd_buf *content);

void sd_tool_split_feed(sd_tool_split *s, const char *text, size_t len, sd_buf *content)
{
    if (s->fmt == SD_TOOL_FMT_JSON && !s->in_call && !s->forced) {
        json_feed(s, text, len, content);
        return;
    }
    if (s->in_call) {
        sd_buf_add(&s->held, text, len);
        return;
    }
    sd_buf_add(&s->pending, text, len);
    if (!s->pending.p) return; /* nothing yet */
    const char *p = s->pending.p;
    size_t n = s->pending.len;
    const char *at = find(p, n, SD_TOOL_CALL_OPEN);
    if (at) {
        sd_buf_add(content, p, (size_t)(at - p));
        sd_buf_add(&s->held, at, n - (size_t)(at - p));
        s->in_call = true;
        sd_buf_clear(&s->pending);
        return;
    }
    size_t keep = marker_tail(p, n);
    sd_buf_add(content, p, n - keep);
    memmove(s->pending.p, p + n - keep, keep);
    s->pending.len = keep;
    s->pending.p[keep] = '\0';
}

int sd_tool_fmt_parse(const char *name)
{
    if (!name) return -1;
    if (!strcmp(name, "hermes")) return SD_TOOL_FMT_HERMES;
    if (!strcmp(name, "llama3_json") || !strcmp(name, "mistral") || !strcmp(name, "json")) return SD_TOOL_FMT_JSON;
    return -1;
}

/* One call object of the JSON format → a tool_call (index i), or NULL. */
static json_t *json_call(json_t *o, const char *id_base, size_t i)
{
    json_t *args = json_object_get(o, "parameters");
    if (!args) args = json_object_get(o, "arguments");
    return json_is_object(o) ? make_call(json_object_get(o, "name"), args, id_base, i) : NULL;
}

json_t *sd_tool_calls_json(const char *text, size_t len, const char *id_base)
{
    size_t i = 0;
    while (i < len && is_ws(text[i])) i++;
    json_t *calls = json_array();
    if (i < len && text[i] == '[') { /* an array of calls */
        json_t *a = json_loadb(text + i, len - i, 0, NULL), *c;
        size_t k;
        json_array_foreach(a, k, c)
        {
            json_t *call = json_call(c, id_base, k);
            if (!call) break;
            json_array_append_new(calls, call);
        }
        bool ok = json_is_array(a) && json_array_size(a) > 0 && json_array_size(calls) == json_array_size(a);
        json_decref(a);
        if (ok) return calls;
        json_decref(calls);
        return NULL;
    }
    while (i < len && text[i] == '{') { /* objects, separated by ';' */
        json_error_t e;
        json_t *o = json_loadb(text + i, len - i, JSON_DISABLE_EOF_CHECK, &e);
        json_t *call = o ? json_call(o, id_base, json_array_size(calls)) : NULL;
        json_decref(o);
        if (!call) break;
        json_array_append_new(calls, call);
        i += (size_t)e.position;
        while (i < len && (is_ws(text[i]) || text[i] == ';')) i++;
    }
    if (i >= len && json_array_size(calls) > 0) return calls;
    json_decref(calls);
    return NULL;
}

/* The JSON format: the answer is held from its first byte after whitespace
 * when that is '{' or '['; otherwise everything is content. */
static void json_feed(sd_tool_split *s, const char *text, size_t len, sd_buf *content)
{
    if (s->decided) {
        sd_buf_add(content, text, len);
        return;
    }
    sd_buf_add(&s->pending, text, len);
    size_t i = 0;
    while (i < s->pending.len && is_ws(s->pending.p[i])) i++;
    if (i == s->pending.len) return; /* whitespace so far */
    if (s->pending.p[i] == '{' || s->pending.p[i] == '[') {
        sd_buf_add(&s->held, s->pending.p, s->pending.len);
        s->in_call = true;
    } else {
        sd_buf_add(content, s->pending.p, s->pending.len);
        s->decided = true;
    }
    sd_buf_clear(&s->pending);
}

void sd_tool_split_force(sd_tool_split *s, const char *name)
{
    s->forced = s->in_call = true;
    s->name = name;
}

json_t *sd_tool_split_end(sd_tool_split *s, const char *id_base, sd_buf *content)
{
    json_t *calls = !s->in_call                  ? NULL
                    : s->forced                  ? sd_tool_calls_forced(s->held.p, s->held.len, s->name, id_base)
                    : s->fmt == SD_TOOL_FMT_JSON ? sd_tool_calls_json(s->held.p, s->held.len, id_base)
                                                 : sd_tool_calls_parse(s->held.p, s->held.len, id_base);
    if (!calls) {
        if (s->pending.len) sd_buf_add(content, s->pending.p, s->pending.len);
        if (s->held.len) sd_buf_add(content, s->held.p, s->held.len);
    }
    sd_tool_split_free(s);
    return calls;
}

void sd_tool_split_free(sd_tool_split *s)
{
    sd_buf_free(&s->pending);
    sd_buf_free(&s->held);
    s->in_call = s->forced = s->decided = false;
    s->name = NULL;
}
