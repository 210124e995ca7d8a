/*
 * isa.c — run-time choice of the kernel set. Compiled for the baseline
 * ISA: it only asks the CPU (cpuid, and the OS through xgetbv, both done
 * by __builtin_cpu_supports) which sets it may run. The AVX2, AVX-VNNI and
 * AVX-512 sets live in their own translation units built with those -m flags and
 * are reached only through the table chosen here, so a CPU without an
 * instruction set never executes it (docs/decisions/cpu-isa-dispatch.md).
 */
#include "cpu-internal.h"

bool cpu_isa_supported(enum cpu_isa isa)
{
    if (isa == CPU_ISA_SCALAR)
        return true;
#if defined(__x86_64__) && defined(MINFER_CPU_X86_KERNELS)
    __builtin_cpu_init();
    /* every x86 set is built on the AVX2 one */
    if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma") ||
        !__builtin_cpu_supports("f16c"))
        return false;
    switch (isa) {
    case CPU_ISA_AVX2:
        return true;
    case CPU_ISA_AVXVNNI:
        return __builtin_cpu_supports("avxvnni");
    case CPU_ISA_AVX512:
        return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
               __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
    case CPU_ISA_AVX512BF16:
        return cpu_isa_supported(CPU_ISA_AVX512) && __builtin_cpu_supports("avx512bf16");
    default:
        return false;
    }
#else
    return false;
#endif
}

enum cpu_isa cpu_isa_detect(void)
{
    for (int i = CPU_ISA_COUNT - 1; i > CPU_ISA_SCALAR; i--)
        if (cpu_isa_supported((enum cpu_isa)i))
            return (enum cpu_isa)i;
    return CPU_ISA_SCALAR;
}

const char *cpu_isa_name(enum cpu_isa isa)
{
    switch (isa) {
    case CPU_ISA_AVX2:
        return "avx2";
    case CPU_ISA_AVXVNNI:
        return "avxvnni";
    case CPU_ISA_AVX512:
        return "avx512";
    case CPU_ISA_AVX512BF16:
        return "avx512bf16";
    default:
        return "scalar";
    }
}

const struct cpu_kernels *cpu_kernels_for(enum cpu_isa isa)
{
#if defined(__x86_64__) && defined(MINFER_CPU_X86_KERNELS)
    if (isa == CPU_ISA_AVX512BF16)
        return &cpu_kernels_avx512bf16;
    if (isa == CPU_ISA_AVX512)
        return &cpu_kernels_avx512;
    if (isa == CPU_ISA_AVXVNNI)
        return &cpu_kernels_avxvnni;
    if (isa == CPU_ISA_AVX2)
        return &cpu_kernels_avx2;
#endif
    (void)isa;
    return &cpu_kernels_scalar;
}
