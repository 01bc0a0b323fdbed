/* Inside the disk cache: the cache object and what its files share. Other modules go through
 * cache.h. The files, each one mechanism:
 *
 *   cache_disk.c    open and close: the folders (locked, created, emptied of unfinished inserts),
 *                   the index rebuilt from them
 *   cache_index.c   the index and eviction: hash table, one LRU per folder, the byte budget and
 *                   each filesystem's free space, the scan that rebuilds it at start
 *   cache_health.c  folder health [L5]: I/O errors counted, a failing folder out of use and probed,
 *                   placement over the folders in use
 *   cache_path.c    block file names: opened without following symlinks, renamed and unlinked
 *                   under the path locks
 *   cache_block.c   a block opened (its header and CRC table verified), inserted, removed
 *   cache_read.c    reads of an open block: verified, unverified, spliced; O_DIRECT
 *   cache_folder.c  the folder lock and member identity (cache_folder.h)
 *   cache_format.c  the block file's header, pure (cache_format.h)
 *
 * Locking: one mutex (lock) guards the index (hash table + one LRU per dir), the byte counters
 * and the per-dir state; no file I/O happens under it. Changes to the name of a block file
 * (rename into place, unlink) and the matching index change happen together under one of
 * PATH_LOCKS striped mutexes chosen by id (cache_path_lock), taken before lock. So an eviction
 * whose unlink comes late cannot delete the file that a concurrent re-insert of the same id just
 * renamed into place: it sees the new index entry and leaves the name alone. At rest, a file
 * exists exactly when the index holds it. Reads take no path lock; an open fd keeps an unlinked
 * file readable.
 *
 * Functions named *_locked are called with c->lock held; the others take it themselves. */
#ifndef SHOAL_CACHE_CACHE_INTERNAL_H
#define SHOAL_CACHE_CACHE_INTERNAL_H

#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>

#include "cache/cache.h"
#include "cache/cache_folder.h"
#include "common/lru.h"
#include "common/util.h"

#define CACHE_DIR_DOWN_NS (30 * SHOAL_NS_PER_SEC) /* a failing dir's time out of use */
#define CACHE_DFD_NONE    (-1)                    /* shoal_cache_block.dfd: not opened yet */
#define CACHE_DFD_NO      (-2)                    /* shoal_cache_block.dfd: no O_DIRECT here */
#define CACHE_DIR_MODE    0700                    /* cached data is the user's data */
#define CACHE_FILE_MODE   0600
#define CACHE_PATH_LOCKS  64

struct cache_entry {
        struct shoal_list lru; /* in its dir's LRU */
        struct cache_entry *hnext;
        struct shoal_block_id id;
        uint64_t bytes; /* file size: header + data */
        uint64_t tick;  /* last use (c->tick); file mtime during the start-up scan */
        unsigned dir;
};

enum dir_state {
        DIR_OK,
        DIR_DOWN,    /* out of use until down_until_ns */
        DIR_PROBING, /* back in use; one more I/O error takes it out again */
};

struct cache_dir {
        char root[PATH_MAX]; /* DIR/shoal-<volume fingerprint> */
        int blocks_fd, tmp_fd;
        dev_t dev;
        ino_t ino;
        unsigned fs; /* index of the first dir on the same filesystem: it holds the fs_* fields */

        /* Everything below is guarded by the cache lock; state may also be read without it. */
        struct shoal_lru lru; /* front = most recently used */
        _Atomic int state;
        unsigned nerr;
        uint64_t err_since_ns, down_until_ns;
        bool fs_known, fs_refreshing;
        uint64_t fs_total, fs_avail, fs_checked_ns;
        int64_t fs_delta; /* bytes written since the last statvfs, minus bytes removed */
};

struct shoal_cache {
        pthread_mutex_t lock;
        pthread_mutex_t path_locks[CACHE_PATH_LOCKS];
        struct cache_dir *dirs;
        unsigned ndirs;
        bool enabled; /* size != 0 and at least one dir */
        uint64_t capacity;
        double ratio;
        uint64_t down_ns;    /* how long a failing dir stays out of use */
        uint64_t clock_skew; /* atomic; added to the clock of dir health (tests move time) */
        _Atomic unsigned dirs_down;
        _Atomic uint64_t tmp_seq;
        struct cache_folders folders; /* locked for this process (cache_folder.h) */
        const struct shoal_volume *volume;

        /* Guarded by lock. */
        struct cache_entry **buckets;
        size_t nbuckets, count;
        uint64_t bytes;    /* indexed files */
        uint64_t reserved; /* inserts in flight (their temp files) */
        uint64_t tick;
};

/* The dir that holds the fs_* fields of dir DI's filesystem. */
static inline struct cache_dir *cache_fs_of(struct shoal_cache *c, unsigned di)
{
        return &c->dirs[c->dirs[di].fs];
}

/* ---- cache_index.c: the index and eviction ---- */

/* Sets up the empty index of C. Returns 0 or -ENOMEM. */
int cache_index_init(struct shoal_cache *c);
/* Frees every entry (no file is touched) and the hash table. */
void cache_index_free(struct shoal_cache *c);
/* Rebuilds the index from the files on disk [L3]. Returns 0 or -ENOMEM. */
int cache_index_rebuild(struct shoal_cache *c);
/* Evicts the coldest blocks until the indexed bytes fit the capacity (configured smaller than the
 * last process's). */
