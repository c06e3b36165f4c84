/* ipc_helper.h - start the real llama8d for a test and talk to it.
 *
 * The daemon runs on a socket in a fresh temporary directory, with
 * NOTIFY_SOCKET pointing at a datagram socket the test reads, so the
 * test knows exactly when it is READY (and sees its sd_notify messages). */
#pragma once
#include <dirent.h>
#include <grp.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "../test.h"

#include "llama8client.h"

struct tdaemon {
    pid_t pid;
    char dir[64];
    char sock[108];
    char notify_path[108];
    int notify_fd;
    char notes[16384];      /* every sd_notify datagram, '|'-separated */
    size_t notes_len;
};

/* Appends one waiting notify datagram to notes ('|' for each newline);
 * false if none was waiting. */
static inline bool tdaemon_notify_read(struct tdaemon *d)
{
    char buf[4096];
    ssize_t n = recv(d->notify_fd, buf, sizeof(buf) - 1, MSG_DONTWAIT);
    if (n <= 0)
        return false;
    buf[n] = 0;
    for (char *c = buf; *c; c++)
        if (*c == '\n')
            *c = '|';
    /* Full: the rest is dropped (a test that reads for long counts and
     * clears the notes as it goes). */
    if (d->notes_len + 2 >= sizeof(d->notes))
        return true;
    size_t room = sizeof(d->notes) - d->notes_len - 2;
    size_t k = (size_t)n < room ? (size_t)n : room;
    memcpy(d->notes + d->notes_len, buf, k);
    d->notes_len += k;
    d->notes[d->notes_len++] = '|';
    d->notes[d->notes_len] = 0;
    return true;
}

/* Reads what is waiting, as systemd would: a datagram socket queues few
 * (net.unix.max_dgram_qlen, 10), and sd_notify blocks when it is full. */
static inline void tdaemon_notify_drain(struct tdaemon *d)
{
    while (tdaemon_notify_read(d))
        ;
}

/* Read notify datagrams for up to timeout_ms or until `want` was seen. */
static inline bool tdaemon_notify_wait(struct tdaemon *d, const char *want, int timeout_ms)
{
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        if (want && strstr(d->notes, want))
            return true;
        uint64_t now = t_now_ms();
        if (now >= end)
            return false;
        struct pollfd p = { d->notify_fd, POLLIN, 0 };
        if (poll(&p, 1, (int)(end - now)) <= 0 || !tdaemon_notify_read(d))
            continue;
        if (d->pid > 0 && waitpid(d->pid, NULL, WNOHANG) == d->pid) {
            d->pid = -1;
            return want && strstr(d->notes, want);
        }
    }
}

/* Start llama8d with --model model and extra args (NULL-terminated).
 * With prefix (e.g. systemd-socket-activate ...), that argv runs first. */
