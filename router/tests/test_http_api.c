/* test_http_api.c — request parsing / validation (every bad input → status,
 * type, param, message) and the JSON / SSE response shapes (http_api.c). */
#include <check.h>
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "http_api.h"
#include "json_mask.h"
#include "testutil.h"

typedef struct {
    sd_api_kind kind;
    const char *body;
    const char *param; /* NULL: param must be null */
    const char *msg;   /* substring of the message */
} bad_case;

static const bad_case BAD[] = {
    {SD_API_COMPLETION, "{\"prompt\": ", NULL, "could not parse the JSON"},
    {SD_API_COMPLETION, "[1,2]", NULL, "must be a JSON object"},
    {SD_API_COMPLETION, "", NULL, "could not parse"},
    {SD_API_COMPLETION, "{}", "prompt", "'prompt' is required"},
    {SD_API_COMPLETION, "{\"prompt\": 5}", "prompt", "string or an array"},
    {SD_API_COMPLETION, "{\"prompt\": []}", "prompt", "must not be empty"},
    {SD_API_COMPLETION, "{\"prompt\": [1, -2]}", "prompt", "non-negative"},
    {SD_API_COMPLETION, "{\"prompt\": [1, \"a\"]}", "prompt", "non-negative integers"},
    {SD_API_COMPLETION, "{\"prompt\": [\"a\", \"b\"]}", "prompt", "batch"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"model\": 3}", "model", "'model' must be a string"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 0}", "max_tokens", "between 1"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": \"5\"}", "max_tokens", "integer"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"max_tokens\": 1.5}", "max_tokens", "integer"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"temperature\": -1}", "temperature", "between 0 and 2"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"temperature\": \"hot\"}", "temperature", "number"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"top_p\": 0}", "top_p", "(0, 1]"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"top_p\": 1.5}", "top_p", "between"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"top_k\": -5}", "top_k", "between -1"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"min_p\": 2}", "min_p", "between 0 and 1"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"presence_penalty\": 3}", "presence_penalty", "between -2 and 2"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"frequency_penalty\": -3}", "frequency_penalty", "between"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"repetition_penalty\": 0}", "repetition_penalty", "between"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"seed\": \"s\"}", "seed", "integer"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"stop\": 5}", "stop", "string or an array"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"stop\": [\"a\", 1]}", "stop", "string or an array"},
    {SD_API_COMPLETION,
     "{\"prompt\": \"x\", \"stop\": [\"1\",\"2\",\"3\",\"4\",\"5\",\"6\",\"7\",\"8\",\"9\",\"10\","
     "\"11\",\"12\",\"13\",\"14\",\"15\",\"16\",\"17\"]}",
     "stop", "at most 16"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"stream\": \"yes\"}", "stream", "boolean"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"stream_options\": {\"include_usage\": true}}", "stream_options",
     "only allowed when"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": 1}", "stream_options", "object"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"stream\": true, \"stream_options\": {\"include_usage\": 1}}",
     "stream_options.include_usage", "boolean"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"ignore_eos\": 1}", "ignore_eos", "boolean"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"n\": 0}", "n", "between 1 and 128"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"n\": 129}", "n", "between 1 and 128"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"n\": \"2\"}", "n", "integer"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"n\": 3, \"best_of\": 2}", "best_of", "at least 'n'"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"best_of\": 3, \"stream\": true}", "best_of", "cannot be streamed"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"best_of\": 2}", "best_of",
     "completions only"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"echo\": true}", "echo",
     "completions only"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"echo\": 1}", "echo", "boolean"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": 21}", "logprobs", "between 0 and 20"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"logprobs\": true}", "logprobs", "not a boolean"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": 3}", "logprobs", "boolean"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"top_logprobs\": 2}", "top_logprobs",
     "needs 'logprobs'"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": true, \"top_logprobs\": 30}",
     "top_logprobs", "between 0 and 20"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"speculative\": 3}", "speculative", "object"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"speculative\": {\"enabled\": \"no\"}}", "speculative.enabled",
     "boolean"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"speculative\": {\"num_draft\": 99}}", "speculative.num_draft",
     "between 0 and 64"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"speculative\": {\"verify\": \"maybe\"}}", "speculative.verify",
     "one of"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"stop_token_ids\": [-1]}", "stop_token_ids", "non-negative"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"prompt\": \"y\"}", NULL, "duplicate"},
    {SD_API_CHAT, "{}", "messages", "'messages' is required"},
    {SD_API_CHAT, "{\"messages\": []}", "messages", "non-empty array"},
    {SD_API_CHAT, "{\"messages\": \"hi\"}", "messages", "non-empty array"},
    {SD_API_CHAT, "{\"messages\": [5]}", "messages[0].role", "must be an object"},
    {SD_API_CHAT, "{\"messages\": [{\"content\": \"a\"}]}", "messages[0].role", "must be one of"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"wizard\", \"content\": \"a\"}]}", "messages[0].role", "must be one of"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": 7}]}", "messages[0].content",
     "string or an array"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": [{\"type\": \"image_url\"}]}]}",
     "messages[0].content", "parts must be"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"max_completion_tokens\": 0}",
     "max_completion_tokens", "between 1"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"max_completion_tokens\": 0}", "max_completion_tokens", "between 1"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", "
     "\"function\": {\"name\": \"\"}}]}",
     "tools", "'tools[0]' must be"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"retrieval\"}]}",
     "tools", "'tools[0]' must be"},
    {SD_API_COMPLETION, "{\"prompt\": \"a\", \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"f\"}}]}",
     "tools", "chat/completions only"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": 1}", "tools",
     "must be an array"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\", \"tool_calls\": []}]}",
     "messages[0].tool_calls", "assistant"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"function\": "
     "{\"arguments\": 1}}]}]}",
     "messages[0].tool_calls", "name"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"tool\", \"content\": \"x\", \"tool_call_id\": 5}]}",
     "messages[0].tool_call_id", "string"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tool_choice\": \"required\"}",
     "tool_choice", "needs 'tools'"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tool_choice\": {\"type\": \"function\"}}",
     "tool_choice", "must be \"none\""},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tool_choice\": \"any\"}", "tool_choice",
     "must be \"none\""},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", "
     "\"function\": {\"name\": \"f\"}}], \"tool_choice\": {\"type\": \"function\", \"function\": "
     "{\"name\": \"g\"}}}",
     "tool_choice", "'g', which is not among"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", "
     "\"function\": {\"name\": \"f\", \"parameters\": {\"type\": \"object\", \"properties\": {\"x\": "
     "{\"type\": \"string\", \"pattern\": \"a\"}}}}}], \"tool_choice\": \"required\"}",
     "tools", "#/items/anyOf/0/properties/parameters/properties/x: the keyword 'pattern'"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", "
     "\"function\": {\"name\": \"f\"}}], \"tool_choice\": \"required\", \"response_format\": {\"type\": "
     "\"json_object\"}}",
     "tool_choice", "cannot come with JSON or regex output"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [{\"type\": \"function\", "
     "\"function\": {\"name\": \"f\"}}], \"tool_choice\": \"required\", \"guided_regex\": \"a\"}",
     "tool_choice", "cannot come with JSON or regex output"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"functions\": [{\"name\": \"f\"}]}",
     "functions", "not supported"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"function_call\": {\"name\": \"f\"}}",
     "function_call", "use 'tools'"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"response_format\": "
     "{\"type\": \"json_schema\", \"json_schema\": {\"name\": \"x\", \"schema\": {\"type\": \"string\", "
     "\"pattern\": \"a+\"}}}}",
     "response_format", "the keyword 'pattern' is not supported"},
    {SD_API_CHAT,
     "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"response_format\": "
     "{\"type\": \"json_schema\", \"json_schema\": {\"name\": 3, \"schema\": {}}}}",
     "response_format", "a string 'name'"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\"}}", "response_format",
     "schema in 'schema'"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"response_format\": {\"type\": \"yaml\"}}", "response_format",
     "must be \"text\""},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"response_format\": \"text\"}", "response_format", "must be \"text\""},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"guided_json\": \"{nope\"}", "guided_json", "not JSON"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"guided_json\": {}, \"response_format\": {\"type\": \"text\"}}",
     "response_format", "give one of"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"grammar\": \"a\"}}", "structured_outputs",
     "grammar and structural tags are not supported"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"regex\": \"a\", \"choice\": [\"a\"]}}",
     "structured_outputs", "one of 'json'"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"json_object\": false}}", "structured_outputs",
     "must be true"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"regex\": \"(a\"}}", "structured_outputs",
     "missing closing parenthesis (at byte 2)"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"guided_regex\": \"(a)\\\\1\"}", "guided_regex", "back-references"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"guided_regex\": 3}", "guided_regex", "must be a string"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"guided_choice\": []}", "guided_choice", "array of 1 to 1024 strings"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"guided_choice\": [\"a\", 2]}", "guided_choice",
     "'guided_choice[1]' must be a string"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"guided_choice\": [\"a\"], \"guided_regex\": \"a\"}", "guided_json",
     "give one of"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"guided_grammar\": \"root ::= x\"}", "guided_grammar", "not supported"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"disable_any_whitespace\": true}}",
     "structured_outputs", "applies to JSON output"},
    {SD_API_COMPLETION,
     "{\"prompt\": \"x\", \"structured_outputs\": {\"regex\": \"a\", \"disable_any_whitespace\": "
     "true}}",
     "structured_outputs", "applies to JSON output"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"json\": {}, \"disable_any_whitespace\": 1}}",
     "structured_outputs", "must be a boolean"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"structured_outputs\": {\"json\": {\"$ref\": \"#/x\"}}}",
     "structured_outputs", "points nowhere"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": [1]}", "logit_bias", "must be an object"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"abc\": 1}}", "logit_bias", "keys must be token ids"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"-3\": 1}}", "logit_bias", "non-negative"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"12x\": 1}}", "logit_bias", "keys must be"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"99999999999\": 1}}", "logit_bias", "keys must be"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"logit_bias\": {\"5\": 100.5}}", "logit_bias", "between -100 and 100"},
    {SD_API_CHAT, "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logit_bias\": {\"5\": \"up\"}}",
     "logit_bias", "numbers between"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"allowed_token_ids\": []}", "allowed_token_ids", "non-empty array"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"allowed_token_ids\": 5}", "allowed_token_ids", "non-empty array"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"allowed_token_ids\": [1, -1]}", "allowed_token_ids", "non-negative"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"min_tokens\": -1}", "min_tokens", "between 0"},
    {SD_API_COMPLETION, "{\"prompt\": \"x\", \"min_tokens\": 9, \"max_tokens\": 8}", "min_tokens", "must not exceed"},
};

