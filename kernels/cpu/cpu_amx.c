/* cpu_amx.c — see cpu_amx.h.
 *
 * Tile registers: tmm0..3 accumulate 4 blocks of 16 weight rows x nt tokens
 * (f32), tmm4/5 take the weight blocks (16 rows x 32 bf16, straight from the
 * row-major weights), tmm6 the packed tokens (16 pairs x nt). A thread keeps
 * its tile configuration between calls and reloads it only when nt changes. */
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

bool sd_amx_available(void)
{
    return amx_edx() >> 22 & 1;
}

bool sd_amx_int8_available(void)
{
    return amx_edx() >> 25 & 1;
}

void sd_amx_pack(uint16_t *dst, const uint16_t *x, int ldx, int K, int U)
{
    for (int t0 = 0; t0 < U; t0 += 16) {
        int nt = U - t0 < 16 ? U - t0 : 16;
        uint16_t *g = dst + (size_t)t0 * K;
        for (int n = 0; n < nt; n++) {
            const uint16_t *xr = x + (size_t)(t0 + n) * ldx;
            for (int k = 0; k < K; k += 2) {
                uint16_t *p = g + (size_t)(k / 32) * 32 * nt + (size_t)(k % 32 / 2) * 2 * nt + 2 * (size_t)n;
                p[0] = xr[k];
                p[1] = xr[k + 1];
            }
        }
    }
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

/* c[m * nt + n] (rows x nt) -> y[n * ldy + m]. */
static void store_block(float *y, int ldy, const float *c, int rows, int nt)
{
    for (int n = 0; n < nt; n++)
        for (int m = 0; m < rows; m++) y[(size_t)n * ldy + m] = c[m * nt + n];
}

/* 64 full weight rows against one group of nt packed tokens. No software
 * prefetch: prefetching the next band into L2 gained ~5% on a matrix far
 * larger than the caches but lost ~7% on the demo model's (which sit in
 * the last-level cache); into L1 it lost more. */
SD_AMX static void band64(float *y, int ldy, const uint16_t *w, const uint16_t *xg, int K, int nt)
{
    size_t ld = (size_t)K * sizeof *w;
    const uint16_t *w1 = w + 16 * (size_t)K, *w2 = w + 32 * (size_t)K, *w3 = w + 48 * (size_t)K;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int k = 0; k < K; k += 32) {
        _tile_loadd(6, xg + (size_t)k * nt, nt * 4);
        _tile_loadd(4, w + k, ld);
        _tile_dpbf16ps(0, 4, 6);
        _tile_loadd(5, w1 + k, ld);
        _tile_dpbf16ps(1, 5, 6);
        _tile_loadd(4, w2 + k, ld);
        _tile_dpbf16ps(2, 4, 6);
        _tile_loadd(5, w3 + k, ld);
        _tile_dpbf16ps(3, 5, 6);
    }
    float c[4][16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, c[0], nt * 4);
    _tile_stored(1, c[1], nt * 4);
    _tile_stored(2, c[2], nt * 4);
    _tile_stored(3, c[3], nt * 4);
    for (int i = 0; i < 4; i++) store_block(y + 16 * i, ldy, c[i], 16, nt);
}

/* rows <= 16 weight rows against one group; a short block goes through a
 * zero-padded copy, one 32-column slice at a time. */
SD_AMX static void block16(float *y, int ldy, const uint16_t *w, const uint16_t *xg, int K, int nt, int rows)
{
    uint16_t pad[16 * 32] __attribute__((aligned(64)));
    if (rows < 16) memset(pad, 0, sizeof pad);
    _tile_zero(0);
    for (int k = 0; k < K; k += 32) {
        _tile_loadd(6, xg + (size_t)k * nt, nt * 4);
        if (rows == 16) {
            _tile_loadd(4, w + k, (size_t)K * sizeof *w);
        } else {
            for (int m = 0; m < rows; m++) memcpy(pad + 32 * m, w + (size_t)m * K + k, 32 * sizeof *w);
            _tile_loadd(4, pad, 64);
        }
        _tile_dpbf16ps(0, 4, 6);
    }
    float c[16 * 16] __attribute__((aligned(64)));
    _tile_stored(0, c, nt * 4);
    store_block(y, ldy, c, rows, nt);
}

