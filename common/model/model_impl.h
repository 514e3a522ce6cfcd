/* model_impl.h — PRIVATE to common/model: the state of a model (model.h),
 * shared by its two files: model_load.c (loading, sharding across
 * tensor-parallel ranks, int8 quantisation) and model.c (lifetime, KV
 * storage, the forward pass). model_load.c calls model.c, never the other
 * way. */
#ifndef SD_MODEL_IMPL_H
#define SD_MODEL_IMPL_H

#include <stdbool.h>

#include "model.h"
#include "safetensors.h"

typedef struct layer_w {
    sd_weight in_norm, post_norm;
    sd_weight wq, wk, wv, wo;
    sd_weight bq, bk, bv, bo; /* rows == 0 when absent */
    sd_weight q_norm, k_norm; /* qwen3 */
    sd_weight gate, up, down;
    /* split (model_impl.h tp_chunks > 0): o and down as the column chunks of this rank, [tp_chunks] */
    sd_weight wo_c[SD_TP_CHUNKS], down_c[SD_TP_CHUNKS];
} layer_w;

/* Activation scratch in backend memory, sized for cap rows; the LM head's
 * input and output only for cap_out rows (the rows that want logits: a
 * prompt chunk of 256 rows needs one, and a row of logits is the vocabulary
 * wide — 0.6 MB for 152k ids). */
typedef struct scratch {
    int cap, cap_out;
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up, *head_in, *logits;
    float *xc, *parts, *red, *gath; /* split: a chunk's input; the chunks' partial sums [tp_chunks][T, C], their
                                     * sum [T, C]; every rank's [tp_size][T, C] */
    float *cos, *sin;
    int32_t *ids, *slots;
} scratch;

struct sd_model {
    sd_model_config cfg;
    sd_backend *be;
    sd_st *st;     /* the checkpoint; NULL for random weights */
    uint64_t seed; /* random weights: their seed */
    void **host;   /* random weights the backend references in place (owned) */
    size_t n_host, cap_host;
    sd_weight embed, final_norm, lm_head;
    const sd_weight *head; /* &lm_head or &embed when tied */
    layer_w *layers;
    float *inv_freq; /* [head_dim/2], host */
    int act_bf16;    /* bf16 activation emulation (see backend.h) */
    size_t weight_bytes;
    /* KV */
    sd_kv_layer *kv;
    sd_kv_pool *pool;
    int block_size;
    sd_kv_dtype kv_want; /* what the next sd_model_kv_init allocates */
    /* scratch */
    scratch s;
    int32_t *h_ids, *h_slots, *h_rows;
    float *h_cos, *h_sin;
    sd_attn_seq *aseqs;
    size_t cap_seqs;
    int32_t *h_amax; /* [cap_amax] argmax rows of a pass (host) */
    size_t cap_amax;
    sd_draw_row *h_draw; /* [cap_draw] the row draws of a pass, gathered */
    size_t cap_draw;
    sd_draw_out *h_drawn; /* [cap_drawn] their results */
    size_t cap_drawn;
    /* tensor parallelism (model.h): this shard's place in its group */
    int tp_rank, tp_size;
    int tp_chunks;                     /* o and down are split: their chunks on this rank (SD_TP_CHUNKS / tp_size when
                            * chunked, else 1); 0: not split (tp_size 1, not chunked) */
    int n_heads, n_kv_heads, ffn;      /* this shard's heads, KV heads and intermediate size */
    sd_comm *comm;                     /* borrowed; NULL when tp_size is 1 */
    const sd_model *root;              /* a peer's rank 0 (its checkpoint, pool and host arrays); NULL on rank 0 */
    sd_model *peer[SD_COMM_MAX_RANKS]; /* rank 0: ranks 1 .. tp_size - 1 (owned) */
    struct sd_ranks *ranks;            /* rank 0: their threads (ranks.h) */
    bool failed;                       /* a pass failed on this rank in a way that ends the group */
    int fault_rank; /* SD_FAULT_TP_RANK_LOST=RANK:PASSES (tests): that rank fails its PASSES-th pass */
    long fault_after, passes;
};

/* Loading (model_load.c) uses these of model.c. */
void sd_model_release_w(sd_model *m, sd_weight *w);

#endif