START_TEST(bad_inputs)
{
    const bad_case *c = &BAD[_i];
    sd_api_req r;
    sd_api_err e;
    sd_status st = sd_api_parse(c->kind, c->body, strlen(c->body), &r, &e);
    ck_assert_msg(st == SD_ERR_ARG, "case %d (%s) was accepted", _i, c->body);
    ck_assert_int_eq(e.status, 400);
    ck_assert_str_eq(e.type, "invalid_request_error");
    ck_assert_msg(!strcmp(e.param, c->param ? c->param : ""), "case %d: param '%s', want '%s'", _i, e.param,
                  c->param ? c->param : "");
    ck_assert_msg(strstr(e.message, c->msg) != NULL, "case %d: message '%s' lacks '%s'", _i, e.message, c->msg);
    char *j = sd_api_error_json(&e);
    json_t *o = json_loads(j, 0, NULL);
    ck_assert_ptr_nonnull(o);
    json_t *err = json_object_get(o, "error");
    ck_assert(json_is_string(json_object_get(err, "message")));
    ck_assert(json_is_string(json_object_get(err, "type")));
    ck_assert(c->param ? json_is_string(json_object_get(err, "param")) : json_is_null(json_object_get(err, "param")));
    ck_assert_ptr_nonnull(json_object_get(err, "code"));
    json_decref(o);
    free(j);
}
END_TEST

