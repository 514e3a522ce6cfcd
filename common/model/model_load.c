/* model_load.c — a model's weights from a checkpoint or random, onto its
 * backend (see model.h; the state in model_impl.h): loading, int8
 * quantisation.
 *
 * Numerics follow Hugging Face transformers (model.c); this file only puts
 * each tensor where the forward pass reads it. */
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "model_impl.h"
#include "ranks.h"
#include "vecmath.h"

/* ------------------------------------------------------------ loading */

/* splitmix64: a well-mixed 64-bit value from x. */
static uint64_t mix64(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/* One thread's share of fill_random: values [i0, i1) of a tensor whose
 * name hashed to h. */
typedef struct fill_job {
    uint64_t h;
    bool norm, bias, bf16;
    void *data;
    size_t i0, i1;
    pthread_t tid;
} fill_job;

static void *fill_range(void *arg)
{
    const fill_job *j = arg;
    uint64_t bits = 0;
    for (size_t i = j->i0; i < j->i1; i++) {
        if (i % 4 == 0 || i == j->i0) bits = mix64(j->h + i / 4);
        float u = (float)((bits >> (16 * (i % 4))) & 0xffffu) * (1.0f / 32768.0f) - 1.0f; /* [-1, 1) */
        float v = j->norm ? 1.0f : j->bias ? 0.0f : u * 0.0346410f;
        if (j->bf16) {
            float r = sd_round_bf16(v);
            uint32_t b;
            memcpy(&b, &r, sizeof b);
            ((uint16_t *)j->data)[i] = (uint16_t)(b >> 16);
        } else {
            ((float *)j->data)[i] = v;
        }
    }
    return NULL;
}

/* Fills n values of a random tensor named name: norm weights 1, biases 0,
 * others uniform in ±0.02·√3 (standard deviation 0.02, as the published
 * models' initialisers; 65536 levels, four values from each 64-bit hash),
 * from the model's seed, the name and the index only — so a large tensor is
 * filled by up to FILL_THREADS threads (an 8B-parameter model in seconds)
 * with the same values as by one. */
#define FILL_THREADS 16
#define FILL_MIN (1u << 22) /* values worth a thread of their own */
static void fill_random(const sd_model *m, const char *name, sd_dtype dt, void *data, size_t n)
{
    size_t len = strlen(name);
    fill_job base = {.h = m->seed, .data = data, .bf16 = dt == SD_DTYPE_BF16};
    base.norm = len >= 11 && !strcmp(name + len - 11, "norm.weight");
    base.bias = len >= 4 && !strcmp(name + len - 4, "bias");
    for (const char *c = name; *c; c++) base.h = mix64(base.h ^ (uint8_t)*c);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    size_t nt = n / FILL_MIN + 1, started = 0;
    if (nt > FILL_THREADS) nt = FILL_THREADS;
    if (cpus > 0 && nt > (size_t)cpus) nt = (size_t)cpus;
    fill_job jobs[FILL_THREADS];
    for (size_t t = 0; t < nt; t++) {
        jobs[t] = base;
        jobs[t].i0 = n / nt * t;
        jobs[t].i1 = t + 1 == nt ? n : n / nt * (t + 1);
    }
    for (size_t t = 1; t < nt; t++, started++) /* job 0 runs here; a thread that fails to start too */
        if (pthread_create(&jobs[t].tid, NULL, fill_range, &jobs[t]) != 0) break;
    fill_range(&jobs[0]);
    for (size_t t = started + 1; t < nt; t++) fill_range(&jobs[t]);
    for (size_t t = 1; t <= started; t++) pthread_join(jobs[t].tid, NULL);
}

/* The part of a [d0, d1] tensor (d1 1 for a vector) a shard holds: rows
 * [r0, r1) and columns [c0, c1). */
typedef struct slice {
    int64_t r0, r1, c0, c1;
} slice;

static slice whole(int64_t d0, int64_t d1) { return (slice){0, d0, 0, d1 > 0 ? d1 : 1}; }

/* This rank's rows of a column-parallel matmul (heads, intermediate rows) or
 * of its bias. */
static slice own_rows(const sd_model *m, int64_t d0, int64_t d1)
{
    slice s = whole(d0, d1);
    s.r0 = d0 / m->tp_size * m->tp_rank;
    s.r1 = s.r0 + d0 / m->tp_size;
    return s;
}

/* Column chunk j (of this rank's tp_chunks) of a row-parallel matmul [d0, K]:
 * chunk tp_rank * tp_chunks + j of tp_size * tp_chunks. */
static slice own_chunk(const sd_model *m, int64_t d0, int64_t K, int j)
{
    int64_t g = (int64_t)m->tp_size * m->tp_chunks, k = m->tp_rank * m->tp_chunks + j;
    return (slice){0, d0, K / g * k, K / g * (k + 1)};
}

/* Uploads the slice sl of the whole tensor t (host data: the checkpoint's
 * mapping, or `owned`, a buffer this call frees or keeps) as w. Rows of all
 * the columns are a view of t; other slices a copy, kept while the backend
 * references it in place. */
static sd_status upload_slice(sd_model *m, const sd_tensor *t, slice sl, void *owned, sd_weight *w, char *err,
                              size_t errlen)
{
    size_t esz = sd_dtype_size(t->dtype);
    int64_t d1 = t->ndim == 2 ? t->shape[1] : 1, rows = sl.r1 - sl.r0, cols = sl.c1 - sl.c0;
    sd_tensor v = *t;
    void *copy = NULL;
    v.shape[0] = rows;
    if (t->ndim == 2) v.shape[1] = cols;
    v.nbytes = (size_t)rows * (size_t)cols * esz;
    /* a view of the mapping; a random buffer only whole (a part is copied, so the rest is freed) */
    if (cols == d1 && (!owned || rows == t->shape[0])) {
        v.data = (const char *)t->data + (size_t)sl.r0 * (size_t)d1 * esz;
    } else {
        if (!(copy = malloc(v.nbytes ? v.nbytes : 1))) {
            free(owned);
            return sd_seterr(err, errlen, SD_ERR_NOMEM, "tensor %s: out of memory for its slice", t->name);
        }
        for (int64_t r = 0; r < rows; r++)
            memcpy((char *)copy + (size_t)r * cols * esz,
                   (const char *)t->data + ((size_t)(sl.r0 + r) * d1 + sl.c0) * esz, (size_t)cols * esz);
        v.data = copy;
    }
    sd_status st = m->be->ops->upload(m->be, &v, w, err, errlen);
    void *keep = st != SD_OK ? NULL : copy && w->data == copy ? copy : !copy && w->data == v.data ? owned : NULL;
    if (keep && sd_grow(&m->host, &m->cap_host, m->n_host + 1, sizeof *m->host) != SD_OK) {
        m->be->ops->release(m->be, w);
        st = sd_seterr(err, errlen, SD_ERR_NOMEM, "tensor %s: out of memory", t->name);
        keep = NULL;
    }
    if (keep) m->host[m->n_host++] = keep; /* referenced in place */
    if (copy && copy != keep) free(copy);
    if (owned && owned != keep) free(owned);
    if (st == SD_OK) m->weight_bytes += v.nbytes;
    return st;
}

/* Loads the slice sl of tensor `name` of shape [d0, d1] (ndim 1: [d0]): from
 * the checkpoint (rank 0's), or random weights in the checkpoint's dtype
 * (bf16 or f32) — the whole tensor's values, so a shard holds exactly its part
 * of the unsplit model's. */
static sd_status load_w(sd_model *m, const char *name, int ndim, int64_t d0, int64_t d1, slice sl, sd_weight *w,
                        char *err, size_t errlen)
{
    const sd_st *st_file = m->root ? m->root->st : m->st;
    if (st_file) {
        const sd_tensor *t;
        int64_t shape[2] = {d0, d1};
        sd_status st = sd_st_get(st_file, name, ndim, shape, &t, err, errlen);
        return st != SD_OK ? st : upload_slice(m, t, sl, NULL, w, err, errlen);
    }
    sd_dtype dt = strcmp(m->cfg.torch_dtype, "bfloat16") ? SD_DTYPE_F32 : SD_DTYPE_BF16;
    size_t n = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1), nbytes = n * sd_dtype_size(dt);
    void *data = malloc(nbytes ? nbytes : 1);
    if (!data) return sd_seterr(err, errlen, SD_ERR_NOMEM, "tensor %s: out of memory for random weights", name);
    fill_random(m, name, dt, data, n);
    sd_tensor t = {.name = name, .dtype = dt, .ndim = ndim, .shape = {d0, d1}, .data = data, .nbytes = nbytes};
    return upload_slice(m, &t, sl, data, w, err, errlen);
}

