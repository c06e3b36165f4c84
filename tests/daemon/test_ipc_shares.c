/* test_ipc_shares: one user cannot starve another (issue 34). Two uids
 * against the real llama8d: root (the suite runs as root; else skipped)
 * and 65534 / 65533 let in through a supplementary group.
 *  - pages: uid 65534 prefills long prompts and stops reading (held): its
 *    pages pin the pool. Root's request is served in bounded time; when
 *    65534 reads again its streams are whole and equal to the same
 *    requests run alone;
 *  - WAITING: a request that waits for pages behind its own uid's held
 *    client is told so (a WAITING event, reason PAGES) and is served once
 *    the holder goes;
 *  - requests: 65534 floods max_requests from three connections; it gets
 *    half of the queue, refused with UID_REQUESTS past it, and root's
 *    request still gets in;
 *  - connections: 65534 opens more than max_clients_per_uid connections
 *    with max_clients to spare only through them; 65533 and root still
 *    connect;
 *  - doorbells: a client that writes its submission doorbell in a loop
 *    costs the daemon about what an honest busy client does (the daemon's
 *    CPU time, printed; asserted loosely).
 * argv: llama8d model-dir */
#include "ipc_raw.h"

#include <sys/eventfd.h>

static const char *bin, *model;

static void prompt_of(uint32_t *p, uint32_t n, uint32_t base)
{
    for (uint32_t i = 0; i < n; i++)
        p[i] = (base + i * 37) % 2000 + 10;
}

static int submit(struct l8c_client *c, uint64_t id, const uint32_t *p, uint32_t n,
                  uint32_t max_new)
{
    struct l8c_params q;
    l8c_params_init(&q);
    q.max_new_tokens = max_new;
    q.ignore_eos = true;
    q.no_speculate = true;
    return l8c_submit_id(c, id, p, n, &q);
}

/* One byte from fd within timeout_ms: 1, or 0. */
static int wait_byte(int fd, int timeout_ms)
{
    struct pollfd p = { fd, POLLIN, 0 };
    char b;
    return poll(&p, 1, timeout_ms) == 1 && read(fd, &b, 1) == 1;
}

/* Wait until root's view of the clients shows one of uid held. */
static bool wait_held(struct l8c_client *c, uid_t uid, int timeout_ms)
{
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    struct l8c_client_info v[16];
    size_t n;
    while (t_now_ms() < end) {
        if (l8c_clients(c, v, 16, &n, 5000) == 0)
            for (size_t i = 0; i < n && i < 16; i++)
                if (v[i].uid == uid && v[i].held && v[i].kv_pages > 0)
                    return true;
        usleep(50000);
    }
    return false;
}

#define HOG_REQS 3
#define HOG_PROMPT 96
#define HOG_NEW 120

/* The pages test's hog, as uid 65534: submits, says so on `up`, reads
 * nothing until `go`, then collects its streams and checks each against
 * the same request run alone. Exit 0: whole and equal. */
