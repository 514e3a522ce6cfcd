/* response.c — OpenAI-style response object reader (see response.h). */
#include "response.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

static size_t str_len(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return json_is_string(v) ? json_string_length(v) : 0;
}

static size_t content_of(json_t *root, bool chat)
{
    json_t *choices = json_object_get(root, "choices");
    size_t i, total = 0;
    json_t *c;
    if (!json_is_array(choices)) return 0;
    json_array_foreach(choices, i, c)
    {
        if (!json_is_object(c)) continue;
        if (!chat) {
            total += str_len(c, "text");
            continue;
        }
        json_t *d = json_object_get(c, "delta");
        if (!json_is_object(d)) d = json_object_get(c, "message");
        if (json_is_object(d)) total += str_len(d, "content") + str_len(d, "reasoning_content");
    }
    return total;
}

static long int_of(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    if (json_is_integer(v)) return (long)json_integer_value(v);
    if (json_is_real(v)) return (long)json_real_value(v);
    return 0;
}

static void read_spec(json_t *spec, sd_resp_info *out)
{
    if (!json_is_object(spec)) return;
    out->has_spec = true;
    out->spec_steps = int_of(spec, "steps");
    out->spec_draft = int_of(spec, "draft_tokens");
    out->spec_accepted = int_of(spec, "accepted_tokens");
    json_t *m = json_object_get(spec, "mean_accepted_per_step");
    if (json_is_number(m)) out->spec_mean = json_number_value(m);
    else if (out->spec_steps > 0) out->spec_mean = (double)out->spec_accepted / (double)out->spec_steps;
    else out->spec_mean = NAN;
}

static void read_error(json_t *e, sd_resp_info *out)
{
    out->is_error = true;
    const char *msg = NULL;
    if (json_is_object(e)) msg = json_string_value(json_object_get(e, "message"));
    else if (json_is_string(e)) msg = json_string_value(e);
    snprintf(out->errmsg, sizeof out->errmsg, "%s", msg ? msg : "error object in response");
}

sd_status sd_resp_parse(const char *json, size_t len, bool chat, sd_resp_info *out, char *err, size_t errlen)
{
    memset(out, 0, sizeof *out);
    out->spec_mean = NAN;
    json_error_t je;
    /* "\u0000" is valid JSON and a sampled token may decode to it: the counts use string lengths */
    json_t *root = json_loadb(json, len, JSON_ALLOW_NUL, &je);
    if (!root) return sd_seterr(err, errlen, SD_ERR_FORMAT, "invalid JSON: %s", je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "response is not a JSON object");
    }
    json_t *e = json_object_get(root, "error");
    if (e && !json_is_null(e)) read_error(e, out);
    out->content_len = content_of(root, chat);
    json_t *usage = json_object_get(root, "usage");
    out->prompt_tokens = out->cached_tokens = -1;
    if (json_is_object(usage)) {
        json_t *pt = json_object_get(usage, "prompt_tokens");
        if (json_is_integer(pt)) out->prompt_tokens = (long)json_integer_value(pt);
        json_t *cached = json_object_get(json_object_get(usage, "prompt_tokens_details"), "cached_tokens");
        if (json_is_integer(cached)) out->cached_tokens = (long)json_integer_value(cached);
        json_t *ct = json_object_get(usage, "completion_tokens");
        if (json_is_integer(ct)) {
            out->has_usage = true;
            out->completion_tokens = (long)json_integer_value(ct);
        }
        read_spec(json_object_get(usage, "speculative"), out);
    }
    read_spec(json_object_get(root, "speculative"), out);
    json_decref(root);
    return SD_OK;
}
