/* cpu_dot.c — canonical-order dot products (see cpu_dot.h).
 *
 * The AVX2 kernels keep, for every output element, one 8-lane accumulator
 * fed the 8-element chunks of w and x in index order, reduce it with a fixed
 * tree (lanes l and l+4, then (0+2)+(1+3)) and add the scalar tail in order.
 * The scalar fallback emulates the same lane structure; it is the single path
 * on machines without AVX2+FMA. */
#include "cpu_dot.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backend.h"
#include "cpu_amx.h"

static bool g_avx2;
static bool g_bf16dot; /* AVX-512 BF16 dot products (vdpbf16ps) */
static bool g_avx512;  /* AVX-512F: 16-lane attention */
static bool g_amx;     /* AMX-BF16 tiles for bf16 matmuls (cpu_amx.h) */
static bool g_inited;

void sd_cpu_dot_init(void)
{
    if (g_inited) return;
    __builtin_cpu_init();
    g_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    g_avx512 = g_avx2 && __builtin_cpu_supports("avx512f");
    g_bf16dot = g_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    g_amx = g_bf16dot && sd_amx_available();
    g_inited = true;
}

int sd_cpu_dot_set_level(int level)
{
    g_inited = false;
    sd_cpu_dot_init();
    if (level < 3) g_amx = false;
    if (level < 2) g_avx512 = g_bf16dot = false;
    if (level < 1) g_avx2 = false;
    return g_amx ? 3 : g_avx512 ? 2 : g_avx2 ? 1 : 0;
}

const char *sd_cpu_dot_isa(void)
{
    sd_cpu_dot_init();
    return g_amx ? "amx-bf16" : g_bf16dot ? "avx512-bf16" : g_avx512 ? "avx512" : g_avx2 ? "avx2" : "scalar";
}

/* ---------------------------------------------------------------- scalar */

static float dot_scalar_f32(const float *w, const float *x, int K)
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

static float dot_scalar_bf16(const uint16_t *w, const float *x, int K)
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

#define SD_FMA(acc, wv, xp) acc = _mm256_fmadd_ps(wv, _mm256_loadu_ps(xp), acc)

/* One canonical dot product. */
#define SD_DOT1(NAME, WT, LOAD, TAIL)                                                             \
    SD_AVX2 __attribute__((always_inline)) static inline float NAME(const WT *w, const float *x,  \
                                                                    int K)                        \
    {                                                                                             \
        __m256 a = _mm256_setzero_ps();                                                           \
        int k = 0;                                                                                \
        for (; k + 8 <= K; k += 8) SD_FMA(a, LOAD(w + k), x + k);                                 \
        return TAIL(hsum1(a), w, x, k, K);                                                        \
    }

/* Eight weight rows x one token (decode): eight independent FMA chains. */
#define SD_ROWS8(NAME, WT, LOAD, TAIL)                                                            \
    SD_AVX2 static inline void NAME(float *y, const WT *w, const float *x, int K)                 \
    {                                                                                             \
        const WT *w0 = w, *w1 = w + K, *w2 = w + 2 * (size_t)K, *w3 = w + 3 * (size_t)K;          \
        const WT *w4 = w + 4 * (size_t)K, *w5 = w + 5 * (size_t)K, *w6 = w + 6 * (size_t)K;       \
        const WT *w7 = w + 7 * (size_t)K;                                                         \
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0,    \
               a7 = a0;                                                                           \
        int k = 0;                                                                                \
        for (; k + 8 <= K; k += 8) {                                                              \
            if (!(k % (64 / (int)sizeof(WT)))) /* one line of each of the next 8 rows per 64 bytes */ \
                for (int p = 8; p < 16; p++) _mm_prefetch((const char *)(w0 + p * (size_t)K + k), _MM_HINT_T0); \
            __m256 xv = _mm256_loadu_ps(x + k);                                                   \
            a0 = _mm256_fmadd_ps(LOAD(w0 + k), xv, a0);                                           \
            a1 = _mm256_fmadd_ps(LOAD(w1 + k), xv, a1);                                           \
            a2 = _mm256_fmadd_ps(LOAD(w2 + k), xv, a2);                                           \
            a3 = _mm256_fmadd_ps(LOAD(w3 + k), xv, a3);                                           \
            a4 = _mm256_fmadd_ps(LOAD(w4 + k), xv, a4);                                           \
            a5 = _mm256_fmadd_ps(LOAD(w5 + k), xv, a5);                                           \
            a6 = _mm256_fmadd_ps(LOAD(w6 + k), xv, a6);                                           \
            a7 = _mm256_fmadd_ps(LOAD(w7 + k), xv, a7);                                           \
        }                                                                                         \
        y[0] = TAIL(hsum1(a0), w0, x, k, K);                                                      \
        y[1] = TAIL(hsum1(a1), w1, x, k, K);                                                      \
        y[2] = TAIL(hsum1(a2), w2, x, k, K);                                                      \
        y[3] = TAIL(hsum1(a3), w3, x, k, K);                                                      \
        y[4] = TAIL(hsum1(a4), w4, x, k, K);                                                      \
        y[5] = TAIL(hsum1(a5), w5, x, k, K);                                                      \
        y[6] = TAIL(hsum1(a6), w6, x, k, K);                                                      \
        y[7] = TAIL(hsum1(a7), w7, x, k, K);                                                      \
    }

/* RR weight rows x UU tokens (RR * UU + UU + 1 <= 16 registers): the UU
 * token chunks stay in registers, each weight chunk is loaded (and
 * converted) once for all UU tokens. Spans of a few tokens (a verify pass)
 * cost about one weight read and UU times the FMAs, not UU passes. */
