/* test_dstate.c — the drafter's request-state table (drafter/dstate.h):
 * open / re-open, the need_open cases (unknown request, length mismatch),
 * appending committed tokens, close, least-recently-used eviction, a JSON
 * schema compiled per request. */
#include <stdlib.h>
#include <string.h>

#include "dpipe.h"
#include "dstate.h"
#include "json_schema.h"
#include "regex_mask.h"
#include "testutil.h"

START_TEST(test_open_and_advance)
{
    sd_dstate *t;
    ck_assert_int_eq(sd_dstate_new(4, &t, NULL, 0), SD_OK);
    int32_t ctx[] = {5, 6, 7};
    sd_sampling s = sd_sampling_default();
    s.temperature = 0.5f;
    s.seed = 9;
    ck_assert_int_eq(sd_dstate_open(t, 42, ctx, 3, &s, NULL, NULL), SD_OK);
    ck_assert_int_eq(sd_dstate_count(t), 1);
    sd_dreq *r;
    int32_t more[] = {8, 9};
    ck_assert_int_eq(sd_dstate_advance(t, 42, 5, more, 2, &r), SD_OK);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->n_ctx, 5);
    int32_t want[] = {5, 6, 7, 8, 9};
    for (int i = 0; i < 5; i++) ck_assert_int_eq(r->ctx[i], want[i]);
    ck_assert_float_eq(r->sampling.temperature, 0.5f);
    ck_assert_uint_eq(r->sampling.seed, 9);
    /* no new tokens, same length: still valid */
    ck_assert_int_eq(sd_dstate_advance(t, 42, 5, NULL, 0, &r), SD_OK);
    ck_assert_uint_eq(r->n_ctx, 5);
    sd_dstate_free(t);
}
END_TEST

/* A JSON schema's text (borrowed from the message) is compiled into the
 * request's own schema; one that does not compile leaves drafts
 * unconstrained; re-opening replaces it. */
START_TEST(test_json_schema_kept)
{
    sd_dstate *t;
    ck_assert_int_eq(sd_dstate_new(2, &t, NULL, 0), SD_OK);
    int32_t ctx[] = {5, 6};
    char text[] = "{\"type\": \"integer\"}";
    sd_sampling s = sd_sampling_default();
    s.json_schema = text;
    s.json_vocab = (const struct sd_json_vocab *)&s; /* any non-NULL table: not used here */
    ck_assert_int_eq(sd_dstate_open(t, 1, ctx, 2, &s, NULL, NULL), SD_OK);
    memset(text, 'x', sizeof text - 1); /* the message's buffer goes away */
    sd_dreq *r = sd_dstate_get(t, 1);
    ck_assert(r->schema && r->sampling.schema == r->schema && !r->sampling.json_schema && r->sampling.json_vocab);
    ck_assert_int_eq(r->schema->nodes[r->schema->root].kind, SD_JS_INTEGER);
    s.json_schema = "{\"pattern\": \"a\"}";
    ck_assert_int_eq(sd_dstate_open(t, 1, ctx, 2, &s, NULL, NULL), SD_OK);
    ck_assert(!r->schema && !r->sampling.schema && !r->sampling.json_vocab);
    s.json_schema = "{\"type\": \"string\"}";
    ck_assert_int_eq(sd_dstate_open(t, 1, ctx, 2, &s, NULL, NULL), SD_OK);
    ck_assert_int_eq(r->schema->nodes[r->schema->root].kind, SD_JS_STRING);
    ck_assert(sd_dstate_close(t, 1));
    ck_assert_ptr_null(r->schema);
    ck_assert_int_eq(sd_dstate_open(t, 2, ctx, 2, &s, NULL, NULL), SD_OK);
    sd_dstate_free(t); /* frees the open request's schema */
}
END_TEST

