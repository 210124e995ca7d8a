/*
 * pool.c — the CPU plugin's persistent thread pool. Workers are created
 * once per instance; a dispatch bumps a generation counter that workers
 * spin on for a short while (decode runs a node every few tens of
 * microseconds, far below a futex wake-up's cost) and then sleep on a
 * condition variable so an idle engine does not burn the machine.
 *
 * Preemption: work is claimed dynamically (each task hands out chunks
 * through an atomic counter) and a worker that wakes late stays out, so a
 * descheduled worker costs nothing unless it was preempted while holding
 * a chunk; then the caller must wait for the scheduler to run it again, a
 * whole time slice (milliseconds, against a dispatch of tens of
 * microseconds). When another process keeps a core busy that happens on
 * most dispatches and two threads decode slower than one. So the pool
 * measures each dispatch's wait for its workers after the caller ran out
 * of chunks: a window in which many dispatches waited long (a stall)
 * drops the pool to the caller alone, and it probes all threads again
 * after a while, so the thread count follows the contention (see
 * docs/PERF.md, "Decode beside a busy process").
 */
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <time.h>

#include "cpu-internal.h"

/* How long an idle worker spins before sleeping. */
#define SPIN_NS 300000L

/* Contention detection (cpu_pool_run): a dispatch stalls when the caller,
 * done with every chunk, waits more than STALL_NS and more than its own
 * share took for a joined worker; a time slice is >= 1 ms, a chunk's
 * tail far less. WINDOW dispatches with more than STALL_LIMIT stalls drop
 * the pool to the caller alone for SOLO_NS, after which a window with
 * all threads probes again. */
#define STALL_NS 250000L
#define WINDOW 32
#define STALL_LIMIT 4
#define SOLO_NS 200000000L /* 0.2 s: a few decode tokens */

struct worker {
    struct cpu_pool *pool;
    int ith;
    pthread_t th;
};

struct cpu_pool {
    int n;                      /* threads in all, the caller included */
    struct worker *w;           /* [n - 1] */
    int started;                /* workers actually created */
    atomic_uint gen;            /* bumped per dispatch */
    atomic_uint state;          /* CLOSED bit | number of workers joined */
    atomic_uint finished;       /* joined workers done with the task */
    atomic_bool stop;
    cpu_task_fn fn;             /* valid while a dispatch is open or joined */
    void *arg;
    /* threads of the open dispatch; atomic because a worker that woke for
     * the previous dispatch may read it (try_join) while the caller sets
     * the next one's */
    atomic_int nth;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int sleeping;               /* guarded by mu */
    /* contention detection; touched by the caller's thread only */
    int window_runs, window_stalls;
    long solo_until;            /* now_ns() before which dispatches run solo */
    unsigned long n_stalls, n_solo_windows; /* totals, for tests and reports */
};

/* ---- worker side ---- */

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield");
#endif
}

static long now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1000000000L + ts.tv_nsec;
}

static unsigned wait_gen(struct cpu_pool *p, unsigned seen)
{
    unsigned g;
    long t0 = 0;
    for (unsigned i = 0;; i++) {
        g = atomic_load_explicit(&p->gen, memory_order_acquire);
        if (g != seen || atomic_load_explicit(&p->stop, memory_order_acquire))
            return g;
        cpu_relax();
        if ((i & 255) == 255) {
            long t = now_ns();
            if (!t0)
                t0 = t;
            else if (t - t0 > SPIN_NS)
                break;
        }
    }
    pthread_mutex_lock(&p->mu);
    p->sleeping++;
    while ((g = atomic_load_explicit(&p->gen, memory_order_acquire)) == seen &&
           !atomic_load_explicit(&p->stop, memory_order_acquire))
        pthread_cond_wait(&p->cv, &p->mu);
    p->sleeping--;
    pthread_mutex_unlock(&p->mu);
    return g;
}

#define CLOSED 0x80000000u

/* Joins the open dispatch; returns the participant index or 0 if closed
 * or full. */
static int try_join(struct cpu_pool *p)
{
    unsigned st = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if (st & CLOSED)
            return 0;
        /* may be the next dispatch's count: worker_main checks again */
        if ((int)st + 1 >= atomic_load_explicit(&p->nth, memory_order_relaxed))
            return 0;
        if (atomic_compare_exchange_weak_explicit(&p->state, &st, st + 1, memory_order_acq_rel,
                                                  memory_order_acquire))
            return (int)st + 1;
    }
}

