/*
 * tensor-stream.c — parallel row production behind the GGUF writer's fill
 * callback (see tensor-stream.h).
 */
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/error.h"
#include "tensor-stream.h"

#define WINDOW_BYTES (8u << 20) /* rows produced per window when not direct */
#define MAX_THREADS 256

struct tstream {
    int n_threads;
    size_t scratch_bytes;
    void **scratch;             /* [n_threads] */
    uint8_t *win;               /* window buffer */
    size_t win_cap;
    const struct tstream_tensor *win_t; /* tensor the window holds, or NULL */
    int64_t win_r0, win_r1;
    uint64_t total, done, next_report;
    minfer_progress_fn progress;
    void *progress_user;
    const volatile int *cancel;
    pthread_mutex_t lock;
    minfer_status first_st;
    char err[512];
};

struct job {
    struct tstream *s;
    const struct tstream_tensor *t;
    int64_t r0, r1;
    uint8_t *dst;
    void *scratch;
    minfer_status st;
};

/* ---- setup ---- */

int tstream_default_threads(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    if (n < 1)
        return 1;
    return n > MAX_THREADS ? MAX_THREADS : (int)n;
}

struct tstream *tstream_new(int n_threads, size_t scratch_bytes, uint64_t total,
                            minfer_progress_fn progress, void *progress_user)
{
    struct tstream *s = calloc(1, sizeof *s);
    if (!s)
        return NULL;
    s->n_threads = n_threads > 0 ? (n_threads > MAX_THREADS ? MAX_THREADS : n_threads)
                                 : tstream_default_threads();
    s->scratch_bytes = scratch_bytes;
    s->total = total;
    s->progress = progress;
    s->progress_user = progress_user;
    pthread_mutex_init(&s->lock, NULL);
    s->scratch = calloc((size_t)s->n_threads, sizeof *s->scratch);
    if (!s->scratch)
        goto fail;
    for (int i = 0; i < s->n_threads && scratch_bytes; i++)
        if (!(s->scratch[i] = malloc(scratch_bytes)))
            goto fail;
    return s;
fail:
    tstream_free(s);
    return NULL;
}

void tstream_free(struct tstream *s)
{
    if (!s)
        return;
    if (s->scratch)
        for (int i = 0; i < s->n_threads; i++)
            free(s->scratch[i]);
    free(s->scratch);
    free(s->win);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

void tstream_set_cancel(struct tstream *s, const volatile int *cancel)
{
    s->cancel = cancel;
}

minfer_status tstream_write_failed(const struct tstream *s, minfer_status st, const char *path,
                                   const char *writer_msg, char *err, size_t err_len)
{
    return errf(err, err_len, st, "writing %s: %s", path,
                s && s->err[0] ? s->err : writer_msg);
}

int tstream_threads(const struct tstream *s)
{
    return s->n_threads;
}

/* ---- parallel production ---- */

static void *run_job(void *arg)
{
    struct job *j = arg;
    char err[512] = "";
    j->st = j->t->rows(j->t->user, j->r0, j->r1, j->dst, j->scratch, err, sizeof err);
    if (j->st != MINFER_OK) {
        pthread_mutex_lock(&j->s->lock);
        if (!j->s->err[0]) {
            if (err[0])
                errf(j->s->err, sizeof j->s->err, j->st, "%s", err);
            else
                errf(j->s->err, sizeof j->s->err, j->st, "tensor %s rows %lld..%lld: %s",
                     j->t->name, (long long)j->r0, (long long)j->r1, minfer_status_str(j->st));
        }
        pthread_mutex_unlock(&j->s->lock);
    }
    return NULL;
}

/* Produces rows [r0, r1) of t into dst, split over the workers. */
static minfer_status produce(struct tstream *s, const struct tstream_tensor *t, int64_t r0,
                             int64_t r1, uint8_t *dst)
{
    struct job jobs[MAX_THREADS];
    pthread_t tid[MAX_THREADS];
    bool started[MAX_THREADS] = {0};
    int64_t n = r1 - r0;
    int k = n < s->n_threads ? (int)n : s->n_threads;
    if (s->cancel && *s->cancel) {
        pthread_mutex_lock(&s->lock);
        if (!s->err[0])
            errf(s->err, sizeof s->err, MINFER_ERR_STATE, "cancelled while writing tensor %s",
                 t->name);
        pthread_mutex_unlock(&s->lock);
        return MINFER_ERR_STATE;
    }
    if (k < 1)
        return MINFER_OK;
    for (int i = 0; i < k; i++) {
        int64_t a = r0 + n * i / k, b = r0 + n * (i + 1) / k;
        jobs[i] = (struct job){s, t, a, b, dst + (size_t)(a - r0) * t->row_bytes,
                               s->scratch[i], MINFER_OK};
    }
    for (int i = 1; i < k; i++)
        started[i] = pthread_create(&tid[i], NULL, run_job, &jobs[i]) == 0;
    run_job(&jobs[0]);
    for (int i = 1; i < k; i++) {
        if (started[i])
            pthread_join(tid[i], NULL);
        else
            run_job(&jobs[i]); /* could not start a thread: do it here */
    }
    for (int i = 0; i < k; i++)
        if (jobs[i].st != MINFER_OK)
            return jobs[i].st;
    s->done += (uint64_t)n * t->row_bytes;
    if (s->progress && (s->done >= s->next_report || s->done >= s->total)) {
        s->progress(s->progress_user, s->done, s->total);
        s->next_report = s->done + s->total / 200 + 1;
    }
    return MINFER_OK;
}

minfer_status tstream_fill(void *user, uint64_t offset, void *dst_v, size_t size)
{
    const struct tstream_tensor *t = user;
    struct tstream *s = t->s;
    uint8_t *dst = dst_v;
    size_t rb = t->row_bytes;
    if (rb == 0 || offset + size < offset || offset + size > (uint64_t)t->n_rows * rb)
        return MINFER_ERR_RANGE;
    while (size > 0) {
        int64_t r = (int64_t)(offset / rb);
        if (s->win_t == t && r >= s->win_r0 && r < s->win_r1) {
            uint64_t w_off = offset - (uint64_t)s->win_r0 * rb;
            uint64_t w_len = (uint64_t)(s->win_r1 - s->win_r0) * rb - w_off;
            size_t n = size < w_len ? size : (size_t)w_len;
            memcpy(dst, s->win + w_off, n);
            dst += n;
            offset += n;
            size -= n;
            continue;
        }
        if (offset % rb == 0 && size >= rb && size >= (size_t)s->n_threads * rb) {
            int64_t n = (int64_t)(size / rb);
            minfer_status st = produce(s, t, r, r + n, dst);
            if (st != MINFER_OK)
                return st;
            dst += (size_t)n * rb;
            offset += (uint64_t)n * rb;
            size -= (size_t)n * rb;
            continue;
        }
        int64_t nw = (int64_t)(WINDOW_BYTES / rb);
        if (nw < 1)
            nw = 1;
        if (nw > t->n_rows - r)
            nw = t->n_rows - r;
        size_t need = (size_t)nw * rb;
        if (need > s->win_cap) {
            uint8_t *p = realloc(s->win, need);
            if (!p)
                return MINFER_ERR_NO_MEMORY;
            s->win = p;
            s->win_cap = need;
        }
        s->win_t = NULL;
        minfer_status st = produce(s, t, r, r + nw, s->win);
        if (st != MINFER_OK)
            return st;
        s->win_t = t;
        s->win_r0 = r;
        s->win_r1 = r + nw;
    }
    return MINFER_OK;
}
