/* cuda_kernels.h — host launchers of the CUDA kernels (cuda_gemm.cu,
 * cuda_norm.cu, cuda_attention.cu, cuda_elem.cu, cuda_draw.cu).
 *
 * Plain C declarations so the backend glue (cuda_backend.c) is compiled by
 * the C compiler with the project's warnings. Every pointer is device memory
 * unless said otherwise; every launcher enqueues on `stream`, returns at once
 * and reports launch errors (cudaGetLastError) as its result. Each kernel's
 * CPU reference is named in its .cu file above the kernel. */
#ifndef SD_CUDA_KERNELS_H
#define SD_CUDA_KERNELS_H

#include <cuda_runtime_api.h>
#include <stddef.h>
#include <stdint.h>

#include "rowdraw.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Largest head_dim the attention kernel handles. */
#define SD_CU_MAX_HEAD_DIM 256

/* dst[n] = bf16(src[n]) (round to nearest even), as raw bf16 bits. */
cudaError_t sd_cu_f32_to_bf16(cudaStream_t stream, uint16_t *dst, const float *src, size_t n);

/* y[T, N] = y + bias[N] (bias may be NULL), rounded to bf16 when bf16:
 * the epilogue of the cuBLAS matmul; then, when res is not NULL,
 * res[T, N] += y, rounded likewise (the add op fused). */
cudaError_t sd_cu_bias_round(cudaStream_t stream, float *y, const float *bias, float *res, int T, int N, int bf16);

/* Deterministic GEMM: y[T, N] = x[T, K] · W[N, K]^T (+ bias[N]), W bf16.
 * Each output element is reduced in one fixed order that depends on K
 * only, never on T: the batch-invariant matmul. */
cudaError_t sd_cu_gemm_bf16(cudaStream_t stream, float *y, const float *x, const uint16_t *w, const float *bias, int T,
                            int N, int K, int bf16);

/* y[T, D] = rmsnorm(x[T, D]) * w[D] (y may equal x); ybf not NULL: y also
 * as bf16 bits [T, D] (sd_cu_f32_to_bf16's, for a matmul that reads y). */
cudaError_t sd_cu_rmsnorm(cudaStream_t stream, float *y, const float *x, const float *w, int T, int D, float eps,
                          int bf16, uint16_t *ybf);

/* sd_cu_bias_round with res, then sd_cu_rmsnorm of the new res rows by w
 * into yn (and their bf16 bits into ybf when not NULL): one launch, the bits
 * of the two. y, res, yn: [T, N]. */
cudaError_t sd_cu_residual_norm(cudaStream_t stream, float *y, const float *bias, float *res, int T, int N, int bf16,
                                const float *w, float eps, float *yn, uint16_t *ybf);

/* y[T, C] = E[ids[t], :], E bf16 [V, C]. */
cudaError_t sd_cu_embed(cudaStream_t stream, float *y, const uint16_t *E, const int32_t *ids, int T, int C);

/* In place rotate-half RoPE on x[T, nh, hd]; cs/sn [T, hd/2]. */
cudaError_t sd_cu_rope(cudaStream_t stream, float *x, const float *cs, const float *sn, int T, int nh, int hd,
                       int bf16);

/* kc/vc[slots[t] * kv_dim + d] = k/v[t, d] for k, v [T, kv_dim]; the cache
 * holds f32, or bf16 when kv_bf16 (rounded to nearest even). */
cudaError_t sd_cu_kv_write(cudaStream_t stream, void *kc, void *vc, const float *k, const float *v,
                           const int32_t *slots, int T, int kv_dim, int kv_bf16);

/* In one launch, with the arithmetic of the ops one after the other: each
 * head of q [T, nh, hd] and k [T, nkv, hd] normalised by qn / kn [hd]
 * (sd_cu_rmsnorm; NULL: no norm), both rotated (sd_cu_rope, cs/sn [T,
 * hd/2]) in place, then k and v [T, nkv, hd] written to the cache at
 * slots[t] (sd_cu_kv_write). hd even, at most SD_CU_MAX_HEAD_DIM
 * (cudaErrorInvalidValue otherwise). */
