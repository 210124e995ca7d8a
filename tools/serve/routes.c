/*
 * routes.c — what each route answers: the generation requests (prompt
 * rendering and tokenizing, limits, the OpenAI response and chunk JSON),
 * /v1/models, /tokenize and /detokenize. The HTTP layer (http.c) calls
 * these from its thread; the out_* functions are called by the engine
 * thread with the request's mutex held.
 */
#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include <microhttpd.h>

#include "serve.h"

/* ---- requests ---- */

struct sreq *sreq_new(struct serve_params *p, int n_jobs)
{
    struct sreq *r = calloc(1, sizeof *r);
    struct job *jobs = calloc((size_t)n_jobs, sizeof *jobs);
    if (!r || !jobs) {
        free(r);
        free(jobs);
        return NULL;
    }
    pthread_mutex_init(&r->mu, NULL);
    r->refs = 1;
    r->fd = -1;
    r->p = *p;
    memset(p, 0, sizeof *p);
    r->jobs = jobs;
    r->n_jobs = n_jobs;
    r->created = (long)time(NULL);
    r->t_start_ms = serve_now_ms();
    static unsigned long counter;
    snprintf(r->id, sizeof r->id, "%s-%lx%lx", r->p.kind == SERVE_CHAT ? "chatcmpl" : "cmpl",
             (unsigned long)r->created, __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    for (int i = 0; i < n_jobs; i++) {
        jobs[i].r = r;
        jobs[i].index = i;
        jobs[i].slot = -1;
    }
    return r;
}

void sreq_unref(struct sreq *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->mu);
    int left = --r->refs;
    pthread_mutex_unlock(&r->mu);
    if (left > 0)
        return;
    for (int i = 0; i < r->n_jobs; i++) {
        struct job *j = &r->jobs[i];
        free(j->prompt);
        free(j->gen);
        sbuf_free(&j->text);
        minfer_sampler_free(j->smp);
        minfer_detok_free(j->dt);
        cJSON_Delete(j->logprobs);
    }
    free(r->jobs);
    sbuf_free(&r->out);
    serve_params_free(&r->p);
    pthread_mutex_destroy(&r->mu);
    free(r);
}

bool sreq_client_gone(struct sreq *r)
{
    pthread_mutex_lock(&r->mu);
    if (!r->cancelled && r->conn && r->suspended && r->fd >= 0) {
        char c;
        ssize_t n = recv(r->fd, &c, 1, MSG_PEEK | MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR))
            r->cancelled = true;
    }
    bool gone = r->cancelled;
    pthread_mutex_unlock(&r->mu);
    return gone;
}

void sreq_emit_locked(struct sreq *r, const char *s, size_t n)
{
    if (n)
        sbuf_add(&r->out, s, n);
    if (r->conn && r->suspended) {
        r->suspended = false;
        MHD_resume_connection(r->conn);
    }
}

/* ---- response JSON ---- */

static const char *finish_name(enum finish f)
{
    return f == FINISH_STOP ? "stop" : f == FINISH_LENGTH ? "length" : NULL;
}

static cJSON *base_object(const struct sreq *r, const char *object)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", r->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)r->created);
    cJSON_AddStringToObject(o, "model", g_srv.cfg.model_name);
    return o;
}

static cJSON *usage_json(int64_t prompt, int64_t completion)
{
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", (double)prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", (double)completion);
    cJSON_AddNumberToObject(u, "total_tokens", (double)(prompt + completion));
    return u;
}

