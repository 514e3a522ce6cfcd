/* spec_sched.h — adaptive speculation: how many drafts each request
 * verifies in one step.
 *
 * From the measured cost of a step and each request's acceptance estimate
 * (spec_model.h) it chooses k_i for every request to maximise the expected
 * committed tokens per second of the whole step:
 *
 *     rate = (E_fixed + sum_i E_i(k_i)) / T
 *     T    = forward(rows) + accept(greedy rows, sampled positions) + overhead
 *     rows = fixed rows + sum_i (1 + drafts_i(k_i)), greedy verified rows likewise
 *     sampled positions = sum over sampled requests of E_i(k_i): sampling
 *            verifies position by position up to the first rejection, so
 *            a sampled request pays for the tokens it commits, not its rows
 *
 * with E_i and drafts_i the expected committed tokens and offered drafts
 * when request i is asked for k_i drafts.
 *
 * A step with prompt chunks (fixed rows) is dear whatever is chosen, and its
 * rate low: by that rate any draft would look worth its rows. There the
 * time is priced at what it is worth elsewhere — the scheduled requests'
 * best rate in a step of their own, R — and the plan maximises
 * E_fixed + sum_i E_i(k_i) - R · T: a draft is verified beside a prompt
 * only if it gains more than its time would in a decoding step (measured
 * on a CPU, 2 cores, 16 requests: a 12-row chunk made a 95-token plan of
 * 33.6 ms "beat" a 16-token plain one of 5.9 ms, while plain steps of the
 * same requests made 4.1 tokens a ms).
 *
 * overhead is the step's time outside the engine: plain_ms when no request
 * is asked for drafts, else draft_ms + exposure · (1 + expected drafts of the
 * longest span + drafter_fixed) · pass(n_drafting): the drafter's time,
 * measured per pass (one per draft position, plus one to take in the
 * committed tokens, plus the call's fixed work counted in passes) as a
 * function of the requests it drafts for at once, times the share of it the
 * verifier does not hide (1 when it waits for every span, the steps whose
 * span was not ready when drafted ahead). Asking request i for its j-th
 * draft adds offered(j) expected rows and yield(j) expected tokens
 * (spec_model.h): tokens per row = yield(j) / offered(j) (its running
 * minimum over j: reach(j), non-increasing in j). So among all choices
 * costing the same rows the best takes the candidates of largest reach;
 * the scheduler sorts every candidate by reach and evaluates
 * each prefix (the drafter's term tracked along), keeping the best: O(N log
 * N) for N = sum of (kmax - kmin).
 *
 * A request the drafter has fallen behind on (it was left without drafts for
 * a while) costs its catching up once, when it is given drafts again
 * (resume_ms): so the choice does not flip requests on and off for nothing.
 *
 * KV: each request first needs the blocks of its plain step; a draft that
 * needs a block beyond the free ones is skipped, with that request's later
 * drafts. Without any cost measured yet every request gets kmin (the first
 * steps measure plain decoding; the acceptance prior and probes do the rest).
 * Pure; no allocation beyond the caller's scratch. */
#ifndef SD_SPEC_SCHED_H
#define SD_SPEC_SCHED_H

#include <stdbool.h>

#include "spec_model.h"

typedef struct sd_sched_req {
    const sd_accept *acc; /* its acceptance estimate */
    int kmin, kmax;       /* drafts allowed, 0 <= kmin <= kmax <= SD_MAX_DRAFT (equal: fixed) */
    bool sampled;         /* its rows are verified by sampling */
    int kv_len;           /* KV positions it holds */
    int kv_blocks;        /* KV blocks it owns */
    double resume_ms;     /* a one-off cost of giving it drafts this step (the drafter catching up on it) */
} sd_sched_req;

typedef struct sd_sched_step {
    const sd_cost *cost;
    int seqs;                        /* sequences in the step (every request in it) */
    int fixed_rows;                  /* positions of requests not scheduled (prompt chunks) */
    int fixed_greedy, fixed_sampled; /* ... of which verified (a prompt's last position), by kind */
    double fixed_tokens;             /* tokens they are expected to commit */
    double plain_ms;                 /* overhead of a step without drafts */
    double draft_ms;                 /* ... with drafts: the fixed part (messages) */
    const sd_cost *drafter;          /* the drafter's ms per pass by requests drafted for (NULL: free) */
    double drafter_fixed;            /* a drafter call's fixed work, in passes (taking in the batch, replying) */
    double exposure;                 /* the share of the drafter's time the step waits for */
    int kv_free;                     /* free KV blocks (< 0: no limit) */
    int block_size;                  /* KV block size in positions */
} sd_sched_step;

typedef struct sd_sched_plan {
    double step_ms; /* predicted step time (0 when the cost is unknown) */
    double tokens;  /* expected committed tokens */
    int drafts;     /* sum of k */
    double rate;    /* the worth of the step's time it was chosen by, tokens/ms (0: by its rate) */
} sd_sched_plan;

/* Scratch for n requests: n * SD_MAX_DRAFT candidates (asking request req
 * for its j-th draft: expected tokens gained, expected rows added, and
 * their ratio, the acceptance reach). */
typedef struct sd_sched_cand {
    double reach, gain, rows;
    int req, j;
} sd_sched_cand;

/* Chooses k_out[i] in [kmin, kmax] for reqs[0..n) (cand: scratch of
 * n * SD_MAX_DRAFT entries). Returns the plan. */
sd_sched_plan sd_sched_choose(const sd_sched_step *st, const sd_sched_req *reqs, int n, int *k_out,
                              sd_sched_cand *cand);

/* Whether a step committing tokens_a in ms_a beats one committing tokens_b in
 * ms_b by the measure p was chosen by (see above: the rate, or the tokens net
 * of the time's worth). */
bool sd_sched_beats(const sd_sched_plan *p, double tokens_a, double ms_a, double tokens_b, double ms_b);

/* The step time predicted for given k[0..n) (same model). */
double sd_sched_step_ms(const sd_sched_step *st, const sd_sched_req *reqs, int n, const int *k);

#endif
