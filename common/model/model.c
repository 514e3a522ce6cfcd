/* model.c — Llama / Qwen2 / Qwen3 forward pass over a backend (see model.h).
 *
 * Numerics follow Hugging Face transformers: RMSNorm in f32
 * (x * rsqrt(mean(x²) + eps) * w), rotate-half RoPE with inv_freq computed in
 * f32 (llama3 scaling applied to inv_freq), Qwen3 q/k RMSNorm per head before
 * RoPE, Qwen2 q/k/v biases, SwiGLU MLP, tied or separate LM head.
 *
 * Ownership: the model owns its weights' backend copies, the mapped
 * checkpoint, the KV storage + pool and all scratch buffers. */
#include "model.h"

#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "array.h"
#include "safetensors.h"
#include "vecmath.h"

typedef struct layer_w {
    sd_weight in_norm, post_norm;
    sd_weight wq, wk, wv, wo;
    sd_weight bq, bk, bv, bo; /* rows == 0 when absent */
    sd_weight q_norm, k_norm; /* qwen3 */
    sd_weight gate, up, down;
} layer_w;

/* Activation scratch in backend memory, sized for cap rows; the LM head's
 * input and output only for cap_out rows (the rows that want logits: a
 * prompt chunk of 256 rows needs one, and a row of logits is the vocabulary
 * wide — 0.6 MB for 152k ids). */
typedef struct scratch {
    int cap, cap_out;
    float *x, *xn, *q, *k, *v, *att, *o, *gate, *up, *head_in, *logits;
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
};

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

/* A random weight of the given shape in the checkpoint's dtype (bf16 or
 * f32), uploaded; the host copy is kept while the backend references it. */
static sd_status random_w(sd_model *m, const char *name, int ndim, int64_t d0, int64_t d1, sd_weight *w, char *err,
                          size_t errlen)
{
    sd_dtype dt = strcmp(m->cfg.torch_dtype, "bfloat16") ? SD_DTYPE_F32 : SD_DTYPE_BF16;
    size_t n = (size_t)d0 * (size_t)(ndim == 2 ? d1 : 1), nbytes = n * sd_dtype_size(dt);
    void *data = malloc(nbytes ? nbytes : 1);
    if (!data || sd_grow(&m->host, &m->cap_host, m->n_host + 1, sizeof *m->host) != SD_OK) {
        free(data);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "tensor %s: out of memory for random weights", name);
    }
    fill_random(m, name, dt, data, n);
    sd_tensor t = {.name = name, .dtype = dt, .ndim = ndim, .shape = {d0, d1}, .data = data, .nbytes = nbytes};
    sd_status st = m->be->ops->upload(m->be, &t, w, err, errlen);
    if (st == SD_OK && w->data == data) m->host[m->n_host++] = data; /* referenced in place */
    else free(data);
    if (st == SD_OK) m->weight_bytes += nbytes;
    return st;
}

static sd_status load_w(sd_model *m, const char *name, int ndim, int64_t d0, int64_t d1, sd_weight *w, char *err,
                        size_t errlen)
{
    if (!m->st) return random_w(m, name, ndim, d0, d1, w, err, errlen);
    const sd_tensor *t;
    int64_t shape[2] = {d0, d1};
    sd_status st = sd_st_get(m->st, name, ndim, shape, &t, err, errlen);
    if (st != SD_OK) return st;
    st = m->be->ops->upload(m->be, t, w, err, errlen);
    if (st == SD_OK) m->weight_bytes += t->nbytes;
    return st;
}

