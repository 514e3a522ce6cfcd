/* test_safetensors.c — safetensors loading: the fixture checkpoints (single F32
 * file, 7-shard BF16 with an index, the demo model), a corrupt file for every
 * validation rule (written to a per-test temp dir), sharded-index errors, and
 * exact bf16/f16 → f32 conversion. */
#include "safetensors.h"

#include <math.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "testutil.h"

/* --- temp dir ------------------------------------------------------------------ */

static char g_dir[64];

static void tmp_setup(void)
{
    snprintf(g_dir, sizeof g_dir, "/tmp/sd_st_XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(g_dir));
}

static void tmp_teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", g_dir);
    if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", g_dir);
}

static const char *tmp_path(char *buf, size_t n, const char *name)
{
    snprintf(buf, n, "%s/%s", g_dir, name);
    return buf;
}

static void write_bytes(const char *path, const void *data, size_t n)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    ck_assert_uint_eq(fwrite(data, 1, n, f), n);
    fclose(f);
}

/* Writes a safetensors file: declared header length hlen (the real length
 * when hlen == UINT64_MAX), the header text padded with spaces to a multiple
 * of 8 when pad, then ndata bytes of data (0, 1, 2, ...), then cut to total
 * bytes when total != 0. */
static void write_st(const char *name, const char *header, bool pad, uint64_t hlen, size_t ndata, size_t total)
{
    size_t hl = strlen(header), padded = pad ? (hl + 7) / 8 * 8 : hl;
    size_t size = 8 + padded + ndata;
    uint8_t *buf = malloc(size);
    ck_assert_ptr_nonnull(buf);
    uint64_t n = hlen == UINT64_MAX ? padded : hlen;
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)(n >> (8 * i));
    memset(buf + 8, ' ', padded);
    memcpy(buf + 8, header, hl);
    for (size_t i = 0; i < ndata; i++) buf[8 + padded + i] = (uint8_t)i;
    char path[256];
    write_bytes(tmp_path(path, sizeof path, name), buf, total ? total : size);
    free(buf);
}

/* Opens g_dir/name, expects want, and a message containing needle. */
static void expect_open(const char *name, sd_status want, const char *needle)
{
    char path[256], err[512] = "";
    sd_st *st = (sd_st *)0x1;
    sd_status rc = sd_st_open_file(tmp_path(path, sizeof path, name), &st, err, sizeof err);
    ck_assert_msg(rc == want, "%s: got %d (%s), want %d", name, rc, err, want);
    if (want != SD_OK) {
        ck_assert_ptr_null(st);
        ck_assert_msg(needle && strstr(err, needle), "%s: message \"%s\" lacks \"%s\"", name, err,
                      needle ? needle : "");
    }
    sd_st_free(st);
}

#define GOOD_HDR                                                                  \
    "{\"__metadata__\": {\"format\": \"pt\"}, "                                   \
    "\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]}, " \
    "\"b\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [24, 32]}}"

/* --- fixture checkpoints ------------------------------------------------------------ */