void cache_index_shrink(struct shoal_cache *c);

struct cache_entry *cache_index_find_locked(struct shoal_cache *c, const struct shoal_block_id *id);
/* Adds E (in no index, E->dir set) to the index as the most recently used of its dir. */
void cache_entry_attach_locked(struct shoal_cache *c, struct cache_entry *e);
/* Takes E out of the index; the caller frees it (after unlinking its file, if it should). */
void cache_entry_detach_locked(struct shoal_cache *c, struct cache_entry *e);
/* E was just used. */
void cache_entry_touch_locked(struct shoal_cache *c, struct cache_entry *e);

/* Evicts until FSIZE more bytes for block ID fit under the capacity and leave free_space_ratio
 * free on the filesystem of dir DI, then reserves them. A copy of ID already in DI counts as
 * freed, since the rename will replace it. The evicted entries are chained through hnext onto
 * *VICTIMS, for cache_release_victims once the lock is dropped. Returns 0 or -ENOSPC (nothing
 * reserved). */
int cache_make_room_locked(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                           uint64_t fsize, struct cache_entry **victims);
/* An insert of FSIZE bytes into dir DI ends: its reservation is given back. After -ENOSPC or
 * -EDQUOT (ERR) the estimate of free space was wrong (others write to that filesystem too): some
 * room is freed onto *VICTIMS and the real figures are looked at next time. */
void cache_unreserve_locked(struct shoal_cache *c, unsigned di, uint64_t fsize, int err,
                            struct cache_entry **victims);
/* Unlinks the files of detached entries V and frees them, unless the same id was inserted into
 * the same dir again since (then the name holds the new file). Takes the path locks. */
void cache_release_victims(struct shoal_cache *c, struct cache_entry *v);
/* Looks at the free space of dir DI's filesystem when the last look is older than a second. */
void cache_fs_refresh(struct shoal_cache *c, unsigned di);

/* ---- cache_health.c: folder health [L5] ---- */

/* Whether ERR (a negative errno) says the dir's disk or filesystem is failing. */
bool cache_dir_failure(int err);
/* The clock dir health runs on: monotonic, moved forward only by shoal_cache_debug_advance. */
uint64_t cache_health_now(const struct shoal_cache *c);
/* Whether dir D is in use at NOW; a dir out of use comes back (probing) once its time is up. */
bool cache_dir_usable_locked(struct shoal_cache *c, struct cache_dir *d, uint64_t now);
/* Counts the I/O error ERR on dir DI; repeated errors take the dir out of use. */
void cache_dir_io_error(struct shoal_cache *c, unsigned di, int err);
/* An I/O on dir DI succeeded: a probing dir is healthy again. */
void cache_dir_io_ok(struct shoal_cache *c, unsigned di);
/* The usable dir for block ID at NOW, or -1 when every dir is out of use. */
int cache_pick_dir_locked(struct shoal_cache *c, const struct shoal_block_id *id, uint64_t now);

/* ---- cache_path.c: block file names, without symlinks ---- */

/* The path lock of ID. */
pthread_mutex_t *cache_path_lock(struct shoal_cache *c, const struct shoal_block_id *id);
/* Opens blocks/XX/YY of ID in D (creating the folders with CREATE). Returns an O_PATH fd or
 * -errno. */
int cache_fanout_open(struct cache_dir *d, const struct shoal_block_id *id, bool create);
/* Opens the block file of ID in D with FLAGS. Returns an fd or -errno (-ELOOP, -ENOTDIR or
 * -EXDEV when a symlink stands in the way). NOWAIT: only from the kernel's lookup cache, else
 * -EAGAIN (and always where openat2 is refused). */
int cache_block_open_file_how(struct cache_dir *d, const struct shoal_block_id *id, int flags,
                              bool nowait);
int cache_block_open_file(struct cache_dir *d, const struct shoal_block_id *id, int flags);
/* Unlinks block ID's file in dir DI. Call with the path lock of ID held. */
void cache_block_unlink(struct shoal_cache *c, unsigned di, const struct shoal_block_id *id);
/* Drops ID in dir DI after a failed open or read. BAD is the file found corrupt (NULL: none was
 * opened). Takes the path lock. */
void cache_block_forget(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                        const struct stat *bad);
/* Block ID in dir DI was found corrupt (WHY, for the log): counted and forgotten. */
void cache_block_corrupt(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                         const struct stat *bad, const char *why);

/* ---- test hooks (only tests/unit/test_cache.c uses these) ----
 * They exist because the failure paths they drive (I/O errors from a dying disk, time passing)
 * cannot be produced on demand in a unit test. */

/* Records the I/O error ERR (a negative errno such as -EIO) on dir DIR (its index in the order the
 * dirs were configured and matched), exactly as a failed read or write there would. */
void shoal_cache_debug_dir_error(struct shoal_cache *c, unsigned dir, int err);

/* Sets how long a failing dir stays out of use before it is probed again (default 30 s). */
void shoal_cache_debug_set_down_ns(struct shoal_cache *c, uint64_t ns);

/* Moves the clock that dir health runs on NS forward (for C only), so a test sees a down time
 * end without waiting for it. */
void shoal_cache_debug_advance(struct shoal_cache *c, uint64_t ns);

#endif
