/* stats.c — percentiles, summaries, TPOT and the seeded RNG (see stats.h).
 * Pure functions; the only allocation is a scratch copy freed before return. */
#include "stats.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

double sd_stats_percentile(const double *sorted, size_t n, double p)
{
    if (!sorted || n == 0) return NAN;
    if (n == 1 || !(p > 0.0)) return sorted[0];
    if (p >= 100.0) return sorted[n - 1];
    double rank = p / 100.0 * (double)(n - 1);
    size_t lo = (size_t)floor(rank);
    if (lo >= n - 1) return sorted[n - 1];
    double frac = rank - (double)lo;
    return sorted[lo] + (sorted[lo + 1] - sorted[lo]) * frac;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

sd_status sd_stats_summarize(const double *v, size_t n, sd_stats_summary *out)
{
    if (!out) return SD_ERR_ARG;
    out->n = 0;
    out->mean = out->std = out->min = out->max = NAN;
    out->p50 = out->p90 = out->p99 = NAN;
    if (!v || n == 0) return SD_OK;
    double *s = malloc(n * sizeof *s);
    if (!s) return SD_ERR_NOMEM;
    size_t m = 0;
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isfinite(v[i])) {
            s[m++] = v[i];
            sum += v[i];
        }
    }
    if (m > 0) {
        qsort(s, m, sizeof *s, cmp_double);
        out->n = m;
        out->mean = sum / (double)m;
        double ss = 0.0;
        for (size_t i = 0; i < m; i++) ss += (s[i] - out->mean) * (s[i] - out->mean);
        out->std = sqrt(ss / (double)m);
        out->min = s[0];
        out->max = s[m - 1];
        out->p50 = sd_stats_percentile(s, m, 50.0);
        out->p90 = sd_stats_percentile(s, m, 90.0);
        out->p99 = sd_stats_percentile(s, m, 99.0);
    }
    free(s);
    return SD_OK;
}

double sd_stats_tpot(double e2e, double ttft, long out_tokens)
{
    if (out_tokens < 2 || !isfinite(e2e) || !isfinite(ttft) || e2e < ttft) return NAN;
    return (e2e - ttft) / (double)(out_tokens - 1);
}

void sd_rng_seed(sd_rng *rng, uint64_t seed) { rng->state = seed; }

uint64_t sd_rng_next(sd_rng *rng)
{
    uint64_t z = (rng->state += 0x9E3779B97F4A7C15ULL);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

double sd_rng_uniform(sd_rng *rng) { return (double)(sd_rng_next(rng) >> 11) * (1.0 / 9007199254740992.0); }

double sd_rng_exp_gap(sd_rng *rng, double rate)
{
    if (!(rate > 0.0) || !isfinite(rate)) return 0.0;
    /* 1 - u lies in (0, 1], so the log is finite. */
    return -log(1.0 - sd_rng_uniform(rng)) / rate;
}

void sd_rng_shuffle(sd_rng *rng, size_t *idx, size_t n)
{
    for (size_t i = n; i > 1; i--) {
        size_t j = (size_t)(sd_rng_next(rng) % i);
        size_t t = idx[i - 1];
        idx[i - 1] = idx[j];
        idx[j] = t;
    }
}