START_TEST(test_fixture_f32)
{
    char path[1024], err[256] = "";
    sd_st *st = NULL;
    tu_fixture(path, sizeof path, "models/qwen3-tiny/model.safetensors");
    ck_assert_msg(sd_st_open_file(path, &st, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_uint_eq(sd_st_count(st), 35);
    const sd_tensor *t = NULL;
    const int64_t emb[2] = {512, 64};
    ck_assert_int_eq(sd_st_get(st, "model.embed_tokens.weight", 2, emb, &t, err, sizeof err), SD_OK);
    ck_assert_int_eq(t->dtype, SD_DTYPE_F32);
    ck_assert_uint_eq(t->nbytes, 512 * 64 * 4);
    ck_assert_str_eq(t->name, "model.embed_tokens.weight");
    const int64_t kn[1] = {16};
    ck_assert_int_eq(sd_st_get(st, "model.layers.2.self_attn.k_norm.weight", 1, kn, &t, err, sizeof err), SD_OK);
    const int64_t kp[2] = {32, 64};
    ck_assert_int_eq(sd_st_get(st, "model.layers.1.self_attn.k_proj.weight", 2, kp, &t, err, sizeof err), SD_OK);
    /* wrong shape: message names the tensor, expected and actual shape */
    const int64_t bad[2] = {512, 32};
    ck_assert_int_eq(sd_st_get(st, "model.embed_tokens.weight", 2, bad, &t, err, sizeof err), SD_ERR_FORMAT);
    ck_assert_ptr_null(t);
    ck_assert_msg(strstr(err, "model.embed_tokens.weight") && strstr(err, "[512, 32]") && strstr(err, "[512, 64]"),
                  "%s", err);
    ck_assert_int_eq(sd_st_get(st, "model.embed_tokens.weight", 1, bad, &t, err, sizeof err), SD_ERR_FORMAT);
    ck_assert_int_eq(sd_st_get(st, "lm_head.weight", 2, emb, &t, err, sizeof err), SD_ERR_NOTFOUND);
    ck_assert_ptr_nonnull(strstr(err, "lm_head.weight"));
    ck_assert_ptr_null(sd_st_find(st, "lm_head.weight"));
    ck_assert_ptr_null(sd_st_find(st, ""));
    /* every tensor reachable by index and by name; sorted by name */
    for (size_t i = 0; i < sd_st_count(st); i++) {
        const sd_tensor *a = sd_st_at(st, i);
        ck_assert_ptr_eq(sd_st_find(st, a->name), a);
        if (i) ck_assert_int_lt(strcmp(sd_st_at(st, i - 1)->name, a->name), 0);
    }
    ck_assert_ptr_null(sd_st_at(st, sd_st_count(st)));
    sd_st_free(st);

    ck_assert_msg(sd_st_open_dir(tu_fixture(path, sizeof path, "models/qwen3-tiny"), &st, err, sizeof err) == SD_OK,
                  "%s", err);
    ck_assert_uint_eq(sd_st_count(st), 35);
    t = sd_st_find(st, "model.norm.weight");
    ck_assert_ptr_nonnull(t);
    float norm[64];
    sd_convert_to_f32(t->dtype, t->data, norm, 64);
    ck_assert(isfinite(norm[0]));
    sd_st_free(st);
}
END_TEST

START_TEST(test_fixture_sharded_bf16)
{
    char path[1024], err[256] = "";
    sd_st *st = NULL;
    tu_fixture(path, sizeof path, "models/qwen3-tiny-bf16-sharded");
    ck_assert_msg(sd_st_open_dir(path, &st, err, sizeof err) == SD_OK, "%s", err);
    ck_assert_uint_eq(sd_st_count(st), 25);
    for (size_t i = 0; i < sd_st_count(st); i++) ck_assert_int_eq(sd_st_at(st, i)->dtype, SD_DTYPE_BF16);
    const sd_tensor *t;
    const int64_t lm[2] = {512, 96}, kp[2] = {48, 96}, qn[1] = {16};
    ck_assert_int_eq(sd_st_get(st, "lm_head.weight", 2, lm, &t, err, sizeof err), SD_OK);
    ck_assert_uint_eq(t->nbytes, 512 * 96 * 2);
    ck_assert_int_eq(sd_st_get(st, "model.embed_tokens.weight", 2, lm, &t, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_st_get(st, "model.layers.1.self_attn.k_proj.weight", 2, kp, &t, err, sizeof err), SD_OK);
    ck_assert_int_eq(sd_st_get(st, "model.layers.0.self_attn.q_norm.weight", 1, qn, &t, err, sizeof err), SD_OK);
    float *buf = malloc(512 * 96 * sizeof *buf);
    t = sd_st_find(st, "lm_head.weight");
    sd_convert_to_f32(t->dtype, t->data, buf, 512 * 96);
    for (int i = 0; i < 512 * 96; i++) {
        uint16_t h;
        memcpy(&h, (const uint8_t *)t->data + 2 * i, 2);
        uint32_t u;
        memcpy(&u, &buf[i], 4);
        ck_assert_uint_eq(u, (uint32_t)h << 16);
    }
    free(buf);
    sd_st_free(st);
}
END_TEST

START_TEST(test_demo_model)
{
    char path[1024], err[256] = "";
    sd_st *st = NULL;
    ck_assert_msg(sd_st_open_dir(tu_model(path, sizeof path, "tinycode-16m"), &st, err, sizeof err) == SD_OK, "%s",
                  err);
    ck_assert_uint_eq(sd_st_count(st), 90);
    const sd_tensor *t;
    const int64_t emb[2] = {8192, 384};
    ck_assert_int_eq(sd_st_get(st, "model.embed_tokens.weight", 2, emb, &t, err, sizeof err), SD_OK);
    ck_assert_int_eq(t->dtype, SD_DTYPE_BF16);
    sd_st_free(st);
    sd_st_free(NULL);
}
END_TEST

/* --- a well-formed synthetic file --------------------------------------------------- */

START_TEST(test_synthetic_ok)
{
    write_st("ok.safetensors", GOOD_HDR, true, UINT64_MAX, 32, 0);
    char path[256], err[256] = "";
    sd_st *st = NULL;
    ck_assert_msg(sd_st_open_file(tmp_path(path, sizeof path, "ok.safetensors"), &st, err, sizeof err) == SD_OK, "%s",
                  err);
    ck_assert_uint_eq(sd_st_count(st), 2);
    const sd_tensor *w = sd_st_find(st, "w"), *b = sd_st_find(st, "b");
    ck_assert(w && b);
    ck_assert_int_eq(w->ndim, 2);
    ck_assert_int_eq(w->shape[0], 2);
    ck_assert_int_eq(w->shape[1], 3);
    ck_assert_uint_eq(w->nbytes, 24);
    ck_assert_uint_eq(((const uint8_t *)w->data)[5], 5);
    ck_assert_uint_eq(((const uint8_t *)b->data)[0], 24);
    ck_assert_str_eq(sd_dtype_name(b->dtype), "BF16");
    ck_assert_uint_eq(sd_dtype_size(b->dtype), 2);
    sd_st_free(st);

    /* empty header and a scalar (0-d) tensor are both legal */
    write_st("empty.safetensors", "{}", true, UINT64_MAX, 0, 0);
    expect_open("empty.safetensors", SD_OK, NULL);
    write_st("scalar.safetensors", "{\"s\": {\"dtype\": \"F16\", \"shape\": [], \"data_offsets\": [0, 2]}}", true,
             UINT64_MAX, 2, 0);
    expect_open("scalar.safetensors", SD_OK, NULL);
}
END_TEST

/* --- corrupt files ------------------------------------------------------------------- */

START_TEST(test_truncated)
{
    write_st("short.safetensors", GOOD_HDR, true, UINT64_MAX, 32, 5);
    expect_open("short.safetensors", SD_ERR_FORMAT, "too short");
    write_st("zero.safetensors", GOOD_HDR, true, UINT64_MAX, 32, 1);
    expect_open("zero.safetensors", SD_ERR_FORMAT, "too short");
    write_st("cut_header.safetensors", GOOD_HDR, true, UINT64_MAX, 32, 8 + 40);
    expect_open("cut_header.safetensors", SD_ERR_FORMAT, "header length");
    size_t full = 8 + (strlen(GOOD_HDR) + 7) / 8 * 8 + 32;
    write_st("cut_data.safetensors", GOOD_HDR, true, UINT64_MAX, 32, full - 4);
    expect_open("cut_data.safetensors", SD_ERR_FORMAT, "\"b\"");
    char path[256], err[256];
    sd_st *st = NULL;
    ck_assert_int_eq(sd_st_open_file(tmp_path(path, sizeof path, "absent.safetensors"), &st, err, sizeof err),
                     SD_ERR_IO);
    ck_assert_ptr_nonnull(strstr(err, "absent.safetensors"));
    ck_assert_int_eq(sd_st_open_file(g_dir, &st, err, sizeof err), SD_ERR_IO); /* a directory */
}
END_TEST

START_TEST(test_header_length)
{
    write_st("long.safetensors", GOOD_HDR, true, 100000, 32, 0);
    expect_open("long.safetensors", SD_ERR_FORMAT, "exceeds the file");
    write_st("huge.safetensors", GOOD_HDR, true, (uint64_t)200 << 20, 32, 0);
    expect_open("huge.safetensors", SD_ERR_FORMAT, "100 MiB");
    write_st("max.safetensors", GOOD_HDR, true, UINT64_MAX - 1, 32, 0);
    expect_open("max.safetensors", SD_ERR_FORMAT, "100 MiB");
    write_st("nohdr.safetensors", GOOD_HDR, true, 0, 32, 0);
    expect_open("nohdr.safetensors", SD_ERR_FORMAT, "JSON");
}
END_TEST

typedef struct {
    const char *header;
    size_t ndata;
    sd_status want;
    const char *needle;
} hdr_case;

static const hdr_case k_hdr[] = {
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2, 3], \"data_offsets\": [0, 24]", 24, SD_ERR_FORMAT, "JSON"},
    {"not json at all", 0, SD_ERR_FORMAT, "JSON"},
    {"[1, 2, 3]", 0, SD_ERR_FORMAT, "JSON object"},
    {"{\"w\": 5}", 0, SD_ERR_FORMAT, "\"w\""},
    {"{\"w\": {\"shape\": [2], \"data_offsets\": [0, 8]}}", 8, SD_ERR_FORMAT, "dtype"},
    {"{\"w\": {\"dtype\": 3, \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, SD_ERR_FORMAT, "dtype"},
    {"{\"w\": {\"dtype\": \"Q7\", \"shape\": [2], \"data_offsets\": [0, 8]}}", 8, SD_ERR_FORMAT, "Q7"},
    {"{\"ids\": {\"dtype\": \"I64\", \"shape\": [2], \"data_offsets\": [0, 16]}}", 16, SD_ERR_UNSUPPORTED, "I64"},
    {"{\"q\": {\"dtype\": \"F8_E4M3\", \"shape\": [2], \"data_offsets\": [0, 2]}}", 8, SD_ERR_UNSUPPORTED, "\"q\""},
    {"{\"w\": {\"dtype\": \"F32\", \"data_offsets\": [0, 8]}}", 8, SD_ERR_FORMAT, "shape"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}}", 8, SD_ERR_FORMAT, "shape[0]"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 8]}}", 8, SD_ERR_FORMAT, "shape[0]"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [1, 1, 1, 1, 2], \"data_offsets\": [0, 8]}}", 8, SD_ERR_UNSUPPORTED,
     "dimensions"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [4294967296, 4294967296, 4], \"data_offsets\": [0, 8]}}", 8,
     SD_ERR_FORMAT, "overflow"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2]}}", 8, SD_ERR_FORMAT, "data_offsets"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}}", 8, SD_ERR_FORMAT, "data_offsets"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, -8]}}", 8, SD_ERR_FORMAT, "data_offsets"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 0]}}", 8, SD_ERR_FORMAT, "outside"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}", 8, SD_ERR_FORMAT, "outside"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 99999999999]}}", 8, SD_ERR_FORMAT, "outside"},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [3], \"data_offsets\": [0, 8]}}", 16, SD_ERR_FORMAT, "needs 12"},
    {"{\"w\": {\"dtype\": \"BF16\", \"shape\": [2, 2], \"data_offsets\": [0, 16]}}", 16, SD_ERR_FORMAT, "\"w\""},
    {"{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [2, 10]}}", 16, SD_ERR_UNSUPPORTED, "aligned"},
    {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
     "\"b\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [4, 12]}}",
     16, SD_ERR_FORMAT, "overlap"},
    {"{\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
     "\"a\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [8, 16]}}",
     16, SD_ERR_FORMAT, "JSON"},
};
#define N_HDR ((int)(sizeof k_hdr / sizeof k_hdr[0]))

