/* test_draft.c — the draft-model proposer on the demo drafter tinycode-3m.
 *
 * Checks: greedy drafts equal plain greedy decoding with the same model
 * (token by token through sd_model_forward; the CPU backend is batch
 * invariant, so bit-exact); the KV mirror re-synchronises after a partial
 * accept exactly as a fresh proposer would; a batch of contexts equals the
 * same contexts proposed one by one; sampled drafts are reproducible from
 * the seed and come with valid q; KV exhaustion and an over-long context
 * give no draft without disturbing other items; pool accounting returns to
 * full after release; the tokenizer compatibility check; the warm-up
 * (sd_draft_warm_up) leaves nothing behind but reclaimable cached blocks. */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "draft.h"
#include "model.h"
#include "json_mask.h"
#include "regex_mask.h"
#include "model_config.h"
#include "sampler.h"
#include "tokenizer.h"
#include "testutil.h"

static const char *TEXTS[] = {
    "def fibonacci(n):\n    if n < 2:\n        return n\n",
    "import os\nimport sys\n\nfor line in open(sys.argv[1]):\n",
    "class Stack:\n    def __init__(self):\n        self.items = []\n",
};

static const char *drafter_dir(char *buf, size_t n) { return tu_model(buf, n, "tinycode-3m"); }

/* Encodes TEXTS[i] with the drafter's tokenizer; *n receives the length. */
static int32_t *encode(int i, int *n)
{
    char dir[512], path[600], err[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", drafter_dir(dir, sizeof dir));
    sd_tok *tok = NULL;
    ck_assert_msg(sd_tok_load(path, &tok, err, sizeof err) == SD_OK, "tokenizer: %s", err);
    int32_t *ids = NULL;
    size_t len = 0;
    ck_assert(sd_tok_encode(tok, TEXTS[i], strlen(TEXTS[i]), false, &ids, &len, err, sizeof err) == SD_OK);
    sd_tok_free(tok);
    ck_assert_uint_gt(len, 4);
    *n = (int)len;
    return ids;
}

/* A drafter with the checkpoint's weights (quant, p_min and the prefix cache as given; they have
 * their own tests below). */
static sd_proposer *make_c(int max_seqs, int max_context, int quant, float p_min, bool prefix_cache)
{
    char dir[512], err[512];
    sd_draft_opts o = sd_draft_opts_default();
    o.quant = quant;
    o.p_min = p_min;
    o.n_threads = 2;
    o.max_seqs = max_seqs;
    o.max_context = max_context;
    o.no_prefix_cache = !prefix_cache;
    sd_proposer *p = NULL;
    sd_status st = sd_draft_new(drafter_dir(dir, sizeof dir), &o, &p, err, sizeof err);
    ck_assert_msg(st == SD_OK, "draft_new: %s", err);
    ck_assert_ptr_nonnull(sd_draft_model(p));
    return p;
}

static sd_proposer *make_q(int max_seqs, int max_context, int quant, float p_min)
{
    return make_c(max_seqs, max_context, quant, p_min, true);
}

static sd_proposer *make(int max_seqs, int max_context)
{
    return make_q(max_seqs, max_context, SD_DRAFT_QUANT_NONE, 0.0f);
}

static void propose1(sd_proposer *p, uint64_t id, const int32_t *ctx, int n, int k, sd_proposal *out)
{
    sd_propose_item it = {.seq_id = id, .context = ctx, .n_context = n, .k = k};
    char err[512];
    sd_status st = p->ops->propose(p, &it, 1, out, err, sizeof err);
    ck_assert_msg(st == SD_OK, "propose: %s", err);
}

static void pool_full(sd_proposer *p)
{
    sd_kv_pool *pool = sd_model_kv_pool(sd_draft_model(p));
    ck_assert_int_eq(sd_kv_pool_free_count(pool), sd_kv_pool_total(pool));
}

/* Plain greedy decoding of k tokens after ctx with a separately loaded
 * model (int8-quantised when q8). */
static void plain_greedy_q(const int32_t *ctx, int n, int k, int32_t *out, int q8)
{
    char dir[512], err[512];
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(2, &be, NULL, 0), SD_OK);
    sd_model *m = NULL;
    ck_assert_msg(sd_model_load(drafter_dir(dir, sizeof dir), be, &m, err, sizeof err) == SD_OK, "%s", err);
    if (q8) ck_assert_msg(sd_model_quantize_q8(m, err, sizeof err) == SD_OK, "%s", err);
    ck_assert(sd_model_kv_init(m, (n + k + 15) / 16 + 1, 16, err, sizeof err) == SD_OK);
    sd_kv_pool *pool = sd_model_kv_pool(m);
    int vocab = sd_model_cfg(m)->vocab_size;
    float *logits = malloc((size_t)vocab * sizeof *logits);
    sd_kv_seq seq;
    sd_kv_seq_init(&seq);
    int32_t tok = -1;
    for (int pos = 0; pos < n + k - 1; pos++) {
        int32_t in = pos < n ? ctx[pos] : tok;
        ck_assert_int_eq(sd_kv_reserve(pool, &seq, 1), SD_OK);
        sd_batch_seq b = {&in, 1, pos, &seq, 1, NULL, NULL, NULL};
        ck_assert_msg(sd_model_forward(m, &b, 1, logits, err, sizeof err) == SD_OK, "%s", err);
        sd_kv_commit(pool, &seq, 1);
        if (pos >= n - 1) out[pos - (n - 1)] = tok = sd_argmax(logits, vocab);
    }
    sd_kv_seq_release(pool, &seq);
    free(logits);
    sd_model_free(m);
    sd_backend_free(be);
}

