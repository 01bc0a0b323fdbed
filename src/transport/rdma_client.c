/* The RDMA requester [M2, M4]: per member and --rdma-network interface a "link" of 1 to 8
 * FI_EP_MSG channels to the member's listener on the matching subnet ([R5]: more under load,
 * fewer after). What a link and its channels do on each event is transport/rdma_chan.c's state
 * machine; this file backs its actions with libfabric and runs the threads.
 *
 * Exposure (issue 11 finding 6): a member can write only into the buffer of a request in flight
 * to it. The caller registers that buffer for remote writes, per request, on the member's own
 * domain for that interface (a verbs protection domain, a tcp key table: a key made for one
 * member is worth nothing on another's connections), under a random key where the provider takes
 * requested keys (tcp; verbs picks its own), and closes the registration as soon as the answer
 * is back, before it checks a single CRC: a write after that fails and breaks the connection.
 * Long-lived memory (the reader's block buffers, the bounce pool) is never registered for remote
 * access; it is only recorded (and marked MADV_DONTFORK) so that a request into it can be
 * registered in place.
 *
 * Threads: callers register, hand the request to the progress thread and sleep on a semaphore;
 * the progress thread makes every libfabric call on endpoints and queues: it sleeps in epoll on
 * one EQ per interface and one CQ per link (issue 14 finding 5) and an eventfd, and reads only
 * what epoll reported; a connector thread makes fi_endpoint (which resolves the address and
 * route synchronously on verbs, up to ~2 s: finding 6) and registers channel memory, so opening
 * a channel never stalls the traffic of other members. A request leaves the progress thread only
 * with its answer or after its channel was shut down, so the member never writes into a buffer
 * its caller took back.
 *
 * Failure of a member's channel (connect or handshake failure, EQ error, FI_SHUTDOWN, CQ error,
 * missing heartbeat answers, a request past its deadline) fails every link of that member:
 * in-flight and waiting requests return -ENOTCONN and the caller re-issues them over IORPC on
 * TCP, and so do new ones until the retry time passes; then the next request starts a reconnect
 * in the background while it goes over TCP itself. */
#include "transport/rdma_client.h"

#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <semaphore.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/bufpool.h"
#include "common/config.h"
#include "common/forkgate.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "transport/client_conn.h"
#include "transport/rdma_client_int.h"
#include "wire/handshake.h"
#include "transport/rdma_chan.h"
#include "wire/wire.h"

static struct rc_chan *chan_of(struct shoal_rdma_chan *m)
{
        return (struct rc_chan *)((char *)m - offsetof(struct rc_chan, m));
}

static struct rc_link *link_of(struct shoal_rdma_link *m)
{
        return (struct rc_link *)((char *)m - offsetof(struct rc_link, m));
}

static void peer_fail(struct rc_peer *p, const char *why, uint64_t now);
static int chan_request(struct rc_link *l, bool grow);

/* ---- the machine's actions ----------------------------------------------------------------- */

static int op_post_rx(void *env, struct shoal_rdma_chan *m, struct shoal_rdma_cbuf *b)
{
        return shoal_fab_post_rx(chan_of(m)->ep, m->addr, b->data, b->desc, &b->op);
}

static int op_post_send(void *env, struct shoal_rdma_chan *m, struct shoal_rdma_cbuf *b, size_t len)
{
        return shoal_fab_post_send(chan_of(m)->ep, m->addr, b->data, len, b->desc, &b->op);
}

static void op_shutdown(void *env, struct shoal_rdma_chan *m)
{
        struct shoal_rdma_client *cl = env;
        struct rc_chan *ch = chan_of(m);
        /* After this the member cannot write into any request buffer of the channel (tcp stops
         * reading the socket, verbs moves the QP to the error state). */
        shoal_fab_ep_shutdown(ch->ep, m->addr);
        shoal_list_push_front(&cl->dying, &ch->dying);
}

static void op_complete(void *env, struct shoal_rdma_creq *q, int rc)
{
        struct rreq *r = (struct rreq *)((char *)q - offsetof(struct rreq, q));
        r->rc = rc;
        sem_post(&r->done); /* R belongs to the caller from here on */
}

static int op_grow(void *env, struct shoal_rdma_link *m)
{
        return chan_request(link_of(m), true);
}

static void op_fail(void *env, struct shoal_rdma_link *m, const char *why, uint64_t now)
{
        peer_fail(link_of(m)->p, why, now);
}

static void op_ready(void *env, struct shoal_rdma_chan *m)
{
        struct shoal_rdma_client *cl = env;
        struct rc_link *l = chan_of(m)->link;
        struct rc_peer *p = l->p;
        log_info("iorpc", "iorpc client started, server address %s, transport:RDMA (%s, %s)",
                 m->addr, l->rail->fab.ifname, l->rail->fab.prov);
        for (unsigned i = 0; i < p->nlinks; i++)
                if (!shoal_rdma_link_ready(&p->links[i]->m))
                        return;
        pthread_mutex_lock(&cl->mu);
        if (p->state == P_CONNECTING) {
                p->state = P_UP;
                p->ever_up = true;
        }
        pthread_mutex_unlock(&cl->mu);
}

