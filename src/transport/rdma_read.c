/* The RDMA requester's read path [M2, M4] (transport/rdma_client.h): a request picks a link,
 * registers its buffer (or a bounce buffer) for the member's write, goes to the progress thread
 * of transport/rdma_client.c and is checked when it is back; `shoal ping --rdma-network`; and
 * RDMA as a transport (transport/transport.h). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "metrics/metrics.h"
#include "transport/client_conn.h"
#include "transport/rdma_client.h"
#include "transport/rdma_client_int.h"
#include "transport/transport.h"
#include "wire/wire.h"

#define PING_NS (5 * SHOAL_NS_PER_SEC) /* one PING of `shoal ping` answers in time */

/* ---- requests ------------------------------------------------------------------------------- */

/* The recorded region holding [P, P+LEN), or -1. */
static int region_of(struct shoal_rdma_client *cl, const void *p, size_t len)
{
        unsigned n = atomic_load(&cl->nregions);
        for (unsigned i = 0; i < n; i++) {
                const char *b = cl->regions[i].base;
                if ((const char *)p >= b && (const char *)p + len <= b + cl->regions[i].len)
                        return (int)i;
        }
        return -1;
}

/* The link for a request to member MEMBER_ID, or NULL when RDMA cannot take it now (the member
 * failed and waits for its retry time, or reconnects after having been up): the caller then
 * goes over TCP at once, without registering anything. Counts the request on the link. */
static struct rc_link *pick_link(struct shoal_rdma_client *cl, const char *member_id,
                                 const char (*addrs)[64], unsigned n_addrs)
{
        uint64_t now = shoal_now_ns();
        pthread_mutex_lock(&cl->mu);
        struct rc_peer *p = rc_peer_get_locked(cl, member_id, addrs, n_addrs);
        struct rc_link *best = NULL;
        bool skip = !p || (!p->addrs_changed &&
                           ((p->state == P_DOWN && now < p->down_until) ||
                            (p->state == P_CONNECTING && (p->ever_up || p->failed))));
        for (unsigned i = 0; !skip && i < p->nlinks; i++) {
                struct rc_link *l = p->links[i];
                /* the least loaded interface; ties go to a random one */
                if (!best || atomic_load(&l->load) < atomic_load(&best->load) ||
                    (atomic_load(&l->load) == atomic_load(&best->load) && (shoal_rand64() & 1)))
                        best = l;
        }
        if (best)
                atomic_fetch_add(&best->load, 1);
        pthread_mutex_unlock(&cl->mu);
        return best;
}

/* Hands R to the progress thread and waits for it to come back (it always does: with an
 * answer, or when its channel was shut down, or after waiting too long, or at the stop). */
static int submit_wait(struct shoal_rdma_client *cl, struct rreq *r)
{
        sem_init(&r->done, 0, 0);
        r->next = NULL;
        r->q.id = rc_new_id(cl);
        pthread_mutex_lock(&cl->mu);
        if (cl->subq_tail)
                cl->subq_tail->next = r;
        else
                cl->subq = r;
        cl->subq_tail = r;
        pthread_mutex_unlock(&cl->mu);
        rc_wake(cl);
        while (sem_wait(&r->done) && errno == EINTR)
                ;
        sem_destroy(&r->done);
        return r->rc;
}

/* Registers [LOCAL, LOCAL+LEN) for remote writes on L's domain. */
static int expose(struct rc_link *l, void *local, size_t len, struct fid_mr **mr, uint64_t *raddr,
                  uint64_t *rkey)
{
        struct shoal_fab *f = &l->rail->fab;
        int rc = shoal_fab_mr_reg_dom(f, l->dom, local, len, FI_REMOTE_WRITE, false, mr);
        if (rc)
                return rc;
        *raddr = shoal_fab_rma_addr(f, local, local);
        *rkey = fi_mr_key(*mr);
        return 0;
}

/* The request is over: revoke the member's access before anything of the buffer is trusted. */
static void revoke_access(struct rc_link *l, struct fid_mr *mr, size_t len)
{
        shoal_fab_mr_close(&l->rail->fab, mr, len);
        atomic_fetch_sub(&l->load, 1);
}

