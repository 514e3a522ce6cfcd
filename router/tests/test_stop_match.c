/* test_stop_match.c — stop strings across chunk boundaries (stop_match.c). */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "stop_match.h"
#include "testutil.h"

/* Feeds pieces one by one; returns the concatenated output and whether a
 * stop matched (after how many pieces, in *at). */
static char *run(const char *const *stops, size_t ns, const char *const *pieces, size_t np, int *at)
{
    sd_stop *s;
    ck_assert_int_eq(sd_stop_new(stops, ns, &s, NULL, 0), SD_OK);
    char *acc = calloc(1, 4096);
    *at = -1;
    for (size_t i = 0; i < np; i++) {
        const char *o;
        size_t n;
        bool hit = sd_stop_feed(s, pieces[i], strlen(pieces[i]), &o, &n);
        strncat(acc, o, n);
        if (hit) {
            *at = (int)i;
            break;
        }
    }
    if (*at < 0) {
        const char *o;
        size_t n;
        sd_stop_flush(s, &o, &n);
        strncat(acc, o, n);
    }
    sd_stop_free(s);
    return acc;
}

START_TEST(no_stops_pass_through)
{
    const char *p[] = {"hello", " ", "world"};
    int at;
    char *out = run(NULL, 0, p, 3, &at);
    ck_assert_str_eq(out, "hello world");
    ck_assert_int_eq(at, -1);
    free(out);
    const char *stops[] = {"x"}, *o; /* flushed before any text (a generation of no text) */
    size_t on = 1;
    sd_stop *s;
    ck_assert_int_eq(sd_stop_new(stops, 1, &s, NULL, 0), SD_OK);
    sd_stop_flush(s, &o, &on);
    ck_assert_uint_eq(on, 0);
    sd_stop_free(s);
}
END_TEST

/* n stop strings without the list is refused (none: fine). */
START_TEST(null_list_refused)
{
    char err[128] = "";
    sd_stop *s = (sd_stop *)err; /* not NULL: the call clears it */
    ck_assert_int_eq(sd_stop_new(NULL, 2, &s, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(s);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(sd_stop_new(NULL, 1, &s, NULL, 0), SD_ERR_ARG);
    ck_assert_int_eq(sd_stop_new(NULL, 0, &s, NULL, 0), SD_OK);
    sd_stop_free(s);
}
END_TEST

START_TEST(match_inside_one_chunk)
{
    const char *st[] = {"STOP"};
    const char *p[] = {"abcSTOPdef"};
    int at;
    char *out = run(st, 1, p, 1, &at);
    ck_assert_str_eq(out, "abc");
    ck_assert_int_eq(at, 0);
    free(out);
}
END_TEST

START_TEST(match_across_chunks)
{
    const char *st[] = {"\n\nclass"};
    const char *p[] = {"x = 1", "\n", "\ncl", "ass Foo"};
    int at;
    char *out = run(st, 1, p, 4, &at);
    ck_assert_str_eq(out, "x = 1");
    ck_assert_int_eq(at, 3);
    free(out);
}
END_TEST

START_TEST(holdback_is_released_when_it_diverges)
{
    const char *st[] = {"abc"};
    sd_stop *s;
    ck_assert_int_eq(sd_stop_new(st, 1, &s, NULL, 0), SD_OK);
    const char *o;
    size_t n;
    ck_assert(!sd_stop_feed(s, "xxab", 4, &o, &n));
    ck_assert_uint_eq(n, 2); /* "ab" held back */
    ck_assert(!memcmp(o, "xx", 2));
    ck_assert(!sd_stop_feed(s, "d", 1, &o, &n));
    ck_assert_uint_eq(n, 3);
    ck_assert(!memcmp(o, "abd", 3));
    sd_stop_flush(s, &o, &n);
    ck_assert_uint_eq(n, 0);
    sd_stop_free(s);
}
END_TEST

START_TEST(earliest_of_several_wins)
{
    const char *st[] = {"world", "lo w"};
    const char *p[] = {"hel", "lo wor", "ld"};
    int at;
    char *out = run(st, 2, p, 3, &at);
    ck_assert_str_eq(out, "hel");
    ck_assert_int_eq(at, 1);
    free(out);
}
END_TEST

START_TEST(held_text_flushed_at_end)
{
    const char *st[] = {"END"};
    const char *p[] = {"the E", "N"};
    int at;
    char *out = run(st, 1, p, 2, &at);
    ck_assert_str_eq(out, "the EN");
    ck_assert_int_eq(at, -1);
    free(out);
}
END_TEST

START_TEST(utf8_stop_split_bytes)
{
    const char *st[] = {"é!"};
    const char *p[] = {"caf", "é", "!", "more"};
    int at;
    char *out = run(st, 1, p, 4, &at);
    ck_assert_str_eq(out, "caf");
    ck_assert_int_eq(at, 2);
    free(out);
}
END_TEST

START_TEST(feed_after_match_emits_nothing)
{
    const char *st[] = {"x"};
    sd_stop *s;
    ck_assert_int_eq(sd_stop_new(st, 1, &s, NULL, 0), SD_OK);
    const char *o;
    size_t n;
    ck_assert(sd_stop_feed(s, "axb", 3, &o, &n));
    ck_assert_uint_eq(n, 1);
    ck_assert(sd_stop_matched(s));
    ck_assert(sd_stop_feed(s, "more", 4, &o, &n));
    ck_assert_uint_eq(n, 0);
    sd_stop_free(s);
}
END_TEST

START_TEST(char_by_char_equals_whole)
{
    const char *st[] = {"</s>", "##"};
    const char *text = "abc <x> #a# </ s> done </s> tail";
    sd_stop *s;
    ck_assert_int_eq(sd_stop_new(st, 2, &s, NULL, 0), SD_OK);
    char acc[128] = "";
    bool hit = false;
    for (size_t i = 0; text[i] && !hit; i++) {
        const char *o;
        size_t n;
        hit = sd_stop_feed(s, text + i, 1, &o, &n);
        strncat(acc, o, n);
    }
    ck_assert(hit);
    ck_assert_str_eq(acc, "abc <x> #a# </ s> done ");
    sd_stop_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stop_match");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, no_stops_pass_through);
    tcase_add_test(tc, null_list_refused);
    tcase_add_test(tc, match_inside_one_chunk);
    tcase_add_test(tc, match_across_chunks);
    tcase_add_test(tc, holdback_is_released_when_it_diverges);
    tcase_add_test(tc, earliest_of_several_wins);
    tcase_add_test(tc, held_text_flushed_at_end);
    tcase_add_test(tc, utf8_stop_split_bytes);
    tcase_add_test(tc, feed_after_match_emits_nothing);
    tcase_add_test(tc, char_by_char_equals_whole);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
