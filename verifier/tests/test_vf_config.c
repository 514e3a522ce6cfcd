/* test_vf_config.c — specd-verifier option parsing (vf_config.c). */
#include <check.h>
#include <string.h>

#include "proposer.h"
#include "testutil.h"
#include "model.h"
#include "draft.h"
#include "vf_config.h"

static sd_status parse(sd_vf_config *c, char *err, int argc, char **argv)
{
    return sd_vf_config_parse(argc, argv, c, err, 256);
}

START_TEST(defaults)
{
    char *argv[] = {"v", "--model", "m", NULL};
    sd_vf_config c;
    char err[256];
    ck_assert_int_eq(parse(&c, err, 3, argv), SD_OK);
    ck_assert_str_eq(c.model_dir, "m");
    ck_assert_str_eq(c.listen, "tcp://127.0.0.1:5555");
    ck_assert_ptr_null(c.drafter);
    ck_assert(!c.ngram);
    ck_assert_int_eq(c.num_draft, SD_NUM_DRAFT_DEFAULT);
    ck_assert(c.spec_adaptive);
    ck_assert(c.spec_fallback);
    ck_assert(c.spec_lookup_first);
    ck_assert_int_eq(c.spec_max_draft, SD_VF_SPEC_MAX_DRAFT_DEFAULT);
    ck_assert_int_eq(c.spec_max_batch, 0); /* optional caps: none by default */
    ck_assert_int_eq(c.spec_max_batch_sampled, 0);
    ck_assert_int_eq(c.threads, 0);
    ck_assert_int_eq(c.max_batch, 32);
    ck_assert_int_eq(c.kv_blocks, 0);
    ck_assert_int_eq(c.kv_dtype, SD_KV_AUTO);
    ck_assert(c.gpu_mem_fraction == SD_VF_GPU_MEM_FRACTION);
    ck_assert_int_eq(c.prefill_chunk, 256);
    ck_assert_int_eq(c.draft_timeout_ms, 200);
}
END_TEST

START_TEST(all_options)
{
    char *argv[] = {"v",
                    "--model",
                    "m",
                    "--listen",
                    "ipc:///tmp/x",
                    "--drafter",
                    "ipc:///tmp/d",
                    "--num-draft",
                    "40",
                    "--threads",
                    "3",
                    "--device",
                    "cpu",
                    "--max-batch",
                    "8",
                    "--kv-blocks",
                    "100",
                    "--prefill-chunk",
                    "64",
                    "--draft-timeout-ms",
                    "50",
                    "--log-level",
                    "debug",
                    "--spec-max-batch",
                    "0",
                    "--spec-max-batch-sampled",
                    "3",
                    "--spec-adaptive",
                    "off",
                    "--spec-max-draft",
                    "5",
                    "--kv-dtype",
                    "f32",
                    "--gpu-memory-fraction",
                    "0.5",
                    NULL};
    sd_vf_config c;
    char err[256];
    ck_assert_int_eq(parse(&c, err, 35, argv), SD_OK);
    ck_assert_int_eq(c.kv_dtype, SD_KV_F32);
    ck_assert(c.gpu_mem_fraction == 0.5);
    ck_assert(!c.spec_adaptive);
    ck_assert_int_eq(c.spec_max_draft, 5);
    ck_assert_int_eq(c.spec_max_batch, 0);
    ck_assert_int_eq(c.spec_max_batch_sampled, 3);
    ck_assert_str_eq(c.drafter, "ipc:///tmp/d");
    ck_assert_int_eq(c.num_draft, SD_MAX_DRAFT); /* clamped */
    ck_assert_int_eq(c.threads, 3);
    ck_assert_int_eq(c.max_batch, 8);
    ck_assert_int_eq(c.kv_blocks, 100);
    ck_assert_int_eq(c.prefill_chunk, 64);
    ck_assert_int_eq(c.draft_timeout_ms, 50);
    ck_assert_int_eq(c.log_level, SD_LOG_DEBUG);
    char *mml[] = {"v", "--model", "m", "--max-model-len", "2048", NULL};
    ck_assert_int_eq(parse(&c, err, 5, mml), SD_OK);
    ck_assert_int_eq(c.max_model_len, 2048);
    char *fb[] = {"v", "--model", "m", "--spec-fallback", "off", NULL};
    ck_assert_int_eq(parse(&c, err, 5, fb), SD_OK);
    ck_assert(!c.spec_fallback);
    ck_assert(!c.spec_lookup_first);
    fb[4] = "missing"; /* only where the drafter left a request without drafts */
    ck_assert_int_eq(parse(&c, err, 5, fb), SD_OK);
    ck_assert(c.spec_fallback);
    ck_assert(!c.spec_lookup_first);
    fb[4] = "ngram";
    ck_assert_int_eq(parse(&c, err, 5, fb), SD_OK);
    ck_assert(c.spec_fallback);
    ck_assert(c.spec_lookup_first);
    char *ng[] = {"v", "--model", "m", "--ngram", NULL};
    ck_assert_int_eq(parse(&c, err, 4, ng), SD_OK);
    ck_assert(c.ngram);
    ck_assert_ptr_null(c.drafter);
}
END_TEST

