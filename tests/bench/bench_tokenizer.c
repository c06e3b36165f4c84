/* bench_tokenizer: single-thread encode throughput of libllama8client's tokenizer on a
 * mixed corpus, and exactness against the Node reference's ids on the same corpus.
 *
 *   bench_tokenizer --tokenizer FILE --seeds DIR --write-corpus OUT [--min-bytes N]
 *       build the corpus from the committed seed texts and write it (deterministic)
 *   bench_tokenizer --tokenizer FILE --corpus FILE [--reference-ids F] [--reference-row F]
 *                   [--reps N] [--json-out F] [--ctl LLAMA8CTL]
 *       time encode/decode, check decode(encode(x)) == x, compare with the reference ids,
 *       print a table and write the JSON rows (method, kind, metrics{mb_s,...}, notes, error)
 *
 * Load rows (kind "load"): l8tok_load with the table cache off (json-c + building the
 * tables), cold (the same plus writing the cache file) and warm (from the cache file), in
 * a fresh cache directory under $TMPDIR that is removed afterwards; metrics.ms is the
 * median.  With --ctl, rows of kind "process": the wall time of a whole
 * `llama8ctl tokenize -t FILE hello` run (exec, load, encode, exit) in the same three states,
 * which is the latency a shell user sees.
 *
 * The corpus: seed texts (the .txt files in tests/bench/corpus/, first line "#mode MODE WEIGHT") mixed
 * by weight in blocks: "words" seeds are regenerated as word-level Markov chains (new
 * sentences with the seed's word statistics, so the corpus is not one text repeated),
 * "chars" seeds (scripts without spaces) as character-level chains, "verbatim" seeds
 * (source code) copied whole.  MB/s counts 10^6 bytes of UTF-8 input per second
 * (CLOCK_MONOTONIC).
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "llama8_tokenizer.h"

#define MAX_SEEDS 64
#define DEFAULT_MIN_BYTES (600u * 1000u)
#define BLOCK_BYTES 2400
#define PRNG_SEED 0x11a3a8u
/* Repetitions of the load timings: a JSON load is half a second, a cached one milliseconds. */
#define LOAD_REPS_JSON 3
#define LOAD_REPS_WARM 10

/* libllama8client internal (tokenizer_internal.h): whether the tables came from the cache. */
bool l8tok__from_cache(const l8tok *t);
extern char **environ;

static uint64_t rng_state = PRNG_SEED;

