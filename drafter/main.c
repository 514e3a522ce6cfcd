/* main.c — specd-drafter: the drafter process (its flags: g_flags below,
 * printed by --help and in docs/FLAGS.md).
 *
 * Binds a ZeroMQ ROUTER socket and serves the verifier's draft protocol
 * (proto/specd.proto, drafter/README.md): DraftOpen / DraftClose keep the
 * per-request state table (dstate.h), each DraftBatch becomes ONE batched
 * propose call over every valid item (a draft model, draft.h, or the n-gram
 * proposer, ngram.h). A serial batch is answered with a DraftReply in item
 * order to the sender; a pipelined one only updates each request's state
 * (dpipe.h), and between messages the drafter drafts, in one batched propose
 * call, every request owed a span and sends those spans. HealthRequest gets
 * a HealthReply. Malformed or unexpected messages are logged at debug level
 * and dropped.
 *
 * Single-threaded: this thread owns the socket, the proposer, its model and
 * KV pool. SIGINT / SIGTERM end the loop; the process exits 0. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <libgen.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zmq.h>

#include "array.h"
#include "backend_open.h"
#include "clock.h"
#include "convert.h"
#include "dpipe.h"
#include "draft.h"
#include "flags.h"
#include "dreply.h"
#include "dstate.h"
#include "json_mask.h"
#include "log.h"
#include "mem_plan.h"
#include "model.h"
#include "model_config.h"
#include "curve.h"
#include "msg.h"
#include "ngram.h"
#include "opt.h"
#include "span.h"

#define DEFAULT_MAX_CONTEXT_CAP 4096
/* Default --gpu-memory-fraction: a drafter fits beside a verifier at its
 * default 0.9 (as vLLM's) on one GPU, and runs on a GPU of its own (its pool
 * capped by the fraction; raise it there for more sequences). */
#define SD_MAX_BRANCH_CALL 8 /* branches drafted in one propose call */
#define BRANCH_MIN_PROB 0.02 /* outcomes less likely than this are not drafted for */

typedef struct drafter_opts {
    const char *listen, *model, *device, *log_level, *curve_keys;
    bool ngram;
    int ngram_min, ngram_max, threads, max_seqs, max_context, kv_dtype;
    bool random_weights;
    double mem_fraction;
    int quant; /* SD_DRAFT_QUANT_* */
    float p_min;
    bool pipeline;        /* --spec-pipeline: draft ahead when the verifier pipelines */
    int branches;         /* --spec-branches: other outcomes drafted for per request and step */
    bool no_prefix_cache; /* --no-prefix-cache: mirrors do not reuse cached prefixes */
} drafter_opts;

/* Everything the serving loop owns. */
#define MAX_PEERS 255 /* verifiers told apart (the top 8 bits of a state key) */

typedef struct drafter {
    void *sock;
    /* the verifiers seen, by ROUTER identity: a request's state is keyed by (peer, request id), so one
     * verifier can neither read nor close another's requests */
    uint8_t peer_id[MAX_PEERS][256];
    size_t peer_len[MAX_PEERS];
    int n_peers;
    sd_proposer *prop;
    sd_json_vocab *json; /* JSON output: the draft model's token table (NULL: drafts unconstrained) */
    sd_backend *be;      /* the draft model's device (--device), owned */
    sd_dstate *table;
    char model_name[256];
    int max_context, vocab;
    /* per-batch scratch, grown on demand */
    sd_propose_item *items;
    sd_proposal *props;
    int *item_of;    /* DraftItem index -> propose item index, -1 none */
    int *need_open;  /* per DraftItem */
    sd_dreq **preqs; /* the request of each propose item */
    sd_dspan *spans; /* the answers of one reply */
    size_t cap;
    bool pipeline;      /* --spec-pipeline on */
    int branches;       /* --spec-branches */
    const char *device; /* --device, and the CPU threads drafting uses: reported in health */
    int threads;
    uint64_t last_step;                /* step of the last DraftBatch seen */
    double tok_ms;                     /* EMA of the time per drafted token and item of a propose call */
    bool lost;                         /* the device is lost (sd_backend_lost): exit 1 */
    int32_t *bctx[SD_MAX_BRANCH_CALL]; /* branch contexts: committed + in-flight prefix + alternative */
    size_t bcap[SD_MAX_BRANCH_CALL];
} drafter;

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

