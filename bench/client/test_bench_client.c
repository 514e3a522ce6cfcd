/* test_bench_client.c — Check suite for the pure parts of specd-bench:
 * percentiles and summaries, the TPOT formula, the SSE splitter across
 * arbitrary chunk boundaries, the Poisson gap generator, response parsing,
 * the /metrics filter, URL joining and JSONL dataset loading. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "dataset.h"
#include "http.h"
#include "report.h"
#include "response.h"
#include "sse.h"
#include "stats.h"

#define NEAR(a, b, tol) ck_assert_msg(fabs((a) - (b)) <= (tol), "%.9g != %.9g", (double)(a), (double)(b))

/* ---- percentiles ---- */

START_TEST(test_percentile_known)
{
    double v[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    NEAR(sd_stats_percentile(v, 10, 50), 5.5, 1e-12);
    NEAR(sd_stats_percentile(v, 10, 90), 9.1, 1e-12);
    NEAR(sd_stats_percentile(v, 10, 99), 9.91, 1e-12);
    NEAR(sd_stats_percentile(v, 10, 0), 1, 0);
    NEAR(sd_stats_percentile(v, 10, 100), 10, 0);
    NEAR(sd_stats_percentile(v, 10, 250), 10, 0);
}
END_TEST

START_TEST(test_percentile_one_and_empty)
{
    double one = 42.0;
    NEAR(sd_stats_percentile(&one, 1, 50), 42.0, 0);
    NEAR(sd_stats_percentile(&one, 1, 99), 42.0, 0);
    ck_assert(isnan(sd_stats_percentile(NULL, 0, 50)));
    sd_stats_summary s;
    ck_assert_int_eq(sd_stats_summarize(NULL, 0, &s), SD_OK);
    ck_assert_uint_eq(s.n, 0);
    ck_assert(isnan(s.mean) && isnan(s.p50) && isnan(s.p99));
    ck_assert_int_eq(sd_stats_summarize(&one, 1, &s), SD_OK);
    ck_assert_uint_eq(s.n, 1);
    NEAR(s.p50, 42, 0);
    NEAR(s.p99, 42, 0);
    NEAR(s.mean, 42, 0);
}
END_TEST

START_TEST(test_summarize_unsorted_with_nan)
{
    double v[] = {9, NAN, 1, 5, 3, 7};
    sd_stats_summary s;
    ck_assert_int_eq(sd_stats_summarize(v, 6, &s), SD_OK);
    ck_assert_uint_eq(s.n, 5);
    NEAR(s.mean, 5.0, 1e-12);
    NEAR(s.min, 1, 0);
    NEAR(s.max, 9, 0);
    NEAR(s.p50, 5, 1e-12);
    NEAR(s.p90, 8.2, 1e-12);
    NEAR(s.std, sqrt(8.0), 1e-12); /* population std of 1, 3, 5, 7, 9 (numpy's default, as vLLM) */
    ck_assert(v[0] == 9);          /* input untouched */
}
END_TEST

/* ---- TPOT ---- */

START_TEST(test_tpot)
{
    NEAR(sd_stats_tpot(1.1, 0.1, 11), 0.1, 1e-12);
    NEAR(sd_stats_tpot(0.5, 0.2, 2), 0.3, 1e-12);
    ck_assert(isnan(sd_stats_tpot(0.5, 0.2, 1))); /* one token: undefined */
    ck_assert(isnan(sd_stats_tpot(0.5, 0.2, 0)));
    ck_assert(isnan(sd_stats_tpot(0.5, NAN, 10))); /* non-streamed: no TTFT */
    ck_assert(isnan(sd_stats_tpot(0.1, 0.2, 10))); /* e2e < ttft */
}
END_TEST

/* ---- SSE ---- */

static const char sse_stream[] = ": comment line\r\n"
                                 "event: message\n"
                                 "data: {\"a\":1}\n\n"
                                 "data:{\"b\":2}\r\n\r\n"
                                 "id: 7\n"
                                 "data: {\"c\":\"x y\"}\n\n"
                                 "data: \n\n"
                                 "data: [DONE]\n\n";
static const char *const sse_expect[] = {"{\"a\":1}", "{\"b\":2}", "{\"c\":\"x y\"}", "", "[DONE]"};
#define N_EXPECT (sizeof sse_expect / sizeof sse_expect[0])

typedef struct {
    char got[16][64];
    size_t n;
} collected;

static int collect(void *ud, const char *d, size_t len)
{
    collected *c = ud;
    ck_assert_uint_lt(c->n, 16);
    ck_assert_uint_lt(len, 64);
    ck_assert(d[len] == '\0');
    memcpy(c->got[c->n], d, len);
    c->got[c->n][len] = '\0';
    c->n++;
    return 0;
}

static void check_collected(const collected *c)
{
    ck_assert_uint_eq(c->n, N_EXPECT);
    for (size_t i = 0; i < N_EXPECT; i++) ck_assert_str_eq(c->got[i], sse_expect[i]);
}

/* Feeds the stream cut at the given boundaries (ascending, < len). */
static void feed_cuts(const size_t *cuts, size_t ncuts)
{
    size_t len = strlen(sse_stream), prev = 0;
    collected c = {0};
    sd_sse *s;
    ck_assert_int_eq(sd_sse_new(0, &s, NULL, 0), SD_OK);
    for (size_t i = 0; i <= ncuts; i++) {
        size_t end = i < ncuts ? cuts[i] : len;
        ck_assert_int_eq(sd_sse_feed(s, sse_stream + prev, end - prev, collect, &c), SD_OK);
        prev = end;
    }
    ck_assert_int_eq(sd_sse_finish(s, collect, &c), SD_OK);
    check_collected(&c);
    ck_assert_uint_eq(sd_sse_count(s), N_EXPECT);
    sd_sse_free(s);
}

START_TEST(test_sse_every_split)
{
    size_t len = strlen(sse_stream);
    feed_cuts(NULL, 0);
    for (size_t a = 0; a <= len; a++)
        for (size_t b = a; b <= len; b += 3) {
            size_t cuts[2] = {a, b};
            feed_cuts(cuts, 2);
        }
}
END_TEST

START_TEST(test_sse_byte_by_byte_and_random)
{
    size_t len = strlen(sse_stream);
    size_t cuts[512];
    for (size_t i = 0; i + 1 < len; i++) cuts[i] = i + 1;
    feed_cuts(cuts, len - 1);
    sd_rng rng;
    sd_rng_seed(&rng, 99);
    for (int trial = 0; trial < 500; trial++) {
        size_t n = 0, pos = 0;
        while (n < 64) {
            pos += 1 + sd_rng_next(&rng) % 9;
            if (pos >= len) break;
            cuts[n++] = pos;
        }
        feed_cuts(cuts, n);
    }
}
END_TEST

static int stop_now(void *ud, const char *d, size_t len)
{
    (void)ud;
    (void)d;
    (void)len;
    return 1;
}

START_TEST(test_sse_limits)
{
    sd_sse *s;
    ck_assert_int_eq(sd_sse_new(16, &s, NULL, 0), SD_OK);
    collected c = {0};
    ck_assert_int_eq(sd_sse_feed(s, "data: 0123456789abcdef\n", 23, collect, &c), SD_ERR_NOSPACE);
    ck_assert_int_eq(sd_sse_feed(s, "data: x\n", 8, collect, &c), SD_ERR_NOSPACE);
    sd_sse_free(s);
    ck_assert_int_eq(sd_sse_new(0, &s, NULL, 0), SD_OK);
    ck_assert_int_eq(sd_sse_feed(s, "data: a\n\ndata: b\n\n", 18, stop_now, NULL), SD_ERR_STATE);
    sd_sse_free(s);
    ck_assert_int_eq(sd_sse_new(0, &s, NULL, 0), SD_OK);
    ck_assert_int_eq(sd_sse_feed(s, "data: tail", 10, collect, &c), SD_OK);
    ck_assert_uint_eq(c.n, 0);
    ck_assert_int_eq(sd_sse_finish(s, collect, &c), SD_OK);
    ck_assert_uint_eq(c.n, 1);
    ck_assert_str_eq(c.got[0], "tail");
    sd_sse_free(s);
    sd_sse_free(NULL);
}
END_TEST

/* ---- RNG ---- */

START_TEST(test_poisson_gap_mean)
{
    sd_rng rng;
    sd_rng_seed(&rng, 1234);
    const int n = 200000;
    const double rate = 5.0;
    double sum = 0.0, sumsq = 0.0;
    for (int i = 0; i < n; i++) {
        double g = sd_rng_exp_gap(&rng, rate);
        ck_assert(g >= 0.0 && isfinite(g));
        sum += g;
        sumsq += g * g;
    }
    double mean = sum / n, var = sumsq / n - mean * mean;
    NEAR(mean, 1.0 / rate, 0.02 / rate);                  /* exponential: mean 1/rate */
    NEAR(var, 1.0 / (rate * rate), 0.05 / (rate * rate)); /* and variance 1/rate^2 */
    ck_assert(sd_rng_exp_gap(&rng, 0.0) == 0.0);
    ck_assert(sd_rng_exp_gap(&rng, INFINITY) == 0.0);
    sd_rng a, b;
    sd_rng_seed(&a, 7);
    sd_rng_seed(&b, 7);
    for (int i = 0; i < 100; i++) ck_assert(sd_rng_exp_gap(&a, 3.0) == sd_rng_exp_gap(&b, 3.0));
}
END_TEST

START_TEST(test_shuffle_permutation)
{
    size_t idx[32], seen[32] = {0};
    for (size_t i = 0; i < 32; i++) idx[i] = i;
    sd_rng rng;
    sd_rng_seed(&rng, 5);
    sd_rng_shuffle(&rng, idx, 32);
    for (size_t i = 0; i < 32; i++) seen[idx[i]]++;
    for (size_t i = 0; i < 32; i++) ck_assert_uint_eq(seen[i], 1);
}
END_TEST

/* ---- response objects ---- */

static sd_resp_info parse_ok(const char *json, bool chat)
{
    sd_resp_info info;
    char err[128];
    ck_assert_int_eq(sd_resp_parse(json, strlen(json), chat, &info, err, sizeof err), SD_OK);
    return info;
}

START_TEST(test_response_shapes)
{
    sd_resp_info i = parse_ok("{\"choices\":[{\"index\":0,\"text\":\"abc\"}]}", false);
    ck_assert_uint_eq(i.content_len, 3);
    ck_assert(!i.has_usage && !i.has_spec && !i.is_error);
    i = parse_ok("{\"choices\":[{\"delta\":{\"role\":\"assistant\",\"content\":\"\"}}]}", true);
    ck_assert_uint_eq(i.content_len, 0);
    i = parse_ok("{\"choices\":[{\"delta\":{\"content\":\"hi\"}}]}", true);
    ck_assert_uint_eq(i.content_len, 2);
    /* a token that decodes to NUL (sampled at a high temperature): valid JSON, counted */
    i = parse_ok("{\"choices\":[{\"delta\":{\"content\":\"a\\u0000b\"}}]}", true);
    ck_assert_uint_eq(i.content_len, 3);
    i = parse_ok("{\"choices\":[{\"message\":{\"content\":\"hello\"}}],\"usage\":{\"completion_tokens\":7}}", true);
    ck_assert_uint_eq(i.content_len, 5);
    ck_assert(i.has_usage);
    ck_assert_int_eq(i.completion_tokens, 7);
    ck_assert_int_eq(i.prompt_tokens, -1); /* not reported */
    i = parse_ok("{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7}}", false);
    ck_assert_int_eq(i.prompt_tokens, 12);
    ck_assert_int_eq(i.cached_tokens, -1);
    i = parse_ok("{\"choices\":[],\"usage\":{\"prompt_tokens\":12,\"completion_tokens\":7,"
                 "\"prompt_tokens_details\":{\"cached_tokens\":8}}}",
                 false);
    ck_assert_int_eq(i.cached_tokens, 8);
    i = parse_ok("{\"choices\":[],\"usage\":{\"completion_tokens\":9},\"speculative\":{\"steps\":4,"
                 "\"draft_tokens\":12,\"accepted_tokens\":6,\"mean_accepted_per_step\":1.5}}",
                 false);
    ck_assert(i.has_spec);
    ck_assert_int_eq(i.spec_steps, 4);
    ck_assert_int_eq(i.spec_draft, 12);
    ck_assert_int_eq(i.spec_accepted, 6);
    NEAR(i.spec_mean, 1.5, 0);
    i = parse_ok("{\"usage\":{\"completion_tokens\":3,\"speculative\":{\"steps\":2,\"accepted_tokens\":3}}}", false);
    ck_assert(i.has_spec);
    NEAR(i.spec_mean, 1.5, 1e-12); /* computed when absent */
    i = parse_ok("{\"error\":{\"message\":\"boom\"}}", false);
    ck_assert(i.is_error);
    ck_assert_str_eq(i.errmsg, "boom");
    i = parse_ok("{\"error\":null,\"choices\":[{\"text\":\"x\"}]}", false);
    ck_assert(!i.is_error);
    sd_resp_info bad;
    char err[128];
    ck_assert_int_eq(sd_resp_parse("{\"x\":", 5, false, &bad, err, sizeof err), SD_ERR_FORMAT);
    ck_assert_int_eq(sd_resp_parse("[1]", 3, false, &bad, err, sizeof err), SD_ERR_FORMAT);
}
END_TEST

START_TEST(test_spec_metrics_filter)
{
    const char *text = "# HELP specd_spec_x help\nspecd_spec_accepted_per_position_total{pos=\"1\"} 123\r\n"
                       "other_metric 1\nspecd_spec_steps_total 9";
    char *f = sd_report_spec_metrics(text);
    ck_assert_ptr_nonnull(f);
    ck_assert_str_eq(f, "specd_spec_accepted_per_position_total{pos=\"1\"} 123\nspecd_spec_steps_total 9");
    free(f);
    ck_assert_ptr_null(sd_report_spec_metrics("vllm_x 1\n"));
    ck_assert_ptr_null(sd_report_spec_metrics(NULL));
}
END_TEST

START_TEST(test_url_join)
{
    char out[256];
    const char *bases[] = {"http://h:8000", "http://h:8000/", "http://h:8000/v1", "http://h:8000/v1/"};
    for (size_t i = 0; i < 4; i++) {
        ck_assert_int_eq(sd_http_url(out, sizeof out, bases[i], "/v1/models"), SD_OK);
        ck_assert_str_eq(out, "http://h:8000/v1/models");
    }
    ck_assert_int_eq(sd_http_url(out, sizeof out, "http://h:8000/v1", "/metrics"), SD_OK);
    ck_assert_str_eq(out, "http://h:8000/metrics");
    ck_assert_int_eq(sd_http_url(out, 8, "http://h:8000", "/v1/models"), SD_ERR_NOSPACE);
}
END_TEST

/* ---- datasets ---- */

START_TEST(test_dataset_jsonl)
{
    char path[] = "/tmp/sd_bench_ds_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    const char *text = "{\"prompt\": \"def f():\"}\n"
                       "garbage\n"
                       "\n"
                       "{\"messages\": [{\"role\": \"system\", \"content\": \"ab\"},"
                       " {\"role\": \"user\", \"content\": \"cde\"}]}\n"
                       "{\"prompt\": 3}\n";
    ck_assert(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
    close(fd);
    sd_dataset *ds = NULL;
    char err[256];
    FILE *warn = tmpfile();
    ck_assert_int_eq(sd_dataset_load(path, 0, warn, &ds, err, sizeof err), SD_OK);
    ck_assert_uint_eq(sd_dataset_count(ds), 2);
    ck_assert_str_eq(sd_dataset_get(ds, 0)->prompt, "def f():");
    ck_assert_uint_eq(json_array_size(sd_dataset_get(ds, 0)->messages), 1);
    ck_assert_str_eq(sd_dataset_get(ds, 1)->prompt, "ab\ncde");
    ck_assert_uint_eq(sd_dataset_get(ds, 1)->len_chars, 5);
    char wbuf[512] = "";
    rewind(warn);
    size_t wn = fread(wbuf, 1, sizeof wbuf - 1, warn);
    wbuf[wn] = '\0';
    ck_assert_ptr_nonnull(strstr(wbuf, ":2:"));
    ck_assert_ptr_nonnull(strstr(wbuf, ":5:"));
    fclose(warn);
    sd_dataset_free(ds);
    ck_assert_int_eq(sd_dataset_load(path, 1, NULL, &ds, err, sizeof err), SD_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err, ":2:"));
    ck_assert_ptr_null(ds);
    unlink(path);
    ck_assert_int_eq(sd_dataset_load("/nonexistent/x.jsonl", 0, NULL, &ds, err, sizeof err), SD_ERR_IO);
    ck_assert_int_eq(sd_dataset_builtin(&ds), SD_OK);
    ck_assert_uint_ge(sd_dataset_count(ds), 30);
    sd_dataset_free(ds);
    sd_dataset_free(NULL);
}
END_TEST

/* ---- random dataset ---- */

START_TEST(test_dataset_random)
{
    sd_dataset *a = NULL, *b = NULL, *c = NULL;
    ck_assert_int_eq(sd_dataset_random(50, 20, 8, 0.5, 7, &a), SD_OK);
    ck_assert_int_eq(sd_dataset_random(50, 20, 8, 0.5, 7, &b), SD_OK);
    ck_assert_int_eq(sd_dataset_random(50, 20, 8, 0.5, 8, &c), SD_OK);
    ck_assert_uint_eq(sd_dataset_count(a), 50);
    int same = 1, differs = 0;
    size_t shortest = 1000, longest = 0;
    for (size_t i = 0; i < 50; i++) {
        const sd_prompt *p = sd_dataset_get(a, i);
        ck_assert_ptr_nonnull(p->ids);
        size_t n = json_array_size(p->ids);
        ck_assert(n >= 10 && n <= 30);
        ck_assert(p->max_tokens >= 4 && p->max_tokens <= 12);
        for (size_t k = 0; k < n; k++) {
            json_int_t v = json_integer_value(json_array_get(p->ids, k));
            ck_assert(v >= SD_RANDOM_ID_LO && v < SD_RANDOM_ID_HI);
        }
        shortest = n < shortest ? n : shortest;
        longest = n > longest ? n : longest;
        same &= json_equal(p->ids, sd_dataset_get(b, i)->ids) && p->max_tokens == sd_dataset_get(b, i)->max_tokens;
        differs |= !json_equal(p->ids, sd_dataset_get(c, i)->ids);
    }
    ck_assert(same);                          /* the same seed, the same prompts */
    ck_assert(differs);                       /* another seed, others */
    ck_assert(shortest < 16 && longest > 24); /* the lengths spread over the range */
    sd_dataset_free(a);
    sd_dataset_free(b);
    sd_dataset_free(c);
    ck_assert_int_eq(sd_dataset_random(5, 0, 8, 0.5, 7, &a), SD_ERR_ARG);
    ck_assert_int_eq(sd_dataset_random(5, 10, 8, 1.0, 7, &a), SD_ERR_ARG);
    ck_assert_int_eq(sd_dataset_random(5, 10, 8, 0.0, 7, &a), SD_OK);
    for (size_t i = 0; i < 5; i++) ck_assert_uint_eq(json_array_size(sd_dataset_get(a, i)->ids), 10);
    sd_dataset_free(a);
}
END_TEST

/* ---- summary: input tokens and goodput ---- */

START_TEST(test_summary_goodput)
{
    sd_req_record recs[4];
    memset(recs, 0, sizeof recs);
    /* ttft s, tpot s, e2e s, input tokens: ok, slow first token, slow per token, failed */
    const double f[4][3] = {{0.1, 0.02, 1.0}, {0.9, 0.02, 1.5}, {0.1, 0.2, 3.0}, {0.1, 0.02, 1.0}};
    for (int i = 0; i < 4; i++) {
        recs[i].ttft = f[i][0];
        recs[i].tpot = f[i][1];
        recs[i].e2e = f[i][2];
        recs[i].output_tokens = 10;
        recs[i].input_tokens = 5 + i;
        recs[i].err = i == 3 ? SD_REQERR_HTTP_5XX : SD_REQERR_NONE;
    }
    recs[1].input_tokens = -1; /* not reported */
    sd_bench_result res = {.recs = recs, .n = 4, .cap = 4, .wall = 2.0};
    sd_report_summary s;
    ck_assert_int_eq(sd_report_summarize(&res, NULL, &s), SD_OK);
    ck_assert(isnan(s.goodput)); /* no objectives: no goodput */
    ck_assert_int_eq(s.total_input_tokens, 5 + 7);
    ck_assert_int_eq(s.input_reported, 2);
    NEAR(s.total_tok_per_s, (12 + 30) / 2.0, 1e-12);
    const double ttft_only[3] = {500, 0, 0}, both[3] = {500, 100, 0}, e2e[3] = {0, 0, 2000};
    ck_assert_int_eq(sd_report_summarize(&res, ttft_only, &s), SD_OK);
    ck_assert_int_eq(s.good, 2); /* requests 0 and 2; 1 is too slow to start, 3 failed */
    NEAR(s.goodput, 1.0, 1e-12);
    ck_assert_int_eq(sd_report_summarize(&res, both, &s), SD_OK);
    ck_assert_int_eq(s.good, 1);
    ck_assert_int_eq(sd_report_summarize(&res, e2e, &s), SD_OK);
    ck_assert_int_eq(s.good, 2);
    recs[0].tpot = NAN; /* a one-token answer meets a TPOT objective; no TTFT (not streamed) meets none */
    recs[2].ttft = NAN;
    ck_assert_int_eq(sd_report_summarize(&res, both, &s), SD_OK);
    ck_assert_int_eq(s.good, 1);
}
END_TEST

static Suite *bench_suite(void)
{
    Suite *s = suite_create("bench_client");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_percentile_known);
    tcase_add_test(tc, test_percentile_one_and_empty);
    tcase_add_test(tc, test_summarize_unsorted_with_nan);
    tcase_add_test(tc, test_tpot);
    tcase_add_test(tc, test_sse_every_split);
    tcase_add_test(tc, test_sse_byte_by_byte_and_random);
    tcase_add_test(tc, test_sse_limits);
    tcase_add_test(tc, test_poisson_gap_mean);
    tcase_add_test(tc, test_shuffle_permutation);
    tcase_add_test(tc, test_response_shapes);
    tcase_add_test(tc, test_spec_metrics_filter);
    tcase_add_test(tc, test_url_join);
    tcase_add_test(tc, test_dataset_jsonl);
    tcase_add_test(tc, test_summary_goodput);
    tcase_add_test(tc, test_dataset_random);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(bench_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}
