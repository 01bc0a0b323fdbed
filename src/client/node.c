#include "client/node.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "client/push.h"
#include "client/reader.h"
#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/http.h"
#include "net/iface.h"
#include "net/remote.h"
#include "rpc/rdma.h"
#include "rpc/server.h"
#include "store/store.h"

/* The group agent's usage callback: the cache use this member publishes with each heartbeat. A
 * process without a disk cache publishes a capacity of 0. */
static void publish_usage(void *arg, uint64_t *bytes, uint64_t *capacity)
{
        struct shoal_cache_usage u;
        shoal_cache_usage(arg, &u);
        *bytes = u.bytes;
        *capacity = u.dirs || u.dirs_failing ? u.capacity : 0;
}

int shoal_node_check_rdma(const char *network, const char *provider, char (*ifs)[32], char *err,
                          size_t errlen)
{
        int n = shoal_fab_parse_ifaces(network, ifs);
        if (n < 0) {
                snprintf(err, errlen,
                         "invalid --rdma-network %s: expected IF1[:IF2...] (at most %d)", network,
                         SHOAL_FAB_MAX_IFACES);
                return -EINVAL;
        }
        /* Open and close each interface on the provider: that resolves its IPv4 and asks the
         * provider for a domain on it, which is every check that needs no peer. */
        for (int i = 0; i < n; i++) {
                struct shoal_fab f;
                int rc = shoal_fab_open(&f, shoal_fab_provider(provider), ifs[i], err, errlen);
                shoal_fab_close(&f);
                if (rc)
                        return rc < 0 ? rc : -ENODEV;
        }
        return n;
}

/* [S1] on every transport, before anything starts: without a group secret a member listens on
 * loopback only, for the TCP pool and IORPC (IP) and for RDMA (each interface's address). The
 * servers check again themselves. Returns 0 or -EPERM with one line in ERR. */
static int check_listen_rule(const struct shoal_node_config *cfg, const char *ip,
                             char rdma_if[][32], int n_rdma_if, char *err, size_t errlen)
{
        if (shoal_secret_set(&cfg->group_secret))
                return 0;
        if (strncmp(ip, "127.", 4)) {
                snprintf(err, errlen,
                         "refusing to listen on %s without a group secret: set "
                         "--group-secret-file or SHOAL_GROUP_SECRET (or use --group-ip 127.0.0.1)",
                         ip);
                return -EPERM;
        }
        for (int i = 0; i < n_rdma_if; i++) {
                char rip[64];
                /* An interface without IPv4 is reported by the RDMA start-up itself. */
                if (!shoal_iface_ipv4(rdma_if[i], rip, sizeof(rip)) && strncmp(rip, "127.", 4)) {
                        snprintf(err, errlen,
                                 "refusing to listen for RDMA on %s (%s) without a group secret: "
                                 "set --group-secret-file or SHOAL_GROUP_SECRET (or use "
                                 "--rdma-network lo)",
                                 rdma_if[i], rip);
                        return -EPERM;
                }
        }
        return 0;
}

