/* report.c — summary, table, JSON and metrics filter (see report.h). */
#include "report.h"

#include <jansson.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static sd_status summarize_latency(const sd_bench_result *res, sd_report_summary *out)
{
    size_t n = res->n, n_itl = 0;
    for (size_t i = 0; i < n; i++)
        if (res->recs[i].err == SD_REQERR_NONE) n_itl += res->recs[i].n_itl;
    double *a = malloc((n ? n : 1) * 3 * sizeof *a);
    double *itl = malloc((n_itl ? n_itl : 1) * sizeof *itl);
    if (!a || !itl) {
        free(a);
        free(itl);
        return SD_ERR_NOMEM;
    }
    size_t m = 0, k = 0;
    for (size_t i = 0; i < n; i++) {
        const sd_req_record *r = &res->recs[i];
        if (r->err != SD_REQERR_NONE) continue;
        a[m] = r->ttft;
        a[n + m] = r->tpot;
        a[2 * n + m] = r->e2e;
        m++;
        if (r->n_itl > 0) memcpy(itl + k, r->itl, r->n_itl * sizeof *itl);
        k += r->n_itl;
    }
    sd_status st = sd_stats_summarize(a, m, &out->ttft);
    if (st == SD_OK) st = sd_stats_summarize(a + n, m, &out->tpot);
    if (st == SD_OK) st = sd_stats_summarize(a + 2 * n, m, &out->e2e);
    if (st == SD_OK) st = sd_stats_summarize(itl, k, &out->itl);
    free(a);
    free(itl);
    return st;
}

static void summarize_spec(const sd_bench_result *res, sd_report_summary *out)
{
    double means = 0.0;
    long n_means = 0;
    for (size_t i = 0; i < res->n; i++) {
        const sd_req_record *r = &res->recs[i];
        if (r->err != SD_REQERR_NONE || !r->has_spec) continue;
        out->spec_requests++;
        out->spec_steps += r->spec_steps;
        out->spec_draft += r->spec_draft;
        out->spec_accepted += r->spec_accepted;
        if (isfinite(r->spec_mean)) {
            means += r->spec_mean;
            n_means++;
        }
    }
    out->spec_per_step = out->spec_steps > 0 ? (double)out->spec_accepted / out->spec_steps : NAN;
    out->spec_accept_rate = out->spec_draft > 0 ? (double)out->spec_accepted / out->spec_draft : NAN;
    out->spec_mean_of_means = n_means > 0 ? means / n_means : NAN;
}

/* Whether successful request r meets every objective in slo_ms. */
static bool good_request(const sd_req_record *r, const double *slo_ms)
{
    if (slo_ms[0] > 0 && !(isfinite(r->ttft) && r->ttft * 1e3 <= slo_ms[0])) return false;
    if (slo_ms[1] > 0 && isfinite(r->tpot) && r->tpot * 1e3 > slo_ms[1]) return false;
    if (slo_ms[2] > 0 && !(isfinite(r->e2e) && r->e2e * 1e3 <= slo_ms[2])) return false;
    return true;
}

sd_status sd_report_summarize(const sd_bench_result *res, const double *slo_ms, sd_report_summary *out)
{
    memset(out, 0, sizeof *out);
    bool slo = slo_ms && (slo_ms[0] > 0 || slo_ms[1] > 0 || slo_ms[2] > 0);
    for (size_t i = 0; i < res->n; i++) {
        const sd_req_record *r = &res->recs[i];
        out->by_kind[r->err]++;
        if (r->err == SD_REQERR_NONE) {
            out->completed++;
            out->total_output_tokens += r->output_tokens;
            if (r->input_tokens >= 0) {
                out->total_input_tokens += r->input_tokens;
                out->input_reported++;
                if (r->cached_tokens > 0) out->total_cached_tokens += r->cached_tokens;
            }
            out->usage_requests += r->tokens_from_usage;
            out->good += slo && good_request(r, slo_ms);
        } else if (r->err == SD_REQERR_CANCELLED) {
            out->cancelled++;
        } else {
            out->failed++;
        }
    }
    out->wall = res->wall;
    out->req_per_s = res->wall > 0 ? out->completed / res->wall : NAN;
    out->out_tok_per_s = res->wall > 0 ? out->total_output_tokens / res->wall : NAN;
    out->total_tok_per_s = res->wall > 0 ? (out->total_input_tokens + out->total_output_tokens) / res->wall : NAN;
    out->goodput = slo && res->wall > 0 ? out->good / res->wall : NAN;
    summarize_spec(res, out);
    return summarize_latency(res, out);
}

