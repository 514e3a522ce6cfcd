/* cpu_dot.c — canonical-order dot products (see cpu_dot.h).
 *
 * The AVX2 kernels keep, for every output element, one 8-lane accumulator
 * fed the 8-element chunks of w and x in index order, reduce it with a fixed
 * tree (lanes l and l+4, then (0+2)+(1+3)) and add the scalar tail in order.
 * The scalar fallback emulates the same lane structure; it is the single path
 * on machines without AVX2+FMA. The AVX-512 BF16 tiles (both operands bf16)
 * follow. */
#include "cpu_dot.h"

#include <immintrin.h>
#include <stdbool.h>
#include <string.h>

#include "backend.h"
#include "cpu_simd.h"

/* Eight weight rows x one token (decode): eight independent FMA chains. */
#define SD_ROWS8(NAME, WT, LOAD, TAIL)                                                                          \
    SD_AVX2 static inline void NAME(float *y, const WT *w, const float *x, int K)                               \
    {                                                                                                           \
        const WT *w0 = w, *w1 = w + K, *w2 = w + 2 * (size_t)K, *w3 = w + 3 * (size_t)K;                        \
        const WT *w4 = w + 4 * (size_t)K, *w5 = w + 5 * (size_t)K, *w6 = w + 6 * (size_t)K;                     \
        const WT *w7 = w + 7 * (size_t)K;                                                                       \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;         \
        int k = 0;                                                                                              \
        for (; k + 8 <= K; k += 8) {                                                                            \
            if (!(k % (64 / (int)sizeof(WT)))) /* one line of each of the next 8 rows per 64 bytes */           \
                for (int p = 8; p < 16; p++) _mm_prefetch((const char *)(w0 + p * (size_t)K + k), _MM_HINT_T0); \
            __m256 xv = _mm256_loadu_ps(x + k);                                                                 \
            a0 = _mm256_fmadd_ps(LOAD(w0 + k), xv, a0);                                                         \
            a1 = _mm256_fmadd_ps(LOAD(w1 + k), xv, a1);                                                         \
            a2 = _mm256_fmadd_ps(LOAD(w2 + k), xv, a2);                                                         \
            a3 = _mm256_fmadd_ps(LOAD(w3 + k), xv, a3);                                                         \
            a4 = _mm256_fmadd_ps(LOAD(w4 + k), xv, a4);                                                         \
            a5 = _mm256_fmadd_ps(LOAD(w5 + k), xv, a5);                                                         \
            a6 = _mm256_fmadd_ps(LOAD(w6 + k), xv, a6);                                                         \
            a7 = _mm256_fmadd_ps(LOAD(w7 + k), xv, a7);                                                         \
        }                                                                                                       \
        y[0] = TAIL(hsum1(a0), w0, x, k, K);                                                                    \
        y[1] = TAIL(hsum1(a1), w1, x, k, K);                                                                    \
        y[2] = TAIL(hsum1(a2), w2, x, k, K);                                                                    \
        y[3] = TAIL(hsum1(a3), w3, x, k, K);                                                                    \
        y[4] = TAIL(hsum1(a4), w4, x, k, K);                                                                    \
        y[5] = TAIL(hsum1(a5), w5, x, k, K);                                                                    \
        y[6] = TAIL(hsum1(a6), w6, x, k, K);                                                                    \
        y[7] = TAIL(hsum1(a7), w7, x, k, K);                                                                    \
    }

/* RR weight rows x UU tokens (RR * UU + UU + 1 <= 16 registers): the UU
 * token chunks stay in registers, each weight chunk is loaded (and
 * converted) once for all UU tokens. Spans of a few tokens (a verify pass)
 * cost about one weight read and UU times the FMAs, not UU passes. */
#define SD_TILE_RU(NAME, WT, LOAD, TAIL, RR, UU)                                                                    \
    SD_AVX2 static inline void NAME(float *y, int ldy, const WT *w, const float *x, int ldx, int K)                 \
    {                                                                                                               \
        __m256 a[RR][UU];                                                                                           \
        _Pragma("GCC unroll 8") for (int i = 0; i < RR; i++) _Pragma("GCC unroll 8") for (int j = 0; j < UU; j++)   \
            a[i][j] = _mm256_setzero_ps();                                                                          \
        int k = 0;                                                                                                  \
        for (; k + 8 <= K; k += 8) {                                                                                \
            __m256 xv[UU];                                                                                          \
            _Pragma("GCC unroll 8") for (int j = 0; j < UU; j++) xv[j] = _mm256_loadu_ps(x + (size_t)j * ldx + k);  \
            _Pragma("GCC unroll 8") for (int i = 0; i < RR; i++)                                                    \
            {                                                                                                       \
                /* the next rows: short parallel streams defeat the hardware prefetcher */                          \
                _mm_prefetch((const char *)(w + (size_t)(RR + i) * K + k), _MM_HINT_T0);                            \
                __m256 wv = LOAD(w + (size_t)i * K + k);                                                            \
                _Pragma("GCC unroll 8") for (int j = 0; j < UU; j++) a[i][j] = _mm256_fmadd_ps(wv, xv[j], a[i][j]); \
            }                                                                                                       \
        }                                                                                                           \
        _Pragma("GCC unroll 8") for (int i = 0; i < RR; i++) _Pragma("GCC unroll 8") for (int j = 0; j < UU; j++)   \
            y[(size_t)j * ldy + i] = TAIL(hsum1(a[i][j]), w + (size_t)i * K, x + (size_t)j * ldx, k, K);            \
    }

