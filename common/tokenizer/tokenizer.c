/* tokenizer.c — public accessors, decoding and streaming decoding of the
 * tokenizer module (loading is in tok_load.c, encoding in tok_encode.c).
 *
 * Decoding follows HF's decoder chains token by token so that one
 * implementation serves both sd_tok_decode and the incremental stream:
 * sd_tok_decode is literally "push every id, then flush". Supported chains:
 *   ByteLevel                     (GPT-2 / Qwen / Llama 3): tokens → bytes,
 *                                 then lossy UTF-8 (one U+FFFD per maximal
 *                                 invalid subsequence, as Rust's from_utf8_lossy);
 *   Replace* [ByteFallback] [Fuse] [Strip]   (Llama 2 / SentencePiece): runs of
 *                                 <0xNN> tokens are joined and decoded, one
 *                                 U+FFFD per byte when the run is invalid.
 * A stream holds back only what may still change: an unfinished UTF-8
 * character (ByteLevel) or a run of byte tokens (ByteFallback, whose validity
 * is known only when the run ends). A stream belongs to one thread. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "tok_internal.h"

/* ---- accessors ------------------------------------------------------------------------ */

int sd_tok_vocab_size(const sd_tok *tok) { return tok ? tok->vocab_size : 0; }

int32_t sd_tok_token_id(const sd_tok *tok, const char *content)
{
    if (!tok || !content) return -1;
    size_t n = strlen(content);
    for (int i = 0; i < tok->n_added; i++) /* added tokens first, as HF's token_to_id */
        if (tok->added[i].len == n && memcmp(tok->added[i].content, content, n) == 0) return tok->added[i].id;
    return tk_smap_get(&tok->vocab, content, n);
}

const char *sd_tok_token_str(const sd_tok *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->vocab_size) return NULL;
    return tok->id_str[id];
}

bool sd_tok_is_special(const sd_tok *tok, int32_t id)
{
    if (!tok || id < 0 || id >= tok->vocab_size) return false;
    return (tok->id_flags[id] & TK_FLAG_SPECIAL) != 0;
}

int32_t sd_tok_bos_id(const sd_tok *tok) { return tok && tok->n_pre > 0 ? tok->pre_ids[0] : -1; }

uint64_t sd_tok_fingerprint(const sd_tok *tok) { return tok ? tok->fingerprint : 0; }

/* ---- streaming decoder ------------------------------------------------------------------ */

struct sd_tok_stream {
    const sd_tok *tok;
    bool skip_special;
    bool started;   /* no-decoder mode: tokens are joined with " " */
    int strip_left; /* leading strip_ch characters still to drop */
    sd_buf out;     /* what the last push / flush returned */
    sd_buf pend;    /* ByteLevel: bytes of an unfinished character */
    sd_buf run;     /* ByteFallback: bytes of the current <0xNN> run */
    sd_buf tmp[2];  /* per-token decoder steps */
};

static const char FFFD[] = "\xEF\xBF\xBD";

/* Appends final text to the output, dropping the whole-output Strip prefix. */
static sd_status emit(sd_tok_stream *s, const char *p, size_t n)
{
    const sd_tok *t = s->tok;
    char ch[4];
    size_t cl = s->strip_left > 0 ? (size_t)tk_utf8_put(t->strip_ch, ch) : 0;
    while (s->strip_left > 0 && n > 0) {
        if (n < cl || memcmp(p, ch, cl) != 0) {
            s->strip_left = 0;
            break;
        }
        p += cl, n -= cl;
        s->strip_left--;
    }
    return sd_buf_add(&s->out, p, n);
}

/* Emits the decodable prefix of pend (lossy); keeps an unfinished tail unless final. */
static sd_status drain_bytes(sd_tok_stream *s, bool final)
{
    const unsigned char *p = (const unsigned char *)s->pend.p;
    size_t n = s->pend.len, i = 0, ok = 0; /* p[ok..i) is valid, not yet emitted */
    if (n == 0) return SD_OK;              /* nothing held (pend.p may still be NULL) */
    sd_status st = SD_OK;
    while (i < n && st == SD_OK) {
        unsigned char lo, hi;
        int need = tk_utf8_need(p[i], &lo, &hi);
        size_t j = i + 1;
        int k = 0;
        while (need > 0 && k < need && j < n && p[j] >= (k == 0 ? lo : 0x80) && p[j] <= (k == 0 ? hi : 0xBF)) j++, k++;
        if (need >= 0 && k == need) { /* complete character */
            i = j;
            continue;
        }
        if (need > 0 && j == n && !final) break; /* unfinished: wait for more bytes */
        st = emit(s, (const char *)p + ok, i - ok);
        if (st == SD_OK) st = emit(s, FFFD, 3);
        i = ok = j; /* lead plus the valid continuations form one maximal invalid subpart */
    }
    if (st == SD_OK) st = emit(s, (const char *)p + ok, i - ok);
    if (i < n) memmove(s->pend.p, s->pend.p + i, n - i);
    s->pend.len = n - i;
    return st;
}