/* Sends the READ (with its buffer's address and key) and waits. */
static int read_once(struct shoal_rdma_client *cl, struct rreq *r, char *local,
                     const struct shoal_volume *vol, const struct shoal_object *obj, uint32_t index,
                     uint32_t off, uint32_t len, uint64_t view_version, uint64_t deadline)
{
        struct fid_mr *mr;
        struct shoal_wire_read rd;
        int n = shoal_rpc_encode_read(r->body, sizeof(r->body), vol, obj, index, off, len,
                                      view_version);
        if (n < 0 || shoal_wire_read_decode(r->body, (size_t)n, &rd))
                return -EINVAL;
        if (expose(r->link, local, len, &mr, &rd.rdma_addr, &rd.rdma_key)) {
                atomic_fetch_sub(&r->link->load, 1);
                return -ENOTCONN;
        }
        n = shoal_wire_read_encode(r->body, sizeof(r->body), &rd);
        r->q.type = SHOAL_MSG_READ;
        r->q.flags = SHOAL_WF_FILL | SHOAL_WF_RDMA_TARGET;
        r->q.body = r->body;
        r->q.body_len = n > 0 ? (size_t)n : 0;
        r->q.len = len;
        r->q.deadline = deadline;
        int rc = n > 0 ? submit_wait(cl, r) : -EINVAL;
        revoke_access(r->link, mr, len);
        return rc;
}

int shoal_rdma_read(struct shoal_rdma_client *cl, const char *member_id, const char (*addrs)[64],
                    unsigned n_addrs, const struct shoal_volume *vol,
                    const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                    void *dst, uint64_t view_version, uint64_t deadline)
{
        if (!n_addrs || !len)
                return -ENOTCONN;
        struct rc_link *l = pick_link(cl, member_id, addrs, n_addrs);
        if (!l)
                return -ENOTCONN;
        struct rreq *r = calloc(1, sizeof(*r));
        char *bounce = NULL, *local = dst;
        int rc = -ENOTCONN;
        if (!r)
                goto out_unload;
        r->link = l;
        if (region_of(cl, dst, len) < 0) {
                uint64_t now = shoal_now_ns();
                if (len > shoal_bufpool_bufsize(cl->bounce) ||
                    !(bounce = shoal_bufpool_get(cl->bounce, deadline > now ? deadline - now : 0)))
                        goto out_unload;
                local = bounce;
        }
        rc = read_once(cl, r, local, vol, obj, index, off, len, view_version, deadline);
        if (rc)
                goto out_free;
        if (r->q.h.type == SHOAL_MSG_ERROR) {
                rc = shoal_rpc_error_errno(r->q.h.status, r->q.resp, r->q.h.body_len);
                goto out_free;
        }
        struct shoal_wire_read_resp resp;
        if (shoal_rpc_decode_answer(SHOAL_SERVICE_IORPC, r->q.resp, r->q.h.body_len, &resp) ||
            shoal_rpc_check_answer(vol, obj, index, off, len, &r->q.h, &resp)) {
                rc = -ENOTCONN; /* a member that answers wrongly: let TCP carry it */
                goto out_free;
        }
        rc = shoal_rpc_verify_payload(vol, obj, index, off, len, local, &resp);
        if (rc)
                goto out_free;
        if (bounce)
                memcpy(dst, bounce, len);
        shoal_metric_add(SHOAL_M_rdma_recv_bytes, len);
        shoal_metric_add(SHOAL_M_rdma_if0_bytes + l->rail->index, len);
        goto out_free;
out_unload:
        atomic_fetch_sub(&l->load, 1);
out_free:
        if (bounce)
                shoal_bufpool_put(cl->bounce, bounce);
        free(r);
        return rc;
}

