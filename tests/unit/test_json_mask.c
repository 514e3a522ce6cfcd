/* test_json_mask.c — the JSON output constraint (json_mask.c):
 *   - documents accepted whole, every prefix accepted, complete only at the end;
 *   - what RFC 8259 or the bounds refuse is refused at the first bad byte;
 *   - both ways against jansson: random objects jansson writes (compact and
 *     indented) are accepted; random walks over the automaton's accepted
 *     bytes, steered to close, are documents jansson reads;
 *   - the token mask on the demo tokenizer: a token passes iff its bytes
 *     continue the output, EOS only once the object is complete, special
 *     tokens never; masked greedy walks end in a complete object. */
#include <check.h>
#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "json_mask.h"
#include "sampler.h"
#include "testutil.h"
#include "tokenizer.h"

static bool accepts(const char *doc, bool *complete)
{
    sd_json_state st;
    sd_json_init(&st);
    bool ok = sd_json_feed(&st, doc, strlen(doc));
    if (complete) *complete = ok && sd_json_complete(&st);
    return ok;
}

static const char *const GOOD[] = {
    "{}",
    "{ \"a\": 1\t}",
    "{\"a\":[1,-2,3.5,-0.25e+10,0E-3,true,false,null,\"x\"],\"b\":{\"c\":{}}}",
    "{\n  \"k\": \"esc \\\" \\\\ \\/ \\b\\f\\n\\r\\t \\u00e9 \\uABCD\",\n  \"e\": []\n}",
    "{\"utf8\": \"h\xc3\xa9 \xe2\x82\xac \xf0\x9f\x98\x80 \xed\x9f\xbf\"}",
    "{\"n\": 0, \"m\": [[], [[]], {\"x\": [{}]}]}",
    "{\"a\" : 12 , \"b\" :\t1e5 }",
};

START_TEST(documents_and_prefixes)
{
    const char *doc = GOOD[_i];
    size_t n = strlen(doc);
    for (size_t k = 0; k <= n; k++) {
        sd_json_state st;
        sd_json_init(&st);
        ck_assert_msg(sd_json_feed(&st, doc, k), "prefix %zu of %s refused", k, doc);
        ck_assert_msg(sd_json_complete(&st) == (k == n), "prefix %zu of %s: complete %d", k, doc,
                      sd_json_complete(&st));
    }
}
END_TEST

static const char *const BAD[] = {
    "[1]",
    "\"s\"",
    "1",
    "x",
    "{,}",
    "{\"a\" 1}",
    "{\"a\":}",
    "{\"a\":1,}",
    "{\"a\":1 \"b\":2}",
    "{1:2}",
    "{\"a\":01}",
    "{\"a\":1.}",
    "{\"a\":-}",
    "{\"a\":.5}",
    "{\"a\":1e}",
    "{\"a\":+1}",
    "{\"a\":tru}",
    "{\"a\":nul1}",
    "{\"a\":\"\x01\"}",
    "{\"a\":\"\\x\"}",
    "{\"a\":\"\\u12g4\"}",
    "{\"a\":\"\\ud800\"}",
    "{\"a\":\"\\uDC00\"}",
    "{\"a\":\"\xc0\xaf\"}",
    "{\"a\":\"\xed\xa0\x80\"}",
    "{\"a\":\"\xf4\x90\x80\x80\"}",
    "{\"a\":\"\xff\"}",
    "{\"a\":1]",
    "{\"a\":[1}",
    "{} ",
    "{}{}",
    "{\"a\":1}}",
};

START_TEST(refused)
{
    const char *doc = BAD[_i];
    ck_assert_msg(!accepts(doc, NULL), "%s accepted", doc);
}
END_TEST

/* A compact schema's output: no whitespace outside strings, inside them as
 * any character. */
