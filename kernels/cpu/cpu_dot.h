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

#include "cpu_isa.h"

/* y[r] = dot(w + r*K, x, K) for r in [0, R): f32 weights. */
void sd_dot_rows_f32(float *y, const float *w, const float *x, int K, int R);
/* Same for bf16 weights (upcast exactly). */
void sd_dot_rows_bf16(float *y, const uint16_t *w, const float *x, int K, int R);
/* y[t*ldy + r] = dot(w + r*K, x + t*ldx, K) for r < R, t < U: R weight rows
 * against U tokens. */
void sd_dot_tile_f32(float *y, int ldy, const float *w, const float *x, int ldx, int K, int R, int U);
void sd_dot_tile_bf16(float *y, int ldy, const uint16_t *w, const float *x, int ldx, int K, int R, int U);
/* R bf16 weight rows x U bf16 token rows (both operands exactly bf16):
 * y[t*ldy + r] = dot(w + r*K, x + t*ldx, K) with vdpbf16ps in one fixed
 * order per output. Only when sd_cpu_has_bf16dot(). */
void sd_dot_tile_bf16x(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, int R, int U);

/* Plain canonical dot of two f32 vectors. */
float sd_dot_f32(const float *a, const float *b, int K);

/* Exact bf16 -> f32. */
static inline float sd_bf16_to_f32(uint16_t h)
{
    union {
        uint32_t u;
        float f;
    } v = {.u = (uint32_t)h << 16};
    return v.f;
}

#endif
