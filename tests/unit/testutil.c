/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <stdio.h>
#include <stdlib.h>

#include "model.h"
#include "strbuf.h"

static const char *env_or(const char *name, const char *dflt)
{
    const char *v = getenv(name);
    return v && *v ? v : dflt;
}

const char *tu_fixture(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", env_or("SD_FIXTURES", "tests/fixtures"), rel);
    return buf;
}

const char *tu_fixture_bin(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", env_or("SD_FIXTURES_BIN", "build/fixtures"), rel);
    return buf;
}

const char *tu_model(char *buf, size_t n, const char *rel)
{
    snprintf(buf, n, "%s/%s", env_or("SD_MODELS", "models"), rel);
    return buf;
}

char *tu_read_file(const char *path, size_t *len)
{
    char *text;
    size_t n;
    if (sd_read_file(path, (size_t)1 << 31, &text, &n, NULL, 0) != SD_OK) return NULL;
    if (len) *len = n;
    return text;
}

int tu_run_suite(Suite *s)
{
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? 0 : 1;
}

sd_model *tu_open_model(const char *name, sd_backend *be, int positions)
{
    char path[512], rel[256], err[512];
    snprintf(rel, sizeof rel, "models/%s", name);
    sd_model *m = NULL;
    sd_status st = sd_model_load(tu_fixture(path, sizeof path, rel), be, &m, err, sizeof err);
    ck_assert_msg(st == SD_OK, "load %s: %s", name, err);
    st = sd_model_kv_init(m, (positions + 15) / 16 * 3, 16, err, sizeof err);
    ck_assert_msg(st == SD_OK, "kv: %s", err);
    return m;
}

void tu_forward(sd_model *m, sd_kv_seq *seq, const int32_t *ids, int n, int pos0, float *out)
{
    char err[512];
    sd_kv_pool *pool = sd_model_kv_pool(m);
    ck_assert_int_eq(sd_kv_reserve(pool, seq, n), SD_OK);
    sd_batch_seq b = {ids, n, pos0, seq, n};
    sd_status st = sd_model_forward(m, &b, 1, out, err, sizeof err);
    ck_assert_msg(st == SD_OK, "forward: %s", err);
    sd_kv_commit(pool, seq, n);
}
