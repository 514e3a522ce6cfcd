/* bench_spec.c — specd-bench-spec: speculative vs plain decoding, one run.
 *
 *   specd-bench-spec [--target DIR] [--draft DIR] [--prompts N] [--tokens N]
 *                    [--num-draft K] [--threads N] [--rounds N] [--draft-p-min P]
 *
 * Generates from the same code prompts, in the same process, plainly and
 * speculatively (draft model, the same drafter with int8 weights, then
 * n-gram) — each prompt in every mode back to back, for --rounds rounds —
 * at temperature 0 and 0.8
 * (top-p 0.95; rejection verification), and prints tokens/s of each, the
 * speedup over plain decoding at the same temperature, and the mean committed
 * tokens per verify step. EOS is not a stop (every run generates the same
 * number of tokens). */
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend.h"
#include "clock.h"
#include "code_prompts.h"
#include "draft.h"
#include "engine.h"
#include "ngram.h"
#include "opt.h"
#include "tokenizer.h"

typedef struct bench_opts {
    const char *target, *draft;
    int prompts, tokens, num_draft, threads, rounds;
    float p_min;
} bench_opts;

typedef struct run_result {
    double seconds;
    long tokens;
    sd_spec_stats stats;
} run_result;

/* Generates o->tokens tokens from prompt i; adds to *res. */
static int run_one(sd_engine *e, sd_proposer *pr, const bench_opts *o, int i, int32_t **ids, const int *n_ids,
                   float temp, run_result *res)
{
    char err[256];
    sd_req_params p = sd_req_params_default();
    p.max_tokens = o->tokens;
    p.ignore_eos = true;
    p.sampling.temperature = temp;
    p.sampling.top_p = temp > 0 ? 0.95f : 1.0f;
    p.sampling.seed = (uint64_t)i + 1;
    p.speculate = pr != NULL;
    p.num_draft = o->num_draft;
    sd_req *r;
    if (sd_req_new(e, (uint64_t)i + 1, ids[i], n_ids[i], &p, &r, err, sizeof err) != SD_OK) goto fail;
    double t0 = sd_now_s();
    sd_status st = sd_engine_run(e, pr, &r, 1, NULL, NULL, err, sizeof err);
    res->seconds += sd_now_s() - t0;
    res->tokens += sd_req_n_output(r);
    res->stats.steps += r->stats.steps;
    res->stats.accepted_tokens += r->stats.accepted_tokens;
    res->stats.draft_tokens += r->stats.draft_tokens;
    sd_req_free(e, r);
    if (st != SD_OK) goto fail;
    return 0;
fail:
    fprintf(stderr, "specd-bench-spec: %s\n", err);
    return -1;
}

static void print_row(const char *name, float temp, const run_result *r, const run_result *plain)
{
    double tps = r->tokens / r->seconds;
    double per_step = r->stats.steps ? (double)(r->stats.accepted_tokens + r->stats.steps) / r->stats.steps : 1.0;
    printf("%-18s %5.1f %8ld %9.2f %9.1f %8.2fx %12.2f\n", name, temp, r->tokens, r->seconds, tps,
           tps / (plain->tokens / plain->seconds), per_step);
}

