/* conncap.c — see conncap.h. */
#include "conncap.h"

#include <arpa/inet.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/listener.h>
#include <netinet/in.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "array.h"
#include "clock.h"
#include "errpage.h"
#include "http_api.h"
#include "log.h"

/* One connection as the router sees it. */
typedef struct conn {
    struct bufferevent *bev; /* a reference of ours */
    evutil_socket_t fd;      /* -1 until evhttp gives the bufferevent its socket */
    char peer[INET6_ADDRSTRLEN];
    double opened, idle_since, first_pending, last_byte;
    size_t pending;                                   /* bytes that came since the last request was taken */
    bool busy;                                        /* a request taken, not yet answered */
    bool served;                                      /* it answered a request before */
    bool closing;                                     /* shut down here: evhttp frees it next */
    bool fresh;                                       /* its peer learned at this sweep */
    void (*user_cb)(struct evhttp_request *, void *); /* sd_conncap_on_complete's */
    void *user_arg;
} conn;

struct sd_conncap {
    struct event_base *base;
    struct evhttp_bound_socket *const *bound;
    sd_conncap_opts o;
    conn **conns;
    size_t n, cap;
    struct event *sweep;
    bool paused;
    unsigned long reached, closed[SD_CONNCAP_REASONS];
};

static const char *const g_reason[SD_CONNCAP_REASONS] = {"silent", "keepalive", "per_client", "evicted", "timeout"};

const char *sd_conncap_reason_name(sd_conncap_reason r) { return r >= 0 && r < SD_CONNCAP_REASONS ? g_reason[r] : "?"; }

static void listener_enable(sd_conncap *c, bool on)
{
    struct evconnlistener *l = *c->bound ? evhttp_bound_socket_get_listener(*c->bound) : NULL;
    if (!l || c->paused == !on) return;
    if (on) evconnlistener_enable(l);
    else evconnlistener_disable(l);
    c->paused = !on;
}

/* A bufferevent evhttp has freed: its callbacks are gone. */
static bool released(struct bufferevent *bev)
{
    bufferevent_data_cb r = NULL, w = NULL;
    bufferevent_event_cb e = NULL;
    void *arg = NULL;
    bufferevent_getcb(bev, &r, &w, &e, &arg);
    return !r && !w && !e;
}

static void arm(sd_conncap *c)
{
    struct timeval tv = {0, SD_CONNCAP_SWEEP_MS * 1000};
    evtimer_add(c->sweep, &tv);
}

/* Bytes arriving on a connection (the input buffer's callback). */
static void on_input(struct evbuffer *buf, const struct evbuffer_cb_info *info, void *arg)
{
    (void)buf;
    conn *k = arg;
    if (!info->n_added) return;
    double now = sd_now_s();
    if (!k->pending) k->first_pending = now;
    k->pending += info->n_added;
    k->last_byte = now;
}

/* The socket of k once evhttp has given it one, and its peer's address. */
static void learn_peer(conn *k)
{
    if (k->fd >= 0) return;
    evutil_socket_t fd = bufferevent_getfd(k->bev);
    if (fd < 0) return;
    k->fd = fd;
    struct sockaddr_storage ss;
    socklen_t sl = sizeof ss;
    if (getpeername(fd, (struct sockaddr *)&ss, &sl) != 0) return;
    if (ss.ss_family == AF_INET) inet_ntop(AF_INET, &((struct sockaddr_in *)&ss)->sin_addr, k->peer, sizeof k->peer);
    else if (ss.ss_family == AF_INET6)
        inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&ss)->sin6_addr, k->peer, sizeof k->peer);
}