START_TEST(compact)
{
    sd_json_state st;
    static const char *const good[] = {"{}", "{\"a b\":[1,2.5,{\"c\":\" \\t\"}],\"d\":null}"};
    static const char *const bad[] = {"{ ", "{\"a\" :", "{\"a\":1 ", "{\"a\":[1,\n", "{\"a\":1}\n"};
    for (size_t i = 0; i < 2; i++) {
        sd_json_init_schema(&st, sd_json_schema_object_compact());
        ck_assert_msg(sd_json_feed(&st, good[i], strlen(good[i])) && sd_json_complete(&st), "%s", good[i]);
    }
    for (size_t i = 0; i < 5; i++) {
        sd_json_init_schema(&st, sd_json_schema_object_compact());
        ck_assert_msg(!sd_json_feed(&st, bad[i], strlen(bad[i])), "%s accepted", bad[i]);
    }
}
END_TEST

START_TEST(bounds)
{
    char buf[256];
    /* SD_JSON_MAX_WS whitespace bytes in a row, not one more; none before the object */
    buf[0] = '{';
    memset(buf + 1, '\n', SD_JSON_MAX_WS);
    strcpy(buf + 1 + SD_JSON_MAX_WS, "}");
    bool done;
    ck_assert(accepts(buf, &done) && done);
    memset(buf + 1, ' ', SD_JSON_MAX_WS + 1);
    strcpy(buf + 2 + SD_JSON_MAX_WS, "}");
    ck_assert(!accepts(buf, NULL));
    ck_assert(!accepts(" {}", NULL));
    /* nesting: 1 object + 31 arrays fits, one more does not */
    size_t k = 0;
    buf[k++] = '{', buf[k++] = '"', buf[k++] = 'a', buf[k++] = '"', buf[k++] = ':';
    for (int i = 1; i < SD_JSON_MAX_DEPTH; i++) buf[k++] = '[';
    buf[k] = 0;
    ck_assert(accepts(buf, NULL));
    buf[k++] = '[';
    buf[k] = 0;
    ck_assert(!accepts(buf, NULL));
}
END_TEST

/* ---- both ways against jansson -------------------------------------------------------------- */

static json_t *random_value(unsigned *seed, int depth)
{
    int r = rand_r(seed) % (depth > 4 ? 6 : 8);
    switch (r) {
    case 0: return json_integer(rand_r(seed) % 2001 - 1000);
    case 1: return json_real((rand_r(seed) % 100000 - 50000) / 37.0);
    case 2: return rand_r(seed) % 2 ? json_true() : json_false();
    case 3: return json_null();
    case 4:
    case 5: {
        static const char *const words[] = {"",
                                            "plain",
                                            "quote \" back \\ slash",
                                            "tab\tnew\nline",
                                            "caf\xc3\xa9",
                                            "\xe2\x82\xac \xf0\x9f\x98\x80",
                                            "ctl \x01 \x1f"};
        return json_string(words[rand_r(seed) % 7]);
    }
    case 6: {
        json_t *a = json_array();
        for (int i = rand_r(seed) % 4; i > 0; i--) json_array_append_new(a, random_value(seed, depth + 1));
        return a;
    }
    default: {
        json_t *o = json_object();
        for (int i = rand_r(seed) % 4; i > 0; i--) {
            char key[16];
            snprintf(key, sizeof key, "k%d", rand_r(seed) % 50);
            json_object_set_new(o, key, random_value(seed, depth + 1));
        }
        return o;
    }
    }
}

START_TEST(jansson_documents_accepted)
{
    unsigned seed = 7;
    for (int i = 0; i < 2000; i++) {
        json_t *o = json_object();
        for (int j = rand_r(&seed) % 5; j > 0; j--) {
            char key[16];
            snprintf(key, sizeof key, "f%d", j);
            json_object_set_new(o, key, random_value(&seed, 1));
        }
        size_t flags = i % 3 == 0 ? JSON_COMPACT : i % 3 == 1 ? JSON_INDENT(2) : JSON_SORT_KEYS | JSON_INDENT(1);
        char *text = json_dumps(o, flags);
        bool done = false;
        ck_assert_msg(accepts(text, &done) && done, "jansson wrote %s", text);
        free(text);
        json_decref(o);
    }
}
END_TEST

/* A random walk over the accepted bytes; after `open` steps it prefers the
 * bytes that close what is open, so it ends. Returns the length (0 when it
 * got stuck: a state with no accepted byte but not complete). */
