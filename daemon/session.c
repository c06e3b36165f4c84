/* session.c - one client of llama8d: its connection, its shared memory and
 * its requests. The daemon-wide requests it may send on its socket (status,
 * client list, reload) are answered in admin.c.
 *
 * Trust: everything in the client's mapping may change under us at any
 * moment. Each counter is read once into a local and bounded; each ring
 * entry and each message is copied into daemon memory before it is looked
 * at; the daemon's ring positions live here, not in shared memory. A
 * client that breaks the ring rules is disconnected (RING_VIOLATION) and
 * nobody else notices. */
#include "daemon.h"

#include <errno.h>
#include <grp.h>
#include <math.h>
#include <poll.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <unistd.h>
#include <fcntl.h>

#include "constraint.h"
#include "l8_build.h"
#include "llama8.pb-c.h"
#include "log.h"
#include "uring_op.h"

/* The error numbers of l8_shm.h are the protocol's. */
_Static_assert((int)L8_ERR_BAD_MESSAGE == (int)LLAMA8__ERROR_CODE__BAD_MESSAGE, "err ABI");
_Static_assert((int)L8_ERR_BAD_TOKEN == (int)LLAMA8__ERROR_CODE__BAD_TOKEN, "err ABI");
_Static_assert((int)L8_ERR_PROMPT_TOO_LONG == (int)LLAMA8__ERROR_CODE__PROMPT_TOO_LONG, "err ABI");
_Static_assert((int)L8_ERR_BAD_PARAMS == (int)LLAMA8__ERROR_CODE__BAD_PARAMS, "err ABI");
_Static_assert((int)L8_ERR_UNKNOWN_REQUEST == (int)LLAMA8__ERROR_CODE__UNKNOWN_REQUEST, "err ABI");
_Static_assert((int)L8_ERR_TOO_MANY_REQUESTS == (int)LLAMA8__ERROR_CODE__TOO_MANY_REQUESTS, "err ABI");
_Static_assert((int)L8_ERR_TOO_MANY_CLIENTS == (int)LLAMA8__ERROR_CODE__TOO_MANY_CLIENTS, "err ABI");
_Static_assert((int)L8_ERR_PERMISSION_DENIED == (int)LLAMA8__ERROR_CODE__PERMISSION_DENIED, "err ABI");
_Static_assert((int)L8_ERR_SHUTTING_DOWN == (int)LLAMA8__ERROR_CODE__SHUTTING_DOWN, "err ABI");
_Static_assert((int)L8_ERR_INTERNAL == (int)LLAMA8__ERROR_CODE__INTERNAL, "err ABI");
_Static_assert((int)L8_ERR_BAD_VERSION == (int)LLAMA8__ERROR_CODE__BAD_VERSION, "err ABI");
_Static_assert((int)L8_ERR_RING_VIOLATION == (int)LLAMA8__ERROR_CODE__RING_VIOLATION, "err ABI");
_Static_assert((int)L8_ERR_DUPLICATE_REQUEST == (int)LLAMA8__ERROR_CODE__DUPLICATE_REQUEST, "err ABI");
_Static_assert((int)L8_ERR_EMPTY_PROMPT == (int)LLAMA8__ERROR_CODE__EMPTY_PROMPT, "err ABI");
_Static_assert((int)L8_ERR_BAD_GRAMMAR == (int)LLAMA8__ERROR_CODE__BAD_GRAMMAR, "err ABI");
_Static_assert((int)L8_ERR_KV_POOL_TOO_SMALL == (int)LLAMA8__ERROR_CODE__KV_POOL_TOO_SMALL,
               "err ABI");
_Static_assert((int)L8_DONE_CANCELLED == (int)LLAMA8__DONE_REASON__DONE_CANCELLED, "done ABI");
_Static_assert((int)L8_DONE_GRAMMAR == (int)LLAMA8__DONE_REASON__DONE_GRAMMAR, "done ABI");

#define MAX_GROUPS 256

/* ---------------------------------------------------------------- control socket */

void l8d_send_error(struct l8d *d, int fd, uid_t uid, int code, uint64_t request_id,
                    const char *msg)
{
    l8d_count_error(d, uid, code);
    uint8_t buf[L8_MAX_CTL_MSG];
    Llama8__Error e = LLAMA8__ERROR__INIT;
    e.code = (Llama8__ErrorCode)code;
    e.message = (char *)msg;
    e.request_id = request_id;
    Llama8__DaemonMessage m = LLAMA8__DAEMON_MESSAGE__INIT;
    m.msg_case = LLAMA8__DAEMON_MESSAGE__MSG_ERROR;
    m.error = &e;
    size_t n = llama8__daemon_message__get_packed_size(&m);
    if (n > sizeof(buf))
        return;
    llama8__daemon_message__pack(&m, buf);
    /* Best effort: a client that does not read its socket loses it. */
    if (send(fd, buf, n, MSG_DONTWAIT | MSG_NOSIGNAL) < 0)
        log_debug("error reply on fd %d not sent: %s", fd, strerror(errno));
}

/* Drop what a client sent that we did not read, on a socket shut for
 * reading (nothing more can arrive). recv's 0 there is an empty datagram
 * or the end of the queue, which cannot be told apart: read on past up to
 * 64 of them, more than the queue holds unless net.unix.max_dgram_qlen
 * was raised past that. */
static void drop_unread(int fd, uint8_t *buf, size_t len)
{
    for (int zeros = 0; zeros < 64;) {
        ssize_t n = recv(fd, buf, len, MSG_DONTWAIT);
        if (n < 0)
            break;
        zeros += n == 0;
    }
}

/* Answer a connection we will not serve with an Error, then hang up so
 * the client can still read it. A Unix socket closed with unread data in
 * its receive queue makes the peer's next recv fail with ECONNRESET before
 * it sees the queued Error; so shut our receiving side first (the client's
 * later sends fail with EPIPE instead of queueing; the client library then
 * reads the Error), drop what was already queued (its Hello), and close. */
