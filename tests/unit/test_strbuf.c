/* test_strbuf.c — common/base/strbuf.h: appends keep a NUL after the bytes,
 * take hands the string over, and whole-file reads respect their limit and
 * name the file in errors. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "strbuf.h"
#include "testutil.h"

START_TEST(append_and_take)
{
    sd_buf b = {0};
    ck_assert_int_eq(sd_buf_add(&b, "", 0), SD_OK);
    ck_assert_ptr_null(b.p); /* nothing allocated for nothing */
    ck_assert_int_eq(sd_buf_adds(&b, "abc"), SD_OK);
    ck_assert_int_eq(sd_buf_add(&b, "d\0e", 3), SD_OK);
    ck_assert_uint_eq(b.len, 6);
    ck_assert_int_eq(memcmp(b.p, "abcd\0e", 7), 0); /* and the NUL after */
    for (int i = 0; i < 1000; i++) ck_assert_int_eq(sd_buf_adds(&b, "xy"), SD_OK);
    ck_assert_uint_eq(b.len, 2006);
    ck_assert_int_eq(b.p[b.len], '\0');
    sd_buf_clear(&b);
    ck_assert_uint_eq(b.len, 0);
    ck_assert_str_eq(b.p, "");
    sd_buf_adds(&b, "kept");
    char *s = sd_buf_take(&b);
    ck_assert_str_eq(s, "kept");
    ck_assert_ptr_null(b.p);
    free(s);
    s = sd_buf_take(&b); /* empty: "" */
    ck_assert_str_eq(s, "");
    free(s);
}
END_TEST

START_TEST(read_file)
{
    char path[] = "/tmp/sd-strbuf-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    for (int i = 0; i < 50000; i++) fputs("0123456789", f);
    fclose(f);
    char *text, err[512];
    size_t len;
    ck_assert_int_eq(sd_read_file(path, 1 << 20, &text, &len, err, sizeof err), SD_OK);
    ck_assert_uint_eq(len, 500000);
    ck_assert_int_eq(text[len], '\0');
    ck_assert_int_eq(memcmp(text + 499990, "0123456789", 10), 0);
    free(text);
    ck_assert_int_eq(sd_read_file(path, 1000, &text, &len, err, sizeof err), SD_ERR_NOSPACE);
    ck_assert_ptr_null(text);
    ck_assert_ptr_nonnull(strstr(err, path));
    unlink(path);
    ck_assert_int_eq(sd_read_file(path, 1000, &text, &len, err, sizeof err), SD_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "cannot open"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("strbuf");
    TCase *tc = tcase_create("buf");
    tcase_add_test(tc, append_and_take);
    tcase_add_test(tc, read_file);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
