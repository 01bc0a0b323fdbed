/* The RDMA side of a member's server [M1, M7]: a passive endpoint per --rdma-network interface,
 * one FI_EP_MSG endpoint per requester connection, all driven by one progress thread.
 *
 * A connection owns one registered region holding its posted receives and its answer slots. A
 * request (READ or PING, or a handshake frame) takes a slot until its answer was sent; the
 * server announces max_inflight = slots - 2 in HELLO_ACK, and keeps at least as many receives
 * posted, so a requester that keeps to its credits never overruns a receive queue (RDMA.md
 * rule 3). READs run through the server's request engine (rpc/server.c); the answer's payload
 * is in a dio buffer registered once per interface, written with fi_write into the requester's
 * buffer, followed by the READ_RESP by fi_send: send-after-write ordering on the endpoint means
 * the data is in place when the requester sees the answer.
 *
 * Teardown: a broken connection (EQ error, FI_SHUTDOWN, CQ error, idle past IDLE_NS, protocol
 * violation) is shut down at once, so no more bytes move, but its memory is freed only after
 * every posted operation completed or was flushed (or a drain deadline passed and the endpoint
 * was closed) and every request it handed to the engine came back. */
#include "rpc/rdma.h"

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

#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "rpc/handshake.h"
#include "rpc/server.h"
#include "rpc/wire.h"

#define SERVICE_RDMA   3
#define MAX_RX         64
#define HANDSHAKE_NS   (5ULL * 1000000000ULL)
#define IDLE_NS        (15ULL * 1000000000ULL) /* requesters ping every second */
#define DRAIN_NS       (2ULL * 1000000000ULL)
#define STOP_WAIT_NS   (30ULL * 1000000000ULL)
#define MAX_CONNS      1024
#define WTEST_MAGIC    "SHOALWT1"
#define WTEST_BODY_LEN 32
#define WTEST_MAX      65536

struct rs_conn;

struct rs_slot {
        struct shoal_fab_op wop, sop;
        struct rs_conn *c;
        uint64_t id;
        uint64_t raddr, rkey;
        struct shoal_server_answer *a; /* the engine's answer, until the write completed */
        void *testbuf;                 /* a dio buffer for ping's write test */
        char *sbuf;                    /* registered send buffer for the answer frame */
        int pending;                   /* posted ops not yet completed */
        bool used, in_engine;
        uint64_t t_write;
        struct rs_slot *next; /* free list, or the done queue */
};

struct rs_rail {
        struct shoal_fab fab;
        struct fid_pep *pep;
        struct fid_eq *eq;
        int eq_fd;
        struct fid_mr *dio_mr;
        char addr[64];
        unsigned index;
};

struct rs_conn {
        struct shoal_rdma_server *rs;
        struct rs_rail *rail;
        struct shoal_fab_mep m;
        struct rs_slot *slots, *free;
        unsigned max_inflight;
        enum {
                CS_ACCEPTING,
                CS_HELLO,
                CS_AUTH,
                CS_READY
        } state;
        bool broken, closed_ep;
        uint64_t broken_at;
        int refs; /* requests inside the engine */
        uint64_t deadline, last_rx;
        struct shoal_hs hs; /* until CS_READY */
        char peer[64];
        struct rs_conn *next;
};

struct shoal_rdma_server {
        struct shoal_server *srv;
        struct shoal_hs_key key;
        char member_id[SHOAL_WIRE_MEMBER_ID_MAX + 1];
        struct rs_rail rails[SHOAL_FAB_MAX_IFACES];
        unsigned nrails;
        void *dio_base;
        size_t dio_len;
        int epfd, evfd;
        pthread_t thread;
        bool started;
        _Atomic bool stop;
        pthread_mutex_t mu; /* the done queue */
        struct rs_slot *done, *done_tail;
        struct rs_conn *conns;
        unsigned nconns;
};

/* ---- connections ------------------------------------------------------------------------- */

static void conn_break(struct rs_conn *c, const char *why)
{
        if (c->broken)
                return;
        c->broken = true;
        c->broken_at = shoal_now_ns();
        log_debug("rdma", "server: closing %s: %s", c->peer, why);
        if (c->state != CS_ACCEPTING)
                shoal_fab_mep_shutdown(&c->m);
}

