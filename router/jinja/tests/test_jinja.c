/* test_jinja.c — hostile chat templates (a --chat-template file, a model's
 * tokenizer_config.json) get an error and never crash or hang the router:
 * integer division traps, values that contain themselves, nesting deep
 * enough to exhaust the stack, invalid UTF-8 in joined literals, integer
 * overflow, runaway loops and indents; ordinary arithmetic is unchanged. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "jinja.h"

/* Renders src with empty variables: SD_OK and *out, or the status with err. */
static sd_status render(const char *src, char **out, char *err, size_t errlen)
{
    sd_jinja *t = NULL;
    *out = NULL;
    sd_status st = sd_jinja_parse(src, &t, err, errlen);
    if (st != SD_OK) return st;
    json_t *vars = json_object();
    st = sd_jinja_render(t, vars, out, err, errlen);
    json_decref(vars);
    sd_jinja_free(t);
    return st;
}

static void expect_out(const char *src, const char *want)
{
    char *out, err[256] = "";
    ck_assert_msg(render(src, &out, err, sizeof err) == SD_OK, "%s: %s", src, err);
    ck_assert_str_eq(out, want);
    free(out);
}

static void expect_err(const char *src, const char *why)
{
    char *out, err[256] = "";
    ck_assert_msg(render(src, &out, err, sizeof err) != SD_OK, "%.60s rendered", src);
    ck_assert_msg(strstr(err, why) != NULL, "%.60s: error '%s' lacks '%s'", src, err, why);
    ck_assert_ptr_null(out);
}

/* "pre" n times, then mid, then "post" n times. */
static char *repeat(const char *pre, int n, const char *mid, const char *post)
{
    size_t a = strlen(pre), b = strlen(mid), c = strlen(post);
    char *s = malloc(n * (a + c) + b + 1), *p = s;
    for (int i = 0; i < n; i++, p += a) memcpy(p, pre, a);
    memcpy(p, mid, b), p += b;
    for (int i = 0; i < n; i++, p += c) memcpy(p, post, c);
    *p = '\0';
    return s;
}

START_TEST(arithmetic_traps_and_overflow)
{
    expect_err("{{ (-9223372036854775807 - 1) // -1 }}", "overflow");
    expect_out("{{ (-9223372036854775807 - 1) % -1 }}", "0");
    expect_out("{{ (-9223372036854775807 - 1) is divisibleby(-1) }}", "True");
    expect_err("{{ 9223372036854775807 + 1 }}", "overflow");
    expect_err("{{ 4611686018427387904 * 4 }}", "overflow");
    expect_err("{{ 1e300|int }}", "64-bit");
    expect_out("{{ 7 // 2 }} {{ -7 // 2 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ -5|abs }}", "3 -4 2 1024 5");
    expect_out("{{ range(9223372036854775800, 9223372036854775807, 5)|list }}",
               "[9223372036854775800, 9223372036854775805]");
}
END_TEST

START_TEST(self_containing_values)
{
    expect_err("{% set x = [] %}{% set y = [x] %}{{ x.append(y) }}{{ x }}", "nested too deeply");
    expect_err("{% set ns = namespace() %}{% set ns.a = [ns] %}{{ ns }}", "nested too deeply");
    expect_err("{% set x = [] %}{% for i in range(200) %}{% set x = [x] %}{% endfor %}{{ x }}", "nested too deeply");
    expect_out("{% set x = [] %}{{ x.append([1, [2]]) }}{{ x }}", "None[[1, [2]]]");
}
END_TEST

START_TEST(deep_nesting)
{
    /* parentheses, not, lists: the parser's depth; a + chain (built by a loop): the tree's height */
    static const struct {
        const char *pre;
        int n;
        const char *mid, *post;
    } deep[] = {{"(", 20000, "1", ")"}, {"not ", 50000, "1", ""}, {"1+", 50000, "1", ""}, {"[", 20000, "", "]"}};
    for (size_t i = 0; i < sizeof deep / sizeof deep[0]; i++) {
        char *s = repeat(deep[i].pre, deep[i].n, deep[i].mid, deep[i].post), *t = repeat("{{ ", 1, s, " }}");
        expect_err(t, "nested too deeply");
        free(s), free(t);
    }
    expect_out("{{ ((((1 + 2)))) * 3 }} {{ not not 1 }}", "9 True");
}
END_TEST

START_TEST(invalid_utf8_literals)
{
    expect_err("{{ 'a' '\xc3' 'b' }}", "UTF-8");
    expect_err("{{ '\xc3' }}", "UTF-8");
    expect_out("{{ 'a' 'b' \"c\" }}", "abc");
}
END_TEST

START_TEST(runaway_templates)
{
    expect_err("{{ 'x'|tojson(indent=2000000000) }}", "indent");
    expect_err("{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", "loops more than");
    expect_err("{{ f(a=) }}", ""); /* a keyword argument without a value: an error (its name freed) */
    expect_err("{{ 's'|replace('', -f) }}", "");
    expect_out("{{ {'a': [1]}|tojson(indent=2) }}", "{\n  \"a\": [\n    1\n  ]\n}");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jinja");
    TCase *tc = tcase_create("hostile");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, arithmetic_traps_and_overflow);
    tcase_add_test(tc, self_containing_values);
    tcase_add_test(tc, deep_nesting);
    tcase_add_test(tc, invalid_utf8_literals);
    tcase_add_test(tc, runaway_templates);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