/* Every flag of specd-drafter, for getopt_long and --help (flags.h). */
static const sd_flag g_flags[] = {
    {"Model", "model", 'm', "DIR", NULL,
     "the draft model: a Hugging Face checkpoint directory with the target's tokenizer"},
    {"Model", "ngram", 'n', NULL, NULL, "draft by n-gram lookup over each request's tokens instead of a model"},
    {"Model", "ngram-min", 'a', "N", "1", "the shortest n-gram the lookup matches (1..8)"},
    {"Model", "ngram-max", 'b', "N", "4", "the longest n-gram the lookup matches (1..8)"},
    {"Model", "quant", 'q', "auto|int8|none", "auto",
     "the draft model's weights: int8 where the device has int8 kernels (auto), int8 always, or as in the "
     "checkpoint"},
    {"Model", "kv-dtype", 'V', "auto|f32|bf16", "auto", "the KV mirrors: bf16 for a bf16 model, else f32 (auto)"},
    {"Model", "random-weights", 'W', NULL, NULL, "random weights of --model's config.json (benchmarks)"},
    {"Speculation", "p-min", 'p', "P", "0.3",
     "stop drafting after a token the draft model gives probability below P (0: always the length asked)"},
    {"Speculation", "spec-pipeline", 'P', "on|off", "on",
     "draft ahead: the next span while the verifier verifies, for the outcomes it is likely to commit"},
    {"Speculation", "spec-branches", 'B', "N", "3", "pipelined: other outcomes drafted per request and step (0..3)"},
    {"Scheduling", "max-seqs", 's', "N", "64", "requests the drafter keeps a KV mirror for"},
    {"Scheduling", "max-context", 'c', "N", "the model's context, at most 4096", "positions per mirror"},
    {"Scheduling", "no-prefix-cache", 'C', NULL, NULL, "no KV reuse between the mirrors of requests"},
    {"Devices", "device", 'd', "cpu|cuda|cuda:N", "cpu", "where the draft model runs"},
    {"Devices", "threads", 't', "N", "1", "CPU threads"},
    {"Memory", "gpu-memory-fraction", 'G', "F", "0.1", "the share of its GPU's memory the drafter may use"},
    {"Network", "listen", 'l', "ENDPOINT", "tcp://127.0.0.1:5556",
     "where the verifier connects (ZeroMQ ROUTER socket)"},
    {"Security", "curve-keys", 'K', "DIR", NULL,
     "CURVE authentication and encryption of the socket, with the keys of specd keygen DIR"},
    {"Other", "log-level", 'L', "debug|info|warn|error", "info", "the least severe messages logged"},
    {"Other", "help", 'h', NULL, NULL, "this help"},
};
#define N_FLAGS (sizeof g_flags / sizeof g_flags[0])

static const char g_usage[] = "usage: specd-drafter (--model DIR | --ngram) [--listen ENDPOINT] [options]\n";

/* --help (0) or the usage after an error (1). */
static void usage(FILE *f, int error)
{
    if (error) {
        sd_flags_usage_error(f, g_usage, "specd-drafter");
        return;
    }
    sd_flags_help(f, g_usage,
                  "specd-drafter proposes draft tokens for the verifier: a draft model (batched over requests, "
                  "with a KV mirror per request) or an n-gram lookup; it drafts ahead while the verifier "
                  "verifies (specd serve starts it for you).",
                  g_flags, N_FLAGS);
}

/* Fills o from argv. Returns 0, 1 for --help, -1 on a usage error. */
static int parse_opts(int argc, char **argv, drafter_opts *o)
{
    struct option lo[N_FLAGS + 1];
    sd_flags_options(g_flags, N_FLAGS, lo);
    *o = (drafter_opts){.listen = "tcp://127.0.0.1:5556",
                        .device = "cpu",
                        .log_level = "info",
                        .ngram_min = SD_NGRAM_DEFAULT_MIN,
                        .ngram_max = SD_NGRAM_DEFAULT_MAX,
                        .threads = 1,
                        .max_seqs = 64,
                        .max_context = 0,
                        .quant = SD_DRAFT_QUANT_AUTO,
                        .p_min = SD_DRAFT_P_MIN_DEFAULT,
                        .pipeline = true,
                        .branches = SD_DPIPE_MAX_BRANCHES,
                        .mem_fraction = SD_DRAFT_GPU_MEM_FRACTION};
    char err[256] = "";
    sd_status st = SD_OK;
    int c;
    while (st == SD_OK && (c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'l': o->listen = optarg; break;
        case 'K': o->curve_keys = optarg; break;
        case 'C': o->no_prefix_cache = true; break;
        case 'W': o->random_weights = true; break;
        case 'm': o->model = optarg; break;
        case 'n': o->ngram = true; break;
        case 'a': st = sd_opt_int(optarg, "--ngram-min", 1, SD_NGRAM_MAX_N, &o->ngram_min, err, sizeof err); break;
        case 'b': st = sd_opt_int(optarg, "--ngram-max", 1, SD_NGRAM_MAX_N, &o->ngram_max, err, sizeof err); break;
        case 't': st = sd_opt_int(optarg, "--threads", 1, 1024, &o->threads, err, sizeof err); break;
        case 's': st = sd_opt_int(optarg, "--max-seqs", 1, 65536, &o->max_seqs, err, sizeof err); break;
        case 'c': st = sd_opt_int(optarg, "--max-context", 1, 1 << 24, &o->max_context, err, sizeof err); break;
        case 'd': o->device = optarg; break;
        case 'L': o->log_level = optarg; break;
        case 'q':
            if ((o->quant = sd_draft_quant_parse(optarg)) < 0)
                st = sd_seterr(err, sizeof err, SD_ERR_ARG, "--quant must be auto, int8 or none, got '%s'", optarg);
            break;
        case 'p': st = sd_opt_float(optarg, "--p-min", 0.0, 1.0, &o->p_min, err, sizeof err); break;
        case 'G':
            st = sd_opt_double(optarg, "--gpu-memory-fraction", 0.01, 1.0, &o->mem_fraction, err, sizeof err);
            break;
        case 'V':
            if ((o->kv_dtype = sd_kv_dtype_parse(optarg)) < 0)
                st = sd_seterr(err, sizeof err, SD_ERR_ARG, "--kv-dtype must be auto, f32 or bf16, got '%s'", optarg);
            break;
        case 'P': st = sd_opt_on_off(optarg, "--spec-pipeline", &o->pipeline, err, sizeof err); break;
        case 'B':
            st = sd_opt_int(optarg, "--spec-branches", 0, SD_DPIPE_MAX_BRANCHES, &o->branches, err, sizeof err);
            break;
        case 'h': return 1;
        default: return -1;
        }
    }
    if (st != SD_OK) {
        fprintf(stderr, "specd-drafter: %s\n", err);
        return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "specd-drafter: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (!!o->model == o->ngram) {
        fprintf(stderr, "specd-drafter: give exactly one of --model DIR and --ngram\n");
        return -1;
    }
    if (o->ngram_min > o->ngram_max) {
        fprintf(stderr, "specd-drafter: --ngram-min must not exceed --ngram-max\n");
        return -1;
    }
    return 0;
}