static size_t walk(unsigned *seed, char *out, size_t cap, size_t open)
{
    static const char closing[] = "\"}]0:";
    sd_json_state st;
    sd_json_init(&st);
    size_t n = 0;
    while (!sd_json_complete(&st) && n + 1 < cap) {
        unsigned char ok[256];
        int k = sd_json_next(&st, ok), pick = -1;
        if (k == 0) return 0;
        for (int j = 0; n > open && closing[j] && pick < 0; j++)
            if (memchr(ok, closing[j], (size_t)k)) pick = (unsigned char)closing[j];
        unsigned char c = pick >= 0 ? (unsigned char)pick : ok[rand_r(seed) % (unsigned)k];
        ck_assert(sd_json_feed(&st, (const char *)&c, 1));
        out[n++] = (char)c;
    }
    out[n] = 0;
    return sd_json_complete(&st) ? n : 0;
}

START_TEST(walks_are_documents)
{
    unsigned seed = 99;
    char buf[4096];
    int parsed = 0;
    for (int i = 0; i < 3000; i++) {
        size_t n = walk(&seed, buf, sizeof buf, (size_t)(rand_r(&seed) % 200));
        ck_assert_msg(n > 0, "walk %d got stuck", i);
        json_error_t e;
        json_t *v = json_loadb(buf, n, JSON_ALLOW_NUL, &e);
        /* jansson refuses integers beyond 64 bits, reals beyond double range and \u0000 in keys: valid JSON
         * all the same */
        ck_assert_msg(v || strstr(e.text, "too big") || strstr(e.text, "overflow") || strstr(e.text, "NUL byte"),
                      "walk %d: %s: %s", i, e.text, buf);
        parsed += v != NULL;
        ck_assert(!v || json_is_object(v));
        json_decref(v);
    }
    ck_assert_int_gt(parsed, 2500);
}
END_TEST

/* ---- the token mask on the demo tokenizer ----------------------------------------------------- */

typedef struct demo {
    sd_tok *tok;
    char *bytes;
    uint32_t *off;
    sd_json_vocab *v;
    int vocab;
    int eos;
} demo;

static void open_demo(demo *d)
{
    char err[256];
    d->v = tu_demo_vocab(&d->tok, &d->vocab, &d->eos);
    ck_assert(sd_tok_vocab_bytes(d->tok, &d->bytes, &d->off, err, sizeof err) == SD_OK);
}

static void close_demo(demo *d)
{
    sd_json_vocab_free(d->v);
    free(d->bytes);
    free(d->off);
    sd_tok_free(d->tok);
}

/* The mask after out[0..n) (schema NULL: json_object): a token passes iff
 * its bytes continue the output. */
static void check_mask(const demo *d, const sd_json_schema *schema, const int32_t *out, size_t n, float *logits)
{
    for (int t = 0; t < d->vocab; t++) logits[t] = 0.0f;
    sd_json_mask(d->v, schema, out, n, logits, d->vocab);
    sd_json_state st;
    sd_json_init_schema(&st, schema);
    for (size_t i = 0; i < n; i++)
        ck_assert(sd_json_feed(&st, d->bytes + d->off[out[i]], d->off[out[i] + 1] - d->off[out[i]]));
    for (int t = 0; t < d->vocab; t++) {
        bool want;
        if (t == d->eos) want = sd_json_complete(&st);
        else if (sd_tok_is_special(d->tok, t) || d->off[t + 1] == d->off[t]) want = false;
        else {
            sd_json_state b = st;
            want = sd_json_feed(&b, d->bytes + d->off[t], d->off[t + 1] - d->off[t]);
        }
        ck_assert_msg(want == (logits[t] == 0.0f), "after %zu tokens: token %d passes %d, want %d", n, t,
                      logits[t] == 0.0f, want);
    }
}

/* Random walks over the mask (checked against the automaton every few
 * tokens), then preferring tokens that close; returns how many ended (EOS
 * passing, and nothing else). */