static void plain_greedy(const int32_t *ctx, int n, int k, int32_t *out) { plain_greedy_q(ctx, n, k, out, 0); }

START_TEST(greedy_equals_plain)
{
    int n;
    int32_t *ctx = encode(0, &n);
    sd_proposer *p = make(2, 256);
    sd_proposal out;
    propose1(p, 7, ctx, n, 8, &out);
    ck_assert_int_eq(out.n, 8);
    int32_t ref[8];
    plain_greedy(ctx, n, 8, ref);
    for (int i = 0; i < 8; i++)
        ck_assert_msg(out.tokens[i] == ref[i], "draft %d: %d vs plain %d", i, out.tokens[i], ref[i]);
    for (int i = 0; i < 8; i++) ck_assert_ptr_null(out.q[i]);
    p->ops->release(p, 7);
    pool_full(p);
    sd_proposer_free(p);
    free(ctx);
}
END_TEST

/* ctx2 = ctx + first `acc` drafts + a token different from draft acc. */
static int32_t *partial_accept(const int32_t *ctx, int n, const sd_proposal *d, int acc, int *n2)
{
    int32_t *c = malloc((size_t)(n + acc + 1) * sizeof *c);
    memcpy(c, ctx, (size_t)n * sizeof *c);
    memcpy(c + n, d->tokens, (size_t)acc * sizeof *c);
    c[n + acc] = (d->tokens[acc] + 1) % 4096;
    *n2 = n + acc + 1;
    return c;
}

static void same_as_fresh(sd_proposer *p, uint64_t id, const int32_t *ctx, int n, int k)
{
    sd_proposal a, b;
    propose1(p, id, ctx, n, k, &a);
    sd_proposer *fresh = make(1, 256);
    propose1(fresh, 1, ctx, n, k, &b);
    ck_assert_int_eq(a.n, b.n);
    for (int i = 0; i < a.n; i++) ck_assert_int_eq(a.tokens[i], b.tokens[i]);
    fresh->ops->release(fresh, 1);
    pool_full(fresh);
    sd_proposer_free(fresh);
}

/* Mirrors reuse cached prefixes (kv_pool.h): a new mirror whose context
 * starts like another's — live, or released — takes its KV blocks and
 * drafts exactly what a drafter without the cache drafts; rolling a mirror
 * back into a shared block leaves the other's intact. */
