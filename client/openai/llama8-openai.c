/* llama8-openai.c - the OpenAI-compatible HTTP bridge to llama8d: options,
 * the listening socket, and libmicrohttpd's callbacks.
 *
 * One thread per HTTP connection (libmicrohttpd's), and each connection is
 * one client of llama8d, connected at its first request and closed with
 * it: the daemon's limits, fair share and errors apply to each connection
 * as to any other client. A request blocks its connection's thread while
 * it runs, waiting on the daemon's doorbell and the HTTP socket's hang-up
 * together, so a client that goes away cancels its request. */
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <microhttpd.h>
#include <systemd/sd-daemon.h>

#include "l8_build.h"
#include "openai_gen.h"
#include "openai_reply.h"
#include "openai_request.h"

#define DEFAULT_LISTEN "127.0.0.1:8408"
#define DEFAULT_MAX_BODY (16u << 20)
/* An idle keep-alive connection holds a daemon client: let it go. */
#define IDLE_TIMEOUT_S 60
#define MAX_CONNECTIONS 1024

/* A tokenizer per model directory the daemon has served (it may be
 * restarted on another), kept until exit: connections borrow them. */
struct tok_ent {
    struct tok_ent *next;
    char *path;
    l8tok *tok;
};

struct server {
    const char *socket;        /* llama8d's; NULL: l8c_default_socket() */
    const char *tokenizer;     /* --tokenizer, or NULL: the served model's */
    char *key;                 /* the bearer token, or NULL: none asked */
    size_t key_len;
    size_t max_body;
    int quit_fd;               /* eventfd, readable once we stop */
    pthread_mutex_t tok_mu;
    struct tok_ent *toks;
};

/* One HTTP connection. */
struct conn {
    struct server *srv;
    int fd;                    /* its socket, watched for the client's hang-up */
    char name[80];             /* as llama8d logs it */
    struct l8c_client *c;      /* llama8d, once a request needed it */
};

enum route { R_CHAT, R_COMPLETIONS, R_MODELS, R_MODEL };

/* One HTTP request. */
struct call {
    struct conn *conn;
    enum route route;
    char *body;
    size_t len, cap;
    bool too_large;
    bool have_req, have_gen;
    struct oai_request req;
    struct oai_gen gen;
    struct oai_meta meta;
    struct oai_buf out;        /* stream bytes not yet sent */
    bool ended;                /* the stream's last event is in out */
};

/* ---------------------------------------------------------------- replies */