#define SD_TILE_RU(NAME, WT, LOAD, TAIL, RR, UU)                                                  \
    SD_AVX2 static inline void NAME(float *y, int ldy, const WT *w, const float *x, int ldx,      \
                                    int K)                                                        \
    {                                                                                             \
        __m256 a[RR][UU];                                                                         \
        _Pragma("GCC unroll 8") for (int i = 0; i < RR; i++)                                      \
            _Pragma("GCC unroll 8") for (int j = 0; j < UU; j++) a[i][j] = _mm256_setzero_ps();   \
        int k = 0;                                                                                \
        for (; k + 8 <= K; k += 8) {                                                              \
            __m256 xv[UU];                                                                        \
            _Pragma("GCC unroll 8") for (int j = 0; j < UU; j++)                                  \
                xv[j] = _mm256_loadu_ps(x + (size_t)j * ldx + k);                                 \
            _Pragma("GCC unroll 8") for (int i = 0; i < RR; i++) {                                \
                /* the next rows: short parallel streams defeat the hardware prefetcher */        \
                _mm_prefetch((const char *)(w + (size_t)(RR + i) * K + k), _MM_HINT_T0);          \
                __m256 wv = LOAD(w + (size_t)i * K + k);                                          \
                _Pragma("GCC unroll 8") for (int j = 0; j < UU; j++)                              \
                    a[i][j] = _mm256_fmadd_ps(wv, xv[j], a[i][j]);                                \
            }                                                                                     \
        }                                                                                         \
        _Pragma("GCC unroll 8") for (int i = 0; i < RR; i++)                                      \
            _Pragma("GCC unroll 8") for (int j = 0; j < UU; j++)                                  \
                y[(size_t)j * ldy + i] = TAIL(hsum1(a[i][j]), w + (size_t)i * K,                  \
                                              x + (size_t)j * ldx, k, K);                         \
    }

SD_TILE_RU(tile43_f32, float, _mm256_loadu_ps, tail_f32, 4, 3)
SD_TILE_RU(tile43_bf16, uint16_t, load_bf16, tail_bf16, 4, 3)
SD_TILE_RU(tile42_f32, float, _mm256_loadu_ps, tail_f32, 4, 2)
SD_TILE_RU(tile42_bf16, uint16_t, load_bf16, tail_bf16, 4, 2)

SD_DOT1(dot1_f32, float, _mm256_loadu_ps, tail_f32)
SD_DOT1(dot1_bf16, uint16_t, load_bf16, tail_bf16)
SD_ROWS8(rows8_f32, float, _mm256_loadu_ps, tail_f32)
SD_ROWS8(rows8_bf16, uint16_t, load_bf16, tail_bf16)

/* R rows x 1 token. */
#define SD_DOT_ROWS(NAME, WT, ROWS8, DOT1)                                                        \
    SD_AVX2 static void NAME(float *y, const WT *w, const float *x, int K, int R)                 \
    {                                                                                             \
        int r = 0;                                                                                \
        for (; r + 8 <= R; r += 8) ROWS8(y + r, w + (size_t)r * K, x, K);                         \
        for (; r < R; r++) y[r] = DOT1(w + (size_t)r * K, x, K);                                  \
    }

/* R rows x U tokens: y[t * ldy + r] = dot(w_r, x_t). Rows go in blocks of
 * 16 (their weights stay in L1 across tokens): 4x3 tiles for each group of
 * three tokens, a 4x2 tile for two left over, the 8-row kernel for one;
 * rows past a multiple of four one dot product at a time. */
#define SD_DOT_TILE(NAME, WT, T43, T42, ROWS8, DOT1)                                              \
    SD_AVX2 static void NAME(float *y, int ldy, const WT *w, const float *x, int ldx, int K,      \
                             int R, int U)                                                        \
    {                                                                                             \
        for (int r0 = 0; r0 < R; r0 += 16) {                                                      \
            int r1 = r0 + 16 < R ? r0 + 16 : R, t = 0;                                            \
            for (; t < U; ) {                                                                     \
                int n = U - t >= 3 ? 3 : U - t;                                                   \
                float *yt = y + (size_t)t * ldy;                                                  \
                const float *xt = x + (size_t)t * ldx;                                            \
                int r = r0;                                                                       \
                if (n == 1) {                                                                     \
                    for (; r + 8 <= r1; r += 8) ROWS8(yt + r, w + (size_t)r * K, xt, K);          \
                } else {                                                                          \
                    for (; r + 4 <= r1; r += 4) {                                                 \
                        if (n == 3) T43(yt + r, ldy, w + (size_t)r * K, xt, ldx, K);              \
                        else T42(yt + r, ldy, w + (size_t)r * K, xt, ldx, K);                     \
                    }                                                                             \
                }                                                                                 \
                for (; r < r1; r++)                                                               \
                    for (int j = 0; j < n; j++)                                                   \
                        yt[(size_t)j * ldy + r] = DOT1(w + (size_t)r * K, xt + (size_t)j * ldx, K); \
                t += n;                                                                           \
            }                                                                                     \
        }                                                                                         \
    }

SD_DOT_ROWS(rows_f32_avx2, float, rows8_f32, dot1_f32)
SD_DOT_ROWS(rows_bf16_avx2, uint16_t, rows8_bf16, dot1_bf16)
SD_DOT_TILE(tile_f32_avx2, float, tile43_f32, tile42_f32, rows8_f32, dot1_f32)
SD_DOT_TILE(tile_bf16_avx2, uint16_t, tile43_bf16, tile42_bf16, rows8_bf16, dot1_bf16)

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

void sd_dot_tile_f32(float *y, int ldy, const float *w, const float *x, int ldx, int K, int R, int U)
{
    if (g_avx2) {
        tile_f32_avx2(y, ldy, w, x, ldx, K, R, U);
        return;
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < U; t++)
            y[(size_t)t * ldy + r] = dot_scalar_f32(w + (size_t)r * K, x + (size_t)t * ldx, K);
}

void sd_dot_tile_bf16(float *y, int ldy, const uint16_t *w, const float *x, int ldx, int K, int R, int U)
{
    if (g_avx2) {
        tile_bf16_avx2(y, ldy, w, x, ldx, K, R, U);
        return;
    }
    for (int r = 0; r < R; r++)
        for (int t = 0; t < U; t++)
            y[(size_t)t * ldy + r] = dot_scalar_bf16(w + (size_t)r * K, x + (size_t)t * ldx, K);
}

float sd_dot_f32(const float *a, const float *b, int K)
{
    float r;
    sd_dot_rows_f32(&r, a, b, K, 1);
    return r;
}

/* ------------------------------------------------------------ attention */

/* K/V rows as f32 for the scalar and AVX2 paths (see sd_kv_rows): an f32
 * cache is read in place, a bf16 one widened into a buffer of KV_WIDE floats
 * a chunk of rows at a time (the AVX-512 path widens in registers:
 * kv_ld16). */
