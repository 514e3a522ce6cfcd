/* dstate.h — the drafter's per-request state table.
 *
 * For every request the verifier has opened, the drafter keeps the committed
 * tokens it knows (`ctx`) and the request's sampling settings. The verifier is
 * the source of truth: each DraftItem says how long the committed sequence is
 * after the tokens it carries, and when that does not add up (or the request
 * is unknown) the drafter answers need_open and the verifier re-sends the
 * whole context with DraftOpen. Forgetting a request is therefore always
 * safe, which is what bounds the table: opening a request when all max_seqs
 * slots are taken evicts the least recently used one.
 *
 * Pure bookkeeping (no model, no sockets), so it is unit-tested on its own
 * (drafter/tests/test_dstate.c). Not thread-safe: one owner thread. */
#ifndef SD_DSTATE_H
#define SD_DSTATE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "proposer.h"
#include "sampler.h"
#include "status.h"

#define SD_DPIPE_MAX_BRANCHES 3 /* guesses of other outcomes per request and step */
#define SD_DRUN_MAX (SD_MAX_DRAFT + 1)
#define SD_DRUN_KEEP (2 * (1 + SD_DPIPE_MAX_BRANCHES)) /* this step's runs and the last step's */

/* A run of tokens the drafter drafted greedily, with its confidence: t[i]
 * at position pos0 + i; hcum[i] = sd_span_hash of the whole sequence before
 * t[i] (so hcum[0] names the context it was drafted from). */
typedef struct sd_drun {
    int64_t pos0;
    int n;
    int32_t t[SD_DRUN_MAX];
    float p[SD_DRUN_MAX];
    int32_t alt[SD_DRUN_MAX];
    float alt_p[SD_DRUN_MAX];
    uint64_t hcum[SD_DRUN_MAX + 1];
} sd_drun;

/* What pipelined drafting (dpipe.h) keeps per request: the verifier's last
 * word on it, whether a span for that state is owed, and the runs drafted
 * for it lately (they tell how sure the drafter was of the drafts now in
 * flight). */
typedef struct sd_dreq_pipe {
    int k;                           /* drafts per span the verifier takes */
    bool want_q;                     /* sampled drafts, with q */
    int64_t n_prompt;                /* committed_len - output_pos: a token's output position is pos - n_prompt */
    int32_t in_flight[SD_MAX_DRAFT]; /* drafts the verifier is verifying, after ctx */
    int n_in_flight;
    bool dirty;         /* the state changed: a span is owed */
    bool branches_owed; /* the main chain went out; guesses of other outcomes may follow */
    double told_ms;     /* when the verifier's last word arrived (drafter clock) */
    double step_ms;     /* ... and its expected step time */
    uint8_t peer[256];  /* the verifier's ROUTER identity (spans go there) */
    size_t peer_len;
    sd_drun runs[SD_DRUN_KEEP]; /* the last runs drafted, oldest overwritten first */
    int next_run;
} sd_dreq_pipe;

/* One request's state. Owned by the table; pointers into it stay valid until
 * the next open / close / advance of the same table. */
typedef struct sd_dreq {
    uint64_t id;
    int32_t *ctx; /* committed tokens known to the drafter; room for in_flight after them */
    size_t n_ctx, cap;
    uint64_t ctx_hash;    /* sd_span_hash of ctx[0..n_ctx) (proto/span.h) */
    sd_sampling sampling; /* its json_schema / regex compiled into schema / rx (sampling's point there) */
    struct sd_json_schema *schema;
    struct sd_regex *rx;
    uint64_t last_used; /* LRU clock value of the last open/advance */
    bool used;
    sd_dreq_pipe pipe;
} sd_dreq;

typedef struct sd_dstate sd_dstate;

/* A table for at most max_seqs requests (>= 1) in *out (the caller frees it
 * with sd_dstate_free). Returns SD_OK, or SD_ERR_ARG (max_seqs < 1) or
 * SD_ERR_NOMEM with a message in err; *out is NULL then. */
sd_status sd_dstate_new(int max_seqs, sd_dstate **out, char *err, size_t errlen);

/* Frees the table and every request's context; NULL is a no-op. */
void sd_dstate_free(sd_dstate *t);

/* Opens (or re-opens) request id with its full committed context (copied)
 * and sampling settings (copied; a JSON schema's text is compiled, and
 * dropped — drafting unconstrained — when it does not compile); its
 * pipelined state starts clean. When the table is full and id is new, the
 * least recently used request is evicted first: its id is written to
 * *evicted (may be NULL) and the function returns true in *did_evict (may be
 * NULL) so the caller can release that request's proposer state.
 * Returns SD_OK, or SD_ERR_NOMEM (the table is unchanged except that an
 * eviction may already have happened and is reported). */
sd_status sd_dstate_open(sd_dstate *t, uint64_t id, const int32_t *ctx, size_t n_ctx, const sd_sampling *sampling,
                         bool *did_evict, uint64_t *evicted);

/* Forgets request id. Returns true when it was known. */
bool sd_dstate_close(sd_dstate *t, uint64_t id);

/* Advances request id by the committed tokens it has not seen:
 * when id is known and n_ctx + n_new == committed_len, appends new_tokens,
 * marks it most recently used and returns SD_OK with *out set to the
 * request (borrowed). Otherwise returns SD_ERR_STATE (the caller answers
 * need_open; the request is left unchanged) or SD_ERR_NOMEM (likewise, the
 * request is forgotten so that it will be re-opened). */
sd_status sd_dstate_advance(sd_dstate *t, uint64_t id, uint64_t committed_len, const int32_t *new_tokens, size_t n_new,
                            sd_dreq **out);

/* The request id, or NULL when unknown. Does not touch the LRU order. */
sd_dreq *sd_dstate_get(sd_dstate *t, uint64_t id);

/* Makes room for n tokens in r->ctx (its committed tokens are kept).
 * SD_ERR_NOMEM leaves r unchanged. */
sd_status sd_dstate_reserve(sd_dreq *r, size_t n);

/* Slot i of the table (0 <= i < sd_dstate_capacity), NULL when unused:
 * for walking every request. */
sd_dreq *sd_dstate_at(sd_dstate *t, int i);
int sd_dstate_capacity(const sd_dstate *t);

/* Number of requests held. */
int sd_dstate_count(const sd_dstate *t);

#endif
