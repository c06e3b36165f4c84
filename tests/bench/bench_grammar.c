/* bench_grammar: constrained decoding's cost on the real Llama 3.1
 * vocabulary (128,256 ids): the time of each step's token mask, p50 / p99 /
 * max, and the time to compile a grammar.
 *
 *   bench_grammar TOKENIZER_JSON [--json-out FILE] [--reps N]
 *
 * Each workload is a grammar and documents in its language. "doc" walks
 * take the documents' own tokens one by one (what a model that writes the
 * intended reply asks for); "random" walks take a random token of each mask
 * (the adversarial case: deep, odd states), seeded. Every step's mask is
 * timed (CLOCK_MONOTONIC), a fresh matcher per document on the compiled
 * grammar kept across documents (as llama8d keeps it), after one warm-up
 * pass with a fresh compiled grammar whose cold first masks are reported on
 * their own (first_*). Compile: the translation to GBNF (schema, regex)
 * and l8g_grammar_parse ("parse"), then l8g_compile, median of reps. The table goes to stdout, the rows (method, kind, metrics, notes)
 * to --json-out with the machine's load average. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../grammar/grammar_test.h"

struct workload {
    const char *name, *kind;    /* kind: "gbnf", "json", "schema" or "regex" */
    const char *text;           /* the constraint (json: none) */
    const char *const *docs;    /* NULL-terminated */
};

static const char *const json_docs[] = {
    "{\"name\": \"llama8\", \"version\": \"0.1.0\", \"description\": \"Llama 3.1 8B FP8 "
    "inference daemon\", \"keywords\": [\"llm\", \"cuda\", \"io_uring\"], \"license\": "
    "\"MIT\", \"scripts\": {\"test\": \"meson test -C build\", \"bench\": \"tests/bench/"
    "bench_cpu.sh\"}, \"dependencies\": {\"json-c\": \"^0.16\", \"liburing\": \"^2.3\"}}",
    "[{\"id\": 1, \"title\": \"Hardening found by an outside attack run\", \"labels\": "
    "[\"security\", \"daemon\"], \"open\": true, \"score\": 0.97}, {\"id\": 2, \"title\": "
    "\"Constrained decoding\", \"labels\": [], \"open\": false, \"score\": -1.5e-3}]",
    "{\"location\": {\"lat\": 52.5200, \"lon\": 13.4050}, \"city\": \"Berlin\", "
    "\"forecast\": [{\"day\": \"2026-12-04\", \"high\": 4, \"low\": -2, \"summary\": "
    "\"Cloudy, light snow in the evening\"}, {\"day\": \"2026-12-05\", \"high\": 6, "
    "\"low\": 0, \"summary\": \"Overcast\"}]}",
    NULL,
};

static const char tool_gbnf[] =
    "root ::= \"{\\\"name\\\": \" name \", \\\"parameters\\\": \" params \"}\"\n"
    "name ::= \"\\\"get_weather\\\"\" | \"\\\"search_files\\\"\" | \"\\\"run_command\\\"\"\n"
    "params ::= \"{\" ( pair ( \", \" pair )* )? \"}\"\n"
    "pair ::= str \": \" ( str | num | \"true\" | \"false\" )\n"
    "str ::= \"\\\"\" ( [^\"\\\\\\x00-\\x1f] | \"\\\\\" [\"\\\\nt] )* \"\\\"\"\n"
    "num ::= \"-\"? [0-9]+ ( \".\" [0-9]+ )?\n";
static const char *const tool_docs[] = {
    "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"San Francisco\", \"unit\": "
    "\"celsius\", \"days\": 3}}",
    "{\"name\": \"search_files\", \"parameters\": {\"pattern\": \"l8g_.*mask\", \"path\": "
    "\"daemon/grammar\", \"ignore_case\": false}}",
    "{\"name\": \"run_command\", \"parameters\": {\"command\": \"git log --oneline -5\"}}",
    NULL,
};

static const char shell_gbnf[] =
    "root ::= cmd ( \" | \" cmd )* \"\\n\"\n"
    "cmd ::= word ( \" \" arg )*\n"
    "word ::= [a-z] [a-z0-9_-]*\n"
    "arg ::= [a-zA-Z0-9_./=:-]+ | \"'\" [^'\\n]* \"'\"\n";
static const char *const shell_docs[] = {
    "git log --oneline --since=yesterday | grep -v 'Merge branch' | head -n 20\n",
    "find . -name '*.c' -newer meson.build | xargs grep -l l8g_matcher_mask\n",
    "journalctl -u llama8d --since today -p warning\n",
    NULL,
};

/* A typical tool's parameters (OpenAI function-calling shape). */
static const char weather_schema[] =
    "{\"type\": \"object\", \"properties\": {"
    "\"city\": {\"type\": \"string\", \"description\": \"the city\"},"
    "\"unit\": {\"enum\": [\"celsius\", \"fahrenheit\"]},"
    "\"days\": {\"type\": \"integer\", \"minimum\": 1, \"maximum\": 14},"
    "\"hourly\": {\"type\": \"boolean\"},"
    "\"fields\": {\"type\": \"array\", \"items\": {\"type\": \"string\"}, \"maxItems\": 8}},"
    "\"required\": [\"city\", \"unit\"], \"additionalProperties\": false}";
