/* test_model_config.c — config.json parsing: the fixture models, the demo
 * model and published configs (values checked against the files themselves,
 * tests/fixtures/configs/ and models/), plus every refusal and malformed case. */
#include "model_config.h"

#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* --- expected values of the real configs ---------------------------------------- */

typedef struct {
    const char *path; /* fixture-relative, or "models:" prefix for the demo models */
    sd_arch arch;
    int vocab, hidden, inter, layers, heads, kv, head_dim, max_pos;
    float eps;
    bool tie, qkv_bias, o_bias, qk_norm;
    sd_rope_type rope;
    double theta, factor, lo, hi;
    int orig_max;
    int bos, eos;
    const char *dtype;
} expect;

/* one configuration a row */
/* clang-format off */
static const expect k_expect[] = {
    {"models/qwen3-tiny/config.json", SD_ARCH_QWEN3, 512, 64, 160, 3, 4, 2, 16, 2048, 1e-6f, true, false, false, true,
     SD_ROPE_DEFAULT, 1e6, 0, 0, 0, 0, 1, 2, "float32"},
    {"models/qwen2-tiny/config.json", SD_ARCH_QWEN2, 512, 64, 160, 2, 4, 2, 16, 2048, 1e-6f, false, true, false, false,
     SD_ROPE_DEFAULT, 1e6, 0, 0, 0, 0, 1, 2, "float32"},
    {"models/llama3-tiny/config.json", SD_ARCH_LLAMA, 512, 64, 192, 2, 8, 2, 8, 2048, 1e-6f, false, false, false, false,
     SD_ROPE_LLAMA3, 500000, 8, 1, 4, 128, 1, 2, "float32"},
    {"models/qwen3-tiny-bf16-sharded/config.json", SD_ARCH_QWEN3, 512, 96, 256, 2, 6, 3, 16, 2048, 1e-6f, false, false,
     false, true, SD_ROPE_DEFAULT, 1e6, 0, 0, 0, 0, 1, 2, "bfloat16"},
    {"models:tinycode-16m/config.json", SD_ARCH_QWEN3, 8192, 384, 1024, 8, 6, 2, 64, 4096, 1e-6f, true, false, false,
     true, SD_ROPE_DEFAULT, 1e6, 0, 0, 0, 0, 0, 0, "bfloat16"},
    {"configs/qwen3-0.6b.json", SD_ARCH_QWEN3, 151936, 1024, 3072, 28, 16, 8, 128, 40960, 1e-6f, true, false, false,
     true, SD_ROPE_DEFAULT, 1e6, 0, 0, 0, 0, 151643, 151645, "bfloat16"},
    {"configs/qwen3-1.7b.json", SD_ARCH_QWEN3, 151936, 2048, 6144, 28, 16, 8, 128, 40960, 1e-6f, true, false, false,
     true, SD_ROPE_DEFAULT, 1e6, 0, 0, 0, 0, 151643, 151645, "bfloat16"},
    {"configs/qwen3-4b.json", SD_ARCH_QWEN3, 151936, 2560, 9728, 36, 32, 8, 128, 40960, 1e-6f, true, false, false,
     true, SD_ROPE_DEFAULT, 1e6, 0, 0, 0, 0, 151643, 151645, "bfloat16"},
    {"configs/qwen3-8b.json", SD_ARCH_QWEN3, 151936, 4096, 12288, 36, 32, 8, 128, 40960, 1e-6f, false, false, false,
     true, SD_ROPE_DEFAULT, 1e6, 0, 0, 0, 0, 151643, 151645, "bfloat16"},
    {"configs/llama-3.1-8b.json", SD_ARCH_LLAMA, 128256, 4096, 14336, 32, 32, 8, 128, 131072, 1e-5f, false, false,
     false, false, SD_ROPE_LLAMA3, 500000, 8, 1, 4, 8192, 128000, 128001, "bfloat16"},
    {"configs/llama-3.2-1b.json", SD_ARCH_LLAMA, 128256, 2048, 8192, 16, 32, 8, 64, 131072, 1e-5f, true, false, false,
     false, SD_ROPE_LLAMA3, 500000, 32, 1, 4, 8192, 128000, 128001, "bfloat16"},
};
/* clang-format on */
#define N_EXPECT ((int)(sizeof k_expect / sizeof k_expect[0]))