START_TEST(test_bad_headers)
{
    const hdr_case *c = &k_hdr[_i];
    char name[64];
    snprintf(name, sizeof name, "bad%d.safetensors", _i);
    write_st(name, c->header, true, UINT64_MAX, c->ndata, 0);
    expect_open(name, c->want, c->needle);
}
END_TEST

START_TEST(test_misaligned_header)
{
    /* unpadded header of odd length: F32 data would start at an odd file offset */
    char h[128] = "{\"w\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}";
    if (strlen(h) % 2 == 0) strcat(h, " ");
    write_st("odd.safetensors", h, false, UINT64_MAX, 8, 0);
    expect_open("odd.safetensors", SD_ERR_UNSUPPORTED, "aligned");
}
END_TEST

/* --- sharded ---------------------------------------------------------------------- */

#define SHARD_A "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}}"
#define SHARD_B "{\"y\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [0, 8]}}"

static void write_index(const char *weight_map)
{
    char path[256], text[1024];
    snprintf(text, sizeof text, "{\"metadata\": {\"total_size\": 16}, \"weight_map\": %s}", weight_map);
    write_bytes(tmp_path(path, sizeof path, "model.safetensors.index.json"), text, strlen(text));
}

static void expect_open_dir(sd_status want, const char *needle)
{
    char err[512] = "";
    sd_st *st = (sd_st *)0x1;
    sd_status rc = sd_st_open_dir(g_dir, &st, err, sizeof err);
    ck_assert_msg(rc == want, "got %d (%s), want %d", rc, err, want);
    if (want != SD_OK) {
        ck_assert_ptr_null(st);
        ck_assert_msg(strstr(err, needle), "message \"%s\" lacks \"%s\"", err, needle);
    } else {
        ck_assert_uint_eq(sd_st_count(st), 2);
        ck_assert_ptr_nonnull(sd_st_find(st, "x"));
        ck_assert_ptr_nonnull(sd_st_find(st, "y"));
    }
    sd_st_free(st);
}

