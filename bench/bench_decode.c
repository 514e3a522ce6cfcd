/* bench_decode.c — specd-bench-decode: single-stream decode speed vs the
 * memory roofline, measured in one run on this machine.
 *
 *   specd-bench-decode [--model DIR | --random-weights CONFIG.json] [--threads N]
 *                      [--tokens N] [--runs N] [--quant none|int8] [--device cpu|cuda:N]
 *                      [--isa auto|amx|avx512|avx2|scalar] [--batch-invariant]
 *                      [--graphs on|off|ab]
 *
 * Prints decode tokens/s (greedy, one sequence, after a prompt), the bytes of
 * weights one decode step reads, the memory bandwidth of a plain multi-
 * threaded copy of a buffer much larger than the caches (STREAM "copy"
 * convention: bytes read + bytes written), and the ratio of achieved
 * weight-read bandwidth to it. Then the cost of one forward pass over a span of
 * T = 1..16 positions after a 300-token context (a verify pass is T = K+1),
 * relative to one decode step (T = 1): speculation pays when this stays near 1.
 * --quant int8 measures the int8 weights (sd_model_quantize_q8); --isa caps
 * the kernels' instruction set (an AVX2-only machine measured on an AVX-512
 * one); --random-weights measures a model of a config.json's shapes with
 * random weights (sd_model_random: a published model's size without its
 * checkpoint, e.g. bench/configs/); --device runs it on a GPU (the host
 * copy bandwidth then says nothing: the weight read bandwidth is printed to
 * compare with the device's). --batch-invariant measures that mode (CUDA's
 * deterministic matmuls); --graphs off runs a CUDA device's passes eagerly,
 * ab interleaves runs with and without CUDA graphs and prints both. */
#include <getopt.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "backend_open.h"
#include "clock.h"
#include "opt.h"
#include "model.h"
#include "sampler.h"

typedef struct copy_arg {
    char *dst;
    const char *src;
    size_t n;
} copy_arg;

static void *copy_part(void *p)
{
    copy_arg *a = p;
    memcpy(a->dst, a->src, a->n);
    return NULL;
}

/* Best of `reps` multi-threaded copies of `bytes`; returns GB/s (read+write). */
static double copy_bandwidth(size_t bytes, int threads, int reps)
{
    char *src = malloc(bytes), *dst = malloc(bytes);
    if (!src || !dst) return 0;
    memset(src, 1, bytes);
    memset(dst, 2, bytes);
    double best = 0;
    for (int r = 0; r < reps; r++) {
        pthread_t th[64];
        copy_arg args[64];
        size_t part = bytes / (size_t)threads;
        double t0 = sd_now_s();
        for (int i = 0; i < threads; i++) {
            args[i] = (copy_arg){dst + i * part, src + i * part, part};
            pthread_create(&th[i], NULL, copy_part, &args[i]);
        }
        for (int i = 0; i < threads; i++) pthread_join(th[i], NULL);
        double gbs = 2.0 * (double)part * threads / (sd_now_s() - t0) / 1e9;
        if (gbs > best) best = gbs;
    }
    free(src);
    free(dst);
    return best;
}