#define KV_WIDE (2 * SD_ATTN_BF16_MAX_HD)

static int kv_chunk_rows(const sd_kv_rows *s, int bs, int w)
{
    if (!s->bf16) return bs;
    int r = (KV_WIDE / w) & ~1;
    return r < bs ? r : bs;
}

/* Rows from position j on that one kv_f32 call covers: to the end of j's
 * block, at most ch, at most n - j. */
static inline int kv_span(int n, int j, int bs, int ch)
{
    int m = bs - j % bs;
    if (m > ch) m = ch;
    return m < n - j ? m : n - j;
}

SD_AVX2 static void widen_avx2(float *dst, const uint16_t *src, int n)
{
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        __m256i h = _mm256_cvtepu16_epi32(_mm_loadu_si128((const __m128i *)(src + i)));
        _mm256_storeu_ps(dst + i, _mm256_castsi256_ps(_mm256_slli_epi32(h, 16)));
    }
    for (; i < n; i++) dst[i] = sd_bf16_to_f32(src[i]);
}

/* Rows r0 .. r0+m of block `block`, columns c0 .. c0+w, as f32 rows *rs
 * floats apart (buf: room for m * w floats, used for a bf16 cache). */
static const float *kv_f32(const sd_kv_rows *s, int32_t block, int bs, int r0, int m, int c0, int w, float *buf,
                           size_t *rs)
{
    size_t off = ((size_t)block * bs + r0) * s->stride + (size_t)c0;
    if (!s->bf16) {
        *rs = s->stride;
        return (const float *)s->base + off;
    }
    const uint16_t *src = (const uint16_t *)s->base + off;
    for (int i = 0; i < m; i++, src += s->stride) {
        float *d = buf + (size_t)i * w;
        if (g_avx2) widen_avx2(d, src, w);
        else
            for (int c = 0; c < w; c++) d[c] = sd_bf16_to_f32(src[c]);
    }
    *rs = (size_t)w;
    return buf;
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

static void attn_row_scalar(float *out, const float *q, const sd_kv_rows *k, const sd_kv_rows *v,
                            const int32_t *blocks, int bs, int n, int hd, float scale, int bf16, float *sc)
{
    float buf[KV_WIDE];
    size_t rs;
    for (int j = 0; j < n; j++)
        sc[j] = dot_scalar_f32(q, kv_f32(k, blocks[j / bs], bs, j % bs, 1, 0, hd, buf, &rs), hd) * scale;
    float sum = softmax_inplace(sc, n), inv = 1.0f / sum;
    for (int d = 0; d < hd; d++) out[d] = 0.0f;
    for (int j = 0; j < n; j++) {
        const float *vr = kv_f32(v, blocks[j / bs], bs, j % bs, 1, 0, hd, buf, &rs);
        float p = bf16 ? sd_round_bf16(sc[j]) : sc[j] * inv;
        for (int d = 0; d < hd; d++) out[d] += p * vr[d];
    }
    if (bf16)
        for (int d = 0; d < hd; d++) out[d] = sd_round_bf16(out[d] / sum);
}

/* Scores of four positions at once: four independent chains, each the
 * canonical dot1_f32 sequence (one accumulator, chunks in order, hsum1,
 * tail), so a score never depends on how positions were grouped. */
SD_AVX2 static void scores4(float *sc, const float *q, const float *k0, const float *k1, const float *k2,
                            const float *k3, int hd, float scale)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int d = 0;
    for (; d + 8 <= hd; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(k0 + d), qv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(k1 + d), qv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(k2 + d), qv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(k3 + d), qv, a3);
    }
    sc[0] = tail_f32(hsum1(a0), k0, q, d, hd) * scale;
    sc[1] = tail_f32(hsum1(a1), k1, q, d, hd) * scale;
    sc[2] = tail_f32(hsum1(a2), k2, q, d, hd) * scale;
    sc[3] = tail_f32(hsum1(a3), k3, q, d, hd) * scale;
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
 * result depends only on its own input. */
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

/* Softmax weights in place: sc[j] = exp(sc[j] − max) (one exp8_nonpos per
 * 8 positions, the tail through a padded chunk), returning their sum in
 * the canonical order (8 lanes over chunks, hsum1, tail in order). */
SD_AVX2 static float softmax_avx2(float *sc, int n)
{
    __m256 m8 = _mm256_set1_ps(-INFINITY);
    int j = 0;
    for (; j + 8 <= n; j += 8) m8 = _mm256_max_ps(m8, _mm256_loadu_ps(sc + j));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m8), _mm256_extractf128_ps(m8, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    float mx = _mm_cvtss_f32(_mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 0x55)));
    for (; j < n; j++) mx = sc[j] > mx ? sc[j] : mx;
    __m256 mv = _mm256_set1_ps(mx), acc = _mm256_setzero_ps();
    for (j = 0; j + 8 <= n; j += 8) {
        __m256 e = exp8(_mm256_sub_ps(_mm256_loadu_ps(sc + j), mv));
        _mm256_storeu_ps(sc + j, e);
        acc = _mm256_add_ps(acc, e);
    }
    float sum = hsum1(acc);
    if (j < n) {
        float tail[8] = {0};
        for (int i = j; i < n; i++) tail[i - j] = sc[i] - mx;
        _mm256_storeu_ps(tail, exp8(_mm256_loadu_ps(tail)));
        for (int i = j; i < n; i++) {
            sc[i] = tail[i - j];
            sum += sc[i];
        }
    }
    return sum;
}

/* bf16 mode: out = bf16(out / sum), PyTorch's single normalisation at the end. */
SD_AVX2 static void attn_normalise_bf16(float *out, int hd, float sum)
{
    int d = 0;
    __m256 sv = _mm256_set1_ps(sum);
    for (; d + 8 <= hd; d += 8)
        _mm256_storeu_ps(out + d, _mm256_castsi256_ps(rne_bits(_mm256_div_ps(_mm256_loadu_ps(out + d), sv))));
    for (; d < hd; d++) out[d] = sd_round_bf16(out[d] / sum);
}

/* Turns softmax numerators into the weights PV uses: bf16(w) in bf16 mode
 * (normalised once at the end), else w * inv. */
