/* cpu_dot.c — canonical-order dot products (see cpu_dot.h).
 *
 * The AVX2 kernels keep, for every output element, two 8-lane accumulators
 * a0/a1 fed alternately by 8-element chunks (c even → a0, odd → a1), i.e. the
 * chunk stream 0,1,2,... of x and w. The scalar fallback emulates the same
 * lane structure so results agree with the AVX2 path up to FMA rounding only
 * on machines that lack AVX2 (where it is then the single path used). */
#include "cpu_dot.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "backend.h"

static bool g_avx2;
static bool g_inited;

void sd_cpu_dot_init(void)
{
    if (g_inited) return;
    __builtin_cpu_init();
    g_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    g_inited = true;
}

const char *sd_cpu_dot_isa(void)
{
    sd_cpu_dot_init();
    return g_avx2 ? "avx2" : "scalar";
}

/* ---------------------------------------------------------------- scalar */

static float dot_scalar_f32(const float *w, const float *x, int K)
{
    float a[2][8] = {{0}};
    int nc = K / 8, k = 0;
    for (int c = 0; c < nc; c++, k += 8)
        for (int l = 0; l < 8; l++) a[c & 1][l] += w[k + l] * x[k + l];
    float s[8];
    for (int l = 0; l < 8; l++) s[l] = a[0][l] + a[1][l];
    float v[4];
    for (int l = 0; l < 4; l++) v[l] = s[l] + s[l + 4];
    float r = (v[0] + v[2]) + (v[1] + v[3]);
    for (; k < K; k++) r += w[k] * x[k];
    return r;
}

