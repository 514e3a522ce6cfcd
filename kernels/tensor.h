/* tensor.h — the element types and host tensor views every layer shares.
 *
 * The bottom layer owns these types: the backends (kernels/) take weights as
 * sd_tensor views, and the checkpoint reader (common/safetensors) maps the
 * dtypes written in a file onto sd_dtype. A view never owns its data. */
#ifndef SD_TENSOR_H
#define SD_TENSOR_H

#include <stddef.h>
#include <stdint.h>

typedef enum {
    SD_DTYPE_F32 = 0,
    SD_DTYPE_F16 = 1,
    SD_DTYPE_BF16 = 2,
    SD_DTYPE_Q8 = 3, /* backend storage only: int8 rows + per-row scales (kernels/cpu/cpu_q8.h) */
} sd_dtype;

#define SD_TENSOR_MAX_DIMS 4

/* A read-only view of a tensor in host memory (e.g. a checkpoint mapping). */
typedef struct sd_tensor {
    const char *name; /* for messages; owned by whoever made the view */
    sd_dtype dtype;
    int ndim;
    int64_t shape[SD_TENSOR_MAX_DIMS]; /* row-major, outermost first */
    const void *data;                  /* ndim-product elements of dtype */
    size_t nbytes;
} sd_tensor;

/* Returns the size in bytes of one element of dtype (Q8: 1, the int8 value). */
size_t sd_dtype_size(sd_dtype dt);

/* "F32", "F16", "BF16", "Q8"; "?" for anything else. */
const char *sd_dtype_name(sd_dtype dt);

/* Converts n elements of dtype at src (F32, F16 or BF16) to float32, exactly;
 * a Q8 source converts nothing (it needs its scales: see cpu_q8.h). */
void sd_convert_to_f32(sd_dtype dt, const void *src, float *dst, size_t n);

#endif
