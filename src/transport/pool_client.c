/* The TCP pool client [T1]: one request per connection at a time, a pool of idle connections per
 * member. The answer's payload is received straight into the caller's buffer and every chunk CRC
 * is checked before success is reported. A pooled connection that turns out dead is replaced once;
 * a payload that fails its checksum is reported to the member (CORRUPT) and asked for once more. */
#include "transport/clients.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "transport/client_conn.h"
#include "transport/put_client.h"
#include "transport/transport.h"
#include "wire/wire.h"

#define MAX_PEERS 1024

struct pconn {
        int fd;
        struct pconn *next;
        char member_id[SHOAL_WIRE_MEMBER_ID_MAX + 1]; /* as its handshake proved it */
};

struct peer {
        char addr[64];
        struct pconn *idle;
        unsigned nidle;
        unsigned nopen; /* idle + lent out */
};

struct shoal_pool {
        pthread_mutex_t mu;
        struct peer *peers;
        unsigned npeers;
        unsigned idle_per_peer;
        uint8_t service; /* SHOAL_SERVICE_POOL, or _IORPC for stop-and-wait puts there */
        struct shoal_hs_key key;
        uint64_t next_id;
};

struct shoal_pool *shoal_pool_create(const struct shoal_secret *secret, unsigned idle_per_peer,
                                     uint8_t service)
{
        struct shoal_pool *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->peers = calloc(MAX_PEERS, sizeof(*p->peers));
        /* Ids need only be unique per connection; a random start keeps them apart across
         * restarts in logs and captures. */
        if (!p->peers || shoal_hs_key_init(&p->key, secret) ||
            shoal_random_bytes(&p->next_id, sizeof(p->next_id))) {
                shoal_hs_key_clear(&p->key);
                free(p->peers);
                free(p);
                return NULL;
        }
        p->idle_per_peer = idle_per_peer ? idle_per_peer : 64;
        p->service = service;
        pthread_mutex_init(&p->mu, NULL);
        return p;
}

void shoal_pool_destroy(struct shoal_pool *p)
{
        if (!p)
                return;
        for (unsigned i = 0; i < p->npeers; i++) {
                struct pconn *pc = p->peers[i].idle;
                while (pc) {
                        struct pconn *next = pc->next;
                        close(pc->fd);
                        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
                        free(pc);
                        pc = next;
                }
        }
        pthread_mutex_destroy(&p->mu);
        free(p->peers);
        shoal_hs_key_clear(&p->key);
        free(p);
}

/* ---- the pool ------------------------------------------------------------------------------ */

static struct peer *peer_find_locked(struct shoal_pool *rm, const char *addr)
{
        for (unsigned i = 0; i < rm->npeers; i++)
                if (!strcmp(rm->peers[i].addr, addr))
                        return &rm->peers[i];
        if (rm->npeers == MAX_PEERS)
                return NULL;
        struct peer *p = &rm->peers[rm->npeers++];
        shoal_strlcpy(p->addr, addr, sizeof(p->addr));
        return p;
}

/* An idle connection to ADDR (*POOLED true), or a new one; FRESH skips the idle ones. */
static struct pconn *pool_get(struct shoal_pool *rm, const char *addr, bool fresh, bool *pooled,
                              uint64_t deadline, int *err)
{
        pthread_mutex_lock(&rm->mu);
        struct peer *p = peer_find_locked(rm, addr);
        struct pconn *pc = p && !fresh ? p->idle : NULL;
        if (pc) {
                p->idle = pc->next;
                p->nidle--;
        }
        pthread_mutex_unlock(&rm->mu);
        if (pc) {
                *pooled = true;
                return pc;
        }
        *pooled = false;
        struct shoal_rpc_peer peer;
        int fd = shoal_rpc_connect(addr, rm->service, &rm->key, deadline, &peer);
        if (fd < 0) {
                *err = fd;
                return NULL;
        }
        pc = calloc(1, sizeof(*pc));
        if (!pc) {
                close(fd);
                *err = -ENOMEM;
                return NULL;
        }
        pc->fd = fd;
        shoal_strlcpy(pc->member_id, peer.member_id, sizeof(pc->member_id));
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        pthread_mutex_lock(&rm->mu);
        struct peer *pp = peer_find_locked(rm, addr);
        if (pp)
                pp->nopen++;
        pthread_mutex_unlock(&rm->mu);
        return pc;
}

