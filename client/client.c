/* client.c - libllama8client: the client side of llama8d's protocol.
 *
 * The arena is used as a byte ring in submission order: each submission
 * takes one contiguous chunk (prompt tokens, then the protobuf message),
 * and the chunk is free again once the daemon has advanced the submission
 * ring's head past its entry (the daemon copies everything out before it
 * does). sq_end[] remembers where each entry's chunk ends. A generate
 * request's chunk is its prompt tokens, its constraint's text (if any),
 * then the GenerateRequest, each part 8-aligned.
 *
 * The control socket carries fatal Errors (then the hang-up) and one kind
 * that is not: BAD_GRAMMAR with a request id, the reason for that
 * request's ERROR event, kept in req_err[] for l8c_request_error. */
#include "llama8client.h"

#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "l8_shm.h"   /* the rings: not in the public headers */
#include "proto/l8_clock.h"
#include "llama8.pb-c.h"

struct l8c_client {
    int sock;
    int shm_fd, sq_efd, eq_efd;
    uint8_t *map;
    uint64_t map_size;
    struct l8_shm_hdr geo;          /* our copy of the header */
    struct l8_ring_ctl *sq_ctl, *eq_ctl;
    struct l8_sqe *sq;
    struct l8_event *eq;
    uint8_t *arena;
    uint32_t sq_tail;               /* ours: next entry to write */
    uint32_t sq_head_seen;          /* last daemon head we reclaimed up to */
    uint32_t eq_head;               /* ours: next event to read */
    uint64_t arena_tail, arena_head;/* free-running byte counters */
    uint64_t *sq_end;               /* [sq_entries] arena_tail after each entry */
    uint64_t next_id;
    bool dead;
    int pending_rc;                 /* a fatal Error read outside l8c_poll_events
                                       (by l8c_request_error): its errno, which
                                       the next l8c_poll_events returns */
    bool armed;                     /* we set NEED_WAKEUP on the event ring */
    struct {
        uint64_t id;
        char *msg;                  /* malloc'd; NULL: slot unused */
    } req_err[L8C_REQUEST_ERRORS];  /* the last BAD_GRAMMAR messages */
    unsigned req_err_next;          /* the slot the next one takes */
    int last_code;
    char last_err[L8C_ERRLEN];
    struct l8c_info info;
    char *s_daemon_version, *s_model_name, *s_model_dir, *s_backend;
    l8tok *tok;                     /* l8c_tokenizer's, loaded on first use */
};

static const char *const err_names[] = {
    "NONE", "BAD_MESSAGE", "BAD_TOKEN", "PROMPT_TOO_LONG", "BAD_PARAMS",
    "UNKNOWN_REQUEST", "TOO_MANY_REQUESTS", "TOO_MANY_CLIENTS",
    "PERMISSION_DENIED", "SHUTTING_DOWN", "INTERNAL", "BAD_VERSION",
    "RING_VIOLATION", "DUPLICATE_REQUEST", "EMPTY_PROMPT", "BAD_GRAMMAR",
    "KV_POOL_TOO_SMALL",
};
_Static_assert(sizeof(err_names) / sizeof(err_names[0]) == L8_ERR_MAX_, "names");
_Static_assert((int)L8C_CONSTRAINT_NONE == (int)LLAMA8__CONSTRAINT_KIND__CONSTRAINT_NONE &&
               (int)L8C_CONSTRAINT_GBNF == (int)LLAMA8__CONSTRAINT_KIND__CONSTRAINT_GBNF &&
               (int)L8C_CONSTRAINT_JSON_SCHEMA ==
                   (int)LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON_SCHEMA &&
               (int)L8C_CONSTRAINT_REGEX == (int)LLAMA8__CONSTRAINT_KIND__CONSTRAINT_REGEX &&
               (int)L8C_CONSTRAINT_JSON == (int)LLAMA8__CONSTRAINT_KIND__CONSTRAINT_JSON,
               "enum l8c_constraint is llama8.proto's ConstraintKind");
_Static_assert(L8_MAX_CONSTRAINT <= L8_MAX_ARENA, "a constraint fits an arena");
_Static_assert(L8_ERR_MAX_ <= sizeof(((struct l8c_status *)0)->errors) / sizeof(uint64_t),
               "l8c_status.errors holds every code");

const char *l8c_err_name(int code)
{
    if (code < 0 || code >= L8_ERR_MAX_)
        return "UNKNOWN";
    return err_names[code];
}

const char *l8c_done_name(int reason)
{
    static const char *const n[] = { "none", "eos", "stop", "length", "context", "cancelled",
                                     "grammar" };
    if (reason < 0 || reason >= (int)(sizeof(n) / sizeof(n[0])))
        return "unknown";
    return n[reason];
}

uint64_t l8c_now_ns(void)
{
    return l8_now_ns();
}

const char *l8c_default_socket(void)
{
    const char *e = getenv(L8_SOCKET_ENV);
    return e && *e ? e : L8_DEFAULT_SOCKET;
}

uint32_t l8c_max_new_fitting(const struct l8c_info *in, size_t n_prompt, uint32_t cap)
{
    uint32_t m = in->max_new_tokens;
    if (cap && cap < m)
        m = cap;
    if (n_prompt < in->context_length && in->context_length - n_prompt < m)
        m = (uint32_t)(in->context_length - n_prompt);
    return m ? m : 1;
}

void l8c_params_init(struct l8c_params *p)
{
    *p = (struct l8c_params){ .temperature = 0.0f, .top_k = 0, .top_p = 1.0f,
                              .min_p = 0.0f, .repetition_penalty = 1.0f,
                              .seed = 0, .max_new_tokens = 256 };
}

static void set_err(struct l8c_client *c, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void set_err(struct l8c_client *c, int code, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->last_err, sizeof(c->last_err), fmt, ap);
    va_end(ap);
    c->last_code = code;
}

const char *l8c_last_error(const struct l8c_client *c, int *code)
{
    if (code)
        *code = c->last_code;
    return c->last_err;
}

const struct l8c_info *l8c_info(const struct l8c_client *c) { return &c->info; }
int l8c_event_fd(const struct l8c_client *c) { return c->eq_efd; }
int l8c_ctl_fd(const struct l8c_client *c) { return c->sock; }

static int errno_of_code(int code)
{
    switch (code) {
    case L8_ERR_PERMISSION_DENIED: return -EPERM;
    case L8_ERR_TOO_MANY_CLIENTS:  return -EUSERS;
    case L8_ERR_BAD_VERSION:       return -EPROTO;
    case L8_ERR_SHUTTING_DOWN:     return -ESHUTDOWN;
    default:                       return -ECONNRESET;
    }
}

