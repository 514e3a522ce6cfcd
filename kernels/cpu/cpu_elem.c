/* cpu_elem.c — the element-wise kernels of the CPU backend (see
 * cpu_elem.h and vecmath.h): bf16 rounding, SwiGLU, residual add, RMSNorm,
 * RoPE, argmax and the sampler's softmax weights, each with its scalar
 * reference beside its AVX2 path. Every element's arithmetic depends only on
 * itself (sums in a fixed order), whatever the row's length or batch. */
#include "cpu_elem.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backend.h"
#include "cpu_dot.h"
#include "cpu_simd.h"
#include "rowdraw.h"

/* -------------------------------------------------- bf16 rounding helpers */

SD_AVX2 static void round_avx2(float *p, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_si256((__m256i *)(p + i), rne_bits(_mm256_loadu_ps(p + i)));
    for (; i < n; i++) p[i] = sd_round_bf16(p[i]);
}

SD_AVX2 static void to_bf16_avx2(uint16_t *dst, const float *src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i b = _mm256_srli_epi32(rne_bits(_mm256_loadu_ps(src + i)), 16);
        __m128i packed = _mm_packus_epi32(_mm256_castsi256_si128(b), _mm256_extracti128_si256(b, 1));
        _mm_storeu_si128((__m128i *)(dst + i), packed);
    }
    for (; i < n; i++) {
        union {
            float f;
            uint32_t u;
        } v = {.f = sd_round_bf16(src[i])};
        dst[i] = (uint16_t)(v.u >> 16);
    }
}

void sd_round_bf16_n(float *p, size_t n)
{
    if (sd_isa_avx2) {
        round_avx2(p, n);
        return;
    }
    for (size_t i = 0; i < n; i++) p[i] = sd_round_bf16(p[i]);
}

void sd_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
    if (sd_isa_avx2) {
        to_bf16_avx2(dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        union {
            float f;
            uint32_t u;
        } v = {.f = sd_round_bf16(src[i])};
        dst[i] = (uint16_t)(v.u >> 16);
    }
}

/* ------------------------------------------------------ elementwise rows */

SD_AVX2 static inline __m256 rne8(__m256 v) { return _mm256_castsi256_ps(rne_bits(v)); }

SD_AVX2 static void silu_mul_avx2(float *y, const float *g, const float *u, size_t n, int bf16)
{
    size_t i = 0;
    const __m256 one = _mm256_set1_ps(1.0f);
    for (; i + 8 <= n; i += 8) {
        __m256 gv = _mm256_loadu_ps(g + i), uv = _mm256_loadu_ps(u + i);
        __m256 sv = _mm256_div_ps(gv, _mm256_add_ps(one, exp8(_mm256_sub_ps(_mm256_setzero_ps(), gv))));
        _mm256_storeu_ps(y + i, bf16 ? rne8(_mm256_mul_ps(rne8(sv), uv)) : _mm256_mul_ps(sv, uv));
    }
    if (i < n) {
        float gt[8] = {0}, ut[8] = {0}, yt[8];
        for (size_t j = i; j < n; j++) gt[j - i] = g[j], ut[j - i] = u[j];
        silu_mul_avx2(yt, gt, ut, 8, bf16);
        for (size_t j = i; j < n; j++) y[j] = yt[j - i];
    }
}

void sd_silu_mul_n(float *y, const float *g, const float *u, size_t n, int bf16)
{
    if (sd_isa_avx2) {
        silu_mul_avx2(y, g, u, n, bf16);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float s = g[i] / (1.0f + expf(-g[i]));
        y[i] = bf16 ? sd_round_bf16(sd_round_bf16(s) * u[i]) : s * u[i];
    }
}

static void add_scalar(float *y, const float *x, size_t i0, size_t n, int bf16)
{
    for (size_t i = i0; i < n; i++) y[i] = bf16 ? sd_round_bf16(y[i] + x[i]) : y[i] + x[i];
}

SD_AVX2 static void add_avx2(float *y, const float *x, size_t n, int bf16)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_add_ps(_mm256_loadu_ps(y + i), _mm256_loadu_ps(x + i));
        _mm256_storeu_ps(y + i, bf16 ? rne8(v) : v);
    }
    add_scalar(y, x, i, n, bf16);
}

void sd_add_n(float *y, const float *x, size_t n, int bf16)
{
    if (sd_isa_avx2) add_avx2(y, x, n, bf16);
    else add_scalar(y, x, 0, n, bf16);
}

static void scale_row_scalar(float *y, const float *x, const float *g, float inv, int d0, int D, int bf16)
{
    for (int d = d0; d < D; d++) y[d] = bf16 ? sd_round_bf16(g[d] * sd_round_bf16(x[d] * inv)) : (x[d] * inv) * g[d];
}

SD_AVX2 static void scale_row_avx2(float *y, const float *x, const float *g, float inv, int D, int bf16)
{
    int d = 0;
    __m256 iv = _mm256_set1_ps(inv);
    for (; d + 8 <= D; d += 8) {
        __m256 xs = _mm256_mul_ps(_mm256_loadu_ps(x + d), iv), gv = _mm256_loadu_ps(g + d);
        _mm256_storeu_ps(y + d, bf16 ? rne8(_mm256_mul_ps(gv, rne8(xs))) : _mm256_mul_ps(xs, gv));
    }
    scale_row_scalar(y, x, g, inv, d, D, bf16);
}

