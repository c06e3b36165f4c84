/* test_model.c - the checkpoint loader.
 *
 * - The golden FP8-dynamic checkpoint: shapes, FP8 codes used in place from
 *   the mapping, scales/norms/embedding decoded as the file (read here
 *   independently) says, weight_bytes.
 * - Dense checkpoints written here byte by byte (BF16, F16, F32; tied
 *   embeddings) and an FP8 one with an ignored projection: load-time
 *   quantization equals l8_quantize_weight_row on every row.
 * - Broken copies of the golden checkpoint, one defect each: the load fails
 *   with the right code and a message naming the file and tensor or key; a
 *   FIFO, a directory or a device in place of a file is refused at once.
 * - Values the engines cannot compute with, one element changed in a copy:
 *   a weight_scale that is NaN, infinite, zero or negative, an E4M3 NaN
 *   code, a NaN or an infinity in the embedding, lm_head, a norm or a dense
 *   projection: refused, naming the tensor and the first bad element, the
 *   same at every thread count. */
#include <float.h>
#include <math.h>

#include "model.h"
#include "numerics.h"
#include "testutil.h"

static const char *golden;
static const char *const SHARD1 = "model-00001-of-00002.safetensors";
static const char *const SHARD2 = "model-00002-of-00002.safetensors";

static const char *const proj_names[7] = {
    "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
    "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj",
};

static const struct l8_qweight *proj_of(const struct l8_layer *ly, int p)
{
    const struct l8_qweight *q[7] = { &ly->wq, &ly->wk, &ly->wv, &ly->wo,
                                      &ly->wgate, &ly->wup, &ly->wdown };
    return q[p];
}

static void proj_dims(const struct l8_config *c, int p, uint32_t *out, uint32_t *in)
{
    uint32_t q = c->n_heads * c->head_dim, kv = c->n_kv_heads * c->head_dim;
    const uint32_t o[7] = { q, kv, kv, c->hidden, c->inter, c->inter, c->hidden };
    const uint32_t i[7] = { c->hidden, c->hidden, c->hidden, q, c->hidden, c->hidden, c->inter };
    *out = o[p];
    *in = i[p];
}

/* Decode element i of raw checkpoint bytes (test's own decoding). */
static float raw_at(const char *dtype, const uint8_t *p, size_t i)
{
    uint16_t h;
    float f;
    if (!strcmp(dtype, "BF16")) {
        memcpy(&h, p + 2 * i, 2);
        return l8_bf16_to_f32(h);
    }
    if (!strcmp(dtype, "F16")) {
        memcpy(&h, p + 2 * i, 2);
        return l8_f16_to_f32(h);
    }
    if (!strcmp(dtype, "F32")) {
        memcpy(&f, p + 4 * i, 4);
        return f;
    }
    abort();
}

/* The golden shards read with the test's own code: name -> (dtype, bytes). */
struct raw {
    struct json_object *hdr[2];
    uint8_t *data[2];
    size_t dlen[2];
};

static void raw_open(struct raw *r, const char *dir)
{
    const char *f[2] = { SHARD1, SHARD2 };
    for (int i = 0; i < 2; i++) {
        char *p = t_path(dir, f[i]);
        r->hdr[i] = t_read_st(p, &r->data[i], &r->dlen[i]);
        free(p);
    }
}

static void raw_close(struct raw *r)
{
    for (int i = 0; i < 2; i++) {
        json_object_put(r->hdr[i]);
        free(r->data[i]);
    }
}

static const uint8_t *raw_get(const struct raw *r, const char *name, const char **dtype)
{
    for (int i = 0; i < 2; i++) {
        struct json_object *e, *offs, *dt;
        if (!json_object_object_get_ex(r->hdr[i], name, &e))
            continue;
        json_object_object_get_ex(e, "data_offsets", &offs);
        json_object_object_get_ex(e, "dtype", &dt);
        *dtype = json_object_get_string(dt);
        return r->data[i] + json_object_get_int64(json_object_array_get_idx(offs, 0));
    }
    return NULL;
}

