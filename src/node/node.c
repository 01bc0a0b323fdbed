#include "node/node.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "node/local_secret.h"
#include "client/push.h"
#include "client/reader.h"
#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/http.h"
#include "metrics/metrics.h"
#include "net/iface.h"
#include "transport/select.h"
#include "server/rdma_server.h"
#include "transport/rdma_client.h"
#include "server/server.h"
#include "store/store.h"

/* The longest a member that stops keeps answering after its goodbye (linger). */
#define LINGER_MAX_NS (10 * SHOAL_NS_PER_SEC)

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
                /* The interface first, before the provider set-up logs anything: a mistyped
                 * name is one line. */
                char ip[64];
                int rc = shoal_iface_ipv4(ifs[i], ip, sizeof(ip));
                if (rc) {
                        snprintf(err, errlen, "--rdma-network %s: %s", ifs[i],
                                 rc == -ENODEV ? "no such interface" : "it has no IPv4 address");
                        return -EINVAL;
                }
                struct shoal_fab f;
                rc = shoal_fab_open(&f, shoal_fab_provider(provider), ifs[i], err, errlen);
                shoal_fab_close(&f);
                if (rc)
                        return rc < 0 ? rc : -ENODEV;
        }
        return n;
}

/* What the checks settle before anything starts, for the parts that follow. */
struct plan {
        bool sharing; /* a member that serves its cache to the group */
        char ip[64];  /* where its servers listen */
        char rdma_if[SHOAL_FAB_MAX_IFACES][32];
        int n_rdma_if; /* 0: no RDMA */
        const char *rdma_provider;
        char member_id[SHOAL_MEMBER_ID_LEN + 1]; /* "" without a group */
};

/* The address the servers listen on: --group-ip, the IPv4 of --group-network, or loopback. */
static int resolve_listen_ip(const struct shoal_node_config *cfg, char *ip, size_t iplen, char *err,
                             size_t errlen)
{
        shoal_strlcpy(ip, "127.0.0.1", iplen);
        if (cfg->group_ip && cfg->group_network) {
                snprintf(err, errlen, "give --group-ip or --group-network, not both");
                return -EINVAL;
        }
        if (cfg->group_ip) {
                struct in_addr a;
                if (inet_pton(AF_INET, cfg->group_ip, &a) != 1) {
                        snprintf(err, errlen, "invalid --group-ip %s: expected an IPv4 address",
                                 cfg->group_ip);
                        return -EINVAL;
                }
                shoal_strlcpy(ip, cfg->group_ip, iplen);
        } else if (cfg->group_network) {
                int rc = shoal_iface_ipv4(cfg->group_network, ip, iplen);
                if (rc) {
                        snprintf(err, errlen, "--group-network %s: %s", cfg->group_network,
                                 rc == -ENODEV ? "no such interface" : "it has no IPv4 address");
                        return -EINVAL;
                }
        }
        return 0;
}

/* [S1] on every transport, before anything starts: without a group secret a member listens on
 * loopback only, for the TCP pool and IORPC (IP) and for RDMA (each interface's address). A
 * secret, when there is one, has SHOAL_SECRET_MIN bytes or more. The servers and the RDMA client
 * check again themselves; after this they refuse nothing. */
static int check_secret(const struct shoal_node_config *cfg, const struct plan *p, char *err,
                        size_t errlen)
{
        if (shoal_secret_set(&cfg->group_secret)) {
                if (cfg->group_secret.len >= SHOAL_SECRET_MIN)
                        return 0;
                snprintf(err, errlen, "the group secret must be at least %d bytes",
                         SHOAL_SECRET_MIN);
                return -EINVAL;
        }
        if (!p->sharing)
                return 0;
        if (strncmp(p->ip, "127.", 4)) {
                snprintf(err, errlen,
                         "refusing to listen on %s without a group secret: set "
                         "--group-secret-file or SHOAL_GROUP_SECRET (or use --group-ip 127.0.0.1)",
                         p->ip);
                return -EINVAL;
        }
        for (int i = 0; i < p->n_rdma_if; i++) {
                char rip[64];
                /* An interface without IPv4 is reported by the RDMA check that follows. */
                if (!shoal_iface_ipv4(p->rdma_if[i], rip, sizeof(rip)) && strncmp(rip, "127.", 4)) {
                        snprintf(err, errlen,
                                 "refusing to listen for RDMA on %s (%s) without a group secret: "
                                 "set --group-secret-file or SHOAL_GROUP_SECRET (or use "
                                 "--rdma-network lo)",
                                 p->rdma_if[i], rip);
                        return -EINVAL;
                }
        }
        return 0;
}