static void close_fd(int *fd)
{
    if (*fd >= 0)
        close(*fd);
    *fd = -1;
}

void l8c_close(struct l8c_client *c)
{
    if (!c)
        return;
    if (c->map)
        munmap(c->map, c->map_size);
    close_fd(&c->sock);
    close_fd(&c->shm_fd);
    close_fd(&c->sq_efd);
    close_fd(&c->eq_efd);
    free(c->sq_end);
    for (unsigned i = 0; i < L8C_REQUEST_ERRORS; i++)
        free(c->req_err[i].msg);
    free(c->s_daemon_version);
    free(c->s_model_name);
    free(c->s_model_dir);
    free(c->s_backend);
    l8tok_free(c->tok);
    free(c);
}

const l8tok *l8c_tokenizer(struct l8c_client *c)
{
    if (c->tok)
        return c->tok;
    char path[4096 + 32];
    snprintf(path, sizeof path, "%s/tokenizer.json", c->info.model_dir);
    int rc = l8tok_load(path, &c->tok);
    if (rc < 0) {
        c->tok = NULL;
        set_err(c, 0, "the served model's tokenizer %s: %s", path, strerror(-rc));
    }
    return c->tok;
}

static int send_ctl(struct l8c_client *c, const Llama8__ClientMessage *m)
{
    uint8_t buf[L8_MAX_CTL_MSG];
    size_t n = llama8__client_message__get_packed_size(m);
    if (n > sizeof(buf))
        return -EMSGSIZE;
    llama8__client_message__pack(m, buf);
    if (send(c->sock, buf, n, MSG_NOSIGNAL) != (ssize_t)n) {
        int e = errno;
        set_err(c, 0, "send to daemon: %s", strerror(e));
        c->dead = true;
        return -ECONNRESET;
    }
    return 0;
}

/* Receive one control datagram (waiting up to timeout_ms), with up to
 * L8_N_FDS descriptors. Returns the parsed message, NULL with *rc set. */
static Llama8__DaemonMessage *recv_ctl(struct l8c_client *c, int timeout_ms,
                                       int fds[L8_N_FDS], int *nfds, int *rc)
{
    uint8_t buf[L8_MAX_CTL_MSG];
    union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * L8_N_FDS)]; } cm;
    struct iovec iov = { buf, sizeof(buf) };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1,
                         .msg_control = cm.b, .msg_controllen = sizeof(cm.b) };
    struct pollfd pfd = { c->sock, POLLIN, 0 };
    int pr;
    do
        pr = poll(&pfd, 1, timeout_ms);
    while (pr < 0 && errno == EINTR);
    if (pr == 0) {
        *rc = -ETIMEDOUT;
        return NULL;
    }
    ssize_t n = recvmsg(c->sock, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (nfds)
        *nfds = 0;
    for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); h; h = CMSG_NXTHDR(&mh, h)) {
        if (h->cmsg_level != SOL_SOCKET || h->cmsg_type != SCM_RIGHTS)
            continue;
        int k = (int)((h->cmsg_len - CMSG_LEN(0)) / sizeof(int));
        int got[L8_N_FDS + 4];
        if (k > L8_N_FDS + 4)
            k = L8_N_FDS + 4;
        memcpy(got, CMSG_DATA(h), (size_t)k * sizeof(int));
        for (int i = 0; i < k; i++) {
            if (fds && nfds && *nfds < L8_N_FDS)
                fds[(*nfds)++] = got[i];
            else
                close(got[i]);
        }
    }
    if (n <= 0) {
        if (n < 0 && errno == EAGAIN) {
            *rc = -ETIMEDOUT;
            return NULL;
        }
        if (!c->last_code)
            set_err(c, 0, "daemon closed the connection");
        c->dead = true;
        *rc = -ECONNRESET;
        return NULL;
    }
    if (mh.msg_flags & MSG_CTRUNC) {
        /* The daemon sends at most L8_N_FDS, which fit: the kernel could not
         * install them here. */
        set_err(c, 0, "the descriptors from the daemon were cut off: is this process out of "
                      "file descriptors (RLIMIT_NOFILE)?");
        *rc = -EMFILE;
        return NULL;
    }
    if (mh.msg_flags & MSG_TRUNC) {
        set_err(c, 0, "oversized message from daemon");
        *rc = -EPROTO;
        return NULL;
    }
    Llama8__DaemonMessage *m = llama8__daemon_message__unpack(NULL, (size_t)n, buf);
    if (!m) {
        set_err(c, 0, "unparsable message from daemon");
        *rc = -EPROTO;
        return NULL;
    }
    return m;
}

/* An Error on the control socket ends the connection (the daemon only
 * sends one before hanging up). */
static int take_error(struct l8c_client *c, const Llama8__Error *e)
{
    set_err(c, (int)e->code, "daemon: %s: %s", l8c_err_name((int)e->code),
            e->message ? e->message : "");
    c->dead = true;
    return errno_of_code((int)e->code);
}

static char *dupstr(const char *s) { return strdup(s ? s : ""); }

/* Whether e is about one request only (the connection stays): BAD_GRAMMAR
 * with its id, the reason of that request's ERROR event. */
static bool is_request_error(const Llama8__Error *e)
{
    return e->request_id != 0 && e->code == LLAMA8__ERROR_CODE__BAD_GRAMMAR;
}

/* Keep a request's Error for l8c_request_error: in the slot of an earlier
 * one for the same id, else in the oldest slot. Out of memory: kept as
 * nothing (l8c_request_error says NULL; the event still tells the code). */
static void keep_request_error(struct l8c_client *c, const Llama8__Error *e)
{
    unsigned slot = c->req_err_next;
    for (unsigned i = 0; i < L8C_REQUEST_ERRORS; i++)
        if (c->req_err[i].msg && c->req_err[i].id == e->request_id) {
            slot = i;
            break;
        }
    if (slot == c->req_err_next)
        c->req_err_next = (c->req_err_next + 1) % L8C_REQUEST_ERRORS;
    free(c->req_err[slot].msg);
    c->req_err[slot].id = e->request_id;
    c->req_err[slot].msg = dupstr(e->message);
}

