/* gen.h — generation in the router: the lanes to the verifiers, and every
 * completion request's life from its validated body to its last byte.
 *
 *   validate (http_api) → tokenize (chat template / prompt / ids) → admit
 *   (bounded queue, 429 when full, 503 when every lane is down) → submit to
 *   the least-loaded UP lane → TokenEvents: incremental detokenisation, stop
 *   strings, SSE chunks or accumulated text → final response with usage and
 *   speculation stats.
 *
 * The HTTP front (server.c) owns an sd_gen and hands it the generation
 * requests; generation never calls back into the front. Everything runs on
 * the event base's thread. */
#ifndef SD_GEN_H
#define SD_GEN_H

#include <stddef.h>

#include "chat_template.h"
#include "http_api.h"
#include "lanes.h"
#include "metrics.h"
#include "tokenizer.h"

struct event_base;
struct evhttp_request;

typedef struct sd_gen_opts {
    const char *const *verifiers; /* lane endpoints */
    size_t n_verifiers;
    const char *model_name;     /* the served model id */
    const char *const *aliases; /* more names for it */
    size_t n_aliases;
    int max_queue;            /* waiting requests */
    size_t max_body;          /* bytes */
    double request_timeout_s; /* 0 = none */
    int lane_capacity;        /* in-flight per lane */
    int health_interval_ms;
    int max_missed;
    int default_max_tokens;
    int header_timeout_s;            /* a connection's timeout outside a generation */
    int resume_wait_s;               /* see sd_server_opts; 0 = a request no lane can take over fails */
    const char *const *verifier_dns; /* lanes from DNS names (discovery.h) */
    size_t n_verifier_dns;
    double dns_interval_s;
    const char *dns_server;
    int tool_parser; /* sd_tool_fmt: how answers to tool requests are read (tool_calls.h) */
} sd_gen_opts;

/* What generation borrows from its owner (all outlive the sd_gen). */
typedef struct sd_gen_env {
    struct event_base *base;
    void *zctx;            /* ZeroMQ context for the lane sockets */
    const sd_curve *curve; /* CURVE keys for them, NULL = plain */
    const sd_tok *tok;
    const sd_chat *chat; /* how messages become a prompt */
    sd_metrics *metrics;
    struct sd_conncap *const *conncap; /* the connections' admission (conncap.h; *conncap set later, may be NULL) */
} sd_gen_env;

typedef struct sd_gen sd_gen;

/* Opens the lanes (sd_lanes_new) and gets ready for requests. Strings in
 * opts must outlive the sd_gen. SD_ERR_* with a message on failure. */
sd_status sd_gen_new(const sd_gen_opts *opts, const sd_gen_env *env, sd_gen **out, char *err, size_t errlen);

/* Takes a POST /v1/completions or /v1/chat/completions: answers it now (an
 * error, 429, 503) or later (the generation). */
void sd_gen_handle(sd_gen *g, struct evhttp_request *req, sd_api_kind kind);

/* The lane table (for health and metrics). */
const sd_lanes *sd_gen_lanes(const sd_gen *g);

/* The served name name equals (the model id or an alias), or NULL. */
const char *sd_gen_served_name(const sd_gen *g, const char *name);

/* Fails every live request with status and msg and takes no new work
 * (shutdown). */
void sd_gen_fail_all(sd_gen *g, int status, const char *msg);

/* Draining: new generation requests get a JSON 503 (code shutting_down,
 * Retry-After); those accepted (running or queued) go on. */
void sd_gen_drain(sd_gen *g);

/* Generation requests accepted and not finished (running and queued). */
size_t sd_gen_live(const sd_gen *g);

/* Fails what is live, closes the lanes, frees g; NULL is a no-op. */
void sd_gen_free(sd_gen *g);

#endif