SD_AVX2 static void attn_weights_avx2(float *sc, int n, float inv, int bf16)
{
    int j = 0;
    __m256 iv = _mm256_set1_ps(inv);
    for (; j + 8 <= n; j += 8) {
        __m256 w = _mm256_loadu_ps(sc + j);
        _mm256_storeu_ps(sc + j, bf16 ? _mm256_castsi256_ps(rne_bits(w)) : _mm256_mul_ps(w, iv));
    }
    for (; j < n; j++) sc[j] = bf16 ? sd_round_bf16(sc[j]) : sc[j] * inv;
}

/* out[hd] = sum_j w_j · v_j, ascending j, one FMA per element per j; up to
 * 64 accumulators stay in registers. Walks the block table (no division
 * per position). */
SD_AVX2 static void attn_pv_avx2(float *out, const float *w, const sd_kv_rows *v, const int32_t *blocks, int bs,
                                 int n, int hd)
{
    float buf[KV_WIDE];
    size_t rs;
    int d0 = 0, ch = kv_chunk_rows(v, bs, 64);
    for (; d0 + 64 <= hd; d0 += 64) {
        __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
        for (int j = 0, m; j < n; j += m) {
            m = kv_span(n, j, bs, ch);
            const float *vr = kv_f32(v, blocks[j / bs], bs, j % bs, m, d0, 64, buf, &rs);
            for (int i = 0; i < m; i++, vr += rs) {
                __m256 pv = _mm256_broadcast_ss(w + j + i);
                a0 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr), a0);
                a1 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 8), a1);
                a2 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 16), a2);
                a3 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 24), a3);
                a4 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 32), a4);
                a5 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 40), a5);
                a6 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 48), a6);
                a7 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(vr + 56), a7);
            }
        }
        float *o = out + d0;
        _mm256_storeu_ps(o, a0), _mm256_storeu_ps(o + 8, a1), _mm256_storeu_ps(o + 16, a2);
        _mm256_storeu_ps(o + 24, a3), _mm256_storeu_ps(o + 32, a4), _mm256_storeu_ps(o + 40, a5);
        _mm256_storeu_ps(o + 48, a6), _mm256_storeu_ps(o + 56, a7);
    }
    int hd8 = hd & ~7;
    for (; d0 < hd8; d0 += 8) {
        __m256 a = _mm256_setzero_ps();
        for (int j = 0, m; j < n; j += m) {
            m = kv_span(n, j, bs, ch);
            const float *vr = kv_f32(v, blocks[j / bs], bs, j % bs, m, d0, 8, buf, &rs);
            for (int i = 0; i < m; i++, vr += rs) a = _mm256_fmadd_ps(_mm256_set1_ps(w[j + i]), _mm256_loadu_ps(vr), a);
        }
        _mm256_storeu_ps(out + d0, a);
    }
    if (hd8 == hd) return;
    float a[8] = {0};
    for (int j = 0, m; j < n; j += m) {
        m = kv_span(n, j, bs, ch);
        const float *vr = kv_f32(v, blocks[j / bs], bs, j % bs, m, hd8, hd - hd8, buf, &rs);
        for (int i = 0; i < m; i++, vr += rs)
            for (int d = 0; d < hd - hd8; d++) a[d] = fmaf(w[j + i], vr[d], a[d]);
    }
    for (int d = hd8; d < hd; d++) out[d] = a[d - hd8];
}

SD_AVX2 static void attn_row_avx2(float *out, const float *q, const sd_kv_rows *k, const sd_kv_rows *v,
                                  const int32_t *blocks, int bs, int n, int hd, float scale, int bf16, float *sc)
{
    float buf[KV_WIDE];
    size_t rs;
    int ch = kv_chunk_rows(k, bs, hd);
    for (int j = 0, m; j < n; j += m) {
        m = kv_span(n, j, bs, ch);
        const float *kb = kv_f32(k, blocks[j / bs], bs, j % bs, m, 0, hd, buf, &rs);
        int i = 0;
        for (; i + 4 <= m; i += 4)
            scores4(sc + j + i, q, kb + i * rs, kb + (i + 1) * rs, kb + (i + 2) * rs, kb + (i + 3) * rs, hd, scale);
        for (; i < m; i++) sc[j + i] = dot1_f32(kb + i * rs, q, hd) * scale;
    }
    float sum = softmax_avx2(sc, n), inv = 1.0f / sum;
    attn_weights_avx2(sc, n, inv, bf16);
    attn_pv_avx2(out, sc, v, blocks, bs, n, hd);
    if (bf16) attn_normalise_bf16(out, hd, sum);
}

/* acc[hd] += sum_i w_i · v_i over m f32 rows (rs apart), ascending i: the
 * chains of attn_pv_avx2, kept in acc between calls. */
SD_AVX2 static void pv_rows_avx2(float *acc, const float *w, const float *vr, size_t rs, int m, int hd)
{
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) {
        __m256 a[8];
        for (int c = 0; c < 8; c++) a[c] = _mm256_loadu_ps(acc + d0 + 8 * c);
        for (int i = 0; i < m; i++) {
            __m256 pv = _mm256_broadcast_ss(w + i);
            const float *r = vr + i * rs + d0;
            for (int c = 0; c < 8; c++) a[c] = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r + 8 * c), a[c]);
        }
        for (int c = 0; c < 8; c++) _mm256_storeu_ps(acc + d0 + 8 * c, a[c]);
    }
    for (; d0 + 8 <= hd; d0 += 8) {
        __m256 a = _mm256_loadu_ps(acc + d0);
        for (int i = 0; i < m; i++) a = _mm256_fmadd_ps(_mm256_set1_ps(w[i]), _mm256_loadu_ps(vr + i * rs + d0), a);
        _mm256_storeu_ps(acc + d0, a);
    }
    for (; d0 < hd; d0++)
        for (int i = 0; i < m; i++) acc[d0] = fmaf(w[i], vr[i * rs + d0], acc[d0]);
}

/* Several queries over one KV head with AVX2, chunk by chunk of a block: a
 * bf16 chunk is widened once for every query (attn_row_avx2 widens it per
 * query). Each query's result is bit-identical to attn_row_avx2's. */
