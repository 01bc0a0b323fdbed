/* Inside the cache module: what a cache folder (one element of --cache-dir) holds besides blocks.
 *
 *   FOLDER/.shoal-lock    the lock: one process per folder (flock, exclusive), the holder's pid
 *                         written in it for the message another process prints
 *   FOLDER/.shoal-member  the member identity: the id a group member keeps across restarts, with
 *                         the volume and block size it was made for
 *
 * Not for other modules: they go through cache.h. */
#ifndef SHOAL_CACHE_CACHE_FOLDER_H
#define SHOAL_CACHE_CACHE_FOLDER_H

#include <limits.h>
#include <stddef.h>
#include <sys/types.h>

#include "common/block.h"

struct cache_folder {
        char path[PATH_MAX];
        int lock_fd;
        dev_t dev;
        ino_t ino;
};

struct cache_folders {
        struct cache_folder *v;
        unsigned n;
};

/* Locks folder PATH for this process and adds it to F, unless F holds it already (listed twice,
 * or matched by two globs). Returns 0; -EBUSY with one line in ERR naming the folder and the
 * holder's pid when another process (or another cache of this one) holds it; another negative
 * errno when the lock file cannot be made. */
int shoal_cache_folder_lock(struct cache_folders *f, const char *path, char *err, size_t errlen);

/* Lets go of every lock in F and frees it. */
void shoal_cache_folders_release(struct cache_folders *f);

/* The member id kept in F's folders for VOL (see shoal_cache_member_id in cache.h). */
int shoal_cache_folders_member_id(struct cache_folders *f, const struct shoal_volume *vol, char *id,
                                  size_t idlen, char *err, size_t errlen);

#endif
