/* chat_template.c — see chat_template.h. Renders into an sd_buf; formats
 * follow the Hugging Face chat_template of each family (Qwen2.5/Qwen3
 * ChatML, Llama-3-Instruct, Llama-2-chat). */
#include "chat_template.h"

#include <ctype.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "strbuf.h"

/* Appends s without leading/trailing ASCII whitespace (Jinja trim, str.strip). */
static void sb_add_trim(sd_buf *b, const char *s)
{
    size_t n = strlen(s), a = 0;
    while (a < n && isspace((unsigned char)s[a])) a++;
    while (n > a && isspace((unsigned char)s[n - 1])) n--;
    sd_buf_add(b, s + a, n - a);
}

static const char *const FAMILY_NAMES[] = {"plain", "chatml", "llama3", "llama2"};

const char *sd_chat_family_name(sd_chat_family f) { return (unsigned)f < 4 ? FAMILY_NAMES[f] : "plain"; }

sd_status sd_chat_family_parse(const char *name, sd_chat_family *out)
{
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, FAMILY_NAMES[i])) {
            *out = (sd_chat_family)i;
            return SD_OK;
        }
    return SD_ERR_ARG;
}

bool sd_chat_add_special(sd_chat_family f) { return f == SD_CHAT_PLAIN; }

/* Family named by a chat_template text, or -1 when it says nothing we know. */
static int family_from_template(const char *t)
{
    if (!t) return -1;
    if (strstr(t, "<|im_start|>")) return SD_CHAT_CHATML;
    if (strstr(t, "<|start_header_id|>")) return SD_CHAT_LLAMA3;
    if (strstr(t, "[INST]")) return SD_CHAT_LLAMA2;
    return -1;
}

static int family_from_config(const char *config_json)
{
    if (!config_json) return -1;
    json_t *root = json_loads(config_json, 0, NULL);
    if (!root) return -1;
    int fam = -1;
    json_t *ct = json_object_get(root, "chat_template");
    if (json_is_string(ct)) {
        fam = family_from_template(json_string_value(ct));
    } else if (json_is_array(ct)) {
        size_t i;
        json_t *v;
        json_array_foreach(ct, i, v)
        {
            const char *name = json_string_value(json_object_get(v, "name"));
            if (name && strcmp(name, "default")) continue;
            fam = family_from_template(json_string_value(json_object_get(v, "template")));
            if (fam >= 0) break;
        }
    }
    json_decref(root);
    return fam;
}

sd_chat_family sd_chat_detect(const sd_tok *tok, const char *config_json)
{
    int fam = family_from_config(config_json);
    if (fam >= 0) return (sd_chat_family)fam;
    if (!tok) return SD_CHAT_PLAIN;
    if (sd_tok_token_id(tok, "<|im_start|>") >= 0 && sd_tok_token_id(tok, "<|im_end|>") >= 0) return SD_CHAT_CHATML;
    if (sd_tok_token_id(tok, "<|start_header_id|>") >= 0 && sd_tok_token_id(tok, "<|eot_id|>") >= 0)
        return SD_CHAT_LLAMA3;
    if (sd_tok_token_id(tok, "<s>") >= 0 && sd_tok_token_id(tok, "</s>") >= 0 && sd_tok_token_id(tok, "<0x0A>") >= 0)
        return SD_CHAT_LLAMA2;
    return SD_CHAT_PLAIN;
}

static bool role_is(const sd_chat_msg *m, const char *r) { return m->role && !strcmp(m->role, r); }

static void render_chatml(sd_buf *b, const sd_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        sd_buf_adds(b, "<|im_start|>");
        sd_buf_adds(b, msgs[i].role);
        sd_buf_adds(b, "\n");
        sd_buf_adds(b, msgs[i].content);
        sd_buf_adds(b, "<|im_end|>\n");
    }
    sd_buf_adds(b, "<|im_start|>assistant\n");
}

