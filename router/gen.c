/* gen.c — generation in the router (see gen.h).
 *
 * Ending paths, all through gen_end(): normal finish, stop string (Cancel sent
 * to the verifier), error event / lane down (503), timeout (Cancel, 504),
 * client disconnect (Cancel; the detached evhttp request is released).
 * Everything runs on the event-loop thread. */
#include "gen.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "clock.h"
#include "convert.h"
#include "log.h"
#include "logprobs.h"
#include "prompt.h"
#include "reply.h"
#include "responses.h"
#include "stop_match.h"

#define INVALID "invalid_request_error"

typedef enum { GEN_QUEUED = 0, GEN_RUNNING = 1 } gen_state;

/* One generation request, from validation to its last byte. Owned by the
 * sd_gen's list; freed by gen_end. */
typedef struct gen {
    struct gen *prev, *next;   /* all live requests */
    struct gen *qnext;         /* FIFO of waiting requests */
    struct sd_gen *svc;
    uint64_t id;
    char cid[48];              /* "cmpl-…" / "chatcmpl-…" / "resp_…" */
    char msg_id[24];           /* /v1/responses: the output message's id "msg_…" */
    time_t created;
    double t0;                 /* monotonic start */
    double t_first;            /* monotonic time of the first token (0: none yet) */
    double t_last;             /* ... and of the last token event */
    double t_dispatch;         /* monotonic time of the first dispatch to a lane (0: not yet) */
    struct evhttp_request *http;
    bool client_gone;          /* the client went away: nothing more to send */
    bool detached;             /* libevent detached http from its (closed) connection */
    struct event *watch;       /* EOF watch on the client's socket */
    bool stream_started;
    gen_state state;
    int lane;                  /* -1 while queued */
    sd_api_req p;
    int32_t *prompt;
    size_t n_prompt;
    unsigned max_tokens;
    unsigned completion_tokens;
    int32_t *out_ids;          /* the output so far (failover resumes after it on another lane) */
    size_t n_out, cap_out;
    sd_tok_stream *dec;
    sd_stop *stop;
    struct evbuffer *text;     /* non-stream: all output; stream: this event's output */
    sd_lp *lp;                 /* logprobs: the entries not yet sent (non-stream: all) */
    struct evbuffer *all;      /* /v1/responses streaming: all output (for the .done events) */
    unsigned seq;              /* /v1/responses streaming: the next event's sequence_number */
    bool prompt_lp_done;       /* echo + logprobs: the prompt's entries are in lp */
    struct event *timer;       /* request timeout */
    struct event *park;        /* --resume-wait: how long a request whose lane died waits for another */
    bool parked;               /* waiting (first in the queue) for a lane to resume on */
    uint64_t steps, draft_tokens, accepted_tokens, accepted_at[64];
    size_t n_accepted_at;
    sd_api_drafting drafting;  /* valid when has_drafting */
    bool has_drafting;
    sd_api_adapt adapt;        /* valid when has_adapt */
    bool has_adapt;
} gen;

struct sd_gen {
    sd_gen_opts o;
    struct event_base *base;
    sd_lanes *lanes;
    const sd_tok *tok;
    int vocab;
    sd_chat_family chat;
    sd_metrics *metrics;
    gen *live;                 /* list of live requests */
    gen *qhead, *qtail;        /* waiting requests */
    int nqueued;
    uint64_t next_id;
    bool stopping;             /* shutting down: dispatch nothing more */
    bool draining;             /* shutting down: accept nothing more */
};

static void gen_drain_queue(sd_gen *s);

/* ------------------------------------------------------------ bookkeeping */

static void gen_link(sd_gen *s, gen *g)
{
    g->next = s->live;
    if (s->live) s->live->prev = g;
    s->live = g;
}

static void gen_unlink(sd_gen *s, gen *g)
{
    if (g->prev) g->prev->next = g->next;
    else s->live = g->next;
    if (g->next) g->next->prev = g->prev;
    g->prev = g->next = NULL;
}

static void queue_remove(sd_gen *s, gen *g)
{
    gen **pp = &s->qhead, *prev = NULL;
    while (*pp && *pp != g) {
        prev = *pp;
        pp = &(*pp)->qnext;
    }
    if (!*pp) return;
    *pp = g->qnext;
    if (s->qtail == g) s->qtail = prev;
    g->qnext = NULL;
    s->nqueued--;
    s->metrics->queued = s->nqueued;
}

static gen *gen_find(sd_gen *s, uint64_t id)
{
    for (gen *g = s->live; g; g = g->next)
        if (g->id == id) return g;
    return NULL;
}

static void gen_free(gen *g)
{
    if (!g) return;
    if (g->timer) event_free(g->timer);
    if (g->park) event_free(g->park);
    if (g->watch) event_free(g->watch);
    sd_api_req_clear(&g->p);
    free(g->prompt);
    free(g->out_ids);
    sd_tok_stream_free(g->dec);
    sd_stop_free(g->stop);
    if (g->text) evbuffer_free(g->text);
    sd_lp_free(g->lp);
    if (g->all) evbuffer_free(g->all);
    free(g);
}

