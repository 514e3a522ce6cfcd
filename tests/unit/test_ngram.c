/* test_ngram.c — the n-gram (prompt lookup) proposer: longest n first, most
 * recent occurrence wins, k truncation, short continuations at the end of
 * the context, no match, one-hot q, option validation. */
#include <stdlib.h>
#include <string.h>

#include "ngram.h"
#include "testutil.h"

static sd_proposer *make(int n_min, int n_max)
{
    sd_proposer *p = NULL;
    char err[256];
    sd_status st = sd_ngram_new(n_min, n_max, &p, err, sizeof err);
    ck_assert_msg(st == SD_OK, "ngram_new: %s", err);
    return p;
}

/* Proposes for one context and checks the result against want[0..nw). */
static void expect(sd_proposer *p, const int32_t *ctx, int n, int k, const int32_t *want, int nw)
{
    sd_propose_item it = {.seq_id = 1, .context = ctx, .n_context = n, .k = k};
    sd_proposal out;
    char err[256];
    ck_assert_int_eq(p->ops->propose(p, &it, 1, &out, err, sizeof err), SD_OK);
    ck_assert_int_eq(out.n, nw);
    for (int i = 0; i < nw; i++) ck_assert_int_eq(out.tokens[i], want[i]);
    for (int i = 0; i < nw; i++) ck_assert_ptr_null(out.q[i]);
}

START_TEST(most_recent_wins)
{
    sd_proposer *p = make(1, 4);
    /* "7 8" occurs at 0 (followed by 1 2) and at 4 (followed by 3 4): the later wins */
    int32_t ctx[] = {7, 8, 1, 2, 7, 8, 3, 4, 9, 7, 8};
    int32_t want[] = {3, 4, 9, 7, 8};
    expect(p, ctx, 11, 5, want, 5);
    sd_proposer_free(p);
}
END_TEST

START_TEST(longer_n_preferred)
{
    sd_proposer *p = make(1, 4);
    /* suffix "1 2 3": the 3-gram occurs at 0 (-> 10 11); only the 1-gram "3"
     * occurs more recently (-> 20). The 3-gram wins. */
    int32_t ctx[] = {1, 2, 3, 10, 11, 5, 3, 20, 6, 1, 2, 3};
    int32_t want[] = {10, 11, 5};
    expect(p, ctx, 12, 3, want, 3);
    /* restricted to n = 1 the most recent "3" wins */
    sd_proposer *p1 = make(1, 1);
    int32_t want1[] = {20, 6};
    expect(p1, ctx, 12, 2, want1, 2);
    sd_proposer_free(p);
    sd_proposer_free(p1);
}
END_TEST

START_TEST(no_match_and_min_n)
{
    sd_proposer *p = make(1, 4);
    int32_t ctx[] = {1, 2, 3, 4, 5};
    expect(p, ctx, 5, 4, NULL, 0);
    expect(p, ctx, 1, 4, NULL, 0);
    /* with n_min 2 a lone repeated token is not enough */
    sd_proposer *p2 = make(2, 4);
    int32_t ctx2[] = {5, 9, 1, 5};
    expect(p2, ctx2, 4, 4, NULL, 0);
    int32_t want[] = {9, 1, 5};
    expect(p, ctx2, 4, 4, want, 3);
    sd_proposer_free(p);
    sd_proposer_free(p2);
}
END_TEST

START_TEST(k_truncation_and_short_tail)
{
    sd_proposer *p = make(1, 4);
    int32_t ctx[] = {1, 2, 3, 4, 5, 6, 7, 8, 1, 2};
    int32_t want[] = {3, 4, 5};
    expect(p, ctx, 10, 3, want, 3);
    expect(p, ctx, 10, 0, NULL, 0);
    /* the continuation runs to the end of the context: shorter than k */
    int32_t ctx2[] = {4, 4, 4};
    int32_t want2[] = {4};
    expect(p, ctx2, 3, 8, want2, 1); /* "4 4" recurs ending at 1, followed by one 4 */
    int32_t ctx3[] = {1, 2, 9, 1, 2};
    int32_t want3[] = {9, 1, 2};
    expect(p, ctx3, 5, 16, want3, 3);
    /* k above SD_MAX_DRAFT is clamped */
    int32_t big[40];
    for (int i = 0; i < 40; i++) big[i] = i % 20;
    sd_propose_item it = {.seq_id = 2, .context = big, .n_context = 40, .k = 100};
    sd_proposal out;
    char err[64];
    ck_assert_int_eq(p->ops->propose(p, &it, 1, &out, err, sizeof err), SD_OK);
    ck_assert_int_eq(out.n, SD_MAX_DRAFT);
    for (int i = 0; i < out.n; i++) ck_assert_int_eq(out.tokens[i], i);
    sd_proposer_free(p);
}
END_TEST