/* Creates the proposer of o in d. Returns 0, or -1 with an error logged. */
static int make_proposer(drafter *d, const drafter_opts *o)
{
    char err[512] = "";
    if (o->ngram) {
        if (sd_ngram_new(o->ngram_min, o->ngram_max, &d->prop, err, sizeof err) != SD_OK) goto fail;
        snprintf(d->model_name, sizeof d->model_name, "ngram");
        return 0;
    }
    sd_model_config cfg;
    if (sd_config_load_dir(o->model, &cfg, err, sizeof err) != SD_OK) goto fail;
    sd_draft_opts dopts = sd_draft_opts_default();
    dopts.n_threads = o->threads;
    if (sd_backend_open(o->device, o->threads, &d->be, err, sizeof err) != SD_OK) goto fail;
    dopts.be = d->be;
    dopts.mem_free_at_start = sd_mem_free_now(d->be);
    dopts.mem_fraction = o->mem_fraction;
    dopts.kv_dtype = o->kv_dtype;
    dopts.random_weights = o->random_weights;
    /* pipelined: each request may have branch mirrors besides its main one (dpipe.h) */
    dopts.max_seqs = o->max_seqs * (o->pipeline ? 1 + o->branches : 1);
    dopts.quant = o->quant;
    dopts.p_min = o->p_min;
    dopts.no_prefix_cache = o->no_prefix_cache;
    dopts.max_context = o->max_context
                            ? o->max_context
                            : (cfg.max_position < DEFAULT_MAX_CONTEXT_CAP ? cfg.max_position : DEFAULT_MAX_CONTEXT_CAP);
    if (sd_draft_new(o->model, &dopts, &d->prop, err, sizeof err) != SD_OK) goto fail;
    /* --quant auto quantises only where the device has int8 kernels: say which it did */
    if (o->quant == SD_DRAFT_QUANT_AUTO)
        SD_INFO("--quant auto: draft weights %s",
                d->be->ops->quantize_q8 ? "int8 (this device has int8 kernels)"
                                        : "as stored in the checkpoint (this device has no int8 kernels)");
    double t0 = sd_now_ms();
    int passes = 0;
    if (sd_draft_warm_up(d->prop, &passes, err, sizeof err) != SD_OK) goto fail;
    SD_INFO("warm-up: %d passes in %.0f ms", passes, sd_now_ms() - t0);
    const sd_model *m = sd_draft_model(d->prop);
    const sd_kv_pool *pool = sd_model_kv_pool(m);
    SD_INFO("KV mirrors: %d blocks of %d, %s (%.1f MiB)%s", sd_kv_pool_total(pool), sd_kv_pool_block_size(pool),
            sd_dtype_name(sd_model_kv_dtype(m)),
            (double)sd_kv_pool_total(pool) * sd_kv_pool_block_size(pool) * (double)sd_model_kv_bytes_per_position(m) /
                (1024.0 * 1024.0),
            d->be->ops->mem_info ? " — sized within --gpu-memory-fraction" : "");
    d->max_context = dopts.max_context;
    d->vocab = cfg.vocab_size;
    if (sd_json_vocab_load(o->model, &cfg, &d->json, err, sizeof err) != SD_OK)
        SD_INFO("drafts of JSON output are not constrained: %s", err);
    char name[PATH_MAX];
    snprintf(name, sizeof name, "%s", o->model);
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') name[--n] = '\0';
    snprintf(d->model_name, sizeof d->model_name, "%s", basename(name));
    return 0;
fail:
    SD_ERROR("cannot create the proposer: %s", err);
    return -1;
}

