/* test_tokenizer.c — Check suite for the tokenizer module (common/tokenizer/tokenizer.c,
 * tok_load.c, tok_encode.c).
 *
 * Golden data: tests/fixtures/tokenizer_cases.json, produced by Hugging Face
 * `tokenizers` from the Qwen3, Llama 3 and Llama 2 tokenizer.json files that
 * the build unpacks into <build>/fixtures/tokenizers/ (see
 * tests/fixtures/REFERENCE.md). `decoded` / `decoded_skip_special` are HF's
 * decode of `ids` (the fixture's Llama 2 "<s>[INST]" case shows a single
 * "<s>", so they were not made from ids_with_special). Every case is checked
 * for encode with and without special tokens, decode with and without
 * skip_special, and incremental decoding. The demo tokenizer
 * (models/tinycode-16m) is checked by round trips and ids worked out by hand
 * from its vocab. */
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"
#include "tokenizer.h"

static const char *const NAMES[] = {"qwen3", "llama3", "llama2"};

static sd_tok *load_named(const char *name)
{
    char rel[128], path[1024], err[256];
    sd_tok *tok = NULL;
    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", name);
    tu_fixture_bin(path, sizeof path, rel);
    sd_status st = sd_tok_load(path, &tok, err, sizeof err);
    ck_assert_msg(st == SD_OK, "loading %s: %s", path, err);
    return tok;
}

static sd_tok *load_tiny(void)
{
    char path[1024], err[256];
    sd_tok *tok = NULL;
    tu_model(path, sizeof path, "tinycode-16m/tokenizer.json");
    ck_assert_msg(sd_tok_load(path, &tok, err, sizeof err) == SD_OK, "%s", err);
    return tok;
}

/* The fixture's case list for one tokenizer; caller decrefs the root. */
static json_t *cases_of(const char *name, json_t **root)
{
    char path[1024];
    json_error_t je;
    tu_fixture(path, sizeof path, "tokenizer_cases.json");
    *root = json_load_file(path, 0, &je);
    ck_assert_msg(*root != NULL, "%s: %s", path, je.text);
    json_t *list = json_object_get(*root, name);
    ck_assert(json_is_array(list) && json_array_size(list) > 0);
    return list;
}

static int32_t *ids_of(const json_t *arr, size_t *n)
{
    *n = json_array_size(arr);
    int32_t *ids = malloc((*n + 1) * sizeof *ids);
    for (size_t i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, i));
    return ids;
}

static bool same_ids(const int32_t *a, size_t na, const int32_t *b, size_t nb)
{
    return na == nb && (na == 0 || memcmp(a, b, na * sizeof *a) == 0);
}

static bool valid_utf8(const char *s, size_t n)
{
    json_t *j = json_stringn(s, n); /* jansson validates UTF-8 for us */
    bool ok = j != NULL;
    json_decref(j);
    return ok;
}

/* ---- golden cases ------------------------------------------------------------- */

/* Encodes text and compares with the expected array; prints a diff line. */
static int check_encode(const sd_tok *tok, const char *name, const char *text, const json_t *exp, bool special)
{
    int32_t *got = NULL;
    size_t ng = 0, ne;
    char err[256];
    sd_status st = sd_tok_encode(tok, text, strlen(text), special, &got, &ng, err, sizeof err);
    int32_t *want = ids_of(exp, &ne);
    int bad = st != SD_OK || !same_ids(got, ng, want, ne);
    if (bad)
        fprintf(stderr, "%s: encode(special=%d) mismatch for %s (got %zu ids, want %zu)\n", name, special, text, ng,
                ne);
    free(got);
    free(want);
    return bad;
}

static int check_decode(const sd_tok *tok, const char *name, const json_t *ids, bool skip, const char *exp)
{
    size_t n, len;
    int32_t *v = ids_of(ids, &n);
    char *text = NULL, err[256];
    sd_status st = sd_tok_decode(tok, v, n, skip, &text, &len, err, sizeof err);
    int bad = st != SD_OK || len != strlen(exp) || memcmp(text, exp, len) != 0;
    if (bad) fprintf(stderr, "%s: decode(skip=%d) got \"%s\" want \"%s\"\n", name, skip, text ? text : err, exp);
    free(text);
    free(v);
    return bad;
}

