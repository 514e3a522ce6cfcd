/* test_chat_template.c — exact rendered strings per family, detection from
 * tokenizer_config.json and from the tokenizer fixtures (chat_template.c). */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <fcntl.h>
#include <unistd.h>
#include "chat_template.h"
#include "testutil.h"

static const sd_chat_msg CONV[] = {
    {"system", "You are terse.", NULL},
    {"user", "Hi!", NULL},
    {"assistant", " Hello. ", NULL},
    {"user", "2+2?", NULL},
};

static void expect(sd_chat_family f, const sd_chat_msg *m, size_t n, const char *want)
{
    char *out = NULL, err[128];
    ck_assert_int_eq(sd_chat_render(f, m, n, &out, err, sizeof err), SD_OK);
    ck_assert_str_eq(out, want);
    free(out);
}

START_TEST(chatml)
{
    expect(SD_CHAT_CHATML, CONV, 4,
           "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nHi!<|im_end|>\n"
           "<|im_start|>assistant\n Hello. <|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n");
}
END_TEST

START_TEST(llama3)
{
    expect(SD_CHAT_LLAMA3, CONV, 4,
           "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\nHi!<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\nHello.<|eot_id|>"
           "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
           "<|start_header_id|>assistant<|end_header_id|>\n\n");
}
END_TEST

START_TEST(llama2)
{
    expect(SD_CHAT_LLAMA2, CONV, 4,
           "<s>[INST] <<SYS>>\nYou are terse.\n<</SYS>>\n\nHi! [/INST] Hello. </s><s>[INST] 2+2? [/INST]");
    expect(SD_CHAT_LLAMA2, CONV + 1, 1, "<s>[INST] Hi! [/INST]");
}
END_TEST

START_TEST(llama2_rejects_tool_role)
{
    sd_chat_msg m[] = {{"user", "a", NULL}, {"tool", "b", NULL}};
    char *out = NULL, err[128];
    ck_assert_int_eq(sd_chat_render(SD_CHAT_LLAMA2, m, 2, &out, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "messages[1].role"));
}
END_TEST

START_TEST(plain)
{
    expect(SD_CHAT_PLAIN, CONV, 4, "You are terse.\n\nHi!\n\n Hello. \n\n2+2?");
    ck_assert(sd_chat_add_special(SD_CHAT_PLAIN));
    ck_assert(!sd_chat_add_special(SD_CHAT_CHATML));
}
END_TEST

START_TEST(detect_from_config_text)
{
    ck_assert_int_eq(sd_chat_detect(NULL, "{\"chat_template\": \"{{'<|im_start|>' + m}}\"}"), SD_CHAT_CHATML);
    ck_assert_int_eq(sd_chat_detect(NULL, "{\"chat_template\": \"<|start_header_id|>\"}"), SD_CHAT_LLAMA3);
    ck_assert_int_eq(sd_chat_detect(NULL, "{\"chat_template\": \"[INST] x [/INST]\"}"), SD_CHAT_LLAMA2);
    ck_assert_int_eq(
        sd_chat_detect(NULL, "{\"chat_template\": [{\"name\": \"default\", \"template\": \"<|im_start|>\"}]}"),
        SD_CHAT_CHATML);
    ck_assert_int_eq(sd_chat_detect(NULL, "{}"), SD_CHAT_PLAIN);
    ck_assert_int_eq(sd_chat_detect(NULL, "not json"), SD_CHAT_PLAIN);
    ck_assert_int_eq(sd_chat_detect(NULL, NULL), SD_CHAT_PLAIN);
}
END_TEST

static sd_chat_family detect_fixture(const char *name, bool with_config)
{
    char p[1024], c[1024], rel[256], err[256];
    snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer.json", name);
    sd_tok *tok = NULL;
    if (sd_tok_load(tu_fixture_bin(p, sizeof p, rel), &tok, err, sizeof err) != SD_OK) return (sd_chat_family)-1;
    char *cfg = NULL;
    if (with_config) {
        snprintf(rel, sizeof rel, "tokenizers/%s/tokenizer_config.json", name);
        cfg = tu_read_file(tu_fixture(c, sizeof c, rel), NULL);
    }
    sd_chat_family f = sd_chat_detect(tok, cfg);
    free(cfg);
    sd_tok_free(tok);
    return f;
}

