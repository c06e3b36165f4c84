/* ctl_tokenize.c: `llama8ctl tokenize` and `llama8ctl detokenize`, which need only the
 * tokenizer.json; without one named, they ask a running llama8d for its model's. */
#include "ctl.h"

#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "llama8client.h"


static void tokenize_usage(FILE *f)
{
    fprintf(f,
            "Usage: llama8ctl tokenize [OPTIONS] [TEXT...]\n"
            "Encode TEXT (the arguments joined by single spaces) or, with no arguments, all of\n"
            "stdin byte for byte (a trailing newline included), and print the token ids.\n\n"
            "  -t, --tokenizer FILE   tokenizer.json or a model directory (default\n"
            "                         $LLAMA8_TOKENIZER, else $LLAMA8_MODEL, else the model\n"
            "                         of the llama8d at --socket)\n"
            "      --socket PATH      the daemon to ask (default $LLAMA8_SOCKET, else\n"
            "                         /run/llama8d/llama8d.sock)\n"
            "  -j, --json             print a JSON array instead of space-separated ids\n"
            "  -n, --no-special       special tokens written in the text are plain text\n"
            "  -c, --chat             the text is a user message: apply the Llama 3.1 chat\n"
            "                         format (with <|begin_of_text|> and generation prompt)\n"
            "  -s, --system TEXT      with --chat: a system message\n"
            "  -m, --messages         with --chat: stdin is a JSON array of\n"
            "                         {\"role\": \"system|user|assistant\", \"content\": \"...\"}\n"
            "      --date DATE        with --chat: the \"Today Date\" (default $LLAMA8_CHAT_DATE,\n"
            "                         else today's local date: \"07 Dec 2026\")\n"
            "      --no-generation-prompt  with --chat: no assistant header at the end\n"
            "  -h, --help\n\n"
            "With --chat, special tokens inside messages are always plain text.\n"
            "exit status: 0 success, 1 failure (unreadable tokenizer, invalid UTF-8: the byte\n"
            "offset is printed), 2 bad command line\n");
}

static void detokenize_usage(FILE *f)
{
    fprintf(f, "Usage: llama8ctl detokenize [OPTIONS] [ID...]\n"
               "Decode token ids (the arguments or, with none, stdin: decimal ids separated by\n"
               "spaces, newlines or commas) and write the text's exact bytes to stdout.\n\n"
               "  -t, --tokenizer FILE   tokenizer.json or a model directory (default\n"
               "                         $LLAMA8_TOKENIZER, else $LLAMA8_MODEL, else the model\n"
               "                         of the llama8d at --socket)\n"
               "      --socket PATH      the daemon to ask (default $LLAMA8_SOCKET, else\n"
               "                         /run/llama8d/llama8d.sock)\n"
               "  -j, --json             input is a JSON array of ids; print {\"text\": ...}\n"
               "                         (bytes that are not UTF-8 become U+FFFD)\n"
               "  -h, --help\n\n"
               "exit status: 0 success, 1 failure (unreadable tokenizer, an id that is not a\n"
               "token), 2 bad command line\n");
}

/* --tokenizer, the environment, or the model directory of the daemon at
 * sock (as generate finds it). */
static int load_tokenizer(const char *opt, const char *sock, l8tok **tok)
{
    const char *path = ctl_tokenizer_path(opt);
    if (path)
        return ctl_tokenizer_load(path, NULL, tok) < 0 ? CTL_FAIL : CTL_OK;
    struct l8c_client *c;
    char err[L8C_ERRLEN];
    struct l8c_connect_opts o = { .name = "llama8ctl tokenize" };
    if (l8c_connect_with(sock, &o, &c, err) < 0) {
        fprintf(stderr, "llama8ctl: no tokenizer: pass --tokenizer FILE, set LLAMA8_TOKENIZER, "
                        "or start llama8d (%s)\n", err);
        return CTL_USAGE;
    }
    int rc = ctl_tokenizer_load(l8c_info(c)->model_dir, NULL, tok);
    l8c_close(c);
    return rc < 0 ? CTL_FAIL : CTL_OK;
}

/* The arguments joined by spaces, or stdin. */
static int input_text(int argc, char **argv, char **text, size_t *len)
{
    if (optind >= argc) {
        int rc = ctl_read_stdin(text, len, 0);
        if (rc < 0)
            fprintf(stderr, "llama8ctl: reading stdin: %s\n", strerror(-rc));
        return rc;
    }
    if (!(*text = ctl_join_args(optind, argc, argv, len)))
        return -ENOMEM;
    return 0;
}

static void report_encode_error(int rc, const char *text, size_t len)
{
    size_t off = 0;
    if (rc == -EILSEQ && l8tok_utf8_check(text, len, &off) < 0)
        fprintf(stderr, "llama8ctl: input is not valid UTF-8 (byte offset %zu)\n", off);
    else
        fprintf(stderr, "llama8ctl: encode failed: %s\n", strerror(-rc));
}

