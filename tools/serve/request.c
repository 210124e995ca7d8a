/*
 * request.c — parses the JSON bodies of /v1/chat/completions and
 * /v1/completions into struct serve_params. Every field the OpenAI API
 * defines that minfer does not implement is refused by name (a client must
 * never believe `tools` or `n: 4` took effect); unknown fields are refused
 * too. Needs no model, so tests/fuzz/fuzz-serve-request.c fuzzes it.
 */
#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "serve.h"

/* ---- buffers and errors ---- */

void sbuf_add(struct sbuf *b, const void *s, size_t n)
{
    if (b->oom)
        return;
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        char *np = realloc(b->p, cap);
        if (!np) {
            b->oom = true;
            return;
        }
        b->p = np;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

void sbuf_str(struct sbuf *b, const char *s)
{
    sbuf_add(b, s, strlen(s));
}

void sbuf_free(struct sbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof *b);
}

void serve_err_set(struct serve_err *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...)
{
    e->status = status;
    e->type = type;
    e->code = code;
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
}

char *serve_err_json(const struct serve_err *e)
{
    cJSON *j = cJSON_CreateObject();
    cJSON *o = cJSON_AddObjectToObject(j, "error");
    cJSON_AddStringToObject(o, "message", e->message);
    cJSON_AddStringToObject(o, "type", e->type ? e->type : "server_error");
    if (e->param[0])
        cJSON_AddStringToObject(o, "param", e->param);
    else
        cJSON_AddNullToObject(o, "param");
    if (e->code)
        cJSON_AddStringToObject(o, "code", e->code);
    else
        cJSON_AddNullToObject(o, "code");
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    return s;
}

#define BAD(...) (serve_err_set(e, 400, "invalid_request_error", NULL, __VA_ARGS__), -1)

/* ---- field readers ---- */

static int get_number(const cJSON *v, const char *name, double lo, double hi, double *out,
                      struct serve_err *e)
{
    if (!cJSON_IsNumber(v))
        return BAD(name, "'%s' must be a number", name);
    double x = v->valuedouble;
    if (!isfinite(x) || x < lo || x > hi)
        return BAD(name, "'%s' is %g but must be between %g and %g", name, x, lo, hi);
    *out = x;
    return 0;
}

/* An integral number in [lo, hi], as the double JSON gave. */
static int get_integral(const cJSON *v, const char *name, double lo, double hi, double *out,
                        struct serve_err *e)
{
    if (!cJSON_IsNumber(v))
        return BAD(name, "'%s' must be an integer", name);
    if (v->valuedouble != floor(v->valuedouble))
        return BAD(name, "'%s' is %g but must be an integer", name, v->valuedouble);
    return get_number(v, name, lo, hi, out, e);
}

/* hi no more than 9.2e18: a double past INT64_MAX has no int64_t value
 * (converting it is undefined behaviour). */
static int get_int(const cJSON *v, const char *name, double lo, double hi, int64_t *out,
                   struct serve_err *e)
{
    double x;
    if (get_integral(v, name, lo, hi, &x, e))
        return -1;
    *out = (int64_t)x;
    return 0;
}

/* A seed: any integer of the signed or the unsigned 64-bit range (clients
 * send either); a negative one wraps to its two's complement. Converted
 * through the range it lies in: the fuzzer found 1.28e19, past INT64_MAX,
 * going through int64_t. */
static int get_seed(const cJSON *v, const char *name, uint64_t *out, struct serve_err *e)
{
    double x;
    if (get_integral(v, name, -9.2e18, 1.8e19, &x, e))
        return -1;
    *out = x < 0 ? (uint64_t)(int64_t)x : (uint64_t)x;
    return 0;
}

static int get_bool(const cJSON *v, const char *name, bool *out, struct serve_err *e)
{
    if (!cJSON_IsBool(v))
        return BAD(name, "'%s' must be true or false", name);
    *out = cJSON_IsTrue(v);
    return 0;
}

/* Text of a message's content: a string, or an array of {"type":"text",
 * "text":...} parts joined. *out is malloc'd. */
