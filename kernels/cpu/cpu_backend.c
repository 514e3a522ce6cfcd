/* cpu_backend.c — the CPU implementation of backend.h.
 *
 * Work is split across the thread pool by output rows/columns or by
 * (token, head) pairs — never inside a reduction — so every op is
 * batch-invariant (see cpu_dot.h for the dot-product order). Weights of F32 /
 * BF16 checkpoints are used in place from the mmap; F16 and all 1-D tensors
 * are converted to F32 copies at upload. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "backend.h"
#include "cpu_amx.h"
#include "cpu_attn.h"
#include "cpu_dot.h"
#include "cpu_draw.h"
#include "cpu_elem.h"
#include "cpu_q8.h"
#include "threadpool.h"

typedef struct cpu_impl {
    sd_pool *pool;
    uint16_t *xbf; /* matmul input converted to bf16 (bf16 activation mode) */
    size_t xbf_len;
    uint16_t *xamx; /* ... and packed for the AMX tiles (sd_amx_pack) */
    size_t xamx_len;
    int8_t *xq; /* matmul input quantised for Q8 weights, and its row scales */
    float *xqs;
    size_t xq_len, xqs_len;
    int8_t *xqp; /* ... packed for the AMX-INT8 tiles (sd_q8_pack) */
    size_t xqp_len;
    float *attn_scratch; /* [n_threads][scratch_len] attention scores */
    size_t scratch_len;
    long lose_after; /* fault injection (SD_FAULT_DEVICE_LOST_AFTER): attention calls before the
                            * "device" is lost; < 0 never */
    bool lost;
    sd_status error;           /* the first failure of an op that returns void (take_error); SD_OK: none */
    sd_cpu_draw_scratch *draw; /* draw_rows' scratch, for the largest vocabulary yet */
} cpu_impl;

static cpu_impl *impl_of(sd_backend *be) { return be->impl; }

/* ------------------------------------------------------------- memory */

/* calloc: large blocks come from fresh zero pages, so a big KV pool costs
 * no start-up time or resident memory until it is used. Blocks are aligned
 * to a cache line (64 bytes): an AMX tile row is one line only when its
 * start is (cpu_amx.h). The block calloc returned is kept just below. */
#define CPU_ALIGN 64

static void *cpu_alloc(sd_backend *be, size_t bytes)
{
    (void)be;
    if (bytes > SIZE_MAX - CPU_ALIGN) return NULL;
    char *raw = calloc(1, bytes + CPU_ALIGN);
    if (!raw) return NULL;
    /* malloc aligns to 16 at least: the gap is 16..64 bytes, room for the pointer */
    char *p = (char *)(((uintptr_t)raw + CPU_ALIGN) & ~(uintptr_t)(CPU_ALIGN - 1));
    memcpy(p - sizeof raw, &raw, sizeof raw);
    return p;
}

static void cpu_free(sd_backend *be, void *p)
{
    (void)be;
    if (!p) return;
    char *raw;
    memcpy(&raw, (char *)p - sizeof raw, sizeof raw);
    free(raw);
}

static sd_status cpu_upload(sd_backend *be, const sd_tensor *t, sd_weight *w, char *err, size_t errlen)
{
    memset(w, 0, sizeof *w);
    int64_t rows = t->ndim >= 2 ? t->shape[0] : 1;
    int64_t cols = t->ndim >= 2 ? t->shape[1] : (t->ndim == 1 ? t->shape[0] : 1);
    if (t->ndim > 2 || rows > INT32_MAX || cols > INT32_MAX)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "tensor %s: expected a 1-D or 2-D weight", t->name);
    w->rows = (int)rows;
    w->cols = (int)cols;
    if (t->ndim == 2 && (t->dtype == SD_DTYPE_F32 || t->dtype == SD_DTYPE_BF16)) {
        w->dtype = t->dtype;
        w->data = t->data;
        /* the AMX tiles read a weight row's 64-byte pieces: in the file they may straddle two cache
         * lines (measured: decode ~20% slower, docs/BENCHMARKS.md); such a matrix is copied to an aligned block */
        if (t->dtype == SD_DTYPE_BF16 && sd_cpu_has_amx() && sd_amx_fits(w->cols) &&
            ((uintptr_t)t->data & (CPU_ALIGN - 1))) {
            size_t bytes = (size_t)rows * (size_t)cols * sizeof(uint16_t);
            void *p = cpu_alloc(be, bytes);
            if (!p) return sd_seterr(err, errlen, SD_ERR_NOMEM, "tensor %s: out of memory", t->name);
            memcpy(p, t->data, bytes);
            w->data = w->owned = p;
        }
        return SD_OK;
    }
    size_t n = (size_t)rows * (size_t)cols;
    float *f = cpu_alloc(be, n * sizeof(float));
    if (!f) return sd_seterr(err, errlen, SD_ERR_NOMEM, "tensor %s: out of memory", t->name);
    sd_convert_to_f32(t->dtype, t->data, f, n);
    w->dtype = SD_DTYPE_F32;
    w->data = f;
    w->owned = f;
    return SD_OK;
}

