/* backend_open.h — choose a backend from a --device string.
 *
 * "cpu" → the CPU backend; "cuda" or "cuda:N" → the CUDA backend on device N
 * when the program was linked with it (SD_HAVE_CUDA, kernels/cuda/), else a
 * clear error. Header-only so that each program decides at link time
 * whether it carries CUDA. */
#ifndef SD_BACKEND_OPEN_H
#define SD_BACKEND_OPEN_H

#include <stdlib.h>
#include <string.h>

#include "backend.h"
#ifdef SD_HAVE_CUDA
#include "cuda_backend.h"
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
