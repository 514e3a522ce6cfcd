/* test_spec.c — speculative decoding is exact (issue: in-process core).
 *
 * Greedy speculative output == plain greedy output token for token: the demo
 * pair over 20 code prompts x 256 tokens, the n-gram proposer over the same
 * prompts, and the reference models with themselves as drafter (which must
 * also reproduce the transformers greedy_output). Sampled "match"
 * verification == plain sampled decoding for the same seed, over several
 * seeds and sampler settings. Several requests stepped together give the
 * same outputs as alone. The KV pool is back to full after every run.
 * (The distributional exactness of rejection sampling is test_verify's.) */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "draft.h"
#include "engine.h"
#include "json_mask.h"
#include "ngram.h"
#include "regex_mask.h"
#include "spec_run.h"
#include "testutil.h"
#include "tokenizer.h"
#include "../../bench/code_prompts.h"

#define PROMPTS SD_CODE_PROMPTS

typedef struct fixture {
    sd_backend *be;
    sd_model *target;
    sd_engine *eng;
    sd_tok *tok;
} fixture;

static void open_fixture(fixture *f, const char *dir, int positions)
{
    char err[512];
    ck_assert_int_eq(sd_backend_cpu_new(2, &f->be, NULL, 0), SD_OK);
    ck_assert_msg(sd_model_load(dir, f->be, &f->target, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_int_eq(sd_model_kv_init(f->target, 4 * ((positions + 15) / 16 + 2), 16, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_engine_new(f->target, NULL, &f->eng, NULL, 0), SD_OK);
    f->tok = NULL;
}

static void close_fixture(fixture *f)
{
    sd_kv_pool *pool = sd_model_kv_pool(f->target);
    ck_assert_int_eq(sd_kv_pool_free_count(pool), sd_kv_pool_total(pool));
    sd_engine_free(f->eng);
    sd_model_free(f->target);
    sd_backend_free(f->be);
    sd_tok_free(f->tok);
}

/* Steps the requests together until all finish, proposing with pr. */
static void run_reqs(fixture *f, sd_proposer *pr, sd_req **reqs, int n)
{
    char err[256];
    ck_assert_msg(sd_engine_run(f->eng, pr, reqs, n, NULL, NULL, err, sizeof err) == SD_OK, "%s", err);
    for (int i = 0; i < n; i++) ck_assert_msg(reqs[i]->finish != SD_FINISH_ERROR, "request failed: %s", reqs[i]->error);
}

/* A finished request's output (malloc'd, n_out tokens); frees the request. */
static int32_t *take_output(fixture *f, sd_req *r, int *n_out, sd_spec_stats *stats)
{
    *n_out = sd_req_n_output(r);
    int32_t *out = malloc((size_t)*n_out * sizeof *out);
    memcpy(out, sd_req_output(r), (size_t)*n_out * sizeof *out);
    if (stats) *stats = r->stats;
    sd_req_free(f->eng, r);
    return out;
}

/* Generates from one prompt; returns the malloc'd output (n_out tokens). */
static int32_t *gen(fixture *f, sd_proposer *pr, const int32_t *ids, int n, const sd_req_params *p, int *n_out,
                    sd_spec_stats *stats)
{
    sd_req *r;
    char err[256];
    ck_assert_msg(sd_req_new(f->eng, 7, ids, n, p, &r, err, sizeof err) == SD_OK, "%s", err);
    run_reqs(f, pr, &r, 1);
    return take_output(f, r, n_out, stats);
}

static int32_t *encode(fixture *f, const char *text, int *n)
{
    int32_t *ids;
    size_t len;
    char err[256];
    ck_assert_int_eq(sd_tok_encode(f->tok, text, strlen(text), true, &ids, &len, err, sizeof err), SD_OK);
    *n = (int)len;
    return ids;
}

static void open_demo(fixture *f)
{
    char dir[512], tp[600], err[256];
    tu_model(dir, sizeof dir, "tinycode-16m");
    open_fixture(f, dir, 512);
    snprintf(tp, sizeof tp, "%s/tokenizer.json", dir);
    ck_assert_int_eq(sd_tok_load(tp, &f->tok, err, sizeof err), SD_OK);
}

/* The demo drafter with the checkpoint's weights, drafting K every step. */
static sd_proposer *demo_drafter_q(fixture *f, int max_seqs, int quant, float p_min)
{
    char dir[512], err[512];
    sd_proposer *pr = NULL;
    sd_draft_opts o = {
        .be = f->be, .max_seqs = max_seqs, .max_context = 512, .block_size = 16, .quant = quant, .p_min = p_min};
    ck_assert_msg(sd_draft_new(tu_model(dir, sizeof dir, "tinycode-3m"), &o, &pr, err, sizeof err) == SD_OK, "%s", err);
    return pr;
}

static sd_proposer *demo_drafter(fixture *f, int max_seqs)
{
    return demo_drafter_q(f, max_seqs, SD_DRAFT_QUANT_NONE, 0.0f);
}

/* Plain vs speculative over the 20 prompts with proposer pr. */
static void greedy_equal_over_prompts(fixture *f, sd_proposer *pr, int n_tokens, double *tokens_per_step)
{
    sd_req_params p = sd_req_params_default();
    p.max_tokens = n_tokens;
    p.ignore_eos = true;
    sd_spec_stats total = {0};
    for (int i = 0; i < 20; i++) {
        int n, na, nb;
        int32_t *ids = encode(f, PROMPTS[i], &n);
        p.speculate = false;
        int32_t *a = gen(f, NULL, ids, n, &p, &na, NULL);
        p.speculate = true;
        p.num_draft = 5;
        sd_spec_stats st;
        int32_t *b = gen(f, pr, ids, n, &p, &nb, &st);
        ck_assert_int_eq(na, n_tokens);
        ck_assert_int_eq(nb, n_tokens);
        for (int j = 0; j < na; j++)
            ck_assert_msg(a[j] == b[j], "prompt %d: token %d differs (plain %d, speculative %d)", i, j, a[j], b[j]);
        total.steps += st.steps;
        total.accepted_tokens += st.accepted_tokens;
        free(a);
        free(b);
        free(ids);
    }
    *tokens_per_step = (double)(total.accepted_tokens + total.steps) / (double)total.steps;
}

START_TEST(greedy_demo_pair_20x256)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 1);
    double tps;
    greedy_equal_over_prompts(&f, pr, 256, &tps);
    fprintf(stderr, "demo pair: %.2f committed tokens per verify step\n", tps);
    ck_assert(tps > 1.5); /* the drafter really agrees with its target */
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* The default fast drafter (int8 weights, early stop): other drafts, the
 * same output. */
START_TEST(greedy_demo_pair_int8_p_min_20x256)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter_q(&f, 1, SD_DRAFT_QUANT_INT8, SD_DRAFT_P_MIN_DEFAULT);
    double tps;
    greedy_equal_over_prompts(&f, pr, 256, &tps);
    fprintf(stderr, "demo pair, int8 drafter, p_min %.2f: %.2f committed tokens per verify step\n",
            (double)SD_DRAFT_P_MIN_DEFAULT, tps);
    ck_assert(tps > 1.5);
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

START_TEST(greedy_ngram_20x256)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr;
    char err[256];
    ck_assert_int_eq(sd_ngram_new(1, 4, &pr, err, sizeof err), SD_OK);
    double tps;
    greedy_equal_over_prompts(&f, pr, 256, &tps);
    fprintf(stderr, "n-gram: %.2f committed tokens per verify step\n", tps);
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* Reference model drafting for itself: every draft is accepted, and the
 * output is transformers' greedy_output. */
static void self_draft(const char *name)
{
    char dir[512], rel[256], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    tu_fixture(dir, sizeof dir, rel);
    fixture f;
    open_fixture(&f, dir, 128);
    sd_proposer *pr;
    sd_draft_opts o = {
        .n_threads = 1, .max_seqs = 1, .max_context = 128, .block_size = 16, .quant = SD_DRAFT_QUANT_NONE};
    ck_assert_msg(sd_draft_new(dir, &o, &pr, err, sizeof err) == SD_OK, "%s", err);
    snprintf(rel, sizeof rel, "models/%s/reference.json", name);
    json_t *root = json_load_file(tu_fixture(dir, sizeof dir, rel), 0, NULL);
    ck_assert_ptr_nonnull(root);
    json_t *jp = json_object_get(root, "greedy_prompt"), *jo = json_object_get(root, "greedy_output");
    int np = (int)json_array_size(jp), no = (int)json_array_size(jo);
    int32_t prompt[64];
    for (int i = 0; i < np; i++) prompt[i] = (int32_t)json_integer_value(json_array_get(jp, (size_t)i));
    sd_req_params p = sd_req_params_default();
    p.max_tokens = no;
    p.ignore_eos = true;
    p.speculate = true;
    p.num_draft = 4;
    int n;
    sd_spec_stats st;
    int32_t *out = gen(&f, pr, prompt, np, &p, &n, &st);
    ck_assert_int_eq(n, no);
    for (int i = 0; i < no; i++)
        ck_assert_msg(out[i] == json_integer_value(json_array_get(jo, (size_t)i)), "%s: token %d", name, i);
    ck_assert_uint_eq(st.accepted_tokens, st.draft_tokens); /* a model always agrees with itself */
    free(out);
    json_decref(root);
    sd_proposer_free(pr);
    close_fixture(&f);
}

START_TEST(self_draft_reference_models)
{
    self_draft("qwen3-tiny");
    self_draft("qwen2-tiny");
    self_draft("llama3-tiny");
    self_draft("qwen3-tiny-bf16-sharded");
}
END_TEST

START_TEST(sampled_match_equals_plain)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 1);
    struct {
        float t;
        int k;
        float p, minp, rep, pres;
    } cfg[4] = {
        {0.8f, 0, 0.95f, 0.0f, 1.0f, 0.0f},
        {1.0f, 40, 1.0f, 0.0f, 1.0f, 0.0f},
        {0.7f, 0, 1.0f, 0.05f, 1.2f, 0.0f},
        {0.9f, 20, 0.9f, 0.0f, 1.1f, 0.5f},
    };
    for (int c = 0; c < 4; c++) {
        for (uint64_t seed = 1; seed <= 3; seed++) {
            int n, na, nb;
            int32_t *ids = encode(&f, PROMPTS[(c * 3 + seed) % 20], &n);
            sd_req_params p = sd_req_params_default();
            p.max_tokens = 96;
            p.ignore_eos = true;
            p.sampling.temperature = cfg[c].t;
            p.sampling.top_k = cfg[c].k;
            p.sampling.top_p = cfg[c].p;
            p.sampling.min_p = cfg[c].minp;
            p.sampling.repetition_penalty = cfg[c].rep;
            p.sampling.presence_penalty = cfg[c].pres;
            p.sampling.seed = seed;
            int32_t *a = gen(&f, NULL, ids, n, &p, &na, NULL);
            p.speculate = true;
            p.num_draft = 4;
            p.verify = SD_VERIFY_MATCH;
            int32_t *b = gen(&f, pr, ids, n, &p, &nb, NULL);
            ck_assert_int_eq(na, nb);
            for (int j = 0; j < na; j++)
                ck_assert_msg(a[j] == b[j], "config %d seed %d: token %d differs", c, (int)seed, j);
            free(a);
            free(b);
            free(ids);
        }
    }
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* In-process adaptive speculation (spec_run.h): six greedy requests and two
 * seeded sampled ones (verify "match") decoded together, each choosing its
 * drafts every step, equal their plain outputs alone. */
START_TEST(adaptive_run_equals_plain)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 8);
    sd_req *reqs[8];
    int32_t *alone[8];
    int nalone[8];
    for (int i = 0; i < 8; i++) {
        int n;
        int32_t *ids = encode(&f, PROMPTS[i + 3], &n);
        sd_req_params p = sd_req_params_default();
        p.max_tokens = 96;
        p.ignore_eos = true;
        if (i >= 6) {
            p.sampling.temperature = 0.8f;
            p.sampling.top_p = 0.95f;
            p.sampling.seed = (uint64_t)i;
            p.verify = SD_VERIFY_MATCH;
        }
        alone[i] = gen(&f, NULL, ids, n, &p, &nalone[i], NULL);
        p.speculate = true;
        p.num_draft = 12; /* the most the choice may take */
        char err[256];
        ck_assert_msg(sd_req_new(f.eng, 100 + (uint64_t)i, ids, n, &p, &reqs[i], err, sizeof err) == SD_OK, "%s", err);
        free(ids);
    }
    char err[256];
    sd_spec_run_opts o = {.adaptive = true, .calibrate_ms = 300};
    ck_assert_msg(sd_spec_run(f.eng, pr, reqs, 8, &o, NULL, NULL, err, sizeof err) == SD_OK, "%s", err);
    uint64_t offered = 0, accepted = 0;
    for (int i = 0; i < 8; i++) {
        ck_assert_msg(reqs[i]->finish != SD_FINISH_ERROR, "request %d failed: %s", i, reqs[i]->error);
        int nb;
        sd_spec_stats st;
        int32_t *b = take_output(&f, reqs[i], &nb, &st);
        ck_assert_int_eq(nb, nalone[i]);
        for (int j = 0; j < nb; j++)
            ck_assert_msg(alone[i][j] == b[j], "request %d: token %d differs (plain %d, adaptive %d)", i, j,
                          alone[i][j], b[j]);
        offered += st.draft_tokens;
        accepted += st.accepted_tokens;
        free(alone[i]);
        free(b);
    }
    /* how many drafts the choice took depends on the step costs measured (no assertion on it) */
    fprintf(stderr, "adaptive run: %llu drafts verified, %llu accepted over 8 requests\n", (unsigned long long)offered,
            (unsigned long long)accepted);
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* Request i of a batch test: what prompt gives alone with p (drafts from pr,
 * or none) into alone[i] / nalone[i], and a new request for the batch with id. */
