/* fake_verifier.c — TEST TOOLING ONLY (built as specd-test-fake-verifier).
 *
 * A stand-in for specd-verifier so the router can be tested end to end before
 * (and independently of) the real engine. It binds a ZeroMQ ROUTER socket and
 *   - answers HealthRequest with a HealthReply (role "verifier", --model,
 *     --max-context, --vocab, and Stats that add up what it "generated");
 *   - turns each Submit into a deterministic token stream: output token i is
 *     prompt_ids[i % n_prompt]; every step emits up to 2 tokens (as a
 *     speculative step with num_draft 4 and 1 accepted would) when speculation
 *     is enabled, else 1; it honours max_tokens (FINISH_LENGTH), stop_ids and
 *     --eos unless ignore_eos (FINISH_STOP);
 *   - handles Cancel (logs "fake-verifier: cancel request N" on stderr);
 *   - waits --delay-ms between steps (default 0);
 *   - logs and drops malformed messages (the transport's contract).
 * It has no model and is not part of the product. */
#include <getopt.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <zmq.h>

#include "clock.h"
#include "msg.h"

#define MAX_REQ 1024

typedef struct {
    bool used;
    sd_msg_id peer;
    uint64_t id;
    int32_t *prompt;
    size_t n_prompt;
    int32_t stop_ids[64];
    size_t n_stop;
    unsigned max_tokens, emitted, steps;
    bool ignore_eos, spec;
} freq;

static freq reqs[MAX_REQ];
static int g_eos = 0;
static uint64_t g_steps, g_drafted, g_accepted, g_generated;

static void send_env(void *sock, const sd_msg_id *peer, Specd__Envelope *env)
{
    char err[256];
    if (sd_msg_send(sock, peer, env, err, sizeof err) != SD_OK) fprintf(stderr, "fake-verifier: %s\n", err);
}

static void on_health(void *sock, const sd_msg_id *peer, const Specd__HealthRequest *h, const char *model, unsigned ctx,
                      unsigned vocab)
{
    Specd__Stats st = SPECD__STATS__INIT;
    Specd__HealthReply r = SPECD__HEALTH_REPLY__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    uint64_t at[1] = {g_accepted};
    unsigned active = 0;
    for (int i = 0; i < MAX_REQ; i++) active += reqs[i].used;
    st.active_requests = active;
    st.kv_blocks_total = 1024;
    st.kv_blocks_free = 1024 - active;
    st.steps = g_steps;
    st.draft_tokens = g_drafted;
    st.accepted_tokens = g_accepted;
    st.accepted_at = at;
    st.n_accepted_at = 1;
    st.tokens_generated = g_generated;
    st.drafter_up = true;
    r.nonce = h->nonce;
    r.role = "verifier";
    r.model = (char *)model;
    r.stats = &st;
    r.max_context = ctx;
    r.vocab_size = vocab;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REPLY;
    env.health_reply = &r;
    send_env(sock, peer, &env);
}

static void on_submit(void *sock, const sd_msg_id *peer, const Specd__Submit *s)
{
    for (int i = 0; i < MAX_REQ; i++) {
        if (reqs[i].used) continue;
        freq *r = &reqs[i];
        memset(r, 0, sizeof *r);
        r->used = true;
        r->peer = *peer;
        r->id = s->request_id;
        r->n_prompt = s->n_prompt_ids;
        r->prompt = malloc((s->n_prompt_ids ? s->n_prompt_ids : 1) * sizeof *r->prompt);
        if (s->n_prompt_ids) memcpy(r->prompt, s->prompt_ids, s->n_prompt_ids * sizeof *r->prompt);
        r->n_stop = s->n_stop_ids < 64 ? s->n_stop_ids : 64;
        if (r->n_stop) memcpy(r->stop_ids, s->stop_ids, r->n_stop * sizeof *r->stop_ids);
        r->max_tokens = s->max_tokens ? s->max_tokens : 16;
        r->ignore_eos = s->ignore_eos;
        r->spec = s->spec && s->spec->enabled;
        fprintf(stderr, "fake-verifier: submit request %llu (%zu prompt tokens, max %u)\n", (unsigned long long)r->id,
                r->n_prompt, r->max_tokens);
        return;
    }
    Specd__ErrorEvent e = SPECD__ERROR_EVENT__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    e.request_id = s->request_id;
    e.code = "overloaded";
    e.message = "fake verifier is full";
    env.body_case = SPECD__ENVELOPE__BODY_ERROR;
    env.error = &e;
    send_env(sock, peer, &env);
}

static void on_cancel(const Specd__Cancel *c)
{
    fprintf(stderr, "fake-verifier: cancel request %llu\n", (unsigned long long)c->request_id);
    for (int i = 0; i < MAX_REQ; i++)
        if (reqs[i].used && reqs[i].id == c->request_id) {
            free(reqs[i].prompt);
            reqs[i].used = false;
        }
}

static bool is_stop(const freq *r, int32_t t)
{
    if (!r->ignore_eos && t == g_eos) return true;
    for (size_t i = 0; i < r->n_stop; i++)
        if (r->stop_ids[i] == t) return true;
    return false;
}

