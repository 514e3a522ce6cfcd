/* logprobs.c — the "logprobs" object of a completion choice (see logprobs.h). */
#include "logprobs.h"

#include <stdlib.h>
#include <string.h>

struct sd_lp {
    const sd_tok *tok;
    sd_api_kind kind;
    int top;
    size_t pending;
    long long offset; /* completions: characters of the token texts so far */
    json_t *content;  /* chat: the entries */
    json_t *tokens, *token_logprobs, *top_logprobs, *text_offset; /* completions */
};

static void reset(sd_lp *a)
{
    json_decref(a->content);
    json_decref(a->tokens);
    json_decref(a->token_logprobs);
    json_decref(a->top_logprobs);
    json_decref(a->text_offset);
    a->content = json_array();
    a->tokens = json_array();
    a->token_logprobs = json_array();
    a->top_logprobs = json_array();
    a->text_offset = json_array();
    a->pending = 0;
}

sd_status sd_lp_new(const sd_tok *tok, sd_api_kind kind, int top, sd_lp **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_lp *a = calloc(1, sizeof *a);
    if (!a) return sd_seterr(err, errlen, SD_ERR_NOMEM, "logprobs: out of memory");
    a->tok = tok;
    a->kind = kind;
    a->top = top;
    reset(a);
    if (!a->content || !a->tokens || !a->token_logprobs || !a->top_logprobs || !a->text_offset) {
        sd_lp_free(a);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "logprobs: out of memory");
    }
    *out = a;
    return SD_OK;
}

void sd_lp_free(sd_lp *a)
{
    if (!a) return;
    json_decref(a->content);
    json_decref(a->tokens);
    json_decref(a->token_logprobs);
    json_decref(a->top_logprobs);
    json_decref(a->text_offset);
    free(a);
}

static json_t *lp_num(float x) { return json_real(x > -9999.0f ? (double)x : -9999.0); }

/* The text of one token (malloc'd, valid UTF-8); "" when it cannot be decoded. */
static char *token_text(const sd_tok *tok, int32_t id)
{
    char *t = NULL, err[128];
    size_t n = 0;
    if (sd_tok_decode(tok, &id, 1, false, &t, &n, err, sizeof err) != SD_OK || !t) return strdup("");
    return t;
}

static json_t *bytes_json(const char *t)
{
    json_t *b = json_array();
    for (const unsigned char *p = (const unsigned char *)t; *p && b; p++) json_array_append_new(b, json_integer(*p));
    return b;
}

/* Characters (code points) of a valid UTF-8 string. */
static long long chars(const char *t)
{
    long long n = 0;
    for (const unsigned char *p = (const unsigned char *)t; *p; p++) n += (*p & 0xC0) != 0x80;
    return n;
}

static void add_chat(sd_lp *a, const char *text, const Specd__TokenLogprob *lp)
{
    json_t *top = json_array();
    for (size_t j = 0; lp && j < lp->n_top && (int)j < a->top; j++) {
        char *t = token_text(a->tok, lp->top[j]->token);
        json_array_append_new(top, json_pack("{s:s, s:o, s:o}", "token", t, "logprob", lp_num(lp->top[j]->logprob),
                                             "bytes", bytes_json(t)));
        free(t);
    }
    json_array_append_new(a->content, json_pack("{s:s, s:o, s:o, s:o}", "token", text, "logprob",
                                                lp ? lp_num(lp->logprob) : json_null(), "bytes", bytes_json(text),
                                                "top_logprobs", top));
}

static void add_completion(sd_lp *a, const char *text, const Specd__TokenLogprob *lp)
{
    json_array_append_new(a->tokens, json_string(text));
    json_array_append_new(a->token_logprobs, lp ? lp_num(lp->logprob) : json_null());
    json_array_append_new(a->text_offset, json_integer(a->offset));
    a->offset += chars(text);
    if (!lp) {
        json_array_append_new(a->top_logprobs, json_null());
        return;
    }
    json_t *top = json_object();
    for (size_t j = 0; j < lp->n_top && (int)j < a->top; j++) {
        char *t = token_text(a->tok, lp->top[j]->token);
        if (!json_object_get(top, t)) json_object_set_new(top, t, lp_num(lp->top[j]->logprob));
        free(t);
    }
    if (!json_object_get(top, text)) json_object_set_new(top, text, lp_num(lp->logprob));
    json_array_append_new(a->top_logprobs, top);
}

void sd_lp_add(sd_lp *a, int32_t token, const Specd__TokenLogprob *lp)
{
    char *text = token_text(a->tok, token);
    if (!text) return;
    if (a->kind == SD_API_CHAT) add_chat(a, text, lp);
    else add_completion(a, text, lp);
    free(text);
    a->pending++;
}

size_t sd_lp_pending(const sd_lp *a) { return a->pending; }

json_t *sd_lp_take(sd_lp *a)
{
    json_t *o = a->kind == SD_API_CHAT
                    ? json_pack("{s:O}", "content", a->content)
                    : json_pack("{s:O, s:O, s:O, s:O}", "tokens", a->tokens, "token_logprobs", a->token_logprobs,
                                "top_logprobs", a->top_logprobs, "text_offset", a->text_offset);
    reset(a);
    return o;
}
