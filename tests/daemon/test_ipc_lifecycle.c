/* test_ipc_lifecycle: llama8d's life under a service manager.
 *  - sd_notify through a test NOTIFY_SOCKET: STATUS= while loading, READY=1,
 *    STOPPING=1 on SIGTERM;
 *  - SIGTERM drains: a running request finishes, a new one is refused with
 *    SHUTTING_DOWN, exit 0; past the grace period running requests are cut
 *    with SHUTTING_DOWN (that daemon spins, --spin-us: the signal and the
 *    drain deadline reach a loop that is not asleep in io_uring);
 *  - a client's own event loop learns that the daemon died (SIGKILL);
 *  - permissions: a uid outside the allowed group is refused, one with the
 *    group as a supplementary group is let in, may not reload, and may
 *    lower its requests' priority but not raise it above 0 (needs root,
 *    else skipped);
 *  - admin_clients: with max_clients taken, root still gets in and reloads
 *    (needs root);
 *  - the client list (l8c_clients): every client in connection order over
 *    several pages, each one's counts, a held one; uid 65534 sees its own
 *    clients only (needs root);
 *  - prefix_cache: user (the default) keeps each uid's cached pages to it,
 *    shared and off do what they say (needs root, else skipped);
 *  - Status as uid 65534 beside root's traffic: its own uid's requests,
 *    tokens and cache hits, no step figures; root sees everyone's (needs
 *    root, else skipped);
 *  - socket activation through systemd-socket-activate (skipped if absent);
 *  - connections made during the load (waiting in the socket before llama8d
 *    starts, as under socket activation): Loading messages, then the
 *    Welcome; a failed load tells them why; a second daemon on a live
 *    socket is refused before it loads;
 *  - SIGHUP reloads the configuration: RELOADING=1 then READY=1, the live
 *    keys applied (flags still win; max_clients up, then down under the
 *    clients connected), the others listed in Status as
 *    waiting for a restart, a bad or missing file (or a FIFO) refused with the running
 *    configuration kept, a request streaming through it all; no reload
 *    while draining;
 *  - Status's tokens/s right after a short reply.
 * argv: llama8d model-dir */
#include "ipc_raw.h"

#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sys/stat.h>

static const char *bin, *model;

/* Submits request id: n prompt tokens, exactly max_new tokens generated
 * (the model's eos ids do not stop it). 0 or l8c_submit_id's error. */
static int submit_fixed(struct l8c_client *c, uint64_t id, const uint32_t *prompt, uint32_t n,
                        uint32_t max_new)
{
    struct l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = max_new;
    p.ignore_eos = true;
    return l8c_submit_id(c, id, prompt, n, &p);
}

static void test_notify_and_drain(void)
{
    struct tdaemon d;
    const char *extra[] = { "--drain-timeout-ms", "20000", NULL };
    tdaemon_start(&d, bin, model, extra);
    CHECK(strstr(d.notes, "STATUS=loading"), "no loading STATUS: %s", d.notes);
    CHECK(strstr(d.notes, "STATUS=warming up"), "no warm-up STATUS: %s", d.notes);
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "drain", &c, err) == 0, "%s", err);
    uint32_t prompt[16];
    for (int i = 0; i < 16; i++)
        prompt[i] = (uint32_t)(i * 3 + 1);
    REQUIRE(submit_fixed(c, 1, prompt, 16, 60) == 0, "submit");
    struct l8_event ev;
    while (l8c_wait_events(c, &ev, 1, 10000) == 1 && ev.kind != L8_EV_TOKEN)
        ;
    kill(d.pid, SIGTERM);
    CHECK(tdaemon_notify_wait(&d, "STOPPING=1", 10000), "no STOPPING=1: %s", d.notes);
    REQUIRE(submit_fixed(c, 2, prompt, 16, 60) == 0, "submit during drain");
    static struct tstream st[3];
    st[1].n = 1;   /* the token read above */
    CHECK(tcollect(c, st, 2, 2, 60000), "drain did not finish the streams");
    CHECK(st[1].done_reason == L8_DONE_LENGTH && st[1].n == 60, "running request: reason %d n %u",
          st[1].done_reason, st[1].n);
    CHECK(st[2].error == L8_ERR_SHUTTING_DOWN, "new request during drain: error %d", st[2].error);
    l8c_close(c);
    int rc = tdaemon_stop(&d);
    CHECK(rc == 0, "exit status %d after drain", rc);
}

/* A client whose request 1 runs until the daemon stops it. */
static struct l8c_client *connect_endless(const char *sock, const char *name)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(sock, name, &c, err) == 0, "%s", err);
    uint32_t prompt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    REQUIRE(submit_fixed(c, 1, prompt, 8, 100000) == 0, "submit");
    return c;
}

static void test_drain_timeout(void)
{
    struct tdaemon d;
    const char *extra[] = { "--drain-timeout-ms", "300", "--spin-us", "20000", NULL };
    tdaemon_start(&d, bin, model, extra);
    struct l8c_client *c = connect_endless(d.sock, "cut");
    struct l8_event ev;
    while (l8c_wait_events(c, &ev, 1, 10000) == 1 && ev.kind != L8_EV_TOKEN)
        ;
    uint64_t t0 = t_now_ms();
    kill(d.pid, SIGTERM);
    static struct tstream st[2];
    CHECK(tcollect(c, st, 1, 1, 30000), "no end of the cut stream");
    CHECK(st[1].error == L8_ERR_SHUTTING_DOWN, "cut request: error %d reason %d", st[1].error,
          st[1].done_reason);
    CHECK(t_now_ms() - t0 < 10000, "cut took %llu ms", (unsigned long long)(t_now_ms() - t0));
    l8c_close(c);
    int rc = tdaemon_stop(&d);
    CHECK(rc == 0, "exit status %d after a cut drain", rc);
}

/* A client with its own event loop (l8c_event_fd, l8c_ctl_fd, as
 * llama8ctl pipe and bench have): when the daemon dies, l8c_poll_events
 * hands over every event published before, then fails, instead of
 * returning 0 forever while the hung-up control socket wakes the loop. */
static void test_own_loop_hangup(void)
{
    struct tdaemon d;
    tdaemon_start(&d, bin, model, NULL);
    struct l8c_client *c = connect_endless(d.sock, "own loop");
    struct l8_event ev[64];
    int rc = 0, tokens = 0, wakeups = 0, after_empty = 0;
    bool killed = false;
    uint64_t end = t_now_ms() + 20000;
    while (t_now_ms() < end) {
        rc = l8c_poll_events(c, ev, 64);
        if (rc < 0)
            break;
        for (int i = 0; i < rc; i++)
            tokens += ev[i].kind == L8_EV_TOKEN;
        if (!killed && tokens >= 3) {
            kill(d.pid, SIGKILL);
            killed = true;
        }
        if (rc > 0 || l8c_prepare_wait(c))
            continue;
        struct pollfd pf[2] = { { l8c_event_fd(c), POLLIN, 0 }, { l8c_ctl_fd(c), POLLIN, 0 } };
        poll(pf, 2, 1000);
        wakeups++;
        after_empty += killed;
    }
    CHECK(killed && rc == -ECONNRESET, "after SIGKILL: l8c_poll_events returned %d (%d tokens, "
          "%d wake-ups)", rc, tokens, wakeups);
    CHECK(after_empty <= 3, "%d empty wake-ups after the daemon died", after_empty);
    l8c_close(c);
    tdaemon_stop(&d);
}

