/* test_drafter_proto.c — specd-drafter as a process, driven over ZeroMQ the
 * way the verifier drives it: health, need_open for unknown requests and
 * length mismatches, open + batch with appended tokens (n-gram drafts equal
 * sd_ngram_lookup; draft-model drafts equal an in-process sd_draft_new
 * proposer), q per token when sampling (top_k -1 meaning "off" as 0 does),
 * close, malformed frames dropped
 * without a crash, two verifiers with the same request id kept apart, pipelined batches (no reply per batch; spans drafted
 * ahead from committed + in_flight with their base, branch spans for other
 * outcomes), an unknown --device refused with exit 2, SIGTERM → exit 0.
 * Needs $SD_BIN/specd-drafter and $SD_MODELS/tinycode-3m. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>
#include <zmq.h>

#include "draft.h"
#include "msg.h"
#include "ngram.h"
#include "span.h"
#include "testutil.h"

static pid_t g_pid;
static void *g_ctx, *g_sock;
static char g_ep[128];

static void start_drafter(const char *mode, const char *model)
{
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/specd-drafter", getenv("SD_BIN") ? getenv("SD_BIN") : "bin");
    snprintf(g_ep, sizeof g_ep, "ipc:///tmp/sd-drafter-test-%d.sock", (int)getpid());
    g_pid = fork();
    ck_assert_int_ge(g_pid, 0);
    if (g_pid == 0) {
        /* --p-min 0: always k drafts, so counts below are exact */
        if (model) execl(bin, bin, "--listen", g_ep, mode, model, "--p-min", "0", "--log-level", "debug", (char *)NULL);
        else execl(bin, bin, "--listen", g_ep, mode, "--log-level", "debug", (char *)NULL);
        _exit(127);
    }
    g_ctx = zmq_ctx_new();
    g_sock = zmq_socket(g_ctx, ZMQ_DEALER);
    int zero = 0, tmo = 30000;
    zmq_setsockopt(g_sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(g_sock, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    ck_assert_int_eq(zmq_connect(g_sock, g_ep), 0);
}

/* SIGTERM, and the drafter must exit 0. */
static void stop_drafter(void)
{
    zmq_close(g_sock);
    zmq_ctx_term(g_ctx);
    kill(g_pid, SIGTERM);
    int st;
    ck_assert_int_eq(waitpid(g_pid, &st, 0), g_pid);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 0);
}

static void send_env(Specd__Envelope *env)
{
    char err[256];
    sd_status st;
    for (int i = 0; i < 200; i++) { /* the ipc endpoint may not exist yet */
        st = sd_msg_send(g_sock, NULL, env, err, sizeof err);
        if (st != SD_ERR_NOSPACE) break;
        usleep(50000);
    }
    ck_assert_msg(st == SD_OK, "send: %s", err);
}

static Specd__Envelope *recv_env(void)
{
    Specd__Envelope *env = NULL;
    char err[256];
    ck_assert_msg(sd_msg_recv(g_sock, NULL, &env, SD_MSG_BLOCK, err, sizeof err) == SD_OK, "recv: %s", err);
    return env;
}

static void check_health(const char *model)
{
    Specd__HealthRequest h = SPECD__HEALTH_REQUEST__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    h.nonce = 77;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REQUEST;
    env.health_request = &h;
    send_env(&env);
    Specd__Envelope *r = recv_env();
    ck_assert_int_eq(r->body_case, SPECD__ENVELOPE__BODY_HEALTH_REPLY);
    ck_assert_uint_eq(r->health_reply->nonce, 77);
    ck_assert_str_eq(r->health_reply->role, "drafter");
    ck_assert_str_eq(r->health_reply->model, model);
    sd_msg_free(r);
}

