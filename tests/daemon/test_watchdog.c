/* test_watchdog: llama8d's systemd watchdog, as a service manager sees it
 * through a test NOTIFY_SOCKET.
 *  - EXTEND_TIMEOUT_USEC= while loading, then READY=1, then WATCHDOG=1 pings
 *    at about half of WATCHDOG_USEC (counted by kernel arrival time over a
 *    window: at least a third of the nominal number, so a loaded machine
 *    passes, and not more than one per half interval, with one of slack);
 *  - an engine step that hangs (the test fault injection
 *    L8_TEST_STALL_STEP_MS: every step sleeps that long first) stops the
 *    pings once it has run past its bound (--step-stall-ms), with STATUS=
 *    saying why; when the step ends after all the pings resume, and a
 *    second such step stalls the same way (the first did not stretch the
 *    bound); the daemon runs with --spin-us, and its loop and engine
 *    thread sleep through most of the hung step (CPU time well under the
 *    step's wall time: the spin is bounded per step);
 *  - SIGTERM: STOPPING=1 and exit 0;
 *  - WATCHDOG_PID naming another process: no pings at all.
 * Checks are on the order of the datagrams and on lower bounds of time,
 * which load cannot break. argv: llama8d model-dir */
#include "ipc_helper.h"

#define WD_USEC       400000u   /* WATCHDOG_USEC */
#define PING_WINDOW_MS 1500     /* nominal pings in it: 1500 / 200..300 = 5..7 */
#define STALL_FLOOR_MS 250      /* --step-stall-ms */
#define STALL_STEP_MS  1500     /* L8_TEST_STALL_STEP_MS */

static const char *bin, *model;

/* User + system CPU time of a process so far, in ms (0 if unreadable). */
static uint64_t cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%ld/stat", (long)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return 0;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = 0;
    /* After the command name (which may hold spaces) in parentheses: state
     * is field 3, utime and stime fields 14 and 15. */
    const char *p = strrchr(buf, ')');
    unsigned long long ut, st;
    if (!p || sscanf(p + 2, "%*c %*s %*s %*s %*s %*s %*s %*s %*s %*s %*s %llu %llu",
                     &ut, &st) != 2)
        return 0;
    return (ut + st) * 1000 / (uint64_t)sysconf(_SC_CLK_TCK);
}

static uint64_t realtime_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Arrival times from the kernel (SO_TIMESTAMPNS), so a test descheduled on
 * a loaded machine still sees when each datagram came. */
static void stamp_notes(struct tdaemon *d)
{
    int on = 1;
    REQUIRE(setsockopt(d->notify_fd, SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof(on)) == 0,
            "SO_TIMESTAMPNS: %s", strerror(errno));
}

/* The next notify datagram ('\n' kept) and when it arrived (t_now_ms()'s
 * clock), or false after timeout_ms. Also appended to d->notes like
 * tdaemon_notify_wait() does. */
static bool next_note(struct tdaemon *d, int timeout_ms, char *out, size_t cap, uint64_t *t_ms)
{
    struct pollfd p = { d->notify_fd, POLLIN, 0 };
    if (poll(&p, 1, timeout_ms < 0 ? 0 : timeout_ms) <= 0)
        return false;
    struct iovec iov = { out, cap - 1 };
    union { struct cmsghdr align; char buf[CMSG_SPACE(sizeof(struct timespec))]; } ctl;
    struct msghdr msg = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                          .msg_controllen = sizeof(ctl.buf) };
    ssize_t n = recvmsg(d->notify_fd, &msg, MSG_DONTWAIT);
    if (n <= 0)
        return false;
    out[n] = 0;
    uint64_t mono = t_now_ns(), age = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(&msg); cm; cm = CMSG_NXTHDR(&msg, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_TIMESTAMPNS) {
            struct timespec ts;
            memcpy(&ts, CMSG_DATA(cm), sizeof(ts));
            uint64_t arrived = (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
            uint64_t real = realtime_ns();
            age = real > arrived ? real - arrived : 0;
        }
    }
    *t_ms = (mono - (age < mono ? age : 0)) / 1000000ull;
    size_t room = sizeof(d->notes) - d->notes_len - 2;
    size_t k = (size_t)n < room ? (size_t)n : room;
    memcpy(d->notes + d->notes_len, out, k);
    for (size_t i = d->notes_len; i < d->notes_len + k; i++)
        if (d->notes[i] == '\n')
            d->notes[i] = '|';
    d->notes_len += k;
    d->notes[d->notes_len++] = '|';
    d->notes[d->notes_len] = 0;
    return true;
}

static int left_ms(uint64_t end)
{
    uint64_t now = t_now_ms();
    return now < end ? (int)(end - now) : 0;
}

static bool is_ping(const char *note) { return strstr(note, "WATCHDOG=1") != NULL; }

