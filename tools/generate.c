/* generate.c — specd-generate: load a checkpoint, generate text (its flags:
 * g_flags below, printed by --help and in docs/FLAGS.md).
 *
 * Streams text to stdout (UTF-8 safe). With --json, stdout holds only one
 * JSON object on one line. --dump-logits runs one forward pass over the
 * prompt and writes float32 [n_tokens, vocab] little-endian logits. */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "backend_open.h"
#include "clock.h"
#include "flags.h"
#include "draft.h"
#include "engine.h"
#include "model.h"
#include "ngram.h"
#include "opt.h"
#include "regex_mask.h"
#include "spec_run.h"
#include "sampler.h"
#include "strbuf.h"
#include "tokenizer.h"

typedef struct gen_opts {
    const char *model_dir;
    const char *prompt;
    const char *prompt_ids;
    const char *dump_logits;
    int max_tokens;
    int threads;
    int tp_size; /* --tensor-parallel-size */
    const char *draft_dir;
    const char *device;
    bool ngram;
    int num_draft;      /* -1: auto (the adaptive choice, spec_run.h) */
    int spec_max_draft; /* auto: the most drafts considered */
    int draft_quant;    /* SD_DRAFT_QUANT_* */
    bool quant_int8;    /* --quant int8: the target's weights int8 (sd_model_quantize_q8) */
    float draft_p_min;
    int verify; /* sd_verify_mode or SD_VERIFY_AUTO */
    bool ignore_eos;
    bool json;
    bool batch_invariant; /* --batch-invariant (sd_backend_set_batch_invariant) */
    sd_sampling sampling;
    const char *logit_bias;   /* --logit-bias ID=B,...: parsed into sampling (process_opts) */
    const char *allowed;      /* --allowed-token-ids 1,2,3 */
    int min_tokens;           /* --min-tokens */
    const char *json_schema;  /* --json-schema: the schema's text, or @FILE */
    char *schema_text;        /* ... read from FILE */
    const char *regex;        /* --regex: the pattern, or @FILE */
    char *regex_text;         /* ... read from FILE, or the pattern of the --choice strings */
    const char *choices[256]; /* --choice (repeatable) */
    size_t n_choices;
    int32_t *bias_ids, *allowed_ids;
    float *bias_values;
} gen_opts;

