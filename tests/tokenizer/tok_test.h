/* tok_test.h: shared by the tokenizer tests, on top of ../test.h (CHECK, t_result). */
#ifndef TOK_TEST_H
#define TOK_TEST_H

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "../test.h"
#include "llama8_tokenizer.h"

static inline void tt_print_ids(const char *what, const uint32_t *ids, size_t n)
{
    fprintf(stderr, "  %s (%zu):", what, n);
    for (size_t i = 0; i < n; i++)
        fprintf(stderr, " %" PRIu32, ids[i]);
    fputc('\n', stderr);
}

static inline bool tt_ids_eq(const l8tok_ids *got, const uint32_t *want, size_t n)
{
    return got->n == n && (n == 0 || memcmp(got->ids, want, n * sizeof(*want)) == 0);
}

/* argv[1]: tokenizer.json.  A tokenizer that cannot be loaded is a failure, not a skip:
 * the file is committed. */
static inline l8tok *tt_load(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON [...]\n", argv[0]);
        exit(1);
    }
    l8tok *tok = NULL;
    int rc = l8tok_load(argv[1], &tok);
    if (rc < 0) {
        fprintf(stderr, "cannot load %s: %s\n", argv[1], strerror(-rc));
        exit(1);
    }
    return tok;
}

/* The scratch directory a test writes into; made if missing. */
static inline const char *tt_scratch(const char *dir)
{
    if (mkdir(dir, 0755) < 0 && errno != EEXIST) {
        perror(dir);
        exit(1);
    }
    return dir;
}

#endif
