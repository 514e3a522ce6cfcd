/* test_model.c — the CPU forward pass against Hugging Face transformers.
 *
 * Golden data: tests/fixtures/models/<name>/{reference.json, ref_logits.f32},
 * computed by transformers 5.17 on CPU from the same checkpoints (see
 * tests/fixtures/REFERENCE.md). Checks: logits of one pass over input_ids
 * (max |diff| <= 1e-4 for F32 checkpoints; for the BF16 one, whose reference
 * ran in bf16 end to end, <= 0.05 absolute), greedy continuation equal to
 * greedy_output, and batch invariance: logits bit-identical whether the
 * sequence is computed in one pass, one token at a time, or in odd spans
 * batched together with another sequence. */
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "engine.h"
#include "model.h"
#include "sampler.h"
#include "testutil.h"

typedef struct ref_case {
    int32_t *input;
    int n_input;
    int32_t *gprompt;
    int n_gprompt;
    int32_t *gout;
    int n_gout;
    float *logits; /* [n_input, vocab] */
    int vocab;
} ref_case;

static int32_t *json_ids(json_t *arr, int *n)
{
    *n = (int)json_array_size(arr);
    int32_t *ids = malloc((size_t)*n * sizeof *ids);
    for (int i = 0; i < *n; i++) ids[i] = (int32_t)json_integer_value(json_array_get(arr, (size_t)i));
    return ids;
}

static void load_ref(const char *name, ref_case *rc)
{
    char path[512], rel[256];
    snprintf(rel, sizeof rel, "models/%s/reference.json", name);
    json_error_t je;
    json_t *root = json_load_file(tu_fixture(path, sizeof path, rel), 0, &je);
    ck_assert_msg(root != NULL, "cannot read %s: %s", path, je.text);
    rc->input = json_ids(json_object_get(root, "input_ids"), &rc->n_input);
    rc->gprompt = json_ids(json_object_get(root, "greedy_prompt"), &rc->n_gprompt);
    rc->gout = json_ids(json_object_get(root, "greedy_output"), &rc->n_gout);
    rc->vocab = (int)json_integer_value(json_array_get(json_object_get(root, "logits_shape"), 1));
    json_decref(root);
    snprintf(rel, sizeof rel, "models/%s/ref_logits.f32", name);
    size_t len;
    rc->logits = (float *)tu_read_file(tu_fixture(path, sizeof path, rel), &len);
    ck_assert_ptr_nonnull(rc->logits);
    ck_assert_uint_eq(len, (size_t)rc->n_input * rc->vocab * sizeof(float));
}

static void free_ref(ref_case *rc)
{
    free(rc->input);
    free(rc->gprompt);
    free(rc->gout);
    free(rc->logits);
}

static void check_logits(const char *name, double tol)
{
    ref_case rc;
    load_ref(name, &rc);
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *m = tu_open_model(name, be, rc.n_input);
    float *out = malloc((size_t)rc.n_input * rc.vocab * sizeof(float));
    sd_kv_seq seq;
    sd_kv_seq_init(&seq);
    tu_forward(m, &seq, rc.input, rc.n_input, 0, out);
    double maxd = 0;
    for (size_t i = 0; i < (size_t)rc.n_input * rc.vocab; i++) {
        double d = fabs((double)out[i] - rc.logits[i]);
        if (d > maxd) maxd = d;
    }
    fprintf(stderr, "%s: max |logit - ref| = %.3g (tolerance %.3g)\n", name, maxd, tol);
    ck_assert_msg(maxd <= tol, "%s: max diff %g > %g", name, maxd, tol);
    sd_kv_seq_release(sd_model_kv_pool(m), &seq);
    ck_assert_int_eq(sd_kv_pool_free_count(sd_model_kv_pool(m)), sd_kv_pool_total(sd_model_kv_pool(m)));
    free(out);
    sd_model_free(m);
    sd_backend_free(be);
    free_ref(&rc);
}