static uint64_t op_new_id(void *env)
{
        return rc_new_id(env);
}

static uint64_t op_rand(void *env)
{
        return shoal_rand64();
}

static const struct shoal_rdma_link_ops link_ops = {
        .post_rx = op_post_rx,
        .post_send = op_post_send,
        .shutdown = op_shutdown,
        .complete = op_complete,
        .grow = op_grow,
        .fail = op_fail,
        .ready = op_ready,
        .new_id = op_new_id,
        .rand = op_rand,
};

/* ---- channels: opened by the connector thread, run by the progress thread ------------------- */

static void chan_free(struct rc_chan *ch)
{
        struct rc_link *l = ch->link;
        if (ch->ep)
                fi_close(&ch->ep->fid);
        if (ch->mem.mem)
                shoal_metric_gauge_add(SHOAL_M_rdma_registered_bytes, -(int64_t)ch->mem.len);
        shoal_fab_slots_close(&l->rail->fab, &ch->mem);
        free(ch->bufs);
        free(ch->slots);
        free(ch->dest);
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        free(ch);
}

/* Asks the connector for one more channel of L (progress thread). */
static int chan_request(struct rc_link *l, bool grow)
{
        struct shoal_rdma_client *cl = l->p->cl;
        struct rc_chan *ch = calloc(1, sizeof(*ch));
        if (!ch)
                return -ENOMEM;
        ch->link = l;
        shoal_list_init(&ch->dying);
        ch->gen = l->p->gen;
        ch->grow = grow;
        shoal_strlcpy(ch->m.addr, l->addr, sizeof(ch->m.addr));
        ch->m.owner = ch;
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        pthread_mutex_lock(&cl->mu);
        if (cl->connq_tail)
                cl->connq_tail->next = ch;
        else
                cl->connq = ch;
        cl->connq_tail = ch;
        pthread_cond_signal(&cl->conn_cond);
        pthread_mutex_unlock(&cl->mu);
        return 0;
}

/* Connector thread: what may block — registering the channel's buffers, and fi_endpoint. */
static void chan_prepare(struct rc_chan *ch)
{
        struct rc_link *l = ch->link;
        struct shoal_fab *f = &l->rail->fab;
        struct fi_info *info = NULL;
        /* What the provider's queues hold, at most NSLOTS each (issue 32: a receive queue of
         * 16 took 64 posts before, the 17th failed and so did the member). */
        unsigned nrx = (unsigned)SHOAL_MIN(f->rx_size, (size_t)NSLOTS);
        unsigned nsb = (unsigned)SHOAL_MIN(f->tx_size, (size_t)NSLOTS);
        ch->open_call = "the provider's queues (fewer than 4 receives or 2 sends)";
        ch->open_rc = -ENOTSUP;
        if (nrx < 4 || nsb < 2)
                return;
        ch->open_call = "calloc";
        ch->open_rc = -ENOMEM;
        ch->bufs = calloc(nrx + nsb, sizeof(*ch->bufs));
        ch->slots = calloc(nrx, sizeof(*ch->slots));
        if (!ch->bufs || !ch->slots)
                return;
        ch->open_call = "fi_mr_reg";
        if ((ch->open_rc = shoal_fab_slots_open(f, l->dom, nrx + nsb, &ch->mem))) {
                shoal_fab_slots_close(f, &ch->mem); /* counted only once registered */
                return;
        }
        shoal_metric_gauge_add(SHOAL_M_rdma_registered_bytes, (int64_t)ch->mem.len);
        for (unsigned i = 0; i < nrx + nsb; i++) {
                ch->bufs[i].data = shoal_fab_slot(&ch->mem, i);
                ch->bufs[i].desc = ch->mem.desc;
        }
        ch->m.rx = ch->bufs;
        ch->m.nrx = nrx;
        ch->m.sb = ch->bufs + nrx;
        ch->m.nsb = nsb;
        ch->m.slots = ch->slots;
        ch->open_call = "fi_dupinfo";
        ch->open_rc = -EINVAL;
        ch->dest = shoal_fab_addr_parse(ch->m.addr);
        info = fi_dupinfo(f->info);
        if (!info || !ch->dest)
                goto out;
        free(info->dest_addr);
        info->dest_addr = malloc(sizeof(*ch->dest));
        if (!info->dest_addr)
                goto out;
        memcpy(info->dest_addr, ch->dest, sizeof(*ch->dest));
        info->dest_addrlen = sizeof(*ch->dest);
        ch->open_call = "fi_endpoint";
        /* Queues: NRX receives, NSB sends; the link's CQ holds them all. */
        ch->open_rc = shoal_fab_ep_create(l->dom, info, nrx, nsb, ch, &ch->ep);
out:
        if (info)
                fi_freeinfo(info);
}

