/* vf_front.c — see vf_front.h. */
#include "vf_front.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "array.h"
#include "clock.h"
#include "log.h"
#include "msg.h"

#define POLL_MS 100
#define MAX_FRAMES 8         /* frames of one message relayed (more: the rest are dropped) */
#define HEALTH_MAX_BYTES 64  /* a HealthRequest envelope is a dozen bytes: only frames this small are looked at */
#define MAX_BATCH 256        /* messages relayed per direction before polling again */
#define SEND_TIMEOUT_MS 1000 /* a main thread whose queue stays full this long loses the message (logged) */

struct sd_vf_front {
    void *ext;   /* ROUTER towards the routers (front thread) */
    void *relay; /* PAIR, bound inproc (front thread) */
    void *inner; /* PAIR, connected (main thread) */
    pthread_t thread;
    bool started;
    atomic_bool stop;
    atomic_bool busy;   /* the main thread computes: health is answered here */
    pthread_mutex_t mu; /* guards the snapshot */
    uint8_t *snap;      /* packed HealthReply envelope */
    size_t snap_len, snap_cap;
    double snap_ms; /* when it was published (sd_now_ms) */
};

/* Receives one whole message (at most MAX_FRAMES frames kept, the rest
 * dropped) from sock. Returns the number of frames kept (0: nothing there). */
static int recv_message(void *sock, zmq_msg_t *m)
{
    int n = 0;
    for (;;) {
        zmq_msg_t part;
        zmq_msg_init(&part);
        if (zmq_msg_recv(&part, sock, n == 0 ? ZMQ_DONTWAIT : 0) < 0) {
            zmq_msg_close(&part);
            return n;
        }
        bool more = zmq_msg_more(&part);
        if (n < MAX_FRAMES) m[n++] = part;
        else zmq_msg_close(&part);
        if (!more) return n;
    }
}

/* Sends frames m[0..n) as one message. Returns the number of frames sent
 * (with errno set when < n); the unsent ones are still the caller's. */
static int send_frames(void *sock, zmq_msg_t *m, int n, int flags)
{
    int i = 0;
    for (; i < n; i++)
        if (zmq_msg_send(&m[i], sock, flags | (i + 1 < n ? ZMQ_SNDMORE : 0)) < 0) break;
    return i;
}

static void close_frames(zmq_msg_t *m, int from, int n)
{
    for (int i = from; i < n; i++) zmq_msg_close(&m[i]);
}

/* Sends frames m[0..n) as one message (consumed; dropped on failure). */
static void send_message(void *sock, zmq_msg_t *m, int n, int flags, const char *towards)
{
    int i = send_frames(sock, m, n, flags);
    if (i < n) SD_WARN_LIMITED("relay towards %s dropped a message: %s", towards, zmq_strerror(zmq_errno()));
    close_frames(m, i, n);
}

/* The router the unsent event m[0..n) was for is gone (ZeroMQ no longer
 * knows its identity: the process died, or it reconnected as another peer,
 * which never gets this request's tokens): the main thread is told to
 * cancel the request, as the router would have, so that it stops computing
 * for nobody and frees its KV. Consumes m. */
static void cancel_for_gone(sd_vf_front *f, zmq_msg_t *m, int n)
{
    Specd__Envelope *env = NULL;
    char err[128];
    uint64_t rid = 0;
    if (n == 2 && zmq_msg_size(&m[0]) <= sizeof((sd_msg_id *)0)->data &&
        sd_msg_decode(zmq_msg_data(&m[1]), zmq_msg_size(&m[1]), &env, err, sizeof err) == SD_OK &&
        env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT &&
        env->token_event->finish == SPECD__FINISH_REASON__FINISH_NONE)
        rid = env->token_event->request_id;
    sd_msg_free(env);
    if (!rid) {
        close_frames(m, 0, n);
        return;
    }
    SD_INFO("request %llu: its router is gone; cancelling", (unsigned long long)rid);
    Specd__Cancel c = SPECD__CANCEL__INIT;
    Specd__Envelope cenv = SPECD__ENVELOPE__INIT;
    c.request_id = rid;
    cenv.body_case = SPECD__ENVELOPE__BODY_CANCEL;
    cenv.cancel = &c;
    size_t len = specd__envelope__get_packed_size(&cenv);
    zmq_msg_close(&m[1]);
    if (zmq_msg_init_size(&m[1], len) != 0) {
        zmq_msg_close(&m[0]);
        return;
    }
    specd__envelope__pack(&cenv, zmq_msg_data(&m[1]));
    send_message(f->relay, m, 2, 0, "the main thread");
}

