/* spec_model.h — what adaptive speculation measures online: the cost of an
 * engine step and the acceptance of drafts.
 *
 * sd_cost is the time of one engine step, from the steps measured so far:
 *   forward(rows, seqs)      the forward pass over `rows` positions (prompt
 *                            chunks, decode rows and verify-span positions all
 *                            count) of `seqs` sequences. Kept as an average per
 *                            row count, because the curve is far from a line (a
 *                            CPU's tiles jump at their widths, its cost per row
 *                            grows once it is compute-bound, a GPU is flat until
 *                            then); a row count not measured yet is
 *                            interpolated between its nearest measured
 *                            neighbours, and beyond the largest one extended
 *                            with the slope of the last two, at most the
 *                            largest's cost per row (proportionally to
 *                            rows while only one count is measured, so that
 *                            smaller steps are tried first);
 *   accept(greedy, sampled)  verification after the pass: a greedy row costs
 *                            an argmax, a sampled position a full-vocabulary
 *                            distribution — only the positions reached, up to
 *                            a span's first rejection (the tokens committed):
 *                            drafts rejected early cost no sampling; a
 *                            decayed least-squares fit of
 *                            t = g·greedy rows + s·sampled positions.
 * The figures are kept as a shape times the machine's speed now: a fast
 * average of how each pass compares with the shape so far. A shared machine
 * drifts (neighbours, frequency); with the speed factored out, a size
 * measured in a slow spell compares fairly with one measured now, and the
 * shape itself can average slowly over many passes.
 * Once a row count has a few samples, a sample above 1.5 times its average
 * counts as 1.5 times (a hiccup of the machine is not the cost of a size).
 * Only sizes measured before move the speed (a new size's figure is a guess
 * from the others), and a size's cold first pass is replaced by its second
 * only when 1.5 times slower (otherwise the least of two noisy passes).
 * A count's figure is its own average shrunk towards the weighted line
 * through the counts near it (within 2 + rows / 4) by 8 pseudo-observations:
 * steps with drafts spread their rows over many counts, each with a few
 * samples, and a chooser picks the counts whose few samples happened to be
 * fast — measured on a CPU at 16 requests with n-gram drafts, such steps
 * took 16-20% more than planned while the counts' own figures predicted the
 * rows a step really had within 3%; shrunk, 9-11% (the rest: more drafts
 * came than the supply estimate expected). A count measured often keeps its
 * own figure, a tile's jump included.
 * Fewer rows never cost more: a prediction is capped by the least figure
 * of any larger row count measured. A size measured only in a slow start
 * (the first passes, the drafter taking in every prompt beside it) would
 * otherwise keep its dear figure for good once the plans it makes look
 * dear are never run — measured on a CPU, 16 requests: 16 rows were
 * predicted at 9.7 ms while 42 rows took 7.5, and 162 of 251 steps drafted
 * (0.70x plain's throughput in that run).
 * Nor do more rows cost more than in proportion: a count not yet warm
 * (fewer than 3 samples: not measured, or from a pass or two) costs at most
 * its rows times the cost per row of a warm count below it with as many
 * sequences or more (the warm one of the most sequences, then of the least
 * cost per row; a pass's fixed work is spread over more rows, its
 * sequences cost no less). The other way round, the slope between the
 * start-up measure's one-sequence counts and the plain step of 16 requests
 * (dearer by its sequences) priced each added row at 0.47 ms where drafting
 * steps took 0.17, and a count priced from one slow pass (48 rows of 16
 * requests at 15 ms where 34 took 8) was never chosen, so never measured
 * again (CPU, 1 thread). The bound is a guess, and an optimistic one gets
 * the count tried; once warm a count's own figure holds, a jump included.
 * The same rows cost more spread over more sequences (per-sequence work:
 * attention set-up, smaller span tiles): each row count also keeps the
 * average number of sequences its passes had, and a per-sequence cost g,
 * fitted to how passes deviate from their row count's average against how
 * their sequences deviate from its average, corrects a prediction for the
 * sequences at hand: t(rows, seqs) = T[rows] + g·(seqs - S[rows]), with g
 * the fitted slope less twice its standard error (the passes' noise makes a
 * slope fitted to a few deviations mostly noise: 0.36 ms a sequence was
 * fitted where attention set-up costs microseconds, and priced the plain
 * step of 16 requests at 6.5 ms while it took 3.5) — fewer
 * sequences always, more only near S[rows] (up to 1.5·S + 1): far beyond
 * what a size was measured with the figure would be a guess, and the
 * optimistic one gets the size tried, and so measured, with those
 * sequences.
 *
 * sd_accept is per-position acceptance, a[i] = P(draft i+1 is accepted |
 * drafts 1..i were), and per-position supply, c[i] = P(the proposer offers
 * draft i+1 | it offered 1..i and was asked for more; co[i]: and drafts 1..i
 * were accepted): a drafter stops early
 * on a token it doubts (--p-min), an n-gram proposer finds no match, so
 * asking for k drafts is costed at the drafts that come. Each figure is a
 * plain mean over its first observations and an EMA after, slow enough that
 * a single rejection does not swing it. A change shows as a run the
 * estimate finds unlikely: once equal outcomes in a row had a probability
 * below SD_ACCEPT_SURPRISE under the estimate the run began with, each
 * further outcome of the run moves a[i] half the way, so a drop (or a
 * recovery) is followed within a few steps. Asking for k drafts verifies
 * sum_{j=1..k} offered(j) drafts (offered(j) = prod_{i<j} c[i]) and commits
 * E(k) = 1 + sum_{j=1..k} prod_{i<j} co[i] · a[i] tokens on average, co[i]
 * the supply where drafts 1..i were accepted (a drafter that doubts stops
 * where its drafts fail: it offers more after accepted drafts than on
 * average, and offered(j) · prod a[i] fell 12-17% short of the tokens steps
 * made — docs/BENCHMARKS.md), where each figure is taken shrunk towards
 * the average of all positions observed by two pseudo-observations: a
 * position seldom judged (the tail of a span) borrows from the others, so
 * one unlucky outcome cannot keep it from ever being tried again, while a
 * position judged often speaks for itself.
 *
 * With nothing observed of a kind (a fresh server), every position starts
 * at SD_ACCEPT_START (one pseudo-observation): optimistic on purpose, so the
 * drafts get tried and measured — a pessimistic start would keep a drafter
 * nobody has measured from ever being measured, beyond rare one-draft
 * probes, while an optimistic one is corrected by the first few steps.
 *
 * No constant of one machine is in either: every figure is measured. Pure;
 * one thread owns each value. */
