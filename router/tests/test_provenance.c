/* test_provenance.c — each token's source and step (router/provenance.h),
 * and the request field that asks for them (router/http_api.h). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "http_api.h"
#include "provenance.h"
#include "testutil.h"

static Specd__StepInfo step_of(uint32_t drafted, uint32_t accepted, Specd__DraftSource src)
{
    Specd__StepInfo s = SPECD__STEP_INFO__INIT;
    s.drafted = drafted;
    s.accepted = accepted;
    s.source = src;
    return s;
}

static const char *src_at(json_t *o, size_t i)
{
    return json_string_value(json_object_get(json_array_get(json_object_get(o, "tokens"), i), "source"));
}

static json_int_t int_at(json_t *o, const char *list, size_t i, const char *key)
{
    return json_integer_value(json_object_get(json_array_get(json_object_get(o, list), i), key));
}

START_TEST(sources_follow_the_steps)
{
    sd_prov p;
    ck_assert_int_eq(sd_prov_init(&p), SD_OK);
    ck_assert(!sd_prov_pending(&p));
    sd_prov_step(&p, NULL); /* the first token, after the prefill: no drafts */
    sd_prov_token(&p, 7, "Hi", 2);
    Specd__StepInfo a = step_of(4, 2, SPECD__DRAFT_SOURCE__DRAFT_DRAFTER);
    sd_prov_step(&p, &a); /* two drafts accepted, then the correction */
    sd_prov_token(&p, 8, " the", 4);
    sd_prov_token(&p, 9, "re", 2);
    sd_prov_token(&p, 10, "!", 1);
    ck_assert(sd_prov_pending(&p));
    json_t *o = sd_prov_take(&p);
    ck_assert_ptr_nonnull(o);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "tokens")), 4);
    ck_assert_str_eq(src_at(o, 0), "verifier");
    ck_assert_str_eq(src_at(o, 1), "drafter");
    ck_assert_str_eq(src_at(o, 2), "drafter");
    ck_assert_str_eq(src_at(o, 3), "verifier");
    ck_assert_int_eq(int_at(o, "tokens", 0, "step"), 1);
    ck_assert_int_eq(int_at(o, "tokens", 3, "step"), 2);
    ck_assert_int_eq(int_at(o, "tokens", 2, "id"), 9);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(o, "tokens"), 1), "text")),
                     " the");
    ck_assert_uint_eq(json_array_size(json_object_get(o, "steps")), 2);
    ck_assert_int_eq(int_at(o, "steps", 1, "drafted"), 4);
    ck_assert_int_eq(int_at(o, "steps", 1, "accepted"), 2);
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(o, "steps"), 0), "source")),
                     "none");
    json_decref(o);
    ck_assert(!sd_prov_pending(&p));
    /* the next chunk: a step of the lookup whose drafts were all accepted but the last cut by max_tokens,
     * numbered on */
    Specd__StepInfo b = step_of(3, 3, SPECD__DRAFT_SOURCE__DRAFT_NGRAM);
    sd_prov_step(&p, &b);
    sd_prov_token(&p, 11, "", 0); /* a byte that completes no character yet */
    sd_prov_token(&p, 12, "\xc3\xa9", 2);
    o = sd_prov_take(&p);
    ck_assert_str_eq(src_at(o, 0), "ngram");
    ck_assert_str_eq(src_at(o, 1), "ngram");
    ck_assert_int_eq(int_at(o, "tokens", 1, "step"), 3);
    ck_assert_int_eq(int_at(o, "steps", 0, "step"), 3);
    json_decref(o);
    sd_prov_clear(&p);
}
END_TEST

START_TEST(request_field)
{
    sd_api_req r;
    sd_api_err e;
    const char *on = "{\"prompt\":\"x\",\"speculative\":{\"provenance\":true}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, on, strlen(on), &r, &e), SD_OK);
    ck_assert(r.provenance);
    sd_api_req_clear(&r);
    const char *off = "{\"prompt\":\"x\",\"speculative\":{\"num_draft\":4}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, off, strlen(off), &r, &e), SD_OK);
    ck_assert(!r.provenance);
    sd_api_req_clear(&r);
    const char *bad = "{\"prompt\":\"x\",\"speculative\":{\"provenance\":\"yes\"}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, bad, strlen(bad), &r, &e), SD_ERR_ARG);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, "speculative.provenance");
}
END_TEST

START_TEST(choice_carries_it)
{
    json_t *pv = json_pack("{s:[], s:[]}", "tokens", "steps");
    sd_api_result res = {0};
    res.id = "cmpl-1";
    res.model = "m";
    res.provenance = pv;
    char *sse = sd_api_chunk_sse(SD_API_CHAT, &res, "a", 1, false, false);
    ck_assert_ptr_nonnull(strstr(sse, "\"provenance\":{\"tokens\":[],\"steps\":[]}"));
    free(sse);
    res.provenance = NULL;
    sse = sd_api_chunk_sse(SD_API_CHAT, &res, "a", 1, false, false);
    ck_assert_ptr_null(strstr(sse, "provenance")); /* not asked for: nothing new */
    free(sse);
    sd_api_choice ch = {"a", 1, "stop", NULL, NULL, pv};
    char *body = sd_api_response_json(SD_API_COMPLETION, &res, &ch, 1);
    ck_assert_ptr_nonnull(strstr(body, "\"provenance\":{"));
    free(body);
    json_decref(pv);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("provenance");
    TCase *tc = tcase_create("provenance");
    tcase_add_test(tc, sources_follow_the_steps);
    tcase_add_test(tc, request_field);
    tcase_add_test(tc, choice_carries_it);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
