/* bench_decode.c — specd-bench-decode: single-stream decode speed vs the
 * memory roofline, measured in one run on this machine.
 *
 *   specd-bench-decode [--model DIR | --random-weights CONFIG.json] [--threads N]
 *                      [--tokens N] [--runs N] [--quant none|int8] [--device cpu|cuda:N]
 *                      [--isa auto|amx|avx512|avx2|scalar] [--batch-invariant]
 *                      [--graphs on|off|ab] [--fuse on|off|ab] [--context N]
 *                      [--kv-dtype auto|f32|bf16] [--tensor-parallel-size N]
 *
 * Prints decode tokens/s (greedy, one sequence, after a prompt; each step's
 * token is the argmax on the backend, as the verifier takes greedy rows), the bytes of
 * weights one decode step reads, the memory bandwidth of a plain multi-
 * threaded copy of a buffer much larger than the caches (STREAM "copy"
 * convention: bytes read + bytes written), and the ratio of achieved
 * weight-read bandwidth to it. Then the cost of one forward pass over a span of
 * T = 1..16 positions after a 300-token context (a verify pass is T = K+1),
 * relative to one decode step (T = 1): speculation pays when this stays near 1
 * (every row's argmax on the backend, as a greedy verify pass).
 * Then attention alone at the model's shape and KV element type (random keys
 * and values, scattered blocks): one layer's call for T = 1 and 8 rows at a
 * context of 300, 1024 and 4096 positions, and that times the layers; and
 * the same call over as many caches as the model has layers (at most 8)
 * called in turn, as a decode step meets them — each layer's K/V no longer
 * in the caches nearest the core (at 4,096 positions of the demo target, 16
 * MB: 2.2-3.1x the time of one cache called again and again). On a
 * device, logits rows (1, 16, 144) copied to the host into pageable memory and
 * into the backend's host buffer (page-locked), alternating.
 * --quant int8 measures the int8 weights (sd_model_quantize_q8); --isa caps
 * the kernels' instruction set (an AVX2-only machine measured on an AVX-512
 * one); --random-weights measures a model of a config.json's shapes with
 * random weights (sd_model_random: a published model's size without its
 * checkpoint, e.g. bench/configs/); --device runs it on a GPU (the host
 * copy bandwidth then says nothing: the device's read bandwidth is measured
 * instead, by a kernel that reads 1 GiB, sd_cuda_read_bandwidth). --batch-invariant measures that mode (CUDA's
 * deterministic matmuls); --graphs off runs a CUDA device's passes eagerly,
 * ab interleaves runs with and without CUDA graphs and prints both; --fuse
 * likewise for the CUDA default mode's fusions (sd_cuda_set_fuse: packed
 * q/k/v and gate/up GEMMs, bf16 copies from rmsnorm and SwiGLU), one of the
 * two as ab at a time.
 * --context N decodes after a prompt of N tokens (default 32), so that
 * attention over a long context is in the step (its cost: the difference
 * from a short context), and prints the prompt's prefill tokens/s (chunks of
 * 256, best run); --kv-dtype chooses the KV cache's element type;
 * --tensor-parallel-size N splits the model over N ranks of --device
 * (model.h: N CPU ranks of --threads / N threads each, or one GPU a rank) and
 * prints each rank's share of the weights. */
#include <getopt.h>
#include <math.h>
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

/* Prefills a fixed prompt of n tokens (chunks of 256) into seq; the last
 * position's logits into logits. */
static sd_status prefill(sd_model *m, sd_kv_seq *seq, int n, float *logits, char *err, size_t errlen)
{
    const sd_model_config *c = sd_model_cfg(m);
    sd_kv_pool *pool = sd_model_kv_pool(m);
    int32_t chunk[256];
    for (int p = 0; p < n; p += 256) {
        int k = n - p < 256 ? n - p : 256;
        for (int i = 0; i < k; i++) chunk[i] = (int32_t)(((p + i) * 7919 + 13) % c->vocab_size);
        sd_batch_seq b = {chunk, k, p, seq, p + k == n, NULL, NULL, NULL};
        sd_status st = sd_kv_reserve(pool, seq, k);
        if (st == SD_OK) st = sd_model_forward(m, &b, 1, logits, err, errlen);
        if (st != SD_OK) return st;
        sd_kv_commit(pool, seq, k);
    }
    return SD_OK;
}

