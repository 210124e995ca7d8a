/*
 * chat.c — chat templates without a Jinja engine: recognises a GGUF's
 * tokenizer.chat_template as a known format by its markers and renders
 * messages in that format. ChatML as Qwen uses it:
 *   <|im_start|>system\n...<|im_end|>\n<|im_start|>user\n...<|im_end|>\n
 *   ...<|im_start|>assistant\n            (generation prompt)
 * with two variants read from the template text: a default system prompt
 * (Qwen2/2.5 add one when the first message is not "system") and Qwen3's
 * handling of <think> blocks in assistant turns. Also Llama 3's header
 * format and Gemma's turns, as llama.cpp's built-in renderers write them
 * (contents trimmed; no BOS, which the caller adds as the tokenizer says).
 */
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/error.h"
#include "tokenizer.h"

/* ---- recognising templates ---- */

static const char *find(const char *h, size_t hn, const char *needle)
{
    size_t nn = strlen(needle);
    if (nn > hn)
        return NULL;
    for (size_t i = 0; i + nn <= hn; i++)
        if (h[i] == needle[0] && !memcmp(h + i, needle, nn))
            return h + i;
    return NULL;
}

enum minfer_chat_format minfer_chat_detect(const char *tmpl, size_t len)
{
    if (!tmpl)
        return MINFER_CHAT_UNKNOWN;
    if (find(tmpl, len, "<|im_start|>") && find(tmpl, len, "<|im_end|>"))
        return MINFER_CHAT_CHATML;
    if (find(tmpl, len, "<|start_header_id|>") && find(tmpl, len, "<|end_header_id|>"))
        return MINFER_CHAT_LLAMA3;
    if (find(tmpl, len, "<start_of_turn>") && find(tmpl, len, "<end_of_turn>"))
        return MINFER_CHAT_GEMMA;
    return MINFER_CHAT_UNKNOWN;
}

/* A literal default system prompt: "<|im_start|>system" and a newline
 * (a Jinja escape, backslash-n, or a real newline), followed inside the
 * same string literal by text up to "<|im_end|>". Jinja escapes are
 * undone. NULL when the template has none. */
static char *default_system(const char *t, size_t n)
{
    static const char head[] = "<|im_start|>system";
    const char *p = t, *end = t + n;
    while ((p = find(p, (size_t)(end - p), head))) {
        p += sizeof head - 1;
        if (end - p >= 2 && p[0] == '\\' && p[1] == 'n')
            p += 2;
        else if (p < end && *p == '\n')
            p++;
        else
            continue;
        if (p >= end || *p == '\'' || *p == '"')
            continue; /* the system message's own content follows */
        const char *q = find(p, (size_t)(end - p), "<|im_end|>");
        if (!q)
            return NULL;
        char *s = malloc((size_t)(q - p) + 1);
        if (!s)
            return NULL;
        size_t o = 0;
        for (const char *c = p; c < q; c++) {
            if (*c == '\\' && c + 1 < q) {
                c++;
                s[o++] = *c == 'n' ? '\n' : *c == 't' ? '\t' : *c;
            } else {
                s[o++] = *c;
            }
        }
        s[o] = 0;
        return s;
    }
    return NULL;
}

minfer_status tok_chat_init(struct minfer_tokenizer *tok)
{
    tok->chat_format = MINFER_CHAT_UNKNOWN;
    if (!tok->chat_template)
        return MINFER_OK;
    const char *t = tok->chat_template;
    size_t n = tok->chat_template_len;
    tok->chat_format = minfer_chat_detect(t, n);
    if (tok->chat_format != MINFER_CHAT_CHATML)
        return MINFER_OK;
    tok->chat_think = find(t, n, "</think>") && find(t, n, "reasoning_content");
    /* NULL is fine: no default (a failed allocation is not worth failing a load) */
    tok->chat_default_system = default_system(t, n);
    return MINFER_OK;
}

enum minfer_chat_format minfer_tokenizer_chat_format(const struct minfer_tokenizer *tok)
{
    return (enum minfer_chat_format)tok->chat_format;
}

const char *minfer_tokenizer_chat_template(const struct minfer_tokenizer *tok, size_t *len)
{
    if (len)
        *len = tok->chat_template ? tok->chat_template_len : 0;
    return tok->chat_template;
}

static const char *const format_names[] = {"unknown", "chatml", "llama3", "gemma"};