typedef struct sd_cu_qkrk {
    float *q, *k;
    const float *v, *qn, *kn, *cs, *sn;
    const int32_t *slots;
    float eps;
    int T, nh, nkv, hd, bf16;
} sd_cu_qkrk;
cudaError_t sd_cu_qk_rope_kv(cudaStream_t stream, const sd_cu_qkrk *a, void *kc, void *vc, int kv_bf16);

/* out[T, nh*hd] = causal attention of q[T, nh*hd] over the paged cache
 * kc/vc [n_blocks, bs, nkv, hd] (f32, or bf16 when kv_bf16). meta (device) holds, for T rows:
 *   meta[0 .. T)      position of row t (it attends to 0 .. pos)
 *   meta[T .. 2T)     offset of row t's block table in meta + 3T
 *   meta[2T .. 3T)    row t's index among its sequence's rows in the pass when that sequence has at
 *                     least SD_CU_TILE_MIN_ROWS of them (a prefill chunk), else -1 (read only by
 *                     sd_cu_attention_split with `tiled`)
 *   meta[3T .. )      the block tables, one per sequence. */
#define SD_CU_TILE_MIN_ROWS 32
cudaError_t sd_cu_attention(cudaStream_t stream, float *out, const float *q, const void *kc, const void *vc,
                            const int32_t *meta, int T, int nh, int nkv, int hd, int bs, float scale, int bf16,
                            int kv_bf16);

/* sd_cu_attention split over the context ("flash-decoding": `splits`
 * blocks per row and KV head, each a strided share of the positions, then a
 * combining pass), for long contexts; part: device scratch of
 * sd_cu_attention_split_floats(T, nh, hd, splits) floats. Same arguments and
 * rounding points as sd_cu_attention; sums in another order (fixed by the
 * row's context and `splits`). Shapes it does not cover (head_dim other than
 * 32, 64, 128, 256; more than 8 query heads a KV head) run sd_cu_attention.
 * With `tiled` (shapes where sd_cu_attention_tile_rows is not 0; not
 * batch-invariant), the rows with an index in meta (prefill chunks) run a
 * tiled kernel instead, whose blocks share each K and V read among the rows
 * of a tile. */
typedef struct sd_cu_att_args {
    float *out;
    const float *q;
    const void *kc, *vc;
    const int32_t *meta;
    float *part;
    int T, nh, nkv, hd, bs;
    float scale;
    int bf16, kv_bf16, tiled;
    int splits; /* 1 .. 256 */
} sd_cu_att_args;
cudaError_t sd_cu_attention_split(cudaStream_t stream, const sd_cu_att_args *a);
size_t sd_cu_attention_split_floats(int T, int nh, int hd, int splits);
/* Rows of a sequence the tiled attention takes together for the shape; 0 where it does not apply. */
int sd_cu_attention_tile_rows(int nh, int nkv, int hd);

/* Up to three matmuls that share x, for sd_cu_gemm_tc: y[i][T, N[i]] =
 * x · w[i]^T (+ bias[i] when not NULL); res (n == 1 only): res += y[0]. */
typedef struct sd_cu_mm_job {
    const uint16_t *w[3];
    const float *bias[3];
    float *y[3];
    int N[3];
    int n;
    float *res;
} sd_cu_mm_job;

/* The batch-invariant matmul on tensor cores (mma.m16n8k16, bf16 inputs,
 * f32 accumulation; the order of every sum fixed by K): the weights read once
 * for up to 64 tokens, the bias, bf16 rounding and residual add in its
 * epilogue (the rounding points of gemm + bias_round + add). x [T, K] f32
 * holding bf16 values (bf16 activations: packed to bf16 without loss), 16-byte
 * aligned; K a multiple of 32; w [N, K] bf16, 16-byte aligned.
 * cudaErrorInvalidValue otherwise. */
cudaError_t sd_cu_gemm_tc(cudaStream_t stream, const sd_cu_mm_job *job, const float *x, int T, int K, int bf16);

/* The default mode's matmul for passes of up to SD_CU_GEMV_MAX_T rows (decode
 * steps, verify spans): y[i] = x · w[i]^T, the epilogue of sd_cu_gemm_tc, f32
 * accumulation in an order fixed by K (not the tensor-core kernel's: not
 * for batch-invariant mode). x [T, K] f32 holding bf16 values, 16-byte
 * aligned; K a multiple of 8; w 16-byte aligned. cudaErrorInvalidValue
 * otherwise. */
