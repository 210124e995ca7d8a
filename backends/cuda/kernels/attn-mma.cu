/*
 * attn-mma.cu — launches the tensor-core prefill attention (the kernel is
 * attn-fa.cuh's): on a 9.0 device of an sm_90a build its wgmma form
 * (attn-wg.cu), elsewhere its mma.sync form, instantiated here.
 */
#include "attn-fa.cuh"

/* The mma.sync kernel's default variant per cache type (fa_mma_kernel's
 * numbers): launch bounds of 3 blocks per SM cap its registers at 168 (a
 * few spilled) and made it 12% faster with a Q8_0 cache, even with F16
 * (docs/PERF.md). */
#define FA_MMA_F16 1
#define FA_MMA_Q8 3

/* minfer-cuda-bench and the op tests: the variant (0 = the default;
 * 1..5: fa_mma_kernel's; 9, 10, 11: attn-wg.cu's, where it runs) */
static int g_fa_variant;

extern "C" void k_tune_attn_prefill(int v)
{
    g_fa_variant = v;
}

template <int HD, int MINB, int ST> static fa_kernel_fn fa_kernel(uint32_t kv_type)
{
    switch (kv_type) {
    case MINFER_TYPE_F32:
        return fa_prefill<HD, 0, MINB, 0, ST>;
    case MINFER_TYPE_F16:
        return fa_prefill<HD, 1, MINB, 0, ST>;
    default:
        return fa_prefill<HD, 2, MINB, 0, ST>;
    }
}

/* The mma.sync kernel of a variant (1, 3: one buffer per operand and
 * those launch bounds; 4, 5: two buffers, 1 or 3 blocks per SM; others:
 * the default of the cache type) and its dynamic shared memory. */
template <int HD> static fa_kernel_fn fa_mma_kernel(uint32_t kv_type, int v, int *smem)
{
    if (v < 1 || v > 5 || v == 2)
        v = kv_type == MINFER_TYPE_Q8_0 ? FA_MMA_Q8 : FA_MMA_F16;
    *smem = v >= 4 ? fa_smem<HD, 0, 2>() : fa_smem<HD, 0, 1>();
    return v == 1   ? fa_kernel<HD, 1, 1>(kv_type)
           : v == 3 ? fa_kernel<HD, 3, 1>(kv_type)
           : v == 4 ? fa_kernel<HD, 1, 2>(kv_type)
                    : fa_kernel<HD, 3, 2>(kv_type);
}

/* k_prepare's part: the shared-memory opt-ins of the two-buffer kernels
 * (and attn-wg.cu's on a device that runs them). */
extern "C" int fa_prepare(struct kctx *k)
{
    static const uint32_t types[] = {MINFER_TYPE_F32, MINFER_TYPE_F16, MINFER_TYPE_Q8_0};
    for (int v = 4; v <= 5; v++)
        for (int t = 0; t < 3; t++) {
            int s64 = 0, s128 = 0;
            fa_kernel_fn f64 = fa_mma_kernel<64>(types[t], v, &s64);
            fa_kernel_fn f128 = fa_mma_kernel<128>(types[t], v, &s128);
            if (k_smem_optin(k, (const void *)f64, s64, "attention (mma.sync)") ||
                k_smem_optin(k, (const void *)f128, s128, "attention (mma.sync)"))
                return -1;
        }
#ifdef MINFER_CUDA_WGMMA
    if (wg_ready(k) && fa_wg_prepare(k))
        return -1;
#endif
    return 0;
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
    int v = g_fa_variant;
#ifdef MINFER_CUDA_WGMMA
    int wsmem = 0;
    fa_kernel_fn wk = wg_ready(k) && (v == 0 || v >= 9) ? fa_wg_kernel(HD, kv_type, v, &wsmem)
                                                        : NULL;
    if (wk) {
        KLAUNCH(k, fa_site(kv_type, true), wk, grid, FA_THREADS, wsmem, q, K, V, knb1, vnb1,
                n_cells, group, kv_len, pos, scale, window, dst);
        return 0;
    }
#endif
    int smem = 0;
    fa_kernel_fn kf = fa_mma_kernel<HD>(kv_type, v, &smem);
    KLAUNCH(k, fa_site(kv_type, false), kf, grid, FA_THREADS, smem, q, K, V, knb1, vnb1,
            n_cells, group, kv_len, pos, scale, window, dst);
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
