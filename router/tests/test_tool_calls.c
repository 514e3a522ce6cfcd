/* test_tool_calls.c — Hermes tool calls in generated text (tool_calls.c):
 * blocks parsed into OpenAI tool_call objects (arguments as JSON text, ids
 * from the base), the last block may be unterminated, anything malformed
 * gives no calls; the splitter emits content up to the marker whatever the
 * chunking, and gives the held text back as content when it is no call;
 * a forced tool choice's JSON read as calls; the JSON format (llama3_json,
 * mistral). */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "testutil.h"
#include "tool_calls.h"

static json_t *parse(const char *t) { return sd_tool_calls_parse(t, strlen(t), "call_x"); }

START_TEST(parses_blocks)
{
    json_t *c = parse("<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\", \"days\": 2}}\n"
                      "</tool_call>\n<tool_call>{\"name\": \"now\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}"
                      "</tool_call>\n");
    ck_assert_ptr_nonnull(c);
    ck_assert_uint_eq(json_array_size(c), 2);
    json_t *a = json_array_get(c, 0), *f = json_object_get(a, "function");
    ck_assert_str_eq(json_string_value(json_object_get(a, "id")), "call_x-0");
    ck_assert_str_eq(json_string_value(json_object_get(a, "type")), "function");
    ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "get_weather");
    json_t *args = json_loads(json_string_value(json_object_get(f, "arguments")), 0, NULL);
    ck_assert_str_eq(json_string_value(json_object_get(args, "city")), "Paris");
    ck_assert_int_eq(json_integer_value(json_object_get(args, "days")), 2);
    json_decref(args);
    f = json_object_get(json_array_get(c, 1), "function"); /* arguments given as a string holding an object */
    ck_assert_str_eq(json_string_value(json_object_get(f, "arguments")), "{\"tz\":\"UTC\"}");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 1), "id")), "call_x-1");
    json_decref(c);
    c = parse("<tool_call>{\"name\": \"f\", \"arguments\": {}}"); /* ended with EOS before the closing tag */
    ck_assert_uint_eq(json_array_size(c), 1);
    json_decref(c);
}
END_TEST

START_TEST(malformed_is_no_call)
{
    static const char *const bad[] = {
        "<tool_call>{\"name\": \"f\", \"arguments\": {}</tool_call>",           /* JSON cut */
        "<tool_call>{\"arguments\": {}}</tool_call>",                           /* no name */
        "<tool_call>{\"name\": \"\", \"arguments\": {}}</tool_call>",           /* empty name */
        "<tool_call>{\"name\": \"f\", \"arguments\": [1]}</tool_call>",         /* arguments not an object */
        "<tool_call>{\"name\": \"f\", \"arguments\": \"x\"}</tool_call>",       /* ... nor a string holding one */
        "<tool_call>{\"name\": \"f\", \"arguments\": {}}</tool_call> and then", /* text after */
        "<tool_call></tool_call>",
        "",
    };
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++) ck_assert_msg(parse(bad[i]) == NULL, "case %zu", i);
}
END_TEST

/* The same text split into chunks of every size: the same content and calls. */
START_TEST(splitter_any_chunking)
{
    const char *text = "Let me check.<tool_c <tool_call>\n{\"name\": \"get\", \"arguments\": {\"q\": 1}}\n</tool_call>";
    size_t n = strlen(text);
    for (size_t chunk = 1; chunk <= n; chunk++) {
        sd_tool_split s = {0};
        sd_buf content = {0};
        for (size_t i = 0; i < n; i += chunk) sd_tool_split_feed(&s, text + i, i + chunk > n ? n - i : chunk, &content);
        json_t *c = sd_tool_split_end(&s, "id", &content);
        ck_assert_msg(c && json_array_size(c) == 1, "chunk %zu", chunk);
        ck_assert_str_eq(content.p, "Let me check.<tool_c ");
        json_decref(c);
        sd_buf_free(&content);
    }
    /* no marker: everything is content, the tail that looked like one too */
    sd_tool_split s = {0};
    sd_buf content = {0};
    sd_tool_split_feed(&s, "a < b <tool_ca", 14, &content);
    ck_assert_uint_eq(content.len, 6); /* "a < b " out; "<tool_ca" held */
    ck_assert_ptr_null(sd_tool_split_end(&s, "id", &content));
    ck_assert_str_eq(content.p, "a < b <tool_ca");
    sd_buf_free(&content);
    /* a marker then no call: the held text comes back as content */
    sd_tool_split t = {0};
    sd_buf c2 = {0};
    sd_tool_split_feed(&t, "x<tool_call>not json", 20, &c2);
    ck_assert_str_eq(c2.p, "x");
    ck_assert_ptr_null(sd_tool_split_end(&t, "id", &c2));
    ck_assert_str_eq(c2.p, "x<tool_call>not json");
    sd_buf_free(&c2);
}
END_TEST

/* A forced tool choice: the whole output is JSON (required: an array of
 * {"name", "parameters"}; named: the arguments), held whatever it holds. */
