/* test_mem_plan.c — KV caches sized from device memory (common/model/mem_plan.h):
 * the plan's arithmetic (the process's share, what it holds, what others
 * leave free), blocks for a model through a backend whose free memory is
 * faked (the CPU backend's ops plus a mem_info that reports set figures),
 * the KV element type's effect, a plan too small for one sequence, host
 * memory left unplanned, and a drafter's pool capped by its fraction. */
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "draft.h"
#include "kv_pool.h"
#include "mem_plan.h"
#include "model.h"
#include "testutil.h"

#define GIB ((size_t)1 << 30)
#define MIB ((size_t)1 << 20)

START_TEST(plan_arithmetic)
{
    /* alone on 80 GiB: 16 GiB of weights loaded, 1 GiB still to come: 72 - 16 - 1 */
    sd_mem_plan a = {
        .total = 80 * GIB, .free_at_start = 79 * GIB, .free_now = 63 * GIB, .fraction = 0.9, .reserve = GIB};
    ck_assert_uint_eq(sd_mem_kv_bytes(&a), 55 * GIB);
    /* another process holds 59 GiB: only what is free counts */
    sd_mem_plan b = {
        .total = 80 * GIB, .free_at_start = 20 * GIB, .free_now = 19 * GIB, .fraction = 0.9, .reserve = GIB};
    ck_assert_uint_eq(sd_mem_kv_bytes(&b), 18 * GIB);
    /* a share smaller than the weights: nothing */
    sd_mem_plan c = {
        .total = 80 * GIB, .free_at_start = 79 * GIB, .free_now = 63 * GIB, .fraction = 0.1, .reserve = GIB};
    ck_assert_uint_eq(sd_mem_kv_bytes(&c), 0);
    /* free memory below the reserve: nothing */
    sd_mem_plan d = {.total = 80 * GIB, .free_at_start = GIB, .free_now = GIB / 2, .fraction = 1.0, .reserve = GIB};
    ck_assert_uint_eq(sd_mem_kv_bytes(&d), 0);
}
END_TEST

/* ---- a CPU backend that reports device memory ---- */

static size_t g_free, g_total;
static sd_backend_ops g_fake_ops;

static sd_status fake_mem_info(sd_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    (void)be;
    *free_bytes = g_free;
    *total_bytes = g_total;
    return SD_OK;
}

static sd_backend *fake_device(void)
{
    sd_backend *be;
    ck_assert_int_eq(sd_backend_cpu_new(1, &be, NULL, 0), SD_OK);
    g_fake_ops = *be->ops;
    g_fake_ops.mem_info = fake_mem_info;
    be->ops = &g_fake_ops;
    return be;
}

static sd_model *load(sd_backend *be, const char *name)
{
    char path[512], err[512];
    sd_model *m = NULL;
    ck_assert_msg(sd_model_load(tu_model(path, sizeof path, name), be, &m, err, sizeof err) == SD_OK, "%s", err);
    return m;
}

