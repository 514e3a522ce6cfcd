/* lanes.c — see lanes.h. */
#include "lanes.h"

#include <event2/event.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "array.h"
#include "log.h"

typedef struct lane {
    sd_lane_info info;
    char *endpoint;
    void *sock;
    struct event *ev;
    uint64_t nonce_sent, nonce_acked;
    uint64_t instance; /* the verifier process's HealthReply.instance (0: not known yet) */
    sd_lane_info base; /* counters of the lane's earlier verifier processes (a restarted one counts from 0) */
    int index;
    struct sd_lanes *owner;
} lane;

struct sd_lanes {
    struct event_base *base;
    void *zctx;
    lane **lanes; /* pointers: a lane's events hold its address while the table grows */
    size_t n, cap;
    sd_lanes_opts opts;
    sd_lane_cbs cbs;
    struct event *timer;
};

static void set_state(sd_lanes *l, lane *ln, sd_lane_state st)
{
    if (ln->info.state == st || (ln->info.retired && st != SD_LANE_DOWN)) return;
    ln->info.state = st;
    if (st == SD_LANE_UP)
        SD_INFO("lane %s is up (model %s, max_context %u)", ln->endpoint, ln->info.model, ln->info.max_context);
    if (st == SD_LANE_DOWN) SD_WARN("lane %s is down (%d health requests unanswered)", ln->endpoint, ln->info.missed);
    if (l->cbs.on_state) l->cbs.on_state(l->cbs.ud, ln->index, st);
}

/* Copies a label value a verifier sent, keeping [A-Za-z0-9._] only (it ends
 * up inside a Prometheus label). */
static void copy_label(char *dst, size_t cap, const char *src)
{
    size_t n = 0;
    for (; src && *src && n + 1 < cap; src++) {
        char c = *src;
        bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '_';
        dst[n++] = ok ? c : '_';
    }
    dst[n] = '\0';
}

/* The adaptive figures of a verifier's Stats. */
static void copy_adapt(sd_lane_info *in, const Specd__Stats *s)
{
    in->n_k_chosen = s->n_k_chosen < SD_LANE_MAX_K + 1 ? s->n_k_chosen : SD_LANE_MAX_K + 1;
    memset(in->k_chosen, 0, sizeof in->k_chosen);
    if (in->n_k_chosen) memcpy(in->k_chosen, s->k_chosen, in->n_k_chosen * sizeof *s->k_chosen);
    in->step_pred_us = s->step_predicted_us;
    in->step_meas_us = s->step_measured_us;
    in->step_err_us = s->step_error_us;
    in->regime_plain = s->regime_plain_steps;
    in->regime_rate[0] = s->regime_rate_drafting;
    in->regime_rate[1] = s->regime_rate_plain;
    in->pipe_serial = s->pipe_serial_steps;
    in->pipe_rate[0] = s->pipe_rate_pipelined;
    in->pipe_rate[1] = s->pipe_rate_serial;
    in->step_rows_max = s->step_rows_max;
    in->preemptions = s->preemptions;
    in->prefix_queries = s->prefix_queries;
    in->prefix_hits = s->prefix_hits;
    in->prefix_evictions = s->prefix_evictions;
    in->prefix_cached = s->prefix_cached_blocks;
    in->n_accept = 0;
    for (size_t i = 0; i < s->n_accept && in->n_accept < SD_LANE_MAX_ACCEPT; i++) {
        const Specd__AcceptEstimate *e = s->accept[i];
        sd_lane_accept *a = &in->accept[in->n_accept++];
        copy_label(a->mode, sizeof a->mode, e->mode);
        copy_label(a->temperature, sizeof a->temperature, e->temperature);
        a->n = e->n_accept < SD_LANE_MAX_K ? e->n_accept : SD_LANE_MAX_K;
        if (a->n) memcpy(a->accept, e->accept, a->n * sizeof *e->accept);
    }
}

/* in's counters += base's (the totals of the lane's earlier verifier processes). */
static void add_counters(sd_lane_info *in, const sd_lane_info *base)
{
    in->steps += base->steps;
    in->draft_tokens += base->draft_tokens;
    in->accepted_tokens += base->accepted_tokens;
    in->tokens_generated += base->tokens_generated;
    for (int k = 0; k < 64; k++) in->accepted_at[k] += base->accepted_at[k];
    if (base->n_accepted_at > in->n_accepted_at) in->n_accepted_at = base->n_accepted_at;
    sd_pipe_stats_add(&in->pipe, &base->pipe, 1);
    for (int k = 0; k <= SD_LANE_MAX_K; k++) in->k_chosen[k] += base->k_chosen[k];
    if (base->n_k_chosen > in->n_k_chosen) in->n_k_chosen = base->n_k_chosen;
    in->step_pred_us += base->step_pred_us;
    in->step_meas_us += base->step_meas_us;
    in->step_err_us += base->step_err_us;
    in->regime_plain += base->regime_plain;
    in->pipe_serial += base->pipe_serial;
    in->preemptions += base->preemptions;
    in->prefix_queries += base->prefix_queries;
    in->prefix_hits += base->prefix_hits;
    in->prefix_evictions += base->prefix_evictions;
}

