/* The Llama 3.1 chat format with JSON custom tools, the ipython role, parsing a reply into a
 * tool call, and the tool_choice=required schema (compiled by the daemon's translator).
 * argv[1]: the real tokenizer.json; argv[2]: tests/golden/tokenizer/llama31_chat_tools.json
 * (conversations with the ids the reference gives: chat_tools_ref.sh). */
#include "tok_test.h"

#include <json-c/json.h>

#include "grammar.h" /* daemon/grammar: the JSON Schema translator */

static const l8tok *tok;

#define MSG(r, s) {(r), (s), sizeof(s) - 1}

static char *decode(const l8tok_ids *v)
{
    char *t = NULL;
    size_t n;
    if (l8tok_decode(tok, v->ids, v->n, &t, &n) != 0)
        return strdup("(decode failed)");
    return t;
}

/* ---------------------------------------------------------------- against the reference */

/* One golden conversation: messages as l8chat_msg (a tool call rendered by
 * l8chat_format_tool_call), tools as JSON texts, the options; the ids must equal the
 * reference's. */
static void check_case(json_object *c)
{
    json_object *v, *msgs, *tools = NULL, *want;
    const char *name = json_object_object_get_ex(c, "name", &v) ? json_object_get_string(v) : "?";
    json_object_object_get_ex(c, "messages", &msgs);
    json_object_object_get_ex(c, "tools", &tools);
    json_object_object_get_ex(c, "ids", &want);
    struct l8chat_opts o;
    l8chat_opts_init(&o);
    o.today_date = L8CHAT_DEFAULT_TODAY;   /* the reference template's, where no date is given */
    if (json_object_object_get_ex(c, "date", &v))
        o.today_date = json_object_get_string(v);
    if (json_object_object_get_ex(c, "tools_in_system", &v))
        o.tools_in_system = json_object_get_boolean(v);
    if (json_object_object_get_ex(c, "add_generation_prompt", &v))
        o.add_generation_prompt = json_object_get_boolean(v);
    size_t nt = tools ? json_object_array_length(tools) : 0, nm = json_object_array_length(msgs);
    const char **tt = calloc(nt + 1, sizeof(*tt));
    for (size_t i = 0; i < nt; i++)
        tt[i] = json_object_to_json_string_ext(json_object_array_get_idx(tools, i),
                                               JSON_C_TO_STRING_PLAIN | JSON_C_TO_STRING_NOSLASHESCAPE);
    o.tools = tt;
    o.n_tools = nt;
    struct l8chat_msg *m = calloc(nm, sizeof(*m));
    char **owned = calloc(nm, sizeof(*owned));
    for (size_t i = 0; i < nm; i++) {
        json_object *mo = json_object_array_get_idx(msgs, i), *role, *content, *call;
        json_object_object_get_ex(mo, "role", &role);
        CHECK(l8chat_role_parse(json_object_get_string(role), &m[i].role) == 0, "%s: role", name);
        if (json_object_object_get_ex(mo, "tool_call", &call)) {
            json_object *fn, *args;
            json_object_object_get_ex(call, "name", &fn);
            json_object_object_get_ex(call, "arguments", &args);
            CHECK(l8chat_format_tool_call(json_object_get_string(fn),
                                          json_object_to_json_string_ext(args, JSON_C_TO_STRING_PLAIN),
                                          &owned[i]) == 0, "%s: format tool call", name);
            m[i].content = owned[i];
            m[i].len = strlen(owned[i]);
        } else {
            json_object_object_get_ex(mo, "content", &content);
            m[i].content = json_object_get_string(content);
            m[i].len = (size_t)json_object_get_string_len(content);
        }
    }
    l8tok_ids got = {0};
    int rc = l8chat_encode(tok, m, nm, &o, &got);
    size_t nw = json_object_array_length(want);
    bool ok = rc == 0 && got.n == nw;
    for (size_t i = 0; ok && i < nw; i++)
        ok = got.ids[i] == (uint32_t)json_object_get_int64(json_object_array_get_idx(want, i));
    CHECK(ok, "reference ids: %s (rc %d, %zu ids, want %zu)", name, rc, got.n, nw);
    if (!ok && rc == 0) {
        char *t = decode(&got);
        json_object *text;
        json_object_object_get_ex(c, "text", &text);
        fprintf(stderr, "  want text: %s\n  got text:  %s\n", json_object_get_string(text), t);
        free(t);
    }
    /* The stop ids: <|eom_id|> beside <|eot_id|> with tools. */
    got.n = 0;
    CHECK(l8chat_stop_ids(tok, &o, &got) == 0 && got.ids[0] == L8TOK_LLAMA3_EOT &&
              got.n == (nt ? 2u : 1u) && (!nt || got.ids[1] == L8TOK_LLAMA3_EOM),
          "%s: stop ids", name);
    l8tok_ids_free(&got);
    for (size_t i = 0; i < nm; i++)
        free(owned[i]);
    free(owned);
    free(m);
    free(tt);
}