static void send_cancel(gen *g)
{
    if (g->state != GEN_RUNNING || g->lane < 0) return;
    Specd__Cancel c = SPECD__CANCEL__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    c.request_id = g->id;
    env.body_case = SPECD__ENVELOPE__BODY_CANCEL;
    env.cancel = &c;
    char err[256];
    if (sd_lanes_send(g->svc->lanes, g->lane, &env, err, sizeof err) != SD_OK)
        SD_WARN("request %llu: cancel not sent: %s", (unsigned long long)g->id, err);
}

/* Detaches g from the server: queue, lane accounting, list, close callback. */
static void gen_detach(gen *g)
{
    sd_gen *s = g->svc;
    if (g->state == GEN_QUEUED) queue_remove(s, g);
    if (g->state == GEN_RUNNING) {
        sd_lanes_add_inflight(s->lanes, g->lane, -1);
        s->metrics->active--;
    }
    gen_unlink(s, g);
    if (g->watch) event_del(g->watch);
    if (g->http && !g->detached) {
        struct evhttp_connection *c = evhttp_request_get_connection(g->http);
        if (c) evhttp_connection_set_closecb(c, NULL, NULL);
    }
}

static sd_api_result gen_result(const gen *g, const char *finish, sd_api_spec *spec)
{
    spec->steps = g->steps;
    spec->draft_tokens = g->draft_tokens;
    spec->accepted_tokens = g->accepted_tokens;
    spec->accepted_at = g->accepted_at;
    spec->n_accepted_at = g->n_accepted_at;
    spec->drafting = g->has_drafting ? &g->drafting : NULL;
    spec->adapt = g->has_adapt ? &g->adapt : NULL;
    const char *name = g->p.model ? sd_gen_served_name(g->svc, g->p.model) : NULL;
    sd_api_result r = {g->cid, name ? name : g->svc->o.model_name, (long long)g->created, finish,
                       (unsigned)g->n_prompt, g->completion_tokens, spec, NULL};
    return r;
}

static void send_sse(gen *g, char *event)
{
    if (!event) return;
    struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, event, strlen(event));
        evhttp_send_reply_chunk(g->http, b);
        evbuffer_free(b);
    }
    free(event);
}

/* /v1/responses: what the response reports now. */
static sd_resp resp_of(const gen *g, const char *finish, bool streamed)
{
    struct evbuffer *b = streamed ? g->all : g->text;
    const char *text = b && evbuffer_get_length(b) ? (const char *)evbuffer_pullup(b, -1) : NULL;
    const char *name = g->p.model ? sd_gen_served_name(g->svc, g->p.model) : NULL;
    sd_resp r = {g->cid, g->msg_id, name ? name : g->svc->o.model_name, (long long)g->created,
                 !finish ? "in_progress" : !strcmp(finish, "length") ? "incomplete" : "completed",
                 finish && !strcmp(finish, "length"), (unsigned)g->n_prompt, g->completion_tokens, &g->p,
                 text ? text : "", text ? evbuffer_get_length(b) : 0};
    return r;
}

static void send_sse(gen *g, char *event);

/* /v1/responses streaming: the events that open the stream, and those that
 * close it (finish: the generation's end). */
static void resp_open(gen *g)
{
    sd_resp r = resp_of(g, NULL, true);
    send_sse(g, sd_resp_event("response.created", json_pack("{s:o}", "response", sd_resp_object(&r)), &g->seq));
    send_sse(g, sd_resp_event("response.in_progress", json_pack("{s:o}", "response", sd_resp_object(&r)), &g->seq));
    send_sse(g, sd_resp_event("response.output_item.added",
                              json_pack("{s:i, s:o}", "output_index", 0, "item", sd_resp_message(&r, false)), &g->seq));
    send_sse(g, sd_resp_event("response.content_part.added",
                              json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", r.msg_id, "output_index", 0,
                                        "content_index", 0, "part", "type", "output_text", "text", "",
                                        "annotations"), &g->seq));
}

static void resp_close(gen *g, const char *finish)
{
    sd_resp r = resp_of(g, finish, true);
    send_sse(g, sd_resp_event("response.output_text.done",
                              json_pack("{s:s, s:i, s:i, s:s%}", "item_id", r.msg_id, "output_index", 0,
                                        "content_index", 0, "text", r.text, r.len), &g->seq));
    send_sse(g, sd_resp_event("response.content_part.done",
                              json_pack("{s:s, s:i, s:i, s:{s:s, s:s%, s:[]}}", "item_id", r.msg_id, "output_index",
                                        0, "content_index", 0, "part", "type", "output_text", "text", r.text, r.len,
                                        "annotations"), &g->seq));
    send_sse(g, sd_resp_event("response.output_item.done",
                              json_pack("{s:i, s:o}", "output_index", 0, "item", sd_resp_message(&r, true)), &g->seq));
    send_sse(g, sd_resp_event(r.length ? "response.incomplete" : "response.completed",
                              json_pack("{s:o}", "response", sd_resp_object(&r)), &g->seq));
}

