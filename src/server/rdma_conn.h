/* The state machine of one IORPC-over-RDMA connection on a member (issue 14 findings 1 and 3,
 * issue 11 finding 5): what to do on each event of a connection, without libfabric, the clock or
 * allocation. server/rdma_server.c feeds it the events of the real fabric and backs its actions
 * (SHOAL_RDMA_CONN_OPS) with libfabric and the request engine; tests/unit/test_rdma_sm.c feeds it
 * scripted event orders (a receive before FI_CONNECTED, FI_SHUTDOWN twice, flushed completions in
 * any order, late send completions under full load).
 *
 * Life of a connection:
 *   ACCEPTING  two receives and two send buffers lent by the interface's pre-authentication
 *              pool (registered once), nothing of its own registered. FI_CONNECTED, or the
 *              first received message (verbs can report the HELLO before FI_CONNECTED), starts
 *   HANDSHAKE  the handshake of wire/handshake.h, answered from the pool's send buffers. Only
 *              once the requester proved the secret (or, without one, sent its HELLO) is the
 *              connection's own region registered (UPGRADE) and its receives posted, and only
 *              then the last handshake frame sent:
 *   READY      READ and PING requests, at most max_inflight + 2 at once (the requester keeps
 *              max_inflight, announced in HELLO_ACK, plus one heartbeat). A request takes a
 *              request slot until its answer is posted; the answer takes a send buffer until its
 *              send completes. Send buffers are 2 * max_inflight + 4, and an answer that finds
 *              none waits in order (as one whose post met a full queue) — a send completion
 *              that comes after the requester already saw the answer and sent its next request
 *              never breaks the connection.
 *   broken     any error, FI_SHUTDOWN, a protocol violation or a deadline: shut down once; every
 *              posted operation still comes back (completed or flushed) and is only counted;
 *              the owner closes the endpoint when nothing is posted (or after a drain time) and
 *              frees the connection when shoal_rdma_conn_can_free says so.
 *
 * An answer's payload is RMA-written without a completion and its READ_RESP sent after it on the
 * same endpoint (FI_ORDER_SAW): one completion per answer, and the write is over when the send
 * completed. */
#ifndef SHOAL_RPC_RDMA_CONN_H
#define SHOAL_RPC_RDMA_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "net/fabric.h"
#include "wire/handshake.h"
#include "server/server.h"
#include "wire/wire.h"

#define SHOAL_RDMA_CONN_HS_NS   (2 * SHOAL_NS_PER_SEC)  /* handshake deadline from accept */
#define SHOAL_RDMA_CONN_IDLE_NS (15 * SHOAL_NS_PER_SEC) /* requesters ping every second */

struct shoal_rdma_conn;

/* A message buffer the machine posts: a receive or a send buffer. */
struct shoal_rdma_buf {
        struct shoal_fab_op op;  /* first; op.owner = this; kind RX or SEND */
        struct shoal_fab_op wop; /* send buffers: the write posted before the send */
        struct shoal_rdma_conn *c;
        char *data; /* SHOAL_FAB_MSG_SLOT bytes, registered */
        void *desc;
        bool pooled;  /* lent by the pre-authentication pool: goes back, never reposted */
        bool posted;  /* counted in c->posted */
        bool wposted; /* its write is posted (its send not yet) */
        /* held until the send completed, i.e. until the write before it is over */
        struct shoal_server_answer *a;
        void *testbuf;
        uint64_t t_post;
        uint32_t wlen;
        struct shoal_rdma_buf *next;
};

enum shoal_rdma_req_kind {
        SHOAL_RDMA_RQ_READ,
        SHOAL_RDMA_RQ_PING,
        SHOAL_RDMA_RQ_ERROR, /* a refused READ: answered by an ERROR frame */
};

/* A request slot: from the request's arrival until its answer is posted. */
struct shoal_rdma_req {
        struct shoal_rdma_conn *c; /* set by the owner at upgrade; kept */
        uint64_t id, raddr, rkey;
        uint8_t kind;
        bool busy, in_engine;
        uint32_t status;
        char why[128];
        struct shoal_server_answer *a; /* the engine's answer, once back */
        struct shoal_rdma_buf *sb;     /* its write is posted, its send was refused for now */
        uint8_t body[SHOAL_RDMA_PING_BODY];
        uint32_t body_len;
        struct shoal_rdma_req *next; /* free list or the queue of answers to send */
};

/* The actions, backed by libfabric and the engine in rdma_server.c (ENV is its context). Posts
 * return 0, -FI_EAGAIN (queue full for now: the machine retries after the next completion or
 * tick) or another negative error (the machine breaks the connection). */