static sd_status load_layer(sd_model *m, int i, char *err, size_t errlen)
{
    const sd_model_config *c = &m->cfg;
    layer_w *L = &m->layers[i];
    int C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    int qd = c->n_heads * hd, kvd = c->n_kv_heads * hd;
    char n[160];
    sd_status st = SD_OK;
#define LW(field, suffix, nd, a, b)                                                    \
    do {                                                                               \
        snprintf(n, sizeof n, "model.layers.%d.%s", i, suffix);                        \
        if ((st = load_w(m, n, nd, a, b, &L->field, err, errlen)) != SD_OK) return st; \
    } while (0)
    LW(in_norm, "input_layernorm.weight", 1, C, 0);
    LW(post_norm, "post_attention_layernorm.weight", 1, C, 0);
    LW(wq, "self_attn.q_proj.weight", 2, qd, C);
    LW(wk, "self_attn.k_proj.weight", 2, kvd, C);
    LW(wv, "self_attn.v_proj.weight", 2, kvd, C);
    LW(wo, "self_attn.o_proj.weight", 2, C, qd);
    if (c->qkv_bias) {
        LW(bq, "self_attn.q_proj.bias", 1, qd, 0);
        LW(bk, "self_attn.k_proj.bias", 1, kvd, 0);
        LW(bv, "self_attn.v_proj.bias", 1, kvd, 0);
    }
    if (c->o_bias) LW(bo, "self_attn.o_proj.bias", 1, C, 0);
    if (c->qk_norm) {
        LW(q_norm, "self_attn.q_norm.weight", 1, hd, 0);
        LW(k_norm, "self_attn.k_norm.weight", 1, hd, 0);
    }
    LW(gate, "mlp.gate_proj.weight", 2, F, C);
    LW(up, "mlp.up_proj.weight", 2, F, C);
    LW(down, "mlp.down_proj.weight", 2, C, F);
#undef LW
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

static sd_status load_weights(sd_model *m, char *err, size_t errlen)
{
    const sd_model_config *c = &m->cfg;
    sd_status st = load_w(m, "model.embed_tokens.weight", 2, c->vocab_size, c->hidden_size, &m->embed, err, errlen);
    if (st != SD_OK) return st;
    /* only one embedding row is read per token */
    m->weight_bytes -= (size_t)c->vocab_size * c->hidden_size * (m->embed.dtype == SD_DTYPE_BF16 ? 2 : 4);
    for (int i = 0; i < c->n_layers && st == SD_OK; i++) st = load_layer(m, i, err, errlen);
    if (st == SD_OK) st = load_w(m, "model.norm.weight", 1, c->hidden_size, 0, &m->final_norm, err, errlen);
    if (st != SD_OK) return st;
    if (c->tie_embeddings && (!m->st || !sd_st_find(m->st, "lm_head.weight"))) {
        m->head = &m->embed;
        m->weight_bytes += (size_t)c->vocab_size * c->hidden_size * (m->embed.dtype == SD_DTYPE_BF16 ? 2 : 4);
        return SD_OK;
    }
    st = load_w(m, "lm_head.weight", 2, c->vocab_size, c->hidden_size, &m->lm_head, err, errlen);
    m->head = &m->lm_head;
    return st;
}

/* Loads a model: dir's checkpoint, or (dir NULL) random weights of the
 * shapes config_path describes. */
static sd_status model_open(const char *dir, const char *config_path, uint64_t seed, sd_backend *be, sd_model **out,
                            char *err, size_t errlen)
{
    *out = NULL;
    sd_model *m = calloc(1, sizeof *m);
    if (!m) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    m->be = be;
    m->seed = seed;
    sd_status st =
        dir ? sd_config_load_dir(dir, &m->cfg, err, errlen) : sd_config_load_file(config_path, &m->cfg, err, errlen);
    if (st == SD_OK && (m->cfg.head_dim % 2 != 0 || m->cfg.head_dim > 512))
        st = sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "head_dim %d is not supported", m->cfg.head_dim);
    if (st == SD_OK && dir) st = sd_st_open_dir(dir, &m->st, err, errlen);
    if (st == SD_OK) {
        m->layers = calloc((size_t)m->cfg.n_layers, sizeof *m->layers);
        m->inv_freq = calloc((size_t)m->cfg.head_dim / 2, sizeof(float));
        if (!m->layers || !m->inv_freq) st = sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    }
    if (st == SD_OK) st = load_weights(m, err, errlen);
    if (st != SD_OK) {
        sd_model_free(m);
        return st;
    }
    compute_inv_freq(&m->cfg, m->inv_freq);
    m->act_bf16 = strcmp(m->cfg.torch_dtype, "bfloat16") == 0;
    *out = m;
    return SD_OK;
}

sd_status sd_model_load(const char *dir, sd_backend *be, sd_model **out, char *err, size_t errlen)
{
    return model_open(dir, NULL, 0, be, out, err, errlen);
}

