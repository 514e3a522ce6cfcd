/* playground.h — the browser playground: its page at / and /playground,
 * its files under /playground/ (embedded at build time: router/playground/).
 * Every answer carries a strict Content-Security-Policy (scripts, styles,
 * images and fetches from this origin only; no inline script or style
 * attribute, no framing) and the usual security headers, and an ETag the
 * browser revalidates with. Runs on the event-loop thread. */
#ifndef SD_ROUTER_PLAYGROUND_H
#define SD_ROUTER_PLAYGROUND_H

#include <stdbool.h>

#include "metrics.h"

struct evhttp_request;

/* Whether path is the playground's (/, /playground, /playground/...). */
bool sd_playground_path(const char *path);

/* Answers a GET or HEAD of path (sd_playground_path): the file, a 304 when
 * the browser's copy is current, or a JSON 404 for a name it does not have.
 * Counted in m. */
void sd_playground_serve(struct evhttp_request *req, const char *path, sd_metrics *m);

#endif
