/* llama8-mkmodel - write a synthetic Llama checkpoint in the exact layout of
 * RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic (or a plain BF16/F16/F32
 * one), for any shape.
 *
 * Nothing can be downloaded on the machines the project runs on, so this is
 * what tests, examples and the GPU benchmarks load. The weights are random
 * but shaped like a trained model's: the residual stream has about unit
 * RMS, projections are N(0, 1/in) (o and down further scaled by
 * 1/sqrt(2 * layers) so the residual does not grow with depth), a few
 * outlier rows per projection, norm weights near 1, and lm_head scaled so
 * the logits of a normed hidden state have a standard deviation of about 4.
 *
 * Determinism: every row's values come from a counter-based generator keyed
 * by (seed, tensor name, row), so the files are byte-identical for a seed
 * whatever the thread count. The same values (rounded to BF16) are written
 * in every dtype, and the FP8 checkpoint is exactly what quantizing the BF16
 * one at load gives (l8_quantize_weight_row on the BF16 values).
 *
 * Memory: tensors are produced shard by shard through the writer's fill
 * callbacks (about two of the largest tensor in RAM), so the 8B preset does
 * not need 8.5 GB of memory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <json-c/json.h>

#include "config.h"
#include "numerics.h"
#include "read_file.h"
#include "safetensors.h"
#include "proto/l8_clock.h"
#include "proto/l8_hash.h"

/* Hugging Face's default max_shard_size ("5GB", decimal). */
#define MK_DEFAULT_SHARD_SIZE 5000000000ull
/* Fewer elements than this: one thread (thread start-up costs more). */
#define MK_PARALLEL_MIN_ELEMS (1u << 18)
/* Rows handed to a worker at a time. */
#define MK_ROW_BLOCK 16u
/* Outlier rows: about one in MK_OUTLIER_EVERY rows of each projection is
 * scaled by MK_OUTLIER_MIN..MK_OUTLIER_MIN+MK_OUTLIER_SPAN, as the large
 * channels of trained models are (they set the per-row FP8 scale). */
#define MK_OUTLIER_EVERY 128u
#define MK_OUTLIER_MIN 3.0f
#define MK_OUTLIER_SPAN 5.0f
/* Norm weights: 1 + MK_NORM_NOISE * N(0, 1). */
#define MK_NORM_NOISE 0.05f
/* Target standard deviation of the logits. */
#define MK_LOGIT_STD 4.0f
/* Llama 3 special ids, used when the vocabulary is the real one. */
#define MK_LLAMA3_VOCAB 128256u
#define MK_LLAMA3_BOS 128000
static const int32_t mk_llama3_eos[] = { 128001, 128008, 128009 };
/* Small vocabularies (as the golden checkpoint): bos 1, eos 2 and 3. */
static const int32_t mk_small_eos[] = { 2, 3 };
#define MK_SMALL_BOS 1
#define MK_SMALL_MIN_VOCAB 4u
/* --tokenizer's file at most: libllama8client's cap on tokenizer.json
 * (MAX_TOKENIZER_FILE in client/tokenizer.c), so no copy is one it refuses. */
#define MK_TOKENIZER_MAX (256u << 20)

enum mk_dtype { MK_FP8, MK_BF16, MK_F16, MK_F32 };

struct mk_shape {
    uint32_t hidden, inter, layers, heads, kv_heads, head_dim, vocab, max_pos;
};

struct mk_preset {
    const char *name;
    struct mk_shape s;
};

static const struct mk_preset mk_presets[] = {
    /* Small widths but the real vocabulary and special ids, so the real
     * tokenizer and chat format work end to end. */
    { "tiny",         { 256, 768, 2, 4, 1, 64, MK_LLAMA3_VOCAB, 131072 } },
    /* Llama 3.2 1B's shape (untied here). */
    { "1b",           { 2048, 8192, 16, 32, 8, 64, MK_LLAMA3_VOCAB, 131072 } },
    /* Llama 3.1 8B exactly. */
    { "llama-3.1-8b", { 4096, 14336, 32, 32, 8, 128, MK_LLAMA3_VOCAB, 131072 } },
};

struct mk_opts {
    struct mk_shape s;
    const char *preset;
    const char *out;
    const char *tokenizer;
    enum mk_dtype dtype;
    uint64_t seed;
    uint64_t shard_size;
    int threads;
    bool tie;
    bool quiet;
};

/* ---- the generator ------------------------------------------------------ */

static uint64_t fnv1a64(const char *s)
{
    uint64_t h = 0xcbf29ce484222325ull;
    for (; *s; s++)
        h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
    return h;
}

/* Key of one row: depends on the seed, the tensor's name and the row only. */
static inline uint64_t row_key(uint64_t seed, uint64_t name_hash, uint64_t row)
{
    return l8_mix64(l8_mix64(seed * L8_GOLDEN_GAMMA + name_hash) ^ (row * 0xd1b54a32d192ed03ull));
}

/* Standard normal approximation from one 64-bit draw: the sum of four
 * 16-bit uniforms (Irwin-Hall, n = 4), centred and scaled to unit variance.
 * Bounded at +-3.46 sigma; the outlier rows supply the tails. Far cheaper
 * than Box-Muller, which matters for 8 billion values. */
#define MK_IH_MEAN (4.0 * 65535.0 / 2.0)
#define MK_IH_INV_STD ((float)(1.0 / (65536.0 * 0.57735026918962576)))  /* 1/(2^16 sqrt(4/12)) */
static inline float gauss(uint64_t h)
{
    uint32_t s = (uint32_t)(h & 0xffff) + (uint32_t)((h >> 16) & 0xffff) +
                 (uint32_t)((h >> 32) & 0xffff) + (uint32_t)(h >> 48);
    return ((float)s - (float)MK_IH_MEAN) * MK_IH_INV_STD;
}

