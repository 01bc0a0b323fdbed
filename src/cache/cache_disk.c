/* The local disk cache: dirs, index, eviction, block files (format in cache_format.h).
 *
 * Locking: one mutex (lock) guards the index (hash table + one LRU list per dir), the byte
 * counters and the per-dir state; no file I/O happens under it. Changes to the name of a block
 * file (rename into place, unlink) and the matching index change happen together under one of
 * PATH_LOCKS striped mutexes chosen by id, taken before lock. So an eviction whose unlink comes
 * late cannot delete the file that a concurrent re-insert of the same id just renamed into place:
 * it sees the new index entry and leaves the name alone. At rest, a file exists exactly when the
 * index holds it. Reads take no path lock; an open fd keeps an unlinked file readable.
 *
 * Paths below a dir's blocks/ folder are never resolved through symlinks: the fan-out folders are
 * opened with O_NOFOLLOW one level at a time (or in one openat2 with RESOLVE_NO_SYMLINKS), so a
 * link planted in the cache dir can neither redirect a write nor expose a foreign file. */
#include "cache/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <linux/openat2.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cache/cache_folder.h"
#include "cache/cache_format.h"
#include "cache/cache_internal.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define MOD "cache"

#define DIR_ERR_LIMIT     3 /* I/O errors within DIR_ERR_WINDOW_NS that take a dir out of use */
#define DIR_ERR_WINDOW_NS (10 * SHOAL_NS_PER_SEC)
#define DIR_DOWN_NS       (30 * SHOAL_NS_PER_SEC)
#define STATVFS_EVERY_NS  SHOAL_NS_PER_SEC
#define ENOSPC_EVICT_MIN  4 /* blocks freed at least after an insert met a full disk */
#define HASH_INIT         1024
#define DIO_ALIGN         4096u
#define DFD_NONE          (-1)
#define DFD_UNSUPPORTED   (-2)
#define DIR_MODE          0700 /* cached data is the user's data */
#define FILE_MODE         0600
#define PATH_LOCKS        64

struct lru_link {
        struct lru_link *prev, *next;
};

struct cache_entry {
        struct lru_link lru; /* first member: a list link converts back to its entry */
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
        struct lru_link lru; /* head side = most recently used */
        _Atomic int state;
        unsigned nerr;
        uint64_t err_since_ns, down_until_ns;
        bool fs_known, fs_refreshing;
        uint64_t fs_total, fs_avail, fs_checked_ns;
        int64_t fs_delta; /* bytes written since the last statvfs, minus bytes removed */
};

struct shoal_cache {
        pthread_mutex_t lock;
        pthread_mutex_t path_locks[PATH_LOCKS];
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

/* ---- small helpers ---- */

static bool is_dir_failure(int err)
{
        switch (-err) {
        case EIO:
        case EROFS:
        case ENOTCONN:
        case ESTALE:
        case ENXIO:
        case ENODEV:
        case EUCLEAN:
                return true;
        default:
                return false;
        }
}

static int hexval(char ch)
{
        if (ch >= '0' && ch <= '9')
                return ch - '0';
        if (ch >= 'a' && ch <= 'f')
                return ch - 'a' + 10;
        return -1;
}

/* Only lowercase hex of exactly N characters names a fan-out folder or a block. */
static bool is_hex_name(const char *s, size_t n)
{
        size_t i;
        for (i = 0; s[i]; i++)
                if (i >= n || hexval(s[i]) < 0)
                        return false;
        return i == n;
}

static void hex_to_id(const char *s, struct shoal_block_id *id)
{
        for (int i = 0; i < SHOAL_BLOCK_ID_LEN; i++)
                id->b[i] = (uint8_t)(hexval(s[2 * i]) << 4 | hexval(s[2 * i + 1]));
}

static uint64_t mix64(uint64_t x)
{
        x ^= x >> 30;
        x *= 0xbf58476d1ce4e5b9ULL;
        x ^= x >> 27;
        x *= 0x94d049bb133111ebULL;
        x ^= x >> 31;
        return x;
}

static void set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;
        if (!err || !errlen)
                return;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
}

static void lru_init(struct lru_link *h)
{
        h->prev = h->next = h;
}

static void lru_del(struct lru_link *l)
{
        l->prev->next = l->next;
        l->next->prev = l->prev;
        l->prev = l->next = l;
}

static void lru_push_front(struct lru_link *h, struct lru_link *l)
{
        l->next = h->next;
        l->prev = h;
        h->next->prev = l;
        h->next = l;
}

static struct cache_entry *entry_of(struct lru_link *l)
{
        return (struct cache_entry *)l;
}

static struct cache_dir *fs_of(struct shoal_cache *c, unsigned di)
{
        return &c->dirs[c->dirs[di].fs];
}

/* ---- index (all under c->lock) ---- */

static size_t bucket_of(const struct shoal_cache *c, const struct shoal_block_id *id)
{
        return (size_t)shoal_block_id_hash64(id) & (c->nbuckets - 1);
}

static struct cache_entry *index_find(struct shoal_cache *c, const struct shoal_block_id *id)
{
        struct cache_entry *e;
        for (e = c->buckets[bucket_of(c, id)]; e; e = e->hnext)
                if (shoal_block_id_eq(&e->id, id))
                        return e;
        return NULL;
}

static void index_grow(struct shoal_cache *c)
{
        size_t n = c->nbuckets * 2;
        struct cache_entry **nb = calloc(n, sizeof(*nb));
        if (!nb)
                return; /* longer chains, still correct */
        for (size_t i = 0; i < c->nbuckets; i++) {
                struct cache_entry *e = c->buckets[i], *next;
                for (; e; e = next) {
                        next = e->hnext;
                        size_t b = (size_t)shoal_block_id_hash64(&e->id) & (n - 1);
                        e->hnext = nb[b];
                        nb[b] = e;
                }
        }
        free(c->buckets);
        c->buckets = nb;
        c->nbuckets = n;
}

/* Adds E (absent from the index) to the hash table and the byte counters, not to an LRU list. */
static void index_add(struct shoal_cache *c, struct cache_entry *e)
{
        if (c->count >= c->nbuckets)
                index_grow(c);
        size_t b = bucket_of(c, &e->id);
        e->hnext = c->buckets[b];
        c->buckets[b] = e;
        c->count++;
        c->bytes += e->bytes;
}

static void entry_attach(struct shoal_cache *c, struct cache_entry *e)
{
        index_add(c, e);
        e->tick = ++c->tick;
        lru_push_front(&c->dirs[e->dir].lru, &e->lru);
        shoal_metric_gauge_add(SHOAL_M_blockcache_blocks, 1);
        shoal_metric_gauge_add(SHOAL_M_blockcache_bytes, (int64_t)e->bytes);
}