static void refuse(struct l8d *d, int fd, uid_t uid, int code, const char *msg)
{
    uint8_t sink[L8_MAX_CTL_MSG];
    l8d_send_error(d, fd, uid, code, 0, msg);
    shutdown(fd, SHUT_RD);
    drop_unread(fd, sink, sizeof(sink));
    close(fd);
}

void l8d_refuse(struct l8d *d, int fd, int code, const char *msg)
{
    struct ucred cr;
    socklen_t len = sizeof cr;
    refuse(d, fd, getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) == 0 ? cr.uid : (uid_t)-1,
           code, msg);
}

int l8d_send_msg(int fd, const Llama8__DaemonMessage *m, const int *fds, int nfds)
{
    uint8_t buf[L8_MAX_CTL_MSG];
    union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * L8_N_FDS)]; } cm;
    size_t n = llama8__daemon_message__get_packed_size(m);
    if (n > sizeof(buf) || nfds > L8_N_FDS)
        return -EMSGSIZE;
    llama8__daemon_message__pack(m, buf);
    struct iovec iov = { buf, n };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1 };
    if (nfds) {
        memset(&cm, 0, sizeof(cm));
        mh.msg_control = cm.b;
        mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
        struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
        h->cmsg_level = SOL_SOCKET;
        h->cmsg_type = SCM_RIGHTS;
        h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
        memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t)nfds);
    }
    if (sendmsg(fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL) != (ssize_t)n)
        return -errno;
    return 0;
}

/* ---------------------------------------------------------------- admission */

bool l8d_uid_is_admin(uid_t uid)
{
    return uid == 0 || uid == geteuid();
}

/* The highest priority a client may ask for. As with nice(1): anyone may
 * step back, only the administrator ahead of the others (the fair share
 * is within a priority). */
static int32_t max_priority(const struct l8d_session *s)
{
    return l8d_uid_is_admin(s->uid) ? INT32_MAX : 0;
}

/* Root and the daemon's own user always; otherwise membership of the
 * allowed group, from the peer's credentials as they were at connect():
 * its primary gid (SO_PEERCRED) and supplementary groups (SO_PEERGROUPS),
 * falling back to the group database (getgrouplist) if the kernel cannot
 * say. */
bool l8d_peer_allowed(struct l8d *d, int fd, const struct ucred *cr)
{
    if (l8d_uid_is_admin(cr->uid))
        return true;
    if (!d->have_group)
        return false;
    if (cr->gid == d->allowed_gid)
        return true;
    gid_t groups[MAX_GROUPS];
    socklen_t len = sizeof(groups);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERGROUPS, groups, &len) == 0) {
        for (size_t i = 0; i < len / sizeof(gid_t); i++)
            if (groups[i] == d->allowed_gid)
                return true;
        return false;
    }
    struct passwd pw, *ppw = NULL;
    char pwbuf[4096];
    if (getpwuid_r(cr->uid, &pw, pwbuf, sizeof(pwbuf), &ppw) != 0 || !ppw)
        return false;
    int n = MAX_GROUPS;
    if (getgrouplist(ppw->pw_name, ppw->pw_gid, groups, &n) < 0)
        return false;
    for (int i = 0; i < n; i++)
        if (groups[i] == d->allowed_gid)
            return true;
    return false;
}

int l8d_session_refuse_waiting(struct l8d *d)
{
    if (d->spare_fd >= 0) {   /* else accept4 fails below, and the caller pauses */
        close(d->spare_fd);
        d->spare_fd = -1;
    }
    /* The listening socket may block (one from systemd): poll first. A
     * bounded number a call: the loop comes back for the rest. */
    struct pollfd p = { d->listen_fd, POLLIN, 0 };
    int rc = 0;
    for (int i = 0; i < 64 && rc == 0 && poll(&p, 1, 0) == 1; i++) {
        int fd = accept4(d->listen_fd, NULL, NULL, SOCK_CLOEXEC);
        if (fd >= 0)
            refuse(d, fd, (uid_t)-1, L8_ERR_TOO_MANY_CLIENTS, "the daemon is out of file descriptors");
        else if (errno != EAGAIN && errno != ECONNABORTED)
            rc = -errno;
    }
    if ((d->spare_fd = eventfd(0, EFD_CLOEXEC)) < 0 && rc == 0)
        rc = -errno;
    return rc;
}

