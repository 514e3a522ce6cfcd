/* safetensors.h — memory-mapped safetensors checkpoints.
 *
 * Opens a single model.safetensors or a sharded checkpoint described by
 * model.safetensors.index.json. Every shard is mmap'd read-only; tensor data
 * pointers stay valid until sd_st_free. Headers are validated strictly:
 * truncated file, header length beyond the file or above 100 MiB, bad JSON,
 * unknown dtype, offsets out of range or overlapping the wrong size, shape /
 * byte-count mismatch are all reported as SD_ERR_FORMAT with a message that
 * names the file and tensor.
 *
 * Tensors come back as sd_tensor views (kernels/tensor.h): the on-disk dtype
 * names F32, F16 and BF16 map onto sd_dtype; every other dtype is refused. */
#ifndef SD_SAFETENSORS_H
#define SD_SAFETENSORS_H

#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "tensor.h"

typedef struct sd_st sd_st;

/* Opens one .safetensors file. On success *out owns the mapping. */
sd_status sd_st_open_file(const char *path, sd_st **out, char *err, size_t errlen);

/* Opens DIR/model.safetensors.index.json (all shards it names) if present,
 * otherwise DIR/model.safetensors. A tensor listed in the index but missing
 * from its shard is an error. */
sd_status sd_st_open_dir(const char *dir, sd_st **out, char *err, size_t errlen);

/* Looks a tensor up by name; NULL when absent. */
const sd_tensor *sd_st_find(const sd_st *st, const char *name);

/* Looks a tensor up and checks dtype-independent shape: ndim and each dim
 * must equal shape[0..ndim-1]. Returns SD_ERR_NOTFOUND (missing) or
 * SD_ERR_FORMAT (mis-shaped) with a message naming the tensor, expected and
 * actual shape. */
sd_status sd_st_get(const sd_st *st, const char *name, int ndim, const int64_t *shape, const sd_tensor **out, char *err,
                    size_t errlen);

size_t sd_st_count(const sd_st *st);
const sd_tensor *sd_st_at(const sd_st *st, size_t i);

/* Unmaps everything. sd_st_free(NULL) is a no-op. */
void sd_st_free(sd_st *st);

#endif
