/* vf_pace.h — when the pipelined verifier waits for drafts, from what it
 * measures: its own step times, the drafter's latency, and what a step
 * with drafts commits.
 *
 * At a step start some decoding requests may have no valid span. The
 * verifier either decodes them without drafts now, or waits up to a budget
 * for the drafter's span. A plain step does not forfeit the span (it comes
 * during the step, and a span that begins with the token the plain step
 * commits still serves), so the comparison is with the long-run rate
 * r = E_with / t_with of steps with drafts: waiting W costs W·r tokens; not
 * waiting costs t_without·r − E_without (the shorter, poorer step — with
 * the fallback proposer's drafts, --spec-fallback, less poor: a request
 * that goes on without its span counts the tokens and rows such steps
 * measured). So the
 * verifier waits at most
 *
 *     budget = t_without − E_without · t_with / E_with
 *
 * and only when the measured latency of the drafter's spans is below it.
 * That holds while the drafter is quicker than a plain step (its own time
 * per span, as the spans report it). A slower one's
 * span comes after the plain step has moved the state on, and is lost (the
 * drafter drafts again for the new state): then not waiting costs every
 * span, and the verifier waits while the step with drafts, the wait
 * included, commits at least at the plain step's rate:
 *
 *     budget = E_with · t_without / E_without − t_with
 *
 * (measured on a GPU, where a small drafter is launch-bound and drafts a
 * span in longer than the verifier's plain step: never waiting there used
 * no span at all). Before any step with drafts has measured E_with, the
 * requests' acceptance estimates stand in for it.
 * t(rows) is the verifier's measured step cost (spec_model.h, shared with
 * the scheduler); E counts committed tokens: a request with a span expects
 * its measured tokens per step with drafts, one without. A wait that runs
 * out raises the latency estimate to a quarter above the budget.
 *
 * The latency of a span is what a wait observes: from telling the drafter
 * the state to the span's arrival — the drafter's drafting, the messages,
 * and the drafter finishing other work first (pre-drafts of other
 * outcomes). Only a wait can see it (a busy verifier reads its socket
 * late), so before the first wait the drafter's own time per span (each
 * span says it) stands in for it. It is a plain average of the waits, not
 * discounted between them: a discount (tried) read about 30% low at C = 1,
 * where the verifier waits every second or third step, and made waits that
 * cost more than the plain step they replace. Instead every
 * SD_VF_PACE_PROBE-th declined wait is a probe, so a drafter that became
 * faster is noticed within a few steps of misses. Every average is a plain
 * mean over its first samples and an EMA after, so neither a slow first
 * step nor a prior holds it back. No constant of one machine is in it.
 * Pure: the caller passes times (ms). One thread owns a pace. */
#ifndef SD_VF_PACE_H
#define SD_VF_PACE_H

#include <stdbool.h>

#include "spec_model.h"

typedef struct sd_vf_pace {
    const sd_cost *cost; /* the verifier's step cost (borrowed) */
    double draft_ms;     /* EMA of the drafter's time per span */
    unsigned n_draft;
    double lat_ms; /* EMA of the latency the waits measured */
    unsigned n_lat;
    unsigned declined; /* waits declined since the last wait */
    double yield;      /* EMA committed tokens per request-step with drafts */
    unsigned n_yield;
    double fb_yield, fb_rows; /* EMA committed tokens and rows per request-step that went on */
    unsigned n_fb;            /* without its span (the fallback's drafts or none) */
} sd_vf_pace;

void sd_vf_pace_init(sd_vf_pace *p, const sd_cost *cost);

/* A span for the state last told arrived; the drafter spent draft_ms on it. */
void sd_vf_pace_span(sd_vf_pace *p, double draft_ms);

/* ... and while the verifier waited for it, it came latency_ms after the
 * state was told. */
void sd_vf_pace_waited(sd_vf_pace *p, double latency_ms, double draft_ms);

/* The expected latency of a span (ms). */
double sd_vf_pace_latency(const sd_vf_pace *p);

/* A wait of budget ms ran out without the span. */
void sd_vf_pace_timeout(sd_vf_pace *p, double budget_ms);

/* A request-step with drafts committed `committed` tokens. */
void sd_vf_pace_yield(sd_vf_pace *p, int committed);

/* A request-step that went on without its span (not waited for) put rows
 * rows into the step (1 + the fallback proposer's drafts it verified) and
 * committed `committed` tokens: what not waiting gives (the wait budget's
 * E_without and t_without; one row and one token until measured). */
void sd_vf_pace_fallback(sd_vf_pace *p, int rows, int committed);

/* Estimated engine time (ms) for rows batch rows; 0 when nothing was measured. */
double sd_vf_pace_step_ms(const sd_vf_pace *p, int rows);

/* The longest wait that pays for one step: rows_ready rows and e_ready
 * expected tokens come from the requests that are ready (spans, prefills,
 * requests without drafts), n_waiting requests lack their span and would
 * verify k drafts with it, committing e_span tokens each by their acceptance
 * estimates (used until a step with drafts measured the yield). 0 when
 * waiting cannot pay or the step cost is not measured yet. */
double sd_vf_pace_wait_budget(const sd_vf_pace *p, int rows_ready, double e_ready, int n_waiting, int k, double e_span);

/* Expected committed tokens of a request-step with drafts (>= 1). */
double sd_vf_pace_expected(const sd_vf_pace *p);

/* Every SD_VF_PACE_PROBE-th wait the latency estimate declines is made
 * anyway (a probe). */
#define SD_VF_PACE_PROBE 16

/* True when a wait of budget_ms (> 0) is worth starting: the drafter's
 * measured latency (or none yet: optimistic) is below it, or it is a probe. */
bool sd_vf_pace_should_wait(sd_vf_pace *p, double budget_ms);

#endif
