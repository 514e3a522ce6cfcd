/* tok_encode.c — text → ids, following Hugging Face tokenizers' pipeline:
 *
 *   1. added tokens with normalized=false are cut out of the raw text
 *      (leftmost-longest, honouring single_word / lstrip / rstrip);
 *   2. each remaining piece is normalised, then added tokens with
 *      normalized=true are cut out of the normalised text;
 *   3. pre-tokenisers split the rest into words (Split regex behaviours,
 *      ByteLevel with its GPT-2 regex and byte → unicode mapping);
 *   4. each word goes through BPE (merge priority queue per word, byte
 *      fallback, unk fusing, ignore_merges);
 *   5. with add_special the post-processor's ids are put around the result.
 *
 * All scratch memory lives in a tk_enc owned by one sd_tok_encode call, so
 * concurrent calls on a shared sd_tok are safe. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "array.h"
#include "tok_internal.h"

typedef struct {
    size_t s, e;
    int32_t id; /* added token id, or -1 for text */
} tk_seg;

typedef struct {
    size_t s, e;
    bool match;
} tk_span;

typedef struct {
    int32_t id;
    int32_t prev, next;
    uint32_t len; /* bytes covered; 0 once merged into its left neighbour */
} tk_sym;

typedef struct {
    int32_t rank, pos, id;
} tk_hent;

typedef struct {
    const sd_tok *tok;
    int32_t *ids;
    size_t n, cap;
    pcre2_match_data *md;
    sd_buf norm;
    sd_buf pt_buf[TK_MAX_PRETOK][2]; /* [0]: prefix-space copy, [1]: byte-mapped piece */
    tk_span *spans[TK_MAX_PRETOK];
    size_t cap_spans[TK_MAX_PRETOK];
    tk_seg *seg[2]; /* [0]: raw-text split, [1]: normalised-text split */
    size_t nseg[2], cap_seg[2];
    tk_sym *syms;
    size_t cap_syms;
    tk_hent *heap;
    size_t cap_heap;
    char *err;
    size_t errlen;
} tk_enc;

static sd_status push_id(tk_enc *e, int32_t id)
{
    if (sd_grow(&e->ids, &e->cap, e->n + 1, sizeof *e->ids) != SD_OK) return SD_ERR_NOMEM;
    e->ids[e->n++] = id;
    return SD_OK;
}

/* ---- character classes (Unicode data from utf8proc) ------------------------------ */

static int32_t cp_at(const char *s, size_t n, size_t i, size_t *clen)
{
    utf8proc_int32_t cp = -1;
    utf8proc_ssize_t k = utf8proc_iterate((const utf8proc_uint8_t *)s + i, (utf8proc_ssize_t)(n - i), &cp);
    *clen = k > 0 ? (size_t)k : 1;
    return cp;
}

/* Rust's char::is_whitespace (the White_Space property). */
static bool is_ws(int32_t cp)
{
    if ((cp >= 9 && cp <= 13) || cp == 0x20 || cp == 0x85) return true;
    utf8proc_category_t c = utf8proc_category(cp);
    return c == UTF8PROC_CATEGORY_ZS || c == UTF8PROC_CATEGORY_ZL || c == UTF8PROC_CATEGORY_ZP;
}

/* Approximates regex \w: letters, marks, decimal / letter numbers, connector punctuation. */
static bool is_word(int32_t cp)
{
    if (cp == 0x200C || cp == 0x200D) return true;
    switch (utf8proc_category(cp)) {
    case UTF8PROC_CATEGORY_LU:
    case UTF8PROC_CATEGORY_LL:
    case UTF8PROC_CATEGORY_LT:
    case UTF8PROC_CATEGORY_LM:
    case UTF8PROC_CATEGORY_LO:
    case UTF8PROC_CATEGORY_MN:
    case UTF8PROC_CATEGORY_MC:
    case UTF8PROC_CATEGORY_ME:
    case UTF8PROC_CATEGORY_ND:
    case UTF8PROC_CATEGORY_NL:
    case UTF8PROC_CATEGORY_PC: return true;
    default: return false;
    }
}

