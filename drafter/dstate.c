/* dstate.c — the drafter's per-request state table (see dstate.h).
 *
 * A flat array of max_seqs slots searched linearly: the table is small
 * (default 64) and a draft batch touches each of its requests once, so a hash
 * would buy nothing measurable next to a forward pass. */
#include "dstate.h"

#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "json_schema.h"
#include "regex_mask.h"
#include "log.h"
#include "span.h"

struct sd_dstate {
    sd_dreq *slots;
    int n_slots;
    uint64_t clock; /* LRU clock: bumped on every open/advance */
};

sd_status sd_dstate_new(int max_seqs, sd_dstate **out, char *err, size_t errlen)
{
    *out = NULL;
    if (max_seqs < 1) return sd_seterr(err, errlen, SD_ERR_ARG, "dstate: max_seqs %d < 1", max_seqs);
    sd_dstate *t = calloc(1, sizeof *t);
    if (t) t->slots = calloc((size_t)max_seqs, sizeof *t->slots);
    if (!t || !t->slots) {
        free(t);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "dstate: out of memory for %d requests", max_seqs);
    }
    t->n_slots = max_seqs;
    *out = t;
    return SD_OK;
}

static void forget(sd_dreq *r);

void sd_dstate_free(sd_dstate *t)
{
    if (!t) return;
    for (int i = 0; i < t->n_slots; i++) forget(&t->slots[i]);
    free(t->slots);
    free(t);
}

sd_dreq *sd_dstate_get(sd_dstate *t, uint64_t id)
{
    for (int i = 0; i < t->n_slots; i++)
        if (t->slots[i].used && t->slots[i].id == id) return &t->slots[i];
    return NULL;
}

int sd_dstate_count(const sd_dstate *t)
{
    int n = 0;
    for (int i = 0; i < t->n_slots; i++) n += t->slots[i].used;
    return n;
}

static void forget(sd_dreq *r)
{
    free(r->ctx);
    sd_json_schema_free(r->schema);
    sd_regex_free(r->rx);
    memset(r, 0, sizeof *r);
}

/* The settings kept: a JSON schema or a regular expression compiled (the
 * text is the message's); one that does not compile is drafted without. */
static void keep_sampling(sd_dreq *r, const sd_sampling *sampling)
{
    sd_json_schema_free(r->schema);
    sd_regex_free(r->rx);
    r->schema = NULL;
    r->rx = NULL;
    r->sampling = sampling ? *sampling : sd_sampling_default();
    bool want_rx = r->sampling.regex != NULL, want_schema = r->sampling.json_schema != NULL;
    char err[256];
    if (sd_sampling_compile(&r->sampling, &r->rx, &r->schema, err, sizeof err) == SD_OK) return;
    SD_DEBUG("request %llu: drafting without its %s: %s", (unsigned long long)r->id,
             want_rx && !r->rx ? "regular expression" : "schema", err);
    if ((want_rx && !r->rx) || (want_schema && !r->schema)) r->sampling.json_vocab = NULL;
}

sd_status sd_dstate_reserve(sd_dreq *r, size_t n) { return sd_grow(&r->ctx, &r->cap, n, sizeof *r->ctx); }

sd_dreq *sd_dstate_at(sd_dstate *t, int i)
{
    return i >= 0 && i < t->n_slots && t->slots[i].used ? &t->slots[i] : NULL;
}

int sd_dstate_capacity(const sd_dstate *t) { return t->n_slots; }

/* A free slot, or the least recently used one (evicted, reported). */
static sd_dreq *take_slot(sd_dstate *t, bool *did_evict, uint64_t *evicted)
{
    sd_dreq *lru = NULL;
    for (int i = 0; i < t->n_slots; i++) {
        sd_dreq *r = &t->slots[i];
        if (!r->used) return r;
        if (!lru || r->last_used < lru->last_used) lru = r;
    }
    if (did_evict) *did_evict = true;
    if (evicted) *evicted = lru->id;
    forget(lru);
    return lru;
}

sd_status sd_dstate_open(sd_dstate *t, uint64_t id, const int32_t *ctx, size_t n_ctx, const sd_sampling *sampling,
                         bool *did_evict, uint64_t *evicted)
{
    if (did_evict) *did_evict = false;
    sd_dreq *r = sd_dstate_get(t, id);
    if (!r) {
        r = take_slot(t, did_evict, evicted);
        r->id = id;
        r->used = true;
    }
    r->n_ctx = 0;
    memset(&r->pipe, 0, sizeof r->pipe);
    if (sd_dstate_reserve(r, n_ctx ? n_ctx : 1) != SD_OK) {
        forget(r);
        return SD_ERR_NOMEM;
    }
    if (n_ctx) memcpy(r->ctx, ctx, n_ctx * sizeof *ctx);
    r->n_ctx = n_ctx;
    r->ctx_hash = sd_span_hash(SD_SPAN_HASH_SEED, ctx, n_ctx);
    keep_sampling(r, sampling);
    r->last_used = ++t->clock;
    return SD_OK;
}

bool sd_dstate_close(sd_dstate *t, uint64_t id)
{
    sd_dreq *r = sd_dstate_get(t, id);
    if (!r) return false;
    forget(r);
    return true;
}

sd_status sd_dstate_advance(sd_dstate *t, uint64_t id, uint64_t committed_len, const int32_t *new_tokens, size_t n_new,
                            sd_dreq **out)
{
    *out = NULL;
    sd_dreq *r = sd_dstate_get(t, id);
    if (!r || (uint64_t)r->n_ctx + (uint64_t)n_new != committed_len) return SD_ERR_STATE;
    if (sd_dstate_reserve(r, r->n_ctx + n_new) != SD_OK) {
        forget(r);
        return SD_ERR_NOMEM;
    }
    if (n_new) memcpy(r->ctx + r->n_ctx, new_tokens, n_new * sizeof *new_tokens);
    r->n_ctx += n_new;
    r->ctx_hash = sd_span_hash(r->ctx_hash, new_tokens, n_new);
    r->last_used = ++t->clock;
    *out = r;
    return SD_OK;
}
