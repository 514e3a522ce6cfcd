/* test_vf_span.c — the verifier's span store (vf_span.c): a span is used
 * exactly when its base (length and hash) is the committed prefix and its
 * leading tokens are what was committed after it; stale spans — a wrong
 * hash, a wrong length, a leading token that was not committed — are never
 * offered as drafts and are counted; q lists follow their tokens; the span
 * in use survives a full store; a dry answer ("nothing past these tokens")
 * is counted once its tokens are committed, never when stale. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "span.h"
#include "testutil.h"
#include "vf_span.h"

#define VOCAB 50

/* A DraftResult over caller storage: tokens t[0..n), one q list per token
 * ({t: 0.75, 49: 0.25}) when with_q. */
typedef struct res_buf {
    Specd__DraftResult res;
    int32_t tok[SD_VF_SPAN_MAX_TOKENS];
    Specd__Proposal pb[SD_VF_SPAN_MAX_TOKENS];
    Specd__Proposal *pp[SD_VF_SPAN_MAX_TOKENS];
    Specd__TokenProb tb[SD_VF_SPAN_MAX_TOKENS][2];
    Specd__TokenProb *tp[SD_VF_SPAN_MAX_TOKENS][2];
} res_buf;

static void res_make(res_buf *b, uint32_t base_len, uint64_t base_hash, const int32_t *t, int n, bool with_q)
{
    memset(b, 0, sizeof *b);
    specd__draft_result__init(&b->res);
    b->res.request_id = 1;
    b->res.base_len = base_len;
    b->res.base_hash = base_hash;
    memcpy(b->tok, t, (size_t)n * sizeof *t);
    b->res.tokens = b->tok;
    b->res.n_tokens = (size_t)n;
    b->res.draft_us = 7;
    if (!with_q) return;
    for (int i = 0; i < n; i++) {
        specd__proposal__init(&b->pb[i]);
        for (int j = 0; j < 2; j++) {
            specd__token_prob__init(&b->tb[i][j]);
            b->tp[i][j] = &b->tb[i][j];
        }
        b->tb[i][0].token = t[i];
        b->tb[i][0].prob = 0.75f;
        b->tb[i][1].token = 49;
        b->tb[i][1].prob = 0.25f;
        b->pb[i].q = b->tp[i];
        b->pb[i].n_q = 2;
        b->pp[i] = &b->pb[i];
    }
    b->res.q = b->pp;
    b->res.n_q = (size_t)n;
}

static const int32_t C[] = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5, 8};

START_TEST(hashes_match_the_chain)
{
    sd_vf_spans sp;
    sd_vf_spans_init(&sp);
    ck_assert_int_eq(sd_vf_spans_sync(&sp, C, 4), SD_OK);
    ck_assert_int_eq(sd_vf_spans_sync(&sp, C, 12), SD_OK); /* extended, not recomputed */
    for (int n = 0; n <= 12; n++) ck_assert(sd_vf_spans_hash(&sp, n) == sd_span_hash(SD_SPAN_HASH_SEED, C, (size_t)n));
    ck_assert(sd_span_hash(sd_span_hash(SD_SPAN_HASH_SEED, C, 5), C + 5, 7) == sd_vf_spans_hash(&sp, 12));
    sd_vf_spans_release(&sp);
}
END_TEST

START_TEST(valid_span_gives_its_drafts)
{
    sd_vf_spans sp;
    sd_vf_spans_init(&sp);
    sd_vf_spans_sync(&sp, C, 6);
    res_buf b;
    /* drafted on C[0..4) assuming in-flight {5, 9} and a guessed next token 2, then drafts 40 41 42 */
    int32_t t[] = {5, 9, 2, 40, 41, 42};
    res_make(&b, 4, sd_vf_spans_hash(&sp, 4), t, 6, true);
    ck_assert(sd_vf_spans_add(&sp, &b.res, VOCAB, 1.0));
    sd_proposal p;
    const sd_vf_span *used;
    /* committed is C[0..6) = base + {5, 9}: the guess 2 is not committed yet, so it is a draft too */
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 6, 8, true, &p, &used), 4);
    ck_assert_int_eq(p.tokens[0], 2);
    ck_assert_int_eq(p.tokens[3], 42);
    ck_assert_ptr_nonnull(used);
    ck_assert_uint_eq(used->draft_us, 7);
    ck_assert_ptr_nonnull(p.q[1]); /* q follows its token */
    ck_assert_int_eq(p.q[1][0].token, 40);
    ck_assert_float_eq(p.q[1][0].prob, 0.75f);
    /* the budget clamps, without q when not wanted */
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 6, 2, false, &p, NULL), 2);
    ck_assert_ptr_null(p.q[0]);
    /* one more committed token equal to the guess: the rest serve (a plain step's shift) */
    int32_t c7[] = {3, 1, 4, 1, 5, 9, 2};
    sd_vf_spans_sync(&sp, c7, 7);
    ck_assert_int_eq(sd_vf_spans_pick(&sp, c7, 7, 8, true, &p, NULL), 3);
    ck_assert_int_eq(p.tokens[0], 40);
    ck_assert_int_eq(p.q[0][0].token, 40);
    ck_assert_uint_eq(sp.stale, 0);
    sd_vf_spans_release(&sp);
}
END_TEST

