/* model_config.c — Hugging Face config.json → sd_model_config (see model_config.h).
 *
 * Parsing is done with jansson. The parser is strict about what it accepts:
 * every field it reads must have the right JSON type, sizes must be positive
 * and consistent, and any feature that would change the maths of the forward
 * pass without us implementing it (another architecture, sliding window,
 * MoE, a rope type other than default/llama3, an activation other than SiLU,
 * quantisation) is refused with SD_ERR_UNSUPPORTED naming it. Defaults for
 * absent fields follow transformers' LlamaConfig / Qwen2Config / Qwen3Config.
 *
 * No state; all functions are thread-safe. */
#include "model_config.h"

#include <float.h>
#include <jansson.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "json_num.h"
#include "strbuf.h"

#define CFG_INT_MAX (1 << 30) /* generous cap that keeps products in int64 */

typedef struct {
    const char *model_type;
    const char *cls;
    sd_arch arch;
    int default_max_pos; /* transformers' default max_position_embeddings */
} family;

static const family k_families[] = {
    {"llama", "LlamaForCausalLM", SD_ARCH_LLAMA, 2048},
    {"qwen2", "Qwen2ForCausalLM", SD_ARCH_QWEN2, 32768},
    {"qwen3", "Qwen3ForCausalLM", SD_ARCH_QWEN3, 32768},
};
#define N_FAMILIES (sizeof k_families / sizeof k_families[0])

static const family *family_by_type(const char *mt)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(k_families[i].model_type, mt) == 0) return &k_families[i];
    return NULL;
}

static const family *family_by_class(const char *cls)
{
    for (size_t i = 0; i < N_FAMILIES; i++)
        if (strcmp(k_families[i].cls, cls) == 0) return &k_families[i];
    return NULL;
}

/* --- typed field readers ---------------------------------------------------- */

/* Present and not JSON null. */
static json_t *field(json_t *obj, const char *key)
{
    json_t *v = json_object_get(obj, key);
    return (v && !json_is_null(v)) ? v : NULL;
}

/* Reads an integer field (an integral real such as 4096.0 is accepted).
 * Absent/null: SD_ERR_FORMAT when required, else *out = dflt. The value must
 * lie in [lo, hi]. */
static sd_status get_int(json_t *obj, const char *key, bool required, int dflt, long long lo, long long hi, int *out,
                         char *err, size_t errlen)
{
    json_t *v = field(obj, key);
    if (!v) {
        if (required) return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: missing required field \"%s\"", key);
        *out = dflt;
        return SD_OK;
    }
    long long x;
    if (!sd_json_whole(v, &x))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: field \"%s\" must be an integer", key);
    if (x < lo || x > hi)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: field \"%s\" = %lld out of range [%lld, %lld]", key, x,
                         lo, hi);
    *out = (int)x;
    return SD_OK;
}

/* Reads a finite number field; absent/null → dflt (or error when required). */
static sd_status get_num(json_t *obj, const char *where, const char *key, bool required, double dflt, double *out,
                         char *err, size_t errlen)
{
    json_t *v = field(obj, key);
    if (!v) {
        if (required)
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: missing required field \"%s%s\"", where, key);
        *out = dflt;
        return SD_OK;
    }
    if (!json_is_number(v) || !isfinite(json_number_value(v)))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: field \"%s%s\" must be a finite number", where, key);
    *out = json_number_value(v);
    return SD_OK;
}

/* Reads a boolean field; absent/null → dflt. */
static sd_status get_bool(json_t *obj, const char *key, bool dflt, bool *out, char *err, size_t errlen)
{
    json_t *v = field(obj, key);
    if (!v) {
        *out = dflt;
        return SD_OK;
    }
    if (!json_is_boolean(v))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: field \"%s\" must be true or false", key);
    *out = json_is_true(v);
    return SD_OK;
}

/* Reads a token id field that is an int, a list of ints, or null.
 * Writes at most max ids into ids and their count into *n. */
static sd_status get_token_ids(json_t *obj, const char *file, const char *key, int *ids, int max, int *n, char *err,
                               size_t errlen)
{
    json_t *v = field(obj, key);
    *n = 0;
    if (!v) return SD_OK;
    size_t count = json_is_array(v) ? json_array_size(v) : 1;
    if (!json_is_array(v) && !json_is_integer(v))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: \"%s\" must be an integer or a list of integers", file, key);
    if (count > (size_t)max)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "%s: \"%s\" lists %zu ids (at most %d supported)", file, key,
                         count, max);
    for (size_t i = 0; i < count; i++) {
        json_t *e = json_is_array(v) ? json_array_get(v, i) : v;
        if (!json_is_integer(e) || json_integer_value(e) < 0 || json_integer_value(e) > INT_MAX)
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: \"%s\" must hold non-negative integer ids", file, key);
        ids[(*n)++] = (int)json_integer_value(e);
    }
    return SD_OK;
}

