/* test_tp.c — tensor parallelism on the CPU: the host communicator
 * (kernels/comm.h) and a model split over ranks (model.h sd_tp_opts), each
 * rank a CPU backend of its own and a thread of this process.
 *
 * Against the unsplit model: the demo target at TP = 2 gives logits within
 * the bf16 model's tolerance and the same greedy tokens; in chunked mode
 * (--batch-invariant) the logits of TP = 1, 2, 4 and 8 are bit-identical (a
 * random-weights config whose heads divide by 8); speculative output equals
 * plain output under TP; a rank that fails takes the group down without a
 * hang; a model that does not divide is refused with a message. */
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "comm.h"
#include "engine.h"
#include "model.h"
#include "ngram.h"
#include "testutil.h"

/* ---- the host communicator ---------------------------------------------- */

typedef struct comm_job {
    sd_comm *c;
    sd_status st;
    float got[4 * 3];
    char bytes[8];
    bool abort_first;
} comm_job;

static void *comm_rank(void *arg)
{
    comm_job *j = arg;
    int r = j->c->rank;
    float mine[3] = {(float)r, 10.0f + r, 100.0f + r};
    if (j->abort_first) {
        j->c->ops->abort(j->c);
        j->st = SD_ERR_DEVICE;
        return NULL;
    }
    j->st = j->c->ops->allgather(j->c, mine, j->got, 3);
    if (j->st == SD_OK) {
        if (r == 2) memcpy(j->bytes, "rank two", 8);
        j->st = j->c->ops->broadcast(j->c, j->bytes, 8, 2);
    }
    if (j->st == SD_OK) j->st = j->c->ops->barrier(j->c);
    return NULL;
}

/* Runs n ranks of a host group at once; abort_rank >= 0 aborts instead. */
static void run_comm(int n, int abort_rank, comm_job *jobs)
{
    sd_backend *be[4];
    sd_comm *c[4];
    pthread_t t[4];
    for (int r = 0; r < n; r++) ck_assert_int_eq(sd_backend_cpu_new(1, &be[r], NULL, 0), SD_OK);
    ck_assert_int_eq(sd_comm_host_group(be, n, c, NULL, 0), SD_OK);
    for (int r = 0; r < n; r++) {
        memset(&jobs[r], 0, sizeof jobs[r]);
        jobs[r].c = c[r];
        jobs[r].abort_first = r == abort_rank;
        pthread_create(&t[r], NULL, comm_rank, &jobs[r]);
    }
    for (int r = 0; r < n; r++) pthread_join(t[r], NULL);
    for (int r = 0; r < n; r++) {
        sd_comm_free(c[r]);
        sd_backend_free(be[r]);
    }
}

START_TEST(host_comm_orders_by_rank)
{
    comm_job jobs[4];
    run_comm(4, -1, jobs);
    for (int r = 0; r < 4; r++) {
        ck_assert_int_eq(jobs[r].st, SD_OK);
        for (int q = 0; q < 4; q++) { /* rank q's buffer in slot q, on every rank */
            ck_assert_float_eq(jobs[r].got[3 * q], (float)q);
            ck_assert_float_eq(jobs[r].got[3 * q + 2], 100.0f + q);
        }
        ck_assert(!memcmp(jobs[r].bytes, "rank two", 8));
    }
    char err[128];
    sd_comm *none[9];
    ck_assert_int_eq(sd_comm_host_group(NULL, 9, none, err, sizeof err), SD_ERR_ARG);
}
END_TEST

/* A rank that aborts releases the others: none waits for ever. */
START_TEST(host_comm_abort_releases_everyone)
{
    comm_job jobs[3];
    run_comm(3, 1, jobs);
    for (int r = 0; r < 3; r++) ck_assert_int_eq(jobs[r].st, SD_ERR_DEVICE);
}
END_TEST

/* ---- split models ---------------------------------------------------------- */

/* A group of n CPU ranks (one thread each) and its communicators. */
typedef struct group {
    int n;
    sd_backend *be[SD_COMM_MAX_RANKS];
    sd_comm *comm[SD_COMM_MAX_RANKS];
} group;

static void group_open(group *g, int n)
{
    g->n = n;
    for (int r = 0; r < n; r++) ck_assert_int_eq(sd_backend_cpu_new(1, &g->be[r], NULL, 0), SD_OK);
    ck_assert_int_eq(sd_comm_host_group(g->be, n, g->comm, NULL, 0), SD_OK);
}

static void group_close(group *g)
{
    for (int r = 0; r < g->n; r++) {
        sd_comm_free(g->comm[r]);
        sd_backend_free(g->be[r]);
    }
}

/* The model at TP = g->n (chunked as asked): the demo target (config NULL)
 * or random weights of config, with a KV pool for `positions`. */
