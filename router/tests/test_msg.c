/* test_msg.c — the ZeroMQ transport (proto/msg.c): every message type
 * round-trips over an inproc DEALER ⇄ ROUTER pair, and garbage (random bytes,
 * truncated envelopes, empty frames, no body, unknown body, bad ids, oversize
 * lists, extra frames) is rejected with a message, never a crash. */
#include <check.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <zmq.h>

#include "msg.h"
#include "regex_mask.h"
#include "sampler.h"
#include "testutil.h"

static void *ctx, *router, *dealer;

static void setup(void)
{
    ctx = zmq_ctx_new();
    router = zmq_socket(ctx, ZMQ_ROUTER);
    dealer = zmq_socket(ctx, ZMQ_DEALER);
    int t = 2000;
    zmq_setsockopt(router, ZMQ_RCVTIMEO, &t, sizeof t);
    zmq_setsockopt(dealer, ZMQ_RCVTIMEO, &t, sizeof t);
    zmq_setsockopt(dealer, ZMQ_ROUTING_ID, "lane-1", 6);
    ck_assert_int_eq(zmq_bind(router, "inproc://test-msg"), 0);
    ck_assert_int_eq(zmq_connect(dealer, "inproc://test-msg"), 0);
}

static void teardown(void)
{
    zmq_close(dealer);
    zmq_close(router);
    zmq_ctx_term(ctx);
}

/* Dealer → router, then the same envelope router → dealer; returns the
 * re-packed bytes of what arrived equal to what was sent. */
static void roundtrip(const Specd__Envelope *env)
{
    char err[256];
    size_t n = specd__envelope__get_packed_size(env);
    uint8_t *want = malloc(n + 1);
    specd__envelope__pack(env, want);
    ck_assert_int_eq(sd_msg_send(dealer, NULL, env, err, sizeof err), SD_OK);
    sd_msg_id id;
    Specd__Envelope *got = NULL;
    ck_assert_int_eq(sd_msg_recv(router, &id, &got, SD_MSG_BLOCK, err, sizeof err), SD_OK);
    ck_assert_uint_eq(id.len, 6);
    ck_assert(!memcmp(id.data, "lane-1", 6));
    ck_assert_int_eq(got->body_case, env->body_case);
    uint8_t *back = malloc(n + 1);
    ck_assert_uint_eq(specd__envelope__get_packed_size(got), n);
    specd__envelope__pack(got, back);
    ck_assert(!memcmp(want, back, n));
    ck_assert_int_eq(sd_msg_send(router, &id, got, err, sizeof err), SD_OK);
    sd_msg_free(got);
    got = NULL;
    ck_assert_int_eq(sd_msg_recv(dealer, NULL, &got, SD_MSG_BLOCK, err, sizeof err), SD_OK);
    specd__envelope__pack(got, back);
    ck_assert(!memcmp(want, back, n));
    sd_msg_free(got);
    free(want);
    free(back);
}

/* One envelope of every oneof case, filled field by field, in the order of
 * specd.proto (three tests: the router's requests, the drafter's messages,
 * health), so a missing case is visible next to the schema. */
static const int32_t IDS[] = {1, 2, 3, 8191};
static const uint64_t AT[] = {4, 2, 1};

