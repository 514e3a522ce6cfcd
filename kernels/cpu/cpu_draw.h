/* cpu_draw.h — the row draw (sd_backend_ops.draw_rows) on the host: the
 * reference of the CUDA kernel (kernels/cuda/cuda_draw.cu), step for step.
 *
 * A row's draw in passes over the vocabulary, each of which a GPU block
 * runs in parallel and the host in a loop: the mask and edits of the logits
 * processors; the largest logit; the kept softmax weights and their exact
 * sum (exact.h); with top-k or top-p, the kept set (top-k's cut by a radix
 * select, min-p's by its threshold, top-p's prefix by the walk below over
 * the weights) and its sum; the probabilities, their
 * largest and their exact sum; the residual's mass (q's tokens weigh
 * p - q); then the walk in the sampler's order — probability descending,
 * id ascending — a slice at a time: the next at most `cap` tokens in that
 * order (a band of probabilities as the sampler's bands, cut at the
 * cap-th key by a radix select when it holds more), gathered, sorted and added
 * one by one in double until the sum passes u times the mass. The order of
 * the additions is the sampler's, so the token is the sampler's, whatever
 * the slices. */
#ifndef SD_CPU_DRAW_H
#define SD_CPU_DRAW_H

#include <stddef.h>
#include <stdint.h>

#include "rowdraw.h"
#include "status.h"

/* A row draw's scratch for a vocabulary of `vocab` (sd_cpu_draw_scratch_new:
 * mark all -1, as every draw leaves it). */
typedef struct sd_cpu_draw_scratch {
    int vocab, cap;
    float *p;       /* [vocab] the probabilities */
    int32_t *mark;  /* [vocab] a token's index among q's distinct tokens, -1 */
    int32_t *qtok;  /* [vocab] q's distinct tokens */
    double *rd;     /* [vocab] their residual p - q */
    uint64_t *keys; /* [cap] the slice */
} sd_cpu_draw_scratch;

/* The scratch in *out (the caller frees it with sd_cpu_draw_scratch_free):
 * SD_OK, or SD_ERR_ARG (vocab or cap < 1) or SD_ERR_NOMEM with a message in
 * err; *out is NULL then. */
sd_status sd_cpu_draw_scratch_new(int vocab, int cap, sd_cpu_draw_scratch **out, char *err, size_t errlen);
void sd_cpu_draw_scratch_free(sd_cpu_draw_scratch *s);

/* One row of logits [vocab] (vocab <= s->vocab), masked and edited in place
 * by r's allow and edits; returns r's sd_draw_out. */
sd_draw_out sd_cpu_draw_row(float *logits, int vocab, const sd_draw_row *r, sd_cpu_draw_scratch *s);

#endif
