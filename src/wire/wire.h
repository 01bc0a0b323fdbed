/* The shoal wire format: one frame codec for the TCP pool, IORPC on TCP and IORPC on RDMA.
 * Pure code (no I/O, no allocation), fuzzed. docs/iorpc-protocol.md is the prose version.
 *
 * A frame is a 32-byte header, then BODY_LEN bytes of body, then PAYLOAD_LEN bytes of payload:
 *
 *   off size field
 *    0   4   magic        "SHL1" (0x53 0x48 0x4c 0x31 on the wire)
 *    4   1   version      SHOAL_WIRE_VERSION (2)
 *    5   1   type         enum shoal_msg_type
 *    6   2   flags        SHOAL_WF_*
 *    8   4   status       0 or enum shoal_status (answers)
 *   12   4   body_len     <= shoal_wire_body_max(type)
 *   16   4   payload_len  0, or for READ_RESP the answered length (<= SHOAL_WIRE_PAYLOAD_MAX),
 *                         or for PUT_BLOCK the CRCs and bytes of the block put
 *   20   8   id           message id chosen by the requester, echoed in the answer
 *   28   4   crc          CRC32C over header bytes 0..27 followed by the body
 *
 * All integers are little-endian. The payload is not covered by the header CRC: READ_RESP bodies
 * carry one CRC per chunk of the payload (shoal_chunk_crc, seeded with block id and chunk index),
 * which the requester verifies end to end — the server may send the payload with sendfile or
 * splice straight from the cache file, whose stored chunk CRCs are exactly these.
 *
 * Lengths are checked against per-type maxima from the header alone, before anything is
 * allocated or read; before authentication only HELLO / HELLO_ACK / AUTH / AUTH_OK / ERROR are
 * accepted and their bodies are tiny. */
#ifndef SHOAL_RPC_WIRE_H
#define SHOAL_RPC_WIRE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"

#define SHOAL_WIRE_MAGIC         0x314c4853u /* "SHL1" read as little-endian u32 */
#define SHOAL_WIRE_VERSION       2 /* 2: proofs in AUTH and AUTH_OK, member id in HELLO_ACK */
#define SHOAL_WIRE_HDR_LEN       32
#define SHOAL_WIRE_PAYLOAD_MAX   SHOAL_BLOCK_SIZE_MAX
#define SHOAL_WIRE_NONCE_LEN     32
#define SHOAL_WIRE_PROOF_LEN     32 /* HMAC-SHA256 */
#define SHOAL_WIRE_MEMBER_ID_MAX 32 /* = SHOAL_MEMBER_ID_LEN of group/group.h */
/* PUT_BLOCK payload: one u32 CRC per chunk, then the block (at most 64 MiB + 4 KiB). */
/* The three services a HELLO names (one numbering for both ends). */
#define SHOAL_SERVICE_POOL  1 /* the TCP pool [T1] */
#define SHOAL_SERVICE_IORPC 2 /* IORPC on TCP [R1] */
#define SHOAL_SERVICE_RDMA  3 /* IORPC on RDMA [M1] */

/* `shoal ping`'s RMA write test: a PING whose body asks the member to RDMA-write a pattern. */
#define SHOAL_RDMA_PING_BODY   64
#define SHOAL_RDMA_WTEST_MAGIC "SHOALWT1"
#define SHOAL_RDMA_WTEST_LEN   32    /* PING body of the write test */
#define SHOAL_RDMA_WTEST_MAX   65536 /* bytes it may ask for */

#define SHOAL_WIRE_PUT_PAYLOAD_MAX (4u * SHOAL_MAX_CHUNKS + SHOAL_BLOCK_SIZE_MAX)