START_TEST(request_types_roundtrip)
{
    int32_t *ids = (int32_t *)IDS;
    uint64_t *at = (uint64_t *)AT;
    Specd__SamplingParams sp = SPECD__SAMPLING_PARAMS__INIT;
    sp.temperature = 0.7f;
    sp.top_k = 40;
    sp.seed = 99;
    Specd__SpecParams spec = SPECD__SPEC_PARAMS__INIT;
    spec.enabled = 1;
    spec.num_draft = 5;
    spec.verify = SPECD__VERIFY_MODE__VERIFY_REJECTION;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;

    Specd__Submit sub = SPECD__SUBMIT__INIT;
    sub.request_id = 7;
    sub.prompt_ids = ids;
    sub.n_prompt_ids = 4;
    sub.sampling = &sp;
    sub.max_tokens = 16;
    sub.stop_ids = ids;
    sub.n_stop_ids = 1;
    sub.spec = &spec;
    env.body_case = SPECD__ENVELOPE__BODY_SUBMIT;
    env.submit = &sub;
    roundtrip(&env);

    Specd__Cancel can = SPECD__CANCEL__INIT;
    can.request_id = 7;
    env.body_case = SPECD__ENVELOPE__BODY_CANCEL;
    env.cancel = &can;
    roundtrip(&env);

    Specd__SpecStats ss = SPECD__SPEC_STATS__INIT;
    ss.steps = 3;
    ss.accepted_at = at;
    ss.n_accepted_at = 3;
    Specd__TokenEvent te = SPECD__TOKEN_EVENT__INIT;
    te.request_id = 7;
    te.tokens = ids;
    te.n_tokens = 4;
    te.finish = SPECD__FINISH_REASON__FINISH_LENGTH;
    te.stats = &ss;
    te.cached_tokens = 64;
    env.body_case = SPECD__ENVELOPE__BODY_TOKEN_EVENT;
    env.token_event = &te;
    roundtrip(&env);

    Specd__ErrorEvent ee = SPECD__ERROR_EVENT__INIT;
    ee.request_id = 7;
    ee.code = "kv_exhausted";
    ee.message = "no blocks";
    env.body_case = SPECD__ENVELOPE__BODY_ERROR;
    env.error = &ee;
    roundtrip(&env);
}
END_TEST

START_TEST(drafter_types_roundtrip)
{
    int32_t *ids = (int32_t *)IDS;
    Specd__SamplingParams sp = SPECD__SAMPLING_PARAMS__INIT;
    sp.temperature = 0.7f;
    sp.json_schema = "{\"type\": \"object\"}";
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    Specd__DraftOpen dop = SPECD__DRAFT_OPEN__INIT;
    dop.request_id = 7;
    dop.context = ids;
    dop.n_context = 4;
    dop.sampling = &sp;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_OPEN;
    env.draft_open = &dop;
    roundtrip(&env);

    Specd__DraftClose dcl = SPECD__DRAFT_CLOSE__INIT;
    dcl.request_id = 7;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_CLOSE;
    env.draft_close = &dcl;
    roundtrip(&env);

    Specd__DraftItem item = SPECD__DRAFT_ITEM__INIT;
    item.request_id = 7;
    item.committed_len = 10;
    item.new_tokens = ids;
    item.n_new_tokens = 2;
    item.num_draft = 4;
    item.sample = 1;
    item.in_flight = ids;
    item.n_in_flight = 2;
    Specd__DraftItem *items[] = {&item, &item};
    Specd__DraftBatch db = SPECD__DRAFT_BATCH__INIT;
    db.step = 12;
    db.pipeline = 1;
    db.step_us = 1500;
    db.items = items;
    db.n_items = 2;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_BATCH;
    env.draft_batch = &db;
    roundtrip(&env);

    Specd__TokenProb tp = SPECD__TOKEN_PROB__INIT;
    tp.token = 3;
    tp.prob = 0.5f;
    Specd__TokenProb *tps[] = {&tp, &tp};
    Specd__Proposal prop = SPECD__PROPOSAL__INIT;
    prop.q = tps;
    prop.n_q = 2;
    Specd__Proposal *props[] = {&prop, &prop};
    Specd__DraftResult dr = SPECD__DRAFT_RESULT__INIT;
    dr.request_id = 7;
    dr.tokens = ids;
    dr.n_tokens = 2;
    dr.q = props;
    dr.n_q = 2;
    dr.base_len = 10;
    dr.base_hash = 0xfedcba9876543210ULL;
    dr.draft_us = 300;
    Specd__DraftResult *drs[] = {&dr};
    Specd__DraftReply drep = SPECD__DRAFT_REPLY__INIT;
    drep.step = 12;
    drep.results = drs;
    drep.n_results = 1;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_REPLY;
    env.draft_reply = &drep;
    roundtrip(&env);
}
END_TEST

