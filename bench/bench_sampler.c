/* bench_sampler.c — specd-bench-sampler: the cost of one sampled token's
 * draw, with the whole vocabulary sorted against sorted only as far as the
 * draw reaches.
 *
 *   specd-bench-sampler [--vocab N] [--temperature T] [--min-p P] [--draws N] [--rounds R] [--device DEV]
 *
 * Logits are synthetic and fixed (seeded): a Gaussian bulk of sd 3 with five
 * tokens 12 above it, the shape of a small language model's next-token
 * logits. Each round times --draws draws (u spread over [0, 1)) two ways,
 * interleaved: "sorted" — sd_sampler_distribution over the whole vocabulary
 * (sorted by probability) then sd_sample_sparse, as every draw ran before
 * sd_sampler_draw; "banded" — sd_sampler_draw. Prints microseconds a draw
 * (best and median of the rounds) and the number of draws whose tokens
 * differ (0: the two are the same function). One thread.
 *
 * With --device (cpu, cuda, cuda:N) the logits live on that backend, as a
 * pass leaves them, and three more ways are timed, interleaved: "copy+host"
 * — the row copied to the host, then sd_sampler_draw (what a sampled row
 * costs without the op); "device" — the backend's draw_rows of the row;
 * "device x8" — draw_rows of 8 rows at once (a verify span), per row. Their
 * tokens are checked against the host's. */
#include <getopt.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "backend.h"
#include "backend_open.h"
#include "clock.h"
#include "opt.h"
#include "sampler.h"

typedef struct bs_opts {
    int vocab, draws, rounds;
    float temperature, min_p;
    const char *device; /* NULL: the host ways only */
} bs_opts;

static int parse(int argc, char **argv, bs_opts *o)
{
    *o = (bs_opts){.vocab = 151936, .draws = 200, .rounds = 9, .temperature = 0.8f, .min_p = 0.0f};
    static const struct option lo[] = {
        {"vocab", 1, 0, 'v'},  {"temperature", 1, 0, 't'}, {"min-p", 1, 0, 'm'}, {"draws", 1, 0, 'd'},
        {"rounds", 1, 0, 'r'}, {"device", 1, 0, 'D'},      {"help", 0, 0, 'h'},  {0, 0, 0, 0}};
    char err[256];
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        sd_status st = SD_OK;
        if (c == 'v') st = sd_opt_int(optarg, "--vocab", 2, 1 << 22, &o->vocab, err, sizeof err);
        else if (c == 't') st = sd_opt_float(optarg, "--temperature", 1e-3, 100, &o->temperature, err, sizeof err);
        else if (c == 'm') st = sd_opt_float(optarg, "--min-p", 0, 1, &o->min_p, err, sizeof err);
        else if (c == 'd') st = sd_opt_int(optarg, "--draws", 1, 1 << 24, &o->draws, err, sizeof err);
        else if (c == 'r') st = sd_opt_int(optarg, "--rounds", 1, 1000, &o->rounds, err, sizeof err);
        else if (c == 'D') o->device = optarg;
        else {
            fprintf(stderr, "usage: specd-bench-sampler [--vocab N] [--temperature T] [--min-p P] [--draws N] "
                            "[--rounds R] [--device DEV]\n");
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

/* The three device ways (see the top), interleaved over o->rounds; prints
 * their medians and returns the count of draws whose tokens differ from the
 * host's, or -1 on an error. */
static long device_ways(const bs_opts *o, const sd_sampling *s, sd_sampler *sp, const float *l)
{
    enum { SPAN = 8 };
    sd_backend *be = NULL;
    char err[256];
    if (sd_backend_open(o->device, 1, &be, err, sizeof err) != SD_OK || !be->ops->draw_rows) {
        fprintf(stderr, "specd-bench-sampler: --device %s: %s\n", o->device, be ? "no draw_rows" : err);
        return -1;
    }
    size_t V = (size_t)o->vocab, bytes = V * sizeof(float);
    float *row = malloc(bytes), *dev = be->ops->alloc(be, SPAN * bytes);
    double *t[3];
    for (int w = 0; w < 3; w++) t[w] = malloc((size_t)o->rounds * sizeof(double));
    long differ = 0;
    for (int k = 0; dev && k < SPAN; k++) be->ops->to_backend(be, (char *)dev + k * bytes, l, bytes);
    sd_draw_row rows[SPAN];
    sd_draw_out out[SPAN];
    for (int r = 0; dev && row && r < o->rounds; r++)
        for (int way = 0; way < 3; way++) {
            double t0 = sd_now_s();
            int calls = way == 2 ? (o->draws + SPAN - 1) / SPAN : o->draws;
            for (int d = 0; d < calls; d++) {
                double u = (d + 0.5) / calls;
                if (way == 0) {
                    be->ops->to_host(be, row, dev, bytes);
                    sd_sampler_draw(sp, s, row, o->vocab, u);
                    continue;
                }
                int n = way == 1 ? 1 : SPAN;
                for (int k = 0; k < n; k++)
                    rows[k] =
                        (sd_draw_row){s->temperature, s->min_p, u, -1, 0, NULL, NULL, NULL, 0, s->top_k, s->top_p};
                if (be->ops->draw_rows(be, out, dev, rows, n, o->vocab) != SD_OK) differ = -1;
                if (differ >= 0 && r == 0 && out[0].token != sd_sampler_draw(sp, s, l, o->vocab, u)) differ++;
            }
            t[way][r] = (sd_now_s() - t0) / (way == 2 ? (double)calls * SPAN : (double)calls) * 1e6;
        }
    static const char *name[3] = {"copy+host", "device", "device x8"};
    for (int way = 0; dev && row && way < 3; way++) {
        qsort(t[way], (size_t)o->rounds, sizeof(double), cmp_double);
        printf("%-10s us/draw  best %9.1f  median %9.1f\n", name[way], t[way][0], t[way][o->rounds / 2]);
    }
    if (!dev || !row) differ = -1;
    if (dev) be->ops->free(be, dev);
    free(row);
    for (int w = 0; w < 3; w++) free(t[w]);
    sd_backend_free(be);
    return differ;
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
    if (o.device) {
        long dd = device_ways(&o, &s, sp, l);
        if (dd < 0) return 1;
        printf("device draws that differ from the host's  %ld\n", dd);
        differ += dd;
    }
    sd_sampler_free(sp);
    free(l);
    free(dist);
    free(t[0]);
    free(t[1]);
    return differ != 0;
}