static float dot_scalar_bf16(const uint16_t *w, const float *x, int K)
{
    float a[2][8] = {{0}};
    int nc = K / 8, k = 0;
    for (int c = 0; c < nc; c++, k += 8)
        for (int l = 0; l < 8; l++) a[c & 1][l] += sd_bf16_to_f32(w[k + l]) * x[k + l];
    float s[8];
    for (int l = 0; l < 8; l++) s[l] = a[0][l] + a[1][l];
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

/* The fixed horizontal tree: lanes (l, l+4) first, then (0,2)+(1,3). */
SD_AVX2 static inline float hsum(__m256 a0, __m256 a1)
{
    __m256 s = _mm256_add_ps(a0, a1);
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m128 h = _mm_add_ps(v, _mm_movehl_ps(v, v));        /* (v0+v2, v1+v3) */
    __m128 r = _mm_add_ss(h, _mm_shuffle_ps(h, h, 0x55)); /* (v0+v2)+(v1+v3) */
    return _mm_cvtss_f32(r);
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

/* Four independent canonical dot products (w_i · x_i), kept in registers:
 * the 16-element loop feeds chunk 2j to a0 and chunk 2j+1 to a1, a last lone
 * 8-chunk goes to a0 — exactly the canonical chunk order. */
#define SD_DOT4(NAME, WT, LOAD, TAIL)                                                             \
    SD_AVX2 __attribute__((always_inline)) static inline void NAME(                               \
        float *r, const WT *w0, const WT *w1, const WT *w2, const WT *w3, const float *x0,        \
        const float *x1, const float *x2, const float *x3, int K)                                 \
    {                                                                                             \
        __m256 a00 = _mm256_setzero_ps(), a01 = a00, a10 = a00, a11 = a00;                        \
        __m256 a20 = a00, a21 = a00, a30 = a00, a31 = a00;                                        \
        int k = 0;                                                                                \
        for (; k + 16 <= K; k += 16) {                                                            \
            a00 = _mm256_fmadd_ps(LOAD(w0 + k), _mm256_loadu_ps(x0 + k), a00);                    \
            a01 = _mm256_fmadd_ps(LOAD(w0 + k + 8), _mm256_loadu_ps(x0 + k + 8), a01);            \
            a10 = _mm256_fmadd_ps(LOAD(w1 + k), _mm256_loadu_ps(x1 + k), a10);                    \
            a11 = _mm256_fmadd_ps(LOAD(w1 + k + 8), _mm256_loadu_ps(x1 + k + 8), a11);            \
            a20 = _mm256_fmadd_ps(LOAD(w2 + k), _mm256_loadu_ps(x2 + k), a20);                    \
            a21 = _mm256_fmadd_ps(LOAD(w2 + k + 8), _mm256_loadu_ps(x2 + k + 8), a21);            \
            a30 = _mm256_fmadd_ps(LOAD(w3 + k), _mm256_loadu_ps(x3 + k), a30);                    \
            a31 = _mm256_fmadd_ps(LOAD(w3 + k + 8), _mm256_loadu_ps(x3 + k + 8), a31);            \
        }                                                                                         \
        if (k + 8 <= K) {                                                                         \
            a00 = _mm256_fmadd_ps(LOAD(w0 + k), _mm256_loadu_ps(x0 + k), a00);                    \
            a10 = _mm256_fmadd_ps(LOAD(w1 + k), _mm256_loadu_ps(x1 + k), a10);                    \
            a20 = _mm256_fmadd_ps(LOAD(w2 + k), _mm256_loadu_ps(x2 + k), a20);                    \
            a30 = _mm256_fmadd_ps(LOAD(w3 + k), _mm256_loadu_ps(x3 + k), a30);                    \
            k += 8;                                                                               \
        }                                                                                         \
        r[0] = TAIL(hsum(a00, a01), w0, x0, k, K);                                                \
        r[1] = TAIL(hsum(a10, a11), w1, x1, k, K);                                                \
        r[2] = TAIL(hsum(a20, a21), w2, x2, k, K);                                                \
        r[3] = TAIL(hsum(a30, a31), w3, x3, k, K);                                                \
    }

/* One canonical dot product. */
#define SD_DOT1(NAME, WT, LOAD, TAIL)                                                             \
    SD_AVX2 __attribute__((always_inline)) static inline float NAME(const WT *w, const float *x,  \
                                                                    int K)                        \
    {                                                                                             \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0;                                                 \
        int k = 0;                                                                                \
        for (; k + 16 <= K; k += 16) {                                                            \
            a0 = _mm256_fmadd_ps(LOAD(w + k), _mm256_loadu_ps(x + k), a0);                        \
            a1 = _mm256_fmadd_ps(LOAD(w + k + 8), _mm256_loadu_ps(x + k + 8), a1);                \
        }                                                                                         \
        if (k + 8 <= K) {                                                                         \
            a0 = _mm256_fmadd_ps(LOAD(w + k), _mm256_loadu_ps(x + k), a0);                        \
            k += 8;                                                                               \
        }                                                                                         \
        return TAIL(hsum(a0, a1), w, x, k, K);                                                    \
    }

SD_DOT4(dot4_f32, float, _mm256_loadu_ps, tail_f32)
SD_DOT4(dot4_bf16, uint16_t, load_bf16, tail_bf16)
SD_DOT1(dot1_f32, float, _mm256_loadu_ps, tail_f32)
SD_DOT1(dot1_bf16, uint16_t, load_bf16, tail_bf16)

/* R rows x 1 token, four rows at a time. */
#define SD_DOT_ROWS(NAME, WT, DOT4, DOT1)                                                         \
    SD_AVX2 static void NAME(float *y, const WT *w, const float *x, int K, int R)                 \
    {                                                                                             \
        int r = 0;                                                                                \
        for (; r + 4 <= R; r += 4) {                                                              \
            const WT *wr = w + (size_t)r * K;                                                     \
            DOT4(y + r, wr, wr + K, wr + 2 * (size_t)K, wr + 3 * (size_t)K, x, x, x, x, K);       \
        }                                                                                         \
        for (; r < R; r++) y[r] = DOT1(w + (size_t)r * K, x, K);                                  \
    }

/* 1 weight row x U tokens, four tokens at a time. */
#define SD_DOT_TOKENS(NAME, WT, DOT4, DOT1)                                                       \
    SD_AVX2 static void NAME(float *y, int ldy, const WT *w, const float *x, int ldx, int K,      \
                             int U)                                                               \
    {                                                                                             \
        int t = 0;                                                                                \
        for (; t + 4 <= U; t += 4) {                                                              \
            const float *xt = x + (size_t)t * ldx;                                                \
            float r[4];                                                                           \
            DOT4(r, w, w, w, w, xt, xt + ldx, xt + 2 * (size_t)ldx, xt + 3 * (size_t)ldx, K);     \
            for (int j = 0; j < 4; j++) y[(size_t)(t + j) * ldy] = r[j];                          \
        }                                                                                         \
        for (; t < U; t++) y[(size_t)t * ldy] = DOT1(w, x + (size_t)t * ldx, K);                  \
    }

SD_DOT_TOKENS(tokens_f32_avx2, float, dot4_f32, dot1_f32)
SD_DOT_TOKENS(tokens_bf16_avx2, uint16_t, dot4_bf16, dot1_bf16)
SD_DOT_ROWS(rows_f32_avx2, float, dot4_f32, dot1_f32)
SD_DOT_ROWS(rows_bf16_avx2, uint16_t, dot4_bf16, dot1_bf16)

/* ----------------------------------------------------------- dispatch */

void sd_dot_rows_f32(float *y, const float *w, const float *x, int K, int R)
{
    if (g_avx2) {
        rows_f32_avx2(y, w, x, K, R);
        return;
    }
    for (int r = 0; r < R; r++) y[r] = dot_scalar_f32(w + (size_t)r * K, x, K);
}

void sd_dot_rows_bf16(float *y, const uint16_t *w, const float *x, int K, int R)
{
    if (g_avx2) {
        rows_bf16_avx2(y, w, x, K, R);
        return;
    }
    for (int r = 0; r < R; r++) y[r] = dot_scalar_bf16(w + (size_t)r * K, x, K);
}

void sd_dot_tokens_f32(float *y, int ldy, const float *w, const float *x, int ldx, int K, int U)
{
    if (g_avx2) {
        tokens_f32_avx2(y, ldy, w, x, ldx, K, U);
        return;
    }
    for (int t = 0; t < U; t++) y[(size_t)t * ldy] = dot_scalar_f32(w, x + (size_t)t * ldx, K);
}

void sd_dot_tokens_bf16(float *y, int ldy, const uint16_t *w, const float *x, int ldx, int K, int U)
{
    if (g_avx2) {
        tokens_bf16_avx2(y, ldy, w, x, ldx, K, U);
        return;
    }
    for (int t = 0; t < U; t++) y[(size_t)t * ldy] = dot_scalar_bf16(w, x + (size_t)t * ldx, K);
}

float sd_dot_f32(const float *a, const float *b, int K)
{
    float r;
    sd_dot_rows_f32(&r, a, b, K, 1);
    return r;
}

/* ------------------------------------------------------------ attention */

/* Position j's slot in the paged cache. */
static inline size_t attn_slot(const int32_t *blocks, int bs, int j)
{
    return (size_t)blocks[j / bs] * bs + j % bs;
}

/* Softmax over sc[0..n) in place (ascending order); returns the f32 sum of
 * the unnormalised weights (bf16 mode divides by it at the end). */
static float softmax_inplace(float *sc, int n)
{
    float mx = -INFINITY;
    for (int j = 0; j < n; j++)
        if (sc[j] > mx) mx = sc[j];
    float sum = 0.0f;
    for (int j = 0; j < n; j++) {
        sc[j] = expf(sc[j] - mx);
        sum += sc[j];
    }
    return sum;
}

static void attn_row_scalar(float *out, const float *q, const float *k, const float *v, size_t stride,
                            const int32_t *blocks, int bs, int n, int hd, float scale, int bf16, float *sc)
{
    for (int j = 0; j < n; j++) sc[j] = dot_scalar_f32(q, k + attn_slot(blocks, bs, j) * stride, hd) * scale;
    float sum = softmax_inplace(sc, n), inv = 1.0f / sum;
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float *vr = v + attn_slot(blocks, bs, j) * stride;
        float p = bf16 ? sd_round_bf16(sc[j]) : sc[j] * inv;
        for (int d = 0; d < hd; d++) out[d] += p * vr[d];
    }
    if (bf16)
        for (int d = 0; d < hd; d++) out[d] = sd_round_bf16(out[d] / sum);
}

SD_AVX2 static void attn_row_avx2(float *out, const float *q, const float *k, const float *v, size_t stride,
                                  const int32_t *blocks, int bs, int n, int hd, float scale, int bf16, float *sc)
{
    for (int j = 0; j < n; j++) sc[j] = dot1_f32(q, k + attn_slot(blocks, bs, j) * stride, hd) * scale;
    float sum = softmax_inplace(sc, n), inv = 1.0f / sum;
    int hd8 = hd & ~7;
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float *vr = v + attn_slot(blocks, bs, j) * stride;
        float p = bf16 ? sd_round_bf16(sc[j]) : sc[j] * inv;
        __m256 pv = _mm256_set1_ps(p);
        for (int d = 0; d < hd8; d += 8)
            _mm256_storeu_ps(out + d, _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + d), _mm256_loadu_ps(out + d)));
        for (int d = hd8; d < hd; d++) out[d] += p * vr[d];
    }
    if (bf16)
        for (int d = 0; d < hd; d++) out[d] = sd_round_bf16(out[d] / sum);
}

void sd_attn_row(float *out, const float *q, const float *k, const float *v, size_t stride, const int32_t *blocks,
                 int block_size, int n, int hd, float scale, int bf16, float *scratch)
{
    if (g_avx2) attn_row_avx2(out, q, k, v, stride, blocks, block_size, n, hd, scale, bf16, scratch);
    else attn_row_scalar(out, q, k, v, stride, blocks, block_size, n, hd, scale, bf16, scratch);
}
