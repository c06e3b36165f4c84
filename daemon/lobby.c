/* lobby.c - the listening socket while llama8d loads its model.
 *
 * The socket is bound before the load (llama8d.c), so a client that
 * connects meanwhile is not told there is no daemon, and a second daemon
 * on the same path is refused at once. The lobby's thread accepts those
 * connections and holds them; to each whose Hello set wait_loading it
 * sends a Loading message when the Hello arrives and then every quarter
 * second: the stage and how many bytes of weights the engine has placed.
 * The Hello is only peeked: when the load is done, the loop takes every
 * held connection over (l8d_lobby_stop) and serves it as if it had just
 * been accepted, Hello and all; when the load fails, each is told why.
 *
 * The thread reads nothing of struct l8d that the loading thread writes
 * but the stage and progress, which are atomic. */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "daemon.h"
#include "llama8.pb-c.h"
#include "log.h"

#define LOBBY_TICK_MS 250

struct held {
    int fd;
    bool peeked;    /* its first datagram is in (and left in) the socket */
    bool wants;     /* a Hello with wait_loading, from an allowed peer */
};

struct l8d_lobby {
    struct l8d *d;
    pthread_t thread;
    int wake_fd;
    uint32_t cap;          /* held connections at most; the rest wait in the backlog */
    struct held *h;
    uint32_t n;
    struct pollfd *pfd;
    int last_pct;          /* of the last STATUS= sent to systemd */
};

static void send_loading(struct l8d_lobby *L, struct held *h)
{
    struct l8d *d = L->d;
    Llama8__Loading lo = LLAMA8__LOADING__INIT;
    lo.model_name = d->model_name;
    lo.stage = (char *)atomic_load(&d->load_stage);
    lo.weight_bytes = atomic_load_explicit(&d->load_progress.total, memory_order_relaxed);
    lo.placed_bytes = atomic_load_explicit(&d->load_progress.done, memory_order_relaxed);
    if (lo.placed_bytes > lo.weight_bytes)
        lo.placed_bytes = lo.weight_bytes;
    lo.elapsed_ms = (l8_now_ns() - d->start_ns) / 1000000u;
    Llama8__DaemonMessage m = LLAMA8__DAEMON_MESSAGE__INIT;
    m.msg_case = LLAMA8__DAEMON_MESSAGE__MSG_LOADING;
    m.loading = &lo;
    /* A full socket (a client that does not read) skips a tick. */
    int rc = l8d_send_msg(h->fd, &m, NULL, 0);
    if (rc < 0 && rc != -EAGAIN)
        log_debug("Loading not sent on fd %d: %s", h->fd, strerror(-rc));
}

/* The first datagram, left in the socket for the session to read. */
static void peek_hello(struct l8d_lobby *L, struct held *h)
{
    uint8_t buf[L8_MAX_CTL_MSG];
    ssize_t n = recv(h->fd, buf, sizeof buf, MSG_PEEK | MSG_DONTWAIT);
    if (n < 0 && errno == EAGAIN)
        return;
    h->peeked = true;
    if (n <= 0)
        return;
    Llama8__ClientMessage *m = llama8__client_message__unpack(NULL, (size_t)n, buf);
    struct ucred cr;
    socklen_t len = sizeof cr;
    h->wants = m && m->msg_case == LLAMA8__CLIENT_MESSAGE__MSG_HELLO && m->hello->wait_loading &&
               getsockopt(h->fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 &&
               l8d_peer_allowed(L->d, h->fd, &cr);
    if (m)
        llama8__client_message__free_unpacked(m, NULL);
    if (h->wants)
        send_loading(L, h);
}

static void accept_waiting(struct l8d_lobby *L)
{
    /* The socket systemd passes may block: accept only what poll saw. */
    struct pollfd p = { L->d->listen_fd, POLLIN, 0 };
    while (L->n < L->cap && poll(&p, 1, 0) == 1) {
        int fd = accept4(L->d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno != EAGAIN && errno != ECONNABORTED && errno != EINTR)
                log_warn("accept while loading: %s", strerror(errno));
            return;
        }
        L->h[L->n++] = (struct held){ .fd = fd };
        peek_hello(L, &L->h[L->n - 1]);
    }
}

