/*
 * attn-wg.cu — attn-fa.cuh's prefill attention in its wgmma form, compiled
 * for sm_90a alone (CMakeLists.txt, as gemm-wg.cu); attn-mma.cu launches
 * it only on a 9.0 device (wg_ready). Variants (minfer-cuda-bench
 * --attn): 9 = one buffer per operand, 3 blocks per SM; 10 = two
 * buffers (attn-fa.cuh's schedule 2), 1 block's registers; 11 = two
 * buffers, 3 blocks.
 */
#define FA_WG_ONLY 1 /* no body for any other target */
#include "attn-fa.cuh"

#define FA_WG_DEFAULT 11

template <int MINB, int ST> static fa_kernel_fn fa_wg_of(uint32_t kv_type, int *smem)
{
    *smem = fa_smem<128, 1, ST>();
    switch (kv_type) {
    case MINFER_TYPE_F32:
        return fa_prefill<128, 0, MINB, 1, ST>;
    case MINFER_TYPE_F16:
        return fa_prefill<128, 1, MINB, 1, ST>;
    default:
        return fa_prefill<128, 2, MINB, 1, ST>;
    }
}

fa_kernel_fn fa_wg_kernel(int hd, uint32_t kv_type, int variant, int *smem)
{
    if (hd != 128)
        return NULL;
    if (variant < 9 || variant > 11)
        variant = FA_WG_DEFAULT;
    return variant == 9    ? fa_wg_of<3, 1>(kv_type, smem)
           : variant == 10 ? fa_wg_of<1, 2>(kv_type, smem)
                           : fa_wg_of<3, 2>(kv_type, smem);
}

int fa_wg_prepare(struct kctx *k)
{
    static const uint32_t types[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    for (int v = 9; v <= 11; v++)
        for (int t = 0; t < 3; t++) {
            int smem = 0;
            fa_kernel_fn f = fa_wg_kernel(128, types[t], v, &smem);
            if (smem > 48 * 1024 && k_smem_optin(k, (const void *)f, smem, "attention (wgmma)"))
                return -1;
        }
    return 0;
}