const char *minfer_chat_format_name(enum minfer_chat_format f)
{
    return (unsigned)f < sizeof format_names / sizeof format_names[0] ? format_names[f]
                                                                        : "unknown";
}

bool minfer_chat_format_from_name(const char *name, enum minfer_chat_format *f)
{
    for (size_t i = 1; name && i < sizeof format_names / sizeof format_names[0]; i++)
        if (!strcmp(name, format_names[i])) {
            *f = (enum minfer_chat_format)i;
            return true;
        }
    return false;
}

/* ---- rendering ---- */

struct out {
    char *p;
    size_t cap, n;
};

static void put(struct out *o, const char *s, size_t n)
{
    if (o->n < o->cap) {
        size_t m = o->cap - o->n < n ? o->cap - o->n : n;
        memcpy(o->p + o->n, s, m);
    }
    o->n += n;
}

static void puts_(struct out *o, const char *s) { put(o, s, strlen(s)); }

static bool starts(const char *s, size_t n, const char *pre)
{
    size_t k = strlen(pre);
    return n >= k && !memcmp(s, pre, k);
}

static bool ends(const char *s, size_t n, const char *suf)
{
    size_t k = strlen(suf);
    return n >= k && !memcmp(s + n - k, suf, k);
}

static bool is_tool_response(const char *c)
{
    size_t n = strlen(c);
    return starts(c, n, "<tool_response>") && ends(c, n, "</tool_response>");
}

/* Last occurrence of needle in s[n], or NULL. */
static const char *rfind(const char *s, size_t n, const char *needle)
{
    size_t k = strlen(needle);
    for (size_t i = n >= k ? n - k + 1 : 0; i-- > 0;)
        if (!memcmp(s + i, needle, k))
            return s + i;
    return NULL;
}

/* Qwen3's assistant turn: reasoning split off at </think>; kept only for
 * turns after the last real user query. */
static void assistant_think(struct out *o, const char *c, bool keep_think, bool last)
{
    size_t n = strlen(c);
    const char *content = c, *reason = "";
    size_t cn = n, rn = 0;
    const char *close = find(c, n, "</think>");
    if (close) {
        const char *lc = rfind(c, n, "</think>");
        content = lc + 8;
        cn = (size_t)(c + n - content);
        while (cn && *content == '\n')
            content++, cn--;
        reason = c;
        rn = (size_t)(close - c);
        while (rn && reason[rn - 1] == '\n')
            rn--;
        const char *open = rfind(reason, rn, "<think>");
        if (open) {
            rn -= (size_t)(open + 7 - reason);
            reason = open + 7;
        }
        while (rn && *reason == '\n')
            reason++, rn--;
    }
    puts_(o, "<|im_start|>assistant\n");
    if (keep_think && (last || rn)) {
        while (rn && reason[rn - 1] == '\n') /* strip('\n') both ends */
            rn--;
        puts_(o, "<think>\n");
        put(o, reason, rn);
        puts_(o, "\n</think>\n\n");
        while (cn && *content == '\n')
            content++, cn--;
    }
    put(o, content, cn);
}

/* Finishes a render into o: the length, the NUL when room remains. */
static minfer_status render_done(struct out *o, char *out, size_t cap, size_t *n_out, char *err,
                                 size_t err_len)
{
    *n_out = o->n;
    if (o->n > cap)
        return errf(err, err_len, MINFER_ERR_RANGE, "chat render needs %zu bytes, got %zu", o->n,
                    cap);
    if (o->n < cap)
        out[o->n] = 0;
    return MINFER_OK;
}

/* A message's content without leading and trailing white space (Jinja's trim). */
static void put_trimmed(struct out *o, const char *c)
{
    size_t a = 0, b = strlen(c);
    while (a < b && strchr(" \t\r\n", c[a]))
        a++;
    while (b > a && strchr(" \t\r\n", c[b - 1]))
        b--;
    put(o, c + a, b - a);
}

