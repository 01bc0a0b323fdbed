/* Which transport carries a read to a member, and which members to avoid [G5, R3, R6].
 * With --use-iorpc the client asks each member once (INFO on its TCP pool port) for its IORPC
 * address; a member that answers "rpc disabled" is read through the TCP pool, and asked again
 * after a while. */
#include "transport/select.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "transport/clients.h"
#include "transport/rdma_client.h"

#define MAX_MEMBERS 1024
#define RECHECK_NS  (60ULL * 1000000000ULL)

enum rpc_state {
        RPC_UNKNOWN,
        RPC_OK,
        RPC_DISABLED
};

struct member_state {
        char id[SHOAL_MEMBER_ID_LEN + 1];
        uint64_t avoid_until;
        enum rpc_state rpc;
        uint64_t rpc_checked;
        char iorpc_addr[SHOAL_ADDR_LEN];
        char tcp_addr[SHOAL_ADDR_LEN]; /* where it listened when this state was made */
};

struct shoal_remote {
        struct shoal_remote_config cfg;
        struct shoal_pool *pool;
        struct shoal_iorpc *iorpc;
        pthread_mutex_t mu;
        struct member_state *members;
        unsigned nmembers;
};

struct shoal_remote *shoal_remote_create(const struct shoal_remote_config *cfg)
{
        struct shoal_remote *rm = calloc(1, sizeof(*rm));
        if (!rm)
                return NULL;
        rm->cfg = *cfg;
        const struct shoal_env *env = shoal_config_env();
        rm->cfg.timeout_ns = shoal_config_pick(cfg->timeout_ns, env->remote_timeout_ns,
                                               SHOAL_REMOTE_TIMEOUT_DEFAULT_NS);
        rm->cfg.avoid_ns = shoal_config_pick(cfg->avoid_ns, env->avoid_ns, SHOAL_AVOID_DEFAULT_NS);
        rm->members = calloc(MAX_MEMBERS, sizeof(*rm->members));
        rm->pool = shoal_pool_create(&cfg->secret, cfg->idle_per_peer);
        if (cfg->use_iorpc || cfg->rdma) {
                struct shoal_iorpc_config ic = {.secret = cfg->secret};
                rm->iorpc = shoal_iorpc_create(&ic);
        }
        if (!rm->members || !rm->pool || ((cfg->use_iorpc || cfg->rdma) && !rm->iorpc)) {
                shoal_remote_destroy(rm);
                return NULL;
        }
        pthread_mutex_init(&rm->mu, NULL);
        return rm;
}

void shoal_remote_destroy(struct shoal_remote *rm)
{
        if (!rm)
                return;
        shoal_iorpc_destroy(rm->iorpc);
        shoal_pool_destroy(rm->pool);
        if (rm->members)
                pthread_mutex_destroy(&rm->mu);
        free(rm->members);
        free(rm);
}

/* The state of member ID (created on first sight). rm->mu held. */
static struct member_state *member_locked(struct shoal_remote *rm, const char *id)
{
        for (unsigned i = 0; i < rm->nmembers; i++)
                if (!strcmp(rm->members[i].id, id))
                        return &rm->members[i];
        unsigned i = rm->nmembers < MAX_MEMBERS ? rm->nmembers++
                                                : (unsigned)(shoal_rand64() % MAX_MEMBERS);
        memset(&rm->members[i], 0, sizeof(rm->members[i]));
        shoal_strlcpy(rm->members[i].id, id, sizeof(rm->members[i].id));
        return &rm->members[i];
}

/* The state of member M, started afresh when M listens elsewhere than it did: a member id is
 * kept across restarts (issue 26), and a restarted member is neither the one that failed nor
 * at the IORPC address learnt before. rm->mu held. */
static struct member_state *member_of_locked(struct shoal_remote *rm, const struct shoal_member *m)
{
        struct member_state *ms = member_locked(rm, m->id);
        if (strcmp(ms->tcp_addr, m->tcp_addr)) {
                if (ms->tcp_addr[0]) {
                        ms->avoid_until = 0;
                        ms->rpc = RPC_UNKNOWN;
                        ms->iorpc_addr[0] = '\0';
                }
                shoal_strlcpy(ms->tcp_addr, m->tcp_addr, sizeof(ms->tcp_addr));
        }
        return ms;
}

