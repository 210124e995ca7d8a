/*
 * wgmma.cuh — Hopper warpgroup MMA (wgmma) pieces shared by the sm_90a
 * kernels (gemm-wg.cu, gemm-ss.cu, attn-wg.cu): shared-memory matrix
 * descriptors without swizzle, the fence / commit / wait steps, mbarriers
 * and bulk copies, and m64nNk16 f16 products with f32 accumulators whose
 * A operand comes from registers or (m64n256k16) from shared memory.
 * Everything here exists only when compiling for sm_90a (WG_DEVICE).
 */
#ifndef MINFER_CUDA_WGMMA_CUH
#define MINFER_CUDA_WGMMA_CUH

#include "mma.cuh"

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define WG_DEVICE 1
#endif

#ifdef WG_DEVICE
/* The shared-memory matrix descriptor of an operand stored as core
 * matrices (8 rows x 16 bytes, 128 contiguous bytes each) without
 * swizzle: lbo is the byte distance between core matrices adjacent in K
 * and sbo between those adjacent in M/N, for K-major operands (a core
 * matrix row is 8 values of K) and MN-major ones alike (trans-b: a row is
 * 8 values of N; the PTX ISA's canonical layouts of wgmma). */
__device__ __forceinline__ uint64_t wg_desc(const void *s, unsigned lbo, unsigned sbo)
{
    uint64_t a = smem_u32(s);
    return ((a & 0x3FFFF) >> 4) | ((uint64_t)(lbo >> 4) << 16) | ((uint64_t)(sbo >> 4) << 32);
}
__device__ __forceinline__ void wg_fence()
{
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}
__device__ __forceinline__ void wg_commit()
{
    asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory");
}
template <int N> __device__ __forceinline__ void wg_wait()
{
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* Makes this thread's shared-memory writes (st.shared, cp.async) visible
 * to the async proxy that wgmma reads its shared operand through. */
__device__ __forceinline__ void fence_async_smem()
{
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

/* ---- shared-memory barriers and bulk copies (the async proxy) ----
 * A bulk copy (cp.async.bulk) writes shared memory through the async
 * proxy, the one wgmma reads through, and completes on an mbarrier: its
 * waiters need no proxy fence. (By ncu's samples, a thread's
 * fence.proxy.async after ordinary cp.async copies waits for every copy
 * it has in flight, which would collapse a ring of stages to one:
 * docs/decisions/cuda-hopper-gemm.md.) */
__device__ __forceinline__ void mbar_init(uint64_t *bar, unsigned count)
{
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;\n" ::"r"(smem_u32(bar)), "r"(count)
                 : "memory");
}
/* After the inits, before any other thread or the async proxy uses them. */
__device__ __forceinline__ void mbar_init_fence()
{
    asm volatile("fence.mbarrier_init.release.cluster;\n" ::: "memory");
}
/* This thread arrives on bar and announces bytes of bulk copies on it. */
__device__ __forceinline__ void mbar_expect(uint64_t *bar, unsigned bytes)
{
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;\n" ::"r"(smem_u32(bar)),
                 "r"(bytes)
                 : "memory");
}
/* This thread arrives on bar (no bytes announced). */
__device__ __forceinline__ void mbar_arrive(uint64_t *bar)
{
    asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];\n" ::"r"(smem_u32(bar)) : "memory");
}
/* Waits until bar completes the phase of parity `parity`. */
__device__ __forceinline__ void mbar_wait(uint64_t *bar, unsigned parity)
{
    asm volatile("{\n.reg .pred p;\nWAIT_%=:\n"
                 "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
                 "@!p bra WAIT_%=;\n}\n" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}
/* bytes (a multiple of 16; both addresses 16-byte aligned) global ->
 * shared, completing on bar. */
__device__ __forceinline__ void bulk_g2s(void *dst, const void *src, unsigned bytes,
                                         uint64_t *bar)
{
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes [%0], [%1], "
                 "%2, [%3];\n" ::"r"(smem_u32(dst)),
                 "l"(src), "r"(bytes), "r"(smem_u32(bar))
                 : "memory");
}

/* d[64 x N] (+)= a[64 x 16] (registers, per warp mma.sync's m16n8k16 A
 * layout) * b[16 x N] (shared, descriptor b; TB = 1: b is MN-major), f16
 * in, f32 accumulators; acc = 0 overwrites d. d[4j + e] of a lane is
 * (row 16 w + gid + 8 (e / 2), column 8j + 2 tig + e % 2). */
#define WG_D32 \
    "%0, %1, %2, %3, %4, %5, %6, %7, " \
    "%8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, " \
    "%24, %25, %26, %27, %28, %29, %30, %31"
#define WG_OUT32(d) \
    "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3]), "+f"(d[4]), "+f"(d[5]), \
    "+f"(d[6]), "+f"(d[7]), "+f"(d[8]), "+f"(d[9]), "+f"(d[10]), "+f"(d[11]), \
    "+f"(d[12]), "+f"(d[13]), "+f"(d[14]), "+f"(d[15]), "+f"(d[16]), "+f"(d[17]), \
    "+f"(d[18]), "+f"(d[19]), "+f"(d[20]), "+f"(d[21]), "+f"(d[22]), "+f"(d[23]), \
    "+f"(d[24]), "+f"(d[25]), "+f"(d[26]), "+f"(d[27]), "+f"(d[28]), "+f"(d[29]), \
    "+f"(d[30]), "+f"(d[31])
#define WG_D64 \
    WG_D32 ", " \
    "%32, %33, %34, %35, %36, %37, %38, %39, " \
    "%40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, " \
    "%56, %57, %58, %59, %60, %61, %62, %63"
#define WG_OUT64(d) WG_OUT32(d), WG_OUT32((d + 32))
template <int N, int TB> struct wg_mma;
template <int TB> struct wg_mma<64, TB> {
    static __device__ __forceinline__ void run(float (&d)[32], const unsigned (&a)[4], uint64_t b,
                                               int acc)
    {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 "
                     "{" WG_D32 "}, {%32, %33, %34, %35}, %36, p, 1, 1, %38;\n}\n"
                     : WG_OUT32(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc), "n"(TB));
    }
};
template <int TB> struct wg_mma<128, TB> {
    static __device__ __forceinline__ void run(float (&d)[64], const unsigned (&a)[4], uint64_t b,
                                               int acc)
    {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 "
                     "{" WG_D64 "}, {%64, %65, %66, %67}, %68, p, 1, 1, %70;\n}\n"
                     : WG_OUT64(d)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(acc), "n"(TB));
    }
};
/* d[64 x 256] (+)= a[64 x 16] * b[16 x 256], both operands in shared
 * memory (descriptors a and b, K-major core matrices), f16 in, f32
 * accumulators; acc = 0 overwrites d. d[4j + e] of a lane is (row 16 w +
 * gid + 8 (e / 2), column 8j + 2 tig + e % 2), w the warp of the group. */
#define WG_D128 \
    WG_D64 ", " \
    "%64, %65, %66, %67, %68, %69, %70, %71, " \
    "%72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, " \
    "%88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, " \
    "%104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, " \
    "%120, %121, %122, %123, %124, %125, %126, %127"
#define WG_OUT128(d) WG_OUT64(d), WG_OUT64((d + 64))
__device__ __forceinline__ void wg_mma_ss256(float (&d)[128], uint64_t a, uint64_t b, int acc)
{
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                 "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 "
                 "{" WG_D128 "}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                 : WG_OUT128(d)
                 : "l"(a), "l"(b), "r"(acc));
}
#endif /* WG_DEVICE */

#endif /* MINFER_CUDA_WGMMA_CUH */
