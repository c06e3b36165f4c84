/* fuzz_util.c - the scratch directory the fuzz targets write their inputs
 * to (the parsers under test read files, as the daemon does). */
#include "fuzz.h"

#include <dirent.h>
#include <string.h>
#include <unistd.h>

static char dir[256];

/* At exit: the directory and the inputs last written into it. */
static void remove_dir(void)
{
    DIR *d = opendir(dir);
    for (struct dirent *e; d && (e = readdir(d));)
        if (e->d_name[0] != '.')
            unlinkat(dirfd(d), e->d_name, 0);
    if (d)
        closedir(d);
    rmdir(dir);
}

const char *fuzz_dir(void)
{
    if (!dir[0]) {
        const char *t = getenv("TMPDIR");
        snprintf(dir, sizeof dir, "%s/l8-fuzz-XXXXXX", t && *t ? t : "/tmp");
        FUZZ_CHECK(mkdtemp(dir));
        atexit(remove_dir);
    }
    return dir;
}

const char *fuzz_write(const char *name, const uint8_t *data, size_t size)
{
    static char path[512];
    snprintf(path, sizeof path, "%s/%s", fuzz_dir(), name);
    FILE *f = fopen(path, "w");
    FUZZ_CHECK(f && fwrite(data, 1, size, f) == size && fclose(f) == 0);
    return path;
}