/* Start of the character that ends just before byte i (i > 0). */
static size_t prev_char(const char *s, size_t i)
{
    do i--;
    while (i > 0 && ((unsigned char)s[i] & 0xC0) == 0x80);
    return i;
}

/* ---- added tokens ------------------------------------------------------------------- */

static sd_status push_seg(tk_enc *e, int w, size_t s, size_t end, int32_t id)
{
    if (sd_grow(&e->seg[w], &e->cap_seg[w], e->nseg[w] + 1, sizeof(tk_seg)) != SD_OK) return SD_ERR_NOMEM;
    e->seg[w][e->nseg[w]++] = (tk_seg){s, end, id};
    return SD_OK;
}

/* Longest added token of set starting at s[i], or NULL. */
static const tk_added *match_at(const sd_tok *t, const tk_aset *set, const char *s, size_t n, size_t i)
{
    unsigned char c = (unsigned char)s[i];
    for (int k = set->first[c]; k < set->first[c + 1]; k++) {
        const tk_added *a = &t->added[set->idx[k]];
        if (a->match_len <= n - i && memcmp(a->match, s + i, a->match_len) == 0) return a;
    }
    return NULL;
}

static bool single_word_ok(const char *s, size_t n, size_t ms, size_t me)
{
    size_t cl;
    if (ms > 0 && is_word(cp_at(s, n, prev_char(s, ms), &cl))) return false;
    if (me < n && is_word(cp_at(s, n, me, &cl))) return false;
    return true;
}

/* Splits s into text and added-token segments (into e->seg[w]), as HF's
 * AddedVocabulary::split_with_indices: leftmost-longest, non-overlapping. */
static sd_status split_added(tk_enc *e, const tk_aset *set, int w, const char *s, size_t n)
{
    const sd_tok *t = e->tok;
    size_t from = 0, i = 0, cl;
    e->nseg[w] = 0;
    while (set->n > 0 && i < n) {
        const tk_added *a = match_at(t, set, s, n, i);
        if (!a) {
            i++;
            continue;
        }
        size_t ms = i, me = i + a->match_len;
        i = me;
        if (a->single_word && !single_word_ok(s, n, ms, me)) continue;
        while (a->lstrip && ms > from) {
            size_t p = prev_char(s, ms);
            if (!is_ws(cp_at(s, n, p, &cl))) break;
            ms = p;
        }
        while (a->rstrip && me < n && is_ws(cp_at(s, n, me, &cl))) me += cl;
        if (from < ms && push_seg(e, w, from, ms, -1) != SD_OK) return SD_ERR_NOMEM;
        if (push_seg(e, w, ms, me, a->id) != SD_OK) return SD_ERR_NOMEM;
        from = i = me;
    }
    if (from < n && push_seg(e, w, from, n, -1) != SD_OK) return SD_ERR_NOMEM;
    return SD_OK;
}

/* ---- normalisers -------------------------------------------------------------------- */