void sd_rmsnorm_row(float *y, const float *x, const float *g, int D, float eps, int bf16)
{
    float ss = sd_dot_f32(x, x, D);
    float inv = 1.0f / sqrtf(ss / (float)D + eps);
    if (sd_isa_avx2) scale_row_avx2(y, x, g, inv, D, bf16);
    else scale_row_scalar(y, x, g, inv, 0, D, bf16);
}

SD_AVX2 static float exp_sum_avx2(const float *x, int n, float shift)
{
    __m256 acc = _mm256_setzero_ps(), sv = _mm256_set1_ps(shift);
    int i = 0;
    for (; i + 8 <= n; i += 8) acc = _mm256_add_ps(acc, exp8(_mm256_sub_ps(_mm256_loadu_ps(x + i), sv)));
    float s = hsum1(acc);
    for (; i < n; i++) s += expf(x[i] - shift);
    return s;
}

float sd_exp_sum(const float *x, int n, float shift)
{
    sd_cpu_isa_init();
    if (sd_isa_avx2) return exp_sum_avx2(x, n, shift);
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += expf(x[i] - shift);
    return s;
}

/* ------------------------------------------------------------------ RoPE */

/* Pairs i0..half-1 of one head, one at a time (the AVX2 tail, the scalar path). */
static void rope_scalar(float *v, const float *c, const float *s, int i0, int half, int bf16)
{
    for (int i = i0; i < half; i++) {
        float a = v[i], b = v[i + half];
        if (bf16) {
            v[i] = sd_round_bf16(sd_round_bf16(a * c[i]) + sd_round_bf16(-b * s[i]));
            v[i + half] = sd_round_bf16(sd_round_bf16(b * c[i]) + sd_round_bf16(a * s[i]));
        } else {
            v[i] = a * c[i] - b * s[i];
            v[i + half] = b * c[i] + a * s[i];
        }
    }
}

SD_AVX2 static void rope_avx2(float *v, const float *c, const float *s, int half, int bf16)
{
    int i = 0;
    for (; i + 8 <= half; i += 8) {
        __m256 a = _mm256_loadu_ps(v + i), b = _mm256_loadu_ps(v + half + i);
        __m256 cv = _mm256_loadu_ps(c + i), sv = _mm256_loadu_ps(s + i);
        __m256 lo, hi;
        if (bf16) {
            __m256 nb = _mm256_xor_ps(b, _mm256_set1_ps(-0.0f));
            lo = rne8(_mm256_add_ps(rne8(_mm256_mul_ps(a, cv)), rne8(_mm256_mul_ps(nb, sv))));
            hi = rne8(_mm256_add_ps(rne8(_mm256_mul_ps(b, cv)), rne8(_mm256_mul_ps(a, sv))));
        } else {
            lo = _mm256_sub_ps(_mm256_mul_ps(a, cv), _mm256_mul_ps(b, sv));
            hi = _mm256_add_ps(_mm256_mul_ps(b, cv), _mm256_mul_ps(a, sv));
        }
        _mm256_storeu_ps(v + i, lo);
        _mm256_storeu_ps(v + half + i, hi);
    }
    rope_scalar(v, c, s, i, half, bf16);
}

void sd_rope_row(float *v, const float *c, const float *s, int half, int bf16)
{
    if (sd_isa_avx2) rope_avx2(v, c, s, half, bf16);
    else rope_scalar(v, c, s, 0, half, bf16);
}

/* ---------------------------------------------------------------- argmax */

/* max_ps(x, m) returns m when x is NaN, so NaNs never win. */
SD_AVX2 static int argmax_avx2(const float *x, int n)
{
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) m8 = _mm256_max_ps(_mm256_loadu_ps(x + i), m8);
    float lanes[8], mx = -INFINITY;
    _mm256_storeu_ps(lanes, m8);
    for (int l = 0; l < 8; l++) mx = lanes[l] > mx ? lanes[l] : mx;
    for (; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    __m256 mv = _mm256_set1_ps(mx);
    for (i = 0; i + 8 <= n; i += 8) {
        int bits = _mm256_movemask_ps(_mm256_cmp_ps(_mm256_loadu_ps(x + i), mv, _CMP_EQ_OQ));
        if (bits) return i + __builtin_ctz((unsigned)bits);
    }
    for (; i < n; i++)
        if (x[i] == mx) return i;
    return -1;
}

int sd_argmax_f32(const float *x, int n)
{
    sd_cpu_isa_init();
    if (sd_isa_avx2) return argmax_avx2(x, n);
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
    return best;
}

/* ------------------------------------------------------- softmax weights */