static void cpu_release(sd_backend *be, sd_weight *w)
{
    cpu_free(be, w->owned);
    memset(w, 0, sizeof *w);
}

/* Q8 storage in one allocation: int8 values, then scales, then row sums. */
static sd_status cpu_quantize_q8(sd_backend *be, sd_weight *w, char *err, size_t errlen)
{
    if (w->dtype == SD_DTYPE_Q8) return SD_OK;
    if (w->dtype != SD_DTYPE_F32 && w->dtype != SD_DTYPE_BF16)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "cannot quantise a %s weight", sd_dtype_name(w->dtype));
    size_t R = (size_t)w->rows, K = (size_t)w->cols;
    size_t qbytes = (R * K + 63) / 64 * 64;
    char *blk = cpu_alloc(be, qbytes + R * (sizeof(float) + sizeof(int32_t)));
    float *row = malloc(K * sizeof *row);
    if (!blk || !row) {
        cpu_free(be, blk);
        free(row);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory quantising a %zu x %zu weight", R, K);
    }
    int8_t *q = (int8_t *)blk;
    float *scale = (float *)(blk + qbytes);
    int32_t *sum = (int32_t *)(scale + R);
    for (size_t r = 0; r < R; r++) {
        if (w->dtype == SD_DTYPE_BF16) sd_convert_to_f32(SD_DTYPE_BF16, (const uint16_t *)w->data + r * K, row, K);
        else memcpy(row, (const float *)w->data + r * K, K * sizeof *row);
        sd_q8_quantize_rows(row, 1, (int)K, q + r * K, scale + r, sum + r);
    }
    free(row);
    cpu_free(be, w->owned);
    w->dtype = SD_DTYPE_Q8;
    w->data = q;
    w->owned = blk;
    w->qscale = scale;
    w->qsum = sum;
    return SD_OK;
}

static void cpu_copy(sd_backend *be, void *dst, const void *src, size_t bytes)
{
    (void)be;
    memcpy(dst, src, bytes);
}

/* ------------------------------------------------------------- matmul */

typedef struct mm_ctx {
    const sd_mm_fused *f;
    const float *x;
    int T;
    int bf16;
    const uint16_t *xbf; /* x as bf16 when the vdpbf16ps path is used, else NULL */
    bool amx;            /* ... and xbf is packed for the AMX tiles instead */
    const int8_t *xq;    /* x quantised per row for Q8 weights, else NULL */
    const int8_t *xqp;   /* ... and packed for AMX-INT8 spans, else NULL */
    const float *xqs;
} mm_ctx;

/* Rows [n0, n1) of y = x·w^T. */
static void mm_rows(const mm_ctx *c, float *y, const sd_weight *w, int n0, int n1)
{
    int K = w->cols, N = w->rows;
    if (w->dtype == SD_DTYPE_Q8) {
        sd_q8_tile(y + n0, N, (const int8_t *)w->data + (size_t)n0 * K, w->qscale + n0, w->qsum + n0, c->xq, c->xqp,
                   c->xqs, K, n1 - n0, c->T);
        return;
    }
    if (c->xbf && c->amx) {
        sd_amx_tile(y + n0, N, (const uint16_t *)w->data + (size_t)n0 * K, c->xbf, K, n1 - n0, c->T);
        return;
    }
    if (c->xbf) {
        sd_dot_tile_bf16x(y + n0, N, (const uint16_t *)w->data + (size_t)n0 * K, c->xbf, K, K, n1 - n0, c->T);
        return;
    }
    if (c->T == 1) {
        if (w->dtype == SD_DTYPE_BF16)
            sd_dot_rows_bf16(y + n0, (const uint16_t *)w->data + (size_t)n0 * K, c->x, K, n1 - n0);
        else sd_dot_rows_f32(y + n0, (const float *)w->data + (size_t)n0 * K, c->x, K, n1 - n0);
        return;
    }
    if (w->dtype == SD_DTYPE_BF16)
        sd_dot_tile_bf16(y + n0, N, (const uint16_t *)w->data + (size_t)n0 * K, c->x, K, K, n1 - n0, c->T);
    else sd_dot_tile_f32(y + n0, N, (const float *)w->data + (size_t)n0 * K, c->x, K, K, n1 - n0, c->T);
}

