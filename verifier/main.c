/* main.c — specd-verifier: options, model + KV pool + engine set-up, signal
 * handling, then the server loop (vf_server.c) on this thread.
 *
 * Exit status: 0 after SIGINT / SIGTERM, 2 for bad options (a --device
 * that is none of cpu, cuda, cuda:N included), 1 when the backend (e.g.
 * cuda:N in a build without CUDA), the model, the KV pool or the sockets
 * cannot be set up. */
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <zmq.h>

#include "backend.h"
#include "backend_open.h"
#include "clock.h"
#include "draft.h"
#include "engine.h"
#include "json_mask.h"
#include "log.h"
#include "mem_plan.h"
#include "model.h"
#include "model_config.h"
#include "proposer.h"
#include "vf_config.h"
#include "vf_server.h"

static volatile sig_atomic_t g_stop;

static void on_signal(int sig)
{
    (void)sig;
    g_stop = 1;
}

static void install_signals(void)
{
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal; /* no SA_RESTART: zmq_poll returns EINTR */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    signal(SIGPIPE, SIG_IGN);
}

/* KV blocks: --kv-blocks, else what fits the device's memory under
 * --gpu-memory-fraction, else (host memory) sd_vf_default_kv_blocks.
 * Returns 0 or 1 (message logged). */
static int kv_blocks(const sd_vf_config *cfg, sd_model *m, const size_t *free_at_start, int *blocks)
{
    const sd_model_config *c = sd_model_cfg(m);
    if (cfg->kv_blocks > 0) {
        *blocks = cfg->kv_blocks;
        return 0;
    }
    char err[512], how[512];
    int rows = cfg->prefill_budget + cfg->max_batch * (SD_MAX_DRAFT + 1); /* the largest pass */
    long full = c->max_position / SD_VF_BLOCK_SIZE + 1, least = -1;
    for (int r = 0; r < sd_model_tp_size(m); r++) { /* each rank's device: the pool is what fits on all */
        long n = 0;
        sd_status st = sd_mem_kv_blocks(sd_model_rank(m, r), cfg->gpu_mem_fraction, free_at_start[r], rows, rows,
                                        SD_VF_BLOCK_SIZE, full, INT_MAX / 2, &n, how, sizeof how, err, sizeof err);
        if (st == SD_ERR_UNSUPPORTED) {
            *blocks = sd_vf_default_kv_blocks(cfg->max_batch, c->max_position);
            return 0;
        }
        if (st != SD_OK) {
            SD_ERROR("--gpu-memory-fraction %.2f: %s%s (or lower --max-model-len)", cfg->gpu_mem_fraction, err,
                     sd_model_tp_size(m) > 1 ? " on a rank" : "");
            return 1;
        }
        SD_INFO("device memory%s: %s", sd_model_tp_size(m) > 1 ? (r ? " (a rank)" : " (rank 0)") : "", how);
        if (least < 0 || n < least) least = n;
    }
    *blocks = (int)least;
    return 0;
}

/* --draft-model: the draft model on the target's backend (its weights and
 * KV mirrors counted in --gpu-memory-fraction: loaded first, its pool capped
 * to SD_DRAFT_GPU_MEM_FRACTION of the device), warmed up. Returns 0 or 1
 * (message logged). */
