/* The state machine of the RDMA requester's channels to one member over one interface — a
 * "link" (issue 14 findings 3 and 4, issue 15 [R5]): what to do on each event, without
 * libfabric, threads or allocation. transport/rdma_client.c feeds it the events of the real fabric
 * and backs its actions (SHOAL_RDMA_LINK_OPS); tests/unit/test_rdma_sm.c feeds it scripted orders.
 *
 * A link holds 1 to cfg.max_chans channels and the requests waiting for one of them. A channel:
 *   CONNECTING  receives posted, fi_connect under way (the owner reports FI_CONNECTED);
 *   HELLO, AUTH the handshake of wire/handshake.h (the requester proves first);
 *   READY       requests: one takes a credit (min(the member's max_inflight, receives - 2))
 *               until its answer arrived and a send buffer until its send completed — on verbs
 *               the send completes only when the member acknowledged it, which may be after
 *               the answer, so the two are counted apart; one send buffer is kept for the
 *               heartbeat (a PING every cfg.hb_ns; three periods without an answer fail it).
 * A request is sent on one channel, never split: a random idle one, else a random one with a
 * free credit and send buffer. Whenever a credit or a send buffer comes back, waiting requests
 * are sent; one that waited until its wait_until (cfg.wait_ns, or its deadline if sooner)
 * returns -ENOTCONN (its caller reads it over TCP) without failing the member.
 *
 * Failures: a READY channel that breaks (error, FI_SHUTDOWN, bad answer, heartbeat, a request
 * past its deadline) or the only channel failing to connect asks the owner to fail the member
 * (ops->fail), which fails every link of it (shoal_rdma_link_fail): in-flight and waiting
 * requests return -ENOTCONN. A channel added for load that fails to connect is just dropped.
 *
 * Scaling [R5], per link, the seeds' rule: every cfg.grow_ns, one more channel when any carried
 * more than cfg.grow_bytes/s or cfg.grow_qps over that period; every cfg.shrink_ns, when every
 * channel stayed under cfg.shrink_bytes/s and cfg.shrink_qps, channels beyond what the total load
 * needs are drained (no new requests; shut down once idle). Never below one. */
#ifndef SHOAL_RPC_RDMA_CHAN_H
#define SHOAL_RPC_RDMA_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "common/list.h"
#include "net/fabric.h"
#include "wire/handshake.h"
#include "wire/wire.h"

#define SHOAL_RDMA_CHANS_MAX 8
#define SHOAL_RDMA_RESP_MAX  (28 + 4 * SHOAL_MAX_CHUNKS)

struct shoal_rdma_chan;
struct shoal_rdma_link;

/* A request, owned by its caller, who gets it back through ops->complete exactly once. */
struct shoal_rdma_creq {
        uint8_t type; /* SHOAL_MSG_READ or SHOAL_MSG_PING */
        uint16_t flags;
        const uint8_t *body; /* encoded by the caller (a READ names its registered buffer) */
        size_t body_len;
        uint32_t len;      /* payload bytes it asks for (load measurement) */
        uint64_t id;       /* unique among the client's requests */
        uint64_t deadline; /* answered by then, or the member is failed */
        /* the link's */
        uint64_t wait_until;
        struct shoal_rdma_chan *ch; /* carrying it */
        struct shoal_list wait;     /* in its link's waiting list */
        /* the answer, when completed with 0 */
        struct shoal_wire_hdr h;
        uint8_t resp[SHOAL_RDMA_RESP_MAX];
};

/* A receive or send buffer of a channel. */
struct shoal_rdma_cbuf {
        struct shoal_fab_op op; /* first; op.owner = this */
        struct shoal_rdma_chan *ch;
        char *data; /* SHOAL_FAB_MSG_SLOT bytes, registered */
        void *desc;
        bool posted;
        struct shoal_rdma_cbuf *next;
};

enum shoal_rdma_chan_state {
        SHOAL_RDMA_CHAN_CONNECTING,
        SHOAL_RDMA_CHAN_HELLO,
        SHOAL_RDMA_CHAN_AUTH,
        SHOAL_RDMA_CHAN_READY,
};

struct shoal_rdma_chan {
        struct shoal_rdma_link *link;
        enum shoal_rdma_chan_state state;
        bool broken, draining, ep_closed;
        int posted; /* receives and sends whose completion was not read */
        unsigned credits, inflight;
        /* filled by the owner before shoal_rdma_link_add: NRX receives, NSB send buffers, and
         * NRX slots for requests in flight */
        struct shoal_rdma_cbuf *rx, *sb;
        unsigned nrx, nsb;
        struct shoal_rdma_creq **slots;
        struct shoal_rdma_cbuf *sb_free;
        unsigned nsb_free;
        struct shoal_hs hs;
        bool ping_out;
        uint64_t ping_id, deadline, last_rx, last_ping, broken_at;
        uint64_t win_bytes, win_ops, long_bytes, long_ops; /* answered, for scaling */
        char addr[64]; /* the member's listener it dials ("ip:port") */
        void *owner;
};

/* The actions, backed by libfabric in rdma_client.c (ENV its context). Posts return 0,
 * -FI_EAGAIN (retried after the next completion or tick) or another negative error. */
