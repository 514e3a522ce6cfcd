/* model.c — Llama / Qwen2 / Qwen3 forward pass over a backend (see model.h;
 * loading in model_load.c, the state in model_impl.h).
 *
 * Numerics follow Hugging Face transformers: RMSNorm in f32
 * (x * rsqrt(mean(x²) + eps) * w), rotate-half RoPE with inv_freq computed in
 * f32 (llama3 scaling applied to inv_freq), Qwen3 q/k RMSNorm per head before
 * RoPE, Qwen2 q/k/v biases, SwiGLU MLP, tied or separate LM head.
 *
 * Ownership: the model owns its weights' backend copies, the mapped
 * checkpoint, the KV storage + pool and all scratch buffers. */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "model_impl.h"
#include "ranks.h"
#include "vecmath.h"

/* ------------------------------------------------------------ teardown */

void sd_model_release_w(sd_model *m, sd_weight *w)
{
    if (w->data) m->be->ops->release(m->be, w);
}

static void free_scratch(sd_model *m)
{
    scratch *s = &m->s;
    float *bufs[] = {s->x,  s->xn,      s->q,      s->k,   s->v,   s->att,   s->o,   s->gate, s->up,
                     s->xc, s->head_in, s->logits, s->cos, s->sin, s->parts, s->red, s->gath};
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
    if (!m->root) sd_kv_pool_free(m->pool); /* a peer's is rank 0's */
    m->pool = NULL;
}

