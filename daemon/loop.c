/* loop.c - llama8d's event loop: one io_uring, one thread, all state.
 *
 * Operations in flight (uring_op.h: their user_data; the session arms RECV
 * and DOORBELL, l8d_session_arm):
 *   ACCEPT    multishot accept on the listening socket (re-armed when a
 *             CQE comes without IORING_CQE_F_MORE)
 *   LISTEN    poll of the listening socket in place of ACCEPT while out of
 *             descriptors (io_uring's accept fails at once then, with or
 *             without a connection waiting)
 *   RECV      recvmsg of one control datagram per client
 *   DOORBELL  8-byte read of a client's submission eventfd
 *   ENGINE    8-byte read of the engine thread's completion eventfd
 *   SIGNAL    read of the signalfd (SIGTERM, SIGINT: drain; SIGHUP: reload)
 *   TIMER     a timeout: watchdog, tokens/s samples, drain deadline,
 *             backlog retries
 *   WAKE      write to a client's event eventfd, at most one a client
 *   CANCEL    async cancel of a closing client's doorbell read or wake
 * Buffer lifecycle of a client's ops: 1. armed with a buffer inside the
 * session; 2. the session closes (shutdown + cancel); 3. each op's CQE
 * drops ops_pending; 4. at zero the session is freed. The generation in
 * user_data makes a CQE for a freed slot harmless.
 *
 * One pass: reap CQEs -> take submissions (doorbell-kicked clients; all
 * clients after a step) -> start the next step if none is in flight ->
 * publish events and ring doorbells of sleeping clients -> free closed
 * sessions -> sleep in io_uring_submit_and_wait (with spin_us, a step in
 * flight is first waited for by spinning on the engine thread's flag:
 * spin_for_step).
 *
 * The submission-ring need-wakeup flag is clear while a step is in flight:
 * the loop reads every ring when the step completes, and a request cannot
 * start before then anyway, so busy clients submit without system calls.
 * Before the loop sleeps with the engine idle it sets every flag, fences,
 * and reads the rings once more. */
#include "daemon.h"

#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "log.h"
#include "uring_op.h"

#define TICK_NS      (100ull * 1000000ull)   /* housekeeping period */
#define FAST_TICK_NS (1ull * 1000000ull)     /* while a client's backlog waits */
/* A step counts as hung once it has run step_stall_ms plus STALL_FACTOR
 * times its expected duration (its tokens x the slowest recent ns per
 * token). The factor covers what the per-token figure does not see: a
 * chunk deep in a long context (attention at 128k positions costs ~5x the
 * projections per token on the 8B model) and a machine slowed by others. */
#define STALL_FACTOR 8
/* Per completed step the estimate keeps 15/16 of itself or the new sample,
 * whichever is larger: one slow outlier fades over a few dozen steps. */
#define STALL_DECAY_SHIFT 4

