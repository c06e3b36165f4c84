/* read_file.c - whole-file reads for daemon/model and its tools. */
#include "read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fail.h"

int l8_read_file(const char *path, size_t max, char **out, size_t *len,
                 char err[L8_ERRLEN])
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return l8_fail_code(err, -errno, "%s: %s", path, strerror(errno));
    struct stat st;
    char *buf = NULL;
    int r = 0;
    if (fstat(fd, &st) < 0) {
        r = l8_fail_code(err, -errno, "%s: %s", path, strerror(errno));
        goto out;
    }
    if (!S_ISREG(st.st_mode) || (uint64_t)st.st_size > max) {
        r = l8_fail(err, "%s: not a regular file of at most %zu bytes", path, max);
        goto out;
    }
    if (!(buf = malloc((size_t)st.st_size + 1))) {
        r = l8_fail_code(err, -ENOMEM, "%s: out of memory", path);
        goto out;
    }
    size_t got = 0;
    while (got < (size_t)st.st_size) {
        ssize_t n = read(fd, buf + got, (size_t)st.st_size - got);
        if (n < 0 && errno == EINTR)
            continue;
        if (n <= 0) {   /* 0: the file shrank under us */
            int e = n < 0 ? errno : EIO;
            r = l8_fail_code(err, -e, "%s: read failed: %s", path, strerror(e));
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