struct shoal_rdma_link_ops {
        int (*post_rx)(void *env, struct shoal_rdma_chan *ch, struct shoal_rdma_cbuf *b);
        int (*post_send)(void *env, struct shoal_rdma_chan *ch, struct shoal_rdma_cbuf *b,
                         size_t len);
        /* fi_shutdown; CH is off its link from now on and the owner frees it once
         * shoal_rdma_chan_can_free says so */
        void (*shutdown)(void *env, struct shoal_rdma_chan *ch);
        /* R comes back to its caller: 0 (answer in R->h, R->resp) or -ENOTCONN */
        void (*complete)(void *env, struct shoal_rdma_creq *r, int rc);
        /* start opening one more channel for L; it comes back through shoal_rdma_link_add,
         * or shoal_rdma_link_grow_failed. Returns 0 or a negative errno. */
        int (*grow)(void *env, struct shoal_rdma_link *l);
        /* a channel of L failed: the owner fails the member (every link, shoal_rdma_link_fail) */
        void (*fail)(void *env, struct shoal_rdma_link *l, const char *why, uint64_t now);
        /* CH finished its handshake */
        void (*ready)(void *env, struct shoal_rdma_chan *ch);
        uint64_t (*new_id)(void *env);
        uint64_t (*rand)(void *env);
};

struct shoal_rdma_link_config {
        const struct shoal_hs_key *key; /* group secret's key (NULL or unset: none) */
        uint64_t hb_ns;                 /* heartbeat period */
        uint64_t connect_ns;            /* connect and handshake deadline */
        uint64_t wait_ns;               /* longest wait for a credit */
        unsigned max_chans;             /* 1..SHOAL_RDMA_CHANS_MAX */
        uint64_t grow_ns, shrink_ns;    /* scaling periods */
        uint64_t grow_bytes, grow_qps, shrink_bytes, shrink_qps; /* per second */
        /* A refused connection of the link's only channel is tried again after a pause from
         * refused_pause_ns, doubling, jittered, for refused_ns from the first refusal; then
         * (or with either 0) it fails the member. */
        uint64_t refused_pause_ns, refused_ns;
};

struct shoal_rdma_link {
        const struct shoal_rdma_link_ops *ops;
        void *env;
        struct shoal_rdma_link_config cfg;
        struct shoal_rdma_chan *chans[SHOAL_RDMA_CHANS_MAX]; /* not broken */
        unsigned nchans;
        struct shoal_list waiting; /* struct shoal_rdma_creq, oldest first */
        unsigned nwaiting;
        bool growing;
        uint64_t next_grow, next_shrink;
        uint64_t retry_at; /* when to try a refused connection again; 0: none due */
        uint64_t refused_since;
        unsigned refusals; /* refused connections in a row */
};

/* Sets L up (no channel). */
void shoal_rdma_link_init(struct shoal_rdma_link *l, const struct shoal_rdma_link_ops *ops,
                          void *env, const struct shoal_rdma_link_config *cfg, uint64_t now);
/* CH (zeroed by the owner but for rx, sb, nrx, nsb, slots, addr, owner; its endpoint bound)
 * joins L in CONNECTING: its receives are posted. Returns 0, -ENOSPC when L has its most
 * channels, or a post's error (CH is then not on L; nothing of it is posted unless
 * CH->posted says so). */
int shoal_rdma_link_add(struct shoal_rdma_link *l, struct shoal_rdma_chan *ch, uint64_t now);
/* The channel asked for by ops->grow could not be opened. */
void shoal_rdma_link_grow_failed(struct shoal_rdma_link *l);
/* R waits on L for a channel (sent at once when one has room). */
void shoal_rdma_link_submit(struct shoal_rdma_link *l, struct shoal_rdma_creq *r, uint64_t now);
/* Heartbeats, deadlines, waiting requests, scaling. */
void shoal_rdma_link_tick(struct shoal_rdma_link *l, uint64_t now);
/* Shuts every channel of L down and returns in-flight and waiting requests with -ENOTCONN. */
void shoal_rdma_link_fail(struct shoal_rdma_link *l, uint64_t now);
/* Channels of L that finished their handshake and take requests. */
unsigned shoal_rdma_link_ready(const struct shoal_rdma_link *l);

/* Events of a channel. */
void shoal_rdma_chan_connected(struct shoal_rdma_chan *ch, uint64_t now);
void shoal_rdma_chan_completion(struct shoal_rdma_chan *ch, struct shoal_fab_op *op, size_t len,
                                int err, uint64_t now);
/* An EQ error, FI_SHUTDOWN, or fi_connect failing, with a reason for the log. */
void shoal_rdma_chan_error(struct shoal_rdma_chan *ch, const char *why, uint64_t now);
/* The member refused CH's connection (ECONNREFUSED: its limits, or nobody listening). The
 * link's only channel, not connected yet, is dropped and tried again (shoal_rdma_link_retry)
 * while the refusals stay within cfg.refused_ns; otherwise as shoal_rdma_chan_error. Requests
 * keep waiting meanwhile (and go by TCP after cfg.wait_ns, the member not failed). */
void shoal_rdma_chan_refused(struct shoal_rdma_chan *ch, const char *why, uint64_t now);
/* Asks for the channel of a refused connection once its pause is over (ops->grow; a failure
 * there fails the member). Returns whether it asked. */
bool shoal_rdma_link_retry(struct shoal_rdma_link *l, uint64_t now);
/* The owner closed CH's endpoint (after it was shut down). */
void shoal_rdma_chan_ep_closed(struct shoal_rdma_chan *ch);
/* True when the owner may free CH: shut down, endpoint closed, nothing posted. */
bool shoal_rdma_chan_can_free(const struct shoal_rdma_chan *ch);

#endif
