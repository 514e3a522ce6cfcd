/* backend.h — the compute backend interface (a vtable, as ggml-backend).
 *
 * The model forward pass (common/model/model.c) is written once against these ops;
 * kernels/cpu/ implements them with threads + SIMD, kernels/cuda/ on NVIDIA
 * GPUs. All activation pointers are backend memory (host memory for the CPU
 * backend, device memory for CUDA) obtained from ops->alloc.
 *
 * Batch invariance contract (CPU): every op computes each output element with
 * a reduction order that depends only on that element's own inputs, never on
 * how many rows / tokens / requests are processed together. Greedy
 * speculative decoding relies on it to be bit-exact.
 *
 * Shapes use T = rows (tokens) in the call, C = hidden size, and row-major
 * storage. A weight matrix is [N, K] (out features, in features) as in
 * Hugging Face checkpoints; matmul computes y[t, n] = sum_k x[t, k] * W[n, k]. */
#ifndef SD_BACKEND_H
#define SD_BACKEND_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "status.h"
#include "rowdraw.h"
#include "tensor.h"

typedef struct sd_backend sd_backend;

/* A weight tensor resident where the backend computes. */
typedef struct sd_weight {
    sd_dtype dtype;      /* storage type (CPU: F32 or BF16; F16 converted at upload;
                       * Q8 after quantize_q8) */
    int rows;            /* N (1 for vectors) */
    int cols;            /* K */
    const void *data;    /* backend memory or a host mmap (CPU) */
    void *owned;         /* non-NULL when the backend allocated the storage */
    const float *qscale; /* Q8: per-row scales [rows] */
    const int32_t *qsum; /* Q8: per-row sums of the int8 values [rows] */
} sd_weight;

/* Paged KV storage of one layer: K and V each [n_blocks, block_size, n_kv, hd]
 * elements of dtype: SD_DTYPE_F32, or SD_DTYPE_BF16 (half the memory; exact
 * for a bf16 model, whose K and V are bf16 values already). */
typedef struct sd_kv_layer {
    void *k;
    void *v;
    sd_dtype dtype;
} sd_kv_layer;

/* One sequence's slice of a batched attention call. Rows [row0, row0+n) of
 * q / out belong to it; its queries sit at positions pos0 .. pos0+n-1 and
 * attend causally to positions 0 .. own position, read through block_table. */
typedef struct sd_attn_seq {
    int row0;
    int n;
    int pos0;
    const int32_t *block_table; /* backend-visible block ids */
} sd_attn_seq;

typedef struct sd_attn_shape {
    int n_heads;
    int n_kv_heads;
    int head_dim;
    int block_size;
    float scale; /* 1/sqrt(head_dim) */
    int bf16;    /* round as PyTorch's bf16 CPU attention (see SD_BF16 below) */
} sd_attn_shape;

/* bf16 activation emulation. When a checkpoint's dtype is bfloat16,
 * transformers (and vLLM) keep activations in bf16: every op's result is
 * rounded to bf16 (round-to-nearest-even) while reductions accumulate in f32.
 * Ops taking a `bf16` flag reproduce those rounding points so greedy output
 * matches the reference exactly; with bf16 == 0 everything stays f32. */

/* A fused group of matmuls over one input x[T, K] (see matmul_fused). */
typedef enum sd_mm_kind {
    SD_MM_SHARED = 0,   /* y[i] = x·w[i]^T (+ bias[i]) for i < n (n <= 3): q/k/v */
    SD_MM_RESIDUAL = 1, /* y[0] = x·w[0]^T (+ bias[0]), then res += y[0] (as add): o, down */
    SD_MM_SWIGLU = 2,   /* y[0] = x·w[0]^T, y[1] = x·w[1]^T, then y[0] = silu(y[0]) * y[1]
                         * (as silu_mul); w[0], w[1] of one shape: gate, up */
    SD_MM_PARTIAL = 3,  /* y[i] = x·w[i]^T as SHARED but never rounded and without bias, even in bf16 mode
                         * (x is read as in it): a partial sum of a row-parallel matmul (tensor
                         * parallelism), added to the others' by reduce_parts */
} sd_mm_kind;

