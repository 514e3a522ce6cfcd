/* adapt.h — adaptive speculation: every step, how many drafts each request
 * verifies (0 included), from what the verifier measures (spec_model.h,
 * spec_sched.h). The verifier's server runs it (serial, pipelined, the
 * n-gram lookup, a draft model in its process), and so does the in-process
 * loop of specd-generate (spec_run.h).
 *
 * Measured online, nothing tuned for one machine:
 *   - the engine's step cost by rows (forward pass) and by verified rows
 *     (argmax or sampling), from every step;
 *   - the step time outside the engine — over the step's cycle, the work
 *     between steps included, where known; a sample beyond 1.5 times the
 *     average (a hiccup) counts as that much: without drafts (plain_ms), with
 *     drafts a fixed part (draft_ms, the messages) plus the drafter's time
 *     the verifier waits for: its time per pass (from the time each span
 *     says it took, over the draft positions plus one, the pass that takes
 *     in the committed tokens) as a function of the requests it drafts for
 *     at once, times the passes the longest span needs (serial: the
 *     verifier waits for every span). Pipelined, the drafter drafts while
 *     the verifier verifies: the time outside the engine is measured apart
 *     for steps whose requests with drafts all had their span at hand and
 *     for steps where some had not (a wait, or the fallback), and the figure
 *     of the step's kind counts in full (until that kind is measured, the
 *     drafter's time by the share of steps without their span); and a request the
 *     drafter must first catch up on (opened, or left without drafts a
 *     while) costs those tokens at the drafter's measured catch-up rate,
 *     once, when it is given drafts again;
 *   - per request, the acceptance per draft position, seeded from the
 *     server-wide estimate for its kind (verification mode and temperature
 *     bucket), which every request's steps update; for the drafts of an
 *     n-gram lookup (sd_areq.match) one such estimate per length of the
 *     n-gram that matched.
 * The scheduler then maximises expected committed tokens per second of the
 * whole step within the free KV blocks; the plan with drafts is then
 * compared once more with the plan without them, each prediction corrected
 * by how far off the predictions of its kind (steps with drafts, steps
 * without) have been on average — choosing the best of noisy estimates
 * favours the ones that err low, and this takes the bias back out. What only
 * drafting steps renew — that bias, the time outside the engine of a
 * drafting step — fades towards what plain steps show while none drafts (2%
 * a step), so a slow spell that made drafting look dear is measured again
 * once it is over. The other way round, a plan only measured when it
 * runs, the plain step's figure is measured again (that step runs plain)
 * while it has fewer than three samples or none for a while (4 passes per
 * sample, at most 64), if it would win at 70% of its figure: one slow first
 * measurement would otherwise keep drafting that is slower than plain. A
 * step with prompt chunks prices its time at what the
 * decoding requests make on their own (spec_sched.h). A request it gives no drafts for
 * a while gets a one-draft probe (after 4 steps, doubling to 64 while probes
 * are rejected, back to 4 when one is accepted; one request per step; a new
 * request starts at its kind's interval, which doubles with each probe of
 * the kind rejected and halves with each accepted, so that where drafts are
 * poor — T = 1.5 — every request does not pay for probes at 4, 12, 28 and 60
 * steps again: on a CPU, 2 cores, C = 1, a drafting step there made 0.50
 * tokens a ms against the plain steps' 0.87), so a request whose drafts
 * got better is noticed and the estimates never freeze — but only while a
 * draft sure to be accepted could pay for itself at the measured cost
 * (else the cost keeps it plain, and a probe every 256 steps re-measures);
 * as a probe judges the first position only, the later positions' figures
 * of a request left without drafts fade towards its kind's (2% a step).
 * Serial, the plan's step is also priced against one that verifies the
 * verifier's own lookup drafts and asks the drafter nothing
 * (sd_adapt_lookup): the faster runs.
 * Above all this, the regime test (regime.h) runs blocks of steps
 * without drafts against blocks as the scheduler chooses, and keeps the
 * regime whose measured rate is higher: it catches what the step model
 * leaves out.
 * A request that set its own num_draft always verifies that many (kmin =
 * kmax); --spec-max-batch caps still apply when given.
 *
 * Pure (no I/O); one thread owns an sd_adapt. */
#ifndef SD_ADAPT_H
#define SD_ADAPT_H

#include <stdbool.h>
#include <stdint.h>

#include "engine.h"
#include "spec_model.h"
#include "spec_sched.h"
#include "regime.h"