static int hog_pages(const char *sock, int arg, int up, int go)
{
    (void)arg;
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    if (l8c_connect(sock, "hog", &c, err) < 0)
        return 2;
    uint32_t p[HOG_REQS][HOG_PROMPT];
    for (uint32_t i = 0; i < HOG_REQS; i++) {
        prompt_of(p[i], HOG_PROMPT, 100 * i + 7);
        if (submit(c, i + 1, p[i], HOG_PROMPT, HOG_NEW) < 0)
            return 3;
    }
    if (write(up, "u", 1) != 1 || !wait_byte(go, 60000))
        return 4;
    static struct tstream s[HOG_REQS + 1], alone;
    for (uint32_t i = 0; i <= HOG_REQS; i++)
        s[i].done_reason = -1;
    if (!tcollect(c, s, HOG_REQS, HOG_REQS, 60000))
        return 5;
    for (uint32_t i = 0; i < HOG_REQS; i++) {
        memset(&alone, 0, sizeof alone);
        if (submit(c, 100 + i, p[i], HOG_PROMPT, HOG_NEW) < 0)
            return 6;
        /* ids above max_id are skipped by tcollect: collect id 100 + i here */
        uint32_t n = 0;
        bool done = false;
        struct l8_event ev[64];
        uint64_t end = t_now_ms() + 60000;
        while (!done && t_now_ms() < end) {
            int k = l8c_wait_events(c, ev, 64, 1000);
            if (k < 0)
                return 7;
            for (int j = 0; j < k; j++) {
                if (ev[j].request_id != 100 + i)
                    continue;
                if (ev[j].kind == L8_EV_TOKEN && n < 4096)
                    alone.tokens[n++] = ev[j].token;
                done |= ev[j].kind == L8_EV_DONE || ev[j].kind == L8_EV_ERROR;
            }
        }
        const struct tstream *h = &s[i + 1];
        if (h->error || h->n != HOG_NEW || n != HOG_NEW ||
            memcmp(h->tokens, alone.tokens, n * sizeof(uint32_t)))
            return 10 + (int)i;
    }
    l8c_close(c);
    return 0;
}

/* A test's other process: as uid (in the group gid), fn(sock, arg, the
 * write end of up, the read end of go), its result its exit status. The
 * pipes are made on first use (up[0] < 0); the parent closes its copies of
 * the child's ends once every child is forked. */
typedef int child_fn(const char *sock, int arg, int up, int go);

static pid_t fork_child(uid_t uid, gid_t gid, child_fn *fn, const char *sock, int arg,
                        int up[2], int go[2])
{
    if (up[0] < 0)
        REQUIRE(pipe(up) == 0 && pipe(go) == 0, "pipe");
    pid_t kid = tuser_fork(uid, &gid, 1);
    if (kid == 0) {
        close(up[0]);
        close(go[1]);
        _exit(fn(sock, arg, up[1], go[0]));
    }
    return kid;
}

static void test_pages(gid_t gid, const char *gname)
{
    struct tdaemon d;
    /* 24 pages of 16: the hog's three prompts take 18, their first tokens the rest */
    const char *extra[] = { "--allowed-group", gname, "--socket-mode", "0666",
                            "--kv-pages", "24", "--page-size", "16", "--eq-entries", "64",
                            "--max-batch", "8", NULL };
    tdaemon_start(&d, bin, model, extra);
    int up[2] = { -1, -1 }, go[2];
    pid_t kid = fork_child(65534, gid, hog_pages, d.sock, 0, up, go);
    close(up[1]);
    close(go[0]);
    CHECK(wait_byte(up[0], 30000), "the hog did not submit");
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "root", &c, err) == 0, "connect: %s", err);
    CHECK(wait_held(c, 65534, 30000), "the hog's client never showed held with pages");
    uint32_t p[64];
    prompt_of(p, 64, 5);
    uint64_t t0 = t_now_ms();
    CHECK(submit(c, 1, p, 64, 8) == 0, "root's submit");
    static struct tstream s[2];
    s[1].done_reason = -1;
    bool ok = tcollect(c, s, 1, 1, 20000);
    CHECK(ok && s[1].done_reason == L8_DONE_LENGTH && s[1].n == 8,
          "root's request beside a held hog: done %d, %u tokens, error %d", s[1].done_reason,
          s[1].n, s[1].error);
    printf("pages: root served in %llu ms beside a held uid that pinned the pool\n",
           (unsigned long long)(t_now_ms() - t0));
    CHECK(write(go[1], "g", 1) == 1, "go");
    int r = tuser_status(kid);
    CHECK(r == 0, "the hog's streams after it read again: %d (10+i: request i differs)", r);
    l8c_close(c);
    close(up[0]);
    close(go[1]);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

/* Root holds the pool from one client; its second client waits and is
 * told why; the holder leaves and the second is served. */
