/*
 * eogmask.c — whether ignore_eos's mask can change a draw. The scheduler
 * masks the end-of-generation ids by copying the row with those set to
 * -inf; at 32 sequences of a 152k vocabulary the copies were a third of a
 * step's host time on a small model. The mask is a no-op when the sampler
 * keeps only its top k (greedy: k = 1) and at least k ids score strictly
 * above every end-of-generation id: none of those ids can enter the top k,
 * masked or not, and the stages after top-k see only the top k. Penalties
 * (they move logits before top-k), logprobs (over the whole row) and a
 * sampler that keeps the whole row always need the copy. Depends on the
 * public sampler parameters only (tests/test-serve-eogmask.c includes it).
 */
#include <math.h>
#include <stdbool.h>
#include <stdint.h>

#include "minfer/minfer.h"

bool eog_mask_matters(const struct minfer_sampler_params *sp, bool logprobs,
                      const int32_t *eog, int32_t n_eog, const float *l, int32_t n_vocab);

bool eog_mask_matters(const struct minfer_sampler_params *sp, bool logprobs,
                      const int32_t *eog, int32_t n_eog, const float *l, int32_t n_vocab)
{
    if (logprobs || sp->repeat_penalty != 1.0f || sp->frequency_penalty != 0.0f ||
        sp->presence_penalty != 0.0f)
        return true;
    /* as minfer_sampler_sample: greedy keeps 1, top-k keeps k < n_vocab */
    int64_t k = sp->temperature <= 0.0f || sp->top_k == 1 ? 1 : sp->top_k;
    if (k <= 0 || k >= n_vocab)
        return true;
    float thr = -INFINITY; /* NaN counts as -inf, as in the sampler */
    for (int32_t i = 0; i < n_eog; i++)
        thr = l[eog[i]] > thr ? l[eog[i]] : thr;
    if (thr == -INFINITY)
        return false; /* every one is -inf (or NaN) already */
    int64_t above = 0;
    for (int32_t i0 = 0; i0 < n_vocab; i0 += 4096) {
        int32_t i1 = n_vocab - i0 < 4096 ? n_vocab : i0 + 4096;
        for (int32_t i = i0; i < i1; i++)
            above += l[i] > thr;
        if (above >= k)
            return false;
    }
    return true;
}
