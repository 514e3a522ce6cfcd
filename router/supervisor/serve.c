/* serve.c — `specd serve`: the one-command supervisor.
 *
 *   specd serve --target DIR [--draft DIR [--draft-in-verifier] | --ngram | --ngram-drafter | --no-spec]
 *               [--host H]
 *               [--port P] [--api-key K] [--threads N] [--num-draft K]
 *               [--device cpu] [--draft-quant auto|int8|none] [--draft-p-min P]
 *               [--spec-max-batch N] [--spec-max-batch-sampled N] [--spec-pipeline auto|on|off]
 *               [--draft-branches N] [--spec-adaptive on|off] [--spec-max-draft N]
 *               [--api-key-file F] [--metrics-auth] [--prefill-budget N] [--drain-timeout S]
 *               [--lanes N] [--device D[,D...]] [--router-arg ARG ...] [--spec-fallback ngram|missing|off]
 *
 * --lanes N starts N verifier + drafter pairs (lane i's verifier on the i-th
 * device of --device's list, cyclically: one lane per GPU of a machine) and
 * gives the router a --verifier for each; --router-arg passes an argument to
 * the router as it is (--router-arg --max-queue=512).
 *
 * SIGTERM / SIGINT: the router is stopped first and drains (no new requests;
 * those in flight finish, up to --drain-timeout seconds, default 30, then end
 * with an error event or response), then the workers; a second signal ends
 * the requests in flight at once.
 *
 * --draft-in-verifier runs --draft's model inside the verifier, on its
 * device (specd-verifier --draft-model): serial speculation without a
 * drafter process or messages.
 *
 * Starts specd-verifier, specd-drafter (with --draft DIR, or --ngram-drafter:
 * the n-gram proposer in a process of its own; with neither, or --ngram, the
 * verifier drafts from its own n-gram lookup and no drafter runs) and
 * specd-router — found next to
 * this binary (/proc/self/exe) — as child processes talking over ipc://
 * sockets in a private temporary directory. It prints the URL once the
 * router's /health answers 200 (the verifier is up) and restarts a child
 * that dies with exponential backoff (0.5 s, doubling to 10 s while it keeps
 * dying young): without the drafter the verifier decodes without drafts,
 * without the verifier the router answers 503 until it is back. A child
 * that dies before the service ever answered is a start-up failure: it
 * stops everything. On SIGINT / SIGTERM the router drains first (below).
 * Exit status: 0 after a signal, 1 on a start-up failure, 2 on usage errors.
 *
 * Children run in their own process group (a terminal's Ctrl-C reaches only
 * the supervisor, which stops them in order) and get SIGTERM if the
 * supervisor itself dies (PR_SET_PDEATHSIG); the socket directory of a
 * supervisor killed with -9 is removed by the next one. Single-threaded; signals are
 * taken synchronously with sigtimedwait. */
#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <libgen.h>
#include <limits.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "clock.h"
#include "curve.h"
#include "flags.h"
#include "opt.h"

#define GRACE_S 5.0
#define MAX_ARGS 96
#define MAX_LANES 16
#define MAX_ROUTER_ARGS 32
#define SD_TP_MAX 8 /* the verifier's most ranks (kernels/comm.h SD_COMM_MAX_RANKS) */
/* The verifier's --gpu-memory-fraction when its drafter shares the GPU
 * (the drafter's default is 0.1). */
#define SERVE_SHARED_GPU_FRACTION "0.8"

typedef struct child {
    const char *name;
    char *argv[MAX_ARGS];
    int argc;
    pid_t pid;
    double started;
    double backoff; /* restart delay, seconds */
    double restart_at;
} child;

typedef struct serve_opts {
    const char *target, *draft, *host, *api_key, *threads, *num_draft, *device, *draft_quant, *draft_p_min;
    const char *spec_max_batch, *spec_max_batch_sampled, *spec_pipeline, *draft_branches, *spec_adaptive;
    const char *spec_fallback;
    const char *spec_max_draft, *api_key_file, *prefill_budget, *drain_timeout, *kv_blocks, *curve_keys;
    const char *quant; /* --quant none|int8: the target's weights (the verifier's --quant) */
    const char *tp;    /* --tensor-parallel-size N: the verifier's ranks (as given) */
    int tp_size;
    const char *draft_device;  /* --draft-device D[,D...]: the drafters' devices (default: the CPU) */
    const char *kv_dtype;      /* --kv-dtype auto|f32|bf16: both workers' KV caches */
    const char *gpu_mem;       /* --gpu-memory-fraction F: the verifier's share of its GPU */
    const char *draft_gpu_mem; /* --draft-gpu-memory-fraction F: the drafter's share of its GPU */
    const char *max_model_len; /* --max-model-len N: the verifier's positions per sequence */
    const char *served_name;   /* --served-model-name NAME[,ALIAS...]; default: basename of --target */
    int drain_s;
    bool ngram, ngram_drafter, no_spec, metrics_auth, no_prefix_cache, batch_invariant, random_weights;
    bool draft_in_verifier; /* --draft-in-verifier: --draft's model runs in the verifier (--draft-model) */
    int port;
    int lanes;                                /* --lanes N: verifier + drafter pairs (default 1) */
    const char *router_args[MAX_ROUTER_ARGS]; /* --router-arg ARG: passed to the router as they are */
    int n_router_args;
} serve_opts;