/* Everything that can be found wrong without starting anything; all of it is the user's to fix
 * (-EINVAL). [M3]: with --rdma-network every interface must come up on the provider, with or
 * without a group; without it, no libfabric at all. */
static int check_config(struct shoal_node *n, struct plan *p, char *err, size_t errlen)
{
        const struct shoal_node_config *cfg = &n->cfg;
        memset(p, 0, sizeof(*p));
        if (shoal_volume_init(&n->vol, cfg->storage, cfg->block_size)) {
                snprintf(err, errlen, "invalid storage %s or block size %u", cfg->storage,
                         cfg->block_size);
                return -EINVAL;
        }
        p->sharing = cfg->cache_group && cfg->serve && !cfg->no_sharing;
        int rc = resolve_listen_ip(cfg, p->ip, sizeof(p->ip), err, errlen);
        if (rc)
                return rc;
        p->rdma_provider = shoal_fab_provider(cfg->rdma_provider);
        if (cfg->rdma_network) {
                p->n_rdma_if = shoal_fab_parse_ifaces(cfg->rdma_network, p->rdma_if);
                if (p->n_rdma_if < 0) {
                        snprintf(err, errlen,
                                 "invalid --rdma-network %s: expected IF1[:IF2...] (at most %d)",
                                 cfg->rdma_network, SHOAL_FAB_MAX_IFACES);
                        return -EINVAL;
                }
        }
        /* The secret first: it needs no libfabric. */
        rc = check_secret(cfg, p, err, errlen);
        if (rc)
                return rc;
        if (p->n_rdma_if > 0 && shoal_node_check_rdma(cfg->rdma_network, cfg->rdma_provider,
                                                      p->rdma_if, err, errlen) < 0)
                return -EINVAL;
        return 0;
}

/* Without a group secret, the host-local one (node/local_secret.h): a sharing member makes it
 * (and cannot start without it), a client uses it when it may read it. After check_secret, so
 * that a member with only the local secret still listens on loopback alone. */
static int use_local_secret(struct shoal_node *n, const struct plan *p, char *err, size_t errlen)
{
        struct shoal_node_config *cfg = &n->cfg;
        if (shoal_secret_set(&cfg->group_secret) || !cfg->cache_group)
                return 0;
        _Static_assert(sizeof(n->local_secret) == SHOAL_LOCAL_SECRET_LEN, "local secret");
        if (!cfg->local_secret_file) {
                if (p->sharing)
                        log_warn("node", "--local-secret-file off and no group secret: every "
                                         "local user can read and write this member's cache");
                return 0;
        }
        int rc;
        if (p->sharing) {
                rc = shoal_local_secret_create(cfg->local_secret_file, n->local_secret, err,
                                               errlen);
                if (rc)
                        return rc == -EPERM || rc == -EINVAL ? -EINVAL : rc;
                log_info("node", "authenticating every connection with the host-local secret %s",
                         cfg->local_secret_file);
        } else {
                rc = shoal_local_secret_read(cfg->local_secret_file, n->local_secret, err, errlen);
                if (rc < 0)
                        log_warn("node", "%s; reading without the group", err);
                if (rc) {
                        err[0] = '\0';
                        return 0;
                }
        }
        cfg->group_secret =
                (struct shoal_secret){.bytes = n->local_secret, .len = sizeof(n->local_secret)};
        return 0;
}

static int start_store(struct shoal_node *n, char *err, size_t errlen)
{
        struct shoal_store_config scfg = {
                .url = n->vol.url,
                .endpoint = n->cfg.endpoint,
                .max_downloads = n->cfg.max_downloads,
                .upload_part_size = n->cfg.upload_part_size,
                /* Uploads take their part buffers from a budget as large as the read
                 * buffers' (--buffer-size bounds each). */
                .upload_buffer_bytes = n->cfg.buffer_size,
        };
        int rc = shoal_store_open(&scfg, &n->store, err, errlen);
        if (rc || !n->cfg.check_store)
                return rc;
        /* Whatever the cause, not a usage error: the command line was fine. */
        return shoal_store_check(n->store, err, errlen) ? -EIO : 0;
}

