/* tok_load.c — reads a Hugging Face tokenizer.json into an sd_tok.
 *
 * The JSON is parsed with jansson, then copied into flat structures built for
 * speed: every string lives in one block arena, the vocab is an
 * open-addressing string → id table and the merges a (left, right) → (rank,
 * merged id) table. Components we do not implement are refused with a
 * message naming them instead of being silently ignored, since a wrong
 * tokenisation is worse than none. The loaded sd_tok is immutable. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <utf8proc.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "tok_internal.h"

#define ARENA_BLOCK (1u << 20)

/* ---- arena -------------------------------------------------------------------- */

/* Copies n bytes (plus a NUL) into the tokenizer's arena; NULL on OOM. */
static char *arena_dup(sd_tok *t, const char *s, size_t n)
{
    if (t->block_used + n + 1 > t->block_cap) {
        size_t cap = n + 1 > ARENA_BLOCK ? n + 1 : ARENA_BLOCK;
        if (sd_grow(&t->blocks, &t->cap_blocks, (size_t)t->n_blocks + 1, sizeof *t->blocks) != SD_OK) return NULL;
        char *blk = malloc(cap);
        if (!blk) return NULL;
        t->blocks[t->n_blocks++] = blk;
        t->block_used = 0;
        t->block_cap = cap;
    }
    char *p = t->blocks[t->n_blocks - 1] + t->block_used;
    memcpy(p, s, n);
    p[n] = 0;
    t->block_used += n + 1;
    return p;
}

/* ---- fingerprint (FNV-1a over everything that affects ids and text) ------------- */

static void fp_bytes(uint64_t *h, const void *p, size_t n)
{
    const unsigned char *s = p;
    for (size_t i = 0; i < n; i++) *h = (*h ^ s[i]) * 1099511628211ull;
}

static void fp_json(uint64_t *h, const json_t *j)
{
    char *s = j ? json_dumps(j, JSON_COMPACT | JSON_SORT_KEYS | JSON_ENCODE_ANY) : NULL;
    if (s) fp_bytes(h, s, strlen(s));
    fp_bytes(h, "|", 1);
    free(s);
}

/* ---- small JSON helpers ---------------------------------------------------------- */

static bool jbool(const json_t *o, const char *k, bool dflt)
{
    json_t *v = json_object_get(o, k);
    return json_is_boolean(v) ? json_is_true(v) : dflt;
}

static const char *jtype(const json_t *o) { return json_string_value(json_object_get(o, "type")); }

/* Compiles a pattern with Unicode semantics; JIT when available. */
static sd_status compile_re(const char *pat, size_t len, bool literal, pcre2_code **out, char *err, size_t errlen)
{
    int ec;
    PCRE2_SIZE eo;
    uint32_t opts = PCRE2_UTF | PCRE2_UCP | (literal ? PCRE2_LITERAL : 0);
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, len, opts, &ec, &eo, NULL);
    if (!re) {
        PCRE2_UCHAR msg[160];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: regex /%.60s/ at %zu: %s", pat, (size_t)eo,
                         (char *)msg);
    }
    (void)pcre2_jit_compile(re, PCRE2_JIT_COMPLETE); /* interpreter fallback if it fails */
    *out = re;
    return SD_OK;
}

/* pattern object {"String": s} or {"Regex": r}. */
static sd_status pattern_of(const json_t *p, const char **s, size_t *len, bool *is_regex, char *err, size_t errlen)
{
    json_t *v = json_object_get(p, "String");
    *is_regex = false;
    if (!json_is_string(v)) {
        v = json_object_get(p, "Regex");
        *is_regex = true;
    }
    if (!json_is_string(v))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: pattern is neither String nor Regex");
    *s = json_string_value(v);
    *len = json_string_length(v);
    return SD_OK;
}

/* ---- model ----------------------------------------------------------------------- */

