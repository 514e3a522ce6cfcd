/* test_verifier_protocol.c — end-to-end test of specd-verifier over ZeroMQ.
 *
 * Starts the real specd-verifier on the demo model ($SD_MODELS/tinycode-16m,
 * no drafter) on an ipc:// endpoint in a temp dir and, as a router would
 * (DEALER socket, protobuf envelopes), checks that:
 *   1. a greedy Submit (32 tokens, ignore_eos) streams exactly the tokens
 *      `specd-generate --prompt-ids ... --max-tokens 32 --ignore-eos --json`
 *      prints, ending with FINISH_LENGTH, with SpecStats on every event;
 *   2. an invalid Submit (token id >= vocab) gets ErrorEvent "bad_request"
 *      and a final FINISH_ERROR event;
 *   3. garbage (random bytes, a truncated envelope, an empty frame, extra
 *      frames, an unsolicited DraftReply) does not stop it answering Health;
 *      a 96 MiB frame from another peer is refused before it is buffered
 *      (ZMQ_MAXMSGSIZE: its peak memory grows by less than 32 MiB);
 *   4. a Cancel mid-generation ends with FINISH_CANCELLED and the next
 *      HealthReply shows kv_blocks_free == kv_blocks_total, 0 active;
 *   5. health is answered while a step computes: a Health sent 100 ms into
 *      the one-step prefill of a 3000-token prompt (--prefill-chunk and
 *      --prefill-budget 4096: the step takes far longer) is answered before
 *      the request's first token, showing it active (vf_front.h; before the
 *      front thread, the reply came only after the step);
 *   6. SIGTERM makes it exit 0.
 * With --drafter it also starts specd-drafter (--model $SD_MODELS/tinycode-3m)
 * and enables speculation in the Submits: the tokens must still be identical
 * and the stats must show drafts (a manual check of the full link).
 * Plain C with a main(): exit 0 = pass. Binaries from $SD_BIN. */
#include <jansson.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <zmq.h>

#include "msg.h"

#define N_TOK 32
static const int32_t PROMPT[] = {151, 42, 907, 13, 88, 1024, 5, 377, 61, 2048};
#define N_PROMPT ((int)(sizeof PROMPT / sizeof PROMPT[0]))

static int g_fail;
static int g_spec; /* --drafter */
static uint64_t g_drafted;
static float g_temp; /* temperature of the next Submits */
#define CHECK(cond, ...)                                         \
    do {                                                         \
        if (!(cond)) {                                           \
            fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__); \
            fprintf(stderr, __VA_ARGS__);                        \
            fprintf(stderr, "\n");                               \
            g_fail = 1;                                          \
        }                                                        \
    } while (0)

static const char *env_or(const char *name, const char *def)
{
    const char *v = getenv(name);
    return v && *v ? v : def;
}

/* Runs specd-generate and reads its "tokens"; returns the count or -1. */
static int reference_tokens(const char *bin, const char *model, int32_t *out, int cap)
{
    char cmd[4096];
    int off =
        snprintf(cmd, sizeof cmd, "%s/specd-generate --model %s --max-tokens %d --ignore-eos --json --prompt-ids ", bin,
                 model, N_TOK);
    for (int i = 0; i < N_PROMPT; i++)
        off += snprintf(cmd + off, sizeof cmd - (size_t)off, "%s%d", i ? "," : "", PROMPT[i]);
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    json_error_t je;
    json_t *j = json_loadf(f, 0, &je);
    pclose(f);
    json_t *arr = j ? json_object_get(j, "tokens") : NULL;
    int n = -1;
    if (json_is_array(arr)) {
        n = 0;
        for (size_t i = 0; i < json_array_size(arr) && n < cap; i++)
            out[n++] = (int32_t)json_integer_value(json_array_get(arr, i));
    }
    json_decref(j);
    return n;
}

static void send_env(void *sock, Specd__Envelope *env)
{
    char err[256];
    if (sd_msg_send(sock, NULL, env, err, sizeof err) != SD_OK) fprintf(stderr, "send: %s\n", err);
}

static void send_health(void *sock, uint64_t nonce)
{
    Specd__HealthRequest h = SPECD__HEALTH_REQUEST__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    h.nonce = nonce;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REQUEST;
    env.health_request = &h;
    send_env(sock, &env);
}

