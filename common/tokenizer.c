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

/* ---- buffers and UTF-8 -------------------------------------------------------------- */

sd_status tk_buf_reserve(tk_buf *b, size_t n) {
    if (b->n + n <= b->cap) return SD_OK;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < b->n + n) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) return SD_ERR_NOMEM;
    b->p = np;
    b->cap = nc;
    return SD_OK;
}

sd_status tk_buf_put(tk_buf *b, const void *s, size_t n) {
    if (n == 0) return SD_OK;
    if (tk_buf_reserve(b, n) != SD_OK) return SD_ERR_NOMEM;
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return SD_OK;
}

void tk_buf_free(tk_buf *b) {
    free(b->p);
    b->p = NULL;
    b->n = b->cap = 0;
}

/* Continuation bytes needed after lead byte c, with the allowed range of the
 * first one (Unicode table 3-7); -1 for bytes that cannot start a character. */
static int utf8_need(unsigned char c, unsigned char *lo, unsigned char *hi) {
    *lo = 0x80, *hi = 0xBF;
    if (c < 0x80) return 0;
    if (c >= 0xC2 && c <= 0xDF) return 1;
    if (c == 0xE0) *lo = 0xA0;
    if (c == 0xED) *hi = 0x9F;
    if (c >= 0xE0 && c <= 0xEF) return 2;
    if (c == 0xF0) *lo = 0x90;
    if (c == 0xF4) *hi = 0x8F;
    if (c >= 0xF0 && c <= 0xF4) return 3;
    return -1;
}

bool tk_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned char lo, hi;
        if (p[i] < 0x80) {
            i++;
            continue;
        }
        int need = utf8_need(p[i], &lo, &hi);
        if (need < 0 || (size_t)need > n - i - 1) return false;
        if (p[i + 1] < lo || p[i + 1] > hi) return false;
        for (int k = 2; k <= need; k++)
            if ((p[i + k] & 0xC0) != 0x80) return false;
        i += (size_t)need + 1;
    }
    return true;
}

int tk_utf8_len(unsigned char c) {
    return c < 0xC0 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : c < 0xF8 ? 4 : 1;
}

int tk_utf8_put(uint32_t cp, char *out) {
    if (cp < 0x80) {
        out[0] = (char)cp;
        return 1;
    }
    if (cp < 0x800) {
        out[0] = (char)(0xC0 | (cp >> 6));
        out[1] = (char)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        out[0] = (char)(0xE0 | (cp >> 12));
        out[1] = (char)(0x80 | ((cp >> 6) & 0x3F));
        out[2] = (char)(0x80 | (cp & 0x3F));
        return 3;
    }
    out[0] = (char)(0xF0 | (cp >> 18));
    out[1] = (char)(0x80 | ((cp >> 12) & 0x3F));
    out[2] = (char)(0x80 | ((cp >> 6) & 0x3F));
    out[3] = (char)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---- accessors ------------------------------------------------------------------------ */

int sd_tok_vocab_size(const sd_tok *tok) {
    return tok ? tok->vocab_size : 0;
}

int32_t sd_tok_token_id(const sd_tok *tok, const char *content) {
    if (!tok || !content) return -1;
    size_t n = strlen(content);
    for (int i = 0; i < tok->n_added; i++) /* added tokens first, as HF's token_to_id */
        if (tok->added[i].len == n && memcmp(tok->added[i].content, content, n) == 0) return tok->added[i].id;
    return tk_smap_get(&tok->vocab, content, n);
}

const char *sd_tok_token_str(const sd_tok *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->vocab_size) return NULL;
    return tok->id_str[id];
}

bool sd_tok_is_special(const sd_tok *tok, int32_t id) {
    if (!tok || id < 0 || id >= tok->vocab_size) return false;
    return (tok->id_flags[id] & TK_FLAG_SPECIAL) != 0;
}

int32_t sd_tok_bos_id(const sd_tok *tok) {
    return tok && tok->n_pre > 0 ? tok->pre_ids[0] : -1;
}

uint64_t sd_tok_fingerprint(const sd_tok *tok) {
    return tok ? tok->fingerprint : 0;
}

/* ---- streaming decoder ------------------------------------------------------------------ */