START_TEST(cached_prefixes_draft_the_same)
{
    int n0, n1, n2;
    int32_t *a = encode(0, &n0), *b = encode(1, &n1), *c = encode(2, &n2);
    int n = n0 + n1 + n2;
    int32_t *ctx = malloc((size_t)(n + 8) * sizeof *ctx);
    memcpy(ctx, a, (size_t)n0 * sizeof *ctx);
    memcpy(ctx + n0, b, (size_t)n1 * sizeof *ctx);
    memcpy(ctx + n0 + n1, c, (size_t)n2 * sizeof *ctx);
    ck_assert_int_gt(n, 40);
    sd_proposer *off = make_c(6, 256, SD_DRAFT_QUANT_NONE, 0.0f, false), *on = make(6, 256);
    sd_kv_pool *pon = sd_model_kv_pool(sd_draft_model(on)), *poff = sd_model_kv_pool(sd_draft_model(off));
    /* ids 1, 2: the same context; 3: longer; then 2 rolls back into a shared block */
    const int lens[] = {n, n, n - 5};
    for (int id = 1; id <= 3; id++) {
        sd_proposal x, y;
        propose1(on, (uint64_t)id, ctx, lens[id - 1], 6, &x);
        propose1(off, (uint64_t)id, ctx, lens[id - 1], 6, &y);
        ck_assert_int_eq(x.n, y.n);
        for (int i = 0; i < x.n; i++) ck_assert_msg(x.tokens[i] == y.tokens[i], "id %d draft %d", id, i);
    }
    ck_assert_int_lt(sd_kv_pool_total(pon) - sd_kv_pool_free_count(pon),
                     sd_kv_pool_total(poff) - sd_kv_pool_free_count(poff)); /* fewer blocks held */
    int n2b;
    sd_proposal d;
    propose1(on, 2, ctx, n, 6, &d);
    int32_t *ctx2 = partial_accept(ctx, n - 20, &d, 0, &n2b); /* back into the shared blocks */
    same_as_fresh(on, 2, ctx2, n2b, 6);
    same_as_fresh(on, 1, ctx, n, 6);
    for (int id = 1; id <= 3; id++) {
        on->ops->release(on, (uint64_t)id);
        off->ops->release(off, (uint64_t)id);
    }
    ck_assert_int_gt(sd_kv_pool_cached_count(pon), 0); /* kept after the release */
    ck_assert_int_eq(sd_kv_pool_cached_count(poff), 0);
    sd_proposal x, y;
    propose1(on, 9, ctx, n, 6, &x);
    propose1(off, 9, ctx, n, 6, &y);
    for (int i = 0; i < x.n; i++) ck_assert_int_eq(x.tokens[i], y.tokens[i]);
    on->ops->release(on, 9);
    off->ops->release(off, 9);
    pool_full(on);
    pool_full(off);
    sd_proposer_free(on);
    sd_proposer_free(off);
    free(ctx);
    free(ctx2);
    free(a);
    free(b);
    free(c);
}
END_TEST

START_TEST(resync_after_partial_accept)
{
    int n;
    int32_t *ctx = encode(1, &n);
    sd_proposer *p = make(2, 256);
    sd_proposal d;
    propose1(p, 3, ctx, n, 6, &d);
    ck_assert_int_eq(d.n, 6);
    int n2;
    int32_t *ctx2 = partial_accept(ctx, n, &d, 2, &n2);
    same_as_fresh(p, 3, ctx2, n2, 6);
    /* full accept plus a bonus token */
    sd_proposal d2;
    propose1(p, 3, ctx2, n2, 4, &d2);
    int32_t *ctx3 = malloc((size_t)(n2 + 5) * sizeof *ctx3);
    memcpy(ctx3, ctx2, (size_t)n2 * sizeof *ctx3);
    memcpy(ctx3 + n2, d2.tokens, 4 * sizeof *ctx3);
    ctx3[n2 + 4] = 17;
    same_as_fresh(p, 3, ctx3, n2 + 5, 5);
    /* nothing accepted, and a context that went backwards (a restart) */
    same_as_fresh(p, 3, ctx, n, 5);
    same_as_fresh(p, 3, ctx, n - 3, 5);
    same_as_fresh(p, 3, ctx2, n2, 1);
    p->ops->release(p, 3);
    pool_full(p);
    sd_proposer_free(p);
    free(ctx);
    free(ctx2);
    free(ctx3);
}
END_TEST

