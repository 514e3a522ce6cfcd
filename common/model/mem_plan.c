/* mem_plan.c — a worker's KV cache sized from its device's memory (mem_plan.h). */
#include "mem_plan.h"

#include <stdio.h>

size_t sd_mem_kv_bytes(const sd_mem_plan *p)
{
    size_t held = p->free_at_start > p->free_now ? p->free_at_start - p->free_now : 0;
    double share = p->fraction * (double)p->total - (double)held - (double)p->reserve;
    double avail = (double)p->free_now - (double)p->reserve;
    double kv = share < avail ? share : avail;
    return kv > 0 ? (size_t)kv : 0;
}

size_t sd_mem_free_now(sd_backend *be)
{
    size_t free_b = 0, total = 0;
    if (!be || !be->ops->mem_info || be->ops->mem_info(be, &free_b, &total) != SD_OK) return 0;
    return free_b;
}

#define MIB(x) ((double)(x) / (1024.0 * 1024.0))

sd_status sd_mem_kv_blocks(const sd_model *m, double fraction, size_t free_at_start, int rows, int n_out,
                           int block_size, long min_blocks, long max_blocks, long *blocks, char *how, size_t howlen,
                           char *err, size_t errlen)
{
    sd_backend *be = sd_model_backend(m);
    sd_mem_plan p = {.free_at_start = free_at_start, .fraction = fraction};
    if (!be->ops->mem_info) return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "host memory: no device plan");
    if (be->ops->mem_info(be, &p.free_now, &p.total) != SD_OK)
        return sd_seterr(err, errlen, SD_ERR_DEVICE, "cannot read the device's free memory");
    if (!(fraction > 0 && fraction <= 1))
        return sd_seterr(err, errlen, SD_ERR_ARG, "memory fraction %g is not in (0, 1]", fraction);
    p.reserve = sd_model_scratch_bytes(m, rows, n_out) + SD_MEM_SLACK;
    size_t kv = sd_mem_kv_bytes(&p);
    size_t per_block = sd_model_kv_bytes_per_position(m) * (size_t)block_size;
    long n = (long)(kv / per_block);
    if (max_blocks > 0 && n > max_blocks) n = max_blocks;
    size_t held = free_at_start > p.free_now ? free_at_start - p.free_now : 0;
    snprintf(how, howlen,
             "%.0f of %.0f MiB under fraction %.2f: taken since start-up %.0f MiB (weights, buffers; another process's "
             "allocations meanwhile too), work buffers and slack %.0f MiB, "
             "free %.0f MiB, KV cache %.0f MiB (%ld blocks)",
             fraction * MIB(p.total), MIB(p.total), fraction, MIB(held), MIB(p.reserve), MIB(p.free_now),
             MIB((double)n * per_block), n);
    if (n < min_blocks)
        return sd_seterr(err, errlen, SD_ERR_NOMEM,
                         "device memory: %.0f MiB left for the KV cache (%.0f of %.0f MiB under fraction %.2f, "
                         "%.0f MiB held, %.0f MiB for work buffers, %.0f MiB free), %.0f MiB needed for %ld blocks "
                         "(one sequence of the full context); raise the memory fraction or free device memory",
                         MIB(kv), fraction * MIB(p.total), MIB(p.total), fraction, MIB(held), MIB(p.reserve),
                         MIB(p.free_now), MIB((double)min_blocks * per_block), min_blocks);
    *blocks = n;
    return SD_OK;
}