/* Rows [lo, hi) of output i, with matmul's epilogue (bias, bf16 rounding). */
static void mm_part(const mm_ctx *c, int i, int lo, int hi)
{
    const sd_weight *w = c->f->w[i];
    float *y = c->f->y[i];
    mm_rows(c, y, w, lo, hi);
    if (c->f->kind == SD_MM_PARTIAL) return; /* a partial sum: no bias, never rounded */
    const float *b = c->f->bias[i] ? c->f->bias[i]->data : NULL;
    for (int t = 0; t < c->T; t++) {
        float *yr = y + (size_t)t * w->rows;
        if (b)
            for (int j = lo; j < hi; j++) yr[j] += b[j];
        if (c->bf16) sd_round_bf16_n(yr + lo, (size_t)(hi - lo));
    }
}

/* Thread i of n: SHARED splits the outputs' concatenated rows; RESIDUAL
 * and SWIGLU split the rows of w[0] and finish their own columns (the add,
 * the gate) without waiting for the other threads. */
static void mm_task(void *ctx, int i, int n)
{
    const mm_ctx *c = ctx;
    const sd_mm_fused *f = c->f;
    int lo, hi;
    if (f->kind == SD_MM_SHARED || f->kind == SD_MM_PARTIAL) {
        int total = 0;
        for (int k = 0; k < f->n; k++) total += f->w[k]->rows;
        sd_split_range(total, 16, i, n, &lo, &hi);
        for (int k = 0, base = 0; k < f->n; base += f->w[k]->rows, k++) {
            int a = lo > base ? lo - base : 0, b = hi - base < f->w[k]->rows ? hi - base : f->w[k]->rows;
            if (a < b) mm_part(c, k, a, b);
        }
        return;
    }
    int N = f->w[0]->rows;
    sd_split_range(N, 16, i, n, &lo, &hi);
    if (lo >= hi) return;
    mm_part(c, 0, lo, hi);
    if (f->kind == SD_MM_RESIDUAL) {
        for (int t = 0; t < c->T; t++)
            sd_add_n(f->res + (size_t)t * N + lo, f->y[0] + (size_t)t * N + lo, (size_t)(hi - lo), c->bf16);
        return;
    }
    mm_part(c, 1, lo, hi);
    for (int t = 0; t < c->T; t++) {
        float *g = f->y[0] + (size_t)t * N + lo;
        sd_silu_mul_n(g, g, f->y[1] + (size_t)t * N + lo, (size_t)(hi - lo), c->bf16);
    }
}

/* In bf16 activation mode x holds exact bf16 values: keep their upper
 * halves for the vdpbf16ps kernels, packed for the AMX tiles where those
 * take the shape (*amx set). NULL when that path does not apply. */
/* Records the first failure of an op that returns void: the pass goes on
 * (its results are not used) and the model's forward fails with it
 * (take_error), as on a device backend — never an abort. */
static void fail_op(cpu_impl *impl, sd_status st, const char *what)
{
    if (impl->error == SD_OK) {
        impl->error = st;
        fprintf(stderr, "specd: CPU backend: %s\n", what);
    }
}

static sd_status cpu_take_error(sd_backend *be)
{
    cpu_impl *impl = impl_of(be);
    sd_status st = impl->error;
    impl->error = SD_OK;
    return st;
}

/* NULL with *failed set when the AMX path applies but its packing buffer
 * cannot be had (no other path computes the AMX order: the matmul must not
 * run another way). */