/* Max id among the vocab and added tokens → vocab_size and the id arrays. */
static sd_status alloc_ids(sd_tok *t, const json_t *vocab, const json_t *added, char *err, size_t errlen)
{
    json_int_t max = -1;
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)vocab, k, v)
    {
        if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > INT32_MAX / 2)
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: bad id for vocab entry '%s'", k);
        if (json_integer_value(v) > max) max = json_integer_value(v);
    }
    size_t i;
    json_array_foreach(added, i, v)
    {
        json_int_t id = json_integer_value(json_object_get(v, "id"));
        if (id < 0 || id > INT32_MAX / 2) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: bad added token id");
        if (id > max) max = id;
    }
    t->vocab_size = (int)(max + 1);
    t->id_str = calloc((size_t)t->vocab_size + 1, sizeof *t->id_str);
    t->id_len = calloc((size_t)t->vocab_size + 1, sizeof *t->id_len);
    t->id_flags = calloc((size_t)t->vocab_size + 1, 1);
    if (!t->id_str || !t->id_len || !t->id_flags) return SD_ERR_NOMEM;
    return SD_OK;
}

static sd_status load_vocab(sd_tok *t, const json_t *vocab, uint64_t *fp)
{
    if (tk_smap_init(&t->vocab, json_object_size(vocab)) != SD_OK) return SD_ERR_NOMEM;
    for (void *it = json_object_iter((json_t *)vocab); it; it = json_object_iter_next((json_t *)vocab, it)) {
        size_t len = json_object_iter_key_len(it);
        int32_t id = (int32_t)json_integer_value(json_object_iter_value(it));
        char *s = arena_dup(t, json_object_iter_key(it), len);
        if (!s) return SD_ERR_NOMEM;
        tk_smap_put(&t->vocab, s, len, id);
        t->id_str[id] = s;
        t->id_len[id] = (uint32_t)len;
    }
    for (int id = 0; id < t->vocab_size; id++) { /* id order, independent of key order */
        fp_bytes(fp, &id, sizeof id);
        if (t->id_str[id]) fp_bytes(fp, t->id_str[id], t->id_len[id] + 1);
    }
    return SD_OK;
}

/* Splits merge i (either "a b" or ["a", "b"]) into its two halves. */
static bool merge_halves(const json_t *m, const char **a, size_t *al, const char **b, size_t *bl)
{
    if (json_is_array(m) && json_array_size(m) == 2) {
        json_t *x = json_array_get(m, 0), *y = json_array_get(m, 1);
        if (!json_is_string(x) || !json_is_string(y)) return false;
        *a = json_string_value(x), *al = json_string_length(x);
        *b = json_string_value(y), *bl = json_string_length(y);
        return true;
    }
    if (!json_is_string(m)) return false;
    const char *s = json_string_value(m), *sp = strchr(s, ' ');
    if (!sp || strchr(sp + 1, ' ')) return false;
    *a = s, *al = (size_t)(sp - s);
    *b = sp + 1, *bl = json_string_length(m) - *al - 1;
    return true;
}

static sd_status load_merges(sd_tok *t, const json_t *merges, uint64_t *fp, char *err, size_t errlen)
{
    size_t n = json_array_size(merges), i;
    if (tk_mmap_init(&t->merges, n) != SD_OK) return SD_ERR_NOMEM;
    sd_buf cat = {0};
    json_t *m;
    sd_status st = SD_OK;
    json_array_foreach(merges, i, m)
    {
        const char *a, *b;
        size_t al, bl;
        if (!merge_halves(m, &a, &al, &b, &bl)) {
            st = sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: merge %zu is malformed", i);
            break;
        }
        cat.len = 0;
        if (sd_buf_add(&cat, a, al) || sd_buf_add(&cat, b, bl)) {
            st = SD_ERR_NOMEM;
            break;
        }
        int32_t ia = tk_smap_get(&t->vocab, a, al), ib = tk_smap_get(&t->vocab, b, bl);
        int32_t ic = tk_smap_get(&t->vocab, cat.p, cat.len);
        if (ia < 0 || ib < 0 || ic < 0) {
            st = sd_seterr(err, errlen, SD_ERR_FORMAT,
                           "tokenizer: merge %zu ('%.*s' + '%.*s') uses a token not in the vocab", i, (int)al, a,
                           (int)bl, b);
            break;
        }
        tk_mmap_put(&t->merges, ia, ib, (int32_t)i, ic);
        int32_t rec[2] = {ia, ib};
        fp_bytes(fp, rec, sizeof rec);
    }
    sd_buf_free(&cat);
    return st;
}