START_TEST(health_types_roundtrip)
{
    uint64_t *at = (uint64_t *)AT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    Specd__HealthRequest hq = SPECD__HEALTH_REQUEST__INIT;
    hq.nonce = 5;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REQUEST;
    env.health_request = &hq;
    roundtrip(&env);

    Specd__Stats st = SPECD__STATS__INIT;
    st.kv_blocks_total = 100;
    st.prefix_queries = 300;
    st.prefix_hits = 256;
    st.prefix_cached_blocks = 12;
    st.prefix_evictions = 3;
    st.accepted_at = at;
    st.n_accepted_at = 3;
    Specd__HealthReply hr = SPECD__HEALTH_REPLY__INIT;
    hr.nonce = 5;
    hr.role = "verifier";
    hr.model = "m";
    hr.stats = &st;
    hr.max_context = 4096;
    hr.host = "node-1";
    hr.device = "cpu";
    hr.threads = 2;
    hr.instance = 0x1234567890abcdefULL;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REPLY;
    env.health_reply = &hr;
    roundtrip(&env);
}
END_TEST

/* Sends raw frames from the dealer; the router must reject them with
 * SD_ERR_FORMAT and stay usable. */
static void expect_rejected(const void *bytes, size_t n, const char *why)
{
    char err[256] = "";
    ck_assert_int_ge(zmq_send(dealer, bytes, n, 0), 0);
    sd_msg_id id;
    Specd__Envelope *got = NULL;
    sd_status st = sd_msg_recv(router, &id, &got, SD_MSG_BLOCK, err, sizeof err);
    ck_assert_msg(st == SD_ERR_FORMAT, "%s: status %d", why, st);
    ck_assert_ptr_null(got);
    ck_assert_msg(err[0] != '\0', "%s: no message", why);
}

static void still_works(void)
{
    Specd__HealthRequest hq = SPECD__HEALTH_REQUEST__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REQUEST;
    env.health_request = &hq;
    roundtrip(&env);
}

static size_t pack(const Specd__Envelope *env, uint8_t **out)
{
    size_t n = specd__envelope__get_packed_size(env);
    *out = malloc(n + 1);
    specd__envelope__pack(env, *out);
    return n;
}

START_TEST(garbage_is_rejected)
{
    expect_rejected("", 0, "empty frame");
    /* Cancel{1}, then an unknown field numbered 0 written overlong (80 00): protobuf-c takes it, but
     * could not pack the envelope again */
    expect_rejected("\x12\x02\x08\x01\x80\x00\x00", 7, "field number 0");
    uint8_t none[1];
    Specd__Envelope empty = SPECD__ENVELOPE__INIT;
    expect_rejected(none, specd__envelope__get_packed_size(&empty), "no oneof");
    srand(1234);
    for (int k = 0; k < 200; k++) {
        uint8_t junk[64];
        size_t n = 1 + (size_t)(rand() % 64);
        for (size_t i = 0; i < n; i++) junk[i] = (uint8_t)rand();
        char err[256];
        zmq_send(dealer, junk, n, 0);
        sd_msg_id id;
        Specd__Envelope *got = NULL;
        sd_status st = sd_msg_recv(router, &id, &got, SD_MSG_BLOCK, err, sizeof err);
        ck_assert(st == SD_OK || st == SD_ERR_FORMAT); /* random bytes may decode; never crash */
        sd_msg_free(got);
    }
    int32_t ids[] = {1, 2, 3, 4, 5, 6, 7, 8};
    Specd__Submit sub = SPECD__SUBMIT__INIT;
    sub.request_id = 1;
    sub.prompt_ids = ids;
    sub.n_prompt_ids = 8;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    env.body_case = SPECD__ENVELOPE__BODY_SUBMIT;
    env.submit = &sub;
    uint8_t *buf;
    size_t n = pack(&env, &buf);
    expect_rejected(buf, n - 3, "truncated");
    free(buf);
    ids[2] = -5;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "negative id");
    free(buf);
    ids[2] = 3;
    sub.request_id = 0;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "request id 0");
    free(buf);
    sub.request_id = SD_MSG_MAX_REQUEST_ID + 1; /* ids are 56 bits: the drafter keys its state by peer above */
    n = pack(&env, &buf);
    expect_rejected(buf, n, "request id beyond 2^56");
    free(buf);
    /* pipelined: in_flight ids are checked like any token list */
    int32_t fl[SD_MSG_MAX_POSITIONS + 1] = {0};
    Specd__DraftItem item = SPECD__DRAFT_ITEM__INIT;
    Specd__DraftItem *items[] = {&item};
    Specd__DraftBatch db = SPECD__DRAFT_BATCH__INIT;
    item.request_id = 2;
    item.in_flight = fl;
    item.n_in_flight = 3;
    fl[1] = -1;
    db.pipeline = 1;
    db.items = items;
    db.n_items = 1;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_BATCH;
    env.draft_batch = &db;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "negative in_flight id");
    free(buf);
    fl[1] = 0;
    item.n_in_flight = SD_MSG_MAX_POSITIONS + 1;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "in_flight longer than a span");
    free(buf);
    const uint8_t unknown[] = {0x7a, 0x02, 0x08, 0x01}; /* field 15, length-delimited */
    expect_rejected(unknown, sizeof unknown, "unknown body");
    still_works();
}
END_TEST

