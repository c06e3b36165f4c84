/* test_read_file.c - read_file.h, the one way llama8 opens what it reads:
 * each kind of file that is not a regular one is refused at once, named
 * (a FIFO with no writer, which open() would wait on for ever; /dev/zero,
 * which never ends; a socket; a directory), a link is followed, a file over
 * the bound is refused before it is read, and one that grows while read
 * is refused rather than cut. alarm() turns a hang into a failure. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <sys/socket.h>
#include <sys/un.h>

#include "read_file.h"
#include "../test.h"

static char err[512];

/* l8_read_file of path: its return, with the buffer compared to want (NULL:
 * not read) and freed. */
static int read_as(const char *path, size_t max, const char *want)
{
    char *buf = (char *)&err;   /* must stay untouched on failure */
    char *const sentinel = buf;
    size_t len = 12345;
    err[0] = 0;
    int r = l8_read_file(path, max, &buf, &len, err, sizeof err);
    if (r == 0) {
        CHECK(want && len == strlen(want) && !memcmp(buf, want, len) && buf[len] == 0,
              "%s: read %zu bytes", path, len);
        free(buf);
    } else {
        CHECK(buf == sentinel && len == 12345, "%s: output written on failure", path);
        CHECK(strstr(err, path) == err, "%s: the message does not start with the path: %s",
              path, err);
    }
    return r;
}

#define EXPECT_REFUSED(path, max, code, what)                                           \
    do {                                                                                \
        int r_ = read_as((path), (max), NULL);                                          \
        CHECK(r_ == (code) && strstr(err, (what)), "%s: %d '%s', expected %d '%s'",     \
              (path), r_, err, (code), (what));                                         \
    } while (0)

struct grower {
    const char *path;
    size_t total;
    volatile bool done;
};

/* Appends 4 KiB blocks of 'a' + block % 26 until total bytes are there. */
static void *grow(void *p)
{
    struct grower *g = p;
    int fd = open(g->path, O_WRONLY | O_APPEND | O_CLOEXEC);
    char block[4096];
    for (size_t off = 0; fd >= 0 && off < g->total; off += sizeof block) {
        memset(block, 'a' + (int)(off / sizeof block % 26), sizeof block);
        if (write(fd, block, sizeof block) != (ssize_t)sizeof block)
            break;
    }
    if (fd >= 0)
        close(fd);
    g->done = true;
    return NULL;
}

/* Reads while another thread appends: each read is the whole file as it
 * was when opened (every block intact) or a refusal saying it grew. */
static void test_growing(const char *dir)
{
    char path[4200];
    snprintf(path, sizeof path, "%s/growing", dir);
    t_write_text(path, "");
    struct grower g = { .path = path, .total = 32u << 20 };
    pthread_t th;
    REQUIRE(pthread_create(&th, NULL, grow, &g) == 0);
    int reads = 0, grew = 0;
    while (!g.done) {
        char *buf;
        size_t len;
        int r = l8_read_file(path, 64u << 20, &buf, &len, err, sizeof err);
        reads++;
        if (r) {
            grew++;
            CHECK(r == -EIO && strstr(err, "grew while being read"), "%d %s", r, err);
            continue;
        }
        bool intact = true;
        for (size_t i = 0; i < len; i++)
            intact &= buf[i] == 'a' + (int)(i / 4096 % 26);
        CHECK(intact, "a read while the file grew is not what was written (%zu bytes)", len);
        free(buf);
    }
    pthread_join(th, NULL);
    printf("growing file: %d reads, %d refused as grown\n", reads, grew);
}