#ifndef SD_SPEC_MODEL_H
#define SD_SPEC_MODEL_H

#include <stdbool.h>

#include "proposer.h"

#define SD_COST_ROWS 512          /* row counts with their own average */
#define SD_ACCEPT_SURPRISE 0.0005 /* a run of outcomes this unlikely signals a change of acceptance */
#define SD_ACCEPT_START 0.8       /* acceptance assumed of a kind never observed: optimistic, so it gets tried */

/* The average of samples x so far, *n of them before this one: their plain
 * mean while 1 / n > alpha, an EMA of weight alpha after. */
double sd_avg_update(double old, double x, unsigned *n, double alpha);

typedef struct sd_cost {
    double t_row[SD_COST_ROWS + 1];   /* forward shape (ms at speed 1) by rows */
    double s_row[SD_COST_ROWS + 1];   /* sequences those passes had, on average */
    unsigned n_row[SD_COST_ROWS + 1]; /* samples behind t_row (0: never measured) */
    double t_fit[SD_COST_ROWS + 1];   /* the figures predicted from: t_row shrunk towards its neighbours (0: none) */
    double s_fit[SD_COST_ROWS + 1];   /* ... and their sequences */
    double t_min[SD_COST_ROWS + 2];   /* the least t_fit measured at or above each row count (0: none) */
    unsigned long long seen[SD_COST_ROWS + 1]; /* steps when each row count was last measured */
    short below[SD_COST_ROWS + 1];             /* the nearest measured row count at or below (0: none) */
    short above[SD_COST_ROWS + 1];             /* ... at or above (0: none) */
    short ref[SD_COST_ROWS + 1];               /* the warm count at or below each whose rows bound it (0: none) */
    short top, top2;                           /* the largest measured row counts (0: none) */
    unsigned long long steps;                  /* forward passes measured */
    double speed;                              /* the machine's speed now: predictions = speed × shape */
    double gxx, gxy, gyy, gn;       /* decayed sums for the per-sequence cost g (no intercept), and its error */
    double agg, ass, ags, agy, asy; /* decayed sums of accept = g·greedy + s·sampled */
    unsigned n_acc;
} sd_cost;

void sd_cost_init(sd_cost *c);

/* A forward pass over rows positions of seqs sequences took ms. */
void sd_cost_forward(sd_cost *c, int rows, int seqs, double ms);

/* Verifying greedy_rows greedy rows and sampled_pos sampled positions (those
 * reached: up to a span's first rejection) took ms. */
void sd_cost_accept(sd_cost *c, int greedy_rows, int sampled_pos, double ms);

