/* test_vf_pipeline.c — rejection sampling stays distribution-exact when the
 * drafts come from spans drafted ahead (proto/specd.proto, "pipelined").
 *
 * A synthetic Markov chain over V tokens is the target (p(x | previous)) and
 * another one the drafter (q). Each trial generates three tokens after the
 * prompt {0} the way the pipelined verifier and drafter do, with the real
 * span store (vf_span.c) and accept rule (sd_verify, rejection, K = 2):
 * while step i is verified, the drafter has already drafted the span for
 * step i + 1 from the outcome it assumes — every in-flight draft accepted
 * and its own sample of the next token — tagged with the committed base it
 * continues; at the next step the verifier uses it only if its base and
 * leading tokens are the committed sequence, and otherwise drafts again
 * from the real base (the wait). The drafter samples with the keyed stream
 * SD_RNG_STREAM_DRAFT, independent of the verifier's accept and residual
 * streams.
 *
 * The joint distribution of the five tokens (V^5 cells, N = 10^5 trials)
 * must pass a chi-square test at significance 0.001 against the exact
 * chain, and the test is shown to discriminate: the same loop with the
 * drafter sampling from the accept stream (correlated randomness), and with
 * the q lists shifted by one token in the span, must fail it. It also
 * checks that spans drafted ahead were really used (hits) and also missed
 * (stale), so both paths are exercised. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "span.h"
#include "testutil.h"
#include "verify.h"
#include "vf_span.h"

#define V 3
#define K 2
#define GEN 5
#define NCELLS (V * V * V * V * V)
#define NTRIALS 100000

/* target and drafter logits: row = previous token */
static const float TL[V][V] = {{1.0f, 0.2f, -0.5f}, {-0.3f, 0.9f, 0.5f}, {0.6f, -0.4f, 0.1f}};
static const float DL[V][V] = {{0.8f, 0.5f, -0.2f}, {0.2f, 0.4f, 0.9f}, {0.3f, 0.0f, 0.8f}};

typedef enum { OK, CORRELATED, Q_SHIFTED } variant;

static void softmax(const float *l, double *p)
{
    double m = l[0], s = 0;
    for (int i = 1; i < V; i++) m = l[i] > m ? l[i] : m;
    for (int i = 0; i < V; i++) s += p[i] = exp(l[i] - m);
    for (int i = 0; i < V; i++) p[i] /= s;
}

/* A span under construction: tokens and their full q lists. */
typedef struct span_buf {
    int n;
    int32_t tok[8];
    sd_tokprob q[8][V];
} span_buf;

/* The drafter: appends k sampled tokens to sb after context ctx[0..n) (the
 * output position of ctx[i] is i - 1: one prompt token). */
static void draft(span_buf *sb, const int32_t *ctx, int n, int k, uint64_t seed, variant v)
{
    int32_t prev = n > 0 ? ctx[n - 1] : 0;
    if (sb->n > 0) prev = sb->tok[sb->n - 1];
    for (int i = 0; i < k; i++) {
        int pos = n - 1 + sb->n; /* output position of the token being drafted */
        double q[V];
        softmax(DL[prev], q);
        double u = sd_rng_uniform(seed, (uint64_t)pos, v == CORRELATED ? SD_RNG_STREAM_ACCEPT : SD_RNG_STREAM_DRAFT);
        int32_t t = V - 1;
        double c = 0;
        for (int j = 0; j < V; j++)
            if (u < (c += q[j])) {
                t = j;
                break;
            }
        for (int j = 0; j < V; j++) sb->q[sb->n][j] = (sd_tokprob){j, (float)q[j]};
        sb->tok[sb->n++] = t;
        prev = t;
    }
}

/* Files sb as a span continuing ctx[0..base) into the store. */
static void file_span(sd_vf_spans *sp, const span_buf *sb, const int32_t *ctx, int base)
{
    Specd__DraftResult r = SPECD__DRAFT_RESULT__INIT;
    Specd__Proposal pb[8], *pp[8];
    Specd__TokenProb tb[8][V], *tp[8][V];
    for (int i = 0; i < sb->n; i++) {
        specd__proposal__init(&pb[i]);
        for (int j = 0; j < V; j++) {
            specd__token_prob__init(&tb[i][j]);
            tb[i][j].token = sb->q[i][j].token;
            tb[i][j].prob = sb->q[i][j].prob;
            tp[i][j] = &tb[i][j];
        }
        pb[i].q = tp[i];
        pb[i].n_q = V;
        pp[i] = &pb[i];
    }
    r.tokens = (int32_t *)sb->tok;
    r.n_tokens = (size_t)sb->n;
    r.q = pp;
    r.n_q = (size_t)sb->n;
    r.base_len = (uint32_t)base;
    r.base_hash = sd_span_hash(SD_SPAN_HASH_SEED, ctx, (size_t)base);
    ck_assert(sd_vf_spans_add(sp, &r, V, 0));
}

typedef struct stats {
    long hits, misses;
} stats;