int l8d_session_accept(struct l8d *d, int fd)
{
    struct ucred cr;
    socklen_t len = sizeof(cr);
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &len) < 0) {
        close(fd);
        return -errno;
    }
    uint64_t skipped;
    char more[64];
    if (!l8d_peer_allowed(d, fd, &cr)) {
        if (l8_log_ratelimit(&d->rl_denied, l8_now_ns(), &skipped))
            log_notice("refused pid %d uid %u: not root and not in group '%s'%s", (int)cr.pid,
                       (unsigned)cr.uid, d->conf.allowed_group, l8_log_more(more, skipped));
        refuse(d, fd, cr.uid, L8_ERR_PERMISSION_DENIED, "not a member of the allowed group");
        return 0;
    }
    if (d->state != L8D_RUNNING) {
        refuse(d, fd, cr.uid, L8_ERR_SHUTTING_DOWN, "the daemon is shutting down");
        return 0;
    }
    uint32_t slot = d->n_slots;
    for (uint32_t i = 0; i < d->n_slots; i++)
        if (!d->sessions[i]) {
            slot = i;
            break;
        }
    /* admin_clients more for the administrator, so that a reload (the
     * unit's ExecReload) or a status gets in when clients fill max_clients.
     * A reload may have lowered the limit under the slots there are. */
    const uint32_t limit =
        d->conf.max_clients + (l8d_uid_is_admin(cr.uid) ? d->conf.admin_clients : 0);
    if (slot == d->n_slots || d->n_sessions >= limit) {
        if (l8_log_ratelimit(&d->rl_full, l8_now_ns(), &skipped))
            log_warn("refused pid %d uid %u: %u clients connected (max_clients %u, "
                     "admin_clients %u)%s", (int)cr.pid, (unsigned)cr.uid, d->n_sessions,
                     d->conf.max_clients, d->conf.admin_clients, l8_log_more(more, skipped));
        refuse(d, fd, cr.uid, L8_ERR_TOO_MANY_CLIENTS, "too many clients");
        return 0;
    }
    /* One uid's connections, idle welcomed ones too, count against its
     * own limit, so it cannot take the slots of others (root and the
     * daemon's user are trusted and have admin_clients besides). */
    uint32_t of_uid = 0;
    for (uint32_t i = 0; i < d->n_slots; i++)
        of_uid += d->sessions[i] && d->sessions[i]->uid == cr.uid;
    if (of_uid >= d->conf.max_clients_per_uid && !l8d_uid_is_admin(cr.uid)) {
        if (l8_log_ratelimit(&d->rl_full, l8_now_ns(), &skipped))
            log_warn("refused pid %d uid %u: the uid has %u connections "
                     "(max_clients_per_uid %u)%s", (int)cr.pid, (unsigned)cr.uid, of_uid,
                     d->conf.max_clients_per_uid, l8_log_more(more, skipped));
        char msg[128];
        snprintf(msg, sizeof msg, "too many clients of uid %u: %u connected, "
                 "max_clients_per_uid %u", (unsigned)cr.uid, of_uid, d->conf.max_clients_per_uid);
        refuse(d, fd, cr.uid, L8_ERR_TOO_MANY_CLIENTS, msg);
        return 0;
    }
    const int usage_i = l8d_usage_index(d, cr.uid);
    struct l8d_session *s = usage_i < 0 ? NULL : calloc(1, sizeof(*s));
    if (!s) {
        refuse(d, fd, cr.uid, L8_ERR_INTERNAL, "out of memory");
        return -ENOMEM;
    }
    s->d = d;
    s->slot = slot;
    s->gen = ++d->slot_gen[slot];
    s->fd = fd;
    s->shm_fd = s->sq_efd = s->eq_efd = -1;
    s->pid = cr.pid;
    s->uid = cr.uid;
    s->gid = cr.gid;
    s->usage_i = (uint32_t)usage_i;
    s->id = ++d->next_client_id;
    s->state = L8D_SESS_HELLO;
    s->t_accept_ns = l8_now_ns();
    d->sessions[slot] = s;
    d->n_sessions++;
    log_debug("client %llu connected: pid %d uid %u", (unsigned long long)s->id,
              (int)cr.pid, (unsigned)cr.uid);
    l8d_session_arm(s);
    return 0;
}

/* Its operations on the loop's ring: the control socket's next datagram,
 * and the doorbell (read once a tick only, past L8D_EMPTY_RINGS). */
void l8d_session_arm(struct l8d_session *s)
{
    struct l8d *d = s->d;
    if (s->state == L8D_SESS_CLOSING)
        return;
    if (!s->recv_armed) {
        s->rx_iov = (struct iovec){ s->rx, sizeof(s->rx) };
        s->rx_msg = (struct msghdr){ .msg_iov = &s->rx_iov, .msg_iovlen = 1 };
        struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
        io_uring_prep_recvmsg(sqe, s->fd, &s->rx_msg, 0);
        io_uring_sqe_set_data64(sqe, l8d_ud(OP_RECV, s->slot, s->gen));
        s->recv_armed = true;
        s->ops_pending++;
    }
    if (!s->doorbell_armed && s->state == L8D_SESS_READY && s->empty_rings < L8D_EMPTY_RINGS) {
        struct io_uring_sqe *sqe = l8d_get_sqe(&d->ring);
        io_uring_prep_read(sqe, s->sq_efd, &s->doorbell_val, sizeof(s->doorbell_val), 0);
        io_uring_sqe_set_data64(sqe, l8d_ud(OP_DOORBELL, s->slot, s->gen));
        s->doorbell_armed = true;
        s->ops_pending++;
    }
}


/* ---------------------------------------------------------------- handshake */

