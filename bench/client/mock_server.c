/* mock_server.c — TEST TOOLING ONLY, not part of specd: a tiny mock
 * OpenAI-compatible server (libevent evhttp, one thread) that the bench
 * client's end-to-end test drives.
 *
 * Serves GET /v1/models, GET /metrics, POST /v1/completions and
 * /v1/chat/completions (stream and non-stream). Every generation emits
 * exactly max_tokens tokens (--tokens when absent), one chunk per token,
 * --delay-ms apart, then a usage chunk that also carries a "speculative"
 * stats object. --fail-every K answers HTTP 500 to every K-th generation
 * request. Each request is logged as one line to --log:
 *   served id=N endpoint=completions|chat stream=0|1 status=200|500|400|401|aborted tokens=T
 * --port 0 binds an ephemeral port; --port-file receives the bound port. */
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <getopt.h>
#include <jansson.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

typedef struct {
    const char *model, *api_key;
    int tokens, delay_ms, fail_every;
    FILE *log;
    long n_requests;
    long pos_accepted[2]; /* per draft position, for /metrics */
    long steps_total;
    struct event_base *base;
} mock;

typedef struct {
    mock *m;
    struct evhttp_request *req;
    struct evhttp_connection *conn;
    struct event *timer;
    bool chat, stream, usage;
    int n, sent;
    long id, prompt_chars;
} gen;

static void log_line(mock *m, long id, bool chat, bool stream, const char *status, int tokens)
{
    if (!m->log) return;
    fprintf(m->log, "served id=%ld endpoint=%s stream=%d status=%s tokens=%d\n", id, chat ? "chat" : "completions",
            stream, status, tokens);
    fflush(m->log);
}

static void reply_json(struct evhttp_request *req, int code, const char *reason, json_t *body)
{
    char *s = json_dumps(body, JSON_COMPACT);
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b, "%s", s ? s : "{}");
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "application/json");
    evhttp_send_reply(req, code, reason, b);
    evbuffer_free(b);
    free(s);
    json_decref(body);
}

static void reply_error(struct evhttp_request *req, int code, const char *reason, const char *msg)
{
    reply_json(req, code, reason, json_pack("{s:{s:s, s:s}}", "error", "message", msg, "type", reason));
}

static json_t *spec_stats(mock *m, int n, bool count)
{
    long steps = (n + 2) / 3, acc = n - steps;
    if (count) {
        m->steps_total += steps;
        m->pos_accepted[0] += acc < steps ? acc : steps;
        m->pos_accepted[1] += acc > steps ? acc - steps : 0;
    }
    return json_pack("{s:I, s:I, s:I, s:f}", "steps", (json_int_t)steps, "draft_tokens", (json_int_t)(3 * steps),
                     "accepted_tokens", (json_int_t)acc, "mean_accepted_per_step", steps ? (double)acc / steps : 0.0);
}

static json_t *usage_obj(gen *g)
{
    return json_pack("{s:I, s:i, s:I, s:{s:I}}", "prompt_tokens", (json_int_t)(g->prompt_chars / 4 + 1),
                     "completion_tokens", g->n, "total_tokens", (json_int_t)(g->prompt_chars / 4 + 1 + g->n),
                     "prompt_tokens_details", "cached_tokens", (json_int_t)(g->prompt_chars / 8));
}

/* One streamed chunk carrying token i (i < 0: chat role-only chunk). */
static json_t *token_chunk(gen *g, int i)
{
    char text[32];
    snprintf(text, sizeof text, " tok%d", i);
    json_t *fin = i == g->n - 1 ? json_string("length") : json_null();
    json_t *choice;
    if (!g->chat) choice = json_pack("{s:i, s:s, s:o}", "index", 0, "text", text, "finish_reason", fin);
    else if (i < 0)
        choice = json_pack("{s:i, s:{s:s, s:s}, s:o}", "index", 0, "delta", "role", "assistant", "content", "",
                           "finish_reason", fin);
    else choice = json_pack("{s:i, s:{s:s}, s:o}", "index", 0, "delta", "content", text, "finish_reason", fin);
    return json_pack("{s:s, s:s, s:i, s:s, s:[o]}", "id", "mock", "object",
                     g->chat ? "chat.completion.chunk" : "text_completion", "created", 0, "model", g->m->model,
                     "choices", choice);
}

static void send_event(gen *g, json_t *obj)
{
    char *s = obj ? json_dumps(obj, JSON_COMPACT) : NULL;
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b, "data: %s\n\n", s ? s : "[DONE]");
    evhttp_send_reply_chunk(g->req, b);
    evbuffer_free(b);
    free(s);
    json_decref(obj);
}

static void gen_free(gen *g)
{
    if (g->timer) event_free(g->timer);
    free(g);
}

