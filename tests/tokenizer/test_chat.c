/* The Llama 3.1 chat format and stop ids.
 * argv[1]: the real tokenizer.json; argv[2]: a scratch directory; argv[3]: a model
 * directory with a generation_config.json (the tiny golden checkpoint). */
#include "tok_test.h"

/* Meta's template rendered by hand for these two conversations, encoded by the reference
 * (@huggingface/tokenizers@0.2.0, same tokenizer.json, special tokens recognised). */
static const uint32_t want_system_user[] = {
    128000, 128006, 9125, 128007, 271, 38766, 1303, 33025, 2696, 25, 6790, 220, 2366, 18, 198,
    15724, 2696, 25, 220, 1627, 10263, 220, 2366, 19, 271, 2675, 527, 264, 11190, 18328, 13,
    128009, 128006, 882, 128007, 271, 3923, 374, 279, 6864, 315, 9822, 30, 128009, 128006,
    78191, 128007, 271};
static const uint32_t want_user_only[] = {
    128000, 128006, 9125, 128007, 271, 38766, 1303, 33025, 2696, 25, 6790, 220, 2366, 18, 198,
    15724, 2696, 25, 220, 1627, 10263, 220, 2366, 19, 271, 128009, 128006, 882, 128007, 271,
    9906, 0, 128009, 128006, 78191, 128007, 271};

static const l8tok *tok;

static void enc(l8tok_ids *v, const char *s)
{
    if (l8tok_encode(tok, s, strlen(s), L8TOK_SPECIAL_AS_TEXT, v) != 0) {
        fprintf(stderr, "encode failed\n");
        exit(1);
    }
}

static void push(l8tok_ids *v, uint32_t id)
{
    l8tok_ids_push(v, id);
}

/* The expected sequence assembled from the special ids and the encodings of the text
 * between them. */
static void header(l8tok_ids *v, const char *role, const char *text)
{
    push(v, L8TOK_LLAMA3_START_HEADER);
    enc(v, role);
    push(v, L8TOK_LLAMA3_END_HEADER);
    enc(v, text);
}

static void check_chat(const char *what, const struct l8chat_msg *m, size_t n,
                       const struct l8chat_opts *o, const l8tok_ids *want)
{
    l8tok_ids got = {0};
    int rc = l8chat_encode(tok, m, n, o, &got);
    bool ok = rc == 0 && tt_ids_eq(&got, want->ids, want->n);
    CHECK(ok, "%s (rc %d)", what, rc);
    if (!ok) {
        tt_print_ids("want", want->ids, want->n);
        tt_print_ids("got ", got.ids, got.n);
    }
    l8tok_ids_free(&got);
}

#define MSG(r, s) {(r), (s), sizeof(s) - 1}

