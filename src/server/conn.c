/* The member's TCP connections (server/conn.h).
 *
 * A connection lives on one loop thread. It reads frames, checks them and hands each to its
 * message type's handler (conn_frame); a request goes to the engine, whose DONE comes back to the
 * loop (req_done_on_loop), and the answers leave in completion order (conn_write). A connection
 * is reference counted: the loop holds one reference, every request in the engine one more, so
 * a connection closed while its requests are out is freed by the last of them. */
#include "server/conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "server/answer.h"
#include "server/engine.h"
#include "server/server_put.h"
#include "server/server_state.h"
#include "wire/handshake.h"
#include "wire/wire.h"

#define HANDSHAKE_NS        (3 * SHOAL_NS_PER_SEC) /* short: an honest handshake is two RTTs */
#define FRAME_STALL_NS      (10 * SHOAL_NS_PER_SEC)
#define SEND_STALL_NS       (30 * SHOAL_NS_PER_SEC)
#define IORPC_CONN_INFLIGHT 1024 /* advertised: ids a requester may have outstanding */
#define CONN_ACTIVE_MAX     64   /* IORPC requests read and not yet answered, per connection */
#define CONN_CTRL_MAX       8    /* ... and control frames owed on top of them */
#define CONN_IDS            (CONN_ACTIVE_MAX + 16)
#define CONN_CORRUPT_MAX    2  /* CORRUPT notices being checked, per connection */
#define READ_BUDGET         32 /* frames handled per connection per loop round */
#define IN_MAX              (SHOAL_WIRE_HDR_LEN + 4096)
#define HS_BODY_MAX         128 /* before authentication only the small handshake bodies */
#define PUT_SCRATCH         16384

struct conn {
        struct shoal_loop_io io;
        struct srv_loop *lp;
        int service;
        char peer[64];
        enum {
                C_HELLO,
                C_AUTH,
                C_READY
        } state;
        bool closed;
        bool closing;       /* conn_close_later: closed once the loop's batch of events is done */
        _Atomic bool gone;  /* closed, for worker threads */
        int refs;           /* the loop's own reference + one per request outside the loop */
        struct shoal_hs hs; /* the handshake, until state is C_READY */
        uint8_t in[IN_MAX];
        size_t in_len;
        uint64_t frame_start;    /* monotonic time the current partial frame began, 0 = none */
        uint64_t deadline;       /* handshake deadline */
        unsigned inflight;       /* answers owed (requests and control frames): ids[0..inflight) */
        unsigned nreq;           /* READ requests among them: bounded by conn_max_inflight */
        unsigned ncorrupt;       /* CORRUPT notices being checked (no answer) */
        uint64_t *ids;           /* in-flight ids, for the duplicate check */
        struct shoal_list sendq; /* answers ready, in completion order */
        uint64_t last_progress;
        struct shoal_adm_ent adm; /* among the loop's unauthenticated ones until C_READY */
        struct shoal_loop_task close_task;
        struct shoal_put_rx *put; /* a PUT_BLOCK whose payload is being received */
        unsigned nput;            /* PUT_BLOCKs received or being processed, not yet answered */
        uint64_t put_id;          /* the id of C->put */
        struct shoal_list link;   /* the loop's connections */
};

static void conn_close(struct conn *c);
static void conn_update_events(struct conn *c);

static struct shoal_engine *conn_engine(const struct conn *c)
{
        return c->lp->s->engine;
}

static enum shoal_req_via conn_via(const struct conn *c)
{
        return c->service == SHOAL_SERVICE_POOL ? SHOAL_VIA_POOL : SHOAL_VIA_IORPC;
}

static void conn_put(struct conn *c)
{
        if (--c->refs == 0) {
                free(c->ids);
                free(c);
        }
}

static void conn_forget_id(struct conn *c, uint64_t id, bool is_req)
{
        for (unsigned i = 0; i < c->inflight; i++) {
                if (c->ids[i] == id) {
                        c->ids[i] = c->ids[c->inflight - 1];
                        c->inflight--;
                        break;
                }
        }
        if (is_req)
                c->nreq--;
}

/* ---- requests back from the engine --------------------------------------------------------- */

