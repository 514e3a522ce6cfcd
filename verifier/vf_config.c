/* vf_config.c — specd-verifier options (see vf_config.h). */
#include "vf_config.h"

#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "backend_open.h"
#include "comm.h"
#include "draft.h"
#include "flags.h"
#include "model.h"
#include "opt.h"
#include "proposer.h"

/* Every flag of specd-verifier, for getopt_long and --help (flags.h). */
static const sd_flag g_flags[] = {
    {"Model", "model", 'm', "DIR", NULL, "the target model: a Hugging Face checkpoint directory (required)"},
    {"Model", "quant", 'Q', "none|int8", "none", "the target's weights: as in the checkpoint, or int8 (CPU)"},
    {"Model", "kv-dtype", 'V', "auto|f32|bf16", "auto", "the KV cache: bf16 for a bf16 model, else f32 (auto)"},
    {"Model", "max-model-len", 'M', "N", "the model's max_position_embeddings",
     "positions per sequence (prompt + output) served"},
    {"Model", "random-weights", 'W', NULL, NULL,
     "random weights of --model's config.json instead of its safetensors (benchmarks of published shapes)"},
    {"Speculation", "drafter", 'd', "ENDPOINT", NULL, "the drafter process's endpoint (tcp:// or ipc://)"},
    {"Speculation", "ngram", 'g', NULL, NULL,
     "drafts from this process's own n-gram lookup over each request's tokens, no drafter"},
    {"Speculation", "draft-model", 'R', "DIR", NULL,
     "a draft model run in this process, on its device, taking turns with the target (no drafter)"},
    {"Speculation", "draft-quant", 'q', "auto|int8|none", "auto", "--draft-model's weights"},
    {"Speculation", "draft-p-min", 'y', "P", "0.3",
     "--draft-model stops drafting after a token it gives probability below P"},
    {"Speculation", "spec-adaptive", 'A', "on|off", "on",
     "choose each request's draft length every step from measured step cost and acceptance"},
    {"Speculation", "spec-max-draft", 'X', "N", "12", "the most drafts the adaptive choice considers (1..16)"},
    {"Speculation", "num-draft", 'k', "K", "6", "drafts per request and step with --spec-adaptive off (0..16)"},
    {"Speculation", "spec-pipeline", 'P', "auto|on|off", "auto",
     "pipelined speculation with the drafter (auto: serial where it runs on this verifier's cores or GPU, else "
     "blocks of both measured and the faster kept)"},
    {"Speculation", "spec-fallback", 'F', "ngram|missing|off", "ngram",
     "n-gram lookup drafts for a step the drafter left without (missing), and also instead of asking the drafter "
     "where they pay more (ngram)"},
    {"Speculation", "draft-timeout-ms", 'T', "MS", "200",
     "serial speculation: how long a step waits for the drafter's reply before it decodes without drafts"},
    {"Speculation", "spec-max-batch", 'S', "N", "0 (no limit)", "no drafts in a step of more than N active requests"},
    {"Speculation", "spec-max-batch-sampled", 'Z', "N", "0 (no limit)", "the same for requests with temperature > 0"},
    {"Scheduling", "max-batch", 'b', "N", "32", "active requests (a step's batch); more wait in the queue"},
    {"Scheduling", "prefill-chunk", 'p', "N", "256", "prompt tokens of one request prefilled per step at most"},
    {"Scheduling", "prefill-budget", 'u', "N", "512", "prompt tokens prefilled per step over all requests"},
    {"Scheduling", "no-prefix-cache", 'C', NULL, NULL, "no KV reuse between requests"},
    {"Scheduling", "batch-invariant", 'I', NULL, NULL,
     "results that depend neither on the batch nor on --tensor-parallel-size: on a GPU deterministic matmuls "
     "(greedy speculative output then equals plain bit for bit; the CPU always is batch-invariant), and on every "
     "device the o and down sums over 8 fixed chunks (slower; the logits of TP = 1, 2, 4, 8 alike)"},
    {"Devices", "device", 'D', "cpu|cuda|cuda:N", "cpu", "where the target runs"},
    {"Devices", "threads", 't', "N", "0 (all cores)",
     "CPU threads (with --tensor-parallel-size, split between the ranks)"},
    {"Devices", "tensor-parallel-size", 'N', "N", "1",
     "split the target over N ranks (-tp N): --device names one device a rank (cuda:0,cuda:1), or cpu for N CPU "
     "ranks; each holds 1/N of the weights and KV heads"},
    {"Memory", "kv-blocks", 'B', "N", "from device memory, or max-batch x 1024 positions on the CPU",
     "the KV pool in blocks of 16 positions"},
    {"Memory", "gpu-memory-fraction", 'G', "F", "0.9",
     "the share of the GPU's memory this process may use (weights, work buffers, KV pool)"},
    {"Network", "listen", 'l', "ENDPOINT", "tcp://127.0.0.1:5555", "where routers connect (ZeroMQ ROUTER socket)"},
    {"Security", "curve-keys", 'K', "DIR", NULL,
     "CURVE authentication and encryption of both sockets, with the keys of specd keygen DIR"},
    {"Other", "log-level", 'L', "debug|info|warn|error", "info", "the least severe messages logged"},
    {"Other", "help", 'h', NULL, NULL, "this help"},
};
#define N_FLAGS (sizeof g_flags / sizeof g_flags[0])

