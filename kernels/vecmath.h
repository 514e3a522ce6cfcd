/* vecmath.h — vector math on host float arrays that the sampler, the
 * proposers and the CPU kernels share.
 *
 * Implemented in kernels/cpu/cpu_dot.c with the CPU backend's SIMD paths
 * (AVX2 where the CPU has it, scalar otherwise), so every layer above uses
 * one copy of this math without reaching into kernels/cpu. Thread-safe:
 * pure functions of their arguments. */
#ifndef SD_VECMATH_H
#define SD_VECMATH_H

/* Index of the first maximum of x[0..n), NaNs ignored; -1 when every entry
 * is NaN (or n <= 0). */
int sd_argmax_f32(const float *x, int n);

/* w[i] = exp((x[i] - mx) / temp) in float, vectorised (softmax numerators
 * for sampling); NaN inputs give 0; within 2 ulp of expf. */
void sd_exp_weights(const float *x, int n, float mx, float temp, float *w);

/* sum_i exp(x[i] - shift), vectorised (a softmax denominator). */
float sd_exp_sum(const float *x, int n, float shift);

#endif
