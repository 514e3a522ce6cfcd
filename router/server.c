/* server.c — the router's HTTP front: start-up (tokenizer, chat family,
 * lanes, listening socket), routing, API-key check, the small endpoints
 * (/health, /v1/models, /metrics). Generation requests are handed to the
 * sd_gen (gen.c), which owns the lanes. One event base; signals end the loop. */
#include <event2/buffer.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <jansson.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <zmq.h>

#include "chat_template.h"
#include "clock.h"
#include "curve.h"
#include "gen.h"
#include "http_api.h"
#include "log.h"
#include "conncap.h"
#include "metrics.h"
#include "playground.h"
#include "prompt.h"
#include "reply.h"
#include "server.h"
#include "strbuf.h"
#include "tokenizer.h"

struct sd_server {
    sd_server_opts o;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    sd_conncap *conncap; /* --max-connections */
    struct event *sigint, *sigterm, *drain_tick;
    bool draining;
    double drain_deadline;
    void *zctx;
    sd_curve *curve;
    sd_gen *gen; /* lanes and completion requests */
    sd_tok *tok;
    int vocab;
    sd_chat chat;
    sd_metrics metrics;
    time_t started;
    int port;
    time_t fail_second; /* failed key checks in this second */
    int fails;
};

/* Constant-time comparison of the bearer token with the configured key. */
static bool key_matches(const sd_server *s, struct evhttp_request *req)
{
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    if (!h || strncasecmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t a = strlen(h), b = strlen(s->o.api_key);
    unsigned char diff = a != b;
    for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned char)(h[i] ^ s->o.api_key[i]);
    return diff == 0;
}

/* The key check for a path that needs it. A wrong or missing key is logged
 * (at most a few lines a second) and answered 401 — or 429 once more than
 * FAILED_AUTH_PER_S failures came in the current second, so guessing the
 * key runs at that pace at most. True when the request may go on. */
#define FAILED_AUTH_PER_S 20
static bool authorized(sd_server *s, struct evhttp_request *req, const char *path)
{
    if (!s->o.api_key || key_matches(s, req)) return true;
    time_t now = time(NULL);
    if (now != s->fail_second) {
        s->fail_second = now;
        s->fails = 0;
    }
    s->fails++;
    s->metrics.auth_failures++;
    char *peer = NULL;
    ev_uint16_t port = 0;
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (c) evhttp_connection_get_peer(c, &peer, &port);
    SD_WARN_LIMITED("unauthorized request for %s from %s:%u (a missing or wrong API key)", path, peer ? peer : "?",
                    (unsigned)port);
    sd_api_err e;
    if (s->fails > FAILED_AUTH_PER_S) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        sd_api_fail(&e, 429, "rate_limit_error", NULL, "too_many_auth_failures",
                    "Too many requests with a wrong API key; retry later");
    } else {
        sd_api_fail(&e, 401, "invalid_request_error", NULL, "invalid_api_key",
                    "Missing or incorrect API key: send 'Authorization: Bearer <key>'");
    }
    sd_reply_error(req, &e, &s->metrics);
    return false;
}

static void handle_health(sd_server *s, struct evhttp_request *req)
{
    const sd_lanes *tbl = sd_gen_lanes(s->gen);
    uint32_t ctx = 0;
    bool up = sd_lanes_any_up(tbl, &ctx);
    json_t *lanes = json_array();
    static const char *const names[] = {"starting", "up", "down"};
    for (size_t i = 0; i < sd_lanes_count(tbl); i++) {
        const sd_lane_info *in = sd_lanes_info(tbl, (int)i);
        /* no endpoints: /health is open, and a lane's address is the operator's business */
        json_array_append_new(lanes, json_pack("{s:i, s:s, s:i, s:b}", "lane", (int)i, "state", names[in->state],
                                               "inflight", in->inflight, "drafter_up", in->drafter_up));
    }
    json_t *o = json_pack("{s:s, s:o}", "status", up ? "ok" : "unavailable", "lanes", lanes);
    char *body = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    if (!up) evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
    sd_reply_json(req, up ? 200 : 503, body, &s->metrics);
    free(body);
}

