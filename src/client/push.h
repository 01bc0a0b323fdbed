/* Write-through into the group [W3]: the blocks of an object this process writes go to their
 * owners' caches once the store has committed it, keyed by the version the store assigned, so
 * the object's first readers in the group read no byte from the store.
 *
 * A writer stages what it writes in an unnamed local file (O_TMPFILE under $TMPDIR, else /tmp:
 * nothing of it survives the process). Nothing is pushed before the commit returned the final
 * version, so a failed or abandoned upload, or a killed writer, never makes a block addressable.
 * After the commit each block goes to the owner under this process's view (PUT_BLOCK through
 * the transport selector of transport/select.h, with the reads' member avoidance and timeout,
 * several blocks at once), or into this process's own cache when it is
 * the owner. Write-through is best effort: a block that cannot be staged or pushed is only
 * counted (remotecache_put_errors) and logged; its first reader fills it from the store as
 * before. The commit's outcome, and the application's, never depend on it. */
#ifndef SHOAL_CLIENT_PUSH_H
#define SHOAL_CLIENT_PUSH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "common/secret.h"

struct shoal_group;
struct shoal_cache;
struct shoal_remote;

struct shoal_push_config {
        const struct shoal_volume *vol;
        struct shoal_group *group;   /* the view that says who owns a block */
        struct shoal_cache *cache;   /* this process's cache, for blocks it owns (may be NULL) */
        struct shoal_remote *remote; /* the transports (the reader's); NULL: one of its own */
        struct shoal_secret secret;  /* for a transport of its own */
        unsigned threads;            /* blocks pushed at once per object (default 4) */
};

struct shoal_push;
struct shoal_push_stage;

/* NULL when out of memory. */
struct shoal_push *shoal_push_create(const struct shoal_push_config *cfg);
void shoal_push_destroy(struct shoal_push *p);

/* Starts staging one object. NULL (logged, rate-limited) when no staging file can be made: the
 * object is then written without write-through. P may be NULL (no group): returns NULL. */
struct shoal_push_stage *shoal_push_stage_begin(struct shoal_push *p);
/* Stages LEN more bytes. A failure (disk full) only turns write-through off for this object. */
void shoal_push_stage_append(struct shoal_push_stage *st, const void *data, size_t len);
/* The store committed the staged object as OBJ (its final version and size): pushes every block
 * and frees ST. Blocks until each block was cached or failed. Returns the blocks cached. */
unsigned shoal_push_stage_commit(struct shoal_push_stage *st, const struct shoal_object *obj);
/* Drops ST without pushing anything (NULL is a no-op). */
void shoal_push_stage_abort(struct shoal_push_stage *st);

#endif
