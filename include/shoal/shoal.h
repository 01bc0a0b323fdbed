/* libshoal: read objects through a shoal cache group from C, without FUSE.
 *
 * A client is one shoal node inside the calling process, opened from the same settings as the
 * command line (`shoal cat`): an object store (file:// or s3://), optionally a cache group to read
 * through (--meta, --cache-group), transports (--use-iorpc, --rdma-network), read buffers
 * (--buffer-size) and readahead. The client is a consumer: it reads blocks from the group's
 * members (which fill misses from the store) and serves nothing, so it opens no listening
 * socket; without a group it reads the store directly. See docs/library.md.
 *
 * Conventions
 * - Every function that can fail returns a negative errno (or NULL, with errno set to the
 *   positive value) and leaves a one-line message for the calling thread, read with
 *   shoal_errmsg(). -ENOENT: no such object; -EINVAL: a bad argument or setting; -ESTALE: the
 *   object changed since it was opened (open it again); -EIO: the object store failed (after
 *   retries); -EBUSY: no read buffer came free in time, or a client with open files was closed.
 * - Thread-safe: a client and its files may be used from any number of threads at once. Closing a
 *   file or a client that another thread is still using is the caller's bug (as with close(2)).
 * - fork(): a client opened before fork() works in the child. The child starts its own threads
 *   and connections on its first call (the parent's are not usable there); files opened before
 *   the fork keep working in both processes. fork() waits for calls in progress in other threads
 *   to finish, so it never copies a half-done call into the child. Pieces pinned by
 *   shoal_pread_pinned() before a fork are not valid in the child.
 * - Stable ABI: structures that callers allocate carry reserved space; new settings are new
 *   option names, never new struct fields. The SONAME is libshoal.so.SHOAL_ABI_VERSION.
 *
 * Writes create objects through a handle of their own (shoal_write_open(), shoal_write(),
 * shoal_write_close(): see "writing" below), with the mount's semantics (docs/writes.md). */
#ifndef SHOAL_SHOAL_H
#define SHOAL_SHOAL_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#define SHOAL_API __attribute__((visibility("default")))

#define SHOAL_ABI_VERSION 1

/* The library's version, "MAJOR.MINOR.PATCH". Never fails. */
SHOAL_API const char *shoal_version(void);

/* The message of the most recent failed call on the calling thread ("" before any). The string
 * belongs to the library and stays valid until the next call on this thread. */
SHOAL_API const char *shoal_errmsg(void);

/* ---- settings ---------------------------------------------------------------------------- */

struct shoal_options;

/* A new, empty set of settings (every setting at its default). NULL when out of memory. */
SHOAL_API struct shoal_options *shoal_options_new(void);
/* Frees O (NULL is fine). A client opened from O does not need O afterwards. */
SHOAL_API void shoal_options_free(struct shoal_options *o);

/* Sets the setting NAME to VALUE, both as on the command line without the dashes: "meta",
 * "cache-group", "cache-dir", "cache-size" (MiB or with a unit; 0 = no local disk cache, the
 * default here), "free-space-ratio", "block-size" (KiB or with a unit), "endpoint" (s3),
 * "use-iorpc" and other switches ("1"/"true"/"yes" or "0"/"false"/"no"), "rdma-network",
 * "rdma-provider", "buffer-size" (MiB or with a unit), "max-downloads", "prefetch" (blocks),
 * "group-secret-file", "metrics" (HOST:PORT of a Prometheus endpoint; none by default),
 * "log-level", "log-file", "strict-group" (a switch: a group that cannot share fails the open
 * with -EIO instead of a warning). VALUE NULL restores the default. Values are checked here:
 * returns 0, or -EINVAL for an unknown name, a flag that only a serving member takes
 * ("group-weight"), or a bad value (the message names both). */
SHOAL_API int shoal_options_set(struct shoal_options *o, const char *name, const char *value);

/* Sets the group secret to the LEN bytes at SECRET (16 to 4096 bytes, every byte counts, NUL
 * included; copied). Without it, the secret comes from "group-secret-file" or the
 * SHOAL_GROUP_SECRET environment variable, as on the command line. Returns 0 or -EINVAL. */
SHOAL_API int shoal_options_set_secret(struct shoal_options *o, const void *secret, size_t len);

/* ---- client ------------------------------------------------------------------------------ */

struct shoal_client;

/* Opens a client of the object store STORAGE (file:///dir, s3://bucket[/prefix]) with settings O
 * (NULL: defaults), joining the cache group if O names one. The first open of a process reads
 * the environment variables shoal takes (docs/operations.md). Returns NULL with errno set
 * (EINVAL: a bad setting or environment variable, the message says which; EIO or another errno:
 * a runtime failure such as an unreachable registry) and the message in shoal_errmsg(). */