/* ---- the tensors -------------------------------------------------------- */

enum mk_kind {
    MK_KIND_GAUSS,      /* N(0, std^2) */
    MK_KIND_PROJ,       /* N(0, std^2) with outlier rows */
    MK_KIND_NORM,       /* 1 + MK_NORM_NOISE * N(0, 1) */
};

/* One generated matrix (a source); an FP8 projection writes two tensors
 * from it: the codes and the per-row scales. */
struct mk_src {
    char name[128];             /* e.g. model.layers.3.mlp.up_proj.weight */
    uint64_t name_hash;
    enum mk_kind kind;
    uint32_t rows, cols;        /* [rows, cols]; a vector is 1 x cols */
    float std;
    bool quantize;              /* FP8 codes + BF16 scales */
    uint16_t *scales;           /* [rows] BF16 bits, set by the codes' fill */
    bool scales_ready;
};

/* One tensor of the files. */
struct mk_out {
    char name[160];
    struct mk_src *src;
    enum l8_dtype dtype;
    bool is_scale;              /* the [rows, 1] weight_scale of src */
    uint32_t n_dims;
    uint64_t shape[2];
    uint64_t nbytes;
    uint32_t shard;             /* 0-based */
};

struct mk_fill {
    const struct mk_opts *o;
    struct mk_src *src;
    enum l8_dtype dtype;
    void *dst;
    atomic_uint next_row;
    atomic_int rc;
};

/* Make a finite value exactly representable in BF16, rounding to nearest
 * even as l8_f32_to_bf16 does. Part of the generator (the values it
 * defines), inlined because it runs on every one of 8 billion values. */
static inline float snap_bf16(float v)
{
    uint32_t u;
    memcpy(&u, &v, sizeof(u));
    u += 0x7fffu + ((u >> 16) & 1u);
    u &= 0xffff0000u;
    memcpy(&v, &u, sizeof(v));
    return v;
}

/* Generate row r of src (BF16-exact values) into buf[cols]. */
static void gen_row(const struct mk_opts *o, const struct mk_src *src, uint32_t r, float *buf)
{
    uint64_t key = row_key(o->seed, src->name_hash, r);
    float std = src->std;
    if (src->kind == MK_KIND_PROJ) {
        uint64_t h = l8_mix64(key ^ 0x6a09e667f3bcc909ull);
        if (h % MK_OUTLIER_EVERY == 0)
            std *= MK_OUTLIER_MIN + MK_OUTLIER_SPAN * (float)(h >> 40) * 0x1p-24f;
    }
    for (uint32_t i = 0; i < src->cols; i++) {
        float g = gauss(l8_mix64(key + (uint64_t)(i + 1) * L8_GOLDEN_GAMMA));
        float v = src->kind == MK_KIND_NORM ? 1.0f + MK_NORM_NOISE * g : std * g;
        /* Every dtype carries the same (BF16) values, so checkpoints of
         * different dtypes describe the same model. */
        buf[i] = snap_bf16(v);
    }
}

static void fill_rows(struct mk_fill *f, float *buf)
{
    struct mk_src *src = f->src;
    uint32_t cols = src->cols;
    for (;;) {
        uint32_t r0 = atomic_fetch_add(&f->next_row, MK_ROW_BLOCK);
        if (r0 >= src->rows)
            return;
        uint32_t r1 = r0 + MK_ROW_BLOCK < src->rows ? r0 + MK_ROW_BLOCK : src->rows;
        for (uint32_t r = r0; r < r1; r++) {
            gen_row(f->o, src, r, buf);
            uint64_t base = (uint64_t)r * cols;
            switch (f->dtype) {
            case L8_F8_E4M3:
                src->scales[r] = l8_quantize_weight_row(buf, cols, (uint8_t *)f->dst + base);
                break;
            case L8_BF16: {
                uint16_t *d = (uint16_t *)f->dst + base;
                for (uint32_t i = 0; i < cols; i++)
                    d[i] = l8_f32_to_bf16(buf[i]);
                break;
            }
            case L8_F16: {
                uint16_t *d = (uint16_t *)f->dst + base;
                for (uint32_t i = 0; i < cols; i++)
                    d[i] = l8_f32_to_f16(buf[i]);
                break;
            }
            default:
                memcpy((float *)f->dst + base, buf, cols * sizeof(float));
                break;
            }
        }
    }
}

static void *fill_worker(void *arg)
{
    struct mk_fill *f = arg;
    float *buf = malloc(f->src->cols * sizeof(float));
    if (!buf) {
        atomic_store(&f->rc, -ENOMEM);
        return NULL;
    }
    fill_rows(f, buf);
    free(buf);
    return NULL;
}

struct mk_plan {
    const struct mk_opts *o;
    struct mk_src *src;         /* [n_src] */
    uint32_t n_src;
    struct mk_out *out;         /* [n_out] in state-dict order, then sorted per shard */
    uint32_t n_out;
    uint32_t n_shards;
    uint64_t total;
};

/* What a fill callback needs: the plan's options and the tensor. */
struct mk_fill_ctx {
    const struct mk_opts *o;
    struct mk_out *t;
};