/* The whole non-streamed answer of a successful generation. */
static char *final_body(gen *g, const char *finish)
{
    if (g->p.responses) {
        sd_resp r = resp_of(g, finish, false);
        json_t *o = sd_resp_object(&r);
        char *body = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8));
        json_decref(o);
        return body;
    }
    sd_api_spec spec;
    sd_api_result r = gen_result(g, finish, &spec);
    r.logprobs = g->lp ? sd_lp_take(g->lp) : NULL;
    char *body = sd_api_response_json(g->p.kind, &r, (const char *)evbuffer_pullup(g->text, -1),
                                      evbuffer_get_length(g->text));
    json_decref(r.logprobs);
    return body;
}

/* A streamed generation's error: the API's error event, then the end. */
static void stream_error(gen *g, const sd_api_err *e)
{
    if (g->p.responses) {
        send_sse(g, sd_resp_event("error", json_pack("{s:s, s:s, s:o}", "code", e->code[0] ? e->code : e->type,
                                                     "message", e->message, "param",
                                                     e->param[0] ? json_string(e->param) : json_null()), &g->seq));
        return;
    }
    char *j = sd_api_error_json(e);
    size_t n = j ? strlen(j) + 9 : 0;
    char *ev = j ? malloc(n) : NULL;
    if (ev) snprintf(ev, n, "data: %s\n\n", j);
    free(j);
    send_sse(g, ev);
    send_sse(g, strdup("data: [DONE]\n\n"));
}

/* Ends the request: error (e != NULL) or finish reason. Frees g. */
static void gen_end(gen *g, const char *finish, const sd_api_err *e)
{
    sd_gen *s = g->svc;
    gen_detach(g);
    int status = e ? e->status : 200;
    if (g->client_gone) {
        status = 499;
        if (g->stream_started) evhttp_send_reply_end(g->http); /* frees the detached request */
        else evhttp_send_reply(g->http, 499, "Client Closed Request", NULL);
    } else if (g->stream_started) {
        sd_api_spec spec;
        sd_api_result r = gen_result(g, finish, &spec);
        if (e) {
            stream_error(g, e);
        } else if (g->p.responses) {
            resp_close(g, finish);
        } else {
            send_sse(g, sd_api_chunk_sse(g->p.kind, &r, "", 0, false, g->p.include_usage));
            if (g->p.include_usage) send_sse(g, sd_api_usage_sse(g->p.kind, &r));
            send_sse(g, strdup("data: [DONE]\n\n"));
        }
        evhttp_send_reply_end(g->http);
    } else if (e) {
        sd_reply_error(g->http, e, s->metrics);
        status = 0; /* counted by sd_reply_error */
    } else {
        char *body = final_body(g, finish);
        sd_reply_json(g->http, 200, body, s->metrics);
        status = 0; /* counted by sd_reply_json */
        free(body);
    }
    if (status) sd_metrics_count_status(s->metrics, status);
    if (!e) {
        double now = sd_now_s();
        double queue = g->t_dispatch ? g->t_dispatch - g->t0 : now - g->t0;
        sd_metrics_req mr = {(unsigned)g->n_prompt, g->completion_tokens, now - g->t0,
                             g->t_first ? g->t_first - g->t0 : -1, queue, finish};
        sd_metrics_observe(s->metrics, &mr);
    }
    gen_free(g);
    gen_drain_queue(s);
}

static void gen_fail(gen *g, int status, const char *type, const char *code, const char *fmt_msg)
{
    sd_api_err e;
    sd_api_fail(&e, status, type, NULL, code, "%s", fmt_msg);
    gen_end(g, NULL, &e);
}

/* ------------------------------------------------------------ callbacks */

static void on_client_close(struct evhttp_connection *c, void *arg)
{
    (void)c;
    gen *g = arg;
    SD_INFO("request %llu: client disconnected; cancelling", (unsigned long long)g->id);
    g->client_gone = true;
    g->detached = true;
    send_cancel(g);
    gen_end(g, NULL, NULL);
}

/* The answer is written: the connection idles (keep-alive) on the short timeout again. */
static void on_answered(struct evhttp_request *req, void *arg)
{
    const sd_gen *s = arg;
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (c) evhttp_connection_set_timeout(c, s->o.header_timeout_s);
}

/* libevent 2.1 does not read from a connection while its request is being
 * answered, so a client that hangs up before any byte is written would go
 * unnoticed: watch the socket for EOF ourselves. */
static void on_client_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    gen *g = arg;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    event_del(g->watch);
    if (n > 0) return; /* the client pipelined more data: not a hang-up */
    SD_INFO("request %llu: client hung up; cancelling", (unsigned long long)g->id);
    g->client_gone = true;
    send_cancel(g);
    gen_end(g, NULL, NULL);
}

static void watch_client(gen *g)
{
    struct evhttp_connection *c = evhttp_request_get_connection(g->http);
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0) return;
    /* Streamed chunks are small: without this, Nagle's algorithm holds the
     * first one until the client's delayed ACK (~40 ms on keep-alive). */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    g->watch = event_new(g->svc->base, fd, EV_READ | EV_PERSIST, on_client_readable, g);
    if (g->watch) event_add(g->watch, NULL);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    gen *g = arg;
    SD_WARN("request %llu: timed out", (unsigned long long)g->id);
    send_cancel(g);
    gen_fail(g, g->state == GEN_QUEUED ? 503 : 504, "server_error", "timeout",
             g->state == GEN_QUEUED ? "Timed out waiting for a free verifier lane" : "The request timed out");
}