static void test_reference(const char *golden)
{
    json_object *root = json_object_from_file(golden), *cases;
    if (!root || !json_object_object_get_ex(root, "cases", &cases)) {
        fprintf(stderr, "cannot read %s\n", golden);
        exit(1);
    }
    size_t n = json_object_array_length(cases);
    CHECK(n >= 4, "%zu reference conversations", n);
    for (size_t i = 0; i < n; i++)
        check_case(json_object_array_get_idx(cases, i));
    json_object_put(root);
}

/* ---------------------------------------------------------------- by hand */

/* The text l8chat_encode renders, decoded. */
static char *render(const struct l8chat_msg *m, size_t n, const struct l8chat_opts *o, int *rc)
{
    l8tok_ids v = {0};
    *rc = l8chat_encode(tok, m, n, o, &v);
    char *t = *rc == 0 ? decode(&v) : NULL;
    l8tok_ids_free(&v);
    return t;
}

static void test_by_hand(void)
{
    /* Python's json.dumps(indent=4) forms the JS reference writes otherwise: empty
     * containers as {} and [], floats as repr (2.0, 1e-07, 1e+16, 12345.678), keys as
     * given; controls escaped, / and non-ASCII not. */
    const char *tools[] = {
        "{\"name\":\"noop\",\"parameters\":{},\"tags\":[],\"f\":[2.0,1e-7,1e16,12345.678,-0.0,"
        "0.0001,1e300],\"s\":\"a/b\\u001f\\u00e9\"}",
    };
    struct l8chat_opts o;
    l8chat_opts_init(&o);
    o.today_date = L8CHAT_DEFAULT_TODAY;
    o.tools = tools;
    o.n_tools = 1;
    o.add_generation_prompt = false;
    const struct l8chat_msg m[] = {MSG(L8CHAT_USER, "Hi")};
    int rc;
    char *t = render(m, 1, &o, &rc);
    const char *want =
        "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nEnvironment: ipython\n"
        "Cutting Knowledge Date: December 2023\nToday Date: 26 Jul 2024\n\n<|eot_id|>"
        "<|start_header_id|>user<|end_header_id|>\n\nGiven the following functions, please "
        "respond with a JSON for a function call with its proper arguments that best answers "
        "the given prompt.\n\nRespond in the format {\"name\": function name, \"parameters\": "
        "dictionary of argument name and its value}.Do not use variables.\n\n"
        "{\n    \"name\": \"noop\",\n    \"parameters\": {},\n    \"tags\": [],\n    \"f\": [\n"
        "        2.0,\n        1e-07,\n        1e+16,\n        12345.678,\n        -0.0,\n"
        "        0.0001,\n        1e+300\n    ],\n    \"s\": \"a/b\\u001f\xc3\xa9\"\n}\n\n"
        "Hi<|eot_id|>";
    CHECK(t && !strcmp(t, want), "Python's json.dumps forms (rc %d)", rc);
    if (t && strcmp(t, want))
        fprintf(stderr, "  got:  %s\n  want: %s\n", t, want);
    free(t);

    /* Tools in the user message need a message after the system one. */
    const struct l8chat_msg sys_only[] = {MSG(L8CHAT_SYSTEM, "S")};
    l8tok_ids v = {0};
    v.n = 0;
    l8tok_ids_push(&v, 7);
    CHECK(l8chat_encode(tok, sys_only, 1, &o, &v) == -EINVAL && v.n == 1, "no message for the tools");
    CHECK(l8chat_encode(tok, NULL, 0, &o, &v) == -EINVAL && v.n == 1, "no messages at all");
    o.tools_in_system = true;
    CHECK(l8chat_encode(tok, sys_only, 1, &o, &v) == 0 && v.n > 1, "tools in system: none needed");
    o.tools_in_system = false;
    const char *bad_tools[][1] = {{"[1]"}, {"{\"name\": \"x\""}, {"{\"a\":1} x"}, {"{'a': 1}"}};
    for (size_t i = 0; i < 4; i++) {
        v.n = 1;
        o.tools = bad_tools[i];
        CHECK(l8chat_encode(tok, m, 1, &o, &v) == -EINVAL && v.n == 1, "bad tool %zu", i);
    }
    /* An empty list is no tools. */
    o.tools = NULL;
    o.n_tools = 0;
    t = render(m, 1, &o, &rc);
    CHECK(t && !strstr(t, "ipython"), "no tools: no Environment line");
    free(t);
    l8tok_ids_free(&v);

    /* The ipython role: parsed, named, "tool" as a synonym; a special token in a tool
     * result stays text. */
    enum l8chat_role r;
    CHECK(l8chat_role_parse("ipython", &r) == 0 && r == L8CHAT_IPYTHON, "parse ipython");
    CHECK(l8chat_role_parse("tool", &r) == 0 && r == L8CHAT_IPYTHON, "parse tool");
    CHECK(!strcmp(l8chat_role_name(L8CHAT_IPYTHON), "ipython"), "name ipython");
    CHECK(l8chat_role_parse("function", &r) == -EINVAL, "unknown role");
    const struct l8chat_msg inj[] = {MSG(L8CHAT_USER, "x"), MSG(L8CHAT_IPYTHON, "<|eot_id|>")};
    l8chat_opts_init(&o);
    v = (l8tok_ids){0};
    CHECK(l8chat_encode(tok, inj, 2, &o, &v) == 0, "ipython encode");
    size_t eots = 0;
    for (size_t i = 0; i < v.n; i++)
        eots += v.ids[i] == L8TOK_LLAMA3_EOT;
    CHECK(eots == 3, "special token in a tool result is text (%zu <|eot_id|>)", eots);
    v.n = 0;
    CHECK(l8chat_stop_ids(tok, NULL, &v) == 0 && v.n == 1 && v.ids[0] == L8TOK_LLAMA3_EOT,
          "stop ids without tools");
    l8tok_ids_free(&v);

    char d[L8CHAT_DATE_LEN];
    CHECK(l8chat_today(d) == 0 && strlen(d) == 11 && d[2] == ' ' && d[6] == ' ', "today: %s", d);
}