static const uint16_t *bf16_input(cpu_impl *impl, const float *x, const sd_weight *w, int T, int bf16, bool *amx,
                                  bool *failed)
{
    *amx = false;
    *failed = false;
    if (!bf16 || w->dtype != SD_DTYPE_BF16 || !sd_cpu_has_bf16dot()) return NULL;
    size_t n = (size_t)T * w->cols;
    if (sd_grow(&impl->xbf, &impl->xbf_len, n, sizeof *impl->xbf) != SD_OK) return NULL;
    sd_f32_to_bf16_n(impl->xbf, x, n);
    if (!sd_cpu_has_amx() || !sd_amx_fits(w->cols)) return impl->xbf;
    *amx = true;
    if (T == 1) return impl->xbf; /* one token's packed layout is its row */
    if (sd_grow(&impl->xamx, &impl->xamx_len, sd_amx_packed_len(w->cols, T), sizeof *impl->xamx) != SD_OK) {
        fail_op(impl, SD_ERR_NOMEM, "AMX matmul: out of memory packing its input");
        *failed = true;
        return NULL;
    }
    sd_amx_pack(impl->xamx, impl->xbf, w->cols, w->cols, T);
    return impl->xamx;
}

/* below this many multiply-adds a hand-off to the pool costs more than it saves */
#define SD_MM_INLINE_MACS ((size_t)1 << 16)
/* int8 multiply-adds are ~8x cheaper (vpdpbusd), so the bar is higher */
#define SD_MM_INLINE_MACS_Q8 ((size_t)1 << 19)

static void cpu_rmsnorm(sd_backend *be, float *y, const float *x, const sd_weight *w, int T, int D, float eps,
                        int bf16);

static void cpu_matmul_fused(sd_backend *be, const sd_mm_fused *f, const float *x, int T, int bf16)
{
    const sd_weight *w0 = f->w[0];
    int same = 1;
    size_t macs = 0;
    for (int k = 0; k < f->n; k++) {
        same &= f->w[k]->dtype == w0->dtype && f->w[k]->cols == w0->cols;
        macs += (size_t)f->w[k]->rows * f->w[k]->cols * T;
    }
    bool amx = false, failed = false;
    cpu_impl *impl = impl_of(be);
    const uint16_t *xbf = same ? bf16_input(impl, x, w0, T, bf16, &amx, &failed) : NULL;
    if (failed) return;
    mm_ctx c = {f, x, T, bf16, xbf, amx, NULL, NULL, NULL};
    if (w0->dtype == SD_DTYPE_Q8) {
        size_t n = (size_t)T * w0->cols;
        if (!same) {
            fail_op(impl, SD_ERR_ARG, "Q8 matmul: mixed weight types in a group");
            return;
        }
        if (sd_grow(&impl->xq, &impl->xq_len, n, sizeof *impl->xq) != SD_OK ||
            sd_grow(&impl->xqs, &impl->xqs_len, (size_t)T, sizeof *impl->xqs) != SD_OK) {
            fail_op(impl, SD_ERR_NOMEM, "Q8 matmul: out of memory quantising its input");
            return;
        }
        sd_q8_quantize_x(x, T, w0->cols, w0->cols, impl->xq, impl->xqs);
        c.xq = impl->xq;
        c.xqs = impl->xqs;
        /* without room to pack, the span takes the VNNI path: the same bits (exact sums) */
        if (sd_q8_wants_packed(w0->cols, T) && sd_grow(&impl->xqp, &impl->xqp_len, n, 1) == SD_OK) {
            sd_q8_pack(impl->xqp, impl->xq, w0->cols, T);
            c.xqp = impl->xqp;
        }
    }
    if (macs < (w0->dtype == SD_DTYPE_Q8 ? SD_MM_INLINE_MACS_Q8 : SD_MM_INLINE_MACS)) mm_task(&c, 0, 1);
    else sd_pool_run(impl_of(be)->pool, mm_task, &c);
    if (f->kind == SD_MM_RESIDUAL && f->norm) cpu_rmsnorm(be, f->norm_y, f->res, f->norm, T, w0->rows, f->eps, bf16);
}

static void cpu_matmul(sd_backend *be, float *y, const float *x, const sd_weight *w, const sd_weight *bias, int T,
                       int bf16)
{
    sd_mm_fused f = {.kind = SD_MM_SHARED, .n = 1, .w = {w}, .bias = {bias}, .y = {y}};
    cpu_matmul_fused(be, &f, x, T, bf16);
}

/* ------------------------------------------------------ elementwise ops */

/* Elementwise ops run in parallel over contiguous ranges of rows or
 * elements; each element's arithmetic is independent of the split. */
