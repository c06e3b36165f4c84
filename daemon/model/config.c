/* config.c - parse and check a Hugging Face Llama config.json. See config.h.
 *
 * Every rejection names the file and the key, so that a user pointing the
 * daemon at the wrong directory learns what is wrong without a debugger. */
#include "config.h"
#include "fail.h"
#include "read_file.h"

#include <errno.h>
#include <fcntl.h>
#include <float.h>
#include <json-c/json.h>
#include <math.h>
#include <regex.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* Sanity caps: far above any Llama-family model, low enough that a corrupt
 * or hostile config cannot make the loader size absurd buffers. */
#define L8_CFG_MAX_WIDTH     (1u << 17)  /* hidden_size, intermediate ... */
#define L8_CFG_MAX_INTER     (1u << 20)
#define L8_CFG_MAX_LAYERS    1024u
#define L8_CFG_MAX_HEADS     1024u
#define L8_CFG_MAX_HEAD_DIM  1024u
#define L8_CFG_MAX_VOCAB     (1u << 22)
#define L8_CFG_MAX_POS       (1u << 24)
#define L8_CFG_MAX_FILE      (16u << 20) /* config.json is a few KiB */

#define L8_DEFAULT_ROPE_THETA 10000.0


static struct json_object *get(struct json_object *o, const char *key)
{
    struct json_object *v = NULL;
    if (!json_object_object_get_ex(o, key, &v))
        return NULL;
    return v;   /* NULL also for an explicit JSON null */
}

/* A required (or, with *out preset and required=false, optional) unsigned
 * integer in [lo, hi]. */
static int get_u32(struct json_object *o, const char *path, const char *key,
                   bool required, uint32_t lo, uint32_t hi, uint32_t *out,
                   char err[L8_ERRLEN])
{
    struct json_object *v = get(o, key);
    if (!v) {
        if (required)
            return l8_fail(err, "%s: missing key \"%s\"", path, key);
        return 0;
    }
    if (!json_object_is_type(v, json_type_int))
        return l8_fail(err, "%s: \"%s\" must be an integer", path, key);
    int64_t x = json_object_get_int64(v);
    if (x < (int64_t)lo || x > (int64_t)hi)
        return l8_fail(err, "%s: \"%s\" = %lld out of range [%u, %u]", path, key,
                    (long long)x, lo, hi);
    *out = (uint32_t)x;
    return 0;
}

static int get_num(struct json_object *v, const char *path, const char *key,
                   double *out, char err[L8_ERRLEN])
{
    if (!json_object_is_type(v, json_type_int) && !json_object_is_type(v, json_type_double))
        return l8_fail(err, "%s: \"%s\" must be a number", path, key);
    double d = json_object_get_double(v);
    if (!isfinite(d))
        return l8_fail(err, "%s: \"%s\" must be finite", path, key);
    /* Kept as a float: refuse what a float cannot hold (inf, or a nonzero
     * that would round to 0 or a subnormal) rather than round it. */
    if (fabs(d) > FLT_MAX || (d != 0 && fabs(d) < FLT_MIN))
        return l8_fail(err, "%s: \"%s\" = %g is outside the range of a float", path, key, d);
    *out = d;
    return 0;
}

static int get_bool(struct json_object *o, const char *path, const char *key,
                    bool *out, char err[L8_ERRLEN])
{
    struct json_object *v = get(o, key);
    if (!v)
        return 0;
    if (!json_object_is_type(v, json_type_boolean))
        return l8_fail(err, "%s: \"%s\" must be true or false", path, key);
    *out = json_object_get_boolean(v);
    return 0;
}

static int token_id(struct json_object *v, const char *path, const char *key,
                    uint32_t vocab, int32_t *out, char err[L8_ERRLEN])
{
    if (!json_object_is_type(v, json_type_int))
        return l8_fail(err, "%s: \"%s\" must be an integer token id or a list of them",
                    path, key);
    int64_t x = json_object_get_int64(v);
    if (x < 0 || x >= (int64_t)vocab)
        return l8_fail(err, "%s: \"%s\" = %lld outside the vocabulary [0, %u)", path, key,
                    (long long)x, vocab);
    *out = (int32_t)x;
    return 0;
}