/* One trial: the first GEN tokens after the prompt, into out. */
static void trial(sd_verifier *ver, uint64_t seed, variant v, int32_t *out, stats *st)
{
    sd_vf_spans sp;
    sd_vf_spans_init(&sp);
    int32_t c[GEN + K + 2] = {0};
    int L = 1;
    sd_sampling s = sd_sampling_default();
    s.temperature = 1.0f;
    s.seed = seed;
    span_buf ahead;
    memset(&ahead, 0, sizeof ahead);
    while (L < 1 + GEN) {
        sd_vf_spans_sync(&sp, c, L);
        sd_proposal prop;
        if (sd_vf_spans_pick(&sp, c, L, K, true, &prop, NULL) > 0) {
            st->hits++;
        } else { /* no valid span: the drafter drafts from the real base (the wait) */
            st->misses++;
            span_buf now = {0};
            draft(&now, c, L, K, seed, v);
            file_span(&sp, &now, c, L);
            ck_assert_int_eq(sd_vf_spans_pick(&sp, c, L, K, true, &prop, NULL), K);
        }
        if (v == Q_SHIFTED) /* a slicing bug: each draft verified against the previous token's q */
            for (int i = prop.n - 1; i > 0; i--) prop.q[i] = prop.q[i - 1];
        /* while this step is verified, the drafter drafts the next span ahead: in-flight
         * drafts assumed accepted, then its own sample of the next token, then K drafts */
        span_buf next = {0};
        for (int i = 0; i < prop.n; i++) {
            next.tok[i] = prop.tokens[i];
            for (int j = 0; j < V; j++) next.q[i][j] = (sd_tokprob){j, j == prop.tokens[i] ? 1.0f : 0.0f};
        }
        next.n = prop.n;
        draft(&next, c, L, 1 + K, seed, v);
        file_span(&sp, &next, c, L);
        /* verify: rows = target logits after c[L-1], d1, .., dk */
        float logits[(K + 1) * V];
        int32_t prev = c[L - 1];
        for (int i = 0; i <= prop.n; i++) {
            memcpy(logits + i * V, TL[prev], sizeof TL[prev]);
            if (i < prop.n) prev = prop.tokens[i];
        }
        sd_verify_in in = {.logits = logits,
                           .vocab = V,
                           .k = prop.n,
                           .draft = prop.tokens,
                           .q = (const sd_tokprob *const *)prop.q,
                           .nq = prop.nq,
                           .sampling = &s,
                           .prompt = c,
                           .n_prompt = 1,
                           .output = c + 1,
                           .n_output = (size_t)(L - 1),
                           .out_pos = (uint64_t)(L - 1),
                           .mode = SD_VERIFY_REJECTION};
        int32_t got[K + 1];
        int m = sd_verify(ver, &in, got);
        ck_assert_int_ge(m, 1);
        for (int i = 0; i < m && L < (int)(sizeof c / sizeof c[0]); i++) c[L++] = got[i];
    }
    memcpy(out, c + 1, GEN * sizeof *out);
    sd_vf_spans_release(&sp);
}

/* Chi-square of the joint distribution of the first GEN tokens. */
static double run(variant v, int *df, stats *st)
{
    static long counts[NCELLS];
    static double p[NCELLS];
    memset(counts, 0, sizeof counts);
    for (int cell = 0; cell < NCELLS; cell++) {
        double pr = 1;
        int prev = 0, rest = cell;
        for (int i = 0; i < GEN; i++) { /* cell = x0 * V^(GEN-1) + ... + x(GEN-1) */
            int div = 1;
            for (int j = i + 1; j < GEN; j++) div *= V;
            int x = rest / div;
            rest %= div;
            double q[V];
            softmax(TL[prev], q);
            pr *= q[x];
            prev = x;
        }
        p[cell] = pr;
    }
    sd_verifier *ver;
    ck_assert_int_eq(sd_verifier_new(V, &ver, NULL, 0), SD_OK);
    memset(st, 0, sizeof *st);
    for (long t = 0; t < NTRIALS; t++) {
        int32_t x[GEN];
        trial(ver, 0x5EED0000ULL + (uint64_t)t, v, x, st);
        int cell = 0;
        for (int i = 0; i < GEN; i++) cell = cell * V + x[i];
        counts[cell]++;
    }
    sd_verifier_free(ver);
    return tu_chi2_stat(counts, p, NCELLS, NTRIALS, df);
}

START_TEST(pipelined_rejection_is_exact)
{
    int df;
    stats st;
    double x = run(OK, &df, &st);
    printf("pipelined rejection chi2 %.1f (df %d, crit %.1f); spans drafted ahead used %ld, missed %ld\n", x, df,
           tu_chi2_crit(df), st.hits, st.misses);
    ck_assert_msg(x < tu_chi2_crit(df), "chi2 %.2f >= %.2f", x, tu_chi2_crit(df));
    ck_assert_int_gt(st.hits, NTRIALS / 10); /* both paths ran */
    ck_assert_int_gt(st.misses, NTRIALS / 10);
}
END_TEST

START_TEST(the_test_discriminates)
{
    static const struct {
        variant v;
        const char *what;
    } wrong[] = {{CORRELATED, "drafter sampling with the accept stream"}, {Q_SHIFTED, "q shifted by one token"}};
    for (size_t i = 0; i < sizeof wrong / sizeof wrong[0]; i++) {
        int df;
        stats st;
        double x = run(wrong[i].v, &df, &st);
        printf("pipelined rejection WRONG '%s': chi2 %.1f (df %d, crit %.1f)\n", wrong[i].what, x, df,
               tu_chi2_crit(df));
        ck_assert_msg(x > tu_chi2_crit(df), "'%s' not detected: chi2 %.2f", wrong[i].what, x);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vf_pipeline");
    TCase *tc = tcase_create("statistics");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, pipelined_rejection_is_exact);
    tcase_add_test(tc, the_test_discriminates);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
