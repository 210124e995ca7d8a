/*
 * kernels-avx512.c — the AVX-512 kernel set (kernels-avx512.inc) for CPUs
 * with AVX-512 F/BW/VL/VNNI (Ice Lake, Zen 4 and later; Skylake-X lacks
 * VNNI and gets the AVX2 set). Reached only through cpu_kernels_avx512,
 * which isa.c hands out only when the CPU and OS run all of those
 * extensions (docs/decisions/cpu-isa-dispatch.md).
 */
#define KSET_NAME "avx512"
#define KSET_TABLE cpu_kernels_avx512
#include "kernels-avx512.inc"