const char *sd_vf_usage(void)
{
    return "usage: specd-verifier --model DIR [--listen ENDPOINT] [--drafter ENDPOINT | --ngram | --draft-model DIR]\n"
           "                      [options]\n";
}

void sd_vf_help(FILE *f)
{
    sd_flags_help(f, sd_vf_usage(),
                  "specd-verifier owns the target model, its paged KV pool and the scheduler: it verifies the "
                  "drafts of a drafter (or its own) and streams committed tokens to routers (specd serve starts "
                  "it for you).",
                  g_flags, N_FLAGS);
}

int sd_vf_default_kv_blocks(int max_batch, int max_position)
{
    long want = (long)max_batch * 1024 / SD_VF_BLOCK_SIZE;
    long floor = (long)max_position / SD_VF_BLOCK_SIZE + 8;
    if (want < floor) want = floor;
    return want > INT_MAX / 2 ? INT_MAX / 2 : (int)want;
}

static void set_defaults(sd_vf_config *c)
{
    memset(c, 0, sizeof *c);
    c->listen = "tcp://127.0.0.1:5555";
    c->device = "cpu";
    c->num_draft = SD_NUM_DRAFT_DEFAULT;
    c->spec_adaptive = true;
    c->spec_max_draft = SD_VF_SPEC_MAX_DRAFT_DEFAULT;
    c->max_batch = 32;
    c->tp_size = 1;
    c->gpu_mem_fraction = SD_VF_GPU_MEM_FRACTION;
    c->prefill_chunk = 256;
    c->prefill_budget = 512;
    c->draft_timeout_ms = 200;
    c->spec_pipeline = SD_VF_PIPE_AUTO;
    c->spec_fallback = true;
    c->spec_lookup_first = true;
    c->log_level = SD_LOG_INFO;
    c->draft_p_min = SD_DRAFT_P_MIN_DEFAULT;
}

/* Applies one numeric option. */
static sd_status numeric_opt(int c, const char *arg, sd_vf_config *cfg, char *err, size_t errlen)
{
    switch (c) {
    case 'k': {
        sd_status st = sd_opt_int(arg, "--num-draft", 0, INT_MAX, &cfg->num_draft, err, errlen);
        if (cfg->num_draft > SD_MAX_DRAFT) cfg->num_draft = SD_MAX_DRAFT;
        return st;
    }
    case 't': return sd_opt_int(arg, "--threads", 0, 4096, &cfg->threads, err, errlen);
    case 'N': return sd_opt_int(arg, "--tensor-parallel-size", 1, SD_COMM_MAX_RANKS, &cfg->tp_size, err, errlen);
    case 'b': return sd_opt_int(arg, "--max-batch", 1, 4096, &cfg->max_batch, err, errlen);
    case 'B': return sd_opt_int(arg, "--kv-blocks", 1, 1 << 24, &cfg->kv_blocks, err, errlen);
    case 'G': return sd_opt_double(arg, "--gpu-memory-fraction", 0.01, 1.0, &cfg->gpu_mem_fraction, err, errlen);
    case 'M': return sd_opt_int(arg, "--max-model-len", 1, INT_MAX, &cfg->max_model_len, err, errlen);
    case 'p': return sd_opt_int(arg, "--prefill-chunk", 1, 1 << 20, &cfg->prefill_chunk, err, errlen);
    case 'u': return sd_opt_int(arg, "--prefill-budget", 1, 1 << 20, &cfg->prefill_budget, err, errlen);
    case 'T': return sd_opt_int(arg, "--draft-timeout-ms", 1, 600000, &cfg->draft_timeout_ms, err, errlen);
    case 'S': return sd_opt_int(arg, "--spec-max-batch", 0, 1 << 20, &cfg->spec_max_batch, err, errlen);
    case 'Z': return sd_opt_int(arg, "--spec-max-batch-sampled", 0, 1 << 20, &cfg->spec_max_batch_sampled, err, errlen);
    case 'X': return sd_opt_int(arg, "--spec-max-draft", 1, SD_MAX_DRAFT, &cfg->spec_max_draft, err, errlen);
    case 'y': return sd_opt_double(arg, "--draft-p-min", 0.0, 1.0, &cfg->draft_p_min, err, errlen);
    default: return sd_seterr(err, errlen, SD_ERR_ARG, "unknown option");
    }
}