static void add_request(fixture *f, sd_proposer *pr, const char *prompt, const sd_req_params *p, uint64_t id,
                        sd_req **req, int32_t **alone, int *nalone)
{
    int n;
    char err[256];
    int32_t *ids = encode(f, prompt, &n);
    *alone = gen(f, pr, ids, n, p, nalone, NULL);
    ck_assert_int_eq(sd_req_new(f->eng, id, ids, n, p, req, err, sizeof err), SD_OK);
    free(ids);
}

/* Steps reqs[0..n) together and checks each gives alone[i] (nalone[i]
 * tokens); frees the requests, alone, the proposer and the fixture. */
static void run_together(fixture *f, sd_proposer *pr, sd_req **reqs, int32_t **alone, const int *nalone, int n)
{
    run_reqs(f, pr, reqs, n);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(sd_req_n_output(reqs[i]), nalone[i]);
        ck_assert_mem_eq(sd_req_output(reqs[i]), alone[i], (size_t)nalone[i] * sizeof(int32_t));
        sd_req_free(f->eng, reqs[i]);
        free(alone[i]);
    }
    sd_proposer_free(pr);
    close_fixture(f);
}

/* Four requests with different settings stepped together (batched verify and
 * batched drafting) produce exactly what each produces alone. */
START_TEST(batched_requests_equal_single)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 4);
    sd_req *reqs[4];
    int32_t *alone[4];
    int nalone[4];
    for (int i = 0; i < 4; i++) {
        sd_req_params p = sd_req_params_default();
        p.max_tokens = 64 + 16 * i;
        p.ignore_eos = true;
        p.speculate = i != 3;
        p.num_draft = 2 + i;
        p.sampling.temperature = i == 1 ? 0.8f : 0.0f;
        p.sampling.seed = 11;
        p.verify = i == 1 ? SD_VERIFY_MATCH : SD_VERIFY_AUTO;
        add_request(&f, pr, PROMPTS[i + 4], &p, (uint64_t)(100 + i), &reqs[i], &alone[i], &nalone[i]);
    }
    run_together(&f, pr, reqs, alone, nalone, 4);
}
END_TEST

