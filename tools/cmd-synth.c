/*
 * cmd-synth.c — `minfer synth --arch ARCH --shape NAME|custom:... --type T
 * -o FILE [--tokenizer FILE] [--seed S] [--threads N] [--pure]`: writes a
 * random-weight model of a real model's shape. A Hugging Face
 * tokenizer.json given with --tokenizer is parsed here (cJSON) into the
 * explicit vocabulary minfer_synth takes; a .gguf is passed through.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cli-model.h"
#include "cli-opts.h"
#include "commands.h"
#include "minfer/minfer.h"

/* ---- tokenizer.json ---- */

struct hf_vocab {
    struct minfer_synth_vocab v;
    char **tokens;
    size_t *lens;
    int32_t *types;
    char **merges;
    size_t *mlens;
    char *chat_template;
    cJSON *json, *config;
};

static void hf_free(struct hf_vocab *h)
{
    if (h->tokens)
        for (uint64_t i = 0; i < h->v.n_tokens; i++)
            free(h->tokens[i]);
    if (h->merges)
        for (uint64_t i = 0; i < h->v.n_merges; i++)
            free(h->merges[i]);
    free(h->tokens);
    free(h->lens);
    free(h->types);
    free(h->merges);
    free(h->mlens);
    free(h->chat_template);
    cJSON_Delete(h->json);
    cJSON_Delete(h->config);
}

static char *read_text(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    if (fseek(f, 0, SEEK_END) == 0) {
        long n = ftell(f);
        if (n >= 0 && fseek(f, 0, SEEK_SET) == 0 && (buf = malloc((size_t)n + 1))) {
            if (fread(buf, 1, (size_t)n, f) != (size_t)n) {
                free(buf);
                buf = NULL;
            } else {
                buf[n] = 0;
                *len = (size_t)n;
            }
        }
    }
    fclose(f);
    return buf;
}

static char *dup_str(const char *s)
{
    size_t n = strlen(s);
    char *p = malloc(n + 1);
    if (p)
        memcpy(p, s, n + 1);
    return p;
}

/* Id of the token whose text is s, or -1. */
static int32_t find_id(const struct hf_vocab *h, const char *s)
{
    for (uint64_t i = h->v.n_tokens; i-- > 0;)
        if (h->tokens[i] && !strcmp(h->tokens[i], s))
            return (int32_t)i;
    return -1;
}

/* The id named by tokenizer_config.json's field key (a string, or an
 * object with "content"), or -1. */
static int32_t config_token(const struct hf_vocab *h, const char *key)
{
    if (!h->config)
        return -1;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(h->config, key);
    if (cJSON_IsObject(t))
        t = cJSON_GetObjectItemCaseSensitive(t, "content");
    return cJSON_IsString(t) ? find_id(h, t->valuestring) : -1;
}

/* A token id as tokenizer.json writes it: an integer in 0..1e8 (checked
 * before any conversion, which a double out of range would make
 * undefined). */
static bool token_id_ok(const cJSON *v)
{
    return cJSON_IsNumber(v) && v->valuedouble >= 0 && v->valuedouble <= 1e8 &&
           v->valuedouble == floor(v->valuedouble);
}

