/* cpu_dot.h — canonical dot products for the CPU backend.
 *
 * Batch invariance lives here: every dot product of length K is summed in
 * one canonical order (one 8-lane accumulator over 8-element chunks in index
 * order, a fixed horizontal tree, then the scalar tail in index order). The
 * tiled variants (8 rows for one token; up to 4 rows x 8 tokens for spans) compute
 * each output element with exactly that sequence of operations, so a row's
 * result never depends on the tile or batch it was computed in. */
#ifndef SD_CPU_DOT_H
#define SD_CPU_DOT_H

#include <stddef.h>
#include <stdint.h>

#include "vecmath.h" /* sd_argmax_f32, sd_exp_weights, sd_exp_sum live here too */

/* Selects the SIMD path once (AVX2+FMA when the CPU has it). */
void sd_cpu_dot_init(void);
/* Caps the SIMD paths (tests, comparisons): 0 scalar, 1 AVX2, 2 AVX-512
 * (attention, vdpbf16ps), 3 (SD_CPU_LEVEL_MAX) everything the CPU has: AMX
 * tiles for bf16 matmuls (cpu_amx.h). Returns the level in effect.
 * Not thread-safe: call before any kernel runs. */
#define SD_CPU_LEVEL_MAX 3
int sd_cpu_dot_set_level(int level);
/* "amx-bf16", "avx512-bf16", "avx512", "avx2" or "scalar". */
const char *sd_cpu_dot_isa(void);

/* y[r] = dot(w + r*K, x, K) for r in [0, R): f32 weights. */
void sd_dot_rows_f32(float *y, const float *w, const float *x, int K, int R);
/* Same for bf16 weights (upcast exactly). */
void sd_dot_rows_bf16(float *y, const uint16_t *w, const float *x, int K, int R);
/* y[t*ldy + r] = dot(w + r*K, x + t*ldx, K) for r < R, t < U: R weight rows
 * against U tokens. */
void sd_dot_tile_f32(float *y, int ldy, const float *w, const float *x, int ldx, int K, int R, int U);
void sd_dot_tile_bf16(float *y, int ldy, const uint16_t *w, const float *x, int ldx, int K, int R, int U);
/* True when the CPU has AVX-512 BF16 dot products (vdpbf16ps). */
int sd_cpu_has_bf16dot(void);
/* True when bf16 matmuls with sd_amx_fits(K) run on AMX tiles (level 3). */
int sd_cpu_has_amx(void);
/* R bf16 weight rows x U bf16 token rows (both operands exactly bf16):
 * y[t*ldy + r] = dot(w + r*K, x + t*ldx, K) with vdpbf16ps in one fixed
 * order per output. Only when sd_cpu_has_bf16dot(). */
void sd_dot_tile_bf16x(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, int R, int U);

/* p[0..n) rounded to bf16 in place (ties to even; NaNs unchanged). */
void sd_round_bf16_n(float *p, size_t n);
/* dst[i] = bf16 bits of src[i] rounded to nearest even. */
void sd_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n);

/* Elementwise rows with the bf16 rounding points of backend.h (vectorised
 * where the CPU allows; each element's arithmetic depends only on itself):
 * y = silu(g) * u; y += x; and one RMSNorm row y = x * rsqrt(mean(x²) + eps)
 * * g (y may equal x). */
void sd_silu_mul_n(float *y, const float *g, const float *u, size_t n, int bf16);
void sd_add_n(float *y, const float *x, size_t n, int bf16);
void sd_rmsnorm_row(float *y, const float *x, const float *g, int D, float eps, int bf16);

/* Rotate-half RoPE of one head vector v[2*half] in place (cos c, sin s;
 * bf16: each product and the sum rounded). */
void sd_rope_row(float *v, const float *c, const float *s, int half, int bf16);

/* Plain canonical dot of two f32 vectors. */
float sd_dot_f32(const float *a, const float *b, int K);

/* K or V of one KV head in the paged cache: the row of slot s starts at
 * element s * stride of base, f32 or bf16 (bf16: widened exactly to f32 as
 * it is read, so a cache of bf16-representable values gives the f32 cache's
 * results bit for bit). */
typedef struct sd_kv_rows {
    const void *base;
    size_t stride;
    int bf16;
} sd_kv_rows;

/* Largest head_dim a bf16 cache supports (its rows are widened in chunks). */
#define SD_ATTN_BF16_MAX_HD 2048

/* One query row of one head over n cached positions (0..n-1, ascending):
 * out[hd] = softmax(q·k_j * scale) · v_j, K/V rows of slot(j) where
 * slot(j) = blocks[j / block_size] * block_size + j % block_size.
 * bf16: PyTorch's bf16 CPU attention rounding (unnormalised weights rounded,
 * one division at the end). scratch holds sd_attn_scratch_floats(1, n, hd)
 * floats. The order of every sum is fixed by j and d alone (and the ISA
 * path), so the result does not depend on the batch. */
void sd_attn_row(float *out, const float *q, const sd_kv_rows *k, const sd_kv_rows *v, const int32_t *blocks,
                 int block_size, int n, int hd, float scale, int bf16, float *scratch);

/* One query of a group sharing a KV head: n positions visible. */
typedef struct sd_attn_query {
    const float *q;
    float *out;
    int n;
} sd_attn_query;

/* sd_attn_row for nq queries of one KV head at once (AVX-512 and AVX2:
 * block by block, so each K/V block is read — and a bf16 one widened to
 * f32 — once for all of them); each result is bit-identical to
 * sd_attn_row's. */
void sd_attn_group(const sd_attn_query *qs, int nq, const sd_kv_rows *k, const sd_kv_rows *v,
                   const int32_t *blocks, int block_size, int hd, float scale, int bf16, float *scratch);

/* Scratch floats sd_attn_group needs for nq queries of at most max_n positions. */
size_t sd_attn_scratch_floats(int nq, int max_n, int hd);

/* Exact bf16 -> f32. */
static inline float sd_bf16_to_f32(uint16_t h)
{
    union { uint32_t u; float f; } v = {.u = (uint32_t)h << 16};
    return v.f;
}

#endif
