/* Local disk cache [L1-L3, L5].
 *
 * Layout: each cache dir holds DIR/shoal-<volume fingerprint hex, 16 chars>/ with
 *   blocks/XX/YY/<block id hex>   (fan-out by the first two bytes of the id; never a user key)
 *   tmp/                          (inserts are written here, then renamed into blocks/; emptied at
 *                                  start)
 * A block file is a header of HEADER_LEN bytes (a multiple of 4096, so data starts aligned for
 * O_DIRECT) followed by the block's data:
 *   magic "SHOALBLK", format version, header length, block id, data length, chunk size, chunk
 *   count, one CRC32C per chunk (shoal_chunk_crc: seeded with id and chunk index), and a CRC of
 *   the header itself.
 * Reads verify the header (magic, id equal to the id asked for, its CRC) and the CRC of every
 * chunk they return. Anything wrong removes the file, counts blockcache_checksum_errors, and the
 * caller sees a miss (-EBADMSG); a reader never receives wrong bytes. A sound file whose length is
 * not the one a caller expected is kept (-ERANGE): only the file's own header and CRCs count as
 * evidence against it.
 *
 * Capacity: --cache-size bytes (0 = no disk cache: open succeeds with no dirs, every lookup
 * misses, inserts are dropped; -1 = unlimited, bounded by free_space_ratio of each dir's
 * filesystem). Eviction is LRU over an in-memory index rebuilt at start by scanning the dirs, so a
 * restart keeps the cache. Blocks are spread over dirs by id.
 *
 * Failing dirs [L5]: an I/O error or ENOSPC on a dir is counted; a dir with repeated I/O errors is
 * taken out of use for a while and probed later. A failing dir only ever produces misses and
 * dropped inserts, never an error to the application.
 *
 * Thread-safe: every function may be called from any thread. */
#ifndef SHOAL_CACHE_CACHE_H
#define SHOAL_CACHE_CACHE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"

struct shoal_cache;

struct shoal_cache_config {
        /* colon-separated, globs allowed (glob(3)); NULL/"" = none. Each folder is locked for
         * this process while the cache is open: one process per folder. */
        const char *dirs;
        int64_t size_bytes;      /* 0 = no disk cache, -1 = unlimited, else a byte limit */
        double free_space_ratio; /* keep at least this fraction free per filesystem (0.1) */
        const struct shoal_volume *volume; /* must outlive the cache */
};

/* Opens (creating folders as needed) and indexes the cache into *OUT. Returns 0, or a negative
 * errno with one line in ERR: -EINVAL when the configuration cannot work (a size below -1, a
 * free-space ratio outside [0, 1), no volume, a folder that another process holds: the message
 * names the folder and the holder's pid); any other errno is a failure at run time (no dir
 * matched, a dir cannot be created, indexing failed, no memory). */
int shoal_cache_open(const struct shoal_cache_config *cfg, struct shoal_cache **out, char *err,
                     size_t errlen);
void shoal_cache_close(struct shoal_cache *c);

/* The group member id kept in the cache's folders (FOLDER/.shoal-member) for the cache's volume:
 * read when a folder holds one, else drawn now and written into every folder, so that a restart
 * on the same folders is the same member [issue 26]. Returns 0 with the id in ID (IDLEN >= 33);
 * -ENOENT when the cache has no folder (no disk cache: the caller draws an id of its own);
 * -EINVAL with one line in ERR when a folder was made for another volume or block size, the
 * folders disagree, or the file is malformed; another negative errno on an I/O error. */
int shoal_cache_member_id(struct shoal_cache *c, char *id, size_t idlen, char *err, size_t errlen);

/* True when the cache has at least one usable dir and a non-zero size. */
bool shoal_cache_enabled(const struct shoal_cache *c);

enum shoal_cache_read_mode {
        SHOAL_CACHE_READ_BUFFERED = 0, /* pread through the page cache */
        SHOAL_CACHE_READ_DIRECT = 1,   /* O_DIRECT into an aligned buffer */
};

/* An open cached block. Owned by the caller between open and close. */
struct shoal_cache_block {
        int fd;            /* buffered read fd (for sendfile/splice/pread) */
        uint64_t data_off; /* file offset of the block's byte 0 */
        uint32_t len;      /* block length in bytes */
        struct shoal_block_id id;
        uint32_t crcs[SHOAL_MAX_CHUNKS]; /* chunk CRCs from the verified header */
        int dir;                         /* internal */
        int dfd; /* internal: O_DIRECT fd, opened by the first direct read, closed by close */
};

/* Opens block ID, expecting EXPECT_LEN bytes (0: any; the length is then the header's, in
 * B->len). Verifies the header. Returns 0; -ENOENT when not cached (or its dir is out of use);
 * -ERANGE when the file is sound but holds another length than EXPECT_LEN (it is kept: a file is
 * removed only on evidence from its own header and CRCs, never on a caller's claim); -EBADMSG when
 * the file was corrupt (it has been removed); -EIO on an I/O error (the dir is marked); rarely
 * another errno (-EMFILE). Marks the block recently used. Every failure counts blockcache_miss
 * here, so callers need not. On success the caller must call shoal_cache_block_close. */