/* Loop thread: R's answer joins its connection's queue (answers leave in completion order). */
static void req_queue_answer(struct shoal_req *r)
{
        struct conn *c = r->owner;
        shoal_engine_answer_build(r);
        shoal_engine_req_processed(r);
        shoal_list_push_back(&c->sendq, &r->link);
}

static bool conn_write(struct conn *c);

static void conn_kick_write(struct conn *c)
{
        if (conn_write(c))
                conn_update_events(c);
}

/* Loop thread: a request came back from the workers. */
static void req_done_on_loop(void *arg)
{
        struct shoal_req *r = arg;
        struct conn *c = r->owner;
        if (c->closed) {
                conn_put(c);
                shoal_engine_req_free(r);
                return;
        }
        conn_put(c); /* the loop's own reference keeps it now */
        if (r->type == SHOAL_MSG_PUT_BLOCK)
                c->nput--;
        if (r->type == SHOAL_MSG_CORRUPT) {
                c->ncorrupt--;
                shoal_engine_req_free(r);
                conn_update_events(c);
                return;
        }
        req_queue_answer(r);
        conn_kick_write(c);
}

/* The engine's DONE for a TCP request. */
static void req_done(struct shoal_req *r)
{
        struct conn *c = r->owner;
        if (r->done_inline) {
                /* Answered inside its connection's read handler, which sends after reading. */
                conn_put(c);
                req_queue_answer(r);
        } else {
                shoal_loop_post(c->lp->loop, &r->task);
        }
}

/* R is C's: its DONE comes back to C's loop; C stays while R is out. */
static void req_bind(struct conn *c, struct shoal_req *r)
{
        r->owner = c;
        r->peer = c->peer;
        r->gone = &c->gone;
        r->done = req_done;
        r->task.fn = req_done_on_loop;
        r->task.arg = r;
}

static void conn_submit(struct conn *c, struct shoal_req *r)
{
        c->refs++;
        shoal_engine_submit(conn_engine(c), r);
}

/* ---- writing ------------------------------------------------------------------------------- */

/* A send, sendfile or splice returned -1: wait for EPOLLOUT when the socket is only full, else
 * the connection is done. Returns what conn_write returns. */
static bool send_failed(struct conn *c)
{
        if (errno == EAGAIN || errno == EINTR)
                return true;
        conn_close(c);
        return false;
}

/* R, first in C's queue, has gone: counted, forgotten, freed. */
static void answer_done(struct conn *c, struct shoal_req *r)
{
        shoal_list_del(&r->link);
        shoal_engine_req_sent(r, shoal_now_ns());
        conn_forget_id(c, r->id, r->type == SHOAL_MSG_READ);
        shoal_engine_req_free(r);
}

/* Sends as much of the queued answers as the socket takes. Returns false when C was closed. */
static bool conn_write(struct conn *c)
{
        struct shoal_list *n;
        while ((n = shoal_list_first(&c->sendq))) {
                struct shoal_req *r = shoal_list_entry(n, struct shoal_req, link);
                if (!r->t_write)
                        r->t_write = shoal_now_ns();
                if (!shoal_answer_sent(r)) {
                        ssize_t sent = shoal_answer_send(c->io.fd, c->peer, r);
                        if (sent == SHOAL_ANSWER_BROKEN) {
                                conn_close(c);
                                return false;
                        }
                        if (sent < 0)
                                return send_failed(c);
                        shoal_answer_advance(r, (size_t)sent);
                        c->last_progress = shoal_now_ns();
                        continue;
                }
                answer_done(c, r);
        }
        return true;
}

static unsigned conn_max_inflight(const struct conn *c)
{
        return c->service == SHOAL_SERVICE_POOL ? 1 : IORPC_CONN_INFLIGHT;
}

/* Requests read from the connection and not yet fully answered. A request holds its answer (a
 * cache-file fd, a buffer) until the peer has read it, so this also bounds what a peer that
 * never reads can hold; the peer may have more outstanding (conn_max_inflight), which wait in
 * the socket buffers. */