struct sd_tok_stream {
    const sd_tok *tok;
    bool skip_special;
    bool started;   /* no-decoder mode: tokens are joined with " " */
    int strip_left; /* leading strip_ch characters still to drop */
    tk_buf out;     /* what the last push / flush returned */
    tk_buf pend;    /* ByteLevel: bytes of an unfinished character */
    tk_buf run;     /* ByteFallback: bytes of the current <0xNN> run */
    tk_buf tmp[2];  /* per-token decoder steps */
};

static const char FFFD[] = "\xEF\xBF\xBD";

/* Appends final text to the output, dropping the whole-output Strip prefix. */
static sd_status emit(sd_tok_stream *s, const char *p, size_t n) {
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
    return tk_buf_put(&s->out, p, n);
}

/* Emits the decodable prefix of pend (lossy); keeps an unfinished tail unless final. */
static sd_status drain_bytes(sd_tok_stream *s, bool final) {
    const unsigned char *p = (const unsigned char *)s->pend.p;
    size_t n = s->pend.n, i = 0, ok = 0; /* p[ok..i) is valid, not yet emitted */
    sd_status st = SD_OK;
    while (i < n && st == SD_OK) {
        unsigned char lo, hi;
        int need = utf8_need(p[i], &lo, &hi);
        size_t j = i + 1;
        int k = 0;
        while (need > 0 && k < need && j < n && p[j] >= (k == 0 ? lo : 0x80) && p[j] <= (k == 0 ? hi : 0xBF))
            j++, k++;
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
    s->pend.n = n - i;
    return st;
}

/* Ends a run of byte-fallback tokens: its UTF-8 text, or one U+FFFD per byte. */
static sd_status flush_run(sd_tok_stream *s) {
    sd_status st = SD_OK;
    if (s->run.n == 0) return SD_OK;
    if (tk_utf8_valid(s->run.p, s->run.n)) st = emit(s, s->run.p, s->run.n);
    else
        for (size_t i = 0; st == SD_OK && i < s->run.n; i++) st = emit(s, FFFD, 3);
    s->run.n = 0;
    return st;
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* "<0xNN>" → byte NN, else -1. */
static int byte_token(const char *p, size_t n) {
    if (n != 6 || memcmp(p, "<0x", 3) != 0 || p[5] != '>') return -1;
    int h = hexval(p[3]), l = hexval(p[4]);
    return h < 0 || l < 0 ? -1 : h * 16 + l;
}

static sd_status dop_strip(const tk_dop *d, const char *p, size_t n, tk_buf *out) {
    char ch[4];
    size_t cl = (size_t)tk_utf8_put(d->ch, ch), a = 0, b = n;
    for (int k = 0; k < d->start && b - a >= cl && memcmp(p + a, ch, cl) == 0; k++) a += cl;
    for (int k = 0; k < d->stop && b - a >= cl && memcmp(p + b - cl, ch, cl) == 0; k++) b -= cl;
    return tk_buf_put(out, p + a, b - a);
}

static sd_status dop_replace(const tk_dop *d, const char *p, size_t n, tk_buf *out) {
    size_t i = 0;
    while (i < n) {
        const char *hit = memmem(p + i, n - i, d->a, d->alen);
        size_t upto = hit ? (size_t)(hit - p) : n;
        if (tk_buf_put(out, p + i, upto - i) != SD_OK) return SD_ERR_NOMEM;
        if (!hit) break;
        if (tk_buf_put(out, d->b, d->blen) != SD_OK) return SD_ERR_NOMEM;
        i = upto + d->alen;
    }
    return SD_OK;
}

/* Runs the per-token decoder steps; *p / *n then point at the result. */
static sd_status per_token(sd_tok_stream *s, const char **p, size_t *n) {
    for (int i = 0; i < s->tok->n_dops; i++) {
        tk_buf *o = &s->tmp[i & 1];
        const tk_dop *d = &s->tok->dops[i];
        o->n = 0;
        sd_status st = d->kind == TK_DOP_STRIP ? dop_strip(d, *p, *n, o) : dop_replace(d, *p, *n, o);
        if (st != SD_OK) return st;
        *p = o->p ? o->p : "", *n = o->n;
    }
    return SD_OK;
}

/* ByteLevel: a token's characters map back to bytes; a token with any other
 * character (e.g. a non-ASCII added token) contributes its UTF-8 as is. */
static sd_status bytelevel_token(sd_tok_stream *s, const char *p, size_t n) {
    const sd_tok *t = s->tok;
    size_t start = s->pend.n;
    for (size_t i = 0; i < n;) {
        utf8proc_int32_t cp = -1;
        utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)p + i, (utf8proc_ssize_t)(n - i), &cp);
        if (k <= 0 || cp >= 512 || t->u2b[cp] < 0) {
            s->pend.n = start;
            return tk_buf_put(&s->pend, p, n);
        }
        char b = (char)t->u2b[cp];
        if (tk_buf_put(&s->pend, &b, 1) != SD_OK) return SD_ERR_NOMEM;
        i += (size_t)k;
    }
    return SD_OK;
}

