/*
 * rope-scaling.c — the one place that reads a model's rope.scaling.*
 * metadata and turns it into the RoPE parameters every architecture's
 * graph uses (model_rope_scaling, model_rope_params). Architectures call
 * nothing here directly: read_hparams does after the per-arch keys, and
 * blocks.c builds each ROPE node from model_rope_params.
 */
#include <math.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include "graph/graph.h"
#include "model.h"
#include "runtime/error.h"

#ifndef M_PI
#define M_PI 3.14159265358979323846
#endif

static bool key_f64(const struct minfer_gguf *g, const char *arch, const char *k, double *v)
{
    char key[160];
    snprintf(key, sizeof key, "%s.rope.scaling.%s", arch, k);
    return minfer_gguf_get_f64(g, key, v) == MINFER_OK;
}

/* rope.scaling.type (none, linear or yarn; another type is refused by
 * name), .factor, and for YaRN .original_context_length (default: the
 * trained context), .attn_factor (default 1) and .yarn_beta_fast /
 * .yarn_beta_slow (default 32 / 1), with llama.cpp's arithmetic: the
 * frequency of pair i mixes the interpolated (freq / factor) and the
 * original frequency by a ramp over pair indices [lo, hi] where
 * wavelengths cross the original context beta_fast / beta_slow times, and
 * cos/sin are scaled by attn_factor * (1 + 0.1 ln factor). A scaled model
 * runs to original_context_length * factor (n_ctx_max). */
minfer_status model_rope_scaling(const struct minfer_gguf *g, const char *arch,
                                 struct model_hparams *hp, char *err, size_t err_len)
{
    char key[160];
    hp->rope_scale = 1.0;
    hp->rope_ext = hp->rope_mscale = hp->rope_corr_lo = hp->rope_corr_hi = 0.0;
    hp->n_ctx_max = hp->n_ctx_train;
    const char *type = NULL;
    size_t tlen = 0;
    snprintf(key, sizeof key, "%s.rope.scaling.type", arch);
    bool has_type = minfer_gguf_get_str(g, key, &type, &tlen) == MINFER_OK;
    bool yarn = has_type && tlen == 4 && !memcmp(type, "yarn", 4);
    if (has_type && !yarn && !(tlen == 6 && !memcmp(type, "linear", 6)) &&
        !(tlen == 4 && !memcmp(type, "none", 4)))
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "%s is '%.*s', a RoPE scaling this build does not implement (it implements "
                    "none, linear and yarn)", key, (int)(tlen < 64 ? tlen : 64), type);
    if (has_type && tlen == 4 && !memcmp(type, "none", 4))
        return MINFER_OK;
    double factor = 0;
    if (!key_f64(g, arch, "factor", &factor) || factor == 1.0)
        return MINFER_OK; /* no factor: nothing to scale */
    if (!(factor > 0) || factor > 1024)
        return errf(err, err_len, MINFER_ERR_FORMAT,
                    "%s.rope.scaling.factor is %g, expected a number in (0, 1024]", arch, factor);
    hp->rope_scale = 1.0 / factor;
    double orig = (double)hp->n_ctx_train;
    if (yarn) {
        double o = 0, attn = 1.0, beta_fast = 32.0, beta_slow = 1.0;
        if (key_f64(g, arch, "original_context_length", &o)) {
            if (!(o >= 1) || o > INT32_MAX)
                return errf(err, err_len, MINFER_ERR_FORMAT,
                            "%s.rope.scaling.original_context_length is %g", arch, o);
            orig = o;
        }
        key_f64(g, arch, "attn_factor", &attn);
        key_f64(g, arch, "yarn_beta_fast", &beta_fast);
        key_f64(g, arch, "yarn_beta_slow", &beta_slow);
        if (!(attn > 0) || !(beta_fast > 0) || !(beta_slow > 0))
            return errf(err, err_len, MINFER_ERR_FORMAT,
                        "%s.rope.scaling: attn_factor %g, yarn_beta_fast %g and yarn_beta_slow "
                        "%g must be > 0", arch, attn, beta_fast, beta_slow);
        /* the pair index whose wavelength fits n_rot_turns times in orig */
        double n = (double)hp->n_rot, lb = 2.0 * log(hp->rope_base);
        double lo = floor(n * log(orig / (beta_fast * 2.0 * M_PI)) / lb);
        double hi = ceil(n * log(orig / (beta_slow * 2.0 * M_PI)) / lb);
        hp->rope_corr_lo = lo > 0 ? lo : 0;
        hp->rope_corr_hi = hi < n - 1 ? hi : n - 1;
        hp->rope_ext = 1.0;
        hp->rope_mscale = attn * (1.0 + 0.1 * log(factor));
    }
    double max = orig * factor;
    if (max > hp->n_ctx_max)
        hp->n_ctx_max = max > INT32_MAX ? INT32_MAX : (int64_t)max;
    return MINFER_OK;
}

void model_rope_params(const struct model_hparams *hp, struct graph_rope_params *p)
{
    p->n_rot = (int)hp->n_rot;
    p->layout = hp->rope_layout;
    p->freq_base = (float)hp->rope_base;
    p->freq_scale = (float)hp->rope_scale;
    p->ext_factor = (float)hp->rope_ext;
    p->mscale = (float)hp->rope_mscale;
    p->corr_lo = (float)hp->rope_corr_lo;
    p->corr_hi = (float)hp->rope_corr_hi;
}
