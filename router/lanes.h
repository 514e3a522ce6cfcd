/* lanes.h — the router's table of verifier lanes.
 *
 * A lane is one verifier (with its drafter behind it) reached through a
 * ZeroMQ DEALER socket connected to the verifier's ROUTER endpoint. The table
 * integrates every socket with the router's libevent base through ZMQ_FD
 * (edge-triggered: on each wake-up, and after each send, the socket is drained
 * with non-blocking receives until empty). A timer sends a HealthRequest to
 * every lane each interval; a lane is UP once it answers, and DOWN after
 * `max_missed` consecutive unanswered requests (its in-flight requests are
 * then failed by the owner through on_down). Routing picks the UP lane with
 * the fewest in-flight requests below its capacity.
 *
 * Threading: everything runs on the event base's thread. */
#ifndef SD_LANES_H
#define SD_LANES_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "convert.h"
#include "curve.h"
#include "msg.h"
#include "status.h"

struct event_base;

typedef enum { SD_LANE_STARTING = 0, SD_LANE_UP = 1, SD_LANE_DOWN = 2 } sd_lane_state;

/* What the table knows about a lane (from its last HealthReply). */
#define SD_LANE_MAX_K 16      /* draft lengths in the histogram (0..16) */
#define SD_LANE_MAX_ACCEPT 16 /* acceptance estimates kept per lane */

/* One server-wide acceptance estimate (specd.AcceptEstimate). */
typedef struct sd_lane_accept {
    char mode[16], temperature[16];
    float accept[SD_LANE_MAX_K];
    size_t n;
} sd_lane_accept;

typedef struct sd_lane_info {
    const char *endpoint;
    sd_lane_state state;
    bool retired;         /* discovery dropped it (sd_lanes_retire): DOWN, no health checks, no work */
    int inflight;         /* requests routed here and not finished */
    int missed;           /* consecutive unanswered health requests */
    uint32_t max_context; /* 0 until the verifier reported it */
    uint32_t vocab_size;
    uint32_t active, queued, kv_total, kv_free;
    uint64_t steps, draft_tokens, accepted_tokens, tokens_generated;
    uint64_t accepted_at[64];
    size_t n_accepted_at;
    bool drafter_up;
    uint32_t drafter_requests, drafter_kv_total, drafter_kv_free; /* the drafter's last figures */
    sd_pipe_stats pipe;                   /* drafting as the verifier saw it (specd.PipeStats) */
    uint64_t k_chosen[SD_LANE_MAX_K + 1]; /* adaptive: request-steps by drafts chosen */
    size_t n_k_chosen;
    uint64_t step_pred_us, step_meas_us, step_err_us; /* adaptive: planned steps, predicted / measured / |diff| */
    uint64_t regime_plain;                            /* adaptive: steps the regime test ran plain */
    float regime_rate[2];                             /* ... its rates (drafting, plain; 0: not measured) */
    uint64_t pipe_serial;                             /* the pipelining test: steps it ran serial */
    float pipe_rate[2];                               /* ... its rates (pipelined, serial; 0: not measured) */
    uint32_t step_rows_max;                           /* the most rows one of its engine steps had */
    uint64_t preemptions;                             /* requests its verifier preempted (KV short) */
    uint64_t prefix_queries, prefix_hits;             /* prompt positions looked up / taken from the prefix cache */
    uint64_t prefix_evictions;                        /* cached blocks reused for new work */
    uint32_t prefix_cached;                           /* blocks cached that no request holds */
    int tp_size;                                      /* tensor parallelism: the verifier's ranks (1: not split) */
    char rank_device[8][32];                          /* ... each rank's device */
    sd_lane_accept accept[SD_LANE_MAX_ACCEPT];        /* adaptive: the verifier's acceptance estimates */
    size_t n_accept;
    char model[128];
} sd_lane_info;

typedef struct sd_lane_cbs {
    /* A TokenEvent or ErrorEvent arrived from lane; env is freed after return. */
    void (*on_event)(void *ud, int lane, const Specd__Envelope *env);
    /* lane changed state (UP: may take work now; DOWN: fail its requests). */
    void (*on_state)(void *ud, int lane, sd_lane_state state);
    void *ud;
} sd_lane_cbs;

typedef struct sd_lanes sd_lanes;

typedef struct sd_lanes_opts {
    int health_interval_ms; /* default 1000 */
    int max_missed;         /* default 3 */
    int capacity;           /* max in-flight per lane, default 64 */
    const sd_curve *curve;  /* CURVE client keys (proto/curve.h), NULL = plain */
} sd_lanes_opts;

/* Creates the table: one DEALER per endpoint (connect, ZMQ_IMMEDIATE so
 * nothing queues for an absent verifier, linger 0), events on base, health
 * timer started; n may be 0 (lanes come from discovery). zctx: a ZeroMQ context owned by the caller, outliving the
 * table. SD_ERR_IO naming the endpoint when a socket cannot be set up. */
sd_status sd_lanes_new(struct event_base *base, void *zctx, const char *const *endpoints, size_t n,
                       const sd_lanes_opts *opts, sd_lane_cbs cbs, sd_lanes **out, char *err, size_t errlen);

/* Lane discovery (discovery.h). sd_lanes_add: the lane of endpoint — a new
 * one (STARTING, health-checked from now on), or the existing one, brought
 * back when it was retired; its index, or -1 with err. sd_lanes_retire: the
 * lane goes DOWN (on_state: its requests are failed over) and stays out of
 * health checks and routing until added again. Indices are never reused. */
int sd_lanes_add(sd_lanes *l, const char *endpoint, char *err, size_t errlen);
void sd_lanes_retire(sd_lanes *l, int i);

/* Closes sockets and events; NULL is a no-op. */
void sd_lanes_free(sd_lanes *l);

size_t sd_lanes_count(const sd_lanes *l);

/* Snapshot of lane i (pointer valid until the next event-loop turn). */
const sd_lane_info *sd_lanes_info(const sd_lanes *l, int i);

/* Index of the UP lane with the fewest in-flight requests below capacity
 * (ties: lowest index), or -1. */
int sd_lanes_pick(const sd_lanes *l);

/* Lane pref when it is UP with room (the choices of one request go to one
 * lane, where they share the prompt's KV), else sd_lanes_pick. */
int sd_lanes_pick_near(const sd_lanes *l, int pref);

/* sd_lanes_pick among the lanes not in except[0..n_except). */
int sd_lanes_pick_except(const sd_lanes *l, const int *except, int n_except);

/* Requests the UP lanes can take now (capacity left, summed). */
int sd_lanes_room(const sd_lanes *l);

/* True when some lane is UP; *max_context gets the smallest max_context
 * among UP lanes (0 when none is known). */
bool sd_lanes_any_up(const sd_lanes *l, uint32_t *max_context);

/* True when every lane is DOWN (none is UP or still STARTING). */
bool sd_lanes_all_down(const sd_lanes *l);

/* Sends env on lane i. Afterwards ZMQ_EVENTS is re-checked and, when a
 * message is waiting, the lane's read event is activated (it runs on the next
 * loop turn, never inside this call, so callers see no re-entrant events).
 * SD_ERR_NOSPACE when the verifier is not connected. */
sd_status sd_lanes_send(sd_lanes *l, int i, const Specd__Envelope *env, char *err, size_t errlen);

/* In-flight accounting done by the owner: +1 on submit, -1 on finish. */
void sd_lanes_add_inflight(sd_lanes *l, int i, int delta);

#endif
