/*
 * model.c — loads a GGUF as a model: finds its architecture in the
 * registry, reads and checks every hyperparameter, matches the tensor
 * table (names, shapes, types; required or optional) and binds the model
 * to a backend plugin. Weights are not copied: they stay in the GGUF's
 * mapping and each context registers them with its backend instance.
 */
#include <inttypes.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "runtime/error.h"
#include "minfer/quant.h"
#include "model.h"
#include "graph/passes.h"

/* ---- architecture registry ---- */

static const struct model_arch *const registry[] = {
    &model_arch_qwen2,
    &model_arch_qwen3,
    &model_arch_qwen3moe,
    &model_arch_llama,
    &model_arch_gemma3,
};

const struct model_arch *model_arch_find(const char *name)
{
    for (size_t i = 0; i < sizeof registry / sizeof registry[0]; i++)
        if (!strcmp(registry[i]->name, name))
            return registry[i];
    return NULL;
}

static void registry_names(char *buf, size_t len)
{
    size_t used = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof registry / sizeof registry[0] && used < len; i++)
        used += (size_t)snprintf(buf + used, len - used, "%s%s", i ? ", " : "",
                                 registry[i]->name);
}

/* ---- hyperparameters ---- */

static minfer_status read_hparams(const struct minfer_gguf *g, const struct model_arch *a,
                                  struct model_hparams *hp, char *err, size_t err_len)
{
    memset(hp, 0, sizeof *hp);
    for (const struct hparam_spec *s = a->hparams; s->key; s++) {
        char key[160];
        snprintf(key, sizeof key, "%s.%s", a->name, s->key);
        minfer_status st;
        if (s->kind == HP_INT) {
            int64_t v = 0;
            st = minfer_gguf_get_i64(g, key, &v);
            if (st == MINFER_OK && v <= 0)
                return errf(err, err_len, MINFER_ERR_FORMAT,
                            "hyperparameter %s is %" PRId64 ", expected a positive integer",
                            key, v);
            if (st == MINFER_OK)
                memcpy((char *)hp + s->offset, &v, sizeof v);
        } else {
            double v = 0;
            st = minfer_gguf_get_f64(g, key, &v);
            if (st == MINFER_OK && !(v > 0 && v < 1e12))
                return errf(err, err_len, MINFER_ERR_FORMAT,
                            "hyperparameter %s is %g, expected a positive number", key, v);
            if (st == MINFER_OK)
                memcpy((char *)hp + s->offset, &v, sizeof v);
        }
        if (st == MINFER_ERR_NOT_FOUND && !s->required)
            continue;
        if (st == MINFER_ERR_NOT_FOUND)
            return errf(err, err_len, MINFER_ERR_FORMAT,
                        "missing hyperparameter %s (required by architecture %s)", key,
                        a->name);
        if (st != MINFER_OK)
            return errf(err, err_len, MINFER_ERR_FORMAT,
                        "hyperparameter %s is malformed: stored type does not fit %s (%s)",
                        key, s->kind == HP_INT ? "an integer" : "a number",
                        minfer_status_str(st));
    }
    if (a->hparams_check) {
        minfer_status st = a->hparams_check(g, hp, err, err_len);
        if (st != MINFER_OK)
            return st;
    }
    if (!hp->rope_base)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "missing hyperparameter %s.rope.freq_base", a->name);
    if (hp->n_ctx_train > INT32_MAX) /* contexts and the public info are int32 */
        hp->n_ctx_train = INT32_MAX;
    if (!hp->n_head_kv)
        hp->n_head_kv = hp->n_head;
    if (!hp->head_dim) {
        if (hp->n_embd % hp->n_head)
            return errf(err, err_len, MINFER_ERR_FORMAT,
                        "%s.embedding_length %" PRId64 " is not a multiple of head_count %"
                        PRId64 " and attention.key_length is absent",
                        a->name, hp->n_embd, hp->n_head);
        hp->head_dim = hp->n_embd / hp->n_head;
    }
    if (!hp->head_dim_v)
        hp->head_dim_v = hp->head_dim;
    if (!hp->n_rot)
        hp->n_rot = hp->head_dim;
    if (hp->n_layer > MODEL_MAX_LAYERS || hp->n_embd > (1 << 20) || hp->n_ff > (1 << 24) ||
        hp->n_head > 4096 || hp->head_dim > 4096)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "hyperparameters out of range: %" PRId64 " layers (max %d), embedding %"
                    PRId64 ", ffn %" PRId64 ", %" PRId64 " heads of %" PRId64,
                    hp->n_layer, MODEL_MAX_LAYERS, hp->n_embd, hp->n_ff, hp->n_head,
                    hp->head_dim);
    if (hp->n_head % hp->n_head_kv)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "%s.attention.head_count %" PRId64 " is not a multiple of head_count_kv %"
                    PRId64, a->name, hp->n_head, hp->n_head_kv);
    if (hp->head_dim_v != hp->head_dim)
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "attention.value_length %" PRId64 " differs from key_length %" PRId64
                    "; this build needs them equal", hp->head_dim_v, hp->head_dim);
    if (hp->n_rot > hp->head_dim || hp->n_rot % 2)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "%s.rope.dimension_count %" PRId64 " must be even and at most head_dim %"
                    PRId64, a->name, hp->n_rot, hp->head_dim);
    return model_rope_scaling(g, a->name, hp, err, err_len);
}

