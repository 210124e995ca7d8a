/*
 * http.c — libmicrohttpd glue: one internal epoll thread accepts, reads
 * bodies (refusing one whose Content-Length is over --max-body before
 * reading it), checks the API key, routes, and answers. A generation
 * request never blocks that thread: a streaming reply is a callback
 * response whose reader suspends the connection when no bytes are ready,
 * and a non-streaming one suspends the connection in the access handler;
 * the engine thread resumes it (sreq_emit_locked) when it has bytes. When a
 * connection ends before its reply is complete, the request is marked
 * cancelled and the engine frees its sequence at its next step.
 */
#include <arpa/inet.h>
#include <stdarg.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include <microhttpd.h>

#include "serve.h"

struct server g_srv;
static int open_replies; /* generation replies not yet complete on the wire */

/* Per HTTP request (MHD's con_cls). */
struct hconn {
    enum route_id route;
    char method[8];
    char path[96];
    struct sbuf body;
    bool too_big;
    struct sreq *r;
    int status;
    double t0;
};

static enum route_id route_of(const char *url)
{
    for (int i = 0; i < ROUTE_OTHER; i++)
        if (!strcmp(url, route_names[i]))
            return (enum route_id)i;
    if (!strcmp(url, "/chat/completions"))
        return ROUTE_CHAT;
    if (!strcmp(url, "/completions"))
        return ROUTE_COMPLETIONS;
    if (!strcmp(url, "/models"))
        return ROUTE_MODELS;
    if (!strcmp(url, "/index.html"))
        return ROUTE_PAGE;
    return ROUTE_OTHER;
}

/* ---- replies ---- */

static enum MHD_Result reply(struct MHD_Connection *c, struct hconn *h, int status,
                             const char *ctype, const char *body, size_t n)
{
    struct MHD_Response *resp =
        MHD_create_response_from_buffer(n, (void *)body, MHD_RESPMEM_MUST_COPY);
    if (!resp)
        return MHD_NO;
    MHD_add_response_header(resp, "Content-Type", ctype);
    if (status == 503)
        MHD_add_response_header(resp, "Retry-After", "1");
    if (status == 401)
        MHD_add_response_header(resp, "WWW-Authenticate", "Bearer");
    h->status = status;
    enum MHD_Result ret = MHD_queue_response(c, (unsigned)status, resp);
    MHD_destroy_response(resp);
    return ret;
}

static enum MHD_Result reply_json(struct MHD_Connection *c, struct hconn *h, int status,
                                  const char *body, size_t n)
{
    return reply(c, h, status, "application/json", body, n);
}

static enum MHD_Result reply_err(struct MHD_Connection *c, struct hconn *h,
                                 const struct serve_err *e)
{
    char *s = serve_err_json(e);
    enum MHD_Result ret = reply_json(c, h, e->status, s ? s : "{}", s ? strlen(s) : 2);
    free(s);
    return ret;
}

/* ---- streaming ---- */

static ssize_t stream_reader(void *cls, uint64_t pos, char *buf, size_t max)
{
    (void)pos;
    struct sreq *r = cls;
    pthread_mutex_lock(&r->mu);
    size_t avail = r->out.n - r->out_sent;
    if (avail) {
        size_t n = avail < max ? avail : max;
        memcpy(buf, r->out.p + r->out_sent, n);
        r->out_sent += n;
        if (r->out_sent == r->out.n) /* all sent: reuse the buffer */
            r->out.n = r->out_sent = 0;
        pthread_mutex_unlock(&r->mu);
        return (ssize_t)n;
    }
    if (r->finished || !r->conn) {
        pthread_mutex_unlock(&r->mu);
        return MHD_CONTENT_READER_END_OF_STREAM;
    }
    r->suspended = true;
    MHD_suspend_connection(r->conn);
    pthread_mutex_unlock(&r->mu);
    return 0;
}

static void stream_free(void *cls)
{
    sreq_unref(cls);
}

static enum MHD_Result start_stream(struct MHD_Connection *c, struct hconn *h)
{
    struct sreq *r = h->r;
    pthread_mutex_lock(&r->mu);
    r->refs++; /* the response's, dropped by stream_free */
    pthread_mutex_unlock(&r->mu);
    struct MHD_Response *resp =
        MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_reader, r, stream_free);
    if (!resp) {
        sreq_unref(r);
        return MHD_NO;
    }
    MHD_add_response_header(resp, "Content-Type", "text/event-stream");
    MHD_add_response_header(resp, "Cache-Control", "no-cache");
    h->status = 200;
    enum MHD_Result ret = MHD_queue_response(c, 200, resp);
    MHD_destroy_response(resp);
    return ret;
}

