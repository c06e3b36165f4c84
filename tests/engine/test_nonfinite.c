/* test_nonfinite.c - a step whose logits are not finite fails with -EDOM.
 *
 * A copy of the golden checkpoint with model.norm.weight at 3e38, a finite
 * BF16 that the load's checks accept: the final norm's output overflows,
 * so every logit is an infinity or a NaN. Every step that samples from
 * them returns -EDOM: prefill and decode, greedy, sampled, masked, a
 * verification, batched beside a sequence that only wants logits. A step
 * that only returns logits succeeds (they are the caller's to judge). The
 * golden model runs the same steps and samples (finite logits, masked
 * ones included, are never taken for bad ones). Both numerics.
 *
 * usage: test_nonfinite GOLDEN_DIR [cpu|cuda]
 * (cuda: exit 77 where the engine cannot be created: no device) */
#include <errno.h>
#include <math.h>

#include "../model/testutil.h"

#include "engine.h"
#include "model.h"
#include "numerics.h"

#define PS 16u
#define V_MASK_WORDS(v) (((v) + 31) / 32)

static enum l8_backend backend = L8_BACKEND_CPU;

/* Every element of tensor name (BF16) in the safetensors file path set to v. */
static void fill_bf16(const char *path, const char *name, float v)
{
    uint8_t *data;
    size_t dlen;
    struct json_object *h = t_read_st(path, &data, &dlen), *e, *offs;
    REQUIRE(json_object_object_get_ex(h, name, &e) &&
            json_object_object_get_ex(e, "data_offsets", &offs), "%s not in %s", name, path);
    uint64_t b = (uint64_t)json_object_get_int64(json_object_array_get_idx(offs, 0));
    uint64_t end = (uint64_t)json_object_get_int64(json_object_array_get_idx(offs, 1));
    const uint16_t x = l8_f32_to_bf16(v);
    REQUIRE(isfinite(l8_bf16_to_f32(x)) && end <= dlen);
    for (uint64_t at = b; at < end; at += 2)
        memcpy(data + at, &x, 2);
    t_write_st(path, h, data, dlen);
    json_object_put(h);
    free(data);
}

static struct l8_engine *mk(const struct l8_model *m, enum l8_numerics num)
{
    struct l8_engine_opts o = { .numerics = num, .page_size = PS, .n_pages = 8,
                                .max_step_tokens = 64, .max_seqs = 4, .nthreads = 2,
                                .gemv_fixed = backend == L8_BACKEND_CUDA, .gemv_max_m = 16 };
    struct l8_engine *e = NULL;
    char err[L8_ERRLEN] = "";
    if (l8_engine_create(m, backend, &o, &e, err) < 0) {
        printf("%s engine: %s\n", l8_backend_name(backend), err);
        if (backend == L8_BACKEND_CUDA)
            exit(T_EXIT_SKIP);
        exit(T_EXIT_FAIL);
    }
    return e;
}

/* The steps, on a model whose logits are finite (want 0) or not (want
 * -EDOM for every step that samples). */
