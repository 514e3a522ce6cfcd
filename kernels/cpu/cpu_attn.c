/* cpu_attn.c — attention over the paged KV cache (see cpu_attn.h): one
 * query row (sd_attn_row) or the queries of a KV-head group block by block
 * (sd_attn_group), on a scalar reference path, AVX2 and AVX-512. Every
 * score is the canonical dot of cpu_simd.h and the softmax and PV sums run
 * in position order, so a row's result never depends on its group. */
#include "cpu_attn.h"

#include <immintrin.h>
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "backend.h"
#include "cpu_simd.h"

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
        if (sd_isa_avx2) widen_avx2(d, src, w);
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

static void attn_row_scalar(float *out, const float *q, const sd_kv_rows *k, const sd_kv_rows *v, const int32_t *blocks,
                            int bs, int n, int hd, float scale, int bf16, float *sc)
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

/* Eight accumulators -> their eight hsum1 values, in order: a transposed
 * tree that performs, lane by lane, hsum1's additions (the same bits). */
SD_AVX2 __attribute__((always_inline)) static inline __m256 hsum8x(__m256 y0, __m256 y1, __m256 y2, __m256 y3,
                                                                   __m256 y4, __m256 y5, __m256 y6, __m256 y7)
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

/* Scores of eight positions at once (hd a multiple of 8): eight chains,
 * each the canonical dot1_f32 sequence (one accumulator, chunks in order,
 * hsum1 — through hsum8x — and no tail), so the same bits as scores4's. */
SD_AVX2 __attribute__((always_inline)) static inline void scores8(float *sc, const float *q, const float *kb, size_t rs,
                                                                  int hd, float scale)
{
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    for (int d = 0; d < hd; d += 8) {
        __m256 qv = _mm256_loadu_ps(q + d);
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(kb + d), qv, a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(kb + rs + d), qv, a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(kb + 2 * rs + d), qv, a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(kb + 3 * rs + d), qv, a3);
        a4 = _mm256_fmadd_ps(_mm256_loadu_ps(kb + 4 * rs + d), qv, a4);
        a5 = _mm256_fmadd_ps(_mm256_loadu_ps(kb + 5 * rs + d), qv, a5);
        a6 = _mm256_fmadd_ps(_mm256_loadu_ps(kb + 6 * rs + d), qv, a6);
        a7 = _mm256_fmadd_ps(_mm256_loadu_ps(kb + 7 * rs + d), qv, a7);
    }
    _mm256_storeu_ps(sc, _mm256_mul_ps(hsum8x(a0, a1, a2, a3, a4, a5, a6, a7), _mm256_set1_ps(scale)));
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

/* Scores of positions kb[0 .. m) (rs floats apart) for one query: eight,
 * then four at a time, then one by one; every score the same sequence. */
SD_AVX2 static void scores_avx2(float *sc, const float *q, const float *kb, size_t rs, int m, int hd, float scale)
{
    int i = 0;
    if (hd % 8 == 0)
        for (; i + 8 <= m; i += 8) scores8(sc + i, q, kb + i * rs, rs, hd, scale);
    for (; i + 4 <= m; i += 4)
        scores4(sc + i, q, kb + i * rs, kb + (i + 1) * rs, kb + (i + 2) * rs, kb + (i + 3) * rs, hd, scale);
    for (; i < m; i++) sc[i] = dot1_f32(kb + i * rs, q, hd) * scale;
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
SD_AVX2 static void attn_pv_avx2(float *out, const float *w, const sd_kv_rows *v, const int32_t *blocks, int bs, int n,
                                 int hd)
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
        scores_avx2(sc + j, q, kb, rs, m, hd, scale);
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
        /* named accumulators: as an array GCC kept them in memory, each FMA a load and a store, and the
         * chains ran at the store-to-load latency (AVX2 PV was half of the attention time) */
        float *o = acc + d0;
        __m256 a0 = _mm256_loadu_ps(o), a1 = _mm256_loadu_ps(o + 8), a2 = _mm256_loadu_ps(o + 16),
               a3 = _mm256_loadu_ps(o + 24), a4 = _mm256_loadu_ps(o + 32), a5 = _mm256_loadu_ps(o + 40),
               a6 = _mm256_loadu_ps(o + 48), a7 = _mm256_loadu_ps(o + 56);
        for (int i = 0; i < m; i++) {
            __m256 pv = _mm256_broadcast_ss(w + i);
            const float *r = vr + i * rs + d0;
            a0 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r), a0);
            a1 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r + 8), a1);
            a2 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r + 16), a2);
            a3 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r + 24), a3);
            a4 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r + 32), a4);
            a5 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r + 40), a5);
            a6 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r + 48), a6);
            a7 = _mm256_fmadd_ps(pv, _mm256_loadu_ps(r + 56), a7);
        }
        _mm256_storeu_ps(o, a0), _mm256_storeu_ps(o + 8, a1), _mm256_storeu_ps(o + 16, a2);
        _mm256_storeu_ps(o + 24, a3), _mm256_storeu_ps(o + 32, a4), _mm256_storeu_ps(o + 40, a5);
        _mm256_storeu_ps(o + 48, a6), _mm256_storeu_ps(o + 56, a7);
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
        for (int q = 0; q < nq; q++)
            if (j < qs[q].n)
                scores_avx2(sc + (size_t)q * nmax + j, qs[q].q, kb, rs, qs[q].n - j < m ? qs[q].n - j : m, hd, scale);
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
                pv_rows_avx2(acc + (size_t)q * hd, sc + (size_t)q * nmax + j, vb, rs, qs[q].n - j < m ? qs[q].n - j : m,
                             hd);
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
    return _mm256_add_ps(_mm512_castps512_ps256(a), _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(a), 1)));
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
    __m256 r = hsum8x(fold16(a0), fold16(a1), fold16(a2), fold16(a3), fold16(a4), fold16(a5), fold16(a6), fold16(a7));
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
static inline const void *kv_at(const void *p, size_t i, int b16) { return (const char *)p + i * (b16 ? 2 : 4); }