static int take_welcome(struct l8c_client *c, const Llama8__Welcome *w,
                        const int fds[L8_N_FDS])
{
    struct stat st;
    if (w->protocol_version != L8_PROTO_VERSION) {
        set_err(c, L8_ERR_BAD_VERSION, "daemon speaks protocol %u, we speak %u",
                w->protocol_version, L8_PROTO_VERSION);
        return -EPROTO;
    }
    c->shm_fd = fds[L8_FD_SHM];
    c->sq_efd = fds[L8_FD_SQ_DOORBELL];
    c->eq_efd = fds[L8_FD_EQ_DOORBELL];
    if (fstat(c->shm_fd, &st) < 0 || st.st_size <= 0 ||
        (uint64_t)st.st_size != w->shm_size) {
        set_err(c, 0, "shared memory size does not match the Welcome");
        return -EPROTO;
    }
    c->map_size = (uint64_t)st.st_size;
    c->map = mmap(NULL, c->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, c->shm_fd, 0);
    if (c->map == MAP_FAILED) {
        c->map = NULL;
        int e = errno;
        set_err(c, 0, "mmap: %s", strerror(e));
        return -e;
    }
    memcpy(&c->geo, c->map, sizeof(c->geo));
    if (!l8_shm_hdr_valid(&c->geo, c->map_size) || c->geo.sq_entries != w->sq_entries ||
        c->geo.eq_entries != w->eq_entries || c->geo.arena_size != w->arena_size) {
        set_err(c, 0, "shared memory header is not the layout we know");
        return -EPROTO;
    }
    c->sq_ctl = (struct l8_ring_ctl *)(c->map + c->geo.sq_ctl_off);
    c->sq = (struct l8_sqe *)(c->map + c->geo.sq_off);
    c->eq_ctl = (struct l8_ring_ctl *)(c->map + c->geo.eq_ctl_off);
    c->eq = (struct l8_event *)(c->map + c->geo.eq_off);
    c->arena = c->map + c->geo.arena_off;
    c->sq_end = calloc(c->geo.sq_entries, sizeof(*c->sq_end));
    if (!c->sq_end)
        return -ENOMEM;
    /* Fresh rings start at zero; take whatever the daemon set. */
    c->sq_tail = atomic_load_explicit(&c->sq_ctl->tail, memory_order_relaxed);
    c->sq_head_seen = c->sq_tail;
    c->eq_head = atomic_load_explicit(&c->eq_ctl->head, memory_order_relaxed);

    struct l8c_info *i = &c->info;
    c->s_daemon_version = dupstr(w->daemon_version);
    c->s_model_name = dupstr(w->model_name);
    c->s_model_dir = dupstr(w->model_dir);
    c->s_backend = dupstr(w->backend);
    if (!c->s_daemon_version || !c->s_model_name || !c->s_model_dir || !c->s_backend)
        return -ENOMEM;
    i->client_id = w->client_id;
    i->protocol_version = w->protocol_version;
    i->daemon_version = c->s_daemon_version;
    i->model_name = c->s_model_name;
    i->model_dir = c->s_model_dir;
    i->backend = c->s_backend;
    i->vocab_size = w->vocab_size;
    i->context_length = w->context_length;
    i->bos_id = w->bos_id;
    i->n_eos = w->n_eos_ids < L8C_MAX_EOS ? (uint32_t)w->n_eos_ids : L8C_MAX_EOS;
    for (uint32_t k = 0; k < i->n_eos; k++)
        i->eos_ids[k] = w->eos_ids[k];
    i->max_requests = w->max_requests;
    i->max_prompt_tokens = w->max_prompt_tokens;
    i->max_new_tokens = w->max_new_tokens;
    i->max_stop_ids = w->max_stop_ids;
    i->max_priority = w->max_priority;
    i->sq_entries = w->sq_entries;
    i->eq_entries = w->eq_entries;
    i->arena_size = w->arena_size;
    return 0;
}

/* A Loading message: the daemon is still loading; tell the caller. */
static void take_loading(const Llama8__Loading *lo, const struct l8c_connect_opts *o)
{
    if (!o || !o->on_loading)
        return;
    struct l8c_loading l = {
        .model_name = lo->model_name ? lo->model_name : "",
        .stage = lo->stage ? lo->stage : "",
        .weight_bytes = lo->weight_bytes,
        .placed_bytes = lo->placed_bytes < lo->weight_bytes ? lo->placed_bytes : lo->weight_bytes,
        .elapsed_s = (double)lo->elapsed_ms / 1e3,
    };
    o->on_loading(o->arg, &l);
}

int l8c_connect(const char *path, const char *name, struct l8c_client **out,
                char err[L8C_ERRLEN])
{
    struct l8c_connect_opts o = { .name = name };
    return l8c_connect_with(path, &o, out, err);
}

/* Without a Loading message or the Welcome for this long, the daemon is
 * not coming (a loading one says how far it is every quarter second). */
#define CONNECT_SILENCE_MS 120000

int l8c_connect_with(const char *path, const struct l8c_connect_opts *o,
                     struct l8c_client **out, char err[L8C_ERRLEN])
{
    const char *name = o ? o->name : NULL;
    const uint64_t t_end = o && o->wait_ms > 0 ? l8c_now_ns() + (uint64_t)o->wait_ms * 1000000u : 0;
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int fds[L8_N_FDS], nfds = 0, rc;
    Llama8__DaemonMessage *dm = NULL;
    struct l8c_client *c = calloc(1, sizeof(*c));
    if (!c) {
        if (err)
            snprintf(err, L8C_ERRLEN, "out of memory");
        return -ENOMEM;
    }
    c->sock = c->shm_fd = c->sq_efd = c->eq_efd = -1;
    c->next_id = 1;
    if (!path)
        path = l8c_default_socket();
    if (strlen(path) >= sizeof(sa.sun_path)) {
        set_err(c, 0, "socket path too long: %s", path);
        rc = -ENAMETOOLONG;
        goto err;
    }
    strcpy(sa.sun_path, path);
    c->sock = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c->sock < 0 || connect(c->sock, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
        rc = -errno;
        set_err(c, 0, "connect %s: %s", path, strerror(-rc));
        goto err;
    }
    Llama8__Hello hello = LLAMA8__HELLO__INIT;
    hello.protocol_version = L8_PROTO_VERSION;
    hello.client_name = (char *)(name ? name : "libllama8client");
    hello.wait_loading = true;
    Llama8__ClientMessage cm = LLAMA8__CLIENT_MESSAGE__INIT;
    cm.msg_case = LLAMA8__CLIENT_MESSAGE__MSG_HELLO;
    cm.hello = &hello;
    /* If the send fails the daemon may already have refused us (too many
     * clients, permissions) and hung up: its Error is still queued. */
    bool sent = send_ctl(c, &cm) == 0;
    c->dead = false;
    /* A daemon still loading sends Loading messages until its Welcome. */
    for (;;) {
        int wait = sent ? CONNECT_SILENCE_MS : 1000;
        if (t_end) {
            uint64_t now = l8c_now_ns();
            int left = now >= t_end ? 0 : (int)((t_end - now + 999999) / 1000000u);
            wait = left < wait ? left : wait;
        }
        dm = recv_ctl(c, wait, fds, &nfds, &rc);
        if (dm && dm->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_LOADING) {
            for (int k = 0; k < nfds; k++)
                close(fds[k]);
            take_loading(dm->loading, o);
            llama8__daemon_message__free_unpacked(dm, NULL);
            continue;
        }
        break;
    }
    if (!dm) {
        for (int k = 0; k < nfds; k++)
            close(fds[k]);
        if (rc == -ETIMEDOUT && t_end && l8c_now_ns() >= t_end)
            set_err(c, 0, "the daemon is still loading (waited %d ms)", o->wait_ms);
        else if (rc == -ETIMEDOUT)
            set_err(c, 0, "no answer from the daemon");
        goto err;
    }
    if (dm->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_ERROR) {
        for (int k = 0; k < nfds; k++)
            close(fds[k]);
        rc = take_error(c, dm->error);
        goto err;
    }
    if (dm->msg_case != LLAMA8__DAEMON_MESSAGE__MSG_WELCOME || nfds != L8_N_FDS) {
        for (int k = 0; k < nfds; k++)
            close(fds[k]);
        set_err(c, 0, "daemon did not answer Hello with a Welcome and %d descriptors",
                L8_N_FDS);
        rc = -EPROTO;
        goto err;
    }
    if ((rc = take_welcome(c, dm->welcome, fds)) < 0)
        goto err;
    llama8__daemon_message__free_unpacked(dm, NULL);
    c->last_err[0] = 0;
    *out = c;
    return 0;
err:
    if (dm)
        llama8__daemon_message__free_unpacked(dm, NULL);
    if (err)
        snprintf(err, L8C_ERRLEN, "%s", c->last_err[0] ? c->last_err : strerror(-rc));
    l8c_close(c);
    return rc;
}