/* Closes k (not in flight) for reason r: a 408 first for a stalled request. */
static void close_conn(sd_conncap *c, conn *k, sd_conncap_reason r)
{
    if (k->closing || k->busy || k->fd < 0) return;
    if (r == SD_CONNCAP_TIMEOUT) {
        sd_api_err e;
        sd_api_fail(&e, 408, "invalid_request_error", NULL, "request_timeout",
                    "The request did not arrive in time (a %.0f s gap, or more than %.0f s in all)", c->o.body_s,
                    c->o.request_s);
        char *body = sd_api_error_json(&e), head[256];
        size_t blen = body ? strlen(body) : 0;
        int hl = snprintf(head, sizeof head,
                          "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\nConnection: close\r\n"
                          "Content-Length: %zu\r\n\r\n",
                          blen);
        if (send(k->fd, head, (size_t)hl, MSG_NOSIGNAL | MSG_DONTWAIT) == hl && body)
            (void)send(k->fd, body, blen, MSG_NOSIGNAL | MSG_DONTWAIT);
        free(body);
    }
    shutdown(k->fd, SHUT_RDWR); /* evhttp reads the end and frees the connection */
    k->closing = true;
    c->closed[r]++;
    if (r == SD_CONNCAP_SILENT || r == SD_CONNCAP_KEEPALIVE)
        SD_DEBUG("connection from %s closed: %s", k->peer[0] ? k->peer : "?", g_reason[r]);
    else
        SD_WARN_LIMITED("connection from %s closed: %s (--max-connections%s)", k->peer[0] ? k->peer : "?", g_reason[r],
                        r == SD_CONNCAP_PER_CLIENT ? "-per-client"
                        : r == SD_CONNCAP_TIMEOUT  ? ", a 408"
                                                   : "");
}

/* The timeouts of k at now. */
static void check_times(sd_conncap *c, conn *k, double now)
{
    if (k->busy || k->closing) return;
    if (k->pending > 0) {
        if (now - k->last_byte > c->o.body_s || now - k->first_pending > c->o.request_s)
            close_conn(c, k, SD_CONNCAP_TIMEOUT);
    } else if (!k->served) {
        if (now - k->opened > c->o.first_byte_s) close_conn(c, k, SD_CONNCAP_SILENT);
    } else if (now - k->idle_since > c->o.keepalive_s) {
        close_conn(c, k, SD_CONNCAP_KEEPALIVE);
    }
}

static bool idle(const conn *k) { return !k->busy && !k->closing && !k->pending && k->fd >= 0; }

/* Live (not closing) connections from peer, counted. */
static int from_peer(const sd_conncap *c, const char *peer)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++) n += !c->conns[i]->closing && !strcmp(c->conns[i]->peer, peer);
    return n;
}

/* A client that opened k: over per_client, its newest idle connections close. */
static void per_client(sd_conncap *c, const conn *k)
{
    int over = from_peer(c, k->peer) - c->o.per_client;
    for (size_t i = c->n; over > 0 && i-- > 0;) {
        conn *q = c->conns[i];
        if (idle(q) && !strcmp(q->peer, k->peer)) {
            close_conn(c, q, SD_CONNCAP_PER_CLIENT);
            over--;
        }
    }
}

static int live(const sd_conncap *c)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++) n += !c->conns[i]->closing;
    return n;
}

/* At the cap: the oldest idle connections make room, else the listener
 * pauses until one closes. */
static void make_room(sd_conncap *c)
{
    int n = live(c);
    for (size_t i = 0; i < c->n && n >= c->o.max; i++)
        if (idle(c->conns[i])) {
            close_conn(c, c->conns[i], SD_CONNCAP_EVICTED);
            n--;
        }
    if (n < c->o.max) {
        listener_enable(c, true);
    } else if (!c->paused) {
        c->reached++;
        SD_WARN_LIMITED("%d connections open (--max-connections), none idle to close: not accepting more until one "
                        "closes",
                        c->o.max);
        listener_enable(c, false);
    }
}

static void drop(conn *k)
{
    evbuffer_remove_cb(bufferevent_get_input(k->bev), on_input, k);
    bufferevent_decref(k->bev); /* the last reference: the socket closes */
    free(k);
}

static void on_sweep(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sd_conncap *c = arg;
    size_t w = 0;
    double now = sd_now_s();
    for (size_t i = 0; i < c->n; i++) {
        conn *k = c->conns[i];
        if (released(k->bev)) {
            drop(k);
            continue;
        }
        bool known = k->fd >= 0;
        learn_peer(k);
        check_times(c, k, now);
        c->conns[w++] = k;
        if (!known && k->fd >= 0) k->fresh = true;
    }
    c->n = w;
    for (size_t i = 0; i < c->n; i++) /* the clients of the connections that came since the last sweep */
        if (c->conns[i]->fresh) {
            c->conns[i]->fresh = false;
            if (c->conns[i]->peer[0]) per_client(c, c->conns[i]);
        }
    if (live(c) >= c->o.max || c->paused) make_room(c);
    if (c->n) arm(c);
}

