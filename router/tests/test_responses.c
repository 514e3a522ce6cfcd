/* test_responses.c — the Responses API over the chat machinery
 * (router/responses.h): parsing into a chat request, refusals naming the
 * field, the response object and the streaming event format. */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "responses.h"
#include "testutil.h"

static sd_status parse(const char *body, sd_api_req *r, sd_api_err *e)
{
    return sd_api_parse_responses(body, strlen(body), r, e);
}

START_TEST(input_forms)
{
    sd_api_req r;
    sd_api_err e;
    ck_assert_int_eq(parse("{\"model\": \"m\", \"input\": \"hi\", \"instructions\": \"be brief\", "
                           "\"max_output_tokens\": 9, \"temperature\": 0.5, \"stream\": true, \"store\": true, "
                           "\"reasoning\": null, \"metadata\": {\"a\": \"b\"}}",
                           &r, &e),
                     SD_OK);
    ck_assert(r.responses && r.kind == SD_API_CHAT && r.stream);
    ck_assert_uint_eq(r.n_messages, 2);
    ck_assert_str_eq(r.messages[0].role, "system");
    ck_assert_str_eq(r.messages[0].content, "be brief");
    ck_assert_str_eq(r.messages[1].role, "user");
    ck_assert_str_eq(r.messages[1].content, "hi");
    ck_assert_int_eq(r.max_tokens, 9);
    ck_assert_float_eq_tol(r.sampling.temperature, 0.5, 1e-6);
    ck_assert_str_eq(r.model, "m");
    sd_api_req_clear(&r);
    ck_assert_int_eq(
        parse("{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_text\", \"text\": \"a\"},"
              "{\"type\": \"input_text\", \"text\": \"b\"}]}, {\"type\": \"message\", \"role\": "
              "\"assistant\", \"content\": [{\"type\": \"output_text\", \"text\": \"c\"}]}, "
              "{\"role\": \"user\", \"content\": \"d\"}]}",
              &r, &e),
        SD_OK);
    ck_assert_uint_eq(r.n_messages, 3);
    ck_assert_str_eq(r.messages[0].content, "ab");
    ck_assert_str_eq(r.messages[1].role, "assistant");
    ck_assert_str_eq(r.messages[2].content, "d");
    ck_assert_int_eq(r.max_tokens, -1);
    sd_api_req_clear(&r);
}
END_TEST

static const struct {
    const char *body, *param, *msg;
} BAD[] = {
    {"{}", "input", "required"},
    {"{\"input\": 3}", "input", "string or a non-empty array"},
    {"{\"input\": []}", "input", "string or a non-empty array"},
    {"{\"input\": \"x\", \"instructions\": 1}", "instructions", "string"},

    {"{\"input\": [{\"role\": \"user\", \"content\": [{\"type\": \"input_image\", \"image_url\": \"u\"}]}]}",
     "input[0].content", "input_image"},
    {"{\"input\": \"x\", \"tools\": [{\"type\": \"web_search\"}]}", "tools", "web_search tools are not supported"},
    {"{\"input\": \"x\", \"tools\": {\"type\": \"function\"}}", "tools", "must be an array"},
    {"{\"input\": \"x\", \"tool_choice\": \"required\"}", "tool_choice", "needs 'tools'"},
    {"{\"input\": [{\"type\": \"function_call\", \"name\": \"f\", \"arguments\": \"{}\"}]}", "input[0]", "call_id"},
    {"{\"input\": [{\"type\": \"function_call_output\", \"call_id\": \"c\"}]}", "input[0]", "string 'output'"},
    {"{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\"}}}", "text.format", "schema in 'schema'"},
    {"{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"xml\"}}}", "text.format", "must be \"text\""},
    {"{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", \"schema\": {\"not\": {}}}}}",
     "response_format", "'not' is not supported"},
    {"{\"input\": \"x\", \"previous_response_id\": \"resp_1\"}", "previous_response_id", "not stored"},
    {"{\"input\": \"x\", \"background\": true}", "background", "not supported"},
    {"{\"input\": \"x\", \"include\": [\"message.output_text.logprobs\"]}", "include", "not supported"},
    {"{\"input\": \"x\", \"max_output_tokens\": 0}", "max_output_tokens", "positive"},
    {"{\"input\": \"x\", \"temperature\": 9}", "temperature", "between"},
    {"[1]", NULL, "JSON object"},
};

