/* cuda_backend.h — the CUDA implementation of backend.h (NVIDIA GPUs).
 *
 * Weights live on the device as bf16 (F32 / F16 checkpoints are rounded to
 * bf16 at upload; 1-D tensors — norms, biases — stay f32). Activations and
 * the paged KV cache are f32 device memory from ops->alloc. Host arrays the
 * forward pass hands over (token ids, slots, RoPE tables) arrive through
 * ops->to_backend; the block tables inside sd_attn_seq are HOST pointers and
 * are copied to the device by the attention op.
 *
 * Batch invariance: every own kernel reduces in an order fixed by the
 * reduced length (attention: one thread block per query row and head). The
 * default matmul is cuBLAS (x rounded to bf16, f32 accumulation), which is
 * fast but NOT batch-invariant: its reduction split may change with T.
 * sd_cuda_set_batch_invariant(be, 1) switches matmul to a deterministic
 * kernel whose per-element order depends on K only, for bit-exact greedy
 * speculative decoding: on tensor cores (mma.m16n8k16, the weights read once
 * for up to 64 rows, the epilogue fused) for bf16 activations and K a
 * multiple of 32 on sm_80 and later (SD_CUDA_TC=0 in the environment: never;
 * SD_CUDA_TC=2: also instead of cuBLAS in the default mode for passes of up
 * to 64 rows, to be measured against it), else one warp per output on the
 * CUDA cores.
 *
 * Errors: every CUDA / cuBLAS call is checked; a failure is logged with
 * file:line. Ops returning void record the first failure, which
 * sd_cuda_take_error() reports. Nothing here exits or aborts.
 *
 * Threading: one thread drives a backend at a time (all work goes to one
 * stream). This header is usable from C; build with SD_HAVE_CUDA. */
#ifndef SD_CUDA_BACKEND_H
#define SD_CUDA_BACKEND_H

#include <stdint.h>

#include "backend.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of usable CUDA devices; 0 when there is no driver or device (the
 * error is swallowed, never fatal). */
int sd_cuda_device_count(void);

/* The device and stream of a CUDA backend (for its communicator: NCCL's
 * exchanges run on the backend's stream, in order with its kernels); -1 /
 * NULL for another backend. */
int sd_cuda_device_of(sd_backend *be);
void *sd_cuda_stream_of(sd_backend *be);

/* Creates a backend on device `device` (its own stream and cuBLAS handle) in
 * *out; the caller frees it with sd_backend_free. Returns SD_OK, or
 * SD_ERR_DEVICE (the device does not exist or CUDA fails) or SD_ERR_NOMEM
 * with a message in err; *out is NULL then. */
sd_status sd_backend_cuda_new(int device, sd_backend **out, char *err, size_t errlen);

/* True when be was made by sd_backend_cuda_new. */
int sd_backend_is_cuda(const sd_backend *be);

/* Selects the matmul: 0 (default) cuBLAS, 1 the deterministic
 * batch-invariant kernel. SD_ERR_ARG when be is not a CUDA backend. */
sd_status sd_cuda_set_batch_invariant(sd_backend *be, int on);

/* Recorded passes (CUDA graphs, default on; the environment variable
 * SD_CUDA_GRAPHS=0 starts a backend with them off): the layers of a forward
 * pass of T <= 256 rows are recorded the second time a model runs a pass of
 * T rows, and replayed from then on: one launch instead of ~30 per layer.
 * The same kernels run with the same arguments, so results are bit-identical
 * to the eager pass. Any device buffer freed or moved drops every recording.
 * SD_ERR_ARG when be is not a CUDA backend. */
sd_status sd_cuda_set_graphs(sd_backend *be, int on);

/* Attention split over the context (default on; SD_CUDA_ATTN_SPLIT=0 in
 * the environment starts a backend with it off): each row and KV head —
 * the query heads sharing it together — spread over 32 blocks, each a
 * strided share of the positions read 16 bytes a lane, then combined: every
 * SM busy and many loads in flight at long contexts, where the single
 * kernel runs one block per row and query head. Both are batch-invariant;
 * they differ in summation order. SD_ERR_ARG when be is not a CUDA backend. */