sd_status sd_model_random(const char *config_path, uint64_t seed, sd_backend *be, sd_model **out, char *err,
                          size_t errlen)
{
    return model_open(NULL, config_path, seed, be, out, err, errlen);
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

sd_status sd_model_quantize_q8(sd_model *m, char *err, size_t errlen)
{
    const sd_model_config *c = &m->cfg;
    if (!m->be->ops->quantize_q8)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "the %s backend cannot quantise weights to int8",
                         m->be->ops->name);
    sd_status st = SD_OK;
    if (m->head == &m->embed) {
        /* tied: the embedding rows stay exact, the head gets its own copy */
        size_t before = m->weight_bytes;
        st = load_w(m, "model.embed_tokens.weight", 2, c->vocab_size, c->hidden_size, &m->lm_head, err, errlen);
        if (st != SD_OK) return st;
        m->weight_bytes = before;
        m->head = &m->lm_head;
    }
    for (int i = 0; i < c->n_layers && st == SD_OK; i++) {
        layer_w *L = &m->layers[i];
        sd_weight *ws[] = {&L->wq, &L->wk, &L->wv, &L->wo, &L->gate, &L->up, &L->down};
        for (size_t j = 0; j < sizeof ws / sizeof ws[0] && st == SD_OK; j++) st = quantize_w(m, ws[j], err, errlen);
    }
    if (st == SD_OK) st = quantize_w(m, &m->lm_head, err, errlen);
    return st;
}

/* ------------------------------------------------------------ teardown */

static void release_w(sd_model *m, sd_weight *w)
{
    if (w->data) m->be->ops->release(m->be, w);
}

static void free_scratch(sd_model *m)
{
    scratch *s = &m->s;
    float *bufs[] = {s->x,    s->xn, s->q,       s->k,      s->v,   s->att, s->o,
                     s->gate, s->up, s->head_in, s->logits, s->cos, s->sin};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) m->be->ops->free(m->be, bufs[i]);
    m->be->ops->free(m->be, s->ids);
    m->be->ops->free(m->be, s->slots);
    memset(s, 0, sizeof *s);
    free(m->h_ids);
    free(m->h_slots);
    free(m->h_rows);
    free(m->h_cos);
    free(m->h_sin);
    m->h_ids = m->h_slots = m->h_rows = NULL;
    m->h_cos = m->h_sin = NULL;
}

static void free_kv(sd_model *m)
{
    if (m->kv) {
        for (int i = 0; i < m->cfg.n_layers; i++) {
            m->be->ops->free(m->be, m->kv[i].k);
            m->be->ops->free(m->be, m->kv[i].v);
        }
    }
    free(m->kv);
    m->kv = NULL;
    sd_kv_pool_free(m->pool);
    m->pool = NULL;
}

void sd_model_free(sd_model *m)
{
    if (!m) return;
    if (m->layers) {
        for (int i = 0; i < m->cfg.n_layers; i++) {
            layer_w *L = &m->layers[i];
            sd_weight *ws[] = {&L->in_norm, &L->post_norm, &L->wq,     &L->wk,     &L->wv,   &L->wo, &L->bq,  &L->bk,
                               &L->bv,      &L->bo,        &L->q_norm, &L->k_norm, &L->gate, &L->up, &L->down};
            for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) release_w(m, ws[j]);
        }
    }
    release_w(m, &m->embed);
    release_w(m, &m->final_norm);
    release_w(m, &m->lm_head);
    free_kv(m);
    free_scratch(m);
    free(m->aseqs);
    free(m->h_amax);
    free(m->layers);
    free(m->inv_freq);
    sd_st_free(m->st);
    for (size_t i = 0; i < m->n_host; i++) free(m->host[i]);
    free(m->host);
    free(m);
}

/* ------------------------------------------------------------ accessors */

const sd_model_config *sd_model_cfg(const sd_model *m) { return &m->cfg; }
sd_backend *sd_model_backend(const sd_model *m) { return m->be; }
size_t sd_model_weight_bytes(const sd_model *m) { return m->weight_bytes; }
int sd_model_act_bf16(const sd_model *m) { return m->act_bf16; }
sd_kv_pool *sd_model_kv_pool(const sd_model *m) { return m->pool; }
void sd_model_set_kv_dtype(sd_model *m, sd_kv_dtype t) { m->kv_want = t; }

sd_status sd_model_cap_context(sd_model *m, int n, char *err, size_t errlen)
{
    if (n < 1 || n > m->cfg.max_position)
        return sd_seterr(err, errlen, SD_ERR_ARG,
                         "a context of %d positions: the model's is %d (max_position_embeddings)", n,
                         m->cfg.max_position);
    m->cfg.max_position = n;
    return SD_OK;
}

