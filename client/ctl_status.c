/* ctl_status.c: `llama8ctl status`: what the daemon is doing. */
#include "ctl_ipc.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <json-c/json.h>

#define GIB 1073741824.0

static void status_usage(FILE *f)
{
    fprintf(f, "Usage: llama8ctl status [--socket PATH] [--wait] [--json]\n"
               "Print the served model (and whether its directory has the tokenizer.json clients\n"
               "need), KV pool use, clients, requests, errors sent, tokens/s and uptime.\n"
               "A user other than root and the daemon's user sees their own uid's requests,\n"
               "tokens, cache hits and errors, and the pool's figures (own_uid in --json).\n\n"
               CTL_WAIT_HELP "\n"
               "exit status: 0 ok, 1 the daemon failed to answer, 2 bad command line,\n"
               "3 no daemon at the socket\n\n");
    ctl_socket_help(f);
}

/* The served model's tokenizer.json, where clients look for it (the
 * Welcome's model_dir): 0 with path set when it is a file this user can
 * read, else -errno with why saying what fails without it. The daemon's
 * constrained decoding reads the same file unless its tokenizer key names
 * another (the Status does not say which). */
static int model_tokenizer(const char *model_dir, char path[PATH_MAX + 16], char why[512])
{
    struct stat st;
    snprintf(path, PATH_MAX + 16, "%s/tokenizer.json", model_dir);
    int rc = stat(path, &st) < 0 ? -errno : S_ISREG(st.st_mode) ? 0 : -EINVAL;
    if (rc == 0 && access(path, R_OK) < 0)
        rc = -errno;
    if (rc == 0)
        return 0;
    snprintf(why, 512, "%s%s: llama8ctl's text prompts need --tokenizer FILE or "
             "$LLAMA8_TOKENIZER (--ids works), and llama8d refuses constrained decoding "
             "unless its tokenizer = names one",
             rc == -ENOENT ? "the model directory has no tokenizer.json"
             : rc == -EINVAL ? "tokenizer.json is not a regular file"
             : "tokenizer.json cannot be read: ", rc == -ENOENT || rc == -EINVAL ? ""
             : strerror(-rc));
    return rc;
}

