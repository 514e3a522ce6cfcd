/* cpu_simd.h — PRIVATE to kernels/cpu: the SIMD building blocks every CPU
 * kernel file shares (the canonical-order pieces of cpu_dot.h): the scalar
 * dot products the scalar paths and references use, the AVX2 target
 * attribute, bf16 loads, the fixed horizontal sum, bf16 rounding of 8 lanes
 * and an 8-lane exp. Header-only: each piece is inlined where it is used, so
 * every file computes the same sequence of operations. */
#ifndef SD_CPU_SIMD_H
#define SD_CPU_SIMD_H

#include <immintrin.h>
#include <stdint.h>

#include "backend.h"
#include "cpu_dot.h"
#include "cpu_isa.h"

/* ---------------------------------------------------------------- scalar */

static inline float dot_scalar_f32(const float *w, const float *x, int K)
{
    float s[8] = {0};
    int nc = K / 8, k = 0;
    for (int c = 0; c < nc; c++, k += 8)
        for (int l = 0; l < 8; l++) s[l] += w[k + l] * x[k + l];
    float v[4];
    for (int l = 0; l < 4; l++) v[l] = s[l] + s[l + 4];
    float r = (v[0] + v[2]) + (v[1] + v[3]);
    for (; k < K; k++) r += w[k] * x[k];
    return r;
}

static inline float dot_scalar_bf16(const uint16_t *w, const float *x, int K)
{
    float s[8] = {0};
    int nc = K / 8, k = 0;
    for (int c = 0; c < nc; c++, k += 8)
        for (int l = 0; l < 8; l++) s[l] += sd_bf16_to_f32(w[k + l]) * x[k + l];
    float v[4];
    for (int l = 0; l < 4; l++) v[l] = s[l] + s[l + 4];
    float r = (v[0] + v[2]) + (v[1] + v[3]);
    for (; k < K; k++) r += sd_bf16_to_f32(w[k]) * x[k];
    return r;
}
/* ------------------------------------------------------------------ AVX2 */

#define SD_AVX2 __attribute__((target("avx2,fma")))

SD_AVX2 static inline __m256 load_bf16(const uint16_t *p)
{
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* Tail shared by every AVX2 kernel: scalar products past the last 8-chunk. */
__attribute__((always_inline)) static inline float tail_f32(float r, const float *w, const float *x, int k, int K)
{
    for (; k < K; k++) r += w[k] * x[k];
    return r;
}

__attribute__((always_inline)) static inline float tail_bf16(float r, const uint16_t *w, const float *x, int k, int K)
{
    for (; k < K; k++) r += sd_bf16_to_f32(w[k]) * x[k];
    return r;
}

/* The canonical order in registers: ONE 8-lane accumulator per output,
 * fed 8-element chunks in index order, then hsum1's fixed tree, then the
 * scalar tail. Tiles below compute several outputs at once (sharing weight
 * conversions and x loads) but each output sees exactly this sequence. */
SD_AVX2 __attribute__((always_inline)) static inline float hsum1(__m256 s)
{
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m128 h = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 0x55)));
}

/* Round-to-nearest-even to bf16 of 8 lanes (NaNs kept as they are). */
SD_AVX2 static inline __m256i rne_bits(__m256 v)
{
    __m256i u = _mm256_castps_si256(v);
    __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
    __m256i r = _mm256_add_epi32(u, _mm256_add_epi32(lsb, _mm256_set1_epi32(0x7fff)));
    r = _mm256_and_si256(r, _mm256_set1_epi32((int)0xffff0000u));
    __m256 nan = _mm256_cmp_ps(v, v, _CMP_UNORD_Q);
    return _mm256_castps_si256(_mm256_blendv_ps(_mm256_castsi256_ps(r), v, nan));
}

/* exp(x) as 8 lanes: n = rint(x·log2 e), r = x − n·ln2 (two steps), a
 * degree-6 polynomial, scaled by 2^n; x < −87.3 gives 0 and x is capped at
 * 88. Within 2 ulp of expf; the same operations for every element, so a
 * result depends only on its own input: the bits of rowdraw.h sd_rd_exp,
 * its scalar form (the sampler's scalar path and the device's). */
SD_AVX2 static inline __m256 exp8(__m256 x)
{
    const __m256 lo = _mm256_set1_ps(-87.3f);
    __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.0f));
    __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                               _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
    r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_add_ps(_mm256_fmadd_ps(p, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.0f));
    __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
    p = _mm256_mul_ps(p, _mm256_castsi256_ps(e));
    return _mm256_andnot_ps(under, p);
}

#define SD_FMA(acc, wv, xp) acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp), acc)

/* One canonical dot product. */
#define SD_DOT1(NAME, WT, LOAD, TAIL)                                                                   \
    SD_AVX2 __attribute__((always_inline)) static inline float NAME(const WT *w, const float *x, int K) \
    {                                                                                                   \
        __m256 a = _mm256_setzero_ps();                                                                 \
        int k = 0;                                                                                      \
        for (; k + 8 <= K; k += 8) SD_FMA(a, LOAD(w + k), x + k);                                       \
        return TAIL(hsum1(a), w, x, k, K);                                                              \
    }

SD_DOT1(dot1_f32, float, _mm256_loadu_ps, tail_f32)
SD_DOT1(dot1_bf16, uint16_t, load_bf16, tail_bf16)

#endif
