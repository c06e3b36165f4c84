/* example.c - the smallest complete libllama8client program: ask a
 * question, print the reply as it streams.
 *
 *   cc example.c $(pkg-config --cflags --libs llama8client) -o example
 *   ./example "Why is the sky blue?"
 *
 * The daemon is found at $LLAMA8_SOCKET or /run/llama8d/llama8d.sock; the
 * tokenizer, the chat format and the special tokens are the library's
 * (l8c_generate_text). The same request made with the low-level calls is
 * in the README (libllama8client). */
#include <stdio.h>

#include <llama8client.h>

static int print_piece(void *arg, const char *text, size_t len)
{
    (void)arg;
    fwrite(text, 1, len, stdout);
    fflush(stdout);
    return 0;   /* nonzero would stop the reply */
}

int main(int argc, char **argv)
{
    const char *question = argc > 1 ? argv[1] : "Hello!";
    char err[L8C_ERRLEN];
    struct l8c_client *c;
    if (l8c_connect(NULL, "example", &c, err) < 0) {
        fprintf(stderr, "example: %s\n", err);
        return 1;
    }
    struct l8c_params p;
    l8c_params_init(&p);          /* greedy, stops at the model's eos ids */
    p.max_new_tokens = 64;
    struct l8c_reply r;
    int rc = l8c_generate_text(c, question, &p, print_piece, NULL, &r);
    if (rc < 0)
        fprintf(stderr, "example: %s\n", r.message);
    else
        printf("\n");
    l8c_close(c);
    return rc < 0;
}