static void send_open_k(uint64_t id, const int32_t *ctx, size_t n, float temperature, int32_t top_k)
{
    Specd__SamplingParams sp = SPECD__SAMPLING_PARAMS__INIT;
    Specd__DraftOpen o = SPECD__DRAFT_OPEN__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    sp.temperature = temperature;
    sp.top_k = top_k;
    sp.seed = 5;
    o.request_id = id;
    o.context = (int32_t *)ctx;
    o.n_context = n;
    o.sampling = &sp;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_OPEN;
    env.draft_open = &o;
    send_env(&env);
}

static void send_open(uint64_t id, const int32_t *ctx, size_t n, float temperature)
{
    send_open_k(id, ctx, n, temperature, 0);
}

static void send_close(uint64_t id)
{
    Specd__DraftClose c = SPECD__DRAFT_CLOSE__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    c.request_id = id;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_CLOSE;
    env.draft_close = &c;
    send_env(&env);
}

/* Sends a DraftBatch of one item: request id, committed length, the tokens
 * committed since the last batch, k drafts, sampled or not; pipelined ones
 * carry the drafts in flight and a long expected step (time for branches). */
static void send_batch(uint64_t step, uint64_t id, uint32_t committed, const int32_t *nt, size_t n_new, uint32_t k,
                       bool sample, bool pipeline, const int32_t *in_flight, size_t m)
{
    Specd__DraftItem it = SPECD__DRAFT_ITEM__INIT;
    Specd__DraftItem *its[1] = {&it};
    Specd__DraftBatch b = SPECD__DRAFT_BATCH__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    it.request_id = id;
    it.committed_len = committed;
    it.new_tokens = (int32_t *)nt;
    it.n_new_tokens = n_new;
    it.num_draft = k;
    it.sample = sample;
    it.output_pos = 3;
    it.in_flight = (int32_t *)in_flight;
    it.n_in_flight = m;
    b.step = step;
    b.pipeline = pipeline;
    b.step_us = pipeline ? 200000 : 0;
    b.items = its;
    b.n_items = 1;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_BATCH;
    env.draft_batch = &b;
    send_env(&env);
}

/* One serial batch of one item; returns the reply (caller frees). */
static Specd__Envelope *batch1(uint64_t step, uint64_t id, uint32_t committed, const int32_t *nt, size_t n_new,
                               uint32_t k, bool sample)
{
    send_batch(step, id, committed, nt, n_new, k, sample, false, NULL, 0);
    Specd__Envelope *r = recv_env();
    ck_assert_int_eq(r->body_case, SPECD__ENVELOPE__BODY_DRAFT_REPLY);
    ck_assert_uint_eq(r->draft_reply->step, step);
    ck_assert_uint_eq(r->draft_reply->n_results, 1);
    ck_assert_uint_eq(r->draft_reply->results[0]->request_id, id);
    return r;
}

/* The drafter's model in-process, as the process runs it (--p-min 0). */
static sd_proposer *local_proposer(const char *dir)
{
    sd_draft_opts o = sd_draft_opts_default();
    o.n_threads = 1;
    o.max_seqs = 4;
    o.max_context = 256;
    o.p_min = 0.0f;
    sd_proposer *p;
    char err[256];
    ck_assert_msg(sd_draft_new(dir, &o, &p, err, sizeof err) == SD_OK, "%s", err);
    return p;
}

