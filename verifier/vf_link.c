/* vf_link.c — verifier ⇄ drafter I/O with deadlines and fallback (see vf_link.h). */
#include "vf_link.h"

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "clock.h"
#include "log.h"
#include "msg.h"

#define PROBE_INTERVAL_MS 500
#define STATS_INTERVAL_MS 1000 /* while up: how often the drafter's figures are asked for */
#define PROBE_WINDOW_MS 5
#define SILENCE_MS 1000 /* pipelined: no message for this long while spans are owed = down */

struct sd_vf_link {
    void *sock;
    int timeout_ms;
    int vocab;
    bool up;
    uint64_t step; /* DraftBatch counter */
    uint64_t nonce;
    double last_probe_ms;       /* last batch probe while down */
    double last_health_ms;      /* last HealthRequest probe while down */
    double owed_since_ms;       /* pipelined: first batch sent since the last message (0: none) */
    sd_vf_drafter_stats dstats; /* from the last HealthReply */
    sd_vf_batch batch;
};

sd_status sd_vf_link_new(void *zctx, const char *endpoint, const sd_curve *curve, int timeout_ms, int vocab,
                         sd_vf_link **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_vf_link *l = calloc(1, sizeof *l);
    if (!l) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    l->sock = sd_msg_socket(zctx, ZMQ_DEALER, 1000);
    int one = 1;
    if (l->sock) zmq_setsockopt(l->sock, ZMQ_IMMEDIATE, &one, sizeof one);
    sd_status st = l->sock && curve ? sd_curve_client(curve, l->sock, err, errlen) : SD_OK;
    if (st != SD_OK) {
        zmq_close(l->sock);
        free(l);
        return st;
    }
    if (!l->sock || zmq_connect(l->sock, endpoint) != 0) {
        sd_seterr(err, errlen, SD_ERR_ARG, "cannot connect to drafter %s: %s", endpoint, zmq_strerror(zmq_errno()));
        if (l->sock) zmq_close(l->sock);
        free(l);
        return SD_ERR_ARG;
    }
    l->timeout_ms = timeout_ms > 0 ? timeout_ms : 200;
    l->vocab = vocab;
    l->up = false; /* until it answers the first probe (sent at once: last_probe_ms 0) */
    sd_vf_batch_init(&l->batch);
    *out = l;
    return SD_OK;
}

void sd_vf_link_free(sd_vf_link *l)
{
    if (!l) return;
    zmq_close(l->sock);
    sd_vf_batch_release(&l->batch);
    free(l);
}

void *sd_vf_link_socket(const sd_vf_link *l) { return l->sock; }

bool sd_vf_link_up(const sd_vf_link *l) { return l->up; }

static void mark_down(sd_vf_link *l, const char *why)
{
    if (l->up) SD_WARN("drafter down (%s): decoding without drafts until it answers", why);
    l->up = false;
    l->last_probe_ms = sd_now_ms();
}

static void mark_up(sd_vf_link *l)
{
    if (!l->up) SD_INFO("drafter is answering again");
    l->up = true;
}

static bool send_env(sd_vf_link *l, const Specd__Envelope *env)
{
    char err[256];
    sd_status st = sd_msg_send(l->sock, NULL, env, err, sizeof err);
    if (st != SD_OK) SD_DEBUG("drafter send failed: %s", err);
    return st == SD_OK;
}

/* Receives one message (DONTWAIT). Returns it (caller frees) or NULL. Any
 * valid message proves the drafter alive. */
static Specd__Envelope *recv_one(sd_vf_link *l, bool *more)
{
    char err[256];
    Specd__Envelope *env = NULL;
    sd_status st = sd_msg_recv(l->sock, NULL, &env, SD_MSG_DONTWAIT, err, sizeof err);
    *more = st != SD_ERR_TIMEOUT && st != SD_ERR_IO;
    if (st == SD_ERR_FORMAT) SD_DEBUG("dropped a malformed drafter message: %s", err);
    if (st != SD_OK) return NULL;
    mark_up(l);
    l->owed_since_ms = 0;
    return env;
}

/* A HealthRequest every PROBE_INTERVAL_MS while down (the probe), every
 * STATS_INTERVAL_MS while up (the drafter's figures). */
