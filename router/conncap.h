/* conncap.h — a cap on the router's open HTTP connections.
 *
 * libevent 2.1's evhttp has no connection limit and no hook for a closed
 * connection, only one for a new one (evhttp_set_bevcb: it makes the
 * connection's bufferevent). So the cap makes every bufferevent itself and
 * keeps a reference to it: when evhttp frees a connection, the bufferevent
 * is disabled and its callbacks cleared but lives on through that
 * reference, which a sweep (every SD_CONNCAP_SWEEP_MS while connections are
 * open) notices and drops — the socket closes then. At the cap the
 * listening socket stops accepting (new connections wait in the kernel's
 * backlog) until a sweep finds one gone. Each bufferevent is also watched
 * for libevent's own HTML error replies (errpage.h).
 *
 * Single-threaded: the router's event loop. */
#ifndef SD_CONNCAP_H
#define SD_CONNCAP_H

#include <event2/event.h>
#include <event2/http.h>

#include "status.h"

#define SD_CONNCAP_SWEEP_MS 20

typedef struct sd_conncap sd_conncap;

/* Caps http's connections at max (>= 1). *bound is the listening socket
 * to pause (read at each use; NULL once the owner closed it). */
sd_status sd_conncap_new(struct event_base *base, struct evhttp *http, struct evhttp_bound_socket *const *bound,
                         int max, sd_conncap **out, char *err, size_t errlen);

/* Open connections now. */
int sd_conncap_open(const sd_conncap *c);

/* Times the cap was reached (the listener paused). */
unsigned long sd_conncap_reached(const sd_conncap *c);

/* Drops the references (after evhttp_free) and frees; NULL is a no-op. */
void sd_conncap_free(sd_conncap *c);

#endif