static int mask_walks(const demo *d, const sd_json_schema *schema, int walks, unsigned seed, float *logits)
{
    int32_t out[1000];
    int complete = 0;
    for (int w = 0; w < walks; w++) {
        size_t n = 0;
        bool done = false;
        while (!done && n < 1000) {
            if (n % 7 == 0 || n < 3) check_mask(d, schema, out, n, logits);
            else {
                for (int t = 0; t < d->vocab; t++) logits[t] = 0.0f;
                sd_json_mask(d->v, schema, out, n, logits, d->vocab);
            }
            if (logits[d->eos] == 0.0f) {
                done = true;
                break;
            }
            int32_t pick = -1;
            static const char *const closers[] = {"\"", "}", "]", "0", ":", ","};
            for (int j = 0; n > 40 && j < 6 && pick < 0; j++) {
                int32_t id = sd_tok_token_id(d->tok, closers[j]);
                if (id >= 0 && logits[id] == 0.0f) pick = id;
            }
            while (pick < 0) {
                int32_t t = (int32_t)(rand_r(&seed) % (unsigned)d->vocab);
                if (logits[t] == 0.0f) pick = t;
            }
            out[n++] = pick;
        }
        complete += done;
        if (done) { /* EOS passes; nothing else does */
            for (int t = 0; t < d->vocab; t++) ck_assert(t == d->eos ? logits[t] == 0.0f : isinf(logits[t]));
        }
    }
    return complete;
}

START_TEST(token_mask)
{
    demo d;
    open_demo(&d);
    float *logits = malloc((size_t)d.vocab * sizeof *logits);
    ck_assert_int_eq(mask_walks(&d, NULL, 12, 5, logits), 12);
    ck_assert_int_eq(mask_walks(&d, sd_json_schema_object_compact(), 6, 7, logits), 6); /* no whitespace */
    /* states the walks may miss: in a number (a token's leading whitespace ends it), after an escape, in a
     * literal, deep in whitespace */
    char deep[64] = "{";
    memset(deep + 1, '\n', 60);
    const char *const texts[] = {
        "{\"n\": 12", "{\"n\": -0.5e1", "{\"a\": [1, 2, 0", "{\"s\": \"x\\", "{\"t\": tr", "{\"u\": \"\\u00", deep};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        char err[128];
        ck_assert(sd_tok_encode(d.tok, texts[i], strlen(texts[i]), false, &ids, &n, err, sizeof err) == SD_OK);
        check_mask(&d, NULL, ids, n, logits);
        free(ids);
    }
    /* -inf stays -inf; a refused output leaves only EOS */
    int32_t junk[2] = {sd_tok_token_id(d.tok, "x"), sd_tok_token_id(d.tok, "y")};
    for (int t = 0; t < d.vocab; t++) logits[t] = 1.0f;
    sd_json_mask(d.v, NULL, junk, 2, logits, d.vocab);
    for (int t = 0; t < d.vocab; t++) ck_assert(t == d.eos ? logits[t] == 1.0f : isinf(logits[t]));
    free(logits);
    close_demo(&d);
}
END_TEST

/* Under a schema (json_schema.h): the mask is the automaton token by token
 * (keys of declared properties, bounded strings, enum values, integers), and
 * masked walks end. */
