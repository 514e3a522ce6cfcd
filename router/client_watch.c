/* client_watch.c — see client_watch.h. */
#include "client_watch.h"

#include <errno.h>
#include <event2/buffer.h>
#include <event2/bufferevent.h>
#include <event2/http_struct.h> /* the request's HTTP version: libevent 2.1 has no accessor */
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "log.h"

struct sd_cwatch {
    struct event *read; /* EV_READ on the socket until the FIN */
    struct event *poll; /* after the FIN: is the connection reset? */
    evutil_socket_t fd;
    struct bufferevent *bev;
    const bool *started;
    bool http11;
    sd_cwatch_gone_cb gone;
    void *arg;
};

/* Reads suspended: a bucket of one byte, refilled by one a day, driven far
 * below zero. Shared by every paused connection (libevent keeps the pointer). */
static struct ev_token_bucket_cfg *paused_cfg(void)
{
    static struct ev_token_bucket_cfg *cfg;
    struct timeval day = {86400, 0};
    if (!cfg) cfg = ev_token_bucket_cfg_new(1, 1, EV_RATE_LIMIT_MAX, EV_RATE_LIMIT_MAX, &day);
    return cfg;
}

/* evhttp re-enables reading at every write of a stream (to notice a close),
 * and would take a half-close for a hang-up: reading is suspended through a
 * rate limit, which evhttp does not touch, until the answer is written. */
static bool pause_reading(struct bufferevent *bev)
{
    struct ev_token_bucket_cfg *cfg = paused_cfg();
    return cfg && bufferevent_set_rate_limit(bev, cfg) == 0 && bufferevent_decrement_read_limit(bev, 1 << 30) == 0;
}

void sd_cwatch_answered(struct evhttp_request *req)
{
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    if (bev) bufferevent_set_rate_limit(bev, NULL);
}

static void fire_gone(sd_cwatch *w)
{
    sd_cwatch_stop(w);
    w->gone(w->arg);
}

/* True when the connection was reset (or failed): the client is gone. */
static bool reset(evutil_socket_t fd)
{
    struct tcp_info ti;
    socklen_t len = sizeof ti;
    if (getsockopt(fd, IPPROTO_TCP, TCP_INFO, &ti, &len) == 0) return ti.tcpi_state == TCP_CLOSE;
    int err = 0;
    len = sizeof err;
    return getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0;
}

static void arm_poll(sd_cwatch *w)
{
    struct timeval tv = {0, SD_CWATCH_POLL_MS * 1000};
    evtimer_add(w->poll, &tv);
}

static void on_poll(evutil_socket_t fd, short what, void *arg)
{
    (void)fd;
    (void)what;
    sd_cwatch *w = arg;
    if (reset(w->fd)) fire_gone(w);
    else arm_poll(w);
}

/* The client's FIN: make it receive something (see the header), then poll. */
static void on_fin(sd_cwatch *w)
{
    static const char probe[] = "HTTP/1.1 100 Continue\r\n\r\n";
    if (w->http11 && !*w->started && evbuffer_get_length(bufferevent_get_output(w->bev)) == 0) {
        ssize_t n = send(w->fd, probe, sizeof probe - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
            fire_gone(w);
            return;
        }
        /* what the socket did not take goes first in the output buffer: the
         * answer evhttp writes later follows it */
        size_t sent = n > 0 ? (size_t)n : 0;
        if (sent < sizeof probe - 1)
            evbuffer_add(bufferevent_get_output(w->bev), probe + sent, sizeof probe - 1 - sent);
    }
    arm_poll(w);
}

static void on_readable(evutil_socket_t fd, short what, void *arg)
{
    (void)what;
    sd_cwatch *w = arg;
    char c;
    ssize_t n = recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) return;
    event_del(w->read);
    if (n > 0) return; /* the client pipelined its next request: libevent reads it later */
    if (n < 0) fire_gone(w);
    else on_fin(w);
}

sd_status sd_cwatch_new(struct event_base *base, struct evhttp_request *req, const bool *started,
                        sd_cwatch_gone_cb gone, void *arg, sd_cwatch **out, char *err, size_t errlen)
{
    *out = NULL;
    struct evhttp_connection *c = evhttp_request_get_connection(req);
    struct bufferevent *bev = c ? evhttp_connection_get_bufferevent(c) : NULL;
    evutil_socket_t fd = bev ? bufferevent_getfd(bev) : -1;
    if (fd < 0) return sd_seterr(err, errlen, SD_ERR_ARG, "client watch: the request's connection has no socket");
    /* Streamed chunks are small: without this, Nagle's algorithm holds the
     * first one until the client's delayed ACK (~40 ms on keep-alive). */
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    sd_cwatch *w = calloc(1, sizeof *w);
    if (!w) return sd_seterr(err, errlen, SD_ERR_NOMEM, "client watch: out of memory");
    *w = (sd_cwatch){.fd = fd,
                     .bev = bev,
                     .started = started,
                     .gone = gone,
                     .arg = arg,
                     .http11 = req->major == 1 && req->minor >= 1};
    w->read = event_new(base, fd, EV_READ | EV_PERSIST, on_readable, w);
    w->poll = evtimer_new(base, on_poll, w);
    if (!w->read || !w->poll || event_add(w->read, NULL) != 0 || !pause_reading(bev)) {
        bufferevent_set_rate_limit(bev, NULL);
        sd_cwatch_free(w);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "client watch: cannot set up the connection's events");
    }
    *out = w;
    return SD_OK;
}

void sd_cwatch_stop(sd_cwatch *w)
{
    if (!w) return;
    if (w->read) event_del(w->read);
    if (w->poll) event_del(w->poll);
}

void sd_cwatch_free(sd_cwatch *w)
{
    if (!w) return;
    if (w->read) event_free(w->read);
    if (w->poll) event_free(w->poll);
    free(w);
}
