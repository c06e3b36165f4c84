/* engine_thread.c - see engine_thread.h. A mutex and condition variable
 * hand the step over; the eventfd carries the completion back, because
 * that is what io_uring can wait on. With spin_ns each side first watches
 * the other's flag (pending, finished) without sleeping: a wake-up through
 * the kernel costs µs to tens of µs (more from a deep C-state), twice per
 * step, while the loop's own work between two steps is a few µs. The
 * spinners yield between looks: with a core each the call returns at once
 * (a fraction of a µs), and where busy threads outnumber the cores it lets
 * the engine's workers and the clients run instead of waiting out a time
 * slice (on 2 cores with a polling client: delivery p50 2.4 ms with pause
 * instructions, 16 µs yielding). */
#include "engine_thread.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <time.h>
#include <unistd.h>

#include "log.h"

/* Test fault injection, read once at start: every step the thread runs
 * sleeps this many ms first, as a hung GPU step would, so the tests can
 * check that the watchdog pings stop (loop.c). Nothing in production sets
 * it; the daemon warns when it is set. */
#define STALL_ENV "L8_TEST_STALL_STEP_MS"
#define STALL_MAX_MS 600000u

struct l8d_engine_thread {
    struct l8_engine *e;
    pthread_t thread;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done_fd;
    _Atomic uint64_t spin_ns; /* how long either side spins before it sleeps
                                 (a reload may change it while a step runs) */
    /* Written under mu; atomic so that a spinning side may read them
     * without it (then takes mu to act on what it saw). */
    atomic_bool quit;
    atomic_bool pending; /* submitted, not yet started */
    bool busy;           /* submitted, result not yet taken */
    atomic_bool finished; /* result ready */
    atomic_bool watched; /* the loop is spinning on finished: no eventfd */
    struct l8_seq *seqs;
    uint32_t n;
    int status;
    uint64_t t_start, t_end;
    uint32_t stall_ms;   /* STALL_ENV: injected delay per step (0: none) */
    l8d_et_masks_fn *masks;
    l8d_et_after_fn *after;
    void *hook_ud;
    /* The masks' thread: one job per step, handed over under mmu. */
    pthread_t mthread;
    bool mstarted;
    pthread_mutex_t mmu;
    pthread_cond_t mcv;
    bool mposted, mdone, mquit;
    struct l8_seq *mseqs;
    uint32_t mn;
};

static void *masks_run(void *arg)
{
    struct l8d_engine_thread *t = arg;
    pthread_mutex_lock(&t->mmu);
    for (;;) {
        while (!t->mposted && !t->mquit)
            pthread_cond_wait(&t->mcv, &t->mmu);
        if (t->mquit)
            break;
        t->mposted = false;
        pthread_mutex_unlock(&t->mmu);
        t->masks(t->hook_ud, t->mseqs, t->mn);
        pthread_mutex_lock(&t->mmu);
        t->mdone = true;
        pthread_cond_broadcast(&t->mcv);
    }
    pthread_mutex_unlock(&t->mmu);
    return NULL;
}

static void masks_post(struct l8d_engine_thread *t, struct l8_seq *seqs, uint32_t n)
{
    pthread_mutex_lock(&t->mmu);
    t->mseqs = seqs;
    t->mn = n;
    t->mdone = false;
    t->mposted = true;
    pthread_cond_signal(&t->mcv);
    pthread_mutex_unlock(&t->mmu);
}

/* The engine's l8_masks_wait_fn, and the engine thread's after the step
 * (an error, or a step that sampled before it needed them): idempotent. */
static void masks_wait(void *ud)
{
    struct l8d_engine_thread *t = ud;
    pthread_mutex_lock(&t->mmu);
    while (!t->mdone)
        pthread_cond_wait(&t->mcv, &t->mmu);
    pthread_mutex_unlock(&t->mmu);
}

static bool any_mask(const struct l8_seq *seqs, uint32_t n)
{
    for (uint32_t i = 0; i < n; i++)
        if (seqs[i].allowed)
            return true;
    return false;
}

static void *run(void *arg)
{
    struct l8d_engine_thread *t = arg;
    pthread_mutex_lock(&t->mu);
    for (;;) {
        while (!t->pending && !t->quit)
            pthread_cond_wait(&t->cv, &t->mu);
        if (t->quit)
            break;
        t->pending = false;
        struct l8_seq *seqs = t->seqs;
        uint32_t n = t->n;
        pthread_mutex_unlock(&t->mu);
        uint64_t t0 = l8_now_ns();
        if (t->stall_ms) {
            struct timespec ts = { (time_t)(t->stall_ms / 1000),
                                   (long)(t->stall_ms % 1000) * 1000000L };
            while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
                ;
        }
        const bool masks = t->masks && any_mask(seqs, n);
        if (masks)
            masks_post(t, seqs, n);
        l8_engine_set_masks_wait(t->e, masks ? masks_wait : NULL, t);
        int rc = l8_engine_step(t->e, seqs, n);
        if (masks)
            masks_wait(t);
        if (t->after)
            t->after(t->hook_ud, seqs, n, rc);
        uint64_t t1 = l8_now_ns();
        pthread_mutex_lock(&t->mu);
        t->status = rc;
        t->t_start = t0;
        t->t_end = t1;
        t->finished = true;
        pthread_mutex_unlock(&t->mu);
        /* The wake-up after the unlock (the mutex has published the result):
         * the loop, woken on another core, takes the mutex at once instead
         * of sleeping on it until this thread waits again (a second
         * wake-up on every token's way out). */
        /* Dekker with l8d_et_watch(false): finished is stored (seq_cst)
         * before watched is loaded, and the loop stores watched before it
         * loads finished, so one of the two sees the other. */
        uint64_t one = 1;
        if (!atomic_load(&t->watched) && write(t->done_fd, &one, sizeof(one)) < 0) {
            /* cannot fail: the loop reads the counter after every step */
        }
        /* The next step usually comes within µs of the loop seeing this one. */
        const uint64_t spin = atomic_load_explicit(&t->spin_ns, memory_order_relaxed);
        for (uint64_t s0 = l8_now_ns();
             spin && !atomic_load_explicit(&t->pending, memory_order_relaxed) &&
             !atomic_load_explicit(&t->quit, memory_order_relaxed) &&
             l8_now_ns() - s0 < spin;)
            sched_yield();
        pthread_mutex_lock(&t->mu);
    }
    pthread_mutex_unlock(&t->mu);
    return NULL;
}

