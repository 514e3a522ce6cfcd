/* tensor.c — dtype facts and exact conversion to float32 (see tensor.h). */
#include "tensor.h"

#include <string.h>

size_t sd_dtype_size(sd_dtype dt)
{
    switch (dt) {
    case SD_DTYPE_F32: return 4;
    case SD_DTYPE_F16: return 2;
    case SD_DTYPE_BF16: return 2;
    case SD_DTYPE_Q8: return 1;
    }
    return 0;
}

const char *sd_dtype_name(sd_dtype dt)
{
    switch (dt) {
    case SD_DTYPE_F32: return "F32";
    case SD_DTYPE_F16: return "F16";
    case SD_DTYPE_BF16: return "BF16";
    case SD_DTYPE_Q8: return "Q8";
    }
    return "?";
}

static float bits_to_f32(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof f);
    return f;
}

/* IEEE binary16 → binary32, exact (subnormals normalised, inf/nan kept,
 * nan payload preserved). */
static float f16_to_f32(uint16_t h)
{
    uint32_t sign = (uint32_t)(h >> 15) << 31;
    uint32_t exp = (h >> 10) & 0x1f, mant = h & 0x3ff;
    if (exp == 0x1f) return bits_to_f32(sign | 0x7f800000u | (mant << 13));
    if (exp != 0) return bits_to_f32(sign | ((exp + 112) << 23) | (mant << 13));
    if (mant == 0) return bits_to_f32(sign);
    int e = -1; /* subnormal: value = mant * 2^-24; shift until the implicit bit appears */
    do {
        mant <<= 1;
        e++;
    } while (!(mant & 0x400));
    return bits_to_f32(sign | ((uint32_t)(112 - e) << 23) | ((mant & 0x3ff) << 13));
}

void sd_convert_to_f32(sd_dtype dt, const void *src, float *dst, size_t n)
{
    const uint8_t *s = src;
    uint16_t h;
    switch (dt) {
    case SD_DTYPE_F32: memcpy(dst, src, n * sizeof *dst); return;
    case SD_DTYPE_BF16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, s + 2 * i, 2);
            dst[i] = bits_to_f32((uint32_t)h << 16);
        }
        return;
    case SD_DTYPE_F16:
        for (size_t i = 0; i < n; i++) {
            memcpy(&h, s + 2 * i, 2);
            dst[i] = f16_to_f32(h);
        }
        return;
    case SD_DTYPE_Q8: /* not a file type: nothing to convert */ break;
    }
}
