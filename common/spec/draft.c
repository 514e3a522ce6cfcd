/* draft.c — see draft.h.
 *
 * State: one draft_seq per live seq_id in a small table searched linearly
 * (a propose batch holds tens of sequences; a forward pass costs far more
 * than the scan). Mirror invariant between calls: kv.len == n_cached and
 * kv.reserved == 0; cached[0..n_cached) are the tokens whose K/V the mirror
 * holds at positions 0..n_cached-1.
 *
 * A propose call: prepare (sync each mirror to the common prefix, reserve
 * the positions it will write), pass 1 (the missing context of every item),
 * passes 2..k (one draft token per item), finish (commit what was written,
 * record cached, publish q). The last draft token's K/V is never computed. */
#include "draft.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "json_mask.h"
#include "mem_plan.h"
#include "model_config.h"
#include "sampler.h"
#include "tokenizer.h"
#include "verify.h"
#include "vecmath.h"

typedef struct draft_seq {
    uint64_t id;
    uint32_t branch; /* sd_propose_item.branch: several mirrors of one sequence */
    bool live;
    uint64_t stamp;  /* call in which an item last used it (duplicate guard) */
    sd_kv_seq kv;    /* the KV mirror */
    int32_t *cached; /* [cap] tokens whose K/V the mirror holds */
    int n_cached;
    int n_registered; /* its full blocks registered in the pool's prefix cache */
    size_t cap;
} draft_seq;

/* Per-item state of one propose call. */
typedef struct item_state {
    int seq;    /* index into seqs */
    int common; /* mirror prefix kept; context[common..] is fed */
    int kk;     /* drafts wanted after clamping */
    bool active;
    bool sampled;              /* draw from q instead of argmax */
    size_t qoff[SD_MAX_DRAFT]; /* q of draft t: arena[qoff[t] .. +nq[t]) */
} item_state;

typedef struct draft_impl {
    sd_model *m;
    sd_backend *be;
    bool own_be;
    int vocab;  /* model vocab (logits row length) */
    int vlimit; /* ids drafted are < vlimit */
    int max_pos;
    float p_min;       /* stop drafting an item after a token of probability < p_min */
    bool prefix_cache; /* mirrors register and take cached KV blocks */
    int32_t *match;    /* sd_kv_cache_match scratch */
    size_t cap_match;
    draft_seq *seqs;
    int n_seqs;
    size_t cap_seqs;
    uint64_t stamp;
    item_state *st;      /* [cap_items] */
    sd_batch_seq *batch; /* [cap_items] */
    int *rows;           /* [cap_items] item of each batch row */
    float *logits;       /* [cap_logits, vocab] (sd_model_logits_grow) */
    size_t cap_items, cap_logits;
    sd_sampler *sp;
    sd_tokprob *dist;  /* [vocab] scratch distribution */
    sd_tokprob *arena; /* q entries of the last call */
    size_t arena_len;
    size_t arena_cap;
    int32_t *out; /* JSON output: an item's output so far, then its drafts (json_constrain) */
    size_t cap_out;
} draft_impl;

static const sd_proposer_ops draft_ops;

int sd_draft_quant_parse(const char *s)
{
    if (!s) return -1;
    if (!strcmp(s, "auto")) return SD_DRAFT_QUANT_AUTO;
    if (!strcmp(s, "int8")) return SD_DRAFT_QUANT_INT8;
    if (!strcmp(s, "none")) return SD_DRAFT_QUANT_NONE;
    return -1;
}

sd_draft_opts sd_draft_opts_default(void)
{
    sd_draft_opts o = {.be = NULL,
                       .n_threads = 0,
                       .max_seqs = 16,
                       .max_context = 0,
                       .block_size = 16,
                       .vocab_limit = 0,
                       .quant = SD_DRAFT_QUANT_AUTO,
                       .p_min = SD_DRAFT_P_MIN_DEFAULT};
    return o;
}

/* ---- sequence table ------------------------------------------------------ */

/* Index of the state of (seq_id, branch), created when absent; -1 on
 * allocation failure. */