typedef struct sd_mm_fused {
    sd_mm_kind kind;
    int n; /* number of weights: SHARED 1..3, RESIDUAL 1, SWIGLU 2 */
    const sd_weight *w[3];
    const sd_weight *bias[3]; /* NULL: none */
    float *y[3];              /* [T, w[i]->rows] outputs (RESIDUAL: scratch) */
    float *res;               /* RESIDUAL: the residual stream [T, w[0]->rows] */
    /* RESIDUAL, optional (NULL: none): then norm_y = rmsnorm(res) by norm
     * with eps, as the rmsnorm op after the group (the next block's input norm) */
    const sd_weight *norm;
    float *norm_y;
    float eps;
} sd_mm_fused;

/* The attention block's ops between the q/k/v matmuls and attention (see
 * qk_rope_kv): q [T, n_heads, head_dim], k and v [T, n_kv_heads, head_dim]. */
typedef struct sd_qk_rope_kv {
    float *q, *k;
    const float *v;
    const sd_weight *q_norm, *k_norm; /* per-head rmsnorm weights [head_dim] (NULL: none) */
    float eps;
    const float *cos, *sin; /* RoPE tables [T, head_dim / 2] */
    sd_kv_layer *kv;
    const int32_t *slots; /* [T] cache slots */
    int T, n_heads, n_kv_heads, head_dim, bf16;
} sd_qk_rope_kv;

/* graph_begin's answers (see sd_backend_ops). */
enum { SD_GRAPH_EAGER = 0, SD_GRAPH_RECORD = 1, SD_GRAPH_REPLAYED = 2 };