static const char *const weather_docs[] = {
    "{\"city\": \"San Francisco\", \"unit\": \"celsius\", \"days\": 3}",
    "{\"city\": \"Zürich\", \"unit\": \"fahrenheit\", \"hourly\": true, \"fields\": "
    "[\"temperature\", \"wind\", \"precipitation\"]}",
    "{\"city\": \"Berlin\", \"unit\": \"celsius\", \"days\": 14, \"hourly\": false}",
    NULL,
};

static const char email_regex[] =
    "[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9-]+(\\.[A-Za-z0-9-]+)*\\.[A-Za-z]{2,12}";
static const char *const email_docs[] = {
    "jane.doe+llama8@example.com", "ops@mail.llama8-project.org", "x_y.z@a-b.co.uk", NULL,
};

static const struct workload workloads[] = {
    { "json", "json", NULL, json_docs },
    { "schema", "schema", weather_schema, weather_docs },
    { "tool call", "gbnf", tool_gbnf, tool_docs },
    { "shell", "gbnf", shell_gbnf, shell_docs },
    { "regex", "regex", email_regex, email_docs },
};

/* The workload's GBNF, malloc'd. */
static char *gbnf_of(const struct workload *wl)
{
    char err[L8G_ERRLEN], *g = NULL;
    if (!strcmp(wl->kind, "schema"))
        REQUIRE(l8g_schema_to_gbnf(wl->text, strlen(wl->text), &g, err) == 0, "%s", err);
    else if (!strcmp(wl->kind, "regex"))
        REQUIRE(l8g_regex_to_gbnf(wl->text, strlen(wl->text), &g, err) == 0, "%s", err);
    else
        REQUIRE((g = strdup(wl->text ? wl->text : l8g_json_gbnf)));
    return g;
}