START_TEST(test_sharded_errors)
{
    expect_open_dir(SD_ERR_IO, "model.safetensors"); /* empty dir */
    write_st("a.safetensors", SHARD_A, true, UINT64_MAX, 8, 0);
    write_st("b.safetensors", SHARD_B, true, UINT64_MAX, 8, 0);
    write_index("{\"x\": \"a.safetensors\", \"y\": \"b.safetensors\"}");
    expect_open_dir(SD_OK, NULL);
    write_index("{\"x\": \"a.safetensors\", \"y\": \"b.safetensors\", \"z\": \"b.safetensors\"}");
    expect_open_dir(SD_ERR_FORMAT, "\"z\"");
    write_index("{\"x\": \"a.safetensors\", \"y\": \"a.safetensors\"}");
    expect_open_dir(SD_ERR_FORMAT, "\"y\"");
    write_index("{\"x\": \"a.safetensors\", \"y\": \"c.safetensors\"}");
    expect_open_dir(SD_ERR_IO, "c.safetensors");
    write_index("{\"x\": \"a.safetensors\", \"y\": \"../b.safetensors\"}");
    expect_open_dir(SD_ERR_FORMAT, "\"y\"");
    write_index("{\"x\": \"a.safetensors\", \"y\": 7}");
    expect_open_dir(SD_ERR_FORMAT, "\"y\"");
    write_index("{}");
    expect_open_dir(SD_ERR_FORMAT, "weight_map");
    write_index("{\"x\": \"a.safetensors\", ");
    expect_open_dir(SD_ERR_FORMAT, "index.json");
    /* the same tensor in two shards */
    write_st("b.safetensors",
             "{\"x\": {\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, 8]}, "
             "\"y\": {\"dtype\": \"BF16\", \"shape\": [4], \"data_offsets\": [8, 16]}}",
             true, UINT64_MAX, 16, 0);
    write_index("{\"x\": \"a.safetensors\", \"y\": \"b.safetensors\"}");
    expect_open_dir(SD_ERR_FORMAT, "twice");
    /* a corrupt shard is reported with its file name */
    write_st("b.safetensors", SHARD_B, true, UINT64_MAX, 8, 12);
    expect_open_dir(SD_ERR_FORMAT, "b.safetensors");
}
END_TEST