static int content_text(const cJSON *c, size_t i, char **out, struct serve_err *e)
{
    char name[48];
    snprintf(name, sizeof name, "messages[%zu].content", i);
    if (cJSON_IsString(c)) {
        *out = strdup(c->valuestring);
        return *out ? 0 : BAD(name, "out of memory");
    }
    if (cJSON_IsNull(c)) {
        *out = strdup("");
        return *out ? 0 : BAD(name, "out of memory");
    }
    if (!cJSON_IsArray(c))
        return BAD(name, "'%s' must be a string or an array of text parts", name);
    struct sbuf b = {0};
    size_t k = 0;
    for (const cJSON *part = c->child; part; part = part->next, k++) {
        const cJSON *type = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *text = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsObject(part) || !cJSON_IsString(type)) {
            sbuf_free(&b);
            return BAD(name, "%s[%zu] must be an object with a 'type'", name, k);
        }
        if (strcmp(type->valuestring, "text") != 0) {
            sbuf_free(&b);
            return BAD(name, "%s[%zu] has type '%.40s'; only 'text' parts are supported", name,
                       k, type->valuestring);
        }
        if (!cJSON_IsString(text)) {
            sbuf_free(&b);
            return BAD(name, "%s[%zu].text must be a string", name, k);
        }
        sbuf_str(&b, text->valuestring);
    }
    if (!b.p)
        sbuf_add(&b, "", 0);
    if (b.oom) {
        sbuf_free(&b);
        return BAD(name, "out of memory");
    }
    *out = b.p;
    return 0;
}

static int parse_messages(const cJSON *m, struct serve_params *p, struct serve_err *e)
{
    if (!cJSON_IsArray(m))
        return BAD("messages", "'messages' must be an array of {role, content} objects");
    size_t n = (size_t)cJSON_GetArraySize(m);
    if (n == 0)
        return BAD("messages", "'messages' is empty; at least one message is needed");
    p->msgs = calloc(n, sizeof *p->msgs);
    if (!p->msgs)
        return BAD("messages", "out of memory");
    size_t i = 0;
    for (const cJSON *msg = m->child; msg; msg = msg->next, i++) {
        char name[48];
        snprintf(name, sizeof name, "messages[%zu].role", i);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(msg, "role");
        if (!cJSON_IsObject(msg) || !cJSON_IsString(role))
            return BAD(name, "messages[%zu] must be an object with a string 'role'", i);
        const char *r = role->valuestring;
        if (strcmp(r, "system") && strcmp(r, "user") && strcmp(r, "assistant") &&
            strcmp(r, "developer"))
            return BAD(name, "messages[%zu].role is '%.40s'; expected system, user or assistant",
                       i, r);
        for (const cJSON *f = msg->child; f; f = f->next)
            if (strcmp(f->string, "role") && strcmp(f->string, "content") &&
                strcmp(f->string, "name")) {
                snprintf(name, sizeof name, "messages[%zu].%.20s", i, f->string);
                return BAD(name, "'%s' is not supported", name);
            }
        char *text = NULL;
        if (content_text(cJSON_GetObjectItemCaseSensitive(msg, "content"), i, &text, e))
            return -1;
        p->msgs[i].role = strcmp(r, "developer") ? r : "system";
        p->msgs[i].content = text;
        p->n_msgs = i + 1;
    }
    return 0;
}

/* prompt: a string, a list of token ids, a list of strings, or a list of
 * lists of ids (one choice each). */
static int parse_prompt(const cJSON *v, struct serve_params *p, struct serve_err *e)
{
    if (cJSON_IsString(v)) {
        p->n_prompts = 1;
    } else if (cJSON_IsArray(v) && cJSON_GetArraySize(v) > 0) {
        p->n_prompts = cJSON_IsNumber(v->child) ? 1 : (size_t)cJSON_GetArraySize(v);
    } else {
        return BAD("prompt", "'prompt' must be a string, a list of token ids or a non-empty "
                             "list of strings");
    }
    if (p->n_prompts > 64)
        return BAD("prompt", "'prompt' lists %zu prompts; at most 64 are served per request",
                   p->n_prompts);
    p->prompt_text = calloc(p->n_prompts, sizeof *p->prompt_text);
    p->prompt_ids = calloc(p->n_prompts, sizeof *p->prompt_ids);
    p->n_prompt_ids = calloc(p->n_prompts, sizeof *p->n_prompt_ids);
    if (!p->prompt_text || !p->prompt_ids || !p->n_prompt_ids)
        return BAD("prompt", "out of memory");
    const cJSON *item = cJSON_IsString(v) || cJSON_IsNumber(v->child) ? v : v->child;
    for (size_t k = 0; k < p->n_prompts; k++, item = item->next) {
        if (cJSON_IsString(item)) {
            p->prompt_text[k] = item->valuestring;
            continue;
        }
        if (!cJSON_IsArray(item) || cJSON_GetArraySize(item) == 0)
            return BAD("prompt", "prompt[%zu] must be a string or a non-empty list of ids", k);
        size_t n = (size_t)cJSON_GetArraySize(item);
        p->prompt_ids[k] = malloc(sizeof(int32_t) * n);
        if (!p->prompt_ids[k])
            return BAD("prompt", "out of memory");
        size_t i = 0;
        for (const cJSON *t = item->child; t; t = t->next, i++) {
            if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) ||
                t->valuedouble < 0 || t->valuedouble > 2147483647.0)
                return BAD("prompt", "prompt token %zu is not a non-negative integer id", i);
            p->prompt_ids[k][i] = (int32_t)t->valuedouble;
        }
        p->n_prompt_ids[k] = n;
    }
    return 0;
}

