/* test_mkmodel - llama8-mkmodel end to end: the checkpoint it writes is
 * accepted by the project's reader, config parser, loader and CPU engine;
 * it is byte-identical for a seed whatever the thread count; the FP8 file
 * is exactly what load-time quantization of the unquantized file gives;
 * the weight statistics are a trained model's (unit-RMS embeddings, logits
 * with a few units of spread, outlier rows); bad arguments fail clearly.
 *
 * usage: test_mkmodel PATH/llama8-mkmodel PATH/tokenizer.json */
#include "../model/testutil.h"

#include <math.h>
#include <dirent.h>
#include <sys/wait.h>

#include "config.h"
#include "engine.h"
#include "model.h"
#include "numerics.h"
#include "safetensors.h"

static const char *tool;

/* Run the tool with args (NULL-terminated); stderr to errpath when given.
 * Returns the exit status, or -1 if it did not exit normally. */
static int run_tool(const char *errpath, const char *const *args)
{
    const char *argv[40];
    int n = 0;
    argv[n++] = tool;
    for (; *args && n < 38; args++)
        argv[n++] = *args;
    argv[n] = NULL;
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        int fd = open(errpath ? errpath : "/dev/null", O_WRONLY | O_CREAT | O_TRUNC, 0644);
        if (fd >= 0) {
            dup2(fd, 2);
            dup2(fd, 1);
        }
        execv(tool, (char *const *)argv);
        _exit(127);
    }
    int st;
    if (waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
        return -1;
    return WEXITSTATUS(st);
}

#define RUN(...) run_tool(NULL, (const char *const[]){ __VA_ARGS__, NULL })

static bool same_file(const char *a, const char *b)
{
    size_t na = 0, nb = 0;
    uint8_t *x = t_read(a, &na), *y = t_read(b, &nb);
    bool same = x && y && na == nb && memcmp(x, y, na) == 0;
    free(x);
    free(y);
    return same;
}

static int not_dot(const struct dirent *e)
{
    return e->d_name[0] != '.';
}

/* Sorted file names of dir, or -1. */
static int list_dir(const char *dir, struct dirent ***names)
{
    return scandir(dir, names, not_dot, alphasort);
}

static void free_list(struct dirent **names, int n)
{
    for (int i = 0; i < n; i++)
        free(names[i]);
    free(names);
}

/* Same seed, 1 and 3 threads: identical bytes. Another seed: other weights,
 * same config. Small vocabulary and 1 MB shards so the index is used. */