static struct bufferevent *on_new_connection(struct event_base *base, void *arg)
{
    sd_conncap *c = arg;
    struct bufferevent *bev = bufferevent_socket_new(base, -1, BEV_OPT_CLOSE_ON_FREE);
    if (!bev) return NULL;
    sd_errpage_watch(bev);
    conn *k = calloc(1, sizeof *k);
    if (!k || sd_grow(&c->conns, &c->cap, c->n + 1, sizeof *c->conns) != SD_OK) {
        free(k);
        return bev; /* uncounted, still served */
    }
    double now = sd_now_s();
    *k = (conn){.bev = bev, .fd = -1, .opened = now, .idle_since = now};
    bufferevent_incref(bev);
    evbuffer_add_cb(bufferevent_get_input(bev), on_input, k);
    c->conns[c->n++] = k;
    if (c->n == 1) arm(c);
    if (live(c) >= c->o.max) make_room(c);
    return bev;
}

/* The record of req's connection. */
static conn *conn_of(sd_conncap *c, struct evhttp_request *req)
{
    struct evhttp_connection *ec = evhttp_request_get_connection(req);
    struct bufferevent *bev = ec ? evhttp_connection_get_bufferevent(ec) : NULL;
    for (size_t i = 0; bev && i < c->n; i++)
        if (c->conns[i]->bev == bev) return c->conns[i];
    return NULL;
}

static void on_done(struct evhttp_request *req, void *arg)
{
    conn *k = arg;
    k->busy = false;
    k->served = true;
    k->idle_since = sd_now_s();
    if (k->pending) k->first_pending = k->idle_since; /* the next request's bytes: its clock starts now */
    void (*cb)(struct evhttp_request *, void *) = k->user_cb;
    void *ua = k->user_arg;
    k->user_cb = NULL;
    if (cb) cb(req, ua);
}

void sd_conncap_begin(sd_conncap *c, struct evhttp_request *req)
{
    conn *k = c ? conn_of(c, req) : NULL;
    if (!k) return;
    k->busy = true;
    k->pending = 0;
    k->user_cb = NULL;
    evhttp_request_set_on_complete_cb(req, on_done, k);
}

void sd_conncap_on_complete(sd_conncap *c, struct evhttp_request *req, void (*cb)(struct evhttp_request *, void *),
                            void *arg)
{
    conn *k = c ? conn_of(c, req) : NULL;
    if (!k || !k->busy) {
        evhttp_request_set_on_complete_cb(req, cb, arg);
        return;
    }
    k->user_cb = cb;
    k->user_arg = arg;
}

sd_status sd_conncap_new(struct event_base *base, struct evhttp *http, struct evhttp_bound_socket *const *bound,
                         const sd_conncap_opts *o, sd_conncap **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_conncap *c = calloc(1, sizeof *c);
    if (!c) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    c->base = base;
    c->bound = bound;
    c->o = *o;
    if (c->o.max < 1) c->o.max = 1;
    if (c->o.per_client < 1) c->o.per_client = 1;
    c->sweep = evtimer_new(base, on_sweep, c);
    if (!c->sweep) {
        free(c);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "cannot create the connection sweep timer");
    }
    evhttp_set_bevcb(http, on_new_connection, c);
    *out = c;
    return SD_OK;
}

int sd_conncap_open(const sd_conncap *c)
{
    int n = 0;
    for (size_t i = 0; i < c->n; i++) n += !released(c->conns[i]->bev);
    return n;
}

unsigned long sd_conncap_reached(const sd_conncap *c) { return c->reached; }

unsigned long sd_conncap_closed(const sd_conncap *c, sd_conncap_reason r)
{
    return r >= 0 && r < SD_CONNCAP_REASONS ? c->closed[r] : 0;
}

void sd_conncap_free(sd_conncap *c)
{
    if (!c) return;
    for (size_t i = 0; i < c->n; i++) drop(c->conns[i]);
    if (c->sweep) event_free(c->sweep);
    free(c->conns);
    free(c);
}
