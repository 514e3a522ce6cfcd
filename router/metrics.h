/* metrics.h — the router's Prometheus text exposition (GET /metrics).
 *
 * The router counts HTTP requests by status, prompt / generated tokens and
 * request latency itself; speculative counters and KV gauges come from the
 * lanes' last Stats (HealthReply) and are summed over lanes. Names:
 *   specd_http_requests_total{code}        counter
 *   specd_prompt_tokens_total              counter
 *   specd_generation_tokens_total          counter
 *   specd_request_duration_seconds         histogram (le buckets, _sum, _count)
 *   specd_requests_active / _queued        gauges (router view)
 *   specd_lane_up{lane}, specd_lane_inflight{lane}
 *   specd_kv_blocks{lane}, specd_kv_blocks_free{lane}
 *   specd_spec_steps_total, specd_spec_draft_tokens_total,
 *   specd_spec_accepted_tokens_total, specd_spec_accepted_per_position_total{pos}
 *   specd_spec_acceptance_rate             gauge (accepted / drafted)
 * and, beside them, vLLM's names with a model_name label, so that vLLM's
 * dashboards read specd: vllm:num_requests_running / _waiting,
 * vllm:kv_cache_usage_perc (and its older name vllm:gpu_cache_usage_perc),
 * vllm:prompt_tokens_total, vllm:generation_tokens_total,
 * vllm:request_success_total{finished_reason}, the histograms
 * vllm:time_to_first_token_seconds, vllm:time_per_output_token_seconds,
 * vllm:inter_token_latency_seconds,
 * vllm:e2e_request_latency_seconds, vllm:request_prompt_tokens,
 * vllm:request_generation_tokens, vllm:request_queue_time_seconds,
 * vllm:request_prefill_time_seconds, vllm:request_decode_time_seconds,
 * vllm:request_inference_time_seconds (vLLM's buckets; queue = the router's
 * queue, prefill = dispatch to first token, decode = first token to end), and
 * vllm:spec_decode_num_drafts_total, _num_draft_tokens_total,
 * _num_accepted_tokens_total, _num_accepted_tokens_per_pos_total{position}.
 * Single-threaded (the event loop's thread). */
#ifndef SD_METRICS_H
#define SD_METRICS_H

#include <stdint.h>

#include "lanes.h"

#define SD_METRICS_NBUCKETS 12
#define SD_HIST_MAX 32

/* A histogram's counts per bucket (not cumulative), count and sum. */
typedef struct sd_hist {
    uint64_t counts[SD_HIST_MAX];
    uint64_t count;
    double sum;
} sd_hist;

/* One finished generation, as the metrics see it. */
typedef struct sd_metrics_req {
    unsigned prompt_tokens, completion_tokens;
    double e2e_s;       /* from arrival to the end */
    double ttft_s;      /* from arrival to the first token; < 0: none came */
    double queue_s;     /* from arrival to its first dispatch to a lane (the router's queue) */
    const char *finish; /* "stop" or "length" */
} sd_metrics_req;

typedef struct sd_metrics {
    uint64_t by_status[600]; /* HTTP status → count */
    uint64_t prompt_tokens, generation_tokens;
    sd_hist latency; /* specd_request_duration_seconds */
    int active, queued;
    uint64_t auth_failures;          /* requests refused for a missing or wrong API key */
    uint64_t failovers;              /* requests resumed on another lane when theirs died */
    int connections;                 /* open HTTP connections (set before rendering) */
    uint64_t connection_cap_reached; /* times --max-connections paused accepting (likewise) */
    uint64_t connections_closed[5];  /* connections closed by the router, by reason (conncap.h; likewise) */
    const char *model_name;          /* the model_name label of the vllm: series (NULL: "") */
    sd_hist ttft, tpot, itl, e2e, prompt_len, gen_len, queue, prefill, decode, inference;
    uint64_t finished_stop, finished_length;
} sd_metrics;

/* Counts one finished HTTP request (any endpoint). */
void sd_metrics_count_status(sd_metrics *m, int status);

/* Records a finished generation: tokens, latencies, finish reason. */
void sd_metrics_observe(sd_metrics *m, const sd_metrics_req *r);

/* Records the time between two token events of one request
 * (vllm:inter_token_latency_seconds). */
void sd_metrics_observe_itl(sd_metrics *m, double seconds);

/* Renders the exposition text; malloc'd, caller frees; NULL on OOM.
 * lanes may be NULL (no lane metrics). */
char *sd_metrics_render(const sd_metrics *m, const sd_lanes *lanes);

#endif