static char *read_config(const char *rel)
{
    char path[1024];
    if (strncmp(rel, "models:", 7) == 0) tu_model(path, sizeof path, rel + 7);
    else tu_fixture(path, sizeof path, rel);
    char *text = tu_read_file(path, NULL);
    ck_assert_msg(text != NULL, "cannot read %s", path);
    return text;
}

START_TEST(test_real_configs)
{
    const expect *x = &k_expect[_i];
    char *text = read_config(x->path);
    sd_model_config c;
    char err[256] = "";
    ck_assert_msg(sd_config_parse(text, &c, err, sizeof err) == SD_OK, "%s: %s", x->path, err);
    free(text);
    ck_assert_int_eq(c.arch, x->arch);
    ck_assert_int_eq(c.vocab_size, x->vocab);
    ck_assert_int_eq(c.hidden_size, x->hidden);
    ck_assert_int_eq(c.intermediate_size, x->inter);
    ck_assert_int_eq(c.n_layers, x->layers);
    ck_assert_int_eq(c.n_heads, x->heads);
    ck_assert_int_eq(c.n_kv_heads, x->kv);
    ck_assert_int_eq(c.head_dim, x->head_dim);
    ck_assert_int_eq(c.max_position, x->max_pos);
    ck_assert_float_eq(c.rms_eps, x->eps);
    ck_assert_int_eq(c.tie_embeddings, x->tie);
    ck_assert_int_eq(c.qkv_bias, x->qkv_bias);
    ck_assert_int_eq(c.o_bias, x->o_bias);
    ck_assert_int_eq(c.mlp_bias, false);
    ck_assert_int_eq(c.qk_norm, x->qk_norm);
    ck_assert_int_eq(c.rope_type, x->rope);
    ck_assert_double_eq(c.rope_theta, x->theta);
    if (x->rope == SD_ROPE_LLAMA3) {
        ck_assert_double_eq(c.rope_factor, x->factor);
        ck_assert_double_eq(c.rope_low_freq_factor, x->lo);
        ck_assert_double_eq(c.rope_high_freq_factor, x->hi);
        ck_assert_int_eq(c.rope_orig_max_position, x->orig_max);
    }
    ck_assert_int_eq(c.bos_token_id, x->bos);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_token_ids[0], x->eos);
    ck_assert(sd_config_is_eos(&c, x->eos));
    ck_assert(!sd_config_is_eos(&c, x->eos + 1));
    ck_assert_str_eq(c.torch_dtype, x->dtype);
    ck_assert_str_eq(c.model_type, x->arch == SD_ARCH_LLAMA ? "llama" : x->arch == SD_ARCH_QWEN2 ? "qwen2" : "qwen3");
}
END_TEST

START_TEST(test_load_dir_fixtures)
{
    static const char *dirs[] = {"models/qwen3-tiny", "models/qwen2-tiny", "models/llama3-tiny",
                                 "models/qwen3-tiny-bf16-sharded"};
    for (size_t i = 0; i < sizeof dirs / sizeof dirs[0]; i++) {
        char path[1024], err[256] = "";
        sd_model_config c;
        ck_assert_msg(sd_config_load_dir(tu_fixture(path, sizeof path, dirs[i]), &c, err, sizeof err) == SD_OK, "%s",
                      err);
        ck_assert_int_eq(c.bos_token_id, 1);
        ck_assert_int_eq(c.n_eos, 1);
        ck_assert_int_eq(c.eos_token_ids[0], 2);
    }
    char path[1024], err[256] = "";
    sd_model_config c;
    ck_assert_msg(sd_config_load_dir(tu_model(path, sizeof path, "tinycode-16m"), &c, err, sizeof err) == SD_OK, "%s",
                  err);
    ck_assert_int_eq(c.vocab_size, 8192);
}
END_TEST

/* --- modified configs ------------------------------------------------------------ */

/* Parses fixture base with the keys of patch (a JSON object) set over it and
 * the keys in del (comma separated) removed. */
static sd_status parse_patched(const char *base, const char *patch, const char *del, sd_model_config *c, char *err,
                               size_t errlen)
{
    char *text = read_config(base);
    json_t *root = json_loads(text, 0, NULL);
    free(text);
    ck_assert_ptr_nonnull(root);
    if (patch) {
        json_t *p = json_loads(patch, 0, NULL);
        ck_assert_msg(p != NULL, "bad patch %s", patch);
        json_object_update(root, p);
        json_decref(p);
    }
    if (del) {
        char keys[256];
        snprintf(keys, sizeof keys, "%s", del);
        char *save = NULL;
        for (char *k = strtok_r(keys, ",", &save); k; k = strtok_r(NULL, ",", &save)) json_object_del(root, k);
    }
    char *out = json_dumps(root, 0);
    json_decref(root);
    err[0] = '\0';
    sd_status st = sd_config_parse(out, c, err, errlen);
    free(out);
    return st;
}