/* ---- replies ------------------------------------------------------------- */

static void send_env(drafter *d, const sd_msg_id *peer, Specd__Envelope *env)
{
    char err[256];
    sd_status st = sd_msg_send(d->sock, peer, env, err, sizeof err);
    if (st != SD_OK) SD_WARN_LIMITED("cannot send %s: %s", sd_msg_kind(env), err);
}

static void on_health(drafter *d, const sd_msg_id *peer, const Specd__HealthRequest *h)
{
    Specd__Stats st = SPECD__STATS__INIT;
    Specd__HealthReply r = SPECD__HEALTH_REPLY__INIT;
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    st.active_requests = (uint32_t)sd_dstate_count(d->table);
    const sd_model *m = sd_draft_model(d->prop);
    if (m) { /* the draft model's KV mirrors (the n-gram proposer has none) */
        st.kv_blocks_total = (uint32_t)sd_kv_pool_total(sd_model_kv_pool(m));
        st.kv_blocks_free = (uint32_t)sd_kv_pool_free_count(sd_model_kv_pool(m));
    }
    r.nonce = h->nonce;
    r.role = "drafter";
    r.model = d->model_name;
    r.stats = &st;
    r.max_context = (uint32_t)d->max_context;
    r.vocab_size = (uint32_t)d->vocab;
    char host[256] = "";
    gethostname(host, sizeof host - 1);
    r.host = host;
    r.device = (char *)d->device;
    r.threads = (uint32_t)d->threads;
    env.body_case = SPECD__ENVELOPE__BODY_HEALTH_REPLY;
    env.health_reply = &r;
    send_env(d, peer, &env);
}

/* ---- request state ------------------------------------------------------- */

/* The request's sampling settings (proto/convert.h) without the logits
 * processors (drafts need not follow them: the verifier applies them to
 * every row it verifies, and the lists would point into the message) but
 * JSON output's (drafts that keep to the JSON are accepted more often;
 * sd_dstate_open compiles the schema); settings that do not validate fall
 * back to greedy drafting (the verifier refuses such requests before they
 * reach a drafter). */
static sd_sampling open_sampling(const drafter *d, const Specd__SamplingParams *p)
{
    sd_sampling s = sd_pb_sampling_get(p);
    bool json_object = s.json_object, json_compact = s.json_compact;
    const char *json_schema = s.json_schema, *regex = s.regex;
    sd_sampling_drop_processors(&s);
    if (d->json && (json_object || json_schema || regex)) {
        s.json_object = json_object;
        s.json_compact = json_compact;
        s.json_schema = json_schema; /* borrowed from the message until sd_dstate_open */
        s.regex = regex;
        s.json_vocab = d->json;
    }
    char err[128];
    if (sd_sampling_validate(&s, err, sizeof err) != SD_OK) {
        SD_DEBUG("sampling settings rejected (%s): drafting greedily", err);
        uint64_t seed = s.seed;
        s = sd_sampling_default();
        s.seed = seed;
    }
    return s;
}

/* The state key of request_id from peer: the peer's index (from 1) in the
 * top 8 bits, the id (56 bits, proto/msg.h) below. 0 when the peer table is
 * full (the message is then dropped). */
static uint64_t key_of(drafter *d, const sd_msg_id *peer, uint64_t request_id)
{
    int i = 0;
    while (i < d->n_peers && (d->peer_len[i] != peer->len || memcmp(d->peer_id[i], peer->data, peer->len))) i++;
    if (i == d->n_peers) {
        if (d->n_peers == MAX_PEERS || peer->len > sizeof d->peer_id[0]) {
            SD_WARN_LIMITED("more than %d verifiers: a message from another is dropped", MAX_PEERS);
            return 0;
        }
        memcpy(d->peer_id[i], peer->data, peer->len);
        d->peer_len[i] = peer->len;
        d->n_peers++;
    }
    return ((uint64_t)(i + 1) << 56) | (request_id & SD_MSG_MAX_REQUEST_ID);
}

static void on_open(drafter *d, const sd_msg_id *peer, const Specd__DraftOpen *m)
{
    sd_sampling s = open_sampling(d, m->sampling);
    bool evicted = false;
    uint64_t ev = 0, key = key_of(d, peer, m->request_id);
    if (!key) return;
    if (sd_dstate_open(d->table, key, m->context, m->n_context, &s, &evicted, &ev) != SD_OK)
        SD_WARN("request %llu: out of memory opening it", (unsigned long long)m->request_id);
    if (evicted) {
        SD_DEBUG("request %llu evicted (table full)", (unsigned long long)ev);
        d->prop->ops->release(d->prop, ev);
    }
    /* the context may differ from what the proposer saw: it re-syncs itself */
    SD_DEBUG("open request %llu (%zu tokens)", (unsigned long long)m->request_id, m->n_context);
}