static inline void tdaemon_start_argv(struct tdaemon *d, const char *const *prefix,
                                      const char *bin, const char *model, const char *const *extra)
{
    memset(d, 0, sizeof(*d));
    snprintf(d->dir, sizeof(d->dir), "/tmp/l8ipc-XXXXXX");
    REQUIRE(mkdtemp(d->dir), "mkdtemp: %s", strerror(errno));
    chmod(d->dir, 0755);     /* other uids must reach the socket */
    snprintf(d->sock, sizeof(d->sock), "%s/d.sock", d->dir);
    snprintf(d->notify_path, sizeof(d->notify_path), "%s/notify", d->dir);
    d->notify_fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    strcpy(sa.sun_path, d->notify_path);
    REQUIRE(bind(d->notify_fd, (struct sockaddr *)&sa, sizeof(sa)) == 0, "bind notify");
    const char *argv[64];
    int n = 0;
    for (int i = 0; prefix && prefix[i]; i++)
        argv[n++] = prefix[i];
    argv[n++] = bin;
    argv[n++] = "--model";
    argv[n++] = model;
    argv[n++] = "--socket";
    argv[n++] = d->sock;
    argv[n++] = "--config";
    argv[n++] = "/dev/null";
    argv[n++] = "--threads";
    argv[n++] = "1";
    argv[n++] = "--allowed-group";
    argv[n++] = "";
    for (int i = 0; extra && extra[i] && n < 62; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
    const pid_t test = getpid();
    d->pid = fork();
    REQUIRE(d->pid >= 0, "fork");
    if (d->pid == 0) {
        /* A test that dies (a sanitizer's abort) takes its daemon along:
         * left running, it would hold the test's stdout and meson would
         * wait for the timeout instead of reporting the failure. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != test)
            _exit(127);
        setenv("NOTIFY_SOCKET", d->notify_path, 1);
        execvp(argv[0], (char *const *)argv);
        _exit(127);
    }
    REQUIRE(tdaemon_notify_wait(d, "READY=1", 120000), "llama8d not READY; notes: %s", d->notes);
}

static inline void tdaemon_start(struct tdaemon *d, const char *bin, const char *model,
                                 const char *const *extra)
{
    tdaemon_start_argv(d, NULL, bin, model, extra);
}

/* SIGTERM and wait; returns the exit status (or 128 + signal). */
static inline int tdaemon_stop(struct tdaemon *d)
{
    int st = 0;
    if (d->pid > 0) {
        kill(d->pid, SIGTERM);
        uint64_t end = t_now_ms() + 30000;
        while (waitpid(d->pid, &st, WNOHANG) == 0) {
            if (t_now_ms() > end) {
                kill(d->pid, SIGKILL);
                waitpid(d->pid, &st, 0);
                break;
            }
            tdaemon_notify_wait(d, NULL, 20);
        }
        d->pid = -1;
    }
    tdaemon_notify_wait(d, NULL, 10);
    close(d->notify_fd);
    unlink(d->notify_path);
    unlink(d->sock);
    rmdir(d->dir);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

/* Descriptors the daemon holds. */
static inline int tdaemon_fds(const struct tdaemon *d)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
    DIR *dir = opendir(path);
    if (!dir)
        return -1;
    int n = 0;
    for (struct dirent *e; (e = readdir(dir));)
        n += e->d_name[0] != '.';
    closedir(dir);
    return n;
}

/* Operations the daemon's io_uring holds armed (its fdinfo's PollList),
 * or -1 where the kernel does not say. */
static inline int tdaemon_uring_polls(const struct tdaemon *d)
{
    char path[300], link[128];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)d->pid);
    DIR *dir = opendir(path);
    if (!dir)
        return -1;
    int n = -1;
    for (struct dirent *e; n < 0 && (e = readdir(dir));) {
        snprintf(path, sizeof(path), "/proc/%d/fd/%s", (int)d->pid, e->d_name);
        ssize_t k = readlink(path, link, sizeof(link) - 1);
        if (k <= 0)
            continue;
        link[k] = 0;
        if (!strstr(link, "io_uring"))
            continue;
        snprintf(path, sizeof(path), "/proc/%d/fdinfo/%s", (int)d->pid, e->d_name);
        FILE *fp = fopen(path, "r");
        if (!fp)
            continue;
        char line[256];
        bool in = false;
        while (fgets(line, sizeof(line), fp)) {
            if (!strncmp(line, "PollList:", 9)) {
                in = true;
                n = 0;
            } else if (in && line[0] == ' ') {
                n += strstr(line, "op=") != NULL;
            } else {
                in = false;
            }
        }
        fclose(fp);
    }
    closedir(dir);
    return n;
}

struct tstream {
    uint32_t tokens[4096];
    uint32_t n;
    int done_reason;        /* -1 while running */
    int error;              /* 0 or an l8_err */
    bool started;
    uint32_t started_prompt; /* STARTED's token: the prompt's length */
    uint32_t started_cached; /* STARTED's index: tokens from the prefix cache */
};

/* Wait for events of any request until pred says stop or timeout; each
 * event goes to streams[id] (ids 1..max). Returns false on timeout/error. */
static inline bool tcollect(struct l8c_client *c, struct tstream *s, uint32_t max_id,
                            uint32_t n_wait, int timeout_ms)
{
    uint64_t end = t_now_ms() + (uint64_t)timeout_ms;
    uint32_t finished = 0;
    struct l8_event ev[128];
    while (finished < n_wait) {
        uint64_t now = t_now_ms();
        if (now >= end)
            return false;
        int k = l8c_wait_events(c, ev, 128, (int)(end - now));
        if (k < 0)
            return false;
        for (int i = 0; i < k; i++) {
            if (ev[i].request_id == 0 || ev[i].request_id > max_id)
                continue;
            struct tstream *t = &s[ev[i].request_id];
            switch (ev[i].kind) {
            case L8_EV_STARTED:
                t->started = true;
                t->started_prompt = ev[i].token;
                t->started_cached = ev[i].index;
                break;
            case L8_EV_TOKEN:
                if (t->n < 4096)
                    t->tokens[t->n++] = ev[i].token;
                break;
            case L8_EV_DONE: t->done_reason = ev[i].reason; finished++; break;
            case L8_EV_ERROR: t->error = ev[i].code; finished++; break;
            }
        }
    }
    return true;
}

/* ---- other users (needs root) ------------------------------------------ */

/* The group the tests let other uids in by: "daemon" (gid 1 where the
 * database lacks it), its name into name. */
static inline gid_t tuser_group(char name[64])
{
    const struct group *g = getgrnam("daemon");
    snprintf(name, 64, "%s", g ? g->gr_name : "daemon");
    return g ? g->gr_gid : 1;
}

/* Fork a child running as uid (its gid the same) with the given
 * supplementary groups (exit 255 if it cannot be); 0 in the child, its pid
 * here. */
static inline pid_t tuser_fork(uid_t uid, const gid_t *groups, int n)
{
    pid_t kid = fork();
    if (kid == 0 && (setgroups((size_t)n, groups) < 0 || setgid(uid) < 0 || setuid(uid) < 0))
        _exit(255);
    return kid;
}

/* The child's exit status; -1 if it did not exit, or exited 255. */
static inline int tuser_status(pid_t kid)
{
    int st;
    waitpid(kid, &st, 0);
    return WIFEXITED(st) && WEXITSTATUS(st) != 255 ? WEXITSTATUS(st) : -1;
}
