/* The member's RDMA connection as a state machine. See rdma_conn.h. */
#include "server/rdma_conn.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "metrics/metrics.h"

enum post_result {
        POSTED,
        WAIT, /* no send buffer or a full queue: retried after the next completion or tick */
        BROKE,
};

static void req_put(struct shoal_rdma_conn *c, struct shoal_rdma_req *rq)
{
        rq->busy = false;
        rq->a = NULL;
        rq->sb = NULL;
        rq->next = c->req_free;
        c->req_free = rq;
}

static struct shoal_rdma_req *req_get(struct shoal_rdma_conn *c)
{
        struct shoal_rdma_req *rq = c->req_free;
        if (!rq)
                return NULL;
        c->req_free = rq->next;
        struct shoal_rdma_conn *owner = rq->c;
        memset(rq, 0, sizeof(*rq));
        rq->c = owner;
        rq->busy = true;
        return rq;
}

/* Gives back what send buffer B held for its answer (the write before it is over, or the
 * endpoint is closed). */
static void sb_release(struct shoal_rdma_conn *c, struct shoal_rdma_buf *b)
{
        if (b->a) {
                c->ops->answer_done(c->env, b->a);
                b->a = NULL;
        }
        if (b->testbuf) {
                c->ops->wtest_put(c->env, b->testbuf);
                b->testbuf = NULL;
        }
        b->wposted = false;
        b->wlen = 0;
}

static void sb_put(struct shoal_rdma_conn *c, struct shoal_rdma_buf *b)
{
        sb_release(c, b);
        b->next = c->sb_free;
        c->sb_free = b;
}

static struct shoal_rdma_buf *sb_get(struct shoal_rdma_conn *c)
{
        struct shoal_rdma_buf *b = c->sb_free;
        if (b)
                c->sb_free = b->next;
        return b;
}

static void pool_give_back(struct shoal_rdma_conn *c, struct shoal_rdma_buf *b)
{
        for (int i = 0; i < 4; i++)
                if (c->pool[i] == b)
                        c->pool[i] = NULL;
        b->c = NULL;
        c->ops->pool_put(c->env, b);
}

/* A request whose answer will not be sent: what it holds goes back, except an answer whose
 * write is already posted (its buffer stays with the send buffer until the endpoint closes). */
static void req_drop(struct shoal_rdma_conn *c, struct shoal_rdma_req *rq)
{
        if (rq->sb) {
                rq->sb->a = rq->a;
        } else if (rq->a) {
                c->ops->answer_done(c->env, rq->a);
        }
        req_put(c, rq);
}

static void conn_break(struct shoal_rdma_conn *c, const char *why, uint64_t now)
{
        if (c->broken)
                return;
        c->broken = true;
        c->why = why;
        c->broken_at = now;
        log_debug("rdma", "server: closing %s: %s", c->peer, why);
        c->ops->shutdown(c->env, c);
        while (c->ready) {
                struct shoal_rdma_req *rq = c->ready;
                c->ready = rq->next;
                req_drop(c, rq);
        }
        c->ready_tail = NULL;
}

void shoal_rdma_conn_break(struct shoal_rdma_conn *c, const char *why, uint64_t now)
{
        conn_break(c, why, now);
}

/* conn_break for an error (not a close, a flush or a deadline): the first error of a connection
 * is what an operator needs, so it is a warning; a connection breaks once, so later ones are not
 * logged. */
static void conn_fail(struct shoal_rdma_conn *c, const char *why, uint64_t now)
{
        if (!c->broken)
                log_ratelimited(SHOAL_LOG_WARN, "rdma", "server: connection from %s broken: %s",
                                c->peer, why);
        conn_break(c, why, now);
}

void shoal_rdma_conn_init(struct shoal_rdma_conn *c, const struct shoal_rdma_conn_ops *ops,
                          void *env, const struct shoal_hs_config *hsc, uint32_t max_inflight,
                          size_t max_write, uint64_t now)
{
        memset(c, 0, sizeof(*c));
        c->ops = ops;
        c->env = env;
        c->hsc = *hsc;
        c->hsc.max_inflight = max_inflight;
        c->max_inflight = max_inflight;
        c->max_write = max_write;
        c->deadline = now + SHOAL_RDMA_CONN_HS_NS;
        c->last_rx = now;
        snprintf(c->peer, sizeof(c->peer), "?");
}

