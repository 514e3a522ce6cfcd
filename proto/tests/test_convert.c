/* test_convert.c — specd.proto SamplingParams ↔ sd_sampling (convert.c):
 * proto3 zeros and the "off" spellings map to the engine's neutral values,
 * and a round trip keeps every field. */
#include <check.h>

#include "convert.h"
#include "testutil.h"

START_TEST(neutral_values)
{
    sd_sampling s = sd_pb_sampling_get(NULL);
    ck_assert_float_eq(s.temperature, 0.0f);
    ck_assert_float_eq(s.top_p, 1.0f);
    Specd__SamplingParams sp = SPECD__SAMPLING_PARAMS__INIT;
    s = sd_pb_sampling_get(&sp);
    ck_assert_int_eq(s.top_k, 0);
    ck_assert_float_eq(s.top_p, 1.0f);
    ck_assert_float_eq(s.repetition_penalty, 1.0f);
    char err[128];
    sp.temperature = 0.8f;
    sp.top_k = -1; /* OpenAI / vLLM spelling of "no top-k" */
    s = sd_pb_sampling_get(&sp);
    ck_assert_int_eq(s.top_k, 0);
    ck_assert_msg(sd_sampling_validate(&s, err, sizeof err) == SD_OK, "%s", err);
}
END_TEST

START_TEST(round_trip)
{
    sd_sampling a = sd_sampling_default();
    a.temperature = 0.5f;
    a.top_k = 40;
    a.top_p = 0.9f;
    a.min_p = 0.05f;
    a.repetition_penalty = 1.2f;
    a.presence_penalty = 0.3f;
    a.frequency_penalty = -0.4f;
    a.seed = 0xFFFFFFFFFFFFFFF1ULL;
    Specd__SamplingParams sp;
    sd_pb_sampling_set(&a, &sp);
    sd_sampling b = sd_pb_sampling_get(&sp);
    ck_assert_float_eq(b.temperature, a.temperature);
    ck_assert_int_eq(b.top_k, a.top_k);
    ck_assert_float_eq(b.top_p, a.top_p);
    ck_assert_float_eq(b.min_p, a.min_p);
    ck_assert_float_eq(b.repetition_penalty, a.repetition_penalty);
    ck_assert_float_eq(b.presence_penalty, a.presence_penalty);
    ck_assert_float_eq(b.frequency_penalty, a.frequency_penalty);
    ck_assert_uint_eq(b.seed, a.seed);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("convert");
    TCase *tc = tcase_create("sampling");
    tcase_add_test(tc, neutral_values);
    tcase_add_test(tc, round_trip);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
