/* The connection handshake of every transport [S1, S3]: one pure state machine (no I/O, no
 * allocation, no clock) that the TCP pool and IORPC server (server/server.c), the TCP and IORPC
 * requester (transport/client_conn.c), and both ends of IORPC over RDMA (server/rdma_server.c,
 * transport/rdma_client.c) run. Frames go in, frames to send come out, and a verdict says whether
 * the session is open, needs another frame, or must be closed. docs/iorpc-protocol.md §4 is the
 * prose version; docs/operations.md states what it does and does not protect.
 *
 *   requester                                   server
 *     HELLO(min,max,service,Nr)      ─────────►
 *                                    ◄─────────  HELLO_ACK(version,Ns,max_inflight,member_id)
 *                                                  [AUTH_REQUIRED when the server has a secret]
 *     AUTH(proof_r)                  ─────────►   (checked before anything else)
 *                                    ◄─────────  AUTH_OK(proof_s), or ERROR(AUTH_FAILED) + close
 *
 * K = HMAC-SHA256(secret, "shoal group key v2"), and each proof is
 *   HMAC-SHA256(K, label ‖ u8 len(addr) ‖ addr ‖ HELLO body ‖ HELLO_ACK body)
 * with a different label per direction. ADDR is the "ip:port" the requester dialed, which the
 * server knows as the local address of the connection (or its listener for RDMA): a proof made
 * for one address is worth nothing at another, so a peer without the secret cannot relay a
 * requester's handshake to a real member. The bodies bind both nonces, the service, the version,
 * max_inflight and the server's member id. The requester proves first; the server proves only to
 * a requester it has verified, so it is never an oracle. A requester that holds a secret refuses
 * a server that does not ask for AUTH or whose proof is wrong. */
#ifndef SHOAL_RPC_HANDSHAKE_H
#define SHOAL_RPC_HANDSHAKE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/secret.h"
#include "wire/wire.h"

#define SHOAL_HS_KEY_LEN   32
#define SHOAL_HS_ADDR_MAX  24 /* "255.255.255.255:65535" and a NUL */
#define SHOAL_HS_FRAME_MAX (SHOAL_WIRE_HDR_LEN + 80)
#define SHOAL_HS_HELLO_ID  1 /* message ids of the requester's HELLO and AUTH */
#define SHOAL_HS_AUTH_ID   2

/* The key every proof is made with, derived from the group secret once. */
struct shoal_hs_key {
        bool set; /* false: no secret (loopback only) */
        uint8_t k[SHOAL_HS_KEY_LEN];
};

/* Derives KEY from SECRET (NULL or empty: KEY->set = false). Returns 0, or -EINVAL for a secret
 * shorter than SHOAL_SECRET_MIN or longer than SHOAL_SECRET_MAX bytes. */
int shoal_hs_key_init(struct shoal_hs_key *key, const struct shoal_secret *secret);
/* Wipes KEY. */
void shoal_hs_key_clear(struct shoal_hs_key *key);

enum shoal_hs_role {
        SHOAL_HS_REQUESTER = 0,
        SHOAL_HS_SERVER = 1,
};

struct shoal_hs_config {
        enum shoal_hs_role role;
        const struct shoal_hs_key *key; /* NULL or unset: no secret; must outlive the handshake */
        uint8_t service;                /* 1 TCP pool, 2 IORPC, 3 IORPC over RDMA */
        /* "ip:port" (IPv4): the requester's the address it dialed, the server's the address the
         * connection arrived at (TCP: getsockname; RDMA: the listener's address). */
        const char *addr;
        const char *member_id; /* server: its member id ("" or NULL: none) */
        uint32_t max_inflight; /* server: announced in HELLO_ACK (>= 1) */
        const uint8_t *nonce;  /* NULL: a fresh nonce from the CSPRNG; tests and fuzzing only */
};

enum shoal_hs_verdict {
        SHOAL_HS_MORE = 0, /* send OUT if any, then feed the peer's next frame */
        SHOAL_HS_DONE = 1, /* send OUT if any; the session is open */
        SHOAL_HS_FAIL = 2, /* send OUT if any (an ERROR, best effort), then close */
};

struct shoal_hs {
        /* what to send after the last call: OUT_LEN bytes (0: nothing), a whole frame */
        uint8_t out[SHOAL_HS_FRAME_MAX];
        size_t out_len;
        /* on FAIL: -EACCES (a proof was missing or wrong, ours or the peer's), -EPROTO (a frame
         * out of order or malformed), -ENOPROTOOPT (the service is not offered there),
         * -EREMOTEIO (another ERROR answer); WHY is a constant phrase for the log */
        int error;
        const char *why;
        /* the requester's results once DONE */
        uint32_t peer_max_inflight;
        char peer_id[SHOAL_WIRE_MEMBER_ID_MAX + 1]; /* the server's member id, authenticated when
                                                       a secret is set */
        /* internal */
        uint8_t role, service, state;
        const struct shoal_hs_key *key;
        uint32_t max_inflight;
        uint8_t addr_len;
        char addr[SHOAL_HS_ADDR_MAX];
        char member_id[SHOAL_WIRE_MEMBER_ID_MAX + 1];
        uint8_t nonce[SHOAL_WIRE_NONCE_LEN];
        uint8_t hello[3 + SHOAL_WIRE_NONCE_LEN];
        uint8_t ack[1 + SHOAL_WIRE_NONCE_LEN + 4 + 1 + SHOAL_WIRE_MEMBER_ID_MAX];
        size_t ack_len;
};

/* Starts HS as CFG says. A requester finds its HELLO in HS->out. Returns 0, -EINVAL for a bad
 * CFG (address not an IPv4 "ip:port", member id not valid, service out of range), or the
 * CSPRNG's negative errno: the caller then closes the connection, since a handshake without a
 * fresh nonce could be replayed. */
int shoal_hs_start(struct shoal_hs *hs, const struct shoal_hs_config *cfg);

/* Feeds the peer's next frame: header H (decoded, CRC checked) and its body. Any frame out of
 * order, malformed, or after DONE or FAIL fails. Counts an authentication failure in the
 * remotecache_auth_failures metric. */
enum shoal_hs_verdict shoal_hs_step(struct shoal_hs *hs, const struct shoal_wire_hdr *h,
                                    const uint8_t *body);

/* shoal_hs_step on a whole frame MSG[0, LEN) (header, body, no payload), decoded and CRC-checked
 * here; a frame that does not decode fails the handshake. */
enum shoal_hs_verdict shoal_hs_step_msg(struct shoal_hs *hs, const uint8_t *msg, size_t len);

/* True once the handshake is over (DONE or FAIL). */
bool shoal_hs_over(const struct shoal_hs *hs);

#endif
