/* model.h — a Llama / Qwen2 / Qwen3 causal LM over a compute backend.
 *
 * sd_model_load reads DIR/config.json and the safetensors weights, uploads
 * them to the backend and keeps the checkpoint mapped. sd_model_kv_init
 * allocates the paged KV storage and its block pool. sd_model_forward runs
 * ONE pass over a batch of sequences, each contributing a span of tokens
 * (a prompt chunk, a single decode token, or a K+1 verify span) at its own
 * positions, reading and writing K/V through each sequence's block table.
 *
 * Threading: one thread owns a model (the backend may use more inside). */
#ifndef SD_MODEL_H
#define SD_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "backend.h"
#include "comm.h"
#include "kv_pool.h"
#include "model_config.h"
#include "status.h"

typedef struct sd_model sd_model;

/* One sequence's part of a forward batch. */
typedef struct sd_batch_seq {
    const int32_t *tokens;   /* [n] token ids of the span */
    int n;                   /* span length, >= 1 */
    int pos0;                /* position of tokens[0]; positions pos0..pos0+n-1 */
    const sd_kv_seq *kv;     /* blocks covering at least pos0 + n positions */
    int n_logits;            /* logits wanted for the last n_logits rows (0..n) */
    int32_t *argmax;         /* non-NULL: those rows' argmax tokens [n_logits] go here instead of
                             * their logits (on a GPU the rows never cross to the host) */
    const sd_draw_row *draw; /* non-NULL (not with argmax): those rows are drawn on the backend with */
    sd_draw_out *drawn;      /* ... draw[n_logits] (its draw_rows op), the results [n_logits] here */
} sd_batch_seq;

/* Loads the model in dir onto be (which the model borrows; it must outlive
 * the model). Errors (unreadable / unsupported config, missing or mis-shaped
 * tensor, bad file) come back as a status and a message. */
sd_status sd_model_load(const char *dir, sd_backend *be, sd_model **out, char *err, size_t errlen);

/* A model with the shapes of a config.json file (config_path, any name) and
 * random weights in its torch_dtype (bf16 or f32): norm weights 1, biases 0,
 * the rest uniform with standard deviation 0.02, a function of seed and each
 * tensor's name only. For benchmarks on published model shapes without their
 * checkpoints (the logits mean nothing). Errors as sd_model_load. */
sd_status sd_model_random(const char *config_path, uint64_t seed, sd_backend *be, sd_model **out, char *err,
                          size_t errlen);

/* Tensor parallelism (Megatron): one model over the ranks of a group, each
 * with its own backend (a GPU, or CPU threads). q/k/v and gate/up are split
 * by columns (heads, intermediate rows), o and down by rows, their partial
 * sums exchanged through the group's communicator and added in one fixed
 * order (kernels/comm.h, backend.h reduce_parts); norms, the embedding and
 * the residual stream are on every rank, the final norm and the LM head on
 * rank 0. Each rank holds 1/size of the split weights and of the KV heads;
 * the KV pool (block tables, commit, rollback) is rank 0's. A pass runs on
 * every rank at once (ranks.h); its caller sees one model.
 *
 * chunked (--batch-invariant): every row-parallel matmul is summed over
 * SD_TP_CHUNKS fixed chunks of its inputs, each rank computing the chunks
 * of its share, and the chunk sums are added pairwise in one order — so the
 * logits are bit-identical at TP = 1, 2, 4 and 8 on backends whose other ops
 * are batch-invariant. size 1 without chunked is the plain model. */
#define SD_TP_CHUNKS 8
typedef struct sd_tp_opts {
    int size;               /* ranks, 1 .. SD_COMM_MAX_RANKS */
    sd_backend *const *bes; /* [size] rank r's backend (borrowed; outlive the model) */
    sd_comm *const *comms;  /* [size] a communicator group over them (borrowed; NULL for size 1) */
    bool chunked;           /* row-parallel sums over SD_TP_CHUNKS chunks (above) */
} sd_tp_opts;

/* sd_model_load / sd_model_random split over the ranks of tp. Besides their
 * errors: SD_ERR_UNSUPPORTED, saying which, when the heads, the KV heads or
 * the intermediate size do not divide by tp->size, when chunked and size
 * does not divide SD_TP_CHUNKS (or the row-parallel inputs by it), or when a
 * backend lacks the ops tensor parallelism needs (copy_cols, reduce_parts). */
sd_status sd_model_load_tp(const char *dir, const sd_tp_opts *tp, sd_model **out, char *err, size_t errlen);
sd_status sd_model_random_tp(const char *config_path, uint64_t seed, const sd_tp_opts *tp, sd_model **out, char *err,
                             size_t errlen);

/* The ranks the model is split over (1: none), and rank r's shard (rank 0:
 * m itself; its backend, KV and scratch bytes are that rank's — for sizing
 * each device's cache). */
int sd_model_tp_size(const sd_model *m);
/* How the ranks exchange: the communicator's name ("host", "nccl"), "" unsplit. */
const char *sd_model_comm_name(const sd_model *m);
const sd_model *sd_model_rank(const sd_model *m, int r);

