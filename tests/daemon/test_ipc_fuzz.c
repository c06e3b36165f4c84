/* test_ipc_fuzz: randomized abuse of llama8d's protocol, deterministic per
 * seed, bounded in rounds and in time. Each round a fuzzer client sends one
 * kind of bad input: garbage, mutated or oversized datagrams before and
 * after Hello (descriptors attached, two at once); random ring entries over
 * random arena bytes; mutated GenerateRequests and ones with a single value
 * out of range; stray and mutated cancels; ring counters moved to arbitrary
 * values; doorbells saturated; a close mid-stream; events left unread.
 * Every input must get its defined answer: an error event (the expected
 * code where the input has one defect), or an Error datagram with a message
 * and then the hang-up, never silence or a bare hang-up. And nobody else
 * may notice: the daemon stays up, a fresh client connects and gets its
 * status, an observer's greedy stream is the same before, during and after;
 * once the fuzzer has left, the pool holds no pages and no requests, the
 * daemon holds no more descriptors or io_uring operations than before, and
 * SIGTERM exits 0. Every CHECK_EVERY_MS the daemon also reloads its
 * configuration (SIGHUP), spin_us switched between 0 and 300. The log
 * counts the rounds by kind and by outcome.
 * argv: llama8d model-dir. Environment: L8_FUZZ_SEED (the seed, default
 * fixed), L8_FUZZ_MS (the time budget of the rounds, default 7000),
 * L8_FUZZ_LOG (the daemon's log level, default err: at info it logs every
 * one of the thousands of connections and violations). */
#include "ipc_raw.h"

#include <math.h>

#define MAX_CTX 512
#define MAX_REQ 4
#define MAX_CLIENTS 8
#define DEFAULT_SEED 0x6c38667a7a01ull
#define DEFAULT_MS 7000     /* the rounds; about 9 s in all on 2 cores */
#define MAX_ROUNDS 20000
#define ANSWER_MS 5000      /* an answer that is due and not here by then is missing */
#define CHECK_EVERY_MS 500  /* liveness and a fresh client's status */
#define OBS_TOKENS 48
/* The fuzzer's arena: prompts low, messages above, the sentinel at the end. */
#define PROMPT_AREA (64u << 10)
#define MSG_AREA    (64u << 10)
#define SENTINEL_ID 0x5e9e000000000000ull

static const char *sock;
static uint32_t vocab, max_new, max_prompt, max_stop;

/* ---------------------------------------------------------------- randomness */

/* Each round draws from its own stream (seed, round): round k gets the same
 * numbers whatever the rounds before it saw. */
static uint64_t rng;

static uint64_t rnd(void)
{
    uint64_t z = (rng += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}
static uint32_t rn(uint32_t n) { return n ? (uint32_t)(rnd() % n) : 0; }
static bool chance(uint32_t pct) { return rn(100) < pct; }

static void fill_random(uint8_t *b, size_t n)
{
    for (size_t i = 0; i < n; i++)
        b[i] = (uint8_t)rnd();
}

/* A few edits: bit flips, stray bytes, truncation, garbage appended, runs of
 * 0xff (huge varints), chunks repeated (repeated fields, merged messages),
 * bytes deleted. */
static size_t mutate(uint8_t *b, size_t n, size_t cap)
{
    for (uint32_t k = 1 + rn(4); k--;) {
        switch (rn(7)) {
        case 0: if (n) b[rn((uint32_t)n)] ^= (uint8_t)(1u << rn(8)); break;
        case 1: if (n) b[rn((uint32_t)n)] = (uint8_t)rnd(); break;
        case 2: n = rn((uint32_t)n + 1); break;
        case 3: {
            size_t add = rn(64);
            if (add > cap - n)
                add = cap - n;
            fill_random(b + n, add);
            n += add;
            break;
        }
        case 4:
            if (n) {
                size_t at = rn((uint32_t)n), len = 1 + rn(10);
                memset(b + at, 0xff, len < n - at ? len : n - at);
            }
            break;
        case 5:
            if (n) {
                size_t at = rn((uint32_t)n), len = 1 + rn((uint32_t)(n - at));
                if (len <= cap - n) {
                    memmove(b + n, b + at, len);
                    n += len;
                }
            }
            break;
        case 6:
            if (n) {
                size_t at = rn((uint32_t)n);
                memmove(b + at, b + at + 1, n - at - 1);
                n--;
            }
            break;
        }
    }
    return n;
}

/* ---------------------------------------------------------------- bookkeeping */

enum kind { R_PRE_GARBAGE, R_PRE_HELLO, R_PRE_TWO, R_PRE_SILENT, R_CTL, R_SQE, R_GEN_MUT,
            R_GEN_BAD, R_CANCEL, R_COUNTERS, R_DOORBELL, R_CLOSE_MID, R_DEAF, R_N };
static const char *const kind_name[R_N] = {
    "garbage before Hello", "mutated Hello", "two datagrams at once", "silent connection",
    "control message after Welcome", "random ring entries", "mutated GenerateRequest",
    "one value out of range", "cancels", "ring counters moved", "doorbells saturated",
    "closed mid-stream", "events left unread",
};
/* Weights of the kinds: the ring is where most of the surface is. */
static const uint32_t kind_weight[R_N] = { 6, 6, 3, 2, 5, 12, 12, 12, 6, 8, 4, 4, 4 };

enum outcome { O_ERROR_EVENT, O_DISCONNECT, O_WELCOME, O_STATUS, O_ACCEPTED, O_IGNORED,
               O_CLOSED, O_UNREAD, O_FAILED, O_N };
static const char *const outcome_name[O_N] = {
    "error event, still connected", "Error datagram and hang-up", "welcomed",
    "status answered", "accepted, tokens", "ignored (nothing to answer)",
    "closed by the fuzzer mid-stream", "events left unread", "FAILED",
};

static uint32_t kinds[R_N], outcomes[O_N];
static uint32_t ev_codes[L8_ERR_MAX_], dc_codes[L8_ERR_MAX_];
static uint32_t round_no;
static enum kind round_kind;

#define FCHECK(cond, ...) do { if (!(cond)) { \
    fprintf(stderr, "  in round %u (%s):\n", round_no, kind_name[round_kind]); \
    CHECK(cond, __VA_ARGS__); } } while (0)

/* ---------------------------------------------------------------- control socket */

