/* The index of the disk cache and its eviction: a hash table of the blocks on disk, one LRU per
 * folder (cross-folder age by a shared tick), the byte budget (capacity, inserts in flight) and the
 * free space of each filesystem (statvfs at most once a second, corrected by what the cache wrote
 * and removed since). Evicted entries leave the index under the lock; their files are unlinked
 * after it, under their path locks (cache_release_victims). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "cache/cache_internal.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define MOD "cache"

#define STATVFS_EVERY_NS SHOAL_NS_PER_SEC
#define ENOSPC_EVICT_MIN 4 /* blocks freed at least after an insert met a full disk */
#define HASH_INIT        1024

static size_t bucket_of(const struct shoal_cache *c, const struct shoal_block_id *id)
{
        return (size_t)shoal_block_id_hash64(id) & (c->nbuckets - 1);
}

struct cache_entry *cache_index_find_locked(struct shoal_cache *c, const struct shoal_block_id *id)
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

void cache_entry_attach_locked(struct shoal_cache *c, struct cache_entry *e)
{
        index_add(c, e);
        e->tick = ++c->tick;
        shoal_lru_add(&c->dirs[e->dir].lru, &e->lru);
        shoal_metric_gauge_add(SHOAL_M_blockcache_blocks, 1);
        shoal_metric_gauge_add(SHOAL_M_blockcache_bytes, (int64_t)e->bytes);
}

void cache_entry_detach_locked(struct shoal_cache *c, struct cache_entry *e)
{
        struct cache_entry **pp = &c->buckets[bucket_of(c, &e->id)];
        while (*pp != e)
                pp = &(*pp)->hnext;
        *pp = e->hnext;
        e->hnext = NULL;
        shoal_lru_del(&c->dirs[e->dir].lru, &e->lru);
        c->count--;
        c->bytes -= e->bytes;
        cache_fs_of(c, e->dir)->fs_delta -= (int64_t)e->bytes;
        shoal_metric_gauge_add(SHOAL_M_blockcache_blocks, -1);
        shoal_metric_gauge_add(SHOAL_M_blockcache_bytes, -(int64_t)e->bytes);
}

void cache_entry_touch_locked(struct shoal_cache *c, struct cache_entry *e)
{
        shoal_lru_touch(&c->dirs[e->dir].lru, &e->lru);
        e->tick = ++c->tick;
}

/* The least recently used entry over all dirs (FS < 0) or over the dirs of filesystem FS. */
static struct cache_entry *lru_oldest(struct shoal_cache *c, int fs)
{
        struct cache_entry *best = NULL;
        for (unsigned i = 0; i < c->ndirs; i++) {
                struct cache_dir *d = &c->dirs[i];
                struct shoal_list *cold = shoal_lru_coldest(&d->lru);
                if ((fs >= 0 && d->fs != (unsigned)fs) || !cold)
                        continue;
                struct cache_entry *e = shoal_list_entry(cold, struct cache_entry, lru);
                if (!best || e->tick < best->tick)
                        best = e;
        }
        return best;
}

/* Victims are chained through hnext, their files unlinked once the lock is dropped. */
static void evict_locked(struct shoal_cache *c, struct cache_entry *e, struct cache_entry **victims)
{
        cache_entry_detach_locked(c, e);
        shoal_metric_inc(SHOAL_M_blockcache_evictions);
        shoal_metric_add(SHOAL_M_blockcache_evict_bytes, e->bytes);
        e->hnext = *victims;
        *victims = e;
}