static void arm_accept(struct l8d *d)
{
    if (d->accept_armed || d->listen_fd < 0 || d->state != L8D_RUNNING || d->idle_exit ||
        (d->accept_resume_ns && l8_now_ns() < d->accept_resume_ns))
        return;
    struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
    if (d->accept_by_poll) {
        io_uring_prep_poll_add(sqe, d->listen_fd, POLLIN);
        io_uring_sqe_set_data64(sqe, l8d_ud(OP_LISTEN, 0, 0));
    } else {
        io_uring_prep_multishot_accept(sqe, d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        io_uring_sqe_set_data64(sqe, l8d_ud(OP_ACCEPT, 0, 0));
    }
    d->accept_armed = true;
}

static void arm_engine(struct l8d *d)
{
    struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
    io_uring_prep_read(sqe, d->et_fd, &d->et_val, sizeof(d->et_val), 0);
    io_uring_sqe_set_data64(sqe, l8d_ud(OP_ENGINE, 0, 0));
}

static void arm_signal(struct l8d *d)
{
    struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
    io_uring_prep_read(sqe, d->signal_fd, d->sig_buf, sizeof(struct signalfd_siginfo), 0);
    io_uring_sqe_set_data64(sqe, l8d_ud(OP_SIGNAL, 0, 0));
}

static bool any_backlog(struct l8d *d)
{
    for (uint32_t i = 0; i < d->n_slots; i++)
        if (d->sessions[i] && d->sessions[i]->backlog_len)
            return true;
    return false;
}

static void arm_timer(struct l8d *d)
{
    if (d->timer_armed)
        return;
    uint64_t ns = any_backlog(d) ? FAST_TICK_NS : TICK_NS;
    d->tick.tv_sec = (long long)(ns / 1000000000ull);
    d->tick.tv_nsec = (long long)(ns % 1000000000ull);
    struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
    io_uring_prep_timeout(sqe, &d->tick, 0, 0);
    io_uring_sqe_set_data64(sqe, l8d_ud(OP_TIMER, 0, 0));
    d->timer_armed = true;
}

/* accept failed for a reason of ours, not of the connection: re-armed as
 * it was, it would fail again at once, a busy loop. Out of descriptors,
 * the connections waiting are refused with TOO_MANY_CLIENTS (through the
 * spare descriptor) and the listening socket is polled instead (a
 * connection: accept again, and refuse it too if nothing was freed
 * meanwhile); otherwise, or if that fails too, accepting pauses for a
 * tick. Logged at most every 10 s. */
static void accept_failed(struct l8d *d, int res)
{
    const uint64_t now = l8_now_ns();
    bool paused = false;
    if ((res == -EMFILE || res == -ENFILE) && l8d_session_refuse_waiting(d) == 0) {
        d->accept_by_poll = true;   /* accept again when a connection comes */
    } else {
        d->accept_resume_ns = now + TICK_NS;
        paused = true;
    }
    uint64_t skipped;
    char more[64];
    if (l8_log_ratelimit(&d->rl_accept, now, &skipped))
        log_warn("accept: %s: %s%s", strerror(-res),
                 paused ? "accepting paused for 100 ms"
                        : "connections refused with TOO_MANY_CLIENTS while it lasts",
                 l8_log_more(more, skipped));
}

static struct l8d_session *session_of(struct l8d *d, uint64_t u)
{
    uint32_t slot = l8d_ud_slot(u);
    if (slot >= d->n_slots)
        return NULL;
    struct l8d_session *s = d->sessions[slot];
    return s && s->gen == l8d_ud_gen(u) ? s : NULL;
}

/* ---------------------------------------------------------------- steps */


static void start_step(struct l8d *d)
{
    if (d->step_in_flight)
        return;
    struct l8_seq *seqs;
    uint32_t n;
    int rc = l8_sched_build_step(d->sched, &seqs, &n);
    if (rc < 0 || n == 0) {
        d->gap_open = false;   /* what remains is held: the wait is not ours */
        return;
    }
    uint64_t t = l8_now_ns();
    const struct l8_sched_slot *slots = l8_sched_step_slots(d->sched);
    for (uint32_t i = 0; i < n; i++) {
        if (!slots[i].first)
            continue;
        struct l8d_req *r = slots[i].user;
        if (!r || !r->live)
            continue;
        r->cached_tokens = slots[i].cached_tokens;
        r->started = true;
        struct l8d_usage *u = &d->usage[r->s->usage_i];
        u->prompt_tokens += r->prompt_tokens > r->cached_tokens
                                ? r->prompt_tokens - r->cached_tokens : 0;
        u->prompt_tokens_cached += r->cached_tokens;
        struct l8_event ev = { .request_id = slots[i].id, .t_ns = t, .kind = L8_EV_STARTED,
                               .token = r->prompt_tokens, .index = slots[i].cached_tokens,
                               .logprob = 0.0f };
        l8d_session_push(r->s, &ev);
    }
    if ((rc = l8d_et_submit(d->et, seqs, n)) < 0) {
        log_err("engine thread refused a step: %s", strerror(-rc));
        l8_sched_step_done(d->sched, seqs, n, rc, t);
        return;
    }
    d->step_in_flight = true;
    d->step_seqs = seqs;
    d->step_n = n;
    d->step_t_submit = t;
    d->step_tokens = 0;
    d->step_decode = true;
    for (uint32_t i = 0; i < n; i++) {
        d->step_tokens += seqs[i].n_tokens;
        d->step_decode &= !slots[i].prefill;
    }
    /* Clients need not ring while the step runs: see the top comment. */
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct l8d_session *s = d->sessions[i];
        if (s && s->state == L8D_SESS_READY)
            atomic_store_explicit(&s->sq_ctl->flags, 0, memory_order_relaxed);
    }
}

