/* safetensors.c — memory-mapped, strictly validated safetensors (see safetensors.h).
 *
 * File layout: u64 little-endian header length N, N bytes of JSON header
 * {"name": {"dtype", "shape", "data_offsets": [begin, end]}, "__metadata__": {...}},
 * then the data buffer; offsets are relative to the start of the data buffer.
 *
 * Every shard is mmap'd read-only (MAP_PRIVATE) and stays mapped until
 * sd_st_free. The header is parsed with jansson and every entry is checked
 * before any pointer into the mapping is handed out: dtype supported, shape
 * sane, offsets inside the data buffer, byte count equal to the shape's,
 * data aligned to its element size, no two tensors overlapping, no name twice.
 * Tensors of all shards live in one array sorted by name (bsearch lookup).
 *
 * An sd_st is immutable after open: concurrent readers need no locking. */
#include "safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "array.h"

#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "safetensors data is little-endian; big-endian hosts are not supported"
#endif

#define ST_MAX_HEADER ((uint64_t)100 << 20) /* 100 MiB, as in the reference implementation */

typedef struct {
    char *path; /* as opened; used in messages */
    char *name; /* file name as the index spells it (== path for single files) */
    void *map;
    size_t map_size;
} st_shard;

typedef struct {
    sd_tensor t; /* first member: sd_st_at/sd_st_find return &entry->t */
    size_t shard;
    uint64_t begin; /* offset in the shard's data buffer (overlap check) */
} st_entry;

struct sd_st {
    st_shard *shards;
    size_t n_shards;
    st_entry *entries; /* sorted by name once open succeeds */
    size_t n, cap;
};

/* Maps a header dtype string. Returns SD_OK, SD_ERR_UNSUPPORTED (a real
 * safetensors dtype we do not load) or SD_ERR_FORMAT (not a dtype at all). */
static sd_status dtype_parse(const char *s, sd_dtype *out)
{
    static const char *other[] = {"F64",  "I64",     "I32",     "I16",     "I8",   "U64",     "U32",     "U16", "U8",
                                  "BOOL", "F8_E4M3", "F8_E5M2", "F8_E8M0", "E8M0", "F6_E2M3", "F6_E3M2", "F4",  "C64"};
    if (strcmp(s, "F32") == 0) *out = SD_DTYPE_F32;
    else if (strcmp(s, "F16") == 0) *out = SD_DTYPE_F16;
    else if (strcmp(s, "BF16") == 0) *out = SD_DTYPE_BF16;
    else {
        for (size_t i = 0; i < sizeof other / sizeof other[0]; i++)
            if (strcmp(s, other[i]) == 0) return SD_ERR_UNSUPPORTED;
        return SD_ERR_FORMAT;
    }
    return SD_OK;
}

/* --- shards ------------------------------------------------------------------ */

/* mmaps path read-only into a new shard slot of st. */
static sd_status map_shard(sd_st *st, const char *path, const char *name, char *err, size_t errlen)
{
    st_shard *grown = realloc(st->shards, (st->n_shards + 1) * sizeof *grown);
    if (!grown) return sd_seterr(err, errlen, SD_ERR_NOMEM, "%s: out of memory", path);
    st->shards = grown;
    st_shard *sh = &st->shards[st->n_shards];
    memset(sh, 0, sizeof *sh);
    sh->path = strdup(path);
    sh->name = strdup(name);
    st->n_shards++; /* counted now so sd_st_free releases the strings */
    if (!sh->path || !sh->name) return sd_seterr(err, errlen, SD_ERR_NOMEM, "%s: out of memory", path);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) return sd_seterr(err, errlen, SD_ERR_IO, "%s: cannot open: %s", path, strerror(errno));
    struct stat sb;
    sd_status rc = SD_OK;
    if (fstat(fd, &sb) != 0) {
        rc = sd_seterr(err, errlen, SD_ERR_IO, "%s: cannot stat: %s", path, strerror(errno));
    } else if (!S_ISREG(sb.st_mode)) {
        rc = sd_seterr(err, errlen, SD_ERR_IO, "%s: not a regular file", path);
    } else if (sb.st_size < 8) {
        rc = sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: file is %lld bytes, too short for the 8-byte header length",
                       path, (long long)sb.st_size);
    } else {
        void *m = mmap(NULL, (size_t)sb.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
        if (m == MAP_FAILED) {
            rc = sd_seterr(err, errlen, SD_ERR_IO, "%s: mmap failed: %s", path, strerror(errno));
        } else {
            sh->map = m;
            sh->map_size = (size_t)sb.st_size;
        }
    }
    close(fd);
    return rc;
}

