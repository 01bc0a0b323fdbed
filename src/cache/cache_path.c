/* Block file names: blocks/XX/YY/<id hex> in each cache folder (fan-out by the first two bytes
 * of the id), opened, renamed and unlinked.
 *
 * Paths below a dir's blocks/ folder are never resolved through symlinks: the fan-out folders are
 * opened with O_NOFOLLOW one level at a time (or in one openat2 with RESOLVE_NO_SYMLINKS), so a
 * link planted in the cache dir can neither redirect a write nor expose a foreign file. */
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "cache/cache_internal.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define MOD "cache"

static void fanout_names(const struct shoal_block_id *id, char xx[3], char yy[3])
{
        shoal_hex(&id->b[0], 1, xx);
        shoal_hex(&id->b[1], 1, yy);
}

static int open_subdir(int parent, const char *name, bool create)
{
        for (int tries = 0; tries < 2; tries++) {
                int fd = openat(parent, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
                if (fd >= 0)
                        return fd;
                if (errno != ENOENT || !create)
                        return -errno;
                if (mkdirat(parent, name, CACHE_DIR_MODE) && errno != EEXIST)
                        return -errno;
        }
        return -ENOENT;
}

int cache_fanout_open(struct cache_dir *d, const struct shoal_block_id *id, bool create)
{
        char xx[3], yy[3];
        fanout_names(id, xx, yy);
        int fd1 = open_subdir(d->blocks_fd, xx, create);
        if (fd1 < 0)
                return fd1;
        int fd2 = open_subdir(fd1, yy, create);
        close(fd1);
        return fd2;
}

static atomic_bool no_openat2;

int cache_block_open_file_how(struct cache_dir *d, const struct shoal_block_id *id, int flags,
                              bool nowait)
{
        char hex[SHOAL_BLOCK_ID_HEX], rel[8 + SHOAL_BLOCK_ID_HEX];
        shoal_block_id_hex(id, hex);

        if (!atomic_load_explicit(&no_openat2, memory_order_relaxed)) {
                struct open_how how = {
                        .flags = (uint64_t)(flags | O_NOFOLLOW),
                        .resolve = RESOLVE_NO_SYMLINKS | RESOLVE_BENEATH |
                                   (nowait ? RESOLVE_CACHED : 0),
                };
                snprintf(rel, sizeof(rel), "%.2s/%.2s/%s", hex, hex + 2, hex);
                long fd = syscall(SYS_openat2, d->blocks_fd, rel, &how, sizeof(how));
                if (fd >= 0)
                        return (int)fd;
                /* Seccomp filters answer EPERM or ENOSYS for syscalls they do not know. */
                if (errno != ENOSYS && errno != EPERM)
                        return -errno;
                atomic_store(&no_openat2, true);
        }
        if (nowait)
                return -EAGAIN;
        int leaf = cache_fanout_open(d, id, false);
        if (leaf < 0)
                return leaf;
        int fd = openat(leaf, hex, flags | O_NOFOLLOW);
        int ret = fd < 0 ? -errno : fd;
        close(leaf);
        return ret;
}

int cache_block_open_file(struct cache_dir *d, const struct shoal_block_id *id, int flags)
{
        return cache_block_open_file_how(d, id, flags, false);
}

pthread_mutex_t *cache_path_lock(struct shoal_cache *c, const struct shoal_block_id *id)
{
        return &c->path_locks[shoal_mix64(shoal_block_id_hash64(id)) % CACHE_PATH_LOCKS];
}

void cache_block_unlink(struct shoal_cache *c, unsigned di, const struct shoal_block_id *id)
{
        char hex[SHOAL_BLOCK_ID_HEX];
        int leaf = cache_fanout_open(&c->dirs[di], id, false);
        if (leaf < 0)
                return;
        shoal_block_id_hex(id, hex);
        if (unlinkat(leaf, hex, 0) && cache_dir_failure(-errno))
                cache_dir_io_error(c, di, -errno);
        close(leaf);
}

/* Only the file found corrupt is unlinked, never a good one that a concurrent insert put under the
 * same name; a symlink or FIFO in its place goes too (unlinkat removes the link, not its target,
 * and the folders above were opened without following links). */
void cache_block_forget(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                        const struct stat *bad)
{
        char hex[SHOAL_BLOCK_ID_HEX];
        pthread_mutex_t *pl = cache_path_lock(c, id);
        struct cache_entry *e = NULL;
        struct stat st;
        bool present = false, drop_file = false;

        shoal_block_id_hex(id, hex);
        pthread_mutex_lock(pl);
        int leaf = cache_fanout_open(&c->dirs[di], id, false);
        if (leaf >= 0 && fstatat(leaf, hex, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                present = true;
                drop_file = !S_ISREG(st.st_mode) ||
                            (bad && st.st_dev == bad->st_dev && st.st_ino == bad->st_ino);
        }
        if (!present || drop_file) {
                pthread_mutex_lock(&c->lock);
                e = cache_index_find_locked(c, id);
                if (e && e->dir == di)
                        cache_entry_detach_locked(c, e);
                else
                        e = NULL;
                pthread_mutex_unlock(&c->lock);
        }
        if (drop_file)
                unlinkat(leaf, hex, 0);
        if (leaf >= 0)
                close(leaf);
        pthread_mutex_unlock(pl);
        free(e);
}

void cache_block_corrupt(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                         const struct stat *bad, const char *why)
{
        char hex[SHOAL_BLOCK_ID_HEX];
        shoal_block_id_hex(id, hex);
        log_ratelimited(SHOAL_LOG_WARN, MOD, "block %s in %s: %s, removed", hex, c->dirs[di].root,
                        why);
        shoal_metric_inc(SHOAL_M_blockcache_checksum_errors);
        cache_block_forget(c, id, di, bad);
}