static bool post_rx(struct shoal_rdma_conn *c, struct shoal_rdma_buf *b, uint64_t now)
{
        int rc = c->ops->post_rx(c->env, c, b);
        if (rc) {
                conn_fail(c, "cannot post a receive", now);
                return false;
        }
        b->posted = true;
        c->posted++;
        return true;
}

int shoal_rdma_conn_start(struct shoal_rdma_conn *c, struct shoal_rdma_buf *pool[4])
{
        for (int i = 0; i < 4; i++) {
                c->pool[i] = pool[i];
                pool[i]->c = c;
                pool[i]->pooled = true;
                pool[i]->posted = false;
                pool[i]->op.kind = i < 2 ? SHOAL_FAB_OP_RX : SHOAL_FAB_OP_SEND;
                pool[i]->op.owner = pool[i];
        }
        for (int i = 0; i < 2; i++)
                if (!post_rx(c, pool[i], c->last_rx))
                        return -EIO;
        return 0;
}

void shoal_rdma_conn_connected(struct shoal_rdma_conn *c, uint64_t now)
{
        if (c->broken || c->state != SHOAL_RDMA_CONN_ACCEPTING)
                return; /* a late FI_CONNECTED after the first message: nothing to do */
        c->state = SHOAL_RDMA_CONN_HANDSHAKE;
        if (shoal_hs_start(&c->hs, &c->hsc))
                conn_fail(c, "cannot start the handshake (no random bytes)", now);
}

/* Sends the handshake's frame from a pool send buffer. False when it cannot. */
static bool hs_send(struct shoal_rdma_conn *c)
{
        struct shoal_rdma_buf *b = NULL;
        for (int i = 2; i < 4 && !b; i++)
                if (c->pool[i] && !c->pool[i]->posted)
                        b = c->pool[i];
        if (!b || c->hs.out_len > SHOAL_FAB_MSG_SLOT)
                return false;
        memcpy(b->data, c->hs.out, c->hs.out_len);
        if (c->ops->post_send(c->env, c, b, c->hs.out_len))
                return false;
        b->posted = true;
        c->posted++;
        c->sends_out++;
        return true;
}

/* The requester is authenticated (or there is no secret): register what the connection needs
 * of its own, post its receives, then let the last handshake frame go. */
static bool upgrade(struct shoal_rdma_conn *c, uint64_t now)
{
        if (c->ops->upgrade(c->env, c))
                return false;
        c->sb_free = NULL;
        for (unsigned i = c->nsb; i-- > 0;) {
                struct shoal_rdma_buf *b = &c->sb[i];
                b->c = c;
                b->op.kind = SHOAL_FAB_OP_SEND;
                b->op.owner = b;
                b->wop.kind = SHOAL_FAB_OP_WRITE;
                b->wop.owner = b;
                b->next = c->sb_free;
                c->sb_free = b;
        }
        c->req_free = NULL;
        for (unsigned i = c->nreq; i-- > 0;)
                req_put(c, &c->req[i]);
        for (unsigned i = 0; i < c->nrx; i++) {
                struct shoal_rdma_buf *b = &c->rx[i];
                b->c = c;
                b->op.kind = SHOAL_FAB_OP_RX;
                b->op.owner = b;
                if (!post_rx(c, b, now))
                        return false;
        }
        return true;
}

static bool handshake(struct shoal_rdma_conn *c, const struct shoal_wire_hdr *h,
                      const uint8_t *body, uint64_t now)
{
        enum shoal_hs_verdict v = shoal_hs_step(&c->hs, h, body);
        if (v == SHOAL_HS_FAIL) {
                log_ratelimited(c->hs.error == -EACCES ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "rdma",
                                "peer %s failed the handshake: %s", c->peer, c->hs.why);
                if (c->hs.out_len)
                        hs_send(c); /* the ERROR, best effort */
                return false;
        }
        if (v == SHOAL_HS_DONE) {
                if (!upgrade(c, now))
                        return false;
                c->state = SHOAL_RDMA_CONN_READY;
                c->last_rx = now;
        }
        return !c->hs.out_len || hs_send(c);
}

static void enqueue(struct shoal_rdma_conn *c, struct shoal_rdma_req *rq)
{
        rq->next = NULL;
        if (c->ready_tail)
                c->ready_tail->next = rq;
        else
                c->ready = rq;
        c->ready_tail = rq;
}

static void refuse(struct shoal_rdma_conn *c, struct shoal_rdma_req *rq, uint32_t status,
                   const char *why)
{
        rq->kind = SHOAL_RDMA_RQ_ERROR;
        rq->status = status ? status : SHOAL_ST_INTERNAL;
        snprintf(rq->why, sizeof(rq->why), "%s", why);
        enqueue(c, rq);
}