static sd_status push_entry(sd_st *st, const st_entry *e)
{
    if (sd_grow(&st->entries, &st->cap, st->n + 1, sizeof *st->entries) != SD_OK) return SD_ERR_NOMEM;
    st->entries[st->n++] = *e;
    return SD_OK;
}

/* Reads a JSON integer >= 0 into *out. */
static bool get_u64(json_t *v, uint64_t *out)
{
    if (!json_is_integer(v) || json_integer_value(v) < 0) return false;
    *out = (uint64_t)json_integer_value(v);
    return true;
}

static sd_status parse_shape(const char *path, const char *name, json_t *shape, st_entry *e, uint64_t *numel, char *err,
                             size_t errlen)
{
    if (!json_is_array(shape))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: tensor \"%s\": missing or non-list \"shape\"", path, name);
    if (json_array_size(shape) > SD_TENSOR_MAX_DIMS)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "%s: tensor \"%s\": %zu dimensions (at most %d supported)",
                         path, name, json_array_size(shape), SD_TENSOR_MAX_DIMS);
    e->t.ndim = (int)json_array_size(shape);
    *numel = 1;
    for (int i = 0; i < e->t.ndim; i++) {
        uint64_t d;
        if (!get_u64(json_array_get(shape, (size_t)i), &d))
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: tensor \"%s\": shape[%d] is not a non-negative integer",
                             path, name, i);
        if (__builtin_mul_overflow(*numel, d, numel))
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: tensor \"%s\": shape overflows", path, name);
        e->t.shape[i] = (int64_t)d;
    }
    return SD_OK;
}

/* Validates one header entry against the shard's data buffer. */
static sd_status parse_entry(const char *path, const char *name, json_t *v, const uint8_t *data, uint64_t data_size,
                             uint64_t data_pos, st_entry *e, char *err, size_t errlen)
{
    if (!json_is_object(v))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: tensor \"%s\": entry is not an object", path, name);
    json_t *dt = json_object_get(v, "dtype");
    if (!json_is_string(dt))
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: tensor \"%s\": missing or non-string \"dtype\"", path, name);
    sd_status rc = dtype_parse(json_string_value(dt), &e->t.dtype);
    if (rc != SD_OK)
        return sd_seterr(err, errlen, rc, "%s: tensor \"%s\": %s dtype \"%s\" (only F32, F16, BF16)", path, name,
                         rc == SD_ERR_UNSUPPORTED ? "unsupported" : "unknown", json_string_value(dt));
    uint64_t numel = 0, nbytes = 0;
    if ((rc = parse_shape(path, name, json_object_get(v, "shape"), e, &numel, err, errlen)) != SD_OK) return rc;
    json_t *off = json_object_get(v, "data_offsets");
    uint64_t begin, end;
    if (!json_is_array(off) || json_array_size(off) != 2 || !get_u64(json_array_get(off, 0), &begin) ||
        !get_u64(json_array_get(off, 1), &end))
        return sd_seterr(err, errlen, SD_ERR_FORMAT,
                         "%s: tensor \"%s\": \"data_offsets\" must be [begin, end] non-negative integers", path, name);
    if (begin > end || end > data_size)
        return sd_seterr(err, errlen, SD_ERR_FORMAT,
                         "%s: tensor \"%s\": data_offsets [%llu, %llu] outside the %llu-byte data buffer", path, name,
                         (unsigned long long)begin, (unsigned long long)end, (unsigned long long)data_size);
    size_t esz = sd_dtype_size(e->t.dtype);
    if (__builtin_mul_overflow(numel, (uint64_t)esz, &nbytes) || nbytes != end - begin)
        return sd_seterr(err, errlen, SD_ERR_FORMAT,
                         "%s: tensor \"%s\": data_offsets span %llu bytes but shape x %s needs %llu", path, name,
                         (unsigned long long)(end - begin), sd_dtype_name(e->t.dtype), (unsigned long long)nbytes);
    if ((data_pos + begin) % esz != 0)
        return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED,
                         "%s: tensor \"%s\": data at file offset %llu is not aligned to its %zu-byte elements", path,
                         name, (unsigned long long)(data_pos + begin), esz);
    e->t.data = data + begin;
    e->t.nbytes = (size_t)nbytes;
    e->begin = begin;
    return SD_OK;
}