/* Waits up to 10 s for a RELOADING=1 past the first reloads_before, with
 * its MONOTONIC_USEC=, and a READY=1 after it (systemd's reload is over). */
static bool reload_done(struct tdaemon *d, int reloads_before)
{
    uint64_t end = t_now_ms() + 10000;
    for (;;) {
        const char *r = d->notes;
        int n = 0;
        for (const char *p; (p = strstr(r, "RELOADING=1")); r = p + 1)
            n++;
        if (n > reloads_before && strstr(r, "READY=1"))
            return strstr(r, "MONOTONIC_USEC=") != NULL;
        if (t_now_ms() > end)
            return false;
        tdaemon_notify_wait(d, NULL, 20);
    }
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    REQUIRE(f && fputs(text, f) >= 0 && fclose(f) == 0, "writing %s", path);
}

static struct l8c_status status_of(const char *sock)
{
    struct l8c_client *c;
    struct l8c_status st = { 0 };
    char err[L8C_ERRLEN];
    /* A client that just closed may hold its slot for a moment. */
    int rc;
    for (int i = 0; (rc = l8c_connect(sock, "reload status", &c, err)) == -EUSERS && i < 100; i++)
        usleep(20000);
    REQUIRE(rc == 0, "%s", err);
    REQUIRE(l8c_status(c, &st, 10000) == 0, "status");
    l8c_close(c);
    return st;
}

/* Tokens of the endless request 1 on c, up to n within 20 s. */
static int read_tokens(struct l8c_client *c, int n)
{
    struct l8_event ev;
    int got = 0;
    uint64_t end = t_now_ms() + 20000;
    while (got < n && t_now_ms() < end && l8c_wait_events(c, &ev, 1, 1000) >= 0)
        got += ev.kind == L8_EV_TOKEN;
    return got;
}

static void test_reload(void)
{
    char conf[128], dir[] = "/tmp/l8reload-XXXXXX";
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(conf, sizeof conf, "%s/llama8d.conf", dir);
    write_file(conf, "log_level = notice\nkv_pages = 8192\nhello_timeout_ms = 20000\n"
                     "max_clients = 2\nadmin_clients = 0\n");
    struct tdaemon d;
    /* --spin-us on the command line: a reload keeps it over the file's. */
    const char *extra[] = { "--config", conf, "--spin-us", "0", "--drain-timeout-ms", "300",
                            NULL };
    tdaemon_start(&d, bin, model, extra);
    struct l8c_status st = status_of(d.sock);
    CHECK(!strcmp(st.log_level, "notice") && st.config_reloads == 0 && !st.config_error[0] &&
              !st.config_restart[0] && st.pages_total == 8192,
          "at start: log level %s, %llu reloads, error '%s', restart '%s', %u pages",
          st.log_level, (unsigned long long)st.config_reloads, st.config_error,
          st.config_restart, st.pages_total);
    struct l8c_client *c = connect_endless(d.sock, "through reloads");
    CHECK(read_tokens(c, 2) == 2, "no tokens before the reload");

    write_file(conf, "log_level = debug\nkv_pages = 16384\nhello_timeout_ms = 200\n"
                     "spin_us = 500\nmax_clients = 4\nadmin_clients = 0\n");
    kill(d.pid, SIGHUP);
    CHECK(reload_done(&d, 0), "no RELOADING=1 (with MONOTONIC_USEC) then READY=1: %s", d.notes);
    st = status_of(d.sock);
    CHECK(!strcmp(st.log_level, "debug") && st.config_reloads == 1 && !st.config_error[0] &&
              !strcmp(st.config_restart, "kv_pages") && st.pages_total == 8192 && st.spin_us == 0 &&
              st.max_clients == 4 && st.admin_clients == 0,
          "after a reload: log level %s, %llu reloads, error '%s', restart '%s', %u pages, "
          "spin %u us", st.log_level, (unsigned long long)st.config_reloads, st.config_error,
          st.config_restart, st.pages_total, st.spin_us);
    /* max_clients 2 -> 4: two more clients beside the streaming one. */
    struct l8c_client *more[2] = { NULL, NULL };
    char err[L8C_ERRLEN];
    for (int i = 0; i < 2; i++)
        CHECK(l8c_connect(d.sock, "more", &more[i], err) == 0, "client %d of 3 after max_clients "
              "4: %s", i + 2, err);
    /* hello_timeout_ms applies to the next silent connection: closed in
     * ~0.2 s, not 20. */
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    snprintf(sa.sun_path, sizeof sa.sun_path, "%s", d.sock);
    REQUIRE(fd >= 0 && connect(fd, (struct sockaddr *)&sa, sizeof sa) == 0, "raw connect");
    uint64_t t0 = t_now_ms();
    char buf[4096];
    ssize_t k;
    while ((k = recv(fd, buf, sizeof buf, 0)) > 0 && t_now_ms() - t0 < 10000)
        ;
    CHECK(k == 0 && t_now_ms() - t0 < 5000, "silent connection closed after %llu ms (recv %zd)",
          (unsigned long long)(t_now_ms() - t0), k);
    close(fd);

    /* A file the parser refuses, then none at all: the running
     * configuration stays, Status says why. The first is asked for on the
     * socket (llama8ctl reload), and its answer, the Status after it, says
     * so. (The four clients max_clients allows: the status comes from it.) */
    write_file(conf, "log_level = info\nkv_pages = banana\n");
    struct l8c_client *admin;
    REQUIRE(l8c_connect(d.sock, "admin", &admin, err) == 0, "%s", err);
    int rc = l8c_reload(admin, &st, 10000);
    CHECK(rc == -EINVAL && strstr(st.config_error, "'banana'") &&
              strstr(l8c_last_error(admin, NULL), "refused its configuration"),
          "l8c_reload of a bad file: %d, '%s'", rc, l8c_last_error(admin, NULL));
    CHECK(reload_done(&d, 1), "refused reload: no READY=1 after RELOADING=1: %s", d.notes);
    CHECK(!strcmp(st.log_level, "debug") && st.config_reloads == 1 &&
              strstr(st.config_error, "llama8d.conf:2: kv_pages: bad value 'banana'") &&
              !strcmp(st.config_restart, "kv_pages"),
          "after a refused reload: log level %s, %llu reloads, error '%s', restart '%s'",
          st.log_level, (unsigned long long)st.config_reloads, st.config_error,
          st.config_restart);
    unlink(conf);
    kill(d.pid, SIGHUP);
    CHECK(reload_done(&d, 2), "reload without a file: no READY=1: %s", d.notes);
    REQUIRE(l8c_status(admin, &st, 10000) == 0, "status");
    CHECK(strstr(st.config_error, "No such file") && st.config_reloads == 1,
          "without the file: error '%s', %llu reloads", st.config_error,
          (unsigned long long)st.config_reloads);
    /* A FIFO in its place: refused at once, named (opening it would wait for a writer,
     * and the loop with it). */
    REQUIRE(mkfifo(conf, 0600) == 0, "mkfifo %s", conf);
    kill(d.pid, SIGHUP);
    CHECK(reload_done(&d, 3), "reload of a FIFO: no READY=1: %s", d.notes);
    REQUIRE(l8c_status(admin, &st, 10000) == 0, "status");
    CHECK(strstr(st.config_error, "llama8d.conf: is a FIFO, not a regular file") &&
          st.config_reloads == 1, "a FIFO: error '%s', %llu reloads", st.config_error,
          (unsigned long long)st.config_reloads);
    unlink(conf);

    /* Back to the start's file: nothing waits for a restart; max_clients 2
     * keeps the 3 clients connected and refuses a fourth. */
    write_file(conf, "log_level = notice\nkv_pages = 8192\nhello_timeout_ms = 20000\n"
                     "max_clients = 2\nadmin_clients = 0\n");
    rc = l8c_reload(admin, &st, 10000);
    CHECK(rc == 0 && !st.config_error[0] && !st.config_restart[0] && st.config_reloads == 2,
          "l8c_reload back to the start: %d, error '%s', restart '%s', %llu reloads", rc,
          st.config_error, st.config_restart, (unsigned long long)st.config_reloads);
    l8c_close(admin);
    CHECK(reload_done(&d, 4), "fifth reload: no READY=1: %s", d.notes);
    struct l8c_client *fourth;
    CHECK(l8c_connect(d.sock, "fourth", &fourth, err) == -EUSERS,
          "a client past max_clients 2 let in: %s", err);
    for (int i = 0; i < 2; i++)
        if (more[i])
            l8c_close(more[i]);
    st = status_of(d.sock);
    CHECK(!strcmp(st.log_level, "notice") && st.config_reloads == 2 && !st.config_error[0] &&
              !st.config_restart[0] && st.clients == 2,
          "back to the start: log level %s, %llu reloads, error '%s', restart '%s', %u clients",
          st.log_level, (unsigned long long)st.config_reloads, st.config_error,
          st.config_restart, st.clients);
    CHECK(read_tokens(c, 5) == 5, "the request stopped streaming across the reloads");

    /* Draining: SIGHUP does not reload (no READY=1 while stopping). */
    kill(d.pid, SIGTERM);
    CHECK(tdaemon_notify_wait(&d, "STOPPING=1", 10000), "no STOPPING=1: %s", d.notes);
    kill(d.pid, SIGHUP);
    l8c_close(c);
    CHECK(tdaemon_stop(&d) == 0, "exit after draining");
    const char *stop = strstr(d.notes, "STOPPING=1");
    CHECK(stop && !strstr(stop, "RELOADING=1") && !strstr(stop, "READY=1"),
          "a reload while draining: %s", d.notes);
    unlink(conf);
    rmdir(dir);
}

