/* test_vf_draft.c — the drafter-link bookkeeping (vf_draft.c) and the link's
 * deadline / fallback behaviour (vf_link.c) against an in-process fake
 * drafter thread on an inproc:// ROUTER socket. */
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "msg.h"
#include "testutil.h"
#include "vf_draft.h"
#include "vf_link.h"

#define VOCAB 100

typedef struct fake_req {
    sd_req r;
    int32_t toks[64];
    sd_vf_slot slot;
} fake_req;

static void fake_init(fake_req *f, uint64_t id, int n_prompt, int n_tokens)
{
    memset(f, 0, sizeof *f);
    for (int i = 0; i < 64; i++) f->toks[i] = 10 + i;
    f->r.id = id;
    f->r.tokens = f->toks;
    f->r.n_prompt = n_prompt;
    f->r.n_tokens = n_tokens;
    f->r.n_prefilled = n_prompt;
    f->r.p = sd_req_params_default();
    f->r.p.speculate = true;
    f->r.p.num_draft = 4;
    f->slot.id = id;
    f->slot.r = &f->r;
}

START_TEST(build_open_then_delta)
{
    fake_req a, b;
    fake_init(&a, 1, 3, 5);
    fake_init(&b, 2, 2, 4);
    sd_vf_slot *slots[2] = {&a.slot, &b.slot};
    int budgets[2] = {4, 0};
    sd_vf_batch bt;
    sd_vf_batch_init(&bt);
    ck_assert_int_eq(sd_vf_batch_build(&bt, 1, slots, budgets, 2, false, false), 1);
    ck_assert_int_eq(bt.n_opens, 1);
    ck_assert_uint_eq(bt.opens[0].request_id, 1);
    ck_assert_uint_eq(bt.opens[0].n_context, 5);
    ck_assert_int_eq(bt.opens[0].context[4], 14);
    ck_assert_uint_eq(bt.items[0].committed_len, 5);
    ck_assert_uint_eq(bt.items[0].n_new_tokens, 0);
    ck_assert_uint_eq(bt.items[0].num_draft, 4);
    ck_assert_uint_eq(bt.items[0].output_pos, 2);
    ck_assert(!bt.items[0].sample);
    ck_assert_int_eq(a.slot.drafter_known, 5);
    ck_assert(a.slot.opened);
    ck_assert_int_eq(b.slot.drafter_known, 0);
    /* two more tokens committed: the next item carries exactly them */
    a.r.n_tokens = 7;
    a.r.p.sampling.temperature = 0.8f;
    ck_assert_int_eq(sd_vf_batch_build(&bt, 2, slots, budgets, 2, false, false), 1);
    ck_assert_int_eq(bt.n_opens, 0);
    ck_assert_uint_eq(bt.batch.step, 2);
    ck_assert_uint_eq(bt.items[0].n_new_tokens, 2);
    ck_assert_int_eq(bt.items[0].new_tokens[0], 15);
    ck_assert_int_eq(bt.items[0].new_tokens[1], 16);
    ck_assert_uint_eq(bt.items[0].committed_len, 7);
    ck_assert(bt.items[0].sample);
    ck_assert_int_eq(a.slot.drafter_known, 7);
    sd_vf_batch_release(&bt);
}
END_TEST

/* A reply result with tokens t[0..n) and optional q (one list per token). */
typedef struct res_buf {
    Specd__DraftResult res;
    int32_t toks[8];
    Specd__Proposal props[8], *pp[8];
    Specd__TokenProb tp[8][2], *tpp[8][2];
} res_buf;

static void res_make(res_buf *b, uint64_t id, const int32_t *t, int n, int nq)
{
    specd__draft_result__init(&b->res);
    b->res.request_id = id;
    memcpy(b->toks, t, (size_t)n * sizeof *t);
    b->res.tokens = b->toks;
    b->res.n_tokens = (size_t)n;
    for (int i = 0; i < nq; i++) {
        specd__proposal__init(&b->props[i]);
        for (int j = 0; j < 2; j++) {
            specd__token_prob__init(&b->tp[i][j]);
            b->tp[i][j].token = j == 0 ? t[i] : t[i] + 1;
            b->tp[i][j].prob = j == 0 ? 0.75f : 0.25f;
            b->tpp[i][j] = &b->tp[i][j];
        }
        b->props[i].q = b->tpp[i];
        b->props[i].n_q = 2;
        b->pp[i] = &b->props[i];
    }
    b->res.q = b->pp;
    b->res.n_q = (size_t)nq;
}