/* Replies 200 with o (consumed). */
static void reply_object(sd_server *s, struct evhttp_request *req, json_t *o)
{
    char *body = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (body) {
        sd_reply_json(req, 200, body, &s->metrics);
    } else {
        sd_api_err e;
        sd_api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        sd_reply_error(req, &e, &s->metrics);
    }
    free(body);
}

/* The served model under name, as /v1/models lists it (aliases name the model id as root). */
static json_t *model_json(sd_server *s, const char *name)
{
    uint32_t ctx = 0;
    sd_lanes_any_up(sd_gen_lanes(s->gen), &ctx);
    json_t *m = json_pack("{s:s, s:s, s:I, s:s, s:s}", "id", name, "object", "model", "created", (json_int_t)s->started,
                          "owned_by", "specd", "root", s->o.model_name);
    if (m && ctx) json_object_set_new(m, "max_model_len", json_integer(ctx));
    return m;
}

static void handle_models(sd_server *s, struct evhttp_request *req)
{
    json_t *data = json_array();
    json_array_append_new(data, model_json(s, s->o.model_name));
    for (size_t i = 0; i < s->o.n_aliases; i++) json_array_append_new(data, model_json(s, s->o.aliases[i]));
    reply_object(s, req, json_pack("{s:s, s:o}", "object", "list", "data", data));
}

/* False (with a 404 model_not_found sent) when name is set and is not the served model. */
static bool model_ok(sd_server *s, struct evhttp_request *req, const char *name)
{
    if (!name || sd_gen_served_name(s->gen, name)) return true;
    sd_api_err e;
    sd_api_fail(&e, 404, "invalid_request_error", "model", "model_not_found",
                "The model '%s' does not exist; this server serves '%s'", name, s->o.model_name);
    sd_reply_error(req, &e, &s->metrics);
    return false;
}

/* GET /v1/models/{id} (id URL-encoded). */
static void handle_model(sd_server *s, struct evhttp_request *req, const char *enc)
{
    char *id = evhttp_uridecode(enc, 0, NULL);
    const char *name = id ? id : enc;
    if (model_ok(s, req, name)) reply_object(s, req, model_json(s, sd_gen_served_name(s->gen, name)));
    free(id);
}

/* The request body as a string, or NULL with a 413 sent when it is over --max-body. */
static const char *small_body(sd_server *s, struct evhttp_request *req, size_t *len)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    *len = evbuffer_get_length(in);
    if (*len > s->o.max_body) {
        sd_api_err e;
        sd_api_fail(&e, 413, "invalid_request_error", NULL, "request_too_large",
                    "The request body of %zu bytes exceeds the limit of %zu bytes", *len, s->o.max_body);
        sd_reply_error(req, &e, &s->metrics);
        return NULL;
    }
    return *len ? (const char *)evbuffer_pullup(in, -1) : "";
}

/* POST /tokenize (as vLLM): {"prompt": ...} or {"messages": [...]} → the
 * token ids a completion of it would be given. */
static void handle_tokenize(sd_server *s, struct evhttp_request *req)
{
    size_t len;
    const char *body = small_body(s, req, &len);
    if (!body) return;
    json_t *probe = json_loadb(body, len, 0, NULL);
    sd_api_kind kind = json_is_object(probe) && json_object_get(probe, "messages") ? SD_API_CHAT : SD_API_COMPLETION;
    json_decref(probe);
    sd_api_req r;
    sd_api_err e;
    int32_t *ids = NULL;
    size_t n = 0;
    if (sd_api_parse(kind, body, len, &r, &e) != SD_OK) {
        sd_reply_error(req, &e, &s->metrics);
        return;
    }
    if (model_ok(s, req, r.model)) {
        if (sd_prompt_tokens(s->tok, &s->chat, s->vocab, &r, &ids, &n, &e) != SD_OK) {
            sd_reply_error(req, &e, &s->metrics);
        } else {
            uint32_t ctx = 0;
            sd_lanes_any_up(sd_gen_lanes(s->gen), &ctx);
            json_t *t = json_array();
            for (size_t i = 0; i < n && t; i++) json_array_append_new(t, json_integer(ids[i]));
            reply_object(
                s, req,
                json_pack("{s:I, s:I, s:o}", "count", (json_int_t)n, "max_model_len", (json_int_t)ctx, "tokens", t));
        }
    }
    free(ids);
    sd_api_req_clear(&r);
}

