/* vecmath.h — vector math on host float arrays that the sampler, the
 * proposers and the CPU kernels share.
 *
 * Implemented in kernels/cpu/cpu_elem.c with the CPU backend's SIMD paths
 * (AVX2 where the CPU has it, scalar otherwise), so every layer above uses
 * one copy of this math without reaching into kernels/cpu. Thread-safe:
 * pure functions of their arguments. */
#ifndef SD_VECMATH_H
#define SD_VECMATH_H

/* Index of the first maximum of x[0..n), NaNs ignored; -1 when every entry
 * is NaN (or n <= 0). */
int sd_argmax_f32(const float *x, int n);

/* w[i] = exp((x[i] - mx) / temp) in float, vectorised (softmax numerators
 * for sampling); NaN inputs give 0; within 2 ulp of expf. The same bits
 * on every instruction set and on the device: rowdraw.h sd_rd_exp_weight. */
void sd_exp_weights(const float *x, int n, float mx, float temp, float *w);

/* The sampler's softmax weights, in place, from sd_exp_weights' w for
 * logits x with maximum mx: 1 where x[i] == mx; 0 where x[i] is NaN or -inf,
 * w[i] is not > 0, or w[i] < floor (min-p; floor <= 1); else w[i]. */
void sd_keep_weights(const float *x, int n, float mx, float floor, float *w);

/* p[i] = (float)((double)w[i] / d) for i < n, each as that scalar expression
 * rounds it (IEEE division and conversions, vectorised); returns the largest
 * p[i] (w[i] >= 0 finite and d > 0 assumed; 0 when n <= 0). */
float sd_div_to_f32(const float *w, int n, double d, float *p);

/* Writes to ids the indices i < n, ascending, with lo <= p[i] < hi and
 * p[i] > 0; returns how many. */
int sd_band_ids(const float *p, int n, float lo, float hi, int *ids);

/* sum_i exp(x[i] - shift), vectorised (a softmax denominator). */
float sd_exp_sum(const float *x, int n, float shift);

#endif