START_TEST(detect_from_fixtures)
{
    ck_assert_int_eq(detect_fixture("qwen3", false), SD_CHAT_CHATML);
    ck_assert_int_eq(detect_fixture("qwen3", true), SD_CHAT_CHATML);
    ck_assert_int_eq(detect_fixture("llama3", false), SD_CHAT_LLAMA3);
    ck_assert_int_eq(detect_fixture("llama3", true), SD_CHAT_LLAMA3);
    ck_assert_int_eq(detect_fixture("llama2", true), SD_CHAT_LLAMA2);
    char p[1024], err[256];
    sd_tok *tok = NULL;
    ck_assert_int_eq(sd_tok_load(tu_model(p, sizeof p, "tinycode-16m/tokenizer.json"), &tok, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_chat_detect(tok, NULL), SD_CHAT_PLAIN);
    sd_tok_free(tok);
}
END_TEST

START_TEST(family_names)
{
    sd_chat_family f;
    ck_assert_int_eq(sd_chat_family_parse("llama3", &f), SD_OK);
    ck_assert_int_eq(f, SD_CHAT_LLAMA3);
    ck_assert_int_eq(sd_chat_family_parse("jinja", &f), SD_ERR_ARG);
    ck_assert_str_eq(sd_chat_family_name(SD_CHAT_CHATML), "chatml");
}
END_TEST

/* sd_chat_load / sd_chat_apply: the config's template, an override file,
 * a family by name, an unsupported template falling back, errors. */
START_TEST(templates_load_and_apply)
{
    sd_chat c;
    char warn[600], err[600], *out = NULL;
    bool add_special = true;
    const sd_chat_msg msgs[] = {{"user", "hi", NULL}};
    const char *cfg = "{\"chat_template\": \"{{ bos_token }}{% for m in messages %}<{{ m.role }}>{{ m.content }}"
                      "{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}\", "
                      "\"bos_token\": {\"content\": \"<s>\"}, \"eos_token\": \"</s>\"}";
    ck_assert_int_eq(sd_chat_load(&c, NULL, cfg, NULL, warn, sizeof warn, err, sizeof err), SD_OK);
    ck_assert_ptr_nonnull(c.tmpl);
    ck_assert_str_eq(warn, "");
    ck_assert_int_eq(sd_chat_apply(&c, msgs, 1, NULL, &out, &add_special, err, sizeof err), SD_OK);
    ck_assert_str_eq(out, "<s><user>hi<assistant>");
    ck_assert(!add_special);
    free(out);
    sd_chat_clear(&c);
    /* tools and a message's tool fields reach the template; the built-in formats refuse them */
    const char *tcfg = "{\"chat_template\": \"{% if tools %}T={{ tools[0].function.name }};{% endif %}{% for m in "
                       "messages %}<{{ m.role }}>{{ m.content }}{% if m.tool_calls %}["
                       "{{ m.tool_calls[0].function.name }}]{% endif %}{% if m.tool_call_id %}({{ m.tool_call_id }})"
                       "{% endif %}{% endfor %}\"}";
    ck_assert_int_eq(sd_chat_load(&c, NULL, tcfg, NULL, warn, sizeof warn, err, sizeof err), SD_OK);
    json_t *tools = json_loads("[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\"}}]", 0, NULL);
    sd_chat_msg tm[] = {{"user", "w?", NULL},
                        {"assistant", "",
                         json_loads("{\"tool_calls\": [{\"type\": \"function\", \"function\": "
                                    "{\"name\": \"get_weather\", \"arguments\": {}}}]}",
                                    0, NULL)},
                        {"tool", "sunny", json_loads("{\"tool_call_id\": \"c1\"}", 0, NULL)}};
    ck_assert_int_eq(sd_chat_apply(&c, tm, 3, tools, &out, &add_special, err, sizeof err), SD_OK);
    ck_assert_str_eq(out, "T=get_weather;<user>w?<assistant>[get_weather]<tool>sunny(c1)");
    free(out);
    sd_chat_clear(&c);
    ck_assert_int_eq(sd_chat_load(&c, NULL, NULL, "chatml", warn, sizeof warn, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_chat_apply(&c, tm, 1, tools, &out, &add_special, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "chat template"));
    ck_assert_int_eq(sd_chat_apply(&c, tm, 3, NULL, &out, &add_special, err, sizeof err), SD_ERR_ARG);
    sd_chat_clear(&c);
    json_decref(tools);
    json_decref(tm[1].fields);
    json_decref(tm[2].fields);
    /* a family by name overrides the template */
    ck_assert_int_eq(sd_chat_load(&c, NULL, cfg, "chatml", warn, sizeof warn, err, sizeof err), SD_OK);
    ck_assert_ptr_null(c.tmpl);
    ck_assert_int_eq(sd_chat_apply(&c, msgs, 1, NULL, &out, &add_special, err, sizeof err), SD_OK);
    ck_assert_str_eq(out, "<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n");
    free(out);
    sd_chat_clear(&c);
    /* a list of named templates: the default; macros are not supported: warned, the family is used */
    const char *listed = "{\"chat_template\": [{\"name\": \"tool_use\", \"template\": \"x\"}, {\"name\": \"default\", "
                         "\"template\": \"{% macro f() %}{% endmacro %}<|im_start|>\"}]}";
    ck_assert_int_eq(sd_chat_load(&c, NULL, listed, NULL, warn, sizeof warn, err, sizeof err), SD_OK);
    ck_assert_ptr_null(c.tmpl);
    ck_assert_ptr_nonnull(strstr(warn, "macro"));
    ck_assert_int_eq(c.family, SD_CHAT_CHATML);
    sd_chat_clear(&c);
    /* an override file that is missing or does not parse is an error */
    ck_assert_int_ne(sd_chat_load(&c, NULL, NULL, "/nonexistent/t.jinja", warn, sizeof warn, err, sizeof err), SD_OK);
    ck_assert_ptr_nonnull(strstr(err, "neither a family"));
    char path[] = "/tmp/sd_tmpl_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "{% if %}", 8), 8);
    close(fd);
    ck_assert_int_eq(sd_chat_load(&c, NULL, NULL, path, warn, sizeof warn, err, sizeof err), SD_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err, path));
    /* raise_exception: SD_ERR_ARG with its message */
    fd = open(path, O_WRONLY | O_TRUNC);
    const char *t = "{{ raise_exception('only one role') if messages|length > 0 }}";
    ck_assert_int_eq(write(fd, t, strlen(t)), (ssize_t)strlen(t));
    close(fd);
    ck_assert_int_eq(sd_chat_load(&c, NULL, NULL, path, warn, sizeof warn, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_chat_apply(&c, msgs, 1, NULL, &out, &add_special, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "only one role"));
    sd_chat_clear(&c);
    unlink(path);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("chat_template");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, chatml);
    tcase_add_test(tc, llama3);
    tcase_add_test(tc, llama2);
    tcase_add_test(tc, llama2_rejects_tool_role);
    tcase_add_test(tc, plain);
    tcase_add_test(tc, detect_from_config_text);
    tcase_add_test(tc, detect_from_fixtures);
    tcase_add_test(tc, family_names);
    tcase_add_test(tc, templates_load_and_apply);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
