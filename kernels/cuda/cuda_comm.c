/* cuda_comm.c — see cuda_comm.h. */
#include "cuda_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdlib.h>

#include "cuda_backend.h"

typedef struct nccl_rank {
    ncclComm_t comm;
    cudaStream_t stream;
    bool *aborted; /* the group's flag, shared by its ranks */
    int *refs;
} nccl_rank;

static nccl_rank *nr(const sd_comm *c) { return c->impl; }

static sd_status nccl_status(ncclResult_t r) { return r == ncclSuccess ? SD_OK : SD_ERR_DEVICE; }

static sd_status nccl_allgather(sd_comm *c, const float *send, float *recv, size_t n)
{
    nccl_rank *k = nr(c);
    if (*k->aborted) return SD_ERR_DEVICE;
    return nccl_status(ncclAllGather(send, recv, n, ncclFloat, k->comm, k->stream));
}

/* Host memory: staged through a device buffer on the rank's stream. */
static sd_status nccl_broadcast(sd_comm *c, void *buf, size_t bytes, int root)
{
    nccl_rank *k = nr(c);
    if (*k->aborted) return SD_ERR_DEVICE;
    void *dev = NULL;
    if (cudaMalloc(&dev, bytes ? bytes : 1) != cudaSuccess) return SD_ERR_NOMEM;
    sd_status st = SD_OK;
    if (c->rank == root && cudaMemcpyAsync(dev, buf, bytes, cudaMemcpyHostToDevice, k->stream) != cudaSuccess)
        st = SD_ERR_DEVICE;
    if (st == SD_OK) st = nccl_status(ncclBroadcast(dev, dev, bytes, ncclUint8, root, k->comm, k->stream));
    if (st == SD_OK && c->rank != root &&
        cudaMemcpyAsync(buf, dev, bytes, cudaMemcpyDeviceToHost, k->stream) != cudaSuccess)
        st = SD_ERR_DEVICE;
    if (cudaStreamSynchronize(k->stream) != cudaSuccess) st = SD_ERR_DEVICE;
    cudaFree(dev);
    return st;
}

static sd_status nccl_barrier(sd_comm *c)
{
    float one = 0.0f;
    return nccl_broadcast(c, &one, sizeof one, 0);
}

static void nccl_abort(sd_comm *c)
{
    nccl_rank *k = nr(c);
    *k->aborted = true;
    ncclCommAbort(k->comm); /* the others' pending exchanges end with an error */
    k->comm = NULL;
}

static bool nccl_aborted(const sd_comm *c) { return *nr(c)->aborted; }

static void nccl_free(sd_comm *c)
{
    nccl_rank *k = nr(c);
    if (k->comm) ncclCommDestroy(k->comm);
    if (--*k->refs == 0) {
        free(k->aborted);
        free(k->refs);
    }
    free(k);
    free(c);
}

static const sd_comm_ops nccl_ops = {
    .name = "nccl",
    .allgather = nccl_allgather,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .abort = nccl_abort,
    .aborted = nccl_aborted,
    .free = nccl_free,
    .capturable = true,
};

sd_status sd_comm_nccl_group(sd_backend *const *bes, int n, sd_comm **out, char *err, size_t errlen)
{
    int devs[SD_COMM_MAX_RANKS];
    ncclComm_t comms[SD_COMM_MAX_RANKS];
    if (n < 1 || n > SD_COMM_MAX_RANKS)
        return sd_seterr(err, errlen, SD_ERR_ARG, "an NCCL group of %d ranks (1 to %d)", n, SD_COMM_MAX_RANKS);
    for (int r = 0; r < n; r++) {
        out[r] = NULL;
        if ((devs[r] = sd_cuda_device_of(bes[r])) < 0)
            return sd_seterr(err, errlen, SD_ERR_ARG, "rank %d: NCCL needs a CUDA backend", r);
        for (int q = 0; q < r; q++)
            if (devs[q] == devs[r])
                return sd_seterr(err, errlen, SD_ERR_ARG, "ranks %d and %d on cuda:%d: NCCL takes one rank a device", q,
                                 r, devs[r]);
    }
    ncclResult_t res = ncclCommInitAll(comms, n, devs);
    if (res != ncclSuccess)
        return sd_seterr(err, errlen, SD_ERR_DEVICE, "ncclCommInitAll: %s", ncclGetErrorString(res));
    bool *aborted = calloc(1, sizeof *aborted);
    int *refs = calloc(1, sizeof *refs);
    for (int r = 0; r < n; r++) {
        sd_comm *c = calloc(1, sizeof *c);
        nccl_rank *k = calloc(1, sizeof *k);
        if (!c || !k || !aborted || !refs) {
            free(c);
            free(k);
            for (int q = r; q < n; q++) ncclCommDestroy(comms[q]);
            for (int q = 0; q < r; q++) sd_comm_free(out[q]);
            if (r == 0) {
                free(aborted);
                free(refs);
            }
            for (int q = 0; q < n; q++) out[q] = NULL;
            return sd_seterr(err, errlen, SD_ERR_NOMEM, "out of memory for an NCCL group");
        }
        *k = (nccl_rank){
            .comm = comms[r], .stream = (cudaStream_t)sd_cuda_stream_of(bes[r]), .aborted = aborted, .refs = refs};
        ++*refs;
        *c = (sd_comm){.ops = &nccl_ops, .rank = r, .size = n, .be = bes[r], .impl = k};
        out[r] = c;
    }
    return SD_OK;
}