static int load_draft(const sd_vf_config *cfg, sd_backend *be, size_t free_at_start, sd_proposer **p)
{
    char err[512];
    sd_model_config dc, tc;
    if (sd_draft_check_tokenizer(cfg->model_dir, cfg->draft_model, err, sizeof err) != SD_OK ||
        sd_config_load_dir(cfg->draft_model, &dc, err, sizeof err) != SD_OK ||
        sd_config_load_dir(cfg->model_dir, &tc, err, sizeof err) != SD_OK) {
        SD_ERROR("--draft-model %s: %s", cfg->draft_model, err);
        return 1;
    }
    sd_draft_opts o = sd_draft_opts_default();
    o.be = be;
    o.mem_free_at_start = free_at_start;
    o.mem_fraction = SD_DRAFT_GPU_MEM_FRACTION;
    o.max_seqs = cfg->max_batch;
    int ctx = cfg->max_model_len > 0 ? cfg->max_model_len : tc.max_position;
    o.max_context = ctx < dc.max_position ? ctx : dc.max_position;
    o.vocab_limit = tc.vocab_size < dc.vocab_size ? tc.vocab_size : 0;
    o.quant = cfg->draft_quant;
    o.p_min = (float)cfg->draft_p_min;
    o.kv_dtype = cfg->kv_dtype;
    o.random_weights = cfg->random_weights;
    o.no_prefix_cache = cfg->no_prefix_cache;
    double t0 = sd_now_ms();
    int passes = 0;
    if (sd_draft_new(cfg->draft_model, &o, p, err, sizeof err) != SD_OK ||
        sd_draft_warm_up(*p, &passes, err, sizeof err) != SD_OK) {
        SD_ERROR("--draft-model %s: %s", cfg->draft_model, err);
        return 1;
    }
    const sd_model *m = sd_draft_model(*p);
    const sd_kv_pool *pool = sd_model_kv_pool(m);
    SD_INFO("draft model %s in this process (weights %s; %d KV mirror blocks of %d; warm-up %d passes, %.0f ms)",
            cfg->draft_model, cfg->draft_quant == SD_DRAFT_QUANT_NONE || !be->ops->quantize_q8 ? "as stored" : "int8",
            sd_kv_pool_total(pool), sd_kv_pool_block_size(pool), passes, sd_now_ms() - t0);
    return 0;
}

/* Loads the model and sizes its KV pool. Returns 0 or 1 (message logged). */
static int load_model(const sd_vf_config *cfg, sd_tp_group *g, const size_t *free_at_start, sd_model **m)
{
    char err[512], path[4096];
    snprintf(path, sizeof path, "%s/config.json", cfg->model_dir);
    /* split over the ranks, and under --batch-invariant summed in fixed chunks at any size (model.h) */
    sd_tp_opts tp = {.size = g->n, .bes = g->be, .comms = g->comm, .chunked = cfg->batch_invariant};
    sd_status st = cfg->random_weights ? sd_model_random_tp(path, 1, &tp, m, err, sizeof err)
                                       : sd_model_load_tp(cfg->model_dir, &tp, m, err, sizeof err);
    if (st != SD_OK) {
        SD_ERROR("cannot load %s: %s", cfg->model_dir, err);
        return 1;
    }
    if (cfg->random_weights)
        SD_WARN("--random-weights: random weights of %s's shapes: for benchmarks, the tokens mean nothing", path);
    if (cfg->quant_int8) {
        if (sd_model_quantize_q8(*m, err, sizeof err) != SD_OK) {
            SD_ERROR("--quant int8: %s", err);
            return 1;
        }
        SD_INFO("--quant int8: matmul weights and the LM head are int8 (outputs are the quantised model's)");
    }
    if (cfg->max_model_len > 0 && sd_model_cap_context(*m, cfg->max_model_len, err, sizeof err) != SD_OK) {
        SD_ERROR("--max-model-len: %s", err);
        return 1;
    }
    const sd_model_config *c = sd_model_cfg(*m);
    sd_model_set_kv_dtype(*m, (sd_kv_dtype)cfg->kv_dtype);
    int blocks;
    if (kv_blocks(cfg, *m, free_at_start, &blocks) != 0) return 1;
    if (sd_model_kv_init(*m, blocks, SD_VF_BLOCK_SIZE, err, sizeof err) != SD_OK) {
        SD_ERROR("cannot allocate %d KV blocks: %s", blocks, err);
        return 1;
    }
    SD_INFO("model %s: vocab %d, context %d, %d KV blocks of %d, %s (%.1f MiB)", cfg->model_dir, c->vocab_size,
            c->max_position, blocks, SD_VF_BLOCK_SIZE, sd_dtype_name(sd_model_kv_dtype(*m)),
            (double)blocks * SD_VF_BLOCK_SIZE * (double)sd_model_kv_bytes_per_position(*m) / (1024.0 * 1024.0));
    return 0;
}

/* The ranks of a split target, in the log. */
static void log_ranks(const sd_tp_group *g)
{
    if (g->n < 2) return;
    char line[512];
    int n = 0;
    for (int r = 0; r < g->n; r++) {
        int threads = sd_backend_cpu_threads(g->be[r]);
        n += snprintf(line + n, sizeof line - (size_t)n, "%s rank %d on %s", r ? "," : "", r, g->device[r]);
        if (threads > 0 && n < (int)sizeof line)
            n += snprintf(line + n, sizeof line - (size_t)n, " (%d threads)", threads);
        if (n >= (int)sizeof line) break;
    }
    SD_INFO("tensor parallel over %d ranks, exchanging through %s:%s", g->n, g->comm_name, line);
}