static void *connector_main(void *arg)
{
        struct shoal_rdma_client *cl = arg;
        pthread_mutex_lock(&cl->mu);
        while (!atomic_load(&cl->stop)) {
                struct rc_chan *ch = cl->connq;
                if (!ch) {
                        pthread_cond_wait(&cl->conn_cond, &cl->mu);
                        continue;
                }
                cl->connq = ch->next;
                if (!cl->connq)
                        cl->connq_tail = NULL;
                pthread_mutex_unlock(&cl->mu);
                /* libfabric calls: never copied half-done into a forked child */
                bool t = shoal_fork_gate_bg_enter();
                chan_prepare(ch);
                shoal_fork_gate_bg_exit(t);
                pthread_mutex_lock(&cl->mu);
                ch->next = cl->opened;
                cl->opened = ch;
                rc_wake(cl);
        }
        pthread_mutex_unlock(&cl->mu);
        return NULL;
}

/* Progress thread: a channel back from the connector joins its link and connects. */
static void chan_opened(struct shoal_rdma_client *cl, struct rc_chan *ch, uint64_t now)
{
        struct rc_link *l = ch->link;
        struct rc_peer *p = l->p;
        if (ch->gen != p->gen || p->state == P_DOWN) {
                chan_free(ch); /* the member failed meanwhile */
                return;
        }
        int rc = ch->open_rc;
        const char *call = ch->open_call;
        if (!rc)
                rc = shoal_fab_ep_bind(ch->ep, l->rail->eq, l->cq, &call);
        if (!rc) {
                rc = shoal_rdma_link_add(&l->m, &ch->m, now);
                call = "posting receives";
                if (rc && ch->m.posted) {
                        /* some receives are out: let the flush bring them back */
                        ch->m.broken = true;
                        ch->m.broken_at = now;
                        shoal_list_push_front(&cl->dying, &ch->dying);
                        ch = NULL;
                }
        }
        if (!rc) {
                call = "fi_connect";
                if ((rc = fi_connect(ch->ep, ch->dest, NULL, 0))) {
                        shoal_fab_log_err(ch->m.addr, call, rc);
                        shoal_rdma_chan_error(&ch->m, "cannot connect", now);
                }
                return;
        }
        if (ch) {
                shoal_fab_log_err(l->addr, call, rc);
                bool grow = ch->grow;
                chan_free(ch);
                if (grow && l->m.nchans) { /* else the retry of a refused only channel */
                        shoal_rdma_link_grow_failed(&l->m);
                        return;
                }
        }
        peer_fail(p, "cannot open a channel", now);
}

/* Closes the endpoints of shut-down channels once nothing is posted (or after DRAIN_NS) and frees
 * them once every completion was read; parks the rare one whose completions never come. */
static void reap(struct shoal_rdma_client *cl, uint64_t now)
{
        struct shoal_list *pos, *next;
        list_for_each (pos, next, &cl->dying) {
                struct rc_chan *ch = shoal_list_entry(pos, struct rc_chan, dying);
                struct shoal_rdma_chan *m = &ch->m;
                uint64_t age = now > m->broken_at ? now - m->broken_at : 0;
                if (!m->ep_closed && (!m->posted || age > DRAIN_NS)) {
                        fi_close(&ch->ep->fid);
                        ch->ep = NULL;
                        shoal_rdma_chan_ep_closed(m);
                }
                if (shoal_rdma_chan_can_free(m)) {
                        shoal_list_del(&ch->dying);
                        chan_free(ch);
                        continue;
                }
                if (m->ep_closed && age > PARK_NS && ch->mem.mem) {
                        log_warn("rdma", "channel to %s: %d operations never completed; parked",
                                 m->addr, m->posted);
                        shoal_metric_gauge_add(SHOAL_M_rdma_registered_bytes,
                                               -(int64_t)ch->mem.len);
                        shoal_fab_slots_close(&ch->link->rail->fab, &ch->mem);
                }
        }
}

/* ---- members ------------------------------------------------------------------------------- */

static uint32_t ipv4_of(const char *addr)
{
        struct sockaddr_in *sa = shoal_fab_addr_parse(addr);
        uint32_t a = sa ? ntohl(sa->sin_addr.s_addr) : 0;
        free(sa);
        return a;
}

/* The member address for rail R: the one sharing the longest IPv4 prefix with R's address (the
 * same subnet), else the one at R's position. */