sd_dtype sd_model_kv_dtype(const sd_model *m)
{
    if (m->kv) return m->kv[0].dtype;
    if (m->kv_want == SD_KV_AUTO) return m->act_bf16 ? SD_DTYPE_BF16 : SD_DTYPE_F32;
    return m->kv_want == SD_KV_BF16 ? SD_DTYPE_BF16 : SD_DTYPE_F32;
}

int sd_kv_dtype_parse(const char *s)
{
    if (!strcmp(s, "auto")) return SD_KV_AUTO;
    if (!strcmp(s, "f32") || !strcmp(s, "float32")) return SD_KV_F32;
    if (!strcmp(s, "bf16") || !strcmp(s, "bfloat16")) return SD_KV_BF16;
    return -1;
}

size_t sd_model_kv_bytes_per_position(const sd_model *m)
{
    return (size_t)m->cfg.n_layers * 2 * m->cfg.n_kv_heads * m->cfg.head_dim * sd_dtype_size(sd_model_kv_dtype(m));
}

sd_status sd_model_kv_init(sd_model *m, int n_blocks, int block_size, char *err, size_t errlen)
{
    free_kv(m);
    if (n_blocks <= 0 || block_size <= 0)
        return sd_seterr(err, errlen, SD_ERR_ARG, "KV pool needs a positive block count and size");
    sd_dtype dt = sd_model_kv_dtype(m);
    size_t per_layer = (size_t)n_blocks * block_size * m->cfg.n_kv_heads * m->cfg.head_dim * sd_dtype_size(dt);
    m->kv = calloc((size_t)m->cfg.n_layers, sizeof *m->kv);
    /* the pool's only failure left is memory: the message below names the whole pool */
    if (sd_kv_pool_new(n_blocks, block_size, &m->pool, NULL, 0) != SD_OK || !m->kv) goto nomem;
    for (int i = 0; i < m->cfg.n_layers; i++) {
        m->kv[i].dtype = dt;
        m->kv[i].k = m->be->ops->alloc(m->be, per_layer);
        m->kv[i].v = m->be->ops->alloc(m->be, per_layer);
        if (!m->kv[i].k || !m->kv[i].v) goto nomem;
    }
    m->block_size = block_size;
    return SD_OK;
nomem:
    free_kv(m);
    return sd_seterr(err, errlen, SD_ERR_NOMEM, "cannot allocate a KV pool of %d blocks x %d positions (%.1f MiB)",
                     n_blocks, block_size, (double)per_layer * 2 * m->cfg.n_layers / (1 << 20));
}

/* ------------------------------------------------------------ scratch */

size_t sd_model_scratch_bytes(const sd_model *m, int rows, int n_out)
{
    const sd_model_config *c = &m->cfg;
    size_t R = (size_t)rows, C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    size_t qd = c->n_heads * hd, kvd = c->n_kv_heads * hd, big = qd > C ? qd : C;
    size_t per_row = 3 * C + qd + 2 * kvd + big + 2 * F + hd; /* x xn o, q, k v, att, gate up, cos sin */
    /* the backend's own, grown by 1/4 over a pass's need (CUDA): a packed group's f32 GEMM result and a
     * matmul input's bf16 copy */
    size_t group = qd + 2 * kvd > 2 * F ? qd + 2 * kvd : 2 * F, in = big > F ? big : F;
    per_row += (group + in / 2) * 5 / 4;
    return R * per_row * sizeof(float) + R * 2 * sizeof(int32_t) +
           (size_t)n_out * ((size_t)C + (size_t)c->vocab_size) * sizeof(float);
}

/* Room for n_out rows of logits (kept apart from the per-row buffers). */
static sd_status ensure_out(sd_model *m, int n_out)
{
    scratch *s = &m->s;
    if (n_out <= s->cap_out) return SD_OK;
    sd_backend *be = m->be;
    be->ops->free(be, s->head_in);
    be->ops->free(be, s->logits);
    size_t R = (size_t)n_out;
    s->head_in = be->ops->alloc(be, R * (size_t)m->cfg.hidden_size * sizeof(float));
    s->logits = be->ops->alloc(be, R * (size_t)m->cfg.vocab_size * sizeof(float));
    s->cap_out = s->head_in && s->logits ? n_out : 0;
    return s->cap_out ? SD_OK : SD_ERR_NOMEM;
}

