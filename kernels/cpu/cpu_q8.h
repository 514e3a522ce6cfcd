/* cpu_q8.h — int8 weight rows for approximate models (drafters).
 *
 * A Q8 matrix keeps, per output row r, int8 values w_q[r, k] with a scale
 * s_w[r] (max |w[r, :]| / 127) and the row sum of w_q. Activations are
 * quantised per token row the same way (s_x[t], x_q in [-127, 127]). An
 * output is y[t, r] = ((float)sum_k w_q[r, k] * x_q[t, k] * s_w[r]) * s_x[t]:
 * the integer sum is exact, so every SIMD path (AMX-INT8, AVX-512 VNNI, AVX2, scalar)
 * and every tile shape gives the same bits. Only a drafter uses this: its
 * numerics never decide what the target commits. */
#ifndef SD_CPU_Q8_H
#define SD_CPU_Q8_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Quantises rows [0, R) of a K-wide f32 matrix: q[R*K], scale[R], sum[R]. */
void sd_q8_quantize_rows(const float *w, int R, int K, int8_t *q, float *scale, int32_t *sum);

/* Quantises T activation rows of K (row stride ldx) into xq[T*K], xs[T]. */
void sd_q8_quantize_x(const float *x, int T, int K, int ldx, int8_t *xq, float *xs);

/* y[t*ldy + r] for r < R, t < U from Q8 weight rows (wq, ws, wsum already
 * offset to the first row) and quantised activations (xq rows of K); xp,
 * when not NULL, the same activations packed by sd_q8_pack (then a span
 * runs on AMX where sd_q8_wants_packed says so). */
void sd_q8_tile(float *y, int ldy, const int8_t *wq, const float *ws, const int32_t *wsum, const int8_t *xq,
                const int8_t *xp, const float *xs, int K, int R, int U);

/* Whether sd_q8_tile would use packed activations for U tokens of K (AMX-INT8, U > 1). */
bool sd_q8_wants_packed(int K, int U);

/* Packs U quantised token rows (xq, rows of K) for sd_q8_tile: K * U bytes. */
void sd_q8_pack(int8_t *dst, const int8_t *xq, int K, int U);

/* Caps the path (tests): 0 scalar, 1 AVX2, 2 AVX-512 VNNI, 3 AMX-INT8 for
 * spans; returns the one in effect. Not thread-safe. */
int sd_q8_set_path(int level);

#endif
