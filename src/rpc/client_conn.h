/* Client side of a connection to a member's TCP pool or IORPC port. */
#ifndef SHOAL_RPC_CLIENT_CONN_H
#define SHOAL_RPC_CLIENT_CONN_H

#include <stdint.h>

#define SHOAL_SERVICE_POOL  1
#define SHOAL_SERVICE_IORPC 2

/* Connects to ADDR ("ip:port") and runs the handshake (HELLO, and AUTH when the member requires
 * the group SECRET; the member must prove the secret first). Returns a non-blocking fd or -errno
 * (-ETIMEDOUT past DEADLINE, -EACCES on an authentication failure, -EPROTO on a bad answer).
 * *MAX_INFLIGHT (may be NULL) receives the member's per-connection request limit. */
int shoal_rpc_connect(const char *addr, uint8_t service, const char *secret, uint64_t deadline,
                      uint32_t *max_inflight);

#endif