/* Count the pings that arrive within the next window_ms (what was queued
 * before is dropped); the longest gap between two goes to *max_gap. */
static int count_pings(struct tdaemon *d, int window_ms, uint64_t *max_gap)
{
    char note[1024];
    uint64_t t, start = t_now_ms(), end = start + (uint64_t)window_ms, last = 0;
    int n = 0;
    *max_gap = 0;
    /* Until the window has passed and what arrived in it has been read. */
    for (;;) {
        if (!next_note(d, left_ms(end), note, sizeof(note), &t)) {
            if (t_now_ms() >= end)
                break;
            continue;
        }
        if (t < start || t > end || !is_ping(note))
            continue;
        if (last && t - last > *max_gap)
            *max_gap = t - last;
        last = t;
        n++;
    }
    return n;
}

/* One request of one token: one step, which the fault injection holds for
 * STALL_STEP_MS. Its bound is STALL_FLOOR_MS + 8 x the time per token of
 * the warm-up (2-9 ms here, ASan and a loaded machine included) x 1 token,
 * so most of STALL_STEP_MS lies past the bound. Until the daemon says the
 * step stalled, then until it says it serves again: no ping may come in
 * between; after it they resume. */
/* What llama8ctl status shows: the stall while it lasts, then an idle engine. */
static void check_status(struct tdaemon *d, bool stalled)
{
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    struct l8c_status s;
    REQUIRE(l8c_connect(d->sock, "watchdog-status", &c, err) == 0, "%s", err);
    REQUIRE(l8c_status(c, &s, 10000) == 0, "status: %s", l8c_last_error(c, NULL));
    if (stalled)
        CHECK(s.step_stalled && s.step_running_s >= STALL_FLOOR_MS / 1000.0,
              "status during the stall: stalled %d, step running %.3f s", s.step_stalled,
              s.step_running_s);
    else
        CHECK(!s.step_stalled && s.step_running_s == 0.0,
              "status once idle: stalled %d, step running %.3f s", s.step_stalled,
              s.step_running_s);
    l8c_close(c);
}

static void stall_once(struct tdaemon *d, struct l8c_client *c, uint64_t id)
{
    uint32_t prompt[1] = { 5 };
    struct l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = 1;
    p.ignore_eos = true;
    uint64_t t_submit = t_now_ms(), cpu0 = cpu_ms(d->pid);
    REQUIRE(l8c_submit_id(c, id, prompt, 1, &p) == 0, "submit");

    char note[1024];
    uint64_t t, t_stall = 0, t_back = 0, end = t_submit + 30000;
    int pings_before = 0, pings_stalled = 0;
    while (!t_back && t_now_ms() < end) {
        if (!next_note(d, left_ms(end), note, sizeof(note), &t))
            continue;
        if (!t_stall) {
            if (strstr(note, "STATUS=engine step stalled")) {
                t_stall = t;
                check_status(d, true);
            } else
                pings_before += is_ping(note);
        } else if (strstr(note, "STATUS=serving")) {
            t_back = t;
        } else {
            pings_stalled += is_ping(note);
        }
    }
    if (t_stall && t_back)
        fprintf(stderr, "stall %llu: reported after %llu ms, %d pings before; "
                "resumed %llu ms later\n", (unsigned long long)id,
                (unsigned long long)(t_stall - t_submit), pings_before,
                (unsigned long long)(t_back - t_stall));
    /* A loop spinning for the whole step would have used about its wall
     * time, one spinning --spin-us after each timer tick 20 %; bounded to
     * --spin-us from the step's start it sleeps through the rest (~20 ms). */
    const uint64_t cpu = cpu_ms(d->pid) - cpu0;
    if (t_back) {
        fprintf(stderr, "stall %llu: the daemon used %llu ms of CPU in %llu ms\n",
                (unsigned long long)id, (unsigned long long)cpu,
                (unsigned long long)(t_back - t_submit));
        CHECK(cpu < (t_back - t_submit) / 8, "the daemon used %llu ms of CPU in the %llu ms "
              "of a hung step (spinning through it?)", (unsigned long long)cpu,
              (unsigned long long)(t_back - t_submit));
    }
    CHECK(t_stall, "request %llu: no STATUS=engine step stalled within 30 s: %s",
          (unsigned long long)id, d->notes);
    CHECK(t_back, "request %llu: no STATUS=serving after the stalled step ended: %s",
          (unsigned long long)id, d->notes);
    CHECK(!t_stall || t_stall - t_submit >= STALL_FLOOR_MS,
          "stall reported %llu ms after submit, before the %u ms bound",
          (unsigned long long)(t_stall - t_submit), STALL_FLOOR_MS);
    CHECK(pings_stalled == 0, "%d pings while the step was stalled: %s", pings_stalled, d->notes);
    /* The silence above means something only if it lasted a few intervals. */
    if (t_stall && t_back && t_back - t_stall < 2 * WD_USEC / 1000)
        fprintf(stderr, "note: the stalled window was only %llu ms (a loaded machine)\n",
                (unsigned long long)(t_back - t_stall));

    static struct tstream st[3];
    memset(&st[id], 0, sizeof(st[id]));
    CHECK(tcollect(c, st, 2, 1, 30000) && st[id].done_reason == L8_DONE_LENGTH && st[id].n == 1,
          "the stalled request: reason %d, %u tokens, error %d", st[id].done_reason, st[id].n,
          st[id].error);
    bool resumed = false;
    for (end = t_now_ms() + 10000; !resumed && t_now_ms() < end;)
        resumed = next_note(d, left_ms(end), note, sizeof(note), &t) && is_ping(note);
    CHECK(resumed, "pings did not resume after the step ended: %s", d->notes);
    check_status(d, false);
}