static sd_status ensure_scratch(sd_model *m, int rows, int n_seqs, int n_out)
{
    if (sd_grow(&m->aseqs, &m->cap_seqs, (size_t)n_seqs, sizeof *m->aseqs) != SD_OK) return SD_ERR_NOMEM;
    if (rows <= m->s.cap) return ensure_out(m, n_out);
    free_scratch(m);
    const sd_model_config *c = &m->cfg;
    size_t R = (size_t)rows, C = c->hidden_size, F = c->intermediate_size, hd = c->head_dim;
    size_t qd = c->n_heads * hd, kvd = c->n_kv_heads * hd, big = qd > C ? qd : C;
    sd_backend *be = m->be;
    scratch *s = &m->s;
#define A(p, n) ((p) = be->ops->alloc(be, (n) * sizeof *(p)))
    int ok = A(s->x, R * C) && A(s->xn, R * C) && A(s->q, R * qd) && A(s->k, R * kvd) && A(s->v, R * kvd) &&
             A(s->att, R * big) && A(s->o, R * C) && A(s->gate, R * F) && A(s->up, R * F) && A(s->cos, R * hd / 2) &&
             A(s->sin, R * hd / 2) && A(s->ids, R) && A(s->slots, R);
#undef A
    m->h_ids = malloc(R * sizeof(int32_t));
    m->h_slots = malloc(R * sizeof(int32_t));
    m->h_rows = malloc(R * sizeof(int32_t));
    m->h_cos = malloc(R * hd / 2 * sizeof(float));
    m->h_sin = malloc(R * hd / 2 * sizeof(float));
    if (!ok || !m->h_ids || !m->h_slots || !m->h_rows || !m->h_cos || !m->h_sin) {
        free_scratch(m);
        return SD_ERR_NOMEM;
    }
    s->cap = rows;
    return ensure_out(m, n_out);
}

/* ------------------------------------------------------------ forward */

/* Checks the batch and fills host-side ids, slots, RoPE tables and the
 * attention descriptors. Returns the number of logits rows via *n_out. */
static sd_status prepare_batch(sd_model *m, const sd_batch_seq *seqs, int n_seqs, int *n_out, char *err, size_t errlen)
{
    const sd_model_config *c = &m->cfg;
    int half = c->head_dim / 2, row = 0, nl = 0;
    for (int si = 0; si < n_seqs; si++) {
        const sd_batch_seq *b = &seqs[si];
        if (b->n < 1 || b->pos0 < 0 || b->n_logits < 0 || b->n_logits > b->n || !b->kv)
            return sd_seterr(err, errlen, SD_ERR_ARG, "sequence %d: bad span (n=%d, pos0=%d, n_logits=%d)", si, b->n,
                             b->pos0, b->n_logits);
        if (b->pos0 + b->n > c->max_position)
            return sd_seterr(err, errlen, SD_ERR_ARG, "sequence %d: position %d beyond the context of %d", si,
                             b->pos0 + b->n - 1, c->max_position);
        if (b->pos0 + b->n > b->kv->n_blocks * m->block_size)
            return sd_seterr(err, errlen, SD_ERR_ARG, "sequence %d: KV blocks cover %d positions, span needs %d", si,
                             b->kv->n_blocks * m->block_size, b->pos0 + b->n);
        m->aseqs[si] = (sd_attn_seq){row, b->n, b->pos0, b->kv->blocks};
        for (int t = 0; t < b->n; t++, row++) {
            int32_t id = b->tokens[t];
            if (id < 0 || id >= c->vocab_size)
                return sd_seterr(err, errlen, SD_ERR_ARG, "token id %d out of range [0, %d)", id, c->vocab_size);
            int pos = b->pos0 + t;
            m->h_ids[row] = id;
            m->h_slots[row] = sd_kv_slot(b->kv, m->block_size, pos);
            for (int i = 0; i < half; i++) {
                float f = (float)pos * m->inv_freq[i];
                float cs = cosf(f), sn = sinf(f);
                m->h_cos[(size_t)row * half + i] = m->act_bf16 ? sd_round_bf16(cs) : cs;
                m->h_sin[(size_t)row * half + i] = m->act_bf16 ? sd_round_bf16(sn) : sn;
            }
            if (t >= b->n - b->n_logits) m->h_rows[nl++] = row;
        }
    }
    *n_out = nl;
    return SD_OK;
}

/* Runs a fused matmul group: the backend's matmul_fused when it has one,
 * else the same arithmetic from matmul / add / silu_mul. */