static void run_steps(const struct l8_model *m, enum l8_numerics num, int want)
{
    const uint32_t V = m->cfg.vocab;
    const char *what = want ? "overflowing" : "golden";
    struct l8_engine *e = mk(m, num);
    static const uint32_t pa[2] = { 0, 1 }, pb[2] = { 2, 3 };
    uint32_t tok[8] = { 1, 17, 300, 5, 1999, 42, 7, 8 };
    const struct l8_sampling greedy = { .temperature = 0.0f, .top_p = 1.0f,
                                        .repetition_penalty = 1.0f };
    const struct l8_sampling hot = { .temperature = 0.8f, .top_k = 40, .top_p = 0.9f,
                                     .repetition_penalty = 1.2f, .seed = 3 };
    uint32_t *mask = calloc(3 * V_MASK_WORDS(V), 4);
    float *lg = malloc((size_t)8 * V * sizeof(float));
    REQUIRE(mask && lg);
    for (uint32_t i = 0; i < 3 * V_MASK_WORDS(V); i++)
        mask[i] = 0x00ff00ffu;   /* half the ids */

    /* Prefill that samples, greedy then hot with a mask. */
    struct l8_seq s = { .tokens = tok, .n_tokens = 5, .pos = 0, .pages = pa, .n_pages = 2,
                        .sample = true, .sampling = &greedy, .history = tok, .n_history = 5 };
    int r = l8_engine_step(e, &s, 1);
    CHECK(r == want, "%s, numerics %d: greedy prefill: %d, want %d", what, num, r, want);
    CHECK(want || s.token_out < V);
    s.sampling = &hot;
    s.allowed = mask;
    r = l8_engine_step(e, &s, 1);
    CHECK(r == want, "%s, numerics %d: masked sampled prefill: %d, want %d", what, num, r, want);
    CHECK(want || (s.token_out < V && mask[s.token_out / 32] >> (s.token_out % 32) & 1));

    /* Decode steps (the cuda engine captures the third as a graph). */
    for (uint32_t k = 0; k < 3; k++) {
        struct l8_seq d = { .tokens = &tok[5 + k], .n_tokens = 1, .pos = 5 + k, .pages = pa,
                            .n_pages = 2, .sample = true, .sampling = k % 2 ? &hot : &greedy,
                            .history = tok, .n_history = 6 + k, .sample_index = k + 1 };
        r = l8_engine_step(e, &d, 1);
        CHECK(r == want, "%s, numerics %d: decode %u: %d, want %d", what, num, k, r, want);
    }

    /* Logits only: the step succeeds, the logits say what they are. */
    struct l8_seq only = { .tokens = tok, .n_tokens = 5, .pos = 0, .pages = pb, .n_pages = 2,
                           .logits = L8_LOGITS_LAST, .logits_out = lg };
    r = l8_engine_step(e, &only, 1);
    CHECK(r == 0, "%s, numerics %d: logits only: %d", what, num, r);
    uint32_t bad = 0;
    for (uint32_t i = 0; i < V; i++)
        bad += !isfinite(lg[i]);
    CHECK(want ? bad > 0 : bad == 0, "%s, numerics %d: %u of %u logits not finite", what, num,
          bad, V);

    /* Batched: one sequence only wants logits, the other samples. */
    struct l8_seq two[2] = {
        { .tokens = tok, .n_tokens = 5, .pos = 0, .pages = pb, .n_pages = 2,
          .logits = L8_LOGITS_ALL, .logits_out = lg },
        { .tokens = tok, .n_tokens = 4, .pos = 0, .pages = pa, .n_pages = 2, .sample = true,
          .sampling = &greedy, .history = tok, .n_history = 4 },
    };
    r = l8_engine_step(e, two, 2);
    CHECK(r == want, "%s, numerics %d: batch: %d, want %d", what, num, r, want);

    /* A verification of two drafts, masked: three samples. */
    struct l8_sample_out vo[3];
    struct l8_seq v = { .tokens = tok, .n_tokens = 6, .pos = 0, .pages = pa, .n_pages = 2,
                        .sample = true, .sampling = &hot, .history = tok, .n_history = 6,
                        .allowed = mask, .n_draft = 2, .verify_out = vo };
    r = l8_engine_step(e, &v, 1);
    CHECK(r == want, "%s, numerics %d: verification: %d, want %d", what, num, r, want);
    CHECK(want || (vo[0].token < V && vo[1].token < V && vo[2].token < V));

    free(mask);
    free(lg);
    l8_engine_destroy(e);
}

static struct l8_model *load(const char *dir)
{
    struct l8_model *m = NULL;
    char err[L8_ERRLEN] = "";
    int r = l8_model_load(dir, 2, &m, err);
    REQUIRE(r == 0, "load %s: %s", dir, err);
    return m;
}

int main(int argc, char **argv)
{
    if (argc < 2 || (argc > 2 && strcmp(argv[2], "cpu") && strcmp(argv[2], "cuda"))) {
        fprintf(stderr, "usage: %s GOLDEN_DIR [cpu|cuda]\n", argv[0]);
        return T_EXIT_FAIL;
    }
    if (argc > 2 && !strcmp(argv[2], "cuda"))
        backend = L8_BACKEND_CUDA;
    char *golden = t_path(argv[1], "tiny-llama31-fp8");
    char *d = t_copy_ckpt(golden);
    char *shard = t_path(d, "model-00002-of-00002.safetensors");
    fill_bf16(shard, "model.norm.weight", 3e38f);

    struct l8_model *good = load(golden), *huge = load(d);
    for (int num = L8_NUMERICS_EXACT; num <= L8_NUMERICS_FP8; num++) {
        run_steps(good, num, 0);
        run_steps(huge, num, -EDOM);
    }
    l8_model_free(good);
    l8_model_free(huge);
    t_rm_rf(d);
    free(shard);
    free(golden);
    return t_result("test_nonfinite");
}