/* A body jansson refuses with a message quoting half a UTF-8 character
 * (an escape before a two-byte character): the error is still OpenAI-shaped
 * JSON, its message valid UTF-8. */
START_TEST(error_message_stays_utf8)
{
    const char body[] = "\"\\\xcd\x9b";
    sd_api_req r;
    sd_api_err e;
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, body, sizeof body - 1, &r, &e), SD_ERR_ARG);
    char *j = sd_api_error_json(&e);
    ck_assert_ptr_nonnull(j);
    json_t *o = json_loads(j, 0, NULL);
    ck_assert_ptr_nonnull(o);
    ck_assert(json_is_string(json_object_get(json_object_get(o, "error"), "message")));
    json_decref(o);
    free(j);
}
END_TEST

START_TEST(full_completion_request)
{
    const char *b = "{\"model\": \"m\", \"prompt\": \"hello\", \"max_tokens\": 7, \"temperature\": 0.5, \"top_p\": 0.9,"
                    "\"top_k\": 40, \"min_p\": 0.05, \"presence_penalty\": 0.1, \"frequency_penalty\": 0.2,"
                    "\"repetition_penalty\": 1.1, \"seed\": 42, \"stop\": [\"a\", \"\", \"bc\"], \"stream\": true,"
                    "\"stream_options\": {\"include_usage\": true}, \"ignore_eos\": true, \"user\": \"x\","
                    "\"speculative\": {\"enabled\": false, \"num_draft\": 3, \"verify\": \"rejection\"},"
                    "\"stop_token_ids\": [5, 6], \"n\": 1, \"logprobs\": null}";
    sd_api_req r;
    sd_api_err e;
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert_str_eq(r.model, "m");
    ck_assert_str_eq(r.prompt, "hello");
    ck_assert_int_eq(r.max_tokens, 7);
    ck_assert_float_eq_tol(r.sampling.temperature, 0.5, 1e-6);
    ck_assert_int_eq(r.sampling.top_k, 40);
    ck_assert_float_eq_tol(r.sampling.repetition_penalty, 1.1, 1e-6);
    ck_assert(r.seed_set && r.sampling.seed == 42);
    ck_assert_uint_eq(r.n_stop, 2);
    ck_assert_str_eq(r.stop[1], "bc");
    ck_assert(r.stream && r.include_usage && r.ignore_eos);
    ck_assert(!r.spec_enabled);
    ck_assert_uint_eq(r.num_draft, 3);
    ck_assert_int_eq(r.verify, SD_API_VERIFY_REJECTION);
    ck_assert_uint_eq(r.n_stop_ids, 2);
    sd_api_req_clear(&r);
}
END_TEST

