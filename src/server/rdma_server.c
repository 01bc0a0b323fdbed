/* The RDMA side of a member's server [M1, M7]: a passive endpoint per --rdma-network interface
 * and one FI_EP_MSG endpoint per requester connection, all driven by one progress thread. What a
 * connection does on each event is server/rdma_conn.c's state machine; this file backs its actions
 * with libfabric and the request engine (server/engine.h, through server.h) and runs the loop.
 *
 * Per interface ("rail"): one EQ shared by the listener and every connection, and one CQ shared
 * by every connection, so a wake-up costs what is ready, not what is open (issue 14 finding 5:
 * on verbs each empty EQ read and CQ re-arm of an idle connection was a system call). The loop
 * sleeps in epoll on the rails' EQ and CQ wait fds and an eventfd for answers from the engine,
 * and reads only the queues epoll reported (re-arming each with fi_trywait before sleeping).
 *
 * Before a requester proves the group secret it costs the member no memory of its own: its two
 * receives and two send buffers come from a pool registered once per interface, at most
 * PREAUTH_MAX connections per interface and PREAUTH_PER_SOURCE per source address are in that
 * state at once (more are rejected), and they have SHOAL_RDMA_CONN_HS_NS to finish (issue 11).
 *
 * READ answers: the payload is in a buffer of the server's dio pool, or in the reader's block
 * buffers for a block held in memory (both registered once per interface, local access only),
 * written with fi_write (no completion) into the requester's
 * buffer, followed by the READ_RESP by fi_send on the same endpoint: send-after-write ordering
 * (FI_ORDER_SAW) means the data is in place when the requester sees the answer, and the send's
 * completion means the write is over.
 *
 * Teardown: a broken connection is shut down at once; its endpoint is closed once nothing is
 * posted (flushed completions come back through the shared CQ) or after DRAIN_NS, and it is
 * freed when its last completion was read and every request it handed to the engine came back.
 * One whose completions never all come back is parked (kept, without its registered memory)
 * until the rail's CQ is closed. */
#include "server/rdma_server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "common/list.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "wire/handshake.h"
#include "server/rdma_conn.h"
#include "server/server.h"
#include "wire/wire.h"

#define MAX_RX             64  /* receives of an authenticated connection */
#define CONNS_MAX          256 /* connections per interface */
#define PREAUTH_MAX        64  /* connections per interface not authenticated yet */
#define PREAUTH_PER_SOURCE 8   /* of those, from one source address (default) */
#define DRAIN_NS           (2 * SHOAL_NS_PER_SEC)
#define PARK_NS            (10 * SHOAL_NS_PER_SEC)
#define STOP_WAIT_NS       (30 * SHOAL_NS_PER_SEC)
#define TICK_NS            (100 * SHOAL_NS_PER_MS)
#define POLL_BUDGET        1024 /* completions per queue and wake-up, for fairness */

enum rs_kind {
        RS_RAIL,
        RS_CONN
};

struct rs_rail;

/* What epoll reports: one of a rail's queues, or the eventfd (R NULL). */
struct rs_q {
        struct rs_rail *r;
        bool cq;
        bool armed; /* fi_trywait succeeded since the last poll: its fd may be slept on */
};

struct rs_conn {
        enum rs_kind kind; /* first: EQ contexts are rails (the listener) or connections */
        struct shoal_rdma_conn m;
        struct rs_rail *r;
        struct fid_ep *ep;
        uint32_t src; /* source IPv4, host order */
        bool counted_preauth, parked_logged;
        _Atomic bool gone;          /* shut down: the engine drops its requests not started yet */
        struct shoal_fab_slots mem; /* own region, after authentication */
        struct shoal_rdma_buf *bufs;
        struct shoal_rdma_req *reqs;
        unsigned want_rx, want_sb;
        struct shoal_list link; /* its rail's connections, or parked ones */
};

struct rs_rail {
        enum rs_kind kind; /* first */
        struct shoal_rdma_server *rs;
        struct shoal_fab fab;
        struct fid_pep *pep;
        struct fid_eq *eq;
        struct fid_cq *cq;
        int eq_fd, cq_fd;
        struct rs_q eq_q, cq_q;
        struct fid_mr *dio_mr;
        struct fid_mr *held_mr;          /* the reader's block buffers, or NULL */
        struct shoal_fab_slots pool_mem; /* pre-authentication buffers, registered once */
        struct shoal_rdma_buf *pool_bufs, *pool_free;
        unsigned pool_nfree;
        unsigned nconns, npreauth, max_conns;
        char addr[64];
        unsigned index;
        struct shoal_list conns, parked;
};