static enum MHD_Result send_text(struct MHD_Connection *mc, unsigned status, char *text,
                                 size_t len, const char *type)
{
    if (!text)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(len, text, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(text);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    enum MHD_Result rc = MHD_queue_response(mc, status, r);
    MHD_destroy_response(r);
    return rc;
}

static enum MHD_Result send_json(struct MHD_Connection *mc, unsigned status, json_object *o)
{
    size_t n = 0;
    char *t = oai_json_text(o, &n);
    return send_text(mc, status, t, n, "application/json");
}

static enum MHD_Result send_error(struct MHD_Connection *mc, const struct oai_error *e,
                                  const char *allow)
{
    size_t n = 0;
    char *t = oai_json_text(oai_error_json(e), &n);
    if (!t)
        return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(n, t, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(t);
        return MHD_NO;
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "application/json");
    if (e->status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (allow)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, allow);
    enum MHD_Result rc = MHD_queue_response(mc, (unsigned)e->status, r);
    MHD_destroy_response(r);
    return rc;
}

/* ---------------------------------------------------------------- llama8d */

/* The connection's client, connected now if it has none or the daemon
 * hung up on it since (a restart); 503 when none can be had. */
static struct l8c_client *conn_client(struct conn *cn, struct oai_error *err)
{
    struct l8_event ev[16];
    struct pollfd pf = { cn->c ? l8c_ctl_fd(cn->c) : -1, POLLIN, 0 };
    /* No request runs between requests: what waits is stale or a hang-up. */
    if (cn->c && poll(&pf, 1, 0) > 0) {
        int k;
        while ((k = l8c_poll_events(cn->c, ev, 16)) > 0)
            ;
        if (k < 0) {
            l8c_close(cn->c);
            cn->c = NULL;
        }
    }
    if (cn->c)
        return cn->c;
    char why[L8C_ERRLEN];
    const char *path = cn->srv->socket ? cn->srv->socket : l8c_default_socket();
    int rc = l8c_connect(path, cn->name, &cn->c, why);
    if (rc == -EUSERS)
        oai_error_set(err, 429, "rate_limit_error", "too_many_clients", NULL, "llama8d has "
                      "as many clients as it takes: %s", why);
    else if (rc == -EPERM)
        oai_error_set(err, 503, "server_error", "permission_denied", NULL, "llama8d refused "
                      "this bridge (its user must be in llama8d's group): %s", why);
    else if (rc < 0)
        oai_error_set(err, 503, "server_error", "daemon_unavailable", NULL,
                      "llama8d is not running at %s: %s", path, why);
    return rc < 0 ? NULL : cn->c;
}

/* The tokenizer of the model c serves (or --tokenizer's). */
static const l8tok *server_tokenizer(struct server *s, struct l8c_client *c,
                                     struct oai_error *err)
{
    const char *path = s->tokenizer ? s->tokenizer : l8c_info(c)->model_dir;
    pthread_mutex_lock(&s->tok_mu);
    struct tok_ent *e = s->toks;
    while (e && strcmp(e->path, path))
        e = e->next;
    int rc = 0;
    if (!e && (e = calloc(1, sizeof *e))) {
        if ((e->path = strdup(path)) && (rc = l8tok_load(path, &e->tok)) == 0) {
            e->next = s->toks;
            s->toks = e;
        } else {
            free(e->path);
            free(e);
            e = NULL;
        }
    }
    pthread_mutex_unlock(&s->tok_mu);
    if (!e)
        oai_error_set(err, 500, "server_error", "no_tokenizer", NULL, "the tokenizer of %s "
                      "could not be loaded: %s", path, rc ? strerror(-rc) : "out of memory");
    return e ? e->tok : NULL;
}

/* ---------------------------------------------------------------- routes */

static enum MHD_Result models(struct MHD_Connection *mc, struct call *k, const char *url)
{
    struct oai_error err;
    struct l8c_client *c = conn_client(k->conn, &err);
    if (!c)
        return send_error(mc, &err, NULL);
    const char *model = l8c_info(c)->model_name;
    if (k->route == R_MODELS)
        return send_json(mc, MHD_HTTP_OK, oai_model_json(model, true));
    const char *want = url + strlen("/v1/models/");
    if (strcmp(want, model)) {
        oai_error_set(&err, 404, "invalid_request_error", "model_not_found", "model",
                      "no model \"%.*s\": llama8d serves \"%s\"", 100, want, model);
        return send_error(mc, &err, NULL);
    }
    return send_json(mc, MHD_HTTP_OK, oai_model_json(model, false));
}

/* The stream's next events into k->out: -1 when the client went away. */
static int stream_more(struct call *k)
{
    struct oai_gen *g = &k->gen;
    struct oai_error err;
    int rc = oai_gen_step(g, k->conn->fd, k->conn->srv->quit_fd, &err);
    if (rc == -ECONNABORTED)
        return -1;
    if (rc < 0) {
        k->ended = true;
        return oai_sse_error(&k->out, &err);
    }
    int w = oai_sse_delta(&k->out, &k->meta, g);
    oai_gen_taken(g);
    if (w == 0 && rc == 1) {
        k->ended = true;
        w = oai_sse_close(&k->out, &k->meta, g, k->req.include_usage);
    }
    return w;
}

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct call *k = cls;
    while (k->out.off == k->out.len) {
        if (k->ended)
            return MHD_CONTENT_READER_END_OF_STREAM;
        k->out.off = k->out.len = 0;
        if (stream_more(k) < 0)
            return MHD_CONTENT_READER_END_WITH_ERROR;
    }
    size_t n = k->out.len - k->out.off < max ? k->out.len - k->out.off : max;
    memcpy(buf, k->out.s + k->out.off, n);
    k->out.off += n;
    return (ssize_t)n;
}