/* Ends a run of byte-fallback tokens: its UTF-8 text, or one U+FFFD per byte. */
static sd_status flush_run(sd_tok_stream *s)
{
    sd_status st = SD_OK;
    if (s->run.len == 0) return SD_OK;
    if (tk_utf8_valid(s->run.p, s->run.len)) st = emit(s, s->run.p, s->run.len);
    else
        for (size_t i = 0; st == SD_OK && i < s->run.len; i++) st = emit(s, FFFD, 3);
    s->run.len = 0;
    return st;
}

static int hexval(char c)
{
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* "<0xNN>" → byte NN, else -1. */
static int byte_token(const char *p, size_t n)
{
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int h = hexval(p[3]), l = hexval(p[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static sd_status dop_strip(const tk_dop *d, const char *p, size_t n, sd_buf *out)
{
    char ch[4];
    size_t cl = (size_t)tk_utf8_put(d->ch, ch), a = 0, b = n;
    for (int k = 0; k < d->start && b - a >= cl && memcmp(p + a, ch, cl) == 0; k++) a += cl;
    for (int k = 0; k < d->stop && b - a >= cl && memcmp(p + b - cl, ch, cl) == 0; k++) b -= cl;
    return sd_buf_add(out, p + a, b - a);
}

static sd_status dop_replace(const tk_dop *d, const char *p, size_t n, sd_buf *out)
{
    size_t i = 0;
    while (i < n) {
        const char *hit = memmem(p + i, n - i, d->a, d->alen);
        size_t upto = hit ? (size_t)(hit - p) : n;
        if (sd_buf_add(out, p + i, upto - i) != SD_OK) return SD_ERR_NOMEM;
        if (!hit) break;
        if (sd_buf_add(out, d->b, d->blen) != SD_OK) return SD_ERR_NOMEM;
        i = upto + d->alen;
    }
    return SD_OK;
}

/* Runs the per-token decoder steps; *p / *n then point at the result. */
static sd_status per_token(sd_tok_stream *s, const char **p, size_t *n)
{
    for (int i = 0; i < s->tok->n_dops; i++) {
        sd_buf *o = &s->tmp[i & 1];
        const tk_dop *d = &s->tok->dops[i];
        o->len = 0;
        sd_status st = d->kind == TK_DOP_STRIP ? dop_strip(d, *p, *n, o) : dop_replace(d, *p, *n, o);
        if (st != SD_OK) return st;
        *p = o->p ? o->p : "", *n = o->len;
    }
    return SD_OK;
}

/* ByteLevel: a token's characters map back to bytes; a token with any other
 * character (e.g. a non-ASCII added token) contributes its UTF-8 as is. */
static sd_status bytelevel_token(sd_tok_stream *s, const char *p, size_t n)
{
    const sd_tok *t = s->tok;
    size_t start = s->pend.len;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp = -1;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp >= 512 || t->u2b[cp] < 0) {
            s->pend.len = start;
            return sd_buf_add(&s->pend, p, n);
        }
        char b = (char)t->u2b[cp];
        if (sd_buf_add(&s->pend, &b, 1) != SD_OK) return SD_ERR_NOMEM;
        i += (size_t)k;
    }
    return SD_OK;
}

static sd_status push_token(sd_tok_stream *s, const char *p, size_t n)
{
    const sd_tok *t = s->tok;
    if (!t->has_decoder) {
        sd_status st = s->started ? emit(s, " ", 1) : SD_OK;
        s->started = true;
        return st == SD_OK ? emit(s, p, n) : st;
    }
    sd_status st = per_token(s, &p, &n);
    if (st != SD_OK) return st;
    int b = t->dec_bytefallback ? byte_token(p, n) : -1;
    if (b >= 0) {
        char c = (char)b;
        return sd_buf_add(&s->run, &c, 1);
    }
    if ((st = flush_run(s)) != SD_OK) return st;
    if (!t->dec_bytelevel) return emit(s, p, n);
    if ((st = bytelevel_token(s, p, n)) != SD_OK) return st;
    return drain_bytes(s, false);
}

sd_status sd_tok_stream_new(const sd_tok *tok, bool skip_special, sd_tok_stream **out, char *err, size_t errlen)
{
    *out = NULL;
    if (!tok) return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: stream without a tokenizer");
    sd_tok_stream *s = calloc(1, sizeof *s);
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "tokenizer: out of memory for a stream");
    s->tok = tok;
    s->skip_special = skip_special;
    s->strip_left = tok->strip_start;
    *out = s;
    return SD_OK;
}

sd_status sd_tok_stream_push(sd_tok_stream *s, int32_t id, const char **out, size_t *outlen)
{
    if (!s || !out || !outlen) return SD_ERR_ARG;
    const sd_tok *t = s->tok;
    *out = "";
    *outlen = 0;
    if (id < 0 || id >= t->vocab_size) return SD_ERR_ARG;
    s->out.len = 0;
    if (!t->id_str[id] || (s->skip_special && (t->id_flags[id] & TK_FLAG_SPECIAL))) return SD_OK;
    sd_status st = push_token(s, t->id_str[id], t->id_len[id]);
    if (st != SD_OK) return st;
    *out = s->out.p ? s->out.p : "";
    *outlen = s->out.len;
    return SD_OK;
}

sd_status sd_tok_stream_flush(sd_tok_stream *s, const char **out, size_t *outlen)
{
    if (!s || !out || !outlen) return SD_ERR_ARG;
    *out = "";
    *outlen = 0;
    s->out.len = 0;
    sd_status st = flush_run(s);
    if (st == SD_OK && s->tok->dec_bytelevel) st = drain_bytes(s, true);
    if (st != SD_OK) return st;
    *out = s->out.p ? s->out.p : "";
    *outlen = s->out.len;
    return SD_OK;
}

void sd_tok_stream_free(sd_tok_stream *s)
{
    if (!s) return;
    sd_buf_free(&s->out);
    sd_buf_free(&s->pend);
    sd_buf_free(&s->run);
    sd_buf_free(&s->tmp[0]);
    sd_buf_free(&s->tmp[1]);
    free(s);
}

/* ---- raw token bytes ------------------------------------------------------------------------ */

/* One token's bytes as the decoder produces them mid-text, without UTF-8
 * repair: the per-token steps, then <0xNN> → byte NN or ByteLevel characters
 * → bytes. s is a scratch stream (its pend buffer is used and emptied). */
static sd_status raw_token(sd_tok_stream *s, int32_t id, sd_buf *out)
{
    const sd_tok *t = s->tok;
    const char *p = t->id_str[id];
    size_t n = t->id_len[id];
    if (!p) return SD_OK;
    if (!t->has_decoder) return sd_buf_add(out, p, n);
    sd_status st = per_token(s, &p, &n);
    if (st != SD_OK) return st;
    int b = t->dec_bytefallback ? byte_token(p, n) : -1;
    if (b >= 0) {
        char c = (char)b;
        return sd_buf_add(out, &c, 1);
    }
    if (!t->dec_bytelevel) return sd_buf_add(out, p, n);
    s->pend.len = 0;
    if ((st = bytelevel_token(s, p, n)) != SD_OK) return st;
    st = s->pend.len ? sd_buf_add(out, s->pend.p, s->pend.len) : SD_OK;
    s->pend.len = 0;
    return st;
}

sd_status sd_tok_vocab_bytes(const sd_tok *tok, char **data, uint32_t **off, char *err, size_t errlen)
{
    *data = NULL;
    *off = NULL;
    sd_tok_stream *s;
    sd_status st = sd_tok_stream_new(tok, false, &s, NULL, 0); /* the message below says what failed */
    uint32_t *o = tok ? malloc(((size_t)tok->vocab_size + 1) * sizeof *o) : NULL;
    sd_buf all = {0};
    if (st == SD_OK && !o) st = SD_ERR_NOMEM;
    for (int32_t id = 0; st == SD_OK && id < tok->vocab_size; id++) {
        o[id] = (uint32_t)all.len;
        st = raw_token(s, id, &all);
        if (st == SD_OK && all.len > UINT32_MAX) st = SD_ERR_FORMAT;
    }
    sd_tok_stream_free(s);
    if (st == SD_OK) {
        o[tok->vocab_size] = (uint32_t)all.len;
        *data = all.len ? sd_buf_take(&all) : calloc(1, 1);
        if (!*data) st = SD_ERR_NOMEM;
    }
    if (st != SD_OK) {
        sd_buf_free(&all);
        free(o);
        return sd_seterr(err, errlen, st, "tokenizer: the vocabulary's bytes (%s)", sd_status_str(st));
    }
    *off = o;
    return SD_OK;
}

/* ---- whole decode ------------------------------------------------------------------------- */

sd_status sd_tok_decode(const sd_tok *tok, const int32_t *ids, size_t n, bool skip_special, char **text, size_t *len,
                        char *err, size_t errlen)
{
    if (!text || !len) return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: NULL output pointer");
    *text = NULL;
    *len = 0;
    if (!tok || (!ids && n > 0)) return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab_size)
            return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: id %d at position %zu is out of range [0, %d)",
                             (int)ids[i], i, tok->vocab_size);
    sd_tok_stream *s;
    sd_status st = sd_tok_stream_new(tok, skip_special, &s, NULL, 0); /* the message below says what failed */
    sd_buf res = {0};
    const char *p;
    size_t k;
    for (size_t i = 0; i < n && st == SD_OK; i++)
        if ((st = sd_tok_stream_push(s, ids[i], &p, &k)) == SD_OK) st = sd_buf_add(&res, p, k);
    if (st == SD_OK && (st = sd_tok_stream_flush(s, &p, &k)) == SD_OK) st = sd_buf_add(&res, p, k);
    sd_tok_stream_free(s);
    *len = res.len;
    if (st == SD_OK && !(*text = sd_buf_take(&res))) st = SD_ERR_NOMEM;
    if (st != SD_OK) {
        sd_buf_free(&res);
        *len = 0;
        return sd_seterr(err, errlen, st, "tokenizer: decode failed (%s)", sd_status_str(st));
    }
    return SD_OK;
}
