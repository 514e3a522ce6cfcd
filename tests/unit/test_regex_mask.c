/* test_regex_mask.c — output by a regular expression (regex_mask.c):
 *   - patterns refused with their reason (syntax, what the DFA lacks, length);
 *   - the state fed in pieces of every size (characters split across them)
 *     agrees at every character boundary with PCRE2's other engine
 *     (pcre2_match, backtracking, hard partial matching) on the whole text;
 *   - characters left unfinished: accepted when some finish is taken;
 *   - choices: each one complete, nothing else, special characters literal;
 *   - the token mask on the demo tokenizer: a token passes iff the state
 *     accepts its bytes (and, for whole-character tokens, iff the other
 *     engine keeps the text a possible prefix); random masked walks end in
 *     a text the expression matches whole. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <check.h>
#include <math.h>
#include <pcre2.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_mask.h"
#include "regex_mask.h"
#include "sampler.h"
#include "testutil.h"
#include "tokenizer.h"

static sd_regex *compile_ok(const char *pattern)
{
    char err[256];
    sd_regex *rx;
    ck_assert_msg(sd_regex_compile(pattern, &rx, err, sizeof err) == SD_OK, "%s: %s", pattern, err);
    return rx;
}

static const struct {
    const char *pattern, *message;
} REFUSED[] = {
    {"a(b", "missing closing parenthesis"},
    {"[a-", "missing terminating ]"},
    {"(a)\\1", "back-references"},
    {"(a)?(?(1)b|c)", "back-references or conditions"},
    {"(?<=a)b", "lookaround assertions"},
    {"\\bword", "\\b"},
    {"a(*ACCEPT)b", "backtracking verbs"},
    {"a\\Kb", "\\K"},
    {"a\\Cb", "\\C"},
    {"(?=ab)a.", "lookaround assertions"},
    {"x(?!ab)a.", "lookaround assertions"},
    {"(?>a+)b", "atomic groups"},
    {"\\(((?R)|x)\\)", "recursion and subroutine calls"},
    {"(a|b)(?1)", "recursion and subroutine calls"},
    {"(?<n>a)\\g<n>", "recursion and subroutine calls"},
    {"(?:ab)++c", "possessive quantifiers"},
    {"a*+a", "possessive quantifiers"},
    {"a\\Ab", "\\A and \\G"},
    {"(?m)^a$", "multiline mode"},
};

START_TEST(refused_patterns)
{
    char err[256];
    sd_regex *rx;
    ck_assert_msg(sd_regex_compile(REFUSED[_i].pattern, &rx, err, sizeof err) == SD_ERR_ARG, "%s compiled",
                  REFUSED[_i].pattern);
    ck_assert_ptr_null(rx);
    ck_assert_msg(strstr(err, REFUSED[_i].message), "%s: %s", REFUSED[_i].pattern, err);
}
END_TEST

START_TEST(accepted_lookalikes)
{
    /* escaped, or in a class: not the constructs above */
    static const char *const ok[] = {"\\(*x",        "[(*]+",    "\\\\K",    "\\Q(*\\E", "[\\b]", "[a+]+b",
                                     "(?<name>ab)c", "(?i:ab)c", "(?x) a b", "a\\++",    "\\\\A", "(?|(a)|b)"};
    for (size_t i = 0; i < sizeof ok / sizeof *ok; i++) sd_regex_free(compile_ok(ok[i]));
    char err[128], *big = malloc(SD_MAX_REGEX + 2);
    memset(big, 'a', SD_MAX_REGEX + 1);
    big[SD_MAX_REGEX + 1] = '\0';
    sd_regex *rx;
    ck_assert_int_eq(sd_regex_compile(big, &rx, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(rx);
    ck_assert_msg(strstr(err, "longer than"), "%s", err);
    free(big);
}
END_TEST

/* A failure is a status, a NULL handle and PCRE2's message; err may be NULL. */
START_TEST(failures_are_reported)
{
    char err[256] = "";
    sd_regex *rx = (sd_regex *)err; /* not NULL: the call clears it */
    ck_assert_int_eq(sd_regex_compile("(", &rx, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(rx);
    ck_assert_msg(strstr(err, "missing closing parenthesis"), "%s", err);
    ck_assert_int_eq(sd_regex_compile("(", &rx, NULL, 0), SD_ERR_ARG);
    ck_assert_int_eq(sd_regex_compile(NULL, &rx, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(rx);
    sd_regex_state *st = (sd_regex_state *)err; /* likewise */
    err[0] = '\0';
    ck_assert_int_eq(sd_regex_state_new(NULL, &st, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(st);
    ck_assert_str_ne(err, "");
}
END_TEST

/* ---- the state against pcre2_match ------------------------------------------------------------ */

/* The other engine on the whole text: 1 a possible prefix (or a match), 2
 * matched whole, 0 neither. */
static int oracle(const char *pattern, const char *text, size_t n)
{
    char wrapped[512];
    snprintf(wrapped, sizeof wrapped, "(?:%s)\\z", pattern);
    int code;
    PCRE2_SIZE off;
    pcre2_code *re =
        pcre2_compile((PCRE2_SPTR)wrapped, PCRE2_ZERO_TERMINATED, PCRE2_UTF | PCRE2_ANCHORED, &code, &off, NULL);
    ck_assert(re != NULL);
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int whole = pcre2_match(re, (PCRE2_SPTR)text, n, 0, 0, md, NULL);
    int part = pcre2_match(re, (PCRE2_SPTR)text, n, 0, PCRE2_PARTIAL_HARD, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return whole >= 0 ? 2 : part == PCRE2_ERROR_PARTIAL || part >= 0 || n == 0 ? 1 : 0;
}

static const struct {
    const char *pattern;
    const char *texts[4];
} CASES[] = {
    {"\\d{4}-\\d{2}-\\d{2}", {"2024-11-29", "2024-1x-29", "20245", "1999-12-31x"}},
    {"(yes|no|maybe)", {"yes", "maybe", "mayo", "nope"}},
    {"[a-z ]{1,12}\\.", {"hello world.", "hello world and more.", "hi.", "Hi."}},
    {"\\(?\\d{3}\\)? ?\\d{3}-\\d{4}", {"(555) 123-4567", "555 123-4567", "5551234567", "(55) 1"}},
    {"(?i)true|false", {"TRUE", "False", "fals", "truth"}},
    {"caf\xc3\xa9|na\xc3\xafve+", {"caf\xc3\xa9", "na\xc3\xafveee", "cafe", "na\xc3\xaf"}},
    {"[\xce\xb1-\xcf\x89]+ \\w+", {"\xce\xb1\xce\xb2\xce\xb3 abc", "\xce\xb1 \xce\xb2", "\xd0\x96 x", "\xcf\x89 _1"}},
    {".{2,5}!", {"\xe2\x82\xac\xf0\x9f\x98\x80!", "ab!", "abcdef!", "a!"}},
    {"\\{\"a\": (true|false|\\d+)\\}", {"{\"a\": 12}", "{\"a\": tru}", "{\"a\": 1x}", "{\"b\": 1}"}},
    {"(ab|abc)+d?", {"ababcabd", "abcabcab", "abd", "abx"}},
    {"(?:^a|b)+", {"abb", "aab", "ba", "a"}}, /* ^ only at the text's start, not at a piece's */
    {"(a|b$)\\n?c?", {"ab\nc", "b\n", "a\nc", "bc"}},
};

/* Feeds text in pieces of `step` bytes and compares at every character
 * boundary. */
static void check_text(const char *pattern, const char *text, size_t step)
{
    sd_regex *rx = compile_ok(pattern);
    sd_regex_state *st;
    ck_assert_int_eq(sd_regex_state_new(rx, &st, NULL, 0), SD_OK);
    size_t n = strlen(text), at = 0;
    bool alive = true;
    while (at < n) {
        size_t k = at + step > n ? n - at : step;
        alive = sd_regex_state_feed(st, text + at, k);
        at += k;
        if (at < n && ((unsigned char)text[at] & 0xC0) == 0x80) {
            if (!alive) break;
            continue; /* inside a character: compared at the next boundary */
        }
        int want = oracle(pattern, text, at);
        ck_assert_msg(alive == (want > 0), "/%s/ after %zu bytes of \"%s\" (pieces of %zu): alive %d, want %d", pattern,
                      at, text, step, alive, want);
        if (!alive) break;
        ck_assert_msg(sd_regex_state_complete(st) == (want == 2), "/%s/ after %zu bytes of \"%s\": complete %d",
                      pattern, at, text, sd_regex_state_complete(st));
    }
    if (!alive) ck_assert(!sd_regex_state_accepts(st, "a", 1) && !sd_regex_state_complete(st));
    sd_regex_state_free(st);
    sd_regex_free(rx);
}

START_TEST(state_agrees_with_pcre2_match)
{
    for (int t = 0; t < 4; t++)
        for (size_t step = 1; step <= 5; step++) check_text(CASES[_i].pattern, CASES[_i].texts[t], step);
}
END_TEST

START_TEST(unfinished_characters)
{
    sd_regex *greek = compile_ok("[\xce\xb1-\xcf\x89]+"), *any = compile_ok(".*"), *ascii = compile_ok("[a-z]+"),
             *cjk = compile_ok("[\\x{4e00}-\\x{9fa5}]{1,3}");
    sd_regex_state *g, *a, *s, *c;
    ck_assert(sd_regex_state_new(greek, &g, NULL, 0) == SD_OK && sd_regex_state_new(any, &a, NULL, 0) == SD_OK &&
              sd_regex_state_new(ascii, &s, NULL, 0) == SD_OK && sd_regex_state_new(cjk, &c, NULL, 0) == SD_OK);
    ck_assert(sd_regex_state_accepts(g, "\xce", 1));      /* α .. ο */
    ck_assert(sd_regex_state_accepts(g, "\xcf", 1));      /* π .. ω */
    ck_assert(!sd_regex_state_accepts(g, "\xd0", 1));     /* Cyrillic */
    ck_assert(!sd_regex_state_accepts(g, "\xce\x91", 2)); /* Α, finished: refused */
    ck_assert(sd_regex_state_accepts(a, "\xf0\x9f", 2));
    ck_assert(!sd_regex_state_accepts(s, "\xc3", 1));
    ck_assert(!sd_regex_state_accepts(a, "\x80", 1));     /* not a character's start */
    ck_assert(sd_regex_state_accepts(c, "\xe4", 1));      /* 一 (U+4E00) is named */
    ck_assert(sd_regex_state_accepts(c, "\xe9\xbe", 2));  /* U+9F80 .. U+9FBF: its lowest is in the range */
    ck_assert(!sd_regex_state_accepts(c, "\xe9\xbf", 2)); /* U+9FC0 .. beyond 9FA5 */
    sd_regex *few = compile_ok("[\\x{4e00}-\\x{4e10}]");  /* neither bound of E4's U+4000 .. U+4FFF */
    sd_regex_state *f;
    ck_assert_int_eq(sd_regex_state_new(few, &f, NULL, 0), SD_OK);
    ck_assert(sd_regex_state_accepts(f, "\xe4", 1)); /* ... but 一 is named */
    ck_assert(sd_regex_state_accepts(f, "\xe4\xb8", 2));
    ck_assert(!sd_regex_state_accepts(f, "\xe4\xb9", 2));
    sd_regex_state_free(f);
    sd_regex_free(few);
    /* a character finished over two feeds */
    ck_assert(sd_regex_state_feed(g, "\xce", 1));
    ck_assert(!sd_regex_state_complete(g));
    ck_assert(!sd_regex_state_accepts(g, "a", 1));
    ck_assert(!sd_regex_state_accepts(g, "\x91", 1)); /* Α */
    ck_assert(sd_regex_state_feed(g, "\xb1\xce", 2)); /* α, then half of the next */
    ck_assert(sd_regex_state_feed(g, "\xb2", 1));     /* β */
    ck_assert(sd_regex_state_complete(g));
    sd_regex_state_free(g);
    sd_regex_state_free(a);
    sd_regex_state_free(s);
    sd_regex_state_free(c);
    sd_regex_free(greek);
    sd_regex_free(any);
    sd_regex_free(ascii);
    sd_regex_free(cjk);
}
END_TEST

START_TEST(choices)
{
    static const char *const ch[] = {"a.b", "(x)", "c++", "na\xc3\xafve", "back\\slash", "new\nline", "a"};
    size_t lens[7];
    for (int i = 0; i < 7; i++) lens[i] = strlen(ch[i]);
    char err[128];
    char *pattern = sd_regex_of_choices(ch, lens, 7, err, sizeof err);
    ck_assert_msg(pattern != NULL, "%s", err);
    sd_regex *rx = compile_ok(pattern);
    for (int i = 0; i < 7; i++) {
        sd_regex_state *st;
        ck_assert_int_eq(sd_regex_state_new(rx, &st, NULL, 0), SD_OK);
        ck_assert_msg(sd_regex_state_feed(st, ch[i], lens[i]) && sd_regex_state_complete(st), "choice %d", i);
        sd_regex_state_free(st);
    }
    static const char *const not [] = {"axb", "x", "c+", "c+++", "naive", "back", "newline", "ab", ""};
    for (size_t i = 0; i < sizeof not / sizeof *not ; i++) {
        sd_regex_state *st;
        ck_assert_int_eq(sd_regex_state_new(rx, &st, NULL, 0), SD_OK);
        sd_regex_state_feed(st, not [i], strlen(not [i]));
        ck_assert_msg(!sd_regex_state_complete(st), "\"%s\" complete", not [i]);
        sd_regex_state_free(st);
    }
    sd_regex_free(rx);
    free(pattern);
    /* many alternatives, one empty: the empty output is complete (a regression: PCRE2's workspace for the
     * empty match was too small, and the empty output was refused) */
    const char *many[24];
    size_t ml[24];
    char words[23][8];
    for (int i = 0; i < 23; i++) {
        snprintf(words[i], sizeof words[i], "w%d", i);
        many[i] = words[i];
        ml[i] = strlen(words[i]);
    }
    many[23] = "";
    ml[23] = 0;
    pattern = sd_regex_of_choices(many, ml, 24, err, sizeof err);
    rx = compile_ok(pattern);
    sd_regex_state *e;
    ck_assert_int_eq(sd_regex_state_new(rx, &e, NULL, 0), SD_OK);
    ck_assert(sd_regex_state_complete(e));
    sd_regex_state_free(e);
    sd_regex_free(rx);
    free(pattern);
    const char *bad[] = {"ok", "\xc3"};
    size_t bl[] = {2, 1};
    ck_assert(sd_regex_of_choices(bad, bl, 2, err, sizeof err) == NULL);
    ck_assert_msg(strstr(err, "choice 1"), "%s", err);
    const char *nul[] = {"a\0b"};
    size_t nl[] = {3};
    ck_assert(sd_regex_of_choices(nul, nl, 1, err, sizeof err) == NULL);
    ck_assert(sd_regex_of_choices(NULL, NULL, 0, err, sizeof err) == NULL);
}
END_TEST

/* ---- the token mask on the demo tokenizer ----------------------------------------------------- */

typedef struct demo {
    sd_tok *tok;
    sd_json_vocab *v;
    int vocab;
    int eos;
} demo;

static void open_demo(demo *d) { d->v = tu_demo_vocab(&d->tok, &d->vocab, &d->eos); }

static void close_demo(demo *d)
{
    sd_json_vocab_free(d->v);
    sd_tok_free(d->tok);
}

static bool whole_chars(const char *p, size_t n)
{
    return n > 0 && ((unsigned char)p[0] & 0xC0) != 0x80 && ((unsigned char)p[n - 1] < 0x80 || n >= 2);
}

/* The mask after out[0..n) (text text[0..len)) against the state, and
 * against the other engine for ASCII tokens. */
static void check_mask(const demo *d, const char *pattern, const sd_regex *rx, const int32_t *out, size_t n,
                       const char *text, size_t len, float *logits)
{
    for (int t = 0; t < d->vocab; t++) logits[t] = 0.0f;
    sd_regex_mask(d->v, rx, out, n, logits, d->vocab);
    sd_regex_state *st;
    ck_assert_int_eq(sd_regex_state_new(rx, &st, NULL, 0), SD_OK);
    ck_assert(sd_regex_state_feed(st, text, len));
    char buf[1024];
    memcpy(buf, text, len);
    for (int t = 0; t < d->vocab; t++) {
        const char *p;
        size_t k;
        int kind = sd_json_vocab_token(d->v, t, &p, &k);
        bool want = kind == SD_JSON_TOKEN_EOS ? sd_regex_state_complete(st)
                                              : kind == SD_JSON_TOKEN_TEXT && sd_regex_state_accepts(st, p, k);
        ck_assert_msg(want == (logits[t] == 0.0f), "/%s/ after \"%.*s\": token %d passes %d, want %d", pattern,
                      (int)len, text, t, logits[t] == 0.0f, want);
        bool ascii = kind == SD_JSON_TOKEN_TEXT && len + k < sizeof buf;
        for (size_t i = 0; ascii && i < k; i++) ascii = (unsigned char)p[i] < 0x80;
        if (ascii && whole_chars(text, len)) {
            memcpy(buf + len, p, k);
            ck_assert_msg(want == (oracle(pattern, buf, len + k) > 0), "/%s/ after \"%.*s\": token %d (\"%.*s\")",
                          pattern, (int)len, text, t, (int)k, p);
        }
    }
    sd_regex_state_free(st);
}

static const char *const WALKS[] = {
    "\\d{4}-\\d{2}-\\d{2}",
    "(red|green|blue)( and (red|green|blue)){0,2}",
    "[a-z ]{1,30}\\.",
    "def [a-z_]{1,12}\\(\\):\\n    return \\d{1,4}",
    "\\{\"name\": \"[A-Za-z ]{1,16}\", \"age\": \\d{1,3}\\}",
};

START_TEST(token_mask_walks)
{
    demo d;
    open_demo(&d);
    sd_regex *rx = compile_ok(WALKS[_i]);
    float *logits = malloc((size_t)d.vocab * sizeof *logits);
    unsigned seed = 17u + (unsigned)_i;
    for (int w = 0; w < 6; w++) {
        int32_t out[256];
        char text[1024];
        size_t n = 0, len = 0;
        for (;;) {
            ck_assert_msg(n < 256, "/%s/: the walk does not end", WALKS[_i]);
            if (n % 3 == 0) check_mask(&d, WALKS[_i], rx, out, n, text, len, logits);
            for (int t = 0; t < d.vocab; t++) logits[t] = 0.0f;
            sd_regex_mask(d.v, rx, out, n, logits, d.vocab);
            int kept[8192], k = 0;
            for (int t = 0; t < d.vocab; t++)
                if (logits[t] == 0.0f) kept[k++] = t;
            ck_assert_msg(k > 0, "/%s/: nothing may come after \"%.*s\"", WALKS[_i], (int)len, text);
            int pick = logits[d.eos] == 0.0f && rand_r(&seed) % 3 ? d.eos : kept[rand_r(&seed) % k];
            if (pick == d.eos) break;
            const char *p;
            size_t tl;
            ck_assert_int_eq(sd_json_vocab_token(d.v, pick, &p, &tl), SD_JSON_TOKEN_TEXT);
            ck_assert(len + tl < sizeof text);
            memcpy(text + len, p, tl);
            len += tl;
            out[n++] = pick;
        }
        ck_assert_msg(oracle(WALKS[_i], text, len) == 2, "/%s/: the walk ended with \"%.*s\"", WALKS[_i], (int)len,
                      text);
    }
    free(logits);
    sd_regex_free(rx);
    close_demo(&d);
}
END_TEST

/* One regular expression masked from several threads at once (its memo is
 * shared behind a mutex): every row as masked alone. */
typedef struct par {
    const demo *d;
    const sd_regex *rx;
    const int32_t *out;
    size_t n;
    const float *want;
    int bad;
} par;

static void *par_rows(void *arg)
{
    par *a = arg;
    float *l = malloc((size_t)a->d->vocab * sizeof *l);
    for (int k = 0; k < 40; k++) {
        size_t n = (size_t)k % (a->n + 1);
        for (int t = 0; t < a->d->vocab; t++) l[t] = 0.0f;
        sd_regex_mask(a->d->v, a->rx, a->out, n, l, a->d->vocab);
        a->bad += memcmp(l, a->want + n * (size_t)a->d->vocab, (size_t)a->d->vocab * sizeof *l) != 0;
    }
    free(l);
    return NULL;
}

START_TEST(threads_share_the_memo)
{
    demo d;
    open_demo(&d);
    const char *pattern = "def [a-z_]{1,12}\\(([a-z]{1,6}(, )?){0,3}\\):";
    const char *text = "def fib(n, memo):";
    char err[256];
    int32_t *out = NULL;
    size_t n = 0;
    ck_assert(sd_tok_encode(d.tok, text, strlen(text), false, &out, &n, err, sizeof err) == SD_OK);
    float *want = malloc((n + 1) * (size_t)d.vocab * sizeof *want);
    for (size_t k = 0; k <= n; k++) { /* each row alone, with a fresh expression */
        sd_regex *one = compile_ok(pattern);
        float *row = want + k * (size_t)d.vocab;
        for (int t = 0; t < d.vocab; t++) row[t] = 0.0f;
        sd_regex_mask(d.v, one, out, k, row, d.vocab);
        sd_regex_free(one);
    }
    sd_regex *rx = compile_ok(pattern);
    pthread_t th[4];
    par a[4];
    for (int i = 0; i < 4; i++) {
        a[i] = (par){&d, rx, out, n, want, 0};
        ck_assert_int_eq(pthread_create(&th[i], NULL, par_rows, &a[i]), 0);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        ck_assert_msg(a[i].bad == 0, "thread %d: %d rows differ", i, a[i].bad);
    }
    sd_regex_free(rx);
    free(want);
    free(out);
    close_demo(&d);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("regex_mask");
    TCase *tc = tcase_create("state");
    tcase_add_loop_test(tc, refused_patterns, 0, (int)(sizeof REFUSED / sizeof REFUSED[0]));
    tcase_add_test(tc, accepted_lookalikes);
    tcase_add_test(tc, failures_are_reported);
    tcase_add_loop_test(tc, state_agrees_with_pcre2_match, 0, (int)(sizeof CASES / sizeof CASES[0]));
    tcase_add_test(tc, unfinished_characters);
    tcase_add_test(tc, choices);
    suite_add_tcase(s, tc);
    TCase *tm = tcase_create("mask");
    tcase_add_loop_test(tm, token_mask_walks, 0, (int)(sizeof WALKS / sizeof WALKS[0]));
    tcase_add_test(tm, threads_share_the_memo);
    suite_add_tcase(s, tm);
    return tu_run_suite(s);
}