static void probe(sd_vf_link *l)
{
    if (sd_now_ms() - l->last_health_ms >= (l->up ? STATS_INTERVAL_MS : PROBE_INTERVAL_MS)) {
        l->last_health_ms = sd_now_ms();
        Specd__HealthRequest h = SPECD__HEALTH_REQUEST__INIT;
        Specd__Envelope env = SPECD__ENVELOPE__INIT;
        h.nonce = ++l->nonce;
        env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REQUEST;
        env.health_request = &h;
        send_env(l, &env);
    }
}

/* Keeps the figures of a HealthReply; true when env was one. */
static bool take_health(sd_vf_link *l, const Specd__Envelope *env)
{
    if (env->body_case != SPECD__ENVELOPE__BODY_HEALTH_REPLY) return false;
    const Specd__HealthReply *h = env->health_reply;
    sd_vf_drafter_stats *d = &l->dstats;
    d->known = true;
    if (h->stats) {
        d->requests = h->stats->active_requests;
        d->kv_total = h->stats->kv_blocks_total;
        d->kv_free = h->stats->kv_blocks_free;
    }
    snprintf(d->host, sizeof d->host, "%s", h->host ? h->host : "");
    snprintf(d->device, sizeof d->device, "%s", h->device ? h->device : "");
    d->threads = h->threads;
    return true;
}

sd_vf_drafter_stats sd_vf_link_drafter_stats(const sd_vf_link *l) { return l->dstats; }

void sd_vf_link_poll(sd_vf_link *l)
{
    bool more = true;
    while (more) {
        Specd__Envelope *env = recv_one(l, &more);
        if (env && !take_health(l, env)) SD_DEBUG("drafter: dropped %s outside a draft exchange", sd_msg_kind(env));
        sd_msg_free(env);
    }
    probe(l);
}

/* Sends the opens and the batch; false when any send failed. */
static bool send_batch(sd_vf_link *l)
{
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    for (int i = 0; i < l->batch.n_opens; i++) {
        env.body_case = SPECD__ENVELOPE__BODY_DRAFT_OPEN;
        env.draft_open = &l->batch.opens[i];
        if (!send_env(l, &env)) return false;
    }
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_BATCH;
    env.draft_open = NULL;
    env.draft_batch = &l->batch.batch;
    return send_env(l, &env);
}

/* Waits until deadline for this step's reply; applies it. True on a reply. */
static bool await_reply(sd_vf_link *l, sd_vf_slot *const *slots, const int *budgets, double deadline)
{
    for (;;) {
        bool more = true;
        while (more) {
            Specd__Envelope *env = recv_one(l, &more);
            if (!env) continue;
            bool mine = env->body_case == SPECD__ENVELOPE__BODY_DRAFT_REPLY && env->draft_reply->step == l->step;
            if (mine) sd_vf_batch_apply(&l->batch, env->draft_reply, slots, budgets, l->vocab);
            else if (!take_health(l, env)) SD_DEBUG("drafter: dropped %s (stale or unexpected)", sd_msg_kind(env));
            sd_msg_free(env);
            if (mine) return true;
        }
        double left = deadline - sd_now_ms();
        if (left <= 0) return false;
        zmq_pollitem_t it = {l->sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, (long)left + 1);
    }
}

void sd_vf_link_draft(sd_vf_link *l, sd_vf_slot *const *slots, const int *budgets, int n)
{
    for (int i = 0; i < n; i++) slots[i]->prop.n = 0;
    bool probing = !l->up;
    if (probing && sd_now_ms() - l->last_probe_ms < PROBE_INTERVAL_MS) return;
    sd_vf_link_poll(l); /* drain stale replies first; sends the health probe when due */
    if (probing) l->last_probe_ms = sd_now_ms();
    l->step++;
    int n_items = sd_vf_batch_build(&l->batch, l->step, slots, budgets, n, false, false);
    if (n_items <= 0) return;
    if (!send_batch(l)) {
        mark_down(l, "send failed");
        for (int i = 0; i < n; i++) slots[i]->drafter_known = 0;
        return;
    }
    double deadline = sd_now_ms() + (probing ? PROBE_WINDOW_MS : l->timeout_ms);
    if (!await_reply(l, slots, budgets, deadline)) {
        if (!probing) mark_down(l, "reply timed out");
        for (int i = 0; i < n; i++) {
            slots[i]->drafter_known = 0;
            slots[i]->prop.n = 0;
        }
    }
}

