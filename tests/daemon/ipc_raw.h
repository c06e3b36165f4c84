/* ipc_raw.h - speak llama8d's protocol by hand, without libllama8client,
 * so a test can send what the library never would: the Hello, the shared
 * memory and the submission ring as raw bytes and counters.
 * Used by test_ipc_faults and test_ipc_fuzz. */
#pragma once
#include "ipc_helper.h"

#include <stdatomic.h>
#include <sys/mman.h>

#include "l8_shm.h"
#include "llama8.pb-c.h"

/* One raw client: its socket, doorbells and mapping, and our own ring
 * positions (the submission tail we publish, the event head we read). */
struct raw {
    int fd, sq_efd, eq_efd;
    uint8_t *map;
    size_t size;
    struct l8_shm_hdr h;
    struct l8_ring_ctl *sq_ctl, *eq_ctl;
    struct l8_sqe *sq;
    struct l8_event *eq;
    uint8_t *arena;
    uint32_t tail, eq_head;
};

static inline int raw_socket(const char *path)
{
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    REQUIRE(connect(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "connect");
    return fd;
}

/* Receive one DaemonMessage (fds into fds[3] if given); NULL on hang-up. */
static inline Llama8__DaemonMessage *raw_recv(int fd, int *fds, int timeout_ms)
{
    uint8_t buf[L8_MAX_CTL_MSG];
    union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 3)]; } cm;
    struct iovec iov = { buf, sizeof(buf) };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                         .msg_controllen = sizeof(cm.b) };
    struct pollfd p = { fd, POLLIN, 0 };
    if (poll(&p, 1, timeout_ms) <= 0)
        return NULL;
    ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC);
    if (n <= 0)
        return NULL;
    struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
    if (fds && h && h->cmsg_type == SCM_RIGHTS)
        memcpy(fds, CMSG_DATA(h), sizeof(int) * 3);
    return llama8__daemon_message__unpack(NULL, (size_t)n, buf);
}

static inline void raw_hello(int fd, uint32_t version)
{
    uint8_t buf[256];
    Llama8__Hello h = LLAMA8__HELLO__INIT;
    h.protocol_version = version;
    h.client_name = "raw";
    Llama8__ClientMessage m = LLAMA8__CLIENT_MESSAGE__INIT;
    m.msg_case = LLAMA8__CLIENT_MESSAGE__MSG_HELLO;
    m.hello = &h;
    size_t n = llama8__client_message__pack(&m, buf);
    REQUIRE(send(fd, buf, n, 0) == (ssize_t)n, "send hello");
}

/* Hello, Welcome, map the memfd and check its seals and header. */
static inline void raw_connect(struct raw *r, const char *path)
{
    memset(r, 0, sizeof(*r));
    r->fd = raw_socket(path);
    raw_hello(r->fd, L8_PROTO_VERSION);
    int fds[3] = { -1, -1, -1 };
    Llama8__DaemonMessage *m = raw_recv(r->fd, fds, 10000);
    REQUIRE(m && m->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_WELCOME && fds[0] >= 0, "welcome");
    r->size = m->welcome->shm_size;
    llama8__daemon_message__free_unpacked(m, NULL);
    /* The memfd is sealed: it can be neither shrunk nor grown. */
    CHECK(ftruncate(fds[0], 4096) < 0 && errno == EPERM, "memfd shrinkable");
    CHECK(fcntl(fds[0], F_GET_SEALS) == (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL), "seals");
    r->map = mmap(NULL, r->size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
    REQUIRE(r->map != MAP_FAILED, "mmap");
    close(fds[0]);
    r->sq_efd = fds[1];
    r->eq_efd = fds[2];
    memcpy(&r->h, r->map, sizeof(r->h));
    REQUIRE(l8_shm_hdr_valid(&r->h, r->size), "header");
    r->sq_ctl = (void *)(r->map + r->h.sq_ctl_off);
    r->eq_ctl = (void *)(r->map + r->h.eq_ctl_off);
    r->sq = (void *)(r->map + r->h.sq_off);
    r->eq = (void *)(r->map + r->h.eq_off);
    r->arena = r->map + r->h.arena_off;
}

static inline void raw_close(struct raw *r)
{
    munmap(r->map, r->size);
    close(r->fd);
    close(r->sq_efd);
    close(r->eq_efd);
}

static inline void raw_ring(struct raw *r)
{
    uint64_t one = 1;
    if (write(r->sq_efd, &one, 8) != 8) {
    }
}

/* Publish one entry (kind, off, len) and ring. */
static inline void raw_submit(struct raw *r, uint8_t kind, uint32_t off, uint32_t len)
{
    r->sq[r->tail & (r->h.sq_entries - 1)] = (struct l8_sqe){ .msg_off = off, .msg_len = len,
                                                              .kind = kind };
    r->tail++;
    atomic_store_explicit(&r->sq_ctl->tail, r->tail, memory_order_release);
    raw_ring(r);
}

/* Wait for one event on the raw client's ring. */
static inline bool raw_event(struct raw *r, struct l8_event *ev, int timeout_ms)
{
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    while (t_now_ms() < end) {
        uint32_t t = atomic_load_explicit(&r->eq_ctl->tail, memory_order_acquire);
        if (t != r->eq_head) {
            *ev = r->eq[r->eq_head & (r->h.eq_entries - 1)];
            r->eq_head++;
            atomic_store_explicit(&r->eq_ctl->head, r->eq_head, memory_order_release);
            return true;
        }
        usleep(1000);
    }
    return false;
}