static sd_status load_model(sd_tok *t, const json_t *model, uint64_t *fp, char *err, size_t errlen)
{
    const char *type = jtype(model);
    json_t *vocab = json_object_get(model, "vocab"), *merges = json_object_get(model, "merges");
    if (type && strcmp(type, "BPE") != 0)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: model type '%s' is not supported (only BPE)",
                         type);
    if (!json_is_object(vocab) || !json_is_array(merges))
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: model is not a BPE model with vocab and merges");
    json_t *drop = json_object_get(model, "dropout");
    if (json_is_number(drop) && json_number_value(drop) > 0.0)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: BPE dropout is not supported");
    const char *pre = json_string_value(json_object_get(model, "continuing_subword_prefix"));
    const char *suf = json_string_value(json_object_get(model, "end_of_word_suffix"));
    if ((pre && *pre) || (suf && *suf))
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "tokenizer: BPE continuing_subword_prefix / end_of_word_suffix are not supported");
    t->byte_fallback = jbool(model, "byte_fallback", false);
    t->fuse_unk = jbool(model, "fuse_unk", false);
    t->ignore_merges = jbool(model, "ignore_merges", false);
    sd_status st = load_vocab(t, vocab, fp);
    if (st == SD_OK) st = load_merges(t, merges, fp, err, errlen);
    if (st != SD_OK) return st;
    const char *unk = json_string_value(json_object_get(model, "unk_token"));
    t->unk_id = unk ? tk_smap_get(&t->vocab, unk, strlen(unk)) : -1;
    for (int b = 0; b < 256; b++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", b);
        t->fallback_id[b] = tk_smap_get(&t->vocab, name, 6);
    }
    uint8_t flags[4] = {t->byte_fallback, t->fuse_unk, t->ignore_merges, 0};
    fp_bytes(fp, flags, sizeof flags);
    fp_bytes(fp, &t->unk_id, sizeof t->unk_id);
    return SD_OK;
}

/* ---- normalizer -------------------------------------------------------------------- */

static sd_status add_norm(sd_tok *t, const json_t *n, char *err, size_t errlen);

static sd_status push_norm(sd_tok *t, tk_norm nm)
{
    tk_norm *nn = realloc(t->norms, (size_t)(t->n_norms + 1) * sizeof *nn);
    if (!nn) return SD_ERR_NOMEM;
    t->norms = nn;
    t->norms[t->n_norms++] = nm;
    return SD_OK;
}

static sd_status add_replace_norm(sd_tok *t, const json_t *n, char *err, size_t errlen)
{
    const char *p;
    size_t pl;
    bool is_re;
    sd_status st = pattern_of(json_object_get(n, "pattern"), &p, &pl, &is_re, err, errlen);
    json_t *c = json_object_get(n, "content");
    if (st != SD_OK) return st;
    if (!json_is_string(c)) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: Replace without content");
    tk_norm nm = {.kind = TK_NORM_REPLACE};
    nm.a = arena_dup(t, p, pl), nm.alen = pl;
    nm.b = arena_dup(t, json_string_value(c), json_string_length(c)), nm.blen = json_string_length(c);
    if (!nm.a || !nm.b) return SD_ERR_NOMEM;
    if (is_re && (st = compile_re(p, pl, false, &nm.re, err, errlen)) != SD_OK) return st;
    if (!is_re && pl == 0) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: empty Replace pattern");
    return push_norm(t, nm);
}

