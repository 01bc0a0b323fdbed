/* shoal ping HOST:PORT — checks each transport of a member, like rping [C6]: the TCP pool
 * (connect, handshake, round trips), then IORPC at the address the member gives. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"
#include "rpc/client_conn.h"
#include "rpc/handshake.h"
#include "rpc/rdma.h"
#include "rpc/wire.h"

#define PINGS 5

static int ping_service(const char *what, const char *addr, uint8_t service,
                        const struct shoal_hs_key *key, struct shoal_wire_info *info)
{
        uint64_t t0 = shoal_now_ns();
        uint64_t deadline = t0 + 5ULL * 1000000000ULL;
        struct shoal_rpc_peer peer = {0};
        int fd = shoal_rpc_connect(addr, service, key, deadline, &peer);
        if (fd < 0) {
                printf("%-8s %-21s FAILED: %s\n", what, addr,
                       fd == -EACCES ? "authentication failed (group secret? see the log)"
                                     : strerror(-fd));
                return 1;
        }
        double connect_ms = (double)(shoal_now_ns() - t0) / 1e6;
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
                double ms = (double)(shoal_now_ns() - p0) / 1e6;
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

int shoal_cmd_ping(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_PING, "ping", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        if (cli.npos != 1 || !strchr(cli.pos[0], ':'))
                return shoal_cli_fail(&cli, "expected HOST:PORT, the member's TCP pool address "
                                            "(see 'shoal group')");
        struct shoal_node_config cfg;
        if (shoal_cli_node_config(&cli, "file:///", &cfg))
                return 2;
        struct shoal_hs_key key;
        if (shoal_hs_key_init(&key, &cfg.group_secret))
                return shoal_cli_fail(&cli, "the group secret must be at least %d bytes",
                                      SHOAL_SECRET_MIN);
        struct shoal_wire_info info;
        memset(&info, 0, sizeof(info));
        int bad = ping_service("tcp", cli.pos[0], SHOAL_SERVICE_POOL, &key, &info);
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
        if (cfg.rdma_network) {
                char ifs[SHOAL_FAB_MAX_IFACES][32];
                int nif = shoal_fab_parse_ifaces(cfg.rdma_network, ifs);
                if (nif < 0)
                        return shoal_cli_fail(&cli, "invalid --rdma-network %s", cfg.rdma_network);
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