static void send_submit(void *sock, uint64_t rid, const int32_t *ids, int n, uint32_t max_tokens)
{
    Specd__Submit s = SPECD__SUBMIT__INIT;
    Specd__SamplingParams sp = SPECD__SAMPLING_PARAMS__INIT;
    Specd__SpecParams spec = SPECD__SPEC_PARAMS__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    spec.enabled = g_spec;
    s.spec = &spec;
    s.request_id = rid;
    s.prompt_ids = (int32_t *)ids;
    s.n_prompt_ids = (size_t)n;
    s.sampling = &sp; /* greedy unless g_temp: top_p 0 = unset */
    sp.temperature = g_temp;
    sp.seed = 7;
    s.max_tokens = max_tokens;
    s.ignore_eos = 1;
    env.body_case = SPECD__ENVELOPE__BODY_SUBMIT;
    env.submit = &s;
    send_env(sock, &env);
}

/* Receives one envelope within ms; NULL on timeout. */
static Specd__Envelope *recv_env(void *sock, int ms)
{
    zmq_pollitem_t it = {sock, 0, ZMQ_POLLIN, 0};
    if (zmq_poll(&it, 1, ms) <= 0) return NULL;
    Specd__Envelope *env = NULL;
    char err[256];
    if (sd_msg_recv(sock, NULL, &env, SD_MSG_DONTWAIT, err, sizeof err) != SD_OK) return NULL;
    return env;
}

/* Sends a HealthRequest and waits for its reply (other messages dropped). */
static Specd__Envelope *health(void *sock, uint64_t nonce, int ms)
{
    send_health(sock, nonce);
    for (int waited = 0; waited < ms; waited += 50) {
        Specd__Envelope *env = recv_env(sock, 50);
        if (env && env->body_case == SPECD__ENVELOPE__BODY_HEALTH_REPLY && env->health_reply->nonce == nonce)
            return env;
        sd_msg_free(env);
    }
    return NULL;
}

/* 1. greedy tokens equal specd-generate's. */
static void test_tokens(void *sock, const int32_t *ref, int n_ref)
{
    send_submit(sock, 1, PROMPT, N_PROMPT, N_TOK);
    int32_t got[4 * N_TOK];
    int n = 0, finish = 0, events = 0, stats_ok = 1;
    uint32_t completion = 0;
    while (!finish) {
        Specd__Envelope *env = recv_env(sock, 60000);
        if (!env) break;
        if (env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT && env->token_event->request_id == 1) {
            Specd__TokenEvent *ev = env->token_event;
            events++;
            for (size_t i = 0; i < ev->n_tokens && n < 4 * N_TOK; i++) got[n++] = ev->tokens[i];
            finish = ev->finish;
            completion = ev->completion_tokens;
            if (!ev->stats) stats_ok = 0;
            else g_drafted = ev->stats->draft_tokens;
            CHECK(ev->prompt_tokens == N_PROMPT, "prompt_tokens %u", ev->prompt_tokens);
        } else if (env->body_case == SPECD__ENVELOPE__BODY_ERROR) {
            CHECK(0, "unexpected error %s: %s", env->error->code, env->error->message);
            finish = -1;
        }
        sd_msg_free(env);
    }
    CHECK(finish == SPECD__FINISH_REASON__FINISH_LENGTH, "finish %d", finish);
    CHECK(n == N_TOK && n == n_ref, "got %d tokens, reference %d", n, n_ref);
    CHECK(completion == N_TOK, "completion_tokens %u", completion);
    CHECK(stats_ok, "a token event without SpecStats");
    int same = n == n_ref;
    for (int i = 0; same && i < n; i++) same = got[i] == ref[i];
    CHECK(same, "tokens differ from specd-generate's");
    if (g_spec) CHECK(g_drafted > 0, "no drafts with a drafter");
    printf("tokens: %d drafted, %d events, %d tokens, %s\n", (int)g_drafted, events, n,
           same ? "identical to specd-generate" : "DIFFERENT");
}