static int start_cache(struct shoal_node *n, char *err, size_t errlen)
{
        struct shoal_cache_config ccfg = {
                .dirs = n->cfg.cache_size ? n->cfg.cache_dir : NULL,
                .size_bytes = n->cfg.cache_size,
                .free_space_ratio = n->cfg.free_space_ratio,
                .volume = &n->vol,
        };
        return shoal_cache_open(&ccfg, &n->cache, err, errlen);
}

/* The client side: the transports to the group's members (RDMA needs the reader's buffers
 * registered) and the reader over store, cache and group. */
static int start_client(struct shoal_node *n, struct plan *p, char *err, size_t errlen)
{
        const struct shoal_node_config *cfg = &n->cfg;
        if (cfg->cache_group && p->n_rdma_if > 0) {
                struct shoal_rdma_client_config rc = {.provider = p->rdma_provider,
                                                      .ifaces = p->rdma_if,
                                                      .n_if = (unsigned)p->n_rdma_if,
                                                      .secret = cfg->group_secret,
                                                      .bounce_size = n->vol.block_size};
                n->rdma_client = shoal_rdma_client_create(&rc, err, errlen);
                if (!n->rdma_client)
                        return -EIO;
        }
        if (cfg->cache_group) {
                struct shoal_remote_config rmc = {.secret = cfg->group_secret,
                                                  .use_iorpc = cfg->use_iorpc || p->n_rdma_if > 0,
                                                  .rdma = n->rdma_client};
                n->remote = shoal_remote_create(&rmc);
                if (!n->remote) {
                        snprintf(err, errlen, "cannot create the group client");
                        return -ENOMEM;
                }
        }
        struct shoal_reader_config rcfg = {
                .vol = &n->vol,
                .store = n->store,
                .cache = n->cache,
                .remote = n->remote,
                .sharing = p->sharing,
                .buffer_bytes = cfg->buffer_size,
                .readahead = cfg->prefetch,
                .prefetch_threads = cfg->prefetch ? SHOAL_MIN(cfg->prefetch, 8u) : 0,
        };
        n->reader = shoal_reader_create(&rcfg, err, errlen);
        if (!n->reader)
                return -ENOMEM;
        if (n->rdma_client) {
                size_t blen;
                void *bbase = shoal_reader_buffers(n->reader, &blen);
                if (shoal_rdma_client_register(n->rdma_client, bbase, blen, err, errlen))
                        return -EIO;
        }
        return 0;
}

/* The member id is settled before the servers start, not at the join, because the handshake
 * proofs of the servers carry it (wire/handshake.h). A sharing member with a disk cache keeps its
 * id in its cache folder, so that a restart is the same member and owns the same blocks; anyone
 * else (consumers, members without a disk cache) draws one per start. */
static int draw_member_id(struct shoal_node *n, struct plan *p, char *err, size_t errlen)
{
        if (p->sharing && shoal_cache_enabled(n->cache)) {
                int rc = shoal_cache_member_id(n->cache, p->member_id, sizeof(p->member_id), err,
                                               errlen);
                if (rc != -ENOENT)
                        return rc;
        }
        unsigned char rnd[SHOAL_MEMBER_ID_LEN / 2];
        int rc = shoal_random_bytes(rnd, sizeof(rnd));
        if (rc) {
                snprintf(err, errlen, "cannot draw a member id: %s", strerror(-rc));
                return rc;
        }
        shoal_hex(rnd, sizeof(rnd), p->member_id);
        return 0;
}

/* The TCP pool and IORPC server, and the RDMA server with --rdma-network. check_config settled
 * everything they could refuse, so what is left is a failure at run time (a port in use). */