sd_status sd_vf_config_parse(int argc, char **argv, sd_vf_config *cfg, char *err, size_t errlen)
{
    struct option lo[N_FLAGS + 1];
    sd_flags_options(g_flags, N_FLAGS, lo);
    set_defaults(cfg);
    sd_flags_alias(argc, argv, "-tp", "--tensor-parallel-size");
    optind = 0; /* glibc: full re-initialisation */
    opterr = 0;
    int c;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        sd_status st = SD_OK;
        switch (c) {
        case 'm': cfg->model_dir = optarg; break;
        case 'l': cfg->listen = optarg; break;
        case 'd': cfg->drafter = *optarg ? optarg : NULL; break;
        case 'K': cfg->curve_keys = optarg; break;
        case 'D': cfg->device = optarg; break;
        case 'L': cfg->log_level = sd_log_parse_level(optarg); break;
        case 'h': cfg->help = true; break;
        case 'C': cfg->no_prefix_cache = true; break;
        case 'I': cfg->batch_invariant = true; break;
        case 'W': cfg->random_weights = true; break;
        case 'g': cfg->ngram = true; break;
        case 'R': cfg->draft_model = *optarg ? optarg : NULL; break;
        case 'q':
            if ((cfg->draft_quant = sd_draft_quant_parse(optarg)) < 0)
                st = sd_seterr(err, errlen, SD_ERR_ARG, "--draft-quant must be auto, int8 or none, got '%s'", optarg);
            break;
        case 'V':
            if ((cfg->kv_dtype = sd_kv_dtype_parse(optarg)) < 0)
                st = sd_seterr(err, errlen, SD_ERR_ARG, "--kv-dtype must be auto, f32 or bf16, got '%s'", optarg);
            break;
        case 'Q':
            if (strcmp(optarg, "none") && strcmp(optarg, "int8"))
                st = sd_seterr(err, errlen, SD_ERR_ARG, "--quant must be none or int8, got '%s'", optarg);
            cfg->quant_int8 = !strcmp(optarg, "int8");
            break;
        case 'A': st = sd_opt_on_off(optarg, "--spec-adaptive", &cfg->spec_adaptive, err, errlen); break;
        case 'F':
            if (strcmp(optarg, "ngram") && strcmp(optarg, "missing") && strcmp(optarg, "off"))
                st = sd_seterr(err, errlen, SD_ERR_ARG, "--spec-fallback must be ngram, missing or off, got '%s'",
                               optarg);
            cfg->spec_fallback = strcmp(optarg, "off") != 0;
            cfg->spec_lookup_first = !strcmp(optarg, "ngram");
            break;
        case 'P': {
            bool on;
            if (!strcmp(optarg, "auto")) cfg->spec_pipeline = SD_VF_PIPE_AUTO;
            else if ((st = sd_opt_on_off(optarg, "--spec-pipeline", &on, err, errlen)) == SD_OK)
                cfg->spec_pipeline = on ? SD_VF_PIPE_ON : SD_VF_PIPE_OFF;
            else st = sd_seterr(err, errlen, SD_ERR_ARG, "--spec-pipeline must be auto, on or off, got '%s'", optarg);
            break;
        }
        case '?':
        case ':':
            return sd_seterr(err, errlen, SD_ERR_ARG, "unknown option or missing value: %s",
                             optind > 0 && optind <= argc ? argv[optind - 1] : "?");
        default: st = numeric_opt(c, optarg, cfg, err, errlen); break;
        }
        if (st != SD_OK) return st;
    }
    if (optind < argc) return sd_seterr(err, errlen, SD_ERR_ARG, "unexpected argument '%s'", argv[optind]);
    if (cfg->help) return SD_OK;
    if (!cfg->model_dir) return sd_seterr(err, errlen, SD_ERR_ARG, "--model DIR is required");
    if ((cfg->ngram != 0) + (cfg->drafter != NULL) + (cfg->draft_model != NULL) > 1)
        return sd_seterr(err, errlen, SD_ERR_ARG,
                         "--drafter, --ngram and --draft-model (where the drafts come from) exclude each other");
    int index, n = 0;
    char name[64];
    for (; sd_device_nth(cfg->device, n, name, sizeof name); n++)
        if (sd_device_parse(name, &index, err, errlen) < 0) return SD_ERR_UNSUPPORTED;
    if (n == 0) return sd_seterr(err, errlen, SD_ERR_ARG, "--device '%s': no device", cfg->device);
    if (n > 1 && n != cfg->tp_size)
        return sd_seterr(err, errlen, SD_ERR_ARG,
                         "--device names %d devices: one a rank of --tensor-parallel-size (%d)", n, cfg->tp_size);
    return SD_OK;
}