/* --- architecture and refusals ------------------------------------------------ */

static sd_status parse_arch(json_t *root, const family **fam, char *err, size_t errlen)
{
    json_t *mt = field(root, "model_type");
    json_t *archs = field(root, "architectures");
    const family *by_cls = NULL, *by_type = NULL;
    if (archs) {
        if (!json_is_array(archs) || json_array_size(archs) == 0)
            return sd_seterr(err, errlen, SD_ERR_FORMAT,
                             "config: \"architectures\" must be a non-empty list of strings");
        for (size_t i = 0; i < json_array_size(archs); i++) {
            json_t *a = json_array_get(archs, i);
            if (!json_is_string(a))
                return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"architectures\" must hold strings");
            const family *f = family_by_class(json_string_value(a));
            if (!f)
                return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                                 "config: unsupported architecture \"%s\" (supported: LlamaForCausalLM, "
                                 "Qwen2ForCausalLM, Qwen3ForCausalLM)",
                                 json_string_value(a));
            if (by_cls && f != by_cls)
                return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"architectures\" names two families");
            by_cls = f;
        }
    }
    if (mt) {
        if (!json_is_string(mt))
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"model_type\" must be a string");
        by_type = family_by_type(json_string_value(mt));
        if (!by_type)
            return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                             "config: unsupported model_type \"%s\" (supported: llama, qwen2, qwen3)",
                             json_string_value(mt));
    }
    if (by_cls && by_type && by_cls != by_type)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: model_type \"%s\" does not match architecture \"%s\"",
                         by_type->model_type, by_cls->cls);
    *fam = by_type ? by_type : by_cls;
    if (!*fam)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: missing both \"model_type\" and \"architectures\"");
    return SD_OK;
}

/* Refuses MoE, quantised checkpoints, non-SiLU activations and partial rope. */
static sd_status check_features(json_t *root, char *err, size_t errlen)
{
    static const char *moe_keys[] = {"num_experts", "num_local_experts", "n_routed_experts", "num_experts_per_tok"};
    for (size_t i = 0; i < sizeof moe_keys / sizeof moe_keys[0]; i++) {
        json_t *v = field(root, moe_keys[i]);
        if (v && (!json_is_number(v) || json_number_value(v) > 0))
            return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                             "config: mixture-of-experts models (\"%s\") are not supported", moe_keys[i]);
    }
    if (field(root, "quantization_config"))
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "config: quantized checkpoints (\"quantization_config\") are not supported");
    json_t *act = field(root, "hidden_act");
    if (act && !json_is_string(act))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"hidden_act\" must be a string");
    if (act && strcmp(json_string_value(act), "silu") != 0)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "config: hidden_act \"%s\" is not supported (only \"silu\")",
                         json_string_value(act));
    double prf = 1.0;
    sd_status st = get_num(root, "", "partial_rotary_factor", false, 1.0, &prf, err, errlen);
    if (st != SD_OK) return st;
    if (prf != 1.0)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "config: partial_rotary_factor %g is not supported (only 1.0)", prf);
    return SD_OK;
}

/* Refuses sliding-window attention in any of its spellings, and checks
 * layer_types (all "full_attention", one per layer). */
static sd_status check_attention_kind(json_t *root, const family *fam, int n_layers, char *err, size_t errlen)
{
    bool use_sw = false;
    sd_status st = get_bool(root, "use_sliding_window", false, &use_sw, err, errlen);
    if (st != SD_OK) return st;
    if (use_sw)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "config: sliding-window attention (\"use_sliding_window\": true) is not supported");
    if (fam->arch == SD_ARCH_LLAMA && field(root, "sliding_window"))
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "config: sliding-window attention (\"sliding_window\") is not supported for llama");
    json_t *lt = field(root, "layer_types");
    if (!lt) return SD_OK;
    if (!json_is_array(lt))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"layer_types\" must be a list of strings");
    for (size_t i = 0; i < json_array_size(lt); i++) {
        json_t *e = json_array_get(lt, i);
        if (!json_is_string(e))
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"layer_types\" must be a list of strings");
        if (strcmp(json_string_value(e), "full_attention") != 0)
            return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                             "config: layer_types[%zu] = \"%s\" is not supported (only \"full_attention\"; "
                             "no sliding window)",
                             i, json_string_value(e));
    }
    if (json_array_size(lt) != (size_t)n_layers)
        return sd_seterr(err, errlen, SD_ERR_FORMAT,
                         "config: \"layer_types\" has %zu entries but num_hidden_layers is %d", json_array_size(lt),
                         n_layers);
    return SD_OK;
}

