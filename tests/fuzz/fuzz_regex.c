/* fuzz_regex.c - regex.c: the input is a pattern, translated with each
 * combination of flags (whole or a search, plain or as JSON string
 * content). Refused: -EINVAL with "column C: ..." (C inside the pattern or
 * just past it), or -E2BIG, with *gbnf untouched. Accepted: "root ::= ..."
 * (plain: one line), that the GBNF parser takes (or finds past its limits:
 * nested counts expand). */
#include "fuzz.h"

#include <errno.h>
#include <string.h>

#include "grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)   /* longer patterns only take longer */
        return 0;
    for (unsigned flags = 0; flags < 4; flags++) {
        char err[L8G_ERRLEN], *g = (char *)"untouched";
        memset(err, 'x', sizeof err);
        int rc = l8g_regex_to_gbnf_rules((const char *)data, size, "root", flags, &g, err);
        FUZZ_CHECK(memchr(err, 0, sizeof err));
        if (rc) {
            FUZZ_CHECK(rc == -EINVAL || rc == -E2BIG);
            FUZZ_CHECK(!strcmp(g, "untouched") && err[0]);
            if (rc == -EINVAL) {
                size_t col = 0;
                FUZZ_CHECK(sscanf(err, "column %zu: ", &col) == 1);
                FUZZ_CHECK(col >= 1 && col <= size + 1);
            }
            continue;
        }
        size_t n = strlen(g);
        FUZZ_CHECK(n > 10 && !strncmp(g, "root ::= ", 9) && g[n - 1] == '\n');
        FUZZ_CHECK((flags & L8G_RE_JSON_STRING) || !memchr(g, '\n', n - 1));
        struct l8g_grammar *gr = NULL;
        rc = l8g_grammar_parse(g, n, &gr, err);
        if (rc != 0 && rc != -E2BIG)
            fprintf(stderr, "fuzz_regex: the engine refuses %s: %s\n", g, err);
        FUZZ_CHECK(rc == 0 || rc == -E2BIG);
        l8g_grammar_free(gr);
        free(g);
    }
    return 0;
}