char *sd_report_spec_metrics(const char *text)
{
    static const char prefix[] = "specd_spec_";
    if (!text) return NULL;
    size_t len = strlen(text), w = 0;
    char *out = malloc(len + 1);
    if (!out) return NULL;
    for (const char *p = text; *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        if (n >= sizeof prefix - 1 && memcmp(p, prefix, sizeof prefix - 1) == 0) {
            if (w > 0) out[w++] = '\n';
            memcpy(out + w, p, n);
            w += n;
            if (out[w - 1] == '\r') w--;
        }
        p += n + (nl != NULL);
    }
    out[w] = '\0';
    if (w == 0) {
        free(out);
        return NULL;
    }
    return out;
}

/* ---- table ------------------------------------------------------------------ */

static void rule(FILE *f, const char *title)
{
    int pad = 76 - (int)strlen(title) - 2;
    fprintf(f, "%.*s %s %.*s\n", pad / 2, "----------------------------------------", title, pad - pad / 2,
            "----------------------------------------");
}

static void num_or_na(FILE *f, const char *label, double v, const char *fmt)
{
    fprintf(f, "%-40s", label);
    if (isfinite(v)) fprintf(f, fmt, v);
    else fprintf(f, "n/a");
    fputc('\n', f);
}

static void latency_row(FILE *f, const char *name, const sd_stats_summary *s)
{
    if (s->n == 0) {
        fprintf(f, "%-6s %8s %10s %10s %10s %10s\n", name, "0", "n/a", "n/a", "n/a", "n/a");
        return;
    }
    fprintf(f, "%-6s %8zu %10.2f %10.2f %10.2f %10.2f\n", name, s->n, s->mean * 1e3, s->p50 * 1e3, s->p90 * 1e3,
            s->p99 * 1e3);
}

static void print_header(FILE *f, const sd_bench_config *cfg, const sd_bench_result *res)
{
    char mode[128];
    int w = snprintf(mode, sizeof mode, "%s, ", cfg->stream ? "stream" : "no-stream");
    if (cfg->request_rate > 0 && cfg->concurrency > 0)
        snprintf(mode + w, sizeof mode - w, "Poisson %.2f req/s, at most %d in flight", cfg->request_rate,
                 cfg->concurrency);
    else if (cfg->request_rate > 0) snprintf(mode + w, sizeof mode - w, "Poisson %.2f req/s", cfg->request_rate);
    else snprintf(mode + w, sizeof mode - w, "concurrency %d", cfg->concurrency);
    fprintf(f, "%-40s%s (%s)\n", "Server:", cfg->url,
            cfg->endpoint == SD_EP_CHAT ? "/v1/chat/completions" : "/v1/completions");
    fprintf(f, "%-40s%s\n", "Model:", cfg->model ? cfg->model : "(none sent)");
    fprintf(f, "%-40s%s\n", "Mode:", mode);
    if (res->interrupted) fprintf(f, "%-40s%s\n", "Note:", "interrupted (SIGINT); partial results");
}

/* Prints the table; long by nature (one line per figure), kept whole so the
 * layout reads top to bottom. */