static void pool_put(struct shoal_pool *rm, const char *addr, struct pconn *pc, bool healthy)
{
        if (healthy) {
                pthread_mutex_lock(&rm->mu);
                struct peer *p = peer_find_locked(rm, addr);
                if (p && p->nidle < rm->idle_per_peer) {
                        pc->next = p->idle;
                        p->idle = pc;
                        p->nidle++;
                        pc = NULL;
                }
                pthread_mutex_unlock(&rm->mu);
        }
        if (pc) {
                close(pc->fd);
                shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
                free(pc);
                pthread_mutex_lock(&rm->mu);
                struct peer *p = peer_find_locked(rm, addr);
                if (p && p->nopen)
                        p->nopen--;
                pthread_mutex_unlock(&rm->mu);
        }
}

unsigned shoal_pool_conns(struct shoal_pool *p, const char *addr)
{
        pthread_mutex_lock(&p->mu);
        struct peer *pp = peer_find_locked(p, addr);
        unsigned n = pp ? pp->nopen : 0;
        pthread_mutex_unlock(&p->mu);
        return n;
}

/* Requests to ADDR in flight: its connections lent out. */
unsigned shoal_pool_inflight(struct shoal_pool *p, const char *addr)
{
        pthread_mutex_lock(&p->mu);
        struct peer *pp = peer_find_locked(p, addr);
        unsigned n = pp && pp->nopen > pp->nidle ? pp->nopen - pp->nidle : 0;
        pthread_mutex_unlock(&p->mu);
        return n;
}

/* One attempt on connection FD. Returns 0, -EBADMSG (payload failed its checksum: the frame
 * stream is still in sync), a status errno with *REMOTE_STATUS set (an error answer: the
 * connection is fine), or another -errno (the connection must be dropped). */
static int read_once(struct shoal_pool *p, int fd, const struct shoal_volume *vol,
                     const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                     void *dst, uint64_t view_version, uint64_t deadline, uint32_t *remote_status)
{
        uint8_t b[SHOAL_WIRE_HDR_LEN + 4 * SHOAL_MAX_CHUNKS + 64];
        uint8_t hdr[SHOAL_WIRE_HDR_LEN];
        int n = shoal_rpc_encode_read(b, sizeof(b), vol, obj, index, off, len, view_version);
        if (n < 0)
                return -EINVAL;
        uint64_t id = __atomic_add_fetch(&p->next_id, 1, __ATOMIC_RELAXED);
        int rc =
                shoal_rpc_send_frame(fd, SHOAL_MSG_READ, SHOAL_WF_FILL, id, b, (size_t)n, deadline);
        if (rc)
                return rc;
        struct shoal_wire_hdr h;
        rc = shoal_rpc_recv_frame(fd, &h, hdr, b, sizeof(b), deadline);
        if (rc)
                return rc;
        if (h.id != id)
                return -EPROTO; /* an answer to something we did not ask: out of sync */
        if (h.type == SHOAL_MSG_ERROR) {
                *remote_status = h.status;
                return shoal_rpc_error_errno(h.status, b, h.body_len);
        }
        struct shoal_wire_read_resp resp;
        if (h.type != SHOAL_MSG_READ_RESP ||
            shoal_rpc_decode_answer(SHOAL_SERVICE_POOL, b, h.body_len, &resp) ||
            shoal_rpc_check_answer(vol, obj, index, off, len, &h, &resp))
                return -EPROTO;
        rc = shoal_rpc_recv_payload(fd, dst, len, deadline);
        if (rc)
                return rc;
        return shoal_rpc_verify_payload(vol, obj, index, off, len, dst, &resp);
}