SD_AVX2 static void attn_group_avx2(const sd_attn_query *qs, int nq, const sd_kv_rows *k, const sd_kv_rows *v,
                                    const int32_t *blocks, int bs, int hd, float scale, int bf16, float *scratch)
{
    float buf[KV_WIDE];
    size_t rs;
    int nmax = 0, ch = kv_chunk_rows(k, bs, hd);
    for (int i = 0; i < nq; i++) nmax = qs[i].n > nmax ? qs[i].n : nmax;
    float *sc = scratch, *acc = scratch + (size_t)nq * nmax, *sums = acc + (size_t)nq * 2 * hd;
    for (int j = 0, m; j < nmax; j += m) {
        m = kv_span(nmax, j, bs, ch);
        const float *kb = kv_f32(k, blocks[j / bs], bs, j % bs, m, 0, hd, buf, &rs);
        for (int q = 0; q < nq; q++) {
            int mi = qs[q].n - j < m ? qs[q].n - j : m, i = 0;
            float *s = sc + (size_t)q * nmax + j;
            for (; i + 4 <= mi; i += 4)
                scores4(s + i, qs[q].q, kb + i * rs, kb + (i + 1) * rs, kb + (i + 2) * rs, kb + (i + 3) * rs, hd,
                        scale);
            for (; i < mi; i++) s[i] = dot1_f32(kb + i * rs, qs[q].q, hd) * scale;
        }
    }
    for (int q = 0; q < nq; q++) {
        float *s = sc + (size_t)q * nmax;
        sums[q] = softmax_avx2(s, qs[q].n);
        attn_weights_avx2(s, qs[q].n, 1.0f / sums[q], bf16);
    }
    for (size_t x = 0; x < (size_t)nq * hd; x++) acc[x] = 0.0f;
    for (int j = 0, m; j < nmax; j += m) {
        m = kv_span(nmax, j, bs, ch);
        const float *vb = kv_f32(v, blocks[j / bs], bs, j % bs, m, 0, hd, buf, &rs);
        for (int q = 0; q < nq; q++)
            if (j < qs[q].n)
                pv_rows_avx2(acc + (size_t)q * hd, sc + (size_t)q * nmax + j, vb, rs,
                             qs[q].n - j < m ? qs[q].n - j : m, hd);
    }
    for (int q = 0; q < nq; q++) {
        memcpy(qs[q].out, acc + (size_t)q * hd, (size_t)hd * sizeof *acc);
        if (bf16) attn_normalise_bf16(qs[q].out, hd, sums[q]);
    }
}

/* ------------------------------------------------ AVX-512 attention
 *
 * With AVX-512F a score is one 16-lane accumulator over 16-element chunks
 * of q and k in order, reduced by hsum1(lo256 + hi256); eight scores are
 * reduced together by a transposed tree that performs, lane by lane, the
 * same additions. PV keeps two accumulators per element, one for even and
 * one for odd positions (each in ascending order), added at the end. Both
 * orders depend only on the element, never on the batch. Used when hd is a
 * multiple of 16; the AVX2 path otherwise. */

#define SD_AVX512 __attribute__((target("avx512f,avx2,fma")))