static int make_shm(struct l8d_session *s)
{
    struct l8d *d = s->d;
    uint64_t size = l8_shm_layout(d->sq_entries, d->eq_entries, d->arena_size, &s->geo);
    if (!size)
        return -EINVAL;
    s->shm_fd = memfd_create("llama8d-client", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (s->shm_fd < 0)
        return -errno;
    if (ftruncate(s->shm_fd, (off_t)size) < 0)
        return -errno;
    /* The client can neither shrink the file under our mapping (SIGBUS in
     * the daemon) nor grow it, nor lift the seals. */
    if (fcntl(s->shm_fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0)
        return -errno;
    void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, s->shm_fd, 0);
    if (p == MAP_FAILED)
        return -errno;
    s->map = p;
    s->map_size = size;
    memcpy(s->map, &s->geo, sizeof(s->geo));
    s->sq_ctl = (struct l8_ring_ctl *)(s->map + s->geo.sq_ctl_off);
    s->sq = (struct l8_sqe *)(s->map + s->geo.sq_off);
    s->eq_ctl = (struct l8_ring_ctl *)(s->map + s->geo.eq_ctl_off);
    s->eq = (struct l8_event *)(s->map + s->geo.eq_off);
    s->arena = s->map + s->geo.arena_off;
    /* The daemon sleeps until told otherwise: ring the doorbell. */
    atomic_store_explicit(&s->sq_ctl->flags, L8_RING_NEED_WAKEUP, memory_order_relaxed);
    s->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    s->eq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (s->sq_efd < 0 || s->eq_efd < 0)
        return -errno;
    s->reqs = calloc(d->conf.max_requests_per_client, sizeof(*s->reqs));
    if (!s->reqs)
        return -ENOMEM;
    return 0;
}

static void on_hello(struct l8d_session *s, const Llama8__Hello *h)
{
    struct l8d *d = s->d;
    int rc;
    /* Logged: one line per message, UTF-8 for journald. */
    l8_log_text(s->name, sizeof(s->name), h->client_name ? h->client_name : "",
                h->client_name ? strlen(h->client_name) : 0);
    if (h->protocol_version != L8_PROTO_VERSION) {
        char m[96];
        snprintf(m, sizeof(m), "protocol version %u not supported (daemon: %u)",
                 h->protocol_version, L8_PROTO_VERSION);
        l8d_session_close(s, L8_ERR_BAD_VERSION, m);
        return;
    }
    if ((rc = make_shm(s)) < 0) {
        log_err("client %llu: shared memory: %s", (unsigned long long)s->id, strerror(-rc));
        if (rc == -EMFILE || rc == -ENFILE)
            l8d_session_close(s, L8_ERR_TOO_MANY_CLIENTS, "the daemon is out of file descriptors");
        else
            l8d_session_close(s, L8_ERR_INTERNAL, "cannot create shared memory");
        return;
    }
    Llama8__Welcome w = LLAMA8__WELCOME__INIT;
    w.protocol_version = L8_PROTO_VERSION;
    w.daemon_version = (char *)L8_VERSION;
    w.client_id = s->id;
    w.model_name = d->model_name;
    w.model_dir = d->model_dir;
    w.vocab_size = d->vocab;
    w.context_length = d->max_ctx;
    w.bos_id = d->bos;
    w.n_eos_ids = d->n_eos;
    w.eos_ids = d->eos;
    w.backend = (char *)l8_backend_name(d->backend);
    w.max_requests = d->conf.max_requests_per_client;
    w.max_prompt_tokens = d->max_prompt;
    w.max_new_tokens = d->max_new;
    w.max_stop_ids = d->max_stop_ids;
    w.max_priority = max_priority(s);
    w.shm_size = s->map_size;
    w.sq_entries = s->geo.sq_entries;
    w.eq_entries = s->geo.eq_entries;
    w.arena_size = s->geo.arena_size;
    Llama8__DaemonMessage m = LLAMA8__DAEMON_MESSAGE__INIT;
    m.msg_case = LLAMA8__DAEMON_MESSAGE__MSG_WELCOME;
    m.welcome = &w;
    int fds[L8_N_FDS];
    fds[L8_FD_SHM] = s->shm_fd;
    fds[L8_FD_SQ_DOORBELL] = s->sq_efd;
    fds[L8_FD_EQ_DOORBELL] = s->eq_efd;
    if ((rc = l8d_send_msg(s->fd, &m, fds, L8_N_FDS)) < 0) {
        log_info("client %llu: Welcome not sent: %s", (unsigned long long)s->id, strerror(-rc));
        l8d_session_close(s, 0, NULL);
        return;
    }
    /* The client has its copy; ours is only needed for the mapping. */
    close(s->shm_fd);
    s->shm_fd = -1;
    s->state = L8D_SESS_READY;
    log_info("client %llu '%s' ready: pid %d uid %u", (unsigned long long)s->id, s->name,
             (int)s->pid, (unsigned)s->uid);
    l8d_session_arm(s);
}

/* Has the peer closed or shut down its sending side? On SOCK_SEQPACKET a
 * recv of 0 bytes is that, or an empty datagram from a peer still there. */
static bool peer_gone(int fd)
{
    struct pollfd p = { fd, POLLRDHUP, 0 };
    int rc = poll(&p, 1, 0);
    return rc < 0 || (rc == 1 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR)));
}

void l8d_session_on_recv(struct l8d_session *s, int n, int msg_flags)
{
    if (s->state == L8D_SESS_CLOSING)
        return;
    /* An empty datagram is an empty ClientMessage, answered below. */
    if (n < 0 || (n == 0 && peer_gone(s->fd))) {
        log_debug("client %llu hung up (%d)", (unsigned long long)s->id, n);
        l8d_session_close(s, 0, NULL);
        return;
    }
    if (msg_flags & MSG_TRUNC) {
        l8d_session_close(s, L8_ERR_BAD_MESSAGE, "control message too long");
        return;
    }
    Llama8__ClientMessage *m = llama8__client_message__unpack(NULL, (size_t)n, s->rx);
    if (!m) {
        l8d_session_close(s, L8_ERR_BAD_MESSAGE, "unparsable control message");
        return;
    }
    if (s->state == L8D_SESS_HELLO && m->msg_case == LLAMA8__CLIENT_MESSAGE__MSG_HELLO)
        on_hello(s, m->hello);
    else if (s->state == L8D_SESS_READY &&
             m->msg_case == LLAMA8__CLIENT_MESSAGE__MSG_STATUS_REQUEST)
        l8d_admin_status(s);
    else if (s->state == L8D_SESS_READY &&
             m->msg_case == LLAMA8__CLIENT_MESSAGE__MSG_RELOAD_REQUEST)
        l8d_admin_reload(s);
    else if (s->state == L8D_SESS_READY &&
             m->msg_case == LLAMA8__CLIENT_MESSAGE__MSG_CLIENTS_REQUEST)
        l8d_admin_clients(s, m->clients_request->after_id);
    else
        l8d_session_close(s, L8_ERR_BAD_MESSAGE,
                          s->state == L8D_SESS_HELLO ? "expected Hello" : "unexpected message");
    llama8__client_message__free_unpacked(m, NULL);
}

/* ---------------------------------------------------------------- events */

static void violation(struct l8d_session *s, const char *why)
{
    if (s->violation)
        return;
    uint64_t skipped;
    char more[64];
    if (l8_log_ratelimit(&s->d->rl_violation, l8_now_ns(), &skipped))
        log_warn("client %llu (pid %d): protocol violation: %s%s", (unsigned long long)s->id,
                 (int)s->pid, why, l8_log_more(more, skipped));
    s->violation = true;
}

static bool backlog_push(struct l8d_session *s, const struct l8_event *ev)
{
    if (s->backlog_len == s->backlog_cap) {
        struct l8d *d = s->d;
        uint64_t cap_max = (uint64_t)d->conf.max_requests_per_client * (d->max_new + 3) + 64;
        uint32_t ncap = s->backlog_cap ? s->backlog_cap * 2 : 256;
        if (ncap > cap_max)
            ncap = (uint32_t)cap_max;
        if (ncap <= s->backlog_cap)
            return false;
        struct l8_event *nb = malloc((size_t)ncap * sizeof(*nb));
        if (!nb)
            return false;
        for (uint32_t i = 0; i < s->backlog_len; i++)
            nb[i] = s->backlog[(s->backlog_head + i) % s->backlog_cap];
        free(s->backlog);
        s->backlog = nb;
        s->backlog_head = 0;
        s->backlog_cap = ncap;
    }
    s->backlog[(s->backlog_head + s->backlog_len) % s->backlog_cap] = *ev;
    s->backlog_len++;
    return true;
}

