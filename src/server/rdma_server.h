/* IORPC over RDMA [M1]-[M7]: libfabric FI_EP_MSG connections, one per --rdma-network interface.
 * Frames are the IORPC frames of wire/wire.h, one frame per message (fi_send); a READ names the
 * requester's registered buffer and the server RMA-writes the payload there before it sends the
 * READ_RESP (flag RDMA_WRITTEN, no payload). docs/rdma.md explains the design and operation.
 *
 * Each side runs one progress thread that makes every libfabric call of that side: it sleeps in
 * epoll on the EQ and CQ wait fds (after fi_trywait) and an eventfd for work from other threads,
 * and polls the CQs (the tcp provider moves data only inside fi_cq_read). */
#ifndef SHOAL_SERVER_RDMA_SERVER_H
#define SHOAL_SERVER_RDMA_SERVER_H

#include <stddef.h>
#include <stdint.h>

#include "common/secret.h"
#include "net/fabric.h"

struct shoal_server;

/* ---- server ---- */

struct shoal_rdma_server;

/* Listens for RDMA on each of the N_IF interfaces IFACES through PROVIDER (port chosen by the
 * system), registering the server's answer buffers once per interface; requests run through
 * SRV's request engine (shoal_server_submit_rdma). SECRET (NULL or empty: none) gates every
 * connection as on TCP, with MEMBER_ID in the proofs (wire/handshake.h); without a secret only
 * loopback interfaces are accepted [S1]. Returns the server, or NULL with one line in ERR
 * [M3] (starting "refusing" for a missing or short secret). */
struct shoal_rdma_server *shoal_rdma_server_start(struct shoal_server *srv, const char *provider,
                                                  char ifaces[][32], unsigned n_if,
                                                  const struct shoal_secret *secret,
                                                  const char *member_id, char *err, size_t errlen);
/* The listening addresses "ip:port", one per interface; returns their count. */
unsigned shoal_rdma_server_addrs(const struct shoal_rdma_server *rs,
                                 char addrs[SHOAL_FAB_MAX_IFACES][64]);
/* At most N (1..64; 0: the default 8) of RS's connections per interface from one source address
 * may be authenticating at once; more are refused, and their requesters try again within
 * milliseconds. A host running many worker processes that start together wants its count. */
void shoal_rdma_server_set_preauth_per_source(struct shoal_rdma_server *rs, unsigned n);
/* Closes every connection and listener; waits (bounded) for the requests it handed to the request
 * engine. Call before shoal_server_stop. NULL is a no-op. */
void shoal_rdma_server_stop(struct shoal_rdma_server *rs);

#endif
