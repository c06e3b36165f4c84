/* chat.c: the Llama 3.1 chat format (Meta's template, with JSON custom tools), stop ids,
 * and tool calls: parsing a reply into one and the schema that forces one.
 *
 * The reference renders the template to one string and encodes it with special tokens
 * recognised.  The special tokens split that string into pieces that are pre-tokenized
 * independently, so encoding the pieces one by one here gives the same ids, and lets
 * message contents be encoded with their special tokens as plain text.
 */
#include "llama8_tokenizer.h"
#include "tokenizer_internal.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <json-c/json.h>

static const char *const role_names[] = {
    [L8CHAT_SYSTEM] = "system",
    [L8CHAT_USER] = "user",
    [L8CHAT_ASSISTANT] = "assistant",
    [L8CHAT_IPYTHON] = "ipython",
};

int l8chat_role_parse(const char *name, enum l8chat_role *role)
{
    for (size_t i = 0; i < sizeof(role_names) / sizeof(role_names[0]); i++) {
        if (strcmp(name, role_names[i]) == 0) {
            *role = (enum l8chat_role)i;
            return 0;
        }
    }
    if (strcmp(name, "tool") == 0) { /* the template renders role "tool" as ipython */
        *role = L8CHAT_IPYTHON;
        return 0;
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
        .today_date = NULL,   /* today's, read at each l8chat_encode */
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
    if (b->cap - b->n < n + 1) { /* + 1: room for a terminating NUL */
        size_t cap = b->cap ? b->cap : 256;
        while (cap - b->n < n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p)
            return -ENOMEM;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = '\0';
    return 0;
}

static int buf_str(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

/* ---------------------------------------------------------------- JSON as Python writes it */

/* (s, n) as a JSON string the way Python's json.dumps(ensure_ascii=False) writes one:
 * only '"', '\\' and the C0 controls escaped, the short forms where JSON has them. */
static int json_write_string(struct buf *b, const char *s, size_t n)
{
    int rc = buf_add(b, "\"", 1);
    size_t run = 0; /* start of the bytes not yet copied */
    for (size_t i = 0; i < n && rc == 0; i++) {
        unsigned char c = (unsigned char)s[i];
        const char *esc = NULL;
        char u[8];
        switch (c) {
        case '"': esc = "\\\""; break;
        case '\\': esc = "\\\\"; break;
        case '\n': esc = "\\n"; break;
        case '\r': esc = "\\r"; break;
        case '\t': esc = "\\t"; break;
        case '\b': esc = "\\b"; break;
        case '\f': esc = "\\f"; break;
        default:
            if (c < 0x20) {
                snprintf(u, sizeof(u), "\\u%04x", c);
                esc = u;
            }
        }
        if (!esc)
            continue;
        if ((rc = buf_add(b, s + run, i - run)) == 0)
            rc = buf_str(b, esc);
        run = i + 1;
    }
    if (rc == 0)
        rc = buf_add(b, s + run, n - run);
    return rc ? rc : buf_add(b, "\"", 1);
}

/* A double as Python's repr(): the shortest digits that read back to x, positional when
 * the decimal exponent is in [-4, 16), with ".0" when that leaves no fraction, otherwise
 * d.ddde+XX; json.dumps writes NaN and Infinity as such. */
static int json_write_double(struct buf *b, double x)
{
    char out[64];
    if (isnan(x))
        return buf_str(b, "NaN");
    if (isinf(x))
        return buf_str(b, x < 0 ? "-Infinity" : "Infinity");
    char e[40];
    for (int prec = 0; prec < 17; prec++) {
        snprintf(e, sizeof(e), "%.*e", prec, x);
        if (strtod(e, NULL) == x)
            break;
    }
    /* e: [-]d[.ddd]e[+-]XX */
    const char *p = e;
    bool neg = *p == '-';
    if (neg)
        p++;
    char digits[24];
    size_t nd = 0;
    for (; *p && *p != 'e'; p++)
        if (*p != '.')
            digits[nd++] = *p;
    int exp10 = atoi(p + 1);
    while (nd > 1 && digits[nd - 1] == '0')
        nd--;
    digits[nd] = '\0';
    int decpt = exp10 + 1; /* digits before the point */
    size_t o = 0;
    if (neg)
        out[o++] = '-';
    if (decpt > -4 && decpt <= 16) {
        if (decpt <= 0) {
            out[o++] = '0';
            out[o++] = '.';
            for (int i = 0; i < -decpt; i++)
                out[o++] = '0';
            memcpy(out + o, digits, nd);
            o += nd;
        } else if ((size_t)decpt >= nd) {
            memcpy(out + o, digits, nd);
            o += nd;
            for (size_t i = nd; i < (size_t)decpt; i++)
                out[o++] = '0';
            out[o++] = '.';
            out[o++] = '0';
        } else {
            memcpy(out + o, digits, (size_t)decpt);
            o += (size_t)decpt;
            out[o++] = '.';
            memcpy(out + o, digits + decpt, nd - (size_t)decpt);
            o += nd - (size_t)decpt;
        }
        out[o] = '\0';
    } else {
        out[o++] = digits[0];
        if (nd > 1) {
            out[o++] = '.';
            memcpy(out + o, digits + 1, nd - 1);
            o += nd - 1;
        }
        snprintf(out + o, sizeof(out) - o, "e%c%02d", exp10 < 0 ? '-' : '+', abs(exp10));
    }
    return buf_str(b, out);
}

static int json_newline(struct buf *b, int indent, int depth)
{
    int rc = buf_add(b, "\n", 1);
    for (int i = 0; i < indent * depth && rc == 0; i++)
        rc = buf_add(b, " ", 1);
    return rc;
}

#define JSON_MAX_DEPTH 64 /* json-c's own parser depth limit is 32 */

/* v as Python's json.dumps(v, ensure_ascii=False, indent=indent) writes it (indent < 0:
 * indent=None, one line with ", " and ": "); members in their order in v. */
static int json_write(struct buf *b, json_object *v, int indent, int depth)
{
    char num[32];
    if (depth > JSON_MAX_DEPTH)
        return -EINVAL;
    switch (json_object_get_type(v)) {
    case json_type_null:
        return buf_str(b, "null");
    case json_type_boolean:
        return buf_str(b, json_object_get_boolean(v) ? "true" : "false");
    case json_type_int: {
        int64_t i = json_object_get_int64(v);
        if (i == INT64_MAX)
            snprintf(num, sizeof(num), "%llu", (unsigned long long)json_object_get_uint64(v));
        else
            snprintf(num, sizeof(num), "%lld", (long long)i);
        return buf_str(b, num);
    }
    case json_type_double:
        return json_write_double(b, json_object_get_double(v));
    case json_type_string:
        return json_write_string(b, json_object_get_string(v),
                                 (size_t)json_object_get_string_len(v));
    case json_type_array: {
        size_t n = json_object_array_length(v);
        int rc = buf_add(b, "[", 1);
        for (size_t i = 0; i < n && rc == 0; i++) {
            if (i)
                rc = buf_str(b, indent < 0 ? ", " : ",");
            if (rc == 0 && indent >= 0)
                rc = json_newline(b, indent, depth + 1);
            if (rc == 0)
                rc = json_write(b, json_object_array_get_idx(v, i), indent, depth + 1);
        }
        if (rc == 0 && n && indent >= 0)
            rc = json_newline(b, indent, depth);
        return rc ? rc : buf_add(b, "]", 1);
    }
    case json_type_object: {
        int rc = buf_add(b, "{", 1);
        bool first = true;
        json_object_object_foreach(v, key, val) {
            if (rc)
                break;
            if (!first)
                rc = buf_str(b, indent < 0 ? ", " : ",");
            first = false;
            if (rc == 0 && indent >= 0)
                rc = json_newline(b, indent, depth + 1);
            if (rc == 0)
                rc = json_write_string(b, key, strlen(key));
            if (rc == 0)
                rc = buf_str(b, ": ");
            if (rc == 0)
                rc = json_write(b, val, indent, depth + 1);
        }
        if (rc == 0 && !first && indent >= 0)
            rc = json_newline(b, indent, depth);
        return rc ? rc : buf_add(b, "}", 1);
    }
    }
    return -EINVAL;
}

/* Parse (s, n) as exactly one JSON value, strictly (RFC 8259: no comments, single quotes
 * or trailing text but whitespace).  -EINVAL if it is not that, -ENOMEM. */
static int json_parse(const char *s, size_t n, json_object **out)
{
    if (n > INT32_MAX || memchr(s, '\0', n))
        return -EINVAL;
    /* json-c takes 'single-quoted' strings even when strict: refuse a quote outside a
     * string. */
    bool in_str = false;
    for (size_t i = 0; i < n; i++) {
        if (in_str && s[i] == '\\')
            i++;
        else if (s[i] == '"')
            in_str = !in_str;
        else if (!in_str && s[i] == '\'')
            return -EINVAL;
    }
    json_tokener *t = json_tokener_new();
    if (!t)
        return -ENOMEM;
    json_tokener_set_flags(t, JSON_TOKENER_STRICT | JSON_TOKENER_VALIDATE_UTF8);
    json_object *v = json_tokener_parse_ex(t, s, (int)n);
    enum json_tokener_error err = json_tokener_get_error(t);
    size_t used = json_tokener_get_parse_end(t);
    json_tokener_free(t);
    if (err != json_tokener_success) {
        json_object_put(v);
        return -EINVAL; /* json_tokener_continue too: the text ended inside the value */
    }
    for (; used < n; used++) {
        char c = s[used];
        if (c != ' ' && c != '\t' && c != '\n' && c != '\r') {
            json_object_put(v);
            return -EINVAL;
        }
    }
    *out = v;
    return 0;
}

/* The parsed tools of opts, each a JSON object.  *tools: n_tools references, released
 * with tools_free(). */
static int tools_parse(const struct l8chat_opts *o, json_object ***tools)
{
    json_object **t = calloc(o->n_tools ? o->n_tools : 1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    for (size_t i = 0; i < o->n_tools; i++) {
        int rc = o->tools[i] ? json_parse(o->tools[i], strlen(o->tools[i]), &t[i]) : -EINVAL;
        if (rc == 0 && !json_object_is_type(t[i], json_type_object))
            rc = -EINVAL;
        if (rc < 0) {
            for (size_t j = 0; j <= i; j++)
                json_object_put(t[j]);
            free(t);
            return rc;
        }
    }
    *tools = t;
    return 0;
}

static void tools_free(json_object **t, size_t n)
{
    if (!t)
        return;
    for (size_t i = 0; i < n; i++)
        json_object_put(t[i]);
    free(t);
}

/* The function object of a tool: its "function" when it is {"type": "function",
 * "function": {...}} (or has a "function" object and no type), else the tool itself. */
static json_object *tool_function(json_object *tool)
{
    json_object *f, *type;
    if (json_object_object_get_ex(tool, "function", &f) && json_object_is_type(f, json_type_object) &&
        (!json_object_object_get_ex(tool, "type", &type) ||
         (json_object_is_type(type, json_type_string) && !strcmp(json_object_get_string(type), "function"))))
        return f;
    return tool;
}

/* ---------------------------------------------------------------- the template */

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

/* The template's text before the tools, in the system message or the first user one. */
static const char tools_in_system_intro[] =
    "You have access to the following functions. To call a function, please respond with "
    "JSON for a function call.Respond in the format {\"name\": function name, \"parameters\": "
    "dictionary of argument name and its value}.Do not use variables.\n\n";
static const char tools_in_user_intro[] =
    "Given the following functions, please respond with a JSON for a function call with its "
    "proper arguments that best answers the given prompt.\n\nRespond in the format "
    "{\"name\": function name, \"parameters\": dictionary of argument name and its value}."
    "Do not use variables.\n\n";

/* intro, then each tool as tojson(indent=4) followed by "\n\n". */
static int add_tools(struct buf *b, const char *intro, json_object **tools, size_t n)
{
    int rc = buf_str(b, intro);
    for (size_t i = 0; i < n && rc == 0; i++)
        if ((rc = json_write(b, tools[i], 4, 0)) == 0)
            rc = buf_str(b, "\n\n");
    return rc;
}

int l8chat_encode(const l8tok *tok, const struct l8chat_msg *msgs, size_t n_msgs,
                  const struct l8chat_opts *opts, l8tok_ids *out)
{
    struct l8chat_opts def;
    if (!opts) {
        l8chat_opts_init(&def);
        opts = &def;
    }
    char date[L8CHAT_DATE_LEN];
    const char *today = opts->today_date ? opts->today_date : l8chat_default_date(date);
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
    size_t first = 0;
    if (n_msgs && msgs[0].role == L8CHAT_SYSTEM)
        first = 1;
    size_t n_tools = opts->n_tools;
    bool tools_in_user = n_tools && !opts->tools_in_system;
    if (tools_in_user && first == n_msgs)
        return -EINVAL; /* the template: "Cannot put tools in the first user message ..." */
    json_object **tools = NULL;
    int rc;
    if (n_tools && (rc = tools_parse(opts, &tools)) < 0)
        return rc;

    size_t n0 = out->n;
    struct buf b = {0};
    const char *sys = "";
    size_t sys_len = 0;
    if (first) {
        sys = msgs[0].content;
        sys_len = msgs[0].len;
        trim(&sys, &sys_len);
    }
    /* The dates and the tools are the caller's settings, not message text, but are
     * encoded with the content's flags: the reference would see them in the same piece. */
    if ((rc = l8tok_ids_push(out, sp.bos)) < 0 || (rc = buf_str(&b, "\n\n")) < 0 ||
        (n_tools && (rc = buf_str(&b, "Environment: ipython\n")) < 0) ||
        (rc = buf_str(&b, "Cutting Knowledge Date: ")) < 0 ||
        (rc = buf_str(&b, cutoff)) < 0 || (rc = buf_str(&b, "\nToday Date: ")) < 0 ||
        (rc = buf_str(&b, today)) < 0 || (rc = buf_str(&b, "\n\n")) < 0 ||
        (n_tools && !tools_in_user &&
         (rc = add_tools(&b, tools_in_system_intro, tools, n_tools)) < 0) ||
        (rc = buf_add(&b, sys, sys_len)) < 0 ||
        (rc = block(tok, &sp, "system", &b, flags, true, out)) < 0)
        goto err;
    if (tools_in_user) {
        /* The first message after the system one, whatever its role, under a user header. */
        const char *c = msgs[first].content;
        size_t cl = msgs[first].len;
        trim(&c, &cl);
        b.n = 0;
        if ((rc = buf_str(&b, "\n\n")) < 0 ||
            (rc = add_tools(&b, tools_in_user_intro, tools, n_tools)) < 0 ||
            (rc = buf_add(&b, c, cl)) < 0 ||
            (rc = block(tok, &sp, "user", &b, flags, true, out)) < 0)
            goto err;
        first++;
    }
    for (size_t i = first; i < n_msgs; i++) {
        const char *c = msgs[i].content;
        size_t cl = msgs[i].len;
        b.n = 0;
        if ((rc = buf_str(&b, "\n\n")) < 0)
            goto err;
        if (msgs[i].role == L8CHAT_IPYTHON) {
            /* A string content goes through tojson, untrimmed. */
            rc = json_write_string(&b, c, cl);
        } else {
            trim(&c, &cl);
            rc = buf_add(&b, c, cl);
        }
        if (rc < 0 || (rc = block(tok, &sp, l8chat_role_name(msgs[i].role), &b, flags, true, out)) < 0)
            goto err;
    }
    if (opts->add_generation_prompt) {
        b.n = 0;
        if ((rc = buf_str(&b, "\n\n")) < 0 ||
            (rc = block(tok, &sp, "assistant", &b, L8TOK_SPECIAL_AS_TEXT, false, out)) < 0)
            goto err;
    }
    free(b.p);
    tools_free(tools, n_tools);
    return 0;
err:
    free(b.p);
    tools_free(tools, n_tools);
    out->n = n0;
    return rc;
}

int l8chat_today(char buf[L8CHAT_DATE_LEN])
{
    static const char months[12][4] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                       "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
    time_t now = time(NULL);
    struct tm tm;
    if (now == (time_t)-1 || !localtime_r(&now, &tm) || tm.tm_mon < 0 || tm.tm_mon > 11)
        return -EIO;
    snprintf(buf, L8CHAT_DATE_LEN, "%02d %s %04d", tm.tm_mday, months[tm.tm_mon],
             tm.tm_year + 1900);
    return 0;
}

/* No date given: $LLAMA8_CHAT_DATE (a script's or a test's fixed one), else
 * today's, as Meta's templates after 3.1 write it (strftime_now("%d %b %Y")),
 * and the 3.1 template's fixed one only where the clock cannot be read. */
const char *l8chat_default_date(char buf[L8CHAT_DATE_LEN])
{
    const char *e = secure_getenv(L8CHAT_DATE_ENV);
    if (e && *e)
        return e;
    return l8chat_today(buf) == 0 ? buf : L8CHAT_DEFAULT_TODAY;
}

int l8chat_stop_ids(const l8tok *tok, const struct l8chat_opts *opts, l8tok_ids *out)
{
    uint32_t eot, eom;
    if (special_id(tok, "<|eot_id|>", &eot) < 0)
        return -EINVAL;
    /* Some Llama 3.1 tokenizer.json files (the one in tests/golden among them) keep Llama
     * 3's name <|reserved_special_token_4|> for the id 3.1 calls <|eom_id|>: the id the
     * model emits is the same, so take it by position when the name is missing. */
    if (special_id(tok, "<|eom_id|>", &eom) < 0) {
        if (eot != L8TOK_LLAMA3_EOT || !l8tok_is_special(tok, L8TOK_LLAMA3_EOM))
            return -EINVAL;
        eom = L8TOK_LLAMA3_EOM;
    }
    size_t n0 = out->n;
    int rc = l8tok_ids_push(out, eot);
    if (rc == 0 && opts && opts->n_tools)
        rc = l8tok_ids_push(out, eom);
    if (rc < 0)
        out->n = n0;
    return rc;
}

/* ---------------------------------------------------------------- tool calls */

static bool is_json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\n' || c == '\r';
}

int l8chat_parse_tool_call(const char *text, size_t len, char **name, char **arguments_json)
{
    static const char tag[] = "<|python_tag|>";
    const char *s = text, *e = text + len;
    while (s < e && is_json_space(*s))
        s++;
    if ((size_t)(e - s) >= sizeof(tag) - 1 && !memcmp(s, tag, sizeof(tag) - 1)) {
        s += sizeof(tag) - 1;
        while (s < e && is_json_space(*s))
            s++;
    }
    if (s == e || *s != '{')
        return -ENOENT;
    json_object *root = NULL, *args_parsed = NULL;
    int rc = json_parse(s, (size_t)(e - s), &root);
    if (rc < 0)
        return rc;
    json_object *nm = NULL, *params = NULL, *args = NULL;
    bool has_name = json_object_object_get_ex(root, "name", &nm);
    bool has_params = json_object_object_get_ex(root, "parameters", &params);
    bool has_args = json_object_object_get_ex(root, "arguments", &args);
    if (!has_name && !has_params && !has_args) {
        rc = -ENOENT; /* some other JSON object */
        goto out;
    }
    rc = -EINVAL;
    if (!has_name || !json_object_is_type(nm, json_type_string) || json_object_get_string_len(nm) == 0 ||
        memchr(json_object_get_string(nm), '\0', (size_t)json_object_get_string_len(nm)) ||
        has_params == has_args)
        goto out;
    json_object *a = has_params ? params : args;
    if (json_object_is_type(a, json_type_string)) {
        /* "arguments": "{...}", as OpenAI's API writes them */
        if (json_parse(json_object_get_string(a), (size_t)json_object_get_string_len(a),
                       &args_parsed) < 0)
            goto out;
        a = args_parsed;
    }
    if (!json_object_is_type(a, json_type_object))
        goto out;
    struct buf b = {0};
    char *n = strdup(json_object_get_string(nm));
    if (!n || (rc = json_write(&b, a, -1, 0)) < 0) {
        free(n);
        free(b.p);
        rc = n ? rc : -ENOMEM;
        goto out;
    }
    *name = n;
    *arguments_json = b.p;
    rc = 0;
out:
    json_object_put(args_parsed);
    json_object_put(root);
    return rc;
}

int l8chat_format_tool_call(const char *name, const char *arguments_json, char **text)
{
    json_object *args = NULL;
    int rc = json_parse(arguments_json, strlen(arguments_json), &args);
    if (rc < 0)
        return rc;
    struct buf b = {0};
    if (!json_object_is_type(args, json_type_object))
        rc = -EINVAL;
    else if ((rc = buf_str(&b, "{\"name\": \"")) == 0 && (rc = buf_str(&b, name)) == 0 &&
             (rc = buf_str(&b, "\", \"parameters\": ")) == 0 && (rc = json_write(&b, args, -1, 0)) == 0)
        rc = buf_str(&b, "}");
    json_object_put(args);
    if (rc < 0) {
        free(b.p);
        return rc;
    }
    *text = b.p;
    return 0;
}

/* One anyOf branch: {"type": "object", "properties": {"name": {"const": NAME},
 * "parameters": PARAMS}, "required": [...], "additionalProperties": false}. */
static int schema_branch(json_object *tool, json_object *any_of)
{
    json_object *f = tool_function(tool), *nm, *params;
    if (!json_object_object_get_ex(f, "name", &nm) || !json_object_is_type(nm, json_type_string) ||
        json_object_get_string_len(nm) == 0)
        return -EINVAL;
    json_object *br = json_object_new_object(), *props = json_object_new_object(),
                *cname = json_object_new_object(), *req = json_object_new_array();
    int rc = -ENOMEM;
    if (!br || !props || !cname || !req)
        goto err;
    if (json_object_object_get_ex(f, "parameters", &params) && json_object_is_type(params, json_type_object)) {
        params = json_object_get(params);
    } else {
        params = json_object_new_object();
        if (!params || json_object_object_add(params, "type", json_object_new_string("object")) < 0) {
            json_object_put(params);
            goto err;
        }
    }
    if (json_object_object_add(cname, "const", json_object_get(nm)) < 0 ||
        json_object_object_add(props, "name", cname) < 0) {
        json_object_put(params);
        goto err;
    }
    cname = NULL;
    if (json_object_object_add(props, "parameters", params) < 0 ||
        json_object_array_add(req, json_object_new_string("name")) < 0 ||
        json_object_array_add(req, json_object_new_string("parameters")) < 0 ||
        json_object_object_add(br, "type", json_object_new_string("object")) < 0 ||
        json_object_object_add(br, "properties", props) < 0)
        goto err;
    props = NULL;
    if (json_object_object_add(br, "required", req) < 0)
        goto err;
    req = NULL;
    if (json_object_object_add(br, "additionalProperties", json_object_new_boolean(0)) < 0 ||
        json_object_array_add(any_of, br) < 0)
        goto err;
    return 0;
err:
    json_object_put(br);
    json_object_put(props);
    json_object_put(cname);
    json_object_put(req);
    return rc;
}

int l8chat_tools_schema(const struct l8chat_opts *opts, char **schema)
{
    if (!opts || !opts->n_tools)
        return -EINVAL;
    json_object **tools = NULL;
    int rc = tools_parse(opts, &tools);
    if (rc < 0)
        return rc;
    json_object *root = json_object_new_object(), *any_of = json_object_new_array();
    struct buf b = {0};
    if (!root || !any_of || json_object_object_add(root, "anyOf", any_of) < 0) {
        json_object_put(any_of);
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < opts->n_tools && rc == 0; i++)
        rc = schema_branch(tools[i], any_of);
    if (rc == 0)
        rc = json_write(&b, root, -1, 0);
    if (rc == 0)
        *schema = b.p;
    else
        free(b.p);
out:
    json_object_put(root);
    tools_free(tools, opts->n_tools);
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