START_TEST(test_regex_kept)
{
    sd_dstate *t;
    ck_assert_int_eq(sd_dstate_new(2, &t, NULL, 0), SD_OK);
    int32_t ctx[] = {5, 6};
    char text[] = "(cat|dog)s?";
    sd_sampling s = sd_sampling_default();
    s.regex = text;
    s.json_vocab = (const struct sd_json_vocab *)&s; /* any non-NULL table: not used here */
    ck_assert_int_eq(sd_dstate_open(t, 1, ctx, 2, &s, NULL, NULL), SD_OK);
    memset(text, 'x', sizeof text - 1); /* the message's buffer goes away */
    sd_dreq *r = sd_dstate_get(t, 1);
    ck_assert(r->rx && r->sampling.rx == r->rx && !r->sampling.regex && r->sampling.json_vocab);
    ck_assert_str_eq(sd_regex_pattern(r->rx), "(cat|dog)s?");
    s.regex = "(a";
    ck_assert_int_eq(sd_dstate_open(t, 1, ctx, 2, &s, NULL, NULL), SD_OK); /* drafted without it */
    ck_assert(!r->rx && !r->sampling.rx && !r->sampling.json_vocab);
    s.regex = "b+";
    ck_assert_int_eq(sd_dstate_open(t, 1, ctx, 2, &s, NULL, NULL), SD_OK);
    ck_assert(r->rx != NULL);
    ck_assert(sd_dstate_close(t, 1));
    ck_assert_ptr_null(r->rx);
    ck_assert_int_eq(sd_dstate_open(t, 2, ctx, 2, &s, NULL, NULL), SD_OK);
    sd_dstate_free(t); /* frees the open request's expression */
}
END_TEST

START_TEST(test_need_open_cases)
{
    sd_dstate *t;
    ck_assert_int_eq(sd_dstate_new(4, &t, NULL, 0), SD_OK);
    sd_dreq *r;
    int32_t ctx[] = {1, 2, 3}, one[] = {4};
    /* unknown request */
    ck_assert_int_eq(sd_dstate_advance(t, 7, 1, one, 1, &r), SD_ERR_STATE);
    ck_assert_ptr_null(r);
    ck_assert_int_eq(sd_dstate_open(t, 7, ctx, 3, NULL, NULL, NULL), SD_OK);
    /* committed_len too long (drafter missed tokens), too short (rolled back) */
    ck_assert_int_eq(sd_dstate_advance(t, 7, 5, one, 1, &r), SD_ERR_STATE);
    ck_assert_int_eq(sd_dstate_advance(t, 7, 3, one, 1, &r), SD_ERR_STATE);
    ck_assert_int_eq(sd_dstate_advance(t, 7, 2, NULL, 0, &r), SD_ERR_STATE);
    /* the request is unchanged by the failures */
    ck_assert_uint_eq(sd_dstate_get(t, 7)->n_ctx, 3);
    ck_assert_int_eq(sd_dstate_advance(t, 7, 4, one, 1, &r), SD_OK);
    /* re-open resets the context */
    int32_t ctx2[] = {9};
    ck_assert_int_eq(sd_dstate_open(t, 7, ctx2, 1, NULL, NULL, NULL), SD_OK);
    ck_assert_int_eq(sd_dstate_count(t), 1);
    ck_assert_uint_eq(sd_dstate_get(t, 7)->n_ctx, 1);
    ck_assert_int_eq(sd_dstate_get(t, 7)->ctx[0], 9);
    /* closed: unknown again */
    ck_assert(sd_dstate_close(t, 7));
    ck_assert(!sd_dstate_close(t, 7));
    ck_assert_int_eq(sd_dstate_advance(t, 7, 1, NULL, 0, &r), SD_ERR_STATE);
    ck_assert_int_eq(sd_dstate_count(t), 0);
    sd_dstate_free(t);
}
END_TEST

START_TEST(test_long_append)
{
    sd_dstate *t;
    ck_assert_int_eq(sd_dstate_new(1, &t, NULL, 0), SD_OK);
    int32_t tok = 1;
    ck_assert_int_eq(sd_dstate_open(t, 1, &tok, 1, NULL, NULL, NULL), SD_OK);
    sd_dreq *r = NULL;
    for (int i = 2; i <= 5000; i++) {
        tok = i;
        ck_assert_int_eq(sd_dstate_advance(t, 1, (uint64_t)i, &tok, 1, &r), SD_OK);
    }
    ck_assert_uint_eq(r->n_ctx, 5000);
    for (int i = 0; i < 5000; i++) ck_assert_int_eq(r->ctx[i], i + 1);
    sd_dstate_free(t);
}
END_TEST