START_TEST(refusals)
{
    sd_api_req r;
    sd_api_err e;
    ck_assert_int_eq(parse(BAD[_i].body, &r, &e), SD_ERR_ARG);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.param, BAD[_i].param ? BAD[_i].param : "");
    ck_assert_msg(strstr(e.message, BAD[_i].msg), "%s: %s", BAD[_i].body, e.message);
}
END_TEST

START_TEST(object_and_events)
{
    sd_api_req q;
    sd_api_err e;
    ck_assert_int_eq(parse("{\"input\": \"x\", \"max_output_tokens\": 4}", &q, &e), SD_OK);
    sd_resp r = {"resp_1", "msg_1", "tiny", 7, "incomplete", true, 3, 4, 0, &q, "abc", 3, NULL, false};
    json_t *o = sd_resp_object(&r);
    ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "response");
    ck_assert_str_eq(json_string_value(json_object_get(o, "status")), "incomplete");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "incomplete_details"), "reason")),
                     "max_output_tokens");
    json_t *item = json_array_get(json_object_get(o, "output"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(item, "id")), "msg_1");
    json_t *part = json_array_get(json_object_get(item, "content"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(part, "type")), "output_text");
    ck_assert_str_eq(json_string_value(json_object_get(part, "text")), "abc");
    json_t *u = json_object_get(o, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(u, "total_tokens")), 7);
    ck_assert_int_eq(json_integer_value(json_object_get(o, "max_output_tokens")), 4);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(o, "text"), "format"), "type")),
                     "text");
    json_decref(o);
    r.status = "in_progress";
    o = sd_resp_object(&r);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "output")), 0);
    ck_assert(json_is_null(json_object_get(o, "usage")));
    json_decref(o);
    unsigned seq = 5;
    char *ev = sd_resp_event("response.output_text.delta", json_pack("{s:s}", "delta", "d"), &seq);
    ck_assert_uint_eq(seq, 6);
    ck_assert_ptr_nonnull(strstr(ev, "event: response.output_text.delta\ndata: {"));
    ck_assert_ptr_nonnull(strstr(ev, "\"sequence_number\":5"));
    ck_assert_ptr_nonnull(strstr(ev, "\"type\":\"response.output_text.delta\""));
    ck_assert(strlen(ev) > 2 && !strcmp(ev + strlen(ev) - 2, "\n\n"));
    free(ev);
    sd_api_req_clear(&q);
    /* text.format json_object: JSON output, echoed in the response */
    ck_assert_int_eq(parse("{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_object\"}}}", &q, &e), SD_OK);
    ck_assert(q.sampling.json_object);
    r.req = &q;
    o = sd_resp_object(&r);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(o, "text"), "format"), "type")),
                     "json_object");
    json_decref(o);
    sd_api_req_clear(&q);
    /* text.format json_schema: the schema goes on, and comes back in the response */
    ck_assert_int_eq(parse("{\"input\": \"x\", \"text\": {\"format\": {\"type\": \"json_schema\", \"name\": \"n\", "
                           "\"strict\": true, \"schema\": {\"type\": \"integer\"}}}}",
                           &q, &e),
                     SD_OK);
    ck_assert_str_eq(q.sampling.json_schema, "{\"type\":\"integer\"}");
    r.req = &q;
    o = sd_resp_object(&r);
    json_t *fmt = json_object_get(json_object_get(o, "text"), "format");
    ck_assert_str_eq(json_string_value(json_object_get(fmt, "type")), "json_schema");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(fmt, "schema"), "type")), "integer");
    json_decref(o);
    sd_api_req_clear(&q);
}
END_TEST

