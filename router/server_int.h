/* server_int.h — state shared by server.c (HTTP front, endpoints, lanes'
 * callbacks) and gen.c (one generation request's life). Not a public API. */
#ifndef SD_SERVER_INT_H
#define SD_SERVER_INT_H

#include <event2/event.h>
#include <event2/http.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "chat_template.h"
#include "http_api.h"
#include "lanes.h"
#include "metrics.h"
#include "server.h"
#include "stop_match.h"
#include "tokenizer.h"

typedef enum { GEN_QUEUED = 0, GEN_RUNNING = 1 } gen_state;

/* One generation request, from validation to its last byte. Owned by the
 * server's list; freed by gen_finish / gen_fail. */
typedef struct gen {
    struct gen *prev, *next;   /* all live requests */
    struct gen *qnext;         /* FIFO of waiting requests */
    struct sd_server *srv;
    uint64_t id;
    char cid[48];              /* "cmpl-…" / "chatcmpl-…" */
    time_t created;
    double t0;                 /* monotonic start */
    struct evhttp_request *http;
    bool client_gone;          /* the client went away: nothing more to send */
    bool detached;             /* libevent detached http from its (closed) connection */
    struct event *watch;       /* EOF watch on the client's socket */
    bool stream_started;
    gen_state state;
    int lane;                  /* -1 while queued */
    sd_api_req p;
    int32_t *prompt;
    size_t n_prompt;
    unsigned max_tokens;
    unsigned completion_tokens;
    sd_tok_stream *dec;
    sd_stop *stop;
    struct evbuffer *text;     /* non-stream: all output; stream: this event's output */
    struct event *timer;       /* request timeout */
    uint64_t steps, draft_tokens, accepted_tokens, accepted_at[64];
    size_t n_accepted_at;
} gen;

struct sd_server {
    sd_server_opts o;
    struct event_base *base;
    struct evhttp *http;
    struct evhttp_bound_socket *bound;
    struct event *sigint, *sigterm;
    void *zctx;
    sd_lanes *lanes;
    sd_tok *tok;
    int vocab;
    sd_chat_family chat;
    sd_metrics metrics;
    gen *live;                 /* list of live requests */
    gen *qhead, *qtail;        /* waiting requests */
    int nqueued;
    uint64_t next_id;
    time_t started;
    int port;
    bool stopping;             /* shutting down: dispatch nothing more */
};

double sd_now(void);

/* Sends an OpenAI error reply (and counts it). */
void srv_reply_error(struct sd_server *s, struct evhttp_request *req, const sd_api_err *e);

/* POST /v1/completions and /v1/chat/completions (gen.c). */
void gen_handle(struct sd_server *s, struct evhttp_request *req, sd_api_kind kind);

/* Lane callbacks, wired by server.c (gen.c). */
void gen_on_event(void *ud, int lane, const Specd__Envelope *env);
void gen_on_lane_state(void *ud, int lane, sd_lane_state st);

/* Dispatches waiting requests while some lane has room (gen.c). */
void gen_drain_queue(struct sd_server *s);

/* Fails every live request (shutdown). */
void gen_fail_all(struct sd_server *s, int status, const char *msg);

#endif