enum shoal_msg_type {
        SHOAL_MSG_HELLO = 1,      /* requester -> server, first frame: versions, nonce */
        SHOAL_MSG_HELLO_ACK = 2,  /* server -> requester: version, nonce, member id */
        SHOAL_MSG_AUTH = 3,       /* requester -> server: requester proof */
        SHOAL_MSG_AUTH_OK = 4,    /* server -> requester: server proof; session open */
        SHOAL_MSG_READ = 16,      /* read a chunk-aligned range of a block */
        SHOAL_MSG_READ_RESP = 17, /* answer: chunk CRCs in the body, data as payload */
        SHOAL_MSG_ERROR = 18,     /* answer with status != 0; body: reason text */
        SHOAL_MSG_PING = 19,      /* liveness; body echoed by PONG */
        SHOAL_MSG_PONG = 20,
        SHOAL_MSG_INFO = 21,      /* ask the server's addresses [R6] */
        SHOAL_MSG_INFO_RESP = 22, /* body: struct shoal_wire_info */
        SHOAL_MSG_CORRUPT = 23,   /* requester -> server: this block failed verification;
                                   * body: the READ layout naming block and range; no answer */
        SHOAL_MSG_GOAWAY = 24,    /* either side: closing; finish in-flight, send no more */
        SHOAL_MSG_PUT_BLOCK = 25, /* writer -> owner: a whole block of a committed object;
                                   * payload: its chunk CRCs, then its bytes (write-through) */
        SHOAL_MSG_PUT_RESP = 26,  /* answer: the block is cached under its id (empty body) */
};

enum shoal_wire_flags {
        SHOAL_WF_AUTH_REQUIRED = 1u << 0, /* HELLO_ACK: the requester must send AUTH */
        SHOAL_WF_RDMA_TARGET = 1u << 1,   /* READ: write the payload to rdma_addr/rdma_key */
        SHOAL_WF_RDMA_WRITTEN = 1u << 2,  /* READ_RESP: payload already written by RDMA */
        SHOAL_WF_FILL = 1u << 3,          /* READ: fill from the store on a miss (owner) */
};

enum shoal_status {
        SHOAL_ST_OK = 0,
        SHOAL_ST_NOT_FOUND = 1,    /* object missing in the store */
        SHOAL_ST_STALE = 2,        /* object version changed */
        SHOAL_ST_NOT_OWNER = 3,    /* not the owner under the server's view; not cached */
        SHOAL_ST_MISS = 4,         /* not cached and SHOAL_WF_FILL not set */
        SHOAL_ST_BAD_REQUEST = 5,  /* malformed or invalid request */
        SHOAL_ST_STORE_ERROR = 6,  /* filling from the store failed */
        SHOAL_ST_RPC_DISABLED = 7, /* no IORPC service on this member */
        SHOAL_ST_AUTH_FAILED = 8,
        SHOAL_ST_BUSY = 9,    /* overloaded; retry elsewhere */
        SHOAL_ST_VOLUME = 10, /* another volume or block size */
        SHOAL_ST_INTERNAL = 11,
        SHOAL_ST__MAX
};

struct shoal_wire_hdr {
        uint8_t version;
        uint8_t type;
        uint16_t flags;
        uint32_t status;
        uint32_t body_len;
        uint32_t payload_len;
        uint64_t id;
};

/* Largest body accepted for TYPE (0 for an unknown type). */
uint32_t shoal_wire_body_max(uint8_t type);
/* Human-readable name of STATUS ("not owner", "rpc disabled", ...). */
const char *shoal_status_str(uint32_t status);

/* Writes the 32-byte header for H and BODY (BODY_LEN must equal H->body_len) into OUT, CRC
 * included. */
void shoal_wire_hdr_encode(uint8_t out[SHOAL_WIRE_HDR_LEN], const struct shoal_wire_hdr *h,
                           const void *body);
/* Writes a whole frame without payload into OUT: BODY_LEN bytes of BODY at OUT +
 * SHOAL_WIRE_HDR_LEN (BODY NULL: the body is already there), then the header in front of it.
 * OUT must hold SHOAL_WIRE_HDR_LEN + BODY_LEN bytes. Returns the frame length. */
size_t shoal_wire_frame_encode(uint8_t *out, uint8_t type, uint16_t flags, uint32_t status,
                               uint64_t id, const void *body, size_t body_len);
/* Parses and checks the header fields that can be checked without the body: magic, version,
 * known type, only the flags defined for the type, status 0 except on ERROR (there 1..__MAX-1),
 * body_len <= shoal_wire_body_max(type), payload_len only on READ_RESP, <= max, and 0 with
 * SHOAL_WF_RDMA_WRITTEN. Returns 0, or -EPROTO (bad magic/version/type/flags/status) or -EMSGSIZE
 * (a length past its maximum). */
