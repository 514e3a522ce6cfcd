/* test_cpu_kernels.c — the CPU kernels against plain references, on every
 * SIMD path this machine has.
 *
 * - bf16 tiles (vdpbf16ps): a span of U tokens gives each output the bits of
 *   the one-token kernel, for every U and row count (batch invariance).
 * - AMX tiles (where the CPU has them): the same, across groups of 16 tokens
 *   and partial row blocks, and close to the exact dot product.
 * - Attention: sd_attn_group (queries sharing a KV head, block by block) is
 *   bit-identical to sd_attn_row per query, a bf16 cache of bf16 values gives
 *   the f32 cache's results bit for bit, and both match a double
 *   precision softmax-attention over a shuffled block table; on the scalar,
 *   AVX2 and AVX-512 paths, head sizes that take each of them.
 * - Q8: the integer sums are exact, so every path (AMX-INT8 spans included)
 *   and tile shape equals the scalar formula bit for bit; the quantised product stays close to the
 *   f32 one; quantisation itself (scales, row sums, zero rows).
 * - argmax: first maximum, NaNs ignored, on every path; softmax weights
 *   (sampling) within 4e-7 of exp(). */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "backend_open.h"
#include "cpu_amx.h"
#include "cpu_attn.h"
#include "cpu_dot.h"
#include "cpu_elem.h"
#include "cpu_q8.h"
#include "testutil.h"

static uint64_t g_rng = 0x9e3779b97f4a7c15ull;

static float frand(void)
{
    g_rng ^= g_rng << 13;
    g_rng ^= g_rng >> 7;
    g_rng ^= g_rng << 17;
    return (float)((g_rng >> 11) * (1.0 / 9007199254740992.0)) * 2.0f - 1.0f;
}

static uint16_t bf16_bits(float f)
{
    union {
        float f;
        uint32_t u;
    } v = {.f = sd_round_bf16(f)};
    return (uint16_t)(v.u >> 16);
}

/* ------------------------------------------------------------- AMX tiles */

START_TEST(amx_tiles_batch_invariant)
{
    if (!sd_amx_available()) {
        fprintf(stderr, "no AMX-BF16 on this CPU (or not permitted): AMX tiles not tested\n");
        return;
    }
    const int Ks[] = {32, 384, 1024}, Rs[] = {5, 37, 133};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++)
        for (size_t ri = 0; ri < sizeof Rs / sizeof Rs[0]; ri++) {
            int K = Ks[ki], R = Rs[ri], U = 20;
            uint16_t *w = malloc((size_t)R * K * 2), *x = malloc((size_t)U * K * 2);
            uint16_t *xp = malloc(sd_amx_packed_len(K, U) * 2);
            float *y = malloc((size_t)U * R * 4), *y1 = malloc((size_t)R * 4);
            for (int i = 0; i < R * K; i++) w[i] = bf16_bits(frand());
            for (int i = 0; i < U * K; i++) x[i] = bf16_bits(frand());
            for (int u = 1; u <= U; u += (u < 8 ? 1 : 5)) {
                sd_amx_pack(xp, x, K, K, u);
                sd_amx_tile(y, R, w, xp, K, R, u);
                for (int t = 0; t < u; t++) {
                    sd_amx_tile(y1, R, w, x + (size_t)t * K, K, R, 1); /* one token: its row is its packing */
                    for (int r = 0; r < R; r++) {
                        ck_assert_msg(memcmp(&y[(size_t)t * R + r], &y1[r], 4) == 0,
                                      "K %d R %d span %d: token %d row %d differs from the one-token tile", K, R, u, t,
                                      r);
                        double ref = 0, mag = 0;
                        for (int k = 0; k < K; k++) {
                            double p =
                                (double)sd_bf16_to_f32(w[(size_t)r * K + k]) * sd_bf16_to_f32(x[(size_t)t * K + k]);
                            ref += p;
                            mag += fabs(p);
                        }
                        ck_assert_msg(fabs(y1[r] - ref) <= 1e-5 * mag + 1e-6, "K %d R %d token %d row %d: %g vs %g", K,
                                      R, t, r, y1[r], ref);
                    }
                }
            }
            free(w), free(x), free(xp), free(y), free(y1);
        }
}
END_TEST

/* ------------------------------------------------- AVX2 / scalar tiles */

