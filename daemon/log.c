/* log.c - see log.h. The level is the one piece of process-wide state:
 * logging is called from everywhere and the level never changes after
 * start-up. */
#include "log.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static enum l8_log_level log_max = L8_LOG_INFO;
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
    log_max = max_level;
    log_journal = stderr_is_journal();
}

void l8_log_set_level(enum l8_log_level max_level) { log_max = max_level; }

bool l8_log_enabled(enum l8_log_level level) { return level <= log_max; }

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
    if (level > log_max)
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