typedef struct {
    const char *base, *patch, *del;
    sd_status want;
    const char *needle; /* must appear in the message */
} bad_case;

#define QWEN2 "models/qwen2-tiny/config.json"
#define QWEN3 "models/qwen3-tiny/config.json"
#define LLAMA "models/llama3-tiny/config.json"

static const bad_case k_bad[] = {
    {QWEN2, "{\"architectures\": [\"MixtralForCausalLM\"], \"model_type\": \"mixtral\"}", NULL, SD_ERR_UNSUPPORTED,
     "MixtralForCausalLM"},
    {QWEN2, "{\"architectures\": [\"MistralForCausalLM\"]}", "model_type", SD_ERR_UNSUPPORTED, "MistralForCausalLM"},
    {QWEN2, NULL, "architectures", SD_OK, NULL},
    {QWEN2, "{\"model_type\": \"gemma\"}", "architectures", SD_ERR_UNSUPPORTED, "gemma"},
    {QWEN2, NULL, "architectures,model_type", SD_ERR_FORMAT, "model_type"},
    {QWEN2, "{\"model_type\": \"qwen3\"}", NULL, SD_ERR_FORMAT, "Qwen2ForCausalLM"},
    {QWEN2, "{\"use_sliding_window\": true, \"sliding_window\": 4096}", NULL, SD_ERR_UNSUPPORTED, "sliding"},
    {QWEN2, "{\"use_sliding_window\": false, \"sliding_window\": 4096}", NULL, SD_OK, NULL},
    {LLAMA, "{\"sliding_window\": 4096}", NULL, SD_ERR_UNSUPPORTED, "sliding_window"},
    {QWEN3, "{\"layer_types\": [\"full_attention\", \"sliding_attention\", \"full_attention\"]}", NULL,
     SD_ERR_UNSUPPORTED, "sliding_attention"},
    {QWEN3, "{\"layer_types\": [\"full_attention\"]}", NULL, SD_ERR_FORMAT, "layer_types"},
    {QWEN2, "{\"rope_scaling\": {\"rope_type\": \"yarn\", \"factor\": 4.0}}", NULL, SD_ERR_UNSUPPORTED, "yarn"},
    {QWEN2, "{\"rope_scaling\": {\"type\": \"dynamic\", \"factor\": 2.0}}", NULL, SD_ERR_UNSUPPORTED, "dynamic"},
    {QWEN3, "{\"rope_parameters\": {\"rope_type\": \"linear\", \"factor\": 2.0, \"rope_theta\": 10000}}", NULL,
     SD_ERR_UNSUPPORTED, "linear"},
    {QWEN3, "{\"rope_parameters\": {\"rope_type\": \"longrope\"}}", NULL, SD_ERR_UNSUPPORTED, "longrope"},
    {LLAMA,
     "{\"rope_parameters\": {\"rope_type\": \"llama3\", \"rope_theta\": 500000.0, \"low_freq_factor\": 1.0, "
     "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 128}}",
     NULL, SD_ERR_FORMAT, "factor"},
    {LLAMA,
     "{\"rope_parameters\": {\"rope_type\": \"llama3\", \"factor\": 8, \"low_freq_factor\": 4.0, "
     "\"high_freq_factor\": 4.0, \"original_max_position_embeddings\": 128}}",
     NULL, SD_ERR_FORMAT, "high_freq_factor"},
    {QWEN3, "{\"rope_parameters\": {\"rope_type\": \"default\", \"rope_theta\": -1}}", NULL, SD_ERR_FORMAT,
     "rope_theta"},
    {QWEN3, "{\"rope_parameters\": \"default\"}", NULL, SD_ERR_FORMAT, "rope_parameters"},
    {QWEN2, "{\"hidden_act\": \"gelu\"}", NULL, SD_ERR_UNSUPPORTED, "gelu"},
    {QWEN2, "{\"num_local_experts\": 8}", NULL, SD_ERR_UNSUPPORTED, "num_local_experts"},
    {QWEN3, "{\"num_experts\": 128, \"num_experts_per_tok\": 8}", NULL, SD_ERR_UNSUPPORTED, "num_experts"},
    {QWEN3, "{\"num_experts\": 0}", NULL, SD_OK, NULL},
    {QWEN3, "{\"quantization_config\": {\"quant_method\": \"awq\"}}", NULL, SD_ERR_UNSUPPORTED, "quantization_config"},
    {QWEN3, "{\"partial_rotary_factor\": 0.5}", NULL, SD_ERR_UNSUPPORTED, "partial_rotary_factor"},
    {QWEN2, NULL, "hidden_size", SD_ERR_FORMAT, "hidden_size"},
    {QWEN2, NULL, "vocab_size", SD_ERR_FORMAT, "vocab_size"},
    {QWEN2, NULL, "num_hidden_layers", SD_ERR_FORMAT, "num_hidden_layers"},
    {QWEN2, NULL, "intermediate_size", SD_ERR_FORMAT, "intermediate_size"},
    {QWEN2, NULL, "num_attention_heads", SD_ERR_FORMAT, "num_attention_heads"},
    {QWEN2, "{\"hidden_size\": \"64\"}", NULL, SD_ERR_FORMAT, "hidden_size"},
    {QWEN2, "{\"vocab_size\": 0}", NULL, SD_ERR_FORMAT, "vocab_size"},
    {QWEN2, "{\"num_hidden_layers\": -2}", NULL, SD_ERR_FORMAT, "num_hidden_layers"},
    {QWEN2, "{\"hidden_size\": 1e15}", NULL, SD_ERR_FORMAT, "hidden_size"},
    {QWEN2, "{\"intermediate_size\": 160.5}", NULL, SD_ERR_FORMAT, "intermediate_size"},
    {QWEN2, "{\"num_key_value_heads\": 3}", NULL, SD_ERR_FORMAT, "num_key_value_heads"},
    {QWEN2, "{\"num_key_value_heads\": 8}", NULL, SD_ERR_FORMAT, "num_key_value_heads"},
    {QWEN2, "{\"hidden_size\": 66}", NULL, SD_ERR_FORMAT, "hidden_size"},
    {QWEN3, "{\"head_dim\": 15}", NULL, SD_ERR_FORMAT, "head_dim"},
    {QWEN2, "{\"rms_norm_eps\": 0}", NULL, SD_ERR_FORMAT, "rms_norm_eps"},
    {QWEN2, "{\"rms_norm_eps\": 1e-50}", NULL, SD_ERR_FORMAT, "rms_norm_eps"}, /* 0 as a float */
    {QWEN2, "{\"rms_norm_eps\": \"1e-6\"}", NULL, SD_ERR_FORMAT, "rms_norm_eps"},
    {QWEN2, "{\"tie_word_embeddings\": 1}", NULL, SD_ERR_FORMAT, "tie_word_embeddings"},
    {LLAMA, "{\"attention_bias\": \"yes\"}", NULL, SD_ERR_FORMAT, "attention_bias"},
    {QWEN2, "{\"eos_token_id\": \"2\"}", NULL, SD_ERR_FORMAT, "eos_token_id"},
    {QWEN2, "{\"eos_token_id\": [1, -2]}", NULL, SD_ERR_FORMAT, "eos_token_id"},
    {QWEN2, "{\"eos_token_id\": [1,2,3,4,5,6,7,8,9]}", NULL, SD_ERR_UNSUPPORTED, "eos_token_id"},
    {QWEN2, "{\"architectures\": \"Qwen2ForCausalLM\"}", NULL, SD_ERR_FORMAT, "architectures"},
};
#define N_BAD ((int)(sizeof k_bad / sizeof k_bad[0]))

