/* cpu_attn.h — attention over the paged KV cache for the CPU backend
 * (cpu_attn.c): one query row, or the queries of one KV-head group at once.
 * Each score is a canonical dot (cpu_dot.h) and every sum runs in position
 * order, so the result of a row never depends on the batch. */
#ifndef SD_CPU_ATTN_H
#define SD_CPU_ATTN_H

#include <stddef.h>
#include <stdint.h>

#include "cpu_dot.h"

/* K or V of one KV head in the paged cache: the row of slot s starts at
 * element s * stride of base, f32 or bf16 (bf16: widened exactly to f32 as
 * it is read, so a cache of bf16-representable values gives the f32 cache's
 * results bit for bit). */
typedef struct sd_kv_rows {
    const void *base;
    size_t stride;
    int bf16;
} sd_kv_rows;

/* Largest head_dim a bf16 cache supports (its rows are widened in chunks). */
#define SD_ATTN_BF16_MAX_HD 2048

/* One query row of one head over n cached positions (0..n-1, ascending):
 * out[hd] = softmax(q·k_j * scale) · v_j, K/V rows of slot(j) where
 * slot(j) = blocks[j / block_size] * block_size + j % block_size.
 * bf16: PyTorch's bf16 CPU attention rounding (unnormalised weights rounded,
 * one division at the end). scratch holds sd_attn_scratch_floats(1, n, hd)
 * floats. The order of every sum is fixed by j and d alone (and the ISA
 * path), so the result does not depend on the batch. */
void sd_attn_row(float *out, const float *q, const sd_kv_rows *k, const sd_kv_rows *v, const int32_t *blocks,
                 int block_size, int n, int hd, float scale, int bf16, float *scratch);

/* One query of a group sharing a KV head: n positions visible. */
typedef struct sd_attn_query {
    const float *q;
    float *out;
    int n;
} sd_attn_query;

/* sd_attn_row for nq queries of one KV head at once (AVX-512 and AVX2:
 * block by block, so each K/V block is read — and a bf16 one widened to
 * f32 — once for all of them); each result is bit-identical to
 * sd_attn_row's. */
void sd_attn_group(const sd_attn_query *qs, int nq, const sd_kv_rows *k, const sd_kv_rows *v, const int32_t *blocks,
                   int block_size, int hd, float scale, int bf16, float *scratch);

/* Scratch floats sd_attn_group needs for nq queries of at most max_n positions. */
size_t sd_attn_scratch_floats(int nq, int max_n, int hd);

#endif
