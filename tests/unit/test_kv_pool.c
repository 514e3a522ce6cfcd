/* test_kv_pool.c — paged KV block accounting: reserve / commit / release
 * (LIFO), admission, exhaustion confined to one sequence, shared prefixes,
 * and the pool returning to its initial free count after any mix. */
#include <stdlib.h>

#include "kv_pool.h"
#include "testutil.h"

START_TEST(reserve_commit_release)
{
    sd_kv_pool *p = sd_kv_pool_new(8, 16);
    sd_kv_seq s;
    sd_kv_seq_init(&s);
    ck_assert_int_eq(sd_kv_reserve(p, &s, 20), SD_OK); /* 2 blocks */
    ck_assert_int_eq(s.n_blocks, 2);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 6);
    sd_kv_commit(p, &s, 20);
    ck_assert_int_eq(s.len, 20);
    /* speculative step: reserve K+1 = 6, accept 3 */
    ck_assert_int_eq(sd_kv_reserve(p, &s, 6), SD_OK);
    ck_assert_int_eq(s.n_blocks, 2);
    ck_assert_int_eq(sd_kv_reserve(p, &s, 13), SD_OK); /* re-reserve: 33 positions → 3 blocks */
    ck_assert_int_eq(s.n_blocks, 3);
    sd_kv_commit(p, &s, 3);
    ck_assert_int_eq(s.len, 23);
    ck_assert_int_eq(s.n_blocks, 2); /* surplus block released */
    ck_assert_int_eq(sd_kv_pool_free_count(p), 6);
    sd_kv_truncate(p, &s, 10);
    ck_assert_int_eq(s.n_blocks, 1);
    sd_kv_seq_release(p, &s);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 8);
    sd_kv_pool_free(p);
}
END_TEST

START_TEST(lifo_reuse)
{
    sd_kv_pool *p = sd_kv_pool_new(8, 4);
    sd_kv_seq s;
    sd_kv_seq_init(&s);
    ck_assert_int_eq(sd_kv_reserve(p, &s, 12), SD_OK);
    int32_t last = s.blocks[2];
    sd_kv_commit(p, &s, 8); /* releases the third block */
    sd_kv_seq t;
    sd_kv_seq_init(&t);
    ck_assert_int_eq(sd_kv_reserve(p, &t, 1), SD_OK);
    ck_assert_int_eq(t.blocks[0], last); /* most recently freed comes back first */
    sd_kv_seq_release(p, &s);
    sd_kv_seq_release(p, &t);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 8);
    sd_kv_pool_free(p);
}
END_TEST

START_TEST(exhaustion_is_local)
{
    sd_kv_pool *p = sd_kv_pool_new(4, 16);
    sd_kv_seq a, b;
    sd_kv_seq_init(&a);
    sd_kv_seq_init(&b);
    ck_assert(sd_kv_can_admit(p, 64));
    ck_assert(!sd_kv_can_admit(p, 65));
    ck_assert_int_eq(sd_kv_reserve(p, &a, 40), SD_OK); /* 3 blocks */
    sd_kv_commit(p, &a, 40);
    ck_assert_int_eq(sd_kv_reserve(p, &b, 17), SD_ERR_NOSPACE); /* needs 2, 1 free */
    ck_assert_int_eq(b.n_blocks, 0);
    ck_assert_int_eq(a.len, 40);
    ck_assert_int_eq(a.n_blocks, 3);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 1);
    ck_assert_int_eq(sd_kv_reserve(p, &b, 16), SD_OK);
    sd_kv_seq_release(p, &a);
    sd_kv_seq_release(p, &b);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 4);
    sd_kv_pool_free(p);
}
END_TEST

START_TEST(shared_prefix_refcounts)
{
    sd_kv_pool *p = sd_kv_pool_new(8, 4);
    sd_kv_seq a, b;
    sd_kv_seq_init(&a);
    sd_kv_seq_init(&b);
    ck_assert_int_eq(sd_kv_reserve(p, &a, 10), SD_OK);
    sd_kv_commit(p, &a, 10);
    ck_assert_int_eq(sd_kv_seq_share_prefix(p, &b, &a, 10), SD_OK);
    ck_assert_int_eq(b.len, 8); /* two full blocks shared */
    ck_assert_int_eq(sd_kv_pool_free_count(p), 5);
    sd_kv_seq_release(p, &a);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 6); /* only a's own block freed */
    sd_kv_seq_release(p, &b);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 8);
    sd_kv_pool_free(p);
}
END_TEST

/* Random mix of requests finishing, failing, cancelling mid-step. */
START_TEST(random_mix_returns_to_initial)
{
    sd_kv_pool *p = sd_kv_pool_new(64, 16);
    sd_kv_seq seqs[12];
    for (int i = 0; i < 12; i++) sd_kv_seq_init(&seqs[i]);
    unsigned r = 12345;
    for (int step = 0; step < 20000; step++) {
        r = r * 1103515245u + 12345u;
        sd_kv_seq *s = &seqs[(r >> 8) % 12];
        int op = (int)((r >> 16) % 10);
        if (op < 6) {
            int k = 1 + (int)((r >> 20) % 9);
            if (sd_kv_reserve(p, s, k) == SD_OK) sd_kv_commit(p, s, (int)((r >> 24) % (unsigned)(k + 1)));
        } else if (op < 8) {
            sd_kv_reserve(p, s, 5); /* cancelled mid-step: reservation left dangling, then release */
            sd_kv_seq_release(p, s);
        } else if (op < 9) {
            sd_kv_truncate(p, s, s->len / 2);
        } else {
            sd_kv_seq_release(p, s);
        }
        int used = 0;
        for (int i = 0; i < 12; i++) used += seqs[i].n_blocks;
        ck_assert_int_eq(used + sd_kv_pool_free_count(p), 64);
    }
    for (int i = 0; i < 12; i++) sd_kv_seq_release(p, &seqs[i]);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 64);
    sd_kv_pool_free(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_pool");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, reserve_commit_release);
    tcase_add_test(tc, lifo_reuse);
    tcase_add_test(tc, exhaustion_is_local);
    tcase_add_test(tc, shared_prefix_refcounts);
    tcase_add_test(tc, random_mix_returns_to_initial);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