static bool on_read(struct shoal_rdma_conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        for (unsigned i = 0; i < c->nreq; i++)
                if (c->req[i].busy && c->req[i].id == h->id)
                        return false; /* an id already in flight */
        struct shoal_rdma_req *rq = req_get(c);
        if (!rq)
                return false; /* past max_inflight */
        rq->id = h->id;
        rq->kind = SHOAL_RDMA_RQ_READ;
        struct shoal_wire_read rd;
        if (shoal_wire_read_decode(body, h->body_len, &rd)) {
                refuse(c, rq, SHOAL_ST_BAD_REQUEST, "malformed read request");
                return true;
        }
        if (!(h->flags & SHOAL_WF_RDMA_TARGET)) {
                refuse(c, rq, SHOAL_ST_BAD_REQUEST, "no RDMA target on an RDMA connection");
                return true;
        }
        rq->raddr = rd.rdma_addr;
        rq->rkey = rd.rdma_key;
        rq->in_engine = true;
        c->refs++;
        uint32_t status = 0;
        char why[128] = "";
        if (c->ops->submit(c->env, c, rq, h, body, &status, why, sizeof(why))) {
                rq->in_engine = false;
                c->refs--;
                refuse(c, rq, status, why);
        }
        return true;
}

static bool on_ping(struct shoal_rdma_conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        if (h->body_len > SHOAL_RDMA_PING_BODY)
                return false;
        struct shoal_rdma_req *rq = req_get(c);
        if (!rq)
                return false;
        rq->id = h->id;
        rq->kind = SHOAL_RDMA_RQ_PING;
        memcpy(rq->body, body, h->body_len);
        rq->body_len = h->body_len;
        if (h->body_len == SHOAL_RDMA_WTEST_LEN && !memcmp(body, SHOAL_RDMA_WTEST_MAGIC, 8)) {
                memcpy(&rq->raddr, body + 8, 8);
                memcpy(&rq->rkey, body + 16, 8);
        }
        enqueue(c, rq);
        return true;
}

static bool on_message(struct shoal_rdma_conn *c, const uint8_t *msg, size_t len, uint64_t now)
{
        struct shoal_wire_hdr h;
        if (shoal_wire_msg_decode(msg, len, &h))
                return false;
        shoal_metric_add(SHOAL_M_rdma_read_bytes, len);
        const uint8_t *body = msg + SHOAL_WIRE_HDR_LEN;
        if (c->state != SHOAL_RDMA_CONN_READY)
                return handshake(c, &h, body, now);
        switch (h.type) {
        case SHOAL_MSG_READ:
                return on_read(c, &h, body);
        case SHOAL_MSG_PING:
                return on_ping(c, &h, body);
        case SHOAL_MSG_CORRUPT:
                return true; /* a notice; the block is re-verified on TCP requesters' reports */
        default:
                return false; /* GOAWAY, answers, handshake frames */
        }
}

/* `shoal ping`'s write test: a pattern of the asked length into a registered buffer. */
static void *wtest_fill(struct shoal_rdma_conn *c, const struct shoal_rdma_req *rq, uint32_t *len)
{
        uint32_t seed;
        memcpy(len, rq->body + 24, 4);
        memcpy(&seed, rq->body + 28, 4);
        if (!*len || *len > SHOAL_RDMA_WTEST_MAX)
                return NULL;
        uint8_t *p = c->ops->wtest_get(c->env);
        for (uint32_t i = 0; p && i < *len; i++)
                p[i] = (uint8_t)(seed + i * 7u + (i >> 8));
        return p;
}

/* Puts RQ's answer frame into B; *DATA, *WLEN the payload to write before it (or none).
 * Returns the frame length. */