static unsigned conn_active_max(const struct conn *c)
{
        return c->service == SHOAL_SERVICE_POOL ? 1 : CONN_ACTIVE_MAX;
}

/* Stops reading while the connection is at its limits: the peer's excess waits in the socket
 * buffers (backpressure, not memory, and not a refusal). */
static bool conn_can_read(const struct conn *c)
{
        if (c->put)
                return true; /* a payload is half read: the stream must move on */
        return c->nreq < conn_active_max(c) && c->inflight < conn_active_max(c) + CONN_CTRL_MAX &&
               c->ncorrupt < CONN_CORRUPT_MAX && c->nput < SHOAL_PUT_CONN_MAX;
}

static void conn_update_events(struct conn *c)
{
        if (c->closed)
                return;
        /* RDHUP always: a peer that closed must be noticed even while its requests are not
         * being read, so that its queued work is dropped before it starts. */
        uint32_t ev = EPOLLRDHUP | (conn_can_read(c) ? EPOLLIN : 0);
        if (!shoal_list_empty(&c->sendq))
                ev |= EPOLLOUT;
        shoal_loop_mod(c->lp->loop, &c->io, ev);
}

/* A pseudo-request of C that carries only a frame (handshake, error, pong, info), queued. */
static struct shoal_req *conn_ctrl_new(struct conn *c, uint64_t id, uint8_t type)
{
        struct shoal_req *r = shoal_engine_req_new(conn_engine(c), conn_via(c), sizeof(*r));
        if (!r)
                return NULL;
        r->owner = c;
        r->id = id;
        r->type = type;
        r->status = SHOAL_ST__MAX; /* not OK: no payload */
        shoal_list_push_back(&c->sendq, &r->link);
        c->ids[c->inflight++] = id; /* conn_write forgets it when sent */
        return r;
}

/* Queues a small control frame. */
static bool conn_send_ctrl(struct conn *c, uint8_t type, uint16_t flags, uint32_t status,
                           uint64_t id, const uint8_t *body, size_t body_len)
{
        struct shoal_req *r = conn_ctrl_new(c, id, type);
        if (r)
                r->out_len =
                        shoal_wire_frame_encode(r->out, type, flags, status, id, body, body_len);
        return r != NULL;
}

/* Queues the whole frame FRAME (an answer to ID) like a control frame. */
static bool conn_send_raw(struct conn *c, uint64_t id, const uint8_t *frame, size_t len)
{
        if (len > sizeof(((struct shoal_req *)NULL)->out))
                return false;
        struct shoal_req *r = conn_ctrl_new(c, id, frame[5]);
        if (!r)
                return false;
        memcpy(r->out, frame, len);
        r->out_len = len;
        return true;
}

static void conn_send_error(struct conn *c, uint64_t id, uint32_t status, const char *reason)
{
        uint8_t body[256];
        int n = shoal_wire_error_encode(body, sizeof(body), reason);
        conn_send_ctrl(c, SHOAL_MSG_ERROR, 0, status, id, body, n > 0 ? (size_t)n : 0);
}

/* ---- handshake ----------------------------------------------------------------------------- */

/* Starts the handshake of the accepted connection C on FD (wire/handshake.h): the proofs bind the
 * address the requester dialed, which is this socket's local address. Returns 0 or -errno (no
 * address, no randomness): the caller closes. */
static int conn_handshake_start(struct conn *c, int fd)
{
        struct shoal_server *s = c->lp->s;
        struct sockaddr_in la;
        socklen_t ll = sizeof(la);
        char ip[INET_ADDRSTRLEN], local[SHOAL_HS_ADDR_MAX];
        if (getsockname(fd, (struct sockaddr *)&la, &ll) || la.sin_family != AF_INET ||
            !inet_ntop(AF_INET, &la.sin_addr, ip, sizeof(ip)))
                return -EADDRNOTAVAIL;
        snprintf(local, sizeof(local), "%s:%u", ip, ntohs(la.sin_port));
        struct shoal_hs_config hc = {.role = SHOAL_HS_SERVER,
                                     .key = &s->key,
                                     .service = (uint8_t)c->service,
                                     .addr = local,
                                     .member_id = s->member_id,
                                     .max_inflight = conn_max_inflight(c)};
        int rc = shoal_hs_start(&c->hs, &hc);
        if (rc)
                log_ratelimited(SHOAL_LOG_ERROR, "server", "closing %s: %s", c->peer,
                                c->hs.why ? c->hs.why : strerror(-rc));
        return rc;
}