static uint64_t step_bound_ns(const struct l8d *d)
{
    return (uint64_t)d->conf.step_stall_ms * 1000000ull +
           STALL_FACTOR * d->step_tok_ns * (d->step_tokens ? d->step_tokens : 1);
}

/* Takes the step's result if it is done (the eventfd also fires after a
 * step the spin already took). Returns whether it took one. */
static bool on_engine_done(struct l8d *d)
{
    int status;
    uint64_t t0, t1;
    if (!d->step_in_flight || l8d_et_result(d->et, &status, &t0, &t1) < 0)
        return false;
    d->step_in_flight = false;
    if (!d->step_stalled) {
        uint64_t per_tok = (t1 - t0) / (d->step_tokens ? d->step_tokens : 1);
        uint64_t decayed = d->step_tok_ns - (d->step_tok_ns >> STALL_DECAY_SHIFT);
        d->step_tok_ns = per_tok > decayed ? per_tok : decayed;
    } else {
        /* Not learnt from: a hang that cleared would otherwise stretch the
         * bound so far that the next hang went unnoticed for hours. */
        d->step_stalled = false;
        log_notice("the stalled engine step finished after %.1f s: watchdog pings resume",
                   (double)(t1 - d->step_t_submit) / 1e9);
        sd_notifyf(0, "STATUS=serving %s on %s", d->model_name,
                   l8_backend_name(d->backend));
    }
    d->steps++;
    d->step_ns += t1 - t0;
    d->fed_tokens += d->step_tokens;
    if (d->step_decode) {
        d->decode_steps++;
        d->decode_ns += t1 - t0;
        d->decode_rows += d->step_n;
    }
    if (d->gap_open && t0 > d->last_step_end) {
        d->gaps++;
        d->gap_ns += t0 - d->last_step_end;
    }
    d->last_step_end = t1;
    l8_sched_step_done(d->sched, d->step_seqs, d->step_n, status, t1);
    d->gap_open = !l8_sched_idle(d->sched);
    if (status == -EIO) {
        /* A device fault: the engine's state cannot be trusted. Exit
         * non-zero so the service manager restarts us; clients see a clean
         * hang-up. */
        log_err("engine device failure: exiting");
        d->exit_code = 2;
        d->state = L8D_STOPPED;
    }
    return true;
}

/* Waits for the step in flight without sleeping until spin_ns after its
 * start: true when it finished, false past that or when a completion (a
 * signal, a timer, a connection) needs the loop. A longer step (a hung one
 * too) is waited for asleep. */
static bool spin_for_step(struct l8d *d)
{
    const uint64_t end = d->step_t_submit + d->spin_ns;
    if (l8_now_ns() >= end)
        return false;
    /* Watched, the engine thread skips its eventfd write: a system call on
     * its way out of the step, and an interrupt of this thread to post the
     * read's CQE that nobody waits for. */
    bool done = l8d_et_watch(d->et, true);
    while (!done && l8_now_ns() < end && !io_uring_cq_ready(&d->ring)) {
        sched_yield();   /* not a pause: see engine_thread.c */
        done = l8d_et_finished(d->et);
    }
    return l8d_et_watch(d->et, false) || done;
}

/* ---------------------------------------------------------------- drain */

static void cancel_accept(struct l8d *d)
{
    if (d->accept_armed) {
        struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
        io_uring_prep_cancel64(sqe, l8d_ud(d->accept_by_poll ? OP_LISTEN : OP_ACCEPT, 0, 0), 0);
        io_uring_sqe_set_data64(sqe, l8d_ud(OP_CANCEL, 0, 0));
    }
}

static void begin_drain(struct l8d *d)
{
    if (d->state != L8D_RUNNING) {
        /* A second signal: stop waiting for running requests. */
        d->drain_deadline_ns = l8_now_ns();
        return;
    }
    log_notice("draining: no new requests, %u ms for running ones", d->conf.drain_timeout_ms);
    sd_notify(0, "STOPPING=1\nSTATUS=draining");
    d->state = L8D_DRAINING;
    d->drain_deadline_ns = l8_now_ns() + (uint64_t)d->conf.drain_timeout_ms * 1000000ull;
    cancel_accept(d);
}

/* idle_exit_s: no client and no request for that long. The accept is
 * cancelled first and the daemon exits only once its completion shows
 * that no connection came in meanwhile (end_idle_exit): one accepted in
 * the race is served, and one still in the listening socket's queue
 * waits there, under socket activation, for the next start. */