static bool str_is(struct json_object *v, const char *s)
{
    return v && json_object_is_type(v, json_type_string) &&
           strcmp(json_object_get_string(v), s) == 0;
}

static int parse_rope_scaling(struct json_object *rs, const char *path,
                              struct l8_config *c, char err[L8_ERRLEN])
{
    if (!rs)
        return 0;
    if (!json_object_is_type(rs, json_type_object))
        return l8_fail(err, "%s: \"rope_scaling\" must be an object or null", path);
    struct json_object *t = get(rs, "rope_type");
    if (!t)
        t = get(rs, "type");   /* older transformers spell it "type" */
    if (!t || !json_object_is_type(t, json_type_string))
        return l8_fail(err, "%s: \"rope_scaling.rope_type\" missing or not a string", path);
    const char *ty = json_object_get_string(t);
    /* "default" is how newer transformers spell "no scaling". */
    if (strcmp(ty, "default") == 0)
        return 0;
    if (strcmp(ty, "llama3") != 0)
        return l8_fail(err, "%s: unsupported rope_scaling type \"%s\" in \"rope_scaling.rope_type\""
                    " (only llama3 or null)", path, ty);

    static const char *const keys[3] = { "factor", "low_freq_factor", "high_freq_factor" };
    double v[3];
    for (int i = 0; i < 3; i++) {
        struct json_object *x = get(rs, keys[i]);
        if (!x)
            return l8_fail(err, "%s: missing key \"rope_scaling.%s\"", path, keys[i]);
        int r = get_num(x, path, keys[i], &v[i], err);
        if (r)
            return r;
        if (v[i] <= 0)
            return l8_fail(err, "%s: \"rope_scaling.%s\" must be positive", path, keys[i]);
    }
    if ((float)v[2] <= (float)v[1])   /* as kept: distinct in f64 may round equal */
        return l8_fail(err, "%s: \"rope_scaling.high_freq_factor\" must exceed low_freq_factor",
                    path);
    uint32_t orig = 0;
    int r = get_u32(rs, path, "original_max_position_embeddings", true, 1, L8_CFG_MAX_POS,
                    &orig, err);
    if (r) {
        /* Prefix the key with its parent so the message is unambiguous. */
        char tmp[L8_ERRLEN];
        memcpy(tmp, err, L8_ERRLEN);
        return l8_fail_code(err, r, "%s (in \"rope_scaling\")", tmp);
    }
    c->rope_type = L8_ROPE_LLAMA3;
    c->rope_factor = (float)v[0];
    c->rope_low_freq_factor = (float)v[1];
    c->rope_high_freq_factor = (float)v[2];
    c->rope_orig_max_pos = orig;
    return 0;
}

/* One quantization scheme (weights or input_activations) of a config group. */
static int check_scheme(struct json_object *s, const char *path, const char *group,
                        const char *which, bool want_dynamic, const char *want_strategy,
                        char err[L8_ERRLEN])
{
    if (!s || !json_object_is_type(s, json_type_object))
        return l8_fail(err, "%s: \"quantization_config.config_groups.%s.%s\" missing",
                    path, group, which);
    struct json_object *nb = get(s, "num_bits");
    if (!nb || !json_object_is_type(nb, json_type_int) || json_object_get_int(nb) != 8)
        return l8_fail(err, "%s: \"quantization_config.config_groups.%s.%s.num_bits\" must be 8",
                    path, group, which);
    if (!str_is(get(s, "type"), "float"))
        return l8_fail(err, "%s: \"quantization_config.config_groups.%s.%s.type\" must be"
                    " \"float\" (only FP8 is supported)", path, group, which);
    if (!str_is(get(s, "strategy"), want_strategy))
        return l8_fail(err, "%s: \"quantization_config.config_groups.%s.%s.strategy\" must be"
                    " \"%s\"", path, group, which, want_strategy);
    struct json_object *d = get(s, "dynamic");
    bool dyn = d && json_object_is_type(d, json_type_boolean) && json_object_get_boolean(d);
    if (dyn != want_dynamic)
        return l8_fail(err, "%s: \"quantization_config.config_groups.%s.%s.dynamic\" must be %s",
                    path, group, which, want_dynamic ? "true" : "false");
    struct json_object *sym = get(s, "symmetric");
    if (sym && !(json_object_is_type(sym, json_type_boolean) && json_object_get_boolean(sym)))
        return l8_fail(err, "%s: \"quantization_config.config_groups.%s.%s.symmetric\" must be true",
                    path, group, which);
    return 0;
}