/* Status's tokens/s counts a reply that took under a second, right after
 * it (it used to read 0 until two one-second samples framed it). */
static void test_rate(void)
{
    struct tdaemon d;
    tdaemon_start(&d, bin, model, NULL);
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "rate", &c, err) == 0, "%s", err);
    uint32_t prompt[4] = { 1, 2, 3, 4 };
    static struct tstream st[2];
    REQUIRE(submit_fixed(c, 1, prompt, 4, 32) == 0 && tcollect(c, st, 1, 1, 30000), "reply");
    usleep(200 * 1000);
    struct l8c_status s;
    REQUIRE(l8c_status(c, &s, 10000) == 0, "status");
    CHECK(s.tokens_generated == 32 && s.tokens_per_s > 0 && s.tokens_per_s <= 32 / 0.1,
          "%llu tokens, %.1f/s, %.2f s after the start", (unsigned long long)s.tokens_generated,
          s.tokens_per_s, s.uptime_s);
    l8c_close(c);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

/* The entry of client id in v[0, n), or NULL. */
static const struct l8c_client_info *find_client(const struct l8c_client_info *v, size_t n,
                                                 uint64_t id)
{
    for (size_t i = 0; i < n; i++)
        if (v[i].id == id)
            return &v[i];
    return NULL;
}

/* l8c_clients: 60 clients with 64-byte names (more than one datagram's
 * worth, so the list comes in pages), in connection order; the counts of
 * a finished request, an endless one whose events are not read (held once
 * the 64-entry event ring is full), a short array (the count, the first
 * ones). */
