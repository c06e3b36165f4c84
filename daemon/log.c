/* log.c - see log.h. The level is the one piece of process-wide state:
 * logging is called from everywhere. A reload (the event loop's thread)
 * may change it while others log. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <syslog.h>
#include <unistd.h>

_Static_assert(L8_LOG_ERR == LOG_ERR && L8_LOG_WARNING == LOG_WARNING &&
                   L8_LOG_NOTICE == LOG_NOTICE && L8_LOG_INFO == LOG_INFO &&
                   L8_LOG_DEBUG == LOG_DEBUG,
               "log levels are syslog's (the engine's callback passes those)");

static atomic_int log_max = L8_LOG_INFO;
static bool log_journal;

static const char *const level_names[8] = {
    [L8_LOG_ERR] = "err", [L8_LOG_WARNING] = "warning", [L8_LOG_NOTICE] = "notice",
    [L8_LOG_INFO] = "info", [L8_LOG_DEBUG] = "debug",
};

/* stderr goes to the journal when JOURNAL_STREAM names its device:inode. */
static bool stderr_is_journal(void)
{
    const char *e = getenv("JOURNAL_STREAM");
    unsigned long dev, ino;
    struct stat st;
    if (!e || sscanf(e, "%lu:%lu", &dev, &ino) != 2 || fstat(STDERR_FILENO, &st) < 0)
        return false;
    return st.st_dev == dev && st.st_ino == ino;
}

void l8_log_init(enum l8_log_level max_level)
{
    atomic_store_explicit(&log_max, max_level, memory_order_relaxed);
    log_journal = stderr_is_journal();
}

void l8_log_set_level(enum l8_log_level max_level)
{
    atomic_store_explicit(&log_max, max_level, memory_order_relaxed);
}

const char *l8_log_level_name(enum l8_log_level level)
{
    return level >= L8_LOG_ERR && level <= L8_LOG_DEBUG ? level_names[level] : "?";
}

/* Length of the well-formed UTF-8 character at s[0, n) (Unicode table 3-7:
 * no overlongs, surrogates or code points past U+10FFFF), or 0. */
static size_t utf8_char(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0x80 ? 1 : s[0] >= 0xc2 && s[0] <= 0xdf ? 2
               : s[0] >= 0xe0 && s[0] <= 0xef ? 3 : s[0] >= 0xf0 && s[0] <= 0xf4 ? 4 : 0;
    if (!len || len > n)
        return 0;
    unsigned char lo = 0x80, hi = 0xbf;   /* the second byte's range */
    if (s[0] == 0xe0) lo = 0xa0;
    else if (s[0] == 0xed) hi = 0x9f;
    else if (s[0] == 0xf0) lo = 0x90;
    else if (s[0] == 0xf4) hi = 0x8f;
    for (size_t i = 1; i < len; i++)
        if (s[i] < (i == 1 ? lo : 0x80) || s[i] > (i == 1 ? hi : 0xbf))
            return 0;
    return len;
}

void l8_log_text(char *dst, size_t cap, const char *src, size_t n)
{
    const unsigned char *s = (const unsigned char *)src;
    size_t o = 0;
    if (!cap)
        return;
    for (size_t i = 0; i < n;) {
        size_t len = utf8_char(s + i, n - i);
        bool control = len == 1 ? s[i] < 0x20 || s[i] == 0x7f : len == 2 && s[i] == 0xc2 &&
                                                                   s[i + 1] < 0xa0;
        if (!len || control) {
            len = len ? len : 1;   /* a control character: one '?' */
            if (o + 1 >= cap)
                break;
            dst[o++] = '?';
        } else {
            if (o + len >= cap)
                break;
            memcpy(dst + o, s + i, len);
            o += len;
        }
        i += len;
    }
    dst[o] = 0;
}

bool l8_log_enabled(enum l8_log_level level)
{
    return (int)level <= atomic_load_explicit(&log_max, memory_order_relaxed);
}

int l8_log_parse_level(const char *s, enum l8_log_level *out)
{
    for (int i = L8_LOG_ERR; i <= L8_LOG_DEBUG; i++) {
        if (level_names[i] && strcmp(s, level_names[i]) == 0) {
            *out = (enum l8_log_level)i;
            return 0;
        }
    }
    if (strcmp(s, "warn") == 0 || strcmp(s, "error") == 0) {
        *out = s[0] == 'w' ? L8_LOG_WARNING : L8_LOG_ERR;
        return 0;
    }
    if (s[0] >= '3' && s[0] <= '7' && !s[1]) {
        *out = (enum l8_log_level)(s[0] - '0');
        return 0;
    }
    return -EINVAL;
}

void l8_log(enum l8_log_level level, const char *fmt, ...)
{
    char line[1024];
    int n;
    if (!l8_log_enabled(level))
        return;
    if (log_journal)
        n = snprintf(line, sizeof(line), "<%d>", (int)level);
    else if (level <= L8_LOG_WARNING)
        n = snprintf(line, sizeof(line), "llama8d: %s: ", level_names[level]);
    else
        n = snprintf(line, sizeof(line), "llama8d: ");
    va_list ap;
    va_start(ap, fmt);
    int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
    va_end(ap);
    size_t len = (size_t)n + (m < 0 ? 0 : (size_t)m);
    if (len > sizeof(line) - 2)
        len = sizeof(line) - 2;
    line[len++] = '\n';
    /* One write per line so lines from threads never interleave. */
    if (write(STDERR_FILENO, line, len) < 0) {
        /* nowhere left to report it */
    }
}

void l8_log_lines(void *ud, int level, const char *msg)
{
    (void)ud;
    const enum l8_log_level l = level < L8_LOG_ERR ? L8_LOG_ERR
                              : level > L8_LOG_DEBUG ? L8_LOG_DEBUG : (enum l8_log_level)level;
    if (!l8_log_enabled(l))
        return;
    for (const char *p = msg; *p;) {
        size_t n = strcspn(p, "\n");
        if (n)
            l8_log(l, "%.*s", (int)n, p);
        p += n + (p[n] == '\n');
    }
}

bool l8_log_ratelimit(struct l8_ratelimit *rl, uint64_t now_ns, uint64_t *suppressed)
{
    if (rl->started && now_ns - rl->last_ns < L8_LOG_RATE_NS) {
        rl->suppressed++;
        return false;
    }
    *suppressed = rl->suppressed;
    *rl = (struct l8_ratelimit){ .last_ns = now_ns, .started = true };
    return true;
}

const char *l8_log_more(char buf[64], uint64_t suppressed)
{
    buf[0] = 0;
    if (suppressed)
        snprintf(buf, 64, " (%llu more like it not logged)", (unsigned long long)suppressed);
    return buf;
}