/* glibc's regcomp expands a repetition by copying its operand (a{n,m}: m
 * copies, a+: a a*), so nested repetitions multiply, and a short pattern
 * can ask for gigabytes: "re:((a{1000}){1000}){1000}" (26 bytes) is 10^9
 * nodes, 20 nested "(...)+" a million. Refuse a pattern whose repetition
 * factors, all multiplied (nested or not: an upper bound), pass
 * REGEX_MAX_COPIES. */
#define REGEX_MAX_COPIES 4096
static bool regex_small(const char *re)
{
    unsigned long long prod = 1;
    for (const char *p = re; *p; p++) {
        unsigned long long f = 1;
        if (*p == '\\' && p[1]) {
            p++;
        } else if (*p == '+') {
            f = 2;
        } else if (*p == '{') {
            unsigned long long x = 0;
            for (const char *q = p + 1; (*q >= '0' && *q <= '9') || *q == ','; q++) {
                x = *q == ',' ? 0 : x * 10 + (unsigned)(*q - '0');
                if (x > REGEX_MAX_COPIES)
                    return false;
                if (x + 1 > f)
                    f = x + 1;
            }
        }
        if ((prod *= f) > REGEX_MAX_COPIES)
            return false;
    }
    return true;
}

static int parse_quant(struct json_object *q, const char *path, struct l8_config *c,
                       char err[L8_ERRLEN])
{
    if (!q)
        return 0;
    if (!json_object_is_type(q, json_type_object))
        return l8_fail(err, "%s: \"quantization_config\" must be an object", path);
    struct json_object *m = get(q, "quant_method");
    if (!str_is(m, "compressed-tensors"))
        return l8_fail(err, "%s: unsupported \"quantization_config.quant_method\" \"%s\""
                    " (only compressed-tensors FP8-dynamic)", path,
                    m ? json_object_get_string(m) : "(missing)");
    struct json_object *f = get(q, "format");
    if (!str_is(f, "float-quantized") && !str_is(f, "naive-quantized"))
        return l8_fail(err, "%s: unsupported \"quantization_config.format\" \"%s\""
                    " (only float-quantized or naive-quantized)", path,
                    f ? json_object_get_string(f) : "(missing)");
    if (get(q, "kv_cache_scheme"))
        return l8_fail(err, "%s: \"quantization_config.kv_cache_scheme\" is not supported", path);

    struct json_object *groups = get(q, "config_groups");
    if (!groups || !json_object_is_type(groups, json_type_object) ||
        json_object_object_length(groups) == 0)
        return l8_fail(err, "%s: \"quantization_config.config_groups\" missing or empty", path);
    json_object_object_foreach(groups, gname, g) {
        if (!g || !json_object_is_type(g, json_type_object))
            return l8_fail(err, "%s: \"quantization_config.config_groups.%s\" must be an object",
                        path, gname);
        int r = check_scheme(get(g, "weights"), path, gname, "weights", false, "channel", err);
        if (!r)
            r = check_scheme(get(g, "input_activations"), path, gname, "input_activations",
                             true, "token", err);
        if (r)
            return r;
        if (get(g, "output_activations"))
            return l8_fail(err, "%s: \"quantization_config.config_groups.%s.output_activations\""
                        " is not supported", path, gname);
    }

    struct json_object *ig = get(q, "ignore");
    if (ig) {
        if (!json_object_is_type(ig, json_type_array))
            return l8_fail(err, "%s: \"quantization_config.ignore\" must be a list", path);
        size_t n = json_object_array_length(ig);
        if (n > L8_MAX_IGNORE)
            return l8_fail(err, "%s: \"quantization_config.ignore\" has %zu entries (at most %d)",
                        path, n, L8_MAX_IGNORE);
        for (size_t i = 0; i < n; i++) {
            struct json_object *e = json_object_array_get_idx(ig, i);
            if (!e || !json_object_is_type(e, json_type_string) ||
                json_object_get_string_len(e) == 0 ||
                (size_t)json_object_get_string_len(e) >= sizeof c->ignore[0])
                return l8_fail(err, "%s: \"quantization_config.ignore\"[%zu] must be a module"
                            " name shorter than %zu bytes", path, i, sizeof c->ignore[0]);
            const char *s = json_object_get_string(e);
            if (strncmp(s, "re:", 3) == 0) {
                regex_t re;
                if (!regex_small(s + 3))
                    return l8_fail(err, "%s: \"quantization_config.ignore\"[%zu]: regex \"%s\" "
                                   "repeats too much (its repetition counts multiply past %d)",
                                   path, i, s, REGEX_MAX_COPIES);
                if (regcomp(&re, s + 3, REG_EXTENDED | REG_NOSUB))
                    return l8_fail(err, "%s: \"quantization_config.ignore\"[%zu]: bad regex \"%s\"",
                                path, i, s);
                regfree(&re);
            }
            memcpy(c->ignore[i], s, (size_t)json_object_get_string_len(e) + 1);
        }
        c->n_ignore = (uint32_t)n;
    }
    c->quant = L8_QUANT_FP8_DYNAMIC;
    return 0;
}

