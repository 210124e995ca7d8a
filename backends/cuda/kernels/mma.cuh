/*
 * mma.cuh — the sm_80+ PTX wrappers the tensor-core kernels share
 * (gemm.cu, gemm-q.cu, gemm-i8.cu, attn.cu, attn-mma.cu): asynchronous
 * 16-byte copies into shared memory, ldmatrix, the f16 mma.sync with f32
 * accumulation and the int8 one with int32 sums.
 */
#ifndef MINFER_CUDA_MMA_CUH
#define MINFER_CUDA_MMA_CUH

#include <cuda_fp16.h>

__device__ __forceinline__ unsigned smem_u32(const void *p)
{
    return (unsigned)__cvta_generic_to_shared(p);
}

/* 16 bytes global -> shared without passing through registers; ok ==
 * false writes zeros (from a valid address: rows past the end of a tile,
 * cells past the visible end, whose values must be finite zeros). */
__device__ __forceinline__ void cp16(void *s, const void *g, bool ok)
{
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_u32(s)), "l"(g),
                 "r"(ok ? 16 : 0));
}
__device__ __forceinline__ void cp_commit()
{
    asm volatile("cp.async.commit_group;\n" ::);
}
/* Waits until at most N committed groups are still in flight. */
template <int N> __device__ __forceinline__ void cp_wait()
{
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

/* A STAGES-deep ring of cp.async groups over chunks [first, first + nc),
 * run by every thread of the block: load(stage, c) issues chunk c's
 * copies into a stage, step(stage, i) consumes chunk first + i once it
 * has landed, while the next STAGES - 1 chunks are in flight. */
template <int STAGES, class Load, class Step>
__device__ __forceinline__ void cp_ring(int first, int nc, Load load, Step step)
{
#pragma unroll
    for (int s = 0; s < STAGES - 1; s++) {
        if (s < nc)
            load(s, first + s);
        cp_commit();
    }
    for (int i = 0; i < nc; i++) {
        cp_wait<STAGES - 2>();
        __syncthreads(); /* chunk i landed; chunk i-1's stage is free */
        int pf = i + STAGES - 1;
        if (pf < nc)
            load(pf % STAGES, first + pf);
        cp_commit();
        step(i % STAGES, i);
    }
    cp_wait<0>();
}

/* Four 8x8 b16 matrices; lanes 8i..8i+7 address the rows of matrix i. */
__device__ __forceinline__ void ldsm4(unsigned (&r)[4], const void *s)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(s)));
}
/* The same, each matrix transposed (a row-major [k][n] tile as the "col"
 * B operand). */
__device__ __forceinline__ void ldsm4t(unsigned (&r)[4], const void *s)
{
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(smem_u32(s)));
}
/* c[16x8] += a[16x16] * b[16x8], f16 inputs, f32 accumulation. Fragment
 * e of a lane (gid = lane / 4, tig = lane % 4): a0 = (row gid, k 2tig and
 * 2tig+1), a1 = row gid+8, a2 = (row gid, k 2tig+8, +9), a3 = row gid+8
 * of those; b0 = (k 2tig, 2tig+1; column gid), b1 = k 2tig+8, +9; c[e] =
 * (row gid + 8 (e / 2), column 2tig + e % 2). */
__device__ __forceinline__ void mma16816(float (&c)[4], const unsigned (&a)[4], unsigned b0,
                                         unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* c[16x8] = a[16x32] * b[32x8] on int8, int32 sums (sm_80+). The same
 * fragments at 8-bit granularity: a0 = (row gid, k 4tig..4tig+3), a1 =
 * row gid+8, a2 = (row gid, k 16+4tig..), a3 = row gid+8 of those; b0 =
 * (k 4tig..4tig+3; column gid), b1 = k 16+4tig..; c as above. */
__device__ __forceinline__ void mma_s8_k32(int (&c)[4], const unsigned (&a)[4], unsigned b0,
                                           unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%10,%10,%10,%10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1), "r"(0));
}
/* The same adding into c. */
__device__ __forceinline__ void mma_s8_k32_acc(int (&c)[4], const unsigned (&a)[4], unsigned b0,
                                               unsigned b1)
{
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};\n"
                 : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* The k16 form: a0 = (row gid, k 4tig..4tig+3), a1 = row gid+8; b0 = (k
 * 4tig..4tig+3; column gid). */
__device__ __forceinline__ void mma_s8_k16(int (&c)[4], const unsigned (&a)[2], unsigned b0)
{
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, "
                 "{%4,%5}, {%6}, {%7,%7,%7,%7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(b0), "r"(0));
}
/* Two floats as the halves of one register, a in the low half (the lower
 * column of an mma fragment). */
__device__ __forceinline__ unsigned pack_h2(float a, float b)
{
    return (unsigned)__half_as_ushort(__float2half_rn(a)) |
           ((unsigned)__half_as_ushort(__float2half_rn(b)) << 16);
}

#endif /* MINFER_CUDA_MMA_CUH */