static size_t answer_frame(struct shoal_rdma_conn *c, struct shoal_rdma_req *rq,
                           struct shoal_rdma_buf *b, const void **data, uint32_t *wlen)
{
        struct shoal_server_answer *a = rq->a;
        *data = NULL;
        *wlen = 0;
        if (rq->kind == SHOAL_RDMA_RQ_READ) {
                const char *bad = !a->status && a->len > c->max_write ? "range too large"
                                  : a->frame_len > SHOAL_FAB_MSG_SLOT ? "answer too large"
                                                                      : NULL;
                if (!bad) {
                        memcpy(b->data, a->frame, a->frame_len);
                        if (!a->status && a->len) {
                                *data = a->data;
                                *wlen = a->len;
                        }
                        if (a->status)
                                shoal_metric_inc(SHOAL_M_remotecache_serve_errors);
                        return a->frame_len;
                }
                c->ops->answer_done(c->env, a);
                rq->a = NULL;
                rq->kind = SHOAL_RDMA_RQ_ERROR;
                rq->status = SHOAL_ST_BAD_REQUEST;
                snprintf(rq->why, sizeof(rq->why), "%s", bad);
        }
        if (rq->kind == SHOAL_RDMA_RQ_PING) {
                if (rq->rkey || rq->raddr) {
                        if (!b->testbuf)
                                b->testbuf = wtest_fill(c, rq, wlen);
                        *data = b->testbuf;
                        if (!*data)
                                *wlen = 0;
                }
                return shoal_wire_frame_encode((uint8_t *)b->data, SHOAL_MSG_PONG, 0, 0, rq->id,
                                               rq->body, rq->body_len);
        }
        uint8_t body[256];
        int n = shoal_wire_error_encode(body, sizeof(body), rq->why);
        shoal_metric_inc(SHOAL_M_remotecache_serve_errors);
        return shoal_wire_frame_encode((uint8_t *)b->data, SHOAL_MSG_ERROR, 0, rq->status, rq->id,
                                       body, n > 0 ? (size_t)n : 0);
}

/* -FI_EAGAIN for an answer: WAIT for room, or BROKE when nothing of C's is out to make it. */
static enum post_result answer_eagain(struct shoal_rdma_conn *c, uint64_t now)
{
        if (c->sends_out || ++c->idle_eagains < SHOAL_RDMA_IDLE_EAGAIN_MAX)
                return WAIT;
        conn_fail(c, "the provider refuses sends on an empty send queue", now);
        return BROKE;
}

static enum post_result post_answer(struct shoal_rdma_conn *c, struct shoal_rdma_req *rq,
                                    uint64_t now)
{
        struct shoal_rdma_buf *b = rq->sb;
        if (!b && !(b = sb_get(c)))
                return WAIT;
        const void *data;
        uint32_t wlen;
        size_t flen = answer_frame(c, rq, b, &data, &wlen);
        if (data && !b->wposted) {
                int rc = c->ops->post_write(c->env, c, b, data, wlen, rq->raddr, rq->rkey);
                if (rc == -FI_EAGAIN) {
                        sb_put(c, b); /* also gives a test buffer back; it is filled again */
                        return answer_eagain(c, now);
                }
                if (rc) {
                        sb_put(c, b);
                        conn_fail(c, "cannot write", now);
                        return BROKE;
                }
                b->wposted = true;
        }
        int rc = c->ops->post_send(c->env, c, b, flen);
        if (rc == -FI_EAGAIN) {
                rq->sb = b; /* its write (if any) is out: only the send is retried */
                return answer_eagain(c, now);
        }
        if (rc) {
                if (b->wposted)
                        rq->sb = b; /* kept until the endpoint is closed */
                else
                        sb_put(c, b);
                conn_fail(c, "cannot send", now);
                return BROKE;
        }
        b->posted = true;
        c->posted++;
        c->sends_out++;
        c->idle_eagains = 0;
        b->wposted = false;
        b->a = rq->a;
        rq->a = NULL;
        b->wlen = wlen;
        b->t_post = now;
        return POSTED;
}

/* Posts waiting answers in order while send buffers and queue space last. */
static void flush(struct shoal_rdma_conn *c, uint64_t now)
{
        while (!c->broken && c->ready) {
                struct shoal_rdma_req *rq = c->ready;
                enum post_result r = post_answer(c, rq, now);
                if (r != POSTED)
                        return; /* WAIT: retried later; BROKE: the queue was dropped */
                c->ready = rq->next;
                if (!c->ready)
                        c->ready_tail = NULL;
                req_put(c, rq);
        }
}

static void served(struct shoal_rdma_conn *c, struct shoal_rdma_buf *b, uint64_t now)
{
        if (!b->a || b->a->status || !b->wlen)
                return;
        uint64_t dur = now - b->t_post;
        shoal_metric_add(SHOAL_M_rdma_write_bytes, b->wlen);
        shoal_metric_inc(SHOAL_M_rdma_write_ops);
        shoal_metric_observe(SHOAL_M_rdma_write_dur, dur);
        shoal_metric_observe(SHOAL_M_mount_iorpc_writeBodyDur, dur);
        shoal_metric_add(SHOAL_M_rdma_if0_bytes + c->iface, b->wlen);
        shoal_metric_add(SHOAL_M_remotecache_rdma_serve_bytes, b->wlen);
        shoal_metric_add(SHOAL_M_remotecache_serve_bytes, b->wlen);
        shoal_metric_inc(SHOAL_M_remotecache_serve_requests);
        shoal_metric_observe(SHOAL_M_remotecache_serve_dur, dur);
}

