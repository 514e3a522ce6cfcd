/* proposer.h — the one interface every draft source implements.
 *
 * A proposer suggests up to K next tokens for each sequence of a batch, given
 * the sequence's full committed context. It may keep per-sequence state (a
 * draft model keeps a KV mirror), keyed by a caller-chosen 64-bit id, and must
 * re-synchronise itself from the context it is given each call: the
 * committed context is the source of truth (tokens it proposed that were not
 * accepted are rolled back; tokens it never saw are fed in). The core is
 * method-agnostic: greedy/match/rejection verification only see the tokens
 * and, when sampling, the sparse proposal distribution q of each token.
 *
 * Implementations: draft model (draft.h), n-gram / prompt lookup (ngram.h).
 * Not thread-safe: one owner thread. */
#ifndef SD_PROPOSER_H
#define SD_PROPOSER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "sampler.h"
#include "status.h"

#define SD_MAX_DRAFT 16
/* Default draft tokens per step (K): the best measured with the demo pair
 * on CPU (docs/BENCHMARKS.md). */
#define SD_NUM_DRAFT_DEFAULT 6

/* One sequence's request in a propose batch. */
typedef struct sd_propose_item {
    uint64_t seq_id;             /* caller's key for per-sequence state */
    uint32_t branch;             /* 0: the sequence's own state; b > 0: a second state of the same
                                * sequence (another guess of its future), kept apart */
    const int32_t *context;      /* committed tokens (prompt + output) */
    int n_context;               /* >= 1 */
    int k;                       /* tokens wanted, 0..SD_MAX_DRAFT */
    const sd_sampling *sampling; /* NULL or temperature 0: greedy drafts, no q */
    bool want_q;                 /* sample from the filtered distribution, fill q */
    bool want_alt;               /* greedy: fill p / alt / alt_p (when the proposer knows them) */
    uint64_t out_pos;            /* output position of the first draft token (RNG key) */
    int n_guess;                 /* the first n_guess tokens are guesses of the committed sequence's
                                * next tokens (pipelined drafting: of the verifier's own token), not
                                * drafts to verify: a doubt there does not end the item (p_min) */
} sd_propose_item;

/* Its result. q[i] (when want_q) is the proposal distribution token i was
 * drawn from: a sparse list owned by the proposer, valid until the next call.
 * For greedy drafts of an item with want_alt a proposer may also say how
 * sure it was: p[i] its probability of tokens[i], alt[i] its second choice
 * there and alt_p[i] that one's probability (alt[i] == -1: not known). */
typedef struct sd_proposal {
    int n; /* tokens proposed, 0..k */
    int32_t tokens[SD_MAX_DRAFT];
    const sd_tokprob *q[SD_MAX_DRAFT]; /* NULL when not sampled */
    size_t nq[SD_MAX_DRAFT];
    float p[SD_MAX_DRAFT];
    int32_t alt[SD_MAX_DRAFT];
    float alt_p[SD_MAX_DRAFT];
    int match; /* the n-gram proposer: the length of the n-gram that matched
                                         * (0: none; other proposers leave it 0) */
} sd_proposal;

typedef struct sd_proposer sd_proposer;

typedef struct sd_proposer_ops {
    const char *name;
    /* Proposes for n items; out[i] belongs to items[i]. A failure for one
     * item leaves out[i].n == 0 (no draft, never wrong). */
    sd_status (*propose)(sd_proposer *p, const sd_propose_item *items, int n, sd_proposal *out, char *err,
                         size_t errlen);
    /* Forgets a sequence's state, every branch of it (finished / cancelled). */
    void (*release)(sd_proposer *p, uint64_t seq_id);
    void (*destroy)(sd_proposer *p);
} sd_proposer_ops;

struct sd_proposer {
    const sd_proposer_ops *ops;
    void *impl;
};

/* Destroys a proposer; NULL is a no-op. */
static inline void sd_proposer_free(sd_proposer *p)
{
    if (p) p->ops->destroy(p);
}

#endif