static char g_model[256]; /* basename of --target: the served model id */

static void add_arg(child *c, const char *a)
{
    if (c->argc < MAX_ARGS - 1) {
        c->argv[c->argc++] = strdup(a);
        c->argv[c->argc] = NULL;
    }
}

static void add_opt(child *c, const char *flag, const char *value)
{
    if (!value) return;
    add_arg(c, flag);
    add_arg(c, value);
}

/* Forks and execs c; the child gets default signal handling back. */
static int spawn(child *c)
{
    pid_t pid = fork();
    if (pid < 0) return -1;
    if (pid == 0) {
        sigset_t none;
        sigemptyset(&none);
        sigprocmask(SIG_SETMASK, &none, NULL);
        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        execv(c->argv[0], c->argv);
        fprintf(stderr, "specd: cannot run %s: %s\n", c->argv[0], strerror(errno));
        _exit(127);
    }
    c->pid = pid;
    c->started = sd_now_s();
    return 0;
}

/* Directory holding this executable. */
static int self_dir(char *buf, size_t n)
{
    ssize_t len = readlink("/proc/self/exe", buf, n - 1);
    if (len <= 0) return -1;
    buf[len] = '\0';
    char *slash = strrchr(buf, '/');
    if (slash) *slash = '\0';
    return 0;
}

