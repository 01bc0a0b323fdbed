/* shoal ping HOST[:PORT] — checks each transport of a member, like rping [C6]: the TCP pool
 * (connect, handshake, round trips), then IORPC at the address the member gives, then RDMA with
 * --rdma-network. Without PORT, the member's record in --cache-group names its pool port. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "node/local_secret.h"
#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "transport/client_conn.h"
#include "wire/handshake.h"
#include "transport/rdma_client.h"
#include "wire/wire.h"

#define PINGS           5
#define PING_CONNECT_NS (5 * SHOAL_NS_PER_SEC) /* connecting and the handshake */

static int ping_service(const char *what, const char *addr, uint8_t service,
                        const struct shoal_hs_key *key, struct shoal_wire_info *info)
{
        uint64_t t0 = shoal_now_ns();
        uint64_t deadline = t0 + PING_CONNECT_NS;
        struct shoal_rpc_peer peer = {0};
        int fd = shoal_rpc_connect(addr, service, key, deadline, &peer);
        if (fd < 0) {
                printf("%-8s %-21s FAILED: %s\n", what, addr,
                       fd == -EACCES ? "authentication failed (group secret? see the log)"
                                     : strerror(-fd));
                return 1;
        }
        double connect_ms = (double)(shoal_now_ns() - t0) / (double)SHOAL_NS_PER_MS;
        double min = 1e9, max = 0, sum = 0;
        uint8_t hdr[SHOAL_WIRE_HDR_LEN], body[2048];
        int rc = 0;
        for (unsigned i = 0; i < PINGS && !rc; i++) {
                uint64_t p0 = shoal_now_ns();
                uint8_t payload[8];
                memcpy(payload, &p0, sizeof(payload));
                struct shoal_wire_hdr h;
                rc = shoal_rpc_send_frame(fd, SHOAL_MSG_PING, 0, 100 + i, payload, sizeof(payload),
                                          deadline);
                if (!rc)
                        rc = shoal_rpc_recv_frame(fd, &h, hdr, body, sizeof(body), deadline);
                if (!rc && (h.type != SHOAL_MSG_PONG || h.id != 100 + i ||
                            h.body_len != sizeof(payload) || memcmp(body, payload, 8)))
                        rc = -EPROTO;
                double ms = (double)(shoal_now_ns() - p0) / (double)SHOAL_NS_PER_MS;
                min = ms < min ? ms : min;
                max = ms > max ? ms : max;
                sum += ms;
        }
        if (!rc && info) {
                struct shoal_wire_hdr h;
                rc = shoal_rpc_send_frame(fd, SHOAL_MSG_INFO, 0, 999, NULL, 0, deadline);
                if (!rc)
                        rc = shoal_rpc_recv_frame(fd, &h, hdr, body, sizeof(body), deadline);
                if (!rc && h.type == SHOAL_MSG_ERROR && h.status == SHOAL_ST_RPC_DISABLED)
                        info->iorpc_addr[0] = '\0';
                else if (!rc && (h.type != SHOAL_MSG_INFO_RESP ||
                                 shoal_wire_info_decode(body, h.body_len, info)))
                        rc = -EPROTO;
        }
        close(fd);
        if (rc) {
                printf("%-8s %-21s FAILED after connecting: %s\n", what, addr, strerror(-rc));
                return 1;
        }
        printf("%-8s %-21s ok: member %s%s, connect+handshake %.2f ms, rtt min/avg/max "
               "%.3f/%.3f/%.3f ms\n",
               what, addr, peer.member_id[0] ? peer.member_id : "?",
               key && key->set ? " (proved the group secret)" : "", connect_ms, min, sum / PINGS,
               max);
        return 0;
}

/* The pool address of the live provider of GROUP that WHO names (its IP, its hostname or its
 * member id) into ADDR (SHOAL_ADDR_LEN). Returns 0 or the exit code after printing why. */