static const char *addr_for_rail(const char (*addrs)[64], unsigned n, struct rc_rail *r)
{
        char tmp[80];
        snprintf(tmp, sizeof(tmp), "%s:1", r->fab.ip);
        uint32_t a = ipv4_of(tmp);
        int best = -1, best_bits = -1;
        for (unsigned i = 0; i < n; i++) {
                uint32_t x = a ^ ipv4_of(addrs[i]);
                int bits = x ? __builtin_clz(x) : 32;
                if (bits > best_bits) {
                        best_bits = bits;
                        best = (int)i;
                }
        }
        if (best < 0)
                return NULL;
        if (best_bits < 8)
                best = (int)(r->index % n);
        return addrs[best];
}

static void epoll_add(struct shoal_rdma_client *cl, int fd, struct rc_q *q)
{
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = q};
        epoll_ctl(cl->epfd, EPOLL_CTL_ADD, fd, &ev);
}

static void link_close(struct rc_link *l)
{
        if (l->cq)
                fi_close(&l->cq->fid);
        if (l->dom)
                fi_close(&l->dom->fid);
        free(l);
}

/* A link of P on rail R: the member's own domain and CQ (caller thread, under mu). */
static struct rc_link *link_open(struct shoal_rdma_client *cl, struct rc_peer *p, struct rc_rail *r)
{
        struct rc_link *l = calloc(1, sizeof(*l));
        if (!l)
                return NULL;
        l->p = p;
        l->rail = r;
        l->cq_fd = -1;
        /* Each channel: NSLOTS receives and NSLOTS sends. */
        if (shoal_fab_domain_open(&r->fab, &l->dom) ||
            shoal_fab_cq_open(&r->fab, (size_t)SHOAL_RDMA_CHANS_MAX * 2 * NSLOTS + 64, &l->cq,
                              &l->cq_fd)) {
                link_close(l);
                return NULL;
        }
        shoal_rdma_link_init(&l->m, &link_ops, cl, &cl->lcfg, shoal_now_ns());
        l->q = (struct rc_q){.kind = Q_CQ, .obj = l};
        epoll_add(cl, l->cq_fd, &l->q);
        return l;
}

static bool same_addrs(const struct rc_peer *p, const char (*addrs)[64], unsigned n)
{
        if (SHOAL_MIN(n, (unsigned)SHOAL_FAB_MAX_IFACES) != p->naddrs)
                return false;
        for (unsigned i = 0; i < p->naddrs; i++)
                if (strcmp(addrs[i], p->addrs[i]))
                        return false;
        return true;
}

static void set_addrs(struct rc_peer *p, const char (*addrs)[64], unsigned n)
{
        p->naddrs = SHOAL_MIN(n, (unsigned)SHOAL_FAB_MAX_IFACES);
        for (unsigned i = 0; i < p->naddrs; i++)
                shoal_strlcpy(p->addrs[i], addrs[i], sizeof(p->addrs[i]));
}

/* The member MEMBER_ID (created with its links on first use), mu held. NULL without memory or
 * when its links cannot be opened. */
struct rc_peer *rc_peer_get_locked(struct shoal_rdma_client *cl, const char *member_id,
                                   const char (*addrs)[64], unsigned n)
{
        for (struct rc_peer *p = atomic_load(&cl->peers); p; p = p->next)
                if (!strcmp(p->id, member_id)) {
                        if (!same_addrs(p, addrs, n)) {
                                /* the addresses come from the group view and change with a
                                 * member's restart: the progress thread reconnects */
                                set_addrs(p, addrs, n);
                                p->addrs_changed = true;
                        }
                        return p;
                }
        struct rc_peer *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->cl = cl;
        shoal_strlcpy(p->id, member_id, sizeof(p->id));
        set_addrs(p, addrs, n);
        for (unsigned i = 0; i < cl->nrails; i++) {
                struct rc_link *l = link_open(cl, p, &cl->rails[i]);
                if (!l) {
                        while (p->nlinks)
                                link_close(p->links[--p->nlinks]);
                        free(p);
                        return NULL;
                }
                p->links[p->nlinks++] = l;
        }
        /* Published last and complete: the progress thread walks the list without mu. */
        atomic_store(&p->next, atomic_load(&cl->peers));
        atomic_store(&cl->peers, p);
        return p;
}

static void peer_connect(struct rc_peer *p, uint64_t now)
{
        struct shoal_rdma_client *cl = p->cl;
        pthread_mutex_lock(&cl->mu);
        p->state = P_CONNECTING;
        pthread_mutex_unlock(&cl->mu);
        for (unsigned i = 0; i < p->nlinks; i++) {
                struct rc_link *l = p->links[i];
                const char *a = addr_for_rail((const char(*)[64])p->addrs, p->naddrs, l->rail);
                shoal_strlcpy(l->addr, a ? a : "", sizeof(l->addr));
                if (!a || chan_request(l, false)) {
                        peer_fail(p, "cannot open a channel", now);
                        return;
                }
        }
}

