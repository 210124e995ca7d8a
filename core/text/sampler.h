/*
 * sampler.h — internal view of the sampler (core/text/sampler.c) for tests.
 */
#ifndef MINFER_CORE_SAMPLER_H
#define MINFER_CORE_SAMPLER_H

#include <stddef.h>

#include "minfer/minfer.h"

/* Runs stages 1-6 on logits and exposes what stage 7 would draw from: ids
 * in the sampler's order with unnormalised weights (the best has 1) and
 * their sum. Greedy gives the arg max with weight 1. The arrays live in s
 * until its next call. */
minfer_status sampler_candidates(struct minfer_sampler *s, const float *logits, int32_t n_vocab,
                                 const int32_t **ids, const float **weights, size_t *n_out,
                                 double *sum_out);

#endif /* MINFER_CORE_SAMPLER_H */