/* The f32-accumulating tiles (AVX2 4x3 / 4x2 tiles, the 8-row kernel, the
 * scalar fallback): every token of every span bit-identical to the
 * one-token kernel, at every instruction-set level (a machine keeps its
 * level; the scalar path does not fuse multiply-adds, so levels differ in the
 * last bits) — rows not a multiple of 4 or 16, K with a tail. */
START_TEST(tiles_batch_invariant_all_levels)
{
    const int Ks[] = {32, 70, 384};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int K = Ks[ki], R = 37, U = 16;
        uint16_t *wb = malloc((size_t)R * K * 2);
        float *wf = malloc((size_t)R * K * 4), *x = malloc((size_t)U * K * 4);
        float *y = malloc((size_t)U * R * 4), *y1 = malloc((size_t)R * 4);
        for (int i = 0; i < R * K; i++) wf[i] = frand(), wb[i] = bf16_bits(frand());
        for (int i = 0; i < U * K; i++) x[i] = frand();
        for (int level = 0; level <= 2; level++) {
            if (sd_cpu_isa_set_level(level) != level) continue;
            for (int bf = 0; bf < 2; bf++)
                for (int u = 1; u <= U; u++) {
                    if (bf) sd_dot_tile_bf16(y, R, wb, x, K, K, R, u);
                    else sd_dot_tile_f32(y, R, wf, x, K, K, R, u);
                    for (int t = 0; t < u; t++) {
                        if (bf) sd_dot_rows_bf16(y1, wb, x + (size_t)t * K, K, R);
                        else sd_dot_rows_f32(y1, wf, x + (size_t)t * K, K, R);
                        ck_assert_msg(memcmp(&y[(size_t)t * R], y1, (size_t)R * 4) == 0,
                                      "level %d %s K %d span %d: token %d differs from the one-token kernel", level,
                                      bf ? "bf16" : "f32", K, u, t);
                    }
                }
        }
        free(wb), free(wf), free(x), free(y), free(y1);
    }
    sd_cpu_isa_set_level(SD_CPU_LEVEL_MAX);
}
END_TEST

/* ------------------------------------------------------------ bf16 tiles */

START_TEST(bf16_tiles_batch_invariant)
{
    if (!sd_cpu_has_bf16dot()) {
        fprintf(stderr, "no AVX-512 BF16 on this CPU: vdpbf16ps tiles not tested\n");
        return;
    }
    const int Ks[] = {32, 70, 384};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        int K = Ks[ki], R = 37, U = 16;
        uint16_t *w = malloc((size_t)R * K * 2), *x = malloc((size_t)U * K * 2);
        float *y = malloc((size_t)U * R * 4), *y1 = malloc((size_t)R * 4);
        for (int i = 0; i < R * K; i++) w[i] = bf16_bits(frand());
        for (int i = 0; i < U * K; i++) x[i] = bf16_bits(frand());
        for (int u = 1; u <= U; u++) {
            sd_dot_tile_bf16x(y, R, w, x, K, K, R, u);
            for (int t = 0; t < u; t++) {
                sd_dot_tile_bf16x(y1, R, w, x + (size_t)t * K, K, K, R, 1);
                for (int r = 0; r < R; r++)
                    ck_assert_msg(memcmp(&y[(size_t)t * R + r], &y1[r], 4) == 0,
                                  "K %d, span %d: token %d row %d differs from the one-token kernel", K, u, t, r);
            }
            /* and close to the exact dot product */
            for (int r = 0; r < R; r++) {
                double ref = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    double a = sd_bf16_to_f32(w[(size_t)r * K + k]), b = sd_bf16_to_f32(x[k]);
                    ref += a * b;
                    mag += fabs(a * b);
                }
                ck_assert_msg(fabs(y[r] - ref) <= 1e-5 * mag + 1e-6, "K %d row %d: %g vs %g", K, r, y[r], ref);
            }
        }
        free(w);
        free(x);
        free(y);
        free(y1);
    }
}
END_TEST

/* ------------------------------------------------------------- attention */