static void test_clients(void)
{
    struct tdaemon d;
    const char *extra[] = { "--eq-entries", "64", NULL };
    tdaemon_start(&d, bin, model, extra);
    enum { N = 60 };
    struct l8c_client *cs[N];
    char err[L8C_ERRLEN];
    for (int i = 0; i < N; i++) {
        char name[65];
        snprintf(name, sizeof name, "client %02d %-54s", i, "of the list");
        REQUIRE(l8c_connect(d.sock, name, &cs[i], err) == 0, "client %d: %s", i, err);
    }
    const uint32_t prompt[8] = { 1, 2, 3, 4, 5, 6, 7, 8 };
    static struct tstream st[2];
    REQUIRE(submit_fixed(cs[3], 1, prompt, 8, 5) == 0 && tcollect(cs[3], st, 1, 1, 30000) &&
                st[1].n == 5, "client 3's request");
    REQUIRE(submit_fixed(cs[7], 1, prompt, 6, 100000) == 0, "client 7's request");
    static struct l8c_client_info v[N + 8];
    size_t n = 0;
    const struct l8c_client_info *e7 = NULL;
    for (int t = 0; t < 200 && !(e7 && e7->held); t++) {   /* until its ring fills */
        REQUIRE(l8c_clients(cs[0], v, N + 8, &n, 10000) == 0, "l8c_clients: %s",
                l8c_last_error(cs[0], NULL));
        e7 = find_client(v, n, l8c_info(cs[7])->client_id);
        usleep(10000);
    }
    CHECK(n == N, "%zu clients listed, %d connected", n, N);
    bool order = true, names = true;
    for (size_t i = 0; i < n && i < N; i++) {
        char name[65];
        snprintf(name, sizeof name, "client %02zu %-54s", i, "of the list");
        order &= v[i].id == l8c_info(cs[i])->client_id && (i == 0 || v[i].id > v[i - 1].id);
        names &= !strcmp(v[i].name, name) && v[i].pid == getpid() && v[i].uid == getuid() &&
                 v[i].connected_s > 0;
    }
    CHECK(order && names, "the list is not the clients in connection order with their names");
    const struct l8c_client_info *e3 = find_client(v, n, l8c_info(cs[3])->client_id);
    CHECK(e3 && e3->requests == 0 && e3->running == 0 && e3->kv_pages == 0 &&
              e3->requests_done == 1 && e3->prompt_tokens == 8 && e3->tokens_generated == 5 &&
              !e3->held,
          "client 3: %u in flight, %llu done, %llu prompt, %llu generated, held %d",
          e3 ? e3->requests : 0, e3 ? (unsigned long long)e3->requests_done : 0,
          e3 ? (unsigned long long)e3->prompt_tokens : 0,
          e3 ? (unsigned long long)e3->tokens_generated : 0, e3 ? e3->held : -1);
    /* Its 6 + 64 or more positions fill 5 or more 16-position pages. */
    CHECK(e7 && e7->requests == 1 && e7->running == 1 && e7->kv_pages >= 5 &&
              e7->requests_done == 0 && e7->prompt_tokens == 6 && e7->tokens_generated >= 64 &&
              e7->held,
          "client 7 (not reading): %u in flight, %u running, %u pages, %llu generated, held %d",
          e7 ? e7->requests : 0, e7 ? e7->running : 0, e7 ? e7->kv_pages : 0,
          e7 ? (unsigned long long)e7->tokens_generated : 0, e7 ? e7->held : -1);
    /* Room for 5: the first 5, and how many there are. */
    struct l8c_client_info few[5];
    CHECK(l8c_clients(cs[1], few, 5, &n, 10000) == 0 && n == N &&
              few[4].id == l8c_info(cs[4])->client_id, "5 of %zu", n);
    for (int i = 0; i < N; i++)
        l8c_close(cs[i]);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

/* l8c_connect as uid 65534 with the given supplementary groups, then with
 * reload, l8c_reload: 0 connected (and reloaded), 1 refused with EPERM, 3
 * with EUSERS (too many clients), 2 another error, -1 the child failed. */
static int connect_as_nobody(const char *sock, const gid_t *groups, int n, bool reload)
{
    pid_t kid = tuser_fork(65534, groups, n);
    if (kid == 0) {
        struct l8c_client *c;
        struct l8c_status st;
        char err[L8C_ERRLEN];
        int rc = l8c_connect(sock, "nobody", &c, err);
        if (rc == 0) {
            if (reload)
                rc = l8c_reload(c, &st, 10000);
            l8c_close(c);
        }
        _exit(rc == 0 ? 0 : rc == -EPERM ? 1 : rc == -EUSERS ? 3 : 2);
    }
    return tuser_status(kid);
}

/* A child as uid 65534 in group gid that connects and stays connected
 * until *release is closed: its pid, and in *connected whether it got in. */
static pid_t hold_as_nobody(const char *sock, gid_t gid, int *release, bool *connected)
{
    int ready[2], hold[2];
    REQUIRE(pipe(ready) == 0 && pipe(hold) == 0, "pipe");
    pid_t kid = tuser_fork(65534, &gid, 1);
    if (kid == 0) {
        close(ready[0]);
        close(hold[1]);
        struct l8c_client *c;
        char err[L8C_ERRLEN];
        char ok = l8c_connect(sock, "holder", &c, err) == 0;
        if (write(ready[1], &ok, 1) != 1 || read(hold[0], &ok, 1) < 0)
            _exit(2);
        _exit(0);   /* the connection closes with the process */
    }
    close(ready[1]);
    close(hold[0]);
    char ok = 0;
    *connected = kid > 0 && read(ready[0], &ok, 1) == 1 && ok;
    close(ready[0]);
    *release = hold[1];
    return kid;
}

/* admin_clients: with max_clients taken by other users, root (and the
 * daemon's user) still get in, up to admin_clients more, and may reload. */
static void test_admin_clients(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "admin_clients: not root, skipped\n");
        return;
    }
    char gname[64];
    const gid_t gid = tuser_group(gname);
    struct tdaemon d;
    const char *extra[] = { "--allowed-group", gname, "--socket-mode", "0666",
                            "--max-clients", "1", "--admin-clients", "1", NULL };
    tdaemon_start(&d, bin, model, extra);
    int release;
    bool in;
    pid_t holder = hold_as_nobody(d.sock, gid, &release, &in);
    CHECK(in, "the first client (uid 65534) refused under max_clients 1");
    int r = connect_as_nobody(d.sock, &gid, 1, false);
    CHECK(r == 3, "a second uid 65534 client past max_clients 1: expected TOO_MANY_CLIENTS, got %d",
          r);
    struct l8c_client *admin, *more;
    struct l8c_status st;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "admin", &admin, err) == 0,
            "root refused with max_clients taken by others and admin_clients 1: %s", err);
    CHECK(l8c_reload(admin, &st, 10000) == 0 && st.clients == 2 && st.config_reloads == 1,
          "root's reload with the clients full: %u clients, %llu reloads (%s)", st.clients,
          (unsigned long long)st.config_reloads, l8c_last_error(admin, NULL));
    CHECK(l8c_connect(d.sock, "admin 2", &more, err) == -EUSERS,
          "root let in past max_clients + admin_clients: %s", err);
    l8c_close(admin);
    close(release);
    CHECK(tuser_status(holder) == 0, "the holding client's process");
    /* Its slot frees as the daemon sees the hang-up. */
    for (int i = 0; i < 100 && (r = connect_as_nobody(d.sock, &gid, 1, false)) == 3; i++)
        usleep(20000);
    CHECK(r == 0, "uid 65534 refused after the others left (%d)", r);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