static void report_corrupt(int fd, const struct shoal_volume *vol, const struct shoal_object *obj,
                           uint32_t index, uint32_t off, uint32_t len, uint64_t deadline)
{
        uint8_t b[2048];
        int n = shoal_rpc_encode_read(b, sizeof(b), vol, obj, index, off, len, 0);
        if (n > 0)
                shoal_rpc_send_frame(fd, SHOAL_MSG_CORRUPT, 0, 0, b, (size_t)n, deadline);
}

int shoal_pool_read(struct shoal_pool *p, const char *addr, const struct shoal_volume *vol,
                    const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                    void *dst, uint64_t view_version, uint64_t deadline)
{
        int rc = -EIO;
        unsigned fresh_tries = 0, corrupt_tries = 0;
        bool fresh = false;
        for (unsigned attempt = 0; attempt < 4; attempt++) {
                bool pooled;
                int err = 0;
                struct pconn *pc = pool_get(p, addr, fresh, &pooled, deadline, &err);
                if (!pc)
                        return err;
                uint32_t st = 0;
                rc = read_once(p, pc->fd, vol, obj, index, off, len, dst, view_version, deadline,
                               &st);
                if (!rc) {
                        pool_put(p, addr, pc, true);
                        return 0;
                }
                if (st) {
                        /* An error answer: the connection is fine, the request is not. */
                        pool_put(p, addr, pc, true);
                        log_debug("remote", "member %s answered %s for %s/%u", addr,
                                  shoal_status_str(st), obj->key, index);
                        return rc;
                }
                if (rc == -EBADMSG) {
                        log_ratelimited(SHOAL_LOG_WARN, "remote",
                                        "checksum mismatch in %s/%u from %s; reported", obj->key,
                                        index, addr);
                        report_corrupt(pc->fd, vol, obj, index, off, len, deadline);
                        pool_put(p, addr, pc, false);
                        if (++corrupt_tries > 1)
                                return rc;
                        continue;
                }
                pool_put(p, addr, pc, false);
                /* A pooled connection may have died while idle (member restarted, or closing
                 * idle connections): one fresh connection is worth trying — not another pooled
                 * one, likely dead for the same reason; a failure on a fresh one is the
                 * member's. */
                if (!pooled || rc == -ETIMEDOUT || ++fresh_tries > 1)
                        return rc;
                fresh = true;
        }
        return rc;
}

int shoal_pool_info(struct shoal_pool *p, const char *addr, struct shoal_wire_info *info,
                    uint64_t deadline)
{
        bool pooled;
        int err = 0;
        struct pconn *pc = pool_get(p, addr, false, &pooled, deadline, &err);
        if (!pc)
                return err;
        uint64_t id = __atomic_add_fetch(&p->next_id, 1, __ATOMIC_RELAXED);
        uint8_t hdr[SHOAL_WIRE_HDR_LEN], b[2048];
        struct shoal_wire_hdr h;
        int rc = shoal_rpc_send_frame(pc->fd, SHOAL_MSG_INFO, 0, id, NULL, 0, deadline);
        if (!rc)
                rc = shoal_rpc_recv_frame(pc->fd, &h, hdr, b, sizeof(b), deadline);
        if (!rc && h.id != id)
                rc = -EPROTO;
        if (!rc) {
                if (h.type == SHOAL_MSG_ERROR)
                        rc = h.status == SHOAL_ST_RPC_DISABLED ? -ENOPROTOOPT : -EREMOTEIO;
                else if (h.type != SHOAL_MSG_INFO_RESP ||
                         shoal_wire_info_decode(b, h.body_len, info))
                        rc = -EPROTO;
                pool_put(p, addr, pc, rc != -EPROTO);
                return rc;
        }
        pool_put(p, addr, pc, false);
        return rc;
}