static sd_status add_norm(sd_tok *t, const json_t *n, char *err, size_t errlen)
{
    const char *type = jtype(n);
    if (!type) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: normalizer without type");
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(n, "normalizers"), i, c)
        {
            sd_status st = add_norm(t, c, err, errlen);
            if (st != SD_OK) return st;
        }
        return SD_OK;
    }
    if (!strcmp(type, "NFC")) return push_norm(t, (tk_norm){.kind = TK_NORM_NFC});
    if (!strcmp(type, "NFD")) return push_norm(t, (tk_norm){.kind = TK_NORM_NFD});
    if (!strcmp(type, "NFKC")) return push_norm(t, (tk_norm){.kind = TK_NORM_NFKC});
    if (!strcmp(type, "NFKD")) return push_norm(t, (tk_norm){.kind = TK_NORM_NFKD});
    if (!strcmp(type, "Replace")) return add_replace_norm(t, n, err, errlen);
    if (!strcmp(type, "Prepend")) {
        json_t *p = json_object_get(n, "prepend");
        if (!json_is_string(p)) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: Prepend without prepend");
        tk_norm nm = {.kind = TK_NORM_PREPEND, .alen = json_string_length(p)};
        if (!(nm.a = arena_dup(t, json_string_value(p), nm.alen))) return SD_ERR_NOMEM;
        return push_norm(t, nm);
    }
    return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: normalizer '%s' is not supported", type);
}

/* ---- pre-tokenizer ----------------------------------------------------------------- */

static const char GPT2_RE[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static sd_status add_split(sd_tok *t, const json_t *p, tk_pretok *pt, char *err, size_t errlen)
{
    static const char *names[] = {"Removed", "Isolated", "MergedWithPrevious", "MergedWithNext", "Contiguous"};
    const char *pat, *beh = json_string_value(json_object_get(p, "behavior"));
    size_t pl;
    bool is_re;
    (void)t;
    sd_status st = pattern_of(json_object_get(p, "pattern"), &pat, &pl, &is_re, err, errlen);
    if (st != SD_OK) return st;
    pt->kind = TK_PT_SPLIT;
    pt->behavior = -1;
    for (int i = 0; beh && i < 5; i++)
        if (!strcmp(beh, names[i])) pt->behavior = i;
    if (pt->behavior < 0)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: Split behavior '%s' is not supported",
                         beh ? beh : "(none)");
    pt->invert = jbool(p, "invert", false);
    return compile_re(pat, pl, !is_re, &pt->re, err, errlen);
}

static sd_status add_pretok(sd_tok *t, const json_t *p, char *err, size_t errlen)
{
    const char *type = jtype(p);
    if (!type) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: pre_tokenizer without type");
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(p, "pretokenizers"), i, c)
        {
            sd_status st = add_pretok(t, c, err, errlen);
            if (st != SD_OK) return st;
        }
        return SD_OK;
    }
    if (t->n_pts == TK_MAX_PRETOK)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: too many pre-tokenizers");
    tk_pretok *pt = &t->pts[t->n_pts];
    memset(pt, 0, sizeof *pt);
    sd_status st = SD_OK;
    if (!strcmp(type, "Split")) {
        st = add_split(t, p, pt, err, errlen);
    } else if (!strcmp(type, "ByteLevel")) {
        pt->kind = TK_PT_BYTELEVEL;
        pt->add_prefix_space = jbool(p, "add_prefix_space", true);
        if (jbool(p, "use_regex", true)) st = compile_re(GPT2_RE, sizeof GPT2_RE - 1, false, &pt->re, err, errlen);
    } else {
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: pre_tokenizer '%s' is not supported", type);
    }
    if (st == SD_OK) t->n_pts++;
    else if (pt->re) pcre2_code_free(pt->re);
    return st;
}

