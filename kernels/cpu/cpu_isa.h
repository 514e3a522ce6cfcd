/* cpu_isa.h — PRIVATE to kernels/cpu: the SIMD paths the CPU kernels take.
 *
 * Chosen once per process from the CPU's features (sd_cpu_isa_init) and
 * capped for tests and comparisons (sd_cpu_isa_set_level), so results are
 * reproducible on a machine. The flags are read by every kernel file and
 * written only here. */
#ifndef SD_CPU_ISA_H
#define SD_CPU_ISA_H

#include <stdbool.h>

/* The paths in effect (after sd_cpu_isa_init). */
extern bool sd_isa_avx2;    /* AVX2 + FMA: 8-lane dots, attention, element-wise */
extern bool sd_isa_bf16dot; /* AVX-512 BF16 dot products (vdpbf16ps) */
extern bool sd_isa_avx512;  /* AVX-512F: 16-lane attention */
extern bool sd_isa_amx;     /* AMX-BF16 tiles for bf16 matmuls (cpu_amx.h) */

/* Selects the SIMD paths once (everything the CPU has). */
void sd_cpu_isa_init(void);
/* Caps the SIMD paths (tests, comparisons): 0 scalar, 1 AVX2, 2 AVX-512
 * (attention, vdpbf16ps), 3 (SD_CPU_LEVEL_MAX) everything the CPU has: AMX
 * tiles for bf16 matmuls (cpu_amx.h). Returns the level in effect.
 * Not thread-safe: call before any kernel runs. */
#define SD_CPU_LEVEL_MAX 3
int sd_cpu_isa_set_level(int level);
/* "amx-bf16", "avx512-bf16", "avx512", "avx2" or "scalar". */
const char *sd_cpu_isa_name(void);
/* True when the CPU has AVX-512 BF16 dot products (vdpbf16ps). */
int sd_cpu_has_bf16dot(void);
/* True when bf16 matmuls with sd_amx_fits(K) run on AMX tiles (level 3). */
int sd_cpu_has_amx(void);

#endif
