/* runner.c — curl-multi load loop of specd-bench (see runner.h).
 *
 * Each request is an `xfer`: one easy handle, its body, an SSE splitter for
 * streaming responses and the record being filled. The loop runs
 * perform -> collect finished -> issue new -> poll, with the poll timeout
 * bounded by the next Poisson arrival, the duration deadline and the ~4 Hz
 * progress tick. Everything happens on the calling thread. */
#include "runner.h"

#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "clock.h"
#include "http.h"
#include "response.h"
#include "sse.h"
#include "stats.h"
#include "strbuf.h"

#define SD_MAX_INFLIGHT 4096           /* hard cap for open-loop runs */
#define SD_ERRBODY_MAX 2048            /* kept from error responses */
#define SD_BODY_MAX ((size_t)32 << 20) /* largest non-streaming body */

static volatile sig_atomic_t g_interrupt;

typedef struct runner runner;

typedef struct {
    runner *r;
    CURL *easy;
    char *req_body;
    sd_sse *sse; /* streaming only */
    sd_buf resp; /* non-streaming body or error body */
    sd_req_record rec;
    double t0;         /* absolute issue time */
    double last_chunk; /* absolute time of the last content chunk */
    bool warmup, bad, server_error, done_seen;
    long valid_chunks;
    size_t slot; /* index in runner.inflight */
    char cerr[CURL_ERROR_SIZE];
} xfer;

struct runner {
    const sd_bench_config *cfg;
    const sd_dataset *ds;
    sd_bench_result *res;
    CURLM *multi;
    struct curl_slist *hdrs;
    char url[2048];
    size_t *order; /* shuffled prompt indices */
    size_t n_order;
    sd_rng rng;
    xfer **inflight;
    size_t n_inflight;
    double phase_t0, next_arrival, next_progress;
    long issued, done, failed, tokens;
};

void sd_runner_interrupt(void) { g_interrupt = 1; }

const char *sd_reqerr_name(sd_reqerr e)
{
    static const char *const names[SD_REQERR_COUNT] = {
        "ok",         "connect_refused", "connect_failed", "dns",     "timeout",   "http_4xx", "http_5xx",
        "http_other", "bad_response",    "server_error",   "network", "cancelled", "other",
    };
    return (e >= 0 && e < SD_REQERR_COUNT) ? names[e] : "other";
}

void sd_bench_result_clear(sd_bench_result *r)
{
    if (!r) return;
    for (size_t i = 0; i < r->n; i++) free(r->recs[i].itl);
    free(r->recs);
    memset(r, 0, sizeof *r);
}

/* ---- request bodies ------------------------------------------------------ */

static char *build_body(const sd_bench_config *cfg, const sd_prompt *p)
{
    json_t *b = json_object();
    if (!b) return NULL;
    if (cfg->model) json_object_set_new(b, "model", json_string(cfg->model));
    if (cfg->endpoint == SD_EP_CHAT) json_object_set(b, "messages", p->messages);
    else if (p->ids) json_object_set(b, "prompt", p->ids);
    else json_object_set_new(b, "prompt", json_string(p->prompt));
    if (p->max_tokens > 0) json_object_set_new(b, "max_tokens", json_integer(p->max_tokens));
    else if (cfg->max_tokens > 0) json_object_set_new(b, "max_tokens", json_integer(cfg->max_tokens));
    if (cfg->has_temperature) json_object_set_new(b, "temperature", json_real(cfg->temperature));
    if (cfg->has_seed) json_object_set_new(b, "seed", json_integer((json_int_t)(cfg->seed & 0x7fffffffffffffffULL)));
    json_object_set_new(b, "stream", json_boolean(cfg->stream));
    if (cfg->stream) json_object_set_new(b, "stream_options", json_pack("{s:b}", "include_usage", 1));
    if (cfg->ignore_eos) json_object_set_new(b, "ignore_eos", json_true());
    if (cfg->extra_body) json_object_update(b, cfg->extra_body);
    char *s = json_dumps(b, JSON_COMPACT);
    json_decref(b);
    return s;
}

