/* The client side of the transports: read a chunk-aligned range of a block from a group member,
 * over the TCP pool, IORPC on TCP or IORPC on RDMA, whichever the flags and the member allow.
 * Implementations verify every chunk CRC of the answer before returning success, so DST holds
 * correct bytes or the call fails. Thread-safe; calls block the calling thread until the answer,
 * an error or the deadline. */
#ifndef SHOAL_NET_REMOTE_H
#define SHOAL_NET_REMOTE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "common/secret.h"
#include "group/group.h"
#include "transport/transport.h"

struct shoal_remote;

struct shoal_remote_config {
        struct shoal_secret secret;     /* group secret (len 0: none) */
        uint64_t timeout_ns;            /* per request, connect included (0: SHOAL_REMOTE_TIMEOUT,
                                           else 10 s) */
        uint64_t avoid_ns;              /* how long a failed member is avoided (0:
                                           SHOAL_AVOID_DURATION, else 10 s) */
        unsigned idle_per_peer;         /* idle connections kept per member (default 64) */
        bool use_iorpc;                 /* --use-iorpc: IORPC where the member offers it [R3, R6] */
        struct shoal_rdma_client *rdma; /* --rdma-network: IORPC over RDMA to members that
                                           publish RDMA addresses (owned by the caller) [M2] */
};

struct shoal_remote *shoal_remote_create(const struct shoal_remote_config *cfg);
void shoal_remote_destroy(struct shoal_remote *rm);

/* Reads [OFF, OFF+LEN) of block INDEX of OBJ from member M into DST. Returns 0, or a negative
 * errno: -EREMOTEIO for an error answer (not owner, store error, ...), -ETIMEDOUT past the
 * deadline, -ECONNRESET/-ECONNREFUSED/-EPROTO for connection faults, -EBADMSG for a payload that
 * failed its checksum after retries. */
int shoal_remote_read(struct shoal_remote *rm, const struct shoal_member *m,
                      const struct shoal_volume *vol, const struct shoal_object *obj,
                      uint32_t index, uint32_t off, uint32_t len, void *dst, uint64_t view_version);

/* Sends the PUT_BLOCK RQ (RQ->deadline from shoal_remote_deadline) to member M over the first
 * transport that carries puts, under the same member avoidance as reads: an avoided member, or
 * one this client may not send to, gets -EHOSTUNREACH; a failure other than an error answer
 * (-EREMOTEIO, with RQ->status) avoids M for a while. Returns 0 or a negative errno. */
int shoal_remote_put(struct shoal_remote *rm, const struct shoal_member *m,
                     struct shoal_put_req *rq);
/* The deadline of a request started now (the configured per-request timeout). */
uint64_t shoal_remote_deadline(const struct shoal_remote *rm);

/* Requests to member M in flight now, over every transport (load-aware reads, issue 29). */
unsigned shoal_remote_inflight(struct shoal_remote *rm, const struct shoal_member *m);

/* Whether a client that holds a group secret (HAS_SECRET) may send member M anything: with one,
 * always (the handshake proves the member); without one, only when every address M publishes
 * is on loopback, since a member beyond it cannot have authenticated to a client with no
 * secret and a record naming one is a fake or a mistake [S1; issue 23]. */
bool shoal_remote_member_allowed(bool has_secret, const struct shoal_member *m);

/* Open connections to member M on the transport reads would use now (IORPC or TCP pool). */
unsigned shoal_remote_conns(struct shoal_remote *rm, const struct shoal_member *m);

/* Registers [BASE, BASE+LEN) for RDMA so that reads into it land in place (no bounce copy); a
 * no-op without RDMA. Returns 0 or a negative errno (ERR). */
int shoal_remote_register(struct shoal_remote *rm, void *base, size_t len, char *err,
                          size_t errlen);

/* Members that failed recently are avoided for a while [G5], member M as a view lists it: a
 * member that listens elsewhere than when it failed (it restarted, keeping its id) is not
 * avoided. */
bool shoal_remote_member_avoided(struct shoal_remote *rm, const struct shoal_member *m);
void shoal_remote_avoid(struct shoal_remote *rm, const char *member_id);

#endif
