/*
 * moe.c — the mixture-of-experts ops (ir.h): TOPK (the router's choice),
 * MOE_WEIGHTS (the chosen experts' softmax weights), MUL_MAT_ID (the
 * chosen experts' products) and MOE_SUM (their weighted sum).
 *
 * MUL_MAT_ID runs only the chosen experts: for each expert it gathers the
 * columns routed to it (every token of a prefill that chose it; one column
 * in decode) into one dense block, runs the ordinary matmul kernels of
 * matmul.c on that expert's [K, N] slice (so every weight type MUL_MAT
 * reads works here, with the same accumulation), and scatters the results
 * back. An expert nobody chose is never read.
 */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cpu-internal.h"

/* ---- TOPK ---- */

static void topk(const struct minfer_node *node)
{
    const struct minfer_tensor *x = node->src[0], *d = node->dst;
    int k = node->iparams[0];
    int64_t n = x->ne[0];
    for (int64_t t = 0; t < x->ne[1]; t++) {
        const float *v = (const float *)cpu_row(x, t);
        int32_t *out = (int32_t *)cpu_row(d, t);
        int m = 0; /* out[0..m) sorted: larger value first, lower index on ties */
        for (int64_t i = 0; i < n; i++) {
            if (m == k && !(v[i] > v[out[k - 1]]))
                continue; /* a tie keeps the earlier (lower) index */
            int p = m < k ? m++ : k - 1;
            while (p > 0 && v[i] > v[out[p - 1]]) {
                out[p] = out[p - 1];
                p--;
            }
            out[p] = (int32_t)i;
        }
    }
}

/* ---- MOE_WEIGHTS ---- */

static void moe_weights(const struct minfer_node *node)
{
    const struct minfer_tensor *lg = node->src[0], *ids = node->src[1], *d = node->dst;
    int64_t n = lg->ne[0], k = ids->ne[0];
    bool renorm = node->iparams[0] == 1;
    for (int64_t t = 0; t < lg->ne[1]; t++) {
        const float *l = (const float *)cpu_row(lg, t);
        const int32_t *e = (const int32_t *)cpu_row(ids, t);
        float *w = (float *)cpu_row(d, t);
        float mx = -INFINITY;
        for (int64_t i = 0; i < n; i++)
            mx = l[i] > mx ? l[i] : mx;
        double sum = 0.0;
        if (renorm)
            for (int64_t j = 0; j < k; j++)
                sum += exp((double)l[e[j]] - mx);
        else
            for (int64_t i = 0; i < n; i++)
                sum += exp((double)l[i] - mx);
        for (int64_t j = 0; j < k; j++)
            w[j] = (float)(exp((double)l[e[j]] - mx) / sum);
    }
}

/* ---- MOE_SUM ---- */

static void moe_sum(const struct minfer_node *node)
{
    const struct minfer_tensor *x = node->src[0], *wt = node->src[1], *d = node->dst;
    int64_t N = x->ne[0], k = x->ne[1];
    for (int64_t t = 0; t < x->ne[2]; t++) {
        const float *w = (const float *)cpu_row(wt, t);
        float *y = (float *)cpu_row(d, t);
        for (int64_t i = 0; i < N; i++)
            y[i] = 0.0f;
        for (int64_t j = 0; j < k; j++) {
            const float *r = (const float *)cpu_row(x, t * k + j);
            for (int64_t i = 0; i < N; i++)
                y[i] += w[j] * r[i];
        }
    }
}

/* ---- MUL_MAT_ID ---- */

