/* runner.h — the load generator of specd-bench: issues requests to an
 * OpenAI-compatible server through the libcurl multi interface and records
 * per-request timings.
 *
 * One thread drives everything: concurrency is the number of easy handles in
 * flight. Arrivals are either closed-loop (--concurrency N: keep N in
 * flight) or open-loop Poisson (--request-rate R, seeded exponential gaps,
 * optionally capped at --concurrency in flight). A warm-up phase runs first
 * and is kept out of the records.
 *
 * Ownership: sd_runner_run fills an sd_bench_result that the caller releases
 * with sd_bench_result_clear. The config and dataset are only borrowed. */
#ifndef SD_BENCH_RUNNER_H
#define SD_BENCH_RUNNER_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dataset.h"
#include "status.h"

typedef enum { SD_EP_COMPLETIONS, SD_EP_CHAT } sd_endpoint;

/* Parsed command line; see main.c for the meaning of every option. */
typedef struct {
    const char *url;     /* server base URL */
    const char *api_key; /* NULL: no Authorization header */
    const char *model;   /* NULL: no "model" member is sent */
    sd_endpoint endpoint;
    int concurrency;     /* max in flight; 0 = unlimited (rate mode only) */
    double request_rate; /* requests/s; 0 = closed loop */
    long num_prompts;    /* measured requests; 0 = until duration */
    long max_tokens;     /* <= 0: not sent */
    bool has_temperature;
    double temperature;
    bool has_seed; /* "seed" is sent only when given */
    uint64_t seed; /* also seeds arrivals and prompt order */
    bool in_order; /* prompts in the dataset's order (multi-turn datasets), not shuffled */
    bool stream;
    bool ignore_eos;
    long warmup;        /* warm-up requests, not recorded */
    double duration;    /* seconds; 0 = no time bound */
    double grace;       /* in-flight requests are cancelled at duration + grace */
    double timeout;     /* per-request timeout, seconds */
    json_t *extra_body; /* object merged into every body, or NULL (borrowed) */
    double slo_ms[3];   /* --goodput: TTFT, TPOT, E2E service-level objectives in ms (0: none) */
    bool quiet;
    bool progress_tty; /* stderr is a terminal: \r progress line */
} sd_bench_config;

/* Why a request did not complete. Names (sd_reqerr_name) go into reports. */
typedef enum {
    SD_REQERR_NONE = 0,
    SD_REQERR_CONNECT_REFUSED,
    SD_REQERR_CONNECT_FAILED, /* other connect failure (unreachable, reset on connect) */
    SD_REQERR_DNS,
    SD_REQERR_TIMEOUT,
    SD_REQERR_HTTP_4XX,
    SD_REQERR_HTTP_5XX,
    SD_REQERR_HTTP_OTHER,   /* unexpected 1xx/3xx status */
    SD_REQERR_BAD_RESPONSE, /* 2xx but unparsable / empty */
    SD_REQERR_SERVER_ERROR, /* 2xx carrying an "error" object */
    SD_REQERR_NETWORK,      /* connection dropped mid-response, send/recv errors */
    SD_REQERR_CANCELLED,    /* still in flight at duration + grace */
    SD_REQERR_OTHER,
    SD_REQERR_COUNT
} sd_reqerr;

/* Returns the report name of an error kind ("connect_refused", "http_5xx"...). */
const char *sd_reqerr_name(sd_reqerr e);

/* One measured request. Times are seconds; NAN when not measured. */
typedef struct {
    long id; /* 0-based issue order in the measured phase */
    size_t prompt_index;
    size_t prompt_len_chars;
    double start; /* issue time, offset from the measured phase start */
    double ttft;  /* first non-empty content chunk (streaming only) */
    double e2e;
    double tpot; /* (e2e - ttft) / (output_tokens - 1) */
    double *itl; /* gaps between content chunks (n_itl = chunks - 1) */
    size_t n_itl, cap_itl;
    long output_tokens;
    long input_tokens;      /* usage.prompt_tokens as the server counted them; -1: not reported */
    long cached_tokens;     /* usage.prompt_tokens_details.cached_tokens (prefix cache); -1: not reported */
    bool tokens_from_usage; /* false: counted content chunks */
    long content_chunks;
    long http_status;
    sd_reqerr err;
    char errmsg[192];
    bool has_spec;
    long spec_steps, spec_draft, spec_accepted;
    double spec_mean;
} sd_req_record;

typedef struct {
    sd_req_record *recs; /* measured requests, in issue order */
    size_t n, cap;
    double wall; /* measured phase, seconds */
    long warmup_done, warmup_failed;
    bool interrupted; /* stopped by SIGINT */
} sd_bench_result;

/* Runs warm-up then the measured phase. Never exits the process: transport
 * and server failures are recorded per request. Returns SD_OK (even when
 * every request failed), SD_ERR_ARG (no bound / bad config), SD_ERR_NOMEM or
 * SD_ERR_IO (libcurl could not be set up), with a message in err.
 * *out must be zero-initialized; release it with sd_bench_result_clear. */
sd_status sd_runner_run(const sd_bench_config *cfg, const sd_dataset *ds, sd_bench_result *out, char *err,
                        size_t errlen);

/* Frees the records of r and zeroes it; safe on a zeroed result. */
void sd_bench_result_clear(sd_bench_result *r);

/* Asks a running sd_runner_run to stop issuing and cancel in-flight requests
 * (async-signal-safe: sets a flag). */
void sd_runner_interrupt(void);

#endif