SD_TILE_RU(tile43_f32, float, _mm256_loadu_ps, tail_f32, 4, 3)
SD_TILE_RU(tile43_bf16, uint16_t, load_bf16, tail_bf16, 4, 3)
SD_TILE_RU(tile42_f32, float, _mm256_loadu_ps, tail_f32, 4, 2)
SD_TILE_RU(tile42_bf16, uint16_t, load_bf16, tail_bf16, 4, 2)

SD_ROWS8(rows8_f32, float, _mm256_loadu_ps, tail_f32)
SD_ROWS8(rows8_bf16, uint16_t, load_bf16, tail_bf16)

/* R rows x 1 token. */
#define SD_DOT_ROWS(NAME, WT, ROWS8, DOT1)                                        \
    SD_AVX2 static void NAME(float *y, const WT *w, const float *x, int K, int R) \
    {                                                                             \
        int r = 0;                                                                \
        for (; r + 8 <= R; r += 8) ROWS8(y + r, w + (size_t)r * K, x, K);         \
        for (; r < R; r++) y[r] = DOT1(w + (size_t)r * K, x, K);                  \
    }

/* R rows x U tokens: y[t * ldy + r] = dot(w_r, x_t). Rows go in blocks of
 * 16 (their weights stay in L1 across tokens): 4x3 tiles for each group of
 * three tokens, a 4x2 tile for two left over, the 8-row kernel for one;
 * rows past a multiple of four one dot product at a time. */
#define SD_DOT_TILE(NAME, WT, T43, T42, ROWS8, DOT1)                                                       \
    SD_AVX2 static void NAME(float *y, int ldy, const WT *w, const float *x, int ldx, int K, int R, int U) \
    {                                                                                                      \
        for (int r0 = 0; r0 < R; r0 += 16) {                                                               \
            int r1 = r0 + 16 < R ? r0 + 16 : R, t = 0;                                                     \
            for (; t < U;) {                                                                               \
                int n = U - t >= 3 ? 3 : U - t;                                                            \
                float *yt = y + (size_t)t * ldy;                                                           \
                const float *xt = x + (size_t)t * ldx;                                                     \
                int r = r0;                                                                                \
                if (n == 1) {                                                                              \
                    for (; r + 8 <= r1; r += 8) ROWS8(yt + r, w + (size_t)r * K, xt, K);                   \
                } else {                                                                                   \
                    for (; r + 4 <= r1; r += 4) {                                                          \
                        if (n == 3) T43(yt + r, ldy, w + (size_t)r * K, xt, ldx, K);                       \
                        else T42(yt + r, ldy, w + (size_t)r * K, xt, ldx, K);                              \
                    }                                                                                      \
                }                                                                                          \
                for (; r < r1; r++)                                                                        \
                    for (int j = 0; j < n; j++)                                                            \
                        yt[(size_t)j * ldy + r] = DOT1(w + (size_t)r * K, xt + (size_t)j * ldx, K);        \
                t += n;                                                                                    \
            }                                                                                              \
        }                                                                                                  \
    }

SD_DOT_ROWS(rows_f32_avx2, float, rows8_f32, dot1_f32)
SD_DOT_ROWS(rows_bf16_avx2, uint16_t, rows8_bf16, dot1_bf16)
SD_DOT_TILE(tile_f32_avx2, float, tile43_f32, tile42_f32, rows8_f32, dot1_f32)
SD_DOT_TILE(tile_bf16_avx2, uint16_t, tile43_bf16, tile42_bf16, rows8_bf16, dot1_bf16)

/* ----------------------------------------------------------- dispatch */

void sd_dot_rows_f32(float *y, const float *w, const float *x, int K, int R)
{
    if (sd_isa_avx2) {
        rows_f32_avx2(y, w, x, K, R);
        return;
    }
    for (int r = 0; r < R; r++) y[r] = dot_scalar_f32(w + (size_t)r * K, x, K);
}