static void test_permissions(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "permissions: not root, skipped\n");
        return;
    }
    char gname[64];
    const gid_t gid = tuser_group(gname);
    struct tdaemon d;
    const char *extra[] = { "--allowed-group", gname, "--socket-mode", "0666", NULL };
    tdaemon_start(&d, bin, model, extra);
    int r = connect_as_nobody(d.sock, NULL, 0, false);
    CHECK(r == 1, "uid 65534 outside group %s: expected PERMISSION_DENIED, got %d", gname, r);
    r = connect_as_nobody(d.sock, &gid, 1, false);
    CHECK(r == 0, "uid 65534 with supplementary group %s refused (%d)", gname, r);
    /* A client may not have the daemon reload its configuration. */
    r = connect_as_nobody(d.sock, &gid, 1, true);
    CHECK(r == 1, "uid 65534 asked for a reload: expected PERMISSION_DENIED, got %d", r);
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    CHECK(l8c_connect(d.sock, "root", &c, err) == 0, "root refused: %s", err);
    /* Priority: uid 65534 may step back (-2), not ahead (1): announced in
     * the Welcome, checked by the library, refused by the daemon. */
    pid_t pk = tuser_fork(65534, &gid, 1);
    if (pk == 0) {
        struct l8c_client *k;
        const uint32_t prompt[4] = { 1, 2, 3, 4 };
        struct l8c_params p;
        l8c_params_init(&p);
        p.max_new_tokens = 2;
        p.priority = 1;
        char why[L8C_ERRLEN], text[L8C_ERRLEN];
        struct l8_event ev;
        if (l8c_connect(d.sock, "ahead", &k, err) < 0 || l8c_info(k)->max_priority != 0)
            _exit(2);
        if (l8c_check_request(k, prompt, 4, &p, why) != L8_ERR_BAD_PARAMS ||
            !strstr(why, "priority 1: above 0 is for root"))
            _exit(3);
        if (l8c_submit_id(k, 1, prompt, 4, &p) < 0 || l8c_wait_events(k, &ev, 1, 10000) != 1 ||
            ev.kind != L8_EV_ERROR || ev.code != L8_ERR_BAD_PARAMS ||
            ev.reason != L8_EF_PRIORITY || ev.token != 1 ||
            !strstr(l8c_error_text(&ev, text), "priority 1: above 0 is for root"))
            _exit(4);
        p.priority = -2;
        if (l8c_submit_id(k, 2, prompt, 4, &p) < 0 || l8c_wait_events(k, &ev, 1, 10000) != 1 ||
            ev.kind != L8_EV_STARTED)
            _exit(5);
        _exit(0);
    }
    r = tuser_status(pk);
    CHECK(r == 0, "uid 65534's priorities: step %d failed", r);
    CHECK(l8c_info(c)->max_priority == INT32_MAX, "root's max_priority %d",
          l8c_info(c)->max_priority);

    /* The client list: uid 65534 sees its own clients (a holder and
     * itself), not root's; root sees them all. */
    int release;
    bool in;
    pid_t holder = hold_as_nobody(d.sock, gid, &release, &in);
    CHECK(in, "the holder (uid 65534) refused");
    pid_t kid = tuser_fork(65534, &gid, 1);
    if (kid == 0) {
        struct l8c_client *k;
        struct l8c_client_info v[4];
        size_t n = 0;
        if (l8c_connect(d.sock, "nobody's", &k, err) < 0 || l8c_clients(k, v, 4, &n, 10000) < 0)
            _exit(2);
        _exit(n == 2 && v[0].uid == 65534 && !strcmp(v[0].name, "holder") && v[1].uid == 65534 &&
                      !strcmp(v[1].name, "nobody's") ? 0 : 1);
    }
    r = tuser_status(kid);
    CHECK(r == 0, "uid 65534's client list: expected its holder and itself (%d)", r);
    struct l8c_client_info v[4];
    size_t n = 0;
    CHECK(l8c_clients(c, v, 4, &n, 10000) == 0 && n >= 2 && n <= 3 && !strcmp(v[0].name, "root") &&
              v[0].uid == 0 && !strcmp(v[1].name, "holder") && v[1].uid == 65534,
          "root's client list: %zu, the first two '%s' '%s'", n, n > 0 ? v[0].name : "",
          n > 1 ? v[1].name : "");
    close(release);
    CHECK(tuser_status(holder) == 0, "the holder's process");
    l8c_close(c);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

/* Generate 4 tokens from a 40-token prompt; the prompt tokens STARTED
 * says came from the prefix cache, or -1. */
static int cached_prompt_tokens(const char *sock)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    if (l8c_connect(sock, "scope", &c, err) < 0)
        return -1;
    uint32_t prompt[40];
    for (uint32_t i = 0; i < 40; i++)
        prompt[i] = 100 + 3 * i;
    static struct tstream st[2];
    memset(st, 0, sizeof st);
    int rc = submit_fixed(c, 1, prompt, 40, 4) == 0 && tcollect(c, st, 1, 1, 30000) &&
                     st[1].started && st[1].n == 4
                 ? (int)st[1].started_cached : -1;
    l8c_close(c);
    return rc;
}

/* The same, as uid/gid 65534 with the supplementary group gid. */
static int cached_prompt_tokens_as_nobody(const char *sock, gid_t gid)
{
    pid_t kid = tuser_fork(65534, &gid, 1);
    if (kid == 0) {
        int n = cached_prompt_tokens(sock);
        _exit(n < 0 || n > 254 ? 255 : n);
    }
    return tuser_status(kid);
}

/* prefix_cache: per uid by default, so a client cannot tell from its
 * cached count (or its time to first token) what another user sent;
 * shared and off on request. Pages of 16 positions: a cached 40-token
 * prompt gives 32. */
static void test_prefix_cache_scope(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "prefix cache scope: not root, skipped\n");
        return;
    }
    char gname[64];
    const gid_t gid = tuser_group(gname);
    static const struct { const char *mode; int root2, nobody, nobody2; } want[] = {
        { "user", 32, 0, 32 }, { "shared", 32, 32, 32 }, { "off", 0, 0, 0 },
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        struct tdaemon d;
        const char *extra[] = { "--allowed-group", gname, "--socket-mode", "0666",
                                "--page-size", "16", "--prefix-cache", want[i].mode, NULL };
        tdaemon_start(&d, bin, model, extra);
        int root1 = cached_prompt_tokens(d.sock), root2 = cached_prompt_tokens(d.sock);
        int nobody = cached_prompt_tokens_as_nobody(d.sock, gid);
        int nobody2 = cached_prompt_tokens_as_nobody(d.sock, gid);
        CHECK(root1 == 0 && root2 == want[i].root2 && nobody == want[i].nobody &&
                  nobody2 == want[i].nobody2,
              "prefix_cache = %s: cached prompt tokens root %d then %d, uid 65534 %d then %d;"
              " want 0 %d %d %d", want[i].mode, root1, root2, nobody, nobody2, want[i].root2,
              want[i].nobody, want[i].nobody2);
        CHECK(tdaemon_stop(&d) == 0, "exit");
    }
}

/* As uid 65534 in group gid: with generate, one request as
 * cached_prompt_tokens makes; then its Status into *out. 0, or -1. */
static int status_as_nobody(const char *sock, gid_t gid, bool generate, struct l8c_status *out)
{
    int p[2];
    REQUIRE(pipe(p) == 0, "pipe");
    pid_t kid = tuser_fork(65534, &gid, 1);
    if (kid == 0) {
        close(p[0]);
        struct l8c_client *c;
        struct l8c_status st;
        char err[L8C_ERRLEN];
        if ((generate && cached_prompt_tokens(sock) < 0) ||
            l8c_connect(sock, "nobody's status", &c, err) < 0 || l8c_status(c, &st, 10000) < 0 ||
            write(p[1], &st, sizeof st) != (ssize_t)sizeof st)
            _exit(2);
        _exit(0);
    }
    close(p[1]);
    ssize_t n = read(p[0], out, sizeof *out);
    close(p[0]);
    return tuser_status(kid) == 0 && n == (ssize_t)sizeof *out ? 0 : -1;
}

/* Status tells a user other than root and the daemon's user their own
 * uid's requests, tokens and cache hits, and the pool's figures, not when
 * others send or how long their prompts are (own_uid); root sees it all. */