/* ---- post-processor ------------------------------------------------------------------- */

static sd_status append_ids(int32_t **arr, int *n, const int32_t *ids, int k)
{
    int32_t *na = realloc(*arr, (size_t)(*n + k + 1) * sizeof *na);
    if (!na) return SD_ERR_NOMEM;
    if (k > 0) memcpy(na + *n, ids, (size_t)k * sizeof *ids);
    *arr = na;
    *n += k;
    return SD_OK;
}

/* TemplateProcessing "single": ids of the SpecialTokens before / after $A. */
static sd_status add_template(sd_tok *t, const json_t *p, int32_t **pre, int *npre, int32_t **post, int *npost,
                              char *err, size_t errlen)
{
    json_t *single = json_object_get(p, "single"), *specials = json_object_get(p, "special_tokens"), *it;
    bool seen_a = false;
    size_t i;
    (void)t;
    json_array_foreach(single, i, it)
    {
        if (json_object_get(it, "Sequence")) {
            seen_a = true;
            continue;
        }
        const char *name = json_string_value(json_object_get(json_object_get(it, "SpecialToken"), "id"));
        json_t *ids = json_object_get(json_object_get(specials, name ? name : ""), "ids"), *v;
        if (!name || !json_is_array(ids))
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: TemplateProcessing item %zu is malformed", i);
        size_t j;
        json_array_foreach(ids, j, v)
        {
            int32_t id = (int32_t)json_integer_value(v);
            if (id < 0 || id >= t->vocab_size)
                return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: special token '%s' id out of range", name);
            sd_status st = seen_a ? append_ids(post, npost, &id, 1) : append_ids(pre, npre, &id, 1);
            if (st != SD_OK) return st;
        }
    }
    return SD_OK;
}

/* Applies one post-processor around the ids built so far (pre + A + post). */
static sd_status add_post(sd_tok *t, const json_t *p, char *err, size_t errlen)
{
    const char *type = jtype(p);
    int32_t *pre = NULL, *post = NULL;
    int npre = 0, npost = 0;
    sd_status st = SD_OK;
    if (!type) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: post_processor without type");
    if (!strcmp(type, "ByteLevel")) return SD_OK; /* offsets only */
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(p, "processors"), i, c)
        {
            if ((st = add_post(t, c, err, errlen)) != SD_OK) return st;
        }
        return SD_OK;
    }
    if (!strcmp(type, "TemplateProcessing")) {
        st = add_template(t, p, &pre, &npre, &post, &npost, err, errlen);
    } else if (!strcmp(type, "RobertaProcessing") || !strcmp(type, "BertProcessing")) {
        int32_t cls = (int32_t)json_integer_value(json_array_get(json_object_get(p, "cls"), 1));
        int32_t sep = (int32_t)json_integer_value(json_array_get(json_object_get(p, "sep"), 1));
        st = append_ids(&pre, &npre, &cls, 1);
        if (st == SD_OK) st = append_ids(&post, &npost, &sep, 1);
    } else {
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: post_processor '%s' is not supported", type);
    }
    /* a later processor wraps the earlier result: new pre + old pre, old post + new post */
    if (st == SD_OK) st = append_ids(&pre, &npre, t->pre_ids, t->n_pre);
    if (st == SD_OK) st = append_ids(&t->post_ids, &t->n_post, post, npost);
    if (st == SD_OK) {
        free(t->pre_ids);
        t->pre_ids = pre;
        t->n_pre = npre;
        pre = NULL;
    }
    free(pre);
    free(post);
    return st;
}

/* ---- decoder ------------------------------------------------------------------------- */