static int start_servers(struct shoal_node *n, struct plan *p, char *err, size_t errlen)
{
        const struct shoal_node_config *cfg = &n->cfg;
        struct shoal_server_config sc = {
                .vol = &n->vol,
                .reader = n->reader,
                .cache = n->cache,
                .listen_ip = p->ip,
                .tcp_port = cfg->group_port,
                .cache_try_dio = cfg->cache_try_dio,
                .iorpc_mode = cfg->iorpc_mode,
                .secret = cfg->group_secret,
                .member_id = p->member_id,
                .rdma = p->n_rdma_if > 0,
        };
        n->server = shoal_server_start(&sc, err, errlen);
        if (!n->server)
                return -EIO;
        if (p->n_rdma_if == 0)
                return 0;
        n->rdma_server = shoal_rdma_server_start(n->server, p->rdma_provider, p->rdma_if,
                                                 (unsigned)p->n_rdma_if, &cfg->group_secret,
                                                 p->member_id, err, errlen);
        if (!n->rdma_server)
                return -EIO;
        shoal_rdma_server_set_preauth_per_source(n->rdma_server, cfg->rdma_preauth_per_source);
        char ra[SHOAL_FAB_MAX_IFACES][64];
        unsigned nra = shoal_rdma_server_addrs(n->rdma_server, ra);
        shoal_server_set_rdma_addrs(n->server, ra, nra);
        return 0;
}

/* Before the join, so that a member whose metrics address is taken never joins (its brief
 * membership would move blocks); short-lived clients (cat, libshoal) get an endpoint only when
 * they ask for one. */
static int start_metrics(struct shoal_node *n, const struct plan *p, char *err, size_t errlen)
{
        if (!n->cfg.metrics_addr && !n->cfg.serve)
                return 0;
        struct shoal_metrics_http_config mc = {
                .addr = n->cfg.metrics_addr,
                .cache_group = n->cfg.cache_group,
                .role = p->sharing ? "Provider" : "Consumer",
                .volume = n->vol.url,
        };
        n->metrics = shoal_metrics_http_start(&mc, err, errlen);
        return n->metrics ? 0 : -EIO;
}

/* Whether the registry at URL is there before we join: an sqlite3 file that does not exist is
 * about to be created, most often from a mistyped --meta. (A redis database always exists; an
 * unreachable one fails the join.) */
static bool registry_exists(const char *url)
{
        return strncmp(url, "sqlite3://", 10) || !access(url + 10, F_OK);
}

/* Live members that share their cache (weight > 0), this one included. */
static size_t live_sharing(struct shoal_group *g)
{
        struct shoal_group_view *v = shoal_group_view_get(g);
        size_t k = 0;
        for (size_t i = 0; i < v->n; i++)
                k += v->members[i].role == SHOAL_ROLE_PROVIDER && v->members[i].weight > 0;
        shoal_group_view_put(v);
        return k;
}

/* A group that cannot share anything with this process is a warning, or with --strict-group a
 * failed start: a mistyped --cache-group or --meta otherwise only shows as store reads. A member
 * that shares is a live member itself; under --strict-group it wants another. */
static int check_group(struct shoal_node *n, bool existed, bool sharing, char *err, size_t errlen)
{
        const struct shoal_node_config *cfg = &n->cfg;
        size_t want = sharing && cfg->strict_group ? 2 : 1;
        char why[1400];
        if (!existed)
                snprintf(why, sizeof(why),
                         "the registry %s did not exist (this process created it)", cfg->meta_url);
        else if (live_sharing(n->group) < want)
                snprintf(why, sizeof(why), "no %slive member that shares its cache in registry %s",
                         sharing ? "other " : "", cfg->meta_url);
        else
                return 0;
        if (cfg->strict_group) {
                snprintf(err, errlen, "cache group %s: %s (strict-group is set)", cfg->cache_group,
                         why);
                return -EIO;
        }
        if (cfg->group_checked_by_caller)
                return 0;
        if (sharing)
                log_info("group", "cache group %s: %s: this member is the first", cfg->cache_group,
                         why);
        else
                log_warn("group",
                         "cache group %s: %s: every read goes to the store until a member joins "
                         "(check --cache-group and --meta)",
                         cfg->cache_group, why);
        return 0;
}