/* ------------------------------------------------------------ submit */

/* Checks prompt + max_tokens against ctx and fixes g->max_tokens. */
static sd_status fit_context(gen *g, uint32_t ctx, sd_api_err *e)
{
    const char *pp = g->p.kind == SD_API_CHAT ? "messages" : "prompt";
    if (g->n_prompt >= ctx)
        return sd_api_fail(e, 400, INVALID, pp, "context_length_exceeded",
                           "This model's maximum context length is %u tokens, but the prompt has %zu tokens",
                           ctx, g->n_prompt);
    unsigned room = ctx - (unsigned)g->n_prompt;
    if (g->p.max_tokens < 0) {
        unsigned d = (unsigned)g->svc->o.default_max_tokens;
        g->max_tokens = d < room ? d : room;
        return SD_OK;
    }
    if ((unsigned)g->p.max_tokens > room)
        return sd_api_fail(e, 400, INVALID, "max_tokens", "context_length_exceeded",
                           "This model's maximum context length is %u tokens. However, you requested %zu tokens "
                           "(%zu in the %s, %d for max_tokens). Please reduce the length of the %s or max_tokens",
                           ctx, g->n_prompt + (size_t)g->p.max_tokens, g->n_prompt, pp, g->p.max_tokens, pp);
    g->max_tokens = (unsigned)g->p.max_tokens;
    return SD_OK;
}

static sd_status submit(gen *g, int lane, char *err, size_t errlen)
{
    Specd__SamplingParams sp;
    Specd__SpecParams spec = SPECD__SPEC_PARAMS__INIT;
    Specd__Submit sub = SPECD__SUBMIT__INIT;
    Specd__LogprobParams lp = SPECD__LOGPROB_PARAMS__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    sd_pb_sampling_set(&g->p.sampling, &sp);
    if (g->p.logprobs) {
        lp.top = (uint32_t)g->p.top_logprobs;
        lp.prompt = g->p.echo && !g->prompt_lp_done && g->n_out == 0;
        sub.logprobs = &lp;
    }
    spec.enabled = g->p.spec_enabled;
    spec.num_draft = g->p.num_draft;
    spec.verify = (Specd__VerifyMode)g->p.verify;
    sub.request_id = g->id;
    sub.prompt_ids = g->prompt;
    sub.n_prompt_ids = g->n_prompt;
    sub.sampling = &sp;
    sub.max_tokens = g->max_tokens;
    sub.stop_ids = g->p.stop_ids;
    sub.n_stop_ids = g->p.n_stop_ids;
    sub.ignore_eos = g->p.ignore_eos;
    sub.spec = &spec;
    sub.resume_ids = g->out_ids;
    sub.n_resume_ids = g->n_out;
    env.body_case = SPECD__ENVELOPE__BODY_SUBMIT;
    env.submit = &sub;
    return sd_lanes_send(g->svc->lanes, lane, &env, err, errlen);
}

static void start_stream(gen *g)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(g->http);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_send_reply_start(g->http, 200, "OK");
    g->stream_started = true;
    if (g->p.responses) {
        resp_open(g);
    } else if (g->p.kind == SD_API_CHAT) {
        sd_api_spec spec;
        sd_api_result r = gen_result(g, NULL, &spec);
        send_sse(g, sd_api_chunk_sse(g->p.kind, &r, "", 0, true, g->p.include_usage));
    }
}

/* Sends g to lane. On failure ends g (error reply) and returns false. */
static bool gen_dispatch(gen *g, int lane)
{
    sd_gen *s = g->svc;
    sd_api_err e;
    const sd_lane_info *in = sd_lanes_info(s->lanes, lane);
    if (fit_context(g, in->max_context, &e) != SD_OK) {
        gen_end(g, NULL, &e);
        return false;
    }
    char err[256];
    if (g->state == GEN_QUEUED) queue_remove(s, g);
    if (g->parked) {
        g->parked = false;
        evtimer_del(g->park);
        s->metrics->failovers++;
        SD_INFO("request %llu: resuming on %s after %zu tokens", (unsigned long long)g->id, in->endpoint, g->n_out);
    }
    if (submit(g, lane, err, sizeof err) != SD_OK) {
        SD_WARN("request %llu: submit to %s failed: %s", (unsigned long long)g->id, in->endpoint, err);
        g->state = GEN_RUNNING;
        g->lane = -1;
        s->metrics->active++;
        gen_fail(g, 503, "server_error", "lane_unavailable", "The verifier lane is not reachable; retry later");
        return false;
    }
    g->state = GEN_RUNNING;
    g->lane = lane;
    if (!g->t_dispatch) g->t_dispatch = sd_now_s();
    sd_lanes_add_inflight(s->lanes, lane, 1);
    s->metrics->active++;
    SD_DEBUG("request %llu: %zu prompt tokens, max %u, lane %s", (unsigned long long)g->id, g->n_prompt,
             g->max_tokens, in->endpoint);
    if (g->p.stream && !g->stream_started) start_stream(g);
    return true;
}

