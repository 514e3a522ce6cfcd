/* cpu_isa.c — which SIMD paths the CPU kernels take (see cpu_isa.h):
 * chosen once from the CPU's features, capped by sd_cpu_isa_set_level. */
#include "cpu_isa.h"

#include "cpu_amx.h"

bool sd_isa_avx2;
bool sd_isa_bf16dot; /* AVX-512 BF16 dot products (vdpbf16ps) */
bool sd_isa_avx512;  /* AVX-512F: 16-lane attention */
bool sd_isa_amx;     /* AMX-BF16 tiles for bf16 matmuls (cpu_amx.h) */
static bool g_inited;

void sd_cpu_isa_init(void)
{
    if (g_inited) return;
    __builtin_cpu_init();
    sd_isa_avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
    sd_isa_avx512 = sd_isa_avx2 && __builtin_cpu_supports("avx512f");
    sd_isa_bf16dot = sd_isa_avx2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                     __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512bf16");
    sd_isa_amx = sd_isa_bf16dot && sd_amx_available();
    g_inited = true;
}

int sd_cpu_isa_set_level(int level)
{
    g_inited = false;
    sd_cpu_isa_init();
    if (level < 3) sd_isa_amx = false;
    if (level < 2) sd_isa_avx512 = sd_isa_bf16dot = false;
    if (level < 1) sd_isa_avx2 = false;
    return sd_isa_amx ? 3 : sd_isa_avx512 ? 2 : sd_isa_avx2 ? 1 : 0;
}

const char *sd_cpu_isa_name(void)
{
    sd_cpu_isa_init();
    return sd_isa_amx       ? "amx-bf16"
           : sd_isa_bf16dot ? "avx512-bf16"
           : sd_isa_avx512  ? "avx512"
           : sd_isa_avx2    ? "avx2"
                            : "scalar";
}
int sd_cpu_has_bf16dot(void)
{
    sd_cpu_isa_init();
    return sd_isa_bf16dot;
}

int sd_cpu_has_amx(void)
{
    sd_cpu_isa_init();
    return sd_isa_amx;
}
