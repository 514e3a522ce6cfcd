/* reply.h — the router's HTTP replies that carry a whole JSON body: success
 * bodies and OpenAI-shaped errors, each counted in the status metrics.
 * Used by the endpoints (server.c) and by generation (gen.c). Runs on the
 * event-loop thread. */
#ifndef SD_REPLY_H
#define SD_REPLY_H

#include "http_api.h"
#include "metrics.h"

struct evhttp_request;

/* Sends body (NULL: empty) as application/json with status; counts it. */
void sd_reply_json(struct evhttp_request *req, int status, const char *body, sd_metrics *m);

/* Sends e as OpenAI's error JSON (Retry-After: 1 on 429 / 503); counts it. */
void sd_reply_error(struct evhttp_request *req, const sd_api_err *e, sd_metrics *m);

#endif
