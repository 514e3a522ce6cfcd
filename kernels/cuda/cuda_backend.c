/* cuda_backend.c — the vtable of the CUDA backend (see cuda_backend.h).
 *
 * Host-side glue: device memory, weight upload and conversion, cuBLAS
 * matmul, staging of attention block tables, error bookkeeping. The kernels
 * are in cuda_gemm.cu, cuda_norm.cu, cuda_attention.cu and cuda_elem.cu. One stream per backend orders everything; copies
 * to the host wait for it. Owned device buffers: the weights (sd_weight.owned)
 * and the scratch below, freed by destroy. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "array.h"
#include "cuda_backend.h"
#include "cuda_kernels.h"

/* Set once a CUDA error was sticky: the context is unusable and only a new
 * process gets a working one (cuda_lost). */
static volatile int g_cuda_lost;

/* Set while this thread records a graph (graph_begin .. graph_end). */
static __thread int t_recording;

/* After a failed CUDA call: a non-sticky error (a bad argument, an
 * allocation) is cleared and the device works on; a sticky one (an illegal
 * address, a kernel fault, an uncorrectable ECC error) fails every later
 * call, a synchronisation included. */
static void probe_lost(void)
{
    (void)cudaGetLastError();
    if (t_recording) return; /* nothing ran: the error belongs to the recording, which graph_end drops */
    if (cudaDeviceSynchronize() != cudaSuccess) g_cuda_lost = 1;
}

/* Logs file:line and returns SD_ERR_DEVICE from the enclosing function. */
#define SD_CUDA_CHECK(call)                                                                         \
    do {                                                                                            \
        cudaError_t e_ = (call);                                                                    \
        if (e_ != cudaSuccess) {                                                                    \
            fprintf(stderr, "%s:%d: CUDA error %s: %s\n", __FILE__, __LINE__, cudaGetErrorName(e_), \
                    cudaGetErrorString(e_));                                                        \
            probe_lost();                                                                           \
            return SD_ERR_DEVICE;                                                                   \
        }                                                                                           \
    } while (0)

#define SD_CUBLAS_CHECK(call)                                                                           \
    do {                                                                                                \
        cublasStatus_t s_ = (call);                                                                     \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                              \
            fprintf(stderr, "%s:%d: cuBLAS error %s\n", __FILE__, __LINE__, cublasGetStatusString(s_)); \
            return SD_ERR_DEVICE;                                                                       \
        }                                                                                               \
    } while (0)

/* Elements converted per staging round at upload. */
#define UPLOAD_CHUNK ((size_t)1 << 22)

/* Recorded passes: at most GRAPH_MAX (owner, T) pairs, T <= GRAPH_MAX_T (decode
 * and verify steps; a long prefill chunk gains nothing from a graph). A pair is
 * recorded the second time it is seen, so that the buffers its ops grow have
 * grown in the first, eager pass. */
#define GRAPH_MAX 96
#define GRAPH_MAX_T 256
#define GRAPH_RECORD_AT 2
#define CUBLAS_WORKSPACE ((size_t)32 << 20) /* cuBLAS's advice for Hopper; set, so recording allocates nothing */

typedef struct graph_entry {
    const void *owner; /* the model (one backend may run a target and a drafter) */
    int T;
    int seen; /* passes seen; -1: recording failed, always eager */
    cudaGraphExec_t exec;
} graph_entry;

/* The row draw's buffers (draw_rows): device scratch, and the page-locked
 * staging of its arguments and results (rows, q, then out). */
typedef struct draw_bufs {
    sd_cu_draw_row *rows;
    sd_tokprob *q;
    sd_draw_out *out;
    float *p;             /* [n, vocab] */
    int32_t *mark;        /* [n, vocab] all -1 between draws */
    int32_t *qtok;        /* [q entries] */
    double *rd;           /* [q entries] */
    uint32_t *allow;      /* the rows' allowed-token masks */
    sd_logit_edit *edits; /* the rows' edits */
    size_t rows_cap, q_cap, out_cap, p_cap, mark_cap, qtok_cap, rd_cap, allow_cap, edits_cap;
    void *host; /* page-locked staging [host_cap] */
    size_t host_cap;
} draw_bufs;

typedef struct cuda_impl {
    int device;
    cudaStream_t stream;
    cublasHandle_t blas;
    int batch_invariant; /* matmul: 0 cuBLAS, 1 own deterministic kernel */
    int tc;              /* tensor-core matmul (sm_80+): 1 in batch-invariant mode (default), 2 also for the
                          * default mode's passes of up to TC_FAST_ROWS rows, 0 never (SD_CUDA_TC=0|1|2) */
    sd_status error;     /* first failure of a void op, until taken */
    uint16_t *xbf;       /* device [xbf_cap] bf16 copy of a matmul's x */
    size_t xbf_cap;
    const float *xbf_of; /* the activations xbf holds as bf16 ([xbf_n]; NULL: none): set by rmsnorm, a SwiGLU
                          * epilogue or a conversion, forgotten by every other op (cu) and by writes to them */
    size_t xbf_n;
    int fuse;    /* default mode: packed q/k/v and gate/up weights read by one cuBLAS GEMM with one
                          * epilogue, bf16 copies of rmsnorm and SwiGLU outputs (default on; SD_CUDA_FUSE=0 off) */
    float *ycat; /* device [ycat_cap bytes] a packed group's GEMM result */
    size_t ycat_cap;
    int32_t *meta; /* device [meta_cap] attention rows + block tables */
    size_t meta_cap;
    int32_t *h_meta; /* host staging of the next meta [h_meta_cap] */
    int32_t *h_last; /* host copy of what meta holds now [h_meta_cap] */
    size_t h_meta_cap;
    size_t last_len; /* elements of h_last (0: meta holds nothing) */
    int32_t *amax;   /* device [amax_cap] argmax results */
    size_t amax_cap;
    draw_bufs draw;  /* draw_rows' buffers */
    void *blas_ws;   /* device [CUBLAS_WORKSPACE] */
    int graphs_on;   /* record and replay passes (default on; SD_CUDA_GRAPHS=0 off) */
    int attn_split;  /* attention split over the context (default on; SD_CUDA_ATTN_SPLIT=0 off) */
    int gemv;        /* the GEMV kernel for the default mode's passes of up to 8 rows instead of cuBLAS
                          * (default off: slower on an H200; SD_CUDA_GEMV=1 on) */
    int attn_splits; /* blocks a row and KV head in the split attention (SD_CUDA_ATTN_SPLITS, default 32) */
    int attn_tile;   /* with attn_split, prefill chunks' rows tiled outside batch-invariant mode (default
                          * on; SD_CUDA_ATTN_TILE=0 off) */
    float *att_part; /* device [att_part_cap bytes] the split attention's partial results */
    size_t att_part_cap;
    graph_entry graphs[GRAPH_MAX];
    int n_graphs;
    graph_entry *rec; /* being recorded */
} cuda_impl;

static const sd_backend_ops cuda_ops;

/* The impl, with the backend's device made current for this thread, for
 * the ops that keep im->xbf_of (matmuls read it, rmsnorm sets it). */
static cuda_impl *cu_keep(sd_backend *be)
{
    cuda_impl *im = be->impl;
    cudaSetDevice(im->device);
    return im;
}

/* The impl for every other op: what it writes may be what xbf copies. */
static cuda_impl *cu(sd_backend *be)
{
    cuda_impl *im = cu_keep(be);
    im->xbf_of = NULL;
    return im;
}

/* Forgets xbf's source when [p, p + n) floats, just written, overlap it. */
static void xbf_written(cuda_impl *im, const float *p, size_t n)
{
    if (im->xbf_of && p < im->xbf_of + im->xbf_n && im->xbf_of < p + n) im->xbf_of = NULL;
}

static void note(cuda_impl *im, sd_status st)
{
    if (st != SD_OK && im->error == SD_OK) im->error = st;
}

/* Forgets every recorded pass: device buffers they use were freed or moved. */
static void drop_graphs(cuda_impl *im)
{
    for (int i = 0; i < im->n_graphs; i++)
        if (im->graphs[i].exec) cudaGraphExecDestroy(im->graphs[i].exec);
    im->n_graphs = 0;
}