static uint64_t rng_next(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static size_t rng_below(size_t n)
{
    return (size_t)(rng_next() % n);
}

enum seed_mode { MODE_WORDS, MODE_CHARS, MODE_VERBATIM };

struct unit {
    const char *p;
    size_t n;
};

struct seed {
    char name[256];
    enum seed_mode mode;
    unsigned weight;
    char *text;
    size_t len;
    struct unit *units; /* words or characters */
    size_t n_units;
    size_t **same; /* same[i]: positions whose unit equals unit i */
    size_t *n_same;
};

struct sbuf {
    char *p;
    size_t n, cap;
};

static void sb_add(struct sbuf *b, const char *s, size_t n)
{
    if (b->cap - b->n < n + 1) {
        size_t cap = b->cap ? b->cap : 1 << 16;
        while (cap - b->n < n + 1)
            cap *= 2;
        b->p = realloc(b->p, cap);
        if (!b->p) {
            perror("realloc");
            exit(1);
        }
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
}

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static double cpu_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

static char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    struct sbuf b = {0};
    char tmp[65536];
    size_t r;
    while ((r = fread(tmp, 1, sizeof(tmp), f)) > 0)
        sb_add(&b, tmp, r);
    fclose(f);
    if (!b.p)
        sb_add(&b, "", 0);
    *len = b.n;
    return b.p;
}

static void seed_units(struct seed *s)
{
    const char *p = s->text, *end = s->text + s->len;
    s->units = calloc(s->len + 1, sizeof(*s->units));
    while (p < end) {
        if (s->mode == MODE_WORDS) {
            while (p < end && (*p == ' ' || *p == '\n'))
                p++;
            const char *q = p;
            while (q < end && *q != ' ' && *q != '\n')
                q++;
            if (q > p)
                s->units[s->n_units++] = (struct unit){p, (size_t)(q - p)};
            p = q;
        } else {
            if (*p == '\n') {
                p++;
                continue;
            }
            size_t k = 1;
            while (p + k < end && ((unsigned char)p[k] & 0xc0) == 0x80)
                k++;
            s->units[s->n_units++] = (struct unit){p, k};
            p += k;
        }
    }
    s->same = calloc(s->n_units, sizeof(*s->same));
    s->n_same = calloc(s->n_units, sizeof(*s->n_same));
    for (size_t i = 0; i < s->n_units; i++) {
        s->same[i] = malloc(s->n_units * sizeof(size_t));
        for (size_t j = 0; j < s->n_units; j++)
            if (s->units[j].n == s->units[i].n && !memcmp(s->units[j].p, s->units[i].p, s->units[i].n))
                s->same[i][s->n_same[i]++] = j;
    }
}

static int load_seed(const char *dir, const char *name, struct seed *s)
{
    char path[4096];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    size_t len;
    char *t = slurp(path, &len);
    if (!t)
        return -errno;
    char mode[32];
    unsigned weight;
    char *nl = strchr(t, '\n');
    if (!nl || sscanf(t, "#mode %31s %u", mode, &weight) != 2 || !weight) {
        fprintf(stderr, "%s: first line must be '#mode words|chars|verbatim WEIGHT'\n", path);
        free(t);
        return -EINVAL;
    }
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->mode = !strcmp(mode, "words") ? MODE_WORDS : !strcmp(mode, "chars") ? MODE_CHARS : MODE_VERBATIM;
    s->weight = weight;
    s->text = nl + 1;
    s->len = len - (size_t)(nl + 1 - t);
    if (s->mode != MODE_VERBATIM)
        seed_units(s);
    return 0;
}

static int cmp_names(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* A Markov block: walk the chain from a random unit; a word chain adds spaces and
 * paragraph breaks, a character chain line breaks. */
static void gen_block(const struct seed *s, struct sbuf *out)
{
    size_t start = out->n;
    size_t pos = rng_below(s->n_units);
    size_t since_break = 0, para = 40 + rng_below(80);
    while (out->n - start < BLOCK_BYTES) {
        const struct unit *u = &s->units[pos];
        sb_add(out, u->p, u->n);
        since_break++;
        if (since_break >= para && (s->mode == MODE_CHARS || strchr(".!?。！？", u->p[u->n - 1]))) {
            sb_add(out, s->mode == MODE_WORDS ? "\n\n" : "\n", s->mode == MODE_WORDS ? 2 : 1);
            since_break = 0;
            para = 40 + rng_below(80);
        } else if (s->mode == MODE_WORDS) {
            sb_add(out, " ", 1);
        }
        size_t j = s->same[pos][rng_below(s->n_same[pos])];
        pos = (j + 1) % s->n_units;
    }
    sb_add(out, "\n\n", 2);
}

static int build_corpus(const char *dir, size_t min_bytes, struct sbuf *out)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    char *names[MAX_SEEDS];
    size_t n = 0;
    struct dirent *e;
    while ((e = readdir(d)) && n < MAX_SEEDS) {
        size_t l = strlen(e->d_name);
        if (l > 4 && !strcmp(e->d_name + l - 4, ".txt"))
            names[n++] = strdup(e->d_name);
    }
    closedir(d);
    qsort(names, n, sizeof(*names), cmp_names); /* readdir order is not stable */
    struct seed *seeds = calloc(n ? n : 1, sizeof(*seeds));
    unsigned total_w = 0;
    for (size_t i = 0; i < n; i++) {
        int rc = load_seed(dir, names[i], &seeds[i]);
        if (rc < 0)
            return rc;
        total_w += seeds[i].weight;
    }
    if (!n)
        return -ENOENT;
    while (out->n < min_bytes) {
        size_t w = rng_below(total_w), i = 0;
        while (w >= seeds[i].weight)
            w -= seeds[i++].weight;
        if (seeds[i].mode == MODE_VERBATIM) {
            sb_add(out, seeds[i].text, seeds[i].len);
            sb_add(out, "\n", 1);
        } else {
            gen_block(&seeds[i], out);
        }
    }
    return 0;
}

static json_object *row(const char *method, const char *kind, double mb_s, double seconds,
                        size_t bytes, size_t tokens, const char *notes, const char *error)
{
    json_object *r = json_object_new_object();
    json_object_object_add(r, "method", json_object_new_string(method));
    json_object_object_add(r, "kind", json_object_new_string(kind));
    json_object *m = json_object_new_object();
    json_object_object_add(m, "mb_s", error ? NULL : json_object_new_double(mb_s));
    json_object_object_add(m, "seconds", error ? NULL : json_object_new_double(seconds));
    json_object_object_add(m, "bytes", json_object_new_int64((int64_t)bytes));
    json_object_object_add(m, "tokens", json_object_new_int64((int64_t)tokens));
    json_object_object_add(r, "metrics", m);
    json_object_object_add(r, "notes", json_object_new_string(notes ? notes : ""));
    json_object_object_add(r, "error", error ? json_object_new_string(error) : NULL);
    return r;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Remove the files in dir (the bench's own cache directory) and, if rmdir_too, dir. */
static void clear_dir(const char *dir, bool rmdir_too)
{
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                continue;
            char *p;
            if (asprintf(&p, "%s/%s", dir, e->d_name) >= 0) {
                unlink(p);
                free(p);
            }
        }
        closedir(d);
    }
    if (rmdir_too)
        rmdir(dir);
}

enum load_state { LOAD_OFF, LOAD_COLD, LOAD_WARM, LOAD_STATES };
static const char *const load_state_name[LOAD_STATES] = {"cache off", "cold", "warm"};
static const char *const load_state_note[LOAD_STATES] = {
    "LLAMA8_TOKENIZER_CACHE=off: json-c parse + building the tables",
    "empty cache dir: json-c parse + tables + writing the cache file",
    "tables read from the cache file (tokenizer.json still read and hashed)",
};

/* Set the cache state before one timed load: off, or on with dir emptied (cold) or as the
 * previous load left it (warm). */
static void load_prepare(enum load_state st, const char *dir)
{
    setenv("LLAMA8_TOKENIZER_CACHE", st == LOAD_OFF ? "off" : dir, 1);
    if (st == LOAD_COLD)
        clear_dir(dir, false);
}

/* One `llama8ctl tokenize -t tok hello`, its wall time; < 0 if it failed. */
static double time_ctl(const char *ctl, const char *tok)
{
    char *argv[] = {(char *)ctl, "tokenize", "-t", (char *)tok, "hello", NULL};
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
    double t0 = now_s();
    pid_t pid;
    int st = 0;
    int rc = posix_spawn(&pid, ctl, &fa, NULL, argv, environ);
    posix_spawn_file_actions_destroy(&fa);
    if (rc != 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
        return -1;
    return now_s() - t0;
}

/* The load rows (and, with ctl, the process rows), appended to rows. */
static int bench_load(const char *tok_path, const char *ctl, json_object *rows)
{
    const char *tmp = getenv("TMPDIR");
    char *dir;
    if (asprintf(&dir, "%s/llama8-bench-tokcache.XXXXXX", tmp && *tmp ? tmp : "/tmp") < 0)
        return -ENOMEM;
    if (!mkdtemp(dir)) {
        int rc = -errno;
        free(dir);
        return rc;
    }
    struct stat sb;
    size_t json_bytes = stat(tok_path, &sb) == 0 ? (size_t)sb.st_size : 0;
    char *saved = getenv("LLAMA8_TOKENIZER_CACHE") ? strdup(getenv("LLAMA8_TOKENIZER_CACHE")) : NULL;
    int rc = 0;
    for (int proc = 0; proc < (ctl ? 2 : 1) && rc == 0; proc++) {
        for (int st = 0; st < LOAD_STATES; st++) {
            int reps = st == LOAD_WARM ? LOAD_REPS_WARM : LOAD_REPS_JSON;
            double t[LOAD_REPS_WARM];
            const char *error = NULL;
            /* warm starts from a cache the cold runs wrote: make sure there is one */
            if (st == LOAD_WARM) {
                load_prepare(LOAD_COLD, dir);
                l8tok *w = NULL;
                if (l8tok_load(tok_path, &w) < 0)
                    error = "load failed";
                l8tok_free(w);
            }
            for (int r = 0; r < reps && !error; r++) {
                load_prepare((enum load_state)st, dir);
                if (proc) {
                    t[r] = time_ctl(ctl, tok_path);
                    if (t[r] < 0)
                        error = "llama8ctl tokenize failed";
                    continue;
                }
                l8tok *tk = NULL;
                double t0 = now_s();
                int lrc = l8tok_load(tok_path, &tk);
                t[r] = now_s() - t0;
                if (lrc < 0)
                    error = "load failed";
                else if (l8tok__from_cache(tk) != (st == LOAD_WARM))
                    error = st == LOAD_WARM ? "warm load did not come from the cache"
                                            : "load came from the cache";
                l8tok_free(tk);
            }
            qsort(t, (size_t)reps, sizeof(*t), cmp_double);
            double med = t[reps / 2];
            char method[128], notes[512];
            snprintf(method, sizeof(method), "%s (%s)",
                     proc ? "llama8ctl tokenize, whole run" : "llama8 l8tok_load", load_state_name[st]);
            snprintf(notes, sizeof(notes), "%s; median of %d, best %.1f ms, worst %.1f ms%s",
                     load_state_note[st], reps, t[0] * 1e3, t[reps - 1] * 1e3,
                     proc ? "; process wall time: spawn, load, encode \"hello\", exit" : "");
            json_object *r = row(method, proc ? "process" : "load",
                                 (double)json_bytes / med / 1e6, med, json_bytes, 0, notes, error);
            json_object *m;
            json_object_object_get_ex(r, "metrics", &m);
            json_object_object_add(m, "ms", error ? NULL : json_object_new_double(med * 1e3));
            json_object_object_add(m, "ms_best", error ? NULL : json_object_new_double(t[0] * 1e3));
            json_object_object_add(m, "reps", json_object_new_int(reps));
            json_object_array_add(rows, r);
            if (error)
                rc = -EIO;
        }
    }
    if (saved) {
        setenv("LLAMA8_TOKENIZER_CACHE", saved, 1);
        free(saved);
    } else {
        unsetenv("LLAMA8_TOKENIZER_CACHE");
    }
    clear_dir(dir, true);
    free(dir);
    return rc;
}

int main(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'},
        {"seeds", required_argument, NULL, 's'},
        {"write-corpus", required_argument, NULL, 'w'},
        {"min-bytes", required_argument, NULL, 'b'},
        {"corpus", required_argument, NULL, 'c'},
        {"reference-ids", required_argument, NULL, 'i'},
        {"reference-row", required_argument, NULL, 'r'},
        {"reps", required_argument, NULL, 'n'},
        {"json-out", required_argument, NULL, 'o'},
        {"ctl", required_argument, NULL, 'x'},
        {0},
    };
    const char *tok_path = NULL, *seeds = NULL, *write_corpus = NULL, *corpus_path = NULL;
    const char *ref_ids = NULL, *ref_row = NULL, *json_out = NULL, *ctl = NULL;
    size_t min_bytes = DEFAULT_MIN_BYTES;
    int reps = 5, c;
    while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
        switch (c) {
        case 't': tok_path = optarg; break;
        case 's': seeds = optarg; break;
        case 'w': write_corpus = optarg; break;
        case 'b': min_bytes = strtoull(optarg, NULL, 10); break;
        case 'c': corpus_path = optarg; break;
        case 'i': ref_ids = optarg; break;
        case 'r': ref_row = optarg; break;
        case 'n': reps = atoi(optarg); break;
        case 'o': json_out = optarg; break;
        case 'x': ctl = optarg; break;
        default: fprintf(stderr, "see the comment at the top of bench_tokenizer.c\n"); return 2;
        }
    }
    if (write_corpus) {
        struct sbuf b = {0};
        int rc = seeds ? build_corpus(seeds, min_bytes, &b) : -EINVAL;
        if (rc < 0) {
            fprintf(stderr, "cannot build the corpus from %s: %s\n", seeds ? seeds : "(no --seeds)", strerror(-rc));
            return 1;
        }
        FILE *f = fopen(write_corpus, "wb");
        if (!f || fwrite(b.p, 1, b.n, f) != b.n || fclose(f) != 0) {
            perror(write_corpus);
            return 1;
        }
        printf("corpus: %zu bytes -> %s\n", b.n, write_corpus);
        return 0;
    }
    if (!tok_path || !corpus_path || reps < 1) {
        fprintf(stderr, "need --tokenizer and --corpus (see bench_tokenizer.c)\n");
        return 2;
    }
    size_t len;
    char *text = slurp(corpus_path, &len);
    if (!text) {
        perror(corpus_path);
        return 1;
    }
    json_object *rows = json_object_new_array();
    bool load_ok = bench_load(tok_path, ctl, rows) == 0;
    double t0 = now_s();
    l8tok *tok;
    int rc = l8tok_load(tok_path, &tok);
    double load_s = now_s() - t0;
    if (rc < 0) {
        fprintf(stderr, "load %s: %s\n", tok_path, strerror(-rc));
        return 1;
    }
    l8tok_ids ids = {0};
    char notes[512];

    /* Cold: the first pass fills the word cache. */
    t0 = now_s();
    double c0 = cpu_s();
    rc = l8tok_encode(tok, text, len, 0, &ids);
    double cold_cpu = cpu_s() - c0;
    double cold = now_s() - t0;
    if (rc < 0) {
        fprintf(stderr, "encode: %s\n", strerror(-rc));
        return 1;
    }
    size_t n_tokens = ids.n;
    double *times = calloc((size_t)reps, sizeof(*times));
    double *cpu = calloc((size_t)reps, sizeof(*cpu));
    for (int r = 0; r < reps; r++) {
        ids.n = 0;
        t0 = now_s();
        c0 = cpu_s();
        l8tok_encode(tok, text, len, 0, &ids);
        cpu[r] = cpu_s() - c0;
        times[r] = now_s() - t0;
    }
    qsort(times, (size_t)reps, sizeof(*times), cmp_double);
    qsort(cpu, (size_t)reps, sizeof(*cpu), cmp_double);
    double warm = times[reps / 2];
    double warm_cpu = cpu[reps / 2];

    char *dec;
    size_t dl;
    t0 = now_s();
    rc = l8tok_decode(tok, ids.ids, ids.n, &dec, &dl);
    double dec_s = now_s() - t0;
    bool roundtrip = rc == 0 && dl == len && !memcmp(dec, text, len);

    const char *mismatch = NULL;
    char mbuf[256];
    if (ref_ids) {
        json_object *ref = json_object_from_file(ref_ids);
        if (!ref || !json_object_is_type(ref, json_type_array)) {
            mismatch = "reference ids unreadable";
        } else {
            size_t rn = json_object_array_length(ref);
            for (size_t i = 0; i < rn || i < ids.n; i++) {
                if (i >= rn || i >= ids.n ||
                    (uint32_t)json_object_get_int64(json_object_array_get_idx(ref, i)) != ids.ids[i]) {
                    snprintf(mbuf, sizeof(mbuf), "ids differ from the reference at index %zu (ours %zu ids, reference %zu)", i, ids.n, rn);
                    mismatch = mbuf;
                    break;
                }
            }
        }
        json_object_put(ref);
    }

    snprintf(notes, sizeof(notes), "first pass, empty word cache; by thread CPU time %.1f MB/s; tokenizer load %.0f ms (cache as configured); %.2f bytes/token",
             (double)len / cold_cpu / 1e6, load_s * 1e3, (double)len / (double)n_tokens);
    json_object *cr = row("llama8 l8tok_encode (cold)", "encode", (double)len / cold / 1e6, cold, len, n_tokens, notes, NULL);
    json_object *cm;
    json_object_object_get_ex(cr, "metrics", &cm);
    json_object_object_add(cm, "mb_s_cpu", json_object_new_double((double)len / cold_cpu / 1e6));
    json_object_array_add(rows, cr);
    snprintf(notes, sizeof(notes), "median of %d passes after the first; best %.1f MB/s; by thread CPU time %.1f MB/s; %s", reps,
             (double)len / times[0] / 1e6, (double)len / warm_cpu / 1e6,
             !ref_ids ? "no reference ids given" : mismatch ? mismatch : "ids identical to the reference's");
    json_object *wr = row("llama8 l8tok_encode (warm)", "encode", (double)len / warm / 1e6, warm, len, n_tokens, notes,
                          (ref_ids && mismatch) ? mismatch : NULL);
    json_object *wm;
    json_object_object_get_ex(wr, "metrics", &wm);
    json_object_object_add(wm, "mb_s_cpu", json_object_new_double((double)len / warm_cpu / 1e6));
    json_object_object_add(wm, "mb_s_best", json_object_new_double((double)len / times[0] / 1e6));
    json_object_array_add(rows, wr);
    json_object_array_add(rows, row("llama8 l8tok_decode", "decode", (double)dl / dec_s / 1e6, dec_s, dl, ids.n,
                                    roundtrip ? "decode(encode(corpus)) == corpus" : "ROUND TRIP FAILED",
                                    roundtrip ? NULL : "round trip failed"));
    if (ref_row) {
        json_object *r = json_object_from_file(ref_row);
        if (r) {
            json_object *m, *v;
            if (json_object_object_get_ex(r, "metrics", &m) && json_object_object_get_ex(m, "mb_s", &v) &&
                json_object_get_double(v) > 0) {
                snprintf(notes, sizeof(notes), "llama8 warm encode is %.1fx this; cold %.1fx",
                         (double)len / warm / 1e6 / json_object_get_double(v),
                         (double)len / cold / 1e6 / json_object_get_double(v));
                json_object *old;
                const char *prev = json_object_object_get_ex(r, "notes", &old) ? json_object_get_string(old) : "";
                char both[1024];
                snprintf(both, sizeof(both), "%s%s%s", prev, *prev ? "; " : "", notes);
                json_object_object_add(r, "notes", json_object_new_string(both));
            }
            json_object_array_add(rows, r);
        }
    }

    printf("corpus %s: %zu bytes, %zu tokens\n", corpus_path, len, n_tokens);
    printf("%-44s %-7s %10s %9s  %s\n", "method", "kind", "MB/s", "ms", "notes / error");
    for (size_t i = 0; i < json_object_array_length(rows); i++) {
        json_object *r = json_object_array_get_idx(rows, i), *m, *v, *sec, *meth, *kind, *nt, *err;
        json_object_object_get_ex(r, "method", &meth);
        json_object_object_get_ex(r, "kind", &kind);
        json_object_object_get_ex(r, "metrics", &m);
        json_object_object_get_ex(m, "mb_s", &v);
        json_object_object_get_ex(m, "seconds", &sec);
        json_object_object_get_ex(r, "notes", &nt);
        json_object_object_get_ex(r, "error", &err);
        printf("%-44s %-7s %10.2f %9.1f  %s%s%s\n", json_object_get_string(meth), json_object_get_string(kind),
               v ? json_object_get_double(v) : 0.0, sec ? json_object_get_double(sec) * 1e3 : 0.0,
               nt ? json_object_get_string(nt) : "",
               err ? "  ERROR: " : "", err ? json_object_get_string(err) : "");
    }
    if (json_out) {
        json_object *doc = json_object_new_object();
        json_object_object_add(doc, "benchmark", json_object_new_string("tokenizer"));
        json_object_object_add(doc, "corpus_bytes", json_object_new_int64((int64_t)len));
        json_object_object_add(doc, "rows", rows);
        if (json_object_to_file_ext(json_out, doc, JSON_C_TO_STRING_PRETTY) < 0) {
            fprintf(stderr, "cannot write %s\n", json_out);
            return 1;
        }
        json_object_put(doc);
    } else {
        json_object_put(rows);
    }
    free(dec);
    free(times);
    free(cpu);
    l8tok_ids_free(&ids);
    l8tok_free(tok);
    free(text);
    return (roundtrip && load_ok && !(ref_ids && mismatch)) ? 0 : 1;
}