/* Sampled requests stepped together have their rows verified in parallel
 * on the backend's two threads (engine.c, verify_ahead: each its own
 * scratch, rows and random stream); each still gives what it gives alone,
 * where nothing runs in parallel: plain, speculative (match), with top-k /
 * top-p and penalties. */
START_TEST(sampled_batch_verified_in_parallel_equals_alone)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 6);
    sd_req *reqs[6];
    int32_t *alone[6];
    int nalone[6];
    for (int i = 0; i < 6; i++) {
        sd_req_params p = sd_req_params_default();
        p.max_tokens = 48 + 8 * i;
        p.ignore_eos = true;
        p.speculate = i % 2 == 1;
        p.num_draft = 3;
        p.verify = SD_VERIFY_MATCH;
        p.sampling.temperature = 0.6f + 0.1f * (float)i;
        p.sampling.top_k = i == 2 ? 30 : 0;
        p.sampling.top_p = i == 3 ? 0.9f : 1.0f;
        p.sampling.repetition_penalty = i == 4 ? 1.2f : 1.0f;
        p.sampling.seed = 21 + (uint64_t)i;
        add_request(&f, p.speculate ? pr : NULL, PROMPTS[i + 9], &p, (uint64_t)(200 + i), &reqs[i], &alone[i],
                    &nalone[i]);
    }
    run_together(&f, pr, reqs, alone, nalone, 6);
}
END_TEST