static sd_model *open_split(group *g, const char *config, bool chunked, int positions)
{
    char dir[512], path[600], err[512];
    sd_tp_opts tp = {.size = g->n, .bes = g->be, .comms = g->comm, .chunked = chunked};
    sd_model *m = NULL;
    sd_status st;
    if (config) {
        st = sd_model_random_tp(tu_fixture(path, sizeof path, config), 3, &tp, &m, err, sizeof err);
    } else {
        st = sd_model_load_tp(tu_model(dir, sizeof dir, "tinycode-16m"), &tp, &m, err, sizeof err);
    }
    ck_assert_msg(st == SD_OK, "TP %d: %s", g->n, err);
    ck_assert_int_eq(sd_model_tp_size(m), g->n);
    ck_assert_int_eq(sd_model_kv_init(m, 3 * (positions / 16 + 2), 16, err, sizeof err), SD_OK);
    return m;
}

/* Logits of one pass over ids[0..n) [n, vocab] (malloc'd). */
static float *logits_of(sd_model *m, const int32_t *ids, int n)
{
    int V = sd_model_cfg(m)->vocab_size;
    float *out = malloc((size_t)n * V * sizeof *out);
    sd_kv_seq s;
    sd_kv_seq_init(&s);
    tu_forward(m, &s, ids, n, 0, out);
    sd_kv_seq_release(sd_model_kv_pool(m), &s);
    return out;
}

static int32_t *ids_for(int n, int vocab)
{
    int32_t *ids = malloc((size_t)n * sizeof *ids);
    for (int i = 0; i < n; i++) ids[i] = (int32_t)((i * 7919 + 13) % vocab);
    return ids;
}

/* chunked: the logits are the same bits at every TP size the model allows
 * (1, 2, 4, 8), and batch-invariant at each. */
START_TEST(chunked_logits_identical_at_every_size)
{
    const char *cfg = "configs/qwen3-tp8-tiny.json";
    int n = 24;
    float *ref = NULL;
    int32_t *ids = NULL;
    size_t bytes = 0;
    for (int size = 1; size <= 8; size *= 2) {
        group g;
        group_open(&g, size);
        sd_model *m = open_split(&g, cfg, true, 2 * n);
        int V = sd_model_cfg(m)->vocab_size;
        if (!ids) ids = ids_for(n, V);
        bytes = (size_t)n * V * sizeof(float);
        float *got = logits_of(m, ids, n);
        if (!ref) ref = got;
        else {
            ck_assert_msg(!memcmp(ref, got, bytes), "TP %d: logits differ from TP 1's", size);
            free(got);
        }
        if (size == 2) tu_check_batch_invariance(m, ids, ids + 4, n - 4);
        sd_model_free(m);
        group_close(&g);
    }
    free(ref);
    free(ids);
}
END_TEST

/* The demo target at TP = 2 (its sums split by ranks, not chunks): logits
 * within the bf16 model's tolerance of the unsplit model, the same greedy
 * token at every position; and speculative (n-gram drafts) == plain under TP. */
START_TEST(demo_tp2_matches_tp1)
{
    group g1, g2;
    group_open(&g1, 1);
    group_open(&g2, 2);
    sd_model *one = open_split(&g1, NULL, false, 512), *two = open_split(&g2, NULL, false, 512);
    int V = sd_model_cfg(one)->vocab_size, n = 96;
    int32_t *ids = ids_for(n, V);
    float *a = logits_of(one, ids, n), *b = logits_of(two, ids, n);
    double worst = 0;
    int same = 0;
    for (int t = 0; t < n; t++) {
        const float *ra = a + (size_t)t * V, *rb = b + (size_t)t * V;
        int ia = 0, ib = 0;
        for (int v = 0; v < V; v++) {
            double d = ra[v] > rb[v] ? ra[v] - rb[v] : rb[v] - ra[v];
            if (d > worst) worst = d;
            if (ra[v] > ra[ia]) ia = v;
            if (rb[v] > rb[ib]) ib = v;
        }
        same += ia == ib;
    }
    fprintf(stderr, "demo target, TP 2 against TP 1: max |logit difference| %.4f, argmax equal at %d of %d\n", worst,
            same, n);
    ck_assert_msg(worst < 0.25, "TP 2 logits off by %.4f", worst); /* bf16 activations: rounded after every op */
    ck_assert_int_ge(same, n - 2);
    free(a);
    free(b);
    /* speculative == plain on the split model: each rank batch-invariant, the reduction in a fixed order */
    sd_engine *e;
    ck_assert_int_eq(sd_engine_new(two, NULL, &e, NULL, 0), SD_OK);
    sd_proposer *ng;
    ck_assert_int_eq(sd_ngram_new(1, 4, &ng, NULL, 0), SD_OK);
    int32_t *out[2];
    int nout[2];
    char err[256];
    for (int k = 0; k < 2; k++) {
        sd_req_params p = sd_req_params_default();
        p.max_tokens = 64;
        p.ignore_eos = true;
        p.speculate = k == 1;
        p.num_draft = 4;
        sd_req *r;
        ck_assert_int_eq(sd_req_new(e, 1 + k, ids, 32, &p, &r, err, sizeof err), SD_OK);
        ck_assert_msg(sd_engine_run(e, k ? ng : NULL, &r, 1, NULL, NULL, err, sizeof err) == SD_OK, "%s", err);
        nout[k] = sd_req_n_output(r);
        out[k] = malloc((size_t)nout[k] * sizeof *out[k]);
        memcpy(out[k], sd_req_output(r), (size_t)nout[k] * sizeof *out[k]);
        sd_req_free(e, r);
    }
    ck_assert_int_eq(nout[0], nout[1]);
    ck_assert_msg(!memcmp(out[0], out[1], (size_t)nout[0] * sizeof *out[0]), "speculative != plain under TP 2");
    free(out[0]);
    free(out[1]);
    sd_proposer_free(ng);
    sd_engine_free(e);
    free(ids);
    sd_model_free(one);
    sd_model_free(two);
    group_close(&g1);
    group_close(&g2);
}
END_TEST