/* --spec-max-batch(-sampled): in a step with more active requests than a
 * request's limit, that request gets no drafts. */
START_TEST(spec_max_batch_limits)
{
    int b[5] = {6, 0, 6, 3, 6};
    ck_assert_int_eq(sd_vf_limit_budgets(b, NULL, 5, 0, 0), 4); /* no limits */
    ck_assert_int_eq(b[0] + b[1] + b[2] + b[3] + b[4], 21);
    ck_assert_int_eq(sd_vf_limit_budgets(b, NULL, 5, 5, 1), 4); /* at the greedy limit: unchanged */
    ck_assert_int_eq(b[3], 3);
    bool sampled[5] = {false, false, true, false, true};
    ck_assert_int_eq(sd_vf_limit_budgets(b, sampled, 5, 5, 4), 2); /* sampled ones over theirs */
    ck_assert_int_eq(b[0], 6);
    ck_assert_int_eq(b[2], 0);
    ck_assert_int_eq(b[3], 3);
    ck_assert_int_eq(b[4], 0);
    ck_assert_int_eq(sd_vf_limit_budgets(b, sampled, 5, 4, 0), 0); /* above the greedy limit: a plain step */
    for (int i = 0; i < 5; i++) ck_assert_int_eq(b[i], 0);
    int one[1] = {6};
    bool s1[1] = {true};
    ck_assert_int_eq(sd_vf_limit_budgets(one, s1, 1, 1, 1), 1); /* alone: within both limits */
    ck_assert_int_eq(one[0], 6);
}
END_TEST

START_TEST(proposal_conversion)
{
    fake_req a;
    fake_init(&a, 1, 3, 5);
    res_buf rb;
    int32_t t[3] = {5, 6, 7};
    res_make(&rb, 1, t, 3, 3);
    ck_assert_int_eq(sd_vf_proposal_from_result(&a.slot, &rb.res, 2, VOCAB), 2); /* clamped to the budget */
    ck_assert_int_eq(a.slot.prop.tokens[1], 6);
    ck_assert_ptr_nonnull(a.slot.prop.q[0]);
    ck_assert_uint_eq(a.slot.prop.nq[1], 2);
    ck_assert_float_eq(a.slot.prop.q[1][0].prob, 0.75f);
    res_make(&rb, 1, t, 3, 2); /* q count != token count: drafts without q */
    ck_assert_int_eq(sd_vf_proposal_from_result(&a.slot, &rb.res, 4, VOCAB), 3);
    ck_assert_ptr_null(a.slot.prop.q[0]);
    res_make(&rb, 1, t, 3, 3);
    rb.tp[1][0].prob = -1.0f; /* invalid q: drafts kept, q dropped */
    ck_assert_int_eq(sd_vf_proposal_from_result(&a.slot, &rb.res, 4, VOCAB), 3);
    ck_assert_ptr_null(a.slot.prop.q[1]);
    res_make(&rb, 1, t, 3, 3);
    rb.tp[2][0].token = 50; /* q(d) == 0: q dropped */
    ck_assert_int_eq(sd_vf_proposal_from_result(&a.slot, &rb.res, 4, VOCAB), 3);
    ck_assert_ptr_null(a.slot.prop.q[2]);
    int32_t bad[2] = {5, VOCAB};
    res_make(&rb, 1, bad, 2, 0); /* out of the vocabulary: no draft at all */
    ck_assert_int_eq(sd_vf_proposal_from_result(&a.slot, &rb.res, 4, VOCAB), 0);
    ck_assert_int_eq(a.slot.prop.n, 0);
    sd_vf_slot_release(&a.slot);
}
END_TEST