static void test_golden(int nthreads)
{
    struct l8_model *m = NULL;
    char err[L8_ERRLEN] = "";
    int r = l8_model_load(golden, nthreads, &m, err);
    CHECK(r == 0);
    if (r) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    const struct l8_config *c = &m->cfg;
    CHECK(c->hidden == 512 && c->n_layers == 2 && c->quant == L8_QUANT_FP8_DYNAMIC);
    CHECK(strcmp(m->dir, golden) == 0);
    struct raw raw;
    raw_open(&raw, golden);
    const char *dt;
    uint64_t want_bytes = 0;

    /* Embedding and lm_head: dense BF16 rows, untied, read in place. */
    CHECK(m->embed.dtype == L8_BF16 && m->embed.rows == 2048 && m->embed.cols == 512);
    CHECK(m->lm_head.dtype == L8_BF16 && m->lm_head.rows == 2048 && m->lm_head.cols == 512);
    CHECK(m->embed.data == l8_st_find(m->ts, "model.embed_tokens.weight")->data);
    CHECK(m->lm_head.data == l8_st_find(m->ts, "lm_head.weight")->data);
    CHECK(m->embed.data != m->lm_head.data);
    want_bytes += 2 * 2048 * 512 * 2;
    float row[512];
    const uint8_t *e = raw_get(&raw, "model.embed_tokens.weight", &dt);
    const uint8_t *lm = raw_get(&raw, "lm_head.weight", &dt);
    const uint32_t rows[4] = { 0, 1, 1000, 2047 };
    for (int k = 0; k < 4; k++) {
        int bad = 0;
        l8_dense_row(&m->embed, rows[k], row);
        for (int i = 0; i < 512; i++)
            bad += row[i] != raw_at("BF16", e, (size_t)rows[k] * 512 + i);
        l8_dense_row(&m->lm_head, rows[k], row);
        for (int i = 0; i < 512; i++)
            bad += row[i] != raw_at("BF16", lm, (size_t)rows[k] * 512 + i);
        CHECK(bad == 0);
    }

    /* Norms to f32. */
    const uint8_t *fn = raw_get(&raw, "model.norm.weight", &dt);
    int bad = 0;
    for (int i = 0; i < 512; i++)
        bad += m->final_norm[i] != raw_at(dt, fn, i);
    want_bytes += 512 * 4;
    for (uint32_t l = 0; l < 2; l++) {
        char name[128];
        snprintf(name, sizeof name, "model.layers.%u.input_layernorm.weight", l);
        const uint8_t *a = raw_get(&raw, name, &dt);
        snprintf(name, sizeof name, "model.layers.%u.post_attention_layernorm.weight", l);
        const uint8_t *b = raw_get(&raw, name, &dt);
        for (int i = 0; i < 512; i++)
            bad += m->layers[l].attn_norm[i] != raw_at(dt, a, i) ||
                   m->layers[l].mlp_norm[i] != raw_at(dt, b, i);
        want_bytes += 2 * 512 * 4;
    }
    CHECK(bad == 0);

    /* Projections: codes in place in the mapping (no copy) and equal to
     * the file's bytes; scales decoded from BF16; spot dequantized values. */
    for (uint32_t l = 0; l < 2; l++)
        for (int p = 0; p < 7; p++) {
            char name[128];
            uint32_t out, in;
            proj_dims(c, p, &out, &in);
            const struct l8_qweight *q = proj_of(&m->layers[l], p);
            CHECK(q->out == out && q->in == in);
            snprintf(name, sizeof name, "model.layers.%u.%s.weight", l, proj_names[p]);
            const struct l8_tensor *t = l8_st_find(m->ts, name);
            CHECK(t && q->w == t->data);
            const uint8_t *w = raw_get(&raw, name, &dt);
            CHECK(w && !strcmp(dt, "F8_E4M3") && memcmp(q->w, w, (size_t)out * in) == 0);
            snprintf(name, sizeof name, "model.layers.%u.%s.weight_scale", l, proj_names[p]);
            const uint8_t *s = raw_get(&raw, name, &dt);
            int sbad = 0;
            for (uint32_t o = 0; o < out; o++)
                sbad += q->scale[o] != raw_at(dt, s, o) || !(q->scale[o] > 0);
            CHECK(sbad == 0);
            for (uint32_t k = 0; k < 5; k++) {
                uint32_t o = (k * 977u + l * 13u + (uint32_t)p) % out, i = (k * 389u + 7) % in;
                double want = (double)l8_e4m3_to_f32(w[(size_t)o * in + i]) * raw_at(dt, s, o);
                double got = (double)l8_e4m3_lut[q->w[(size_t)o * in + i]] * q->scale[o];
                CHECK(got == want && isfinite(got));
            }
            want_bytes += (uint64_t)out * in + out * 4;
        }
    CHECK(m->weight_bytes == want_bytes);

    float inv[64];
    l8_rope_inv_freq(c, inv);
    CHECK(memcmp(inv, m->rope_inv_freq, sizeof inv) == 0);
    raw_close(&raw);
    l8_model_free(m);
    l8_model_free(NULL);
}

/* ---- checkpoints written here ---------------------------------------- */

struct builder {
    struct json_object *hdr;
    uint8_t *data;
    size_t len, cap;
    uint64_t seed;
};

static void b_add_bytes(struct builder *b, const char *name, const char *dtype, int nd,
                        const uint64_t *shape, const void *bytes, size_t n)
{
    size_t off = (b->len + 7) & ~(size_t)7;   /* keep rows aligned */
    if (off + n > b->cap) {
        b->cap = (off + n) * 2 + 1024;
        b->data = realloc(b->data, b->cap);
    }
    memset(b->data + b->len, 0, off - b->len);
    memcpy(b->data + off, bytes, n);
    b->len = off + n;
    t_hdr_add(b->hdr, name, dtype, nd, shape, off, off + n);
}

/* A dense tensor of random values (rows of varied magnitude, an all-zero
 * row 0 for matrices, so the scale clamp is exercised). */
static void b_add_dense(struct builder *b, const char *name, const char *dtype, uint32_t rows,
                        uint32_t cols, bool is_norm)
{
    size_t n = (size_t)rows * cols, es = strcmp(dtype, "F32") ? 2 : 4;
    uint8_t *bytes = malloc(n * es);
    for (size_t k = 0; k < n; k++) {
        size_t r = k / cols;
        float v = is_norm ? 1.0f + 0.25f * t_randf(&b->seed)
                          : t_randf(&b->seed) * ldexpf(1.0f, (int)(r % 9) - 6);
        if (!is_norm && r == 0 && rows > 1)
            v = 0.0f;
        if (es == 4) {
            memcpy(bytes + 4 * k, &v, 4);
        } else {
            uint16_t h = !strcmp(dtype, "BF16") ? l8_f32_to_bf16(v) : l8_f32_to_f16(v);
            memcpy(bytes + 2 * k, &h, 2);
        }
    }
    uint64_t shape[2] = { rows, cols };
    b_add_bytes(b, name, dtype, is_norm ? 1 : 2, is_norm ? &shape[1] : shape, bytes, n * es);
    free(bytes);
}

