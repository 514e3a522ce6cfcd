/* comm.h — a communicator between the ranks of a tensor-parallel group: each
 * rank has its own backend (a CPU backend, a GPU), and the ranks exchange the
 * partial results of a layer's row-parallel matmuls.
 *
 * Two implementations behind one vtable: the host communicator here (the
 * ranks are threads of one process; each exchange goes through a host
 * staging area with the backend's copies, so it works for any backend — the
 * CPU's ranks in tests, or two ranks on one GPU) and NCCL's
 * (kernels/cuda/cuda_comm.h, GPUs, capturable in a CUDA graph).
 *
 * Order is part of the contract: allgather lays the ranks' buffers out in
 * rank order, so a sum over them in a fixed order (the model's) gives the
 * same bits on every rank and at every run — never a ring all-reduce whose
 * order depends on the topology.
 *
 * Failure: a rank that fails calls abort; every rank waiting in the group
 * (now or later) gets SD_ERR_DEVICE, so no rank blocks for ever on a dead
 * peer. Threading: each rank's communicator is used by that rank's thread
 * only; the group's state is shared under a lock. */
#ifndef SD_COMM_H
#define SD_COMM_H

#include <stdbool.h>
#include <stddef.h>

#include "backend.h"
#include "status.h"

#define SD_COMM_MAX_RANKS 8

typedef struct sd_comm sd_comm;

typedef struct sd_comm_ops {
    const char *name;
    /* recv[size][n] = every rank's send[n], in rank order (send, recv: this
     * rank's backend memory; recv may not overlap send). */
    sd_status (*allgather)(sd_comm *c, const float *send, float *recv, size_t n);
    /* buf[bytes] (host memory) of rank root to every rank. */
    sd_status (*broadcast)(sd_comm *c, void *buf, size_t bytes, int root);
    /* Returns once every rank has called it. */
    sd_status (*barrier)(sd_comm *c);
    /* This rank failed: every rank waiting in the group, now or later, gets
     * SD_ERR_DEVICE. */
    void (*abort)(sd_comm *c);
    /* True once the group was aborted. */
    bool (*aborted)(const sd_comm *c);
    void (*free)(sd_comm *c);
    bool capturable; /* the exchanges may be recorded in the backend's graphs */
} sd_comm_ops;

struct sd_comm {
    const sd_comm_ops *ops;
    int rank, size;
    sd_backend *be; /* this rank's backend (borrowed) */
    void *impl;
};

/* A host communicator group over the n backends bes[0..n) (threads of this
 * process, one per rank): out[r] is rank r's, on bes[r]. SD_ERR_ARG for n out
 * of [1, SD_COMM_MAX_RANKS], SD_ERR_NOMEM; out[] all NULL then. Free each
 * with sd_comm_free (the group's state goes with the last). */
sd_status sd_comm_host_group(sd_backend *const *bes, int n, sd_comm **out, char *err, size_t errlen);

/* Frees one rank's communicator; NULL is a no-op. */
void sd_comm_free(sd_comm *c);

#endif