/* logit_bias, allowed_token_ids, min_tokens: kept, and the sampling
 * settings point to the request's own lists. */
START_TEST(logits_processor_fields)
{
    const char *b = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logit_bias\": {\"50256\": -100,"
                    "\"7\": 2.5}, \"allowed_token_ids\": [7, 8, 50256], \"min_tokens\": 4, \"max_tokens\": 4}";
    sd_api_req r;
    sd_api_err e;
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert_uint_eq(r.sampling.n_bias, 2);
    ck_assert_ptr_eq(r.sampling.bias_ids, r.bias_ids);
    ck_assert_int_eq(r.bias_ids[0], 50256);
    ck_assert_float_eq(r.bias_values[0], -100.0f);
    ck_assert_int_eq(r.bias_ids[1], 7);
    ck_assert_float_eq(r.bias_values[1], 2.5f);
    ck_assert_uint_eq(r.sampling.n_allowed, 3);
    ck_assert_int_eq(r.sampling.allowed[2], 50256);
    ck_assert_uint_eq(r.sampling.min_tokens, 4);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_object\"}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.sampling.json_object && sd_sampling_processes(&r.sampling));
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_schema\", \"json_schema\": {\"name\": \"p\", "
        "\"strict\": true, \"schema\": {\"type\": \"object\", \"properties\": {\"a\": {\"type\": \"integer\"}}}}}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(!r.sampling.json_object && sd_sampling_processes(&r.sampling));
    ck_assert_ptr_eq(r.sampling.json_schema, r.json_schema);
    ck_assert_str_eq(r.json_schema, "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}}}");
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"guided_json\": \"{\\\"enum\\\": [1, 2]}\"}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert_str_eq(r.sampling.json_schema, "{\"enum\":[1,2]}");
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"structured_outputs\": {\"json\": {\"type\": \"null\"}}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert_str_eq(r.sampling.json_schema, "{\"type\":\"null\"}");
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"guided_regex\": \"\\\\d+\", \"guided_decoding_backend\": \"xgrammar\"}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(sd_sampling_processes(&r.sampling) && !r.sampling.json_object && !r.sampling.json_schema);
    ck_assert_str_eq(r.sampling.regex, "\\d+");
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"structured_outputs\": {\"choice\": [\"a.b\", \"c d\", \"caf\u00e9\"]}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert_str_eq(r.sampling.regex, "a\\.b|c\\ d|caf\xc3\xa9");
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"structured_outputs\": {\"json_object\": true}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.sampling.json_object && !r.sampling.regex && !r.sampling.json_compact);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"structured_outputs\": {\"json\": {\"type\": \"object\"}, "
        "\"disable_any_whitespace\": true}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.sampling.json_schema && r.sampling.json_compact);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"response_format\": {\"type\": \"json_object\"}, \"structured_outputs\": "
        "{\"disable_any_whitespace\": true}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.sampling.json_object && r.sampling.json_compact);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"guided_json\": {}, \"guided_decoding_backend\": \"xgrammar:disable-any-whitespace\"}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.sampling.json_schema && r.sampling.json_compact);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"logit_bias\": {}, \"allowed_token_ids\": null, \"min_tokens\": 0, "
        "\"response_format\": {\"type\": \"text\"}}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(!sd_sampling_processes(&r.sampling));
    sd_api_req_clear(&r);
}
END_TEST

START_TEST(defaults_and_prompt_forms)
{
    sd_api_req r;
    sd_api_err e;
    const char *b = "{\"prompt\": [[1, 2, 3]], \"top_k\": -1, \"stop\": \"x\", \"max_tokens\": 16.0}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert_uint_eq(r.n_prompt_ids, 3);
    ck_assert_int_eq(r.prompt_ids[2], 3);
    ck_assert_int_eq(r.sampling.top_k, 0);
    ck_assert_int_eq(r.max_tokens, 16);
    ck_assert_float_eq(r.sampling.temperature, 1.0);
    ck_assert(r.spec_enabled && !r.seed_set && !r.stream);
    sd_api_req_clear(&r);
    b = "{\"prompt\": [\"one\"], \"max_tokens\": null, \"speculative\": false}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert_str_eq(r.prompt, "one");
    ck_assert_int_eq(r.max_tokens, -1);
    ck_assert(!r.spec_enabled);
    sd_api_req_clear(&r);
}
END_TEST