START_TEST(apply_reply)
{
    fake_req a, b;
    fake_init(&a, 1, 3, 5);
    fake_init(&b, 2, 3, 5);
    sd_vf_slot *slots[2] = {&a.slot, &b.slot};
    int budgets[2] = {3, 3};
    sd_vf_batch bt;
    sd_vf_batch_init(&bt);
    ck_assert_int_eq(sd_vf_batch_build(&bt, 9, slots, budgets, 2, false, false), 2);
    res_buf r1, r2, r3;
    int32_t t[2] = {1, 2};
    res_make(&r1, 2, t, 2, 0);
    res_make(&r2, 1, t, 0, 0);
    r2.res.need_open = 1;
    res_make(&r3, 77, t, 2, 0); /* unknown id: ignored */
    Specd__DraftResult *rs[3] = {&r1.res, &r2.res, &r3.res};
    Specd__DraftReply rep = SPECD__DRAFT_REPLY__INIT;
    rep.step = 9;
    rep.results = rs;
    rep.n_results = 3;
    ck_assert_int_eq(sd_vf_batch_apply(&bt, &rep, slots, budgets, VOCAB), 1);
    ck_assert_int_eq(b.slot.prop.n, 2);
    ck_assert_int_eq(a.slot.prop.n, 0);
    ck_assert_int_eq(a.slot.drafter_known, 0); /* re-open next step */
    ck_assert_int_eq(sd_vf_batch_build(&bt, 10, slots, budgets, 2, false, false), 2);
    ck_assert_int_eq(bt.n_opens, 1);
    ck_assert_uint_eq(bt.opens[0].request_id, 1);
    sd_vf_batch_release(&bt);
    sd_vf_slot_release(&b.slot);
}
END_TEST

/* ---- link against a fake drafter thread */

typedef struct fake_drafter {
    void *ctx;
    atomic_int answer; /* 1: reply to batches and health; 0: silent */
    atomic_int stop;
    atomic_int opens, batches, closes;
    pthread_t th;
} fake_drafter;

static void fd_reply(void *sock, const sd_msg_id *id, const Specd__DraftBatch *b)
{
    Specd__DraftResult res[8], *rp[8];
    int32_t toks[8][SD_MAX_DRAFT];
    size_t n = b->n_items < 8 ? b->n_items : 8;
    for (size_t i = 0; i < n; i++) {
        specd__draft_result__init(&res[i]);
        res[i].request_id = b->items[i]->request_id;
        for (uint32_t k = 0; k < b->items[i]->num_draft && k < SD_MAX_DRAFT; k++) toks[i][k] = (int32_t)(3 + k);
        res[i].tokens = toks[i];
        res[i].n_tokens = b->items[i]->num_draft;
        rp[i] = &res[i];
    }
    Specd__DraftReply rep = SPECD__DRAFT_REPLY__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    rep.step = b->step;
    rep.results = rp;
    rep.n_results = n;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_REPLY;
    env.draft_reply = &rep;
    sd_msg_send(sock, id, &env, NULL, 0);
}

static void *fd_main(void *arg)
{
    fake_drafter *f = arg;
    void *sock = zmq_socket(f->ctx, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_bind(sock, "inproc://drafter");
    while (!atomic_load(&f->stop)) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        zmq_poll(&it, 1, 10);
        sd_msg_id id;
        Specd__Envelope *env = NULL;
        while (sd_msg_recv(sock, &id, &env, SD_MSG_DONTWAIT, NULL, 0) == SD_OK) {
            if (env->body_case == SPECD__ENVELOPE__BODY_DRAFT_OPEN) atomic_fetch_add(&f->opens, 1);
            if (env->body_case == SPECD__ENVELOPE__BODY_DRAFT_CLOSE) atomic_fetch_add(&f->closes, 1);
            if (env->body_case == SPECD__ENVELOPE__BODY_DRAFT_BATCH) {
                atomic_fetch_add(&f->batches, 1);
                if (atomic_load(&f->answer)) fd_reply(sock, &id, env->draft_batch);
            }
            if (env->body_case == SPECD__ENVELOPE__BODY_HEALTH_REQUEST && atomic_load(&f->answer)) {
                Specd__HealthReply h = SPECD__HEALTH_REPLY__INIT;
                Specd__Envelope out = SPECD__ENVELOPE__INIT;
                h.nonce = env->health_request->nonce;
                h.role = "drafter";
                out.body_case = SPECD__ENVELOPE__BODY_HEALTH_REPLY;
                out.health_reply = &h;
                sd_msg_send(sock, &id, &out, NULL, 0);
            }
            sd_msg_free(env);
        }
    }
    zmq_close(sock);
    return NULL;
}