/* Llama 3 headers and Gemma turns (llama.cpp's renderers of both). */
static minfer_status render_turns(enum minfer_chat_format fmt, const struct minfer_chat_msg *msgs,
                                  size_t n, bool add_generation_prompt, char *out, size_t cap,
                                  size_t *n_out, char *err, size_t err_len)
{
    struct out o = {out, cap, 0};
    bool gemma = fmt == MINFER_CHAT_GEMMA;
    const char *pending_system = NULL; /* Gemma: joins the next user turn */
    for (size_t i = 0; i < n; i++) {
        const char *role = msgs[i].role;
        if (gemma && !strcmp(role, "system")) {
            pending_system = msgs[i].content;
            continue;
        }
        if (gemma) {
            puts_(&o, "<start_of_turn>");
            puts_(&o, !strcmp(role, "assistant") ? "model" : role);
            puts_(&o, "\n");
            if (pending_system && !strcmp(role, "user")) {
                put_trimmed(&o, pending_system);
                puts_(&o, "\n\n");
                pending_system = NULL;
            }
            put_trimmed(&o, msgs[i].content);
            puts_(&o, "<end_of_turn>\n");
        } else {
            puts_(&o, "<|start_header_id|>");
            puts_(&o, role);
            puts_(&o, "<|end_header_id|>\n\n");
            put_trimmed(&o, msgs[i].content);
            puts_(&o, "<|eot_id|>");
        }
    }
    if (add_generation_prompt)
        puts_(&o, gemma ? "<start_of_turn>model\n"
                        : "<|start_header_id|>assistant<|end_header_id|>\n\n");
    return render_done(&o, out, cap, n_out, err, err_len);
}

minfer_status minfer_chat_render(const struct minfer_tokenizer *tok, enum minfer_chat_format fmt,
                                 const struct minfer_chat_msg *msgs, size_t n,
                                 bool add_generation_prompt, char *out, size_t cap,
                                 size_t *n_out, char *err, size_t err_len)
{
    struct minfer_chat_opts o = {sizeof o, add_generation_prompt, 0};
    return minfer_chat_render_opts(tok, fmt, msgs, n, &o, out, cap, n_out, err, err_len);
}

minfer_status minfer_chat_render_opts(const struct minfer_tokenizer *tok,
                                      enum minfer_chat_format fmt,
                                      const struct minfer_chat_msg *msgs, size_t n,
                                      const struct minfer_chat_opts *opts, char *out, size_t cap,
                                      size_t *n_out, char *err, size_t err_len)
{
    /* read only the fields the caller's struct has */
    struct minfer_chat_opts opt = {sizeof opt, false, 0};
    if (opts) {
        size_t sz = opts->struct_size < sizeof opt ? opts->struct_size : sizeof opt;
        if (sz < offsetof(struct minfer_chat_opts, add_generation_prompt) + sizeof(bool))
            return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                        "chat options: struct_size %u is too small", opts->struct_size);
        memcpy(&opt, opts, sz);
    }
    bool add_generation_prompt = opt.add_generation_prompt;
    if (n_out)
        *n_out = 0;
    if (!n_out || (!msgs && n) || (!out && cap))
        return errf(err, err_len, MINFER_ERR_INVALID_ARG, "chat render: NULL argument");
    for (size_t i = 0; i < n; i++)
        if (!msgs[i].role || !msgs[i].content)
            return errf(err, err_len, MINFER_ERR_INVALID_ARG,
                        "chat message %zu has a NULL role or content", i);
    bool forced = fmt != MINFER_CHAT_UNKNOWN;
    if (!forced) {
        fmt = tok ? (enum minfer_chat_format)tok->chat_format : MINFER_CHAT_UNKNOWN;
        if (fmt == MINFER_CHAT_UNKNOWN)
            return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                        "%s; force a format (e.g. chatml) to render anyway",
                        !tok || !tok->chat_template
                            ? "the model has no chat template (tokenizer.chat_template)"
                            : "the model's chat template is not one this build recognises "
                              "(known: chatml, llama3, gemma)");
    }
    if (fmt == MINFER_CHAT_LLAMA3 || fmt == MINFER_CHAT_GEMMA)
        return render_turns(fmt, msgs, n, add_generation_prompt, out, cap, n_out, err, err_len);
    if (fmt != MINFER_CHAT_CHATML)
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED, "chat format %d is not supported",
                    (int)fmt);
    /* variant details come from the model's template only when it is ChatML */
    bool own = tok && tok->chat_format == MINFER_CHAT_CHATML;
    const char *defsys = own ? tok->chat_default_system : NULL;
    bool think = own && tok->chat_think;
    bool no_think = opt.enable_thinking < 0;

    struct out o = {out, cap, 0};
    size_t last_query = n ? n - 1 : 0;
    for (size_t i = n; i-- > 0;)
        if (!strcmp(msgs[i].role, "user") && !is_tool_response(msgs[i].content)) {
            last_query = i;
            break;
        }
    size_t i = 0;
    if (n && !strcmp(msgs[0].role, "system")) {
        puts_(&o, "<|im_start|>system\n");
        puts_(&o, msgs[0].content);
        puts_(&o, "<|im_end|>\n");
        i = 1;
    } else if (defsys) {
        puts_(&o, "<|im_start|>system\n");
        puts_(&o, defsys);
        puts_(&o, "<|im_end|>\n");
    }
    for (; i < n; i++) {
        const char *role = msgs[i].role, *c = msgs[i].content;
        if (!strcmp(role, "assistant") && think) {
            assistant_think(&o, c, i > last_query, i + 1 == n);
            puts_(&o, "<|im_end|>\n");
        } else if (!strcmp(role, "tool")) {
            if (i == 0 || strcmp(msgs[i - 1].role, "tool"))
                puts_(&o, "<|im_start|>user");
            puts_(&o, "\n<tool_response>\n");
            puts_(&o, c);
            puts_(&o, "\n</tool_response>");
            if (i + 1 == n || strcmp(msgs[i + 1].role, "tool"))
                puts_(&o, "<|im_end|>\n");
        } else {
            puts_(&o, "<|im_start|>");
            puts_(&o, role);
            puts_(&o, "\n");
            puts_(&o, c);
            puts_(&o, "<|im_end|>\n");
        }
    }
    if (add_generation_prompt) {
        puts_(&o, "<|im_start|>assistant\n");
        if (think && no_think)
            puts_(&o, "<think>\n\n</think>\n\n");
    }
    return render_done(&o, out, cap, n_out, err, err_len);
}