/* Reclaim arena space of entries the daemon has consumed. */
static int reclaim(struct l8c_client *c)
{
    /* acquire: pairs with the daemon's release store of head, made after
     * it copied the entries out, so the arena bytes are no longer read. */
    uint32_t h = atomic_load_explicit(&c->sq_ctl->head, memory_order_acquire);
    if ((uint32_t)(c->sq_tail - h) > c->geo.sq_entries || (uint32_t)(h - c->sq_head_seen) >
        (uint32_t)(c->sq_tail - c->sq_head_seen)) {
        set_err(c, 0, "daemon's submission head is out of range");
        return -EPROTO;
    }
    if (h != c->sq_head_seen) {
        c->arena_head = c->sq_end[(h - 1) & (c->geo.sq_entries - 1)];
        c->sq_head_seen = h;
    }
    return 0;
}

/* Take len bytes (a 64-byte multiple) of contiguous arena space. */
static int arena_alloc(struct l8c_client *c, uint32_t len, uint32_t *off)
{
    uint64_t size = c->geo.arena_size;
    uint64_t pos = c->arena_tail % size, skip = 0;
    if (len > size)
        return -EINVAL;
    if (pos + len > size && c->arena_tail == c->arena_head) {
        /* Nothing in flight (every chunk reclaimed): start over at 0 without
         * counting the unused end as taken, or a chunk of more than half the
         * arena could wait for space that never comes. */
        c->arena_tail = c->arena_head = c->arena_tail - pos + size;
        pos = 0;
    }
    if (pos + len > size)
        skip = size - pos;      /* would straddle the end: start over at 0 */
    if (c->arena_tail + skip + len - c->arena_head > size)
        return -EAGAIN;
    c->arena_tail += skip;
    *off = (uint32_t)(c->arena_tail % size);
    c->arena_tail += len;
    return 0;
}

/* Publish one entry whose arena chunk ends at arena_tail. */
static void publish(struct l8c_client *c, uint32_t off, uint32_t len, uint8_t kind)
{
    struct l8_sqe *e = &c->sq[c->sq_tail & (c->geo.sq_entries - 1)];
    *e = (struct l8_sqe){ .msg_off = off, .msg_len = len, .kind = kind };
    c->sq_end[c->sq_tail & (c->geo.sq_entries - 1)] = c->arena_tail;
    c->sq_tail++;
    /* release: orders the arena bytes and the entry before the new tail,
     * so the daemon that acquires the tail sees them complete. */
    atomic_store_explicit(&c->sq_ctl->tail, c->sq_tail, memory_order_release);
    /* seq_cst fence: orders the tail store before the flag load (Dekker
     * with the daemon's flag store + fence + tail load). */
    atomic_thread_fence(memory_order_seq_cst);
    if (atomic_load_explicit(&c->sq_ctl->flags, memory_order_relaxed) & L8_RING_NEED_WAKEUP) {
        uint64_t one = 1;
        if (write(c->sq_efd, &one, sizeof(one)) < 0) {
            /* EAGAIN: the counter is saturated, the daemon will wake anyway. */
        }
    }
}

/* Write one entry's chunk: prompt[n] and text[text_len] (g's, for a
 * generate request; text_len <= L8_MAX_CONSTRAINT) before the message m. */
static int submit_msg(struct l8c_client *c, uint8_t kind, const ProtobufCMessage *m,
                      const uint32_t *prompt, uint32_t n, const char *text, size_t text_len,
                      Llama8__GenerateRequest *g)
{
    int rc;
    if (c->dead)
        return -ECONNRESET;
    if ((rc = reclaim(c)) < 0)
        return rc;
    if ((uint32_t)(c->sq_tail - c->sq_head_seen) >= c->geo.sq_entries)
        return -EAGAIN;
    size_t tok_bytes = l8_align_up((size_t)n * 4, 8);
    size_t text_bytes = l8_align_up(text_len, 8);
    /* The packed size depends on the offsets (varints): size it with the
     * largest offset, then pack with the real ones. */
    if (g) {
        g->prompt_offset = c->geo.arena_size;
        g->prompt_count = n;
        g->constraint_offset = text_len ? c->geo.arena_size : 0;
        g->constraint_len = (uint32_t)text_len;
    }
    size_t msg_max = protobuf_c_message_get_packed_size(m);
    if (msg_max > L8_MAX_REQ_MSG)
        return -EINVAL;
    size_t total = l8_align_up(tok_bytes + text_bytes + msg_max, L8_CACHELINE);
    if (total > c->geo.arena_size)
        return -EINVAL;
    uint32_t off;
    if ((rc = arena_alloc(c, (uint32_t)total, &off)) < 0)
        return rc;
    if (g) {
        g->prompt_offset = off;
        if (n)   /* an empty prompt may be NULL: the daemon answers EMPTY_PROMPT */
            memcpy(c->arena + off, prompt, (size_t)n * 4);
        if (text_len) {
            g->constraint_offset = off + (uint32_t)tok_bytes;
            memcpy(c->arena + off + tok_bytes, text, text_len);
        }
    }
    const size_t msg_off = tok_bytes + text_bytes;
    size_t len = protobuf_c_message_pack(m, c->arena + off + msg_off);
    publish(c, off + (uint32_t)msg_off, (uint32_t)len, kind);
    return 0;
}