/* Free slots in the event ring, from the client's head read once. */
static uint32_t eq_room(struct l8d_session *s)
{
    /* acquire: pairs with the client's release store of head, made after it
     * copied the records out, so we do not overwrite a slot being read. */
    uint32_t head = atomic_load_explicit(&s->eq_ctl->head, memory_order_acquire);
    uint32_t used = s->eq_tail - head;
    if (used > s->geo.eq_entries) {
        violation(s, "event ring head out of range");
        return 0;
    }
    return s->geo.eq_entries - used;
}

void l8d_session_push(struct l8d_session *s, const struct l8_event *ev)
{
    if (s->state != L8D_SESS_READY || s->violation)
        return;
    if (s->backlog_len == 0 && eq_room(s) > 0) {
        s->eq[s->eq_tail & (s->geo.eq_entries - 1)] = *ev;
        s->eq_tail++;
        s->dirty = true;
        return;
    }
    if (!backlog_push(s, ev))
        violation(s, "event backlog over its bound");
}

bool l8d_session_publish(struct l8d_session *s)
{
    if (s->state != L8D_SESS_READY || s->violation)
        return false;
    if (s->backlog_len) {
        uint32_t room = eq_room(s);
        while (room && s->backlog_len) {
            s->eq[s->eq_tail & (s->geo.eq_entries - 1)] = s->backlog[s->backlog_head];
            s->eq_tail++;
            s->backlog_head = (s->backlog_head + 1) % s->backlog_cap;
            s->backlog_len--;
            room--;
        }
    }
    if (s->eq_tail == s->eq_published)
        return false;
    /* release: orders the event records written above before the tail, so
     * a client that acquires the tail reads complete records. */
    atomic_store_explicit(&s->eq_ctl->tail, s->eq_tail, memory_order_release);
    s->eq_published = s->eq_tail;
    s->dirty = false;
    /* seq_cst fence: orders the tail store before the flag load (Dekker
     * with the client's flag store + fence + tail load in prepare_wait). */
    atomic_thread_fence(memory_order_seq_cst);
    return atomic_load_explicit(&s->eq_ctl->flags, memory_order_relaxed) & L8_RING_NEED_WAKEUP;
}

/* An error about one field of a request: what it gave, the limit it broke. */
static void push_refusal(struct l8d_session *s, uint64_t id, int code, int field,
                         uint32_t value, uint32_t limit, float fvalue)
{
    struct l8_event ev = { .request_id = id, .t_ns = l8_now_ns(), .kind = L8_EV_ERROR,
                           .code = (uint16_t)code, .reason = (uint8_t)field, .token = value,
                           .index = limit, .logprob = fvalue };
    l8d_count_error(s->d, s->uid, code);
    l8d_session_push(s, &ev);
}

/* An error about no one field (L8_EF_NONE). */
static void push_error(struct l8d_session *s, uint64_t id, int code)
{
    push_refusal(s, id, code, L8_EF_NONE, 0, 0, NAN);
}

/* The request ended (how: its done reason, or why not): one line in the
 * log, an operator's record of the daemon's work. */
static void req_release(struct l8d_session *s, struct l8d_req *r, const char *how, uint64_t t_ns)
{
    r->live = false;
    s->n_live--;
    s->requests_done++;
    if (!l8_log_enabled(L8_LOG_INFO))
        return;
    char first[96] = "", spec[64] = "";
    if (r->drafted)
        snprintf(spec, sizeof(spec), "; %u drafted, %u accepted", r->drafted, r->accepted);
    if (r->generated)
        snprintf(first, sizeof(first), "; first token after %.1f ms, then %.1f tokens/s",
                 (double)(r->t_first_ns - r->t_submit_ns) / 1e6,
                 r->generated > 1 && t_ns > r->t_first_ns
                     ? (double)(r->generated - 1) * 1e9 / (double)(t_ns - r->t_first_ns) : 0.0);
    log_info("client %llu request %llu %s: %u prompt tokens (%u from the prefix cache), "
             "%u generated%s%s", (unsigned long long)s->id, (unsigned long long)r->id, how,
             r->prompt_tokens, r->cached_tokens, r->generated, first, spec);
}

void l8d_session_on_sched_event(void *ctx, const struct l8_sched_event *e)
{
    struct l8d *d = ctx;
    const uint64_t t_ns = e->t_ns;
    struct l8d_req *r = e->user;
    if (!r || !r->live)
        return;
    struct l8d_session *s = r->s;
    struct l8_event ev = { .request_id = e->id, .t_ns = t_ns, .token = e->token,
                           .index = e->index, .logprob = e->has_logprob ? e->logprob : NAN };
    r->drafted = e->drafted;
    r->accepted = e->accepted;
    switch (e->kind) {
    case L8_SCHED_EV_TOKEN:
        ev.kind = L8_EV_TOKEN;
        if (!r->generated++)
            r->t_first_ns = t_ns;
        s->tokens_generated++;
        d->usage[s->usage_i].tokens_generated++;
        break;
    case L8_SCHED_EV_DONE:
        ev.kind = L8_EV_DONE;
        ev.reason = e->reason == L8_SCHED_DONE_GRAMMAR ? L8_DONE_GRAMMAR : L8_DONE_LENGTH;
        if (e->reason == L8_SCHED_DONE_STOP) {
            ev.reason = L8_DONE_STOP;
            for (uint32_t i = 0; !r->ignore_eos && i < d->n_eos; i++)
                if (d->eos[i] == e->token)
                    ev.reason = L8_DONE_EOS;
        }
        req_release(s, r, ev.reason == L8_DONE_EOS ? "done (eos)" : ev.reason == L8_DONE_STOP
                          ? "done (stop id)" : ev.reason == L8_DONE_GRAMMAR
                          ? "done (the constraint admits nothing more)" : "done (length)", t_ns);
        d->requests_done++;
        d->usage[s->usage_i].requests_done++;
        break;
    case L8_SCHED_EV_ERROR:
    default:
        log_err("client %llu request %llu: engine error: %s", (unsigned long long)s->id,
                (unsigned long long)e->id, l8_engine_strerror(e->error));
        ev = (struct l8_event){ .request_id = e->id, .t_ns = t_ns, .kind = L8_EV_ERROR,
                                .code = L8_ERR_INTERNAL, .logprob = NAN };
        l8d_count_error(d, s->uid, L8_ERR_INTERNAL);
        req_release(s, r, "failed (engine error)", t_ns);
        break;
    }
    l8d_session_push(s, &ev);
}