#define SD_ADAPT_TEMP_BUCKETS 5                          /* temperature 0, (0, 0.5], (0.5, 1], (1, 1.5], > 1.5 */
#define SD_ADAPT_ACCEPT_KEYS (3 * SD_ADAPT_TEMP_BUCKETS) /* x verification mode */
#define SD_ADAPT_PROBE_FIRST 4
#define SD_ADAPT_PROBE_MAX 64
#define SD_ADAPT_PROBE_REFRESH 256 /* plain steps after which a probe re-measures even what looks too dear */
#define SD_ADAPT_MATCH_CLASSES 4   /* n-gram lookup drafts by the length that matched: 1, 2, 3, 4 or more */
#define SD_ADAPT_CALIB_MAX 16      /* the largest batch of the start-up calibration */
#define SD_ADAPT_FB_PROBE 8        /* fallback drafts declined this many times in a row: one is verified (a probe) */

/* Adaptive figures (specd.AdaptStats), per request or summed. */
typedef struct sd_adapt_stats {
    uint64_t k_sum, k_steps, k_zero;
} sd_adapt_stats;

/* One request's adaptive state. */
typedef struct sd_areq {
    sd_accept acc;    /* its acceptance estimate */
    int key;          /* the kind it was seeded from (-1: not yet) */
    bool fixed;       /* it set its own num_draft: never adapted */
    int zero_run;     /* decode steps in a row chosen without drafts */
    int draft_run;    /* decode steps in a row chosen with drafts */
    int probe_every;  /* zero_run that triggers a probe */
    int k;            /* drafts chosen this step (-1: not scheduled) */
    bool probing;     /* this step's draft is a probe */
    sd_accept fb_acc; /* its acceptance of the fallback proposer's drafts (kept apart from the drafter's) */
    bool fb_seeded;   /* fb_acc seeded from its kind's */
    int fb_k;         /* the fallback's drafts it verifies this step (0: none) */
    int fb_zero_run;  /* steps in a row the fallback had drafts for it and none were chosen */
    double late_gain; /* pipelined, drafts chosen without its span at hand: the tokens they were to add (else -1) */
    int match;        /* set by the caller before the plan: this step's drafts are an n-gram lookup's whose
                          * n-gram of this length matched (0: not, or unknown) */
    bool lookup;      /* this step's drafts are the verifier's lookup's, chosen instead of asking the drafter */
    sd_accept m_acc[SD_ADAPT_MATCH_CLASSES]; /* its acceptance of such drafts by the length that matched */
    unsigned m_seeded;                       /* bit c: m_acc[c] seeded */
    sd_adapt_stats st;
} sd_areq;

typedef struct sd_adapt {
    sd_cost cost;
    double plain_ms, draft_ms, hit; /* overheads, pipelined hit rate */
    unsigned n_plain, n_draft, n_hit;
    double ready_ms, miss_ms;    /* pipelined: the time outside the engine of steps with drafts whose */
    unsigned n_ready, n_miss;    /* requests all had their span, and of those where some had not */
    bool step_ready;             /* this step's requests with drafts all have their span */
    double late_real, late_pred; /* pipelined, requests given drafts without their span at hand: */
    unsigned n_late;             /* drafts accepted (a span that came, the fallback's) and expected */
    double catch_ms;             /* the drafter's ms per token it catches up on: catch_x / catch_w, */
    double catch_x, catch_w;     /* its time beyond the passes and the tokens, summed (decaying) */
    unsigned n_catch;            /* over the n_catch steps that caught up */
    double run_steps;            /* steps a request keeps drafting once it starts, on average */
    unsigned n_run;
    double bias_draft, bias_plain;       /* (measured - predicted) / predicted step time, on average, */
    unsigned n_bias_draft, n_bias_plain; /* of the steps planned with drafts and without */
    sd_cost drafter;                     /* the drafter's ms per pass by requests drafted for at once */
    double drafter_fixed;                /* a drafter call's fixed work, in passes */
    unsigned n_drafter_fixed;
    sd_accept prior[SD_ADAPT_ACCEPT_KEYS];
    sd_accept fb_prior[SD_ADAPT_ACCEPT_KEYS];                        /* the same for the fallback proposer's drafts */
    sd_accept m_prior[SD_ADAPT_ACCEPT_KEYS][SD_ADAPT_MATCH_CLASSES]; /* the same for lookup drafts by match length */
    int probe_every[SD_ADAPT_ACCEPT_KEYS]; /* per kind: the probe interval a new request starts with */
    bool drafter_q;                        /* the drafter answered a q request with q */
    uint64_t k_hist[SD_MAX_DRAFT + 1];     /* request-steps by drafts chosen */
    uint64_t pred_us, meas_us, err_us;     /* planned steps: predicted, measured, |difference| */
    double pred_ms;                        /* this step's prediction (0: none) */
    sd_sched_plan plan;                    /* this step's plan as chosen (step_ms: pred_ms) */
    bool step_lookup;                      /* this step verifies lookup drafts instead of the drafter's */
    sd_regime rg;                          /* the regime test (regime.h) */
    bool step_plain, step_test;            /* this step: the test's plain block; a step the test measures */
    sd_regime pipe_rg;                     /* the pipelining test (sd_adapt_pipelines) */
    bool pipe_asked, pipe_measure;         /* this step: its protocol came from that test; a step it measures */
    int pipe_rows;                         /* ... and its decode rows (requests decoding) */
    double alt_ms, alt_tok, alt_rows;      /* this step's plain alternative: predicted time, tokens, rows */
    int maxk;                              /* this step's longest span chosen */
    sd_sched_req *sr;                      /* scratch */
    sd_accept *known;                      /* estimates of requests whose drafts are at hand (supply known) */
    sd_sched_cand *cand;
    int *kk, *map, *k0;
    int cap;
} sd_adapt;

