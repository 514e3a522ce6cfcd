/* vf_link.h — the verifier's connection to its drafter (DEALER socket).
 *
 * Two modes (proto/specd.proto). Serial: each engine step, sd_vf_link_draft sends the DraftOpen messages and one
 * DraftBatch (vf_draft.h) and waits for the DraftReply of that step until the
 * deadline (--draft-timeout-ms). Replies for other steps are stale and
 * dropped. On a timeout or a failed send the step runs without drafts, the
 * drafter is marked down and every request's drafter state is forgotten
 * (drafter_known = 0: each request is re-opened when the drafter is back,
 * since a restarted drafter has no state). While down, the link only probes: every
 * 500 ms it sends a HealthRequest and tries one batch with a 5 ms window; any
 * message from the drafter marks it up again. So a dead drafter costs no
 * per-step latency, and drafts only ever change speed, never tokens. The
 * link starts down and probes at once, so drafter_up is true only once the
 * drafter has answered.
 *
 * Pipelined: sd_vf_link_pipe_send tells the drafter, at each step start, the
 * committed tokens and the drafts in flight; spans come back whenever the
 * drafter has them and sd_vf_link_pipe_recv files them in their slots (the
 * caller picks from them, vf_span.h). Nothing waits on a deadline here: the
 * caller decides how long to wait (vf_pace.h) with sd_vf_link_wait. A failed
 * send, or a second of silence while the drafter owes spans, marks it down:
 * every slot's drafter state and spans are forgotten, batches stop, and the
 * health probes of the serial mode run until it answers again.
 *
 * Sockets: ZMQ_LINGER 0, ZMQ_SNDHWM 1000, ZMQ_IMMEDIATE (nothing queues for
 * an absent drafter), all sends ZMQ_DONTWAIT. One thread (the engine's) owns
 * the link. */
#ifndef SD_VF_LINK_H
#define SD_VF_LINK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "curve.h"
#include "status.h"
#include "vf_draft.h"

typedef struct sd_vf_link sd_vf_link;

/* Connects a DEALER socket from zctx to endpoint; the link goes to *out
 * (the caller frees it with sd_vf_link_free). Returns SD_OK, or with *out
 * NULL and a message in err: SD_ERR_ARG (bad endpoint, no socket),
 * SD_ERR_NOMEM, or the status of sd_curve_client. */
sd_status sd_vf_link_new(void *zctx, const char *endpoint, const sd_curve *curve, int timeout_ms, int vocab,
                         sd_vf_link **out, char *err, size_t errlen);

/* Closes the socket and frees the link; NULL is a no-op. */
void sd_vf_link_free(sd_vf_link *l);

/* The DEALER socket, for the caller's zmq_poll. */
void *sd_vf_link_socket(const sd_vf_link *l);

/* True while the drafter answers in time. */
bool sd_vf_link_up(const sd_vf_link *l);

/* Fills slots[i]->prop for one step (n == 0 drafts for slots with budgets[i]
 * == 0, on timeout, or while the drafter is down). slots: every active
 * request (all of their drafter state is reset when the drafter goes down). */
void sd_vf_link_draft(sd_vf_link *l, sd_vf_slot *const *slots, const int *budgets, int n);

/* Handles messages waiting on the socket without blocking (health replies,
 * stale draft replies) and sends the down-state health probe when due. */
void sd_vf_link_poll(sd_vf_link *l);

/* Tells the drafter a request is over (DraftClose) if it was ever opened. */
void sd_vf_link_close(sd_vf_link *l, sd_vf_slot *s);

/* Pipelined: sends the DraftOpens and the DraftBatch{pipeline} for slots[i]
 * with budgets[i] > 0: their committed tokens since the drafter last heard,
 * and (in_flight) each slot's current proposal as the drafts in flight.
 * step_us: the expected step time. Records told_ms in every slot sent. While
 * the drafter is down it sends nothing; a failed send marks it down. */
void sd_vf_link_pipe_send(sd_vf_link *l, sd_vf_slot *const *slots, const int *budgets, int n, bool in_flight,
                          uint32_t step_us, double now_ms);

/* Pipelined: files every waiting DraftReply's spans into the slots they name
 * (need_open: the slot's drafter state is reset), drops the rest, answers
 * nothing. For the spans continuing the state their slot was last told, it
 * reports the largest time since that telling (now_ms - told_ms) in
 * *lat_ms and the largest drafter time in *draft_ms (both -1: none).
 * Returns the number of spans stored. */
int sd_vf_link_pipe_recv(sd_vf_link *l, sd_vf_slot *const *slots, int n, double now_ms, double *lat_ms,
                         double *draft_ms);

/* Blocks up to timeout_ms for a message from the drafter; true when one is
 * waiting. */
bool sd_vf_link_wait(sd_vf_link *l, double timeout_ms);

/* The drafter's figures from its last HealthReply (asked for every second
 * while it is up, every 500 ms while down): requests it holds, its KV
 * mirrors' pool (0 / 0 for a proposer without one), and where it runs. */
typedef struct sd_vf_drafter_stats {
    bool known; /* a HealthReply came */
    uint32_t requests, kv_total, kv_free;
    char host[256];
    char device[64];
    uint32_t threads;
} sd_vf_drafter_stats;
sd_vf_drafter_stats sd_vf_link_drafter_stats(const sd_vf_link *l);

#endif