/* Sampling settings' lists (logit bias, allowed ids) in a submit or a draft
 * open: the bias halves of one length, bounded, ids >= 0; a JSON schema
 * bounded, not beside json_object. */
START_TEST(bad_sampling_lists_are_rejected)
{
    int32_t prompt[2] = {1, 2}, ids[2] = {3, 4};
    float values[2] = {1.0f, -2.0f};
    Specd__SamplingParams sp = SPECD__SAMPLING_PARAMS__INIT;
    Specd__Submit sub = SPECD__SUBMIT__INIT;
    sub.request_id = 7;
    sub.prompt_ids = prompt;
    sub.n_prompt_ids = 2;
    sub.sampling = &sp;
    sp.bias_ids = ids;
    sp.bias_values = values;
    sp.n_bias_ids = 2;
    sp.n_bias_values = 2;
    sp.allowed_token_ids = ids;
    sp.n_allowed_token_ids = 2;
    sp.min_tokens = 5;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    env.body_case = SPECD__ENVELOPE__BODY_SUBMIT;
    env.submit = &sub;
    roundtrip(&env);
    uint8_t *buf;
    sp.n_bias_values = 1;
    size_t n = pack(&env, &buf);
    expect_rejected(buf, n, "2 bias ids, 1 value");
    free(buf);
    sp.n_bias_values = 2;
    ids[1] = -4;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "negative bias / allowed id");
    free(buf);
    ids[1] = 4;
    sp.json_schema = "{\"type\": \"integer\"}";
    roundtrip(&env);
    sp.json_object = true;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "json_object and json_schema");
    free(buf);
    sp.json_object = false;
    char *big = malloc(SD_MAX_JSON_SCHEMA + 2);
    memset(big, ' ', SD_MAX_JSON_SCHEMA + 1);
    big[SD_MAX_JSON_SCHEMA + 1] = 0;
    sp.json_schema = big;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "a schema too long");
    free(buf);
    free(big);
    sp.json_schema = (char *)protobuf_c_empty_string;
    sp.regex = "\\d{4}-\\d{2}";
    roundtrip(&env);
    sp.json_object = true;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "JSON output and a regex");
    free(buf);
    sp.json_object = false;
    big = malloc(SD_MAX_REGEX + 2);
    memset(big, 'a', SD_MAX_REGEX + 1);
    big[SD_MAX_REGEX + 1] = 0;
    sp.regex = big;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "a regex too long");
    free(buf);
    free(big);
    sp.regex = (char *)protobuf_c_empty_string;
    Specd__DraftOpen o = SPECD__DRAFT_OPEN__INIT;
    o.request_id = 7;
    o.context = prompt;
    o.n_context = 2;
    o.sampling = &sp;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_OPEN;
    env.draft_open = &o;
    roundtrip(&env);
    sp.n_allowed_token_ids = 0;
    sp.n_bias_ids = 1;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "draft open: 1 bias id, 2 values");
    free(buf);
    still_works();
}
END_TEST