static int join_group(struct shoal_node *n, const struct plan *p, char *err, size_t errlen)
{
        const struct shoal_node_config *cfg = &n->cfg;
        struct shoal_group_config gc = {
                .meta_url = cfg->meta_url,
                .group = cfg->cache_group,
                .grace_ns = cfg->group_grace_ns,
                .no_grace = cfg->group_no_grace,
        };
        struct shoal_member *me = &gc.self;
        shoal_strlcpy(me->id, p->member_id, sizeof(me->id));
        gethostname(me->host, sizeof(me->host) - 1);
        me->weight = p->sharing ? cfg->group_weight : 0;
        me->role = p->sharing ? SHOAL_ROLE_PROVIDER : SHOAL_ROLE_CONSUMER;
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
        bool existed = registry_exists(cfg->meta_url);
        int rc = shoal_group_start(&gc, &n->group, err, errlen);
        if (rc)
                return rc;
        rc = check_group(n, existed, p->sharing, err, errlen);
        if (rc)
                return rc;
        shoal_reader_set_group(n->reader, n->group);
        if (n->server)
                shoal_server_set_group(n->server, n->group);
        struct shoal_push_config pc = {.vol = &n->vol,
                                       .group = n->group,
                                       .cache = n->cache,
                                       .remote = n->remote,
                                       .secret = cfg->group_secret};
        n->push = shoal_push_create(&pc);
        if (!n->push) {
                snprintf(err, errlen, "out of memory or randomness");
                return -ENOMEM;
        }
        return 0;
}

int shoal_node_start(const struct shoal_node_config *cfg, struct shoal_node **out, char *err,
                     size_t errlen)
{
        *out = NULL;
        struct shoal_node *n = calloc(1, sizeof(*n));
        if (!n) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        n->cfg = *cfg;
        struct plan p;
        int rc = check_config(n, &p, err, errlen);
        if (rc)
                goto out_stop;
        rc = use_local_secret(n, &p, err, errlen);
        if (rc)
                goto out_stop;
        rc = start_store(n, err, errlen);
        if (rc)
                goto out_stop;
        rc = start_cache(n, err, errlen);
        if (rc)
                goto out_stop;
        rc = start_client(n, &p, err, errlen);
        if (rc)
                goto out_stop;
        if (cfg->cache_group && (rc = draw_member_id(n, &p, err, errlen)))
                goto out_stop;
        if (p.sharing && (rc = start_servers(n, &p, err, errlen)))
                goto out_stop;
        rc = start_metrics(n, &p, err, errlen);
        if (rc)
                goto out_stop;
        if (cfg->cache_group && (rc = join_group(n, &p, err, errlen)))
                goto out_stop;
        *out = n;
        return 0;

out_stop:
        shoal_node_stop(n); /* stops what started, in the right order */
        return rc;
}

/* Block reads this process has answered for other members so far. */
static uint64_t served_requests(void)
{
        struct shoal_metrics_snap snap;
        if (shoal_metrics_snap_take(&snap))
                return 0;
        uint64_t n = snap.counters[SHOAL_M_remotecache_serve_requests];
        shoal_metrics_snap_free(&snap);
        return n;
}

/* A member that serves says goodbye first and keeps answering until nobody asks any more (a
 * heartbeat and a half without a request), for at most LINGER_MAX_NS: readers move its blocks to
 * the next members before its port closes, and those members, missing a block, ask it (their
 * previous owner) while it is still there. So the blocks read during a restart are copied from it,
 * not fetched from the store. */
static void linger(struct shoal_node *n)
{
        uint64_t notice = shoal_group_goodbye(n->group); /* about a heartbeat and a half */
        uint64_t t0 = shoal_now_ns(), step = notice / 3 ? notice / 3 : SHOAL_NS_PER_MS;
        shoal_sleep_ns(notice);
        uint64_t last = served_requests();
        unsigned quiet = 0;
        while (quiet < 3 && shoal_now_ns() - t0 < LINGER_MAX_NS) {
                shoal_sleep_ns(step);
                uint64_t now = served_requests();
                quiet = now == last ? quiet + 1 : 0;
                last = now;
        }
        log_info("node", "lingered %llu ms after the goodbye",
                 (unsigned long long)((shoal_now_ns() - t0) / SHOAL_NS_PER_MS));
}

void shoal_node_stop(struct shoal_node *n)
{
        if (!n)
                return;
        if (n->group && n->server)
                linger(n);
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
        explicit_bzero(n->local_secret, sizeof(n->local_secret));
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
        if (rc == -EXDEV) { /* not the owner under its view: ours is likely behind */
                shoal_group_refresh_soon(n->group);
                rc = -EREMOTEIO;
        }
        shoal_group_view_put(v);
        return rc;
}
