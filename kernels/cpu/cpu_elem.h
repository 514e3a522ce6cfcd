/* cpu_elem.h — element-wise kernels of the CPU backend (cpu_elem.c): bf16
 * rounding of rows, SwiGLU, residual add, RMSNorm and RoPE rows. The
 * sampler's softmax weights and argmax, which live in the same file, are
 * declared in vecmath.h (the sampler shares them). */
#ifndef SD_CPU_ELEM_H
#define SD_CPU_ELEM_H

#include <stddef.h>
#include <stdint.h>

#include "vecmath.h" /* sd_argmax_f32, sd_exp_weights, sd_exp_sum live in cpu_elem.c */

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

#endif
