/* Object sizes the process learned itself [S4]: (key, version) -> size, from a stat of the store.
 *
 * A version names one content (ETag; size+mtime+inode+ctime for file://), so the size of (key,
 * version) never changes: entries need no expiry, only a bound on their number (least recently used
 * go first). Concurrent asks for one (key, version) share one stat (single flight). Only what the
 * store said is kept: errors are never cached, and a stat that finds another version records that
 * version's size (it is just as true) and answers -ESTALE.
 *
 * A member uses it to know a block's length without trusting the requester's claim. Thread-safe;
 * get may block on the store (call it on a worker thread), peek never does. */
#ifndef SHOAL_STORE_SIZES_H
#define SHOAL_STORE_SIZES_H

#include <stdint.h>

struct shoal_store;
struct shoal_store_sizes;

/* A cache of at most MAX_ENTRIES sizes over ST (which must outlive it). NULL when out of
 * memory. */
struct shoal_store_sizes *shoal_store_sizes_create(struct shoal_store *st, unsigned max_entries);
/* Frees the cache; no get may be running. NULL is a no-op. */
void shoal_store_sizes_destroy(struct shoal_store_sizes *c);

/* The size of KEY at VERSION into *SIZE: from memory, else from one stat of the store shared by
 * every concurrent caller. Returns 0; -ESTALE when the store holds another version; -ENOENT when
 * the object is missing; another negative errno when the stat failed (shoal_store_stat). */
int shoal_store_sizes_get(struct shoal_store_sizes *c, const char *key, const char *version,
                          uint64_t *size);

/* Like get, from memory only: 0 with *SIZE, or -ENOENT when not known (no I/O, never waits). */
int shoal_store_sizes_peek(struct shoal_store_sizes *c, const char *key, const char *version,
                           uint64_t *size);

/* Stats this cache has made of the store so far (tests check single flight with it). */
uint64_t shoal_store_sizes_stat_count(struct shoal_store_sizes *c);

#endif
