/* shoal group --cache-group NAME — the members as a table [C7]: addresses of every transport,
 * liveness and the cache use each member published with its last heartbeat. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "cli/cli.h"
#include "common/util.h"
#include "group/group.h"

/* One token, so that scripts can take columns with awk: "12.0MiB", "512B". */
static void fmt_size(uint64_t bytes, char *out, size_t outlen)
{
        char b[32];
        shoal_format_bytes(bytes, b, sizeof(b));
        size_t j = 0;
        for (size_t i = 0; b[i] && j + 1 < outlen; i++)
                if (b[i] != ' ')
                        out[j++] = b[i];
        out[j] = '\0';
}

/* The member's RDMA addresses, comma-separated (one token), or "-". */
static void fmt_rdma(const struct shoal_member *m, char *out, size_t outlen)
{
        size_t len = 0;
        out[0] = '\0';
        for (unsigned i = 0; i < m->n_rdma && i < SHOAL_RDMA_ADDRS; i++) {
                int n = snprintf(out + len, outlen - len, "%s%s", i ? "," : "", m->rdma_addr[i]);
                if (n < 0 || (size_t)n >= outlen - len)
                        break;
                len += (size_t)n;
        }
        if (!out[0])
                shoal_strlcpy(out, "-", outlen);
}

/* S as one token of printable characters (registry contents are anyone's), or "-". */
static const char *token(const char *s, char *out, size_t outlen)
{
        size_t o = 0;
        for (; *s && o + 1 < outlen; s++)
                out[o++] = (unsigned char)*s <= 0x20 || *s == 0x7f ? '?' : *s;
        out[o] = '\0';
        return o ? out : "-";
}

/* What the member is doing for the group, one token. */
static const char *state_of(const struct shoal_member *m)
{
        if (m->alive)
                return m->role == SHOAL_ROLE_PROVIDER && m->weight == 0 ? "drain" : "live";
        if (m->grace_left_ms)
                return m->leaving ? "leaving" : "away";
        return "gone";
}

/* shoal group --set-weight MEMBER WEIGHT */
static int set_weight(struct shoal_cli *cli, const struct shoal_node_config *cfg)
{
        const char *member = cli->val[OPT_SET_WEIGHT];
        uint64_t w;
        if (cli->npos != 1)
                return shoal_cli_fail(cli, "--set-weight MEMBER needs one WEIGHT after it");
        if (shoal_parse_u64(cli->pos[0], 1000000, &w))
                return shoal_cli_fail(cli, "invalid weight %s: expected 0 to 1000000", cli->pos[0]);
        char err[1024];
        struct shoal_member was;
        int rc = shoal_group_set_weight(cfg->meta_url, cfg->cache_group, member, (uint32_t)w, &was,
                                        err, sizeof(err));
        if (rc) {
                fprintf(stderr, "shoal group: %s\n", err);
                return rc == -ENOENT || rc == -EINVAL ? 2 : 1;
        }
        printf("member %s (%s): weight %" PRIu64 " (was %" PRIu32 ")%s; members and clients apply "
               "it within a few heartbeats\n",
               was.id, was.tcp_addr[0] ? was.tcp_addr : "-", w, was.weight,
               w == 0 ? ", draining" : "");
        return 0;
}

int shoal_cmd_group(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_GROUP, "group", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        if (cli.npos && !cli.val[OPT_SET_WEIGHT])
                return shoal_cli_fail(&cli, "unexpected argument %s", cli.pos[0]);
        if (!cli.val[OPT_CACHE_GROUP])
                return shoal_cli_fail(&cli, "missing --cache-group NAME");
        struct shoal_node_config cfg;
        /* Reuse the common conversion for --meta's default; STORAGE is not needed here. */
        if (shoal_cli_node_config(&cli, "file:///", &cfg))
                return 2;
        /* Opening an SQLite registry creates it: look first, so that a mistyped path is
         * reported as such and not listed as an empty group (nor left behind as a new file). */
        const char *path = !strncmp(cfg.meta_url, "sqlite3://", 10) ? cfg.meta_url + 10 : NULL;
        struct stat st;
        if (path && *path && stat(path, &st)) {
                fprintf(stderr,
                        "shoal group: no registry %s: %s (members create it when they "
                        "join with --meta %s)\n",
                        cfg.meta_url, strerror(errno), cfg.meta_url);
                return 1;
        }
        if (cli.val[OPT_SET_WEIGHT])
                return set_weight(&cli, &cfg);
        char err[1024];
        struct shoal_member *m = NULL;
        size_t n = 0;
        rc = shoal_group_list_once(cfg.meta_url, cfg.cache_group, 0, &m, &n, err, sizeof(err));
        if (rc) {
                fprintf(stderr, "shoal group: %s\n", err);
                return 1;
        }
        if (!n) {
                free(m);
                fprintf(stderr,
                        "shoal group: no group %s in %s (no member has joined it, or all "
                        "have left)\n",
                        cfg.cache_group, cfg.meta_url);
                return 1;
        }
        printf("%-32s  %-16s  %-8s  %6s  %-21s  %-21s  %-21s  %-5s  %9s  %9s  %-7s  %6s  %s\n",
               "ID", "HOST", "ROLE", "WEIGHT", "TCP POOL", "IORPC", "RDMA", "ALIVE", "CACHE",
               "CAPACITY", "STATE", "GRACE", "METRICS");
        size_t live = 0;
        for (size_t i = 0; i < n; i++) {
                char used[32], cap[32], rdma[SHOAL_RDMA_ADDRS * SHOAL_ADDR_LEN];
                fmt_size(m[i].cache_bytes, used, sizeof(used));
                if (m[i].cache_capacity == UINT64_MAX)
                        shoal_strlcpy(cap, "unlimited", sizeof(cap));
                else if (m[i].cache_capacity == 0)
                        shoal_strlcpy(cap, "-", sizeof(cap)); /* no disk cache */
                else
                        fmt_size(m[i].cache_capacity, cap, sizeof(cap));
                fmt_rdma(&m[i], rdma, sizeof(rdma));
                char grace[24] = "-", metrics[SHOAL_ADDR_LEN];
                if (m[i].grace_left_ms)
                        snprintf(grace, sizeof(grace), "%" PRIu64 "s",
                                 (m[i].grace_left_ms + 999) / 1000);
                printf("%-32s  %-16.16s  %-8s  %6" PRIu32
                       "  %-21s  %-21s  %-21s  %-5s  %9s  %9s  %-7s  %6s  %s\n",
                       m[i].id, m[i].host[0] ? m[i].host : "-",
                       m[i].role == SHOAL_ROLE_PROVIDER ? "provider" : "consumer", m[i].weight,
                       m[i].tcp_addr[0] ? m[i].tcp_addr : "-",
                       m[i].iorpc_addr[0] ? m[i].iorpc_addr : "-", rdma, m[i].alive ? "yes" : "no",
                       used, cap, state_of(&m[i]), grace,
                       token(m[i].metrics_addr, metrics, sizeof(metrics)));
                live += m[i].alive;
        }
        printf("%zu members, %zu alive\n", n, live);
        free(m);
        return 0;
}
