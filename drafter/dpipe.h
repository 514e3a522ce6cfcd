/* dpipe.h — pipelined drafting in the drafter (proto/specd.proto,
 * "pipelined"): what is owed a span, and what to draft for it.
 *
 * At every step start the verifier tells the drafter, per request, the
 * tokens committed since it last heard and the drafts it is verifying now
 * (in_flight). The drafter at once drafts the continuation of committed +
 * in_flight — the likeliest outcome: every in-flight draft accepted — with
 * k + 1 tokens: its guess of the verifier's next token (the bonus token),
 * then k drafts. The span it sends carries in_flight and those tokens after
 * a base naming the committed sequence, so the verifier can use it when its
 * next committed sequence is the base plus a prefix of those tokens: all of
 * in_flight and the guess (the usual hit). With nothing in flight the
 * verifier is waiting for this very span (or decoding one token plainly):
 * then k tokens are drafted, all usable as drafts at once (or, after the
 * plain token if it equals the first of them, the rest).
 *
 * Then, while time is left before the verifier's step ends, it drafts for
 * the likeliest other outcomes ("speculative speculative decoding"): that
 * the first j in-flight drafts are accepted and the verifier's token after
 * them is the drafter's second choice there, or that all are accepted and
 * the next token is the second choice for the guess. Their probability is
 * estimated from the drafter's own confidence in the in-flight drafts and
 * the alternative (kept from the runs that drafted them). Each such branch
 * is a span too (in-flight prefix, the alternative, (k + 1) / 2 drafts)
 * from its own mirror (sd_propose_item.branch). Greedy requests only: a sampled token's
 * "second choice" is not what rejection sampling draws.
 *
 * The sampling randomness of a drafted token is keyed by its output position
 * (sd_rng_uniform(seed, pos, SD_RNG_STREAM_DRAFT)), never by which guess it
 * follows, and is independent of the verifier's acceptance randomness.
 * Pure bookkeeping over the dstate table (the caller passes the clock); not
 * thread-safe. */
#ifndef SD_DPIPE_H
#define SD_DPIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dstate.h"
#include "proposer.h"
#include "specd.pb-c.h"

/* Records a pipelined DraftItem for r (already advanced to it) sent by the
 * verifier peer at now_ms, whose next step is expected to take step_ms:
 * budget, q wish, output position, in-flight drafts (ignored when !ahead:
 * the drafter then drafts only from the committed sequence). Marks a span
 * owed when the committed sequence or in_flight changed. SD_ERR_NOMEM when
 * r's context cannot make room for in_flight. */
sd_status sd_dpipe_note(sd_dreq *r, const Specd__DraftItem *it, const uint8_t *peer, size_t peer_len, bool ahead,
                        double now_ms, double step_ms);

/* Requests owed a span, as propose items (at most cap; the rest stay owed):
 * context = committed + in_flight, k = budget + 1 (budget with nothing in
 * flight; at most SD_MAX_DRAFT), the
 * output position of the first new token, alternatives wanted for greedy
 * requests. reqs[i] is items[i]'s request. Their owed marks are cleared
 * (and branches become owed). Returns the number of items. Items borrow
 * the requests' context arrays until the next advance / open / note. */
int sd_dpipe_collect(sd_dstate *t, sd_propose_item *items, sd_dreq **reqs, int cap);

/* True when some request is owed a span (main: its main chain; else any
 * work, branches included). */
bool sd_dpipe_pending(sd_dstate *t, bool main);

/* Remembers what a propose call drafted for r (greedy, with alternatives):
 * p continues a context of pos0 tokens whose hash is ctx_hash. */
void sd_dpipe_record(sd_dreq *r, int64_t pos0, uint64_t ctx_hash, const sd_proposal *p);

/* Another outcome of a request's in-flight step, worth drafting for. */
typedef struct sd_dbranch {
    sd_dreq *r;
    int j;       /* in-flight drafts accepted before it (n_in_flight: all of them) */
    int32_t alt; /* the verifier's token after them, as the drafter's second choice */
    double prob; /* the drafter's estimate of this outcome */
} sd_dbranch;

/* The likeliest other outcomes (prob >= min_prob) of the requests whose
 * main chain went out, best first, at most cap; their owed marks are
 * cleared. Returns how many. */
int sd_dpipe_branches(sd_dstate *t, sd_dbranch *out, int cap, double min_prob);

/* Time left (ms) before the verifier's step that r's last word started ends. */
double sd_dpipe_time_left(const sd_dreq *r, double now_ms);

#endif