void sd_dot_rows_bf16(float *y, const uint16_t *w, const float *x, int K, int R)
{
    if (sd_isa_avx2) {
        rows_bf16_avx2(y, w, x, K, R);
        return;
    }
    for (int r = 0; r < R; r++) y[r] = dot_scalar_bf16(w + (size_t)r * K, x, K);
}

void sd_dot_tile_f32(float *y, int ldy, const float *w, const float *x, int ldx, int K, int R, int U)
{
    if (sd_isa_avx2) {
        tile_f32_avx2(y, ldy, w, x, ldx, K, R, U);
        return;
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < U; t++) y[(size_t)t * ldy + r] = dot_scalar_f32(w + (size_t)r * K, x + (size_t)t * ldx, K);
}

void sd_dot_tile_bf16(float *y, int ldy, const uint16_t *w, const float *x, int ldx, int K, int R, int U)
{
    if (sd_isa_avx2) {
        tile_bf16_avx2(y, ldy, w, x, ldx, K, R, U);
        return;
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < U; t++) y[(size_t)t * ldy + r] = dot_scalar_bf16(w + (size_t)r * K, x + (size_t)t * ldx, K);
}

float sd_dot_f32(const float *a, const float *b, int K)
{
    float r;
    sd_dot_rows_f32(&r, a, b, K, 1);
    return r;
}

/* ------------------------------------------------- AVX-512 BF16 dot products
 *
 * For bf16 weights with bf16 activations (both operands exactly bf16): one
 * 16-lane f32 accumulator per output fed by vdpbf16ps over 32-element chunks
 * in index order (the last chunk zero-padded by a masked load), then a fixed
 * reduction tree. Like the AVX2 path, every tile computes each output with
 * exactly this sequence, so results do not depend on the batch. */

#define SD_BF16DOT __attribute__((target("avx512f,avx512bw,avx512vl,avx512bf16")))

SD_BF16DOT static inline __m512bh ld32(const uint16_t *p, int k, int K)
{
    if (k + 32 <= K) return (__m512bh)_mm512_loadu_si512((const void *)(p + k));
    return (__m512bh)_mm512_maskz_loadu_epi16((__mmask32)((1ull << (K - k)) - 1), p + k);
}

SD_BF16DOT static inline float hsum16(__m512 a)
{
    __m256 s =
        _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m128 h = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 0x55)));
}

/* 8 weight rows x 1 token (decode): eight named accumulators, full chunks
 * then the zero-padded last one. */
#define BD_R8()                                               \
    do {                                                      \
        __m512bh xv = LD(x);                                  \
        a0 = _mm512_dpbf16_ps(a0, LD(w), xv);                 \
        a1 = _mm512_dpbf16_ps(a1, LD(w + K), xv);             \
        a2 = _mm512_dpbf16_ps(a2, LD(w + 2 * (size_t)K), xv); \
        a3 = _mm512_dpbf16_ps(a3, LD(w + 3 * (size_t)K), xv); \
        a4 = _mm512_dpbf16_ps(a4, LD(w + 4 * (size_t)K), xv); \
        a5 = _mm512_dpbf16_ps(a5, LD(w + 5 * (size_t)K), xv); \
        a6 = _mm512_dpbf16_ps(a6, LD(w + 6 * (size_t)K), xv); \
        a7 = _mm512_dpbf16_ps(a7, LD(w + 7 * (size_t)K), xv); \
    } while (0)

SD_BF16DOT static void bd_rows8(float *y, const uint16_t *w, const uint16_t *x, int K)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    int k = 0;
#define LD(p) ((__m512bh)_mm512_loadu_si512((const void *)((p) + k)))
    for (; k + 32 <= K; k += 32) BD_R8();
#undef LD
    if (k < K) {
        __mmask32 m = (__mmask32)((1ull << (K - k)) - 1);
#define LD(p) ((__m512bh)_mm512_maskz_loadu_epi16(m, (p) + k))
        BD_R8();
#undef LD
    }
    y[0] = hsum16(a0), y[1] = hsum16(a1), y[2] = hsum16(a2), y[3] = hsum16(a3);
    y[4] = hsum16(a4), y[5] = hsum16(a5), y[6] = hsum16(a6), y[7] = hsum16(a7);
}
#undef BD_R8

SD_BF16DOT static float bd_dot1(const uint16_t *w, const uint16_t *x, int K)
{
    __m512 a = _mm512_setzero_ps();
    for (int k = 0; k < K; k += 32) a = _mm512_dpbf16_ps(a, ld32(w, k, K), ld32(x, k, K));
    return hsum16(a);
}

/* R weight rows x U tokens: every weight chunk is loaded once per step and
 * feeds all U tokens, so a span reads its weights once. Two loop orders,
 * chosen by U because GCC allocates registers differently for them
 * (measured with R x K = 8192 x 384): up to 6 tokens the U token chunks are
 * loaded first (R*U + U + 1 registers); for 7-8 tokens the R weight chunks
 * (R*U + R + 1). R and U are constants in every instantiation, so the
 * accumulator array lives in registers. Each output is the canonical
 * sequence: full 32-element chunks in order, the zero-padded last chunk,
 * hsum16. y[t * ldy + r]. */
