/* engine.h — the verifier's side of the speculative transaction, in-process.
 *
 * An sd_req is one generation request: prompt + committed output tokens, its
 * target KV sequence, sampling / stop settings and speculation statistics.
 * sd_engine_step runs ONE batched target forward pass over a set of requests:
 * a prompt chunk for requests still prefilling, and for decoding requests the
 * verify span [last committed token, d1..dK] with the drafts supplied by the
 * caller (any proposer, any process). It then applies the accept rule
 * (verify.h), commits the accepted prefix's KV, releases the rest, appends
 * the committed tokens and applies stop conditions (EOS, stop ids,
 * max_tokens, context). Invariant while decoding: kv.len == n_tokens - 1
 * (the last committed token's KV is computed by the next span). The
 * sampled decode spans of a step are verified in parallel on the backend's
 * host threads (sd_backend_host_parallel: the CPU pool, idle between the
 * kernels), each request with its own scratch, rows and random stream, and
 * committed in order after: the outcome is the serial one.
 *
 * Ownership: the engine borrows the model; requests are created and freed by
 * the caller (sd_req_free releases their KV). One thread owns an engine. */
#ifndef SD_ENGINE_H
#define SD_ENGINE_H

#include <stdbool.h>
#include <stdint.h>

#include "json_mask.h"
#include "logprob.h"
#include "model.h"
#include "proposer.h"
#include "sampler.h"
#include "status.h"
#include "verify.h"

typedef enum {
    SD_FINISH_NONE = 0,
    SD_FINISH_STOP = 1,   /* EOS or a stop id */
    SD_FINISH_LENGTH = 2, /* max_tokens or the context is full */
    SD_FINISH_CANCELLED = 3,
    SD_FINISH_ERROR = 4, /* e.g. KV pool exhausted */
} sd_finish;

#define SD_VERIFY_AUTO (-1)
#define SD_MAX_STOP_IDS 16

typedef struct sd_req_params {
    sd_sampling sampling;
    int max_tokens; /* >= 1 */
    int32_t stop_ids[SD_MAX_STOP_IDS];
    int n_stop;
    bool ignore_eos;
    bool speculate;       /* accept drafts for this request */
    int num_draft;        /* K, 0..SD_MAX_DRAFT */
    int verify;           /* sd_verify_mode or SD_VERIFY_AUTO */
    bool logprobs;        /* report each output token's log-probability (logprob.h) */
    int top_logprobs;     /* ... with this many alternatives, 0..SD_MAX_LOGPROBS */
    bool prompt_logprobs; /* ... and each prompt token's (from the second on) */
} sd_req_params;

typedef struct sd_spec_stats {
    uint64_t steps;                     /* decode steps (forward passes with a verify span) */
    uint64_t draft_tokens;              /* drafts offered to the verifier */
    uint64_t accepted_tokens;           /* drafts accepted */
    uint64_t accepted_at[SD_MAX_DRAFT]; /* accepted_at[i]: steps that accepted draft i+1 */
} sd_spec_stats;

typedef struct sd_req {
    uint64_t id;
    int32_t *tokens; /* prompt followed by output; capacity n_prompt + max_tokens */
    int n_prompt;
    int n_tokens;
    int n_prefilled; /* positions whose KV is computed (before decoding starts) */
    int prefill_to;  /* ... the positions to compute before decoding: the prompt, or after a
                          * preemption every committed token but the last (sd_req_preempt) */
    sd_kv_seq kv;
    sd_req_params p;
    sd_finish finish;
    char error[160]; /* set with SD_FINISH_ERROR */
    int n_new;       /* tokens committed by the last step */
    sd_spec_stats stats;
    sd_token_lp *lp;        /* p.logprobs: [SD_MAX_DRAFT + 1], those of the n_new tokens the last step committed */
    sd_token_lp *prompt_lp; /* p.prompt_logprobs: [n_prompt]; entry i is prompt token i's (i >= 1), filled
                             * when the prefill passes it (all of them once the first token is out) */
    bool share_wait;        /* prefix sharing: its prefill waits for a request computing the same prefix */
    bool share_looked;      /* prefix sharing: counted in the engine's queries */
    int shared;             /* positions of its KV taken from the prefix cache (sd_engine_share_prefixes) */
    int n_registered;       /* its KV blocks registered in the prefix cache */
    int32_t *procs;         /* its copies of p.sampling's logits-processor lists (p.sampling points here) */
    struct sd_json_schema *schema; /* p.sampling.json_schema compiled (p.sampling.schema points here) */
    char *schema_text;             /* ... and its text (a drafter compiles its own) */
    struct sd_regex *rx;           /* p.sampling.regex compiled (p.sampling.rx points here; its text for a drafter) */
} sd_req;

