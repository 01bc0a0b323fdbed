/* shoal serve STORAGE — a group member without a mount [C2]. */
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/cli.h"
#include "cli/daemon.h"
#include "common/log.h"
#include "group/group.h"
#include "server/server.h"

int shoal_cmd_serve(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_SERVE, "serve", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        if (cli.npos != 1)
                return shoal_cli_fail(&cli, "expected STORAGE (see 'shoal serve --help')");
        struct shoal_node_config cfg;
        if (shoal_cli_node_config(&cli, cli.pos[0], &cfg))
                return 2;
        cfg.check_store = true;
        if (!cfg.cache_group)
                return shoal_cli_fail(&cli, "a member needs --cache-group NAME");
        if (cfg.no_sharing)
                return shoal_cli_fail(&cli, "--no-sharing makes no sense for a dedicated cache "
                                            "node");

        if (shoal_cli_background(&cli))
                return 2;
        /* Every thread inherits this mask; the main thread takes the signals with sigwait. */
        sigset_t set;
        shoal_daemon_block_signals(&set);

        char err[1024];
        struct shoal_node *node;
        rc = shoal_node_start(&cfg, &node, err, sizeof(err));
        if (rc)
                return shoal_daemon_report("serve", err, shoal_cli_start_code(rc));
        char tcp[64], iorpc[64];
        shoal_server_addrs(node->server, tcp, iorpc);
        log_info("serve", "member %s of group %s ready: tcp pool %s, iorpc %s",
                 shoal_group_self_id(node->group), cfg.cache_group, tcp,
                 iorpc[0] ? iorpc : "disabled");
        shoal_daemon_ready();
        /* SIGHUP is the log thread's; SIGINT and SIGTERM end the member. */
        sigdelset(&set, SIGHUP);
        if (shoal_daemon_hup_start("serve"))
                log_warn("serve", "no SIGHUP thread: SIGHUP will not reopen the log");
        int sig = 0;
        sigwait(&set, &sig);
        shoal_daemon_hup_stop();
        log_info("serve", "signal %d: leaving the group", sig);
        shoal_node_stop(node);
        return 0;
}