/* Every flag of `specd serve`, for getopt_long and --help (flags.h). */
static const sd_flag g_flags[] = {
    {"Model", "target", 't', "DIR", NULL,
     "the target model: a Hugging Face checkpoint directory (config.json, safetensors, tokenizer.json); required"},
    {"Model", "draft", 'd', "DIR", NULL,
     "a draft model of the same tokenizer, run by a drafter process (or in the verifier with --draft-in-verifier)"},
    {"Model", "served-model-name", 'W', "NAME[,ALIAS...]", "the --target directory's name",
     "the model id clients name, and aliases they may use instead"},
    {"Model", "quant", 'q', "none|int8", "none", "the target's weights: as in the checkpoint, or int8 (CPU)"},
    {"Model", "draft-quant", 'Q', "auto|int8|none", "auto",
     "the draft model's weights: int8 where the device has int8 kernels (auto), int8 always, or as in the checkpoint"},
    {"Model", "kv-dtype", 'T', "auto|f32|bf16", "auto",
     "the KV caches of both workers: bf16 for a bf16 model, else f32 (auto), or the one named"},
    {"Model", "max-model-len", 'm', "N", "the model's max_position_embeddings",
     "positions per sequence (prompt + output) the verifier serves"},
    {"Model", "random-weights", 'O', NULL, NULL,
     "random weights of --target's and --draft's config.json instead of their safetensors (benchmarks of "
     "published shapes)"},
    {"Speculation", "ngram", 'n', NULL, "on without --draft",
     "drafts from the verifier's own n-gram lookup over each request's tokens: no drafter process"},
    {"Speculation", "ngram-drafter", 'J', NULL, NULL, "the same n-gram lookup in a drafter process of its own"},
    {"Speculation", "no-spec", 'N', NULL, NULL, "no speculation: plain decoding, no drafter"},
    {"Speculation", "draft-in-verifier", 'i', NULL, NULL,
     "run --draft's model inside the verifier, on its device, taking turns with the target (serial speculation, "
     "no drafter process or messages)"},
    {"Speculation", "spec-adaptive", 'A', "on|off", "on",
     "choose each request's draft length every step from measured step cost and acceptance (off: --num-draft always)"},
    {"Speculation", "spec-max-draft", 'X', "N", "12",
     "the most drafts the adaptive choice considers per request and step"},
    {"Speculation", "num-draft", 'K', "K", "6", "drafts per request and step with --spec-adaptive off (0..16)"},
    {"Speculation", "spec-pipeline", 'L', "auto|on|off", "auto",
     "pipelined speculation: the drafter drafts the next span while the verifier verifies (auto: serial where "
     "the drafter shares the verifier's CPU cores or GPU, else blocks of both measured and the faster kept)"},
    {"Speculation", "draft-branches", 'B', "N", "3",
     "pipelined: other outcomes the drafter drafts for per request and step (0..3)"},
    {"Speculation", "spec-fallback", 'b', "ngram|missing|off", "ngram",
     "n-gram lookup drafts for a step the drafter left without (missing), and also instead of asking the drafter "
     "where they pay more (ngram)"},
    {"Speculation", "draft-p-min", 'P', "P", "0.3",
     "the draft model stops drafting after a token it gives probability below P (0: always the full length)"},
    {"Speculation", "spec-max-batch", 'S', "N", "no limit", "no drafts in a step of more than N active requests"},
    {"Speculation", "spec-max-batch-sampled", 'Z', "N", "no limit", "the same for requests with temperature > 0"},
    {"Scheduling", "prefill-budget", 'G', "N", "512",
     "prompt tokens prefilled per step over all requests (long prompts go in chunks between decode steps)"},
    {"Scheduling", "no-prefix-cache", 'C', NULL, NULL,
     "no KV reuse between requests (the prefix cache of the verifier and the drafter's mirrors)"},
    {"Scheduling", "batch-invariant", 'I', NULL, NULL,
     "results that depend neither on the batch nor on --tensor-parallel-size: on a GPU deterministic matmuls "
     "(greedy speculative output then equals plain bit for bit; the CPU always is batch-invariant), and on every "
     "device the o and down sums over 8 fixed chunks (slower; the logits of TP = 1, 2, 4, 8 alike)"},
    {"Devices", "device", 'D', "D[,D...]", "cpu",
     "the verifier's device: cpu, cuda or cuda:N; with --lanes, lane i takes the i-th of the list (cyclically)"},
    {"Devices", "draft-device", 'E', "D[,D...]", "cpu", "the drafters' devices, as --device"},
    {"Devices", "threads", 'j', "N", "all cores (verifier), 1 (drafter)", "CPU threads of each worker"},
    {"Devices", "tensor-parallel-size", 'z', "N", "1",
     "split each lane's target over N ranks (-tp N): lane i's verifier takes the i-th N devices of --device "
     "(cuda:0,cuda:1,...), or N CPU ranks with --device cpu"},
    {"Devices", "lanes", 'l', "N", "1",
     "verifier + drafter pairs, each supervised on its own; the router balances requests over them (1..16)"},
    {"Memory", "kv-blocks", 'V', "N", "from device memory, or max-batch x 1024 positions on the CPU",
     "the verifier's KV pool in blocks of 16 positions"},
    {"Memory", "gpu-memory-fraction", 'g', "F", "0.9 (0.8 with the drafter on the same GPU)",
     "the share of its GPU's memory the verifier may use (weights, work buffers, KV pool)"},
    {"Memory", "draft-gpu-memory-fraction", 'H', "F", "0.1", "the drafter's share of its GPU"},
    {"Network", "host", 'h', "H", "127.0.0.1", "the address the HTTP API listens on"},
    {"Network", "port", 'p', "P", "8000", "the HTTP API's port"},
    {"Network", "drain-timeout", 'R', "S", "30",
     "on SIGTERM / SIGINT, seconds the requests in flight may take to finish before they are ended"},
    {"Network", "router-arg", 'r', "ARG", NULL,
     "an argument for specd-router as it is (repeatable): --router-arg --max-queue=512"},
    {"Security", "api-key", 'k', "KEY", NULL,
     "require Authorization: Bearer KEY on /v1/* (visible in the process list: prefer --api-key-file or "
     "SPECD_API_KEY)"},
    {"Security", "api-key-file", 'F', "FILE", "SPECD_API_KEY from the environment", "the API key: FILE's first line"},
    {"Security", "metrics-auth", 'M', NULL, NULL, "/metrics needs the API key too"},
    {"Security", "curve-keys", 'Y', "DIR", NULL,
     "CURVE authentication and encryption of the worker sockets, with the keys of specd keygen DIR"},
    {"Other", "help", 'U', NULL, NULL, "this help"},
};
#define N_FLAGS (sizeof g_flags / sizeof g_flags[0])

static const char g_usage[] =
    "usage: specd serve --target DIR [--draft DIR | --ngram | --ngram-drafter | --no-spec] [options]\n"
    "       specd keygen DIR\n";

static void usage(FILE *f)
{
    if (f == stderr) {
        sd_flags_usage_error(f, g_usage, "specd serve");
        return;
    }
    sd_flags_help(f, g_usage,
                  "specd serve starts a verifier, a drafter (with --draft or --ngram-drafter) and the router as "
                  "three supervised processes on ipc:// sockets, prints the URL once the service answers, and "
                  "restarts a worker that dies. specd keygen writes the CURVE keys of a deployment into DIR. "
                  "Options of a worker are handed to it; specd-router's others go by --router-arg.",
                  g_flags, N_FLAGS);
}