static int cmp_d(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

struct samples {
    double *v;
    size_t n, cap;
};

static void add(struct samples *s, double x)
{
    if (s->n == s->cap)
        REQUIRE((s->v = realloc(s->v, (s->cap = s->cap ? 2 * s->cap : 1024) * sizeof *s->v)));
    s->v[s->n++] = x;
}

static double pct(struct samples *s, double p)
{
    if (!s->n)
        return 0;
    qsort(s->v, s->n, sizeof *s->v, cmp_d);
    size_t i = (size_t)(p * (double)(s->n - 1) + 0.5);
    return s->v[i];
}

static l8tok *T;
static struct l8g_vocab *V;
static uint32_t *mask;

/* One document's tokens through a fresh matcher, each step's mask timed. */
static void run_doc(struct l8g_compiled *c, const char *doc, struct samples *s)
{
    l8tok_ids ids = { 0 };
    REQUIRE(l8tok_encode(T, doc, strlen(doc), 0, &ids) == 0);
    struct l8g_matcher *m = NULL;
    REQUIRE(l8g_matcher_new(c, &m) == 0);
    for (size_t i = 0; i <= ids.n; i++) {
        uint64_t t0 = t_now_ns();
        long allowed = l8g_matcher_mask(m, mask);
        add(s, (double)(t_now_ns() - t0) * 1e-3);
        REQUIRE(allowed > 0, "no token allowed after %zu of the document's tokens", i);
        if (i < ids.n) {
            REQUIRE(gt_bit(mask, ids.ids[i]), "the document's token %zu is not in the mask", i);
            REQUIRE(l8g_matcher_accept(m, ids.ids[i]) == 0);
        }
    }
    REQUIRE(l8g_matcher_can_end(m), "the document is not whole");
    l8g_matcher_free(m);
    l8tok_ids_free(&ids);
}

static void run_random(struct l8g_compiled *c, uint64_t *seed, int steps, struct samples *s)
{
    struct l8g_matcher *m = NULL;
    REQUIRE(l8g_matcher_new(c, &m) == 0);
    const uint32_t n = l8g_vocab_size(V);
    for (int k = 0; k < steps; k++) {
        uint64_t t0 = t_now_ns();
        long allowed = l8g_matcher_mask(m, mask);
        add(s, (double)(t_now_ns() - t0) * 1e-3);
        if (allowed <= 0)
            break;
        long pick = (long)(gt_rand(seed) % (uint64_t)allowed);
        uint32_t id = 0;
        for (uint32_t i = 0; i < n; i++)
            if (gt_bit(mask, i) && pick-- == 0) {
                id = i;
                break;
            }
        if (l8g_matcher_accept(m, id) || l8g_matcher_done(m))
            break;
    }
    l8g_matcher_free(m);
}

int main(int argc, char **argv)
{
    const char *json_out = NULL;
    int reps = 5;
    REQUIRE(argc >= 2, "usage: bench_grammar TOKENIZER_JSON [--json-out FILE] [--reps N]");
    for (int i = 2; i + 1 < argc; i += 2) {
        if (!strcmp(argv[i], "--json-out"))
            json_out = argv[i + 1];
        else if (!strcmp(argv[i], "--reps"))
            reps = atoi(argv[i + 1]);
    }
    REQUIRE(l8tok_load(argv[1], &T) == 0, "cannot load %s", argv[1]);
    V = gt_vocab(T);
    REQUIRE((mask = malloc(l8g_mask_words(l8g_vocab_size(V)) * 4)));
    char load[128] = "";
    FILE *lf = fopen("/proc/loadavg", "r");
    if (lf) {
        if (!fgets(load, sizeof load, lf))
            load[0] = 0;
        load[strcspn(load, "\n")] = 0;
        fclose(lf);
    }
    FILE *jf = json_out ? fopen(json_out, "w") : NULL;
    if (jf)
        fprintf(jf, "[\n");
    printf("%-10s %-6s %8s %8s %8s %8s %8s %9s %9s\n", "workload", "walk", "masks", "p50 us",
           "p99 us", "max us", "first us", "parse ms", "compile ms");
    bool first_row = true;
    for (size_t w = 0; w < sizeof workloads / sizeof workloads[0]; w++) {
        const struct workload *wl = &workloads[w];
        char err[L8G_ERRLEN];
        /* compile times, median of reps: the translation to GBNF and its
         * parse ("parse"), then l8g_compile */
        struct samples ps = { 0 }, cs = { 0 };
        for (int r = 0; r < reps; r++) {
            struct l8g_grammar *g = NULL;
            struct l8g_compiled *c = NULL;
            uint64_t t0 = t_now_ns();
            char *text = gbnf_of(wl);
            REQUIRE(l8g_grammar_parse(text, strlen(text), &g, err) == 0, "%s: %s", wl->name, err);
            free(text);
            uint64_t t1 = t_now_ns();
            REQUIRE(l8g_compile(g, V, &c) == 0);
            uint64_t t2 = t_now_ns();
            add(&ps, (double)(t1 - t0) * 1e-6);
            add(&cs, (double)(t2 - t1) * 1e-6);
            l8g_compiled_free(c);
            l8g_grammar_free(g);
        }
        struct l8g_grammar *g = NULL;
        struct l8g_compiled *c = NULL;
        char *text = gbnf_of(wl);
        REQUIRE(l8g_grammar_parse(text, strlen(text), &g, err) == 0 && l8g_compile(g, V, &c) == 0);
        free(text);
        for (int mode = 0; mode < 2; mode++) {
            struct samples first = { 0 }, s = { 0 };
            uint64_t seed = 12345;
            if (mode == 0) {
                for (const char *const *d = wl->docs; *d; d++)
                    run_doc(c, *d, &first);     /* cold: entries made as met */
                for (int r = 0; r < reps; r++)
                    for (const char *const *d = wl->docs; *d; d++)
                        run_doc(c, *d, &s);
            } else {
                for (int r = 0; r < 20 * reps; r++)
                    run_random(c, &seed, 40, r < 4 ? &first : &s);
            }
            const char *walk = mode ? "random" : "doc";
            double p50 = pct(&s, 0.5), p99 = pct(&s, 0.99), mx = pct(&s, 1.0);
            double fmax = pct(&first, 1.0), fp50 = pct(&first, 0.5);
            printf("%-10s %-6s %8zu %8.1f %8.1f %8.1f %8.1f %9.3f %9.3f\n", wl->name, walk, s.n,
                   p50, p99, mx, fmax, pct(&ps, 0.5), pct(&cs, 0.5));
            if (jf) {
                fprintf(jf, "%s  {\"method\": \"llama8 matcher\", \"kind\": \"mask %s %s\", "
                        "\"metrics\": {\"masks\": %zu, \"p50_us\": %.2f, \"p99_us\": %.2f, "
                        "\"max_us\": %.2f, \"first_masks\": %zu, \"first_p50_us\": %.2f, "
                        "\"first_max_us\": %.2f, \"parse_ms\": %.4f, \"compile_ms\": %.4f}, "
                        "\"notes\": \"%s; vocabulary %u ids; loadavg %s\"}",
                        first_row ? "" : ",\n", wl->name, walk, s.n, p50, p99, mx, first.n,
                        fp50, fmax, pct(&ps, 0.5), pct(&cs, 0.5), wl->kind,
                        l8g_vocab_size(V), load);
                first_row = false;
            }
            free(first.v);
            free(s.v);
        }
        free(ps.v);
        free(cs.v);
        l8g_compiled_free(c);
        l8g_grammar_free(g);
    }
    if (jf) {
        fprintf(jf, "\n]\n");
        fclose(jf);
    }
    printf("loadavg %s\n", load);
    free(mask);
    l8g_vocab_free(V);
    l8tok_free(T);
    return 0;
}