/* The legacy completions logprobs object from chat-style entries. */
static cJSON *completion_logprobs(const cJSON *entries, size_t text_offset)
{
    cJSON *o = cJSON_CreateObject();
    cJSON *toks = cJSON_AddArrayToObject(o, "tokens");
    cJSON *lps = cJSON_AddArrayToObject(o, "token_logprobs");
    cJSON *tops = cJSON_AddArrayToObject(o, "top_logprobs");
    cJSON *offs = cJSON_AddArrayToObject(o, "text_offset");
    for (const cJSON *e = entries ? entries->child : NULL; e; e = e->next) {
        const char *t = cJSON_GetObjectItem(e, "token")->valuestring;
        cJSON_AddItemToArray(toks, cJSON_CreateString(t));
        double lp = cJSON_GetObjectItem(e, "logprob")->valuedouble;
        cJSON_AddItemToArray(lps, cJSON_CreateNumber(lp));
        cJSON *m = cJSON_CreateObject();
        for (const cJSON *a = cJSON_GetObjectItem(e, "top_logprobs")->child; a; a = a->next)
            if (!cJSON_GetObjectItem(m, cJSON_GetObjectItem(a, "token")->valuestring))
                cJSON_AddNumberToObject(m, cJSON_GetObjectItem(a, "token")->valuestring,
                                        cJSON_GetObjectItem(a, "logprob")->valuedouble);
        cJSON_AddItemToArray(tops, m);
        cJSON_AddItemToArray(offs, cJSON_CreateNumber((double)text_offset));
        text_offset += strlen(t);
    }
    return o;
}

static cJSON *chat_logprobs(cJSON *entries)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "content", entries ? entries : cJSON_CreateArray());
    return o;
}

static void emit_event(struct sreq *r, cJSON *o)
{
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) {
        r->out.oom = true;
        return;
    }
    sreq_emit_locked(r, "data: ", 6);
    sreq_emit_locked(r, s, strlen(s));
    sreq_emit_locked(r, "\n\n", 2);
    free(s);
}