/* POST /detokenize (as vLLM): {"tokens": [ids]} → {"prompt": text}. */
static void handle_detokenize(sd_server *s, struct evhttp_request *req)
{
    size_t len;
    const char *body = small_body(s, req, &len);
    if (!body) return;
    sd_api_err e;
    json_error_t jerr;
    json_t *o = json_loadb(body, len, 0, &jerr);
    json_t *t = json_is_object(o) ? json_object_get(o, "tokens") : NULL,
           *model = json_is_object(o) ? json_object_get(o, "model") : NULL;
    int32_t *ids = NULL;
    size_t n = json_is_array(t) ? json_array_size(t) : 0;
    if (!json_is_object(o)) {
        sd_api_fail(&e, 400, "invalid_request_error", NULL, NULL, "the body is not a JSON object%s%s", o ? "" : ": ",
                    o ? "" : jerr.text);
    } else if (model && !json_is_string(model)) {
        sd_api_fail(&e, 400, "invalid_request_error", "model", NULL, "'model' must be a string");
    } else if (!json_is_array(t)) {
        sd_api_fail(&e, 400, "invalid_request_error", "tokens", NULL, "'tokens' must be an array of token ids");
    } else if (!(ids = malloc((n ? n : 1) * sizeof *ids))) {
        sd_api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
    } else {
        e.status = 0;
        for (size_t i = 0; i < n && !e.status; i++) {
            json_t *v = json_array_get(t, i);
            if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) >= s->vocab)
                sd_api_fail(&e, 400, "invalid_request_error", "tokens", NULL,
                            "'tokens' entry %zu is not a token id in [0, %d)", i, s->vocab);
            else ids[i] = (int32_t)json_integer_value(v);
        }
    }
    if (e.status) {
        sd_reply_error(req, &e, &s->metrics);
    } else if (model_ok(s, req, model ? json_string_value(model) : NULL)) {
        char *text = NULL, err[256];
        size_t tl = 0;
        if (sd_tok_decode(s->tok, ids, n, false, &text, &tl, err, sizeof err) != SD_OK) {
            sd_api_fail(&e, 400, "invalid_request_error", "tokens", NULL, "%s", err);
            sd_reply_error(req, &e, &s->metrics);
        } else {
            reply_object(s, req, json_pack("{s:s%}", "prompt", text, tl));
        }
        free(text);
    }
    free(ids);
    json_decref(o);
}

static void handle_version(sd_server *s, struct evhttp_request *req)
{
    reply_object(s, req, json_pack("{s:s}", "version", SD_VERSION));
}

static void handle_metrics(sd_server *s, struct evhttp_request *req)
{
    s->metrics.connections = sd_conncap_open(s->conncap);
    s->metrics.connection_cap_reached = sd_conncap_reached(s->conncap);
    for (int r = 0; r < SD_CONNCAP_REASONS; r++) s->metrics.connections_closed[r] = sd_conncap_closed(s->conncap, r);
    char *text = sd_metrics_render(&s->metrics, sd_gen_lanes(s->gen));
    struct evbuffer *b = evbuffer_new();
    if (b && text) evbuffer_add(b, text, strlen(text));
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", b);
    if (b) evbuffer_free(b);
    free(text);
    sd_metrics_count_status(&s->metrics, 200);
}

