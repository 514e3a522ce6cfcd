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

const char *sd_chat_family_name(sd_chat_family f)
{
    return (unsigned)f < 4 ? FAMILY_NAMES[f] : "plain";
}

sd_status sd_chat_family_parse(const char *name, sd_chat_family *out)
{
    for (int i = 0; i < 4; i++)
        if (name && !strcmp(name, FAMILY_NAMES[i])) {
            *out = (sd_chat_family)i;
            return SD_OK;
        }
    return SD_ERR_ARG;
}

bool sd_chat_add_special(sd_chat_family f)
{
    return f == SD_CHAT_PLAIN;
}

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
        json_array_foreach(ct, i, v) {
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
    if (sd_tok_token_id(tok, "<|im_start|>") >= 0 && sd_tok_token_id(tok, "<|im_end|>") >= 0)
        return SD_CHAT_CHATML;
    if (sd_tok_token_id(tok, "<|start_header_id|>") >= 0 && sd_tok_token_id(tok, "<|eot_id|>") >= 0)
        return SD_CHAT_LLAMA3;
    if (sd_tok_token_id(tok, "<s>") >= 0 && sd_tok_token_id(tok, "</s>") >= 0 &&
        sd_tok_token_id(tok, "<0x0A>") >= 0)
        return SD_CHAT_LLAMA2;
    return SD_CHAT_PLAIN;
}

static bool role_is(const sd_chat_msg *m, const char *r)
{
    return m->role && !strcmp(m->role, r);
}

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
                             "messages[%zu].role '%s' is not supported by the llama2 chat format",
                             i, msgs[i].role);
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

sd_status sd_chat_render(sd_chat_family f, const sd_chat_msg *msgs, size_t n, char **out,
                         char *err, size_t errlen)
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