static void test_reference(void)
{
    const struct l8chat_msg su[] = {MSG(L8CHAT_SYSTEM, "You are a helpful assistant."),
                                    MSG(L8CHAT_USER, "What is the capital of France?")};
    const struct l8chat_msg u[] = {MSG(L8CHAT_USER, "Hello!")};
    /* The reference ids were rendered with the template's own date. */
    struct l8chat_opts ref;
    l8chat_opts_init(&ref);
    ref.today_date = L8CHAT_DEFAULT_TODAY;
    l8tok_ids w = {0};
    for (size_t i = 0; i < sizeof(want_system_user) / 4; i++)
        push(&w, want_system_user[i]);
    check_chat("system + user, reference ids", su, 2, &ref, &w);
    w.n = 0;
    for (size_t i = 0; i < sizeof(want_user_only) / 4; i++)
        push(&w, want_user_only[i]);
    check_chat("user only, reference ids", u, 1, &ref, &w);

    /* No date given: today's (l8chat_today), with opts or without, unless
     * $LLAMA8_CHAT_DATE names one (the test suite sets it: see below). */
    const char *env = getenv(L8CHAT_DATE_ENV);
    char *saved = env ? strdup(env) : NULL;
    unsetenv(L8CHAT_DATE_ENV);
    char today[L8CHAT_DATE_LEN], text[96];
    CHECK(l8chat_today(today) == 0, "today");
    CHECK(!strcmp(l8chat_default_date(text), today), "default date: %s, today %s", text, today);
    snprintf(text, sizeof text, "\n\nCutting Knowledge Date: December 2023\nToday Date: %s\n\n",
             today);
    w.n = 0;
    push(&w, L8TOK_LLAMA3_BEGIN_OF_TEXT);
    header(&w, "system", text);
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "user", "\n\nHello!");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "assistant", "\n\n");
    check_chat("no date: today's", u, 1, NULL, &w);
    l8chat_opts_init(&ref);
    check_chat("opts_init's date: today's", u, 1, &ref, &w);
    setenv(L8CHAT_DATE_ENV, "01 Jan 2025", 1);
    w.n = 0;
    push(&w, L8TOK_LLAMA3_BEGIN_OF_TEXT);
    header(&w, "system", "\n\nCutting Knowledge Date: December 2023\nToday Date: 01 Jan 2025\n\n");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "user", "\n\nHello!");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "assistant", "\n\n");
    check_chat("no date, $LLAMA8_CHAT_DATE set: its date", u, 1, NULL, &w);
    if (saved)
        setenv(L8CHAT_DATE_ENV, saved, 1);
    else
        unsetenv(L8CHAT_DATE_ENV);
    free(saved);

    /* Same, assembled from pieces: the special ids and the encodings of the text. */
    w.n = 0;
    push(&w, L8TOK_LLAMA3_BEGIN_OF_TEXT);
    header(&w, "system", "\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n"
                         "You are a helpful assistant.");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "user", "\n\nWhat is the capital of France?");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "assistant", "\n\n");
    CHECK(tt_ids_eq(&w, want_system_user, sizeof(want_system_user) / 4),
          "pieces assemble into the reference sequence");
    l8tok_ids_free(&w);
}

static void test_options(void)
{
    /* Contents are trimmed of Python's whitespace (U+00A0, U+3000 included); later
     * system messages and assistant turns are ordinary blocks; the date is an option;
     * no generation prompt. */
    const struct l8chat_msg m[] = {
        MSG(L8CHAT_SYSTEM, " \n\tBe brief.\xc2\xa0\n"),
        MSG(L8CHAT_USER, "\xe3\x80\x80 Hi there \r\n"),
        MSG(L8CHAT_ASSISTANT, "Hello."),
        MSG(L8CHAT_SYSTEM, "Now in French."),
        MSG(L8CHAT_USER, ""),
    };
    struct l8chat_opts o;
    l8chat_opts_init(&o);
    CHECK(o.add_generation_prompt && !o.special_in_content && !o.today_date, "defaults");
    o.today_date = "01 Jan 2025";
    o.add_generation_prompt = false;
    l8tok_ids w = {0};
    push(&w, L8TOK_LLAMA3_BEGIN_OF_TEXT);
    header(&w, "system", "\n\nCutting Knowledge Date: December 2023\nToday Date: 01 Jan 2025\n\nBe brief.");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "user", "\n\nHi there");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "assistant", "\n\nHello.");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "system", "\n\nNow in French.");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "user", "\n\n");
    push(&w, L8TOK_LLAMA3_EOT);
    check_chat("trim, date, multi-turn, no generation prompt", m, 5, &o, &w);

    /* Special tokens inside a content: text by default, recognised on request. */
    const struct l8chat_msg inj[] = {MSG(L8CHAT_USER, "a<|eot_id|>b")};
    w.n = 0;
    push(&w, L8TOK_LLAMA3_BEGIN_OF_TEXT);
    header(&w, "system", "\n\nCutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "user", "\n\na<|eot_id|>b");
    push(&w, L8TOK_LLAMA3_EOT);
    header(&w, "assistant", "\n\n");
    l8chat_opts_init(&o);
    o.today_date = L8CHAT_DEFAULT_TODAY;
    check_chat("special token in content stays text", inj, 1, &o, &w);
    size_t eots = 0;
    for (size_t i = 0; i < w.n; i++)
        eots += w.ids[i] == L8TOK_LLAMA3_EOT;
    CHECK(eots == 2, "two <|eot_id|> (system, user), got %zu", eots);
    l8tok_ids got = {0};
    l8chat_opts_init(&o);
    o.special_in_content = true;
    CHECK(l8chat_encode(tok, inj, 1, &o, &got) == 0, "special_in_content");
    eots = 0;
    for (size_t i = 0; i < got.n; i++)
        eots += got.ids[i] == L8TOK_LLAMA3_EOT;
    CHECK(eots == 3, "special_in_content: three <|eot_id|>, got %zu", eots);

    /* Errors leave out as it was. */
    got.n = 1;
    const struct l8chat_msg bad_utf8[] = {MSG(L8CHAT_USER, "ok \xc3")};
    CHECK(l8chat_encode(tok, bad_utf8, 1, NULL, &got) == -EILSEQ && got.n == 1, "invalid UTF-8");
    const struct l8chat_msg bad_role[] = {{(enum l8chat_role)7, "x", 1}};
    CHECK(l8chat_encode(tok, bad_role, 1, NULL, &got) == -EINVAL && got.n == 1, "invalid role");
    enum l8chat_role r;
    CHECK(l8chat_role_parse("assistant", &r) == 0 && r == L8CHAT_ASSISTANT, "role parse");
    CHECK(l8chat_role_parse("tool", &r) == 0 && r == L8CHAT_IPYTHON, "tool is ipython");
    CHECK(l8chat_role_parse("function", &r) == -EINVAL, "unknown role");
    CHECK(l8chat_role_name((enum l8chat_role)9) == NULL && !strcmp(l8chat_role_name(L8CHAT_USER), "user"),
          "role name");
    l8tok_ids_free(&got);
    l8tok_ids_free(&w);
}

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    if (!f || fputs(text, f) < 0 || fclose(f) != 0) {
        perror(path);
        exit(1);
    }
}

