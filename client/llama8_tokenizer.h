/* llama8_tokenizer.h: text <-> token ids for Llama 3.x, the Llama 3.1 chat format,
 * a streaming decoder and stop strings.  Part of libllama8client (pkg-config: llama8client).
 *
 * The tokenizer reads a Hugging Face tokenizer.json (byte-level BPE with merge ranks,
 * "ignore_merges", added/special tokens, the Split-regex + ByteLevel pre-tokenizer) and
 * gives exactly the ids Hugging Face's tokenizer gives for it.
 *
 * Conventions (the whole library):
 * - Functions return 0 or a negative errno; out-parameters come last and are left
 *   untouched on failure.  Nothing here prints or exits.
 * - Text is a (pointer, byte length) pair; it need not be NUL-terminated and may contain
 *   NUL bytes.  Encoders never read past text + len.
 * - *_free(NULL) is a no-op.
 *
 * Threads: an l8tok is immutable after l8tok_load() except for an internal word cache that
 * is guarded by a lock (a thread that finds it busy encodes without it), so one l8tok may
 * be shared by any number of threads.  An l8tok_stream and an l8tok_ids belong to one
 * thread at a time.
 */
#ifndef LLAMA8_TOKENIZER_H
#define LLAMA8_TOKENIZER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Special ids of the Llama 3.x tokenizer; the chat format looks them up by name in the
 * loaded file and these constants are only for readers and tests. */
#define L8TOK_LLAMA3_BEGIN_OF_TEXT   128000u
#define L8TOK_LLAMA3_END_OF_TEXT     128001u
#define L8TOK_LLAMA3_START_HEADER    128006u
#define L8TOK_LLAMA3_END_HEADER      128007u
#define L8TOK_LLAMA3_EOM             128008u
#define L8TOK_LLAMA3_EOT             128009u

/* ---------------------------------------------------------------- id vectors */

/* A growable array of token ids.  Zero-initialise it ({0}) before first use; the caller
 * owns the struct, the library owns nothing in it.  Functions that append (encode, chat)
 * leave ->n as it was when they fail.  Release ->ids with l8tok_ids_free(). */
typedef struct l8tok_ids {
    uint32_t *ids; /* (cap) malloc'd; the first n are valid */
    size_t n;
    size_t cap;
} l8tok_ids;

/* Append one id.  -ENOMEM on allocation failure. */
int l8tok_ids_push(l8tok_ids *v, uint32_t id);
/* Free v->ids and zero the struct (the struct itself is the caller's).  NULL is a no-op. */
void l8tok_ids_free(l8tok_ids *v);

/* ---------------------------------------------------------------- the tokenizer */

typedef struct l8tok l8tok;

/* The largest tokenizer.json l8tok_load reads (Llama 3's is 9 MB). */
#define L8TOK_MAX_FILE (256u << 20)

/* Load a tokenizer.json.  path is the file, or a model directory that holds one.
 * Errors: -ENOENT/-EACCES/... from opening, -EINVAL for a file that is not a regular one
 * (a FIFO, a device or a socket: refused at once, never read), for malformed JSON or a
 * vocabulary or merge that does not parse, -EISDIR, -EFBIG for one over L8TOK_MAX_FILE,
 * -EIO for one that changed size while read, -ENOTSUP for a tokenizer.json outside what is implemented (a
 * model other than byte-level BPE, a normalizer, dropout, added tokens with
 * lstrip/rstrip/single_word, a pre-tokenizer other than Split(regex, Isolated) followed by
 * ByteLevel), -ENOMEM.  On success *out is the caller's; release it with l8tok_free().
 *
 * Table cache: parsing a large tokenizer.json (the real one: about half a second) is done
 * once; the built tables are kept in $LLAMA8_TOKENIZER_CACHE (a directory; "off", "0" or
 * empty: no cache), else $XDG_CACHE_HOME/llama8, else $HOME/.cache/llama8, one file per
 * tokenizer.json contents (about 15 MB for Llama 3), and later loads read them (tens of
 * milliseconds).  The tokenizer.json is still read and hashed on every load, so an edited
 * file is never answered from an old cache; a damaged or foreign cache file is ignored
 * and rewritten; a cache directory that cannot be written is no error.  Files under 1 MiB
 * are not cached. */