/* After shared_prefixes_equal_alone's requests are gone, their blocks stay
 * cached: a request with P (buf[0..np)), then one with P + the output out
 * (the next turn), take them, and give what the engine without prefix
 * sharing (off) gives. buf has room for np + n_out tokens. */
static void cached_turns(fixture *f, sd_proposer *pr, sd_engine *off, int32_t *buf, int np, const int32_t *out,
                         int n_out, const sd_req_params *p)
{
    int bs = 16;
    char err[256];
    sd_engine *on = f->eng;
    ck_assert_int_gt(sd_kv_pool_cached_count(sd_model_kv_pool(f->target)), np / bs);
    for (int k = 0; k < 2; k++) {
        sd_req *r;
        int len = k ? np + n_out : np;
        if (k) memcpy(buf + np, out, (size_t)n_out * sizeof *out);
        ck_assert_int_eq(sd_req_new(on, 300, buf, len, p, &r, err, sizeof err), SD_OK);
        run_reqs(f, pr, &r, 1);
        ck_assert_int_eq(r->shared, (len - 1) / bs * bs);
        int nref;
        f->eng = off;
        int32_t *ref = gen(f, pr, buf, len, p, &nref, NULL);
        f->eng = on;
        ck_assert_int_eq(sd_req_n_output(r), nref);
        ck_assert_msg(!memcmp(sd_req_output(r), ref, (size_t)nref * sizeof *ref), "turn %d differs from the cache", k);
        free(ref);
        sd_req_free(on, r);
    }
}

/* Prefix sharing (engine.h): requests stepped together whose prompts share
 * a prefix take its KV from one another and still give the outputs they give
 * alone — identical prompts (greedy with and without drafts, seeded
 * sampling), a longer prompt starting with another, prompts diverging in
 * the middle of a block, a request that wants prompt log-probabilities (it
 * prefills in full), and a request joining later whose prompt runs into
 * another's committed output (a next chat turn). */
START_TEST(shared_prefixes_equal_alone)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 8);
    enum { N = 7 };
    int np, nq;
    char text[4096];
    snprintf(text, sizeof text, "%s\n%s\n%s\n%s", PROMPTS[2], PROMPTS[6], PROMPTS[7], PROMPTS[8]);
    int32_t *pp = encode(&f, text, &np), *qq = encode(&f, PROMPTS[3], &nq);
    ck_assert_int_gt(np, 40);
    ck_assert_int_ne(np % 16, 0); /* P ends inside a block */
    int32_t *ids[N], n[N];
    sd_req_params p[N];
    for (int i = 0; i < N; i++) {
        ids[i] = malloc((size_t)(np + nq + 64) * sizeof *ids[i]);
        memcpy(ids[i], pp, (size_t)np * sizeof *pp);
        n[i] = np;
        p[i] = sd_req_params_default();
        p[i].max_tokens = 40;
        p[i].ignore_eos = true;
        p[i].speculate = i % 2 == 0;
        p[i].num_draft = 4;
    }
    p[2].sampling.temperature = 0.8f;
    p[2].sampling.seed = 5;
    p[2].verify = SD_VERIFY_MATCH;
    memcpy(ids[3] + np, qq, (size_t)nq * sizeof *qq); /* longer: the whole of P, then more */
    n[3] = np + nq;
    n[4] = np - 3; /* diverges inside P's third-to-last position's block */
    ids[4][n[4] - 1] = ids[4][n[4] - 1] == 7 ? 8 : 7;
    p[5].prompt_logprobs = true; /* prefills in full */
    int32_t *alone[N];
    int nalone[N];
    char err[256];
    sd_engine *on = f.eng, *off;
    ck_assert_int_eq(sd_engine_new(f.target, &(sd_engine_opts){.no_prefix_sharing = true}, &off, NULL, 0), SD_OK);
    f.eng = off; /* the outputs alone: every prompt prefilled in full */
    for (int i = 0; i < N - 1; i++) alone[i] = gen(&f, pr, ids[i], n[i], &p[i], &nalone[i], NULL);
    /* the last joins after request 0 has committed tokens: P + 0's first 20 tokens + Q */
    memcpy(ids[6] + np, alone[0], 20 * sizeof *alone[0]);
    memcpy(ids[6] + np + 20, qq, (size_t)(nq - 20 > 0 ? nq - 20 : 0) * sizeof *qq);
    n[6] = np + (nq > 20 ? nq : 20);
    alone[6] = gen(&f, pr, ids[6], n[6], &p[6], &nalone[6], NULL);
    f.eng = on;
    uint64_t q0, h0, q1, h1;
    sd_engine_prefix_stats(off, &q0, &h0);
    ck_assert_int_eq((int)(q0 + h0), 0);                                      /* off: nothing looked up */
    ck_assert_int_eq(sd_kv_pool_cached_count(sd_model_kv_pool(f.target)), 0); /* nor registered */
    sd_req *reqs[N];
    for (int i = 0; i < N; i++)
        ck_assert_int_eq(sd_req_new(f.eng, (uint64_t)(200 + i), ids[i], n[i], &p[i], &reqs[i], err, sizeof err), SD_OK);
    while (sd_req_n_output(reqs[0]) < 24) /* request 0 alone first, plain steps */
        ck_assert_int_eq(sd_engine_step(f.eng, reqs, 1, NULL, err, sizeof err), SD_OK);
    run_reqs(&f, pr, reqs, N);
    sd_engine_prefix_stats(f.eng, &q1, &h1);
    int bs = 16;
    ck_assert_int_eq(reqs[1]->shared, (np - 1) / bs * bs);
    ck_assert_int_eq(reqs[2]->shared, (np - 1) / bs * bs);
    ck_assert_int_eq(reqs[3]->shared, np / bs * bs);
    ck_assert_int_eq(reqs[4]->shared, (n[4] - 1) / bs * bs);
    ck_assert_int_eq(reqs[5]->shared, 0);
    ck_assert_int_eq(reqs[6]->shared, (np + 20) / bs * bs);
    ck_assert_int_gt((int)(h1 - h0), 4 * bs);
    for (int i = 0; i < N; i++) {
        ck_assert_int_eq(sd_req_n_output(reqs[i]), nalone[i]);
        ck_assert_msg(!memcmp(sd_req_output(reqs[i]), alone[i], (size_t)nalone[i] * sizeof(int32_t)),
                      "request %d: output differs with shared prefixes", i);
        sd_req_free(f.eng, reqs[i]);
    }
    cached_turns(&f, pr, off, ids[3], np, alone[0], nalone[0], &p[0]);
    for (int i = 0; i < N; i++) {
        free(alone[i]);
        free(ids[i]);
    }
    sd_engine_free(off);
    free(pp);
    free(qq);
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* Rejection mode runs end to end with the drafter's q and accepts drafts;
 * its distributional exactness is proven in test_verify. */