static ssize_t send_nosig(int fd, const void *b, size_t n)
{
    return send(fd, b, n, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* Send one datagram with descriptors attached. */
static ssize_t send_with_fds(int fd, const void *b, size_t n, const int *fds, int nfds)
{
    union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 4)]; } cm;
    memset(&cm, 0, sizeof(cm));
    struct iovec iov = { (void *)b, n };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                         .msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds) };
    struct cmsghdr *h = CMSG_FIRSTHDR(&mh);
    h->cmsg_level = SOL_SOCKET;
    h->cmsg_type = SCM_RIGHTS;
    h->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
    memcpy(CMSG_DATA(h), fds, sizeof(int) * (size_t)nfds);
    return sendmsg(fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* What the daemon said on a control socket. */
struct answer {
    int code;            /* the Error's code, -1 if none */
    bool welcome, status, eof, reset, silent, bad;
};

/* Read the control socket until a Welcome or Status, or an Error and the
 * hang-up, or the timeout. Descriptors that come along are closed. */
static struct answer read_answer(int fd, int timeout_ms)
{
    struct answer a = { .code = -1 };
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        uint64_t now = t_now_ms();
        struct pollfd p = { fd, POLLIN, 0 };
        if (poll(&p, 1, now >= end ? 0 : (int)(end - now)) <= 0) {
            a.silent = true;
            return a;
        }
        uint8_t buf[L8_MAX_CTL_MSG];
        union { struct cmsghdr h; char b[CMSG_SPACE(sizeof(int) * 3)]; } cm;
        struct iovec iov = { buf, sizeof(buf) };
        struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                             .msg_controllen = sizeof(cm.b) };
        ssize_t n = recvmsg(fd, &mh, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
        for (struct cmsghdr *h = CMSG_FIRSTHDR(&mh); n >= 0 && h; h = CMSG_NXTHDR(&mh, h))
            if (h->cmsg_type == SCM_RIGHTS)
                for (size_t i = 0; i < (h->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++)
                    close(((int *)CMSG_DATA(h))[i]);
        if (n < 0 && errno == EAGAIN)
            continue;
        if (n < 0) {
            a.reset = true;
            return a;
        }
        if (n == 0) {
            a.eof = true;
            return a;
        }
        Llama8__DaemonMessage *m = llama8__daemon_message__unpack(NULL, (size_t)n, buf);
        if (!m) {
            a.bad = true;
            return a;
        }
        switch (m->msg_case) {
        case LLAMA8__DAEMON_MESSAGE__MSG_WELCOME: a.welcome = true; break;
        case LLAMA8__DAEMON_MESSAGE__MSG_STATUS:
        case LLAMA8__DAEMON_MESSAGE__MSG_CLIENT_LIST:   /* answers that keep the connection */
            a.status = true;
            break;
        case LLAMA8__DAEMON_MESSAGE__MSG_ERROR:
            a.code = (int)m->error->code;
            /* the rule: an error says what was wrong */
            a.bad = !m->error->message || !*m->error->message;
            break;
        default: a.bad = true; break;
        }
        llama8__daemon_message__free_unpacked(m, NULL);
        if (a.welcome || a.status || a.bad)
            return a;
    }
}

/* A datagram on a connection must be answered: a Welcome or Status, or an
 * Error (with a message) and then the hang-up. */
static enum outcome judge_answer(const struct answer *a)
{
    FCHECK(!a->bad, "an unparsable answer, or an Error without a message");
    if (a->welcome || a->status) {
        FCHECK(a->code < 0, "an Error before a %s", a->welcome ? "Welcome" : "Status");
        return a->welcome ? O_WELCOME : O_STATUS;
    }
    if (a->code < 0) {
        FCHECK(0, "%s without an Error", a->silent ? "no answer at all" :
               a->reset ? "connection reset" : "hung up");
        return O_FAILED;
    }
    /* A reset after the Error still means datagrams were left unread. */
    FCHECK(a->eof, "an Error (%s), then %s instead of the hang-up", l8c_err_name(a->code),
           a->silent ? "nothing" : "a reset");
    if (!a->eof || a->bad)
        return O_FAILED;
    if (a->code < (int)L8_ERR_MAX_)
        dc_codes[a->code]++;
    return O_DISCONNECT;
}

/* A Hello (version, random name), packed into b. */
static size_t pack_hello(uint8_t *b, uint32_t version, size_t name_len)
{
    char name[4096];
    for (size_t i = 0; i < name_len; i++)
        name[i] = (char)(1 + rn(255));
    name[name_len] = 0;
    Llama8__Hello h = LLAMA8__HELLO__INIT;
    h.protocol_version = version;
    h.client_name = name;
    Llama8__ClientMessage m = LLAMA8__CLIENT_MESSAGE__INIT;
    m.msg_case = LLAMA8__CLIENT_MESSAGE__MSG_HELLO;
    m.hello = &h;
    return llama8__client_message__pack(&m, b);
}

static uint32_t random_version(void)
{
    static const uint32_t v[] = { 0, L8_PROTO_VERSION + 1, 0xffffffffu, 0x80000000u };
    return chance(70) ? L8_PROTO_VERSION : chance(50) ? v[rn(4)] : (uint32_t)rnd();
}

/* A control message: garbage, a StatusRequest, a ClientsRequest, a Hello,
 * or one of those mutated; sometimes past L8_MAX_CTL_MSG. */
static size_t random_ctl(uint8_t *b, size_t cap)
{
    size_t n;
    switch (rn(5)) {
    case 0:   /* garbage of every size, 0 and past the limit included */
        n = chance(10) ? 0 : chance(15) ? L8_MAX_CTL_MSG + 1 + rn(4000) : 1 + rn(chance(50) ? 16 : 600);
        fill_random(b, n);
        return n;
    case 1:   /* StatusRequest, maybe with unknown fields after it */
        b[0] = 0x12;
        b[1] = 0x00;
        n = 2;
        if (chance(50)) {
            size_t add = rn(64);
            b[n++] = 0x7a;   /* field 15, bytes */
            b[n++] = (uint8_t)add;
            fill_random(b + n, add);
            n += add;
        }
        break;
    case 2: {   /* ClientsRequest from any id */
        Llama8__ClientsRequest cr = LLAMA8__CLIENTS_REQUEST__INIT;
        cr.after_id = chance(50) ? rn(8) : rnd();
        Llama8__ClientMessage m = LLAMA8__CLIENT_MESSAGE__INIT;
        m.msg_case = LLAMA8__CLIENT_MESSAGE__MSG_CLIENTS_REQUEST;
        m.clients_request = &cr;
        n = llama8__client_message__pack(&m, b);
        break;
    }
    default:
        n = pack_hello(b, random_version(), chance(20) ? rn(4000) : rn(40));
        break;
    }
    return chance(50) ? mutate(b, n, cap) : n;
}

/* ---------------------------------------------------------------- the fuzzer's ring client */

struct fz {
    struct raw r;
    bool up;
    uint32_t msg_next;         /* this round's next message offset */
    uint64_t live[8];          /* recent accepted-looking ids, to cancel */
    uint32_t n_live;
    bool hold_head;            /* keep a scribbled event head: do not store ours */
    /* this round */
    uint32_t errors, tokens, dones, started;
    uint64_t sentinel;         /* the id whose answer closes the round */
    bool got_sentinel;
    uint64_t watch;            /* the id whose first event is judged */
    bool watch_seen;
    struct l8_event watch_ev;
    struct answer ctl;         /* the control socket: Error, hang-up */
    bool gone;
};

static void fz_round_reset(struct fz *f)
{
    f->errors = f->tokens = f->dones = f->started = 0;
    f->sentinel = 0;
    f->got_sentinel = false;
    f->watch = 0;
    f->watch_seen = false;
    memset(&f->watch_ev, 0, sizeof(f->watch_ev));
    f->hold_head = false;
    f->msg_next = PROMPT_AREA + 8 * rn(MSG_AREA / 16);
}

static void fz_note(struct fz *f, const struct l8_event *ev)
{
    if (f->sentinel && ev->request_id == f->sentinel && ev->kind == L8_EV_ERROR) {
        FCHECK(ev->code == L8_ERR_EMPTY_PROMPT, "sentinel answered %s", l8c_err_name(ev->code));
        f->got_sentinel = true;
        return;
    }
    if (f->watch && ev->request_id == f->watch && !f->watch_seen) {
        f->watch_seen = true;
        f->watch_ev = *ev;
    }
    switch (ev->kind) {
    case L8_EV_ERROR:
        f->errors++;
        FCHECK(ev->code > 0 && ev->code < L8_ERR_MAX_, "error event with code %u", ev->code);
        /* the field it names, with numbers where they apply and only there */
        const bool fl = ev->reason >= L8_EF_TEMPERATURE && ev->reason <= L8_EF_REPETITION_PENALTY;
        FCHECK(ev->reason < L8_EF_MAX_ &&
               (fl ? ev->token == 0 && ev->index == 0 : isnan(ev->logprob)) &&
               (ev->reason != L8_EF_NONE || (ev->token == 0 && ev->index == 0)),
               "error %s: field %u value %u limit %u float %g", l8c_err_name(ev->code),
               ev->reason, ev->token, ev->index, ev->logprob);
        if (ev->code < L8_ERR_MAX_)
            ev_codes[ev->code]++;
        break;
    case L8_EV_TOKEN:
        f->tokens++;
        FCHECK(ev->token < vocab, "token %u >= vocab", ev->token);
        break;
    case L8_EV_DONE: f->dones++; break;
    case L8_EV_STARTED: f->started++; break;
    default: FCHECK(0, "event of kind %u", ev->kind); break;
    }
}

/* Take the events the daemon published. Our head follows its tail even
 * when a scribbled head is left in shared memory (hold_head). */
static void fz_drain(struct fz *f)
{
    uint32_t t = atomic_load_explicit(&f->r.eq_ctl->tail, memory_order_acquire);
    FCHECK(t - f->r.eq_head <= f->r.h.eq_entries, "event tail %u, our head %u", t, f->r.eq_head);
    if (t - f->r.eq_head > f->r.h.eq_entries)
        f->r.eq_head = t;
    while (f->r.eq_head != t) {
        struct l8_event ev = f->r.eq[f->r.eq_head & (f->r.h.eq_entries - 1)];
        f->r.eq_head++;
        fz_note(f, &ev);
    }
    if (!f->hold_head)
        atomic_store_explicit(&f->r.eq_ctl->head, f->r.eq_head, memory_order_release);
}

/* Look at the control socket without waiting. On a welcomed connection
 * the daemon only speaks there to say goodbye: an Error, then the hang-up. */
static void fz_ctl(struct fz *f)
{
    struct pollfd p = { f->r.fd, POLLIN, 0 };
    if (f->gone || poll(&p, 1, 0) != 1)
        return;
    f->ctl = read_answer(f->r.fd, ANSWER_MS);
    f->gone = true;
}

static void fz_connect(struct fz *f)
{
    if (f->up)
        return;
    raw_connect(&f->r, sock);
    f->up = true;
    f->gone = false;
    f->n_live = 0;
    memset(&f->ctl, 0, sizeof(f->ctl));
    f->ctl.code = -1;
}

static void fz_disconnect(struct fz *f)
{
    if (!f->up)
        return;
    raw_close(&f->r);
    f->up = false;
}

static uint32_t sq_room(struct fz *f)
{
    uint32_t head = atomic_load_explicit(&f->r.sq_ctl->head, memory_order_acquire);
    uint32_t used = f->r.tail - head;
    return used > f->r.h.sq_entries ? 0 : f->r.h.sq_entries - used;
}

/* Publish one entry; if the ring is full, read events until it moves. */
static bool fz_submit(struct fz *f, uint8_t kind, uint32_t off, uint32_t len)
{
    uint64_t end = t_now_ms() + ANSWER_MS;
    while (!f->gone && sq_room(f) == 0) {
        fz_drain(f);
        fz_ctl(f);
        if (t_now_ms() > end) {
            FCHECK(0, "submission ring stuck for %d ms", ANSWER_MS);
            return false;
        }
        usleep(200);
    }
    if (f->gone)
        return false;
    raw_submit(&f->r, kind, off, len);
    return true;
}

enum settle {
    SETTLE,                  /* the sentinel is answered, or RING_VIOLATION */
    SETTLE_MUST_DISCONNECT,  /* the sentinel's event must bring RING_VIOLATION */
    WAIT_DISCONNECT,         /* the ring is broken: RING_VIOLATION, no sentinel */
};

/* The round is over when the daemon has answered an empty GenerateRequest
 * with this round's id (EMPTY_PROMPT): everything before it has been taken.
 * Or when it disconnected us, which must come with RING_VIOLATION. */
static enum outcome fz_settle(struct fz *f, enum settle how)
{
    if (!f->gone && how != WAIT_DISCONNECT) {
        Llama8__GenerateRequest g = LLAMA8__GENERATE_REQUEST__INIT;
        f->sentinel = g.request_id = SENTINEL_ID | round_no;
        uint32_t off = f->r.h.arena_size - 64;
        size_t n = llama8__generate_request__pack(&g, f->r.arena + off);
        fz_submit(f, L8_SQE_GENERATE, off, (uint32_t)n);
    }
    uint64_t end = t_now_ms() + ANSWER_MS;
    while (!f->gone && !f->got_sentinel && t_now_ms() < end) {
        fz_drain(f);
        fz_ctl(f);
        if (!f->got_sentinel && !f->gone)
            usleep(200);
    }
    f->hold_head = false;
    if (f->gone) {
        enum outcome o = judge_answer(&f->ctl);
        FCHECK(o != O_DISCONNECT || f->ctl.code == L8_ERR_RING_VIOLATION,
               "disconnected with %s, not RING_VIOLATION", l8c_err_name(f->ctl.code));
        fz_disconnect(f);
        return o;
    }
    if (how != SETTLE) {
        FCHECK(0, "broke the ring rules, still connected after %d ms", ANSWER_MS);
        return O_FAILED;
    }
    FCHECK(f->got_sentinel, "no answer to a submission in %d ms", ANSWER_MS);
    if (!f->got_sentinel)
        return O_FAILED;
    return f->errors ? O_ERROR_EVENT : f->tokens || f->dones || f->started ? O_ACCEPTED
                                                                           : O_IGNORED;
}

/* ---------------------------------------------------------------- requests */

struct greq {
    Llama8__GenerateRequest g;
    Llama8__Sampling sp;
    uint32_t stops[2048];
};

/* A valid request; its prompt written into the arena's prompt area. */
static void gen_valid(struct fz *f, struct greq *q, uint32_t max_new_cap)
{
    llama8__generate_request__init(&q->g);
    llama8__sampling__init(&q->sp);
    uint32_t n = 1 + rn(64);
    uint32_t off = 4 * rn(PROMPT_AREA / 4 - n);
    for (uint32_t i = 0; i < n; i++) {
        uint32_t t = rn(vocab);
        memcpy(f->r.arena + off + 4 * i, &t, 4);
    }
    /* random ids: a mutated request's id cannot be one we watch */
    q->g.request_id = rnd() >> 1;
    q->g.prompt_offset = off;
    q->g.prompt_count = n;
    q->g.max_new_tokens = 1 + rn(max_new_cap);
    q->g.ignore_eos = chance(50);
    q->g.logprobs = chance(30);
    q->g.priority = chance(10) ? (int32_t)rnd() : (int32_t)rn(11) - 5;
    if (chance(70)) {
        q->g.sampling = &q->sp;
        q->sp.temperature = chance(40) ? 0.0f : (float)rn(2000) / 1000.0f;
        q->sp.top_k = chance(50) ? 0 : rn(100);
        q->sp.top_p = chance(50) ? 0.0f : 0.05f + (float)rn(950) / 1000.0f;
        q->sp.min_p = chance(70) ? 0.0f : (float)rn(200) / 1000.0f;
        q->sp.repetition_penalty = chance(60) ? 0.0f : 0.5f + (float)rn(1000) / 1000.0f;
        q->sp.seed = rnd();
    }
    q->g.n_stop_ids = rn(4);
    q->g.stop_ids = q->stops;
    for (size_t i = 0; i < q->g.n_stop_ids; i++)
        q->stops[i] = rn(vocab);
}

/* Copy a message into the arena's message area; returns its offset. The
 * messages of one round do not overlap: the daemon may not have copied the
 * earlier ones out yet. */
static uint32_t put_msg(struct fz *f, const uint8_t *b, size_t n)
{
    if (f->msg_next + n > PROMPT_AREA + MSG_AREA)
        f->msg_next = PROMPT_AREA;
    uint32_t off = f->msg_next;
    memcpy(f->r.arena + off, b, n);
    f->msg_next += (uint32_t)(n + 7) & ~7u;
    return off;
}

static void remember_live(struct fz *f, uint64_t id)
{
    f->live[f->n_live++ % 8] = id;
}

/* ---------------------------------------------------------------- rounds */

static const float bad_floats[] = { NAN, INFINITY, -INFINITY, -0.5f, 1.5f, 3.4e38f, -3.4e38f };
/* Temperatures past [0, L8_TEMPERATURE_MAX]. */
static const float bad_temps[] = { NAN, INFINITY, -INFINITY, -0.5f, 100.5f, 3.4e38f, -3.4e38f };

/* One defect in a valid request; returns the code it must get (and *alt,
 * a second acceptable code, for defects checked after the per-client
 * request limit, or -1). */
static int add_defect(struct fz *f, struct greq *q, int *alt)
{
    *alt = -1;
    switch (rn(15)) {
    case 0: q->g.prompt_count = 0; return L8_ERR_EMPTY_PROMPT;
    case 1: q->g.prompt_count = max_prompt + 1 + rn(chance(50) ? 10 : 0xfffffff0u - max_prompt);
            return L8_ERR_PROMPT_TOO_LONG;
    case 2: q->g.prompt_offset += 1 + rn(3); return L8_ERR_BAD_MESSAGE;
    case 3: q->g.prompt_offset = f->r.h.arena_size - 4 * rn(q->g.prompt_count);
            if (chance(30))
                q->g.prompt_offset = 4 * (f->r.h.arena_size / 4 + rn(0x3fffffff - f->r.h.arena_size / 4));
            return L8_ERR_BAD_MESSAGE;
    case 4: q->g.max_new_tokens = 0; return L8_ERR_BAD_PARAMS;
    case 5: q->g.max_new_tokens = max_new + 1 + rn(0xfffffff0u - max_new); return L8_ERR_BAD_PARAMS;
    case 6:
        q->g.n_stop_ids = max_stop + 1 + rn(1500);
        for (size_t i = 0; i < q->g.n_stop_ids; i++)
            q->stops[i] = rn(vocab);
        return L8_ERR_BAD_PARAMS;
    case 7:
        q->g.n_stop_ids = 1 + rn(max_stop);
        for (size_t i = 0; i < q->g.n_stop_ids; i++)
            q->stops[i] = rn(vocab);
        q->stops[rn((uint32_t)q->g.n_stop_ids)] = vocab + rn(0xffffffffu - vocab);
        *alt = L8_ERR_TOO_MANY_REQUESTS;
        return L8_ERR_BAD_TOKEN;
    case 8: {
        uint32_t t = vocab + (chance(50) ? 0 : rn(0xffffffffu - vocab));
        memcpy(f->r.arena + q->g.prompt_offset + 4 * rn(q->g.prompt_count), &t, 4);
        *alt = L8_ERR_TOO_MANY_REQUESTS;
        return L8_ERR_BAD_TOKEN;
    }
    case 9: case 10: case 11: case 12: {
        q->g.sampling = &q->sp;
        float v = bad_floats[rn(7)];
        int which = (int)rn(4);
        if (which == 0) {
            q->sp.temperature = bad_temps[rn(7)];
        } else if (which == 1) {
            q->sp.top_p = v;
        } else if (which == 2) {
            q->sp.min_p = v;
        } else {
            q->sp.repetition_penalty = v == 1.5f ? 100.5f : isfinite(v) && v > 0 ? -v : v;
        }
        *alt = L8_ERR_TOO_MANY_REQUESTS;
        return L8_ERR_BAD_PARAMS;
    }
    default:   /* prompt + max_new past the context, each within its limit */
        q->g.prompt_count = MAX_CTX - 64 + rn(64);
        q->g.prompt_offset = 0;
        for (uint32_t i = 0; i < q->g.prompt_count; i++) {
            uint32_t t = rn(vocab);
            memcpy(f->r.arena + 4 * i, &t, 4);
        }
        q->g.max_new_tokens = MAX_CTX - q->g.prompt_count + 1 + rn(max_new - (MAX_CTX - q->g.prompt_count));
        *alt = L8_ERR_TOO_MANY_REQUESTS;
        return L8_ERR_PROMPT_TOO_LONG;
    }
}

/* Send one datagram on a fresh connection and judge the answer. */
static enum outcome send_and_judge(int fd, const uint8_t *b, size_t n, const int *fds, int nfds)
{
    ssize_t sent = nfds ? send_with_fds(fd, b, n, fds, nfds) : send_nosig(fd, b, n);
    FCHECK(sent == (ssize_t)n, "send of %zu bytes: %s", n, strerror(errno));
    if (sent != (ssize_t)n)
        return O_FAILED;
    struct answer a = read_answer(fd, ANSWER_MS);
    return judge_answer(&a);
}

static enum outcome round_pre(enum kind k)
{
    static uint8_t b[3 * L8_MAX_CTL_MSG], b2[3 * L8_MAX_CTL_MSG];
    int fd = raw_socket(sock);
    enum outcome o = O_IGNORED;
    size_t n;
    switch (k) {
    case R_PRE_GARBAGE:
        n = random_ctl(b, sizeof(b));
        if (n && chance(30))
            b[0] = chance(50) ? 0x0a : 0x12;   /* a real field, garbage after it */
        o = send_and_judge(fd, b, n, NULL, 0);
        break;
    case R_PRE_HELLO: {
        n = pack_hello(b, random_version(), chance(15) ? rn(4000) : rn(64));
        if (chance(60))
            n = mutate(b, n, sizeof(b));
        int extra[2];
        bool attach = chance(25) && pipe(extra) == 0;   /* descriptors nobody asked for */
        o = send_and_judge(fd, b, n, attach ? extra : NULL, attach ? 2 : 0);
        if (attach) {
            close(extra[0]);
            close(extra[1]);
        }
        break;
    }
    case R_PRE_TWO: {
        /* A second datagram queued behind a bad first one must not cost
         * the client the Error (a socket closed with unread data resets). */
        n = random_ctl(b, sizeof(b));
        size_t n2 = random_ctl(b2, sizeof(b2));
        struct iovec iov[2] = { { b, n }, { b2, n2 } };
        struct mmsghdr mm[2] = { { .msg_hdr = { .msg_iov = &iov[0], .msg_iovlen = 1 } },
                                 { .msg_hdr = { .msg_iov = &iov[1], .msg_iovlen = 1 } } };
        int sent = sendmmsg(fd, mm, 2, MSG_NOSIGNAL | MSG_DONTWAIT);
        FCHECK(sent >= 1, "sendmmsg: %s", strerror(errno));
        struct answer a = read_answer(fd, ANSWER_MS);
        o = judge_answer(&a);
        break;
    }
    default:   /* connect and leave: at once, or after a Hello, unread Welcome */
        if (chance(50)) {
            n = pack_hello(b, L8_PROTO_VERSION, rn(16));
            FCHECK(send_nosig(fd, b, n) == (ssize_t)n, "send hello");
        }
        break;
    }
    close(fd);
    return o;
}

/* A control message on the fuzzer's welcomed connection: a Status, or an
 * Error and the hang-up. */
static enum outcome round_ctl(struct fz *f)
{
    static uint8_t b[3 * L8_MAX_CTL_MSG];
    fz_connect(f);
    size_t n = random_ctl(b, sizeof(b));
    FCHECK(send_nosig(f->r.fd, b, n) == (ssize_t)n, "send: %s", strerror(errno));
    struct answer a = read_answer(f->r.fd, ANSWER_MS);
    enum outcome o = judge_answer(&a);
    FCHECK(o != O_WELCOME, "a second Welcome");
    if (o != O_STATUS)
        fz_disconnect(f);
    return o;
}

/* Random entries over random arena bytes: in range, empty, too long,
 * across the end, past it, anywhere, overlapping the one before. */
static enum outcome round_sqe(struct fz *f)
{
    fz_connect(f);
    uint32_t A = f->r.h.arena_size;
    for (uint32_t i = 1 + rn(4); i--;) {
        uint32_t off = rn(A - 64), len = rn(4096);
        fill_random(f->r.arena + off, len < A - 64 - off ? len : A - 64 - off);
    }
    uint32_t off = 0, len = 0;
    for (uint32_t i = 1 + rn(8); i-- && !f->gone;) {
        uint8_t kind = chance(85) ? (chance(70) ? L8_SQE_GENERATE : L8_SQE_CANCEL) : (uint8_t)rnd();
        switch (rn(7)) {
        case 0: off = rn(A + 1); len = rn((A - off < 300 ? A - off : 300) + 1); break;
        case 1: off = rn(A + 1); len = 0; break;
        case 2: off = rn(A - 2 * L8_MAX_REQ_MSG); len = L8_MAX_REQ_MSG + 1 + rn(500); break;
        case 3: off = A - rn(64); len = 65 + rn(200); break;
        case 4: off = A + 1 + rn(1u << 20); len = rn(100); break;
        case 5: off = (uint32_t)rnd(); len = (uint32_t)rnd(); break;
        default:
            off = off < A ? off + rn(len + 1) : rn(A);
            off = off > A ? A : off;
            len = rn((A - off < 400 ? A - off : 400) + 1);
            break;
        }
        fz_submit(f, kind, off, len);
    }
    return fz_settle(f, SETTLE);
}

/* A valid request, its bytes mutated; now and then under the other kind. */
static enum outcome round_gen_mut(struct fz *f)
{
    static struct greq q;
    static uint8_t b[L8_MAX_REQ_MSG];
    fz_connect(f);
    gen_valid(f, &q, 16);
    size_t n = llama8__generate_request__pack(&q.g, b);
    n = mutate(b, n, sizeof(b));
    uint32_t off = put_msg(f, b, n);
    fz_submit(f, chance(90) ? L8_SQE_GENERATE : L8_SQE_CANCEL, off, (uint32_t)n);
    return fz_settle(f, SETTLE);
}

/* A request with exactly one defect gets exactly its error; without one it
 * is accepted (or refused only for the per-client limit). */
static enum outcome round_gen_bad(struct fz *f)
{
    static struct greq q;
    static uint8_t b[L8_MAX_REQ_MSG];
    fz_connect(f);
    gen_valid(f, &q, 8);
    int alt = -1, want = chance(20) ? 0 : add_defect(f, &q, &alt);
    size_t n = llama8__generate_request__get_packed_size(&q.g);
    REQUIRE(n <= sizeof(b), "request of %zu bytes", n);
    llama8__generate_request__pack(&q.g, b);
    f->watch = q.g.request_id;
    fz_submit(f, L8_SQE_GENERATE, put_msg(f, b, n), (uint32_t)n);
    enum outcome o = fz_settle(f, SETTLE);
    if (o == O_FAILED || o == O_DISCONNECT)
        return o;
    const struct l8_event *e = &f->watch_ev;
    if (want) {
        FCHECK(f->watch_seen && e->kind == L8_EV_ERROR && (e->code == want || e->code == alt),
               "request %llx with a defect wanting %s: %s kind %d code %s",
               (unsigned long long)f->watch, l8c_err_name(want),
               f->watch_seen ? "got" : "no event before the sentinel's,", e->kind,
               l8c_err_name(e->code));
    } else {
        FCHECK(!f->watch_seen || e->kind != L8_EV_ERROR || e->code == L8_ERR_TOO_MANY_REQUESTS,
               "valid request %llx refused: %s", (unsigned long long)f->watch,
               l8c_err_name(e->code));
        remember_live(f, q.g.request_id);
    }
    return o;
}

/* Cancels of live, unknown and zero ids, some mutated, some under the
 * wrong kind. An unknown id must get UNKNOWN_REQUEST. */
static enum outcome round_cancel(struct fz *f)
{
    uint8_t b[64];
    fz_connect(f);
    for (uint32_t i = 1 + rn(4); i-- && !f->gone;) {
        Llama8__Cancel c = LLAMA8__CANCEL__INIT;
        bool unknown = false;
        switch (rn(3)) {
        case 0: c.request_id = f->n_live ? f->live[rn(f->n_live < 8 ? f->n_live : 8)] : 0; break;
        case 1: c.request_id = 0; break;
        default: c.request_id = rnd() | 1ull << 63; unknown = true; break;
        }
        size_t n = llama8__cancel__pack(&c, b);
        bool mutated = chance(30);
        if (mutated)
            n = mutate(b, n, sizeof(b));
        uint8_t kind = chance(90) ? L8_SQE_CANCEL : L8_SQE_GENERATE;
        if (unknown && !mutated && kind == L8_SQE_CANCEL && !f->watch)
            f->watch = c.request_id;
        fz_submit(f, kind, put_msg(f, b, n), (uint32_t)n);
    }
    enum outcome o = fz_settle(f, SETTLE);
    if (f->watch && o != O_FAILED && o != O_DISCONNECT)
        FCHECK(f->watch_seen && f->watch_ev.kind == L8_EV_ERROR &&
               f->watch_ev.code == L8_ERR_UNKNOWN_REQUEST,
               "cancel of unknown id %llx: %s kind %d code %s", (unsigned long long)f->watch,
               f->watch_seen ? "got" : "no event before the sentinel's,", f->watch_ev.kind,
               l8c_err_name(f->watch_ev.code));
    return o;
}

/* The ring counters moved: the submission tail forward within the ring
 * (stale entries taken again), past it, backwards, anywhere; the event
 * head too far ahead or behind, or within range; the header, the flags and
 * the entries scribbled. Out of range must disconnect. */
static enum outcome round_counters(struct fz *f)
{
    fz_connect(f);
    enum outcome o = fz_settle(f, SETTLE);   /* all taken: the daemon's head is our tail */
    if (o == O_FAILED || o == O_DISCONNECT)
        return o;
    fz_round_reset(f);
    uint32_t S = f->r.h.sq_entries, E = f->r.h.eq_entries, v;
    switch (rn(8)) {
    case 0:
        f->r.tail += rn(S + 1);
        break;
    case 1:
        f->r.tail += S + 1 + rn(1u << 30);
        atomic_store_explicit(&f->r.sq_ctl->tail, f->r.tail, memory_order_release);
        raw_ring(&f->r);
        return fz_settle(f, WAIT_DISCONNECT);
    case 2:
        f->r.tail -= 1 + rn(1000);
        atomic_store_explicit(&f->r.sq_ctl->tail, f->r.tail, memory_order_release);
        raw_ring(&f->r);
        return fz_settle(f, WAIT_DISCONNECT);
    case 3:
        v = (uint32_t)rnd();
        if (v - f->r.tail > S) {
            f->r.tail = v;
            atomic_store_explicit(&f->r.sq_ctl->tail, f->r.tail, memory_order_release);
            raw_ring(&f->r);
            return fz_settle(f, WAIT_DISCONNECT);
        }
        f->r.tail = v;
        break;
    case 4:
        v = atomic_load_explicit(&f->r.eq_ctl->tail, memory_order_acquire);
        v = chance(50) ? v + 2 * E + rn(1u << 20) : v - E - 1 - rn(1u << 20);
        f->hold_head = true;
        atomic_store_explicit(&f->r.eq_ctl->head, v, memory_order_release);
        return fz_settle(f, SETTLE_MUST_DISCONNECT);
    case 5:
        v = atomic_load_explicit(&f->r.eq_ctl->tail, memory_order_acquire);
        f->hold_head = true;
        atomic_store_explicit(&f->r.eq_ctl->head, v - rn(E / 2), memory_order_release);
        break;
    case 6:
        fill_random(f->r.map, sizeof(struct l8_shm_hdr));
        atomic_store_explicit(&f->r.sq_ctl->flags, (uint32_t)rnd(), memory_order_relaxed);
        atomic_store_explicit(&f->r.eq_ctl->flags, (uint32_t)rnd(), memory_order_relaxed);
        break;
    default:
        fill_random((uint8_t *)f->r.sq, S * sizeof(struct l8_sqe));
        f->r.tail += rn(S + 1);
        break;
    }
    atomic_store_explicit(&f->r.sq_ctl->tail, f->r.tail, memory_order_release);
    raw_ring(&f->r);
    return fz_settle(f, SETTLE);
}

/* Both doorbells saturated, the event doorbell asked for at every publish:
 * the daemon's rings of it must neither block nor pile up. */
static enum outcome round_doorbell(struct fz *f)
{
    fz_connect(f);
    uint64_t big = 0xfffffffffffffffeull;
    if (write(f->r.eq_efd, &big, 8) != 8) {
    }
    if (chance(50) && write(f->r.sq_efd, &big, 8) != 8) {
    }
    for (uint32_t i = 1 + rn(32); i-- && !f->gone;) {
        atomic_store_explicit(&f->r.eq_ctl->flags, L8_RING_NEED_WAKEUP, memory_order_relaxed);
        atomic_thread_fence(memory_order_seq_cst);
        fz_submit(f, L8_SQE_GENERATE, 0, 0);   /* an empty request: one error event */
        usleep(rn(500));
        fz_drain(f);
    }
    return fz_settle(f, SETTLE);
}

/* Long requests, closed after a few tokens (or none), events unread. */
static enum outcome round_close_mid(struct fz *f)
{
    static struct greq q;
    static uint8_t b[L8_MAX_REQ_MSG];
    fz_connect(f);
    for (uint32_t i = 1 + rn(3); i--;) {
        gen_valid(f, &q, 1);
        q.g.max_new_tokens = 100 + rn(MAX_CTX - 64 - 100);
        q.g.ignore_eos = true;
        size_t n = llama8__generate_request__pack(&q.g, b);
        fz_submit(f, L8_SQE_GENERATE, put_msg(f, b, n), (uint32_t)n);
    }
    uint32_t want = rn(6);
    for (uint64_t end = t_now_ms() + 300; f->tokens < want && !f->gone && t_now_ms() < end;) {
        fz_drain(f);
        fz_ctl(f);
        usleep(500);
    }
    fz_disconnect(f);
    return O_CLOSED;
}

/* A request and a pile of empty ones, and no events read: the event ring
 * may fill, the daemon must hold this client's work, not drop or block. */
static enum outcome round_deaf(struct fz *f)
{
    static struct greq q;
    static uint8_t b[L8_MAX_REQ_MSG];
    fz_connect(f);
    gen_valid(f, &q, 200);
    size_t n = llama8__generate_request__pack(&q.g, b);
    if (sq_room(f))
        raw_submit(&f->r, L8_SQE_GENERATE, put_msg(f, b, n), (uint32_t)n);
    for (uint32_t i = rn(300); i-- && sq_room(f);)
        raw_submit(&f->r, L8_SQE_GENERATE, 0, 0);
    return O_UNREAD;
}

static enum outcome run_round(struct fz *f, enum kind k)
{
    fz_round_reset(f);
    switch (k) {
    case R_PRE_GARBAGE: case R_PRE_HELLO: case R_PRE_TWO: case R_PRE_SILENT:
        return round_pre(k);
    case R_CTL: return round_ctl(f);
    case R_SQE: return round_sqe(f);
    case R_GEN_MUT: return round_gen_mut(f);
    case R_GEN_BAD: return round_gen_bad(f);
    case R_CANCEL: return round_cancel(f);
    case R_COUNTERS: return round_counters(f);
    case R_DOORBELL: return round_doorbell(f);
    case R_CLOSE_MID: return round_close_mid(f);
    default: return round_deaf(f);
    }
}

/* ---------------------------------------------------------------- observer */

static struct l8c_client *obs;
static uint32_t obs_ref[OBS_TOKENS];
static uint32_t obs_tok[4096], obs_n;
static uint64_t obs_id;
static bool obs_busy;
static int obs_reason, obs_error;
static uint32_t obs_runs;

static void obs_start(void)
{
    struct l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = OBS_TOKENS;
    p.ignore_eos = true;
    uint32_t op[40];
    for (uint32_t i = 0; i < 40; i++)
        op[i] = (i * 37 + 11) % 2048;
    obs_id++;
    obs_n = 0;
    obs_reason = obs_error = 0;
    REQUIRE(l8c_submit_id(obs, obs_id, op, 40, &p) == 0, "observer submit");
    obs_busy = true;
}

/* Take the observer's events (waiting up to timeout_ms); true once its
 * request is over, checked against the quiet run (the first). */
static bool obs_poll(int timeout_ms)
{
    struct l8_event ev[128];
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    while (obs_busy) {
        uint64_t now = t_now_ms();
        int k = l8c_wait_events(obs, ev, 128, now >= end ? 0 : (int)(end - now));
        REQUIRE(k >= 0, "observer: %s", l8c_last_error(obs, NULL));
        for (int i = 0; i < k; i++) {
            if (ev[i].request_id != obs_id)
                continue;
            if (ev[i].kind == L8_EV_TOKEN && obs_n < 4096)
                obs_tok[obs_n++] = ev[i].token;
            else if (ev[i].kind == L8_EV_DONE)
                obs_reason = ev[i].reason, obs_busy = false;
            else if (ev[i].kind == L8_EV_ERROR)
                obs_error = ev[i].code, obs_busy = false;
        }
        if (k == 0 && t_now_ms() >= end)
            break;
    }
    if (obs_busy)
        return false;
    CHECK(!obs_error && obs_reason == L8_DONE_LENGTH && obs_n == OBS_TOKENS,
          "observer request %llu: error %s, reason %d, %u tokens", (unsigned long long)obs_id,
          l8c_err_name(obs_error), obs_reason, obs_n);
    if (obs_runs == 0)
        memcpy(obs_ref, obs_tok, sizeof(obs_ref));
    else
        CHECK(!memcmp(obs_ref, obs_tok, sizeof(obs_ref)),
              "observer request %llu disturbed: its tokens differ from the quiet run",
              (unsigned long long)obs_id);
    obs_runs++;
    return true;
}

/* ---------------------------------------------------------------- the daemon's health */

/* The daemon runs, and a fresh client gets in and gets its status. */
static void check_alive(struct tdaemon *d, const char *when)
{
    int st = 0;
    pid_t w = waitpid(d->pid, &st, WNOHANG);
    if (w == d->pid)
        d->pid = -1;
    REQUIRE(w == 0 && kill(d->pid, 0) == 0, "llama8d gone %s: %s %d", when,
            WIFSIGNALED(st) ? "signal" : "exit", WIFSIGNALED(st) ? WTERMSIG(st) : WEXITSTATUS(st));
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    int rc = l8c_connect(sock, "fuzz-check", &c, err);
    CHECK(rc == 0, "fresh client %s: %s", when, err);
    if (rc == 0) {
        struct l8c_status s;
        CHECK(l8c_status(c, &s, ANSWER_MS) == 0, "status %s: %s", when, l8c_last_error(c, NULL));
        l8c_close(c);
    }
}

static bool wait_quiet(struct l8c_client *probe, uint32_t clients, struct l8c_status *s)
{
    for (int i = 0; i < 500; i++) {
        REQUIRE(l8c_status(probe, s, ANSWER_MS) == 0, "status");
        if (s->pages_used == 0 && s->requests_running == 0 && s->requests_waiting == 0 &&
            s->clients == clients)
            return true;
        usleep(10000);
    }
    return false;
}

static uint64_t env_u64(const char *name, uint64_t dflt)
{
    const char *v = getenv(name);
    return v && *v ? strtoull(v, NULL, 0) : dflt;
}

/* Adds the notifications read so far to the counts and forgets them: a run
 * of minutes would fill the notes. */
static void count_notes(struct tdaemon *d, unsigned *reloading, unsigned *ready)
{
    for (const char *p = d->notes; (p = strstr(p, "RELOADING=1")); p++)
        ++*reloading;
    for (const char *p = d->notes; (p = strstr(p, "READY=1")); p++)
        ++*ready;
    d->notes_len = 0;
    d->notes[0] = 0;
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 3, "usage: test_ipc_fuzz llama8d model");
    signal(SIGPIPE, SIG_IGN);
    uint64_t seed = env_u64("L8_FUZZ_SEED", DEFAULT_SEED);
    uint64_t budget_ms = env_u64("L8_FUZZ_MS", DEFAULT_MS);
    printf("seed 0x%llx (L8_FUZZ_SEED), %llu ms (L8_FUZZ_MS), at most %u rounds\n",
           (unsigned long long)seed, (unsigned long long)budget_ms, MAX_ROUNDS);
    fflush(stdout);
    struct tdaemon d;
    char mc[16], mr[16], mx[16];
    snprintf(mc, sizeof(mc), "%d", MAX_CTX);
    snprintf(mr, sizeof(mr), "%d", MAX_REQ);
    snprintf(mx, sizeof(mx), "%d", MAX_CLIENTS);
    const char *log = getenv("L8_FUZZ_LOG");
    char conf[] = "/tmp/l8fuzz-conf-XXXXXX";
    int cfd = mkstemp(conf);
    REQUIRE(cfd >= 0, "mkstemp: %s", strerror(errno));
    close(cfd);
    const char *extra[] = { "--max-ctx", mc, "--max-requests-per-client", mr,
                            "--max-clients", mx, "--hello-timeout-ms", "1000",
                            "--log-level", log && *log ? log : "err", "--config", conf, NULL };
    tdaemon_start(&d, argv[1], argv[2], extra);
    unsigned reloads = 0, n_reloading = 0, n_ready = 0;
    sock = d.sock;
    struct l8c_client *probe;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(sock, "fuzz-probe", &probe, err) == 0, "connect: %s", err);
    const struct l8c_info *info = l8c_info(probe);
    vocab = info->vocab_size;
    max_new = info->max_new_tokens;
    max_prompt = info->max_prompt_tokens;
    max_stop = info->max_stop_ids;
    REQUIRE(info->context_length == MAX_CTX && max_new >= MAX_CTX - 1 - 64 && max_stop < 512,
            "limits");
    REQUIRE(l8c_connect(sock, "fuzz-observer", &obs, err) == 0, "connect: %s", err);

    /* The observer on a quiet daemon: the reference. */
    obs_start();
    REQUIRE(obs_poll(60000), "observer on a quiet daemon");
    struct l8c_status s;
    REQUIRE(wait_quiet(probe, 2, &s), "not quiet before the fuzzing");
    usleep(50000);   /* the probe's recv re-armed: a steady count */
    int fds0 = tdaemon_fds(&d), polls0 = tdaemon_uring_polls(&d);

    static struct fz f;
    uint32_t total_w = 0;
    for (int k = 0; k < R_N; k++)
        total_w += kind_weight[k];
    uint64_t t0 = t_now_ms(), last_check = t0;
    obs_start();
    for (round_no = 0; round_no < MAX_ROUNDS && t_now_ms() - t0 < budget_ms; round_no++) {
        rng = seed ^ (round_no + 1ull) * 0xd1b54a32d192ed03ull;
        uint32_t w = rn(total_w);
        enum kind k = 0;
        while (w >= kind_weight[k])
            w -= kind_weight[k++];
        round_kind = k;
        kinds[k]++;
        outcomes[run_round(&f, k)]++;
        /* the observer streams all through the abuse */
        if (obs_poll(0))
            obs_start();
        if (t_now_ms() - last_check >= CHECK_EVERY_MS) {
            check_alive(&d, "during the fuzzing");
            last_check = t_now_ms();
            FILE *cf = fopen(conf, "w");
            if (cf) {
                fprintf(cf, "spin_us = %u\n", reloads++ % 2 ? 0u : 300u);
                fclose(cf);
            }
            kill(d.pid, SIGHUP);
            tdaemon_notify_drain(&d);
            count_notes(&d, &n_reloading, &n_ready);
        }
    }
    uint64_t elapsed = t_now_ms() - t0;
    fz_disconnect(&f);
    REQUIRE(obs_poll(60000), "observer after the fuzzing");
    check_alive(&d, "after the fuzzing");

    /* Everything the fuzzer held is given back. */
    CHECK(wait_quiet(probe, 2, &s), "not quiet after the fuzzer left: %u pages used, "
          "%u running, %u waiting, %u clients", s.pages_used, s.requests_running,
          s.requests_waiting, s.clients);
    usleep(50000);
    int fds1 = tdaemon_fds(&d), polls1 = tdaemon_uring_polls(&d);
    CHECK(fds1 == fds0, "llama8d holds %d descriptors, %d before the fuzzing", fds1, fds0);
    /* (a recv or two may be between completion and re-arming) */
    CHECK(polls1 <= polls0 + 2, "llama8d's io_uring holds %d armed operations, %d before the "
          "fuzzing", polls1, polls0);
    /* And a last quiet run. */
    obs_start();
    REQUIRE(obs_poll(60000), "observer on the quiet daemon after the fuzzing");

    printf("%u rounds in %llu ms, %u reloads; observer runs: 1 before, %u during, 1 after the "
           "fuzzing; identical: %s\n", round_no, (unsigned long long)elapsed, reloads,
           obs_runs - 2, t_failures ? "see above" : "yes");
    printf("daemon descriptors %d -> %d, armed io_uring operations %d -> %d\n", fds0, fds1,
           polls0, polls1);
    printf("rounds by kind:\n");
    for (int k = 0; k < R_N; k++)
        printf("  %6u  %s\n", kinds[k], kind_name[k]);
    printf("rounds by outcome:\n");
    for (int o = 0; o < O_N; o++)
        printf("  %6u  %s\n", outcomes[o], outcome_name[o]);
    printf("error events by code:");
    for (int c = 0; c < L8_ERR_MAX_; c++)
        if (ev_codes[c])
            printf(" %s %u", l8c_err_name(c), ev_codes[c]);
    printf("\nError datagrams by code:");
    for (int c = 0; c < L8_ERR_MAX_; c++)
        if (dc_codes[c])
            printf(" %s %u", l8c_err_name(c), dc_codes[c]);
    printf("\n");
    /* Not vacuous: the abuse reached both kinds of answer. */
    CHECK(round_no >= 50, "only %u rounds", round_no);
    CHECK(outcomes[O_ERROR_EVENT] > 0 && outcomes[O_DISCONNECT] > 0,
          "%u rounds with error events, %u disconnected", outcomes[O_ERROR_EVENT],
          outcomes[O_DISCONNECT]);
    l8c_close(obs);
    l8c_close(probe);
    int rc = tdaemon_stop(&d);
    CHECK(rc == 0, "llama8d exit %d", rc);
    /* Each reload ended (READY=1 after each RELOADING=1; one more READY=1
     * from the start). A fuzzed datagram that happens to be a ReloadRequest
     * reloads too: at least ours. */
    count_notes(&d, &n_reloading, &n_ready);
    CHECK(reloads > 0 && n_reloading >= reloads && n_ready == n_reloading + 1,
          "%u SIGHUPs: %u RELOADING=1, %u READY=1", reloads, n_reloading, n_ready);
    unlink(conf);
    if (t_failures)
        return 1;
    printf("ok\n");
    return 0;
}