static void notify_systemd(struct l8d_lobby *L)
{
    struct l8d *d = L->d;
    uint64_t t = atomic_load_explicit(&d->load_progress.total, memory_order_relaxed);
    uint64_t done = atomic_load_explicit(&d->load_progress.done, memory_order_relaxed);
    int pct = t ? (int)(done >= t ? 100 : done * 100 / t) : -1;
    if (pct == L->last_pct)
        return;
    L->last_pct = pct;
    if (pct >= 0)
        sd_notifyf(0, "STATUS=loading %s: %s, %d%%", d->model_name, atomic_load(&d->load_stage),
                   pct);
}

static void *lobby_main(void *arg)
{
    struct l8d_lobby *L = arg;
    uint64_t next_tick = l8_now_ns() + LOBBY_TICK_MS * 1000000ull;
    for (;;) {
        uint32_t np = 0;
        L->pfd[np++] = (struct pollfd){ L->wake_fd, POLLIN, 0 };
        L->pfd[np++] = (struct pollfd){ L->d->listen_fd, L->n < L->cap ? POLLIN : 0, 0 };
        for (uint32_t i = 0; i < L->n; i++)
            L->pfd[np++] = (struct pollfd){ L->h[i].fd, (L->h[i].peeked ? 0 : POLLIN) | POLLRDHUP, 0 };
        uint64_t now = l8_now_ns();
        int wait = now >= next_tick ? 0 : (int)((next_tick - now) / 1000000u) + 1;
        if (poll(L->pfd, np, wait) < 0 && errno != EINTR) {
            log_warn("poll while loading: %s", strerror(errno));
            return NULL;
        }
        if (L->pfd[0].revents)
            return NULL;
        /* Gone before the daemon was ready: closed here, never a session. */
        uint32_t k = 0;
        for (uint32_t i = 0; i < L->n; i++) {
            short re = L->pfd[2 + i].revents;
            if (re & (POLLRDHUP | POLLHUP | POLLERR)) {
                close(L->h[i].fd);
                continue;
            }
            if ((re & POLLIN) && !L->h[i].peeked)
                peek_hello(L, &L->h[i]);
            L->h[k++] = L->h[i];
        }
        L->n = k;
        if (L->pfd[1].revents & POLLIN)
            accept_waiting(L);
        if (l8_now_ns() >= next_tick) {
            for (uint32_t i = 0; i < L->n; i++)
                if (L->h[i].wants)
                    send_loading(L, &L->h[i]);
            notify_systemd(L);
            next_tick = l8_now_ns() + LOBBY_TICK_MS * 1000000ull;
        }
    }
}

int l8d_lobby_start(struct l8d *d)
{
    struct l8d_lobby *L = calloc(1, sizeof *L);
    if (!L)
        return -ENOMEM;
    L->d = d;
    L->cap = l8d_connections(d);
    L->last_pct = -1;
    L->h = calloc(L->cap, sizeof *L->h);
    L->pfd = calloc(L->cap + 2, sizeof *L->pfd);
    L->wake_fd = eventfd(0, EFD_CLOEXEC);
    int rc = !L->h || !L->pfd ? -ENOMEM : L->wake_fd < 0 ? -errno : 0;
    /* Who waits already (under socket activation, the connection that
     * started us) hears of the load before the thread is even scheduled. */
    if (rc == 0) {
        accept_waiting(L);
        rc = -pthread_create(&L->thread, NULL, lobby_main, L);
    }
    if (rc < 0) {
        for (uint32_t i = 0; i < L->n; i++)
            close(L->h[i].fd);
        if (L->wake_fd >= 0)
            close(L->wake_fd);
        free(L->h);
        free(L->pfd);
        free(L);
        return rc;
    }
    d->lobby = L;
    return 0;
}

void l8d_lobby_stop(struct l8d *d, const char *failed)
{
    struct l8d_lobby *L = d->lobby;
    if (!L)
        return;
    d->lobby = NULL;
    uint64_t one = 1;
    if (write(L->wake_fd, &one, sizeof one) != sizeof one)
        log_warn("waking the lobby: %s", strerror(errno));
    pthread_join(L->thread, NULL);
    for (uint32_t i = 0; i < L->n; i++) {
        if (failed)
            l8d_refuse(d, L->h[i].fd, L8_ERR_INTERNAL, failed);
        else
            l8d_session_accept(d, L->h[i].fd);   /* answers and keeps, or refuses */
    }
    if (L->n)
        log_info("%u connection%s made during the load: %s", L->n, L->n == 1 ? "" : "s",
                 failed ? "told why it failed" : "served now");
    close(L->wake_fd);
    free(L->h);
    free(L->pfd);
    free(L);
}
