// test_cxx.cc - libllama8client from C++17, as an editor or a Qt tool uses
// it: built by test_cxx.sh with g++ -std=c++17 -Wall -Wextra -pedantic
// -Werror against the installed headers and pkg-config only, then run
// against a llama8d on the synthetic tiny model with the real tokenizer.
//
//   test_cxx SOCKET QUESTION
//
// One question asked twice: with the low-level calls (the chat format from
// llama8_tokenizer.h, l8c_submit, the events of llama8_event.h to DONE),
// then with l8c_generate_text; both replies must be the same text (greedy,
// 24 new tokens), which goes to stdout for the script to compare with
// llama8ctl generate's. A prompt with a token id past the vocabulary must
// come back as an ERROR event that l8c_err_name and l8c_error_text read.
// Everything else goes to stderr.
#include <llama8client.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

namespace {

constexpr uint32_t kMaxNew = 24;

[[noreturn]] void fail(const std::string &why)
{
    std::fprintf(stderr, "FAIL: %s\n", why.c_str());
    std::exit(1);
}

struct ClientCloser {
    void operator()(l8c_client *c) const { l8c_close(c); }
};
using Client = std::unique_ptr<l8c_client, ClientCloser>;

// Every event of request id up to its DONE or ERROR (the last one).
std::vector<l8_event> events_of(l8c_client *c, uint64_t id)
{
    std::vector<l8_event> got;
    for (;;) {
        l8_event ev[16];
        int n = l8c_wait_events(c, ev, 16, 30000);
        if (n < 0)
            fail(std::string("l8c_wait_events: ") + l8c_last_error(c, nullptr));
        if (n == 0)
            fail("no event in 30 s");
        for (int i = 0; i < n; i++) {
            if (ev[i].request_id != id)
                continue;
            got.push_back(ev[i]);
            if (ev[i].kind == L8_EV_DONE || ev[i].kind == L8_EV_ERROR)
                return got;
        }
    }
}

// The low-level calls: chat-encode, submit, read TOKEN events to DONE, and
// decode the reply's ordinary tokens.
std::string ask_low_level(l8c_client *c, const char *question)
{
    const l8tok *tok = l8c_tokenizer(c);
    if (!tok)
        fail(std::string("l8c_tokenizer: ") + l8c_last_error(c, nullptr));
    l8chat_msg m{L8CHAT_USER, question, std::strlen(question)};
    l8tok_ids prompt{};
    if (l8chat_encode(tok, &m, 1, nullptr, &prompt) < 0 || prompt.n == 0)
        fail("l8chat_encode");
    l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = kMaxNew;
    uint64_t id = 0;
    int rc = l8c_submit(c, prompt.ids, static_cast<uint32_t>(prompt.n), &p, &id);
    if (rc < 0)
        fail(std::string("l8c_submit: ") + std::strerror(-rc));

    std::vector<uint32_t> tokens;
    bool started = false;
    const std::vector<l8_event> evs = events_of(c, id);
    for (const l8_event &e : evs) {
        switch (e.kind) {
        case L8_EV_STARTED:
            started = true;
            if (e.token != prompt.n)
                fail("STARTED says " + std::to_string(e.token) + " prompt tokens, not " +
                     std::to_string(prompt.n));
            break;
        case L8_EV_TOKEN:
            if (e.index != tokens.size())
                fail("TOKEN index " + std::to_string(e.index) + " out of order");
            tokens.push_back(e.token);
            break;
        case L8_EV_WAITING:
            break;
        case L8_EV_ERROR: {
            char buf[L8C_ERRLEN];
            fail(std::string("ERROR ") + l8c_err_name(e.code) + ": " + l8c_error_text(&e, buf));
        }
        default:
            break;
        }
    }
    const l8_event &done = evs.back();
    if (!started || done.kind != L8_EV_DONE || done.index != tokens.size() || tokens.empty())
        fail("no STARTED, TOKENs and a DONE counting them");
    if (done.reason != L8_DONE_EOS && done.reason != L8_DONE_LENGTH)
        fail(std::string("DONE reason ") + l8c_done_name(done.reason));
    std::fprintf(stderr, "low level: %zu prompt tokens, %zu generated (%s):", prompt.n,
                 tokens.size(), l8c_done_name(done.reason));
    std::vector<uint32_t> text_ids;
    for (uint32_t t : tokens) {
        std::fprintf(stderr, " %u", t);
        if (!l8tok_is_special(tok, t))
            text_ids.push_back(t);
    }
    std::fprintf(stderr, "\n");
    l8tok_ids_free(&prompt);

    char *text = nullptr;
    size_t len = 0;
    if (l8tok_decode(tok, text_ids.data(), text_ids.size(), &text, &len) < 0)
        fail("l8tok_decode");
    std::string reply(text, len);
    std::free(text);
    return reply;
}

// A token id past the vocabulary: refused before sending by
// l8c_check_request, and by the daemon with an ERROR event naming it.
void ask_bad_token(l8c_client *c)
{
    const struct l8c_info *in = l8c_info(c);
    const uint32_t prompt[] = {1, in->vocab_size};
    l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = 4;
    char why[L8C_ERRLEN];
    if (l8c_check_request(c, prompt, 2, &p, why) != L8_ERR_BAD_TOKEN)
        fail("l8c_check_request took a token id past the vocabulary");
    uint64_t id = 0;
    if (l8c_submit(c, prompt, 2, &p, &id) < 0)
        fail(std::string("l8c_submit: ") + l8c_last_error(c, nullptr));
    const l8_event e = events_of(c, id).back();
    if (e.kind != L8_EV_ERROR || e.code != L8_ERR_BAD_TOKEN || e.reason != L8_EF_PROMPT_ID ||
        e.token != in->vocab_size || e.index != in->vocab_size)
        fail("no ERROR BAD_TOKEN event for the prompt id " + std::to_string(in->vocab_size));
    char buf[L8C_ERRLEN];
    const std::string name = l8c_err_name(e.code), text = l8c_error_text(&e, buf);
    if (name != "BAD_TOKEN" || text.find(std::to_string(in->vocab_size)) == std::string::npos)
        fail("l8c_err_name / l8c_error_text: " + name + ": " + text);
    std::fprintf(stderr, "refused: %s: %s (check: %s)\n", name.c_str(), text.c_str(), why);
}

// The one-call layer: each piece of text through a captureless lambda.
std::string ask_text(l8c_client *c, const char *question)
{
    std::string reply;
    l8c_params p;
    l8c_params_init(&p);
    p.max_new_tokens = kMaxNew;
    l8c_reply r;
    int rc = l8c_generate_text(
        c, question, &p,
        [](void *arg, const char *text, size_t len) -> int {
            static_cast<std::string *>(arg)->append(text, len);
            return 0;
        },
        &reply, &r);
    if (rc < 0)
        fail(std::string("l8c_generate_text: ") + r.message);
    std::fprintf(stderr, "text: %u prompt tokens, %u generated (%s)\n", r.prompt_tokens,
                 r.tokens, l8c_done_name(r.reason));
    return reply;
}

} // namespace

int main(int argc, char **argv)
{
    if (argc != 3) {
        std::fprintf(stderr, "usage: test_cxx SOCKET QUESTION\n");
        return 2;
    }
    static_assert(sizeof(l8_event) == 32, "the event record seen from C++");
    char err[L8C_ERRLEN];
    l8c_client *raw = nullptr;
    if (l8c_connect(argv[1], "test_cxx", &raw, err) < 0)
        fail(std::string("l8c_connect: ") + err);
    Client c(raw);
    const struct l8c_info *in = l8c_info(c.get());
    if (in->protocol_version != L8_PROTO_VERSION)
        fail("protocol version " + std::to_string(in->protocol_version));
    std::fprintf(stderr, "connected: %s (%s), vocabulary %u\n", in->model_name, in->backend,
                 in->vocab_size);

    const std::string low = ask_low_level(c.get(), argv[2]);
    ask_bad_token(c.get());
    const std::string text = ask_text(c.get(), argv[2]);
    if (low != text)
        fail("the low-level reply \"" + low + "\" is not l8c_generate_text's \"" + text + "\"");
    std::printf("%s\n", text.c_str());
    return 0;
}