static int fill_generated(void *ctx, void *dst, uint64_t nbytes)
{
    struct mk_fill_ctx *c = ctx;
    struct mk_out *t = c->t;
    struct mk_src *src = t->src;

    if (t->is_scale) {
        /* weight sorts before weight_scale, in the same or an earlier
         * shard, so the codes' fill has produced the scales already. */
        if (!src->scales_ready || nbytes != (uint64_t)src->rows * 2)
            return -EINVAL;
        memcpy(dst, src->scales, nbytes);
        return 0;
    }
    struct mk_fill f = { .o = c->o, .src = src, .dtype = t->dtype, .dst = dst };
    atomic_init(&f.next_row, 0);
    atomic_init(&f.rc, 0);

    int nth = c->o->threads;
    if ((uint64_t)src->rows * src->cols < MK_PARALLEL_MIN_ELEMS)
        nth = 1;
    if ((uint32_t)nth > src->rows)
        nth = (int)src->rows;
    pthread_t th[nth > 1 ? nth - 1 : 1];
    int started = 0;
    for (int i = 0; i < nth - 1; i++) {
        if (pthread_create(&th[i], NULL, fill_worker, &f) != 0)
            break;      /* fewer threads: same bytes, only slower */
        started++;
    }
    fill_worker(&f);
    for (int i = 0; i < started; i++)
        pthread_join(th[i], NULL);
    if (atomic_load(&f.rc) < 0)
        return atomic_load(&f.rc);
    if (t->dtype == L8_F8_E4M3)
        src->scales_ready = true;
    return 0;
}

/* ---- the plan: tensors, dtypes, shards ---------------------------------- */

static struct mk_src *plan_src(struct mk_plan *p, const char *name, enum mk_kind kind,
                               uint32_t rows, uint32_t cols, float std)
{
    struct mk_src *s = &p->src[p->n_src++];
    snprintf(s->name, sizeof(s->name), "%s", name);
    s->name_hash = fnv1a64(name);
    s->kind = kind;
    s->rows = rows;
    s->cols = cols;
    s->std = std;
    s->quantize = kind == MK_KIND_PROJ && p->o->dtype == MK_FP8;
    return s;
}

static enum l8_dtype plain_dtype(enum mk_dtype d)
{
    switch (d) {
    case MK_F16: return L8_F16;
    case MK_F32: return L8_F32;
    default:     return L8_BF16;   /* FP8-dynamic keeps non-projections BF16 */
    }
}

static void plan_out(struct mk_plan *p, struct mk_src *s, enum l8_dtype dt, bool is_scale)
{
    struct mk_out *t = &p->out[p->n_out++];
    snprintf(t->name, sizeof(t->name), "%s%s", s->name, is_scale ? "_scale" : "");
    t->src = s;
    t->dtype = dt;
    t->is_scale = is_scale;
    if (s->kind == MK_KIND_NORM) {
        t->n_dims = 1;
        t->shape[0] = s->cols;
    } else {
        t->n_dims = 2;
        t->shape[0] = s->rows;
        t->shape[1] = is_scale ? 1 : s->cols;
    }
    t->nbytes = t->shape[0] * (t->n_dims == 2 ? t->shape[1] : 1) *
                (dt == L8_F8_E4M3 ? 1 : dt == L8_F32 ? 4 : 2);
}

static int out_cmp(const void *a, const void *b)
{
    const struct mk_out *x = a, *y = b;
    if (x->shard != y->shard)
        return x->shard < y->shard ? -1 : 1;
    return strcmp(x->name, y->name);
}

static void plan_free(struct mk_plan *p)
{
    if (!p->src)
        return;
    for (uint32_t i = 0; i < p->n_src; i++)
        free(p->src[i].scales);
    free(p->src);
    free(p->out);
}

/* Lay out every tensor in Hugging Face's state-dict order, assign shards as
 * transformers' save_pretrained does (a new shard when the next tensor
 * would overflow max_shard_size), then sort each shard by name as the
 * reference files are. */
static int plan_build(const struct mk_opts *o, struct mk_plan *p)
{
    const struct mk_shape *s = &o->s;
    uint32_t max_src = 3 + s->layers * 9;
    char name[128];

    memset(p, 0, sizeof(*p));
    p->o = o;
    p->src = calloc(max_src, sizeof(*p->src));
    p->out = calloc(max_src * 2, sizeof(*p->out));
    if (!p->src || !p->out)
        return -ENOMEM;

    uint32_t q_out = s->heads * s->head_dim, kv_out = s->kv_heads * s->head_dim;
    float resid_scale = 1.0f / sqrtf(2.0f * (float)s->layers);
    /* With tied embeddings one matrix serves both ends; size it for the
     * logits (small embeddings, as tied models such as SmolLM2 have). */
    float lm_std = MK_LOGIT_STD / sqrtf((float)s->hidden);
    float embed_std = o->tie ? lm_std : 1.0f;

    plan_src(p, "model.embed_tokens.weight", MK_KIND_GAUSS, s->vocab, s->hidden, embed_std);
    for (uint32_t l = 0; l < s->layers; l++) {
        static const struct { const char *mod; int rows, cols; bool resid; } projs[] = {
            { "self_attn.q_proj", 'q', 'h', false }, { "self_attn.k_proj", 'k', 'h', false },
            { "self_attn.v_proj", 'k', 'h', false }, { "self_attn.o_proj", 'h', 'q', true },
            { "mlp.gate_proj", 'i', 'h', false },    { "mlp.up_proj", 'i', 'h', false },
            { "mlp.down_proj", 'h', 'i', true },
        };
        for (size_t j = 0; j < sizeof(projs) / sizeof(projs[0]); j++) {
            uint32_t dims[2];
            int sym[2] = { projs[j].rows, projs[j].cols };
            for (int d = 0; d < 2; d++)
                dims[d] = sym[d] == 'q' ? q_out : sym[d] == 'k' ? kv_out :
                          sym[d] == 'i' ? s->inter : s->hidden;
            float std = 1.0f / sqrtf((float)dims[1]) * (projs[j].resid ? resid_scale : 1.0f);
            snprintf(name, sizeof(name), "model.layers.%u.%s.weight", l, projs[j].mod);
            plan_src(p, name, MK_KIND_PROJ, dims[0], dims[1], std);
        }
        snprintf(name, sizeof(name), "model.layers.%u.input_layernorm.weight", l);
        plan_src(p, name, MK_KIND_NORM, 1, s->hidden, 0.0f);
        snprintf(name, sizeof(name), "model.layers.%u.post_attention_layernorm.weight", l);
        plan_src(p, name, MK_KIND_NORM, 1, s->hidden, 0.0f);
    }
    plan_src(p, "model.norm.weight", MK_KIND_NORM, 1, s->hidden, 0.0f);
    if (!o->tie)
        plan_src(p, "lm_head.weight", MK_KIND_GAUSS, s->vocab, s->hidden, lm_std);

    for (uint32_t i = 0; i < p->n_src; i++) {
        struct mk_src *src = &p->src[i];
        if (src->quantize) {
            src->scales = malloc((size_t)src->rows * sizeof(uint16_t));
            if (!src->scales)
                return -ENOMEM;
            plan_out(p, src, L8_F8_E4M3, false);
            plan_out(p, src, L8_BF16, true);
        } else {
            plan_out(p, src, plain_dtype(o->dtype), false);
        }
    }

    uint64_t cur = 0;
    uint32_t shard = 0;
    for (uint32_t i = 0; i < p->n_out; i++) {
        struct mk_out *t = &p->out[i];
        if (cur > 0 && cur + t->nbytes > o->shard_size) {
            shard++;
            cur = 0;
        }
        t->shard = shard;
        cur += t->nbytes;
        p->total += t->nbytes;
    }
    p->n_shards = shard + 1;
    qsort(p->out, p->n_out, sizeof(*p->out), out_cmp);
    return 0;
}

