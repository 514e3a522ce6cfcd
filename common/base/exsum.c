/* exsum.c — see exsum.h. */
#include "exsum.h"

#include "exact.h"

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

void sd_exsum_add_double(sd_exsum *s, double d) { sd_wide_add_double(s->limb, SD_EXSUM_LIMBS, d); }

double sd_exsum_value(const sd_exsum *s)
{
    uint64_t l[SD_EXSUM_LIMBS];
    memcpy(l, s->limb, sizeof l);
    for (int e = 1; e < 256; e++) /* m * 2^(e - 150) = (m << (e - 1)) * 2^-149 */
        if (s->bucket[e]) sd_wide_add_shifted(l, SD_EXSUM_LIMBS, s->bucket[e], e - 1);
    return sd_wide_to_double(l, SD_EXSUM_LIMBS);
}