void sd_report_print(FILE *f, const sd_bench_config *cfg, const sd_bench_result *res, const sd_report_summary *s,
                     const char *spec_metrics)
{
    rule(f, "specd-bench result");
    print_header(f, cfg, res);
    fprintf(f, "%-40s%ld\n", "Successful requests:", s->completed);
    fprintf(f, "%-40s%ld\n", "Failed requests:", s->failed);
    fprintf(f, "%-40s%ld\n", "Cancelled requests:", s->cancelled);
    fprintf(f, "%-40s%ld (%ld failed)\n", "Warm-up requests (not counted):", res->warmup_done, res->warmup_failed);
    fprintf(f, "%-40s%.3f\n", "Wall time (s):", s->wall);
    num_or_na(f, "Request throughput (req/s):", s->req_per_s, "%.2f");
    num_or_na(f, "Output token throughput (tok/s):", s->out_tok_per_s, "%.2f");
    fprintf(f, "%-40s%ld\n", "Total output tokens:", s->total_output_tokens);
    fprintf(f, "%-40s%ld (usage of %ld requests)\n", "Total input tokens:", s->total_input_tokens, s->input_reported);
    if (s->total_cached_tokens > 0)
        fprintf(f, "%-40s%ld (%.1f%%)\n", "Cached input tokens (prefix cache):", s->total_cached_tokens,
                100.0 * (double)s->total_cached_tokens / (double)s->total_input_tokens);
    num_or_na(f, "Total token throughput (tok/s):", s->total_tok_per_s, "%.2f");
    if (isfinite(s->goodput)) {
        fprintf(f, "%-40s%ld of %ld\n", "Requests within the --goodput SLOs:", s->good, s->completed);
        num_or_na(f, "Request goodput (req/s):", s->goodput, "%.2f");
    }
    fprintf(f, "%-40s%ld of %ld requests from usage\n", "Token counts:", s->usage_requests, s->completed);
    rule(f, "Latency (ms), successful requests");
    fprintf(f, "%-6s %8s %10s %10s %10s %10s\n", "metric", "n", "mean", "p50", "p90", "p99");
    latency_row(f, "TTFT", &s->ttft);
    latency_row(f, "TPOT", &s->tpot);
    latency_row(f, "ITL", &s->itl);
    latency_row(f, "E2E", &s->e2e);
    rule(f, "Errors by kind");
    bool any = false;
    for (int k = 1; k < SD_REQERR_COUNT; k++) {
        if (s->by_kind[k] == 0) continue;
        fprintf(f, "%-40s%ld\n", sd_reqerr_name((sd_reqerr)k), s->by_kind[k]);
        any = true;
    }
    for (size_t i = 0; i < res->n && any; i++) {
        if (res->recs[i].err != SD_REQERR_NONE) {
            fprintf(f, "%-40s%s\n", "First error:", res->recs[i].errmsg);
            break;
        }
    }
    if (!any) fprintf(f, "none\n");
    rule(f, "Speculation");
    fprintf(f, "%-40s%ld\n", "Requests with stats:", s->spec_requests);
    num_or_na(f, "Accepted tokens per step:", s->spec_per_step, "%.3f");
    num_or_na(f, "Mean of per-request accepted/step:", s->spec_mean_of_means, "%.3f");
    num_or_na(f, "Draft acceptance rate:", s->spec_accept_rate, "%.3f");
    if (spec_metrics) fprintf(f, "Server metrics (specd_spec_*):\n");
    else fprintf(f, "%-40s%s\n", "Server metrics (specd_spec_*):", "n/a");
    for (const char *p = spec_metrics; p && *p;) {
        const char *nl = strchr(p, '\n');
        int n = nl ? (int)(nl - p) : (int)strlen(p);
        fprintf(f, "  %.*s\n", n, p);
        p += n + (nl != NULL);
    }
    rule(f, "end");
}

/* ---- JSON ------------------------------------------------------------------- */

static json_t *jnum(double v) { return isfinite(v) ? json_real(v) : json_null(); }

static json_t *json_config(const sd_bench_config *c)
{
    json_t *o =
        json_pack("{s:s, s:s, s:s?, s:b, s:i, s:f, s:I, s:I, s:b, s:I, s:f, s:f, s:f}", "url", c->url, "endpoint",
                  c->endpoint == SD_EP_CHAT ? "chat" : "completions", "model", c->model, "stream", c->stream,
                  "concurrency", c->concurrency, "request_rate", c->request_rate, "num_prompts",
                  (json_int_t)c->num_prompts, "max_tokens", (json_int_t)c->max_tokens, "ignore_eos", c->ignore_eos,
                  "warmup", (json_int_t)c->warmup, "duration", c->duration, "timeout", c->timeout, "grace", c->grace);
    if (!o) return NULL;
    json_object_set_new(o, "temperature", c->has_temperature ? json_real(c->temperature) : json_null());
    json_object_set_new(o, "seed", c->has_seed ? json_integer((json_int_t)c->seed) : json_null());
    json_object_set_new(o, "extra_body", c->extra_body ? json_deep_copy(c->extra_body) : json_null());
    json_t *g = json_object();
    static const char *const names[] = {"ttft", "tpot", "e2el"};
    for (int i = 0; i < 3; i++)
        if (c->slo_ms[i] > 0) json_object_set_new(g, names[i], json_real(c->slo_ms[i]));
    json_object_set_new(o, "goodput", json_object_size(g) ? g : (json_decref(g), json_null()));
    return o;
}