/* What the daemon says of a code when its ERROR record names no field. */
static const char *const err_texts[] = {
    "no error",
    "the daemon could not read the request",
    "a token id is outside the vocabulary",
    "the prompt is too long",
    "a parameter is out of range",
    "no request with this id is waiting or running",
    "too many requests in flight",
    "the daemon has as many clients as it takes",
    "not root and not in the daemon's allowed group",
    "the daemon is shutting down",
    "the engine failed (not the request's fault: the daemon's log says why)",
    "the daemon does not speak this protocol version",
    "the shared-memory rings were misused: disconnected",
    "a request with this id is still running",
    "the prompt is empty",
    "the constraint cannot be compiled",
    "the request needs more KV pages than the daemon's pool has",
};
_Static_assert(sizeof(err_texts) / sizeof(err_texts[0]) == L8_ERR_MAX_, "texts");

const char *l8c_wait_name(int reason)
{
    return reason == L8_WAIT_QUEUE ? "queue" : reason == L8_WAIT_PAGES ? "pages"
         : reason == L8_WAIT_SLOTS ? "slots" : "?";
}

const char *l8c_wait_text(const struct l8_event *e, char buf[L8C_ERRLEN])
{
    if (e->reason == L8_WAIT_PAGES)
        snprintf(buf, L8C_ERRLEN, "for KV pages: needs %u, %u free", e->token, e->index);
    else if (e->reason == L8_WAIT_SLOTS)
        snprintf(buf, L8C_ERRLEN, "for a free sequence slot (%u request%s ahead)", e->index,
                 e->index == 1 ? "" : "s");
    else
        snprintf(buf, L8C_ERRLEN, "behind %u request%s", e->index, e->index == 1 ? "" : "s");
    return buf;
}

const char *l8c_error_text(const struct l8_event *e, char buf[L8C_ERRLEN])
{
    const uint32_t v = e->token, lim = e->index;
    const double f = e->logprob;
    switch (e->kind == L8_EV_ERROR ? e->reason : L8_EF_NONE) {
    case L8_EF_PROMPT_TOKENS:
        if (v == 0)
            snprintf(buf, L8C_ERRLEN, "the prompt is empty");
        else
            snprintf(buf, L8C_ERRLEN, "the prompt has %u tokens, the daemon takes at most %u",
                     v, lim);
        break;
    case L8_EF_PROMPT_ID:
        snprintf(buf, L8C_ERRLEN, "prompt token id %u is outside the vocabulary (%u ids)", v, lim);
        break;
    case L8_EF_STOP_ID:
        snprintf(buf, L8C_ERRLEN, "stop id %u is outside the vocabulary (%u ids)", v, lim);
        break;
    case L8_EF_STOP_IDS:
        snprintf(buf, L8C_ERRLEN, "%u stop ids: the daemon takes at most %u", v, lim);
        break;
    case L8_EF_MAX_NEW:
        snprintf(buf, L8C_ERRLEN, "max_new_tokens %u: the daemon takes 1 to %u", v, lim);
        break;
    case L8_EF_CONTEXT:
        snprintf(buf, L8C_ERRLEN, "prompt + max_new_tokens is %u tokens, more than the context "
                 "length %u", v, lim);
        break;
    case L8_EF_KV_PAGES:
        snprintf(buf, L8C_ERRLEN, "prompt + max_new_tokens need %u KV pages, the daemon's pool "
                 "has %u", v, lim);
        break;
    case L8_EF_TEMPERATURE:
        snprintf(buf, L8C_ERRLEN, "temperature %g: 0 (greedy) to %g", f, L8_TEMPERATURE_MAX);
        break;
    case L8_EF_TOP_P:
        snprintf(buf, L8C_ERRLEN, "top_p %g: above 0, at most 1", f);
        break;
    case L8_EF_MIN_P:
        snprintf(buf, L8C_ERRLEN, "min_p %g: 0 to 1", f);
        break;
    case L8_EF_REPETITION_PENALTY:
        snprintf(buf, L8C_ERRLEN, "repetition_penalty %g: above 0, at most %g", f,
                 L8_PENALTY_MAX);
        break;
    case L8_EF_REQUESTS:
        snprintf(buf, L8C_ERRLEN, "%u requests in flight: the limit is %u", v, lim);
        break;
    case L8_EF_UID_REQUESTS:
        snprintf(buf, L8C_ERRLEN, "%u requests of this user in flight: its share of the "
                 "daemon's queue is %u now (other users hold the rest)", v, lim);
        break;
    case L8_EF_PRIORITY:
        snprintf(buf, L8C_ERRLEN, "priority %u: above %u is for root and the daemon's user", v,
                 lim);
        break;
    case L8_EF_PROMPT_RANGE:
        snprintf(buf, L8C_ERRLEN, "the prompt at offset %u is not inside the shared arena "
                 "(%u bytes) or not 4-aligned", v, lim);
        break;
    case L8_EF_CONSTRAINT_RANGE:
        snprintf(buf, L8C_ERRLEN, "the constraint's text at offset %u is not inside the shared "
                 "arena (%u bytes)", v, lim);
        break;
    case L8_EF_CONSTRAINT_LEN:
        snprintf(buf, L8C_ERRLEN, "the constraint's text has %u bytes, the daemon takes at most "
                 "%u", v, lim);
        break;
    default:
        snprintf(buf, L8C_ERRLEN, "%s", e->code < L8_ERR_MAX_ ? err_texts[e->code]
                                                              : "an error the library does not know");
    }
    return buf;
}

/* The daemon's checks of a request, in its order (session.c on_generate,
 * then l8_sched_submit): the first broken limit as the ERROR record it
 * would send, or code 0. The protocol reads top_p and repetition_penalty
 * 0 as 1 (off). */
#define REFUSE(c, f, v, l, fv)                                                              \
    do {                                                                                    \
        *e = (struct l8_event){ .kind = L8_EV_ERROR, .code = (c), .reason = (f),            \
                                .token = (v), .index = (l), .logprob = (fv) };             \
        return;                                                                             \
    } while (0)