/* ---- response handling ---------------------------------------------------- */

static void itl_push(sd_req_record *rec, double gap)
{
    if (sd_grow(&rec->itl, &rec->cap_itl, rec->n_itl + 1, sizeof *rec->itl) != SD_OK)
        return; /* drop the sample rather than the request */
    rec->itl[rec->n_itl++] = gap;
}

/* Folds one parsed object into the record; t is its arrival time. */
static void absorb(xfer *x, const sd_resp_info *info, double t, bool timed)
{
    sd_req_record *rec = &x->rec;
    if (info->is_error && !x->server_error) {
        x->server_error = true;
        snprintf(rec->errmsg, sizeof rec->errmsg, "%s", info->errmsg);
    }
    if (timed && info->content_len > 0) {
        if (rec->content_chunks == 0) rec->ttft = t - x->t0;
        else itl_push(rec, t - x->last_chunk);
        x->last_chunk = t;
        rec->content_chunks++;
    } else if (info->content_len > 0) {
        rec->content_chunks++;
    }
    if (info->prompt_tokens >= 0) rec->input_tokens = info->prompt_tokens;
    if (info->cached_tokens >= 0) rec->cached_tokens = info->cached_tokens;
    if (info->has_usage) {
        rec->tokens_from_usage = true;
        rec->output_tokens = info->completion_tokens;
    }
    if (info->has_spec) {
        rec->has_spec = true;
        rec->spec_steps = info->spec_steps;
        rec->spec_draft = info->spec_draft;
        rec->spec_accepted = info->spec_accepted;
        rec->spec_mean = info->spec_mean;
    }
}

static int on_data(void *ud, const char *d, size_t len)
{
    xfer *x = ud;
    if (len == 6 && memcmp(d, "[DONE]", 6) == 0) {
        x->done_seen = true;
        return 0;
    }
    sd_resp_info info;
    char e[128];
    if (sd_resp_parse(d, len, x->r->cfg->endpoint == SD_EP_CHAT, &info, e, sizeof e) != SD_OK) {
        x->bad = true;
        snprintf(x->rec.errmsg, sizeof x->rec.errmsg, "bad stream chunk: %s", e);
        return 1;
    }
    x->valid_chunks++;
    absorb(x, &info, sd_now_s(), true);
    return 0;
}

/* Keeps up to limit bytes of the body (the rest is cut off silently). */
static bool keep_body(xfer *x, const char *p, size_t n, size_t limit)
{
    if (x->resp.len + n > limit) n = limit - x->resp.len;
    return sd_buf_add(&x->resp, p, n) == SD_OK;
}

static size_t on_write(char *p, size_t sz, size_t nm, void *ud)
{
    xfer *x = ud;
    size_t n = sz * nm;
    if (x->rec.http_status == 0) curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &x->rec.http_status);
    long st = x->rec.http_status;
    if (st < 200 || st >= 300) return keep_body(x, p, n, SD_ERRBODY_MAX) ? n : 0;
    if (!x->sse) {
        if (x->resp.len + n > SD_BODY_MAX) {
            x->bad = true;
            snprintf(x->rec.errmsg, sizeof x->rec.errmsg, "response body over %zu bytes", SD_BODY_MAX);
            return 0;
        }
        return keep_body(x, p, n, SD_BODY_MAX) ? n : 0;
    }
    sd_status s = sd_sse_feed(x->sse, p, n, on_data, x);
    if (s == SD_ERR_NOSPACE) {
        x->bad = true;
        snprintf(x->rec.errmsg, sizeof x->rec.errmsg, "SSE line too long");
    }
    return s == SD_OK ? n : 0;
}

/* ---- completion ------------------------------------------------------------ */