static sd_status push_token(sd_tok_stream *s, const char *p, size_t n) {
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
        return tk_buf_put(&s->run, &c, 1);
    }
    if ((st = flush_run(s)) != SD_OK) return st;
    if (!t->dec_bytelevel) return emit(s, p, n);
    if ((st = bytelevel_token(s, p, n)) != SD_OK) return st;
    return drain_bytes(s, false);
}

sd_tok_stream *sd_tok_stream_new(const sd_tok *tok, bool skip_special) {
    if (!tok) return NULL;
    sd_tok_stream *s = calloc(1, sizeof *s);
    if (!s) return NULL;
    s->tok = tok;
    s->skip_special = skip_special;
    s->strip_left = tok->strip_start;
    return s;
}

sd_status sd_tok_stream_push(sd_tok_stream *s, int32_t id, const char **out, size_t *outlen) {
    if (!s || !out || !outlen) return SD_ERR_ARG;
    const sd_tok *t = s->tok;
    *out = "";
    *outlen = 0;
    if (id < 0 || id >= t->vocab_size) return SD_ERR_ARG;
    s->out.n = 0;
    if (!t->id_str[id] || (s->skip_special && (t->id_flags[id] & TK_FLAG_SPECIAL))) return SD_OK;
    sd_status st = push_token(s, t->id_str[id], t->id_len[id]);
    if (st != SD_OK) return st;
    *out = s->out.p ? s->out.p : "";
    *outlen = s->out.n;
    return SD_OK;
}

sd_status sd_tok_stream_flush(sd_tok_stream *s, const char **out, size_t *outlen) {
    if (!s || !out || !outlen) return SD_ERR_ARG;
    *out = "";
    *outlen = 0;
    s->out.n = 0;
    sd_status st = flush_run(s);
    if (st == SD_OK && s->tok->dec_bytelevel) st = drain_bytes(s, true);
    if (st != SD_OK) return st;
    *out = s->out.p ? s->out.p : "";
    *outlen = s->out.n;
    return SD_OK;
}

void sd_tok_stream_free(sd_tok_stream *s) {
    if (!s) return;
    tk_buf_free(&s->out);
    tk_buf_free(&s->pend);
    tk_buf_free(&s->run);
    tk_buf_free(&s->tmp[0]);
    tk_buf_free(&s->tmp[1]);
    free(s);
}

/* ---- whole decode ------------------------------------------------------------------------- */

sd_status sd_tok_decode(const sd_tok *tok, const int32_t *ids, size_t n, bool skip_special,
                        char **text, size_t *len, char *err, size_t errlen) {
    if (!text || !len) return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: NULL output pointer");
    *text = NULL;
    *len = 0;
    if (!tok || (!ids && n > 0)) return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= tok->vocab_size)
            return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: id %d at position %zu is out of range [0, %d)",
                             (int)ids[i], i, tok->vocab_size);
    sd_tok_stream *s = sd_tok_stream_new(tok, skip_special);
    tk_buf res = {0};
    sd_status st = s ? SD_OK : SD_ERR_NOMEM;
    const char *p;
    size_t k;
    for (size_t i = 0; i < n && st == SD_OK; i++)
        if ((st = sd_tok_stream_push(s, ids[i], &p, &k)) == SD_OK) st = tk_buf_put(&res, p, k);
    if (st == SD_OK && (st = sd_tok_stream_flush(s, &p, &k)) == SD_OK) st = tk_buf_put(&res, p, k);
    if (st == SD_OK) st = tk_buf_put(&res, "", 1);
    sd_tok_stream_free(s);
    if (st != SD_OK) {
        tk_buf_free(&res);
        return sd_seterr(err, errlen, st, "tokenizer: decode failed (%s)", sd_status_str(st));
    }
    *text = res.p;
    *len = res.n - 1;
    return SD_OK;
}