static void on_health_reply(sd_lanes *l, lane *ln, const Specd__HealthReply *h)
{
    if (h->nonce > ln->nonce_sent) return; /* not ours */
    if (h->instance && ln->instance && h->instance != ln->instance) {
        if (ln->info.state == SD_LANE_UP) {
            /* restarted before it missed enough health checks to be taken for down: the requests
             * it had are gone all the same, so they go the way of a lane that died (failover or wait) */
            SD_WARN("lane %s: the verifier restarted; its requests in flight are resumed", ln->endpoint);
            set_state(l, ln, SD_LANE_DOWN);
        }
        ln->base = ln->info; /* its counters start from zero: the lane's go on from these */
    }
    if (h->instance) ln->instance = h->instance;
    ln->nonce_acked = h->nonce;
    ln->info.missed = 0;
    ln->info.max_context = h->max_context;
    ln->info.vocab_size = h->vocab_size;
    snprintf(ln->info.model, sizeof ln->info.model, "%s", h->model ? h->model : "");
    ln->info.tp_size = h->n_rank_devices > 0 ? (int)h->n_rank_devices : 1;
    for (size_t r = 0; r < h->n_rank_devices && r < 8; r++)
        snprintf(ln->info.rank_device[r], sizeof ln->info.rank_device[r], "%s", h->rank_devices[r]);
    const Specd__Stats *s = h->stats;
    if (s) {
        ln->info.active = s->active_requests;
        ln->info.queued = s->queued_requests;
        ln->info.kv_total = s->kv_blocks_total;
        ln->info.kv_free = s->kv_blocks_free;
        ln->info.steps = s->steps;
        ln->info.draft_tokens = s->draft_tokens;
        ln->info.accepted_tokens = s->accepted_tokens;
        ln->info.tokens_generated = s->tokens_generated;
        ln->info.drafter_up = s->drafter_up;
        ln->info.drafter_requests = s->drafter_requests;
        ln->info.drafter_kv_total = s->drafter_kv_blocks_total;
        ln->info.drafter_kv_free = s->drafter_kv_blocks_free;
        if (s->pipe) ln->info.pipe = sd_pipe_stats_from_proto(s->pipe);
        copy_adapt(&ln->info, s);
        size_t n = s->n_accepted_at < 64 ? s->n_accepted_at : 64;
        memset(ln->info.accepted_at, 0, sizeof ln->info.accepted_at);
        if (n) memcpy(ln->info.accepted_at, s->accepted_at, n * sizeof *s->accepted_at);
        ln->info.n_accepted_at = n;
        add_counters(&ln->info, &ln->base);
    }
    if (h->max_context > 0) set_state(l, ln, SD_LANE_UP);
}

static void dispatch(sd_lanes *l, lane *ln, Specd__Envelope *env)
{
    switch (env->body_case) {
    case SPECD__ENVELOPE__BODY_HEALTH_REPLY: on_health_reply(l, ln, env->health_reply); break;
    case SPECD__ENVELOPE__BODY_TOKEN_EVENT:
    case SPECD__ENVELOPE__BODY_ERROR:
        if (l->cbs.on_event) l->cbs.on_event(l->cbs.ud, ln->index, env);
        break;
    default: SD_WARN_LIMITED("lane %s: unexpected %s message dropped", ln->endpoint, sd_msg_kind(env)); break;
    }
}

/* ZMQ_FD fired (or was activated after a send): drain until EAGAIN. */
static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    lane *ln = arg;
    sd_lanes *l = ln->owner;
    for (int i = 0; i < 100000; i++) {
        Specd__Envelope *env = NULL;
        char err[256];
        sd_status st = sd_msg_recv(ln->sock, NULL, &env, SD_MSG_DONTWAIT, err, sizeof err);
        if (st == SD_ERR_TIMEOUT) break;
        if (st == SD_ERR_FORMAT) {
            SD_WARN_LIMITED("lane %s: dropped malformed message: %s", ln->endpoint, err);
            continue;
        }
        if (st != SD_OK) {
            SD_ERROR("lane %s: %s", ln->endpoint, err);
            break;
        }
        dispatch(l, ln, env);
        sd_msg_free(env);
    }
}