/* ---- tensor table ---- */

int64_t model_dim_value(const struct model_hparams *hp, enum model_dim d)
{
    switch (d) {
    case DIM_1: return 1;
    case DIM_EMBD: return hp->n_embd;
    case DIM_VOCAB: return hp->n_vocab;
    case DIM_FF: return hp->n_ff;
    case DIM_Q: return hp->n_head * hp->head_dim;
    case DIM_KV: return hp->n_head_kv * hp->head_dim;
    case DIM_VO: return hp->n_head * hp->head_dim_v;
    case DIM_KV_V: return hp->n_head_kv * hp->head_dim_v;
    case DIM_HEAD: return hp->head_dim;
    case DIM_ROT_HALF: return hp->n_rot / 2;
    case DIM_EXPERTS: return hp->n_expert;
    case DIM_FF_EXP: return hp->n_ff_exp;
    }
    return -1;
}

static minfer_status check_tensor(const struct minfer_gguf_tensor *t, const struct tensor_spec *s,
                                  const struct model_hparams *hp, const char *name, char *err,
                                  size_t err_len)
{
    int want_dims = s->kind == WK_VECTOR ? 1 : s->kind == WK_EXPERTS ? 3 : 2;
    int64_t e0 = model_dim_value(hp, s->ne[0]), e1 = model_dim_value(hp, s->ne[1]);
    int64_t e2 = model_dim_value(hp, s->ne[2]);
    bool shape_ok = (int)t->n_dims == want_dims && t->ne[0] == e0 && t->ne[1] == e1 &&
                    t->ne[2] == e2 && t->ne[3] == 1;
    if (!shape_ok && want_dims == 3)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "tensor %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                    "] (%u dims), expected [%" PRId64 ", %" PRId64 ", %" PRId64 "]",
                    name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], t->n_dims, e0, e1, e2);
    if (!shape_ok)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "tensor %s has shape [%" PRId64 ", %" PRId64 ", %" PRId64 ", %" PRId64
                    "] (%u dims), expected [%" PRId64 ", %" PRId64 "]",
                    name, t->ne[0], t->ne[1], t->ne[2], t->ne[3], t->n_dims, e0, e1);
    const struct minfer_type_traits *tr = minfer_type_traits_of(t->type);
    if (s->kind == WK_VECTOR && t->type != MINFER_TYPE_F32)
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "tensor %s is %s; norms and biases must be f32", name,
                    minfer_type_name(t->type));
    if (!tr || !tr->supported || t->type == MINFER_TYPE_Q8_K || t->type == MINFER_TYPE_Q8_1)
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "tensor %s has type %s, which this build cannot compute with", name,
                    minfer_type_name(t->type));
    return MINFER_OK;
}

static minfer_status add_weight(struct minfer_model *m, const struct minfer_gguf_tensor *t)
{
    struct model_weight *w = realloc(m->weights, sizeof *w * (size_t)(m->n_weights + 1));
    if (!w)
        return MINFER_ERR_NO_MEMORY;
    m->weights = w;
    m->weights[m->n_weights].gt = t;
    return MINFER_OK;
}