START_TEST(one_hot_q_and_batch)
{
    sd_proposer *p = make(1, 3);
    int32_t a[] = {1, 2, 3, 1, 2};
    int32_t b[] = {8, 9, 8};
    int32_t c[] = {5, 6};
    sd_sampling s = sd_sampling_default();
    s.temperature = 0.7f;
    sd_propose_item it[3] = {
        {.seq_id = 1, .context = a, .n_context = 5, .k = 2, .sampling = &s, .want_q = true},
        {.seq_id = 2, .context = b, .n_context = 3, .k = 4, .want_q = true},
        {.seq_id = 3, .context = c, .n_context = 2, .k = 4, .want_q = true},
    };
    sd_proposal out[3];
    char err[64];
    ck_assert_int_eq(p->ops->propose(p, it, 3, out, err, sizeof err), SD_OK);
    ck_assert_int_eq(out[0].n, 2);
    ck_assert_int_eq(out[0].tokens[0], 3);
    ck_assert_int_eq(out[0].tokens[1], 1);
    ck_assert_int_eq(out[1].n, 2);
    ck_assert_int_eq(out[1].tokens[0], 9);
    ck_assert_int_eq(out[1].tokens[1], 8);
    ck_assert_int_eq(out[2].n, 0);
    for (int i = 0; i < 2; i++)
        for (int t = 0; t < out[i].n; t++) {
            ck_assert_ptr_nonnull(out[i].q[t]);
            ck_assert_uint_eq(out[i].nq[t], 1);
            ck_assert_int_eq(out[i].q[t][0].token, out[i].tokens[t]);
            ck_assert_float_eq(out[i].q[t][0].prob, 1.0f);
        }
    p->ops->release(p, 1);
    sd_proposer_free(p);
}
END_TEST

START_TEST(long_context_lookup)
{
    /* a few thousand tokens: the match near the start is still found */
    int n = 5000;
    int32_t *ctx = malloc((size_t)n * sizeof *ctx);
    for (int i = 0; i < n; i++) ctx[i] = 1000 + i;
    ctx[10] = 1;
    ctx[11] = 2;
    ctx[n - 2] = 1;
    ctx[n - 1] = 2;
    int32_t out[SD_MAX_DRAFT];
    int matched = -1;
    ck_assert_int_eq(sd_ngram_lookup(ctx, n, 1, 4, 4, out, &matched), 4);
    ck_assert_int_eq(matched, 2);
    ck_assert_int_eq(out[0], 1012);
    ck_assert_int_eq(out[3], 1015);
    free(ctx);
}
END_TEST

START_TEST(bad_options)
{
    sd_proposer *p = (sd_proposer *)1;
    char err[256] = "";
    ck_assert_int_eq(sd_ngram_new(0, 4, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(p);
    ck_assert(strlen(err) > 0);
    ck_assert_int_eq(sd_ngram_new(3, 2, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_int_eq(sd_ngram_new(1, SD_NGRAM_MAX_N + 1, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_int_eq(sd_ngram_new(SD_NGRAM_DEFAULT_MIN, SD_NGRAM_DEFAULT_MAX, &p, err, sizeof err), SD_OK);
    sd_proposer_free(p);
    sd_proposer_free(NULL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("ngram");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, most_recent_wins);
    tcase_add_test(tc, longer_n_preferred);
    tcase_add_test(tc, no_match_and_min_n);
    tcase_add_test(tc, k_truncation_and_short_tail);
    tcase_add_test(tc, one_hot_q_and_batch);
    tcase_add_test(tc, long_context_lookup);
    tcase_add_test(tc, bad_options);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