typedef struct sd_backend_ops {
    const char *name;
    /* memory */
    void *(*alloc)(sd_backend *be, size_t bytes); /* zeroed; NULL on failure */
    void (*free)(sd_backend *be, void *p);
    /* Makes w usable by the backend from a host tensor view, e.g. a
     * checkpoint mapping (CPU: borrow F32/BF16 data, convert F16 to F32). */
    sd_status (*upload)(sd_backend *be, const sd_tensor *t, sd_weight *w, char *err, size_t errlen);
    void (*release)(sd_backend *be, sd_weight *w);
    /* copies between host and backend memory */
    void (*to_backend)(sd_backend *be, void *dst, const void *src, size_t bytes);
    void (*to_host)(sd_backend *be, void *dst, const void *src, size_t bytes);

    /* y[T, N] = x[T, K] · W[N, K]^T (+ bias[N] when bias != NULL), rounded
     * to bf16 when bf16 */
    void (*matmul)(sd_backend *be, float *y, const float *x, const sd_weight *w, const sd_weight *bias, int T,
                   int bf16);
    /* y[T, D] = x * rsqrt(mean(x^2) + eps) * w, per row of D (y may equal x);
     * bf16: w * bf16(x * rsqrt(...)) rounded again */
    void (*rmsnorm)(sd_backend *be, float *y, const float *x, const sd_weight *w, int T, int D, float eps, int bf16);
    /* y[T, C] = E[ids[t], :] */
    void (*embed)(sd_backend *be, float *y, const sd_weight *E, const int32_t *ids, int T);
    /* In place rotate-half RoPE on x[T, nh, hd]; cos/sin are [T, hd/2]
     * (already rounded by the caller in bf16 mode); bf16: each product and
     * the sum rounded. */
    void (*rope)(sd_backend *be, float *x, const float *cos, const float *sin, int T, int nh, int hd, int bf16);
    /* Writes k/v rows [T, n_kv*hd] into the paged cache at slots[t]
     * (slot = block * block_size + offset); a bf16 cache stores each value
     * rounded to the nearest bf16 (ties to even). */
    void (*kv_write)(sd_backend *be, sd_kv_layer *kv, const float *k, const float *v, const int32_t *slots, int T,
                     int kv_dim);
    /* out[T, nh*hd] = causal softmax(q k^T * scale) v over the paged cache.
     * SD_ERR_NOMEM when scratch for the longest sequence cannot be had. */
    sd_status (*attention)(sd_backend *be, float *out, const float *q, const sd_kv_layer *kv, const sd_attn_seq *seqs,
                           int n_seqs, const sd_attn_shape *shape);
    /* out[n] = silu(gate[n]) * up[n]; bf16: silu rounded, product rounded */
    void (*silu_mul)(sd_backend *be, float *out, const float *gate, const float *up, size_t n, int bf16);
    /* y[n] += x[n]; bf16: rounded */
    void (*add)(sd_backend *be, float *y, const float *x, size_t n, int bf16);
    /* Optional (NULL: the caller composes matmul / add / silu_mul, and
     * rmsnorm for a residual group's norm): the group of f in one pass,
     * bit-identical to the composed ops — except a
     * group of packed weights (pack) outside batch-invariant mode, which may
     * run as one matmul whose sums are ordered otherwise (CUDA: cuBLAS picks
     * its algorithm by shape), and may leave a SwiGLU pair's y[1] unwritten. */
    void (*matmul_fused)(sd_backend *be, const sd_mm_fused *f, const float *x, int T, int bf16);
    /* Optional (NULL: the caller composes the ops): rmsnorm of every q and
     * k head by q_norm / k_norm (when given), rope on q and k, then kv_write
     * of k and v — the bits of those ops one after the other. */
    void (*qk_rope_kv)(sd_backend *be, const sd_qk_rope_kv *a);
    /* Tensor parallelism (optional: NULL where a backend does not offer it).
     * copy_cols: dst[T, n] = columns [c0, c0 + n) of src[T, ld]. reduce_parts:
     * y[T, N] = the sum of parts[p][T, N] over p < n_parts (1..8) in one fixed
     * order — pairwise, the first half's sum plus the second's, recursively —
     * then + bias[N] (NULL: none), rounded to bf16 when bf16: the epilogue of
     * a row-parallel matmul whose partial sums came from the ranks (or from
     * fixed chunks of its inputs). */
    void (*copy_cols)(sd_backend *be, float *dst, const float *src, int T, int ld, int c0, int n);
    void (*reduce_parts)(sd_backend *be, float *y, const float *parts, int n_parts, int T, int N, const sd_weight *bias,
                         int bf16);
    /* Optional (NULL: not offered): replaces a 2-D weight by int8 rows with
     * per-row scales (an approximation, for drafters only); matmul then
     * quantises its input per row (kernels/cpu/cpu_q8.h). */
    sd_status (*quantize_q8)(sd_backend *be, sd_weight *w, char *err, size_t errlen);
    /* Optional (NULL: not offered): moves the n matrices w[0..n) (uploaded
     * by this backend, the same columns) into one allocation, one after the
     * other, so that matmul_fused can read a group (q/k/v, gate/up) as one
     * matrix. Each stays a weight of its own; w[0] then owns the allocation:
     * releasing it frees all n (releasing the others frees nothing), so they
     * go together. A backend may leave the weights as they are (SD_OK). */
    sd_status (*pack)(sd_backend *be, sd_weight *const *w, int n, char *err, size_t errlen);
    /* Optional (NULL: every pass runs its ops one by one): recorded passes
     * (CUDA graphs). Before the layers of a pass of T rows, graph_begin(be,
     * owner, T) returns SD_GRAPH_REPLAYED (the layers recorded under (owner,
     * T) ran: skip them), SD_GRAPH_RECORD (run the layers, then call
     * graph_end) or SD_GRAPH_EAGER (run them, no graph_end). graph_end(be, ok)
     * stops recording; when ok it runs what was recorded and keeps it, SD_OK;
     * otherwise (or when recording failed) nothing ran and the caller runs
     * the layers again, eagerly. A recorded op must read everything that
     * changes between passes from backend memory filled before graph_begin
     * (ids, slots, RoPE tables; the attention tables through attn_stage). */
    int (*graph_begin)(sd_backend *be, const void *owner, int T);
    sd_status (*graph_end)(sd_backend *be, bool ok);
    /* Optional: copies the attention tables of the next pass (as attention
     * would) so that the layers' attention calls find them in place. */
    sd_status (*attn_stage)(sd_backend *be, const sd_attn_seq *seqs, int n_seqs, int block_size);
    /* Optional (NULL: the caller copies the rows and takes sd_argmax_f32 of
     * each): out[r] (host memory) = the index of the first maximum of row r
     * of logits [rows, vocab] (backend memory), NaNs ignored, -1 for a row of
     * NaNs — sd_argmax_f32's answer, without the rows crossing to the host. */
    sd_status (*argmax)(sd_backend *be, int32_t *out, const float *logits, int rows, int vocab);
    /* Optional (NULL: the caller copies the rows and draws on the host):
     * out[r] (host memory) = the row draw of row r of logits [rows, vocab]
     * (backend memory) with rows[r] (host memory; rowdraw.h): the row
     * masked and edited in place by its logits processors, then the token
     * the sampler draws from its filtered distribution (or its residual draw
     * after a rejected draft) and p(rows[r].token) — the host sampler's
     * answer, bit for bit, without the row crossing to the host. */
    sd_status (*draw_rows)(sd_backend *be, sd_draw_out *out, float *logits, const sd_draw_row *rows, int n, int vocab);
    /* Optional (NULL: host memory, nothing to plan): the device's free and
     * total memory in bytes now (all processes' allocations counted). */
    sd_status (*mem_info)(sd_backend *be, size_t *free_bytes, size_t *total_bytes);
    /* Optional (NULL: one call on the caller's thread): fn(ctx, i, n) once
     * for every i in [0, n) on the host threads the backend computes with —
     * the CPU backend's pool, idle between its kernels — returning when all
     * are done; for host work beside the model (verifying each request's rows). */
    void (*host_parallel)(sd_backend *be, void (*fn)(void *ctx, int i, int n), void *ctx);
    /* Optional (NULL: malloc and free): host memory that to_host fills
     * fastest (CUDA: page-locked, so that a copy is one DMA straight into
     * it, not staged through the driver's pageable buffer), for the logits
     * rows a pass hands over. host_alloc returns NULL on failure; host_free
     * takes what host_alloc returned, memory from malloc, or NULL. */
    void *(*host_alloc)(sd_backend *be, size_t bytes);
    void (*host_free)(sd_backend *be, void *p);
    /* Waits for queued work (no-op on CPU). */
    void (*sync)(sd_backend *be);
    /* Returns and clears the first error recorded by an op that returns
     * void (device backends); NULL when ops cannot fail that way. */
    sd_status (*take_error)(sd_backend *be);
    /* True once the device failed in a way only a new process recovers from
     * (CUDA: a sticky error, the context is unusable): a worker should exit so
     * that its supervisor starts a new one. NULL: never. */
    bool (*lost)(sd_backend *be);
    void (*destroy)(sd_backend *be);
} sd_backend_ops;