static void on_close(drafter *d, const sd_msg_id *peer, const Specd__DraftClose *m)
{
    uint64_t key = key_of(d, peer, m->request_id);
    if (!key) return;
    sd_dstate_close(d->table, key);
    d->prop->ops->release(d->prop, key);
    SD_DEBUG("close request %llu", (unsigned long long)m->request_id);
}

/* ---- draft batches -------------------------------------------------------- */

/* Grows the per-batch scratch to n items. Returns 0 or -1. */
static int fit_batch(drafter *d, size_t n)
{
    const sd_grow_item per_item[] = {SD_GROW_ITEM(d->items),     SD_GROW_ITEM(d->props), SD_GROW_ITEM(d->item_of),
                                     SD_GROW_ITEM(d->need_open), SD_GROW_ITEM(d->preqs), SD_GROW_ITEM(d->spans)};
    return sd_grow_all(per_item, 6, &d->cap, n) == SD_OK ? 0 : -1;
}

/* True when request id appears among the first i items of b. */
static bool seen_before(const Specd__DraftBatch *b, size_t i)
{
    for (size_t j = 0; j < i; j++)
        if (b->items[j]->request_id == b->items[i]->request_id) return true;
    return false;
}

/* Serial: advances the state of every item and fills the propose items.
 * Returns how many propose items there are; item_of / need_open describe
 * each DraftItem. A request repeated within one batch drafts once (later
 * copies get an empty result): the proposer keys its state by request id. */
static int collect_items(drafter *d, const sd_msg_id *peer, const Specd__DraftBatch *b)
{
    int n = 0;
    for (size_t i = 0; i < b->n_items; i++) {
        const Specd__DraftItem *it = b->items[i];
        d->item_of[i] = -1;
        d->need_open[i] = 0;
        if (seen_before(b, i)) continue;
        sd_dreq *r;
        uint64_t key = key_of(d, peer, it->request_id);
        if (!key ||
            sd_dstate_advance(d->table, key, it->committed_len, it->new_tokens, it->n_new_tokens, &r) != SD_OK) {
            d->need_open[i] = 1;
            continue;
        }
        /* a serial step (the verifier's pipelining test runs serial blocks between pipelined ones): what a
         * pipelined word left owed would continue a state the verifier has left */
        r->pipe.dirty = r->pipe.branches_owed = false;
        r->pipe.n_in_flight = 0;
        int k = it->num_draft < SD_MAX_DRAFT ? (int)it->num_draft : SD_MAX_DRAFT;
        if (r->n_ctx == 0 || r->n_ctx > INT_MAX || k == 0) continue;
        d->items[n] = (sd_propose_item){.seq_id = r->id,
                                        .context = r->ctx,
                                        .n_context = (int)r->n_ctx,
                                        .k = k,
                                        .sampling = &r->sampling,
                                        .want_q = it->sample,
                                        .out_pos = it->output_pos};
        d->preqs[n] = r;
        d->item_of[i] = n++;
    }
    return n;
}

/* ONE batched propose over d->items[0..n) into d->props (no drafts on a
 * failure). Returns its wall time in microseconds. */
static uint32_t propose_all(drafter *d, int n, uint64_t step)
{
    for (int i = 0; i < n; i++) d->props[i].n = 0;
    if (n <= 0) return 0;
    double t0 = sd_now_s();
    char err[256] = "";
    if (d->prop->ops->propose(d->prop, d->items, n, d->props, err, sizeof err) != SD_OK) {
        SD_WARN("propose failed (step %llu): %s (answering without drafts)", (unsigned long long)step, err);
        for (int i = 0; i < n; i++) d->props[i].n = 0;
        if (sd_backend_lost(d->be)) {
            SD_ERROR("the device is lost (a sticky error): exiting, so that a supervisor starts a new drafter");
            d->lost = true;
            g_stop = 1;
        }
    }
    double us = (sd_now_s() - t0) * 1e6;
    int tokens = 0;
    for (int i = 0; i < n; i++) tokens += d->items[i].k;
    if (tokens > 0) { /* per token and item: a batched call costs about this times their sum */
        double x = us / 1e3 / tokens;
        d->tok_ms = d->tok_ms > 0 ? d->tok_ms + 0.2 * (x - d->tok_ms) : x;
    }
    return us < 4e9 ? (uint32_t)us : UINT32_MAX;
}

/* Sends spans[0..n) as one DraftReply to peer (their ids become the
 * peer's request ids again). */