int shoal_cache_open_block(struct shoal_cache *c, const struct shoal_block_id *id,
                           uint32_t expect_len, struct shoal_cache_block *b);
/* Like shoal_cache_open_block, but a miss is not counted: for a second look at a block whose
 * request has counted its miss already (an owner's fill after its disk worker's lookup, and the
 * open that follows the fill), so that a cold block counts one miss. */
int shoal_cache_open_block_again(struct shoal_cache *c, const struct shoal_block_id *id,
                                 uint32_t expect_len, struct shoal_cache_block *b);

/* Like shoal_cache_open_block, for an event loop: without waiting for the disk. When the file's
 * name is not in the kernel's lookup cache or its header not in the page cache, -EAGAIN (nothing
 * changed but the block's recency). Counts no miss: after any failure the caller retries with
 * shoal_cache_open_block on a thread that may wait, which counts it. */
int shoal_cache_open_block_nowait(struct shoal_cache *c, const struct shoal_block_id *id,
                                  uint32_t expect_len, struct shoal_cache_block *b);

/* Reads the chunk-aligned range [OFF, OFF+LEN) of B into BUF and verifies each chunk's CRC
 * (shoal_range_valid must hold). With SHOAL_CACHE_READ_DIRECT, BUF must be 4096-aligned with
 * room for LEN rounded up to 4096. Returns 0; -EBADMSG on a checksum mismatch or short file (the
 * block is removed); -EIO on an I/O error. */
int shoal_cache_block_read(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                           uint32_t len, void *buf, enum shoal_cache_read_mode mode);

/* Like shoal_cache_block_read, but without the chunk CRC pass: for a member answering a
 * requester that verifies every chunk itself against the CRCs of B's verified header (sent with
 * the answer), so that a second pass over the data on the member adds nothing. A short file is
 * still -EBADMSG (removed), an I/O error -EIO. */
int shoal_cache_block_read_unverified(struct shoal_cache *c, struct shoal_cache_block *b,
                                      uint32_t off, uint32_t len, void *buf,
                                      enum shoal_cache_read_mode mode);

/* Moves the chunk-aligned range [OFF, OFF+LEN) of B into the pipe whose write end is PIPE_WR
 * without copying it through user space, unverified (as shoal_cache_block_read_unverified). With
 * SHOAL_CACHE_READ_DIRECT the 4096-aligned part goes by O_DIRECT straight from the disk into the
 * pipe's own pages (the page cache is not filled) and a tail under 4096 bytes, or a file system
 * without O_DIRECT, through the page cache. The pipe must have room for LEN bytes. Returns 0;
 * -EAGAIN or -EPIPE when the pipe took less (nothing is said about the file); -EBADMSG for a
 * short file (removed); -EIO on an I/O error. */
int shoal_cache_block_splice(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                             uint32_t len, int pipe_wr, enum shoal_cache_read_mode mode);

/* Verifies the chunk CRCs of [OFF, OFF+LEN) of data already read into BUF against B's header
 * (for callers that read the file themselves). Returns true when all match. */
bool shoal_cache_block_verify(const struct shoal_cache_block *b, uint32_t off, uint32_t len,
                              const void *buf);

void shoal_cache_block_close(struct shoal_cache *c, struct shoal_cache_block *b);

/* B's data failed a check its caller made itself (shoal_cache_block_verify over a mapping of
 * B's file): removes the file as a read that met the damage would, counting
 * blockcache_checksum_errors, and logs WHY. B stays open: close it as usual. */
void shoal_cache_block_corrupt(struct shoal_cache *c, struct shoal_cache_block *b, const char *why);

/* Inserts a whole block: writes a temp file and renames it into place, evicting as needed.
 * Returns 0, or a negative errno (-ENOSPC, -EIO, -ENODEV when the cache is disabled or every dir
 * is out of use) after which nothing partial remains. Callers treat failure as "not cached". */
int shoal_cache_insert(struct shoal_cache *c, const struct shoal_block_id *id, const void *data,
                       uint32_t len);

/* Removes block ID if present (e.g. after a peer reported it corrupt). Returns 0 or -ENOENT. */
int shoal_cache_remove(struct shoal_cache *c, const struct shoal_block_id *id);

/* True when the index holds ID in a dir that is in use (no I/O). */
bool shoal_cache_contains(struct shoal_cache *c, const struct shoal_block_id *id);

struct shoal_cache_usage {
        uint64_t blocks;
        uint64_t bytes;    /* data + headers on disk */
        uint64_t capacity; /* configured limit in bytes (UINT64_MAX when unlimited) */
        unsigned dirs;     /* dirs in use */
        unsigned dirs_failing;
};
void shoal_cache_usage(struct shoal_cache *c, struct shoal_cache_usage *u);

/* The path of block ID's file in the dir that holds it (tests use it to corrupt files). Returns 0,
 * -ENOENT when the index does not hold ID, or -ENAMETOOLONG when OUTLEN is too small. */
int shoal_cache_block_path(struct shoal_cache *c, const struct shoal_block_id *id, char *out,
                           size_t outlen);

#endif
