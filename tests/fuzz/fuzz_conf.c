/* fuzz_conf.c - llama8d's configuration: the input is a config file's
 * bytes up to the first NUL, then NUL-separated flags given after
 * --config FILE (at most 16); the file's text also goes through the text
 * parser alone. Accepted: strings terminated, limits inside their rules. */
#include "fuzz.h"

#include <errno.h>
#include <string.h>

#include "conf.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static bool once;
    if (!once) {   /* defaults must not depend on the environment */
        unsetenv("RUNTIME_DIRECTORY");
        unsetenv("CACHE_DIRECTORY");
        once = true;
    }
    const uint8_t *nul = memchr(data, 0, size);
    const size_t flen = nul ? (size_t)(nul - data) : size;
    const char *path = fuzz_write("llama8d.conf", data, flen);
    char *rest = NULL, *argv[20] = { "llama8d", "--config", (char *)path };
    int argc = 3;
    if (nul) {
        const size_t rl = size - flen - 1;
        FUZZ_CHECK((rest = malloc(rl + 1)));
        memcpy(rest, nul + 1, rl);
        rest[rl] = 0;
        for (char *p = rest; p < rest + rl && argc < 19; p += strlen(p) + 1)
            argv[argc++] = p;
    }
    argv[argc] = NULL;
    for (int i = 3; i < argc; i++)   /* these print and exit: not parsing */
        if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h") || !strcmp(argv[i], "--version"))
            argv[i] = "--x";

    struct l8d_conf c;
    char err[L8D_ERRLEN] = "";
    int rc = l8d_conf_from_args(&c, argc, argv, err);
    if (rc == 0) {
        FUZZ_CHECK(memchr(c.model, 0, sizeof c.model) && memchr(c.socket, 0, sizeof c.socket) &&
                   memchr(c.tune_file, 0, sizeof c.tune_file) &&
                   memchr(c.allowed_group, 0, sizeof c.allowed_group));
        FUZZ_CHECK(c.model[0] && c.eq_entries >= 64 && !(c.eq_entries & (c.eq_entries - 1)));
        FUZZ_CHECK(c.max_batch && c.max_step_tokens >= c.max_batch && c.threads >= 0);
    } else {
        FUZZ_CHECK(rc == 1 || (rc == -EINVAL && err[0] && memchr(err, 0, sizeof err)));
    }
    char *text = malloc(flen + 1);
    FUZZ_CHECK(text);
    memcpy(text, data, flen);
    text[flen] = 0;
    l8d_conf_defaults(&c);
    rc = l8d_conf_parse_text(&c, text, "fuzz.conf", err);
    FUZZ_CHECK(rc == 0 || rc == -EINVAL);
    free(text);
    free(rest);
    return 0;
}