/* One streamed chunk for choice j: text, logprob entries (taken), finish. */
static void emit_chunk(struct sreq *r, struct job *j, const char *text, size_t n, cJSON *lp,
                       const char *finish)
{
    bool chat = r->p.kind == SERVE_CHAT;
    cJSON *o = base_object(r, chat ? "chat.completion.chunk" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    cJSON *c = cJSON_CreateObject();
    cJSON_AddItemToArray(choices, c);
    cJSON_AddNumberToObject(c, "index", j->index);
    char *t = strndup(text ? text : "", n);
    if (chat) {
        cJSON *d = cJSON_AddObjectToObject(c, "delta");
        if (!j->role_sent) {
            cJSON_AddStringToObject(d, "role", "assistant");
            j->role_sent = true;
        }
        if (n || !finish)
            cJSON_AddStringToObject(d, "content", t ? t : "");
        if (lp)
            cJSON_AddItemToObject(c, "logprobs", chat_logprobs(lp));
        else
            cJSON_AddNullToObject(c, "logprobs");
    } else {
        cJSON_AddStringToObject(c, "text", t ? t : "");
        if (lp) {
            cJSON_AddItemToObject(c, "logprobs", completion_logprobs(lp, j->text_sent));
            cJSON_Delete(lp);
        } else {
            cJSON_AddNullToObject(c, "logprobs");
        }
    }
    free(t);
    if (finish)
        cJSON_AddStringToObject(c, "finish_reason", finish);
    else
        cJSON_AddNullToObject(c, "finish_reason");
    if (r->p.include_usage)
        cJSON_AddNullToObject(o, "usage");
    emit_event(r, o);
}

void out_delta_locked(struct sreq *r, struct job *j, const char *text, size_t n, cJSON *lp)
{
    if (r->cancelled) {
        cJSON_Delete(lp);
        return;
    }
    if (!r->p.stream) { /* the reply is built from j->text at the end */
        if (lp) {
            if (!j->logprobs)
                j->logprobs = cJSON_CreateArray();
            while (lp->child) {
                cJSON *e = cJSON_DetachItemViaPointer(lp, lp->child);
                cJSON_AddItemToArray(j->logprobs, e);
            }
            cJSON_Delete(lp);
        }
        return;
    }
    emit_chunk(r, j, text, n, lp, NULL);
}

static void emit_error_event(struct sreq *r, const char *msg)
{
    struct serve_err e;
    serve_err_set(&e, 500, "server_error", NULL, NULL, "%s", msg);
    char *s = serve_err_json(&e);
    if (s) {
        sreq_emit_locked(r, "data: ", 6);
        sreq_emit_locked(r, s, strlen(s));
        sreq_emit_locked(r, "\n\n", 2);
        free(s);
    }
}

void out_finish_locked(struct sreq *r, struct job *j)
{
    if (r->cancelled || !r->p.stream)
        return;
    if (j->finish == FINISH_ERROR || j->finish == FINISH_CANCEL)
        emit_error_event(r, j->error[0] ? j->error : "generation failed");
    else
        emit_chunk(r, j, NULL, 0, NULL, finish_name(j->finish));
}

void out_complete_locked(struct sreq *r)
{
    if (r->cancelled) {
        r->status = 499; /* nginx's "client closed request", for the log line */
        return;
    }
    if (r->p.stream) {
        if (r->p.include_usage) {
            cJSON *o = base_object(r, r->p.kind == SERVE_CHAT ? "chat.completion.chunk"
                                                               : "text_completion");
            cJSON_AddArrayToObject(o, "choices");
            cJSON_AddItemToObject(o, "usage", usage_json(r->prompt_tokens, r->completion_tokens));
            emit_event(r, o);
        }
        sreq_emit_locked(r, "data: [DONE]\n\n", 14);
        return;
    }
    for (int i = 0; i < r->n_jobs; i++) {
        struct job *j = &r->jobs[i];
        if (j->finish == FINISH_ERROR || j->finish == FINISH_CANCEL) {
            bool shutdown = strstr(j->error, "shutting down") != NULL;
            struct serve_err e;
            serve_err_set(&e, shutdown ? 503 : 500, "server_error", NULL, NULL, "%s",
                          j->error[0] ? j->error : "generation failed");
            char *s = serve_err_json(&e);
            r->status = e.status;
            if (s)
                sreq_emit_locked(r, s, strlen(s));
            free(s);
            return;
        }
    }
    bool chat = r->p.kind == SERVE_CHAT;
    cJSON *o = base_object(r, chat ? "chat.completion" : "text_completion");
    cJSON *choices = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < r->n_jobs; i++) {
        struct job *j = &r->jobs[i];
        cJSON *c = cJSON_CreateObject();
        cJSON_AddItemToArray(choices, c);
        cJSON_AddNumberToObject(c, "index", i);
        const char *text = j->text.p ? j->text.p : "";
        if (chat) {
            cJSON *m = cJSON_AddObjectToObject(c, "message");
            cJSON_AddStringToObject(m, "role", "assistant");
            cJSON_AddStringToObject(m, "content", text);
        } else {
            cJSON_AddStringToObject(c, "text", text);
        }
        if (!r->p.logprobs)
            cJSON_AddNullToObject(c, "logprobs");
        else if (chat)
            cJSON_AddItemToObject(c, "logprobs", chat_logprobs(j->logprobs));
        else {
            cJSON_AddItemToObject(c, "logprobs", completion_logprobs(j->logprobs, 0));
            cJSON_Delete(j->logprobs);
        }
        j->logprobs = NULL;
        cJSON_AddStringToObject(c, "finish_reason", finish_name(j->finish));
    }
    cJSON_AddItemToObject(o, "usage", usage_json(r->prompt_tokens, r->completion_tokens));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    r->status = s ? 200 : 500;
    if (s)
        sreq_emit_locked(r, s, strlen(s));
    free(s);
}

/* ---- generation routes ---- */

/* ids of text (special tokens matched, BOS when the model wants one). */
static int tokenize(const char *text, size_t len, int32_t **ids, int32_t *n, struct serve_err *e,
                    const char *field)
{
    const struct minfer_tokenizer *tok = g_srv.tok;
    size_t need = 0;
    minfer_status st = minfer_tokenize(tok, text, len, true, NULL, 0, &need);
    if (st != MINFER_OK && st != MINFER_ERR_RANGE) {
        serve_err_set(e, 400, "invalid_request_error", NULL, field, "'%s' cannot be tokenized: %s",
                      field, minfer_status_str(st));
        return -1;
    }
    bool bos = minfer_tokenizer_add_bos(tok) && minfer_tokenizer_bos(tok) >= 0;
    *ids = malloc(sizeof **ids * (need + 2));
    if (!*ids) {
        serve_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return -1;
    }
    size_t off = bos ? 1 : 0, got = 0;
    if (bos)
        (*ids)[0] = minfer_tokenizer_bos(tok);
    st = minfer_tokenize(tok, text, len, true, *ids + off, need + 1, &got);
    if (st != MINFER_OK) {
        free(*ids);
        *ids = NULL;
        serve_err_set(e, 500, "server_error", NULL, field, "tokenize: %s", minfer_status_str(st));
        return -1;
    }
    *n = (int32_t)(got + off);
    return 0;
}

