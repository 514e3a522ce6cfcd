/* threadpool.h — a fork/join pool for the CPU kernels.
 *
 * sd_pool_run(pool, fn, ctx) calls fn(ctx, i, n) once for every thread index
 * i in [0, n) — index 0 on the calling thread — and returns when all are
 * done. Workers spin briefly between runs (a decode step issues many small
 * runs back to back), then sleep on a condition variable. One thread at a
 * time may call sd_pool_run (the model owner). */
#ifndef SD_THREADPOOL_H
#define SD_THREADPOOL_H

#include <stddef.h>

#include "status.h"

typedef struct sd_pool sd_pool;
typedef void (*sd_pool_fn)(void *ctx, int i, int n);

/* A pool of n_threads threads (including the caller; below 1 counts as 1)
 * in *out, freed with sd_pool_free. Returns SD_OK, or SD_ERR_NOMEM with a
 * message in err when memory or a worker thread cannot be had; *out is NULL
 * then. */
sd_status sd_pool_new(int n_threads, sd_pool **out, char *err, size_t errlen);
void sd_pool_run(sd_pool *pool, sd_pool_fn fn, void *ctx);
int sd_pool_size(const sd_pool *pool);
/* Joins the workers; NULL is a no-op. */
void sd_pool_free(sd_pool *pool);

/* Splits [0, total) into n near-equal contiguous ranges aligned to `align`;
 * writes thread i's range to [*lo, *hi). */
void sd_split_range(int total, int align, int i, int n, int *lo, int *hi);

#endif