/* True once a pass failed on a rank in a way only a new process recovers
 * from: a backend of the group is lost (sd_backend_lost), or a rank failed
 * and the group's communicator was aborted. The worker should exit then. */
bool sd_model_lost(const sd_model *m);

/* Frees the model, its KV storage and pool; NULL is a no-op. */
void sd_model_free(sd_model *m);

const sd_model_config *sd_model_cfg(const sd_model *m);
sd_backend *sd_model_backend(const sd_model *m);

/* Serves at most n positions per sequence (vLLM's --max-model-len): the
 * config's max_position becomes n, for every reader of sd_model_cfg.
 * SD_ERR_ARG (message) unless 1 <= n <= the checkpoint's max_position. */
sd_status sd_model_cap_context(sd_model *m, int n, char *err, size_t errlen);

/* bf16 activation emulation (backend.h): on by default when config.json's
 * dtype is bfloat16, as transformers runs such a checkpoint. */
int sd_model_act_bf16(const sd_model *m);

/* Replaces every matmul weight (and the LM head; a tied head gets its own
 * copy) by int8 rows with per-row scales, the inputs quantised per token
 * (kernels/cpu/cpu_q8.h). The logits become an approximation: for a
 * drafter only, never for the model whose tokens are committed.
 * SD_ERR_UNSUPPORTED when the backend offers no quantize_q8. */
sd_status sd_model_quantize_q8(sd_model *m, char *err, size_t errlen);

/* Bytes of weights one decode step reads (every matrix once; the LM head;
 * norms), for roofline reports. */
size_t sd_model_weight_bytes(const sd_model *m);

/* The KV cache's element type. auto: bf16 for a model with bf16
 * activations (exact: its K and V are bf16 values already), else f32;
 * bf16 for an f32 model halves the memory and rounds K and V. */
typedef enum sd_kv_dtype { SD_KV_AUTO = 0, SD_KV_F32 = 1, SD_KV_BF16 = 2 } sd_kv_dtype;

/* "auto", "f32" (or "float32"), "bf16" (or "bfloat16") -> sd_kv_dtype; -1 otherwise. */
int sd_kv_dtype_parse(const char *s);

/* Chooses the element type the next sd_model_kv_init allocates (default auto). */
void sd_model_set_kv_dtype(sd_model *m, sd_kv_dtype t);

/* The KV storage's element type (SD_DTYPE_F32 or SD_DTYPE_BF16): the one
 * allocated, or before sd_model_kv_init the one it would allocate. */
sd_dtype sd_model_kv_dtype(const sd_model *m);

/* Allocates KV storage for n_blocks blocks of block_size positions (all
 * layers) and the matching pool. Replaces earlier storage (no sequence may
 * be live). SD_ERR_NOMEM on failure. */
sd_status sd_model_kv_init(sd_model *m, int n_blocks, int block_size, char *err, size_t errlen);

/* The pool created by sd_model_kv_init (NULL before). */
sd_kv_pool *sd_model_kv_pool(const sd_model *m);

/* Bytes of KV storage one position takes (all layers, K and V). */
size_t sd_model_kv_bytes_per_position(const sd_model *m);

/* Backend bytes of the work buffers for passes of up to `rows` rows and
 * n_out rows of logits (allocated at the first such pass), with the
 * backend's own per-row buffers (CUDA's packed-group result, bf16 input). */
size_t sd_model_scratch_bytes(const sd_model *m, int rows, int n_out);

/* A host buffer for at least `rows` rows of logits (vocab floats each) that
 * sd_model_forward's copies fill fastest: the backend's host_alloc (CUDA:
 * page-locked) up to SD_LOGITS_PINNED_MAX bytes, malloc beyond or when that
 * fails. Grows geometrically by replacement — the rows it held are not kept.
 * *buf NULL and *cap 0 at first; SD_ERR_NOMEM with both unchanged on failure.
 * Free with sd_model_logits_free while the model lives. */
#define SD_LOGITS_PINNED_MAX ((size_t)256 << 20)
sd_status sd_model_logits_grow(const sd_model *m, float **buf, size_t *cap, size_t rows);
void sd_model_logits_free(const sd_model *m, float *buf);

/* Runs one forward pass over seqs[0..n_seqs). Writes the wanted logits as
 * float32 rows [sum of n_logits, vocab] into logits (host memory), sequences
 * in order, but for the sequences with an argmax array: their rows' argmax
 * (sd_argmax: first maximum, NaNs ignored) goes there and they take no rows
 * of logits; likewise the sequences with a draw (rowdraw.h; SD_ERR_ARG where
 * the backend has no draw_rows). Token ids out of range, positions beyond max_position or the
 * block table, are SD_ERR_ARG with a message; nothing is written then. */
sd_status sd_model_forward(sd_model *m, const sd_batch_seq *seqs, int n_seqs, float *logits, char *err, size_t errlen);

#endif
