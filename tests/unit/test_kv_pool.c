/* test_kv_pool.c — paged KV block accounting: reserve / commit / release
 * (LIFO), admission, exhaustion confined to one sequence, shared prefixes,
 * and the pool returning to its initial free count after any mix. */
#include <stdlib.h>
#include <string.h>

#include <stdbool.h>

#include "kv_pool.h"
#include "testutil.h"

START_TEST(reserve_commit_release)
{
    sd_kv_pool *p;
    ck_assert_int_eq(sd_kv_pool_new(8, 16, &p, NULL, 0), SD_OK);
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
    sd_kv_pool *p;
    ck_assert_int_eq(sd_kv_pool_new(8, 4, &p, NULL, 0), SD_OK);
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
    sd_kv_pool *p;
    ck_assert_int_eq(sd_kv_pool_new(4, 16, &p, NULL, 0), SD_OK);
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

/* Fills seq with n committed positions holding toks and registers its full blocks. */
static void committed(sd_kv_pool *p, sd_kv_seq *seq, const int32_t *toks, int n)
{
    ck_assert_int_eq(sd_kv_reserve(p, seq, n), SD_OK);
    sd_kv_commit(p, seq, n);
    for (int i = 0; i < n / sd_kv_pool_block_size(p); i++)
        sd_kv_cache_register(p, seq, i, toks + i * sd_kv_pool_block_size(p));
}

START_TEST(prefix_cache_match_take_release)
{
    sd_kv_pool *p;
    ck_assert_int_eq(sd_kv_pool_new(8, 4, &p, NULL, 0), SD_OK);
    const int32_t t[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    int32_t m[3];
    sd_kv_seq a, b;
    sd_kv_seq_init(&a);
    sd_kv_seq_init(&b);
    committed(p, &a, t, 10); /* blocks 0, 1 full and registered; block 2 partial */
    ck_assert_int_eq(sd_kv_cache_match(p, t, 3, m), 2);
    ck_assert_int_eq(m[0], a.blocks[0]);
    ck_assert_int_eq(m[1], a.blocks[1]);
    ck_assert_int_eq(sd_kv_seq_take(p, &b, m, 2), SD_OK);
    ck_assert_int_eq(b.len, 8);
    ck_assert_int_eq(sd_kv_seq_take(p, &b, m, 2), SD_ERR_ARG); /* not empty */
    ck_assert_int_eq(sd_kv_pool_free_count(p), 5);
    sd_kv_seq_release(p, &a);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 6); /* only a's own block freed */
    ck_assert_int_eq(sd_kv_pool_cached_count(p), 0);
    sd_kv_seq_release(p, &b);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 8);
    ck_assert_int_eq(sd_kv_pool_cached_count(p), 2); /* nobody holds them: cached */
    /* found again after their holders left; taken off the evictable list */
    ck_assert_int_eq(sd_kv_cache_match(p, t, 3, m), 2);
    ck_assert_int_eq(sd_kv_seq_take(p, &b, m, 2), SD_OK);
    ck_assert_int_eq(sd_kv_pool_cached_count(p), 0);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 6);
    sd_kv_seq_release(p, &b);
    sd_kv_pool_free(p);
}
END_TEST

START_TEST(prefix_cache_chain_and_tokens)
{
    sd_kv_pool *p;
    ck_assert_int_eq(sd_kv_pool_new(8, 4, &p, NULL, 0), SD_OK);
    const int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8};
    const int32_t u[8] = {9, 2, 3, 4, 5, 6, 7, 8}; /* same second block after another first */
    const int32_t v[8] = {1, 2, 3, 4, 5, 6, 7, 0}; /* differs in the second block's last token */
    int32_t m[2];
    sd_kv_seq a;
    sd_kv_seq_init(&a);
    committed(p, &a, t, 8);
    ck_assert_int_eq(sd_kv_cache_match(p, u, 2, m), 0);
    ck_assert_int_eq(sd_kv_cache_match(p, v, 2, m), 1);
    ck_assert_int_eq(sd_kv_cache_match(p, t, 1, m), 1); /* at most max_blocks */
    /* a block that is not full or not committed is not registered */
    sd_kv_seq b;
    sd_kv_seq_init(&b);
    ck_assert_int_eq(sd_kv_reserve(p, &b, 8), SD_OK);
    sd_kv_commit(p, &b, 3);
    sd_kv_cache_register(p, &b, 0, u);
    ck_assert_int_eq(sd_kv_cache_match(p, u, 2, m), 0);
    /* truncating into a registered block unregisters it (it is written again) */
    sd_kv_truncate(p, &a, 6);
    ck_assert_int_eq(sd_kv_cache_match(p, t, 2, m), 1);
    sd_kv_seq_release(p, &a);
    sd_kv_seq_release(p, &b);
    sd_kv_pool_free(p);
}
END_TEST