static void slot_put(struct rs_conn *c, struct rs_slot *sl)
{
        if (sl->pending || sl->in_engine)
                return;
        if (sl->a) {
                shoal_server_answer_done(c->rs->srv, sl->a);
                sl->a = NULL;
        }
        if (sl->testbuf) {
                shoal_server_dio_put(c->rs->srv, sl->testbuf);
                sl->testbuf = NULL;
        }
        sl->used = false;
        sl->next = c->free;
        c->free = sl;
}

static struct rs_slot *slot_get(struct rs_conn *c)
{
        struct rs_slot *sl = c->free;
        if (!sl)
                return NULL;
        c->free = sl->next;
        sl->used = true;
        sl->pending = 0;
        sl->next = NULL;
        return sl;
}

static void post_rx(struct rs_conn *c, struct shoal_fab_rx *rx)
{
        if (shoal_fab_mep_post_rx(&c->m, rx))
                conn_break(c, "cannot post a receive");
}

/* Sends the frame (TYPE, FLAGS, STATUS, ID, BODY) from slot SL. */
static int send_frame(struct rs_conn *c, struct rs_slot *sl, uint8_t type, uint16_t flags,
                      uint32_t status, uint64_t id, const void *body, size_t body_len)
{
        size_t len = shoal_wire_frame_encode((uint8_t *)sl->sbuf, type, flags, status, id, body,
                                             body_len);
        int rc = shoal_fab_mep_send(&c->m, sl->sbuf, len, &sl->sop);
        if (rc) {
                conn_break(c, "cannot send");
                return rc;
        }
        sl->pending++;
        return 0;
}

static void send_error(struct rs_conn *c, struct rs_slot *sl, uint64_t id, uint32_t status,
                       const char *why)
{
        uint8_t body[256];
        int n = shoal_wire_error_encode(body, sizeof(body), why);
        if (send_frame(c, sl, SHOAL_MSG_ERROR, 0, status, id, body, n > 0 ? (size_t)n : 0))
                slot_put(c, sl);
}

/* Worker thread: the engine answered; queue it for the progress thread. */
static void answer_cb(void *arg, struct shoal_server_answer *a)
{
        struct rs_slot *sl = arg;
        struct shoal_rdma_server *rs = sl->c->rs;
        sl->a = a;
        sl->next = NULL;
        pthread_mutex_lock(&rs->mu);
        if (rs->done_tail)
                rs->done_tail->next = sl;
        else
                rs->done = sl;
        rs->done_tail = sl;
        pthread_mutex_unlock(&rs->mu);
        uint64_t one = 1;
        if (write(rs->evfd, &one, sizeof(one)) < 0) {
                /* the counter cannot overflow in practice; the loop also wakes on its tick */
        }
}

/* Progress thread: write the payload, then send the READ_RESP (or just the ERROR). */
static void answer_send(struct rs_slot *sl)
{
        struct rs_conn *c = sl->c;
        struct shoal_server_answer *a = sl->a;
        sl->in_engine = false;
        c->refs--;
        if (c->broken) {
                slot_put(c, sl);
                return;
        }
        if (a->status == 0) {
                struct rs_rail *r = c->rail;
                if (a->len > r->fab.max_msg) {
                        shoal_server_answer_done(c->rs->srv, a);
                        sl->a = NULL;
                        send_error(c, sl, sl->id, SHOAL_ST_BAD_REQUEST, "range too large");
                        return;
                }
                sl->t_write = shoal_now_ns();
                if (shoal_fab_mep_write(&c->m, a->data, a->len, shoal_fab_desc(&r->fab, r->dio_mr),
                                        sl->raddr, sl->rkey, &sl->wop)) {
                        conn_break(c, "cannot write");
                        slot_put(c, sl);
                        return;
                }
                sl->pending++;
        }
        memcpy(sl->sbuf, a->frame, a->frame_len);
        if (shoal_fab_mep_send(&c->m, sl->sbuf, a->frame_len, &sl->sop)) {
                conn_break(c, "cannot send");
                slot_put(c, sl);
                return;
        }
        sl->pending++;
        if (a->status) {
                shoal_metric_inc(SHOAL_M_remotecache_serve_errors);
                shoal_server_answer_done(c->rs->srv, a);
                sl->a = NULL;
        }
}