int shoal_wire_hdr_decode(const uint8_t in[SHOAL_WIRE_HDR_LEN], struct shoal_wire_hdr *h);
/* True when the CRC in header IN matches IN's first 28 bytes followed by BODY. */
bool shoal_wire_crc_ok(const uint8_t in[SHOAL_WIRE_HDR_LEN], const void *body, size_t body_len);
/* Reassembles one frame's header and body (a request, as a server reads them) from a byte stream.
 * IN holds the HAVE bytes received so far of the current frame. Returns how many more bytes to
 * receive before calling again (> 0), or 0 when IN holds one whole header and body whose CRC
 * matches (its header in *H), or a negative errno after which the stream must be dropped: -EPROTO
 * (a header that does not decode), -EMSGSIZE (a body over BODY_MAX, or a payload where none may
 * come), -EBADMSG (a CRC mismatch), -EINVAL (HAVE past the frame: more than the previous calls
 * asked for). A payload is allowed only with PUT_PAYLOAD and only on PUT_BLOCK (whose header
 * already bounds it); the caller receives it after this returned 0. It never asks for more than
 * SHOAL_WIRE_HDR_LEN + BODY_MAX bytes in all, so IN needs room for that many. */
int shoal_wire_frame_need(const uint8_t *in, size_t have, uint32_t body_max, bool put_payload,
                          struct shoal_wire_hdr *h);
/* Decodes MSG[0, LEN) as one whole frame without payload (a message as RDMA carries it): the
 * header checks, a length of exactly header + body, and the CRC. Returns 0 with the header in
 * *H, or -EPROTO. */
int shoal_wire_msg_decode(const uint8_t *msg, size_t len, struct shoal_wire_hdr *h);

/* HELLO / HELLO_ACK / AUTH / AUTH_OK bodies. The proofs themselves are wire/handshake.c's. */
struct shoal_wire_hello {
        uint8_t min_version, max_version;
        uint8_t service; /* 1 = TCP pool, 2 = IORPC, 3 = IORPC over RDMA */
        uint8_t nonce[SHOAL_WIRE_NONCE_LEN];
};
struct shoal_wire_hello_ack {
        uint8_t version;
        uint8_t nonce[SHOAL_WIRE_NONCE_LEN];
        uint32_t max_inflight; /* requests the server takes on this connection */
        /* the server's member id: 0..SHOAL_WIRE_MEMBER_ID_MAX of [0-9A-Za-z._-], NUL-terminated */
        char member_id[SHOAL_WIRE_MEMBER_ID_MAX + 1];
};
/* AUTH carries the requester's proof, AUTH_OK the server's. */
struct shoal_wire_auth {
        uint8_t proof[SHOAL_WIRE_PROOF_LEN];
};

/* READ body. KEY and VERSION point into the decoded buffer (not NUL-terminated). */
struct shoal_wire_read {
        uint64_t view_version; /* requester's group view version */
        uint64_t obj_size;
        uint32_t block_size;
        uint32_t block_index;
        uint32_t offset; /* chunk-aligned range inside the block */
        uint32_t length;
        uint64_t rdma_addr; /* with SHOAL_WF_RDMA_TARGET */
        uint64_t rdma_key;
        uint16_t key_len;
        uint16_t version_len;
        const char *key;
        const char *version;
};

/* READ_RESP body. CRCS points into the decoded buffer (little-endian u32s; use
 * shoal_wire_read_resp_crc to read entry I). */
struct shoal_wire_read_resp {
        struct shoal_block_id block; /* echoes the id the server derived */
        uint32_t offset;
        uint32_t length;
        uint32_t n_crcs; /* chunks in [offset, offset+length) */
        const uint8_t *crcs;
};

/* PUT_BLOCK body: names a whole block of an object the store has committed. KEY and VERSION
 * point into the decoded buffer (not NUL-terminated). The payload is shoal_chunk_count(len) u32
 * chunk CRCs (little-endian, shoal_chunk_crc of the block id the receiver derives), then the LEN
 * bytes of the block, LEN = shoal_block_len(obj_size, block_size, block_index). */
