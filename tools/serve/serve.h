/*
 * serve.h — what the parts of `minfer serve` share. The server is split by
 * job: request.c parses request bodies (no model needed, so it is fuzzed),
 * http.c is the libmicrohttpd glue (routing, auth, limits, streaming by
 * suspending connections), routes.c answers each route, sched.c is the one
 * engine thread doing continuous batching, engine.c adapts the context API,
 * metrics.c keeps the Prometheus counters, page.c serves the chat page.
 *
 * Threads: libmicrohttpd's one internal epoll thread runs every handler;
 * the engine thread alone touches the context. They meet in struct sreq,
 * whose output buffer and flags are guarded by its mutex.
 */
#ifndef MINFER_SERVE_H
#define MINFER_SERVE_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "minfer/minfer.h"

struct cJSON;
struct MHD_Connection;

/* ---- growing byte buffer ---- */

struct sbuf {
    char *p;
    size_t n, cap;
    bool oom; /* an append failed: the content is incomplete */
};
void sbuf_add(struct sbuf *b, const void *s, size_t n);
void sbuf_str(struct sbuf *b, const char *s);
void sbuf_free(struct sbuf *b);

/* ---- request bodies (request.c) ---- */

enum serve_kind { SERVE_CHAT, SERVE_COMPLETION };

#define SERVE_MAX_STOP 8
#define SERVE_MAX_TOP_LOGPROBS 20

/* A parsed /v1/chat/completions or /v1/completions body. Strings point
 * into the cJSON tree root (owned here). */
struct serve_params {
    enum serve_kind kind;
    struct cJSON *root;
    /* chat */
    struct minfer_chat_msg *msgs; /* n_msgs; content strings malloc'd (parts joined) */
    size_t n_msgs;
    int enable_thinking;          /* 0 default, 1 on, -1 off (Qwen3) */
    /* completion: one or more prompts, each text or ids */
    size_t n_prompts;
    const char **prompt_text;     /* [n_prompts]; NULL where the prompt is ids */
    int32_t **prompt_ids;         /* [n_prompts]; malloc'd, NULL where text */
    size_t *n_prompt_ids;
    bool echo;
    /* both */
    int32_t max_tokens;           /* -1: until the context ends */
    struct minfer_sampler_params sp;
    bool seed_set;
    const char *stop[SERVE_MAX_STOP];
    size_t n_stop;
    bool logprobs;
    int32_t top_logprobs;
    bool stream, include_usage;
    bool ignore_eos;              /* llama-server's extension: never sample end-of-generation */
};

/* Error of a request, as OpenAI's {"error": {...}}. */
struct serve_err {
    int status;                   /* HTTP status */
    const char *type;             /* invalid_request_error, ... */
    const char *code;             /* NULL or a code string */
    char param[64];               /* the field, or "" */
    char message[512];
};

/* Fills p from a JSON body. Returns 0, or fills e (400 naming the field
 * and the numbers) and returns -1; p is then already freed. */
int serve_parse_request(enum serve_kind kind, const char *body, size_t len,
                        struct serve_params *p, struct serve_err *e);
void serve_params_free(struct serve_params *p);
void serve_err_set(struct serve_err *e, int status, const char *type, const char *code,
                   const char *param, const char *fmt, ...)
    __attribute__((format(printf, 6, 7)));
/* The OpenAI error JSON of e (malloc'd). */
char *serve_err_json(const struct serve_err *e);

/* ---- generation requests shared by the HTTP side and the engine ---- */

enum finish { FINISH_NONE, FINISH_STOP, FINISH_LENGTH, FINISH_ERROR, FINISH_CANCEL };

struct sreq;

/* One sequence to generate: one choice of a request. Fields below the line
 * are the engine thread's while the job runs. */
struct job {
    struct sreq *r;
    int index;                    /* choice index */
    int32_t *prompt;              /* malloc'd */
    int32_t n_prompt;
    struct minfer_sampler *smp;
    double t_enqueue_ms;
    /* ---- engine side ---- */
    int slot;                     /* -1 while queued */
    int32_t *gen;                 /* generated ids */
    int32_t n_gen, cap_gen;
    struct sbuf text;             /* all generated text (stop strings cut) */
    size_t text_sent;             /* bytes of text already streamed */
    struct minfer_detok *dt;
    struct cJSON *logprobs;       /* array of per-token entries or NULL */
    enum finish finish;
    char error[256];
    double t_first_ms, t_last_ms;
    bool role_sent;               /* a chat stream's first chunk went out */
    bool done;
};

/* One HTTP request that generates (1 job for chat, n_prompts for
 * completions). Reference counted: the HTTP side holds one, the engine
 * one per queued or running job. */
struct sreq {
    pthread_mutex_t mu;
    int refs;
    struct serve_params p;
    struct job *jobs;
    int n_jobs, n_done;
    char id[48];
    long created;
    double t_start_ms, deadline_ms; /* deadline 0: none */
    /* guarded by mu */
    struct MHD_Connection *conn;  /* NULL once the connection is gone */
    int fd;                       /* its socket, -1 unknown; stable while suspended */
    bool suspended;
    bool cancelled;               /* the client went away */
    bool finished;                /* every job done and the last bytes are in out */
    int status;                   /* final HTTP status of a non-streaming reply */
    struct sbuf out;              /* bytes for the client (SSE chunks or the JSON reply) */
    size_t out_sent;
    int64_t prompt_tokens, completion_tokens;
};

