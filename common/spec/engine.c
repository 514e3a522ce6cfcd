/* engine.c — batched verify step, accept, commit / rollback (see engine.h). */
#include "engine.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "backend.h"
#include "clock.h"
#include "log.h"
#include "json_schema.h"
#include "regex_mask.h"

/* A request's rows verified ahead of its commit (sd_engine_step's parallel phase). */
typedef struct verified {
    int c; /* sd_verify's answer (0: not verified ahead) */
    int32_t out[SD_MAX_DRAFT + 1];
} verified;

struct sd_engine {
    sd_model *m;
    sd_engine_opts opts;
    const sd_json_vocab *json; /* the token table of JSON output (sd_engine_set_json_vocab), or NULL */
    sd_verifier *ver;
    sd_verifier **vers; /* one per host thread of the backend (vers[0] = ver) */
    int n_vers;
    float *logits; /* [cap_rows, vocab] */
    size_t cap_rows;
    sd_batch_seq *batch; /* per step */
    int *slot;           /* batch index -> request index */
    int *span_k;         /* drafts used per request this step (-1: not in batch) */
    int *chunk;          /* prompt tokens per request this step */
    size_t cap;          /* entries of batch, slot, span_k, chunk and spans */
    int32_t *spans;      /* [cap][SD_MAX_DRAFT + 1] decode spans */
    int32_t *amax;       /* [cap][SD_MAX_DRAFT + 1] the rows' argmax of greedy requests (tokens alone
                             * serve them: their logits stay on the device) */
    sd_draw_row *draw;   /* [cap][SD_MAX_DRAFT + 1] the rows' draws of sampled requests on the device */
    sd_draw_out *drawn;  /* [cap][SD_MAX_DRAFT + 1] ... their results (the logits stay there) */
    bool draw_on;        /* sampled rows drawn on the backend (draw_rows; default where it is not the CPU) */
    bool drew;           /* ... and some were (logged once) */
    uint32_t *masks;     /* [cap_masks] the drawn rows' token masks this step */
    size_t n_masks, cap_masks;
    size_t *moff;         /* [cap][SD_MAX_DRAFT + 1] where a drawn row's mask starts in masks (SIZE_MAX: none) */
    size_t *eoff;         /* [cap][SD_MAX_DRAFT + 1] where a drawn row's edits start in edits */
    sd_logit_edit *edits; /* [cap_edits] the drawn rows' logits processors this step */
    size_t n_edits, cap_edits;
    int32_t *hist; /* [cap_hist] a request's output and drafts (its rows' penalty history) */
    size_t cap_hist;
    sd_sampler *esp; /* builds the edits (created with the first) */
    float *raw;      /* [SD_MAX_DRAFT + 1, vocab]: a span's logits before verification (logprobs) */
    float **rowp;    /* per batch entry: its logits rows */
    verified *pre;   /* per batch entry: verified ahead */
    int32_t *match;  /* prefix cache matches (sd_kv_cache_match) */
    size_t cap_match;
    sd_step_timing timing;                /* of the last step */
    uint64_t prefix_queries, prefix_hits; /* sd_engine_prefix_stats */
};

sd_status sd_engine_new(sd_model *m, const sd_engine_opts *opts, sd_engine **out, char *err, size_t errlen)
{
    *out = NULL;
    sd_engine *e = calloc(1, sizeof *e);
    if (!e) return sd_seterr(err, errlen, SD_ERR_NOMEM, "engine: out of memory");
    e->m = m;
    e->opts.prefill_chunk = opts && opts->prefill_chunk > 0 ? opts->prefill_chunk : 256;
    e->opts.prefill_budget = opts && opts->prefill_budget > 0 ? opts->prefill_budget : 512;
    e->opts.no_prefix_sharing = opts && opts->no_prefix_sharing;
    sd_backend *be = sd_model_backend(m);
    const char *dr = getenv("SD_DRAW_ROWS"); /* 1 / 0: on / off whatever the backend (tests, A/B) */
    e->draw_on = be->ops->draw_rows && (dr && *dr ? strcmp(dr, "0") != 0 : sd_backend_cpu_threads(be) == 0);
    int nt = sd_backend_host_threads(sd_model_backend(m));
    e->vers = calloc((size_t)nt, sizeof *e->vers);
    sd_status st = e->vers ? SD_OK : sd_seterr(err, errlen, SD_ERR_NOMEM, "engine: out of memory");
    for (int i = 0; st == SD_OK && i < nt; i++)
        st = sd_verifier_new(sd_model_cfg(m)->vocab_size, &e->vers[i], err, errlen);
    if (st != SD_OK) {
        for (int i = 0; e->vers && i < nt; i++) sd_verifier_free(e->vers[i]);
        free(e->vers);
        free(e);
        return st;
    }
    e->n_vers = nt;
    e->ver = e->vers[0];
    *out = e;
    return SD_OK;
}

void sd_engine_free(sd_engine *e)
{
    if (!e) return;
    for (int i = 0; i < e->n_vers; i++) sd_verifier_free(e->vers[i]);
    free(e->vers);
    free(e->rowp);
    free(e->pre);
    sd_model_logits_free(e->m, e->logits);
    free(e->batch);
    free(e->slot);
    free(e->span_k);
    free(e->chunk);
    free(e->spans);
    free(e->amax);
    free(e->draw);
    free(e->drawn);
    free(e->masks);
    free(e->moff);
    free(e->eoff);
    free(e->edits);
    free(e->hist);
    sd_sampler_free(e->esp);
    free(e->raw);
    free(e->match);
    free(e);
}