START_TEST(test_golden_cases)
{
    const char *name = NAMES[_i];
    sd_tok *tok = load_named(name);
    json_t *root, *c, *list = cases_of(name, &root);
    size_t i;
    int bad = 0;
    json_array_foreach(list, i, c)
    {
        const char *text = json_string_value(json_object_get(c, "text"));
        const char *dec = json_string_value(json_object_get(c, "decoded"));
        const char *dskip = json_string_value(json_object_get(c, "decoded_skip_special"));
        int b = check_encode(tok, name, text, json_object_get(c, "ids"), false);
        b |= check_encode(tok, name, text, json_object_get(c, "ids_with_special"), true);
        b |= check_decode(tok, name, json_object_get(c, "ids"), false, dec);
        b |= check_decode(tok, name, json_object_get(c, "ids"), true, dskip);
        /* dropping the post-processor's specials again gives the same text */
        b |= check_decode(tok, name, json_object_get(c, "ids_with_special"), true, dskip);
        bad += b;
    }
    fprintf(stderr, "%s: %zu/%zu golden cases pass\n", name, json_array_size(list) - (size_t)bad,
            json_array_size(list));
    ck_assert_msg(bad == 0, "%s: %d golden cases fail", name, bad);
    json_decref(root);
    sd_tok_free(tok);
}
END_TEST

/* ---- incremental decoding ------------------------------------------------------- */

/* Pushes ids one by one; every piece must be valid UTF-8 and the pieces plus
 * the flush must equal sd_tok_decode. Returns 0 when all holds. */
static int stream_matches(const sd_tok *tok, const int32_t *ids, size_t n, bool skip)
{
    char *full = NULL, err[256];
    size_t flen, k;
    const char *p;
    ck_assert_int_eq(sd_tok_decode(tok, ids, n, skip, &full, &flen, err, sizeof err), SD_OK);
    sd_tok_stream *s;
    ck_assert_int_eq(sd_tok_stream_new(tok, skip, &s, NULL, 0), SD_OK);
    char *acc = malloc(flen + 64);
    size_t alen = 0;
    int bad = 0;
    for (size_t i = 0; i <= n && !bad; i++) {
        sd_status st = i < n ? sd_tok_stream_push(s, ids[i], &p, &k) : sd_tok_stream_flush(s, &p, &k);
        if (st != SD_OK || !valid_utf8(p, k) || alen + k > flen) {
            bad = 1;
            break;
        }
        memcpy(acc + alen, p, k);
        alen += k;
    }
    bad |= alen != flen || memcmp(acc, full, flen) != 0;
    free(acc);
    free(full);
    sd_tok_stream_free(s);
    return bad;
}

START_TEST(test_stream_cases)
{
    const char *name = NAMES[_i];
    sd_tok *tok = load_named(name);
    json_t *root, *c, *list = cases_of(name, &root);
    size_t i;
    int bad = 0;
    json_array_foreach(list, i, c)
    {
        for (int w = 0; w < 2; w++) {
            size_t n;
            int32_t *ids = ids_of(json_object_get(c, w ? "ids_with_special" : "ids"), &n);
            for (int skip = 0; skip < 2; skip++) {
                int b = stream_matches(tok, ids, n, skip);
                if (b) fprintf(stderr, "%s: stream mismatch for case %zu (skip=%d)\n", name, i, skip);
                bad += b;
            }
            free(ids);
        }
    }
    ck_assert_msg(bad == 0, "%s: %d stream mismatches", name, bad);
    json_decref(root);
    sd_tok_free(tok);
}
END_TEST

static char *decode_str(const sd_tok *tok, const int32_t *ids, size_t n)
{
    char *text = NULL, err[256];
    size_t len;
    ck_assert_msg(sd_tok_decode(tok, ids, n, false, &text, &len, err, sizeof err) == SD_OK, "%s", err);
    return text;
}