static int parse(int argc, char **argv, bench_opts *o)
{
    static const struct option lo[] = {{"target", 1, 0, 't'}, {"draft", 1, 0, 'd'},       {"prompts", 1, 0, 'p'},
                                       {"tokens", 1, 0, 'n'}, {"num-draft", 1, 0, 'k'},   {"threads", 1, 0, 'j'},
                                       {"rounds", 1, 0, 'r'}, {"draft-p-min", 1, 0, 'P'}, {0, 0, 0, 0}};
    *o = (bench_opts){"models/tinycode-16m", "models/tinycode-3m", 10, 128, SD_NUM_DRAFT_DEFAULT, 0, 3,
                      SD_DRAFT_P_MIN_DEFAULT};
    char err[256];
    sd_status st = SD_OK;
    int c;
    while (st == SD_OK && (c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        switch (c) {
        case 't': o->target = optarg; break;
        case 'd': o->draft = optarg; break;
        case 'p': st = sd_opt_int(optarg, "--prompts", 1, SD_N_CODE_PROMPTS, &o->prompts, err, sizeof err); break;
        case 'n': st = sd_opt_int(optarg, "--tokens", 1, 1 << 20, &o->tokens, err, sizeof err); break;
        case 'k': st = sd_opt_int(optarg, "--num-draft", 1, SD_MAX_DRAFT, &o->num_draft, err, sizeof err); break;
        case 'j': st = sd_opt_int(optarg, "--threads", 0, 1024, &o->threads, err, sizeof err); break;
        case 'r': st = sd_opt_int(optarg, "--rounds", 1, 1000, &o->rounds, err, sizeof err); break;
        case 'P': st = sd_opt_float(optarg, "--draft-p-min", 0, 1, &o->p_min, err, sizeof err); break;
        default:
            fprintf(stderr, "usage: specd-bench-spec [--target DIR] [--draft DIR] [--prompts N] [--tokens N] "
                            "[--num-draft K] [--threads N] [--rounds N] [--draft-p-min P]\n");
            return -1;
        }
    }
    if (st != SD_OK) {
        fprintf(stderr, "specd-bench-spec: %s\n", err);
        return -1;
    }
    return 0;
}

/* Encodes the prompts with the target's tokenizer. */
static int encode_prompts(const bench_opts *o, int32_t **ids, int *n_ids)
{
    char path[4096], err[512];
    snprintf(path, sizeof path, "%s/tokenizer.json", o->target);
    sd_tok *tok = NULL;
    if (sd_tok_load(path, &tok, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-spec: %s\n", err);
        return -1;
    }
    for (int i = 0; i < o->prompts; i++) {
        size_t n;
        const char *p = SD_CODE_PROMPTS[i];
        if (sd_tok_encode(tok, p, strlen(p), true, &ids[i], &n, err, sizeof err) != SD_OK) {
            sd_tok_free(tok);
            return -1;
        }
        n_ids[i] = (int)n;
    }
    sd_tok_free(tok);
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o;
    if (parse(argc, argv, &o) != 0) return 2;
    char err[512];
    int32_t *ids[SD_N_CODE_PROMPTS] = {0};
    int n_ids[SD_N_CODE_PROMPTS];
    sd_backend *be = NULL;
    sd_model *m = NULL;
    sd_proposer *draft = NULL, *draft_q8 = NULL, *ngram = NULL;
    sd_engine *e = NULL;
    int rc = 1;
    sd_draft_opts dopt = {.be = be,
                          .max_seqs = 1,
                          .max_context = 512 + o.tokens,
                          .block_size = 16,
                          .quant = SD_DRAFT_QUANT_NONE,
                          .p_min = o.p_min};
    sd_draft_opts qopt = dopt;
    qopt.quant = SD_DRAFT_QUANT_INT8;
    if (sd_backend_cpu_new(o.threads, &be, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-spec: %s\n", err);
        goto out;
    }
    if (encode_prompts(&o, ids, n_ids) != 0) goto out;
    if (sd_model_load(o.target, be, &m, err, sizeof err) != SD_OK ||
        sd_model_kv_init(m, (512 + o.tokens) / 16 + 4, 16, err, sizeof err) != SD_OK ||
        sd_draft_check_tokenizer(o.target, o.draft, err, sizeof err) != SD_OK ||
        sd_draft_new(o.draft, &dopt, &draft, err, sizeof err) != SD_OK ||
        sd_draft_new(o.draft, &qopt, &draft_q8, err, sizeof err) != SD_OK ||
        sd_ngram_new(1, 4, &ngram, err, sizeof err) != SD_OK || sd_engine_new(m, NULL, &e, err, sizeof err) != SD_OK) {
        fprintf(stderr, "specd-bench-spec: %s\n", err);
        goto out;
    }
    printf("target %s, drafter %s, %d prompts x %d tokens x %d rounds, K = %d, p_min = %g, %d threads\n", o.target,
           o.draft, o.prompts, o.tokens, o.rounds, o.num_draft, (double)o.p_min, sd_backend_cpu_threads(be));
    printf("%-18s %5s %8s %9s %9s %9s %12s\n", "mode", "temp", "tokens", "seconds", "tok/s", "speedup", "tokens/step");
    /* warm-up: touches every weight page and the KV pool */
    run_result warm = {0};
    sd_proposer *const modes[4] = {NULL, draft, draft_q8, ngram};
    for (int k = 0; k < 4; k++)
        if (run_one(e, modes[k], &o, 0, ids, n_ids, 0.0f, &warm)) goto out;
    /* every prompt runs in every mode back to back, so a slow spell of the
     * (shared, noisy) machine hits all modes alike; rows sum the rounds */
    const float temps[2] = {0.0f, 0.8f};
    const char *const names[4] = {"plain", "draft model", "draft model int8", "n-gram"};
    for (int t = 0; t < 2; t++) {
        run_result tot[4] = {0};
        for (int r = 0; r < o.rounds; r++)
            for (int i = 0; i < o.prompts; i++)
                for (int k = 0; k < 4; k++)
                    if (run_one(e, modes[k], &o, i, ids, n_ids, temps[t], &tot[k])) goto out;
        for (int k = 0; k < 4; k++) print_row(names[k], temps[t], &tot[k], &tot[0]);
    }
    rc = 0;
out:
    for (int i = 0; i < SD_N_CODE_PROMPTS; i++) free(ids[i]);
    sd_engine_free(e);
    sd_proposer_free(draft);
    sd_proposer_free(draft_q8);
    sd_proposer_free(ngram);
    sd_model_free(m);
    sd_backend_free(be);
    return rc;
}