static void peer_fail(struct rc_peer *p, const char *why, uint64_t now)
{
        struct shoal_rdma_client *cl = p->cl;
        pthread_mutex_lock(&cl->mu);
        bool was_up = p->state == P_UP, was_down = p->state == P_DOWN;
        p->state = P_DOWN;
        p->failed = true;
        p->down_until = now + cl->cfg.retry_ns;
        pthread_mutex_unlock(&cl->mu);
        p->gen++; /* channels still with the connector are dropped when they come back */
        unsigned waiting = 0;
        for (unsigned i = 0; i < p->nlinks; i++) {
                waiting += p->links[i]->m.nwaiting;
                shoal_rdma_link_fail(&p->links[i]->m, now);
        }
        if (waiting)
                log_debug("rdma", "member %s: %u requests waiting for a channel go over TCP", p->id,
                          waiting);
        if (was_down || atomic_load(&cl->stop))
                return;
        char retry[32];
        shoal_format_duration(cl->cfg.retry_ns, retry, sizeof(retry));
        shoal_metric_inc(SHOAL_M_rdma_failovers);
        if (was_up)
                log_warn("rdma",
                         "rdma to member %s lost: %s; its reads go over IORPC on TCP, RDMA "
                         "retried in %s",
                         p->id, why, retry);
        else /* the seeds' FAQ line, once per attempt that failed (rate-limited) */
                log_ratelimited(SHOAL_LOG_WARN, "rdma",
                                "Cannot establish rpc connection to member %s over RDMA: %s; its "
                                "reads go over IORPC on TCP, RDMA retried in %s",
                                p->id, why, retry);
}

/* Progress thread: a caller's request. */
static void on_submit(struct shoal_rdma_client *cl, struct rreq *r, uint64_t now)
{
        struct rc_link *l = r->link;
        struct rc_peer *p = l->p;
        pthread_mutex_lock(&cl->mu);
        bool changed = p->addrs_changed;
        p->addrs_changed = false;
        enum peer_state st = p->state;
        bool ever_up = p->ever_up || p->failed, retry = now >= p->down_until;
        pthread_mutex_unlock(&cl->mu);
        if (changed) {
                if (st == P_UP || st == P_CONNECTING)
                        peer_fail(p, "member addresses changed", now);
                pthread_mutex_lock(&cl->mu);
                p->state = st = P_NEW;
                p->ever_up = p->failed = ever_up = false;
                pthread_mutex_unlock(&cl->mu);
        }
        switch (st) {
        case P_DOWN:
                op_complete(cl, &r->q, -ENOTCONN);
                if (retry) /* reconnect in the background; this one goes over TCP meanwhile */
                        peer_connect(p, now);
                return;
        case P_NEW:
                shoal_rdma_link_submit(&l->m, &r->q, now);
                peer_connect(p, now);
                return;
        case P_CONNECTING:
                /* Only the first connection is waited for; a reconnect runs in the
                 * background while requests go over TCP. */
                if (ever_up)
                        op_complete(cl, &r->q, -ENOTCONN);
                else
                        shoal_rdma_link_submit(&l->m, &r->q, now);
                return;
        case P_UP:
                shoal_rdma_link_submit(&l->m, &r->q, now);
                return;
        }
}

/* ---- the loop ------------------------------------------------------------------------------- */

static void eq_event(struct shoal_fab_event *ev, uint64_t now)
{
        if (ev->info)
                fi_freeinfo(ev->info);
        struct rc_chan *ch = ev->ctx;
        if (!ch)
                return;
        char line[300];
        if (ev->err == FI_ECONNREFUSED) {
                snprintf(line, sizeof(line), "connection to %s: %s", ch->m.addr, ev->msg);
                shoal_rdma_chan_refused(&ch->m, line, now);
        } else if (ev->err) {
                snprintf(line, sizeof(line), "connection to %s: %s", ch->m.addr, ev->msg);
                shoal_rdma_chan_error(&ch->m, line, now);
        } else if (ev->event == FI_CONNECTED) {
                shoal_rdma_chan_connected(&ch->m, now);
        } else if (ev->event == FI_SHUTDOWN) {
                shoal_rdma_chan_error(&ch->m, "the member shut the connection down", now);
        }
}

static bool eq_poll(struct rc_rail *r, uint64_t now)
{
        for (int k = 0; k < POLL_BUDGET; k++) {
                struct shoal_fab_event ev;
                if (shoal_fab_eq_next(r->eq, r->fab.ifname, &ev) <= 0)
                        return false;
                eq_event(&ev, now);
        }
        return true;
}