/* Broken UTF-8 becomes U+FFFD like Rust's from_utf8_lossy (ByteLevel) and one
 * U+FFFD per byte (ByteFallback); streams agree and never emit a broken piece. */
START_TEST(test_invalid_utf8_decode)
{
    sd_tok *q = load_named("qwen3");
    /* byte-level characters for bytes E4 B8 ('中' without its last byte), then "a" */
    int32_t ids[] = {sd_tok_token_id(q, "ä"), sd_tok_token_id(q, "¸"), sd_tok_token_id(q, "a")};
    ck_assert(ids[0] >= 0 && ids[1] >= 0 && ids[2] >= 0);
    char *t = decode_str(q, ids, 3);
    ck_assert_str_eq(t, "\xEF\xBF\xBD"
                        "a");
    free(t);
    t = decode_str(q, ids, 2); /* unfinished at the end */
    ck_assert_str_eq(t, "\xEF\xBF\xBD");
    free(t);
    int32_t lone[] = {sd_tok_token_id(q, "Ģ"), ids[2]}; /* byte 0x80 can never start a character */
    ck_assert(lone[0] >= 0);
    t = decode_str(q, lone, 2);
    ck_assert_str_eq(t, "\xEF\xBF\xBD"
                        "a");
    free(t);
    ck_assert_int_eq(stream_matches(q, ids, 3, false), 0);
    ck_assert_int_eq(stream_matches(q, ids, 2, false), 0);
    sd_tok_free(q);

    sd_tok *l = load_named("llama2");
    int32_t fb[] = {sd_tok_token_id(l, "<0xE4>"), sd_tok_token_id(l, "<0xB8>"), sd_tok_token_id(l, "▁a")};
    ck_assert(fb[0] >= 0 && fb[1] >= 0 && fb[2] >= 0);
    t = decode_str(l, fb, 3);
    ck_assert_str_eq(t, "\xEF\xBF\xBD\xEF\xBF\xBD a");
    free(t);
    ck_assert_int_eq(stream_matches(l, fb, 3, false), 0);
    ck_assert_int_eq(stream_matches(l, fb, 2, false), 0);
    sd_tok_free(l);
}
END_TEST

/* ---- demo tokenizer ------------------------------------------------------------- */

static int32_t *enc(const sd_tok *tok, const char *text, size_t *n)
{
    int32_t *ids = NULL;
    char err[256];
    ck_assert_msg(sd_tok_encode(tok, text, strlen(text), false, &ids, n, err, sizeof err) == SD_OK, "%s", err);
    return ids;
}

START_TEST(test_tiny_round_trip)
{
    static const char *const texts[] = {
        "def foo(x):\n    return x + 1\n",
        "#include <stdio.h>\nint main(void) { printf(\"hi\\n\"); return 0; }\n",
        "for (int i = 0; i < n; ++i) {\n\tsum += a[i] * b[i];\n}\n",
        "  leading and trailing  \n\n\t",
        "naïve café — “quotes” … 中文 日本語 한국어 🙂👍🏽",
        "x = {'a': [1, 2.5, -3e10], \"b\": None}  # comment",
        "<|endoftext|>print('after special')<|endoftext|>",
        "",
    };
    sd_tok *tok = load_tiny();
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        size_t n, len;
        int32_t *ids = enc(tok, texts[i], &n);
        char *back = NULL, err[256];
        ck_assert_int_eq(sd_tok_decode(tok, ids, n, false, &back, &len, err, sizeof err), SD_OK);
        ck_assert_str_eq(back, texts[i]);
        ck_assert_int_eq(stream_matches(tok, ids, n, false), 0);
        ck_assert_int_eq(stream_matches(tok, ids, n, true), 0);
        free(back);
        free(ids);
    }
    sd_tok_free(tok);
}
END_TEST