/* A streamed reply: the status is known once the daemon took the request
 * (a constraint it cannot compile is refused before), so wait for that,
 * then stream. */
static enum MHD_Result start_stream(struct MHD_Connection *mc, struct call *k)
{
    struct oai_error err;
    int rc = 0;
    while (!k->gen.started && rc == 0)
        rc = oai_gen_step(&k->gen, k->conn->fd, k->conn->srv->quit_fd, &err);
    if (rc == -ECONNABORTED)
        return MHD_NO;
    if (rc < 0)
        return send_error(mc, &err, NULL);
    if (oai_sse_open(&k->out, &k->meta) < 0 || oai_sse_delta(&k->out, &k->meta, &k->gen) < 0)
        return MHD_NO;
    oai_gen_taken(&k->gen);
    if (rc == 1 && oai_sse_close(&k->out, &k->meta, &k->gen, k->req.include_usage) < 0)
        return MHD_NO;
    k->ended = rc == 1;
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384,
                                                               stream_read, k, NULL);
    if (!r)
        return MHD_NO;
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, "text/event-stream");
    MHD_add_response_header(r, MHD_HTTP_HEADER_CACHE_CONTROL, "no-cache");
    enum MHD_Result q = MHD_queue_response(mc, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    return q;
}

static enum MHD_Result generate(struct MHD_Connection *mc, struct call *k)
{
    struct oai_error err;
    enum oai_endpoint ep = k->route == R_CHAT ? OAI_CHAT : OAI_COMPLETIONS;
    if (oai_request_parse(ep, k->body ? k->body : "", k->len, &k->req, &err) < 0)
        return send_error(mc, &err, NULL);
    k->have_req = true;
    struct l8c_client *c = conn_client(k->conn, &err);
    const l8tok *tok = c ? server_tokenizer(k->conn->srv, c, &err) : NULL;
    if (!tok)
        return send_error(mc, &err, NULL);
    if (oai_meta_init(&k->meta, ep, l8c_info(c)->model_name) < 0) {
        oai_error_set(&err, 500, "server_error", NULL, NULL, "no random bytes for an id");
        return send_error(mc, &err, NULL);
    }
    if (oai_gen_start(&k->gen, c, tok, &k->req, &err) < 0) {
        if (k->gen.broken) {
            l8c_close(k->conn->c);
            k->conn->c = NULL;
        }
        return send_error(mc, &err, NULL);
    }
    k->have_gen = true;
    if (k->req.stream)
        return start_stream(mc, k);
    int rc = 0;
    while (rc == 0)
        rc = oai_gen_step(&k->gen, k->conn->fd, k->conn->srv->quit_fd, &err);
    if (rc == -ECONNABORTED)
        return MHD_NO;
    if (rc < 0)
        return send_error(mc, &err, NULL);
    return send_json(mc, MHD_HTTP_OK, oai_reply_whole(&k->meta, &k->gen));
}

/* ---------------------------------------------------------------- the request's head */

/* Constant time in the key's bytes: a guess tells nothing by its timing. */
static bool key_matches(const struct server *s, const char *got)
{
    size_t n = strlen(got);
    unsigned char d = n != s->key_len;
    for (size_t i = 0; i < s->key_len; i++)
        d |= (unsigned char)(s->key[i] ^ (i < n ? got[i] : 0));
    return d == 0;
}

static int check_key(const struct server *s, struct MHD_Connection *mc, struct oai_error *err)
{
    if (!s->key)
        return 0;
    const char *h = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7)) {
        oai_error_set(err, 401, "invalid_request_error", "invalid_api_key", NULL,
                      "no API key: send the header Authorization: Bearer KEY");
        return -1;
    }
    if (!key_matches(s, h + 7)) {
        oai_error_set(err, 401, "invalid_request_error", "invalid_api_key", NULL,
                      "incorrect API key");
        return -1;
    }
    return 0;
}