/* acc layout per query: for each 64-wide group of hd, [even C chunks | odd C chunks]. */
SD_AVX512_INLINE void pv_block(float *acc, const float *w, const void *vb, size_t stride, int m, int hd, const int b16)
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
SD_AVX512_INLINE void pv_rows(float *acc, const float *sc, size_t nmax, const sd_attn_query *qs, int nq, int j0, int m,
                              const void *vb, size_t st, int hd, const int b16)
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
SD_AVX512_INLINE void group_rows(float *sc, float *acc, size_t nmax, const sd_attn_query *qs, int nq, int j0, int m,
                                 const void *rows, size_t st, int hd, float scale, const int b16, const int pv)
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
        group_rows(sc, NULL, nmax, qs, nq, j0, m, kv_at(k->base, (size_t)blocks[b] * bs * st, b16), st, hd, scale, b16,
                   0);
    }
    for (int i = 0; i < nq; i++) {
        float *s = sc + (size_t)i * nmax;
        sums[i] = softmax_avx2(s, qs[i].n);
        attn_weights_avx2(s, qs[i].n, 1.0f / sums[i], bf16);
    }
    for (size_t x = 0; x < (size_t)nq * 2 * hd; x++) acc[x] = 0.0f;
    for (int b = 0, j0 = 0; j0 < nmax; b++, j0 += bs) {
        int m = nmax - j0 < bs ? nmax - j0 : bs;
        group_rows(sc, acc, nmax, qs, nq, j0, m, kv_at(v->base, (size_t)blocks[b] * bs * st, b16), st, hd, scale, b16,
                   1);
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
    if (sd_isa_avx512 && hd % 16 == 0 && block_size % 2 == 0) {
        sd_attn_query one = {q, out, n};
        attn_group_512(&one, 1, k, v, blocks, block_size, hd, scale, bf16, scratch);
    } else if (sd_isa_avx2) {
        attn_row_avx2(out, q, k, v, blocks, block_size, n, hd, scale, bf16, scratch);
    } else {
        attn_row_scalar(out, q, k, v, blocks, block_size, n, hd, scale, bf16, scratch);
    }
}

size_t sd_attn_scratch_floats(int nq, int max_n, int hd) { return (size_t)nq * ((size_t)max_n + 2 * (size_t)hd + 1); }

void sd_attn_group(const sd_attn_query *qs, int nq, const sd_kv_rows *k, const sd_kv_rows *v, const int32_t *blocks,
                   int block_size, int hd, float scale, int bf16, float *scratch)
{
    if (sd_isa_avx512 && hd % 16 == 0 && block_size % 2 == 0) {
        attn_group_512(qs, nq, k, v, blocks, block_size, hd, scale, bf16, scratch);
        return;
    }
    if (sd_isa_avx2 && nq > 1) {
        attn_group_avx2(qs, nq, k, v, blocks, block_size, hd, scale, bf16, scratch);
        return;
    }
    for (int i = 0; i < nq; i++)
        sd_attn_row(qs[i].out, qs[i].q, k, v, blocks, block_size, qs[i].n, hd, scale, bf16, scratch);
}