/* Every flag of specd-generate, for getopt_long and --help (flags.h). */
static const sd_flag g_flags[] = {
    {"Model", "model", 'm', "DIR", NULL, "the model: a Hugging Face checkpoint directory (required)"},
    {"Model", "quant", 'q', "none|int8", "none", "the model's weights: as in the checkpoint, or int8 (CPU)"},
    {"Model", "batch-invariant", 'I', NULL, NULL,
     "results that depend neither on the batch nor on --tensor-parallel-size: on a GPU deterministic matmuls "
     "(greedy speculative output then equals plain bit for bit; the CPU always is batch-invariant), and on every "
     "device the o and down sums over 8 fixed chunks (slower; the logits of TP = 1, 2, 4, 8 alike)"},
    {"Model", "device", 'X', "cpu|cuda|cuda:N", "cpu", "where the model runs"},
    {"Model", "threads", 'T', "N", "0 (all cores)",
     "CPU threads (with --tensor-parallel-size, split between the ranks)"},
    {"Model", "tensor-parallel-size", 'Y', "N", "1",
     "split the model over N ranks (-tp N): --device names one device a rank (cuda:0,cuda:1), or cpu for N CPU "
     "ranks"},
    {"Input and output", "prompt", 'p', "TEXT", NULL,
     "the prompt, encoded with the model's tokenizer.json and its special tokens"},
    {"Input and output", "prompt-ids", 'i', "1,2,3", NULL, "the prompt as token ids"},
    {"Input and output", "max-tokens", 'n', "N", "128", "tokens to generate at most"},
    {"Input and output", "ignore-eos", 'E', NULL, NULL, "EOS is not a stop (it is still sampled)"},
    {"Input and output", "json", 'j', NULL, NULL,
     "print one JSON object on one line: tokens, text, finish_reason, timings, speculation counters"},
    {"Input and output", "dump-logits", 'd', "FILE", NULL,
     "one forward pass over the prompt: float32 [n_tokens, vocab] little-endian logits to FILE"},
    {"Sampling", "temperature", 't', "T", "0 (greedy)", "softmax temperature"},
    {"Sampling", "top-k", 'k', "K", "0 (off)", "keep the K most probable tokens"},
    {"Sampling", "top-p", 'P', "P", "1 (off)", "keep the most probable tokens up to probability P"},
    {"Sampling", "min-p", 'M', "P", "0 (off)", "drop tokens below P times the most probable one's probability"},
    {"Sampling", "repetition-penalty", 'r', "R", "1 (off)",
     "tokens of the prompt and output so far: positive logits divided by R, negative ones multiplied"},
    {"Sampling", "presence-penalty", 'e', "X", "0", "subtract X from the logit of each token generated so far (-2..2)"},
    {"Sampling", "frequency-penalty", 'f', "X", "0",
     "subtract X times its count from the logit of each token generated so far (-2..2)"},
    {"Sampling", "seed", 's', "S", "0", "the random stream of sampling (a pure function of seed and position)"},
    {"Sampling", "logit-bias", 'B', "ID=B[,ID=B...]", NULL, "add B to the logit of token ID"},
    {"Sampling", "allowed-token-ids", 'A', "1,2,3", NULL, "only these tokens may be generated"},
    {"Sampling", "min-tokens", 'N', "N", "0", "no stop (EOS or stop ids) before N tokens"},
    {"Structured output", "response-format", 'F', "text|json_object", "text", "json_object: one JSON object"},
    {"Structured output", "json-schema", 'J', "SCHEMA|@FILE", NULL, "JSON that follows the schema (or FILE's)"},
    {"Structured output", "disable-any-whitespace", 'W', NULL, NULL, "compact JSON: no whitespace outside strings"},
    {"Structured output", "regex", 'g', "PATTERN|@FILE", NULL, "output that matches the regular expression"},
    {"Structured output", "choice", 'C', "TEXT", NULL, "output that is one of the choices (repeatable)"},
    {"Speculation", "draft", 'D', "DIR", NULL, "speculative decoding with this draft model (the same tokenizer)"},
    {"Speculation", "ngram", 'G', NULL, NULL, "speculative decoding with n-gram lookup drafts"},
    {"Speculation", "num-draft", 'K', "K|auto", "6",
     "drafts per step: a static K (0..16), or auto, the server's adaptive choice each step (0 .. "
     "--spec-max-draft, none where drafting costs more than it makes; it learns the costs anew each run: "
     "ahead of K6 over 512 tokens, behind it over 128)"},
    {"Speculation", "spec-max-draft", 'L', "N", "12", "with --num-draft auto: the most drafts it considers (1..16)"},
    {"Speculation", "verify", 'V', "greedy|match|rejection", "greedy at T = 0, rejection with q, else match",
     "the accept rule (each keeps the target's output exact)"},
    {"Speculation", "draft-quant", 'Q', "auto|int8|none", "auto", "the draft model's weights"},
    {"Speculation", "draft-p-min", 'R', "P", "0.3",
     "the draft model stops drafting after a token it gives probability below P"},
    {"Other", "help", 'h', NULL, NULL, "this help"},
};
#define N_FLAGS (sizeof g_flags / sizeof g_flags[0])

static const char g_usage[] = "usage: specd-generate --model DIR (--prompt TEXT | --prompt-ids 1,2,3) [options]\n";

static void usage(FILE *f)
{
    if (f == stderr) {
        sd_flags_usage_error(f, g_usage, "specd-generate");
        return;
    }
    sd_flags_help(f, g_usage,
                  "specd-generate generates text in one process, plainly or with speculative decoding, and "
                  "streams it to stdout (UTF-8 safe).",
                  g_flags, N_FLAGS);
}

static int parse_processors(gen_opts *o);

/* The options of the output's processors (logits processors, JSON,
 * regular expressions): 0 taken (*st the parse's status, err its message), -1
 * refused (said on stderr), 1 not one of them. */
