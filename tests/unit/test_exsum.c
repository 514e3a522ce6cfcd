/* test_exsum.c — Check suite for common/base/exsum.c: exact sums, rounded once.
 *
 * References: sums whose exact value a 113-bit __float128 holds (terms
 * within 2^-80 .. 1 of each other, few enough), rounded once to double;
 * hand-made cases where a double sum rounds differently from the exact one;
 * and the same terms in shuffled orders, which must give the same bits. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "exsum.h"
#include "testutil.h"

/* xorshift64*: deterministic terms */
static uint64_t next(uint64_t *x)
{
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 2685821657736338717ull;
}

/* A float in [2^-lo_exp, 1): random significand and exponent. */
static float rand_float(uint64_t *x, int lo_exp)
{
    uint64_t r = next(x);
    float m = 1.0f + (float)(r & 0x7fffff) / 8388608.0f;
    return ldexpf(m, -1 - (int)((r >> 23) % (uint64_t)lo_exp));
}

static double sum_floats(const float *f, int n)
{
    sd_exsum s;
    sd_exsum_init(&s);
    for (int i = 0; i < n; i++) sd_exsum_add_float(&s, f[i]);
    return sd_exsum_value(&s);
}

START_TEST(test_exact_against_float128)
{
    enum { N = 3000 };
    float f[N];
    uint64_t x = 12345;
    for (int rep = 0; rep < 20; rep++) {
        __float128 q = 0;
        for (int i = 0; i < N; i++) {
            f[i] = rand_float(&x, 70);
            q += f[i]; /* exact: every term a multiple of 2^-94, the sum below 2^12 */
        }
        double want = (double)q, got = sum_floats(f, N);
        ck_assert_msg(memcmp(&want, &got, sizeof got) == 0, "rep %d: %a against %a", rep, got, want);
    }
}
END_TEST

START_TEST(test_rounds_once)
{
    /* 1 + 2^-53 + 2^-53: a double sum gives 1 (the first add ties to even), the exact one 1 + 2^-52 */
    float a[] = {1.0f, 0x1.0p-53f, 0x1.0p-53f};
    ck_assert(sum_floats(a, 3) == 1.0 + 0x1.0p-52);
    ck_assert((1.0 + 0x1.0p-53) + 0x1.0p-53 == 1.0);
    /* a tie: 1 + 2^-53 exactly rounds to even (1); a tiny term more breaks it upward */
    float b[] = {1.0f, 0x1.0p-53f};
    ck_assert(sum_floats(b, 2) == 1.0);
    float c[] = {1.0f, 0x1.0p-53f, 0x1.0p-140f};
    ck_assert(sum_floats(c, 3) == 1.0 + 0x1.0p-52);
    /* 1 + 3 * 2^-54 = 1 + 0.75 ulp: up */
    float d[] = {1.0f, 0x1.0p-54f, 0x1.0p-53f};
    ck_assert(sum_floats(d, 3) == 1.0 + 0x1.0p-52);
    /* subnormals count: 2^23 terms of the smallest is 2^-126 */
    sd_exsum s;
    sd_exsum_init(&s);
    for (int i = 0; i < (1 << 23); i++) sd_exsum_add_float(&s, 0x1.0p-149f);
    ck_assert(sd_exsum_value(&s) == 0x1.0p-126);
    float z[] = {0.0f, 0.0f};
    ck_assert(sum_floats(z, 2) == 0.0);
}
END_TEST

START_TEST(test_order_free)
{
    enum { N = 5000 };
    float f[N];
    uint64_t x = 99;
    for (int i = 0; i < N; i++) f[i] = i % 7 == 0 ? ldexpf(1.0f + (float)(i % 13) / 16.0f, -140) : rand_float(&x, 126);
    double first = sum_floats(f, N);
    for (int rep = 0; rep < 10; rep++) {
        for (int i = N - 1; i > 0; i--) { /* Fisher-Yates */
            int j = (int)(next(&x) % (uint64_t)(i + 1));
            float t = f[i];
            f[i] = f[j];
            f[j] = t;
        }
        double again = sum_floats(f, N);
        ck_assert(memcmp(&first, &again, sizeof again) == 0);
        sd_exsum s; /* the array form gives the same */
        sd_exsum_init(&s);
        sd_exsum_add_floats(&s, f, N);
        double arr = sd_exsum_value(&s);
        ck_assert(memcmp(&first, &arr, sizeof arr) == 0);
    }
}
END_TEST

START_TEST(test_ignores_bad_terms)
{
    float f[] = {0.5f, -1.0f, NAN, INFINITY, -INFINITY, 0.25f, -0.0f};
    ck_assert(sum_floats(f, 7) == 0.75);
    sd_exsum s;
    sd_exsum_init(&s);
    sd_exsum_add_floats(&s, f, 7);
    ck_assert(sd_exsum_value(&s) == 0.75);
    sd_exsum_add_double(&s, -2.0);
    sd_exsum_add_double(&s, NAN);
    sd_exsum_add_double(&s, INFINITY);
    ck_assert(sd_exsum_value(&s) == 0.75);
}
END_TEST

START_TEST(test_doubles_on_the_grid)
{
    /* differences of floats rounded to double, as the verifier's residual: against float128 */
    enum { N = 2000 };
    uint64_t x = 7;
    sd_exsum s;
    sd_exsum_init(&s);
    __float128 q = 0;
    for (int i = 0; i < N; i++) {
        float p = rand_float(&x, 40), r = rand_float(&x, 40);
        double d = p > r ? (double)p - (double)r : (double)r - (double)p;
        sd_exsum_add_double(&s, d);
        q += d;
        if (i % 3 == 0) {
            sd_exsum_add_float(&s, p);
            q += p;
        }
    }
    double want = (double)q, got = sd_exsum_value(&s);
    ck_assert_msg(memcmp(&want, &got, sizeof got) == 0, "%a against %a", got, want);
    /* large counts: 2^20 ones */
    sd_exsum_init(&s);
    for (int i = 0; i < (1 << 20); i++) sd_exsum_add_float(&s, 1.0f);
    ck_assert(sd_exsum_value(&s) == 1048576.0);
}
END_TEST

static Suite *exsum_suite(void)
{
    Suite *s = suite_create("exsum");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_exact_against_float128);
    tcase_add_test(tc, test_rounds_once);
    tcase_add_test(tc, test_order_free);
    tcase_add_test(tc, test_ignores_bad_terms);
    tcase_add_test(tc, test_doubles_on_the_grid);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(exsum_suite()); }