struct sd_backend {
    const sd_backend_ops *ops;
    void *impl;
};

/* Rounds f32 to the nearest bf16 (ties to even), returned as f32. */
static inline float sd_round_bf16(float f)
{
    union {
        float f;
        uint32_t u;
    } v = {.f = f};
    if ((v.u & 0x7fffffffu) > 0x7f800000u) return f; /* NaN */
    v.u = (v.u + 0x7fffu + ((v.u >> 16) & 1u)) & 0xffff0000u;
    return v.f;
}

/* Creates the CPU backend with n_threads worker threads (0 = all cores) in
 * *out; the caller frees it with sd_backend_free. Returns SD_OK, or
 * SD_ERR_NOMEM with a message in err when memory or a worker thread cannot
 * be had; *out is NULL then. */
sd_status sd_backend_cpu_new(int n_threads, sd_backend **out, char *err, size_t errlen);

/* Destroys a backend; NULL is a no-op. */
void sd_backend_free(sd_backend *be);

/* True when be's device is lost (sd_backend_ops.lost); false for NULL. */
bool sd_backend_lost(sd_backend *be);

/* sd_backend_ops.host_parallel, or fn(ctx, 0, 1) where the backend has
 * none (or be is NULL); sd_backend_host_threads: the n it runs with. */
void sd_backend_host_parallel(sd_backend *be, void (*fn)(void *ctx, int i, int n), void *ctx);
int sd_backend_host_threads(sd_backend *be);

/* Number of threads the CPU backend runs; 0 for another backend. */
int sd_backend_cpu_threads(const sd_backend *be);

/* Caps the CPU kernels' instruction set (0 scalar, 1 AVX2, 2 AVX-512 where
 * present, 3 AMX tiles for bf16 matmuls where present; the int8 kernels' too:
 * 2 and 3 are VNNI there) — for benchmarks that measure an older machine's
 * path on this one (levels may differ in the last bits). Returns the level
 * in effect. Process-wide; call before the model is loaded (the AMX level
 * aligns the weights it reads) and before the first forward pass. */
int sd_cpu_set_isa_level(int level);

/* The CPU kernels' instruction set in effect ("amx-bf16", "avx512-bf16", "avx512", "avx2", "scalar"). */
const char *sd_cpu_isa(void);

/* CPUs this process may run on (its affinity mask; at least 1): what "all
 * cores" means for the CPU backend. */
int sd_cpu_count(void);

#endif