static void set_err(sd_req_record *rec, sd_reqerr e, const char *msg)
{
    rec->err = e;
    if (msg && (!rec->errmsg[0] || e != SD_REQERR_BAD_RESPONSE))
        snprintf(rec->errmsg, sizeof rec->errmsg, "%.*s", (int)sizeof rec->errmsg - 1, msg);
}

static void classify_curl(xfer *x, CURLcode rc)
{
    const char *msg = x->cerr[0] ? x->cerr : curl_easy_strerror(rc);
    long oserr = 0;
    switch (rc) {
    case CURLE_COULDNT_CONNECT:
        curl_easy_getinfo(x->easy, CURLINFO_OS_ERRNO, &oserr);
        set_err(&x->rec,
                (oserr == ECONNREFUSED || strstr(msg, "refused")) ? SD_REQERR_CONNECT_REFUSED
                                                                  : SD_REQERR_CONNECT_FAILED,
                msg);
        break;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY: set_err(&x->rec, SD_REQERR_DNS, msg); break;
    case CURLE_OPERATION_TIMEDOUT: set_err(&x->rec, SD_REQERR_TIMEOUT, msg); break;
    case CURLE_WEIRD_SERVER_REPLY: set_err(&x->rec, SD_REQERR_BAD_RESPONSE, msg); break;
    case CURLE_GOT_NOTHING:
    case CURLE_RECV_ERROR:
    case CURLE_SEND_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM: set_err(&x->rec, SD_REQERR_NETWORK, msg); break;
    default: set_err(&x->rec, SD_REQERR_OTHER, msg); break;
    }
}

static void classify_http(xfer *x)
{
    long st = x->rec.http_status;
    char msg[192];
    size_t n = x->resp.len < 120 ? x->resp.len : 120;
    snprintf(msg, sizeof msg, "HTTP %ld: %.*s", st, (int)n, x->resp.p ? x->resp.p : "");
    for (char *c = msg; *c; c++)
        if (*c == '\n' || *c == '\r') *c = ' ';
    sd_reqerr e = st >= 500 ? SD_REQERR_HTTP_5XX : st >= 400 ? SD_REQERR_HTTP_4XX : SD_REQERR_HTTP_OTHER;
    set_err(&x->rec, e, msg);
}

static void classify_body(xfer *x)
{
    bool chat = x->r->cfg->endpoint == SD_EP_CHAT;
    if (x->sse) {
        if (sd_sse_finish(x->sse, on_data, x) != SD_OK || x->bad)
            set_err(&x->rec, SD_REQERR_BAD_RESPONSE, "bad stream chunk");
        else if (x->server_error) set_err(&x->rec, SD_REQERR_SERVER_ERROR, NULL);
        else if (x->valid_chunks == 0) set_err(&x->rec, SD_REQERR_BAD_RESPONSE, "empty stream (no data: chunk)");
        return;
    }
    sd_resp_info info;
    char e[128], msg[160];
    if (sd_resp_parse(x->resp.p ? x->resp.p : "", x->resp.len, chat, &info, e, sizeof e) != SD_OK) {
        snprintf(msg, sizeof msg, "bad response body: %s", e);
        set_err(&x->rec, SD_REQERR_BAD_RESPONSE, msg);
        return;
    }
    absorb(x, &info, sd_now_s(), false);
    if (x->server_error) set_err(&x->rec, SD_REQERR_SERVER_ERROR, NULL);
}

/* Fills the record's error kind, token count and TPOT once the transfer is done. */
static void classify(xfer *x, CURLcode rc, double t_end)
{
    sd_req_record *rec = &x->rec;
    rec->e2e = t_end - x->t0;
    curl_easy_getinfo(x->easy, CURLINFO_RESPONSE_CODE, &rec->http_status);
    if (x->bad) set_err(rec, SD_REQERR_BAD_RESPONSE, "bad response");
    else if (rc != CURLE_OK) classify_curl(x, rc);
    else if (rec->http_status < 200 || rec->http_status >= 300) classify_http(x);
    else classify_body(x);
    if (!rec->tokens_from_usage) rec->output_tokens = x->sse ? rec->content_chunks : 0;
    rec->tpot = sd_stats_tpot(rec->e2e, rec->ttft, rec->output_tokens);
}