static bool nobody_here(const struct l8d *d)
{
    return !d->n_sessions && !d->step_in_flight && l8_sched_idle(d->sched) &&
           d->state == L8D_RUNNING;
}

static void idle_check(struct l8d *d, uint64_t now)
{
    if (!nobody_here(d) || !d->conf.idle_exit_s) {
        d->idle_since_ns = now;
        return;
    }
    if (!d->idle_exit && now - d->idle_since_ns >= (uint64_t)d->conf.idle_exit_s * 1000000000ull) {
        d->idle_exit = true;
        cancel_accept(d);
    }
}

static void end_idle_exit(struct l8d *d)
{
    if (!d->idle_exit || d->accept_armed)
        return;
    d->idle_exit = false;
    if (!nobody_here(d)) {
        d->idle_since_ns = l8_now_ns();       /* someone came: go on */
        return;
    }
    log_notice("no client for %u s (idle_exit_s): exiting", d->conf.idle_exit_s);
    sd_notify(0, "STOPPING=1\nSTATUS=idle: exiting");
    d->state = L8D_STOPPED;
}

/* One sample of the tokens generated so far, for Status's tokens/s (the
 * last 16, a second apart). */
static void sample_rate(struct l8d *d, uint64_t now)
{
    struct l8_sched_stats st;
    l8_sched_get_stats(d->sched, &st);
    d->rate_t[d->rate_i] = now;
    d->rate_tok[d->rate_i] = st.tokens_generated;
    d->rate_i = (d->rate_i + 1) % 16;
    if (d->rate_n < 16)
        d->rate_n++;
    d->last_sample_ns = now;
}

static void housekeeping(struct l8d *d)
{
    uint64_t now = l8_now_ns();
    /* A ping says the daemon makes progress: the loop runs (a loop stuck
     * anywhere never gets here) and the engine is idle or its step is
     * within its bound. A wedged step (a hung GPU, a deadlock) stops the
     * pings, and systemd restarts us after WatchdogSec; a step that ends
     * after all lets them resume. */
    if (d->step_in_flight && d->conf.step_stall_ms && !d->step_stalled &&
        now - d->step_t_submit > step_bound_ns(d)) {
        d->step_stalled = true;
        double ran = (double)(now - d->step_t_submit) / 1e9;
        double bound = (double)step_bound_ns(d) / 1e9;
        log_err("engine step (%u tokens) running for %.1f s, past its bound of %.1f s "
                "(step_stall_ms %u + %u x %.3f ms per token): the engine is hung; "
                "watchdog pings stopped", d->step_tokens, ran, bound, d->conf.step_stall_ms,
                STALL_FACTOR, (double)d->step_tok_ns / 1e6);
        sd_notifyf(0, "STATUS=engine step stalled: running %.1f s, bound %.1f s; "
                   "watchdog pings stopped", ran, bound);
    }
    if (d->watchdog_usec && !d->step_stalled &&
        now - d->last_watchdog_ns >= d->watchdog_usec * 1000ull / 2) {
        sd_notify(0, "WATCHDOG=1");
        d->last_watchdog_ns = now;
    }
    if (now - d->last_sample_ns >= 1000000000ull)
        sample_rate(d, now);
    l8d_session_tell_waiting(d, now);
    idle_check(d, now);
    /* A connection that never says Hello would hold its slot (max_clients)
     * for as long as it stays open. */
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct l8d_session *s = d->sessions[i];
        if (s && s->state == L8D_SESS_HELLO && d->conf.hello_timeout_ms &&
            now - s->t_accept_ns > (uint64_t)d->conf.hello_timeout_ms * 1000000ull) {
            log_info("connection from pid %d closed: no Hello within %u ms", (int)s->pid,
                     d->conf.hello_timeout_ms);
            l8d_session_close(s, L8_ERR_BAD_MESSAGE, "no Hello in time");
        }
    }
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct l8d_session *s = d->sessions[i];
        if (s && s->empty_rings >= L8D_EMPTY_RINGS) {
            s->empty_rings = L8D_EMPTY_RINGS - 1;   /* one read, then again at the tick */
            l8d_session_arm(s);
        }
    }
    if (d->state == L8D_DRAINING && now >= d->drain_deadline_ns) {
        for (uint32_t i = 0; i < d->n_slots; i++)
            if (d->sessions[i])
                l8d_session_cut_all(d->sessions[i]);
    }
}