/* A rank that fails mid-pass (SD_FAULT_TP_RANK_LOST) fails the pass on
 * every rank at once — no hang — and the model says it is lost. */
START_TEST(failed_rank_takes_the_group_down)
{
    setenv("SD_FAULT_TP_RANK_LOST", "1:2", 1);
    group g;
    group_open(&g, 2);
    sd_model *m = open_split(&g, "configs/qwen3-tp8-tiny.json", false, 64);
    unsetenv("SD_FAULT_TP_RANK_LOST");
    int V = sd_model_cfg(m)->vocab_size;
    int32_t *ids = ids_for(8, V);
    float *a = logits_of(m, ids, 8); /* pass 1: fine */
    ck_assert(!sd_model_lost(m));
    float *out = malloc((size_t)8 * V * sizeof *out);
    sd_kv_seq s;
    sd_kv_seq_init(&s);
    sd_kv_pool *pool = sd_model_kv_pool(m);
    ck_assert_int_eq(sd_kv_reserve(pool, &s, 8), SD_OK);
    sd_batch_seq b = {ids, 8, 0, &s, 8, NULL, NULL, NULL};
    char err[256];
    ck_assert_int_eq(sd_model_forward(m, &b, 1, out, err, sizeof err), SD_ERR_DEVICE);
    ck_assert_ptr_nonnull(strstr(err, "rank 1"));
    ck_assert(sd_model_lost(m));
    ck_assert_int_eq(sd_model_forward(m, &b, 1, out, err, sizeof err), SD_ERR_DEVICE); /* and stays down */
    sd_kv_seq_release(pool, &s);
    free(out);
    free(a);
    free(ids);
    sd_model_free(m);
    group_close(&g);
}
END_TEST

/* Sizes the model's heads do not divide by, and chunked sizes that do not
 * divide SD_TP_CHUNKS: refused at load, with the reason. */
START_TEST(sizes_that_do_not_divide_are_refused)
{
    char dir[512], path[600], err[512];
    group g;
    group_open(&g, 4);
    sd_model *m = NULL;
    sd_tp_opts tp = {.size = 4, .bes = g.be, .comms = g.comm};
    ck_assert_int_eq(sd_model_load_tp(tu_model(dir, sizeof dir, "tinycode-16m"), &tp, &m, err, sizeof err),
                     SD_ERR_UNSUPPORTED); /* 6 heads, 2 KV heads */
    ck_assert_ptr_null(m);
    ck_assert_ptr_nonnull(strstr(err, "divide"));
    group_close(&g);
    group_open(&g, 3);
    tp = (sd_tp_opts){.size = 3, .bes = g.be, .comms = g.comm, .chunked = true};
    ck_assert_int_eq(
        sd_model_random_tp(tu_fixture(path, sizeof path, "configs/qwen3-tp8-tiny.json"), 1, &tp, &m, err, sizeof err),
        SD_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "--tensor-parallel-size 3"));
    group_close(&g);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("tp");
    TCase *tc = tcase_create("tp");
    tcase_set_timeout(tc, 600);
    tcase_add_test(tc, host_comm_orders_by_rank);
    tcase_add_test(tc, host_comm_abort_releases_everyone);
    tcase_add_test(tc, chunked_logits_identical_at_every_size);
    tcase_add_test(tc, demo_tp2_matches_tp1);
    tcase_add_test(tc, failed_rank_takes_the_group_down);
    tcase_add_test(tc, sizes_that_do_not_divide_are_refused);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