static sd_status push_dop(sd_tok *t, tk_dop d)
{
    tk_dop *nd = realloc(t->dops, (size_t)(t->n_dops + 1) * sizeof *nd);
    if (!nd) return SD_ERR_NOMEM;
    t->dops = nd;
    t->dops[t->n_dops++] = d;
    return SD_OK;
}

static sd_status add_strip_dec(sd_tok *t, const json_t *d, bool fused, char *err, size_t errlen)
{
    const char *c = json_string_value(json_object_get(d, "content"));
    int start = (int)json_integer_value(json_object_get(d, "start"));
    int stop = (int)json_integer_value(json_object_get(d, "stop"));
    utf8proc_int32_t cp = -1;
    if (!c || utf8proc_iterate((const utf8proc_uint8_t *)c, -1, &cp) <= 0 || start < 0 || stop < 0)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: Strip decoder is malformed");
    if (!fused) return push_dop(t, (tk_dop){.kind = TK_DOP_STRIP, .ch = (uint32_t)cp, .start = start, .stop = stop});
    if (stop != 0 || t->strip_start)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "tokenizer: Strip decoder with stop > 0 after Fuse is not supported");
    t->strip_ch = (uint32_t)cp;
    t->strip_start = start;
    return SD_OK;
}

/* Flattened decoder chain. Supported shape: per-token Replace / Strip, then
 * optionally ByteFallback, then fusing (Fuse or ByteLevel), then a Strip of
 * the whole output's start. *stage: 0 per-token, 1 after ByteFallback, 2 fused. */
static sd_status add_dec(sd_tok *t, const json_t *d, int *stage, char *err, size_t errlen)
{
    const char *type = jtype(d);
    if (!type) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: decoder without type");
    if (!strcmp(type, "Sequence")) {
        size_t i;
        json_t *c;
        json_array_foreach(json_object_get(d, "decoders"), i, c)
        {
            sd_status st = add_dec(t, c, stage, err, errlen);
            if (st != SD_OK) return st;
        }
        return SD_OK;
    }
    if (!strcmp(type, "Strip")) return add_strip_dec(t, d, *stage == 2, err, errlen);
    if (!strcmp(type, "Fuse")) {
        *stage = 2;
        return SD_OK;
    }
    if (!strcmp(type, "ByteLevel") && !t->dec_bytefallback && *stage == 0) {
        t->dec_bytelevel = true;
        *stage = 2;
        return SD_OK;
    }
    if (!strcmp(type, "ByteFallback") && *stage == 0 && !t->dec_bytelevel) {
        t->dec_bytefallback = true;
        *stage = 1;
        return SD_OK;
    }
    if (!strcmp(type, "Replace") && *stage == 0) {
        const char *p;
        size_t pl;
        bool is_re;
        json_t *c = json_object_get(d, "content");
        sd_status st = pattern_of(json_object_get(d, "pattern"), &p, &pl, &is_re, err, errlen);
        if (st != SD_OK) return st;
        if (is_re || !json_is_string(c) || pl == 0)
            return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: only literal Replace decoders are supported");
        tk_dop op = {.kind = TK_DOP_REPLACE, .alen = pl, .blen = json_string_length(c)};
        op.a = arena_dup(t, p, pl);
        op.b = arena_dup(t, json_string_value(c), op.blen);
        if (!op.a || !op.b) return SD_ERR_NOMEM;
        return push_dop(t, op);
    }
    return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "tokenizer: decoder '%s' is not supported here", type);
}

/* ---- added tokens ----------------------------------------------------------------------- */