/* One frame while the session is not open. Returns false when the connection was closed. */
static bool conn_handshake_frame(struct conn *c, const struct shoal_wire_hdr *h,
                                 const uint8_t *body)
{
        enum shoal_hs_verdict v = shoal_hs_step(&c->hs, h, body);
        if (v == SHOAL_HS_FAIL) {
                log_ratelimited(c->hs.error == -EACCES ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "server",
                                "peer %s failed the handshake: %s", c->peer, c->hs.why);
                /* The reason, best effort and only in order: nothing else may be queued. */
                if (c->hs.out_len && shoal_list_empty(&c->sendq) &&
                    send(c->io.fd, c->hs.out, c->hs.out_len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                        /* the peer learns it from the close */
                }
                conn_close(c);
                return false;
        }
        if (c->hs.out_len && !conn_send_raw(c, h->id, c->hs.out, c->hs.out_len)) {
                conn_close(c);
                return false;
        }
        if (v == SHOAL_HS_DONE) {
                c->state = C_READY;
                c->deadline = 0;
                shoal_adm_leave(&c->lp->adm, &c->adm);
        } else {
                c->state = C_AUTH;
        }
        return true;
}

/* ---- one handler per message type ---------------------------------------------------------- */

/* Whether ID is in flight on C already: a protocol breach, C is closed. */
static bool conn_id_reused(struct conn *c, uint64_t id)
{
        for (unsigned i = 0; i < c->inflight; i++) {
                if (c->ids[i] == id) {
                        log_ratelimited(SHOAL_LOG_WARN, "server",
                                        "peer %s reused in-flight id %llu: closing", c->peer,
                                        (unsigned long long)id);
                        conn_close(c);
                        return true;
                }
        }
        return false;
}

/* READ (an answer is owed) or CORRUPT (a notice, never answered). */
static bool conn_on_read(struct conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        bool is_read = h->type == SHOAL_MSG_READ;
        if (is_read && conn_id_reused(c, h->id))
                return false;
        uint32_t status;
        char why[128];
        struct shoal_req *r =
                shoal_engine_req_read(conn_engine(c), conn_via(c), sizeof(*r), h->type, h->id,
                                      h->flags, body, h->body_len, &status, why, sizeof(why));
        if (!r) {
                if (is_read) /* a CORRUPT notice is never answered */
                        conn_send_error(c, h->id, status, why);
                return true;
        }
        req_bind(c, r);
        if (is_read) {
                c->ids[c->inflight++] = h->id;
                c->nreq++;
        } else if (shoal_engine_corrupt_slot(conn_engine(c), r)) {
                c->ncorrupt++;
        } else {
                shoal_engine_req_free(r);
                return true;
        }
        conn_submit(c, r);
        return true;
}

static bool conn_on_info(struct conn *c, const struct shoal_wire_hdr *h)
{
        struct shoal_server *s = c->lp->s;
        if (!s->iorpc_on) {
                /* [R2]: a member with IORPC disabled tells clients so; they stay on the TCP
                 * pool. */
                conn_send_error(c, h->id, SHOAL_ST_RPC_DISABLED, "rpc disabled");
                return true;
        }
        struct shoal_wire_info info;
        memset(&info, 0, sizeof(info));
        shoal_strlcpy(info.tcp_addr, s->tcp_addr, sizeof(info.tcp_addr));
        shoal_strlcpy(info.iorpc_addr, s->iorpc_addr, sizeof(info.iorpc_addr));
        pthread_mutex_lock(&s->info_mu);
        info.n_rdma = (uint8_t)s->n_rdma;
        for (unsigned i = 0; i < s->n_rdma; i++)
                shoal_strlcpy(info.rdma_addr[i], s->rdma_addr[i], sizeof(info.rdma_addr[i]));
        pthread_mutex_unlock(&s->info_mu);
        info.block_size = s->vol->block_size;
        shoal_strlcpy(info.volume_url, s->vol->url, sizeof(info.volume_url));
        uint8_t b[2048];
        int n = shoal_wire_info_encode(b, sizeof(b), &info);
        if (n < 0) {
                conn_close(c);
                return false;
        }
        conn_send_ctrl(c, SHOAL_MSG_INFO_RESP, 0, 0, h->id, b, (size_t)n);
        return true;
}

/* The payload of the put in C->put has arrived (or was dropped): refuse it, or hand it to the
 * engine (a fill worker: it may ask the store). Returns false when C was closed. */
static bool conn_put_received(struct conn *c)
{
        struct shoal_put_srv *ps = shoal_engine_put(conn_engine(c));
        struct shoal_put_rx *rx = c->put;
        c->put = NULL;
        c->frame_start = 0;
        struct shoal_req *r = rx->status == SHOAL_ST_OK
                                      ? shoal_engine_req_new(conn_engine(c), conn_via(c),
                                                             sizeof(struct shoal_req))
                                      : NULL;
        if (!r) {
                if (rx->status == SHOAL_ST_OK)
                        snprintf(rx->why, sizeof(rx->why), "out of memory");
                rx->status = rx->status == SHOAL_ST_OK ? SHOAL_ST_BUSY : rx->status;
                shoal_put_refused(ps, rx, c->peer);
                conn_send_error(c, c->put_id, rx->status, rx->why);
                shoal_put_free(ps, rx);
                c->nput--;
                return true;
        }
        r->id = c->put_id;
        r->type = SHOAL_MSG_PUT_BLOCK;
        r->put = rx;
        req_bind(c, r);
        c->ids[c->inflight++] = r->id;
        conn_submit(c, r);
        return true;
}

/* PUT_BLOCK (the checks are server/server_put.c's): its payload follows on the stream, and is
 * read next (conn_put_payload). */
static bool conn_on_put(struct conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        if (conn_id_reused(c, h->id))
                return false;
        c->put = shoal_put_begin(shoal_engine_put(conn_engine(c)), h, body, c->peer);
        if (!c->put) {
                conn_close(c);
                return false;
        }
        c->put_id = h->id;
        c->nput++;
        c->frame_start = shoal_now_ns();
        return c->put->len ? true : conn_put_received(c);
}

/* Reads payload bytes of C->put from the socket (into its buffer, or dropped). Returns false
 * when the socket is empty or C was closed. */
static bool conn_put_payload(struct conn *c)
{
        struct shoal_put_rx *rx = c->put;
        uint8_t scratch[PUT_SCRATCH];
        size_t want = rx->len - rx->got;
        uint8_t *dst = rx->buf ? rx->buf + rx->got : scratch;
        if (!rx->buf && want > sizeof(scratch))
                want = sizeof(scratch);
        ssize_t n = recv(c->io.fd, dst, want, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                conn_close(c);
                return false;
        }
        if (n < 0)
                return false;
        rx->got += (uint32_t)n;
        c->frame_start = shoal_now_ns(); /* a stall is no progress for FRAME_STALL_NS */
        return rx->got < rx->len || conn_put_received(c);
}

/* Handles one complete, CRC-checked frame. Returns false when the connection was closed. */
static bool conn_frame(struct conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        if (c->state != C_READY)
                return conn_handshake_frame(c, h, body);
        switch (h->type) {
        case SHOAL_MSG_READ:
        case SHOAL_MSG_CORRUPT:
                return conn_on_read(c, h, body);
        case SHOAL_MSG_PING:
                conn_send_ctrl(c, SHOAL_MSG_PONG, 0, 0, h->id, body, h->body_len);
                return true;
        case SHOAL_MSG_INFO:
                return conn_on_info(c, h);
        case SHOAL_MSG_PUT_BLOCK:
                return conn_on_put(c, h, body);
        case SHOAL_MSG_GOAWAY:
                conn_close(c);
                return false;
        default:
                /* A type valid on the wire but not from a requester (answers, handshake). */
                log_ratelimited(SHOAL_LOG_WARN, "server", "peer %s sent message type %u: closing",
                                c->peer, h->type);
                conn_close(c);
                return false;
        }
}

/* ---- reading ------------------------------------------------------------------------------- */

/* What the next frame needs: 0 when one is complete in C->in (in *H), the bytes still wanted,
 * or -1 when C was closed (a bad header or checksum). */
static int conn_frame_need(struct conn *c, struct shoal_wire_hdr *h)
{
        uint32_t body_max = c->state != C_READY ? HS_BODY_MAX : IN_MAX - SHOAL_WIRE_HDR_LEN;
        int need = shoal_wire_frame_need(c->in, c->in_len, body_max, c->state == C_READY, h);
        if (need == -EPROTO)
                log_ratelimited(SHOAL_LOG_WARN, "server", "bad frame header from %s: closing",
                                c->peer);
        else if (need == -EBADMSG)
                log_ratelimited(SHOAL_LOG_WARN, "server",
                                "frame checksum mismatch from %s: closing", c->peer);
        if (need < 0) {
                conn_close(c);
                return -1;
        }
        return need;
}

/* Reads and handles frames until the socket is empty, the connection is at its limits, or
 * READ_BUDGET frames were handled: a peer that keeps sending (frames that cost nothing to drop,
 * such as surplus CORRUPT notices) must not keep the loop from its other connections; the loop
 * is level-triggered, so the rest is read on its next round. */
static void conn_read(struct conn *c)
{
        for (unsigned handled = 0; handled < READ_BUDGET;) {
                struct shoal_wire_hdr h;
                if (c->put) {
                        if (!conn_put_payload(c))
                                return;
                        handled++;
                        continue;
                }
                int need = conn_frame_need(c, &h);
                if (need < 0)
                        return;
                if (need == 0) {
                        c->in_len = 0;
                        c->frame_start = 0;
                        if (!conn_frame(c, &h, c->in + SHOAL_WIRE_HDR_LEN))
                                return;
                        handled++;
                        continue;
                }
                if (c->state == C_READY && !conn_can_read(c)) {
                        conn_update_events(c);
                        return;
                }
                ssize_t n = recv(c->io.fd, c->in + c->in_len, (size_t)need, MSG_DONTWAIT);
                if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR))
                        conn_close(c);
                if (n <= 0)
                        return;
                if (c->in_len == 0)
                        c->frame_start = shoal_now_ns();
                c->in_len += (size_t)n;
        }
}

