/* cuda_tune.c - the GEMV / cuBLASLt crossover and cuBLASLt's algorithms,
 * measured and kept. See cuda_tune.h. */
#include "cuda_tune.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "proto/l8_clock.h"
#include "read_file.h"

#define TUNE_REPS 3
#define TUNE_FILE_MAX (1u << 20)
#define TUNE_HEADER "# llama8 cuda engine: the most token rows each product runs through the " \
                    "GEMV, and cuBLASLt's algorithms by row count (cuda_tune.h). Delete a " \
                    "line to measure again.\n"

const char *const l8_tune_product_name[L8_TP_N] = { "qkv", "o", "gate_up", "down", "lm_head" };

/* One timed call: a path of the crossover (run) or a cuBLASLt candidate
 * (algo). */
struct call {
    l8_tune_run_fn run;
    l8_tune_algo_fn algo;
    void *ctx;
    enum l8_tune_product p;
    uint32_t M, rank;
    bool gemm;
};

static int do_call(const struct call *c)
{
    return c->algo ? c->algo(c->ctx, c->p, c->M, c->rank) : c->run(c->ctx, c->p, c->M, c->gemm);
}

/* What a measurement times with and reports into. */
struct meter {
    cudaStream_t st;
    cudaEvent_t a, b;
    double t0;
    char *report;
    size_t len, used;
    int rc;   /* -EIO once the stream is broken */
};

static int meter_open(struct meter *m, cudaStream_t st, char *report, size_t len)
{
    *m = (struct meter){ .st = st, .t0 = l8_now_s(), .report = report, .len = len };
    if (len)
        report[0] = 0;
    if (cudaEventCreate(&m->a) != cudaSuccess || cudaEventCreate(&m->b) != cudaSuccess)
        m->rc = -EIO;
    return m->rc;
}