#define BD_STEP(LD)                                                                              \
    do {                                                                                         \
        if (U <= 6) {                                                                            \
            __m512bh xv[8];                                                                      \
            _Pragma("GCC unroll 8") for (int u = 0; u < U; u++) xv[u] = LD(x + (size_t)u * ldx); \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                                  \
            {                                                                                    \
                __m512bh wv = LD(w + (size_t)r * K);                                             \
                _Pragma("GCC unroll 8") for (int u = 0; u < U; u++) acc[r][u] =                  \
                    _mm512_dpbf16_ps(acc[r][u], wv, xv[u]);                                      \
            }                                                                                    \
        } else {                                                                                 \
            __m512bh wv[8];                                                                      \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) wv[r] = LD(w + (size_t)r * K);   \
            _Pragma("GCC unroll 8") for (int u = 0; u < U; u++)                                  \
            {                                                                                    \
                __m512bh xu = LD(x + (size_t)u * ldx);                                           \
                _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) acc[r][u] =                  \
                    _mm512_dpbf16_ps(acc[r][u], wv[r], xu);                                      \
            }                                                                                    \
        }                                                                                        \
    } while (0)

SD_BF16DOT __attribute__((always_inline)) static inline void
bd_tile_ru(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, const int R, const int U)
{
    __m512 acc[8][8];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 8
        for (int u = 0; u < U; u++) acc[r][u] = _mm512_setzero_ps();
    int k = 0;
#define LDF(p) ((__m512bh)_mm512_loadu_si512((const void *)((p) + k)))
    for (; k + 32 <= K; k += 32) {
        /* the next tile's rows: short row streams defeat the hardware prefetcher */
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)
            _mm_prefetch((const char *)(w + (size_t)(2 * R + r) * K + k), _MM_HINT_T0);
        BD_STEP(LDF);
    }
#undef LDF
    if (k < K) {
        __mmask32 m = (__mmask32)((1ull << (K - k)) - 1);
#define LDM(p) ((__m512bh)_mm512_maskz_loadu_epi16(m, (p) + k))
        BD_STEP(LDM);
#undef LDM
    }
#pragma GCC unroll 8
    for (int u = 0; u < U; u++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) y[(size_t)u * ldy + r] = hsum16(acc[r][u]);
}
#undef BD_STEP

/* Rows r0..r1 against U <= 8 tokens: 4-row tiles (3-row for 7-8 tokens),
 * single rows for the remainder. */
#define BD_TILES(RR, UU)                                                                            \
    do {                                                                                            \
        for (; r + RR <= r1; r += RR) bd_tile_ru(y + r, ldy, w + (size_t)r * K, x, ldx, K, RR, UU); \
        for (; r < r1; r++) bd_tile_ru(y + r, ldy, w + (size_t)r * K, x, ldx, K, 1, UU);            \
    } while (0)

SD_BF16DOT static void bd_block(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, int r0, int r1,
                                int U)
{
    int r = r0;
    switch (U) {
    case 1:
        for (; r + 8 <= r1; r += 8) bd_rows8(y + r, w + (size_t)r * K, x, K);
        for (; r < r1; r++) y[r] = bd_dot1(w + (size_t)r * K, x, K);
        break;
    case 2: BD_TILES(4, 2); break;
    case 3: BD_TILES(4, 3); break;
    case 4: BD_TILES(4, 4); break;
    case 5: BD_TILES(4, 5); break;
    case 6: BD_TILES(4, 6); break;
    case 7: BD_TILES(3, 7); break;
    default: BD_TILES(3, 8); break;
    }
}
#undef BD_TILES

/* R rows x U tokens with bf16 x (rows of ldx elements); y[t * ldy + r].
 * Tokens go in balanced groups of at most 7 (3 x 8 tiles measured slower than 4 + 4), rows in bands of 64 so a
 * band's weights stay in L1/L2 while every group passes over them. */
SD_BF16DOT static void bd_tile(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, int R, int U)
{
    int groups = (U + 6) / 7;
    for (int r0 = 0; r0 < R; r0 += 64) {
        int r1 = r0 + 64 < R ? r0 + 64 : R;
        for (int g = 0, t = 0; g < groups; g++) {
            int n = U / groups + (g < U % groups ? 1 : 0);
            bd_block(y + (size_t)t * ldy, ldy, w, x + (size_t)t * ldx, ldx, K, r0, r1, n);
            t += n;
        }
    }
}

void sd_dot_tile_bf16x(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, int R, int U)
{
    bd_tile(y, ldy, w, x, ldx, K, R, U);
}