/* PING with the write-test body: RMA-write a pattern into the requester's buffer, then PONG. */
static void ping_write_test(struct rs_conn *c, struct rs_slot *sl, const uint8_t *body)
{
        uint64_t addr, key;
        uint32_t len, seed;
        memcpy(&addr, body + 8, 8);
        memcpy(&key, body + 16, 8);
        memcpy(&len, body + 24, 4);
        memcpy(&seed, body + 28, 4);
        if (!len || len > WTEST_MAX || !(sl->testbuf = shoal_server_dio_get(c->rs->srv, 0)))
                return;
        uint8_t *p = sl->testbuf;
        for (uint32_t i = 0; i < len; i++)
                p[i] = (uint8_t)(seed + i * 7u + (i >> 8));
        struct rs_rail *r = c->rail;
        if (shoal_fab_mep_write(&c->m, sl->testbuf, len, shoal_fab_desc(&r->fab, r->dio_mr), addr,
                                key, &sl->wop))
                return;
        sl->t_write = 0;
        sl->pending++;
}

/* A handshake frame (rpc/handshake.c decides). Returns false when the connection must close. */
static bool handshake(struct rs_conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        enum shoal_hs_verdict v = shoal_hs_step(&c->hs, h, body);
        if (v == SHOAL_HS_FAIL)
                log_ratelimited(c->hs.error == -EACCES ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "rdma",
                                "peer %s failed the handshake: %s", c->peer, c->hs.why);
        if (c->hs.out_len) {
                struct rs_slot *sl = slot_get(c);
                if (!sl)
                        return false;
                memcpy(sl->sbuf, c->hs.out, c->hs.out_len);
                if (shoal_fab_mep_send(&c->m, sl->sbuf, c->hs.out_len, &sl->sop)) {
                        conn_break(c, "cannot send");
                        slot_put(c, sl);
                        return false;
                }
                sl->pending++;
        }
        if (v == SHOAL_HS_DONE)
                c->state = CS_READY;
        else if (v == SHOAL_HS_MORE)
                c->state = CS_AUTH;
        return v != SHOAL_HS_FAIL;
}

/* One received message. Returns false when the connection must close. */
static bool on_message(struct rs_conn *c, const uint8_t *msg, size_t len)
{
        struct shoal_wire_hdr h;
        if (shoal_wire_msg_decode(msg, len, &h))
                return false;
        const uint8_t *body = msg + SHOAL_WIRE_HDR_LEN;
        shoal_metric_add(SHOAL_M_rdma_read_bytes, len);
        if (c->state != CS_READY)
                return handshake(c, &h, body);
        switch (h.type) {
        case SHOAL_MSG_READ: {
                for (unsigned i = 0; i < c->m.nslots; i++)
                        if (c->slots[i].used && c->slots[i].id == h.id)
                                return false; /* a duplicate in-flight id */
                struct rs_slot *sl = slot_get(c);
                if (!sl)
                        return false; /* past max_inflight */
                sl->id = h.id;
                struct shoal_wire_read rd;
                if (shoal_wire_read_decode(body, h.body_len, &rd)) {
                        send_error(c, sl, h.id, SHOAL_ST_BAD_REQUEST, "malformed read request");
                        return true;
                }
                if (!(h.flags & SHOAL_WF_RDMA_TARGET)) {
                        send_error(c, sl, h.id, SHOAL_ST_BAD_REQUEST,
                                   "no RDMA target on an RDMA connection");
                        return true;
                }
                sl->raddr = rd.rdma_addr;
                sl->rkey = rd.rdma_key;
                uint32_t status = 0;
                char why[160];
                sl->in_engine = true;
                c->refs++;
                if (shoal_server_submit_rdma(c->rs->srv, h.id, h.flags, body, h.body_len, answer_cb,
                                             sl, &status, why, sizeof(why))) {
                        sl->in_engine = false;
                        c->refs--;
                        send_error(c, sl, h.id, status, why);
                }
                return true;
        }
        case SHOAL_MSG_PING: {
                struct rs_slot *sl = slot_get(c);
                if (!sl)
                        return false;
                sl->id = h.id;
                if (h.body_len == WTEST_BODY_LEN && !memcmp(body, WTEST_MAGIC, 8))
                        ping_write_test(c, sl, body);
                if (send_frame(c, sl, SHOAL_MSG_PONG, 0, 0, h.id, body, h.body_len)) {
                        slot_put(c, sl);
                        return false;
                }
                return true;
        }
        case SHOAL_MSG_CORRUPT:
                return true; /* a notice; the block is re-verified by TCP requesters' reports */
        default:
                return false; /* GOAWAY, answers, handshake frames */
        }
}