/* Every request lands here: route on path + method. */
static void on_request(struct evhttp_request *req, void *arg)
{
    sd_server *s = arg;
    const char *uri = evhttp_request_get_uri(req);
    char path[256];
    size_t n = strcspn(uri, "?#");
    snprintf(path, sizeof path, "%.*s", (int)(n < sizeof path - 1 ? n : sizeof path - 1), uri);
    enum evhttp_cmd_type m = evhttp_request_get_command(req);
    bool post = m == EVHTTP_REQ_POST, get = m == EVHTTP_REQ_GET;
    sd_api_err e;
    sd_conncap_begin(s->conncap, req); /* in flight until answered: never closed as idle */
    bool tok = !strcmp(path, "/tokenize") || !strcmp(path, "/detokenize");
    bool model = !strncmp(path, "/v1/models/", 11) && path[11] && !strchr(path + 11, '/');
    bool keyed = !strncmp(path, "/v1/", 4) || tok || (s->o.metrics_auth && !strcmp(path, "/metrics"));
    if (keyed && !authorized(s, req, path)) return;
    if (!strcmp(path, "/v1/completions") && post) sd_gen_handle(s->gen, req, SD_API_COMPLETION);
    else if (!strcmp(path, "/v1/chat/completions") && post) sd_gen_handle(s->gen, req, SD_API_CHAT);
    else if (!strcmp(path, "/v1/responses") && post) sd_gen_handle(s->gen, req, SD_API_RESPONSES);
    else if (!strcmp(path, "/v1/models") && get) handle_models(s, req);
    else if (model && get) handle_model(s, req, path + 11);
    else if (!strcmp(path, "/tokenize") && post) handle_tokenize(s, req);
    else if (!strcmp(path, "/detokenize") && post) handle_detokenize(s, req);
    else if (!strcmp(path, "/version") && get) handle_version(s, req);
    else if (!strcmp(path, "/health") && get) handle_health(s, req);
    else if (!strcmp(path, "/metrics") && get) handle_metrics(s, req);
    else if (sd_playground_path(path) && (get || m == EVHTTP_REQ_HEAD) && !s->o.no_playground)
        sd_playground_serve(req, path, &s->metrics);
    else if (!strcmp(path, "/v1/completions") || !strcmp(path, "/v1/chat/completions") ||
             !strcmp(path, "/v1/responses") || tok || model || !strcmp(path, "/v1/models") ||
             !strcmp(path, "/version") || !strcmp(path, "/health") || !strcmp(path, "/metrics") ||
             (sd_playground_path(path) && !s->o.no_playground)) {
        sd_api_fail(&e, 405, "invalid_request_error", NULL, "method_not_allowed", "Method not allowed on %s", path);
        sd_reply_error(req, &e, &s->metrics);
    } else {
        sd_api_fail(&e, 404, "invalid_request_error", NULL, "not_found", "No route for %s", path);
        sd_reply_error(req, &e, &s->metrics);
    }
}

/* Ends every request still in flight with an error and leaves the loop once
 * the replies had a moment to go out. */
static void finish_now(sd_server *s)
{
    if (s->drain_tick) event_del(s->drain_tick);
    sd_gen_fail_all(s->gen, 503, "The server is shutting down");
    struct timeval flush = {0, 300000};
    event_base_loopexit(s->base, &flush);
}

static void on_drain_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sd_server *s = arg;
    size_t live = sd_gen_live(s->gen);
    if (live == 0) {
        SD_INFO("drained: every request finished");
        event_del(s->drain_tick);
        struct timeval flush = {0, 100000};
        event_base_loopexit(s->base, &flush);
    } else if (sd_now_s() >= s->drain_deadline) {
        SD_WARN("drain timeout: ending the %zu requests still in flight with an error", live);
        finish_now(s);
    }
}

static void on_signal(evutil_socket_t sig, short what, void *arg)
{
    (void)what;
    sd_server *s = arg;
    if (s->draining) {
        SD_INFO("signal %d again: ending the requests in flight now", (int)sig);
        finish_now(s);
        return;
    }
    s->draining = true;
    SD_INFO("signal %d: draining: no new requests; %zu in flight get up to %d s", (int)sig, sd_gen_live(s->gen),
            s->o.drain_timeout_s);
    if (s->bound) evhttp_del_accept_socket(s->http, s->bound); /* new connections are refused */
    s->bound = NULL;
    sd_gen_drain(s->gen);
    s->drain_deadline = sd_now_s() + s->o.drain_timeout_s;
    struct timeval tick = {0, 50000};
    s->drain_tick = event_new(s->base, -1, EV_PERSIST, on_drain_tick, s);
    if (!s->drain_tick || event_add(s->drain_tick, &tick) != 0) finish_now(s);
    else on_drain_tick(-1, 0, s);
}

