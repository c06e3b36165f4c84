/* mask_dump.c - llama8's token masks (matcher.c) for a grammar and a list of
 * prefixes, in the format of xgrammar_masks.mjs, so xgrammar_check.sh can
 * compare the two line for line.
 *
 *   mask_dump GRAMMAR.gbnf TOKENIZER.json CASES.jsonl [--compact]
 *
 * CASES: one JSON array of ids a line, a prefix of accepted tokens. Output,
 * a line a case:
 *   {"case":i,"ok":b,"n_allowed":k,"allowed":[ids],"can_end":b}
 * ok: every id was accepted; the ids after the first refused one are not
 * tried (a refusal leaves the matcher as it was), so the mask is that of the
 * accepted prefix. --compact: "not_allowed" (the complement) instead of
 * "allowed" when more than half the vocabulary is allowed.
 * Exit 0, or 1 with a message on stderr. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "grammar.h"
#include "llama8_tokenizer.h"

/* The end ids, as the daemon takes them from Llama 3.1's generation_config.json
 * (eos_token_id), by number: the committed tokenizer.json has Llama 3.0's names, where
 * 128008 is <|reserved_special_token_4|>, not <|eom_id|>, so a lookup by name finds two.
 * xgrammar_masks.mjs uses the same three. */
static const uint32_t end_ids[] = { L8TOK_LLAMA3_EOT, L8TOK_LLAMA3_EOM, L8TOK_LLAMA3_END_OF_TEXT };

#define MAX_CASE_IDS 4096

static char *read_all(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    size_t cap = 1 << 16, n = 0;
    char *buf = malloc(cap + 1);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n, f)) > 0) {
        n += got;
        if (n == cap) {
            char *nb = realloc(buf, (cap *= 2) + 1);
            if (!nb) {
                free(buf);
                buf = NULL;
            }
            buf = nb;
        }
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        *len = n;
    }
    return buf;
}

/* The tokenizer's vocabulary as an l8g_vocab: each id's bytes, specials and
 * unused ids marked special, the three Llama 3 end ids. */
static int make_vocab(const l8tok *tok, struct l8g_vocab **out)
{
    uint32_t n = l8tok_n_ids(tok), *off;
    uint8_t *bytes;
    bool *special;
    int rc = l8tok_table(tok, n, &bytes, &off, &special);
    if (rc < 0)
        return rc;
    rc = l8g_vocab_new(n, bytes, off, special, end_ids, 3, out);
    free(off);
    free(special);
    free(bytes);
    return rc;
}

/* One line "[1, 2, 3]" into ids; -EINVAL if it is not an array of ids. */
static int parse_case(const char *s, uint32_t *ids, size_t *n)
{
    *n = 0;
    while (*s == ' ' || *s == '\t')
        s++;
    if (*s++ != '[')
        return -EINVAL;
    for (;;) {
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == ']')
            return 0;
        if (*s < '0' || *s > '9' || *n == MAX_CASE_IDS)
            return -EINVAL;
        char *end;
        unsigned long v = strtoul(s, &end, 10);
        if (v > UINT32_MAX)
            return -EINVAL;
        ids[(*n)++] = (uint32_t)v;
        s = end;
        while (*s == ' ' || *s == '\t')
            s++;
        if (*s == ',')
            s++;
        else if (*s != ']')
            return -EINVAL;
    }
}

static void print_case(FILE *o, size_t i, bool ok, const uint32_t *w, uint32_t n, long k,
                       bool can_end, bool compact)
{
    bool not = compact && 2 * (uint64_t)k > n;
    fprintf(o, "{\"case\":%zu,\"ok\":%s,\"n_allowed\":%ld,\"%s\":[", i, ok ? "true" : "false",
            k, not ? "not_allowed" : "allowed");
    bool first = true;
    for (uint32_t id = 0; id < n; id++) {
        if ((bool)(w[id >> 5] >> (id & 31) & 1) == not)
            continue;
        fprintf(o, first ? "%u" : ",%u", id);
        first = false;
    }
    fprintf(o, "],\"can_end\":%s}\n", can_end ? "true" : "false");
}

int main(int argc, char **argv)
{
    bool compact = argc == 5 && strcmp(argv[4], "--compact") == 0;
    if (argc != 4 && !compact) {
        fprintf(stderr, "usage: mask_dump GRAMMAR.gbnf TOKENIZER.json CASES.jsonl [--compact]\n");
        return 1;
    }
    char err[L8G_ERRLEN] = "";
    size_t glen, clen;
    char *gtext = read_all(argv[1], &glen);
    char *cases = read_all(argv[3], &clen);
    if (!gtext || !cases) {
        fprintf(stderr, "mask_dump: cannot read %s: %s\n", gtext ? argv[3] : argv[1],
                strerror(errno));
        return 1;
    }
    l8tok *tok = NULL;
    int rc = l8tok_load(argv[2], &tok);
    if (rc < 0) {
        fprintf(stderr, "mask_dump: %s: %s\n", argv[2], strerror(-rc));
        return 1;
    }
    struct l8g_vocab *v = NULL;
    struct l8g_grammar *g = NULL;
    struct l8g_compiled *c = NULL;
    if ((rc = make_vocab(tok, &v)) < 0) {
        fprintf(stderr, "mask_dump: vocabulary: %s\n", strerror(-rc));
        return 1;
    }
    if ((rc = l8g_grammar_parse(gtext, glen, &g, err)) < 0) {
        fprintf(stderr, "mask_dump: %s: %s (%s)\n", argv[1], err, strerror(-rc));
        return 1;
    }
    if ((rc = l8g_compile(g, v, &c)) < 0) {
        fprintf(stderr, "mask_dump: compile: %s\n", strerror(-rc));
        return 1;
    }
    uint32_t n = l8g_vocab_size(v);
    uint32_t *words = malloc(l8g_mask_words(n) * sizeof *words);
    static uint32_t ids[MAX_CASE_IDS];
    if (!words)
        return 1;
    size_t i = 0;
    for (char *line = cases, *next; line && *line; line = next) {
        next = strchr(line, '\n');
        if (next)
            *next++ = 0;
        if (strspn(line, " \t\r") == strlen(line))
            continue;
        size_t nid;
        if (parse_case(line, ids, &nid) < 0) {
            fprintf(stderr, "mask_dump: %s: case %zu is not an array of ids\n", argv[3], i);
            return 1;
        }
        struct l8g_matcher *m = NULL;
        if ((rc = l8g_matcher_new(c, &m)) < 0) {
            fprintf(stderr, "mask_dump: matcher: %s\n", strerror(-rc));
            return 1;
        }
        bool ok = true;
        for (size_t k = 0; k < nid && ok; k++)
            ok = l8g_matcher_accept(m, ids[k]) == 0;
        memset(words, 0, l8g_mask_words(n) * sizeof *words);
        long allowed = l8g_matcher_done(m) ? 0 : l8g_matcher_mask(m, words);
        if (allowed < 0) {
            fprintf(stderr, "mask_dump: mask: %s\n", strerror((int)-allowed));
            return 1;
        }
        print_case(stdout, i, ok, words, n, allowed, !l8g_matcher_done(m) && l8g_matcher_can_end(m),
                   compact);
        l8g_matcher_free(m);
        i++;
    }
    free(words);
    l8g_compiled_free(c);
    l8g_grammar_free(g);
    l8g_vocab_free(v);
    l8tok_free(tok);
    free(gtext);
    free(cases);
    return fflush(stdout) == 0 ? 0 : 1;
}