/* GPT-2 regex pre-tokens of "def foo(x):\n    return x + 1\n" are "def", " foo",
 * "(", "x", "):", "\n   " (\s+(?!\S) leaves the last space to " return"),
 * " return", " x", " +", " 1", "\n"; each is one vocab entry. */
START_TEST(test_tiny_hand_checked)
{
    static const char *const toks[] = {"def", "Ġfoo", "(", "x", "):", "ĊĠĠĠ", "Ġreturn", "Ġx", "Ġ+", "Ġ1", "Ċ"};
    sd_tok *tok = load_tiny();
    size_t n;
    int32_t *ids = enc(tok, "def foo(x):\n    return x + 1\n", &n);
    ck_assert_uint_eq(n, sizeof toks / sizeof *toks);
    for (size_t i = 0; i < n; i++) {
        ck_assert_int_eq(ids[i], sd_tok_token_id(tok, toks[i]));
        ck_assert_str_eq(sd_tok_token_str(tok, ids[i]), toks[i]);
    }
    free(ids);
    ids = enc(tok, "<|endoftext|>", &n); /* the special token is matched in the text */
    ck_assert_uint_eq(n, 1);
    ck_assert_int_eq(ids[0], 0);
    ck_assert(sd_tok_is_special(tok, 0));
    free(ids);
    ck_assert_int_eq(sd_tok_bos_id(tok), -1); /* no post-processor */
    sd_tok_free(tok);
}
END_TEST

START_TEST(test_accessors)
{
    sd_tok *q = load_named("qwen3"), *l = load_named("llama2"), *q2 = load_named("qwen3");
    ck_assert_int_eq(sd_tok_vocab_size(q), 151669);
    ck_assert_int_eq(sd_tok_vocab_size(l), 32000);
    ck_assert_int_eq(sd_tok_token_id(q, "<|im_start|>"), 151644);
    ck_assert(sd_tok_is_special(q, 151644));
    ck_assert(!sd_tok_is_special(q, sd_tok_token_id(q, "<think>")));
    ck_assert(!sd_tok_is_special(q, 9707));
    ck_assert_str_eq(sd_tok_token_str(q, 9707), "Hello");
    ck_assert_ptr_null(sd_tok_token_str(q, 151669));
    ck_assert_ptr_null(sd_tok_token_str(q, -1));
    ck_assert_int_eq(sd_tok_token_id(q, "no such token, surely"), -1);
    ck_assert_int_eq(sd_tok_bos_id(q), -1);
    ck_assert_int_eq(sd_tok_bos_id(l), 1);
    ck_assert(sd_tok_fingerprint(q) == sd_tok_fingerprint(q2));
    ck_assert(sd_tok_fingerprint(q) != sd_tok_fingerprint(l));
    sd_tok_free(q);
    sd_tok_free(q2);
    sd_tok_free(l);
    sd_tok_free(NULL);
}
END_TEST

/* ---- added-token flags, through a modified demo tokenizer ---------------------------- */

/* Writes root to a temporary file and loads it; NULL with *st set on failure. */
static sd_tok *load_json(json_t *root, sd_status *st, char *err, size_t errlen)
{
    char path[] = "/tmp/test_tokenizer_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    ck_assert_int_eq(json_dump_file(root, path, 0), 0);
    sd_tok *tok = NULL;
    *st = sd_tok_load(path, &tok, err, errlen);
    unlink(path);
    return tok;
}

static json_t *tiny_json(void)
{
    char path[1024];
    json_error_t je;
    json_t *root = json_load_file(tu_model(path, sizeof path, "tinycode-16m/tokenizer.json"), 0, &je);
    ck_assert_ptr_nonnull(root);
    return root;
}

static void add_token(json_t *root, int id, const char *content, bool lstrip, bool rstrip, bool single)
{
    json_t *a = json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", id, "content", content, "single_word", single,
                          "lstrip", lstrip, "rstrip", rstrip, "normalized", 0, "special", 1);
    json_array_append_new(json_object_get(root, "added_tokens"), a);
}