static void test_determinism(const char *tmp, char **dir_a)
{
    char *a = t_path(tmp, "det-a"), *b = t_path(tmp, "det-b"), *c = t_path(tmp, "det-c");
    const char *common = "--vocab";
    CHECK(RUN("--out", a, "--preset", "tiny", common, "4096", "--shard-size", "1M",
              "--seed", "7", "--threads", "1", "--quiet") == 0);
    CHECK(RUN("--out", b, "--preset", "tiny", common, "4096", "--shard-size", "1M",
              "--seed", "7", "--threads", "3", "--quiet") == 0);
    CHECK(RUN("--out", c, "--preset", "tiny", common, "4096", "--shard-size", "1M",
              "--seed", "8", "--threads", "2", "--quiet") == 0);
    struct dirent **la = NULL, **lb = NULL, **lc = NULL;
    int na = list_dir(a, &la), nb = list_dir(b, &lb), nc = list_dir(c, &lc);
    int shards = 0;
    CHECK(na > 0 && na == nb && na == nc);
    for (int i = 0; na > 0 && i < na && i < nb && i < nc; i++) {
        const char *f = la[i]->d_name;
        CHECK(strcmp(f, lb[i]->d_name) == 0 && strcmp(f, lc[i]->d_name) == 0);
        char *pa = t_path(a, f), *pb = t_path(b, f), *pc = t_path(c, f);
        if (!same_file(pa, pb)) {
            fprintf(stderr, "thread count changed %s\n", f);
            t_failures++;
        }
        bool weights = strstr(f, "-of-") != NULL;
        shards += weights;
        CHECK(same_file(pa, pc) == !weights);
        free(pa);
        free(pb);
        free(pc);
    }
    CHECK(shards >= 3);   /* 1 MB shards: embed, layers, lm_head at least */
    free_list(la, na);
    free_list(lb, nb);
    free_list(lc, nc);
    /* No single-file name next to the shards. */
    char *single = t_path(a, "model.safetensors");
    CHECK(access(single, F_OK) != 0);
    free(single);

    /* The reader takes the sharded directory; the index is consistent. */
    char err[L8_ERRLEN] = "";
    struct l8_tensor_set *ts = NULL;
    int rc = l8_st_open_dir(a, &ts, err);
    CHECK_ERR(rc, 0, err, "");
    if (rc == 0) {
        /* embed, 2 layers x (7 projections x 2 + 2 norms), norm, lm_head */
        CHECK(l8_st_count(ts) == 1 + 2 * 16 + 1 + 1);
        uint64_t total = 0;
        for (uint32_t i = 0; i < l8_st_count(ts); i++)
            total += l8_st_at(ts, i)->nbytes;
        char *ip = t_path(a, "model.safetensors.index.json");
        json_object *idx = json_object_from_file(ip), *meta, *ts_j, *map;
        CHECK(idx != NULL);
        if (idx) {
            CHECK(json_object_object_get_ex(idx, "metadata", &meta) &&
                  json_object_object_get_ex(meta, "total_size", &ts_j) &&
                  (uint64_t)json_object_get_int64(ts_j) == total);
            CHECK(json_object_object_get_ex(idx, "weight_map", &map) &&
                  json_object_object_length(map) == (int)l8_st_count(ts));
            json_object_put(idx);
        }
        free(ip);
        const struct l8_tensor *q = l8_st_find(ts, "model.layers.1.self_attn.q_proj.weight");
        const struct l8_tensor *qs = l8_st_find(ts, "model.layers.1.self_attn.q_proj.weight_scale");
        CHECK(q && q->dtype == L8_F8_E4M3 && q->n_dims == 2 && q->shape[0] == 256 &&
              q->shape[1] == 256);
        CHECK(qs && qs->dtype == L8_BF16 && qs->n_dims == 2 && qs->shape[0] == 256 &&
              qs->shape[1] == 1);
        const struct l8_tensor *e = l8_st_find(ts, "model.embed_tokens.weight");
        CHECK(e && e->dtype == L8_BF16 && e->shape[0] == 4096 && e->shape[1] == 256);
        l8_st_close(ts);
    }

    /* Small vocabularies use the golden checkpoint's special ids. */
    struct l8_config cfg;
    rc = l8_config_load(a, &cfg, err);
    CHECK_ERR(rc, 0, err, "");
    CHECK(rc == 0 && cfg.bos == 1 && cfg.n_eos == 2 && cfg.eos[0] == 2 && cfg.eos[1] == 3);

    *dir_a = a;
    t_rm_rf(b);
    t_rm_rf(c);
}

static bool qweight_equal(const struct l8_qweight *x, const struct l8_qweight *y)
{
    return x->out == y->out && x->in == y->in &&
           memcmp(x->w, y->w, (size_t)x->out * x->in) == 0 &&
           memcmp(x->scale, y->scale, x->out * sizeof(float)) == 0;
}