bool shoal_remote_member_avoided(struct shoal_remote *rm, const struct shoal_member *m)
{
        pthread_mutex_lock(&rm->mu);
        bool avoided = shoal_now_ns() < member_of_locked(rm, m)->avoid_until;
        pthread_mutex_unlock(&rm->mu);
        return avoided;
}

bool shoal_remote_avoided(struct shoal_remote *rm, const char *member_id)
{
        pthread_mutex_lock(&rm->mu);
        bool avoided = shoal_now_ns() < member_locked(rm, member_id)->avoid_until;
        pthread_mutex_unlock(&rm->mu);
        return avoided;
}

void shoal_remote_avoid(struct shoal_remote *rm, const char *member_id)
{
        pthread_mutex_lock(&rm->mu);
        member_locked(rm, member_id)->avoid_until = shoal_now_ns() + rm->cfg.avoid_ns;
        pthread_mutex_unlock(&rm->mu);
}

static bool addr_loopback(const char *addr)
{
        return !addr[0] || !strncmp(addr, "127.", 4);
}

/* The IORPC address to use for M, or "" for the TCP pool. */
static void iorpc_addr_for(struct shoal_remote *rm, const struct shoal_member *m, char *out,
                           uint64_t deadline)
{
        out[0] = '\0';
        pthread_mutex_lock(&rm->mu);
        struct member_state *ms = member_of_locked(rm, m);
        uint64_t now = shoal_now_ns();
        bool ask = ms->rpc == RPC_UNKNOWN ||
                   (ms->rpc == RPC_DISABLED && now - ms->rpc_checked > RECHECK_NS);
        if (ask && m->iorpc_addr[0]) {
                /* The group already published it: no need to ask. */
                ms->rpc = RPC_OK;
                shoal_strlcpy(ms->iorpc_addr, m->iorpc_addr, sizeof(ms->iorpc_addr));
                ask = false;
        }
        if (!ask && ms->rpc == RPC_OK)
                shoal_strlcpy(out, ms->iorpc_addr, SHOAL_ADDR_LEN);
        pthread_mutex_unlock(&rm->mu);
        if (!ask)
                return;
        struct shoal_wire_info info;
        int rc = shoal_pool_info(rm->pool, m->tcp_addr, &info, deadline);
        char ip[SHOAL_ADDR_LEN];
        shoal_strlcpy(ip, m->tcp_addr, sizeof(ip));
        char *colon = strrchr(ip, ':');
        if (colon)
                *colon = '\0';
        pthread_mutex_lock(&rm->mu);
        ms = member_locked(rm, m->id);
        ms->rpc_checked = shoal_now_ns();
        /* (without a secret, an IORPC address beyond loopback is as unusable as a member there) */
        if (!rc && info.iorpc_addr[0] &&
            (shoal_secret_set(&rm->cfg.secret) || addr_loopback(info.iorpc_addr))) {
                ms->rpc = RPC_OK;
                shoal_strlcpy(ms->iorpc_addr, info.iorpc_addr, sizeof(ms->iorpc_addr));
                shoal_strlcpy(out, info.iorpc_addr, SHOAL_ADDR_LEN);
        } else if (rc == -ENOPROTOOPT || !rc) {
                if (ms->rpc != RPC_DISABLED)
                        log_warn("iorpc", "get iorpc address from %s failed: rpc disabled", ip);
                ms->rpc = RPC_DISABLED;
        }
        /* Other errors: the member is unreachable; the caller's read will say so. */
        pthread_mutex_unlock(&rm->mu);
}

bool shoal_remote_member_allowed(bool has_secret, const struct shoal_member *m)
{
        if (has_secret)
                return true;
        bool ok = addr_loopback(m->tcp_addr) && addr_loopback(m->iorpc_addr);
        for (unsigned i = 0; ok && i < m->n_rdma && i < SHOAL_RDMA_ADDRS; i++)
                ok = addr_loopback(m->rdma_addr[i]);
        if (!ok)
                log_ratelimited(SHOAL_LOG_WARN, "remote",
                                "not asking member %s at %s: it is beyond loopback and this "
                                "client has no group secret to authenticate it with",
                                m->id, m->tcp_addr);
        return ok;
}