void sd_adapt_init(sd_adapt *ad);
void sd_adapt_free(sd_adapt *ad);

/* Measures the engine before serving: a throwaway request verifies spans of
 * 0..kmax drafts (greedy, then sampled), three passes each, then batches of
 * 4 and 16 such requests (greedy, as far as max_batch allows), so the cost
 * model starts from this machine's curve rather than from the first,
 * cold, requests (and the weights are paged in); it stops after budget_ms
 * (a large model on a slow device gets fewer sizes measured). Returns
 * SD_OK, or the error that stopped it (the model then starts emptier). */
sd_status sd_adapt_calibrate(sd_adapt *ad, sd_engine *e, int kmax, int max_batch, double budget_ms, char *err,
                             size_t errlen);

/* After sd_adapt_calibrate, for a loop with nothing between its steps (the
 * in-process loop, spec_run.h): the regime test's plain figures for the
 * load of `decoding` requests (sampled: any samples) from the calibrated
 * price of a plain step, so that its plain block need not run where
 * drafting's first block beats it by far (sd_regime_seed). False when the
 * calibration did not price that step. */
bool sd_adapt_seed_plain(sd_adapt *ad, int decoding, bool sampled);

/* A new request; fixed: it chose its own num_draft. */
void sd_areq_init(sd_areq *q, bool fixed);

/* Chooses this step's drafts. For each of reqs[0..n): budgets[i] is the
 * most drafts it may verify (0: none — prefilling, finished, speculation off
 * or capped), avail[i] the drafts at hand (pipelined: its span's; < 0: as
 * many as asked, i.e. serial, or a pipelined request that would wait),
 * catchup[i] (NULL: none) the tokens the drafter would first have to take
 * in for it (beyond a step's worth: it was opened, or left without drafts
 * a while). On
 * return budgets[i] = the drafts chosen and tell[i] (when tell is not NULL)
 * = how far the drafter should draft ahead for it (pipelined). kv_free: free
 * KV blocks (< 0: no limit), bs: block size, chunk[i] (NULL: none): the prompt tokens
 * reqs[i] prefills this step (sd_engine_prefill_plan), pipelined: the
 * step's protocol. Returns SD_OK or SD_ERR_NOMEM (budgets then unchanged). */
sd_status sd_adapt_plan(sd_adapt *ad, sd_req *const *reqs, sd_areq *const *aq, int *budgets, const int *avail,
                        const int *catchup, int *tell, int n, int kv_free, int bs, const int *chunk, bool pipelined);

/* The fallback (vf_server.c, --spec-fallback): after the plan, and the
 * wait for spans, some requests that were to verify drafts have none (a
 * pipelined span not there, a drafter down or without an answer). For
 * them the verifier's own n-gram lookup has fb_avail[i] drafts (0 for the
 * others). Chooses how many of those each verifies, by the same rate as
 * the plan, the others' drafts fixed at k[i] (what they verify) and the
 * drafter costing nothing more this step; each candidate's acceptance is
 * its estimate of the fallback's drafts (seeded from its kind's), kept
 * apart from the drafter's so that neither skews the other. A request that
 * set its own num_draft verifies them all (at most its choice). The
 * estimate is a plain EMA (n-gram matches come and go: a short run of
 * rejections is no change of regime), and a request declined
 * SD_ADAPT_FB_PROBE times in a row verifies one (a probe), so an estimate
 * that fell is measured again. On return
 * k[i] = the fallback's drafts the candidates verify, aq[i]->fb_k the same
 * (0 for the others). kv: no block beyond the plan's (a candidate verifies
 * at most the drafts it was given). Returns SD_OK or SD_ERR_NOMEM (k then
 * 0 for the candidates). */
