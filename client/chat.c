/* chat.c: the Llama 3.1 chat format (Meta's template, no tools) and stop ids.
 *
 * The reference renders the template to one string and encodes it with special tokens
 * recognised.  The special tokens split that string into pieces that are pre-tokenized
 * independently, so encoding the pieces one by one here gives the same ids, and lets
 * message contents be encoded with their special tokens as plain text.
 */
#include "llama8_tokenizer.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static const char *const role_names[] = {
    [L8CHAT_SYSTEM] = "system",
    [L8CHAT_USER] = "user",
    [L8CHAT_ASSISTANT] = "assistant",
};

int l8chat_role_parse(const char *name, enum l8chat_role *role)
{
    for (size_t i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++) {
        if (strcmp(name, role_names[i]) == 0) {
            *role = (enum l8chat_role)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *l8chat_role_name(enum l8chat_role role)
{
    if ((unsigned)role >= sizeof(role_names) / sizeof(role_names[0]))
        return NULL;
    return role_names[role];
}

void l8chat_opts_init(struct l8chat_opts *o)
{
    *o = (struct l8chat_opts){
        .today_date = L8CHAT_DEFAULT_TODAY,
        .knowledge_cutoff = L8CHAT_DEFAULT_KNOWLEDGE,
        .add_generation_prompt = true,
        .special_in_content = false,
    };
}

/* Length of the whitespace character at s (n > 0 bytes, valid UTF-8), 0 if it is not one.
 * The set is Python's str.isspace(), which Jinja's trim (str.strip) uses. */
static size_t space_at(const uint8_t *s, size_t n)
{
    uint8_t c = s[0];
    if (c == ' ' || (c >= 0x09 && c <= 0x0d) || (c >= 0x1c && c <= 0x1f))
        return 1;
    if (c == 0xc2 && n >= 2 && (s[1] == 0x85 || s[1] == 0xa0))
        return 2; /* U+0085, U+00A0 */
    if (n < 3)
        return 0;
    uint32_t cp = ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[1] & 0x3f) << 6) | (s[2] & 0x3f);
    if ((c & 0xf0) != 0xe0)
        return 0;
    if (cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200a) || cp == 0x2028 || cp == 0x2029 ||
        cp == 0x202f || cp == 0x205f || cp == 0x3000)
        return 3;
    return 0;
}

/* Start of the UTF-8 character that ends at s[n - 1]. */
static size_t last_char_start(const uint8_t *s, size_t n)
{
    size_t i = n - 1;
    while (i > 0 && (s[i] & 0xc0) == 0x80)
        i--;
    return i;
}

static void trim(const char **text, size_t *len)
{
    const uint8_t *s = (const uint8_t *)*text;
    size_t n = *len, k;
    while (n && (k = space_at(s, n)) != 0) {
        s += k;
        n -= k;
    }
    while (n) {
        size_t st = last_char_start(s, n);
        if (space_at(s + st, n - st) != n - st)
            break;
        n = st;
    }
    *text = (const char *)s;
    *len = n;
}

struct chat_ids {
    uint32_t bos, start_header, end_header, eot;
};

static int special_id(const l8tok *tok, const char *name, uint32_t *id)
{
    if (l8tok_token_id(tok, name, strlen(name), id) < 0 || !l8tok_is_special(tok, *id))
        return -EINVAL;
    return 0;
}

/* Scratch text: the piece after <|end_header_id|>, "\n\n" and the content. */
struct buf {
    char *p;
    size_t n, cap;
};

static int buf_add(struct buf *b, const char *s, size_t n)
{
    if (b->cap - b->n < n) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    return 0;
}