static minfer_status match_tensors(struct minfer_model *m, char *err, size_t err_len)
{
    const struct model_arch *a = m->arch;
    for (int i = 0; i < W_GLOBAL_COUNT; i++)
        m->global[i] = -1;
    for (int64_t l = 0; l < m->hp.n_layer; l++)
        for (int i = 0; i < W_LAYER_COUNT; i++)
            m->layer[l][i] = -1;
    for (const struct tensor_spec *s = a->tensors; s->name; s++) {
        int64_t n = s->per_layer ? m->hp.n_layer : 1;
        for (int64_t l = 0; l < n; l++) {
            char name[128];
            if (s->per_layer)
                snprintf(name, sizeof name, s->name, (int)l);
            else
                snprintf(name, sizeof name, "%s", s->name);
            const struct minfer_gguf_tensor *t = minfer_gguf_find_tensor(m->gguf, name);
            if (!t) {
                if (s->required)
                    return errf(err, err_len, MINFER_ERR_FORMAT,
                                "model is missing tensor %s (required by architecture %s)",
                                name, a->name);
                continue;
            }
            minfer_status st = check_tensor(t, s, &m->hp, name, err, err_len);
            if (st != MINFER_OK)
                return st;
            if (add_weight(m, t) != MINFER_OK)
                return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory");
            if (s->per_layer)
                m->layer[l][s->slot] = m->n_weights;
            else
                m->global[s->slot] = m->n_weights;
            m->n_weights++;
            m->size_bytes += t->size;
            m->n_params += (uint64_t)(t->ne[0] * t->ne[1] * t->ne[2]);
        }
    }
    return MINFER_OK;
}

/* The type holding most bytes among the matrices, e.g. "q4_K". */
static void describe_types(struct minfer_model *m)
{
    uint64_t bytes[MINFER_TYPE_COUNT] = {0};
    for (int32_t i = 0; i < m->n_weights; i++)
        if (m->weights[i].gt->n_dims >= 2 && m->weights[i].gt->type < MINFER_TYPE_COUNT)
            bytes[m->weights[i].gt->type] += m->weights[i].gt->size;
    uint32_t best = 0;
    for (uint32_t t = 0; t < MINFER_TYPE_COUNT; t++)
        if (bytes[t] > bytes[best])
            best = t;
    snprintf(m->type_desc, sizeof m->type_desc, "%s", minfer_type_name(best));
}

/* ---- load ---- */

/* The dry run's build step: the architecture's forward pass on b. */
static void dry_build(void *user, struct graph *g)
{
    struct build *b = user;
    b->g = g;
    b->m->arch->build(b);
}

/* Whether plugin p can run the whole model: its first device has room for
 * the weights (when it reports memory) and an instance accepts every node
 * of a one-token graph and of a prompt graph (assignment only; weights
 * point at the mapping, nothing is uploaded or run). *why says what
 * failed. */
static bool backend_runs_model(const struct minfer_model *m, const struct minfer_plugin *p,
                               char *why, size_t why_len)
{
    if (PLUGIN_HAS(p, device_info)) {
        struct minfer_device_info di;
        memset(&di, 0, sizeof di);
        di.struct_size = sizeof di;
        if (p->iface->device_info(0, &di) == MINFER_OK && di.memory_free &&
            di.memory_free < m->size_bytes + m->size_bytes / 8) {
            errf(why, why_len, MINFER_ERR_DEVICE_OOM,
                 "its device has %llu MiB free, the weights need %llu MiB",
                 (unsigned long long)(di.memory_free >> 20),
                 (unsigned long long)(m->size_bytes >> 20));
            return false;
        }
    }
    struct minfer_backend *be = NULL;
    if (plugin_create_instance(p, NULL, &be, why, why_len) != MINFER_OK)
        return false;
    static _Alignas(256) unsigned char placeholder[256];
    struct kv_cache kv = {
        .plugin = p, .be = be, .type_k = MINFER_TYPE_F16, .type_v = MINFER_TYPE_F16,
        .n_layer = (int32_t)m->hp.n_layer, .row_k = m->hp.head_dim * m->hp.n_head_kv,
        .row_v = m->hp.head_dim_v * m->hp.n_head_kv, .n_cells = 256, .base = placeholder,
    };
    kv.row_bytes_k = minfer_row_size(kv.type_k, kv.row_k);
    kv.row_bytes_v = minfer_row_size(kv.type_v, kv.row_v);
    void **wdata = calloc((size_t)m->n_weights + 1, sizeof *wdata);
    struct gtensor **wt = calloc((size_t)m->n_weights + 1, sizeof *wt);
    bool ok = wdata && wt;
    for (int32_t i = 0; ok && i < m->n_weights; i++)
        wdata[i] = (void *)(uintptr_t)m->weights[i].gt->data;
    const int32_t sizes[2] = {1, 64};
    for (int k = 0; ok && k < 2; k++) {
        memset(wt, 0, sizeof *wt * (size_t)m->n_weights);
        struct build b = {
            .m = m, .hp = &m->hp, .kv = &kv, .wdata = wdata, .n_tokens = sizes[k],
            .n_kv = 256, .n_out = 1, .wt = wt,
        };
        struct sched_backend sb = {p, be};
        struct graph_passes gp = {.build = dry_build, .user = &b, .bes = &sb, .n_bes = 1};
        struct graph *g = NULL;
        ok = graph_passes_run(&gp, &g, why, why_len) == MINFER_OK;
        graph_free(g);
    }
    free(wt);
    free(wdata);
    p->iface->destroy(be);
    return ok;
}

