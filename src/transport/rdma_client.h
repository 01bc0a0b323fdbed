/* IORPC over RDMA [M1]-[M7]: libfabric FI_EP_MSG connections, one per --rdma-network interface.
 * Frames are the IORPC frames of wire/wire.h, one frame per message (fi_send); a READ names the
 * requester's registered buffer and the server RMA-writes the payload there before it sends the
 * READ_RESP (flag RDMA_WRITTEN, no payload). docs/rdma.md explains the design and operation.
 *
 * Each side runs one progress thread that makes every libfabric call of that side: it sleeps in
 * epoll on the EQ and CQ wait fds (after fi_trywait) and an eventfd for work from other threads,
 * and polls the CQs (the tcp provider moves data only inside fi_cq_read). */
#ifndef SHOAL_TRANSPORT_RDMA_CLIENT_H
#define SHOAL_TRANSPORT_RDMA_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "common/secret.h"
#include "net/fabric.h"
#include "transport/rdma_config.h"

/* ---- client ---- */

struct shoal_rdma_client;

/* Opens every interface and a registered bounce pool. NULL with one line in ERR [M3]. */
struct shoal_rdma_client *shoal_rdma_client_create(const struct shoal_rdma_client_config *cfg,
                                                   char *err, size_t errlen);
void shoal_rdma_client_destroy(struct shoal_rdma_client *c);
/* Records [BASE, BASE+LEN) (whole pages, marked MADV_DONTFORK here) as memory that reads may
 * land in directly (no bounce copy): each request into it registers its own buffer for remote
 * writes while it is in flight. Nothing is registered now. The memory must outlive the client.
 * Returns 0 or a negative errno (ERR). */
int shoal_rdma_client_register(struct shoal_rdma_client *c, void *base, size_t len, char *err,
                               size_t errlen);

/* Reads [OFF, OFF+LEN) of block INDEX of OBJ from the member with id MEMBER_ID whose RDMA
 * listeners are ADDRS[0..N_ADDRS) into DST, over one channel chosen at random among the idle ones;
 * the request is never split. Every chunk CRC is verified before success. Returns 0; -ENOTCONN
 * when RDMA cannot carry it now (never connected, failed and waiting for the retry time, or the
 * connection broke with the request in flight): the caller re-issues it over IORPC on TCP;
 * -EREMOTEIO/-ENOENT/-ESTALE for an error answer; -EBADMSG for a checksum mismatch; -ETIMEDOUT
 * past DEADLINE. Blocks the calling thread; DST is not touched after the call returns. */
int shoal_rdma_read(struct shoal_rdma_client *c, const char *member_id, const char (*addrs)[64],
                    unsigned n_addrs, const struct shoal_volume *vol,
                    const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                    void *dst, uint64_t view_version, uint64_t deadline);

/* Channels to member MEMBER_ID that finished their handshake and take requests, all
 * interfaces together (0 while it is not up over RDMA). */
unsigned shoal_rdma_channels(struct shoal_rdma_client *c, const char *member_id);

/* `shoal ping --rdma-network IF`: connects from IF to ADDR over PROVIDER, handshakes, measures
 * PING round trips and checks an RMA write of a test pattern into a registered buffer. Prints one
 * line; returns 0 or a negative errno. */
int shoal_rdma_ping(const char *provider, const char *ifname, const char *addr,
                    const struct shoal_secret *secret);

#endif
