/* A block of the disk cache opened, inserted and removed.
 *
 * Open: the index names the folder, the file is opened without following symlinks, its header
 * read and verified (magic, the id asked for, the header's CRC, the length); the CRC table of its
 * chunks comes back in the shoal_cache_block for the reads (cache_read.c) to check against. Any
 * evidence against the file from its own header removes it (-EBADMSG); a reader never receives
 * wrong bytes.
 *
 * Insert: the header and data go to a temp file in tmp/, renamed into blocks/ under the block's
 * path lock together with the index change, after eviction made room. A failure leaves nothing
 * behind. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cache/cache_format.h"
#include "cache/cache_internal.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define MOD "cache"

/* ---- open ---- */

/* Reads LEN header bytes at OFF. NOWAIT: from the page cache only, else -EAGAIN. Returns the
 * bytes read or -errno. */
static long hdr_pread(int fd, void *buf, size_t len, uint64_t off, bool nowait)
{
        if (!nowait)
                return shoal_pread_full(fd, buf, len, off);
        struct iovec iov = {.iov_base = buf, .iov_len = len};
        ssize_t n = preadv2(fd, &iov, 1, (off_t)off, RWF_NOWAIT);
        if (n < 0)
                return errno == EOPNOTSUPP ? -EAGAIN : -errno;
        return (size_t)n < len ? -EAGAIN : n; /* the rest is not in the page cache */
}

/* The dir that holds ID, when the index has it in a dir in use; marks it recently used. */
static int index_lookup(struct shoal_cache *c, const struct shoal_block_id *id, unsigned *di)
{
        struct cache_entry *e;
        bool found;

        pthread_mutex_lock(&c->lock);
        e = cache_index_find_locked(c, id);
        found = e && cache_dir_usable_locked(c, &c->dirs[e->dir], cache_health_now(c));
        if (found) {
                cache_entry_touch_locked(c, e);
                *di = e->dir;
        }
        pthread_mutex_unlock(&c->lock);
        return found ? 0 : -ENOENT;
}

/* Opens block ID's file in dir DI: a regular file, in blocking mode, its stat in ST. Returns the
 * fd; -EAGAIN (NOWAIT and not in the lookup cache); -ENOENT (gone: forgotten); -EBADMSG (not a
 * plain file behind plain folders: removed); another -errno on an I/O error. */
static int open_file(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                     bool nowait, struct stat *st)
{
        /* O_NONBLOCK: a FIFO planted under a block's name must not hang the open. */
        int fd = cache_block_open_file_how(&c->dirs[di], id, O_RDONLY | O_CLOEXEC | O_NONBLOCK,
                                           nowait);
        int ret;

        if (fd == -ENOENT) {
                cache_block_forget(c, id, di, NULL);
                return -ENOENT;
        }
        if (fd == -ELOOP || fd == -ENOTDIR || fd == -EXDEV) {
                cache_block_corrupt(c, id, di, NULL, "symlink in the path");
                return -EBADMSG;
        }
        if (fd < 0)
                return fd;
        if (fstat(fd, st)) {
                ret = -errno;
                goto out_close;
        }
        if (!S_ISREG(st->st_mode)) {
                close(fd);
                cache_block_corrupt(c, id, di, st, "not a regular file");
                return -EBADMSG;
        }
        if (fcntl(fd, F_SETFL, 0)) {
                ret = -errno;
                goto out_close;
        }
        return fd;

out_close:
        close(fd);
        return ret;
}

/* Reads and verifies the header of block ID from FD (a regular file, stat ST): B gets the data
 * offset, the length and the CRC table of the chunks. This is where a block's CRCs come from, once
 * per open. Returns 0; -ERANGE when the file is sound but holds another length than EXPECT_LEN;
 * -EAGAIN (NOWAIT: the header is not all in the page cache, or the file looks short); -EBADMSG
 * with *WHY set when the file is corrupt; another -errno on an I/O error. */
static int hdr_load(int fd, const struct stat *st, const struct shoal_block_id *id,
                    uint32_t expect_len, bool nowait, struct shoal_cache_block *b, const char **why)
{
        unsigned char hdr[SHOAL_CACHE_HDR_MAX];
        uint32_t hlen, dlen;
        long n, m;
        int ret;

        n = hdr_pread(fd, hdr, (size_t)SHOAL_MIN((off_t)SHOAL_CACHE_HDR_ALIGN, st->st_size), 0,
                      nowait);
        if (n < 0)
                return (int)n;
        hlen = shoal_cache_hdr_peek_len(hdr, (size_t)n);
        if (!hlen)
                goto out_bad;
        if (hlen > (size_t)n) {
                if (nowait && (uint64_t)st->st_size < hlen)
                        return -EAGAIN; /* short: judged by a read that may wait */
                m = hdr_pread(fd, hdr + n, hlen - (size_t)n, (uint64_t)n, nowait);
                if (m < 0)
                        return (int)m;
                if (m != (long)(hlen - (size_t)n)) {
                        *why = "truncated header";
                        return -EBADMSG;
                }
        }
        ret = shoal_cache_hdr_decode(hdr, hlen, id, expect_len, &hlen, &dlen, b->crcs);
        if (ret == -ERANGE)
                return ret;
        if (ret)
                goto out_bad;
        if ((uint64_t)st->st_size < (uint64_t)hlen + dlen) {
                *why = "truncated";
                return -EBADMSG;
        }
        b->data_off = hlen;
        b->len = dlen;
        return 0;

out_bad:
        *why = "bad header";
        return -EBADMSG;
}