static void send_spans(drafter *d, const sd_msg_id *peer, uint64_t step, sd_dspan *spans, size_t n)
{
    for (size_t i = 0; i < n; i++) spans[i].id &= SD_MSG_MAX_REQUEST_ID;
    sd_dreply r;
    if (sd_dreply_build(&r, step, spans, n) != SD_OK) {
        SD_ERROR("out of memory building a reply (step %llu)", (unsigned long long)step);
        return;
    }
    Specd__Envelope env = SPECD__ENVELOPE__INIT;
    env.body_case = SPECD__ENVELOPE__BODY_DRAFT_REPLY;
    env.draft_reply = &r.rep;
    send_env(d, peer, &env);
    sd_dreply_free(&r);
}

/* Serial batch: advance every item, ONE batched propose, one reply in item
 * order (q per token when the item asked for it). */
static void on_serial_batch(drafter *d, const sd_msg_id *peer, const Specd__DraftBatch *b)
{
    int n = collect_items(d, peer, b);
    uint32_t us = propose_all(d, n, b->step);
    for (size_t i = 0; i < b->n_items; i++) {
        const Specd__DraftItem *it = b->items[i];
        int k = d->item_of[i];
        d->spans[i] = (sd_dspan){.id = it->request_id,
                                 .need_open = d->need_open[i],
                                 .base_len = it->committed_len,
                                 .base_hash = k >= 0 ? d->preqs[k]->ctx_hash : 0,
                                 .p = k >= 0 ? &d->props[k] : NULL,
                                 .with_q = it->sample,
                                 .draft_us = us};
    }
    send_spans(d, peer, b->step, d->spans, b->n_items);
}

/* Pipelined batch: record each request's new state (dpipe.h); the drafting
 * happens in the serving loop. Requests the drafter cannot advance get a
 * need_open answer at once. */
static void on_pipe_batch(drafter *d, const sd_msg_id *peer, const Specd__DraftBatch *b)
{
    size_t n_open = 0;
    double now = sd_now_ms();
    for (size_t i = 0; i < b->n_items; i++) {
        const Specd__DraftItem *it = b->items[i];
        if (seen_before(b, i)) continue;
        sd_dreq *r;
        uint64_t key = key_of(d, peer, it->request_id);
        if (!key ||
            sd_dstate_advance(d->table, key, it->committed_len, it->new_tokens, it->n_new_tokens, &r) != SD_OK ||
            sd_dpipe_note(r, it, peer->data, peer->len, d->pipeline, now, b->step_us / 1e3) != SD_OK)
            d->spans[n_open++] = (sd_dspan){.id = it->request_id, .need_open = true};
    }
    if (n_open) send_spans(d, peer, b->step, d->spans, n_open);
}

static void on_batch(drafter *d, const sd_msg_id *peer, const Specd__DraftBatch *b)
{
    d->last_step = b->step;
    if (fit_batch(d, b->n_items ? b->n_items : 1) != 0) {
        SD_ERROR("out of memory for a batch of %zu items; dropped", b->n_items);
        return;
    }
    if (b->pipeline) on_pipe_batch(d, peer, b);
    else on_serial_batch(d, peer, b);
}

/* Sends spans[0..n) (of requests reqs[0..n)) with one reply per verifier:
 * the arrays are grouped by peer in place. */
static void send_by_peer(drafter *d, sd_dspan *spans, sd_dreq **reqs, int n)
{
    for (int i = 0; i < n;) {
        const sd_dreq_pipe *p0 = &reqs[i]->pipe;
        int j = i + 1;
        for (int k = i + 1; k < n; k++) {
            const sd_dreq_pipe *pk = &reqs[k]->pipe;
            if (pk->peer_len != p0->peer_len || memcmp(pk->peer, p0->peer, p0->peer_len)) continue;
            sd_dspan ts = spans[j];
            spans[j] = spans[k];
            spans[k] = ts;
            sd_dreq *tr = reqs[j];
            reqs[j] = reqs[k];
            reqs[k] = tr;
            j++;
        }
        sd_msg_id peer;
        peer.len = p0->peer_len;
        memcpy(peer.data, p0->peer, peer.len);
        send_spans(d, &peer, d->last_step, &spans[i], (size_t)(j - i));
        i = j;
    }
}

/* Pipelined: drafts, in one batched propose call, the main chain of every
 * request owed a span, and sends those spans to their verifiers. */
