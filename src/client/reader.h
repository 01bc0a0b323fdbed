/* The read path of one block range, end to end (DESIGN.md "The read of one block"):
 *   buffer (in-memory blocks, --buffer-size) -> local disk cache -> owner in the group (remote)
 *   -> object store.
 * A reader owns a fixed set of block buffers carved once from a buffer pool; each holds one block
 * with a bitmap of valid chunks. Concurrent readers of one block share one fill (single flight),
 * whether they are local readers, readahead, or (on an owner) peers asking for the block. Any
 * failure of the cache or of a member falls through to the next layer; the caller only sees an
 * error when the object store itself fails. A read that finds its block's owner busy (this
 * process's reads in flight to it, client/spread.h) goes to the next member in the block's order,
 * which fills it from the owner and keeps it in its buffers as a second copy (docs/architecture.md
 * "Spread by load"). Thread-safe. */
#ifndef SHOAL_CLIENT_READER_H
#define SHOAL_CLIENT_READER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"

struct shoal_store;
struct shoal_cache;
struct shoal_group;
struct shoal_remote;

struct shoal_reader_config {
        const struct shoal_volume *vol;
        struct shoal_store *store;
        struct shoal_cache *cache;   /* may be NULL or disabled */
        struct shoal_group *group;   /* NULL: not in a group */
        struct shoal_remote *remote; /* transports to members; NULL without a group */
        bool sharing;                /* this process is a provider (owns blocks) */
        uint64_t buffer_bytes;       /* --buffer-size; at least 4 blocks are always kept */
        unsigned readahead;          /* blocks to prefetch ahead of a sequential stream */
        unsigned prefetch_threads;   /* 0: no readahead */
        unsigned spread_copies;      /* copies of a block, the owner's included (client/spread.h):
                                        1 no spread reads; 0 SHOAL_SPREAD_COPIES or 1 */
        unsigned spread_busy;        /* 0: SHOAL_SPREAD_BUSY or 9 */
};

struct shoal_reader;

/* Sequential-stream state of one reader of one object (a FUSE file handle, a cat loop). Zero it
 * before first use; it is only a hint, so a shared or stale one costs speed, never correctness. */
struct shoal_stream {
        uint64_t next_off;
        uint32_t seq_reads;
        uint32_t ra_next; /* next block index readahead has not yet asked for */
};

struct shoal_reader *shoal_reader_create(const struct shoal_reader_config *cfg, char *err,
                                         size_t errlen);
void shoal_reader_destroy(struct shoal_reader *r);

/* Reads up to LEN bytes at OFF of OBJ (its size and version from a stat) into DST. Returns the
 * bytes read (short only at the end of the object) or a negative errno (-ESTALE: the object
 * changed, stat again; -EIO: the store failed). S may be NULL. */
long shoal_reader_read(struct shoal_reader *r, const struct shoal_object *obj, uint64_t off,
                       size_t len, void *dst, struct shoal_stream *s);

/* Asks the readahead workers to fetch block INDEX of OBJ in the background (a hint: dropped when
 * the queue is full, no spare buffer is free, or the block is already held). Returns 0, -EINVAL
 * past the end of OBJ, or -EOPNOTSUPP when the reader has no readahead workers. */
int shoal_reader_prefetch(struct shoal_reader *r, const struct shoal_object *obj, uint32_t index);

/* A piece of a block held in memory for the caller (no copy). */
struct shoal_read_pin {
        const char *data;
        uint32_t len;
        void *ref; /* internal */
};

/* Like shoal_reader_read, but instead of copying, hands out up to MAX pieces of the reader's own
 * block buffers that together cover the bytes read, in order; *NPINS says how many. The count
 * may be short of LEN when MAX pieces were used or no spare buffer was free: read the rest
 * another way. Every piece stays valid and unchanged until shoal_reader_unpin (call it soon:
 * pinned buffers are not available to other readers). On an error nothing stays pinned. */
long shoal_reader_read_pinned(struct shoal_reader *r, const struct shoal_object *obj, uint64_t off,
                              size_t len, struct shoal_read_pin *pins, unsigned max,
                              unsigned *npins, struct shoal_stream *s);
void shoal_reader_unpin(struct shoal_reader *r, struct shoal_read_pin *pins, unsigned n);

/* A whole block held in memory, for a server answering a peer. */
struct shoal_held_block {
        const char *data; /* block bytes, valid until shoal_reader_release */
        uint32_t len;
        struct shoal_block_id id;
        void *ref; /* internal */
};

/* On an owner: makes block INDEX of OBJ valid in memory — from the disk cache, else from the
 * store (one download however many ask; the block is then inserted into the disk cache) — and
 * holds it. OBJ must be the caller's own knowledge of the object (a stat), never a peer's claim:
 * its size fixes the block's length. Returns 0, -ENOENT/-ESTALE for a missing or changed object
 * (-ESTALE also when the block is held with another length), -EINVAL for an index past the end,
 * -EIO when the store failed, -EBUSY when no buffer came free in time. */
int shoal_reader_hold_block(struct shoal_reader *r, const struct shoal_object *obj, uint32_t index,
                            struct shoal_held_block *hb);
void shoal_reader_release(struct shoal_reader *r, struct shoal_held_block *hb);

/* True while a fill of block ID is under way in R (a member answering as the next member in a
 * block's order refuses a second request for it rather than wait on a fill that may be waiting
 * for that very requester). */
bool shoal_reader_filling(struct shoal_reader *r, const struct shoal_block_id *id);

/* Sets the group once it has been joined (the server side starts before the join). */
void shoal_reader_set_group(struct shoal_reader *r, struct shoal_group *g);

/* The disk cache this reader uses (may be NULL). */
struct shoal_cache *shoal_reader_cache(struct shoal_reader *r);
/* The object store this reader fills from. */
struct shoal_store *shoal_reader_store(struct shoal_reader *r);

/* Base and length of the mapping all block buffers are carved from (registered once for RDMA, so
 * that payloads land directly in block buffers). */
void *shoal_reader_buffers(struct shoal_reader *r, size_t *len);

#endif
