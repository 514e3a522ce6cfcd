/* cpu_q8.c — see cpu_q8.h. */
#include "cpu_q8.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>

#include "cpu_amx.h"

static int g_path = -1; /* 3 AMX-INT8 for spans (VNNI for one token), 2 AVX-512 VNNI, 1 AVX2, 0 scalar */

static int q8_path(void)
{
    if (g_path < 0) {
        __builtin_cpu_init();
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
            __builtin_cpu_supports("avx512vnni"))
            g_path = sd_amx_int8_available() ? 3 : 2;
        else if (__builtin_cpu_supports("avx2")) g_path = 1;
        else g_path = 0;
    }
    return g_path;
}

int sd_q8_set_path(int level)
{
    g_path = -1;
    int hw = q8_path();
    g_path = level < hw ? level : hw;
    return g_path;
}

/* One row: scale = max|v| / 127 (1 for an all-zero row), q = rint(v * 127 / max). */
static float quant_row(const float *v, int K, int8_t *q)
{
    float amax = 0.0f;
    for (int k = 0; k < K; k++) amax = fmaxf(amax, fabsf(v[k]));
    if (!(amax > 0.0f) || !isfinite(amax)) {
        for (int k = 0; k < K; k++) q[k] = 0;
        return amax > 0.0f ? amax : 1.0f;
    }
    float inv = 127.0f / amax;
    for (int k = 0; k < K; k++) {
        float f = v[k] * inv;
        long r = f == f ? lrintf(f) : 0;
        q[k] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    return amax / 127.0f;
}

void sd_q8_quantize_rows(const float *w, int R, int K, int8_t *q, float *scale, int32_t *sum)
{
    for (int r = 0; r < R; r++) {
        int8_t *qr = q + (size_t)r * K;
        scale[r] = quant_row(w + (size_t)r * K, K, qr);
        int32_t s = 0;
        for (int k = 0; k < K; k++) s += qr[k];
        sum[r] = s;
    }
}

/* quant_row with AVX2: the same max (order does not matter) and the same
 * rint(v * inv) per element (cvtps rounds to nearest even, as lrintf). */
__attribute__((target("avx2"))) static float quant_row_avx2(const float *v, int K, int8_t *q)
{
    __m256 mx = _mm256_setzero_ps();
    const __m256 abs = _mm256_castsi256_ps(_mm256_set1_epi32(0x7fffffff));
    int k = 0;
    for (; k + 8 <= K; k += 8) mx = _mm256_max_ps(mx, _mm256_and_ps(_mm256_loadu_ps(v + k), abs));
    float lanes[8], amax = 0.0f;
    _mm256_storeu_ps(lanes, mx);
    for (int i = 0; i < 8; i++) amax = lanes[i] > amax ? lanes[i] : amax;
    for (; k < K; k++) amax = fmaxf(amax, fabsf(v[k]));
    if (!(amax > 0.0f) || !isfinite(amax)) return quant_row(v, K, q);
    float inv = 127.0f / amax;
    __m256 iv = _mm256_set1_ps(inv);
    for (k = 0; k + 8 <= K; k += 8) {
        __m256 f = _mm256_mul_ps(_mm256_loadu_ps(v + k), iv);
        if (_mm256_movemask_ps(_mm256_cmp_ps(f, f, _CMP_UNORD_Q))) return quant_row(v, K, q);
        __m256i r =
            _mm256_max_epi32(_mm256_min_epi32(_mm256_cvtps_epi32(f), _mm256_set1_epi32(127)), _mm256_set1_epi32(-127));
        __m128i w = _mm_packs_epi32(_mm256_castsi256_si128(r), _mm256_extracti128_si256(r, 1));
        _mm_storel_epi64((__m128i *)(q + k), _mm_packs_epi16(w, w));
    }
    for (; k < K; k++) {
        long r = lrintf(v[k] * inv);
        q[k] = (int8_t)(r > 127 ? 127 : r < -127 ? -127 : r);
    }
    return amax / 127.0f;
}

void sd_q8_quantize_x(const float *x, int T, int K, int ldx, int8_t *xq, float *xs)
{
    bool avx2 = q8_path() >= 1;
    for (int t = 0; t < T; t++)
        xs[t] = avx2 ? quant_row_avx2(x + (size_t)t * ldx, K, xq + (size_t)t * K)
                     : quant_row(x + (size_t)t * ldx, K, xq + (size_t)t * K);
}

static inline float q8_out(int32_t acc, float ws, float xs) { return ((float)acc * ws) * xs; }

/* ---------------------------------------------------------------- scalar */

static void tile_scalar(float *y, int ldy, const int8_t *wq, const float *ws, const int32_t *wsum, const int8_t *xq,
                        const float *xs, int K, int R, int U)
{
    (void)wsum;
    for (int t = 0; t < U; t++)
        for (int r = 0; r < R; r++) {
            const int8_t *w = wq + (size_t)r * K, *x = xq + (size_t)t * K;
            int32_t acc = 0;
            for (int k = 0; k < K; k++) acc += (int32_t)w[k] * x[k];
            y[(size_t)t * ldy + r] = q8_out(acc, ws[r], xs[t]);
        }
}

/* ------------------------------------------------------------------ AVX2 */

__attribute__((target("avx2"))) static inline int32_t hsum_epi32_256(__m256i v)
{
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
    return _mm_cvtsi128_si32(s);
}

#define SD_Q8AVX2 __attribute__((target("avx2")))

/* RR rows x UU tokens, RR * UU accumulators (RR * UU + UU + 1 <= 16
 * registers): each 16-byte weight chunk is widened once for all UU tokens;
 * the next rows are prefetched (short parallel streams outrun the hardware
 * prefetcher). Integer sums are exact: any tiling gives the same results. */
#define SD_Q8_RU(NAME, RR, UU)                                                                                    \
    SD_Q8AVX2 static inline void NAME(float *y, int ldy, const int8_t *wq, const float *ws, const int8_t *xq,     \
                                      const float *xs, int K)                                                     \
    {                                                                                                             \
        __m256i a[RR][UU];                                                                                        \
        _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++) _Pragma("GCC unroll 4") for (int u = 0; u < UU; u++) \
            a[r][u] = _mm256_setzero_si256();                                                                     \
        int k = 0;                                                                                                \
        for (; k + 16 <= K; k += 16) {                                                                            \
            __m256i xv[UU];                                                                                       \
            _Pragma("GCC unroll 4") for (int u = 0; u < UU; u++) xv[u] =                                          \
                _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(xq + (size_t)u * K + k)));                 \
            _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++)                                                  \
            {                                                                                                     \
                if (!(k & 63)) _mm_prefetch((const char *)(wq + (size_t)(RR + r) * K + k), _MM_HINT_T0);          \
                __m256i wv = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(wq + (size_t)r * K + k)));    \
                _Pragma("GCC unroll 4") for (int u = 0; u < UU; u++) a[r][u] =                                    \
                    _mm256_add_epi32(a[r][u], _mm256_madd_epi16(wv, xv[u]));                                      \
            }                                                                                                     \
        }                                                                                                         \
        _Pragma("GCC unroll 8") for (int r = 0; r < RR; r++) _Pragma("GCC unroll 4") for (int u = 0; u < UU; u++) \
        {                                                                                                         \
            int32_t s = hsum_epi32_256(a[r][u]);                                                                  \
            for (int kk = k; kk < K; kk++) s += (int32_t)wq[(size_t)r * K + kk] * xq[(size_t)u * K + kk];         \
            y[(size_t)u * ldy + r] = q8_out(s, ws[r], xs[u]);                                                     \
        }                                                                                                         \
    }