static int parse_obj(struct json_object *o, const char *path, struct l8_config *c,
                     char err[L8_ERRLEN])
{
    int r;
    memset(c, 0, sizeof *c);
    c->bos = -1;

    if (!json_object_is_type(o, json_type_object))
        return l8_fail(err, "%s: top level is not a JSON object", path);

    struct json_object *arch = get(o, "architectures");
    bool llama = false;
    if (arch && json_object_is_type(arch, json_type_array))
        for (size_t i = 0; i < json_object_array_length(arch); i++)
            llama |= str_is(json_object_array_get_idx(arch, i), "LlamaForCausalLM");
    if (!llama)
        return l8_fail(err, "%s: unsupported architecture in \"architectures\" (%s); need"
                    " LlamaForCausalLM", path,
                    arch ? json_object_to_json_string_ext(arch, JSON_C_TO_STRING_PLAIN)
                         : "missing");

    if ((r = get_u32(o, path, "hidden_size", true, 1, L8_CFG_MAX_WIDTH, &c->hidden, err)) ||
        (r = get_u32(o, path, "intermediate_size", true, 1, L8_CFG_MAX_INTER, &c->inter, err)) ||
        (r = get_u32(o, path, "num_hidden_layers", true, 1, L8_CFG_MAX_LAYERS, &c->n_layers, err)) ||
        (r = get_u32(o, path, "num_attention_heads", true, 1, L8_CFG_MAX_HEADS, &c->n_heads, err)) ||
        (r = get_u32(o, path, "vocab_size", true, 1, L8_CFG_MAX_VOCAB, &c->vocab, err)) ||
        (r = get_u32(o, path, "max_position_embeddings", true, 1, L8_CFG_MAX_POS, &c->max_pos, err)))
        return r;

    c->n_kv_heads = c->n_heads;
    c->kv_heads_absent = !get(o, "num_key_value_heads");
    if ((r = get_u32(o, path, "num_key_value_heads", false, 1, L8_CFG_MAX_HEADS,
                     &c->n_kv_heads, err)))
        return r;
    if (c->n_heads % c->n_kv_heads)
        return l8_fail(err, "%s: \"num_attention_heads\" (%u) is not a multiple of"
                    " \"num_key_value_heads\" (%u)", path, c->n_heads, c->n_kv_heads);

    if (get(o, "head_dim")) {
        if ((r = get_u32(o, path, "head_dim", true, 1, L8_CFG_MAX_HEAD_DIM, &c->head_dim, err)))
            return r;
    } else {
        /* Only when head_dim is derived must hidden split evenly into heads;
         * an explicit head_dim may differ from hidden / heads (Mistral-style). */
        if (c->hidden % c->n_heads)
            return l8_fail(err, "%s: \"hidden_size\" (%u) is not a multiple of"
                        " \"num_attention_heads\" (%u) and \"head_dim\" is absent",
                        path, c->hidden, c->n_heads);
        c->head_dim = c->hidden / c->n_heads;
        if (c->head_dim > L8_CFG_MAX_HEAD_DIM)
            return l8_fail(err, "%s: derived \"head_dim\" %u too large", path, c->head_dim);
    }
    if (c->head_dim % 2)
        return l8_fail(err, "%s: \"head_dim\" (%u) must be even for RoPE", path, c->head_dim);
    if ((uint64_t)c->n_heads * c->head_dim > L8_CFG_MAX_WIDTH)
        return l8_fail(err, "%s: \"num_attention_heads\" * \"head_dim\" = %llu too large", path,
                    (unsigned long long)c->n_heads * c->head_dim);

    struct json_object *v;
    double d;
    if (!(v = get(o, "rms_norm_eps")))
        return l8_fail(err, "%s: missing key \"rms_norm_eps\"", path);
    if ((r = get_num(v, path, "rms_norm_eps", &d, err)))
        return r;
    if (d <= 0 || d >= 1)
        return l8_fail(err, "%s: \"rms_norm_eps\" = %g out of range (0, 1)", path, d);
    c->rms_eps = (float)d;

    d = L8_DEFAULT_ROPE_THETA;
    c->rope_theta_absent = !get(o, "rope_theta");
    if ((v = get(o, "rope_theta")) && (r = get_num(v, path, "rope_theta", &d, err)))
        return r;
    if (d <= 1)
        return l8_fail(err, "%s: \"rope_theta\" = %g must exceed 1", path, d);
    c->rope_theta = (float)d;
    if ((r = parse_rope_scaling(get(o, "rope_scaling"), path, c, err)))
        return r;

    if ((r = get_bool(o, path, "tie_word_embeddings", &c->tie_embeddings, err)))
        return r;
    /* Biases and other activations change the maths; refuse rather than
     * silently compute something else. */
    bool bias = false;
    if ((r = get_bool(o, path, "attention_bias", &bias, err)))
        return r;
    if (bias)
        return l8_fail(err, "%s: \"attention_bias\" true is not supported", path);
    if ((r = get_bool(o, path, "mlp_bias", &bias, err)))
        return r;
    if (bias)
        return l8_fail(err, "%s: \"mlp_bias\" true is not supported", path);
    if ((v = get(o, "hidden_act")) && !str_is(v, "silu"))
        return l8_fail(err, "%s: \"hidden_act\" must be \"silu\"", path);

    if ((v = get(o, "bos_token_id")) && (r = token_id(v, path, "bos_token_id", c->vocab,
                                                       &c->bos, err)))
        return r;
    if ((v = get(o, "eos_token_id"))) {
        if (json_object_is_type(v, json_type_array)) {
            size_t n = json_object_array_length(v);
            if (n > L8_MAX_EOS)
                return l8_fail(err, "%s: \"eos_token_id\" has %zu entries (at most %d)", path, n,
                            L8_MAX_EOS);
            for (size_t i = 0; i < n; i++)
                if ((r = token_id(json_object_array_get_idx(v, i), path, "eos_token_id",
                                  c->vocab, &c->eos[i], err)))
                    return r;
            c->n_eos = (uint32_t)n;
        } else {
            if ((r = token_id(v, path, "eos_token_id", c->vocab, &c->eos[0], err)))
                return r;
            c->n_eos = 1;
        }
    }
    return parse_quant(get(o, "quantization_config"), path, c, err);
}