static void on_send_done(struct shoal_rdma_conn *c, struct shoal_rdma_buf *b, int err, uint64_t now)
{
        if (!err)
                served(c, b, now);
        if (b->pooled)
                pool_give_back(c, b);
        else
                sb_put(c, b);
        if (err)
                (err == FI_ECANCELED ? conn_break : conn_fail)(
                        c, err == FI_ECANCELED ? "send flushed" : "send failed", now);
        else
                flush(c, now);
}

static void on_recv(struct shoal_rdma_conn *c, struct shoal_rdma_buf *b, size_t len, int err,
                    uint64_t now)
{
        if (err || c->broken) {
                if (b->pooled)
                        pool_give_back(c, b);
                if (err)
                        (err == FI_ECANCELED ? conn_break : conn_fail)(
                                c, err == FI_ECANCELED ? "receive flushed" : "receive failed", now);
                return;
        }
        c->last_rx = now;
        /* Verbs may hand us the requester's first message before FI_CONNECTED (the
         * connection is established for the receiver once a message arrived). */
        if (c->state == SHOAL_RDMA_CONN_ACCEPTING)
                shoal_rdma_conn_connected(c, now);
        if (!c->broken && !on_message(c, (const uint8_t *)b->data, len, now))
                conn_fail(c, "protocol violation", now);
        if (b->pooled)
                pool_give_back(c, b);
        else if (!c->broken)
                post_rx(c, b, now);
        flush(c, now);
}

void shoal_rdma_conn_completion(struct shoal_rdma_conn *c, struct shoal_fab_op *op, size_t len,
                                int err, uint64_t now)
{
        struct shoal_rdma_buf *b = op->owner;
        if (op->kind == SHOAL_FAB_OP_WRITE) {
                /* Never counted (no completion asked); only a failure is ever reported. */
                if (err)
                        (err == FI_ECANCELED ? conn_break : conn_fail)(
                                c, err == FI_ECANCELED ? "write flushed" : "write failed", now);
                return;
        }
        if (!b->posted) {
                log_ratelimited(SHOAL_LOG_WARN, "rdma",
                                "server: %s: a completion for a buffer "
                                "that was not posted",
                                c->peer);
                conn_fail(c, "unexpected completion", now);
                return;
        }
        b->posted = false;
        c->posted--;
        if (op->kind == SHOAL_FAB_OP_SEND && c->sends_out)
                c->sends_out--;
        if (op->kind == SHOAL_FAB_OP_SEND)
                on_send_done(c, b, err, now);
        else
                on_recv(c, b, len, err, now);
}

void shoal_rdma_conn_answer(struct shoal_rdma_conn *c, struct shoal_rdma_req *rq,
                            struct shoal_server_answer *a, uint64_t now)
{
        rq->in_engine = false;
        c->refs--;
        if (c->broken) {
                c->ops->answer_done(c->env, a);
                req_put(c, rq);
                return;
        }
        rq->a = a;
        enqueue(c, rq);
        flush(c, now);
}

void shoal_rdma_conn_tick(struct shoal_rdma_conn *c, uint64_t now)
{
        if (c->broken)
                return;
        if (c->state != SHOAL_RDMA_CONN_READY && now > c->deadline)
                conn_break(c, "handshake deadline passed", now);
        else if (c->state == SHOAL_RDMA_CONN_READY && now - c->last_rx > SHOAL_RDMA_CONN_IDLE_NS)
                conn_break(c, "idle: no message or heartbeat", now);
        else
                flush(c, now);
}

void shoal_rdma_conn_ep_closed(struct shoal_rdma_conn *c)
{
        c->ep_closed = true;
        for (unsigned i = 0; i < c->nsb; i++)
                sb_release(c, &c->sb[i]);
}

bool shoal_rdma_conn_preauth(const struct shoal_rdma_conn *c)
{
        return c->state != SHOAL_RDMA_CONN_READY;
}

bool shoal_rdma_conn_can_free(const struct shoal_rdma_conn *c)
{
        return c->broken && c->ep_closed && c->posted == 0 && c->refs == 0;
}