/* A row-parallel matmul (o, down: [C, K]): whole, or this rank's column
 * chunks (model_impl.h tp_chunks). */
static sd_status load_row_parallel(sd_model *m, const char *name, int64_t C, int64_t K, sd_weight *w, sd_weight *chunks,
                                   char *err, size_t errlen)
{
    if (m->tp_chunks == 0) return load_w(m, name, 2, C, K, whole(C, K), w, err, errlen);
    for (int j = 0; j < m->tp_chunks; j++) {
        sd_status st = load_w(m, name, 2, C, K, own_chunk(m, C, K, j), &chunks[j], err, errlen);
        if (st != SD_OK) return st;
    }
    return SD_OK;
}

static sd_status load_layer(sd_model *m, int i, char *err, size_t errlen)
{
    const sd_model_config *c = &m->cfg;
    layer_w *L = &m->layers[i];
    int C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    char n[160];
    sd_status st = SD_OK;
#define LW(field, suffix, nd, a, b, sl)                                                    \
    do {                                                                                   \
        snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix);                            \
        if ((st = load_w(m, n, nd, a, b, sl, &L->field, err, errlen)) != SD_OK) return st; \
    } while (0)
    LW(in_norm, "input_layernorm.weight", 1, C, 0, whole(C, 0));
    LW(post_norm, "post_attention_layernorm.weight", 1, C, 0, whole(C, 0));
    LW(wq, "self_attn.q_proj.weight", 2, qd, C, own_rows(m, qd, C));
    LW(wk, "self_attn.k_proj.weight", 2, kvd, C, own_rows(m, kvd, C));
    LW(wv, "self_attn.v_proj.weight", 2, kvd, C, own_rows(m, kvd, C));
    snprintf(n, sizeof n, "model.layers.%d.self_attn.o_proj.weight", i);
    if ((st = load_row_parallel(m, n, C, qd, &L->wo, L->wo_c, err, errlen)) != SD_OK) return st;
    if (c->qkv_bias) {
        LW(bq, "self_attn.q_proj.bias", 1, qd, 0, own_rows(m, qd, 0));
        LW(bk, "self_attn.k_proj.bias", 1, kvd, 0, own_rows(m, kvd, 0));
        LW(bv, "self_attn.v_proj.bias", 1, kvd, 0, own_rows(m, kvd, 0));
    }
    if (c->o_bias) LW(bo, "self_attn.o_proj.bias", 1, C, 0, whole(C, 0)); /* added once, after the ranks' sum */
    if (c->qk_norm) {
        LW(q_norm, "self_attn.q_norm.weight", 1, hd, 0, whole(hd, 0));
        LW(k_norm, "self_attn.k_norm.weight", 1, hd, 0, whole(hd, 0));
    }
    LW(gate, "mlp.gate_proj.weight", 2, F, C, own_rows(m, F, C));
    LW(up, "mlp.up_proj.weight", 2, F, C, own_rows(m, F, C));
