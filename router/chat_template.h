/* chat_template.h — chat messages → prompt text. A checkpoint's own
 * template (tokenizer_config.json's chat_template, or --chat-template FILE)
 * is rendered with jinja.h, as Hugging Face's apply_chat_template does
 * (messages, add_generation_prompt, bos_token, eos_token; tools absent);
 * without one — or when it uses what jinja.h does not support — a known
 * family is detected from the tokenizer's special tokens or from the
 * template's text, and rendered in C, followed by the generation prompt:
 *
 *   ChatML (Qwen)  <|im_start|>{role}\n{content}<|im_end|>\n ... <|im_start|>assistant\n
 *   Llama 3        <|begin_of_text|><|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
 *                  ... <|start_header_id|>assistant<|end_header_id|>\n\n
 *   Llama 2        <s>[INST] <<SYS>>\n{system}\n<</SYS>>\n\n{user} [/INST] {assistant} </s><s>[INST] ...
 *   plain (base)   message contents joined by "\n\n"
 *
 * The rendered text carries the BOS marker where the family's template does
 * (Llama 2 / 3), so it is tokenized without adding special tokens (special
 * tokens in the text are parsed as such); plain text is tokenized with
 * add_special = true. Pure; no tokenizer state is kept. */
#ifndef SD_CHAT_TEMPLATE_H
#define SD_CHAT_TEMPLATE_H

#include <stdbool.h>
#include <stddef.h>

#include "jinja.h"
#include "status.h"
#include "tokenizer.h"

typedef enum {
    SD_CHAT_PLAIN = 0,
    SD_CHAT_CHATML = 1,
    SD_CHAT_LLAMA3 = 2,
    SD_CHAT_LLAMA2 = 3,
} sd_chat_family;

typedef struct sd_chat_msg {
    const char *role;    /* "system" | "user" | "assistant" | "tool" */
    const char *content; /* UTF-8 */
    json_t *fields;      /* the message's tool fields (tool_calls, tool_call_id, name) for a template, or NULL */
} sd_chat_msg;

/* Detects the family. config_json: the text of tokenizer_config.json or
 * NULL; its chat_template (a string, or a list of {name, template}) decides
 * when present. Otherwise the tokenizer's vocabulary: <|im_start|> → ChatML,
 * <|start_header_id|> → Llama 3, <s> + </s> + byte-fallback tokens (<0x0A>,
 * the SentencePiece Llama 2 vocabulary) → Llama 2, else plain. tok may be
 * NULL. */
sd_chat_family sd_chat_detect(const sd_tok *tok, const char *config_json);

/* Parses "chatml" | "llama3" | "llama2" | "plain"; SD_ERR_ARG otherwise. */
sd_status sd_chat_family_parse(const char *name, sd_chat_family *out);

/* Static lower-case name of a family. */
const char *sd_chat_family_name(sd_chat_family f);

/* Renders n messages in the family's format and, for families with one, the
 * assistant generation prompt. Plain: contents joined by "\n\n" (a base model
 * simply continues the text). *out is malloc'd, NUL-terminated, owned by the
 * caller. SD_ERR_ARG (message names the offending message) when a role is
 * not one the family supports. */
sd_status sd_chat_render(sd_chat_family f, const sd_chat_msg *msgs, size_t n, char **out, char *err, size_t errlen);

/* Whether rendered text of this family is tokenized with add_special. */
bool sd_chat_add_special(sd_chat_family f);

/* How a server turns messages into a prompt. */
typedef struct sd_chat {
    sd_chat_family family; /* used when tmpl is NULL */
    sd_jinja *tmpl;        /* the Jinja template, or NULL */
    char *source;          /* where tmpl came from (for logs): a path, or "tokenizer_config.json" */
    char *bos, *eos;       /* bos_token / eos_token given to the template ("" when unknown) */
} sd_chat;

/* Sets c up. config_json: tokenizer_config.json's text or NULL. override:
 * --chat-template (NULL: none) — a family name (chatml, llama3, llama2,
 * plain) or the path of a Jinja file. A template of the config that does
 * not parse is reported in *warn (when not NULL; the family is used); an
 * override that does not, or names no family and no readable file, is an
 * error (SD_ERR_ARG / SD_ERR_IO / SD_ERR_FORMAT, message in err). */
sd_status sd_chat_load(sd_chat *c, const sd_tok *tok, const char *config_json, const char *override, char *warn,
                       size_t warnlen, char *err, size_t errlen);
void sd_chat_clear(sd_chat *c);

/* Renders the messages with the generation prompt: the template, else the
 * family. tools (NULL: none) and the messages' fields go to the template as
 * Hugging Face's apply_chat_template(tools=...) passes them; the built-in
 * families have no tools (SD_ERR_ARG). *add_special: whether the text is
 * tokenized with add_special (a template's text carries its own special
 * tokens: false). SD_ERR_ARG with the template's message (raise_exception,
 * a role the family lacks). */
sd_status sd_chat_apply(const sd_chat *c, const sd_chat_msg *msgs, size_t n, json_t *tools, char **out,
                        bool *add_special, char *err, size_t errlen);

#endif
