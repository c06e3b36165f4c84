/* ctl_clients.c: `llama8ctl clients`: who is connected to the daemon and what each is doing. */
#include "ctl_ipc.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

static void clients_usage(FILE *f)
{
    fprintf(f, "Usage: llama8ctl clients [--socket PATH] [--wait] [--json]\n"
               "List the clients connected to llama8d, oldest first: id, pid, uid, how long\n"
               "connected, requests in flight (REQS), of them running in a sequence slot (RUN),\n"
               "the KV pages they hold, requests done, prompt tokens, tokens generated, name.\n"
               "'held': its event ring is full, so its requests wait for it to read. Root and\n"
               "the daemon's user see every client, anyone else the clients of their own uid.\n\n"
               "  --socket PATH          daemon socket (default $LLAMA8_SOCKET, else\n"
               "                         /run/llama8d/llama8d.sock)\n"
               CTL_WAIT_HELP
               "  -j, --json             one JSON array, an object per client\n"
               "  -h, --help\n\n"
               "exit status: 0 ok, 1 the daemon failed to answer, 2 bad command line,\n"
               "3 no daemon at the socket\n");
}

/* 12.3s, 5m07s, 3h12m, 2d04h: a column's width at most. */
static void fmt_age(char *buf, size_t n, double s)
{
    const unsigned long long t = (unsigned long long)s;
    if (s < 60)
        snprintf(buf, n, "%.1fs", s);
    else if (t < 3600)
        snprintf(buf, n, "%llum%02llus", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, n, "%lluh%02llum", t / 3600, t % 3600 / 60);
    else
        snprintf(buf, n, "%llud%02lluh", t / 86400, t % 86400 / 3600);
}

static void print_json(const struct l8c_client_info *v, size_t n, uint64_t self)
{
    json_object *a = json_object_new_array();
    for (size_t i = 0; i < n; i++) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "id", json_object_new_uint64(v[i].id));
        json_object_object_add(o, "name", json_object_new_string(v[i].name));
        json_object_object_add(o, "pid", json_object_new_int(v[i].pid));
        json_object_object_add(o, "uid", json_object_new_int64(v[i].uid));
        json_object_object_add(o, "connected_s", json_object_new_double(v[i].connected_s));
        json_object_object_add(o, "requests", json_object_new_int64(v[i].requests));
        json_object_object_add(o, "running", json_object_new_int64(v[i].running));
        json_object_object_add(o, "kv_pages", json_object_new_int64(v[i].kv_pages));
        json_object_object_add(o, "requests_done", json_object_new_uint64(v[i].requests_done));
        json_object_object_add(o, "prompt_tokens", json_object_new_uint64(v[i].prompt_tokens));
        json_object_object_add(o, "tokens_generated",
                               json_object_new_uint64(v[i].tokens_generated));
        json_object_object_add(o, "held", json_object_new_boolean(v[i].held));
        json_object_object_add(o, "self", json_object_new_boolean(v[i].id == self));
        json_object_array_add(a, o);
    }
    puts(json_object_to_json_string_ext(a, JSON_C_TO_STRING_PRETTY));
    json_object_put(a);
}

static void print_table(const struct l8c_client_info *v, size_t n, uint64_t self)
{
    printf("%5s %7s %6s %9s %4s %4s %7s %7s %9s %9s  %s\n", "ID", "PID", "UID", "CONNECTED",
           "REQS", "RUN", "PAGES", "DONE", "PROMPT", "TOKENS", "NAME");
    for (size_t i = 0; i < n; i++) {
        char age[32];
        fmt_age(age, sizeof(age), v[i].connected_s);
        printf("%5llu %7d %6u %9s %4u %4u %7u %7llu %9llu %9llu  %s%s%s\n",
               (unsigned long long)v[i].id, (int)v[i].pid, (unsigned)v[i].uid, age,
               (unsigned)v[i].requests, (unsigned)v[i].running, (unsigned)v[i].kv_pages,
               (unsigned long long)v[i].requests_done,
               (unsigned long long)v[i].prompt_tokens,
               (unsigned long long)v[i].tokens_generated, v[i].name,
               v[i].held ? " (held)" : "", v[i].id == self ? " (this one)" : "");
    }
}

int ctl_clients(int argc, char **argv)
{
    const char *sock = NULL;
    bool json = false;
    int rc = ctl_plain_opts(argc, argv, clients_usage, &sock, &json);
    if (rc >= 0)
        return rc;
    struct l8c_client *c;
    rc = ctl_connect(sock, "llama8ctl clients", &c);
    if (rc != CTL_OK)
        return rc;
    /* Room for what the daemon said there were, and some: others may
     * connect between the calls. */
    struct l8c_client_info *v = NULL;
    size_t cap = 0, n = 0;
    for (int tries = 0; tries < 4; tries++) {
        if ((rc = l8c_clients(c, v, cap, &n, 10000)) < 0 || n <= cap)
            break;
        free(v);
        cap = n + 16;
        if (!(v = malloc(cap * sizeof(*v)))) {
            rc = -ENOMEM;
            break;
        }
    }
    if (rc < 0) {
        fprintf(stderr, "llama8ctl: clients: %s\n", ctl_why(c, rc));
        free(v);
        l8c_close(c);
        return CTL_FAIL;
    }
    if (n > cap)
        n = cap;   /* still growing after 4 tries: what there is */
    const uint64_t self = l8c_info(c)->client_id;
    if (json)
        print_json(v, n, self);
    else
        print_table(v, n, self);
    free(v);
    l8c_close(c);
    return CTL_OK;
}