SD_AVX512 static inline __m256 fold16(__m512 a)
{
    return _mm256_add_ps(_mm512_castps512_ps256(a),
                         _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
}

/* Eight folded accumulators -> their eight hsum1 values, in order. */
SD_AVX512 static inline __m256 hsum8x(__m256 y0, __m256 y1, __m256 y2, __m256 y3, __m256 y4, __m256 y5, __m256 y6,
                                      __m256 y7)
{
    __m256 v01 = _mm256_add_ps(_mm256_permute2f128_ps(y0, y1, 0x20), _mm256_permute2f128_ps(y0, y1, 0x31));
    __m256 v23 = _mm256_add_ps(_mm256_permute2f128_ps(y2, y3, 0x20), _mm256_permute2f128_ps(y2, y3, 0x31));
    __m256 v45 = _mm256_add_ps(_mm256_permute2f128_ps(y4, y5, 0x20), _mm256_permute2f128_ps(y4, y5, 0x31));
    __m256 v67 = _mm256_add_ps(_mm256_permute2f128_ps(y6, y7, 0x20), _mm256_permute2f128_ps(y6, y7, 0x31));
    __m256 h0 = _mm256_add_ps(_mm256_shuffle_ps(v01, v23, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(v01, v23, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 h1 = _mm256_add_ps(_mm256_shuffle_ps(v45, v67, _MM_SHUFFLE(1, 0, 1, 0)),
                              _mm256_shuffle_ps(v45, v67, _MM_SHUFFLE(3, 2, 3, 2)));
    __m256 r = _mm256_add_ps(_mm256_shuffle_ps(h0, h1, _MM_SHUFFLE(2, 0, 2, 0)),
                             _mm256_shuffle_ps(h0, h1, _MM_SHUFFLE(3, 1, 3, 1)));
    return _mm256_permutevar8x32_ps(r, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
}

/* 16 K/V elements from element i of p as f32: f32 loads, or bf16 widened
 * in registers (b16, a constant after inlining: one copy of each kernel per
 * element type). */
#define SD_AVX512_INLINE SD_AVX512 __attribute__((always_inline)) static inline
SD_AVX512_INLINE __m512 kv_ld16(const void *p, size_t i, const int b16)
{
    if (b16) {
        __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
        return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
    }
    return _mm512_loadu_ps((const float *)p + i);
}

SD_AVX512_INLINE void scores8_512(float *sc, const float *q, const void *kb, size_t stride, int hd, float scale,
                                  const int b16)
{
    __m512 a0 = _mm512_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 16) {
        __m512 qv = _mm512_loadu_ps(q + d);
        a0 = _mm512_fmadd_ps(kv_ld16(kb, d, b16), qv, a0);
        a1 = _mm512_fmadd_ps(kv_ld16(kb, stride + d, b16), qv, a1);
        a2 = _mm512_fmadd_ps(kv_ld16(kb, 2 * stride + d, b16), qv, a2);
        a3 = _mm512_fmadd_ps(kv_ld16(kb, 3 * stride + d, b16), qv, a3);
        a4 = _mm512_fmadd_ps(kv_ld16(kb, 4 * stride + d, b16), qv, a4);
        a5 = _mm512_fmadd_ps(kv_ld16(kb, 5 * stride + d, b16), qv, a5);
        a6 = _mm512_fmadd_ps(kv_ld16(kb, 6 * stride + d, b16), qv, a6);
        a7 = _mm512_fmadd_ps(kv_ld16(kb, 7 * stride + d, b16), qv, a7);
    }
    __m256 r = hsum8x(fold16(a0), fold16(a1), fold16(a2), fold16(a3), fold16(a4), fold16(a5), fold16(a6),
                      fold16(a7));
    _mm256_storeu_ps(sc, _mm256_mul_ps(r, _mm256_set1_ps(scale)));
}

SD_AVX512_INLINE float score1_512(const float *q, const void *k, int hd, float scale, const int b16)
{
    __m512 a = _mm512_setzero_ps();
    for (int d = 0; d < hd; d += 16) a = _mm512_fmadd_ps(kv_ld16(k, d, b16), _mm512_loadu_ps(q + d), a);
    return hsum1(fold16(a)) * scale;
}

/* PV of m positions starting at even j0 for one query: the even/odd
 * accumulators of C 16-wide chunks live in acc[0 .. 2*16*C) between calls.
 * vr: element d0 of the first position's V row. */
SD_AVX512_INLINE void pv_block_c(float *acc, const float *w, const void *vr, size_t stride, int m, const int C,
                                 const int b16)
{
    __m512 e[4], o[4];
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        e[c] = _mm512_loadu_ps(acc + 16 * c);
        o[c] = _mm512_loadu_ps(acc + 16 * (C + c));
    }
    int j = 0;
    size_t r = 0;
    for (; j + 2 <= m; j += 2, r += 2 * stride) {
        __m512 pe = _mm512_set1_ps(w[j]), po = _mm512_set1_ps(w[j + 1]);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) {
            e[c] = _mm512_fmadd_ps(pe, kv_ld16(vr, r + 16 * c, b16), e[c]);
            o[c] = _mm512_fmadd_ps(po, kv_ld16(vr, r + stride + 16 * c, b16), o[c]);
        }
    }
    if (j < m) {
        __m512 pe = _mm512_set1_ps(w[j]);
#pragma GCC unroll 4
        for (int c = 0; c < C; c++) e[c] = _mm512_fmadd_ps(pe, kv_ld16(vr, r + 16 * c, b16), e[c]);
    }
#pragma GCC unroll 4
    for (int c = 0; c < C; c++) {
        _mm512_storeu_ps(acc + 16 * c, e[c]);
        _mm512_storeu_ps(acc + 16 * (C + c), o[c]);
    }
}

/* Element i of a K/V array of element size 4 (f32) or 2 (b16). */
static inline const void *kv_at(const void *p, size_t i, int b16)
{
    return (const char *)p + i * (b16 ? 2 : 4);
}

/* acc layout per query: for each 64-wide group of hd, [even C chunks | odd C chunks]. */
SD_AVX512_INLINE void pv_block(float *acc, const float *w, const void *vb, size_t stride, int m, int hd,
                               const int b16)
{
    int d0 = 0;
    for (; d0 + 64 <= hd; d0 += 64) pv_block_c(acc + 2 * d0, w, kv_at(vb, d0, b16), stride, m, 4, b16);
    switch ((hd - d0) / 16) {
    case 3: pv_block_c(acc + 2 * d0, w, kv_at(vb, d0, b16), stride, m, 3, b16); break;
    case 2: pv_block_c(acc + 2 * d0, w, kv_at(vb, d0, b16), stride, m, 2, b16); break;
    case 1: pv_block_c(acc + 2 * d0, w, kv_at(vb, d0, b16), stride, m, 1, b16); break;
    default: break;
    }
}

/* Scores of the queries for positions j0 .. j0+m (m <= a block) from the K
 * rows kb, st elements apart; a query sees only its first n positions. */
SD_AVX512_INLINE void scores_rows(float *sc, size_t nmax, const sd_attn_query *qs, int nq, int j0, int m,
                                  const void *kb, size_t st, int hd, float scale, const int b16)
{
    for (int i = 0; i < nq; i++) {
        if (j0 >= qs[i].n) continue;
        int mi = qs[i].n - j0 < m ? qs[i].n - j0 : m, t = 0;
        float *s = sc + (size_t)i * nmax + j0;
        for (; t + 8 <= mi; t += 8) scores8_512(s + t, qs[i].q, kv_at(kb, t * st, b16), st, hd, scale, b16);
        for (; t < mi; t++) s[t] = score1_512(qs[i].q, kv_at(kb, t * st, b16), hd, scale, b16);
    }
}

/* PV of the queries for positions j0 .. j0+m (j0 even) from the V rows vb. */
SD_AVX512_INLINE void pv_rows(float *acc, const float *sc, size_t nmax, const sd_attn_query *qs, int nq, int j0,
                              int m, const void *vb, size_t st, int hd, const int b16)
{
    for (int i = 0; i < nq; i++) {
        if (j0 >= qs[i].n) continue;
        int mi = qs[i].n - j0 < m ? qs[i].n - j0 : m;
        pv_block(acc + (size_t)i * 2 * hd, sc + (size_t)i * nmax + j0, vb, st, mi, hd, b16);
    }
}

/* A group's bf16 K or V rows are widened to f32 once, ATTN_WIDE floats at a
 * time, and every query reads the f32 copy from L1: the same values in the
 * same order as widening in registers per query, so the same bits. */
#define ATTN_WIDE 4096

SD_AVX512_INLINE void widen_rows_512(float *dst, const uint16_t *src, size_t st, int m, int hd)
{
    for (int t = 0; t < m; t++)
        for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(dst + (size_t)t * hd + d, kv_ld16(src + t * st, d, 1));
}

/* Rows j0 .. j0+m of a block (rows, st apart) through scores_rows (pv = 0)
 * or pv_rows (pv = 1): in place for an f32 cache or a lone query, widened
 * once for a group over a bf16 cache. */
SD_AVX512_INLINE void group_rows(float *sc, float *acc, size_t nmax, const sd_attn_query *qs, int nq, int j0,
                                 int m, const void *rows, size_t st, int hd, float scale, const int b16,
                                 const int pv)
{
    if (!b16 || nq < 2) {
        if (pv) pv_rows(acc, sc, nmax, qs, nq, j0, m, rows, st, hd, b16);
        else scores_rows(sc, nmax, qs, nq, j0, m, rows, st, hd, scale, b16);
        return;
    }
    float wide[ATTN_WIDE] __attribute__((aligned(64)));
    int w = (ATTN_WIDE / hd) & ~1;
    for (int c = 0; c < m; c += w) {
        int mc = m - c < w ? m - c : w;
        widen_rows_512(wide, (const uint16_t *)rows + (size_t)c * st, st, mc, hd);
        if (pv) pv_rows(acc, sc, nmax, qs, nq, j0 + c, mc, wide, (size_t)hd, hd, 0);
        else scores_rows(sc, nmax, qs, nq, j0 + c, mc, wide, (size_t)hd, hd, scale, 0);
    }
}

/* Several queries over one KV head, block by block: a block's K (then V)
 * rows are read from memory once and reused from L1 by every query. Each
 * query's result is bit-identical to attn_row_avx512 for it alone. A bf16
 * cache is widened to f32 as it is read (group_rows). */
SD_AVX512_INLINE void attn_group_512_t(const sd_attn_query *qs, int nq, const sd_kv_rows *k, const sd_kv_rows *v,
                                       const int32_t *blocks, int bs, int hd, float scale, int bf16, float *scratch,
                                       const int b16)
{
    size_t st = k->stride;
    int nmax = 0;
    for (int i = 0; i < nq; i++) nmax = qs[i].n > nmax ? qs[i].n : nmax;
    float *sc = scratch, *acc = scratch + (size_t)nq * nmax, *sums = acc + (size_t)nq * 2 * hd;
    for (int b = 0, j0 = 0; j0 < nmax; b++, j0 += bs) {
        int m = nmax - j0 < bs ? nmax - j0 : bs;
        group_rows(sc, NULL, nmax, qs, nq, j0, m, kv_at(k->base, (size_t)blocks[b] * bs * st, b16), st, hd, scale,
                   b16, 0);
    }
    for (int i = 0; i < nq; i++) {
        float *s = sc + (size_t)i * nmax;
        sums[i] = softmax_avx2(s, qs[i].n);
        attn_weights_avx2(s, qs[i].n, 1.0f / sums[i], bf16);
    }
    for (size_t x = 0; x < (size_t)nq * 2 * hd; x++) acc[x] = 0.0f;
    for (int b = 0, j0 = 0; j0 < nmax; b++, j0 += bs) {
        int m = nmax - j0 < bs ? nmax - j0 : bs;
        group_rows(sc, acc, nmax, qs, nq, j0, m, kv_at(v->base, (size_t)blocks[b] * bs * st, b16), st, hd, scale,
                   b16, 1);
    }
    for (int i = 0; i < nq; i++) {
        const float *a = acc + (size_t)i * 2 * hd;
        float *out = qs[i].out;
        for (int d0 = 0; d0 < hd; d0 += 64) {
            int C = (hd - d0 < 64 ? hd - d0 : 64) / 16;
            for (int c = 0; c < C; c++)
                _mm512_storeu_ps(out + d0 + 16 * c, _mm512_add_ps(_mm512_loadu_ps(a + 2 * d0 + 16 * c),
                                                                  _mm512_loadu_ps(a + 2 * d0 + 16 * (C + c))));
        }
        if (bf16) attn_normalise_bf16(out, hd, sums[i]);
    }
}

SD_AVX512 static void attn_group_512(const sd_attn_query *qs, int nq, const sd_kv_rows *k, const sd_kv_rows *v,
                                     const int32_t *blocks, int bs, int hd, float scale, int bf16, float *scratch)
{
    if (k->bf16) attn_group_512_t(qs, nq, k, v, blocks, bs, hd, scale, bf16, scratch, 1);
    else attn_group_512_t(qs, nq, k, v, blocks, bs, hd, scale, bf16, scratch, 0);
}

void sd_attn_row(float *out, const float *q, const sd_kv_rows *k, const sd_kv_rows *v, const int32_t *blocks,
                 int block_size, int n, int hd, float scale, int bf16, float *scratch)
{
    if (g_avx512 && hd % 16 == 0 && block_size % 2 == 0) {
        sd_attn_query one = {q, out, n};
        attn_group_512(&one, 1, k, v, blocks, block_size, hd, scale, bf16, scratch);
    } else if (g_avx2) {
        attn_row_avx2(out, q, k, v, blocks, block_size, n, hd, scale, bf16, scratch);
    } else {
        attn_row_scalar(out, q, k, v, blocks, block_size, n, hd, scale, bf16, scratch);
    }
}

size_t sd_attn_scratch_floats(int nq, int max_n, int hd)
{
    return (size_t)nq * ((size_t)max_n + 2 * (size_t)hd + 1);
}

void sd_attn_group(const sd_attn_query *qs, int nq, const sd_kv_rows *k, const sd_kv_rows *v,
                   const int32_t *blocks, int block_size, int hd, float scale, int bf16, float *scratch)
{
    if (g_avx512 && hd % 16 == 0 && block_size % 2 == 0) {
        attn_group_512(qs, nq, k, v, blocks, block_size, hd, scale, bf16, scratch);
        return;
    }
    if (g_avx2 && nq > 1) {
        attn_group_avx2(qs, nq, k, v, blocks, block_size, hd, scale, bf16, scratch);
        return;
    }
    for (int i = 0; i < nq; i++)
        sd_attn_row(qs[i].out, qs[i].q, k, v, blocks, block_size, qs[i].n, hd, scale, bf16, scratch);
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
    __m256 s = _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
    __m128 v = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    __m128 h = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(h, _mm_shuffle_ps(h, h, 0x55)));
}

/* 8 weight rows x 1 token (decode): eight named accumulators, full chunks
 * then the zero-padded last one. */
#define BD_R8()                                                                                   \
    do {                                                                                          \
        __m512bh xv = LD(x);                                                                      \
        a0 = _mm512_dpbf16_ps(a0, LD(w), xv);                                                     \
        a1 = _mm512_dpbf16_ps(a1, LD(w + K), xv);                                                 \
        a2 = _mm512_dpbf16_ps(a2, LD(w + 2 * (size_t)K), xv);                                     \
        a3 = _mm512_dpbf16_ps(a3, LD(w + 3 * (size_t)K), xv);                                     \
        a4 = _mm512_dpbf16_ps(a4, LD(w + 4 * (size_t)K), xv);                                     \
        a5 = _mm512_dpbf16_ps(a5, LD(w + 5 * (size_t)K), xv);                                     \
        a6 = _mm512_dpbf16_ps(a6, LD(w + 6 * (size_t)K), xv);                                     \
        a7 = _mm512_dpbf16_ps(a7, LD(w + 7 * (size_t)K), xv);                                     \
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
#define BD_STEP(LD)                                                                               \
    do {                                                                                          \
        if (U <= 6) {                                                                             \
            __m512bh xv[8];                                                                       \
            _Pragma("GCC unroll 8") for (int u = 0; u < U; u++) xv[u] = LD(x + (size_t)u * ldx); \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) {                               \
                __m512bh wv = LD(w + (size_t)r * K);                                              \
                _Pragma("GCC unroll 8") for (int u = 0; u < U; u++)                              \
                    acc[r][u] = _mm512_dpbf16_ps(acc[r][u], wv, xv[u]);                           \
            }                                                                                     \
        } else {                                                                                  \
            __m512bh wv[8];                                                                       \
            _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) wv[r] = LD(w + (size_t)r * K);  \
            _Pragma("GCC unroll 8") for (int u = 0; u < U; u++) {                               \
                __m512bh xu = LD(x + (size_t)u * ldx);                                            \
                _Pragma("GCC unroll 8") for (int r = 0; r < R; r++)                              \
                    acc[r][u] = _mm512_dpbf16_ps(acc[r][u], wv[r], xu);                           \
            }                                                                                     \
        }                                                                                         \
    } while (0)