/* Options kept as given and handed to a worker (which checks them): code -> field. */
static const struct {
    int code;
    size_t off;
} g_as_given[] = {
    {'q', offsetof(serve_opts, quant)},
    {'G', offsetof(serve_opts, prefill_budget)},
    {'V', offsetof(serve_opts, kv_blocks)},
    {'Y', offsetof(serve_opts, curve_keys)},
    {'W', offsetof(serve_opts, served_name)},
    {'j', offsetof(serve_opts, threads)},
    {'K', offsetof(serve_opts, num_draft)},
    {'D', offsetof(serve_opts, device)},
    {'E', offsetof(serve_opts, draft_device)},
    {'T', offsetof(serve_opts, kv_dtype)},
    {'g', offsetof(serve_opts, gpu_mem)},
    {'H', offsetof(serve_opts, draft_gpu_mem)},
    {'Q', offsetof(serve_opts, draft_quant)},
    {'P', offsetof(serve_opts, draft_p_min)},
    {'S', offsetof(serve_opts, spec_max_batch)},
    {'Z', offsetof(serve_opts, spec_max_batch_sampled)},
    {'B', offsetof(serve_opts, draft_branches)},
    {'X', offsetof(serve_opts, spec_max_draft)},
    {'m', offsetof(serve_opts, max_model_len)},
    {'b', offsetof(serve_opts, spec_fallback)},
    {'z', offsetof(serve_opts, tp)},
};

/* Stores arg in o's field for code c when c is an option kept as given. */
static bool as_given(serve_opts *o, int c, const char *arg)
{
    for (size_t i = 0; i < sizeof g_as_given / sizeof g_as_given[0]; i++)
        if (g_as_given[i].code == c) {
            memcpy((char *)o + g_as_given[i].off, &arg, sizeof arg);
            return true;
        }
    return false;
}

/* The options' combinations (after parsing); -1 with a message where they clash. */
static int check_opts(serve_opts *o)
{
    if ((o->draft != NULL) + o->ngram + o->ngram_drafter + o->no_spec > 1) return -1;
    if (o->draft_in_verifier && (!o->draft || o->draft_device || o->draft_gpu_mem || o->draft_branches)) {
        fprintf(stderr, "specd serve: --draft-in-verifier takes --draft DIR and runs it on the verifier's device, "
                        "without --draft-device, --draft-gpu-memory-fraction or --draft-branches\n");
        return -1;
    }
    if (!o->no_spec && !o->draft && !o->ngram_drafter) o->ngram = true;
    char err[256];
    o->tp_size = 1;
    if (o->tp && sd_opt_int(o->tp, "--tensor-parallel-size", 1, SD_TP_MAX, &o->tp_size, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd serve: %s\n", err);
        return -1;
    }
    return 0;
}

static int parse_opts(int argc, char **argv, serve_opts *o)
{
    struct option lo[N_FLAGS + 1];
    sd_flags_options(g_flags, N_FLAGS, lo);
    memset(o, 0, sizeof *o);
    sd_flags_alias(argc, argv, "-tp", "--tensor-parallel-size");
    o->lanes = 1;
    o->host = "127.0.0.1";
    o->port = 8000;
    o->drain_s = 30;
    char err[256];
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (as_given(o, c, optarg)) continue;
        switch (c) {
        case 't': o->target = optarg; break;
        case 'd': o->draft = optarg; break;
        case 'n': o->ngram = true; break;
        case 'J': o->ngram_drafter = true; break;
        case 'i': o->draft_in_verifier = true; break;
        case 'N': o->no_spec = true; break;
        case 'h': o->host = optarg; break;
        case 'p':
            if (sd_opt_int(optarg, "--port", 1, 65535, &o->port, err, sizeof err) != SD_OK) goto bad;
            break;
        case 'k': o->api_key = optarg; break;
        case 'F': o->api_key_file = optarg; break;
        case 'M': o->metrics_auth = true; break;
        case 'C': o->no_prefix_cache = true; break;
        case 'I': o->batch_invariant = true; break;
        case 'R':
            if (sd_opt_int(optarg, "--drain-timeout", 0, 86400, &o->drain_s, err, sizeof err) != SD_OK) goto bad;
            o->drain_timeout = optarg;
            break;
        case 'O': o->random_weights = true; break;
        case 'A': {
            bool on;
            if (sd_opt_on_off(optarg, "--spec-adaptive", &on, err, sizeof err) != SD_OK) goto bad;
            o->spec_adaptive = optarg;
            break;
        }
        case 'L':
            if (strcmp(optarg, "auto") && strcmp(optarg, "on") && strcmp(optarg, "off")) {
                fprintf(stderr, "specd serve: --spec-pipeline must be auto, on or off, got '%s'\n", optarg);
                return -1;
            }
            o->spec_pipeline = optarg;
            break;
        case 'l':
            if (sd_opt_int(optarg, "--lanes", 1, MAX_LANES, &o->lanes, err, sizeof err) != SD_OK) goto bad;
            break;
        case 'r':
            if (o->n_router_args == MAX_ROUTER_ARGS) {
                snprintf(err, sizeof err, "at most %d --router-arg", MAX_ROUTER_ARGS);
                goto bad;
            }
            o->router_args[o->n_router_args++] = optarg;
            break;
        case 'U': usage(stdout); exit(0);
        default: return -1;
        }
    }
    if (!o->target || optind < argc) return -1;
    return check_opts(o);
bad:
    fprintf(stderr, "specd serve: %s\n", err);
    return -1;
}

