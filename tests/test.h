/* test.h - what every test program shares, as liburing's test/helpers.h:
 * the exit codes meson reads, checks that count a failure and go on
 * (CHECK, CHECK_EQ) or end the test (REQUIRE), temporary directories,
 * whole files in and out, and the monotonic clock. It compiles as C17 and
 * as C++17 (tests/gpu/emu). Helpers of one area stay beside its tests:
 * model/testutil.h (checkpoints and safetensors files written byte by
 * byte), tokenizer/tok_test.h, daemon/ipc_helper.h (a real llama8d),
 * engine/reference.h (reference logits, the golden greedy decode),
 * gpu/gpu_util.h (CUDA calls, device buffers), fuzz/fuzz.h. */
#pragma once
#include <ftw.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

/* What a test program exits with: meson counts 77 as skipped (no device,
 * no root), any other nonzero status as failed. */
enum { T_EXIT_PASS = 0, T_EXIT_FAIL = 1, T_EXIT_SKIP = 77 };

/* CHECKs failed so far; main turns it into the exit status. */
static int t_failures __attribute__((unused));

/* One line on stderr for a failed check: "FAIL file:line: cond", then the
 * check's message if it has one. fmt is ": " followed by that message
 * (the macros paste ": " before it, so a check without a message passes
 * ": " alone and prints nothing more). stdout is flushed first: in a pipe
 * (meson's log) the line lands after what the test printed before it. */
__attribute__((format(printf, 5, 6)))
static inline void t_report(const char *what, const char *file, int line, const char *cond,
                            const char *fmt, ...)
{
    fflush(stdout);
    fprintf(stderr, "%s %s:%d: %s", what, file, line, cond);
    if (fmt[0] && fmt[1] && fmt[2]) {
        va_list ap;
        va_start(ap, fmt);
        vfprintf(stderr, fmt, ap);
        va_end(ap);
    }
    fputc('\n', stderr);
}

/* CHECK(cond) or CHECK(cond, "format", ...): a failure is counted and the
 * test goes on. The message, if any, must start with a string literal. */
#define CHECK(cond, ...)                                                          \
    do {                                                                          \
        if (!(cond)) {                                                            \
            t_report("FAIL", __FILE__, __LINE__, #cond, ": " __VA_ARGS__);        \
            t_failures++;                                                         \
        }                                                                         \
    } while (0)

/* CHECK for what the rest of the test cannot do without: a failure ends
 * the program with T_EXIT_FAIL (atexit handlers run: they take daemons
 * and temporary files along). */
#define REQUIRE(cond, ...)                                                        \
    do {                                                                          \
        if (!(cond)) {                                                            \
            t_report("FATAL", __FILE__, __LINE__, #cond, ": " __VA_ARGS__);       \
            exit(T_EXIT_FAIL);                                                    \
        }                                                                         \
    } while (0)

/* Two integers equal, both values printed when they are not. */
#define CHECK_EQ(a, b)                                                            \
    do {                                                                          \
        long long t_a_ = (long long)(a), t_b_ = (long long)(b);                   \
        if (t_a_ != t_b_) {                                                       \
            t_report("FAIL", __FILE__, __LINE__, #a " == " #b, ": %lld, expected %lld", \
                     t_a_, t_b_);                                                 \
            t_failures++;                                                         \
        }                                                                         \
    } while (0)

/* "name: ok" and 0, or the failure count and 1. */
static inline int t_result(const char *name)
{
    if (t_failures) {
        fprintf(stderr, "%s: %d failure(s)\n", name, t_failures);
        return T_EXIT_FAIL;
    }
    printf("%s: ok\n", name);
    return T_EXIT_PASS;
}

/* ---- time ------------------------------------------------------------------ */

/* CLOCK_MONOTONIC, the daemon's and libllama8client's clock (l8c_now_ns). */
static inline uint64_t t_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}
static inline uint64_t t_now_ms(void) { return t_now_ns() / 1000000ull; }
static inline double t_now_s(void) { return (double)t_now_ns() * 1e-9; }

/* ---- temporary directories -------------------------------------------------- */

/* A fresh directory under $TMPDIR (else /tmp), malloc'd; aborts if it
 * cannot be made. Tests whose directory holds a socket keep their short
 * fixed /tmp paths instead (sun_path has 108 bytes). */
static inline char *t_mkdtemp(void)
{
    const char *base = getenv("TMPDIR");
    char *p;
    if (asprintf(&p, "%s/l8test-XXXXXX", base && *base ? base : "/tmp") < 0)
        abort();
    if (!mkdtemp(p)) {
        perror("mkdtemp");
        abort();
    }
    return p;
}

static inline int t_rm_one_(const char *p, const struct stat *st, int flag, struct FTW *f)
{
    (void)st; (void)flag; (void)f;
    return remove(p);
}

/* Removes dir and everything under it; links are removed, not followed. */
static inline void t_rm_tree(const char *dir)
{
    if (dir)
        nftw(dir, t_rm_one_, 16, FTW_DEPTH | FTW_PHYS);
}

/* t_rm_tree, then free(dir): the end of a t_mkdtemp() directory. */
static inline void t_rm_rf(char *dir)
{
    t_rm_tree(dir);
    free(dir);
}

/* ---- whole files ------------------------------------------------------------ */

/* dir/name, malloc'd. */
static inline char *t_path(const char *dir, const char *name)
{
    char *p;
    if (asprintf(&p, "%s/%s", dir, name) < 0)
        abort();
    return p;
}

/* Whole file into memory (NUL-terminated); NULL on error. */
static inline uint8_t *t_read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = n >= 0 ? (uint8_t *)malloc((size_t)n + 1) : NULL;
    if (!b || fread(b, 1, (size_t)n, f) != (size_t)n) {
        free(b);
        fclose(f);
        return NULL;
    }
    b[n] = 0;
    fclose(f);
    if (len)
        *len = (size_t)n;
    return b;
}

/* Writes a whole file; aborts on error. */
static inline void t_write(const char *path, const void *data, size_t len)
{
    FILE *f = fopen(path, "wb");
    if (!f || fwrite(data, 1, len, f) != len || fclose(f)) {
        perror(path);
        abort();
    }
}

static inline void t_write_text(const char *path, const char *text)
{
    t_write(path, text, strlen(text));
}

static inline void t_copy(const char *src, const char *dst)
{
    size_t n;
    uint8_t *b = t_read(src, &n);
    if (!b) {
        perror(src);
        abort();
    }
    t_write(dst, b, n);
    free(b);
}
