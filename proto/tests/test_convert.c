/* test_convert.c — specd.proto SamplingParams ↔ sd_sampling (convert.c):
 * proto3 zeros and the "off" spellings map to the engine's neutral values,
 * and a round trip keeps every field. */
#include <check.h>
#include <stdlib.h>

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
    ck_assert(!b.json_schema && !b.regex); /* protobuf's empty string: none */
}
END_TEST

/* The logits processors' lists go through the wire (pack, unpack) and come
 * back pointing into the unpacked message; mismatched bias halves read as
 * no bias. */
START_TEST(processor_lists)
{
    static const int32_t ids[3] = {5, 0, 77}, allowed[2] = {9, 3};
    static const float bias[3] = {-100.0f, 2.5f, 100.0f};
    sd_sampling a = sd_sampling_default();
    a.bias_ids = ids;
    a.bias_values = bias;
    a.n_bias = 3;
    a.allowed = allowed;
    a.n_allowed = 2;
    a.min_tokens = 12;
    a.json_object = true;
    a.json_schema = "{}";
    a.regex = "a|b"; /* both: the wire carries them (msg.c refuses such a message) */
    a.json_compact = true;
    Specd__SamplingParams sp;
    sd_pb_sampling_set(&a, &sp);
    size_t n = specd__sampling_params__get_packed_size(&sp);
    uint8_t *buf = malloc(n);
    specd__sampling_params__pack(&sp, buf);
    Specd__SamplingParams *u = specd__sampling_params__unpack(NULL, n, buf);
    ck_assert_ptr_nonnull(u);
    sd_sampling b = sd_pb_sampling_get(u);
    ck_assert_uint_eq(b.n_bias, 3);
    ck_assert_uint_eq(b.n_allowed, 2);
    ck_assert_uint_eq(b.min_tokens, 12);
    ck_assert(b.json_object && !b.json_vocab); /* the table is the verifier's own (sd_req_new) */
    ck_assert_str_eq(b.json_schema, "{}");
    ck_assert(!b.schema); /* compiled by sd_req_new */
    ck_assert_str_eq(b.regex, "a|b");
    ck_assert(b.json_compact);
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(b.bias_ids[i], ids[i]);
        ck_assert_float_eq(b.bias_values[i], bias[i]);
    }
    ck_assert_int_eq(b.allowed[0], 9);
    ck_assert_int_eq(b.allowed[1], 3);
    ck_assert_ptr_eq(b.allowed, u->allowed_token_ids);
    u->n_bias_values = 2;
    b = sd_pb_sampling_get(u);
    ck_assert_uint_eq(b.n_bias, 0);
    specd__sampling_params__free_unpacked(u, NULL);
    free(buf);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("convert");
    TCase *tc = tcase_create("sampling");
    tcase_add_test(tc, neutral_values);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, processor_lists);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