void cache_fs_refresh(struct shoal_cache *c, unsigned di)
{
        struct cache_dir *fsd = cache_fs_of(c, di);
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

int cache_make_room_locked(struct shoal_cache *c, const struct shoal_block_id *id, unsigned di,
                           uint64_t fsize, struct cache_entry **victims)
{
        struct cache_dir *fsd = cache_fs_of(c, di);
        struct cache_entry *e, *old = cache_index_find_locked(c, id);
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

void cache_release_victims(struct shoal_cache *c, struct cache_entry *v)
{
        while (v) {
                struct cache_entry *next = v->hnext, *now;
                pthread_mutex_t *pl = cache_path_lock(c, &v->id);

                pthread_mutex_lock(pl);
                pthread_mutex_lock(&c->lock);
                now = cache_index_find_locked(c, &v->id);
                bool back = now && now->dir == v->dir;
                pthread_mutex_unlock(&c->lock);
                if (!back)
                        cache_block_unlink(c, v->dir, &v->id);
                pthread_mutex_unlock(pl);
                free(v);
                v = next;
        }
}

void cache_unreserve_locked(struct shoal_cache *c, unsigned di, uint64_t fsize, int err,
                            struct cache_entry **victims)
{
        struct cache_dir *fsd = cache_fs_of(c, di);

        c->reserved -= fsize;
        fsd->fs_delta -= (int64_t)fsize;
        if (err != -ENOSPC && err != -EDQUOT)
                return;
        uint64_t freed = 0;
        unsigned nfreed = 0;
        struct cache_entry *v;
        while ((nfreed < ENOSPC_EVICT_MIN || freed < 2 * fsize) &&
               (v = lru_oldest(c, (int)c->dirs[di].fs))) {
                freed += v->bytes;
                nfreed++;
                evict_locked(c, v, victims);
        }
        fsd->fs_known = false;
}

void cache_index_shrink(struct shoal_cache *c)
{
        struct cache_entry *victims = NULL, *e;

        if (c->capacity == UINT64_MAX)
                return;
        pthread_mutex_lock(&c->lock);
        while (c->bytes > c->capacity && (e = lru_oldest(c, -1)))
                evict_locked(c, e, &victims);
        pthread_mutex_unlock(&c->lock);
        cache_release_victims(c, victims);
}

int cache_index_init(struct shoal_cache *c)
{
        c->nbuckets = HASH_INIT;
        c->buckets = calloc(c->nbuckets, sizeof(*c->buckets));
        return c->buckets ? 0 : -ENOMEM;
}

void cache_index_free(struct shoal_cache *c)
{
        for (size_t i = 0; c->buckets && i < c->nbuckets; i++) {
                struct cache_entry *e = c->buckets[i], *next;
                for (; e; e = next) {
                        next = e->hnext;
                        free(e);
                }
        }
        free(c->buckets);
        c->buckets = NULL;
}

/* ---- the index rebuilt at start ---- */

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
                if (cache_index_find_locked(c, &id)) {
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
                shoal_list_init(&e->lru);
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

/* Sizes come from stat; headers are checked lazily when a block is opened, so a start over a
 * large cache costs one stat per block. */
int cache_index_rebuild(struct shoal_cache *c)
{
        struct entry_vec vec = {0};
        int ret = 0;

        for (unsigned i = 0; i < c->ndirs && !ret; i++)
                ret = scan_dir(c, i, &vec);
        if (!ret) {
                /* Oldest file first, so the LRU order approximates the last process's. */
                if (vec.n)
                        qsort(vec.v, vec.n, sizeof(*vec.v), cmp_mtime);
                for (size_t i = 0; i < vec.n; i++) {
                        struct cache_entry *e = vec.v[i];
                        e->tick = ++c->tick;
                        shoal_lru_add(&c->dirs[e->dir].lru, &e->lru);
                }
                shoal_metric_gauge_add(SHOAL_M_blockcache_blocks, (int64_t)c->count);
                shoal_metric_gauge_add(SHOAL_M_blockcache_bytes, (int64_t)c->bytes);
                shoal_metric_gauge_add(SHOAL_M_blockcache_dirs, (int64_t)c->ndirs);
        }
        free(vec.v);
        return ret;
}

/* ---- queries ---- */

bool shoal_cache_contains(struct shoal_cache *c, const struct shoal_block_id *id)
{
        bool found;

        if (!c || !c->enabled)
                return false;
        pthread_mutex_lock(&c->lock);
        struct cache_entry *e = cache_index_find_locked(c, id);
        found = e && cache_dir_usable_locked(c, &c->dirs[e->dir], cache_health_now(c));
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
        uint64_t now = cache_health_now(c);
        for (unsigned i = 0; i < c->ndirs; i++)
                cache_dir_usable_locked(c, &c->dirs[i], now);
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
        e = cache_index_find_locked(c, id);
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