void sd_model_free(sd_model *m)
{
    if (!m) return;
    sd_ranks_free(m->ranks); /* the peers' threads first: nothing runs on them any more */
    for (int r = 1; r < SD_COMM_MAX_RANKS; r++) sd_model_free(m->peer[r]);
    if (m->layers) {
        for (int i = 0; i < m->cfg.n_layers; i++) {
            layer_w *L = &m->layers[i];
            sd_weight *ws[] = {&L->in_norm, &L->post_norm, &L->wq,     &L->wk,     &L->wv,   &L->wo, &L->bq,  &L->bk,
                               &L->bv,      &L->bo,        &L->q_norm, &L->k_norm, &L->gate, &L->up, &L->down};
            for (size_t j = 0; j < sizeof ws / sizeof ws[0]; j++) sd_model_release_w(m, ws[j]);
            for (int j = 0; j < SD_TP_CHUNKS; j++) {
                sd_model_release_w(m, &L->wo_c[j]);
                sd_model_release_w(m, &L->down_c[j]);
            }
        }
    }
    sd_model_release_w(m, &m->embed);
    sd_model_release_w(m, &m->final_norm);
    sd_model_release_w(m, &m->lm_head);
    free_kv(m);
    free_scratch(m);
    free(m->aseqs);
    free(m->h_amax);
    free(m->h_draw);
    free(m->h_drawn);
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
int sd_model_tp_size(const sd_model *m) { return m->tp_size; }
const char *sd_model_comm_name(const sd_model *m) { return m->comm ? m->comm->ops->name : ""; }

const sd_model *sd_model_rank(const sd_model *m, int r)
{
    return r == 0 ? m : r > 0 && r < m->tp_size ? m->peer[r] : NULL;
}

bool sd_model_lost(const sd_model *m)
{
    for (int r = 0; r < m->tp_size; r++) {
        const sd_model *k = sd_model_rank(m, r);
        if (k->failed || sd_backend_lost(k->be)) return true;
    }
    return false;
}

void sd_model_set_kv_dtype(sd_model *m, sd_kv_dtype t)
{
    for (int r = 0; r < m->tp_size; r++) ((sd_model *)sd_model_rank(m, r))->kv_want = t;
}

sd_status sd_model_cap_context(sd_model *m, int n, char *err, size_t errlen)
{
    if (n < 1 || n > m->cfg.max_position)
        return sd_seterr(err, errlen, SD_ERR_ARG,
                         "a context of %d positions: the model's is %d (max_position_embeddings)", n,
                         m->cfg.max_position);
    for (int r = 0; r < m->tp_size; r++) ((sd_model *)sd_model_rank(m, r))->cfg.max_position = n;
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
    return (size_t)m->cfg.n_layers * 2 * m->n_kv_heads * m->cfg.head_dim * sd_dtype_size(sd_model_kv_dtype(m));
}

/* One rank's KV storage for its KV heads; rank 0 makes the pool (pool NULL),
 * a peer takes rank 0's (its block tables are the ranks'). */
static sd_status kv_rank(sd_model *m, int n_blocks, int block_size, sd_kv_pool *pool, char *err, size_t errlen)
{
    free_kv(m);
    sd_dtype dt = sd_model_kv_dtype(m);
    size_t per_layer = (size_t)n_blocks * block_size * m->n_kv_heads * m->cfg.head_dim * sd_dtype_size(dt);
    m->kv = calloc((size_t)m->cfg.n_layers, sizeof *m->kv);
    m->pool = pool;
    /* the pool's only failure left is memory: the message below names the whole pool */
    if ((!pool && sd_kv_pool_new(n_blocks, block_size, &m->pool, NULL, 0) != SD_OK) || !m->kv) goto nomem;
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
    return sd_seterr(err, errlen, SD_ERR_NOMEM, "cannot allocate a KV pool of %d blocks x %d positions (%.1f MiB)%s",
                     n_blocks, block_size, (double)per_layer * 2 * m->cfg.n_layers / (1 << 20),
                     m->tp_size > 1 ? " on a rank" : "");
}

sd_status sd_model_kv_init(sd_model *m, int n_blocks, int block_size, char *err, size_t errlen)
{
    if (n_blocks <= 0 || block_size <= 0)
        return sd_seterr(err, errlen, SD_ERR_ARG, "KV pool needs a positive block count and size");
    sd_status st = kv_rank(m, n_blocks, block_size, NULL, err, errlen);
    for (int r = 1; r < m->tp_size && st == SD_OK; r++)
        st = kv_rank(m->peer[r], n_blocks, block_size, m->pool, err, errlen);
    return st;
}

/* ------------------------------------------------------------ scratch */

/* Floats a row of the split buffers takes (model_impl.h scratch: xc, parts,
 * red, gath); 0 for a model that is not split. */
static size_t split_floats(const sd_model *m)
{
    if (m->tp_chunks == 0) return 0;
    size_t C = m->cfg.hidden_size, qd = (size_t)m->n_heads * m->cfg.head_dim, F = m->ffn;
    size_t in = m->tp_chunks > 1 ? (qd > F ? qd : F) / m->tp_chunks : 0;
    size_t red = m->tp_size > 1 && m->tp_chunks > 1 ? C : 0, gath = m->tp_size > 1 ? C * m->tp_size : 0;
    return in + C * m->tp_chunks + red + gath;
}

size_t sd_model_scratch_bytes(const sd_model *m, int rows, int n_out)
{
    const sd_model_config *c = &m->cfg;
    size_t R = (size_t)rows, C = c->hidden_size, F = m->ffn, hd = c->head_dim;
    size_t qd = m->n_heads * hd, kvd = m->n_kv_heads * hd, big = qd > C ? qd : C;
    size_t per_row = 3 * C + qd + 2 * kvd + big + 2 * F + hd; /* x xn o, q, k v, att, gate up, cos sin */
    /* the backend's own, grown by 1/4 over a pass's need (CUDA): a packed group's f32 GEMM result and a
     * matmul input's bf16 copy */
    size_t group = qd + 2 * kvd > 2 * F ? qd + 2 * kvd : 2 * F, in = big > F ? big : F;
    per_row += (group + in / 2) * 5 / 4 + split_floats(m);
    size_t out = m->tp_rank == 0 ? (size_t)n_out * ((size_t)C + (size_t)c->vocab_size) * sizeof(float) : 0;
    return R * per_row * sizeof(float) + R * 2 * sizeof(int32_t) + out;
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

/* The split buffers (model_impl.h) for R rows. */
static bool alloc_split(sd_model *m, size_t R)
{
    if (m->tp_chunks == 0) return true;
    sd_backend *be = m->be;
    scratch *s = &m->s;
    size_t C = m->cfg.hidden_size, qd = (size_t)m->n_heads * m->cfg.head_dim, F = m->ffn;
#define A(p, n) ((p) = be->ops->alloc(be, (n) * sizeof *(p)))
    bool ok = A(s->parts, R * C * m->tp_chunks) != NULL;
    if (m->tp_chunks > 1) ok = ok && A(s->xc, R * (qd > F ? qd : F) / m->tp_chunks);
    if (m->tp_size > 1) ok = ok && A(s->gath, R * C * m->tp_size);
    if (m->tp_size > 1 && m->tp_chunks > 1) ok = ok && A(s->red, R * C);
#undef A
    return ok;
}

static sd_status ensure_scratch(sd_model *m, int rows, int n_seqs, int n_out)
{
    if (sd_grow(&m->aseqs, &m->cap_seqs, (size_t)n_seqs, sizeof *m->aseqs) != SD_OK) return SD_ERR_NOMEM;
    if (rows <= m->s.cap) return ensure_out(m, n_out);
    free_scratch(m);
    const sd_model_config *c = &m->cfg;
    size_t R = (size_t)rows, C = c->hidden_size, F = m->ffn, hd = c->head_dim;
    size_t qd = m->n_heads * hd, kvd = m->n_kv_heads * hd, big = qd > C ? qd : C;
    sd_backend *be = m->be;
    scratch *s = &m->s;
#define A(p, n) ((p) = be->ops->alloc(be, (n) * sizeof *(p)))
    int ok = A(s->x, R * C) && A(s->xn, R * C) && A(s->q, R * qd) && A(s->k, R * kvd) && A(s->v, R * kvd) &&
             A(s->att, R * big) && A(s->o, R * C) && A(s->gate, R * F) && A(s->up, R * F) && A(s->cos, R * hd / 2) &&
             A(s->sin, R * hd / 2) && A(s->ids, R) && A(s->slots, R) && alloc_split(m, R);
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
    bool partial = f->kind == SD_MM_PARTIAL; /* raw sums: no bias, not rounded */
    for (int i = 0; i < f->n; i++)
        op->matmul(be, f->y[i], x, f->w[i], partial ? NULL : f->bias[i], T, partial ? 0 : b16);
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

/* A row-parallel residual group (o, down) of a split model: the partial sum
 * of each of this rank's column chunks of w (x[T, K], this rank's columns),
 * then (tp_size > 1) every rank's sum exchanged, and all added in the fixed
 * pairwise order of reduce_parts with the bias and the rounding of the
 * unsplit matmul; then the residual add and the next norm (norm: NULL for
 * none), as the fused group does. */
static sd_status tp_residual(sd_model *m, const sd_weight *chunks, const sd_weight *bias, const float *x, int K,
                             const sd_weight *norm, int T)
{
    const sd_backend_ops *op = m->be->ops;
    sd_backend *be = m->be;
    scratch *s = &m->s;
    int C = m->cfg.hidden_size, n = m->tp_chunks, Kc = K / n, b16 = m->act_bf16;
    size_t TC = (size_t)T * C;
    for (int j = 0; j < n; j++) {
        const float *in = x;
        if (n > 1) {
            op->copy_cols(be, s->xc, x, T, K, j * Kc, Kc);
            in = s->xc;
        }
        sd_mm_fused f = {.kind = SD_MM_PARTIAL, .n = 1, .w = {&chunks[j]}, .y = {s->parts + j * TC}};
        fused(m, &f, in, T);
    }
    if (m->tp_size == 1) {
        op->reduce_parts(be, s->o, s->parts, n, T, C, bias, b16);
    } else {
        const float *mine = s->parts;
        if (n > 1) { /* this rank's chunks first: a subtree of the pairwise order over all of them */
            op->reduce_parts(be, s->red, s->parts, n, T, C, NULL, 0);
            mine = s->red;
        }
        sd_status st = m->comm->ops->allgather(m->comm, mine, s->gath, TC);
        if (st != SD_OK) return st;
        op->reduce_parts(be, s->o, s->gath, m->tp_size, T, C, bias, b16);
    }
    op->add(be, s->x, s->o, TC, b16);
    if (norm) op->rmsnorm(be, s->xn, s->x, norm, T, C, m->cfg.rms_eps, b16);
    return SD_OK;
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
    sd_mm_fused qkv = {.kind = SD_MM_SHARED,
                       .n = 3,
                       .w = {&L->wq, &L->wk, &L->wv},
                       .bias = {opt_w(&L->bq), opt_w(&L->bk), opt_w(&L->bv)},
                       .y = {s->q, s->k, s->v}};
    fused(m, &qkv, s->xn, T);
    sd_qk_rope_kv qr = {.q = s->q,
                        .k = s->k,
                        .v = s->v,
                        .eps = c->rms_eps,
                        .cos = s->cos,
                        .sin = s->sin,
                        .kv = &m->kv[li],
                        .slots = s->slots,
                        .T = T,
                        .n_heads = m->n_heads,
                        .n_kv_heads = m->n_kv_heads,
                        .head_dim = hd,
                        .bf16 = b16};
    if (c->qk_norm) {
        qr.q_norm = &L->q_norm;
        qr.k_norm = &L->k_norm;
    }
    qk_rope_kv(be, &qr);
    sd_attn_shape shape = {m->n_heads, m->n_kv_heads, hd, m->block_size, 1.0f / sqrtf((float)hd), b16};
    const sd_attn_seq *seqs = m->root ? m->root->aseqs : m->aseqs; /* a peer's pass is rank 0's */
    sd_status st = op->attention(be, s->att, s->q, &m->kv[li], seqs, n_seqs, &shape);
    if (st != SD_OK) return st;
    /* the next layer's input norm with the residual add (the last layer's rows get the final norm) */
    const sd_weight *next = li + 1 < c->n_layers ? &m->layers[li + 1].in_norm : NULL;
    sd_mm_fused mlp = {.kind = SD_MM_SWIGLU, .n = 2, .w = {&L->gate, &L->up}, .y = {s->gate, s->up}};
    if (m->tp_chunks > 0) {
        int qd = m->n_heads * hd;
        if ((st = tp_residual(m, L->wo_c, opt_w(&L->bo), s->att, qd, &L->post_norm, T)) != SD_OK) return st;
        fused(m, &mlp, s->xn, T);
        return tp_residual(m, L->down_c, NULL, s->gate, m->ffn, next, T);
    }
    sd_mm_fused o = {SD_MM_RESIDUAL, 1, {&L->wo}, {opt_w(&L->bo)}, {s->o}, s->x, &L->post_norm, s->xn, c->rms_eps};
    fused(m, &o, s->att, T);
    fused(m, &mlp, s->xn, T);
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
    /* split over ranks: eager (a rank that replays while another records would exchange out of step) */
    int mode = op->graph_begin && m->tp_size == 1 ? op->graph_begin(m->be, m, T) : SD_GRAPH_EAGER;
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

/* The row draws of a run of sequences [i0, i1) with draws whose rows start
 * at row o of the pass: one call, then each sequence's share. */
static sd_status run_draw(sd_model *m, const sd_batch_seq *seqs, int i0, int i1, int o)
{
    int n = 0;
    for (int i = i0; i < i1; i++) n += seqs[i].n_logits;
    if (n == 0) return SD_OK;
    if (!m->be->ops->draw_rows) return SD_ERR_ARG;
    if (sd_grow(&m->h_draw, &m->cap_draw, (size_t)n, sizeof *m->h_draw) != SD_OK ||
        sd_grow(&m->h_drawn, &m->cap_drawn, (size_t)n, sizeof *m->h_drawn) != SD_OK)
        return SD_ERR_NOMEM;
    for (int i = i0, k = 0; i < i1; k += seqs[i++].n_logits)
        memcpy(m->h_draw + k, seqs[i].draw, (size_t)seqs[i].n_logits * sizeof *m->h_draw);
    sd_status st = m->be->ops->draw_rows(m->be, m->h_drawn, m->s.logits + (size_t)o * m->cfg.vocab_size, m->h_draw, n,
                                         m->cfg.vocab_size);
    for (int i = i0, k = 0; st == SD_OK && i < i1; k += seqs[i++].n_logits)
        memcpy(seqs[i].drawn, m->h_drawn + k, (size_t)seqs[i].n_logits * sizeof *m->h_drawn);
    return st;
}

/* What becomes of a sequence's rows: 0 to logits, 1 argmax, 2 drawn. */
static int head_kind(const sd_batch_seq *b) { return b->argmax ? 1 : b->draw ? 2 : 0; }

/* Sends the logits rows of the pass where they go: the argmax of the
 * sequences with an argmax array to it, the draws of those with a draw to
 * theirs, the others' rows to logits — each run of sequences of one kind in
 * one call. */
static sd_status head_out(sd_model *m, const sd_batch_seq *seqs, int n_seqs, float *logits)
{
    size_t V = (size_t)m->cfg.vocab_size;
    int o = 0, w = 0; /* rows of the pass done; rows written to logits */
    for (int i = 0, j; i < n_seqs; i = j) {
        int kind = head_kind(&seqs[i]);
        int rows = 0;
        for (j = i; j < n_seqs && head_kind(&seqs[j]) == kind; j++) rows += seqs[j].n_logits;
        if (kind) {
            sd_status st = kind == 1 ? run_argmax(m, seqs, i, j, o) : run_draw(m, seqs, i, j, o);
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

/* One rank's layers of a pass whose batch rank 0 prepared (root: its host
 * arrays and attention descriptors): its copies to its backend, then the
 * layers. */
static sd_status rank_layers(sd_model *m, const sd_model *root, int T, int n_seqs, char *err, size_t errlen)
{
    const sd_backend_ops *op = m->be->ops;
    sd_backend *be = m->be;
    scratch *s = &m->s;
    size_t half = (size_t)m->cfg.head_dim / 2;
    if (m != root && ensure_scratch(m, T, n_seqs, 0) != SD_OK)
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory for a batch of %d rows", T);
    op->to_backend(be, s->ids, root->h_ids, (size_t)T * sizeof(int32_t));
    op->to_backend(be, s->slots, root->h_slots, (size_t)T * sizeof(int32_t));
    op->to_backend(be, s->cos, root->h_cos, (size_t)T * half * sizeof(float));
    op->to_backend(be, s->sin, root->h_sin, (size_t)T * half * sizeof(float));
    sd_status st = SD_OK;
    if (op->attn_stage && (st = op->attn_stage(be, root->aseqs, n_seqs, m->block_size)) != SD_OK)
        return sd_seterr(err, errlen, st, "attention tables: %s", sd_status_str(st));
    if ((st = run_layers(m, T, n_seqs, err, errlen)) != SD_OK) return st;
    if (m != root) op->sync(be); /* its part is done when the call returns (rank 0 syncs after its head) */
    if (op->take_error && (st = op->take_error(be)) != SD_OK)
        return sd_seterr(err, errlen, st, "%s backend: %s", op->name, sd_status_str(st));
    return SD_OK;
}

/* A pass over the ranks of a split model (sd_ranks_run): each rank's status
 * and message. */
typedef struct tp_pass {
    sd_model *root;
    int T, n_seqs;
    sd_status st[SD_COMM_MAX_RANKS];
    char err[SD_COMM_MAX_RANKS][256];
} tp_pass;

static void tp_rank_task(void *ctx, int r)
{
    tp_pass *p = ctx;
    sd_model *m = r ? p->root->peer[r] : p->root;
    if (p->root->fault_rank == r && ++m->passes >= p->root->fault_after) {
        p->st[r] = sd_seterr(p->err[r], sizeof p->err[r], SD_ERR_DEVICE, "rank %d lost (SD_FAULT_TP_RANK_LOST)", r);
    } else {
        p->st[r] = rank_layers(m, p->root, p->T, p->n_seqs, p->err[r], sizeof p->err[r]);
    }
    if (p->st[r] != SD_OK) {
        m->failed = p->st[r] == SD_ERR_DEVICE || sd_backend_lost(m->be);
        if (m->comm) m->comm->ops->abort(m->comm); /* no rank waits for this one for ever */
    }
}

/* Every rank's layers at once; the first failure's status and message (the
 * failing rank's own, not the aborted exchanges of the others). */
static sd_status tp_layers(sd_model *m, int T, int n_seqs, char *err, size_t errlen)
{
    tp_pass p = {.root = m, .T = T, .n_seqs = n_seqs};
    if (m->comm->ops->aborted(m->comm))
        return sd_seterr(err, errlen, SD_ERR_DEVICE, "the tensor-parallel group is down (a rank failed before)");
    sd_ranks_run(m->ranks, tp_rank_task, &p);
    int bad = -1;
    for (int r = 0; r < m->tp_size; r++)
        if (p.st[r] != SD_OK && (bad < 0 || (p.st[bad] == SD_ERR_DEVICE && p.st[r] != SD_ERR_DEVICE))) bad = r;
    for (int r = 0; r < m->tp_size && bad >= 0; r++) /* the rank that failed first aborted the others' exchanges */
        if (p.st[r] != SD_OK && !strstr(p.err[r], "allgather") && sd_model_rank(m, r)->failed) bad = r;
    if (bad < 0) return SD_OK;
    return sd_seterr(err, errlen, p.st[bad], "rank %d: %s", bad, p.err[bad]);
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
    int T = (int)rows, n_out = 0, C = c->hidden_size;
    sd_status st = prepare_batch(m, seqs, n_seqs, &n_out, err, errlen);
    if (st != SD_OK) return st;
    scratch *s = &m->s;
    st = m->tp_size > 1 ? tp_layers(m, T, n_seqs, err, errlen) : rank_layers(m, m, T, n_seqs, err, errlen);
    if (st != SD_OK || n_out == 0) return st;
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