static void conn_event(void *arg, uint32_t events)
{
        struct conn *c = arg;
        if (c->closing)
                return; /* evicted: closed after this batch (conn_close_later) */
        c->refs++;
        if (events & (EPOLLERR | EPOLLHUP)) {
                conn_close(c);
        } else if ((events & EPOLLRDHUP) && !conn_can_read(c)) {
                /* The peer ended its stream, which closes the connection when read (its answers
                 * are never sent): do it now, so that its queued work does not start. */
                conn_close(c);
        } else {
                if ((events & EPOLLOUT) && !c->closed)
                        conn_kick_write(c);
                if ((events & (EPOLLIN | EPOLLRDHUP)) && !c->closed)
                        conn_read(c);
                if (!c->closed)
                        conn_kick_write(c);
        }
        conn_put(c);
}

/* ---- closing ------------------------------------------------------------------------------- */

static void conn_close(struct conn *c)
{
        if (c->closed)
                return;
        c->closed = true;
        atomic_store_explicit(&c->gone, true, memory_order_release);
        struct srv_loop *lp = c->lp;
        shoal_loop_del(lp->loop, &c->io);
        close(c->io.fd);
        c->io.fd = -1;
        struct shoal_list *n;
        while ((n = shoal_list_first(&c->sendq))) {
                shoal_list_del(n);
                shoal_engine_req_free(shoal_list_entry(n, struct shoal_req, link));
        }
        shoal_put_free(shoal_engine_put(lp->s->engine), c->put);
        c->put = NULL;
        shoal_list_del(&c->link);
        shoal_adm_leave(&lp->adm, &c->adm);
        __atomic_fetch_sub(&lp->s->nconns, 1, __ATOMIC_RELAXED);
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        conn_put(c); /* the loop's reference; workers may still hold theirs */
}