/* Takes E out of the index; the caller frees it (after unlinking its file, if it should). */
static void entry_detach(struct shoal_cache *c, struct cache_entry *e)
{
        struct cache_entry **pp = &c->buckets[bucket_of(c, &e->id)];
        while (*pp != e)
                pp = &(*pp)->hnext;
        *pp = e->hnext;
        e->hnext = NULL;
        lru_del(&e->lru);
        c->count--;
        c->bytes -= e->bytes;
        fs_of(c, e->dir)->fs_delta -= (int64_t)e->bytes;
        shoal_metric_gauge_add(SHOAL_M_blockcache_blocks, -1);
        shoal_metric_gauge_add(SHOAL_M_blockcache_bytes, -(int64_t)e->bytes);
}

static void lru_touch(struct shoal_cache *c, struct cache_entry *e)
{
        lru_del(&e->lru);
        lru_push_front(&c->dirs[e->dir].lru, &e->lru);
        e->tick = ++c->tick;
}

/* The least recently used entry over all dirs (FS < 0) or over the dirs of filesystem FS. */
static struct cache_entry *lru_oldest(struct shoal_cache *c, int fs)
{
        struct cache_entry *best = NULL;
        for (unsigned i = 0; i < c->ndirs; i++) {
                struct cache_dir *d = &c->dirs[i];
                if ((fs >= 0 && d->fs != (unsigned)fs) || d->lru.prev == &d->lru)
                        continue;
                struct cache_entry *e = entry_of(d->lru.prev);
                if (!best || e->tick < best->tick)
                        best = e;
        }
        return best;
}

/* Victims are chained through hnext and unlinked by release_victims once the lock is dropped. */
static void evict_locked(struct shoal_cache *c, struct cache_entry *e, struct cache_entry **victims)
{
        entry_detach(c, e);
        shoal_metric_inc(SHOAL_M_blockcache_evictions);
        shoal_metric_add(SHOAL_M_blockcache_evict_bytes, e->bytes);
        e->hnext = *victims;
        *victims = e;
}

/* ---- dir health [L5] ---- */

/* The clock dir health runs on: monotonic, moved forward only by shoal_cache_debug_advance. */
static uint64_t health_now(const struct shoal_cache *c)
{
        return shoal_now_ns() + __atomic_load_n(&c->clock_skew, __ATOMIC_RELAXED);
}

/* A dir out of use comes back (probing) once its time is up. */
static bool dir_usable_locked(struct shoal_cache *c, struct cache_dir *d, uint64_t now)
{
        if (d->state == DIR_DOWN && now >= d->down_until_ns) {
                d->state = DIR_PROBING;
                c->dirs_down--;
                shoal_metric_gauge_add(SHOAL_M_blockcache_dirs_down, -1);
                shoal_metric_gauge_add(SHOAL_M_blockcache_dirs, 1);
                log_info(MOD, "dir %s: back in use (probing)", d->root);
        }
        return d->state != DIR_DOWN;
}

static void dir_io_error(struct shoal_cache *c, unsigned di, int err)
{
        struct cache_dir *d = &c->dirs[di];
        uint64_t now = health_now(c);
        bool down = false;

        pthread_mutex_lock(&c->lock);
        if (d->nerr == 0 || now - d->err_since_ns > DIR_ERR_WINDOW_NS) {
                d->nerr = 0;
                d->err_since_ns = now;
        }
        d->nerr++;
        if (d->state == DIR_PROBING || (d->state == DIR_OK && d->nerr >= DIR_ERR_LIMIT)) {
                d->state = DIR_DOWN;
                d->down_until_ns = now + c->down_ns;
                d->nerr = 0;
                c->dirs_down++;
                down = true;
                shoal_metric_gauge_add(SHOAL_M_blockcache_dirs_down, 1);
                shoal_metric_gauge_add(SHOAL_M_blockcache_dirs, -1);
                shoal_metric_inc(SHOAL_M_blockcache_dir_failures);
        }
        pthread_mutex_unlock(&c->lock);
        if (down)
                log_warn(MOD, "dir %s: out of use for %llu ms after I/O errors (last: %s)", d->root,
                         (unsigned long long)(c->down_ns / SHOAL_NS_PER_MS), strerror(-err));
}

static void dir_io_ok(struct shoal_cache *c, unsigned di)
{
        struct cache_dir *d = &c->dirs[di];
        bool healed = false;

        if (d->state != DIR_PROBING)
                return;
        pthread_mutex_lock(&c->lock);
        if (d->state == DIR_PROBING) {
                d->state = DIR_OK;
                d->nerr = 0;
                healed = true;
        }
        pthread_mutex_unlock(&c->lock);
        if (healed)
                log_info(MOD, "dir %s: healthy again", d->root);
}

/* Rendezvous hashing over the usable dirs: when a dir leaves or returns, only its own ids move. */
static int pick_dir_locked(struct shoal_cache *c, const struct shoal_block_id *id, uint64_t now)
{
        uint64_t h, best_score = 0;
        int best = -1;
        memcpy(&h, id->b + 8, sizeof(h));
        for (unsigned i = 0; i < c->ndirs; i++) {
                if (!dir_usable_locked(c, &c->dirs[i], now))
                        continue;
                uint64_t score = mix64(h ^ mix64(i + 1));
                if (best < 0 || score > best_score) {
                        best = (int)i;
                        best_score = score;
                }
        }
        return best;
}

/* ---- paths without symlinks ---- */

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
                if (mkdirat(parent, name, DIR_MODE) && errno != EEXIST)
                        return -errno;
        }
        return -ENOENT;
}

/* Opens blocks/XX/YY of ID in D (creating the folders with CREATE). Returns an O_PATH fd. */
static int fanout_open(struct cache_dir *d, const struct shoal_block_id *id, bool create)
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

/* Opens the block file of ID in D with FLAGS. Returns an fd or -errno (-ELOOP, -ENOTDIR or
 * -EXDEV when a symlink stands in the way). NOWAIT: only from the kernel's lookup cache, else
 * -EAGAIN (and always without openat2). */
static int block_open_file_how(struct cache_dir *d, const struct shoal_block_id *id, int flags,
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
        int leaf = fanout_open(d, id, false);
        if (leaf < 0)
                return leaf;
        int fd = openat(leaf, hex, flags | O_NOFOLLOW);
        int ret = fd < 0 ? -errno : fd;
        close(leaf);
        return ret;
}

static int block_open_file(struct cache_dir *d, const struct shoal_block_id *id, int flags)
{
        return block_open_file_how(d, id, flags, false);
}

static pthread_mutex_t *path_lock(struct shoal_cache *c, const struct shoal_block_id *id)
{
        return &c->path_locks[mix64(shoal_block_id_hash64(id)) % PATH_LOCKS];
}

/* Call with the path lock of ID held. */
static void block_unlink(struct shoal_cache *c, unsigned di, const struct shoal_block_id *id)
{
        char hex[SHOAL_BLOCK_ID_HEX];
        int leaf = fanout_open(&c->dirs[di], id, false);
        if (leaf < 0)
                return;
        shoal_block_id_hex(id, hex);
        if (unlinkat(leaf, hex, 0) && is_dir_failure(-errno))
                dir_io_error(c, di, -errno);
        close(leaf);
}