static sd_status norm_unicode(int kind, const sd_buf *in, sd_buf *out)
{
    static const int opts[] = {
        [TK_NORM_NFC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE,
        [TK_NORM_NFD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE,
        [TK_NORM_NFKC] = UTF8PROC_STABLE | UTF8PROC_COMPOSE | UTF8PROC_COMPAT,
        [TK_NORM_NFKD] = UTF8PROC_STABLE | UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT,
    };
    utf8proc_uint8_t *dst = NULL;
    if (in->len == 0) return SD_OK;
    utf8proc_ssize_t k =
        utf8proc_map((const utf8proc_uint8_t *)in->p, (utf8proc_ssize_t)in->len, &dst, (utf8proc_option_t)opts[kind]);
    if (k < 0) return k == UTF8PROC_ERROR_NOMEM ? SD_ERR_NOMEM : SD_ERR_FORMAT;
    sd_status st = sd_buf_add(out, dst, (size_t)k);
    free(dst);
    return st;
}

static sd_status norm_replace(const tk_norm *nm, const sd_buf *in, sd_buf *out)
{
    size_t i = 0;
    if (!nm->re) {
        while (i < in->len) {
            const char *hit = memmem(in->p + i, in->len - i, nm->a, nm->alen);
            size_t upto = hit ? (size_t)(hit - in->p) : in->len;
            if (sd_buf_add(out, in->p + i, upto - i) != SD_OK) return SD_ERR_NOMEM;
            if (!hit) break;
            if (sd_buf_add(out, nm->b, nm->blen) != SD_OK) return SD_ERR_NOMEM;
            i = upto + nm->alen;
        }
        return SD_OK;
    }
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) return SD_ERR_NOMEM;
    sd_status st = SD_OK;
    size_t off = 0;
    while (st == SD_OK && off <= in->len) {
        int rc = pcre2_match(nm->re, (PCRE2_SPTR)in->p, in->len, off, PCRE2_NO_UTF_CHECK, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        st = sd_buf_add(out, in->p + i, ov[0] - i);
        if (st == SD_OK) st = sd_buf_add(out, nm->b, nm->blen);
        i = ov[1];
        off = ov[1] > ov[0] ? ov[1] : ov[1] + (ov[1] < in->len ? (size_t)tk_utf8_len((unsigned char)in->p[ov[1]]) : 1);
    }
    if (st == SD_OK) st = sd_buf_add(out, in->p + i, in->len - i);
    pcre2_match_data_free(md);
    return st;
}

sd_status tk_normalize(const sd_tok *tok, const char *s, size_t n, sd_buf *out, char *err, size_t errlen)
{
    sd_buf tmp = {0};
    sd_status st = SD_OK;
    out->len = 0;
    if (sd_buf_add(out, s, n) != SD_OK || sd_buf_reserve(out, 1) != SD_OK) return SD_ERR_NOMEM;
    for (int i = 0; i < tok->n_norms && st == SD_OK; i++) {
        const tk_norm *nm = &tok->norms[i];
        tmp.len = 0;
        if (nm->kind == TK_NORM_PREPEND) {
            if (out->len > 0) st = sd_buf_add(&tmp, nm->a, nm->alen);
            if (st == SD_OK) st = sd_buf_add(&tmp, out->p, out->len);
        } else if (nm->kind == TK_NORM_REPLACE) {
            st = norm_replace(nm, out, &tmp);
        } else {
            st = norm_unicode(nm->kind, out, &tmp);
        }
        sd_buf swap = *out;
        *out = tmp;
        tmp = swap;
    }
    sd_buf_free(&tmp);
    if (st == SD_OK && sd_buf_reserve(out, 1) != SD_OK) st = SD_ERR_NOMEM;
    if (st != SD_OK) return sd_seterr(err, errlen, st, "tokenizer: normalisation failed (%s)", sd_status_str(st));
    return SD_OK;
}

/* ---- BPE ------------------------------------------------------------------------------ */

static bool hent_less(const tk_hent *a, const tk_hent *b)
{
    return a->rank != b->rank ? a->rank < b->rank : a->pos < b->pos;
}

static sd_status heap_push(tk_enc *e, size_t *hn, tk_hent h)
{
    if (sd_grow(&e->heap, &e->cap_heap, *hn + 1, sizeof h) != SD_OK) return SD_ERR_NOMEM;
    size_t i = (*hn)++;
    while (i > 0 && hent_less(&h, &e->heap[(i - 1) / 2])) {
        e->heap[i] = e->heap[(i - 1) / 2];
        i = (i - 1) / 2;
    }
    e->heap[i] = h;
    return SD_OK;
}

static tk_hent heap_pop(tk_enc *e, size_t *hn)
{
    tk_hent top = e->heap[0], last = e->heap[--(*hn)];
    size_t i = 0, n = *hn;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= n) break;
        if (c + 1 < n && hent_less(&e->heap[c + 1], &e->heap[c])) c++;
        if (!hent_less(&e->heap[c], &last)) break;
        e->heap[i] = e->heap[c];
        i = c;
    }
    if (n > 0) e->heap[i] = last;
    return top;
}

/* Queues the merge of symbol pos with its right neighbour, if there is one. */
static sd_status try_pair(tk_enc *e, size_t *hn, int32_t pos)
{
    if (pos < 0 || e->syms[pos].next < 0) return SD_OK;
    int32_t rank, id;
    if (!tk_mmap_get(&e->tok->merges, e->syms[pos].id, e->syms[e->syms[pos].next].id, &rank, &id)) return SD_OK;
    return heap_push(e, hn, (tk_hent){rank, pos, id});
}