int l8tok_load(const char *path, l8tok **out);
void l8tok_free(l8tok *tok);

/* One more than the largest id (128256 for Llama 3.x).  Some ids below it may be unused. */
uint32_t l8tok_n_ids(const l8tok *tok);

/* The exact bytes of one token, borrowed from tok (valid until l8tok_free).  Special
 * tokens give their text ("<|eot_id|>").  -EINVAL if id is not a token. */
int l8tok_token_bytes(const l8tok *tok, uint32_t id, const char **bytes, size_t *len);

/* The id of the token whose text is exactly (text, len): a vocabulary entry (in raw
 * bytes, not the byte-level alphabet) or an added token.  -ENOENT if there is none. */
int l8tok_token_id(const l8tok *tok, const char *text, size_t len, uint32_t *id);

/* True if id is an added token marked "special" (<|begin_of_text|>, <|eot_id|>, ...). */
bool l8tok_is_special(const l8tok *tok, uint32_t id);

/* Every token's bytes as one table, for code that works on them (constrained decoding:
 * llama8d's masks).  Ids [0, n): id i's bytes are (*bytes)[(*off)[i] .. (*off)[i + 1]);
 * (*special)[i] is true for special tokens and for ids without bytes (past l8tok_n_ids,
 * as a model's padded vocabulary has, or unused).  The three arrays are malloc'd, the
 * caller's.  0, -EINVAL (a table over 4 GiB), or -ENOMEM (nothing to free then). */
int l8tok_table(const l8tok *tok, uint32_t n, uint8_t **bytes, uint32_t **off, bool **special);

/* Checks that (s, len) is well-formed UTF-8 (RFC 3629: no overlong forms, no surrogates,
 * nothing above U+10FFFF, no truncated sequence at the end).  0 if it is; otherwise
 * -EILSEQ and, if bad_offset is not NULL, the byte offset of the first byte of the first
 * ill-formed sequence. */
int l8tok_utf8_check(const char *s, size_t len, size_t *bad_offset);

enum l8tok_encode_flags {
    L8TOK_ENCODE_DEFAULT = 0,
    /* Special tokens written literally in the text ("<|eot_id|>") are encoded as ordinary
     * text instead of as their special id.  Use it for untrusted text. */
    L8TOK_SPECIAL_AS_TEXT = 1u << 0,
    /* Same ids, slower: run PCRE2 on every piece instead of the ASCII fast path.  For
     * tests that check the fast path against the regex. */
    L8TOK_ENCODE_REGEX_ONLY = 1u << 1,
};

/* Encode (text, len) and append the ids to out.  No <|begin_of_text|> is added (as Hugging
 * Face's add_special_tokens=false).  Added tokens in the text are recognised first
 * (leftmost, then longest), unless flags has L8TOK_SPECIAL_AS_TEXT (non-special added
 * tokens are always recognised; Llama 3 has none).
 * Invalid UTF-8: the whole call fails with -EILSEQ and appends nothing; call
 * l8tok_utf8_check() for the offset.  Other errors: -EINVAL (unknown flag), -ENOMEM. */
int l8tok_encode(const l8tok *tok, const char *text, size_t len, unsigned flags,
                 l8tok_ids *out);

/* Decode ids into their exact bytes, concatenated: no space cleanup, special tokens as
 * their text.  decode(encode(x)) == x for every valid UTF-8 x.  The result may be invalid
 * UTF-8 when the ids cut a character (use l8tok_stream for display).  On success *text is
 * a malloc'd buffer of *len bytes plus a terminating NUL, the caller's to free().
 * -EINVAL (nothing allocated) if any id is not a token; -ENOMEM. */
int l8tok_decode(const l8tok *tok, const uint32_t *ids, size_t n, char **text, size_t *len);

/* ---------------------------------------------------------------- streaming decoder */