static void fused(sd_model *m, const sd_mm_fused *f, const float *x, int T)
{
    const sd_backend_ops *op = m->be->ops;
    sd_backend *be = m->be;
    int b16 = m->act_bf16;
    if (op->matmul_fused) {
        op->matmul_fused(be, f, x, T, b16);
        return;
    }
    for (int i = 0; i < f->n; i++) op->matmul(be, f->y[i], x, f->w[i], f->bias[i], T, b16);
    int N = f->w[0]->rows;
    size_t n = (size_t)T * N;
    if (f->kind == SD_MM_RESIDUAL) op->add(be, f->res, f->y[0], n, b16);
    else if (f->kind == SD_MM_SWIGLU) op->silu_mul(be, f->y[0], f->y[0], f->y[1], n, b16);
    if (f->kind == SD_MM_RESIDUAL && f->norm) op->rmsnorm(be, f->norm_y, f->res, f->norm, T, N, f->eps, b16);
}

static const sd_weight *opt_w(const sd_weight *w) { return w->data ? w : NULL; }

/* The backend's qk_rope_kv, or the ops it stands for one by one. */
static void qk_rope_kv(sd_backend *be, const sd_qk_rope_kv *a)
{
    const sd_backend_ops *op = be->ops;
    if (op->qk_rope_kv) {
        op->qk_rope_kv(be, a);
        return;
    }
    int hd = a->head_dim;
    if (a->q_norm) op->rmsnorm(be, a->q, a->q, a->q_norm, a->T * a->n_heads, hd, a->eps, a->bf16);
    if (a->k_norm) op->rmsnorm(be, a->k, a->k, a->k_norm, a->T * a->n_kv_heads, hd, a->eps, a->bf16);
    op->rope(be, a->q, a->cos, a->sin, a->T, a->n_heads, hd, a->bf16);
    op->rope(be, a->k, a->cos, a->sin, a->T, a->n_kv_heads, hd, a->bf16);
    op->kv_write(be, a->kv, a->k, a->v, a->slots, a->T, a->n_kv_heads * hd);
}

static sd_status layer_forward(sd_model *m, int li, int T, int n_seqs)
{
    const sd_model_config *c = &m->cfg;
    const sd_backend_ops *op = m->be->ops;
    sd_backend *be = m->be;
    const layer_w *L = &m->layers[li];
    scratch *s = &m->s;
    int hd = c->head_dim, C = c->hidden_size;
    int b16 = m->act_bf16;
    if (li == 0) op->rmsnorm(be, s->xn, s->x, &L->in_norm, T, C, c->rms_eps, b16); /* else the down group before */
    sd_mm_fused qkv = {SD_MM_SHARED,
                       3,
                       {&L->wq, &L->wk, &L->wv},
                       {opt_w(&L->bq), opt_w(&L->bk), opt_w(&L->bv)},
                       {s->q, s->k, s->v},
                       NULL,
                       NULL,
                       NULL,
                       0.0f};
    fused(m, &qkv, s->xn, T);
    sd_qk_rope_kv qr = {s->q,
                        s->k,
                        s->v,
                        c->qk_norm ? &L->q_norm : NULL,
                        c->qk_norm ? &L->k_norm : NULL,
                        c->rms_eps,
                        s->cos,
                        s->sin,
                        &m->kv[li],
                        s->slots,
                        T,
                        c->n_heads,
                        c->n_kv_heads,
                        hd,
                        b16};
    qk_rope_kv(be, &qr);
    sd_attn_shape shape = {c->n_heads, c->n_kv_heads, hd, m->block_size, 1.0f / sqrtf((float)hd), b16};
    sd_status st = op->attention(be, s->att, s->q, &m->kv[li], m->aseqs, n_seqs, &shape);
    if (st != SD_OK) return st;
    sd_mm_fused o = {SD_MM_RESIDUAL, 1, {&L->wo}, {opt_w(&L->bo)}, {s->o}, s->x, &L->post_norm, s->xn, c->rms_eps};
    fused(m, &o, s->att, T);
    sd_mm_fused mlp = {SD_MM_SWIGLU, 2, {&L->gate, &L->up}, {NULL, NULL}, {s->gate, s->up}, NULL, NULL, NULL, 0.0f};
    fused(m, &mlp, s->xn, T);
    /* the next layer's input norm with the residual add (the last layer's rows get the final norm) */
    const sd_weight *next = li + 1 < c->n_layers ? &m->layers[li + 1].in_norm : NULL;
    sd_mm_fused down = {SD_MM_RESIDUAL, 1, {&L->down}, {NULL}, {s->o}, s->x, next, s->xn, c->rms_eps};
    fused(m, &down, s->gate, T);
    return SD_OK;
}