static minfer_status mul_mat_id(struct minfer_backend *be, const struct minfer_node *node)
{
    const struct minfer_tensor *w = node->src[0], *x = node->src[1], *ids = node->src[2];
    const struct minfer_tensor *d = node->dst;
    int64_t K = w->ne[0], N = w->ne[1], E = w->ne[2], k = ids->ne[0], T = ids->ne[1];
    bool shared = x->ne[1] == 1; /* every slot of token t reads column t */
    for (int64_t t = 0; t < T; t++) {
        const int32_t *e = (const int32_t *)cpu_row(ids, t);
        for (int64_t j = 0; j < k; j++)
            if (e[j] < 0 || e[j] >= E)
                return cpu_fail(be, node, MINFER_ERR_RANGE,
                                "MUL_MAT_ID expert %d (token %lld, slot %lld) is outside the "
                                "%lld experts",
                                e[j], (long long)t, (long long)j, (long long)E);
    }
    /* the busiest expert's column count sizes the gather buffers */
    int64_t most = 0;
    for (int64_t ex = 0; ex < E; ex++) {
        int64_t c = 0;
        for (int64_t t = 0; t < T; t++) {
            const int32_t *e = (const int32_t *)cpu_row(ids, t);
            for (int64_t j = 0; j < k; j++)
                c += e[j] == ex;
        }
        most = c > most ? c : most;
    }
    /* scratch: one expert's gathered columns [K, most], their products
     * [N, most], and the slot (t * k + j) of each gathered column */
    size_t cols = (size_t)most;
    size_t bytes = cols * ((size_t)(K + N) * sizeof(float) + sizeof(int64_t)) + 64;
    if (bytes > be->moe_scratch_size) {
        void *p = aligned_alloc(64, (bytes + 63) & ~(size_t)63);
        if (!p)
            return cpu_fail(be, node, MINFER_ERR_NO_MEMORY,
                            "out of memory for %zu bytes of MUL_MAT_ID scratch", bytes);
        free(be->moe_scratch);
        be->moe_scratch = p;
        be->moe_scratch_size = (bytes + 63) & ~(size_t)63;
    }
    float *xg = be->moe_scratch;
    float *yg = xg + cols * (size_t)K;
    int64_t *slot = (int64_t *)(yg + cols * (size_t)N);
    for (int64_t ex = 0; ex < E; ex++) {
        int64_t m = 0;
        for (int64_t t = 0; t < T; t++) {
            const int32_t *e = (const int32_t *)cpu_row(ids, t);
            for (int64_t j = 0; j < k; j++) {
                if (e[j] != ex)
                    continue;
                const float *col = (const float *)cpu_row(x, t * x->ne[1] + (shared ? 0 : j));
                memcpy(xg + (size_t)m * K, col, (size_t)K * sizeof(float));
                slot[m++] = t * k + j;
            }
        }
        if (!m)
            continue;
        /* expert ex's [K, N] slice against the m gathered columns */
        struct minfer_tensor we = *w, xt = {0}, yt = {0};
        we.ne[2] = 1;
        we.nb[2] = we.nb[3] = w->nb[1] * (size_t)N;
        we.data = (char *)w->data + (size_t)ex * w->nb[2];
        xt.type = yt.type = MINFER_TYPE_F32;
        xt.ne[0] = K;
        yt.ne[0] = N;
        xt.ne[1] = yt.ne[1] = m;
        xt.ne[2] = xt.ne[3] = yt.ne[2] = yt.ne[3] = 1;
        xt.nb[0] = yt.nb[0] = sizeof(float);
        xt.nb[1] = (size_t)K * sizeof(float);
        yt.nb[1] = (size_t)N * sizeof(float);
        xt.nb[2] = xt.nb[3] = xt.nb[1] * (size_t)m;
        yt.nb[2] = yt.nb[3] = yt.nb[1] * (size_t)m;
        xt.data = xg;
        yt.data = yg;
        struct minfer_node mm = *node;
        mm.op = MINFER_OP_MUL_MAT;
        mm.n_src = 2;
        mm.src[0] = &we;
        mm.src[1] = &xt;
        mm.src[2] = NULL;
        mm.dst = &yt;
        minfer_status st = cpu_op_matmul(be, &mm);
        if (st != MINFER_OK)
            return st;
        for (int64_t c = 0; c < m; c++)
            memcpy(cpu_row(d, slot[c]), yg + (size_t)c * N, (size_t)N * sizeof(float));
    }
    return MINFER_OK;
}

minfer_status cpu_op_moe(struct minfer_backend *be, const struct minfer_node *node)
{
    switch (node->op) {
    case MINFER_OP_TOPK:
        topk(node);
        return MINFER_OK;
    case MINFER_OP_MOE_WEIGHTS: {
        const struct minfer_tensor *ids = node->src[1];
        int64_t n = node->src[0]->ne[0];
        for (int64_t t = 0; t < ids->ne[1]; t++) {
            const int32_t *e = (const int32_t *)cpu_row(ids, t);
            for (int64_t j = 0; j < ids->ne[0]; j++)
                if (e[j] < 0 || e[j] >= n)
                    return cpu_fail(be, node, MINFER_ERR_RANGE,
                                    "MOE_WEIGHTS expert %d (token %lld) is outside the %lld "
                                    "logits",
                                    e[j], (long long)t, (long long)n);
        }
        moe_weights(node);
        return MINFER_OK;
    }
    case MINFER_OP_MUL_MAT_ID:
        return mul_mat_id(be, node);
    case MINFER_OP_MOE_SUM:
        moe_sum(node);
        return MINFER_OK;
    default:
        return cpu_fail(be, node, MINFER_ERR_UNSUPPORTED, "op %u is not a MoE op", node->op);
    }
}