/* Failover: g's lane died; it goes on at lane from the output it already
 * produced (Submit.resume_ids). The client sees no break: the same stream,
 * the same tokens an undisturbed run gives (greedy, and sampling with the
 * request's seed, which the router fixed at admission). */
static void gen_failover(gen *g, int lane)
{
    sd_gen *s = g->svc;
    sd_lanes_add_inflight(s->lanes, g->lane, -1);
    s->metrics->active--;
    s->metrics->failovers++;
    SD_WARN("request %llu: lane %s died; resuming on %s after %zu tokens", (unsigned long long)g->id,
            sd_lanes_info(s->lanes, g->lane)->endpoint, sd_lanes_info(s->lanes, lane)->endpoint, g->n_out);
    g->lane = -1;
    gen_dispatch(g, lane);
}

/* g's lane died and no other lane can take it: it waits, ahead of the
 * requests that have produced nothing, up to --resume-wait for a lane to come
 * up (the supervisor restarting the verifier), then resumes there like a
 * failover. It gets a fresh request id, so that nothing a lane still sends
 * for the old one is taken for the resumed request's. */
static void gen_park(gen *g)
{
    sd_gen *s = g->svc;
    sd_lanes_add_inflight(s->lanes, g->lane, -1);
    s->metrics->active--;
    SD_WARN("request %llu: lane %s died; waiting up to %d s for a lane to resume on after %zu tokens",
            (unsigned long long)g->id, sd_lanes_info(s->lanes, g->lane)->endpoint, s->o.resume_wait_s, g->n_out);
    g->lane = -1;
    g->id = s->next_id++;
    g->state = GEN_QUEUED;
    g->parked = true;
    gen **pp = &s->qhead; /* after the requests parked before it */
    while (*pp && (*pp)->parked) pp = &(*pp)->qnext;
    g->qnext = *pp;
    if (!g->qnext) s->qtail = g;
    *pp = g;
    s->nqueued++;
    s->metrics->queued = s->nqueued;
    struct timeval tv = {s->o.resume_wait_s, 0};
    evtimer_add(g->park, &tv);
}

static void on_park_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    gen *g = arg;
    gen_fail(g, 503, "server_error", "lane_down", "The verifier lane stopped answering and none came up within --resume-wait; retry later");
}

static void gen_drain_queue(sd_gen *s)
{
    int lane;
    if (s->stopping) return;
    while (s->qhead && (lane = sd_lanes_pick(s->lanes)) >= 0) gen_dispatch(s->qhead, lane);
}

/* ------------------------------------------------------------ token events */

/* Appends decoded text to the output (after stop matching). Returns true when
 * a stop string matched. */
static bool gen_text(gen *g, const char *t, size_t n)
{
    const char *out;
    size_t outlen;
    bool hit = sd_stop_feed(g->stop, t, n, &out, &outlen);
    if (outlen) evbuffer_add(g->text, out, outlen);
    return hit;
}

/* Streams the text and log-probabilities gathered since the last chunk. */
static void flush_chunk(gen *g)
{
    size_t n = evbuffer_get_length(g->text);
    bool lp = g->lp && sd_lp_pending(g->lp) > 0;
    if (!g->stream_started || (n == 0 && !lp)) return;
    if (g->p.responses) {
        const char *t = (const char *)evbuffer_pullup(g->text, -1);
        send_sse(g, sd_resp_event("response.output_text.delta",
                                  json_pack("{s:s, s:i, s:i, s:s%}", "item_id", g->msg_id,
                                            "output_index", 0, "content_index", 0, "delta", t, n), &g->seq));
        evbuffer_add(g->all, t, n);
        evbuffer_drain(g->text, n);
        return;
    }
    sd_api_spec spec;
    sd_api_result r = gen_result(g, NULL, &spec);
    r.logprobs = lp ? sd_lp_take(g->lp) : NULL;
    send_sse(g, sd_api_chunk_sse(g->p.kind, &r, (const char *)evbuffer_pullup(g->text, -1), n, false,
                                 g->p.include_usage));
    json_decref(r.logprobs);
    evbuffer_drain(g->text, n);
}

/* echo + logprobs: the prompt's entries (the first has no value) come before
 * the output's, once, with the first event that carries them. */
static void take_prompt_logprobs(gen *g, const Specd__TokenEvent *ev)
{
    if (!g->lp || !g->p.echo || g->prompt_lp_done || ev->n_prompt_logprobs + 1 != g->n_prompt) return;
    sd_lp_add(g->lp, g->prompt[0], NULL);
    for (size_t i = 0; i < ev->n_prompt_logprobs; i++) sd_lp_add(g->lp, g->prompt[i + 1], ev->prompt_logprobs[i]);
    g->prompt_lp_done = true;
}