static int hf_load(const char *path, struct hf_vocab *h, char *err, size_t err_len)
{
    size_t len;
    char *text = read_text(path, &len);
    if (!text) {
        snprintf(err, err_len, "cannot read %s", path);
        return -1;
    }
    h->json = cJSON_ParseWithLength(text, len);
    free(text);
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(h->json, "model");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(h->json, "added_tokens");
    if (!cJSON_IsObject(vocab) || !cJSON_IsArray(merges)) {
        snprintf(err, err_len, "%s is not a BPE tokenizer.json (no model.vocab/model.merges)",
                 path);
        return -1;
    }
    /* ids: the largest of vocab and added tokens */
    double max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab)
    {
        if (!token_id_ok(it)) {
            snprintf(err, err_len, "%s: token '%s' has a bad id (not an integer in 0..1e8)",
                     path, it->string);
            return -1;
        }
        if (it->valuedouble > max_id)
            max_id = it->valuedouble;
    }
    /* an added token's id indexes the same arrays: one past every id
     * counted here was written out of bounds */
    cJSON_ArrayForEach(it, added)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id))
            continue; /* not a token entry; skipped below too */
        if (!token_id_ok(id)) {
            snprintf(err, err_len, "%s: an added token has a bad id (not an integer in 0..1e8)",
                     path);
            return -1;
        }
        if (id->valuedouble > max_id)
            max_id = id->valuedouble;
    }
    if (max_id < 0) {
        snprintf(err, err_len, "%s has no tokens", path);
        return -1;
    }
    uint64_t n = (uint64_t)max_id + 1;
    h->v.n_tokens = n;
    h->tokens = calloc(n, sizeof *h->tokens);
    h->lens = calloc(n, sizeof *h->lens);
    h->types = calloc(n, sizeof *h->types);
    int nm = cJSON_GetArraySize(merges);
    h->v.n_merges = (uint64_t)nm;
    h->merges = calloc((size_t)nm + 1, sizeof *h->merges);
    h->mlens = calloc((size_t)nm + 1, sizeof *h->mlens);
    if (!h->tokens || !h->lens || !h->types || !h->merges || !h->mlens)
        goto nomem;
    cJSON_ArrayForEach(it, vocab)
    {
        uint64_t id = (uint64_t)it->valuedouble;
        free(h->tokens[id]);
        if (!(h->tokens[id] = dup_str(it->string)))
            goto nomem;
        h->types[id] = 1;
    }
    cJSON_ArrayForEach(it, added)
    {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const cJSON *content = cJSON_GetObjectItemCaseSensitive(it, "content");
        const cJSON *special = cJSON_GetObjectItemCaseSensitive(it, "special");
        if (!cJSON_IsNumber(id) || !cJSON_IsString(content))
            continue;
        uint64_t i = (uint64_t)id->valuedouble;
        free(h->tokens[i]);
        if (!(h->tokens[i] = dup_str(content->valuestring)))
            goto nomem;
        /* control when special or spelled <|...|> (llama.cpp's converter
         * treats those as control whatever the flag says), else user-defined */
        size_t cl = strlen(content->valuestring);
        bool looks = cl >= 4 && !strncmp(content->valuestring, "<|", 2) &&
                     !strcmp(content->valuestring + cl - 2, "|>");
        h->types[i] = cJSON_IsTrue(special) || looks ? 3 : 4;
    }
    for (uint64_t i = 0; i < n; i++) {
        if (!h->tokens[i]) {
            char b[32];
            snprintf(b, sizeof b, "[PAD%llu]", (unsigned long long)i);
            if (!(h->tokens[i] = dup_str(b)))
                goto nomem;
            h->types[i] = 5; /* unused */
        }
        h->lens[i] = strlen(h->tokens[i]);
    }
    int k = 0;
    cJSON_ArrayForEach(it, merges)
    {
        char *m = NULL;
        if (cJSON_IsString(it)) {
            m = dup_str(it->valuestring);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring;
            const char *b = cJSON_GetArrayItem(it, 1)->valuestring;
            if ((m = malloc(strlen(a) + strlen(b) + 2)))
                sprintf(m, "%s %s", a, b);
        } else {
            snprintf(err, err_len, "%s: merge %d is neither \"a b\" nor [a, b]", path, k);
            return -1;
        }
        if (!m)
            goto nomem;
        h->merges[k] = m;
        h->mlens[k] = strlen(m);
        k++;
    }

    /* tokenizer_config.json beside it: special ids and the chat template */
    char cfg[4096];
    const char *slash = strrchr(path, '/');
    snprintf(cfg, sizeof cfg, "%.*stokenizer_config.json", slash ? (int)(slash - path + 1) : 0,
             path);
    char *ctext = read_text(cfg, &len);
    if (ctext) {
        h->config = cJSON_ParseWithLength(ctext, len);
        free(ctext);
        const cJSON *tpl = cJSON_GetObjectItemCaseSensitive(h->config, "chat_template");
        if (cJSON_IsString(tpl) && !(h->chat_template = dup_str(tpl->valuestring)))
            goto nomem;
    }
    h->v.bos_id = config_token(h, "bos_token");
    h->v.eos_id = config_token(h, "eos_token");
    h->v.pad_id = config_token(h, "pad_token");
    if (h->v.bos_id < 0) /* Qwen configs have no bos_token; llama.cpp's converter
                            takes config.json's bos_token_id, <|endoftext|> */
        h->v.bos_id = find_id(h, "<|endoftext|>");
    if (h->v.eos_id < 0)
        h->v.eos_id = find_id(h, "<|endoftext|>");
    h->v.tokens = (const char *const *)h->tokens;
    h->v.token_lens = h->lens;
    h->v.token_types = h->types;
    h->v.merges = (const char *const *)h->merges;
    h->v.merge_lens = h->mlens;
    h->v.pre = "qwen2";
    h->v.chat_template = h->chat_template;
    return 0;
nomem:
    snprintf(err, err_len, "out of memory reading %s", path);
    return -1;
}