static json_t *json_record(const sd_req_record *r)
{
    json_t *itl = json_array();
    for (size_t i = 0; i < r->n_itl; i++) json_array_append_new(itl, json_real(r->itl[i]));
    json_t *o = json_pack(
        "{s:I, s:I, s:I, s:f, s:I, s:b, s:o, s:o, s:o, s:o, s:I}", "id", (json_int_t)r->id, "prompt_index",
        (json_int_t)r->prompt_index, "prompt_len_chars", (json_int_t)r->prompt_len_chars, "start", r->start,
        "output_tokens", (json_int_t)r->output_tokens, "tokens_from_usage", r->tokens_from_usage, "ttft", jnum(r->ttft),
        "tpot", jnum(r->tpot), "e2e", jnum(r->e2e), "itl", itl, "http_status", (json_int_t)r->http_status);
    if (!o) return NULL;
    bool ok = r->err == SD_REQERR_NONE;
    json_object_set_new(o, "input_tokens", r->input_tokens >= 0 ? json_integer(r->input_tokens) : json_null());
    json_object_set_new(o, "cached_tokens", r->cached_tokens >= 0 ? json_integer(r->cached_tokens) : json_null());
    json_object_set_new(o, "error", ok ? json_null() : json_string(sd_reqerr_name(r->err)));
    json_object_set_new(o, "error_message", ok ? json_null() : json_string(r->errmsg));
    json_object_set_new(o, "speculative",
                        r->has_spec
                            ? json_pack("{s:I, s:I, s:I, s:o}", "steps", (json_int_t)r->spec_steps, "draft_tokens",
                                        (json_int_t)r->spec_draft, "accepted_tokens", (json_int_t)r->spec_accepted,
                                        "mean_accepted_per_step", jnum(r->spec_mean))
                            : json_null());
    return o;
}

static json_t *json_lat(const sd_stats_summary *s)
{
    return json_pack("{s:I, s:o, s:o, s:o, s:o, s:o, s:o, s:o}", "n", (json_int_t)s->n, "mean", jnum(s->mean * 1e3),
                     "std", jnum(s->std * 1e3), "p50", jnum(s->p50 * 1e3), "p90", jnum(s->p90 * 1e3), "p99",
                     jnum(s->p99 * 1e3), "min", jnum(s->min * 1e3), "max", jnum(s->max * 1e3));
}

static json_t *json_summary(const sd_bench_result *res, const sd_report_summary *s, const char *spec_metrics)
{
    json_t *kinds = json_object();
    for (int k = 1; k < SD_REQERR_COUNT; k++)
        if (s->by_kind[k]) json_object_set_new(kinds, sd_reqerr_name((sd_reqerr)k), json_integer(s->by_kind[k]));
    json_t *lines = json_array();
    for (const char *p = spec_metrics; p && *p;) {
        const char *nl = strchr(p, '\n');
        size_t n = nl ? (size_t)(nl - p) : strlen(p);
        json_array_append_new(lines, json_stringn(p, n));
        p += n + (nl != NULL);
    }
    json_t *spec =
        json_pack("{s:I, s:I, s:I, s:I, s:o, s:o, s:o}", "requests", (json_int_t)s->spec_requests, "steps",
                  (json_int_t)s->spec_steps, "draft_tokens", (json_int_t)s->spec_draft, "accepted_tokens",
                  (json_int_t)s->spec_accepted, "accepted_per_step", jnum(s->spec_per_step), "acceptance_rate",
                  jnum(s->spec_accept_rate), "mean_of_request_means", jnum(s->spec_mean_of_means));
    return json_pack("{s:I, s:I, s:I, s:o, s:I, s:I, s:b, s:f, s:o, s:o, s:I, s:o, s:o, s:o, "
                     "s:o, s:o, s:o}",
                     "completed", (json_int_t)s->completed, "failed", (json_int_t)s->failed, "cancelled",
                     (json_int_t)s->cancelled, "errors", kinds, "warmup_requests", (json_int_t)res->warmup_done,
                     "warmup_failed", (json_int_t)res->warmup_failed, "interrupted", res->interrupted, "wall_s",
                     s->wall, "request_throughput", jnum(s->req_per_s), "output_throughput", jnum(s->out_tok_per_s),
                     "total_output_tokens", (json_int_t)s->total_output_tokens, "ttft_ms", json_lat(&s->ttft),
                     "tpot_ms", json_lat(&s->tpot), "itl_ms", json_lat(&s->itl), "e2e_ms", json_lat(&s->e2e),
                     "speculative", s->spec_requests ? spec : (json_decref(spec), json_null()), "server_spec_metrics",
                     lines);
}