/* Greedy-decodes n_tokens after a fixed prompt of ctx tokens; returns decode seconds, the prompt's
 * prefill seconds (its logits on the host included) in *prefill_s. */
static double decode_run(sd_model *m, int ctx, int n_tokens, double *prefill_s, char *err, size_t errlen)
{
    const sd_model_config *c = sd_model_cfg(m);
    sd_kv_pool *pool = sd_model_kv_pool(m);
    float *logits = malloc((size_t)c->vocab_size * sizeof(float));
    sd_kv_seq seq;
    sd_kv_seq_init(&seq);
    double t = -1;
    double t0 = sd_now_s();
    if (!logits || prefill(m, &seq, ctx, logits, err, errlen) != SD_OK) goto out;
    *prefill_s = sd_now_s() - t0;
    int32_t tok = sd_argmax(logits, c->vocab_size), next;
    t0 = sd_now_s();
    for (int i = 0; i < n_tokens; i++) { /* as the verifier decodes greedy rows: the argmax on the backend */
        if (sd_kv_reserve(pool, &seq, 1) != SD_OK) goto out;
        sd_batch_seq d = {&tok, 1, ctx + i, &seq, 1, &next, NULL, NULL};
        if (sd_model_forward(m, &d, 1, NULL, err, errlen) != SD_OK) goto out;
        sd_kv_commit(pool, &seq, 1);
        tok = next;
    }
    t = sd_now_s() - t0;
out:
    sd_kv_seq_release(pool, &seq);
    free(logits);
    return t;
}

/* Best time of a forward pass over T <= 16 positions at pos0 (KV rolled back each time), every
 * row's argmax as a greedy verify pass takes it (on the backend: a GPU's logits stay there). */
