/* tok_internal.h — private structures of the tokenizer module, shared by
 * tok_core.c (UTF-8 helpers, hash tables), tok_load.c (tokenizer.json →
 * sd_tok), tok_encode.c (text → ids) and tokenizer.c (accessors, decoding,
 * streaming). Dependencies run one way: tok_load → tok_encode → tok_core,
 * tokenizer → tok_core. Not part of the public API: include tokenizer.h.
 *
 * An sd_tok is built once by sd_tok_load and never mutated afterwards, so all
 * readers may share it between threads; per-call scratch lives in the
 * callers' own contexts (tk_enc, sd_tok_stream). */
#ifndef SD_TOK_INTERNAL_H
#define SD_TOK_INTERNAL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "strbuf.h"
#include "tokenizer.h"

/* ---- hash maps ------------------------------------------------------------ */

/* String → id, open addressing; keys point into the tokenizer's arena. */
typedef struct {
    const char *s;
    uint32_t len;
    int32_t id; /* -1 marks an empty slot */
} tk_sent;

typedef struct {
    tk_sent *e;
    size_t cap; /* power of two */
    size_t n;
} tk_smap;

/* (left id, right id) → (rank, merged id). */
typedef struct {
    uint64_t key; /* UINT64_MAX marks an empty slot */
    int32_t rank;
    int32_t id;
} tk_ment;

typedef struct {
    tk_ment *e;
    size_t cap;
    size_t n;
} tk_mmap;

/* Tables (tok_core.c). init sizes a table for n keys (SD_ERR_NOMEM); put
 * inserts or overwrites (a later duplicate wins, as HF's HashMap collect);
 * keys of an smap are not copied and must outlive it (the arena). */
sd_status tk_smap_init(tk_smap *m, size_t n);
void tk_smap_put(tk_smap *m, const char *s, size_t len, int32_t id);
/* Id of the len-byte string s, or -1. */
int32_t tk_smap_get(const tk_smap *m, const char *s, size_t len);
sd_status tk_mmap_init(tk_mmap *m, size_t n);
void tk_mmap_put(tk_mmap *m, int32_t left, int32_t right, int32_t rank, int32_t id);
/* Merge (left, right): fills rank and merged id; false when no such merge. */
bool tk_mmap_get(const tk_mmap *m, int32_t left, int32_t right, int32_t *rank, int32_t *id);

/* ---- pipeline components -------------------------------------------------- */

enum { TK_NORM_NFC, TK_NORM_NFD, TK_NORM_NFKC, TK_NORM_NFKD, TK_NORM_PREPEND, TK_NORM_REPLACE };

typedef struct {
    int kind;
    char *a; /* PREPEND: the prefix; REPLACE: the literal pattern (re == NULL) */
    size_t alen;
    char *b; /* REPLACE: the replacement */
    size_t blen;
    pcre2_code *re; /* REPLACE with a Regex pattern */
} tk_norm;

enum { TK_PT_SPLIT, TK_PT_BYTELEVEL };
enum { TK_SPLIT_REMOVED, TK_SPLIT_ISOLATED, TK_SPLIT_PREV, TK_SPLIT_NEXT, TK_SPLIT_CONTIGUOUS };

typedef struct {
    int kind;
    pcre2_code *re; /* SPLIT: the pattern; BYTELEVEL with use_regex: the GPT-2 regex */
    int behavior;   /* SPLIT: TK_SPLIT_* */
    bool invert;
    bool add_prefix_space; /* BYTELEVEL */
} tk_pretok;

typedef struct {
    char *content; /* as written in the file; decoded to this */
    size_t len;
    char *match; /* what is matched in the text: content, normalised if normalized */
    size_t match_len;
    int32_t id;
    bool special, lstrip, rstrip, single_word, normalized;
} tk_added;

/* A set of added tokens matched leftmost-longest: candidates are indexed by
 * first byte, longest first. */
typedef struct {
    int *idx; /* indices into sd_tok.added */
    int n;
    int first[257]; /* idx[first[b] .. first[b+1]) start with byte b */
} tk_aset;

/* Per-token decoder steps applied before the stream is fused. */
enum { TK_DOP_REPLACE, TK_DOP_STRIP };

typedef struct {
    int kind;
    char *a; /* REPLACE pattern */
    size_t alen;
    char *b; /* REPLACE content */
    size_t blen;
    uint32_t ch; /* STRIP content character */
    int start, stop;
} tk_dop;

#define TK_MAX_PRETOK 8
#define TK_FLAG_SPECIAL 1u
#define TK_FLAG_ADDED 2u

struct sd_tok {
    int vocab_size;
    char **blocks; /* arena blocks holding every string below */
    int n_blocks;
    size_t cap_blocks;
    size_t block_used, block_cap;

    const char **id_str; /* (vocab_size) token text per id, added tokens win; NULL = gap */
    uint32_t *id_len;    /* (vocab_size) */
    uint8_t *id_flags;   /* (vocab_size) TK_FLAG_* */

    /* BPE model */
    tk_smap vocab;
    tk_mmap merges;
    int32_t fallback_id[256]; /* id of "<0xNN>" or -1 */
    int32_t unk_id;
    bool byte_fallback, fuse_unk, ignore_merges;

    tk_norm *norms;
    int n_norms;
    tk_pretok pts[TK_MAX_PRETOK];
    int n_pts;

    tk_added *added;
    int n_added;
    tk_aset raw_set;  /* normalized=false tokens, matched on the raw text */
    tk_aset norm_set; /* normalized=true tokens, matched on normalised pieces */

    int32_t *pre_ids, *post_ids; /* post-processor with add_special */
    int n_pre, n_post;

    /* decoder */
    bool has_decoder;
    bool dec_bytelevel, dec_bytefallback;
    tk_dop *dops;
    int n_dops;
    uint32_t strip_ch; /* whole-output Strip after Fuse/ByteLevel */
    int strip_start;

    uint16_t b2u[256]; /* GPT-2 bytes_to_unicode: byte → code point */
    int16_t u2b[512];  /* inverse, -1 where not a mapped code point */

    uint64_t fingerprint;
};

/* ---- helpers shared between the files ---------------------------------------- */

/* UTF-8 (tok_core.c). Strict UTF-8 check (no overlongs, surrogates or > U+10FFFF). */
bool tk_utf8_valid(const char *s, size_t n);
/* Continuation bytes needed after lead byte c, with the allowed range of
 * the first one in *lo..*hi (Unicode table 3-7); -1 for bytes that cannot
 * start a character. */
int tk_utf8_need(unsigned char c, unsigned char *lo, unsigned char *hi);
/* Length of the UTF-8 character starting with byte c (1 for invalid lead bytes). */
int tk_utf8_len(unsigned char c);
/* Encodes code point cp into out (4 bytes room); returns the byte count. */
int tk_utf8_put(uint32_t cp, char *out);
/* Applies the normalizer chain (tok_encode.c; tok_load.c normalises the
 * added tokens with it) to s[0..n) into out (out is reset first).
 * With no normalizer the text is copied. */
sd_status tk_normalize(const sd_tok *tok, const char *s, size_t n, sd_buf *out, char *err, size_t errlen);

#endif
