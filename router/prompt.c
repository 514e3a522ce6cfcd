/* prompt.c — see prompt.h. */
#include "prompt.h"

#include <stdlib.h>
#include <string.h>

#define INVALID "invalid_request_error"

sd_status sd_prompt_tokens(const sd_tok *tok, const sd_chat *chat, int vocab, sd_api_req *r, int32_t **ids, size_t *n,
                           sd_api_err *e)
{
    char err[480] = "";
    const char *pp = r->kind == SD_API_CHAT ? "messages" : "prompt";
    *ids = NULL;
    *n = 0;
    if (r->prompt_ids) {
        for (size_t i = 0; i < r->n_prompt_ids; i++)
            if (r->prompt_ids[i] >= vocab)
                return sd_api_fail(e, 400, INVALID, "prompt", NULL,
                                   "'prompt' token id %d at index %zu is out of "
                                   "range (vocabulary size %d)",
                                   (int)r->prompt_ids[i], i, vocab);
        *ids = r->prompt_ids;
        *n = r->n_prompt_ids;
        r->prompt_ids = NULL;
        r->n_prompt_ids = 0;
        return SD_OK;
    }
    char *text = r->prompt;
    bool add_special = true;
    if (r->kind == SD_API_CHAT) {
        if (sd_chat_apply(chat, r->messages, r->n_messages, r->tools, &text, &add_special, err, sizeof err) != SD_OK)
            return sd_api_fail(e, 400, INVALID, "messages", NULL, "%s", err);
    }
    sd_status st = sd_tok_encode(tok, text, strlen(text), add_special, ids, n, err, sizeof err);
    if (text != r->prompt) free(text);
    if (st != SD_OK) return sd_api_fail(e, 400, INVALID, pp, NULL, "'%s' could not be tokenized: %s", pp, err);
    if (*n == 0) {
        free(*ids);
        *ids = NULL;
        return sd_api_fail(e, 400, INVALID, pp, NULL, "'%s' must not be empty", pp);
    }
    return SD_OK;
}