sd_status sd_adapt_fallback(sd_adapt *ad, sd_req *const *reqs, sd_areq *const *aq, int *k, const int *fb_avail, int n,
                            const int *chunk);

/* Serial, after the plan and before the drafter is asked (vf_server.c,
 * --spec-fallback ngram): the verifier's own n-gram lookup has lk_avail[i]
 * drafts for request i (at most its budget; 0: none), found by an n-gram of
 * length match[i]. Prices the step in which the requests with such drafts
 * verify as many of them as pay (each by its estimate for that match
 * length, adapt.h), the others none, and the drafter is not asked (the
 * step's time outside the engine that of a step without drafts) — and
 * compares it with the plan's step (ad->plan, both predictions corrected by
 * their kind's average error). A lookup step costs no drafter time, and on
 * text that repeats itself its drafts are as good as the drafter's (on a
 * CPU, demo pair, C = 1, T = 0: 3.7 accepted a lookup step against 3.6 a
 * drafter's, whose call was 37% of the step). Not in the regime test's
 * plain block, nor where a request with its own num_draft verifies the
 * drafter's. Returns true when the lookup step wins: then k[i] = the
 * lookup's drafts request i verifies, its estimates learn from them (not the
 * drafter's: for those, no step happened), the step's time outside the
 * engine counts as a plain step's (the drafter's figures do not fade), and
 * for the regime test it is a drafting step. False: the step runs as
 * planned, k untouched (the lookup's estimates may have been seeded). */
bool sd_adapt_lookup(sd_adapt *ad, sd_req *const *reqs, sd_areq *const *aq, int *k, const int *lk_avail,
                     const int *match, int n, int kv_free, int bs, const int *chunk);

/* Pipelined: the drafter answered for a state of r with a dry span (no
 * drafts past the committed tokens it continues): the proposer's supply
 * there was nothing — observed as a step that asked one draft and was
 * offered none. (A step without a span teaches nothing: the drafter may
 * only be late.) Not for a request whose num_draft is its own. */
void sd_adapt_dry(sd_adapt *ad, const sd_req *r, sd_areq *q);

/* After the step: t is the engine's timing, wall_ms the step's wall time
 * (from the start of its planning — drafter exchange and waits included,
 * router I/O not — to the end of the engine step; <= 0: unknown), cycle_ms
 * the time from the end of the previous step to the end of this one (the
 * regime test's measure; <= 0: unknown, e.g. after an idle spell),
 * offered[i] / accepted[i] what the engine verified for reqs[i], had_q[i]
 * whether those drafts came with q, catchup[i] the tokens the drafter first
 * had to take in for it (as for the plan: their cost is measured apart from
 * the drafter's pace), draft_ms[i] the drafter's time behind them (0:
 * unknown), ready[i] (pipelined) whether the span was there when
 * the step began. A request whose drafts were the fallback's (aq[i]->fb_k
 * > 0) teaches its estimate of the fallback, and the drafter's figures as a
 * step without the drafter's drafts. */
void sd_adapt_done(sd_adapt *ad, const sd_step_timing *t, double wall_ms, double cycle_ms, sd_req *const *reqs,
                   sd_areq *const *aq, const int *offered, const int *accepted, const bool *had_q, const int *catchup,
                   const double *draft_ms, const bool *ready, int n, bool pipelined);

/* --spec-pipeline auto with a drafter on compute of its own (its own cores
 * or device): whether the next step runs the pipelined protocol or the
 * serial one, by the pipelining test — the regime test of regime.h with
 * pipelined blocks against serial ones (SD_PIPE_PIPELINED, SD_PIPE_SERIAL),
 * compared by tokens committed per ms over whole cycles, the figures kept
 * apart by load (decoding: the requests decoding, sampled: whether any
 * samples). Neither protocol is known to be faster: drafting ahead hides
 * the drafter's time only when the span drafted for the likeliest outcome
 * (every draft in flight accepted, the guess of the next token right) is
 * the one needed, and the adaptive choice drafts long enough that a
 * rejection is likely (CPU, demo pair, --threads 1 each, C = 1, T = 0:
 * pipelined 0.90x serial in one benchmark, 1.10x in another;
 * docs/BENCHMARKS.md). Call
 * before sd_adapt_plan; a step is measured when it decodes only (no prompt
 * chunks), some request may draft, and the regime test does not run it
 * plain. */
bool sd_adapt_pipelines(sd_adapt *ad, int decoding, bool sampled);

/* The kind of request r (its verification mode and temperature bucket). */
int sd_adapt_key(const sd_adapt *ad, const sd_req *r);

#endif