static void b_add_fp8(struct builder *b, const char *name, uint32_t rows, uint32_t cols,
                      bool scale_f32_flat)
{
    size_t n = (size_t)rows * cols;
    uint8_t *codes = malloc(n);
    for (size_t k = 0; k < n; k++) {
        uint8_t v = (uint8_t)t_rand(&b->seed);
        codes[k] = (v & 0x7f) == 0x7f ? 0x7e : v;   /* no NaN codes */
    }
    uint64_t shape[2] = { rows, cols };
    b_add_bytes(b, name, "F8_E4M3", 2, shape, codes, n);
    free(codes);
    char sname[200];
    snprintf(sname, sizeof sname, "%s_scale", name);
    if (scale_f32_flat) {
        float *s = malloc(rows * 4);
        for (uint32_t o = 0; o < rows; o++)
            s[o] = ldexpf(1.0f + 0.5f * t_randf(&b->seed), -8);
        b_add_bytes(b, sname, "F32", 1, shape, s, rows * 4);
        free(s);
    } else {
        uint16_t *s = malloc(rows * 2);
        for (uint32_t o = 0; o < rows; o++)
            s[o] = l8_f32_to_bf16(ldexpf(1.0f + 0.5f * t_randf(&b->seed), -8));
        uint64_t sshape[2] = { rows, 1 };
        b_add_bytes(b, sname, "BF16", 2, sshape, s, rows * 2);
        free(s);
    }
}

enum { SMALL_HIDDEN = 64, SMALL_INTER = 96, SMALL_LAYERS = 2, SMALL_HEADS = 4, SMALL_KV = 2,
       SMALL_HEAD_DIM = 24, SMALL_VOCAB = 50 };

struct small_opts {
    const char *dtype;          /* dense tensors */
    bool fp8;                   /* FP8-dynamic projections */
    bool tied;
    bool omit_lm_head;          /* with tied false: a broken checkpoint */
    const char *dense_proj;     /* fp8: this module is stored dense ... */
    const char *ignore_proj;    /* ... and this one is in ignore */
    const char *extra;          /* an unexpected extra tensor */
};

static void write_small(const char *dir, const struct small_opts *o)
{
    char cfg[2048];
    char ignore[256] = "";
    if (o->ignore_proj)
        snprintf(ignore, sizeof ignore, ", \"%s\"", o->ignore_proj);
    char quant[1024] = "";
    if (o->fp8)
        snprintf(quant, sizeof quant,
                 ", \"quantization_config\": {\"quant_method\": \"compressed-tensors\","
                 " \"format\": \"float-quantized\", \"ignore\": [\"lm_head\"%s],"
                 " \"config_groups\": {\"g\": {\"targets\": [\"Linear\"],"
                 " \"weights\": {\"num_bits\": 8, \"type\": \"float\", \"strategy\": \"channel\","
                 " \"dynamic\": false, \"symmetric\": true},"
                 " \"input_activations\": {\"num_bits\": 8, \"type\": \"float\","
                 " \"strategy\": \"token\", \"dynamic\": true, \"symmetric\": true}}}}",
                 ignore);
    snprintf(cfg, sizeof cfg,
             "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": %d,"
             " \"intermediate_size\": %d, \"num_hidden_layers\": %d,"
             " \"num_attention_heads\": %d, \"num_key_value_heads\": %d, \"head_dim\": %d,"
             " \"vocab_size\": %d, \"max_position_embeddings\": 2048, \"rms_norm_eps\": 1e-5,"
             " \"rope_theta\": 10000.0, \"rope_scaling\": null, \"tie_word_embeddings\": %s,"
             " \"bos_token_id\": 1, \"eos_token_id\": 2%s}",
             SMALL_HIDDEN, SMALL_INTER, SMALL_LAYERS, SMALL_HEADS, SMALL_KV, SMALL_HEAD_DIM,
             SMALL_VOCAB, o->tied ? "true" : "false", quant);
    char *p = t_path(dir, "config.json");
    t_write_text(p, cfg);
    free(p);

    struct builder b = { .hdr = json_object_new_object(), .seed = 42 };
    struct l8_config c = { .hidden = SMALL_HIDDEN, .inter = SMALL_INTER, .n_heads = SMALL_HEADS,
                           .n_kv_heads = SMALL_KV, .head_dim = SMALL_HEAD_DIM };
    b_add_dense(&b, "model.embed_tokens.weight", o->dtype, SMALL_VOCAB, SMALL_HIDDEN, false);
    if (!o->tied && !o->omit_lm_head)
        b_add_dense(&b, "lm_head.weight", o->dtype, SMALL_VOCAB, SMALL_HIDDEN, false);
    b_add_dense(&b, "model.norm.weight", o->dtype, 1, SMALL_HIDDEN, true);
    for (int l = 0; l < SMALL_LAYERS; l++) {
        char name[160];
        snprintf(name, sizeof name, "model.layers.%d.input_layernorm.weight", l);
        b_add_dense(&b, name, o->dtype, 1, SMALL_HIDDEN, true);
        snprintf(name, sizeof name, "model.layers.%d.post_attention_layernorm.weight", l);
        b_add_dense(&b, name, o->dtype, 1, SMALL_HIDDEN, true);
        for (int k = 0; k < 7; k++) {
            uint32_t out, in;
            proj_dims(&c, k, &out, &in);
            char mod[128];
            snprintf(mod, sizeof mod, "model.layers.%d.%s", l, proj_names[k]);
            snprintf(name, sizeof name, "%s.weight", mod);
            bool dense = !o->fp8 || (o->dense_proj && !strcmp(o->dense_proj, mod));
            if (dense)
                b_add_dense(&b, name, o->dtype, out, in, false);
            else
                b_add_fp8(&b, name, out, in, k == 1);   /* k_proj: F32 [out] scales */
        }
    }
    if (o->extra)
        b_add_dense(&b, o->extra, o->dtype, 1, SMALL_HIDDEN, true);
    p = t_path(dir, "model.safetensors");
    t_write_st(p, b.hdr, b.data, b.len);
    free(p);
    json_object_put(b.hdr);
    free(b.data);
}

