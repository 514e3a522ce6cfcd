/* safetensors.h — memory-mapped safetensors checkpoints.
 *
 * Opens a single model.safetensors or a sharded checkpoint described by
 * model.safetensors.index.json. Every shard is mmap'd read-only; tensor data
 * pointers stay valid until sd_st_free. Headers are validated strictly:
 * truncated file, header length beyond the file or above 100 MiB, bad JSON,
 * unknown dtype, offsets out of range or overlapping the wrong size, shape /
 * byte-count mismatch are all reported as SD_ERR_FORMAT with a message that
 * names the file and tensor. */
#ifndef SD_SAFETENSORS_H
#define SD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"

typedef enum {
    SD_DTYPE_F32 = 0,
    SD_DTYPE_F16 = 1,
    SD_DTYPE_BF16 = 2,
    SD_DTYPE_Q8 = 3, /* backend only, never in a file: int8 rows + per-row scales (kernels/cpu/cpu_q8.h) */
} sd_dtype;

#define SD_ST_MAX_DIMS 4

typedef struct sd_st_tensor {
    const char *name;              /* owned by the sd_st */
    sd_dtype dtype;
    int ndim;
    int64_t shape[SD_ST_MAX_DIMS];
    const void *data;              /* points into the mmap */
    size_t nbytes;
} sd_st_tensor;

typedef struct sd_st sd_st;

/* Returns the size in bytes of one element of dtype. */
size_t sd_dtype_size(sd_dtype dt);
const char *sd_dtype_name(sd_dtype dt);

/* Opens one .safetensors file. On success *out owns the mapping. */
sd_status sd_st_open_file(const char *path, sd_st **out, char *err, size_t errlen);

/* Opens DIR/model.safetensors.index.json (all shards it names) if present,
 * otherwise DIR/model.safetensors. A tensor listed in the index but missing
 * from its shard is an error. */
sd_status sd_st_open_dir(const char *dir, sd_st **out, char *err, size_t errlen);

/* Looks a tensor up by name; NULL when absent. */
const sd_st_tensor *sd_st_find(const sd_st *st, const char *name);

/* Looks a tensor up and checks dtype-independent shape: ndim and each dim
 * must equal shape[0..ndim-1]. Returns SD_ERR_NOTFOUND (missing) or
 * SD_ERR_FORMAT (mis-shaped) with a message naming the tensor, expected and
 * actual shape. */
sd_status sd_st_get(const sd_st *st, const char *name, int ndim, const int64_t *shape,
                    const sd_st_tensor **out, char *err, size_t errlen);

size_t sd_st_count(const sd_st *st);
const sd_st_tensor *sd_st_at(const sd_st *st, size_t i);

/* Unmaps everything. sd_st_free(NULL) is a no-op. */
void sd_st_free(sd_st *st);

/* Converts n elements of dtype at src to float32 (exact for bf16/f16). */
void sd_convert_to_f32(sd_dtype dt, const void *src, float *dst, size_t n);

#endif