static void send_health(sd_lanes *l, lane *ln)
{
    Specd__HealthRequest hr = SPECD__HEALTH_REQUEST__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    hr.nonce = ++ln->nonce_sent;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REQUEST;
    env.health_request = &hr;
    char err[256];
    if (sd_lanes_send(l, ln->index, &env, err, sizeof err) != SD_OK)
        SD_DEBUG("lane %s: health request not sent: %s", ln->endpoint, err);
}

static void on_tick(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sd_lanes *l = arg;
    for (size_t i = 0; i < l->n; i++) {
        lane *ln = l->lanes[i];
        if (ln->info.retired) continue;
        if (ln->nonce_sent > ln->nonce_acked) {
            ln->info.missed++;
            if (ln->info.missed >= l->opts.max_missed) set_state(l, ln, SD_LANE_DOWN);
        }
        send_health(l, ln);
    }
}

static sd_status lane_open(sd_lanes *l, void *zctx, lane *ln, char *err, size_t errlen)
{
    ln->sock = sd_msg_socket(zctx, ZMQ_DEALER, 0);
    int one = 1;
    if (ln->sock && l->opts.curve && sd_curve_client(l->opts.curve, ln->sock, err, errlen) != SD_OK) return SD_ERR_IO;
    if (!ln->sock || zmq_setsockopt(ln->sock, ZMQ_IMMEDIATE, &one, sizeof one) != 0 ||
        zmq_connect(ln->sock, ln->endpoint) != 0)
        return sd_seterr(err, errlen, SD_ERR_IO, "lane %s: %s", ln->endpoint, zmq_strerror(zmq_errno()));
    int fd = -1;
    size_t sz = sizeof fd;
    if (zmq_getsockopt(ln->sock, ZMQ_FD, &fd, &sz) != 0)
        return sd_seterr(err, errlen, SD_ERR_IO, "lane %s: ZMQ_FD: %s", ln->endpoint, zmq_strerror(zmq_errno()));
    ln->ev = event_new(l->base, fd, EV_READ | EV_PERSIST, on_readable, ln);
    if (!ln->ev || event_add(ln->ev, NULL) != 0)
        return sd_seterr(err, errlen, SD_ERR_IO, "lane %s: cannot watch its socket", ln->endpoint);
    return SD_OK;
}

/* A new lane for endpoint, connected (its socket watched): its index, or -1
 * with err set. */
static int lane_add(sd_lanes *l, const char *endpoint, char *err, size_t errlen)
{
    if (sd_grow(&l->lanes, &l->cap, l->n + 1, sizeof *l->lanes) != SD_OK) {
        sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
        return -1;
    }
    lane *ln = calloc(1, sizeof *ln);
    if (!ln) {
        sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
        return -1;
    }
    ln->index = (int)l->n;
    ln->owner = l;
    ln->endpoint = strdup(endpoint);
    ln->info.endpoint = ln->endpoint;
    l->lanes[l->n++] = ln; /* freed with the table even when opening fails */
    if (!ln->endpoint) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory"), -1;
    return lane_open(l, l->zctx, ln, err, errlen) == SD_OK ? ln->index : -1;
}

sd_status sd_lanes_new(struct event_base *base, void *zctx, const char *const *endpoints, size_t n,
                       const sd_lanes_opts *opts, sd_lane_cbs cbs, sd_lanes **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_lanes *l = calloc(1, sizeof *l);
    if (!l) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    l->base = base;
    l->zctx = zctx;
    l->cbs = cbs;
    l->opts.health_interval_ms = opts && opts->health_interval_ms > 0 ? opts->health_interval_ms : 1000;
    l->opts.max_missed = opts && opts->max_missed > 0 ? opts->max_missed : 3;
    l->opts.capacity = opts && opts->capacity > 0 ? opts->capacity : 64;
    l->opts.curve = opts ? opts->curve : NULL;
    sd_status st = SD_OK;
    for (size_t i = 0; i < n && st == SD_OK; i++)
        if (lane_add(l, endpoints[i], err, errlen) < 0) st = SD_ERR_IO;
    struct timeval tv = {l->opts.health_interval_ms / 1000, (l->opts.health_interval_ms % 1000) * 1000};
    if (st == SD_OK && (!(l->timer = event_new(base, -1, EV_PERSIST, on_tick, l)) || event_add(l->timer, &tv) != 0))
        st = sd_seterr(err, errlen, SD_ERR_IO, "cannot start the health timer");
    if (st != SD_OK) {
        sd_lanes_free(l);
        return st;
    }
    for (size_t i = 0; i < l->n; i++) send_health(l, l->lanes[i]);
    *out = l;
    return SD_OK;
}

