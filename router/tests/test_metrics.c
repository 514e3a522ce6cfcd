/* test_metrics.c — Prometheus text of the router's own counters (metrics.c);
 * lane-derived metrics are checked end to end in tests/e2e/test_router_api.sh. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "testutil.h"

START_TEST(router_counters)
{
    sd_metrics m = {0};
    sd_metrics_count_status(&m, 200);
    sd_metrics_count_status(&m, 200);
    sd_metrics_count_status(&m, 400);
    sd_metrics_count_status(&m, 9999); /* ignored */
    sd_metrics_req a = {10, 5, 0.2, 0.04, 0.01, "length"}, b = {1, 1, 1000, -1, 0.5, "stop"};
    sd_metrics_observe(&m, &a);
    sd_metrics_observe(&m, &b);
    sd_metrics_observe_itl(&m, 0.02);
    sd_metrics_observe_itl(&m, 0.06);
    m.active = 3;
    m.model_name = "tiny";
    char *t = sd_metrics_render(&m, NULL);
    ck_assert_ptr_nonnull(t);
    ck_assert_ptr_nonnull(strstr(t, "specd_http_requests_total{code=\"200\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "specd_http_requests_total{code=\"400\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "specd_prompt_tokens_total 11\n"));
    ck_assert_ptr_nonnull(strstr(t, "specd_generation_tokens_total 6\n"));
    ck_assert_ptr_nonnull(strstr(t, "specd_request_duration_seconds_bucket{le=\"0.25\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "specd_request_duration_seconds_bucket{le=\"300\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "specd_request_duration_seconds_bucket{le=\"+Inf\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "specd_request_duration_seconds_count 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "specd_requests_active 3\n"));
    ck_assert_ptr_nonnull(strstr(t, "# TYPE specd_request_duration_seconds histogram\n"));
    /* vLLM's names: a TTFT of 0.04 s in its bucket, TPOT (0.2 - 0.04) / 4 = 0.04 s, finish reasons */
    ck_assert_ptr_nonnull(strstr(t, "# TYPE vllm:time_to_first_token_seconds histogram\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.02\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:time_to_first_token_seconds_bucket{model_name=\"tiny\",le=\"0.04\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:time_to_first_token_seconds_count{model_name=\"tiny\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:time_per_output_token_seconds_bucket{model_name=\"tiny\",le=\"0.025\"} 0\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:time_per_output_token_seconds_bucket{model_name=\"tiny\",le=\"0.05\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:inter_token_latency_seconds_bucket{model_name=\"tiny\",le=\"0.025\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:inter_token_latency_seconds_bucket{model_name=\"tiny\",le=\"0.075\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:e2e_request_latency_seconds_count{model_name=\"tiny\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:e2e_request_latency_seconds_bucket{model_name=\"tiny\",le=\"+Inf\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"length\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:request_success_total{model_name=\"tiny\",finished_reason=\"stop\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:request_prompt_tokens_bucket{model_name=\"tiny\",le=\"10\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:prompt_tokens_total{model_name=\"tiny\"} 11\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:num_requests_running{model_name=\"tiny\"} 3\n"));
    /* queue 0.01 and 0.5 s; prefill 0.04 - 0.01 = 0.03 s (b had no token); decode 0.2 - 0.04 = 0.16 s */
    ck_assert_ptr_nonnull(strstr(t, "vllm:request_queue_time_seconds_bucket{model_name=\"tiny\",le=\"0.3\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:request_queue_time_seconds_bucket{model_name=\"tiny\",le=\"0.5\"} 2\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:request_prefill_time_seconds_count{model_name=\"tiny\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:request_decode_time_seconds_bucket{model_name=\"tiny\",le=\"0.3\"} 1\n"));
    ck_assert_ptr_nonnull(strstr(t, "vllm:request_inference_time_seconds_count{model_name=\"tiny\"} 2\n"));
    free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("metrics");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, router_counters);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
