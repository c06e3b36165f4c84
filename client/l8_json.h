/* l8_json.h - JSON that a client program takes from people (request bodies,
 * --messages, tool files), parsed strictly with json-c. Part of
 * libllama8client, not installed: for llama8ctl and llama8-openai.
 *
 * Strict means: RFC 8259 only (no comments, no trailing commas, no single
 * quotes), valid UTF-8 everywhere (RFC 3629: no overlong forms, no
 * surrogates; so whatever is echoed back is valid too), one
 * value and nothing after it but white space, no key given twice in an
 * object (json-c would keep one silently) and no key holding an escaped NUL
 * (json-c keeps keys as C strings: "max_tokens\u0000x" would read as
 * max_tokens). */
#pragma once
#include <stddef.h>

#include <json-c/json.h>

/* Where and why a text is not strict JSON. line and column count from 1
 * (the column in bytes); both 0 when the fault has no one place (a key
 * given twice, found by counting). */
struct l8json_error {
    size_t offset;
    unsigned line, column;
    const char *why;   /* static text: json-c's reason, or ours */
};

/* The JSON nesting l8json_parse takes: deeper is refused. */
#define L8JSON_MAX_DEPTH 64

/* s[0..n) as one JSON value (the caller's: json_object_put), or NULL with
 * *err said. */
json_object *l8json_parse(const char *s, size_t n, struct l8json_error *err);