/* ---------------------------------------------------------------- completions */

/* Through io_uring, not write(2): the eventfd's file is the client's too,
 * and a client that cleared its O_NONBLOCK and filled the counter would
 * block a plain write, and the loop with it. Such a write stays armed
 * until the counter has room, so at most one a client is in flight; a
 * wake asked for meanwhile is sent when it completes (its write may have
 * landed before the client last slept, and a skipped one would be lost). */
static void ring_event_doorbell(struct l8d *d, struct l8d_session *s)
{
    if (s->state == L8D_SESS_CLOSING)
        return;
    if (s->wake_armed) {
        s->wake_again = true;
        return;
    }
    struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
    io_uring_prep_write(sqe, s->eq_efd, &d->wake_val, sizeof(d->wake_val), 0);
    io_uring_sqe_set_data64(sqe, l8d_ud(OP_WAKE, s->slot, s->gen));
    s->wake_armed = true;
    s->wake_again = false;
    s->ops_pending++;
}

static void on_cqe(struct l8d *d, struct io_uring_cqe *cqe)
{
    uint64_t u = io_uring_cqe_get_data64(cqe);
    struct l8d_session *s;
    int res = cqe->res;
    switch (l8d_ud_op(u)) {
    case OP_LISTEN:   /* a connection waits: try accepting it */
        d->accept_armed = d->accept_by_poll = false;
        break;
    case OP_ACCEPT:
        if (!(cqe->flags & IORING_CQE_F_MORE))
            d->accept_armed = false;
        if (res >= 0)
            l8d_session_accept(d, res);
        else if (res != -ECANCELED && res != -ECONNABORTED && res != -EINTR)
            accept_failed(d, res);
        break;
    case OP_RECV:
        if (!(s = session_of(d, u)))
            break;
        s->recv_armed = false;
        s->ops_pending--;
        l8d_session_on_recv(s, res, s->rx_msg.msg_flags);
        s->kick = true;
        break;
    case OP_DOORBELL:
        if (!(s = session_of(d, u)))
            break;
        s->doorbell_armed = false;
        s->ops_pending--;
        s->kick = true;
        s->rang = true;
        break;
    case OP_ENGINE:
        arm_engine(d);
        d->step_done |= on_engine_done(d);
        break;
    case OP_SIGNAL:
        if (res == (int)sizeof(struct signalfd_siginfo)) {
            const struct signalfd_siginfo *si = (const void *)d->sig_buf;
            if (si->ssi_signo != SIGHUP) {
                log_notice("signal %u received", si->ssi_signo);
                begin_drain(d);
            } else {
                log_notice("SIGHUP: reloading the configuration");
                l8d_reload(d);
            }
        }
        arm_signal(d);
        break;
    case OP_TIMER:
        d->timer_armed = false;
        housekeeping(d);
        break;
    case OP_WAKE:
        if (!(s = session_of(d, u)))
            break;
        s->wake_armed = false;
        s->ops_pending--;
        if (res < 0 && res != -EAGAIN && res != -ECANCELED)
            log_debug("event doorbell of client %llu: %s", (unsigned long long)s->id,
                      strerror(-res));
        if (s->wake_again)
            ring_event_doorbell(d, s);
        break;
    case OP_CANCEL:
        break;
    }
}

/* Read the submission rings: all of them, or only those that rang. */
static void scan(struct l8d *d, bool all)
{
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct l8d_session *s = d->sessions[i];
        if (!s || (!all && !s->kick))
            continue;
        s->kick = false;
        const uint32_t head = s->sq_head;
        l8d_session_scan(s);
        if (s->rang)
            s->empty_rings = s->sq_head == head ? s->empty_rings + 1 : 0;
        s->rang = false;
        l8d_session_arm(s);
    }
}

/* Before sleeping with the engine idle: ask every client to ring, then look
 * once more so a submission that raced with the flag is not missed. */
static void arm_sq_wakeups(struct l8d *d)
{
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct l8d_session *s = d->sessions[i];
        if (s && s->state == L8D_SESS_READY)
            atomic_store_explicit(&s->sq_ctl->flags, L8_RING_NEED_WAKEUP,
                                  memory_order_relaxed);
    }
    /* seq_cst fence: orders the flag stores before the tail loads in the
     * scan below (Dekker with the client's tail store + fence + flag load). */
    atomic_thread_fence(memory_order_seq_cst);
    scan(d, true);
}

