#include "client/node.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "client/reader.h"
#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "net/iface.h"
#include "net/remote.h"
#include "rpc/server.h"
#include "store/store.h"

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

        struct shoal_store_config scfg = {
                .url = n->vol.url,
                .endpoint = cfg->endpoint,
                .max_downloads = cfg->max_downloads,
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

        if (cfg->cache_group) {
                struct shoal_remote_config rmc = {.secret = cfg->group_secret};
                n->remote = shoal_remote_create(&rmc);
                if (!n->remote) {
                        snprintf(err, errlen, "cannot create the group client");
                        goto out_cache;
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
                };
                n->server = shoal_server_start(&sc, err, errlen);
                if (!n->server) {
                        if (strstr(err, "refusing"))
                                *exit_code = 2;
                        goto out_reader;
                }
        }
        if (cfg->cache_group) {
                struct shoal_group_config gc = {
                        .meta_url = cfg->meta_url,
                        .group = cfg->cache_group,
                };
                struct shoal_member *me = &gc.self;
                gethostname(me->host, sizeof(me->host) - 1);
                me->weight = sharing ? cfg->group_weight : 0;
                me->role = sharing ? SHOAL_ROLE_PROVIDER : SHOAL_ROLE_CONSUMER;
                shoal_strlcpy(me->volume_url, n->vol.url, sizeof(me->volume_url));
                me->block_size = n->vol.block_size;
                if (n->server)
                        shoal_server_addrs(n->server, me->tcp_addr, me->iorpc_addr);
                struct shoal_cache_usage u;
                shoal_cache_usage(n->cache, &u);
                me->cache_bytes = u.bytes;
                me->cache_capacity = u.capacity;
                n->group = shoal_group_start(&gc, err, errlen);
                if (!n->group) {
                        if (strstr(err, "mismatch"))
                                *exit_code = 2;
                        goto out_server;
                }
                shoal_reader_set_group(n->reader, n->group);
                if (n->server)
                        shoal_server_set_group(n->server, n->group);
        }
        *exit_code = 0;
        return n;

out_server:
        shoal_server_stop(n->server);
out_reader:
        shoal_reader_destroy(n->reader);
out_remote:
        shoal_remote_destroy(n->remote);
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
        /* Leave first, so peers stop sending here; then stop serving. */
        shoal_group_stop(n->group);
        shoal_server_stop(n->server);
        shoal_reader_destroy(n->reader);
        shoal_remote_destroy(n->remote);
        shoal_cache_close(n->cache);
        shoal_store_close(n->store);
        free(n);
}