/* Every projection of two loaded models is the same FP8 data. */
static void check_same_projections(const struct l8_model *x, const struct l8_model *y,
                                   const char *what)
{
    CHECK(x->cfg.n_layers == y->cfg.n_layers);
    for (uint32_t l = 0; l < x->cfg.n_layers && l < y->cfg.n_layers; l++) {
        const struct l8_layer *a = &x->layers[l], *b = &y->layers[l];
        const struct l8_qweight *pa[7] = { &a->wq, &a->wk, &a->wv, &a->wo, &a->wgate, &a->wup,
                                           &a->wdown };
        const struct l8_qweight *pb[7] = { &b->wq, &b->wk, &b->wv, &b->wo, &b->wgate, &b->wup,
                                           &b->wdown };
        for (int j = 0; j < 7; j++)
            if (!qweight_equal(pa[j], pb[j])) {
                fprintf(stderr, "%s: layer %u projection %d differs\n", what, l, j);
                t_failures++;
            }
        CHECK(memcmp(a->attn_norm, b->attn_norm, x->cfg.hidden * sizeof(float)) == 0);
        CHECK(memcmp(a->mlp_norm, b->mlp_norm, x->cfg.hidden * sizeof(float)) == 0);
    }
    float *ra = malloc(x->cfg.hidden * sizeof(float)), *rb = malloc(x->cfg.hidden * sizeof(float));
    for (uint32_t r = 0; r < x->cfg.vocab; r += 97) {
        l8_dense_row(&x->embed, r, ra);
        l8_dense_row(&y->embed, r, rb);
        CHECK(memcmp(ra, rb, x->cfg.hidden * sizeof(float)) == 0);
        l8_dense_row(&x->lm_head, r, ra);
        l8_dense_row(&y->lm_head, r, rb);
        CHECK(memcmp(ra, rb, x->cfg.hidden * sizeof(float)) == 0);
    }
    free(ra);
    free(rb);
}

/* An unquantized checkpoint of the same seed, quantized by the loader, is
 * the FP8 checkpoint exactly (F32 and BF16 carry the same values). */
static void test_dtypes(const char *tmp, const char *fp8_dir)
{
    char err[L8_ERRLEN] = "";
    struct l8_model *m8 = NULL;
    int rc = l8_model_load(fp8_dir, 2, &m8, err);
    CHECK_ERR(rc, 0, err, "");
    if (rc)
        return;
    CHECK(m8->cfg.quant == L8_QUANT_FP8_DYNAMIC);
    const char *dts[] = { "bf16", "f32", "f16" };
    for (size_t i = 0; i < sizeof(dts) / sizeof(dts[0]); i++) {
        char name[32];
        snprintf(name, sizeof(name), "dt-%s", dts[i]);
        char *d = t_path(tmp, name);
        CHECK(RUN("--out", d, "--preset", "tiny", "--vocab", "4096", "--seed", "7",
                  "--dtype", dts[i], "--quiet") == 0);
        struct l8_model *m = NULL;
        rc = l8_model_load(d, 2, &m, err);
        CHECK_ERR(rc, 0, err, "");
        if (rc == 0) {
            CHECK(m->cfg.quant == L8_QUANT_NONE);
            CHECK(m->embed.dtype == (i == 0 ? L8_BF16 : i == 1 ? L8_F32 : L8_F16));
            /* F16 is exact for these values except below its normal range,
             * which only the outer decimals of tiny weights reach: compare
             * the F32/BF16 ones bitwise. */
            if (i < 2)
                check_same_projections(m8, m, name);
            l8_model_free(m);
        }
        t_rm_rf(d);
    }
    l8_model_free(m8);
}

