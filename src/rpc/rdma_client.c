/* The RDMA requester [M2, M4]: per member, one FI_EP_MSG channel from each --rdma-network
 * interface to the member's listener on the matching subnet, all driven by one progress thread.
 *
 * Callers never touch libfabric: shoal_rdma_read encodes the READ, picks the local buffer (the
 * caller's own when it lies in a registered region, else a registered bounce buffer), hands the
 * request to the progress thread and sleeps on a semaphore. The progress thread sends it on a
 * random idle channel of the member (one with no request in flight; else any with a free
 * credit), matches the answer by its 64-bit id and wakes the caller, who checks the chunk CRCs
 * on its own thread. A request leaves the progress thread only with its answer or after its
 * channel was shut down, so the member never writes into a buffer the caller has taken back.
 *
 * Failure of any channel of a member (connect or handshake failure, EQ error, FI_SHUTDOWN, CQ
 * error, missing heartbeat answers, a request past its deadline) shuts all of that member's
 * channels down: in-flight and waiting requests return -ENOTCONN and the caller re-issues them
 * over IORPC on TCP, and so do new ones until the retry time passes; then the next request
 * starts a reconnect in the background while it goes over TCP itself. */
#include "rpc/rdma.h"

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
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "rpc/client_conn.h"
#include "rpc/handshake.h"
#include "rpc/wire.h"

#define SERVICE_RDMA 3
#define MAX_SLOTS    64
#define MAX_REGIONS  256
#define RESP_MAX     (28 + 4 * SHOAL_MAX_CHUNKS)
#define CONNECT_NS   (3ULL * 1000000000ULL)
#define DRAIN_NS     (2ULL * 1000000000ULL)
#define BOUNCE_BUFS  8
#define WTEST_MAGIC  "SHOALWT1"

enum req_kind {
        RQ_READ,
        RQ_PING,
        RQ_WTEST
};

struct rreq {
        enum req_kind kind;
        const char *member;
        const char (*addrs)[64];
        unsigned naddrs;
        uint8_t body[1280];
        size_t body_len;
        char *local;  /* where the payload lands (registered) */
        int region;   /* index of the region holding LOCAL */
        uint32_t len; /* payload length */
        uint64_t id, deadline;
        sem_t done;
        int rc;
        unsigned rail; /* the interface that carried it */
        struct shoal_wire_hdr h;
        uint8_t resp[RESP_MAX];
        struct rreq *next;
};

struct rc_chan;

struct rc_slot {
        struct shoal_fab_op sop;
        struct rc_chan *ch;
        uint64_t id;
        struct rreq *req; /* NULL for handshake frames and heartbeats */
        bool used, send_done, answered;
        char *sbuf;
        struct rc_slot *next;
};

struct rc_rail {
        struct shoal_fab fab;
        unsigned index;
};

struct region {
        char *base;
        size_t len;
        struct fid_mr *mr[SHOAL_FAB_MAX_IFACES];
};

struct rc_peer;

struct rc_chan {
        struct shoal_rdma_client *cl;
        struct rc_peer *peer;
        struct rc_rail *rail;
        struct shoal_fab_mep m;
        struct rc_slot *slots, *free;
        unsigned credits, inflight;
        enum {
                CH_CONNECTING,
                CH_HELLO,
                CH_AUTH,
                CH_READY
        } state;
        bool broken;
        uint64_t deadline, last_rx, last_ping, broken_at;
        bool ping_out;
        struct shoal_hs hs; /* until CH_READY */
        char addr[64];
        struct rc_chan *next; /* the dying list */
};

enum peer_state {
        P_NEW,
        P_CONNECTING,
        P_UP,
        P_DOWN
};

struct rc_peer {
        struct shoal_rdma_client *cl;
        char id[64];
        char addrs[SHOAL_FAB_MAX_IFACES][64];
        unsigned naddrs;
        struct rc_chan *chans[SHOAL_FAB_MAX_IFACES];
        unsigned nchans;
        enum peer_state state;
        bool ever_up;
        uint64_t down_until;
        struct rreq *waiting, *waiting_tail; /* for the first connection or for a credit */
        struct rc_peer *next;
};

struct shoal_rdma_client {
        struct shoal_rdma_client_config cfg;
        char ifaces[SHOAL_FAB_MAX_IFACES][32];
        struct shoal_hs_key key;
        struct rc_rail rails[SHOAL_FAB_MAX_IFACES];
        unsigned nrails;
        pthread_mutex_t mu; /* regions, submit queue */
        struct region regions[MAX_REGIONS];
        _Atomic unsigned nregions;
        struct shoal_bufpool *bounce;
        struct rreq *subq, *subq_tail;
        int epfd, evfd;
        pthread_t thread;
        bool started;
        _Atomic bool stop;
        uint64_t next_id;
        uint64_t hb_ns;
        struct rc_peer *peers;
        struct rc_chan *dying;
};

static void wake(struct shoal_rdma_client *cl)
{
        uint64_t one = 1;
        if (write(cl->evfd, &one, sizeof(one)) < 0) {
                /* the loop also wakes on its tick */
        }
}