static minfer_status pick_backend(const struct minfer_model *m, struct minfer_runtime *rt,
                                  const char *want, const struct minfer_plugin **out,
                                  char *err, size_t err_len)
{
    *out = NULL;
    if (!rt)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG, "no runtime given");
    if (want && *want && strcmp(want, "auto")) {
        *out = runtime_find_backend(rt, want);
        if (!*out)
            return errf(err, err_len, MINFER_ERR_NOT_FOUND,
                        "backend '%s' is not loaded (run `minfer backends` to see why)", want);
        return MINFER_OK;
    }
    /* Automatic choice, all or nothing: the best-scoring accelerator plugin
     * that can hold and run the whole model, else the CPU, saying why. */
    const struct minfer_plugin *best = NULL;
    for (size_t i = 0; i < runtime_backend_count(rt); i++) {
        const struct minfer_plugin *p = runtime_backend_at(rt, i);
        if (strcmp(p->name, "cpu") && (!best || p->score > best->score))
            best = p;
    }
    char why[512] = "";
    if (best && secure_getenv("MINFER_NO_AUTO_GPU") == NULL) {
        if (backend_runs_model(m, best, why, sizeof why)) {
            *out = best;
            return MINFER_OK;
        }
        plugin_log(MINFER_LOG_WARN, "backend '%s' cannot run this model, using the CPU: %s",
                   best->name, why);
    }
    *out = runtime_find_backend(rt, "cpu");
    if (!*out)
        *out = best;
    if (!*out)
        return errf(err, err_len, MINFER_ERR_NOT_FOUND,
                    "no backend plugin is loaded (run `minfer backends` to see why)");
    return MINFER_OK;
}

/* Asks the kernel to start reading the file's tensor data now, so the
 * first pass does not fault every page in one at a time. Advice only. */
static void prefetch_weights(const struct minfer_gguf *g)
{
    uint64_t size = 0;
    const char *base = minfer_gguf_base(g, &size);
    uint64_t off = minfer_gguf_data_offset(g);
    long page = sysconf(_SC_PAGESIZE);
    if (!base || off >= size || page <= 0)
        return;
    uintptr_t start = ((uintptr_t)(base + off)) & ~((uintptr_t)page - 1);
    uintptr_t end = (uintptr_t)(base + size);
    (void)madvise((void *)start, end - start, MADV_WILLNEED);
}