static void conn_close_task(void *arg)
{
        struct conn *c = arg;
        conn_close(c);
        conn_put(c);
}

/* Closes C from the handler of another connection's event. C may have an event of its own later
 * in the same batch of the loop, whose handler must not find it freed: it stops counting at once
 * and is closed (and freed) by a task that runs after the batch. */
static void conn_close_later(struct conn *c)
{
        if (c->closing || c->closed)
                return;
        c->closing = true;
        shoal_adm_leave(&c->lp->adm, &c->adm);
        c->refs++;
        c->close_task.fn = conn_close_task;
        c->close_task.arg = c;
        shoal_loop_post(c->lp->loop, &c->close_task);
}

void shoal_conn_expire(struct srv_loop *lp, uint64_t now)
{
        struct shoal_list *n, *next;
        list_for_each (n, next, &lp->conns) {
                struct conn *c = shoal_list_entry(n, struct conn, link);
                bool expired =
                        (c->deadline && now > c->deadline) ||
                        (c->frame_start && now - c->frame_start > FRAME_STALL_NS) ||
                        (!shoal_list_empty(&c->sendq) && now - c->last_progress > SEND_STALL_NS);
                if (expired) {
                        log_ratelimited(SHOAL_LOG_INFO, "server",
                                        "closing %s: handshake, frame or send deadline passed",
                                        c->peer);
                        conn_close(c);
                }
        }
}

