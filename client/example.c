/* example.c - the smallest complete libllama8client program: chat-format a
 * question, submit it, print the reply as it streams.
 *
 *   cc example.c $(pkg-config --cflags --libs llama8client) -o example
 *   ./example "Why is the sky blue?"
 *
 * The daemon is found at $LLAMA8_SOCKET or /run/llama8d/llama8d.sock; the
 * tokenizer in the directory of the model it serves. */
#include <limits.h>
#include <stdio.h>
#include <string.h>

#include <llama8client.h>

int main(int argc, char **argv)
{
    const char *question = argc > 1 ? argv[1] : "Hello!";
    char err[L8C_ERRLEN], path[PATH_MAX];
    struct l8c_client *c = NULL;
    l8tok *tok = NULL;
    l8tok_stream *stream = NULL;
    l8tok_ids prompt = {0};
    int rc = 1;

    if (l8c_connect(NULL, "example", &c, err) < 0) {
        fprintf(stderr, "example: %s\n", err);
        return 1;
    }
    snprintf(path, sizeof(path), "%s/tokenizer.json", l8c_info(c)->model_dir);
    struct l8chat_msg msg = { L8CHAT_USER, question, strlen(question) };
    if (l8tok_load(path, &tok) < 0 || l8chat_encode(tok, &msg, 1, NULL, &prompt) < 0
        || l8tok_stream_new(tok, &stream) < 0) {
        fprintf(stderr, "example: cannot load or use %s\n", path);
        goto out;
    }

    struct l8c_params p;
    l8c_params_init(&p);          /* greedy, stops at the model's eos ids */
    p.max_new_tokens = 64;
    uint64_t id;
    if (l8c_submit(c, prompt.ids, (uint32_t)prompt.n, &p, &id) < 0) {
        fprintf(stderr, "example: %s\n", l8c_last_error(c, NULL));
        goto out;
    }

    for (;;) {
        struct l8_event ev[64];
        int n = l8c_wait_events(c, ev, 64, -1);
        if (n < 0) {
            fprintf(stderr, "example: %s\n", l8c_last_error(c, NULL));
            goto out;
        }
        for (int i = 0; i < n; i++) {
            const char *text;
            size_t len;
            if (ev[i].kind == L8_EV_TOKEN && !l8tok_is_special(tok, ev[i].token)
                && l8tok_stream_push(stream, ev[i].token, &text, &len) == 0) {
                fwrite(text, 1, len, stdout);
                fflush(stdout);
            } else if (ev[i].kind == L8_EV_ERROR) {
                char why[L8C_ERRLEN];
                fprintf(stderr, "example: %s: %s\n", l8c_err_name(ev[i].code),
                        l8c_error_text(&ev[i], why));
                goto out;
            } else if (ev[i].kind == L8_EV_DONE) {
                const char *tail;
                size_t tail_len;
                if (l8tok_stream_flush(stream, &tail, &tail_len) == 0)
                    fwrite(tail, 1, tail_len, stdout);
                printf("\n");
                rc = 0;
                goto out;
            }
        }
    }
out:
    l8tok_stream_free(stream);
    l8tok_ids_free(&prompt);
    l8tok_free(tok);
    l8c_close(c);
    return rc;
}
