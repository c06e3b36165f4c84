/* test_config.c - config.json: the golden config field by field, the
 * defaults, llama3 RoPE frequencies, and one rejection per bad key. */
#include <math.h>

#include "config.h"
#include "testutil.h"

static const char *golden;
static char *golden_text;

/* Hugging Face's _compute_llama3_parameters, in its own shape (torch.where
 * over masks) and in double, to check the loader's branchy version. */
static void hf_llama3(double theta, unsigned dim, double factor, double lo, double hi,
                      double orig, double *out)
{
    for (unsigned i = 0; i < dim / 2; i++) {
        double inv = 1.0 / pow(theta, (double)(2 * i) / dim);
        double low_wl = orig / lo, high_wl = orig / hi;
        double wl = 2 * M_PI / inv;
        double llama = wl > low_wl ? inv / factor : inv;
        double smooth = (orig / wl - lo) / (hi - lo);
        double smoothed = (1 - smooth) * llama / factor + smooth * llama;
        bool medium = !(wl < high_wl) && !(wl > low_wl);
        out[i] = medium ? smoothed : llama;
    }
}

static void test_golden(void)
{
    struct l8_config c;
    char err[L8_ERRLEN] = "";
    int r = l8_config_load(golden, &c, err);
    CHECK(r == 0);
    if (r) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK(c.hidden == 512 && c.inter == 1024 && c.n_layers == 2);
    CHECK(c.n_heads == 4 && c.n_kv_heads == 1 && c.head_dim == 128);
    CHECK(c.vocab == 2048 && c.max_pos == 131072);
    CHECK(c.rms_eps == 1e-5f && c.rope_theta == 500000.0f);
    CHECK(!c.kv_heads_absent && !c.rope_theta_absent);
    CHECK(c.rope_type == L8_ROPE_LLAMA3 && c.rope_factor == 8.0f &&
          c.rope_low_freq_factor == 1.0f && c.rope_high_freq_factor == 4.0f &&
          c.rope_orig_max_pos == 8192);
    CHECK(!c.tie_embeddings);
    CHECK(c.bos == 1 && c.n_eos == 2 && c.eos[0] == 2 && c.eos[1] == 3);
    CHECK(c.quant == L8_QUANT_FP8_DYNAMIC);
    CHECK(c.n_ignore == 1 && strcmp(c.ignore[0], "lm_head") == 0);
    CHECK(l8_config_ignores(&c, "lm_head"));
    CHECK(!l8_config_ignores(&c, "model.layers.0.mlp.down_proj"));
    CHECK(!l8_config_ignores(&c, "lm_head_x"));

    float f[64];
    double want[64];
    l8_rope_inv_freq(&c, f);
    hf_llama3(500000.0, 128, 8, 1, 4, 8192, want);
    int bad = 0, n_low = 0, n_mid = 0, n_high = 0;
    for (int i = 0; i < 64; i++) {
        if (f[i] != (float)want[i])
            bad++;
        double base = 1.0 / pow(500000.0, i / 64.0);
        n_high += want[i] == base;
        n_low += want[i] == base / 8;
        n_mid += want[i] != base && want[i] != base / 8;
    }
    CHECK(bad == 0);
    /* The golden shape exercises all three llama3 bands. */
    CHECK(n_low > 0 && n_mid > 0 && n_high > 0);
    CHECK(f[0] == 1.0f);
}

static int parse_str(const char *text, struct l8_config *c, char err[L8_ERRLEN])
{
    return l8_config_parse(text, "bad/config.json", c, err);
}