START_TEST(test_refusals)
{
    const bad_case *b = &k_bad[_i];
    sd_model_config c;
    char err[512];
    sd_status st = parse_patched(b->base, b->patch, b->del, &c, err, sizeof err);
    ck_assert_msg(st == b->want, "case %d (%s / %s): got %d (%s), want %d", _i, b->patch ? b->patch : "-",
                  b->del ? b->del : "-", st, err, b->want);
    if (b->needle) ck_assert_msg(strstr(err, b->needle) != NULL, "case %d: \"%s\" lacks \"%s\"", _i, err, b->needle);
}
END_TEST

START_TEST(test_malformed_json)
{
    static const char *texts[] = {"",
                                  "{",
                                  "{\"model_type\": ",
                                  "[1, 2]",
                                  "42",
                                  "null",
                                  "{\"model_type\": \"qwen2\", \"model_type\": \"qwen3\"}",
                                  "{\"a\": nan}"};
    for (size_t i = 0; i < sizeof texts / sizeof texts[0]; i++) {
        sd_model_config c;
        char err[256] = "";
        ck_assert_int_eq(sd_config_parse(texts[i], &c, err, sizeof err), SD_ERR_FORMAT);
        ck_assert_msg(err[0] != '\0', "no message for %s", texts[i]);
    }
    char err[64];
    ck_assert_int_eq(sd_config_parse(NULL, NULL, err, sizeof err), SD_ERR_ARG);
    ck_assert(!sd_config_is_eos(NULL, 0));
}
END_TEST

