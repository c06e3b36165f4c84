/* json_strict.c - strict JSON parsing for client programs (l8_json.h).
 *
 * The text's UTF-8 is checked first (l8tok_utf8_check); json-c does the
 * parsing; what it lets through (a key given twice, an escaped NUL in a
 * key) is found by comparing the keys written in the text with the keys
 * json-c kept. */
#include "l8_json.h"

#include <limits.h>
#include <stdbool.h>
#include <string.h>

#include "llama8_tokenizer.h"

static bool json_space(char c)
{
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
}

/* Line and column (from 1, in bytes) of s[off]. */
static void locate(const char *s, size_t off, struct l8json_error *err)
{
    unsigned line = 1, col = 1;
    for (size_t i = 0; i < off; i++) {
        if (s[i] == '\n') {
            line++;
            col = 1;
        } else {
            col++;
        }
    }
    err->offset = off;
    err->line = line;
    err->column = col;
}

static json_object *fail(const char *s, size_t off, const char *why, struct l8json_error *err)
{
    locate(s, off, err);
    err->why = why;
    return NULL;
}

/* The keys written in valid JSON s[n] (strings followed by a colon); the
 * offset of the first whose text has an escaped NUL goes to *nul_at
 * (SIZE_MAX: none). */
static size_t written_keys(const char *s, size_t n, size_t *nul_at)
{
    size_t keys = 0;
    *nul_at = SIZE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (s[i] != '"')
            continue;
        size_t start = i;
        bool nul = false;
        for (i++; i < n && s[i] != '"'; i++)
            if (s[i] == '\\') {
                nul |= i + 5 < n && !memcmp(s + i + 1, "u0000", 5);
                i++;   /* the escaped character; \uXXXX's digits hold no quote */
            }
        size_t k = i + 1;
        while (k < n && json_space(s[k]))
            k++;
        if (k < n && s[k] == ':') {
            keys++;
            if (nul && *nul_at == SIZE_MAX)
                *nul_at = start;
        }
    }
    return keys;
}

/* The keys json-c kept, in o and below. */
static size_t kept_keys(json_object *o)
{
    size_t keys = 0;
    if (json_object_is_type(o, json_type_object)) {
        json_object_object_foreach(o, k, v) {
            (void)k;
            keys += 1 + kept_keys(v);
        }
    } else if (json_object_is_type(o, json_type_array)) {
        for (size_t i = 0; i < json_object_array_length(o); i++)
            keys += kept_keys(json_object_array_get_idx(o, i));
    }
    return keys;
}

/* json-c's error, in words a person sending JSON reads. */
static const char *error_words(enum json_tokener_error e)
{
    switch (e) {
    case json_tokener_error_depth: return "nested too deeply";
    case json_tokener_error_parse_eof: return "it ends too early";
    case json_tokener_error_parse_null:
    case json_tokener_error_parse_boolean: return "not a JSON word (true, false, null)";
    case json_tokener_error_parse_number: return "a malformed number";
    case json_tokener_error_parse_string: return "a bad escape in a string";
    case json_tokener_error_parse_utf8_string: return "invalid UTF-8";
    case json_tokener_error_parse_object_key_name: return "a key must be a quoted string";
    case json_tokener_error_parse_object_key_sep: return "':' expected after a key";
    case json_tokener_error_parse_object_value_sep: return "',' or '}' expected";
    case json_tokener_error_parse_array: return "',' or ']' expected";
    default: return "unexpected character";
    }
}

json_object *l8json_parse(const char *s, size_t n, struct l8json_error *err)
{
    if (n > INT_MAX)
        return fail(s, 0, "longer than 2 GiB", err);
    /* RFC 3629's UTF-8, checked here: json-c's own check lets overlong
     * forms and surrogates through. */
    size_t bad;
    if (l8tok_utf8_check(s, n, &bad) < 0)
        return fail(s, bad, "invalid UTF-8", err);
    json_tokener *jt = json_tokener_new_ex(L8JSON_MAX_DEPTH);
    if (!jt)
        return fail(s, 0, "out of memory", err);
    json_tokener_set_flags(jt, JSON_TOKENER_STRICT);
    json_object *root = json_tokener_parse_ex(jt, s, (int)n);
    enum json_tokener_error e = json_tokener_get_error(jt);
    /* A number or literal at the very end waits for more: say the text
     * ends there. */
    if (!root && e == json_tokener_continue) {
        root = json_tokener_parse_ex(jt, "", 1);
        e = json_tokener_get_error(jt);
    }
    size_t end = json_tokener_get_parse_end(jt);
    json_tokener_free(jt);
    if (end > n)
        end = n;   /* the NUL given to end a trailing number */
    if (!root && e == json_tokener_continue)
        return fail(s, n, n ? "it ends too early" : "empty", err);
    if (!root && e == json_tokener_success)   /* json-c's JSON null */
        return fail(s, 0, "it is null", err);
    if (!root)
        return fail(s, end, error_words(e), err);
    for (size_t k = end; k < n; k++)
        if (!json_space(s[k])) {
            json_object_put(root);
            return fail(s, k, "more after the value", err);
        }
    size_t nul_at;
    size_t written = written_keys(s, end, &nul_at);
    if (nul_at != SIZE_MAX) {
        json_object_put(root);
        return fail(s, nul_at, "a key with a NUL character (\\u0000)", err);
    }
    if (written != kept_keys(root)) {
        json_object_put(root);
        *err = (struct l8json_error){ .why = "a key given twice in one object" };
        return NULL;
    }
    return root;
}
