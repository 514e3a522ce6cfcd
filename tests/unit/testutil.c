/* testutil.c — see testutil.h. */
#include "testutil.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "json_mask.h"
#include "kv_pool.h"
#include "model.h"
#include "strbuf.h"
#include "tokenizer.h"

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

static const double CHI2_999[21] = {0.0,    10.828, 13.816, 16.266, 18.467, 20.515, 22.458,
                                    24.322, 26.124, 27.877, 29.588, 31.264, 32.909, 34.528,
                                    36.123, 37.697, 39.252, 40.790, 42.312, 43.820, 45.315};

double tu_chi2_stat(const long *counts, const double *p, int n, long total, int *df)
{
    int *idx = malloc((size_t)n * sizeof *idx);
    ck_assert_ptr_nonnull(idx);
    for (int i = 0; i < n; i++) idx[i] = i;
    for (int i = 1; i < n; i++) /* insertion sort by expected count, ascending */
        for (int j = i; j > 0 && p[idx[j]] < p[idx[j - 1]]; j--) {
            int t = idx[j];
            idx[j] = idx[j - 1];
            idx[j - 1] = t;
        }
    double stat = 0.0, e = 0.0, o = 0.0, last_e = 0.0, last_o = 0.0;
    int bins = 0;
    for (int j = 0; j < n; j++) {
        int i = idx[j];
        if (p[i] == 0.0) {
            if (counts[i] > 0) {
                free(idx);
                return INFINITY;
            }
            continue;
        }
        e += p[i] * (double)total;
        o += (double)counts[i];
        if (e >= 5.0) {
            stat += (o - e) * (o - e) / e;
            last_e = e;
            last_o = o;
            bins++;
            e = o = 0.0;
        }
    }
    if (e > 0.0 && bins > 0) { /* leftover < 5: fold into the last bin */
        stat -= (last_o - last_e) * (last_o - last_e) / last_e;
        last_e += e;
        last_o += o;
        stat += (last_o - last_e) * (last_o - last_e) / last_e;
    }
    free(idx);
    *df = bins - 1;
    return stat;
}

double tu_chi2_crit(int df)
{
    ck_assert_msg(df >= 1, "df %d", df);
    if (df <= 20) return CHI2_999[df];
    double z = 3.090232, a = 2.0 / (9.0 * df), c = 1.0 - a + z * sqrt(a);
    return df * c * c * c;
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
    sd_batch_seq b = {ids, n, pos0, seq, n, NULL, NULL, NULL};
    sd_status st = sd_model_forward(m, &b, 1, out, err, sizeof err);
    ck_assert_msg(st == SD_OK, "forward: %s", err);
    sd_kv_commit(pool, seq, n);
}

void tu_check_batch_invariance(sd_model *m, const int32_t *ids, const int32_t *other, int n)
{
    int V = sd_model_cfg(m)->vocab_size;
    sd_kv_pool *pool = sd_model_kv_pool(m);
    float *a = malloc((size_t)n * V * sizeof(float)), *b = malloc((size_t)n * V * sizeof(float));
    float *c = malloc((size_t)2 * n * V * sizeof(float));
    sd_kv_seq s1, s2;
    sd_kv_seq_init(&s1);
    tu_forward(m, &s1, ids, n, 0, a);
    sd_kv_seq_release(pool, &s1);
    for (int i = 0; i < n; i++) tu_forward(m, &s1, ids + i, 1, i, b + (size_t)i * V);
    sd_kv_seq_release(pool, &s1);
    ck_assert_msg(memcmp(a, b, (size_t)n * V * sizeof(float)) == 0, "one pass != token by token");
    /* spans of 1, 2, 3, ... together with the second sequence */
    sd_kv_seq_init(&s1);
    sd_kv_seq_init(&s2);
    int p = 0, span = 1;
    char err[256];
    while (p < n) {
        int k = span < n - p ? span : n - p;
        ck_assert_int_eq(sd_kv_reserve(pool, &s1, k), SD_OK);
        ck_assert_int_eq(sd_kv_reserve(pool, &s2, k), SD_OK);
        sd_batch_seq bs[2] = {{other + p, k, p, &s2, k, NULL, NULL, NULL}, {ids + p, k, p, &s1, k, NULL, NULL, NULL}};
        ck_assert_int_eq(sd_model_forward(m, bs, 2, c, err, sizeof err), SD_OK);
        ck_assert_msg(memcmp(c + (size_t)k * V, a + (size_t)p * V, (size_t)k * V * sizeof(float)) == 0,
                      "span [%d, %d) batched differs from one pass", p, p + k);
        sd_kv_commit(pool, &s1, k);
        sd_kv_commit(pool, &s2, k);
        p += k;
        span = span % 7 + 2;
    }
    sd_kv_seq_release(pool, &s1);
    sd_kv_seq_release(pool, &s2);
    ck_assert_int_eq(sd_kv_pool_free_count(pool), sd_kv_pool_total(pool));
    free(a);
    free(b);
    free(c);
}

sd_json_vocab *tu_demo_vocab(sd_tok **tok, int *vocab, int *eos)
{
    char dir[512], path[600], err[256];
    tu_model(dir, sizeof dir, "tinycode-16m");
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    ck_assert_msg(sd_tok_load(path, tok, err, sizeof err) == SD_OK, "%s", err);
    *vocab = sd_tok_vocab_size(*tok);
    *eos = sd_tok_token_id(*tok, "<|endoftext|>");
    ck_assert_int_ge(*eos, 0);
    sd_json_vocab *v;
    ck_assert_msg(sd_json_vocab_new(*tok, *vocab, eos, 1, &v, err, sizeof err) == SD_OK, "%s", err);
    return v;
}