void sd_amx_tile(float *y, int ldy, const uint16_t *w, const uint16_t *xp, int K, int R, int U)
{
    for (int r0 = 0; r0 < R; r0 += 64) {
        int rows = R - r0 < 64 ? R - r0 : 64;
        const uint16_t *wb = w + (size_t)r0 * K;
        for (int t0 = 0; t0 < U; t0 += 16) {
            int nt = U - t0 < 16 ? U - t0 : 16;
            configure(nt);
            const uint16_t *xg = xp + (size_t)t0 * K;
            float *yb = y + (size_t)t0 * ldy + r0;
            if (rows == 64) {
                band64(yb, ldy, wb, xg, K, nt);
                continue;
            }
            for (int b = 0; b < rows; b += 16)
                block16(yb + b, ldy, wb + (size_t)b * K, xg, K, nt, rows - b < 16 ? rows - b : 16);
        }
    }
}

/* ---------------------------------------------------------------- int8 */

void sd_amx_pack_s8(int8_t *dst, const int8_t *x, int ldx, int K, int U)
{
    for (int t0 = 0; t0 < U; t0 += 16) {
        int nt = U - t0 < 16 ? U - t0 : 16;
        int8_t *g = dst + (size_t)t0 * K;
        for (int n = 0; n < nt; n++) {
            const int8_t *xr = x + (size_t)(t0 + n) * ldx;
            for (int k = 0; k < K; k += 4)
                memcpy(g + (size_t)(k / 64) * 64 * nt + (size_t)(k % 64 / 4) * 4 * nt + 4 * (size_t)n, xr + k, 4);
        }
    }
}

/* 64 full int8 weight rows; sums to acc[m * 16 + n]. */
SD_AMX8 static void band64_s8(int32_t *acc, const int8_t *w, const int8_t *xg, int K, int nt)
{
    const int8_t *w1 = w + 16 * (size_t)K, *w2 = w + 32 * (size_t)K, *w3 = w + 48 * (size_t)K;
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
    for (int k = 0; k < K; k += 64) {
        _tile_loadd(6, xg + (size_t)k * nt, nt * 4);
        _tile_loadd(4, w + k, K);
        _tile_dpbssd(0, 4, 6);
        _tile_loadd(5, w1 + k, K);
        _tile_dpbssd(1, 5, 6);
        _tile_loadd(4, w2 + k, K);
        _tile_dpbssd(2, 4, 6);
        _tile_loadd(5, w3 + k, K);
        _tile_dpbssd(3, 5, 6);
    }
    _tile_stored(0, acc, 64);
    _tile_stored(1, acc + 16 * 16, 64);
    _tile_stored(2, acc + 32 * 16, 64);
    _tile_stored(3, acc + 48 * 16, 64);
}

/* rows <= 16 int8 weight rows (a short block through a zero-padded copy). */
SD_AMX8 static void block16_s8(int32_t *acc, const int8_t *w, const int8_t *xg, int K, int nt, int rows)
{
    int8_t pad[16 * 64] __attribute__((aligned(64)));
    if (rows < 16) memset(pad, 0, sizeof pad);
    _tile_zero(0);
    for (int k = 0; k < K; k += 64) {
        _tile_loadd(6, xg + (size_t)k * nt, nt * 4);
        if (rows == 16) {
            _tile_loadd(4, w + k, K);
        } else {
            for (int m = 0; m < rows; m++) memcpy(pad + 64 * m, w + (size_t)m * K + k, 64);
            _tile_loadd(4, pad, 64);
        }
        _tile_dpbssd(0, 4, 6);
    }
    _tile_stored(0, acc, 64);
}

void sd_amx_s8_block(int32_t *acc, const int8_t *w, const int8_t *xg, int K, int rows, int nt)
{
    configure(nt);
    if (rows == 64) {
        band64_s8(acc, w, xg, K, nt);
        return;
    }
    for (int b = 0; b < rows; b += 16)
        block16_s8(acc + 16 * b, w + (size_t)b * K, xg, K, nt, rows - b < 16 ? rows - b : 16);
}