START_TEST(test_get_args)
{
    char err[128];
    const sd_tensor *t = (const sd_tensor *)0x1;
    ck_assert_int_eq(sd_st_get(NULL, "x", 0, NULL, &t, err, sizeof err), SD_ERR_ARG);
    ck_assert_ptr_null(t);
    ck_assert_ptr_null(sd_st_find(NULL, "x"));
    ck_assert_uint_eq(sd_st_count(NULL), 0);
    ck_assert_ptr_null(sd_st_at(NULL, 0));
    sd_st *st = (sd_st *)0x1;
    ck_assert_int_eq(sd_st_open_file(NULL, &st, err, sizeof err), SD_ERR_ARG);
    ck_assert_int_eq(sd_st_open_dir(NULL, &st, err, sizeof err), SD_ERR_ARG);
}
END_TEST

/* --- conversion ------------------------------------------------------------------ */

static uint32_t f32_bits(float f)
{
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

START_TEST(test_bf16)
{
    const uint16_t in[] = {0x3F80, 0xC000, 0x0000, 0x8000, 0x7F80, 0xFF80, 0x7FC1, 0x0001, 0x3EAB};
    float out[9];
    sd_convert_to_f32(SD_DTYPE_BF16, in, out, 9);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], -2.0f);
    ck_assert_uint_eq(f32_bits(out[2]), 0);
    ck_assert_uint_eq(f32_bits(out[3]), 0x80000000u);
    ck_assert(isinf(out[4]) && out[4] > 0);
    ck_assert(isinf(out[5]) && out[5] < 0);
    ck_assert(isnan(out[6]));
    ck_assert_uint_eq(f32_bits(out[6]), 0x7FC10000u);
    ck_assert_uint_eq(f32_bits(out[7]), 0x00010000u); /* f32 subnormal */
    ck_assert_uint_eq(f32_bits(out[8]), 0x3EAB0000u);
}
END_TEST