START_TEST(forced_calls)
{
    const char *req = "[{\"name\": \"get\", \"parameters\": {\"q\": [1, 2]}}, {\"name\": \"put\", \"parameters\": {}}]";
    json_t *c = sd_tool_calls_forced(req, strlen(req), NULL, "call_r");
    ck_assert_int_eq(json_array_size(c), 2);
    json_t *f = json_object_get(json_array_get(c, 0), "function");
    ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "get");
    ck_assert_str_eq(json_string_value(json_object_get(f, "arguments")), "{\"q\":[1,2]}");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(c, 1), "id")), "call_r-1");
    json_decref(c);
    const char *args = "{\"city\": \"Paris\"}";
    c = sd_tool_calls_forced(args, strlen(args), "weather", "call_n");
    ck_assert_int_eq(json_array_size(c), 1);
    f = json_object_get(json_array_get(c, 0), "function");
    ck_assert_str_eq(json_string_value(json_object_get(f, "name")), "weather");
    ck_assert_str_eq(json_string_value(json_object_get(f, "arguments")), "{\"city\":\"Paris\"}");
    json_decref(c);
    /* cut short, or not the shape: no calls */
    static const char *const bad[] = {"[{\"name\": \"get\", \"param", "[]", "{\"name\": \"get\"}",
                                      "[{\"name\": \"\", \"parameters\": {}}]",
                                      "[{\"name\": \"a\", \"parameters\": 3}]"};
    for (size_t i = 0; i < sizeof bad / sizeof *bad; i++)
        ck_assert_msg(!sd_tool_calls_forced(bad[i], strlen(bad[i]), NULL, "id"), "%s", bad[i]);
    ck_assert_ptr_null(sd_tool_calls_forced("[1]", 3, "weather", "id"));
    /* the splitter holds everything, and gives it back when it is no call */
    sd_tool_split t = {0};
    sd_buf content = {0};
    sd_tool_split_force(&t, "weather");
    sd_tool_split_feed(&t, args, 5, &content);
    sd_tool_split_feed(&t, args + 5, strlen(args) - 5, &content);
    ck_assert_uint_eq(content.len, 0);
    c = sd_tool_split_end(&t, "id", &content);
    ck_assert_int_eq(json_array_size(c), 1);
    json_decref(c);
    sd_tool_split_force(&t, NULL);
    sd_tool_split_feed(&t, "[{\"na", 5, &content);
    ck_assert_ptr_null(sd_tool_split_end(&t, "id", &content));
    ck_assert_str_eq(content.p, "[{\"na");
    sd_buf_free(&content);
}
END_TEST

/* The JSON format (llama3_json, mistral): the whole answer is calls — one
 * or more objects with "parameters" or "arguments" (';' between them), or
 * an array of them; anything else is content, streamed as soon as its first
 * byte after whitespace is not '{' or '['. */
START_TEST(json_format)
{
    ck_assert_int_eq(sd_tool_fmt_parse("hermes"), SD_TOOL_FMT_HERMES);
    ck_assert_int_eq(sd_tool_fmt_parse("llama3_json"), SD_TOOL_FMT_JSON);
    ck_assert_int_eq(sd_tool_fmt_parse("mistral"), SD_TOOL_FMT_JSON);
    ck_assert_int_eq(sd_tool_fmt_parse("pythonic"), -1);
    static const struct {
        const char *text;
        int calls;
    } cases[] = {
        {"{\"name\": \"get\", \"parameters\": {\"q\": 1}}", 1},
        {" \n{\"name\": \"get\", \"parameters\": {}}; {\"name\": \"put\", \"arguments\": \"{\\\"a\\\": 2}\"}\n", 2},
        {"[{\"name\": \"get\", \"arguments\": {\"q\": 1}}, {\"name\": \"put\", \"arguments\": {}}]", 2},
        {"{\"name\": \"get\", \"parameters\": {}} and more", 0},
        {"{\"name\": \"get\"}", 0},
        {"[]", 0},
        {"[{\"name\": \"get\", \"arguments\": {}}, 3]", 0},
        {"{\"name\": \"get\", \"parame", 0},
        {"hello", 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        const char *t = cases[i].text;
        json_t *c = sd_tool_calls_json(t, strlen(t), "id");
        ck_assert_msg((int)json_array_size(c) == cases[i].calls, "%s", t);
        if (cases[i].calls == 2)
            ck_assert_str_eq(
                json_string_value(json_object_get(json_object_get(json_array_get(c, 1), "function"), "name")), "put");
        json_decref(c);
        /* through the splitter, fed a byte at a time: calls, or the text back as content */
        sd_tool_split sp = {.fmt = SD_TOOL_FMT_JSON};
        sd_buf content = {0};
        for (size_t k = 0; t[k]; k++) sd_tool_split_feed(&sp, t + k, 1, &content);
        if (!strcmp(t, "hello")) ck_assert_str_eq(content.p, "hello"); /* streamed before the end */
        c = sd_tool_split_end(&sp, "id", &content);
        ck_assert_int_eq((int)json_array_size(c), cases[i].calls);
        ck_assert_msg(cases[i].calls || (content.p && !strcmp(content.p, t)), "%s came back as '%s'", t, content.p);
        json_decref(c);
        sd_buf_free(&content);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tool_calls");
    TCase *tc = tcase_create("hermes");
    tcase_add_test(tc, parses_blocks);
    tcase_add_test(tc, malformed_is_no_call);
    tcase_add_test(tc, splitter_any_chunking);
    tcase_add_test(tc, forced_calls);
    tcase_add_test(tc, json_format);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