static void check_request(const struct l8c_info *in, const uint32_t *prompt, uint32_t n,
                          const struct l8c_params *p, struct l8_event *e)
{
    if (n == 0)
        REFUSE(L8_ERR_EMPTY_PROMPT, L8_EF_PROMPT_TOKENS, 0, in->max_prompt_tokens, NAN);
    if (n > in->max_prompt_tokens)
        REFUSE(L8_ERR_PROMPT_TOO_LONG, L8_EF_PROMPT_TOKENS, n, in->max_prompt_tokens, NAN);
    if (p->max_new_tokens == 0 || p->max_new_tokens > in->max_new_tokens)
        REFUSE(L8_ERR_BAD_PARAMS, L8_EF_MAX_NEW, p->max_new_tokens, in->max_new_tokens, NAN);
    if (p->n_stop_ids > in->max_stop_ids)
        REFUSE(L8_ERR_BAD_PARAMS, L8_EF_STOP_IDS, p->n_stop_ids, in->max_stop_ids, NAN);
    if (p->priority > in->max_priority)
        REFUSE(L8_ERR_BAD_PARAMS, L8_EF_PRIORITY, (uint32_t)p->priority,
               (uint32_t)(in->max_priority < 0 ? 0 : in->max_priority), NAN);
    for (uint32_t i = 0; i < p->n_stop_ids; i++)
        if (p->stop_ids[i] >= in->vocab_size)
            REFUSE(L8_ERR_BAD_TOKEN, L8_EF_STOP_ID, p->stop_ids[i], in->vocab_size, NAN);
    /* The constraint's length (whether it compiles only the daemon knows),
     * and a kind the protocol does not have, which it cannot compile. */
    if (p->constraint != L8C_CONSTRAINT_NONE && p->constraint_len > L8_MAX_CONSTRAINT)
        REFUSE(L8_ERR_BAD_GRAMMAR, L8_EF_CONSTRAINT_LEN,
               p->constraint_len > UINT32_MAX ? UINT32_MAX : (uint32_t)p->constraint_len,
               L8_MAX_CONSTRAINT, NAN);
    if (p->constraint < L8C_CONSTRAINT_NONE || p->constraint > L8C_CONSTRAINT_JSON)
        REFUSE(L8_ERR_BAD_GRAMMAR, L8_EF_NONE, 0, 0, NAN);
    for (uint32_t i = 0; i < n; i++)
        if (prompt[i] >= in->vocab_size)
            REFUSE(L8_ERR_BAD_TOKEN, L8_EF_PROMPT_ID, prompt[i], in->vocab_size, NAN);
    const float top_p = p->top_p == 0 ? 1 : p->top_p;
    const float pen = p->repetition_penalty == 0 ? 1 : p->repetition_penalty;
    if (!(p->temperature >= 0 && p->temperature <= L8_TEMPERATURE_MAX))
        REFUSE(L8_ERR_BAD_PARAMS, L8_EF_TEMPERATURE, 0, 0, p->temperature);
    if (!(top_p > 0 && top_p <= 1))
        REFUSE(L8_ERR_BAD_PARAMS, L8_EF_TOP_P, 0, 0, top_p);
    if (!(p->min_p >= 0 && p->min_p <= 1))
        REFUSE(L8_ERR_BAD_PARAMS, L8_EF_MIN_P, 0, 0, p->min_p);
    if (!(pen > 0 && pen <= L8_PENALTY_MAX))
        REFUSE(L8_ERR_BAD_PARAMS, L8_EF_REPETITION_PENALTY, 0, 0, pen);
    if ((uint64_t)n + p->max_new_tokens > in->context_length)
        REFUSE(L8_ERR_PROMPT_TOO_LONG, L8_EF_CONTEXT, n + p->max_new_tokens,
               in->context_length, NAN);
    e->code = 0;
}
#undef REFUSE

int l8c_check_request(const struct l8c_client *c, const uint32_t *prompt, uint32_t n,
                      const struct l8c_params *p, char why[L8C_ERRLEN])
{
    struct l8_event e;
    check_request(&c->info, prompt, n, p, &e);
    if (e.code == 0) {
        why[0] = 0;
        return 0;
    }
    l8c_error_text(&e, why);
    return e.code;
}

int l8c_submit_id(struct l8c_client *c, uint64_t id, const uint32_t *prompt,
                  uint32_t n, const struct l8c_params *p)
{
    if (!c || (!prompt && n) || !p)
        return -EINVAL;
    const bool takes_text = p->constraint == L8C_CONSTRAINT_GBNF ||
                            p->constraint == L8C_CONSTRAINT_JSON_SCHEMA ||
                            p->constraint == L8C_CONSTRAINT_REGEX;
    if (p->constraint < L8C_CONSTRAINT_NONE || p->constraint > L8C_CONSTRAINT_JSON ||
        p->constraint_len > L8_MAX_CONSTRAINT || (p->constraint_len && !p->constraint_text) ||
        (!takes_text && (p->constraint_text || p->constraint_len)))
        return -EINVAL;
    Llama8__Sampling s = LLAMA8__SAMPLING__INIT;
    s.temperature = p->temperature;
    s.top_k = p->top_k;
    s.top_p = p->top_p;
    s.min_p = p->min_p;
    s.repetition_penalty = p->repetition_penalty;
    s.seed = p->seed;
    Llama8__GenerateRequest g = LLAMA8__GENERATE_REQUEST__INIT;
    g.request_id = id;
    g.sampling = &s;
    g.max_new_tokens = p->max_new_tokens;
    g.n_stop_ids = p->n_stop_ids;
    g.stop_ids = (uint32_t *)p->stop_ids;
    g.logprobs = p->logprobs;
    g.ignore_eos = p->ignore_eos;
    g.no_speculate = p->no_speculate;
    g.priority = p->priority;
    g.constraint = (Llama8__ConstraintKind)p->constraint;
    return submit_msg(c, L8_SQE_GENERATE, &g.base, prompt, n, p->constraint_text,
                      takes_text ? p->constraint_len : 0, &g);
}

int l8c_submit(struct l8c_client *c, const uint32_t *prompt, uint32_t n,
               const struct l8c_params *p, uint64_t *id)
{
    if (!c)
        return -EINVAL;
    int rc = l8c_submit_id(c, c->next_id, prompt, n, p);
    if (rc == 0) {
        if (id)
            *id = c->next_id;
        c->next_id++;
    }
    return rc;
}

int l8c_cancel(struct l8c_client *c, uint64_t id)
{
    if (!c)
        return -EINVAL;
    Llama8__Cancel m = LLAMA8__CANCEL__INIT;
    m.request_id = id;
    return submit_msg(c, L8_SQE_CANCEL, &m.base, NULL, 0, NULL, 0, NULL);
}

/* Read what the daemon sent on the socket without waiting: requests'
 * Errors (kept, and the next datagram read), a fatal Error or the hang-up. */
