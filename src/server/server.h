/* The server side of a sharing member: the TCP pool listener [T1, T2] and the IORPC listener
 * [R1, R2, R4], on a small set of event-loop threads. A request names a block by (object key,
 * version, size, index) and a chunk-aligned range; the server derives the block id itself, answers
 * a cache hit from the cache file (sendfile, O_DIRECT, buffered or splice by mode) and a miss
 * through the reader's single-flight fill from the object store. */
#ifndef SHOAL_RPC_SERVER_H
#define SHOAL_RPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "common/secret.h"
#include "server/mode.h"

struct shoal_reader;
struct shoal_cache;
struct shoal_group;

struct shoal_server_config {
        const struct shoal_volume *vol;
        struct shoal_reader *reader; /* miss fill (single flight) */
        struct shoal_cache *cache;   /* hits */
        const char *listen_ip;       /* IPv4 address to bind */
        uint16_t tcp_port;           /* TCP pool port; 0 = chosen by the system */
        bool cache_try_dio;          /* TCP pool answers by O_DIRECT read + send */
        int iorpc_mode;              /* enum shoal_iorpc_mode */
        struct shoal_secret secret;  /* group secret (len 0: none, loopback only); only the
                                        key derived from it is kept */
        const char *member_id;       /* this member's id, bound into the handshake proofs */
        unsigned threads;            /* event-loop threads (0: one per core, at most 8) */
        unsigned max_inflight;       /* per server (IORPC), default 2048 [R4] */
        bool rdma;                   /* RDMA is on: splice falls back to dio [M7] */
};

struct shoal_server;

/* Binds and starts serving. Refuses (with a line in ERR starting "refusing") to listen beyond
 * loopback without a secret [S1], and a secret shorter than SHOAL_SECRET_MIN. NULL on failure. */
struct shoal_server *shoal_server_start(const struct shoal_server_config *cfg, char *err,
                                        size_t errlen);
/* Tells the server the group (for ownership checks); may be called once after start. */
void shoal_server_set_group(struct shoal_server *s, struct shoal_group *g);
/* The bound addresses "ip:port" (IORPC empty when disabled). */
void shoal_server_addrs(const struct shoal_server *s, char tcp[64], char iorpc[64]);
void shoal_server_stop(struct shoal_server *s);

/* ---- hooks for IORPC over RDMA (server/rdma_server.c) ---- */

/* An answer to a READ submitted by shoal_server_submit_rdma. */
struct shoal_server_answer {
        const uint8_t *frame; /* READ_RESP (flag RDMA_WRITTEN, payload_len 0) or ERROR */
        size_t frame_len;     /* header + body */
        const char *data;     /* READ_RESP: LEN payload bytes inside shoal_server_dio_region,
                                 or shoal_server_held_region once RDMA takes it */
        uint32_t len;
        uint32_t status; /* 0 or the ERROR status */
        void *ref;       /* internal */
};

/* Called once per submitted READ, on a worker thread: must only hand A to another thread. */
typedef void (*shoal_server_answer_fn)(void *arg, struct shoal_server_answer *a);

/* Runs the READ frame (ID, FLAGS, BODY of BODY_LEN bytes) that arrived on an RDMA connection
 * through the server's request engine (cache read, single-flight fill, processing cap [R4]); the
 * payload of an OK answer is in a buffer of the server's dio pool, or (after
 * shoal_server_rdma_held_direct) in a block held by the reader, so registering
 * shoal_server_dio_region and shoal_server_held_region covers every answer. Returns 0 (FN(ARG,
 * answer) follows exactly once), or a negative errno with a reason in WHY when the request is
 * refused at once (-EPROTO: malformed body, -EXDEV: another block size, -ENOMEM); *STATUS then
 * holds the ERROR status. GONE (NULL: never) is the requester's connection's "closed" flag, read
 * by worker threads until FN ran: once it is set, work not started yet is dropped (FN then gets
 * an ERROR answer), as for a closed TCP connection; it must outlive the request. */
int shoal_server_submit_rdma(struct shoal_server *s, uint64_t id, uint16_t flags,
                             const uint8_t *body, size_t body_len, shoal_server_answer_fn fn,
                             void *arg, const _Atomic bool *gone, uint32_t *status, char *why,
                             size_t whylen);
/* Gives the answer's buffer and processing slot back; A is invalid afterwards. Any thread. */
void shoal_server_answer_done(struct shoal_server *s, struct shoal_server_answer *a);
/* Base and length of the dio pool mapping (to register for RDMA once). */
void *shoal_server_dio_region(struct shoal_server *s, size_t *len);
/* Base and length of the reader's block buffers, where blocks held in memory live. */
void *shoal_server_held_region(struct shoal_server *s, size_t *len);
/* From now on an answer's payload may also lie in shoal_server_held_region (registered by the
 * caller on every RDMA interface): a held block is written from there, not copied. */
void shoal_server_rdma_held_direct(struct shoal_server *s);
/* A dio buffer (waiting up to TIMEOUT_NS) and its release, for `shoal ping`'s write test. */
void *shoal_server_dio_get(struct shoal_server *s, uint64_t timeout_ns);
void shoal_server_dio_put(struct shoal_server *s, void *buf);
/* The RDMA listener addresses INFO_RESP lists [R6]. Call once, before clients connect. */
void shoal_server_set_rdma_addrs(struct shoal_server *s, char addrs[][64], unsigned n);

#endif
