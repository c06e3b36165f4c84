/* fuzz_util.c - the scratch directory the fuzz targets write their inputs
 * to (the parsers under test read files, as the daemon does). */
#include "fuzz.h"

#include <string.h>

static char *dir;

/* At exit: the directory and the inputs last written into it. */
static void remove_dir(void)
{
    t_rm_rf(dir);
    dir = NULL;
}

const char *fuzz_dir(void)
{
    if (!dir) {
        dir = t_mkdtemp();
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