/* Double-precision reference for one query over positions 0..n-1. */
static void attn_ref(double *out, const float *q, const float *k, const float *v, size_t stride, const int32_t *bt,
                     int bs, int n, int hd, float scale)
{
    double *s = malloc((size_t)n * sizeof *s), mx = -INFINITY, sum = 0;
    for (int j = 0; j < n; j++) {
        const float *kr = k + ((size_t)bt[j / bs] * bs + j % bs) * stride;
        double d = 0;
        for (int i = 0; i < hd; i++) d += (double)q[i] * kr[i];
        s[j] = d * scale;
        if (s[j] > mx) mx = s[j];
    }
    for (int j = 0; j < n; j++) sum += s[j] = exp(s[j] - mx);
    for (int i = 0; i < hd; i++) out[i] = 0;
    for (int j = 0; j < n; j++) {
        const float *vr = v + ((size_t)bt[j / bs] * bs + j % bs) * stride;
        for (int i = 0; i < hd; i++) out[i] += s[j] / sum * vr[i];
    }
    free(s);
}

/* An f32 copy of x as bf16 bits (x holds bf16 values: exact). */
static uint16_t *bf16_copy(const float *x, size_t n)
{
    uint16_t *h = malloc(n * sizeof *h);
    for (size_t i = 0; i < n; i++) {
        union {
            float f;
            uint32_t u;
        } c = {.f = x[i]};
        h[i] = (uint16_t)(c.u >> 16);
    }
    return h;
}

static void attention_case(int level, int hd, int bf16)
{
    int got = sd_cpu_isa_set_level(level);
    if (got != level) return; /* the CPU lacks this path */
    const int bs = 16, nblk = 9, kvh = 2, nq = 7;
    size_t stride = (size_t)kvh * hd, slots = (size_t)nblk * bs;
    float *k = malloc(slots * stride * 4), *v = malloc(slots * stride * 4);
    for (size_t i = 0; i < slots * stride; i++) {
        k[i] = frand(), v[i] = frand();
        if (bf16) k[i] = sd_round_bf16(k[i]), v[i] = sd_round_bf16(v[i]);
    }
    int32_t bt[9] = {4, 0, 8, 2, 7, 1, 6, 3, 5}; /* shuffled block table */
    float *q = malloc((size_t)nq * hd * 4), *out_g = malloc((size_t)nq * hd * 4), *out_r = malloc((size_t)hd * 4);
    double *ref = malloc((size_t)hd * sizeof *ref);
    size_t scratch_n = sd_attn_scratch_floats(nq, nblk * bs, hd);
    float *scratch = malloc(scratch_n * 4);
    sd_attn_query qs[7];
    const int ns[7] = {1, 5, 16, 17, 33, 100, 144};
    for (int i = 0; i < nq; i++) {
        for (int d = 0; d < hd; d++) q[i * hd + d] = bf16 ? sd_round_bf16(frand()) : frand();
        qs[i] = (sd_attn_query){q + i * hd, out_g + (size_t)i * hd, ns[i]};
    }
    float scale = 1.0f / sqrtf((float)hd);
    const float *kg = k + hd, *vg = v + hd; /* KV head 1 */
    sd_kv_rows kr = {kg, stride, 0}, vr = {vg, stride, 0};
    sd_attn_group(qs, nq, &kr, &vr, bt, bs, hd, scale, bf16, scratch);
    for (int i = 0; i < nq; i++) {
        sd_attn_row(out_r, q + i * hd, &kr, &vr, bt, bs, ns[i], hd, scale, bf16, scratch);
        ck_assert_msg(memcmp(out_r, out_g + (size_t)i * hd, (size_t)hd * 4) == 0,
                      "level %d hd %d bf16 %d: query %d (n %d) differs between group and row", level, hd, bf16, i,
                      ns[i]);
        attn_ref(ref, q + i * hd, kg, vg, stride, bt, bs, ns[i], hd, scale);
        double tol = bf16 ? 2e-2 : 2e-5;
        for (int d = 0; d < hd; d++)
            ck_assert_msg(fabs(out_r[d] - ref[d]) <= tol * (1.0 + fabs(ref[d])),
                          "level %d hd %d bf16 %d query %d dim %d: %g vs reference %g", level, hd, bf16, i, d, out_r[d],
                          ref[d]);
    }
    if (bf16) { /* the same K/V in a bf16 cache: bit for bit the f32 cache's results, row and group */
        uint16_t *kh = bf16_copy(k, slots * stride), *vh = bf16_copy(v, slots * stride);
        sd_kv_rows kb = {kh + hd, stride, 1}, vb = {vh + hd, stride, 1};
        float *out_b = malloc((size_t)nq * hd * 4);
        sd_attn_query qb[7];
        for (int i = 0; i < nq; i++) qb[i] = (sd_attn_query){q + i * hd, out_b + (size_t)i * hd, ns[i]};
        sd_attn_group(qb, nq, &kb, &vb, bt, bs, hd, scale, bf16, scratch);
        ck_assert_msg(memcmp(out_b, out_g, (size_t)nq * hd * 4) == 0, "level %d hd %d: bf16 cache (group) != f32",
                      level, hd);
        for (int i = 0; i < nq; i++) {
            sd_attn_row(out_r, q + i * hd, &kb, &vb, bt, bs, ns[i], hd, scale, bf16, scratch);
            ck_assert_msg(memcmp(out_r, out_g + (size_t)i * hd, (size_t)hd * 4) == 0,
                          "level %d hd %d: bf16 cache (row, query %d) != f32", level, hd, i);
        }
        free(kh);
        free(vh);
        free(out_b);
    }
    free(k);
    free(v);
    free(q);
    free(out_g);
    free(out_r);
    free(ref);
    free(scratch);
}