static void completion(struct shoal_fab_op *op, size_t len, int err, uint64_t now)
{
        struct shoal_rdma_cbuf *b = op->owner;
        shoal_rdma_chan_completion(b->ch, op, len, err, now);
}

static bool cq_poll(struct rc_link *l, uint64_t now)
{
        return shoal_fab_cq_drain(l->cq, l->addr, POLL_BUDGET, completion, now);
}

/* Polls Q unless armed, then re-arms it; true when it must be polled again before sleeping. */
static bool queue_service(struct rc_q *q, uint64_t now)
{
        if (q->armed)
                return false;
        bool more;
        struct shoal_fab *f;
        struct fid *fid;
        if (q->kind == Q_EQ) {
                struct rc_rail *r = q->obj;
                more = eq_poll(r, now);
                f = &r->fab;
                fid = &r->eq->fid;
        } else {
                struct rc_link *l = q->obj;
                more = cq_poll(l, now);
                f = &l->rail->fab;
                fid = &l->cq->fid;
        }
        if (more)
                return true;
        q->armed = shoal_fab_trywait(f, fid);
        return !q->armed;
}

static void take_queues(struct shoal_rdma_client *cl, uint64_t now)
{
        uint64_t v;
        if (read(cl->evfd, &v, sizeof(v)) < 0) {
                /* EAGAIN: nothing signalled */
        }
        pthread_mutex_lock(&cl->mu);
        struct rreq *r = cl->subq;
        cl->subq = cl->subq_tail = NULL;
        struct rc_chan *ch = cl->opened;
        cl->opened = NULL;
        pthread_mutex_unlock(&cl->mu);
        while (ch) {
                struct rc_chan *next = ch->next;
                ch->next = NULL;
                chan_opened(cl, ch, now);
                ch = next;
        }
        while (r) {
                struct rreq *next = r->next;
                on_submit(cl, r, now);
                r = next;
        }
}

static void tick(struct shoal_rdma_client *cl, uint64_t now)
{
        for (struct rc_peer *p = atomic_load(&cl->peers); p; p = atomic_load(&p->next))
                for (unsigned i = 0; i < p->nlinks; i++) {
                        struct rc_link *l = p->links[i];
                        shoal_rdma_link_tick(&l->m, now);
                        atomic_store(&l->ready, shoal_rdma_link_ready(&l->m));
                }
        reap(cl, now);
}

static void *progress_main(void *arg)
{
        struct shoal_rdma_client *cl = arg;
        uint64_t next_tick = 0;
        bool busy = true;
        int timeout_ms = 100;
        while (!atomic_load(&cl->stop)) {
                struct epoll_event evs[64];
                int n = epoll_wait(cl->epfd, evs, 64, busy ? 0 : timeout_ms);
                /* Each turn's libfabric calls inside the fork gate's second door: a fork never
                 * copies a lock of libfabric's held by this thread into a child that opens its
                 * own fabric (lib/client.c). */
                bool gated = shoal_fork_gate_bg_enter();
                uint64_t now = shoal_now_ns();
                bool events = false;
                for (int i = 0; i < n; i++) {
                        struct rc_q *q = evs[i].data.ptr;
                        if (q->kind == Q_EVENTS)
                                events = true;
                        else
                                q->armed = false;
                }
                if (events)
                        take_queues(cl, now);
                busy = false;
                for (unsigned i = 0; i < cl->nrails; i++)
                        busy |= queue_service(&cl->rails[i].q, now);
                uint64_t soon = next_tick;
                for (struct rc_peer *p = atomic_load(&cl->peers); p; p = atomic_load(&p->next))
                        for (unsigned i = 0; i < p->nlinks; i++) {
                                struct rc_link *l = p->links[i];
                                busy |= queue_service(&l->q, now);
                                shoal_rdma_link_retry(&l->m, now);
                                /* one that is due but cannot start yet waits for a tick */
                                if (l->m.retry_at > now && l->m.retry_at < soon)
                                        soon = l->m.retry_at;
                        }
                timeout_ms = soon > now ? (int)SHOAL_MIN((soon - now + SHOAL_NS_PER_MS - 1) /
                                                                 SHOAL_NS_PER_MS,
                                                         100)
                                        : 0;
                if (now >= next_tick) {
                        tick(cl, now);
                        next_tick = now + TICK_NS;
                }
                shoal_fork_gate_bg_exit(gated);
        }
        bool gated = shoal_fork_gate_bg_enter();
        /* Stopping: shut every channel down (requests return -ENOTCONN), then free them. */
        for (struct rc_peer *p = atomic_load(&cl->peers); p; p = atomic_load(&p->next))
                peer_fail(p, "client stopping", shoal_now_ns());
        pthread_mutex_lock(&cl->mu);
        struct rreq *r = cl->subq;
        cl->subq = cl->subq_tail = NULL;
        struct rc_chan *opened = cl->opened;
        cl->opened = NULL;
        pthread_mutex_unlock(&cl->mu);
        while (r) { /* late submissions: nothing connects any more */
                struct rreq *next = r->next;
                op_complete(cl, &r->q, -ENOTCONN);
                r = next;
        }
        while (opened) {
                struct rc_chan *next = opened->next;
                chan_free(opened);
                opened = next;
        }
        while (!shoal_list_empty(&cl->dying)) {
                struct rc_chan *ch = shoal_list_entry(cl->dying.next, struct rc_chan, dying);
                shoal_list_del(&ch->dying);
                chan_free(ch); /* closes the endpoint: the provider drops what was posted */
        }
        shoal_fork_gate_bg_exit(gated);
        return NULL;
}