static int check_ctl(struct l8c_client *c)
{
    int rc = 0;
    for (;;) {
        Llama8__DaemonMessage *m = recv_ctl(c, 0, NULL, NULL, &rc);
        if (!m)
            return rc == -ETIMEDOUT ? 0 : rc;
        bool again = false;
        if (m->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_ERROR && is_request_error(m->error)) {
            keep_request_error(c, m->error);
            again = true;
        } else if (m->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_ERROR) {
            rc = take_error(c, m->error);
        } else {
            rc = 0;     /* a late Status reply: nobody waits for it any more */
        }
        llama8__daemon_message__free_unpacked(m, NULL);
        if (!again)
            return rc;
    }
}

const char *l8c_request_error(struct l8c_client *c, uint64_t id)
{
    if (!c || id == 0)
        return NULL;
    /* The message comes before the event: by the time the caller has the
     * event, it waits on the socket (unless an earlier poll read it). A
     * fatal Error read here is the next l8c_poll_events' answer. */
    if (!c->dead) {
        int rc = check_ctl(c);
        if (rc < 0 && !c->pending_rc)
            c->pending_rc = rc;
    }
    for (unsigned i = 0; i < L8C_REQUEST_ERRORS; i++)
        if (c->req_err[i].msg && c->req_err[i].id == id)
            return c->req_err[i].msg;
    return NULL;
}

/* Copy up to max records off the event ring. */
static int take_events(struct l8c_client *c, struct l8_event *ev, int max)
{
    /* acquire: pairs with the daemon's release store of tail, so the
     * records below it are complete. */
    uint32_t t = atomic_load_explicit(&c->eq_ctl->tail, memory_order_acquire);
    uint32_t used = t - c->eq_head;
    if (used > c->geo.eq_entries) {
        set_err(c, 0, "daemon's event tail is out of range");
        c->dead = true;
        return -EPROTO;
    }
    int n = 0;
    while (n < max && c->eq_head != t) {
        ev[n++] = c->eq[c->eq_head & (c->geo.eq_entries - 1)];
        c->eq_head++;
    }
    if (n) {
        /* release: our reads of the records happen before the daemon may
         * overwrite their slots. */
        atomic_store_explicit(&c->eq_ctl->head, c->eq_head, memory_order_release);
    }
    return n;
}

int l8c_poll_events(struct l8c_client *c, struct l8_event *ev, int max)
{
    if (!c || !ev || max <= 0)
        return -EINVAL;
    if (c->armed) {
        uint64_t v;
        atomic_store_explicit(&c->eq_ctl->flags, 0, memory_order_relaxed);
        if (read(c->eq_efd, &v, sizeof(v)) < 0) {
            /* EAGAIN: nobody rang */
        }
        c->armed = false;
    }
    int n = take_events(c, ev, max);
    if (n != 0)
        return n;
    if (c->pending_rc) {
        int rc = c->pending_rc;
        c->pending_rc = 0;
        return rc;
    }
    if (c->dead)
        return -ECONNRESET;
    /* The ring is empty: has the daemon said something on the control
     * socket (an Error) or hung up? Then what it published before that
     * comes first, and the error with the next call. */
    int rc = check_ctl(c);
    if (rc == 0 && !c->dead)
        return 0;
    n = take_events(c, ev, max);
    return n != 0 ? n : rc < 0 ? rc : -ECONNRESET;
}

int l8c_prepare_wait(struct l8c_client *c)
{
    atomic_store_explicit(&c->eq_ctl->flags, L8_RING_NEED_WAKEUP, memory_order_relaxed);
    c->armed = true;
    /* seq_cst fence: orders the flag store before the tail load (Dekker
     * with the daemon's tail store + fence + flag load). */
    atomic_thread_fence(memory_order_seq_cst);
    uint32_t t = atomic_load_explicit(&c->eq_ctl->tail, memory_order_relaxed);
    return t != c->eq_head;
}

int l8c_wait_events(struct l8c_client *c, struct l8_event *ev, int max, int timeout_ms)
{
    uint64_t deadline = timeout_ms >= 0 ? l8c_now_ns() + (uint64_t)timeout_ms * 1000000ull : 0;
    for (;;) {
        int n = l8c_poll_events(c, ev, max);
        if (n != 0)
            return n;
        if (l8c_prepare_wait(c))
            continue;
        int wait = -1;
        if (timeout_ms >= 0) {
            uint64_t now = l8c_now_ns();
            if (now >= deadline)
                return 0;
            wait = (int)((deadline - now + 999999) / 1000000);
        }
        /* The control socket too: an Error or a hang-up there is read by
         * l8c_poll_events. */
        struct pollfd p[2] = { { c->eq_efd, POLLIN, 0 }, { c->sock, POLLIN, 0 } };
        if (poll(p, 2, wait) < 0 && errno != EINTR)
            return -errno;
    }
}

/* A Status message into the library's struct. */
static void take_status(const Llama8__Status *s, struct l8c_status *out)
{
    struct l8c_status o = { 0 };
    snprintf(o.model_name, sizeof(o.model_name), "%s", s->model_name ? s->model_name : "");
    snprintf(o.backend, sizeof(o.backend), "%s", s->backend ? s->backend : "");
    o.pages_total = s->pages_total;
    o.pages_used = s->pages_used;
    o.pages_cached = s->pages_cached;
    o.page_size = s->page_size;
    o.clients = s->clients;
    o.max_clients = s->max_clients;
    o.admin_clients = s->admin_clients;
    o.own_uid = s->own_uid;
    o.requests_running = s->requests_running;
    o.requests_waiting = s->requests_waiting;
    o.context_length = s->context_length;
    o.tokens_per_s = s->tokens_per_s;
    o.uptime_s = s->uptime_s;
    o.tokens_generated = s->tokens_generated;
    o.requests_done = s->requests_done;
    o.prompt_tokens = s->prompt_tokens;
    o.prompt_tokens_cached = s->prompt_tokens_cached;
    o.draining = s->draining;
    o.step_running_s = s->step_running_s;
    o.step_stalled = s->step_stalled;
    o.steps = s->steps;
    o.step_time_s = s->step_time_s;
    o.gap_steps = s->gap_steps;
    o.gap_time_s = s->gap_time_s;
    o.decode_steps = s->decode_steps;
    o.decode_time_s = s->decode_time_s;
    o.decode_rows = s->decode_rows;
    o.fed_tokens = s->fed_tokens;
    o.preemptions = s->preemptions;
    o.mem_weights = s->mem_weights;
    o.mem_kv_pool = s->mem_kv_pool;
    o.mem_work = s->mem_work;
    o.device_used = s->device_used;
    o.device_total = s->device_total;
    snprintf(o.prefix_cache, sizeof(o.prefix_cache), "%s",
             s->prefix_cache ? s->prefix_cache : "");
    snprintf(o.speculate, sizeof(o.speculate), "%s", s->speculate ? s->speculate : "");
    o.draft_tokens = s->draft_tokens;
    o.draft_accepted = s->draft_accepted;
    o.spin_us = s->spin_us;
    snprintf(o.log_level, sizeof(o.log_level), "%s", s->log_level ? s->log_level : "");
    o.config_reloads = s->config_reloads;
    snprintf(o.config_error, sizeof(o.config_error), "%s",
             s->config_error ? s->config_error : "");
    snprintf(o.config_restart, sizeof(o.config_restart), "%s",
             s->config_restart ? s->config_restart : "");
    for (size_t i = 0; i < s->n_errors && i < L8_ERR_MAX_; i++)
        o.errors[i] = s->errors[i];
    *out = o;
}

