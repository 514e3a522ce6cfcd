/* conncap.h — admission of the router's HTTP connections: no client can
 * take the service down by opening sockets.
 *
 * libevent 2.1's evhttp has no connection limit and no hook for a closed
 * connection, only one for a new one (evhttp_set_bevcb: it makes the
 * connection's bufferevent). So this module makes every bufferevent itself
 * and keeps a reference to it: when evhttp frees a connection, the
 * bufferevent is disabled and its callbacks cleared but lives on through that
 * reference, which a sweep (every SD_CONNCAP_SWEEP_MS while connections are
 * open) notices and drops — the socket closes then. A callback on each
 * connection's input buffer counts the bytes that arrive, and the router
 * marks each request it takes (sd_conncap_begin) and answers
 * (sd_conncap_on_complete), so the sweep knows each connection's state:
 *
 *   - in flight (a request taken, not yet answered): never closed here;
 *   - silent since it opened: closed after `first_byte_s`;
 *   - idle after an answer (keep-alive): closed after `keepalive_s`;
 *   - sending a request: a 408 (the OpenAI-shaped JSON error) and closed when
 *     no byte came for `body_s`, or the request took longer than `request_s`
 *     to arrive (headers and body).
 *
 * A client (an IP address) with more than `per_client` connections has its
 * newest idle ones closed. At `max` connections the oldest idle one is
 * closed for each new one; only when none is idle does the listening socket
 * stop accepting (new connections wait in the kernel's backlog) until one
 * closes. Closing is shutdown(2) on the socket: evhttp sees the end and frees
 * the connection itself. Every close is counted by reason and logged at most
 * a few lines a second. Each bufferevent is also watched for libevent's own
 * HTML error replies (errpage.h).
 *
 * Single-threaded: the router's event loop. */
#ifndef SD_CONNCAP_H
#define SD_CONNCAP_H

#include <event2/event.h>
#include <event2/http.h>

#include "status.h"

#define SD_CONNCAP_SWEEP_MS 20

typedef struct sd_conncap sd_conncap;

typedef struct sd_conncap_opts {
    int max;             /* open connections (>= 1) */
    int per_client;      /* open connections of one client address (>= 1) */
    double first_byte_s; /* a connection that has sent nothing */
    double keepalive_s;  /* a connection idle after an answer */
    double body_s;       /* a request with no byte arriving */
    double request_s;    /* a whole request (headers and body) arriving */
} sd_conncap_opts;

/* Why connections were closed (sd_conncap_closed). */
typedef enum sd_conncap_reason {
    SD_CONNCAP_SILENT = 0,     /* nothing sent within first_byte_s */
    SD_CONNCAP_KEEPALIVE = 1,  /* idle for keepalive_s after an answer */
    SD_CONNCAP_PER_CLIENT = 2, /* over per_client */
    SD_CONNCAP_EVICTED = 3,    /* the oldest idle one, to admit a new one at max */
    SD_CONNCAP_TIMEOUT = 4,    /* a request that stalled: 408 */
    SD_CONNCAP_REASONS = 5
} sd_conncap_reason;

/* Admits http's connections by o. *bound is the listening socket to pause
 * (read at each use; NULL once the owner closed it). */
sd_status sd_conncap_new(struct event_base *base, struct evhttp *http, struct evhttp_bound_socket *const *bound,
                         const sd_conncap_opts *o, sd_conncap **out, char *err, size_t errlen);

/* The router took req (its handler runs): the connection is in flight until
 * req is answered — conncap's own completion callback notes that, and calls
 * the one set by sd_conncap_on_complete (evhttp keeps one per request). */
void sd_conncap_begin(sd_conncap *c, struct evhttp_request *req);

/* evhttp_request_set_on_complete_cb for a request taken with
 * sd_conncap_begin (else as that function). c may be NULL. */
void sd_conncap_on_complete(sd_conncap *c, struct evhttp_request *req, void (*cb)(struct evhttp_request *, void *),
                            void *arg);

/* Open connections now. */
int sd_conncap_open(const sd_conncap *c);

/* Times the cap was reached with no idle connection to close (the listener paused). */
unsigned long sd_conncap_reached(const sd_conncap *c);

/* Connections closed for reason r. */
unsigned long sd_conncap_closed(const sd_conncap *c, sd_conncap_reason r);

/* The name of reason r in /metrics ("silent", "keepalive", "per_client", "evicted", "timeout"). */
const char *sd_conncap_reason_name(sd_conncap_reason r);

/* Drops the references (after evhttp_free) and frees; NULL is a no-op. */
void sd_conncap_free(sd_conncap *c);

#endif
