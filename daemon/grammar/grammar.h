/* grammar.h - constrained decoding: what a reply may be, as a grammar, and
 * which tokens keep it so at each step.
 *
 * Every constraint is a context-free grammar in llama.cpp's GBNF notation;
 * the other kinds are translated to GBNF text first (one engine, one way):
 *
 *   json_schema.c  JSON Schema  -> GBNF   (l8g_schema_to_gbnf)
 *   regex.c        a regex      -> GBNF   (l8g_regex_to_gbnf)
 *   gbnf.c         GBNF text    -> struct l8g_grammar (rules over bytes)
 *   matcher.c      a grammar + a vocabulary -> token masks, step by step
 *
 * The GBNF accepted (llama.cpp's grammars/README.md, a superset of it):
 *   name ::= alternatives        a rule; names are [A-Za-z0-9_-]+, the start is `root`
 *   a b                          sequence          a | b    alternatives
 *   ( ... )                      group             # ...    comment to the end of the line
 *   "lit"                        a literal, escapes \n \r \t \\ \" \' \[ \] \- \xHH \uHHHH
 *                                \UHHHHHHHH
 *   [a-z0-9_] [^"\\]             a character class (ranges, negation, the same escapes)
 *   .                            any character
 *   x* x+ x? x{m} x{m,} x{m,n} x{,n}   repetition
 * Whitespace, newlines included, separates; a rule ends where the next
 * `name ::=` begins. Characters are Unicode code points, matched as their
 * UTF-8 bytes, so a token may end inside a character. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define L8G_ERRLEN 512

/* A compiled grammar: rules over bytes, immutable once made. */
struct l8g_grammar;

/* Parse GBNF text (len bytes, need not be NUL-terminated) into *out.
 * Returns 0, or -EINVAL with "line L, column C: what" in err (a syntax
 * error, an undefined rule, no root, left recursion, a grammar that
 * matches nothing), -E2BIG past the limits (1 MiB of text, 65536 rules,
 * repetition counts over 10000), -ENOMEM. */
int l8g_grammar_parse(const char *text, size_t len, struct l8g_grammar **out,
                      char err[L8G_ERRLEN]);
void l8g_grammar_free(struct l8g_grammar *g);

/* Whether the whole byte string s is in the language (prefix: whether it is
 * a prefix of a string in it). The slow, obviously right reference the
 * token masks are tested against. */
bool l8g_grammar_accepts(const struct l8g_grammar *g, const uint8_t *s, size_t n, bool prefix);

/* Any JSON value (RFC 8259), with whitespace as JSON allows it. */
extern const char l8g_json_gbnf[];

/* A JSON Schema (JSON text, len bytes) as GBNF text, malloc'd in *gbnf:
 * the JSON values the schema validates, with whitespace between tokens
 * bounded as llama.cpp's converter does (nothing, a space, or a newline and
 * up to 20 spaces or tabs), so a reply cannot run on in whitespace; object
 * members in the order the schema's properties give. Returns 0,
 * or -EINVAL with the message in err naming the keyword (its JSON pointer:
 * "/properties/a/minLength: ...") for malformed or unsupported input,
 * -E2BIG past the limits, -ENOMEM. */
int l8g_schema_to_gbnf(const char *schema, size_t len, char **gbnf, char err[L8G_ERRLEN]);

/* A regular expression (the PCRE subset a finite automaton can match:
 * literals, escapes, classes incl. \d \w \s and their negations, ., groups
 * (?: ), alternation, * + ? {m,n}, anchors ^ $ only at the ends) as GBNF
 * text for the strings it matches whole. Returns 0, or -EINVAL with
 * "column C: what" in err (backreferences, lookaround, ...), -E2BIG,
 * -ENOMEM. What is accepted: l8g_regex_to_gbnf_rules. */
int l8g_regex_to_gbnf(const char *re, size_t len, char **gbnf, char err[L8G_ERRLEN]);