int shoal_pool_put(struct shoal_pool *p, const char *addr, const char *member_id,
                   struct shoal_put_req *rq)
{
        int rc = -EIO;
        bool fresh = false;
        for (int attempt = 0; attempt < 2; attempt++) {
                bool pooled;
                int err = 0;
                struct pconn *pc = pool_get(p, addr, fresh, &pooled, rq->deadline, &err);
                if (!pc)
                        return err;
                if (strcmp(pc->member_id, member_id)) {
                        /* an address now used by another process gets none of our bytes */
                        log_ratelimited(SHOAL_LOG_WARN, "push", "%s answers as member %s, not %s",
                                        addr, pc->member_id, member_id);
                        pool_put(p, addr, pc, true);
                        return -EACCES;
                }
                uint64_t id = __atomic_add_fetch(&p->next_id, 1, __ATOMIC_RELAXED);
                rq->status = 0;
                rc = shoal_rpc_put_block(pc->fd, id, rq->vol, rq->obj, rq->index, rq->payload,
                                         rq->view_version, rq->deadline, &rq->status);
                /* an error answer leaves the stream in step; anything else does not */
                pool_put(p, addr, pc, !rc || rc == -EREMOTEIO);
                if (!rc || rc == -EREMOTEIO)
                        return rc;
                fresh = true; /* a kept connection may have been closed by the member */
        }
        return rc;
}

/* ---- the pool as a transport (transport/transport.h) --------------------------------------- */

struct pool_transport {
        struct shoal_transport base;
        struct shoal_pool *pool;
};

static struct shoal_pool *pool_of(struct shoal_transport *t)
{
        return ((struct pool_transport *)t)->pool;
}

static int pt_read(struct shoal_transport *t, const struct shoal_route *to,
                   struct shoal_read_req *rq)
{
        return shoal_pool_read(pool_of(t), to->m->tcp_addr, rq->vol, rq->obj, rq->index, rq->off,
                               rq->len, rq->dst, rq->view_version, rq->deadline);
}

static int pt_put(struct shoal_transport *t, const struct shoal_route *to, struct shoal_put_req *rq)
{
        return shoal_pool_put(pool_of(t), to->m->tcp_addr, to->m->id, rq);
}

static int pt_info(struct shoal_transport *t, const struct shoal_route *to,
                   struct shoal_wire_info *info, uint64_t deadline)
{
        return shoal_pool_info(pool_of(t), to->m->tcp_addr, info, deadline);
}

static int pt_conns(struct shoal_transport *t, const struct shoal_route *to)
{
        return (int)shoal_pool_conns(pool_of(t), to->m->tcp_addr);
}

static unsigned pt_inflight(struct shoal_transport *t, const struct shoal_route *to)
{
        return shoal_pool_inflight(pool_of(t), to->m->tcp_addr);
}

static void pt_destroy(struct shoal_transport *t)
{
        shoal_pool_destroy(pool_of(t));
        free(t);
}

static const struct shoal_transport_ops pool_ops = {
        .name = "pool",
        .bytes_metric = SHOAL_M_remotecache_tcp_get_bytes,
        .read = pt_read,
        .put = pt_put,
        .info = pt_info,
        .conns = pt_conns,
        .inflight = pt_inflight,
        .destroy = pt_destroy,
};

struct shoal_transport *shoal_transport_pool_create(const struct shoal_secret *secret,
                                                    unsigned idle_per_peer)
{
        struct pool_transport *t = calloc(1, sizeof(*t));
        if (!t)
                return NULL;
        t->base.ops = &pool_ops;
        t->pool = shoal_pool_create(secret, idle_per_peer, SHOAL_SERVICE_POOL);
        if (!t->pool) {
                free(t);
                return NULL;
        }
        return &t->base;
}