#undef LW
    snprintf(n, sizeof n, "model.layers.%d.mlp.down_proj.weight", i);
    if ((st = load_row_parallel(m, n, C, F, &L->down, L->down_c, err, errlen)) != SD_OK) return st;
    if (c->mlp_bias) return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "%s: mlp_bias is not supported", c->model_type);
    if (!m->be->ops->pack) return SD_OK;
    sd_weight *const qkv[3] = {&L->wq, &L->wk, &L->wv}, *const gu[2] = {&L->gate, &L->up};
    st = m->be->ops->pack(m->be, qkv, 3, err, errlen);
    return st == SD_OK ? m->be->ops->pack(m->be, gu, 2, err, errlen) : st;
}

/* inv_freq exactly as transformers computes it in float32. */
static void compute_inv_freq(const sd_model_config *c, float *inv)
{
    int hd = c->head_dim, half = hd / 2;
    float base = (float)c->rope_theta;
    for (int i = 0; i < half; i++) {
        float e = (float)(2 * i) / (float)hd;
        inv[i] = 1.0f / powf(base, e);
    }
    if (c->rope_type != SD_ROPE_LLAMA3) return;
    float factor = (float)c->rope_factor, lo = (float)c->rope_low_freq_factor;
    float hi = (float)c->rope_high_freq_factor, old = (float)c->rope_orig_max_position;
    float lo_wl = old / lo, hi_wl = old / hi;
    for (int i = 0; i < half; i++) {
        float f = inv[i];
        float wl = (float)(2.0 * M_PI) / f;
        float scaled = wl > lo_wl ? f / factor : f;
        if (!(wl < hi_wl) && !(wl > lo_wl)) {
            float smooth = (old / wl - lo) / (hi - lo);
            scaled = (1.0f - smooth) * scaled / factor + smooth * scaled;
        }
        inv[i] = scaled;
    }
}