static void test_pings_stall_stop(void)
{
    /* WATCHDOG_PID must be the daemon's pid: the shell's $$ is, after exec. */
    char script[256];
    snprintf(script, sizeof(script),
             "export WATCHDOG_USEC=%u WATCHDOG_PID=$$ L8_TEST_STALL_STEP_MS=%u; exec \"$@\"",
             WD_USEC, STALL_STEP_MS);
    const char *prefix[] = { "/bin/sh", "-c", script, "sh", NULL };
    char floor_arg[16];
    snprintf(floor_arg, sizeof(floor_arg), "%u", STALL_FLOOR_MS);
    const char *extra[] = { "--step-stall-ms", floor_arg, "--spin-us", "20000", NULL };
    struct tdaemon d;
    tdaemon_start_argv(&d, prefix, bin, model, extra);
    stamp_notes(&d);
    const char *ext = strstr(d.notes, "EXTEND_TIMEOUT_USEC=");
    const char *ready = strstr(d.notes, "READY=1");
    CHECK(ext && ready && ext < ready, "EXTEND_TIMEOUT_USEC= before READY=1: %s", d.notes);
    CHECK(!strstr(d.notes, "WATCHDOG=1"), "a ping before READY=1: %s", d.notes);

    /* Idle: pings every WD_USEC/2 (the loop's 100 ms tick makes it 200-300 ms). */
    uint64_t gap;
    int pings = count_pings(&d, PING_WINDOW_MS, &gap);
    int nominal = PING_WINDOW_MS / (WD_USEC / 2000);
    fprintf(stderr, "idle: %d pings in %d ms, longest gap %llu ms\n", pings, PING_WINDOW_MS,
            (unsigned long long)gap);
    CHECK(pings >= nominal / 3 + 1, "%d pings in %d ms (WATCHDOG_USEC %u)", pings,
          PING_WINDOW_MS, WD_USEC);
    CHECK(pings <= nominal + 2, "%d pings in %d ms: more often than WATCHDOG_USEC/2", pings,
          PING_WINDOW_MS);

    struct l8c_client *c;
    char err[L8C_ERRLEN];
    REQUIRE(l8c_connect(d.sock, "watchdog", &c, err) == 0, "%s", err);
    stall_once(&d, c, 1);
    /* Again: the first stall must not have taught the bound to wait for
     * STALL_STEP_MS (it would be 8 x that, and this stall go unreported). */
    stall_once(&d, c, 2);
    l8c_close(c);

    kill(d.pid, SIGTERM);
    CHECK(tdaemon_notify_wait(&d, "STOPPING=1", 10000), "no STOPPING=1: %s", d.notes);
    int rc = tdaemon_stop(&d);
    CHECK(rc == 0, "exit status %d", rc);
}

static void test_other_pid(void)
{
    /* The watchdog belongs to our own process (the shell's parent): the
     * daemon must not ping for it. */
    char script[256];
    snprintf(script, sizeof(script),
             "export WATCHDOG_USEC=%u WATCHDOG_PID=%ld; exec \"$@\"", WD_USEC, (long)getpid());
    const char *prefix[] = { "/bin/sh", "-c", script, "sh", NULL };
    struct tdaemon d;
    tdaemon_start_argv(&d, prefix, bin, model, NULL);
    stamp_notes(&d);
    uint64_t gap;
    int pings = count_pings(&d, 1000, &gap);
    CHECK(pings == 0, "%d pings with WATCHDOG_PID of another process", pings);
    int rc = tdaemon_stop(&d);
    CHECK(rc == 0, "exit status %d", rc);
}

int main(int argc, char **argv)
{
    REQUIRE(argc == 3, "usage: test_watchdog llama8d model");
    bin = argv[1];
    model = argv[2];
    test_pings_stall_stop();
    test_other_pid();
    if (t_failures)
        return 1;
    printf("ok\n");
    return 0;
}
