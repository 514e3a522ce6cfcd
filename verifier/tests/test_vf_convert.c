/* test_vf_convert.c — Submit → engine parameters, finish / stats / error
 * code mapping (vf_convert.c). */
#include <check.h>
#include <string.h>

#include "testutil.h"
#include "vf_convert.h"

START_TEST(proto3_defaults)
{
    Specd__Submit s = SPECD__SUBMIT__INIT;
    Specd__SamplingParams sp = SPECD__SAMPLING_PARAMS__INIT;
    s.sampling = &sp;
    sd_req_params p;
    char err[128];
    ck_assert_int_eq(sd_vf_params_from_submit(&s, 5, true, &p, err, sizeof err), SD_OK);
    ck_assert_float_eq(p.sampling.top_p, 1.0f);
    ck_assert_float_eq(p.sampling.repetition_penalty, 1.0f);
    ck_assert_float_eq(p.sampling.temperature, 0.0f);
    ck_assert_int_eq(p.max_tokens, 256);
    ck_assert(!p.speculate); /* no SpecParams */
    ck_assert_int_eq(p.verify, SD_VERIFY_AUTO);
    s.sampling = NULL;
    ck_assert_int_eq(sd_vf_params_from_submit(&s, 5, true, &p, err, sizeof err), SD_OK);
    ck_assert_float_eq(p.sampling.top_p, 1.0f);
}
END_TEST

START_TEST(fields)
{
    Specd__Submit s = SPECD__SUBMIT__INIT;
    Specd__SamplingParams sp = SPECD__SAMPLING_PARAMS__INIT;
    Specd__SpecParams spec = SPECD__SPEC_PARAMS__INIT;
    int32_t stops[2] = {7, 9};
    sp.temperature = 0.7f;
    sp.top_k = -1;
    sp.top_p = 0.9f;
    sp.repetition_penalty = 1.1f;
    sp.seed = 42;
    s.sampling = &sp;
    s.max_tokens = 12;
    s.stop_ids = stops;
    s.n_stop_ids = 2;
    s.ignore_eos = 1;
    spec.enabled = 1;
    spec.num_draft = 99;
    spec.verify = SPECD__VERIFY_MODE__VERIFY_REJECTION;
    s.spec = &spec;
    sd_req_params p;
    char err[128];
    ck_assert_int_eq(sd_vf_params_from_submit(&s, 5, true, &p, err, sizeof err), SD_OK);
    ck_assert_int_eq(p.sampling.top_k, 0);
    ck_assert_float_eq(p.sampling.top_p, 0.9f);
    ck_assert_uint_eq(p.sampling.seed, 42);
    ck_assert_int_eq(p.max_tokens, 12);
    ck_assert_int_eq(p.n_stop, 2);
    ck_assert_int_eq(p.stop_ids[1], 9);
    ck_assert(p.ignore_eos);
    ck_assert(p.speculate);
    ck_assert_int_eq(p.num_draft, SD_MAX_DRAFT);
    ck_assert_int_eq(p.verify, SD_VERIFY_REJECTION);
    spec.num_draft = 0;
    spec.verify = SPECD__VERIFY_MODE__VERIFY_MATCH;
    ck_assert_int_eq(sd_vf_params_from_submit(&s, 3, false, &p, err, sizeof err), SD_OK);
    ck_assert(!p.speculate); /* no drafter */
    ck_assert_int_eq(p.num_draft, 3);
    ck_assert_int_eq(p.verify, SD_VERIFY_MATCH);
    ck_assert(!p.logprobs && !p.prompt_logprobs);
    Specd__LogprobParams lp = SPECD__LOGPROB_PARAMS__INIT;
    lp.top = 7;
    lp.prompt = 1;
    s.logprobs = &lp;
    ck_assert_int_eq(sd_vf_params_from_submit(&s, 3, true, &p, err, sizeof err), SD_OK);
    ck_assert(p.logprobs && p.prompt_logprobs && p.top_logprobs == 7);
    lp.top = SD_MAX_LOGPROBS + 1;
    ck_assert_int_eq(sd_vf_params_from_submit(&s, 3, true, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "logprobs"));
    lp.top = 0;
    spec.verify = (Specd__VerifyMode)17;
    ck_assert_int_eq(sd_vf_params_from_submit(&s, 3, true, &p, err, sizeof err), SD_ERR_ARG);
}
END_TEST

START_TEST(too_many_stops)
{
    Specd__Submit s = SPECD__SUBMIT__INIT;
    int32_t stops[SD_MAX_STOP_IDS + 1] = {0};
    s.stop_ids = stops;
    s.n_stop_ids = SD_MAX_STOP_IDS + 1;
    sd_req_params p;
    char err[128];
    ck_assert_int_eq(sd_vf_params_from_submit(&s, 5, true, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "stop"));
}
END_TEST

START_TEST(mappings)
{
    ck_assert_int_eq(sd_vf_finish_to_proto(SD_FINISH_NONE), SPECD__FINISH_REASON__FINISH_NONE);
    ck_assert_int_eq(sd_vf_finish_to_proto(SD_FINISH_STOP), SPECD__FINISH_REASON__FINISH_STOP);
    ck_assert_int_eq(sd_vf_finish_to_proto(SD_FINISH_LENGTH), SPECD__FINISH_REASON__FINISH_LENGTH);
    ck_assert_int_eq(sd_vf_finish_to_proto(SD_FINISH_CANCELLED), SPECD__FINISH_REASON__FINISH_CANCELLED);
    ck_assert_int_eq(sd_vf_finish_to_proto(SD_FINISH_ERROR), SPECD__FINISH_REASON__FINISH_ERROR);
    ck_assert_str_eq(sd_vf_error_code("KV pool exhausted"), "kv_exhausted");
    ck_assert_str_eq(sd_vf_error_code("forward pass failed"), "internal");
    sd_spec_stats st = {.steps = 3, .draft_tokens = 10, .accepted_tokens = 4, .accepted_at = {3, 1}};
    Specd__SpecStats ss;
    sd_vf_stats_to_proto(&st, 5, &ss);
    ck_assert_uint_eq(ss.steps, 3);
    ck_assert_uint_eq(ss.n_accepted_at, 5);
    ck_assert_uint_eq(ss.accepted_at[0], 3);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vf_convert");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, proto3_defaults);
    tcase_add_test(tc, fields);
    tcase_add_test(tc, too_many_stops);
    tcase_add_test(tc, mappings);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