static void on_completion(struct rs_conn *c, struct shoal_fab_op *op, size_t len)
{
        if (op->kind == SHOAL_FAB_OP_RX) {
                struct shoal_fab_rx *rx = op->owner;
                c->last_rx = shoal_now_ns();
                if (c->broken)
                        return;
                if (!on_message(c, (const uint8_t *)rx->buf, len)) {
                        conn_break(c, "protocol violation");
                        return;
                }
                if (!c->broken)
                        post_rx(c, rx);
                return;
        }
        struct rs_slot *sl = op->owner;
        sl->pending--;
        if (op->kind == SHOAL_FAB_OP_WRITE && sl->a) {
                uint64_t now = shoal_now_ns();
                shoal_metric_add(SHOAL_M_rdma_write_bytes, sl->a->len);
                shoal_metric_inc(SHOAL_M_rdma_write_ops);
                shoal_metric_observe(SHOAL_M_rdma_write_dur, now - sl->t_write);
                shoal_metric_observe(SHOAL_M_mount_iorpc_writeBodyDur, now - sl->t_write);
                shoal_metric_add(SHOAL_M_rdma_if0_bytes + c->rail->index, sl->a->len);
                shoal_metric_add(SHOAL_M_remotecache_rdma_serve_bytes, sl->a->len);
                shoal_metric_add(SHOAL_M_remotecache_serve_bytes, sl->a->len);
                shoal_metric_inc(SHOAL_M_remotecache_serve_requests);
                shoal_metric_observe(SHOAL_M_remotecache_serve_dur, now - sl->t_write);
        }
        slot_put(c, sl);
}

static void conn_poll_cq(struct rs_conn *c)
{
        struct fi_cq_msg_entry e[16];
        for (;;) {
                void *ctx;
                ssize_t n = shoal_fab_mep_cq_read(&c->m, e, 16, &ctx);
                if (!n)
                        return;
                if (n == -FI_EAVAIL) {
                        if (ctx)
                                on_completion(c, ctx, 0);
                        conn_break(c, "completion error");
                        continue;
                }
                if (n < 0) {
                        conn_break(c, "fi_cq_read failed");
                        return;
                }
                for (ssize_t i = 0; i < n; i++)
                        on_completion(c, e[i].op_context, e[i].len);
        }
}

static void conn_poll_eq(struct rs_conn *c)
{
        for (;;) {
                uint32_t event;
                char msg[160];
                int rc = shoal_fab_mep_eq_read(&c->m, &event, msg, sizeof(msg));
                if (!rc)
                        return;
                if (rc == -FI_EAVAIL) {
                        conn_break(c, msg);
                        continue;
                }
                if (rc < 0) {
                        conn_break(c, "fi_eq_read failed");
                        return;
                }
                if (event == FI_CONNECTED && c->state == CS_ACCEPTING) {
                        c->state = CS_HELLO;
                        c->deadline = shoal_now_ns() + HANDSHAKE_NS;
                        c->last_rx = shoal_now_ns();
                        /* The proofs bind the listener's address: the one the requester dialed. */
                        struct shoal_hs_config hc = {.role = SHOAL_HS_SERVER,
                                                     .key = &c->rs->key,
                                                     .service = SERVICE_RDMA,
                                                     .addr = c->rail->addr,
                                                     .member_id = c->rs->member_id,
                                                     .max_inflight = c->max_inflight};
                        if (shoal_hs_start(&c->hs, &hc))
                                conn_break(c, c->hs.why);
                } else if (event == FI_SHUTDOWN) {
                        conn_break(c, "peer shut down");
                }
        }
}