/* Moves x's record into the result (measured) or the warm-up counters,
 * detaches and frees x. */
static void retire(runner *r, xfer *x)
{
    sd_req_record *rec = &x->rec;
    bool ok = rec->err == SD_REQERR_NONE;
    if (x->warmup) {
        r->res->warmup_done++;
        r->res->warmup_failed += !ok;
        free(rec->itl);
    } else {
        r->res->recs[rec->id] = *rec;
    }
    r->done++;
    r->failed += !ok;
    if (ok) r->tokens += rec->output_tokens;
    r->inflight[x->slot] = r->inflight[--r->n_inflight];
    r->inflight[x->slot]->slot = x->slot;
    curl_multi_remove_handle(r->multi, x->easy);
    curl_easy_cleanup(x->easy);
    sd_sse_free(x->sse);
    free(x->req_body);
    sd_buf_free(&x->resp);
    free(x);
}

static void collect_done(runner *r)
{
    CURLMsg *m;
    int left;
    while ((m = curl_multi_info_read(r->multi, &left))) {
        if (m->msg != CURLMSG_DONE) continue;
        xfer *x = NULL;
        curl_easy_getinfo(m->easy_handle, CURLINFO_PRIVATE, (char **)&x);
        CURLcode rc = m->data.result;
        classify(x, rc, sd_now_s());
        retire(r, x);
    }
}

static void cancel_all(runner *r)
{
    double t = sd_now_s();
    while (r->n_inflight > 0) {
        xfer *x = r->inflight[r->n_inflight - 1];
        x->rec.e2e = t - x->t0;
        set_err(&x->rec, SD_REQERR_CANCELLED, "still in flight at duration + grace");
        retire(r, x);
    }
}

/* ---- issuing ---------------------------------------------------------------- */

static sd_status reserve_record(runner *r, long id)
{
    sd_bench_result *res = r->res;
    if (sd_grow(&res->recs, &res->cap, (size_t)id + 1, sizeof *res->recs) != SD_OK) return SD_ERR_NOMEM;
    memset(&res->recs[id], 0, sizeof res->recs[id]);
    res->n = (size_t)id + 1;
    return SD_OK;
}

