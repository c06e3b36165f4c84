/* ctl_tools.c: Llama 3.1 custom tools for llama8ctl's chat-formatted
 * commands (generate, chat, pipe): the tool definitions read and checked,
 * the tool choice turned into the chat options, the stop ids and the JSON
 * Schema constraint, and a reply that is a tool call shown as one. */
#include "ctl_ipc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "daemon/model/read_file.h"

int ctl_tool_choice_parse(const char *s, enum ctl_tool_choice *out)
{
    static const char *const names[] = { "auto", "required", "none" };
    for (int i = 0; i < 3; i++)
        if (!strcmp(s, names[i])) {
            *out = (enum ctl_tool_choice)i;
            return 0;
        }
    return -EINVAL;
}

void ctl_tools_free(struct ctl_tools *t)
{
    for (size_t i = 0; i < t->n; i++)
        free(t->texts[i]);
    free(t->texts);
    free(t->schema);
    t->texts = NULL;
    t->schema = NULL;
    t->n = 0;
}

int ctl_tools_take(struct ctl_tools *t, json_object *arr, char why[CTL_WHY_LEN])
{
    if (!json_object_is_type(arr, json_type_array)) {
        snprintf(why, CTL_WHY_LEN, "not a JSON array of tool definitions");
        return -EINVAL;
    }
    size_t n = json_object_array_length(arr);
    if (n == 0 || n > CTL_MAX_TOOLS) {
        snprintf(why, CTL_WHY_LEN, "%zu tools (give 1 to %d)", n, CTL_MAX_TOOLS);
        return -EINVAL;
    }
    char **texts = calloc(n, sizeof(*texts));
    if (!texts)
        return -ENOMEM;
    struct ctl_tools nt = { .texts = texts, .choice = t->choice };
    for (size_t i = 0; i < n; i++, nt.n++) {
        json_object *o = json_object_array_get_idx(arr, i);
        if (!json_object_is_type(o, json_type_object)) {
            snprintf(why, CTL_WHY_LEN, "tool %zu is not a JSON object", i);
            ctl_tools_free(&nt);
            return -EINVAL;
        }
        /* json-c keeps the keys' order and a number's text as it was
         * written, so the template renders what the file says. */
        if (!(texts[i] = strdup(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PLAIN)))) {
            ctl_tools_free(&nt);
            return -ENOMEM;
        }
    }
    /* The schema checks every tool has a name; it is kept for "required". */
    struct l8chat_opts co;
    l8chat_opts_init(&co);
    co.tools = (const char *const *)nt.texts;
    co.n_tools = nt.n;
    int rc = l8chat_tools_schema(&co, &nt.schema);
    if (rc < 0) {
        if (rc == -EINVAL)
            snprintf(why, CTL_WHY_LEN, "a tool without a name: each is {\"type\": \"function\", "
                     "\"function\": {\"name\": NAME, ...}} or {\"name\": NAME, ...}");
        ctl_tools_free(&nt);
        return rc;
    }
    ctl_tools_free(t);
    *t = nt;
    return 0;
}

int ctl_tools_load(struct ctl_tools *t, const char *path)
{
    char err[512], why[CTL_WHY_LEN];
    char *text;
    size_t len;
    if (l8_read_file(path, L8_MAX_CONSTRAINT, &text, &len, err, sizeof err) < 0) {
        fprintf(stderr, "llama8ctl: --tools %s\n", err);
        return -1;
    }
    const char *bad;
    json_object *root = ctl_parse_json(text, len, &bad);
    int rc = root ? ctl_tools_take(t, root, why) : -EINVAL;
    if (!root)
        snprintf(why, sizeof why, "not JSON: %s", bad);
    if (rc < 0)
        fprintf(stderr, "llama8ctl: --tools %s: %s\n", path,
                rc == -ENOMEM ? "out of memory" : why);
    json_object_put(root);
    free(text);
    return rc < 0 ? -1 : 0;
}

int ctl_tools_apply(const struct ctl_tools *t, const l8tok *tok, struct l8chat_opts *co,
                    struct l8c_params *p, uint32_t stop[CTL_MAX_STOP])
{
    if (!t->n || t->choice == CTL_TOOLS_NONE)
        return 0;
    co->tools = (const char *const *)t->texts;
    co->n_tools = t->n;
    l8tok_ids ids = {0};
    int rc = l8chat_stop_ids(tok, co, &ids);
    for (size_t i = 0; rc == 0 && i < ids.n; i++) {
        bool have = false;
        for (uint32_t k = 0; k < p->n_stop_ids; k++)
            have |= stop[k] == ids.ids[i];
        if (have)
            continue;
        if (p->n_stop_ids >= CTL_MAX_STOP)
            rc = -E2BIG;
        else
            stop[p->n_stop_ids++] = ids.ids[i];
    }
    l8tok_ids_free(&ids);
    if (rc == 0 && t->choice == CTL_TOOLS_REQUIRED) {
        p->constraint = L8C_CONSTRAINT_JSON_SCHEMA;
        p->constraint_text = t->schema;
        p->constraint_len = strlen(t->schema);
    }
    return rc;
}

json_object *ctl_tool_call_event(const char *name, const char *arguments_json,
                                 const char *id_key, json_object *id)
{
    json_object *a = json_tokener_parse(arguments_json);
    if (!a) {
        json_object_put(id);
        return NULL;
    }
    json_object *o = json_object_new_object();
    json_object_object_add(o, "event", json_object_new_string("tool_call"));
    json_object_object_add(o, id_key, id);
    json_object_object_add(o, "name", json_object_new_string(name));
    json_object_object_add(o, "arguments", a);
    return o;
}
