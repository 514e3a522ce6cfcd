/* exsum.c — see exsum.h. */
#include "exsum.h"

#include <math.h>
#include <string.h>

void sd_exsum_init(sd_exsum *s)
{
    memset(s->bucket, 0, sizeof s->bucket);
    memset(s->limb, 0, sizeof s->limb);
}

/* One term into b (512 buckets): by the float's top 9 bits, so that a
 * negative (>= 256), infinite or NaN (255) term lands where the fold below
 * never reads; the hidden bit unless subnormal. No branch. */
#define EXSUM_TERM(b, x)                                           \
    do {                                                           \
        uint32_t u_;                                               \
        memcpy(&u_, &(x), sizeof u_);                              \
        uint32_t e_ = u_ >> 23;                                    \
        (b)[e_] += (u_ & 0x7fffffu) | ((uint32_t)(e_ != 0) << 23); \
    } while (0)

void sd_exsum_add_floats(sd_exsum *s, const float *f, int n)
{
    uint64_t b[4][512];
    memset(b, 0, sizeof b);
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        EXSUM_TERM(b[0], f[i]);
        EXSUM_TERM(b[1], f[i + 1]);
        EXSUM_TERM(b[2], f[i + 2]);
        EXSUM_TERM(b[3], f[i + 3]);
    }
    for (; i < n; i++) EXSUM_TERM(b[0], f[i]);
    /* a subnormal's bucket (0) is worth the same as bucket 1 without the hidden bit */
    s->bucket[1] += b[0][0] + b[1][0] + b[2][0] + b[3][0];
    for (int e = 1; e < 255; e++) s->bucket[e] += b[0][e] + b[1][e] + b[2][e] + b[3][e];
}

/* limb += v << shift (shift >= 0; bits past the top limb are dropped). */
static void add_shifted(uint64_t *limb, uint64_t v, int shift)
{
    int w = shift / 64, b = shift % 64;
    uint64_t parts[2] = {v << b, b ? v >> (64 - b) : 0};
    uint64_t carry = 0;
    for (int i = w; i < SD_EXSUM_LIMBS; i++) {
        uint64_t add = (i - w < 2 ? parts[i - w] : 0) + carry;
        carry = add < carry; /* parts[..] + carry wrapped */
        uint64_t r = limb[i] + add;
        carry += r < add;
        limb[i] = r;
        if (i - w >= 1 && !carry) break;
    }
}

void sd_exsum_add_double(sd_exsum *s, double d)
{
    if (!(d > 0.0) || isinf(d)) return;
    int e;
    double fr = frexp(d, &e);             /* d = fr * 2^e, fr in [0.5, 1) */
    uint64_t m = (uint64_t)ldexp(fr, 53); /* d = m * 2^(e - 53) */
    int shift = e - 53 + 149;             /* in units of 2^-149 */
    if (shift < 0) {
        m = shift > -64 ? m >> -shift : 0; /* off the grid: not for these terms */
        shift = 0;
    }
    add_shifted(s->limb, m, shift);
}

/* The highest set bit of the integer (-1 when zero). */
static int top_bit(const uint64_t *l)
{
    for (int i = SD_EXSUM_LIMBS - 1; i >= 0; i--)
        if (l[i]) return i * 64 + 63 - __builtin_clzll(l[i]);
    return -1;
}

static int bit_at(const uint64_t *l, int i) { return (int)((l[i / 64] >> (i % 64)) & 1u); }

/* Whether any bit below i is set. */
static int any_below(const uint64_t *l, int i)
{
    for (int k = 0; k < i / 64; k++)
        if (l[k]) return 1;
    return i % 64 ? (l[i / 64] & ((1ull << (i % 64)) - 1)) != 0 : 0;
}

/* The 53 bits [h - 52, h] as an integer. */
static uint64_t bits53(const uint64_t *l, int h)
{
    uint64_t m = 0;
    for (int i = h; i > h - 53; i--) m = m << 1 | (uint64_t)bit_at(l, i);
    return m;
}

double sd_exsum_value(const sd_exsum *s)
{
    uint64_t l[SD_EXSUM_LIMBS];
    memcpy(l, s->limb, sizeof l);
    for (int e = 1; e < 256; e++)
        if (s->bucket[e]) add_shifted(l, s->bucket[e], e - 1); /* m * 2^(e - 150) = (m << (e - 1)) * 2^-149 */
    int h = top_bit(l);
    if (h < 0) return 0.0;
    if (h < 53) return ldexp((double)l[0], -149); /* exact: fewer than 54 bits */
    uint64_t m = bits53(l, h);
    int lsb = h - 52;
    if (bit_at(l, lsb - 1) && (any_below(l, lsb - 1) || (m & 1u)))
        m++; /* to nearest, ties to even; 2^53 after a carry is still exact */
    return ldexp((double)m, lsb - 149);
}