/* ---- reading rendered text back ---- */

minfer_status minfer_chat_parse(enum minfer_chat_format fmt, const char *text, size_t len,
                                minfer_chat_msg_fn fn, void *user, char *err, size_t err_len)
{
    if ((!text && len) || !fn)
        return errf(err, err_len, MINFER_ERR_INVALID_ARG, "chat parse: NULL argument");
    /* a turn: start marker, role up to role_end, content from after sep up
     * to the end marker (or the end of the text: an unterminated turn) */
    const char *start, *role_end, *sep, *end;
    switch (fmt) {
    case MINFER_CHAT_CHATML:
        start = "<|im_start|>", role_end = "\n", sep = "", end = "<|im_end|>";
        break;
    case MINFER_CHAT_LLAMA3:
        start = "<|start_header_id|>", role_end = "<|end_header_id|>", sep = "\n\n",
        end = "<|eot_id|>";
        break;
    case MINFER_CHAT_GEMMA:
        start = "<start_of_turn>", role_end = "\n", sep = "", end = "<end_of_turn>";
        break;
    default:
        return errf(err, err_len, MINFER_ERR_UNSUPPORTED,
                    "chat parse: format %d is not one this build reads (known: chatml, llama3, "
                    "gemma)", (int)fmt);
    }
    static const char *const roles[] = {"system", "user", "assistant", "tool"};
    const char *stop_at = text + len;
    for (const char *p = find(text, len, start); p;) {
        p += strlen(start);
        const char *re = find(p, (size_t)(stop_at - p), role_end);
        if (!re)
            break; /* a header cut short: nothing of this turn is content yet */
        size_t rl = (size_t)(re - p);
        const char *body = re + strlen(role_end);
        if (starts(body, (size_t)(stop_at - body), sep))
            body += strlen(sep);
        const char *stop = find(body, (size_t)(stop_at - body), end);
        size_t bl = stop ? (size_t)(stop - body) : (size_t)(stop_at - body);
        const char *r = NULL;
        if (fmt == MINFER_CHAT_GEMMA && rl == 5 && !memcmp(p, "model", 5))
            r = roles[2];
        for (size_t i = 0; i < 4 && !r; i++)
            if (strlen(roles[i]) == rl && !memcmp(p, roles[i], rl))
                r = roles[i];
        /* an unterminated empty turn is a generation prompt, not a message */
        if (r && (stop || bl) && fn(r, body, bl, !!stop, user))
            return errf(err, err_len, MINFER_ERR_STATE, "chat parse: stopped by the callback");
        p = stop ? find(stop, (size_t)(stop_at - stop), start) : NULL;
    }
    return MINFER_OK;
}