/* Turns ids arriving one at a time into text that is always whole UTF-8 characters: the
 * bytes of a character split across tokens are held back until the rest arrives.
 * Bytes that can never form a character are replaced by U+FFFD (EF BF BD), one per
 * maximal ill-formed subsequence (the Unicode / WHATWG rule, as Python's and Rust's lossy
 * decoders do), as soon as they are known to be ill-formed; l8tok_stream_flush() turns a
 * character still incomplete at the end into one U+FFFD.  So the concatenation of every
 * push and the flush is the lossy UTF-8 decoding of l8tok_decode()'s bytes, and equals
 * them exactly when those bytes are valid UTF-8. */
typedef struct l8tok_stream l8tok_stream;

/* tok is borrowed and must outlive the stream. */
int l8tok_stream_new(const l8tok *tok, l8tok_stream **out);
void l8tok_stream_free(l8tok_stream *s);
/* Add one id.  *text and *len: the text now complete (possibly empty), borrowed from the stream
 * and valid until the next call on it; NUL-terminated.  -EINVAL for an id that is not a
 * token (the stream is unchanged), -ENOMEM. */
int l8tok_stream_push(l8tok_stream *s, uint32_t id, const char **text, size_t *len);
/* End of the stream: whatever is held back, as U+FFFD.  The stream is then empty and can
 * be reused.  Same ownership of *text as push. */
int l8tok_stream_flush(l8tok_stream *s, const char **text, size_t *len);
/* Drop anything held back. */
void l8tok_stream_reset(l8tok_stream *s);

/* ---------------------------------------------------------------- stop strings */

/* Stop strings over streamed text (the pieces l8tok_stream gives): text is passed through
 * as it arrives, except a tail that could be the start of a stop string, which is held
 * back until the next piece says whether it is one.  When a stop string is complete, the
 * text before it is released and nothing after it ever is: the caller cancels the request
 * (l8c_cancel).  The earliest stop string in the text wins.  Stop strings are bytes
 * (normally UTF-8; then the released text is whole characters whenever the input is). */
typedef struct l8tok_stop l8tok_stop;

/* n stop strings, each a non-empty NUL-terminated string, copied.  -EINVAL for an empty
 * one, -ENOMEM. */
int l8tok_stop_new(const char *const *stops, size_t n, l8tok_stop **out);
void l8tok_stop_free(l8tok_stop *s);
/* Add a piece of text.  *text and *len: the text now released (possibly empty), borrowed
 * from the matcher until the next call on it; NUL-terminated.  Returns 1 when a stop
 * string has been found (then and on every later push, with nothing more released), 0
 * otherwise, -ENOMEM. */
int l8tok_stop_push(l8tok_stop *s, const char *piece, size_t n, const char **text,
                    size_t *len);
/* The stream ended without a stop string: whatever is held back.  Same ownership as
 * push. */
int l8tok_stop_flush(l8tok_stop *s, const char **text, size_t *len);
/* Whether a stop string was found since the last reset. */
bool l8tok_stop_done(const l8tok_stop *s);
/* Forget the text and the match, for the next request. */
void l8tok_stop_reset(l8tok_stop *s);

/* ---------------------------------------------------------------- chat format */

enum l8chat_role {
    L8CHAT_SYSTEM,
    L8CHAT_USER,
    L8CHAT_ASSISTANT,
    /* A tool's result, for the turn after a tool call ("tool" in OpenAI-style messages;
     * the template renders both as ipython). */
    L8CHAT_IPYTHON,
};

/* One message; content is (content, len) bytes, borrowed for the call. */
struct l8chat_msg {
    enum l8chat_role role;
    const char *content;
    size_t len;
};

/* The Llama 3.1 template's own date_string: what l8chat_encode writes when no date is
 * given and the clock cannot be read (reference conversations rendered by that template
 * pass it as opts->today_date). */
#define L8CHAT_DEFAULT_TODAY "26 Jul 2024"
#define L8CHAT_DEFAULT_KNOWLEDGE "December 2023"