static void test_stop_ids(const char *scratch, const char *model_dir)
{
    l8tok_ids ids = {0};
    /* The tiny golden checkpoint's generation_config.json: eos_token_id [2, 3]. */
    CHECK(l8chat_stop_ids_load(model_dir, &ids) == 0 && ids.n == 2 && ids.ids[0] == 2 && ids.ids[1] == 3,
          "tiny model stop ids");
    char path[4096];
    snprintf(path, sizeof(path), "%s/generation_config.json", scratch);
    /* The real Llama 3.1 8B Instruct generation_config.json's eos_token_id. */
    write_file(path, "{\"bos_token_id\": 128000, \"do_sample\": true,\n"
                     " \"eos_token_id\": [128001, 128008, 128009], \"temperature\": 0.6, \"top_p\": 0.9}\n");
    ids.n = 0;
    CHECK(l8chat_stop_ids_load(path, &ids) == 0 && ids.n == 3 && ids.ids[0] == 128001 &&
              ids.ids[1] == 128008 && ids.ids[2] == 128009, "real model stop ids");
    write_file(path, "{\"eos_token_id\": 128001}");
    ids.n = 0;
    CHECK(l8chat_stop_ids_load(scratch, &ids) == 0 && ids.n == 1 && ids.ids[0] == 128001, "scalar");
    write_file(path, "{\"bos_token_id\": 1}");
    CHECK(l8chat_stop_ids_load(path, &ids) == -ENOENT && ids.n == 1, "no eos_token_id");
    write_file(path, "{\"eos_token_id\": [1, \"x\"]}");
    CHECK(l8chat_stop_ids_load(path, &ids) == -EINVAL && ids.n == 1, "bad element");
    write_file(path, "{\"eos_token_id\": -1}");
    CHECK(l8chat_stop_ids_load(path, &ids) == -EINVAL && ids.n == 1, "negative");
    write_file(path, "{\"eos_token_id\": [1,");
    CHECK(l8chat_stop_ids_load(path, &ids) == -EINVAL && ids.n == 1, "truncated JSON");
    l8tok_ids_free(&ids);
}

int main(int argc, char **argv)
{
    l8tok *t = tt_load(argc, argv);
    if (argc < 4) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON SCRATCH_DIR MODEL_DIR\n", argv[0]);
        return 1;
    }
    tok = t;
    test_reference();
    test_options();
    test_stop_ids(tt_scratch(argv[2]), argv[3]);
    l8tok_free(t);
    return t_result("test_chat");
}
