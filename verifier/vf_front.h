/* vf_front.h — the verifier's front thread: its router socket, and health
 * answered while the main thread computes.
 *
 * The main thread runs one engine step at a time; a step can take long (a
 * prefill chunk of --prefill-budget positions, a slow device). Routers
 * declare a lane down after a few unanswered health checks (router/lanes.c),
 * so health must not wait for the step. The front thread owns the ROUTER
 * socket routers connect to (bound on --listen, CURVE when configured) and
 * relays every message between it and an inproc PAIR socket the main
 * thread owns, frame for frame: [router identity, envelope] both ways
 * (proto/msg.h: a PAIR socket carries the identity frame as a ROUTER does).
 * While the main thread computes (sd_vf_front_busy) the front answers
 * health requests itself, from the last state the main thread published
 * (sd_vf_front_publish: a HealthReply envelope, published before steps),
 * with the request's nonce. Otherwise it relays them too, and the main
 * thread answers with its state of that moment — so a client that has seen
 * a request end and then asks health sees it ended.
 *
 * A main thread that has published nothing for SD_VF_FRONT_STALL_MS (stuck:
 * no step ends) gets its health requests relayed instead of answered, so it
 * misses them like before and the router takes the lane down.
 *
 * The router socket is ZMQ_ROUTER_MANDATORY: an event for a router that is
 * gone (died, or reconnected as another peer — it never gets that request's
 * tokens) fails to send, and the front then relays a Cancel of that request
 * to the main thread in the router's name, so that nothing is computed or
 * held for nobody.
 *
 * Threading: create, publish and free on the main thread; the front thread
 * touches only its own socket, the relay's other end, and the published
 * snapshot (under a mutex). */
#ifndef SD_VF_FRONT_H
#define SD_VF_FRONT_H

#include <stdbool.h>
#include <stddef.h>

#include "curve.h"
#include "specd.pb-c.h"
#include "status.h"

#define SD_VF_FRONT_STALL_MS 60000.0

typedef struct sd_vf_front sd_vf_front;

/* Binds endpoint (a CURVE server when curve is non-NULL), starts the front
 * thread, and returns the main thread's end of the relay in *inner (a PAIR
 * socket; closed by sd_vf_front_free). SD_ERR_IO (bind, thread) or
 * SD_ERR_NOMEM with a message. */
sd_status sd_vf_front_new(void *zctx, const char *endpoint, const sd_curve *curve, int hwm, sd_vf_front **out,
                          void **inner, char *err, size_t errlen);

/* Publishes the health the front thread answers with from now on (its
 * nonce is replaced by each request's). SD_ERR_NOMEM (the old state stays). */
sd_status sd_vf_front_publish(sd_vf_front *f, const Specd__Envelope *health_reply);

/* The main thread starts (busy) or ends a computation during which the
 * front answers health itself. */
void sd_vf_front_busy(sd_vf_front *f, bool busy);

/* Stops the thread, closes both sockets, frees; NULL is a no-op. */
void sd_vf_front_free(sd_vf_front *f);

#endif