static int output_opt(gen_opts *o, int c, sd_status *st, char *err, size_t errlen)
{
    switch (c) {
    case 'B': o->logit_bias = optarg; break;
    case 'F':
        if (strcmp(optarg, "text") && strcmp(optarg, "json_object")) {
            fprintf(stderr, "specd-generate: --response-format must be text or json_object\n");
            return -1;
        }
        o->sampling.json_object = !strcmp(optarg, "json_object");
        break;
    case 'J': o->json_schema = optarg; break;
    case 'g': o->regex = optarg; break;
    case 'W': o->sampling.json_compact = true; break;
    case 'C':
        if (o->n_choices == sizeof o->choices / sizeof *o->choices) {
            fprintf(stderr, "specd-generate: at most 256 --choice strings\n");
            return -1;
        }
        o->choices[o->n_choices++] = optarg;
        break;
    case 'A': o->allowed = optarg; break;
    case 'N': *st = sd_opt_int(optarg, "--min-tokens", 0, 1000000000, &o->min_tokens, err, errlen); break;
    default: return 1;
    }
    return 0;
}

/* The options of speculation and the backend: as output_opt. */
static int spec_opt(gen_opts *o, int c, sd_status *st, char *err, size_t errlen)
{
    switch (c) {
    case 'D': o->draft_dir = optarg; break;
    case 'X': o->device = optarg; break;
    case 'G': o->ngram = true; break;
    case 'K':
        if (strcmp(optarg, "auto") == 0) o->num_draft = -1;
        else *st = sd_opt_int(optarg, "--num-draft", 0, SD_MAX_DRAFT, &o->num_draft, err, errlen);
        break;
    case 'L': *st = sd_opt_int(optarg, "--spec-max-draft", 1, SD_MAX_DRAFT, &o->spec_max_draft, err, errlen); break;
    case 'Q':
        if ((o->draft_quant = sd_draft_quant_parse(optarg)) < 0) {
            fprintf(stderr, "specd-generate: --draft-quant must be auto, int8 or none\n");
            return -1;
        }
        break;
    case 'q':
        if (strcmp(optarg, "none") && strcmp(optarg, "int8")) {
            fprintf(stderr, "specd-generate: --quant must be none or int8\n");
            return -1;
        }
        o->quant_int8 = !strcmp(optarg, "int8");
        break;
    case 'R': *st = sd_opt_float(optarg, "--draft-p-min", 0, 1, &o->draft_p_min, err, errlen); break;
    case 'V':
        if (!strcmp(optarg, "greedy")) o->verify = SD_VERIFY_GREEDY;
        else if (!strcmp(optarg, "match")) o->verify = SD_VERIFY_MATCH;
        else if (!strcmp(optarg, "rejection")) o->verify = SD_VERIFY_REJECTION;
        else {
            fprintf(stderr, "specd-generate: --verify must be greedy, match or rejection\n");
            return -1;
        }
        break;
    default: return 1;
    }
    return 0;
}