static void render_llama3(sd_buf *b, const sd_chat_msg *msgs, size_t n)
{
    sd_buf_adds(b, "<|begin_of_text|>");
    for (size_t i = 0; i < n; i++) {
        sd_buf_adds(b, "<|start_header_id|>");
        sd_buf_adds(b, msgs[i].role);
        sd_buf_adds(b, "<|end_header_id|>\n\n");
        sb_add_trim(b, msgs[i].content);
        sd_buf_adds(b, "<|eot_id|>");
    }
    sd_buf_adds(b, "<|start_header_id|>assistant<|end_header_id|>\n\n");
}

/* Llama 2 chat: the system prompt is folded into the first user turn, each
 * user turn opens with <s>[INST], each assistant turn closes with </s>. */
static sd_status render_llama2(sd_buf *b, const sd_chat_msg *msgs, size_t n, char *err, size_t errlen)
{
    const char *sys = NULL;
    size_t start = 0;
    if (n > 0 && role_is(&msgs[0], "system")) {
        sys = msgs[0].content;
        start = 1;
    }
    if (start == n && sys) {
        sd_buf_adds(b, "<s>[INST] <<SYS>>\n");
        sd_buf_adds(b, sys);
        sd_buf_adds(b, "\n<</SYS>>\n\n [/INST]");
        return SD_OK;
    }
    for (size_t i = start; i < n; i++) {
        if (role_is(&msgs[i], "user")) {
            sd_buf c = {0};
            if (i == start && sys) {
                sd_buf_adds(&c, "<<SYS>>\n");
                sd_buf_adds(&c, sys);
                sd_buf_adds(&c, "\n<</SYS>>\n\n");
            }
            sd_buf_adds(&c, msgs[i].content);
            sd_buf_adds(b, "<s>[INST] ");
            sb_add_trim(b, c.p ? c.p : "");
            sd_buf_adds(b, " [/INST]");
            b->failed |= c.failed;
            sd_buf_free(&c);
        } else if (role_is(&msgs[i], "assistant")) {
            sd_buf_adds(b, " ");
            sb_add_trim(b, msgs[i].content);
            sd_buf_adds(b, " </s>");
        } else {
            return sd_seterr(err, errlen, SD_ERR_ARG,
                             "messages[%zu].role '%s' is not supported by the llama2 chat format", i, msgs[i].role);
        }
    }
    return SD_OK;
}

static void render_plain(sd_buf *b, const sd_chat_msg *msgs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (i) sd_buf_adds(b, "\n\n");
        sd_buf_adds(b, msgs[i].content);
    }
}

sd_status sd_chat_render(sd_chat_family f, const sd_chat_msg *msgs, size_t n, char **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_buf b = {0};
    sd_status st = SD_OK;
    switch (f) {
    case SD_CHAT_CHATML: render_chatml(&b, msgs, n); break;
    case SD_CHAT_LLAMA3: render_llama3(&b, msgs, n); break;
    case SD_CHAT_LLAMA2: st = render_llama2(&b, msgs, n, err, errlen); break;
    default: render_plain(&b, msgs, n); break;
    }
    if (st == SD_OK && !(*out = sd_buf_take(&b)))
        st = sd_seterr(err, errlen, SD_ERR_NOMEM, "chat template: out of memory");
    sd_buf_free(&b);
    return st;
}

/* ---------------------------------------------------------------- templates */

/* A token of tokenizer_config.json: a string or {"content": string}. */
static char *config_token(json_t *cfg, const char *key)
{
    json_t *v = json_object_get(cfg, key);
    if (json_is_object(v)) v = json_object_get(v, "content");
    return strdup(json_is_string(v) ? json_string_value(v) : "");
}

/* The config's template text: a string, or the "default" of a list of
 * {name, template}. */