/* Removes a socket directory: its sockets (*.sock), then itself. */
static void remove_sock_dir(const char *tmp)
{
    DIR *d = opendir(tmp);
    struct dirent *e;
    char sock[PATH_MAX + 300];
    while (d && (e = readdir(d))) {
        size_t n = strlen(e->d_name);
        if (n <= 5 || strcmp(e->d_name + n - 5, ".sock")) continue;
        snprintf(sock, sizeof sock, "%s/%s", tmp, e->d_name);
        unlink(sock);
    }
    if (d) closedir(d);
    rmdir(tmp);
}

/* Socket directories are /tmp/specd-PID-XXXXXX: those of a supervisor that
 * is gone (killed with -9: no chance to clean up) are removed at start-up,
 * when they are ours. */
static void remove_stale_sock_dirs(void)
{
    DIR *d = opendir("/tmp");
    if (!d) return;
    struct dirent *e;
    while ((e = readdir(d))) {
        long pid;
        char rest[64], path[PATH_MAX];
        struct stat st;
        if (sscanf(e->d_name, "specd-%ld-%63s", &pid, rest) != 2 || pid <= 0) continue;
        if (kill((pid_t)pid, 0) == 0 || errno != ESRCH) continue; /* alive (or not ours to ask) */
        snprintf(path, sizeof path, "/tmp/%s", e->d_name);
        if (lstat(path, &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
        remove_sock_dir(path);
    }
    closedir(d);
}

/* Lane i's device: the i-th (cyclically) of --device's comma-separated list. */
static const char *lane_device(const char *list, int i, char *buf, size_t n)
{
    if (!list) return NULL;
    int k = 0;
    for (const char *p = list; *p; k++) p += strcspn(p, ",") + (p[strcspn(p, ",")] == ',');
    int want = i % (k ? k : 1);
    const char *p = list;
    for (int j = 0; j < want; j++) p += strcspn(p, ",") + 1;
    snprintf(buf, n, "%.*s", (int)strcspn(p, ","), p);
    return buf;
}

/* Lane i's n devices for a verifier split over n ranks: the list's entries
 * i*n .. i*n+n-1 (cyclically), comma-separated; a single name as it is (the
 * verifier expands "cuda" to cuda:0 .. cuda:n-1, "cpu" to n CPU ranks). */
static const char *lane_devices(const char *list, int i, int n, char *buf, size_t len)
{
    if (!list || !strchr(list, ',')) return list;
    size_t used = 0;
    buf[0] = '\0';
    for (int r = 0; r < n; r++) {
        char one[64];
        lane_device(list, i * n + r, one, sizeof one);
        used += (size_t)snprintf(buf + used, used < len ? len - used : 0, "%s%s", r ? "," : "", one);
    }
    return buf;
}

/* True when a and b name the same CUDA device ("cuda" is "cuda:0"). */
static bool same_gpu(const char *a, const char *b)
{
    if (!a || !b || strncmp(a, "cuda", 4) || strncmp(b, "cuda", 4)) return false;
    int ia = a[4] == ':' ? atoi(a + 5) : 0, ib = b[4] == ':' ? atoi(b + 5) : 0;
    return ia == ib;
}

/* Fills lane i's two command lines. dir: binaries; tmp: socket directory. */
static void build_lane(const serve_opts *o, const char *dir, const char *tmp, int i, child *ver, child *dra)
{
    char path[PATH_MAX + 32], vep[PATH_MAX + 32], dep[PATH_MAX + 32], dev[512];
    snprintf(vep, sizeof vep, "ipc://%s/verifier-%d.sock", tmp, i);
    snprintf(dep, sizeof dep, "ipc://%s/drafter-%d.sock", tmp, i);
    snprintf(path, sizeof path, "%s/specd-verifier", dir);
    add_arg(ver, path);
    add_opt(ver, "--model", o->target);
    add_opt(ver, "--listen", vep);
    if (o->ngram) {
        add_arg(ver, "--ngram");
    } else if (o->draft_in_verifier) {
        add_opt(ver, "--draft-model", o->draft);
        add_opt(ver, "--draft-quant", o->draft_quant);
        add_opt(ver, "--draft-p-min", o->draft_p_min);
    } else if (!o->no_spec) {
        add_opt(ver, "--drafter", dep);
    }
    add_opt(ver, "--num-draft", o->num_draft);
    add_opt(ver, "--spec-max-batch", o->spec_max_batch);
    add_opt(ver, "--spec-max-batch-sampled", o->spec_max_batch_sampled);
    add_opt(ver, "--spec-pipeline", o->spec_pipeline);
    add_opt(ver, "--spec-adaptive", o->spec_adaptive);
    add_opt(ver, "--spec-max-draft", o->spec_max_draft);
    add_opt(ver, "--spec-fallback", o->spec_fallback);
    add_opt(ver, "--quant", o->quant);
    add_opt(ver, "--prefill-budget", o->prefill_budget);
    add_opt(ver, "--kv-blocks", o->kv_blocks);
    add_opt(ver, "--curve-keys", o->curve_keys);
    if (o->no_prefix_cache) add_arg(ver, "--no-prefix-cache");
    if (o->batch_invariant) add_arg(ver, "--batch-invariant");
    if (o->random_weights) add_arg(ver, "--random-weights");
    add_opt(ver, "--threads", o->threads);
    const char *vdev = o->tp_size > 1 ? lane_devices(o->device, i, o->tp_size, dev, sizeof dev)
                                      : lane_device(o->device, i, dev, sizeof dev);
    add_opt(ver, "--device", vdev);
    add_opt(ver, "--tensor-parallel-size", o->tp);
    add_opt(ver, "--kv-dtype", o->kv_dtype);
    add_opt(ver, "--max-model-len", o->max_model_len);
    char ddev[64];
    bool shared =
        o->draft && !o->draft_in_verifier && same_gpu(vdev, lane_device(o->draft_device, i, ddev, sizeof ddev));
    /* a drafter on the verifier's GPU takes its default 0.1: the verifier leaves room for it */
    add_opt(ver, "--gpu-memory-fraction", o->gpu_mem ? o->gpu_mem : shared ? SERVE_SHARED_GPU_FRACTION : NULL);
    snprintf(path, sizeof path, "%s/specd-drafter", dir);
    add_arg(dra, path);
    add_opt(dra, "--listen", dep);
    if (o->draft) {
        add_opt(dra, "--model", o->draft);
        add_opt(dra, "--device", lane_device(o->draft_device, i, dev, sizeof dev));
        add_opt(dra, "--quant", o->draft_quant);
        add_opt(dra, "--p-min", o->draft_p_min);
        add_opt(dra, "--spec-branches", o->draft_branches);
        add_opt(dra, "--kv-dtype", o->kv_dtype);
        add_opt(dra, "--gpu-memory-fraction", o->draft_gpu_mem);
        if (o->random_weights) add_arg(dra, "--random-weights");
        if (o->no_prefix_cache) add_arg(dra, "--no-prefix-cache");
    } else {
        add_arg(dra, "--ngram");
    }
    add_opt(dra, "--threads", o->threads);
    add_opt(dra, "--curve-keys", o->curve_keys);
    /* the drafter drafts ahead whenever the verifier pipelines: only "off" concerns it */
    if (o->spec_pipeline && !strcmp(o->spec_pipeline, "off")) add_opt(dra, "--spec-pipeline", "off");
}

/* Fills the router's command line: a --verifier per lane, then --router-arg's. */
static void build_router(const serve_opts *o, const char *dir, const char *tmp, child *rt)
{
    char path[PATH_MAX + 32], vep[PATH_MAX + 32], tok[PATH_MAX], cfg[PATH_MAX], port[16];
    snprintf(path, sizeof path, "%s/specd-router", dir);
    snprintf(tok, sizeof tok, "%s/tokenizer.json", o->target);
    snprintf(cfg, sizeof cfg, "%s/tokenizer_config.json", o->target);
    snprintf(port, sizeof port, "%d", o->port);
    add_arg(rt, path);
    add_opt(rt, "--host", o->host);
    add_opt(rt, "--port", port);
    for (int i = 0; i < o->lanes; i++) {
        snprintf(vep, sizeof vep, "ipc://%s/verifier-%d.sock", tmp, i);
        add_opt(rt, "--verifier", vep);
    }
    add_opt(rt, "--tokenizer", tok);
    if (access(cfg, R_OK) == 0) add_opt(rt, "--tokenizer-config", cfg);
    char name[PATH_MAX];
    snprintf(name, sizeof name, "%s", o->target);
    size_t n = strlen(name);
    while (n > 1 && name[n - 1] == '/') name[--n] = '\0';
    snprintf(g_model, sizeof g_model, "%s", basename(name));
    if (o->served_name) snprintf(g_model, sizeof g_model, "%.*s", (int)strcspn(o->served_name, ","), o->served_name);
    add_opt(rt, "--model-name", o->served_name ? o->served_name : g_model);
    if (o->metrics_auth) add_arg(rt, "--metrics-auth"); /* the key itself goes by the environment */
    add_opt(rt, "--drain-timeout", o->drain_timeout);
    add_opt(rt, "--curve-keys", o->curve_keys);
    for (int i = 0; i < o->n_router_args; i++) add_arg(rt, o->router_args[i]);
}

/* SIGTERM to every live child of cs[0..n), wait up to grace seconds, then
 * SIGKILL. A SIGINT / SIGTERM to the supervisor meanwhile is passed on (the
 * router then ends its requests in flight at once). */
static void stop_children(child **cs, int n, double grace)
{
    for (int i = 0; i < n; i++)
        if (cs[i]->pid > 0) kill(cs[i]->pid, SIGTERM);
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    struct timespec none = {0, 0};
    double deadline = sd_now_s() + grace;
    for (;;) {
        int sig = sigtimedwait(&set, NULL, &none);
        if (sig == SIGINT || sig == SIGTERM)
            for (int i = 0; i < n; i++)
                if (cs[i]->pid > 0) kill(cs[i]->pid, SIGTERM);
        int live = 0;
        for (int i = 0; i < n; i++) {
            if (cs[i]->pid <= 0) continue;
            if (waitpid(cs[i]->pid, NULL, WNOHANG) == cs[i]->pid) cs[i]->pid = 0;
            else live++;
        }
        if (!live) return;
        if (sd_now_s() > deadline) break;
        usleep(50000);
    }
    for (int i = 0; i < n; i++)
        if (cs[i]->pid > 0) {
            fprintf(stderr, "specd: %s did not stop; killing it\n", cs[i]->name);
            kill(cs[i]->pid, SIGKILL);
            waitpid(cs[i]->pid, NULL, 0);
            cs[i]->pid = 0;
        }
}

/* Stops the router first — it drains: no new requests, those in flight
 * finish (up to its drain timeout) while the workers still run — then the
 * workers. */
static void stop_all(child **cs, int n, child *rt, double drain_s)
{
    stop_children(&rt, 1, drain_s + GRACE_S);
    stop_children(cs, n, GRACE_S);
}

/* True when GET /health on the router answers 200 (a lane is up). */
static bool router_healthy(const char *host, int port)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0) return false;
    struct timeval tv = {1, 0};
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
    struct sockaddr_in a = {0};
    a.sin_family = AF_INET;
    a.sin_port = htons((uint16_t)port);
    static const char req[] = "GET /health HTTP/1.0\r\n\r\n";
    char buf[64] = "";
    bool ok = inet_pton(AF_INET, strcmp(host, "0.0.0.0") ? host : "127.0.0.1", &a.sin_addr) == 1 &&
              connect(fd, (struct sockaddr *)&a, sizeof a) == 0 && write(fd, req, sizeof req - 1) == sizeof req - 1 &&
              read(fd, buf, sizeof buf - 1) > 12 && !strncmp(buf + 8, " 200", 4);
    close(fd);
    return ok;
}