typedef struct ew_ctx {
    int kind; /* 0 rmsnorm, 1 silu_mul, 2 add, 3 reduce_parts */
    float *y;
    const float *x, *x2;
    const float *g;
    int T, D, bf16;
    float eps;
    size_t n;
    int n_parts; /* reduce_parts: x holds n_parts parts of n floats */
} ew_ctx;

static void rmsnorm_rows(const ew_ctx *c, int t0, int t1)
{
    for (int t = t0; t < t1; t++)
        sd_rmsnorm_row(c->y + (size_t)t * c->D, c->x + (size_t)t * c->D, c->g, c->D, c->eps, c->bf16);
}

static void silu_range(const ew_ctx *c, size_t i0, size_t i1)
{
    sd_silu_mul_n(c->y + i0, c->x + i0, c->x2 + i0, i1 - i0, c->bf16);
}

static void add_range(const ew_ctx *c, size_t i0, size_t i1) { sd_add_n(c->y + i0, c->x + i0, i1 - i0, c->bf16); }

/* The sum of parts[lo .. hi) (each `stride` floats apart) in the fixed order
 * of backend.h's reduce_parts: the first half's sum plus the second's. */
static float tree_sum(const float *parts, size_t stride, int lo, int hi)
{
    if (hi - lo == 1) return parts[(size_t)lo * stride];
    int mid = lo + (hi - lo) / 2;
    return tree_sum(parts, stride, lo, mid) + tree_sum(parts, stride, mid, hi);
}

/* reduce_parts over the rows [t0, t1). */
static void reduce_rows(const ew_ctx *c, int t0, int t1)
{
    for (int t = t0; t < t1; t++) {
        float *yr = c->y + (size_t)t * c->D;
        for (int j = 0; j < c->D; j++) {
            size_t e = (size_t)t * c->D + j;
            float v = tree_sum(c->x + e, c->n, 0, c->n_parts);
            if (c->g) v += c->g[j];
            yr[j] = c->bf16 ? sd_round_bf16(v) : v;
        }
    }
}

static void ew_task(void *ctx, int i, int n)
{
    const ew_ctx *c = ctx;
    int lo, hi;
    if (c->kind == 3) {
        sd_split_range(c->T, 1, i, n, &lo, &hi);
        reduce_rows(c, lo, hi);
        return;
    }
    if (c->kind == 0) {
        sd_split_range(c->T, 1, i, n, &lo, &hi);
        rmsnorm_rows(c, lo, hi);
        return;
    }
    size_t per = (c->n + (size_t)n - 1) / (size_t)n, i0 = per * (size_t)i, i1 = i0 + per;
    if (i1 > c->n) i1 = c->n;
    if (i0 >= i1) return;
    if (c->kind == 1) silu_range(c, i0, i1);
    else add_range(c, i0, i1);
}

/* Runs small jobs inline: waking the pool costs more than it saves. */
static void ew_run(sd_backend *be, ew_ctx *c, size_t work)
{
    if (work < 4096) ew_task(c, 0, 1);
    else sd_pool_run(impl_of(be)->pool, ew_task, c);
}

static void cpu_rmsnorm(sd_backend *be, float *y, const float *x, const sd_weight *w, int T, int D, float eps, int bf16)
{
    ew_ctx c = {.kind = 0, .y = y, .x = x, .g = w->data, .T = T, .D = D, .bf16 = bf16, .eps = eps};
    ew_run(be, &c, (size_t)T * D);
}

static void cpu_embed(sd_backend *be, float *y, const sd_weight *E, const int32_t *ids, int T)
{
    (void)be;
    int C = E->cols;
    for (int t = 0; t < T; t++) {
        float *yr = y + (size_t)t * C;
        if (E->dtype == SD_DTYPE_BF16) {
            const uint16_t *row = (const uint16_t *)E->data + (size_t)ids[t] * C;
            for (int d = 0; d < C; d++) yr[d] = sd_bf16_to_f32(row[d]);
        } else {
            memcpy(yr, (const float *)E->data + (size_t)ids[t] * C, (size_t)C * sizeof(float));
        }
    }
}

static void cpu_rope(sd_backend *be, float *x, const float *cs, const float *sn, int T, int nh, int hd, int bf16)
{
    (void)be;
    int half = hd / 2;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++)
            sd_rope_row(x + ((size_t)t * nh + h) * hd, cs + (size_t)t * half, sn + (size_t)t * half, half, bf16);
}

