/* stats.h — pure numeric helpers of specd-bench: percentiles and summaries of
 * latency samples, the TPOT formula, and a small seeded RNG that draws Poisson
 * arrival gaps and shuffles prompt order.
 *
 * No allocation survives a call; nothing here touches global state, so every
 * function is safe to call from any thread on distinct arguments. */
#ifndef SD_BENCH_STATS_H
#define SD_BENCH_STATS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

/* Summary of one sample set. Every double is NAN when n == 0. */
typedef struct {
    size_t n;
    double mean, std, min, max; /* std: population standard deviation (numpy's default, as vLLM) */
    double p50, p90, p99;
} sd_stats_summary;

/* Returns the p-th percentile (0 <= p <= 100) of `sorted` (ascending, n
 * values) by linear interpolation between closest ranks (numpy's default):
 * rank = p/100 * (n-1). Returns NAN when n == 0 and the only value when n == 1;
 * p outside [0, 100] is clamped. */
double sd_stats_percentile(const double *sorted, size_t n, double p);

/* Summarizes the n values of v (not modified; NAN entries are skipped).
 * Fills *out; with no finite value out->n is 0 and the rest NAN.
 * Returns SD_OK, SD_ERR_ARG (out NULL) or SD_ERR_NOMEM. */
sd_status sd_stats_summarize(const double *v, size_t n, sd_stats_summary *out);

/* Time per output token after the first: (e2e - ttft) / (out_tokens - 1).
 * Returns NAN when it is undefined: out_tokens < 2, or ttft/e2e not finite,
 * or e2e < ttft. Units are the caller's (seconds in specd-bench). */
double sd_stats_tpot(double e2e, double ttft, long out_tokens);

/* Seeded pseudo-random generator (splitmix64). Plain value: no _free. */
typedef struct {
    uint64_t state;
} sd_rng;

/* Seeds rng; the same seed always yields the same sequence. */
void sd_rng_seed(sd_rng *rng, uint64_t seed);

/* Returns the next 64 random bits. */
uint64_t sd_rng_next(sd_rng *rng);

/* Returns a uniform double in [0, 1) with 53 random bits. */
double sd_rng_uniform(sd_rng *rng);

/* Returns an exponential inter-arrival gap in seconds for a Poisson process
 * of `rate` events per second (mean 1/rate). Returns 0 when rate <= 0 or is
 * not finite (meaning "send at once"). */
double sd_rng_exp_gap(sd_rng *rng, double rate);

/* Fisher-Yates shuffle of idx[0..n) in place. */
void sd_rng_shuffle(sd_rng *rng, size_t *idx, size_t n);

#endif