struct shoal_rdma_server {
        struct shoal_server *srv;
        struct shoal_hs_key key;
        char member_id[SHOAL_WIRE_MEMBER_ID_MAX + 1];
        struct rs_rail rails[SHOAL_FAB_MAX_IFACES];
        unsigned nrails;
        void *dio_base, *held_base;
        size_t dio_len, held_len;
        unsigned conn_budget; /* connections the open-files limit allows, all interfaces */
        _Atomic unsigned preauth_per_source; /* PREAUTH_PER_SOURCE, or the member's setting */
        unsigned nrails_wanted;
        int epfd, evfd;
        struct rs_q ev_q;
        pthread_t thread;
        bool started;
        _Atomic bool stop;
        pthread_mutex_t mu; /* the done queue */
        struct shoal_rdma_req *done, *done_tail;
};

static struct rs_conn *conn_of(struct shoal_rdma_conn *m)
{
        return (struct rs_conn *)((char *)m - offsetof(struct rs_conn, m));
}

static struct rs_conn *conn_at(struct shoal_list *l)
{
        return shoal_list_entry(l, struct rs_conn, link);
}

/* ---- the machine's actions ----------------------------------------------------------------- */

static int op_post_rx(void *env, struct shoal_rdma_conn *m, struct shoal_rdma_buf *b)
{
        struct rs_conn *c = conn_of(m);
        return shoal_fab_post_rx(c->ep, m->peer, b->data, b->desc, &b->op);
}

static int op_post_send(void *env, struct shoal_rdma_conn *m, struct shoal_rdma_buf *b, size_t len)
{
        struct rs_conn *c = conn_of(m);
        return shoal_fab_post_send(c->ep, m->peer, b->data, len, b->desc, &b->op);
}

static int op_post_write(void *env, struct shoal_rdma_conn *m, struct shoal_rdma_buf *b,
                         const void *data, size_t len, uint64_t raddr, uint64_t rkey)
{
        struct rs_conn *c = conn_of(m);
        struct rs_rail *r = c->r;
        const char *p = data, *held = r->rs->held_base;
        bool in_held = r->held_mr && p >= held && p + len <= held + r->rs->held_len;
        void *desc = shoal_fab_desc(&r->fab, in_held ? r->held_mr : r->dio_mr);
        return shoal_fab_post_write(c->ep, m->peer, data, len, desc, raddr, rkey, &b->wop);
}

static void op_shutdown(void *env, struct shoal_rdma_conn *m)
{
        struct rs_conn *c = conn_of(m);
        atomic_store_explicit(&c->gone, true, memory_order_release);
        shoal_fab_ep_shutdown(c->ep, m->peer);
}

static int op_upgrade(void *env, struct shoal_rdma_conn *m)
{
        struct rs_conn *c = conn_of(m);
        struct rs_rail *r = c->r;
        unsigned n = c->want_rx + c->want_sb;
        c->bufs = calloc(n, sizeof(*c->bufs));
        c->reqs = calloc(m->max_inflight + 2, sizeof(*c->reqs));
        if (!c->bufs || !c->reqs)
                return -ENOMEM;
        int rc = shoal_fab_slots_open(&r->fab, NULL, n, &c->mem);
        if (rc) {
                shoal_fab_slots_close(&r->fab, &c->mem); /* counted only once registered */
                return rc;
        }
        shoal_metric_gauge_add(SHOAL_M_rdma_registered_bytes, (int64_t)c->mem.len);
        for (unsigned i = 0; i < n; i++) {
                c->bufs[i].data = shoal_fab_slot(&c->mem, i);
                c->bufs[i].desc = c->mem.desc;
        }
        m->rx = c->bufs;
        m->nrx = c->want_rx;
        m->sb = c->bufs + c->want_rx;
        m->nsb = c->want_sb;
        m->req = c->reqs;
        m->nreq = m->max_inflight + 2;
        for (unsigned i = 0; i < m->nreq; i++)
                c->reqs[i].c = m;
        return 0;
}

/* Worker thread: the engine answered; queue it for the progress thread. */
static void answer_cb(void *arg, struct shoal_server_answer *a)
{
        struct shoal_rdma_req *rq = arg;
        struct shoal_rdma_server *rs = conn_of(rq->c)->r->rs;
        pthread_mutex_lock(&rs->mu);
        rq->a = a;
        rq->next = NULL;
        if (rs->done_tail)
                rs->done_tail->next = rq;
        else
                rs->done = rq;
        rs->done_tail = rq;
        pthread_mutex_unlock(&rs->mu);
        uint64_t one = 1;
        if (write(rs->evfd, &one, sizeof(one)) < 0) {
                /* the counter cannot overflow in practice; the loop also wakes on its tick */
        }
}