struct shoal_node *shoal_node_start(const struct shoal_node_config *cfg, char *err, size_t errlen,
                                    int *exit_code)
{
        *exit_code = 1;
        struct shoal_node *n = calloc(1, sizeof(*n));
        if (!n) {
                snprintf(err, errlen, "out of memory");
                return NULL;
        }
        n->cfg = *cfg;
        if (shoal_volume_init(&n->vol, cfg->storage, cfg->block_size)) {
                snprintf(err, errlen, "invalid storage %s or block size %u", cfg->storage,
                         cfg->block_size);
                *exit_code = 2;
                goto out_free;
        }
        bool sharing = cfg->cache_group && cfg->serve && !cfg->no_sharing;
        char ip[64] = "127.0.0.1";
        if (cfg->group_ip && cfg->group_network) {
                snprintf(err, errlen, "give --group-ip or --group-network, not both");
                *exit_code = 2;
                goto out_free;
        }
        if (cfg->group_ip) {
                struct in_addr a;
                if (inet_pton(AF_INET, cfg->group_ip, &a) != 1) {
                        snprintf(err, errlen, "invalid --group-ip %s: expected an IPv4 address",
                                 cfg->group_ip);
                        *exit_code = 2;
                        goto out_free;
                }
                shoal_strlcpy(ip, cfg->group_ip, sizeof(ip));
        } else if (cfg->group_network) {
                int rc = shoal_iface_ipv4(cfg->group_network, ip, sizeof(ip));
                if (rc) {
                        snprintf(err, errlen, "--group-network %s: %s", cfg->group_network,
                                 rc == -ENODEV ? "no such interface" : "it has no IPv4 address");
                        *exit_code = 2;
                        goto out_free;
                }
        }

        /* [M3]: with --rdma-network every interface must come up on the provider, with or
         * without a group, or the node does not start (a configuration problem: exit 2);
         * without it, no libfabric at all. */
        char rdma_if[SHOAL_FAB_MAX_IFACES][32];
        int n_rdma_if = 0;
        if (cfg->rdma_network) {
                n_rdma_if = shoal_fab_parse_ifaces(cfg->rdma_network, rdma_if);
                if (n_rdma_if < 0) {
                        snprintf(err, errlen,
                                 "invalid --rdma-network %s: expected IF1[:IF2...] (at most %d)",
                                 cfg->rdma_network, SHOAL_FAB_MAX_IFACES);
                        *exit_code = 2;
                        goto out_free;
                }
        }
        /* The listen rule first: it needs no libfabric. */
        if (sharing && check_listen_rule(cfg, ip, rdma_if, n_rdma_if, err, errlen)) {
                *exit_code = 2;
                goto out_free;
        }
        if (n_rdma_if > 0 && shoal_node_check_rdma(cfg->rdma_network, cfg->rdma_provider, rdma_if,
                                                   err, errlen) < 0) {
                *exit_code = 2;
                goto out_free;
        }

        struct shoal_store_config scfg = {
                .url = n->vol.url,
                .endpoint = cfg->endpoint,
                .max_downloads = cfg->max_downloads,
                .upload_part_size = cfg->upload_part_size,
                /* Uploads take their part buffers from a budget as large as the read
                 * buffers' (--buffer-size bounds each). */
                .upload_buffer_bytes = cfg->buffer_size,
        };
        n->store = shoal_store_open(&scfg, err, errlen);
        if (!n->store) {
                /* A URL we cannot use is the user's to fix: exit 2. */
                if (strncmp(cfg->storage, "file://", 7) || !strstr(err, "cannot open"))
                        *exit_code = 2;
                goto out_free;
        }

        struct shoal_cache_config ccfg = {
                .dirs = cfg->cache_size ? cfg->cache_dir : NULL,
                .size_bytes = cfg->cache_size,
                .free_space_ratio = cfg->free_space_ratio,
                .volume = &n->vol,
        };
        n->cache = shoal_cache_open(&ccfg, err, errlen);
        if (!n->cache)
                goto out_store;

        const char *rdma_prov = shoal_fab_provider(cfg->rdma_provider);
        if (cfg->cache_group && n_rdma_if > 0) {
                struct shoal_rdma_client_config rc = {.provider = rdma_prov,
                                                      .ifaces = rdma_if,
                                                      .n_if = (unsigned)n_rdma_if,
                                                      .secret = cfg->group_secret,
                                                      .bounce_size = n->vol.block_size};
                n->rdma_client = shoal_rdma_client_create(&rc, err, errlen);
                if (!n->rdma_client)
                        goto out_cache;
        }
        if (cfg->cache_group) {
                struct shoal_remote_config rmc = {.secret = cfg->group_secret,
                                                  .use_iorpc = cfg->use_iorpc || n_rdma_if > 0,
                                                  .rdma = n->rdma_client};
                n->remote = shoal_remote_create(&rmc);
                if (!n->remote) {
                        snprintf(err, errlen, "cannot create the group client");
                        goto out_rdma_client;
                }
        }

        struct shoal_reader_config rcfg = {
                .vol = &n->vol,
                .store = n->store,
                .cache = n->cache,
                .remote = n->remote,
                .sharing = sharing,
                .buffer_bytes = cfg->buffer_size,
                .readahead = cfg->prefetch,
                .prefetch_threads = cfg->prefetch ? SHOAL_MIN(cfg->prefetch, 8u) : 0,
        };
        n->reader = shoal_reader_create(&rcfg, err, errlen);
        if (!n->reader)
                goto out_remote;
        if (n->rdma_client) {
                size_t blen;
                void *bbase = shoal_reader_buffers(n->reader, &blen);
                if (shoal_rdma_client_register(n->rdma_client, bbase, blen, err, errlen))
                        goto out_reader;
        }

        /* The member id is drawn here, not at the join, because the handshake proofs of the
         * servers below carry it (rpc/handshake.h). */
        char member_id[SHOAL_MEMBER_ID_LEN + 1] = "";
        if (cfg->cache_group) {
                unsigned char rnd[SHOAL_MEMBER_ID_LEN / 2];
                int rc = shoal_random_bytes(rnd, sizeof(rnd));
                if (rc) {
                        snprintf(err, errlen, "cannot draw a member id: %s", strerror(-rc));
                        goto out_reader;
                }
                shoal_hex(rnd, sizeof(rnd), member_id);
        }
        if (sharing) {
                struct shoal_server_config sc = {
                        .vol = &n->vol,
                        .reader = n->reader,
                        .cache = n->cache,
                        .listen_ip = ip,
                        .tcp_port = cfg->group_port,
                        .cache_try_dio = cfg->cache_try_dio,
                        .iorpc_mode = cfg->iorpc_mode,
                        .secret = cfg->group_secret,
                        .member_id = member_id,
                        .rdma = n_rdma_if > 0,
                };
                n->server = shoal_server_start(&sc, err, errlen);
                if (!n->server) {
                        if (strstr(err, "refusing"))
                                *exit_code = 2;
                        goto out_reader;
                }
                if (n_rdma_if > 0) {
                        n->rdma_server = shoal_rdma_server_start(
                                n->server, rdma_prov, rdma_if, (unsigned)n_rdma_if,
                                &cfg->group_secret, member_id, err, errlen);
                        if (!n->rdma_server) {
                                if (strstr(err, "refusing"))
                                        *exit_code = 2;
                                goto out_server;
                        }
                        char ra[SHOAL_FAB_MAX_IFACES][64];
                        unsigned nra = shoal_rdma_server_addrs(n->rdma_server, ra);
                        shoal_server_set_rdma_addrs(n->server, ra, nra);
                }
        }
        /* Before the join, so that a member whose metrics address is taken never joins (its
         * brief membership would move blocks); short-lived clients (cat) get an endpoint only
         * when they ask for one. */
        if (cfg->metrics_addr || cfg->serve) {
                struct shoal_metrics_http_config mc = {
                        .addr = cfg->metrics_addr,
                        .cache_group = cfg->cache_group,
                        .role = sharing ? "Provider" : "Consumer",
                        .volume = n->vol.url,
                };
                n->metrics = shoal_metrics_http_start(&mc, err, errlen);
                if (!n->metrics)
                        goto out_server;
        }
        if (cfg->cache_group) {
                struct shoal_group_config gc = {
                        .meta_url = cfg->meta_url,
                        .group = cfg->cache_group,
                };
                struct shoal_member *me = &gc.self;
                shoal_strlcpy(me->id, member_id, sizeof(me->id));
                gethostname(me->host, sizeof(me->host) - 1);
                me->weight = sharing ? cfg->group_weight : 0;
                me->role = sharing ? SHOAL_ROLE_PROVIDER : SHOAL_ROLE_CONSUMER;
                shoal_strlcpy(me->volume_url, n->vol.url, sizeof(me->volume_url));
                me->block_size = n->vol.block_size;
                if (n->server)
                        shoal_server_addrs(n->server, me->tcp_addr, me->iorpc_addr);
                if (n->rdma_server)
                        me->n_rdma = shoal_rdma_server_addrs(n->rdma_server, me->rdma_addr);
                /* shoal bench reads the members' CPU there */
                if (n->metrics)
                        shoal_strlcpy(me->metrics_addr, shoal_metrics_http_addr(n->metrics),
                                      sizeof(me->metrics_addr));
                gc.usage = publish_usage; /* with every heartbeat [C7] */
                gc.usage_arg = n->cache;
                n->group = shoal_group_start(&gc, err, errlen);
                if (!n->group) {
                        if (strstr(err, "mismatch"))
                                *exit_code = 2;
                        goto out_metrics;
                }
                shoal_reader_set_group(n->reader, n->group);
                if (n->server)
                        shoal_server_set_group(n->server, n->group);
                struct shoal_push_config pc = {.vol = &n->vol,
                                               .group = n->group,
                                               .cache = n->cache,
                                               .secret = cfg->group_secret};
                n->push = shoal_push_create(&pc);
                if (!n->push) {
                        snprintf(err, errlen, "out of memory or randomness");
                        shoal_group_stop(n->group);
                        goto out_metrics;
                }
        }
        *exit_code = 0;
        return n;

out_metrics:
        shoal_metrics_http_stop(n->metrics);
out_server:
        shoal_rdma_server_stop(n->rdma_server);
        shoal_server_stop(n->server);
out_reader:
        shoal_reader_destroy(n->reader);
out_remote:
        shoal_remote_destroy(n->remote);
out_rdma_client:
        shoal_rdma_client_destroy(n->rdma_client);
out_cache:
        shoal_cache_close(n->cache);
out_store:
        shoal_store_close(n->store);
out_free:
        free(n);
        return NULL;
}

