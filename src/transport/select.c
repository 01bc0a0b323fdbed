/* The selector [G5, R3, R6]: which transport carries a request to a member, which members to
 * avoid, and the deadlines, in one place. A member's transports are tried in one order (RDMA
 * where --rdma-network gave a client, IORPC, the TCP pool) with the one rule of
 * transport/transport.h: -ENOTCONN or -ENOPROTOOPT means "cannot carry it, try the next"; any
 * other result is the answer. With --use-iorpc the client asks each member once (INFO on its
 * TCP pool port) for its IORPC address; a member that answers "rpc disabled" is read through the
 * TCP pool, and asked again after a while. */
#include "transport/select.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "transport/rdma_client.h"
#include "transport/transport.h"

#define MAX_MEMBERS    1024
#define RECHECK_NS     (60 * SHOAL_NS_PER_SEC) /* a member with rpc disabled is asked again */
#define MAX_TRANSPORTS 3

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
        struct shoal_transport *t[MAX_TRANSPORTS]; /* in the order they are tried */
        unsigned nt;
        struct shoal_transport *pool; /* the last of t[]: INFO goes over it */
        pthread_mutex_t mu;
        struct member_state *members;
        unsigned nmembers;
};

/* The transports in the order a request tries them. Returns 0 or -ENOMEM. */
static int transports_create(struct shoal_remote *rm)
{
        const struct shoal_remote_config *cfg = &rm->cfg;
        if (cfg->rdma && !(rm->t[rm->nt++] = shoal_transport_rdma_create(cfg->rdma)))
                return -ENOMEM;
        /* IORPC reads with --use-iorpc (or RDMA, re-issued over it); puts to a published IORPC
         * address either way */
        rm->t[rm->nt++] = shoal_transport_iorpc_create(&cfg->secret, cfg->use_iorpc || cfg->rdma);
        if (!rm->t[rm->nt - 1])
                return -ENOMEM;
        rm->pool = rm->t[rm->nt++] = shoal_transport_pool_create(&cfg->secret, cfg->idle_per_peer);
        return rm->pool ? 0 : -ENOMEM;
}

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
        if (!rm->members || transports_create(rm)) {
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
        for (unsigned i = rm->nt; i-- > 0;)
                if (rm->t[i])
                        rm->t[i]->ops->destroy(rm->t[i]);
        if (rm->members)
                pthread_mutex_destroy(&rm->mu);
        free(rm->members);
        free(rm);
}