static void check_small(const char *dir, const struct small_opts *o, int nthreads)
{
    struct l8_model *m = NULL;
    char err[L8_ERRLEN] = "";
    int r = l8_model_load(dir, nthreads, &m, err);
    CHECK(r == 0);
    if (r) {
        fprintf(stderr, "%s (%s)\n", err, o->dtype);
        return;
    }
    const struct l8_config *c = &m->cfg;
    const char *dt = o->dtype;
    CHECK(m->embed.dtype == (!strcmp(dt, "BF16") ? L8_BF16 : !strcmp(dt, "F16") ? L8_F16 : L8_F32));
    CHECK(o->tied ? m->lm_head.data == m->embed.data : m->lm_head.data != m->embed.data);
    CHECK(m->lm_head.rows == SMALL_VOCAB && m->lm_head.cols == SMALL_HIDDEN);
    uint64_t want_bytes = (o->tied ? 1 : 2) * (uint64_t)SMALL_VOCAB * SMALL_HIDDEN *
                          l8_dtype_size(m->embed.dtype) +
                          (1 + 2 * SMALL_LAYERS) * SMALL_HIDDEN * 4;
    const struct l8_tensor *fn = l8_st_find(m->ts, "model.norm.weight");
    int bad = 0;
    for (int i = 0; i < SMALL_HIDDEN; i++)
        bad += m->final_norm[i] != raw_at(dt, fn->data, i);
    CHECK(bad == 0);

    float row[SMALL_INTER];
    uint8_t codes[SMALL_INTER];
    int n_quantized = 0;
    for (uint32_t l = 0; l < SMALL_LAYERS; l++)
        for (int p = 0; p < 7; p++) {
            uint32_t out, in;
            proj_dims(c, p, &out, &in);
            char mod[128], name[160];
            snprintf(mod, sizeof mod, "model.layers.%u.%s", l, proj_names[p]);
            snprintf(name, sizeof name, "%s.weight", mod);
            const struct l8_qweight *q = proj_of(&m->layers[l], p);
            const struct l8_tensor *t = l8_st_find(m->ts, name);
            CHECK(q->out == out && q->in == in && t);
            want_bytes += (uint64_t)out * in + out * 4;
            if (t->dtype == L8_F8_E4M3) {
                CHECK(q->w == t->data);
                snprintf(name, sizeof name, "%s.weight_scale", mod);
                const struct l8_tensor *st = l8_st_find(m->ts, name);
                int sbad = 0;
                for (uint32_t rr = 0; rr < out; rr++)
                    sbad += q->scale[rr] != raw_at(l8_dtype_name(st->dtype), st->data, rr);
                CHECK(sbad == 0);
                continue;
            }
            /* Quantized at load: not in the mapping, and every row equal to
             * the recipe applied to the decoded checkpoint row. */
            n_quantized++;
            CHECK((const void *)q->w != t->data);
            int rbad = 0;
            for (uint32_t rr = 0; rr < out; rr++) {
                for (uint32_t i = 0; i < in; i++)
                    row[i] = raw_at(dt, t->data, (size_t)rr * in + i);
                uint16_t s = l8_quantize_weight_row(row, in, codes);
                rbad += memcmp(codes, q->w + (size_t)rr * in, in) != 0 ||
                        q->scale[rr] != l8_bf16_to_f32(s);
            }
            CHECK(rbad == 0);
            /* row 0 is all zero: zero codes, the clamped scale */
            CHECK(q->scale[0] == l8_bf16_to_f32(l8_f32_to_bf16(FLT_EPSILON)));
            CHECK(q->w[0] == 0 && q->w[in - 1] == 0);
        }
    CHECK(n_quantized == (o->fp8 ? (o->dense_proj ? 1 : 0) : 7 * SMALL_LAYERS));
    CHECK(m->weight_bytes == want_bytes);
    l8_model_free(m);
}