static int seq_get(draft_impl *d, uint64_t id, uint32_t branch, bool create)
{
    int free_slot = -1;
    for (int i = 0; i < d->n_seqs; i++) {
        if (d->seqs[i].live && d->seqs[i].id == id && d->seqs[i].branch == branch) return i;
        if (!d->seqs[i].live && free_slot < 0) free_slot = i;
    }
    if (!create) return -1;
    if (free_slot < 0) {
        if (sd_grow(&d->seqs, &d->cap_seqs, (size_t)d->n_seqs + 1, sizeof *d->seqs) != SD_OK) return -1;
        free_slot = d->n_seqs++;
        memset(&d->seqs[free_slot], 0, sizeof d->seqs[free_slot]);
        sd_kv_seq_init(&d->seqs[free_slot].kv);
    }
    draft_seq *s = &d->seqs[free_slot];
    s->id = id;
    s->branch = branch;
    s->live = true;
    s->n_cached = 0;
    s->n_registered = 0;
    s->stamp = 0;
    return free_slot;
}

static bool seq_fit(draft_seq *s, int n) { return sd_grow(&s->cached, &s->cap, (size_t)n, sizeof *s->cached) == SD_OK; }

/* Rolls s's mirror back to its first len positions (fewer when the block
 * len falls in is shared: see sd_kv_truncate). */
static void seq_truncate(draft_impl *d, draft_seq *s, int len)
{
    sd_kv_pool *pool = sd_model_kv_pool(d->m);
    sd_kv_truncate(pool, &s->kv, len);
    if (s->n_cached > s->kv.len) s->n_cached = s->kv.len;
    int full = s->kv.len / sd_kv_pool_block_size(pool);
    if (s->n_registered > full) s->n_registered = full;
}

/* A new mirror takes the cached KV of the longest prefix of context (all
 * but its last token, which the first pass feeds); returns the positions. */
static int seq_take_cached(draft_impl *d, draft_seq *s, const int32_t *context, int nc)
{
    sd_kv_pool *pool = sd_model_kv_pool(d->m);
    int bs = sd_kv_pool_block_size(pool), max = (nc - 1) / bs;
    if (!d->prefix_cache || s->kv.n_blocks != 0 || max <= 0 ||
        sd_grow(&d->match, &d->cap_match, (size_t)max, sizeof *d->match) != SD_OK)
        return 0;
    int n = sd_kv_cache_match(pool, context, max, d->match);
    if (n <= 0 || sd_kv_seq_take(pool, &s->kv, d->match, n) != SD_OK) return 0;
    memcpy(s->cached, context, (size_t)s->kv.len * sizeof *context);
    s->n_cached = s->kv.len;
    s->n_registered = n;
    return s->kv.len;
}

/* Registers s's full committed blocks whose tokens it knows. */
static void seq_register(draft_impl *d, draft_seq *s)
{
    if (!d->prefix_cache) return;
    sd_kv_pool *pool = sd_model_kv_pool(d->m);
    int bs = sd_kv_pool_block_size(pool);
    int known = s->kv.len < s->n_cached ? s->kv.len : s->n_cached;
    for (; s->n_registered < known / bs; s->n_registered++)
        sd_kv_cache_register(pool, &s->kv, s->n_registered, s->cached + (size_t)s->n_registered * (size_t)bs);
}

/* ---- per-call buffers ------------------------------------------------------ */

static bool fit_items(draft_impl *d, int n)
{
    const sd_grow_item per_item[] = {SD_GROW_ITEM(d->st), SD_GROW_ITEM(d->batch), SD_GROW_ITEM(d->rows)};
    return sd_grow_all(per_item, 3, &d->cap_items, (size_t)n) == SD_OK &&
           sd_model_logits_grow(d->m, &d->logits, &d->cap_logits, (size_t)n) == SD_OK;
}

/* Appends nq entries to the q arena; returns their offset or SIZE_MAX. */
static size_t arena_push(draft_impl *d, const sd_tokprob *e, size_t nq)
{
    if (sd_grow(&d->arena, &d->arena_cap, d->arena_len + nq, sizeof *d->arena) != SD_OK) return SIZE_MAX;
    size_t off = d->arena_len;
    memcpy(d->arena + off, e, nq * sizeof *e);
    d->arena_len += nq;
    return off;
}

/* ---- propose ------------------------------------------------------------- */

/* Syncs item i's mirror with its context and reserves the positions this
 * call writes. Leaves st->active false when the item gets no draft. */