int sd_lanes_add(sd_lanes *l, const char *endpoint, char *err, size_t errlen)
{
    for (size_t i = 0; i < l->n; i++) {
        lane *ln = l->lanes[i];
        if (strcmp(ln->endpoint, endpoint)) continue;
        if (ln->info.retired) {
            SD_INFO("lane %s is back", ln->endpoint);
            ln->info.retired = false;
            ln->info.missed = 0;
            ln->info.state = SD_LANE_STARTING;
            send_health(l, ln);
        }
        return (int)i;
    }
    int i = lane_add(l, endpoint, err, errlen);
    if (i >= 0) {
        SD_INFO("lane %s added", endpoint);
        send_health(l, l->lanes[i]);
    }
    return i;
}

void sd_lanes_retire(sd_lanes *l, int i)
{
    if (i < 0 || (size_t)i >= l->n || l->lanes[i]->info.retired) return;
    lane *ln = l->lanes[i];
    SD_INFO("lane %s retired: its name no longer resolves to it", ln->endpoint);
    set_state(l, ln, SD_LANE_DOWN); /* its requests go elsewhere (the owner's on_state) */
    ln->info.retired = true;
}

void sd_lanes_free(sd_lanes *l)
{
    if (!l) return;
    if (l->timer) event_free(l->timer);
    for (size_t i = 0; i < l->n; i++) {
        lane *ln = l->lanes[i];
        if (ln->ev) event_free(ln->ev);
        if (ln->sock) zmq_close(ln->sock);
        free(ln->endpoint);
        free(ln);
    }
    free(l->lanes);
    free(l);
}

size_t sd_lanes_count(const sd_lanes *l) { return l->n; }

const sd_lane_info *sd_lanes_info(const sd_lanes *l, int i)
{
    return (i >= 0 && (size_t)i < l->n) ? &l->lanes[i]->info : NULL;
}

static bool has_room(const sd_lanes *l, int i)
{
    const sd_lane_info *in = &l->lanes[i]->info;
    return in->state == SD_LANE_UP && !in->retired && in->inflight < l->opts.capacity;
}

int sd_lanes_pick(const sd_lanes *l)
{
    int best = -1;
    for (size_t i = 0; i < l->n; i++) {
        const sd_lane_info *in = &l->lanes[i]->info;
        if (!has_room(l, (int)i)) continue;
        if (best < 0 || in->inflight < l->lanes[best]->info.inflight) best = (int)i;
    }
    return best;
}

int sd_lanes_pick_except(const sd_lanes *l, const int *except, int n_except)
{
    int best = -1;
    for (size_t i = 0; i < l->n; i++) {
        bool skip = !has_room(l, (int)i);
        for (int k = 0; k < n_except && !skip; k++) skip = except[k] == (int)i;
        if (!skip && (best < 0 || l->lanes[i]->info.inflight < l->lanes[best]->info.inflight)) best = (int)i;
    }
    return best;
}

int sd_lanes_pick_near(const sd_lanes *l, int pref)
{
    return pref >= 0 && (size_t)pref < l->n && has_room(l, pref) ? pref : sd_lanes_pick(l);
}

int sd_lanes_room(const sd_lanes *l)
{
    int room = 0;
    for (size_t i = 0; i < l->n; i++)
        if (has_room(l, (int)i)) room += l->opts.capacity - l->lanes[i]->info.inflight;
    return room;
}

bool sd_lanes_any_up(const sd_lanes *l, uint32_t *max_context)
{
    bool up = false;
    uint32_t ctx = 0;
    for (size_t i = 0; i < l->n; i++) {
        const sd_lane_info *in = &l->lanes[i]->info;
        if (in->state != SD_LANE_UP || in->retired) continue;
        up = true;
        if (in->max_context && (ctx == 0 || in->max_context < ctx)) ctx = in->max_context;
    }
    if (max_context) *max_context = ctx;
    return up;
}

bool sd_lanes_all_down(const sd_lanes *l)
{
    for (size_t i = 0; i < l->n; i++)
        if (l->lanes[i]->info.state != SD_LANE_DOWN && !l->lanes[i]->info.retired) return false;
    return true;
}

sd_status sd_lanes_send(sd_lanes *l, int i, const Specd__Envelope *env, char *err, size_t errlen)
{
    if (i < 0 || (size_t)i >= l->n) return sd_seterr(err, errlen, SD_ERR_ARG, "no lane %d", i);
    lane *ln = l->lanes[i];
    sd_status st = sd_msg_send(ln->sock, NULL, env, err, errlen);
    if (sd_msg_readable(ln->sock)) event_active(ln->ev, EV_READ, 0);
    return st;
}

void sd_lanes_add_inflight(sd_lanes *l, int i, int delta)
{
    if (i >= 0 && (size_t)i < l->n) {
        l->lanes[i]->info.inflight += delta;
        if (l->lanes[i]->info.inflight < 0) l->lanes[i]->info.inflight = 0;
    }
}
