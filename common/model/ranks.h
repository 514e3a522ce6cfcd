/* ranks.h — the threads of a tensor-parallel group in one process: one
 * worker thread for each rank but rank 0, which runs on the caller's thread.
 * sd_ranks_run hands each rank the same call and returns when all are done:
 * the ranks of a forward pass compute their shards at once and meet in
 * their communicator's exchanges (kernels/comm.h).
 *
 * Threading: one caller at a time (the model's owner thread). */
#ifndef SD_RANKS_H
#define SD_RANKS_H

#include <stddef.h>

#include "status.h"

typedef struct sd_ranks sd_ranks;

/* n ranks: n - 1 worker threads (n >= 1). SD_ERR_NOMEM with a message when a
 * thread or memory cannot be had; *out NULL then. */
sd_status sd_ranks_new(int n, sd_ranks **out, char *err, size_t errlen);

/* fn(ctx, r) for every rank r < n at once: r = 0 on this thread, the others
 * on theirs; returns when every call has returned. */
void sd_ranks_run(sd_ranks *rk, void (*fn)(void *ctx, int rank), void *ctx);

/* Stops and joins the threads; NULL is a no-op. */
void sd_ranks_free(sd_ranks *rk);

#endif