START_TEST(attention_paths_match_reference)
{
    /* 36: the AVX2 PV's 8-wide and scalar tails; 512: a bf16 cache widened in chunks of 8 of a block's 16 rows */
    const int hds[] = {64, 128, 48, 40, 36, 512};
    for (int level = 0; level <= 2; level++)
        for (size_t h = 0; h < sizeof hds / sizeof hds[0]; h++)
            for (int bf16 = 0; bf16 <= 1; bf16++) attention_case(level, hds[h], bf16);
    sd_cpu_isa_set_level(SD_CPU_LEVEL_MAX);
}
END_TEST

/* ------------------------------------------------------------------- Q8 */

START_TEST(q8_quantize_rows)
{
    float w[3 * 5] = {0.5f, -1.0f, 0.25f, 0.0f, 0.75f, /* max 1 */
                      0,    0,     0,     0,    0,     /* zero row */
                      2.0f, 4.0f,  -3.0f, 1.0f, 0.1f};
    int8_t q[15];
    float sc[3];
    int32_t sum[3];
    sd_q8_quantize_rows(w, 3, 5, q, sc, sum);
    ck_assert_float_eq_tol(sc[0], 1.0f / 127.0f, 1e-9f);
    ck_assert_int_eq(q[1], -127);
    ck_assert_int_eq(q[0], 64); /* rint(63.5) = 64 (ties to even) */
    ck_assert_int_eq(sum[0], 64 - 127 + 32 + 0 + 95);
    ck_assert_float_eq(sc[1], 1.0f);
    for (int i = 5; i < 10; i++) ck_assert_int_eq(q[i], 0);
    ck_assert_int_eq(sum[1], 0);
    ck_assert_int_eq(q[11], 127);
    ck_assert_float_eq_tol(sc[2], 4.0f / 127.0f, 1e-9f);
}
END_TEST