static void check_greedy(const char *name)
{
    ref_case rc;
    load_ref(name, &rc);
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *m = tu_open_model(name, be, rc.n_gprompt + rc.n_gout);
    float *out = malloc((size_t)rc.n_gprompt * rc.vocab * sizeof(float));
    sd_kv_seq seq;
    sd_kv_seq_init(&seq);
    tu_forward(m, &seq, rc.gprompt, rc.n_gprompt, 0, out);
    int32_t tok = sd_argmax(out + (size_t)(rc.n_gprompt - 1) * rc.vocab, rc.vocab);
    for (int i = 0; i < rc.n_gout; i++) {
        ck_assert_msg(tok == rc.gout[i], "%s: greedy token %d is %d, reference %d", name, i, tok, rc.gout[i]);
        tu_forward(m, &seq, &tok, 1, rc.n_gprompt + i, out);
        tok = sd_argmax(out, rc.vocab);
    }
    sd_kv_seq_release(sd_model_kv_pool(m), &seq);
    free(out);
    sd_model_free(m);
    sd_backend_free(be);
    free_ref(&rc);
}

START_TEST(logits_qwen3) { check_logits("qwen3-tiny", 1e-4); }
END_TEST
START_TEST(logits_qwen2) { check_logits("qwen2-tiny", 1e-4); }
END_TEST
START_TEST(logits_llama3) { check_logits("llama3-tiny", 1e-4); }
END_TEST
START_TEST(logits_qwen3_bf16_sharded) { check_logits("qwen3-tiny-bf16-sharded", 0.05); }
END_TEST
START_TEST(greedy_qwen3) { check_greedy("qwen3-tiny"); }
END_TEST
START_TEST(greedy_qwen2) { check_greedy("qwen2-tiny"); }
END_TEST
START_TEST(greedy_llama3) { check_greedy("llama3-tiny"); }
END_TEST
START_TEST(greedy_qwen3_bf16_sharded) { check_greedy("qwen3-tiny-bf16-sharded"); }
END_TEST

/* Logits of `ids` computed three ways must be bit-identical; the batched
 * way runs them beside the reversed ids (testutil.h). */
static void check_invariance(sd_model *m, const int32_t *ids, int n)
{
    int32_t *other = malloc((size_t)n * sizeof *other);
    for (int i = 0; i < n; i++) other[i] = ids[n - 1 - i];
    tu_check_batch_invariance(m, ids, other, n);
    free(other);
}

START_TEST(batch_invariance_f32)
{
    ref_case rc;
    load_ref("qwen3-tiny", &rc);
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *m = tu_open_model("qwen3-tiny", be, 2 * 80);
    check_invariance(m, rc.input, 80);
    sd_model_free(m);
    sd_backend_free(be);
    free_ref(&rc);
}
END_TEST