START_TEST(chat_messages)
{
    const char *b = "{\"messages\": [{\"role\": \"developer\", \"content\": \"s\"}, {\"role\": \"user\", \"content\": "
                    "[{\"type\": \"text\", \"text\": \"a\"}, {\"type\": \"text\", \"text\": \"b\"}]}, "
                    "{\"role\": \"assistant\", \"content\": null}], \"max_completion_tokens\": 9}";
    sd_api_req r;
    sd_api_err e;
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert_uint_eq(r.n_messages, 3);
    ck_assert_str_eq(r.messages[0].role, "system");
    ck_assert_str_eq(r.messages[1].content, "ab");
    ck_assert_str_eq(r.messages[2].content, "");
    ck_assert_int_eq(r.max_tokens, 9);
    sd_api_req_clear(&r);
    /* what a client that offers no tools sends: accepted */
    const char *t = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"tools\": [], \"tool_choice\": "
                    "\"none\", \"response_format\": {\"type\": \"text\"}, \"function_call\": \"auto\"}";
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, t, strlen(t), &r, &e), SD_OK);
    sd_api_req_clear(&r);
    /* max_completion_tokens on completions too (max_tokens wins when both are given) */
    const char *c = "{\"prompt\": \"x\", \"max_completion_tokens\": 7}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, c, strlen(c), &r, &e), SD_OK);
    ck_assert_int_eq(r.max_tokens, 7);
    sd_api_req_clear(&r);
    c = "{\"prompt\": \"x\", \"echo\": true}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, c, strlen(c), &r, &e), SD_OK);
    ck_assert(r.echo);
    sd_api_req_clear(&r);
    c = "{\"prompt\": \"x\", \"max_tokens\": 3, \"max_completion_tokens\": 7}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, c, strlen(c), &r, &e), SD_OK);
    ck_assert_int_eq(r.max_tokens, 3);
    sd_api_req_clear(&r);
}
END_TEST

static json_t *load(char *s)
{
    json_t *o = json_loads(s, 0, NULL);
    free(s);
    ck_assert_ptr_nonnull(o);
    return o;
}

static json_t *load_sse(char *s)
{
    ck_assert(!strncmp(s, "data: ", 6));
    size_t n = strlen(s);
    ck_assert(n > 8 && s[n - 1] == '\n' && s[n - 2] == '\n');
    json_t *o = json_loads(s + 6, JSON_DISABLE_EOF_CHECK, NULL);
    free(s);
    ck_assert_ptr_nonnull(o);
    return o;
}

static const uint64_t AT[] = {5, 3};
/* 10 spec steps, 8 with a span ready; 12 ms of steps, 9 of verifying, 4 of drafting: 1 - 3/4 hidden */
static const sd_pipe_stats DRAFTING = {.v = {9, 3, 8, 10, 500, 4000, 12000, 9000, 1, 2}};
/* 10 decode steps, 32 drafts chosen in all, 2 steps without */
static const sd_api_adapt ADAPT = {32, 10, 2, {0.9f, 0.75f}, 2};
static const sd_api_spec SPEC = {10, 40, 8, AT, 2, &DRAFTING, &ADAPT};

START_TEST(choices_fields)
{
    sd_api_req r;
    sd_api_err e;
    const char *b = "{\"prompt\": \"x\"}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.n == 1 && r.best_of == 1);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"n\": 3}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.n == 3 && r.best_of == 3);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"n\": 2, \"best_of\": 5}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.n == 2 && r.best_of == 5);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"n\": 2, \"best_of\": 2, \"stream\": true}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    sd_api_req_clear(&r);
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"n\": 4, \"best_of\": 1}";
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_ERR_ARG); /* best_of < n */
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"n\": 4}";
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.n == 4 && r.best_of == 4);
    sd_api_req_clear(&r);
    /* a response with several choices: index i, each its text and finish reason */
    sd_api_result res = {"cmpl-2", "tiny", 1, NULL, 3, 9, NULL, NULL, 0, 0, NULL, NULL};
    sd_api_choice ch[3] = {
        {"a", 1, "stop", NULL, NULL, NULL}, {"bb", 2, "length", NULL, NULL, NULL}, {"", 0, "stop", NULL, NULL, NULL}};
    json_t *o = load(sd_api_response_json(SD_API_COMPLETION, &res, ch, 3));
    json_t *cs = json_object_get(o, "choices");
    ck_assert_int_eq(json_array_size(cs), 3);
    for (int i = 0; i < 3; i++) {
        json_t *c = json_array_get(cs, (size_t)i);
        ck_assert_int_eq(json_integer_value(json_object_get(c, "index")), i);
        ck_assert_str_eq(json_string_value(json_object_get(c, "text")), ch[i].text);
        ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), ch[i].finish);
    }
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")), 9);
    json_decref(o);
    /* a chunk names its choice */
    res.index = 2;
    o = load_sse(sd_api_chunk_sse(SD_API_CHAT, &res, "x", 1, false, false));
    ck_assert_int_eq(json_integer_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "index")), 2);
    json_decref(o);
}
END_TEST

/* Whether the schema a request carries accepts doc whole. */
static bool schema_accepts(const sd_api_req *r, const char *doc)
{
    sd_json_schema *s;
    ck_assert_int_eq(sd_json_schema_parse(r->json_schema, strlen(r->json_schema), &s, NULL, 0), SD_OK);
    sd_json_state st;
    sd_json_init_schema(&st, s);
    bool ok = sd_json_feed(&st, doc, strlen(doc)) && sd_json_complete(&st);
    sd_json_schema_free(s);
    return ok;
}