static void print_ids(const l8tok_ids *ids, bool json)
{
    if (json) {
        json_object *arr = json_object_new_array_ext((int)ids->n);
        for (size_t i = 0; arr && i < ids->n; i++)
            json_object_array_add(arr, json_object_new_int64(ids->ids[i]));
        if (arr)
            puts(json_object_to_json_string_ext(arr, JSON_C_TO_STRING_PLAIN));
        json_object_put(arr);
        return;
    }
    for (size_t i = 0; i < ids->n; i++)
        printf("%s%" PRIu32, i ? " " : "", ids->ids[i]);
    putchar('\n');
}

enum { OPT_DATE = 256, OPT_NO_GEN, OPT_SOCKET };

int ctl_tokenize(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"no-special", no_argument, NULL, 'n'},
        {"chat", no_argument, NULL, 'c'},
        {"system", required_argument, NULL, 's'},
        {"messages", no_argument, NULL, 'm'},
        {"date", required_argument, NULL, OPT_DATE},
        {"no-generation-prompt", no_argument, NULL, OPT_NO_GEN},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *tok_path = NULL, *system = NULL, *date = NULL, *sock = NULL;
    bool json = false, no_special = false, chat = false, messages = false, no_gen = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:jncs:mh", opts, NULL)) != -1) {
        switch (c) {
        case 't': tok_path = optarg; break;
        case 'j': json = true; break;
        case 'n': no_special = true; break;
        case 'c': chat = true; break;
        case 's': system = optarg; break;
        case 'm': messages = true; break;
        case OPT_DATE: date = optarg; break;
        case OPT_NO_GEN: no_gen = true; break;
        case OPT_SOCKET: sock = optarg; break;
        case 'h': tokenize_usage(stdout); return CTL_OK;
        default: return ctl_usage_error(NULL);
        }
    }
    if (!chat && (system || messages || date || no_gen)) {
        fprintf(stderr, "llama8ctl: --system, --messages, --date and --no-generation-prompt need --chat\n");
        return CTL_USAGE;
    }
    if (messages && (system || optind < argc)) {
        fprintf(stderr, "llama8ctl: --messages reads every message from stdin\n");
        return CTL_USAGE;
    }

    l8tok *tok = NULL;
    int st = load_tokenizer(tok_path, sock, &tok);
    if (st != CTL_OK)
        return st;
    char *text = NULL;
    size_t len = 0;
    l8tok_ids ids = {0};
    json_object *root = NULL;
    struct l8chat_msg *msgs = NULL;
    int rc = input_text(argc, argv, &text, &len);
    if (rc < 0) {
        st = CTL_FAIL;
        goto out;
    }
    if (!chat) {
        rc = l8tok_encode(tok, text, len, no_special ? L8TOK_SPECIAL_AS_TEXT : 0, &ids);
        if (rc < 0) {
            report_encode_error(rc, text, len);
            st = CTL_FAIL;
            goto out;
        }
    } else {
        struct l8chat_opts co;
        l8chat_opts_init(&co);
        if (date)
            co.today_date = date;
        co.add_generation_prompt = !no_gen;
        size_t n = 0;
        struct l8chat_msg two[2];
        if (messages) {
            const char *bad;
            root = ctl_parse_json(text, len, &bad);
            char why[CTL_WHY_LEN];
            if (!root)
                snprintf(why, sizeof why, "not JSON: %s", bad);
            if (!root || ctl_parse_messages(root, &msgs, &n, why) < 0) {
                fprintf(stderr, "llama8ctl: --messages: stdin must be a JSON array of "
                                "{\"role\": ..., \"content\": ...}: %s\n", why);
                st = CTL_FAIL;
                goto out;
            }
        } else {
            if (system)
                two[n++] = (struct l8chat_msg){L8CHAT_SYSTEM, system, strlen(system)};
            two[n++] = (struct l8chat_msg){L8CHAT_USER, text, len};
        }
        rc = l8chat_encode(tok, msgs ? msgs : two, n, &co, &ids);
        if (rc < 0) {
            fprintf(stderr, "llama8ctl: chat format failed: %s\n",
                    rc == -EILSEQ ? "a message is not valid UTF-8" : strerror(-rc));
            st = CTL_FAIL;
            goto out;
        }
    }
    print_ids(&ids, json);
    st = fflush(stdout) == 0 ? CTL_OK : CTL_FAIL;
out:
    free(msgs);
    json_object_put(root);
    l8tok_ids_free(&ids);
    free(text);
    l8tok_free(tok);
    return st;
}