/* With a drafter: a sampled request (rejection rule with q) runs to length. */
static void test_sampled(void *sock)
{
    g_temp = 0.8f;
    send_submit(sock, 3, PROMPT, N_PROMPT, N_TOK);
    g_temp = 0.0f;
    int n = 0, finish = 0;
    uint64_t drafted = 0;
    while (!finish) {
        Specd__Envelope *env = recv_env(sock, 60000);
        if (!env) break;
        if (env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT && env->token_event->request_id == 3) {
            n += (int)env->token_event->n_tokens;
            finish = env->token_event->finish;
            drafted = env->token_event->stats ? env->token_event->stats->draft_tokens : 0;
        } else if (env->body_case == SPECD__ENVELOPE__BODY_ERROR) {
            CHECK(0, "sampled: error %s: %s", env->error->code, env->error->message);
        }
        sd_msg_free(env);
    }
    CHECK(n == N_TOK && finish == SPECD__FINISH_REASON__FINISH_LENGTH, "sampled: %d tokens, finish %d", n, finish);
    printf("sampled: %d tokens, %llu drafted\n", n, (unsigned long long)drafted);
}

/* 2. an invalid Submit gets bad_request + FINISH_ERROR. */
static void test_bad_request(void *sock)
{
    int32_t bad[2] = {5, 1 << 30};
    send_submit(sock, 7, bad, 2, 4);
    int saw_error = 0, finish = 0;
    for (int k = 0; k < 10 && !finish; k++) {
        Specd__Envelope *env = recv_env(sock, 5000);
        if (!env) break;
        if (env->body_case == SPECD__ENVELOPE__BODY_ERROR && env->error->request_id == 7)
            saw_error = !strcmp(env->error->code, "bad_request");
        if (env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT && env->token_event->request_id == 7)
            finish = env->token_event->finish;
        sd_msg_free(env);
    }
    CHECK(saw_error, "no bad_request ErrorEvent");
    CHECK(finish == SPECD__FINISH_REASON__FINISH_ERROR, "final event finish %d", finish);
}

/* 3. garbage does not kill it. */
static void test_garbage(void *sock)
{
    unsigned char junk[97];
    srand(12345);
    for (size_t i = 0; i < sizeof junk; i++) junk[i] = (unsigned char)rand();
    zmq_send(sock, junk, sizeof junk, 0);
    zmq_send(sock, "", 0, 0);
    /* a truncated Submit envelope */
    Specd__Submit s = SPECD__SUBMIT__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    s.request_id = 99;
    s.prompt_ids = (int32_t *)PROMPT;
    s.n_prompt_ids = N_PROMPT;
    env.body_case = SPECD__ENVELOPE__BODY_SUBMIT;
    env.submit = &s;
    uint8_t buf[256];
    size_t len = specd__envelope__pack(&env, buf);
    zmq_send(sock, buf, len / 2, 0);
    /* two frames */
    zmq_send(sock, buf, len, ZMQ_SNDMORE);
    zmq_send(sock, junk, 8, 0);
    /* a DraftReply nobody asked for */
    Specd__DraftReply dr = SPECD__DRAFT_REPLY__INIT;
    Specd__Envelope env2 = SPECD__ENVELOPE__INIT;
    dr.step = 12;
    env2.body_case = SPECD__ENVELOPE__BODY_DRAFT_REPLY;
    env2.draft_reply = &dr;
    send_env(sock, &env2);
    Specd__Envelope *h = health(sock, 4242, 10000);
    CHECK(h != NULL, "no HealthReply after garbage");
    if (h) {
        CHECK(!strcmp(h->health_reply->role, "verifier"), "role %s", h->health_reply->role);
        CHECK(!strcmp(h->health_reply->model, "tinycode-16m"), "model %s", h->health_reply->model);
        CHECK(h->health_reply->max_context > 0 && h->health_reply->vocab_size > 0, "max_context / vocab_size");
    }
    sd_msg_free(h);
}

/* The verifier's peak resident memory (VmHWM, KiB), or -1. */
static long peak_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof path, "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f && fgets(line, sizeof line, f))
        if (!strncmp(line, "VmHWM:", 6)) kib = strtol(line + 6, NULL, 10);
    if (f) fclose(f);
    return kib;
}

/* 3b. A frame far above the message limit (96 MiB) from another peer: its
 * connection is dropped before the frame is buffered — the verifier's peak
 * memory does not grow by it — and the verifier answers as before. */
