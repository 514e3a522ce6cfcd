/* bench_sampler.c — specd-bench-sampler: the cost of one sampled token's
 * draw, with the whole vocabulary sorted against sorted only as far as the
 * draw reaches.
 *
 *   specd-bench-sampler [--vocab N] [--temperature T] [--min-p P] [--draws N] [--rounds R]
 *
 * Logits are synthetic and fixed (seeded): a Gaussian bulk of sd 3 with five
 * tokens 12 above it, the shape of a small language model's next-token
 * logits. Each round times --draws draws (u spread over [0, 1)) two ways,
 * interleaved: "sorted" — sd_sampler_distribution over the whole vocabulary
 * (sorted by probability) then sd_sample_sparse, as every draw ran before
 * sd_sampler_draw; "banded" — sd_sampler_draw. Prints microseconds a draw
 * (best and median of the rounds) and the number of draws whose tokens
 * differ (0: the two are the same function). One thread. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "clock.h"
#include "opt.h"
#include "sampler.h"

typedef struct bs_opts {
    int vocab, draws, rounds;
    float temperature, min_p;
} bs_opts;

static int parse(int argc, char **argv, bs_opts *o)
{
    *o = (bs_opts){.vocab = 151936, .draws = 200, .rounds = 9, .temperature = 0.8f, .min_p = 0.0f};
    static const struct option lo[] = {{"vocab", 1, 0, 'v'}, {"temperature", 1, 0, 't'}, {"min-p", 1, 0, 'm'},
                                       {"draws", 1, 0, 'd'}, {"rounds", 1, 0, 'r'},      {"help", 0, 0, 'h'},
                                       {0, 0, 0, 0}};
    char err[256];
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        sd_status st = SD_OK;
        if (c == 'v') st = sd_opt_int(optarg, "--vocab", 2, 1 << 22, &o->vocab, err, sizeof err);
        else if (c == 't') st = sd_opt_float(optarg, "--temperature", 1e-3, 100, &o->temperature, err, sizeof err);
        else if (c == 'm') st = sd_opt_float(optarg, "--min-p", 0, 1, &o->min_p, err, sizeof err);
        else if (c == 'd') st = sd_opt_int(optarg, "--draws", 1, 1 << 24, &o->draws, err, sizeof err);
        else if (c == 'r') st = sd_opt_int(optarg, "--rounds", 1, 1000, &o->rounds, err, sizeof err);
        else {
            fprintf(stderr, "usage: specd-bench-sampler [--vocab N] [--temperature T] [--min-p P] [--draws N] "
                            "[--rounds R]\n");
            return c == 'h' ? 1 : 2;
        }
        if (st != SD_OK) {
            fprintf(stderr, "specd-bench-sampler: %s\n", err);
            return 2;
        }
    }
    return 0;
}

/* Deterministic logits: Box-Muller over a small LCG, five peaks. */
static void make_logits(float *l, int n)
{
    uint64_t x = 88172645463325252ull;
    for (int i = 0; i < n; i++) {
        double u[2];
        for (int k = 0; k < 2; k++) {
            x = x * 6364136223846793005ull + 1442695040888963407ull;
            u[k] = ((double)(x >> 11) + 1.0) / 9007199254740994.0;
        }
        l[i] = (float)(3.0 * sqrt(-2.0 * log(u[0])) * cos(6.283185307179586 * u[1]));
    }
    for (int k = 0; k < 5; k++) l[(int)((k * 2654435761u) % (unsigned)n)] += 12.0f;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
    bs_opts o;
    int rc = parse(argc, argv, &o);
    if (rc) return rc == 1 ? 0 : rc;
    float *l = malloc((size_t)o.vocab * sizeof *l);
    sd_tokprob *dist = malloc((size_t)o.vocab * sizeof *dist);
    double *t[2] = {malloc((size_t)o.rounds * sizeof(double)), malloc((size_t)o.rounds * sizeof(double))};
    sd_sampler *sp;
    char err[256];
    if (sd_sampler_new(o.vocab, &sp, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-sampler: %s\n", err);
        return 1;
    }
    if (!l || !dist || !t[0] || !t[1]) {
        fprintf(stderr, "specd-bench-sampler: out of memory\n");
        return 1;
    }
    make_logits(l, o.vocab);
    sd_sampling s = sd_sampling_default();
    s.temperature = o.temperature;
    s.min_p = o.min_p;
    long differ = 0;
    for (int d = 0; d < o.draws; d++) { /* the two ways give the same tokens */
        double u = (d + 0.5) / o.draws;
        size_t n = sd_sampler_distribution(sp, &s, l, o.vocab, dist, (size_t)o.vocab);
        differ += sd_sample_sparse(dist, n, u) != sd_sampler_draw(sp, &s, l, o.vocab, u);
    }
    for (int r = 0; r < o.rounds; r++)
        for (int way = 0; way < 2; way++) {
            double t0 = sd_now_s();
            for (int d = 0; d < o.draws; d++) {
                double u = (d + 0.5) / o.draws;
                if (way == 0) {
                    size_t n = sd_sampler_distribution(sp, &s, l, o.vocab, dist, (size_t)o.vocab);
                    sd_sample_sparse(dist, n, u);
                } else {
                    sd_sampler_draw(sp, &s, l, o.vocab, u);
                }
            }
            t[way][r] = (sd_now_s() - t0) / o.draws * 1e6;
        }
    printf("vocab %d, temperature %g, min-p %g: %d rounds x %d draws, interleaved\n", o.vocab, o.temperature, o.min_p,
           o.rounds, o.draws);
    for (int way = 0; way < 2; way++) {
        qsort(t[way], (size_t)o.rounds, sizeof(double), cmp_double);
        printf("%-7s us/draw  best %9.1f  median %9.1f\n", way ? "banded" : "sorted", t[way][0], t[way][o.rounds / 2]);
    }
    printf("median sorted / banded  %.2fx\n", t[0][o.rounds / 2] / t[1][o.rounds / 2]);
    printf("draws that differ       %ld of %d\n", differ, o.draws);
    sd_sampler_free(sp);
    free(l);
    free(dist);
    free(t[0]);
    free(t[1]);
    return differ != 0;
}