static void draft_owed(drafter *d)
{
    size_t cap = (size_t)sd_dstate_capacity(d->table);
    if (fit_batch(d, cap) != 0) return;
    int n = sd_dpipe_collect(d->table, d->items, d->preqs, (int)cap);
    uint32_t us = propose_all(d, n, d->last_step);
    for (int i = 0; i < n; i++) {
        sd_dreq *r = d->preqs[i];
        uint64_t h = sd_span_hash(r->ctx_hash, r->pipe.in_flight, (size_t)r->pipe.n_in_flight);
        sd_dpipe_record(r, (int64_t)r->n_ctx + r->pipe.n_in_flight, h, &d->props[i]);
        /* drafts asked for and none past the guess of the verifier's next token (a guess only with
         * drafts in flight, dpipe.c): say so, the verifier then knows the proposer's supply instead of
         * waiting for a span that is not coming */
        d->spans[i] = (sd_dspan){.id = r->id,
                                 .base_len = (uint32_t)r->n_ctx,
                                 .base_hash = r->ctx_hash,
                                 .assumed = r->pipe.in_flight,
                                 .n_assumed = r->pipe.n_in_flight,
                                 .p = &d->props[i],
                                 .with_q = r->pipe.want_q,
                                 .draft_us = us,
                                 .dry = r->pipe.k > 0 && d->props[i].n <= (r->pipe.n_in_flight > 0)};
    }
    send_by_peer(d, d->spans, d->preqs, n);
}

/* Pipelined: while time is left before the verifier needs the next spans,
 * drafts for the likeliest other outcomes of the steps in flight (dpipe.h)
 * in one batched call, and sends those spans. */
static void draft_branches(drafter *d)
{
    sd_dbranch br[SD_MAX_BRANCH_CALL];
    int nb = d->branches > 0 ? sd_dpipe_branches(d->table, br, SD_MAX_BRANCH_CALL, BRANCH_MIN_PROB) : 0;
    if (nb == 0 || d->tok_ms <= 0 || fit_batch(d, SD_MAX_BRANCH_CALL) != 0) return;
    double now = sd_now_ms();
    int per_req[SD_MAX_BRANCH_CALL] = {0}, n = 0, kmax = 0;
    static int32_t assumed[SD_MAX_BRANCH_CALL][SD_MAX_DRAFT + 1];
    for (int i = 0; i < nb; i++) {
        sd_dreq *r = br[i].r;
        int b = 1; /* the branch mirror: 1 + branches of r already taken */
        for (int j = 0; j < n; j++) b += d->preqs[j] == r;
        /* half the main chain's drafts: an outcome less likely than the main one, and the
         * drafter is sooner free for the span of an outcome nobody guessed (measured in
         * drafter/README.md: more pre-draft hits and shorter waits than full-length branches) */
        int k = ((r->pipe.k < SD_MAX_DRAFT ? r->pipe.k : SD_MAX_DRAFT) + 1) / 2;
        int kk = k > kmax ? k : kmax;
        /* a call costs about tok_ms per token and item; stop well before it would outlast the
         * step, so that the drafter is free when the outcome comes */
        if (b > d->branches || kk * (n + 1) * d->tok_ms > 0.7 * sd_dpipe_time_left(r, now)) continue;
        size_t len = r->n_ctx + (size_t)br[i].j + 1;
        if (sd_grow(&d->bctx[n], &d->bcap[n], len, sizeof *d->bctx[n]) != SD_OK) break;
        memcpy(d->bctx[n], r->ctx, r->n_ctx * sizeof *r->ctx);
        memcpy(d->bctx[n] + r->n_ctx, r->pipe.in_flight, (size_t)br[i].j * sizeof *r->ctx);
        d->bctx[n][len - 1] = br[i].alt;
        memcpy(assumed[n], d->bctx[n] + r->n_ctx, ((size_t)br[i].j + 1) * sizeof *r->ctx);
        int64_t pos = (int64_t)len - r->pipe.n_prompt;
        d->items[n] = (sd_propose_item){.seq_id = r->id,
                                        .branch = (uint32_t)b,
                                        .context = d->bctx[n],
                                        .n_context = (int)len,
                                        .k = k,
                                        .sampling = &r->sampling,
                                        .want_alt = true,
                                        .out_pos = pos > 0 ? (uint64_t)pos : 0};
        d->preqs[n] = r;
        per_req[n] = br[i].j + 1;
        kmax = kk;
        n++;
    }
    if (n == 0) return;
    uint32_t us = propose_all(d, n, d->last_step);
    for (int i = 0; i < n; i++) {
        sd_dreq *r = d->preqs[i];
        sd_dpipe_record(r, d->items[i].n_context, sd_span_hash(r->ctx_hash, assumed[i], (size_t)per_req[i]),
                        &d->props[i]);
        d->spans[i] = (sd_dspan){.id = r->id,
                                 .base_len = (uint32_t)r->n_ctx,
                                 .base_hash = r->ctx_hash,
                                 .assumed = assumed[i],
                                 .n_assumed = per_req[i],
                                 .p = &d->props[i],
                                 .draft_us = us};
    }
    send_by_peer(d, d->spans, d->preqs, n);
}

/* ---- main loop ----------------------------------------------------------- */