/* Log-probabilities: one per token, no NaN, at most 20 alternatives, ids >= 0. */
START_TEST(bad_logprobs_are_rejected)
{
    int32_t toks[2] = {4, 5};
    Specd__TopLogprob tl = SPECD__TOP_LOGPROB__INIT, *tls[SD_MSG_MAX_LOGPROBS + 1];
    Specd__TokenLogprob lp = SPECD__TOKEN_LOGPROB__INIT, *lps[2] = {&lp, &lp};
    Specd__TokenEvent te = SPECD__TOKEN_EVENT__INIT;
    for (size_t i = 0; i <= SD_MSG_MAX_LOGPROBS; i++) tls[i] = &tl;
    te.request_id = 3;
    te.tokens = toks;
    te.n_tokens = 2;
    te.logprobs = lps;
    te.n_logprobs = 1;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    uint8_t *buf;
    size_t n;
    env.body_case = SPECD__ENVELOPE__BODY_TOKEN_EVENT;
    env.token_event = &te;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "1 logprob for 2 tokens");
    free(buf);
    te.n_logprobs = 2;
    lp.logprob = NAN;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "NaN logprob");
    free(buf);
    lp.logprob = INFINITY; /* JSON has no +inf: the router would drop the entry */
    n = pack(&env, &buf);
    expect_rejected(buf, n, "+inf logprob");
    free(buf);
    lp.logprob = -1.0f;
    lp.top = tls;
    lp.n_top = SD_MSG_MAX_LOGPROBS + 1;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "21 alternatives");
    free(buf);
    lp.n_top = 1;
    tl.token = -2;
    te.prompt_logprobs = lps;
    te.n_prompt_logprobs = 1;
    n = pack(&env, &buf);
    expect_rejected(buf, n, "negative alternative id");
    free(buf);
    still_works();
}
END_TEST

START_TEST(oversize_list_is_rejected)
{
    size_t n = SD_MSG_MAX_TOKENS + 1;
    int32_t *ids = calloc(n, sizeof *ids);
    Specd__TokenEvent te = SPECD__TOKEN_EVENT__INIT;
    te.request_id = 1;
    te.tokens = ids;
    te.n_tokens = n;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    env.body_case = SPECD__ENVELOPE__BODY_TOKEN_EVENT;
    env.token_event = &te;
    uint8_t *buf;
    size_t len = pack(&env, &buf);
    expect_rejected(buf, len, "oversize list");
    free(buf);
    free(ids);
    still_works();
}
END_TEST

START_TEST(extra_frames_are_rejected)
{
    Specd__HealthRequest hq = SPECD__HEALTH_REQUEST__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REQUEST;
    env.health_request = &hq;
    uint8_t *buf;
    size_t n = pack(&env, &buf);
    zmq_send(dealer, buf, n, ZMQ_SNDMORE);
    zmq_send(dealer, buf, n, 0);
    free(buf);
    char err[256];
    Specd__Envelope *got = NULL;
    ck_assert_int_eq(sd_msg_recv(router, NULL, &got, SD_MSG_BLOCK, err, sizeof err), SD_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err, "extra frames"));
    still_works();
}
END_TEST

START_TEST(nonblocking_and_send_errors)
{
    char err[256];
    Specd__Envelope *got = NULL;
    ck_assert_int_eq(sd_msg_recv(dealer, NULL, &got, SD_MSG_DONTWAIT, err, sizeof err), SD_ERR_TIMEOUT);
    Specd__Envelope empty = SPECD__ENVELOPE__INIT;
    ck_assert_int_eq(sd_msg_send(dealer, NULL, &empty, err, sizeof err), SD_ERR_ARG);
    Specd__HealthRequest hq = SPECD__HEALTH_REQUEST__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REQUEST;
    env.health_request = &hq;
    ck_assert_int_eq(sd_msg_send(router, NULL, &env, err, sizeof err), SD_ERR_ARG); /* identity needed */
    ck_assert_str_eq(sd_msg_kind(&env), "health_request");
    ck_assert_int_eq(sd_msg_decode((const uint8_t *)"", 0, &got, err, sizeof err), SD_ERR_FORMAT);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("msg");
    TCase *tc = tcase_create("transport");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, request_types_roundtrip);
    tcase_add_test(tc, drafter_types_roundtrip);
    tcase_add_test(tc, health_types_roundtrip);
    tcase_add_test(tc, garbage_is_rejected);
    tcase_add_test(tc, bad_logprobs_are_rejected);
    tcase_add_test(tc, bad_sampling_lists_are_rejected);
    tcase_add_test(tc, oversize_list_is_rejected);
    tcase_add_test(tc, extra_frames_are_rejected);
    tcase_add_test(tc, nonblocking_and_send_errors);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