/* ---- command ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: minfer synth [--arch qwen2|qwen3|llama|gemma3|qwen3moe]\n"
            "                    --shape NAME|custom:k=v,... --type TYPE\n"
            "                    -o FILE [--tokenizer FILE] [--seed S] [--threads N] [--pure]\n"
            "  --arch    inferred from a named --shape (qwen2.5-* is qwen2, gemma3-* gemma3...);\n"
            "            required with custom:\n"
            "  --shape   qwen2: qwen2.5-0.5b qwen2.5-1.5b qwen2.5-3b qwen2.5-7b\n"
            "            qwen3: qwen3-0.6b qwen3-1.7b qwen3-4b qwen3-8b\n"
            "            llama: llama3.2-1b llama3.1-8b mistral-7b\n"
            "            gemma3: gemma3-1b gemma3-4b    qwen3moe: qwen3-30b-a3b\n"
            "            custom:n_embd=N,n_layer=N,n_head=N,n_head_kv=N,head_dim=N,n_ff=N,\n"
            "                   n_vocab=N,n_ctx=N,rope_theta=X,rms_eps=X,tied=0|1,\n"
            "                   n_expert=N,n_expert_used=N,n_ff_exp=N,sliding_window=N,spm=0|1\n"
            "  --type    as minfer quantize: F32 F16 BF16 Q8_0 Q4_0 Q4_1 Q5_0 Q5_1 Q4_K Q5_K\n"
            "            Q6_K Q4_K_M Q4_K_S Q5_K_M Q5_K_S (mixes pick per-tensor types)\n"
            "  --tokenizer  a .gguf (its tokenizer.* keys are copied) or a Hugging Face\n"
            "            tokenizer.json (tokenizer_config.json beside it is read too);\n"
            "            default: built in, byte-level BPE with Qwen's special tokens, or\n"
            "            SentencePiece for mistral-7b and gemma3 (spm=1)\n");
    cli_print_options(f, CMD_SYNTH);
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static bool ends_with(const char *s, const char *suf)
{
    size_t a = strlen(s), b = strlen(suf);
    return a >= b && !strcmp(s + a - b, suf);
}

int cmd_synth(int argc, char **argv)
{
    const char *arch = NULL, *shape = NULL, *type = NULL, *out = NULL, *tok = NULL;
    struct minfer_synth_opts o = {.struct_size = sizeof o, .seed = 1};
    struct cli_args a = {"synth", CMD_SYNTH, argc, argv, 1, "", false};
    const char *v;
    for (int id; (id = cli_next(&a, &v)) != CLI_END;) {
        switch (id) {
        case OPT_HELP: usage(stdout); return cli_stdout_done("synth");
        case OPT_PURE: o.pure = true; break;
        case OPT_ARCH: arch = v; break;
        case OPT_SHAPE: shape = v; break;
        case OPT_TYPE: type = v; break;
        case OPT_OUT: out = v; break;
        case OPT_TOKENIZER: tok = v; break;
        case OPT_SYNTH_SEED:
            if (!cli_num_u64("synth", a.opt, v, &o.seed))
                return 2;
            break;
        case OPT_THREADS:
            if (!cli_num_i32("synth", a.opt, v, 1, 4096, &o.n_threads))
                return 2;
            cli_check_threads("synth", o.n_threads);
            break;
        case CLI_POSITIONAL: return cli_usage_error("synth", "unexpected argument '%s'", v);
        default: return 2;
        }
    }
    if (!shape || !type || !out)
        return cli_usage_error("synth", "--shape, --type and -o are required");
    if (!arch && !(arch = cli_arch_of_shape(shape)))
        return cli_usage_error("synth", "--shape '%s' names no known model; give --arch", shape);
    char err[1024];
    if (minfer_synth_shape_parse(arch, shape, &o.shape, err, sizeof err) != MINFER_OK)
        return cli_usage_error("synth", "%s", err);
    if (!minfer_ftype_from_name(type, &o.ftype))
        return cli_usage_error("synth", "unknown --type '%s'", type);
    struct hf_vocab hf = {0};
    if (tok && ends_with(tok, ".json")) {
        if (hf_load(tok, &hf, err, sizeof err)) {
            fprintf(stderr, "minfer synth: tokenizer: %s\n", err);
            hf_free(&hf);
            return 1;
        }
        o.vocab = &hf.v;
    } else if (tok) {
        o.tokenizer_gguf = tok;
    }
    o.progress = cli_progress;
    o.progress_user = "synth";
    o.cancel = cli_catch_interrupt();
    double t0 = now_s();
    minfer_status st = minfer_synth(&o, out, NULL, NULL, err, sizeof err);
    hf_free(&hf);
    if (st != MINFER_OK) {
        if (*o.cancel) {
            fprintf(stderr, "\nminfer synth: interrupted; no file was written\n");
            return 130;
        }
        fprintf(stderr, "minfer synth: %s\n", err[0] ? err : minfer_status_str(st));
        return 1;
    }
    fprintf(stderr, "minfer synth: wrote %s (%s %s, %s) in %.2fs\n", out, arch, o.shape.name,
            minfer_ftype_name(o.ftype), now_s() - t0);
    return 0;
}