static double row_rms(const struct l8_qweight *q, uint32_t r)
{
    double s = 0;
    for (uint32_t i = 0; i < q->in; i++) {
        double v = (double)l8_e4m3_lut[q->w[(size_t)r * q->in + i]] * q->scale[r];
        s += v * v;
    }
    return sqrt(s / q->in);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The full tiny preset: real vocabulary and ids, tokenizer copied, loader
 * accepts it, statistics, logit spread through the CPU engine. */
static void test_tiny(const char *tmp, const char *tokenizer)
{
    char err[L8_ERRLEN] = "";
    char *d = t_path(tmp, "tiny");
    CHECK(RUN("--out", d, "--preset", "tiny", "--tokenizer", tokenizer, "--quiet") == 0);

    char *tk = t_path(d, "tokenizer.json");
    CHECK(same_file(tk, tokenizer));
    free(tk);

    struct l8_config cfg;
    int rc = l8_config_load(d, &cfg, err);
    CHECK_ERR(rc, 0, err, "");
    CHECK(cfg.hidden == 256 && cfg.inter == 768 && cfg.n_layers == 2 && cfg.n_heads == 4 &&
          cfg.n_kv_heads == 1 && cfg.head_dim == 64 && cfg.vocab == 128256 &&
          cfg.max_pos == 131072);
    CHECK(cfg.bos == 128000 && cfg.n_eos == 3 && cfg.eos[0] == 128001 &&
          cfg.eos[1] == 128008 && cfg.eos[2] == 128009);
    CHECK(cfg.rope_type == L8_ROPE_LLAMA3 && cfg.rope_factor == 8.0f &&
          cfg.rope_low_freq_factor == 1.0f && cfg.rope_high_freq_factor == 4.0f &&
          cfg.rope_orig_max_pos == 8192 && cfg.rope_theta == 500000.0f);
    CHECK(cfg.rms_eps == 1e-5f && !cfg.tie_embeddings);
    CHECK(cfg.quant == L8_QUANT_FP8_DYNAMIC && l8_config_ignores(&cfg, "lm_head"));

    /* One file under 5 GB: model.safetensors, no index, as HF does. */
    char *single = t_path(d, "model.safetensors"), *ix = t_path(d, "model.safetensors.index.json");
    CHECK(access(single, F_OK) == 0 && access(ix, F_OK) != 0);
    free(single);
    free(ix);

    json_object *gen = NULL;
    char *gp = t_path(d, "generation_config.json");
    gen = json_object_from_file(gp);
    json_object *v;
    CHECK(gen && json_object_object_get_ex(gen, "bos_token_id", &v) &&
          json_object_get_int(v) == 128000);
    CHECK(gen && json_object_object_get_ex(gen, "eos_token_id", &v) &&
          json_object_array_length(v) == 3);
    CHECK(gen && json_object_object_get_ex(gen, "do_sample", &v) && json_object_get_boolean(v));
    CHECK(gen && json_object_object_get_ex(gen, "temperature", &v) &&
          fabs(json_object_get_double(v) - 0.6) < 1e-12);
    CHECK(gen && json_object_object_get_ex(gen, "top_p", &v) &&
          fabs(json_object_get_double(v) - 0.9) < 1e-12);
    json_object_put(gen);
    free(gp);

    struct l8_model *m = NULL;
    rc = l8_model_load(d, 2, &m, err);
    CHECK_ERR(rc, 0, err, "");
    if (rc) {
        t_rm_rf(d);
        return;
    }
    const uint32_t H = m->cfg.hidden, V = m->cfg.vocab;

    /* Embedding: unit RMS, zero mean. lm_head: std 4/sqrt(hidden). */
    float *row = malloc(H * sizeof(float));
    double se = 0, me = 0, sl = 0;
    for (uint32_t r = 0; r < V; r++) {
        l8_dense_row(&m->embed, r, row);
        for (uint32_t i = 0; i < H; i++) {
            se += (double)row[i] * row[i];
            me += row[i];
        }
        l8_dense_row(&m->lm_head, r, row);
        for (uint32_t i = 0; i < H; i++)
            sl += (double)row[i] * row[i];
    }
    double n = (double)V * H;
    double embed_rms = sqrt(se / n), lm_std = sqrt(sl / n);
    printf("embed rms %.4f mean %.5f, lm_head std %.4f (want %.4f)\n", embed_rms, me / n, lm_std,
           4.0 / sqrt(H));
    CHECK(fabs(embed_rms - 1.0) < 0.01);
    CHECK(fabs(me / n) < 0.005);
    CHECK(fabs(lm_std - 4.0 / sqrt(H)) < 0.01 * 4.0 / sqrt(H));
    free(row);

    /* Norms near 1 but not all equal. */
    double nm = 0, nv = 0;
    for (uint32_t i = 0; i < H; i++)
        nm += m->final_norm[i];
    nm /= H;
    for (uint32_t i = 0; i < H; i++)
        nv += (m->final_norm[i] - nm) * (m->final_norm[i] - nm);
    nv = sqrt(nv / H);
    printf("final norm mean %.4f std %.4f\n", nm, nv);
    CHECK(fabs(nm - 1.0) < 0.02 && nv > 0.03 && nv < 0.07);

    /* Projections: typical row RMS 1/sqrt(in), o and down further over
     * sqrt(2 * layers); about 1 row in 128 is an outlier (3-8x). */
    uint32_t outliers = 0, rows = 0;
    for (uint32_t l = 0; l < m->cfg.n_layers; l++) {
        const struct l8_layer *L = &m->layers[l];
        const struct l8_qweight *p[7] = { &L->wq, &L->wk, &L->wv, &L->wo, &L->wgate, &L->wup,
                                          &L->wdown };
        const bool resid[7] = { false, false, false, true, false, false, true };
        for (int j = 0; j < 7; j++) {
            double *rr = malloc(p[j]->out * sizeof(double));
            for (uint32_t r = 0; r < p[j]->out; r++)
                rr[r] = row_rms(p[j], r);
            double *sorted = malloc(p[j]->out * sizeof(double));
            memcpy(sorted, rr, p[j]->out * sizeof(double));
            qsort(sorted, p[j]->out, sizeof(double), cmp_double);
            double med = sorted[p[j]->out / 2];
            double want = 1.0 / sqrt(p[j]->in) / (resid[j] ? sqrt(2.0 * m->cfg.n_layers) : 1.0);
            if (fabs(med / want - 1.0) > 0.05) {
                fprintf(stderr, "layer %u proj %d: median row rms %.5f, want %.5f\n", l, j, med,
                        want);
                t_failures++;
            }
            for (uint32_t r = 0; r < p[j]->out; r++)
                outliers += rr[r] > 2.5 * med;
            rows += p[j]->out;
            free(rr);
            free(sorted);
        }
    }
    printf("outlier rows %u of %u\n", outliers, rows);
    CHECK(outliers >= rows / 400 && outliers <= rows / 60);

    /* Logits of a short prompt through the CPU engine: a few units of
     * spread at every position, and not one token winning everywhere. */
    enum { S = 12, PAGE = 16 };
    struct l8_engine_opts o = { .numerics = L8_NUMERICS_EXACT, .page_size = PAGE, .n_pages = 1,
                                .max_step_tokens = S, .max_seqs = 1, .nthreads = 0 };
    struct l8_engine *e = NULL;
    rc = l8_engine_create(m, L8_BACKEND_CPU, &o, &e, err);
    CHECK_ERR(rc, 0, err, "");
    if (rc == 0) {
        uint32_t toks[S] = { 128000, 791, 4062, 14198, 39935, 35308, 927, 279, 16053, 5679,
                             13, 128009 };
        uint32_t pages[1] = { 0 };
        float *logits = malloc((size_t)S * V * sizeof(float));
        struct l8_seq sq = { .tokens = toks, .n_tokens = S, .pos = 0, .pages = pages,
                             .n_pages = 1, .logits = L8_LOGITS_ALL, .logits_out = logits };
        rc = l8_engine_step(e, &sq, 1);
        CHECK(rc == 0);
        uint32_t argmax[S];
        double min_std = 1e9, max_std = 0;
        for (int s = 0; rc == 0 && s < S; s++) {
            const float *lg = logits + (size_t)s * V;
            double mean = 0, var = 0;
            argmax[s] = 0;
            for (uint32_t i = 0; i < V; i++) {
                mean += lg[i];
                if (lg[i] > lg[argmax[s]])
                    argmax[s] = i;
            }
            mean /= V;
            for (uint32_t i = 0; i < V; i++)
                var += (lg[i] - mean) * (lg[i] - mean);
            double sd = sqrt(var / V);
            min_std = sd < min_std ? sd : min_std;
            max_std = sd > max_std ? sd : max_std;
        }
        int distinct = 0;
        for (int s = 0; s < S; s++) {
            bool seen = false;
            for (int k = 0; k < s; k++)
                seen |= argmax[k] == argmax[s];
            distinct += !seen;
        }
        printf("logit std per position %.3f..%.3f, %d distinct argmax of %d\n", min_std, max_std,
               distinct, S);
        CHECK(rc == 0 && min_std > 3.0 && max_std < 5.0);
        CHECK(distinct >= S / 2);
        free(logits);
        l8_engine_destroy(e);
    }
    l8_model_free(m);
    t_rm_rf(d);
}

/* The presets' shapes (one layer and a small vocabulary to stay fast; the
 * overrides replace only what they name), and tied embeddings. */
static void test_presets(const char *tmp)
{
    static const struct {
        const char *preset;
        uint32_t hidden, inter, heads, kv_heads, head_dim;
    } cases[] = {
        { "1b", 2048, 8192, 32, 8, 64 },
        { "llama-3.1-8b", 4096, 1024, 32, 8, 128 },   /* inter overridden below */
    };
    char err[L8_ERRLEN] = "";
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char *d = t_path(tmp, cases[i].preset);
        if (i == 0)
            CHECK(RUN("--out", d, "--preset", cases[i].preset, "--layers", "1", "--vocab",
                      "1024", "--quiet") == 0);
        else   /* the 8B's 14336-wide MLP is 176 MB even for one layer */
            CHECK(RUN("--out", d, "--preset", cases[i].preset, "--layers", "1", "--vocab",
                      "1024", "--inter", "1024", "--quiet") == 0);
        struct l8_model *m = NULL;
        int rc = l8_model_load(d, 2, &m, err);
        CHECK_ERR(rc, 0, err, "");
        if (rc == 0) {
            const struct l8_config *c = &m->cfg;
            CHECK(c->hidden == cases[i].hidden && c->inter == cases[i].inter &&
                  c->n_heads == cases[i].heads && c->n_kv_heads == cases[i].kv_heads &&
                  c->head_dim == cases[i].head_dim && c->n_layers == 1 && c->vocab == 1024);
            CHECK(m->layers[0].wq.out == cases[i].heads * cases[i].head_dim &&
                  m->layers[0].wk.out == cases[i].kv_heads * cases[i].head_dim);
            l8_model_free(m);
        }
        t_rm_rf(d);
    }

    /* --tie: no lm_head tensor, the loader serves the embedding for it;
     * the shared matrix is sized for the logits (std 4/sqrt(hidden)). */
    char *d = t_path(tmp, "tied");
    CHECK(RUN("--out", d, "--tie", "--vocab", "4096", "--quiet") == 0);
    struct l8_tensor_set *ts = NULL;
    int rc = l8_st_open_dir(d, &ts, err);
    CHECK_ERR(rc, 0, err, "");
    if (rc == 0) {
        CHECK(l8_st_find(ts, "lm_head.weight") == NULL);
        CHECK(l8_st_find(ts, "model.embed_tokens.weight") != NULL);
        l8_st_close(ts);
    }
    struct l8_model *m = NULL;
    rc = l8_model_load(d, 2, &m, err);
    CHECK_ERR(rc, 0, err, "");
    if (rc == 0) {
        CHECK(m->cfg.tie_embeddings);
        float *a = malloc(m->cfg.hidden * sizeof(float)), *b = malloc(m->cfg.hidden * sizeof(float));
        double ss = 0;
        for (uint32_t r = 0; r < m->cfg.vocab; r++) {
            l8_dense_row(&m->embed, r, a);
            l8_dense_row(&m->lm_head, r, b);
            CHECK(memcmp(a, b, m->cfg.hidden * sizeof(float)) == 0);
            for (uint32_t k = 0; k < m->cfg.hidden; k++)
                ss += (double)a[k] * a[k];
        }
        double sd = sqrt(ss / ((double)m->cfg.vocab * m->cfg.hidden));
        CHECK(fabs(sd - 4.0 / sqrt(m->cfg.hidden)) < 0.02 * 4.0 / sqrt(m->cfg.hidden));
        free(a);
        free(b);
        l8_model_free(m);
    }
    t_rm_rf(d);
}