uint64_t shoal_remote_deadline(const struct shoal_remote *rm)
{
        return shoal_now_ns() + rm->cfg.timeout_ns;
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
        struct shoal_route to = {.m = m, .iorpc_addr = ""};
        int rc = rm->pool->ops->info(rm->pool, &to, &info, deadline);
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

/* The one fallback rule: T could not carry the request to that member now. */
static bool cannot_carry(int rc)
{
        return rc == -ENOTCONN || rc == -ENOPROTOOPT;
}

/* The IORPC address to use for M as learnt so far, without asking M ("" for none). */
static void iorpc_addr_known(struct shoal_remote *rm, const struct shoal_member *m, char *out)
{
        out[0] = '\0';
        pthread_mutex_lock(&rm->mu);
        struct member_state *ms = member_locked(rm, m->id);
        if (ms->rpc == RPC_OK)
                shoal_strlcpy(out, ms->iorpc_addr, SHOAL_ADDR_LEN);
        pthread_mutex_unlock(&rm->mu);
}

/* RQ over the first transport that carries it; *BY: the one that answered. */
static int carry_read(struct shoal_remote *rm, const struct shoal_member *m,
                      struct shoal_read_req *rq, const struct shoal_transport_ops **by)
{
        char iorpc[SHOAL_ADDR_LEN] = "";
        struct shoal_route to = {.m = m, .iorpc_addr = iorpc};
        bool resolved = false;
        int rc = -ENOTCONN;
        for (unsigned i = 0; i < rm->nt; i++) {
                struct shoal_transport *t = rm->t[i];
                if (t->ops->wants_iorpc_addr && !resolved) {
                        iorpc_addr_for(rm, m, iorpc, rq->deadline);
                        resolved = true;
                }
                *by = t->ops;
                rc = t->ops->read(t, &to, rq);
                if (!cannot_carry(rc))
                        break;
        }
        return rc;
}

int shoal_remote_read(struct shoal_remote *rm, const struct shoal_member *m,
                      const struct shoal_volume *vol, const struct shoal_object *obj,
                      uint32_t index, uint32_t off, uint32_t len, void *dst, uint64_t view_version)
{
        if (!m->tcp_addr[0] || !shoal_remote_member_allowed(shoal_secret_set(&rm->cfg.secret), m))
                return -EHOSTUNREACH;
        uint64_t t0 = shoal_now_ns();
        struct shoal_read_req rq = {.vol = vol,
                                    .obj = obj,
                                    .index = index,
                                    .off = off,
                                    .len = len,
                                    .dst = dst,
                                    .view_version = view_version,
                                    .deadline = t0 + rm->cfg.timeout_ns};
        shoal_metric_inc(SHOAL_M_remotecache_get_requests);
        const struct shoal_transport_ops *by = NULL;
        int rc = carry_read(rm, m, &rq, &by);
        shoal_metric_observe(SHOAL_M_remotecache_get_dur, shoal_now_ns() - t0);
        if (!rc) {
                shoal_metric_add(SHOAL_M_remotecache_get_bytes, len);
                shoal_metric_add(by->bytes_metric, len);
        } else {
                shoal_metric_inc(SHOAL_M_remotecache_get_errors);
                if (rc == -EBADMSG)
                        shoal_metric_inc(SHOAL_M_blockcache_checksum_errors);
        }
        return rc;
}

int shoal_remote_put(struct shoal_remote *rm, const struct shoal_member *m,
                     struct shoal_put_req *rq)
{
        if (!m->tcp_addr[0] || !shoal_remote_member_allowed(shoal_secret_set(&rm->cfg.secret), m))
                return -EHOSTUNREACH; /* our bytes go to no member we cannot authenticate */
        if (shoal_remote_member_avoided(rm, m))
                return -EHOSTUNREACH;
        /* the IORPC port the view publishes, else the pool's */
        struct shoal_route to = {.m = m, .iorpc_addr = m->iorpc_addr};
        int rc = -ENOPROTOOPT;
        for (unsigned i = 0; i < rm->nt && cannot_carry(rc); i++)
                if (rm->t[i]->ops->put)
                        rc = rm->t[i]->ops->put(rm->t[i], &to, rq);
        /* an error answer says nothing against the member; anything else avoids it a while */
        if (rc && rc != -EREMOTEIO)
                shoal_remote_avoid(rm, m->id);
        return rc;
}

unsigned shoal_remote_conns(struct shoal_remote *rm, const struct shoal_member *m)
{
        char iorpc[SHOAL_ADDR_LEN];
        iorpc_addr_known(rm, m, iorpc);
        struct shoal_route to = {.m = m, .iorpc_addr = iorpc};
        for (unsigned i = 0; i < rm->nt; i++) {
                int n = rm->t[i]->ops->conns(rm->t[i], &to);
                if (n >= 0)
                        return (unsigned)n;
        }
        return 0;
}

unsigned shoal_remote_inflight(struct shoal_remote *rm, const struct shoal_member *m)
{
        char iorpc[SHOAL_ADDR_LEN];
        iorpc_addr_known(rm, m, iorpc);
        struct shoal_route to = {.m = m, .iorpc_addr = iorpc};
        unsigned n = 0;
        for (unsigned i = 0; i < rm->nt; i++)
                n += rm->t[i]->ops->inflight(rm->t[i], &to);
        return n;
}

int shoal_remote_register(struct shoal_remote *rm, void *base, size_t len, char *err, size_t errlen)
{
        if (!rm || !rm->cfg.rdma)
                return 0;
        return shoal_rdma_client_register(rm->cfg.rdma, base, len, err, errlen);
}
