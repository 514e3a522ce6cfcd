/* test_logprobs.c — the "logprobs" objects built from per-token values
 * (router/logprobs.h), with the demo tokenizer. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "logprobs.h"
#include "testutil.h"

static sd_tok *tok;

static void setup(void)
{
    char dir[512], path[600], err[256];
    tu_model(dir, sizeof dir, "tinycode-16m");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ck_assert_int_eq(sd_tok_load(path, &tok, err, sizeof err), SD_OK);
}

static void teardown(void) { sd_tok_free(tok); }

/* A TokenLogprob with value v and alternatives ids[0..n) at v, v-1, ... */
typedef struct lp_fix {
    Specd__TokenLogprob lp;
    Specd__TopLogprob top[4], *ptr[4];
} lp_fix;

static const Specd__TokenLogprob *mk(lp_fix *f, float v, const int32_t *ids, int n)
{
    specd__token_logprob__init(&f->lp);
    f->lp.logprob = v;
    f->lp.top = f->ptr;
    for (int i = 0; i < n; i++) {
        specd__top_logprob__init(&f->top[i]);
        f->top[i].token = ids[i];
        f->top[i].logprob = v - (float)i;
        f->ptr[i] = &f->top[i];
    }
    f->lp.n_top = (size_t)n;
    return &f->lp;
}

static int32_t id_of(const char *text)
{
    int32_t *ids;
    size_t n;
    char err[128];
    ck_assert_int_eq(sd_tok_encode(tok, text, strlen(text), false, &ids, &n, err, sizeof err), SD_OK);
    ck_assert_uint_eq(n, 1);
    int32_t id = ids[0];
    free(ids);
    return id;
}

START_TEST(chat_shape)
{
    int32_t a = id_of("def"), b = id_of(" x");
    int32_t alts[2] = {a, b};
    lp_fix f;
    sd_lp *acc;
    ck_assert_int_eq(sd_lp_new(tok, SD_API_CHAT, 2, &acc, NULL, 0), SD_OK);
    sd_lp_add(acc, a, mk(&f, -0.5f, alts, 2));
    sd_lp_add(acc, b, mk(&f, -INFINITY, alts, 1));
    ck_assert_uint_eq(sd_lp_pending(acc), 2);
    json_t *o = sd_lp_take(acc);
    ck_assert_uint_eq(sd_lp_pending(acc), 0);
    json_t *c = json_object_get(o, "content");
    ck_assert_uint_eq(json_array_size(c), 2);
    json_t *e0 = json_array_get(c, 0);
    ck_assert_str_eq(json_string_value(json_object_get(e0, "token")), "def");
    ck_assert_double_eq_tol(json_real_value(json_object_get(e0, "logprob")), -0.5, 1e-6);
    ck_assert_uint_eq(json_array_size(json_object_get(e0, "bytes")), 3);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(e0, "bytes"), 0)), 'd');
    json_t *top = json_object_get(e0, "top_logprobs");
    ck_assert_uint_eq(json_array_size(top), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(top, 1), "token")), " x");
    ck_assert_double_eq_tol(json_real_value(json_object_get(json_array_get(top, 1), "logprob")), -1.5, 1e-6);
    json_t *e1 = json_array_get(c, 1);
    ck_assert_double_eq(json_real_value(json_object_get(e1, "logprob")), -9999.0); /* -inf */
    json_decref(o);
    sd_lp_free(acc);
}
END_TEST

START_TEST(completion_shape_and_offsets)
{
    int32_t a = id_of("def"), b = id_of(" x");
    int32_t alts[2] = {b, a};
    lp_fix f;
    sd_lp *acc;
    ck_assert_int_eq(sd_lp_new(tok, SD_API_COMPLETION, 2, &acc, NULL, 0), SD_OK);
    sd_lp_add(acc, a, NULL);                   /* an echoed prompt's first token */
    sd_lp_add(acc, a, mk(&f, -2.0f, alts, 1)); /* the chosen token is not among the top one: added */
    json_t *o = sd_lp_take(acc);
    ck_assert_str_eq(json_string_value(json_array_get(json_object_get(o, "tokens"), 1)), "def");
    ck_assert(json_is_null(json_array_get(json_object_get(o, "token_logprobs"), 0)));
    ck_assert(json_is_null(json_array_get(json_object_get(o, "top_logprobs"), 0)));
    json_t *d = json_array_get(json_object_get(o, "top_logprobs"), 1);
    ck_assert_uint_eq(json_object_size(d), 2);
    ck_assert_double_eq_tol(json_real_value(json_object_get(d, " x")), -2.0, 1e-6);
    ck_assert_double_eq_tol(json_real_value(json_object_get(d, "def")), -2.0, 1e-6);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(o, "text_offset"), 1)), 3);
    json_decref(o);
    sd_lp_add(acc, b, mk(&f, -1.0f, alts, 2)); /* a later chunk: offsets run on */
    o = sd_lp_take(acc);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "tokens")), 1);
    ck_assert_int_eq(json_integer_value(json_array_get(json_object_get(o, "text_offset"), 0)), 6);
    ck_assert_uint_eq(json_object_size(json_array_get(json_object_get(o, "top_logprobs"), 0)), 2);
    json_decref(o);
    sd_lp_free(acc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("logprobs");
    TCase *tc = tcase_create("shapes");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, chat_shape);
    tcase_add_test(tc, completion_shape_and_offsets);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
