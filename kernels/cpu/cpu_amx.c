/* cpu_amx.c — see cpu_amx.h.
 *
 * Tile registers: tmm0..3 accumulate 4 blocks of 16 weight rows x nt tokens
 * (f32 or int32), tmm4/5 take the weight blocks (16 rows x 64 bytes: 32 bf16
 * or 64 int8, straight from the row-major weights), tmm6 the packed tokens
 * (16 units of 4 bytes x nt). A thread keeps its tile configuration between
 * calls and reloads it only when nt changes; bf16 and int8 share it. */
#include "cpu_amx.h"

#include <cpuid.h>
#include <immintrin.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#define ARCH_REQ_XCOMP_PERM 0x1023
#define XFEATURE_XTILEDATA 18

#define SD_AMX __attribute__((target("amx-tile,amx-bf16")))
#define SD_AMX8 __attribute__((target("amx-tile,amx-int8")))

/* CPUID.(EAX=7,ECX=0):EDX: bit 22 AMX-BF16, 24 AMX-TILE, 25 AMX-INT8 (0 when
 * the leaf is missing); then the kernel's permission, asked once. */
static unsigned amx_edx(void)
{
    static int perm = -1;
    static unsigned edx;
    if (perm < 0) {
        unsigned a, b, c;
        if (!__get_cpuid_count(7, 0, &a, &b, &c, &edx)) edx = 0;
        perm = (edx >> 24 & 1) && syscall(SYS_arch_prctl, ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA) == 0;
        if (!perm) edx = 0;
    }
    return edx;
}

bool sd_amx_available(void) { return amx_edx() >> 22 & 1; }

bool sd_amx_int8_available(void) { return amx_edx() >> 25 & 1; }

/* Both element types pack the same way in bytes: a token row of kb bytes
 * goes in 4-byte units (a bf16 pair, four int8), 16 units (64 bytes) a
 * chunk: unit u of token n of a group of nt lands at
 * [u / 16][u % 16][n] (4 bytes each); groups of 16 tokens one after another. */
static void pack_units(char *dst, const char *x, size_t ldx, size_t kb, int U)
{
    size_t units = kb / 4;
    for (int t0 = 0; t0 < U; t0 += 16) {
        size_t nt = (size_t)(U - t0 < 16 ? U - t0 : 16);
        char *g = dst + (size_t)t0 * kb;
        for (size_t n = 0; n < nt; n++) {
            const char *xr = x + (size_t)(t0 + (int)n) * ldx;
            for (size_t c = 0; c < units; c += 16) {
                char *d = g + (c * nt + n) * 4;
                for (size_t u = 0; u < 16 && c + u < units; u++) memcpy(d + u * nt * 4, xr + (c + u) * 4, 4);
            }
        }
    }
}

void sd_amx_pack(uint16_t *dst, const uint16_t *x, int ldx, int K, int U)
{
    pack_units((char *)dst, (const char *)x, (size_t)ldx * sizeof *x, (size_t)K * sizeof *x, U);
}

typedef struct amx_cfg {
    uint8_t palette, start_row, reserved[14];
    uint16_t colsb[16];
    uint8_t rows[16];
} amx_cfg;

static __thread int t_nt; /* tokens of this thread's loaded configuration; 0 = none */

SD_AMX static void configure(int nt)
{
    if (t_nt == nt) return;
    amx_cfg c;
    memset(&c, 0, sizeof c);
    c.palette = 1;
    for (int i = 0; i < 7; i++) {
        c.rows[i] = 16;
        c.colsb[i] = (uint16_t)(i == 4 || i == 5 ? 64 : nt * 4);
    }
    /* GCC 12 does not see ldtilecfg read the whole struct: without the barrier it drops the stores */
    __asm__ volatile("" : : "r"(&c) : "memory");
    _tile_loadconfig(&c);
    t_nt = nt;
}

/* The kernels of one element type T (bf16 or int8), generated once per
 * type: KSTEP elements make a 64-byte tile row, DP is the tile product
 * (TDPBF16PS, TDPBSSD), ACC the accumulator type (f32, int32). Results go
 * to acc[m * 16 + n] for weight row m < rows (<= 64) and token n < nt.
 *
 * band64: 64 full weight rows against one group of nt packed tokens. No
 * software prefetch: prefetching the next band did not help the demo model
 * (docs/BENCHMARKS.md).
 * block16: rows <= 16 weight rows; a short block goes through a
 * zero-padded copy, one 64-byte slice at a time. */
