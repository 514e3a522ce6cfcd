/* test_json_num.c — common/base/json_num.h: whole numbers from JSON, the
 * one reading of config.json's and the API's integer fields. */
#include <jansson.h>

#include "json_num.h"
#include "testutil.h"

static bool whole(const char *text, long long *out)
{
    json_t *v = json_loads(text, JSON_DECODE_ANY, NULL);
    ck_assert_ptr_nonnull(v);
    bool ok = sd_json_whole(v, out);
    json_decref(v);
    return ok;
}

START_TEST(whole_numbers)
{
    long long x = 0;
    ck_assert(whole("16", &x) && x == 16);
    ck_assert(whole("-3", &x) && x == -3);
    ck_assert(whole("16.0", &x) && x == 16); /* Python writes floats so */
    ck_assert(whole("1e3", &x) && x == 1000);
    ck_assert(whole("9007199254740991.0", &x) && x == 9007199254740991LL);
    ck_assert(whole("9223372036854775807", &x) && x == 9223372036854775807LL); /* an integer: exact */
    const char *bad[] = {"16.5", "9007199254740992.0", "1e300", "\"16\"", "true", "null", "[1]", "-0.25"};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        x = 7;
        ck_assert_msg(!whole(bad[i], &x), "%s taken as whole", bad[i]);
        ck_assert_int_eq(x, 7);
    }
    ck_assert(!sd_json_whole(NULL, &x));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("json_num");
    TCase *tc = tcase_create("whole");
    tcase_add_test(tc, whole_numbers);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
