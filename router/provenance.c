/* provenance.c — each output token's source (see provenance.h). */
#include "provenance.h"

static const char *source_name(Specd__DraftSource s)
{
    switch (s) {
    case SPECD__DRAFT_SOURCE__DRAFT_DRAFTER: return "drafter";
    case SPECD__DRAFT_SOURCE__DRAFT_NGRAM: return "ngram";
    default: return "none";
    }
}

sd_status sd_prov_init(sd_prov *p)
{
    *p = (sd_prov){json_array(), json_array(), 0, 0, 0, "none"};
    if (p->tokens && p->steps) return SD_OK;
    sd_prov_clear(p);
    return SD_ERR_NOMEM;
}

void sd_prov_clear(sd_prov *p)
{
    json_decref(p->tokens);
    json_decref(p->steps);
    *p = (sd_prov){0};
}

void sd_prov_step(sd_prov *p, const Specd__StepInfo *st)
{
    static const Specd__StepInfo none = SPECD__STEP_INFO__INIT;
    if (!st) st = &none;
    p->n_steps++;
    p->in_step = 0;
    p->accepted = st->accepted;
    p->source = source_name(st->source);
    json_array_append_new(p->steps, json_pack("{s:I, s:I, s:I, s:s}", "step", (json_int_t)p->n_steps, "drafted",
                                              (json_int_t)st->drafted, "accepted", (json_int_t)st->accepted, "source",
                                              p->source));
}

void sd_prov_token(sd_prov *p, int32_t id, const char *text, size_t len)
{
    const char *src = p->in_step < p->accepted ? p->source : "verifier";
    json_t *t = json_stringn(text ? text : "", text ? len : 0);
    if (!t) t = json_string(""); /* the decoder emits valid UTF-8: not reached */
    json_array_append_new(p->tokens, json_pack("{s:i, s:o, s:s, s:I}", "id", (int)id, "text", t, "source", src, "step",
                                               (json_int_t)p->n_steps));
    p->in_step++;
}

bool sd_prov_pending(const sd_prov *p) { return json_array_size(p->tokens) > 0 || json_array_size(p->steps) > 0; }

json_t *sd_prov_take(sd_prov *p)
{
    json_t *tokens = json_array(), *steps = json_array();
    if (!tokens || !steps) {
        json_decref(tokens);
        json_decref(steps);
        return NULL;
    }
    json_t *o = json_pack("{s:o, s:o}", "tokens", p->tokens, "steps", p->steps);
    p->tokens = tokens;
    p->steps = steps;
    return o;
}