/* Relays m[0..n) from the main thread to a router (consumed). */
static void to_router(sd_vf_front *f, zmq_msg_t *m, int n)
{
    int i = send_frames(f->ext, m, n, ZMQ_DONTWAIT);
    if (i == n) return;
    if (i == 0 && zmq_errno() == EHOSTUNREACH) {
        cancel_for_gone(f, m, n);
        return;
    }
    SD_WARN_LIMITED("relay towards a router dropped a message: %s", zmq_strerror(zmq_errno()));
    close_frames(m, i, n);
}

/* Answers a health request env from identity id with the snapshot. False
 * when there is none fresh enough (the main thread then answers). */
static bool answer_health(sd_vf_front *f, const zmq_msg_t *id, const Specd__HealthRequest *h)
{
    Specd__Envelope *rep = NULL;
    pthread_mutex_lock(&f->mu);
    if (f->snap_len && sd_now_ms() - f->snap_ms < SD_VF_FRONT_STALL_MS)
        rep = specd__envelope__unpack(NULL, f->snap_len, f->snap);
    pthread_mutex_unlock(&f->mu);
    if (!rep || rep->body_case != SPECD__ENVELOPE__BODY_HEALTH_REPLY) {
        if (rep) specd__envelope__free_unpacked(rep, NULL);
        return false;
    }
    rep->health_reply->nonce = h->nonce;
    sd_msg_id peer;
    peer.len = zmq_msg_size((zmq_msg_t *)id);
    memcpy(peer.data, zmq_msg_data((zmq_msg_t *)id), peer.len);
    char err[256];
    if (sd_msg_send(f->ext, &peer, rep, err, sizeof err) != SD_OK) SD_WARN_LIMITED("health reply not sent: %s", err);
    specd__envelope__free_unpacked(rep, NULL);
    return true;
}

/* True when message m[0..n) is a health request the front answered (only
 * while the main thread is busy). */
static bool handled_here(sd_vf_front *f, zmq_msg_t *m, int n)
{
    if (!atomic_load(&f->busy) || n != 2 || zmq_msg_size(&m[0]) > sizeof((sd_msg_id *)0)->data ||
        zmq_msg_size(&m[1]) > HEALTH_MAX_BYTES)
        return false;
    Specd__Envelope *env = NULL;
    char err[128];
    if (sd_msg_decode(zmq_msg_data(&m[1]), zmq_msg_size(&m[1]), &env, err, sizeof err) != SD_OK) return false;
    bool done = env->body_case == SPECD__ENVELOPE__BODY_HEALTH_REQUEST && answer_health(f, &m[0], env->health_request);
    sd_msg_free(env);
    return done;
}

static void *front_main(void *arg)
{
    sd_vf_front *f = arg;
    while (!atomic_load(&f->stop)) {
        zmq_pollitem_t it[2] = {{f->ext, 0, ZMQ_POLLIN, 0}, {f->relay, 0, ZMQ_POLLIN, 0}};
        if (zmq_poll(it, 2, POLL_MS) < 0) {
            if (zmq_errno() == ETERM) break;
            continue; /* EINTR */
        }
        zmq_msg_t m[MAX_FRAMES];
        for (int k = 0; k < MAX_BATCH && (it[0].revents & ZMQ_POLLIN); k++) {
            int n = recv_message(f->ext, m);
            if (n == 0) break;
            if (handled_here(f, m, n)) {
                for (int i = 0; i < n; i++) zmq_msg_close(&m[i]);
                continue;
            }
            send_message(f->relay, m, n, 0, "the main thread"); /* waits while the main thread's queue is full */
        }
        for (int k = 0; k < MAX_BATCH && (it[1].revents & ZMQ_POLLIN); k++) {
            int n = recv_message(f->relay, m);
            if (n == 0) break;
            to_router(f, m, n);
        }
    }
    return NULL;
}