START_TEST(test_ngram_protocol)
{
    start_drafter("--ngram", NULL);
    check_health("ngram");
    /* unknown request */
    int32_t t3 = 3;
    Specd__Envelope *r = batch1(1, 9, 6, &t3, 1, 4, false);
    ck_assert(r->draft_reply->results[0]->need_open);
    ck_assert_uint_eq(r->draft_reply->results[0]->n_tokens, 0);
    sd_msg_free(r);
    int32_t ctx[] = {1, 2, 3, 4, 1, 2};
    send_open(9, ctx, 6, 0.0f);
    /* 6 + 1 new = 7 */
    r = batch1(2, 9, 7, &t3, 1, 4, false);
    const Specd__DraftResult *res = r->draft_reply->results[0];
    ck_assert(!res->need_open);
    int32_t full[] = {1, 2, 3, 4, 1, 2, 3}, want[SD_MAX_DRAFT];
    int nw = sd_ngram_lookup(full, 7, 1, 4, 4, want, NULL);
    ck_assert_int_gt(nw, 0);
    ck_assert_uint_eq(res->n_tokens, (size_t)nw);
    for (int i = 0; i < nw; i++) ck_assert_int_eq(res->tokens[i], want[i]);
    ck_assert_uint_eq(res->n_q, 0);
    sd_msg_free(r);
    /* mismatch (drafter would miss a token) → need_open */
    r = batch1(3, 9, 9, &t3, 1, 4, false);
    ck_assert(r->draft_reply->results[0]->need_open);
    sd_msg_free(r);
    /* sampled: one one-hot q per token */
    r = batch1(4, 9, 7, NULL, 0, 2, true);
    res = r->draft_reply->results[0];
    ck_assert(!res->need_open);
    ck_assert_uint_eq(res->n_q, res->n_tokens);
    for (size_t i = 0; i < res->n_q; i++) {
        ck_assert_uint_eq(res->q[i]->n_q, 1);
        ck_assert_int_eq(res->q[i]->q[0]->token, res->tokens[i]);
        ck_assert_float_eq(res->q[i]->q[0]->prob, 1.0f);
    }
    sd_msg_free(r);
    /* malformed frames are dropped; the drafter still answers */
    zmq_send(g_sock, "\xff\xff\xff garbage", 12, 0);
    zmq_send(g_sock, "", 0, 0);
    check_health("ngram");
    send_close(9);
    r = batch1(5, 9, 7, NULL, 0, 4, false);
    ck_assert(r->draft_reply->results[0]->need_open);
    sd_msg_free(r);
    /* two verifiers, one request id: separate states (keyed by peer); neither closes the other's */
    send_open(9, ctx, 6, 0.0f);
    void *mine = g_sock, *other = zmq_socket(g_ctx, ZMQ_DEALER);
    int zero = 0, tmo = 30000;
    zmq_setsockopt(other, ZMQ_LINGER, &zero, sizeof zero);
    zmq_setsockopt(other, ZMQ_RCVTIMEO, &tmo, sizeof tmo);
    ck_assert_int_eq(zmq_connect(other, g_ep), 0);
    g_sock = other;
    int32_t ctx2[] = {5, 6, 7, 8, 5, 6, 7, 8, 5, 6};
    send_open(9, ctx2, 10, 0.0f);
    r = batch1(6, 9, 10, NULL, 0, 4, false); /* the other verifier's request 9: its 10 tokens */
    ck_assert(!r->draft_reply->results[0]->need_open);
    sd_msg_free(r);
    send_close(9);
    g_sock = mine;
    r = batch1(7, 9, 6, NULL, 0, 4, false); /* ours: still its 6 tokens, not closed */
    ck_assert(!r->draft_reply->results[0]->need_open);
    ck_assert_uint_eq(r->draft_reply->results[0]->base_len, 6);
    sd_msg_free(r);
    zmq_close(other);
    stop_drafter();
}
END_TEST