void shoal_node_stop(struct shoal_node *n)
{
        if (!n)
                return;
        shoal_metrics_http_stop(n->metrics);
        /* The server's workers and the reader use the group: stop them before it goes. */
        shoal_rdma_server_stop(n->rdma_server);
        shoal_server_stop(n->server);
        shoal_reader_destroy(n->reader);
        shoal_push_destroy(n->push);
        shoal_group_stop(n->group);
        shoal_remote_destroy(n->remote);
        shoal_rdma_client_destroy(n->rdma_client);
        shoal_cache_close(n->cache);
        shoal_store_close(n->store);
        free(n);
}

int shoal_node_read_from_owner(struct shoal_node *n, const struct shoal_object *obj, uint32_t index,
                               void *buf)
{
        uint32_t len = shoal_block_len(obj->size, n->vol.block_size, index);
        struct shoal_group_view *v = shoal_group_view_get(n->group);
        struct shoal_block_id id;
        shoal_block_id_derive(&n->vol, obj->key, obj->version, index, &id);
        int owner = shoal_group_owner(v, &id);
        int rc = -EHOSTUNREACH;
        if (owner >= 0)
                rc = shoal_remote_read(n->remote, &v->members[owner], &n->vol, obj, index, 0, len,
                                       buf, v->version);
        shoal_group_view_put(v);
        return rc;
}
