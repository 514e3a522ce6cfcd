/* mem_plan.h — a worker's KV cache sized from its device's memory.
 *
 * As vLLM's --gpu-memory-utilization, per process: a worker may use
 * `fraction` of the device's total memory for all it holds — its weights
 * and buffers so far (measured: the memory free when its backend opened
 * minus the memory free after loading), the work buffers of its largest
 * pass and a slack for the libraries (cuBLAS workspace, CUDA graphs), and
 * its KV cache, which gets the rest. Other processes on the device count
 * only through the free memory: the cache never takes more than is free
 * once those buffers are set aside. Host memory (the CPU backend) is not
 * planned: the callers keep their context-based defaults there. */
#ifndef SD_MEM_PLAN_H
#define SD_MEM_PLAN_H

#include <stddef.h>

#include "model.h"
#include "status.h"

/* Set aside beyond the work buffers: cuBLAS workspace, recorded graphs,
 * allocator rounding. */
#define SD_MEM_SLACK ((size_t)256 << 20)

typedef struct sd_mem_plan {
    size_t total;         /* the device's memory */
    size_t free_at_start; /* free when the worker's backend opened */
    size_t free_now;      /* free after the model was loaded */
    double fraction;      /* of total, for this process (0 < fraction <= 1) */
    size_t reserve;       /* still to be allocated besides the cache (work buffers + slack) */
} sd_mem_plan;

/* Bytes the plan leaves for the KV cache: min(fraction * total - held -
 * reserve, free_now - reserve), held = free_at_start - free_now; 0 when
 * nothing is left. */
size_t sd_mem_kv_bytes(const sd_mem_plan *p);

/* Blocks of block_size positions for m's KV cache (at its KV element type)
 * on m's device under `fraction`: the plan above with the work buffers of a
 * pass of `rows` rows and n_out logits rows, capped at max_blocks (0: no
 * cap). free_at_start: the device's free memory when the backend opened.
 * SD_ERR_UNSUPPORTED when the backend has no mem_info (host memory);
 * SD_ERR_NOMEM, with a message saying what does not fit, when fewer than
 * min_blocks fit. `how` gets a summary for the log. */
sd_status sd_mem_kv_blocks(const sd_model *m, double fraction, size_t free_at_start, int rows, int n_out,
                           int block_size, long min_blocks, long max_blocks, long *blocks, char *how, size_t howlen,
                           char *err, size_t errlen);

/* The device's free memory now (0 without mem_info or on error): call right
 * after the backend opens, for sd_mem_kv_blocks' free_at_start. */
size_t sd_mem_free_now(sd_backend *be);

#endif
