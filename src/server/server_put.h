/* The owner's side of write-through [W3]: a writer that has committed an object pushes each of
 * its blocks to the block's owner in a PUT_BLOCK frame (wire/wire.h), whose payload carries the
 * block's chunk CRCs and bytes. The owner trusts none of it: every length is checked against the
 * block the body names before anything is allocated, the CRCs are recomputed over the bytes with
 * the block id the owner derives itself, the object's version and size are checked against the
 * store (one stat per object version, shared with the read path's size checks), only the owner
 * under its own view takes the block, and the cache writes it to a temp file renamed into place,
 * so a failed or partial put leaves nothing addressable. Memory is bounded server-wide by a byte
 * budget (a put beyond it is refused BUSY and its payload discarded unread); the server reads one
 * payload at a time per connection and stops reading a connection with PUT_CONN_MAX puts in
 * process.
 *
 * server/conn.c owns the connections and hooks this module into its per-message dispatch; the calls
 * here do no socket I/O. */
#ifndef SHOAL_RPC_SERVER_PUT_H
#define SHOAL_RPC_SERVER_PUT_H

#include <stdbool.h>
#include <stdint.h>

#include "common/block.h"
#include "wire/wire.h"

#define SHOAL_PUT_CONN_MAX 2 /* puts being received or processed per connection */

struct shoal_cache;
struct shoal_store_sizes;

struct shoal_put_srv_config {
        const struct shoal_volume *vol;
        struct shoal_cache *cache;       /* where accepted blocks go (NULL/disabled: refused) */
        struct shoal_store_sizes *sizes; /* (key, version) -> size, from the store */
        /* Whether this member owns ID under its current view. */
        bool (*is_owner)(void *arg, const struct shoal_block_id *id);
        void *owner_arg;
        uint64_t budget_bytes; /* payload bytes held at once, server-wide (0: 64 MiB or 4 blocks) */
};

struct shoal_put_srv;

/* One PUT_BLOCK being received, then checked. server/conn.c reads the payload into BUF (LEN bytes;
 * GOT so far); with BUF NULL the put was refused at once (STATUS, WHY) and the LEN bytes are
 * read and dropped, so that the stream stays in step, before the refusal is answered. */
struct shoal_put_rx {
        uint8_t *buf;
        uint32_t len;
        uint32_t got;
        uint32_t status; /* SHOAL_ST_OK, or the refusal's status */
        char why[128];
        /* what the body named (valid when STATUS is OK) */
        struct shoal_object obj;
        uint32_t index;
        uint32_t block_len;
};

/* NULL when out of memory. */
struct shoal_put_srv *shoal_put_srv_create(const struct shoal_put_srv_config *cfg);
/* Every rx must have been freed. NULL is a no-op. */
void shoal_put_srv_destroy(struct shoal_put_srv *ps);

/* Loop thread: a CRC-checked PUT_BLOCK frame H with BODY arrived from PEER. Decodes the body,
 * checks the payload length against the block it names and takes the payload's room from the
 * budget. Returns the rx (refused ones included: STATUS says), or NULL when out of memory (the
 * caller closes the connection). Never blocks. */
struct shoal_put_rx *shoal_put_begin(struct shoal_put_srv *ps, const struct shoal_wire_hdr *h,
                                     const uint8_t *body, const char *peer);

/* Worker thread: the whole payload of an accepted RX is in RX->buf. Checks it (owner, chunk CRCs,
 * the object's version and size at the store) and caches the block; may block on the store and
 * the disk. Returns SHOAL_ST_OK or the refusal's status with the reason in RX->why. Counts
 * remotecache_put_serve_* or remotecache_put_refused. The buffer is given back here. */
uint32_t shoal_put_apply(struct shoal_put_srv *ps, struct shoal_put_rx *rx, const char *peer);

/* Counts a put refused at begin (once its payload was dropped), with a rate-limited log line. */
void shoal_put_refused(struct shoal_put_srv *ps, const struct shoal_put_rx *rx, const char *peer);

/* Frees RX and gives its budget back (any thread). NULL is a no-op. */
void shoal_put_free(struct shoal_put_srv *ps, struct shoal_put_rx *rx);

#endif