/* The route of url and method; else 404 or 405 (*allow: the methods). */
static int route_of(const char *url, const char *method, enum route *r, const char **allow,
                    struct oai_error *err)
{
    bool post = !strcmp(method, MHD_HTTP_METHOD_POST);
    bool get = !strcmp(method, MHD_HTTP_METHOD_GET) || !strcmp(method, MHD_HTTP_METHOD_HEAD);
    bool chat = !strcmp(url, "/v1/chat/completions");
    if (chat || !strcmp(url, "/v1/completions")) {
        *r = chat ? R_CHAT : R_COMPLETIONS;
        *allow = "POST";
        if (post)
            return 0;
    } else if (!strcmp(url, "/v1/models") || (!strncmp(url, "/v1/models/", 11) && url[11])) {
        *r = url[10] ? R_MODEL : R_MODELS;
        *allow = "GET, HEAD";
        if (get)
            return 0;
    } else {
        oai_error_set(err, 404, "invalid_request_error", "unknown_url", NULL, "no such path: "
                      "%.*s %.*s (llama8-openai serves POST /v1/chat/completions, POST "
                      "/v1/completions, GET /v1/models)", 16, method, 200, url);
        return -1;
    }
    oai_error_set(err, 405, "invalid_request_error", "method_not_allowed", NULL,
                  "%.*s takes %s, not %.*s", 200, url, *allow, 16, method);
    return -1;
}

/* What can be refused from the head alone, before reading a body. */
static int check_head(struct server *s, struct MHD_Connection *mc, struct call *k,
                      const char *url, const char *method, const char **allow,
                      struct oai_error *err)
{
    if (check_key(s, mc, err) < 0 || route_of(url, method, &k->route, allow, err) < 0)
        return -1;
    const char *cl = MHD_lookup_connection_value(mc, MHD_HEADER_KIND,
                                                 MHD_HTTP_HEADER_CONTENT_LENGTH);
    if (cl && strtoull(cl, NULL, 10) > s->max_body) {
        oai_error_set(err, 413, "invalid_request_error", "request_too_large", NULL,
                      "the body is %s bytes: at most %zu are taken (--max-body)", cl,
                      s->max_body);
        return -1;
    }
    return 0;
}

static void take_body(struct server *s, struct call *k, const char *data, size_t n)
{
    if (k->too_large || k->len + n > s->max_body) {
        k->too_large = true;   /* the rest is read and dropped, then 413 */
        return;
    }
    if (k->len + n + 1 > k->cap) {
        size_t cap = (k->len + n + 1) * 2;
        char *b = realloc(k->body, cap < s->max_body + 1 ? cap : s->max_body + 1);
        if (!b) {
            k->too_large = true;
            return;
        }
        k->body = b;
        k->cap = cap < s->max_body + 1 ? cap : s->max_body + 1;
    }
    memcpy(k->body + k->len, data, n);
    k->len += n;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *mc, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_size, void **ctx)
{
    struct server *s = cls;
    struct call *k = *ctx;
    struct oai_error err;
    if (!k) {
        const union MHD_ConnectionInfo *ci =
            MHD_get_connection_info(mc, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
        if (!ci || !ci->socket_context || !(k = calloc(1, sizeof *k)))
            return MHD_NO;
        k->conn = ci->socket_context;
        *ctx = k;
        const char *allow = NULL;
        if (check_head(s, mc, k, url, method, &allow, &err) < 0)
            return send_error(mc, &err, err.status == 405 ? allow : NULL);
        return MHD_YES;
    }
    if (*upload_size) {
        take_body(s, k, upload, *upload_size);
        *upload_size = 0;
        return MHD_YES;
    }
    if (k->too_large) {
        oai_error_set(&err, 413, "invalid_request_error", "request_too_large", NULL,
                      "the body is over %zu bytes (--max-body)", s->max_body);
        return send_error(mc, &err, NULL);
    }
    if (k->route == R_MODELS || k->route == R_MODEL)
        return models(mc, k, url);
    return generate(mc, k);
}

static void on_completed(void *cls, struct MHD_Connection *mc, void **ctx,
                         enum MHD_RequestTerminationCode toe)
{
    struct call *k = *ctx;
    if (!k)
        return;
    if (k->have_gen) {
        oai_gen_end(&k->gen);
        if (k->gen.broken) {   /* the daemon went away, or did not confirm a cancel */
            l8c_close(k->conn->c);
            k->conn->c = NULL;
        }
    }
    if (k->have_req)
        oai_request_free(&k->req);
    oai_buf_free(&k->out);
    free(k->body);
    free(k);
    *ctx = NULL;
}

static void peer_name(struct MHD_Connection *mc, char *out, size_t size)
{
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CLIENT_ADDRESS);
    char host[64] = "unix", port[16] = "";
    if (ci && ci->client_addr && ci->client_addr->sa_family != AF_UNIX)
        getnameinfo(ci->client_addr, sizeof(struct sockaddr_storage), host, sizeof host, port,
                    sizeof port, NI_NUMERICHOST | NI_NUMERICSERV);
    snprintf(out, size, "llama8-openai %s%s%s", host, port[0] ? " " : "", port);
}