START_TEST(test_model_protocol)
{
    char dir[1024];
    tu_model(dir, sizeof dir, "tinycode-3m");
    start_drafter("--model", dir);
    check_health("tinycode-3m");
    int32_t ctx[] = {10, 200, 31, 400, 55, 66, 70};
    send_open(1, ctx, 5, 0.0f);
    Specd__Envelope *r = batch1(1, 1, 7, ctx + 5, 2, 5, false);
    const Specd__DraftResult *res = r->draft_reply->results[0];
    ck_assert(!res->need_open);
    ck_assert_uint_eq(res->n_tokens, 5);
    /* the same proposal in-process */
    sd_proposer *p = local_proposer(dir);
    char err[256];
    sd_sampling s = sd_sampling_default();
    sd_propose_item it = {.seq_id = 1, .context = ctx, .n_context = 7, .k = 5, .sampling = &s};
    sd_proposal out;
    ck_assert_int_eq(p->ops->propose(p, &it, 1, &out, err, sizeof err), SD_OK);
    ck_assert_int_eq(out.n, 5);
    for (int i = 0; i < 5; i++) ck_assert_int_eq(res->tokens[i], out.tokens[i]);
    sd_proposer_free(p);
    sd_msg_free(r);
    /* sampled drafts carry a normalised q containing the token */
    send_open(2, ctx, 7, 0.8f);
    r = batch1(2, 2, 7, NULL, 0, 3, true);
    res = r->draft_reply->results[0];
    ck_assert_uint_eq(res->n_tokens, 3);
    ck_assert_uint_eq(res->n_q, 3);
    for (size_t i = 0; i < 3; i++) {
        double sum = 0;
        bool has = false;
        for (size_t j = 0; j < res->q[i]->n_q; j++) {
            sum += res->q[i]->q[j]->prob;
            has |= res->q[i]->q[j]->token == res->tokens[i];
        }
        ck_assert(has);
        ck_assert_double_eq_tol(sum, 1.0, 1e-3);
    }
    /* top_k -1 is how OpenAI-style clients say "no top-k": the same drafts
     * and q as top_k 0, not a fall-back to greedy drafting */
    send_open_k(3, ctx, 7, 0.8f, -1);
    Specd__Envelope *r3 = batch1(3, 3, 7, NULL, 0, 3, true);
    const Specd__DraftResult *a = r->draft_reply->results[0], *b = r3->draft_reply->results[0];
    ck_assert_uint_eq(b->n_tokens, a->n_tokens);
    ck_assert_uint_eq(b->n_q, a->n_q);
    ck_assert_uint_gt(b->q[0]->n_q, 1);
    for (size_t i = 0; i < a->n_tokens; i++) {
        ck_assert_int_eq(b->tokens[i], a->tokens[i]);
        ck_assert_uint_eq(b->q[i]->n_q, a->q[i]->n_q);
        for (size_t j = 0; j < a->q[i]->n_q; j++) {
            ck_assert_int_eq(b->q[i]->q[j]->token, a->q[i]->q[j]->token);
            ck_assert_float_eq(b->q[i]->q[j]->prob, a->q[i]->q[j]->prob);
        }
    }
    sd_msg_free(r3);
    sd_msg_free(r);
    stop_drafter();
}
END_TEST

/* Collects the spans the drafter sends for a pipelined batch of step: the
 * first must be the likeliest outcome, in_flight[0..m) then want[0..nw);
 * the others are branches: a prefix of in_flight, then a token other than
 * the one assumed there (in_flight[j], or want[0] after all of in_flight).
 * All name the base: 7 committed tokens hashing to h. Returns the branches. */
static int collect_spans(uint64_t step, uint64_t h, const int32_t *in_flight, size_t m, const int32_t *want, size_t nw)
{
    int n_main = 0, n_branch = 0;
    zmq_pollitem_t pi = {.socket = g_sock, .events = ZMQ_POLLIN};
    while (zmq_poll(&pi, 1, n_main ? 1500 : 30000) == 1) {
        Specd__Envelope *r = recv_env();
        ck_assert_int_eq(r->body_case, SPECD__ENVELOPE__BODY_DRAFT_REPLY);
        ck_assert_uint_eq(r->draft_reply->step, step);
        for (size_t i = 0; i < r->draft_reply->n_results; i++) {
            const Specd__DraftResult *res = r->draft_reply->results[i];
            ck_assert_uint_eq(res->request_id, 1);
            ck_assert(!res->need_open);
            ck_assert_uint_eq(res->base_len, 7);
            ck_assert_uint_eq(res->base_hash, h);
            if (n_main++ == 0) {
                ck_assert_uint_eq(res->n_tokens, m + nw);
                for (size_t k = 0; k < m; k++) ck_assert_int_eq(res->tokens[k], in_flight[k]);
                for (size_t k = 0; k < nw; k++) ck_assert_int_eq(res->tokens[m + k], want[k]);
                continue;
            }
            size_t j = 0;
            while (j < m && j < res->n_tokens && res->tokens[j] == in_flight[j]) j++;
            ck_assert_uint_lt(j, res->n_tokens);
            ck_assert_int_ne(res->tokens[j], j < m ? in_flight[j] : want[0]);
            n_branch++;
        }
        sd_msg_free(r);
    }
    ck_assert_int_ge(n_main, 1);
    ck_assert_int_le(n_branch, 3); /* --spec-branches 3 (the default) */
    return n_branch;
}

