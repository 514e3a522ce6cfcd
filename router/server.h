/* server.h — the specd-router process: an OpenAI-compatible HTTP server
 * (libevent evhttp) in front of one or more verifier lanes (ZeroMQ).
 *
 * One event base on the calling thread runs everything: HTTP parsing,
 * tokenisation and incremental detokenisation, stop strings, SSE, the lane
 * sockets and the health timer. Requests are validated, tokenized, queued
 * (bounded) until a lane can take them, submitted to the least-loaded healthy
 * lane, streamed back as TokenEvents arrive, and cancelled on the verifier
 * when the client goes away, a stop string matches or the request times out. */
#ifndef SD_SERVER_H
#define SD_SERVER_H

#include <stdbool.h>
#include <stddef.h>

#include "status.h"

typedef struct sd_server_opts {
    const char *host;             /* default 127.0.0.1 */
    int port;                     /* default 8000; 0 = any free port */
    const char *const *verifiers; /* lane endpoints */
    size_t n_verifiers;
    const char *const *verifier_dns; /* lanes from DNS: "HOST:PORT" each (discovery.h) */
    size_t n_verifier_dns;
    double dns_interval_s;        /* how often they are resolved again; default 10 */
    const char *dns_server;       /* the nameserver "IP[:PORT]", NULL = the system's */
    const char *tokenizer;        /* tokenizer.json */
    const char *tokenizer_config; /* tokenizer_config.json or NULL */
    const char *chat_template;    /* family override ("chatml", ...) or NULL */
    int tool_parser;              /* sd_tool_fmt of answers to tool requests (tool_calls.h) */
    const char *model_name;       /* the served model id (responses name it unless the request named an alias) */
    const char *const *aliases;   /* more names requests may use for it (--served-model-name a,b,...) */
    size_t n_aliases;
    const char *api_key;      /* NULL: no auth */
    bool metrics_auth;        /* /metrics needs the key too */
    bool no_playground;       /* / and /playground are not served (playground.h) */
    size_t max_headers;       /* bytes of request line + headers; default 64 KiB */
    int header_timeout_s;     /* reading a request, and a keep-alive connection idle; default 30 */
    int max_connections;      /* open HTTP connections; at the cap the oldest idle one closes; default 1024 */
    int max_per_client;       /* open connections of one client address; default 256 (at most max_connections) */
    double first_byte_s;      /* a connection that sent nothing is closed after; default 10 */
    double keepalive_s;       /* a connection idle after an answer is closed after; default 5 */
    double body_s;            /* a request with no byte arriving for this long gets a 408; default 10 */
    int drain_timeout_s;      /* SIGTERM: how long requests in flight may take to finish; default 30 */
    int resume_wait_s;        /* a lane died, no other can take its requests: how long they wait for one
                                      * (a restarted verifier) to resume on; 0 = they fail at once (main: 30) */
    const char *curve_keys;   /* CURVE key directory for the lanes (proto/curve.h), NULL = plain */
    int max_queue;            /* waiting requests; default 256 */
    size_t max_body;          /* bytes; default 1 MiB */
    double request_timeout_s; /* 0 = none (default 600) */
    int lane_capacity;        /* in-flight per lane; default 64 */
    int health_interval_ms;   /* default 1000 */
    int max_missed;           /* default 3 */
    int default_max_tokens;   /* default 256 */
} sd_server_opts;

typedef struct sd_server sd_server;

/* evhttp's own timeout for reading and idling: past every timeout of
 * conncap.h, a backstop for what it does not see (seconds). */
int sd_server_idle_backstop_s(const sd_server_opts *o);

/* Loads the tokenizer, opens the lanes and binds the HTTP socket.
 * SD_ERR_* with a message on failure. *out owned by the caller. */
sd_status sd_server_new(const sd_server_opts *opts, sd_server **out, char *err, size_t errlen);

/* Runs the event loop until SIGINT / SIGTERM; returns 0. The first signal
 * drains: the listening socket closes, new requests on open connections get
 * a JSON 503, the requests in flight finish — up to drain_timeout_s, after
 * which they end with an error event (streams, then [DONE]) or a JSON 503.
 * A second signal ends them at once. */
int sd_server_run(sd_server *s);

/* Frees everything; NULL is a no-op. */
void sd_server_free(sd_server *s);

#endif