static int cmp_begin(const void *a, const void *b)
{
    const st_entry *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin;
}

/* Checks that the shard's entries [first, st->n) do not overlap. */
static sd_status check_overlap(sd_st *st, size_t first, const char *path, char *err, size_t errlen)
{
    if (st->n - first < 2) return SD_OK;
    qsort(st->entries + first, st->n - first, sizeof *st->entries, cmp_begin);
    for (size_t i = first + 1; i < st->n; i++) {
        const st_entry *p = &st->entries[i - 1], *q = &st->entries[i];
        if (p->begin + p->t.nbytes > q->begin)
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: tensors \"%s\" and \"%s\" overlap in the data buffer",
                             path, p->t.name, q->t.name);
    }
    return SD_OK;
}

/* Parses the header of the last mapped shard and appends its tensors. */
static sd_status load_header(sd_st *st, char *err, size_t errlen)
{
    size_t si = st->n_shards - 1;
    const st_shard *sh = &st->shards[si];
    const uint8_t *p = sh->map;
    uint64_t n = 0;
    for (int i = 7; i >= 0; i--) n = (n << 8) | p[i];
    if (n > ST_MAX_HEADER)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: header length %llu exceeds the 100 MiB limit", sh->path,
                         (unsigned long long)n);
    if (n > sh->map_size - 8)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: header length %llu exceeds the file (%zu bytes; truncated?)",
                         sh->path, (unsigned long long)n, sh->map_size);
    json_error_t jerr;
    json_t *root = json_loadb((const char *)p + 8, (size_t)n, JSON_REJECT_DUPLICATES, &jerr);
    if (!root || !json_is_object(root)) {
        json_decref(root);
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: header is not a JSON object (%s)", sh->path,
                         root ? "wrong type" : jerr.text);
    }
    const char *key;
    json_t *val;
    size_t first = st->n;
    sd_status rc = SD_OK;
    json_object_foreach(root, key, val)
    {
        if (strcmp(key, "__metadata__") == 0) continue;
        st_entry e = {.shard = si};
        rc = parse_entry(sh->path, key, val, p + 8 + n, sh->map_size - 8 - n, 8 + n, &e, err, errlen);
        if (rc != SD_OK) break;
        if (!(e.t.name = strdup(key)) || push_entry(st, &e) != SD_OK) {
            free((char *)e.t.name);
            rc = sd_seterr(err, errlen, SD_ERR_NOMEM, "%s: out of memory", sh->path);
            break;
        }
    }
    json_decref(root);
    return rc != SD_OK ? rc : check_overlap(st, first, sh->path, err, errlen);
}

static int cmp_name(const void *a, const void *b)
{
    return strcmp(((const st_entry *)a)->t.name, ((const st_entry *)b)->t.name);
}