static void take_stats(gen *g, const Specd__SpecStats *st)
{
    if (!st) return;
    g->steps = st->steps;
    g->draft_tokens = st->draft_tokens;
    g->accepted_tokens = st->accepted_tokens;
    g->n_accepted_at = st->n_accepted_at < 64 ? st->n_accepted_at : 64;
    if (g->n_accepted_at) memcpy(g->accepted_at, st->accepted_at, g->n_accepted_at * sizeof *g->accepted_at);
    const Specd__PipeStats *p = st->pipe;
    g->has_drafting = p != NULL;
    if (p)
        g->drafting = (sd_api_drafting){p->spans_used, p->spans_stale, p->spans_ready, p->spec_steps,
                                        p->wait_us,   p->draft_us,    p->step_us,     p->verify_us};
    const Specd__AdaptStats *a = st->adapt;
    g->has_adapt = a != NULL;
    if (a) {
        g->adapt.k_sum = a->k_sum;
        g->adapt.k_steps = a->k_steps;
        g->adapt.k_zero = a->k_zero;
        g->adapt.n_accept = a->n_accept < 16 ? a->n_accept : 16;
        if (g->adapt.n_accept) memcpy(g->adapt.accept, a->accept, g->adapt.n_accept * sizeof *a->accept);
    }
}

static void on_tokens(gen *g, const Specd__TokenEvent *ev)
{
    bool hit = false;
    take_stats(g, ev->stats);
    take_prompt_logprobs(g, ev);
    if (ev->n_tokens) {
        double now = sd_now_s();
        if (!g->t_first) g->t_first = now;
        else sd_metrics_observe_itl(g->svc->metrics, now - g->t_last);
        g->t_last = now;
    }
    for (size_t i = 0; i < ev->n_tokens && !hit; i++) {
        const char *t;
        size_t n;
        g->completion_tokens++;
        if (g->n_out == g->cap_out) {
            size_t cap = g->cap_out ? 2 * g->cap_out : 64;
            int32_t *p = realloc(g->out_ids, cap * sizeof *p);
            if (p) {
                g->out_ids = p;
                g->cap_out = cap;
            }
        }
        if (g->n_out < g->cap_out) g->out_ids[g->n_out++] = ev->tokens[i];
        if (g->lp && ev->n_logprobs == ev->n_tokens) sd_lp_add(g->lp, ev->tokens[i], ev->logprobs[i]);
        if (sd_tok_stream_push(g->dec, ev->tokens[i], &t, &n) == SD_OK && n) hit = gen_text(g, t, n);
    }
    if (hit) {
        send_cancel(g);
        flush_chunk(g);
        gen_end(g, "stop", NULL);
        return;
    }
    if (ev->finish == SPECD__FINISH_REASON__FINISH_NONE) {
        flush_chunk(g);
        return;
    }
    const char *t;
    size_t n;
    if (sd_tok_stream_flush(g->dec, &t, &n) == SD_OK && n) hit = gen_text(g, t, n);
    if (!hit) {
        sd_stop_flush(g->stop, &t, &n);
        if (n) evbuffer_add(g->text, t, n);
    }
    flush_chunk(g);
    switch (ev->finish) {
    case SPECD__FINISH_REASON__FINISH_STOP: gen_end(g, "stop", NULL); break;
    case SPECD__FINISH_REASON__FINISH_LENGTH: gen_end(g, hit ? "stop" : "length", NULL); break;
    default: gen_fail(g, 503, "server_error", "cancelled", "The verifier ended the request early"); break;
    }
}

static int error_status(const char *code)
{
    if (code && (!strcmp(code, "bad_request") || !strcmp(code, "context_length_exceeded"))) return 400;
    return 503;
}

static void gen_on_event(void *ud, int lane, const Specd__Envelope *env)
{
    sd_gen *s = ud;
    uint64_t id = env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT ? env->token_event->request_id
                                                                      : env->error->request_id;
    gen *g = gen_find(s, id);
    if (!g || g->lane != lane) {
        if (env->body_case == SPECD__ENVELOPE__BODY_ERROR) {
            SD_WARN("verifier error (request %llu): %s: %s", (unsigned long long)id, env->error->code, env->error->message);
        } else if (env->token_event->finish == SPECD__FINISH_REASON__FINISH_NONE) {
            /* Nobody waits for it (cancelled, failed over, router restarted): stop it. */
            Specd__Cancel c = SPECD__CANCEL__INIT;
            Specd__Envelope cenv = SPECD__ENVELOPE__INIT;
            char err[256];
            c.request_id = id;
            cenv.body_case = SPECD__ENVELOPE__BODY_CANCEL;
            cenv.cancel = &c;
            SD_DEBUG("tokens for unknown request %llu: cancelling it", (unsigned long long)id);
            if (sd_lanes_send(s->lanes, lane, &cenv, err, sizeof err) != SD_OK) SD_DEBUG("%s", err);
        }
        return;
    }
    if (env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT) {
        on_tokens(g, env->token_event);
        return;
    }
    char msg[400];
    snprintf(msg, sizeof msg, "verifier: %s", env->error->message ? env->error->message : "error");
    int st = error_status(env->error->code);
    gen_fail(g, st, st == 400 ? INVALID : "server_error", env->error->code, msg);
}

