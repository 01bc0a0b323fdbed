/* Folder health [L5]: an I/O error on a cache folder (cache_dir_failure) is counted; a folder with
 * DIR_ERR_LIMIT I/O errors within DIR_ERR_WINDOW_NS is taken out of use for c->down_ns, then
 * probed: back in use, where one more error takes it out again and one success makes it healthy.
 * A failing folder only ever produces misses and dropped inserts, never an error to the
 * application. Blocks are placed over the folders in use by rendezvous hashing. */
#include <errno.h>
#include <pthread.h>
#include <string.h>

#include "cache/cache_internal.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define MOD "cache"

#define DIR_ERR_LIMIT     3 /* I/O errors within DIR_ERR_WINDOW_NS that take a dir out of use */
#define DIR_ERR_WINDOW_NS (10 * SHOAL_NS_PER_SEC)

bool cache_dir_failure(int err)
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

uint64_t cache_health_now(const struct shoal_cache *c)
{
        return shoal_now_ns() + __atomic_load_n(&c->clock_skew, __ATOMIC_RELAXED);
}

bool cache_dir_usable_locked(struct shoal_cache *c, struct cache_dir *d, uint64_t now)
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

void cache_dir_io_error(struct shoal_cache *c, unsigned di, int err)
{
        struct cache_dir *d = &c->dirs[di];
        uint64_t now = cache_health_now(c);
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

void cache_dir_io_ok(struct shoal_cache *c, unsigned di)
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
int cache_pick_dir_locked(struct shoal_cache *c, const struct shoal_block_id *id, uint64_t now)
{
        uint64_t h, best_score = 0;
        int best = -1;
        memcpy(&h, id->b + 8, sizeof(h));
        for (unsigned i = 0; i < c->ndirs; i++) {
                if (!cache_dir_usable_locked(c, &c->dirs[i], now))
                        continue;
                uint64_t score = shoal_mix64(h ^ shoal_mix64(i + 1));
                if (best < 0 || score > best_score) {
                        best = (int)i;
                        best_score = score;
                }
        }
        return best;
}

void shoal_cache_debug_dir_error(struct shoal_cache *c, unsigned dir, int err)
{
        if (c && dir < c->ndirs)
                cache_dir_io_error(c, dir, err);
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
