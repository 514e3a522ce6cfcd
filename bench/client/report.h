/* report.h — what specd-bench makes of a run: the aggregate summary, the
 * table on stdout, the --json file, and the filter for specd's Prometheus
 * speculation metrics.
 *
 * All functions only read the result; the summary is a plain value. */
#ifndef SD_BENCH_REPORT_H
#define SD_BENCH_REPORT_H

#include <stdio.h>

#include "runner.h"
#include "stats.h"

typedef struct {
    long completed; /* successful measured requests */
    long failed;    /* errors other than cancelled */
    long cancelled;
    long by_kind[SD_REQERR_COUNT];
    long total_output_tokens; /* successful requests only */
    long total_input_tokens;  /* usage.prompt_tokens of the successful requests that reported it */
    long total_cached_tokens; /* ... and of those, the prompt tokens the server's prefix cache held */
    long input_reported;      /* ... how many did */
    double total_tok_per_s;   /* (input + output tokens) / wall */
    long good;                /* successful requests meeting every --goodput SLO */
    double goodput;           /* good / wall; NAN without --goodput */
    long usage_requests;      /* successes whose count came from "usage" */
    double wall, req_per_s, out_tok_per_s;
    sd_stats_summary ttft, tpot, itl, e2e; /* seconds, successful requests */
    long spec_requests, spec_steps, spec_draft, spec_accepted;
    double spec_per_step;      /* sum accepted / sum steps; NAN if none */
    double spec_accept_rate;   /* sum accepted / sum drafted; NAN if none */
    double spec_mean_of_means; /* mean of per-request mean_accepted_per_step */
} sd_report_summary;

/* Aggregates res into *out; slo_ms (TTFT, TPOT, E2E in ms, 0: none; may be
 * NULL) defines the good requests of the goodput, as vLLM's --goodput: a
 * successful request whose figures are all within their objectives (a TTFT
 * objective is not met where TTFT is not measured, without streaming; a
 * TPOT one is met by a one-token answer). Returns SD_OK or SD_ERR_NOMEM. */
sd_status sd_report_summarize(const sd_bench_result *res, const double *slo_ms, sd_report_summary *out);

/* Returns the lines of a Prometheus text exposition whose metric name starts
 * with "specd_spec_", joined with "\n", as a malloc'd string (caller frees),
 * or NULL when there is none (or text is NULL). */
char *sd_report_spec_metrics(const char *metrics_text);

/* Prints the summary table to f. spec_metrics is the output of
 * sd_report_spec_metrics or NULL ("n/a"). */
void sd_report_print(FILE *f, const sd_bench_config *cfg, const sd_bench_result *res, const sd_report_summary *s,
                     const char *spec_metrics);

/* Writes {config, requests, summary} to path. Times in "requests" are in
 * seconds, summary latencies in milliseconds (keys end in _ms).
 * Returns SD_OK, SD_ERR_IO or SD_ERR_NOMEM with a message in err. */
sd_status sd_report_write_json(const char *path, const sd_bench_config *cfg, const sd_bench_result *res,
                               const sd_report_summary *s, const char *spec_metrics, char *err, size_t errlen);

#endif