static void describe_exit(const child *c, int status)
{
    if (WIFEXITED(status)) fprintf(stderr, "specd: %s exited with status %d\n", c->name, WEXITSTATUS(status));
    else if (WIFSIGNALED(status)) fprintf(stderr, "specd: %s killed by signal %d\n", c->name, WTERMSIG(status));
}

/* Reaps exited children and schedules their restart: 0.5 s after a child
 * that ran a while, doubling (up to 10 s) while it keeps dying young. Before
 * the service ever answered (started: false) a death is a start-up failure
 * (a bad model path, a port taken): returns 1, nothing is restarted. */
static int reap(child **cs, int n, bool started)
{
    int status;
    pid_t pid;
    while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
        for (int i = 0; i < n; i++) {
            child *c = cs[i];
            if (c->pid != pid) continue;
            c->pid = 0;
            describe_exit(c, status);
            if (!started && strncmp(c->name, "drafter", 7)) return 1;
            double ran = sd_now_s() - c->started;
            c->backoff = ran > 30 ? 0.5 : (c->backoff ? c->backoff * 2 : 0.5);
            if (c->backoff > 10) c->backoff = 10;
            c->restart_at = sd_now_s() + c->backoff;
            fprintf(stderr, "specd: restarting the %s in %.1f s\n", c->name, c->backoff);
        }
    }
    return 0;
}