unsigned shoal_rdma_channels(struct shoal_rdma_client *cl, const char *member_id)
{
        unsigned n = 0;
        pthread_mutex_lock(&cl->mu);
        for (struct rc_peer *p = atomic_load(&cl->peers); p; p = atomic_load(&p->next))
                if (!strcmp(p->id, member_id) && p->state == P_UP)
                        for (unsigned i = 0; i < p->nlinks; i++)
                                n += atomic_load(&p->links[i]->ready);
        pthread_mutex_unlock(&cl->mu);
        return n;
}

/* ---- shoal ping --rdma-network ----------------------------------------------------------------
 */

/* One PING of BODY (BODY_LEN bytes) to the member ADDR through CL; the PONG's body in R. */
static int ping_once(struct shoal_rdma_client *cl, const char (*addr)[64], struct rreq *r,
                     size_t body_len)
{
        struct rc_link *l = pick_link(cl, "ping", addr, 1);
        if (!l)
                return -ENOTCONN;
        r->link = l;
        r->q.type = SHOAL_MSG_PING;
        r->q.body = r->body;
        r->q.body_len = body_len;
        r->q.deadline = shoal_now_ns() + PING_NS;
        int rc = submit_wait(cl, r);
        atomic_fetch_sub(&l->load, 1);
        return rc;
}

int shoal_rdma_ping(const char *provider, const char *ifname, const char *addr,
                    const struct shoal_secret *secret)
{
        char ifs[1][32];
        char err[256];
        char addrs[1][64];
        shoal_strlcpy(ifs[0], ifname, sizeof(ifs[0]));
        shoal_strlcpy(addrs[0], addr, sizeof(addrs[0]));
        struct shoal_rdma_client_config cfg = {.provider = provider,
                                               .ifaces = ifs,
                                               .n_if = 1,
                                               .secret =
                                                       secret ? *secret : (struct shoal_secret){0},
                                               .bounce_size = 65536,
                                               .retry_ns = SHOAL_NS_PER_SEC};
        uint64_t t0 = shoal_now_ns();
        struct shoal_rdma_client *cl = shoal_rdma_client_create(&cfg, err, sizeof(err));
        if (!cl) {
                printf("%-8s %-21s FAILED: %s\n", "rdma", addr, err);
                return -ENODEV;
        }
        struct rreq *r = calloc(1, sizeof(*r));
        char *buf = shoal_bufpool_get(cl->bounce, 0);
        int rc = r && buf ? 0 : -ENOMEM;
        double min = (double)SHOAL_NS_PER_SEC, max = 0, sum = 0, connect_ms = 0;
        unsigned pings = 5;
        for (unsigned i = 0; i <= pings && !rc; i++) {
                uint64_t p0 = shoal_now_ns();
                memset(r, 0, sizeof(*r));
                memcpy(r->body, &p0, 8);
                rc = ping_once(cl, (const char(*)[64])addrs, r, 8);
                if (!rc && (r->q.h.body_len != 8 || memcmp(r->q.resp, &p0, 8)))
                        rc = -EPROTO;
                double ms = (double)(shoal_now_ns() - p0) / (double)SHOAL_NS_PER_MS;
                if (i == 0) { /* the first one includes connect and handshake */
                        connect_ms = (double)(shoal_now_ns() - t0) / (double)SHOAL_NS_PER_MS;
                        continue;
                }
                min = ms < min ? ms : min;
                max = ms > max ? ms : max;
                sum += ms;
        }
        uint32_t wlen = 65536, seed = (uint32_t)shoal_rand64();
        if (!rc) {
                memset(buf, 0, wlen);
                memset(r, 0, sizeof(*r));
                struct rc_link *l = pick_link(cl, "ping", (const char(*)[64])addrs, 1);
                struct fid_mr *mr = NULL;
                uint64_t raddr = 0, rkey = 0;
                rc = l && !expose(l, buf, wlen, &mr, &raddr, &rkey) ? 0 : -ENOTCONN;
                if (l)
                        atomic_fetch_sub(&l->load, 1);
                memcpy(r->body, SHOAL_RDMA_WTEST_MAGIC, 8);
                memcpy(r->body + 8, &raddr, 8);
                memcpy(r->body + 16, &rkey, 8);
                memcpy(r->body + 24, &wlen, 4);
                memcpy(r->body + 28, &seed, 4);
                if (!rc)
                        rc = ping_once(cl, (const char(*)[64])addrs, r, SHOAL_RDMA_WTEST_LEN);
                if (mr)
                        shoal_fab_mr_close(&l->rail->fab, mr, wlen);
                for (uint32_t i = 0; !rc && i < wlen; i++)
                        if ((uint8_t)buf[i] != (uint8_t)(seed + i * 7u + (i >> 8)))
                                rc = -EBADMSG;
        }
        if (rc)
                printf("%-8s %-21s FAILED: %s\n", "rdma", addr,
                       rc == -ENOTCONN  ? "cannot connect or handshake (see the log)"
                       : rc == -EBADMSG ? "RMA write test: data differs"
                                        : strerror(-rc));
        else
                printf("%-8s %-21s ok: from %s (%s), connect+handshake %.2f ms, rtt "
                       "min/avg/max %.3f/%.3f/%.3f ms, rma write %u bytes verified\n",
                       "rdma", addr, ifname, provider, connect_ms, min, sum / pings, max, wlen);
        if (buf)
                shoal_bufpool_put(cl->bounce, buf);
        free(r);
        shoal_rdma_client_destroy(cl);
        return rc;
}