static void req_complete(struct rreq *r, int rc)
{
        r->rc = rc;
        sem_post(&r->done); /* R belongs to the caller from here on */
}

/* ---- channels ---------------------------------------------------------------------------- */

static void peer_fail(struct rc_peer *p, const char *why);

static void chan_shutdown(struct rc_chan *ch)
{
        if (ch->broken)
                return;
        ch->broken = true;
        ch->broken_at = shoal_now_ns();
        if (ch->state != CH_CONNECTING)
                shoal_fab_mep_shutdown(&ch->m);
        /* The endpoint is shut down: the member can no longer write into request buffers. */
        for (unsigned i = 0; i < ch->m.nslots; i++) {
                struct rc_slot *sl = &ch->slots[i];
                if (sl->used && sl->req && !sl->answered) {
                        req_complete(sl->req, -ENOTCONN);
                        sl->req = NULL;
                }
        }
        ch->next = ch->cl->dying;
        ch->cl->dying = ch;
}

static void chan_free(struct rc_chan *ch)
{
        shoal_fab_mep_close(&ch->m, ch->cl->epfd);
        free(ch->slots);
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        free(ch);
}

static struct rc_slot *slot_get(struct rc_chan *ch)
{
        struct rc_slot *sl = ch->free;
        if (!sl)
                return NULL;
        ch->free = sl->next;
        sl->used = true;
        sl->send_done = sl->answered = false;
        sl->req = NULL;
        return sl;
}

static void slot_put(struct rc_chan *ch, struct rc_slot *sl)
{
        if (!sl->send_done || !sl->answered)
                return;
        sl->used = false;
        sl->next = ch->free;
        ch->free = sl;
}

/* Sends a frame from slot SL (its body already at sbuf + header). */
static int send_slot(struct rc_chan *ch, struct rc_slot *sl, uint8_t type, uint16_t flags,
                     uint64_t id, size_t body_len)
{
        sl->id = id;
        size_t len =
                shoal_wire_frame_encode((uint8_t *)sl->sbuf, type, flags, 0, id, NULL, body_len);
        int rc = shoal_fab_mep_send(&ch->m, sl->sbuf, len, &sl->sop);
        if (rc) {
                sl->send_done = sl->answered = true;
                slot_put(ch, sl);
        }
        return rc;
}

static uint64_t new_id(struct shoal_rdma_client *cl)
{
        return __atomic_add_fetch(&cl->next_id, 1, __ATOMIC_RELAXED);
}

static uint32_t ipv4_of(const char *addr)
{
        struct sockaddr_in *sa = shoal_fab_addr_parse(addr);
        uint32_t a = sa ? ntohl(sa->sin_addr.s_addr) : 0;
        free(sa);
        return a;
}

/* The member address for rail R: the one sharing the longest IPv4 prefix with R's address (the
 * same subnet), else the one at R's position. */
static const char *addr_for_rail(struct rc_peer *p, struct rc_rail *r)
{
        char tmp[80];
        snprintf(tmp, sizeof(tmp), "%s:1", r->fab.ip);
        uint32_t a = ipv4_of(tmp);
        int best = -1, best_bits = -1;
        for (unsigned i = 0; i < p->naddrs; i++) {
                uint32_t x = a ^ ipv4_of(p->addrs[i]);
                int bits = x ? __builtin_clz(x) : 32;
                if (bits > best_bits) {
                        best_bits = bits;
                        best = (int)i;
                }
        }
        if (best < 0)
                return NULL;
        if (best_bits < 8)
                best = (int)(r->index % p->naddrs);
        return p->addrs[best];
}