sd_status sd_cuda_set_attn_split(sd_backend *be, int on);

/* The default mode's fusions (default on; SD_CUDA_FUSE=0 in the environment
 * starts a backend with them off): pack (backend.h) places q/k/v and
 * gate/up weights together, and matmul_fused runs such a group as one cuBLAS
 * GEMM with one epilogue (bias, rounding, SwiGLU); rmsnorm and that SwiGLU
 * epilogue also write the bf16 copy of their output that the next matmul
 * reads, so no conversion runs before it. Off: weights packed before stay
 * packed, their matmuls run one by one. SD_ERR_ARG when be is not a CUDA
 * backend. */
sd_status sd_cuda_set_fuse(sd_backend *be, int on);

/* The GEMV kernel (sd_cu_gemv) for the default mode's matmuls of up to 8
 * rows with bf16 activations, instead of cuBLAS (default off; SD_CUDA_GEMV=1
 * in the environment starts a backend with it on). Measured on an H200 with
 * Qwen3-8B's shapes (docs/BENCHMARKS.md, third GPU session) it is slower
 * than cuBLAS except at 2 rows: kept for the next attempt. SD_ERR_ARG when
 * be is not a CUDA backend. */
sd_status sd_cuda_set_gemv(sd_backend *be, int on);

/* Blocks a row and KV head of the split attention (1 .. 256; default 32,
 * SD_CUDA_ATTN_SPLITS=N in the environment): more keep more loads in flight
 * at long contexts, and cost a few empty blocks and a longer combine at
 * short ones. Changes the summation order (results in the last bits).
 * SD_ERR_ARG when be is not a CUDA backend or splits is out of range. */
sd_status sd_cuda_set_attn_splits(sd_backend *be, int splits);

/* Tiled attention for prefill chunks (default on; SD_CUDA_ATTN_TILE=0 in the
 * environment starts a backend with it off): with the split attention on
 * and batch invariance off, in a pass of at least SD_CU_TILE_MIN_ROWS (32)
 * rows, the rows of every sequence with 32 or more of them run a kernel that
 * takes 32 query vectors of one KV head (32 / G rows) together and reads
 * each K and V once for all of them, instead of once per row (head_dim 32,
 * 64, 128; G <= 8). Not batch-invariant (a row is tiled or not by its
 * sequence's rows in the pass), hence off in batch-invariant mode.
 * SD_ERR_ARG when be is not a CUDA backend. */
sd_status sd_cuda_set_attn_tile(sd_backend *be, int on);

/* Number of recorded passes held (tests, statistics); 0 for other backends. */
int sd_cuda_graph_count(sd_backend *be);

/* Returns the first error recorded by a void op (matmul, rmsnorm, copies,
 * ...) since the last call, and clears it; SD_OK when none. */
sd_status sd_cuda_take_error(sd_backend *be);

/* Greedy post-processing on the device: out_host[r] = argmax of row r of
 * logits_dev [rows, vocab] (device memory), lowest id on ties, NaN skipped,
 * -1 for an all-NaN row (as sd_argmax). Waits for the result. */
sd_status sd_cuda_argmax(sd_backend *be, const float *logits_dev, int rows, int vocab, int32_t *out_host);

/* The device memory's read bandwidth in GB/s (*gbps): the best of reps
 * timed reads of a fresh buffer of `bytes` by a kernel that only reads
 * (several 16-byte loads in flight per thread, 8 blocks an SM), the ceiling
 * a decode step's weight read is measured against (specd-bench-decode's
 * roofline). The buffer is allocated and freed here. */
sd_status sd_cuda_read_bandwidth(sd_backend *be, size_t bytes, int reps, double *gbps);

#ifdef __cplusplus
}
#endif

#endif
