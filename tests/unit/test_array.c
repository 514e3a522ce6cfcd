/* test_array.c — kernels/array.h: geometric growth keeps contents, reports
 * the capacity it reached, refuses impossible sizes without touching the
 * array, and grows parallel arrays together. */
#include <stdint.h>
#include <stdlib.h>

#include "array.h"
#include "testutil.h"

START_TEST(grow_keeps_contents)
{
    int32_t *a = NULL;
    size_t cap = 0;
    ck_assert_int_eq(sd_grow(&a, &cap, 3, sizeof *a), SD_OK);
    ck_assert_uint_eq(cap, SD_GROW_MIN);
    for (int i = 0; i < 3; i++) a[i] = i * 7;
    ck_assert_int_eq(sd_grow(&a, &cap, 5, sizeof *a), SD_OK); /* fits: nothing moves */
    ck_assert_uint_eq(cap, SD_GROW_MIN);
    ck_assert_int_eq(sd_grow(&a, &cap, 9, sizeof *a), SD_OK); /* doubles */
    ck_assert_uint_eq(cap, 2 * SD_GROW_MIN);
    ck_assert_int_eq(sd_grow(&a, &cap, 1000, sizeof *a), SD_OK); /* jumps to the request */
    ck_assert_uint_eq(cap, 1000);
    for (int i = 0; i < 3; i++) ck_assert_int_eq(a[i], i * 7);
    a[999] = 1;
    free(a);
}
END_TEST

START_TEST(grow_refuses_overflow)
{
    double *a = NULL;
    size_t cap = 0;
    ck_assert_int_eq(sd_grow(&a, &cap, 4, sizeof *a), SD_OK);
    double *before = a;
    ck_assert_int_eq(sd_grow(&a, &cap, SIZE_MAX / 4, sizeof *a), SD_ERR_NOMEM);
    ck_assert_ptr_eq(a, before);
    ck_assert_uint_eq(cap, SD_GROW_MIN);
    free(a);
}
END_TEST

START_TEST(grow_all_together)
{
    int *x = NULL;
    double *y = NULL;
    float *rows = NULL; /* rows of 5 floats */
    size_t cap = 0;
    const sd_grow_item items[] = {SD_GROW_ITEM(x), SD_GROW_ITEM(y), {&rows, 5 * sizeof *rows}};
    ck_assert_int_eq(sd_grow_all(items, 3, &cap, 20), SD_OK);
    ck_assert_uint_eq(cap, 20);
    x[19] = 1;
    y[19] = 2.0;
    rows[19 * 5 + 4] = 3.0f;
    ck_assert_int_eq(sd_grow_all(items, 3, &cap, 21), SD_OK);
    ck_assert_uint_eq(cap, 40);
    ck_assert_int_eq(x[19], 1);
    ck_assert(y[19] == 2.0);
    ck_assert(rows[19 * 5 + 4] == 3.0f);
    ck_assert_int_eq(sd_grow_all(items, 3, &cap, SIZE_MAX / 2), SD_ERR_NOMEM);
    ck_assert_uint_eq(cap, 40);
    ck_assert_int_eq(x[19], 1);
    free(x);
    free(y);
    free(rows);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("array");
    TCase *tc = tcase_create("grow");
    tcase_add_test(tc, grow_keeps_contents);
    tcase_add_test(tc, grow_refuses_overflow);
    tcase_add_test(tc, grow_all_together);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
