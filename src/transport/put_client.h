/* The writer's side of PUT_BLOCK [W3]: one block of a committed object, sent to its owner over an
 * authenticated connection (transport/client_conn.h), stop and wait. */
#ifndef SHOAL_RPC_PUT_CLIENT_H
#define SHOAL_RPC_PUT_CLIENT_H

#include <stdint.h>

#include "common/block.h"

/* Fills the first 4 * shoal_chunk_count(LEN) bytes of PAYLOAD with the chunk CRCs of the LEN
 * block bytes that follow them, under block id ID (the PUT_BLOCK payload layout). */
void shoal_put_payload_crcs(const struct shoal_block_id *id, uint8_t *payload, uint32_t len);

/* Sends PUT_BLOCK ID for block INDEX of OBJ (committed: its version is the store's) on FD with
 * PAYLOAD (CRCs then bytes, as shoal_put_payload_crcs leaves it) and waits for the answer.
 * Returns 0 (PUT_RESP), -EREMOTEIO with the member's status in *STATUS (ERROR), or a connection
 * error (-ETIMEDOUT past DEADLINE, -ECONNRESET, -EPROTO: an answer that does not fit; the
 * connection is then unusable). */
int shoal_rpc_put_block(int fd, uint64_t id, const struct shoal_volume *vol,
                        const struct shoal_object *obj, uint32_t index, const uint8_t *payload,
                        uint64_t view_version, uint64_t deadline, uint32_t *status);

#endif