/* Grows a device buffer to hold `need` bytes (contents not kept). */
static sd_status grow_dev(cuda_impl *im, void **p, size_t *cap, size_t need)
{
    if (need <= *cap) return SD_OK;
    drop_graphs(im);
    SD_CUDA_CHECK(cudaStreamSynchronize(im->stream)); /* the old buffer may be in use */
    SD_CUDA_CHECK(cudaFree(*p));
    *p = NULL;
    *cap = 0;
    size_t bytes = need + need / 4;
    SD_CUDA_CHECK(cudaMalloc(p, bytes));
    *cap = bytes;
    return SD_OK;
}

/* ------------------------------------------------------------- memory */

static void *cuda_alloc(sd_backend *be, size_t bytes)
{
    cuda_impl *im = cu(be);
    void *p = NULL;
    drop_graphs(im); /* a buffer that moves (the model's scratch grows) leaves them stale */
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 1);
    if (e == cudaSuccess) e = cudaMemsetAsync(p, 0, bytes ? bytes : 1, im->stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s:%d: cudaMalloc of %zu bytes: %s\n", __FILE__, __LINE__, bytes, cudaGetErrorString(e));
        cudaFree(p);
        return NULL;
    }
    return p;
}

static void cuda_free(sd_backend *be, void *p)
{
    if (!p) return;
    drop_graphs(cu(be));
    cudaFree(p); /* synchronises the device */
}

/* Copies n elements of t (row-major) to dev as bf16, converting on the host
 * in chunks so the staging stays small. */
static sd_status upload_bf16(cuda_impl *im, const sd_tensor *t, uint16_t *dev, size_t n)
{
    if (n == 0) return SD_OK;
    if (t->dtype == SD_DTYPE_BF16) {
        SD_CUDA_CHECK(cudaMemcpyAsync(dev, t->data, n * 2, cudaMemcpyHostToDevice, im->stream));
        SD_CUDA_CHECK(cudaStreamSynchronize(im->stream));
        return SD_OK;
    }
    size_t chunk = n < UPLOAD_CHUNK ? n : UPLOAD_CHUNK, esz = sd_dtype_size(t->dtype);
    float *f = malloc(chunk * sizeof *f);
    uint16_t *h = malloc(chunk * sizeof *h);
    sd_status st = f && h ? SD_OK : SD_ERR_NOMEM;
    for (size_t i = 0; st == SD_OK && i < n; i += chunk) {
        size_t m = n - i < chunk ? n - i : chunk;
        sd_convert_to_f32(t->dtype, (const char *)t->data + i * esz, f, m);
        for (size_t j = 0; j < m; j++) {
            union {
                float f;
                uint32_t u;
            } v = {.f = sd_round_bf16(f[j])};
            h[j] = f[j] != f[j] ? (uint16_t)0x7fc0u : (uint16_t)(v.u >> 16); /* keep NaN a NaN */
        }
        cudaError_t e = cudaMemcpyAsync(dev + i, h, m * 2, cudaMemcpyHostToDevice, im->stream);
        if (e == cudaSuccess) e = cudaStreamSynchronize(im->stream); /* h is reused */
        if (e != cudaSuccess) {
            fprintf(stderr, "%s:%d: upload of %s: %s\n", __FILE__, __LINE__, t->name, cudaGetErrorString(e));
            st = SD_ERR_DEVICE;
        }
    }
    free(f);
    free(h);
    return st;
}

/* 1-D tensors (norm weights, biases) as f32. */
static sd_status upload_f32(cuda_impl *im, const sd_tensor *t, float *dev, size_t n)
{
    float *f = malloc((n ? n : 1) * sizeof *f);
    if (!f) return SD_ERR_NOMEM;
    sd_convert_to_f32(t->dtype, t->data, f, n);
    cudaError_t e = cudaMemcpyAsync(dev, f, n * sizeof *f, cudaMemcpyHostToDevice, im->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(im->stream);
    free(f);
    SD_CUDA_CHECK(e);
    return SD_OK;
}

static sd_status cuda_upload(sd_backend *be, const sd_tensor *t, sd_weight *w, char *err, size_t errlen)
{
    cuda_impl *im = cu(be);
    memset(w, 0, sizeof *w);
    int64_t rows = t->ndim >= 2 ? t->shape[0] : 1;
    int64_t cols = t->ndim >= 2 ? t->shape[1] : (t->ndim == 1 ? t->shape[0] : 1);
    if (t->ndim > 2 || rows > INT32_MAX || cols > INT32_MAX)
        return sd_seterr(err, errlen, SD_ERR_FORMAT, "tensor %s: expected a 1-D or 2-D weight", t->name);
    size_t n = (size_t)rows * (size_t)cols;
    int is_matrix = t->ndim == 2;
    void *dev = NULL;
    cudaError_t e = cudaMalloc(&dev, n * (is_matrix ? 2 : 4) + 16);
    if (e != cudaSuccess)
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "tensor %s: device allocation of %zu elements: %s", t->name, n,
                         cudaGetErrorString(e));
    sd_status st = is_matrix ? upload_bf16(im, t, dev, n) : upload_f32(im, t, dev, n);
    if (st != SD_OK) {
        cudaFree(dev);
        return sd_seterr(err, errlen, st, "tensor %s: upload to the device failed", t->name);
    }
    w->dtype = is_matrix ? SD_DTYPE_BF16 : SD_DTYPE_F32;
    w->rows = (int)rows;
    w->cols = (int)cols;
    w->data = dev;
    w->owned = dev;
    return SD_OK;
}

/* backend.h pack: one allocation, the old ones freed. Left as they are (SD_OK)
 * with fusion off, when a weight is not a bf16 matrix this backend owns, or
 * when the device has no room for the copy. */
static sd_status cuda_pack(sd_backend *be, sd_weight *const *w, int n, char *err, size_t errlen)
{
    cuda_impl *im = cu(be);
    size_t bytes = 0, off[8];
    if (!im->fuse || n < 2 || n > 8) return SD_OK;
    for (int i = 0; i < n; i++) {
        if (w[i]->dtype != SD_DTYPE_BF16 || !w[i]->owned || w[i]->data != w[i]->owned || w[i]->cols != w[0]->cols)
            return SD_OK;
        off[i] = bytes;
        bytes += (size_t)w[i]->rows * w[i]->cols * 2;
    }
    void *dev = NULL;
    cudaError_t e = cudaMalloc(&dev, bytes + 16);
    if (e == cudaErrorMemoryAllocation) { /* no room for the copy: they stay apart, each GEMM on its own */
        (void)cudaGetLastError();
        return SD_OK;
    }
    for (int i = 0; i < n && e == cudaSuccess; i++)
        e = cudaMemcpyAsync((char *)dev + off[i], w[i]->data, (size_t)w[i]->rows * w[i]->cols * 2,
                            cudaMemcpyDeviceToDevice, im->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(im->stream);
    if (e != cudaSuccess) {
        cudaFree(dev);
        return sd_seterr(err, errlen, SD_ERR_DEVICE, "packing %d weights of %zu bytes: %s", n, bytes,
                         cudaGetErrorString(e));
    }
    drop_graphs(im);
    for (int i = 0; i < n; i++) {
        cudaFree(w[i]->owned);
        w[i]->owned = i == 0 ? dev : NULL;
        w[i]->data = (char *)dev + off[i];
    }
    return SD_OK;
}

static void cuda_release(sd_backend *be, sd_weight *w)
{
    cuda_free(be, w->owned);
    memset(w, 0, sizeof *w);
}

static void cuda_to_backend(sd_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_impl *im = cu(be);
    /* pageable src: the call returns once src is staged, so it may be reused */
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, im->stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s:%d: to_backend: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));
        note(im, SD_ERR_DEVICE);
    }
}

static void cuda_to_host(sd_backend *be, void *dst, const void *src, size_t bytes)
{
    cuda_impl *im = cu(be);
    cudaError_t e = cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, im->stream);
    if (e == cudaSuccess) e = cudaStreamSynchronize(im->stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s:%d: to_host: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));
        note(im, SD_ERR_DEVICE);
    }
}

/* ------------------------------------------------------------- matmul */

