/* exsum.h — exact sums of non-negative floats (and of doubles on the same
 * grid), rounded once at the end.
 *
 * Role: the sampler's normalising sums. A double sum of thousands of float
 * probabilities rounds at every step, so its last bits depend on the order
 * of the terms; summed exactly, it is the same in any order, and a draw can
 * walk only the most probable tokens in sorted order instead of sorting the
 * whole vocabulary to reproduce one summation order (sampler.c).
 *
 * Every float is an integer multiple of 2^-149; so is any double that is a
 * difference of two floats rounded to double (the residual of rejection
 * sampling). The sum is kept as that integer: floats in buckets by exponent
 * (one add each), folded into a 320-bit integer when read; doubles straight
 * into it. sd_exsum_value returns the sum rounded to the nearest double
 * (ties to even), whatever the order of the adds.
 *
 * Ownership: a plain value type (about 2 KiB); no allocation.
 * Threading: one sum per thread. */
#ifndef SD_EXSUM_H
#define SD_EXSUM_H

#include <stdint.h>

#define SD_EXSUM_LIMBS 5

typedef struct sd_exsum {
    uint64_t bucket[256];          /* float terms: the sum of their 24-bit significands, by biased exponent */
    uint64_t limb[SD_EXSUM_LIMBS]; /* double terms: the sum in units of 2^-149, little-endian */
} sd_exsum;

void sd_exsum_init(sd_exsum *s);

/* Adds f: finite and >= 0 (negative, NaN and infinite terms are ignored).
 * Inline: a sum over a vocabulary is one of these a token. */
static inline void sd_exsum_add_float(sd_exsum *s, float f)
{
    union {
        float f;
        uint32_t u;
    } b = {.f = f};
    if (b.u >= 0x7f800000u) return; /* negative (sign bit), infinite or NaN */
    uint32_t e = b.u >> 23, m = b.u & 0x7fffffu;
    /* value m * 2^(e - 150) with the hidden bit; a subnormal (e == 0) is m * 2^-149, as e == 1 */
    s->bucket[e ? e : 1] += e ? m | 0x800000u : m;
}

/* Adds f[0..n) (sd_exsum_add_float of each; four bucket sets in turn, so
 * that runs of equal exponents do not wait on each other's adds). */
void sd_exsum_add_floats(sd_exsum *s, const float *f, int n);

/* Adds d: finite, >= 0 and a multiple of 2^-149 below 2^170 (other bits are
 * dropped; negative, NaN and infinite terms are ignored). */
void sd_exsum_add_double(sd_exsum *s, double d);

/* The exact sum rounded to the nearest double (ties to even). */
double sd_exsum_value(const sd_exsum *s);

#endif