sd_status sd_vf_front_new(void *zctx, const char *endpoint, const sd_curve *curve, int hwm, sd_vf_front **out,
                          void **inner, char *err, size_t errlen)
{
    *out = NULL;
    *inner = NULL;
    sd_vf_front *f = calloc(1, sizeof *f);
    if (!f) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&f->mu, NULL);
    atomic_init(&f->stop, false);
    atomic_init(&f->busy, false);
    char name[64];
    snprintf(name, sizeof name, "inproc://specd-vf-front-%p", (void *)f);
    f->ext = sd_msg_socket(zctx, ZMQ_ROUTER, hwm);
    f->relay = sd_msg_socket(zctx, ZMQ_PAIR, hwm);
    f->inner = sd_msg_socket(zctx, ZMQ_PAIR, hwm);
    sd_status st = SD_OK;
    if (!f->ext || !f->relay || !f->inner)
        st = sd_seterr(err, errlen, SD_ERR_IO, "cannot create sockets: %s", zmq_strerror(zmq_errno()));
    else if (zmq_setsockopt(f->ext, ZMQ_ROUTER_MANDATORY, &(int){1}, sizeof(int)) != 0)
        st = sd_seterr(err, errlen, SD_ERR_IO, "cannot set ZMQ_ROUTER_MANDATORY: %s", zmq_strerror(zmq_errno()));
    else if (curve && sd_curve_server(curve, f->ext, err, errlen) != SD_OK) st = SD_ERR_IO;
    else if (zmq_bind(f->ext, endpoint) != 0)
        st = sd_seterr(err, errlen, SD_ERR_IO, "cannot bind %s: %s", endpoint, zmq_strerror(zmq_errno()));
    else if (zmq_setsockopt(f->relay, ZMQ_SNDTIMEO, &(int){SEND_TIMEOUT_MS}, sizeof(int)) != 0 ||
             zmq_bind(f->relay, name) != 0 || zmq_connect(f->inner, name) != 0)
        st = sd_seterr(err, errlen, SD_ERR_IO, "cannot set up the relay: %s", zmq_strerror(zmq_errno()));
    else if (pthread_create(&f->thread, NULL, front_main, f) != 0)
        st = sd_seterr(err, errlen, SD_ERR_IO, "cannot start the front thread");
    else f->started = true;
    if (st != SD_OK) {
        sd_vf_front_free(f);
        return st;
    }
    *out = f;
    *inner = f->inner;
    return SD_OK;
}

sd_status sd_vf_front_publish(sd_vf_front *f, const Specd__Envelope *health_reply)
{
    size_t n = specd__envelope__get_packed_size(health_reply);
    pthread_mutex_lock(&f->mu);
    sd_status st = sd_grow(&f->snap, &f->snap_cap, n ? n : 1, 1);
    if (st == SD_OK) {
        specd__envelope__pack(health_reply, f->snap);
        f->snap_len = n;
        f->snap_ms = sd_now_ms();
    }
    pthread_mutex_unlock(&f->mu);
    return st;
}

void sd_vf_front_busy(sd_vf_front *f, bool busy) { atomic_store(&f->busy, busy); }

void sd_vf_front_free(sd_vf_front *f)
{
    if (!f) return;
    atomic_store(&f->stop, true);
    if (f->started) pthread_join(f->thread, NULL);
    if (f->ext) zmq_close(f->ext);
    if (f->relay) zmq_close(f->relay);
    if (f->inner) zmq_close(f->inner);
    pthread_mutex_destroy(&f->mu);
    free(f->snap);
    free(f);
}