/* A non-streaming reply: sent when complete, else the connection waits. */
static enum MHD_Result finish_or_wait(struct MHD_Connection *c, struct hconn *h)
{
    struct sreq *r = h->r;
    pthread_mutex_lock(&r->mu);
    if (!r->finished) {
        r->suspended = true;
        MHD_suspend_connection(c);
        pthread_mutex_unlock(&r->mu);
        return MHD_YES;
    }
    int status = r->status ? r->status : 200;
    struct sbuf out = r->out;
    memset(&r->out, 0, sizeof r->out);
    pthread_mutex_unlock(&r->mu);
    enum MHD_Result ret = reply_json(c, h, status, out.p ? out.p : "", out.n);
    sbuf_free(&out);
    return ret;
}

/* ---- routing ---- */

static bool authorized(struct MHD_Connection *c)
{
    const char *key = g_srv.cfg.api_key;
    if (!key || !key[0])
        return true;
    const char *a = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Authorization");
    if (!a || strncasecmp(a, "Bearer ", 7))
        return false;
    a += 7;
    size_t la = strlen(a), lk = strlen(key);
    unsigned diff = la != lk; /* compare in time independent of where they differ */
    for (size_t i = 0; i < la; i++)
        diff |= (unsigned char)a[i] ^ (unsigned char)key[i % lk];
    return diff == 0;
}