sd_model *sd_engine_model(const sd_engine *e) { return e->m; }

const sd_step_timing *sd_engine_last_timing(const sd_engine *e) { return &e->timing; }

void sd_engine_set_json_vocab(sd_engine *e, const sd_json_vocab *v) { e->json = v; }

sd_req_params sd_req_params_default(void)
{
    sd_req_params p;
    memset(&p, 0, sizeof p);
    p.sampling = sd_sampling_default();
    p.max_tokens = 256;
    p.verify = SD_VERIFY_AUTO;
    return p;
}

/* A request's memory (not its KV); NULL is a no-op. */
static void req_mem_free(sd_req *r)
{
    if (!r) return;
    free(r->tokens);
    free(r->lp);
    free(r->prompt_lp);
    free(r->procs);
    sd_json_schema_free(r->schema);
    free(r->schema_text);
    sd_regex_free(r->rx);
    free(r);
}

/* Token ids of a processor list within the vocabulary. */
static sd_status check_vocab_ids(const char *what, const int32_t *ids, uint32_t n, int vocab, char *err, size_t errlen)
{
    for (uint32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return sd_seterr(err, errlen, SD_ERR_ARG, "%s token id %d is out of range [0, %d)", what, (int)ids[i],
                             vocab);
    return SD_OK;
}

/* The request's own copies of its logits processors' lists (the caller's
 * settings borrow them), ids checked against the vocabulary, and the tokens
 * min_tokens holds back: EOS (unless ignore_eos) and the stop ids. */
static sd_status own_processors(const sd_engine *e, const sd_model_config *c, sd_req *r, char *err, size_t errlen)
{
    sd_sampling *s = &r->p.sampling;
    bool json = s->json_object || s->json_schema || s->regex;
    s->json_vocab = json ? e->json : NULL;
    if (json && !e->json)
        return sd_seterr(err, errlen, SD_ERR_ARG,
                         "%s output needs the model's tokenizer.json, which this server did "
                         "not load",
                         s->regex ? "regular-expression" : "JSON (response_format json_object / json_schema)");
    if (s->json_schema && !(r->schema_text = strdup(s->json_schema)))
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    /* the texts were borrowed: the compiled expression and schema stand for them */
    sd_status st = sd_sampling_compile(s, &r->rx, &r->schema, err, errlen);
    if (st != SD_OK) return st;
    st = check_vocab_ids("logit_bias", s->bias_ids, s->n_bias, c->vocab_size, err, errlen);
    if (st == SD_OK) st = check_vocab_ids("allowed_token_ids", s->allowed, s->n_allowed, c->vocab_size, err, errlen);
    if (st != SD_OK) return st;
    uint32_t n_ban = s->min_tokens > 0 ? (uint32_t)(r->p.ignore_eos ? 0 : c->n_eos) + (uint32_t)r->p.n_stop : 0;
    size_t n = 2 * (size_t)s->n_bias + s->n_allowed + n_ban;
    if (n == 0) {
        s->bias_ids = s->allowed = s->early_ban = NULL;
        s->bias_values = NULL;
        s->n_early_ban = 0;
        return SD_OK;
    }
    int32_t *block = r->procs = malloc(n * sizeof *block);
    if (!block) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    float *values = (float *)(void *)(block + s->n_bias);
    if (s->n_bias) {
        memcpy(block, s->bias_ids, s->n_bias * sizeof *block);
        memcpy(values, s->bias_values, s->n_bias * sizeof *values);
    }
    int32_t *allowed = block + 2 * (size_t)s->n_bias, *ban = allowed + s->n_allowed;
    if (s->n_allowed) memcpy(allowed, s->allowed, s->n_allowed * sizeof *allowed);
    uint32_t k = 0;
    for (int i = 0; n_ban && !r->p.ignore_eos && i < c->n_eos; i++) ban[k++] = c->eos_token_ids[i];
    for (int i = 0; n_ban && i < r->p.n_stop; i++) ban[k++] = r->p.stop_ids[i];
    s->bias_ids = s->n_bias ? block : NULL;
    s->bias_values = s->n_bias ? values : NULL;
    s->allowed = s->n_allowed ? allowed : NULL;
    s->early_ban = k ? ban : NULL;
    s->n_early_ban = k;
    return SD_OK;
}

sd_status sd_req_new(const sd_engine *e, uint64_t id, const int32_t *prompt, int n_prompt, const sd_req_params *p,
                     sd_req **out, char *err, size_t errlen)
{
    const sd_model_config *c = sd_model_cfg(e->m);
    *out = NULL;
    if (n_prompt < 1) return sd_seterr(err, errlen, SD_ERR_ARG, "the prompt is empty");
    if (n_prompt + 1 > c->max_position)
        return sd_seterr(err, errlen, SD_ERR_ARG, "prompt of %d tokens does not fit the context of %d", n_prompt,
                         c->max_position);
    if (p->max_tokens < 1) return sd_seterr(err, errlen, SD_ERR_ARG, "max_tokens must be at least 1");
    if (p->num_draft < 0 || p->num_draft > SD_MAX_DRAFT)
        return sd_seterr(err, errlen, SD_ERR_ARG, "num_draft must be in [0, %d]", SD_MAX_DRAFT);
    if (p->n_stop < 0 || p->n_stop > SD_MAX_STOP_IDS)
        return sd_seterr(err, errlen, SD_ERR_ARG, "at most %d stop ids", SD_MAX_STOP_IDS);
    if (p->verify < SD_VERIFY_AUTO || p->verify > SD_VERIFY_REJECTION)
        return sd_seterr(err, errlen, SD_ERR_ARG, "unknown verify mode %d", p->verify);
    if (p->top_logprobs < 0 || p->top_logprobs > SD_MAX_LOGPROBS)
        return sd_seterr(err, errlen, SD_ERR_ARG, "top_logprobs must be in [0, %d]", SD_MAX_LOGPROBS);
    sd_status st = sd_sampling_validate(&p->sampling, err, errlen);
    if (st != SD_OK) return st;
    for (int i = 0; i < n_prompt; i++)
        if (prompt[i] < 0 || prompt[i] >= c->vocab_size)
            return sd_seterr(err, errlen, SD_ERR_ARG, "prompt token %d (id %d) is out of range [0, %d)", i, prompt[i],
                             c->vocab_size);
    sd_req *r = calloc(1, sizeof *r);
    long cap = (long)n_prompt + p->max_tokens;
    if (cap > (long)c->max_position + 1) cap = (long)c->max_position + 1;
    if (r) r->tokens = malloc((size_t)cap * sizeof(int32_t));
    if (r && p->logprobs) r->lp = malloc((SD_MAX_DRAFT + 1) * sizeof *r->lp);
    if (r && p->prompt_logprobs) r->prompt_lp = calloc((size_t)n_prompt, sizeof *r->prompt_lp);
    if (!r || !r->tokens || (p->logprobs && !r->lp) || (p->prompt_logprobs && !r->prompt_lp)) {
        req_mem_free(r);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    }
    memcpy(r->tokens, prompt, (size_t)n_prompt * sizeof(int32_t));
    r->id = id;
    r->n_prompt = r->n_tokens = r->prefill_to = n_prompt;
    r->p = *p;
    sd_kv_seq_init(&r->kv);
    st = own_processors(e, c, r, err, errlen);
    if (st != SD_OK) {
        req_mem_free(r); /* no KV yet */
        return st;
    }
    *out = r;
    return SD_OK;
}

void sd_req_free(sd_engine *e, sd_req *r)
{
    if (!r) return;
    sd_kv_seq_release(sd_model_kv_pool(e->m), &r->kv);
    req_mem_free(r);
}

void sd_req_cancel(sd_engine *e, sd_req *r)
{
    if (r->finish == SD_FINISH_NONE) r->finish = SD_FINISH_CANCELLED;
    sd_kv_seq_release(sd_model_kv_pool(e->m), &r->kv);
}

bool sd_engine_can_admit(const sd_engine *e, const sd_req *r)
{
    return sd_kv_can_admit(sd_model_kv_pool(e->m), r->n_tokens + 1);
}

static int req_capacity(const sd_engine *e, const sd_req *r);

sd_status sd_req_resume(const sd_engine *e, sd_req *r, const int32_t *ids, int n, char *err, size_t errlen)
{
    if (n <= 0) return SD_OK;
    if (r->n_tokens != r->n_prompt || r->n_prefilled != 0)
        return sd_seterr(err, errlen, SD_ERR_ARG, "resume: the request already ran");
    if (n >= r->p.max_tokens || r->n_prompt + n + 1 > req_capacity(e, r))
        return sd_seterr(err, errlen, SD_ERR_ARG, "resume: %d tokens leave nothing to produce (max_tokens %d)", n,
                         r->p.max_tokens);
    int vocab = sd_model_cfg(e->m)->vocab_size;
    for (int i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= vocab)
            return sd_seterr(err, errlen, SD_ERR_ARG, "resume token %d (id %d) is out of range [0, %d)", i, ids[i],
                             vocab);
    memcpy(r->tokens + r->n_prompt, ids, (size_t)n * sizeof *ids);
    r->n_tokens = r->n_prompt + n;
    r->prefill_to = r->n_tokens - 1;
    return SD_OK;
}

void sd_req_preempt(sd_engine *e, sd_req *r)
{
    sd_kv_seq_release(sd_model_kv_pool(e->m), &r->kv);
    r->n_prefilled = 0;
    r->share_looked = false;
    r->shared = 0;
    r->n_registered = 0;
    r->prefill_to = r->n_tokens > r->n_prompt ? r->n_tokens - 1 : r->n_prompt;
    r->n_new = 0;
}

/* Token capacity of the request: prompt + max_tokens, capped by the context. */
static int req_capacity(const sd_engine *e, const sd_req *r)
{
    long cap = (long)r->n_prompt + r->p.max_tokens;
    long ctx = sd_model_cfg(e->m)->max_position;
    return (int)(cap < ctx ? cap : ctx);
}

int sd_req_draft_budget(const sd_engine *e, const sd_req *r)
{
    if (r->finish != SD_FINISH_NONE || sd_req_prefilling(r) || !r->p.speculate) return 0;
    int room = req_capacity(e, r) - r->n_tokens - 1; /* the last committed token takes the bonus slot */
    int k = r->p.num_draft;
    if (k > room) k = room;
    return k > 0 ? k : 0;
}

sd_verify_mode sd_req_verify_mode(const sd_req *r, bool have_q)
{
    if (r->p.sampling.temperature <= 0.0f) return SD_VERIFY_GREEDY;
    if (r->p.verify == SD_VERIFY_REJECTION && have_q) return SD_VERIFY_REJECTION;
    if (r->p.verify == SD_VERIFY_AUTO && have_q) return SD_VERIFY_REJECTION;
    return SD_VERIFY_MATCH; /* greedy at T > 0 means "exact": match */
}

/* ---------------------------------------------------------------- step */

static sd_status grow(sd_engine *e, int n, int rows)
{
    size_t V = (size_t)sd_model_cfg(e->m)->vocab_size;
    const sd_grow_item per_req[] = {SD_GROW_ITEM(e->batch),
                                    SD_GROW_ITEM(e->slot),
                                    SD_GROW_ITEM(e->span_k),
                                    SD_GROW_ITEM(e->chunk),
                                    {&e->spans, (SD_MAX_DRAFT + 1) * sizeof *e->spans},
                                    {&e->amax, (SD_MAX_DRAFT + 1) * sizeof *e->amax},
                                    {&e->draw, (SD_MAX_DRAFT + 1) * sizeof *e->draw},
                                    {&e->drawn, (SD_MAX_DRAFT + 1) * sizeof *e->drawn},
                                    {&e->moff, (SD_MAX_DRAFT + 1) * sizeof *e->moff},
                                    {&e->eoff, (SD_MAX_DRAFT + 1) * sizeof *e->eoff},
                                    SD_GROW_ITEM(e->rowp),
                                    SD_GROW_ITEM(e->pre)};
    if (sd_grow_all(per_req, 12, &e->cap, (size_t)n) != SD_OK) return SD_ERR_NOMEM;
    if (!e->raw && !(e->raw = malloc((SD_MAX_DRAFT + 1) * V * sizeof *e->raw))) return SD_ERR_NOMEM;
    return sd_model_logits_grow(e->m, &e->logits, &e->cap_rows, (size_t)rows);
}

static void fail_req(sd_engine *e, sd_req *r, const char *msg)
{
    r->finish = SD_FINISH_ERROR;
    snprintf(r->error, sizeof r->error, "%s", msg);
    sd_kv_seq_release(sd_model_kv_pool(e->m), &r->kv);
}

/* True when r's prefill is to report its prompt tokens' log-probabilities: a
 * fresh request (not one prefilling again after a preemption or a resume). */
static bool wants_prompt_lp(const sd_req *r) { return r->prompt_lp && r->n_tokens == r->n_prompt; }

/* True when the argmax of r's rows is all its step needs (sd_batch_seq's
 * argmax): greedy, no penalty or logits processor, no log-probabilities. */
static bool argmax_serves(const sd_req *r)
{
    const sd_sampling *s = &r->p.sampling;
    return s->temperature <= 0.0f && !sd_sampling_processes(s) && !r->lp && !wants_prompt_lp(r);
}

/* ---------------------------------------------------------------- prefix sharing */

/* A request that prefills from position 0 and may take shared blocks. */
static bool share_taker(const sd_req *r)
{
    return r->finish == SD_FINISH_NONE && r->n_prefilled == 0 && r->kv.n_blocks == 0 && sd_req_prefilling(r) &&
           !wants_prompt_lp(r);
}

/* The positions r can take: its prefill, but a fresh request's last prompt
 * position, whose logits it samples from. */
static int share_limit(const sd_req *r) { return r->n_tokens == r->n_prompt ? r->prefill_to - 1 : r->prefill_to; }

/* Whole blocks of the common prefix of r's first `limit` tokens and d's first `upto`. */
static int shareable(const sd_req *r, int limit, const sd_req *d, int upto, int bs)
{
    int m = limit < upto ? limit : upto, i = 0;
    while (i < m && r->tokens[i] == d->tokens[i]) i++;
    return i / bs * bs;
}

/* Positions of r's prefix another request in reqs is computing now, or is
 * about to (it comes before r and does not wait itself): r waits for them
 * when they are more than the cache holds. */
static int share_later(sd_req *const *reqs, int n, int i, int limit, int bs)
{
    const sd_req *r = reqs[i];
    int later = 0;
    for (int j = 0; j < n; j++) {
        const sd_req *d = reqs[j];
        if (d == r || d->finish != SD_FINISH_NONE || !sd_req_prefilling(d) || d->prefill_to <= d->kv.len) continue;
        if (d->n_prefilled == 0 && (j > i || d->share_wait)) continue;
        int will = shareable(r, limit, d, d->prefill_to, bs);
        if (will > later) later = will;
    }
    return later;
}

/* Takes the cached prefix into reqs[i] (a taker), or sets its share_wait. */
static void share_into(sd_engine *e, sd_req *const *reqs, int n, int i)
{
    sd_kv_pool *pool = sd_model_kv_pool(e->m);
    int bs = sd_kv_pool_block_size(pool);
    sd_req *r = reqs[i];
    int limit = share_limit(r);
    if (sd_grow(&e->match, &e->cap_match, (size_t)(limit / bs + 1), sizeof *e->match) != SD_OK) return;
    int got = sd_kv_cache_match(pool, r->tokens, limit / bs, e->match);
    r->share_wait = share_later(reqs, n, i, limit, bs) > got * bs;
    if (r->share_wait) return;
    if (!r->share_looked) {
        r->share_looked = true;
        e->prefix_queries += (uint64_t)r->prefill_to;
    }
    if (got > 0 && sd_kv_seq_take(pool, &r->kv, e->match, got) == SD_OK) {
        r->n_prefilled = r->kv.len;
        r->shared = r->kv.len;
        r->n_registered = got;
        e->prefix_hits += (uint64_t)r->kv.len;
    }
}

/* Registers r's full committed blocks whose tokens are known in the prefix
 * cache (KV at a position depends on the tokens up to it only). */
static void register_blocks(sd_engine *e, sd_req *r)
{
    if (e->opts.no_prefix_sharing) return;
    sd_kv_pool *pool = sd_model_kv_pool(e->m);
    int known = r->kv.len < r->n_tokens ? r->kv.len : r->n_tokens;
    int full = known / sd_kv_pool_block_size(pool);
    for (; r->n_registered < full; r->n_registered++)
        sd_kv_cache_register(pool, &r->kv, r->n_registered,
                             r->tokens + (size_t)r->n_registered * (size_t)sd_kv_pool_block_size(pool));
}

void sd_engine_share_prefixes(sd_engine *e, sd_req *const *reqs, int n)
{
    for (int i = 0; i < n; i++) {
        reqs[i]->share_wait = false;
        if (!e->opts.no_prefix_sharing && share_taker(reqs[i])) share_into(e, reqs, n, i);
    }
}

void sd_engine_prefix_stats(const sd_engine *e, uint64_t *queries, uint64_t *hits)
{
    *queries = e->prefix_queries;
    *hits = e->prefix_hits;
}

int sd_engine_prefill_plan(const sd_engine *e, sd_req *const *reqs, int n, int *chunk)
{
    int left = e->opts.prefill_budget, total = 0; /* >= 1: the first prefilling request gets tokens */
    for (int i = 0; i < n; i++) {
        const sd_req *r = reqs[i];
        chunk[i] = 0;
        if (r->finish != SD_FINISH_NONE || !sd_req_prefilling(r) || r->share_wait) continue;
        int c = r->prefill_to - r->n_prefilled;
        if (c > e->opts.prefill_chunk) c = e->opts.prefill_chunk;
        if (c > left) c = left;
        chunk[i] = c;
        left -= c;
        total += c;
    }
    return total;
}

static void plan_draws(sd_engine *e, const sd_req *r, int bi, const sd_proposal *d, int k);

/* Adds request r to the batch: a prompt chunk of `chunk` tokens or a verify
 * span with up to `k` drafts. Returns the number of logits rows it needs, or
 * -1 if it could not get KV (then it is failed). */
static int plan_req(sd_engine *e, sd_req *r, int bi, const sd_proposal *d, int chunk)
{
    sd_kv_pool *pool = sd_model_kv_pool(e->m);
    sd_batch_seq *b = &e->batch[bi];
    if (sd_req_prefilling(r)) {
        if (sd_kv_reserve(pool, &r->kv, chunk) != SD_OK) {
            fail_req(e, r, "KV pool exhausted");
            return -1;
        }
        int rows = wants_prompt_lp(r) ? chunk : sd_req_prefill_samples(r, chunk);
        *b = (sd_batch_seq){r->tokens + r->n_prefilled, chunk, r->n_prefilled, &r->kv, rows, NULL, NULL, NULL};
        if (argmax_serves(r)) b->argmax = e->amax + (size_t)bi * (SD_MAX_DRAFT + 1); /* rows <= 1 here */
        else if (rows == 1) plan_draws(e, r, bi, NULL, 0);
        e->span_k[bi] = -1;
        return rows;
    }
    int k = d ? d->n : 0, budget = sd_req_draft_budget(e, r);
    if (k > budget) k = budget;
    if (k > 0 && sd_kv_reserve(pool, &r->kv, k + 1) != SD_OK) k = 0; /* no room for drafts: plain step */
    if (k == 0 && sd_kv_reserve(pool, &r->kv, 1) != SD_OK) {
        fail_req(e, r, "KV pool exhausted");
        return -1;
    }
    int32_t *span = e->spans + (size_t)bi * (SD_MAX_DRAFT + 1);
    span[0] = r->tokens[r->n_tokens - 1];
    for (int i = 0; i < k; i++) span[1 + i] = d->tokens[i];
    *b = (sd_batch_seq){span,   k + 1, r->n_tokens - 1,
                        &r->kv, k + 1, argmax_serves(r) ? e->amax + (size_t)bi * (SD_MAX_DRAFT + 1) : NULL,
                        NULL,   NULL};
    if (!b->argmax) plan_draws(e, r, bi, d, k);
    e->span_k[bi] = k;
    return k + 1;
}

/* Appends committed tokens, applying stop conditions. */
static void append_tokens(sd_engine *e, sd_req *r, const int32_t *toks, int n)
{
    const sd_model_config *c = sd_model_cfg(e->m);
    int cap = req_capacity(e, r);
    for (int i = 0; i < n && r->finish == SD_FINISH_NONE; i++) {
        int32_t t = toks[i];
        r->tokens[r->n_tokens++] = t;
        r->n_new++;
        bool stop = !r->p.ignore_eos && sd_config_is_eos(c, t);
        for (int j = 0; j < r->p.n_stop && !stop; j++) stop = r->p.stop_ids[j] == t;
        if (stop) r->finish = SD_FINISH_STOP;
        else if (r->n_tokens >= cap) r->finish = SD_FINISH_LENGTH;
    }
    register_blocks(e, r); /* before a finished request's KV goes: it stays cached */
    if (r->finish != SD_FINISH_NONE) sd_kv_seq_release(sd_model_kv_pool(e->m), &r->kv);
}

/* The prompt tokens a prefill chunk with a logits row per position predicts:
 * row j gives the log-probability of the token at pos0 + j + 1. */
static void prompt_logprobs(sd_engine *e, sd_req *r, const sd_batch_seq *b, const float *logits)
{
    int V = sd_model_cfg(e->m)->vocab_size;
    for (int j = 0; j < b->n; j++) {
        int pos = b->pos0 + j + 1;
        if (pos >= r->n_prompt) break;
        sd_logprob_row(logits + (size_t)j * (size_t)V, V, r->tokens[pos], r->p.top_logprobs, &r->prompt_lp[pos]);
    }
}

/* The verification input of r's rows of batch entry bi (k drafts; a prompt
 * chunk: its last row, k = 0). */
static sd_verify_in verify_input(const sd_engine *e, const sd_req *r, int bi, const sd_proposal *d, float *logits,
                                 int k)
{
    const sd_batch_seq *b = &e->batch[bi];
    const int32_t *amax = b->argmax ? b->argmax + (b->n_logits - 1 - k) : NULL; /* a prompt chunk: its last row */
    const sd_draw_out *drawn = b->drawn ? b->drawn + (b->n_logits - 1 - k) : NULL;
    bool have_q = k > 0 && d && d->q[0] != NULL;
    return (sd_verify_in){
        .logits = amax || drawn ? NULL : logits,
        .argmax = amax,
        .drawn = drawn,
        .vocab = sd_model_cfg(e->m)->vocab_size,
        .k = k,
        .draft = k > 0 ? b->tokens + 1 : NULL,
        .q = have_q ? d->q : NULL,
        .nq = have_q ? d->nq : NULL,
        .sampling = &r->p.sampling,
        .prompt = r->tokens,
        .n_prompt = (size_t)r->n_prompt,
        .output = r->tokens + r->n_prompt,
        .n_output = (size_t)sd_req_n_output(r),
        .out_pos = (uint64_t)sd_req_n_output(r),
        .mode = sd_req_verify_mode(r, have_q),
    };
}

/* Verifies r's rows of batch entry bi with v's scratch; the committed tokens
 * to out. */
static int verify_rows(const sd_engine *e, sd_verifier *v, const sd_req *r, int bi, const sd_proposal *d, float *logits,
                       int k, int32_t *out)
{
    sd_verify_in in = verify_input(e, r, bi, d, logits, k);
    return sd_verify(v, &in, out);
}

/* True when draws on the backend serve r's sampled rows (sd_verify_draws):
 * no log-probabilities (they need the rows). */
static bool draws_serve(const sd_engine *e, const sd_req *r)
{
    return e->draw_on && r->p.sampling.temperature > 0.0f && !r->lp && !wants_prompt_lp(r);
}

/* The logits processors of r's rows (draw[0..k], k drafts d) as their
 * token masks (the output restriction and allowed_token_ids) and edits,
 * appended to e->masks and e->edits where e->moff and e->eoff say;
 * sd_engine_step binds them once every entry's are in. */
static sd_status plan_edits(sd_engine *e, const sd_req *r, int bi, const sd_proposal *d, int k, sd_draw_row *draw)
{
    const sd_sampling *s = &r->p.sampling;
    int V = sd_model_cfg(e->m)->vocab_size;
    size_t words = ((size_t)V + 31) / 32, no = (size_t)sd_req_n_output(r), at = (size_t)bi * (SD_MAX_DRAFT + 1);
    if (!e->esp && sd_sampler_new(V, &e->esp, NULL, 0) != SD_OK) return SD_ERR_NOMEM;
    if (sd_grow(&e->hist, &e->cap_hist, no + (size_t)k, sizeof *e->hist) != SD_OK) return SD_ERR_NOMEM;
    if (no > 0) memcpy(e->hist, r->tokens + r->n_prompt, no * sizeof *e->hist);
    for (int i = 0; i < k; i++) e->hist[no + (size_t)i] = d->tokens[i];
    for (int i = 0; i <= k; i++) {
        size_t nh = no + (size_t)i; /* row i's history: the output and the drafts before it */
        if (sd_grow(&e->masks, &e->cap_masks, e->n_masks + words, sizeof *e->masks) != SD_OK) return SD_ERR_NOMEM;
        bool masked = sd_sampler_mask_bits(e->esp, s, V, e->hist, nh, e->masks + e->n_masks);
        e->moff[at + (size_t)i] = masked ? e->n_masks : SIZE_MAX;
        e->n_masks += masked ? words : 0;
        const sd_logit_edit *ed;
        size_t n = sd_sampler_edits(e->esp, s, V, r->tokens, (size_t)r->n_prompt, e->hist, nh, &ed);
        if (sd_grow(&e->edits, &e->cap_edits, e->n_edits + n, sizeof *e->edits) != SD_OK) return SD_ERR_NOMEM;
        memcpy(e->edits + e->n_edits, ed, n * sizeof *ed);
        e->eoff[at + (size_t)i] = e->n_edits;
        e->n_edits += n;
        draw[i].n_edits = (int32_t)n;
    }
    return SD_OK;
}

/* Points the drawn rows of the step's nb entries at their masks and edits. */
static void bind_edits(sd_engine *e, int nb)
{
    for (int j = 0; j < nb; j++) {
        const sd_batch_seq *b = &e->batch[j];
        if (!b->draw) continue;
        sd_draw_row *draw = e->draw + (size_t)j * (SD_MAX_DRAFT + 1);
        for (int i = 0; i < b->n_logits; i++) {
            size_t at = (size_t)j * (SD_MAX_DRAFT + 1) + (size_t)i;
            draw[i].allow = e->moff[at] == SIZE_MAX ? NULL : e->masks + e->moff[at];
            draw[i].edits = e->eoff[at] == SIZE_MAX ? NULL : e->edits + e->eoff[at];
        }
    }
}

/* Batch entry bi's rows drawn on the backend when that serves r (k drafts;
 * its last k + 1 rows). */
static void plan_draws(sd_engine *e, const sd_req *r, int bi, const sd_proposal *d, int k)
{
    sd_batch_seq *b = &e->batch[bi];
    if (!draws_serve(e, r) || b->n_logits != k + 1) return;
    sd_verify_in in = verify_input(e, r, bi, d, NULL, k);
    if (in.mode == SD_VERIFY_GREEDY) return;
    sd_draw_row *draw = e->draw + (size_t)bi * (SD_MAX_DRAFT + 1);
    sd_verify_draws(&in, draw);
    for (int i = 0; i <= k; i++)
        e->moff[(size_t)bi * (SD_MAX_DRAFT + 1) + (size_t)i] = e->eoff[(size_t)bi * (SD_MAX_DRAFT + 1) + (size_t)i] =
            SIZE_MAX; /* none unless planned */
    if (sd_sampling_processes(&r->p.sampling) && plan_edits(e, r, bi, d, k, draw) != SD_OK)
        return;   /* no memory for them: the host processes the rows */
    if (!e->drew) /* once: which path sampled rows take */
        sd_log(SD_LOG_INFO, "sampled rows are drawn on the backend (draw_rows): their logits stay there");
    e->drew = true;
    b->draw = draw;
    b->drawn = e->drawn + (size_t)bi * (SD_MAX_DRAFT + 1);
}

/* The rows verified ahead, in parallel on the backend's host threads:
 * decode spans of sampled requests without logprobs (each a full-vocabulary
 * distribution per position; a greedy row is an argmax, a prompt chunk and
 * logprobs need the serial commit's order). Pure per request — its own
 * logits rows, its own random stream — so the outcome is the serial one. */
typedef struct ahead {
    sd_engine *e;
    sd_req *const *reqs;
    const sd_proposal *drafts;
    int nb;
} ahead;

static bool verifies_ahead(const sd_engine *e, const sd_req *r, int j)
{
    return e->span_k[j] >= 0 && !r->lp && !e->batch[j].argmax && !e->batch[j].drawn && r->p.sampling.temperature > 0;
}

static void ahead_task(void *ctx, int t, int nt)
{
    ahead *a = ctx;
    sd_engine *e = a->e;
    for (int j = t; j < a->nb; j += nt) {
        const sd_req *r = a->reqs[e->slot[j]];
        if (verifies_ahead(e, r, j))
            e->pre[j].c = verify_rows(e, e->vers[t], r, j, a->drafts ? &a->drafts[e->slot[j]] : NULL, e->rowp[j],
                                      e->span_k[j], e->pre[j].out);
    }
}

static void verify_ahead(sd_engine *e, sd_req *const *reqs, int nb, const sd_proposal *drafts)
{
    int n = 0;
    for (int j = 0; j < nb; j++) {
        e->pre[j].c = 0;
        n += verifies_ahead(e, reqs[e->slot[j]], j);
    }
    if (n < 2 || e->n_vers < 2) return;
    ahead a = {e, reqs, drafts, nb};
    sd_backend_host_parallel(sd_model_backend(e->m), ahead_task, &a);
}

/* Accept + commit for one request after the forward pass (its rows
 * verified ahead, or now). */
static sd_status finish_req(sd_engine *e, sd_req *r, int bi, const sd_proposal *d, float *logits)
{
    sd_kv_pool *pool = sd_model_kv_pool(e->m);
    const sd_batch_seq *b = &e->batch[bi];
    int k = e->span_k[bi];
    if (k < 0) { /* prompt chunk */
        sd_kv_commit(pool, &r->kv, b->n);
        r->n_prefilled += b->n;
        register_blocks(e, r);
        if (b->n_logits == b->n && wants_prompt_lp(r)) prompt_logprobs(e, r, b, logits);
        if (!sd_req_prefill_samples(r, 0)) return SD_OK;
        if (!b->argmax && !b->drawn) /* the last row samples */
            logits += (size_t)(b->n_logits - 1) * (size_t)sd_model_cfg(e->m)->vocab_size;
        k = 0;
    }
    if (r->lp) memcpy(e->raw, logits, (size_t)(k + 1) * (size_t)sd_model_cfg(e->m)->vocab_size * sizeof *logits);
    int32_t own[SD_MAX_DRAFT + 1], *out = e->pre[bi].c != 0 ? e->pre[bi].out : own; /* verified ahead */
    int c = e->pre[bi].c != 0 ? e->pre[bi].c : verify_rows(e, e->ver, r, bi, d, logits, k, out);
    if (c < 1) {
        fail_req(e, r, "verification failed");
        return SD_OK;
    }
    if (e->span_k[bi] >= 0) { /* a decode step: the span's KV up to the accepted drafts stays */
        sd_kv_commit(pool, &r->kv, c);
        r->stats.steps++;
        r->stats.draft_tokens += (uint64_t)k;
        r->stats.accepted_tokens += (uint64_t)(c - 1);
        for (int i = 0; i < c - 1; i++) r->stats.accepted_at[i]++;
    }
    append_tokens(e, r, out, c);
    int V = sd_model_cfg(e->m)->vocab_size;
    for (int i = 0; r->lp && i < r->n_new; i++)
        sd_logprob_row(e->raw + (size_t)i * (size_t)V, V, out[i], r->p.top_logprobs, &r->lp[i]);
    return SD_OK;
}

sd_status sd_engine_step(sd_engine *e, sd_req *const *reqs, int n, const sd_proposal *drafts, char *err, size_t errlen)
{
    int rows = 0, nb = 0;
    for (int i = 0; i < n; i++)
        if (reqs[i]->finish == SD_FINISH_NONE)
            rows += !sd_req_prefilling(reqs[i]) ? SD_MAX_DRAFT + 1
                    : wants_prompt_lp(reqs[i])  ? e->opts.prefill_chunk
                                                : 1;
    if (grow(e, n, rows > 0 ? rows : 1) != SD_OK) return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory");
    sd_engine_share_prefixes(e, reqs, n);
    sd_engine_prefill_plan(e, reqs, n, e->chunk);
    e->n_edits = e->n_masks = 0;
    for (int i = 0; i < n; i++) {
        sd_req *r = reqs[i];
        r->n_new = 0;
        if (r->finish != SD_FINISH_NONE) continue;
        if (sd_req_prefilling(r) && e->chunk[i] == 0) continue; /* its prompt waits for a later step */
        if (plan_req(e, r, nb, drafts ? &drafts[i] : NULL, e->chunk[i]) < 0) continue;
        e->slot[nb++] = i;
    }
    bind_edits(e, nb);
    e->timing = (sd_step_timing){0};
    if (nb == 0) return SD_OK;
    double t0 = sd_now_ms();
    sd_status st = sd_model_forward(e->m, e->batch, nb, e->logits, err, errlen);
    double t1 = sd_now_ms();
    if (st != SD_OK) {
        for (int j = 0; j < nb; j++) fail_req(e, reqs[e->slot[j]], "forward pass failed");
        return st;
    }
    int V = sd_model_cfg(e->m)->vocab_size;
    float *row = e->logits;
    for (int j = 0; j < nb; j++) { /* each entry's logits rows */
        e->rowp[j] = row;
        if (!e->batch[j].argmax && !e->batch[j].drawn) row += (size_t)e->batch[j].n_logits * V;
    }
    verify_ahead(e, reqs, nb, drafts);
    sd_step_timing *tm = &e->timing;
    for (int j = 0; j < nb; j++) {
        int i = e->slot[j];
        const sd_batch_seq *b = &e->batch[j];
        tm->rows += b->n;
        tm->seqs++;
        bool sampled = reqs[i]->p.sampling.temperature > 0;
        int scored = e->span_k[j] < 0 ? (b->n_logits > 0) : b->n_logits; /* prompt logprob rows are not argmax'd */
        if (scored > 0 && !sampled) tm->greedy_rows += scored;           /* argmax over every row */
        finish_req(e, reqs[i], j, drafts ? &drafts[i] : NULL, e->rowp[j]);
        /* a sampled distribution per position reached: up to the first rejection */
        if (b->n_logits > 0 && sampled) tm->sampled_pos += reqs[i]->n_new > 0 ? reqs[i]->n_new : 1;
    }
    tm->forward_ms = t1 - t0;
    tm->accept_ms = sd_now_ms() - t1;
    return SD_OK;
}

/* ---------------------------------------------------------------- driver */

bool sd_req_propose_item(const sd_engine *e, const sd_req *r, sd_propose_item *it)
{
    int k = sd_req_draft_budget(e, r);
    if (k == 0) return false;
    bool want_q =
        r->p.sampling.temperature > 0 && (r->p.verify == SD_VERIFY_AUTO || r->p.verify == SD_VERIFY_REJECTION);
    *it = (sd_propose_item){.seq_id = r->id,
                            .context = r->tokens,
                            .n_context = r->n_tokens,
                            .k = k,
                            .sampling = &r->p.sampling,
                            .want_q = want_q,
                            .out_pos = (uint64_t)sd_req_n_output(r)};
    return true;
}

/* Asks pr for drafts for every request that takes them this step. */
static void propose_all(sd_engine *e, sd_proposer *pr, sd_req *const *reqs, int n, sd_proposal *props)
{
    sd_propose_item items[64];
    sd_proposal out[64];
    int map[64], ni = 0;
    memset(props, 0, (size_t)n * sizeof *props);
    for (int i = 0; pr && i < n; i++)
        if (reqs[i]->finish == SD_FINISH_NONE && sd_req_propose_item(e, reqs[i], &items[ni])) map[ni++] = i;
    if (ni == 0) return;
    char err[256];
    if (pr->ops->propose(pr, items, ni, out, err, sizeof err) != SD_OK) return; /* no drafts: slower, never wrong */
    for (int j = 0; j < ni; j++) props[map[j]] = out[j];
}

sd_status sd_engine_run(sd_engine *e, sd_proposer *pr, sd_req *const *reqs, int n, sd_step_cb cb, void *ctx, char *err,
                        size_t errlen)
{
    if (n < 1 || n > 64) return sd_seterr(err, errlen, SD_ERR_ARG, "sd_engine_run takes 1..64 requests");
    sd_proposal props[64];
    for (;;) {
        int live = 0;
        for (int i = 0; i < n; i++) live += reqs[i]->finish == SD_FINISH_NONE;
        if (!live) break;
        propose_all(e, pr, reqs, n, props);
        sd_status st = sd_engine_step(e, reqs, n, props, err, errlen);
        if (st != SD_OK) return st;
        for (int i = 0; cb && i < n; i++)
            if (reqs[i]->n_new > 0 || reqs[i]->finish != SD_FINISH_NONE) cb(ctx, reqs[i]);
    }
    for (int i = 0; pr && i < n; i++) pr->ops->release(pr, reqs[i]->id);
    return SD_OK;
}