START_TEST(stale_spans_are_never_verified)
{
    sd_vf_spans sp;
    sd_vf_spans_init(&sp);
    sd_vf_spans_sync(&sp, C, 8);
    res_buf b;
    int32_t t[] = {6, 30, 31};          /* C[7] == 6: continues C[0..7) */
    int32_t wrong_lead[] = {7, 30, 31}; /* assumed 7 where 6 was committed */
    sd_proposal p;
    /* a wrong hash */
    res_make(&b, 7, sd_vf_spans_hash(&sp, 7) ^ 1, t, 3, false);
    ck_assert(sd_vf_spans_add(&sp, &b.res, VOCAB, 0));
    /* the right hash of another length */
    res_make(&b, 6, sd_vf_spans_hash(&sp, 7), t, 3, false);
    ck_assert(sd_vf_spans_add(&sp, &b.res, VOCAB, 0));
    /* a leading token that was not committed */
    res_make(&b, 7, sd_vf_spans_hash(&sp, 7), wrong_lead, 3, false);
    ck_assert(sd_vf_spans_add(&sp, &b.res, VOCAB, 0));
    /* a base beyond the committed sequence */
    res_make(&b, 9, sd_vf_spans_hash(&sp, 7), t, 3, false);
    ck_assert(sd_vf_spans_add(&sp, &b.res, VOCAB, 0));
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 8, 8, true, &p, NULL), 0);
    ck_assert_int_eq(p.n, 0);
    ck_assert_uint_eq(sp.stale, 4);
    ck_assert_int_eq(sp.n, 0); /* all dropped */
    /* a good span among stale ones is the one used */
    res_make(&b, 7, sd_vf_spans_hash(&sp, 7) ^ 2, t, 3, false);
    sd_vf_spans_add(&sp, &b.res, VOCAB, 0);
    res_make(&b, 7, sd_vf_spans_hash(&sp, 7), t, 3, false);
    sd_vf_spans_add(&sp, &b.res, VOCAB, 0);
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 8, 8, true, &p, NULL), 2);
    ck_assert_int_eq(p.tokens[0], 30);
    ck_assert_uint_eq(sp.stale, 5);
    /* a span whose tokens were all committed is dropped without counting as stale */
    int32_t done[] = {6, 5};
    res_make(&b, 7, sd_vf_spans_hash(&sp, 7), done, 2, false);
    sd_vf_spans_add(&sp, &b.res, VOCAB, 0);
    sd_vf_spans_sync(&sp, C, 9);
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 9, 8, true, &p, NULL), 0); /* {6, 30, 31}: 30 != C[8] */
    ck_assert_uint_eq(sp.stale, 6);
    sd_vf_spans_release(&sp);
}
END_TEST

START_TEST(bad_results_refused)
{
    sd_vf_spans sp;
    sd_vf_spans_init(&sp);
    sd_vf_spans_sync(&sp, C, 4);
    res_buf b;
    int32_t out_of_vocab[] = {1, VOCAB};
    res_make(&b, 4, sd_vf_spans_hash(&sp, 4), out_of_vocab, 2, false);
    ck_assert(!sd_vf_spans_add(&sp, &b.res, VOCAB, 0));
    res_make(&b, 4, sd_vf_spans_hash(&sp, 4), out_of_vocab, 0, false);
    ck_assert(!sd_vf_spans_add(&sp, &b.res, VOCAB, 0)); /* empty */
    int32_t many[SD_VF_SPAN_MAX_TOKENS] = {0};
    res_make(&b, 4, sd_vf_spans_hash(&sp, 4), many, SD_VF_SPAN_MAX_TOKENS, false);
    b.res.n_tokens = SD_VF_SPAN_MAX_TOKENS + 1; /* one too many */
    ck_assert(!sd_vf_spans_add(&sp, &b.res, VOCAB, 0));
    /* a bad q list: the tokens stay, without q */
    int32_t t[] = {11, 12};
    res_make(&b, 4, sd_vf_spans_hash(&sp, 4), t, 2, true);
    b.tb[1][1].prob = 2.0f;
    ck_assert(sd_vf_spans_add(&sp, &b.res, VOCAB, 0));
    sd_proposal p;
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 4, 4, true, &p, NULL), 2);
    ck_assert_ptr_null(p.q[0]);
    ck_assert_int_eq(sp.n, 1);
    sd_vf_spans_release(&sp);
}
END_TEST