START_TEST(test_lru_eviction)
{
    sd_dstate *t;
    ck_assert_int_eq(sd_dstate_new(3, &t, NULL, 0), SD_OK);
    int32_t c = 1;
    bool ev;
    uint64_t evid = 0;
    sd_dreq *r;
    for (uint64_t id = 1; id <= 3; id++) {
        ck_assert_int_eq(sd_dstate_open(t, id, &c, 1, NULL, &ev, &evid), SD_OK);
        ck_assert(!ev);
    }
    /* touch 1, so 2 is the least recently used */
    ck_assert_int_eq(sd_dstate_advance(t, 1, 1, NULL, 0, &r), SD_OK);
    ck_assert_int_eq(sd_dstate_open(t, 4, &c, 1, NULL, &ev, &evid), SD_OK);
    ck_assert(ev);
    ck_assert_uint_eq(evid, 2);
    ck_assert_int_eq(sd_dstate_count(t), 3);
    ck_assert_ptr_null(sd_dstate_get(t, 2));
    /* the evicted request answers need_open, the others are intact */
    ck_assert_int_eq(sd_dstate_advance(t, 2, 1, NULL, 0, &r), SD_ERR_STATE);
    ck_assert_int_eq(sd_dstate_advance(t, 3, 1, NULL, 0, &r), SD_OK);
    /* re-opening a known request never evicts */
    ck_assert_int_eq(sd_dstate_open(t, 1, &c, 1, NULL, &ev, &evid), SD_OK);
    ck_assert(!ev);
    /* now 4 is the oldest */
    ck_assert_int_eq(sd_dstate_open(t, 5, &c, 1, NULL, &ev, &evid), SD_OK);
    ck_assert(ev);
    ck_assert_uint_eq(evid, 4);
    /* after a close there is room again: no eviction */
    ck_assert(sd_dstate_close(t, 3));
    ck_assert_int_eq(sd_dstate_open(t, 6, &c, 1, NULL, &ev, &evid), SD_OK);
    ck_assert(!ev);
    sd_dstate_free(t);
}
END_TEST

START_TEST(test_bad_args)
{
    char err[128] = "";
    sd_dstate *none;
    ck_assert_int_eq(sd_dstate_new(0, &none, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(none);
    ck_assert_str_ne(err, "");
    ck_assert_int_eq(sd_dstate_new(-3, &none, NULL, 0), SD_ERR_ARG);
    sd_dstate_free(NULL);
    sd_dstate *t;
    ck_assert_int_eq(sd_dstate_new(2, &t, NULL, 0), SD_OK);
    /* empty context is allowed (nothing to draft from yet) */
    ck_assert_int_eq(sd_dstate_open(t, 1, NULL, 0, NULL, NULL, NULL), SD_OK);
    sd_dreq *r;
    int32_t x = 3;
    ck_assert_int_eq(sd_dstate_advance(t, 1, 1, &x, 1, &r), SD_OK);
    ck_assert_uint_eq(r->n_ctx, 1);
    ck_assert_float_eq(r->sampling.temperature, 0.0f);
    sd_dstate_free(t);
}
END_TEST

/* A pipelined item's output position is a peer's uint64: one beyond the
 * committed length (2^63 overflowed the arithmetic) counts as no prompt; a
 * sound one gives the first new token's output position. */
START_TEST(test_pipe_output_pos)
{
    sd_dstate *t;
    ck_assert_int_eq(sd_dstate_new(2, &t, NULL, 0), SD_OK);
    int32_t ctx[3] = {5, 6, 7};
    sd_dreq *r;
    ck_assert_int_eq(sd_dstate_open(t, 9, ctx, 3, NULL, NULL, NULL), SD_OK);
    ck_assert_int_eq(sd_dstate_advance(t, 9, 3, NULL, 0, &r), SD_OK);
    Specd__DraftItem it = SPECD__DRAFT_ITEM__INIT;
    it.request_id = 9;
    it.committed_len = 3;
    it.num_draft = 2;
    const uint64_t pos[2] = {(uint64_t)1 << 63, 1}, want[2] = {3, 1};
    for (int i = 0; i < 2; i++) {
        it.output_pos = pos[i];
        ck_assert_int_eq(sd_dpipe_note(r, &it, (const uint8_t *)"p", 1, true, 0.0, 1.0), SD_OK);
        r->pipe.dirty = true;
        sd_propose_item items[2];
        sd_dreq *reqs[2];
        ck_assert_int_eq(sd_dpipe_collect(t, items, reqs, 2), 1);
        ck_assert_uint_eq(items[0].out_pos, want[i]);
    }
    sd_dstate_free(t);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dstate");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_open_and_advance);
    tcase_add_test(tc, test_json_schema_kept);
    tcase_add_test(tc, test_regex_kept);
    tcase_add_test(tc, test_need_open_cases);
    tcase_add_test(tc, test_long_append);
    tcase_add_test(tc, test_lru_eviction);
    tcase_add_test(tc, test_bad_args);
    tcase_add_test(tc, test_pipe_output_pos);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(suite()); }
