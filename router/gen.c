/* gen.c — generation in the router (see gen.h).
 *
 * A request (job) is answered by n choices, each its own generation (gen)
 * on the verifier with seed + index: queued, dispatched to a lane, failed
 * over, parked and cancelled on its own; the choices of one request go to
 * one lane when it has room, where they share the prompt's KV. Ending
 * paths, all through job_end(): every choice finished (gen_finish), stop
 * string (Cancel sent to the verifier), error event / lane down (503; the
 * other choices cancelled), timeout (Cancel, 504), client disconnect
 * (Cancel; the detached evhttp request is released). Everything runs on the
 * event-loop thread. */
#include "gen.h"

#include "conncap.h"

#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/event.h>
#include <event2/http.h>
#include <event2/keyvalq_struct.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "client_watch.h"
#include "clock.h"
#include "convert.h"
#include "discovery.h"
#include "log.h"
#include "logprobs.h"
#include "prompt.h"
#include "provenance.h"
#include "reply.h"
#include "responses.h"
#include "stop_match.h"
#include "tool_calls.h"

#define INVALID "invalid_request_error"

typedef enum { GEN_QUEUED = 0, GEN_RUNNING = 1, GEN_DONE = 2 } gen_state;

struct job;

/* One choice's generation on a verifier. Owned by its job. */
typedef struct gen {
    struct gen *prev, *next; /* all live generations (sd_gen.live) */
    struct gen *qnext;       /* FIFO of waiting generations */
    struct job *j;
    unsigned index; /* choice index; samples with the request's seed + index */
    uint64_t id;    /* the verifier's request id */
    bool linked;    /* in sd_gen.live */
    double t_last;  /* monotonic time of the last token event (0: none yet) */
    gen_state state;
    int lane; /* -1 while queued */
    unsigned completion_tokens;
    unsigned cached_tokens; /* prompt tokens the verifier took from its prefix cache */
    int32_t *out_ids;       /* the output so far (failover resumes after it on another lane) */
    size_t n_out, cap_out;
    sd_tok_stream *dec;
    sd_stop *stop;
    sd_tool_split split;   /* tools: the text from "<tool_call>" on is held (tool_calls.h) */
    json_t *tool_calls;    /* ... and parsed into these at the end (NULL: none) */
    struct evbuffer *text; /* non-stream: all output; stream: this event's output */
    sd_lp *lp;             /* logprobs: the entries not yet sent (non-stream: all) */
    sd_prov prov;          /* speculative.provenance: likewise, each token's source (provenance.h) */
    double cum_logprob;    /* best_of: the output tokens' summed log-probabilities */
    bool prompt_lp_done;   /* echo + logprobs: the prompt's entries are in lp */
    struct event *park;    /* --resume-wait: how long a generation whose lane died waits for another */
    bool parked;           /* waiting (first in the queue) for a lane to resume on */
    const char *finish;    /* "stop" / "length" once finished */
    uint64_t steps, draft_tokens, accepted_tokens, accepted_at[64];
    size_t n_accepted_at;
    sd_pipe_stats drafting; /* valid when has_drafting */
    bool has_drafting;
    sd_api_adapt adapt; /* valid when has_adapt */
    bool has_adapt;
} gen;

/* One generation request, from validation to its last byte. */
typedef struct job {
    struct sd_gen *svc;
    char cid[48];    /* "cmpl-…" / "chatcmpl-…" / "resp_…" */
    char msg_id[24]; /* /v1/responses: the output message's id "msg_…" */
    time_t created;
    double t0;         /* monotonic start */
    double t_first;    /* monotonic time of the first token (0: none yet) */
    double t_dispatch; /* monotonic time of the first dispatch to a lane (0: not yet) */
    struct evhttp_request *http;
    bool client_gone;    /* the client went away: nothing more to send */
    bool detached;       /* libevent detached http from its (closed) connection */
    sd_cwatch *watch;    /* hang-up watch on the client's socket */
    struct event *timer; /* request timeout */
    bool stream_started;
    bool admitted; /* counted in sd_gen.n_jobs */
    sd_api_req p;
    int32_t *prompt;
    size_t n_prompt;
    unsigned max_tokens;
    struct evbuffer *all; /* /v1/responses streaming: all output (for the .done events) */
    unsigned seq;         /* /v1/responses streaming: the next event's sequence_number */
    gen **gens;           /* p.best_of choices */
    unsigned n_gens, n_done;
} job;

struct sd_gen {
    sd_gen_opts o;
    struct event_base *base;
    sd_lanes *lanes;
    sd_disc *disc; /* lanes from DNS, or NULL */
    const sd_tok *tok;
    int vocab;
    const sd_chat *chat;
    sd_metrics *metrics;
    struct sd_conncap *const *conncap; /* sd_gen_env's */
    gen *live;                         /* list of live generations */
    gen *qhead, *qtail;                /* waiting generations */
    int nqueued;
    size_t n_jobs; /* requests admitted and not finished */
    uint64_t next_id;
    bool stopping; /* shutting down: dispatch nothing more */
    bool draining; /* shutting down: accept nothing more */
};

static void gen_drain_queue(sd_gen *s);

/* ------------------------------------------------------------ bookkeeping */

static void gen_link(sd_gen *s, gen *g)
{
    g->next = s->live;
    if (s->live) s->live->prev = g;
    s->live = g;
    g->linked = true;
}