/* The embedding on every rank (each computes the residual stream); the
 * final norm and the LM head on rank 0 only. */
static sd_status load_weights(sd_model *m, char *err, size_t errlen)
{
    const sd_model_config *c = &m->cfg;
    int64_t V = c->vocab_size, C = c->hidden_size;
    sd_status st = load_w(m, "model.embed_tokens.weight", 2, V, C, whole(V, C), &m->embed, err, errlen);
    if (st != SD_OK) return st;
    /* only one embedding row is read per token */
    m->weight_bytes -= (size_t)V * C * (m->embed.dtype == SD_DTYPE_BF16 ? 2 : 4);
    for (int i = 0; i < c->n_layers && st == SD_OK; i++) st = load_layer(m, i, err, errlen);
    if (st != SD_OK || m->tp_rank > 0) return st;
    if ((st = load_w(m, "model.norm.weight", 1, C, 0, whole(C, 0), &m->final_norm, err, errlen)) != SD_OK) return st;
    if (c->tie_embeddings && (!m->st || !sd_st_find(m->st, "lm_head.weight"))) {
        m->head = &m->embed;
        m->weight_bytes += (size_t)V * C * (m->embed.dtype == SD_DTYPE_BF16 ? 2 : 4);
        return SD_OK;
    }
    st = load_w(m, "lm_head.weight", 2, V, C, whole(V, C), &m->lm_head, err, errlen);
    m->head = &m->lm_head;
    return st;
}

/* Whether the model splits over tp as model.h says it must. */
static sd_status check_split(const sd_model_config *c, const sd_tp_opts *tp, char *err, size_t errlen)
{
    int n = tp->size, qd = c->n_heads * c->head_dim;
    if (n < 1 || n > SD_COMM_MAX_RANKS)
        return sd_seterr(err, errlen, SD_ERR_ARG, "--tensor-parallel-size %d: 1 to %d ranks", n, SD_COMM_MAX_RANKS);
    if (c->n_heads % n || c->n_kv_heads % n || c->intermediate_size % n)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "--tensor-parallel-size %d: the model's %d attention heads, %d KV heads and intermediate size "
                         "%d must each divide by it",
                         n, c->n_heads, c->n_kv_heads, c->intermediate_size);
    if (tp->chunked && (SD_TP_CHUNKS % n || qd % SD_TP_CHUNKS || c->intermediate_size % SD_TP_CHUNKS))
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "--batch-invariant with --tensor-parallel-size %d: the size must divide %d, and so must the "
                         "attention width %d and the intermediate size %d",
                         n, SD_TP_CHUNKS, qd, c->intermediate_size);
    for (int r = 0; r < n; r++) {
        const sd_backend_ops *op = tp->bes[r]->ops;
        if ((n > 1 || tp->chunked) && (!op->copy_cols || !op->reduce_parts))
            return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "the %s backend of rank %d cannot split a model",
                             op->name, r);
        if (n > 1 && (!tp->comms || !tp->comms[r]))
            return sd_seterr(err, errlen, SD_ERR_ARG, "rank %d has no communicator", r);
    }
    return SD_OK;
}

