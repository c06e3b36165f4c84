/* grammar_internal.h - the compiled form of a grammar, shared by gbnf.c
 * (which makes it) and matcher.c (which runs it).
 *
 * As llama.cpp's: the rules' alternatives lie in one array of elements; a
 * position is an index into it. A rule is its alternatives one after the
 * other, each ended by G_ALT, the last by G_END. An element is a byte range
 * (a terminal) or a reference to a rule. Character classes, literals and
 * repetitions are all made of these: a class is a rule whose alternatives are
 * the UTF-8 byte sequences of its ranges, x* a right-recursive rule. */
#pragma once
#include "grammar.h"

enum g_type { G_END, G_ALT, G_BYTES, G_RULE };

struct g_elem {
    uint8_t type;       /* enum g_type */
    uint8_t lo, hi;     /* G_BYTES: the bytes lo..hi */
    uint32_t rule;      /* G_RULE: the rule's id */
};

struct l8g_grammar {
    struct g_elem *e;       /* [n_e] */
    uint32_t n_e;
    uint32_t *rule_start;   /* [n_rules]: a rule's first element */
    uint32_t n_rules;
    uint32_t root;
};

/* Whether position p ends an alternative (G_ALT or G_END). */
static inline bool g_alt_end(const struct l8g_grammar *g, uint32_t p)
{
    return g->e[p].type == G_END || g->e[p].type == G_ALT;
}
