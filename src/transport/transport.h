/* One requester transport interface (SPDK's nvmf_transport.h, Valkey's connection.h): the TCP
 * pool, IORPC on TCP and IORPC on RDMA each fill a struct shoal_transport_ops, and the selector
 * (transport/select.c) walks an ordered list of them for a member with one fallback rule:
 *
 *   a transport that answers -ENOTCONN or -ENOPROTOOPT cannot carry the request to that member
 *   now, and the next transport in the list is asked; any other result is the answer.
 *
 * Member avoidance, deadlines, the loopback rule for a client without a secret and the metrics
 * live in the selector alone; a transport only moves bytes and checks them. A transport embeds
 * struct shoal_transport as its first member. Every member is thread-safe. */
#ifndef SHOAL_TRANSPORT_TRANSPORT_H
#define SHOAL_TRANSPORT_TRANSPORT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/block.h"
#include "common/secret.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "wire/wire.h"

/* Where a request goes: the member as the view lists it, and its IORPC address as the selector
 * resolved it ("" when it has none or the selector did not look it up). */
struct shoal_route {
        const struct shoal_member *m;
        const char *iorpc_addr;
};

/* A read of [off, off+len) of block INDEX of OBJ (chunk-aligned) into DST. */
struct shoal_read_req {
        const struct shoal_volume *vol;
        const struct shoal_object *obj;
        uint32_t index, off, len;
        void *dst;
        uint64_t view_version;
        uint64_t deadline; /* monotonic ns */
};

/* A PUT_BLOCK of block INDEX of OBJ (committed) with PAYLOAD (CRCs then bytes, as
 * shoal_put_payload_crcs of transport/put_client.h leaves it). */
struct shoal_put_req {
        const struct shoal_volume *vol;
        const struct shoal_object *obj;
        uint32_t index;
        const uint8_t *payload;
        uint64_t view_version;
        uint64_t deadline; /* monotonic ns */
        uint32_t status;   /* out: the member's status when put returns -EREMOTEIO */
};

struct shoal_transport;

struct shoal_transport_ops {
        const char *name; /* "rdma", "iorpc", "pool": for logs */
        /* Counted with remotecache_get_bytes for each byte this transport read. */
        enum shoal_metric_id bytes_metric;
        /* The selector resolves the member's IORPC address (INFO over the pool [R6]) before
         * calling read: only a transport that uses it sets this. */
        bool wants_iorpc_addr;
        /* Reads RQ from TO into RQ->dst, every chunk CRC verified before 0 is returned.
         * -ENOTCONN/-ENOPROTOOPT: cannot carry it now (RDMA: not connected, or a payload that
         * failed its checksum, re-issued over TCP [M4]; IORPC: no IORPC address); else 0 or the
         * errno of transport/select.h's shoal_remote_read. */
        int (*read)(struct shoal_transport *t, const struct shoal_route *to,
                    struct shoal_read_req *rq);
        /* Sends the PUT_BLOCK RQ to TO over a connection whose handshake proved TO->m's id, and
         * waits for its answer: 0, -EREMOTEIO with RQ->status, or a connection error. NULL, or
         * -ENOPROTOOPT: cannot carry it (the next transport is asked). */
        int (*put)(struct shoal_transport *t, const struct shoal_route *to,
                   struct shoal_put_req *rq);
        /* Asks TO for its service addresses [R6]: 0, -ENOPROTOOPT ("rpc disabled") or another
         * negative errno. NULL: not offered. */
        int (*info)(struct shoal_transport *t, const struct shoal_route *to,
                    struct shoal_wire_info *info, uint64_t deadline);
        /* Open connections (or RDMA channels) to TO, or -ENOTCONN when reads to TO would not go
         * over this transport now (without asking the member anything). */
        int (*conns)(struct shoal_transport *t, const struct shoal_route *to);
        /* Requests to TO in flight over this transport now (load-aware reads, issue 29). */
        unsigned (*inflight)(struct shoal_transport *t, const struct shoal_route *to);
        /* Frees T and what it owns (NULL-safe in the caller). */
        void (*destroy)(struct shoal_transport *t);
};

struct shoal_transport {
        const struct shoal_transport_ops *ops;
};

/* The TCP pool [T1] (reads, puts and INFO on the member's pool port). NULL when out of memory
 * or randomness, or SECRET is too short. */
struct shoal_transport *shoal_transport_pool_create(const struct shoal_secret *secret,
                                                    unsigned idle_per_peer);
/* IORPC on TCP [R3]: reads when READS (multiplexed, scaled connections), and puts to the
 * member's IORPC port (stop and wait) either way. */
struct shoal_transport *shoal_transport_iorpc_create(const struct shoal_secret *secret, bool reads);
struct shoal_rdma_client;
/* IORPC on RDMA [M2] over C (owned by the caller; it outlives the transport). Reads only. */
struct shoal_transport *shoal_transport_rdma_create(struct shoal_rdma_client *c);

#endif