START_TEST(schema_token_mask)
{
    static const char schema[] =
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 6},"
        " \"n\": {\"type\": \"integer\"}, \"kind\": {\"enum\": [\"cat\", \"dog\", 12, null]},"
        " \"age\": {\"type\": \"integer\", \"minimum\": 18, \"maximum\": 120}, \"p\": {\"type\": \"number\","
        " \"minimum\": 0, \"exclusiveMaximum\": 1},"
        " \"tags\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 2},"
        " \"sub\": {\"$ref\": \"#\"}}, \"required\": [\"name\", \"kind\"]}";
    demo d;
    open_demo(&d);
    char err[256];
    sd_json_schema *s;
    ck_assert_msg(sd_json_schema_parse(schema, strlen(schema), &s, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_msg(s, "%s", err);
    float *logits = malloc((size_t)d.vocab * sizeof *logits);
    ck_assert_int_eq(mask_walks(&d, s, 10, 11, logits), 10);
    const char *const texts[] = {"{\"na",
                                 "{\"name\": \"abcde",
                                 "{\"name\": \"ab\\",
                                 "{\"n\": 12",
                                 "{\"age\": 1",
                                 "{\"age\": 12",
                                 "{\"age\": 99",
                                 "{\"p\": 0",
                                 "{\"p\": 0.5",
                                 "{\"kind\": 1",
                                 "{\"kind\": \"c",
                                 "{\"tags\": [\"a\", \"b\"",
                                 "{\"sub\": {\"sub\": {"};
    for (size_t i = 0; i < sizeof texts / sizeof *texts; i++) {
        int32_t *ids = NULL;
        size_t n = 0;
        ck_assert(sd_tok_encode(d.tok, texts[i], strlen(texts[i]), false, &ids, &n, err, sizeof err) == SD_OK);
        check_mask(&d, s, ids, n, logits);
        free(ids);
    }
    free(logits);
    sd_json_schema_free(s);
    close_demo(&d);
}
END_TEST

/* Through the sampler: json_object on the settings masks before the rest;
 * sd_sampling_processes says so. */
START_TEST(sampler_applies_it)
{
    demo d;
    open_demo(&d);
    sd_sampling s = sd_sampling_default();
    s.json_object = true;
    s.json_vocab = d.v;
    ck_assert(sd_sampling_processes(&s));
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(d.vocab, &sp, NULL, 0), SD_OK);
    float *logits = calloc((size_t)d.vocab, sizeof *logits);
    int32_t brace = sd_tok_token_id(d.tok, "{");
    ck_assert_int_ge(brace, 0);
    logits[brace] = -5.0f; /* low, but the only way to start an object among the single-byte tokens */
    for (int t = 0; t < d.vocab; t++)
        if (d.off[t + 1] - d.off[t] == 1 && t != brace) logits[t] = 3.0f;
    int32_t x = sd_sampler_sample(sp, &s, logits, d.vocab, NULL, 0, NULL, 0, 0);
    sd_json_state st;
    sd_json_init(&st);
    ck_assert_msg(sd_json_feed(&st, d.bytes + d.off[x], d.off[x + 1] - d.off[x]), "token %d starts no object", x);
    sd_sampling_drop_processors(&s);
    ck_assert(!s.json_object && !s.json_vocab);
    free(logits);
    sd_sampler_free(sp);
    close_demo(&d);
}
END_TEST

/* The token table refuses what it cannot build on: a status, no table, a message. */
START_TEST(vocab_failures_are_reported)
{
    demo d;
    open_demo(&d);
    char err[256] = "";
    sd_json_vocab *v = (sd_json_vocab *)err; /* not NULL: the call clears it */
    ck_assert_int_eq(sd_json_vocab_new(d.tok, 0, &d.eos, 1, &v, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(v);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(sd_json_vocab_new(NULL, d.vocab, &d.eos, 1, &v, NULL, 0), SD_ERR_ARG);
    ck_assert_int_eq(sd_json_vocab_new(d.tok, d.vocab, NULL, 1, &v, NULL, 0), SD_ERR_ARG);
    sd_model_config c = {.vocab_size = d.vocab, .n_eos = 1, .eos_token_ids = {d.eos}};
    err[0] = '\0';
    ck_assert_int_eq(sd_json_vocab_load("/nonexistent-specd-model", &c, &v, err, sizeof err), SD_ERR_IO);
    ck_assert_ptr_null(v);
    ck_assert_msg(strstr(err, "tokenizer"), "%s", err);
    close_demo(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("json_mask");
    TCase *tc = tcase_create("automaton");
    tcase_add_loop_test(tc, documents_and_prefixes, 0, (int)(sizeof GOOD / sizeof GOOD[0]));
    tcase_add_loop_test(tc, refused, 0, (int)(sizeof BAD / sizeof BAD[0]));
    tcase_add_test(tc, bounds);
    tcase_add_test(tc, compact);
    tcase_add_test(tc, jansson_documents_accepted);
    tcase_add_test(tc, walks_are_documents);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("mask");
    tcase_add_test(tm, token_mask);
    tcase_add_test(tm, schema_token_mask);
    tcase_add_test(tm, sampler_applies_it);
    tcase_add_test(tm, vocab_failures_are_reported);
    suite_add_tcase(s, tm);
    return tu_run_suite(s);
}
