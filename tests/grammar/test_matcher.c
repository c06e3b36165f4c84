/* test_matcher.c - token masks against the reference matcher, on the real
 * Llama 3.1 vocabulary.
 *
 * For grammars of each shape (any JSON, nested groups and repetitions,
 * counted repeats, non-ASCII classes, alternatives that share prefixes),
 * random walks pick each next token from the mask (seeded). At every step,
 * sampled tokens (and every token, at some steps) are checked: in the mask
 * exactly when l8g_grammar_accepts says the output plus the token's bytes is
 * a prefix of the language; the end ids exactly when the output is whole;
 * the count returned is the mask's; a refused token leaves the matcher as it
 * was. A second matcher on the same compiled grammar (warm entries) gives
 * the same masks. argv[1]: tokenizer.json. */
#include <errno.h>

#include "grammar_test.h"

static const char *const grammars[][2] = {
    { "json", NULL },
    { "list", "root ::= item (\", \" item){0,4} \".\"\n"
              "item ::= [a-z]+ | [0-9]{1,3} \"%\" | \"(\" item \")\"\n" },
    { "greek", "root ::= \"«\" [α-ω ]+ \"»\" ( \"\\n\" [^\\n]{0,8} )?\n" },
    { "command", "root ::= (\"ls\" | \"cat\" | \"grep\" \" -\" [inrv]+) \" \" path\n"
                 "path ::= \"/\"? [a-zA-Z0-9._-]+ (\"/\" [a-zA-Z0-9._-]+)*\n" },
    { "arith", "root ::= expr\n"
               "expr ::= term ((\"+\" | \"-\") term)*\n"
               "term ::= num | \"(\" expr \")\"\n"
               "num  ::= [1-9] [0-9]{0,5} | \"0\"\n" },
};

static struct l8g_vocab *V;
static const l8tok *T;

/* The output so far, bytes. */
struct out {
    uint8_t b[1 << 16];
    size_t n;
};

static bool ref_allows(const struct l8g_grammar *g, struct out *o, uint32_t id, bool *is_end)
{
    const char *b;
    size_t bl;
    for (int k = 0; k < 3; k++) {
        uint32_t e;
        if (l8tok_token_id(T, gt_end_names[k], strlen(gt_end_names[k]), &e) == 0 && e == id) {
            *is_end = true;
            return l8g_grammar_accepts(g, o->b, o->n, false);
        }
    }
    *is_end = false;
    if (l8tok_token_bytes(T, id, &b, &bl) < 0 || l8tok_is_special(T, id) || !bl)
        return false;
    if (o->n + bl > sizeof o->b)
        return false;
    memcpy(o->b + o->n, b, bl);
    bool ok = l8g_grammar_accepts(g, o->b, o->n + bl, true);
    return ok;
}

static void check_state(const char *name, const struct l8g_grammar *g, struct out *o,
                        const uint32_t *mask, long allowed, uint64_t *seed, bool all)
{
    const uint32_t n = l8g_vocab_size(V);
    long count = 0;
    for (uint32_t i = 0; i < n; i++)
        count += gt_bit(mask, i);
    CHECK(count == allowed, "%s: the mask has %ld tokens, the matcher said %ld", name, count,
          allowed);
    int bad = 0;
    for (uint32_t k = 0; k < (all ? n : 300) && bad < 5; k++) {
        /* sampled: half from the mask, half from anywhere */
        uint32_t id = all ? k : (uint32_t)(gt_rand(seed) % n);
        if (!all && k % 2 && allowed > 0) {
            long want = (long)(gt_rand(seed) % (uint64_t)allowed);
            for (uint32_t i = 0; i < n; i++)
                if (gt_bit(mask, i) && want-- == 0) {
                    id = i;
                    break;
                }
        }
        bool is_end, ref = ref_allows(g, o, id, &is_end);
        if (ref != gt_bit(mask, id)) {
            const char *b = "";
            size_t bl = 0;
            l8tok_token_bytes(T, id, &b, &bl);
            CHECK(false, "%s: after %zu bytes '%.*s', token %u '%.*s': reference %d, mask %d",
                  name, o->n, (int)(o->n > 60 ? 60 : o->n), (const char *)o->b +
                  (o->n > 60 ? o->n - 60 : 0), id, (int)bl, b, ref, gt_bit(mask, id));
            bad++;
        }
    }
}