int shoal_remote_read(struct shoal_remote *rm, const struct shoal_member *m,
                      const struct shoal_volume *vol, const struct shoal_object *obj,
                      uint32_t index, uint32_t off, uint32_t len, void *dst, uint64_t view_version)
{
        if (!m->tcp_addr[0] || !shoal_remote_member_allowed(shoal_secret_set(&rm->cfg.secret), m))
                return -EHOSTUNREACH;
        uint64_t t0 = shoal_now_ns();
        uint64_t deadline = t0 + rm->cfg.timeout_ns;
        shoal_metric_inc(SHOAL_M_remotecache_get_requests);
        int rc;
        if (rm->cfg.rdma && m->n_rdma) {
                rc = shoal_rdma_read(rm->cfg.rdma, m->id, (const char(*)[64])m->rdma_addr,
                                     m->n_rdma, vol, obj, index, off, len, dst, view_version,
                                     deadline);
                /* -ENOTCONN and a bad checksum: re-issue over IORPC on TCP [M4]. */
                if (rc != -ENOTCONN && rc != -EBADMSG) {
                        shoal_metric_observe(SHOAL_M_remotecache_get_dur, shoal_now_ns() - t0);
                        if (!rc) {
                                shoal_metric_add(SHOAL_M_remotecache_get_bytes, len);
                                shoal_metric_add(SHOAL_M_remotecache_rdma_get_bytes, len);
                        } else {
                                shoal_metric_inc(SHOAL_M_remotecache_get_errors);
                        }
                        return rc;
                }
        }
        char iorpc[SHOAL_ADDR_LEN] = "";
        if (rm->iorpc)
                iorpc_addr_for(rm, m, iorpc, deadline);
        enum shoal_metric_id bytes_metric;
        if (iorpc[0]) {
                rc = shoal_iorpc_read(rm->iorpc, iorpc, vol, obj, index, off, len, dst,
                                      view_version, deadline);
                bytes_metric = SHOAL_M_remotecache_iorpc_get_bytes;
        } else {
                rc = shoal_pool_read(rm->pool, m->tcp_addr, vol, obj, index, off, len, dst,
                                     view_version, deadline);
                bytes_metric = SHOAL_M_remotecache_tcp_get_bytes;
        }
        shoal_metric_observe(SHOAL_M_remotecache_get_dur, shoal_now_ns() - t0);
        if (!rc) {
                shoal_metric_add(SHOAL_M_remotecache_get_bytes, len);
                shoal_metric_add(bytes_metric, len);
        } else {
                shoal_metric_inc(SHOAL_M_remotecache_get_errors);
                if (rc == -EBADMSG)
                        shoal_metric_inc(SHOAL_M_blockcache_checksum_errors);
        }
        return rc;
}

unsigned shoal_remote_conns(struct shoal_remote *rm, const struct shoal_member *m)
{
        char iorpc[SHOAL_ADDR_LEN] = "";
        if (rm->cfg.rdma && m->n_rdma) {
                unsigned n = shoal_rdma_channels(rm->cfg.rdma, m->id);
                if (n)
                        return n;
        }
        pthread_mutex_lock(&rm->mu);
        struct member_state *ms = member_locked(rm, m->id);
        if (ms->rpc == RPC_OK)
                shoal_strlcpy(iorpc, ms->iorpc_addr, sizeof(iorpc));
        pthread_mutex_unlock(&rm->mu);
        if (rm->iorpc && iorpc[0])
                return shoal_iorpc_conns(rm->iorpc, iorpc);
        return shoal_pool_conns(rm->pool, m->tcp_addr);
}

int shoal_remote_register(struct shoal_remote *rm, void *base, size_t len, char *err, size_t errlen)
{
        if (!rm || !rm->cfg.rdma)
                return 0;
        return shoal_rdma_client_register(rm->cfg.rdma, base, len, err, errlen);
}