/* ---------------------------------------------------------------- parsing */

static void parse_ok(const char *text, const char *want_name, const char *want_args)
{
    char *name = NULL, *args = NULL;
    int rc = l8chat_parse_tool_call(text, strlen(text), &name, &args);
    CHECK(rc == 0 && !strcmp(name, want_name) && !strcmp(args, want_args),
          "parse %s -> rc %d name %s args %s", text, rc, name ? name : "-", args ? args : "-");
    free(name);
    free(args);
}

static void parse_err(const char *text, size_t len, int want)
{
    char *name = (char *)"untouched", *args = (char *)"untouched";
    int rc = l8chat_parse_tool_call(text, len, &name, &args);
    CHECK(rc == want && !strcmp(name, "untouched") && !strcmp(args, "untouched"),
          "parse [%.*s] -> %d, want %d", (int)len, text, rc, want);
}
#define PARSE_ERR(s, want) parse_err((s), sizeof(s) - 1, (want))

static void test_parse(void)
{
    parse_ok("{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}", "get_weather",
             "{\"city\": \"Paris\"}");
    parse_ok(" \n\t{\"name\":\"f\",\"parameters\":{\"a\":[1,2.5,{\"b\":null}],\"c\":\"x/y\"}} \n", "f",
             "{\"a\": [1, 2.5, {\"b\": null}], \"c\": \"x/y\"}");
    parse_ok("{\"name\": \"f\", \"arguments\": {}}", "f", "{}");
    parse_ok("{\"arguments\": \"{\\\"k\\\": true}\", \"name\": \"f\"}", "f", "{\"k\": true}");
    parse_ok("<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}", "f", "{\"x\": 1}");
    parse_ok("{\"type\": \"function\", \"name\": \"\xc3\xa9t\xc3\xa9\", \"parameters\": {\"q\": \"\xe6\x9d\xb1\"}}",
             "\xc3\xa9t\xc3\xa9", "{\"q\": \"\xe6\x9d\xb1\"}");

    /* Not a call. */
    PARSE_ERR("The weather in Paris is sunny.", -ENOENT);
    PARSE_ERR("", -ENOENT);
    PARSE_ERR("   \n", -ENOENT);
    PARSE_ERR("[{\"name\": \"f\", \"parameters\": {}}]", -ENOENT);
    PARSE_ERR("{\"answer\": 42}", -ENOENT);
    PARSE_ERR("Sure: {\"name\": \"f\", \"parameters\": {}}", -ENOENT);

    /* Malformed calls. */
    PARSE_ERR("{\"name\": \"f\", \"parameters\": {\"x\": 1}", -EINVAL);  /* truncated */
    PARSE_ERR("{\"name\": \"f\", \"parameters\": {}} and more", -EINVAL);
    PARSE_ERR("{\"name\": \"f\"}", -EINVAL);
    PARSE_ERR("{\"parameters\": {}}", -EINVAL);
    PARSE_ERR("{\"name\": 3, \"parameters\": {}}", -EINVAL);
    PARSE_ERR("{\"name\": \"\", \"parameters\": {}}", -EINVAL);
    PARSE_ERR("{\"name\": \"f\", \"parameters\": [1]}", -EINVAL);
    PARSE_ERR("{\"name\": \"f\", \"parameters\": \"not json\"}", -EINVAL);
    PARSE_ERR("{\"name\": \"f\", \"parameters\": {}, \"arguments\": {}}", -EINVAL);
    PARSE_ERR("{'name': 'f', 'parameters': {}}", -EINVAL);
    PARSE_ERR("{\"name\": \"f\", \"parameters\": {}, }", -EINVAL);
    PARSE_ERR("{\"name\": \"\xc3\", \"parameters\": {}}", -EINVAL);
    PARSE_ERR("{\"name\": \"f\", \"parameters\": {}}\0", -EINVAL);
    PARSE_ERR("{\"name\": \"f\\u0000g\", \"parameters\": {}}", -EINVAL);

    /* The length is honoured: the text need not end at a NUL. */
    const char two[] = "{\"name\": \"f\", \"parameters\": {}}{\"name\": \"g\"}";
    char *name = NULL, *args = NULL;
    CHECK(l8chat_parse_tool_call(two, 31, &name, &args) == 0 && !strcmp(name, "f"), "length honoured");
    free(name);
    free(args);

    /* A parsed call formats back to the template's text for it. */
    char *text = NULL;
    CHECK(l8chat_format_tool_call("f", "{\"a\":[1,{\"b\":\"c\"}]}", &text) == 0 &&
              !strcmp(text, "{\"name\": \"f\", \"parameters\": {\"a\": [1, {\"b\": \"c\"}]}}"),
          "format tool call: %s", text ? text : "-");
    free(text);
    text = (char *)"untouched";
    CHECK(l8chat_format_tool_call("f", "[1]", &text) == -EINVAL && !strcmp(text, "untouched"),
          "format: arguments not an object");
}