static void test_oversized(void *ctx, const char *ep, pid_t pid, void *sock)
{
    long before = peak_kib(pid);
    size_t big = (size_t)96 << 20;
    char *buf = malloc(big);
    void *peer = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    CHECK(buf && peer && before > 0, "set-up (VmHWM %ld)", before);
    if (!buf || !peer || before <= 0) {
        free(buf);
        if (peer) zmq_close(peer);
        return;
    }
    memset(buf, 'x', big);
    zmq_setsockopt(peer, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(peer, ep);
    zmq_send(peer, buf, big, 0);
    free(buf);
    usleep(1500000);
    zmq_close(peer);
    Specd__Envelope *h = health(sock, 4343, 10000);
    CHECK(h != NULL, "no HealthReply after an oversized frame");
    sd_msg_free(h);
    long after = peak_kib(pid);
    CHECK(after - before < 32 * 1024, "the verifier's peak memory grew by %ld KiB with a 96 MiB frame", after - before);
}

/* 4. Cancel mid-generation; the KV pool is whole again afterwards. */
static void test_cancel(void *sock)
{
    send_submit(sock, 2, PROMPT, N_PROMPT, 3000);
    int finish = -1, n = 0, cancelled = 0;
    for (int k = 0; k < 100000 && finish <= 0; k++) {
        Specd__Envelope *env = recv_env(sock, 30000);
        if (!env) break;
        if (env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT && env->token_event->request_id == 2) {
            n += (int)env->token_event->n_tokens;
            finish = env->token_event->finish;
            if (n >= 4 && !cancelled) {
                Specd__Cancel c = SPECD__CANCEL__INIT;
                Specd__Envelope ce = SPECD__ENVELOPE__INIT;
                c.request_id = 2;
                ce.body_case = SPECD__ENVELOPE__BODY_CANCEL;
                ce.cancel = &c;
                send_env(sock, &ce);
                cancelled = 1;
            }
        }
        sd_msg_free(env);
    }
    CHECK(finish == SPECD__FINISH_REASON__FINISH_CANCELLED, "finish %d after %d tokens", finish, n);
    Specd__Envelope *h = health(sock, 77, 10000);
    CHECK(h && h->health_reply->stats, "no HealthReply after cancel");
    if (h && h->health_reply->stats) {
        Specd__Stats *st = h->health_reply->stats;
        CHECK(st->kv_blocks_free == st->kv_blocks_total && st->kv_blocks_total > 0, "kv free %u of %u",
              st->kv_blocks_free, st->kv_blocks_total);
        CHECK(st->active_requests == 0 && st->queued_requests == 0, "active %u queued %u", st->active_requests,
              st->queued_requests);
        CHECK(st->tokens_generated >= N_TOK, "tokens_generated %llu", (unsigned long long)st->tokens_generated);
        CHECK(g_spec ? st->drafter_up : !st->drafter_up, "drafter_up %d", (int)st->drafter_up);
    }
    sd_msg_free(h);
}

/* 5. Health while a long step computes. */
static void test_health_during_step(void *sock)
{
    enum { N_LONG = 3000 };
    static int32_t ids[N_LONG];
    for (int i = 0; i < N_LONG; i++) ids[i] = PROMPT[i % N_PROMPT] + i % 7;
    send_submit(sock, 3, ids, N_LONG, 1);
    usleep(100000);
    send_health(sock, 4242);
    int order = 0, active = -1, fin = 0; /* order 1: health first, 2: token first */
    for (int k = 0; k < 1000 && order == 0; k++) {
        Specd__Envelope *env = recv_env(sock, 60000);
        if (!env) break;
        if (env->body_case == SPECD__ENVELOPE__BODY_HEALTH_REPLY && env->health_reply->nonce == 4242) {
            order = 1;
            if (env->health_reply->stats) active = (int)env->health_reply->stats->active_requests;
        } else if (env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT && env->token_event->request_id == 3) {
            order = 2;
            fin = env->token_event->finish;
        }
        sd_msg_free(env);
    }
    CHECK(order == 1, "health during a long step: %s", order == 2 ? "answered only after the step" : "no reply");
    CHECK(active == 1, "the health reply during the step shows %d active requests", active);
    for (int k = 0; k < 1000 && fin <= 0; k++) { /* the request still completes */
        Specd__Envelope *env = recv_env(sock, 60000);
        if (!env) break;
        if (env->body_case == SPECD__ENVELOPE__BODY_TOKEN_EVENT && env->token_event->request_id == 3)
            fin = env->token_event->finish;
        sd_msg_free(env);
    }
    CHECK(fin == SPECD__FINISH_REASON__FINISH_LENGTH, "the long-prompt request finished with %d", fin);
}

static pid_t start_verifier(const char *bin, const char *model, const char *ep, const char *dep, const char *log)
{
    char path[4096];
    snprintf(path, sizeof path, "%s/specd-verifier", bin);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execl(path, path, "--model", model, "--listen", ep, "--threads", "2", "--max-batch", "4", "--log-level",
              "debug", "--prefill-chunk", "4096", "--prefill-budget", "4096", "--drafter", dep ? dep : "",
              (char *)NULL);
        _exit(127);
    }
    return pid;
}