SD_Q8_RU(q8_81, 8, 1)
SD_Q8_RU(q8_42, 4, 2)
SD_Q8_RU(q8_43, 4, 3)
SD_Q8_RU(q8_11, 1, 1)
SD_Q8_RU(q8_12, 1, 2)
SD_Q8_RU(q8_13, 1, 3)

/* Rows in blocks of 24 (the weights of a block stay in cache across a span's
 * token groups); tokens in groups of three, two, one. */
SD_Q8AVX2 static void tile_avx2(float *y, int ldy, const int8_t *wq, const float *ws, const int32_t *wsum,
                                const int8_t *xq, const float *xs, int K, int R, int U)
{
    (void)wsum;
    for (int r0 = 0; r0 < R; r0 += 24) {
        int r1 = r0 + 24 < R ? r0 + 24 : R;
        for (int t = 0; t < U;) {
            int n = U - t >= 3 ? 3 : U - t, step = n == 1 ? 8 : 4, r = r0;
            float *yt = y + (size_t)t * ldy;
            const int8_t *xt = xq + (size_t)t * K;
            for (; r + step <= r1; r += step) {
                const int8_t *w = wq + (size_t)r * K;
                if (n == 3) q8_43(yt + r, ldy, w, ws + r, xt, xs + t, K);
                else if (n == 2) q8_42(yt + r, ldy, w, ws + r, xt, xs + t, K);
                else q8_81(yt + r, ldy, w, ws + r, xt, xs + t, K);
            }
            for (; r < r1; r++) {
                const int8_t *w = wq + (size_t)r * K;
                if (n == 3) q8_13(yt + r, ldy, w, ws + r, xt, xs + t, K);
                else if (n == 2) q8_12(yt + r, ldy, w, ws + r, xt, xs + t, K);
                else q8_11(yt + r, ldy, w, ws + r, xt, xs + t, K);
            }
            t += n;
        }
    }
}