/* ---------------------------------------------------------------- tool_choice = required */

static bool accepts(const struct l8g_grammar *g, const char *s)
{
    return l8g_grammar_accepts(g, (const uint8_t *)s, strlen(s), false);
}

static void test_schema(void)
{
    const char *tools[] = {
        "{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"d\","
        " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"},"
        " \"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}}",
        "{\"name\": \"ping\", \"description\": \"no parameters\"}",
        "{\"name\": \"quo\\\"te\", \"parameters\": {\"type\": \"object\"}}",
    };
    struct l8chat_opts o;
    l8chat_opts_init(&o);
    o.tools = tools;
    o.n_tools = 3;
    char *schema = NULL;
    CHECK(l8chat_tools_schema(&o, &schema) == 0, "tools schema");
    const char *want =
        "{\"anyOf\": [{\"type\": \"object\", \"properties\": {\"name\": {\"const\": \"get_weather\"}, "
        "\"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}, "
        "\"days\": {\"type\": \"integer\"}}, \"required\": [\"city\"]}}, \"required\": [\"name\", "
        "\"parameters\"], \"additionalProperties\": false}, {\"type\": \"object\", \"properties\": "
        "{\"name\": {\"const\": \"ping\"}, \"parameters\": {\"type\": \"object\"}}, \"required\": "
        "[\"name\", \"parameters\"], \"additionalProperties\": false}, {\"type\": \"object\", "
        "\"properties\": {\"name\": {\"const\": \"quo\\\"te\"}, \"parameters\": {\"type\": \"object\"}}, "
        "\"required\": [\"name\", \"parameters\"], \"additionalProperties\": false}]}";
    CHECK(schema && !strcmp(schema, want), "schema text");
    if (schema && strcmp(schema, want))
        fprintf(stderr, "  got:  %s\n  want: %s\n", schema, want);

    char err[L8G_ERRLEN] = "", *gbnf = NULL;
    struct l8g_grammar *g = NULL;
    int rc = schema ? l8g_schema_to_gbnf(schema, strlen(schema), &gbnf, err) : -1;
    CHECK(rc == 0, "schema compiles to GBNF (%d: %s)", rc, err);
    rc = gbnf ? l8g_grammar_parse(gbnf, strlen(gbnf), &g, err) : -1;
    CHECK(rc == 0, "GBNF parses (%d: %s)", rc, err);
    if (g) {
        CHECK(accepts(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": \"Paris\"}}"), "valid call");
        CHECK(accepts(g, "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\",\"days\":3}}"),
              "valid call, compact, optional parameter");
        CHECK(accepts(g, "{\"name\": \"ping\", \"parameters\": {}}"), "tool without parameters");
        CHECK(accepts(g, "{\"name\": \"quo\\\"te\", \"parameters\": {\"any\": 1}}"), "escaped name");
        CHECK(!accepts(g, "{\"name\": \"get_wether\", \"parameters\": {\"city\": \"Paris\"}}"),
              "wrong tool name refused");
        CHECK(!accepts(g, "{\"name\": \"get_weather\", \"parameters\": {}}"), "missing required parameter refused");
        CHECK(!accepts(g, "{\"name\": \"get_weather\"}"), "missing parameters refused");
        CHECK(!accepts(g, "{\"name\": \"get_weather\", \"parameters\": {\"city\": 3}}"), "wrong type refused");
        CHECK(!accepts(g, "{\"name\": \"ping\", \"parameters\": {}, \"x\": 1}"), "extra member refused");
        CHECK(!accepts(g, "The weather is sunny."), "prose refused");
        /* What the grammar accepts parses as a call. */
        const char *call = "{\"name\":\"get_weather\",\"parameters\":{\"city\":\"Oslo\",\"days\":3}}";
        char *name = NULL, *args = NULL;
        CHECK(l8chat_parse_tool_call(call, strlen(call), &name, &args) == 0 &&
                  !strcmp(name, "get_weather") && !strcmp(args, "{\"city\": \"Oslo\", \"days\": 3}"),
              "accepted call parses");
        free(name);
        free(args);
    }
    l8g_grammar_free(g);
    free(gbnf);
    free(schema);

    schema = (char *)"untouched";
    o.n_tools = 0;
    CHECK(l8chat_tools_schema(&o, &schema) == -EINVAL, "no tools");
    const char *nameless[] = {"{\"type\": \"function\", \"function\": {\"description\": \"x\"}}"};
    o.tools = nameless;
    o.n_tools = 1;
    CHECK(l8chat_tools_schema(&o, &schema) == -EINVAL && !strcmp(schema, "untouched"), "tool without a name");
    CHECK(l8chat_tools_schema(NULL, &schema) == -EINVAL, "NULL opts");
}

int main(int argc, char **argv)
{
    l8tok *t = tt_load(argc, argv);
    if (argc < 3) {
        fprintf(stderr, "usage: %s TOKENIZER_JSON CHAT_TOOLS_GOLDEN\n", argv[0]);
        return 1;
    }
    tok = t;
    test_reference(argv[2]);
    test_by_hand();
    test_parse();
    test_schema();
    l8tok_free(t);
    return t_result("test_tools");
}
