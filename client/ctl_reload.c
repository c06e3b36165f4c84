/* ctl_reload.c: `llama8ctl reload`: the daemon reads its configuration again
 * (what SIGHUP does), and says here what came of it: the unit's ExecReload,
 * so that `systemctl reload llama8d` waits for the reload and fails with
 * the daemon's reason when the file is refused. */
#include "ctl_ipc.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

static void reload_usage(FILE *f)
{
    fprintf(f, "Usage: llama8ctl reload [--socket PATH] [--wait]\n"
               "Have llama8d read its configuration file and flags again, as SIGHUP does:\n"
               "log_level, spin_us, max_clients, admin_clients, max_clients_per_uid and the\n"
               "timeouts apply at once, other changed keys wait for a restart (listed here).\n"
               "Root and the daemon's user only; they may connect beyond max_clients\n"
               "(admin_clients).\n\n"
               "  --socket PATH          daemon socket (default $LLAMA8_SOCKET, else\n"
               "                         /run/llama8d/llama8d.sock)\n"
               CTL_WAIT_HELP
               "  -h, --help\n\n"
               "exit status: 0 reloaded, 1 the file was refused (the running configuration\n"
               "stays) or the daemon said no, 2 bad command line, 3 no daemon at the socket\n");
}

int ctl_reload(int argc, char **argv)
{
    const char *sock = NULL;
    int rc = ctl_plain_opts(argc, argv, reload_usage, &sock, NULL);
    if (rc >= 0)
        return rc;
    struct l8c_client *c;
    rc = ctl_connect(sock, "llama8ctl reload", &c);
    if (rc != CTL_OK)
        return rc;
    struct l8c_status s;
    rc = l8c_reload(c, &s, 30000);
    if (rc < 0) {
        fprintf(stderr, "llama8ctl: reload: %s\n", ctl_why(c, rc));
        l8c_close(c);
        return CTL_FAIL;
    }
    printf("llama8d reloaded its configuration (log level %s)", s.log_level);
    if (s.config_restart[0])
        printf("; waiting for a restart: %s", s.config_restart);
    printf("\n");
    l8c_close(c);
    return CTL_OK;
}
