/* threadpool.c - persistent workers woken per parallel-for. See threadpool.h.
 *
 * A decode step issues a few dozen parallel-fors of tens of microseconds
 * each, on a machine shared with other processes, so the hand-off is what
 * decides whether a second thread helps:
 *
 *  - The caller never waits for a worker to show up. Completion counts
 *    finished indices, not threads: if the worker is descheduled (another
 *    process holds its core) the caller claims every chunk itself and
 *    returns as soon as they are done. It only ever waits for chunks that
 *    a worker has actually claimed.
 *  - A job is identified by a 32-bit number kept in the high half of the
 *    claim word (next index in the low half). Chunks are claimed by CAS on
 *    that word, so a worker that wakes late for a finished job fails its
 *    claim instead of touching the next job's indices. The caller closes
 *    the word (next job's number, no index free) before it writes the
 *    next job's fields, so that holds for a late worker that read some.
 *  - Workers spin (pause) on the job number for a while after each job,
 *    then sleep on a futex; the caller makes the wake syscall only when a
 *    worker is asleep. The caller spins on the done count, then sleeps on
 *    it; the finisher wakes it only if it sleeps.
 *  - The words each side writes (claim, done, the job number) sit on their
 *    own cache lines, so spinning on one does not bounce another.
 *
 * Lost wake-ups: a worker announces itself in `sleepers` (seq_cst) before
 * re-checking the job number and futex_wait re-checks it atomically; the
 * caller bumps the job number (seq_cst) before reading `sleepers`. The
 * caller's `waiting` flag and the done count pair up the same way. */
#include "threadpool.h"

#include <errno.h>
#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

/* About 50-100 us of pause instructions: longer than the gaps between
 * the parallel-fors of a step, short against the gap between requests. */
#define SPIN_ITERS 2000
#define CACHE_LINE 64

struct l8_tp {
    /* Read-mostly. */
    int n;                      /* threads including the caller */
    pthread_t *th;              /* [n - 1] workers */
    /* The current job, stored (relaxed) before the job number is
     * published (release); a worker validates what it read with its CAS
     * on `claim`, which fails once the job is over. */
    _Atomic(l8_tp_fn) fn;
    _Atomic(void *) ctx;
    atomic_size_t n_items, grain;
    /* Written by the caller per job; polled by spinning workers. */
    _Alignas(CACHE_LINE) atomic_uint job;
    atomic_int quit;
    /* Workers inside futex_wait on `job`. */
    _Alignas(CACHE_LINE) atomic_int sleepers;
    /* (job << 32) | next unclaimed index. */
    _Alignas(CACHE_LINE) atomic_uint_least64_t claim;
    /* Indices finished in the current job; the caller sleeps on it. */
    _Alignas(CACHE_LINE) atomic_uint done;
    atomic_int waiting;
};

struct worker_arg { struct l8_tp *tp; int tid; };

static inline void cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#endif
}

static void futex_wait(atomic_uint *addr, unsigned val)
{
    syscall(SYS_futex, addr, FUTEX_WAIT_PRIVATE, val, NULL, NULL, 0);
}