/* ---------------------------------------------------------------- submissions */

/* The protocol's code and field for a scheduler refusal. */
static void sched_refusal(int rc, int *code, int *field)
{
    static const struct { int rc, code, field; } map[] = {
        { L8_SCHED_E_EMPTY_PROMPT,   L8_ERR_EMPTY_PROMPT,       L8_EF_PROMPT_TOKENS },
        { L8_SCHED_E_TOKEN_RANGE,    L8_ERR_BAD_TOKEN,          L8_EF_PROMPT_ID },
        { L8_SCHED_E_STOP_RANGE,     L8_ERR_BAD_TOKEN,          L8_EF_STOP_ID },
        { L8_SCHED_E_TOO_LONG,       L8_ERR_PROMPT_TOO_LONG,    L8_EF_CONTEXT },
        { L8_SCHED_E_POOL_TOO_SMALL, L8_ERR_KV_POOL_TOO_SMALL,  L8_EF_KV_PAGES },
        { L8_SCHED_E_MAX_NEW_ZERO,   L8_ERR_BAD_PARAMS,         L8_EF_MAX_NEW },
        { L8_SCHED_E_TOO_MANY_STOPS, L8_ERR_BAD_PARAMS,         L8_EF_STOP_IDS },
        { L8_SCHED_E_TEMPERATURE,    L8_ERR_BAD_PARAMS,         L8_EF_TEMPERATURE },
        { L8_SCHED_E_TOP_P,          L8_ERR_BAD_PARAMS,         L8_EF_TOP_P },
        { L8_SCHED_E_MIN_P,          L8_ERR_BAD_PARAMS,         L8_EF_MIN_P },
        { L8_SCHED_E_PENALTY,        L8_ERR_BAD_PARAMS,         L8_EF_REPETITION_PENALTY },
        { L8_SCHED_E_DUPLICATE_ID,   L8_ERR_DUPLICATE_REQUEST,  L8_EF_NONE },
        { L8_SCHED_E_QUEUE_FULL,     L8_ERR_TOO_MANY_REQUESTS,  L8_EF_REQUESTS },
        { L8_SCHED_E_UID_QUEUE_FULL, L8_ERR_TOO_MANY_REQUESTS,  L8_EF_UID_REQUESTS },
    };
    *code = L8_ERR_INTERNAL;
    *field = L8_EF_NONE;
    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (map[i].rc == rc) {
            *code = map[i].code;
            *field = map[i].field;
        }
}

static struct l8d_req *find_req(struct l8d_session *s, uint64_t id)
{
    for (uint32_t i = 0; i < s->d->conf.max_requests_per_client; i++)
        if (s->reqs[i].live && s->reqs[i].id == id)
            return &s->reqs[i];
    return NULL;
}