#define SD_CU_GEMV_MAX_T 8
cudaError_t sd_cu_gemv(cudaStream_t stream, const sd_cu_mm_job *job, const float *x, int T, int K, int bf16);

/* Whether sd_cu_gemm_tc can run on device (compute capability 8.0 or later,
 * and this build's kernels compiled for such an architecture). */
int sd_cu_gemm_tc_supported(int device);

/* The epilogue of one GEMM over n packed weights (their rows one after the
 * other): ycat [T, N[0] + .. + N[n-1]] is the GEMM's result. Without swiglu,
 * y[i][T, N[i]] = ycat's columns of weight i, plus bias[i] (may be NULL),
 * rounded to bf16 when bf16 (sd_cu_bias_round's arithmetic). With swiglu (n
 * == 2, N[0] == N[1], no bias): y[0] = silu_mul(gate, up) of the two rounded
 * halves (sd_cu_silu_mul's), y[1] not written; ybf not NULL: y[0] also as
 * bf16 bits. cudaErrorInvalidValue for other shapes. */
typedef struct sd_cu_split {
    const float *ycat;
    const float *bias[3];
    float *y[3];
    int N[3];
    int n;
    int swiglu;
    uint16_t *ybf;
} sd_cu_split;
cudaError_t sd_cu_split_epilogue(cudaStream_t stream, const sd_cu_split *s, int T, int bf16);

/* Tensor parallelism's epilogue of a row-parallel matmul (backend.h
 * reduce_parts): y[T, N] = the sum of parts[p][T, N], p < n_parts (1..8), in
 * the pairwise order (the first half's sum plus the second's), + bias[N]
 * (NULL: none), rounded to bf16 when bf16. */
cudaError_t sd_cu_reduce_parts(cudaStream_t stream, float *y, const float *parts, int n_parts, int T, int N,
                               const float *bias, int bf16);

/* out[n] = silu(gate[n]) * up[n]. */
cudaError_t sd_cu_silu_mul(cudaStream_t stream, float *out, const float *gate, const float *up, size_t n, int bf16);

/* y[n] += x[n]. */
cudaError_t sd_cu_add(cudaStream_t stream, float *y, const float *x, size_t n, int bf16);

/* out[rows] = argmax of each logits row [rows, vocab] (lowest id on ties,
 * NaN skipped, -1 when the row is all NaN). */
cudaError_t sd_cu_argmax(cudaStream_t stream, int32_t *out, const float *logits, int rows, int vocab);

/* A row of sd_cu_draw_rows: sd_draw_row with its q in device memory, at
 * q_off of the call's q array. */
typedef struct sd_cu_draw_row {
    float temperature, min_p;
    double u;
    int32_t token, nq, q_off; /* q: the call's q[q_off .. + nq) */
    int32_t allow_off;        /* the allowed-token mask at the call's allow[allow_off ..]; -1: none */
    int32_t e_off, n_edits;   /* the call's edits[e_off .. + n_edits) */
    int32_t top_k;            /* as sd_draw_row */
    float top_p;
} sd_cu_draw_row;

/* The arrays of one sd_cu_draw_rows call (device memory). */
typedef struct sd_cu_draw_args {
    sd_draw_out *out;           /* [n] */
    float *logits;              /* [n, vocab], masked and edited in place */
    const sd_cu_draw_row *rows; /* [n] */
    const sd_tokprob *q;
    const uint32_t *allow;
    const sd_logit_edit *edits;
    float *p;      /* scratch [n, vocab] */
    int32_t *mark; /* scratch [n, vocab], all -1 (as the kernel leaves it) */
    int32_t *qtok; /* scratch indexed as q */
    double *rd;    /* scratch indexed as q */
} sd_cu_draw_args;

/* The row draw of each of n logits rows (rowdraw.h; the CPU's
 * sd_cpu_draw_row bit for bit). */
cudaError_t sd_cu_draw_rows(cudaStream_t stream, const sd_cu_draw_args *a, int n, int vocab);

/* Reads `bytes` of device memory at in (16-byte aligned) with 8 blocks an SM
 * (sms) and nothing written but (practically never) out[grid]: the read
 * bandwidth probe. */
cudaError_t sd_cu_read(cudaStream_t stream, void *out, const void *in, size_t bytes, int sms);

#ifdef __cplusplus
}
#endif

#endif