static void setup_easy(runner *r, xfer *x)
{
    const sd_bench_config *cfg = r->cfg;
    long tmo = (long)(cfg->timeout * 1000.0);
    curl_easy_setopt(x->easy, CURLOPT_URL, r->url);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDS, x->req_body);
    curl_easy_setopt(x->easy, CURLOPT_POSTFIELDSIZE, (long)strlen(x->req_body));
    curl_easy_setopt(x->easy, CURLOPT_HTTPHEADER, r->hdrs);
    curl_easy_setopt(x->easy, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(x->easy, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(x->easy, CURLOPT_TIMEOUT_MS, tmo);
    curl_easy_setopt(x->easy, CURLOPT_CONNECTTIMEOUT_MS, tmo < 10000 ? tmo : 10000L);
    curl_easy_setopt(x->easy, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(x->easy, CURLOPT_WRITEDATA, x);
    curl_easy_setopt(x->easy, CURLOPT_PRIVATE, x);
    curl_easy_setopt(x->easy, CURLOPT_ERRORBUFFER, x->cerr);
}

/* Starts request `id` of the current phase. */
static sd_status issue(runner *r, bool warmup, long id)
{
    size_t pi = r->order[(size_t)id % r->n_order];
    const sd_prompt *p = sd_dataset_get(r->ds, pi);
    if (!warmup && reserve_record(r, id) != SD_OK) return SD_ERR_NOMEM;
    xfer *x = calloc(1, sizeof *x);
    if (!x) return SD_ERR_NOMEM;
    x->r = r;
    x->warmup = warmup;
    x->req_body = build_body(r->cfg, p);
    x->easy = curl_easy_init();
    /* the caller reports any failure here as out of memory */
    sd_status st = r->cfg->stream ? sd_sse_new(0, &x->sse, NULL, 0) : SD_OK;
    if (!x->req_body || !x->easy || st != SD_OK) {
        free(x->req_body);
        if (x->easy) curl_easy_cleanup(x->easy);
        sd_sse_free(x->sse);
        free(x);
        return SD_ERR_NOMEM;
    }
    sd_req_record *rec = &x->rec;
    rec->id = id;
    rec->prompt_index = pi;
    rec->prompt_len_chars = p->len_chars;
    rec->input_tokens = -1;
    rec->cached_tokens = -1;
    rec->ttft = rec->tpot = rec->e2e = rec->spec_mean = NAN;
    setup_easy(r, x);
    x->t0 = sd_now_s();
    rec->start = x->t0 - r->phase_t0;
    x->slot = r->n_inflight;
    r->inflight[r->n_inflight++] = x;
    curl_multi_add_handle(r->multi, x->easy);
    return SD_OK;
}

/* ---- main loop ------------------------------------------------------------- */

static void progress(runner *r, bool warmup, long total, bool final)
{
    const sd_bench_config *cfg = r->cfg;
    double now = sd_now_s();
    if (cfg->quiet || (!final && now < r->next_progress) || (final && !cfg->progress_tty)) return;
    r->next_progress = now + (cfg->progress_tty ? 0.25 : 5.0);
    double t = now - r->phase_t0;
    char tot[32] = "?";
    if (total > 0) snprintf(tot, sizeof tot, "%ld", total);
    char line[160];
    snprintf(line, sizeof line, "%s%ld/%s done, %ld errors, %zu in flight, %.1f tok/s, %.1f s",
             warmup ? "warm-up " : "", r->done, tot, r->failed, r->n_inflight, t > 0 ? (double)r->tokens / t : 0.0, t);
    if (cfg->progress_tty) fprintf(stderr, "\r%-79s%s", line, final ? "\n" : "");
    else fprintf(stderr, "[specd-bench] %s\n", line);
}

/* Poll timeout in ms: the progress tick, bounded by the next arrival and the
 * duration deadlines. */
static int wait_ms(runner *r, bool warmup, bool more, double t)
{
    double w = 0.25;
    const sd_bench_config *cfg = r->cfg;
    if (more && !warmup && cfg->request_rate > 0) w = fmin(w, r->next_arrival - t);
    if (!warmup && cfg->duration > 0) {
        if (t < cfg->duration) w = fmin(w, cfg->duration - t);
        else w = fmin(w, cfg->duration + cfg->grace - t);
    }
    return w > 0 ? (int)ceil(w * 1000.0) : 0;
}

static sd_status run_phase(runner *r, bool warmup)
{
    const sd_bench_config *cfg = r->cfg;
    long total = warmup ? cfg->warmup : cfg->num_prompts;
    if (warmup && total <= 0) return SD_OK; /* total 0 means "until duration" only in the measured phase */
    size_t cap = cfg->concurrency > 0                 ? (size_t)cfg->concurrency
                 : (cfg->request_rate > 0 && !warmup) ? SD_MAX_INFLIGHT
                                                      : 1;
    if (cap > SD_MAX_INFLIGHT) cap = SD_MAX_INFLIGHT;
    double rate = warmup ? 0.0 : cfg->request_rate;
    r->phase_t0 = sd_now_s();
    r->next_progress = r->phase_t0 + (cfg->progress_tty ? 0.0 : 5.0);
    r->next_arrival = 0.0;
    r->issued = r->done = r->failed = r->tokens = 0;
    for (;;) {
        int running;
        curl_multi_perform(r->multi, &running);
        collect_done(r);
        double t = sd_now_s() - r->phase_t0;
        bool stop = g_interrupt || (!warmup && cfg->duration > 0 && t >= cfg->duration);
        while (!stop && (total == 0 || r->issued < total) && r->n_inflight < cap &&
               (rate <= 0 || t >= r->next_arrival)) {
            if (issue(r, warmup, r->issued) != SD_OK) return SD_ERR_NOMEM;
            r->issued++;
            r->next_arrival += sd_rng_exp_gap(&r->rng, rate);
        }
        bool more = !stop && (total == 0 || r->issued < total);
        if (r->n_inflight == 0 && !more) break;
        if (g_interrupt || (!warmup && cfg->duration > 0 && t >= cfg->duration + cfg->grace)) {
            cancel_all(r);
            break;
        }
        curl_multi_poll(r->multi, NULL, 0, wait_ms(r, warmup, more, t), NULL);
        progress(r, warmup, total, false);
    }
    progress(r, warmup, total, true);
    if (!warmup) r->res->wall = sd_now_s() - r->phase_t0;
    return SD_OK;
}

static sd_status runner_init(runner *r, const sd_bench_config *cfg, const sd_dataset *ds, char *err, size_t errlen)
{
    const char *path = cfg->endpoint == SD_EP_CHAT ? "/v1/chat/completions" : "/v1/completions";
    if (sd_http_url(r->url, sizeof r->url, cfg->url, path) != SD_OK)
        return sd_seterr(err, errlen, SD_ERR_ARG, "URL too long");
    r->multi = curl_multi_init();
    r->n_order = sd_dataset_count(ds);
    r->order = malloc(r->n_order * sizeof *r->order);
    r->inflight = malloc(SD_MAX_INFLIGHT * sizeof *r->inflight);
    if (!r->multi || !r->order || !r->inflight)
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory setting up libcurl");
    for (size_t i = 0; i < r->n_order; i++) r->order[i] = i;
    sd_rng_seed(&r->rng, cfg->seed);
    if (!cfg->in_order) sd_rng_shuffle(&r->rng, r->order, r->n_order);
    char auth[1100];
    r->hdrs = curl_slist_append(r->hdrs, "Content-Type: application/json");
    r->hdrs = curl_slist_append(r->hdrs, "Expect:");
    if (cfg->stream) r->hdrs = curl_slist_append(r->hdrs, "Accept: text/event-stream");
    if (cfg->api_key && *cfg->api_key) {
        snprintf(auth, sizeof auth, "Authorization: Bearer %.1024s", cfg->api_key);
        r->hdrs = curl_slist_append(r->hdrs, auth);
    }
    return r->hdrs ? SD_OK : sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
}

sd_status sd_runner_run(const sd_bench_config *cfg, const sd_dataset *ds, sd_bench_result *out, char *err,
                        size_t errlen)
{
    if (cfg->num_prompts <= 0 && cfg->duration <= 0)
        return sd_seterr(err, errlen, SD_ERR_ARG, "no bound: give --num-prompts or --duration");
    if (sd_dataset_count(ds) == 0) return sd_seterr(err, errlen, SD_ERR_ARG, "empty dataset");
    runner r = {.cfg = cfg, .ds = ds, .res = out};
    sd_status st = runner_init(&r, cfg, ds, err, errlen);
    if (st == SD_OK) st = run_phase(&r, true);
    if (st == SD_OK && !g_interrupt) st = run_phase(&r, false);
    if (st != SD_OK && err && !err[0]) sd_seterr(err, errlen, st, "out of memory during the run");
    if (r.inflight) cancel_all(&r);
    out->interrupted = g_interrupt != 0;
    curl_slist_free_all(r.hdrs);
    if (r.multi) curl_multi_cleanup(r.multi);
    free(r.order);
    free(r.inflight);
    return st;
}