static void cpu_kv_write(sd_backend *be, sd_kv_layer *kv, const float *k, const float *v, const int32_t *slots, int T,
                         int kv_dim)
{
    (void)be;
    for (int t = 0; t < T; t++) {
        size_t off = (size_t)slots[t] * kv_dim, n = (size_t)kv_dim;
        const float *kr = k + (size_t)t * kv_dim, *vr = v + (size_t)t * kv_dim;
        if (kv->dtype == SD_DTYPE_BF16) {
            sd_f32_to_bf16_n((uint16_t *)kv->k + off, kr, n);
            sd_f32_to_bf16_n((uint16_t *)kv->v + off, vr, n);
        } else {
            memcpy((float *)kv->k + off, kr, n * sizeof(float));
            memcpy((float *)kv->v + off, vr, n * sizeof(float));
        }
    }
}

static void cpu_silu_mul(sd_backend *be, float *out, const float *gate, const float *up, size_t n, int bf16)
{
    ew_ctx c = {.kind = 1, .y = out, .x = gate, .x2 = up, .bf16 = bf16, .n = n};
    ew_run(be, &c, n * 8);
}

static void cpu_add(sd_backend *be, float *y, const float *x, size_t n, int bf16)
{
    ew_ctx c = {.kind = 2, .y = y, .x = x, .bf16 = bf16, .n = n};
    ew_run(be, &c, n);
}

static void cpu_copy_cols(sd_backend *be, float *dst, const float *src, int T, int ld, int c0, int n)
{
    (void)be;
    for (int t = 0; t < T; t++) memcpy(dst + (size_t)t * n, src + (size_t)t * ld + c0, (size_t)n * sizeof *dst);
}

static void cpu_reduce_parts(sd_backend *be, float *y, const float *parts, int n_parts, int T, int N,
                             const sd_weight *bias, int bf16)
{
    if (n_parts < 1) return;
    ew_ctx c = {.kind = 3,
                .y = y,
                .x = parts,
                .g = bias ? bias->data : NULL,
                .T = T,
                .D = N,
                .bf16 = bf16,
                .n = (size_t)T * N,
                .n_parts = n_parts};
    ew_run(be, &c, (size_t)T * N * (size_t)n_parts);
}

static sd_status cpu_argmax(sd_backend *be, int32_t *out, const float *logits, int rows, int vocab)
{
    (void)be;
    for (int r = 0; r < rows; r++) out[r] = sd_argmax_f32(logits + (size_t)r * vocab, vocab);
    return SD_OK;
}

static sd_status cpu_draw_rows(sd_backend *be, sd_draw_out *out, float *logits, const sd_draw_row *rows, int n,
                               int vocab)
{
    cpu_impl *impl = impl_of(be);
    if (n < 0 || vocab < 1 || (n > 0 && (!out || !logits || !rows))) return SD_ERR_ARG;
    if (!impl->draw || impl->draw->vocab < vocab) {
        sd_cpu_draw_scratch_free(impl->draw);
        sd_status st = sd_cpu_draw_scratch_new(vocab, SD_DRAW_CAP, &impl->draw, NULL, 0);
        if (st != SD_OK) return st;
    }
    for (int r = 0; r < n; r++) out[r] = sd_cpu_draw_row(logits + (size_t)r * vocab, vocab, &rows[r], impl->draw);
    return SD_OK;
}

static void cpu_sync(sd_backend *be) { (void)be; }

/* ----------------------------------------------------------- attention */

typedef struct attn_ctx {
    float *out;
    const float *q;
    const sd_kv_layer *kv;
    const sd_attn_seq *seqs;
    int n_seqs;
    const sd_attn_shape *sh;
    int n_items;
    cpu_impl *impl;
} attn_ctx;

/* Work items: (sequence, chunk of up to rows_per rows, KV head); an item
 * runs the queries of every head of that KV group at those rows together
 * (sd_attn_group), so the group's K/V blocks are read once for all. */
#define SD_ATTN_MAX_Q 48

static int attn_rows_per(const sd_attn_shape *sh)
{
    int g = sh->n_heads / sh->n_kv_heads, r = SD_ATTN_MAX_Q / g;
    return r < 1 ? 1 : r > 8 ? 8 : r;
}

