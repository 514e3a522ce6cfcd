/* metrics.c — see metrics.h. Rendering appends to an open_memstream. */
#include "metrics.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const double BUCKETS[SD_METRICS_NBUCKETS] = {0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300};

void sd_metrics_count_status(sd_metrics *m, int status)
{
    if (status >= 100 && status < 600) m->by_status[status]++;
}

/* vLLM's bucket bounds for its request histograms. */
static const double TTFT_B[] = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1,  0.25,  0.5,   0.75,
                                1.0,   2.5,   5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
static const double TPOT_B[] = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2,  0.3,  0.4, 0.5,
                                0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
static const double E2E_B[] = {0.3,  0.5,  0.8,  1.0,  1.5,   2.0,   2.5,   5.0,   10.0,   15.0,  20.0,
                               30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
static const double LEN_B[] = {1,    2,    5,     10,    20,    50,     100,    200,    500,    1000,
                               2000, 5000, 10000, 20000, 50000, 100000, 200000, 500000, 1000000};
#define NB(a) ((int)(sizeof a / sizeof a[0]))

static void hist_add(sd_hist *h, const double *bounds, int n, double x)
{
    h->count++;
    h->sum += x;
    for (int i = 0; i < n; i++)
        if (x <= bounds[i]) {
            h->counts[i]++;
            return;
        }
}

void sd_metrics_observe(sd_metrics *m, const sd_metrics_req *r)
{
    m->prompt_tokens += r->prompt_tokens;
    m->generation_tokens += r->completion_tokens;
    hist_add(&m->e2e, E2E_B, NB(E2E_B), r->e2e_s);
    hist_add(&m->prompt_len, LEN_B, NB(LEN_B), r->prompt_tokens);
    hist_add(&m->gen_len, LEN_B, NB(LEN_B), r->completion_tokens);
    if (r->ttft_s >= 0) hist_add(&m->ttft, TTFT_B, NB(TTFT_B), r->ttft_s);
    if (r->ttft_s >= 0 && r->completion_tokens >= 2)
        hist_add(&m->tpot, TPOT_B, NB(TPOT_B), (r->e2e_s - r->ttft_s) / (r->completion_tokens - 1));
    hist_add(&m->queue, E2E_B, NB(E2E_B), r->queue_s);
    hist_add(&m->inference, E2E_B, NB(E2E_B), r->e2e_s - r->queue_s);
    if (r->ttft_s >= 0) {
        hist_add(&m->prefill, E2E_B, NB(E2E_B), r->ttft_s - r->queue_s);
        hist_add(&m->decode, E2E_B, NB(E2E_B), r->e2e_s - r->ttft_s);
    }
    if (r->finish && !strcmp(r->finish, "length")) m->finished_length++;
    else m->finished_stop++;
    hist_add(&m->latency, BUCKETS, SD_METRICS_NBUCKETS, r->e2e_s);
}

void sd_metrics_observe_itl(sd_metrics *m, double seconds) { hist_add(&m->itl, TPOT_B, NB(TPOT_B), seconds); }

static void header(FILE *f, const char *name, const char *type, const char *help)
{
    fprintf(f, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

/* A histogram's series; labels: "" or `model_name="..."` (then joined to le with a comma). */
static void render_hist(FILE *f, const char *name, const char *help, const char *labels, const sd_hist *h,
                        const double *bounds, int n)
{
    header(f, name, "histogram", help);
    const char *sep = *labels ? "," : "";
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += h->counts[i];
        fprintf(f, "%s_bucket{%s%sle=\"%g\"} %llu\n", name, labels, sep, bounds[i], (unsigned long long)cum);
    }
    fprintf(f, "%s_bucket{%s%sle=\"+Inf\"} %llu\n", name, labels, sep, (unsigned long long)h->count);
    if (*labels) {
        fprintf(f, "%s_sum{%s} %.6f\n", name, labels, h->sum);
        fprintf(f, "%s_count{%s} %llu\n", name, labels, (unsigned long long)h->count);
    } else {
        fprintf(f, "%s_sum %.6f\n%s_count %llu\n", name, h->sum, name, (unsigned long long)h->count);
    }
}

static void render_router(FILE *f, const sd_metrics *m)
{
    header(f, "specd_http_requests_total", "counter", "HTTP requests answered, by status code.");
    for (int s = 100; s < 600; s++)
        if (m->by_status[s])
            fprintf(f, "specd_http_requests_total{code=\"%d\"} %llu\n", s, (unsigned long long)m->by_status[s]);
    header(f, "specd_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
    fprintf(f, "specd_prompt_tokens_total %llu\n", (unsigned long long)m->prompt_tokens);
    header(f, "specd_generation_tokens_total", "counter", "Generated tokens of finished requests.");
    fprintf(f, "specd_generation_tokens_total %llu\n", (unsigned long long)m->generation_tokens);
    render_hist(f, "specd_request_duration_seconds", "End-to-end generation latency.", "", &m->latency, BUCKETS,
                SD_METRICS_NBUCKETS);
    header(f, "specd_requests_active", "gauge", "Requests running on a lane.");
    fprintf(f, "specd_requests_active %d\n", m->active);
    header(f, "specd_requests_queued", "gauge", "Requests waiting in the router for a lane.");
    fprintf(f, "specd_requests_queued %d\n", m->queued);
    header(f, "specd_failovers_total", "counter", "Requests resumed on another lane when theirs died.");
    fprintf(f, "specd_failovers_total %llu\n", (unsigned long long)m->failovers);
    header(f, "specd_http_connections", "gauge", "Open HTTP connections.");
    fprintf(f, "specd_http_connections %d\n", m->connections);
    header(f, "specd_http_connection_cap_reached_total", "counter",
           "Times --max-connections connections were open and accepting paused.");
    fprintf(f, "specd_http_connection_cap_reached_total %llu\n", (unsigned long long)m->connection_cap_reached);
    header(f, "specd_http_connections_closed_total", "counter",
           "Connections the router closed: silent (nothing sent in --first-byte-timeout), keepalive (idle "
           "--keepalive-timeout after an answer), per_client (over --max-connections-per-client), evicted (the "
           "oldest idle one at --max-connections), timeout (a request that stalled: 408).");
    static const char *const reason[5] = {"silent", "keepalive", "per_client", "evicted", "timeout"};
    for (int r = 0; r < 5; r++)
        fprintf(f, "specd_http_connections_closed_total{reason=\"%s\"} %llu\n", reason[r],
                (unsigned long long)m->connections_closed[r]);
    header(f, "specd_auth_failures_total", "counter", "Requests refused for a missing or wrong API key.");
    fprintf(f, "specd_auth_failures_total %llu\n", (unsigned long long)m->auth_failures);
}

static long long lane_value(const sd_lane_info *in, int which)
{
    switch (which) {
    case 0: return in->state == SD_LANE_UP;
    case 1: return in->inflight;
    case 2: return in->kv_total;
    case 3: return in->kv_free;
    case 4: return in->drafter_requests;
    case 5: return in->drafter_kv_total;
    case 6: return in->drafter_kv_free;
    case 7: return in->step_rows_max;
    case 9: return (long long)in->prefix_queries;
    case 10: return (long long)in->prefix_hits;
    case 11: return in->prefix_cached;
    case 12: return (long long)in->prefix_evictions;
    case 13: return in->tp_size > 0 ? in->tp_size : 1;
    default: return (long long)in->preemptions;
    }
}

static void lane_series(FILE *f, const sd_lanes *l, const char *name, const char *type, const char *help, int which)
{
    header(f, name, type, help);
    for (size_t i = 0; i < sd_lanes_count(l); i++) {
        const sd_lane_info *in = sd_lanes_info(l, (int)i);
        fprintf(f, "%s{lane=\"%s\"} %lld\n", name, in->endpoint, lane_value(in, which));
    }
}

/* The lanes' drafting figures (specd.PipeStats), summed, and the two rates
 * they give: pre-draft hit rate and the fraction of drafting time hidden
 * behind verification (1 - (step - verify) / draft). */
static void render_pipe(FILE *f, const sd_lanes *l)
{
    static const char *const name[SD_PIPE_STATS_N] = {
        "spans_used",    "spans_stale",  "spans_ready",    "decode_steps",  "wait_seconds",
        "draft_seconds", "step_seconds", "verify_seconds", "fallback_used", "fallback_accepted"};
    static const char *const help[SD_PIPE_STATS_N] = {
        "Steps that verified drafter tokens (summed over lanes).",
        "Pipelined spans dropped because their base was not the committed sequence.",
        "Pipelined steps whose span was there when the step began (pre-draft hits).",
        "Decode steps of requests that take drafts.",
        "Time the verifier spent waiting for drafts.",
        "Drafter time behind the drafts used.",
        "Wall time of the decode steps with drafts, end of the previous step to end.",
        "Forward pass and accept time of those steps.",
        "Steps that verified the verifier's n-gram lookup drafts instead of the drafter's (no span in time, or "
        "chosen first; --spec-fallback).",
        "Drafts of those steps accepted."};
    sd_pipe_stats all = {.v = {0}};
    uint64_t *sum = all.v;
    for (size_t i = 0; i < sd_lanes_count(l); i++)
        for (int k = 0; k < SD_PIPE_STATS_N; k++) sum[k] += sd_lanes_info(l, (int)i)->pipe.v[k];
    for (int k = 0; k < SD_PIPE_STATS_N; k++) {
        char full[64];
        snprintf(full, sizeof full, "specd_spec_%s_total", name[k]);
        header(f, full, "counter", help[k]);
        if (k < 4 || k >= 8) fprintf(f, "%s %llu\n", full, (unsigned long long)sum[k]); /* counts */
        else fprintf(f, "%s %.6f\n", full, (double)sum[k] / 1e6);                       /* fields 4..7: microseconds */
    }
    header(f, "specd_spec_pre_draft_hit_rate", "gauge", "spans_ready / decode_steps since start.");
    fprintf(f, "specd_spec_pre_draft_hit_rate %.6f\n", sum[3] ? (double)sum[2] / (double)sum[3] : 0.0);
    header(f, "specd_spec_draft_time_hidden", "gauge", "1 - wait / draft since start, clamped to [0, 1].");
    fprintf(f, "specd_spec_draft_time_hidden %.6f\n", sd_pipe_stats_hidden(&all));
}

/* A test of two regimes (common/spec/regime.h): the steps it ran in the
 * second one (summed over lanes), and each lane's measured rates of both.
 * steps_off, rate_off: where sd_lane_info keeps them (uint64_t, float[2]). */
typedef struct two_regimes {
    const char *steps, *steps_help, *rate, *rate_help, *label, *name[2];
    size_t steps_off, rate_off;
} two_regimes;

static void render_two_regimes(FILE *f, const sd_lanes *l, const two_regimes *t)
{
    uint64_t steps = 0;
    for (size_t i = 0; i < sd_lanes_count(l); i++)
        steps += *(const uint64_t *)((const char *)sd_lanes_info(l, (int)i) + t->steps_off);
    header(f, t->steps, "counter", t->steps_help);
    fprintf(f, "%s %llu\n", t->steps, (unsigned long long)steps);
    header(f, t->rate, "gauge", t->rate_help);
    for (size_t i = 0; i < sd_lanes_count(l); i++) {
        const sd_lane_info *in = sd_lanes_info(l, (int)i);
        const float *rate = (const float *)((const char *)in + t->rate_off);
        for (int r = 0; r < 2; r++)
            fprintf(f, "%s{lane=\"%s\",%s=\"%s\"} %.4f\n", t->rate, in->endpoint, t->label, t->name[r], rate[r]);
    }
}

static const two_regimes REGIME_TEST = {
    "specd_spec_regime_plain_steps_total",
    "Steps the regime test ran without drafts (blocks of plain decoding measured against drafting).",
    "specd_spec_regime_rate",
    "The regime test's measured rate of drafting and of plain decoding under the load last tested: tokens "
    "committed per ms (0: not measured).",
    "regime",
    {"drafting", "plain"},
    offsetof(sd_lane_info, regime_plain),
    offsetof(sd_lane_info, regime_rate)};

static const two_regimes PIPELINING_TEST = {
    "specd_spec_pipeline_serial_steps_total",
    "Steps the pipelining test (--spec-pipeline auto) ran with the serial protocol, in blocks measured against "
    "pipelined ones.",
    "specd_spec_pipeline_rate",
    "The pipelining test's measured rate of the pipelined and of the serial protocol under the load last tested: "
    "tokens committed per ms (0: not measured).",
    "protocol",
    {"pipelined", "serial"},
    offsetof(sd_lane_info, pipe_serial),
    offsetof(sd_lane_info, pipe_rate)};

/* Adaptive speculation: the draft lengths chosen (summed over lanes), the
 * scheduler's predicted against measured step time, and each lane's
 * acceptance estimates. */
static void render_adapt(FILE *f, const sd_lanes *l)
{
    uint64_t k[SD_LANE_MAX_K + 1] = {0}, pred = 0, meas = 0, errs = 0;
    size_t nk = 0;
    for (size_t i = 0; i < sd_lanes_count(l); i++) {
        const sd_lane_info *in = sd_lanes_info(l, (int)i);
        for (size_t j = 0; j < in->n_k_chosen; j++) k[j] += in->k_chosen[j];
        if (in->n_k_chosen > nk) nk = in->n_k_chosen;
        pred += in->step_pred_us;
        meas += in->step_meas_us;
        errs += in->step_err_us;
    }
    header(f, "specd_spec_draft_length_total", "counter",
           "Decode steps by the number of drafts the scheduler chose (k), summed over requests and lanes.");
    for (size_t j = 0; j < nk; j++)
        fprintf(f, "specd_spec_draft_length_total{k=\"%zu\"} %llu\n", j, (unsigned long long)k[j]);
    header(f, "specd_spec_step_predicted_seconds_total", "counter", "Step time the scheduler predicted.");
    fprintf(f, "specd_spec_step_predicted_seconds_total %.6f\n", pred / 1e6);
    header(f, "specd_spec_step_measured_seconds_total", "counter", "Measured time of the same steps.");
    fprintf(f, "specd_spec_step_measured_seconds_total %.6f\n", meas / 1e6);
    header(f, "specd_spec_step_prediction_error", "gauge", "Mean |predicted - measured| / measured step time.");
    fprintf(f, "specd_spec_step_prediction_error %.6f\n", meas ? (double)errs / (double)meas : 0.0);
    render_two_regimes(f, l, &REGIME_TEST);
    render_two_regimes(f, l, &PIPELINING_TEST);
    header(f, "specd_spec_acceptance_estimate", "gauge",
           "P(draft pos accepted | the drafts before it were), by kind of request (verification mode, temperature).");
    for (size_t i = 0; i < sd_lanes_count(l); i++) {
        const sd_lane_info *in = sd_lanes_info(l, (int)i);
        for (size_t e = 0; e < in->n_accept; e++)
            for (size_t j = 0; j < in->accept[e].n; j++)
                fprintf(f,
                        "specd_spec_acceptance_estimate{lane=\"%s\",mode=\"%s\",temperature=\"%s\",pos=\"%zu\"} %.4f\n",
                        in->endpoint, in->accept[e].mode, in->accept[e].temperature, j + 1, in->accept[e].accept[j]);
    }
}

static void render_lanes(FILE *f, const sd_lanes *l)
{
    lane_series(f, l, "specd_lane_up", "gauge", "1 when the lane's verifier answers health checks.", 0);
    lane_series(f, l, "specd_lane_inflight", "gauge", "Requests routed to the lane and not finished.", 1);
    lane_series(f, l, "specd_kv_blocks", "gauge", "KV pool blocks of the lane's verifier.", 2);
    lane_series(f, l, "specd_kv_blocks_free", "gauge", "Free KV pool blocks of the lane's verifier.", 3);
    lane_series(f, l, "specd_drafter_requests", "gauge", "Requests the lane's drafter holds state for.", 4);
    lane_series(f, l, "specd_drafter_kv_blocks", "gauge", "KV mirror pool blocks of the lane's drafter.", 5);
    lane_series(f, l, "specd_drafter_kv_blocks_free", "gauge", "Free KV mirror pool blocks of the lane's drafter.", 6);
    lane_series(f, l, "specd_step_rows_max", "gauge",
                "The most rows (prompt tokens, decode and draft positions) one engine step of the lane had.", 7);
    lane_series(f, l, "specd_preemptions_total", "counter",
                "Requests the lane's verifier preempted: KV given back when the pool ran short, prefilled again later.",
                8);
    lane_series(f, l, "specd_prefix_queries_total", "counter",
                "Prompt positions the lane's verifier looked up in its prefix cache.", 9);
    lane_series(f, l, "specd_prefix_hits_total", "counter",
                "Prompt positions whose KV the lane's verifier took from its prefix cache instead of computing it.",
                10);
    lane_series(f, l, "specd_prefix_cached_blocks", "gauge",
                "KV blocks the lane's verifier keeps for its prefix cache that no request holds.", 11);
    lane_series(f, l, "specd_prefix_evictions_total", "counter",
                "Cached KV blocks the lane's verifier gave to new work, least recently used first.", 12);
    lane_series(f, l, "specd_lane_tensor_parallel_size", "gauge",
                "Ranks the lane's verifier splits its target over (--tensor-parallel-size; 1: not split).", 13);
    header(f, "specd_lane_rank_info", "gauge", "1 for each rank of a split target, naming its device.");
    for (size_t i = 0; i < sd_lanes_count(l); i++) {
        const sd_lane_info *in = sd_lanes_info(l, (int)i);
        for (int r = 0; in->tp_size > 1 && r < in->tp_size && r < 8; r++)
            fprintf(f, "specd_lane_rank_info{lane=\"%s\",rank=\"%d\",device=\"%s\"} 1\n", in->endpoint, r,
                    in->rank_device[r]);
    }
    uint64_t steps = 0, drafted = 0, accepted = 0, pos[64] = {0};
    size_t npos = 0;
    for (size_t i = 0; i < sd_lanes_count(l); i++) {
        const sd_lane_info *in = sd_lanes_info(l, (int)i);
        steps += in->steps;
        drafted += in->draft_tokens;
        accepted += in->accepted_tokens;
        for (size_t k = 0; k < in->n_accepted_at; k++) pos[k] += in->accepted_at[k];
        if (in->n_accepted_at > npos) npos = in->n_accepted_at;
    }
    header(f, "specd_spec_steps_total", "counter", "Verify steps run (summed over lanes).");
    fprintf(f, "specd_spec_steps_total %llu\n", (unsigned long long)steps);
    header(f, "specd_spec_draft_tokens_total", "counter", "Draft tokens proposed (summed over lanes).");
    fprintf(f, "specd_spec_draft_tokens_total %llu\n", (unsigned long long)drafted);
    header(f, "specd_spec_accepted_tokens_total", "counter", "Draft tokens accepted (summed over lanes).");
    fprintf(f, "specd_spec_accepted_tokens_total %llu\n", (unsigned long long)accepted);
    header(f, "specd_spec_accepted_per_position_total", "counter",
           "Steps whose draft token at position pos was accepted.");
    for (size_t k = 0; k < npos; k++)
        fprintf(f, "specd_spec_accepted_per_position_total{pos=\"%zu\"} %llu\n", k + 1, (unsigned long long)pos[k]);
    header(f, "specd_spec_acceptance_rate", "gauge", "Accepted / drafted tokens since start.");
    fprintf(f, "specd_spec_acceptance_rate %.6f\n", drafted ? (double)accepted / (double)drafted : 0.0);
    render_pipe(f, l);
    render_adapt(f, l);
}

static void vllm_hist(FILE *f, const char *name, const char *help, const char *model, const sd_hist *h,
                      const double *bounds, int n)
{
    char labels[200];
    snprintf(labels, sizeof labels, "model_name=\"%s\"", model);
    render_hist(f, name, help, labels, h, bounds, n);
}

static void vllm_value(FILE *f, const char *name, const char *type, const char *help, const char *model, double v)
{
    header(f, name, type, help);
    fprintf(f, "%s{model_name=\"%s\"} %.10g\n", name, model, v);
}

/* The vllm: series (metrics.h). */
static void render_vllm(FILE *f, const sd_metrics *m, const sd_lanes *l)
{
    const char *model = m->model_name ? m->model_name : "";
    vllm_value(f, "vllm:num_requests_running", "gauge", "Requests running on a lane.", model, m->active);
    vllm_value(f, "vllm:num_requests_waiting", "gauge", "Requests waiting for a lane.", model, m->queued);
    uint64_t kv_total = 0, kv_free = 0, drafts = 0, drafted = 0, accepted = 0, pos[64] = {0}, pq = 0, ph = 0;
    size_t npos = 0;
    for (size_t i = 0; l && i < sd_lanes_count(l); i++) {
        const sd_lane_info *in = sd_lanes_info(l, (int)i);
        kv_total += in->kv_total;
        kv_free += in->kv_free;
        drafts += in->pipe.spans_used + in->pipe.fallback_used; /* steps that verified drafts */
        drafted += in->draft_tokens;
        accepted += in->accepted_tokens;
        for (size_t k = 0; k < in->n_accepted_at; k++) pos[k] += in->accepted_at[k];
        if (in->n_accepted_at > npos) npos = in->n_accepted_at;
        pq += in->prefix_queries;
        ph += in->prefix_hits;
    }
    double usage = kv_total ? (double)(kv_total - kv_free) / (double)kv_total : 0.0;
    vllm_value(f, "vllm:kv_cache_usage_perc", "gauge", "KV cache usage (1 = full), over the lanes.", model, usage);
    vllm_value(f, "vllm:gpu_cache_usage_perc", "gauge", "KV cache usage (older name).", model, usage);
    vllm_value(f, "vllm:prefix_cache_queries_total", "counter", "Prompt tokens looked up in the prefix cache.", model,
               (double)pq);
    vllm_value(f, "vllm:prefix_cache_hits_total", "counter", "Prompt tokens found in the prefix cache.", model,
               (double)ph);
    vllm_value(f, "vllm:prompt_tokens_total", "counter", "Prompt tokens of finished requests.", model,
               (double)m->prompt_tokens);
    vllm_value(f, "vllm:generation_tokens_total", "counter", "Generated tokens of finished requests.", model,
               (double)m->generation_tokens);
    header(f, "vllm:request_success_total", "counter", "Finished requests, by finish reason.");
    fprintf(f, "vllm:request_success_total{model_name=\"%s\",finished_reason=\"stop\"} %llu\n", model,
            (unsigned long long)m->finished_stop);
    fprintf(f, "vllm:request_success_total{model_name=\"%s\",finished_reason=\"length\"} %llu\n", model,
            (unsigned long long)m->finished_length);
    vllm_hist(f, "vllm:time_to_first_token_seconds", "Time to first token.", model, &m->ttft, TTFT_B, NB(TTFT_B));
    vllm_hist(f, "vllm:time_per_output_token_seconds", "Time per output token after the first.", model, &m->tpot,
              TPOT_B, NB(TPOT_B));
    vllm_hist(f, "vllm:inter_token_latency_seconds",
              "Time between two token events of a request (a speculative "
              "step's tokens come together).",
              model, &m->itl, TPOT_B, NB(TPOT_B));
    vllm_hist(f, "vllm:e2e_request_latency_seconds", "End-to-end request latency.", model, &m->e2e, E2E_B, NB(E2E_B));
    vllm_hist(f, "vllm:request_prompt_tokens", "Prompt tokens per request.", model, &m->prompt_len, LEN_B, NB(LEN_B));
    vllm_hist(f, "vllm:request_generation_tokens", "Generated tokens per request.", model, &m->gen_len, LEN_B,
              NB(LEN_B));
    vllm_hist(f, "vllm:request_queue_time_seconds", "Time in the router's queue.", model, &m->queue, E2E_B, NB(E2E_B));
    vllm_hist(f, "vllm:request_prefill_time_seconds", "From dispatch to a lane to the first token.", model, &m->prefill,
              E2E_B, NB(E2E_B));
    vllm_hist(f, "vllm:request_decode_time_seconds", "From the first token to the end.", model, &m->decode, E2E_B,
              NB(E2E_B));
    vllm_hist(f, "vllm:request_inference_time_seconds", "From dispatch to a lane to the end.", model, &m->inference,
              E2E_B, NB(E2E_B));
    if (!l) return;
    vllm_value(f, "vllm:spec_decode_num_drafts_total", "counter",
               "Verify steps that had drafts (summed over requests and lanes).", model, (double)drafts);
    vllm_value(f, "vllm:spec_decode_num_draft_tokens_total", "counter", "Draft tokens proposed.", model,
               (double)drafted);
    vllm_value(f, "vllm:spec_decode_num_accepted_tokens_total", "counter", "Draft tokens accepted.", model,
               (double)accepted);
    header(f, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Steps whose draft token at position was accepted (0-based).");
    for (size_t k = 0; k < npos; k++)
        fprintf(f, "vllm:spec_decode_num_accepted_tokens_per_pos_total{model_name=\"%s\",position=\"%zu\"} %llu\n",
                model, k, (unsigned long long)pos[k]);
}

char *sd_metrics_render(const sd_metrics *m, const sd_lanes *lanes)
{
    char *buf = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&buf, &len);
    if (!f) return NULL;
    render_router(f, m);
    if (lanes) render_lanes(f, lanes);
    render_vllm(f, m, lanes);
    if (fclose(f) != 0) {
        free(buf);
        return NULL;
    }
    return buf;
}