START_TEST(test_f16)
{
    const uint16_t in[] = {0x3C00, 0xC000, 0x0000, 0x8000, 0x7C00, 0xFC00, 0x7E00, 0x0001,
                           0x03FF, 0x0400, 0x7BFF, 0x3555, 0x8001, 0x0200, 0x7C01};
    float out[15];
    sd_convert_to_f32(SD_DTYPE_F16, in, out, 15);
    ck_assert_float_eq(out[0], 1.0f);
    ck_assert_float_eq(out[1], -2.0f);
    ck_assert_uint_eq(f32_bits(out[2]), 0);
    ck_assert_uint_eq(f32_bits(out[3]), 0x80000000u);
    ck_assert(isinf(out[4]) && out[4] > 0);
    ck_assert(isinf(out[5]) && out[5] < 0);
    ck_assert(isnan(out[6]));
    ck_assert_float_eq(out[7], ldexpf(1.0f, -24));        /* smallest subnormal */
    ck_assert_float_eq(out[8], 1023 * ldexpf(1.0f, -24)); /* largest subnormal */
    ck_assert_float_eq(out[9], ldexpf(1.0f, -14));        /* smallest normal */
    ck_assert_float_eq(out[10], 65504.0f);
    ck_assert_float_eq(out[11], 0.333251953125f);
    ck_assert_float_eq(out[12], -ldexpf(1.0f, -24));
    ck_assert_float_eq(out[13], ldexpf(1.0f, -15));
    ck_assert(isnan(out[14]));
#ifdef __FLT16_MAX__
    /* all 65536 patterns against the compiler's own conversion */
    for (uint32_t i = 0; i < 65536; i++) {
        uint16_t h = (uint16_t)i;
        _Float16 x;
        memcpy(&x, &h, 2);
        float ref = (float)x, got;
        sd_convert_to_f32(SD_DTYPE_F16, &h, &got, 1);
        if (isnan(ref)) ck_assert_msg(isnan(got), "0x%04x", i);
        else ck_assert_msg(f32_bits(got) == f32_bits(ref), "0x%04x: %a vs %a", i, got, ref);
    }
#endif
}
END_TEST

START_TEST(test_f32_copy_unaligned)
{
    float src[3] = {1.5f, -0.0f, 3e-40f}, dst[3];
    sd_convert_to_f32(SD_DTYPE_F32, src, dst, 3);
    ck_assert_int_eq(memcmp(src, dst, sizeof src), 0);
    uint8_t raw[5] = {0, 0x80, 0x3F, 0x00, 0x40}; /* bf16 1.0, 2.0 at an odd address */
    float two[2];
    sd_convert_to_f32(SD_DTYPE_BF16, raw + 1, two, 2);
    ck_assert_float_eq(two[0], 1.0f);
    ck_assert_float_eq(two[1], 2.0f);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("safetensors");
    TCase *fx = tcase_create("fixtures");
    tcase_add_test(fx, test_fixture_f32);
    tcase_add_test(fx, test_fixture_sharded_bf16);
    tcase_add_test(fx, test_demo_model);
    tcase_add_test(fx, test_get_args);
    suite_add_tcase(s, fx);
    TCase *bad = tcase_create("corrupt");
    tcase_add_checked_fixture(bad, tmp_setup, tmp_teardown);
    tcase_add_test(bad, test_synthetic_ok);
    tcase_add_test(bad, test_truncated);
    tcase_add_test(bad, test_header_length);
    tcase_add_loop_test(bad, test_bad_headers, 0, N_HDR);
    tcase_add_test(bad, test_misaligned_header);
    tcase_add_test(bad, test_sharded_errors);
    suite_add_tcase(s, bad);
    TCase *cv = tcase_create("convert");
    tcase_add_test(cv, test_bf16);
    tcase_add_test(cv, test_f16);
    tcase_add_test(cv, test_f32_copy_unaligned);
    suite_add_tcase(s, cv);
    return s;
}

int main(void) { return tu_run_suite(suite()); }