int main(void)
{
    alarm(60);  /* a hang (the defect this guards) fails instead of waiting for meson */
    char *dir = t_mkdtemp();
    char path[4200], link[4200];

    /* A regular file and a link to one: read whole; exactly max is allowed. */
    snprintf(path, sizeof path, "%s/regular", dir);
    t_write_text(path, "{\"a\": 1}\n");
    CHECK_EQ(read_as(path, 1 << 20, "{\"a\": 1}\n"), 0);
    CHECK_EQ(read_as(path, 9, "{\"a\": 1}\n"), 0);
    snprintf(link, sizeof link, "%s/link", dir);
    REQUIRE(symlink(path, link) == 0);
    CHECK_EQ(read_as(link, 1 << 20, "{\"a\": 1}\n"), 0);
    uint64_t size = 0;
    int fd = l8_open_regular(path, 9, &size, err, sizeof err);
    CHECK(fd >= 0 && size == 9, "l8_open_regular: %d %s", fd, err);
    if (fd >= 0) {
        CHECK(fcntl(fd, F_GETFD) & FD_CLOEXEC, "close-on-exec");
        close(fd);
    }
    t_write_text(path, "");
    CHECK_EQ(read_as(path, 0, ""), 0);

    /* Over the bound: refused from its size, before a byte is read. */
    REQUIRE(truncate(path, 10) == 0);
    EXPECT_REFUSED(path, 9, -EFBIG, "is larger than 9 bytes");
    REQUIRE(truncate(path, (off_t)1 << 40) == 0);   /* sparse: 1 TiB */
    EXPECT_REFUSED(path, 256u << 20, -EFBIG, "is larger than 268435456 bytes");
    CHECK_EQ(l8_open_regular(path, 1u << 30, NULL, err, sizeof err), -EFBIG);

    /* A FIFO without a writer: open() would block; refused at once. A link
     * to one too. */
    snprintf(path, sizeof path, "%s/fifo", dir);
    REQUIRE(mkfifo(path, 0600) == 0);
    uint64_t t0 = t_now_ms();
    EXPECT_REFUSED(path, 1 << 20, -EINVAL, "is a FIFO, not a regular file");
    CHECK(t_now_ms() - t0 < 5000, "the FIFO took %llu ms", (unsigned long long)(t_now_ms() - t0));
    snprintf(link, sizeof link, "%s/fifo-link", dir);
    REQUIRE(symlink(path, link) == 0);
    EXPECT_REFUSED(link, 1 << 20, -EINVAL, "is a FIFO");
    CHECK_EQ(l8_open_regular(path, UINT64_MAX, NULL, NULL, 0), -EINVAL);

    /* Character devices: /dev/zero never ends; /dev/null is the empty file
     * to l8_read_file (`--config /dev/null`), not to l8_open_regular. */
    EXPECT_REFUSED("/dev/zero", 1 << 20, -EINVAL, "is a character device, not a regular file");
    CHECK_EQ(read_as("/dev/null", 1 << 20, ""), 0);
    CHECK_EQ(l8_open_regular("/dev/null", 1 << 20, NULL, err, sizeof err), -EINVAL);
    CHECK(strstr(err, "/dev/null: is a character device"), "%s", err);
    struct stat st;
    CHECK(stat("/dev/null", &st) == 0 && !l8_file_kind(&st), "/dev/null's kind");
    CHECK(stat("/dev/zero", &st) == 0 && l8_file_kind(&st) &&
          !strcmp(l8_file_kind(&st), "a character device"), "/dev/zero's kind");

    /* A socket (which open() refuses: ENXIO) and a directory. */
    struct sockaddr_un sa = { .sun_family = AF_UNIX };
    int n = snprintf(sa.sun_path, sizeof sa.sun_path, "%s/sock", dir);
    if (n > 0 && (size_t)n < sizeof sa.sun_path) {
        int s = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
        REQUIRE(s >= 0 && bind(s, (struct sockaddr *)&sa, sizeof sa) == 0, "bind %s", sa.sun_path);
        EXPECT_REFUSED(sa.sun_path, 1 << 20, -EINVAL, "is a socket, not a regular file");
        close(s);
    } else {
        printf("socket: skipped, %s is too long a path\n", dir);
    }
    EXPECT_REFUSED(dir, 1 << 20, -EISDIR, "is a directory, not a regular file");

    /* A file that says 0 bytes and has more (as /proc's) is refused, not cut. */
    EXPECT_REFUSED("/proc/self/status", 1 << 20, -EIO, "grew while being read");
    snprintf(path, sizeof path, "%s/missing", dir);
    EXPECT_REFUSED(path, 1 << 20, -ENOENT, "No such file or directory");

    test_growing(dir);
    t_rm_rf(dir);
    return t_result("test_read_file");
}
