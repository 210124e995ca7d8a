/*
 * attn-mma.cu — launches the tensor-core prefill attention (the kernel is
 * attn-fa.cuh's) and instantiates its mma.sync form; its wgmma form is
 * attn-wg.cu's (sm_90a builds), chosen per cache type below.
 */
#include "attn-fa.cuh"

/* The variant (k_tune_attn_prefill's numbers; 0 = this default): by
 * minfer-cuda-bench --attn on the H200 (docs/PERF.md), the mma.sync form
 * with 8 warps per SM (1) for F16 and F32 caches, 248-252 TFLOP/s against
 * the wgmma form's 180-185; for Q8_0, whose tiles are converted on the
 * way in, the wgmma form (9: 132-136 TFLOP/s) where it runs, else
 * mma.sync with launch bounds of 3 blocks per SM (3: 122 against 108 for
 * 1; its registers capped at 168, a few spilled). */
static int fa_default(const struct kctx *k, uint32_t kv_type)
{
    if (kv_type != MINFER_TYPE_Q8_0)
        return 1;
    return wg_ready(k) ? 9 : 3;
}

/* minfer-cuda-bench and the op tests (kernels.h). */
static int g_fa_variant;

extern "C" void k_tune_attn_prefill(int v)
{
    g_fa_variant = v;
}

template <int HD, int MINB> static fa_kernel_fn fa_kernel(uint32_t kv_type)
{
    switch (kv_type) {
    case MINFER_TYPE_F32:
        return fa_prefill<HD, 0, MINB, 0>;
    case MINFER_TYPE_F16:
        return fa_prefill<HD, 1, MINB, 0>;
    default:
        return fa_prefill<HD, 2, MINB, 0>;
    }
}

static const char *fa_site(uint32_t kv_type, bool wg)
{
    switch (kv_type) {
    case MINFER_TYPE_F32:
        return wg ? "attention.prefill_wgmma<f32>" : "attention.prefill_mma<f32>";
    case MINFER_TYPE_F16:
        return wg ? "attention.prefill_wgmma<f16>" : "attention.prefill_mma<f16>";
    default:
        return wg ? "attention.prefill_wgmma<q8_0>" : "attention.prefill_mma<q8_0>";
    }
}

template <int HD>
static int fa_launch(struct kctx *k, kview q, uint32_t kv_type, const uint8_t *K,
                     const uint8_t *V, int64_t knb1, int64_t vnb1, int64_t n_cells, int group,
                     const int32_t *kv_len, const int32_t *pos, float scale, int window,
                     kview dst)
{
    if (kv_type != MINFER_TYPE_F32 && kv_type != MINFER_TYPE_F16 && kv_type != MINFER_TYPE_Q8_0)
        return k_fail(k, "attention", "KV cache type is not F32, F16 or Q8_0");
    int64_t nt = q.ne[2];
    dim3 grid((unsigned)q.ne[1], (unsigned)((nt + FA_BQ - 1) / FA_BQ));
    int v = g_fa_variant == 1 || g_fa_variant == 3 || g_fa_variant == 9 ? g_fa_variant
                                                                        : fa_default(k, kv_type);
#ifdef MINFER_CUDA_WGMMA
    fa_kernel_fn wk = v == 9 && wg_ready(k) ? fa_wg_kernel(HD, kv_type) : NULL;
    if (wk) {
        KLAUNCH(k, fa_site(kv_type, true), wk, grid, FA_THREADS, (fa_smem<HD, 1>()), q, K, V,
                knb1, vnb1, n_cells, group, kv_len, pos, scale, window, dst);
        return 0;
    }
#endif
    /* 9 where the wgmma form cannot run (another device, head dim 64): 3 */
    fa_kernel_fn kf = v == 1 ? fa_kernel<HD, 1>(kv_type) : fa_kernel<HD, 3>(kv_type);
    KLAUNCH(k, fa_site(kv_type, false), kf, grid, FA_THREADS, (fa_smem<HD, 0>()), q, K, V, knb1,
            vnb1, n_cells, group, kv_len, pos, scale, window, dst);
    return 0;
}

extern "C" int k_attn_mma_ok(int64_t hd, int64_t n_head, int64_t n_tokens, uint32_t kv_type,
                             const void *kc, const void *vc, int64_t knb1, int64_t vnb1)
{
    if (hd != 64 && hd != 128)
        return 0;
    if (n_head > 2147483647LL || (n_tokens + FA_BQ - 1) / FA_BQ > 65535)
        return 0;
    if (kv_type == MINFER_TYPE_Q8_0)
        return knb1 % 2 == 0 && vnb1 % 2 == 0 && (uintptr_t)kc % 2 == 0 && (uintptr_t)vc % 2 == 0;
    /* 16-byte cp.async / vector reads of the rows */
    return (uintptr_t)kc % 16 == 0 && (uintptr_t)vc % 16 == 0 && knb1 % 16 == 0 && vnb1 % 16 == 0;
}

extern "C" int k_attn_mma(struct kctx *k, struct kview q, uint32_t kv_type, const void *kc,
                          const void *vc, int64_t knb1, int64_t vnb1, int64_t n_cells,
                          int64_t n_kv_head, const int32_t *kv_len, const int32_t *pos,
                          float scale, int window, struct kview dst)
{
    int group = (int)(q.ne[1] / n_kv_head);
    const uint8_t *K = (const uint8_t *)kc, *V = (const uint8_t *)vc;
    if (q.ne[0] == 128)
        return fa_launch<128>(k, q, kv_type, K, V, knb1, vnb1, n_cells, group, kv_len, pos,
                              scale, window, dst);
    return fa_launch<64>(k, q, kv_type, K, V, knb1, vnb1, n_cells, group, kv_len, pos, scale,
                         window, dst);
}