static sd_status add_sym(tk_enc *e, size_t *ns, int32_t id, uint32_t len)
{
    if (sd_grow(&e->syms, &e->cap_syms, *ns + 1, sizeof(tk_sym)) != SD_OK) return SD_ERR_NOMEM;
    e->syms[*ns] = (tk_sym){id, (int32_t)*ns - 1, (int32_t)*ns + 1, len};
    (*ns)++;
    return SD_OK;
}

/* Initial symbols: one per character; unknown characters become byte-fallback
 * tokens, or (fused) unk, or are dropped, as HF's BPE::merge_word. */
static sd_status initial_symbols(tk_enc *e, const char *w, size_t n, size_t *ns)
{
    const sd_tok *t = e->tok;
    int32_t unk_len = 0;
    sd_status st = SD_OK;
    for (size_t i = 0, cl; i < n && st == SD_OK; i += cl) {
        cl = (size_t)tk_utf8_len((unsigned char)w[i]);
        if (cl > n - i) cl = n - i;
        int32_t id = tk_smap_get(&t->vocab, w + i, cl);
        bool bytes_ok = id < 0 && t->byte_fallback;
        for (size_t k = 0; bytes_ok && k < cl; k++) bytes_ok = t->fallback_id[(unsigned char)w[i + k]] >= 0;
        if (id < 0 && !bytes_ok) {
            if (t->unk_id >= 0) {
                if (unk_len > 0 && !t->fuse_unk) st = add_sym(e, ns, t->unk_id, (uint32_t)unk_len), unk_len = 0;
                unk_len += (int32_t)cl;
            }
            continue;
        }
        if (unk_len > 0) st = add_sym(e, ns, t->unk_id, (uint32_t)unk_len), unk_len = 0;
        if (id >= 0 && st == SD_OK) st = add_sym(e, ns, id, (uint32_t)cl);
        for (size_t k = 0; id < 0 && k < cl && st == SD_OK; k++)
            st = add_sym(e, ns, t->fallback_id[(unsigned char)w[i + k]], 1);
    }
    if (unk_len > 0 && st == SD_OK) st = add_sym(e, ns, t->unk_id, (uint32_t)unk_len);
    if (*ns > 0) e->syms[*ns - 1].next = -1;
    return st;
}

static sd_status bpe_word(tk_enc *e, const char *w, size_t n)
{
    const sd_tok *t = e->tok;
    if (t->ignore_merges) {
        int32_t id = tk_smap_get(&t->vocab, w, n);
        if (id >= 0) return push_id(e, id);
    }
    size_t ns = 0, hn = 0;
    sd_status st = initial_symbols(e, w, n, &ns);
    for (size_t i = 0; i + 1 < ns && st == SD_OK; i++) st = try_pair(e, &hn, (int32_t)i);
    while (hn > 0 && st == SD_OK) {
        tk_hent top = heap_pop(e, &hn);
        tk_sym *l = &e->syms[top.pos];
        if (l->len == 0 || l->next < 0) continue;
        int32_t rank, id;
        tk_sym *r = &e->syms[l->next];
        if (!tk_mmap_get(&t->merges, l->id, r->id, &rank, &id) || id != top.id) continue;
        l->id = id;
        l->len += r->len;
        r->len = 0;
        l->next = r->next;
        if (l->next >= 0) e->syms[l->next].prev = top.pos;
        st = try_pair(e, &hn, l->prev);
        if (st == SD_OK) st = try_pair(e, &hn, top.pos);
    }
    for (int32_t i = ns > 0 ? 0 : -1; i >= 0 && st == SD_OK; i = e->syms[i].next) st = push_id(e, e->syms[i].id);
    return st;
}

/* ---- pre-tokenisers ------------------------------------------------------------------ */

static sd_status pt_run(tk_enc *e, int step, const char *s, size_t n);

