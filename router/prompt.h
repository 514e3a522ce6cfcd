/* prompt.h — a request's prompt as token ids: the chat template rendered
 * and tokenized, prompt text tokenized, or the ids the request gave
 * (checked against the vocabulary). Shared by generation (gen.c) and
 * /tokenize (server.c), so both see the same tokens. */
#ifndef SD_PROMPT_H
#define SD_PROMPT_H

#include <stddef.h>
#include <stdint.h>

#include "chat_template.h"
#include "http_api.h"
#include "tokenizer.h"

/* Fills *ids (malloc'd, caller frees) and *n from r; r's prompt_ids move
 * into *ids when it had them. 400 errors in *e name the parameter
 * ("messages" / "prompt"): a template or tokenizer failure, an id out of
 * [0, vocab), an empty result. */
sd_status sd_prompt_tokens(const sd_tok *tok, const sd_chat *chat, int vocab, sd_api_req *r, int32_t **ids, size_t *n,
                           sd_api_err *e);

#endif