static void test_status_scope(void)
{
    if (geteuid() != 0) {
        fprintf(stderr, "status scope: not root, skipped\n");
        return;
    }
    char gname[64];
    const gid_t gid = tuser_group(gname);
    struct tdaemon d;
    const char *extra[] = { "--allowed-group", gname, "--socket-mode", "0666",
                            "--page-size", "16", NULL };
    tdaemon_start(&d, bin, model, extra);
    /* Root's traffic: two 40-token prompts, the second 32 from the cache. */
    CHECK(cached_prompt_tokens(d.sock) == 0 && cached_prompt_tokens(d.sock) == 32,
          "root's requests");
    struct l8c_status st;
    CHECK(status_as_nobody(d.sock, gid, false, &st) == 0, "uid 65534's status");
    CHECK(st.own_uid && st.requests_done == 0 && st.tokens_generated == 0 &&
              st.prompt_tokens == 0 && st.prompt_tokens_cached == 0,
          "uid 65534 beside root's 2 requests: own_uid %d, %llu done, %llu generated, "
          "%llu prompt (%llu cached); want its own: 0", st.own_uid,
          (unsigned long long)st.requests_done, (unsigned long long)st.tokens_generated,
          (unsigned long long)st.prompt_tokens, (unsigned long long)st.prompt_tokens_cached);
    CHECK(st.steps == 0 && st.decode_steps == 0 && st.decode_rows == 0 && st.fed_tokens == 0 &&
              st.step_time_s == 0 && st.preemptions == 0,
          "uid 65534 sees step figures: %llu steps, %llu fed", (unsigned long long)st.steps,
          (unsigned long long)st.fed_tokens);
    CHECK(st.pages_total > 0 && st.clients >= 1 && st.page_size == 16 && st.tokens_per_s >= 0,
          "uid 65534's pool figures: %u pages, %u clients", st.pages_total, st.clients);
    uint64_t errs = 0;
    for (int i = 0; i < 32; i++)
        errs += st.errors[i];
    CHECK(errs == 0, "uid 65534 sees %llu errors", (unsigned long long)errs);
    /* Its own requests: the first computes all 40, the second takes 32
     * from its uid's cache. */
    CHECK(status_as_nobody(d.sock, gid, true, &st) == 0 && st.own_uid && st.requests_done == 1 &&
              st.tokens_generated == 4 && st.prompt_tokens == 40 && st.prompt_tokens_cached == 0,
          "uid 65534 after 1 request: %llu done, %llu generated, %llu prompt (%llu cached)",
          (unsigned long long)st.requests_done, (unsigned long long)st.tokens_generated,
          (unsigned long long)st.prompt_tokens, (unsigned long long)st.prompt_tokens_cached);
    CHECK(status_as_nobody(d.sock, gid, true, &st) == 0 && st.own_uid && st.requests_done == 2 &&
              st.tokens_generated == 8 && st.prompt_tokens == 48 && st.prompt_tokens_cached == 32,
          "uid 65534 after 2 requests: %llu done, %llu generated, %llu prompt (%llu cached)",
          (unsigned long long)st.requests_done, (unsigned long long)st.tokens_generated,
          (unsigned long long)st.prompt_tokens, (unsigned long long)st.prompt_tokens_cached);
    /* Root: everyone's. */
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "root", &c, err) == 0, "connect: %s", err);
    CHECK(l8c_status(c, &st, 10000) == 0 && !st.own_uid && st.requests_done == 4 &&
              st.tokens_generated == 16 && st.prompt_tokens_cached == 64 && st.steps > 0 &&
              st.fed_tokens > 0,
          "root's status: own_uid %d, %llu done, %llu generated, %llu cached, %llu steps",
          st.own_uid, (unsigned long long)st.requests_done,
          (unsigned long long)st.tokens_generated, (unsigned long long)st.prompt_tokens_cached,
          (unsigned long long)st.steps);
    l8c_close(c);
    CHECK(tdaemon_stop(&d) == 0, "exit");
}

static void test_socket_activation(void)
{
    const char *sa = NULL;
    static const char *const cands[] = { "/usr/bin/systemd-socket-activate",
                                         "/lib/systemd/systemd-socket-activate",
                                         "/usr/lib/systemd/systemd-socket-activate" };
    for (size_t i = 0; i < sizeof(cands) / sizeof(cands[0]); i++)
        if (access(cands[i], X_OK) == 0)
            sa = cands[i];
    if (!sa) {
        fprintf(stderr, "socket activation: systemd-socket-activate absent, skipped\n");
        return;
    }
    /* systemd-socket-activate listens itself and starts llama8d on the
     * first connection, so READY comes only after we connect. */
    struct tdaemon d;
    memset(&d, 0, sizeof(d));
    snprintf(d.dir, sizeof(d.dir), "/tmp/l8ipc-XXXXXX");
    REQUIRE(mkdtemp(d.dir), "mkdtemp");
    snprintf(d.sock, sizeof(d.sock), "%s/act.sock", d.dir);
    char listen_arg[160];
    snprintf(listen_arg, sizeof(listen_arg), "--listen=%s", d.sock);
    d.pid = fork();
    if (d.pid == 0) {
        /* The daemon's own socket path is elsewhere: it must use the
         * passed one. */
        execl(sa, sa, "--seqpacket", listen_arg, bin, "--model", model, "--socket",
              "/nonexistent/dir/x.sock", "--config", "/dev/null", "--threads", "1",
              "--allowed-group", "", (char *)NULL);
        _exit(127);
    }
    /* The path exists from bind(), a moment before listen(): refused
     * until then. */
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    int rc = -ENOENT;
    for (int i = 0; i < 500 && (rc == -ENOENT || rc == -ECONNREFUSED); i++) {
        if (i)
            usleep(10000);
        rc = l8c_connect(d.sock, "activated", &c, err);
    }
    CHECK(rc == 0, "connect through socket activation: %s", err);
    if (rc == 0) {
        uint32_t prompt[4] = { 1, 9, 8, 7 };
        static struct tstream s[2];
        CHECK(submit_fixed(c, 1, prompt, 4, 5) == 0 && tcollect(c, s, 1, 1, 30000) &&
              s[1].n == 5, "generate through socket activation");
        l8c_close(c);
    }
    kill(d.pid, SIGTERM);
    int wst;
    waitpid(d.pid, &wst, 0);
    unlink(d.sock);
    rmdir(d.dir);
}

/* One request of 5 tokens on a fresh connection to path: whether it came back whole. */
static bool one_request(const char *path)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    int rc = l8c_connect(path, "idle", &c, err);
    CHECK(rc == 0, "connect to %s: %s", path, err);
    if (rc != 0)
        return false;
    uint32_t prompt[4] = { 1, 9, 8, 7 };
    static struct tstream s[2];
    memset(s, 0, sizeof(s));
    bool ok = submit_fixed(c, 1, prompt, 4, 5) == 0 && tcollect(c, s, 1, 1, 60000) &&
              s[1].n == 5 && s[1].error == 0;
    l8c_close(c);
    return ok;
}