minfer_status model_load_internal(struct minfer_runtime *rt, const struct minfer_plugin *plugin,
                                  struct minfer_gguf *g, const struct minfer_model_params *p,
                                  struct minfer_model **out, char *err, size_t err_len)
{
    *out = NULL;
    const char *arch_s = NULL;
    size_t arch_len = 0;
    minfer_status st = minfer_gguf_get_str(g, "general.architecture", &arch_s, &arch_len);
    if (st != MINFER_OK)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "general.architecture is %s; a model file must name its architecture",
                    st == MINFER_ERR_NOT_FOUND ? "missing" : "not a string");
    char arch[64];
    snprintf(arch, sizeof arch, "%.*s", (int)(arch_len < 63 ? arch_len : 63), arch_s);
    const struct model_arch *a = model_arch_find(arch);
    if (!a) {
        char names[128];
        registry_names(names, sizeof names);
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "unknown architecture '%s' (this build supports: %s)", arch, names);
    }
    struct minfer_model *m = calloc(1, sizeof *m);
    if (!m)
        return errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory");
    m->gguf = g;
    m->arch = a;
    minfer_model_params_default(&m->params);
    if (p)
        memcpy(&m->params, p,
               p->struct_size < sizeof m->params ? p->struct_size : sizeof m->params);
    m->params.struct_size = sizeof m->params;
    st = read_hparams(g, a, &m->hp, err, err_len);
    if (st != MINFER_OK)
        goto out_free;
    const struct minfer_gguf_tensor *embd = minfer_gguf_find_tensor(g, "token_embd.weight");
    if (!embd) {
        st = errf(err, err_len, MINFER_ERR_FORMAT,
                  "model is missing tensor token_embd.weight (required by architecture %s)",
                  a->name);
        goto out_free;
    }
    m->hp.n_vocab = embd->ne[1];
    m->layer = calloc((size_t)m->hp.n_layer, sizeof *m->layer);
    if (!m->layer) {
        st = errf(err, err_len, MINFER_ERR_NO_MEMORY, "out of memory");
        goto out_free;
    }
    st = match_tensors(m, err, err_len);
    if (st != MINFER_OK)
        goto out_free;
    describe_types(m);
    const char *name = NULL;
    size_t name_len = 0;
    if (minfer_gguf_get_str(g, "general.name", &name, &name_len) == MINFER_OK)
        snprintf(m->name, sizeof m->name, "%.*s", (int)(name_len < 127 ? name_len : 127), name);
    m->plugin = plugin;
    if (!m->plugin) {
        st = pick_backend(m, rt, m->params.backend, &m->plugin, err, err_len);
        if (st != MINFER_OK)
            goto out_free;
    }
    m->params.backend = NULL; /* the caller's string is not ours to keep */
    prefetch_weights(g);
    *out = m;
    return MINFER_OK;

out_free:
    m->gguf = NULL;
    minfer_model_free(m);
    return st;
}

/* ---- public API ---- */

void minfer_model_params_default(struct minfer_model_params *p)
{
    memset(p, 0, sizeof *p);
    p->struct_size = sizeof *p;
}

struct minfer_model *minfer_model_load_gguf(struct minfer_runtime *rt, struct minfer_gguf *g,
                                            const struct minfer_model_params *p,
                                            minfer_status *st, char *err, size_t err_len)
{
    struct minfer_model *m = NULL;
    minfer_status s = g ? model_load_internal(rt, NULL, g, p, &m, err, err_len)
                        : errf(err, err_len, MINFER_ERR_INVALID_ARG, "no GGUF given");
    if (s != MINFER_OK)
        minfer_gguf_close(g);
    if (st)
        *st = s;
    return m;
}

struct minfer_model *minfer_model_load(struct minfer_runtime *rt, const char *path,
                                       const struct minfer_model_params *p, minfer_status *st,
                                       char *err, size_t err_len)
{
    minfer_status s;
    struct minfer_gguf *g = minfer_gguf_open(path, &s, err, err_len);
    if (!g) {
        if (st)
            *st = s;
        return NULL;
    }
    return minfer_model_load_gguf(rt, g, p, st, err, err_len);
}

void minfer_model_free(struct minfer_model *m)
{
    if (!m)
        return;
    minfer_tokenizer_free(m->tok);
    minfer_gguf_close(m->gguf);
    free(m->weights);
    free(m->layer);
    free(m);
}

void minfer_model_info(const struct minfer_model *m, struct minfer_model_info *info)
{
    struct minfer_model_info i = {0};
    i.struct_size = sizeof i;
    i.arch = m->arch->name;
    i.name = m->name;
    i.backend = m->plugin && m->plugin->name ? m->plugin->name : "";
    i.type_desc = m->type_desc;
    i.n_vocab = (int32_t)m->hp.n_vocab;
    i.n_ctx_train = (int32_t)m->hp.n_ctx_train;
    i.n_ctx_max = (int32_t)m->hp.n_ctx_max;
    i.n_embd = (int32_t)m->hp.n_embd;
    i.n_layer = (int32_t)m->hp.n_layer;
    i.n_head = (int32_t)m->hp.n_head;
    i.n_head_kv = (int32_t)m->hp.n_head_kv;
    i.head_dim = (int32_t)m->hp.head_dim;
    i.n_ff = (int32_t)m->hp.n_ff;
    i.n_params = m->n_params;
    i.size_bytes = m->size_bytes;
    size_t n = info->struct_size < sizeof i ? info->struct_size : sizeof i;
    uint32_t keep = info->struct_size;
    memcpy(info, &i, n);
    info->struct_size = keep;
}

const struct minfer_gguf *minfer_model_gguf(const struct minfer_model *m)
{
    return m ? m->gguf : NULL;
}