START_TEST(q8_paths_exact_and_close)
{
    const int Ks[] = {1, 31, 64, 100, 256, 1000};
    for (size_t ki = 0; ki < sizeof Ks / sizeof Ks[0]; ki++) {
        /* 77 rows: a 64-row AMX band and a short block; 18 tokens: two AMX token groups */
        enum { R = 77, U = 18 };
        int K = Ks[ki];
        float *w = malloc((size_t)R * K * 4), *x = malloc((size_t)U * K * 4);
        for (int i = 0; i < R * K; i++) w[i] = frand();
        for (int i = 0; i < U * K; i++) x[i] = frand() * 3.0f;
        int8_t *wq = malloc((size_t)R * K), *xq = malloc((size_t)U * K), *xp = malloc((size_t)U * K);
        float ws[R], xs[U], y[U * R], ref[U * R];
        int32_t wsum[R];
        sd_q8_quantize_rows(w, R, K, wq, ws, wsum);
        sd_q8_set_path(0);
        sd_q8_quantize_x(x, U, K, K, xq, xs);
        /* the formula of cpu_q8.h, spelled out */
        for (int t = 0; t < U; t++)
            for (int r = 0; r < R; r++) {
                int32_t acc = 0;
                for (int k = 0; k < K; k++) acc += (int32_t)wq[(size_t)r * K + k] * xq[(size_t)t * K + k];
                ref[t * R + r] = ((float)acc * ws[r]) * xs[t];
            }
        for (int level = 0; level <= 3; level++) {
            if (sd_q8_set_path(level) != level) continue;
            int8_t *xq2 = malloc((size_t)U * K);
            float xs2[U];
            sd_q8_quantize_x(x, U, K, K, xq2, xs2);
            ck_assert_msg(memcmp(xq, xq2, (size_t)U * K) == 0 && memcmp(xs, xs2, sizeof xs) == 0,
                          "path %d K %d: activation quantisation differs from the scalar one", level, K);
            free(xq2);
            for (int u = 1; u <= U; u++) {
                const int8_t *packed = sd_q8_wants_packed(K, u) ? (sd_q8_pack(xp, xq, K, u), xp) : NULL;
                if (level == 3 && u > 1 && K % 64 == 0) ck_assert_msg(packed, "K %d span %d: AMX not used", K, u);
                for (int pass = 0; pass < 2; pass++) /* all rows at once, then 5 at a time */
                    for (int r0 = 0, chunk = pass ? 5 : R; r0 < R; r0 += chunk) {
                        int rn = R - r0 < chunk ? R - r0 : chunk;
                        memset(y, 0xff, sizeof y);
                        sd_q8_tile(y + r0, R, wq + (size_t)r0 * K, ws + r0, wsum + r0, xq, packed, xs, K, rn, u);
                        for (int t = 0; t < u; t++)
                            for (int r = r0; r < r0 + rn; r++)
                                ck_assert_msg(memcmp(&y[t * R + r], &ref[t * R + r], 4) == 0,
                                              "path %d K %d span %d: token %d row %d: %g vs %g", level, K, u, t, r,
                                              y[t * R + r], ref[t * R + r]);
                    }
            }
        }
        /* close to the f32 product: error of two 8-bit roundings */
        for (int t = 0; t < U; t++)
            for (int r = 0; r < R; r++) {
                double exact = 0, mag = 0;
                for (int k = 0; k < K; k++) {
                    exact += (double)w[(size_t)r * K + k] * x[(size_t)t * K + k];
                    mag += fabs((double)w[(size_t)r * K + k] * x[(size_t)t * K + k]);
                }
                ck_assert_msg(fabs(ref[t * R + r] - exact) <= 0.02 * mag + 1e-6, "K %d: %g vs f32 %g (sum |wx| %g)", K,
                              ref[t * R + r], exact, mag);
            }
        free(w);
        free(x);
        free(wq);
        free(xq);
        free(xp);
    }
    sd_q8_set_path(SD_CPU_LEVEL_MAX);
}
END_TEST

/* --------------------------------------------------------- exp weights */

START_TEST(exp_weights_accuracy)
{
    enum { N = 4003 };
    float x[N], w[N];
    for (int level = 0; level <= 2; level++) {
        if (sd_cpu_isa_set_level(level) != level) continue;
        for (int i = 0; i < N; i++) x[i] = -100.0f * (float)i / N + 3.0f; /* 3 .. -97 */
        x[17] = NAN;
        x[18] = -INFINITY;
        sd_exp_weights(x, N, 3.0f, 0.7f, w);
        size_t bad = 0;
        for (int i = 0; i < N; i++) {
            if (i == 17 || i == 18) continue;
            float af = (x[i] - 3.0f) / 0.7f; /* the float argument, as a float32 softmax has it */
            double a = af, ref = exp(a);
            if (a > -87.0 ? fabs(w[i] - ref) > 4e-7 * ref : !(w[i] >= 0.0f && w[i] < 2e-38f)) bad++;
        }
        ck_assert_msg(bad == 0, "level %d: %zu weights off", level, bad);
        ck_assert_float_eq(w[17], 0.0f);
        ck_assert_float_eq(w[18], 0.0f);
        ck_assert_float_eq_tol(w[0], 1.0f, 1e-7f);
    }
    sd_cpu_isa_set_level(SD_CPU_LEVEL_MAX);
}
END_TEST

/* ---------------------------------------------------------------- argmax */

static int argmax_ref(const float *x, int n)
{
    int best = -1;
    for (int i = 0; i < n; i++)
        if (!isnan(x[i]) && (best < 0 || x[i] > x[best])) best = i;
    return best;
}