int l8_config_parse(const char *json, const char *path, struct l8_config *out,
                    char err[L8_ERRLEN])
{
    struct l8_config c;
    struct json_tokener *tok = json_tokener_new();
    if (!tok)
        return -ENOMEM;
    size_t len = strlen(json);
    struct json_object *o = json_tokener_parse_ex(tok, json, (int)len);
    enum json_tokener_error je = json_tokener_get_error(tok);
    int r;
    if (!o || je != json_tokener_success) {
        r = l8_fail(err, "%s: malformed JSON at byte %zu: %s", path,
                 json_tokener_get_parse_end(tok),
                 je == json_tokener_continue ? "unexpected end of input"
                                             : json_tokener_error_desc(je));
        goto out;
    }
    for (size_t i = json_tokener_get_parse_end(tok); i < len; i++)
        if (!strchr(" \t\r\n", json[i])) {
            r = l8_fail(err, "%s: malformed JSON: trailing data at byte %zu", path, i);
            goto out;
        }
    r = parse_obj(o, path, &c, err);
    if (!r)
        *out = c;
out:
    json_object_put(o);
    json_tokener_free(tok);
    return r;
}

int l8_config_load(const char *dir, struct l8_config *out, char err[L8_ERRLEN])
{
    char path[4200], *buf;
    size_t len;
    snprintf(path, sizeof path, "%s/config.json", dir);
    int r = l8_read_file(path, L8_CFG_MAX_FILE, &buf, &len, err, L8_ERRLEN);
    if (r)
        return r;
    if (strlen(buf) != len)
        r = l8_fail(err, "%s: malformed JSON: contains a NUL byte", path);
    else
        r = l8_config_parse(buf, path, out, err);
    free(buf);
    return r;
}

