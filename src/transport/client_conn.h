/* Client side of a connection to a member's TCP pool or IORPC port. */
#ifndef SHOAL_RPC_CLIENT_CONN_H
#define SHOAL_RPC_CLIENT_CONN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "wire/handshake.h"
#include "wire/wire.h"

/* Payload receives ask the kernel to wake the receiver once per this many bytes (SO_RCVLOWAT):
 * large enough that a 4 MiB answer costs a few wake-ups instead of one per segment, small enough
 * that each piece is still in the CPU cache when its chunk CRCs are checked. Payload rests below
 * SHOAL_RPC_LOWAT_MIN are not worth the extra system calls. */
#define SHOAL_RPC_LOWAT_PIECE (256 * 1024)
#define SHOAL_RPC_LOWAT_MIN   (64 * 1024)

/* What the handshake told the requester about the member. */
struct shoal_rpc_peer {
        uint32_t max_inflight;                        /* its per-connection request limit */
        char member_id[SHOAL_WIRE_MEMBER_ID_MAX + 1]; /* its member id (may be empty) */
};

/* Connects to ADDR ("ip:port") and runs the handshake of wire/handshake.h with KEY (NULL or unset:
 * no secret; then only a member without one is accepted). Returns a non-blocking fd or -errno:
 * -ETIMEDOUT past DEADLINE, -EACCES when either side did not prove the group secret (the reason
 * is logged), -ENOPROTOOPT when the member does not offer SERVICE, -EPROTO on a bad answer, or
 * the CSPRNG's error. *PEER (may be NULL) receives what the member announced. */
int shoal_rpc_connect(const char *addr, uint8_t service, const struct shoal_hs_key *key,
                      uint64_t deadline, struct shoal_rpc_peer *peer);

/* Blocking socket I/O on non-blocking fds, with a monotonic DEADLINE. Return 0 or -errno
 * (-ETIMEDOUT past the deadline, -ECONNRESET when the peer went away). */
int shoal_rpc_send_all(int fd, const void *buf, size_t len, uint64_t deadline);
int shoal_rpc_recv_all(int fd, void *buf, size_t len, uint64_t deadline);
/* Like shoal_rpc_recv_all for a large payload, woken about once per SHOAL_RPC_LOWAT_PIECE bytes
 * instead of once per segment (SO_RCVLOWAT; back at 1 on return). */
int shoal_rpc_recv_payload(int fd, void *buf, size_t len, uint64_t deadline);
/* Receives one frame's header (into HDR and *H) and body (at most BODY_CAP bytes, CRC checked);
 * the payload, if any, is left in the socket. */
int shoal_rpc_recv_frame(int fd, struct shoal_wire_hdr *h, uint8_t *hdr, uint8_t *body,
                         size_t body_cap, uint64_t deadline);
int shoal_rpc_send_frame(int fd, uint8_t type, uint16_t flags, uint64_t id, const uint8_t *body,
                         size_t body_len, uint64_t deadline);
/* Encodes the READ body for [OFF, OFF+LEN) of block INDEX of OBJ. Returns its length or < 0. */
int shoal_rpc_encode_read(uint8_t *b, size_t cap, const struct shoal_volume *vol,
                          const struct shoal_object *obj, uint32_t index, uint32_t off,
                          uint32_t len, uint64_t view_version);
/* The negative errno a caller sees for an error answer with STATUS. */
int shoal_rpc_status_errno(uint32_t status);
/* The same for an ERROR answer's STATUS and BODY: -EXDEV for a NOT_OWNER whose reason says the
 * views differ (SHOAL_WIRE_VIEW_DIFFERS), else shoal_rpc_status_errno. */
int shoal_rpc_error_errno(uint32_t status, const uint8_t *body, size_t body_len);
/* Checks the READ_RESP body RESP and header H against the request, then every chunk CRC of the
 * payload in DST. Returns 0, -EPROTO (an answer that does not fit the request) or -EBADMSG. */
int shoal_rpc_check_answer(const struct shoal_volume *vol, const struct shoal_object *obj,
                           uint32_t index, uint32_t off, uint32_t len,
                           const struct shoal_wire_hdr *h, const struct shoal_wire_read_resp *resp);
/* shoal_rpc_check_answer with the block id the requester derived already. */
int shoal_rpc_check_answer_id(const struct shoal_block_id *want, uint32_t off, uint32_t len,
                              const struct shoal_wire_hdr *h,
                              const struct shoal_wire_read_resp *resp);
/* Checks the chunks of a payload received in pieces: DATA is the payload (byte 0 = RESP->offset
 * of block ID) and [FROM, TO) the part to check, FROM chunk-aligned and TO chunk-aligned or the
 * payload's end. True when every chunk CRC in it matches RESP's. */
bool shoal_rpc_verify_chunks(const struct shoal_block_id *id, const void *data, uint32_t from,
                             uint32_t to, const struct shoal_wire_read_resp *resp);
/* Decodes the READ_RESP body of LEN bytes at BODY into *RESP (shoal_wire_read_resp_decode),
 * timing it in SERVICE's decode histogram: mount_iorpc_decodeBodyDur for IORPC (on TCP or RDMA),
 * remotecache_pool_decodeBodyDur for the TCP pool [V2]. Returns 0 or < 0 as the decoder does. */
int shoal_rpc_decode_answer(uint8_t service, const uint8_t *body, size_t len,
                            struct shoal_wire_read_resp *resp);
int shoal_rpc_verify_payload(const struct shoal_volume *vol, const struct shoal_object *obj,
                             uint32_t index, uint32_t off, uint32_t len, const void *dst,
                             const struct shoal_wire_read_resp *resp);

#endif