static int parse_stop(const cJSON *v, struct serve_params *p, struct serve_err *e)
{
    p->n_stop = 0; /* a repeated key: the last one counts, as for every scalar field */
    if (cJSON_IsNull(v))
        return 0;
    if (cJSON_IsString(v)) {
        if (v->valuestring[0])
            p->stop[p->n_stop++] = v->valuestring;
        return 0;
    }
    if (!cJSON_IsArray(v))
        return BAD("stop", "'stop' must be a string or a list of strings");
    if (cJSON_GetArraySize(v) > SERVE_MAX_STOP)
        return BAD("stop", "'stop' has %d strings; at most %d are allowed", cJSON_GetArraySize(v),
                   SERVE_MAX_STOP);
    for (const cJSON *s = v->child; s; s = s->next) {
        if (!cJSON_IsString(s))
            return BAD("stop", "'stop' must be a string or a list of strings");
        if (s->valuestring[0])
            p->stop[p->n_stop++] = s->valuestring;
    }
    return 0;
}

/* ---- the body ---- */

/* Fields both routes read; the rest is per route. */
static int parse_field(const cJSON *f, struct serve_params *p, struct serve_err *e)
{
    const char *k = f->string;
    double x;
    int64_t i;
    if (!strcmp(k, "model") || !strcmp(k, "user")) {
        if (!cJSON_IsString(f) && !cJSON_IsNull(f))
            return BAD(k, "'%s' must be a string", k);
        return 0;
    }
    if (!strcmp(k, "max_tokens") || !strcmp(k, "max_completion_tokens")) {
        if (cJSON_IsNull(f))
            return 0;
        if (get_int(f, k, -1e18, 1e18, &i, e))
            return -1;
        if (i < 0)
            return BAD(k, "'%s' is %lld; it must be 0 or more", k, (long long)i);
        p->max_tokens = i > INT32_MAX ? INT32_MAX : (int32_t)i;
        return 0;
    }
    if (!strcmp(k, "temperature")) {
        if (get_number(f, k, 0, 2, &x, e))
            return -1;
        p->sp.temperature = (float)x;
        return 0;
    }
    if (!strcmp(k, "top_p")) {
        if (get_number(f, k, 0, 1, &x, e))
            return -1;
        p->sp.top_p = (float)x;
        return 0;
    }
    if (!strcmp(k, "min_p")) {
        if (get_number(f, k, 0, 1, &x, e))
            return -1;
        p->sp.min_p = (float)x;
        return 0;
    }
    if (!strcmp(k, "top_k")) {
        if (get_int(f, k, 0, 1e9, &i, e))
            return -1;
        p->sp.top_k = (int32_t)i;
        return 0;
    }
    if (!strcmp(k, "seed")) {
        if (cJSON_IsNull(f))
            return 0;
        if (get_seed(f, k, &p->sp.seed, e))
            return -1;
        p->seed_set = true;
        return 0;
    }
    if (!strcmp(k, "presence_penalty") || !strcmp(k, "frequency_penalty")) {
        if (get_number(f, k, -2, 2, &x, e))
            return -1;
        if (k[0] == 'p')
            p->sp.presence_penalty = (float)x;
        else
            p->sp.frequency_penalty = (float)x;
        return 0;
    }
    if (!strcmp(k, "repeat_penalty")) {
        if (get_number(f, k, 0.01, 10, &x, e))
            return -1;
        p->sp.repeat_penalty = (float)x;
        return 0;
    }
    if (!strcmp(k, "stop"))
        return parse_stop(f, p, e);
    if (!strcmp(k, "stream"))
        return cJSON_IsNull(f) ? 0 : get_bool(f, k, &p->stream, e);
    if (!strcmp(k, "ignore_eos"))
        return get_bool(f, k, &p->ignore_eos, e);
    if (!strcmp(k, "stream_options")) {
        if (cJSON_IsNull(f))
            return 0;
        if (!cJSON_IsObject(f))
            return BAD(k, "'stream_options' must be an object");
        for (const cJSON *o = f->child; o; o = o->next) {
            if (strcmp(o->string, "include_usage"))
                return BAD("stream_options", "'stream_options.%.40s' is not supported",
                           o->string);
            if (get_bool(o, "stream_options.include_usage", &p->include_usage, e))
                return -1;
        }
        return 0;
    }
    if (!strcmp(k, "n")) {
        if (get_int(f, k, -1e9, 1e9, &i, e))
            return -1;
        if (i != 1)
            return BAD(k, "'n' is %lld; minfer serves one choice per prompt (n = 1)",
                       (long long)i);
        return 0;
    }
    if (!strcmp(k, "top_logprobs")) {
        if (get_int(f, k, 0, SERVE_MAX_TOP_LOGPROBS, &i, e))
            return -1;
        p->top_logprobs = (int32_t)i;
        return 0;
    }
    if (!strcmp(k, "response_format")) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(f, "type");
        if (cJSON_IsObject(f) && cJSON_IsString(t) && !strcmp(t->valuestring, "text") &&
            cJSON_GetArraySize(f) == 1)
            return 0;
        return BAD(k, "'response_format' other than {\"type\": \"text\"} is not supported");
    }
    return BAD(k, "'%.60s' is not supported by this server", k);
}