/* One rank's shard: its place in tp, its share of the heads, its weights.
 * root: rank 0 for a peer (its config, checkpoint and seed), NULL for rank 0
 * itself (dir's checkpoint, or random weights with config_path's shapes). */
static sd_status open_rank(const char *dir, const char *config_path, uint64_t seed, const sd_tp_opts *tp, int r,
                           sd_model *root, sd_model **out, char *err, size_t errlen)
{
    sd_model *m = calloc(1, sizeof *m);
    if (!(*out = m)) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    m->be = tp->bes[r];
    m->seed = root ? root->seed : seed;
    m->root = root;
    m->tp_rank = r;
    m->tp_size = tp->size;
    m->tp_chunks = tp->chunked ? SD_TP_CHUNKS / tp->size : tp->size > 1 ? 1 : 0;
    m->comm = tp->size > 1 ? tp->comms[r] : NULL;
    sd_status st = SD_OK;
    if (root) m->cfg = root->cfg;
    else
        st = dir ? sd_config_load_dir(dir, &m->cfg, err, errlen)
                 : sd_config_load_file(config_path, &m->cfg, err, errlen);
    if (st == SD_OK && (m->cfg.head_dim % 2 != 0 || m->cfg.head_dim > 512))
        st = sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "head_dim %d is not supported", m->cfg.head_dim);
    if (st == SD_OK) st = check_split(&m->cfg, tp, err, errlen);
    if (st == SD_OK && dir && !root) st = sd_st_open_dir(dir, &m->st, err, errlen);
    if (st != SD_OK) return st;
    m->n_heads = m->cfg.n_heads / tp->size;
    m->n_kv_heads = m->cfg.n_kv_heads / tp->size;
    m->ffn = m->cfg.intermediate_size / tp->size;
    m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
    m->inv_freq = calloc((size_t)m->cfg.head_dim / 2, sizeof(float));
    if (!m->layers || !m->inv_freq) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    if ((st = load_weights(m, err, errlen)) != SD_OK) return st;
    compute_inv_freq(&m->cfg, m->inv_freq);
    m->act_bf16 = strcmp(m->cfg.torch_dtype, "bfloat16") == 0;
    return SD_OK;
}

/* SD_FAULT_TP_RANK_LOST=RANK:PASSES (tests only): rank RANK fails its
 * PASSES-th forward pass, as a dying GPU would. */
static void read_fault(sd_model *m)
{
    const char *f = getenv("SD_FAULT_TP_RANK_LOST");
    m->fault_rank = -1;
    if (f && sscanf(f, "%d:%ld", &m->fault_rank, &m->fault_after) != 2) m->fault_rank = -1;
}

/* Loads a model over tp's ranks: dir's checkpoint, or (dir NULL) random
 * weights of the shapes config_path describes. */