static int lookup_member(const char *meta, const char *group, const char *who, char *addr)
{
        char err[1024];
        struct shoal_member *m = NULL;
        size_t n = 0;
        if (shoal_group_list_once(meta, group, 0, &m, &n, err, sizeof(err))) {
                fprintf(stderr, "shoal ping: %s\n", err);
                return 1;
        }
        size_t found = 0, len = strlen(who);
        for (size_t i = 0; i < n; i++) {
                const char *tcp = m[i].tcp_addr;
                const char *colon = strrchr(tcp, ':');
                bool ip = colon && (size_t)(colon - tcp) == len && !strncmp(tcp, who, len);
                if (!m[i].alive || m[i].role != SHOAL_ROLE_PROVIDER || !tcp[0] ||
                    !(ip || !strcmp(m[i].host, who) || !strcmp(m[i].id, who)))
                        continue;
                if (found++)
                        break;
                shoal_strlcpy(addr, tcp, SHOAL_ADDR_LEN);
        }
        free(m);
        if (found == 1)
                return 0;
        if (found > 1)
                fprintf(stderr,
                        "shoal ping: %s names several live members of group %s: give HOST:PORT "
                        "or a member id (see 'shoal group')\n",
                        who, group);
        else
                fprintf(stderr,
                        "shoal ping: no live member %s in group %s (see 'shoal group --cache-group "
                        "%s')\n",
                        who, group, group);
        return 1;
}

/* Without a group secret, the host-local one when this process may read it, as every client
 * does (node/local_secret.h). */
static void use_local_secret(struct shoal_node_config *cfg, uint8_t local[SHOAL_LOCAL_SECRET_LEN])
{
        if (shoal_secret_set(&cfg->group_secret) || !cfg->local_secret_file)
                return;
        char err[1200];
        int rc = shoal_local_secret_read(cfg->local_secret_file, local, err, sizeof(err));
        if (rc < 0)
                log_warn("ping", "%s; pinging without a secret", err);
        if (!rc)
                cfg->group_secret =
                        (struct shoal_secret){.bytes = local, .len = SHOAL_LOCAL_SECRET_LEN};
}

int shoal_cmd_ping(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_PING, "ping", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        if (cli.npos != 1 || !*cli.pos[0])
                return shoal_cli_fail(&cli, "expected HOST[:PORT], a member's TCP pool address "
                                            "(see 'shoal group')");
        struct shoal_node_config cfg;
        if (shoal_cli_node_config(&cli, "file:///", &cfg))
                return 2;
        /* [M3]: a bad --rdma-network is a usage error before anything is sent */
        char ifs[SHOAL_FAB_MAX_IFACES][32];
        int nif = 0;
        if (cfg.rdma_network) {
                char err[512];
                nif = shoal_node_check_rdma(cfg.rdma_network, cfg.rdma_provider, ifs, err,
                                            sizeof(err));
                if (nif < 0)
                        return shoal_cli_fail(&cli, "%s", err);
        }
        char addr[SHOAL_ADDR_LEN];
        if (strchr(cli.pos[0], ':')) {
                if (shoal_strlcpy(addr, cli.pos[0], sizeof(addr)) >= sizeof(addr))
                        return shoal_cli_fail(&cli, "invalid HOST:PORT %s", cli.pos[0]);
        } else {
                if (!cfg.cache_group)
                        return shoal_cli_fail(&cli,
                                              "%s has no :PORT; give HOST:PORT, or --cache-group "
                                              "(and --meta) to find the member's pool port",
                                              cli.pos[0]);
                rc = lookup_member(cfg.meta_url, cfg.cache_group, cli.pos[0], addr);
                if (rc)
                        return rc;
        }
        uint8_t local[SHOAL_LOCAL_SECRET_LEN];
        use_local_secret(&cfg, local);
        struct shoal_hs_key key;
        if (shoal_hs_key_init(&key, &cfg.group_secret))
                return shoal_cli_fail(&cli, "the group secret must be at least %d bytes",
                                      SHOAL_SECRET_MIN);
        struct shoal_wire_info info;
        memset(&info, 0, sizeof(info));
        int bad = ping_service("tcp", addr, SHOAL_SERVICE_POOL, &key, &info);
        if (bad) {
                shoal_hs_key_clear(&key);
                return 1;
        }
        printf("%-8s volume %s, block size %u\n", "member",
               info.volume_url[0] ? info.volume_url : "?", info.block_size);
        if (info.iorpc_addr[0])
                bad |= ping_service("iorpc", info.iorpc_addr, SHOAL_SERVICE_IORPC, &key, NULL);
        else
                printf("%-8s rpc disabled on this member\n", "iorpc");
        shoal_hs_key_clear(&key);
        if (nif > 0) {
                if (!info.n_rdma) {
                        printf("%-8s this member does not listen for RDMA\n", "rdma");
                        return 1;
                }
                for (int i = 0; i < nif; i++)
                        if (shoal_rdma_ping(shoal_fab_provider(cfg.rdma_provider), ifs[i],
                                            info.rdma_addr[i % info.n_rdma], &cfg.group_secret))
                                bad = 1;
        }
        return bad;
}