static sd_status load_added(sd_tok *t, const json_t *added, uint64_t *fp, char *err, size_t errlen)
{
    size_t n = json_array_size(added), i;
    json_t *a;
    sd_buf nb = {0};
    sd_status st = SD_OK;
    t->added = calloc(n + 1, sizeof *t->added);
    if (!t->added) return SD_ERR_NOMEM;
    json_array_foreach(added, i, a)
    {
        json_t *c = json_object_get(a, "content");
        tk_added *x = &t->added[t->n_added];
        if (!json_is_string(c) || json_string_length(c) == 0) {
            st = sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: added token %zu has no content", i);
            break;
        }
        x->id = (int32_t)json_integer_value(json_object_get(a, "id"));
        x->len = json_string_length(c);
        x->special = jbool(a, "special", false);
        x->lstrip = jbool(a, "lstrip", false);
        x->rstrip = jbool(a, "rstrip", false);
        x->single_word = jbool(a, "single_word", false);
        x->normalized = jbool(a, "normalized", !x->special);
        if (!(x->content = arena_dup(t, json_string_value(c), x->len))) {
            st = SD_ERR_NOMEM;
            break;
        }
        x->match = x->content, x->match_len = x->len;
        if (x->normalized && t->n_norms > 0) { /* matched on normalised text, so normalise it too */
            if ((st = tk_normalize(t, x->content, x->len, &nb, err, errlen)) != SD_OK) break;
            if (!(x->match = arena_dup(t, nb.p ? nb.p : "", nb.len))) {
                st = SD_ERR_NOMEM;
                break;
            }
            x->match_len = nb.len;
        }
        t->id_str[x->id] = x->content;
        t->id_len[x->id] = (uint32_t)x->len;
        t->id_flags[x->id] |= TK_FLAG_ADDED | (x->special ? TK_FLAG_SPECIAL : 0);
        uint8_t fl[5] = {x->special, x->lstrip, x->rstrip, x->single_word, x->normalized};
        fp_bytes(fp, &x->id, sizeof x->id);
        fp_bytes(fp, x->content, x->len + 1);
        fp_bytes(fp, fl, sizeof fl);
        t->n_added++;
    }
    sd_buf_free(&nb);
    return st;
}

static int cmp_added(const void *pa, const void *pb, void *ctx)
{
    const tk_added *all = ctx;
    const tk_added *a = &all[*(const int *)pa], *b = &all[*(const int *)pb];
    unsigned char ca = (unsigned char)a->match[0], cb = (unsigned char)b->match[0];
    if (ca != cb) return ca < cb ? -1 : 1;
    if (a->match_len != b->match_len) return a->match_len > b->match_len ? -1 : 1;
    return a->id < b->id ? -1 : a->id > b->id;
}

/* Candidates of one matching pass (normalized or not), by first byte, longest first. */
static sd_status build_aset(sd_tok *t, tk_aset *s, bool normalized)
{
    s->idx = malloc((size_t)(t->n_added + 1) * sizeof *s->idx);
    if (!s->idx) return SD_ERR_NOMEM;
    s->n = 0;
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].normalized == normalized && t->added[i].match_len > 0) s->idx[s->n++] = i;
    qsort_r(s->idx, (size_t)s->n, sizeof *s->idx, cmp_added, t->added);
    int k = 0;
    for (int b = 0; b <= 256; b++) {
        while (k < s->n && (unsigned char)t->added[s->idx[k]].match[0] < b) k++;
        s->first[b] = k;
    }
    return SD_OK;
}

/* GPT-2's bytes_to_unicode: printable bytes map to themselves, the others to
 * 256, 257, ... in byte order. */
static void init_byte_map(sd_tok *t)
{
    int n = 0;
    for (int i = 0; i < 512; i++) t->u2b[i] = -1;
    for (int b = 0; b < 256; b++) {
        bool keep = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174);
        t->b2u[b] = (uint16_t)(keep ? b : 256 + n++);
        t->u2b[t->b2u[b]] = (int16_t)b;
    }
}

/* ---- top level ---------------------------------------------------------------------------- */