SHOAL_API struct shoal_client *shoal_client_open(const char *storage,
                                                 const struct shoal_options *o);

/* Leaves the group and frees C. Returns 0, or -EBUSY (and closes nothing) while files of C are
 * open. C may be NULL. */
SHOAL_API int shoal_client_close(struct shoal_client *c);

/* What the store says about an object. Callers allocate it; the library fills every field and
 * zeroes the reserved ones. */
struct shoal_stat {
        uint64_t size;       /* bytes */
        int64_t mtime_ns;    /* modification time, nanoseconds since the epoch */
        uint32_t block_size; /* the volume's block size: reads aligned to it are cheapest */
        uint32_t flags;      /* none defined yet: 0 */
        char version[132];   /* NUL-terminated: the ETag (s3) or size+mtime (file) */
        uint64_t reserved[8];
};

/* Fills ST for object KEY of C's store. Returns 0, -ENOENT, -EINVAL (not a valid key), or
 * -EIO. */
SHOAL_API int shoal_stat(struct shoal_client *c, const char *key, struct shoal_stat *st);

/* ---- listing ----------------------------------------------------------------------------- */

/* One listing entry, owned by the listing and valid until the next shoal_list_next() or
 * shoal_list_close() on it. Fields may be added at the end. */
struct shoal_entry {
        const char *key;     /* full key; for a prefix it ends with '/' */
        uint32_t flags;      /* SHOAL_ENTRY_PREFIX */
        uint64_t size;       /* 0 for a prefix */
        int64_t mtime_ns;    /* 0 for a prefix */
        const char *version; /* "" for a prefix */
};
#define SHOAL_ENTRY_PREFIX 1u /* a common prefix ("folder"), not an object */

#define SHOAL_LIST_RECURSIVE 1 /* every object under the prefix; no prefix entries */

struct shoal_list;

/* Lists C's store under PREFIX ("" for all), in key order. Without SHOAL_LIST_RECURSIVE, keys
 * below the next '/' after PREFIX are folded into one prefix entry, as S3 does with a "/"
 * delimiter (list "dir/" to see a folder's contents). The listing is read in full here. Returns
 * NULL with errno set (EINVAL, EIO, ENOMEM) and a message. */
SHOAL_API struct shoal_list *shoal_list_open(struct shoal_client *c, const char *prefix, int flags);
/* The next entry, or NULL at the end. */
SHOAL_API const struct shoal_entry *shoal_list_next(struct shoal_list *l);
/* Frees L (NULL is fine). */
SHOAL_API void shoal_list_close(struct shoal_list *l);

/* ---- reading ----------------------------------------------------------------------------- */

#define SHOAL_RDONLY 0 /* the only mode today; writes will add SHOAL_WRONLY, SHOAL_CREAT */

struct shoal_file;

/* Opens object KEY of C for reading: stats it once and reads that version until closed (a
 * changed object makes reads fail with -ESTALE rather than mix versions). Returns NULL with
 * errno set (ENOENT, EINVAL, EIO) and a message. */
SHOAL_API struct shoal_file *shoal_open(struct shoal_client *c, const char *key, int flags);

/* Fills ST with what F was opened with. Returns 0. */
SHOAL_API int shoal_fstat(struct shoal_file *f, struct shoal_stat *st);

/* Reads up to LEN bytes at offset OFF of F into BUF, through the read buffers, the local cache,
 * the group and the store. Returns the bytes read (fewer only at the end of the object, 0 at or
 * past it) or a negative errno. Thread-safe, like pread(2): concurrent reads of one file are
 * fine. */
SHOAL_API ssize_t shoal_pread(struct shoal_file *f, void *buf, size_t len, uint64_t off);

/* A piece of the library's own read buffers, handed out without a copy. */
struct shoal_piece {
        const void *data;
        size_t len;
        void *ref[2]; /* the library's */
};

/* Like shoal_pread(), but instead of copying, hands out up to MAX pieces of the library's block
 * buffers that together hold the bytes read, in order (*NPIECES of them). The count may be short
 * of LEN (at most MAX pieces, or no spare buffer): read the rest with another call. The pieces
 * stay valid and unchanged until shoal_unpin(); unpin soon, since pinned buffers are not
 * available to other reads. On an error nothing stays pinned. */
SHOAL_API ssize_t shoal_pread_pinned(struct shoal_file *f, uint64_t off, size_t len,
                                     struct shoal_piece *pieces, unsigned max, unsigned *npieces);