/* ------------------------------------------------------- AVX-512 VNNI */

#define SD_VNNI __attribute__((target("avx512f,avx512bw,avx512vnni")))

/* vpdpbusd multiplies unsigned by signed bytes: feed x_q + 128 (x_q with
 * its sign bit flipped) and subtract 128 * rowsum(w_q) afterwards. */
SD_VNNI static inline __m512i ldx_u8(const int8_t *p, __mmask64 m)
{
    return _mm512_xor_si512(_mm512_maskz_loadu_epi8(m, p), _mm512_maskz_set1_epi8(m, (char)0x80));
}

/* R rows x U tokens; R * U accumulators in registers. */
SD_VNNI __attribute__((always_inline)) static inline void vnni_ru(float *y, int ldy, const int8_t *wq, const float *ws,
                                                                  const int32_t *wsum, const int8_t *xq,
                                                                  const float *xs, int K, const int R, const int U)
{
    __m512i acc[8][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; r++)
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) acc[r][u] = _mm512_setzero_si512();
    for (int k = 0; k < K; k += 64) {
        __mmask64 m = K - k >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << (K - k)) - 1);
        __m512i xv[4];
#pragma GCC unroll 4
        for (int u = 0; u < U; u++) xv[u] = ldx_u8(xq + (size_t)u * K + k, m);
#pragma GCC unroll 8
        for (int r = 0; r < R; r++) {
            _mm_prefetch((const char *)(wq + (size_t)(2 * R + r) * K + k), _MM_HINT_T0);
            __m512i wv = _mm512_maskz_loadu_epi8(m, wq + (size_t)r * K + k);
#pragma GCC unroll 4
            for (int u = 0; u < U; u++) acc[r][u] = _mm512_dpbusd_epi32(acc[r][u], xv[u], wv);
        }
    }
#pragma GCC unroll 4
    for (int u = 0; u < U; u++)
#pragma GCC unroll 8
        for (int r = 0; r < R; r++)
            y[(size_t)u * ldy + r] = q8_out(_mm512_reduce_add_epi32(acc[r][u]) - 128 * wsum[r], ws[r], xs[u]);
}