void l8_rope_inv_freq(const struct l8_config *c, float *inv_freq)
{
    const double pi = 3.14159265358979323846;
    uint32_t half = c->head_dim / 2;
    for (uint32_t i = 0; i < half; i++) {
        double f = 1.0 / pow((double)c->rope_theta, (double)(2 * i) / (double)c->head_dim);
        if (c->rope_type == L8_ROPE_LLAMA3) {
            double orig = (double)c->rope_orig_max_pos;
            double lo = (double)c->rope_low_freq_factor, hi = (double)c->rope_high_freq_factor;
            double factor = (double)c->rope_factor;
            double wavelen = 2.0 * pi / f;
            if (wavelen < orig / hi) {
                /* high frequency: unchanged */
            } else if (wavelen > orig / lo) {
                f = f / factor;
            } else {
                double smooth = (orig / wavelen - lo) / (hi - lo);
                f = (1.0 - smooth) * f / factor + smooth * f;
            }
        }
        inv_freq[i] = (float)f;
    }
}

/* compressed-tensors matches ignore entries against module names: exact
 * names, or "re:" patterns applied with Python's re.match (anchored at the
 * start only). */
bool l8_config_ignores(const struct l8_config *c, const char *module)
{
    for (uint32_t i = 0; i < c->n_ignore; i++) {
        const char *e = c->ignore[i];
        if (strncmp(e, "re:", 3) != 0) {
            if (strcmp(e, module) == 0)
                return true;
            continue;
        }
        regex_t re;
        regmatch_t m;
        if (regcomp(&re, e + 3, REG_EXTENDED))
            continue;
        bool hit = regexec(&re, module, 1, &m, 0) == 0 && m.rm_so == 0;
        regfree(&re);
        if (hit)
            return true;
    }
    return false;
}