SD_BF16DOT __attribute__((always_inline)) static inline void bd_tile_ru(float *y, int ldy, const uint16_t *w,
                                                                        const uint16_t *x, int ldx, int K,
                                                                        const int R, const int U)
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
        _Pragma("GCC unroll 8") for (int r = 0; r < R; r++) _mm_prefetch((const char *)(w + (size_t)(2 * R + r) * K + k), _MM_HINT_T0);
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
#define BD_TILES(RR, UU)                                                                          \
    do {                                                                                          \
        for (; r + RR <= r1; r += RR) bd_tile_ru(y + r, ldy, w + (size_t)r * K, x, ldx, K, RR, UU); \
        for (; r < r1; r++) bd_tile_ru(y + r, ldy, w + (size_t)r * K, x, ldx, K, 1, UU);           \
    } while (0)

SD_BF16DOT static void bd_block(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, int r0,
                                int r1, int U)
{
    int r = r0;
    switch (U) {
    case 1: for (; r + 8 <= r1; r += 8) bd_rows8(y + r, w + (size_t)r * K, x, K);
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
SD_BF16DOT static void bd_tile(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, int R,
                               int U)
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

int sd_cpu_has_bf16dot(void)
{
    sd_cpu_dot_init();
    return g_bf16dot;
}

int sd_cpu_has_amx(void)
{
    sd_cpu_dot_init();
    return g_amx;
}

void sd_dot_tile_bf16x(float *y, int ldy, const uint16_t *w, const uint16_t *x, int ldx, int K, int R, int U)
{
    bd_tile(y, ldy, w, x, ldx, K, R, U);
}

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
        union { float f; uint32_t u; } v = {.f = sd_round_bf16(src[i])};
        dst[i] = (uint16_t)(v.u >> 16);
    }
}

