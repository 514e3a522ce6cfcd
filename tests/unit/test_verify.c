/* test_verify.c — Check suite for common/spec/verify.c (the speculative accept rules).
 *
 * greedy / match: the committed tokens must equal, token for token, what
 * plain (non-speculative) decoding emits with the same settings, seed and
 * positions; the reference here is sd_sampler_sample called one position at
 * a time with the history growing by the committed tokens.
 * rejection: checked statistically. Over N = 100,000 trials (seed = trial
 * index) the first committed token must follow p_0 (the request's filtered
 * target distribution of row 0), and the second committed token, given that
 * the first draft was accepted, must follow p_1 (the rows' logits do not
 * depend on earlier tokens, so p_1 is the exact conditional). Pearson
 * chi-square, bins with expected count < 5 merged, compared with the 0.999
 * quantile (significance 0.001) for the degrees of freedom. The same test is
 * shown to discriminate: two deliberately wrong rules (an argmax proposal fed
 * to the rejection rule; no residual resampling) must exceed the threshold.
 * Every statistic is deterministic (fixed seeds). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "proposer.h"
#include "testutil.h"
#include "verify.h"

/* ---- shared helpers ------------------------------------------------------- */

static sd_sampling sampled(float temperature)
{
    sd_sampling s = sd_sampling_default();
    s.temperature = temperature;
    return s;
}

static sd_verify_in base_in(float *logits, int vocab, int k, const int32_t *draft, const sd_sampling *s,
                            sd_verify_mode mode)
{
    sd_verify_in in;
    memset(&in, 0, sizeof in);
    in.logits = logits;
    in.vocab = vocab;
    in.k = k;
    in.draft = draft;
    in.sampling = s;
    in.mode = mode;
    return in;
}

/* The token plain decoding emits at output position out_pos + i from row i
 * of rows (V, vocab) (not modified): sd_sampler_sample on a copy with history
 * output[0..n_output) + prev[0..i). */
static int32_t plain_at(const sd_sampling *s, const float *rows, int vocab, int i, const int32_t *prompt,
                        size_t n_prompt, const int32_t *output, size_t n_output, const int32_t *prev, uint64_t out_pos)
{
    int32_t hist[128];
    float row[64];
    ck_assert(n_output + (size_t)i <= 128 && vocab <= 64);
    if (n_output > 0) memcpy(hist, output, n_output * sizeof *hist);
    if (i > 0) memcpy(hist + n_output, prev, (size_t)i * sizeof *hist);
    memcpy(row, rows + (size_t)i * (size_t)vocab, (size_t)vocab * sizeof *row);
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(vocab, &sp, NULL, 0), SD_OK);
    int32_t x =
        sd_sampler_sample(sp, s, row, vocab, prompt, n_prompt, hist, n_output + (size_t)i, out_pos + (uint64_t)i);
    sd_sampler_free(sp);
    return x;
}

/* Logits processors over a vocabulary of at least 10: logit_bias on four
 * tokens, allowed_token_ids leaving out 6, 8, 9 (and everything from 12),
 * min_tokens 3 holding back tokens 0 and 4 (as EOS and a stop id). */
static const int32_t PROC_BIAS_IDS[4] = {1, 3, 5, 7};
static const float PROC_BIAS_VALUES[4] = {1.5f, -2.0f, 0.75f, 3.0f};
static const int32_t PROC_ALLOWED[9] = {0, 1, 2, 3, 4, 5, 7, 10, 11};
static const int32_t PROC_BAN[2] = {0, 4};

static void with_processors(sd_sampling *s, uint32_t min_tokens)
{
    s->bias_ids = PROC_BIAS_IDS;
    s->bias_values = PROC_BIAS_VALUES;
    s->n_bias = 4;
    s->allowed = PROC_ALLOWED;
    s->n_allowed = 9;
    s->min_tokens = min_tokens;
    s->early_ban = PROC_BAN;
    s->n_early_ban = 2;
}

/* ---- greedy ---------------------------------------------------------------- */

enum { GV = 8 };

/* Row argmaxes: 2, 5, 1, 7. */
static const float GROWS[4][GV] = {
    {0.1f, 0.2f, 3.0f, -1.0f, 0.5f, 0.0f, 1.0f, 2.9f},
    {1.0f, 0.0f, -2.0f, 0.5f, 0.0f, 4.0f, 3.5f, 0.1f},
    {0.0f, 2.0f, 1.9f, 0.0f, -1.0f, 0.0f, 0.0f, 0.0f},
    {0.3f, 0.2f, 0.1f, 0.0f, 0.0f, 0.0f, 0.0f, 1.5f},
};