static const char *config_template(json_t *cfg)
{
    json_t *t = json_object_get(cfg, "chat_template");
    if (json_is_string(t)) return json_string_value(t);
    for (size_t i = 0; json_is_array(t) && i < json_array_size(t); i++) {
        json_t *e = json_array_get(t, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (name && !strcmp(name, "default")) return json_string_value(json_object_get(e, "template"));
    }
    return NULL;
}

static sd_status load_override(sd_chat *c, const char *path, char *err, size_t errlen)
{
    char *src = NULL, perr[400];
    size_t len;
    sd_status st = sd_read_file(path, (size_t)1 << 20, &src, &len, perr, sizeof perr);
    if (st != SD_OK)
        return sd_seterr(err, errlen, st,
                         "--chat-template '%s' is neither a family (chatml, llama3, llama2, plain) "
                         "nor a readable file: %s",
                         path, perr);
    st = sd_jinja_parse(src, &c->tmpl, perr, sizeof perr);
    free(src);
    if (st != SD_OK) return sd_seterr(err, errlen, st, "--chat-template %s: %s", path, perr);
    c->source = strdup(path);
    return SD_OK;
}

sd_status sd_chat_load(sd_chat *c, const sd_tok *tok, const char *config_json, const char *override, char *warn,
                       size_t warnlen, char *err, size_t errlen)
{
    memset(c, 0, sizeof *c);
    if (warn && warnlen) warn[0] = '\0';
    c->family = sd_chat_detect(tok, config_json);
    json_t *cfg = config_json ? json_loads(config_json, 0, NULL) : NULL;
    c->bos = config_token(cfg, "bos_token");
    c->eos = config_token(cfg, "eos_token");
    sd_status st = SD_OK;
    if (override && sd_chat_family_parse(override, &c->family) == SD_OK) {
        /* a family by name: no template */
    } else if (override) {
        st = load_override(c, override, err, errlen);
    } else if (config_template(cfg)) {
        char perr[400];
        if (sd_jinja_parse(config_template(cfg), &c->tmpl, perr, sizeof perr) == SD_OK)
            c->source = strdup("tokenizer_config.json");
        else if (warn)
            snprintf(warn, warnlen, "the checkpoint's chat template is not supported (%s); using the %s format", perr,
                     sd_chat_family_name(c->family));
    }
    json_decref(cfg);
    if (st == SD_OK && (!c->bos || !c->eos)) st = sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    if (st != SD_OK) sd_chat_clear(c);
    return st;
}

void sd_chat_clear(sd_chat *c)
{
    sd_jinja_free(c->tmpl);
    free(c->source);
    free(c->bos);
    free(c->eos);
    memset(c, 0, sizeof *c);
}

sd_status sd_chat_apply(const sd_chat *c, const sd_chat_msg *msgs, size_t n, json_t *tools, char **out,
                        bool *add_special, char *err, size_t errlen)
{
    bool fields = false;
    for (size_t i = 0; i < n; i++) fields |= msgs[i].fields != NULL;
    if (!c->tmpl) {
        if (tools || fields)
            return sd_seterr(err, errlen, SD_ERR_ARG,
                             "tools and tool calls need the checkpoint's Jinja chat "
                             "template; this server renders the built-in %s format, which has none",
                             sd_chat_family_name(c->family));
        *add_special = sd_chat_add_special(c->family);
        return sd_chat_render(c->family, msgs, n, out, err, errlen);
    }
    *add_special = false; /* as apply_chat_template: the template writes the special tokens */
    json_t *m = json_array();
    for (size_t i = 0; m && i < n; i++) {
        json_t *msg = json_pack("{s:s, s:s}", "role", msgs[i].role ? msgs[i].role : "", "content",
                                msgs[i].content ? msgs[i].content : "");
        if (msg && msgs[i].fields) json_object_update(msg, msgs[i].fields);
        json_array_append_new(m, msg);
    }
    json_t *vars = json_pack("{s:o, s:b, s:s, s:s}", "messages", m, "add_generation_prompt", 1, "bos_token", c->bos,
                             "eos_token", c->eos);
    if (!vars) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    if (tools) json_object_set(vars, "tools", tools);
    sd_status st = sd_jinja_render(c->tmpl, vars, out, err, errlen);
    json_decref(vars);
    return st;
}