/* The supervision loop; returns the process exit status. */
static int supervise(const serve_opts *o, child **cs, int n, child *rt)
{
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGCHLD);
    bool announced = false, printed = false, warned = false;
    double t0 = sd_now_s(), last_probe = 0;
    for (;;) {
        struct timespec tick = {0, 100 * 1000 * 1000};
        int sig = sigtimedwait(&set, NULL, &tick);
        if (sig == SIGINT || sig == SIGTERM) {
            fprintf(stderr, "\nspecd: stopping: the router drains (up to %d s; a second signal ends it now)\n",
                    o->drain_s);
            stop_all(cs, n, rt, o->drain_s);
            return 0;
        }
        if (reap(cs, n, announced)) {
            stop_all(cs, n, rt, 0);
            return 1;
        }
        for (int i = 0; i < n; i++) {
            child *c = cs[i];
            if (c->pid != 0 || !c->restart_at || sd_now_s() < c->restart_at) continue;
            c->restart_at = 0;
            if (spawn(c) != 0) fprintf(stderr, "specd: cannot restart the %s: %s\n", c->name, strerror(errno));
        }
        if (!announced && sd_now_s() - last_probe > 0.25) {
            last_probe = sd_now_s();
            announced = router_healthy(o->host, o->port);
        }
        if (announced && !printed) {
            printed = true;
            printf("specd: serving %s at http://%s:%d\n", g_model, o->host, o->port);
            fflush(stdout);
        }
        if (!announced && !warned && sd_now_s() - t0 > 120) {
            fprintf(stderr, "specd: still waiting for the verifier to answer (router on port %d)\n", o->port);
            warned = true;
        }
    }
}