static int run_greedy(const int32_t *draft, int k, int32_t *out)
{
    float rows[4 * GV];
    memcpy(rows, GROWS, sizeof rows);
    sd_sampling s = sd_sampling_default();
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(GV, &v, NULL, 0), SD_OK);
    sd_verify_in in = base_in(rows, GV, k, draft, &s, SD_VERIFY_GREEDY);
    int n = sd_verify(v, &in, out);
    sd_verifier_free(v);
    return n;
}

START_TEST(test_greedy_all_accept_bonus)
{
    int32_t d[3] = {2, 5, 1}, out[4];
    ck_assert_int_eq(run_greedy(d, 3, out), 4);
    ck_assert_int_eq(out[0], 2);
    ck_assert_int_eq(out[1], 5);
    ck_assert_int_eq(out[2], 1);
    ck_assert_int_eq(out[3], 7);
}
END_TEST

START_TEST(test_greedy_first_mismatch)
{
    int32_t d[3] = {2, 6, 1}, out[4];
    ck_assert_int_eq(run_greedy(d, 3, out), 2);
    ck_assert_int_eq(out[0], 2);
    ck_assert_int_eq(out[1], 5);
    int32_t d0[3] = {7, 5, 1};
    ck_assert_int_eq(run_greedy(d0, 3, out), 1);
    ck_assert_int_eq(out[0], 2);
}
END_TEST

/* Tokens instead of logits (the rows' argmax computed where the logits
 * are): the same verdicts; refused for sampled rows, with penalties, or
 * with both or neither of logits and argmax. */
START_TEST(test_greedy_from_argmax)
{
    const int32_t amax[4] = {2, 5, 1, 7};
    const int32_t d[3] = {2, 5, 1}, d1[3] = {2, 6, 1};
    int32_t out[4];
    float rows[4 * GV];
    memcpy(rows, GROWS, sizeof rows);
    sd_sampling s = sd_sampling_default();
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(GV, &v, NULL, 0), SD_OK);
    sd_verify_in in = base_in(NULL, GV, 3, d, &s, SD_VERIFY_GREEDY);
    in.argmax = amax;
    ck_assert_int_eq(sd_verify(v, &in, out), 4);
    ck_assert_int_eq(out[3], 7);
    in.draft = d1;
    ck_assert_int_eq(sd_verify(v, &in, out), 2);
    ck_assert_int_eq(out[1], 5);
    in.logits = rows; /* both */
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    in.logits = NULL;
    s.repetition_penalty = 1.2f;
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    s = sampled(0.8f);
    in.mode = SD_VERIFY_MATCH;
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    sd_verifier_free(v);
}
END_TEST

START_TEST(test_greedy_plain_step)
{
    int32_t out[1];
    ck_assert_int_eq(run_greedy(NULL, 0, out), 1);
    ck_assert_int_eq(out[0], 2);
}
END_TEST

START_TEST(test_greedy_tie_lowest_id)
{
    float rows[2 * 4] = {0.0f, 1.0f, 2.0f, 2.0f, /* tie 2 / 3 */ 5.0f, 1.0f, 5.0f, 0.0f};
    sd_sampling s = sd_sampling_default();
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(4, &v, NULL, 0), SD_OK);
    int32_t d = 3, out[2];
    sd_verify_in in = base_in(rows, 4, 1, &d, &s, SD_VERIFY_GREEDY);
    ck_assert_int_eq(sd_verify(v, &in, out), 1);
    ck_assert_int_eq(out[0], 2);
    d = 2;
    memcpy(rows, (float[]){0.0f, 1.0f, 2.0f, 2.0f, 5.0f, 1.0f, 5.0f, 0.0f}, sizeof rows);
    ck_assert_int_eq(sd_verify(v, &in, out), 2);
    ck_assert_int_eq(out[0], 2);
    ck_assert_int_eq(out[1], 0);
    sd_verifier_free(v);
}
END_TEST

/* Row 1's argmax is 4 without a penalty, but 4 is the accepted draft d_0:
 * with repetition_penalty 2 its logit halves to 1.5 and 5 wins. Only a
 * history that includes the accepted drafts accepts d_1 = 5. */
