/*
 * kernels-avxvnni.c — the AVX2 kernel set (kernels-x86.inc) with AVX-VNNI:
 * the u8 x s8 block products of the 32-element weight types take one
 * VEX-encoded vpdpbusd instead of vpmaddubsw + vpmaddwd + vpaddd. For CPUs
 * with AVX-VNNI but no AVX-512 (Intel Alder Lake and later client cores,
 * Sierra Forest); on CPUs with both, the AVX-512 set ranks higher. Reached
 * only through cpu_kernels_avxvnni, which isa.c hands out only where cpuid
 * reports AVX-VNNI (docs/decisions/cpu-isa-dispatch.md).
 */
#define KSET_NAME "avxvnni"
#define KSET_TABLE cpu_kernels_avxvnni
#define KSET_AVXVNNI 1
#include "kernels-x86.inc"