static void test_small(void)
{
    static const struct small_opts cases[] = {
        { .dtype = "BF16" },
        { .dtype = "BF16", .tied = true },
        { .dtype = "F16" },
        { .dtype = "F32", .tied = true },
        { .dtype = "BF16", .fp8 = true },
        { .dtype = "BF16", .fp8 = true, .dense_proj = "model.layers.1.mlp.down_proj",
          .ignore_proj = "model.layers.1.mlp.down_proj" },
        { .dtype = "F16", .fp8 = true, .dense_proj = "model.layers.0.self_attn.o_proj",
          .ignore_proj = "re:.*layers[.]0[.]self_attn[.]o_proj" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char *d = t_mkdtemp();
        write_small(d, &cases[i]);
        check_small(d, &cases[i], 3);
        check_small(d, &cases[i], 1);
        t_rm_rf(d);
    }

    /* Defects only a hand-made checkpoint shows. */
    struct l8_model *m = (void *)0x1;
    char err[L8_ERRLEN] = "";
    int r;
    char *d = t_mkdtemp();
    struct small_opts o = { .dtype = "BF16", .extra = "model.layers.0.self_attn.q_proj.bias" };
    write_small(d, &o);
    r = l8_model_load(d, 2, &m, err);
    CHECK_ERR(r, -EINVAL, err, "model.safetensors", "model.layers.0.self_attn.q_proj.bias",
              "unexpected tensor");
    CHECK(m == (void *)0x1);
    /* lm_head missing and not tied. */
    struct small_opts o2 = { .dtype = "BF16", .omit_lm_head = true };
    write_small(d, &o2);
    r = l8_model_load(d, 2, &m, err);
    CHECK_ERR(r, -EINVAL, err, d, "lm_head.weight", "tie_word_embeddings");
    /* A projection of an FP8 checkpoint stored dense without being in
     * ignore: refused (it would have no scale). */
    struct small_opts o3 = { .dtype = "BF16", .fp8 = true, .dense_proj = "model.layers.0.mlp.up_proj" };
    write_small(d, &o3);
    r = l8_model_load(d, 2, &m, err);
    CHECK_ERR(r, -EINVAL, err, "model.safetensors", "model.layers.0.mlp.up_proj.weight",
              "dtype BF16, expected F8_E4M3");
    t_rm_rf(d);
}

/* ---- broken copies of the golden checkpoint ---------------------------- */

struct edit {
    const char *tensor;
    const char *dtype;          /* new dtype, or NULL */
    int nd;                     /* new shape when nd > 0 */
    uint64_t shape[2];
    bool adjust_end;            /* make data_offsets match the new shape */
    bool remove;
};

static void apply_edit(struct json_object *hdr, void *arg)
{
    const struct edit *e = arg;
    struct json_object *t, *offs;
    if (!json_object_object_get_ex(hdr, e->tensor, &t))
        abort();
    if (e->remove) {
        json_object_object_del(hdr, e->tensor);
        return;
    }
    if (e->dtype)
        json_object_object_add(t, "dtype", json_object_new_string(e->dtype));
    if (e->nd) {
        json_object_object_add(t, "shape", t_jarr_u64(e->nd, e->shape));
        if (e->adjust_end) {
            json_object_object_get_ex(t, "data_offsets", &offs);
            uint64_t o[2] = { (uint64_t)json_object_get_int64(json_object_array_get_idx(offs, 0)) };
            o[1] = o[0] + e->shape[0] * (e->nd > 1 ? e->shape[1] : 1);
            json_object_object_add(t, "data_offsets", t_jarr_u64(2, o));
        }
    }
}

static void index_remove(struct json_object *o, void *arg)
{
    struct json_object *wm;
    json_object_object_get_ex(o, "weight_map", &wm);
    json_object_object_del(wm, arg);
}

static void cfg_set(struct json_object *o, void *arg)
{
    const char *const *kv = arg;
    if (kv[1])
        json_object_object_add(o, kv[0], json_tokener_parse(kv[1]));
    else
        json_object_object_del(o, kv[0]);
}

#define EXPECT_LOAD(dir, r0, ...)                                \
    do {                                                         \
        struct l8_model *m_ = NULL;                              \
        char err_[L8_ERRLEN] = "";                               \
        int r_ = l8_model_load((dir), 2, &m_, err_);             \
        CHECK_ERR(r_, (r0), err_, __VA_ARGS__);                  \
        if (!r_)                                                 \
            l8_model_free(m_);                                   \
    } while (0)

static void broken_tensor(const char *shard, const struct edit *e, int r0, const char *f1,
                          const char *f2, const char *f3)
{
    char *d = t_copy_ckpt(golden);
    char *p = t_path(d, shard);
    t_patch_st(p, apply_edit, (void *)e);
    if (e->remove) {
        char *ip = t_path(d, "model.safetensors.index.json");
        t_patch_json(ip, index_remove, (void *)e->tensor);
        free(ip);
    }
    if (!strcmp(f1, "DIR"))
        f1 = d;
    EXPECT_LOAD(d, r0, f1, f2, f3);
    free(p);
    t_rm_rf(d);
}

static void broken_config(const char *key, const char *value, int r0, const char *f1,
                          const char *f2, const char *f3)
{
    char *d = t_copy_ckpt(golden);
    char *p = t_path(d, "config.json");
    const char *kv[2] = { key, value };
    t_patch_json(p, cfg_set, kv);
    EXPECT_LOAD(d, r0, f1, f2, f3);
    free(p);
    t_rm_rf(d);
}

static void test_broken_golden(void)
{
    const char *q0 = "model.layers.0.self_attn.q_proj.weight";
    /* Missing tensors. */
    broken_tensor(SHARD2, &(struct edit){ .tensor = "model.layers.1.mlp.up_proj.weight_scale",
                                          .remove = true },
                  -EINVAL, "DIR", "missing tensor", "model.layers.1.mlp.up_proj.weight_scale");
    broken_tensor(SHARD1, &(struct edit){ .tensor = "model.layers.0.self_attn.v_proj.weight",
                                          .remove = true },
                  -EINVAL, "DIR", "missing tensor", "model.layers.0.self_attn.v_proj.weight");
    broken_tensor(SHARD2, &(struct edit){ .tensor = "model.norm.weight", .remove = true },
                  -EINVAL, "DIR", "missing tensor", "model.norm.weight");
    broken_tensor(SHARD1, &(struct edit){ .tensor = "lm_head.weight", .remove = true },
                  -EINVAL, "DIR", "lm_head.weight", "tie_word_embeddings");
    /* Wrong dtypes (same byte size, so only the loader can object). */
    broken_tensor(SHARD1, &(struct edit){ .tensor = q0, .dtype = "U8" }, -EINVAL,
                  SHARD1, q0, "dtype U8, expected F8_E4M3");
    broken_tensor(SHARD1, &(struct edit){ .tensor = "model.layers.0.self_attn.k_proj.weight_scale",
                                          .dtype = "F16" },
                  -EINVAL, SHARD1, "model.layers.0.self_attn.k_proj.weight_scale",
                  "dtype F16, expected BF16 or F32");
    broken_tensor(SHARD1, &(struct edit){ .tensor = "model.embed_tokens.weight", .nd = 2,
                                          .shape = { 2048, 1024 }, .dtype = "U8" },
                  -EINVAL, SHARD1, "model.embed_tokens.weight", "shape [2048, 1024], expected [2048, 512]");
    /* Wrong shapes. */
    broken_tensor(SHARD1, &(struct edit){ .tensor = q0, .nd = 2, .shape = { 512, 511 },
                                          .adjust_end = true },
                  -EINVAL, SHARD1, q0, "shape [512, 511], expected [512, 512]");
    broken_tensor(SHARD1, &(struct edit){ .tensor = q0, .nd = 2, .shape = { 256, 1024 } },
                  -EINVAL, SHARD1, q0, "shape [256, 1024], expected [512, 512]");
    broken_tensor(SHARD1, &(struct edit){ .tensor = "model.layers.0.self_attn.k_proj.weight_scale",
                                          .nd = 2, .shape = { 64, 2 } },
                  -EINVAL, SHARD1, "model.layers.0.self_attn.k_proj.weight_scale",
                  "shape [64, 2], expected [128]");
    broken_tensor(SHARD2, &(struct edit){ .tensor = "model.norm.weight", .nd = 2,
                                          .shape = { 1, 512 } },
                  -EINVAL, SHARD2, "model.norm.weight", "shape [1, 512], expected [512]");
    /* Reader-level defects surface through the loader with the same names. */
    broken_tensor(SHARD2, &(struct edit){ .tensor = "model.norm.weight", .nd = 1,
                                          .shape = { 511 } },
                  -EINVAL, SHARD2, "model.norm.weight", "need 1022");

    /* config.json defects reach the loader with file and key named. */
    broken_config("architectures", "[\"Qwen2ForCausalLM\"]", -EINVAL, "config.json",
                  "unsupported architecture", "Qwen2ForCausalLM");
    broken_config("rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4.0}", -EINVAL,
                  "config.json", "unsupported rope_scaling type", "yarn");
    broken_config("num_key_value_heads", "3", -EINVAL, "config.json",
                  "num_key_value_heads", "num_attention_heads");
    broken_config("hidden_size", "\"wide\"", -EINVAL, "config.json", "hidden_size", "integer");
    /* An absent num_key_value_heads is num_attention_heads (Hugging Face's
     * reading): with grouped k/v tensors the shape error names the key. */
    broken_config("num_key_value_heads", NULL, -EINVAL, "self_attn.k_proj.weight",
                  "expected [512, 512]", "(config.json has no \"num_key_value_heads\", read as "
                  "\"num_attention_heads\" = 4)");
    /* Consistent config, wrong for these tensors. */
    broken_config("head_dim", "64", -EINVAL, q0, "expected [256, 512]", SHARD1);
    broken_config("intermediate_size", "1000", -EINVAL, "model.layers.0.mlp.gate_proj.weight",
                  "expected [1000, 512]", SHARD1);
    broken_config("num_hidden_layers", "3", -EINVAL, "missing tensor",
                  "model.layers.2.input_layernorm.weight", "l8test-");
    broken_config("num_hidden_layers", "1", -EINVAL, "unexpected tensor", "model.layers.1.", SHARD2);
    broken_config("vocab_size", "4096", -EINVAL, "model.embed_tokens.weight", "expected [4096, 512]", SHARD1);
    broken_config("quantization_config", NULL, -EINVAL, q0,
                  "dtype F8_E4M3, expected BF16, F16 or F32", SHARD1);

    /* Malformed config.json. */
    char *d = t_copy_ckpt(golden);
    char *p = t_path(d, "config.json");
    t_write_text(p, "{\"architectures\": [\"LlamaForCausalLM\"], ");
    EXPECT_LOAD(d, -EINVAL, "config.json", "malformed JSON");
    unlink(p);
    EXPECT_LOAD(d, -ENOENT, "config.json");
    free(p);
    t_rm_rf(d);

    /* Missing shard, truncated shard. */
    d = t_copy_ckpt(golden);
    p = t_path(d, SHARD2);
    struct stat st;
    stat(p, &st);
    CHECK(truncate(p, st.st_size - 1) == 0);
    EXPECT_LOAD(d, -EINVAL, SHARD2, "model.norm.weight", "out of range");
    unlink(p);
    EXPECT_LOAD(d, -ENOENT, SHARD2, "missing shard");
    free(p);
    t_rm_rf(d);

    /* A file of the checkpoint that is not a regular file is refused at once,
     * named with what it is: a FIFO (open() would wait for a writer for ever),
     * a directory, /dev/zero (a read that never ends). */
    const char *files[] = { "config.json", "model.safetensors.index.json", SHARD2 };
    for (int i = 0; i < 3; i++) {
        d = t_copy_ckpt(golden);
        p = t_path(d, files[i]);
        unlink(p);
        REQUIRE(mkfifo(p, 0600) == 0);
        EXPECT_LOAD(d, -EINVAL, files[i], "is a FIFO, not a regular file");
        unlink(p);
        REQUIRE(mkdir(p, 0700) == 0);
        EXPECT_LOAD(d, -EISDIR, files[i], "is a directory, not a regular file");
        rmdir(p);
        REQUIRE(symlink("/dev/zero", p) == 0);
        EXPECT_LOAD(d, -EINVAL, files[i], "is a character device, not a regular file");
        free(p);
        t_rm_rf(d);
    }

    /* Tied embeddings: a stored lm_head is ignored, as Hugging Face does. */
    d = t_copy_ckpt(golden);
    p = t_path(d, "config.json");
    t_patch_json(p, cfg_set, (const char *[]){ "tie_word_embeddings", "true" });
    struct l8_model *m = NULL;
    char err[L8_ERRLEN] = "";
    CHECK(l8_model_load(d, 2, &m, err) == 0);
    if (m) {
        CHECK(m->lm_head.data == m->embed.data);
        l8_model_free(m);
    }
    free(p);
    t_rm_rf(d);
}

/* ---- values the engines cannot compute with ----------------------------- */

/* Overwrite element elem (es bytes) of tensor name in the safetensors file
 * path with the little-endian value v, through the test's own reader. */
static void poke(const char *path, const char *name, uint64_t elem, size_t es, uint32_t v)
{
    uint8_t *data;
    size_t dlen;
    struct json_object *h = t_read_st(path, &data, &dlen), *e, *offs;
    REQUIRE(json_object_object_get_ex(h, name, &e) &&
            json_object_object_get_ex(e, "data_offsets", &offs), "%s not in %s", name, path);
    uint64_t at = (uint64_t)json_object_get_int64(json_object_array_get_idx(offs, 0)) + elem * es;
    REQUIRE(at + es <= dlen);
    memcpy(data + at, &v, es);
    t_write_st(path, h, data, dlen);
    json_object_put(h);
    free(data);
}

/* Load dir at 1, 2 and 3 threads: each fails with -EINVAL and a message
 * holding every fragment. */
#define EXPECT_BAD_VALUE(dir, ...)                                       \
    do {                                                                 \
        for (int nt_ = 1; nt_ <= 3; nt_++) {                             \
            struct l8_model *m_ = NULL;                                  \
            char err_[L8_ERRLEN] = "";                                   \
            int r_ = l8_model_load((dir), nt_, &m_, err_);               \
            CHECK_ERR(r_, -EINVAL, err_, __VA_ARGS__);                   \
            if (!r_)                                                     \
                l8_model_free(m_);                                       \
        }                                                                \
    } while (0)

struct bad_value {
    const char *shard, *tensor;
    uint64_t elem[2];           /* elem[1]: a second bad one, later (0: none) */
    size_t es;
    uint32_t v;
    const char *f1, *f2;        /* what the message says besides file and tensor */
};

static void test_bad_values(void)
{
    static const struct bad_value cases[] = {
        /* weight_scale (BF16 [out, 1]): NaN, zero, negative, -0, infinite. */
        { "2", "model.layers.1.self_attn.o_proj.weight_scale", { 77 }, 2, 0x7fc0,
          "element 77 is NaN", "expected a finite scale > 0" },
        { "1", "model.layers.0.mlp.gate_proj.weight_scale", { 1023 }, 2, 0x0000,
          "element 1023 is 0,", "expected a finite scale > 0" },
        { "1", "model.layers.0.self_attn.k_proj.weight_scale", { 5 }, 2, 0xbf00,
          "element 5 is -0.5,", "expected a finite scale > 0" },
        { "1", "model.layers.0.self_attn.v_proj.weight_scale", { 127 }, 2, 0x8000,
          "element 127 is -0,", "expected a finite scale > 0" },
        { "2", "model.layers.1.mlp.down_proj.weight_scale", { 0 }, 2, 0x7f80,
          "element 0 is +Inf,", "expected a finite scale > 0" },
        /* E4M3 NaN codes in projections; with two, the first is named. */
        { "2", "model.layers.1.mlp.down_proj.weight", { 300001 }, 1, 0xff,
          "element 300001 (row 292, column 993)", "is an E4M3 NaN code (0xff)" },
        { "1", "model.layers.0.self_attn.q_proj.weight", { 100, 200000 }, 1, 0x7f,
          "element 100 (row 0, column 100)", "is an E4M3 NaN code (0x7f)" },
        { "1", "model.layers.0.mlp.up_proj.weight", { 1024 * 512 - 1 }, 1, 0x7f,
          "element 524287 (row 1023, column 511)", "E4M3 NaN code" },
        /* BF16 embedding, lm_head, norms. */
        { "1", "model.embed_tokens.weight", { 2048 * 512 - 1 }, 2, 0xffc1,
          "element 1048575 (row 2047, column 511)", "is NaN (BF16 0xffc1)" },
        { "1", "model.embed_tokens.weight", { 70000, 900000 }, 2, 0x7f80,
          "element 70000 (row 136, column 368)", "is +Inf (BF16 0x7f80)" },
        { "1", "lm_head.weight", { 3 }, 2, 0x7fc0, "element 3 (row 0, column 3)", "is NaN" },
        { "1", "model.layers.0.post_attention_layernorm.weight", { 13 }, 2, 0xff80,
          "element 13 is -Inf (BF16 0xff80)", "" },
        { "2", "model.norm.weight", { 511 }, 2, 0x7f80, "element 511 is +Inf", "" },
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        const struct bad_value *b = &cases[i];
        const char *shard = b->shard[0] == '1' ? SHARD1 : SHARD2;
        char *d = t_copy_ckpt(golden);
        char *p = t_path(d, shard);
        for (int k = 0; k < 2; k++)
            if (k == 0 || b->elem[k])
                poke(p, b->tensor, b->elem[k], b->es, b->v);
        EXPECT_BAD_VALUE(d, shard, b->tensor, b->f1, b->f2);
        free(p);
        t_rm_rf(d);
    }

    /* Two tensors bad: the one loaded first is named, at any thread count. */
    char *d = t_copy_ckpt(golden);
    char *p1 = t_path(d, SHARD1), *p2 = t_path(d, SHARD2);
    poke(p2, "model.layers.1.mlp.down_proj.weight", 9, 1, 0x7f);
    poke(p1, "model.layers.0.mlp.down_proj.weight", 123456, 1, 0xff);
    EXPECT_BAD_VALUE(d, "model.layers.0.mlp.down_proj.weight", "element 123456 ");
    /* The largest finite values are not refused. */
    char *q = t_copy_ckpt(golden);
    char *q1 = t_path(q, SHARD1);
    poke(q1, "model.layers.0.self_attn.q_proj.weight", 0, 1, 0x7e);          /* 448 */
    poke(q1, "model.layers.0.self_attn.q_proj.weight", 1, 1, 0xfe);          /* -448 */
    poke(q1, "model.layers.0.self_attn.q_proj.weight_scale", 0, 2, 0x0001);  /* a subnormal */
    poke(q1, "model.embed_tokens.weight", 0, 2, 0x7f7f);                     /* BF16 max */
    struct l8_model *m = NULL;
    char err[L8_ERRLEN] = "";
    CHECK(l8_model_load(q, 2, &m, err) == 0, "%s", err);
    l8_model_free(m);
    free(p1);
    free(p2);
    free(q1);
    t_rm_rf(d);
    t_rm_rf(q);

    /* Dense checkpoints: a projection quantized at load, checked row by row
     * (BF16 NaN, F16 infinity), and an F32 [out] weight_scale. */
    d = t_mkdtemp();
    char *st = t_path(d, "model.safetensors");
    write_small(d, &(struct small_opts){ .dtype = "BF16" });
    poke(st, "model.layers.1.mlp.up_proj.weight", 95 * 64 + 7, 2, 0x7fc0);
    EXPECT_BAD_VALUE(d, "model.safetensors", "model.layers.1.mlp.up_proj.weight",
                     "element 6087 (row 95, column 7) is NaN");
    write_small(d, &(struct small_opts){ .dtype = "F16" });
    poke(st, "model.layers.0.self_attn.o_proj.weight", 64 * 96 - 1, 2, 0xfc00);
    EXPECT_BAD_VALUE(d, "model.layers.0.self_attn.o_proj.weight",
                     "element 6143 (row 63, column 95) is -Inf (F16 0xfc00)");
    write_small(d, &(struct small_opts){ .dtype = "F32", .tied = true });
    poke(st, "model.embed_tokens.weight", 64, 4, 0x7fc00000);
    EXPECT_BAD_VALUE(d, "model.embed_tokens.weight", "element 64 (row 1, column 0) is NaN",
                     "(F32 0x7fc00000)");
    write_small(d, &(struct small_opts){ .dtype = "BF16", .fp8 = true });
    poke(st, "model.layers.1.self_attn.k_proj.weight_scale", 47, 4, 0xff800000);
    EXPECT_BAD_VALUE(d, "model.layers.1.self_attn.k_proj.weight_scale", "element 47 is -Inf");
    free(st);
    t_rm_rf(d);
}

int main(int argc, char **argv)
{
    alarm(120);  /* a load that hangs (on a FIFO) fails instead of waiting for meson */
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_CHECKPOINT_DIR\n", argv[0]);
        return 1;
    }
    golden = argv[1];
    test_golden(2);
    test_golden(1);
    test_small();
    test_broken_golden();
    test_bad_values();
    return t_result("test_model");
}
