/*
 * metrics.c — the server's counters and histograms, rendered in the
 * Prometheus text format (version 0.0.4) for GET /metrics. Updated from the
 * HTTP and engine threads under one mutex: a few updates per token are
 * far below its cost.
 */
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>

#include "serve.h"

const char *const route_names[ROUTE_COUNT] = {
    "/v1/chat/completions", "/v1/completions", "/v1/models", "/health", "/tokenize",
    "/detokenize", "/metrics", "/", "other",
};

/* Statuses counted per route; anything else lands in the last one. */
static const int statuses[] = {200, 400, 401, 404, 405, 413, 499, 500, 503, 0};
#define N_STATUS (sizeof statuses / sizeof statuses[0])

/* Seconds; llama-server-like latency scales for time to first token and
 * per-token time. */
static const double ttft_bounds[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tok_bounds[] = {0.001, 0.0025, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1};
#define N_TTFT (sizeof ttft_bounds / sizeof ttft_bounds[0])
#define N_TOK (sizeof tok_bounds / sizeof tok_bounds[0])

struct hist {
    uint64_t bucket[16]; /* cumulative at render time; here per bucket, last = +Inf */
    double sum;
    uint64_t count;
};

static struct {
    pthread_mutex_t mu;
    uint64_t requests[ROUTE_COUNT][N_STATUS];
    int64_t active, queued;
    int64_t prompt_tokens, generated_tokens, cached_tokens;
    int64_t steps, step_tokens, step_seqs;
    int32_t kv_used, kv_total;
    int64_t kv_held;
    struct hist ttft, tok;
} m = {.mu = PTHREAD_MUTEX_INITIALIZER};

void metrics_request(enum route_id route, int status)
{
    size_t k = 0;
    while (statuses[k] && statuses[k] != status)
        k++;
    pthread_mutex_lock(&m.mu);
    m.requests[route][k]++;
    pthread_mutex_unlock(&m.mu);
}

void metrics_active(int delta)
{
    pthread_mutex_lock(&m.mu);
    m.active += delta;
    pthread_mutex_unlock(&m.mu);
}

void metrics_queued(int delta)
{
    pthread_mutex_lock(&m.mu);
    m.queued += delta;
    pthread_mutex_unlock(&m.mu);
}

void metrics_tokens(int64_t prompt, int64_t generated)
{
    pthread_mutex_lock(&m.mu);
    m.prompt_tokens += prompt;
    m.generated_tokens += generated;
    pthread_mutex_unlock(&m.mu);
}

void metrics_step(int n_tokens, int n_seqs)
{
    pthread_mutex_lock(&m.mu);
    m.steps++;
    m.step_tokens += n_tokens;
    m.step_seqs += n_seqs;
    pthread_mutex_unlock(&m.mu);
}

void metrics_cached(int64_t n)
{
    pthread_mutex_lock(&m.mu);
    m.cached_tokens += n;
    pthread_mutex_unlock(&m.mu);
}

static void observe(struct hist *h, const double *bounds, size_t n, double s)
{
    size_t k = 0;
    while (k < n && s > bounds[k])
        k++;
    pthread_mutex_lock(&m.mu);
    h->bucket[k]++;
    h->sum += s;
    h->count++;
    pthread_mutex_unlock(&m.mu);
}

void metrics_ttft(double ms)
{
    observe(&m.ttft, ttft_bounds, N_TTFT, ms / 1e3);
}

void metrics_token_latency(double ms)
{
    observe(&m.tok, tok_bounds, N_TOK, ms / 1e3);
}

void metrics_kv(int32_t used, int32_t total, int64_t held)
{
    pthread_mutex_lock(&m.mu);
    m.kv_used = used;
    m.kv_total = total;
    m.kv_held = held;
    pthread_mutex_unlock(&m.mu);
}

static void line(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void line(struct sbuf *b, const char *fmt, ...)
{
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (n > 0)
        sbuf_add(b, buf, (size_t)n < sizeof buf ? (size_t)n : sizeof buf - 1);
}

static void render_hist(struct sbuf *b, const char *name, const char *help, const struct hist *h,
                        const double *bounds, size_t n)
{
    line(b, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    uint64_t cum = 0;
    for (size_t k = 0; k < n; k++) {
        cum += h->bucket[k];
        line(b, "%s_bucket{le=\"%g\"} %llu\n", name, bounds[k], (unsigned long long)cum);
    }
    cum += h->bucket[n];
    line(b, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
         (unsigned long long)cum, name, h->sum, name, (unsigned long long)h->count);
}

void metrics_render(struct sbuf *b)
{
    pthread_mutex_lock(&m.mu);
    line(b, "# HELP minfer_requests_total HTTP requests answered, by route and status.\n"
            "# TYPE minfer_requests_total counter\n");
    for (int r = 0; r < ROUTE_COUNT; r++)
        for (size_t k = 0; k < N_STATUS; k++)
            if (m.requests[r][k]) {
                char st[16] = "other";
                if (statuses[k])
                    snprintf(st, sizeof st, "%d", statuses[k]);
                line(b, "minfer_requests_total{route=\"%s\",status=\"%s\"} %llu\n",
                     route_names[r], st, (unsigned long long)m.requests[r][k]);
            }
    line(b, "# HELP minfer_requests_active Sequences decoding now.\n"
            "# TYPE minfer_requests_active gauge\nminfer_requests_active %lld\n",
         (long long)m.active);
    line(b, "# HELP minfer_requests_queued Sequences waiting for a slot.\n"
            "# TYPE minfer_requests_queued gauge\nminfer_requests_queued %lld\n",
         (long long)m.queued);
    line(b, "# HELP minfer_prompt_tokens_total Prompt tokens of admitted sequences.\n"
            "# TYPE minfer_prompt_tokens_total counter\nminfer_prompt_tokens_total %lld\n",
         (long long)m.prompt_tokens);
    line(b, "# HELP minfer_prompt_tokens_cached_total Prompt tokens whose KV came from the prefix "
            "cache.\n# TYPE minfer_prompt_tokens_cached_total counter\n"
            "minfer_prompt_tokens_cached_total %lld\n", (long long)m.cached_tokens);
    line(b, "# HELP minfer_tokens_generated_total Tokens sampled.\n"
            "# TYPE minfer_tokens_generated_total counter\nminfer_tokens_generated_total %lld\n",
         (long long)m.generated_tokens);
    line(b, "# HELP minfer_decode_steps_total Forward passes of the engine.\n"
            "# TYPE minfer_decode_steps_total counter\nminfer_decode_steps_total %lld\n",
         (long long)m.steps);
    line(b, "# HELP minfer_batch_tokens_total Tokens over all forward passes.\n"
            "# TYPE minfer_batch_tokens_total counter\nminfer_batch_tokens_total %lld\n",
         (long long)m.step_tokens);
    line(b, "# HELP minfer_batch_sequences_total Sequences over all forward passes (their mean "
            "per step is the decode batch size).\n# TYPE minfer_batch_sequences_total counter\n"
            "minfer_batch_sequences_total %lld\n", (long long)m.step_seqs);
    line(b, "# HELP minfer_kv_cells_used KV cache cells holding a token (prefix cache included).\n"
            "# TYPE minfer_kv_cells_used gauge\nminfer_kv_cells_used %d\n", m.kv_used);
    line(b, "# HELP minfer_kv_tokens_held Tokens the sequences hold by the scheduler's count; "
            "shared prefixes make it exceed the cells used, a leak makes it fall below.\n"
            "# TYPE minfer_kv_tokens_held gauge\nminfer_kv_tokens_held %lld\n",
         (long long)m.kv_held);
    line(b, "# HELP minfer_kv_cells_total KV cache cells.\n"
            "# TYPE minfer_kv_cells_total gauge\nminfer_kv_cells_total %d\n", m.kv_total);
    render_hist(b, "minfer_time_to_first_token_seconds",
                "From a request's arrival to its first sampled token.", &m.ttft, ttft_bounds,
                N_TTFT);
    render_hist(b, "minfer_time_per_output_token_seconds",
                "Between successive tokens of one sequence.", &m.tok, tok_bounds, N_TOK);
    pthread_mutex_unlock(&m.mu);
}