static void *worker_main(void *argp)
{
    struct worker *w = argp;
    struct cpu_pool *p = w->pool;
    unsigned seen = 0;
    for (;;) {
        seen = wait_gen(p, seen);
        if (atomic_load_explicit(&p->stop, memory_order_acquire))
            break;
        int ith = try_join(p);
        if (ith) {
            /* the join's acquire made the joined dispatch's fn, arg and nth
             * visible; a worker late for the previous dispatch may have
             * joined this one past its count, and then only reports done */
            int nth = atomic_load_explicit(&p->nth, memory_order_relaxed);
            if (ith < nth)
                p->fn(p->arg, ith, nth);
            atomic_fetch_add_explicit(&p->finished, 1, memory_order_release);
        }
    }
    return NULL;
}

/* ---- caller side ---- */

struct cpu_pool *cpu_pool_new(int n)
{
    if (n < 1 || n > 4096)
        return NULL;
    struct cpu_pool *p = calloc(1, sizeof *p);
    if (!p)
        return NULL;
    p->n = n;
    atomic_init(&p->gen, 0);
    atomic_init(&p->state, CLOSED);
    atomic_init(&p->finished, 0);
    atomic_init(&p->stop, false);
    atomic_init(&p->nth, 0);
    if (pthread_mutex_init(&p->mu, NULL))
        goto out_free;
    if (pthread_cond_init(&p->cv, NULL))
        goto out_mutex;
    if (n > 1) {
        p->w = calloc((size_t)n - 1, sizeof *p->w);
        if (!p->w)
            goto out_cond;
    }
    for (int i = 0; i < n - 1; i++) {
        p->w[i].pool = p;
        p->w[i].ith = i + 1;
        if (pthread_create(&p->w[i].th, NULL, worker_main, &p->w[i]))
            goto out_threads;
        p->started++;
    }
    return p;

out_threads:
    cpu_pool_free(p);
    return NULL;
out_cond:
    pthread_cond_destroy(&p->cv);
out_mutex:
    pthread_mutex_destroy(&p->mu);
out_free:
    free(p);
    return NULL;
}

void cpu_pool_free(struct cpu_pool *p)
{
    if (!p)
        return;
    pthread_mutex_lock(&p->mu);
    atomic_store_explicit(&p->stop, true, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->started; i++)
        pthread_join(p->w[i].th, NULL);
    pthread_cond_destroy(&p->cv);
    pthread_mutex_destroy(&p->mu);
    free(p->w);
    free(p);
}

int cpu_pool_size(const struct cpu_pool *p)
{
    return p->n;
}

void cpu_pool_stats(const struct cpu_pool *p, unsigned long *stalls,
                    unsigned long *solo_windows)
{
    *stalls = p->n_stalls;
    *solo_windows = p->n_solo_windows;
}

/* Counts one multi-thread dispatch and whether it stalled; a window with
 * too many stalls sends the pool solo for SOLO_NS. */
static void note_dispatch(struct cpu_pool *p, bool stalled, long now)
{
    p->n_stalls += stalled;
    p->window_stalls += stalled;
    if (++p->window_runs < WINDOW)
        return;
    if (p->window_stalls > STALL_LIMIT) {
        p->solo_until = now + SOLO_NS;
        p->n_solo_windows++;
    }
    p->window_runs = 0;
    p->window_stalls = 0;
}

void cpu_pool_run(struct cpu_pool *p, int nth, cpu_task_fn fn, void *arg)
{
    if (nth > p->n)
        nth = p->n;
    if (nth > 1 && p->solo_until) {
        if (now_ns() < p->solo_until)
            nth = 1; /* contended: the caller alone beats waiting for a preempted worker */
        else
            p->solo_until = 0; /* probe all threads again */
    }
    if (nth <= 1) {
        fn(arg, 0, 1);
        return;
    }
    p->fn = fn;
    p->arg = arg;
    atomic_store_explicit(&p->nth, nth, memory_order_relaxed);
    atomic_store_explicit(&p->finished, 0, memory_order_relaxed);
    atomic_store_explicit(&p->state, 0, memory_order_release); /* open, none joined */
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_acq_rel);
    pthread_mutex_lock(&p->mu);
    if (p->sleeping)
        pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    long t0 = now_ns();
    fn(arg, 0, nth);
    /* close: late workers stay out; wait for those that joined */
    unsigned joined = atomic_fetch_or_explicit(&p->state, CLOSED, memory_order_acq_rel);
    long t1 = now_ns(), t2 = t1;
    /* a joined worker that is slow to finish was most likely preempted:
     * after a short spin, yield so the scheduler can run it */
    for (unsigned i = 0; atomic_load_explicit(&p->finished, memory_order_acquire) < joined; i++) {
        if (i < 16384)
            cpu_relax();
        else
            sched_yield();
    }
    if (joined)
        t2 = now_ns();
    note_dispatch(p, t2 - t1 > STALL_NS && t2 - t1 > t1 - t0, t2);
}