static void on_connection(void *cls, struct MHD_Connection *mc, void **socket_ctx,
                          enum MHD_ConnectionNotificationCode toe)
{
    struct conn *cn = *socket_ctx;
    if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        if (cn)
            l8c_close(cn->c);
        free(cn);
        *socket_ctx = NULL;
        return;
    }
    const union MHD_ConnectionInfo *ci =
        MHD_get_connection_info(mc, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (!ci || !(cn = calloc(1, sizeof *cn)))
        return;   /* on_request refuses a connection without one */
    cn->srv = cls;
    cn->fd = ci->connect_fd;
    peer_name(mc, cn->name, sizeof cn->name);
    *socket_ctx = cn;
}

static void mhd_log(void *cls, const char *fmt, va_list ap)
{
    fputs("llama8-openai: libmicrohttpd: ", stderr);
    vfprintf(stderr, fmt, ap);
}

/* ---------------------------------------------------------------- the listening socket */

static int listen_unix(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    if (strlen(path) >= sizeof a.sun_path) {
        fprintf(stderr, "llama8-openai: --listen unix:%s: the path is too long\n", path);
        return -1;
    }
    strcpy(a.sun_path, path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct stat st;
    /* A socket left by a run that died: nobody answers on it. */
    if (fd >= 0 && lstat(path, &st) == 0 && S_ISSOCK(st.st_mode) &&
        connect(fd, (struct sockaddr *)&a, sizeof a) < 0 && errno == ECONNREFUSED)
        unlink(path);
    if (fd >= 0) {
        close(fd);
        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    }
    if (fd < 0 || bind(fd, (struct sockaddr *)&a, sizeof a) < 0 || listen(fd, 128) < 0) {
        fprintf(stderr, "llama8-openai: --listen unix:%s: %s\n", path, strerror(errno));
        if (fd >= 0)
            close(fd);
        return -1;
    }
    return fd;
}

/* HOST:PORT, HOST a name or a numeric address ([...] for IPv6). */
static int listen_inet(const char *spec)
{
    char host[256];
    const char *colon = strrchr(spec, ':');
    size_t hl = colon ? (size_t)(colon - spec) : 0;
    if (!colon || !hl || hl >= sizeof host || !colon[1]) {
        fprintf(stderr, "llama8-openai: --listen %s: give HOST:PORT or unix:PATH\n", spec);
        return -1;
    }
    memcpy(host, spec, hl);
    host[hl] = 0;
    if (host[0] == '[' && host[hl - 1] == ']') {
        memmove(host, host + 1, hl - 2);
        host[hl - 2] = 0;
    }
    struct addrinfo hints = { .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV },
                    *ai = NULL;
    int rc = getaddrinfo(host, colon + 1, &hints, &ai);
    if (rc) {
        fprintf(stderr, "llama8-openai: --listen %s: %s\n", spec, gai_strerror(rc));
        return -1;
    }
    int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one) < 0 ||
        bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 128) < 0) {
        fprintf(stderr, "llama8-openai: --listen %s: %s\n", spec, strerror(errno));
        if (fd >= 0)
            close(fd);
        fd = -1;
    }
    freeaddrinfo(ai);
    return fd;
}

