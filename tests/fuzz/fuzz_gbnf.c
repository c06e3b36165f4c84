/* fuzz_gbnf.c - a GBNF grammar from a client: the input is its text.
 * Refused: -EINVAL, -E2BIG or -ENOMEM with a message ("line L, column C: ..."
 * for what is in the text). Accepted: a grammar whose masks agree with the
 * reference matcher, checked on a vocabulary of the 256 single bytes and an
 * end id: for a few steps (each taking the mask's first token past a
 * position the input picks), every token is in the mask exactly when
 * l8g_grammar_accepts says the output plus its byte is a prefix of the
 * language, and the end exactly when the output is whole. */
#include "fuzz.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "grammar.h"

#define END 256u

static struct l8g_vocab *byte_vocab(void)
{
    static struct l8g_vocab *v;
    if (!v) {
        uint8_t bytes[256];
        uint32_t off[END + 2];
        bool special[END + 1] = { [END] = true };
        for (uint32_t i = 0; i < 256; i++) {
            bytes[i] = (uint8_t)i;
            off[i] = i;
        }
        off[END] = off[END + 1] = 256;
        const uint32_t end = END;
        FUZZ_CHECK(l8g_vocab_new(END + 1, bytes, off, special, &end, 1, &v) == 0);
    }
    return v;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size > 4096)    /* the reference matcher is slow on large ambiguous grammars */
        return 0;
    struct l8g_grammar *g = NULL;
    char err[L8G_ERRLEN] = "";
    int rc = l8g_grammar_parse((const char *)data, size, &g, err);
    if (rc) {
        FUZZ_CHECK(rc == -EINVAL || rc == -E2BIG || rc == -ENOMEM);
        FUZZ_CHECK(err[0] && memchr(err, 0, L8G_ERRLEN));
        FUZZ_CHECK(rc != -EINVAL || !strncmp(err, "line ", 5));
        return 0;
    }
    struct l8g_compiled *c = NULL;
    struct l8g_matcher *m = NULL;
    FUZZ_CHECK(l8g_compile(g, byte_vocab(), &c) == 0 && l8g_matcher_new(c, &m) == 0);
    uint32_t words[l8g_mask_words(END + 1)];
    uint8_t out[8];
    size_t n = 0;
    for (int step = 0; step < 6; step++) {
        long allowed = l8g_matcher_mask(m, words);
        FUZZ_CHECK(allowed >= 0);
        long count = 0;
        for (uint32_t t = 0; t <= END; t++) {
            bool in = words[t >> 5] >> (t & 31) & 1;
            count += in;
            bool want;
            if (t == END) {
                want = l8g_grammar_accepts(g, out, n, false);
            } else {
                out[n] = (uint8_t)t;
                want = l8g_grammar_accepts(g, out, n + 1, true);
            }
            if (in != want)
                fprintf(stderr, "step %d, token %u: mask %d, reference %d\n", step, t, in, want);
            FUZZ_CHECK(in == want);
        }
        FUZZ_CHECK(count == allowed);
        /* the next token: the first allowed byte at or after one the input picks */
        uint32_t pick = size ? data[(size_t)step * 7 % size] : 0, t = 0;
        for (uint32_t k = 0; k < 256; k++) {
            t = (pick + k) & 255;
            if (words[t >> 5] >> (t & 31) & 1)
                break;
        }
        if (!(words[t >> 5] >> (t & 31) & 1))
            break;      /* only the end, or nothing */
        FUZZ_CHECK(l8g_matcher_accept(m, t) == 0);
        out[n++] = (uint8_t)t;
    }
    l8g_matcher_free(m);
    l8g_compiled_free(c);
    l8g_grammar_free(g);
    return 0;
}
