/* cuda_tune.c - the GEMV / cuBLASLt crossover, measured and kept. See
 * cuda_tune.h. */
#include "cuda_tune.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mono_clock.h"

#define TUNE_REPS 3
#define TUNE_FILE_MAX (1u << 20)
#define TUNE_HEADER "# llama8 cuda engine: the most token rows each product runs through the " \
                    "GEMV (cuda_tune.h). Delete a line to measure again.\n"

const char *const l8_tune_product_name[L8_TP_N] = { "qkv", "o", "gate_up", "down", "lm_head" };

/* The fastest of TUNE_REPS runs after a warm-up, in microseconds; INFINITY
 * when the path cannot run it. */
static double time_path(cudaStream_t st, l8_tune_run_fn run, void *ctx, enum l8_tune_product p,
                        uint32_t M, bool gemm, cudaEvent_t a, cudaEvent_t b, int *rc)
{
    if (run(ctx, p, M, gemm) || cudaStreamSynchronize(st) != cudaSuccess) {
        cudaGetLastError();
        cudaStreamSynchronize(st);
        if (cudaGetLastError() != cudaSuccess)
            *rc = -EIO;   /* the stream is broken, not just this path */
        return INFINITY;
    }
    double best = INFINITY;
    for (int r = 0; r < TUNE_REPS; r++) {
        float ms = 0;
        if (cudaEventRecord(a, st) != cudaSuccess || run(ctx, p, M, gemm) ||
            cudaEventRecord(b, st) != cudaSuccess || cudaEventSynchronize(b) != cudaSuccess ||
            cudaEventElapsedTime(&ms, a, b) != cudaSuccess) {
            *rc = -EIO;
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
    cudaEvent_t a = NULL, b = NULL;
    int rc = 0;
    size_t used = 0;
    const double t0 = l8_mono_s();
    if (report_len)
        report[0] = 0;
    if (cudaEventCreate(&a) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess) {
        rc = -EIO;
        goto out;
    }
    for (int p = 0; p < L8_TP_N && !rc; p++) {
        char line[512];
        int n = 0;
        uint32_t thr = 0;
        for (uint32_t M = 1; M <= L8_TUNE_MAX_M && !rc; M *= 2) {
            double g = time_path(st, run, ctx, (enum l8_tune_product)p, M, false, a, b, &rc);
            double l = isinf(g) ? INFINITY
                                : time_path(st, run, ctx, (enum l8_tune_product)p, M, true, a, b, &rc);
            if (n < (int)sizeof line)
                n += snprintf(line + n, sizeof line - (size_t)n, "%s%u %.1f/%.1f",
                              M == 1 ? "" : ", ", M, g, l);
            if (isinf(g) || g > l)
                break;
            thr = M;
        }
        t->gemv_max_m[p] = thr;
        if (used < report_len)
            used += (size_t)snprintf(report + used, report_len - used,
                                     "%s: GEMV up to %u rows (M gemv/cuBLASLt us: %s)\n",
                                     l8_tune_product_name[p], thr, line);
    }
    if (used < report_len)
        snprintf(report + used, report_len - used, "(measured in %.0f ms)\n",
                 (l8_mono_s() - t0) * 1e3);
out:
    if (a)
        cudaEventDestroy(a);
    if (b)
        cudaEventDestroy(b);
    return rc;
}

/* ---- the file ------------------------------------------------------------ */

/* The whole file, NUL-terminated (*len without it); -ENOENT if missing. */
static int slurp(const char *path, char **out, size_t *len)
{
    FILE *f = fopen(path, "r");
    if (!f)
        return -errno;
    char *buf = malloc(TUNE_FILE_MAX + 1);
    if (!buf) {
        fclose(f);
        return -ENOMEM;
    }
    size_t n = fread(buf, 1, TUNE_FILE_MAX + 1, f);
    int bad = ferror(f);
    fclose(f);
    if (bad || n > TUNE_FILE_MAX) {
        free(buf);
        return bad ? -EIO : -EFBIG;
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return 0;
}

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

static int parse_values(const char *s, size_t len, struct l8_tune *t)
{
    char buf[256];
    if (len >= sizeof buf)
        return -EINVAL;
    memcpy(buf, s, len);
    buf[len] = 0;
    char *p = buf;
    for (int i = 0; i < L8_TP_N; i++) {
        size_t nl = strlen(l8_tune_product_name[i]);
        while (*p == ' ')
            p++;
        if (strncmp(p, l8_tune_product_name[i], nl) || p[nl] != ' ')
            return -EINVAL;
        p += nl + 1;
        char *end;
        errno = 0;
        unsigned long v = strtoul(p, &end, 10);
        if (end == p || errno || v > L8_TUNE_MAX_M || (*end && *end != ' '))
            return -EINVAL;
        t->gemv_max_m[i] = (uint32_t)v;
        p = end;
    }
    while (*p == ' ')
        p++;
    return *p ? -EINVAL : 0;
}

int l8_tune_load(const char *path, const char *key, struct l8_tune *t, char *err, size_t err_len)
{
    char *buf;
    size_t len;
    int rc = slurp(path, &buf, &len);
    if (rc == -EFBIG || rc == -EIO)
        snprintf(err, err_len, "%s: %s", path, rc == -EFBIG ? "larger than 1 MiB" : "read error");
    if (rc)
        return rc == -EFBIG || rc == -EIO ? -EINVAL : rc;
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
                         "with N <= %u", path, lineno + 1, L8_TUNE_MAX_M);
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
    int rc = slurp(path, &old, &len);
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
