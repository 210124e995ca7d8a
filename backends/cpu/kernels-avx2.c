/*
 * kernels-avx2.c — the AVX2 + FMA + F16C kernel set (kernels-x86.inc built
 * with -mavx2 -mfma -mf16c). Reached only through cpu_kernels_avx2, which
 * isa.c hands out only on CPUs and OSes that run AVX2.
 */
#define KSET_NAME "avx2"
#define KSET_TABLE cpu_kernels_avx2
#include "kernels-x86.inc"
