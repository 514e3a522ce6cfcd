/* cuda_comm.h — the NCCL communicator (comm.h) for a tensor-parallel group
 * of CUDA backends, one GPU each, in one process: ncclCommInitAll over their
 * devices, each exchange on the rank's backend stream (so it is ordered with
 * the rank's kernels and may be recorded in its CUDA graphs). NCCL refuses
 * two ranks on one device: there the host communicator (comm.h) serves.
 * Built only where NCCL is found (SD_HAVE_NCCL). */
#ifndef SD_CUDA_COMM_H
#define SD_CUDA_COMM_H

#include "comm.h"

/* out[r]: rank r's communicator on bes[r] (CUDA backends on n distinct
 * devices). SD_ERR_ARG for a backend that is not CUDA or a device given
 * twice, SD_ERR_DEVICE with NCCL's message; out[] all NULL then. */
sd_status sd_comm_nccl_group(sd_backend *const *bes, int n, sd_comm **out, char *err, size_t errlen);

#endif
