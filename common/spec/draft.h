/* draft.h — the draft-model proposer: a small causal LM drafting for a
 * larger target with the same tokenizer.
 *
 * Each sequence (keyed by the caller's seq_id) owns a "KV mirror": a paged KV
 * sequence in the draft model's own pool plus the list of tokens whose K/V it
 * holds. Every propose call re-synchronises each mirror with the committed
 * context it is given: the mirror is rolled back to the longest common prefix
 * (dropping rejected drafts, keeping accepted ones without recomputation),
 * then the missing context tokens of ALL items are fed in one batched forward
 * pass, whose last row per item gives draft token 1; k-1 further batched
 * passes of one token per item give drafts 2..k. Greedy items take the
 * argmax; sampled items (want_q, temperature > 0) draw from the filtered
 * distribution of their sampling settings (temperature / top-k / top-p /
 * min-p; penalties are ignored: any q is exact under rejection sampling) with
 * u = sd_rng_uniform(seed, out_pos + i, SD_RNG_STREAM_DRAFT), and return that
 * distribution as q. Greedy items with want_q get the one-hot q {token: 1}.
 *
 * An item whose mirror cannot get KV blocks, whose context exceeds the draft
 * model's max_position, or which holds an id outside the vocabulary gets no
 * draft (n = 0); the other items are unaffected.
 * Not thread-safe: one owner thread owns the proposer, its model and pool. */
#ifndef SD_DRAFT_H
#define SD_DRAFT_H

#include <stddef.h>

#include "backend.h"
#include "model.h"
#include "proposer.h"

/* Most entries in a sampled draft token's proposal distribution q. */
#define SD_DRAFT_Q_CAP 64
#include "status.h"

/* Drafter weights. int8 (sd_model_quantize_q8) makes a faster, slightly
 * different drafter; what the target commits does not depend on it. */
enum {
    SD_DRAFT_QUANT_AUTO = 0, /* int8 when the backend offers it (CPU), else as stored */
    SD_DRAFT_QUANT_INT8 = 1, /* int8; an error where the backend cannot */
    SD_DRAFT_QUANT_NONE = 2, /* as stored in the checkpoint */
};

/* Default p_min: measured best of {0, 0.1, 0.3, 0.5, 0.7} with the demo
 * pair (docs/BENCHMARKS.md). */
#define SD_DRAFT_P_MIN_DEFAULT 0.3f

/* Default share of a device's memory for a draft model's KV mirrors
 * (sd_draft_opts.mem_fraction): the drafter's --gpu-memory-fraction, the
 * verifier's --draft-model's. */
#define SD_DRAFT_GPU_MEM_FRACTION 0.1

typedef struct sd_draft_opts {
    sd_backend *be;           /* backend to share (borrowed, must outlive the proposer);
                         NULL: create and own a CPU backend */
    int n_threads;            /* CPU backend threads when be == NULL (0 = all cores) */
    int max_seqs;             /* sequences the KV pool is sized for (default 16) */
    int max_context;          /* context length the pool is sized for per sequence
                         (0 = the draft model's max_position) */
    int block_size;           /* KV block size in positions (default 16) */
    int vocab_limit;          /* draft only ids < vocab_limit (0 = the model's vocab);
                         set to the target's vocab_size when it is smaller */
    int quant;                /* SD_DRAFT_QUANT_*: the drafter's matmul weights */
    float p_min;              /* > 0: an item stops drafting after a token whose drafter
                         probability is below p_min (its later drafts would
                         likely be rejected); 0 = always draft k */
    bool no_prefix_cache;     /* mirrors do not share KV blocks of common prefixes (kv_pool.h): a new
                             mirror prefills its whole context */
    int kv_dtype;             /* sd_kv_dtype of the mirrors' KV cache (default auto) */
    double mem_fraction;      /* on a device (mem_plan.h): the pool is capped to what fits this share of its
                             memory (0 = not capped) */
    size_t mem_free_at_start; /* the device's free memory when be opened (sd_mem_free_now) */
    bool random_weights;      /* random weights of model_dir's config.json (sd_model_random): benchmarks */
} sd_draft_opts;

/* "auto", "int8" or "none" -> SD_DRAFT_QUANT_*; -1 for anything else. */
int sd_draft_quant_parse(const char *s);

/* Defaults: be NULL, n_threads 0, max_seqs 16, max_context 0, block_size 16,
 * vocab_limit 0, quant AUTO, p_min SD_DRAFT_P_MIN_DEFAULT. */
sd_draft_opts sd_draft_opts_default(void);

/* Loads the draft model in model_dir and sizes its KV pool to
 * max_seqs * ceil((max_context + SD_MAX_DRAFT + 1) / block_size) blocks, on a
 * device at most what fits mem_fraction of its memory (at least one
 * sequence of max_context: SD_ERR_NOMEM otherwise).
 * opts NULL means the defaults. Errors: the model's load errors, SD_ERR_ARG
 * for bad options, SD_ERR_NOMEM. On success *out is owned by the caller
 * (sd_proposer_free frees the model, its pool and an owned backend). */
sd_status sd_draft_new(const char *model_dir, const sd_draft_opts *opts, sd_proposer **out, char *err, size_t errlen);

/* The draft model of a proposer made by sd_draft_new (NULL for any other
 * proposer). Borrowed: valid while the proposer lives. The pool is
 * sd_model_kv_pool(sd_draft_model(p)). */
const sd_model *sd_draft_model(const sd_proposer *p);

/* Runs the draft model through a few proposals (batches of 1, 2 and 4
 * sequences of a short made-up context, each three times) and forgets them,
 * so that what a device does once — loading kernels, choosing matmul
 * algorithms, recording CUDA graphs of each batch size — is done before the
 * first real draft, whose time the verifier's cost model learns from
 * (measured on an H200, the first drafts of a 0.6B drafter took 50 ms).
 * *passes (may be NULL): the forward passes run. SD_ERR_ARG for a proposer
 * not made by sd_draft_new; a pass's error otherwise. */
sd_status sd_draft_warm_up(sd_proposer *p, int *passes, char *err, size_t errlen);

/* Checks that the drafter in draft_dir can draft for the target in
 * target_dir: both DIR/tokenizer.json must have the same fingerprint
 * (SD_ERR_UNSUPPORTED otherwise: "drafter tokenizer (DIR) differs from the
 * target's: speculative decoding needs the same vocabulary"), and both
 * config.json vocab sizes must cover every id of that tokenizer
 * (SD_ERR_UNSUPPORTED otherwise). Vocab sizes may differ by embedding
 * padding only; pass the smaller one as vocab_limit then. Load errors of
 * either file come back as their status and message. */
sd_status sd_draft_check_tokenizer(const char *target_dir, const char *draft_dir, char *err, size_t errlen);

#endif
