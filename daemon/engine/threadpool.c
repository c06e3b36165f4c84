/* threadpool.c - persistent workers woken per parallel-for. See threadpool.h.
 *
 * A job is published by bumping an atomic generation number (release)
 * after its fields are written; workers spin briefly on the generation
 * (a step issues dozens of parallel-fors back to back, and a futex wake
 * costs more than a small matmul), then sleep on a condition variable, so
 * an idle engine does not burn cores on a machine it shares. Completion
 * is counted down atomically; the last worker wakes the caller.
 *
 * Lost wake-ups: a sleeper re-checks the generation under the mutex, and
 * the caller broadcasts under the same mutex after bumping it; likewise the
 * caller re-checks `running` under the mutex before waiting, and the last
 * worker signals under it. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#define SPIN_ITERS 4000

struct l8_tp {
    int n;                      /* threads including the caller */
    pthread_t *th;              /* [n - 1] workers */
    pthread_mutex_t mu;
    pthread_cond_t wake;        /* workers wait for a new generation */
    pthread_cond_t done;        /* caller waits for running == 0 */
    atomic_ulong gen;           /* bumped per job */
    atomic_int running;         /* workers still inside the current job */
    atomic_int quit;
    /* The current job: written before gen is bumped (release), read after
     * gen is seen (acquire). */
    l8_tp_fn fn;
    void *ctx;
    size_t n_items, grain;
    atomic_size_t next;         /* next unclaimed index */
};

struct worker_arg { struct l8_tp *tp; int tid; };

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void run_chunks(struct l8_tp *tp, int tid)
{
    for (;;) {
        size_t b = atomic_fetch_add_explicit(&tp->next, tp->grain, memory_order_relaxed);
        if (b >= tp->n_items)
            return;
        size_t e = b + tp->grain < tp->n_items ? b + tp->grain : tp->n_items;
        tp->fn(tp->ctx, b, e, tid);
    }
}

static void *worker(void *p)
{
    struct worker_arg a = *(struct worker_arg *)p;
    struct l8_tp *tp = a.tp;
    free(p);
    unsigned long seen = 0;
    for (;;) {
        int i = 0;
        while (atomic_load_explicit(&tp->gen, memory_order_acquire) == seen
               && !atomic_load_explicit(&tp->quit, memory_order_relaxed) && i++ < SPIN_ITERS)
            cpu_relax();
        if (atomic_load_explicit(&tp->gen, memory_order_acquire) == seen) {
            pthread_mutex_lock(&tp->mu);
            while (!atomic_load(&tp->quit) && atomic_load(&tp->gen) == seen)
                pthread_cond_wait(&tp->wake, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->quit))
            break;
        seen = atomic_load_explicit(&tp->gen, memory_order_acquire);
        run_chunks(tp, a.tid);
        /* acq_rel: this worker's result stores happen before the caller,
         * which reads running with acquire, returns. */
        if (atomic_fetch_sub_explicit(&tp->running, 1, memory_order_acq_rel) == 1) {
            pthread_mutex_lock(&tp->mu);
            pthread_cond_signal(&tp->done);
            pthread_mutex_unlock(&tp->mu);
        }
    }
    return NULL;
}

struct l8_tp *l8_tp_new(int nthreads)
{
    if (nthreads < 1)
        nthreads = 1;
    struct l8_tp *tp = calloc(1, sizeof(*tp));
    if (!tp)
        return NULL;
    tp->n = 1;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->wake, NULL);
    pthread_cond_init(&tp->done, NULL);
    atomic_init(&tp->gen, 0);
    atomic_init(&tp->running, 0);
    atomic_init(&tp->quit, 0);
    atomic_init(&tp->next, 0);
    tp->th = calloc((size_t)nthreads, sizeof(pthread_t));
    if (!tp->th)
        goto err;
    for (int i = 1; i < nthreads; i++) {
        struct worker_arg *a = malloc(sizeof(*a));
        if (!a)
            goto err;
        a->tp = tp;
        a->tid = i;
        if (pthread_create(&tp->th[i - 1], NULL, worker, a) != 0) {
            free(a);
            goto err;
        }
        tp->n++;
    }
    return tp;
err:
    l8_tp_free(tp);
    return NULL;
}

void l8_tp_free(struct l8_tp *tp)
{
    if (!tp)
        return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->quit, 1);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++)
        pthread_join(tp->th[i - 1], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->wake);
    pthread_cond_destroy(&tp->done);
    free(tp->th);
    free(tp);
}

int l8_tp_nthreads(const struct l8_tp *tp) { return tp->n; }

void l8_tp_for(struct l8_tp *tp, size_t n, size_t grain, l8_tp_fn fn, void *ctx)
{
    if (n == 0)
        return;
    if (grain == 0)
        grain = (n + (size_t)tp->n - 1) / (size_t)tp->n;
    /* Not worth waking anybody for a single chunk. */
    if (tp->n == 1 || grain >= n) {
        fn(ctx, 0, n, 0);
        return;
    }
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_items = n;
    tp->grain = grain;
    atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->running, tp->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->gen, 1, memory_order_release);
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);

    run_chunks(tp, 0);

    for (int i = 0; atomic_load_explicit(&tp->running, memory_order_acquire) > 0
                    && i < SPIN_ITERS; i++)
        cpu_relax();
    if (atomic_load_explicit(&tp->running, memory_order_acquire) > 0) {
        pthread_mutex_lock(&tp->mu);
        while (atomic_load_explicit(&tp->running, memory_order_acquire) > 0)
            pthread_cond_wait(&tp->done, &tp->mu);
        pthread_mutex_unlock(&tp->mu);
    }
}