static void shard_name(const struct mk_plan *p, uint32_t k, char *buf, size_t len)
{
    if (p->n_shards == 1)
        snprintf(buf, len, "model.safetensors");
    else
        snprintf(buf, len, "model-%05u-of-%05u.safetensors", k + 1, p->n_shards);
}

/* ---- files -------------------------------------------------------------- */

/* A float as Python's json writes it ("1e-05", "500000.0", "0.6"), so the
 * files read like the real ones. */
static json_object *jdouble(double v)
{
    char buf[40];
    if (v == floor(v) && fabs(v) < 1e16) {
        snprintf(buf, sizeof(buf), "%.1f", v);
    } else {
        for (int prec = 1; prec <= 17; prec++) {
            snprintf(buf, sizeof(buf), "%.*g", prec, v);
            if (strtod(buf, NULL) == v)
                break;
        }
    }
    return json_object_new_double_s(v, buf);
}

static json_object *jids(const int32_t *ids, size_t n)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++)
        json_object_array_add(a, json_object_new_int(ids[i]));
    return a;
}

/* Write DIR/NAME atomically (NAME.partial, then rename). */
static int write_text_file(const char *dir, const char *name, const char *text, size_t len)
{
    char path[PATH_MAX], tmp[PATH_MAX + 16];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    snprintf(tmp, sizeof(tmp), "%s.partial", path);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        int e = errno;
        fprintf(stderr, "llama8-mkmodel: cannot create %s: %s\n", tmp, strerror(e));
        return -e;
    }
    const char *q = text;
    while (len) {
        ssize_t r = write(fd, q, len);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            int e = r < 0 ? errno : EIO;
            fprintf(stderr, "llama8-mkmodel: write %s: %s\n", tmp, strerror(e));
            close(fd);
            unlink(tmp);
            return -e;
        }
        q += r;
        len -= (size_t)r;
    }
    if (close(fd) < 0 || rename(tmp, path) < 0) {
        int e = errno;
        fprintf(stderr, "llama8-mkmodel: finishing %s: %s\n", path, strerror(e));
        unlink(tmp);
        return -e;
    }
    return 0;
}

static int write_json_file(const char *dir, const char *name, json_object *obj)
{
    size_t len;
    const char *s = json_object_to_json_string_length(
        obj, JSON_C_TO_STRING_PRETTY | JSON_C_TO_STRING_SPACED | JSON_C_TO_STRING_NOSLASHESCAPE,
        &len);
    if (!s)
        return -ENOMEM;
    char *buf = malloc(len + 2);
    if (!buf)
        return -ENOMEM;
    memcpy(buf, s, len);
    buf[len] = '\n';
    int rc = write_text_file(dir, name, buf, len + 1);
    free(buf);
    return rc;
}

/* The quantization_config of RedHatAI's FP8-dynamic release (and of the
 * golden checkpoint), verbatim. */
static const char mk_quant_config[] =
    "{\"config_groups\": {\"group_0\": {"
    "\"input_activations\": {\"dynamic\": true, \"num_bits\": 8, \"observer\": null,"
    " \"strategy\": \"token\", \"symmetric\": true, \"type\": \"float\"},"
    "\"targets\": [\"Linear\"],"
    "\"weights\": {\"dynamic\": false, \"num_bits\": 8, \"observer\": \"minmax\","
    " \"strategy\": \"channel\", \"symmetric\": true, \"type\": \"float\"}}},"
    "\"format\": \"float-quantized\", \"ignore\": [\"lm_head\"],"
    "\"quant_method\": \"compressed-tensors\", \"quantization_status\": \"compressed\"}";