/* --- rope ------------------------------------------------------------------ */

static sd_status parse_llama3_rope(json_t *p, const char *where, sd_model_config *cfg, char *err, size_t errlen)
{
    sd_status st;
    if ((st = get_num(p, where, "factor", true, 0, &cfg->rope_factor, err, errlen)) != SD_OK) return st;
    if ((st = get_num(p, where, "low_freq_factor", true, 0, &cfg->rope_low_freq_factor, err, errlen)) != SD_OK)
        return st;
    if ((st = get_num(p, where, "high_freq_factor", true, 0, &cfg->rope_high_freq_factor, err, errlen)) != SD_OK)
        return st;
    json_t *om = field(p, "original_max_position_embeddings");
    if (!om)
        return sd_seterr(err, errlen, SD_ERR_FORMAT,
                         "config: missing required field \"%soriginal_max_position_embeddings\"", where);
    if ((st = get_int(p, "original_max_position_embeddings", true, 0, 1, CFG_INT_MAX, &cfg->rope_orig_max_position, err,
                      errlen)) != SD_OK)
        return st;
    if (!(cfg->rope_factor > 0) || !(cfg->rope_low_freq_factor > 0) ||
        !(cfg->rope_high_freq_factor > cfg->rope_low_freq_factor))
        return sd_seterr(err, errlen, SD_ERR_FORMAT,
                         "config: %s llama3 rope needs factor > 0 and high_freq_factor > low_freq_factor > 0 "
                         "(got %g, %g, %g)",
                         where, cfg->rope_factor, cfg->rope_low_freq_factor, cfg->rope_high_freq_factor);
    return SD_OK;
}

/* Reads rope_theta and the rope type from rope_parameters (newer style,
 * possibly keyed by layer type) or rope_theta + rope_scaling (older style). */
static sd_status parse_rope(json_t *root, sd_model_config *cfg, char *err, size_t errlen)
{
    json_t *p = field(root, "rope_parameters");
    const char *where = "rope_parameters.";
    if (!p) {
        p = field(root, "rope_scaling");
        where = "rope_scaling.";
    }
    if (p && !json_is_object(p))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"%.*s\" must be an object or null",
                         (int)strlen(where) - 1, where);
    json_t *full = p ? field(p, "full_attention") : NULL;
    if (full && json_is_object(full)) {
        p = full; /* per-layer-type form: {"full_attention": {...}} */
        where = "rope_parameters.full_attention.";
    }
    sd_status st = get_num(root, "", "rope_theta", false, 10000.0, &cfg->rope_theta, err, errlen);
    if (st == SD_OK && p) st = get_num(p, where, "rope_theta", false, cfg->rope_theta, &cfg->rope_theta, err, errlen);
    if (st != SD_OK) return st;
    if (!(cfg->rope_theta > 0))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: rope_theta must be positive (got %g)", cfg->rope_theta);
    cfg->rope_type = SD_ROPE_DEFAULT;
    cfg->rope_factor = 1.0;
    json_t *t = p ? field(p, "rope_type") : NULL;
    if (p && !t) t = field(p, "type");
    if (!t) return SD_OK;
    if (!json_is_string(t))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"%srope_type\" must be a string", where);
    const char *name = json_string_value(t);
    if (strcmp(name, "default") == 0) return SD_OK;
    if (strcmp(name, "llama3") == 0) {
        cfg->rope_type = SD_ROPE_LLAMA3;
        return parse_llama3_rope(p, where, cfg, err, errlen);
    }
    return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                     "config: rope_type \"%s\" is not supported (only \"default\" and \"llama3\")", name);
}

/* --- sizes ------------------------------------------------------------------ */