void shoal_conn_close_all(struct srv_loop *lp)
{
        struct shoal_list *n;
        while ((n = shoal_list_first(&lp->conns)))
                conn_close(shoal_list_entry(n, struct conn, link));
}

/* ---- admission's view ---------------------------------------------------------------------- */

static struct conn *adm_conn(struct shoal_adm_ent *e)
{
        return shoal_list_entry(e, struct conn, adm);
}

/* Whether C has sent nothing yet, not even bytes still unread in its socket (or is gone). */
static bool adm_silent(struct shoal_adm_ent *e)
{
        struct conn *c = adm_conn(e);
        if (c->state != C_HELLO)
                return false;
        char b;
        return recv(c->io.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

static void adm_evict(struct shoal_adm_ent *e)
{
        conn_close_later(adm_conn(e));
}

static const char *adm_name(struct shoal_adm_ent *e)
{
        return adm_conn(e)->peer;
}

const struct shoal_adm_ops shoal_conn_adm_ops = {
        .silent = adm_silent,
        .evict = adm_evict,
        .name = adm_name,
};

/* ---- opening ------------------------------------------------------------------------------- */

int shoal_conn_open(struct srv_loop *lp, int fd, int service, const char *who,
                    struct shoal_adm_src *src)
{
        struct conn *c = calloc(1, sizeof(*c));
        uint64_t *ids = calloc(CONN_IDS, sizeof(uint64_t));
        int rc = c && ids ? 0 : -ENOMEM;
        if (c) {
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                c->ids = ids;
                c->io.fd = fd;
                c->io.fn = conn_event;
                c->io.arg = c;
                c->lp = lp;
                c->service = service;
                c->refs = 1;
                c->state = C_HELLO;
                c->deadline = shoal_now_ns() + HANDSHAKE_NS;
                c->last_progress = shoal_now_ns();
                shoal_list_init(&c->sendq);
                shoal_list_init(&c->link);
                shoal_list_init(&c->adm.link);
                shoal_strlcpy(c->peer, who, sizeof(c->peer));
        }
        if (!rc)
                rc = conn_handshake_start(c, fd);
        if (!rc)
                rc = shoal_loop_add(lp->loop, &c->io, EPOLLIN | EPOLLRDHUP);
        if (rc) {
                shoal_adm_unused(&lp->adm, src);
                close(fd);
                free(ids);
                free(c);
                return rc < 0 ? rc : -EIO;
        }
        shoal_adm_enter(&lp->adm, &c->adm, src);
        shoal_list_push_front(&lp->conns, &c->link);
        __atomic_fetch_add(&lp->s->nconns, 1, __ATOMIC_RELAXED);
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        return 0;
}