static void meter_say(struct meter *m, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void meter_say(struct meter *m, const char *fmt, ...)
{
    if (m->used >= m->len)
        return;
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(m->report + m->used, m->len - m->used, fmt, ap);
    va_end(ap);
    m->used += n > 0 ? (size_t)n : 0;
}

/* Ends the report with the measurement's own time. */
static int meter_close(struct meter *m)
{
    if (!m->rc)
        meter_say(m, "(measured in %.0f ms)\n", (l8_now_s() - m->t0) * 1e3);
    if (m->a)
        cudaEventDestroy(m->a);
    if (m->b)
        cudaEventDestroy(m->b);
    return m->rc;
}

/* The fastest of TUNE_REPS calls after a warm-up, in microseconds; INFINITY
 * when it cannot run (*why: the warm-up's return). */
static double time_call(struct meter *m, const struct call *c, int *why)
{
    if ((*why = do_call(c)) || cudaStreamSynchronize(m->st) != cudaSuccess) {
        cudaGetLastError();
        cudaStreamSynchronize(m->st);
        if (cudaGetLastError() != cudaSuccess)
            m->rc = -EIO;   /* the stream is broken, not just this path */
        return INFINITY;
    }
    double best = INFINITY;
    for (int r = 0; r < TUNE_REPS; r++) {
        float ms = 0;
        if (cudaEventRecord(m->a, m->st) != cudaSuccess || do_call(c) ||
            cudaEventRecord(m->b, m->st) != cudaSuccess ||
            cudaEventSynchronize(m->b) != cudaSuccess ||
            cudaEventElapsedTime(&ms, m->a, m->b) != cudaSuccess) {
            m->rc = -EIO;
            return INFINITY;
        }
        if (ms * 1e3 < best)
            best = ms * 1e3;
    }
    return best;
}

int l8_tune_measure(cudaStream_t st, l8_tune_run_fn run, void *ctx, struct l8_tune *t,
                    char *report, size_t report_len)
{
    struct meter m;
    if (meter_open(&m, st, report, report_len))
        return meter_close(&m);
    for (int p = 0; p < L8_TP_N && !m.rc; p++) {
        char line[512] = "";
        int n = 0, why;
        uint32_t thr = 0;
        for (uint32_t M = 1; M <= L8_TUNE_MAX_M && !m.rc; M *= 2) {
            struct call c = { .run = run, .ctx = ctx, .p = (enum l8_tune_product)p, .M = M };
            double g = time_call(&m, &c, &why);
            c.gemm = true;
            double l = isinf(g) ? INFINITY : time_call(&m, &c, &why);
            if (n < (int)sizeof line)
                n += snprintf(line + n, sizeof line - (size_t)n, "%s%u %.1f/%.1f",
                              M == 1 ? "" : ", ", M, g, l);
            if (isinf(g) || g > l)
                break;
            thr = M;
        }
        t->gemv_max_m[p] = thr;
        meter_say(&m, "%s: GEMV up to %u rows (M gemv/cuBLASLt us: %s)\n",
                  l8_tune_product_name[p], thr, line);
    }
    return meter_close(&m);
}

int l8_tune_measure_algos(cudaStream_t st, l8_tune_algo_fn run, void *ctx, uint32_t M,
                          struct l8_algo_set *set, char *report, size_t report_len)
{
    struct meter m;
    if (meter_open(&m, st, report, report_len))
        return meter_close(&m);
    for (int p = 0; p < L8_TUNE_FP8 && !m.rc; p++) {
        char line[512] = "";
        int n = 0, why;
        double first = INFINITY, best = INFINITY;
        uint32_t pick = 0;
        for (uint32_t r = 0; r < L8_TUNE_ALGOS && !m.rc; r++) {
            const struct call c = { .algo = run, .ctx = ctx, .p = (enum l8_tune_product)p,
                                    .M = M, .rank = r };
            double us = time_call(&m, &c, &why);
            if (why == -ENOENT)
                break;
            if (n < (int)sizeof line)
                n += snprintf(line + n, sizeof line - (size_t)n, "%s%.1f", r ? " " : "", us);
            if (r == 0)
                first = us;
            if (us < best) {
                best = us;
                pick = r;
            }
        }
        if (!(best < first * 0.97))   /* within noise of the first (or none ran) */
            pick = 0;
        set->rank[p] = pick;
        meter_say(&m, "%s: cuBLASLt candidate %u at %u rows (us: %s)\n",
                  l8_tune_product_name[p], pick, M, n ? line : "none ran");
    }
    set->m = M;
    return meter_close(&m);
}

const struct l8_algo_set *l8_tune_algos(const struct l8_tune *t, uint32_t M)
{
    for (uint32_t i = 0; i < t->n_sets; i++)
        if (t->set[i].m == M)
            return &t->set[i];
    return NULL;
}

void l8_tune_add_algos(struct l8_tune *t, const struct l8_algo_set *s)
{
    struct l8_algo_set *same = (struct l8_algo_set *)l8_tune_algos(t, s->m);
    if (same) {
        *same = *s;
        return;
    }
    if (t->n_sets == L8_TUNE_ALGO_SETS) {
        memmove(&t->set[0], &t->set[1], (L8_TUNE_ALGO_SETS - 1) * sizeof t->set[0]);
        t->n_sets--;
    }
    t->set[t->n_sets++] = *s;
}

/* ---- the file ------------------------------------------------------------ */

/* The length of the line at l (up to its newline or end). */
static size_t line_len(const char *l, const char *end)
{
    const char *nl = memchr(l, '\n', (size_t)(end - l));
    return nl ? (size_t)(nl - l) : (size_t)(end - l);
}

/* Whether line (len bytes, no newline) is key's. */
static bool line_is(const char *line, size_t len, const char *key)
{
    size_t kl = strlen(key);
    return len > kl && memcmp(line, key, kl) == 0 && line[kl] == '\t';
}

/* An unsigned number at *p (<= max), then a space or the end. */
static int parse_u32(char **p, unsigned long max, uint32_t *v)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(*p, &end, 10);
    if (end == *p || **p < '0' || **p > '9' || errno || x > max || (*end && *end != ' '))
        return -EINVAL;
    *v = (uint32_t)x;
    *p = end;
    return 0;
}

/* "name N name N ..." for the first n products, each N <= max. */
static int parse_named(char **pp, int n, unsigned long max, uint32_t *v)
{
    char *p = *pp;
    for (int i = 0; i < n; i++) {
        size_t nl = strlen(l8_tune_product_name[i]);
        while (*p == ' ')
            p++;
        if (strncmp(p, l8_tune_product_name[i], nl) || p[nl] != ' ')
            return -EINVAL;
        p += nl + 1;
        if (parse_u32(&p, max, &v[i]))
            return -EINVAL;
    }
    while (*p == ' ')
        p++;
    *pp = p;
    return 0;
}