/* The client went away before we finished. */
static void on_close(struct evhttp_connection *conn, void *arg)
{
    (void)conn;
    gen *g = arg;
    log_line(g->m, g->id, g->chat, g->stream, "aborted", g->sent);
    gen_free(g);
}

static void finish_nonstream(gen *g)
{
    char *text = malloc((size_t)g->n * 12 + 1), *w = text;
    for (int i = 0; i < g->n && text; i++) w += sprintf(w, " tok%d", i);
    if (text) *w = '\0';
    json_t *choice =
        g->chat ? json_pack("{s:i, s:{s:s, s:s}, s:s}", "index", 0, "message", "role", "assistant", "content",
                            text ? text : "", "finish_reason", "length")
                : json_pack("{s:i, s:s, s:s}", "index", 0, "text", text ? text : "", "finish_reason", "length");
    json_t *body = json_pack("{s:s, s:s, s:i, s:s, s:[o], s:o, s:o}", "id", "mock", "object",
                             g->chat ? "chat.completion" : "text_completion", "created", 0, "model", g->m->model,
                             "choices", choice, "usage", usage_obj(g), "speculative", spec_stats(g->m, g->n, true));
    free(text);
    evhttp_connection_set_closecb(g->conn, NULL, NULL);
    reply_json(g->req, 200, "OK", body);
    log_line(g->m, g->id, g->chat, false, "200", g->n);
    gen_free(g);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    gen *g = arg;
    if (!g->stream) {
        finish_nonstream(g);
        return;
    }
    send_event(g, token_chunk(g, g->sent++));
    if (g->sent < g->n) {
        struct timeval tv = {g->m->delay_ms / 1000, (g->m->delay_ms % 1000) * 1000};
        evtimer_add(g->timer, &tv);
        return;
    }
    if (g->usage) {
        json_t *u = json_pack("{s:s, s:s, s:i, s:s, s:[], s:o, s:o}", "id", "mock", "object",
                              g->chat ? "chat.completion.chunk" : "text_completion", "created", 0, "model", g->m->model,
                              "choices", "usage", usage_obj(g), "speculative", spec_stats(g->m, g->n, true));
        send_event(g, u);
    }
    send_event(g, NULL);
    evhttp_connection_set_closecb(g->conn, NULL, NULL);
    evhttp_send_reply_end(g->req);
    log_line(g->m, g->id, g->chat, true, "200", g->n);
    gen_free(g);
}

static bool authorized(mock *m, struct evhttp_request *req)
{
    if (!m->api_key) return true;
    const char *h = evhttp_find_header(evhttp_request_get_input_headers(req), "Authorization");
    return h && strncmp(h, "Bearer ", 7) == 0 && strcmp(h + 7, m->api_key) == 0;
}

static json_t *read_body(struct evhttp_request *req)
{
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    const char *p = (const char *)evbuffer_pullup(in, (ssize_t)len);
    return p ? json_loadb(p, len, 0, NULL) : NULL;
}

static void handle_gen(mock *m, struct evhttp_request *req, bool chat)
{
    long id = ++m->n_requests;
    json_t *body = read_body(req);
    json_t *so = json_object_get(body, "stream_options");
    bool stream = json_is_true(json_object_get(body, "stream"));
    if (!authorized(m, req)) {
        log_line(m, id, chat, stream, "401", 0);
        reply_error(req, 401, "Unauthorized", "bad api key");
    } else if (m->fail_every > 0 && id % m->fail_every == 0) {
        log_line(m, id, chat, stream, "500", 0);
        reply_error(req, 500, "Internal Server Error", "mock failure (--fail-every)");
    } else if (!json_is_object(body)) {
        log_line(m, id, chat, stream, "400", 0);
        reply_error(req, 400, "Bad Request", "body is not a JSON object");
    } else {
        gen *g = calloc(1, sizeof *g);
        json_t *mt = json_object_get(body, "max_tokens");
        g->m = m;
        g->req = req;
        g->conn = evhttp_request_get_connection(req);
        g->chat = chat;
        g->stream = stream;
        g->usage = json_is_true(json_object_get(so, "include_usage"));
        g->id = id;
        g->n = json_is_integer(mt) && json_integer_value(mt) > 0 ? (int)json_integer_value(mt) : m->tokens;
        g->n = g->n > 100000 ? 100000 : g->n;
        json_t *pr = json_object_get(body, "prompt");
        g->prompt_chars = json_is_string(pr) ? (long)json_string_length(pr) : 16;
        g->timer = evtimer_new(m->base, on_tick, g);
        /* Small chunks must leave at once (Nagle + delayed ACK would add ~40 ms). */
        int one = 1;
        evutil_socket_t fd = bufferevent_getfd(evhttp_connection_get_bufferevent(g->conn));
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        evhttp_connection_set_closecb(g->conn, on_close, g);
        long first_ms = stream ? m->delay_ms : (long)m->delay_ms * g->n;
        struct timeval tv = {first_ms / 1000, (first_ms % 1000) * 1000};
        if (stream) {
            evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/event-stream");
            evhttp_send_reply_start(req, 200, "OK");
            if (chat) send_event(g, token_chunk(g, -1));
        }
        evtimer_add(g->timer, &tv);
    }
    json_decref(body);
}