/* ---- set-up --------------------------------------------------------------------------------- */

static int record_region(struct shoal_rdma_client *cl, void *base, size_t len, char *err,
                         size_t errlen)
{
        pthread_mutex_lock(&cl->mu);
        unsigned n = atomic_load(&cl->nregions);
        int rc = 0;
        if (n == MAX_REGIONS) {
                snprintf(err, errlen, "rdma: too many read buffer regions");
                rc = -ENOSPC;
        } else {
                /* Requests into it are registered in place, one by one; a fork (fusermount3)
                 * must not make these pages copy-on-write meanwhile. */
                shoal_fab_dontfork(base, len);
                cl->regions[n] = (struct region){.base = base, .len = len};
                atomic_store(&cl->nregions, n + 1); /* published last: read without mu */
        }
        pthread_mutex_unlock(&cl->mu);
        return rc;
}

int shoal_rdma_client_register(struct shoal_rdma_client *cl, void *base, size_t len, char *err,
                               size_t errlen)
{
        return record_region(cl, base, len, err, errlen);
}

static void link_config(struct shoal_rdma_client *cl)
{
        const struct shoal_env *env = shoal_config_env();
        uint64_t period = shoal_config_pick(0, env->iorpc_scale_period_ns,
                                            SHOAL_IORPC_SCALE_PERIOD_DEFAULT_NS);
        cl->lcfg = (struct shoal_rdma_link_config){
                .key = &cl->key,
                .hb_ns = shoal_config_pick(0, env->rdma_heartbeat_ns,
                                           SHOAL_RDMA_HEARTBEAT_DEFAULT_NS),
                .connect_ns = CONNECT_NS,
                /* the longest wait for a channel before TCP takes the request */
                .wait_ns = shoal_config_pick(0, env->rdma_channel_wait_ns,
                                             SHOAL_RDMA_CHANNEL_WAIT_DEFAULT_NS),
                .max_chans = SHOAL_RDMA_CHANS_MAX,
                /* the seeds' thresholds [R5]; the same knob as TCP shortens the periods */
                .grow_ns = period,
                .shrink_ns = 60 * period,
                .grow_bytes = SHOAL_GiB,
                .grow_qps = 5000,
                .shrink_bytes = 512 * SHOAL_MiB,
                .shrink_qps = 2000,
                /* a member at its pre-authentication limits (many workers of one host
                 * starting together) admits the next in milliseconds */
                .refused_pause_ns = REFUSED_PAUSE_NS,
                /* never longer than a failure would keep RDMA off anyway (nobody listening is
                 * ECONNREFUSED too) */
                .refused_ns = SHOAL_MIN(REFUSED_NS, cl->cfg.retry_ns),
        };
        /* SHOAL_RDMA_GROW_QPS / _MIBPS: as for IORPC on TCP (iorpc_client.c) */
        if (env->rdma_grow_qps) {
                cl->lcfg.grow_qps = env->rdma_grow_qps;
                cl->lcfg.shrink_qps =
                        SHOAL_MIN(cl->lcfg.shrink_qps, SHOAL_MAX(cl->lcfg.grow_qps / 2, 1));
        }
        if (env->rdma_grow_mibps) {
                cl->lcfg.grow_bytes = (uint64_t)env->rdma_grow_mibps * SHOAL_MiB;
                cl->lcfg.shrink_bytes = SHOAL_MIN(cl->lcfg.shrink_bytes, cl->lcfg.grow_bytes / 2);
        }
}