START_TEST(errors)
{
    sd_vf_config c;
    char err[256];
    char *no_model[] = {"v", "--listen", "x", NULL};
    ck_assert_int_eq(parse(&c, err, 3, no_model), SD_ERR_ARG);
    char *bad_num[] = {"v", "--model", "m", "--max-batch", "zero", NULL};
    ck_assert_int_eq(parse(&c, err, 5, bad_num), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--max-batch"));
    char *neg[] = {"v", "--model", "m", "--num-draft", "-1", NULL};
    ck_assert_int_eq(parse(&c, err, 5, neg), SD_ERR_ARG);
    char *neg_smb[] = {"v", "--model", "m", "--spec-max-batch", "-2", NULL};
    ck_assert_int_eq(parse(&c, err, 5, neg_smb), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--spec-max-batch"));
    char *adapt[] = {"v", "--model", "m", "--spec-adaptive", "maybe", NULL};
    ck_assert_int_eq(parse(&c, err, 5, adapt), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--spec-adaptive"));
    char *fb[] = {"v", "--model", "m", "--spec-fallback", "suffix", NULL};
    ck_assert_int_eq(parse(&c, err, 5, fb), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--spec-fallback"));
    char *both[] = {"v", "--model", "m", "--ngram", "--drafter", "ipc:///tmp/d", NULL};
    ck_assert_int_eq(parse(&c, err, 6, both), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--ngram"));
    ck_assert_ptr_nonnull(strstr(err, "--drafter"));
    char *dm_ngram[] = {"v", "--model", "m", "--ngram", "--draft-model", "d", NULL};
    ck_assert_int_eq(parse(&c, err, 6, dm_ngram), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--draft-model"));
    char *dm_drafter[] = {"v", "--model", "m", "--draft-model", "d", "--drafter", "ipc:///tmp/d", NULL};
    ck_assert_int_eq(parse(&c, err, 7, dm_drafter), SD_ERR_ARG);
    char *dq[] = {"v", "--model", "m", "--draft-model", "d", "--draft-quant", "int4", NULL};
    ck_assert_int_eq(parse(&c, err, 7, dq), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--draft-quant"));
    char *dm[] = {"v", "--model", "m", "--draft-model", "d", "--draft-quant", "none", NULL};
    ck_assert_int_eq(parse(&c, err, 7, dm), SD_OK);
    ck_assert_str_eq(c.draft_model, "d");
    ck_assert_int_eq(c.draft_quant, SD_DRAFT_QUANT_NONE);
    ck_assert_ptr_null(c.drafter);
    char *maxd[] = {"v", "--model", "m", "--spec-max-draft", "17", NULL};
    ck_assert_int_eq(parse(&c, err, 5, maxd), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--spec-max-draft"));
    char *mml0[] = {"v", "--model", "m", "--max-model-len", "0", NULL};
    ck_assert_int_eq(parse(&c, err, 5, mml0), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--max-model-len"));
    char *kvd[] = {"v", "--model", "m", "--kv-dtype", "fp8", NULL};
    ck_assert_int_eq(parse(&c, err, 5, kvd), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--kv-dtype"));
    char *frac[] = {"v", "--model", "m", "--gpu-memory-fraction", "1.5", NULL};
    ck_assert_int_eq(parse(&c, err, 5, frac), SD_ERR_ARG);
    ck_assert_ptr_nonnull(strstr(err, "--gpu-memory-fraction"));
    char *unknown[] = {"v", "--model", "m", "--bogus", NULL};
    ck_assert_int_eq(parse(&c, err, 4, unknown), SD_ERR_ARG);
    char *tpu[] = {"v", "--model", "m", "--device", "tpu:0", NULL};
    ck_assert_int_eq(parse(&c, err, 5, tpu), SD_ERR_UNSUPPORTED);
    ck_assert_ptr_nonnull(strstr(err, "tpu:0"));
    char *help[] = {"v", "--help", NULL};
    ck_assert_int_eq(parse(&c, err, 2, help), SD_OK);
    ck_assert(c.help);
}
END_TEST

START_TEST(kv_default)
{
    ck_assert_int_eq(sd_vf_default_kv_blocks(32, 4096), 32 * 1024 / 16);
    ck_assert_int_eq(sd_vf_default_kv_blocks(1, 32768), 32768 / 16 + 8);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("vf_config");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, defaults);
    tcase_add_test(tc, all_options);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, kv_default);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
