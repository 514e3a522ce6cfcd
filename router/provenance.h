/* provenance.h — where each output token came from, for requests with
 * "speculative": {"provenance": true} (router/README.md, "Token
 * provenance").
 *
 * Each token event of the verifier is one step (specd.StepInfo: the drafts
 * it verified, those it accepted, their source). Of the step's tokens the
 * first `accepted` are accepted drafts ("drafter" or "ngram"); the rest is
 * the verifier's own token ("verifier": the correction, or the bonus after
 * every draft was accepted, or a step without drafts). A choice carries
 *
 *   "provenance": {"tokens": [{"id", "text", "source", "step"}, ...],
 *                  "steps":  [{"step", "drafted", "accepted", "source"}, ...]}
 *
 * with the entries gathered since the last chunk (non-streamed: all). Steps
 * are numbered from 1 per choice, in the order the router received them (a
 * request resumed on another verifier numbers on). A token's text is what
 * the streaming decoder emitted for it (a byte that completes no character
 * yet gives "", the token completing it the whole character), so the texts
 * of a choice's tokens, joined, are its output before stop strings cut it. */
#ifndef SD_ROUTER_PROVENANCE_H
#define SD_ROUTER_PROVENANCE_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "specd.pb-c.h"
#include "status.h"

typedef struct sd_prov {
    json_t *tokens, *steps; /* the entries not yet taken */
    unsigned n_steps;       /* steps so far */
    unsigned in_step;       /* tokens of the current step so far */
    uint32_t accepted;      /* ... its accepted drafts */
    const char *source;     /* ... and their source */
} sd_prov;

/* Empty (SD_ERR_NOMEM when out of memory: *p holds nothing then). */
sd_status sd_prov_init(sd_prov *p);
void sd_prov_clear(sd_prov *p);

/* A step begins (its token event; st NULL: a step without drafts). */
void sd_prov_step(sd_prov *p, const Specd__StepInfo *st);

/* The next token of the current step, with the text the decoder gave it. */
void sd_prov_token(sd_prov *p, int32_t id, const char *text, size_t len);

/* Whether entries were added since the last take. */
bool sd_prov_pending(const sd_prov *p);

/* The provenance object of the entries added since the last take (new
 * reference), or NULL when out of memory. */
json_t *sd_prov_take(sd_prov *p);

#endif