START_TEST(test_defaults)
{
    sd_model_config c;
    char err[256];
    /* absent head_dim / kv heads / tie / rope: family defaults */
    ck_assert_int_eq(parse_patched(QWEN3, NULL,
                                   "head_dim,num_key_value_heads,tie_word_embeddings,rope_parameters,"
                                   "max_position_embeddings,rms_norm_eps,bos_token_id,eos_token_id,dtype",
                                   &c, err, sizeof err),
                     SD_OK);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert(!c.tie_embeddings);
    ck_assert_int_eq(c.rope_type, SD_ROPE_DEFAULT);
    ck_assert_double_eq(c.rope_theta, 10000.0);
    ck_assert_int_eq(c.max_position, 32768);
    ck_assert_float_eq(c.rms_eps, 1e-6f);
    ck_assert_int_eq(c.bos_token_id, -1);
    ck_assert_int_eq(c.n_eos, 0);
    ck_assert_str_eq(c.torch_dtype, "");
    /* head_dim null, rope_scaling null, eos null, hidden_act null */
    ck_assert_int_eq(parse_patched(QWEN2,
                                   "{\"head_dim\": null, \"rope_scaling\": null, \"eos_token_id\": null, "
                                   "\"hidden_act\": null, \"num_key_value_heads\": null}",
                                   NULL, &c, err, sizeof err),
                     SD_OK);
    ck_assert_int_eq(c.head_dim, 16);
    ck_assert_int_eq(c.n_kv_heads, 4);
    ck_assert_int_eq(c.n_eos, 0);
    ck_assert_double_eq(c.rope_theta, 1e6);
    /* llama: attention_bias / mlp_bias */
    ck_assert_int_eq(parse_patched(LLAMA, "{\"attention_bias\": true, \"mlp_bias\": true}", NULL, &c, err, sizeof err),
                     SD_OK);
    ck_assert(c.qkv_bias && c.o_bias && c.mlp_bias && !c.qk_norm);
    /* qwen3 attention_bias biases q/k/v/o */
    ck_assert_int_eq(parse_patched(QWEN3, "{\"attention_bias\": true}", NULL, &c, err, sizeof err), SD_OK);
    ck_assert(c.qkv_bias && c.o_bias && !c.mlp_bias && c.qk_norm);
    /* qwen2 ignores attention_bias: q/k/v biased, o not */
    ck_assert_int_eq(parse_patched(QWEN2, "{\"attention_bias\": false}", NULL, &c, err, sizeof err), SD_OK);
    ck_assert(c.qkv_bias && !c.o_bias);
}
END_TEST