static int open_block(struct shoal_cache *c, const struct shoal_block_id *id, uint32_t expect_len,
                      struct shoal_cache_block *b, bool nowait, bool count_miss)
{
        const char *why = NULL;
        struct stat st;
        unsigned di = 0;
        int fd, ret;

        b->fd = -1;
        b->dfd = CACHE_DFD_NONE;
        ret = c && c->enabled ? index_lookup(c, id, &di) : -ENOENT;
        if (ret)
                goto out_miss;
        fd = open_file(c, id, di, nowait, &st);
        if (fd == -EAGAIN)
                return -EAGAIN;
        if (fd == -ENOENT || fd == -EBADMSG) {
                ret = fd;
                goto out_miss;
        }
        if (fd < 0) {
                ret = fd;
                goto out_ioerr;
        }
        ret = hdr_load(fd, &st, id, expect_len, nowait, b, &why);
        if (!ret) {
                b->fd = fd;
                b->id = *id;
                b->dir = (int)di;
                cache_dir_io_ok(c, di);
                return 0;
        }
        close(fd);
        if (why) {
                cache_block_corrupt(c, id, di, &st, why);
                ret = -EBADMSG;
                goto out_miss;
        }
        if (ret == -EAGAIN)
                return -EAGAIN;
        /* -ERANGE: the caller asked for another length: its claim, not the file, is in question. */
        if (ret == -ERANGE)
                goto out_miss;
out_ioerr:
        if (cache_dir_failure(ret)) {
                shoal_metric_inc(SHOAL_M_blockcache_read_errors);
                cache_dir_io_error(c, di, ret);
                ret = -EIO;
        }
out_miss:
        if (count_miss && !nowait) /* a nowait caller's retry that may wait counts it */
                shoal_metric_inc(SHOAL_M_blockcache_miss);
        return ret;
}

int shoal_cache_open_block(struct shoal_cache *c, const struct shoal_block_id *id,
                           uint32_t expect_len, struct shoal_cache_block *b)
{
        return open_block(c, id, expect_len, b, false, true);
}

/* The same block opened again after a fill put it there: its miss was counted already. */
int shoal_cache_open_block_again(struct shoal_cache *c, const struct shoal_block_id *id,
                                 uint32_t expect_len, struct shoal_cache_block *b)
{
        return open_block(c, id, expect_len, b, false, false);
}

int shoal_cache_open_block_nowait(struct shoal_cache *c, const struct shoal_block_id *id,
                                  uint32_t expect_len, struct shoal_cache_block *b)
{
        return open_block(c, id, expect_len, b, true, false);
}

void shoal_cache_block_close(struct shoal_cache *c, struct shoal_cache_block *b)
{
        if (b->fd >= 0)
                close(b->fd);
        if (b->dfd >= 0)
                close(b->dfd);
        b->fd = -1;
        b->dfd = CACHE_DFD_NONE;
}

/* ---- insert and remove ---- */

/* Writes the header HDR (HLEN bytes) and LEN bytes of DATA to a new file NAME in TMP_FD. Returns 0
 * or -errno (the file is gone again). */
static int write_tmp(int tmp_fd, const char *name, const void *hdr, uint32_t hlen, const void *data,
                     uint32_t len)
{
        int fd = openat(tmp_fd, name, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, CACHE_FILE_MODE);
        int ret;

        if (fd < 0)
                return -errno;
        ret = shoal_write_all(fd, hdr, hlen);
        if (!ret)
                ret = shoal_write_all(fd, data, len);
        /* Some filesystems (NFS, FUSE) report a failed write-back only at close. */
        if (close(fd) && !ret)
                ret = -errno;
        if (ret)
                unlinkat(tmp_fd, name, 0);
        return ret;
}

/* Renames the temp file TMPNAME of dir DI to HEX in the fan-out folder LEAF and puts E in the
 * index in its place, under the path lock. Returns 0 (E belongs to the index now) or -errno (the
 * temp file is the caller's to remove). */
static int publish(struct shoal_cache *c, struct cache_entry *e, unsigned di, int leaf,
                   const char *tmpname, const char *hex)
{
        pthread_mutex_t *pl = cache_path_lock(c, &e->id);
        struct cache_entry *old;
        int ret;

        pthread_mutex_lock(pl);
        if (renameat(c->dirs[di].tmp_fd, tmpname, leaf, hex)) {
                ret = -errno;
                pthread_mutex_unlock(pl);
                return ret;
        }
        pthread_mutex_lock(&c->lock);
        c->reserved -= e->bytes;
        old = cache_index_find_locked(c, &e->id);
        if (old)
                cache_entry_detach_locked(c, old);
        e->dir = di;
        cache_entry_attach_locked(c, e);
        pthread_mutex_unlock(&c->lock);
        /* In this dir the rename replaced the old copy; one in another dir is stale. */
        if (old && old->dir != di)
                cache_block_unlink(c, old->dir, &old->id);
        pthread_mutex_unlock(pl);
        free(old);
        return 0;
}