static void dispatch(drafter *d, const sd_msg_id *peer, const Specd__Envelope *env)
{
    switch (env->body_case) {
    case SPECD__ENVELOPE__BODY_DRAFT_OPEN: on_open(d, peer, env->draft_open); break;
    case SPECD__ENVELOPE__BODY_DRAFT_CLOSE: on_close(d, peer, env->draft_close); break;
    case SPECD__ENVELOPE__BODY_DRAFT_BATCH: on_batch(d, peer, env->draft_batch); break;
    case SPECD__ENVELOPE__BODY_HEALTH_REQUEST: on_health(d, peer, env->health_request); break;
    default: SD_DEBUG("dropping unexpected %s message", sd_msg_kind(env)); break;
    }
}

/* Serves until a signal arrives. Returns 0, or 1 on a socket error. */
static int serve(drafter *d)
{
    while (!g_stop) {
        /* pipelined work owed: do it unless messages are waiting (those go first, so the
         * drafting is for the newest state); main chains before branches */
        zmq_pollitem_t pi = {.socket = d->sock, .events = ZMQ_POLLIN};
        int n = zmq_poll(&pi, 1, sd_dpipe_pending(d->table, false) ? 0 : 500);
        if (n < 0) {
            if (errno == EINTR) continue;
            SD_ERROR("poll failed: %s", zmq_strerror(errno));
            return 1;
        }
        while (!g_stop) {
            sd_msg_id peer;
            Specd__Envelope *env = NULL;
            char err[256] = "";
            sd_status st = sd_msg_recv(d->sock, &peer, &env, SD_MSG_DONTWAIT, err, sizeof err);
            if (st == SD_ERR_TIMEOUT) break;
            if (st == SD_ERR_FORMAT) {
                SD_DEBUG("dropping malformed message: %s", err);
                continue;
            }
            if (st != SD_OK) {
                SD_ERROR("receive failed: %s", err);
                return 1;
            }
            dispatch(d, &peer, env);
            sd_msg_free(env);
        }
        if (g_stop) break;
        if (sd_dpipe_pending(d->table, true)) draft_owed(d);
        else if (d->pipeline) draft_branches(d);
    }
    return 0;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* Binds the ROUTER socket (a CURVE server with curve). Returns 0 or -1 (logged). */
static int open_socket(drafter *d, void *zctx, const char *endpoint, const sd_curve *curve)
{
    char err[256];
    d->sock = sd_msg_socket(zctx, ZMQ_ROUTER, 10000);
    if (!d->sock) {
        SD_ERROR("cannot create a socket: %s", zmq_strerror(errno));
        return -1;
    }
    if (curve && sd_curve_server(curve, d->sock, err, sizeof err) != SD_OK) {
        SD_ERROR("%s", err);
        return -1;
    }
    if (zmq_bind(d->sock, endpoint) != 0) {
        SD_ERROR("cannot bind %s: %s", endpoint, zmq_strerror(errno));
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    drafter_opts o;
    int prc = parse_opts(argc, argv, &o);
    if (prc) {
        usage(prc > 0 ? stdout : stderr, prc < 0);
        return prc > 0 ? 0 : 2;
    }
    sd_log_init("drafter", sd_log_parse_level(o.log_level));
    int dev_index;
    char dev_err[256];
    if (sd_device_parse(o.device, &dev_index, dev_err, sizeof dev_err) < 0) {
        fprintf(stderr, "specd-drafter: %s\n", dev_err);
        return 2;
    }
    install_signals();
    drafter d = {.pipeline = o.pipeline,
                 .branches = o.pipeline ? o.branches : 0,
                 .device = o.device,
                 .threads = o.ngram         ? 1
                            : o.threads > 0 ? o.threads
                                            : sd_cpu_count()};
    char terr[256];
    if (sd_dstate_new(o.max_seqs, &d.table, terr, sizeof terr) != SD_OK) {
        SD_ERROR("%s", terr);
        return 1;
    }
    if (make_proposer(&d, &o) != 0) {
        sd_dstate_free(d.table);
        return 1;
    }
    void *zctx = zmq_ctx_new();
    int rc = 1;
    sd_curve *curve = NULL;
    char cerr[512];
    if (zctx && o.curve_keys && sd_curve_load(zctx, o.curve_keys, true, &curve, cerr, sizeof cerr) != SD_OK) {
        SD_ERROR("%s", cerr);
    } else if (zctx && open_socket(&d, zctx, o.listen, curve) == 0) {
        SD_INFO("drafting with %s (%d threads, %d sequences) on %s", d.model_name, o.threads, o.max_seqs, o.listen);
        rc = serve(&d) || d.lost;
        SD_INFO("stopping");
    }
    if (d.sock) zmq_close(d.sock);
    sd_curve_free(curve);
    if (zctx) zmq_ctx_term(zctx);
    sd_proposer_free(d.prop);
    sd_backend_free(d.be);
    sd_dstate_free(d.table);
    sd_json_vocab_free(d.json);
    free(d.items);
    free(d.props);
    free(d.item_of);
    free(d.need_open);
    free(d.preqs);
    free(d.spans);
    for (int i = 0; i < SD_MAX_BRANCH_CALL; i++) free(d.bctx[i]);
    return rc;
}