static int parse_args(int argc, char **argv, gen_opts *o)
{
    struct option lo[N_FLAGS + 1];
    sd_flags_options(g_flags, N_FLAGS, lo);
    memset(o, 0, sizeof *o);
    o->max_tokens = 128;
    o->tp_size = 1;
    sd_flags_alias(argc, argv, "-tp", "--tensor-parallel-size");
    o->num_draft = SD_NUM_DRAFT_DEFAULT; /* auto learns too slowly for short runs to be the default yet */
    o->spec_max_draft = 12;
    o->draft_quant = SD_DRAFT_QUANT_AUTO;
    o->draft_p_min = SD_DRAFT_P_MIN_DEFAULT;
    o->verify = SD_VERIFY_AUTO;
    o->sampling = sd_sampling_default();
    char err[256];
    sd_status st = SD_OK;
    int c;
    while (st == SD_OK && (c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 'm': o->model_dir = optarg; break;
        case 'p': o->prompt = optarg; break;
        case 'i': o->prompt_ids = optarg; break;
        case 'd': o->dump_logits = optarg; break;
        case 'E': o->ignore_eos = true; break;
        case 'I': o->batch_invariant = true; break;
        case 'j': o->json = true; break;
        case 'n': st = sd_opt_int(optarg, "--max-tokens", 0, 1000000000, &o->max_tokens, err, sizeof err); break;
        case 'T': st = sd_opt_int(optarg, "--threads", 0, 1024, &o->threads, err, sizeof err); break;
        case 'Y':
            st = sd_opt_int(optarg, "--tensor-parallel-size", 1, SD_COMM_MAX_RANKS, &o->tp_size, err, sizeof err);
            break;
        case 't': st = sd_opt_float(optarg, "--temperature", 0, 1e6, &o->sampling.temperature, err, sizeof err); break;
        case 'k': st = sd_opt_int(optarg, "--top-k", 0, 1000000000, &o->sampling.top_k, err, sizeof err); break;
        case 'P': st = sd_opt_float(optarg, "--top-p", -1e9, 1e9, &o->sampling.top_p, err, sizeof err); break;
        case 'M': st = sd_opt_float(optarg, "--min-p", -1e9, 1e9, &o->sampling.min_p, err, sizeof err); break;
        case 'r':
            st = sd_opt_float(optarg, "--repetition-penalty", -1e9, 1e9, &o->sampling.repetition_penalty, err,
                              sizeof err);
            break;
        case 'e':
            st = sd_opt_float(optarg, "--presence-penalty", -1e9, 1e9, &o->sampling.presence_penalty, err, sizeof err);
            break;
        case 'f':
            st =
                sd_opt_float(optarg, "--frequency-penalty", -1e9, 1e9, &o->sampling.frequency_penalty, err, sizeof err);
            break;
        case 's': st = sd_opt_u64(optarg, "--seed", &o->sampling.seed, err, sizeof err); break;
        case 'h': usage(stdout); exit(0);
        default: {
            int r = output_opt(o, c, &st, err, sizeof err);
            if (r > 0) r = spec_opt(o, c, &st, err, sizeof err);
            if (r < 0) return -1;
            if (r > 0) {
                usage(stderr);
                return -1;
            }
        }
        }
    }
    if (st != SD_OK) {
        fprintf(stderr, "specd-generate: %s\n", err);
        return -1;
    }
    if (!o->model_dir || (!o->prompt && !o->prompt_ids) || (o->prompt && o->prompt_ids)) {
        fprintf(stderr, "specd-generate: need --model and exactly one of --prompt / --prompt-ids\n");
        usage(stderr);
        return -1;
    }
    if (o->draft_dir && o->ngram) {
        fprintf(stderr, "specd-generate: --draft and --ngram are exclusive\n");
        return -1;
    }
    if (parse_processors(o) != 0) return -1;
    if (sd_sampling_validate(&o->sampling, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-generate: %s\n", err);
        return -1;
    }
    return 0;
}

/* Parses "1,2,3" (option `name`) into a malloc'd array. */
static int parse_ids(const char *name, const char *s, int32_t **ids, size_t *n)
{
    size_t cap = 16, k = 0;
    int32_t *a = malloc(cap * sizeof *a);
    const char *p = s;
    while (a && *p) {
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (errno || end == p || v < 0 || v > INT32_MAX) break;
        if (k == cap) {
            int32_t *b = realloc(a, (cap *= 2) * sizeof *a);
            if (!b) break;
            a = b;
        }
        a[k++] = (int32_t)v;
        p = end;
        if (*p == ',') p++;
        else if (*p) break;
    }
    if (!a || *p || k == 0) {
        free(a);
        fprintf(stderr, "specd-generate: %s must be a comma-separated list of token ids\n", name);
        return -1;
    }
    *ids = a;
    *n = k;
    return 0;
}

/* --logit-bias "ID=B,ID=B" and --allowed-token-ids into o->sampling's
 * logits processors (o owns the lists; sd_sampling_validate checks them). */
/* --regex (@FILE read) or --choice's strings as a pattern: o->sampling.regex
 * (compiled by sd_req_new). */
static int read_regex(gen_opts *o)
{
    char err[256];
    size_t len;
    if (o->regex && o->n_choices) {
        fprintf(stderr, "specd-generate: give --regex or --choice, not both\n");
        return -1;
    }
    if (o->regex && o->regex[0] == '@' &&
        sd_read_file(o->regex + 1, SD_MAX_REGEX, &o->regex_text, &len, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-generate: --regex: %s\n", err);
        return -1;
    }
    if (o->n_choices) {
        size_t lens[256];
        for (size_t i = 0; i < o->n_choices; i++) lens[i] = strlen(o->choices[i]);
        if (!(o->regex_text = sd_regex_of_choices(o->choices, lens, o->n_choices, err, sizeof err))) {
            fprintf(stderr, "specd-generate: --choice: %s\n", err);
            return -1;
        }
    }
    o->sampling.regex = o->regex_text ? o->regex_text : o->regex;
    return 0;
}

static int parse_processors(gen_opts *o)
{
    size_t n = 0;
    if (o->allowed && parse_ids("--allowed-token-ids", o->allowed, &o->allowed_ids, &n) != 0) return -1;
    o->sampling.allowed = o->allowed_ids;
    o->sampling.n_allowed = (uint32_t)n;
    o->sampling.min_tokens = (uint32_t)o->min_tokens;
    if (o->json_schema && o->json_schema[0] == '@') {
        char err[256];
        size_t len;
        if (sd_read_file(o->json_schema + 1, SD_MAX_JSON_SCHEMA, &o->schema_text, &len, err, sizeof err) != SD_OK) {
            fprintf(stderr, "specd-generate: --json-schema: %s\n", err);
            return -1;
        }
    }
    o->sampling.json_schema = o->schema_text ? o->schema_text : o->json_schema; /* compiled by sd_req_new */
    if (read_regex(o) != 0) return -1;
    if (!o->logit_bias) return 0;
    size_t cap = strlen(o->logit_bias) / 2 + 1;
    o->bias_ids = malloc(cap * sizeof *o->bias_ids);
    o->bias_values = malloc(cap * sizeof *o->bias_values);
    const char *p = o->logit_bias;
    n = 0;
    while (o->bias_ids && o->bias_values && *p && n < cap) {
        char *end;
        errno = 0;
        long id = strtol(p, &end, 10);
        if (errno || end == p || id < 0 || id > INT32_MAX || *end != '=') break;
        p = end + 1;
        float b = strtof(p, &end);
        if (end == p) break;
        o->bias_ids[n] = (int32_t)id;
        o->bias_values[n++] = b;
        p = end;
        if (*p == ',') p++;
        else if (*p) break;
    }
    if (!o->bias_ids || !o->bias_values || *p || n == 0) {
        fprintf(stderr, "specd-generate: --logit-bias must be a comma-separated list of ID=BIAS\n");
        return -1;
    }
    o->sampling.bias_ids = o->bias_ids;
    o->sampling.bias_values = o->bias_values;
    o->sampling.n_bias = (uint32_t)n;
    return 0;
}

static int dump_logits(sd_model *m, const int32_t *ids, size_t n, const char *path)
{
    const sd_model_config *c = sd_model_cfg(m);
    char err[256];
    sd_kv_seq seq;
    sd_kv_seq_init(&seq);
    float *logits = malloc(n * (size_t)c->vocab_size * sizeof(float));
    int rc = -1;
    if (!logits) goto out;
    if (sd_kv_reserve(sd_model_kv_pool(m), &seq, (int)n) != SD_OK) {
        fprintf(stderr, "specd-generate: prompt does not fit the KV pool\n");
        goto out;
    }
    sd_batch_seq b = {ids, (int)n, 0, &seq, (int)n, NULL, NULL, NULL};
    if (sd_model_forward(m, &b, 1, logits, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-generate: %s\n", err);
        goto out;
    }
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(logits, sizeof(float), n * (size_t)c->vocab_size, f) != n * (size_t)c->vocab_size) {
        fprintf(stderr, "specd-generate: cannot write %s: %s\n", path, strerror(errno));
        if (f) fclose(f);
        goto out;
    }
    rc = fclose(f) == 0 ? 0 : -1;
out:
    sd_kv_seq_release(sd_model_kv_pool(m), &seq);
    free(logits);
    return rc;
}

typedef struct gen_result {
    int32_t *tokens;
    size_t n;
    const char *finish;
    double prefill_s, decode_s;
    sd_spec_stats stats;
} gen_result;

/* Emits a token's text on stdout (streaming mode) as it becomes final. */
static void stream_token(sd_tok_stream *ts, int32_t id)
{
    const char *piece;
    size_t len;
    if (ts && sd_tok_stream_push(ts, id, &piece, &len) == SD_OK && len) {
        fwrite(piece, 1, len, stdout);
        fflush(stdout);
    }
}

static const char *finish_name(sd_finish f)
{
    switch (f) {
    case SD_FINISH_STOP: return "stop";
    case SD_FINISH_LENGTH: return "length";
    case SD_FINISH_CANCELLED: return "cancelled";
    case SD_FINISH_ERROR: return "error";
    default: return "none";
    }
}

typedef struct stream_ctx {
    sd_tok_stream *ts;
    gen_result *res;
    double t0;
} stream_ctx;

/* Per-step callback: streams the new tokens, notes when prefill ended. */
static void on_step(void *p, const sd_req *r)
{
    stream_ctx *c = p;
    for (int i = r->n_tokens - r->n_new; i < r->n_tokens; i++) stream_token(c->ts, r->tokens[i]);
    if (c->res->prefill_s == 0 && sd_req_n_output(r) > 0) c->res->prefill_s = sd_now_s() - c->t0;
}

/* Generation through the engine: plain when pr is NULL, else speculative. */
static int run_engine(sd_engine *e, sd_proposer *pr, const gen_opts *o, const int32_t *prompt, size_t np,
                      sd_tok_stream *ts, gen_result *res)
{
    sd_req_params p = sd_req_params_default();
    p.sampling = o->sampling;
    p.max_tokens = o->max_tokens > 0 ? o->max_tokens : 1;
    p.ignore_eos = o->ignore_eos;
    p.speculate = pr != NULL;
    p.num_draft = o->num_draft < 0 ? o->spec_max_draft : o->num_draft;
    p.verify = o->verify;
    sd_req *r = NULL;
    char err[256];
    if (sd_req_new(e, 1, prompt, (int)np, &p, &r, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-generate: %s\n", err);
        return -1;
    }
    stream_ctx sc = {ts, res, sd_now_s()};
    /* auto: the engine's step cost is measured first (its time counts in prefill_seconds, not in the decode
     * rate), as the verifier does at start-up */
    sd_spec_run_opts so = {.adaptive = o->num_draft < 0, .calibrate_ms = 2000.0};
    if (sd_spec_run(e, pr, &r, 1, &so, on_step, &sc, err, sizeof err) != SD_OK)
        fprintf(stderr, "specd-generate: %s\n", err);
    res->decode_s = sd_now_s() - sc.t0 - res->prefill_s;
    if (r->finish == SD_FINISH_ERROR) fprintf(stderr, "specd-generate: %s\n", r->error);
    res->n = (size_t)sd_req_n_output(r);
    res->tokens = malloc((res->n + 1) * sizeof(int32_t));
    if (res->tokens) memcpy(res->tokens, sd_req_output(r), res->n * sizeof(int32_t));
    res->finish = finish_name(r->finish);
    res->stats = r->stats;
    sd_req_free(e, r);
    return res->tokens ? 0 : -1;
}

static void print_json(const gen_opts *o, const sd_tok *tok, size_t np, const gen_result *r)
{
    (void)o;
    json_t *obj = json_object();
    json_t *arr = json_array();
    for (size_t i = 0; i < r->n; i++) json_array_append_new(arr, json_integer(r->tokens[i]));
    char *text = NULL;
    size_t tl = 0;
    char err[128];
    if (tok) sd_tok_decode(tok, r->tokens, r->n, true, &text, &tl, err, sizeof err);
    json_object_set_new(obj, "prompt_tokens", json_integer((json_int_t)np));
    json_object_set_new(obj, "completion_tokens", json_integer((json_int_t)r->n));
    json_object_set_new(obj, "tokens", arr);
    json_object_set_new(obj, "text", json_stringn(text ? text : "", text ? tl : 0));
    json_object_set_new(obj, "finish_reason", json_string(r->finish));
    double tps = r->n > 1 && r->decode_s > 0 ? (double)(r->n - 1) / r->decode_s : 0.0;
    json_object_set_new(obj, "tokens_per_second", json_real(tps));
    json_object_set_new(obj, "prefill_seconds", json_real(r->prefill_s));
    json_object_set_new(obj, "decode_seconds", json_real(r->decode_s));
    const sd_spec_stats *st = &r->stats;
    json_object_set_new(obj, "steps", json_integer((json_int_t)st->steps));
    json_object_set_new(obj, "draft_tokens", json_integer((json_int_t)st->draft_tokens));
    json_object_set_new(obj, "accepted_tokens", json_integer((json_int_t)st->accepted_tokens));
    json_object_set_new(obj, "mean_accepted_per_step",
                        json_real(st->steps ? (double)st->accepted_tokens / (double)st->steps : 0.0));
    json_object_set_new(obj, "tokens_per_step",
                        json_real(st->steps ? (double)(st->accepted_tokens + st->steps) / (double)st->steps : 0.0));
    char *s = json_dumps(obj, JSON_COMPACT | JSON_ENSURE_ASCII);
    if (s) printf("%s\n", s);
    free(s);
    free(text);
    json_decref(obj);
}

static sd_tok *load_tokenizer(const char *dir, bool required)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    sd_tok *tok = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) {
        if (required) fprintf(stderr, "specd-generate: %s: %s\n", path, strerror(errno));
        return NULL;
    }
    fclose(f);
    if (sd_tok_load(path, &tok, err, sizeof err) != SD_OK) fprintf(stderr, "specd-generate: %s\n", err);
    return tok;
}

static int prompt_ids(const gen_opts *o, const sd_tok *tok, int32_t **ids, size_t *n)
{
    if (o->prompt_ids) return parse_ids("--prompt-ids", o->prompt_ids, ids, n);
    char err[512];
    if (sd_tok_encode(tok, o->prompt, strlen(o->prompt), true, ids, n, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-generate: %s\n", err);
        return -1;
    }
    if (*n == 0) {
        fprintf(stderr, "specd-generate: the prompt encodes to no tokens\n");
        return -1;
    }
    return 0;
}

/* Creates the proposer the options ask for (none: *out stays NULL). */
static int make_proposer(const gen_opts *o, sd_backend *be, int max_context, sd_proposer **out)
{
    char err[512];
    sd_status st = SD_OK;
    if (o->ngram) {
        st = sd_ngram_new(1, 4, out, err, sizeof err);
    } else if (o->draft_dir) {
        st = sd_draft_check_tokenizer(o->model_dir, o->draft_dir, err, sizeof err);
        if (st == SD_OK) {
            sd_draft_opts d = {.be = be,
                               .max_seqs = 1,
                               .max_context = max_context,
                               .block_size = 16,
                               .quant = o->draft_quant,
                               .p_min = o->draft_p_min};
            st = sd_draft_new(o->draft_dir, &d, out, err, sizeof err);
        }
    }
    if (st != SD_OK) fprintf(stderr, "specd-generate: %s\n", err);
    return st == SD_OK ? 0 : -1;
}

/* The engine over m (*eng); with JSON or regex output the model's token
 * table for its masks (*jv); with text output and a tokenizer the stream
 * that decodes it (*ts). The caller frees all three. Returns 0, or -1 after
 * a message. */
static int make_engine(const gen_opts *o, sd_model *m, const sd_tok *tok, sd_engine **eng, sd_json_vocab **jv,
                       sd_tok_stream **ts)
{
    char err[512];
    if (sd_engine_new(m, NULL, eng, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-generate: %s\n", err);
        return -1;
    }
    if (o->sampling.json_object || o->sampling.json_schema || o->sampling.regex) {
        if (sd_json_vocab_load(o->model_dir, sd_model_cfg(m), jv, err, sizeof err) != SD_OK) {
            fprintf(stderr, "specd-generate: %s output: %s\n", o->sampling.regex ? "regex" : "JSON", err);
            return -1;
        }
        sd_engine_set_json_vocab(*eng, *jv);
    }
    if (!o->json && tok && sd_tok_stream_new(tok, true, ts, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-generate: %s\n", err);
        return -1;
    }
    return 0;
}

/* The target over --tensor-parallel-size ranks of --device (one backend
 * unsplit), --batch-invariant on each, int8 with --quant int8. Returns 0,
 * or 1 with the message printed. */
static int open_target(const gen_opts *o, sd_tp_group *g, sd_model **m)
{
    char err[512];
    sd_status st = sd_tp_group_open(o->device, o->tp_size, o->threads, g, err, sizeof err);
    for (int r = 0; st == SD_OK && r < g->n; r++) sd_backend_set_batch_invariant(g->be[r], o->batch_invariant);
    /* split, and under --batch-invariant summed in fixed chunks at any size (model.h) */
    sd_tp_opts tp = {.size = g->n, .bes = g->be, .comms = g->comm, .chunked = o->batch_invariant};
    if (st == SD_OK) st = sd_model_load_tp(o->model_dir, &tp, m, err, sizeof err);
    if (st == SD_OK && o->quant_int8) st = sd_model_quantize_q8(*m, err, sizeof err);
    if (st == SD_OK) return 0;
    fprintf(stderr, "specd-generate: %s\n", err);
    return 1;
}

int main(int argc, char **argv)
{
    gen_opts o;
    if (parse_args(argc, argv, &o) != 0) return 2;
    char err[512];
    int rc = 1;
    int32_t *ids = NULL;
    size_t np = 0;
    gen_result res = {0};
    sd_model *m = NULL;
    sd_tok_stream *ts = NULL;
    sd_engine *eng = NULL;
    sd_proposer *pr = NULL;
    sd_json_vocab *jv = NULL;
    sd_tok *tok = load_tokenizer(o.model_dir, o.prompt != NULL);
    sd_tp_group g = {0};
    if ((o.prompt && !tok) || prompt_ids(&o, tok, &ids, &np) != 0 || open_target(&o, &g, &m) != 0) goto out;
    sd_backend *be = g.be[0];
    const sd_model_config *c = sd_model_cfg(m);
    for (size_t i = 0; i < np; i++)
        if (ids[i] < 0 || ids[i] >= c->vocab_size) {
            fprintf(stderr, "specd-generate: prompt token id %d out of range [0, %d)\n", ids[i], c->vocab_size);
            goto out;
        }
    if ((long)np + 1 > c->max_position) {
        fprintf(stderr, "specd-generate: prompt of %zu tokens exceeds the context of %d\n", np, c->max_position);
        goto out;
    }
    long positions = (long)np + o.max_tokens + 64;
    if (positions > c->max_position + 64) positions = c->max_position + 64;
    if (sd_model_kv_init(m, (int)((positions + 15) / 16), 16, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-generate: %s\n", err);
        goto out;
    }
    if (o.dump_logits) {
        rc = dump_logits(m, ids, np, o.dump_logits) == 0 ? 0 : 1;
        goto out;
    }
    if (make_proposer(&o, be, (int)positions, &pr) != 0) goto out;
    if (make_engine(&o, m, tok, &eng, &jv, &ts) != 0) goto out;
    if (run_engine(eng, pr, &o, ids, np, ts, &res) != 0) goto out;
    if (ts) {
        const char *piece;
        size_t len;
        if (sd_tok_stream_flush(ts, &piece, &len) == SD_OK && len) fwrite(piece, 1, len, stdout);
        printf("\n");
    }
    if (o.json) print_json(&o, tok, np, &res);
    else
        fprintf(stderr, "specd-generate: %zu prompt + %zu generated tokens, %.1f tokens/s\n", np, res.n,
                res.n > 1 && res.decode_s > 0 ? (double)(res.n - 1) / res.decode_s : 0.0);
    rc = 0;
out:
    free(res.tokens);
    free(ids);
    free(o.bias_ids);
    free(o.bias_values);
    free(o.allowed_ids);
    free(o.schema_text);
    free(o.regex_text);
    sd_tok_stream_free(ts);
    sd_engine_free(eng);
    sd_json_vocab_free(jv);
    sd_proposer_free(pr);
    sd_model_free(m);
    sd_tp_group_close(&g);
    sd_tok_free(tok);
    return rc;
}