static sd_status model_open(const char *dir, const char *config_path, uint64_t seed, const sd_tp_opts *tp,
                            sd_model **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_model *m = NULL;
    char e2[512] = "";
    sd_status st = open_rank(dir, config_path, seed, tp, 0, NULL, &m, err, errlen);
    for (int r = 1; r < tp->size && st == SD_OK; r++) {
        st = open_rank(dir, config_path, seed, tp, r, m, &m->peer[r], e2, sizeof e2);
        if (st != SD_OK) sd_seterr(err, errlen, st, "rank %d: %s", r, e2);
    }
    if (st == SD_OK && tp->size > 1) st = sd_ranks_new(tp->size, &m->ranks, err, errlen);
    if (st != SD_OK) {
        sd_model_free(m);
        return st;
    }
    read_fault(m);
    *out = m;
    return SD_OK;
}

sd_status sd_model_load(const char *dir, sd_backend *be, sd_model **out, char *err, size_t errlen)
{
    sd_tp_opts one = {.size = 1, .bes = &be};
    return model_open(dir, NULL, 0, &one, out, err, errlen);
}

sd_status sd_model_random(const char *config_path, uint64_t seed, sd_backend *be, sd_model **out, char *err,
                          size_t errlen)
{
    sd_tp_opts one = {.size = 1, .bes = &be};
    return model_open(NULL, config_path, seed, &one, out, err, errlen);
}

sd_status sd_model_load_tp(const char *dir, const sd_tp_opts *tp, sd_model **out, char *err, size_t errlen)
{
    return model_open(dir, NULL, 0, tp, out, err, errlen);
}

sd_status sd_model_random_tp(const char *config_path, uint64_t seed, const sd_tp_opts *tp, sd_model **out, char *err,
                             size_t errlen)
{
    return model_open(NULL, config_path, seed, tp, out, err, errlen);
}

/* Bytes a forward pass reads from w. */
static size_t w_bytes(const sd_weight *w)
{
    size_t n = (size_t)w->rows * w->cols;
    switch (w->dtype) {
    case SD_DTYPE_F32: return n * 4;
    case SD_DTYPE_Q8: return n + (size_t)w->rows * (sizeof(float) + sizeof(int32_t));
    default: return n * 2;
    }
}

static sd_status quantize_w(sd_model *m, sd_weight *w, char *err, size_t errlen)
{
    size_t before = w_bytes(w);
    sd_status st = m->be->ops->quantize_q8(m->be, w, err, errlen);
    if (st == SD_OK) m->weight_bytes = m->weight_bytes - before + w_bytes(w);
    return st;
}

/* One rank's matmul weights to int8 (rank 0: the LM head too). */
static sd_status quantize_rank(sd_model *m, char *err, size_t errlen)
{
    const sd_model_config *c = &m->cfg;
    if (!m->be->ops->quantize_q8)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "the %s backend cannot quantise weights to int8",
                         m->be->ops->name);
    sd_status st = SD_OK;
    if (m->tp_rank == 0 && m->head == &m->embed) {
        /* tied: the embedding rows stay exact, the head gets its own copy */
        size_t before = m->weight_bytes;
        int64_t V = c->vocab_size, C = c->hidden_size;
        st = load_w(m, "model.embed_tokens.weight", 2, V, C, whole(V, C), &m->lm_head, err, errlen);
        if (st != SD_OK) return st;
        m->weight_bytes = before;
        m->head = &m->lm_head;
    }
    for (int i = 0; i < c->n_layers && st == SD_OK; i++) {
        layer_w *L = &m->layers[i];
        sd_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0] && st == SD_OK; j++)
            if (ws[j]->data) st = quantize_w(m, ws[j], err, errlen);
        for (int j = 0; j < m->tp_chunks && st == SD_OK; j++) {
            st = quantize_w(m, &L->wo_c[j], err, errlen);
            if (st == SD_OK) st = quantize_w(m, &L->down_c[j], err, errlen);
        }
    }
    if (st == SD_OK && m->tp_rank == 0) st = quantize_w(m, &m->lm_head, err, errlen);
    return st;
}

sd_status sd_model_quantize_q8(sd_model *m, char *err, size_t errlen)
{
    sd_status st = quantize_rank(m, err, errlen);
    for (int r = 1; r < m->tp_size && st == SD_OK; r++) st = quantize_rank(m->peer[r], err, errlen);
    return st;
}