static pid_t start_drafter(const char *bin, const char *models, const char *dep, const char *log)
{
    char path[4096], model[4096];
    snprintf(path, sizeof path, "%s/specd-drafter", bin);
    snprintf(model, sizeof model, "%s/tinycode-3m", models);
    pid_t pid = fork();
    if (pid == 0) {
        FILE *f = freopen(log, "w", stderr);
        (void)f;
        execl(path, path, "--model", model, "--listen", dep, "--threads", "1", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* Waits up to ms for pid; returns its wait status or -1. */
static int wait_exit(pid_t pid, int ms)
{
    for (int t = 0; t < ms; t += 20) {
        int status;
        if (waitpid(pid, &status, WNOHANG) == pid) return status;
        usleep(20000);
    }
    return -1;
}

int main(int argc, char **argv)
{
    g_spec = argc > 1 && !strcmp(argv[1], "--drafter");
    const char *bin = env_or("SD_BIN", "build/bin");
    char model[4096], dir[] = "/tmp/specd-vf-XXXXXX", ep[4200], dep[4200], log[4200], dlog[4200];
    snprintf(model, sizeof model, "%s/tinycode-16m", env_or("SD_MODELS", "models"));
    if (!mkdtemp(dir)) return 1;
    snprintf(ep, sizeof ep, "ipc://%s/verifier.sock", dir);
    snprintf(log, sizeof log, "%s/verifier.log", dir);
    snprintf(dep, sizeof dep, "ipc://%s/drafter.sock", dir);
    snprintf(dlog, sizeof dlog, "%s/drafter.log", dir);
    pid_t dpid = g_spec ? start_drafter(bin, env_or("SD_MODELS", "models"), dep, dlog) : -1;
    int32_t ref[4 * N_TOK];
    int n_ref = reference_tokens(bin, model, ref, 4 * N_TOK);
    CHECK(n_ref == N_TOK, "specd-generate gave %d tokens", n_ref);
    pid_t pid = start_verifier(bin, model, ep, g_spec ? dep : NULL, log);
    void *ctx = zmq_ctx_new(), *sock = zmq_socket(ctx, ZMQ_DEALER);
    int zero = 0;
    zmq_setsockopt(sock, ZMQ_LINGER, &zero, sizeof zero);
    zmq_connect(sock, ep);
    Specd__Envelope *h = NULL;
    for (int i = 0; i < 60 && !h; i++) h = health(sock, 1000 + (uint64_t)i, 1000);
    CHECK(h != NULL, "the verifier never answered Health");
    for (int i = 0; g_spec && h && i < 300 && !h->health_reply->stats->drafter_up; i++) {
        sd_msg_free(h);
        usleep(100000);
        h = health(sock, 2000 + (uint64_t)i, 1000);
    }
    CHECK(!g_spec || (h && h->health_reply->stats->drafter_up), "the drafter never came up");
    sd_msg_free(h);
    if (h) {
        test_tokens(sock, ref, n_ref);
        if (g_spec) test_sampled(sock);
        test_bad_request(sock);
        test_garbage(sock);
        test_oversized(ctx, ep, pid, sock);
        test_cancel(sock);
        test_health_during_step(sock);
    }
    kill(pid, SIGTERM);
    int status = wait_exit(pid, 20000);
    if (status == -1) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        CHECK(0, "the verifier did not exit on SIGTERM");
    } else {
        CHECK(WIFEXITED(status) && WEXITSTATUS(status) == 0, "exit status %d", status);
    }
    if (dpid > 0) {
        kill(dpid, SIGTERM);
        if (wait_exit(dpid, 10000) == -1) {
            kill(dpid, SIGKILL);
            waitpid(dpid, NULL, 0);
        }
    }
    zmq_close(sock);
    zmq_ctx_term(ctx);
    if (g_fail) {
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "tail -n 30 %s >&2", log);
        if (system(cmd) != 0) fprintf(stderr, "(no log)\n");
    } else {
        char cmd[4400];
        snprintf(cmd, sizeof cmd, "rm -rf %s", dir);
        if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", dir);
    }
    printf("%s\n", g_fail ? "FAILED" : "PASSED");
    return g_fail;
}