static void test_waiting(void)
{
    struct tdaemon d;
    const char *extra[] = { "--kv-pages", "24", "--page-size", "16", "--eq-entries", "64", NULL };
    tdaemon_start(&d, bin, model, extra);
    struct l8c_client *a, *b;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "holder", &a, err) == 0, "connect: %s", err);
    REQUIRE(l8c_connect(d.sock, "waiter", &b, err) == 0, "connect: %s", err);
    uint32_t p[HOG_REQS][HOG_PROMPT];
    for (uint32_t i = 0; i < HOG_REQS; i++) {
        prompt_of(p[i], HOG_PROMPT, 100 * i + 7);
        CHECK(submit(a, i + 1, p[i], HOG_PROMPT, HOG_NEW) == 0, "holder's submit");
    }
    CHECK(wait_held(b, 0, 30000), "the holder never showed held");
    uint32_t q[64];
    prompt_of(q, 64, 5);
    CHECK(submit(b, 1, q, 64, 8) == 0, "waiter's submit");
    struct l8_event ev[16];
    bool waiting = false, started = false;
    uint32_t need = 0, have = 0;
    uint64_t end = t_now_ms() + 5000;
    while (!waiting && !started && t_now_ms() < end) {
        int k = l8c_wait_events(b, ev, 16, 500);
        for (int i = 0; i < k; i++) {
            if (ev[i].kind == L8_EV_WAITING && ev[i].reason == L8_WAIT_PAGES) {
                waiting = true;
                need = ev[i].token;
                have = ev[i].index;
            }
            started |= ev[i].kind == L8_EV_STARTED;
        }
    }
    char msg[L8C_ERRLEN];
    struct l8_event w = { .kind = L8_EV_WAITING, .reason = L8_WAIT_PAGES, .token = need,
                          .index = have };
    CHECK(waiting && !started && need > have, "WAITING (pages) before a start: %d %d, %u %u",
          waiting, started, need, have);
    printf("waiting: told \"%s\"\n", l8c_wait_text(&w, msg));
    l8c_close(a);
    static struct tstream s[2];
    s[1].done_reason = -1;
    CHECK(tcollect(b, s, 1, 1, 20000) && s[1].n == 8, "the waiter after the holder left: %u",
          s[1].n);
    l8c_close(b);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

/* 65534 submits from three connections as much as it can: how many got
 * in, and whether every refusal named the uid's share. */
static int flood_requests(const char *sock, int arg, int up, int go)
{
    (void)arg;
    struct l8c_client *c[3];
    char err[L8C_ERRLEN];
    uint32_t p[8];
    prompt_of(p, 8, 3);
    int in = 0, refused = 0, other = 0;
    for (int k = 0; k < 3; k++) {
        if (l8c_connect(sock, "flood", &c[k], err) < 0)
            return 200;
        for (uint64_t id = 1; id <= 8; id++)
            if (submit(c[k], id, p, 8, 2000) < 0)
                return 201;
    }
    /* each refusal is an ERROR event; the rest are live */
    uint64_t end = t_now_ms() + 10000;
    while (in + refused + other < 24 && t_now_ms() < end) {
        for (int k = 0; k < 3; k++) {
            struct l8_event ev[64];
            int n = l8c_poll_events(c[k], ev, 64);
            for (int i = 0; i < n; i++) {
                if (ev[i].kind == L8_EV_STARTED || ev[i].kind == L8_EV_WAITING)
                    in++;
                else if (ev[i].kind == L8_EV_ERROR && ev[i].code == L8_ERR_TOO_MANY_REQUESTS &&
                         ev[i].reason == L8_EF_UID_REQUESTS)
                    refused++;
                else if (ev[i].kind == L8_EV_ERROR)
                    other++;
            }
        }
        usleep(10000);
    }
    if (write(up, &refused, sizeof refused) != sizeof refused || !wait_byte(go, 60000))
        return 202;
    return other ? 203 : 0;
}