/* Writes block E (its room reserved in dir DI) and renames it into place. Returns 0 (E belongs to
 * the index now) or -errno, with nothing left behind. */
static int write_block(struct shoal_cache *c, struct cache_entry *e, unsigned di,
                       const unsigned char *hdr, uint32_t hlen, const void *data, uint32_t len)
{
        char hex[SHOAL_BLOCK_ID_HEX], tmpname[SHOAL_BLOCK_ID_HEX + 64];
        struct cache_dir *d = &c->dirs[di];
        int leaf, ret;

        leaf = cache_fanout_open(d, &e->id, true);
        if (leaf < 0)
                return leaf;
        shoal_block_id_hex(&e->id, hex);
        snprintf(tmpname, sizeof(tmpname), "%s.%d.%llx.%08llx", hex, (int)getpid(),
                 (unsigned long long)atomic_fetch_add(&c->tmp_seq, 1),
                 (unsigned long long)(shoal_rand64() & 0xffffffffULL));
        ret = write_tmp(d->tmp_fd, tmpname, hdr, hlen, data, len);
        if (!ret) {
                ret = publish(c, e, di, leaf, tmpname, hex);
                if (ret)
                        unlinkat(d->tmp_fd, tmpname, 0);
        }
        close(leaf);
        return ret;
}

/* An insert of FSIZE bytes into dir DI failed with ERR after its room was reserved. */
static void insert_failed(struct shoal_cache *c, unsigned di, uint64_t fsize, int err)
{
        struct cache_entry *victims = NULL;

        pthread_mutex_lock(&c->lock);
        cache_unreserve_locked(c, di, fsize, err, &victims);
        pthread_mutex_unlock(&c->lock);
        cache_release_victims(c, victims);
        if (cache_dir_failure(err))
                cache_dir_io_error(c, di, err);
}

int shoal_cache_insert(struct shoal_cache *c, const struct shoal_block_id *id, const void *data,
                       uint32_t len)
{
        unsigned char hdr[SHOAL_CACHE_HDR_MAX];
        struct cache_entry *e, *victims = NULL;
        uint32_t hlen;
        int pick, ret;
        unsigned di;

        if (!shoal_cache_enabled(c))
                return -ENODEV;
        if (!id || !data || len == 0 || len > SHOAL_BLOCK_SIZE_MAX)
                return -EINVAL;
        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        hlen = shoal_cache_hdr_encode(hdr, id, data, len);
        e->id = *id;
        e->bytes = (uint64_t)hlen + len;
        shoal_list_init(&e->lru);

        pthread_mutex_lock(&c->lock);
        pick = cache_pick_dir_locked(c, id, cache_health_now(c));
        pthread_mutex_unlock(&c->lock);
        if (pick < 0) {
                free(e);
                return -EIO; /* every dir is out of use: the insert is dropped */
        }
        di = (unsigned)pick;
        cache_fs_refresh(c, di);

        pthread_mutex_lock(&c->lock);
        ret = cache_make_room_locked(c, id, di, e->bytes, &victims);
        pthread_mutex_unlock(&c->lock);
        cache_release_victims(c, victims);
        if (!ret) {
                uint64_t fsize = e->bytes;
                ret = write_block(c, e, di, hdr, hlen, data, len);
                if (!ret) {
                        shoal_metric_inc(SHOAL_M_blockcache_writes);
                        shoal_metric_add(SHOAL_M_blockcache_write_bytes, len);
                        cache_dir_io_ok(c, di);
                        return 0;
                }
                insert_failed(c, di, fsize, ret);
        }
        shoal_metric_inc(SHOAL_M_blockcache_write_errors);
        log_ratelimited(SHOAL_LOG_WARN, MOD, "insert of %u bytes failed: %s", len, strerror(-ret));
        free(e);
        return ret;
}

int shoal_cache_remove(struct shoal_cache *c, const struct shoal_block_id *id)
{
        struct cache_entry *e;
        unsigned di;

        if (!c || !c->enabled)
                return -ENOENT;
        pthread_mutex_t *pl = cache_path_lock(c, id);
        pthread_mutex_lock(pl);
        pthread_mutex_lock(&c->lock);
        e = cache_index_find_locked(c, id);
        if (e)
                cache_entry_detach_locked(c, e);
        pthread_mutex_unlock(&c->lock);
        if (e) {
                di = e->dir;
                cache_block_unlink(c, di, id);
        }
        pthread_mutex_unlock(pl);
        if (!e)
                return -ENOENT;
        free(e);
        return 0;
}