START_TEST(argmax_first_max_nan_ignored)
{
    float x[1003];
    for (int level = 0; level <= 2; level++) {
        if (sd_cpu_isa_set_level(level) != level) continue;
        for (int trial = 0; trial < 200; trial++) {
            int n = 1 + trial * 5;
            for (int i = 0; i < n; i++) x[i] = (float)(int)(frand() * 20.0f); /* many ties */
            for (int i = trial % 7; i < n; i += 7 + trial % 5) x[i] = NAN;
            if (trial % 11 == 0) x[n - 1] = 1e9f; /* max in the tail */
            if (trial % 13 == 0) x[0] = NAN;
            ck_assert_msg(sd_argmax_f32(x, n) == argmax_ref(x, n), "level %d n %d: %d vs %d", level, n,
                          sd_argmax_f32(x, n), argmax_ref(x, n));
        }
        for (int i = 0; i < 40; i++) x[i] = NAN;
        ck_assert_int_eq(sd_argmax_f32(x, 40), -1);
        for (int i = 0; i < 40; i++) x[i] = -INFINITY;
        ck_assert_int_eq(sd_argmax_f32(x, 40), 0);
    }
    sd_cpu_isa_set_level(SD_CPU_LEVEL_MAX);
}
END_TEST

/* A matmul group the backend cannot compute (int8 and f32 weights in one
 * group) is an error the forward pass reads back (take_error), not an
 * abort: the process lives on, and the next pass starts clean. */
START_TEST(backend_errors_are_returned)
{
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(1, &be, NULL, 0), SD_OK);
    ck_assert_ptr_nonnull(be->ops->take_error);
    float w[4 * 8], x[8], y0[4], y1[4];
    for (int i = 0; i < 32; i++) w[i] = (float)(i % 7) - 3.0f;
    for (int i = 0; i < 8; i++) x[i] = 0.5f * (float)i;
    sd_tensor t = {.name = "w", .dtype = SD_DTYPE_F32, .ndim = 2, .shape = {4, 8}, .data = w, .nbytes = sizeof w};
    sd_weight wq, wf;
    char err[256];
    ck_assert_int_eq(be->ops->upload(be, &t, &wq, err, sizeof err), SD_OK);
    ck_assert_int_eq(be->ops->upload(be, &t, &wf, err, sizeof err), SD_OK);
    ck_assert_int_eq(be->ops->quantize_q8(be, &wq, err, sizeof err), SD_OK);
    sd_mm_fused f = {.kind = SD_MM_SHARED, .n = 2, .w = {&wq, &wf}, .y = {y0, y1}};
    be->ops->matmul_fused(be, &f, x, 1, 0);
    ck_assert_int_eq(be->ops->take_error(be), SD_ERR_ARG);
    ck_assert_int_eq(be->ops->take_error(be), SD_OK); /* taken: cleared */
    be->ops->matmul(be, y1, x, &wf, NULL, 1, 0);
    ck_assert_int_eq(be->ops->take_error(be), SD_OK);
    be->ops->release(be, &wq);
    be->ops->release(be, &wf);
    be->ops->destroy(be);
}
END_TEST

/* sd_backend_open: a device it does not know is a status, no backend and a
 * message naming it (err may be NULL); "cpu" opens the CPU backend. */
START_TEST(backend_open_refuses_unknown_device)
{
    char err[256] = "";
    sd_backend *be = (sd_backend *)err; /* not NULL: the call clears it */
    ck_assert_int_eq(sd_backend_open("tpu", 1, &be, err, sizeof err), SD_ERR_UNSUPPORTED);
    ck_assert_ptr_null(be);
    ck_assert_msg(strstr(err, "tpu"), "%s", err);
    ck_assert_int_eq(sd_backend_open("cuda:x", 1, &be, NULL, 0), SD_ERR_UNSUPPORTED);
    ck_assert_ptr_null(be);
    ck_assert_int_eq(sd_backend_open("cpu", 1, &be, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_backend_cpu_threads(be), 1);
    sd_backend_free(be);
}
END_TEST

int main(void)
{
    sd_cpu_isa_init();
    Suite *s = suite_create("cpu_kernels");
    TCase *tc = tcase_create("kernels");
    tcase_add_test(tc, bf16_tiles_batch_invariant);
    tcase_add_test(tc, amx_tiles_batch_invariant);
    tcase_add_test(tc, tiles_batch_invariant_all_levels);
    tcase_add_test(tc, attention_paths_match_reference);
    tcase_add_test(tc, argmax_first_max_nan_ignored);
    tcase_add_test(tc, exp_weights_accuracy);
    tcase_add_test(tc, q8_quantize_rows);
    tcase_add_test(tc, q8_paths_exact_and_close);
    tcase_add_test(tc, backend_errors_are_returned);
    tcase_add_test(tc, backend_open_refuses_unknown_device);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
