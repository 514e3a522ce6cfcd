/* dpipe.h — pipelined drafting in the drafter (proto/specd.proto,
 * "pipelined"): what is owed a span, and what to draft for it.
 *
 * At every step start the verifier tells the drafter, per request, the
 * tokens committed since it last heard and the drafts it is verifying now
 * (in_flight). The drafter at once drafts the continuation of committed +
 * in_flight — the likeliest outcome: every in-flight draft accepted — with
 * k + 1 tokens: its guess of the verifier's next token (the bonus token, or
 * the correction of a plain step), then k drafts. The span it sends carries
 * in_flight and those tokens after a base naming the committed sequence, so
 * the verifier can use it when its next committed sequence is the base plus
 * a prefix of those tokens: all of in_flight and the guess (the usual hit),
 * or, when the verifier had no drafts, just the guess (it decoded one token
 * plainly) or nothing (it waited for this span).
 *
 * The sampling randomness of a drafted token is keyed by its output position
 * (sd_rng_uniform(seed, pos, SD_RNG_STREAM_DRAFT)), never by which guess it
 * follows, and is independent of the verifier's acceptance randomness.
 * Pure bookkeeping over the dstate table; not thread-safe. */
#ifndef SD_DPIPE_H
#define SD_DPIPE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "dstate.h"
#include "proposer.h"
#include "specd.pb-c.h"

/* Records a pipelined DraftItem for r (already advanced to it) sent by the
 * verifier peer: budget, q wish, output position, in-flight drafts (ignored
 * when !ahead: the drafter then drafts only from the committed sequence).
 * Marks a span owed when the committed sequence or in_flight changed.
 * SD_ERR_NOMEM when r's context cannot make room for in_flight. */
sd_status sd_dpipe_note(sd_dreq *r, const Specd__DraftItem *it, const uint8_t *peer, size_t peer_len, bool ahead);

/* Requests owed a span, as propose items (at most cap; the rest stay owed):
 * context = committed + in_flight, k = min(budget + 1, SD_MAX_DRAFT), the
 * output position of the first new token. reqs[i] is items[i]'s request.
 * Their owed marks are cleared. Returns the number of items. Items borrow
 * the requests' context arrays until the next advance / open / note. */
int sd_dpipe_collect(sd_dstate *t, sd_propose_item *items, sd_dreq **reqs, int cap);

/* True when some request is owed a span. */
bool sd_dpipe_pending(sd_dstate *t);

#endif
