/* exact.h — exact sums as wide unsigned integers in units of 2^-149, for the
 * host and the device alike.
 *
 * Every float is an integer multiple of 2^-149, so a sum of non-negative
 * floats (and of doubles on that grid) is an integer in those units: added
 * as integers it is exact and the same in any order — a thread's share, a
 * block's tree or a loop over the vocabulary give the same bits. Rounded
 * once to the nearest double (ties to even) when read.
 *
 * The limb count is the caller's: 3 limbs (192 bits) hold sums below 2^43
 * (2^18 terms below 2^25, a vocabulary's probabilities or softmax weights),
 * common/base/exsum.h keeps 5. Little-endian limbs; bits past the top limb
 * are dropped.
 *
 * Compiled as C for the host and as CUDA for the device (the same source:
 * integer operations and exact conversions only). Thread-safe: pure
 * functions of their arguments. */
#ifndef SD_EXACT_H
#define SD_EXACT_H

#include <stdint.h>
#include <string.h>

#ifdef __CUDACC__
#define SD_HD static inline __host__ __device__
#else
#define SD_HD static inline
#endif

SD_HD int sd_clz64(uint64_t v)
{
#ifdef __CUDA_ARCH__
    return __clzll((long long)v);
#else
    return __builtin_clzll(v);
#endif
}

/* limb[0..n) += v << shift (shift >= 0). */
SD_HD void sd_wide_add_shifted(uint64_t *limb, int n, uint64_t v, int shift)
{
    int w = shift / 64, b = shift % 64;
    uint64_t parts[2] = {v << b, b ? v >> (64 - b) : 0};
    uint64_t carry = 0;
    for (int i = w; i < n; i++) {
        uint64_t add = (i - w < 2 ? parts[i - w] : 0) + carry;
        carry = add < carry; /* parts[..] + carry wrapped */
        uint64_t r = limb[i] + add;
        carry += r < add;
        limb[i] = r;
        if (i - w >= 1 && !carry) break;
    }
}

/* a[0..n) += b[0..n). */
SD_HD void sd_wide_add(uint64_t *a, const uint64_t *b, int n)
{
    uint64_t carry = 0;
    for (int i = 0; i < n; i++) {
        uint64_t s = a[i] + carry;
        carry = s < carry;
        uint64_t r = s + b[i];
        carry += r < s;
        a[i] = r;
    }
}

/* a[0..n) -= b[0..n) (b <= a). */
SD_HD void sd_wide_sub(uint64_t *a, const uint64_t *b, int n)
{
    uint64_t borrow = 0;
    for (int i = 0; i < n; i++) {
        uint64_t d = a[i] - b[i];
        uint64_t nb = a[i] < b[i];
        uint64_t r = d - borrow;
        nb += d < borrow;
        a[i] = r;
        borrow = nb;
    }
}

/* The terms: f finite and >= 0 (negative, NaN and infinite terms are
 * ignored): m * 2^(e - 150) = (m << (e - 1)) units, a subnormal m units. */
SD_HD void sd_wide_add_float(uint64_t *limb, int n, float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof u);
    if (u >= 0x7f800000u) return; /* negative (sign bit), infinite or NaN */
    uint32_t e = u >> 23, m = u & 0x7fffffu;
    if (e) sd_wide_add_shifted(limb, n, m | 0x800000u, (int)e - 1);
    else sd_wide_add_shifted(limb, n, m, 0);
}

/* d finite, >= 0 and a multiple of 2^-149 (the bits below are dropped;
 * negative, NaN and infinite terms are ignored). */
SD_HD void sd_wide_add_double(uint64_t *limb, int n, double d)
{
    uint64_t u;
    memcpy(&u, &d, sizeof u);
    if (u >= 0x7ff0000000000000ull || u == 0) return; /* negative, infinite, NaN or zero */
    int e = (int)(u >> 52);
    uint64_t m = u & 0xfffffffffffffull;
    if (e) m |= 1ull << 52;
    else e = 1;
    int shift = e - 1075 + 149; /* d = m * 2^(e - 1075) */
    if (shift < 0) {
        m = shift > -64 ? m >> -shift : 0; /* off the grid */
        shift = 0;
    }
    sd_wide_add_shifted(limb, n, m, shift);
}

/* The highest set bit (-1 when zero). */
SD_HD int sd_wide_top_bit(const uint64_t *l, int n)
{
    for (int i = n - 1; i >= 0; i--)
        if (l[i]) return i * 64 + 63 - sd_clz64(l[i]);
    return -1;
}

/* Bits [lo, lo + k) as an integer (k <= 64, lo >= 0). */
SD_HD uint64_t sd_wide_bits(const uint64_t *l, int n, int lo, int k)
{
    int w = lo / 64, b = lo % 64;
    uint64_t v = l[w] >> b;
    if (b && w + 1 < n) v |= l[w + 1] << (64 - b);
    return k < 64 ? v & ((1ull << k) - 1) : v;
}

/* Whether any bit below i is set. */
SD_HD int sd_wide_any_below(const uint64_t *l, int i)
{
    for (int k = 0; k < i / 64; k++)
        if (l[k]) return 1;
    return i % 64 ? (l[i / 64] & ((1ull << (i % 64)) - 1)) != 0 : 0;
}

/* m * 2^e as a double, m < 2^54 and the result normal or exact (no libm,
 * the same on the device). */
SD_HD double sd_scale2(uint64_t m, int e)
{
    double x = (double)m; /* exact */
    while (e > 0) {
        int s = e > 1000 ? 1000 : e;
        uint64_t b = (uint64_t)(1023 + s) << 52;
        double f;
        memcpy(&f, &b, sizeof f);
        x *= f;
        e -= s;
    }
    while (e < 0) {
        int s = e < -1000 ? 1000 : -e;
        uint64_t b = (uint64_t)(1023 - s) << 52;
        double f;
        memcpy(&f, &b, sizeof f);
        x *= f;
        e += s;
    }
    return x;
}

/* The sum l[0..n) units rounded to the nearest double (ties to even). */
SD_HD double sd_wide_to_double(const uint64_t *l, int n)
{
    int h = sd_wide_top_bit(l, n);
    if (h < 0) return 0.0;
    if (h < 53) return sd_scale2(l[0], -149); /* exact: fewer than 54 bits */
    int lsb = h - 52;
    uint64_t m = sd_wide_bits(l, n, lsb, 53);
    if (((l[(lsb - 1) / 64] >> ((lsb - 1) % 64)) & 1u) && (sd_wide_any_below(l, lsb - 1) || (m & 1u)))
        m++; /* to nearest, ties to even; 2^53 after a carry is still exact */
    return sd_scale2(m, lsb - 149);
}

#endif