static void conn_free(struct rs_conn *c)
{
        struct shoal_rdma_server *rs = c->rs;
        shoal_fab_mep_close(&c->m, rs->epfd);
        /* The endpoint is closed: nothing holds the buffers now. */
        for (unsigned i = 0; c->slots && i < c->m.nslots; i++) {
                struct rs_slot *sl = &c->slots[i];
                if (sl->a && !sl->in_engine)
                        shoal_server_answer_done(rs->srv, sl->a);
                if (sl->testbuf)
                        shoal_server_dio_put(rs->srv, sl->testbuf);
        }
        free(c->slots);
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        rs->nconns--;
        free(c);
}

static void epoll_watch(struct shoal_rdma_server *rs, int fd)
{
        struct epoll_event ev = {.events = EPOLLIN};
        epoll_ctl(rs->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* A connection request on rail R: set up the endpoint, post receives, accept. */
static void on_connreq(struct shoal_rdma_server *rs, struct rs_rail *r, struct fi_info *info)
{
        struct shoal_fab *f = &r->fab;
        struct rs_conn *c = calloc(1, sizeof(*c));
        int rc = -ENOMEM;
        const char *call = "calloc";
        if (!c || rs->nconns >= MAX_CONNS)
                goto out_reject;
        c->rs = rs;
        c->rail = r;
        c->m.eq_fd = c->m.cq_fd = -1;
        if (info->dest_addr)
                shoal_fab_addr_str(info->dest_addr, c->peer, sizeof(c->peer));
        else
                snprintf(c->peer, sizeof(c->peer), "?");
        size_t rx_size = info->rx_attr ? info->rx_attr->size : f->rx_size;
        size_t tx_size = info->tx_attr ? info->tx_attr->size : f->tx_size;
        unsigned nrx = (unsigned)SHOAL_MIN(rx_size, (size_t)MAX_RX);
        /* Each answer is a write and a send: slots <= tx queue / 2; and <= posted receives. */
        unsigned nslots = (unsigned)SHOAL_MIN((size_t)nrx, tx_size / 2);
        if (nslots < 4)
                goto out_reject;
        c->max_inflight = nslots - 2;
        rc = shoal_fab_mep_alloc(&c->m, f, c->peer, nrx, nslots);
        c->slots = calloc(nslots, sizeof(*c->slots));
        if (rc || !c->slots) {
                rc = -ENOMEM;
                goto out_free;
        }
        for (unsigned i = nslots; i-- > 0;) {
                struct rs_slot *sl = &c->slots[i];
                sl->c = c;
                sl->wop.kind = SHOAL_FAB_OP_WRITE;
                sl->wop.owner = sl;
                sl->sop.kind = SHOAL_FAB_OP_SEND;
                sl->sop.owner = sl;
                sl->sbuf = shoal_fab_mep_sbuf(&c->m, i);
                sl->next = c->free;
                c->free = sl;
        }
        if ((rc = shoal_fab_mep_open(&c->m, info, c, nrx + 2 * nslots + 8, &call)))
                goto out_free;
        call = "fi_accept";
        if ((rc = fi_accept(c->m.ep, NULL, 0)))
                goto out_free;
        shoal_fab_mep_watch(&c->m, rs->epfd);
        c->deadline = shoal_now_ns() + HANDSHAKE_NS;
        c->next = rs->conns;
        rs->conns = c;
        rs->nconns++;
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        fi_freeinfo(info);
        return;

out_free:
        shoal_fab_log_err(r->fab.ifname, call, rc);
        c->m.eq_fd = c->m.cq_fd = -1; /* not watched yet */
        rs->nconns++;
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        conn_free(c);
        c = NULL;
out_reject:
        free(c);
        fi_reject(r->pep, info->handle, NULL, 0);
        fi_freeinfo(info);
}

static void rail_poll(struct shoal_rdma_server *rs, struct rs_rail *r)
{
        for (;;) {
                uint32_t event;
                struct fi_eq_cm_entry entry;
                ssize_t n = fi_eq_read(r->eq, &event, &entry, sizeof(entry), 0);
                if (n == -FI_EAGAIN)
                        return;
                if (n == -FI_EAVAIL) {
                        char msg[160];
                        shoal_fab_eq_err(r->eq, msg, sizeof(msg));
                        log_ratelimited(SHOAL_LOG_WARN, "rdma", "listener %s: %s", r->addr, msg);
                        continue;
                }
                if (n < 0) {
                        shoal_fab_log_err(r->addr, "fi_eq_read(listener)", (int)n);
                        return;
                }
                if (event == FI_CONNREQ) {
                        if (atomic_load(&rs->stop)) {
                                fi_reject(r->pep, entry.info->handle, NULL, 0);
                                fi_freeinfo(entry.info);
                        } else {
                                on_connreq(rs, r, entry.info);
                        }
                } else if (n >= (ssize_t)sizeof(struct fi_eq_entry) && entry.info) {
                        fi_freeinfo(entry.info);
                }
        }
}

static void drain_done(struct shoal_rdma_server *rs)
{
        uint64_t v;
        if (read(rs->evfd, &v, sizeof(v)) < 0) {
                /* EAGAIN: nothing signalled */
        }
        pthread_mutex_lock(&rs->mu);
        struct rs_slot *sl = rs->done;
        rs->done = rs->done_tail = NULL;
        pthread_mutex_unlock(&rs->mu);
        while (sl) {
                struct rs_slot *next = sl->next;
                answer_send(sl);
                sl = next;
        }
}

/* Deadlines, and the final free of broken connections once nothing is posted or held. */
static void tick(struct shoal_rdma_server *rs)
{
        uint64_t now = shoal_now_ns();
        for (struct rs_conn **pp = &rs->conns; *pp;) {
                struct rs_conn *c = *pp;
                if (!c->broken && c->state != CS_READY && now > c->deadline)
                        conn_break(c, "handshake deadline passed");
                if (!c->broken && c->state == CS_READY && now - c->last_rx > IDLE_NS)
                        conn_break(c, "idle: no message or heartbeat");
                if (c->broken && !c->closed_ep && (!c->m.posted || now - c->broken_at > DRAIN_NS)) {
                        /* Closing the endpoint stops the provider from touching our buffers;
                         * flushed completions of a closed endpoint are never reported. */
                        shoal_fab_mep_close_ep(&c->m, rs->epfd);
                        c->closed_ep = true;
                        for (unsigned i = 0; i < c->m.nslots; i++)
                                if (!c->slots[i].in_engine)
                                        c->slots[i].pending = 0;
                }
                if (c->closed_ep && !c->refs) {
                        *pp = c->next;
                        conn_free(c);
                        continue;
                }
                pp = &c->next;
        }
}

static void *progress_main(void *arg)
{
        struct shoal_rdma_server *rs = arg;
        uint64_t next_tick = 0, stop_at = 0;
        for (;;) {
                bool stopping = atomic_load(&rs->stop);
                if (stopping && !stop_at) {
                        stop_at = shoal_now_ns() + STOP_WAIT_NS;
                        for (struct rs_conn *c = rs->conns; c; c = c->next)
                                conn_break(c, "server stopping");
                }
                drain_done(rs);
                for (unsigned i = 0; i < rs->nrails; i++)
                        rail_poll(rs, &rs->rails[i]);
                for (struct rs_conn *c = rs->conns; c; c = c->next) {
                        if (c->closed_ep)
                                continue;
                        conn_poll_eq(c);
                        conn_poll_cq(c);
                }
                uint64_t now = shoal_now_ns();
                if (now >= next_tick || stopping) {
                        tick(rs);
                        next_tick = now + 100000000ULL;
                }
                if (stopping && (!rs->conns || now > stop_at))
                        break;
                /* Sleep only when every queue agrees that nothing is pending (fi_trywait). */
                bool can_sleep = true;
                for (unsigned i = 0; i < rs->nrails && can_sleep; i++) {
                        struct fid *f = &rs->rails[i].eq->fid;
                        can_sleep = fi_trywait(rs->rails[i].fab.fabric, &f, 1) == 0;
                }
                for (struct rs_conn *c = rs->conns; c && can_sleep; c = c->next) {
                        if (c->closed_ep)
                                continue;
                        can_sleep = shoal_fab_mep_trywait(&c->m);
                }
                struct epoll_event evs[32];
                epoll_wait(rs->epfd, evs, 32, can_sleep ? (stopping ? 10 : 100) : 0);
        }
        if (rs->conns)
                log_warn("rdma", "server stop: %u connections still had requests in the engine",
                         rs->nconns);
        return NULL;
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
        pthread_mutex_init(&rs->mu, NULL);
        if (shoal_hs_key_init(&rs->key, secret) ||
            shoal_strlcpy(rs->member_id, member_id ? member_id : "", sizeof(rs->member_id)) >=
                    sizeof(rs->member_id)) {
                snprintf(err, errlen, "rdma: refusing a group secret shorter than %d bytes",
                         SHOAL_SECRET_MIN);
                goto out_stop;
        }
        rs->dio_base = shoal_server_dio_region(srv, &rs->dio_len);
        rs->epfd = epoll_create1(EPOLL_CLOEXEC);
        rs->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (rs->epfd < 0 || rs->evfd < 0) {
                snprintf(err, errlen, "rdma: epoll/eventfd: %s", strerror(errno));
                goto out_stop;
        }
        epoll_watch(rs, rs->evfd);
        for (unsigned i = 0; i < n_if; i++) {
                struct rs_rail *r = &rs->rails[i];
                r->index = i;
                r->eq_fd = -1;
                rs->nrails++;
                int rc = shoal_fab_open(&r->fab, provider, ifaces[i], err, errlen);
                if (rc)
                        goto out_stop;
                /* [S1] on every transport: without a secret, loopback only. */
                if (!rs->key.set && strncmp(r->fab.ip, "127.", 4)) {
                        snprintf(err, errlen,
                                 "refusing to listen for RDMA on %s (%s) without a group secret: "
                                 "set --group-secret-file or SHOAL_GROUP_SECRET (or use "
                                 "--rdma-network lo)",
                                 ifaces[i], r->fab.ip);
                        goto out_stop;
                }
                rc = shoal_fab_mr_reg(&r->fab, rs->dio_base, rs->dio_len, FI_WRITE | FI_SEND,
                                      &r->dio_mr);
                if (rc) {
                        snprintf(err, errlen,
                                 "--rdma-network %s: cannot register %zu bytes of answer buffers: "
                                 "%s (memlock limit? see ulimit -l)",
                                 ifaces[i], rs->dio_len, fi_strerror(-rc));
                        goto out_stop;
                }
                const char *call = "fi_passive_ep";
                rc = fi_passive_ep(r->fab.fabric, r->fab.info, &r->pep, r);
                if (!rc && !(rc = shoal_fab_eq_open(&r->fab, &r->eq, &r->eq_fd)))
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
                        snprintf(err, errlen, "--rdma-network %s: cannot listen: %s: %s", ifaces[i],
                                 call, fi_strerror(-rc));
                        goto out_stop;
                }
                epoll_watch(rs, r->eq_fd);
                log_info("rdma",
                         "rdma listening on %s (%s, provider %s, mr_mode 0x%llx, key %zu "
                         "bytes)",
                         r->addr, ifaces[i], r->fab.prov, (unsigned long long)r->fab.mr_mode,
                         r->fab.key_size);
        }
        if (pthread_create(&rs->thread, NULL, progress_main, rs)) {
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
        for (unsigned i = 0; i < rs->nrails; i++) {
                struct rs_rail *r = &rs->rails[i];
                if (r->pep)
                        fi_close(&r->pep->fid);
                if (r->eq)
                        fi_close(&r->eq->fid);
                if (r->dio_mr)
                        fi_close(&r->dio_mr->fid);
                shoal_fab_close(&r->fab);
        }
        if (rs->epfd >= 0)
                close(rs->epfd);
        if (rs->evfd >= 0)
                close(rs->evfd);
        pthread_mutex_destroy(&rs->mu);
        shoal_hs_key_clear(&rs->key);
        free(rs);
}