/* Where fd listens, for the log (and tests: port 0 picks a free one). */
static void say_listening(int fd)
{
    struct sockaddr_storage a;
    socklen_t n = sizeof a;
    char host[64] = "?", port[16] = "?";
    if (getsockname(fd, (struct sockaddr *)&a, &n) == 0 && a.ss_family == AF_UNIX) {
        fprintf(stderr, "llama8-openai: listening on unix:%s\n",
                ((struct sockaddr_un *)&a)->sun_path);
        return;
    }
    getnameinfo((struct sockaddr *)&a, n, host, sizeof host, port, sizeof port,
                NI_NUMERICHOST | NI_NUMERICSERV);
    fprintf(stderr, "llama8-openai: listening on %s%s%s:%s\n", a.ss_family == AF_INET6 ? "[" : "",
            host, a.ss_family == AF_INET6 ? "]" : "", port);
}

/* systemd's socket, else --listen's. */
static int listening_socket(const char *spec, bool *activated)
{
    int n = sd_listen_fds(1);
    *activated = n > 0;
    if (n > 1) {
        fprintf(stderr, "llama8-openai: systemd passed %d sockets: give one\n", n);
        return -1;
    }
    if (n == 1) {
        if (sd_is_socket(SD_LISTEN_FDS_START, AF_UNSPEC, SOCK_STREAM, 1) <= 0) {
            fprintf(stderr, "llama8-openai: the socket systemd passed is not a listening "
                            "stream socket\n");
            return -1;
        }
        return SD_LISTEN_FDS_START;
    }
    if (n < 0)
        fprintf(stderr, "llama8-openai: sd_listen_fds: %s\n", strerror(-n));
    return !strncmp(spec, "unix:", 5) ? listen_unix(spec + 5) : listen_inet(spec);
}

/* ---------------------------------------------------------------- options */

static void usage(FILE *f)
{
    fprintf(f,
        "Usage: llama8-openai [OPTIONS]\n"
        "Serve the OpenAI HTTP API (POST /v1/chat/completions, POST /v1/completions,\n"
        "GET /v1/models) from llama8d, for tools that speak only that API. Each HTTP\n"
        "connection is one client of llama8d: its limits and errors apply to each.\n\n"
        "  --listen ADDR          HOST:PORT (a name, an IPv4 address or [IPv6]) or\n"
        "                         unix:PATH (default " DEFAULT_LISTEN "; port 0: any free one;\n"
        "                         systemd's socket instead, when it passes one)\n"
        "  --socket PATH          llama8d's socket (default $LLAMA8_SOCKET, else\n"
        "                         /run/llama8d/llama8d.sock)\n"
        "  --tokenizer FILE       tokenizer.json or model dir (default: the served model's)\n"
        "  --api-key-file FILE    requests must send Authorization: Bearer KEY, KEY the\n"
        "                         file's first line (else $LLAMA8_OPENAI_KEY, else the\n"
        "                         systemd credential api-key; none of them: no key asked)\n"
        "  --max-body BYTES       the largest request body (default 16M; K, M suffixes);\n"
        "                         larger ones get 413\n"
        "  -h, --help\n"
        "  -V, --version\n\n"
        "Requests: the OpenAI fields, with temperature (default 1, as OpenAI's; 0 is\n"
        "greedy), top_p, seed (default a random one), max_tokens or max_completion_tokens\n"
        "(default as many as llama8d allows and the context holds), stop (up to 16\n"
        "strings), logprobs (the chosen tokens' only: top_logprobs and completions'\n"
        "logprobs above 0 are refused), response_format (json_object, json_schema),\n"
        "tools and tool_choice (one call a reply, Llama 3.1's format), stream and\n"
        "stream_options.include_usage; the extensions top_k, min_p and\n"
        "repetition_penalty. What llama8d cannot honour is refused with a 400 that names\n"
        "the field: n or best_of above 1, frequency_penalty or presence_penalty other\n"
        "than 0 (use repetition_penalty), logit_bias, echo, suffix, non-text content,\n"
        "unknown fields.\n\n"
        "Errors are OpenAI's {\"error\": {\"message\", \"type\", \"param\", \"code\"}}: 400 a bad\n"
        "body, 401 a missing or wrong key, 404 an unknown path, 405 a wrong method, 413\n"
        "a body too large, 429 llama8d's client or request limit, 503 llama8d not\n"
        "running. A client that disconnects cancels its request.\n\n"
        "exit status: 0 stopped by SIGTERM or SIGINT, 1 could not start, 2 bad command\n"
        "line\n");
}