static sd_status parse_sizes(json_t *root, const family *fam, sd_model_config *c, char *err, size_t errlen)
{
    sd_status st;
    const int M = CFG_INT_MAX;
    if ((st = get_int(root, "vocab_size", true, 0, 1, M, &c->vocab_size, err, errlen)) ||
        (st = get_int(root, "hidden_size", true, 0, 1, M, &c->hidden_size, err, errlen)) ||
        (st = get_int(root, "intermediate_size", true, 0, 1, M, &c->intermediate_size, err, errlen)) ||
        (st = get_int(root, "num_hidden_layers", true, 0, 1, M, &c->n_layers, err, errlen)) ||
        (st = get_int(root, "num_attention_heads", true, 0, 1, M, &c->n_heads, err, errlen)) ||
        (st = get_int(root, "num_key_value_heads", false, c->n_heads, 1, M, &c->n_kv_heads, err, errlen)) ||
        (st = get_int(root, "head_dim", false, 0, 1, M, &c->head_dim, err, errlen)) ||
        (st = get_int(root, "max_position_embeddings", false, fam->default_max_pos, 1, M, &c->max_position, err,
                      errlen)))
        return st;
    if (c->head_dim == 0) {
        if (c->hidden_size % c->n_heads != 0)
            return sd_seterr(err, errlen, SD_ERR_FORMAT,
                             "config: hidden_size %d is not divisible by num_attention_heads %d (and no head_dim)",
                             c->hidden_size, c->n_heads);
        c->head_dim = c->hidden_size / c->n_heads;
    }
    if (c->head_dim % 2 != 0)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: head_dim %d must be even for rope", c->head_dim);
    if (c->n_kv_heads > c->n_heads || c->n_heads % c->n_kv_heads != 0)
        return sd_seterr(err, errlen, SD_ERR_FORMAT,
                         "config: num_attention_heads %d is not a multiple of num_key_value_heads %d", c->n_heads,
                         c->n_kv_heads);
    double eps = 0;
    if ((st = get_num(root, "", "rms_norm_eps", false, 1e-6, &eps, err, errlen)) != SD_OK) return st;
    c->rms_eps = (float)eps; /* checked as stored: 1e-50 is > 0 as a double but 0 as a float */
    if (!(eps > 0 && eps < 1) || !(c->rms_eps >= FLT_MIN))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: rms_norm_eps %g must be in [%g, 1)", eps,
                         (double)FLT_MIN);
    return SD_OK;
}

/* Bias / norm flags per family (transformers' modeling code):
 * llama: attention_bias → q/k/v/o, mlp_bias → gate/up/down;
 * qwen2: q/k/v always biased, o never; qwen3: attention_bias → q/k/v/o, q/k norm. */
static sd_status parse_flags(json_t *root, const family *fam, sd_model_config *c, char *err, size_t errlen)
{
    sd_status st;
    bool attn_bias = false;
    if ((st = get_bool(root, "tie_word_embeddings", false, &c->tie_embeddings, err, errlen)) != SD_OK) return st;
    if ((st = get_bool(root, "attention_bias", false, &attn_bias, err, errlen)) != SD_OK) return st;
    c->qkv_bias = c->o_bias = c->mlp_bias = c->qk_norm = false;
    switch (fam->arch) {
    case SD_ARCH_LLAMA:
        c->qkv_bias = c->o_bias = attn_bias;
        return get_bool(root, "mlp_bias", false, &c->mlp_bias, err, errlen);
    case SD_ARCH_QWEN2: c->qkv_bias = true; return SD_OK;
    case SD_ARCH_QWEN3:
        c->qkv_bias = c->o_bias = attn_bias;
        c->qk_norm = true;
        return SD_OK;
    }
    return SD_OK;
}

static sd_status parse_tokens(json_t *root, const char *file, sd_model_config *c, char *err, size_t errlen)
{
    int bos[SD_MAX_EOS], n_bos = 0;
    sd_status st = get_token_ids(root, file, "bos_token_id", bos, SD_MAX_EOS, &n_bos, err, errlen);
    if (st != SD_OK) return st;
    c->bos_token_id = n_bos > 0 ? bos[0] : -1;
    return get_token_ids(root, file, "eos_token_id", c->eos_token_ids, SD_MAX_EOS, &c->n_eos, err, errlen);
}

static sd_status parse_dtype(json_t *root, sd_model_config *c, char *err, size_t errlen)
{
    json_t *d = field(root, "torch_dtype");
    if (!d) d = field(root, "dtype");
    c->torch_dtype[0] = '\0';
    if (!d) return SD_OK;
    if (!json_is_string(d) || strlen(json_string_value(d)) >= sizeof c->torch_dtype)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: \"torch_dtype\" must be a short string");
    snprintf(c->torch_dtype, sizeof c->torch_dtype, "%s", json_string_value(d));
    return SD_OK;
}

