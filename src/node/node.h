/* One shoal process's parts, assembled from its configuration: object store, disk cache, group
 * agent, transports (server and client side), metrics, and the reader that ties them together.
 * `shoal cat`, `shoal serve` and `shoal mount` all start one node. */
#ifndef SHOAL_CLIENT_NODE_H
#define SHOAL_CLIENT_NODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "common/secret.h"

struct shoal_node_config {
        const char *storage;  /* STORAGE url */
        const char *endpoint; /* s3 --endpoint */
        uint32_t block_size;
        const char *meta_url;    /* --meta (NULL: sqlite3 default) */
        const char *cache_group; /* --cache-group (NULL: no group) */
        const char *cache_dir;
        int64_t cache_size; /* bytes; 0 none, -1 unlimited */
        double free_space_ratio;
        bool no_sharing;
        bool serve;                /* start the server side (serve, mount) */
        const char *group_ip;      /* --group-ip */
        const char *group_network; /* --group-network */
        uint16_t group_port;
        uint32_t group_weight;
        uint64_t group_grace_ns;          /* --group-grace; 0: the default (group.h) */
        bool group_no_grace;              /* --group-grace 0: a stop leaves the ring at once */
        struct shoal_secret group_secret; /* the secret's bytes (len 0: none) */
        /* Without a group secret: the host-local secret's file (node/local_secret.h), made by
         * a sharing member, read by the rest. NULL: none (a member trusts every local process). */
        const char *local_secret_file;
        bool use_iorpc;
        int iorpc_mode; /* enum shoal_iorpc_mode */
        bool cache_try_dio;
        const char *rdma_network;
        const char *rdma_provider;
        unsigned rdma_preauth_per_source; /* 0: the default */
        uint64_t buffer_size;             /* bytes */
        unsigned max_downloads;
        unsigned prefetch;         /* readahead blocks */
        uint64_t upload_part_size; /* --upload-part-size; 0: the store's default */
        /* --metrics HOST:PORT. NULL: the endpoint listens on 127.0.0.1:9567 or the next free
         * port when serve is set (members, mounts), and not at all otherwise (short-lived
         * clients such as cat). */
        const char *metrics_addr;
        /* Ask the store once at start (mount, serve): a store that does not answer (no such
         * bucket, an endpoint that refuses, times out or cannot be resolved) fails the start,
         * with -EIO and the cause in ERR. */
        bool check_store;
        /* --strict-group: a group that cannot share anything (a registry that did not exist, no
         * live member that shares) fails the start (-EIO) instead of a warning. */
        bool strict_group;
        /* The command judges the group itself (bench, warmup: no live member is their own
         * one-line error): no warning here. --strict-group still applies. */
        bool group_checked_by_caller;
};

struct shoal_node {
        struct shoal_node_config cfg;
        struct shoal_volume vol;
        struct shoal_store *store;
        struct shoal_cache *cache;
        struct shoal_group *group;
        struct shoal_remote *remote;
        struct shoal_server *server;
        struct shoal_reader *reader;
        struct shoal_rdma_client *rdma_client; /* --rdma-network, with a cache group */
        struct shoal_rdma_server *rdma_server; /* --rdma-network on a sharing member */
        struct shoal_metrics_http *metrics;    /* NULL: no endpoint */
        struct shoal_push *push;  /* write-through of written objects [W3]; NULL without a group */
        uint8_t local_secret[64]; /* the host-local secret's bytes, when cfg.group_secret is it */
};

/* Starts every part CFG asks for into *OUT; CFG's strings and secret must outlive the node.
 * Returns 0, or a negative errno with one line in ERR: -EINVAL for a usage problem, the user's to
 * fix (a bad storage URL or block size, an interface that does not exist or has no IPv4, RDMA
 * that cannot start on the provider, listening beyond loopback without a group secret, a
 * registry URL that cannot work, a volume that differs from the group's); any other errno is a
 * failure at run time (a folder or registry that cannot be opened, a port in use). The command
 * line exits 2 or 1 (shoal_cli_start_code); libshoal returns the errno (ValueError in Python for
 * -EINVAL). */
int shoal_node_start(const struct shoal_node_config *cfg, struct shoal_node **out, char *err,
                     size_t errlen);
/* Stops every part that was started (any of them may be missing) and frees N. NULL is a no-op. */
void shoal_node_stop(struct shoal_node *n);

/* Checks --rdma-network NETWORK on PROVIDER (NULL: $FI_PROVIDER, else verbs) at start-up [M3]:
 * splits it into IFS (SHOAL_FAB_MAX_IFACES entries) and opens each interface on the provider (the
 * interface exists, has an IPv4 address, and the provider offers a domain on it), then closes it
 * again. Returns the number of interfaces, or a negative errno with one line in ERR naming the
 * interface. */
int shoal_node_check_rdma(const char *network, const char *provider, char (*ifs)[32], char *err,
                          size_t errlen);

/* Reads the whole block INDEX of OBJ from its owner in the group into BUF (block-size bytes), as
 * a client would; the owner fills it from the store on a miss. Returns 0, -EHOSTUNREACH when the
 * group has no provider, or the transport's error. */
int shoal_node_read_from_owner(struct shoal_node *n, const struct shoal_object *obj, uint32_t index,
                               void *buf);

#endif
