/* model_config.h — a Hugging Face config.json parsed into one struct.
 *
 * Supports the Llama, Qwen2 and Qwen3 families (LlamaForCausalLM,
 * Qwen2ForCausalLM, Qwen3ForCausalLM): GQA, head_dim, q/k/v bias (Qwen2),
 * q/k RMSNorm (Qwen3), tied/untied embeddings, rope theta and llama3 rope
 * scaling written the older way (rope_theta / rope_scaling) or the newer way
 * (rope_parameters). Anything else (another architecture, sliding window,
 * MoE, an unknown rope type) is refused with a message naming it. */
#ifndef SD_MODEL_CONFIG_H
#define SD_MODEL_CONFIG_H

#include <stdbool.h>
#include <stdint.h>

#include "status.h"

typedef enum {
    SD_ARCH_LLAMA = 0,
    SD_ARCH_QWEN2 = 1,
    SD_ARCH_QWEN3 = 2,
} sd_arch;

typedef enum {
    SD_ROPE_DEFAULT = 0,
    SD_ROPE_LLAMA3 = 1,
} sd_rope_type;

#define SD_MAX_EOS 8

typedef struct sd_model_config {
    sd_arch arch;
    char model_type[32]; /* "llama", "qwen2", "qwen3" */
    int vocab_size;
    int hidden_size;       /* C */
    int intermediate_size; /* F (MLP) */
    int n_layers;
    int n_heads;      /* query heads */
    int n_kv_heads;   /* key/value heads (GQA) */
    int head_dim;     /* hidden_size / n_heads when absent */
    int max_position; /* max_position_embeddings */
    float rms_eps;
    bool tie_embeddings; /* absent: family default (qwen: per config; llama: false) */
    bool qkv_bias;       /* qwen2: true; llama: attention_bias */
    bool o_bias;         /* llama attention_bias also biases o_proj */
    bool mlp_bias;       /* llama mlp_bias */
    bool qk_norm;        /* qwen3 */
    /* rope */
    sd_rope_type rope_type;
    double rope_theta;
    double rope_factor;           /* llama3 */
    double rope_low_freq_factor;  /* llama3 */
    double rope_high_freq_factor; /* llama3 */
    int rope_orig_max_position;   /* llama3 original_max_position_embeddings */
    /* special tokens from config.json (generation_config.json overrides eos
     * when loaded by sd_config_load_dir); -1 when absent */
    int bos_token_id;
    int eos_token_ids[SD_MAX_EOS];
    int n_eos;
    char torch_dtype[16]; /* "float32", "bfloat16", "float16" or "" */
} sd_model_config;

/* Parses config.json text (NUL-terminated) into *cfg.
 * Returns SD_OK, SD_ERR_FORMAT (bad JSON, missing/invalid field) or
 * SD_ERR_UNSUPPORTED (architecture / feature we refuse), with a message in err
 * naming the field or feature. */
sd_status sd_config_parse(const char *json_text, sd_model_config *cfg, char *err, size_t errlen);

/* Reads a config.json file (any name): sd_config_parse of its text, plus
 * SD_ERR_IO when it cannot be read. */
sd_status sd_config_load_file(const char *path, sd_model_config *cfg, char *err, size_t errlen);

/* Reads DIR/config.json, then DIR/generation_config.json if present (its
 * eos_token_id / bos_token_id take precedence). Same errors as sd_config_parse,
 * plus SD_ERR_IO when config.json cannot be read. */
sd_status sd_config_load_dir(const char *dir, sd_model_config *cfg, char *err, size_t errlen);

/* True when id is one of cfg's EOS ids. */
bool sd_config_is_eos(const sd_model_config *cfg, int id);

#endif