START_TEST(test_greedy_penalty_history_includes_drafts)
{
    enum { PV = 6 };
    const float base[3][PV] = {
        {0.0f, 0.0f, 0.0f, 0.0f, 3.0f, 0.0f},
        {0.0f, 0.0f, 0.0f, 0.0f, 3.0f, 2.0f},
        {1.0f, 0.0f, 0.0f, 0.0f, 3.0f, 2.5f},
    };
    float rows[3 * PV];
    memcpy(rows, base, sizeof rows);
    ck_assert_int_eq(sd_argmax(base[1], PV), 4);
    sd_sampling s = sd_sampling_default();
    s.repetition_penalty = 2.0f;
    int32_t d[2] = {4, 5}, out[3];
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(PV, &v, NULL, 0), SD_OK);
    sd_verify_in in = base_in(rows, PV, 2, d, &s, SD_VERIFY_GREEDY);
    ck_assert_int_eq(sd_verify(v, &in, out), 3);
    ck_assert_int_eq(out[0], 4);
    ck_assert_int_eq(out[1], 5);
    ck_assert_int_eq(out[2], 4); /* 4 -> 1.5, 5 -> 1.25, 0 stays 1.0 */
    for (int i = 0; i < 3; i++) ck_assert_int_eq(out[i], plain_at(&s, &base[0][0], PV, i, NULL, 0, NULL, 0, out, 0));
    sd_verifier_free(v);
}
END_TEST

/* ---- greedy / match against plain decoding on random rows -------------------- */

enum { MV = 20, MK = 5 };

static float urand(uint64_t seed, uint64_t i, uint32_t stream) { return (float)sd_rng_uniform(seed, i, stream); }

/* One random trial: random rows, output, out_pos; drafts that agree with
 * plain decoding for a random prefix of m tokens, then differ. Returns 1 when
 * sd_verify commits exactly x_0..x_m (m+1 tokens). */
static int plain_equality_trial(sd_verifier *v, const sd_sampling *s0, sd_verify_mode mode, uint64_t seed)
{
    sd_sampling s = *s0;
    s.seed = seed;
    float rows[(MK + 1) * MV], work[(MK + 1) * MV];
    for (int j = 0; j < (MK + 1) * MV; j++) rows[j] = urand(seed, (uint64_t)j, 7) * 6.0f - 3.0f;
    int k = (int)(urand(seed, 0, 8) * (MK + 1));
    int m = (int)(urand(seed, 1, 8) * (k + 1));
    size_t n_output = (size_t)(urand(seed, 2, 8) * 7);
    int32_t output[8], prompt[4] = {1, 3, 3, 9}, d[MK], x[MK + 1], out[MK + 1];
    for (size_t j = 0; j < n_output; j++) output[j] = (int32_t)(urand(seed, 10 + j, 8) * MV);
    for (int i = 0; i <= m; i++) x[i] = plain_at(&s, rows, MV, i, prompt, 4, output, n_output, x, n_output);
    for (int i = 0; i < k; i++) {
        if (i < m) d[i] = x[i];
        else if (i == m) d[i] = (x[i] + 1 + (int32_t)(urand(seed, 20 + i, 8) * (MV - 1))) % MV;
        else d[i] = (int32_t)(urand(seed, 20 + i, 8) * MV);
    }
    memcpy(work, rows, sizeof work);
    sd_verify_in in = base_in(work, MV, k, d, &s, mode);
    in.prompt = prompt;
    in.n_prompt = 4;
    in.output = output;
    in.n_output = n_output;
    in.out_pos = n_output;
    int n = sd_verify(v, &in, out);
    if (n != m + 1) return 0;
    return memcmp(out, x, (size_t)n * sizeof *out) == 0;
}

static int equality_failures(const sd_sampling *s, sd_verify_mode mode, int trials)
{
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(MV, &v, NULL, 0), SD_OK);
    int bad = 0;
    for (int t = 0; t < trials; t++) bad += !plain_equality_trial(v, s, mode, (uint64_t)t * 7919u + 1);
    sd_verifier_free(v);
    return bad;
}