/* Sorts all tensors by name and rejects a name that appears twice. */
static sd_status finish(sd_st *st, char *err, size_t errlen)
{
    if (st->n < 2) return SD_OK;
    qsort(st->entries, st->n, sizeof *st->entries, cmp_name);
    for (size_t i = 1; i < st->n; i++)
        if (strcmp(st->entries[i - 1].t.name, st->entries[i].t.name) == 0)
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "tensor \"%s\" appears twice (%s and %s)",
                             st->entries[i].t.name, st->shards[st->entries[i - 1].shard].path,
                             st->shards[st->entries[i].shard].path);
    return SD_OK;
}

static st_entry *find_entry(const sd_st *st, const char *name)
{
    if (!st || !name || st->n == 0) return NULL;
    st_entry key = {.t = {.name = name}};
    return bsearch(&key, st->entries, st->n, sizeof *st->entries, cmp_name);
}

/* --- public: open ------------------------------------------------------------ */

sd_status sd_st_open_file(const char *path, sd_st **out, char *err, size_t errlen)
{
    if (!path || !out) return sd_seterr(err, errlen, SD_ERR_ARG, "safetensors: NULL argument");
    *out = NULL;
    sd_st *st = calloc(1, sizeof *st);
    if (!st) return sd_seterr(err, errlen, SD_ERR_NOMEM, "%s: out of memory", path);
    sd_status rc = map_shard(st, path, path, err, errlen);
    if (rc == SD_OK) rc = load_header(st, err, errlen);
    if (rc == SD_OK) rc = finish(st, err, errlen);
    if (rc != SD_OK) {
        sd_st_free(st);
        return rc;
    }
    *out = st;
    return SD_OK;
}

static sd_status index_shard_name(const char *idx, const char *tensor, json_t *v, char *err, size_t errlen)
{
    const char *f = json_is_string(v) ? json_string_value(v) : NULL;
    if (!f || !*f || strchr(f, '/') || strcmp(f, ".") == 0 || strcmp(f, "..") == 0)
        return sd_seterr(err, errlen, SD_ERR_FORMAT,
                         "%s: weight_map[\"%s\"] must be a shard file name in the same "
                         "directory",
                         idx, tensor);
    return SD_OK;
}

/* Maps every distinct shard named by weight_map, then checks each listed
 * tensor is present in the shard the index names. */
static sd_status load_index(sd_st *st, const char *dir, const char *idx, json_t *wm, char *err, size_t errlen)
{
    const char *tensor;
    json_t *v;
    char path[4096];
    json_object_foreach(wm, tensor, v)
    {
        sd_status rc = index_shard_name(idx, tensor, v, err, errlen);
        if (rc != SD_OK) return rc;
        bool seen = false;
        for (size_t i = 0; i < st->n_shards && !seen; i++) seen = strcmp(st->shards[i].name, json_string_value(v)) == 0;
        if (seen) continue;
        snprintf(path, sizeof path, "%s/%s", dir, json_string_value(v));
        if ((rc = map_shard(st, path, json_string_value(v), err, errlen)) != SD_OK ||
            (rc = load_header(st, err, errlen)) != SD_OK)
            return rc;
    }
    sd_status rc = finish(st, err, errlen);
    if (rc != SD_OK) return rc;
    json_object_foreach(wm, tensor, v)
    {
        const st_entry *e = find_entry(st, tensor);
        const char *want = json_string_value(v);
        if (!e)
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: tensor \"%s\" listed for shard %s is missing from it",
                             idx, tensor, want);
        if (strcmp(st->shards[e->shard].name, want) != 0)
            return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: tensor \"%s\" listed for shard %s is in %s instead", idx,
                             tensor, want, st->shards[e->shard].name);
    }
    return SD_OK;
}