struct shoal_rdma_client *shoal_rdma_client_create(const struct shoal_rdma_client_config *cfg,
                                                   char *err, size_t errlen)
{
        struct shoal_rdma_client *cl = calloc(1, sizeof(*cl));
        if (!cl) {
                snprintf(err, errlen, "rdma: out of memory");
                return NULL;
        }
        cl->cfg = *cfg;
        shoal_list_init(&cl->dying);
        cl->epfd = cl->evfd = -1;
        pthread_mutex_init(&cl->mu, NULL);
        pthread_cond_init(&cl->conn_cond, NULL);
        cl->cfg.retry_ns = shoal_config_pick(cfg->retry_ns, shoal_config_env()->rdma_retry_ns,
                                             SHOAL_RDMA_RETRY_DEFAULT_NS);
        if (shoal_random_bytes(&cl->next_id, sizeof(cl->next_id))) {
                snprintf(err, errlen, "rdma: no random bytes");
                goto out_destroy;
        }
        cl->next_id >>= 1;
        if (shoal_hs_key_init(&cl->key, &cfg->secret)) {
                snprintf(err, errlen, "rdma: refusing a group secret shorter than %d bytes",
                         SHOAL_SECRET_MIN);
                goto out_destroy;
        }
        link_config(cl);
        cl->epfd = epoll_create1(EPOLL_CLOEXEC);
        cl->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (cl->epfd < 0 || cl->evfd < 0) {
                snprintf(err, errlen, "rdma: epoll/eventfd: %s", strerror(errno));
                goto out_destroy;
        }
        cl->ev_q = (struct rc_q){.kind = Q_EVENTS};
        epoll_add(cl, cl->evfd, &cl->ev_q);
        for (unsigned i = 0; i < cfg->n_if; i++) {
                struct rc_rail *r = &cl->rails[i];
                shoal_strlcpy(cl->ifaces[i], cfg->ifaces[i], sizeof(cl->ifaces[i]));
                r->index = i;
                r->eq_fd = -1;
                cl->nrails++;
                if (shoal_fab_open(&r->fab, cfg->provider, cfg->ifaces[i], err, errlen))
                        goto out_destroy;
                if (shoal_fab_eq_open(&r->fab, &r->eq, &r->eq_fd)) {
                        snprintf(err, errlen, "--rdma-network %s: cannot open an event queue",
                                 cfg->ifaces[i]);
                        goto out_destroy;
                }
                r->q = (struct rc_q){.kind = Q_EQ, .obj = r};
                epoll_add(cl, r->eq_fd, &r->q);
        }
        size_t bsz = cfg->bounce_size ? cfg->bounce_size : 65536;
        cl->bounce = shoal_bufpool_create(bsz, BOUNCE_BUFS);
        if (!cl->bounce) {
                snprintf(err, errlen, "rdma: cannot allocate bounce buffers");
                goto out_destroy;
        }
        size_t blen;
        void *bbase = shoal_bufpool_base(cl->bounce, &blen);
        if (record_region(cl, bbase, blen, err, errlen))
                goto out_destroy;
        if (shoal_thread_create(&cl->connector, connector_main, cl)) {
                snprintf(err, errlen, "rdma: cannot start the connector thread");
                goto out_destroy;
        }
        pthread_setname_np(cl->connector, "shoal-rdma-conn");
        cl->connector_started = true;
        if (shoal_thread_create(&cl->thread, progress_main, cl)) {
                snprintf(err, errlen, "rdma: cannot start the progress thread");
                goto out_destroy;
        }
        pthread_setname_np(cl->thread, "shoal-rdma-cli");
        cl->started = true;
        return cl;

out_destroy:
        shoal_rdma_client_destroy(cl);
        return NULL;
}

void shoal_rdma_client_destroy(struct shoal_rdma_client *cl)
{
        if (!cl)
                return;
        atomic_store(&cl->stop, true);
        if (cl->connector_started) {
                pthread_mutex_lock(&cl->mu);
                pthread_cond_broadcast(&cl->conn_cond);
                pthread_mutex_unlock(&cl->mu);
                pthread_join(cl->connector, NULL);
        }
        if (cl->started) {
                rc_wake(cl);
                pthread_join(cl->thread, NULL);
        }
        /* Channels the connector never handed back. */
        for (struct rc_chan *q = cl->connq; q;) {
                struct rc_chan *next = q->next;
                chan_free(q);
                q = next;
        }
        for (struct rc_chan *q = cl->opened; q;) {
                struct rc_chan *next = q->next;
                chan_free(q);
                q = next;
        }
        for (struct rc_peer *p = atomic_load(&cl->peers); p;) {
                struct rc_peer *next = atomic_load(&p->next);
                for (unsigned i = 0; i < p->nlinks; i++)
                        link_close(p->links[i]);
                free(p);
                p = next;
        }
        for (unsigned i = 0; i < cl->nrails; i++) {
                if (cl->rails[i].eq)
                        fi_close(&cl->rails[i].eq->fid);
                shoal_fab_close(&cl->rails[i].fab);
        }
        shoal_bufpool_destroy(cl->bounce);
        if (cl->epfd >= 0)
                close(cl->epfd);
        if (cl->evfd >= 0)
                close(cl->evfd);
        pthread_mutex_destroy(&cl->mu);
        pthread_cond_destroy(&cl->conn_cond);
        shoal_hs_key_clear(&cl->key);
        free(cl);
}