static void attn_item(const attn_ctx *c, int item, float *scratch)
{
    const sd_attn_shape *sh = c->sh;
    int rp = attn_rows_per(sh), nkv = sh->n_kv_heads, G = sh->n_heads / nkv, hd = sh->head_dim;
    int si = 0;
    for (;; si++) {
        int chunks = (c->seqs[si].n + rp - 1) / rp;
        if (item < chunks * nkv) break;
        item -= chunks * nkv;
    }
    const sd_attn_seq *s = &c->seqs[si];
    int g = item % nkv, r0 = (item / nkv) * rp, r1 = r0 + rp < s->n ? r0 + rp : s->n;
    sd_attn_query qs[SD_ATTN_MAX_Q + 8];
    int nq = 0;
    for (int r = r0; r < r1; r++)
        for (int h = g * G; h < (g + 1) * G && nq < SD_ATTN_MAX_Q + 8; h++) {
            size_t off = ((size_t)(s->row0 + r) * sh->n_heads + h) * hd;
            qs[nq++] = (sd_attn_query){c->q + off, c->out + off, s->pos0 + r + 1};
        }
    size_t kvd = (size_t)nkv * hd, el = c->kv->dtype == SD_DTYPE_BF16 ? 2 : 4;
    sd_kv_rows kr = {(const char *)c->kv->k + (size_t)g * hd * el, kvd, el == 2};
    sd_kv_rows vr = {(const char *)c->kv->v + (size_t)g * hd * el, kvd, el == 2};
    sd_attn_group(qs, nq, &kr, &vr, s->block_table, sh->block_size, hd, sh->scale, sh->bf16, scratch);
}

static void attn_task(void *ctx, int i, int n)
{
    const attn_ctx *c = ctx;
    int lo, hi;
    sd_split_range(c->n_items, 1, i, n, &lo, &hi);
    float *sc = c->impl->attn_scratch + (size_t)i * c->impl->scratch_len;
    for (int w = lo; w < hi; w++) attn_item(c, w, sc);
}

/* Room for need floats per thread (layout [n_threads][scratch_len]). */
static int grow_scratch(cpu_impl *impl, size_t need)
{
    size_t per_entry = sizeof(float) * (size_t)sd_pool_size(impl->pool); /* one float for every thread */
    return sd_grow(&impl->attn_scratch, &impl->scratch_len, need, per_entry) == SD_OK ? 0 : -1;
}

/* Fault injection for the test suite: SD_FAULT_DEVICE_LOST_AFTER=N in the
 * environment makes the CPU backend behave as a device that is lost after N
 * attention calls (every later one fails, sd_backend_lost says so), so the
 * workers' handling of a lost GPU is tested without one. */
static bool inject_lost(cpu_impl *impl)
{
    if (impl->lose_after < 0) return false;
    if (impl->lose_after == 0) impl->lost = true;
    else impl->lose_after--;
    return impl->lost;
}

static bool cpu_lost(sd_backend *be) { return impl_of(be)->lost; }

static sd_status cpu_attention(sd_backend *be, float *out, const float *q, const sd_kv_layer *kv,
                               const sd_attn_seq *seqs, int n_seqs, const sd_attn_shape *shape)
{
    cpu_impl *impl = impl_of(be);
    if (inject_lost(impl)) return SD_ERR_DEVICE;
    if (kv->dtype != SD_DTYPE_F32 && (kv->dtype != SD_DTYPE_BF16 || shape->head_dim > SD_ATTN_BF16_MAX_HD))
        return SD_ERR_UNSUPPORTED;
    int rp = attn_rows_per(shape), G = shape->n_heads / shape->n_kv_heads, items = 0, max_pos = 0;
    size_t work = 0;
    for (int s = 0; s < n_seqs; s++) {
        items += (seqs[s].n + rp - 1) / rp * shape->n_kv_heads;
        work += (size_t)seqs[s].n * (seqs[s].pos0 + seqs[s].n);
        if (seqs[s].pos0 + seqs[s].n > max_pos) max_pos = seqs[s].pos0 + seqs[s].n;
    }
    int nq = rp * G < SD_ATTN_MAX_Q + 8 ? rp * G : SD_ATTN_MAX_Q + 8;
    if (grow_scratch(impl, sd_attn_scratch_floats(nq, max_pos, shape->head_dim)) != 0) return SD_ERR_NOMEM;
    attn_ctx c = {out, q, kv, seqs, n_seqs, shape, items, impl};
    if (work * shape->n_heads * shape->head_dim < ((size_t)1 << 16)) attn_task(&c, 0, 1);
    else sd_pool_run(impl->pool, attn_task, &c);
    return SD_OK;
}