typedef struct sd_engine_opts {
    int prefill_chunk;      /* max prompt tokens per request per step (default 256) */
    int prefill_budget;     /* max prompt tokens per step over all requests (default 512): bounds
                          * a step's time however many long prompts arrive together, so the
                          * requests already decoding keep streaming and the verifier keeps
                          * answering between steps */
    bool no_prefix_sharing; /* prefill every prompt in full (sd_engine_share_prefixes does nothing) */
} sd_engine_opts;

typedef struct sd_engine sd_engine;

/* Creates an engine over m (borrowed; its KV pool must be initialised) in
 * *out; the caller frees it with sd_engine_free. opts may be NULL for
 * defaults. Returns SD_OK, or SD_ERR_NOMEM (or SD_ERR_ARG for a model
 * without a vocabulary) with a message in err; *out is NULL then. */
sd_status sd_engine_new(sd_model *m, const sd_engine_opts *opts, sd_engine **out, char *err, size_t errlen);
void sd_engine_free(sd_engine *e);
sd_model *sd_engine_model(const sd_engine *e);

/* The token table requests with sampling.json_object are masked with
 * (json_mask.h; borrowed: it must outlive the engine's requests). Without
 * one such requests are refused. */
void sd_engine_set_json_vocab(sd_engine *e, const sd_json_vocab *v);

/* Default request parameters: greedy, 256 tokens, no speculation. */
sd_req_params sd_req_params_default(void);

/* Creates a request (copies the prompt, and the logits processors' lists
 * of p->sampling, to which r->p.sampling then points; with min_tokens it
 * lists EOS and the stop ids as the tokens held back). Validates ids,
 * sampling, sizes and the context (n_prompt + 1 <= max_position). Does not
 * touch the KV pool.
 * Errors: SD_ERR_ARG with a message naming the problem. */
sd_status sd_req_new(const sd_engine *e, uint64_t id, const int32_t *prompt, int n_prompt, const sd_req_params *p,
                     sd_req **out, char *err, size_t errlen);

/* Releases the request's KV and frees it; NULL is a no-op. */
void sd_req_free(sd_engine *e, sd_req *r);

/* Marks a request cancelled and releases its KV immediately. */
void sd_req_cancel(sd_engine *e, sd_req *r);

/* Admission: true when the pool can hold the request's tokens (+1) now. */
bool sd_engine_can_admit(const sd_engine *e, const sd_req *r);

/* Output view. */
static inline const int32_t *sd_req_output(const sd_req *r) { return r->tokens + r->n_prompt; }
static inline int sd_req_n_output(const sd_req *r) { return r->n_tokens - r->n_prompt; }
static inline bool sd_req_prefilling(const sd_req *r) { return r->n_prefilled < r->prefill_to; }

/* True when a prefill chunk of `chunk` tokens ends the request's prefill and
 * samples its first token (a fresh request; a preempted one resumes decoding
 * from its committed tokens instead). */
static inline bool sd_req_prefill_samples(const sd_req *r, int chunk)
{
    return r->n_prefilled + chunk == r->prefill_to && r->n_tokens == r->n_prompt;
}

/* Preemption: frees the request's KV (the pool ran short) and makes it
 * prefill again — its prompt and the tokens it committed, all but the last
 * — before it decodes on from where it was. The output is unchanged:
 * greedy and seeded sampling depend only on the tokens and positions. */
void sd_req_preempt(sd_engine *e, sd_req *r);

/* Failover: r (new, not yet stepped) continues output produced elsewhere —
 * ids[0..n) become its committed output and it prefills them with its
 * prompt before decoding on, exactly as sd_req_preempt resumes. SD_ERR_ARG
 * (message in err) for an id out of the vocabulary, or n leaving no token
 * to produce (max_tokens, the context). */