/* Pipelined: a DraftBatch{pipeline} gets no reply of its own; the drafter
 * drafts the continuation of committed + in_flight and sends it as a span
 * naming its base — with nothing in flight num_draft drafts, otherwise its
 * guess of the verifier's next token then num_draft drafts — equal to the
 * in-process proposer's; with time left (step_us) it adds branch spans for
 * other outcomes. */
START_TEST(test_model_pipelined)
{
    char dir[1024], err[256];
    tu_model(dir, sizeof dir, "tinycode-3m");
    start_drafter("--model", dir);
    int32_t ctx[] = {10, 200, 31, 400, 55, 66, 70};
    sd_proposer *p = local_proposer(dir);
    sd_sampling s = sd_sampling_default();
    sd_proposal first, second;
    sd_propose_item it0 = {.seq_id = 1, .context = ctx, .n_context = 7, .k = 4, .sampling = &s};
    ck_assert_int_eq(p->ops->propose(p, &it0, 1, &first, err, sizeof err), SD_OK);
    ck_assert_int_eq(first.n, 4);
    int32_t full[9];
    memcpy(full, ctx, sizeof ctx);
    full[7] = first.tokens[0];
    full[8] = first.tokens[1];
    sd_propose_item it1 = {.seq_id = 2, .context = full, .n_context = 9, .k = 5, .sampling = &s};
    ck_assert_int_eq(p->ops->propose(p, &it1, 1, &second, err, sizeof err), SD_OK);
    ck_assert_int_eq(second.n, 5);

    uint64_t h7 = sd_span_hash(SD_SPAN_HASH_SEED, ctx, 7);
    send_open(1, ctx, 5, 0.0f);
    /* nothing in flight: the verifier waits for this span */
    send_batch(11, 1, 7, ctx + 5, 2, 4, false, true, NULL, 0);
    int nb = collect_spans(11, h7, NULL, 0, first.tokens, 4);
    /* the verifier now verifies the first two of those drafts */
    send_batch(12, 1, 7, NULL, 0, 4, false, true, full + 7, 2);
    nb += collect_spans(12, h7, full + 7, 2, second.tokens, 5);
    ck_assert_int_ge(nb, 1);
    sd_proposer_free(p);
    stop_drafter();
}
END_TEST

START_TEST(test_device_refused)
{
    char bin[1024];
    snprintf(bin, sizeof bin, "%s/specd-drafter", getenv("SD_BIN") ? getenv("SD_BIN") : "bin");
    pid_t pid = fork();
    if (pid == 0) {
        execl(bin, bin, "--ngram", "--device", "tpu:0", (char *)NULL);
        _exit(127);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert(WIFEXITED(st));
    ck_assert_int_eq(WEXITSTATUS(st), 2);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("drafter_proto");
    TCase *tc = tcase_create("process");
    tcase_set_timeout(tc, 120);
    tcase_add_test(tc, test_ngram_protocol);
    tcase_add_test(tc, test_model_protocol);
    tcase_add_test(tc, test_model_pipelined);
    tcase_add_test(tc, test_device_refused);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(suite()); }
