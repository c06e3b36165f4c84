/* fuzz_schema.c - a JSON Schema from a client (a request's response format):
 * the input is the schema's bytes. Refused: -EINVAL, -E2BIG or -ENOMEM
 * with a message, *gbnf untouched. Accepted: GBNF under the 4 MiB cap that
 * gbnf.c parses, unless the schema admits no finite value (a required
 * member that recurs for ever: gbnf.c says the grammar matches nothing). */
#include "fuzz.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char *gbnf = (char *)"untouched", err[L8G_ERRLEN] = "";
    int rc = l8g_schema_to_gbnf((const char *)data, size, &gbnf, err);
    if (rc) {
        FUZZ_CHECK(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
        FUZZ_CHECK(err[0] && memchr(err, 0, L8G_ERRLEN));
        FUZZ_CHECK(!strcmp(gbnf, "untouched"));
        return 0;
    }
    size_t n = strlen(gbnf);
    FUZZ_CHECK(n > 0 && n <= (4u << 20));
    struct l8g_grammar *g = NULL;
    char gerr[L8G_ERRLEN] = "";
    int prc = l8g_grammar_parse(gbnf, n, &g, gerr);
    bool ok = prc == 0 || (prc == -EINVAL && strstr(gerr, "matches nothing")) || prc == -E2BIG;
    if (!ok)
        fprintf(stderr, "%s\n%s", gerr, gbnf);
    FUZZ_CHECK(ok);
    l8g_grammar_free(g);
    free(gbnf);
    return 0;
}