static void handle_metrics(mock *m, struct evhttp_request *req)
{
    struct evbuffer *b = evbuffer_new();
    evbuffer_add_printf(b,
                        "# HELP specd_spec_accepted_per_position_total accepted draft tokens by position\n"
                        "# TYPE specd_spec_accepted_per_position_total counter\n"
                        "specd_spec_accepted_per_position_total{pos=\"1\"} %ld\n"
                        "specd_spec_accepted_per_position_total{pos=\"2\"} %ld\n"
                        "specd_spec_steps_total %ld\n"
                        "specd_requests_total %ld\n",
                        m->pos_accepted[0], m->pos_accepted[1], m->steps_total, m->n_requests);
    evhttp_add_header(evhttp_request_get_output_headers(req), "Content-Type", "text/plain; version=0.0.4");
    evhttp_send_reply(req, 200, "OK", b);
    evbuffer_free(b);
}

static void on_request(struct evhttp_request *req, void *arg)
{
    mock *m = arg;
    const char *uri = evhttp_request_get_uri(req);
    size_t n = strcspn(uri, "?");
    enum evhttp_cmd_type cmd = evhttp_request_get_command(req);
#define IS(path) (n == strlen(path) && strncmp(uri, path, n) == 0)
    if (cmd == EVHTTP_REQ_GET && IS("/v1/models"))
        reply_json(req, 200, "OK",
                   json_pack("{s:s, s:[{s:s, s:s}]}", "object", "list", "data", "id", m->model, "object", "model"));
    else if (cmd == EVHTTP_REQ_GET && IS("/metrics")) handle_metrics(m, req);
    else if (cmd == EVHTTP_REQ_POST && IS("/v1/completions")) handle_gen(m, req, false);
    else if (cmd == EVHTTP_REQ_POST && IS("/v1/chat/completions")) handle_gen(m, req, true);
    else reply_error(req, 404, "Not Found", "no such route");
#undef IS
}

static int write_port(const char *path, int port)
{
    char tmp[4096];
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    FILE *f = fopen(tmp, "w");
    if (!f) return -1;
    fprintf(f, "%d\n", port);
    if (fclose(f) != 0) return -1;
    return rename(tmp, path);
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"host", 1, 0, 'H'},   {"port", 1, 0, 'p'},     {"port-file", 1, 0, 'f'},
        {"tokens", 1, 0, 't'}, {"delay-ms", 1, 0, 'd'}, {"fail-every", 1, 0, 'F'},
        {"log", 1, 0, 'l'},    {"model", 1, 0, 'm'},    {"api-key", 1, 0, 'k'},
        {0, 0, 0, 0},
    };
    mock m = {.model = "mock-model", .tokens = 16};
    const char *host = "127.0.0.1", *port_file = NULL, *log_path = NULL;
    int port = 0, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 'H': host = optarg; break;
        case 'p': port = atoi(optarg); break;
        case 'f': port_file = optarg; break;
        case 't': m.tokens = atoi(optarg) > 0 ? atoi(optarg) : 1; break;
        case 'd': m.delay_ms = atoi(optarg) > 0 ? atoi(optarg) : 0; break;
        case 'F': m.fail_every = atoi(optarg); break;
        case 'l': log_path = optarg; break;
        case 'm': m.model = optarg; break;
        case 'k': m.api_key = optarg; break;
        default:
            fprintf(stderr, "usage: specd-mock-openai [--host H] [--port P] [--port-file F] [--tokens N]\n"
                            "       [--delay-ms D] [--fail-every K] [--log FILE] [--model M] [--api-key K]\n");
            return 2;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    if (log_path && !(m.log = fopen(log_path, "a"))) {
        perror(log_path);
        return 1;
    }
    m.base = event_base_new();
    struct evhttp *http = m.base ? evhttp_new(m.base) : NULL;
    struct evhttp_bound_socket *bs = http ? evhttp_bind_socket_with_handle(http, host, (ev_uint16_t)port) : NULL;
    if (!bs) {
        fprintf(stderr, "specd-mock-openai: cannot listen on %s:%d\n", host, port);
        return 1;
    }
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    getsockname(evhttp_bound_socket_get_fd(bs), (struct sockaddr *)&ss, &sl);
    port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    evhttp_set_gencb(http, on_request, &m);
    if (port_file && write_port(port_file, port) != 0) {
        perror(port_file);
        return 1;
    }
    fprintf(stderr, "specd-mock-openai: listening on %s:%d\n", host, port);
    event_base_dispatch(m.base);
    evhttp_free(http);
    event_base_free(m.base);
    return 0;
}