static void special_ids(const struct mk_opts *o, int32_t *bos, const int32_t **eos, size_t *n_eos)
{
    if (o->s.vocab >= MK_LLAMA3_VOCAB) {
        *bos = MK_LLAMA3_BOS;
        *eos = mk_llama3_eos;
        *n_eos = sizeof(mk_llama3_eos) / sizeof(mk_llama3_eos[0]);
    } else {
        *bos = MK_SMALL_BOS;
        *eos = mk_small_eos;
        *n_eos = sizeof(mk_small_eos) / sizeof(mk_small_eos[0]);
    }
}

static int write_configs(const struct mk_opts *o)
{
    const struct mk_shape *s = &o->s;
    int32_t bos;
    const int32_t *eos;
    size_t n_eos;
    int rc;
    special_ids(o, &bos, &eos, &n_eos);

    /* Keys sorted, as transformers writes them. */
    json_object *c = json_object_new_object();
    json_object *arch = json_object_new_array();
    json_object_array_add(arch, json_object_new_string("LlamaForCausalLM"));
    json_object_object_add(c, "architectures", arch);
    json_object_object_add(c, "attention_bias", json_object_new_boolean(0));
    json_object_object_add(c, "attention_dropout", jdouble(0.0));
    json_object_object_add(c, "bos_token_id", json_object_new_int(bos));
    json_object_object_add(c, "eos_token_id", jids(eos, n_eos));
    json_object_object_add(c, "head_dim", json_object_new_int64(s->head_dim));
    json_object_object_add(c, "hidden_act", json_object_new_string("silu"));
    json_object_object_add(c, "hidden_size", json_object_new_int64(s->hidden));
    json_object_object_add(c, "initializer_range", jdouble(0.02));
    json_object_object_add(c, "intermediate_size", json_object_new_int64(s->inter));
    json_object_object_add(c, "max_position_embeddings", json_object_new_int64(s->max_pos));
    json_object_object_add(c, "mlp_bias", json_object_new_boolean(0));
    json_object_object_add(c, "model_type", json_object_new_string("llama"));
    json_object_object_add(c, "num_attention_heads", json_object_new_int64(s->heads));
    json_object_object_add(c, "num_hidden_layers", json_object_new_int64(s->layers));
    json_object_object_add(c, "num_key_value_heads", json_object_new_int64(s->kv_heads));
    json_object_object_add(c, "pretraining_tp", json_object_new_int(1));
    if (o->dtype == MK_FP8) {
        json_object *q = json_tokener_parse(mk_quant_config);
        if (!q) {
            json_object_put(c);
            return -EINVAL;
        }
        json_object_object_add(c, "quantization_config", q);
    }
    json_object_object_add(c, "rms_norm_eps", jdouble(1e-5));
    json_object *rs = json_object_new_object();
    json_object_object_add(rs, "factor", jdouble(8.0));
    json_object_object_add(rs, "high_freq_factor", jdouble(4.0));
    json_object_object_add(rs, "low_freq_factor", jdouble(1.0));
    json_object_object_add(rs, "original_max_position_embeddings", json_object_new_int(8192));
    json_object_object_add(rs, "rope_type", json_object_new_string("llama3"));
    json_object_object_add(c, "rope_scaling", rs);
    json_object_object_add(c, "rope_theta", jdouble(500000.0));
    json_object_object_add(c, "tie_word_embeddings", json_object_new_boolean(o->tie));
    json_object_object_add(c, "torch_dtype", json_object_new_string(
        o->dtype == MK_F16 ? "float16" : o->dtype == MK_F32 ? "float32" : "bfloat16"));
    json_object_object_add(c, "use_cache", json_object_new_boolean(1));
    json_object_object_add(c, "vocab_size", json_object_new_int64(s->vocab));
    rc = write_json_file(o->out, "config.json", c);
    json_object_put(c);
    if (rc < 0)
        return rc;

    /* As the real Llama 3.1 Instruct ships it. */
    json_object *g = json_object_new_object();
    json_object_object_add(g, "bos_token_id", json_object_new_int(bos));
    json_object_object_add(g, "do_sample", json_object_new_boolean(1));
    json_object_object_add(g, "eos_token_id", jids(eos, n_eos));
    json_object_object_add(g, "temperature", jdouble(0.6));
    json_object_object_add(g, "top_p", jdouble(0.9));
    rc = write_json_file(o->out, "generation_config.json", g);
    json_object_put(g);
    return rc;
}

static int write_index(const struct mk_opts *o, const struct mk_plan *p)
{
    /* weight_map sorted by name, as transformers writes it. */
    struct mk_out *sorted = malloc(p->n_out * sizeof(*sorted));
    if (!sorted)
        return -ENOMEM;
    memcpy(sorted, p->out, p->n_out * sizeof(*sorted));
    for (uint32_t i = 0; i < p->n_out; i++)
        sorted[i].shard = 0;    /* out_cmp then sorts by name alone */
    qsort(sorted, p->n_out, sizeof(*sorted), out_cmp);

    json_object *idx = json_object_new_object(), *meta = json_object_new_object();
    json_object *map = json_object_new_object();
    json_object_object_add(meta, "total_size", json_object_new_int64((int64_t)p->total));
    json_object_object_add(idx, "metadata", meta);
    for (uint32_t i = 0; i < p->n_out; i++) {
        char fname[64];
        /* shard was cleared in the copy: look it up in the plan. */
        for (uint32_t j = 0; j < p->n_out; j++)
            if (strcmp(p->out[j].name, sorted[i].name) == 0) {
                shard_name(p, p->out[j].shard, fname, sizeof(fname));
                break;
            }
        json_object_object_add(map, sorted[i].name, json_object_new_string(fname));
    }
    json_object_object_add(idx, "weight_map", map);
    int rc = write_json_file(o->out, "model.safetensors.index.json", idx);
    json_object_put(idx);
    free(sorted);
    return rc;
}