#define VNNI_ROWS(RR, UU)                                                                                              \
    do {                                                                                                               \
        for (; r + RR <= R; r += RR)                                                                                   \
            vnni_ru(y + (size_t)t * ldy + r, ldy, wq + (size_t)r * K, ws + r, wsum + r, xq + (size_t)t * K, xs + t, K, \
                    RR, UU);                                                                                           \
        for (; r < R; r++)                                                                                             \
            vnni_ru(y + (size_t)t * ldy + r, ldy, wq + (size_t)r * K, ws + r, wsum + r, xq + (size_t)t * K, xs + t, K, \
                    1, UU);                                                                                            \
    } while (0)

SD_VNNI static void tile_vnni_block(float *y, int ldy, const int8_t *wq, const float *ws, const int32_t *wsum,
                                    const int8_t *xq, const float *xs, int K, int R, int U)
{
    for (int t = 0; t < U;) {
        int n = U - t, r = 0;
        if (n >= 4) {
            VNNI_ROWS(4, 4);
            t += 4;
        } else if (n == 3) {
            VNNI_ROWS(6, 3);
            t += 3;
        } else if (n == 2) {
            VNNI_ROWS(8, 2);
            t += 2;
        } else {
            VNNI_ROWS(8, 1);
            t += 1;
        }
    }
}
#undef VNNI_ROWS

/* Rows in blocks of 24 (a multiple of every tile height above): a span's
 * token groups take the block's weights from L1 / L2 after the first group,
 * so a verify pass streams the weights from memory once, not once a group. */
SD_VNNI static void tile_vnni(float *y, int ldy, const int8_t *wq, const float *ws, const int32_t *wsum,
                              const int8_t *xq, const float *xs, int K, int R, int U)
{
    if (U <= 4) {
        tile_vnni_block(y, ldy, wq, ws, wsum, xq, xs, K, R, U);
        return;
    }
    for (int r0 = 0; r0 < R; r0 += 24) {
        int rb = R - r0 < 24 ? R - r0 : 24;
        tile_vnni_block(y + r0, ldy, wq + (size_t)r0 * K, ws + r0, wsum + r0, xq, xs, K, rb, U);
    }
}

/* ------------------------------------------------------------ AMX-INT8 */

typedef struct q8_out_ctx {
    float *y;
    int ldy;
    const float *ws, *xs;
} q8_out_ctx;

static void emit_q8(void *ctx, const int32_t *acc, int r0, int rows, int t0, int nt)
{
    const q8_out_ctx *o = ctx;
    for (int n = 0; n < nt; n++)
        for (int m = 0; m < rows; m++)
            o->y[(size_t)(t0 + n) * o->ldy + r0 + m] = q8_out(acc[m * 16 + n], o->ws[r0 + m], o->xs[t0 + n]);
}

/* Spans: 64 weight rows x 16 tokens per pass over the weights (cpu_amx.h);
 * the sums are exact, so the output bits are every other path's. */
static void tile_amx(float *y, int ldy, const int8_t *wq, const float *ws, const int8_t *xp, const float *xs, int K,
                     int R, int U)
{
    q8_out_ctx o = {y, ldy, ws, xs};
    sd_amx_tile_s8(wq, xp, K, R, U, emit_q8, &o);
}

bool sd_q8_wants_packed(int K, int U) { return U > 1 && q8_path() == 3 && sd_amx_fits_s8(K); }

void sd_q8_pack(int8_t *dst, const int8_t *xq, int K, int U) { sd_amx_pack_s8(dst, xq, K, K, U); }

void sd_q8_tile(float *y, int ldy, const int8_t *wq, const float *ws, const int32_t *wsum, const int8_t *xq,
                const int8_t *xp, const float *xs, int K, int R, int U)
{
    if (xp && sd_q8_wants_packed(K, U)) {
        tile_amx(y, ldy, wq, ws, xp, xs, K, R, U);
        return;
    }
    switch (q8_path()) {
    case 3:
    case 2: tile_vnni(y, ldy, wq, ws, wsum, xq, xs, K, R, U); break;
    case 1: tile_avx2(y, ldy, wq, ws, wsum, xq, xs, K, R, U); break;
    default: tile_scalar(y, ldy, wq, ws, wsum, xq, xs, K, R, U); break;
    }
}