/* x[T, K] as bf16 in im->xbf, for the cuBLAS matmuls that read it. */
static sd_status x_to_bf16(cuda_impl *im, const float *x, int T, int K)
{
    size_t n = (size_t)T * K;
    if (im->xbf_of == x && im->xbf_n == n) return SD_OK; /* converted already (rmsnorm, SwiGLU epilogue) */
    im->xbf_of = NULL;
    sd_status st = grow_dev(im, (void **)&im->xbf, &im->xbf_cap, n * sizeof(uint16_t));
    if (st != SD_OK) return st;
    SD_CUDA_CHECK(sd_cu_f32_to_bf16(im->stream, im->xbf, x, n));
    if (im->fuse) {
        im->xbf_of = x;
        im->xbf_n = n;
    }
    return SD_OK;
}

/* A residual group's epilogue with the norm after it (nf->norm of nf->res
 * into nf->norm_y) in one launch, and the bf16 copy of norm_y that the next
 * matmul reads (as cuda_rmsnorm's). */
static sd_status residual_norm(cuda_impl *im, float *y, const float *bias, int T, int N, int bf16,
                               const sd_mm_fused *nf)
{
    size_t n = (size_t)T * N;
    uint16_t *ybf = NULL; /* xbf is this GEMM's input: grow_dev waits for it before moving it */
    if (grow_dev(im, (void **)&im->xbf, &im->xbf_cap, n * sizeof(uint16_t)) == SD_OK) ybf = im->xbf;
    im->xbf_of = NULL;
    SD_CUDA_CHECK(
        sd_cu_residual_norm(im->stream, y, bias, nf->res, T, N, bf16, nf->norm->data, nf->eps, nf->norm_y, ybf));
    if (ybf) {
        im->xbf_of = nf->norm_y;
        im->xbf_n = n;
    }
    return SD_OK;
}

/* y = xbf · W^T with cuBLAS, then the epilogue (bias, rounding, res += y;
 * with nf, a residual group with a norm: residual_norm).
 * cuBLAS sees row-major y[T, N] as column-major y^T [N, T]:
 * y^T = W · x^T with W row-major [N, K] = column-major [K, N] transposed. */