static int op_submit(void *env, struct shoal_rdma_conn *m, struct shoal_rdma_req *rq,
                     const struct shoal_wire_hdr *h, const uint8_t *body, uint32_t *status,
                     char *why, size_t whylen)
{
        struct shoal_rdma_server *rs = env;
        /* C stays allocated until every request it submitted came back (conn_reap). */
        return shoal_server_submit_rdma(rs->srv, h->id, h->flags, body, h->body_len, answer_cb, rq,
                                        &conn_of(m)->gone, status, why, whylen);
}

static void op_answer_done(void *env, struct shoal_server_answer *a)
{
        struct shoal_rdma_server *rs = env;
        shoal_server_answer_done(rs->srv, a);
}

static void *op_wtest_get(void *env)
{
        struct shoal_rdma_server *rs = env;
        return shoal_server_dio_get(rs->srv, 0);
}

static void op_wtest_put(void *env, void *buf)
{
        struct shoal_rdma_server *rs = env;
        shoal_server_dio_put(rs->srv, buf);
}

static void pool_put(struct rs_rail *r, struct shoal_rdma_buf *b)
{
        b->c = NULL;
        b->posted = false;
        b->next = r->pool_free;
        r->pool_free = b;
        r->pool_nfree++;
}

static void op_pool_put(void *env, struct shoal_rdma_buf *b)
{
        /* Pool buffers know their rail through their position in its array. */
        struct shoal_rdma_server *rs = env;
        for (unsigned i = 0; i < rs->nrails; i++) {
                struct rs_rail *r = &rs->rails[i];
                if (b >= r->pool_bufs && b < r->pool_bufs + PREAUTH_MAX * 4) {
                        pool_put(r, b);
                        return;
                }
        }
}

static const struct shoal_rdma_conn_ops conn_ops = {
        .post_rx = op_post_rx,
        .post_send = op_post_send,
        .post_write = op_post_write,
        .shutdown = op_shutdown,
        .upgrade = op_upgrade,
        .submit = op_submit,
        .answer_done = op_answer_done,
        .wtest_get = op_wtest_get,
        .wtest_put = op_wtest_put,
        .pool_put = op_pool_put,
};

/* ---- connections --------------------------------------------------------------------------- */

/* Keeps the pre-authentication counts in step with C's state. */
static void conn_sync(struct rs_conn *c)
{
        bool pre = shoal_rdma_conn_preauth(&c->m) && !c->m.broken;
        if (pre == c->counted_preauth)
                return;
        c->counted_preauth = pre;
        c->r->npreauth += pre ? 1 : -1;
        shoal_metric_gauge_add(SHOAL_M_rdma_preauth_conns, pre ? 1 : -1);
}

static void conn_free(struct rs_conn *c)
{
        struct rs_rail *r = c->r;
        if (c->ep)
                fi_close(&c->ep->fid);
        for (int i = 0; i < 4; i++)
                if (c->m.pool[i])
                        pool_put(r, c->m.pool[i]);
        if (c->mem.mem)
                shoal_metric_gauge_add(SHOAL_M_rdma_registered_bytes, -(int64_t)c->mem.len);
        shoal_fab_slots_close(&r->fab, &c->mem);
        free(c->bufs);
        free(c->reqs);
        shoal_list_del(&c->link);
        r->nconns--;
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        free(c);
}

/* True where fi_reject leaks the request's rdma_cm id: verbs before libfabric 1.21
 * (vrb_msg_ep_reject calls rdma_reject and never rdma_destroy_id; fixed by 0a4029f7b), the path
 * of every refusal of a pre-authentication flood. */
static bool reject_leaks(const struct rs_rail *r)
{
        return !strcmp(r->fab.prov, "verbs") && fi_version() < FI_VERSION(1, 21);
}

/* Refuses the connection request INFO without fi_reject's leak: an endpoint takes the request's
 * rdma_cm id (verbs 1.17 vrb_open_ep; no queue pair yet) and closing it destroys the id, which
 * makes the kernel reject the request (the requester sees ECONNREFUSED, as after rdma_reject);
 * fi_reject, finding no id left, then only frees the request (and answers -FI_EBUSY, which
 * libfabric logs only under FI_LOG_LEVEL=warn). */
static void reject_request(struct rs_rail *r, struct fi_info *info, bool id_taken)
{
        struct fid_ep *ep = NULL;
        if (!id_taken && reject_leaks(r) && fi_endpoint(r->fab.domain, info, &ep, NULL) == 0)
                fi_close(&ep->fid);
        fi_reject(r->pep, info->handle, NULL, 0);
}