static void expect_ids(const sd_tok *tok, const char *text, const int32_t *want, size_t nw)
{
    size_t n;
    int32_t *got = enc(tok, text, &n);
    ck_assert_msg(same_ids(got, n, want, nw), "unexpected ids for \"%s\"", text);
    free(got);
}

START_TEST(test_added_token_flags)
{
    json_t *root = tiny_json();
    add_token(root, 9000, "<mask>", true, false, false);
    add_token(root, 9001, "<r>", false, true, false);
    add_token(root, 9002, "ab", false, false, true);
    char err[256];
    sd_status st;
    sd_tok *tok = load_json(root, &st, err, sizeof err);
    ck_assert_msg(st == SD_OK, "%s", err);
    json_decref(root);
    size_t n;
    int32_t *a = enc(tok, "a", &n), *b_ = enc(tok, " b", &n);
    int32_t w1[] = {a[0], 9000, b_[0]}; /* lstrip eats the space before <mask> */
    expect_ids(tok, "a   <mask> b", w1, 3);
    int32_t w2[] = {a[0], 9001, sd_tok_token_id(tok, "b")}; /* rstrip eats the spaces after */
    expect_ids(tok, "a<r>   b", w2, 3);
    int32_t *sp = enc(tok, " ", &n);
    int32_t w3[] = {a[0], sp[0], 9002, b_[0]}; /* single_word: matched between spaces... */
    expect_ids(tok, "a ab b", w3, 4);
    size_t nx;
    int32_t *x = enc(tok, "xab abc", &nx); /* ...but not inside a word */
    for (size_t i = 0; i < nx; i++) ck_assert_int_ne(x[i], 9002);
    free(x);
    free(a);
    free(b_);
    free(sp);
    sd_tok_free(tok);
}
END_TEST

/* normalized=true: the token's content goes through the normaliser too (for
 * Llama 2: Prepend("▁") + Replace(" " → "▁") makes "hi there" "▁hi▁there")
 * and is matched in the normalised text. */
START_TEST(test_normalized_added_token)
{
    char path[1024], err[256];
    json_error_t je;
    json_t *root = json_load_file(tu_fixture_bin(path, sizeof path, "tokenizers/llama2/tokenizer.json"), 0, &je);
    ck_assert_ptr_nonnull(root);
    json_t *a = json_pack("{s:i, s:s, s:b, s:b, s:b, s:b, s:b}", "id", 32000, "content", "hi there", "single_word", 0,
                          "lstrip", 0, "rstrip", 0, "normalized", 1, "special", 0);
    json_array_append_new(json_object_get(root, "added_tokens"), a);
    sd_status st;
    sd_tok *tok = load_json(root, &st, err, sizeof err);
    ck_assert_msg(st == SD_OK, "%s", err);
    json_decref(root);
    size_t n, m;
    int32_t *say = enc(tok, "say", &n), *got = enc(tok, "say hi there", &m);
    ck_assert_uint_eq(m, n + 1);
    ck_assert(same_ids(got, n, say, n));
    ck_assert_int_eq(got[n], 32000);
    ck_assert(!sd_tok_is_special(tok, 32000));
    free(say);
    free(got);
    sd_tok_free(tok);
}
END_TEST

/* ---- errors ------------------------------------------------------------------------- */

static sd_status load_text(const char *text, char *err, size_t errlen)
{
    char path[] = "/tmp/test_tokenizer_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    sd_tok *tok = NULL;
    sd_status st = sd_tok_load(path, &tok, err, errlen);
    unlink(path);
    ck_assert(st == SD_OK || tok == NULL);
    sd_tok_free(tok);
    return st;
}

