/* ctl_run.h - run llama8ctl (or any program) as a test's child process:
 * stdin fed from a buffer, stdout and stderr collected, a time bound. For
 * the tests that drive the command-line tools against a real llama8d
 * (test_ctl_e2e, test_ctl_constraints). */
#pragma once
#include "ipc_helper.h"

#ifndef CMD_TIMEOUT_MS
#define CMD_TIMEOUT_MS 120000
#endif

/* A growing byte buffer, always NUL-terminated once written. */
struct buf { char *p; size_t n, cap; };

static inline void buf_add(struct buf *b, const void *s, size_t n)
{
    if (b->n + n + 1 > b->cap) {
        size_t cap = (b->n + n + 1) * 2;
        b->p = realloc(b->p, cap);
        REQUIRE(b->p, "out of memory");
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static inline void buf_str(struct buf *b, const char *s) { buf_add(b, s, strlen(s)); }
static inline void buf_clear(struct buf *b) { b->n = 0; if (b->p) b->p[0] = 0; }
static inline void buf_free(struct buf *b) { free(b->p); *b = (struct buf){0}; }

/* argv as one line, for messages. */
static inline const char *argv_str(const char *const *argv)
{
    static char s[4096];
    size_t n = 0;
    s[0] = 0;
    for (int i = 0; argv[i] && n < sizeof(s) - 2; i++)
        n += (size_t)snprintf(s + n, sizeof(s) - n, "%s%s", i ? " " : "", argv[i]);
    return s;
}

/* Run argv with stdin from in[in_len], collect stdout and stderr (cleared
 * first; both NUL-terminated, never NULL); returns the exit status, 128 +
 * signal, or -1 when it ran past CMD_TIMEOUT_MS. */
static inline int run_cmd(const char *const *argv, const char *in, size_t in_len,
                          struct buf *out, struct buf *err)
{
    int pi[2], po[2], pe[2];
    REQUIRE(pipe2(pi, O_CLOEXEC) == 0 && pipe2(po, O_CLOEXEC) == 0 &&
            pipe2(pe, O_CLOEXEC) == 0, "pipe");
    pid_t pid = fork();
    REQUIRE(pid >= 0, "fork");
    if (pid == 0) {
        dup2(pi[0], 0);
        dup2(po[1], 1);
        dup2(pe[1], 2);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pi[0]);
    close(po[1]);
    close(pe[1]);
    buf_clear(out);
    buf_clear(err);
    buf_add(out, "", 0);
    buf_add(err, "", 0);
    size_t off = 0;
    if (!in_len) {
        close(pi[1]);
        pi[1] = -1;
    } else {
        fcntl(pi[1], F_SETFL, O_NONBLOCK);
    }
    int fds[2] = { po[0], pe[0] }, open_fds = 2;
    uint64_t end = t_now_ms() + CMD_TIMEOUT_MS;
    bool timed_out = false;
    while (open_fds > 0) {
        struct pollfd p[3] = { { fds[0], POLLIN, 0 }, { fds[1], POLLIN, 0 },
                               { pi[1], POLLOUT, 0 } };
        uint64_t now = t_now_ms();
        if (now >= end) {
            timed_out = true;
            kill(pid, SIGKILL);
            break;
        }
        if (poll(p, 3, (int)(end - now)) < 0 && errno != EINTR)
            break;
        char tmp[65536];
        for (int k = 0; k < 2; k++) {
            if (fds[k] < 0 || !(p[k].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            ssize_t r = read(fds[k], tmp, sizeof(tmp));
            if (r > 0) {
                buf_add(k ? err : out, tmp, (size_t)r);
            } else if (r == 0 || errno != EINTR) {
                close(fds[k]);
                fds[k] = -1;
                open_fds--;
            }
        }
        if (pi[1] >= 0 && (p[2].revents & (POLLOUT | POLLERR | POLLHUP))) {
            ssize_t w = write(pi[1], in + off, in_len - off);
            if (w > 0)
                off += (size_t)w;
            if ((w < 0 && errno != EAGAIN && errno != EINTR) || off == in_len) {
                close(pi[1]);
                pi[1] = -1;
            }
        }
    }
    for (int k = 0; k < 2; k++)
        if (fds[k] >= 0)
            close(fds[k]);
    if (pi[1] >= 0)
        close(pi[1]);
    int st;
    waitpid(pid, &st, 0);
    if (timed_out)
        return -1;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}
