/*
 * kernels-avx512.c — the AVX-512 kernel set (kernels-x86.inc built with
 * AVX-512 F/BW/VL/VNNI on top of AVX2): integer products of the 32-element
 * block types go through vpdpbusd. Reached only through cpu_kernels_avx512,
 * which isa.c hands out only when the CPU and OS run all of those.
 */
#define KSET_NAME "avx512"
#define KSET_TABLE cpu_kernels_avx512
#define KSET_VNNI 1
#include "kernels-x86.inc"