static int buf_str(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

/* <|start_header_id|>{role}<|end_header_id|>{b}[<|eot_id|>] */
static int block(const l8tok *tok, const struct chat_ids *sp, const char *role,
                 const struct buf *b, unsigned flags, bool eot, l8tok_ids *out)
{
    int rc;
    if ((rc = l8tok_ids_push(out, sp->start_header)) < 0 ||
        (rc = l8tok_encode(tok, role, strlen(role), L8TOK_SPECIAL_AS_TEXT, out)) < 0 ||
        (rc = l8tok_ids_push(out, sp->end_header)) < 0 ||
        (rc = l8tok_encode(tok, b->p, b->n, flags, out)) < 0)
        return rc;
    return eot ? l8tok_ids_push(out, sp->eot) : 0;
}

int l8chat_encode(const l8tok *tok, const struct l8chat_msg *msgs, size_t n_msgs,
                  const struct l8chat_opts *opts, l8tok_ids *out)
{
    struct l8chat_opts def;
    if (!opts) {
        l8chat_opts_init(&def);
        opts = &def;
    }
    const char *today = opts->today_date ? opts->today_date : L8CHAT_DEFAULT_TODAY;
    const char *cutoff = opts->knowledge_cutoff ? opts->knowledge_cutoff : L8CHAT_DEFAULT_KNOWLEDGE;
    unsigned flags = opts->special_in_content ? L8TOK_ENCODE_DEFAULT : L8TOK_SPECIAL_AS_TEXT;
    struct chat_ids sp;
    if (special_id(tok, "<|begin_of_text|>", &sp.bos) < 0 ||
        special_id(tok, "<|start_header_id|>", &sp.start_header) < 0 ||
        special_id(tok, "<|end_header_id|>", &sp.end_header) < 0 ||
        special_id(tok, "<|eot_id|>", &sp.eot) < 0)
        return -EINVAL;
    for (size_t i = 0; i < n_msgs; i++) {
        if (!l8chat_role_name(msgs[i].role))
            return -EINVAL;
        if (l8tok_utf8_check(msgs[i].content, msgs[i].len, NULL) < 0)
            return -EILSEQ; /* checked before trimming, which walks characters */
    }

    size_t n0 = out->n;
    struct buf b = {0};
    int rc;
    const char *sys = "";
    size_t sys_len = 0;
    size_t first = 0;
    if (n_msgs && msgs[0].role == L8CHAT_SYSTEM) {
        sys = msgs[0].content;
        sys_len = msgs[0].len;
        trim(&sys, &sys_len);
        first = 1;
    }
    /* The dates are the caller's settings, not message text, but are encoded with the
     * content's flags: the reference would see them in the same piece. */
    if ((rc = l8tok_ids_push(out, sp.bos)) < 0 || (rc = buf_str(&b, "\n\nCutting Knowledge Date: ")) < 0 ||
        (rc = buf_str(&b, cutoff)) < 0 || (rc = buf_str(&b, "\nToday Date: ")) < 0 ||
        (rc = buf_str(&b, today)) < 0 || (rc = buf_str(&b, "\n\n")) < 0 ||
        (rc = buf_add(&b, sys, sys_len)) < 0 ||
        (rc = block(tok, &sp, "system", &b, flags, true, out)) < 0)
        goto err;
    for (size_t i = first; i < n_msgs; i++) {
        const char *c = msgs[i].content;
        size_t cl = msgs[i].len;
        trim(&c, &cl);
        b.n = 0;
        if ((rc = buf_str(&b, "\n\n")) < 0 || (rc = buf_add(&b, c, cl)) < 0 ||
            (rc = block(tok, &sp, l8chat_role_name(msgs[i].role), &b, flags, true, out)) < 0)
            goto err;
    }
    if (opts->add_generation_prompt) {
        b.n = 0;
        if ((rc = buf_str(&b, "\n\n")) < 0 ||
            (rc = block(tok, &sp, "assistant", &b, L8TOK_SPECIAL_AS_TEXT, false, out)) < 0)
            goto err;
    }
    free(b.p);
    return 0;
err:
    free(b.p);
    out->n = n0;
    return rc;
}

static int push_stop(json_object *v, l8tok_ids *out)
{
    if (!json_object_is_type(v, json_type_int))
        return -EINVAL;
    int64_t x = json_object_get_int64(v);
    if (x < 0 || x > (int64_t)UINT32_MAX)
        return -EINVAL;
    return l8tok_ids_push(out, (uint32_t)x);
}

int l8chat_stop_ids_load(const char *path, l8tok_ids *out)
{
    char *file = l8tok__resolve_path(path, "generation_config.json");
    if (!file)
        return -ENOMEM;
    json_object *root = NULL;
    int rc = l8tok__json_load(file, &root);
    free(file);
    if (rc < 0)
        return rc;
    size_t n0 = out->n;
    json_object *eos = NULL;
    if (!json_object_is_type(root, json_type_object) ||
        !json_object_object_get_ex(root, "eos_token_id", &eos)) {
        rc = json_object_is_type(root, json_type_object) ? -ENOENT : -EINVAL;
        goto err;
    }
    if (json_object_is_type(eos, json_type_array)) {
        size_t n = json_object_array_length(eos);
        if (!n) {
            rc = -EINVAL;
            goto err;
        }
        for (size_t i = 0; i < n; i++)
            if ((rc = push_stop(json_object_array_get_idx(eos, i), out)) < 0)
                goto err;
    } else if ((rc = push_stop(eos, out)) < 0) {
        goto err;
    }
    json_object_put(root);
    return 0;
err:
    out->n = n0;
    json_object_put(root);
    return rc;
}