START_TEST(rejection_mode_runs)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 1);
    int n, no;
    int32_t *ids = encode(&f, PROMPTS[0], &n);
    sd_req_params p = sd_req_params_default();
    p.max_tokens = 128;
    p.ignore_eos = true;
    p.sampling.temperature = 0.8f;
    p.sampling.top_p = 0.95f;
    p.sampling.seed = 5;
    p.speculate = true;
    p.num_draft = 5;
    sd_spec_stats st;
    int32_t *out = gen(&f, pr, ids, n, &p, &no, &st);
    ck_assert_int_eq(no, 128);
    ck_assert(st.accepted_tokens > 0);
    fprintf(stderr, "rejection: %.2f committed tokens per step\n",
            (double)(st.accepted_tokens + st.steps) / (double)st.steps);
    free(out);
    free(ids);
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* Stop conditions and a tiny KV pool: failure stays with one request. */
START_TEST(stops_and_exhaustion)
{
    fixture f;
    open_demo(&f);
    int n, no;
    int32_t *ids = encode(&f, PROMPTS[0], &n);
    sd_req_params p = sd_req_params_default();
    p.max_tokens = 40;
    p.ignore_eos = true;
    int32_t *ref = gen(&f, NULL, ids, n, &p, &no, NULL);
    p.stop_ids[0] = ref[10];
    p.n_stop = 1;
    int32_t *cut = gen(&f, NULL, ids, n, &p, &no, NULL);
    int first = 0;
    while (ref[first] != ref[10]) first++;
    ck_assert_int_eq(no, first + 1);
    free(cut);
    char err[256];
    sd_req *a, *b;
    p.n_stop = 0;
    p.max_tokens = 4000;
    ck_assert_int_eq(sd_req_new(f.eng, 1, ids, n, &p, &a, err, sizeof err), SD_OK);
    p.max_tokens = 8;
    ck_assert_int_eq(sd_req_new(f.eng, 2, ids, n, &p, &b, err, sizeof err), SD_OK);
    sd_req *both[2] = {a, b};
    while (b->finish == SD_FINISH_NONE || a->finish == SD_FINISH_NONE)
        ck_assert_int_eq(sd_engine_step(f.eng, both, 2, NULL, err, sizeof err), SD_OK);
    ck_assert_int_eq(b->finish, SD_FINISH_LENGTH);
    ck_assert_int_eq(sd_req_n_output(b), 8);
    ck_assert_msg(a->finish == SD_FINISH_ERROR || a->finish == SD_FINISH_LENGTH, "a finished %d", a->finish);
    sd_req_free(f.eng, a);
    sd_req_free(f.eng, b);
    p.sampling.top_p = 0.0f; /* invalid: rejected with a message naming it */
    ck_assert_int_eq(sd_req_new(f.eng, 3, ids, n, &p, &a, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "top_p"));
    free(ref);
    free(ids);
    close_fixture(&f);
}
END_TEST

/* Logits processors through the engine: the request keeps its own copies of
 * the lists (the caller's are overwritten after sd_req_new), min_tokens
 * holds back the stop id and EOS, ids outside the vocabulary are refused,
 * and speculative output (greedy; match at T 0.8) equals plain. */
static int32_t *gen_overwritten(fixture *f, sd_proposer *pr, const int32_t *ids, int n, const sd_req_params *p,
                                int32_t *bias_ids, int *n_out)
{
    sd_req *r;
    char err[256];
    ck_assert_msg(sd_req_new(f->eng, 9, ids, n, p, &r, err, sizeof err) == SD_OK, "%s", err);
    int32_t saved = bias_ids[0];
    bias_ids[0] = 0; /* the request must not read the caller's list any more */
    run_reqs(f, pr, &r, 1);
    bias_ids[0] = saved;
    return take_output(f, r, n_out, NULL);
}