static sd_status load_tokenizer(sd_server *s, char *err, size_t errlen)
{
    sd_status st = sd_tok_load(s->o.tokenizer, &s->tok, err, errlen);
    if (st != SD_OK) return st;
    s->vocab = sd_tok_vocab_size(s->tok);
    char *cfg = NULL;
    size_t cfg_len;
    if (s->o.tokenizer_config &&
        (st = sd_read_file(s->o.tokenizer_config, (size_t)16 << 20, &cfg, &cfg_len, err, errlen)) != SD_OK)
        return st;
    char warn[600];
    st = sd_chat_load(&s->chat, s->tok, cfg, s->o.chat_template, warn, sizeof warn, err, errlen);
    free(cfg);
    if (st != SD_OK) return st;
    if (warn[0]) SD_WARN("%s", warn);
    if (s->chat.tmpl) SD_INFO("tokenizer %s: %d ids, chat template from %s", s->o.tokenizer, s->vocab, s->chat.source);
    else SD_INFO("tokenizer %s: %d ids, chat format %s", s->o.tokenizer, s->vocab, sd_chat_family_name(s->chat.family));
    return SD_OK;
}

static sd_status open_http(sd_server *s, char *err, size_t errlen)
{
    s->http = evhttp_new(s->base);
    if (!s->http) return sd_seterr(err, errlen, SD_ERR_NOMEM, "evhttp_new failed");
    /* libevent's own limit is a backstop (it answers with a bare 413); up to
     * it, gen.c answers over-limit bodies with an OpenAI-shaped 413. */
    size_t hard = s->o.max_body * 4 > s->o.max_body + (1 << 20) ? s->o.max_body * 4 : s->o.max_body + (1 << 20);
    evhttp_set_max_body_size(s->http, (ev_ssize_t)hard);
    /* every method libevent knows reaches on_request, which answers a wrong one with a JSON 405 */
    evhttp_set_allowed_methods(s->http, EVHTTP_REQ_GET | EVHTTP_REQ_POST | EVHTTP_REQ_HEAD | EVHTTP_REQ_PUT |
                                            EVHTTP_REQ_DELETE | EVHTTP_REQ_OPTIONS | EVHTTP_REQ_TRACE |
                                            EVHTTP_REQ_CONNECT | EVHTTP_REQ_PATCH);
    evhttp_set_max_headers_size(s->http, (ev_ssize_t)s->o.max_headers);
    evhttp_set_gencb(s->http, on_request, s);
    /* conncap.h times a request's arrival and idle connections; evhttp's own timeout is a backstop past
     * them; a generation's connection gets --request-timeout (gen.c) */
    evhttp_set_timeout(s->http, sd_server_idle_backstop_s(&s->o));
    s->bound = evhttp_bind_socket_with_handle(s->http, s->o.host, (ev_uint16_t)s->o.port);
    if (!s->bound) return sd_seterr(err, errlen, SD_ERR_IO, "cannot listen on %s:%d", s->o.host, s->o.port);
    sd_conncap_opts co = {.max = s->o.max_connections,
                          .per_client = s->o.max_per_client,
                          .first_byte_s = s->o.first_byte_s,
                          .keepalive_s = s->o.keepalive_s,
                          .body_s = s->o.body_s,
                          .request_s = s->o.header_timeout_s};
    sd_status st = sd_conncap_new(s->base, s->http, &s->bound, &co, &s->conncap, err, errlen);
    if (st != SD_OK) return st;
    struct sockaddr_storage ss;
    ev_socklen_t sl = sizeof ss;
    evutil_socket_t fd = evhttp_bound_socket_get_fd(s->bound);
    if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
        s->port = ntohs(ss.ss_family == AF_INET6 ? ((struct sockaddr_in6 *)&ss)->sin6_port
                                                 : ((struct sockaddr_in *)&ss)->sin_port);
    return SD_OK;
}

int sd_server_idle_backstop_s(const sd_server_opts *o)
{
    double t = o->header_timeout_s;
    if (o->first_byte_s > t) t = o->first_byte_s;
    if (o->keepalive_s > t) t = o->keepalive_s;
    if (o->body_s > t) t = o->body_s;
    return (int)t + 5;
}