static void gen_unlink(sd_gen *s, gen *g)
{
    if (!g->linked) return;
    if (g->prev) g->prev->next = g->next;
    else s->live = g->next;
    if (g->next) g->next->prev = g->prev;
    g->prev = g->next = NULL;
    g->linked = false;
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

static void queue_push(sd_gen *s, gen *g)
{
    g->state = GEN_QUEUED;
    if (s->qtail) s->qtail->qnext = g;
    else s->qhead = g;
    s->qtail = g;
    s->nqueued++;
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
    if (g->park) event_free(g->park);
    free(g->out_ids);
    sd_tok_stream_free(g->dec);
    sd_stop_free(g->stop);
    sd_tool_split_free(&g->split);
    json_decref(g->tool_calls);
    if (g->text) evbuffer_free(g->text);
    sd_lp_free(g->lp);
    sd_prov_clear(&g->prov);
    free(g);
}

static void job_free(job *j)
{
    if (!j) return;
    for (unsigned i = 0; i < j->n_gens; i++) gen_free(j->gens[i]);
    free(j->gens);
    if (j->timer) event_free(j->timer);
    sd_cwatch_free(j->watch);
    sd_api_req_clear(&j->p);
    free(j->prompt);
    if (j->all) evbuffer_free(j->all);
    free(j);
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
    if (sd_lanes_send(g->j->svc->lanes, g->lane, &env, err, sizeof err) != SD_OK)
        SD_WARN("request %llu: cancel not sent: %s", (unsigned long long)g->id, err);
}

/* Detaches g from the server: queue, lane accounting, list. */
static void gen_detach(gen *g)
{
    sd_gen *s = g->j->svc;
    if (g->state == GEN_QUEUED) queue_remove(s, g);
    if (g->state == GEN_RUNNING) {
        sd_lanes_add_inflight(s->lanes, g->lane, -1);
        s->metrics->active--;
    }
    if (g->park) evtimer_del(g->park);
    gen_unlink(s, g);
    g->state = GEN_DONE;
}

/* Detaches the whole request: its generations, the close callback. */
static void job_detach(job *j)
{
    for (unsigned i = 0; i < j->n_gens; i++) gen_detach(j->gens[i]);
    if (j->admitted) j->svc->n_jobs--;
    j->admitted = false;
    sd_cwatch_stop(j->watch);
    if (j->http && !j->detached) {
        struct evhttp_connection *c = evhttp_request_get_connection(j->http);
        if (c) evhttp_connection_set_closecb(c, NULL, NULL);
    }
}

/* The speculation statistics of a request: its choices' summed. */
typedef struct job_stats {
    uint64_t accepted_at[64];
    size_t n_accepted_at;
    sd_pipe_stats drafting;
    sd_api_adapt adapt;
    bool has_drafting, has_adapt;
    unsigned completion_tokens;
} job_stats;

/* Sums the choices' statistics into *spec (pointing into *t). The
 * acceptance estimate is the first choice's that has one. */
static void job_sum(const job *j, sd_api_spec *spec, job_stats *t)
{
    memset(t, 0, sizeof *t);
    *spec = (sd_api_spec){0};
    for (unsigned i = 0; i < j->n_gens; i++) {
        const gen *g = j->gens[i];
        spec->steps += g->steps;
        spec->draft_tokens += g->draft_tokens;
        spec->accepted_tokens += g->accepted_tokens;
        t->completion_tokens += g->completion_tokens;
        for (size_t k = 0; k < g->n_accepted_at; k++) t->accepted_at[k] += g->accepted_at[k];
        if (g->n_accepted_at > t->n_accepted_at) t->n_accepted_at = g->n_accepted_at;
        if (g->has_drafting) sd_pipe_stats_add(&t->drafting, &g->drafting, 1);
        t->has_drafting |= g->has_drafting;
        if (g->has_adapt && !t->has_adapt) t->adapt = g->adapt;
        else if (g->has_adapt) {
            t->adapt.k_sum += g->adapt.k_sum;
            t->adapt.k_steps += g->adapt.k_steps;
            t->adapt.k_zero += g->adapt.k_zero;
        }
        t->has_adapt |= g->has_adapt;
    }
    spec->accepted_at = t->accepted_at;
    spec->n_accepted_at = t->n_accepted_at;
    spec->drafting = t->has_drafting ? &t->drafting : NULL;
    spec->adapt = t->has_adapt ? &t->adapt : NULL;
}

static const char *job_model(const job *j)
{
    const char *name = j->p.model ? sd_gen_served_name(j->svc, j->p.model) : NULL;
    return name ? name : j->svc->o.model_name;
}

/* What the whole request reports (usage, summed statistics). */
static sd_api_result job_result(const job *j, const char *finish, sd_api_spec *spec, job_stats *t)
{
    job_sum(j, spec, t);
    sd_api_result r = {j->cid,
                       job_model(j),
                       (long long)j->created,
                       finish,
                       (unsigned)j->n_prompt,
                       t->completion_tokens,
                       spec,
                       NULL,
                       0,
                       j->gens[0]->cached_tokens,
                       NULL,
                       NULL};
    return r;
}

/* What one choice reports in a stream chunk. */
static sd_api_result gen_result(const gen *g, const char *finish, sd_api_spec *spec)
{
    spec->steps = g->steps;
    spec->draft_tokens = g->draft_tokens;
    spec->accepted_tokens = g->accepted_tokens;
    spec->accepted_at = g->accepted_at;
    spec->n_accepted_at = g->n_accepted_at;
    spec->drafting = g->has_drafting ? &g->drafting : NULL;
    spec->adapt = g->has_adapt ? &g->adapt : NULL;
    const job *j = g->j;
    sd_api_result r = {j->cid,
                       job_model(j),
                       (long long)j->created,
                       finish,
                       (unsigned)j->n_prompt,
                       g->completion_tokens,
                       spec,
                       NULL,
                       g->index,
                       g->cached_tokens,
                       NULL,
                       NULL};
    return r;
}

static void send_sse(job *j, char *event)
{
    if (!event) return;
    struct evbuffer *b = evbuffer_new();
    if (b) {
        evbuffer_add(b, event, strlen(event));
        evhttp_send_reply_chunk(j->http, b);
        evbuffer_free(b);
    }
    free(event);
}

/* /v1/responses (one choice): what the response reports now. */
static sd_resp resp_of(const job *j, const char *finish, bool streamed)
{
    struct evbuffer *b = streamed ? j->all : j->gens[0]->text;
    const char *text = b && evbuffer_get_length(b) ? (const char *)evbuffer_pullup(b, -1) : NULL;
    sd_resp r = {j->cid,
                 j->msg_id,
                 job_model(j),
                 (long long)j->created,
                 !finish                     ? "in_progress"
                 : !strcmp(finish, "length") ? "incomplete"
                                             : "completed",
                 finish && !strcmp(finish, "length"),
                 (unsigned)j->n_prompt,
                 j->gens[0]->completion_tokens,
                 j->gens[0]->cached_tokens,
                 &j->p,
                 text ? text : "",
                 text ? evbuffer_get_length(b) : 0,
                 j->gens[0]->tool_calls,
                 streamed};
    return r;
}

/* /v1/responses streaming: the events that open the stream, and those that
 * close it (finish: the generation's end). */
static void resp_open(job *j)
{
    sd_resp r = resp_of(j, NULL, true);
    send_sse(j, sd_resp_event("response.created", json_pack("{s:o}", "response", sd_resp_object(&r)), &j->seq));
    send_sse(j, sd_resp_event("response.in_progress", json_pack("{s:o}", "response", sd_resp_object(&r)), &j->seq));
    send_sse(j, sd_resp_event("response.output_item.added",
                              json_pack("{s:i, s:o}", "output_index", 0, "item", sd_resp_message(&r, false)), &j->seq));
    send_sse(j, sd_resp_event("response.content_part.added",
                              json_pack("{s:s, s:i, s:i, s:{s:s, s:s, s:[]}}", "item_id", r.msg_id, "output_index", 0,
                                        "content_index", 0, "part", "type", "output_text", "text", "", "annotations"),
                              &j->seq));
}

static void resp_close(job *j, const char *finish)
{
    sd_resp r = resp_of(j, finish, true);
    send_sse(j, sd_resp_event("response.output_text.done",
                              json_pack("{s:s, s:i, s:i, s:s%}", "item_id", r.msg_id, "output_index", 0,
                                        "content_index", 0, "text", r.text, r.len),
                              &j->seq));
    send_sse(j, sd_resp_event("response.content_part.done",
                              json_pack("{s:s, s:i, s:i, s:{s:s, s:s%, s:[]}}", "item_id", r.msg_id, "output_index", 0,
                                        "content_index", 0, "part", "type", "output_text", "text", r.text, r.len,
                                        "annotations"),
                              &j->seq));
    send_sse(j, sd_resp_event("response.output_item.done",
                              json_pack("{s:i, s:o}", "output_index", 0, "item", sd_resp_message(&r, true)), &j->seq));
    size_t i;
    json_t *call;
    json_array_foreach((json_t *)r.tool_calls, i, call)
    { /* each call: its item, its arguments whole */
        int at = (int)i + 1;
        json_t *item = sd_resp_call(call, true);
        json_t *id = json_object_get(item, "id"), *args = json_object_get(item, "arguments");
        send_sse(j, sd_resp_event("response.output_item.added",
                                  json_pack("{s:i, s:o}", "output_index", at, "item", sd_resp_call(call, false)),
                                  &j->seq));
        send_sse(j, sd_resp_event("response.function_call_arguments.delta",
                                  json_pack("{s:O, s:i, s:O}", "item_id", id, "output_index", at, "delta", args),
                                  &j->seq));
        send_sse(j, sd_resp_event("response.function_call_arguments.done",
                                  json_pack("{s:O, s:i, s:O}", "item_id", id, "output_index", at, "arguments", args),
                                  &j->seq));
        send_sse(j, sd_resp_event("response.output_item.done",
                                  json_pack("{s:i, s:o}", "output_index", at, "item", item), &j->seq));
    }
    send_sse(j, sd_resp_event(r.length ? "response.incomplete" : "response.completed",
                              json_pack("{s:o}", "response", sd_resp_object(&r)), &j->seq));
}

/* best_of: the choices in the order they are returned, likeliest first
 * (ties: lower index); otherwise as generated. */
static void rank_choices(const job *j, gen **order)
{
    for (unsigned i = 0; i < j->n_gens; i++) order[i] = j->gens[i];
    if (j->p.best_of == j->p.n) return;
    for (unsigned i = 1; i < j->n_gens; i++) { /* insertion sort: stable */
        gen *g = order[i];
        unsigned k = i;
        for (; k > 0 && order[k - 1]->cum_logprob < g->cum_logprob; k--) order[k] = order[k - 1];
        order[k] = g;
    }
}

/* The whole non-streamed answer of a successful request. */
static char *final_body(job *j)
{
    if (j->p.responses) {
        sd_resp r = resp_of(j, j->gens[0]->finish, false);
        json_t *o = sd_resp_object(&r);
        char *body = json_dumps(o, JSON_COMPACT | JSON_REAL_PRECISION(8));
        json_decref(o);
        return body;
    }
    gen **order = calloc(j->n_gens, sizeof *order);
    sd_api_choice *ch = calloc(j->p.n, sizeof *ch);
    char *body = NULL;
    if (order && ch) {
        rank_choices(j, order);
        for (unsigned i = 0; i < j->p.n; i++) {
            gen *g = order[i];
            ch[i] = (sd_api_choice){(const char *)evbuffer_pullup(g->text, -1),
                                    evbuffer_get_length(g->text),
                                    g->finish,
                                    g->lp ? sd_lp_take(g->lp) : NULL,
                                    g->tool_calls,
                                    g->prov.tokens ? sd_prov_take(&g->prov) : NULL};
        }
        sd_api_spec spec;
        job_stats t;
        sd_api_result r = job_result(j, NULL, &spec, &t);
        body = sd_api_response_json(j->p.kind, &r, ch, j->p.n);
        for (unsigned i = 0; i < j->p.n; i++) {
            json_decref(ch[i].logprobs);
            json_decref(ch[i].provenance);
        }
    }
    free(order);
    free(ch);
    return body;
}

/* A streamed request's error: the API's error event, then the end. */
static void stream_error(job *j, const sd_api_err *e)
{
    if (j->p.responses) {
        send_sse(j, sd_resp_event("error",
                                  json_pack("{s:s, s:s, s:o}", "code", e->code[0] ? e->code : e->type, "message",
                                            e->message, "param", e->param[0] ? json_string(e->param) : json_null()),
                                  &j->seq));
        return;
    }
    char *s = sd_api_error_json(e);
    size_t n = s ? strlen(s) + 9 : 0;
    char *ev = s ? malloc(n) : NULL;
    if (ev) snprintf(ev, n, "data: %s\n\n", s);
    free(s);
    send_sse(j, ev);
    send_sse(j, strdup("data: [DONE]\n\n"));
}

/* The end of a successful stream: the Responses closing events, or usage
 * (include_usage) and [DONE]. Each choice's final chunk went out as it finished. */
static void stream_end(job *j)
{
    if (j->p.responses) {
        resp_close(j, j->gens[0]->finish);
        return;
    }
    if (j->p.include_usage) {
        sd_api_spec spec;
        job_stats t;
        sd_api_result r = job_result(j, NULL, &spec, &t);
        send_sse(j, sd_api_usage_sse(j->p.kind, &r));
    }
    send_sse(j, strdup("data: [DONE]\n\n"));
}

static void job_observe(job *j)
{
    double now = sd_now_s();
    double queue = j->t_dispatch ? j->t_dispatch - j->t0 : now - j->t0;
    unsigned tokens = 0;
    for (unsigned i = 0; i < j->n_gens; i++) tokens += j->gens[i]->completion_tokens;
    sd_metrics_req mr = {(unsigned)j->n_prompt,
                         tokens,
                         now - j->t0,
                         j->t_first ? j->t_first - j->t0 : -1,
                         queue,
                         j->gens[0]->finish ? j->gens[0]->finish : "stop"};
    sd_metrics_observe(j->svc->metrics, &mr);
}

/* Ends the request: error (e != NULL) or every choice finished. Frees j. */
static void job_end(job *j, const sd_api_err *e)
{
    sd_gen *s = j->svc;
    job_detach(j);
    int status = e ? e->status : 200;
    if (j->client_gone) {
        status = 499;
        if (j->stream_started) evhttp_send_reply_end(j->http); /* frees the detached request */
        else evhttp_send_reply(j->http, 499, "Client Closed Request", NULL);
    } else if (j->stream_started) {
        if (e) stream_error(j, e);
        else stream_end(j);
        evhttp_send_reply_end(j->http);
    } else if (e) {
        sd_reply_error(j->http, e, s->metrics);
        status = 0; /* counted by sd_reply_error */
    } else {
        char *body = final_body(j);
        if (body) {
            sd_reply_json(j->http, 200, body, s->metrics);
        } else {
            sd_api_err oom;
            sd_api_fail(&oom, 500, "server_error", NULL, NULL, "out of memory");
            sd_reply_error(j->http, &oom, s->metrics);
        }
        status = 0; /* counted by sd_reply_json */
        free(body);
    }
    if (status) sd_metrics_count_status(s->metrics, status);
    if (!e && !j->client_gone) job_observe(j);
    job_free(j);
    gen_drain_queue(s);
}

/* Ends the request with an error; its running choices are cancelled on
 * their verifiers (but `except`, whose verifier ended it). */
static void job_abort(job *j, const gen *except, const sd_api_err *e)
{
    for (unsigned i = 0; i < j->n_gens; i++)
        if (j->gens[i] != except) send_cancel(j->gens[i]);
    job_end(j, e);
}

static void job_fail(job *j, const gen *except, int status, const char *type, const char *code, const char *msg)
{
    sd_api_err e;
    sd_api_fail(&e, status, type, NULL, code, "%s", msg);
    job_abort(j, except, &e);
}

/* Streams the final chunk of a finished choice (its finish_reason, its own
 * statistics). */
static void send_finish_chunk(gen *g)
{
    job *j = g->j;
    if (!j->stream_started || j->client_gone || j->p.responses) return;
    sd_api_spec spec;
    sd_api_result r = gen_result(g, g->finish, &spec);
    send_sse(j, sd_api_chunk_sse(j->p.kind, &r, "", 0, false, j->p.include_usage));
}

static void flush_chunk(gen *g);

/* With tools, at the end of a choice: the held text becomes its tool calls
 * (streamed: one chunk with delta.tool_calls; finish_reason "tool_calls",
 * "stop" for a named function), or content after all. Returns the finish
 * reason. */
static const char *tools_end(gen *g, const char *finish)
{
    job *j = g->j;
    if (!j->p.tools) return finish;
    sd_buf rest = {0};
    char base[80];
    const char *dash = strchr(j->cid, '-');
    snprintf(base, sizeof base, "call_%s_%u", dash ? dash + 1 : j->cid, g->index);
    g->tool_calls = sd_tool_split_end(&g->split, base, &rest);
    if (rest.len) evbuffer_add(g->text, rest.p, rest.len);
    sd_buf_free(&rest);
    flush_chunk(g);
    if (!g->tool_calls) return finish;
    if (j->stream_started && !j->client_gone && !j->p.responses) { /* Responses: resp_close's events */
        sd_api_spec spec;
        sd_api_result r = gen_result(g, NULL, &spec);
        r.tool_calls = g->tool_calls;
        send_sse(j, sd_api_chunk_sse(j->p.kind, &r, "", 0, false, j->p.include_usage));
    }
    return j->p.tool_name ? "stop" : "tool_calls"; /* a named function: "stop", as OpenAI */
}

/* Choice g finished normally; the request ends with its last choice. */
static void gen_finish(gen *g, const char *finish)
{
    job *j = g->j;
    g->finish = tools_end(g, finish);
    gen_detach(g);
    send_finish_chunk(g);
    if (++j->n_done == j->n_gens) job_end(j, NULL);
    else gen_drain_queue(j->svc);
}
/* ------------------------------------------------------------ callbacks */

static void on_client_close(struct evhttp_connection *c, void *arg)
{
    (void)c;
    job *j = arg;
    SD_INFO("request %s: client disconnected; cancelling", j->cid);
    j->client_gone = true;
    j->detached = true;
    job_abort(j, NULL, NULL);
}

/* The answer is written: the connection idles (keep-alive) on the short timeout again. */
static void on_answered(struct evhttp_request *req, void *arg)
{
    const sd_gen *s = arg;
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    if (c) evhttp_connection_set_timeout(c, s->o.header_timeout_s);
    sd_cwatch_answered(req);
}

/* The client hung up before its answer was written (client_watch.h). */
static void on_client_gone(void *arg)
{
    job *j = arg;
    SD_INFO("request %s: client hung up; cancelling", j->cid);
    j->client_gone = true;
    job_abort(j, NULL, NULL);
}

static void watch_client(job *j)
{
    /* unwatched when that fails (no socket, no memory): the request still runs */
    sd_cwatch_new(j->svc->base, j->http, &j->stream_started, on_client_gone, j, &j->watch, NULL, 0);
}

static void on_timeout(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    job *j = arg;
    bool ran = false;
    for (unsigned i = 0; i < j->n_gens; i++) ran |= j->gens[i]->state != GEN_QUEUED;
    SD_WARN("request %s: timed out", j->cid);
    job_fail(j, NULL, ran ? 504 : 503, "server_error", "timeout",
             ran ? "The request timed out" : "Timed out waiting for a free verifier lane");
}

/* ------------------------------------------------------------ submit */

/* Checks prompt + max_tokens against ctx and fixes j->max_tokens. */
static sd_status fit_context(job *j, uint32_t ctx, sd_api_err *e)
{
    const char *pp = j->p.kind == SD_API_CHAT ? "messages" : "prompt";
    if (j->n_prompt >= ctx)
        return sd_api_fail(e, 400, INVALID, pp, "context_length_exceeded",
                           "This model's maximum context length is %u tokens, but the prompt has %zu tokens", ctx,
                           j->n_prompt);
    unsigned room = ctx - (unsigned)j->n_prompt;
    if (j->p.max_tokens < 0) {
        unsigned d = (unsigned)j->svc->o.default_max_tokens;
        j->max_tokens = d < room ? d : room;
        return SD_OK;
    }
    if ((unsigned)j->p.max_tokens > room)
        return sd_api_fail(e, 400, INVALID, "max_tokens", "context_length_exceeded",
                           "This model's maximum context length is %u tokens. However, you requested %zu tokens "
                           "(%zu in the %s, %d for max_tokens). Please reduce the length of the %s or max_tokens",
                           ctx, j->n_prompt + (size_t)j->p.max_tokens, j->n_prompt, pp, j->p.max_tokens, pp);
    j->max_tokens = (unsigned)j->p.max_tokens;
    return SD_OK;
}

/* best_of: the choices are ranked by their log-probabilities */
static bool ranked(const job *j) { return j->p.best_of != j->p.n; }

static sd_status submit(gen *g, int lane, char *err, size_t errlen)
{
    job *j = g->j;
    Specd__SamplingParams sp;
    Specd__SpecParams spec = SPECD__SPEC_PARAMS__INIT;
    Specd__Submit sub = SPECD__SUBMIT__INIT;
    Specd__LogprobParams lp = SPECD__LOGPROB_PARAMS__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    sd_sampling sampling = j->p.sampling;
    sampling.seed += g->index;
    sd_pb_sampling_set(&sampling, &sp);
    if (j->p.logprobs || ranked(j)) {
        lp.top = j->p.logprobs ? (uint32_t)j->p.top_logprobs : 0;
        lp.prompt = j->p.logprobs && j->p.echo && !g->prompt_lp_done && g->n_out == 0;
        sub.logprobs = &lp;
    }
    spec.enabled = j->p.spec_enabled;
    spec.num_draft = j->p.num_draft;
    spec.verify = (Specd__VerifyMode)j->p.verify;
    sub.request_id = g->id;
    sub.prompt_ids = j->prompt;
    sub.n_prompt_ids = j->n_prompt;
    sub.sampling = &sp;
    sub.max_tokens = j->max_tokens;
    sub.stop_ids = j->p.stop_ids;
    sub.n_stop_ids = j->p.n_stop_ids;
    sub.ignore_eos = j->p.ignore_eos;
    sub.spec = &spec;
    sub.resume_ids = g->out_ids;
    sub.n_resume_ids = g->n_out;
    env.body_case = SPECD__ENVELOPE__BODY_SUBMIT;
    env.submit = &sub;
    return sd_lanes_send(j->svc->lanes, lane, &env, err, errlen);
}

/* The stream's headers and opening events (chat: each choice's role chunk). */
static void start_stream(job *j)
{
    struct evkeyvalq *h = evhttp_request_get_output_headers(j->http);
    evhttp_add_header(h, "Content-Type", "text/event-stream");
    evhttp_add_header(h, "Cache-Control", "no-cache");
    evhttp_send_reply_start(j->http, 200, "OK");
    j->stream_started = true;
    if (j->p.responses) {
        resp_open(j);
    } else if (j->p.kind == SD_API_CHAT) {
        for (unsigned i = 0; i < j->n_gens; i++) {
            sd_api_spec spec;
            sd_api_result r = gen_result(j->gens[i], NULL, &spec);
            send_sse(j, sd_api_chunk_sse(j->p.kind, &r, "", 0, true, j->p.include_usage));
        }
    }
}

/* Sends g to lane. On failure ends its request (error reply) and returns false. */
static bool gen_dispatch(gen *g, int lane)
{
    job *j = g->j;
    sd_gen *s = j->svc;
    sd_api_err e;
    const sd_lane_info *in = sd_lanes_info(s->lanes, lane);
    if (fit_context(j, in->max_context, &e) != SD_OK) {
        job_abort(j, NULL, &e);
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
    /* a verifier that died a moment ago is still UP until its health checks miss: its socket refuses
     * the submit, and another lane with room takes the request instead */
    int tried[8], n_tried = 0;
    bool sent = false;
    while (!sent && n_tried < 8) {
        if (submit(g, lane, err, sizeof err) == SD_OK) {
            sent = true;
            break;
        }
        SD_WARN("request %llu: submit to %s failed: %s", (unsigned long long)g->id, in->endpoint, err);
        tried[n_tried++] = lane;
        int other = sd_lanes_pick_except(s->lanes, tried, n_tried);
        if (other < 0 || fit_context(j, sd_lanes_info(s->lanes, other)->max_context, &e) != SD_OK) break;
        lane = other;
        in = sd_lanes_info(s->lanes, lane);
    }
    if (!sent) {
        g->state = GEN_RUNNING;
        g->lane = -1;
        s->metrics->active++;
        job_fail(j, g, 503, "server_error", "lane_unavailable", "The verifier lane is not reachable; retry later");
        return false;
    }
    g->state = GEN_RUNNING;
    g->lane = lane;
    if (!j->t_dispatch) j->t_dispatch = sd_now_s();
    sd_lanes_add_inflight(s->lanes, lane, 1);
    s->metrics->active++;
    SD_DEBUG("request %llu: %zu prompt tokens, max %u, lane %s", (unsigned long long)g->id, j->n_prompt, j->max_tokens,
             in->endpoint);
    if (j->p.stream && !j->stream_started) start_stream(j);
    return true;
}

/* Failover: g's lane died; it goes on at lane from the output it already
 * produced (Submit.resume_ids). The client sees no break: the same stream,
 * the same tokens an undisturbed run gives (greedy, and sampling with the
 * request's seed, which the router fixed at admission). */
static void gen_failover(gen *g, int lane)
{
    sd_gen *s = g->j->svc;
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
    sd_gen *s = g->j->svc;
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
    job_fail(g->j, g, 503, "server_error", "lane_down",
             "The verifier lane stopped answering and none came up within --resume-wait; retry later");
}

/* The lane for g: its running siblings' when it has room. */
static int pick_lane(const sd_gen *s, const gen *g)
{
    int pref = -1;
    for (unsigned i = 0; i < g->j->n_gens && pref < 0; i++)
        if (g->j->gens[i]->state == GEN_RUNNING) pref = g->j->gens[i]->lane;
    return sd_lanes_pick_near(s->lanes, pref);
}

static void gen_drain_queue(sd_gen *s)
{
    int lane;
    if (s->stopping) return;
    while (s->qhead && (lane = pick_lane(s, s->qhead)) >= 0) gen_dispatch(s->qhead, lane);
}

/* ------------------------------------------------------------ token events */

/* Output text after stop matching: with tools, what may start a tool call is
 * held back (tool_calls.h). */
static void gen_content(gen *g, const char *t, size_t n)
{
    if (!n) return;
    if (!g->j->p.tools) {
        evbuffer_add(g->text, t, n);
        return;
    }
    sd_buf content = {0};
    sd_tool_split_feed(&g->split, t, n, &content);
    if (content.len) evbuffer_add(g->text, content.p, content.len);
    sd_buf_free(&content);
}

/* Appends decoded text to the output (after stop matching: stop strings are
 * looked for in the text of the tokens after the first min_tokens, as vLLM
 * does). Returns true when a stop string matched. */
static bool gen_text(gen *g, const char *t, size_t n)
{
    const char *out = t;
    size_t outlen = n;
    bool hit = g->completion_tokens > g->j->p.sampling.min_tokens && sd_stop_feed(g->stop, t, n, &out, &outlen);
    gen_content(g, out, outlen);
    return hit;
}

/* Streams the text and log-probabilities gathered since the last chunk. */
static void flush_chunk(gen *g)
{
    size_t n = evbuffer_get_length(g->text);
    bool lp = g->lp && sd_lp_pending(g->lp) > 0;
    bool prov = g->prov.tokens && sd_prov_pending(&g->prov);
    job *j = g->j;
    if (!j->stream_started || (n == 0 && !lp && !prov)) return;
    if (j->p.responses) {
        const char *t = (const char *)evbuffer_pullup(g->text, -1);
        send_sse(j, sd_resp_event("response.output_text.delta",
                                  json_pack("{s:s, s:i, s:i, s:s%}", "item_id", j->msg_id, "output_index", 0,
                                            "content_index", 0, "delta", t, n),
                                  &j->seq));
        evbuffer_add(j->all, t, n);
        evbuffer_drain(g->text, n);
        return;
    }
    sd_api_spec spec;
    sd_api_result r = gen_result(g, NULL, &spec);
    r.logprobs = lp ? sd_lp_take(g->lp) : NULL;
    r.provenance = prov ? sd_prov_take(&g->prov) : NULL;
    send_sse(j,
             sd_api_chunk_sse(j->p.kind, &r, (const char *)evbuffer_pullup(g->text, -1), n, false, j->p.include_usage));
    json_decref(r.logprobs);
    json_decref(r.provenance);
    evbuffer_drain(g->text, n);
}

/* echo + logprobs: the prompt's entries (the first has no value) come before
 * the output's, once, with the first event that carries them. */
static void take_prompt_logprobs(gen *g, const Specd__TokenEvent *ev)
{
    const job *j = g->j;
    if (!g->lp || !j->p.echo || g->prompt_lp_done || ev->n_prompt_logprobs + 1 != j->n_prompt) return;
    sd_lp_add(g->lp, j->prompt[0], NULL);
    for (size_t i = 0; i < ev->n_prompt_logprobs; i++) sd_lp_add(g->lp, j->prompt[i + 1], ev->prompt_logprobs[i]);
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
    if (p) g->drafting = sd_pipe_stats_from_proto(p);
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
    if (ev->cached_tokens > g->cached_tokens) g->cached_tokens = ev->cached_tokens;
    if (ev->n_tokens) {
        double now = sd_now_s();
        if (!g->j->t_first) g->j->t_first = now;
        if (g->t_last) sd_metrics_observe_itl(g->j->svc->metrics, now - g->t_last);
        g->t_last = now;
        if (g->prov.tokens) sd_prov_step(&g->prov, ev->step);
    }
    for (size_t i = 0; i < ev->n_tokens && !hit; i++) {
        const char *t = NULL;
        size_t n = 0;
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
        if (ev->n_logprobs == ev->n_tokens) {
            g->cum_logprob += ev->logprobs[i]->logprob;
            if (g->lp) sd_lp_add(g->lp, ev->tokens[i], ev->logprobs[i]);
        }
        if (sd_tok_stream_push(g->dec, ev->tokens[i], &t, &n) != SD_OK) n = 0;
        if (g->prov.tokens) sd_prov_token(&g->prov, ev->tokens[i], t, n);
        if (n) hit = gen_text(g, t, n);
    }
    if (hit) {
        send_cancel(g);
        flush_chunk(g);
        gen_finish(g, "stop");
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
        gen_content(g, t, n);
    }
    flush_chunk(g);
    switch (ev->finish) {
    case SPECD__FINISH_REASON__FINISH_STOP: gen_finish(g, "stop"); break;
    case SPECD__FINISH_REASON__FINISH_LENGTH: gen_finish(g, hit ? "stop" : "length"); break;
    default: job_fail(g->j, g, 503, "server_error", "cancelled", "The verifier ended the request early"); break;
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
    uint64_t id =
        env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT ? env->token_event->request_id : env->error->request_id;
    gen *g = gen_find(s, id);
    if (!g || g->lane != lane) {
        if (env->body_case == SPECD__ENVELOPE__BODY_ERROR) {
            SD_WARN("verifier error (request %llu): %s: %s", (unsigned long long)id, env->error->code,
                    env->error->message);
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
    job_fail(g->j, g, st, st == 400 ? INVALID : "server_error", env->error->code, msg);
}

static void gen_on_lane_state(void *ud, int lane, sd_lane_state st)
{
    sd_gen *s = ud;
    if (st == SD_LANE_DOWN) {
        /* Failing a request may dispatch or end others: rescan from the head. */
        for (gen *g = s->live; g;) {
            if (g->state == GEN_RUNNING && g->lane == lane) {
                bool room = !s->stopping && g->n_out + 1 < g->j->max_tokens;
                int other = room ? sd_lanes_pick(s->lanes) : -1;
                if (other >= 0) gen_failover(g, other);
                else if (room && g->park) gen_park(g);
                else
                    job_fail(g->j, g, 503, "server_error", "lane_down",
                             "The verifier lane stopped answering; retry later");
                g = s->live;
            } else {
                g = g->next;
            }
        }
        if (sd_lanes_all_down(s->lanes)) /* those that produced nothing fail; the parked wait */
            for (gen *g = s->qhead; g;) {
                if (g->parked) {
                    g = g->qnext;
                    continue;
                }
                job_fail(g->j, NULL, 503, "server_error", "no_healthy_lane",
                         "No verifier lane is available; retry later");
                g = s->qhead; /* the request's other choices went with it */
            }
    }
    gen_drain_queue(s);
}

void sd_gen_fail_all(sd_gen *s, int status, const char *msg)
{
    s->stopping = true;
    while (s->live) job_fail(s->live->j, NULL, status, "server_error", "shutdown", msg);
}

void sd_gen_drain(sd_gen *s)
{
    s->draining = true;
    sd_disc_stop(s->disc); /* while the loop runs: the cancelled lookups' callbacks free their replies */
}

size_t sd_gen_live(const sd_gen *s) { return s->n_jobs; }

/* ------------------------------------------------------------ admission */

/* Fills j->prompt from the request: chat template, prompt text or ids. */
static sd_status tokenize(sd_gen *s, job *j, sd_api_err *e)
{
    return sd_prompt_tokens(s->tok, s->chat, s->vocab, &j->p, &j->prompt, &j->n_prompt, e);
}

/* Token ids a request names (stop ids, logit_bias, allowed_token_ids) within the vocabulary. */
static sd_status check_ids(const char *param, const int32_t *ids, size_t n, int vocab, sd_api_err *e)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= vocab)
            return sd_api_fail(e, 400, INVALID, param, NULL, "'%s' id %d is out of range (vocabulary size %d)", param,
                               (int)ids[i], vocab);
    return SD_OK;
}

static sd_status check_request(sd_gen *s, job *j, sd_api_err *e)
{
    if (j->p.model && !sd_gen_served_name(s, j->p.model))
        return sd_api_fail(e, 404, INVALID, "model", "model_not_found",
                           "The model '%s' does not exist; this server serves '%s'", j->p.model, s->o.model_name);
    sd_status st = check_ids("stop_token_ids", j->p.stop_ids, j->p.n_stop_ids, s->vocab, e);
    if (st == SD_OK) st = check_ids("logit_bias", j->p.bias_ids, j->p.sampling.n_bias, s->vocab, e);
    if (st == SD_OK) st = check_ids("allowed_token_ids", j->p.allowed, j->p.sampling.n_allowed, s->vocab, e);
    if (st == SD_OK) st = tokenize(s, j, e);
    uint32_t ctx = 0;
    if (st == SD_OK && sd_lanes_any_up(s->lanes, &ctx) && ctx) st = fit_context(j, ctx, e);
    return st;
}

static job *job_new(sd_gen *s, struct evhttp_request *req)
{
    job *j = calloc(1, sizeof *j);
    if (!j) return NULL;
    j->svc = s;
    j->http = req;
    j->created = time(NULL);
    j->t0 = sd_now_s();
    return j;
}

/* echo: each choice's output starts with the prompt's text (as given, or
 * the ids decoded); stop strings apply to the generated text only. */
static sd_status echo_prompt(sd_gen *s, job *j, sd_api_err *e)
{
    char *text = NULL, err[256];
    size_t n = 0;
    if (j->p.prompt) {
        n = strlen(j->p.prompt);
    } else if (sd_tok_decode(s->tok, j->prompt, j->n_prompt, true, &text, &n, err, sizeof err) != SD_OK) {
        return sd_api_fail(e, 400, INVALID, "prompt", NULL, "the prompt could not be decoded for 'echo': %s", err);
    }
    for (unsigned i = 0; i < j->n_gens; i++) evbuffer_add(j->gens[i]->text, text ? text : j->p.prompt, n);
    free(text);
    return SD_OK;
}

/* Choice i's generation. NULL when out of memory. */
static gen *gen_new(sd_gen *s, job *j, unsigned i)
{
    gen *g = calloc(1, sizeof *g);
    if (!g) return NULL;
    g->j = j;
    g->index = i;
    g->lane = -1;
    g->id = s->next_id++;
    g->text = evbuffer_new();
    /* each fails only for memory (s->tok and the stop list are sound): the caller's answer says so */
    bool ok = sd_tok_stream_new(s->tok, true, &g->dec, NULL, 0) == SD_OK &&
              sd_stop_new((const char *const *)j->p.stop, j->p.n_stop, &g->stop, NULL, 0) == SD_OK;
    if (s->o.resume_wait_s > 0) g->park = evtimer_new(s->base, on_park_timeout, g);
    if (j->p.tools_forced) sd_tool_split_force(&g->split, j->p.tool_name);
    else g->split.fmt = (uint8_t)s->o.tool_parser;
    bool lp_ok = !j->p.logprobs || sd_lp_new(s->tok, j->p.kind, j->p.top_logprobs, &g->lp, NULL, 0) == SD_OK;
    bool prov_ok = !j->p.provenance || sd_prov_init(&g->prov) == SD_OK;
    if (!g->text || !ok || (s->o.resume_wait_s > 0 && !g->park) || !lp_ok || !prov_ok) {
        gen_free(g);
        return NULL;
    }
    return g;
}

static sd_status job_prepare(sd_gen *s, job *j, sd_api_err *e)
{
    unsigned long long h = (unsigned long long)(s->next_id * 0x9E3779B97F4A7C15ULL);
    if (j->p.responses) {
        snprintf(j->cid, sizeof j->cid, "resp_%016llx", h);
        snprintf(j->msg_id, sizeof j->msg_id, "msg_%016llx", h ^ 0x5bd1e995ULL);
        if (j->p.stream && !(j->all = evbuffer_new()))
            return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    } else {
        snprintf(j->cid, sizeof j->cid, "%s-%016llx", j->p.kind == SD_API_CHAT ? "chatcmpl" : "cmpl", h);
    }
    if (!j->p.seed_set) j->p.sampling.seed = s->next_id * 0xD1B54A32D192ED03ULL ^ (uint64_t)j->t0;
    if (!(j->gens = calloc(j->p.best_of, sizeof *j->gens)))
        return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    for (; j->n_gens < j->p.best_of; j->n_gens++)
        if (!(j->gens[j->n_gens] = gen_new(s, j, j->n_gens)))
            return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
    if (s->o.request_timeout_s > 0) {
        if (!(j->timer = evtimer_new(s->base, on_timeout, j)))
            return sd_api_fail(e, 500, "server_error", NULL, NULL, "out of memory");
        double t = s->o.request_timeout_s;
        struct timeval tv = {(time_t)t, (suseconds_t)((t - (double)(time_t)t) * 1e6)};
        evtimer_add(j->timer, &tv);
    }
    return j->p.echo ? echo_prompt(s, j, e) : SD_OK;
}

/* Refuses j now (all lanes down, or its choices would overflow the queue):
 * fills e and returns true. */
static bool refuse(sd_gen *s, const job *j, sd_api_err *e)
{
    if (sd_lanes_all_down(s->lanes)) {
        sd_api_fail(e, 503, "server_error", NULL, "no_healthy_lane", "No verifier lane is available; retry later");
        return true;
    }
    int room = s->qhead ? 0 : sd_lanes_room(s->lanes);
    int wait = (int)j->n_gens > room ? (int)j->n_gens - room : 0;
    if (wait > 0 && s->nqueued + wait > s->o.max_queue) {
        sd_api_fail(e, 429, "rate_limit_error", NULL, "overloaded",
                    "The server is overloaded (%d requests waiting); retry later", s->nqueued);
        return true;
    }
    return false;
}

/* Admits a valid request: its choices dispatched now or queued, or it is
 * refused (429 / 503). */
static void job_admit(sd_gen *s, job *j)
{
    sd_api_err e;
    if (refuse(s, j, &e)) {
        sd_reply_error(j->http, &e, s->metrics);
        job_free(j);
        return;
    }
    j->admitted = true;
    s->n_jobs++;
    for (unsigned i = 0; i < j->n_gens; i++) gen_link(s, j->gens[i]);
    struct evhttp_connection *conn = evhttp_request_get_connection(j->http);
    evhttp_connection_set_closecb(conn, on_client_close, j);
    /* the connection's short timeout (reading a request, idling) must not cut a
     * generation: --request-timeout bounds it; back to short once answered */
    evhttp_connection_set_timeout(conn, s->o.request_timeout_s > 0 ? (int)s->o.request_timeout_s + 5 : 3600);
    sd_conncap_on_complete(s->conncap ? *s->conncap : NULL, j->http, on_answered, s);
    watch_client(j);
    for (unsigned i = 0; i < j->n_gens; i++) {
        gen *g = j->gens[i];
        int lane = s->qhead ? -1 : pick_lane(s, g);
        if (lane < 0) queue_push(s, g);
        else if (!gen_dispatch(g, lane)) return; /* the request ended */
    }
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
    job *j = job_new(s, req);
    if (!j) {
        sd_api_fail(&e, 500, "server_error", NULL, NULL, "out of memory");
        sd_reply_error(req, &e, s->metrics);
        return;
    }
    const char *body = len ? (const char *)evbuffer_pullup(in, -1) : "";
    sd_status ps = kind == SD_API_RESPONSES ? sd_api_parse_responses(body, len, &j->p, &e)
                                            : sd_api_parse(kind, body, len, &j->p, &e);
    if (ps != SD_OK || check_request(s, j, &e) != SD_OK || job_prepare(s, j, &e) != SD_OK) {
        sd_reply_error(req, &e, s->metrics);
        job_free(j);
        return;
    }
    job_admit(s, j);
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
    s->conncap = env->conncap;
    s->next_id = ((uint64_t)time(NULL) << 20) | 1;
    sd_lanes_opts lo = {s->o.health_interval_ms, s->o.max_missed, s->o.lane_capacity, env->curve};
    sd_lane_cbs cbs = {gen_on_event, gen_on_lane_state, s};
    sd_status st = sd_lanes_new(s->base, env->zctx, s->o.verifiers, s->o.n_verifiers, &lo, cbs, &s->lanes, err, errlen);
    if (st == SD_OK && s->o.n_verifier_dns)
        st = sd_disc_new(s->base, s->lanes, s->o.verifier_dns, s->o.n_verifier_dns, s->o.dns_interval_s,
                         s->o.dns_server, &s->disc, err, errlen);
    if (st != SD_OK) {
        sd_lanes_free(s->lanes);
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

const sd_lanes *sd_gen_lanes(const sd_gen *s) { return s->lanes; }

void sd_gen_free(sd_gen *s)
{
    if (!s) return;
    if (s->live) sd_gen_fail_all(s, 503, "The server is shutting down");
    sd_disc_free(s->disc);
    sd_lanes_free(s->lanes);
    free(s);
}
