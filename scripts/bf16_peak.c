/* bf16_peak.c — the CPU's AVX-512 BF16 dot-product peak on one core:
 * independent vdpbf16ps chains on registers (no memory), GFLOP/s = 64 flops
 * an instruction (32 bf16 pairs, multiply and add). The ceiling for the
 * bf16 tile kernel of kernels/cpu/cpu_dot.c. Then the same for f32 FMAs
 * (vfmadd on 16 floats, 32 flops an instruction): the ceiling for the f32
 * attention kernels of kernels/cpu/cpu_attn.c; and for VNNI (vpdpbusd, 64
 * int8 multiply-adds an instruction, where the CPU has avx512_vnni): the
 * ceiling for the int8 kernels of kernels/cpu/cpu_q8.c.
 *
 *   gcc -O2 -march=native -o /tmp/bf16_peak scripts/bf16_peak.c && /tmp/bf16_peak
 *
 * Needs a CPU with avx512_bf16 (lscpu). */
#include <immintrin.h>
#include <stdio.h>
#include <time.h>

#define CHAINS 16

__attribute__((target("avx512f,avx512bf16"))) static double run(long n, float *sum)
{
    __m512 a[CHAINS];
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
    __m512bh x = (__m512bh)_mm512_set1_epi16(0x3f80), y = (__m512bh)_mm512_set1_epi16(0x3f00);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 16
        for (int j = 0; j < CHAINS; j++) a[j] = _mm512_dpbf16_ps(a[j], x, y);
        __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *sum = 0;
    for (int j = 0; j < CHAINS; j++) *sum += _mm512_reduce_add_ps(a[j]);
    return (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
}

__attribute__((target("avx512f"))) static double run_fma(long n, float *sum)
{
    __m512 a[CHAINS];
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_ps((float)i);
    __m512 x = _mm512_set1_ps(1.0f), y = _mm512_set1_ps(0.0f);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 16
        for (int j = 0; j < CHAINS; j++) a[j] = _mm512_fmadd_ps(a[j], x, y);
        __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *sum = 0;
    for (int j = 0; j < CHAINS; j++) *sum += _mm512_reduce_add_ps(a[j]);
    return (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
}

__attribute__((target("avx512f,avx512vnni"))) static double run_vnni(long n, int *sum)
{
    __m512i a[CHAINS];
    for (int i = 0; i < CHAINS; i++) a[i] = _mm512_set1_epi32(i);
    __m512i x = _mm512_set1_epi8(1), y = _mm512_set1_epi8(0);
    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (long i = 0; i < n; i++) {
#pragma GCC unroll 16
        for (int j = 0; j < CHAINS; j++) a[j] = _mm512_dpbusd_epi32(a[j], x, y);
        __asm__ volatile("" : "+v"(a[0]), "+v"(a[1]), "+v"(a[2]), "+v"(a[3]));
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    *sum = 0;
    for (int j = 0; j < CHAINS; j++) *sum += _mm512_reduce_add_epi32(a[j]);
    return (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
}

int main(void)
{
    if (!__builtin_cpu_supports("avx512bf16")) {
        fprintf(stderr, "bf16_peak: this CPU has no AVX-512 BF16 (vdpbf16ps)\n");
        return 1;
    }
    long n = 40000000;
    for (int r = 0; r < 3; r++) {
        float sum;
        double s = run(n, &sum);
        printf("%.1f GFLOP/s  (%.2f vdpbf16ps a ns; checksum %g)\n", n * CHAINS * 64.0 / s / 1e9, n * CHAINS / s / 1e9,
               sum);
    }
    for (int r = 0; r < 3; r++) {
        float sum;
        double s = run_fma(n, &sum);
        printf("f32 FMA: %.1f GFLOP/s  (%.2f vfmadd a ns; checksum %g)\n", n * CHAINS * 32.0 / s / 1e9,
               n * CHAINS / s / 1e9, sum);
    }
    for (int r = 0; r < 3 && __builtin_cpu_supports("avx512vnni"); r++) {
        int sum;
        double s = run_vnni(n, &sum);
        printf("int8 VNNI: %.1f G multiply-adds/s  (%.2f vpdpbusd a ns; checksum %d)\n", n * CHAINS * 64.0 / s / 1e9,
               n * CHAINS / s / 1e9, sum);
    }
    return 0;
}