/* Refuses the connection request INFO (freed); ID_TAKEN: an endpoint made on it was closed
 * already. Returns false, for the caller to return. */
static bool reject_ex(struct rs_rail *r, struct fi_info *info, const char *why, bool id_taken)
{
        shoal_metric_inc(SHOAL_M_rdma_rejected);
        log_ratelimited(SHOAL_LOG_WARN, "rdma", "listener %s: connection refused: %s", r->addr,
                        why);
        reject_request(r, info, id_taken);
        fi_freeinfo(info);
        return false;
}

static bool reject(struct rs_rail *r, struct fi_info *info, const char *why)
{
        return reject_ex(r, info, why, false);
}

static unsigned preauth_from(struct rs_rail *r, uint32_t src)
{
        unsigned n = 0;
        struct shoal_list *l, *next;
        list_for_each (l, next, &r->conns)
                n += conn_at(l)->counted_preauth && conn_at(l)->src == src;
        return n;
}

/* A connection request on rail R: within the limits, an endpoint with two receives from the
 * pool, then accept. Nothing is registered for it until it authenticates. */
static bool on_connreq(struct rs_rail *r, struct fi_info *info)
{
        struct shoal_rdma_server *rs = r->rs;
        const struct sockaddr_in *sa = info->dest_addr;
        uint32_t src = sa && info->dest_addrlen >= sizeof(*sa) ? ntohl(sa->sin_addr.s_addr) : 0;
        if (atomic_load(&rs->stop))
                return reject(r, info, "stopping");
        if (r->nconns >= r->max_conns)
                return reject(r, info, "too many connections");
        if (r->npreauth >= PREAUTH_MAX || r->pool_nfree < 4)
                return reject(r, info, "too many connections still authenticating");
        if (preauth_from(r, src) >= atomic_load(&rs->preauth_per_source))
                return reject(r, info, "too many connections authenticating from one address");
        size_t rx = info->rx_attr ? info->rx_attr->size : r->fab.rx_size;
        size_t tx = info->tx_attr ? info->tx_attr->size : r->fab.tx_size;
        if (rx < 6 || tx < 8)
                return reject(r, info, "queues too small");
        struct rs_conn *c = calloc(1, sizeof(*c));
        if (!c)
                return reject(r, info, "out of memory");
        c->kind = RS_CONN;
        c->r = r;
        c->src = src;
        c->want_rx = (unsigned)SHOAL_MIN(rx - 2, (size_t)MAX_RX);
        uint32_t max_inflight = c->want_rx - 2;
        c->want_sb = (unsigned)SHOAL_MIN(2 * (size_t)max_inflight + 4, (tx - 2) / 2);
        struct shoal_hs_config hc = {.role = SHOAL_HS_SERVER,
                                     .key = &rs->key,
                                     .service = SHOAL_SERVICE_RDMA,
                                     /* the proofs bind the address the requester dialed */
                                     .addr = r->addr,
                                     .member_id = rs->member_id};
        uint64_t now = shoal_now_ns();
        shoal_rdma_conn_init(&c->m, &conn_ops, rs, &hc, max_inflight, r->fab.max_msg, now);
        c->m.iface = r->index;
        if (sa)
                shoal_fab_addr_str(sa, c->m.peer, sizeof(c->m.peer));
        int rc = shoal_fab_ep_create(r->fab.domain, info, c->want_rx + 2,
                                     2 * (size_t)c->want_sb + 2, c, &c->ep);
        const char *call = "fi_endpoint";
        if (!rc)
                rc = shoal_fab_ep_bind(c->ep, r->eq, r->cq, &call);
        if (rc) {
                shoal_fab_log_err(r->addr, call, rc);
                bool taken = c->ep != NULL;
                if (c->ep)
                        fi_close(&c->ep->fid);
                free(c);
                return reject_ex(r, info, "cannot open an endpoint", taken);
        }
        struct shoal_rdma_buf *pool[4];
        for (int i = 0; i < 4; i++) {
                pool[i] = r->pool_free;
                r->pool_free = pool[i]->next;
                r->pool_nfree--;
        }
        r->nconns++;
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        shoal_list_push_front(&r->conns, &c->link);
        /* From here on completions may name C: it stays listed until it can be freed. */
        if (!shoal_rdma_conn_start(&c->m, pool) && (rc = fi_accept(c->ep, NULL, 0))) {
                shoal_fab_log_err(r->addr, "fi_accept", rc);
                shoal_rdma_conn_break(&c->m, "cannot accept", now);
        }
        conn_sync(c);
        fi_freeinfo(info);
        return true;
}

/* Closes C's endpoint once nothing is posted (or the drain time passed), frees it once it can,
 * or parks it. */