static void gen_on_lane_state(void *ud, int lane, sd_lane_state st)
{
    sd_gen *s = ud;
    if (st == SD_LANE_DOWN) {
        /* Failing a request may dispatch or end others: rescan from the head. */
        for (gen *g = s->live; g;) {
            if (g->state == GEN_RUNNING && g->lane == lane) {
                int other = s->stopping || g->n_out + 1 >= g->max_tokens ? -1 : sd_lanes_pick(s->lanes);
                if (other >= 0) gen_failover(g, other);
                else if (!s->stopping && g->park && g->n_out + 1 < g->max_tokens) gen_park(g);
                else gen_fail(g, 503, "server_error", "lane_down", "The verifier lane stopped answering; retry later");
                g = s->live;
            } else {
                g = g->next;
            }
        }
        if (sd_lanes_all_down(s->lanes)) /* those that produced nothing fail; the parked wait */
            for (gen *g = s->qhead; g;) {
                gen *next = g->qnext;
                if (!g->parked) gen_fail(g, 503, "server_error", "no_healthy_lane", "No verifier lane is available; retry later");
                g = next;
            }
    }
    gen_drain_queue(s);
}

void sd_gen_fail_all(sd_gen *s, int status, const char *msg)
{
    s->stopping = true;
    while (s->live) {
        send_cancel(s->live);
        gen_fail(s->live, status, "server_error", "shutdown", msg);
    }
}

void sd_gen_drain(sd_gen *s)
{
    s->draining = true;
}

size_t sd_gen_live(const sd_gen *s)
{
    size_t n = 0;
    for (const gen *g = s->live; g; g = g->next) n++;
    return n;
}

/* ------------------------------------------------------------ admission */

/* Fills g->prompt from the request: chat template, prompt text or ids. */
static sd_status tokenize(sd_gen *s, gen *g, sd_api_err *e)
{
    return sd_prompt_tokens(s->tok, s->chat, s->vocab, &g->p, &g->prompt, &g->n_prompt, e);
}

static sd_status check_request(sd_gen *s, gen *g, sd_api_err *e)
{
    if (g->p.model && !sd_gen_served_name(s, g->p.model))
        return sd_api_fail(e, 404, INVALID, "model", "model_not_found",
                           "The model '%s' does not exist; this server serves '%s'", g->p.model, s->o.model_name);
    for (size_t i = 0; i < g->p.n_stop_ids; i++)
        if (g->p.stop_ids[i] >= s->vocab)
            return sd_api_fail(e, 400, INVALID, "stop_token_ids", NULL, "'stop_token_ids' id %d is out of range "
                               "(vocabulary size %d)", (int)g->p.stop_ids[i], s->vocab);
    sd_status st = tokenize(s, g, e);
    uint32_t ctx = 0;
    if (st == SD_OK && sd_lanes_any_up(s->lanes, &ctx) && ctx) st = fit_context(g, ctx, e);
    return st;
}

static gen *gen_new(sd_gen *s, struct evhttp_request *req)
{
    gen *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->svc = s;
    g->http = req;
    g->lane = -1;
    g->id = s->next_id++;
    g->created = time(NULL);
    g->t0 = sd_now_s();
    g->text = evbuffer_new();
    if (!g->text) {
        free(g);
        return NULL;
    }
    return g;
}

/* Creates the per-request machinery once the request is valid. */
/* echo: the output starts with the prompt's text (as given, or the ids
 * decoded); stop strings apply to the generated text only. */
static sd_status echo_prompt(sd_gen *s, gen *g, sd_api_err *e)
{
    if (g->p.prompt) {
        evbuffer_add(g->text, g->p.prompt, strlen(g->p.prompt));
        return SD_OK;
    }
    char *text = NULL, err[256];
    size_t n = 0;
    if (sd_tok_decode(s->tok, g->prompt, g->n_prompt, true, &text, &n, err, sizeof err) != SD_OK)
        return sd_api_fail(e, 400, INVALID, "prompt", NULL, "the prompt could not be decoded for 'echo': %s", err);
    evbuffer_add(g->text, text, n);
    free(text);
    return SD_OK;
}

static sd_status gen_prepare(sd_gen *s, gen *g, sd_api_err *e)
{
    unsigned long long h = (unsigned long long)(g->id * 0x9E3779B97F4A7C15ULL);
    if (g->p.responses) {
        snprintf(g->cid, sizeof g->cid, "resp_%016llx", h);
        snprintf(g->msg_id, sizeof g->msg_id, "msg_%016llx", h ^ 0x5bd1e995ULL);
        if (g->p.stream && !(g->all = evbuffer_new()))
            return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    } else {
        snprintf(g->cid, sizeof g->cid, "%s-%016llx", g->p.kind == SD_API_CHAT ? "chatcmpl" : "cmpl", h);
    }
    if (!g->p.seed_set) g->p.sampling.seed = g->id * 0xD1B54A32D192ED03ULL ^ (uint64_t)g->t0;
    g->dec = sd_tok_stream_new(s->tok, true);
    g->stop = sd_stop_new((const char *const *)g->p.stop, g->p.n_stop);
    if (g->p.logprobs && !(g->lp = sd_lp_new(s->tok, g->p.kind, g->p.top_logprobs)))
        return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (s->o.request_timeout_s > 0) g->timer = evtimer_new(s->base, on_timeout, g);
    if (s->o.resume_wait_s > 0) g->park = evtimer_new(s->base, on_park_timeout, g);
    if (!g->dec || !g->stop || (s->o.request_timeout_s > 0 && !g->timer) || (s->o.resume_wait_s > 0 && !g->park))
        return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (g->timer) {
        double t = s->o.request_timeout_s;
        struct timeval tv = {(time_t)t, (suseconds_t)((t - (double)(time_t)t) * 1e6)};
        evtimer_add(g->timer, &tv);
    }
    return g->p.echo ? echo_prompt(s, g, e) : SD_OK;
}