/* Greedy-decodes n_tokens after a fixed prompt; returns decode seconds. */
static double decode_run(sd_model *m, int n_tokens, char *err, size_t errlen)
{
    const sd_model_config *c = sd_model_cfg(m);
    sd_kv_pool *pool = sd_model_kv_pool(m);
    float *logits = malloc((size_t)c->vocab_size * sizeof(float));
    int32_t prompt[32];
    for (int i = 0; i < 32; i++) prompt[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    sd_kv_seq seq;
    sd_kv_seq_init(&seq);
    double t = -1;
    if (!logits || sd_kv_reserve(pool, &seq, 32) != SD_OK) goto out;
    sd_batch_seq b = {prompt, 32, 0, &seq, 1};
    if (sd_model_forward(m, &b, 1, logits, err, errlen) != SD_OK) goto out;
    sd_kv_commit(pool, &seq, 32);
    int32_t tok = sd_argmax(logits, c->vocab_size);
    double t0 = sd_now_s();
    for (int i = 0; i < n_tokens; i++) {
        if (sd_kv_reserve(pool, &seq, 1) != SD_OK) goto out;
        sd_batch_seq d = {&tok, 1, 32 + i, &seq, 1};
        if (sd_model_forward(m, &d, 1, logits, err, errlen) != SD_OK) goto out;
        sd_kv_commit(pool, &seq, 1);
        tok = sd_argmax(logits, c->vocab_size);
    }
    t = sd_now_s() - t0;
out:
    sd_kv_seq_release(pool, &seq);
    free(logits);
    return t;
}

/* Best time of a forward pass over T positions at pos0 (KV rolled back each time). */
static double span_time(sd_model *m, sd_kv_seq *seq, const int32_t *toks, int pos0, int T, int reps)
{
    sd_kv_pool *pool = sd_model_kv_pool(m);
    static float logits[16 * 262144];
    char err[256];
    double best = 1e30;
    if ((size_t)T * sd_model_cfg(m)->vocab_size > sizeof logits / sizeof logits[0]) return -1;
    for (int r = 0; r < reps; r++) {
        if (sd_kv_reserve(pool, seq, T) != SD_OK) return -1;
        sd_batch_seq b = {toks + pos0, T, pos0, seq, T};
        double t0 = sd_now_s();
        if (sd_model_forward(m, &b, 1, logits, err, sizeof err) != SD_OK) return -1;
        double dt = sd_now_s() - t0;
        if (dt < best) best = dt;
        sd_kv_commit(pool, seq, 0);
    }
    return best;
}

/* Prints the span-cost table: forward time for T positions vs T = 1. */
static void span_table(sd_model *m)
{
    const sd_model_config *c = sd_model_cfg(m);
    sd_kv_pool *pool = sd_model_kv_pool(m);
    int32_t toks[320];
    for (int i = 0; i < 320; i++) toks[i] = (int32_t)((i * 7919 + 13) % c->vocab_size);
    sd_kv_seq seq;
    sd_kv_seq_init(&seq);
    char err[256];
    sd_batch_seq pre = {toks, 300, 0, &seq, 0};
    if (sd_kv_reserve(pool, &seq, 300) != SD_OK || sd_model_forward(m, &pre, 1, NULL, err, sizeof err) != SD_OK) {
        sd_kv_seq_release(pool, &seq);
        return;
    }
    sd_kv_commit(pool, &seq, 300);
    printf("span positions T    ms/pass   x decode step   (300-token context, best of 30)\n");
    double t1 = span_time(m, &seq, toks, 300, 1, 30);
    const int spans[] = {1, 2, 3, 4, 6, 8, 12, 16};
    for (size_t i = 0; i < sizeof spans / sizeof spans[0] && t1 > 0; i++) {
        double t = span_time(m, &seq, toks, 300, spans[i], 30);
        if (t > 0) printf("%16d %10.3f %15.2f\n", spans[i], t * 1e3, t / t1);
    }
    sd_kv_seq_release(pool, &seq);
}

/* Prints the figures of a measured decode speed (best seconds for n_tokens)
 * and the span table. */
static void report(sd_model *m, sd_backend *be, const char *name, const char *device, bool int8, bool random,
                   double best, int runs, int n_tokens)
{
    int nt = sd_backend_cpu_threads(be);
    size_t wb = sd_model_weight_bytes(m);
    double tps = n_tokens / best, achieved = tps * (double)wb / 1e9;
    printf("model                      %s (%s weights, %s activations; %s %s)\n", name,
           int8 ? "int8" : random ? "random" : "checkpoint", sd_model_act_bf16(m) ? "bf16" : "f32",
           nt ? "kernels" : "device", nt ? sd_cpu_isa() : device);
    if (nt) printf("threads                    %d\n", nt);
    printf("decode tokens/s            %.1f  (best of %d runs x %d tokens)\n", tps, runs, n_tokens);
    printf("weight bytes per token     %.2f MB\n", wb / 1e6);
    printf("weight read bandwidth      %.2f GB/s\n", achieved);
    if (nt) { /* the host's memory: a copy measured here */
        double bw = copy_bandwidth((size_t)512 << 20, nt, 5);
        printf("memory copy bandwidth      %.2f GB/s  (512 MiB memcpy, %d threads, read+write)\n", bw, nt);
        printf("roofline tokens/s          %.1f\n", bw * 1e9 / (double)wb);
        printf("fraction of roofline       %.0f%%\n", 100.0 * achieved / bw);
    } else {
        printf("roofline                   not measured on a device: compare the weight read bandwidth with its own\n");
    }
    span_table(m);
}

/* --graphs: CUDA graphs on or off (on, the default, is all other backends have). */
static sd_status set_graphs(sd_backend *be, int on)
{
#ifdef SD_HAVE_CUDA
    if (sd_backend_is_cuda(be)) return sd_cuda_set_graphs(be, on);
#endif
    (void)be;
    return on ? SD_OK : SD_ERR_ARG;
}

static void usage(void)
{
    fprintf(stderr, "usage: specd-bench-decode [--model DIR | --random-weights CONFIG.json] [--threads N]\n"
                    "                          [--tokens N] [--runs N] [--quant none|int8] [--device cpu|cuda:N]\n"
                    "                          [--isa auto|amx|avx512|avx2|scalar] [--batch-invariant]\n"
                    "                          [--graphs on|off|ab]\n");
}

int main(int argc, char **argv)
{
    const char *dir = "models/tinycode-16m", *random_cfg = NULL, *device = "cpu";
    int threads = 0, n_tokens = 256, runs = 3, isa = -1;
    int graphs = 1; /* CUDA: 0 off, 1 on, 2 both (interleaved runs) */
    bool int8 = false, invariant = false;
    static const struct option lo[] = {{"model", 1, 0, 'm'}, {"threads", 1, 0, 't'}, {"tokens", 1, 0, 'n'},
                                       {"runs", 1, 0, 'r'}, {"quant", 1, 0, 'q'}, {"isa", 1, 0, 'i'},
                                       {"random-weights", 1, 0, 'w'}, {"device", 1, 0, 'd'},
                                       {"batch-invariant", 0, 0, 'b'}, {"graphs", 1, 0, 'g'}, {0, 0, 0, 0}};
    static const char *const graph_modes[] = {"off", "on", "ab"};
    static const char *const isas[] = {"scalar", "avx2", "avx512", "amx"};
    char err[512];
    sd_status st = SD_OK;
    int c, dev_index;
    while (st == SD_OK && (c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == 'm') dir = optarg;
        else if (c == 'w') random_cfg = optarg;
        else if (c == 'd') device = optarg;
        else if (c == 't') st = sd_opt_int(optarg, "--threads", 0, 1024, &threads, err, sizeof err);
        else if (c == 'n') st = sd_opt_int(optarg, "--tokens", 1, 1 << 20, &n_tokens, err, sizeof err);
        else if (c == 'r') st = sd_opt_int(optarg, "--runs", 1, 1000, &runs, err, sizeof err);
        else if (c == 'q' && (!strcmp(optarg, "int8") || !strcmp(optarg, "none"))) int8 = !strcmp(optarg, "int8");
        else if (c == 'b') invariant = true;
        else if (c == 'g') {
            for (graphs = 2; graphs >= 0 && strcmp(optarg, graph_modes[graphs]); graphs--) continue;
            if (graphs < 0) {
                usage();
                return 2;
            }
        } else if (c == 'i' && !strcmp(optarg, "auto")) isa = -1;
        else if (c == 'i') {
            for (isa = 3; isa >= 0 && strcmp(optarg, isas[isa]); isa--) continue;
            if (isa < 0) {
                usage();
                return 2;
            }
        } else {
            usage();
            return 2;
        }
    }
    int kind = st == SD_OK ? sd_device_parse(device, &dev_index, err, sizeof err) : 0;
    if (st == SD_OK && kind > 0 && isa >= 0) st = sd_seterr(err, sizeof err, SD_ERR_ARG, "--isa applies to the CPU");
    if (st != SD_OK || kind < 0) {
        fprintf(stderr, "specd-bench-decode: %s\n", err);
        return 2;
    }
    sd_backend *be = sd_backend_open(device, threads, err, sizeof err);
    if (isa >= 0 && sd_cpu_set_isa_level(isa) != isa) {
        fprintf(stderr, "specd-bench-decode: this CPU has no %s\n", isas[isa]);
        return 1;
    }
    sd_model *m = NULL;
    if (!be ||
        (random_cfg ? sd_model_random(random_cfg, 1, be, &m, err, sizeof err)
                    : sd_model_load(dir, be, &m, err, sizeof err)) != SD_OK ||
        (int8 && sd_model_quantize_q8(m, err, sizeof err) != SD_OK) ||
        sd_model_kv_init(m, (n_tokens + 64) / 16 + 24, 16, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-decode: %s\n", err);
        return 1;
    }
    if (invariant) printf("batch-invariant            %s\n", sd_backend_set_batch_invariant(be, true) ? "yes" : "no");
    /* best[1]: the configuration reported (graphs as asked); best[0]: eager, with --graphs ab */
    double best[2] = {1e30, 1e30};
    for (int r = 0; r < runs; r++) {
        for (int g = graphs == 2 ? 0 : 1; g < 2; g++) {
            if (set_graphs(be, graphs == 2 ? g : graphs) != SD_OK) {
                fprintf(stderr, "specd-bench-decode: --graphs applies to a CUDA device\n");
                return 2;
            }
            double t = decode_run(m, n_tokens, err, sizeof err);
            if (t < 0) {
                fprintf(stderr, "specd-bench-decode: %s\n", err);
                return 1;
            }
            if (t < best[g]) best[g] = t;
        }
    }
    if (graphs == 2)
        printf("without graphs tokens/s    %.1f  (eager, runs interleaved with the graphed ones below)\n",
               n_tokens / best[0]);
    report(m, be, random_cfg ? random_cfg : dir, device, int8, random_cfg != NULL, best[1], runs, n_tokens);
    sd_model_free(m);
    sd_backend_free(be);
    return 0;
}