/* The same as rules to embed in a larger grammar (a JSON Schema's
 * "pattern"): one or more rules, malloc'd in *rules, the one to refer to
 * named name ([A-Za-z0-9_-]+), any others name-something.
 * l8g_regex_to_gbnf is this with "root" and L8G_RE_ANCHORED. Flags:
 *   L8G_RE_ANCHORED     the strings the pattern matches whole. Without it a
 *                       search, as JSON Schema's patterns are: the strings
 *                       that contain a match; a top-level alternative
 *                       without ^ may have anything (newlines included)
 *                       before it, one without $ anything after it.
 *   L8G_RE_JSON_STRING  each character as the inside of a JSON string
 *                       writes it, in JSON.stringify's one form: itself,
 *                       \" \\ \b \f \n \r \t, other controls \u00XX (hex
 *                       digits of either case); the caller adds the quotes.
 * The dialect is PCRE2's (10.42) with PCRE2_UTF and without PCRE2_UCP:
 * \d \w \s and [[:alpha:]]-style classes are ASCII, \h \v Unicode's
 * horizontal and vertical spaces, . any code point but \n, $ the end of the
 * string only (PCRE2_DOLLAR_ENDONLY, as ECMAScript); plus \uHHHH and
 * \u{H...}; a { that opens no {m} {m,} {m,n} is a literal ({,n} too).
 * Refused: \b \B, \1 and other backreferences, lookaround, atomic groups,
 * inline options ((?i)), recursion, conditionals, (*VERB)s, \A \z \p{..}
 * \Q..\E, ^ or $ anywhere but the ends of the pattern or of a top-level
 * alternative, a possessive quantifier (a*+) unless on a set and provably
 * the same strings, {m,n} with m > n or a count over 10000, groups nested
 * deeper than 200, unbalanced ( ) or [ ], a quantifier with nothing to
 * repeat, invalid UTF-8, a pattern that matches nothing. Named groups,
 * (?| ) and (?#...) are plain groups and comments. Returns 0, -EINVAL with
 * "column C: what" (C the 1-based byte), -E2BIG (the grammar would pass
 * the engine's 1 MiB), -ENOMEM; *rules is untouched on failure. */
enum { L8G_RE_ANCHORED = 1u << 0, L8G_RE_JSON_STRING = 1u << 1 };
int l8g_regex_to_gbnf_rules(const char *re, size_t len, const char *name, unsigned flags,
                            char **rules, char err[L8G_ERRLEN]);

/* ---- the vocabulary and the masks -------------------------------------- */

/* The tokens' bytes: for id i, bytes[off[i] .. off[i + 1]), and whether it
 * is special (never produced by the grammar: its bytes are not text). */
struct l8g_vocab;

/* n ids; off has n + 1 entries. The arrays are copied. end_ids (n_end of
 * them) are the tokens that end the reply (<|eot_id|>, <|eom_id|>, eos):
 * allowed exactly where the grammar can stop. */
int l8g_vocab_new(uint32_t n, const uint8_t *bytes, const uint32_t *off, const bool *special,
                  const uint32_t *end_ids, uint32_t n_end, struct l8g_vocab **out);
void l8g_vocab_free(struct l8g_vocab *v);
uint32_t l8g_vocab_size(const struct l8g_vocab *v);

/* The mask of a step: bit i of words[i / 32] set when token i is allowed. */
static inline size_t l8g_mask_words(uint32_t n_vocab) { return (n_vocab + 31) / 32; }

/* A grammar over a vocabulary: what the matchers share. The per-position
 * token sets it computes on first use are kept here (thread-safe), so a
 * second request with the same grammar starts warm. */
struct l8g_compiled;
int l8g_compile(const struct l8g_grammar *g, const struct l8g_vocab *v,
                struct l8g_compiled **out);
void l8g_compiled_free(struct l8g_compiled *c);

/* One request's position in the grammar. */
struct l8g_matcher;
int l8g_matcher_new(struct l8g_compiled *c, struct l8g_matcher **out);
void l8g_matcher_free(struct l8g_matcher *m);

/* The tokens allowed next into words (l8g_mask_words of the vocabulary):
 * those whose bytes keep the output a prefix of the language, and the end
 * ids if the output so far is in it. Returns the number allowed (0: the
 * grammar admits nothing more, and the output is not complete), or
 * -ENOMEM. */
long l8g_matcher_mask(struct l8g_matcher *m, uint32_t *words);

/* Take token id: 0, or -EINVAL if the mask would not have allowed it (the
 * matcher is then unchanged). An end id is taken where the output is
 * complete and makes the matcher done. */
int l8g_matcher_accept(struct l8g_matcher *m, uint32_t id);

/* Where the matcher stands, to take tokens ahead and come back (the
 * masks after speculative decoding's drafts): the states a matcher has
 * reached stay valid for its life, so a mark is two words. */
struct l8g_mark { uint32_t state; bool done; };
struct l8g_mark l8g_matcher_mark(const struct l8g_matcher *m);
void l8g_matcher_rewind(struct l8g_matcher *m, struct l8g_mark mark);

/* Whether the output so far is in the language (an end id is allowed). */
bool l8g_matcher_can_end(const struct l8g_matcher *m);
bool l8g_matcher_done(const struct l8g_matcher *m);