static void test_requests(gid_t gid, const char *gname)
{
    struct tdaemon d;
    const char *extra[] = { "--allowed-group", gname, "--socket-mode", "0666",
                            "--max-requests", "16", "--max-requests-per-client", "8",
                            "--max-batch", "4", NULL };
    tdaemon_start(&d, bin, model, extra);
    int up[2] = { -1, -1 }, go[2];
    pid_t kid = fork_child(65534, gid, flood_requests, d.sock, 0, up, go);
    close(up[1]);
    close(go[0]);
    int refused = -1;
    struct pollfd pf = { up[0], POLLIN, 0 };
    CHECK(poll(&pf, 1, 30000) == 1 && read(up[0], &refused, sizeof refused) == sizeof refused,
          "the flood did not report");
    /* 24 asked, 16 places: half of them the uid's share */
    CHECK(refused == 16, "refused with the uid's share: %d of 24, expected 16", refused);
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "root", &c, err) == 0, "connect: %s", err);
    uint32_t p[8];
    prompt_of(p, 8, 9);
    CHECK(submit(c, 1, p, 8, 4) == 0, "root's submit");
    static struct tstream s[2];
    s[1].done_reason = -1;
    CHECK(tcollect(c, s, 1, 1, 30000) && s[1].n == 4 && !s[1].error,
          "root's request beside the flood: %u tokens, error %d", s[1].n, s[1].error);
    CHECK(write(go[1], "g", 1) == 1, "go");
    CHECK(tuser_status(kid) == 0, "the flood saw another refusal");
    l8c_close(c);
    close(up[0]);
    close(go[1]);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

/* As uid, open up to n connections (Hello'd, then idle): how many got in,
 * on `up`; they stay until `go`. */
static int flood_clients(const char *sock, int n, int up, int go)
{
    struct l8c_client *c[16];
    char err[L8C_ERRLEN];
    int in = 0, users = 0;
    for (int k = 0; k < n && k < 16; k++) {
        int rc = l8c_connect(sock, "idle", &c[in], err);
        if (rc == 0)
            in++;
        else if (rc == -EUSERS)
            users++;
    }
    int msg = in * 100 + users;
    if (write(up, &msg, sizeof msg) != sizeof msg || !wait_byte(go, 60000))
        return 2;
    return 0;
}