static void on_generate(struct l8d_session *s, const Llama8__GenerateRequest *g)
{
    struct l8d *d = s->d;
    uint64_t id = g->request_id;
    uint32_t stops[L8_SCHED_MAX_STOP];
    uint32_t n_stop = 0;
    if (d->state != L8D_RUNNING)
        return push_error(s, id, L8_ERR_SHUTTING_DOWN);
    if (g->prompt_count == 0)
        return push_refusal(s, id, L8_ERR_EMPTY_PROMPT, L8_EF_PROMPT_TOKENS, 0, d->max_prompt, NAN);
    if (g->prompt_count > d->max_prompt)
        return push_refusal(s, id, L8_ERR_PROMPT_TOO_LONG, L8_EF_PROMPT_TOKENS, g->prompt_count,
                            d->max_prompt, NAN);
    /* The prompt must lie inside the arena (count is bounded above, so the
     * product cannot overflow). */
    if (g->prompt_offset % 4 || g->prompt_offset > s->geo.arena_size ||
        (uint64_t)g->prompt_count * 4 > s->geo.arena_size - g->prompt_offset)
        return push_refusal(s, id, L8_ERR_BAD_MESSAGE, L8_EF_PROMPT_RANGE, g->prompt_offset,
                            s->geo.arena_size, NAN);
    if (g->max_new_tokens == 0 || g->max_new_tokens > d->max_new)
        return push_refusal(s, id, L8_ERR_BAD_PARAMS, L8_EF_MAX_NEW, g->max_new_tokens,
                            d->max_new, NAN);
    if (g->n_stop_ids > d->max_stop_ids)
        return push_refusal(s, id, L8_ERR_BAD_PARAMS, L8_EF_STOP_IDS, (uint32_t)g->n_stop_ids,
                            d->max_stop_ids, NAN);
    if (g->priority > max_priority(s))
        return push_refusal(s, id, L8_ERR_BAD_PARAMS, L8_EF_PRIORITY, (uint32_t)g->priority,
                            (uint32_t)max_priority(s), NAN);
    if (find_req(s, id))
        return push_error(s, id, L8_ERR_DUPLICATE_REQUEST);
    if (s->n_live >= d->conf.max_requests_per_client)
        return push_refusal(s, id, L8_ERR_TOO_MANY_REQUESTS, L8_EF_REQUESTS, s->n_live,
                            d->conf.max_requests_per_client, NAN);
    for (size_t i = 0; i < g->n_stop_ids; i++) {
        if (g->stop_ids[i] >= d->vocab)
            return push_refusal(s, id, L8_ERR_BAD_TOKEN, L8_EF_STOP_ID, g->stop_ids[i], d->vocab,
                                NAN);
        stops[n_stop++] = g->stop_ids[i];
    }
    if (!g->ignore_eos)
        for (uint32_t i = 0; i < d->n_eos; i++)
            stops[n_stop++] = d->eos[i];
    /* The constraint last: it costs a compile (once per text, then cached). */
    void *constraint = NULL;
    if (g->constraint != LLAMA8__CONSTRAINT_KIND__CONSTRAINT_NONE) {
        const uint32_t off = g->constraint_offset, len = g->constraint_len;
        if (len > L8_MAX_CONSTRAINT)
            return push_refusal(s, id, L8_ERR_BAD_GRAMMAR, L8_EF_CONSTRAINT_LEN, len,
                                L8_MAX_CONSTRAINT, NAN);
        if (off > s->geo.arena_size || len > s->geo.arena_size - off)
            return push_refusal(s, id, L8_ERR_BAD_MESSAGE, L8_EF_CONSTRAINT_RANGE, off,
                                s->geo.arena_size, NAN);
        char why[L8D_ERRLEN];
        if (g->constraint == LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON && len) {
            snprintf(why, sizeof why, "a JSON constraint takes no text (%u bytes given)", len);
        } else {
            /* Copied out of shared memory before it is read. */
            memcpy(d->constraint_buf, s->arena + off, len);
            constraint = l8d_constraint_new(d->constraints, g->constraint, d->constraint_buf, len,
                                            why);
        }
        if (!constraint) {
            log_debug("client %llu request %llu: constraint refused: %s",
                      (unsigned long long)s->id, (unsigned long long)id, why);
            /* the message first: the client reads it when the event comes */
            l8d_send_error(d, s->fd, s->uid, L8_ERR_BAD_GRAMMAR, id, why);
            return push_error(s, id, L8_ERR_BAD_GRAMMAR);
        }
    }
    /* Copy the prompt out of shared memory before looking at it. */
    memcpy(d->prompt_buf, s->arena + g->prompt_offset, (size_t)g->prompt_count * 4);
    struct l8d_req *r = NULL;
    for (uint32_t i = 0; i < d->conf.max_requests_per_client; i++)
        if (!s->reqs[i].live) {
            r = &s->reqs[i];
            break;
        }
    const Llama8__Sampling *sp = g->sampling;
    struct l8_sched_req q = {
        .owner = s->id, .id = id, .user = r,
        .prompt = d->prompt_buf, .n_prompt = g->prompt_count,
        .max_new_tokens = g->max_new_tokens,
        .stop_ids = stops, .n_stop = n_stop,
        .priority = g->priority, .logprobs = g->logprobs,
        .cache_scope = d->conf.prefix_cache == L8D_PREFIX_CACHE_USER ? (uint32_t)s->uid : 0,
        .uid = (uint32_t)s->uid,
        .constraint = constraint,
        .speculate = !g->no_speculate,
        .sampling = {
            .temperature = sp ? sp->temperature : 0.0f,
            .top_k = sp ? sp->top_k : 0,
            .top_p = sp && sp->top_p != 0.0f ? sp->top_p : 1.0f,
            .min_p = sp ? sp->min_p : 0.0f,
            .repetition_penalty = sp && sp->repetition_penalty != 0.0f ? sp->repetition_penalty : 1.0f,
            .seed = sp ? sp->seed : 0,
        },
    };
    struct l8_sched_refusal why = { .fvalue = NAN };    /* -ENOMEM says nothing */
    int rc = l8_sched_submit(d->sched, &q, &why);
    if (rc < 0) {
        l8d_constraint_free(d->constraints, constraint);
        log_debug("client %llu request %llu refused: %s", (unsigned long long)s->id,
                  (unsigned long long)id, l8_sched_strerror(rc));
        int code, field;
        sched_refusal(rc, &code, &field);
        return push_refusal(s, id, code, field, why.value, why.limit, why.fvalue);
    }
    *r = (struct l8d_req){ .s = s, .id = id, .prompt_tokens = g->prompt_count, .live = true,
                           .ignore_eos = g->ignore_eos, .t_submit_ns = l8_now_ns() };
    s->n_live++;
    s->prompt_tokens += g->prompt_count;
    log_debug("client %llu request %llu: %u prompt tokens, %u new", (unsigned long long)s->id,
              (unsigned long long)id, g->prompt_count, g->max_new_tokens);
}

static void on_cancel(struct l8d_session *s, const Llama8__Cancel *c)
{
    struct l8d_req *r = find_req(s, c->request_id);
    if (!r || l8_sched_cancel(s->d->sched, s->id, c->request_id) < 0)
        return push_error(s, c->request_id, L8_ERR_UNKNOWN_REQUEST);
    struct l8_event ev = { .request_id = c->request_id, .t_ns = l8_now_ns(),
                           .kind = L8_EV_DONE, .reason = L8_DONE_CANCELLED,
                           .index = r->generated, .logprob = NAN };
    req_release(s, r, "cancelled", ev.t_ns);
    l8d_session_push(s, &ev);
}

static void handle_sqe(struct l8d_session *s, const struct l8_sqe *e)
{
    struct l8d *d = s->d;
    if ((e->kind != L8_SQE_GENERATE && e->kind != L8_SQE_CANCEL) ||
        e->msg_len > L8_MAX_REQ_MSG || e->msg_off > s->geo.arena_size ||
        e->msg_len > s->geo.arena_size - e->msg_off) {
        violation(s, "submission entry out of range");
        return;
    }
    /* Copy out, then parse our copy: the client may be rewriting the arena. */
    memcpy(d->msg_buf, s->arena + e->msg_off, e->msg_len);
    if (e->kind == L8_SQE_GENERATE) {
        Llama8__GenerateRequest *g =
            llama8__generate_request__unpack(NULL, e->msg_len, d->msg_buf);
        if (!g)
            return push_error(s, 0, L8_ERR_BAD_MESSAGE);
        on_generate(s, g);
        llama8__generate_request__free_unpacked(g, NULL);
    } else {
        Llama8__Cancel *c = llama8__cancel__unpack(NULL, e->msg_len, d->msg_buf);
        if (!c)
            return push_error(s, 0, L8_ERR_BAD_MESSAGE);
        on_cancel(s, c);
        llama8__cancel__free_unpacked(c, NULL);
    }
}