sd_status sd_req_resume(const sd_engine *e, sd_req *r, const int32_t *ids, int n, char *err, size_t errlen);

/* The prompt tokens each request prefills in the next step: chunk[i] for
 * reqs[i], 0 for one not prefilling or waiting for a later step. Requests
 * take their chunks (at most prefill_chunk) in order until the step's
 * prefill_budget is spent; the first prefilling request always gets one.
 * Returns the total. sd_engine_step follows the same plan. */
int sd_engine_prefill_plan(const sd_engine *e, sd_req *const *reqs, int n, int *chunk);

/* Prefix caching. Every request's full committed KV blocks are registered
 * in the pool's prefix cache with their tokens (kv_pool.h) as they are
 * committed, and stay cached after the request ends until a reservation
 * needs the block. A request about to prefill from scratch (fresh, or
 * preempted) takes the cached blocks of the longest prefix of its tokens —
 * held by a running request or by nobody — and prefills only the rest.
 * Whole blocks only, and never the position whose logits the request
 * samples from, so it computes at least one position itself and reads no
 * KV but that of its own tokens at their own positions (matches compare
 * tokens, not only hashes; cached blocks are full and never written
 * again). A request whose prefix another one in reqs[0..n) is still
 * computing waits for it (share_wait: sd_engine_prefill_plan gives it
 * nothing) when that gains it a block; it only waits on a request that has
 * started or comes before it. Requests that report prompt
 * log-probabilities prefill in full. Idempotent within a step;
 * sd_engine_step calls it first, and a caller planning with
 * sd_engine_prefill_plan calls it before. Off with opts.no_prefix_sharing
 * (nothing registered, nothing taken). */
void sd_engine_share_prefixes(sd_engine *e, sd_req *const *reqs, int n);

/* Prefix-cache totals: prompt positions looked up (queries) and taken from
 * the cache (hits), as vLLM's prefix-cache counters. */
void sd_engine_prefix_stats(const sd_engine *e, uint64_t *queries, uint64_t *hits);

/* How many drafts the request can use this step (0 while prefilling, when
 * speculation is off, or near max_tokens / the context end). */
int sd_req_draft_budget(const sd_engine *e, const sd_req *r);

/* The verify mode the request uses with a proposal that has / lacks q. */
sd_verify_mode sd_req_verify_mode(const sd_req *r, bool have_q);

/* Runs one step over reqs[0..n) (finished ones are skipped). drafts may be
 * NULL (no speculation) or hold one proposal per request (n == 0 for none).
 * Each request's n_new / finish are updated. A per-request failure (KV
 * exhausted) finishes that request with SD_FINISH_ERROR and leaves the others
 * untouched; the return value is SD_OK unless the step as a whole failed. */
sd_status sd_engine_step(sd_engine *e, sd_req *const *reqs, int n, const sd_proposal *drafts, char *err, size_t errlen);

/* Fills *it with r's draft request for this step (the whole committed
 * context, the draft budget, q wanted when sampling with auto / rejection
 * verification). Returns false when r takes no drafts this step. */
bool sd_req_propose_item(const sd_engine *e, const sd_req *r, sd_propose_item *it);

/* What the last sd_engine_step did and how long it took: the forward pass
 * over `rows` positions, then verification of greedy_rows rows by argmax
 * and of sampled_pos positions by sampling — a sampled span is verified
 * position by position up to its first rejection, so these are the tokens
 * its requests committed, not their rows (all zero when nothing ran). */
typedef struct sd_step_timing {
    int rows, seqs, greedy_rows, sampled_pos;
    double forward_ms, accept_ms;
} sd_step_timing;

const sd_step_timing *sd_engine_last_timing(const sd_engine *e);

/* Called after every step of sd_engine_run for each request with new tokens. */
typedef void (*sd_step_cb)(void *ctx, const sd_req *r);

/* Steps reqs[0..n) together until all have finished, drafting with pr (NULL:
 * plain decoding) before each step; n <= 64. A proposer failure only costs
 * that step its drafts. Returns SD_OK, or the error of a failed step. */
sd_status sd_engine_run(sd_engine *e, sd_proposer *pr, sd_req *const *reqs, int n, sd_step_cb cb, void *ctx, char *err,
                        size_t errlen);

#endif