/* Requests to member MEMBER_ID submitted and not back, all interfaces together. */
static unsigned rdma_inflight(struct shoal_rdma_client *cl, const char *member_id)
{
        unsigned n = 0;
        pthread_mutex_lock(&cl->mu);
        for (struct rc_peer *p = atomic_load(&cl->peers); p; p = atomic_load(&p->next))
                if (!strcmp(p->id, member_id))
                        for (unsigned i = 0; i < p->nlinks; i++)
                                n += atomic_load(&p->links[i]->load);
        pthread_mutex_unlock(&cl->mu);
        return n;
}

/* ---- RDMA as a transport (transport/transport.h) ------------------------------------------- */

struct rdma_transport {
        struct shoal_transport base;
        struct shoal_rdma_client *c; /* the caller's */
};

static struct shoal_rdma_client *rt_client(struct shoal_transport *t)
{
        return ((struct rdma_transport *)t)->c;
}

static int rt_read(struct shoal_transport *t, const struct shoal_route *to,
                   struct shoal_read_req *rq)
{
        const struct shoal_member *m = to->m;
        if (!m->n_rdma)
                return -ENOTCONN;
        int rc = shoal_rdma_read(rt_client(t), m->id, (const char(*)[64])m->rdma_addr, m->n_rdma,
                                 rq->vol, rq->obj, rq->index, rq->off, rq->len, rq->dst,
                                 rq->view_version, rq->deadline);
        /* a bad checksum over RDMA: re-issued over IORPC on TCP [M4] */
        return rc == -EBADMSG ? -ENOTCONN : rc;
}

static int rt_conns(struct shoal_transport *t, const struct shoal_route *to)
{
        unsigned n = to->m->n_rdma ? shoal_rdma_channels(rt_client(t), to->m->id) : 0;
        return n ? (int)n : -ENOTCONN;
}

static unsigned rt_inflight(struct shoal_transport *t, const struct shoal_route *to)
{
        return to->m->n_rdma ? rdma_inflight(rt_client(t), to->m->id) : 0;
}

static void rt_destroy(struct shoal_transport *t)
{
        free(t);
}

static const struct shoal_transport_ops rdma_ops = {
        .name = "rdma",
        .bytes_metric = SHOAL_M_remotecache_rdma_get_bytes,
        .read = rt_read,
        .conns = rt_conns,
        .inflight = rt_inflight,
        .destroy = rt_destroy,
};

struct shoal_transport *shoal_transport_rdma_create(struct shoal_rdma_client *c)
{
        struct rdma_transport *t = calloc(1, sizeof(*t));
        if (!t)
                return NULL;
        t->base.ops = &rdma_ops;
        t->c = c;
        return &t->base;
}