static int parse_values(const char *s, size_t len, struct l8_tune *t)
{
    char buf[512];
    if (len >= sizeof buf)
        return -EINVAL;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *p = buf;
    if (parse_named(&p, L8_TP_N, L8_TUNE_MAX_M, t->gemv_max_m))
        return -EINVAL;
    static const char algos[] = "| algos at ";
    for (t->n_sets = 0; *p; t->n_sets++) {
        struct l8_algo_set *a = &t->set[t->n_sets];
        if (t->n_sets == L8_TUNE_ALGO_SETS || strncmp(p, algos, sizeof algos - 1))
            return -EINVAL;
        p += sizeof algos - 1;
        char *colon = strchr(p, ':');
        if (!colon || colon[1] != ' ')
            return -EINVAL;
        *colon = ' ';
        if (parse_u32(&p, UINT32_MAX, &a->m) || a->m == 0 || *p != ' ' ||
            parse_named(&p, L8_TUNE_FP8, L8_TUNE_ALGOS - 1, a->rank) ||
            l8_tune_algos(t, a->m))   /* a row count twice (a is not counted yet) */
            return -EINVAL;
    }
    return 0;
}

int l8_tune_load(const char *path, const char *key, struct l8_tune *t, char *err, size_t err_len)
{
    char *buf;
    size_t len;
    int rc = l8_read_file(path, TUNE_FILE_MAX, &buf, &len, err, err_len);
    if (rc)
        return rc == -ENOENT || rc == -ENOMEM ? rc : -EINVAL;
    rc = -ENOENT;
    unsigned lineno = 0;
    for (char *l = buf; l < buf + len && rc == -ENOENT; lineno++) {
        const size_t ll = line_len(l, buf + len);
        if (line_is(l, ll, key)) {
            size_t kl = strlen(key) + 1;
            struct l8_tune v;
            if (parse_values(l + kl, ll - kl, &v) == 0) {
                *t = v;
                rc = 0;
            } else {
                snprintf(err, err_len, "%s:%u: expected \"qkv N o N gate_up N down N lm_head N\" "
                         "with N <= %u, then maybe \"| algos at M: qkv R o R gate_up R down "
                         "R\" with R < %u", path, lineno + 1, L8_TUNE_MAX_M, L8_TUNE_ALGOS);
                rc = -EINVAL;
            }
        }
        l += ll + 1;
    }
    free(buf);
    return rc;
}

int l8_tune_save(const char *path, const char *key, const struct l8_tune *t)
{
    char *old = NULL, tmp[4096];
    size_t len = 0;
    int rc = l8_read_file(path, TUNE_FILE_MAX, &old, &len, NULL, 0);
    if (rc && rc != -ENOENT)
        return rc;
    if (snprintf(tmp, sizeof tmp, "%s.tmp.%ld", path, (long)getpid()) >= (int)sizeof tmp) {
        free(old);
        return -ENAMETOOLONG;
    }
    FILE *f = fopen(tmp, "w");
    if (!f) {
        rc = -errno;
        free(old);
        return rc;
    }
    if (!old)
        fputs(TUNE_HEADER, f);
    for (char *l = old; l && l < old + len;) {
        const size_t ll = line_len(l, old + len);
        if (!line_is(l, ll, key)) {
            fwrite(l, 1, ll, f);
            fputc('\n', f);
        }
        l += ll + 1;
    }
    free(old);
    fprintf(f, "%s\t", key);
    for (int i = 0; i < L8_TP_N; i++)
        fprintf(f, "%s%s %u", i ? " " : "", l8_tune_product_name[i], t->gemv_max_m[i]);
    for (uint32_t s = 0; s < t->n_sets; s++) {
        fprintf(f, " | algos at %u:", t->set[s].m);
        for (int i = 0; i < L8_TUNE_FP8; i++)
            fprintf(f, " %s %u", l8_tune_product_name[i], t->set[s].rank[i]);
    }
    fputc('\n', f);
    rc = fflush(f) || fsync(fileno(f)) ? -errno : 0;
    if (fclose(f) && !rc)
        rc = -errno;
    if (!rc && rename(tmp, path))
        rc = -errno;
    if (rc)
        unlink(tmp);
    return rc;
}