static void conn_reap(struct rs_conn *c, uint64_t now)
{
        struct shoal_rdma_conn *m = &c->m;
        if (!m->broken)
                return;
        uint64_t age = now > m->broken_at ? now - m->broken_at : 0;
        if (!m->ep_closed && (!m->posted || age > DRAIN_NS)) {
                /* Closing stops the provider from touching our buffers; what was still posted
                 * is reported as flushed through the shared CQ (tcp and verbs 1.17 both do). */
                fi_close(&c->ep->fid);
                c->ep = NULL;
                shoal_rdma_conn_ep_closed(m);
        }
        if (shoal_rdma_conn_can_free(m)) {
                conn_free(c);
                return;
        }
        if (m->ep_closed && !m->refs && age > PARK_NS) {
                /* Completions that never came: keep the contexts they would name, not the
                 * memory (the endpoint is closed). */
                log_warn("rdma", "server: %s: %d operations never completed; parked", m->peer,
                         m->posted);
                if (c->mem.mem)
                        shoal_metric_gauge_add(SHOAL_M_rdma_registered_bytes, -(int64_t)c->mem.len);
                shoal_fab_slots_close(&c->r->fab, &c->mem);
                shoal_list_del(&c->link);
                shoal_list_push_front(&c->r->parked, &c->link);
                c->r->nconns--;
                shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        }
}

/* ---- the loop ------------------------------------------------------------------------------- */

static void on_event(struct rs_rail *r, struct shoal_fab_event *ev, uint64_t now)
{
        enum rs_kind *kind = ev->ctx;
        if (ev->event == FI_CONNREQ && kind && *kind == RS_RAIL && ev->info) {
                (void)on_connreq(r, ev->info);
                return;
        }
        if (ev->info)
                fi_freeinfo(ev->info);
        if (!kind || *kind != RS_CONN) {
                if (ev->err)
                        log_ratelimited(SHOAL_LOG_WARN, "rdma", "listener %s: %s", r->addr,
                                        ev->msg);
                return;
        }
        struct rs_conn *c = (struct rs_conn *)kind;
        if (ev->err) {
                if (!c->m.broken) /* its first error: a warning (issue 32) */
                        log_ratelimited(SHOAL_LOG_WARN, "rdma",
                                        "server: connection from %s broken: %s", c->m.peer,
                                        ev->msg);
                shoal_rdma_conn_break(&c->m, "connection error", now);
        } else if (ev->event == FI_CONNECTED)
                shoal_rdma_conn_connected(&c->m, now);
        else if (ev->event == FI_SHUTDOWN)
                shoal_rdma_conn_break(&c->m, "peer shut down", now);
        conn_sync(c);
}

/* Reads R's EQ until empty or the budget is spent; true when it may still hold events. */
static bool eq_poll(struct rs_rail *r, uint64_t now)
{
        for (int k = 0; k < POLL_BUDGET; k++) {
                struct shoal_fab_event ev;
                int rc = shoal_fab_eq_next(r->eq, r->addr, &ev);
                if (rc <= 0)
                        return false;
                on_event(r, &ev, now);
        }
        return true;
}

static void completion(struct shoal_fab_op *op, size_t len, int err, uint64_t now)
{
        struct shoal_rdma_buf *b = op->owner;
        struct shoal_rdma_conn *m = b->c;
        if (!m)
                return; /* cannot happen: a buffer is lent to a connection while posted */
        shoal_rdma_conn_completion(m, op, len, err, now);
        conn_sync(conn_of(m));
}

static bool cq_poll(struct rs_rail *r, uint64_t now)
{
        return shoal_fab_cq_drain(r->cq, r->addr, POLL_BUDGET, completion, now);
}

static void drain_done(struct shoal_rdma_server *rs, uint64_t now)
{
        uint64_t v;
        if (read(rs->evfd, &v, sizeof(v)) < 0) {
                /* EAGAIN: nothing signalled */
        }
        pthread_mutex_lock(&rs->mu);
        struct shoal_rdma_req *rq = rs->done;
        rs->done = rs->done_tail = NULL;
        pthread_mutex_unlock(&rs->mu);
        while (rq) {
                struct shoal_rdma_req *next = rq->next;
                struct shoal_rdma_conn *m = rq->c;
                shoal_rdma_conn_answer(m, rq, rq->a, now);
                conn_sync(conn_of(m));
                rq = next;
        }
}

static void tick(struct shoal_rdma_server *rs, uint64_t now)
{
        for (unsigned i = 0; i < rs->nrails; i++) {
                struct shoal_list *l, *next;
                list_for_each (l, next, &rs->rails[i].conns) {
                        struct rs_conn *c = conn_at(l);
                        shoal_rdma_conn_tick(&c->m, now);
                        conn_sync(c);
                        conn_reap(c, now); /* may free or park C */
                }
        }
}

