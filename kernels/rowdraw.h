/* rowdraw.h — the arithmetic of a sampled row, shared by the host sampler
 * (common/sample/sampler.c), the CPU backend's row draw and the CUDA one:
 * the softmax weight of a logit, min-p's keep rule, a token's place in the
 * sorted order, and the row draw's argument types.
 *
 * The weight is one scalar formula — a degree-6 polynomial of exp on a
 * range reduced by ln 2 in two parts, each step one IEEE operation (fused
 * where it says fma) — so that the sampler's AVX2 loop, its scalar loop and
 * a GPU thread compute the same bits, and a draw on the device is the
 * host's draw. Within 2 ulp of expf over the range where it is positive.
 *
 * Compiled as C and as CUDA. Thread-safe: pure functions. */
#ifndef SD_ROWDRAW_H
#define SD_ROWDRAW_H

#include <math.h>
#include <stdint.h>
#include <string.h>

#include "exact.h" /* SD_HD */

/* A token and its probability: an entry of a sparse distribution. */
typedef struct sd_tokprob {
    int32_t token;
    float prob;
} sd_tokprob;

#ifdef __CUDA_ARCH__
#define SD_RD_FMA(a, b, c) __fmaf_rn(a, b, c)
#define SD_RD_MUL(a, b) __fmul_rn(a, b)
#define SD_RD_ADD(a, b) __fadd_rn(a, b)
#define SD_RD_DIV(a, b) __fdiv_rn(a, b)
#define SD_RD_SUB(a, b) __fsub_rn(a, b)
#define SD_RD_RINT(a) rintf(a)
#else
#define SD_RD_FMA(a, b, c) __builtin_fmaf(a, b, c)
#define SD_RD_MUL(a, b) ((a) * (b))
#define SD_RD_ADD(a, b) ((a) + (b))
#define SD_RD_DIV(a, b) ((a) / (b))
#define SD_RD_SUB(a, b) ((a) - (b))
#define SD_RD_RINT(a) __builtin_rintf(a)
#endif

/* exp(a) for a not NaN: 0 below -87.3, the polynomial on [-87.3, 88]
 * (kernels/cpu/cpu_simd.h exp8 is this formula eight lanes at a time). */
SD_HD float sd_rd_exp(float a)
{
    if (a < -87.3f) return 0.0f;
    float x = a > 88.0f ? 88.0f : a;
    float n = SD_RD_RINT(SD_RD_MUL(x, 1.44269504088896341f));
    float r = SD_RD_FMA(-n, 0.693359375f, x);
    r = SD_RD_FMA(-n, -2.12194440e-4f, r);
    float p = 1.9875691500e-4f;
    p = SD_RD_FMA(p, r, 1.3981999507e-3f);
    p = SD_RD_FMA(p, r, 8.3334519073e-3f);
    p = SD_RD_FMA(p, r, 4.1665795894e-2f);
    p = SD_RD_FMA(p, r, 1.6666665459e-1f);
    p = SD_RD_FMA(p, r, 5.0000001201e-1f);
    p = SD_RD_ADD(SD_RD_FMA(p, SD_RD_MUL(r, r), r), 1.0f);
    uint32_t eb = (uint32_t)((int32_t)n + 127) << 23;
    float s;
    memcpy(&s, &eb, sizeof s);
    return SD_RD_MUL(p, s);
}

/* The softmax numerator exp((x - mx) / temp) of logit x in a row whose
 * largest logit is mx (sd_exp_weights' w); 0 for a NaN. */
SD_HD float sd_rd_exp_weight(float x, float mx, float temp)
{
    float a = SD_RD_DIV(SD_RD_SUB(x, mx), temp);
    return a == a ? sd_rd_exp(a) : 0.0f;
}

/* The kept weight of logit x whose numerator is w (sd_keep_weights): 1 for
 * the maximum; 0 for NaN and -inf logits, weights not > 0 and weights below
 * floor (min-p); else w. */
