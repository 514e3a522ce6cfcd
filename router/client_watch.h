/* client_watch.h — tells a client that hung up from one that only
 * half-closed, while its request is being answered.
 *
 * libevent 2.1 does not read from a connection while its request is being
 * answered, so the router watches the socket itself. An end of file there
 * (the client's FIN) is ambiguous: the client closed the socket (it hung up:
 * the request must be cancelled) or only shut down its sending side
 * (shutdown(SHUT_WR), as `nc -N` and some proxies do: it still waits for the
 * answer). TCP tells the two apart only when data reaches the client: a
 * closed socket answers it with a reset. So on a FIN the watch makes the
 * client receive something:
 *   - nothing answered yet (HTTP/1.1): an interim "100 Continue" response,
 *     which HTTP/1.1 clients must accept before the final one (RFC 9110,
 *     15.2) — it is written straight to the socket, whose output is empty;
 *   - a stream already started: its next event does it.
 * and then polls the socket for the reset (every SD_CWATCH_POLL_MS); only a
 * reset (or an error) calls gone(). A half-closed client thus gets its whole
 * answer; one that closed is cancelled about a round trip after its FIN
 * (streams: after their next event). HTTP/1.0 clients may not be sent 1xx:
 * a FIN from one is taken as a half-close until a write fails.
 *
 * evhttp itself must not see the FIN either: it re-enables reading at every
 * write of a stream and fails the connection at an end of file. So reading
 * is suspended while the request is answered (through a rate limit, which
 * evhttp leaves alone) and resumed by sd_cwatch_answered once the answer is
 * written — the next request of a kept-alive connection is read then.
 *
 * Single-threaded: the router's event loop. */
#ifndef SD_CLIENT_WATCH_H
#define SD_CLIENT_WATCH_H

#include <event2/event.h>
#include <event2/http.h>
#include <stdbool.h>
#include <stddef.h>

#include "status.h"

#define SD_CWATCH_POLL_MS 100

typedef struct sd_cwatch sd_cwatch;

/* Called once, when the client is known to be gone. */
typedef void (*sd_cwatch_gone_cb)(void *arg);

/* Watches the connection of req and suspends its reading (also sets
 * TCP_NODELAY on it); the watch goes to *out, freed by the caller with
 * sd_cwatch_free. *started says whether the answer has begun (read at the
 * FIN). Returns SD_OK, or with *out NULL and a message in err (nothing is
 * watched then): SD_ERR_ARG when the connection has no socket, SD_ERR_NOMEM
 * when memory or the connection's events cannot be had. */
sd_status sd_cwatch_new(struct event_base *base, struct evhttp_request *req, const bool *started,
                        sd_cwatch_gone_cb gone, void *arg, sd_cwatch **out, char *err, size_t errlen);

/* The answer of req is written: its connection reads again. Call it from
 * the request's on-complete callback of every watched request. */
void sd_cwatch_answered(struct evhttp_request *req);

/* Stops watching (no callback after this); the watch stays allocated. */
void sd_cwatch_stop(sd_cwatch *w);

/* Stops and frees; NULL is a no-op. */
void sd_cwatch_free(sd_cwatch *w);

#endif