/* tool_choice "required" and a named function: the tools stay for the
 * template, and the output is constrained by a schema built from them
 * (required: an array of calls, the name picking each call's parameters;
 * parallel_tool_calls false: one call; named: the function's arguments). */
START_TEST(forced_tool_choice)
{
    static const char tools[] =
        "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", \"parameters\": {\"type\": "
        "\"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}, "
        "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}]";
    char b[1024];
    sd_api_req r;
    sd_api_err e;
    snprintf(b, sizeof b,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}], %s, \"tool_choice\": "
             "\"required\"}",
             tools);
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.tools_forced && !r.tool_name && json_array_size(r.tools) == 2);
    ck_assert(schema_accepts(&r, "[{\"name\": \"get\", \"parameters\": {\"city\": \"Oslo\"}}, {\"name\": \"now\", "
                                 "\"parameters\": {\"tz\": [1]}}]"));
    ck_assert(!schema_accepts(&r, "[{\"name\": \"get\", \"parameters\": {\"town\": \"Oslo\"}}]"));
    ck_assert(!schema_accepts(&r, "[{\"parameters\": {}, \"name\": \"now\"}]")); /* the name first */
    ck_assert(!schema_accepts(&r, "[]"));
    sd_api_req_clear(&r);
    snprintf(b, sizeof b,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}], %s, \"tool_choice\": "
             "\"required\", \"parallel_tool_calls\": false}",
             tools);
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert(schema_accepts(&r, "[{\"name\": \"now\", \"parameters\": {}}]"));
    ck_assert(!schema_accepts(&r, "[{\"name\": \"now\", \"parameters\": {}}, "
                                  "{\"name\": \"now\", \"parameters\": {}}]"));
    sd_api_req_clear(&r);
    snprintf(b, sizeof b,
             "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}], %s, \"tool_choice\": "
             "{\"type\": \"function\", \"function\": {\"name\": \"get\"}}}",
             tools);
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.tools_forced);
    ck_assert_str_eq(r.tool_name, "get");
    ck_assert(schema_accepts(&r, "{\"city\": \"Oslo\"}"));
    ck_assert(!schema_accepts(&r, "{}"));
    sd_api_req_clear(&r);
}
END_TEST

/* tools kept for the template (not with tool_choice "none"), messages'
 * tool fields kept; tool calls in a response and a chunk. */
START_TEST(tool_fields)
{
    const char *b = "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}, {\"role\": \"assistant\", \"content\": "
                    "null, \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get\", "
                    "\"arguments\": \"{}\"}}]}, {\"role\": \"tool\", \"tool_call_id\": \"c1\", "
                    "\"content\": \"sunny\"}], "
                    "\"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get\", \"parameters\": {}}}], "
                    "\"tool_choice\": \"auto\"}";
    sd_api_req r;
    sd_api_err e;
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert_uint_eq(json_array_size(r.tools), 1);
    ck_assert_ptr_null(r.messages[0].fields);
    ck_assert_str_eq(r.messages[1].content, "");
    ck_assert_uint_eq(json_array_size(json_object_get(r.messages[1].fields, "tool_calls")), 1);
    ck_assert_str_eq(json_string_value(json_object_get(r.messages[2].fields, "tool_call_id")), "c1");
    sd_api_req_clear(&r);
    const char *none = "{\"messages\": [{\"role\": \"user\", \"content\": \"w?\"}], \"tools\": [{\"type\": "
                       "\"function\", \"function\": {\"name\": \"get\"}}], \"tool_choice\": \"none\"}";
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, none, strlen(none), &r, &e), SD_OK);
    ck_assert_ptr_null(r.tools);
    sd_api_req_clear(&r);
    json_t *calls = json_loads("[{\"id\": \"call_1-0\", \"type\": \"function\", \"function\": {\"name\": \"get\", "
                               "\"arguments\": \"{}\"}}]",
                               0, NULL);
    sd_api_result res = {"chatcmpl-1", "tiny", 1, NULL, 3, 4, NULL, NULL, 0, 0, NULL, NULL};
    sd_api_choice ch = {"", 0, "tool_calls", NULL, calls, NULL};
    json_t *o = load(sd_api_response_json(SD_API_CHAT, &res, &ch, 1));
    json_t *c0 = json_array_get(json_object_get(o, "choices"), 0), *msg = json_object_get(c0, "message");
    ck_assert_str_eq(json_string_value(json_object_get(c0, "finish_reason")), "tool_calls");
    ck_assert(json_is_null(json_object_get(msg, "content")));
    ck_assert_str_eq(json_string_value(json_object_get(
                         json_object_get(json_array_get(json_object_get(msg, "tool_calls"), 0), "function"), "name")),
                     "get");
    json_decref(o);
    res.tool_calls = calls;
    char *ev = sd_api_chunk_sse(SD_API_CHAT, &res, "", 0, false, false);
    ck_assert_ptr_nonnull(ev);
    o = json_loads(ev + 6, 0, NULL);
    json_t *d = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "delta");
    json_t *tc = json_array_get(json_object_get(d, "tool_calls"), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(tc, "index")), 0);
    ck_assert_str_eq(json_string_value(json_object_get(tc, "id")), "call_1-0");
    json_decref(o);
    free(ev);
    json_decref(calls);
}
END_TEST