void sd_round_bf16_n(float *p, size_t n)
{
    if (g_avx2) {
        round_avx2(p, n);
        return;
    }
    for (size_t i = 0; i < n; i++) p[i] = sd_round_bf16(p[i]);
}

void sd_f32_to_bf16_n(uint16_t *dst, const float *src, size_t n)
{
    if (g_avx2) {
        to_bf16_avx2(dst, src, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        union { float f; uint32_t u; } v = {.f = sd_round_bf16(src[i])};
        dst[i] = (uint16_t)(v.u >> 16);
    }
}

/* ------------------------------------------------------ elementwise rows */

SD_AVX2 static inline __m256 rne8(__m256 v)
{
    return _mm256_castsi256_ps(rne_bits(v));
}

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
    if (g_avx2) {
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
    if (g_avx2) add_avx2(y, x, n, bf16);
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
    if (g_avx2) scale_row_avx2(y, x, g, inv, D, bf16);
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
    sd_cpu_dot_init();
    if (g_avx2) return exp_sum_avx2(x, n, shift);
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
    if (g_avx2) rope_avx2(v, c, s, half, bf16);
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
    sd_cpu_dot_init();
    if (g_avx2) return argmax_avx2(x, n);
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
    sd_cpu_dot_init();
    if (g_avx2) {
        exp_weights_avx2(x, n, mx, temp, w);
        return;
    }
    for (int i = 0; i < n; i++) {
        float a = (x[i] - mx) / temp;
        w[i] = a == a ? expf(a) : 0.0f;
    }
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
    for (; i < n; i++)
        w[i] = x[i] == mx ? 1.0f : x[i] != -INFINITY && w[i] > 0.0f && w[i] >= floor ? w[i] : 0.0f;
}

void sd_keep_weights(const float *x, int n, float mx, float floor, float *w)
{
    sd_cpu_dot_init();
    if (g_avx2) {
        keep_weights_avx2(x, n, mx, floor, w);
        return;
    }
    for (int i = 0; i < n; i++) /* NaN x: every comparison false */
        w[i] = x[i] == mx ? 1.0f : x[i] != -INFINITY && x[i] == x[i] && w[i] > 0.0f && w[i] >= floor ? w[i] : 0.0f;
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
    sd_cpu_dot_init();
    if (g_avx2) return div_to_f32_avx2(w, n, d, p);
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
    sd_cpu_dot_init();
    if (g_avx2) return band_ids_avx2(p, n, lo, hi, ids);
    int m = 0;
    for (int i = 0; i < n; i++)
        if (p[i] >= lo && p[i] < hi && p[i] > 0.0f) ids[m++] = i;
    return m;
}