/* Sends msg on the control socket and takes the answer, which must be of
 * kind want (an Error datagram is the daemon's refusal): *out to free. */
static int exchange(struct l8c_client *c, const Llama8__ClientMessage *msg,
                    Llama8__DaemonMessage__MsgCase want, int timeout_ms,
                    Llama8__DaemonMessage **out)
{
    int rc;
    if (c->dead)
        return -ECONNRESET;
    if ((rc = send_ctl(c, msg)) < 0)
        return rc;
    /* A request's Error may come first: kept, and the answer waited for in
     * what is left of timeout_ms. */
    const uint64_t deadline = l8c_now_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000;
    Llama8__DaemonMessage *m;
    for (;;) {
        const uint64_t t = l8c_now_ns();
        const int left = timeout_ms < 0 ? -1
                         : t >= deadline ? 0 : (int)((deadline - t + 999999) / 1000000);
        if (!(m = recv_ctl(c, left, NULL, NULL, &rc)))
            return rc;
        if (m->msg_case != LLAMA8__DAEMON_MESSAGE__MSG_ERROR || !is_request_error(m->error))
            break;
        keep_request_error(c, m->error);
        llama8__daemon_message__free_unpacked(m, NULL);
    }
    if (m->msg_case == want) {
        *out = m;
        return 0;
    }
    if (m->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_ERROR) {
        rc = take_error(c, m->error);
    } else {
        set_err(c, 0, "the daemon answered with another message than the one asked for");
        rc = -EPROTO;
    }
    llama8__daemon_message__free_unpacked(m, NULL);
    return rc;
}

/* Sends msg on the control socket and takes the Status that answers it. */
static int status_exchange(struct l8c_client *c, const Llama8__ClientMessage *msg,
                           struct l8c_status *out, int timeout_ms)
{
    if (!c || !out)
        return -EINVAL;
    Llama8__DaemonMessage *m;
    int rc = exchange(c, msg, LLAMA8__DAEMON_MESSAGE__MSG_STATUS, timeout_ms, &m);
    if (rc < 0)
        return rc;
    take_status(m->status, out);
    llama8__daemon_message__free_unpacked(m, NULL);
    return 0;
}

int l8c_status(struct l8c_client *c, struct l8c_status *out, int timeout_ms)
{
    Llama8__StatusRequest sr = LLAMA8__STATUS_REQUEST__INIT;
    Llama8__ClientMessage cm = LLAMA8__CLIENT_MESSAGE__INIT;
    cm.msg_case = LLAMA8__CLIENT_MESSAGE__MSG_STATUS_REQUEST;
    cm.status_request = &sr;
    return status_exchange(c, &cm, out, timeout_ms);
}

int l8c_reload(struct l8c_client *c, struct l8c_status *out, int timeout_ms)
{
    Llama8__ReloadRequest rr = LLAMA8__RELOAD_REQUEST__INIT;
    Llama8__ClientMessage cm = LLAMA8__CLIENT_MESSAGE__INIT;
    cm.msg_case = LLAMA8__CLIENT_MESSAGE__MSG_RELOAD_REQUEST;
    cm.reload_request = &rr;
    int rc = status_exchange(c, &cm, out, timeout_ms);
    if (rc == 0 && out->config_error[0]) {
        set_err(c, 0, "the daemon refused its configuration: %s", out->config_error);
        rc = -EINVAL;
    }
    return rc;
}

int l8c_clients(struct l8c_client *c, struct l8c_client_info *out, size_t cap, size_t *n,
                int timeout_ms)
{
    if (!c || !n || (cap && !out))
        return -EINVAL;
    /* timeout_ms bounds the whole list, every page (< 0: no bound). */
    const uint64_t deadline = l8c_now_ns() + (uint64_t)(timeout_ms < 0 ? 0 : timeout_ms) * 1000000;
    Llama8__ClientsRequest cr = LLAMA8__CLIENTS_REQUEST__INIT;
    Llama8__ClientMessage cm = LLAMA8__CLIENT_MESSAGE__INIT;
    cm.msg_case = LLAMA8__CLIENT_MESSAGE__MSG_CLIENTS_REQUEST;
    cm.clients_request = &cr;
    size_t got = 0;
    for (bool more = true; more;) {
        Llama8__DaemonMessage *m;
        const uint64_t t = l8c_now_ns();
        const int left = timeout_ms < 0 ? -1
                         : t >= deadline ? 0 : (int)((deadline - t + 999999) / 1000000);
        int rc = exchange(c, &cm, LLAMA8__DAEMON_MESSAGE__MSG_CLIENT_LIST, left, &m);
        if (rc < 0)
            return rc;
        const Llama8__ClientList *l = m->client_list;
        /* A page that moves nothing forward would loop: the daemon's fault. */
        more = l->more && l->n_clients > 0;
        for (size_t i = 0; i < l->n_clients; i++) {
            const Llama8__ClientInfo *ci = l->clients[i];
            if (ci->id <= cr.after_id) {
                more = false;
                break;
            }
            cr.after_id = ci->id;
            if (got < cap) {
                struct l8c_client_info *o = &out[got];
                *o = (struct l8c_client_info){
                    .id = ci->id, .pid = ci->pid, .uid = ci->uid,
                    .connected_s = ci->connected_s, .requests = ci->requests,
                    .running = ci->running, .kv_pages = ci->kv_pages,
                    .requests_done = ci->requests_done, .prompt_tokens = ci->prompt_tokens,
                    .tokens_generated = ci->tokens_generated, .held = ci->held,
                };
                snprintf(o->name, sizeof(o->name), "%s", ci->name ? ci->name : "");
            }
            got++;
        }
        llama8__daemon_message__free_unpacked(m, NULL);
    }
    *n = got;
    return 0;
}
