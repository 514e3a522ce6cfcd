/* spec_run.h — speculative decoding in one process with the server's
 * adaptive draft lengths.
 *
 * sd_engine_run (engine.h) asks the proposer for each request's num_draft
 * drafts every step: a static K. sd_spec_run does what the verifier's
 * server does with a draft model in its process (--draft-model): every
 * step the adaptive scheduler (adapt.h) chooses how many drafts each
 * request verifies — none where drafting costs more than it makes — from
 * the engine's measured step cost, the proposer's measured time per pass
 * and each request's acceptance so far; the proposer is then asked for
 * that many. Exactness is the engine's: the choice changes how many drafts
 * are verified, never what is committed. Used by specd-generate. */
#ifndef SD_SPEC_RUN_H
#define SD_SPEC_RUN_H

#include <stdbool.h>

#include "engine.h"
#include "proposer.h"

typedef struct sd_spec_run_opts {
    bool adaptive;       /* choose each request's drafts every step; false: each verifies its num_draft */
    double calibrate_ms; /* adaptive: measure the engine's step cost first, at most this long (0: learn online) */
} sd_spec_run_opts;

/* Steps reqs[0..n) together until all have finished (n <= 64), drafting
 * with pr (NULL: plain decoding). Adaptive, a request's p.num_draft is the
 * most drafts it may verify in a step (the verifier's --spec-max-draft).
 * cb as for sd_engine_run. Returns SD_OK, or the error of a failed step. */
sd_status sd_spec_run(sd_engine *e, sd_proposer *pr, sd_req *const *reqs, int n, const sd_spec_run_opts *o,
                      sd_step_cb cb, void *ctx, char *err, size_t errlen);

#endif