/* Unlinks the files of detached entries V, unless the same id was inserted into the same dir
 * again since it was detached (then the name holds the new file). */
static void release_victims(struct shoal_cache *c, struct cache_entry *v)
{
        while (v) {
                struct cache_entry *next = v->hnext, *now;
                pthread_mutex_t *pl = path_lock(c, &v->id);

                pthread_mutex_lock(pl);
                pthread_mutex_lock(&c->lock);
                now = index_find(c, &v->id);
                bool back = now && now->dir == v->dir;
                pthread_mutex_unlock(&c->lock);
                if (!back)
                        block_unlink(c, v->dir, &v->id);
                pthread_mutex_unlock(pl);
                free(v);
                v = next;
        }
}

/* Drops ID in dir DI after a failed open or read. BAD is the file found corrupt (NULL: none was
 * opened). Only that file is unlinked, never a good one that a concurrent insert put under the
 * same name; a symlink or FIFO in its place goes too (unlinkat removes the link, not its target,
 * and the folders above were opened without following links). */
static void block_forget(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                         const struct stat *bad)
{
        char hex[SHOAL_BLOCK_ID_HEX];
        pthread_mutex_t *pl = path_lock(c, id);
        struct cache_entry *e = NULL;
        struct stat st;
        bool present = false, drop_file = false;

        shoal_block_id_hex(id, hex);
        pthread_mutex_lock(pl);
        int leaf = fanout_open(&c->dirs[di], id, false);
        if (leaf >= 0 && fstatat(leaf, hex, &st, AT_SYMLINK_NOFOLLOW) == 0) {
                present = true;
                drop_file = !S_ISREG(st.st_mode) ||
                            (bad && st.st_dev == bad->st_dev && st.st_ino == bad->st_ino);
        }
        if (!present || drop_file) {
                pthread_mutex_lock(&c->lock);
                e = index_find(c, id);
                if (e && e->dir == di)
                        entry_detach(c, e);
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

static void block_corrupt(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                          const struct stat *bad, const char *why)
{
        char hex[SHOAL_BLOCK_ID_HEX];
        shoal_block_id_hex(id, hex);
        log_ratelimited(SHOAL_LOG_WARN, MOD, "block %s in %s: %s, removed", hex, c->dirs[di].root,
                        why);
        shoal_metric_inc(SHOAL_M_blockcache_checksum_errors);
        block_forget(c, id, di, bad);
}

/* ---- space ---- */

static void fs_refresh_maybe(struct shoal_cache *c, unsigned di)
{
        struct cache_dir *fsd = fs_of(c, di);
        struct statvfs sv;
        uint64_t now = shoal_now_ns();
        bool due;

        pthread_mutex_lock(&c->lock);
        due = !fsd->fs_refreshing &&
              (!fsd->fs_known || now - fsd->fs_checked_ns >= STATVFS_EVERY_NS);
        if (due)
                fsd->fs_refreshing = true;
        pthread_mutex_unlock(&c->lock);
        if (!due)
                return;

        int rc = fstatvfs(fsd->blocks_fd, &sv);
        pthread_mutex_lock(&c->lock);
        fsd->fs_refreshing = false;
        fsd->fs_checked_ns = now;
        if (rc == 0) {
                fsd->fs_total = (uint64_t)sv.f_blocks * sv.f_frsize;
                fsd->fs_avail = (uint64_t)sv.f_bavail * sv.f_frsize;
                fsd->fs_delta = 0;
                fsd->fs_known = true;
        }
        pthread_mutex_unlock(&c->lock);
}

static int64_t fs_avail_est(const struct cache_dir *fsd)
{
        return (int64_t)fsd->fs_avail - fsd->fs_delta;
}

/* Evicts until FSIZE more bytes for block ID fit under the capacity and leave free_space_ratio
 * free on the filesystem of dir DI, then reserves them. A copy of ID already in DI counts as
 * freed, since the rename will replace it. Returns 0 or -ENOSPC (nothing reserved). */
static int make_room_locked(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                            uint64_t fsize, struct cache_entry **victims)
{
        struct cache_dir *fsd = fs_of(c, di);
        struct cache_entry *e, *old = index_find(c, id);
        uint64_t credit;

        if (old && old->dir != di)
                old = NULL;
        credit = old ? old->bytes : 0;
        if (c->capacity != UINT64_MAX) {
                if (fsize > c->capacity)
                        return -ENOSPC;
                while (c->bytes - credit + c->reserved + fsize > c->capacity) {
                        e = lru_oldest(c, -1);
                        if (!e)
                                return -ENOSPC; /* the rest is reserved by inserts in flight */
                        if (e == old)
                                credit = 0;
                        evict_locked(c, e, victims);
                }
        }
        if (c->ratio > 0 && fsd->fs_known) {
                double keep = c->ratio * (double)fsd->fs_total;
                while ((double)(fs_avail_est(fsd) + (int64_t)credit - (int64_t)fsize) < keep) {
                        e = lru_oldest(c, (int)c->dirs[di].fs);
                        if (!e)
                                return -ENOSPC;
                        if (e == old)
                                credit = 0;
                        evict_locked(c, e, victims);
                }
        }
        c->reserved += fsize;
        fsd->fs_delta += (int64_t)fsize;
        return 0;
}

/* ---- open and close ---- */

static int mkdir_p(const char *path)
{
        char buf[PATH_MAX];
        struct stat st;
        if (shoal_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
                return -ENAMETOOLONG;
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(buf, 0755) && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(buf, 0755) && errno != EEXIST)
                return -errno;
        if (stat(buf, &st))
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int open_own_dir(int parent, const char *name)
{
        if (mkdirat(parent, name, DIR_MODE) && errno != EEXIST)
                return -errno;
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Empties tmp/: anything there is an insert that a previous process never finished. */
static void clean_tmp(struct cache_dir *d)
{
        int fd = openat(d->tmp_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        DIR *dh = fdopendir(fd);
        if (!dh) {
                close(fd);
                return;
        }
        struct dirent *de;
        unsigned n = 0;
        while ((de = readdir(dh))) {
                if (de->d_type == DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (unlinkat(d->tmp_fd, de->d_name, 0) == 0)
                        n++;
        }
        closedir(dh);
        if (n)
                log_info(MOD, "dir %s: removed %u unfinished temp files", d->root, n);
}

/* Adds BASE/shoal-<fp> as a dir, unless the same folder is already in use. */
static int dir_add(struct shoal_cache *c, const char *base, const struct shoal_volume *vol,
                   char *err, size_t errlen)
{
        char fp[17];
        struct cache_dir *d;
        struct stat st;
        int ret, root_fd;

        shoal_hex(vol->fp, 8, fp);
        if (c->ndirs % 8 == 0) {
                void *n = realloc(c->dirs, (c->ndirs + 8) * sizeof(*c->dirs));
                if (!n) {
                        set_err(err, errlen, "cache: out of memory");
                        return -ENOMEM;
                }
                c->dirs = n;
        }
        d = &c->dirs[c->ndirs];
        memset(d, 0, sizeof(*d));
        d->blocks_fd = d->tmp_fd = -1;
        if ((size_t)snprintf(d->root, sizeof(d->root), "%s/shoal-%s", base, fp) >=
            sizeof(d->root)) {
                set_err(err, errlen, "cache dir %s: path too long", base);
                return -ENAMETOOLONG;
        }
        if (mkdir(d->root, DIR_MODE) && errno != EEXIST) {
                ret = -errno;
                goto out_err;
        }
        root_fd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0) {
                ret = -errno;
                goto out_err;
        }
        if (fstat(root_fd, &st)) {
                ret = -errno;
                close(root_fd);
                goto out_err;
        }
        for (unsigned i = 0; i < c->ndirs; i++) {
                if (c->dirs[i].dev == st.st_dev && c->dirs[i].ino == st.st_ino) {
                        close(root_fd);
                        return 0; /* listed twice (or by two globs) */
                }
        }
        d->dev = st.st_dev;
        d->ino = st.st_ino;
        d->blocks_fd = open_own_dir(root_fd, "blocks");
        d->tmp_fd = open_own_dir(root_fd, "tmp");
        close(root_fd);
        if (d->blocks_fd < 0 || d->tmp_fd < 0) {
                ret = d->blocks_fd < 0 ? d->blocks_fd : d->tmp_fd;
                goto out_close;
        }
        /* An unwritable dir must fail now, not turn every insert into an error later. */
        if (faccessat(d->tmp_fd, ".", W_OK, AT_EACCESS)) {
                ret = -errno;
                goto out_close;
        }
        d->fs = c->ndirs;
        for (unsigned i = 0; i < c->ndirs; i++) {
                if (c->dirs[i].dev == d->dev) {
                        d->fs = c->dirs[i].fs;
                        break;
                }
        }
        c->ndirs++;
        return 0;

out_close:
        if (d->blocks_fd >= 0)
                close(d->blocks_fd);
        if (d->tmp_fd >= 0)
                close(d->tmp_fd);
out_err:
        set_err(err, errlen, "cache dir %s: %s", d->root, strerror(-ret));
        return ret;
}

static int dirs_add_all(struct shoal_cache *c, const char *dirs, const struct shoal_volume *vol,
                        char *err, size_t errlen)
{
        char *copy = strdup(dirs), *save = NULL, *elem;
        int ret = 0;

        if (!copy) {
                set_err(err, errlen, "cache: out of memory");
                return -ENOMEM;
        }
        for (elem = strtok_r(copy, ":", &save); elem && !ret; elem = strtok_r(NULL, ":", &save)) {
                if (!strpbrk(elem, "*?[")) {
                        ret = mkdir_p(elem);
                        if (ret)
                                set_err(err, errlen, "cache dir %s: %s", elem, strerror(-ret));
                        else
                                ret = shoal_cache_folder_lock(&c->folders, elem, err, errlen);
                        if (!ret)
                                ret = dir_add(c, elem, vol, err, errlen);
                        continue;
                }
                glob_t g;
                int grc = glob(elem, GLOB_TILDE, NULL, &g);
                if (grc == GLOB_NOMATCH) {
                        log_warn(MOD, "cache dir pattern %s matches nothing", elem);
                        continue;
                }
                if (grc) {
                        set_err(err, errlen, "cache dir pattern %s: glob failed", elem);
                        ret = grc == GLOB_NOSPACE ? -ENOMEM : -EIO;
                        continue;
                }
                for (size_t i = 0; i < g.gl_pathc && !ret; i++) {
                        struct stat st;
                        if (stat(g.gl_pathv[i], &st) || !S_ISDIR(st.st_mode))
                                continue;
                        ret = shoal_cache_folder_lock(&c->folders, g.gl_pathv[i], err, errlen);
                        if (!ret)
                                ret = dir_add(c, g.gl_pathv[i], vol, err, errlen);
                }
                globfree(&g);
        }
        free(copy);
        return ret;
}

struct entry_vec {
        struct cache_entry **v;
        size_t n, cap;
};

static int vec_push(struct entry_vec *vec, struct cache_entry *e)
{
        if (vec->n == vec->cap) {
                size_t cap = vec->cap ? vec->cap * 2 : 1024;
                void *n = realloc(vec->v, cap * sizeof(*vec->v));
                if (!n)
                        return -ENOMEM;
                vec->v = n;
                vec->cap = cap;
        }
        vec->v[vec->n++] = e;
        return 0;
}

static DIR *open_scan_dir(int parent, const char *name)
{
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0)
                return NULL;
        DIR *dh = fdopendir(fd);
        if (!dh)
                close(fd);
        return dh;
}

/* Indexes the block files of one blocks/XX/YY folder. Names are checked against their folders,
 * and only regular files count: symlinks, FIFOs and stray names are left alone. */
static int scan_leaf(struct shoal_cache *c, unsigned di, DIR *dh, const char *xx, const char *yy,
                     struct entry_vec *vec)
{
        struct dirent *de;
        while ((de = readdir(dh))) {
                struct shoal_block_id id;
                struct stat st;
                const char *name = de->d_name;

                if (!is_hex_name(name, 2 * SHOAL_BLOCK_ID_LEN) || memcmp(name, xx, 2) ||
                    memcmp(name + 2, yy, 2))
                        continue;
                if (de->d_type != DT_REG && de->d_type != DT_UNKNOWN)
                        continue;
                if (fstatat(dirfd(dh), name, &st, AT_SYMLINK_NOFOLLOW) || !S_ISREG(st.st_mode))
                        continue;
                hex_to_id(name, &id);
                if (index_find(c, &id)) {
                        /* The same block in two dirs (placement moved while a dir was out of
                         * use): keep one copy. */
                        unlinkat(dirfd(dh), name, 0);
                        continue;
                }
                struct cache_entry *e = calloc(1, sizeof(*e));
                if (!e || vec_push(vec, e)) {
                        free(e);
                        return -ENOMEM;
                }
                e->id = id;
                e->bytes = (uint64_t)st.st_size;
                e->tick = shoal_timespec_ns(&st.st_mtim);
                e->dir = di;
                lru_init(&e->lru);
                index_add(c, e);
        }
        return 0;
}

static int scan_dir(struct shoal_cache *c, unsigned di, struct entry_vec *vec)
{
        struct cache_dir *d = &c->dirs[di];
        DIR *top = open_scan_dir(d->blocks_fd, ".");
        struct dirent *de1, *de2;
        int ret = 0;

        if (!top)
                return 0;
        while (!ret && (de1 = readdir(top))) {
                if (!is_hex_name(de1->d_name, 2) ||
                    (de1->d_type != DT_DIR && de1->d_type != DT_UNKNOWN))
                        continue;
                DIR *mid = open_scan_dir(dirfd(top), de1->d_name);
                if (!mid)
                        continue;
                while (!ret && (de2 = readdir(mid))) {
                        if (!is_hex_name(de2->d_name, 2) ||
                            (de2->d_type != DT_DIR && de2->d_type != DT_UNKNOWN))
                                continue;
                        DIR *leaf = open_scan_dir(dirfd(mid), de2->d_name);
                        if (!leaf)
                                continue;
                        ret = scan_leaf(c, di, leaf, de1->d_name, de2->d_name, vec);
                        closedir(leaf);
                }
                closedir(mid);
        }
        closedir(top);
        return ret;
}

static int cmp_mtime(const void *a, const void *b)
{
        const struct cache_entry *x = *(struct cache_entry *const *)a;
        const struct cache_entry *y = *(struct cache_entry *const *)b;
        return x->tick < y->tick ? -1 : x->tick > y->tick;
}

/* Rebuilds the index from the files on disk [L3]. Sizes come from stat; headers are checked
 * lazily by open_block, so a start over a large cache costs one stat per block. */
static int index_rebuild(struct shoal_cache *c)
{
        struct entry_vec vec = {0};
        int ret = 0;

        for (unsigned i = 0; i < c->ndirs && !ret; i++) {
                clean_tmp(&c->dirs[i]);
                ret = scan_dir(c, i, &vec);
        }
        if (!ret) {
                /* Oldest file first, so the LRU order approximates the last process's. */
                if (vec.n)
                        qsort(vec.v, vec.n, sizeof(*vec.v), cmp_mtime);
                for (size_t i = 0; i < vec.n; i++) {
                        struct cache_entry *e = vec.v[i];
                        e->tick = ++c->tick;
                        lru_push_front(&c->dirs[e->dir].lru, &e->lru);
                }
                shoal_metric_gauge_add(SHOAL_M_blockcache_blocks, (int64_t)c->count);
                shoal_metric_gauge_add(SHOAL_M_blockcache_bytes, (int64_t)c->bytes);
                shoal_metric_gauge_add(SHOAL_M_blockcache_dirs, (int64_t)c->ndirs);
        }
        free(vec.v);
        return ret;
}

static void cache_free(struct shoal_cache *c)
{
        for (size_t i = 0; c->buckets && i < c->nbuckets; i++) {
                struct cache_entry *e = c->buckets[i], *next;
                for (; e; e = next) {
                        next = e->hnext;
                        free(e);
                }
        }
        for (unsigned i = 0; i < c->ndirs; i++) {
                close(c->dirs[i].blocks_fd);
                close(c->dirs[i].tmp_fd);
        }
        free(c->buckets);
        free(c->dirs);
        shoal_cache_folders_release(&c->folders);
        for (unsigned i = 0; i < PATH_LOCKS; i++)
                pthread_mutex_destroy(&c->path_locks[i]);
        pthread_mutex_destroy(&c->lock);
        free(c);
}

/* Failures at run time never read as a bad configuration. */
static int runtime_err(int rc)
{
        return rc == -EINVAL ? -EIO : rc;
}

int shoal_cache_open(const struct shoal_cache_config *cfg, struct shoal_cache **out, char *err,
                     size_t errlen)
{
        struct shoal_cache *c = calloc(1, sizeof(*c));
        int ret;

        *out = NULL;
        if (!c) {
                set_err(err, errlen, "cache: out of memory");
                return -ENOMEM;
        }
        pthread_mutex_init(&c->lock, NULL);
        for (unsigned i = 0; i < PATH_LOCKS; i++)
                pthread_mutex_init(&c->path_locks[i], NULL);
        c->nbuckets = HASH_INIT;
        c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
        if (!c->buckets) {
                set_err(err, errlen, "cache: out of memory");
                ret = -ENOMEM;
                goto out_free;
        }
        ret = -EINVAL;
        if (cfg->size_bytes < -1) {
                set_err(err, errlen, "cache size must be -1, 0 or a number of bytes");
                goto out_free;
        }
        if (!(cfg->free_space_ratio >= 0 && cfg->free_space_ratio < 1)) {
                set_err(err, errlen, "free space ratio must be in [0, 1)");
                goto out_free;
        }
        c->capacity = cfg->size_bytes > 0 ? (uint64_t)cfg->size_bytes : UINT64_MAX;
        c->ratio = cfg->free_space_ratio;
        c->down_ns = DIR_DOWN_NS;
        if (cfg->size_bytes == 0 || !cfg->dirs || !cfg->dirs[0]) {
                *out = c; /* no disk cache: every lookup misses */
                return 0;
        }
        if (!cfg->volume) {
                set_err(err, errlen, "cache: no volume");
                goto out_free;
        }

        c->volume = cfg->volume;
        ret = dirs_add_all(c, cfg->dirs, cfg->volume, err, errlen);
        if (ret) {
                /* A folder in use is the user's to fix, like a bad flag. */
                ret = ret == -EBUSY ? -EINVAL : runtime_err(ret);
                goto out_free;
        }
        if (c->ndirs == 0) {
                set_err(err, errlen, "cache dir %s: no dir matched", cfg->dirs);
                ret = -ENOENT;
                goto out_free;
        }
        /* Only now: the list heads point at themselves, and dir_add moves the array. */
        for (unsigned i = 0; i < c->ndirs; i++)
                lru_init(&c->dirs[i].lru);
        ret = index_rebuild(c);
        if (ret) {
                set_err(err, errlen, "cache: indexing failed: %s", strerror(-ret));
                ret = runtime_err(ret);
                goto out_free;
        }
        if (c->capacity != UINT64_MAX) {
                /* Configured smaller than last time: shrink now, not at the first insert. */
                struct cache_entry *victims = NULL, *e;
                pthread_mutex_lock(&c->lock);
                while (c->bytes > c->capacity && (e = lru_oldest(c, -1)))
                        evict_locked(c, e, &victims);
                pthread_mutex_unlock(&c->lock);
                release_victims(c, victims);
        }
        for (unsigned i = 0; i < c->ndirs; i++)
                if (c->dirs[i].fs == i)
                        fs_refresh_maybe(c, i);
        c->enabled = true;
        log_info(MOD, "%u dirs, %zu blocks, %llu bytes indexed", c->ndirs, c->count,
                 (unsigned long long)c->bytes);
        *out = c;
        return 0;

out_free:
        cache_free(c);
        return ret;
}

void shoal_cache_close(struct shoal_cache *c)
{
        if (!c)
                return;
        shoal_metric_gauge_add(SHOAL_M_blockcache_blocks, -(int64_t)c->count);
        shoal_metric_gauge_add(SHOAL_M_blockcache_bytes, -(int64_t)c->bytes);
        shoal_metric_gauge_add(SHOAL_M_blockcache_dirs, -(int64_t)(c->ndirs - c->dirs_down));
        shoal_metric_gauge_add(SHOAL_M_blockcache_dirs_down, -(int64_t)c->dirs_down);
        cache_free(c);
}

int shoal_cache_member_id(struct shoal_cache *c, char *id, size_t idlen, char *err, size_t errlen)
{
        if (!c || !c->folders.n || !c->volume)
                return -ENOENT;
        return shoal_cache_folders_member_id(&c->folders, c->volume, id, idlen, err, errlen);
}

bool shoal_cache_enabled(const struct shoal_cache *c)
{
        return c && c->enabled && atomic_load(&c->dirs_down) < c->ndirs;
}

/* ---- blocks ---- */

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

static int open_block(struct shoal_cache *c, const struct shoal_block_id *id, uint32_t expect_len,
                      struct shoal_cache_block *b, bool nowait, bool count_miss)
{
        unsigned char hdr[SHOAL_CACHE_HDR_MAX];
        uint32_t hlen, dlen;
        struct stat st;
        struct cache_entry *e;
        unsigned di;
        long n;
        int fd, ret;
        const char *why;

        b->fd = -1;
        b->dfd = DFD_NONE;
        if (!c || !c->enabled) {
                ret = -ENOENT;
                goto out_miss;
        }
        pthread_mutex_lock(&c->lock);
        e = index_find(c, id);
        if (!e || !dir_usable_locked(c, &c->dirs[e->dir], health_now(c))) {
                pthread_mutex_unlock(&c->lock);
                ret = -ENOENT;
                goto out_miss;
        }
        lru_touch(c, e);
        di = e->dir;
        pthread_mutex_unlock(&c->lock);

        /* O_NONBLOCK: a FIFO planted under a block's name must not hang the open. */
        fd = block_open_file_how(&c->dirs[di], id, O_RDONLY | O_CLOEXEC | O_NONBLOCK, nowait);
        if (fd == -EAGAIN)
                return -EAGAIN;
        if (fd == -ENOENT) {
                block_forget(c, id, di, NULL);
                ret = -ENOENT;
                goto out_miss;
        }
        if (fd == -ELOOP || fd == -ENOTDIR || fd == -EXDEV) {
                block_corrupt(c, id, di, NULL, "symlink in the path");
                ret = -EBADMSG;
                goto out_miss;
        }
        if (fd < 0) {
                ret = fd;
                goto out_ioerr;
        }
        if (fstat(fd, &st)) {
                ret = -errno;
                goto out_ioerr_close;
        }
        if (!S_ISREG(st.st_mode)) {
                why = "not a regular file";
                goto out_corrupt;
        }
        if (fcntl(fd, F_SETFL, 0)) {
                ret = -errno;
                goto out_ioerr_close;
        }
        n = hdr_pread(fd, hdr, (size_t)SHOAL_MIN((off_t)SHOAL_CACHE_HDR_ALIGN, st.st_size), 0,
                      nowait);
        if (n == -EAGAIN)
                goto out_again;
        if (n < 0) {
                ret = (int)n;
                goto out_ioerr_close;
        }
        hlen = shoal_cache_hdr_peek_len(hdr, (size_t)n);
        if (!hlen) {
                why = "bad header";
                goto out_corrupt;
        }
        if (hlen > (size_t)n) {
                if (nowait && (uint64_t)st.st_size < hlen)
                        goto out_again; /* short: judged by a read that may wait */
                long m = hdr_pread(fd, hdr + n, hlen - (size_t)n, (uint64_t)n, nowait);
                if (m == -EAGAIN)
                        goto out_again;
                if (m < 0) {
                        ret = (int)m;
                        goto out_ioerr_close;
                }
                if (m != (long)(hlen - (size_t)n)) {
                        why = "truncated header";
                        goto out_corrupt;
                }
        }
        ret = shoal_cache_hdr_decode(hdr, hlen, id, expect_len, &hlen, &dlen, b->crcs);
        if (ret == -ERANGE) {
                /* The caller asked for another length: its claim, not the file, is in question. */
                close(fd);
                goto out_miss;
        }
        if (ret) {
                why = "bad header";
                goto out_corrupt;
        }
        if ((uint64_t)st.st_size < (uint64_t)hlen + dlen) {
                why = "truncated";
                goto out_corrupt;
        }
        b->fd = fd;
        b->data_off = hlen;
        b->len = dlen;
        b->id = *id;
        b->dir = (int)di;
        dir_io_ok(c, di);
        return 0;

out_again:
        close(fd);
        return -EAGAIN;
out_corrupt:
        close(fd);
        block_corrupt(c, id, di, &st, why);
        ret = -EBADMSG;
        goto out_miss;
out_ioerr_close:
        close(fd);
out_ioerr:
        if (is_dir_failure(ret)) {
                shoal_metric_inc(SHOAL_M_blockcache_read_errors);
                dir_io_error(c, di, ret);
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

bool shoal_cache_block_verify(const struct shoal_cache_block *b, uint32_t off, uint32_t len,
                              const void *buf)
{
        const unsigned char *p = buf;
        if (!shoal_range_valid(b->len, off, len))
                return false;
        for (uint32_t done = 0; done < len; done += SHOAL_CHUNK_SIZE) {
                uint32_t chunk = (off + done) / SHOAL_CHUNK_SIZE;
                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, len - done);
                if (shoal_chunk_crc(&b->id, chunk, p + done, clen) != b->crcs[chunk])
                        return false;
        }
        return true;
}

/* A second fd on the same open file, with O_DIRECT. Reopening through /proc keeps it the same
 * inode even if the name was replaced or unlinked since open_block. */
static int open_direct(struct shoal_cache *c, const struct shoal_cache_block *b)
{
        char p[64];
        struct stat a, s;
        int fd;

        snprintf(p, sizeof(p), "/proc/self/fd/%d", b->fd);
        fd = open(p, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd >= 0)
                return fd;
        if (errno == EINVAL)
                return DFD_UNSUPPORTED; /* the filesystem has no O_DIRECT */
        fd = block_open_file(&c->dirs[b->dir], &b->id,
                             O_RDONLY | O_DIRECT | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return DFD_UNSUPPORTED;
        if (fstat(fd, &a) || fstat(b->fd, &s) || a.st_dev != s.st_dev || a.st_ino != s.st_ino ||
            fcntl(fd, F_SETFL, O_DIRECT)) {
                close(fd);
                return DFD_UNSUPPORTED;
        }
        return fd;
}

/* Reads with O_DIRECT when it works, else through the page cache. Returns the bytes read (at most
 * LEN; short only at the end of the file) or -errno. */
static long read_range(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                       uint32_t len, void *buf, enum shoal_cache_read_mode mode)
{
        uint64_t pos = b->data_off + off;

        if (mode == SHOAL_CACHE_READ_DIRECT && !((uintptr_t)buf % DIO_ALIGN)) {
                if (b->dfd == DFD_NONE)
                        b->dfd = open_direct(c, b);
                if (b->dfd >= 0) {
                        size_t alen = ((size_t)len + DIO_ALIGN - 1) / DIO_ALIGN * DIO_ALIGN;
                        long n = shoal_pread_full(b->dfd, buf, alen, pos);
                        if (n != -EINVAL)
                                return n < 0 ? n : SHOAL_MIN(n, (long)len);
                        /* Accepted at open, refused at read (alignment rules of this fs). */
                        close(b->dfd);
                        b->dfd = DFD_UNSUPPORTED;
                }
        }
        return shoal_pread_full(b->fd, buf, len, pos);
}

/* A read of B failed: an I/O error marks the dir, a short file is corrupt. Returns -EIO or
 * -EBADMSG. */
static int read_failed(struct shoal_cache *c, struct shoal_cache_block *b, long n, const char *why)
{
        unsigned di = (unsigned)b->dir;
        if (n < 0) {
                shoal_metric_inc(SHOAL_M_blockcache_read_errors);
                if (is_dir_failure((int)n))
                        dir_io_error(c, di, (int)n);
                return -EIO;
        }
        struct stat st;
        bool known = fstat(b->fd, &st) == 0;
        block_corrupt(c, &b->id, di, known ? &st : NULL, why);
        return -EBADMSG;
}

void shoal_cache_block_corrupt(struct shoal_cache *c, struct shoal_cache_block *b, const char *why)
{
        read_failed(c, b, 0, why);
}

static void read_done(uint32_t len, uint64_t t0)
{
        shoal_metric_inc(SHOAL_M_blockcache_hits);
        shoal_metric_add(SHOAL_M_blockcache_hit_bytes, len);
        shoal_metric_observe(SHOAL_M_blockcache_read_dur, shoal_now_ns() - t0);
}

static int block_read(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                      uint32_t len, void *buf, enum shoal_cache_read_mode mode, bool verify)
{
        uint64_t t0 = shoal_now_ns();
        long n;

        if (!buf || b->fd < 0 || !shoal_range_valid(b->len, off, len))
                return -EINVAL;
        n = read_range(c, b, off, len, buf, mode);
        if (n < (long)len)
                return read_failed(c, b, n, "short read");
        if (verify && !shoal_cache_block_verify(b, off, len, buf))
                return read_failed(c, b, n, "chunk checksum mismatch");
        read_done(len, t0);
        return 0;
}

int shoal_cache_block_read(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                           uint32_t len, void *buf, enum shoal_cache_read_mode mode)
{
        return block_read(c, b, off, len, buf, mode, true);
}

int shoal_cache_block_read_unverified(struct shoal_cache *c, struct shoal_cache_block *b,
                                      uint32_t off, uint32_t len, void *buf,
                                      enum shoal_cache_read_mode mode)
{
        return block_read(c, b, off, len, buf, mode, false);
}

/* Splices LEN bytes of FD from POS into the pipe PIPE_WR. Returns the bytes moved (short only
 * at the end of the file) or -errno. */
static long splice_full(int fd, uint64_t pos, size_t len, int pipe_wr)
{
        size_t done = 0;
        while (done < len) {
                loff_t o = (loff_t)(pos + done);
                ssize_t n = splice(fd, &o, pipe_wr, NULL, len - done, SPLICE_F_MOVE);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                done += (size_t)n;
        }
        return (long)done;
}

/* The O_DIRECT part of a splice: the 4096-aligned head of [OFF, OFF+LEN) from the direct fd,
 * straight from the disk into the pipe's own pages. Returns the bytes moved (0: no O_DIRECT on
 * this file, all goes through the page cache) or -errno. */
static long splice_direct(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                          uint32_t len, int pipe_wr)
{
        size_t alen = len / DIO_ALIGN * DIO_ALIGN;
        if (!alen)
                return 0;
        if (b->dfd == DFD_NONE)
                b->dfd = open_direct(c, b);
        if (b->dfd < 0)
                return 0;
        long n = splice_full(b->dfd, b->data_off + off, alen, pipe_wr);
        if (n == -EINVAL && b->dfd >= 0) { /* refused at read (alignment rules of this fs) */
                close(b->dfd);
                b->dfd = DFD_UNSUPPORTED;
                return 0;
        }
        return n;
}

int shoal_cache_block_splice(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                             uint32_t len, int pipe_wr, enum shoal_cache_read_mode mode)
{
        uint64_t t0 = shoal_now_ns();
        long n = 0, m;

        if (pipe_wr < 0 || b->fd < 0 || !shoal_range_valid(b->len, off, len))
                return -EINVAL;
        if (mode == SHOAL_CACHE_READ_DIRECT)
                n = splice_direct(c, b, off, len, pipe_wr);
        if (n >= 0 && (uint32_t)n < len) {
                m = splice_full(b->fd, b->data_off + off + (uint64_t)n, len - (size_t)n, pipe_wr);
                n = m < 0 ? m : n + m;
        }
        if (n == -EAGAIN || n == -EPIPE || n == -EBADF)
                return (int)n; /* the pipe's fault (full, closed), not the file's */
        if (n < (long)len)
                return read_failed(c, b, n, "short read");
        read_done(len, t0);
        return 0;
}

void shoal_cache_block_close(struct shoal_cache *c, struct shoal_cache_block *b)
{
        if (b->fd >= 0)
                close(b->fd);
        if (b->dfd >= 0)
                close(b->dfd);
        b->fd = -1;
        b->dfd = DFD_NONE;
}

int shoal_cache_insert(struct shoal_cache *c, const struct shoal_block_id *id, const void *data,
                       uint32_t len)
{
        unsigned char hdr[SHOAL_CACHE_HDR_MAX];
        char hex[SHOAL_BLOCK_ID_HEX], tmpname[SHOAL_BLOCK_ID_HEX + 64];
        struct cache_entry *e, *old, *victims = NULL;
        pthread_mutex_t *pl;
        struct cache_dir *d;
        uint64_t fsize;
        uint32_t hlen;
        int leaf = -1, fd = -1, pick, ret;
        unsigned di;

        if (!shoal_cache_enabled(c))
                return -ENODEV;
        if (!id || !data || len == 0 || len > SHOAL_BLOCK_SIZE_MAX)
                return -EINVAL;
        e = calloc(1, sizeof(*e));
        if (!e)
                return -ENOMEM;
        hlen = shoal_cache_hdr_encode(hdr, id, data, len);
        fsize = (uint64_t)hlen + len;
        e->id = *id;
        e->bytes = fsize;
        lru_init(&e->lru);

        pthread_mutex_lock(&c->lock);
        pick = pick_dir_locked(c, id, health_now(c));
        pthread_mutex_unlock(&c->lock);
        if (pick < 0) {
                ret = -EIO; /* every dir is out of use: the insert is dropped */
                goto out_free;
        }
        di = (unsigned)pick;
        d = &c->dirs[di];
        fs_refresh_maybe(c, di);

        pthread_mutex_lock(&c->lock);
        ret = make_room_locked(c, id, di, fsize, &victims);
        pthread_mutex_unlock(&c->lock);
        release_victims(c, victims);
        victims = NULL;
        if (ret)
                goto out_count;

        shoal_block_id_hex(id, hex);
        leaf = fanout_open(d, id, true);
        if (leaf < 0) {
                ret = leaf;
                goto out_unreserve;
        }
        snprintf(tmpname, sizeof(tmpname), "%s.%d.%llx.%08llx", hex, (int)getpid(),
                 (unsigned long long)atomic_fetch_add(&c->tmp_seq, 1),
                 (unsigned long long)(shoal_rand64() & 0xffffffffULL));
        fd = openat(d->tmp_fd, tmpname, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, FILE_MODE);
        if (fd < 0) {
                ret = -errno;
                goto out_unreserve;
        }
        ret = shoal_write_all(fd, hdr, hlen);
        if (!ret)
                ret = shoal_write_all(fd, data, len);
        /* Some filesystems (NFS, FUSE) report a failed write-back only at close. */
        if (close(fd) && !ret)
                ret = -errno;
        fd = -1;
        if (ret)
                goto out_unlink_tmp;
        pl = path_lock(c, id);
        pthread_mutex_lock(pl);
        if (renameat(d->tmp_fd, tmpname, leaf, hex)) {
                ret = -errno;
                pthread_mutex_unlock(pl);
                goto out_unlink_tmp;
        }
        close(leaf);
        pthread_mutex_lock(&c->lock);
        c->reserved -= fsize;
        old = index_find(c, id);
        if (old)
                entry_detach(c, old);
        e->dir = di;
        entry_attach(c, e);
        pthread_mutex_unlock(&c->lock);
        /* In this dir the rename replaced the old copy; one in another dir is stale. */
        if (old && old->dir != di)
                block_unlink(c, old->dir, id);
        pthread_mutex_unlock(pl);
        free(old);
        shoal_metric_inc(SHOAL_M_blockcache_writes);
        shoal_metric_add(SHOAL_M_blockcache_write_bytes, len);
        dir_io_ok(c, di);
        return 0;

out_unlink_tmp:
        unlinkat(d->tmp_fd, tmpname, 0);
out_unreserve:
        if (leaf >= 0)
                close(leaf);
        pthread_mutex_lock(&c->lock);
        c->reserved -= fsize;
        fs_of(c, di)->fs_delta -= (int64_t)fsize;
        if (ret == -ENOSPC || ret == -EDQUOT) {
                /* Our estimate was wrong (others write to this filesystem too): free some room
                 * so later inserts can succeed, and look at the real figures next time. */
                uint64_t freed = 0;
                unsigned nfreed = 0;
                struct cache_entry *v;
                while ((nfreed < ENOSPC_EVICT_MIN || freed < 2 * fsize) &&
                       (v = lru_oldest(c, (int)d->fs))) {
                        freed += v->bytes;
                        nfreed++;
                        evict_locked(c, v, &victims);
                }
                fs_of(c, di)->fs_known = false;
        }
        pthread_mutex_unlock(&c->lock);
        release_victims(c, victims);
        if (is_dir_failure(ret))
                dir_io_error(c, di, ret);
out_count:
        shoal_metric_inc(SHOAL_M_blockcache_write_errors);
        log_ratelimited(SHOAL_LOG_WARN, MOD, "insert of %u bytes failed: %s", len, strerror(-ret));
out_free:
        free(e);
        return ret;
}

int shoal_cache_remove(struct shoal_cache *c, const struct shoal_block_id *id)
{
        struct cache_entry *e;
        unsigned di;

        if (!c || !c->enabled)
                return -ENOENT;
        pthread_mutex_t *pl = path_lock(c, id);
        pthread_mutex_lock(pl);
        pthread_mutex_lock(&c->lock);
        e = index_find(c, id);
        if (e)
                entry_detach(c, e);
        pthread_mutex_unlock(&c->lock);
        if (e) {
                di = e->dir;
                block_unlink(c, di, id);
        }
        pthread_mutex_unlock(pl);
        if (!e)
                return -ENOENT;
        free(e);
        return 0;
}

bool shoal_cache_contains(struct shoal_cache *c, const struct shoal_block_id *id)
{
        bool found;

        if (!c || !c->enabled)
                return false;
        pthread_mutex_lock(&c->lock);
        struct cache_entry *e = index_find(c, id);
        found = e && dir_usable_locked(c, &c->dirs[e->dir], health_now(c));
        pthread_mutex_unlock(&c->lock);
        return found;
}

void shoal_cache_usage(struct shoal_cache *c, struct shoal_cache_usage *u)
{
        memset(u, 0, sizeof(*u));
        if (!c)
                return;
        u->capacity = c->capacity;
        if (!c->enabled)
                return;
        pthread_mutex_lock(&c->lock);
        uint64_t now = health_now(c);
        for (unsigned i = 0; i < c->ndirs; i++)
                dir_usable_locked(c, &c->dirs[i], now);
        u->blocks = c->count;
        u->bytes = c->bytes;
        u->dirs_failing = c->dirs_down;
        u->dirs = c->ndirs - c->dirs_down;
        pthread_mutex_unlock(&c->lock);
}

int shoal_cache_block_path(struct shoal_cache *c, const struct shoal_block_id *id, char *out,
                           size_t outlen)
{
        char hex[SHOAL_BLOCK_ID_HEX];
        struct cache_entry *e;
        unsigned di = 0;

        if (!c || !c->enabled)
                return -ENOENT;
        pthread_mutex_lock(&c->lock);
        e = index_find(c, id);
        if (e)
                di = e->dir;
        pthread_mutex_unlock(&c->lock);
        if (!e)
                return -ENOENT;
        shoal_block_id_hex(id, hex);
        if ((size_t)snprintf(out, outlen, "%s/blocks/%.2s/%.2s/%s", c->dirs[di].root, hex, hex + 2,
                             hex) >= outlen)
                return -ENAMETOOLONG;
        return 0;
}

void shoal_cache_debug_dir_error(struct shoal_cache *c, unsigned dir, int err)
{
        if (c && dir < c->ndirs)
                dir_io_error(c, dir, err);
}

void shoal_cache_debug_set_down_ns(struct shoal_cache *c, uint64_t ns)
{
        pthread_mutex_lock(&c->lock);
        c->down_ns = ns;
        pthread_mutex_unlock(&c->lock);
}

void shoal_cache_debug_advance(struct shoal_cache *c, uint64_t ns)
{
        __atomic_add_fetch(&c->clock_skew, ns, __ATOMIC_RELAXED);
}