/* Polls Q if it fired or is not armed, then re-arms it; true when it must be polled again
 * before sleeping. */
static bool queue_service(struct rs_q *q, uint64_t now)
{
        if (q->armed)
                return false;
        bool more = q->cq ? cq_poll(q->r, now) : eq_poll(q->r, now);
        if (more)
                return true;
        q->armed = shoal_fab_trywait(&q->r->fab, q->cq ? &q->r->cq->fid : &q->r->eq->fid);
        return !q->armed;
}

static void stop_all(struct shoal_rdma_server *rs, uint64_t now)
{
        for (unsigned i = 0; i < rs->nrails; i++) {
                struct shoal_list *l, *next;
                list_for_each (l, next, &rs->rails[i].conns) {
                        shoal_rdma_conn_break(&conn_at(l)->m, "server stopping", now);
                        conn_sync(conn_at(l));
                }
        }
}

static bool any_conns(struct shoal_rdma_server *rs)
{
        for (unsigned i = 0; i < rs->nrails; i++)
                if (!shoal_list_empty(&rs->rails[i].conns))
                        return true;
        return false;
}

static void *progress_main(void *arg)
{
        struct shoal_rdma_server *rs = arg;
        uint64_t next_tick = 0, stop_at = 0;
        bool busy = true;
        for (;;) {
                struct epoll_event evs[64];
                int n = epoll_wait(rs->epfd, evs, 64, busy ? 0 : (stop_at ? 10 : 100));
                uint64_t now = shoal_now_ns();
                for (int i = 0; i < n; i++) {
                        struct rs_q *q = evs[i].data.ptr;
                        if (q == &rs->ev_q)
                                drain_done(rs, now);
                        else
                                q->armed = false;
                }
                busy = false;
                for (unsigned i = 0; i < rs->nrails; i++) {
                        busy |= queue_service(&rs->rails[i].eq_q, now);
                        busy |= queue_service(&rs->rails[i].cq_q, now);
                }
                if (atomic_load(&rs->stop) && !stop_at) {
                        stop_at = now + STOP_WAIT_NS;
                        drain_done(rs, now);
                        stop_all(rs, now);
                        busy = true;
                }
                if (now >= next_tick || stop_at) {
                        tick(rs, now);
                        next_tick = now + TICK_NS;
                }
                if (stop_at && (!any_conns(rs) || now > stop_at))
                        break;
        }
        unsigned left = 0;
        for (unsigned i = 0; i < rs->nrails; i++) {
                struct shoal_list *l, *next;
                list_for_each (l, next, &rs->rails[i].conns)
                        left++;
        }
        if (left)
                log_warn("rdma", "server stop: %u connections still had requests in the engine",
                         left);
        return NULL;
}

/* ---- start and stop ------------------------------------------------------------------------- */