static void prepare_item(draft_impl *d, const sd_propose_item *it, item_state *st)
{
    st->active = false;
    int nc = it->n_context;
    int kk = it->k < SD_MAX_DRAFT ? it->k : SD_MAX_DRAFT;
    if (kk <= 0 || nc < 1 || !it->context || nc > d->max_pos) return;
    if (kk > d->max_pos - nc + 1) kk = d->max_pos - nc + 1;
    int si = seq_get(d, it->seq_id, it->branch, true);
    if (si < 0) return;
    draft_seq *s = &d->seqs[si];
    if (s->stamp == d->stamp) return; /* the same seq_id twice in one batch */
    s->stamp = d->stamp;
    for (int t = 0; t < nc; t++)
        if (it->context[t] < 0 || it->context[t] >= d->vocab) return;
    if (!seq_fit(s, nc + kk)) return;
    int common = s->n_cached == 0 ? seq_take_cached(d, s, it->context, nc) : 0;
    while (common < s->n_cached && common < nc - 1 && s->cached[common] == it->context[common]) common++;
    seq_truncate(d, s, common);
    common = s->n_cached < common ? s->n_cached : common;
    if (sd_kv_reserve(sd_model_kv_pool(d->m), &s->kv, nc - common + kk - 1) != SD_OK) return;
    st->seq = si;
    st->common = common;
    st->kk = kk;
    st->sampled = it->want_q && it->sampling && it->sampling->temperature > 0;
    st->active = true;
}

/* The best token of row[0..n) other than first (-1 when there is none). */
static int32_t second_choice(float *row, int n, int32_t first)
{
    float keep = row[first];
    row[first] = -INFINITY;
    int32_t alt = sd_argmax_f32(row, n);
    row[first] = keep;
    return alt >= 0 && row[alt] > -INFINITY ? alt : -1;
}

/* JSON or regex output (response_format json_object / json_schema,
 * structured_outputs regex / choice): the draft row masked as the verifier
 * masks the target's (sd_sampling_constrain), so drafts keep to the text the
 * target must write — keys, punctuation, enum values are then drafted
 * right. The verifier stays exact whatever is drafted; q is drawn from the
 * masked row. The output so far: the context's last out_pos tokens,
 * then the drafts before t. */
static void json_constrain(draft_impl *d, const sd_propose_item *it, const sd_proposal *o, int t, float *row)
{
    const sd_sampling *s = it->sampling;
    if (!sd_sampling_constrained(s) || it->out_pos > (uint64_t)it->n_context) return;
    size_t n_out = (size_t)it->out_pos;
    if (sd_grow(&d->out, &d->cap_out, n_out + SD_MAX_DRAFT, sizeof *d->out) != SD_OK) return;
    memcpy(d->out, it->context + (it->n_context - (int)n_out), n_out * sizeof *d->out);
    memcpy(d->out + n_out, o->tokens, (size_t)t * sizeof *d->out);
    sd_sampling_constrain(s, d->out, n_out + (size_t)t, row, d->vlimit);
}

/* Chooses draft token t of item it from its logits row; records its q.
 * Returns false when no token can be drawn (or q cannot be stored). */
static bool pick_token(draft_impl *d, const sd_propose_item *it, item_state *st, float *row, int t, sd_proposal *o)
{
    json_constrain(d, it, o, t, row);
    int32_t tok;
    size_t nq = 1;
    const sd_tokprob *q = NULL;
    if (st->sampled) {
        /* The drafter samples from (and reports) at most SD_DRAFT_Q_CAP of its
         * most likely tokens, renormalised: rejection sampling is exact for
         * any q as long as the draft is drawn from the q sent, and a short q
         * keeps the message to the verifier small. */
        nq = sd_sampler_distribution(d->sp, it->sampling, row, d->vlimit, d->dist, SD_DRAFT_Q_CAP);
        if (nq == 0) return false;
        double u = sd_rng_uniform(it->sampling->seed, it->out_pos + (uint64_t)t, SD_RNG_STREAM_DRAFT);
        tok = sd_sample_sparse(d->dist, nq, u);
        q = d->dist;
    } else {
        tok = sd_argmax(row, d->vlimit);
    }
    if (tok < 0) return false;
    o->alt[t] = -1;
    if (d->p_min > 0.0f || it->want_alt) {
        float p = st->sampled ? sd_sparse_prob(q, nq, tok) : 1.0f / sd_exp_sum(row, d->vlimit, row[tok]);
        o->p[t] = p;
        if (it->want_alt && !st->sampled) {
            o->alt[t] = second_choice(row, d->vlimit, tok);
            o->alt_p[t] = o->alt[t] >= 0 ? p * expf(row[o->alt[t]] - row[tok]) : 0.0f;
        }
        /* stop drafting this item after a token the drafter itself doubts (a guess of a token
         * the verifier decodes anyway is no draft: the drafts after it serve when it is right) */
        if (d->p_min > 0.0f && p < d->p_min && t >= it->n_guess) st->kk = t + 1;
    }
    if (it->want_q) {
        sd_tokprob one = {tok, 1.0f};
        size_t off = arena_push(d, q ? q : &one, nq);
        if (off == SIZE_MAX) return false;
        st->qoff[t] = off;
        o->nq[t] = nq;
    }
    o->tokens[t] = tok;
    o->n = t + 1;
    return true;
}

