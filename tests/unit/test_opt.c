/* test_opt.c — common/base/opt.h: numbers are accepted only whole and in range,
 * and the message names the option, the range and the value; secrets (API
 * keys) come from one source, trimmed, never empty. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>
#include <string.h>

#include "opt.h"
#include "testutil.h"

START_TEST(integers)
{
    char err[256];
    int v = -1;
    ck_assert_int_eq(sd_opt_int("42", "--n", 0, 100, &v, err, sizeof err), SD_OK);
    ck_assert_int_eq(v, 42);
    ck_assert_int_eq(sd_opt_int("-3", "--n", -5, 5, &v, err, sizeof err), SD_OK);
    ck_assert_int_eq(v, -3);
    const char *bad[] = {"", "x", "4x", "1.5", "101", "-1", "99999999999999999999", " "};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        v = 7;
        ck_assert_int_eq(sd_opt_int(bad[i], "--n", 0, 100, &v, err, sizeof err), SD_ERR_ARG);
        ck_assert_int_eq(v, 7);
    }
    ck_assert_int_eq(sd_opt_int("101", "--max-batch", 1, 100, &v, err, sizeof err), SD_ERR_ARG);
    ck_assert_str_eq(err, "--max-batch must be an integer in [1, 100], got '101'");
    int64_t w;
    ck_assert_int_eq(sd_opt_i64("1099511627776", "--max-body", 0, INT64_MAX, &w, err, sizeof err), SD_OK);
    ck_assert(w == (int64_t)1 << 40);
}
END_TEST

START_TEST(seeds)
{
    char err[256];
    uint64_t s = 0;
    ck_assert_int_eq(sd_opt_u64("18446744073709551615", "--seed", &s, err, sizeof err), SD_OK);
    ck_assert(s == UINT64_MAX); /* a double would have rounded it */
    ck_assert_int_eq(sd_opt_u64("9007199254740993", "--seed", &s, err, sizeof err), SD_OK);
    ck_assert(s == 9007199254740993ULL);
    ck_assert_int_eq(sd_opt_u64("-1", "--seed", &s, err, sizeof err), SD_ERR_ARG);
    ck_assert_int_eq(sd_opt_u64("18446744073709551616", "--seed", &s, err, sizeof err), SD_ERR_ARG);
    ck_assert_int_eq(sd_opt_u64("", "--seed", &s, err, sizeof err), SD_ERR_ARG);
}
END_TEST

START_TEST(numbers)
{
    char err[256];
    double d;
    float f;
    ck_assert_int_eq(sd_opt_double("0.25", "--p", 0, 1, &d, err, sizeof err), SD_OK);
    ck_assert(d == 0.25);
    ck_assert_int_eq(sd_opt_float("1e-3", "--p", 0, 1, &f, err, sizeof err), SD_OK);
    ck_assert_float_eq_tol(f, 1e-3f, 1e-9f);
    const char *bad[] = {"", "nan", "inf", "1.5", "-0.1", "0.5x"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++)
        ck_assert_int_eq(sd_opt_double(bad[i], "--p", 0, 1, &d, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--p must be a number in [0, 1]"));
}
END_TEST

/* An API key from the command line, a file or the environment: never an
 * empty one, never two sources, nothing that cannot sit in a header. */
START_TEST(secrets)
{
    char err[256], *key;
    const char *from;
    char path[] = "/tmp/specd-test-key-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs(" \tfile-key \r\nsecond line\n", f);
    fclose(f);
    ck_assert_int_eq(sd_opt_secret(NULL, path, NULL, &key, &from, err, sizeof err), SD_OK);
    ck_assert_str_eq(key, "file-key");
    ck_assert_str_eq(from, path);
    free(key);
    ck_assert_int_eq(sd_opt_secret("arg-key", NULL, "SD_TEST_KEY_ENV", &key, &from, err, sizeof err), SD_OK);
    ck_assert_str_eq(key, "arg-key");
    free(key);
    unsetenv("SD_TEST_KEY_ENV");
    ck_assert_int_eq(sd_opt_secret(NULL, NULL, "SD_TEST_KEY_ENV", &key, &from, err, sizeof err), SD_OK);
    ck_assert_ptr_null(key); /* no key anywhere: none */
    setenv("SD_TEST_KEY_ENV", "env-key", 1);
    ck_assert_int_eq(sd_opt_secret(NULL, NULL, "SD_TEST_KEY_ENV", &key, &from, err, sizeof err), SD_OK);
    ck_assert_str_eq(key, "env-key");
    ck_assert_str_eq(from, "SD_TEST_KEY_ENV");
    free(key);
    setenv("SD_TEST_KEY_ENV", "", 1);
    ck_assert_int_eq(sd_opt_secret(NULL, NULL, "SD_TEST_KEY_ENV", &key, &from, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "empty"));
    ck_assert_ptr_null(key);
    ck_assert_int_eq(sd_opt_secret("  ", NULL, NULL, &key, &from, err, sizeof err), SD_ERR_ARG);
    ck_assert_int_eq(sd_opt_secret("a b", NULL, NULL, &key, &from, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "control"));
    ck_assert_int_eq(sd_opt_secret("x", path, NULL, &key, &from, err, sizeof err), SD_ERR_ARG);
    ck_assert_int_eq(sd_opt_secret(NULL, "/nonexistent/key", NULL, &key, &from, err, sizeof err), SD_ERR_IO);
    unlink(path);
    unsetenv("SD_TEST_KEY_ENV");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("opt");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, integers);
    tcase_add_test(tc, seeds);
    tcase_add_test(tc, numbers);
    tcase_add_test(tc, secrets);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