/* Predicted forward ms for rows over seqs sequences (seqs <= 0: as many as
 * passes of that size had); 0 when nothing was measured. */
double sd_cost_forward_ms(const sd_cost *c, int rows, int seqs);

/* The same for an expected (fractional) number of rows: interpolated. */
double sd_cost_forward_at(const sd_cost *c, double rows, int seqs);

/* Samples behind the figure of a row count (0: never measured, or beyond
 * the table), and the passes measured since its latest one. */
unsigned sd_cost_samples(const sd_cost *c, int rows);
unsigned long long sd_cost_age(const sd_cost *c, int rows);

/* The per-sequence cost g (ms). */
double sd_cost_per_seq(const sd_cost *c);

/* Predicted verification ms; 0 when nothing was measured. */
double sd_cost_accept_ms(const sd_cost *c, double greedy_rows, double sampled_pos);

/* True once a forward pass was measured. */
bool sd_cost_known(const sd_cost *c);

typedef struct sd_accept {
    double a[SD_MAX_DRAFT];   /* P(draft i+1 accepted | drafts 1..i accepted) */
    unsigned n[SD_MAX_DRAFT]; /* observations behind a[i] (capped) */
    double c[SD_MAX_DRAFT];   /* P(the proposer offers draft i+1 | it offered 1..i and was asked for more) */
    unsigned nc[SD_MAX_DRAFT];
    double co[SD_MAX_DRAFT]; /* the same where drafts 1..i were all accepted: a proposer that doubts stops
                               * where its drafts fail too, so that after accepted drafts it offers more than
                               * on average (c: the rows verified; co: the tokens they yield) */
    unsigned nco[SD_MAX_DRAFT];
    unsigned short run[SD_MAX_DRAFT]; /* equal outcomes in a row at i */
    bool last[SD_MAX_DRAFT];          /* the latest outcome at i */
    bool fast[SD_MAX_DRAFT];          /* the current run was found surprising: catching up */
    double a_run[SD_MAX_DRAFT];       /* a[i] when the current run began */
    unsigned long long steps;         /* steps observed */
} sd_accept;

/* Starts an estimate: from prior (its figures, counting as at most
 * prior_weight observations each, so the request's own soon dominate) or,
 * with prior NULL, from nothing (a[i] = 1/2 as one observation: the first
 * real one moves it to 1/4 or 3/4). */
void sd_accept_init(sd_accept *a, const sd_accept *prior, unsigned prior_weight);

/* A step asked the proposer for `asked` drafts, it offered `offered` and
 * the verifier accepted the first `accepted` (0 <= accepted <= offered <=
 * asked); alpha: the EMA weight once warm; runs: follow surprising runs
 * fast (one request's estimate: yes; an average over many requests, whose
 * observations interleave: no). */
void sd_accept_observe(sd_accept *a, int asked, int offered, int accepted, double alpha, bool runs);

/* The same estimate where the first n drafts are known to be there (a span
 * at hand): the supply of positions 1..n is certain. For a copy. */
void sd_accept_supply_known(sd_accept *a, int n);

/* The same estimate where drafts come only with probability p (a span not
 * at hand): the supply of the first position, and so of every later one,
 * times p (the other positions' shrinking towards their average moves a
 * little with it). For a copy. */
void sd_accept_supply_scaled(sd_accept *a, double p);

/* Moves the figures of a at positions `from` and beyond that toward has
 * observed a share w of the way to toward's (0 <= w <= 1): evidence grows
 * stale while none comes. */
void sd_accept_fade(sd_accept *a, const sd_accept *toward, double w, int from);

/* P(at least j offered drafts accepted) = prod_{i<j} a[i] (shrunk); 1 for j = 0. */
double sd_accept_reach(const sd_accept *a, int j);

/* P(the proposer offers at least j drafts when asked for j or more). */
double sd_accept_offered(const sd_accept *a, int j);

/* P(draft j is offered and accepted, with all before it) = prod_{i<j} co[i] · a[i]
 * (shrunk): the expected tokens the j-th draft adds. Not offered(j) · reach(j): on
 * a CPU, 2 cores, 4 greedy requests asking a draft model for 6, that product
 * expected 12% fewer tokens than the steps made (the first 2 drafts were offered
 * in 86% of the steps, but in 95% of those whose first draft was accepted). */
double sd_accept_yield(const sd_accept *a, int j);

/* Expected tokens committed by a step that asks for k drafts (>= 1):
 * 1 + sum_{j=1..k} yield(j). */
double sd_accept_expected(const sd_accept *a, int k);

/* Expected drafts offered when k are asked for: sum_{j=1..k} offered(j). */
double sd_accept_drafts(const sd_accept *a, int k);

#endif