START_TEST(batch_invariance_demo_bf16)
{
    char path[512], err[512];
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *m = NULL;
    ck_assert_int_eq(sd_model_load(tu_model(path, sizeof path, "tinycode-16m"), be, &m, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_model_kv_init(m, 32, 16, err, sizeof err), SD_OK);
    int32_t ids[60];
    for (int i = 0; i < 60; i++) ids[i] = (int32_t)((i * 2654435761u) % 8192);
    check_invariance(m, ids, 60);
    sd_model_free(m);
    sd_backend_free(be);
}
END_TEST

/* Logits of every position of ids, token by token (decode steps), on a KV
 * cache of type t: [n, vocab] into out. */
static void decode_logits(sd_model *m, sd_kv_dtype t, const int32_t *ids, int n, float *out)
{
    char err[256];
    sd_model_set_kv_dtype(m, t);
    ck_assert_int_eq(sd_model_kv_init(m, 8, 16, err, sizeof err), SD_OK);
    sd_kv_seq s;
    sd_kv_seq_init(&s);
    for (int i = 0; i < n; i++) tu_forward(m, &s, ids + i, 1, i, out + (size_t)i * sd_model_cfg(m)->vocab_size);
    sd_kv_seq_release(sd_model_kv_pool(m), &s);
}

/* KV element types: auto is bf16 for the bf16 demo model, whose logits on a
 * bf16 cache equal the f32 cache's bit for bit; an f32 model stays f32 under
 * auto, and a bf16 cache for it (half the bytes) moves its logits a little. */
START_TEST(kv_dtypes)
{
    char path[512], err[512];
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *m = NULL;
    ck_assert_int_eq(sd_model_load(tu_model(path, sizeof path, "tinycode-16m"), be, &m, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_model_kv_dtype(m), SD_DTYPE_BF16);
    size_t bf16_bytes = sd_model_kv_bytes_per_position(m);
    enum { N = 40 };
    int32_t ids[N];
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 2654435761u) % 8192);
    size_t V = (size_t)sd_model_cfg(m)->vocab_size;
    float *a = malloc(N * V * sizeof *a), *b = malloc(N * V * sizeof *b);
    decode_logits(m, SD_KV_F32, ids, N, a);
    ck_assert_int_eq(sd_model_kv_dtype(m), SD_DTYPE_F32);
    ck_assert_uint_eq(sd_model_kv_bytes_per_position(m), 2 * bf16_bytes);
    decode_logits(m, SD_KV_AUTO, ids, N, b);
    ck_assert_int_eq(sd_model_kv_dtype(m), SD_DTYPE_BF16);
    ck_assert_msg(memcmp(a, b, N * V * sizeof *a) == 0, "bf16 model: bf16 KV logits != f32 KV logits");
    sd_model_free(m);
    free(a);
    free(b);

    m = tu_open_model("qwen3-tiny", be, 64);
    ck_assert_int_eq(sd_model_kv_dtype(m), SD_DTYPE_F32);
    V = (size_t)sd_model_cfg(m)->vocab_size;
    a = malloc(N * V * sizeof *a), b = malloc(N * V * sizeof *b);
    for (int i = 0; i < N; i++) ids[i] = (int32_t)((i * 7919u + 3) % V);
    decode_logits(m, SD_KV_F32, ids, N, a);
    decode_logits(m, SD_KV_BF16, ids, N, b);
    double maxd = 0;
    for (size_t i = 0; i < N * V; i++) maxd = fmax(maxd, fabs((double)a[i] - b[i]));
    ck_assert_msg(maxd > 0 && maxd < 0.05, "f32 model, bf16 KV: max logit change %g", maxd);
    sd_model_free(m);
    free(a);
    free(b);
    ck_assert_int_eq(sd_kv_dtype_parse("auto"), SD_KV_AUTO);
    ck_assert_int_eq(sd_kv_dtype_parse("bf16"), SD_KV_BF16);
    ck_assert_int_eq(sd_kv_dtype_parse("float32"), SD_KV_F32);
    ck_assert_int_eq(sd_kv_dtype_parse("fp8"), -1);
    /* --max-model-len: the served context capped, not raised */
    ck_assert_int_eq(sd_model_cap_context(m = tu_open_model("qwen3-tiny", be, 64), 0, err, sizeof err), SD_ERR_ARG);
    int full = sd_model_cfg(m)->max_position;
    ck_assert_int_eq(sd_model_cap_context(m, full + 1, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "max_position_embeddings"));
    ck_assert_int_eq(sd_model_cap_context(m, 8, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_model_cfg(m)->max_position, 8);
    sd_kv_seq s;
    sd_kv_seq_init(&s);
    ck_assert_int_eq(sd_kv_reserve(sd_model_kv_pool(m), &s, 10), SD_OK);
    int32_t ten[10] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
    sd_batch_seq past = {ten, 10, 0, &s, 1, NULL, NULL, NULL};
    float *lg = malloc((size_t)sd_model_cfg(m)->vocab_size * sizeof *lg);
    ck_assert_int_eq(sd_model_forward(m, &past, 1, lg, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "beyond the context of 8"));
    free(lg);
    sd_kv_seq_release(sd_model_kv_pool(m), &s);
    sd_model_free(m);
    sd_backend_free(be);
}
END_TEST

/* Sequences whose rows go out as their argmax (a run of two): the argmax of
 * the rows the other pass wrote as logits, and the other sequence's logits
 * rows packed without them. */
START_TEST(argmax_rows)
{
    char err[256];
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *m = tu_open_model("qwen3-tiny", be, 3 * 48);
    sd_kv_pool *pool = sd_model_kv_pool(m);
    size_t V = (size_t)sd_model_cfg(m)->vocab_size;
    int32_t ids[3][8];
    for (int q = 0; q < 3; q++)
        for (int i = 0; i < 8; i++) ids[q][i] = (int32_t)((q * 977 + i * 7919 + 1) % V);
    float *all = malloc(3 * 4 * V * sizeof *all), *some = malloc(2 * 4 * V * sizeof *some);
    int32_t amax[2][4];
    for (int pass = 0; pass < 2; pass++) {
        sd_kv_seq kv[3];
        sd_batch_seq b[3];
        for (int q = 0; q < 3; q++) {
            sd_kv_seq_init(&kv[q]);
            ck_assert_int_eq(sd_kv_reserve(pool, &kv[q], 8), SD_OK);
            b[q] = (sd_batch_seq){ids[q], 8, 0, &kv[q], 4, NULL, NULL, NULL};
        }
        if (pass) b[1].argmax = amax[0], b[2].argmax = amax[1]; /* a run of two */
        ck_assert_msg(sd_model_forward(m, b, 3, pass ? some : all, err, sizeof err) == SD_OK, "%s", err);
        for (int q = 0; q < 3; q++) sd_kv_seq_release(pool, &kv[q]);
    }
    for (int q = 0; q < 2; q++)
        for (int r = 0; r < 4; r++) ck_assert_int_eq(amax[q][r], sd_argmax(all + (4 * (q + 1) + r) * V, (int)V));
    ck_assert(memcmp(some, all, 4 * V * sizeof *all) == 0);
    free(all);
    free(some);
    sd_model_free(m);
    sd_backend_free(be);
}
END_TEST

/* Logits of the last position after n tokens of ids (one pass). */
static void last_logits(sd_model *m, const int32_t *ids, int n, float *out)
{
    char err[256];
    sd_kv_seq s;
    sd_kv_seq_init(&s);
    ck_assert_int_eq(sd_kv_reserve(sd_model_kv_pool(m), &s, n), SD_OK);
    sd_batch_seq b = {ids, n, 0, &s, 1, NULL, NULL, NULL};
    ck_assert_msg(sd_model_forward(m, &b, 1, out, err, sizeof err) == SD_OK, "%s", err);
    sd_kv_seq_release(sd_model_kv_pool(m), &s);
}

/* Random weights of a config's shapes: the same bytes per token as the
 * checkpoint of that config, finite logits, the same logits for the same
 * seed and others for another; a bad config path is an error. */
START_TEST(random_weights)
{
    char dir[512], cfg[600], err[512];
    tu_model(dir, sizeof dir, "tinycode-16m");
    snprintf(cfg, sizeof cfg, "%s/config.json", dir);
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *ck = NULL, *a = NULL, *b = NULL, *c = NULL;
    ck_assert_int_eq(sd_model_load(dir, be, &ck, err, sizeof err), SD_OK);
    ck_assert_msg(sd_model_random(cfg, 1, be, &a, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_int_eq(sd_model_random(cfg, 1, be, &b, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_model_random(cfg, 2, be, &c, err, sizeof err), SD_OK);
    ck_assert_uint_eq(sd_model_weight_bytes(a), sd_model_weight_bytes(ck));
    ck_assert_int_eq(sd_model_act_bf16(a), sd_model_act_bf16(ck));
    int vocab = sd_model_cfg(a)->vocab_size;
    float *la = malloc((size_t)vocab * 4), *lb = malloc((size_t)vocab * 4), *lc = malloc((size_t)vocab * 4);
    int32_t ids[12];
    for (int i = 0; i < 12; i++) ids[i] = (int32_t)((i * 7919 + 5) % vocab);
    sd_model *ms[3] = {a, b, c};
    float *ls[3] = {la, lb, lc};
    for (int i = 0; i < 3; i++) {
        ck_assert_int_eq(sd_model_kv_init(ms[i], 4, 16, err, sizeof err), SD_OK);
        last_logits(ms[i], ids, 12, ls[i]);
    }
    int differ = 0;
    for (int v = 0; v < vocab; v++) {
        ck_assert(isfinite(la[v]));
        differ += la[v] != lc[v];
    }
    ck_assert_int_eq(memcmp(la, lb, (size_t)vocab * 4), 0);
    ck_assert_int_gt(differ, vocab / 2);
    for (int i = 0; i < 3; i++) sd_model_free(ms[i]);
    sd_model_free(ck);
    sd_model *bad = (sd_model *)1;
    ck_assert_int_eq(sd_model_random("/nonexistent/config.json", 1, be, &bad, err, sizeof err), SD_ERR_IO);
    ck_assert_ptr_null(bad);
    ck_assert_ptr_nonnull(strstr(err, "/nonexistent/config.json"));
    free(la);
    free(lb);
    free(lc);
    sd_backend_free(be);
}
END_TEST

START_TEST(bad_batches_rejected)
{
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(1, &be, NULL, 0), SD_OK);
    sd_model *m = tu_open_model("qwen3-tiny", be, 32);
    sd_kv_pool *pool = sd_model_kv_pool(m);
    sd_kv_seq s;
    sd_kv_seq_init(&s);
    ck_assert_int_eq(sd_kv_reserve(pool, &s, 4), SD_OK);
    float out[4 * 512];
    char err[256] = "";
    int32_t bad[4] = {1, 2, 512, 3};
    sd_batch_seq b = {bad, 4, 0, &s, 1, NULL, NULL, NULL};
    ck_assert_int_eq(sd_model_forward(m, &b, 1, out, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "512"));
    int32_t ok[4] = {1, 2, 3, 4};
    sd_batch_seq beyond = {ok, 4, 14, &s, 1, NULL, NULL, NULL}; /* reserved 16 positions, needs 18 */
    ck_assert_int_eq(sd_model_forward(m, &beyond, 1, out, err, sizeof err), SD_ERR_ARG);
    sd_kv_seq_release(pool, &s);
    sd_model_free(m);
    m = NULL;
    ck_assert_int_ne(sd_model_load("/nonexistent/model", be, &m, err, sizeof err), SD_OK);
    ck_assert_ptr_null(m);
    ck_assert(strlen(err) > 0);
    sd_backend_free(be);
}
END_TEST

/* A backend's host memory, counted (host_alloc fails while g_host_fail). */
static int g_host_allocs, g_host_frees, g_host_fail;

static void *count_alloc(sd_backend *be, size_t bytes)
{
    (void)be;
    if (g_host_fail) return NULL;
    g_host_allocs++;
    return malloc(bytes);
}

static void count_free(sd_backend *be, void *p)
{
    (void)be;
    g_host_frees += p != NULL;
    free(p);
}

/* sd_model_logits_grow: malloc without a host_alloc; with one, its memory up
 * to SD_LOGITS_PINNED_MAX bytes, malloc beyond or when it fails; every
 * buffer back through host_free; geometric growth; nothing changed when out
 * of memory. */
START_TEST(logits_buffers)
{
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(1, &be, NULL, 0), SD_OK);
    sd_model *m = tu_open_model("qwen3-tiny", be, 32);
    size_t V = (size_t)sd_model_cfg(m)->vocab_size, cap = 0;
    float *buf = NULL;
    ck_assert_int_eq(sd_model_logits_grow(m, &buf, &cap, 3), SD_OK);
    ck_assert_uint_ge(cap, 3);
    buf[3 * V - 1] = 1.0f;
    float *same = buf;
    ck_assert_int_eq(sd_model_logits_grow(m, &buf, &cap, 2), SD_OK);
    ck_assert_ptr_eq(buf, same);
    ck_assert_int_eq(sd_model_logits_grow(m, &buf, &cap, cap + 1), SD_OK);
    ck_assert_uint_ge(cap, 6);
    memset(buf, 0, cap * V * sizeof *buf);
    sd_model_logits_free(m, buf);

    sd_backend_ops ops = *be->ops;
    ops.host_alloc = count_alloc;
    ops.host_free = count_free;
    const sd_backend_ops *cpu = be->ops;
    be->ops = &ops;
    buf = NULL;
    cap = 0;
    ck_assert_int_eq(sd_model_logits_grow(m, &buf, &cap, 4), SD_OK);
    ck_assert_int_eq(sd_model_logits_grow(m, &buf, &cap, 5), SD_OK);
    ck_assert_int_eq(g_host_allocs, 2);
    ck_assert_int_eq(g_host_frees, 1);
    size_t big = SD_LOGITS_PINNED_MAX / (V * sizeof(float)) + 1;
    ck_assert_int_eq(sd_model_logits_grow(m, &buf, &cap, big), SD_OK);
    ck_assert_int_eq(g_host_allocs, 2); /* past the limit: malloc */
    ck_assert_uint_ge(cap, big);
    buf[big * V - 1] = 2.0f;
    sd_model_logits_free(m, buf);
    ck_assert_int_eq(g_host_frees, 3);
    g_host_fail = 1;
    buf = NULL;
    cap = 0;
    ck_assert_int_eq(sd_model_logits_grow(m, &buf, &cap, 2), SD_OK); /* host_alloc failed: malloc */
    ck_assert_ptr_nonnull(buf);
    ck_assert_int_eq(g_host_allocs, 2);
    float *kept = buf;
    ck_assert_int_eq(sd_model_logits_grow(m, &buf, &cap, SIZE_MAX / 2), SD_ERR_NOMEM);
    ck_assert_ptr_eq(buf, kept);
    ck_assert_uint_eq(cap, 2);
    sd_model_logits_free(m, buf);
    ck_assert_int_eq(g_host_frees, 4);
    be->ops = cpu;
    sd_model_free(m);
    sd_backend_free(be);
}
END_TEST

/* Prompt log-probabilities through the engine (chunked prefill, top 5) equal
 * log-softmax of Hugging Face's logits: the oracle for the values the API
 * reports. */
START_TEST(prompt_logprobs_reference)
{
    ref_case rc;
    load_ref("qwen3-tiny", &rc);
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *m = tu_open_model("qwen3-tiny", be, rc.n_input + 2);
    sd_engine_opts eo = {.prefill_chunk = 64, .prefill_budget = 64};
    sd_engine *e;
    ck_assert_int_eq(sd_engine_new(m, &eo, &e, NULL, 0), SD_OK);
    sd_req_params p = sd_req_params_default();
    p.max_tokens = 1;
    p.logprobs = p.prompt_logprobs = true;
    p.top_logprobs = 5;
    sd_req *r;
    char err[256];
    ck_assert_int_eq(sd_req_new(e, 1, rc.input, rc.n_input, &p, &r, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_engine_run(e, NULL, &r, 1, NULL, NULL, err, sizeof err), SD_OK);
    double maxd = 0;
    for (int pos = 1; pos < rc.n_input; pos++) {
        const float *ref = rc.logits + (size_t)(pos - 1) * rc.vocab;
        double mx = -INFINITY, sum = 0;
        for (int v = 0; v < rc.vocab; v++) mx = ref[v] > mx ? ref[v] : mx;
        for (int v = 0; v < rc.vocab; v++) sum += exp(ref[v] - mx);
        double lse = mx + log(sum);
        const sd_token_lp *x = &r->prompt_lp[pos];
        double d = fabs(x->lp - (ref[rc.input[pos]] - lse));
        for (int t = 0; t < 5; t++) d = fmax(d, fabs(x->top_lp[t] - (ref[x->top_id[t]] - lse)));
        if (d > maxd) maxd = d;
    }
    fprintf(stderr, "prompt logprobs: max |lp - ref| = %.3g over %d positions\n", maxd, rc.n_input - 1);
    ck_assert_msg(maxd <= 2e-4, "prompt logprobs differ from the reference by %g", maxd);
    sd_req_free(e, r);
    sd_engine_free(e);
    sd_model_free(m);
    sd_backend_free(be);
    free_ref(&rc);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("reference");
    tcase_set_timeout(tc, 300);
    tcase_add_test(tc, logits_qwen3);
    tcase_add_test(tc, logits_qwen2);
    tcase_add_test(tc, logits_llama3);
    tcase_add_test(tc, logits_qwen3_bf16_sharded);
    tcase_add_test(tc, greedy_qwen3);
    tcase_add_test(tc, greedy_qwen2);
    tcase_add_test(tc, greedy_llama3);
    tcase_add_test(tc, greedy_qwen3_bf16_sharded);
    tcase_add_test(tc, batch_invariance_f32);
    tcase_add_test(tc, batch_invariance_demo_bf16);
    tcase_add_test(tc, kv_dtypes);
    tcase_add_test(tc, argmax_rows);
    tcase_add_test(tc, bad_batches_rejected);
    tcase_add_test(tc, logits_buffers);
    tcase_add_test(tc, random_weights);
    tcase_add_test(tc, prompt_logprobs_reference);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