START_TEST(batch_equals_single)
{
    int n[3], k[3] = {5, 8, 3};
    int32_t *ctx[3];
    for (int i = 0; i < 3; i++) ctx[i] = encode(i, &n[i]);
    sd_proposer *p = make(4, 256);
    sd_propose_item it[3];
    for (int i = 0; i < 3; i++)
        it[i] = (sd_propose_item){.seq_id = 100 + (uint64_t)i, .context = ctx[i], .n_context = n[i], .k = k[i]};
    sd_proposal out[3], one;
    char err[512];
    ck_assert_msg(p->ops->propose(p, it, 3, out, err, sizeof err) == SD_OK, "%s", err);
    sd_proposer *q = make(4, 256);
    for (int i = 0; i < 3; i++) {
        propose1(q, (uint64_t)i, ctx[i], n[i], k[i], &one);
        ck_assert_int_eq(out[i].n, k[i]);
        ck_assert_int_eq(one.n, k[i]);
        for (int t = 0; t < k[i]; t++) ck_assert_int_eq(out[i].tokens[t], one.tokens[t]);
    }
    /* a second batched round, each item having accepted one draft */
    int32_t *c2[3];
    for (int i = 0; i < 3; i++) {
        int m;
        c2[i] = partial_accept(ctx[i], n[i], &out[i], 1, &m);
        it[i].context = c2[i];
        it[i].n_context = m;
    }
    ck_assert_msg(p->ops->propose(p, it, 3, out, err, sizeof err) == SD_OK, "%s", err);
    for (int i = 0; i < 3; i++) {
        propose1(q, (uint64_t)i, c2[i], it[i].n_context, k[i], &one);
        ck_assert_int_eq(out[i].n, one.n);
        for (int t = 0; t < one.n; t++) ck_assert_int_eq(out[i].tokens[t], one.tokens[t]);
    }
    for (int i = 0; i < 3; i++) {
        p->ops->release(p, 100 + (uint64_t)i);
        q->ops->release(q, (uint64_t)i);
        free(ctx[i]);
        free(c2[i]);
    }
    p->ops->release(p, 999); /* unknown id: no-op */
    pool_full(p);
    pool_full(q);
    sd_proposer_free(p);
    sd_proposer_free(q);
}
END_TEST

static void sampled(sd_proposer *p, const int32_t *ctx, int n, const sd_sampling *s, sd_proposal *out)
{
    sd_propose_item it = {
        .seq_id = 5, .context = ctx, .n_context = n, .k = 6, .sampling = s, .want_q = true, .out_pos = 11};
    char err[512];
    ck_assert_msg(p->ops->propose(p, &it, 1, out, err, sizeof err) == SD_OK, "%s", err);
}

START_TEST(sampled_reproducible_with_q)
{
    int n;
    int32_t *ctx = encode(2, &n);
    sd_sampling s = sd_sampling_default();
    s.temperature = 0.9f;
    s.top_k = 50;
    s.top_p = 0.95f;
    s.seed = 1234;
    sd_proposer *p = make(2, 256), *q = make(2, 256);
    sd_proposal a, b;
    sampled(p, ctx, n, &s, &a);
    sampled(q, ctx, n, &s, &b);
    ck_assert_int_eq(a.n, 6);
    ck_assert_int_eq(b.n, 6);
    for (int t = 0; t < 6; t++) {
        ck_assert_int_eq(a.tokens[t], b.tokens[t]);
        ck_assert_ptr_nonnull(a.q[t]);
        ck_assert(a.nq[t] >= 1 && a.nq[t] <= 50);
        double sum = 0;
        for (size_t j = 0; j < a.nq[t]; j++) {
            ck_assert(a.q[t][j].prob >= 0);
            sum += a.q[t][j].prob;
        }
        ck_assert_msg(sum > 0.999 && sum < 1.001, "q %d sums to %f", t, sum);
        ck_assert(sd_sparse_prob(a.q[t], a.nq[t], a.tokens[t]) > 0);
    }
    /* greedy with want_q: one-hot q */
    sd_sampling g = sd_sampling_default();
    sampled(p, ctx, n, &g, &a);
    ck_assert_int_eq(a.n, 6);
    for (int t = 0; t < 6; t++) {
        ck_assert_uint_eq(a.nq[t], 1);
        ck_assert_int_eq(a.q[t][0].token, a.tokens[t]);
    }
    p->ops->release(p, 5);
    q->ops->release(q, 5);
    pool_full(p);
    pool_full(q);
    sd_proposer_free(p);
    sd_proposer_free(q);
    free(ctx);
}
END_TEST

