/* The two transport clients behind struct shoal_remote (transport/select.c): the TCP pool (one
 * request per connection) and IORPC (many requests per connection, connections scaled with load
 * [R5]). Both verify every chunk CRC before reporting success and take a monotonic DEADLINE. */
#ifndef SHOAL_RPC_CLIENTS_H
#define SHOAL_RPC_CLIENTS_H

#include <stdint.h>

#include "common/block.h"
#include "common/secret.h"
#include "wire/wire.h"

struct shoal_pool;
struct shoal_put_req;

/* SECRET (NULL or empty: none) is used only to derive the handshake key; NULL when it is shorter
 * than SHOAL_SECRET_MIN bytes, or out of memory or randomness. SERVICE: the member's port the
 * pool connects to (SHOAL_SERVICE_POOL; SHOAL_SERVICE_IORPC for the IORPC transport's puts). */
struct shoal_pool *shoal_pool_create(const struct shoal_secret *secret, unsigned idle_per_peer,
                                     uint8_t service);
void shoal_pool_destroy(struct shoal_pool *p);
/* Reads [OFF, OFF+LEN) of block INDEX of OBJ from the member whose TCP pool is at ADDR into DST.
 * A pooled connection found dead is replaced once; a checksum mismatch is reported to the member
 * and retried once. Returns 0 or a negative errno (see transport/select.h). */
int shoal_pool_read(struct shoal_pool *p, const char *addr, const struct shoal_volume *vol,
                    const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                    void *dst, uint64_t view_version, uint64_t deadline);
/* Connections to ADDR: idle in the pool plus those lent out. */
unsigned shoal_pool_conns(struct shoal_pool *p, const char *addr);
/* Requests to ADDR in flight (connections lent out). */
unsigned shoal_pool_inflight(struct shoal_pool *p, const char *addr);
/* PUT_BLOCK RQ to the member MEMBER_ID at ADDR on a pooled connection whose handshake proved
 * MEMBER_ID (-EACCES otherwise); a connection found broken is replaced once (transport.h). */
int shoal_pool_put(struct shoal_pool *p, const char *addr, const char *member_id,
                   struct shoal_put_req *rq);
/* Asks the member at ADDR for its service addresses [R6]. Returns 0, -ENOPROTOOPT when the member
 * answered "rpc disabled", or another negative errno. */
int shoal_pool_info(struct shoal_pool *p, const char *addr, struct shoal_wire_info *info,
                    uint64_t deadline);

struct shoal_iorpc;

struct shoal_iorpc_config {
        struct shoal_secret secret;  /* group secret (len 0: none); only its key is kept */
        uint64_t grow_period_ns;     /* 0: SHOAL_IORPC_SCALE_PERIOD, else 1 s */
        uint64_t shrink_period_ns;   /* default 60 x grow period */
        uint64_t grow_bytes_per_s;   /* 300 MiB/s on TCP [R5] */
        uint64_t grow_qps;           /* 1000 */
        uint64_t shrink_bytes_per_s; /* 100 MiB/s */
        uint64_t shrink_qps;         /* 500 */
        unsigned max_conns;          /* per member, default 16 */
};

struct shoal_iorpc *shoal_iorpc_create(const struct shoal_iorpc_config *cfg);
void shoal_iorpc_destroy(struct shoal_iorpc *c);
/* Like shoal_pool_read, over IORPC to the member's IORPC address ADDR. */
int shoal_iorpc_read(struct shoal_iorpc *c, const char *addr, const struct shoal_volume *vol,
                     const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                     void *dst, uint64_t view_version, uint64_t deadline);
/* Open connections to ADDR (for tests and `shoal stats`). */
unsigned shoal_iorpc_conns(struct shoal_iorpc *c, const char *addr);
/* Requests to ADDR in flight, all connections together. */
unsigned shoal_iorpc_inflight(struct shoal_iorpc *c, const char *addr);

#endif