/* Remove the weights of an earlier run in DIR (another shard count would
 * leave files a loader might pick up). Nothing else is touched. */
static int remove_stale(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return -errno;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *n = e->d_name;
        unsigned a, b;
        char tail[32];
        bool ours = strcmp(n, "model.safetensors") == 0 ||
                    strcmp(n, "model.safetensors.partial") == 0 ||
                    strcmp(n, "model.safetensors.index.json") == 0 ||
                    (sscanf(n, "model-%5u-of-%5u.safetensor%31s", &a, &b, tail) == 3 &&
                     (strcmp(tail, "s") == 0 || strcmp(tail, "s.partial") == 0));
        if (ours && unlinkat(dirfd(d), n, 0) < 0 && errno != ENOENT) {
            int err = errno;
            fprintf(stderr, "llama8-mkmodel: cannot remove %s/%s: %s\n", dir, n, strerror(err));
            closedir(d);
            return -err;
        }
    }
    closedir(d);
    return 0;
}

static int copy_tokenizer(const char *src, const char *dir)
{
    char err[L8_ERRLEN], *buf;
    size_t len;
    int rc = l8_read_file(src, MK_TOKENIZER_MAX, &buf, &len, err, sizeof err);
    if (rc < 0) {
        fprintf(stderr, "llama8-mkmodel: --tokenizer %s\n", err);
        return rc;
    }
    rc = write_text_file(dir, "tokenizer.json", buf, len);
    free(buf);
    return rc;
}