struct shoal_wire_put {
        uint64_t view_version; /* the writer's group view version */
        uint64_t obj_size;
        uint32_t block_size;
        uint32_t block_index;
        uint16_t key_len;
        uint16_t version_len;
        const char *key;
        const char *version;
};

/* INFO_RESP body: the server's service addresses, each "ip:port" or empty. */
struct shoal_wire_info {
        char tcp_addr[64];
        char iorpc_addr[64];
        uint8_t n_rdma;
        char rdma_addr[4][64];
        uint32_t block_size;
        char volume_url[1024];
};

/* Encoders write into OUT (OUTLEN bytes) and return the body length, or -EMSGSIZE when OUTLEN
 * is too small or a field is out of range. Decoders check every length against BODY_LEN and the
 * field's limits (key 1..SHOAL_KEY_MAX and shoal_key_valid, version 1..SHOAL_VERSION_MAX,
 * range inside the block and chunk-aligned per shoal_range_valid, n_crcs equal to the chunk count
 * of the range, strings NUL-free) and return 0 or -EPROTO. */
int shoal_wire_hello_encode(uint8_t *out, size_t outlen, const struct shoal_wire_hello *m);
int shoal_wire_hello_decode(const uint8_t *body, size_t len, struct shoal_wire_hello *m);
int shoal_wire_hello_ack_encode(uint8_t *out, size_t outlen, const struct shoal_wire_hello_ack *m);
int shoal_wire_hello_ack_decode(const uint8_t *body, size_t len, struct shoal_wire_hello_ack *m);
/* AUTH and AUTH_OK share this body. */
int shoal_wire_auth_encode(uint8_t *out, size_t outlen, const struct shoal_wire_auth *m);
int shoal_wire_auth_decode(const uint8_t *body, size_t len, struct shoal_wire_auth *m);
int shoal_wire_read_encode(uint8_t *out, size_t outlen, const struct shoal_wire_read *m);
int shoal_wire_read_decode(const uint8_t *body, size_t len, struct shoal_wire_read *m);
/* CRCS: host-order array of n_crcs values. */
int shoal_wire_read_resp_encode(uint8_t *out, size_t outlen, const struct shoal_block_id *block,
                                uint32_t offset, uint32_t length, const uint32_t *crcs);
int shoal_wire_read_resp_decode(const uint8_t *body, size_t len, struct shoal_wire_read_resp *m);
uint32_t shoal_wire_read_resp_crc(const struct shoal_wire_read_resp *m, uint32_t i);
/* PUT_BLOCK: the decoder checks key and version as READ does and that the index lies inside the
 * object (obj_size > 0). */
int shoal_wire_put_encode(uint8_t *out, size_t outlen, const struct shoal_wire_put *m);
int shoal_wire_put_decode(const uint8_t *body, size_t len, struct shoal_wire_put *m);
/* The payload length a PUT_BLOCK of M must carry: 4 bytes per chunk of the block, then the block
 * (M must have decoded). */
uint32_t shoal_wire_put_payload_len(const struct shoal_wire_put *m);
int shoal_wire_info_encode(uint8_t *out, size_t outlen, const struct shoal_wire_info *m);
int shoal_wire_info_decode(const uint8_t *body, size_t len, struct shoal_wire_info *m);
/* ERROR body: a reason text of at most 200 bytes, printable ASCII. The decoder copies it
 * NUL-terminated, truncated to REASONLEN - 1 bytes (REASONLEN 0: -EMSGSIZE). */
int shoal_wire_error_encode(uint8_t *out, size_t outlen, const char *reason);
int shoal_wire_error_decode(const uint8_t *body, size_t len, char *reason, size_t reasonlen);
/* The reason text of a NOT_OWNER answer to a READ made under another group view than the
 * member's begins with this (issue 33): the requester's view is likely behind, and it refreshes
 * it at once instead of at its next heartbeat. A text, not a new status or flag, so that a
 * requester that does not know it reads the answer as the NOT_OWNER it always was. */
#define SHOAL_WIRE_VIEW_DIFFERS "view differs"

#endif