static sd_status parse_root(json_t *root, sd_model_config *cfg, char *err, size_t errlen)
{
    const family *fam = NULL;
    sd_status st;
    if ((st = parse_arch(root, &fam, err, errlen)) != SD_OK) return st;
    cfg->arch = fam->arch;
    snprintf(cfg->model_type, sizeof cfg->model_type, "%s", fam->model_type);
    if ((st = check_features(root, err, errlen)) != SD_OK) return st;
    if ((st = parse_sizes(root, fam, cfg, err, errlen)) != SD_OK) return st;
    if ((st = check_attention_kind(root, fam, cfg->n_layers, err, errlen)) != SD_OK) return st;
    if ((st = parse_flags(root, fam, cfg, err, errlen)) != SD_OK) return st;
    if ((st = parse_rope(root, cfg, err, errlen)) != SD_OK) return st;
    if ((st = parse_tokens(root, "config", cfg, err, errlen)) != SD_OK) return st;
    return parse_dtype(root, cfg, err, errlen);
}

/* --- public ------------------------------------------------------------------ */

sd_status sd_config_parse(const char *json_text, sd_model_config *cfg, char *err, size_t errlen)
{
    if (!json_text || !cfg) return sd_seterr(err, errlen, SD_ERR_ARG, "config: NULL argument");
    memset(cfg, 0, sizeof *cfg);
    cfg->bos_token_id = -1;
    json_error_t jerr;
    json_t *root = json_loads(json_text, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "config: invalid JSON at line %d column %d: %s", jerr.line,
                         jerr.column, jerr.text);
    sd_status st = json_is_object(root) ? parse_root(root, cfg, err, errlen)
                                        : sd_seterr(err, errlen, SD_ERR_FORMAT, "config: top level is not an object");
    json_decref(root);
    return st;
}

/* Applies generation_config.json's bos/eos (present, non-null) over cfg's. */
static sd_status apply_generation_config(const char *path, sd_model_config *cfg, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: invalid JSON at line %d column %d: %s", path, jerr.line,
                         jerr.column, jerr.text);
    sd_status st = SD_OK;
    int ids[SD_MAX_EOS], n = 0;
    if (!json_is_object(root)) {
        st = sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: top level is not an object", path);
    } else {
        st = get_token_ids(root, path, "bos_token_id", ids, SD_MAX_EOS, &n, err, errlen);
        if (st == SD_OK && n > 0) cfg->bos_token_id = ids[0];
        if (st == SD_OK) st = get_token_ids(root, path, "eos_token_id", ids, SD_MAX_EOS, &n, err, errlen);
        if (st == SD_OK && n > 0) {
            memcpy(cfg->eos_token_ids, ids, sizeof ids[0] * (size_t)n);
            cfg->n_eos = n;
        }
    }
    json_decref(root);
    return st;
}

sd_status sd_config_load_file(const char *path, sd_model_config *cfg, char *err, size_t errlen)
{
    if (!path || !cfg) return sd_seterr(err, errlen, SD_ERR_ARG, "config: NULL argument");
    char *text;
    size_t len;
    char msg[512] = "";
    sd_status st = sd_read_file(path, (size_t)16 << 20, &text, &len, msg, sizeof msg);
    if (st != SD_OK) return sd_seterr(err, errlen, SD_ERR_IO, "config: %s", msg);
    st = sd_config_parse(text, cfg, msg, sizeof msg);
    free(text);
    if (st != SD_OK)
        return sd_seterr(err, errlen, st, "%s: %s", path, strncmp(msg, "config: ", 8) == 0 ? msg + 8 : msg);
    return SD_OK;
}

sd_status sd_config_load_dir(const char *dir, sd_model_config *cfg, char *err, size_t errlen)
{
    if (!dir || !cfg) return sd_seterr(err, errlen, SD_ERR_ARG, "config: NULL argument");
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    sd_status st = sd_config_load_file(path, cfg, err, errlen);
    if (st != SD_OK) return st;
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    if (access(path, F_OK) != 0) return SD_OK;
    return apply_generation_config(path, cfg, err, errlen);
}

bool sd_config_is_eos(const sd_model_config *cfg, int id)
{
    if (!cfg) return false;
    for (int i = 0; i < cfg->n_eos; i++)
        if (cfg->eos_token_ids[i] == id) return true;
    return false;
}