START_TEST(completion_response_shape)
{
    sd_api_result res = {"cmpl-1", "tiny", 1700000000, NULL, 3, 4, &SPEC, NULL, 0, 2, NULL, NULL};
    sd_api_choice ch = {"a\"b", 3, "length", NULL, NULL, NULL};
    json_t *o = load(sd_api_response_json(SD_API_COMPLETION, &res, &ch, 1));
    ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "text_completion");
    ck_assert_str_eq(json_string_value(json_object_get(o, "id")), "cmpl-1");
    ck_assert_int_eq(json_integer_value(json_object_get(o, "created")), 1700000000);
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "text")), "a\"b");
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "length");
    ck_assert_int_eq(json_integer_value(json_object_get(c, "index")), 0);
    json_t *u = json_object_get(o, "usage");
    ck_assert_int_eq(json_integer_value(json_object_get(u, "total_tokens")), 7);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(u, "prompt_tokens_details"), "cached_tokens")),
                     2);
    json_t *sp = json_object_get(o, "speculative");
    ck_assert_int_eq(json_integer_value(json_object_get(sp, "steps")), 10);
    ck_assert_float_eq_tol(json_real_value(json_object_get(sp, "mean_accepted_per_step")), 0.8, 1e-9);
    ck_assert_float_eq_tol(json_real_value(json_object_get(sp, "acceptance_rate")), 0.2, 1e-9);
    ck_assert_int_eq(json_array_size(json_object_get(sp, "accepted_per_position")), 2);
    json_t *d = json_object_get(sp, "drafting");
    ck_assert_int_eq(json_integer_value(json_object_get(d, "spans_used")), 9);
    ck_assert_int_eq(json_integer_value(json_object_get(d, "spans_stale")), 3);
    ck_assert_float_eq_tol(json_real_value(json_object_get(d, "pre_draft_hit_rate")), 0.8, 1e-9);
    ck_assert_float_eq_tol(json_real_value(json_object_get(d, "wait_ms")), 0.5, 1e-9);
    ck_assert_float_eq_tol(json_real_value(json_object_get(d, "draft_time_hidden")), 0.875, 1e-9);
    ck_assert_int_eq(json_integer_value(json_object_get(d, "fallback_used")), 1);
    ck_assert_int_eq(json_integer_value(json_object_get(d, "fallback_accepted")), 2);
    json_t *dl = json_object_get(sp, "draft_length");
    ck_assert_float_eq_tol(json_real_value(json_object_get(dl, "mean")), 3.2, 1e-9);
    ck_assert_int_eq(json_integer_value(json_object_get(dl, "decode_steps")), 10);
    ck_assert_int_eq(json_integer_value(json_object_get(dl, "steps_without_drafts")), 2);
    ck_assert_int_eq(json_array_size(json_object_get(dl, "acceptance_estimate")), 2);
    ck_assert_float_eq_tol(json_real_value(json_array_get(json_object_get(dl, "acceptance_estimate"), 1)), 0.75, 1e-6);
    json_decref(o);
}
END_TEST

START_TEST(logprobs_fields)
{
    sd_api_req r;
    sd_api_err e;
    const char *b = "{\"prompt\": \"x\", \"logprobs\": 3, \"echo\": true}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.logprobs && r.top_logprobs == 3 && r.echo);
    sd_api_req_clear(&r);
    b = "{\"prompt\": \"x\", \"logprobs\": 0}";
    ck_assert_int_eq(sd_api_parse(SD_API_COMPLETION, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.logprobs && r.top_logprobs == 0);
    sd_api_req_clear(&r);
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": true, \"top_logprobs\": 20}";
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert(r.logprobs && r.top_logprobs == 20);
    sd_api_req_clear(&r);
    b = "{\"messages\": [{\"role\": \"user\", \"content\": \"a\"}], \"logprobs\": false, \"top_logprobs\": 0}";
    ck_assert_int_eq(sd_api_parse(SD_API_CHAT, b, strlen(b), &r, &e), SD_OK);
    ck_assert(!r.logprobs);
    sd_api_req_clear(&r);
    /* the choice carries the object it is given, else null */
    json_t *lp = json_pack("{s:[]}", "content");
    sd_api_result res = {"chatcmpl-1", "tiny", 1, "stop", 3, 4, NULL, NULL, 0, 0, NULL, NULL};
    sd_api_choice ch = {"hi", 2, "stop", lp, NULL, NULL};
    json_t *o = load(sd_api_response_json(SD_API_CHAT, &res, &ch, 1));
    ck_assert(json_is_array(
        json_object_get(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs"), "content")));
    json_decref(o);
    res.logprobs = NULL;
    o = load_sse(sd_api_chunk_sse(SD_API_CHAT, &res, "x", 1, false, false));
    ck_assert(json_is_null(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "logprobs")));
    json_decref(o);
    json_decref(lp);
}
END_TEST

START_TEST(chat_response_shape)
{
    sd_api_result res = {"chatcmpl-1", "tiny", 1, "stop", 3, 4, NULL, NULL, 0, 0, NULL, NULL};
    sd_api_choice ch = {"hi", 2, "stop", NULL, NULL, NULL};
    json_t *o = load(sd_api_response_json(SD_API_CHAT, &res, &ch, 1));
    ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion");
    json_t *m = json_object_get(json_array_get(json_object_get(o, "choices"), 0), "message");
    ck_assert_str_eq(json_string_value(json_object_get(m, "role")), "assistant");
    ck_assert_str_eq(json_string_value(json_object_get(m, "content")), "hi");
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o, "speculative"), "steps")), 0);
    ck_assert_ptr_null(json_object_get(json_object_get(o, "speculative"), "drafting"));
    ck_assert_ptr_null(json_object_get(json_object_get(o, "speculative"), "draft_length"));
    json_decref(o);
}
END_TEST