START_TEST(kv_exhaustion_and_limits)
{
    /* 1 seq x ceil((32 + 17) / 16) = 4 blocks = 64 positions */
    sd_proposer *p = make(1, 32);
    int n;
    int32_t *small = encode(0, &n);
    int32_t big[100], huge_n = 5000;
    int32_t *huge = calloc((size_t)huge_n, sizeof *huge);
    for (int i = 0; i < 100; i++) big[i] = small[i % n];
    sd_propose_item it[3] = {
        {.seq_id = 1, .context = big, .n_context = 100, .k = 4},
        {.seq_id = 2, .context = small, .n_context = n, .k = 4},
        {.seq_id = 3, .context = huge, .n_context = huge_n, .k = 4},
    };
    sd_proposal out[3], ref;
    char err[512];
    ck_assert_msg(p->ops->propose(p, it, 3, out, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_int_eq(out[0].n, 0);
    ck_assert_int_eq(out[2].n, 0);
    ck_assert_int_eq(out[1].n, 4);
    sd_proposer *q = make(1, 256);
    propose1(q, 1, small, n, 4, &ref);
    for (int t = 0; t < 4; t++) ck_assert_int_eq(out[1].tokens[t], ref.tokens[t]);
    /* a duplicate seq id in one batch drafts once */
    it[0] = it[1];
    ck_assert_msg(p->ops->propose(p, it, 2, out, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_int_eq(out[0].n, 4);
    ck_assert_int_eq(out[1].n, 0);
    for (int id = 1; id <= 3; id++) p->ops->release(p, (uint64_t)id);
    q->ops->release(q, 1);
    pool_full(p);
    pool_full(q);
    sd_proposer_free(p);
    sd_proposer_free(q);
    free(small);
    free(huge);
}
END_TEST

static void copy_file(const char *from, const char *to)
{
    size_t len;
    char *buf = tu_read_file(from, &len);
    ck_assert_ptr_nonnull(buf);
    FILE *f = fopen(to, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(buf, 1, len, f), len);
    fclose(f);
    free(buf);
}

START_TEST(tokenizer_check)
{
    char t[512], d[512], err[512] = "";
    tu_model(t, sizeof t, "tinycode-16m");
    drafter_dir(d, sizeof d);
    ck_assert_msg(sd_draft_check_tokenizer(t, d, err, sizeof err) == SD_OK, "%s", err);
    char tmp[] = "/tmp/sd_draft_tokXXXXXX", src[600], dst[600], q3[512];
    ck_assert_ptr_nonnull(mkdtemp(tmp));
    snprintf(src, sizeof src, "%s/config.json", d);
    snprintf(dst, sizeof dst, "%s/config.json", tmp);
    copy_file(src, dst);
    snprintf(dst, sizeof dst, "%s/tokenizer.json", tmp);
    copy_file(tu_fixture_bin(q3, sizeof q3, "tokenizers/qwen3/tokenizer.json"), dst);
    sd_status st = sd_draft_check_tokenizer(t, tmp, err, sizeof err);
    ck_assert_int_eq(st, SD_ERR_UNSUPPORTED);
    ck_assert_msg(strstr(err, "differs from the target") != NULL, "message: %s", err);
    ck_assert_int_ne(sd_draft_check_tokenizer(t, "/nonexistent/dir", err, sizeof err), SD_OK);
    unlink(dst);
    snprintf(dst, sizeof dst, "%s/config.json", tmp);
    unlink(dst);
    rmdir(tmp);
}
END_TEST

/* The int8 drafter proposes what plain greedy decoding of the quantised
 * model produces, and differs from the checkpoint's weights only rarely. */
START_TEST(int8_drafter_is_the_quantised_model)
{
    int n, same = 0, total = 0;
    for (int t = 0; t < 3; t++) {
        int32_t *ctx = encode(t, &n);
        sd_proposer *p = make_q(1, 256, SD_DRAFT_QUANT_INT8, 0.0f);
        sd_proposal out;
        propose1(p, 1, ctx, n, 8, &out);
        ck_assert_int_eq(out.n, 8);
        int32_t ref[8], exact[8];
        plain_greedy_q(ctx, n, 8, ref, 1);
        plain_greedy_q(ctx, n, 8, exact, 0);
        for (int i = 0; i < 8; i++)
            ck_assert_msg(out.tokens[i] == ref[i], "text %d draft %d: %d vs quantised plain %d", t, i, out.tokens[i],
                          ref[i]);
        int lead = 0;
        while (lead < 8 && exact[lead] == ref[lead]) lead++;
        same += lead;
        total += 8;
        p->ops->release(p, 1);
        pool_full(p);
        sd_proposer_free(p);
        free(ctx);
    }
    fprintf(stderr, "int8 drafter: %d of %d leading drafts equal the checkpoint weights' drafts\n", same, total);
    ck_assert_int_gt(same, 0);
}
END_TEST

/* p_min: an item stops after a token the drafter gives less than p_min;
 * what it proposes is a prefix of the unlimited proposal. The first n_guess
 * tokens are guesses, not drafts: a doubt there does not end the item, later
 * doubts still do, and the tokens are the same. */
START_TEST(p_min_stops_drafting)
{
    int stopped = 0, spared = 0;
    for (int t = 0; t < 3; t++) {
        int n;
        int32_t *ctx = encode(t, &n);
        sd_proposer *all = make_q(1, 256, SD_DRAFT_QUANT_NONE, 0.0f);
        sd_proposer *cut = make_q(1, 256, SD_DRAFT_QUANT_NONE, 0.999f);
        sd_proposal a, b, g;
        char err[512];
        propose1(all, 1, ctx, n, 12, &a);
        propose1(cut, 1, ctx, n, 12, &b);
        ck_assert_int_eq(a.n, 12);
        ck_assert_int_ge(b.n, 1);
        ck_assert_int_le(b.n, a.n);
        for (int i = 0; i < b.n; i++) ck_assert_int_eq(a.tokens[i], b.tokens[i]);
        stopped += b.n < a.n;
        sd_propose_item it = {.seq_id = 1, .context = ctx, .n_context = n, .k = 12, .n_guess = 2};
        ck_assert_msg(cut->ops->propose(cut, &it, 1, &g, err, sizeof err) == SD_OK, "%s", err);
        ck_assert_int_ge(g.n, 3);
        ck_assert_int_ge(g.n, b.n);
        for (int i = 0; i < g.n; i++) ck_assert_int_eq(a.tokens[i], g.tokens[i]);
        spared += b.n < 3;
        all->ops->release(all, 1);
        cut->ops->release(cut, 1);
        pool_full(cut);
        sd_proposer_free(all);
        sd_proposer_free(cut);
        free(ctx);
    }
    ck_assert_int_gt(stopped, 0); /* a drafter is rarely 99.9% sure twelve times running */
    ck_assert_int_gt(spared, 0);  /* without the guesses spared, some item stopped within them */
}
END_TEST

/* The warm-up runs passes, holds nothing after it (no live mirror: every
 * block free, some of them cached), and changes no draft: a warmed-up drafter
 * drafts what a fresh one does. */
START_TEST(warm_up_changes_nothing)
{
    int n;
    int32_t *ctx = encode(1, &n);
    sd_proposer *warm = make(2, 256), *cold = make(2, 256);
    sd_kv_pool *pool = sd_model_kv_pool(sd_draft_model(warm));
    int passes = 0;
    char err[256];
    ck_assert_msg(sd_draft_warm_up(warm, &passes, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_int_eq(passes, 3 * 3 * 4);
    pool_full(warm); /* cached blocks count as free: reclaimable */
    ck_assert_int_gt(sd_kv_pool_cached_count(pool), 0);
    sd_proposal a, b;
    propose1(warm, 5, ctx, n, 8, &a);
    propose1(cold, 5, ctx, n, 8, &b);
    ck_assert_int_eq(a.n, b.n);
    for (int i = 0; i < a.n; i++) ck_assert_int_eq(a.tokens[i], b.tokens[i]);
    ck_assert_int_eq(sd_draft_warm_up(NULL, NULL, err, sizeof err), SD_ERR_ARG);
    warm->ops->release(warm, 5);
    cold->ops->release(cold, 5);
    sd_proposer_free(warm);
    sd_proposer_free(cold);
    free(ctx);
}
END_TEST

START_TEST(bad_options)
{
    char dir[512], err[512] = "";
    sd_draft_opts o = sd_draft_opts_default();
    o.max_seqs = 0;
    sd_proposer *p = (sd_proposer *)1;
    ck_assert_int_eq(sd_draft_new(drafter_dir(dir, sizeof dir), &o, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(p);
    o = sd_draft_opts_default();
    o.quant = 9;
    ck_assert_int_eq(sd_draft_new(drafter_dir(dir, sizeof dir), &o, &p, err, sizeof err), SD_ERR_ARG);
    o = sd_draft_opts_default();
    o.p_min = 1.5f;
    ck_assert_int_eq(sd_draft_new(drafter_dir(dir, sizeof dir), &o, &p, err, sizeof err), SD_ERR_ARG);
    ck_assert_msg(strstr(err, "p_min") != NULL, "message: %s", err);
    ck_assert_int_eq(sd_draft_quant_parse("auto"), SD_DRAFT_QUANT_AUTO);
    ck_assert_int_eq(sd_draft_quant_parse("int8"), SD_DRAFT_QUANT_INT8);
    ck_assert_int_eq(sd_draft_quant_parse("none"), SD_DRAFT_QUANT_NONE);
    ck_assert_int_eq(sd_draft_quant_parse("fp8"), -1);
    ck_assert_int_eq(sd_draft_quant_parse(NULL), -1);
    ck_assert_int_ne(sd_draft_new("/nonexistent/model", NULL, &p, err, sizeof err), SD_OK);
    ck_assert_ptr_null(p);
    ck_assert_ptr_null(sd_draft_model(NULL));
}
END_TEST

/* JSON output: drafts keep to what the verifier's mask allows — greedy
 * and sampled (q holds allowed tokens only), from the start of the output
 * and from within it (out_pos counts the output already in the context). */
/* Eight drafts after prompt and then out (the output so far) under s (for
 * config c: greedy below 3, else sampled, with q). */
static void draft_after(sd_proposer *p, const sd_tok *tok, const char *prompt, const char *out, sd_sampling *s, int c,
                        sd_proposal *o)
{
    char err[256];
    int32_t ctx[128], *ids = NULL, *pre = NULL;
    size_t n = 0, np = 0;
    ck_assert(sd_tok_encode(tok, prompt, strlen(prompt), false, &ids, &n, err, sizeof err) == SD_OK);
    ck_assert(sd_tok_encode(tok, out, strlen(out), false, &pre, &np, err, sizeof err) == SD_OK);
    ck_assert(n + np <= 128);
    memcpy(ctx, ids, n * sizeof *ctx); /* the prompt's tokens, then the output's */
    memcpy(ctx + n, pre, np * sizeof *ctx);
    s->temperature = c < 3 ? 0.0f : 1.0f;
    s->seed = 9;
    sd_propose_item it = {.seq_id = 1,
                          .context = ctx,
                          .n_context = (int)(n + np),
                          .k = 8,
                          .sampling = s,
                          .want_q = c >= 3,
                          .out_pos = np};
    ck_assert(p->ops->propose(p, &it, 1, o, err, sizeof err) == SD_OK);
    ck_assert_int_gt(o->n, 0);
    free(ids);
    free(pre);
}

START_TEST(json_drafts_keep_to_the_schema)
{
    static const char schema_text[] = "{\"type\": \"object\", \"properties\": {\"name\": {\"type\": \"string\"}, "
                                      "\"kind\": {\"enum\": [\"cat\", \"dog\"]}}, \"required\": [\"kind\"]}";
    char dir[512], path[600], err[256], *bytes = NULL;
    uint32_t *off = NULL;
    snprintf(path, sizeof path, "%s/tokenizer.json", drafter_dir(dir, sizeof dir));
    sd_tok *tok = NULL;
    ck_assert(sd_tok_load(path, &tok, err, sizeof err) == SD_OK);
    ck_assert(sd_tok_vocab_bytes(tok, &bytes, &off, err, sizeof err) == SD_OK);
    sd_model_config cfg;
    ck_assert(sd_config_load_dir(dir, &cfg, err, sizeof err) == SD_OK);
    sd_json_vocab *jv;
    ck_assert_msg(sd_json_vocab_load(dir, &cfg, &jv, err, sizeof err) == SD_OK, "%s", err);
    sd_json_schema *schema;
    ck_assert_msg(sd_json_schema_parse(schema_text, strlen(schema_text), &schema, err, sizeof err) == SD_OK, "%s", err);
    ck_assert(jv && schema);
    static const char *const starts[] = {"", "{\"", "{\"kind\": \"c"};
    sd_proposer *p = make(2, 256);
    for (int c = 0; c < 6; c++) {
        const char *out = starts[c % 3];
        sd_sampling s = sd_sampling_default();
        s.schema = schema;
        s.json_vocab = jv;
        sd_proposal o;
        draft_after(p, tok, "config = ", out, &s, c, &o);
        sd_json_state st;
        sd_json_init_schema(&st, schema);
        ck_assert(sd_json_feed(&st, out, strlen(out)));
        for (int t = 0; t < o.n && !sd_json_complete(&st); t++) {
            for (size_t j = 0; c >= 3 && j < o.nq[t]; j++) { /* every token q holds is allowed */
                int32_t q = o.q[t][j].token;
                sd_json_state b = st;
                ck_assert_msg(sd_json_feed(&b, bytes + off[q], off[q + 1] - off[q]), "config %d: q holds %d at %d", c,
                              q, t);
            }
            int32_t d = o.tokens[t];
            ck_assert_msg(sd_json_feed(&st, bytes + off[d], off[d + 1] - off[d]),
                          "config %d: draft %d (%d) leaves "
                          "the schema",
                          c, t, d);
        }
        p->ops->release(p, 1);
    }
    sd_proposer_free(p);
    sd_json_schema_free(schema);
    sd_json_vocab_free(jv);
    free(bytes);
    free(off);
    sd_tok_free(tok);
}
END_TEST

/* The same under a regular expression: drafts and q keep to it. */
START_TEST(regex_drafts_keep_to_the_pattern)
{
    static const char pattern[] = "config = \\{\"kind\": \"(cat|dog)\", \"age\": [0-9]{1,2}\\}";
    char dir[512], path[600], err[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", drafter_dir(dir, sizeof dir));
    sd_tok *tok = NULL;
    ck_assert(sd_tok_load(path, &tok, err, sizeof err) == SD_OK);
    sd_model_config cfg;
    ck_assert(sd_config_load_dir(dir, &cfg, err, sizeof err) == SD_OK);
    sd_json_vocab *jv;
    ck_assert_msg(sd_json_vocab_load(dir, &cfg, &jv, err, sizeof err) == SD_OK, "%s", err);
    sd_regex *rx;
    ck_assert_msg(sd_regex_compile(pattern, &rx, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_msg(jv && rx, "%s", err);
    static const char *const starts[] = {"", "config = {\"", "config = {\"kind\": \"c"};
    sd_proposer *p = make(2, 256);
    for (int c = 0; c < 6; c++) {
        const char *out = starts[c % 3];
        sd_sampling s = sd_sampling_default();
        s.rx = rx;
        s.json_vocab = jv;
        sd_proposal o;
        draft_after(p, tok, "# settings\n", out, &s, c, &o);
        sd_regex_state *st;
        ck_assert_int_eq(sd_regex_state_new(rx, &st, NULL, 0), SD_OK);
        ck_assert(sd_regex_state_feed(st, out, strlen(out)));
        for (int t = 0; t < o.n && !sd_regex_state_complete(st); t++) {
            const char *b;
            size_t len;
            for (size_t j = 0; c >= 3 && j < o.nq[t]; j++) {
                ck_assert(sd_json_vocab_token(jv, o.q[t][j].token, &b, &len) == SD_JSON_TOKEN_TEXT);
                ck_assert_msg(sd_regex_state_accepts(st, b, len), "config %d: q holds %d at %d", c, o.q[t][j].token, t);
            }
            ck_assert(sd_json_vocab_token(jv, o.tokens[t], &b, &len) == SD_JSON_TOKEN_TEXT);
            ck_assert_msg(sd_regex_state_feed(st, b, len), "config %d: draft %d (%d) leaves the pattern", c, t,
                          o.tokens[t]);
        }
        sd_regex_state_free(st);
        p->ops->release(p, 1);
    }
    sd_proposer_free(p);
    sd_regex_free(rx);
    sd_json_vocab_free(jv);
    sd_tok_free(tok);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("draft");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, greedy_equals_plain);
    tcase_add_test(tc, resync_after_partial_accept);
    tcase_add_test(tc, cached_prefixes_draft_the_same);
    tcase_add_test(tc, batch_equals_single);
    tcase_add_test(tc, sampled_reproducible_with_q);
    tcase_add_test(tc, kv_exhaustion_and_limits);
    tcase_add_test(tc, tokenizer_check);
    tcase_add_test(tc, int8_drafter_is_the_quantised_model);
    tcase_add_test(tc, p_min_stops_drafting);
    tcase_add_test(tc, warm_up_changes_nothing);
    tcase_add_test(tc, bad_options);
    tcase_add_test(tc, json_drafts_keep_to_the_schema);
    tcase_add_test(tc, regex_drafts_keep_to_the_pattern);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