static void publish_all(struct l8d *d)
{
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct l8d_session *s = d->sessions[i];
        if (!s)
            continue;
        if (s->violation && s->state != L8D_SESS_CLOSING) {
            l8d_session_close(s, L8_ERR_RING_VIOLATION, "protocol violation");
            continue;
        }
        if ((s->dirty || s->backlog_len) && l8d_session_publish(s))
            ring_event_doorbell(d, s);
    }
}

/* Cancel a closing session's operation that may never complete. */
static void cancel_op(struct l8d *d, const struct l8d_session *s, enum l8d_op op)
{
    struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
    io_uring_prep_cancel64(sqe, l8d_ud(op, s->slot, s->gen), 0);
    io_uring_sqe_set_data64(sqe, l8d_ud(OP_CANCEL, 0, 0));
}

static void reap_closed(struct l8d *d)
{
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct l8d_session *s = d->sessions[i];
        if (!s || s->state != L8D_SESS_CLOSING)
            continue;
        if (!s->cancel_sent) {
            /* The client may never ring again, nor drain a full counter:
             * cancel the read and the wake (once). */
            if (s->doorbell_armed)
                cancel_op(d, s, OP_DOORBELL);
            if (s->wake_armed)
                cancel_op(d, s, OP_WAKE);
            s->cancel_sent = true;
        }
        if (s->ops_pending == 0)
            l8d_session_free(s);
    }
}

int l8d_loop_run(struct l8d *d)
{
    d->wake_val = 1;
    sample_rate(d, l8_now_ns());   /* the first: a reply before the first tick counts */
    d->idle_since_ns = l8_now_ns();
    arm_accept(d);
    arm_engine(d);
    arm_signal(d);
    arm_timer(d);
    bool idle_armed = false;
    while (d->state != L8D_STOPPED) {
        d->step_done = false;
        if (d->step_in_flight && d->spin_ns) {
            io_uring_submit(&d->ring);
            if (spin_for_step(d))
                d->step_done = on_engine_done(d);
        }
        if (!d->step_done)
            io_uring_submit_and_wait(&d->ring, 1);
        unsigned head, n = 0;
        struct io_uring_cqe *cqe;
        io_uring_for_each_cqe(&d->ring, head, cqe) {
            on_cqe(d, cqe);
            n++;
        }
        io_uring_cq_advance(&d->ring, n);
        if (d->state == L8D_STOPPED)
            break;
        const bool step_done = d->step_done;
        if (step_done && !d->spin_ns) {
            /* The step's tokens go out, doorbells included, before the next
             * step starts: once the engine's threads run they can hold
             * every core of a small machine, and the loop and the clients
             * it wakes would wait for a time slice (ms of tail latency).
             * With spin_us there are cores to spare (a GPU step leaves the
             * CPU idle), so the next step starts first and the tokens go
             * out at the end of this pass: the doorbells, an eventfd write
             * and a wake-up per sleeping client, are off the step gap. */
            publish_all(d);
            io_uring_submit(&d->ring);
        }
        /* A client that drained its event ring gets its backlog now, so
         * that its submissions are read and its requests run (held, see
         * l8d_req_held) in this pass, not at the next tick. */
        if (any_backlog(d))
            publish_all(d);
        scan(d, step_done);
        start_step(d);
        if (!d->step_in_flight) {
            if (!idle_armed) {
                arm_sq_wakeups(d);
                idle_armed = true;
                start_step(d);
            }
        }
        if (d->step_in_flight)
            idle_armed = false;
        publish_all(d);
        reap_closed(d);
        end_idle_exit(d);
        arm_accept(d);
        arm_timer(d);
        if (d->state == L8D_DRAINING && !d->step_in_flight && l8_sched_idle(d->sched)) {
            log_notice("drained");
            d->state = L8D_STOPPED;
        }
    }
    /* Tell the clients still connected, then let them see the hang-up. */
    publish_all(d);
    io_uring_submit(&d->ring);
    for (uint32_t i = 0; i < d->n_slots; i++) {
        struct l8d_session *s = d->sessions[i];
        if (s && s->state != L8D_SESS_CLOSING)
            l8d_send_error(d, s->fd, s->uid, L8_ERR_SHUTTING_DOWN, 0, "the daemon stopped");
    }
    return d->exit_code;
}