START_TEST(model_blocks_from_free_memory)
{
    sd_backend *be = fake_device();
    sd_model *m = load(be, "tinycode-16m");
    char how[512], err[512];
    const int rows = 300, n_out = 300, bs = 16;
    size_t reserve = sd_model_scratch_bytes(m, rows, n_out) + SD_MEM_SLACK;
    size_t per_block = sd_model_kv_bytes_per_position(m) * bs; /* bf16: the model's activations are */
    ck_assert_int_eq(sd_model_kv_dtype(m), SD_DTYPE_BF16);
    /* 1 GiB device, 900 MiB free at start, 100 MiB loaded since, fraction 0.5: 512 - 100 MiB - reserve */
    g_total = GIB, g_free = 800 * MIB;
    long n = 0;
    ck_assert_msg(sd_mem_kv_blocks(m, 0.5, 900 * MIB, rows, n_out, bs, 1, 0, &n, how, sizeof how, err, sizeof err) ==
                      SD_OK,
                  "%s", err);
    long want = (long)((512 * MIB - 100 * MIB - reserve) / per_block);
    ck_assert_int_eq(n, want);
    ck_assert_ptr_nonnull(strstr(how, "fraction 0.50"));
    /* capped */
    ck_assert_int_eq(sd_mem_kv_blocks(m, 0.5, 900 * MIB, rows, n_out, bs, 1, 10, &n, how, sizeof how, err, sizeof err),
                     SD_OK);
    ck_assert_int_eq(n, 10);
    /* f32 KV: each block twice the bytes */
    sd_model_set_kv_dtype(m, SD_KV_F32);
    ck_assert_int_eq(sd_mem_kv_blocks(m, 0.5, 900 * MIB, rows, n_out, bs, 1, 0, &n, how, sizeof how, err, sizeof err),
                     SD_OK);
    ck_assert_int_eq(n, (long)((512 * MIB - 100 * MIB - reserve) / (2 * per_block)));
    /* other processes leave 300 MiB free: that bounds it */
    g_free = 300 * MIB;
    ck_assert_int_eq(sd_mem_kv_blocks(m, 0.9, 400 * MIB, rows, n_out, bs, 1, 0, &n, how, sizeof how, err, sizeof err),
                     SD_OK);
    ck_assert_int_eq(n, (long)((300 * MIB - reserve) / (2 * per_block)));
    /* too little for one full sequence: an error that says what to change */
    ck_assert_int_eq(
        sd_mem_kv_blocks(m, 0.9, 400 * MIB, rows, n_out, bs, n + 1, 0, &n, how, sizeof how, err, sizeof err),
        SD_ERR_NOMEM);
    ck_assert_ptr_nonnull(strstr(err, "raise the memory fraction"));
    ck_assert_int_eq(sd_mem_kv_blocks(m, 1.5, 400 * MIB, rows, n_out, bs, 1, 0, &n, how, sizeof how, err, sizeof err),
                     SD_ERR_ARG);
    sd_model_free(m);
    sd_backend_free(be);

    /* host memory: not planned */
    ck_assert_int_eq(sd_backend_cpu_new(1, &be, NULL, 0), SD_OK);
    m = load(be, "tinycode-16m");
    ck_assert_int_eq(sd_mem_kv_blocks(m, 0.9, 0, rows, n_out, bs, 1, 0, &n, how, sizeof how, err, sizeof err),
                     SD_ERR_UNSUPPORTED);
    ck_assert_uint_eq(sd_mem_free_now(be), 0);
    sd_model_free(m);
    sd_backend_free(be);
}
END_TEST

/* A drafter's mirrors: max_seqs full contexts asked, capped by its share. */
START_TEST(drafter_pool_capped)
{
    sd_backend *be = fake_device();
    char path[512], err[512];
    sd_draft_opts o = sd_draft_opts_default();
    o.be = be;
    o.max_seqs = 8;
    o.max_context = 1024;
    long per_seq = (1024 + SD_MAX_DRAFT + 1 + 15) / 16;
    sd_model *m = load(be, "tinycode-3m");
    size_t reserve = sd_model_scratch_bytes(m, 1024 + 8, 8) + SD_MEM_SLACK;
    size_t per_block = sd_model_kv_bytes_per_position(m) * 16;
    sd_model_free(m);
    /* share = fraction * total - reserve = 3.5 sequences */
    size_t share = reserve + (size_t)(3.5 * (double)per_seq * (double)per_block);
    g_total = 2 * share, g_free = g_total;
    o.mem_fraction = 0.5;
    o.mem_free_at_start = g_free;
    sd_proposer *p = NULL;
    ck_assert_msg(sd_draft_new(tu_model(path, sizeof path, "tinycode-3m"), &o, &p, err, sizeof err) == SD_OK, "%s",
                  err);
    ck_assert_int_eq(sd_kv_pool_total(sd_model_kv_pool(sd_draft_model(p))), (int)(3.5 * (double)per_seq));
    sd_proposer_free(p);
    /* without a fraction: all 8 sequences */
    o.mem_fraction = 0;
    ck_assert_int_eq(sd_draft_new(path, &o, &p, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_kv_pool_total(sd_model_kv_pool(sd_draft_model(p))), (int)(8 * per_seq));
    sd_proposer_free(p);
    /* not even one sequence fits */
    g_total = reserve, g_free = g_total;
    o.mem_fraction = 1.0;
    o.mem_free_at_start = g_free;
    ck_assert_int_eq(sd_draft_new(path, &o, &p, err, sizeof err), SD_ERR_NOMEM);
    ck_assert_ptr_null(p);
    sd_backend_free(be);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mem_plan");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, plan_arithmetic);
    tcase_add_test(tc, model_blocks_from_free_memory);
    tcase_add_test(tc, drafter_pool_capped);
    suite_add_tcase(s, tc);
    return tu_run_suite(s);
}