static sd_status build(sd_tok *t, const json_t *root, char *err, size_t errlen)
{
    json_t *model = json_object_get(root, "model"), *added = json_object_get(root, "added_tokens");
    json_t *norm = json_object_get(root, "normalizer"), *pre = json_object_get(root, "pre_tokenizer");
    json_t *post = json_object_get(root, "post_processor"), *dec = json_object_get(root, "decoder");
    uint64_t fp = 1469598103934665603ull;
    sd_status st;
    int stage = 0;
    if (!json_is_object(model)) return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: no model section");
    if (added && !json_is_array(added))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: added_tokens is not an array");
    json_t *vocab = json_object_get(model, "vocab");
    if (json_is_object(vocab) && (st = alloc_ids(t, vocab, added, err, errlen)) != SD_OK) return st;
    if ((st = load_model(t, model, &fp, err, errlen)) != SD_OK) return st;
    if (norm && !json_is_null(norm) && (st = add_norm(t, norm, err, errlen)) != SD_OK) return st;
    if ((st = load_added(t, added, &fp, err, errlen)) != SD_OK) return st;
    if ((st = build_aset(t, &t->raw_set, false)) != SD_OK) return st;
    if ((st = build_aset(t, &t->norm_set, true)) != SD_OK) return st;
    if (pre && !json_is_null(pre) && (st = add_pretok(t, pre, err, errlen)) != SD_OK) return st;
    if (post && !json_is_null(post) && (st = add_post(t, post, err, errlen)) != SD_OK) return st;
    t->has_decoder = dec && !json_is_null(dec);
    if (t->has_decoder && (st = add_dec(t, dec, &stage, err, errlen)) != SD_OK) return st;
    fp_json(&fp, norm);
    fp_json(&fp, pre);
    fp_json(&fp, post);
    fp_json(&fp, dec);
    t->fingerprint = fp;
    return SD_OK;
}

/* Padding and truncation sections are ignored: the server never pads, and it
 * enforces context limits itself. */
sd_status sd_tok_load(const char *path, sd_tok **out, char *err, size_t errlen)
{
    char *buf = NULL;
    size_t len = 0;
    *out = NULL;
    if (!path) return sd_seterr(err, errlen, SD_ERR_ARG, "tokenizer: no path");
    char msg[256];
    sd_status st = sd_read_file(path, (size_t)1 << 31, &buf, &len, msg, sizeof msg);
    if (st != SD_OK) return sd_seterr(err, errlen, st, "tokenizer: %s", msg);
    json_error_t je;
    json_t *root = json_loadb(buf ? buf : "", len, JSON_ALLOW_NUL, &je);
    free(buf);
    if (!root)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: %s: invalid JSON at line %d: %s", path, je.line,
                         je.text);
    sd_tok *t = calloc(1, sizeof *t);
    if (!t) {
        json_decref(root);
        return SD_ERR_NOMEM;
    }
    t->unk_id = -1;
    init_byte_map(t);
    st = json_is_object(root) ? build(t, root, err, errlen)
                              : sd_seterr(err, errlen, SD_ERR_FORMAT, "tokenizer: %s is not a JSON object", path);
    json_decref(root);
    if (st == SD_ERR_NOMEM) sd_seterr(err, errlen, st, "tokenizer: out of memory loading %s", path);
    if (st != SD_OK) {
        sd_tok_free(t);
        return st;
    }
    *out = t;
    return SD_OK;
}

void sd_tok_free(sd_tok *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_norms; i++)
        if (t->norms[i].re) pcre2_code_free(t->norms[i].re);
    for (int i = 0; i < t->n_pts; i++)
        if (t->pts[i].re) pcre2_code_free(t->pts[i].re);
    for (int i = 0; i < t->n_blocks; i++) free(t->blocks[i]);
    free(t->blocks);
    free(t->norms);
    free(t->id_str);
    free(t->id_len);
    free(t->id_flags);
    free(t->vocab.e);
    free(t->merges.e);
    free(t->added);
    free(t->raw_set.idx);
    free(t->norm_set.idx);
    free(t->pre_ids);
    free(t->post_ids);
    free(t->dops);
    free(t);
}