static void test_defaults(void)
{
    const char *min =
        "{\"architectures\": [\"LlamaForCausalLM\"], \"hidden_size\": 256,"
        " \"intermediate_size\": 640, \"num_hidden_layers\": 3, \"num_attention_heads\": 8,"
        " \"vocab_size\": 1000, \"max_position_embeddings\": 4096, \"rms_norm_eps\": 1e-6,"
        " \"eos_token_id\": 7, \"rope_scaling\": null}";
    struct l8_config c;
    char err[L8_ERRLEN] = "";
    int r = parse_str(min, &c, err);
    CHECK(r == 0);
    if (r) {
        fprintf(stderr, "%s\n", err);
        return;
    }
    CHECK(c.n_kv_heads == 8 && c.head_dim == 32);
    CHECK(c.rope_theta == 10000.0f && c.rope_type == L8_ROPE_DEFAULT);
    CHECK(c.kv_heads_absent == (strstr(min, "num_key_value_heads") == NULL) &&
          c.rope_theta_absent);
    CHECK(c.bos == -1 && c.n_eos == 1 && c.eos[0] == 7);
    CHECK(!c.tie_embeddings && c.quant == L8_QUANT_NONE && c.n_ignore == 0);
    CHECK(c.rms_eps == 1e-6f);
    float f[16];
    l8_rope_inv_freq(&c, f);
    int bad = 0;
    for (int i = 0; i < 16; i++)
        bad += f[i] != (float)(1.0 / pow(10000.0, 2.0 * i / 32));
    CHECK(bad == 0);

    /* Explicit head_dim that differs from hidden / heads is legal. */
    struct json_object *o = json_tokener_parse(min);
    json_object_object_add(o, "head_dim", json_object_new_int(64));
    json_object_object_add(o, "num_key_value_heads", json_object_new_int(2));
    json_object_object_add(o, "tie_word_embeddings", json_object_new_boolean(1));
    /* older transformers spell rope_type "type" */
    json_object_object_add(o, "rope_scaling", json_tokener_parse(
        "{\"type\": \"llama3\", \"factor\": 32, \"low_freq_factor\": 1,"
        " \"high_freq_factor\": 4, \"original_max_position_embeddings\": 8192}"));
    r = parse_str(json_object_to_json_string(o), &c, err);
    CHECK(r == 0);
    CHECK(c.head_dim == 64 && c.n_kv_heads == 2 && c.tie_embeddings);
    CHECK(c.rope_type == L8_ROPE_LLAMA3 && c.rope_factor == 32.0f);
    json_object_put(o);

    /* ignore with a regular expression (compressed-tensors "re:"). */
    o = json_tokener_parse(golden_text);
    struct json_object *q, *ig = json_object_new_array();
    json_object_object_get_ex(o, "quantization_config", &q);
    json_object_array_add(ig, json_object_new_string("lm_head"));
    json_object_array_add(ig, json_object_new_string("re:.*mlp\\.down_proj$"));
    json_object_object_add(q, "ignore", ig);
    r = parse_str(json_object_to_json_string(o), &c, err);
    CHECK(r == 0);
    CHECK(l8_config_ignores(&c, "model.layers.7.mlp.down_proj"));
    CHECK(!l8_config_ignores(&c, "model.layers.7.mlp.up_proj"));
    json_object_put(o);
}

/* One bad config: edit the golden one at a path ("a.b.c"), set it to the
 * JSON value (NULL deletes the key), and expect -EINVAL naming the key. */
struct bad_case {
    const char *path;
    const char *value;      /* JSON text, or NULL to delete */
    const char *want;       /* must appear in the message */
};

static void set_path(struct json_object *o, const char *path, const char *value)
{
    char buf[256];
    snprintf(buf, sizeof buf, "%s", path);
    char *save = NULL, *key = strtok_r(buf, ".", &save), *next;
    while ((next = strtok_r(NULL, ".", &save))) {
        struct json_object *child = NULL;
        json_object_object_get_ex(o, key, &child);
        if (!child)
            abort();
        o = child;
        key = next;
    }
    if (value)
        json_object_object_add(o, key, json_tokener_parse(value));
    else
        json_object_object_del(o, key);
}