static void walks(const char *name, const char *text, int n_walks, int steps)
{
    char err[L8G_ERRLEN];
    struct l8g_grammar *g = NULL;
    REQUIRE(l8g_grammar_parse(text, strlen(text), &g, err) == 0, "%s: %s", name, err);
    struct l8g_compiled *c = NULL;
    REQUIRE(l8g_compile(g, V, &c) == 0);
    const size_t nw = l8g_mask_words(l8g_vocab_size(V));
    uint32_t *mask = malloc(nw * 4), *mask2 = malloc(nw * 4);
    static struct out o;
    uint64_t seed = 0x9e3779b97f4a7c15ull ^ (uint64_t)strlen(text);
    int states = 0, ended = 0;
    for (int w = 0; w < n_walks; w++) {
        struct l8g_matcher *m = NULL, *m2 = NULL;
        REQUIRE(l8g_matcher_new(c, &m) == 0 && l8g_matcher_new(c, &m2) == 0);
        o.n = 0;
        for (int s = 0; s < steps; s++) {
            long allowed = l8g_matcher_mask(m, mask);
            REQUIRE(allowed >= 0, "%s: mask failed", name);
            check_state(name, g, &o, mask, allowed, &seed, s == 0 && w < 2);
            long allowed2 = l8g_matcher_mask(m2, mask2);
            CHECK(allowed2 == allowed && !memcmp(mask, mask2, nw * 4),
                  "%s: a second matcher's mask differs at step %d", name, s);
            states++;
            if (!allowed)
                break;
            /* a token outside the mask is refused and changes nothing */
            uint32_t bad = (uint32_t)(gt_rand(&seed) % l8g_vocab_size(V));
            if (!gt_bit(mask, bad)) {
                CHECK(l8g_matcher_accept(m, bad) == -EINVAL, "%s: token %u outside the mask "
                      "taken", name, bad);
            }
            /* prefer to go on: the end only now and then */
            long pick = (long)(gt_rand(&seed) % (uint64_t)allowed);
            uint32_t id = 0;
            for (uint32_t i = 0; i < l8g_vocab_size(V); i++)
                if (gt_bit(mask, i) && pick-- == 0) {
                    id = i;
                    break;
                }
            bool is_end;
            ref_allows(g, &o, id, &is_end);
            if (is_end && s + 1 < steps && allowed > 1 && gt_rand(&seed) % 4)
                continue;   /* not yet */
            REQUIRE(l8g_matcher_accept(m, id) == 0 && l8g_matcher_accept(m2, id) == 0,
                    "%s: token %u from the mask refused", name, id);
            if (is_end) {
                CHECK(l8g_matcher_done(m), "%s: not done after an end id", name);
                ended++;
                break;
            }
            const char *b;
            size_t bl;
            l8tok_token_bytes(T, id, &b, &bl);
            memcpy(o.b + o.n, b, bl);
            o.n += bl;
            CHECK(l8g_matcher_can_end(m) == l8g_grammar_accepts(g, o.b, o.n, false),
                  "%s: can_end disagrees after '%.*s'", name, (int)o.n, (const char *)o.b);
        }
        l8g_matcher_free(m);
        l8g_matcher_free(m2);
    }
    printf("%s: %d states checked, %d walks ended by an end id\n", name, states, ended);
    free(mask);
    free(mask2);
    l8g_compiled_free(c);
    l8g_grammar_free(g);
}

int main(int argc, char **argv)
{
    REQUIRE(argc >= 2, "usage: test_matcher TOKENIZER_JSON");
    l8tok *tok = NULL;
    REQUIRE(l8tok_load(argv[1], &tok) == 0, "cannot load %s", argv[1]);
    T = tok;
    V = gt_vocab(tok);
    for (size_t i = 0; i < sizeof grammars / sizeof grammars[0]; i++)
        walks(grammars[i][0], grammars[i][1] ? grammars[i][1] : l8g_json_gbnf, 6, 40);
    l8g_vocab_free(V);
    l8tok_free(tok);
    return t_result("test_matcher");
}