START_TEST(span_in_use_survives_a_full_store)
{
    sd_vf_spans sp;
    sd_vf_spans_init(&sp);
    sd_vf_spans_sync(&sp, C, 4);
    res_buf b;
    int32_t t[] = {20, 21, 22};
    res_make(&b, 4, sd_vf_spans_hash(&sp, 4), t, 3, true);
    sd_vf_spans_add(&sp, &b.res, VOCAB, 0); /* the oldest */
    sd_proposal p;
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 4, 4, true, &p, NULL), 3);
    const sd_tokprob *q0 = p.q[0];
    int32_t u[] = {20, 23};
    for (int i = 0; i < 3 * SD_VF_MAX_SPANS; i++) { /* shorter spans that would push it out */
        res_make(&b, 4, sd_vf_spans_hash(&sp, 4), u, 2, true);
        ck_assert(sd_vf_spans_add(&sp, &b.res, VOCAB, 0));
    }
    ck_assert_int_eq(sp.n, SD_VF_MAX_SPANS);
    ck_assert_int_eq(q0[0].token, 20); /* the proposal's q is still there */
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 4, 4, true, &p, NULL), 3);
    ck_assert_int_eq(p.tokens[2], 22);
    sd_vf_spans_release(&sp);
}
END_TEST

/* Files a dry answer (no q) for the committed base C[0..base) with tokens t[0..n). */
static void add_dry(sd_vf_spans *sp, res_buf *b, uint32_t base, const int32_t *t, int n)
{
    res_make(b, base, sd_vf_spans_hash(sp, base), t, n, false);
    b->res.dry = true;
    ck_assert(sd_vf_spans_add(sp, &b->res, VOCAB, 0));
}

START_TEST(dry_answers_counted_when_valid)
{
    sd_vf_spans sp;
    sd_vf_spans_init(&sp);
    sd_vf_spans_sync(&sp, C, 6);
    res_buf b;
    sd_proposal p;
    /* nothing at all past C[0..6): no tokens, dry */
    add_dry(&sp, &b, 6, C, 0);
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 6, 4, false, &p, NULL), 0);
    ck_assert_uint_eq(sp.dry, 1);
    ck_assert_int_eq(sp.n, 0);
    /* assumed in-flight {2, 6} and nothing after: dry once those are committed */
    sp.dry = 0;
    int32_t t[] = {2, 6};
    add_dry(&sp, &b, 6, t, 2);
    sd_vf_spans_sync(&sp, C, 8);
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 8, 4, false, &p, NULL), 0);
    ck_assert_uint_eq(sp.dry, 1);
    /* a dry answer for a base that was not committed: stale, not dry */
    sp.dry = 0;
    int32_t wrong[] = {2, 7};
    add_dry(&sp, &b, 6, wrong, 2);
    uint64_t stale = sp.stale;
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 8, 4, false, &p, NULL), 0);
    ck_assert_uint_eq(sp.dry, 0);
    ck_assert_uint_eq(sp.stale, stale + 1);
    /* drafts of a dry span still serve until its tokens are all committed (only the end is dry) */
    int32_t g[] = {5, 3};
    add_dry(&sp, &b, 8, g, 2);
    ck_assert_int_eq(sd_vf_spans_pick(&sp, C, 8, 4, false, &p, NULL), 2);
    ck_assert_uint_eq(sp.dry, 0);
    sd_vf_spans_release(&sp);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vf_span");
    TCase *tc = tcase_create("spans");
    tcase_add_test(tc, hashes_match_the_chain);
    tcase_add_test(tc, valid_span_gives_its_drafts);
    tcase_add_test(tc, stale_spans_are_never_verified);
    tcase_add_test(tc, bad_results_refused);
    tcase_add_test(tc, span_in_use_survives_a_full_store);
    tcase_add_test(tc, dry_answers_counted_when_valid);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
