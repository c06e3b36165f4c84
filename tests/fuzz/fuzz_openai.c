/* fuzz_openai.c - an OpenAI request body from an HTTP client
 * (client/openai/openai_request.c): the input is the body, parsed as both
 * endpoints'. Refused: -EINVAL with a 400 or -ENOMEM with a 500, a message
 * and a param in valid UTF-8 (they are sent back as JSON), *out untouched.
 * Taken: a request the daemon can be asked for: a prompt, values in
 * OpenAI's ranges, the constraint's kind and text agreeing, the tools'
 * schema JSON. */
#include "fuzz.h"

#include <errno.h>
#include <string.h>

#include "l8_json.h"
#include "openai_request.h"

static void check_refusal(int rc, const struct oai_error *e, const struct oai_request *r)
{
    FUZZ_CHECK((rc == -EINVAL && e->status == 400) || (rc == -ENOMEM && e->status == 500));
    FUZZ_CHECK(e->type && e->type[0]);
    FUZZ_CHECK(memchr(e->message, 0, sizeof e->message) && e->message[0]);
    FUZZ_CHECK(memchr(e->param, 0, sizeof e->param));
    FUZZ_CHECK(l8tok_utf8_check(e->message, strlen(e->message), NULL) == 0);
    FUZZ_CHECK(l8tok_utf8_check(e->param, strlen(e->param), NULL) == 0);
    FUZZ_CHECK(r->endpoint == (enum oai_endpoint)77);   /* untouched */
}

static void check_prompt(enum oai_endpoint ep, const struct oai_request *r)
{
    if (ep == OAI_CHAT) {
        FUZZ_CHECK(r->n_msgs >= 1 && r->n_msgs <= OAI_MAX_MESSAGES && !r->prompt &&
                   !r->prompt_ids);
        for (size_t i = 0; i < r->n_msgs; i++)
            FUZZ_CHECK(r->msgs[i].content && l8chat_role_name(r->msgs[i].role));
        return;
    }
    FUZZ_CHECK(!r->n_msgs && !r->n_tools && !r->constraint);
    FUZZ_CHECK((r->prompt != NULL) != (r->prompt_ids != NULL));
    FUZZ_CHECK(!r->prompt_ids || (r->n_prompt_ids >= 1 && r->n_prompt_ids <= OAI_MAX_PROMPT_IDS));
}

static void check_constraint(const struct oai_request *r)
{
    const bool text = r->constraint == L8C_CONSTRAINT_JSON_SCHEMA;
    FUZZ_CHECK(r->constraint == L8C_CONSTRAINT_NONE || r->constraint == L8C_CONSTRAINT_JSON ||
               text);
    FUZZ_CHECK((r->constraint_text != NULL) == text);
    FUZZ_CHECK(r->constraint_len <= L8_MAX_CONSTRAINT);
    FUZZ_CHECK(!r->constraint || r->constraint_param);
    if (text) {
        FUZZ_CHECK(strlen(r->constraint_text) == r->constraint_len);
        struct l8json_error je;
        json_object *j = l8json_parse(r->constraint_text, r->constraint_len, &je);
        FUZZ_CHECK(json_object_is_type(j, json_type_object));
        json_object_put(j);
    }
    const bool forced = r->tool_choice == OAI_TOOLS_REQUIRED || r->tool_choice == OAI_TOOLS_NAMED;
    FUZZ_CHECK(!forced || (r->n_tools && text && !strcmp(r->constraint_param, "tool_choice")));
    FUZZ_CHECK((r->tool_choice == OAI_TOOLS_NONE) == (r->n_tools == 0));
}

static void check_request(enum oai_endpoint ep, const struct oai_request *r)
{
    FUZZ_CHECK(r->endpoint == ep);
    check_prompt(ep, r);
    FUZZ_CHECK(r->temperature >= 0 && r->temperature <= 2);
    FUZZ_CHECK(r->top_p > 0 && r->top_p <= 1);
    FUZZ_CHECK(r->min_p >= 0 && r->min_p <= 1);
    FUZZ_CHECK(r->repetition_penalty > 0);
    FUZZ_CHECK(r->n_stop <= OAI_MAX_STOP);
    for (size_t i = 0; i < r->n_stop; i++)
        FUZZ_CHECK(r->stop[i] && r->stop[i][0]);
    check_constraint(r);
    for (size_t i = 0; i < r->n_tools; i++) {
        struct l8json_error je;
        json_object *j = l8json_parse(r->tools[i], strlen(r->tools[i]), &je);
        FUZZ_CHECK(json_object_is_type(j, json_type_object));
        json_object_put(j);
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    for (int ep = OAI_CHAT; ep <= OAI_COMPLETIONS; ep++) {
        struct oai_request r = { .endpoint = (enum oai_endpoint)77 };
        struct oai_error e = {0};
        int rc = oai_request_parse((enum oai_endpoint)ep, (const char *)data, size, &r, &e);
        if (rc < 0) {
            check_refusal(rc, &e, &r);
            continue;
        }
        FUZZ_CHECK(rc == 0);
        check_request((enum oai_endpoint)ep, &r);
        oai_request_free(&r);
    }
    return 0;
}