/* Waits up to ms for pid to exit: its status, or -1 if it still runs. */
static int wait_exit(pid_t pid, int ms)
{
    int st;
    for (int i = 0; i < ms / 10; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    return -1;
}

/* A listening socket at a fresh path in dir, as systemd holds one. */
static int listen_at(char dir[64], char path[108], const char *name)
{
    snprintf(dir, 64, "/tmp/l8load-XXXXXX");
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(path, 108, "%s/%s", dir, name);
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path);
    REQUIRE(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            listen(lfd, 64) == 0, "listen: %s", strerror(errno));
    return lfd;
}

/* llama8d on the socket lfd (LISTEN_FDS), serving model_dir. */
static pid_t start_activated(int lfd, const char *model_dir)
{
    pid_t p = fork();
    REQUIRE(p >= 0, "fork");
    if (p == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || dup2(lfd, 3) != 3)
            _exit(127);
        char pidbuf[16];
        snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
        setenv("LISTEN_FDS", "1", 1);
        setenv("LISTEN_PID", pidbuf, 1);
        execl(bin, bin, "--model", model_dir, "--socket", "/nonexistent/dir/x.sock", "--config",
              "/dev/null", "--threads", "1", "--allowed-group", "", (char *)NULL);
        _exit(127);
    }
    return p;
}

static void hello_waiting(int fd)
{
    uint8_t buf[256];
    Llama8__Hello h = LLAMA8__HELLO__INIT;
    h.protocol_version = L8_PROTO_VERSION;
    h.client_name = "waiting";
    h.wait_loading = true;
    Llama8__ClientMessage m = LLAMA8__CLIENT_MESSAGE__INIT;
    m.msg_case = LLAMA8__CLIENT_MESSAGE__MSG_HELLO;
    m.hello = &h;
    size_t n = llama8__client_message__pack(&m, buf);
    REQUIRE(send(fd, buf, n, 0) == (ssize_t)n, "send hello");
}

/* Reads Loading messages up to the message that is not one: that one's
 * case (0 on hang-up or silence), the Loadings counted in *n, each checked. */
static int read_loading(int fd, const char *name, int *n, Llama8__DaemonMessage **last)
{
    uint64_t placed = 0, total = 0;
    *n = 0;
    for (;;) {
        int fds[3] = { -1, -1, -1 };
        Llama8__DaemonMessage *m = raw_recv(fd, fds, 60000);
        if (!m)
            return 0;
        if (m->msg_case != LLAMA8__DAEMON_MESSAGE__MSG_LOADING) {
            for (int i = 0; i < 3; i++)
                if (fds[i] >= 0)
                    close(fds[i]);
            int c = (int)m->msg_case;
            *last = m;
            return c;
        }
        const Llama8__Loading *l = m->loading;
        CHECK(!strcmp(l->model_name, name) && l->stage[0] && l->placed_bytes <= l->weight_bytes &&
              l->placed_bytes >= placed && (total == 0 || l->weight_bytes == total) &&
              l->elapsed_ms < 60000,
              "Loading %d: model '%s' stage '%s', %llu of %llu bytes, %llu ms", *n, l->model_name,
              l->stage, (unsigned long long)l->placed_bytes, (unsigned long long)l->weight_bytes,
              (unsigned long long)l->elapsed_ms);
        placed = l->placed_bytes;
        total = l->weight_bytes ? l->weight_bytes : total;
        (*n)++;
        llama8__daemon_message__free_unpacked(m, NULL);
    }
}

struct lib_wait { const char *path; int calls; int rc; uint64_t last_placed, last_total; };

static void count_loading(void *arg, const struct l8c_loading *l)
{
    struct lib_wait *w = arg;
    w->calls++;
    w->last_placed = l->placed_bytes;
    w->last_total = l->weight_bytes;
}

static void *lib_connect(void *arg)
{
    struct lib_wait *w = arg;
    struct l8c_connect_opts o = { .name = "lib waiting", .on_loading = count_loading, .arg = w };
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    w->rc = l8c_connect_with(w->path, &o, &c, err);
    if (w->rc == 0) {
        uint32_t prompt[4] = { 1, 9, 8, 7 };
        static struct tstream s[2];
        if (submit_fixed(c, 1, prompt, 4, 5) != 0 || !tcollect(c, s, 1, 1, 30000) || s[1].n != 5)
            w->rc = -EIO;
        l8c_close(c);
    }
    return NULL;
}

/* Connections made while llama8d loads, each waiting in the socket before
 * it starts (as under socket activation): one whose Hello set wait_loading
 * hears Loading messages, then its Welcome; one whose Hello did not, only
 * the Welcome; the library's callback sees the progress and its request is
 * served. A load that fails tells each of those waiting why, and a second
 * daemon on a live daemon's socket is refused before it loads anything. */
static void test_connect_during_load(void)
{
    char dir[64], path[108];
    int lfd = listen_at(dir, path, "load.sock");
    int a = raw_socket(path), b = raw_socket(path);
    hello_waiting(a);
    raw_hello(b, L8_PROTO_VERSION);
    struct lib_wait w = { .path = path };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, lib_connect, &w) == 0, "thread");
    usleep(100000);     /* its Hello waits in the socket too */
    pid_t pid = start_activated(lfd, model);
    char name[256];
    snprintf(name, sizeof(name), "%s", model);
    const char *base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name;
    int n = 0;
    Llama8__DaemonMessage *m = NULL;
    int got = read_loading(a, base, &n, &m);
    CHECK(got == LLAMA8__DAEMON_MESSAGE__MSG_WELCOME && n >= 1,
          "waiting client: %d Loading messages, then message %d", n, got);
    if (m)
        llama8__daemon_message__free_unpacked(m, NULL);
    m = NULL;
    got = read_loading(b, base, &n, &m);
    CHECK(got == LLAMA8__DAEMON_MESSAGE__MSG_WELCOME && n == 0,
          "a Hello without wait_loading: %d Loading messages, then message %d", n, got);
    if (m)
        llama8__daemon_message__free_unpacked(m, NULL);
    pthread_join(th, NULL);
    CHECK(w.rc == 0 && w.calls >= 1 && w.last_placed <= w.last_total,
          "library client during the load: rc %d, %d callbacks, %llu of %llu bytes", w.rc,
          w.calls, (unsigned long long)w.last_placed, (unsigned long long)w.last_total);
    CHECK(one_request(path), "a request after the load");
    printf("connect during load: %d Loading messages to the library's client\n", w.calls);
    close(a);
    close(b);

    /* A second daemon on this one's socket path: refused before loading. */
    char err_path[128];
    snprintf(err_path, sizeof(err_path), "%s/second.err", dir);
    pid_t p2 = fork();
    REQUIRE(p2 >= 0, "fork");
    if (p2 == 0) {
        int fd = open(err_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        if (fd < 0 || dup2(fd, 2) != 2)
            _exit(127);
        unsetenv("LISTEN_FDS");
        execl(bin, bin, "--model", model, "--socket", path, "--config", "/dev/null",
              "--allowed-group", "", (char *)NULL);
        _exit(127);
    }
    int st = wait_exit(p2, 10000);
    char log[4096] = "";
    FILE *f = fopen(err_path, "r");
    if (f) {
        log[fread(log, 1, sizeof(log) - 1, f)] = 0;
        fclose(f);
    }
    CHECK(st == 1 && strstr(log, "another daemon is listening there") && !strstr(log, "loading"),
          "a second daemon on the socket: status %d, log: %s", st, log);
    unlink(err_path);
    kill(pid, SIGTERM);
    CHECK(wait_exit(pid, 10000) == 0, "the activated daemon stops");
    close(lfd);
    unlink(path);

    /* A load that fails: the waiting client is told why. */
    char bad[128], cfg_src[512], cfg_dst[160];
    snprintf(bad, sizeof(bad), "%s/broken", dir);
    REQUIRE(mkdir(bad, 0700) == 0, "mkdir");
    snprintf(cfg_src, sizeof(cfg_src), "%s/config.json", model);
    snprintf(cfg_dst, sizeof(cfg_dst), "%s/config.json", bad);
    FILE *in = fopen(cfg_src, "r"), *out = fopen(cfg_dst, "w");
    REQUIRE(in && out, "copy config.json");
    char buf[8192];
    size_t k;
    while ((k = fread(buf, 1, sizeof(buf), in)) > 0)
        fwrite(buf, 1, k, out);
    fclose(in);
    fclose(out);
    lfd = listen_at(dir, path, "fail.sock");
    a = raw_socket(path);
    hello_waiting(a);
    pid = start_activated(lfd, bad);
    m = NULL;
    got = read_loading(a, "broken", &n, &m);
    CHECK(got == LLAMA8__DAEMON_MESSAGE__MSG_ERROR && m && m->error->code == LLAMA8__ERROR_CODE__INTERNAL &&
          strstr(m->error->message, "loading the model"),
          "a failed load: message %d, %s", got,
          got == LLAMA8__DAEMON_MESSAGE__MSG_ERROR ? m->error->message : "");
    if (m)
        llama8__daemon_message__free_unpacked(m, NULL);
    CHECK(wait_exit(pid, 10000) == 1, "a failed load exits 1");
    close(a);
    close(lfd);
    unlink(path);
    unlink(cfg_dst);
    rmdir(bad);
    rmdir(dir);
}

