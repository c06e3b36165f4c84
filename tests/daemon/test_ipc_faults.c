/* test_ipc_faults: the daemon under abuse. Cancel mid-stream and SIGKILL of
 * a client free their pages; bad input of every kind gets its defined
 * error, an empty datagram too, and datagrams queued behind a bad one do
 * not cost the client its Error; a client that breaks the ring rules is
 * disconnected alone; one that fills its event doorbell leaves nothing
 * armed in the daemon's io_uring; a connection flood is refused past
 * max_clients; and all along an observer request streams exactly the
 * tokens it streams on a quiet daemon. Out of file descriptors, it refuses
 * what it cannot take, without spinning, and recovers.
 * argv: llama8d model-dir */
#include <dirent.h>
#include <fcntl.h>
#include <math.h>
#include <sys/resource.h>
#include <sys/wait.h>

#include "ipc_raw.h"

#define MAX_CTX 512
#define MAX_REQ 4
#define MAX_CLIENTS 8

static const char *sock;

/* ---------------------------------------------------------------- raw protocol */

/* Expect an Error with this code, then the hang-up. */
static void expect_error_and_hangup(int fd, int code, const char *what)
{
    Llama8__DaemonMessage *m = raw_recv(fd, NULL, 10000);
    CHECK(m && m->msg_case == LLAMA8__DAEMON_MESSAGE__MSG_ERROR && (int)m->error->code == code,
          "%s: expected error %s, got %s %d", what, l8c_err_name(code),
          m ? "message" : "nothing", m && m->error ? (int)m->error->code : -1);
    if (m)
        llama8__daemon_message__free_unpacked(m, NULL);
    char b[16];
    struct pollfd p = { fd, POLLIN, 0 };
    CHECK(poll(&p, 1, 10000) == 1 && recv(fd, b, sizeof(b), MSG_DONTWAIT) == 0,
          "%s: not disconnected", what);
}

static bool still_connected(int fd)
{
    struct pollfd p = { fd, POLLIN, 0 };
    return poll(&p, 1, 50) == 0;
}

/* ---------------------------------------------------------------- library helpers */

static struct l8c_client *lconnect(void)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    int rc = l8c_connect(sock, "faults", &c, err);
    REQUIRE(rc == 0, "connect: %s", err);
    return c;
}

static uint32_t prompt[1024];

/* Submit and return the first event of that request (an error here). */
static struct l8_event submit_expect_event(struct l8c_client *c, uint64_t id, uint32_t n,
                                           const struct l8c_params *p)
{
    struct l8_event ev = {0};
    REQUIRE(l8c_submit_id(c, id, prompt, n, p) == 0, "submit");
    for (int tries = 0; tries < 1000; tries++) {
        int k = l8c_wait_events(c, &ev, 1, 10000);
        REQUIRE(k == 1, "no event");
        if (ev.request_id == id)
            return ev;
    }
    return ev;
}

/* The daemon's ERROR record for prompt[n] with p: its code, the field it
 * names, the value and the limit; for what the client can know, the same
 * code and words from l8c_check_request. */
static void expect_req_error(struct l8c_client *c, uint64_t id, uint32_t n,
                             const struct l8c_params *p, int code, int field, uint32_t value,
                             uint32_t limit, const char *what)
{
    struct l8_event ev = submit_expect_event(c, id, n, p);
    char said[L8C_ERRLEN], checked[L8C_ERRLEN];
    l8c_error_text(&ev, said);
    CHECK(ev.kind == L8_EV_ERROR && ev.code == code && ev.reason == field && ev.token == value &&
          ev.index == limit, "%s: got kind %d code %s field %d value %u limit %u (%s)", what,
          ev.kind, l8c_err_name(ev.code), ev.reason, ev.token, ev.index, said);
    if (field == L8_EF_NONE || field == L8_EF_REQUESTS)
        return;   /* the daemon's state, not the request's */
    int rc = l8c_check_request(c, prompt, n, p, checked);
    CHECK(rc == code && !strcmp(said, checked), "%s: l8c_check_request %s \"%s\", the daemon "
          "\"%s\"", what, l8c_err_name(rc), checked, said);
}