struct shoal_rdma_conn_ops {
        int (*post_rx)(void *env, struct shoal_rdma_conn *c, struct shoal_rdma_buf *b);
        int (*post_send)(void *env, struct shoal_rdma_conn *c, struct shoal_rdma_buf *b,
                         size_t len);
        /* an RMA write of [DATA, DATA+LEN) (an answer or a test buffer) without completion */
        int (*post_write)(void *env, struct shoal_rdma_conn *c, struct shoal_rdma_buf *b,
                          const void *data, size_t len, uint64_t raddr, uint64_t rkey);
        void (*shutdown)(void *env, struct shoal_rdma_conn *c);
        /* Registers the connection's own region and fills c->rx/nrx, c->sb/nsb and
         * c->req/nreq (nrx >= max_inflight + 2, nreq = max_inflight + 2, nsb >= 2). Returns 0
         * or a negative errno (the connection is then closed). */
        int (*upgrade)(void *env, struct shoal_rdma_conn *c);
        /* Hands READ (header H, BODY) to the request engine; its answer comes back through
         * shoal_rdma_conn_answer(c, RQ, ...). Returns 0, or a negative errno with *STATUS and
         * WHY for an ERROR answer at once. */
        int (*submit)(void *env, struct shoal_rdma_conn *c, struct shoal_rdma_req *rq,
                      const struct shoal_wire_hdr *h, const uint8_t *body, uint32_t *status,
                      char *why, size_t whylen);
        void (*answer_done)(void *env, struct shoal_server_answer *a);
        /* A registered buffer of SHOAL_RDMA_WTEST_MAX bytes for the write test, or NULL. */
        void *(*wtest_get)(void *env);
        void (*wtest_put)(void *env, void *buf);
        /* A pre-authentication pool buffer is done (completed or flushed). */
        void (*pool_put)(void *env, struct shoal_rdma_buf *b);
};

enum shoal_rdma_conn_state {
        SHOAL_RDMA_CONN_ACCEPTING,
        SHOAL_RDMA_CONN_HANDSHAKE,
        SHOAL_RDMA_CONN_READY,
};

struct shoal_rdma_conn {
        const struct shoal_rdma_conn_ops *ops;
        void *env;
        enum shoal_rdma_conn_state state;
        bool broken, ep_closed;
        const char *why;       /* why it broke (a constant) */
        int posted;            /* receives and sends posted whose completion was not read */
        unsigned sends_out;    /* of those, sends */
        unsigned idle_eagains; /* -FI_EAGAIN in a row with no send posted (see below) */
        unsigned refs;         /* requests inside the engine */
        uint32_t max_inflight;
        size_t max_write; /* largest RMA write the provider takes */
        unsigned iface;   /* position of its interface in --rdma-network (metrics) */
        uint64_t deadline, last_rx, broken_at;
        struct shoal_hs hs;
        struct shoal_hs_config hsc;     /* kept for the start of the handshake */
        struct shoal_rdma_buf *pool[4]; /* lent: two receives, two send buffers (NULL: back) */
        /* own region, after the upgrade */
        struct shoal_rdma_buf *rx, *sb, *sb_free;
        unsigned nrx, nsb;
        struct shoal_rdma_req *req, *req_free;
        unsigned nreq;
        struct shoal_rdma_req *ready, *ready_tail; /* answers waiting to be posted, in order */
        char peer[64];
};

/* An answer refused with -FI_EAGAIN while none of C's sends is out waits for nothing: verbs
 * turns every ibv_post_send failure into -FI_EAGAIN (a QP in error, a bad descriptor), and no
 * completion will make room. That many in a row break the connection instead of holding the
 * requester until its deadline. */
#define SHOAL_RDMA_IDLE_EAGAIN_MAX 10

/* Sets C up in ACCEPTING for a connection request (no I/O): the handshake as HSC says (copied;
 * strings it points to must outlive C), announcing MAX_INFLIGHT; writes of at most MAX_WRITE
 * bytes; handshake deadline NOW + SHOAL_RDMA_CONN_HS_NS. */
void shoal_rdma_conn_init(struct shoal_rdma_conn *c, const struct shoal_rdma_conn_ops *ops,
                          void *env, const struct shoal_hs_config *hsc, uint32_t max_inflight,
                          size_t max_write, uint64_t now);
/* Takes the pool's buffers POOL[0..1] (receives) and POOL[2..3] (send buffers) and posts the two
 * receives: call before fi_accept. Returns 0 or the failed post's error (C is then broken). */
int shoal_rdma_conn_start(struct shoal_rdma_conn *c, struct shoal_rdma_buf *pool[4]);

/* Events. */
void shoal_rdma_conn_connected(struct shoal_rdma_conn *c, uint64_t now);
/* A completion (ERR 0) or an error completion (ERR > 0, e.g. FI_ECANCELED for a flush) of OP,
 * one of C's receives, sends or writes; LEN the received length. */
void shoal_rdma_conn_completion(struct shoal_rdma_conn *c, struct shoal_fab_op *op, size_t len,
                                int err, uint64_t now);
/* The engine answered request RQ (on the progress thread). */
void shoal_rdma_conn_answer(struct shoal_rdma_conn *c, struct shoal_rdma_req *rq,
                            struct shoal_server_answer *a, uint64_t now);
/* Breaks C (FI_SHUTDOWN, an EQ error, the server stopping): shuts it down once. */
void shoal_rdma_conn_break(struct shoal_rdma_conn *c, const char *why, uint64_t now);
/* Deadlines (handshake, idle) and answers waiting for a retry. */
void shoal_rdma_conn_tick(struct shoal_rdma_conn *c, uint64_t now);
/* The owner closed C's endpoint: whatever is not reported by now never will be, and no buffer
 * is touched any more; what the send buffers still held is given back. */
void shoal_rdma_conn_ep_closed(struct shoal_rdma_conn *c);

/* True while C counts as not authenticated (toward the pre-authentication limits). */
bool shoal_rdma_conn_preauth(const struct shoal_rdma_conn *c);
/* True when the owner may free C: broken, endpoint closed, nothing posted, nothing in the
 * engine. */
bool shoal_rdma_conn_can_free(const struct shoal_rdma_conn *c);

#endif