struct l8chat_opts {
    const char *today_date;        /* "Today Date: ..." line; NULL: l8chat_default_date()'s */
    const char *knowledge_cutoff;  /* NULL: L8CHAT_DEFAULT_KNOWLEDGE */
    bool add_generation_prompt;    /* end with the assistant header (default true) */
    /* Recognise special tokens written inside message contents, as rendering the template
     * to a string and encoding it would.  Default false: contents are plain text, so a
     * user cannot forge headers or <|eot_id|>. */
    bool special_in_content;
    /* Custom tools (JSON-based tool calling, Meta's template with tools): n_tools JSON
     * texts, each NUL-terminated and borrowed for the call, each either an OpenAI-style
     * {"type": "function", "function": {"name", "description", "parameters"}} or the bare
     * function object; rendered as the template renders whatever object it is given.
     * n_tools == 0: no tools (tools may be NULL). */
    const char *const *tools;
    size_t n_tools;
    /* Tools in the system message (the template's tools_in_user_message = false) instead
     * of the first user message (its default). */
    bool tools_in_system;
};

/* Defaults: today_date NULL (l8chat_default_date(), read at each l8chat_encode), cutoff
 * L8CHAT_DEFAULT_KNOWLEDGE, generation prompt on, specials in contents as text, no tools. */
void l8chat_opts_init(struct l8chat_opts *opts);

/* Render messages with Meta's Llama 3.1 template (tokenizer_config.json of
 * Llama-3.1-8B-Instruct) and append the ids to out.  Without tools:
 *   <|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\n
 *   Cutting Knowledge Date: {cutoff}\nToday Date: {today}\n\n{system message}<|eot_id|>
 *   then per message <|start_header_id|>{role}<|end_header_id|>\n\n{content}<|eot_id|>
 *   then, if asked, <|start_header_id|>assistant<|end_header_id|>\n\n
 * A first message with role system becomes the system message (there is always a system
 * block); later system messages render as ordinary blocks, as the template does.  Contents
 * are trimmed of leading and trailing whitespace (Python's str.strip set, as Jinja's trim).
 *
 * With tools (opts->n_tools > 0) the system text starts "Environment: ipython\n", and the
 * first message after the system message (whatever its role) becomes
 *   <|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please
 *   respond with a JSON for a function call with its proper arguments that best answers
 *   the given prompt.\n\nRespond in the format {"name": function name, "parameters":
 *   dictionary of argument name and its value}.Do not use variables.\n\n
 *   {tool 1}\n\n{tool 2}\n\n...{its content}<|eot_id|>
 * (-EINVAL if there is no such message, as the template raises), each tool written as
 * Python's json.dumps(tool, indent=4, ensure_ascii=False) writes it (the template's
 * tojson(indent=4) in transformers): keys in the given order, floats as Python's repr.
 * tools_in_system puts "You have access to the following functions. To call a function,
 * please respond with JSON for a function call.Respond in the format ...Do not use
 * variables.\n\n{tools}" before the system message instead, and the first message is
 * ordinary.  Tool texts are encoded with the contents' flags.
 *
 * An ipython message renders as <|start_header_id|>ipython<|end_header_id|>\n\n{content
 * as a JSON string}<|eot_id|>: not trimmed, and quoted and escaped by tojson, because
 * the template sends a string content through tojson (a Jinja string "is iterable").
 * An assistant turn that was a tool call is an assistant message whose content is
 * l8chat_format_tool_call()'s text (what the template writes for tool_calls).
 * opts may be NULL for the defaults.  Errors: -EINVAL (bad role, a tool that is not a
 * JSON object, tools in the user message without a message for them, a tokenizer without
 * the Llama 3 header tokens), -EILSEQ (a content that is not UTF-8), -ENOMEM. */
int l8chat_encode(const l8tok *tok, const struct l8chat_msg *msgs, size_t n_msgs,
                  const struct l8chat_opts *opts, l8tok_ids *out);

/* "system" / "user" / "assistant" / "ipython" (or "tool") -> role; -EINVAL otherwise. */
int l8chat_role_parse(const char *name, enum l8chat_role *role);
/* role -> "system" / "user" / "assistant" / "ipython"; NULL for an invalid role. */
const char *l8chat_role_name(enum l8chat_role role);

/* Room for a date as the template writes it ("26 Jul 2024"). */
#define L8CHAT_DATE_LEN 16
/* Today's local date as "DD Mon YYYY" (strftime's "%d %b %Y" in the C locale, which
 * Llama 3.2's template uses for its date_string).  -EIO if the clock or the time zone
 * cannot be read. */