/* BYTES with an optional K or M suffix, 1 KiB to 1 GiB. */
static int parse_size(const char *arg, size_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(arg, &end, 10);
    unsigned shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : 0;
    if (shift)
        end++;
    if (errno || end == arg || *end || *arg == '-' || v > (1ull << 30) >> shift ||
        (v << shift) < 1024) {
        fprintf(stderr, "llama8-openai: --max-body: a size from 1K to 1024M, not %s\n", arg);
        return -1;
    }
    *out = (size_t)(v << shift);
    return 0;
}

/* The key: the first line of path, of $LLAMA8_OPENAI_KEY, or of the
 * systemd credential; NULL (and no error) when none is set. */
static int load_key(const char *path, struct server *s)
{
    char cred[4096];
    const char *dir = getenv("CREDENTIALS_DIRECTORY"), *env = getenv("LLAMA8_OPENAI_KEY");
    if (!path && !(env && *env) && dir) {
        snprintf(cred, sizeof cred, "%s/api-key", dir);
        if (access(cred, F_OK) == 0)
            path = cred;
    }
    char buf[1024];
    size_t n = 0;
    if (path) {
        FILE *f = fopen(path, "re");
        n = f ? fread(buf, 1, sizeof buf - 1, f) : 0;
        if (!f || ferror(f)) {
            fprintf(stderr, "llama8-openai: the API key file %s: %s\n", path, strerror(errno));
            if (f)
                fclose(f);
            return -1;
        }
        fclose(f);
    } else if (env && *env) {
        n = strlen(env) < sizeof buf - 1 ? strlen(env) : sizeof buf - 1;
        memcpy(buf, env, n);
    } else {
        return 0;
    }
    size_t line = 0;   /* the first line */
    while (line < n && buf[line] != '\n' && buf[line] != '\r')
        line++;
    const char *from = path ? path : "$LLAMA8_OPENAI_KEY";
    for (size_t i = 0; i < line; i++)
        if ((unsigned char)buf[i] <= ' ' || buf[i] == 0x7f) {
            fprintf(stderr, "llama8-openai: the API key in %s has a space or a control "
                            "character\n", from);
            return -1;
        }
    if (!line || line == sizeof buf - 1) {
        fprintf(stderr, "llama8-openai: the API key in %s is %s\n", from,
                line ? "longer than 1022 bytes" : "empty");
        return -1;
    }
    buf[line] = 0;
    n = line;
    s->key = strdup(buf);
    s->key_len = n;
    return s->key ? 0 : -1;
}

enum { O_LISTEN = 1, O_SOCKET, O_TOKENIZER, O_KEY, O_MAX_BODY };

