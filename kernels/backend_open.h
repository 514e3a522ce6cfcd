/* backend_open.h — choose a backend from a --device string.
 *
 * "cpu" → the CPU backend; "cuda" or "cuda:N" → the CUDA backend on device N
 * when the program was linked with it (SD_HAVE_CUDA, kernels/cuda/), else a
 * clear error. Header-only so that each program decides at link time
 * whether it carries CUDA. */
#ifndef SD_BACKEND_OPEN_H
#define SD_BACKEND_OPEN_H

#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend.h"
#include "comm.h"
#ifdef SD_HAVE_CUDA
#include "cuda_backend.h"
#endif
#ifdef SD_HAVE_NCCL
#include "cuda_comm.h"
#endif

/* Parses device: returns 0 for cpu, 1 for cuda (GPU index in *index), or -1
 * (message in err) when the string is neither. */
static inline int sd_device_parse(const char *device, int *index, char *err, size_t errlen)
{
    *index = 0;
    if (!device || !strcmp(device, "cpu")) return 0;
    if (!strncmp(device, "cuda", 4) && (device[4] == '\0' || device[4] == ':')) {
        if (device[4] == ':') {
            char *end;
            long n = strtol(device + 5, &end, 10);
            if (end == device + 5 || *end || n < 0 || n > 1023) goto bad;
            *index = (int)n;
        }
        return 1;
    }
bad:
    sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "unknown device '%s' (expected cpu, cuda or cuda:N)", device);
    return -1;
}

/* Creates the backend named by device with n_threads CPU threads (CPU only)
 * in *out; the caller frees it with sd_backend_free. Returns SD_OK, or with
 * a message in err and *out NULL: SD_ERR_UNSUPPORTED when the device is
 * unknown or not built in, else the status of the backend that failed to
 * start (SD_ERR_NOMEM, SD_ERR_DEVICE). */
static inline sd_status sd_backend_open(const char *device, int n_threads, sd_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    int index;
    int kind = sd_device_parse(device, &index, err, errlen);
    if (kind < 0) return SD_ERR_UNSUPPORTED;
    if (kind == 0) return sd_backend_cpu_new(n_threads, out, err, errlen);
#ifdef SD_HAVE_CUDA
    return sd_backend_cuda_new(index, out, err, errlen);
#else
    return sd_seterr(err, errlen, SD_ERR_UNSUPPORTED, "--device %s: this build has no CUDA backend", device);
#endif
}

/* The i-th (0-based) name of a comma-separated device list into buf; NULL
 * when the list has fewer (or buf is too small). */
static inline const char *sd_device_nth(const char *list, int i, char *buf, size_t n)
{
    const char *p = list;
    for (int k = 0; k < i; k++) {
        const char *c = strchr(p, ',');
        if (!c) return NULL;
        p = c + 1;
    }
    size_t len = strcspn(p, ",");
    if (len + 1 > n) return NULL;
    memcpy(buf, p, len);
    buf[len] = '\0';
    return buf;
}

/* Rank r's device of a group of n over --device's list (sd_tp_group_open):
 * "cuda" alone is cuda:r, another single name every rank's, else the list's
 * r-th. NULL when the list names fewer. */
static inline const char *sd_tp_device_name(const char *devices, int r, char *buf, size_t n)
{
    if (!devices) devices = "cpu";
    if (strchr(devices, ',')) return sd_device_nth(devices, r, buf, n);
    if (!strcmp(devices, "cuda")) snprintf(buf, n, "cuda:%d", r);
    else snprintf(buf, n, "%s", devices);
    return buf;
}

/* A tensor-parallel group (model.h sd_tp_opts): n backends and their
 * communicators. */
typedef struct sd_tp_group {
    int n;
    sd_backend *be[SD_COMM_MAX_RANKS];
    sd_comm *comm[SD_COMM_MAX_RANKS];
    char device[SD_COMM_MAX_RANKS][32]; /* rank r's device, as named ("cpu", "cuda:1") */
    const char *comm_name;              /* "host" or "nccl" (NULL for n = 1) */
} sd_tp_group;

static inline void sd_tp_group_close(sd_tp_group *g)
{
    for (int r = 0; r < g->n; r++) {
        sd_comm_free(g->comm[r]);
        sd_backend_free(g->be[r]);
        g->comm[r] = NULL;
        g->be[r] = NULL;
    }
    g->n = 0;
}

/* Opens the n ranks of a group from --device's list: "cpu" (every rank a CPU
 * backend of n_threads / n threads — n_threads 0: the cores / n), "cuda"
 * (cuda:0 .. cuda:n-1), or one device a rank ("cuda:0,cuda:1"; a list
 * shorter than n is an error). The ranks exchange through NCCL when they are
 * n distinct GPUs and the build has it, else through the host (comm.h: two
 * ranks on one GPU, CPU ranks). n == 1: the one backend, no communicator.
 * SD_ERR_ARG / SD_ERR_UNSUPPORTED / the backend's status, with a message. */
static inline sd_status sd_tp_group_open(const char *devices, int n, int n_threads, sd_tp_group *g, char *err,
                                         size_t errlen)
{
    memset(g, 0, sizeof *g);
    if (n < 1 || n > SD_COMM_MAX_RANKS)
        return sd_seterr(err, errlen, SD_ERR_ARG, "--tensor-parallel-size must be 1 to %d, got %d", SD_COMM_MAX_RANKS,
                         n);
    int threads = n_threads > 0 ? n_threads : (int)sd_cpu_count();
    if (n > 1 && threads < n) threads = n;
    for (int r = 0; r < n; r++) {
        char name[32];
        if (!sd_tp_device_name(devices, r, name, sizeof name)) {
            sd_tp_group_close(g);
            return sd_seterr(err, errlen, SD_ERR_ARG, "--tensor-parallel-size %d needs %d devices, --device names %d",
                             n, n, r);
        }
        sd_status st = sd_backend_open(name, n > 1 ? threads / n : n_threads, &g->be[r], err, errlen);
        if (st != SD_OK) {
            sd_tp_group_close(g);
            return st;
        }
        snprintf(g->device[r], sizeof g->device[r], "%s", name);
        g->n = r + 1;
    }
    if (n == 1) return SD_OK;
    sd_status st = SD_ERR_UNSUPPORTED;
#ifdef SD_HAVE_NCCL
    bool gpus = true;
    for (int r = 0; r < n && gpus; r++) {
        gpus = sd_backend_is_cuda(g->be[r]);
        for (int q = 0; q < r && gpus; q++) gpus = strcmp(g->device[q], g->device[r]) != 0;
    }
    if (gpus && (st = sd_comm_nccl_group(g->be, n, g->comm, err, errlen)) == SD_OK) g->comm_name = "nccl";
#endif
    if (st != SD_OK && (st = sd_comm_host_group(g->be, n, g->comm, err, errlen)) == SD_OK) g->comm_name = "host";
    if (st != SD_OK) sd_tp_group_close(g);
    return st;
}

/* --batch-invariant: results that do not depend on the batch a sequence is
 * in, so that greedy speculation is bit-exact (speculative == plain). The CPU
 * backend always computes so; the CUDA backend switches its matmuls from
 * cuBLAS to a deterministic kernel (slower). Returns whether be now is
 * batch-invariant. */
static inline bool sd_backend_set_batch_invariant(sd_backend *be, bool on)
{
#ifdef SD_HAVE_CUDA
    if (sd_backend_is_cuda(be)) return sd_cuda_set_batch_invariant(be, on) == SD_OK && on;
#endif
    (void)on;
    return sd_backend_cpu_threads(be) > 0;
}

#endif
