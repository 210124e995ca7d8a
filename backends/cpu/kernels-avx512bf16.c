/*
 * kernels-avx512bf16.c — the AVX-512 kernel set (kernels-avx512.inc) with
 * AVX512-BF16 for BF16 weights: activations rounded to bf16 once per row,
 * products by vdpbf16ps (Cooper Lake, Sapphire Rapids, Zen 4 and later).
 * Every other kernel is the avx512 set's. Reached only through
 * cpu_kernels_avx512bf16, which isa.c hands out only when cpuid reports
 * AVX512-BF16 besides the avx512 set's extensions
 * (docs/decisions/cpu-isa-dispatch.md).
 */
#define KSET_NAME "avx512bf16"
#define KSET_TABLE cpu_kernels_avx512bf16
#define KSET_BF16 1
#include "kernels-avx512.inc"