START_TEST(logits_processors_exact)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 1);
    int n, nref;
    int32_t *ids = encode(&f, PROMPTS[3], &n);
    sd_req_params p = sd_req_params_default();
    p.max_tokens = 64;
    p.ignore_eos = true;
    int32_t *ref = gen(&f, NULL, ids, n, &p, &nref, NULL);
    int32_t bias_ids[3] = {ref[0], ref[5], 13}, allowed[64];
    float bias_values[3] = {-100.0f, -3.0f, 2.0f};
    for (int i = 0; i < 64; i++) allowed[i] = ref[i] == ref[7] ? 13 : ref[i]; /* the output's tokens but one */
    p.sampling.bias_ids = bias_ids;
    p.sampling.bias_values = bias_values;
    p.sampling.n_bias = 3;
    p.sampling.allowed = allowed;
    p.sampling.n_allowed = 64;
    p.stop_ids[0] = ref[2];
    p.n_stop = 1;
    p.sampling.min_tokens = 20;
    for (int c = 0; c < 2; c++) {
        p.sampling.temperature = c ? 0.8f : 0.0f;
        p.sampling.seed = 11;
        p.speculate = false;
        int na, nb;
        int32_t *a = gen(&f, NULL, ids, n, &p, &na, NULL);
        ck_assert_int_ge(na, 20);
        for (int i = 0; i < na; i++) {
            ck_assert_msg(a[i] != ref[0] && a[i] != ref[7], "config %d: token %d is %d, biased / not allowed", c, i,
                          a[i]);
            ck_assert_msg(i >= 20 || a[i] != ref[2], "config %d: the stop id came at %d, before min_tokens", c, i);
        }
        p.speculate = true;
        p.num_draft = 4;
        p.verify = c ? SD_VERIFY_MATCH : SD_VERIFY_AUTO;
        int32_t *b = gen_overwritten(&f, pr, ids, n, &p, bias_ids, &nb);
        ck_assert_int_eq(na, nb);
        for (int j = 0; j < na; j++) ck_assert_msg(a[j] == b[j], "config %d: token %d differs", c, j);
        free(a);
        free(b);
    }
    char err[256];
    sd_req *r;
    ck_assert_int_eq(sd_req_new(f.eng, 3, ids, n, &p, &r, err, sizeof err), SD_OK);
    ck_assert_uint_eq(r->p.sampling.n_early_ban, 1); /* ignore_eos: the stop id only */
    sd_req_free(f.eng, r);
    p.ignore_eos = false;
    ck_assert_int_eq(sd_req_new(f.eng, 3, ids, n, &p, &r, err, sizeof err), SD_OK);
    ck_assert_uint_eq(r->p.sampling.n_early_ban, 1 + (uint32_t)sd_model_cfg(f.target)->n_eos);
    ck_assert(r->p.sampling.early_ban[0] == sd_model_cfg(f.target)->eos_token_ids[0]);
    sd_req_free(f.eng, r);
    bias_ids[1] = sd_model_cfg(f.target)->vocab_size;
    ck_assert_int_eq(sd_req_new(f.eng, 3, ids, n, &p, &r, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, "logit_bias") && strstr(err, "out of range"), "%s", err);
    free(ref);
    free(ids);
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* JSON output through the engine: refused without the token table; with it
 * every output is a JSON object prefix (complete when it stopped) and
 * speculative output (greedy; match at T 0.9) equals plain. */
/* JSON output, json_object (configs 0-3) and a schema (4-7): speculative ==
 * plain, and the output is a prefix of what the constraint allows (whole
 * unless max_tokens cut it). */
/* Speculative decoding with 4 drafts (config c: sampled rows matched when
 * odd) writes a[0..na), what plain decoding wrote with p. */
static void same_with_drafts(fixture *f, sd_proposer *pr, const int32_t *ids, int n, sd_req_params p, int c,
                             const int32_t *a, int na)
{
    int nb;
    p.speculate = true;
    p.num_draft = 4;
    p.verify = c % 2 ? SD_VERIFY_MATCH : SD_VERIFY_AUTO;
    int32_t *b = gen(f, pr, ids, n, &p, &nb, NULL);
    ck_assert_int_eq(na, nb);
    for (int j = 0; j < na; j++) ck_assert_msg(a[j] == b[j], "config %d: token %d differs", c, j);
    free(b);
}

/* A request with p's JSON or regex output is refused while the engine has
 * no token table; the demo's table, set on the engine, is returned (the
 * caller unsets and frees it). */
static sd_json_vocab *table_for_masks(fixture *f, const int32_t *ids, int n, const sd_req_params *p)
{
    char dir[512], err[256];
    sd_req *r;
    ck_assert_int_eq(sd_req_new(f->eng, 1, ids, n, p, &r, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, "tokenizer.json"), "%s", err);
    sd_json_vocab *jv;
    ck_assert_msg(sd_json_vocab_load(tu_model(dir, sizeof dir, "tinycode-16m"), sd_model_cfg(f->target), &jv, err,
                                     sizeof err) == SD_OK,
                  "%s", err);
    sd_engine_set_json_vocab(f->eng, jv);
    return jv;
}