int l8d_et_start(struct l8_engine *e, uint64_t spin_ns, struct l8d_engine_thread **out)
{
    struct l8d_engine_thread *t = calloc(1, sizeof(*t));
    int rc;
    if (!t)
        return -ENOMEM;
    t->e = e;
    t->spin_ns = spin_ns;
    const char *stall = getenv(STALL_ENV);
    if (stall && *stall) {
        char *end;
        unsigned long ms = strtoul(stall, &end, 10);
        if (*end || ms > STALL_MAX_MS) {
            log_err("%s=%s: expected milliseconds up to %u", STALL_ENV, stall, STALL_MAX_MS);
            free(t);
            return -EINVAL;
        }
        t->stall_ms = (uint32_t)ms;
        if (ms)
            log_warn("%s=%lu: every engine step sleeps %lu ms first (test fault injection)",
                     STALL_ENV, ms, ms);
    }
    pthread_mutex_init(&t->mu, NULL);
    pthread_cond_init(&t->cv, NULL);
    pthread_mutex_init(&t->mmu, NULL);
    pthread_cond_init(&t->mcv, NULL);
    t->done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (t->done_fd < 0) {
        rc = -errno;
        goto err;
    }
    if ((rc = -pthread_create(&t->thread, NULL, run, t)) < 0)
        goto err;
    *out = t;
    return 0;
err:
    if (t->done_fd >= 0)
        close(t->done_fd);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mmu);
    pthread_cond_destroy(&t->mcv);
    free(t);
    return rc;
}

void l8d_et_stop(struct l8d_engine_thread *t)
{
    if (!t)
        return;
    pthread_mutex_lock(&t->mu);
    t->quit = true;
    pthread_cond_signal(&t->cv);
    pthread_mutex_unlock(&t->mu);
    pthread_join(t->thread, NULL);
    if (t->mstarted) {
        pthread_mutex_lock(&t->mmu);
        t->mquit = true;
        pthread_cond_signal(&t->mcv);
        pthread_mutex_unlock(&t->mmu);
        pthread_join(t->mthread, NULL);
    }
    close(t->done_fd);
    pthread_mutex_destroy(&t->mu);
    pthread_cond_destroy(&t->cv);
    pthread_mutex_destroy(&t->mmu);
    pthread_cond_destroy(&t->mcv);
    free(t);
}

int l8d_et_done_fd(const struct l8d_engine_thread *t) { return t->done_fd; }

int l8d_et_set_hooks(struct l8d_engine_thread *t, l8d_et_masks_fn *masks,
                     l8d_et_after_fn *after, void *ud)
{
    t->masks = masks;
    t->after = after;
    t->hook_ud = ud;
    if (masks && !t->mstarted) {
        int rc = -pthread_create(&t->mthread, NULL, masks_run, t);
        if (rc < 0) {
            t->masks = NULL;
            return rc;
        }
        t->mstarted = true;
    }
    return 0;
}

void l8d_et_set_spin(struct l8d_engine_thread *t, uint64_t spin_ns)
{
    atomic_store_explicit(&t->spin_ns, spin_ns, memory_order_relaxed);
}

bool l8d_et_finished(struct l8d_engine_thread *t)
{
    return atomic_load_explicit(&t->finished, memory_order_acquire);
}

bool l8d_et_watch(struct l8d_engine_thread *t, bool on)
{
    atomic_store(&t->watched, on);
    return atomic_load(&t->finished);
}

int l8d_et_submit(struct l8d_engine_thread *t, struct l8_seq *seqs, uint32_t n)
{
    pthread_mutex_lock(&t->mu);
    if (t->busy) {
        pthread_mutex_unlock(&t->mu);
        return -EBUSY;
    }
    t->seqs = seqs;
    t->n = n;
    t->busy = true;
    t->pending = true;
    t->finished = false;
    pthread_mutex_unlock(&t->mu);
    /* Signalled after the unlock, so the engine thread does not wake only
     * to sleep on the mutex this thread still holds. */
    pthread_cond_signal(&t->cv);
    return 0;
}

int l8d_et_result(struct l8d_engine_thread *t, int *status, uint64_t *t_start,
                  uint64_t *t_end)
{
    pthread_mutex_lock(&t->mu);
    if (!t->busy || !t->finished) {
        pthread_mutex_unlock(&t->mu);
        return -EBUSY;
    }
    *status = t->status;
    *t_start = t->t_start;
    *t_end = t->t_end;
    t->busy = false;
    t->finished = false;
    pthread_mutex_unlock(&t->mu);
    return 0;
}
