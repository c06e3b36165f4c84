/* threadpool.c - persistent workers woken per parallel-for. See threadpool.h.
 *
 * A job is published under the mutex with a new generation number; workers
 * wake on the condition variable, claim chunks with an atomic counter and
 * count themselves out. Sleeping (not spinning) between jobs: the machine
 * may be shared and a spinning pool would steal cores from the others. */
#include "threadpool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

struct l8_tp {
    int n;                      /* threads including the caller */
    pthread_t *th;              /* [n - 1] workers */
    pthread_mutex_t mu;
    pthread_cond_t wake;        /* workers wait for a new generation */
    pthread_cond_t done;        /* caller waits for running == 0 */
    unsigned long gen;          /* bumped per job (under mu) */
    int running;                /* workers still inside the current job */
    int quit;
    /* The current job; written under mu before gen is bumped. */
    l8_tp_fn fn;
    void *ctx;
    size_t n_items, grain;
    atomic_size_t next;         /* next unclaimed index */
};

struct worker_arg { struct l8_tp *tp; int tid; };

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
    pthread_mutex_lock(&tp->mu);
    for (;;) {
        while (!tp->quit && tp->gen == seen)
            pthread_cond_wait(&tp->wake, &tp->mu);
        if (tp->quit)
            break;
        seen = tp->gen;
        pthread_mutex_unlock(&tp->mu);
        run_chunks(tp, a.tid);
        pthread_mutex_lock(&tp->mu);
        /* The mutex orders this worker's result stores before the
         * caller's return from l8_tp_for. */
        if (--tp->running == 0)
            pthread_cond_signal(&tp->done);
    }
    pthread_mutex_unlock(&tp->mu);
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
    tp->quit = 1;
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
    pthread_mutex_lock(&tp->mu);
    tp->fn = fn;
    tp->ctx = ctx;
    tp->n_items = n;
    tp->grain = grain;
    atomic_store_explicit(&tp->next, 0, memory_order_relaxed);
    tp->running = tp->n - 1;
    tp->gen++;
    pthread_cond_broadcast(&tp->wake);
    pthread_mutex_unlock(&tp->mu);

    run_chunks(tp, 0);

    pthread_mutex_lock(&tp->mu);
    while (tp->running > 0)
        pthread_cond_wait(&tp->done, &tp->mu);
    pthread_mutex_unlock(&tp->mu);
}