struct sreq *sreq_new(struct serve_params *p, int n_jobs); /* takes p's contents */
void sreq_unref(struct sreq *r);
/* Appends bytes for the client and wakes its connection (mu held). */
void sreq_emit_locked(struct sreq *r, const char *s, size_t n);
/* True when r's client has gone: cancelled already, or its connection is
 * suspended and the peer has closed the socket (MHD does not watch a
 * suspended socket, so the engine looks). Marks r cancelled then. */
bool sreq_client_gone(struct sreq *r);

/* ---- engine (engine.c): the context behind a small interface ---- */

struct eng_tok {
    int32_t tok, pos, seq;
    bool logits;
};

struct engine;
struct engine *engine_new(struct minfer_ctx *ctx, int n_seq);
void engine_free(struct engine *e);
int engine_n_seq(const struct engine *e);      /* sequences it can hold at once */
bool engine_can_copy(const struct engine *e);  /* seq_copy shares a prefix */
/* One forward pass over t[n]; 0 or -1 with the context's message in err. */
int engine_decode(struct engine *e, const struct eng_tok *t, int n, char *err, size_t len);
const float *engine_logits(struct engine *e, int i); /* i: index in the last t[] */
void engine_seq_rm(struct engine *e, int seq, int32_t p0); /* drop positions >= p0 */
int engine_seq_cp(struct engine *e, int src, int dst, int32_t n);
void engine_kv_usage(const struct engine *e, int32_t *used, int32_t *total);

/* ---- scheduler (sched.c) ---- */

struct serve_cfg {
    const char *host;
    int port;
    int parallel;
    int32_t n_ctx, n_batch, n_threads;
    uint32_t type_k, type_v;      /* KV cache types (default f16) */
    bool no_graphs;
    const char *api_key;
    size_t max_body;
    int max_queue;
    double timeout_s;
    const char *model_path;
    const char *model_name;
    const char *backend;
    const char *plugins[8];
    size_t n_plugins;
    bool no_prefix_cache;
};

struct sched;
struct sched *sched_new(const struct serve_cfg *cfg, struct minfer_ctx *ctx,
                        const struct minfer_tokenizer *tok, int32_t n_vocab, char *err,
                        size_t len);
/* Queues r's jobs. 0, or -1 when the queue is full (nothing taken). */
int sched_submit(struct sched *s, struct sreq *r);
/* Wakes the engine so it notices a cancelled request now. */
void sched_poke(struct sched *s);
/* Ends every queued and running job with a final event and stops the
 * thread. */
void sched_stop(struct sched *s);
void sched_free(struct sched *s);
int32_t sched_slot_ctx(const struct sched *s); /* most tokens one sequence may hold */
int sched_parallel(const struct sched *s);

/* ---- output (routes.c; called by the engine under r->mu) ---- */

/* A token's text (already stop-checked) for choice j. */
void out_delta_locked(struct sreq *r, struct job *j, const char *text, size_t n,
                      struct cJSON *logprob);
/* Choice j ended. */
void out_finish_locked(struct sreq *r, struct job *j);
/* Every job ended: the final chunk(s) or the whole reply. */
void out_complete_locked(struct sreq *r);

/* ---- metrics (metrics.c) ---- */

enum route_id {
    ROUTE_CHAT, ROUTE_COMPLETIONS, ROUTE_MODELS, ROUTE_HEALTH, ROUTE_TOKENIZE,
    ROUTE_DETOKENIZE, ROUTE_METRICS, ROUTE_PAGE, ROUTE_OTHER, ROUTE_COUNT
};
extern const char *const route_names[ROUTE_COUNT];

void metrics_request(enum route_id route, int status);
void metrics_active(int delta);
void metrics_queued(int delta);
void metrics_tokens(int64_t prompt, int64_t generated);
void metrics_step(int n_tokens, int n_seqs); /* one forward pass */
void metrics_cached(int64_t n); /* prompt tokens reused from the prefix cache */
void metrics_ttft(double ms);
void metrics_token_latency(double ms);
void metrics_kv(int32_t used, int32_t total, int64_t held); /* held: slots' tokens */
void metrics_render(struct sbuf *b);

/* ---- the server (http.c) ---- */

struct server {
    struct serve_cfg cfg;
    struct sched *sched;                  /* NULL while loading */
    const struct minfer_tokenizer *tok;
    struct minfer_model *model;
    int32_t n_vocab;
    int ready;                            /* model loaded (atomic) */
    int draining;                         /* SIGTERM: refuse new work (atomic) */
};
extern struct server g_srv;

struct MHD_Daemon;
/* Listens on host:port (0: a free port, put in *bound_port). */
struct MHD_Daemon *http_start(const char *host, int port, int *bound_port, char *err, size_t len);
unsigned http_open_replies(void); /* generation replies still being sent */

/* Route handlers return the HTTP status and fill body (JSON) or e. */
int route_models(struct sbuf *body);
int route_tokenize(const char *req, size_t len, struct sbuf *body, struct serve_err *e);
int route_detokenize(const char *req, size_t len, struct sbuf *body, struct serve_err *e);
/* Builds and submits a generation request; *out set on success. */
int route_generate(enum serve_kind kind, const char *req, size_t len, struct sreq **out,
                   struct serve_err *e);

extern const char serve_page_html[];
extern const size_t serve_page_html_len;

double serve_now_ms(void);

/* eogmask.c: whether ignore_eos's masking of eog[n_eog] can change what
 * a sampler with parameters sp draws from row l (false: sample l as is). */
bool eog_mask_matters(const struct minfer_sampler_params *sp, bool logprobs,
                      const int32_t *eog, int32_t n_eog, const float *l, int32_t n_vocab);

#endif /* MINFER_SERVE_H */