/* Clear errors, exit status 2, nothing written. */
static void test_errors(const char *tmp, const char *tokenizer)
{
    char *log = t_path(tmp, "err.log");
    char *d = t_path(tmp, "never");
    struct {
        const char *args[8];
        const char *msg;
    } cases[] = {
        { { "--out", d, "--preset", "nope" }, "unknown preset 'nope'" },
        { { "--out", d, "--heads", "6", "--kv-heads", "4" }, "not a multiple of --kv-heads" },
        { { "--out", d, "--head-dim", "63" }, "must be even" },
        { { "--out", d, "--threads", "0" }, "--threads" },
        { { "--out", d, "--hidden", "12x" }, "--hidden" },
        { { "--out", d, "--vocab", "0" }, "--vocab must be positive" },
        { { "--out", d, "--dtype", "int4" }, "--dtype" },
        { { "--out", d, "--shard-size", "5Q" }, "--shard-size" },
        { { "--out", d, "--vocab", "4096", "--tokenizer", tokenizer }, "--tokenizer needs" },
        { { "--preset", "tiny" }, "--out DIR is required" },
        { { "--out", d, "--bogus" }, "--bogus" },
        { { "--out", d, "extra" }, "unexpected argument 'extra'" },
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int rc = run_tool(log, cases[i].args);
        char *text = (char *)t_read(log, NULL);
        if (rc != 2 || !text || !strstr(text, cases[i].msg)) {
            fprintf(stderr, "case %zu: exit %d, output \"%s\", want 2 and \"%s\"\n", i, rc,
                    text ? text : "", cases[i].msg);
            t_failures++;
        }
        free(text);
    }
    CHECK(access(d, F_OK) != 0);
    /* A tokenizer that does not exist: exit 1, named. */
    char *d2 = t_path(tmp, "notok");
    int rc = run_tool(log, (const char *const[]){ "--out", d2, "--vocab", "128256", "--layers",
                                                  "1", "--tokenizer", "/nonexistent/tok.json",
                                                  NULL });
    char *text = (char *)t_read(log, NULL);
    CHECK(rc == 1 && text && strstr(text, "/nonexistent/tok.json"));
    free(text);
    /* --help succeeds and documents the presets. */
    rc = run_tool(log, (const char *const[]){ "--help", NULL });
    text = (char *)t_read(log, NULL);
    CHECK(rc == 0 && text && strstr(text, "llama-3.1-8b") && strstr(text, "--seed"));
    free(text);
    t_rm_rf(d2);
    free(d);
    free(log);
}

int main(int argc, char **argv)
{
    if (argc < 3) {
        fprintf(stderr, "usage: %s LLAMA8_MKMODEL TOKENIZER_JSON\n", argv[0]);
        return 1;
    }
    tool = argv[1];
    char *tmp = t_mkdtemp();
    char *fp8_dir = NULL;
    test_determinism(tmp, &fp8_dir);
    if (fp8_dir)
        test_dtypes(tmp, fp8_dir);
    test_tiny(tmp, argv[2]);
    test_presets(tmp);
    test_errors(tmp, argv[2]);
    t_rm_rf(fp8_dir);
    t_rm_rf(tmp);
    return t_result("mkmodel");
}