/* Runs draft pass t (0 = the context pass) over every item still drafting. */
static sd_status run_pass(draft_impl *d, const sd_propose_item *items, int n, sd_proposal *out, int t, char *err,
                          size_t errlen)
{
    int nb = 0;
    for (int i = 0; i < n; i++) {
        item_state *st = &d->st[i];
        if (!st->active || st->kk <= t || out[i].n != t) continue;
        const sd_propose_item *it = &items[i];
        sd_batch_seq *b = &d->batch[nb];
        if (t == 0) {
            b->tokens = it->context + st->common;
            b->n = it->n_context - st->common;
            b->pos0 = st->common;
        } else {
            b->tokens = &out[i].tokens[t - 1];
            b->n = 1;
            b->pos0 = it->n_context + t - 1;
        }
        b->kv = &d->seqs[st->seq].kv;
        b->n_logits = 1;
        b->argmax = NULL; /* the drafter needs the rows' distributions */
        b->draw = NULL;
        b->drawn = NULL;
        d->rows[nb++] = i;
    }
    if (nb == 0) return SD_OK;
    sd_status rc = sd_model_forward(d->m, d->batch, nb, d->logits, err, errlen);
    if (rc != SD_OK) return rc;
    for (int r = 0; r < nb; r++) {
        int i = d->rows[r];
        pick_token(d, &items[i], &d->st[i], d->logits + (size_t)r * (size_t)d->vocab, t, &out[i]);
    }
    return SD_OK;
}

/* Commits what each item wrote, records its cached tokens, publishes q.
 * On failure (rc != SD_OK) every item is rolled back to its common prefix. */
static void finish_items(draft_impl *d, const sd_propose_item *items, int n, sd_proposal *out, sd_status rc)
{
    sd_kv_pool *pool = sd_model_kv_pool(d->m);
    for (int i = 0; i < n; i++) {
        item_state *st = &d->st[i];
        if (!st->active) continue;
        draft_seq *s = &d->seqs[st->seq];
        if (rc != SD_OK || out[i].n == 0) {
            out[i].n = 0;
            seq_truncate(d, s, st->common);
            continue;
        }
        const sd_propose_item *it = &items[i];
        int nc = it->n_context;
        sd_kv_commit(pool, &s->kv, nc - st->common + out[i].n - 1);
        memcpy(s->cached + st->common, it->context + st->common, (size_t)(nc - st->common) * sizeof(int32_t));
        memcpy(s->cached + nc, out[i].tokens, (size_t)(out[i].n - 1) * sizeof(int32_t));
        s->n_cached = nc + out[i].n - 1;
        seq_register(d, s);
        if (!it->want_q) continue;
        for (int t = 0; t < out[i].n; t++) out[i].q[t] = d->arena + st->qoff[t];
    }
}

static sd_status draft_propose(sd_proposer *p, const sd_propose_item *items, int n, sd_proposal *out, char *err,
                               size_t errlen)
{
    draft_impl *d = p->impl;
    for (int i = 0; i < n; i++) memset(&out[i], 0, sizeof out[i]);
    if (n <= 0) return SD_OK;
    if (!fit_items(d, n)) return sd_seterr(err, errlen, SD_ERR_NOMEM, "draft: out of memory for %d items", n);
    d->stamp++;
    d->arena_len = 0;
    int kmax = 0;
    for (int i = 0; i < n; i++) {
        prepare_item(d, &items[i], &d->st[i]);
        if (d->st[i].active && d->st[i].kk > kmax) kmax = d->st[i].kk;
    }
    sd_status rc = SD_OK;
    for (int t = 0; t < kmax && rc == SD_OK; t++) rc = run_pass(d, items, n, out, t, err, errlen);
    finish_items(d, items, n, out, rc);
    return rc;
}

static void draft_release(sd_proposer *p, uint64_t seq_id)
{
    draft_impl *d = p->impl;
    for (int i = 0; i < d->n_seqs; i++) {
        draft_seq *s = &d->seqs[i];
        if (!s->live || s->id != seq_id) continue;
        sd_kv_seq_release(sd_model_kv_pool(d->m), &s->kv);
        s->live = false;
        s->n_cached = 0;
        s->n_registered = 0;
    }
}