static void cpu_destroy(sd_backend *be)
{
    cpu_impl *impl = impl_of(be);
    sd_pool_free(impl->pool);
    free(impl->attn_scratch);
    free(impl->xbf);
    free(impl->xamx);
    free(impl->xq);
    free(impl->xqp);
    free(impl->xqs);
    sd_cpu_draw_scratch_free(impl->draw);
    free(impl);
    free(be);
}

static void cpu_host_parallel(sd_backend *be, void (*fn)(void *ctx, int i, int n), void *ctx)
{
    sd_pool_run(impl_of(be)->pool, fn, ctx);
}

static const sd_backend_ops cpu_ops = {
    .name = "cpu",
    .alloc = cpu_alloc,
    .free = cpu_free,
    .upload = cpu_upload,
    .release = cpu_release,
    .to_backend = cpu_copy,
    .to_host = cpu_copy,
    .matmul = cpu_matmul,
    .rmsnorm = cpu_rmsnorm,
    .embed = cpu_embed,
    .rope = cpu_rope,
    .kv_write = cpu_kv_write,
    .attention = cpu_attention,
    .silu_mul = cpu_silu_mul,
    .add = cpu_add,
    .copy_cols = cpu_copy_cols,
    .reduce_parts = cpu_reduce_parts,
    .matmul_fused = cpu_matmul_fused,
    .quantize_q8 = cpu_quantize_q8,
    .argmax = cpu_argmax,
    .draw_rows = cpu_draw_rows,
    .host_parallel = cpu_host_parallel,
    .sync = cpu_sync,
    .take_error = cpu_take_error,
    .lost = cpu_lost,
    .destroy = cpu_destroy,
};

/* SD_CPU_ISA=scalar|avx2|avx512|amx: the kernels of an older machine on this one
 * (benchmarks; sd_cpu_set_isa_level). */
static void isa_from_env(void)
{
    const char *v = getenv("SD_CPU_ISA");
    if (!v || !*v) return;
    int level = !strcmp(v, "scalar")   ? 0
                : !strcmp(v, "avx2")   ? 1
                : !strcmp(v, "avx512") ? 2
                : !strcmp(v, "amx")    ? 3
                                       : -1;
    if (level < 0) fprintf(stderr, "SD_CPU_ISA=%s ignored: scalar, avx2, avx512 or amx\n", v);
    else sd_cpu_set_isa_level(level);
}

sd_status sd_backend_cpu_new(int n_threads, sd_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_cpu_isa_init();
    isa_from_env();
    if (n_threads <= 0) n_threads = sd_cpu_count();
    sd_backend *be = calloc(1, sizeof *be);
    cpu_impl *impl = calloc(1, sizeof *impl);
    sd_status st = SD_ERR_NOMEM;
    if (!be || !impl) {
        sd_seterr(err, errlen, st, "CPU backend: out of memory");
        goto fail;
    }
    if ((st = sd_pool_new(n_threads, &impl->pool, err, errlen)) != SD_OK) goto fail;
    if (grow_scratch(impl, 4096) != 0) {
        st = sd_seterr(err, errlen, SD_ERR_NOMEM, "CPU backend: out of memory for attention scratch");
        goto fail;
    }
    be->ops = &cpu_ops;
    be->impl = impl;
    const char *f = getenv("SD_FAULT_DEVICE_LOST_AFTER");
    impl->lose_after = f && *f ? strtol(f, NULL, 10) : -1;
    *out = be;
    return SD_OK;
fail:
    if (impl) {
        sd_pool_free(impl->pool);
        free(impl->attn_scratch);
    }
    free(impl);
    free(be);
    return st;
}

int sd_cpu_set_isa_level(int level)
{
    sd_q8_set_path(level);
    return sd_cpu_isa_set_level(level);
}

const char *sd_cpu_isa(void) { return sd_cpu_isa_name(); }

int sd_backend_cpu_threads(const sd_backend *be)
{
    return be && be->ops == &cpu_ops ? sd_pool_size(((const cpu_impl *)be->impl)->pool) : 0;
}