/* Releases N pieces from shoal_pread_pinned() on F. */
SHOAL_API void shoal_unpin(struct shoal_file *f, struct shoal_piece *pieces, unsigned n);

/* Read-ahead hints for F, as posix_fadvise(2). */
#define SHOAL_ADVICE_NORMAL     0 /* default: read ahead once reads look sequential */
#define SHOAL_ADVICE_SEQUENTIAL 1 /* read ahead from the first read */
#define SHOAL_ADVICE_RANDOM     2 /* never read ahead */
#define SHOAL_ADVICE_WILLNEED   3 /* fetch the blocks of [OFF, OFF+LEN) in the background now */

/* Applies ADVICE to F (OFF and LEN matter only for WILLNEED; LEN 0 means to the end). Returns 0
 * or -EINVAL. WILLNEED is a hint: blocks are fetched as spare buffers allow. */
SHOAL_API int shoal_advise(struct shoal_file *f, uint64_t off, uint64_t len, int advice);

/* Closes F. Returns 0 (for writes it will report whether the object became durable). F may be
 * NULL. */
SHOAL_API int shoal_close(struct shoal_file *f);

/* ---- writing ----------------------------------------------------------------------------- */

/* A new object written from start to end, as through a mount (docs/writes.md): nothing appears
 * under the key until shoal_write_close() returned 0, and then the store has confirmed the whole
 * object (file://: fsynced and linked into place; s3://: PUT or CompleteMultipartUpload answered
 * 200). When the client is in a cache group, the object's blocks are then put into their owners'
 * caches before shoal_write_close() returns (write-through), so the group's first readers need no
 * store GET. A writer belongs to the process that opened it: it cannot be used in a forked
 * child. One thread at a time per writer; different writers are independent. */
struct shoal_writer;

#define SHOAL_WRITE_OVERWRITE 1 /* replace the object if it exists (else -EEXIST) */

/* Starts writing object KEY of C. FLAGS: 0 (a new object: -EEXIST when KEY exists, checked here
 * and again at the commit where the store can) or SHOAL_WRITE_OVERWRITE. Returns NULL with errno
 * set (EEXIST, EINVAL: a bad key or flag, EACCES, EIO) and a message. */
SHOAL_API struct shoal_writer *shoal_write_open(struct shoal_client *c, const char *key, int flags);
/* Appends LEN bytes of BUF to W's object (they are copied, or uploaded, before return). Returns
 * LEN, or a negative errno: -EIO (the store failed after retries), -EFBIG (past the largest
 * object the part size allows), -ENOSPC, -ENOMEM. After an error the upload is abandoned: every
 * later write returns the same error, and shoal_write_close() returns it too. */
SHOAL_API ssize_t shoal_write(struct shoal_writer *w, const void *buf, size_t len);
/* Commits W's object and frees W. Returns 0 once the store confirmed it; else a negative errno
 * (-EIO, -EEXIST when a new object's name appeared meanwhile, or the error a write returned) and
 * no object was written under the key (the previous object, if any, is untouched). */
SHOAL_API int shoal_write_close(struct shoal_writer *w);
/* Drops W without creating anything (the upload is aborted at the store) and frees W. W may be
 * NULL. */
SHOAL_API void shoal_write_abort(struct shoal_writer *w);

/* ---- access plans ------------------------------------------------------------------------ */

/* A plan tells the library the order in which the caller will read: items (KEY, OFF, LEN), in
 * read order, appended as the job goes (the queue is bounded, so a plan of millions of records
 * is never in memory at once). While the caller reads, the library fetches ahead in plan order,
 * from the local cache, the group's owners or the store, within a window of the read buffers
 * (part of buffer-size) and with a bounded number of requests in flight; a read that follows
 * the plan is then served from memory. A block that the plan uses again stays in the window if
 * its next use is nearer than that of what else the window holds. Reads of anything else (off
 * the plan) work as shoal_pread does. See docs/library.md, "Access plans". A plan belongs to the
 * process that made it (make plans in forked workers, not before the fork); it counts as an
 * open file of its client. Thread-safe. */
struct shoal_plan;

#define SHOAL_PLAN_TO_END UINT64_MAX /* an item's LEN: to the end of the object */

/* Makes an empty plan of C. WINDOW_BYTES: buffer memory for blocks fetched ahead (0: half of
 * buffer-size), at most buffer-size less 4 blocks, less what the client's other plans hold.
 * INFLIGHT: fetches at once (0: 8; at most 64). Returns NULL with errno set: EINVAL (a window
 * too large for buffer-size, INFLIGHT over 64), EBUSY (the client's other plans hold the rest of
 * the buffers), ENOMEM. */