static void draft_destroy(sd_proposer *p)
{
    draft_impl *d = p->impl;
    if (d) {
        for (int i = 0; i < d->n_seqs; i++) {
            if (d->m) sd_kv_seq_release(sd_model_kv_pool(d->m), &d->seqs[i].kv);
            free(d->seqs[i].cached);
        }
        free(d->seqs);
        free(d->st);
        free(d->batch);
        free(d->rows);
        if (d->m) sd_model_logits_free(d->m, d->logits);
        free(d->dist);
        free(d->arena);
        free(d->match);
        free(d->out);
        sd_sampler_free(d->sp);
        sd_model_free(d->m);
        if (d->own_be) sd_backend_free(d->be);
        free(d);
    }
    free(p);
}

static const sd_proposer_ops draft_ops = {
    .name = "draft",
    .propose = draft_propose,
    .release = draft_release,
    .destroy = draft_destroy,
};

/* ---- construction ---------------------------------------------------------- */

/* Loads the model and sizes its pool; d->be is set. */
static sd_status draft_load(draft_impl *d, const char *dir, const sd_draft_opts *o, char *err, size_t errlen)
{
    char cfg_path[4096];
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    sd_status rc = o->random_weights ? sd_model_random(cfg_path, 2, d->be, &d->m, err, errlen)
                                     : sd_model_load(dir, d->be, &d->m, err, errlen);
    if (rc == SD_OK &&
        (o->quant == SD_DRAFT_QUANT_INT8 || (o->quant == SD_DRAFT_QUANT_AUTO && d->be->ops->quantize_q8)))
        rc = sd_model_quantize_q8(d->m, err, errlen);
    if (rc != SD_OK) return rc;
    const sd_model_config *cfg = sd_model_cfg(d->m);
    d->vocab = cfg->vocab_size;
    d->max_pos = cfg->max_position;
    d->vlimit = o->vocab_limit > 0 && o->vocab_limit < d->vocab ? o->vocab_limit : d->vocab;
    d->p_min = o->p_min;
    d->prefix_cache = !o->no_prefix_cache;
    int max_ctx = o->max_context > 0 ? o->max_context : (d->max_pos < 4096 ? d->max_pos : 4096);
    long per_seq = (max_ctx + SD_MAX_DRAFT + 1 + o->block_size - 1) / o->block_size;
    long blocks = per_seq * o->max_seqs;
    sd_model_set_kv_dtype(d->m, (sd_kv_dtype)o->kv_dtype);
    if (o->mem_fraction > 0) { /* the largest pass: a mirror's whole context, every sequence's next token */
        char how[320];
        rc = sd_mem_kv_blocks(d->m, o->mem_fraction, o->mem_free_at_start, max_ctx + o->max_seqs, o->max_seqs,
                              o->block_size, per_seq, blocks, &blocks, how, sizeof how, err, errlen);
        if (rc != SD_OK && rc != SD_ERR_UNSUPPORTED) return rc;
    }
    if (blocks > 0x7fffffffL)
        return sd_seterr(err, errlen, SD_ERR_ARG, "draft: KV pool of %ld blocks is too big", blocks);
    rc = sd_model_kv_init(d->m, (int)blocks, o->block_size, err, errlen);
    if (rc != SD_OK) return rc;
    rc = sd_sampler_new(d->vocab, &d->sp, err, errlen);
    if (rc != SD_OK) return rc;
    d->dist = malloc((size_t)d->vocab * sizeof *d->dist);
    if (!d->dist) return sd_seterr(err, errlen, SD_ERR_NOMEM, "draft: out of memory");
    return SD_OK;
}