static sd_status open_index(const char *dir, const char *idx, sd_st **out, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t *root = json_load_file(idx, JSON_REJECT_DUPLICATES, &jerr);
    if (!root)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: invalid JSON at line %d: %s", idx, jerr.line, jerr.text);
    json_t *wm = json_is_object(root) ? json_object_get(root, "weight_map") : NULL;
    sd_status rc = SD_OK;
    sd_st *st = NULL;
    if (!json_is_object(wm) || json_object_size(wm) == 0)
        rc = sd_seterr(err, errlen, SD_ERR_FORMAT, "%s: missing or empty \"weight_map\" object", idx);
    else if (!(st = calloc(1, sizeof *st))) rc = sd_seterr(err, errlen, SD_ERR_NOMEM, "%s: out of memory", idx);
    else rc = load_index(st, dir, idx, wm, err, errlen);
    json_decref(root);
    if (rc != SD_OK) {
        sd_st_free(st);
        return rc;
    }
    *out = st;
    return SD_OK;
}

sd_status sd_st_open_dir(const char *dir, sd_st **out, char *err, size_t errlen)
{
    if (!dir || !out) return sd_seterr(err, errlen, SD_ERR_ARG, "safetensors: NULL argument");
    *out = NULL;
    char idx[4096], single[4096];
    snprintf(idx, sizeof idx, "%s/model.safetensors.index.json", dir);
    snprintf(single, sizeof single, "%s/model.safetensors", dir);
    if (access(idx, F_OK) == 0) return open_index(dir, idx, out, err, errlen);
    if (access(single, F_OK) == 0) return sd_st_open_file(single, out, err, errlen);
    return sd_seterr(err, errlen, SD_ERR_IO, "%s: neither model.safetensors.index.json nor model.safetensors found",
                     dir);
}

/* --- public: lookup ------------------------------------------------------- */

const sd_tensor *sd_st_find(const sd_st *st, const char *name)
{
    const st_entry *e = find_entry(st, name);
    return e ? &e->t : NULL;
}

static void format_shape(char *buf, size_t n, int ndim, const int64_t *shape)
{
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < ndim && used < n; i++)
        used += (size_t)snprintf(buf + used, n - used, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}

sd_status sd_st_get(const sd_st *st, const char *name, int ndim, const int64_t *shape, const sd_tensor **out, char *err,
                    size_t errlen)
{
    if (out) *out = NULL;
    if (!st || !name || ndim < 0 || ndim > SD_TENSOR_MAX_DIMS || (ndim > 0 && !shape))
        return sd_seterr(err, errlen, SD_ERR_ARG, "sd_st_get: invalid argument");
    const sd_tensor *t = sd_st_find(st, name);
    if (!t) return sd_seterr(err, errlen, SD_ERR_NOTFOUND, "tensor \"%s\" not found in checkpoint", name);
    bool ok = t->ndim == ndim;
    for (int i = 0; ok && i < ndim; i++) ok = t->shape[i] == shape[i];
    if (!ok) {
        char want[128], got[128];
        format_shape(want, sizeof want, ndim, shape);
        format_shape(got, sizeof got, t->ndim, t->shape);
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "tensor \"%s\": expected shape %s, got %s", name, want, got);
    }
    if (out) *out = t;
    return SD_OK;
}

size_t sd_st_count(const sd_st *st) { return st ? st->n : 0; }

const sd_tensor *sd_st_at(const sd_st *st, size_t i) { return st && i < st->n ? &st->entries[i].t : NULL; }

void sd_st_free(sd_st *st)
{
    if (!st) return;
    for (size_t i = 0; i < st->n; i++) free((char *)st->entries[i].t.name);
    for (size_t i = 0; i < st->n_shards; i++) {
        if (st->shards[i].map) munmap(st->shards[i].map, st->shards[i].map_size);
        free(st->shards[i].path);
        free(st->shards[i].name);
    }
    free(st->entries);
    free(st->shards);
    free(st);
}