int l8chat_today(char buf[L8CHAT_DATE_LEN]);
/* Where a fixed "Today Date" for every conversation without one may be set (scripts that
 * want the same prompt, and its prefix cache, every day; the test suite). */
#define L8CHAT_DATE_ENV "LLAMA8_CHAT_DATE"
/* The date l8chat_encode writes when opts->today_date is NULL, the one place that
 * default comes from: $LLAMA8_CHAT_DATE when set and not empty, else l8chat_today()'s
 * (in buf), else (no clock) L8CHAT_DEFAULT_TODAY.  The text is valid until the
 * environment or buf changes. */
const char *l8chat_default_date(char buf[L8CHAT_DATE_LEN]);

/* Append the ids that end an assistant turn under opts: <|eot_id|>, and <|eom_id|> too
 * when opts has tools (the model may end a tool call with it).  A file that keeps Llama
 * 3's name for id 128008 (<|reserved_special_token_4|>, as some Llama 3.1 tokenizer.json
 * copies do) gives that id when <|eot_id|> is 128009.  -EINVAL for a tokenizer without
 * them, -ENOMEM. */
int l8chat_stop_ids(const l8tok *tok, const struct l8chat_opts *opts, l8tok_ids *out);

/* ---------------------------------------------------------------- tool calls */

/* A reply (text, len) as the tool call Llama 3.1 writes for JSON custom tools:
 *   {"name": "NAME", "parameters": {...}}
 * ("arguments" is taken as a synonym of "parameters"; a string holding a JSON object is
 * taken as that object), with any whitespace around it and optionally a leading
 * <|python_tag|>.  On success *name (NUL-terminated, the caller's to free()) and
 * *arguments_json (the arguments object as compact JSON, in Python's json.dumps form with
 * ", " and ": ", the caller's to free()).  Other members of the object are ignored.
 * -ENOENT: the reply is not a tool call (it does not start with '{', or it is a JSON
 * object with neither "name" nor "parameters"/"arguments"), -EINVAL: it is a malformed
 * one (JSON that does not parse, text after the object, invalid UTF-8, a NUL byte, a
 * name that is not a non-empty string, arguments missing or not an object, both
 * "parameters" and "arguments"), -ENOMEM.  The name is not checked against the tools. */
int l8chat_parse_tool_call(const char *text, size_t len, char **name, char **arguments_json);

/* The text of an assistant turn that called a tool, as the template writes a message with
 * tool_calls: {"name": "NAME", "parameters": ARGUMENTS} with ARGUMENTS (a JSON object
 * text) in Python's json.dumps form and the name as it is (the template concatenates it
 * unescaped).  *text is the caller's to free().  -EINVAL if arguments_json is not a JSON
 * object, -ENOMEM. */
int l8chat_format_tool_call(const char *name, const char *arguments_json, char **text);

/* tool_choice = required: a JSON Schema (malloc'd in *schema, NUL-terminated) that only a
 * call of one of opts' tools satisfies:
 *   {"anyOf": [{"type": "object", "properties": {"name": {"const": NAME},
 *     "parameters": PARAMS}, "required": ["name", "parameters"],
 *     "additionalProperties": false}, ...]}
 * one branch per tool in order, PARAMS the tool's "parameters" object or {"type":
 * "object"} when it has none.  For the daemon's JSON Schema constraint.  -EINVAL for no
 * tools or a tool that is not a JSON object with a non-empty string "name" (in it or in
 * its "function"), -ENOMEM. */
int l8chat_tools_schema(const struct l8chat_opts *opts, char **schema);

/* Append the stop ids (eos_token_id, a number or an array) from generation_config.json.
 * path is the file or the model directory holding it.  Errors: from opening, -EINVAL if
 * the file or the key is malformed, -ENOENT if it has no eos_token_id, -ENOMEM. */
int l8chat_stop_ids_load(const char *path, l8tok_ids *out);

#ifdef __cplusplus
}
#endif

#endif /* LLAMA8_TOKENIZER_H */
