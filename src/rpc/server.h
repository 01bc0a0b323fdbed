/* The server side of a sharing member: the TCP pool listener [T1, T2] and the IORPC listener
 * [R1, R2, R4], on a small set of event-loop threads. A request names a block by (object key,
 * version, size, index) and a chunk-aligned range; the server derives the block id itself, answers
 * a cache hit from the cache file (sendfile, O_DIRECT, buffered or splice by mode) and a miss
 * through the reader's single-flight fill from the object store. */
#ifndef SHOAL_RPC_SERVER_H
#define SHOAL_RPC_SERVER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"

enum shoal_iorpc_mode {
        SHOAL_IORPC_DIO = 0,
        SHOAL_IORPC_PAGECACHE = 1,
        SHOAL_IORPC_SPLICE = 2,
        SHOAL_IORPC_DISABLE = 3,
};

/* "dio", "pagecache", "splice", "disable" -> mode; -1 for anything else. */
int shoal_iorpc_mode_parse(const char *s);
const char *shoal_iorpc_mode_name(int mode);

struct shoal_reader;
struct shoal_cache;
struct shoal_group;

struct shoal_server_config {
        const struct shoal_volume *vol;
        struct shoal_reader *reader; /* miss fill (single flight) */
        struct shoal_cache *cache;   /* hits */
        const char *listen_ip;       /* IPv4 address to bind */
        uint16_t tcp_port;           /* TCP pool port; 0 = chosen by the system */
        bool cache_try_dio;          /* TCP pool answers by O_DIRECT read + send */
        int iorpc_mode;              /* enum shoal_iorpc_mode */
        const char *secret;          /* group secret, or NULL (loopback only) */
        unsigned threads;            /* event-loop threads (0: one per core, at most 8) */
        unsigned max_inflight;       /* per server (IORPC), default 2048 [R4] */
};

struct shoal_server;

/* Binds and starts serving. Refuses (-EPERM, with a line in ERR) to listen beyond loopback without
 * a secret [S1]. NULL on failure. */
struct shoal_server *shoal_server_start(const struct shoal_server_config *cfg, char *err,
                                        size_t errlen);
/* Tells the server the group (for ownership checks); may be called once after start. */
void shoal_server_set_group(struct shoal_server *s, struct shoal_group *g);
/* The bound addresses "ip:port" (IORPC empty when disabled). */
void shoal_server_addrs(const struct shoal_server *s, char tcp[64], char iorpc[64]);
void shoal_server_stop(struct shoal_server *s);

#endif