SD_HD float sd_rd_keep(float x, float mx, float w, float floor)
{
    if (x == mx) return 1.0f;
    return x != -(float)INFINITY && x == x && w > 0.0f && w >= floor ? w : 0.0f;
}

/* A probability's place in the sampler's order — probability descending,
 * id ascending — as a key that sorts ascending (p > 0). */
SD_HD uint64_t sd_rd_key(float p, int32_t id)
{
    uint32_t b;
    memcpy(&b, &p, sizeof b);
    return (uint64_t)(~b) << 32 | (uint32_t)id;
}

SD_HD int32_t sd_rd_key_id(uint64_t key) { return (int32_t)(uint32_t)key; }

/* The logits processors of a row as edits of single logits, applied in
 * list order after the allowed-token mask (common/sample/sampler.c builds
 * them: min_tokens' bans, then logit_bias, then the repetition penalty, then
 * presence and frequency). A list holds each op's entries together, in that
 * order; the repetition and penalty entries name distinct tokens. */
enum {
    SD_EDIT_BAN = 0,  /* x = -inf */
    SD_EDIT_BIAS = 1, /* x += v */
    SD_EDIT_REP = 2,  /* HF repetition penalty v: x > 0 ? x / v : x * v */
    SD_EDIT_SUB = 3,  /* x -= v (OpenAI presence + frequency, v computed by the host) */
};

typedef struct sd_logit_edit {
    int32_t token;
    int32_t op;
    float v;
} sd_logit_edit;

SD_HD float sd_rd_edit(float x, int32_t op, float v)
{
    switch (op) {
    case SD_EDIT_BAN: return -(float)INFINITY;
    case SD_EDIT_BIAS: return SD_RD_ADD(x, v);
    case SD_EDIT_REP: return x > 0.0f ? SD_RD_DIV(x, v) : SD_RD_MUL(x, v);
    default: return SD_RD_SUB(x, v);
    }
}

/* Whether token t's bit is set in an allowed-token mask (32 tokens a word). */
SD_HD int sd_rd_allowed(const uint32_t *bits, int32_t t) { return (int)((bits[t >> 5] >> (t & 31)) & 1u); }

/* The most tokens a row draw sorts at once (a slice of the walk): the CUDA
 * kernel's shared-memory keys, and the CPU backend's. */
#define SD_DRAW_CAP 2048

/* One row of a row draw (sd_backend_ops.draw_rows): the filtered
 * distribution p of the row's logits — masked and edited first (its logits
 * processors) — at temperature > 0 with top-k, top-p and min-p, as
 * common/sample/sampler.c defines it. */
typedef struct sd_draw_row {
    float temperature;          /* > 0 */
    float min_p;                /* 0 = off */
    double u;                   /* the draw's uniform number in [0, 1) */
    int32_t token;              /* p(token) is reported (-1: none) */
    int32_t nq;                 /* 0: draw from p; else the residual draw after a rejected draft */
    const sd_tokprob *q;        /* [nq] the draft's distribution (host memory) */
    const uint32_t *allow;      /* NULL, or [(vocab + 31) / 32]: tokens whose bit is clear get -inf */
    const sd_logit_edit *edits; /* [n_edits] then applied to the row (host memory) */
    int32_t n_edits;
    int32_t top_k; /* 0 = off */
    float top_p;   /* (0, 1); 0 or 1 = off */
} sd_draw_row;

/* What a row draw reports: the token drawn (sd_sampler_draw, or
 * sd_sampler_residual with q) and p(row.token) (sd_sampler_prob; 0 for a
 * token outside the vocabulary or none). A row with no token of positive
 * probability (every logit -inf or NaN once processed) is the one-hot
 * distribution of its argmax, as the verifier falls back on the host: the
 * token is the first logit that is not NaN, prob 1 for it and 0 for any
 * other; both -1 when every logit is NaN. */
typedef struct sd_draw_out {
    int32_t token;
    float prob;
} sd_draw_out;

#endif