static void test_bad(void)
{
    static const struct bad_case cases[] = {
        { "architectures", "[\"MistralForCausalLM\"]", "unsupported architecture" },
        { "architectures", NULL, "architectures" },
        { "hidden_size", NULL, "hidden_size" },
        { "hidden_size", "0", "hidden_size" },
        { "hidden_size", "-512", "hidden_size" },
        { "hidden_size", "\"512\"", "hidden_size" },
        { "hidden_size", "512.5", "hidden_size" },
        { "intermediate_size", "4294967296", "intermediate_size" },
        { "num_hidden_layers", "100000", "num_hidden_layers" },
        { "num_attention_heads", NULL, "num_attention_heads" },
        { "num_key_value_heads", "3", "num_key_value_heads" },
        { "num_key_value_heads", "0", "num_key_value_heads" },
        { "head_dim", "127", "head_dim" },
        { "head_dim", "0", "head_dim" },
        { "vocab_size", "1073741824", "vocab_size" },
        { "max_position_embeddings", NULL, "max_position_embeddings" },
        { "rms_norm_eps", NULL, "rms_norm_eps" },
        { "rms_norm_eps", "-1e-5", "rms_norm_eps" },
        { "rms_norm_eps", "\"tiny\"", "rms_norm_eps" },
        { "rms_norm_eps", "1e-50", "outside the range of a float" },   /* would be 0 */
        { "rope_theta", "1e39", "outside the range of a float" },      /* would be inf */
        { "rope_theta", "\"big\"", "rope_theta" },
        { "rope_theta", "0", "rope_theta" },
        { "rope_scaling", "[]", "rope_scaling" },
        { "rope_scaling", "{\"rope_type\": \"yarn\", \"factor\": 4}", "unsupported rope_scaling type" },
        { "rope_scaling", "{\"type\": \"dynamic\", \"factor\": 2}", "unsupported rope_scaling type" },
        { "rope_scaling", "{\"factor\": 2}", "rope_type" },
        { "rope_scaling.factor", NULL, "factor" },
        { "rope_scaling.factor", "0", "factor" },
        { "rope_scaling.low_freq_factor", "\"one\"", "low_freq_factor" },
        { "rope_scaling.high_freq_factor", "0.5", "high_freq_factor" },
        { "rope_scaling.factor", "1e-46", "outside the range of a float" },
        { "rope_scaling.high_freq_factor", "1.00000001", "high_freq_factor" },   /* == low as floats */
        { "rope_scaling.original_max_position_embeddings", NULL, "original_max_position_embeddings" },
        { "tie_word_embeddings", "\"yes\"", "tie_word_embeddings" },
        { "attention_bias", "true", "attention_bias" },
        { "mlp_bias", "true", "mlp_bias" },
        { "hidden_act", "\"gelu\"", "hidden_act" },
        { "bos_token_id", "\"<s>\"", "bos_token_id" },
        { "bos_token_id", "2048", "bos_token_id" },
        { "eos_token_id", "[2, -1]", "eos_token_id" },
        { "eos_token_id", "[2, 3, 4, 5, 6, 7, 8, 9, 10]", "eos_token_id" },
        { "eos_token_id", "{}", "eos_token_id" },
        { "quantization_config", "\"fp8\"", "quantization_config" },
        { "quantization_config.quant_method", "\"gptq\"", "quant_method" },
        { "quantization_config.format", "\"int-quantized\"", "format" },
        { "quantization_config.format", NULL, "format" },
        { "quantization_config.kv_cache_scheme", "{\"num_bits\": 8}", "kv_cache_scheme" },
        { "quantization_config.config_groups", "{}", "config_groups" },
        { "quantization_config.config_groups.group_0.weights.strategy", "\"tensor\"", "strategy" },
        { "quantization_config.config_groups.group_0.weights.num_bits", "4", "num_bits" },
        { "quantization_config.config_groups.group_0.weights.type", "\"int\"", "type" },
        { "quantization_config.config_groups.group_0.weights.symmetric", "false", "symmetric" },
        { "quantization_config.config_groups.group_0.weights", NULL, "weights" },
        { "quantization_config.config_groups.group_0.input_activations.dynamic", "false", "dynamic" },
        { "quantization_config.config_groups.group_0.input_activations.strategy", "\"tensor\"", "strategy" },
        { "quantization_config.config_groups.group_0.input_activations", NULL, "input_activations" },
        { "quantization_config.config_groups.group_0.output_activations", "{\"num_bits\": 8}", "output_activations" },
        { "quantization_config.ignore", "\"lm_head\"", "ignore" },
        { "quantization_config.ignore", "[7]", "ignore" },
        { "quantization_config.ignore", "[\"re:(\"]", "ignore" },
        /* glibc's regcomp would take gigabytes / seconds for these */
        { "quantization_config.ignore", "[\"re:((a{1000}){1000}){1000}\"]", "repeats too much" },
        { "quantization_config.ignore", "[\"re:((((((((((((((((((((a+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+)+\"]",
          "repeats too much" },
    };
    int nc = (int)(sizeof cases / sizeof cases[0]);
    for (int i = 0; i < nc; i++) {
        struct json_object *o = json_tokener_parse(golden_text);
        set_path(o, cases[i].path, cases[i].value);
        struct l8_config c;
        memset(&c, 0x5a, sizeof c);
        struct l8_config before = c;
        char err[L8_ERRLEN] = "";
        int r = parse_str(json_object_to_json_string(o), &c, err);
        if (r != -EINVAL || !strstr(err, "bad/config.json") || !strstr(err, cases[i].want)) {
            fprintf(stderr, "case %s = %s: r=%d err=\"%s\" (want \"%s\")\n", cases[i].path,
                    cases[i].value ? cases[i].value : "(deleted)", r, err, cases[i].want);
            t_failures++;
        }
        /* out-parameter untouched on failure */
        CHECK(memcmp(&c, &before, sizeof c) == 0);
        json_object_put(o);
    }

    /* Inconsistent head sizes when head_dim must be derived. */
    struct json_object *o = json_tokener_parse(golden_text);
    set_path(o, "head_dim", NULL);
    set_path(o, "num_attention_heads", "3");
    set_path(o, "num_key_value_heads", "3");
    struct l8_config c;
    char err[L8_ERRLEN] = "";
    int r = parse_str(json_object_to_json_string(o), &c, err);
    CHECK_ERR(r, -EINVAL, err, "bad/config.json", "hidden_size", "num_attention_heads");
    json_object_put(o);

    /* Malformed JSON. */
    static const char *const broken[] = {
        "", "{", "{\"hidden_size\": }", "[1, 2]", "{} trailing", "{\"a\": 1,}x", "nul",
    };
    for (size_t i = 0; i < sizeof broken / sizeof broken[0]; i++) {
        err[0] = 0;
        r = parse_str(broken[i], &c, err);
        CHECK_ERR(r, -EINVAL, err, "bad/config.json");
    }
    char *trunc = strndup(golden_text, strlen(golden_text) / 2);
    r = parse_str(trunc, &c, err);
    CHECK_ERR(r, -EINVAL, err, "bad/config.json", "malformed JSON");
    free(trunc);

    /* I/O: a missing directory says which file. */
    r = l8_config_load("/nonexistent-l8-dir", &c, err);
    CHECK_ERR(r, -ENOENT, err, "/nonexistent-l8-dir/config.json");
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s GOLDEN_CHECKPOINT_DIR\n", argv[0]);
        return 1;
    }
    golden = argv[1];
    char *p = t_path(golden, "config.json");
    golden_text = (char *)t_read(p, NULL);
    free(p);
    if (!golden_text) {
        perror("golden config.json");
        return 1;
    }
    test_golden();
    test_defaults();
    test_bad();
    free(golden_text);
    return t_result("test_config");
}