/* Decimal ids separated by whitespace or commas. */
static int parse_id_list(const char *s, l8tok_ids *ids)
{
    for (;;) {
        while (*s == ' ' || *s == '\t' || *s == '\n' || *s == '\r' || *s == ',')
            s++;
        if (!*s)
            return 0;
        if (*s < '0' || *s > '9')
            return -EINVAL;
        char *end;
        errno = 0;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || v > UINT32_MAX)
            return -EINVAL;
        if (*end && !strchr(" \t\n\r,", *end))
            return -EINVAL;
        int rc = l8tok_ids_push(ids, (uint32_t)v);
        if (rc < 0)
            return rc;
        s = end;
    }
}

static int parse_id_json(const char *text, size_t len, l8tok_ids *ids)
{
    const char *why;
    json_object *root = ctl_parse_json(text, len, &why);
    int rc = root && json_object_is_type(root, json_type_array) ? 0 : -EINVAL;
    for (size_t i = 0; rc == 0 && i < json_object_array_length(root); i++) {
        json_object *v = json_object_array_get_idx(root, i);
        int64_t x = json_object_get_int64(v);
        if (!json_object_is_type(v, json_type_int) || x < 0 || x > (int64_t)UINT32_MAX)
            rc = -EINVAL;
        else
            rc = l8tok_ids_push(ids, (uint32_t)x);
    }
    json_object_put(root);
    return rc;
}

int ctl_detokenize(int argc, char **argv)
{
    static const struct option opts[] = {
        {"tokenizer", required_argument, NULL, 't'},
        {"json", no_argument, NULL, 'j'},
        {"socket", required_argument, NULL, OPT_SOCKET},
        {"help", no_argument, NULL, 'h'},
        {0},
    };
    const char *tok_path = NULL, *sock = NULL;
    bool json = false;
    int c;
    optind = 1;
    while ((c = getopt_long(argc, argv, "t:jh", opts, NULL)) != -1) {
        switch (c) {
        case 't': tok_path = optarg; break;
        case 'j': json = true; break;
        case OPT_SOCKET: sock = optarg; break;
        case 'h': detokenize_usage(stdout); return CTL_OK;
        default: return ctl_usage_error(NULL);
        }
    }
    l8tok_ids ids = {0};
    char *text = NULL, *out = NULL;
    size_t len = 0, out_len = 0;
    l8tok_stream *stream = NULL;
    l8tok *tok = NULL;
    int st;
    int rc = input_text(argc, argv, &text, &len);
    if (rc < 0)
        return CTL_FAIL;
    rc = json ? parse_id_json(text, len, &ids) : parse_id_list(text, &ids);
    if (rc < 0) {
        fprintf(stderr, "llama8ctl: detokenize: input must be %s\n",
                json ? "a JSON array of ids" : "decimal ids separated by spaces or commas");
        st = CTL_USAGE;
        goto out;
    }
    st = load_tokenizer(tok_path, sock, &tok);
    if (st != CTL_OK)
        goto out;
    rc = l8tok_decode(tok, ids.ids, ids.n, &out, &out_len);
    if (rc < 0) {
        for (size_t i = 0; i < ids.n; i++) {
            const char *b;
            size_t bl;
            if (l8tok_token_bytes(tok, ids.ids[i], &b, &bl) < 0) {
                fprintf(stderr, "llama8ctl: id %" PRIu32 " (position %zu) is not a token\n",
                        ids.ids[i], i);
                break;
            }
        }
        st = CTL_FAIL;
        goto out;
    }
    if (!json) {
        st = fwrite(out, 1, out_len, stdout) == out_len ? CTL_OK : CTL_FAIL;
    } else {
        /* JSON strings are Unicode: go through the streaming decoder's lossy path. */
        const char *piece;
        size_t pl;
        if (l8tok_stream_new(tok, &stream) < 0) {
            st = CTL_FAIL;
            goto out;
        }
        char *lossy = NULL;
        size_t ll = 0, cap = 0;
        st = CTL_OK;
        for (size_t i = 0; i <= ids.n && st == CTL_OK; i++) {
            rc = i < ids.n ? l8tok_stream_push(stream, ids.ids[i], &piece, &pl)
                           : l8tok_stream_flush(stream, &piece, &pl);
            char *nl = rc < 0 ? NULL : realloc(lossy, cap = ll + pl + 1);
            if (!nl) {
                st = CTL_FAIL;
                break;
            }
            lossy = nl;
            memcpy(lossy + ll, piece, pl);
            ll += pl;
        }
        if (st == CTL_OK) {
            json_object *o = json_object_new_object();
            json_object_object_add(o, "text", json_object_new_string_len(lossy, (int)ll));
            puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE));
            json_object_put(o);
        }
        free(lossy);
        (void)cap;
    }
    if (fflush(stdout) != 0)
        st = CTL_FAIL;
out:
    l8tok_stream_free(stream);
    free(out);
    free(text);
    l8tok_ids_free(&ids);
    l8tok_free(tok);
    return st;
}