START_TEST(link_timeout_and_recovery)
{
    fake_drafter f;
    memset(&f, 0, sizeof f);
    f.ctx = zmq_ctx_new();
    atomic_store(&f.answer, 1);
    pthread_create(&f.th, NULL, fd_main, &f);
    usleep(50000); /* inproc: bind before connect */
    char err[256];
    sd_vf_link *l;
    ck_assert_msg(sd_vf_link_new(f.ctx, "inproc://drafter", NULL, 100, VOCAB, &l, err, sizeof err) == SD_OK, "%s", err);
    usleep(20000);
    fake_req a;
    fake_init(&a, 1, 3, 5);
    sd_vf_slot *slots[1] = {&a.slot};
    int budgets[1] = {3};
    sd_vf_link_draft(l, slots, budgets, 1);
    ck_assert_int_eq(a.slot.prop.n, 3);
    ck_assert_int_eq(a.slot.prop.tokens[0], 3);
    ck_assert(sd_vf_link_up(l));
    ck_assert_int_eq(atomic_load(&f.opens), 1);
    /* the drafter goes silent: one timeout, then no per-step waiting */
    atomic_store(&f.answer, 0);
    a.r.n_tokens = 6;
    sd_vf_link_draft(l, slots, budgets, 1);
    ck_assert_int_eq(a.slot.prop.n, 0);
    ck_assert(!sd_vf_link_up(l));
    ck_assert_int_eq(a.slot.drafter_known, 0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int i = 0; i < 20; i++) sd_vf_link_draft(l, slots, budgets, 1);
    clock_gettime(CLOCK_MONOTONIC, &t1);
    double ms = (double)(t1.tv_sec - t0.tv_sec) * 1e3 + (double)(t1.tv_nsec - t0.tv_nsec) * 1e-6;
    ck_assert_msg(ms < 60.0, "20 steps with a dead drafter took %.1f ms", ms);
    ck_assert_int_eq(a.slot.prop.n, 0);
    /* it comes back: a probe notices, the request is re-opened with its full context */
    atomic_store(&f.answer, 1);
    for (int i = 0; i < 100 && !sd_vf_link_up(l); i++) {
        usleep(20000);
        sd_vf_link_poll(l);
        sd_vf_link_draft(l, slots, budgets, 1);
    }
    ck_assert(sd_vf_link_up(l));
    int opens_before = atomic_load(&f.opens);
    sd_vf_link_draft(l, slots, budgets, 1);
    ck_assert_int_eq(a.slot.prop.n, 3);
    ck_assert_int_ge(atomic_load(&f.opens), opens_before);
    ck_assert_int_ge(atomic_load(&f.opens), 2);
    sd_vf_link_close(l, &a.slot);
    for (int i = 0; i < 50 && atomic_load(&f.closes) == 0; i++) usleep(10000);
    ck_assert_int_eq(atomic_load(&f.closes), 1);
    sd_vf_link_free(l);
    atomic_store(&f.stop, 1);
    pthread_join(f.th, NULL);
    zmq_ctx_term(f.ctx);
    sd_vf_slot_release(&a.slot);
}
END_TEST

/* An endpoint zmq cannot connect to: a status, no link, a message naming it. */
START_TEST(link_bad_endpoint_refused)
{
    void *ctx = zmq_ctx_new();
    char err[256] = "";
    sd_vf_link *l = (sd_vf_link *)err; /* not NULL: the call clears it */
    ck_assert_int_eq(sd_vf_link_new(ctx, "nonsense", NULL, 100, VOCAB, &l, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(l);
    ck_assert_msg(strstr(err, "nonsense"), "%s", err);
    ck_assert_int_eq(sd_vf_link_new(ctx, "nonsense", NULL, 100, VOCAB, &l, NULL, 0), SD_ERR_ARG);
    zmq_ctx_term(ctx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vf_draft");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, build_open_then_delta);
    tcase_add_test(tc, spec_max_batch_limits);
    tcase_add_test(tc, proposal_conversion);
    tcase_add_test(tc, apply_reply);
    tcase_add_test(tc, link_timeout_and_recovery);
    tcase_add_test(tc, link_bad_endpoint_refused);
    tcase_set_timeout(tc, 60);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
