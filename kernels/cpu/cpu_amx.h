/* cpu_amx.h — bf16 matrix tiles on Intel AMX (AMX-TILE + AMX-BF16).
 *
 * Where the CPU has AMX, a span's matmuls cost about what one token's cost:
 * a tile instruction multiplies 16 weight rows by 32 inputs for up to 16
 * tokens at once, so the weights are read once and the arithmetic is no
 * longer the bound (with vdpbf16ps a 6-token span costs 2.3–2.6 one-token
 * steps on a Xeon with AMX).
 *
 * Batch invariance: TDPBF16PS computes each element of the result tile from
 * its weight row, its token and its own accumulator only, over the 32-input
 * chunks in index order; so a result does not depend on the other rows and
 * tokens of the tile, the batch or the thread (test_cpu_kernels checks every
 * span against the one-token call). How the hardware sums the 32 products
 * of one chunk is not specified to the bit (measured: neither a sequential
 * nor a pairwise f32 order, nor one rounding per chunk) — the bits of this
 * path differ from the vdpbf16ps path's, as every level's do. The one-token
 * and span paths are the same code. Only for K a multiple of 32
 * (sd_amx_fits); other shapes stay on vdpbf16ps.
 *
 * Activations go in packed (sd_amx_pack): tokens in groups of 16, each
 * group as the B operand's pairs, [k/32][(k%32)/2][token][2]; one token's
 * packed layout is its row as it is. */
#ifndef SD_CPU_AMX_H
#define SD_CPU_AMX_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* True when the CPU has AMX-BF16 and the kernel let this process use the
 * tile registers (arch_prctl ARCH_REQ_XCOMP_PERM). Asks once. */
bool sd_amx_available(void);

/* Whether a K-wide matmul takes the AMX path (K a positive multiple of 32). */
static inline bool sd_amx_fits(int K) { return K > 0 && K % 32 == 0; }

/* Elements sd_amx_pack writes for U tokens of K. */
static inline size_t sd_amx_packed_len(int K, int U) { return (size_t)K * (size_t)U; }

/* Packs U bf16 token rows (x[t * ldx + k]) into dst (sd_amx_packed_len). */
void sd_amx_pack(uint16_t *dst, const uint16_t *x, int ldx, int K, int U);

/* y[t*ldy + r] = dot(w + r*K, x_t) for r < R, t < U: R bf16 weight rows
 * against U packed tokens xp (sd_amx_pack), in the canonical order above.
 * Only when sd_amx_available() and sd_amx_fits(K). */
void sd_amx_tile(float *y, int ldy, const uint16_t *w, const uint16_t *xp, int K, int R, int U);

/* --- int8 (AMX-INT8, TDPBSSD): exact int32 sums of int8 products, so any
 * tile or path gives the same bits as the VNNI / AVX2 / scalar Q8 kernels
 * (cpu_q8.h uses this for spans, whose weights it then reads once). */

/* True when the CPU also has AMX-INT8 (and AMX is permitted). */
bool sd_amx_int8_available(void);

/* Whether a K-wide int8 matmul can take the AMX path (K a positive multiple of 64). */
static inline bool sd_amx_fits_s8(int K) { return K > 0 && K % 64 == 0; }

/* Packs U int8 token rows (x[t * ldx + k]) into dst (K * U bytes): groups of
 * 16 tokens, each [k/64][(k%64)/4][token][4]. */
void sd_amx_pack_s8(int8_t *dst, const int8_t *x, int ldx, int K, int U);

/* Receives one block of exact sums: acc[m * 16 + n] = sum_k w[r0 + m, k] *
 * x[t0 + n, k] for m < rows (<= 64), n < nt (<= 16). */
typedef void (*sd_amx_emit_s8)(void *ctx, const int32_t *acc, int r0, int rows, int t0, int nt);

/* R int8 weight rows (row-major, K wide) against U packed tokens xp
 * (sd_amx_pack_s8), block by block into emit. Only when
 * sd_amx_int8_available() and sd_amx_fits_s8(K). */
void sd_amx_tile_s8(const int8_t *w, const int8_t *xp, int K, int R, int U, sd_amx_emit_s8 emit, void *ctx);

#endif