/* Every child's command line: per lane a verifier and (unless --no-spec) a
 * drafter, then the router, last. Returns how many (cs[0..n)). */
static int build_children(const serve_opts *o, const char *dir, const char *tmp, child **cs)
{
    static child ver[MAX_LANES], dra[MAX_LANES], rt = {.name = "router"};
    static char names[2 * MAX_LANES][24];
    int n = 0;
    for (int i = 0; i < o->lanes; i++) {
        snprintf(names[2 * i], sizeof names[0], o->lanes > 1 ? "verifier-%d" : "verifier", i);
        snprintf(names[2 * i + 1], sizeof names[0], o->lanes > 1 ? "drafter-%d" : "drafter", i);
        ver[i].name = names[2 * i];
        dra[i].name = names[2 * i + 1];
        build_lane(o, dir, tmp, i, &ver[i], &dra[i]);
        cs[n++] = &ver[i];
        if ((o->draft && !o->draft_in_verifier) || o->ngram_drafter) cs[n++] = &dra[i];
    }
    build_router(o, dir, tmp, &rt);
    cs[n++] = &rt;
    return n;
}

int main(int argc, char **argv)
{
    if (argc == 3 && !strcmp(argv[1], "keygen")) {
        char err[512];
        if (sd_curve_keygen(argv[2], err, sizeof err) != SD_OK) {
            fprintf(stderr, "specd keygen: %s\n", err);
            return 1;
        }
        printf("specd keygen: wrote %s/{server,client}.{public,secret}; give every process --curve-keys %s\n", argv[2],
               argv[2]);
        return 0;
    }
    if (argc < 2 || strcmp(argv[1], "serve")) {
        if (argc >= 2 && (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h"))) {
            usage(stdout);
            return 0;
        }
        usage(stderr);
        return 2;
    }
    serve_opts o;
    if (parse_opts(argc - 1, argv + 1, &o) != 0) {
        usage(stderr);
        return 2;
    }
    /* the key reaches the router through its environment, never its command line */
    char err[512], *key = NULL;
    const char *from;
    if (sd_opt_secret(o.api_key, o.api_key_file, "SPECD_API_KEY", &key, &from, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd serve: %s\n", err);
        return 2;
    }
    if (key && setenv("SPECD_API_KEY", key, 1) != 0) {
        fprintf(stderr, "specd serve: cannot pass the API key on: %s\n", strerror(errno));
        free(key);
        return 1;
    }
    if (o.api_key)
        fprintf(stderr, "specd serve: --api-key is visible in the process list; --api-key-file or SPECD_API_KEY "
                        "keep the key out of it\n");
    free(key);
    if (o.draft && !o.draft_in_verifier && o.device && strncmp(o.device, "cpu", 3) && !o.draft_device)
        fprintf(stderr,
                "specd serve: the verifier runs on %s, the drafter on the CPU (--draft-device puts it on a "
                "GPU)\n",
                o.device);
    remove_stale_sock_dirs();
    char dir[PATH_MAX], tmp[64];
    snprintf(tmp, sizeof tmp, "/tmp/specd-%ld-XXXXXX", (long)getpid());
    if (self_dir(dir, sizeof dir) != 0 || !mkdtemp(tmp)) {
        fprintf(stderr, "specd: cannot set up: %s\n", strerror(errno));
        return 1;
    }
    chmod(tmp, 0700);
    child *cs[2 * MAX_LANES + 1];
    int n = build_children(&o, dir, tmp, cs);
    child *rt = cs[n - 1];
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGCHLD);
    sigprocmask(SIG_BLOCK, &set, NULL);
    int rc = 0;
    for (int i = 0; i < n && rc == 0; i++)
        if (spawn(cs[i]) != 0) {
            fprintf(stderr, "specd: cannot start the %s: %s\n", cs[i]->name, strerror(errno));
            rc = 1;
        }
    rc = rc ? (stop_all(cs, n, rt, 0), 1) : supervise(&o, cs, n, rt);
    remove_sock_dir(tmp);
    for (int i = 0; i < n; i++)
        for (int k = 0; k < cs[i]->argc; k++) free(cs[i]->argv[k]);
    return rc;
}