/* The flat keys of a `vllm bench serve` result file, beside specd's own
 * (same units: ms, tokens, requests/s), so tools reading those files read
 * these. */
static void vllm_keys(json_t *root, const sd_bench_config *cfg, const sd_report_summary *s)
{
    json_object_set_new(root, "backend", json_string(cfg->endpoint == SD_EP_CHAT ? "openai-chat" : "vllm"));
    json_object_set_new(root, "model_id", cfg->model ? json_string(cfg->model) : json_null());
    json_object_set_new(root, "num_prompts", json_integer(cfg->num_prompts));
    json_object_set_new(root, "request_rate",
                        cfg->request_rate > 0 ? json_real(cfg->request_rate) : json_string("inf"));
    json_object_set_new(root, "max_concurrency", json_integer(cfg->concurrency));
    json_object_set_new(root, "duration", jnum(s->wall));
    json_object_set_new(root, "completed", json_integer(s->completed));
    json_object_set_new(root, "total_input_tokens", json_integer(s->total_input_tokens));
    json_object_set_new(root, "total_output_tokens", json_integer(s->total_output_tokens));
    json_object_set_new(root, "request_throughput", jnum(s->req_per_s));
    json_object_set_new(root, "request_goodput", jnum(s->goodput));
    json_object_set_new(root, "output_throughput", jnum(s->out_tok_per_s));
    json_object_set_new(root, "total_token_throughput", jnum(s->total_tok_per_s));
    const struct {
        const char *name;
        const sd_stats_summary *st;
    } lat[] = {{"ttft", &s->ttft}, {"tpot", &s->tpot}, {"itl", &s->itl}, {"e2el", &s->e2e}};
    for (size_t i = 0; i < sizeof lat / sizeof lat[0]; i++) {
        const struct {
            const char *what;
            double v;
        } v[] = {{"mean", lat[i].st->mean},
                 {"median", lat[i].st->p50},
                 {"std", lat[i].st->std},
                 {"p90", lat[i].st->p90},
                 {"p99", lat[i].st->p99}};
        for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
            char key[32];
            snprintf(key, sizeof key, "%s_%s_ms", v[k].what, lat[i].name);
            json_object_set_new(root, key, jnum(v[k].v * 1e3));
        }
    }
}

sd_status sd_report_write_json(const char *path, const sd_bench_config *cfg, const sd_bench_result *res,
                               const sd_report_summary *s, const char *spec_metrics, char *err, size_t errlen)
{
    json_t *reqs = json_array();
    for (size_t i = 0; reqs && i < res->n; i++) {
        if (json_array_append_new(reqs, json_record(&res->recs[i])) != 0) {
            json_decref(reqs);
            reqs = NULL;
        }
    }
    json_t *root = json_pack("{s:o?, s:o?, s:o?}", "config", json_config(cfg), "requests", reqs, "summary",
                             json_summary(res, s, spec_metrics));
    json_t *summary = root ? json_object_get(root, "summary") : NULL;
    if (summary) {
        json_object_set_new(summary, "total_input_tokens", json_integer(s->total_input_tokens));
        json_object_set_new(summary, "total_cached_tokens", json_integer(s->total_cached_tokens));
        json_object_set_new(summary, "total_token_throughput", jnum(s->total_tok_per_s));
        json_object_set_new(summary, "good_requests", json_integer(s->good));
        json_object_set_new(summary, "request_goodput", jnum(s->goodput));
    }
    if (root) vllm_keys(root, cfg, s);
    if (!root || !json_object_get(root, "config") || !json_object_get(root, "requests") ||
        !json_object_get(root, "summary")) {
        json_decref(root);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "could not build the JSON report");
    }
    int rc = json_dump_file(root, path, JSON_INDENT(1) | JSON_REAL_PRECISION(9));
    json_decref(root);
    if (rc != 0) return sd_seterr(err, errlen, SD_ERR_IO, "could not write %s", path);
    return SD_OK;
}