static enum MHD_Result dispatch(struct MHD_Connection *c, struct hconn *h, const char *method)
{
    struct serve_err e = {0};
    bool get = !strcmp(method, "GET") || !strcmp(method, "HEAD");
    bool post = !strcmp(method, "POST");
    bool ready = __atomic_load_n(&g_srv.ready, __ATOMIC_ACQUIRE);
    bool draining = __atomic_load_n(&g_srv.draining, __ATOMIC_ACQUIRE);
    if (h->route == ROUTE_HEALTH && get) {
        if (ready && !draining)
            return reply_json(c, h, 200, "{\"status\":\"ok\"}", 15);
        const char *b = ready ? "{\"status\":\"shutting down\"}" : "{\"status\":\"loading model\"}";
        return reply_json(c, h, 503, b, strlen(b));
    }
    if (h->route == ROUTE_PAGE && get)
        return reply(c, h, 200, "text/html; charset=utf-8", serve_page_html, serve_page_html_len);
    if (h->route == ROUTE_OTHER) {
        serve_err_set(&e, 404, "not_found_error", NULL, NULL, "no route %s %.80s", method,
                      h->path);
        return reply_err(c, h, &e);
    }
    if (!authorized(c)) {
        serve_err_set(&e, 401, "authentication_error", "invalid_api_key", NULL,
                      "missing or wrong API key: send 'Authorization: Bearer KEY'");
        return reply_err(c, h, &e);
    }
    bool want_post = h->route == ROUTE_CHAT || h->route == ROUTE_COMPLETIONS ||
                     h->route == ROUTE_TOKENIZE || h->route == ROUTE_DETOKENIZE;
    if ((want_post && !post) || (!want_post && !get)) {
        serve_err_set(&e, 405, "invalid_request_error", NULL, NULL, "%s takes %s, not %s",
                      route_names[h->route], want_post ? "POST" : "GET", method);
        return reply_err(c, h, &e);
    }
    if (h->route == ROUTE_METRICS) {
        struct sbuf b = {0};
        metrics_render(&b);
        enum MHD_Result ret = reply(c, h, 200, "text/plain; version=0.0.4", b.p ? b.p : "", b.n);
        sbuf_free(&b);
        return ret;
    }
    if (!ready || draining) {
        serve_err_set(&e, 503, "server_error", ready ? "shutting_down" : "loading", NULL,
                      ready ? "the server is shutting down" : "the model is still loading");
        return reply_err(c, h, &e);
    }
    if (h->too_big) {
        serve_err_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                      "the body is over --max-body (%zu bytes)", g_srv.cfg.max_body);
        return reply_err(c, h, &e);
    }
    const char *body = h->body.p ? h->body.p : "";
    struct sbuf out = {0};
    int status;
    switch (h->route) {
    case ROUTE_MODELS:
        status = route_models(&out);
        break;
    case ROUTE_TOKENIZE:
        status = route_tokenize(body, h->body.n, &out, &e);
        break;
    case ROUTE_DETOKENIZE:
        status = route_detokenize(body, h->body.n, &out, &e);
        break;
    default: {
        enum serve_kind k = h->route == ROUTE_CHAT ? SERVE_CHAT : SERVE_COMPLETION;
        status = route_generate(k, body, h->body.n, &h->r, &e);
        if (!h->r)
            return reply_err(c, h, &e);
        __atomic_add_fetch(&open_replies, 1, __ATOMIC_RELAXED);
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
        pthread_mutex_lock(&h->r->mu);
        h->r->conn = c;
        h->r->fd = ci ? (int)ci->connect_fd : -1;
        pthread_mutex_unlock(&h->r->mu);
        return h->r->p.stream ? start_stream(c, h) : finish_or_wait(c, h);
    }
    }
    enum MHD_Result ret = status == 200 ? reply_json(c, h, 200, out.p ? out.p : "", out.n)
                                        : reply_err(c, h, &e);
    sbuf_free(&out);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **con_cls)
{
    (void)cls;
    (void)version;
    struct hconn *h = *con_cls;
    if (!h) {
        h = calloc(1, sizeof *h);
        if (!h)
            return MHD_NO;
        *con_cls = h;
        h->t0 = serve_now_ms();
        h->route = route_of(url);
        snprintf(h->method, sizeof h->method, "%s", method);
        snprintf(h->path, sizeof h->path, "%s", url);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > g_srv.cfg.max_body) {
            struct serve_err e;
            serve_err_set(&e, 413, "invalid_request_error", "request_too_large", NULL,
                          "the body is %s bytes (Content-Length), over --max-body %zu", cl,
                          g_srv.cfg.max_body);
            return reply_err(c, h, &e);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (h->body.n + *upload_size > g_srv.cfg.max_body) /* chunked upload, no length */
            h->too_big = true;
        else
            sbuf_add(&h->body, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (h->r) /* resumed: a non-streaming reply may be complete */
        return finish_or_wait(c, h);
    if (h->status) /* replied already (413 before the body) */
        return MHD_YES;
    if (h->body.oom) {
        struct serve_err e;
        serve_err_set(&e, 500, "server_error", NULL, NULL, "out of memory reading the body");
        return reply_err(c, h, &e);
    }
    return dispatch(c, h, method);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls,
                         enum MHD_RequestTerminationCode toe)
{
    (void)cls;
    (void)c;
    struct hconn *h = *con_cls;
    if (!h)
        return;
    *con_cls = NULL;
    long long prompt = 0, gen = 0;
    bool gone = false;
    if (h->r) {
        struct sreq *r = h->r;
        pthread_mutex_lock(&r->mu);
        r->conn = NULL;
        r->fd = -1;
        r->suspended = false;
        (void)toe; /* a reply cut short is what matters, whatever the cause */
        gone = r->cancelled || !r->finished;
        r->cancelled = gone;
        if (gone && !r->p.stream)
            h->status = 499; /* no reply reached it: nginx's "client closed request" */
        prompt = r->prompt_tokens;
        gen = r->completion_tokens;
        pthread_mutex_unlock(&r->mu);
        if (gone && g_srv.sched)
            sched_poke(g_srv.sched);
        sreq_unref(r);
        __atomic_sub_fetch(&open_replies, 1, __ATOMIC_RELAXED);
    }
    metrics_request(h->route, h->status);
    fprintf(stderr, "%s %s %d prompt=%lld gen=%lld %.1fms%s\n", h->method, h->path, h->status,
            prompt, gen, serve_now_ms() - h->t0, gone ? " (client gone, cancelled)" : "");
    sbuf_free(&h->body);
    free(h);
}

/* ---- daemon ---- */

/* libmicrohttpd's messages, prefixed; a send to a client that has left is
 * how every disconnect ends, so it is not reported. */
static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    (void)cls;
    char buf[512];
    vsnprintf(buf, sizeof buf, fmt, ap);
    if (strstr(buf, "no longer available for sending") || strstr(buf, "Connection reset"))
        return;
    size_t n = strlen(buf);
    fprintf(stderr, "minfer serve: http: %s%s", buf, n && buf[n - 1] == '\n' ? "" : "\n");
}

struct MHD_Daemon *http_start(const char *host, int port, int *bound_port, char *err, size_t len)
{
    struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)port)};
    const struct sockaddr *sa;
    unsigned flags = MHD_USE_EPOLL_INTERNAL_THREAD | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (!strcmp(host, "localhost"))
        host = "127.0.0.1";
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        sa = (const struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        sa = (const struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        snprintf(err, len, "--host %s is not an IPv4 or IPv6 address", host);
        return NULL;
    }
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)port, NULL, NULL, on_request, NULL, MHD_OPTION_EXTERNAL_LOGGER, mhd_log,
        NULL, MHD_OPTION_SOCK_ADDR, sa, MHD_OPTION_NOTIFY_COMPLETED, on_completed, NULL,
        MHD_OPTION_CONNECTION_LIMIT,
        (unsigned)1000, MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)600, MHD_OPTION_END);
    if (!d) {
        snprintf(err, len, "cannot listen on %s:%d (in use, or not permitted)", host, port);
        return NULL;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    *bound_port = info ? info->port : port;
    return d;
}

unsigned http_open_replies(void)
{
    return (unsigned)__atomic_load_n(&open_replies, __ATOMIC_RELAXED);
}
