/* vf_config.h — specd-verifier's command line, parsed once into a struct.
 *
 * Pure: no I/O besides the error message; the strings in sd_vf_config point
 * into argv (which outlives the process's main loop). Not thread-safe
 * (getopt). */
#ifndef SD_VF_CONFIG_H
#define SD_VF_CONFIG_H

#include <stdbool.h>
#include <stdio.h>

#include "log.h"
#include "status.h"

#define SD_VF_BLOCK_SIZE 16  /* KV block size (positions) */
#define SD_VF_QUEUE_MAX 1024 /* submitted requests waiting for admission */
/* Default --gpu-memory-fraction: vLLM's default gpu_memory_utilization. */
#define SD_VF_GPU_MEM_FRACTION 0.9
/* Default --spec-max-draft: the most drafts adaptive speculation considers
 * per request and step (it chooses 0..N from measured cost and acceptance). */
#define SD_VF_SPEC_MAX_DRAFT_DEFAULT 12

/* --spec-pipeline: pipelined speculation always, never, or unless the
 * drafter runs on the verifier's own CPU cores (same host, both on the CPU,
 * more threads than cores): then each would slow the other down and the
 * serial protocol, which lets them take turns, is faster. */
enum { SD_VF_PIPE_OFF = 0, SD_VF_PIPE_ON = 1, SD_VF_PIPE_AUTO = 2 };

typedef struct sd_vf_config {
    const char *model_dir;      /* --model DIR (required) */
    const char *listen;         /* --listen: ROUTER bind endpoint */
    const char *drafter;        /* --drafter: DEALER connect endpoint, NULL = none */
    bool ngram;                 /* --ngram: drafts from the verifier's own n-gram lookup, no drafter */
    const char *draft_model;    /* --draft-model DIR: drafts from a draft model in this process, on its
                                   * backend (device, threads), taking turns with the target; no drafter */
    int draft_quant;            /* --draft-quant auto|int8|none: its weights (SD_DRAFT_QUANT_*, default auto) */
    double draft_p_min;         /* --draft-p-min P: it stops drafting after a token below P (draft.h) */
    const char *curve_keys;     /* --curve-keys DIR: CURVE on both sockets (proto/curve.h), NULL = plain */
    const char *device;         /* --device: "cpu", "cuda" or "cuda:N" (backend_open.h) */
    int num_draft;              /* --num-draft K, 0..SD_MAX_DRAFT: drafts per step without --spec-adaptive */
    bool spec_adaptive;         /* --spec-adaptive: drafts chosen per request and step (adapt.h) */
    int spec_max_draft;         /* --spec-max-draft N: the most the adaptive choice considers */
    int spec_max_batch;         /* --spec-max-batch N: no drafts in a step of more active requests (0 = no limit) */
    int spec_max_batch_sampled; /* --spec-max-batch-sampled N: the same for requests with temperature > 0 */
    int threads;                /* --threads N, 0 = all cores */
    int tp_size;                /* --tensor-parallel-size N (-tp): ranks the target is split over */
    int max_batch;              /* --max-batch N: active requests */
    int kv_blocks;              /* --kv-blocks N, 0 = automatic (device memory, else sd_vf_default_kv_blocks) */
    int kv_dtype;               /* --kv-dtype auto|f32|bf16: sd_kv_dtype */
    int max_model_len;          /* --max-model-len N: positions per sequence (0 = the model's) */
    double gpu_mem_fraction;    /* --gpu-memory-fraction F: of a device's memory, for this process (mem_plan.h) */
    int prefill_chunk;          /* --prefill-chunk N */
    int prefill_budget;         /* --prefill-budget N: prompt tokens per step over all requests */
    bool quant_int8;            /* --quant int8: the model's weights int8 (sd_model_quantize_q8) */
    bool random_weights;        /* --random-weights: random weights of --model's config.json (benchmarks) */
    bool batch_invariant;       /* --batch-invariant: bit-exact greedy speculation on a GPU too */
    bool no_prefix_cache;       /* --no-prefix-cache: no prefix sharing between requests (engine.h) */
    int draft_timeout_ms;       /* --draft-timeout-ms N (serial mode) */
    int spec_pipeline;          /* --spec-pipeline: SD_VF_PIPE_* (default auto) */
    bool spec_fallback;         /* --spec-fallback ngram|missing|off: a request without the drafter's drafts
                                   * when its step runs verifies n-gram lookup drafts instead (default ngram) */
    bool spec_lookup_first;     /* ... and (ngram) a serial step verifies the lookup's drafts without asking the
                                   * drafter where they are expected to pay more (adapt.h) */
    sd_log_level log_level;     /* --log-level */
    bool help;                  /* --help was given */
} sd_vf_config;

/* Parses argv into *cfg (defaults first). Returns SD_OK; SD_ERR_ARG with a
 * message for an unknown option, a bad number or a missing --model;
 * SD_ERR_UNSUPPORTED for a --device that is none of cpu, cuda, cuda:N
 * (whether this build has CUDA is checked when the backend opens). With
 * --help, SD_OK and cfg->help set (--model is then not required). Resets
 * getopt, so it may be called more than once per process (tests). */
sd_status sd_vf_config_parse(int argc, char **argv, sd_vf_config *cfg, char *err, size_t errlen);

/* The usage lines, for errors. */
const char *sd_vf_usage(void);
/* --help: the usage, then every flag with its default (flags.h). */
void sd_vf_help(FILE *f);

/* Default KV pool size in blocks of SD_VF_BLOCK_SIZE positions: enough for
 * max_batch requests of 1024 positions, and at least one full context
 * (max_position / 16 + 8). */
int sd_vf_default_kv_blocks(int max_batch, int max_position);

#endif