static sd_status gemm_cublas(cuda_impl *im, float *y, const sd_weight *w, const float *bias, float *res, int T,
                             int bf16, const sd_mm_fused *nf)
{
    int N = w->rows, K = w->cols;
    const float one = 1.0f, zero = 0.0f;
    SD_CUBLAS_CHECK(cublasGemmEx(im->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, w->data, CUDA_R_16BF, K, im->xbf,
                                 CUDA_R_16BF, K, &zero, y, CUDA_R_32F, N, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
    if (nf) return residual_norm(im, y, bias, T, N, bf16, nf);
    if (bias || bf16 || res) SD_CUDA_CHECK(sd_cu_bias_round(im->stream, y, bias, res, T, N, bf16));
    return SD_OK;
}

/* Whether the tensor-core kernel takes a matmul of x over K columns: bf16
 * activations (x holds bf16 values, packed without loss), K a multiple of
 * 32, x aligned for its 16-byte loads. */
static bool tc_takes(const cuda_impl *im, const float *x, int K, int bf16)
{
    return im->tc && bf16 && K % 32 == 0 && ((uintptr_t)x & 15u) == 0;
}

/* Rows up to which SD_CUDA_TC=2 takes the default mode's matmuls off cuBLAS
 * (one read of the weights: decode and verify passes, not prefill chunks). */
#define TC_FAST_ROWS 64

/* Whether a matmul of T rows runs the tensor-core kernel in the default mode. */
static bool tc_fast(const cuda_impl *im, const float *x, int T, int K, int bf16)
{
    return im->tc == 2 && T <= TC_FAST_ROWS && tc_takes(im, x, K, bf16);
}

/* Whether the default mode's matmul of T rows over K columns runs the GEMV
 * kernel (sd_cu_gemv) instead of cuBLAS: bf16 activations, T <= 8, K a
 * multiple of 8, x and every weight aligned for 16-byte loads. */
static bool gemv_takes(const cuda_impl *im, const float *x, int T, int K, int bf16, const sd_weight *const *w, int n)
{
    if (!im->gemv || im->batch_invariant || !bf16 || T > SD_CU_GEMV_MAX_T || K % 8 != 0 || ((uintptr_t)x & 15u))
        return false;
    for (int i = 0; i < n; i++)
        if (w[i]->cols != K || ((uintptr_t)w[i]->data & 15u)) return false;
    return true;
}

/* The GEMV kernel over the n weights of w sharing x (one launch). */
static sd_status gemv(cuda_impl *im, float *const *y, const float *x, const sd_weight *const *w,
                      const float *const *bias, int n, float *res, int T, int bf16)
{
    sd_cu_mm_job job = {.n = n, .res = res};
    for (int i = 0; i < n; i++) {
        job.w[i] = w[i]->data;
        job.bias[i] = bias[i];
        job.y[i] = y[i];
        job.N[i] = w[i]->rows;
    }
    SD_CUDA_CHECK(sd_cu_gemv(im->stream, &job, x, T, w[0]->cols, bf16));
    return SD_OK;
}

/* The batch-invariant matmul (own kernel), then res += y when res is given. */
static sd_status gemm_invariant(cuda_impl *im, float *y, const float *x, const sd_weight *w, const float *bias,
                                float *res, int T, int bf16)
{
    if (tc_takes(im, x, w->cols, bf16)) {
        sd_cu_mm_job job = {{w->data}, {bias}, {y}, {w->rows}, 1, res};
        SD_CUDA_CHECK(sd_cu_gemm_tc(im->stream, &job, x, T, w->cols, bf16));
        return SD_OK;
    }
    SD_CUDA_CHECK(sd_cu_gemm_bf16(im->stream, y, x, w->data, bias, T, w->rows, w->cols, bf16));
    if (res) SD_CUDA_CHECK(sd_cu_add(im->stream, res, y, (size_t)T * w->rows, bf16));
    return SD_OK;
}

/* A fused group in one launch of the tensor-core kernel (false: it does not apply). */
static bool gemm_tc_group(cuda_impl *im, const sd_mm_fused *f, const float *x, int T, int bf16, sd_status *st)
{
    int K = f->w[0]->cols;
    if (!tc_takes(im, x, K, bf16)) return false;
    sd_cu_mm_job job = {.n = f->n, .res = f->kind == SD_MM_RESIDUAL ? f->res : NULL};
    for (int i = 0; i < f->n; i++) {
        if (f->w[i]->cols != K) return false;
        job.w[i] = f->w[i]->data;
        job.bias[i] = f->bias[i] ? f->bias[i]->data : NULL;
        job.y[i] = f->y[i];
        job.N[i] = f->w[i]->rows;
    }
    cudaError_t e = sd_cu_gemm_tc(im->stream, &job, x, T, K, bf16);
    if (e != cudaSuccess) fprintf(stderr, "%s:%d: matmul: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));
    *st = e == cudaSuccess ? SD_OK : SD_ERR_DEVICE;
    return true;
}

static bool uploaded(cuda_impl *im, const sd_weight *w)
{
    if (w->dtype == SD_DTYPE_BF16) return true;
    fprintf(stderr, "%s:%d: matmul: weight not uploaded by the CUDA backend\n", __FILE__, __LINE__);
    note(im, SD_ERR_ARG);
    return false;
}

static void cuda_matmul(sd_backend *be, float *y, const float *x, const sd_weight *w, const sd_weight *bias, int T,
                        int bf16)
{
    cuda_impl *im = cu_keep(be);
    if (T <= 0 || !uploaded(im, w)) return;
    const float *b = bias ? bias->data : NULL;
    sd_status st;
    if (im->batch_invariant || tc_fast(im, x, T, w->cols, bf16)) st = gemm_invariant(im, y, x, w, b, NULL, T, bf16);
    else if (gemv_takes(im, x, T, w->cols, bf16, &w, 1)) st = gemv(im, &y, x, &w, &b, 1, NULL, T, bf16);
    else if ((st = x_to_bf16(im, x, T, w->cols)) == SD_OK) st = gemm_cublas(im, y, w, b, NULL, T, bf16, NULL);
    xbf_written(im, y, (size_t)T * w->rows);
    note(im, st);
}

/* Whether a group's weights lie one after the other in one allocation
 * (cuda_pack) and one GEMM with sd_cu_split_epilogue can run it. */
static bool packed(const sd_mm_fused *f)
{
    if (f->n < 2 || f->kind == SD_MM_RESIDUAL) return false;
    for (int i = 1; i < f->n; i++) {
        const sd_weight *a = f->w[i - 1], *b = f->w[i];
        if (b->cols != a->cols || (const char *)b->data != (const char *)a->data + (size_t)a->rows * a->cols * 2)
            return false;
    }
    return f->kind != SD_MM_SWIGLU || (f->w[0]->rows == f->w[1]->rows && !f->bias[0] && !f->bias[1]);
}

/* A packed group: one cuBLAS GEMM over the weights' rows together into
 * im->ycat, then one epilogue launch (bias, rounding; SwiGLU's silu_mul and a
 * bf16 copy of its result, which the down matmul reads: *shadow). */
static sd_status gemm_packed(cuda_impl *im, const sd_mm_fused *f, const float *x, int T, int bf16, bool *shadow)
{
    int K = f->w[0]->cols, N = 0;
    sd_cu_split s = {.n = f->n, .swiglu = f->kind == SD_MM_SWIGLU};
    for (int i = 0; i < f->n; i++) {
        s.N[i] = f->w[i]->rows;
        s.y[i] = f->y[i];
        s.bias[i] = f->bias[i] ? f->bias[i]->data : NULL;
        N += s.N[i];
    }
    sd_status st = x_to_bf16(im, x, T, K);
    if (st == SD_OK) st = grow_dev(im, (void **)&im->ycat, &im->ycat_cap, (size_t)T * N * sizeof(float));
    if (st != SD_OK) return st;
    const float one = 1.0f, zero = 0.0f;
    SD_CUBLAS_CHECK(cublasGemmEx(im->blas, CUBLAS_OP_T, CUBLAS_OP_N, N, T, K, &one, f->w[0]->data, CUDA_R_16BF, K,
                                 im->xbf, CUDA_R_16BF, K, &zero, im->ycat, CUDA_R_32F, N, CUBLAS_COMPUTE_32F,
                                 CUBLAS_GEMM_DEFAULT));
    if (s.swiglu) { /* xbf, the GEMM's input, becomes the down matmul's (grow_dev waits for the GEMM) */
        im->xbf_of = NULL;
        if ((st = grow_dev(im, (void **)&im->xbf, &im->xbf_cap, (size_t)T * s.N[0] * sizeof(uint16_t))) != SD_OK)
            return st;
        s.ybf = im->xbf;
    }
    s.ycat = im->ycat;
    SD_CUDA_CHECK(sd_cu_split_epilogue(im->stream, &s, T, bf16));
    *shadow = s.ybf != NULL;
    return SD_OK;
}

static void cuda_rmsnorm(sd_backend *be, float *y, const float *x, const sd_weight *w, int T, int D, float eps,
                         int bf16);

/* A fused group (backend.h): x converted to bf16 once for all its matmuls,
 * the residual add in the matmul's epilogue; the same arithmetic as the
 * composed ops, so the same bits. */
static void cuda_matmul_fused(sd_backend *be, const sd_mm_fused *f, const float *x, int T, int bf16)
{
    cuda_impl *im = cu_keep(be);
    if (T <= 0) return;
    if (f->kind == SD_MM_PARTIAL) { /* partial sums of a row-parallel matmul: raw f32, no bias */
        for (int i = 0; i < f->n; i++) cuda_matmul(be, f->y[i], x, f->w[i], NULL, T, 0);
        return;
    }
    for (int i = 0; i < f->n; i++)
        if (!uploaded(im, f->w[i])) return;
    float *res = f->kind == SD_MM_RESIDUAL ? f->res : NULL;
    /* a norm after the residual add: in cuBLAS's epilogue when the fusions are on, else the op after */
    const sd_mm_fused *nf = res && f->norm && im->fuse ? f : NULL;
    bool normed = false;
    sd_status st = SD_OK;
    bool grouped =
        (im->batch_invariant || tc_fast(im, x, T, f->w[0]->cols, bf16)) && gemm_tc_group(im, f, x, T, bf16, &st);
    bool whole = false, shadow = false; /* whole: the packed path ran the group, silu_mul included */
    if (!grouped && !im->batch_invariant && im->fuse && packed(f) &&
        !gemv_takes(im, x, T, f->w[0]->cols, bf16, f->w, f->n)) {
        st = gemm_packed(im, f, x, T, bf16, &shadow);
        grouped = whole = true;
    }
    if (!grouped && gemv_takes(im, x, T, f->w[0]->cols, bf16, f->w, f->n)) {
        const float *b[3] = {0};
        for (int i = 0; i < f->n; i++) b[i] = f->bias[i] ? f->bias[i]->data : NULL;
        st = gemv(im, f->y, x, f->w, b, f->n, res, T, bf16);
        grouped = true;
    }
    if (!grouped && !im->batch_invariant) st = x_to_bf16(im, x, T, f->w[0]->cols);
    for (int i = 0; i < f->n && st == SD_OK && !grouped; i++) {
        const float *b = f->bias[i] ? f->bias[i]->data : NULL;
        if (im->batch_invariant) {
            st = gemm_invariant(im, f->y[i], x, f->w[i], b, res, T, bf16);
        } else {
            st = gemm_cublas(im, f->y[i], f->w[i], b, res, T, bf16, nf);
            normed = nf != NULL;
        }
    }
    if (st == SD_OK && f->kind == SD_MM_SWIGLU && !whole) {
        cudaError_t e = sd_cu_silu_mul(im->stream, f->y[0], f->y[0], f->y[1], (size_t)T * f->w[0]->rows, bf16);
        if (e != cudaSuccess) {
            fprintf(stderr, "%s:%d: silu_mul: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));
            st = SD_ERR_DEVICE;
        }
    }
    for (int i = 0; i < f->n; i++) xbf_written(im, f->y[i], (size_t)T * f->w[i]->rows);
    if (res) xbf_written(im, res, (size_t)T * f->w[0]->rows);
    if (shadow && st == SD_OK) {
        im->xbf_of = f->y[0];
        im->xbf_n = (size_t)T * f->w[0]->rows;
    }
    note(im, st);
    if (st == SD_OK && res && f->norm && !normed)
        cuda_rmsnorm(be, f->norm_y, res, f->norm, T, f->w[0]->rows, f->eps, bf16);
}

/* ------------------------------------------------------ elementwise ops */

/* Records a failed launch of a void op. */
static void launched(cuda_impl *im, cudaError_t e, const char *what, int line)
{
    if (e == cudaSuccess) return;
    fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, line, what, cudaGetErrorString(e));
    note(im, SD_ERR_DEVICE);
}

static void cuda_rmsnorm(sd_backend *be, float *y, const float *x, const sd_weight *w, int T, int D, float eps,
                         int bf16)
{
    cuda_impl *im = cu(be);
    size_t n = (size_t)T * D;
    uint16_t *ybf = NULL; /* a bf16 copy for the cuBLAS matmul that reads y next */
    if (im->fuse && !im->batch_invariant && T > 0 &&
        grow_dev(im, (void **)&im->xbf, &im->xbf_cap, n * sizeof(uint16_t)) == SD_OK)
        ybf = im->xbf;
    launched(im, sd_cu_rmsnorm(im->stream, y, x, w->data, T, D, eps, bf16, ybf), "rmsnorm", __LINE__);
    if (ybf) {
        im->xbf_of = y;
        im->xbf_n = n;
    }
}

static void cuda_embed(sd_backend *be, float *y, const sd_weight *E, const int32_t *ids, int T)
{
    cuda_impl *im = cu(be);
    launched(im, sd_cu_embed(im->stream, y, E->data, ids, T, E->cols), "embed", __LINE__);
}

static void cuda_rope(sd_backend *be, float *x, const float *cs, const float *sn, int T, int nh, int hd, int bf16)
{
    cuda_impl *im = cu(be);
    launched(im, sd_cu_rope(im->stream, x, cs, sn, T, nh, hd, bf16), "rope", __LINE__);
}

static void cuda_kv_write(sd_backend *be, sd_kv_layer *kv, const float *k, const float *v, const int32_t *slots, int T,
                          int kv_dim)
{
    cuda_impl *im = cu(be);
    int kvb = kv->dtype == SD_DTYPE_BF16;
    launched(im, sd_cu_kv_write(im->stream, kv->k, kv->v, k, v, slots, T, kv_dim, kvb), "kv_write", __LINE__);
}

/* backend.h qk_rope_kv: one launch with fusion on (sd_cu_qk_rope_kv), else the ops one by one. */
static void cuda_qk_rope_kv(sd_backend *be, const sd_qk_rope_kv *a)
{
    cuda_impl *im = cu(be);
    int kvb = a->kv->dtype == SD_DTYPE_BF16, hd = a->head_dim;
    sd_cu_qkrk k = {.q = a->q,
                    .k = a->k,
                    .v = a->v,
                    .qn = a->q_norm ? a->q_norm->data : NULL,
                    .kn = a->k_norm ? a->k_norm->data : NULL,
                    .cs = a->cos,
                    .sn = a->sin,
                    .slots = a->slots,
                    .eps = a->eps,
                    .T = a->T,
                    .nh = a->n_heads,
                    .nkv = a->n_kv_heads,
                    .hd = hd,
                    .bf16 = a->bf16};
    if (im->fuse && hd <= SD_CU_MAX_HEAD_DIM) {
        launched(im, sd_cu_qk_rope_kv(im->stream, &k, a->kv->k, a->kv->v, kvb), "qk_rope_kv", __LINE__);
        return;
    }
    if (k.qn) cuda_rmsnorm(be, a->q, a->q, a->q_norm, a->T * a->n_heads, hd, a->eps, a->bf16);
    if (k.kn) cuda_rmsnorm(be, a->k, a->k, a->k_norm, a->T * a->n_kv_heads, hd, a->eps, a->bf16);
    cuda_rope(be, a->q, a->cos, a->sin, a->T, a->n_heads, hd, a->bf16);
    cuda_rope(be, a->k, a->cos, a->sin, a->T, a->n_kv_heads, hd, a->bf16);
    cuda_kv_write(be, a->kv, a->k, a->v, a->slots, a->T, a->n_kv_heads * hd);
}

static void cuda_silu_mul(sd_backend *be, float *out, const float *gate, const float *up, size_t n, int bf16)
{
    cuda_impl *im = cu(be);
    launched(im, sd_cu_silu_mul(im->stream, out, gate, up, n, bf16), "silu_mul", __LINE__);
}

static void cuda_add(sd_backend *be, float *y, const float *x, size_t n, int bf16)
{
    cuda_impl *im = cu(be);
    launched(im, sd_cu_add(im->stream, y, x, n, bf16), "add", __LINE__);
}

static void cuda_copy_cols(sd_backend *be, float *dst, const float *src, int T, int ld, int c0, int n)
{
    cuda_impl *im = cu_keep(be);
    if (T <= 0 || n <= 0) return;
    launched(im,
             cudaMemcpy2DAsync(dst, (size_t)n * sizeof *dst, src + c0, (size_t)ld * sizeof *src,
                               (size_t)n * sizeof *dst, (size_t)T, cudaMemcpyDeviceToDevice, im->stream),
             "copy_cols", __LINE__);
    xbf_written(im, dst, (size_t)T * n);
}

static void cuda_reduce_parts(sd_backend *be, float *y, const float *parts, int n_parts, int T, int N,
                              const sd_weight *bias, int bf16)
{
    cuda_impl *im = cu_keep(be);
    launched(im, sd_cu_reduce_parts(im->stream, y, parts, n_parts, T, N, bias ? bias->data : NULL, bf16),
             "reduce_parts", __LINE__);
    xbf_written(im, y, (size_t)T * N);
}

static void cuda_sync(sd_backend *be)
{
    cuda_impl *im = cu(be);
    launched(im, cudaStreamSynchronize(im->stream), "sync", __LINE__);
}

/* ----------------------------------------------------------- attention */

/* Fills h_meta with the layout of sd_cu_attention (positions, table
 * offsets, row indices of prefill chunks, then each sequence's block
 * table) for T rows. */
static sd_status stage_meta(cuda_impl *im, const sd_attn_seq *seqs, int n_seqs, int T, int bs, size_t *len)
{
    size_t n = 3 * (size_t)T;
    for (int s = 0; s < n_seqs; s++) n += (size_t)(seqs[s].pos0 + seqs[s].n + bs - 1) / bs;
    const sd_grow_item host[] = {SD_GROW_ITEM(im->h_meta), SD_GROW_ITEM(im->h_last)};
    if (sd_grow_all(host, 2, &im->h_meta_cap, n) != SD_OK) return SD_ERR_NOMEM;
    int32_t *m = im->h_meta;
    size_t off = 0;
    for (int s = 0; s < n_seqs; s++) {
        const sd_attn_seq *q = &seqs[s];
        int nb = (q->pos0 + q->n + bs - 1) / bs;
        for (int i = 0; i < q->n; i++) {
            m[q->row0 + i] = q->pos0 + i;
            m[T + q->row0 + i] = (int32_t)off;
            m[2 * (size_t)T + q->row0 + i] = q->n >= SD_CU_TILE_MIN_ROWS ? i : -1;
        }
        memcpy(m + 3 * (size_t)T + off, q->block_table, (size_t)nb * sizeof *m);
        off += (size_t)nb;
    }
    *len = n;
    return SD_OK;
}

/* Puts the tables of seqs (T rows) in im->meta. Every layer of a forward
 * pass sends the same tables: they are copied only when they changed (so
 * never while recording, after attn_stage). */
static sd_status put_meta(cuda_impl *im, const sd_attn_seq *seqs, int n_seqs, int T, int bs)
{
    for (int s = 0; s < n_seqs; s++)
        if (seqs[s].n < 0 || seqs[s].pos0 < 0 || seqs[s].row0 < 0 || seqs[s].row0 + seqs[s].n > T) return SD_ERR_ARG;
    if (bs <= 0) return SD_ERR_ARG;
    if (T == 0) return SD_OK;
    size_t len = 0;
    sd_status st = stage_meta(im, seqs, n_seqs, T, bs, &len);
    if (st != SD_OK) return st;
    if (len != im->last_len || memcmp(im->h_meta, im->h_last, len * sizeof(int32_t)) != 0) {
        im->last_len = 0;
        st = grow_dev(im, (void **)&im->meta, &im->meta_cap, len * sizeof(int32_t));
        if (st != SD_OK) return st;
        /* pageable source: staged before return, so h_meta may be rewritten */
        SD_CUDA_CHECK(cudaMemcpyAsync(im->meta, im->h_meta, len * sizeof(int32_t), cudaMemcpyHostToDevice, im->stream));
        int32_t *t = im->h_last;
        im->h_last = im->h_meta;
        im->h_meta = t;
        im->last_len = len;
    }
    return SD_OK;
}

static int rows_of(const sd_attn_seq *seqs, int n_seqs)
{
    int T = 0;
    for (int s = 0; s < n_seqs; s++) T += seqs[s].n;
    return T;
}

static sd_status cuda_attn_stage(sd_backend *be, const sd_attn_seq *seqs, int n_seqs, int block_size)
{
    return put_meta(cu(be), seqs, n_seqs, rows_of(seqs, n_seqs), block_size);
}

static sd_status cuda_attention(sd_backend *be, float *out, const float *q, const sd_kv_layer *kv,
                                const sd_attn_seq *seqs, int n_seqs, const sd_attn_shape *sh)
{
    cuda_impl *im = cu(be);
    int T = rows_of(seqs, n_seqs);
    if (sh->head_dim <= 0 || sh->head_dim > SD_CU_MAX_HEAD_DIM || sh->n_kv_heads <= 0 ||
        sh->n_heads % sh->n_kv_heads != 0)
        return SD_ERR_ARG;
    if (kv->dtype != SD_DTYPE_F32 && kv->dtype != SD_DTYPE_BF16) return SD_ERR_UNSUPPORTED;
    sd_status st = put_meta(im, seqs, n_seqs, T, sh->block_size);
    if (st != SD_OK || T == 0) return st;
    int kvb = kv->dtype == SD_DTYPE_BF16;
    if (!im->attn_split) {
        SD_CUDA_CHECK(sd_cu_attention(im->stream, out, q, kv->k, kv->v, im->meta, T, sh->n_heads, sh->n_kv_heads,
                                      sh->head_dim, sh->block_size, sh->scale, sh->bf16, kvb));
        return SD_OK;
    }
    /* sized by T and the heads only, at least for every T a graph is recorded for (growing drops
     * the graphs): the first (eager) pass of a T grows it, never a recording one */
    size_t part =
        sd_cu_attention_split_floats(T > GRAPH_MAX_T ? T : GRAPH_MAX_T, sh->n_heads, sh->head_dim, im->attn_splits) *
        sizeof(float);
    if ((st = grow_dev(im, (void **)&im->att_part, &im->att_part_cap, part)) != SD_OK) return st;
    /* prefill rows tiled: decided by T and the shape only (a recorded pass replays any batch of its T) */
    int tiled = im->attn_tile && !im->batch_invariant && T >= SD_CU_TILE_MIN_ROWS &&
                sd_cu_attention_tile_rows(sh->n_heads, sh->n_kv_heads, sh->head_dim) > 0;
    sd_cu_att_args a = {.out = out,
                        .q = q,
                        .kc = kv->k,
                        .vc = kv->v,
                        .meta = im->meta,
                        .part = im->att_part,
                        .T = T,
                        .nh = sh->n_heads,
                        .nkv = sh->n_kv_heads,
                        .hd = sh->head_dim,
                        .bs = sh->block_size,
                        .scale = sh->scale,
                        .bf16 = sh->bf16,
                        .kv_bf16 = kvb,
                        .tiled = tiled,
                        .splits = im->attn_splits};
    SD_CUDA_CHECK(sd_cu_attention_split(im->stream, &a));
    return SD_OK;
}

/* --------------------------------------------------------------- graphs */

static graph_entry *find_graph(cuda_impl *im, const void *owner, int T)
{
    for (int i = 0; i < im->n_graphs; i++)
        if (im->graphs[i].owner == owner && im->graphs[i].T == T) return &im->graphs[i];
    if (im->n_graphs == GRAPH_MAX) return NULL;
    graph_entry *g = &im->graphs[im->n_graphs++];
    *g = (graph_entry){owner, T, 0, NULL};
    return g;
}

static int cuda_graph_begin(sd_backend *be, const void *owner, int T)
{
    cuda_impl *im = cu(be);
    if (!im->graphs_on || T <= 0 || T > GRAPH_MAX_T || t_recording) return SD_GRAPH_EAGER;
    graph_entry *g = find_graph(im, owner, T);
    if (!g || g->seen < 0) return SD_GRAPH_EAGER;
    if (g->exec) {
        cudaError_t e = cudaGraphLaunch(g->exec, im->stream);
        if (e == cudaSuccess) return SD_GRAPH_REPLAYED;
        fprintf(stderr, "%s:%d: graph launch (T=%d): %s; eager from now on\n", __FILE__, __LINE__, T,
                cudaGetErrorString(e));
        probe_lost();
        cudaGraphExecDestroy(g->exec);
        g->exec = NULL;
        g->seen = -1;
        return SD_GRAPH_EAGER;
    }
    if (++g->seen < GRAPH_RECORD_AT) return SD_GRAPH_EAGER;
    if (cudaStreamBeginCapture(im->stream, cudaStreamCaptureModeThreadLocal) != cudaSuccess) {
        (void)cudaGetLastError();
        g->seen = -1;
        return SD_GRAPH_EAGER;
    }
    t_recording = 1;
    im->rec = g;
    return SD_GRAPH_RECORD;
}

static sd_status cuda_graph_end(sd_backend *be, bool ok)
{
    cuda_impl *im = cu(be);
    graph_entry *g = im->rec;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamEndCapture(im->stream, &graph);
    t_recording = 0;
    im->rec = NULL;
    cudaGraphExec_t exec = NULL;
    if (ok && e == cudaSuccess && graph && im->error == SD_OK) e = cudaGraphInstantiate(&exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (!exec) {
        /* nothing ran: errors recorded meanwhile belong to the recording */
        (void)cudaGetLastError();
        im->error = SD_OK;
        if (g) g->seen = -1;
        return SD_ERR_DEVICE;
    }
    e = cudaGraphLaunch(exec, im->stream);
    if (e != cudaSuccess) {
        fprintf(stderr, "%s:%d: graph launch: %s\n", __FILE__, __LINE__, cudaGetErrorString(e));
        probe_lost();
        cudaGraphExecDestroy(exec);
        if (g) g->seen = -1;
        return SD_ERR_DEVICE;
    }
    if (g) g->exec = exec;
    else cudaGraphExecDestroy(exec);
    return SD_OK;
}

/* ------------------------------------------------------------ lifetime */

static void cuda_destroy(sd_backend *be)
{
    cuda_impl *im = cu(be);
    if (im->stream) cudaStreamSynchronize(im->stream);
    drop_graphs(im);
    cudaFree(im->blas_ws);
    cudaFree(im->xbf);
    cudaFree(im->ycat);
    cudaFree(im->meta);
    cudaFree(im->att_part);
    cudaFree(im->amax);
    draw_bufs *d = &im->draw;
    cudaFree(d->rows);
    cudaFree(d->q);
    cudaFree(d->out);
    cudaFree(d->p);
    cudaFree(d->mark);
    cudaFree(d->qtok);
    cudaFree(d->rd);
    cudaFree(d->allow);
    cudaFree(d->edits);
    cudaFreeHost(d->host);
    free(im->h_meta);
    free(im->h_last);
    if (im->blas) cublasDestroy(im->blas);
    if (im->stream) cudaStreamDestroy(im->stream);
    free(im);
    free(be);
}

static sd_status cuda_mem_info(sd_backend *be, size_t *free_bytes, size_t *total_bytes)
{
    (void)cu(be);
    return cudaMemGetInfo(free_bytes, total_bytes) == cudaSuccess ? SD_OK : SD_ERR_DEVICE;
}

static sd_status cuda_argmax_op(sd_backend *be, int32_t *out, const float *logits, int rows, int vocab)
{
    return sd_cuda_argmax(be, logits, rows, vocab, out);
}

/* What a row draw call moves: q entries, mask words and edits in all. */
typedef struct draw_sizes {
    size_t nq, words, edits;
} draw_sizes;

/* The row draw's buffers for n rows of vocab (each buffer at least one entry). */
static sd_status draw_grow(cuda_impl *im, int n, int vocab, draw_sizes z)
{
    draw_bufs *d = &im->draw;
    size_t cells = (size_t)n * (size_t)vocab, qn = z.nq + 1, wn = z.words + 1, en = z.edits + 1;
    sd_status st = grow_dev(im, (void **)&d->rows, &d->rows_cap, (size_t)n * sizeof *d->rows);
    if (st == SD_OK) st = grow_dev(im, (void **)&d->q, &d->q_cap, qn * sizeof *d->q);
    if (st == SD_OK) st = grow_dev(im, (void **)&d->out, &d->out_cap, (size_t)n * sizeof *d->out);
    if (st == SD_OK) st = grow_dev(im, (void **)&d->p, &d->p_cap, cells * sizeof *d->p);
    if (st == SD_OK) st = grow_dev(im, (void **)&d->qtok, &d->qtok_cap, qn * sizeof *d->qtok);
    if (st == SD_OK) st = grow_dev(im, (void **)&d->rd, &d->rd_cap, qn * sizeof *d->rd);
    if (st == SD_OK) st = grow_dev(im, (void **)&d->allow, &d->allow_cap, wn * sizeof *d->allow);
    if (st == SD_OK) st = grow_dev(im, (void **)&d->edits, &d->edits_cap, en * sizeof *d->edits);
    size_t had = d->mark_cap;
    if (st == SD_OK) st = grow_dev(im, (void **)&d->mark, &d->mark_cap, cells * sizeof *d->mark);
    if (st != SD_OK) return st;
    if (d->mark_cap != had) SD_CUDA_CHECK(cudaMemsetAsync(d->mark, 0xff, d->mark_cap, im->stream)); /* -1 */
    size_t host = (size_t)n * (sizeof *d->rows + sizeof *d->out) + qn * sizeof *d->q + wn * sizeof *d->allow +
                  en * sizeof *d->edits;
    if (host > d->host_cap) {
        SD_CUDA_CHECK(cudaStreamSynchronize(im->stream));
        cudaFreeHost(d->host);
        d->host = NULL;
        d->host_cap = 0;
        SD_CUDA_CHECK(cudaHostAlloc(&d->host, host + host / 4, cudaHostAllocPortable));
        d->host_cap = host + host / 4;
    }
    return SD_OK;
}

/* The rows' q, masks and edits counted; SD_ERR_ARG for a list that is missing. */
static sd_status draw_count(const sd_draw_row *rows, int n, int vocab, draw_sizes *z)
{
    *z = (draw_sizes){0, 0, 0};
    for (int r = 0; r < n; r++) {
        if (rows[r].nq < 0 || (rows[r].nq > 0 && !rows[r].q) || rows[r].n_edits < 0 ||
            (rows[r].n_edits > 0 && !rows[r].edits))
            return SD_ERR_ARG;
        z->nq += (size_t)rows[r].nq;
        z->words += rows[r].allow ? ((size_t)vocab + 31) / 32 : 0;
        z->edits += (size_t)rows[r].n_edits;
    }
    return SD_OK;
}

static sd_status cuda_draw_rows(sd_backend *be, sd_draw_out *out, float *logits, const sd_draw_row *rows, int n,
                                int vocab)
{
    if (n < 0 || vocab < 1 || (n > 0 && (!out || !logits || !rows))) return SD_ERR_ARG;
    if (n == 0) return SD_OK;
    cuda_impl *im = cu(be);
    draw_sizes z;
    sd_status st = draw_count(rows, n, vocab, &z);
    if (st == SD_OK) st = draw_grow(im, n, vocab, z);
    if (st != SD_OK) return st;
    draw_bufs *d = &im->draw;
    size_t words = ((size_t)vocab + 31) / 32, qo = 0, wo = 0, eo = 0;
    sd_cu_draw_row *hr = d->host; /* staging: rows, q, masks, edits, then out */
    sd_tokprob *hq = (sd_tokprob *)(hr + n);
    uint32_t *hw = (uint32_t *)(hq + z.nq + 1);
    sd_logit_edit *he = (sd_logit_edit *)(hw + z.words + 1);
    sd_draw_out *ho = (sd_draw_out *)(he + z.edits + 1);
    for (int r = 0; r < n; r++) {
        const sd_draw_row *w = &rows[r];
        hr[r] = (sd_cu_draw_row){
            w->temperature, w->min_p,   w->u,     w->token, w->nq, (int32_t)qo, w->allow ? (int32_t)wo : -1,
            (int32_t)eo,    w->n_edits, w->top_k, w->top_p};
        if (w->nq > 0) memcpy(hq + qo, w->q, (size_t)w->nq * sizeof *hq);
        if (w->allow) memcpy(hw + wo, w->allow, words * sizeof *hw);
        if (w->n_edits > 0) memcpy(he + eo, w->edits, (size_t)w->n_edits * sizeof *he);
        qo += (size_t)w->nq;
        wo += w->allow ? words : 0;
        eo += (size_t)w->n_edits;
    }
    SD_CUDA_CHECK(cudaMemcpyAsync(d->rows, hr, (size_t)n * sizeof *hr, cudaMemcpyHostToDevice, im->stream));
    if (qo) SD_CUDA_CHECK(cudaMemcpyAsync(d->q, hq, qo * sizeof *hq, cudaMemcpyHostToDevice, im->stream));
    if (wo) SD_CUDA_CHECK(cudaMemcpyAsync(d->allow, hw, wo * sizeof *hw, cudaMemcpyHostToDevice, im->stream));
    if (eo) SD_CUDA_CHECK(cudaMemcpyAsync(d->edits, he, eo * sizeof *he, cudaMemcpyHostToDevice, im->stream));
    sd_cu_draw_args a = {d->out, logits, d->rows, d->q, d->allow, d->edits, d->p, d->mark, d->qtok, d->rd};
    SD_CUDA_CHECK(sd_cu_draw_rows(im->stream, &a, n, vocab));
    SD_CUDA_CHECK(cudaMemcpyAsync(ho, d->out, (size_t)n * sizeof *ho, cudaMemcpyDeviceToHost, im->stream));
    SD_CUDA_CHECK(cudaStreamSynchronize(im->stream));
    memcpy(out, ho, (size_t)n * sizeof *out);
    return SD_OK;
}

/* Page-locked host memory: to_host then copies straight into it (one DMA)
 * instead of through the driver's pageable staging. NULL on failure. */
static void *cuda_host_alloc(sd_backend *be, size_t bytes)
{
    cu_keep(be);
    void *p = NULL;
    cudaError_t e = cudaHostAlloc(&p, bytes > 0 ? bytes : 1, cudaHostAllocPortable);
    if (e == cudaSuccess) return p;
    fprintf(stderr, "%s:%d: host_alloc of %zu bytes: %s (pageable memory instead)\n", __FILE__, __LINE__, bytes,
            cudaGetErrorString(e));
    (void)cudaGetLastError();
    return NULL;
}

/* Frees host_alloc's memory, or malloc's (the model falls back to it). */
static void cuda_host_free(sd_backend *be, void *p)
{
    if (!p) return;
    cu_keep(be);
    struct cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) == cudaSuccess && a.type == cudaMemoryTypeHost) {
        cudaFreeHost(p);
        return;
    }
    (void)cudaGetLastError();
    free(p);
}

static bool cuda_lost(sd_backend *be)
{
    (void)be;
    return g_cuda_lost != 0;
}

static const sd_backend_ops cuda_ops = {
    .name = "cuda",
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .release = cuda_release,
    .pack = cuda_pack,
    .to_backend = cuda_to_backend,
    .to_host = cuda_to_host,
    .matmul = cuda_matmul,
    .matmul_fused = cuda_matmul_fused,
    .rmsnorm = cuda_rmsnorm,
    .embed = cuda_embed,
    .rope = cuda_rope,
    .kv_write = cuda_kv_write,
    .qk_rope_kv = cuda_qk_rope_kv,
    .attention = cuda_attention,
    .silu_mul = cuda_silu_mul,
    .add = cuda_add,
    .copy_cols = cuda_copy_cols,
    .reduce_parts = cuda_reduce_parts,
    .graph_begin = cuda_graph_begin,
    .graph_end = cuda_graph_end,
    .attn_stage = cuda_attn_stage,
    .mem_info = cuda_mem_info,
    .argmax = cuda_argmax_op,
    .draw_rows = cuda_draw_rows,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .sync = cuda_sync,
    .take_error = sd_cuda_take_error,
    .lost = cuda_lost,
    .destroy = cuda_destroy,
};

int sd_cuda_device_count(void)
{
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess) {
        cudaGetLastError(); /* clear the sticky "no driver" error */
        return 0;
    }
    return n;
}

/* Stream and cuBLAS handle of a fresh impl; a message on failure. */
static sd_status cuda_init(cuda_impl *im, char *err, size_t errlen)
{
    cudaError_t e = cudaSetDevice(im->device);
    if (e == cudaSuccess) e = cudaStreamCreateWithFlags(&im->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess)
        return sd_seterr(err, errlen, SD_ERR_DEVICE, "CUDA device %d: %s", im->device, cudaGetErrorString(e));
    e = cudaMalloc(&im->blas_ws, CUBLAS_WORKSPACE);
    if (e != cudaSuccess)
        return sd_seterr(err, errlen, SD_ERR_DEVICE, "CUDA device %d: cuBLAS workspace: %s", im->device,
                         cudaGetErrorString(e));
    cublasStatus_t s = cublasCreate(&im->blas);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetStream(im->blas, im->stream);
    if (s == CUBLAS_STATUS_SUCCESS) s = cublasSetWorkspace(im->blas, im->blas_ws, CUBLAS_WORKSPACE);
    if (s != CUBLAS_STATUS_SUCCESS)
        return sd_seterr(err, errlen, SD_ERR_DEVICE, "cuBLAS on device %d: %s", im->device, cublasGetStatusString(s));
    const char *g = getenv("SD_CUDA_GRAPHS");
    im->graphs_on = !(g && strcmp(g, "0") == 0);
    const char *a = getenv("SD_CUDA_ATTN_SPLIT");
    im->attn_split = !(a && strcmp(a, "0") == 0);
    const char *fu = getenv("SD_CUDA_FUSE");
    im->fuse = !(fu && strcmp(fu, "0") == 0);
    const char *gv = getenv("SD_CUDA_GEMV");
    im->gemv = gv && strcmp(gv, "1") == 0;
    const char *sp = getenv("SD_CUDA_ATTN_SPLITS");
    im->attn_splits = sp && atoi(sp) >= 1 && atoi(sp) <= 256 ? atoi(sp) : 32;
    const char *at = getenv("SD_CUDA_ATTN_TILE");
    im->attn_tile = !(at && strcmp(at, "0") == 0);
    const char *tc = getenv("SD_CUDA_TC");
    im->tc = !sd_cu_gemm_tc_supported(im->device) ? 0 : tc && !strcmp(tc, "0") ? 0 : tc && !strcmp(tc, "2") ? 2 : 1;
    return SD_OK;
}

sd_status sd_backend_cuda_new(int device, sd_backend **out, char *err, size_t errlen)
{
    *out = NULL;
    int n = sd_cuda_device_count();
    if (device < 0 || device >= n)
        return sd_seterr(err, errlen, SD_ERR_DEVICE, "CUDA device %d not available (%d device%s)", device, n,
                         n == 1 ? "" : "s");
    sd_backend *be = calloc(1, sizeof *be);
    cuda_impl *im = calloc(1, sizeof *im);
    if (!be || !im) {
        free(be);
        free(im);
        return sd_seterr(err, errlen, SD_ERR_NOMEM, "CUDA backend: out of memory");
    }
    im->device = device;
    be->ops = &cuda_ops;
    be->impl = im;
    sd_status st = cuda_init(im, err, errlen);
    if (st != SD_OK) {
        cuda_destroy(be);
        return st;
    }
    *out = be;
    return SD_OK;
}

int sd_backend_is_cuda(const sd_backend *be) { return be && be->ops == &cuda_ops; }

sd_status sd_cuda_set_batch_invariant(sd_backend *be, int on)
{
    if (!sd_backend_is_cuda(be)) return SD_ERR_ARG;
    cuda_impl *im = cu(be);
    if (im->batch_invariant != (on != 0)) drop_graphs(im);
    im->batch_invariant = on != 0;
    return SD_OK;
}

/* A knob's impl with its recordings dropped (they hold the kernels chosen
 * before); NULL when be is not a CUDA backend. */
static cuda_impl *knob(sd_backend *be)
{
    if (!sd_backend_is_cuda(be)) return NULL;
    cuda_impl *im = cu(be);
    drop_graphs(im);
    return im;
}

sd_status sd_cuda_set_graphs(sd_backend *be, int on)
{
    cuda_impl *im = knob(be);
    if (!im) return SD_ERR_ARG;
    im->graphs_on = on != 0;
    return SD_OK;
}

sd_status sd_cuda_set_attn_split(sd_backend *be, int on)
{
    cuda_impl *im = knob(be);
    if (!im) return SD_ERR_ARG;
    im->attn_split = on != 0;
    return SD_OK;
}

sd_status sd_cuda_set_fuse(sd_backend *be, int on)
{
    cuda_impl *im = knob(be);
    if (!im) return SD_ERR_ARG;
    im->fuse = on != 0;
    return SD_OK;
}

sd_status sd_cuda_set_gemv(sd_backend *be, int on)
{
    cuda_impl *im = knob(be);
    if (!im) return SD_ERR_ARG;
    im->gemv = on != 0;
    return SD_OK;
}

sd_status sd_cuda_set_attn_splits(sd_backend *be, int splits)
{
    cuda_impl *im = splits < 1 || splits > 256 ? NULL : knob(be);
    if (!im) return SD_ERR_ARG;
    im->attn_splits = splits;
    return SD_OK;
}

sd_status sd_cuda_set_attn_tile(sd_backend *be, int on)
{
    cuda_impl *im = knob(be);
    if (!im) return SD_ERR_ARG;
    im->attn_tile = on != 0;
    return SD_OK;
}

int sd_cuda_graph_count(sd_backend *be)
{
    if (!sd_backend_is_cuda(be)) return 0;
    cuda_impl *im = be->impl;
    int n = 0;
    for (int i = 0; i < im->n_graphs; i++) n += im->graphs[i].exec != NULL;
    return n;
}

sd_status sd_cuda_take_error(sd_backend *be)
{
    if (!sd_backend_is_cuda(be)) return SD_ERR_ARG;
    cuda_impl *im = be->impl;
    sd_status st = im->error;
    im->error = SD_OK;
    return st;
}

sd_status sd_cuda_argmax(sd_backend *be, const float *logits_dev, int rows, int vocab, int32_t *out_host)
{
    if (!sd_backend_is_cuda(be) || rows < 0 || vocab <= 0 || (rows > 0 && (!logits_dev || !out_host)))
        return SD_ERR_ARG;
    if (rows == 0) return SD_OK;
    cuda_impl *im = cu(be);
    /* at least a graphed pass's rows: growing drops the recorded graphs */
    size_t need = (size_t)(rows > GRAPH_MAX_T ? rows : GRAPH_MAX_T) * sizeof(int32_t);
    sd_status st = grow_dev(im, (void **)&im->amax, &im->amax_cap, need);
    if (st != SD_OK) return st;
    SD_CUDA_CHECK(sd_cu_argmax(im->stream, im->amax, logits_dev, rows, vocab));
    SD_CUDA_CHECK(
        cudaMemcpyAsync(out_host, im->amax, (size_t)rows * sizeof(int32_t), cudaMemcpyDeviceToHost, im->stream));
    SD_CUDA_CHECK(cudaStreamSynchronize(im->stream));
    return SD_OK;
}

/* The best of reps timed reads of a buffer of `bytes` (sd_cu_read). */
static sd_status time_reads(cuda_impl *im, void *buf, void *out, size_t bytes, int reps, int sms, double *best)
{
    cudaEvent_t e0, e1;
    SD_CUDA_CHECK(cudaEventCreate(&e0));
    if (cudaEventCreate(&e1) != cudaSuccess) {
        cudaEventDestroy(e0);
        return SD_ERR_DEVICE;
    }
    cudaError_t e = sd_cu_read(im->stream, out, buf, bytes, sms); /* warm-up */
    for (int r = 0; r < reps && e == cudaSuccess; r++) {
        float ms = 0.0f;
        e = cudaEventRecord(e0, im->stream);
        if (e == cudaSuccess) e = sd_cu_read(im->stream, out, buf, bytes, sms);
        if (e == cudaSuccess) e = cudaEventRecord(e1, im->stream);
        if (e == cudaSuccess) e = cudaEventSynchronize(e1);
        if (e == cudaSuccess) e = cudaEventElapsedTime(&ms, e0, e1);
        if (e == cudaSuccess && ms > 0.0f && (*best == 0.0 || ms < *best)) *best = ms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    SD_CUDA_CHECK(e);
    return SD_OK;
}

sd_status sd_cuda_read_bandwidth(sd_backend *be, size_t bytes, int reps, double *gbps)
{
    if (!sd_backend_is_cuda(be) || bytes < 16 || reps <= 0 || !gbps) return SD_ERR_ARG;
    cuda_impl *im = cu(be);
    int sms = 0;
    if (cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, im->device) != cudaSuccess) sms = 0;
    void *buf = NULL, *out = NULL;
    SD_CUDA_CHECK(cudaMalloc(&buf, bytes));
    sd_status st = SD_ERR_DEVICE;
    double best = 0.0;
    /* the buffer's contents do not matter; set, so that the pages are backed */
    if (cudaMalloc(&out, (size_t)(sms > 0 ? sms * 8 : 1024) * 16) == cudaSuccess &&
        cudaMemsetAsync(buf, 1, bytes, im->stream) == cudaSuccess)
        st = time_reads(im, buf, out, bytes, reps, sms, &best);
    cudaFree(out);
    cudaFree(buf);
    if (st == SD_OK && best <= 0.0) st = SD_ERR_DEVICE;
    if (st == SD_OK) *gbps = (double)(bytes / 16 * 16) / (best * 1e-3) / 1e9;
    return st;
}

int sd_cuda_device_of(sd_backend *be) { return sd_backend_is_cuda(be) ? ((cuda_impl *)be->impl)->device : -1; }

void *sd_cuda_stream_of(sd_backend *be)
{
    return sd_backend_is_cuda(be) ? (void *)((cuda_impl *)be->impl)->stream : NULL;
}