static void epoll_add(struct shoal_rdma_server *rs, int fd, struct rs_q *q)
{
        struct epoll_event ev = {.events = EPOLLIN, .data.ptr = q};
        epoll_ctl(rs->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Registers rail R's answer buffers (and the reader's held blocks, where it can) and its
 * pre-authentication pool. Returns 0 or -1 with one line in ERR. */
static int rail_buffers(struct shoal_rdma_server *rs, struct rs_rail *r, const char *ifname,
                        char *err, size_t errlen)
{
        int rc = shoal_fab_mr_reg(&r->fab, rs->dio_base, rs->dio_len, FI_WRITE | FI_SEND,
                                  &r->dio_mr);
        if (rc) {
                snprintf(err, errlen,
                         "--rdma-network %s: cannot register %zu bytes of answer buffers: %s "
                         "(memlock limit? see ulimit -l)",
                         ifname, rs->dio_len, fi_strerror(-rc));
                return -1;
        }
        /* Blocks held in memory are written from where they are (no copy into a dio buffer)
         * when the reader's buffers can be registered too; local access only. */
        if (rs->held_base &&
            shoal_fab_mr_reg(&r->fab, rs->held_base, rs->held_len, FI_WRITE, &r->held_mr))
                log_warn("rdma",
                         "--rdma-network %s: blocks held in memory are copied before "
                         "they are written (their buffers could not be registered)",
                         ifname);
        r->pool_bufs = calloc(PREAUTH_MAX * 4, sizeof(*r->pool_bufs));
        if (!r->pool_bufs || shoal_fab_slots_open(&r->fab, NULL, PREAUTH_MAX * 4, &r->pool_mem)) {
                snprintf(err, errlen, "--rdma-network %s: cannot register the connection pool",
                         ifname);
                return -1;
        }
        for (unsigned i = PREAUTH_MAX * 4; i-- > 0;) {
                struct shoal_rdma_buf *b = &r->pool_bufs[i];
                b->data = shoal_fab_slot(&r->pool_mem, i);
                b->desc = r->pool_mem.desc;
                b->op.owner = b; /* its kind is set when it is lent */
                b->wop.owner = b;
                b->wop.kind = SHOAL_FAB_OP_WRITE;
                pool_put(r, b);
        }
        return 0;
}

/* Rail R's shared EQ and CQ (sized for its share of the connection budget) and its listener,
 * in the progress thread's epoll. Returns 0 or -1 with one line in ERR. */
static int rail_listen(struct shoal_rdma_server *rs, struct rs_rail *r, const char *ifname,
                       char *err, size_t errlen)
{
        if (!rs->conn_budget)
                rs->conn_budget =
                        shoal_fab_conn_budget(shoal_fab_process_limits(), SHOAL_FAB_FD_RESERVE);
        unsigned budget = SHOAL_MAX(rs->conn_budget / rs->nrails_wanted, 1u);
        r->max_conns = SHOAL_MIN(budget, (unsigned)CONNS_MAX);
        /* Each connection: its receives (own and lent) and, per send buffer, a send and the
         * write before it (verbs 1.17 signals every work request in hardware). */
        size_t per_conn = (MAX_RX + 2) + 2 * (2 * (MAX_RX - 2) + 4 + 2);
        const char *call = "fi_cq_open";
        int rc = shoal_fab_cq_open(&r->fab, SHOAL_MAX(r->max_conns, 1u) * per_conn, &r->cq,
                                   &r->cq_fd);
        if (!rc && !(rc = shoal_fab_eq_open(&r->fab, &r->eq, &r->eq_fd)))
                call = "fi_passive_ep";
        if (!rc && !(rc = fi_passive_ep(r->fab.fabric, r->fab.info, &r->pep, r)))
                call = "fi_pep_bind";
        if (!rc && !(rc = fi_pep_bind(r->pep, &r->eq->fid, 0)))
                call = "fi_listen";
        if (!rc)
                rc = fi_listen(r->pep);
        struct sockaddr_in sa;
        size_t sl = sizeof(sa);
        if (!rc && (call = "fi_getname", rc = fi_getname(&r->pep->fid, &sa, &sl)) == 0)
                shoal_fab_addr_str(&sa, r->addr, sizeof(r->addr));
        if (rc) {
                snprintf(err, errlen, "--rdma-network %s: cannot listen: %s: %s", ifname, call,
                         fi_strerror(-rc));
                return -1;
        }
        r->eq_q = (struct rs_q){.r = r, .cq = false};
        r->cq_q = (struct rs_q){.r = r, .cq = true};
        epoll_add(rs, r->eq_fd, &r->eq_q);
        epoll_add(rs, r->cq_fd, &r->cq_q);
        return 0;
}

/* Opens rail R on interface IFNAME: fabric and domain, answer buffers, the pre-authentication
 * pool, the shared EQ and CQ, the listener. Returns 0 or -1 with one line in ERR. */
static int rail_open(struct shoal_rdma_server *rs, struct rs_rail *r, const char *provider,
                     const char *ifname, char *err, size_t errlen)
{
        if (shoal_fab_open(&r->fab, provider, ifname, err, errlen))
                return -1;
        /* [S1] on every transport: without a secret, loopback only. */
        if (!rs->key.set && strncmp(r->fab.ip, "127.", 4)) {
                snprintf(err, errlen,
                         "refusing to listen for RDMA on %s (%s) without a group secret: set "
                         "--group-secret-file or SHOAL_GROUP_SECRET (or use --rdma-network lo)",
                         ifname, r->fab.ip);
                return -1;
        }
        if (rail_buffers(rs, r, ifname, err, errlen) || rail_listen(rs, r, ifname, err, errlen))
                return -1;
        log_info("rdma",
                 "rdma listening on %s (%s, provider %s, mr_mode 0x%llx, key %zu bytes, up to %u "
                 "connections)",
                 r->addr, ifname, r->fab.prov, (unsigned long long)r->fab.mr_mode, r->fab.key_size,
                 r->max_conns);
        return 0;
}

static void rail_close(struct rs_rail *r)
{
        if (r->pep)
                fi_close(&r->pep->fid);
        struct shoal_list *l;
        while ((l = shoal_list_first(&r->conns)))
                conn_free(conn_at(l));
        if (r->cq)
                fi_close(&r->cq->fid);
        /* Nothing can name a parked connection once its CQ is closed. */
        while ((l = shoal_list_first(&r->parked))) {
                struct rs_conn *c = conn_at(l);
                r->nconns++; /* conn_free counts it out again */
                shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
                conn_free(c);
        }
        if (r->eq)
                fi_close(&r->eq->fid);
        shoal_fab_slots_close(&r->fab, &r->pool_mem);
        free(r->pool_bufs);
        if (r->dio_mr)
                shoal_fab_mr_close(&r->fab, r->dio_mr, r->rs->dio_len);
        if (r->held_mr)
                shoal_fab_mr_close(&r->fab, r->held_mr, r->rs->held_len);
        shoal_fab_close(&r->fab);
}

struct shoal_rdma_server *shoal_rdma_server_start(struct shoal_server *srv, const char *provider,
                                                  char ifaces[][32], unsigned n_if,
                                                  const struct shoal_secret *secret,
                                                  const char *member_id, char *err, size_t errlen)
{
        struct shoal_rdma_server *rs = calloc(1, sizeof(*rs));
        if (!rs) {
                snprintf(err, errlen, "rdma: out of memory");
                return NULL;
        }
        rs->srv = srv;
        rs->epfd = rs->evfd = -1;
        atomic_store(&rs->preauth_per_source, PREAUTH_PER_SOURCE);
        pthread_mutex_init(&rs->mu, NULL);
        if (shoal_hs_key_init(&rs->key, secret) ||
            shoal_strlcpy(rs->member_id, member_id ? member_id : "", sizeof(rs->member_id)) >=
                    sizeof(rs->member_id)) {
                snprintf(err, errlen, "rdma: refusing a group secret shorter than %d bytes",
                         SHOAL_SECRET_MIN);
                goto out_stop;
        }
        rs->dio_base = shoal_server_dio_region(srv, &rs->dio_len);
        rs->held_base = shoal_server_held_region(srv, &rs->held_len);
        rs->epfd = epoll_create1(EPOLL_CLOEXEC);
        rs->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (rs->epfd < 0 || rs->evfd < 0) {
                snprintf(err, errlen, "rdma: epoll/eventfd: %s", strerror(errno));
                goto out_stop;
        }
        epoll_add(rs, rs->evfd, &rs->ev_q);
        rs->nrails_wanted = n_if ? n_if : 1;
        for (unsigned i = 0; i < n_if; i++) {
                struct rs_rail *r = &rs->rails[i];
                r->kind = RS_RAIL;
                r->rs = rs;
                r->index = i;
                r->eq_fd = r->cq_fd = -1;
                shoal_list_init(&r->conns);
                shoal_list_init(&r->parked);
                rs->nrails++;
                if (rail_open(rs, r, provider, ifaces[i], err, errlen))
                        goto out_stop;
        }
        bool held = rs->held_base && n_if;
        for (unsigned i = 0; i < n_if; i++)
                held &= rs->rails[i].held_mr != NULL;
        if (held)
                shoal_server_rdma_held_direct(srv);
        if (shoal_thread_create(&rs->thread, progress_main, rs)) {
                snprintf(err, errlen, "rdma: cannot start the progress thread");
                goto out_stop;
        }
        pthread_setname_np(rs->thread, "shoal-rdma-srv");
        rs->started = true;
        return rs;

out_stop:
        shoal_rdma_server_stop(rs);
        return NULL;
}

unsigned shoal_rdma_server_addrs(const struct shoal_rdma_server *rs,
                                 char addrs[SHOAL_FAB_MAX_IFACES][64])
{
        for (unsigned i = 0; i < rs->nrails; i++)
                shoal_strlcpy(addrs[i], rs->rails[i].addr, 64);
        return rs->nrails;
}

void shoal_rdma_server_stop(struct shoal_rdma_server *rs)
{
        if (!rs)
                return;
        if (rs->started) {
                atomic_store(&rs->stop, true);
                uint64_t one = 1;
                if (write(rs->evfd, &one, sizeof(one)) < 0) {
                        /* the loop also wakes on its own */
                }
                pthread_join(rs->thread, NULL);
        }
        for (unsigned i = 0; i < rs->nrails; i++)
                rail_close(&rs->rails[i]);
        if (rs->epfd >= 0)
                close(rs->epfd);
        if (rs->evfd >= 0)
                close(rs->evfd);
        pthread_mutex_destroy(&rs->mu);
        shoal_hs_key_clear(&rs->key);
        free(rs);
}

void shoal_rdma_server_set_preauth_per_source(struct shoal_rdma_server *rs, unsigned n)
{
        if (rs && n)
                atomic_store(&rs->preauth_per_source, SHOAL_MIN(n, (unsigned)PREAUTH_MAX));
}