SD_AVX2 static void exp_weights_avx2(const float *x, int n, float mx, float temp, float *w)
{
    __m256 mv = _mm256_set1_ps(mx), tv = _mm256_set1_ps(temp);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 a = _mm256_div_ps(_mm256_sub_ps(_mm256_loadu_ps(x + i), mv), tv);
        __m256 ok = _mm256_cmp_ps(a, a, _CMP_ORD_Q); /* NaN in, 0 out */
        _mm256_storeu_ps(w + i, _mm256_and_ps(exp8(a), ok));
    }
    if (i < n) {
        float t[8] = {0}, o[8];
        for (int j = i; j < n; j++) t[j - i] = x[j];
        exp_weights_avx2(t, 8, mx, temp, o);
        for (int j = i; j < n; j++) w[j] = o[j - i];
    }
}

void sd_exp_weights(const float *x, int n, float mx, float temp, float *w)
{
    sd_cpu_isa_init();
    if (sd_isa_avx2) {
        exp_weights_avx2(x, n, mx, temp, w);
        return;
    }
    for (int i = 0; i < n; i++) w[i] = sd_rd_exp_weight(x[i], mx, temp);
}

SD_AVX2 static void keep_weights_avx2(const float *x, int n, float mx, float floor, float *w)
{
    __m256 mv = _mm256_set1_ps(mx), fv = _mm256_set1_ps(floor), zero = _mm256_setzero_ps();
    __m256 one = _mm256_set1_ps(1.0f), ninf = _mm256_set1_ps(-INFINITY);
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 xv = _mm256_loadu_ps(x + i), wv = _mm256_loadu_ps(w + i);
        __m256 keep = _mm256_and_ps(_mm256_cmp_ps(wv, zero, _CMP_GT_OQ), _mm256_cmp_ps(wv, fv, _CMP_GE_OQ));
        keep = _mm256_and_ps(keep, _mm256_cmp_ps(xv, ninf, _CMP_NEQ_OQ)); /* false for -inf and NaN */
        __m256 r = _mm256_blendv_ps(_mm256_and_ps(wv, keep), one, _mm256_cmp_ps(xv, mv, _CMP_EQ_OQ));
        _mm256_storeu_ps(w + i, r);
    }
    for (; i < n; i++) w[i] = sd_rd_keep(x[i], mx, w[i], floor);
}

void sd_keep_weights(const float *x, int n, float mx, float floor, float *w)
{
    sd_cpu_isa_init();
    if (sd_isa_avx2) {
        keep_weights_avx2(x, n, mx, floor, w);
        return;
    }
    for (int i = 0; i < n; i++) w[i] = sd_rd_keep(x[i], mx, w[i], floor);
}

SD_AVX2 static float div_to_f32_avx2(const float *w, int n, double d, float *p)
{
    __m256d dv = _mm256_set1_pd(d);
    __m256 mx8 = _mm256_setzero_ps();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m128 lo = _mm256_cvtpd_ps(_mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(w + i)), dv));
        __m128 hi = _mm256_cvtpd_ps(_mm256_div_pd(_mm256_cvtps_pd(_mm_loadu_ps(w + i + 4)), dv));
        __m256 r = _mm256_set_m128(hi, lo);
        _mm256_storeu_ps(p + i, r);
        mx8 = _mm256_max_ps(mx8, r);
    }
    float lanes[8], mx = 0.0f;
    _mm256_storeu_ps(lanes, mx8);
    for (int l = 0; l < 8; l++) mx = lanes[l] > mx ? lanes[l] : mx;
    for (; i < n; i++) {
        p[i] = (float)((double)w[i] / d);
        mx = p[i] > mx ? p[i] : mx;
    }
    return mx;
}

float sd_div_to_f32(const float *w, int n, double d, float *p)
{
    sd_cpu_isa_init();
    if (sd_isa_avx2) return div_to_f32_avx2(w, n, d, p);
    float mx = 0.0f;
    for (int i = 0; i < n; i++) {
        p[i] = (float)((double)w[i] / d);
        mx = p[i] > mx ? p[i] : mx;
    }
    return mx;
}

SD_AVX2 static int band_ids_avx2(const float *p, int n, float lo, float hi, int *ids)
{
    __m256 lv = _mm256_set1_ps(lo), hv = _mm256_set1_ps(hi), zero = _mm256_setzero_ps();
    int m = 0, i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256 v = _mm256_loadu_ps(p + i);
        __m256 in = _mm256_and_ps(_mm256_cmp_ps(v, lv, _CMP_GE_OQ), _mm256_cmp_ps(v, hv, _CMP_LT_OQ));
        unsigned bits = (unsigned)_mm256_movemask_ps(_mm256_and_ps(in, _mm256_cmp_ps(v, zero, _CMP_GT_OQ)));
        for (; bits; bits &= bits - 1) ids[m++] = i + __builtin_ctz(bits);
    }
    for (; i < n; i++)
        if (p[i] >= lo && p[i] < hi && p[i] > 0.0f) ids[m++] = i;
    return m;
}

int sd_band_ids(const float *p, int n, float lo, float hi, int *ids)
{
    sd_cpu_isa_init();
    if (sd_isa_avx2) return band_ids_avx2(p, n, lo, hi, ids);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (p[i] >= lo && p[i] < hi && p[i] > 0.0f) ids[m++] = i;
    return m;
}