/* Function tools: tools / tool_choice become chat's, function_call and
 * function_call_output input items an assistant message's tool_calls and
 * tool messages; calls come back as function_call output items (the
 * message left out when it is empty and not streamed). */
START_TEST(function_tools)
{
    sd_api_req q;
    sd_api_err e;
    ck_assert_int_eq(parse("{\"input\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"type\": \"function_call\", "
                           "\"call_id\": \"call_1\", \"name\": \"get\", \"arguments\": \"{\\\"c\\\": 1}\"}, {\"type\": "
                           "\"function_call\", \"call_id\": \"call_2\", \"name\": \"now\", \"arguments\": \"{}\"}, "
                           "{\"type\": \"function_call_output\", \"call_id\": \"call_1\", \"output\": \"sunny\"}], "
                           "\"tools\": [{\"type\": \"function\", \"name\": \"get\", \"description\": \"d\", "
                           "\"parameters\": {\"type\": \"object\"}}, {\"type\": \"function\", \"name\": \"now\"}], "
                           "\"tool_choice\": {\"type\": \"function\", \"name\": \"now\"}}",
                           &q, &e),
                     SD_OK);
    ck_assert_uint_eq(json_array_size(q.tools), 2);
    ck_assert_str_eq(
        json_string_value(json_object_get(json_object_get(json_array_get(q.tools, 0), "function"), "description")),
        "d");
    ck_assert(q.tools_forced);
    ck_assert_str_eq(q.tool_name, "now");
    ck_assert_uint_eq(q.n_messages, 3); /* user, assistant with two calls, tool */
    ck_assert_str_eq(q.messages[1].role, "assistant");
    ck_assert_uint_eq(json_array_size(json_object_get(q.messages[1].fields, "tool_calls")), 2);
    ck_assert_str_eq(q.messages[2].role, "tool");
    ck_assert_str_eq(json_string_value(json_object_get(q.messages[2].fields, "tool_call_id")), "call_1");
    json_t *calls = json_loads("[{\"id\": \"call_9-0\", \"type\": \"function\", \"function\": {\"name\": \"now\", "
                               "\"arguments\": \"{}\"}}]",
                               0, NULL);
    sd_resp r = {"resp_1", "msg_1", "tiny", 7, "completed", false, 3, 4, 0, &q, "", 0, calls, false};
    json_t *o = sd_resp_object(&r);
    json_t *out = json_object_get(o, "output"), *fc = json_array_get(out, 0);
    ck_assert_uint_eq(json_array_size(out), 1);
    ck_assert_str_eq(json_string_value(json_object_get(fc, "type")), "function_call");
    ck_assert_str_eq(json_string_value(json_object_get(fc, "call_id")), "call_9-0");
    ck_assert_str_eq(json_string_value(json_object_get(fc, "id")), "fc_9-0");
    ck_assert_str_eq(json_string_value(json_object_get(fc, "name")), "now");
    ck_assert_str_eq(json_string_value(json_object_get(fc, "arguments")), "{}");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(o, "tool_choice"), "name")), "now");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(o, "tools"), 1), "name")), "now");
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(json_object_get(o, "text"), "format"), "type")),
                     "text"); /* the forced choice's schema is no text format */
    json_decref(o);
    r.streamed = true; /* streamed: the announced message stays */
    o = sd_resp_object(&r);
    ck_assert_uint_eq(json_array_size(json_object_get(o, "output")), 2);
    json_decref(o);
    json_decref(calls);
    sd_api_req_clear(&q);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("responses");
    TCase *tc = tcase_create("api");
    tcase_add_test(tc, input_forms);
    tcase_add_loop_test(tc, refusals, 0, (int)(sizeof BAD / sizeof *BAD));
    tcase_add_test(tc, object_and_events);
    tcase_add_test(tc, function_tools);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