START_TEST(test_greedy_equals_plain_random)
{
    sd_sampling s = sd_sampling_default();
    ck_assert_int_eq(equality_failures(&s, SD_VERIFY_GREEDY, 500), 0);
    s.repetition_penalty = 1.3f;
    s.presence_penalty = 0.5f;
    s.frequency_penalty = 0.3f;
    ck_assert_int_eq(equality_failures(&s, SD_VERIFY_GREEDY, 500), 0);
    /* temperature 0 makes match and rejection greedy too */
    ck_assert_int_eq(equality_failures(&s, SD_VERIFY_MATCH, 500), 0);
    ck_assert_int_eq(equality_failures(&s, SD_VERIFY_REJECTION, 500), 0);
    /* logits processors: min_tokens 3 is crossed within a span in many trials */
    sd_sampling p = sd_sampling_default();
    with_processors(&p, 3);
    ck_assert_int_eq(equality_failures(&p, SD_VERIFY_GREEDY, 500), 0);
    with_processors(&s, 4);
    ck_assert_int_eq(equality_failures(&s, SD_VERIFY_GREEDY, 500), 0);
}
END_TEST

START_TEST(test_match_equals_plain_random)
{
    sd_sampling set[7];
    for (int i = 0; i < 7; i++) set[i] = sampled(i % 2 ? 0.7f : 1.0f);
    set[2].top_k = 5;
    set[3].top_p = 0.8f;
    set[4].min_p = 0.1f;
    set[5].repetition_penalty = 1.5f;
    set[5].presence_penalty = 0.4f;
    set[5].frequency_penalty = 0.6f;
    set[6].top_k = 8;
    set[6].top_p = 0.9f;
    set[6].min_p = 0.05f;
    set[6].repetition_penalty = 0.8f; /* < 1 boosts seen tokens */
    for (int i = 0; i < 7; i++) ck_assert_msg(equality_failures(&set[i], SD_VERIFY_MATCH, 400) == 0, "setting %d", i);
    sd_sampling p = sampled(0.9f); /* logits processors, alone and with filters and penalties */
    with_processors(&p, 3);
    ck_assert_int_eq(equality_failures(&p, SD_VERIFY_MATCH, 400), 0);
    with_processors(&set[6], 2);
    ck_assert_int_eq(equality_failures(&set[6], SD_VERIFY_MATCH, 400), 0);
}
END_TEST

/* ---- rejection: deterministic properties --------------------------------------- */

enum { RV = 8 };

static size_t dist_of(const sd_sampling *s, const float *row, int vocab, sd_tokprob *out)
{
    float tmp[64];
    memcpy(tmp, row, (size_t)vocab * sizeof *tmp);
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(vocab, &sp, NULL, 0), SD_OK);
    size_t n = sd_sampler_distribution(sp, s, tmp, vocab, out, (size_t)vocab);
    sd_sampler_free(sp);
    return n;
}

/* d absent from q (q(d) == 0, malformed) always rejects. With q == p on p's
 * support the residual has no mass, so the draw falls back to p; with q
 * missing token 2 the residual is all on token 2. */
START_TEST(test_rejection_qzero_and_residual)
{
    const float row[2 * RV] = {1.0f, 0.5f, 0.2f, 0.0f, -INFINITY, -INFINITY, -INFINITY, -INFINITY};
    sd_sampling s = sampled(1.0f);
    sd_tokprob p[RV], q[RV];
    size_t np = dist_of(&s, row, RV, p);
    ck_assert_uint_eq(np, 4);
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(RV, &v, NULL, 0), SD_OK);
    int32_t out[2];
    for (uint64_t seed = 0; seed < 200; seed++) {
        s.seed = seed;
        float work[2 * RV];
        memcpy(work, row, sizeof work);
        memcpy(q, p, sizeof q);
        int32_t d = 6;
        const sd_tokprob *qs[1] = {q};
        size_t nq[1] = {np};
        sd_verify_in in = base_in(work, RV, 1, &d, &s, SD_VERIFY_REJECTION);
        in.q = qs;
        in.nq = nq;
        in.out_pos = 3;
        ck_assert_int_eq(sd_verify(v, &in, out), 1);
        double u = sd_rng_uniform(seed, 3, SD_RNG_STREAM_RESIDUAL);
        ck_assert_int_eq(out[0], sd_sample_sparse(p, np, u));
        /* q = p without token 2, d = 2: rejects, residual is exactly {2} */
        size_t j = 0;
        for (size_t i = 0; i < np; i++)
            if (p[i].token != 2) q[j++] = p[i];
        nq[0] = j;
        d = 2;
        memcpy(work, row, sizeof work);
        ck_assert_int_eq(sd_verify(v, &in, out), 1);
        ck_assert_int_eq(out[0], 2);
    }
    sd_verifier_free(v);
}
END_TEST