static void futex_wake_all(atomic_uint *addr)
{
    syscall(SYS_futex, addr, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

/* Claims and runs chunks of job `job` until none is left (or the job is
 * over). */
static void run_chunks(struct l8_tp *tp, unsigned job, int tid)
{
    const l8_tp_fn fn = atomic_load_explicit(&tp->fn, memory_order_relaxed);
    void *ctx = atomic_load_explicit(&tp->ctx, memory_order_relaxed);
    const size_t n = atomic_load_explicit(&tp->n_items, memory_order_relaxed);
    const size_t grain = atomic_load_explicit(&tp->grain, memory_order_relaxed);
    /* Pairs with the release fence in l8_tp_for: if any field above is
     * already the next job's, the claim word is closed for this one (every
     * read of it below sees the close or later), so a chunk of this job
     * is never run with the next job's n, fn or ctx. */
    atomic_thread_fence(memory_order_acquire);
    uint64_t c = atomic_load_explicit(&tp->claim, memory_order_acquire);
    for (;;) {
        if ((unsigned)(c >> 32) != job)
            return;
        size_t b = (size_t)(uint32_t)c;
        if (b >= n)
            return;
        size_t e = b + grain < n ? b + grain : n;
        /* acquire: a successful claim of job `job` means the fields read
         * above are that job's (they were stored before it was published
         * and the job cannot end while this chunk is unfinished). */
        if (!atomic_compare_exchange_weak_explicit(&tp->claim, &c,
                                                   ((uint64_t)job << 32) | (uint64_t)e,
                                                   memory_order_acquire, memory_order_acquire))
            continue;
        fn(ctx, b, e, tid);
        /* release: the chunk's result stores happen before the caller,
         * which reads done with acquire, returns. The finisher of the
         * last chunk wakes a sleeping caller. */
        unsigned prev = atomic_fetch_add(&tp->done, (unsigned)(e - b));
        if (prev + (unsigned)(e - b) == (unsigned)n && tid != 0
            && atomic_load(&tp->waiting))
            futex_wake_all(&tp->done);
        c = atomic_load_explicit(&tp->claim, memory_order_acquire);
    }
}

static void *worker(void *p)
{
    struct worker_arg a = *(struct worker_arg *)p;
    struct l8_tp *tp = a.tp;
    free(p);
    unsigned seen = atomic_load(&tp->job);
    for (;;) {
        unsigned j;
        int i = 0;
        while ((j = atomic_load_explicit(&tp->job, memory_order_acquire)) == seen
               && i++ < SPIN_ITERS)
            cpu_relax();
        while (j == seen && !atomic_load(&tp->quit)) {
            atomic_fetch_add(&tp->sleepers, 1);
            if (atomic_load(&tp->job) == seen && !atomic_load(&tp->quit))
                futex_wait(&tp->job, seen);
            atomic_fetch_sub(&tp->sleepers, 1);
            j = atomic_load_explicit(&tp->job, memory_order_acquire);
        }
        if (atomic_load(&tp->quit))
            break;
        seen = j;
        run_chunks(tp, j, a.tid);
    }
    return NULL;
}

struct l8_tp *l8_tp_new(int nthreads)
{
    if (nthreads < 1)
        nthreads = 1;
    struct l8_tp *tp = aligned_alloc(CACHE_LINE, (sizeof(*tp) + CACHE_LINE - 1)
                                                 / CACHE_LINE * CACHE_LINE);
    if (!tp)
        return NULL;
    tp->n = 1;
    tp->th = NULL;
    atomic_init(&tp->fn, NULL);
    atomic_init(&tp->ctx, NULL);
    atomic_init(&tp->n_items, 0);
    atomic_init(&tp->grain, 1);
    atomic_init(&tp->job, 0);
    atomic_init(&tp->quit, 0);
    atomic_init(&tp->sleepers, 0);
    atomic_init(&tp->claim, 0);
    atomic_init(&tp->done, 0);
    atomic_init(&tp->waiting, 0);
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
    atomic_store(&tp->quit, 1);
    atomic_fetch_add(&tp->job, 1);
    futex_wake_all(&tp->job);
    for (int i = 1; i < tp->n; i++)
        pthread_join(tp->th[i - 1], NULL);
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
    /* Not worth waking anybody for a single chunk. (Indices live in 32
     * bits of the claim word; no caller comes near that.) */
    if (tp->n == 1 || grain >= n || n > UINT32_MAX) {
        fn(ctx, 0, n, 0);
        return;
    }
    /* The previous job is complete (done == its n), and its claim word
     * says so (index n) only to a worker that read that job's n. A worker
     * late for it may read this job's fields below, so the word is closed
     * (the new job's number, no index free) before they change: such a
     * worker's claim fails. Without the close, a smaller job followed by a
     * larger one let a late worker run the new job's indices past the old
     * n before the new job began, and count them into its done twice. */
    const unsigned job = atomic_load_explicit(&tp->job, memory_order_relaxed) + 1;
    atomic_store_explicit(&tp->claim, ((uint64_t)job << 32) | UINT32_MAX, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
    atomic_store_explicit(&tp->fn, fn, memory_order_relaxed);
    atomic_store_explicit(&tp->ctx, ctx, memory_order_relaxed);
    atomic_store_explicit(&tp->n_items, n, memory_order_relaxed);
    atomic_store_explicit(&tp->grain, grain, memory_order_relaxed);
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->claim, (uint64_t)job << 32, memory_order_release);
    atomic_store(&tp->job, job);        /* seq_cst: publish, then read sleepers */
    if (atomic_load(&tp->sleepers) > 0)
        futex_wake_all(&tp->job);

    run_chunks(tp, job, 0);

    for (int i = 0; atomic_load_explicit(&tp->done, memory_order_acquire) != (unsigned)n
                    && i < SPIN_ITERS; i++)
        cpu_relax();
    if (atomic_load_explicit(&tp->done, memory_order_acquire) != (unsigned)n) {
        atomic_store(&tp->waiting, 1);
        unsigned d;
        while ((d = atomic_load(&tp->done)) != (unsigned)n)
            futex_wait(&tp->done, d);
        atomic_store(&tp->waiting, 0);
    }
}
