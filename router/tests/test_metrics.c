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
    sd_metrics_observe(&m, 10, 5, 0.2);
    sd_metrics_observe(&m, 1, 1, 1000);
    m.active = 3;
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