int ctl_status(int argc, char **argv)
{
    const char *sock = NULL;
    bool json = false;
    int rc = ctl_plain_opts(argc, argv, status_usage, &sock, &json);
    if (rc >= 0)
        return rc;
    struct l8c_client *c;
    rc = ctl_connect(sock, "llama8ctl status", &c);
    if (rc != CTL_OK)
        return rc;
    struct l8c_status s;
    if ((rc = l8c_status(c, &s, 10000)) < 0) {
        fprintf(stderr, "llama8ctl: status: %s\n", ctl_why(c, rc));
        l8c_close(c);
        return CTL_FAIL;
    }
    const struct l8c_info *in = l8c_info(c);
    char tok_path[PATH_MAX + 16], tok_why[512] = "";
    const bool have_tok = model_tokenizer(in->model_dir, tok_path, tok_why) == 0;
    if (json) {
        json_object *o = json_object_new_object();
        json_object_object_add(o, "model", json_object_new_string(s.model_name));
        json_object_object_add(o, "model_dir", json_object_new_string(in->model_dir));
        json_object_object_add(o, "tokenizer", have_tok ? json_object_new_string(tok_path) : NULL);
        if (!have_tok)
            json_object_object_add(o, "tokenizer_error", json_object_new_string(tok_why));
        json_object_object_add(o, "backend", json_object_new_string(s.backend));
        json_object_object_add(o, "context_length", json_object_new_int64(s.context_length));
        json_object_object_add(o, "pages_total", json_object_new_int64(s.pages_total));
        json_object_object_add(o, "pages_used", json_object_new_int64(s.pages_used));
        json_object_object_add(o, "pages_cached", json_object_new_int64(s.pages_cached));
        json_object_object_add(o, "prefix_cache", json_object_new_string(s.prefix_cache));
        json_object_object_add(o, "speculate", json_object_new_string(s.speculate));
        json_object_object_add(o, "draft_tokens", json_object_new_uint64(s.draft_tokens));
        json_object_object_add(o, "draft_accepted", json_object_new_uint64(s.draft_accepted));
        json_object_object_add(o, "page_size", json_object_new_int64(s.page_size));
        json_object_object_add(o, "clients", json_object_new_int64(s.clients));
        json_object_object_add(o, "requests_running", json_object_new_int64(s.requests_running));
        json_object_object_add(o, "requests_waiting", json_object_new_int64(s.requests_waiting));
        json_object_object_add(o, "requests_done", json_object_new_uint64(s.requests_done));
        json_object_object_add(o, "tokens_generated", json_object_new_uint64(s.tokens_generated));
        json_object_object_add(o, "prompt_tokens", json_object_new_uint64(s.prompt_tokens));
        json_object_object_add(o, "prompt_tokens_cached", json_object_new_uint64(s.prompt_tokens_cached));
        json_object_object_add(o, "tokens_per_s", json_object_new_double(s.tokens_per_s));
        json_object_object_add(o, "uptime_s", json_object_new_double(s.uptime_s));
        json_object_object_add(o, "draining", json_object_new_boolean(s.draining));
        json_object_object_add(o, "step_running_s", json_object_new_double(s.step_running_s));
        json_object_object_add(o, "step_stalled", json_object_new_boolean(s.step_stalled));
        json_object_object_add(o, "steps", json_object_new_uint64(s.steps));
        json_object_object_add(o, "step_time_s", json_object_new_double(s.step_time_s));
        json_object_object_add(o, "gap_steps", json_object_new_uint64(s.gap_steps));
        json_object_object_add(o, "gap_time_s", json_object_new_double(s.gap_time_s));
        json_object_object_add(o, "decode_steps", json_object_new_uint64(s.decode_steps));
        json_object_object_add(o, "decode_time_s", json_object_new_double(s.decode_time_s));
        json_object_object_add(o, "decode_rows", json_object_new_uint64(s.decode_rows));
        json_object_object_add(o, "fed_tokens", json_object_new_uint64(s.fed_tokens));
        json_object_object_add(o, "preemptions", json_object_new_uint64(s.preemptions));
        json_object_object_add(o, "mem_weights", json_object_new_uint64(s.mem_weights));
        json_object_object_add(o, "mem_kv_pool", json_object_new_uint64(s.mem_kv_pool));
        json_object_object_add(o, "mem_work", json_object_new_uint64(s.mem_work));
        json_object_object_add(o, "device_used", json_object_new_uint64(s.device_used));
        json_object_object_add(o, "device_total", json_object_new_uint64(s.device_total));
        json_object *errs = json_object_new_object();
        for (int i = 1; i < L8_ERR_MAX_; i++)
            if (s.errors[i])
                json_object_object_add(errs, l8c_err_name(i), json_object_new_uint64(s.errors[i]));
        json_object_object_add(o, "errors", errs);
        json_object_object_add(o, "spin_us", json_object_new_int64(s.spin_us));
        json_object_object_add(o, "log_level", json_object_new_string(s.log_level));
        json_object_object_add(o, "config_reloads", json_object_new_uint64(s.config_reloads));
        json_object_object_add(o, "config_error", json_object_new_string(s.config_error));
        json_object_object_add(o, "config_restart", json_object_new_string(s.config_restart));
        json_object_object_add(o, "max_clients", json_object_new_int64(s.max_clients));
        json_object_object_add(o, "admin_clients", json_object_new_int64(s.admin_clients));
        json_object_object_add(o, "own_uid", json_object_new_boolean(s.own_uid));
        puts(json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY));
        json_object_put(o);
    } else {
        printf("model:     %s (%s, %s)\n", s.model_name, in->model_dir, s.backend);
        if (have_tok)
            printf("tokenizer: %s\n", tok_path);
        else
            printf("tokenizer: NONE: %s\n", tok_why);
        printf("context:   %u tokens\n", s.context_length);
        printf("kv pool:   %u/%u pages used, %u cached (%u positions each); prefix cache: %s\n",
               s.pages_used, s.pages_total, s.pages_cached, s.page_size, s.prefix_cache);
        printf("memory:    weights %.2f GiB, KV pool %.2f GiB, work %.1f MiB (%s)\n",
               (double)s.mem_weights / GIB, (double)s.mem_kv_pool / GIB,
               (double)s.mem_work / (1 << 20), s.device_total ? "on the GPU" : "host");
        if (s.device_total)
            printf("gpu:       %.2f of %.2f GiB in use after the engine started (all processes)\n",
                   (double)s.device_used / GIB, (double)s.device_total / GIB);
        printf("clients:   %u (at most %u, and %u more for root and llama8d's user; "
               "llama8ctl clients lists them)\n", s.clients, s.max_clients, s.admin_clients);
        /* own_uid: the counts are this uid's, the rates and queues everyone's. */
        const char *yours = s.own_uid ? " by your uid" : "";
        printf("requests:  %u running, %u waiting; %llu done%s\n", s.requests_running,
               s.requests_waiting, (unsigned long long)s.requests_done, yours);
        printf("tokens:    %.1f/s; %llu generated, %llu prompt (%llu from cache)%s\n",
               s.tokens_per_s, (unsigned long long)s.tokens_generated,
               (unsigned long long)s.prompt_tokens, (unsigned long long)s.prompt_tokens_cached,
               yours);
        printf("errors:    ");
        int shown = 0;
        for (int i = 1; i < L8_ERR_MAX_; i++)
            if (s.errors[i])
                printf("%s%s %llu", shown++ ? ", " : "", l8c_err_name(i),
                       (unsigned long long)s.errors[i]);
        printf("%s\n", shown ? (s.own_uid ? " (sent to your uid's clients since start)"
                                           : " (sent to clients since start)")
                             : s.own_uid ? "none sent to your uid's clients" : "none sent to clients");
        printf("speculate: %s", s.speculate);
        if (s.draft_tokens)
            printf("; %llu tokens drafted, %llu accepted (%.0f %%)",
                   (unsigned long long)s.draft_tokens, (unsigned long long)s.draft_accepted,
                   100.0 * (double)s.draft_accepted / (double)s.draft_tokens);
        printf("\n");
        printf("uptime:    %.1f s%s\n", s.uptime_s, s.draining ? " (draining)" : "");
        if (s.step_stalled)
            printf("engine:    STALLED: a step has run %.1f s, past its bound; the watchdog "
                   "pings stopped, systemd will restart llama8d\n", s.step_running_s);
        else if (s.step_running_s > 0)
            printf("engine:    a step running for %.3f s\n", s.step_running_s);
        else
            printf("engine:    idle\n");
        if (s.spin_us)
            printf("spin:      the loop and the engine thread busy-wait up to %u us for "
                   "each other\n", s.spin_us);
        printf("config:    log level %s; reloaded %llu time%s", s.log_level,
               (unsigned long long)s.config_reloads, s.config_reloads == 1 ? "" : "s");
        if (s.config_error[0])
            printf("; the last was refused: %s", s.config_error);
        if (s.config_restart[0])
            printf("; at the next start: %s", s.config_restart);
        printf("\n");
        if (s.own_uid)
            printf("steps:     the engine's step figures are shown to root and llama8d's user\n");
        else if (s.steps) {
            const uint64_t ps = s.steps - s.decode_steps;
            printf("steps:     %llu, %.3f ms each on average; %.1f us from a step's end to the "
                   "next one's start while requests were left (%llu such)\n",
                   (unsigned long long)s.steps, s.step_time_s * 1e3 / (double)s.steps,
                   s.gap_steps ? s.gap_time_s * 1e6 / (double)s.gap_steps : 0.0,
                   (unsigned long long)s.gap_steps);
            printf("           decode only: %llu, batch %.1f, %.3f ms each; with prompt tokens: "
                   "%llu, %.1f tokens, %.3f ms each; %llu preemptions\n",
                   (unsigned long long)s.decode_steps,
                   s.decode_steps ? (double)s.decode_rows / (double)s.decode_steps : 0.0,
                   s.decode_steps ? s.decode_time_s * 1e3 / (double)s.decode_steps : 0.0,
                   (unsigned long long)ps,
                   ps ? (double)(s.fed_tokens - s.decode_rows) / (double)ps : 0.0,
                   ps ? (s.step_time_s - s.decode_time_s) * 1e3 / (double)ps : 0.0,
                   (unsigned long long)s.preemptions);
        }
    }
    l8c_close(c);
    return CTL_OK;
}