/* One step of request r: up to 2 tokens (spec) or 1, then the event. */
static void step(void *sock, freq *r)
{
    int32_t toks[2];
    size_t n = 0, want = r->spec ? 2 : 1;
    Specd__FinishReason fin = SPECD__FINISH_REASON__FINISH_NONE;
    while (n < want && fin == SPECD__FINISH_REASON__FINISH_NONE) {
        int32_t t = r->n_prompt ? r->prompt[r->emitted % r->n_prompt] : 1;
        toks[n++] = t;
        r->emitted++;
        if (is_stop(r, t)) fin = SPECD__FINISH_REASON__FINISH_STOP;
        else if (r->emitted >= r->max_tokens) fin = SPECD__FINISH_REASON__FINISH_LENGTH;
    }
    r->steps++;
    g_steps++;
    g_generated += n;
    if (r->spec) {
        g_drafted += 4;
        g_accepted += n - 1;
    }
    Specd__SpecStats ss = SPECD__SPEC_STATS__INIT;
    uint64_t at[1] = {r->spec ? r->emitted / 2 : 0};
    ss.steps = r->steps;
    ss.draft_tokens = r->spec ? 4ull * r->steps : 0;
    ss.accepted_tokens = r->spec ? r->emitted - r->steps : 0;
    ss.accepted_at = at;
    ss.n_accepted_at = r->spec ? 1 : 0;
    Specd__StepInfo si = SPECD__STEP_INFO__INIT; /* speculating: 4 drafted (alternately the drafter's and
                                                   * the lookup's), n - 1 accepted */
    si.drafted = r->spec ? 4 : 0;
    si.accepted = r->spec ? (uint32_t)n - 1 : 0;
    si.source = !r->spec       ? SPECD__DRAFT_SOURCE__DRAFT_NONE
                : r->steps % 2 ? SPECD__DRAFT_SOURCE__DRAFT_DRAFTER
                               : SPECD__DRAFT_SOURCE__DRAFT_NGRAM;
    Specd__TokenEvent ev = SPECD__TOKEN_EVENT__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    ev.step = &si;
    ev.request_id = r->id;
    ev.tokens = toks;
    ev.n_tokens = n;
    ev.finish = fin;
    ev.prompt_tokens = (uint32_t)r->n_prompt;
    ev.completion_tokens = r->emitted;
    ev.stats = &ss;
    env.body_case = SPECD__ENVELOPE__BODY_TOKEN_EVENT;
    env.token_event = &ev;
    send_env(sock, &r->peer, &env);
    if (fin != SPECD__FINISH_REASON__FINISH_NONE) {
        free(r->prompt);
        r->used = false;
    }
}

int main(int argc, char **argv)
{
    static const struct option lo[] = {{"listen", 1, 0, 'l'}, {"model", 1, 0, 'm'},    {"max-context", 1, 0, 'c'},
                                       {"vocab", 1, 0, 'v'},  {"delay-ms", 1, 0, 'd'}, {"eos", 1, 0, 'e'},
                                       {0, 0, 0, 0}};
    const char *listen = NULL, *model = "fake";
    unsigned ctx = 4096, vocab = 8192;
    int delay = 0, c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == 'l') listen = optarg;
        else if (c == 'm') model = optarg;
        else if (c == 'c') ctx = (unsigned)atoi(optarg);
        else if (c == 'v') vocab = (unsigned)atoi(optarg);
        else if (c == 'd') delay = atoi(optarg);
        else if (c == 'e') g_eos = atoi(optarg);
        else return 2;
    }
    if (!listen) {
        fprintf(stderr, "usage: specd-test-fake-verifier --listen ENDPOINT [--model NAME] [--max-context N]\n"
                        "       [--vocab N] [--delay-ms MS] [--eos ID]\n");
        return 2;
    }
    void *ctxz = zmq_ctx_new();
    void *sock = zmq_socket(ctxz, ZMQ_ROUTER);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    if (zmq_bind(sock, listen) != 0) {
        fprintf(stderr, "fake-verifier: cannot bind %s: %s\n", listen, zmq_strerror(zmq_errno()));
        return 1;
    }
    fprintf(stderr, "fake-verifier: listening on %s\n", listen);
    double next = sd_now_ms();
    for (;;) {
        zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
        double wait = next - sd_now_ms();
        zmq_poll(&it, 1, wait > 0 ? (long)wait + 1 : 0);
        for (;;) {
            sd_msg_id peer;
            Specd__Envelope *env = NULL;
            char err[256];
            sd_status st = sd_msg_recv(sock, &peer, &env, SD_MSG_DONTWAIT, err, sizeof err);
            if (st == SD_ERR_TIMEOUT) break;
            if (st != SD_OK) {
                fprintf(stderr, "fake-verifier: dropped message: %s\n", err);
                continue;
            }
            if (env->body_case == SPECD__ENVELOPE__BODY_HEALTH_REQUEST)
                on_health(sock, &peer, env->health_request, model, ctx, vocab);
            else if (env->body_case == SPECD__ENVELOPE__BODY_SUBMIT) on_submit(sock, &peer, env->submit);
            else if (env->body_case == SPECD__ENVELOPE__BODY_CANCEL) on_cancel(env->cancel);
            else fprintf(stderr, "fake-verifier: unexpected %s dropped\n", sd_msg_kind(env));
            sd_msg_free(env);
        }
        if (sd_now_ms() >= next) {
            for (int i = 0; i < MAX_REQ; i++)
                if (reqs[i].used) step(sock, &reqs[i]);
            next = sd_now_ms() + delay;
        }
    }
}