static void apply_defaults(sd_server_opts *o)
{
    if (!o->host) o->host = "127.0.0.1";
    if (o->max_queue < 0) o->max_queue = 256;
    if (!o->max_body) o->max_body = 1 << 20;
    if (o->lane_capacity <= 0) o->lane_capacity = 64;
    if (o->default_max_tokens <= 0) o->default_max_tokens = 256;
    if (!o->max_headers) o->max_headers = 64 << 10;
    if (o->header_timeout_s <= 0) o->header_timeout_s = 30;
    if (o->drain_timeout_s < 0) o->drain_timeout_s = 30;
    if (o->max_connections <= 0) o->max_connections = 1024;
    if (o->max_per_client <= 0) o->max_per_client = o->max_connections < 256 ? o->max_connections : 256;
    if (o->first_byte_s <= 0) o->first_byte_s = 10;
    if (o->keepalive_s <= 0) o->keepalive_s = 5;
    if (o->body_s <= 0) o->body_s = 10;
    if (o->resume_wait_s < 0) o->resume_wait_s = 0;
}

sd_status sd_server_new(const sd_server_opts *opts, sd_server **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_server *s = calloc(1, sizeof *s);
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    s->o = *opts;
    apply_defaults(&s->o);
    s->metrics.model_name = s->o.model_name;
    s->started = time(NULL);
    signal(SIGPIPE, SIG_IGN);
    sd_status st = load_tokenizer(s, err, errlen);
    if (st == SD_OK && (!(s->base = event_base_new()) || !(s->zctx = zmq_ctx_new())))
        st = sd_seterr(err, errlen, SD_ERR_NOMEM, "cannot create the event base / ZeroMQ context");
    if (st == SD_OK && s->o.curve_keys) st = sd_curve_load(s->zctx, s->o.curve_keys, false, &s->curve, err, errlen);
    if (st == SD_OK) {
        sd_gen_opts go = {s->o.verifiers,
                          s->o.n_verifiers,
                          s->o.model_name,
                          s->o.aliases,
                          s->o.n_aliases,
                          s->o.max_queue,
                          s->o.max_body,
                          s->o.request_timeout_s,
                          s->o.lane_capacity,
                          s->o.health_interval_ms,
                          s->o.max_missed,
                          s->o.default_max_tokens,
                          sd_server_idle_backstop_s(&s->o),
                          s->o.resume_wait_s,
                          s->o.verifier_dns,
                          s->o.n_verifier_dns,
                          s->o.dns_interval_s,
                          s->o.dns_server,
                          s->o.tool_parser};
        sd_gen_env ge = {s->base, s->zctx, s->curve, s->tok, &s->chat, &s->metrics, &s->conncap};
        st = sd_gen_new(&go, &ge, &s->gen, err, errlen);
    }
    if (st == SD_OK) st = open_http(s, err, errlen);
    if (st == SD_OK) {
        s->sigint = evsignal_new(s->base, SIGINT, on_signal, s);
        s->sigterm = evsignal_new(s->base, SIGTERM, on_signal, s);
        if (!s->sigint || !s->sigterm || evsignal_add(s->sigint, NULL) || evsignal_add(s->sigterm, NULL))
            st = sd_seterr(err, errlen, SD_ERR_IO, "cannot install signal handlers");
    }
    if (st != SD_OK) {
        sd_server_free(s);
        return st;
    }
    *out = s;
    return SD_OK;
}

int sd_server_run(sd_server *s)
{
    SD_INFO("serving %s at http://%s:%d (%zu lane%s%s)", s->o.model_name, s->o.host, s->port, s->o.n_verifiers,
            s->o.n_verifiers == 1 ? "" : "s", s->o.n_verifier_dns ? ", more from DNS" : "");
    event_base_dispatch(s->base);
    sd_gen_fail_all(s->gen, 503, "The server is shutting down"); /* nothing should be left */
    return 0;
}

void sd_server_free(sd_server *s)
{
    if (!s) return;
    sd_gen_free(s->gen); /* fails what is still live, before its HTTP requests go */
    if (s->sigint) event_free(s->sigint);
    if (s->sigterm) event_free(s->sigterm);
    if (s->drain_tick) event_free(s->drain_tick);
    if (s->http) evhttp_free(s->http);
    sd_conncap_free(s->conncap); /* after evhttp: its last references close the sockets */
    sd_curve_free(s->curve);
    if (s->zctx) zmq_ctx_term(s->zctx);
    if (s->base) event_base_free(s->base);
    sd_tok_free(s->tok);
    sd_chat_clear(&s->chat);
    free(s);
}