START_TEST(prefix_cache_evicts_least_recent)
{
    sd_kv_pool *p;
    ck_assert_int_eq(sd_kv_pool_new(4, 4, &p, NULL, 0), SD_OK);
    const int32_t t[8] = {1, 2, 3, 4, 5, 6, 7, 8}, u[4] = {7, 7, 7, 7};
    int32_t m[2];
    sd_kv_seq a, b, c;
    sd_kv_seq_init(&a);
    sd_kv_seq_init(&b);
    sd_kv_seq_init(&c);
    committed(p, &a, t, 8);
    committed(p, &b, u, 4);
    sd_kv_seq_release(p, &b); /* u's block released first: least recent */
    sd_kv_seq_release(p, &a); /* then t's two, the last block first */
    ck_assert_int_eq(sd_kv_pool_cached_count(p), 3);
    ck_assert_int_eq(sd_kv_reserve(p, &c, 8), SD_OK); /* 1 free block + 1 evicted */
    ck_assert_int_eq((int)sd_kv_pool_evictions(p), 1);
    ck_assert_int_eq(sd_kv_cache_match(p, u, 1, m), 0); /* u's went */
    ck_assert_int_eq(sd_kv_cache_match(p, t, 2, m), 2);
    ck_assert_int_eq(sd_kv_reserve(p, &c, 12), SD_OK); /* one more: t's second block (released first) */
    ck_assert_int_eq(sd_kv_cache_match(p, t, 2, m), 1);
    ck_assert_int_eq(sd_kv_reserve(p, &c, 20), SD_ERR_NOSPACE);
    sd_kv_seq_release(p, &c);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 4);
    sd_kv_pool_free(p);
}
END_TEST

/* Random mix of requests finishing, failing, cancelling mid-step. */
START_TEST(random_mix_returns_to_initial)
{
    sd_kv_pool *p;
    ck_assert_int_eq(sd_kv_pool_new(64, 16, &p, NULL, 0), SD_OK);
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
        } else if ((r >> 28) & 1) { /* register, or take the cached prefix of a small-alphabet text */
            int32_t toks[64 * 16], m[64];
            for (int i = 0; i < 64 * 16; i++) toks[i] = (int32_t)((i * 7 + (int)((r >> 4) & 3)) % 3);
            if (s->n_blocks == 0) {
                int n = sd_kv_cache_match(p, toks, 8, m);
                ck_assert_int_eq(sd_kv_seq_take(p, s, m, n), SD_OK);
            } else {
                for (int i = 0; i < s->len / 16; i++) sd_kv_cache_register(p, s, i, toks + i * 16);
            }
        } else {
            sd_kv_seq_release(p, s);
        }
        int used = 0; /* distinct blocks held (a taken prefix is held by several) */
        bool held[64] = {false};
        for (int i = 0; i < 12; i++)
            for (int k = 0; k < seqs[i].n_blocks; k++) {
                used += !held[seqs[i].blocks[k]];
                held[seqs[i].blocks[k]] = true;
            }
        ck_assert_int_eq(used + sd_kv_pool_free_count(p), 64);
    }
    for (int i = 0; i < 12; i++) sd_kv_seq_release(p, &seqs[i]);
    ck_assert_int_eq(sd_kv_pool_free_count(p), 64);
    sd_kv_pool_free(p);
}
END_TEST

/* A pool without blocks or positions is refused: a status, no pool, a message. */
START_TEST(bad_sizes_refused)
{
    char err[128] = "";
    sd_kv_pool *p = (sd_kv_pool *)err; /* not NULL: the call clears it */
    ck_assert_int_eq(sd_kv_pool_new(0, 16, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(p);
    ck_assert_msg(strstr(err, "KV pool"), "%s", err);
    ck_assert_int_eq(sd_kv_pool_new(8, 0, &p, NULL, 0), SD_ERR_ARG);
    ck_assert_int_eq(sd_kv_pool_new(-1, 4, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(p);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("kv_pool");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, reserve_commit_release);
    tcase_add_test(tc, lifo_reuse);
    tcase_add_test(tc, exhaustion_is_local);
    tcase_add_test(tc, prefix_cache_match_take_release);
    tcase_add_test(tc, prefix_cache_chain_and_tokens);
    tcase_add_test(tc, prefix_cache_evicts_least_recent);
    tcase_add_test(tc, random_mix_returns_to_initial);
    tcase_add_test(tc, bad_sizes_refused);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