void l8d_session_scan(struct l8d_session *s)
{
    if (s->state != L8D_SESS_READY || s->violation)
        return;
    /* acquire: pairs with the client's release store of tail, so the entries
     * and arena bytes below it are visible. Read once. */
    uint32_t tail = atomic_load_explicit(&s->sq_ctl->tail, memory_order_acquire);
    uint32_t avail = tail - s->sq_head;
    if (avail == 0)
        return;
    if (avail > s->geo.sq_entries) {
        violation(s, "submission ring tail out of range");
        return;
    }
    /* Backpressure: while events wait in the backlog (the client is not
     * draining its event ring) take no more entries, since each could add
     * an event: the client sees its submission ring stop moving. The loop
     * looks again once the backlog is out (kick). */
    uint32_t i = 0;
    for (; i < avail && !s->violation && !s->backlog_len; i++) {
        struct l8_sqe e;
        memcpy(&e, &s->sq[s->sq_head & (s->geo.sq_entries - 1)], sizeof(e));
        s->sq_head++;
        handle_sqe(s, &e);
    }
    if (i < avail && s->backlog_len)
        s->kick = true;
    /* release: everything we copied out of the entries and the arena is
     * read before the client may reuse the space. */
    atomic_store_explicit(&s->sq_ctl->head, s->sq_head, memory_order_release);
}

/* ---------------------------------------------------------------- waiting */

#define WAIT_FIRST_NS 1000000000ull   /* a request not started by then is told why */
#define WAIT_EVERY_NS 2000000000ull   /* and again this often while it waits */
_Static_assert((int)L8_SCHED_WAIT_QUEUE == (int)L8_WAIT_QUEUE &&
               (int)L8_SCHED_WAIT_PAGES == (int)L8_WAIT_PAGES &&
               (int)L8_SCHED_WAIT_SLOTS == (int)L8_WAIT_SLOTS, "wait ABI");

static void tell_waiting(void *ctx, const struct l8_sched_wait *w)
{
    const uint64_t now = *(const uint64_t *)ctx;
    struct l8d_req *r = w->user;
    if (!r || !r->live || r->started || r->s->state != L8D_SESS_READY)
        return;
    const uint64_t due = r->t_waiting_ns ? r->t_waiting_ns + WAIT_EVERY_NS
                                         : r->t_submit_ns + WAIT_FIRST_NS;
    if (now < due)
        return;
    r->t_waiting_ns = now;
    const bool pages = w->why == L8_SCHED_WAIT_PAGES;
    struct l8_event ev = { .request_id = w->id, .t_ns = now, .kind = L8_EV_WAITING,
                           .reason = (uint8_t)w->why, .index = pages ? w->have : w->ahead,
                           .token = pages ? w->need : 0, .logprob = NAN };
    l8d_session_push(r->s, &ev);
}

void l8d_session_tell_waiting(struct l8d *d, uint64_t now_ns)
{
    l8_sched_waiting(d->sched, tell_waiting, &now_ns);
}

bool l8d_req_held(void *ctx, void *user)
{
    (void)ctx;
    const struct l8d_req *r = user;
    return r->s->backlog_len > 0;
}

/* ---------------------------------------------------------------- teardown */

void l8d_session_cut_all(struct l8d_session *s)
{
    for (uint32_t i = 0; s->reqs && i < s->d->conf.max_requests_per_client; i++) {
        struct l8d_req *r = &s->reqs[i];
        if (!r->live)
            continue;
        l8_sched_cancel(s->d->sched, s->id, r->id);
        uint64_t id = r->id;
        req_release(s, r, "cut (shutting down)", l8_now_ns());
        push_error(s, id, L8_ERR_SHUTTING_DOWN);
    }
}

void l8d_session_close(struct l8d_session *s, int err_code, const char *why)
{
    struct l8d *d = s->d;
    if (s->state == L8D_SESS_CLOSING)
        return;
    if (err_code) {
        l8d_send_error(d, s->fd, s->uid, err_code, 0, why);
        s->error_sent = true;
    }
    uint32_t n = l8_sched_cancel_owner(d->sched, s->id);
    for (uint32_t i = 0; s->reqs && i < d->conf.max_requests_per_client; i++)
        s->reqs[i].live = false;
    s->n_live = 0;
    if (s->state == L8D_SESS_READY || n)
        log_info("client %llu '%s' closed%s%s (%u requests cancelled)",
                 (unsigned long long)s->id, s->name, why ? ": " : "", why ? why : "", n);
    s->state = L8D_SESS_CLOSING;
    /* Make the pending recv complete; the doorbell read is cancelled by the
     * loop. The memory stays until every op is back (l8d_session_free). */
    shutdown(s->fd, SHUT_RDWR);
}

void l8d_session_free(struct l8d_session *s)
{
    struct l8d *d = s->d;
    if (s->map)
        munmap(s->map, s->map_size);
    if (s->fd >= 0) {
        /* Datagrams the client sent after the one that closed it would
         * reset its connection before it read our Error (see refuse). A
         * session closed without one (a hang-up) skips the drain, whose
         * end on a shut socket costs 64 empty reads. */
        if (s->error_sent)
            drop_unread(s->fd, s->rx, sizeof(s->rx));
        close(s->fd);
    }
    if (s->shm_fd >= 0)
        close(s->shm_fd);
    if (s->sq_efd >= 0)
        close(s->sq_efd);
    if (s->eq_efd >= 0)
        close(s->eq_efd);
    free(s->backlog);
    free(s->reqs);
    d->sessions[s->slot] = NULL;
    d->n_sessions--;
    free(s);
}