/* Admits a valid request: dispatch now, queue, or refuse (429 / 503). */
static void gen_admit(sd_gen *s, gen *g)
{
    sd_api_err e;
    if (sd_lanes_all_down(s->lanes)) {
        sd_api_fail(&e, 503, "server_error", NULL, "no_healthy_lane", "No verifier lane is available; retry later");
        sd_reply_error(g->http, &e, s->metrics);
        gen_free(g);
        return;
    }
    int lane = s->qhead ? -1 : sd_lanes_pick(s->lanes);
    if (lane < 0 && s->nqueued >= s->o.max_queue) {
        sd_api_fail(&e, 429, "rate_limit_error", NULL, "overloaded",
                    "The server is overloaded (%d requests waiting); retry later", s->nqueued);
        sd_reply_error(g->http, &e, s->metrics);
        gen_free(g);
        return;
    }
    gen_link(s, g);
    struct evhttp_connection *conn = evhttp_request_get_connection(g->http);
    evhttp_connection_set_closecb(conn, on_client_close, g);
    /* the connection's short timeout (reading a request, idling) must not cut a
     * generation: --request-timeout bounds it; back to short once answered */
    evhttp_connection_set_timeout(conn, s->o.request_timeout_s > 0 ? (int)s->o.request_timeout_s + 5 : 3600);
    evhttp_request_set_on_complete_cb(g->http, on_answered, s);
    watch_client(g);
    if (lane >= 0) {
        gen_dispatch(g, lane);
        return;
    }
    g->state = GEN_QUEUED;
    if (s->qtail) s->qtail->qnext = g;
    else s->qhead = g;
    s->qtail = g;
    s->nqueued++;
    s->metrics->queued = s->nqueued;
}

void sd_gen_handle(sd_gen *s, struct evhttp_request *req, sd_api_kind kind)
{
    sd_api_err e;
    struct evbuffer *in = evhttp_request_get_input_buffer(req);
    size_t len = evbuffer_get_length(in);
    if (s->draining) {
        evhttp_add_header(evhttp_request_get_output_headers(req), "Retry-After", "1");
        evhttp_add_header(evhttp_request_get_output_headers(req), "Connection", "close");
        sd_api_fail(&e, 503, "server_error", NULL, "shutting_down", "The server is shutting down; retry on another");
        sd_reply_error(req, &e, s->metrics);
        return;
    }
    if (len > s->o.max_body) {
        sd_api_fail(&e, 413, INVALID, NULL, "request_too_large",
                    "The request body of %zu bytes exceeds the limit of %zu bytes", len, s->o.max_body);
        sd_reply_error(req, &e, s->metrics);
        return;
    }
    gen *g = gen_new(s, req);
    if (!g) {
        sd_api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        sd_reply_error(req, &e, s->metrics);
        return;
    }
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    sd_status ps = kind == SD_API_RESPONSES ? sd_api_parse_responses(body, len, &g->p, &e)
                                            : sd_api_parse(kind, body, len, &g->p, &e);
    if (ps != SD_OK || check_request(s, g, &e) != SD_OK ||
        gen_prepare(s, g, &e) != SD_OK) {
        sd_reply_error(req, &e, s->metrics);
        gen_free(g);
        return;
    }
    gen_admit(s, g);
}

/* ------------------------------------------------------------ life */

sd_status sd_gen_new(const sd_gen_opts *opts, const sd_gen_env *env, sd_gen **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_gen *s = calloc(1, sizeof *s);
    if (!s) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    s->o = *opts;
    s->base = env->base;
    s->tok = env->tok;
    s->vocab = sd_tok_vocab_size(env->tok);
    s->chat = env->chat;
    s->metrics = env->metrics;
    s->next_id = ((uint64_t)time(NULL) << 20) | 1;
    sd_lanes_opts lo = {s->o.health_interval_ms, s->o.max_missed, s->o.lane_capacity, env->curve};
    sd_lane_cbs cbs = {gen_on_event, gen_on_lane_state, s};
    sd_status st = sd_lanes_new(s->base, env->zctx, s->o.verifiers, s->o.n_verifiers, &lo, cbs, &s->lanes, err,
                                errlen);
    if (st != SD_OK) {
        free(s);
        return st;
    }
    *out = s;
    return SD_OK;
}

const char *sd_gen_served_name(const sd_gen *s, const char *name)
{
    if (!name) return NULL;
    if (!strcmp(name, s->o.model_name)) return s->o.model_name;
    for (size_t i = 0; i < s->o.n_aliases; i++)
        if (!strcmp(name, s->o.aliases[i])) return s->o.aliases[i];
    return NULL;
}

const sd_lanes *sd_gen_lanes(const sd_gen *s)
{
    return s->lanes;
}

void sd_gen_free(sd_gen *s)
{
    if (!s) return;
    if (s->live) sd_gen_fail_all(s, 503, "The server is shutting down");
    sd_lanes_free(s->lanes);
    free(s);
}