START_TEST(sse_chunk_shapes)
{
    sd_api_result res = {"chatcmpl-1", "tiny", 1, NULL, 3, 0, &SPEC, NULL, 0, 0, NULL, NULL};
    json_t *o = load_sse(sd_api_chunk_sse(SD_API_CHAT, &res, "", 0, true, true));
    ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "chat.completion.chunk");
    json_t *c = json_array_get(json_object_get(o, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "delta"), "role")), "assistant");
    ck_assert(json_is_null(json_object_get(c, "finish_reason")));
    ck_assert(json_is_null(json_object_get(o, "usage")) && json_object_get(o, "usage"));
    json_decref(o);

    o = load_sse(sd_api_chunk_sse(SD_API_CHAT, &res, "tok", 3, false, false));
    c = json_array_get(json_object_get(o, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(json_object_get(c, "delta"), "content")), "tok");
    ck_assert_ptr_null(json_object_get(json_object_get(c, "delta"), "role"));
    ck_assert_ptr_null(json_object_get(o, "usage"));
    json_decref(o);

    res.finish = "stop";
    o = load_sse(sd_api_chunk_sse(SD_API_CHAT, &res, "", 0, false, false));
    c = json_array_get(json_object_get(o, "choices"), 0);
    ck_assert_str_eq(json_string_value(json_object_get(c, "finish_reason")), "stop");
    ck_assert_int_eq(json_object_size(json_object_get(c, "delta")), 0);
    ck_assert_ptr_nonnull(json_object_get(o, "speculative"));
    json_decref(o);

    o = load_sse(sd_api_chunk_sse(SD_API_COMPLETION, &res, "x", 1, false, false));
    ck_assert_str_eq(json_string_value(json_object_get(o, "object")), "text_completion");
    ck_assert_str_eq(json_string_value(json_object_get(json_array_get(json_object_get(o, "choices"), 0), "text")), "x");
    json_decref(o);

    res.completion_tokens = 4;
    o = load_sse(sd_api_usage_sse(SD_API_COMPLETION, &res));
    ck_assert_int_eq(json_array_size(json_object_get(o, "choices")), 0);
    ck_assert_int_eq(json_integer_value(json_object_get(json_object_get(o, "usage"), "completion_tokens")), 4);
    json_decref(o);
}
END_TEST

START_TEST(error_json_shape)
{
    sd_api_err e;
    sd_api_fail(&e, 401, "invalid_request_error", NULL, "invalid_api_key", "bad key");
    json_t *o = load(sd_api_error_json(&e));
    json_t *err = json_object_get(o, "error");
    ck_assert_str_eq(json_string_value(json_object_get(err, "message")), "bad key");
    ck_assert_str_eq(json_string_value(json_object_get(err, "code")), "invalid_api_key");
    ck_assert(json_is_null(json_object_get(err, "param")));
    json_decref(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("http_api");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, error_message_stays_utf8);
    tcase_add_loop_test(tc, bad_inputs, 0, (int)(sizeof BAD / sizeof *BAD));
    tcase_add_test(tc, full_completion_request);
    tcase_add_test(tc, defaults_and_prompt_forms);
    tcase_add_test(tc, logits_processor_fields);
    tcase_add_test(tc, tool_fields);
    tcase_add_test(tc, forced_tool_choice);
    tcase_add_test(tc, chat_messages);
    suite_add_tcase(s, tc);
    TCase *tr = tcase_create("responses");
    tcase_add_test(tr, completion_response_shape);
    tcase_add_test(tr, choices_fields);
    tcase_add_test(tr, chat_response_shape);
    tcase_add_test(tr, logprobs_fields);
    tcase_add_test(tr, sse_chunk_shapes);
    tcase_add_test(tr, error_json_shape);
    suite_add_tcase(s, tr);
    return tu_run_suite(s);
}
