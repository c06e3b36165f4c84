/* read_file.c - opening and reading the files llama8 reads (read_file.h). */
#include "read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

__attribute__((format(printf, 4, 5)))
static int fail(char *err, size_t errlen, int code, const char *fmt, ...)
{
    if (err && errlen) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return code;
}

static const char *kind_of(mode_t mode)
{
    switch (mode & S_IFMT) {
    case S_IFREG: return NULL;
    case S_IFDIR: return "a directory";
    case S_IFIFO: return "a FIFO";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    case S_IFSOCK: return "a socket";
    default: return "an unknown kind of file";
    }
}

/* Linux's null device (mem driver, minor 3): it reads as empty at once. */
static bool is_null_device(const struct stat *st)
{
    return S_ISCHR(st->st_mode) && major(st->st_rdev) == 1 && minor(st->st_rdev) == 3;
}

const char *l8_file_kind(const struct stat *st)
{
    return is_null_device(st) ? NULL : kind_of(st->st_mode);
}

static int open_checked(const char *path, uint64_t max, bool null_ok, uint64_t *size, char *err,
                        size_t errlen)
{
    /* O_NONBLOCK: open() of a FIFO would wait for a writer; O_NOCTTY: a
     * terminal must not become ours. Neither changes reading a regular file. */
    int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
    struct stat st;
    int r;
    const char *kind;
    if (fd < 0) {
        /* ENXIO: a socket (or a device without its driver), which open() refuses */
        r = -errno;
        if (r == -ENXIO && stat(path, &st) == 0 && (kind = kind_of(st.st_mode)))
            return fail(err, errlen, -EINVAL, "%s: is %s, not a regular file", path, kind);
        return fail(err, errlen, r, "%s: %s", path, strerror(-r));
    }
    if (fstat(fd, &st) < 0)
        r = fail(err, errlen, -errno, "%s: %s", path, strerror(errno));
    else if ((kind = null_ok ? l8_file_kind(&st) : kind_of(st.st_mode)))
        r = fail(err, errlen, S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL,
                 "%s: is %s, not a regular file", path, kind);
    else if ((uint64_t)st.st_size > max)
        r = fail(err, errlen, -EFBIG, "%s: is larger than %llu bytes (%llu)", path,
                 (unsigned long long)max, (unsigned long long)st.st_size);
    else {
        if (size)
            *size = S_ISREG(st.st_mode) ? (uint64_t)st.st_size : 0;
        return fd;
    }
    close(fd);
    return r;
}

int l8_open_regular(const char *path, uint64_t max, uint64_t *size, char *err, size_t errlen)
{
    return open_checked(path, max, false, size, err, errlen);
}

int l8_read_file(const char *path, size_t max, char **out, size_t *len, char *err,
                 size_t errlen)
{
    uint64_t size;
    int fd = open_checked(path, max, true, &size, err, errlen);
    if (fd < 0)
        return fd;
    int r = 0;
    char *buf = malloc((size_t)size + 1);
    if (!buf) {
        r = fail(err, errlen, -ENOMEM, "%s: out of memory", path);
        goto out;
    }
    /* One byte past the size fstat gave: a file that grew (or, as files in
     * /proc, says 0 and has more) is refused like one that shrank. */
    size_t got = 0;
    for (;;) {
        char extra;
        ssize_t n = got < size ? read(fd, buf + got, (size_t)size - got) : read(fd, &extra, 1);
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0) {
            r = fail(err, errlen, -errno, "%s: read failed: %s", path, strerror(errno));
            goto out;
        }
        if (got == size && n == 0)
            break;
        if (n == 0 || got == size) {
            r = fail(err, errlen, -EIO, "%s: %s while being read (%llu bytes at the start)",
                     path, n ? "grew" : "shrank", (unsigned long long)size);
            goto out;
        }
        got += (size_t)n;
    }
    buf[got] = 0;
    *out = buf;
    if (len)
        *len = got;
    buf = NULL;
out:
    free(buf);
    close(fd);
    return r;
}
