/* The mount's inode table and metadata cache.
 *
 * Every path the kernel has looked up (and not yet forgotten) has one entry, found by path or by
 * inode number. Inode numbers are derived from a 64-bit hash of the path (probing past a
 * collision), so a path keeps its number across forget/lookup and across remounts unless two
 * paths collide. Each entry carries its attributes with an expiry (the --attr-cache TTL); a
 * directory entry may also carry its listing, shared by reference with open directory handles.
 * Thread-safe: one mutex guards the table; no call blocks on I/O. */
#ifndef SHOAL_FUSE_INODE_H
#define SHOAL_FUSE_INODE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"

#define SHOAL_INO_ROOT  1u
#define SHOAL_INO_STATS 2u
/* Numbers below this are reserved for fixed inodes; hashed numbers never take them. */
#define SHOAL_INO_FIRST_HASHED 16u

struct shoal_inode_attr {
        bool is_dir;
        uint64_t size;
        int64_t mtime_ns;
        char version[SHOAL_VERSION_MAX + 1]; /* empty for directories */
};

/* One child in a directory listing. */
struct shoal_dirent {
        char *name; /* one path component, never empty, no '/' */
        bool is_dir;
        uint64_t size;
        int64_t mtime_ns;
        char *version; /* "" for directories */
};

/* A directory's listing at one moment, sorted by name, immutable once published. */
struct shoal_dirlist {
        unsigned refs; /* atomic */
        uint64_t expiry_ns;
        size_t n, cap;
        struct shoal_dirent *ents;
};

struct shoal_itable;

/* Creates a table with only the root (a directory). TTL_NS bounds how long attributes and
 * listings are trusted. Returns NULL on allocation failure. */
struct shoal_itable *shoal_itable_create(uint64_t ttl_ns);
/* Frees every entry and drops the table's listing references. */
void shoal_itable_destroy(struct shoal_itable *t);
/* Makes T's TTLs run on NOW_NS (nanoseconds, never going back) instead of the monotonic clock;
 * NULL restores it. For tests, so that expiry is a step of their own clock, not a sleep. */
void shoal_itable_set_clock(struct shoal_itable *t, uint64_t (*now_ns)(void));

/* Copies INO's path ("" for the root, else "a/b" without a trailing '/') into BUF and its type
 * into *IS_DIR. Returns 0, -ENOENT for an unknown inode, -ENAMETOOLONG when BUF is too small. */
int shoal_itable_path(struct shoal_itable *t, uint64_t ino, char *buf, size_t len, bool *is_dir);

/* Finds or adds PATH, stores A as its fresh attributes and counts one kernel lookup. Returns 0
 * with *INO set, or -ENOMEM. */
int shoal_itable_ref(struct shoal_itable *t, const char *path, const struct shoal_inode_attr *a,
                     uint64_t *ino);
/* Drops N kernel lookups of INO; the entry is freed at zero. Unknown inodes are ignored. */
void shoal_itable_forget(struct shoal_itable *t, uint64_t ino, uint64_t n);

/* Copies INO's attributes into A and sets *FRESH when they are within the TTL. Returns 0 or
 * -ENOENT. */
int shoal_itable_getattr(struct shoal_itable *t, uint64_t ino, struct shoal_inode_attr *a,
                         bool *fresh);
/* Replaces INO's attributes with A (fresh from now). Unknown inodes and files being written are
 * ignored (clear the mark first to publish a written file's attributes). */
void shoal_itable_setattr(struct shoal_itable *t, uint64_t ino, const struct shoal_inode_attr *a);

/* Writes [W1]. A file being written has its attributes from the writer (always fresh, never
 * from the store) until the upload ends. set_writing marks INO (-EBUSY when it already is, -ENOENT
 * when unknown) or clears the mark (ON false; returns 0). */
int shoal_itable_set_writing(struct shoal_itable *t, uint64_t ino, bool on);
/* When PATH is being written: counts one kernel lookup, copies its attributes into A, sets *INO
 * and returns 0; else -ENOENT. */
int shoal_itable_ref_writing(struct shoal_itable *t, const char *path, struct shoal_inode_attr *a,
                             uint64_t *ino);
/* Whether PATH is being written. */
bool shoal_itable_is_writing(struct shoal_itable *t, const char *path);
/* Whether any file under folder PREFIX ("a/b", "" for the root) is being written. */
bool shoal_itable_writing_under(struct shoal_itable *t, const char *prefix);
/* The size of a file being written, so far (mtime: now). Ignored for other inodes. */
void shoal_itable_write_size(struct shoal_itable *t, uint64_t ino, uint64_t size);
/* Makes INO's attributes stale, so that the next getattr asks the store (a failed upload, a
 * delete). Unknown inodes are ignored. */
void shoal_itable_expire(struct shoal_itable *t, uint64_t ino);
/* Forgets INO's listing (a child appeared or went). Unknown inodes are ignored. */
void shoal_itable_dirlist_drop(struct shoal_itable *t, uint64_t ino);

/* Records that INO was opened at VERSION; returns true when the previous open saw the same
 * version (so the kernel may keep its page cache). */
bool shoal_itable_note_open(struct shoal_itable *t, uint64_t ino, const char *version);

/* The inode number PATH has or would get now (for readdir's d_ino; no entry is made). */
uint64_t shoal_itable_ino_of(struct shoal_itable *t, const char *path);

/* INO's listing with a reference taken when it is within the TTL, else NULL. */
struct shoal_dirlist *shoal_itable_dirlist_get(struct shoal_itable *t, uint64_t ino);
/* Publishes L as INO's listing (expiring one TTL from now); the table takes its own reference.
 * Unknown inodes are ignored. */
void shoal_itable_dirlist_set(struct shoal_itable *t, uint64_t ino, struct shoal_dirlist *l);

/* Listing construction (by one thread, before publishing). new returns a list with one reference
 * or NULL; add copies NAME and VERSION and returns 0 or -ENOMEM; seal sorts by name and drops a
 * file that has the same name as a directory (the directory wins, as in S3 browsers). */
struct shoal_dirlist *shoal_dirlist_new(void);
int shoal_dirlist_add(struct shoal_dirlist *l, const char *name, size_t name_len, bool is_dir,
                      uint64_t size, int64_t mtime_ns, const char *version);
void shoal_dirlist_seal(struct shoal_dirlist *l);
void shoal_dirlist_put(struct shoal_dirlist *l);
/* The child NAME of a sealed list, or NULL. */
const struct shoal_dirent *shoal_dirlist_find(const struct shoal_dirlist *l, const char *name);

#endif