int main(int argc, char **argv)
{
    sd_vf_config cfg;
    char err[512];
    sd_status st = sd_vf_config_parse(argc, argv, &cfg, err, sizeof err);
    if (st == SD_OK && cfg.help) {
        sd_vf_help(stdout);
        return 0;
    }
    if (st != SD_OK) {
        fprintf(stderr, "specd-verifier: %s\n%s(specd-verifier --help lists every flag)\n", err, sd_vf_usage());
        return 2;
    }
    sd_log_init("verifier", cfg.log_level);
    install_signals();
    int rc = 1;
    sd_model *m = NULL;
    sd_engine *e = NULL;
    sd_vf_server *srv = NULL;
    sd_proposer *draft = NULL; /* --draft-model's, until the server takes it */
    sd_json_vocab *jv = NULL;  /* the token table of JSON output (the engine borrows it) */
    void *zctx = NULL;
    sd_tp_group g = {0};
    if (sd_tp_group_open(cfg.device, cfg.tp_size, cfg.threads, &g, err, sizeof err) != SD_OK) {
        SD_ERROR("%s", err);
        goto out;
    }
    sd_backend *be = g.be[0];
    bool invariant = true;
    for (int r = 0; r < g.n; r++) invariant &= sd_backend_set_batch_invariant(g.be[r], cfg.batch_invariant);
    if (invariant)
        SD_INFO("batch-invariant: a sequence's results do not depend on its batch (greedy speculation bit-exact)");
    else
        SD_WARN("not batch-invariant (%s without --batch-invariant): greedy speculative output may differ from plain "
                "decoding where two tokens' logits nearly tie",
                cfg.device);
    log_ranks(&g);
    size_t free_at_start[SD_COMM_MAX_RANKS];
    for (int r = 0; r < g.n; r++) free_at_start[r] = sd_mem_free_now(g.be[r]);
    if (cfg.draft_model && load_draft(&cfg, be, free_at_start[0], &draft) != 0) goto out;
    if (cfg.draft_model && be->ops->mem_info) { /* the process's share: the draft model's comes out of it */
        double f = cfg.gpu_mem_fraction;
        cfg.gpu_mem_fraction = f > 2 * SD_DRAFT_GPU_MEM_FRACTION ? f - SD_DRAFT_GPU_MEM_FRACTION : f / 2;
        SD_INFO("--gpu-memory-fraction %.2f: %.2f for the target, the rest for the draft model", f,
                cfg.gpu_mem_fraction);
    }
    if (load_model(&cfg, &g, free_at_start, &m) != 0) goto out;
    sd_engine_opts eo = {.prefill_chunk = cfg.prefill_chunk,
                         .prefill_budget = cfg.prefill_budget,
                         .no_prefix_sharing = cfg.no_prefix_cache};
    if (sd_engine_new(m, &eo, &e, err, sizeof err) != SD_OK) {
        SD_ERROR("%s", err);
        goto out;
    }
    if (sd_json_vocab_load(cfg.model_dir, sd_model_cfg(m), &jv, err, sizeof err) == SD_OK)
        sd_engine_set_json_vocab(e, jv);
    else SD_WARN("JSON output (response_format json_object) unavailable: %s", err);
    if (!(zctx = zmq_ctx_new())) {
        SD_ERROR("out of memory");
        goto out;
    }
    if (sd_vf_server_new(&cfg, e, zctx, &srv, err, sizeof err) != SD_OK) {
        SD_ERROR("%s", err);
        goto out;
    }
    if (draft) sd_vf_server_use_proposer(srv, draft);
    draft = NULL;
    rc = sd_vf_server_run(srv, &g_stop) == SD_OK ? 0 : 1;
out:
    sd_vf_server_free(srv);
    sd_proposer_free(draft);
    if (zctx) zmq_ctx_term(zctx);
    sd_engine_free(e);
    sd_json_vocab_free(jv);
    sd_model_free(m);
    sd_tp_group_close(&g);
    return rc;
}