int serve_parse_request(enum serve_kind kind, const char *body, size_t len,
                        struct serve_params *p, struct serve_err *e)
{
    memset(p, 0, sizeof *p);
    p->kind = kind;
    p->sp = minfer_sampler_default_params();
    p->max_tokens = -1;
    p->root = cJSON_ParseWithLength(body, len);
    if (!p->root) {
        const char *at = cJSON_GetErrorPtr();
        size_t off = at && at >= body && at <= body + len ? (size_t)(at - body) : 0;
        (void)BAD(NULL, "the body is not valid JSON (error near byte %zu of %zu)", off, len);
        goto fail;
    }
    if (!cJSON_IsObject(p->root)) {
        (void)BAD(NULL, "the body must be a JSON object");
        goto fail;
    }
    bool have_main = false;
    for (const cJSON *f = p->root->child; f; f = f->next) {
        const char *k = f->string;
        if (have_main && (!strcmp(k, "messages") || !strcmp(k, "prompt"))) {
            (void)BAD(k, "'%s' appears twice in the body", k);
            goto fail;
        }
        if (kind == SERVE_CHAT && !strcmp(k, "messages")) {
            if (parse_messages(f, p, e))
                goto fail;
            have_main = true;
        } else if (kind == SERVE_CHAT && !strcmp(k, "logprobs")) {
            if (!cJSON_IsNull(f) && get_bool(f, k, &p->logprobs, e))
                goto fail;
        } else if (kind == SERVE_CHAT && (!strcmp(k, "enable_thinking") ||
                                          !strcmp(k, "chat_template_kwargs"))) {
            const cJSON *v = f;
            if (cJSON_IsObject(f)) { /* vLLM/llama-server's spelling */
                v = cJSON_GetObjectItemCaseSensitive(f, "enable_thinking");
                if (!v || cJSON_GetArraySize(f) != 1) {
                    (void)BAD(k, "'chat_template_kwargs' supports only 'enable_thinking'");
                    goto fail;
                }
            }
            bool on;
            if (get_bool(v, "enable_thinking", &on, e))
                goto fail;
            p->enable_thinking = on ? 1 : -1;
        } else if (kind == SERVE_COMPLETION && !strcmp(k, "prompt")) {
            if (parse_prompt(f, p, e))
                goto fail;
            have_main = true;
        } else if (kind == SERVE_COMPLETION && !strcmp(k, "logprobs")) {
            int64_t i;
            if (!cJSON_IsNull(f)) {
                if (get_int(f, k, 0, 5, &i, e))
                    goto fail;
                p->logprobs = true;
                p->top_logprobs = (int32_t)i;
            }
        } else if (kind == SERVE_COMPLETION && !strcmp(k, "echo")) {
            if (get_bool(f, k, &p->echo, e))
                goto fail;
            if (p->echo) {
                (void)BAD(k, "'echo' is not supported");
                goto fail;
            }
        } else if (kind == SERVE_COMPLETION && !strcmp(k, "top_logprobs")) {
            (void)BAD(k, "'top_logprobs' is a chat field; /v1/completions takes 'logprobs': N");
            goto fail;
        } else if (parse_field(f, p, e)) {
            goto fail;
        }
    }
    if (!have_main) {
        const char *name = kind == SERVE_CHAT ? "messages" : "prompt";
        (void)BAD(name, "'%s' is required", name);
        goto fail;
    }
    if (p->top_logprobs > 0 && !p->logprobs) {
        (void)BAD("top_logprobs", "'top_logprobs' needs 'logprobs': true");
        goto fail;
    }
    if (p->include_usage && !p->stream) {
        (void)BAD("stream_options", "'stream_options' needs 'stream': true");
        goto fail;
    }
    return 0;
fail:
    serve_params_free(p);
    return -1;
}

void serve_params_free(struct serve_params *p)
{
    for (size_t i = 0; i < p->n_msgs; i++)
        free((char *)p->msgs[i].content);
    free(p->msgs);
    if (p->prompt_ids)
        for (size_t i = 0; i < p->n_prompts; i++)
            free(p->prompt_ids[i]);
    free(p->prompt_ids);
    free(p->prompt_text);
    free(p->n_prompt_ids);
    cJSON_Delete(p->root);
    memset(p, 0, sizeof *p);
}