static int render_chat(const struct serve_params *p, char **text, size_t *len,
                       struct serve_err *e)
{
    struct minfer_chat_opts co = {
        .struct_size = sizeof co, .add_generation_prompt = true,
        .enable_thinking = p->enable_thinking,
    };
    char err[256] = "";
    size_t need = 0;
    minfer_status st = minfer_chat_render_opts(g_srv.tok, MINFER_CHAT_UNKNOWN, p->msgs, p->n_msgs,
                                               &co, NULL, 0, &need, err, sizeof err);
    char *r = (st == MINFER_OK || st == MINFER_ERR_RANGE) ? malloc(need + 1) : NULL;
    if (r)
        st = minfer_chat_render_opts(g_srv.tok, MINFER_CHAT_UNKNOWN, p->msgs, p->n_msgs, &co, r,
                                     need + 1, &need, err, sizeof err);
    if (!r || st != MINFER_OK) {
        free(r);
        serve_err_set(e, 400, "invalid_request_error", NULL, "messages",
                      "the model's chat template cannot render these messages: %s",
                      err[0] ? err : minfer_status_str(st));
        return -1;
    }
    *text = r;
    *len = need;
    return 0;
}

/* Checks ids against the vocabulary and the per-sequence context. */
static int check_prompt(const int32_t *ids, int32_t n, int32_t max_tokens, size_t k,
                        struct serve_err *e, const char *field)
{
    for (int32_t i = 0; i < n; i++)
        if (ids[i] < 0 || ids[i] >= g_srv.n_vocab) {
            serve_err_set(e, 400, "invalid_request_error", NULL, field,
                          "prompt[%zu] token %d is id %d, outside the vocabulary of %d", k, i,
                          ids[i], g_srv.n_vocab);
            return -1;
        }
    int32_t cap = sched_slot_ctx(g_srv.sched);
    if (n == 0) {
        serve_err_set(e, 400, "invalid_request_error", NULL, field, "the prompt is empty");
        return -1;
    }
    if (n >= cap) {
        serve_err_set(e, 400, "invalid_request_error", "context_length_exceeded", field,
                      "the prompt has %d tokens but a sequence holds at most %d (-c %d over "
                      "--parallel %d) including at least one generated token",
                      n, cap, cap * sched_parallel(g_srv.sched), sched_parallel(g_srv.sched));
        return -1;
    }
    (void)max_tokens;
    return 0;
}

static uint64_t random_seed(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    static uint64_t n;
    return (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)ts.tv_sec ^
           __atomic_add_fetch(&n, 1, __ATOMIC_RELAXED) << 32;
}

static int setup_job(struct job *j, const struct serve_params *p, struct serve_err *e)
{
    struct minfer_sampler_params sp = p->sp;
    if (!p->seed_set)
        sp.seed = random_seed();
    char err[256] = "";
    minfer_status st;
    j->smp = minfer_sampler_new(&sp, g_srv.n_vocab, &st, err, sizeof err);
    j->dt = minfer_detok_new(g_srv.tok, false);
    if (!j->smp || !j->dt) {
        serve_err_set(e, 400, "invalid_request_error", NULL, NULL, "sampling parameters: %s",
                      err[0] ? err : "out of memory");
        return -1;
    }
    for (int32_t i = 0; i < j->n_prompt; i++)
        minfer_sampler_accept(j->smp, j->prompt[i]);
    j->t_enqueue_ms = serve_now_ms();
    return 0;
}