static struct l8c_status status_of(struct l8c_client *c)
{
    struct l8c_status s;
    REQUIRE(l8c_status(c, &s, 10000) == 0, "status");
    return s;
}

/* Wait until the pool holds no pages for anyone (and n clients remain). */
static bool wait_quiet(struct l8c_client *probe, uint32_t clients)
{
    for (int i = 0; i < 500; i++) {
        struct l8c_status s = status_of(probe);
        if (s.pages_used == 0 && s.requests_running == 0 && s.requests_waiting == 0 &&
            (clients == 0 || s.clients == clients))
            return true;
        usleep(10000);
    }
    return false;
}

/* The observer: one greedy request, 48 tokens, same every time. */
static void observer_submit(struct l8c_client *c, uint64_t id)
{
    struct l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = 48;
    p.ignore_eos = true;
    uint32_t op[40];
    for (uint32_t i = 0; i < 40; i++)
        op[i] = (i * 37 + 11) % 2048;
    REQUIRE(l8c_submit_id(c, id, op, 40, &p) == 0, "observer submit");
}

/* CPU time the process has used, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
    if (f)
        fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');   /* the name may hold spaces */
    unsigned long ut = 0, st = 0;
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
        return -1;
    return (long)(ut + st);
}

/* Out of descriptors (a daemon under RLIMIT_NOFILE 64, filled with silent
 * connections): a connection past the limit is refused with
 * TOO_MANY_CLIENTS and a message instead of waiting unanswered, the daemon
 * does not spin on the failing accept (before: a core and a log line per
 * try), and once descriptors are free a client gets in and streams. */