#define AMX_KERNELS(SUF, ATTR, T, KSTEP, DP, ACC)                                                     \
    ATTR static void band64_##SUF(ACC *acc, const T *w, const T *xg, int K, int nt)                   \
    {                                                                                                 \
        size_t ld = (size_t)K * sizeof *w;                                                            \
        const T *w1 = w + 16 * (size_t)K, *w2 = w + 32 * (size_t)K, *w3 = w + 48 * (size_t)K;         \
        _tile_zero(0);                                                                                \
        _tile_zero(1);                                                                                \
        _tile_zero(2);                                                                                \
        _tile_zero(3);                                                                                \
        for (int k = 0; k < K; k += KSTEP) {                                                          \
            _tile_loadd(6, xg + (size_t)k * nt, nt * 4);                                              \
            _tile_loadd(4, w + k, ld);                                                                \
            DP(0, 4, 6);                                                                              \
            _tile_loadd(5, w1 + k, ld);                                                               \
            DP(1, 5, 6);                                                                              \
            _tile_loadd(4, w2 + k, ld);                                                               \
            DP(2, 4, 6);                                                                              \
            _tile_loadd(5, w3 + k, ld);                                                               \
            DP(3, 5, 6);                                                                              \
        }                                                                                             \
        _tile_stored(0, acc, 64);                                                                     \
        _tile_stored(1, acc + 16 * 16, 64);                                                           \
        _tile_stored(2, acc + 32 * 16, 64);                                                           \
        _tile_stored(3, acc + 48 * 16, 64);                                                           \
    }                                                                                                 \
    ATTR static void block16_##SUF(ACC *acc, const T *w, const T *xg, int K, int nt, int rows)        \
    {                                                                                                 \
        T pad[16 * KSTEP] __attribute__((aligned(64)));                                               \
        if (rows < 16) memset(pad, 0, sizeof pad);                                                    \
        _tile_zero(0);                                                                                \
        for (int k = 0; k < K; k += KSTEP) {                                                          \
            _tile_loadd(6, xg + (size_t)k * nt, nt * 4);                                              \
            if (rows == 16) {                                                                         \
                _tile_loadd(4, w + k, (size_t)K * sizeof *w);                                         \
            } else {                                                                                  \
                for (int m = 0; m < rows; m++) memcpy(pad + KSTEP * m, w + (size_t)m * K + k, 64);    \
                _tile_loadd(4, pad, 64);                                                              \
            }                                                                                         \
            DP(0, 4, 6);                                                                              \
        }                                                                                             \
        _tile_stored(0, acc, 64);                                                                     \
    }                                                                                                 \
    static void blocks_##SUF(ACC *acc, const T *w, const T *xg, int K, int rows, int nt)              \
    {                                                                                                 \
        configure(nt);                                                                                \
        if (rows == 64) {                                                                             \
            band64_##SUF(acc, w, xg, K, nt);                                                          \
            return;                                                                                   \
        }                                                                                             \
        for (int b = 0; b < rows; b += 16)                                                            \
            block16_##SUF(acc + 16 * b, w + (size_t)b * K, xg, K, nt, rows - b < 16 ? rows - b : 16); \
    }                                                                                                 \
    /* R rows x U tokens, a block (<= 64 rows x <= 16 tokens) at a time, each handed to emit */       \
    static void drive_##SUF(const T *w, const T *xp, int K, int R, int U,                             \
                            void (*emit)(void *, const ACC *, int, int, int, int), void *ctx)         \
    {                                                                                                 \
        ACC acc[64 * 16] __attribute__((aligned(64)));                                                \
        for (int r0 = 0; r0 < R; r0 += 64) {                                                          \
            int rows = R - r0 < 64 ? R - r0 : 64;                                                     \
            for (int t0 = 0; t0 < U; t0 += 16) {                                                      \
                int nt = U - t0 < 16 ? U - t0 : 16;                                                   \
                blocks_##SUF(acc, w + (size_t)r0 * K, xp + (size_t)t0 * K, K, rows, nt);              \
                emit(ctx, acc, r0, rows, t0, nt);                                                     \
            }                                                                                         \
        }                                                                                             \
    }

AMX_KERNELS(bf16, SD_AMX, uint16_t, 32, _tile_dpbf16ps, float)
AMX_KERNELS(s8, SD_AMX8, int8_t, 64, _tile_dpbssd, int32_t)

typedef struct f32_out {
    float *y;
    int ldy;
} f32_out;

/* The tile's column n (token t0 + n) is y's row: gathered 16 rows at a time (every CPU
 * with AMX has AVX-512). */
__attribute__((target("avx512f"))) static void emit_f32(void *ctx, const float *acc, int r0, int rows, int t0, int nt)
{
    const f32_out *o = ctx;
    const __m512i col = _mm512_setr_epi32(0, 16, 32, 48, 64, 80, 96, 112, 128, 144, 160, 176, 192, 208, 224, 240);
    for (int n = 0; n < nt; n++) {
        float *yr = o->y + (size_t)(t0 + n) * o->ldy + r0;
        int m = 0;
        for (; m + 16 <= rows; m += 16) _mm512_storeu_ps(yr + m, _mm512_i32gather_ps(col, acc + m * 16 + n, 4));
        for (; m < rows; m++) yr[m] = acc[m * 16 + n];
    }
}

void sd_amx_tile(float *y, int ldy, const uint16_t *w, const uint16_t *xp, int K, int R, int U)
{
    f32_out o = {y, ldy};
    drive_bf16(w, xp, K, R, U, emit_f32, &o);
}

/* ---------------------------------------------------------------- int8 */

void sd_amx_pack_s8(int8_t *dst, const int8_t *x, int ldx, int K, int U)
{
    pack_units((char *)dst, (const char *)x, (size_t)ldx, (size_t)K, U);
}

void sd_amx_tile_s8(const int8_t *w, const int8_t *xp, int K, int R, int U, sd_amx_emit_s8 emit, void *ctx)
{
    drive_s8(w, xp, K, R, U, emit, ctx);
}