START_TEST(test_load_errors)
{
    char err[256] = "";
    sd_tok *tok = (sd_tok *)1;
    ck_assert_int_eq(sd_tok_load("/nonexistent/tokenizer.json", &tok, err, sizeof err), SD_ERR_IO);
    ck_assert_ptr_null(tok);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/tokenizer.json"));
    ck_assert_int_eq(load_text("{\"model\": {\"type\": \"BPE\", ", err, sizeof err), SD_ERR_FORMAT);
    ck_assert_int_eq(load_text("[1, 2]", err, sizeof err), SD_ERR_FORMAT);
    ck_assert_int_eq(load_text("{\"model\": {\"type\": \"WordPiece\", \"vocab\": {\"a\": 0}}}", err, sizeof err),
                     SD_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "WordPiece"));
    ck_assert_int_eq(load_text("{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}", err, sizeof err),
                     SD_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "Unigram"));
    ck_assert_int_eq(
        load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [\"a b\"]}}", err, sizeof err),
        SD_ERR_FORMAT);
    ck_assert_int_eq(load_text("{\"normalizer\": {\"type\": \"BertNormalizer\"}, \"model\": {\"type\": \"BPE\", "
                               "\"vocab\": {\"a\": 0}, \"merges\": []}}",
                               err, sizeof err),
                     SD_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "BertNormalizer"));
    ck_assert_int_eq(
        load_text("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}", err, sizeof err), SD_OK);
}
END_TEST

START_TEST(test_call_errors)
{
    sd_tok *tok = load_tiny();
    char err[256] = "", *text = NULL;
    int32_t *ids = NULL;
    size_t n = 0, len = 0;
    static const char bad[][4] = {"\xC3", "\xC0\x80", "\xED\xA0\x80", "\xF5\x80\x80", "a\xFF"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) {
        ck_assert_int_eq(sd_tok_encode(tok, bad[i], strlen(bad[i]), false, &ids, &n, err, sizeof err), SD_ERR_FORMAT);
        ck_assert_ptr_null(ids);
    }
    int32_t out_of_range[] = {1, 8192};
    ck_assert_int_eq(sd_tok_decode(tok, out_of_range, 2, false, &text, &len, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(text);
    int32_t negative[] = {-1};
    ck_assert_int_eq(sd_tok_decode(tok, negative, 1, false, &text, &len, err, sizeof err), SD_ERR_ARG);
    sd_tok_stream *s;
    ck_assert_int_eq(sd_tok_stream_new(tok, false, &s, NULL, 0), SD_OK);
    const char *p;
    size_t k;
    ck_assert_int_eq(sd_tok_stream_push(s, 8192, &p, &k), SD_ERR_ARG);
    ck_assert_int_eq(sd_tok_stream_push(s, 1, &p, &k), SD_OK); /* still usable */
    sd_tok_stream_free(s);
    sd_tok_stream_free(NULL);
    err[0] = '\0';
    ck_assert_int_eq(sd_tok_stream_new(NULL, false, &s, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(s);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(sd_tok_encode(tok, "", 0, true, &ids, &n, err, sizeof err), SD_OK);
    ck_assert_uint_eq(n, 0);
    free(ids);
    /* nothing to decode, a stream flushed before any token: empty, no pointer arithmetic on NULL */
    ck_assert_int_eq(sd_tok_decode(tok, NULL, 0, false, &text, &len, err, sizeof err), SD_OK);
    ck_assert_uint_eq(len, 0);
    free(text);
    ck_assert_int_eq(sd_tok_stream_new(tok, false, &s, NULL, 0), SD_OK);
    ck_assert_int_eq(sd_tok_stream_flush(s, &p, &k), SD_OK);
    ck_assert_uint_eq(k, 0);
    sd_tok_stream_free(s);
    sd_tok_free(tok);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tokenizer");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_loop_test(tc, test_golden_cases, 0, 3);
    tcase_add_loop_test(tc, test_stream_cases, 0, 3);
    tcase_add_test(tc, test_invalid_utf8_decode);
    tcase_add_test(tc, test_tiny_round_trip);
    tcase_add_test(tc, test_tiny_hand_checked);
    tcase_add_test(tc, test_accessors);
    tcase_add_test(tc, test_added_token_flags);
    tcase_add_test(tc, test_normalized_added_token);
    tcase_add_test(tc, test_load_errors);
    tcase_add_test(tc, test_call_errors);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