START_TEST(json_output_exact)
{
    static const char schema[] =
        "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\", \"maxLength\": 12},"
        " \"n\": {\"type\": \"integer\"}, \"kind\": {\"enum\": [\"a\", \"bc\", 7]}, \"xs\": {\"type\": "
        "\"array\", \"items\": {\"type\": \"number\"}, \"maxItems\": 4}}, \"required\": [\"name\", \"kind\"]}";
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 1);
    char err[256];
    int n;
    int32_t *ids = encode(&f, PROMPTS[5], &n);
    sd_req_params p = sd_req_params_default();
    p.max_tokens = 96;
    p.sampling.json_object = true;
    sd_req *r;
    sd_json_vocab *jv = table_for_masks(&f, ids, n, &p);
    sd_json_schema *compiled;
    ck_assert_msg(sd_json_schema_parse(schema, strlen(schema), &compiled, err, sizeof err) == SD_OK, "%s", err);
    p.sampling.json_object = false;
    p.sampling.json_schema = "{\"type\": \"string\", \"pattern\": \"x\"}";
    ck_assert_int_eq(sd_req_new(f.eng, 1, ids, n, &p, &r, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, "'pattern' is not supported"), "%s", err);
    for (int c = 0; c < 8; c++) {
        free(ids);
        ids = encode(&f, PROMPTS[5 + c % 4], &n);
        p.sampling.json_object = c < 4;
        p.sampling.json_schema = c < 4 ? NULL : schema;
        p.sampling.temperature = c % 2 ? 0.9f : 0.0f;
        p.sampling.seed = 17;
        p.speculate = false;
        int na;
        int32_t *a = gen(&f, NULL, ids, n, &p, &na, NULL);
        char *text = NULL;
        size_t len = 0;
        ck_assert_int_eq(sd_tok_decode(f.tok, a, (size_t)na, true, &text, &len, err, sizeof err), SD_OK);
        sd_json_state st;
        sd_json_init_schema(&st, c < 4 ? NULL : compiled);
        ck_assert_msg(sd_json_feed(&st, text, len), "config %d: not a prefix of what may come: %s", c, text);
        ck_assert_msg(na == p.max_tokens || sd_json_complete(&st), "config %d: stopped before the end: %s", c, text);
        free(text);
        same_with_drafts(&f, pr, ids, n, p, c, a, na);
        free(a);
    }
    sd_json_schema_free(compiled);
    sd_engine_set_json_vocab(f.eng, NULL);
    sd_json_vocab_free(jv);
    free(ids);
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* Log-probabilities collected step by step (sd_engine_run's callback). */
typedef struct lp_log {
    sd_token_lp lp[256];
    int n;
} lp_log;

static void collect_lp(void *ctx, const sd_req *r)
{
    lp_log *l = ctx;
    for (int i = 0; i < r->n_new && l->n < 256; i++) l->lp[l->n++] = r->lp[i];
}

/* Runs one request with logprobs on, proposing with pr; fills log. */
static void gen_lp(fixture *f, sd_proposer *pr, const int32_t *ids, int n, const sd_req_params *p, lp_log *log,
                   int32_t *out)
{
    sd_req *r;
    char err[256];
    log->n = 0;
    ck_assert_msg(sd_req_new(f->eng, 9, ids, n, p, &r, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_int_eq(sd_engine_run(f->eng, pr, &r, 1, collect_lp, log, err, sizeof err), SD_OK);
    ck_assert_int_eq(log->n, sd_req_n_output(r));
    memcpy(out, sd_req_output(r), (size_t)log->n * sizeof *out);
    sd_req_free(f->eng, r);
}

/* The log-probabilities of every output token (and its top 5) are the same
 * with and without speculation — greedy with a repetition penalty (which
 * must not touch them) and seeded sampling with match verification — and
 * they are the target's: the chosen token's value is among the top ones
 * where it is the argmax, the top list descends and sums to at most 1. */
/* Output by a regular expression (regex_mask.h): every verified row masked
 * (and the drafts, draft.c), the output a text the expression matches (or
 * a prefix of one, cut by max_tokens), speculative == plain, greedy and
 * sampled. */
START_TEST(regex_output_exact)
{
    static const char *const patterns[] = {
        "\n    (return|raise|yield) [a-z_]{1,16}(\\([a-z_, ]{0,24}\\))?\n",
        "( {4}[a-z_]{1,12} = [a-z0-9_.()+*, -]{1,30}\n){1,4}",
        "(True|False|None|[0-9]{1,6})",
    };
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 1);
    char err[256];
    int n;
    int32_t *ids = encode(&f, PROMPTS[5], &n);
    sd_req_params p = sd_req_params_default();
    p.max_tokens = 64;
    p.sampling.regex = patterns[0];
    sd_req *r;
    sd_json_vocab *jv = table_for_masks(&f, ids, n, &p);
    p.sampling.regex = "(a)\\1";
    ck_assert_int_eq(sd_req_new(f.eng, 1, ids, n, &p, &r, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, "back-references"), "%s", err);
    for (int c = 0; c < 6; c++) {
        free(ids);
        ids = encode(&f, PROMPTS[6 + c], &n);
        const char *pattern = patterns[c % 3];
        p.sampling.regex = pattern;
        p.sampling.temperature = c % 2 ? 0.9f : 0.0f; /* sampled: verified by matching (token for token) */
        p.sampling.seed = 23;
        p.speculate = false;
        int na;
        int32_t *a = gen(&f, NULL, ids, n, &p, &na, NULL);
        char *text = NULL;
        size_t len = 0;
        ck_assert_int_eq(sd_tok_decode(f.tok, a, (size_t)na, true, &text, &len, err, sizeof err), SD_OK);
        sd_regex *rx;
        ck_assert_msg(sd_regex_compile(pattern, &rx, err, sizeof err) == SD_OK, "%s", err);
        sd_regex_state *st;
        ck_assert_int_eq(sd_regex_state_new(rx, &st, NULL, 0), SD_OK);
        ck_assert_msg(sd_regex_state_feed(st, text, len), "config %d: not a prefix of what may come: %s", c, text);
        ck_assert_msg(na == p.max_tokens || sd_regex_state_complete(st), "config %d: stopped before the end: %s", c,
                      text);
        sd_regex_state_free(st);
        sd_regex_free(rx);
        free(text);
        same_with_drafts(&f, pr, ids, n, p, c, a, na);
        free(a);
    }
    sd_engine_set_json_vocab(f.eng, NULL);
    sd_json_vocab_free(jv);
    free(ids);
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

START_TEST(logprobs_same_with_speculation)
{
    fixture f;
    open_demo(&f);
    sd_proposer *pr = demo_drafter(&f, 1);
    static lp_log a, b;
    int32_t oa[256], ob[256];
    for (int c = 0; c < 2; c++) {
        int n;
        int32_t *ids = encode(&f, PROMPTS[3 + c], &n);
        sd_req_params p = sd_req_params_default();
        p.max_tokens = 80;
        p.ignore_eos = true;
        p.logprobs = true;
        p.top_logprobs = 5;
        p.sampling.repetition_penalty = 1.3f;
        p.sampling.temperature = c == 0 ? 0.0f : 0.9f;
        p.sampling.seed = 3;
        gen_lp(&f, NULL, ids, n, &p, &a, oa);
        p.speculate = true;
        p.num_draft = 4;
        p.verify = c == 0 ? SD_VERIFY_AUTO : SD_VERIFY_MATCH;
        gen_lp(&f, pr, ids, n, &p, &b, ob);
        ck_assert_int_eq(a.n, b.n);
        ck_assert_mem_eq(oa, ob, (size_t)a.n * sizeof *oa);
        for (int j = 0; j < a.n; j++) {
            ck_assert_msg(a.lp[j].lp == b.lp[j].lp, "config %d token %d: %.9g vs %.9g", c, j, (double)a.lp[j].lp,
                          (double)b.lp[j].lp);
            ck_assert_mem_eq(a.lp[j].top_id, b.lp[j].top_id, 5 * sizeof(int32_t));
            ck_assert_mem_eq(a.lp[j].top_lp, b.lp[j].top_lp, 5 * sizeof(float));
            double sum = 0;
            for (int t = 0; t < 5; t++) {
                sum += exp(a.lp[j].top_lp[t]);
                if (t) ck_assert(a.lp[j].top_lp[t] <= a.lp[j].top_lp[t - 1]);
            }
            ck_assert(sum <= 1.0 + 1e-5 && a.lp[j].lp <= 0.0f);
            ck_assert(a.lp[j].lp <= a.lp[j].top_lp[0]);
        }
        free(ids);
    }
    sd_proposer_free(pr);
    close_fixture(&f);
}
END_TEST

/* Prompt log-probabilities: prefilling prompt + output with small chunks
 * gives, at the output's positions, the values decoding reported for them. */
START_TEST(prompt_logprobs_match_decoding)
{
    fixture f;
    open_demo(&f);
    static lp_log a;
    int32_t out[256], all[512];
    int n;
    int32_t *ids = encode(&f, PROMPTS[7], &n);
    sd_req_params p = sd_req_params_default();
    p.max_tokens = 40;
    p.ignore_eos = true;
    p.logprobs = true;
    p.top_logprobs = 3;
    gen_lp(&f, NULL, ids, n, &p, &a, out);
    memcpy(all, ids, (size_t)n * sizeof *ids);
    memcpy(all + n, out, (size_t)a.n * sizeof *out);
    sd_engine_opts eo = {.prefill_chunk = 7, .prefill_budget = 7};
    sd_engine *small;
    ck_assert_int_eq(sd_engine_new(f.target, &eo, &small, NULL, 0), SD_OK);
    sd_req *r;
    char err[256];
    p.prompt_logprobs = true;
    p.max_tokens = 1;
    ck_assert_int_eq(sd_req_new(small, 1, all, n + a.n, &p, &r, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_engine_run(small, NULL, &r, 1, NULL, NULL, err, sizeof err), SD_OK);
    for (int j = 0; j < a.n; j++) {
        const sd_token_lp *x = &r->prompt_lp[n + j], *y = &a.lp[j];
        ck_assert_msg(fabsf(x->lp - y->lp) < 1e-4f, "token %d: prompt %g, decoded %g", j, (double)x->lp, (double)y->lp);
        for (int t = 0; t < 3; t++) ck_assert(fabsf(x->top_lp[t] - y->top_lp[t]) < 1e-4f);
    }
    for (int j = 1; j < n; j++) ck_assert(r->prompt_lp[j].lp <= 0.0f && r->prompt_lp[j].lp > -50.0f);
    sd_req_free(small, r);
    sd_engine_free(small);
    free(ids);
    close_fixture(&f);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spec");
    TCase *tc = tcase_create("exact");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, greedy_demo_pair_20x256);
    tcase_add_test(tc, greedy_demo_pair_int8_p_min_20x256);
    tcase_add_test(tc, greedy_ngram_20x256);
    tcase_add_test(tc, self_draft_reference_models);
    tcase_add_test(tc, sampled_match_equals_plain);
    tcase_add_test(tc, adaptive_run_equals_plain);
    tcase_add_test(tc, batched_requests_equal_single);
    tcase_add_test(tc, sampled_batch_verified_in_parallel_equals_alone);
    tcase_add_test(tc, shared_prefixes_equal_alone);
    tcase_add_test(tc, rejection_mode_runs);
    tcase_add_test(tc, stops_and_exhaustion);
    tcase_add_test(tc, logits_processors_exact);
    tcase_add_test(tc, json_output_exact);
    tcase_add_test(tc, regex_output_exact);
    tcase_add_test(tc, logprobs_same_with_speculation);
    tcase_add_test(tc, prompt_logprobs_match_decoding);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