/* idle_exit_s: a connected client keeps the daemon; once none is left for
 * that long it exits 0 with STOPPING=1. Then under socket activation, the
 * listening socket held across starts as systemd holds it (this test is
 * the supervisor: it starts llama8d again when a connection waits): a
 * request on a connection made just before, during or after the exit is
 * served, by this daemon or by the next. */
static void test_idle_exit(void)
{
    static const char *const extra[] = { "--idle-exit-s", "1", NULL };
    struct tdaemon d;
    tdaemon_start(&d, bin, model, extra);
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "holder", &c, err) == 0, "connect: %s", err);
    CHECK(wait_exit(d.pid, 2500) == -1, "idle exit while a client is connected");
    l8c_close(c);
    CHECK(one_request(d.sock), "a request before the idle exit");
    int st = wait_exit(d.pid, 10000);
    CHECK(st == 0, "idle exit: status %d, notes %s", st, d.notes);
    tdaemon_notify_wait(&d, NULL, 100);
    CHECK(strstr(d.notes, "STOPPING=1") && strstr(d.notes, "idle"), "idle exit notes: %s",
          d.notes);
    d.pid = -1;
    tdaemon_stop(&d);

    /* The socket, held here. */
    char dir[64] = "/tmp/l8idle-XXXXXX", path[108];
    REQUIRE(mkdtemp(dir), "mkdtemp");
    snprintf(path, sizeof(path), "%s/idle.sock", dir);
    int lfd = socket(AF_UNIX, SOCK_SEQPACKET, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, path);
    REQUIRE(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            listen(lfd, 64) == 0, "listen: %s", strerror(errno));
    int rep[2];
    REQUIRE(pipe(rep) == 0, "pipe");
    const pid_t test = getpid();
    pid_t sup = fork();
    REQUIRE(sup >= 0, "fork");
    if (sup == 0) {
        /* The supervisor: start llama8d on the socket, wait for it to exit
         * (report its status), then for a connection to wait, again. */
        close(rep[0]);
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != test)
            _exit(127);
        for (;;) {
            pid_t p = fork();
            if (p == 0) {
                if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0)
                    _exit(127);
                if (dup2(lfd, 3) != 3)
                    _exit(127);
                char pidbuf[16];
                snprintf(pidbuf, sizeof(pidbuf), "%d", (int)getpid());
                setenv("LISTEN_FDS", "1", 1);
                setenv("LISTEN_PID", pidbuf, 1);
                execl(bin, bin, "--model", model, "--socket", "/nonexistent/dir/x.sock",
                      "--config", "/dev/null", "--threads", "1", "--allowed-group", "",
                      "--idle-exit-s", "1", (char *)NULL);
                _exit(127);
            }
            int wst;
            waitpid(p, &wst, 0);
            unsigned char code = WIFEXITED(wst) ? (unsigned char)WEXITSTATUS(wst) : 200;
            if (write(rep[1], &code, 1) != 1 || code != 0)
                _exit(0);
            struct pollfd pf = { .fd = lfd, .events = POLLIN };
            if (poll(&pf, 1, 60000) <= 0)
                _exit(0);
        }
    }
    close(rep[1]);
    /* Each round: a request, then the next one at a moment around the
     * exit, which comes 1 to 1.1 s (a housekeeping tick) after the close. */
    static const int gap_ms[] = { 0, 950, 1000, 1030, 1060, 1090, 1120, 1500, 2500 };
    int served = 0, n = (int)(sizeof(gap_ms) / sizeof(gap_ms[0]));
    for (int i = 0; i < n; i++) {
        usleep((useconds_t)gap_ms[i] * 1000);
        served += one_request(path);
    }
    CHECK(served == n, "requests served around the idle exits: %d of %d", served, n);
    /* The exits so far: each 0, at least one. */
    kill(sup, SIGKILL);
    waitpid(sup, NULL, 0);
    unsigned char codes[64];
    ssize_t k = read(rep[0], codes, sizeof(codes));
    int exits = 0;
    for (ssize_t i = 0; i < k; i++) {
        CHECK(codes[i] == 0, "an activated llama8d exited %d", codes[i]);
        exits++;
    }
    CHECK(exits >= 2, "idle exits under socket activation: %d", exits);
    printf("idle exit: %d requests around %d exits, all served\n", served, exits);
    close(rep[0]);
    close(lfd);
    unlink(path);
    rmdir(dir);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 3, "usage: test_ipc_lifecycle llama8d model");
    bin = argv[1];
    model = argv[2];
    test_notify_and_drain();
    test_drain_timeout();
    test_own_loop_hangup();
    test_permissions();
    test_admin_clients();
    test_clients();
    test_prefix_cache_scope();
    test_status_scope();
    test_socket_activation();
    test_connect_during_load();
    test_idle_exit();
    test_reload();
    test_rate();
    if (t_failures)
        return 1;
    printf("ok\n");
    return 0;
}