static int mkdir_p(const char *dir)
{
    char tmp[PATH_MAX];
    if (snprintf(tmp, sizeof(tmp), "%s", dir) >= (int)sizeof(tmp))
        return -ENAMETOOLONG;
    for (char *q = tmp + 1; *q; q++) {
        if (*q != '/')
            continue;
        *q = 0;
        if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
            return -errno;
        *q = '/';
    }
    if (mkdir(tmp, 0755) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(tmp, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int write_shards(const struct mk_opts *o, struct mk_plan *p)
{
    struct mk_fill_ctx *ctx = calloc(p->n_out, sizeof(*ctx));
    struct l8_st_writer *w = NULL;
    char err[L8_ERRLEN], fname[64], path[PATH_MAX];
    int rc = 0;
    uint32_t i = 0;

    if (!ctx)
        return -ENOMEM;
    for (uint32_t k = 0; k < p->n_shards; k++) {
        double t0 = l8_now_s();
        uint64_t bytes = 0;
        shard_name(p, k, fname, sizeof(fname));
        snprintf(path, sizeof(path), "%s/%s", o->out, fname);
        rc = l8_st_writer_open(path, &w, err);
        if (rc < 0) {
            fprintf(stderr, "llama8-mkmodel: %s\n", err);
            goto out;
        }
        for (; i < p->n_out && p->out[i].shard == k; i++) {
            struct mk_out *t = &p->out[i];
            ctx[i].o = o;
            ctx[i].t = t;
            rc = l8_st_writer_add_fill(w, t->name, t->dtype, t->n_dims, t->shape,
                                       fill_generated, &ctx[i]);
            if (rc < 0) {
                fprintf(stderr, "llama8-mkmodel: %s: adding %s: %s\n", path, t->name,
                        strerror(-rc));
                l8_st_writer_abort(w);
                goto out;
            }
            bytes += t->nbytes;
        }
        rc = l8_st_writer_finish(w, "{\"format\": \"pt\"}", err);
        if (rc < 0) {
            fprintf(stderr, "llama8-mkmodel: %s\n", err);
            goto out;
        }
        if (!o->quiet) {
            double dt = l8_now_s() - t0;
            fprintf(stderr, "llama8-mkmodel: wrote %s (%.2f GB) in %.1f s, %.2f GB/s\n",
                    path, (double)bytes * 1e-9, dt, (double)bytes * 1e-9 / (dt > 0 ? dt : 1e-9));
        }
    }
out:
    free(ctx);
    return rc;
}

/* ---- command line -------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
"Usage: llama8-mkmodel --out DIR [options]\n"
"\n"
"Writes a synthetic Llama checkpoint in the layout of\n"
"RedHatAI/Meta-Llama-3.1-8B-Instruct-FP8-dynamic: config.json,\n"
"generation_config.json, model.safetensors or shards model-0000N-of-0000M\n"
"with model.safetensors.index.json; F8_E4M3 projections with BF16 per-row\n"
"weight_scale; BF16 embedding, norms and lm_head. Random weights with a\n"
"trained model's scale, deterministic for a seed whatever the thread count.\n"
"Earlier model*.safetensors* files in DIR are removed first.\n"
"\n"
"  --out DIR          output directory (created if missing)\n"
"  --preset NAME      tiny (default: vocab 128256, hidden 256, 2 layers),\n"
"                     1b (Llama 3.2 1B shape), llama-3.1-8b (8.5 GB)\n"
"  --hidden N --inter N --layers N --heads N --kv-heads N --head-dim N\n"
"  --vocab N --max-pos N        override the preset's shape\n"
"  --dtype T          fp8 (default: FP8-dynamic), bf16, f16 or f32\n"
"                     (unquantized, no quantization_config)\n"
"  --tie              tied embeddings (no lm_head tensor)\n"
"  --seed N           generator seed (default 0)\n"
"  --threads N        worker threads (default: all cores)\n"
"  --shard-size SIZE  max bytes per shard, suffix K/M/G (decimal) or\n"
"                     KiB/MiB/GiB (default 5G, as Hugging Face)\n"
"  --tokenizer FILE   copy FILE to DIR/tokenizer.json (the real Llama 3.1\n"
"                     tokenizer needs --vocab 128256, the presets' default)\n"
"  --quiet            no progress lines\n"
"  --help             this text\n"
"\n"
"Vocabularies of 128256 and more use Llama 3's special ids (bos 128000,\n"
"eos 128001 128008 128009); smaller ones bos 1, eos 2 3.\n");
}

static int parse_u64(const char *opt, const char *arg, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    if (!arg || !*arg || *arg == '-')
        goto bad;
    unsigned long long v = strtoull(arg, &end, 10);
    if (errno || *end || v > max)
        goto bad;
    *out = v;
    return 0;
bad:
    fprintf(stderr, "llama8-mkmodel: %s: expected an integer from 0 to %" PRIu64 ", got '%s'\n",
            opt, max, arg ? arg : "");
    return -EINVAL;
}

static int parse_size(const char *arg, uint64_t *out)
{
    static const struct { const char *suf; uint64_t mul; } sufs[] = {
        { "", 1 }, { "B", 1 },
        { "K", 1000ull }, { "KB", 1000ull }, { "KiB", 1ull << 10 },
        { "M", 1000000ull }, { "MB", 1000000ull }, { "MiB", 1ull << 20 },
        { "G", 1000000000ull }, { "GB", 1000000000ull }, { "GiB", 1ull << 30 },
    };
    char *end;
    errno = 0;
    if (!*arg || *arg == '-')
        goto bad;
    unsigned long long v = strtoull(arg, &end, 10);
    if (errno || end == arg)
        goto bad;
    for (size_t i = 0; i < sizeof(sufs) / sizeof(sufs[0]); i++) {
        if (strcmp(end, sufs[i].suf) == 0) {
            if (v == 0 || v > UINT64_MAX / sufs[i].mul)
                goto bad;
            *out = v * sufs[i].mul;
            return 0;
        }
    }
bad:
    fprintf(stderr, "llama8-mkmodel: --shard-size: expected a positive size such as 5G or "
            "512MiB, got '%s'\n", arg);
    return -EINVAL;
}

enum {
    OPT_HIDDEN = 256, OPT_INTER, OPT_LAYERS, OPT_HEADS, OPT_KV_HEADS, OPT_HEAD_DIM,
    OPT_VOCAB, OPT_MAX_POS, OPT_SHARD, OPT_TOKENIZER, OPT_TIE, OPT_QUIET, OPT_DTYPE,
};

static int parse_args(int argc, char **argv, struct mk_opts *o)
{
    static const struct option longopts[] = {
        { "out", required_argument, NULL, 'o' },
        { "preset", required_argument, NULL, 'p' },
        { "seed", required_argument, NULL, 's' },
        { "threads", required_argument, NULL, 't' },
        { "dtype", required_argument, NULL, OPT_DTYPE },
        { "hidden", required_argument, NULL, OPT_HIDDEN },
        { "inter", required_argument, NULL, OPT_INTER },
        { "layers", required_argument, NULL, OPT_LAYERS },
        { "heads", required_argument, NULL, OPT_HEADS },
        { "kv-heads", required_argument, NULL, OPT_KV_HEADS },
        { "head-dim", required_argument, NULL, OPT_HEAD_DIM },
        { "vocab", required_argument, NULL, OPT_VOCAB },
        { "max-pos", required_argument, NULL, OPT_MAX_POS },
        { "shard-size", required_argument, NULL, OPT_SHARD },
        { "tokenizer", required_argument, NULL, OPT_TOKENIZER },
        { "tie", no_argument, NULL, OPT_TIE },
        { "quiet", no_argument, NULL, OPT_QUIET },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    /* Shape overrides are applied after the preset, whatever their order. */
    uint64_t ov[8];
    bool have[8] = { false };
    uint64_t v;
    int c;
    long ncpu = sysconf(_SC_NPROCESSORS_ONLN);

    memset(o, 0, sizeof(*o));
    o->preset = "tiny";
    o->dtype = MK_FP8;
    o->shard_size = MK_DEFAULT_SHARD_SIZE;
    o->threads = ncpu > 0 ? (int)ncpu : 1;

    opterr = 0;
    while ((c = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (c) {
        case 'o': o->out = optarg; break;
        case 'p': o->preset = optarg; break;
        case 's':
            if (parse_u64("--seed", optarg, UINT64_MAX, &o->seed) < 0)
                return -EINVAL;
            break;
        case 't':
            if (parse_u64("--threads", optarg, 1024, &v) < 0)
                return -EINVAL;
            if (v == 0) {
                fprintf(stderr, "llama8-mkmodel: --threads must be at least 1\n");
                return -EINVAL;
            }
            o->threads = (int)v;
            break;
        case OPT_DTYPE:
            if (strcmp(optarg, "fp8") == 0) o->dtype = MK_FP8;
            else if (strcmp(optarg, "bf16") == 0) o->dtype = MK_BF16;
            else if (strcmp(optarg, "f16") == 0) o->dtype = MK_F16;
            else if (strcmp(optarg, "f32") == 0) o->dtype = MK_F32;
            else {
                fprintf(stderr, "llama8-mkmodel: --dtype: expected fp8, bf16, f16 or f32, "
                        "got '%s'\n", optarg);
                return -EINVAL;
            }
            break;
        case OPT_HIDDEN: case OPT_INTER: case OPT_LAYERS: case OPT_HEADS:
        case OPT_KV_HEADS: case OPT_HEAD_DIM: case OPT_VOCAB: case OPT_MAX_POS: {
            static const char *names[8] = { "--hidden", "--inter", "--layers", "--heads",
                                            "--kv-heads", "--head-dim", "--vocab", "--max-pos" };
            int k = c - OPT_HIDDEN;
            /* Row and column counts must fit in 32 bits even after
             * multiplying heads by head_dim; 2^20 is far beyond any Llama. */
            if (parse_u64(names[k], optarg, k == 7 ? 1ull << 30 : 1ull << 20, &ov[k]) < 0)
                return -EINVAL;
            if (ov[k] == 0) {
                fprintf(stderr, "llama8-mkmodel: %s must be positive\n", names[k]);
                return -EINVAL;
            }
            have[k] = true;
            break;
        }
        case OPT_SHARD:
            if (parse_size(optarg, &o->shard_size) < 0)
                return -EINVAL;
            break;
        case OPT_TOKENIZER: o->tokenizer = optarg; break;
        case OPT_TIE: o->tie = true; break;
        case OPT_QUIET: o->quiet = true; break;
        case 'h': usage(stdout); return 1;
        default:
            if (optopt)
                fprintf(stderr, "llama8-mkmodel: option needs a value or is unknown: %s\n",
                        argv[optind - 1]);
            else
                fprintf(stderr, "llama8-mkmodel: unknown option %s\n", argv[optind - 1]);
            fprintf(stderr, "try llama8-mkmodel --help\n");
            return -EINVAL;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "llama8-mkmodel: unexpected argument '%s'\n", argv[optind]);
        return -EINVAL;
    }
    if (!o->out) {
        fprintf(stderr, "llama8-mkmodel: --out DIR is required (try --help)\n");
        return -EINVAL;
    }
    const struct mk_preset *pr = NULL;
    for (size_t i = 0; i < sizeof(mk_presets) / sizeof(mk_presets[0]); i++)
        if (strcmp(mk_presets[i].name, o->preset) == 0)
            pr = &mk_presets[i];
    if (!pr) {
        fprintf(stderr, "llama8-mkmodel: unknown preset '%s' (tiny, 1b, llama-3.1-8b)\n",
                o->preset);
        return -EINVAL;
    }
    o->s = pr->s;
    uint32_t *fields[8] = { &o->s.hidden, &o->s.inter, &o->s.layers, &o->s.heads,
                            &o->s.kv_heads, &o->s.head_dim, &o->s.vocab, &o->s.max_pos };
    for (int k = 0; k < 8; k++)
        if (have[k])
            *fields[k] = (uint32_t)ov[k];

    const struct mk_shape *s = &o->s;
    if (s->heads % s->kv_heads) {
        fprintf(stderr, "llama8-mkmodel: --heads %u is not a multiple of --kv-heads %u\n",
                s->heads, s->kv_heads);
        return -EINVAL;
    }
    if (s->head_dim % 2) {
        fprintf(stderr, "llama8-mkmodel: --head-dim %u must be even (RoPE rotates pairs)\n",
                s->head_dim);
        return -EINVAL;
    }
    if (s->vocab < MK_SMALL_MIN_VOCAB) {
        fprintf(stderr, "llama8-mkmodel: --vocab %u is too small (at least %u: bos, eos)\n",
                s->vocab, MK_SMALL_MIN_VOCAB);
        return -EINVAL;
    }
    if ((uint64_t)s->heads * s->head_dim > UINT32_MAX / 2 ||
        (uint64_t)s->vocab * s->hidden > (1ull << 40)) {
        fprintf(stderr, "llama8-mkmodel: shape too large\n");
        return -EINVAL;
    }
    if (o->tokenizer && s->vocab < MK_LLAMA3_VOCAB) {
        fprintf(stderr, "llama8-mkmodel: --tokenizer needs a vocabulary of at least %u "
                "(the Llama 3 tokenizer's ids), but --vocab is %u\n", MK_LLAMA3_VOCAB, s->vocab);
        return -EINVAL;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct mk_opts o;
    struct mk_plan p = { 0 };
    int rc = parse_args(argc, argv, &o);
    if (rc)
        return rc > 0 ? 0 : 2;

    double t0 = l8_now_s();
    rc = mkdir_p(o.out);
    if (rc < 0) {
        fprintf(stderr, "llama8-mkmodel: cannot create directory %s: %s\n", o.out, strerror(-rc));
        return 1;
    }
    rc = plan_build(&o, &p);
    if (rc < 0) {
        fprintf(stderr, "llama8-mkmodel: %s\n", strerror(-rc));
        goto out;
    }
    if (!o.quiet)
        fprintf(stderr, "llama8-mkmodel: %s: hidden %u inter %u layers %u heads %u/%u "
                "head_dim %u vocab %u, %s, %.3f GB in %u file%s, seed %" PRIu64
                ", %d thread%s\n",
                o.out, o.s.hidden, o.s.inter, o.s.layers, o.s.heads, o.s.kv_heads,
                o.s.head_dim, o.s.vocab,
                o.dtype == MK_FP8 ? "fp8" : o.dtype == MK_BF16 ? "bf16" :
                o.dtype == MK_F16 ? "f16" : "f32",
                (double)p.total * 1e-9, p.n_shards, p.n_shards > 1 ? "s" : "", o.seed,
                o.threads, o.threads > 1 ? "s" : "");
    rc = remove_stale(o.out);
    if (rc < 0)
        goto out;
    rc = write_configs(&o);
    if (rc == 0 && o.tokenizer)
        rc = copy_tokenizer(o.tokenizer, o.out);
    if (rc == 0)
        rc = write_shards(&o, &p);
    if (rc == 0 && p.n_shards > 1)
        rc = write_index(&o, &p);
    if (rc == 0 && !o.quiet)
        fprintf(stderr, "llama8-mkmodel: done in %.1f s\n", l8_now_s() - t0);
out:
    plan_free(&p);
    return rc < 0 ? 1 : 0;
}