/* With q_i equal to the exact penalised p_i every draft is accepted
 * (p/q == 1 > u), and the bonus must be the plain stream-0 draw of row k with
 * the accepted drafts in its penalty history. */
START_TEST(test_rejection_full_accept_bonus_is_plain)
{
    enum { K = 3 };
    sd_sampling s = sampled(0.9f);
    s.repetition_penalty = 1.6f;
    s.presence_penalty = 0.7f;
    s.top_k = 6;
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(MV, &v, NULL, 0), SD_OK);
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(MV, &sp, NULL, 0), SD_OK);
    int bad = 0;
    for (uint64_t seed = 1; seed <= 300; seed++) {
        s.seed = seed;
        float rows[(K + 1) * MV], work[(K + 1) * MV];
        for (int j = 0; j < (K + 1) * MV; j++) rows[j] = urand(seed, (uint64_t)j, 9) * 4.0f - 2.0f;
        int32_t output[3] = {2, 5, 5}, hist[3 + K], d[K], out[K + 1];
        memcpy(hist, output, sizeof output);
        sd_tokprob q[K][MV];
        const sd_tokprob *qs[K];
        size_t nq[K];
        for (int i = 0; i < K; i++) {
            float row[MV];
            memcpy(row, rows + i * MV, sizeof row);
            sd_sampler_process_logits(sp, &s, row, MV, NULL, 0, hist, 3 + (size_t)i);
            nq[i] = sd_sampler_distribution(sp, &s, row, MV, q[i], MV);
            qs[i] = q[i];
            d[i] = sd_sample_sparse(q[i], nq[i], sd_rng_uniform(seed, 3 + i, SD_RNG_STREAM_DRAFT));
            hist[3 + i] = d[i];
        }
        memcpy(work, rows, sizeof work);
        sd_verify_in in = base_in(work, MV, K, d, &s, SD_VERIFY_REJECTION);
        in.q = qs;
        in.nq = nq;
        in.output = output;
        in.n_output = 3;
        in.out_pos = 3;
        int n = sd_verify(v, &in, out);
        int32_t bonus = plain_at(&s, rows, MV, K, NULL, 0, output, 3, d, 3);
        bad += n != K + 1 || memcmp(out, d, sizeof d) != 0 || out[K] != bonus;
    }
    ck_assert_int_eq(bad, 0);
    sd_sampler_free(sp);
    sd_verifier_free(v);
}
END_TEST