static void test_clients(gid_t gid, const char *gname)
{
    struct tdaemon d;
    const char *extra[] = { "--allowed-group", gname, "--socket-mode", "0666",
                            "--max-clients", "8", "--admin-clients", "0",
                            "--max-clients-per-uid", "3", NULL };
    tdaemon_start(&d, bin, model, extra);
    int up[2] = { -1, -1 }, go[2];
    pid_t hog = fork_child(65534, gid, flood_clients, d.sock, 8, up, go);
    int msg = -1;
    struct pollfd pf = { up[0], POLLIN, 0 };
    CHECK(poll(&pf, 1, 30000) == 1 && read(up[0], &msg, sizeof msg) == sizeof msg,
          "the connection flood did not report");
    CHECK(msg == 3 * 100 + 5, "uid 65534 with 8 tries: %d in, %d refused TOO_MANY_CLIENTS; "
          "expected 3 and 5", msg / 100, msg % 100);
    pid_t other = fork_child(65533, gid, flood_clients, d.sock, 1, up, go);
    CHECK(poll(&pf, 1, 30000) == 1 && read(up[0], &msg, sizeof msg) == sizeof msg &&
          msg == 100, "uid 65533 beside the flood: %d", msg);
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    CHECK(l8c_connect(d.sock, "root", &c, err) == 0, "root beside the flood: %s", err);
    l8c_close(c);
    close(up[1]);
    close(go[0]);
    CHECK(write(go[1], "gg", 2) == 2, "go");
    CHECK(tuser_status(hog) == 0 && tuser_status(other) == 0, "the flooders");
    close(up[0]);
    close(go[1]);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

/* The daemon's user + system CPU time, in seconds. */
static double cpu_s(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof path, "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return -1;
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = 0;
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    /* after the comm: state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (!p || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (double)(ut + st) / (double)sysconf(_SC_CLK_TCK);
}

#define FLOOD_MS 2000

static void test_doorbells(void)
{
    struct tdaemon d;
    tdaemon_start(&d, bin, model, NULL);
    /* An honest busy client: short requests back to back. */
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "busy", &c, err) == 0, "connect: %s", err);
    uint32_t p[8];
    prompt_of(p, 8, 1);
    double c0 = cpu_s(d.pid);
    uint64_t end = t_now_ms() + FLOOD_MS, id = 0, served = 0;
    while (t_now_ms() < end) {
        CHECK(submit(c, ++id, p, 8, 1) == 0, "busy submit");
        struct l8_event ev[16];
        bool done = false;
        while (!done) {
            int k = l8c_wait_events(c, ev, 16, 5000);
            if (k <= 0)
                break;
            for (int i = 0; i < k; i++)
                done |= ev[i].request_id == id && ev[i].kind == L8_EV_DONE;
        }
        served += done;
    }
    const double busy = cpu_s(d.pid) - c0;
    l8c_close(c);
    /* A flooding client: its submission doorbell written in a loop, its
     * ring empty. */
    struct raw r;
    raw_connect(&r, d.sock);
    c0 = cpu_s(d.pid);
    uint64_t writes = 0, one = 1;
    end = t_now_ms() + FLOOD_MS;
    while (t_now_ms() < end)
        for (int i = 0; i < 1000; i++)
            writes += write(r.sq_efd, &one, sizeof one) == sizeof one;
    const double flood = cpu_s(d.pid) - c0;
    /* and it is still served */
    uint32_t *prompt = (uint32_t *)r.arena;
    prompt_of(prompt, 8, 2);
    Llama8__GenerateRequest g = LLAMA8__GENERATE_REQUEST__INIT;
    g.request_id = 1;
    g.max_new_tokens = 2;
    g.ignore_eos = true;
    g.prompt_offset = 0;
    g.prompt_count = 8;
    size_t n = llama8__generate_request__pack(&g, r.arena + 4096);
    raw_submit(&r, L8_SQE_GENERATE, 4096, (uint32_t)n);
    struct l8_event ev = { 0 };
    while (raw_event(&r, &ev, 10000) && ev.kind != L8_EV_DONE && ev.kind != L8_EV_ERROR)
        ;
    CHECK(ev.kind == L8_EV_DONE && ev.index == 2, "the flooder's request after its flood: "
          "kind %d, %u tokens", ev.kind, ev.index);
    raw_close(&r);
    printf("doorbells: daemon CPU over %d ms: honest busy client %.3f s (%llu requests), "
           "doorbell flood %.3f s (%llu writes)\n", FLOOD_MS, busy, (unsigned long long)served,
           flood, (unsigned long long)writes);
    CHECK(flood <= busy / 4 + 0.2, "the flood cost the daemon %.3f s of CPU, an honest busy "
          "client %.3f s", flood, busy);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 3, "usage: test_ipc_shares llama8d model-dir");
    bin = argv[1];
    model = argv[2];
    signal(SIGPIPE, SIG_IGN);
    test_waiting();
    test_doorbells();
    if (geteuid() != 0) {
        fprintf(stderr, "two uids: not root, skipped\n");
        return t_failures ? 1 : 0;
    }
    char gname[64];
    const gid_t gid = tuser_group(gname);
    test_pages(gid, gname);
    test_requests(gid, gname);
    test_clients(gid, gname);
    if (t_failures) {
        fprintf(stderr, "test_ipc_shares: %d failures\n", t_failures);
        return 1;
    }
    printf("test_ipc_shares: ok\n");
    return 0;
}