START_TEST(test_rope_variants)
{
    sd_model_config c;
    char err[256];
    /* older style llama3 with "type" instead of "rope_type" */
    ck_assert_int_eq(parse_patched(QWEN2,
                                   "{\"rope_theta\": 500000, \"rope_scaling\": {\"type\": \"llama3\", "
                                   "\"factor\": 16, \"low_freq_factor\": 2, \"high_freq_factor\": 8, "
                                   "\"original_max_position_embeddings\": 4096}}",
                                   NULL, &c, err, sizeof err),
                     SD_OK);
    ck_assert_int_eq(c.rope_type, SD_ROPE_LLAMA3);
    ck_assert_double_eq(c.rope_theta, 500000);
    ck_assert_double_eq(c.rope_factor, 16);
    ck_assert_double_eq(c.rope_low_freq_factor, 2);
    ck_assert_double_eq(c.rope_high_freq_factor, 8);
    ck_assert_int_eq(c.rope_orig_max_position, 4096);
    /* rope_scaling {"rope_type": "default"} */
    ck_assert_int_eq(
        parse_patched(QWEN2, "{\"rope_scaling\": {\"rope_type\": \"default\"}}", NULL, &c, err, sizeof err), SD_OK);
    ck_assert_int_eq(c.rope_type, SD_ROPE_DEFAULT);
    /* rope_parameters without rope_theta falls back to the top-level one */
    ck_assert_int_eq(parse_patched(QWEN3, "{\"rope_theta\": 12345, \"rope_parameters\": {\"rope_type\": \"default\"}}",
                                   NULL, &c, err, sizeof err),
                     SD_OK);
    ck_assert_double_eq(c.rope_theta, 12345);
    /* rope_parameters keyed by layer type */
    ck_assert_int_eq(parse_patched(QWEN3,
                                   "{\"rope_parameters\": {\"full_attention\": {\"rope_type\": \"default\", "
                                   "\"rope_theta\": 5000}}}",
                                   NULL, &c, err, sizeof err),
                     SD_OK);
    ck_assert_double_eq(c.rope_theta, 5000);
    /* a list of EOS ids (Llama 3 instruct style) */
    ck_assert_int_eq(parse_patched(LLAMA, "{\"eos_token_id\": [128001, 128008, 128009], \"bos_token_id\": null}", NULL,
                                   &c, err, sizeof err),
                     SD_OK);
    ck_assert_int_eq(c.n_eos, 3);
    ck_assert(sd_config_is_eos(&c, 128008) && sd_config_is_eos(&c, 128009) && !sd_config_is_eos(&c, 2));
    ck_assert_int_eq(c.bos_token_id, -1);
}
END_TEST

/* --- sd_config_load_dir ------------------------------------------------------------ */

static void write_text(const char *dir, const char *name, const char *text)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/%s", dir, name);
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

static void remove_tmp(const char *dir)
{
    char path[1024];
    snprintf(path, sizeof path, "%s/config.json", dir);
    unlink(path);
    snprintf(path, sizeof path, "%s/generation_config.json", dir);
    unlink(path);
    rmdir(dir);
}

START_TEST(test_generation_config)
{
    char dir[] = "/tmp/sd_cfg_XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char *base = read_config(QWEN2);
    write_text(dir, "config.json", base);
    free(base);
    sd_model_config c;
    char err[512] = "";
    ck_assert_msg(sd_config_load_dir(dir, &c, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_int_eq(c.n_eos, 1);
    ck_assert_int_eq(c.eos_token_ids[0], 2);

    write_text(dir, "generation_config.json", "{\"bos_token_id\": 9, \"eos_token_id\": [7, 8]}");
    ck_assert_msg(sd_config_load_dir(dir, &c, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_int_eq(c.bos_token_id, 9);
    ck_assert_int_eq(c.n_eos, 2);
    ck_assert(sd_config_is_eos(&c, 7) && sd_config_is_eos(&c, 8) && !sd_config_is_eos(&c, 2));

    write_text(dir, "generation_config.json", "{\"eos_token_id\": null}"); /* null keeps config.json's */
    ck_assert_int_eq(sd_config_load_dir(dir, &c, err, sizeof err), SD_OK);
    ck_assert_int_eq(c.bos_token_id, 1);
    ck_assert(sd_config_is_eos(&c, 2));

    write_text(dir, "generation_config.json", "{\"eos_token_id\": ");
    ck_assert_int_eq(sd_config_load_dir(dir, &c, err, sizeof err), SD_ERR_FORMAT);
    ck_assert_ptr_nonnull(strstr(err, "generation_config.json"));

    write_text(dir, "config.json", "{\"model_type\": \"qwen2\"}");
    ck_assert_int_eq(sd_config_load_dir(dir, &c, err, sizeof err), SD_ERR_FORMAT);
    ck_assert_msg(strstr(err, "config.json") && strstr(err, "vocab_size"), "%s", err);
    remove_tmp(dir);

    ck_assert_int_eq(sd_config_load_dir(dir, &c, err, sizeof err), SD_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, dir));
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("model_config");
    TCase *tc = tcase_create("core");
    tcase_add_loop_test(tc, test_real_configs, 0, N_EXPECT);
    tcase_add_test(tc, test_load_dir_fixtures);
    tcase_add_loop_test(tc, test_refusals, 0, N_BAD);
    tcase_add_test(tc, test_malformed_json);
    tcase_add_test(tc, test_defaults);
    tcase_add_test(tc, test_rope_variants);
    tcase_add_test(tc, test_generation_config);
    suite_add_tcase(s, tc);
    return s;
}

int main(void) { return tu_run_suite(suite()); }