START_TEST(test_bad_input)
{
    float rows[3 * RV] = {0};
    int32_t d[SD_MAX_DRAFT + 1] = {0}, out[SD_MAX_DRAFT + 2];
    sd_sampling s = sampled(1.0f);
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(RV, &v, NULL, 0), SD_OK);
    sd_verify_in in = base_in(rows, RV, -1, d, &s, SD_VERIFY_GREEDY);
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    in.k = SD_MAX_DRAFT + 1;
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    in.k = 2;
    in.logits = NULL;
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    in.logits = rows;
    in.vocab = RV + 1;
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    in.vocab = RV;
    in.draft = NULL;
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    in.draft = d;
    in.mode = SD_VERIFY_REJECTION; /* sampled, no q */
    ck_assert_int_eq(sd_verify(v, &in, out), SD_ERR_ARG);
    ck_assert_int_eq(sd_verify(NULL, &in, out), SD_ERR_ARG);
    s.temperature = 0.0f; /* greedy: q not needed */
    ck_assert_int_eq(sd_verify(v, &in, out), 3);
    sd_verifier_free(v);
    sd_verifier_free(NULL);
    char err[128] = "";
    sd_verifier *none;
    ck_assert_int_eq(sd_verifier_new(0, &none, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(none);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(sd_verifier_new(-1, &none, NULL, 0), SD_ERR_ARG);
}
END_TEST

/* ---- rejection: statistical ------------------------------------------------------ */

enum { SV = 10, NTRIALS = 100000 };

/* A synthetic case: fixed target rows (row 2 is the bonus row of k = 2), the
 * request's sampler chain (p_i = its distribution of row i) and the proposal
 * of draft i. */
typedef struct rcase {
    const char *name;
    float rows[3][SV];
    sd_sampling s;
    sd_tokprob q[2][SV];
    size_t nq[2];
} rcase;

typedef enum { RULE_VERIFY, RULE_ARGMAX_PROPOSAL, RULE_NO_RESIDUAL } rule;

static const float T0[SV] = {2.0f, 1.5f, 1.2f, 0.8f, 0.5f, 0.3f, 0.0f, -0.5f, -1.0f, -2.0f};
static const float T1[SV] = {0.1f, 1.0f, -0.3f, 2.2f, 0.4f, 1.7f, -1.0f, 0.9f, 0.0f, -0.6f};
static const float D0[SV] = {0.5f, 2.0f, 1.0f, -0.5f, 1.5f, 0.0f, 0.8f, -1.0f, 0.2f, 1.1f};
static const float D1[SV] = {1.2f, -0.4f, 0.3f, 1.9f, 0.0f, -1.0f, 2.1f, 0.6f, 0.9f, -0.2f};

/* q_i = the distribution of drafter logits under (T, top_k, top_p). */
static void set_q(rcase *c, const float *d0, const float *d1, float T, int top_k, float top_p)
{
    sd_sampling qs = sampled(T);
    qs.top_k = top_k;
    qs.top_p = top_p;
    c->nq[0] = dist_of(&qs, d0, SV, c->q[0]);
    c->nq[1] = dist_of(&qs, d1, SV, c->q[1]);
}

static void set_rows(rcase *c, const float *r0, const float *r1)
{
    memcpy(c->rows[0], r0, sizeof c->rows[0]);
    memcpy(c->rows[1], r1, sizeof c->rows[1]);
    memcpy(c->rows[2], r0, sizeof c->rows[2]);
}

enum {
    CASE_Q_EQ_P,
    CASE_DISJOINT,
    CASE_Q_TOPK,
    CASE_Q_TOPP,
    CASE_P_FILTERED,
    CASE_P_PEAKED,
    CASE_Q_ONE_HOT,
    CASE_P_PROCESSED,
    NCASES
};

static void build_case(rcase *c, int which)
{
    memset(c, 0, sizeof *c);
    c->s = sampled(1.0f);
    set_rows(c, T0, T1);
    switch (which) {
    case CASE_Q_EQ_P:
        c->name = "q = p";
        c->nq[0] = dist_of(&c->s, T0, SV, c->q[0]);
        c->nq[1] = dist_of(&c->s, T1, SV, c->q[1]);
        break;
    case CASE_DISJOINT: {
        c->name = "q disjoint from p";
        float r0[SV], r1[SV];
        memcpy(r0, T0, sizeof r0);
        memcpy(r1, T1, sizeof r1);
        for (int i = 5; i < SV; i++) r0[i] = -INFINITY;
        for (int i = 0; i < 5; i++) r1[i] = -INFINITY;
        set_rows(c, r0, r1);
        for (int i = 0; i < 5; i++) { /* q_0 on 5..9, q_1 on 0..4 */
            c->q[0][i] = (sd_tokprob){5 + i, 0.2f};
            c->q[1][i] = (sd_tokprob){i, 0.2f};
        }
        c->nq[0] = c->nq[1] = 5;
        break;
    }
    case CASE_Q_TOPK:
        c->name = "q top-k 2 of another distribution";
        set_q(c, D0, D1, 1.0f, 2, 1.0f);
        break;
    case CASE_Q_TOPP:
        c->name = "q top-p 0.6 of another distribution";
        set_q(c, D0, D1, 1.0f, 0, 0.6f);
        break;
    case CASE_P_FILTERED:
        c->name = "p filtered (T 0.8, top-k 6, top-p 0.9, min-p 0.05), q not";
        c->s = sampled(0.8f);
        c->s.top_k = 6;
        c->s.top_p = 0.9f;
        c->s.min_p = 0.05f;
        set_q(c, D0, D1, 1.0f, 0, 1.0f);
        break;
    case CASE_P_PROCESSED: /* drafts do not see the processors (the drafter drops them) */
        c->name = "p processed (logit bias, allowed ids, min_tokens 1), q not";
        with_processors(&c->s, 1);
        set_q(c, D0, D1, 1.0f, 0, 1.0f);
        break;
    case CASE_Q_ONE_HOT: /* an n-gram proposer's drafts (the verifier's fallback, ngram.h) */
        c->name = "q one-hot (n-gram drafts)";
        c->q[0][0] = (sd_tokprob){3, 1.0f};
        c->q[1][0] = (sd_tokprob){7, 1.0f};
        c->nq[0] = c->nq[1] = 1;
        break;
    default:
        c->name = "p peaked (T 0.25), q flat (T 1.5)";
        c->s = sampled(0.25f);
        set_q(c, D0, D1, 1.5f, 0, 1.0f);
        break;
    }
}

/* Dense exact distribution (as doubles) of row i (output position i) under
 * the case's chain, its logits processors included. */
static void exact_p(const rcase *c, int row, double *p)
{
    sd_tokprob d[SV];
    float r[SV];
    memcpy(r, c->rows[row], sizeof r);
    sd_sampler *sp;
    ck_assert_int_eq(sd_sampler_new(SV, &sp, NULL, 0), SD_OK);
    sd_sampler_process_logits(sp, &c->s, r, SV, NULL, 0, NULL, (size_t)row);
    sd_sampler_free(sp);
    size_t n = dist_of(&c->s, r, SV, d);
    for (int i = 0; i < SV; i++) p[i] = 0.0;
    for (size_t j = 0; j < n; j++) p[d[j].token] = d[j].prob;
}

/* Wrong rule (b), first row only: accept as the real rule does, but on a
 * reject draw from p instead of the residual max(0, p - q). */
static int32_t no_residual_first(const rcase *c, const sd_sampling *s, int32_t d)
{
    sd_tokprob p[SV];
    size_t np = dist_of(s, c->rows[0], SV, p);
    double pd = sd_sparse_prob(p, np, d), qd = sd_sparse_prob(c->q[0], c->nq[0], d);
    if (qd > 0.0 && sd_rng_uniform(s->seed, 0, SD_RNG_STREAM_ACCEPT) < pd / qd) return d;
    return sd_sample_sparse(p, np, sd_rng_uniform(s->seed, 0, SD_RNG_STREAM_RESIDUAL));
}

/* Runs NTRIALS trials (seed = trial index + (k-1)*NTRIALS, out_pos 0) with k drafts: counts
 * the first committed token in first[] and, when the first draft was
 * accepted (the rule committed 2+ tokens), the second in second[]. Draft i is
 * drawn from q_i with the DRAFT stream, or is argmax q_i for rule (a).
 * Returns the number of second-token samples; -1 if sd_verify failed. */
static long run_trials(const rcase *c, int k, rule r, long *first, long *second)
{
    sd_verifier *v;
    ck_assert_int_eq(sd_verifier_new(SV, &v, NULL, 0), SD_OK);
    long n2 = 0, errors = 0;
    memset(first, 0, SV * sizeof *first);
    memset(second, 0, SV * sizeof *second);
    const sd_tokprob *qs[2] = {c->q[0], c->q[1]};
    for (long t = 0; t < NTRIALS; t++) {
        sd_sampling s = c->s;
        s.seed = (uint64_t)t + (uint64_t)(k - 1) * NTRIALS; /* independent runs per k */
        int32_t d[2], out[3];
        for (int i = 0; i < k; i++)
            d[i] = r == RULE_ARGMAX_PROPOSAL
                       ? c->q[i][0].token /* q lists are sorted, most probable first */
                       : sd_sample_sparse(c->q[i], c->nq[i], sd_rng_uniform(s.seed, (uint64_t)i, SD_RNG_STREAM_DRAFT));
        if (r == RULE_NO_RESIDUAL) {
            first[no_residual_first(c, &s, d[0])]++;
            continue;
        }
        float work[3 * SV];
        memcpy(work, c->rows, sizeof work);
        sd_verify_in in = base_in(work, SV, k, d, &s, SD_VERIFY_REJECTION);
        in.q = qs;
        in.nq = c->nq;
        int n = sd_verify(v, &in, out);
        if (n < 1 || out[0] < 0 || out[0] >= SV) {
            errors++;
            continue;
        }
        first[out[0]]++;
        if (n >= 2) {
            second[out[1]]++;
            n2++;
        }
    }
    sd_verifier_free(v);
    return errors ? -1 : n2;
}

/* Chi-square of the first (and, with enough samples, the conditional second)
 * committed token against p_0 (p_1); prints both; fails above the 0.999
 * quantile. */
static void check_case(int which, int k)
{
    rcase c;
    build_case(&c, which);
    long first[SV], second[SV];
    double p0[SV], p1[SV];
    exact_p(&c, 0, p0);
    exact_p(&c, 1, p1);
    long n2 = run_trials(&c, k, RULE_VERIFY, first, second);
    ck_assert_msg(n2 >= 0, "%s: sd_verify failed", c.name);
    int df;
    double x = tu_chi2_stat(first, p0, SV, NTRIALS, &df);
    printf("verify chi2 [%s, k=%d] first: %.2f (df %d, crit %.3f)", c.name, k, x, df, tu_chi2_crit(df));
    ck_assert_msg(x < tu_chi2_crit(df), "%s k=%d: first token chi2 %.2f >= %.3f", c.name, k, x, tu_chi2_crit(df));
    if (n2 >= 1000) {
        int df2;
        double x2 = tu_chi2_stat(second, p1, SV, n2, &df2);
        printf("; second | accepted (n %ld): %.2f (df %d, crit %.3f)", n2, x2, df2, tu_chi2_crit(df2));
        ck_assert_msg(x2 < tu_chi2_crit(df2), "%s k=%d: second token chi2 %.2f >= %.3f", c.name, k, x2,
                      tu_chi2_crit(df2));
    }
    printf("\n");
}

START_TEST(test_rejection_matches_target) { check_case(_i / 2, 1 + _i % 2); }
END_TEST

/* The wrong rules must be rejected by the same statistic. */
static double wrong_stat(int which, rule r, int *df)
{
    rcase c;
    build_case(&c, which);
    long first[SV], second[SV];
    double p0[SV];
    exact_p(&c, 0, p0);
    ck_assert_int_ge(run_trials(&c, 1, r, first, second), 0);
    return tu_chi2_stat(first, p0, SV, NTRIALS, df);
}

START_TEST(test_rejection_discriminates)
{
    static const struct {
        int which;
        rule r;
        const char *what;
    } wrong[] = {
        {CASE_Q_EQ_P, RULE_ARGMAX_PROPOSAL, "argmax proposal"},
        {CASE_Q_TOPP, RULE_ARGMAX_PROPOSAL, "argmax proposal"},
        {CASE_P_FILTERED, RULE_ARGMAX_PROPOSAL, "argmax proposal"},
        {CASE_Q_TOPK, RULE_NO_RESIDUAL, "no residual"},
        {CASE_Q_TOPP, RULE_NO_RESIDUAL, "no residual"},
        {CASE_P_FILTERED, RULE_NO_RESIDUAL, "no residual"},
    };
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        rcase c;
        build_case(&c, wrong[i].which);
        int df;
        double x = wrong_stat(wrong[i].which, wrong[i].r, &df);
        printf("verify chi2 WRONG rule '%s' [%s]: %.1f (df %d, crit %.3f)\n", wrong[i].what, c.name, x, df,
               tu_chi2_crit(df));
        ck_assert_msg(x > tu_chi2_crit(df), "'%s' on %s not detected: chi2 %.2f", wrong[i].what, c.name, x);
    }
}
END_TEST

static Suite *verify_suite(void)
{
    Suite *s = suite_create("verify");
    TCase *tc = tcase_create("rules");
    tcase_add_test(tc, test_greedy_all_accept_bonus);
    tcase_add_test(tc, test_greedy_first_mismatch);
    tcase_add_test(tc, test_greedy_plain_step);
    tcase_add_test(tc, test_greedy_from_argmax);
    tcase_add_test(tc, test_greedy_tie_lowest_id);
    tcase_add_test(tc, test_greedy_penalty_history_includes_drafts);
    tcase_add_test(tc, test_greedy_equals_plain_random);
    tcase_add_test(tc, test_match_equals_plain_random);
    tcase_add_test(tc, test_rejection_qzero_and_residual);
    tcase_add_test(tc, test_rejection_full_accept_bonus_is_plain);
    tcase_add_test(tc, test_bad_input);
    suite_add_tcase(s, tc);
    TCase *st = tcase_create("statistical");
    tcase_set_timeout(st, 600);
    tcase_add_loop_test(st, test_rejection_matches_target, 0, 2 * NCASES);
    tcase_add_test(st, test_rejection_discriminates);
    suite_add_tcase(s, st);
    return s;
}

int main(void) { return tu_run_suite(verify_suite()); }