sd_status sd_draft_new(const char *model_dir, const sd_draft_opts *opts, sd_proposer **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_draft_opts o = opts ? *opts : sd_draft_opts_default();
    if (o.max_seqs <= 0 || o.block_size <= 0 || o.max_context < 0 || o.n_threads < 0 || o.quant < 0 ||
        o.quant > SD_DRAFT_QUANT_NONE || !(o.p_min >= 0.0f && o.p_min <= 1.0f) || o.kv_dtype < SD_KV_AUTO ||
        o.kv_dtype > SD_KV_BF16 || !(o.mem_fraction >= 0 && o.mem_fraction <= 1))
        return sd_seterr(err, errlen, SD_ERR_ARG,
                         "draft: bad options (max_seqs %d, block_size %d, max_context %d, n_threads %d, quant %d, "
                         "p_min %g, kv_dtype %d, mem_fraction %g)",
                         o.max_seqs, o.block_size, o.max_context, o.n_threads, o.quant, (double)o.p_min, o.kv_dtype,
                         o.mem_fraction);
    sd_proposer *p = calloc(1, sizeof *p);
    draft_impl *d = calloc(1, sizeof *d);
    if (!p || !d) {
        free(p);
        free(d);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "draft: out of memory");
    }
    p->ops = &draft_ops;
    p->impl = d;
    d->be = o.be;
    sd_status rc = SD_OK;
    if (!d->be) {
        rc = sd_backend_cpu_new(o.n_threads, &d->be, err, errlen);
        d->own_be = true;
    }
    if (rc == SD_OK) rc = draft_load(d, model_dir, &o, err, errlen);
    if (rc != SD_OK) {
        draft_destroy(p);
        return rc;
    }
    *out = p;
    return SD_OK;
}

const sd_model *sd_draft_model(const sd_proposer *p)
{
    if (!p || p->ops != &draft_ops) return NULL;
    return ((const draft_impl *)p->impl)->m;
}

/* Sequences, context and rounds of the warm-up (see draft.h). */
#define WARM_SEQS 4
#define WARM_CONTEXT 24
#define WARM_ROUNDS 3

sd_status sd_draft_warm_up(sd_proposer *p, int *passes, char *err, size_t errlen)
{
    if (!p || p->ops != &draft_ops) return sd_seterr(err, errlen, SD_ERR_ARG, "draft: warm-up of no draft model");
    draft_impl *d = p->impl;
    int32_t ctx[WARM_SEQS][WARM_CONTEXT];
    sd_propose_item items[WARM_SEQS];
    sd_proposal out[WARM_SEQS];
    int most = WARM_SEQS, n_passes = 0; /* released before returning */
    sd_status rc = SD_OK;
    for (int i = 0; i < most; i++) {
        for (int j = 0; j < WARM_CONTEXT; j++) ctx[i][j] = 1 + (31 * j + 7 * i) % (d->vlimit > 1 ? d->vlimit - 1 : 1);
        items[i] = (sd_propose_item){
            .seq_id = UINT64_MAX - (uint64_t)i, .context = ctx[i], .n_context = WARM_CONTEXT, .k = 4, .want_alt = true};
    }
    /* batches of 1 .. most sequences, each WARM_ROUNDS times: prefill, then the same batch shapes again */
    for (int n = 1; n <= most && rc == SD_OK; n *= 2)
        for (int r = 0; r < WARM_ROUNDS && rc == SD_OK; r++, n_passes += items[0].k) /* a pass a draft */
            rc = draft_propose(p, items, n, out, err, errlen);
    for (int i = 0; i < most; i++) draft_release(p, items[i].seq_id);
    if (passes) *passes = n_passes;
    return rc;
}

/* ---- tokenizer compatibility ---------------------------------------------- */

static sd_status load_tok(const char *dir, sd_tok **tok, char *err, size_t errlen)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    return sd_tok_load(path, tok, err, errlen);
}

sd_status sd_draft_check_tokenizer(const char *target_dir, const char *draft_dir, char *err, size_t errlen)
{
    sd_tok *tt = NULL, *dt = NULL;
    sd_model_config tc, dc;
    sd_status rc = load_tok(target_dir, &tt, err, errlen);
    if (rc == SD_OK) rc = load_tok(draft_dir, &dt, err, errlen);
    if (rc == SD_OK) rc = sd_config_load_dir(target_dir, &tc, err, errlen);
    if (rc == SD_OK) rc = sd_config_load_dir(draft_dir, &dc, err, errlen);
    if (rc == SD_OK && sd_tok_fingerprint(tt) != sd_tok_fingerprint(dt))
        rc = sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                       "drafter tokenizer (%s) differs from the target's (%s): speculative decoding needs "
                       "the same vocabulary",
                       draft_dir, target_dir);
    if (rc == SD_OK) {
        int need = sd_tok_vocab_size(tt);
        if (dc.vocab_size < need || tc.vocab_size < need)
            rc = sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                           "vocab_size of the drafter (%d, %s) and the target (%d, %s) must cover all %d "
                           "tokenizer ids",
                           dc.vocab_size, draft_dir, tc.vocab_size, target_dir, need);
    }
    sd_tok_free(tt);
    sd_tok_free(dt);
    return rc;
}