static sd_status push_span(tk_enc *e, int step, size_t *k, size_t s, size_t end, bool match)
{
    if (sd_grow(&e->spans[step], &e->cap_spans[step], *k + 1, sizeof(tk_span)) != SD_OK) return SD_ERR_NOMEM;
    e->spans[step][(*k)++] = (tk_span){s, end, match};
    return SD_OK;
}

/* Matches and the gaps between them, covering s (HF's find_matches). */
static sd_status find_spans(tk_enc *e, int step, const pcre2_code *re, const char *s, size_t n, size_t *k)
{
    size_t off = 0, prev = 0;
    uint32_t opts = PCRE2_NO_UTF_CHECK;
    *k = 0;
    while (off <= n) {
        int rc = pcre2_match(re, (PCRE2_SPTR)s, n, off, opts, e->md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !(opts & PCRE2_NO_JIT)) {
            opts |= PCRE2_NO_JIT; /* deep match: retry with the interpreter */
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return sd_seterr(e->err, e->errlen, SD_ERR_FORMAT, "tokenizer: regex match failed (%d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(e->md);
        if (ov[0] > prev && push_span(e, step, k, prev, ov[0], false) != SD_OK) return SD_ERR_NOMEM;
        if (push_span(e, step, k, ov[0], ov[1], true) != SD_OK) return SD_ERR_NOMEM;
        prev = ov[1];
        if (ov[1] > ov[0]) off = ov[1];
        else if (ov[1] >= n) break;
        else off = ov[1] + (size_t)tk_utf8_len((unsigned char)s[ov[1]]);
    }
    if (prev < n && push_span(e, step, k, prev, n, false) != SD_OK) return SD_ERR_NOMEM;
    return SD_OK;
}

/* Applies a SplitDelimiterBehavior in place (HF's NormalizedString::split). */
static size_t apply_behavior(tk_span *sp, size_t k, int behavior, bool invert)
{
    size_t o = 0;
    bool prev_match = false;
    if (invert)
        for (size_t i = 0; i < k; i++) sp[i].match = !sp[i].match;
    if (behavior == TK_SPLIT_NEXT) { /* mirror of MergedWithPrevious, right to left */
        size_t w = k;
        for (size_t i = k; i-- > 0;) {
            if (sp[i].match && !prev_match && w < k) sp[w].s = sp[i].s;
            else sp[--w] = sp[i];
            prev_match = sp[i].match;
        }
        memmove(sp, sp + w, (k - w) * sizeof *sp);
        return k - w;
    }
    for (size_t i = 0; i < k; i++) {
        bool m = sp[i].match;
        if (behavior == TK_SPLIT_REMOVED && m) continue;
        bool merge =
            (behavior == TK_SPLIT_PREV && m && !prev_match) || (behavior == TK_SPLIT_CONTIGUOUS && m == prev_match);
        if (merge && o > 0) sp[o - 1].e = sp[i].e;
        else sp[o++] = sp[i];
        prev_match = m;
    }
    return o;
}

/* Maps bytes to GPT-2's unicode alphabet into the step's scratch buffer. */
static sd_status byte_map(tk_enc *e, int step, const char *s, size_t n)
{
    sd_buf *b = &e->pt_buf[step][1];
    b->len = 0;
    if (sd_buf_reserve(b, 2 * n) != SD_OK) return SD_ERR_NOMEM;
    for (size_t i = 0; i < n; i++) b->len += (size_t)tk_utf8_put(e->tok->b2u[(unsigned char)s[i]], b->p + b->len);
    return SD_OK;
}

static sd_status pt_step(tk_enc *e, int step, const char *s, size_t n)
{
    const tk_pretok *pt = &e->tok->pts[step];
    bool bl = pt->kind == TK_PT_BYTELEVEL;
    if (bl && pt->add_prefix_space && s[0] != ' ') {
        sd_buf *b = &e->pt_buf[step][0];
        b->len = 0;
        if (sd_buf_add(b, " ", 1) != SD_OK || sd_buf_add(b, s, n) != SD_OK) return SD_ERR_NOMEM;
        s = b->p, n = b->len;
    }
    size_t k = 0;
    if (pt->re) {
        sd_status st = find_spans(e, step, pt->re, s, n, &k);
        if (st != SD_OK) return st;
        k = apply_behavior(e->spans[step], k, bl ? TK_SPLIT_ISOLATED : pt->behavior, bl ? false : pt->invert);
    } else if (push_span(e, step, &k, 0, n, false) != SD_OK) {
        return SD_ERR_NOMEM;
    }
    for (size_t i = 0; i < k; i++) {
        tk_span sp = e->spans[step][i];
        if (sp.e <= sp.s) continue;
        sd_status st = SD_OK;
        if (bl && (st = byte_map(e, step, s + sp.s, sp.e - sp.s)) == SD_OK)
            st = pt_run(e, step + 1, e->pt_buf[step][1].p, e->pt_buf[step][1].len);
        else if (!bl) st = pt_run(e, step + 1, s + sp.s, sp.e - sp.s);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}

static sd_status pt_run(tk_enc *e, int step, const char *s, size_t n)
{
    if (n == 0) return SD_OK;
    if (step == e->tok->n_pts) return bpe_word(e, s, n);
    return pt_step(e, step, s, n);
}

/* ---- driver ---------------------------------------------------------------------------- */

/* A text segment between raw-text added tokens: normalise, split on
 * normalized added tokens, pre-tokenise, BPE. */
static sd_status encode_text(tk_enc *e, const char *s, size_t n)
{
    const sd_tok *t = e->tok;
    if (t->n_norms > 0) {
        sd_status st = tk_normalize(t, s, n, &e->norm, e->err, e->errlen);
        if (st != SD_OK) return st;
        s = e->norm.p, n = e->norm.len;
    }
    if (t->norm_set.n == 0) return pt_run(e, 0, s, n);
    sd_status st = split_added(e, &t->norm_set, 1, s, n);
    for (size_t i = 0; i < e->nseg[1] && st == SD_OK; i++) {
        tk_seg g = e->seg[1][i];
        st = g.id >= 0 ? push_id(e, g.id) : pt_run(e, 0, s + g.s, g.e - g.s);
    }
    return st;
}

static sd_status encode_all(tk_enc *e, const char *text, size_t len, bool add_special)
{
    const sd_tok *t = e->tok;
    sd_status st = SD_OK;
    for (int i = 0; add_special && i < t->n_pre && st == SD_OK; i++) st = push_id(e, t->pre_ids[i]);
    if (st == SD_OK) st = split_added(e, &t->raw_set, 0, text, len);
    for (size_t i = 0; i < e->nseg[0] && st == SD_OK; i++) {
        tk_seg g = e->seg[0][i];
        st = g.id >= 0 ? push_id(e, g.id) : encode_text(e, text + g.s, g.e - g.s);
    }
    for (int i = 0; add_special && i < t->n_post && st == SD_OK; i++) st = push_id(e, t->post_ids[i]);
    return st;
}

static void enc_free(tk_enc *e)
{
    pcre2_match_data_free(e->md);
    sd_buf_free(&e->norm);
    for (int i = 0; i < TK_MAX_PRETOK; i++) {
        sd_buf_free(&e->pt_buf[i][0]);
        sd_buf_free(&e->pt_buf[i][1]);
        free(e->spans[i]);
    }
    free(e->seg[0]);
    free(e->seg[1]);
    free(e->syms);
    free(e->heap);
}

sd_status sd_tok_encode(const sd_tok *tok, const char *text, size_t len, bool add_special, int32_t **ids, size_t *n,
                        char *err, size_t errlen)
{
    if (!ids || !n) return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: NULL output pointer");
    *ids = NULL;
    *n = 0;
    if (!tok || (!text && len > 0)) return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: NULL argument");
    if (!tk_utf8_valid(text, len)) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: input is not valid UTF-8");
    tk_enc e = {.tok = tok, .err = err, .errlen = errlen};
    e.md = pcre2_match_data_create(1, NULL);
    sd_status st = e.md ? encode_all(&e, text ? text : "", len, add_special) : SD_ERR_NOMEM;
    if (st == SD_ERR_NOMEM) sd_seterr(err, errlen, st, "tokenizer: out of memory while encoding");
    if (st == SD_OK) {
        *ids = e.ids;
        *n = e.n;
        e.ids = NULL;
    }
    free(e.ids);
    enc_free(&e);
    return st;
}