/* -1 to go on, else the exit status. */
static int parse_args(int argc, char **argv, struct server *s, const char **listen_spec)
{
    static const struct option lo[] = {
        {"listen", required_argument, 0, O_LISTEN}, {"socket", required_argument, 0, O_SOCKET},
        {"tokenizer", required_argument, 0, O_TOKENIZER},
        {"api-key-file", required_argument, 0, O_KEY},
        {"max-body", required_argument, 0, O_MAX_BODY},
        {"help", no_argument, 0, 'h'}, {"version", no_argument, 0, 'V'}, {0, 0, 0, 0},
    };
    const char *key_file = NULL;
    int opt;
    while ((opt = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
        switch (opt) {
        case O_LISTEN: *listen_spec = optarg; break;
        case O_SOCKET: s->socket = optarg; break;
        case O_TOKENIZER: s->tokenizer = optarg; break;
        case O_KEY: key_file = optarg; break;
        case O_MAX_BODY:
            if (parse_size(optarg, &s->max_body) < 0)
                return 2;
            break;
        case 'h': usage(stdout); return 0;
        case 'V': printf("llama8-openai %s\n", L8_VERSION); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (optind < argc) {
        fprintf(stderr, "llama8-openai: no arguments are taken: %s\n", argv[optind]);
        return 2;
    }
    return load_key(key_file, s) < 0 ? 1 : -1;
}

/* ---------------------------------------------------------------- main */

static void server_free(struct server *s)
{
    while (s->toks) {
        struct tok_ent *e = s->toks;
        s->toks = e->next;
        l8tok_free(e->tok);
        free(e->path);
        free(e);
    }
    free(s->key);
    if (s->quit_fd >= 0)
        close(s->quit_fd);
    pthread_mutex_destroy(&s->tok_mu);
}

static struct MHD_Daemon *start_http(struct server *s, int fd)
{
    return MHD_start_daemon(MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD |
                            MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, s,
                            MHD_OPTION_EXTERNAL_LOGGER, mhd_log, NULL,
                            MHD_OPTION_LISTEN_SOCKET, fd,
                            MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
                            MHD_OPTION_NOTIFY_COMPLETED, on_completed, s,
                            MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)IDLE_TIMEOUT_S,
                            MHD_OPTION_CONNECTION_LIMIT, (unsigned)MAX_CONNECTIONS,
                            MHD_OPTION_END);
}

int main(int argc, char **argv)
{
    struct server s = { .max_body = DEFAULT_MAX_BODY, .quit_fd = -1 };
    pthread_mutex_init(&s.tok_mu, NULL);
    const char *listen_spec = DEFAULT_LISTEN;
    int rc = parse_args(argc, argv, &s, &listen_spec);
    if (rc >= 0) {
        server_free(&s);
        return rc;
    }
    /* The connection threads inherit the mask: the signals come to sigwait. */
    sigset_t sigs;
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGTERM);
    sigaddset(&sigs, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigs, NULL);
    signal(SIGPIPE, SIG_IGN);
    bool activated;
    int fd = listening_socket(listen_spec, &activated);
    s.quit_fd = eventfd(0, EFD_CLOEXEC);
    struct MHD_Daemon *d = fd >= 0 && s.quit_fd >= 0 ? start_http(&s, fd) : NULL;
    if (!d) {
        if (fd >= 0)
            fprintf(stderr, "llama8-openai: libmicrohttpd did not start\n");
        server_free(&s);
        return 1;
    }
    say_listening(fd);
    if (!s.key && !activated && strncmp(listen_spec, "unix:", 5))
        fprintf(stderr, "llama8-openai: no API key: every local user can reach llama8d "
                        "through this port (--api-key-file)\n");
    sd_notify(0, "READY=1");
    int sig = 0;
    sigwait(&sigs, &sig);
    sd_notify(0, "STOPPING=1");
    fprintf(stderr, "llama8-openai: %s: stopping\n", strsignal(sig));
    /* Wakes every request waiting on the daemon: they cancel and end. */
    uint64_t one = 1;
    if (write(s.quit_fd, &one, sizeof one) < 0)
        fprintf(stderr, "llama8-openai: waking the requests: %s\n", strerror(errno));
    MHD_stop_daemon(d);   /* closes fd too */
    if (!activated && !strncmp(listen_spec, "unix:", 5))
        unlink(listen_spec + 5);
    server_free(&s);
    return 0;
}