int route_generate(enum serve_kind kind, const char *req, size_t len, struct sreq **out,
                   struct serve_err *e)
{
    struct serve_params p;
    *out = NULL;
    if (serve_parse_request(kind, req, len, &p, e))
        return e->status;
    int n_jobs = kind == SERVE_CHAT ? 1 : (int)p.n_prompts;
    struct sreq *r = sreq_new(&p, n_jobs);
    if (!r) {
        serve_params_free(&p);
        serve_err_set(e, 500, "server_error", NULL, NULL, "out of memory");
        return e->status;
    }
    for (int i = 0; i < n_jobs; i++) {
        struct job *j = &r->jobs[i];
        int rc;
        if (kind == SERVE_CHAT) {
            char *text = NULL;
            size_t tlen = 0;
            rc = render_chat(&r->p, &text, &tlen, e) ||
                 tokenize(text, tlen, &j->prompt, &j->n_prompt, e, "messages");
            free(text);
        } else if (r->p.prompt_text[i]) {
            rc = tokenize(r->p.prompt_text[i], strlen(r->p.prompt_text[i]), &j->prompt,
                          &j->n_prompt, e, "prompt");
        } else {
            j->prompt = r->p.prompt_ids[i];
            j->n_prompt = (int32_t)r->p.n_prompt_ids[i];
            r->p.prompt_ids[i] = NULL;
            rc = 0;
        }
        if (rc || check_prompt(j->prompt, j->n_prompt, r->p.max_tokens, (size_t)i, e,
                               kind == SERVE_CHAT ? "messages" : "prompt") ||
            setup_job(j, &r->p, e)) {
            sreq_unref(r);
            return e->status;
        }
    }
    if (g_srv.cfg.timeout_s > 0)
        r->deadline_ms = r->t_start_ms + g_srv.cfg.timeout_s * 1e3;
    if (r->p.max_tokens == 0) { /* nothing to generate: answer at once */
        for (int i = 0; i < n_jobs; i++) {
            pthread_mutex_lock(&r->mu);
            r->prompt_tokens += r->jobs[i].n_prompt;
            pthread_mutex_unlock(&r->mu);
        }
        pthread_mutex_lock(&r->mu);
        for (int i = 0; i < n_jobs; i++) {
            r->jobs[i].finish = FINISH_LENGTH;
            r->jobs[i].done = true;
            out_finish_locked(r, &r->jobs[i]);
        }
        r->n_done = n_jobs;
        out_complete_locked(r);
        r->finished = true;
        pthread_mutex_unlock(&r->mu);
        *out = r;
        return 200;
    }
    if (sched_submit(g_srv.sched, r)) {
        sreq_unref(r);
        serve_err_set(e, 503, "server_error", "queue_full", NULL,
                      "all %d sequences are busy and the queue holds %d requests (--max-queue); "
                      "retry later", sched_parallel(g_srv.sched), g_srv.cfg.max_queue);
        return 503;
    }
    *out = r;
    return 200;
}

/* ---- other routes ---- */

int route_models(struct sbuf *body)
{
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON *d = cJSON_AddArrayToObject(o, "data");
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", g_srv.cfg.model_name);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "minfer");
    cJSON *meta = cJSON_AddObjectToObject(m, "meta");
    cJSON_AddNumberToObject(meta, "n_vocab", g_srv.n_vocab);
    cJSON_AddNumberToObject(meta, "n_ctx", (double)sched_slot_ctx(g_srv.sched) *
                                               sched_parallel(g_srv.sched));
    cJSON_AddNumberToObject(meta, "n_ctx_seq", sched_slot_ctx(g_srv.sched));
    cJSON_AddNumberToObject(meta, "parallel", sched_parallel(g_srv.sched));
    cJSON_AddItemToArray(d, m);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    sbuf_str(body, s ? s : "");
    free(s);
    return s ? 200 : 500;
}

static cJSON *parse_object(const char *req, size_t len, struct serve_err *e)
{
    cJSON *j = cJSON_ParseWithLength(req, len);
    if (!j || !cJSON_IsObject(j)) {
        cJSON_Delete(j);
        serve_err_set(e, 400, "invalid_request_error", NULL, NULL,
                      "the body must be a JSON object");
    }
    return j && cJSON_IsObject(j) ? j : NULL;
}