static double span_time(sd_model *m, sd_kv_seq *seq, const int32_t *toks, int pos0, int T, int reps)
{
    sd_kv_pool *pool = sd_model_kv_pool(m);
    int32_t am[16];
    char err[256];
    double best = 1e30;
    if (T > 16) return -1;
    for (int r = 0; r < reps; r++) {
        if (sd_kv_reserve(pool, seq, T) != SD_OK) return -1;
        sd_batch_seq b = {toks + pos0, T, pos0, seq, T, am, NULL, NULL};
        double t0 = sd_now_s();
        if (sd_model_forward(m, &b, 1, NULL, err, sizeof err) != SD_OK) return -1;
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
    sd_batch_seq pre = {toks, 300, 0, &seq, 0, NULL, NULL, NULL};
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

/* Best time (s) of one attention call: T query rows at positions ctx-T ..
 * ctx-1 over the cache kv, every head of the shape. */
static double attn_time(sd_backend *be, const sd_kv_layer *kv, const int32_t *bt, const float *q, float *out,
                        const sd_attn_shape *sh, int ctx, int T, int reps)
{
    sd_attn_seq s = {0, T, ctx - T, bt};
    double best = 1e30;
    for (int r = 0; r <= reps; r++) { /* the first call warms up */
        double t0 = sd_now_s();
        if (be->ops->attention(be, out, q, kv, &s, 1, sh) != SD_OK) return -1;
        if (be->ops->sync) be->ops->sync(be);
        double dt = sd_now_s() - t0;
        if (r > 0 && dt < best) best = dt;
    }
    return best;
}

/* The same over `n` caches of one layer's size called in turn, as a step
 * calls its layers (each layer's K/V has left the caches nearest the core
 * when its turn comes): best time of a round over n. */
static double attn_time_cold(sd_backend *be, const sd_kv_layer *kvs, int n, const int32_t *bt, const float *q,
                             float *out, const sd_attn_shape *sh, int ctx, int T, int reps)
{
    sd_attn_seq s = {0, T, ctx - T, bt};
    double best = 1e30;
    for (int r = 0; r <= reps; r++) {
        double t0 = sd_now_s();
        for (int l = 0; l < n; l++)
            if (be->ops->attention(be, out, q, &kvs[l], &s, 1, sh) != SD_OK) return -1;
        if (be->ops->sync) be->ops->sync(be);
        double dt = (sd_now_s() - t0) / n;
        if (r > 0 && dt < best) best = dt;
    }
    return best;
}

/* Attention alone, at the model's shape and KV element type over random
 * keys and values: one layer's call for T = 1 and 8 query rows at several
 * context lengths, and the layers' sum per pass. */
static void attention_table(sd_model *m)
{
    const sd_model_config *c = sd_model_cfg(m);
    sd_backend *be = sd_model_backend(m);
    enum { BS = 16, MAXCTX = 4096, TMAX = 8, COLD = 8 };
    const int ctxs[] = {300, 1024, MAXCTX}, Ts[] = {1, TMAX};
    int hd = c->head_dim, nblk = MAXCTX / BS;
    sd_dtype dt = sd_model_kv_dtype(m);
    size_t el = dt == SD_DTYPE_BF16 ? 2 : 4, kv_n = (size_t)MAXCTX * c->n_kv_heads * hd;
    size_t q_n = (size_t)TMAX * c->n_heads * hd, host_n = kv_n > q_n ? kv_n : q_n;
    float *host = malloc(host_n * sizeof *host);
    int32_t bt_host[MAXCTX / BS];
    sd_kv_layer kv = {be->ops->alloc(be, kv_n * el), be->ops->alloc(be, kv_n * el), dt};
    float *q = be->ops->alloc(be, q_n * sizeof *q), *out = be->ops->alloc(be, q_n * sizeof *out);
    int32_t *bt = be->ops->alloc(be, sizeof bt_host);
    if (host && kv.k && kv.v && q && out && bt) {
        for (int b = 0; b < nblk; b++) bt_host[b] = (int32_t)((b * 37) % nblk); /* scattered blocks */
        be->ops->to_backend(be, bt, bt_host, sizeof bt_host);
        uint32_t x = 12345;
        for (size_t i = 0; i < host_n; i++) { /* values in [-1, 1), bf16-exact: a cache of either type */
            x = x * 1664525u + 1013904223u;
            host[i] = (float)((int)(x >> 24) - 128) / 128.0f;
        }
        if (el == 2) { /* bf16 bits: the upper halves of the f32 values */
            uint16_t *h = (uint16_t *)host;
            for (size_t i = 0; i < kv_n; i++) h[i] = (uint16_t)(((const uint32_t *)host)[i] >> 16);
        }
        be->ops->to_backend(be, kv.k, host, kv_n * el);
        be->ops->to_backend(be, kv.v, host, kv_n * el);
        /* as many more caches as the model has layers (at most COLD): the step's layers in turn */
        sd_kv_layer cold[COLD];
        int n_cold = 0;
        for (; n_cold < c->n_layers && n_cold < COLD; n_cold++) {
            cold[n_cold] = (sd_kv_layer){be->ops->alloc(be, kv_n * el), be->ops->alloc(be, kv_n * el), dt};
            if (!cold[n_cold].k || !cold[n_cold].v) {
                be->ops->free(be, cold[n_cold].k), be->ops->free(be, cold[n_cold].v);
                break;
            }
            be->ops->to_backend(be, cold[n_cold].k, host, kv_n * el);
            be->ops->to_backend(be, cold[n_cold].v, host, kv_n * el);
        }
        for (size_t i = 0; i < q_n; i++) host[i] = (float)((int)(i % 17) - 8) / 8.0f;
        be->ops->to_backend(be, q, host, q_n * sizeof *q);
        sd_attn_shape sh = {c->n_heads, c->n_kv_heads, hd, BS, 1.0f / sqrtf((float)hd), sd_model_act_bf16(m)};
        printf("attention alone   context   T   us/layer   ms/pass   us/layer, %d caches in turn (%d layers; %s cache, "
               "best of 20)\n",
               n_cold, c->n_layers, sd_dtype_name(dt));
        for (size_t i = 0; i < sizeof ctxs / sizeof ctxs[0]; i++)
            for (size_t j = 0; j < sizeof Ts / sizeof Ts[0]; j++) {
                double t = attn_time(be, &kv, bt, q, out, &sh, ctxs[i], Ts[j], 20);
                double tc = n_cold > 1 ? attn_time_cold(be, cold, n_cold, bt, q, out, &sh, ctxs[i], Ts[j], 20) : -1;
                if (t >= 0)
                    printf("%25d %3d %10.1f %9.3f %10.1f\n", ctxs[i], Ts[j], t * 1e6, t * 1e3 * c->n_layers, tc * 1e6);
            }
        for (int l = 0; l < n_cold; l++) be->ops->free(be, cold[l].k), be->ops->free(be, cold[l].v);
    }
    free(host);
    be->ops->free(be, kv.k), be->ops->free(be, kv.v), be->ops->free(be, q), be->ops->free(be, out);
    be->ops->free(be, bt);
}

/* Best seconds of to_host copying n bytes from src into dst (of 10). */
static double copy_time(sd_backend *be, void *dst, const void *src, size_t n)
{
    double best = 1e30;
    for (int r = 0; r < 10; r++) {
        double t0 = sd_now_s();
        be->ops->to_host(be, dst, src, n);
        double dt = sd_now_s() - t0;
        if (dt < best) best = dt;
    }
    return best;
}

/* Where the backend offers host buffers (a GPU: page-locked): logits rows
 * copied to the host into malloc's memory and into sd_model_logits_grow's,
 * alternating — the rows a sampled pass hands over (1, 16 sequences, 16
 * spans of 9). */
static void logits_copy_table(sd_model *m)
{
    sd_backend *be = sd_model_backend(m);
    if (!be->ops->host_alloc) return;
    enum { ROWS = 144 };
    size_t V = (size_t)sd_model_cfg(m)->vocab_size, cap = 0;
    float *dev = be->ops->alloc(be, ROWS * V * sizeof *dev), *plain = malloc(ROWS * V * sizeof *plain), *pinned = NULL;
    if (dev && plain && sd_model_logits_grow(m, &pinned, &cap, ROWS) == SD_OK) {
        memset(plain, 0, ROWS * V * sizeof *plain); /* pages present, as a reused buffer's */
        printf("logits to host    rows   pageable ms  GB/s   host buffer ms  GB/s   (vocab %zu, best of 10)\n", V);
        const int rows[] = {1, 16, ROWS};
        for (size_t i = 0; i < sizeof rows / sizeof rows[0]; i++) {
            size_t n = (size_t)rows[i] * V * sizeof *dev;
            double a = copy_time(be, plain, dev, n), b = copy_time(be, pinned, dev, n);
            a = fmin(a, copy_time(be, plain, dev, n)), b = fmin(b, copy_time(be, pinned, dev, n));
            printf("%22d %13.3f %5.1f %16.3f %5.1f\n", rows[i], a * 1e3, n / a / 1e9, b * 1e3, n / b / 1e9);
        }
    }
    sd_model_logits_free(m, pinned);
    free(plain);
    be->ops->free(be, dev);
}

/* A device's roofline: its read bandwidth measured by a kernel that only
 * reads (1 GiB, best of 5), the decode speed it allows (weight bytes per
 * token / bandwidth) and the fraction of it achieved. */
static void device_roofline(sd_backend *be, double achieved, size_t wb)
{
    double bw = 0.0;
#ifdef SD_HAVE_CUDA
    if (sd_backend_is_cuda(be) && sd_cuda_read_bandwidth(be, (size_t)1 << 30, 5, &bw) != SD_OK) bw = 0.0;
#else
    (void)be;
#endif
    if (bw <= 0.0) {
        printf("roofline                   not measured on this device: "
               "compare the weight read bandwidth with its own\n");
        return;
    }
    printf("device read bandwidth      %.2f GB/s  (1 GiB read by a kernel, best of 5)\n", bw);
    printf("roofline tokens/s          %.1f\n", bw * 1e9 / (double)wb);
    printf("fraction of roofline       %.0f%%\n", 100.0 * achieved / bw);
}

/* Prints the figures of a measured decode speed (best seconds for n_tokens)
 * and the span table. */
static void report(sd_model *m, sd_backend *be, const char *name, const char *device, bool int8, bool random,
                   double best, int runs, int n_tokens)
{
    int nt = 0;
    size_t wb = 0; /* every rank's: what a step reads in all */
    for (int r = 0; r < sd_model_tp_size(m); r++) {
        nt += sd_backend_cpu_threads(sd_model_backend(sd_model_rank(m, r)));
        wb += sd_model_weight_bytes(sd_model_rank(m, r));
    }
    double tps = n_tokens / best, achieved = tps * (double)wb / 1e9;
    printf("model                      %s (%s weights, %s activations; %s %s)\n", name,
           int8     ? "int8"
           : random ? "random"
                    : "checkpoint",
           sd_model_act_bf16(m) ? "bf16" : "f32", nt ? "kernels" : "device", nt ? sd_cpu_isa() : device);
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
        device_roofline(be, achieved, wb);
    }
    span_table(m);
    attention_table(m);
    logits_copy_table(m);
}

/* --graphs and --fuse: CUDA graphs and fusions on or off (on, the default,
 * is all other backends have). */
static sd_status set_cuda_modes(sd_backend *be, int graphs, int fuse)
{
#ifdef SD_HAVE_CUDA
    if (sd_backend_is_cuda(be)) {
        sd_status st = sd_cuda_set_graphs(be, graphs);
        return st == SD_OK ? sd_cuda_set_fuse(be, fuse) : st;
    }
#endif
    (void)be;
    return graphs && fuse ? SD_OK : SD_ERR_ARG;
}

static void usage(void)
{
    fprintf(stderr, "usage: specd-bench-decode [--model DIR | --random-weights CONFIG.json] [--threads N]\n"
                    "                          [--tokens N] [--runs N] [--quant none|int8] [--device cpu|cuda:N]\n"
                    "                          [--isa auto|amx|avx512|avx2|scalar] [--batch-invariant]\n"
                    "                          [--graphs on|off|ab] [--fuse on|off|ab] [--context N]\n"
                    "                          [--kv-dtype auto|f32|bf16] [--tensor-parallel-size N]\n");
}

typedef struct bd_opts {
    const char *dir, *random_cfg, *device;
    int threads, n_tokens, runs, isa, ctx, kv_dtype, tp;
    int graphs; /* CUDA: 0 off, 1 on, 2 both (interleaved runs) */
    int fuse;   /* likewise */
    bool int8, invariant;
} bd_opts;

static const char *const g_isas[] = {"scalar", "avx2", "avx512", "amx"};

/* Index of s in names[0..n), or -1. */
static int pick(const char *s, const char *const *names, int n)
{
    for (int i = 0; i < n; i++)
        if (!strcmp(s, names[i])) return i;
    return -1;
}

/* Fills o from argv. Returns 0, or 2 after a message (usage error). */
static int parse_opts(int argc, char **argv, bd_opts *o)
{
    static const struct option lo[] = {{"model", 1, 0, 'm'},
                                       {"threads", 1, 0, 't'},
                                       {"tokens", 1, 0, 'n'},
                                       {"runs", 1, 0, 'r'},
                                       {"quant", 1, 0, 'q'},
                                       {"isa", 1, 0, 'i'},
                                       {"random-weights", 1, 0, 'w'},
                                       {"device", 1, 0, 'd'},
                                       {"batch-invariant", 0, 0, 'b'},
                                       {"graphs", 1, 0, 'g'},
                                       {"context", 1, 0, 'c'},
                                       {"kv-dtype", 1, 0, 'k'},
                                       {"fuse", 1, 0, 'f'},
                                       {"tensor-parallel-size", 1, 0, 'p'},
                                       {0, 0, 0, 0}};
    static const char *const graph_modes[] = {"off", "on", "ab"};
    *o = (bd_opts){.dir = "models/tinycode-16m",
                   .device = "cpu",
                   .n_tokens = 256,
                   .runs = 3,
                   .isa = -1,
                   .ctx = 32,
                   .graphs = 1,
                   .fuse = 1,
                   .tp = 1};
    char err[512];
    sd_status st = SD_OK;
    int c, dev_index, bad = 0;
    while (st == SD_OK && !bad && (c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == 'm') o->dir = optarg;
        else if (c == 'w') o->random_cfg = optarg;
        else if (c == 'd') o->device = optarg;
        else if (c == 't') st = sd_opt_int(optarg, "--threads", 0, 1024, &o->threads, err, sizeof err);
        else if (c == 'n') st = sd_opt_int(optarg, "--tokens", 1, 1 << 20, &o->n_tokens, err, sizeof err);
        else if (c == 'r') st = sd_opt_int(optarg, "--runs", 1, 1000, &o->runs, err, sizeof err);
        else if (c == 'c') st = sd_opt_int(optarg, "--context", 1, 1 << 20, &o->ctx, err, sizeof err);
        else if (c == 'p')
            st = sd_opt_int(optarg, "--tensor-parallel-size", 1, SD_COMM_MAX_RANKS, &o->tp, err, sizeof err);
        else if (c == 'q' && (!strcmp(optarg, "int8") || !strcmp(optarg, "none"))) o->int8 = !strcmp(optarg, "int8");
        else if (c == 'b') o->invariant = true;
        else if (c == 'g') bad = (o->graphs = pick(optarg, graph_modes, 3)) < 0;
        else if (c == 'f') bad = (o->fuse = pick(optarg, graph_modes, 3)) < 0;
        else if (c == 'k') bad = (o->kv_dtype = sd_kv_dtype_parse(optarg)) < 0;
        else if (c == 'i') bad = strcmp(optarg, "auto") && (o->isa = pick(optarg, g_isas, 4)) < 0;
        else bad = 1;
    }
    if (bad || optind < argc || (o->graphs == 2 && o->fuse == 2)) {
        usage();
        return 2;
    }
    char first[64];
    int kind = st == SD_OK
                   ? sd_device_parse(sd_tp_device_name(o->device, 0, first, sizeof first), &dev_index, err, sizeof err)
                   : 0;
    if (st == SD_OK && kind > 0 && o->isa >= 0) st = sd_seterr(err, sizeof err, SD_ERR_ARG, "--isa applies to the CPU");
    if (st != SD_OK || kind < 0) {
        fprintf(stderr, "specd-bench-decode: %s\n", err);
        return 2;
    }
    return 0;
}

/* Opens the backends (one a rank) and the model of o with its KV pool.
 * Returns 0, or 1 after a message. */
static int open_model(const bd_opts *o, sd_tp_group *g, sd_model **m)
{
    char err[512];
    sd_status st = sd_tp_group_open(o->device, o->tp, o->threads, g, err, sizeof err);
    if (st == SD_OK && o->isa >= 0 && sd_cpu_set_isa_level(o->isa) != o->isa) {
        fprintf(stderr, "specd-bench-decode: this CPU has no %s\n", g_isas[o->isa]);
        return 1;
    }
    /* --batch-invariant: split (or not) and summed in fixed chunks, as the verifier runs it */
    sd_tp_opts tp = {.size = o->tp, .bes = g->be, .comms = g->comm, .chunked = o->invariant};
    if (st == SD_OK)
        st = o->random_cfg ? sd_model_random_tp(o->random_cfg, 1, &tp, m, err, sizeof err)
                           : sd_model_load_tp(o->dir, &tp, m, err, sizeof err);
    if (st == SD_OK && o->int8) st = sd_model_quantize_q8(*m, err, sizeof err);
    if (st != SD_OK) {
        fprintf(stderr, "specd-bench-decode: %s\n", err);
        return 1;
    }
    sd_model_set_kv_dtype(*m, (sd_kv_dtype)o->kv_dtype);
    int positions = (o->ctx > 300 ? o->ctx : 300) + o->n_tokens + 64;
    if (sd_model_kv_init(*m, positions / 16 + 24, 16, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-decode: %s\n", err);
        return 1;
    }
    return 0;
}

/* A split model's ranks: devices, threads, each one's share of the weights. */
static void report_ranks(const sd_model *m, const sd_tp_group *g)
{
    int n = sd_model_tp_size(m);
    if (n < 2) return;
    printf("tensor parallel            %d ranks, exchanging through %s\n", n, sd_model_comm_name(m));
    for (int r = 0; r < n; r++) {
        const sd_model *k = sd_model_rank(m, r);
        int t = sd_backend_cpu_threads(sd_model_backend(k));
        char how[64] = "";
        if (t) snprintf(how, sizeof how, " (%d threads)", t);
        printf("  rank %d                   %s%s, weights read a token %.2f MB, KV %.1f KiB a position\n", r,
               g->device[r], how, sd_model_weight_bytes(k) / 1e6, sd_model_kv_bytes_per_position(k) / 1024.0);
    }
}

int main(int argc, char **argv)
{
    bd_opts o;
    int rc = parse_opts(argc, argv, &o);
    if (rc) return rc;
    sd_tp_group g;
    sd_model *m = NULL;
    if (open_model(&o, &g, &m)) return 1;
    sd_backend *be = g.be[0];
    char err[512];
    if (o.invariant) {
        bool yes = true;
        for (int r = 0; r < g.n; r++) yes &= sd_backend_set_batch_invariant(g.be[r], true);
        printf("batch-invariant            %s\n", yes ? "yes" : "no");
    }
    /* best[1]: the configuration reported (as asked, ab's on); best[0]: ab's off (1 graphs, 2 fusions) */
    int ab = o.graphs == 2 ? 1 : o.fuse == 2 ? 2 : 0;
    double best[2] = {1e30, 1e30}, best_prefill = 1e30;
    for (int r = 0; r < o.runs; r++) {
        for (int g = ab ? 0 : 1; g < 2; g++) {
            if (set_cuda_modes(be, ab == 1 ? g : o.graphs, ab == 2 ? g : o.fuse) != SD_OK) {
                fprintf(stderr, "specd-bench-decode: --graphs and --fuse apply to a CUDA device\n");
                return 2;
            }
            double pt = 0;
            double t = decode_run(m, o.ctx, o.n_tokens, &pt, err, sizeof err);
            if (t < 0) {
                fprintf(stderr, "specd-bench-decode: %s\n", err);
                return 1;
            }
            if (t < best[g]) best[g] = t;
            if (pt < best_prefill) best_prefill = pt;
        }
    }
    if (ab == 1)
        printf("without graphs tokens/s    %.1f  (eager, runs interleaved with the graphed ones below)\n",
               o.n_tokens / best[0]);
    if (ab == 2)
        printf("without fusions tokens/s   %.1f  (runs interleaved with the fused ones below)\n", o.n_tokens / best[0]);
    printf("context, KV cache          %d tokens before the first decoded one, %s\n", o.ctx,
           sd_dtype_name(sd_model_kv_dtype(m)));
    printf("prefill tokens/s           %.1f  (the %d-token prompt in chunks of 256, best of %d)\n",
           o.ctx / best_prefill, o.ctx, o.runs * (ab ? 2 : 1));
    report_ranks(m, &g);
    report(m, be, o.random_cfg ? o.random_cfg : o.dir, o.device, o.int8, o.random_cfg != NULL, best[1], o.runs,
           o.n_tokens);
    sd_model_free(m);
    sd_tp_group_close(&g);
    return 0;
}