/* The embedding and every layer of a pass of T rows, one op at a time. */
static sd_status layers(sd_model *m, int T, int n_seqs, char *err, size_t errlen)
{
    m->be->ops->embed(m->be, m->s.x, &m->embed, m->s.ids, T);
    for (int li = 0; li < m->cfg.n_layers; li++) {
        sd_status st = layer_forward(m, li, T, n_seqs);
        if (st != SD_OK) return sd_seterr(err, errlen, st, "layer %d: %s", li, sd_status_str(st));
    }
    return SD_OK;
}

/* layers(), recorded once and replayed where the backend offers it (CUDA
 * graphs: one per model and T); a recording that fails runs eagerly. */
static sd_status run_layers(sd_model *m, int T, int n_seqs, char *err, size_t errlen)
{
    const sd_backend_ops *op = m->be->ops;
    int mode = op->graph_begin ? op->graph_begin(m->be, m, T) : SD_GRAPH_EAGER;
    if (mode == SD_GRAPH_REPLAYED) return SD_OK;
    sd_status st = layers(m, T, n_seqs, err, errlen);
    if (mode != SD_GRAPH_RECORD) return st;
    if (op->graph_end(m->be, st == SD_OK) == SD_OK) return SD_OK;
    return layers(m, T, n_seqs, err, errlen);
}

/* The argmax of n rows of the logits in backend memory into out (host):
 * the backend's op, else row by row through the host. */
static sd_status rows_argmax(sd_model *m, int32_t *out, const float *rows, int n)
{
    sd_backend *be = m->be;
    int V = m->cfg.vocab_size;
    if (be->ops->argmax) return be->ops->argmax(be, out, rows, n, V);
    float *row = malloc((size_t)V * sizeof *row);
    if (!row) return SD_ERR_NOMEM;
    for (int r = 0; r < n; r++) {
        be->ops->to_host(be, row, rows + (size_t)r * V, (size_t)V * sizeof *row);
        out[r] = sd_argmax_f32(row, V);
    }
    free(row);
    return SD_OK;
}

/* The argmax of a run of sequences [i0, i1) with argmax arrays whose rows
 * start at row o of the pass: one call, then each sequence's share. */
static sd_status run_argmax(sd_model *m, const sd_batch_seq *seqs, int i0, int i1, int o)
{
    int n = 0;
    for (int i = i0; i < i1; i++) n += seqs[i].n_logits;
    if (n == 0) return SD_OK;
    if (sd_grow(&m->h_amax, &m->cap_amax, (size_t)n, sizeof *m->h_amax) != SD_OK) return SD_ERR_NOMEM;
    sd_status st = rows_argmax(m, m->h_amax, m->s.logits + (size_t)o * m->cfg.vocab_size, n);
    for (int i = i0, k = 0; st == SD_OK && i < i1; k += seqs[i++].n_logits)
        memcpy(seqs[i].argmax, m->h_amax + k, (size_t)seqs[i].n_logits * sizeof *m->h_amax);
    return st;
}

/* Sends the logits rows of the pass where they go: the argmax of the
 * sequences with an argmax array to it, the others' rows to logits — each
 * run of sequences of one kind in one call. */
static sd_status head_out(sd_model *m, const sd_batch_seq *seqs, int n_seqs, float *logits)
{
    size_t V = (size_t)m->cfg.vocab_size;
    int o = 0, w = 0; /* rows of the pass done; rows written to logits */
    for (int i = 0, j; i < n_seqs; i = j) {
        bool am = seqs[i].argmax != NULL;
        int rows = 0;
        for (j = i; j < n_seqs && (seqs[j].argmax != NULL) == am; j++) rows += seqs[j].n_logits;
        if (am) {
            sd_status st = run_argmax(m, seqs, i, j, o);
            if (st != SD_OK) return st;
        } else if (rows > 0) {
            m->be->ops->to_host(m->be, logits + (size_t)w * V, m->s.logits + (size_t)o * V,
                                (size_t)rows * V * sizeof(float));
            w += rows;
        }
        o += rows;
    }
    return SD_OK;
}