/* {"content": TEXT, "add_special": bool, "with_pieces": bool} -> {"tokens": [...]} */
int route_tokenize(const char *req, size_t len, struct sbuf *body, struct serve_err *e)
{
    cJSON *j = parse_object(req, len, e);
    if (!j)
        return e->status;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(j, "content");
    const cJSON *as = cJSON_GetObjectItemCaseSensitive(j, "add_special");
    const cJSON *wp = cJSON_GetObjectItemCaseSensitive(j, "with_pieces");
    if (!cJSON_IsString(c) || (as && !cJSON_IsBool(as)) || (wp && !cJSON_IsBool(wp))) {
        cJSON_Delete(j);
        serve_err_set(e, 400, "invalid_request_error", NULL, cJSON_IsString(c) ? "add_special"
                      : "content", "'content' must be a string; 'add_special' and 'with_pieces' "
                      "true or false");
        return 400;
    }
    int32_t *ids = NULL, n = 0;
    if (tokenize(c->valuestring, strlen(c->valuestring), &ids, &n, e, "content")) {
        cJSON_Delete(j);
        return e->status;
    }
    bool bos = minfer_tokenizer_add_bos(g_srv.tok) && minfer_tokenizer_bos(g_srv.tok) >= 0;
    int32_t skip = bos && !cJSON_IsTrue(as) ? 1 : 0;
    cJSON *o = cJSON_CreateObject();
    cJSON *a = cJSON_AddArrayToObject(o, "tokens");
    for (int32_t i = skip; i < n; i++) {
        if (cJSON_IsTrue(wp)) {
            size_t bl = 0;
            const char *b = minfer_token_bytes(g_srv.tok, ids[i], &bl);
            cJSON *t = cJSON_CreateObject();
            cJSON_AddNumberToObject(t, "id", ids[i]);
            char *piece = strndup(b ? b : "", bl);
            cJSON_AddStringToObject(t, "piece", piece ? piece : "");
            free(piece);
            cJSON_AddItemToArray(a, t);
        } else {
            cJSON_AddItemToArray(a, cJSON_CreateNumber(ids[i]));
        }
    }
    free(ids);
    cJSON_Delete(j);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    sbuf_str(body, s ? s : "");
    free(s);
    return 200;
}

/* {"tokens": [ids]} -> {"content": TEXT} */
int route_detokenize(const char *req, size_t len, struct sbuf *body, struct serve_err *e)
{
    cJSON *j = parse_object(req, len, e);
    if (!j)
        return e->status;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(j, "tokens");
    if (!cJSON_IsArray(t)) {
        cJSON_Delete(j);
        serve_err_set(e, 400, "invalid_request_error", NULL, "tokens",
                      "'tokens' must be a list of token ids");
        return 400;
    }
    size_t n = (size_t)cJSON_GetArraySize(t), i = 0;
    int32_t *ids = malloc(sizeof *ids * (n + 1));
    for (const cJSON *x = t->child; ids && x; x = x->next, i++) {
        if (!cJSON_IsNumber(x) || x->valuedouble < 0 || x->valuedouble >= g_srv.n_vocab ||
            x->valuedouble != (double)(int32_t)x->valuedouble) {
            free(ids);
            cJSON_Delete(j);
            serve_err_set(e, 400, "invalid_request_error", NULL, "tokens",
                          "tokens[%zu] is not an id of the vocabulary (0..%d)", i,
                          g_srv.n_vocab - 1);
            return 400;
        }
        ids[i] = (int32_t)x->valuedouble;
    }
    cJSON_Delete(j);
    size_t need = 0;
    minfer_detokenize(g_srv.tok, ids, n, false, NULL, 0, &need);
    char *text = malloc(need + 1);
    if (!ids || !text || minfer_detokenize(g_srv.tok, ids, n, false, text, need, &need)) {
        free(ids);
        free(text);
        serve_err_set(e, 500, "server_error", NULL, NULL, "detokenize failed");
        return 500;
    }
    text[need] = 0;
    free(ids);
    size_t w = 0; /* drop NULs: the JSON writer takes C strings (see sched.c add_text) */
    for (size_t k = 0; k < need; k++)
        if (text[k])
            text[w++] = text[k];
    text[w] = 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", text);
    free(text);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    sbuf_str(body, s ? s : "");
    free(s);
    return 200;
}