void sd_vf_link_close(sd_vf_link *l, sd_vf_slot *s)
{
    if (!s->opened) return;
    Specd__DraftClose c = SPECD__DRAFT_CLOSE__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    c.request_id = s->id;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_CLOSE;
    env.draft_close = &c;
    send_env(l, &env);
    s->opened = false;
    s->drafter_known = 0;
}

/* ------------------------------------------------------------ pipelined */

/* Marks the drafter down and forgets what every slot had from it. */
static void pipe_down(sd_vf_link *l, sd_vf_slot *const *slots, int n, const char *why)
{
    mark_down(l, why);
    l->owed_since_ms = 0;
    for (int i = 0; i < n; i++) {
        slots[i]->drafter_known = 0;
        sd_vf_spans_clear(&slots[i]->spans);
    }
}

void sd_vf_link_pipe_send(sd_vf_link *l, sd_vf_slot *const *slots, const int *budgets, int n, bool in_flight,
                          uint32_t step_us, double now_ms)
{
    if (!l->up) return;
    if (l->owed_since_ms > 0 && now_ms - l->owed_since_ms > SILENCE_MS) {
        pipe_down(l, slots, n, "no spans for a second");
        return;
    }
    int n_items = sd_vf_batch_build(&l->batch, ++l->step, slots, budgets, n, true, in_flight);
    if (n_items <= 0) return;
    l->batch.batch.step_us = step_us;
    if (!send_batch(l)) {
        pipe_down(l, slots, n, "send failed");
        return;
    }
    if (l->owed_since_ms <= 0) l->owed_since_ms = now_ms;
    for (int i = 0; i < n; i++)
        if (budgets[i] > 0) slots[i]->told_ms = now_ms;
}

/* Files one pipelined result into the slot it names. */
static int file_result(sd_vf_link *l, const Specd__DraftResult *res, sd_vf_slot *const *slots, int n, double now_ms,
                       double *lat_ms, double *draft_ms)
{
    for (int i = 0; i < n; i++) {
        sd_vf_slot *s = slots[i];
        if (s->id != res->request_id) continue;
        if (res->need_open) {
            s->drafter_known = 0;
            sd_vf_spans_clear(&s->spans);
            return 0;
        }
        if (!sd_vf_spans_add(&s->spans, res, l->vocab, now_ms)) return 0;
        if ((int)res->base_len == s->drafter_known) {
            if (now_ms - s->told_ms > *lat_ms) *lat_ms = now_ms - s->told_ms;
            if (res->draft_us / 1e3 > *draft_ms) *draft_ms = res->draft_us / 1e3;
        }
        return 1;
    }
    return 0; /* a request that is over: nothing to do */
}

int sd_vf_link_pipe_recv(sd_vf_link *l, sd_vf_slot *const *slots, int n, double now_ms, double *lat_ms,
                         double *draft_ms)
{
    *lat_ms = *draft_ms = -1;
    int got = 0;
    bool more = true;
    while (more) {
        Specd__Envelope *env = recv_one(l, &more);
        if (!env) continue;
        if (env->body_case == SPECD__ENVELOPE__BODY_DRAFT_REPLY) {
            const Specd__DraftReply *rep = env->draft_reply;
            for (size_t j = 0; j < rep->n_results; j++)
                got += file_result(l, rep->results[j], slots, n, now_ms, lat_ms, draft_ms);
        } else if (!take_health(l, env)) {
            SD_DEBUG("drafter: dropped %s", sd_msg_kind(env));
        }
        sd_msg_free(env);
    }
    probe(l);
    return got;
}

/* Sleeps on the socket's ZMQ_FD with ppoll (zmq_poll counts whole
 * milliseconds, too coarse for waits that are fractions of a step). The FD
 * is edge-triggered: ZMQ_EVENTS says whether a message is really there. */
bool sd_vf_link_wait(sd_vf_link *l, double timeout_ms)
{
    int fd;
    size_t fl = sizeof fd;
    if (zmq_getsockopt(l->sock, ZMQ_FD, &fd, &fl) != 0) return false;
    double deadline = sd_now_ms() + timeout_ms;
    for (;;) {
        if (sd_msg_readable(l->sock)) return true;
        double left = deadline - sd_now_ms();
        if (left <= 0) return false;
        struct timespec ts = {(time_t)(left / 1e3), (long)((left - 1e3 * (double)(time_t)(left / 1e3)) * 1e6)};
        struct pollfd p = {fd, POLLIN, 0};
        ppoll(&p, 1, &ts, NULL);
    }
}