SHOAL_API struct shoal_plan *shoal_plan_create(struct shoal_client *c, uint64_t window_bytes,
                                               unsigned inflight);

/* Appends the item [OFF, OFF+LEN) of object KEY (LEN SHOAL_PLAN_TO_END: to the end; clipped to
 * the object). KEY is not looked up here: a missing or invalid key is the error of the read of
 * this item, not before. Returns 0; -EAGAIN while the plan holds 4096 items not yet read (read
 * some, then add again); -EINVAL for no key, a key over 1024 bytes, or LEN 0. */
SHOAL_API int shoal_plan_add(struct shoal_plan *p, const char *key, uint64_t off, uint64_t len);

/* Reads up to LEN bytes at OFF of KEY into BUF, as shoal_pread(): the bytes read (fewer only at
 * the end of the object) or a negative errno. A read that starts exactly at one of the plan's next
 * 16 items not yet read, or falls inside one whose reading began (an item may be read in pieces),
 * follows the plan; once a read reaches the end of its item, the item is done. Items more than 8
 * behind the one read count as skipped (readers in several threads come a little out of order).
 * Anything else is read off the plan. An item whose key is missing reads -ENOENT (-EINVAL for an
 * invalid key). Objects are stat'ed once per plan: a plan reads the version it
 * saw first (-ESTALE after a change). */
SHOAL_API ssize_t shoal_plan_pread(struct shoal_plan *p, const char *key, void *buf, size_t len,
                                   uint64_t off);

/* What one plan did so far. Callers allocate it; the library fills every field. */
struct shoal_plan_stats {
        uint64_t hits;         /* reads following the plan, all of it in memory already */
        uint64_t misses;       /* reads following the plan that came before its fetch landed */
        uint64_t offplan;      /* reads of something the plan did not name next */
        uint64_t prefetched;   /* bytes fetched ahead */
        uint64_t unused;       /* of those, bytes of items skipped or never read */
        uint64_t window_bytes; /* buffer bytes the window holds now */
        uint64_t window_max;   /* the window's size */
        uint64_t queued;       /* items added and not yet read */
        uint64_t reserved[8];
};

/* Fills ST for P. Returns 0 or -EINVAL. */
SHOAL_API int shoal_plan_stats(const struct shoal_plan *p, struct shoal_plan_stats *st);

/* Stops fetching, gives the window back and frees P (NULL is fine). Not while another thread
 * reads through P. */
SHOAL_API void shoal_plan_destroy(struct shoal_plan *p);
/* ---- deleting and copying ----------------------------------------------------------------- */

/* Deletes object KEY of C's store (the call the mount's --allow-delete makes). Returns 0,
 * -ENOENT where the store can tell the object was not there (file://; s3:// answers 0),
 * -EINVAL (not a valid key), -EACCES or -EIO. Blocks the group cached of the deleted object are
 * never served for a later object under KEY: blocks are keyed by version, and a new object has a
 * new version (s3://: its ETag; file://: size and a fine-grained mtime stamped at commit). */
SHOAL_API int shoal_delete(struct shoal_client *c, const char *key);

/* Makes DST a copy of object SRC of C's store. Inside the store where it can (s3://: CopyObject,
 * up to 5 GiB, UploadPartCopy in parts above, and only while SRC is still the object stat'ed
 * first); otherwise (file://, an S3 store without UploadPartCopy) the bytes are read through the
 * client and written as by shoal_write_open().
 * In a cache group the copy's blocks are written through either way. FLAGS: 0 (DST must not exist:
 * -EEXIST, checked first) or SHOAL_WRITE_OVERWRITE. DST appears whole or not at all. Returns 0,
 * -ENOENT (no SRC), -EEXIST, -ESTALE (SRC changed during the copy), -EINVAL, -EACCES or -EIO. */
SHOAL_API int shoal_copy(struct shoal_client *c, const char *src, const char *dst, int flags);

/* ---- figures ----------------------------------------------------------------------------- */

/* The process-wide value of counter NAME, as on a member's metrics endpoint without labels
 * (e.g. "object_get_requests", "remotecache_get_requests", "buffer_hits"). In a forked child
 * it includes the parent's counts up to the fork. Returns 0, or -ENOENT for an unknown name or
 * a name that is not a counter. */
SHOAL_API int shoal_counter(const char *name, uint64_t *value);

#ifdef __cplusplus
}
#endif

#endif