static void epoll_watch(struct shoal_rdma_client *cl, int fd)
{
        struct epoll_event ev = {.events = EPOLLIN};
        epoll_ctl(cl->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Opens a channel from rail R to ADDR for peer P and starts connecting. */
static struct rc_chan *chan_open(struct shoal_rdma_client *cl, struct rc_peer *p, struct rc_rail *r,
                                 const char *addr)
{
        struct shoal_fab *f = &r->fab;
        struct rc_chan *ch = calloc(1, sizeof(*ch));
        struct fi_info *info = NULL;
        const char *call = "calloc";
        int rc = -ENOMEM;
        if (!ch)
                return NULL;
        ch->cl = cl;
        ch->peer = p;
        ch->rail = r;
        ch->m.eq_fd = ch->m.cq_fd = -1;
        shoal_strlcpy(ch->addr, addr, sizeof(ch->addr));
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        unsigned n = (unsigned)SHOAL_MIN(SHOAL_MIN(f->rx_size, f->tx_size), (size_t)MAX_SLOTS);
        rc = shoal_fab_mep_alloc(&ch->m, f, ch->addr, n, n);
        ch->slots = calloc(n, sizeof(*ch->slots));
        if (rc || !ch->slots) {
                rc = -ENOMEM;
                goto out_free;
        }
        for (unsigned i = n; i-- > 0;) {
                struct rc_slot *sl = &ch->slots[i];
                sl->ch = ch;
                sl->sop.kind = SHOAL_FAB_OP_SEND;
                sl->sop.owner = sl;
                sl->sbuf = shoal_fab_mep_sbuf(&ch->m, i);
                sl->next = ch->free;
                ch->free = sl;
        }
        call = "fi_dupinfo";
        info = fi_dupinfo(f->info);
        struct sockaddr_in *dest = shoal_fab_addr_parse(addr);
        if (!info || !dest) {
                free(dest);
                rc = -EINVAL;
                goto out_free;
        }
        free(info->dest_addr);
        info->dest_addr = dest;
        info->dest_addrlen = sizeof(*dest);
        if ((rc = shoal_fab_mep_open(&ch->m, info, ch, 2 * n + 8, &call)))
                goto out_free;
        call = "fi_connect";
        if ((rc = fi_connect(ch->m.ep, dest, NULL, 0)))
                goto out_free;
        fi_freeinfo(info);
        shoal_fab_mep_watch(&ch->m, cl->epfd);
        ch->state = CH_CONNECTING;
        ch->deadline = shoal_now_ns() + CONNECT_NS;
        return ch;

out_free:
        shoal_fab_log_err(addr, call, rc);
        if (info)
                fi_freeinfo(info);
        ch->m.eq_fd = ch->m.cq_fd = -1; /* not watched yet */
        chan_free(ch);
        return NULL;
}

/* ---- requests ---------------------------------------------------------------------------- */

static void peer_enqueue(struct rc_peer *p, struct rreq *r)
{
        r->next = NULL;
        if (p->waiting_tail)
                p->waiting_tail->next = r;
        else
                p->waiting = r;
        p->waiting_tail = r;
}

static struct shoal_rdma_client *peer_client(struct rc_peer *p)
{
        return p->cl;
}

/* Posts R on channel CH. Returns false when the channel broke. */
static bool post_request(struct rc_chan *ch, struct rreq *r)
{
        struct shoal_rdma_client *cl = ch->cl;
        struct rc_slot *sl = slot_get(ch);
        struct region *rg = &cl->regions[r->region];
        uint64_t raddr = shoal_fab_rma_addr(&ch->rail->fab, rg->base, r->local);
        uint64_t rkey = fi_mr_key(rg->mr[ch->rail->index]);
        uint8_t *body = (uint8_t *)sl->sbuf + SHOAL_WIRE_HDR_LEN;
        int n;
        uint8_t type;
        uint16_t flags = 0;
        if (r->kind == RQ_READ) {
                struct shoal_wire_read rd;
                shoal_wire_read_decode(r->body, r->body_len, &rd);
                rd.rdma_addr = raddr;
                rd.rdma_key = rkey;
                n = shoal_wire_read_encode(body, SHOAL_FAB_MSG_SLOT - SHOAL_WIRE_HDR_LEN, &rd);
                type = SHOAL_MSG_READ;
                flags = SHOAL_WF_FILL | SHOAL_WF_RDMA_TARGET;
        } else {
                memcpy(body, r->body, r->body_len);
                if (r->kind == RQ_WTEST) {
                        memcpy(body + 8, &raddr, 8);
                        memcpy(body + 16, &rkey, 8);
                }
                n = (int)r->body_len;
                type = SHOAL_MSG_PING;
        }
        sl->req = r;
        r->rail = ch->rail->index;
        if (n < 0 || send_slot(ch, sl, type, flags, r->id, (size_t)n)) {
                sl->req = NULL;
                return false;
        }
        ch->inflight++;
        return true;
}

/* A channel for P with a free credit: a random idle one, else a random one with credit. */
static struct rc_chan *pick_chan(struct rc_peer *p)
{
        struct rc_chan *idle[SHOAL_FAB_MAX_IFACES], *open[SHOAL_FAB_MAX_IFACES];
        unsigned ni = 0, no = 0;
        for (unsigned i = 0; i < p->nchans; i++) {
                struct rc_chan *ch = p->chans[i];
                if (!ch || ch->broken || ch->state != CH_READY || ch->inflight >= ch->credits)
                        continue;
                if (!ch->inflight)
                        idle[ni++] = ch;
                open[no++] = ch;
        }
        if (ni)
                return idle[shoal_rand64() % ni];
        return no ? open[shoal_rand64() % no] : NULL;
}

static void peer_dispatch(struct rc_peer *p)
{
        while (p->waiting && p->state == P_UP) {
                struct rc_chan *ch = pick_chan(p);
                if (!ch)
                        return;
                struct rreq *r = p->waiting;
                p->waiting = r->next;
                if (!p->waiting)
                        p->waiting_tail = NULL;
                if (!post_request(ch, r)) {
                        peer_enqueue(p, r);
                        peer_fail(p, "cannot post a request");
                        return;
                }
        }
}

static void peer_connect(struct shoal_rdma_client *cl, struct rc_peer *p)
{
        p->state = P_CONNECTING;
        p->nchans = 0;
        for (unsigned i = 0; i < cl->nrails; i++) {
                const char *addr = addr_for_rail(p, &cl->rails[i]);
                struct rc_chan *ch = addr ? chan_open(cl, p, &cl->rails[i], addr) : NULL;
                p->chans[p->nchans++] = ch;
                if (!ch) {
                        peer_fail(p, "cannot open a channel");
                        return;
                }
        }
}

static void peer_fail(struct rc_peer *p, const char *why)
{
        struct shoal_rdma_client *cl = peer_client(p);
        bool was_up = p->state == P_UP;
        for (unsigned i = 0; i < p->nchans; i++) {
                if (p->chans[i])
                        chan_shutdown(p->chans[i]);
                p->chans[i] = NULL;
        }
        p->nchans = 0;
        if (p->state != P_DOWN && !atomic_load(&cl->stop)) {
                char retry[32];
                shoal_format_duration(cl->cfg.retry_ns, retry, sizeof(retry));
                shoal_metric_inc(SHOAL_M_rdma_failovers);
                if (was_up)
                        log_warn("rdma",
                                 "rdma to member %s lost: %s; its reads go over IORPC on TCP, "
                                 "RDMA retried in %s",
                                 p->id, why, retry);
                else /* the seeds' FAQ line, once per attempt that failed (rate-limited) */
                        log_ratelimited(SHOAL_LOG_WARN, "rdma",
                                        "Cannot establish rpc connection to member %s over RDMA: "
                                        "%s; its reads go over IORPC on TCP, RDMA retried in %s",
                                        p->id, why, retry);
        }
        p->state = P_DOWN;
        p->down_until = shoal_now_ns() + cl->cfg.retry_ns;
        while (p->waiting) {
                struct rreq *r = p->waiting;
                p->waiting = r->next;
                req_complete(r, -ENOTCONN);
        }
        p->waiting_tail = NULL;
}

static struct rc_peer *peer_find(struct shoal_rdma_client *cl, struct rreq *r)
{
        for (struct rc_peer *p = cl->peers; p; p = p->next)
                if (!strcmp(p->id, r->member))
                        return p;
        struct rc_peer *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        shoal_strlcpy(p->id, r->member, sizeof(p->id));
        p->cl = cl;
        p->next = cl->peers;
        cl->peers = p;
        return p;
}

static void on_submit(struct shoal_rdma_client *cl, struct rreq *r)
{
        struct rc_peer *p = peer_find(cl, r);
        if (!p) {
                req_complete(r, -ENOTCONN);
                return;
        }
        /* The addresses come from the group view and may change with a member's restart. */
        bool changed = r->naddrs != p->naddrs;
        for (unsigned i = 0; i < r->naddrs && !changed; i++)
                changed = strcmp(r->addrs[i], p->addrs[i]) != 0;
        if (changed) {
                if (p->state == P_UP || p->state == P_CONNECTING)
                        peer_fail(p, "member addresses changed");
                p->naddrs = SHOAL_MIN(r->naddrs, (unsigned)SHOAL_FAB_MAX_IFACES);
                for (unsigned i = 0; i < p->naddrs; i++)
                        shoal_strlcpy(p->addrs[i], r->addrs[i], sizeof(p->addrs[i]));
                p->state = P_NEW;
                p->ever_up = false;
        }
        uint64_t now = shoal_now_ns();
        switch (p->state) {
        case P_DOWN:
                if (now < p->down_until) {
                        req_complete(r, -ENOTCONN);
                        return;
                }
                /* Reconnect in the background; this request goes over TCP meanwhile. */
                req_complete(r, -ENOTCONN);
                peer_connect(cl, p);
                return;
        case P_NEW:
                peer_enqueue(p, r);
                peer_connect(cl, p);
                return;
        case P_CONNECTING:
                if (p->ever_up)
                        req_complete(r, -ENOTCONN);
                else
                        peer_enqueue(p, r);
                return;
        case P_UP:
                peer_enqueue(p, r);
                peer_dispatch(p);
                return;
        }
}

/* ---- handshake and answers ------------------------------------------------------------------ */

/* Sends the handshake's pending frame (message id ID) from a free slot. */
static int chan_send_hs(struct rc_chan *ch, uint64_t id)
{
        struct rc_slot *sl = slot_get(ch);
        if (!sl)
                return -ENOBUFS;
        sl->id = id;
        memcpy(sl->sbuf, ch->hs.out, ch->hs.out_len);
        int rc = shoal_fab_mep_send(&ch->m, sl->sbuf, ch->hs.out_len, &sl->sop);
        if (rc) {
                sl->send_done = sl->answered = true;
                slot_put(ch, sl);
        }
        return rc;
}

static void chan_send_hello(struct rc_chan *ch)
{
        /* The proofs bind the address we dialed (rpc/handshake.h). */
        struct shoal_hs_config hc = {.role = SHOAL_HS_REQUESTER,
                                     .key = &ch->cl->key,
                                     .service = SERVICE_RDMA,
                                     .addr = ch->addr};
        if (shoal_hs_start(&ch->hs, &hc)) {
                peer_fail(ch->peer, ch->hs.why);
                return;
        }
        if (chan_send_hs(ch, SHOAL_HS_HELLO_ID)) {
                peer_fail(ch->peer, "cannot send HELLO");
                return;
        }
        ch->state = CH_HELLO;
        ch->deadline = shoal_now_ns() + CONNECT_NS;
}

static void chan_ready(struct rc_chan *ch)
{
        struct rc_peer *p = ch->peer;
        ch->state = CH_READY;
        ch->last_rx = ch->last_ping = shoal_now_ns();
        log_info("iorpc", "iorpc client started, server address %s, transport:RDMA (%s, %s)",
                 ch->addr, ch->rail->fab.ifname, ch->rail->fab.prov);
        for (unsigned i = 0; i < p->nchans; i++)
                if (!p->chans[i] || p->chans[i]->state != CH_READY)
                        return;
        p->state = P_UP;
        p->ever_up = true;
        peer_dispatch(p);
}

/* A handshake answer (rpc/handshake.c decides). Returns false on failure. */
static bool on_handshake(struct rc_chan *ch, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        enum shoal_hs_verdict v = shoal_hs_step(&ch->hs, h, body);
        if (v == SHOAL_HS_FAIL) {
                log_ratelimited(ch->hs.error == -EACCES ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "rdma",
                                "handshake with member %s failed: %s", ch->addr, ch->hs.why);
                return false;
        }
        if (v == SHOAL_HS_MORE) {
                if (chan_send_hs(ch, SHOAL_HS_AUTH_ID))
                        return false;
                ch->state = CH_AUTH;
                return true;
        }
        /* One slot stays free for the heartbeat. */
        ch->credits = SHOAL_MIN(ch->hs.peer_max_inflight, ch->m.nslots - 2);
        if (ch->credits < 1)
                return false;
        chan_ready(ch);
        return true;
}

static bool on_message(struct rc_chan *ch, const uint8_t *msg, size_t len)
{
        struct shoal_wire_hdr h;
        if (shoal_wire_msg_decode(msg, len, &h))
                return false;
        const uint8_t *body = msg + SHOAL_WIRE_HDR_LEN;
        struct rc_slot *sl = NULL;
        for (unsigned i = 0; i < ch->m.nslots && !sl; i++)
                if (ch->slots[i].used && !ch->slots[i].answered && ch->slots[i].id == h.id)
                        sl = &ch->slots[i];
        if (!sl)
                return false; /* an answer nobody asked for: never guess */
        sl->answered = true;
        if (ch->state != CH_READY) {
                bool ok = !sl->req && on_handshake(ch, &h, body);
                slot_put(ch, sl);
                return ok;
        }
        struct rreq *r = sl->req;
        sl->req = NULL;
        slot_put(ch, sl);
        if (!r) { /* heartbeat */
                ch->ping_out = false;
                return h.type == SHOAL_MSG_PONG;
        }
        ch->inflight--;
        bool fits = r->kind == RQ_READ ? (h.type == SHOAL_MSG_READ_RESP &&
                                          (h.flags & SHOAL_WF_RDMA_WRITTEN)) ||
                                                 h.type == SHOAL_MSG_ERROR
                                       : h.type == SHOAL_MSG_PONG;
        if (!fits || h.body_len > sizeof(r->resp)) {
                req_complete(r, -ENOTCONN);
                return false;
        }
        r->h = h;
        memcpy(r->resp, body, h.body_len);
        req_complete(r, 0);
        return true;
}

static void on_completion(struct rc_chan *ch, struct shoal_fab_op *op, size_t len)
{
        if (ch->broken)
                return;
        if (op->kind == SHOAL_FAB_OP_SEND) {
                struct rc_slot *sl = op->owner;
                sl->send_done = true;
                slot_put(ch, sl);
                return;
        }
        struct shoal_fab_rx *rx = op->owner;
        ch->last_rx = shoal_now_ns();
        if (!on_message(ch, (const uint8_t *)rx->buf, len)) {
                peer_fail(ch->peer, "bad or unexpected answer");
                return;
        }
        if (!ch->broken && shoal_fab_mep_post_rx(&ch->m, rx))
                peer_fail(ch->peer, "cannot post a receive");
}

static void chan_poll(struct rc_chan *ch)
{
        for (;;) {
                uint32_t event;
                char msg[200], line[512];
                int rc = shoal_fab_mep_eq_read(&ch->m, &event, msg, sizeof(msg));
                if (!rc)
                        break;
                if (rc == -FI_EAVAIL) {
                        snprintf(line, sizeof(line), "connection to %s: %s", ch->addr, msg);
                        peer_fail(ch->peer, line);
                        return;
                }
                if (rc < 0) {
                        peer_fail(ch->peer, "fi_eq_read failed");
                        return;
                }
                if (event == FI_CONNECTED && ch->state == CH_CONNECTING) {
                        chan_send_hello(ch);
                        if (ch->broken)
                                return;
                } else if (event == FI_SHUTDOWN) {
                        peer_fail(ch->peer, "the member shut the connection down");
                        return;
                }
        }
        struct fi_cq_msg_entry e[16];
        for (;;) {
                void *ctx;
                ssize_t n = shoal_fab_mep_cq_read(&ch->m, e, 16, &ctx);
                if (!n)
                        return;
                if (n == -FI_EAVAIL) {
                        peer_fail(ch->peer, "completion error");
                        return;
                }
                if (n < 0) {
                        peer_fail(ch->peer, "fi_cq_read failed");
                        return;
                }
                for (ssize_t i = 0; i < n && !ch->broken; i++)
                        on_completion(ch, e[i].op_context, e[i].len);
                if (ch->broken)
                        return;
        }
}

static void tick(struct shoal_rdma_client *cl)
{
        uint64_t now = shoal_now_ns();
        for (struct rc_peer *p = cl->peers; p; p = p->next) {
                for (unsigned i = 0; i < p->nchans; i++) {
                        struct rc_chan *ch = p->chans[i];
                        if (!ch || ch->broken)
                                continue;
                        if (ch->state != CH_READY && now > ch->deadline) {
                                char why[128], d[32];
                                shoal_format_duration(CONNECT_NS, d, sizeof(d));
                                snprintf(why, sizeof(why), "no connection to %s within %s",
                                         ch->addr, d);
                                peer_fail(p, why);
                                break;
                        }
                        if (ch->state != CH_READY)
                                continue;
                        if (ch->ping_out && now - ch->last_rx > 3 * cl->hb_ns) {
                                char why[128];
                                snprintf(why, sizeof(why), "no heartbeat answer from %s", ch->addr);
                                peer_fail(p, why);
                                break;
                        }
                        bool late = false;
                        for (unsigned k = 0; k < ch->m.nslots; k++)
                                if (ch->slots[k].req && now > ch->slots[k].req->deadline)
                                        late = true;
                        if (late) {
                                peer_fail(p, "a request passed its deadline");
                                break;
                        }
                        if (!ch->ping_out && now - ch->last_ping >= cl->hb_ns) {
                                struct rc_slot *sl = slot_get(ch);
                                if (!sl)
                                        continue;
                                memcpy(sl->sbuf + SHOAL_WIRE_HDR_LEN, &now, 8);
                                if (send_slot(ch, sl, SHOAL_MSG_PING, 0, new_id(cl), 8)) {
                                        peer_fail(p, "cannot send a heartbeat");
                                        break;
                                }
                                ch->ping_out = true;
                                ch->last_ping = now;
                        }
                }
        }
        /* Shut-down channels: free once their posted operations were flushed, or close the
         * endpoint after the drain time (a closed endpoint touches no buffer). */
        for (struct rc_chan **pp = &cl->dying; *pp;) {
                struct rc_chan *ch = *pp;
                if (ch->m.posted > 0 && now - ch->broken_at < DRAIN_NS) {
                        pp = &ch->next;
                        continue;
                }
                *pp = ch->next;
                chan_free(ch);
        }
}

/* Dying channels are polled only to collect flushed completions. */
static void dying_poll(struct rc_chan *ch)
{
        struct fi_cq_msg_entry e[16];
        for (int k = 0; k < 64; k++) {
                void *ctx;
                ssize_t n = shoal_fab_mep_cq_read(&ch->m, e, 16, &ctx);
                if (n <= 0 && n != -FI_EAVAIL)
                        return;
        }
}

static void *progress_main(void *arg)
{
        struct shoal_rdma_client *cl = arg;
        uint64_t next_tick = 0;
        while (!atomic_load(&cl->stop)) {
                uint64_t v;
                if (read(cl->evfd, &v, sizeof(v)) < 0) {
                        /* EAGAIN: nothing submitted */
                }
                pthread_mutex_lock(&cl->mu);
                struct rreq *r = cl->subq;
                cl->subq = cl->subq_tail = NULL;
                pthread_mutex_unlock(&cl->mu);
                while (r) {
                        struct rreq *next = r->next;
                        on_submit(cl, r);
                        r = next;
                }
                for (struct rc_peer *p = cl->peers; p; p = p->next)
                        for (unsigned i = 0; i < p->nchans; i++)
                                if (p->chans[i] && !p->chans[i]->broken)
                                        chan_poll(p->chans[i]);
                for (struct rc_chan *ch = cl->dying; ch; ch = ch->next)
                        if (ch->m.posted > 0)
                                dying_poll(ch);
                uint64_t now = shoal_now_ns();
                if (now >= next_tick) {
                        tick(cl);
                        next_tick = now + 100000000ULL;
                }
                /* Sleep only when no queue has work pending (fi_trywait, RDMA.md). */
                bool can_sleep = true;
                for (struct rc_peer *p = cl->peers; p && can_sleep; p = p->next) {
                        for (unsigned i = 0; i < p->nchans && can_sleep; i++) {
                                struct rc_chan *ch = p->chans[i];
                                if (!ch || ch->broken)
                                        continue;
                                can_sleep = shoal_fab_mep_trywait(&ch->m);
                        }
                }
                struct epoll_event evs[32];
                epoll_wait(cl->epfd, evs, 32, can_sleep ? 100 : 0);
        }
        /* Stopping: shut every channel down (requests return -ENOTCONN), then free them. */
        for (struct rc_peer *p = cl->peers; p; p = p->next)
                if (p->state != P_DOWN && p->state != P_NEW)
                        peer_fail(p, "client stopping");
        pthread_mutex_lock(&cl->mu);
        struct rreq *r = cl->subq;
        cl->subq = cl->subq_tail = NULL;
        pthread_mutex_unlock(&cl->mu);
        while (r) {
                struct rreq *next = r->next;
                req_complete(r, -ENOTCONN);
                r = next;
        }
        while (cl->dying) {
                struct rc_chan *ch = cl->dying;
                cl->dying = ch->next;
                chan_free(ch);
        }
        return NULL;
}

static int register_region(struct shoal_rdma_client *cl, void *base, size_t len, char *err,
                           size_t errlen)
{
        pthread_mutex_lock(&cl->mu);
        unsigned n = atomic_load(&cl->nregions);
        int rc = 0;
        if (n == MAX_REGIONS) {
                snprintf(err, errlen, "rdma: too many registered regions");
                rc = -ENOSPC;
                goto out_unlock;
        }
        struct region *rg = &cl->regions[n];
        rg->base = base;
        rg->len = len;
        for (unsigned i = 0; i < cl->nrails; i++) {
                rc = shoal_fab_mr_reg(&cl->rails[i].fab, base, len,
                                      FI_RECV | FI_REMOTE_WRITE | FI_WRITE, &rg->mr[i]);
                if (rc) {
                        snprintf(err, errlen,
                                 "--rdma-network %s: cannot register %zu bytes of read buffers: "
                                 "%s (memlock limit? see ulimit -l)",
                                 cl->rails[i].fab.ifname, len, fi_strerror(-rc));
                        while (i-- > 0)
                                fi_close(&rg->mr[i]->fid);
                        goto out_unlock;
                }
        }
        /* Published last: readers scan regions without the lock. */
        atomic_store(&cl->nregions, n + 1);
out_unlock:
        pthread_mutex_unlock(&cl->mu);
        return rc;
}

int shoal_rdma_client_register(struct shoal_rdma_client *cl, void *base, size_t len, char *err,
                               size_t errlen)
{
        return register_region(cl, base, len, err, errlen);
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
        cl->epfd = cl->evfd = -1;
        pthread_mutex_init(&cl->mu, NULL);
        if (!cl->cfg.retry_ns)
                cl->cfg.retry_ns = 300ULL * 1000000000ULL;
        const struct shoal_env *env = shoal_config_env();
        if (env->rdma_retry_ns)
                cl->cfg.retry_ns = env->rdma_retry_ns;
        cl->hb_ns = env->rdma_heartbeat_ns ? env->rdma_heartbeat_ns : 1000000000ULL;
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
        cl->epfd = epoll_create1(EPOLL_CLOEXEC);
        cl->evfd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        if (cl->epfd < 0 || cl->evfd < 0) {
                snprintf(err, errlen, "rdma: epoll/eventfd: %s", strerror(errno));
                goto out_destroy;
        }
        epoll_watch(cl, cl->evfd);
        for (unsigned i = 0; i < cfg->n_if; i++) {
                shoal_strlcpy(cl->ifaces[i], cfg->ifaces[i], sizeof(cl->ifaces[i]));
                cl->rails[i].index = i;
                cl->nrails++;
                if (shoal_fab_open(&cl->rails[i].fab, cfg->provider, cfg->ifaces[i], err, errlen))
                        goto out_destroy;
        }
        size_t bsz = cfg->bounce_size ? cfg->bounce_size : 65536;
        cl->bounce = shoal_bufpool_create(bsz, BOUNCE_BUFS);
        if (!cl->bounce) {
                snprintf(err, errlen, "rdma: cannot allocate bounce buffers");
                goto out_destroy;
        }
        size_t blen;
        void *bbase = shoal_bufpool_base(cl->bounce, &blen);
        if (register_region(cl, bbase, blen, err, errlen))
                goto out_destroy;
        if (pthread_create(&cl->thread, NULL, progress_main, cl)) {
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
        if (cl->started) {
                atomic_store(&cl->stop, true);
                wake(cl);
                pthread_join(cl->thread, NULL);
        }
        while (cl->peers) {
                struct rc_peer *p = cl->peers;
                cl->peers = p->next;
                free(p);
        }
        for (unsigned r = 0; r < atomic_load(&cl->nregions); r++)
                for (unsigned i = 0; i < cl->nrails; i++)
                        if (cl->regions[r].mr[i])
                                fi_close(&cl->regions[r].mr[i]->fid);
        for (unsigned i = 0; i < cl->nrails; i++)
                shoal_fab_close(&cl->rails[i].fab);
        shoal_bufpool_destroy(cl->bounce);
        if (cl->epfd >= 0)
                close(cl->epfd);
        if (cl->evfd >= 0)
                close(cl->evfd);
        pthread_mutex_destroy(&cl->mu);
        shoal_hs_key_clear(&cl->key);
        free(cl);
}

/* The registered region holding [P, P+LEN), or -1. */
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

/* Hands R to the progress thread and waits for it to come back (it always does: with an
 * answer, or when its channel was shut down, or at the client's stop). */
static int submit_wait(struct shoal_rdma_client *cl, struct rreq *r)
{
        sem_init(&r->done, 0, 0);
        r->next = NULL;
        pthread_mutex_lock(&cl->mu);
        r->id = new_id(cl);
        if (cl->subq_tail)
                cl->subq_tail->next = r;
        else
                cl->subq = r;
        cl->subq_tail = r;
        pthread_mutex_unlock(&cl->mu);
        wake(cl);
        while (sem_wait(&r->done) && errno == EINTR)
                ;
        sem_destroy(&r->done);
        return r->rc;
}

int shoal_rdma_read(struct shoal_rdma_client *cl, const char *member_id, const char (*addrs)[64],
                    unsigned n_addrs, const struct shoal_volume *vol,
                    const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                    void *dst, uint64_t view_version, uint64_t deadline)
{
        if (!n_addrs)
                return -ENOTCONN;
        struct rreq *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc;
        char *bounce = NULL;
        int n = shoal_rpc_encode_read(r->body, sizeof(r->body), vol, obj, index, off, len,
                                      view_version);
        if (n < 0) {
                rc = -EINVAL;
                goto out_free;
        }
        r->kind = RQ_READ;
        r->body_len = (size_t)n;
        r->member = member_id;
        r->addrs = addrs;
        r->naddrs = n_addrs;
        r->len = len;
        r->deadline = deadline;
        r->region = region_of(cl, dst, len);
        if (r->region >= 0) {
                r->local = dst;
        } else {
                uint64_t now = shoal_now_ns();
                if (len > shoal_bufpool_bufsize(cl->bounce) ||
                    !(bounce =
                              shoal_bufpool_get(cl->bounce, deadline > now ? deadline - now : 0))) {
                        rc = -ENOTCONN;
                        goto out_free;
                }
                r->local = bounce;
                r->region = 0;
        }
        rc = submit_wait(cl, r);
        if (rc)
                goto out_bounce;
        if (r->h.type == SHOAL_MSG_ERROR) {
                rc = shoal_rpc_status_errno(r->h.status);
                goto out_bounce;
        }
        struct shoal_wire_read_resp resp;
        if (shoal_rpc_decode_answer(SHOAL_SERVICE_IORPC, r->resp, r->h.body_len, &resp) ||
            shoal_rpc_check_answer(vol, obj, index, off, len, &r->h, &resp)) {
                rc = -ENOTCONN; /* a member that answers wrongly: let TCP carry it */
                goto out_bounce;
        }
        rc = shoal_rpc_verify_payload(vol, obj, index, off, len, r->local, &resp);
        if (rc)
                goto out_bounce;
        if (bounce)
                memcpy(dst, bounce, len);
        shoal_metric_add(SHOAL_M_rdma_recv_bytes, len);
        shoal_metric_add(SHOAL_M_rdma_if0_bytes + r->rail, len);
out_bounce:
        if (bounce)
                shoal_bufpool_put(cl->bounce, bounce);
out_free:
        free(r);
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
                                               .retry_ns = 1000000000ULL};
        uint64_t t0 = shoal_now_ns();
        struct shoal_rdma_client *cl = shoal_rdma_client_create(&cfg, err, sizeof(err));
        if (!cl) {
                printf("%-8s %-21s FAILED: %s\n", "rdma", addr, err);
                return -ENODEV;
        }
        struct rreq *r = calloc(1, sizeof(*r));
        char *buf = shoal_bufpool_get(cl->bounce, 0);
        int rc = r && buf ? 0 : -ENOMEM;
        double min = 1e9, max = 0, sum = 0, connect_ms = 0;
        unsigned pings = 5;
        for (unsigned i = 0; i <= pings && !rc; i++) {
                uint64_t p0 = shoal_now_ns();
                memset(r, 0, sizeof(*r));
                r->kind = RQ_PING;
                r->member = "ping";
                r->addrs = (const char(*)[64])addrs;
                r->naddrs = 1;
                r->local = buf;
                r->body_len = 8;
                memcpy(r->body, &p0, 8);
                r->deadline = p0 + 5000000000ULL;
                rc = submit_wait(cl, r);
                if (!rc && (r->h.body_len != 8 || memcmp(r->resp, &p0, 8)))
                        rc = -EPROTO;
                double ms = (double)(shoal_now_ns() - p0) / 1e6;
                if (i == 0) { /* the first one includes connect and handshake */
                        connect_ms = (double)(shoal_now_ns() - t0) / 1e6;
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
                r->kind = RQ_WTEST;
                r->member = "ping";
                r->addrs = (const char(*)[64])addrs;
                r->naddrs = 1;
                r->local = buf;
                r->region = 0;
                memcpy(r->body, WTEST_MAGIC, 8);
                memcpy(r->body + 24, &wlen, 4);
                memcpy(r->body + 28, &seed, 4);
                r->body_len = 32;
                r->deadline = shoal_now_ns() + 5000000000ULL;
                rc = submit_wait(cl, r);
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