static void test_out_of_descriptors(const char *bin, const char *model)
{
    struct tdaemon d;
    const char *prefix[] = { "prlimit", "--nofile=64:64", NULL };
    const char *extra[] = { "--hello-timeout-ms", "0", "--max-clients", "100", NULL };
    tdaemon_start_argv(&d, prefix, bin, model, extra);
    enum { MAXFD = 80 };
    int fds[MAXFD], n = 0, refused = -1;
    for (; n < MAXFD; n++) {
        fds[n] = raw_socket(d.sock);
        if (!still_connected(fds[n])) {   /* it answered: the refusal */
            refused = fds[n];
            break;
        }
    }
    CHECK(refused >= 0, "%d silent connections under RLIMIT_NOFILE 64 and none refused", n);
    if (refused >= 0)
        expect_error_and_hangup(refused, L8_ERR_TOO_MANY_CLIENTS, "past the descriptors");
    const long t0 = cpu_ticks(d.pid);
    usleep(500 * 1000);
    const long used = cpu_ticks(d.pid) - t0;
    CHECK(t0 >= 0 && used <= 10, "the daemon used %ld ticks in 0.5 s out of descriptors", used);
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    CHECK(l8c_connect(d.sock, "one more", &c, err) == -EUSERS &&
              strstr(err, "out of file descriptors"),
          "a client out of descriptors: %s", err);
    for (int i = 0; i <= n && i < MAXFD; i++)
        close(fds[i]);
    int rc = -1;
    for (int i = 0; i < 100 && rc < 0; i++)   /* the daemon sees the hang-ups */
        if ((rc = l8c_connect(d.sock, "after", &c, err)) < 0)
            usleep(10000);
    CHECK(rc == 0, "no client after the descriptors were freed: %s", err);
    /* A client out of descriptors itself: one free for its socket, none
     * for the three of the Welcome. */
    pid_t kid = fork();
    if (kid == 0) {
        int top = 0;
        DIR *dir = opendir("/proc/self/fd");
        for (struct dirent *e; dir && (e = readdir(dir));)
            if (atoi(e->d_name) > top)
                top = atoi(e->d_name);
        if (dir)
            closedir(dir);
        top++;
        for (int fd = 0; fd < top; fd++)   /* fill the gaps below top */
            if (fcntl(fd, F_GETFD) < 0 && open("/dev/null", O_RDONLY) != fd)
                _exit(2);
        struct rlimit rl = { (rlim_t)top + 1, (rlim_t)top + 1 };
        struct l8c_client *k;
        char kerr[L8C_ERRLEN];
        if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
            _exit(2);
        int krc = l8c_connect(d.sock, "no room", &k, kerr);
        _exit(krc == -EMFILE && strstr(kerr, "out of file descriptors") ? 0 : 1);
    }
    int st = -1;
    waitpid(kid, &st, 0);
    CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0,
          "a client with no descriptors for the Welcome's: status %d", st);
    if (rc == 0) {
        struct l8c_params p;
        l8c_params_init(&p);
        p.max_new_tokens = 4;
        struct l8_event ev = submit_expect_event(c, 1, 8, &p);
        CHECK(ev.kind == L8_EV_STARTED, "a request after the descriptors were freed: event %d",
              ev.kind);
        l8c_close(c);
    }
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 3, "usage: test_ipc_faults llama8d model");
    struct tdaemon d;
    char mc[16], mr[16], mx[16];
    snprintf(mc, sizeof(mc), "%d", MAX_CTX);
    snprintf(mr, sizeof(mr), "%d", MAX_REQ);
    snprintf(mx, sizeof(mx), "%d", MAX_CLIENTS);
    const char *extra[] = { "--max-ctx", mc, "--max-requests-per-client", mr,
                            "--max-clients", mx, "--hello-timeout-ms", "1000",
                            "--admin-clients", "0", NULL };   /* we are the daemon's user */
    tdaemon_start(&d, argv[1], argv[2], extra);
    sock = d.sock;
    for (uint32_t i = 0; i < 1024; i++)
        prompt[i] = (i * 7 + 3) % 2048;
    prompt[0] = 1;
    struct l8c_client *probe = lconnect();
    CHECK(l8c_info(probe)->context_length == MAX_CTX, "context %u", l8c_info(probe)->context_length);

    /* The observer's tokens on a quiet daemon. */
    struct l8c_client *obs = lconnect();
    static struct tstream ref[2], got[5];
    observer_submit(obs, 1);
    REQUIRE(tcollect(obs, ref, 1, 1, 60000), "observer");
    REQUIRE(ref[1].n == 48 && ref[1].done_reason == L8_DONE_LENGTH, "observer %u", ref[1].n);

    /* Cancel mid-stream frees the request's pages. */
    {
        struct l8c_client *c = lconnect();
        struct l8c_params p;
        l8c_params_init(&p);
        p.max_new_tokens = 400;
        p.ignore_eos = true;
        REQUIRE(l8c_submit_id(c, 7, prompt, 100, &p) == 0, "submit");
        struct l8_event ev;
        uint32_t toks = 0;
        while (toks < 3 && l8c_wait_events(c, &ev, 1, 10000) == 1)
            toks += ev.kind == L8_EV_TOKEN;
        struct l8c_status s = status_of(probe);
        CHECK(s.pages_used >= 7 && s.requests_running == 1, "pages %u running %u", s.pages_used,
              s.requests_running);
        REQUIRE(l8c_cancel(c, 7) == 0, "cancel");
        bool cancelled = false;
        while (!cancelled && l8c_wait_events(c, &ev, 1, 10000) == 1)
            cancelled = ev.kind == L8_EV_DONE && ev.request_id == 7;
        CHECK(cancelled && ev.reason == L8_DONE_CANCELLED, "no DONE cancelled (reason %d)", ev.reason);
        CHECK(wait_quiet(probe, 0), "pages not freed after cancel");
        /* Cancel of an id that is not live. */
        REQUIRE(l8c_cancel(c, 7) == 0, "cancel");
        CHECK(l8c_wait_events(c, &ev, 1, 10000) == 1 && ev.kind == L8_EV_ERROR &&
              ev.code == L8_ERR_UNKNOWN_REQUEST && ev.request_id == 7, "unknown cancel: %d/%d",
              ev.kind, ev.code);
        l8c_close(c);
    }

    /* SIGKILL of a client mid-stream: the observer continues, pages freed. */
    {
        int pfd[2];
        REQUIRE(pipe(pfd) == 0, "pipe");
        pid_t kid = fork();
        if (kid == 0) {
            struct l8c_client *c = lconnect();
            struct l8c_params p;
            l8c_params_init(&p);
            p.max_new_tokens = 450;
            p.ignore_eos = true;
            l8c_submit_id(c, 1, prompt, 50, &p);
            struct l8_event ev;
            while (l8c_wait_events(c, &ev, 1, 10000) == 1 && ev.kind != L8_EV_TOKEN)
                ;
            if (write(pfd[1], "x", 1) != 1)
                _exit(1);
            pause();
            _exit(0);
        }
        char x;
        REQUIRE(read(pfd[0], &x, 1) == 1, "child did not stream");
        observer_submit(obs, 2);
        CHECK(status_of(probe).pages_used > 0, "child holds no pages");
        kill(kid, SIGKILL);
        waitpid(kid, NULL, 0);
        REQUIRE(tcollect(obs, got, 2, 1, 60000), "observer after SIGKILL");
        CHECK(got[2].n == 48 && !memcmp(got[2].tokens, ref[1].tokens, 48 * 4),
              "observer disturbed by SIGKILL");
        CHECK(wait_quiet(probe, 2), "pages or client not freed after SIGKILL");
        close(pfd[0]);
        close(pfd[1]);
    }

    /* Per-request errors: the connection stays. */
    {
        struct l8c_client *c = lconnect();
        struct l8c_params p;
        l8c_params_init(&p);
        p.max_new_tokens = 8;
        observer_submit(obs, 3);   /* runs through all of this */
        const struct l8c_info *in = l8c_info(c);
        const struct l8c_status before = status_of(probe);
        prompt[5] = 2048;
        expect_req_error(c, 1, 10, &p, L8_ERR_BAD_TOKEN, L8_EF_PROMPT_ID, 2048, in->vocab_size,
                         "token id >= vocab");
        prompt[5] = 5;
        expect_req_error(c, 2, 600, &p, L8_ERR_PROMPT_TOO_LONG, L8_EF_PROMPT_TOKENS, 600,
                         in->max_prompt_tokens, "prompt > context");
        p.max_new_tokens = 200;
        expect_req_error(c, 3, 400, &p, L8_ERR_PROMPT_TOO_LONG, L8_EF_CONTEXT, 600, MAX_CTX,
                         "prompt + new > context");
        p.max_new_tokens = 0;
        expect_req_error(c, 4, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_MAX_NEW, 0, in->max_new_tokens,
                         "max_new_tokens 0");
        p.max_new_tokens = 8;
        expect_req_error(c, 5, 0, &p, L8_ERR_EMPTY_PROMPT, L8_EF_PROMPT_TOKENS, 0,
                         in->max_prompt_tokens, "empty prompt");
        uint32_t stops[64] = { 4096 };
        REQUIRE(in->max_stop_ids < 64, "max_stop_ids %u", in->max_stop_ids);
        p.stop_ids = stops;
        p.n_stop_ids = 1;
        expect_req_error(c, 6, 10, &p, L8_ERR_BAD_TOKEN, L8_EF_STOP_ID, 4096, in->vocab_size,
                         "stop id >= vocab");
        p.n_stop_ids = in->max_stop_ids + 1;
        expect_req_error(c, 7, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_STOP_IDS, in->max_stop_ids + 1,
                         in->max_stop_ids, "too many stop ids");
        p.n_stop_ids = 0;
        p.temperature = 1.0f;
        p.top_p = 1.5f;
        struct l8_event ev = submit_expect_event(c, 8, 10, &p);
        CHECK(ev.kind == L8_EV_ERROR && ev.code == L8_ERR_BAD_PARAMS && ev.reason == L8_EF_TOP_P &&
              ev.logprob == 1.5f, "top_p 1.5: code %d field %d value %g", ev.code, ev.reason,
              ev.logprob);
        expect_req_error(c, 9, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_TOP_P, 0, 0, "top_p 1.5");
        p.top_p = 1;
        p.temperature = INFINITY;
        expect_req_error(c, 19, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_TEMPERATURE, 0, 0,
                         "temperature inf");
        p.temperature = -1;     /* greedy is 0: below it is a mistake, said */
        expect_req_error(c, 22, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_TEMPERATURE, 0, 0,
                         "temperature -1");
        p.temperature = 100.5f;
        expect_req_error(c, 23, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_TEMPERATURE, 0, 0,
                         "temperature 100.5");
        p.temperature = 1;
        p.repetition_penalty = 101;
        expect_req_error(c, 24, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_REPETITION_PENALTY, 0, 0,
                         "repetition_penalty 101");
        p.repetition_penalty = 1;
        p.min_p = -1;
        expect_req_error(c, 20, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_MIN_P, 0, 0, "min_p -1");
        p.min_p = 0;
        p.repetition_penalty = -2;
        expect_req_error(c, 21, 10, &p, L8_ERR_BAD_PARAMS, L8_EF_REPETITION_PENALTY, 0, 0,
                         "repetition_penalty -2");
        l8c_params_init(&p);
        p.max_new_tokens = 300;
        p.ignore_eos = true;
        for (uint64_t id = 10; id < 10 + MAX_REQ; id++)
            REQUIRE(l8c_submit_id(c, id, prompt, 20, &p) == 0, "submit");
        expect_req_error(c, 10, 20, &p, L8_ERR_DUPLICATE_REQUEST, L8_EF_NONE, 0, 0,
                         "duplicate id");
        expect_req_error(c, 99, 20, &p, L8_ERR_TOO_MANY_REQUESTS, L8_EF_REQUESTS, MAX_REQ,
                         MAX_REQ, "requests per client");
        /* status counts them, by code (nobody else errs meanwhile) */
        const struct l8c_status after = status_of(probe);
        static const struct { int code; uint64_t n; } sent[] = {
            { L8_ERR_BAD_TOKEN, 2 }, { L8_ERR_PROMPT_TOO_LONG, 2 }, { L8_ERR_BAD_PARAMS, 10 },
            { L8_ERR_EMPTY_PROMPT, 1 }, { L8_ERR_DUPLICATE_REQUEST, 1 },
            { L8_ERR_TOO_MANY_REQUESTS, 1 }, { L8_ERR_INTERNAL, 0 },
        };
        for (size_t i = 0; i < sizeof(sent) / sizeof(sent[0]); i++)
            CHECK(after.errors[sent[i].code] - before.errors[sent[i].code] == sent[i].n,
                  "status: %s counted %llu times, want %llu", l8c_err_name(sent[i].code),
                  (unsigned long long)(after.errors[sent[i].code] - before.errors[sent[i].code]),
                  (unsigned long long)sent[i].n);
        l8c_close(c);   /* with MAX_REQ requests running: all cancelled */
    }

    /* Raw clients breaking the protocol. */
    {
        struct raw r;
        struct l8_event ev;
        /* Malformed protobuf in the arena: an error event, still connected. */
        raw_connect(&r, sock);
        memcpy(r.arena, "\xff\xff\xff\xff\x0f", 5);
        raw_submit(&r, L8_SQE_GENERATE, 0, 5);
        CHECK(raw_event(&r, &ev, 10000) && ev.kind == L8_EV_ERROR && ev.code == L8_ERR_BAD_MESSAGE,
              "malformed protobuf: kind %d code %d", ev.kind, ev.code);
        CHECK(still_connected(r.fd), "malformed protobuf disconnected");
        /* A prompt pointing past the arena: BAD_MESSAGE for that request. */
        {
            Llama8__GenerateRequest g = LLAMA8__GENERATE_REQUEST__INIT;
            g.request_id = 5;
            g.max_new_tokens = 4;
            g.prompt_offset = r.h.arena_size - 8;
            g.prompt_count = 16;
            size_t n = llama8__generate_request__pack(&g, r.arena + 4096);
            raw_submit(&r, L8_SQE_GENERATE, 4096, (uint32_t)n);
            CHECK(raw_event(&r, &ev, 10000) && ev.kind == L8_EV_ERROR &&
                  ev.code == L8_ERR_BAD_MESSAGE && ev.request_id == 5 &&
                  ev.reason == L8_EF_PROMPT_RANGE && ev.token == r.h.arena_size - 8 &&
                  ev.index == r.h.arena_size,
                  "prompt past the arena: kind %d code %d field %d", ev.kind, ev.code, ev.reason);
        }
        /* A message past the end of the arena: disconnected. */
        raw_submit(&r, L8_SQE_GENERATE, r.h.arena_size - 2, 100);
        expect_error_and_hangup(r.fd, L8_ERR_RING_VIOLATION, "arena offset past the end");
        raw_close(&r);

        /* A submission tail far past the head. */
        raw_connect(&r, sock);
        atomic_store_explicit(&r.sq_ctl->tail, r.h.sq_entries + 5, memory_order_release);
        raw_ring(&r);
        expect_error_and_hangup(r.fd, L8_ERR_RING_VIOLATION, "ring tail out of range");
        raw_close(&r);

        /* An unknown entry kind. */
        raw_connect(&r, sock);
        raw_submit(&r, 77, 0, 4);
        expect_error_and_hangup(r.fd, L8_ERR_RING_VIOLATION, "bad entry kind");
        raw_close(&r);

        /* An event-ring head out of range, seen when the daemon writes. */
        raw_connect(&r, sock);
        atomic_store_explicit(&r.eq_ctl->head, 0x80000000u, memory_order_release);
        raw_submit(&r, L8_SQE_GENERATE, 0, 0);   /* empty message: an error event */
        expect_error_and_hangup(r.fd, L8_ERR_RING_VIOLATION, "event head out of range");
        raw_close(&r);

        /* The observer ran through the bad input above; its stream ends
         * here, so that every token the daemon makes below is the held
         * client's (with slow steps it was still streaming). */
        REQUIRE(tcollect(obs, got, 3, 1, 60000), "observer during bad input");
        CHECK(got[3].n == 48 && !memcmp(got[3].tokens, ref[1].tokens, 48 * 4),
              "observer disturbed by bad input");

        /* A client that stops draining its event ring. Its generation and a
         * stream of empty messages (an error event each) fill the ring; then
         * its request is held (no tokens made for it) and its submission
         * ring stops moving. Drained, everything arrives, in order. */
        raw_connect(&r, sock);
        {
            Llama8__GenerateRequest g = LLAMA8__GENERATE_REQUEST__INIT;
            g.request_id = 9;
            g.max_new_tokens = 400;
            g.ignore_eos = true;
            g.prompt_offset = 0;
            g.prompt_count = 20;
            memcpy(r.arena, prompt, 20 * sizeof(uint32_t));
            size_t n = llama8__generate_request__pack(&g, r.arena + 4096);
            raw_submit(&r, L8_SQE_GENERATE, 4096, (uint32_t)n);
        }
        uint32_t sent = 0;
        for (uint64_t moved = t_now_ms(); t_now_ms() - moved < 500 &&
                                          sent < 3 * r.h.eq_entries;) {
            uint32_t head = atomic_load_explicit(&r.sq_ctl->head, memory_order_acquire);
            if (r.tail - head < r.h.sq_entries) {
                raw_submit(&r, L8_SQE_GENERATE, 0, 0);
                sent++;
                moved = t_now_ms();
            } else {
                usleep(1000);
            }
        }
        CHECK(still_connected(r.fd), "a client not draining its events was cut off");
        CHECK(r.tail - atomic_load_explicit(&r.sq_ctl->head, memory_order_acquire) ==
              r.h.sq_entries && sent < 2 * r.h.eq_entries,
              "submissions still taken with the event ring full (%u sent)", sent);
        struct l8c_status s0 = status_of(probe);
        usleep(1000000);
        struct l8c_status s1 = status_of(probe);
        CHECK(s1.requests_running >= 1 && s1.tokens_generated == s0.tokens_generated,
              "tokens made for a client not draining its events: %llu -> %llu",
              (unsigned long long)s0.tokens_generated, (unsigned long long)s1.tokens_generated);
        uint32_t errors = 0, tokens = 0, done = 0, misordered = 0;
        while (!done || errors < sent) {
            if (!raw_event(&r, &ev, 10000))
                break;
            if (ev.kind == L8_EV_ERROR && ev.code == L8_ERR_EMPTY_PROMPT)
                errors++;
            else if (ev.request_id == 9 && ev.kind == L8_EV_TOKEN)
                misordered += ev.index != tokens++;
            else if (ev.request_id == 9 && ev.kind == L8_EV_DONE)
                done = ev.index;
        }
        CHECK(errors == sent && tokens == 400 && done == 400 && !misordered,
              "after draining: %u of %u errors, %u tokens (%u out of order), done at %u",
              errors, sent, tokens, misordered, done);
        /* the second it was held is not the daemon's gap between steps */
        struct l8c_status s2 = status_of(probe);
        CHECK(s2.gap_time_s - s0.gap_time_s < 0.5, "held time counted as gap: %.3f s",
              s2.gap_time_s - s0.gap_time_s);
        raw_close(&r);

        /* Garbage instead of Hello; a Hello of another version. */
        int fd = raw_socket(sock);
        REQUIRE(send(fd, "\xff\x01\x02", 3, 0) == 3, "send");
        expect_error_and_hangup(fd, L8_ERR_BAD_MESSAGE, "garbage hello");
        close(fd);
        fd = raw_socket(sock);
        raw_hello(fd, L8_PROTO_VERSION + 1);
        expect_error_and_hangup(fd, L8_ERR_BAD_VERSION, "hello version");
        close(fd);

        /* An empty datagram, before Hello and after Welcome: recv's 0 is
         * not only the hang-up, and it gets its Error too. */
        fd = raw_socket(sock);
        REQUIRE(send(fd, "", 0, 0) == 0, "send");
        expect_error_and_hangup(fd, L8_ERR_BAD_MESSAGE, "empty datagram before Hello");
        close(fd);
        raw_connect(&r, sock);
        REQUIRE(send(r.fd, "", 0, 0) == 0, "send");
        expect_error_and_hangup(r.fd, L8_ERR_BAD_MESSAGE, "empty datagram after Welcome");
        raw_close(&r);

        /* A bad datagram with more queued behind it (sent while the daemon
         * is stopped, so it cannot have read them): the daemon drops them
         * before it hangs up, else the client's recv fails with ECONNRESET
         * before it reaches the Error. */
        kill(d.pid, SIGSTOP);
        fd = raw_socket(sock);
        REQUIRE(send(fd, "\xff\x01\x02", 3, 0) == 3 && send(fd, "", 0, 0) == 0 &&
                send(fd, "\x12\x00", 2, 0) == 2, "send");   /* past an empty one too */
        kill(d.pid, SIGCONT);
        expect_error_and_hangup(fd, L8_ERR_BAD_MESSAGE, "bad datagram with more behind it");
        close(fd);
    }
    CHECK(wait_quiet(probe, 2), "pages held after the bad-input clients left");

    /* A client that makes its event doorbell blocking (the eventfd's file
     * is shared, O_NONBLOCK with it), fills its counter and asks to be
     * woken for every event: the daemon's loop does not block on it (a
     * plain write would), its writes do not pile up (an io_uring write
     * armed on the full eventfd for each, kept after the client has gone),
     * and the one left armed is cancelled when the client goes. */
    {
        int polls0 = tdaemon_uring_polls(&d);
        struct raw r;
        struct l8_event ev;
        raw_connect(&r, sock);
        REQUIRE(fcntl(r.eq_efd, F_SETFL, fcntl(r.eq_efd, F_GETFL) & ~O_NONBLOCK) == 0, "fcntl");
        uint64_t full = 0xfffffffffffffffeull;
        REQUIRE(write(r.eq_efd, &full, 8) == 8, "fill the event doorbell");
        uint32_t errors = 0;
        for (int i = 0; i < 64; i++) {
            atomic_store(&r.eq_ctl->flags, L8_RING_NEED_WAKEUP);
            raw_submit(&r, L8_SQE_GENERATE, 0, 0);   /* an empty request: an error event */
            errors += raw_event(&r, &ev, 10000) && ev.kind == L8_EV_ERROR &&
                      ev.code == L8_ERR_EMPTY_PROMPT;
        }
        CHECK(errors == 64, "full doorbell: %u of 64 error events", errors);
        int polls_on = tdaemon_uring_polls(&d);
        /* Its recv, its doorbell read, one wake; one more for another
         * client's doorbell read being re-armed. Not one a publish. */
        CHECK(polls_on <= polls0 + 4, "armed io_uring operations %d -> %d with a full doorbell",
              polls0, polls_on);
        CHECK(status_of(probe).clients == 3, "status with a full doorbell");
        raw_close(&r);
        CHECK(wait_quiet(probe, 2), "client with a full doorbell not freed");
        int polls1 = tdaemon_uring_polls(&d);
        CHECK(polls1 <= polls0 + 2, "armed io_uring operations %d -> %d after 64 events to a "
              "full doorbell", polls0, polls1);
    }

    /* A flood of connections: max_clients, then TOO_MANY_CLIENTS. */
    {
        struct l8c_client *cs[MAX_CLIENTS];
        int n = 0, rc = 0;
        char err[L8C_ERRLEN];
        for (int i = 0; i < MAX_CLIENTS + 4; i++) {
            struct l8c_client *c;
            rc = l8c_connect(sock, "flood", &c, err);
            if (rc < 0)
                break;
            cs[n++] = c;
        }
        CHECK(rc == -EUSERS && n == MAX_CLIENTS - 2, "flood: rc %d after %d (%s)", rc, n, err);
        for (int i = 0; i < n; i++)
            l8c_close(cs[i]);
    }
    /* Connections that never say Hello take every free slot; they are
     * closed after hello_timeout_ms, and a real client then gets in. */
    {
        int fds[MAX_CLIENTS];
        CHECK(wait_quiet(probe, 2), "clients not freed after flood");
        for (int i = 0; i < MAX_CLIENTS - 2; i++)
            fds[i] = raw_socket(sock);
        struct l8c_client *c;
        char err[L8C_ERRLEN];
        CHECK(l8c_connect(sock, "late", &c, err) == -EUSERS, "silent connections: a free slot");
        for (int i = 0; i < MAX_CLIENTS - 2; i++) {
            expect_error_and_hangup(fds[i], L8_ERR_BAD_MESSAGE, "no Hello");
            close(fds[i]);
        }
        int rc = -1;
        for (int i = 0; i < 100 && rc < 0; i++)   /* the slots free as the ops come back */
            if ((rc = l8c_connect(sock, "late", &c, err)) < 0)
                usleep(10000);
        CHECK(rc == 0, "no slot after the silent connections were closed: %s", err);
        if (rc == 0)
            l8c_close(c);
    }
    observer_submit(obs, 4);
    static struct tstream last[5];
    REQUIRE(tcollect(obs, last, 4, 1, 60000), "observer after the flood");
    CHECK(last[4].n == 48 && !memcmp(last[4].tokens, ref[1].tokens, 48 * 4), "observer after flood");
    CHECK(wait_quiet(probe, 2), "clients not freed after flood");
    l8c_close(obs);
    l8c_close(probe);
    int rc = tdaemon_stop(&d);
    CHECK(rc == 0, "llama8d exit %d", rc);
    test_out_of_descriptors(argv[1], argv[2]);
    if (t_failures)
        return 1;
    printf("ok\n");
    return 0;
}