sd_status sd_model_logits_grow(const sd_model *m, float **buf, size_t *cap, size_t rows)
{
    if (rows <= *cap) return SD_OK;
    size_t row = (size_t)m->cfg.vocab_size * sizeof(float), nc = *cap > rows / 2 ? 2 * *cap : rows;
    if (nc > SIZE_MAX / row) return SD_ERR_NOMEM;
    const sd_backend_ops *op = m->be->ops;
    size_t bytes = nc * row;
    float *p = op->host_alloc && bytes <= SD_LOGITS_PINNED_MAX ? op->host_alloc(m->be, bytes) : NULL;
    if (!p && !(p = malloc(bytes))) return SD_ERR_NOMEM;
    sd_model_logits_free(m, *buf);
    *buf = p;
    *cap = nc;
    return SD_OK;
}

void sd_model_logits_free(const sd_model *m, float *buf)
{
    if (!buf) return;
    if (m->be->ops->host_free) m->be->ops->host_free(m->be, buf);
    else free(buf);
}

sd_status sd_model_forward(sd_model *m, const sd_batch_seq *seqs, int n_seqs, float *logits, char *err, size_t errlen)
{
    const sd_model_config *c = &m->cfg;
    const sd_backend_ops *op = m->be->ops;
    sd_backend *be = m->be;
    if (!m->pool) return sd_seterr(err, errlen, SD_ERR_STATE, "forward before sd_model_kv_init");
    if (n_seqs <= 0) return sd_seterr(err, errlen, SD_ERR_ARG, "empty batch");
    long rows = 0, outs = 0;
    for (int i = 0; i < n_seqs; i++) {
        rows += seqs[i].n > 0 ? seqs[i].n : 0;
        outs += seqs[i].n_logits > 0 && seqs[i].n_logits <= seqs[i].n ? seqs[i].n_logits : 0;
    }
    if (rows <= 0 || rows > (1 << 20)) return sd_seterr(err, errlen, SD_ERR_ARG, "bad batch size %ld", rows);
    if (ensure_scratch(m, (int)rows, n_seqs, outs > 0 ? (int)outs : 1) != SD_OK)
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory for a batch of %ld rows", rows);
    int T = (int)rows, n_out = 0, half = c->head_dim / 2, C = c->hidden_size;
    sd_status st = prepare_batch(m, seqs, n_seqs, &n_out, err, errlen);
    if (st != SD_OK) return st;
    scratch *s = &m->s;
    op->to_backend(be, s->ids, m->h_ids, (size_t)T * sizeof(int32_t));
    op->to_backend(be, s->slots, m->h_slots, (size_t)T * sizeof(int32_t));
    op->to_backend(be, s->cos, m->h_cos, (size_t)T * half * sizeof(float));
    op->to_backend(be, s->sin, m->h_sin, (size_t)T * half * sizeof(float));
    if (op->attn_stage && (st = op->attn_stage(be, m->aseqs, n_seqs, m->block_size)) != SD_OK)
        return sd_seterr(err, errlen, st, "attention tables: %s", sd_status_str(st));
    st = run_layers(m, T, n_seqs, err, errlen);
    if (st != SD_OK) return st;
    if (n_out == 0) {
        if (op->take_error && (st = op->take_error(be)) != SD_OK)
            return sd_seterr(err, errlen, st, "%s backend: %s", op->name, sd_status_str(st));
        return SD_OK;
    }
    for (int r = 0, k; r < n_out; r += k) { /* the final norm, a run of consecutive rows of x a call */
        for (k = 1; r + k < n_out && m->h_rows[r + k] == m->h_rows[r] + k;) k++;
        op->rmsnorm(be, s->head_in + (size_t)r * C, s->x + (size_t)m->h_rows[r] * C, &m->final_norm, k, C, c->rms_eps,
                    m->act_bf16);
    }
    op->matmul(be, s->logits, s->head_in, m->head, NULL, n_out, m->act_bf16);
    if ((st = head_out(m, seqs, n_seqs, logits)) != SD_OK)
        return sd_seterr(err, errlen, st, "out of memory for a logits row");
    op->sync(be);
    if (op->take_error && (st = op->take_error(be)) != SD_OK)
        return sd_seterr(err, errlen, st, "%s backend: %s", op->name, sd_status_str(st));
    return SD_OK;
}
