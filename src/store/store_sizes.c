/* Object sizes by (key, version): a bounded hash table with an LRU list of known sizes and
 * single-flight stats (see sizes.h). A stat in progress is a "pending" entry in the table that
 * later callers wait on; it leaves the table when the stat fails, and the last waiter frees it. */
#include "store/sizes.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "common/block.h"
#include "common/lru.h"
#include "store/store.h"

struct size_entry {
        struct size_entry *hnext;
        struct shoal_list lru; /* in the LRU of known sizes (pending ones are not) */
        uint64_t hash;
        uint64_t size;
        int rc;           /* the flight's outcome, for its waiters */
        unsigned waiters; /* callers waiting on (or about to read) this entry */
        bool pending;     /* a stat is in progress */
        bool linked;      /* in the hash table */
        size_t klen;
        char kv[]; /* key, NUL, version, NUL */
};

struct shoal_store_sizes {
        struct shoal_store *st;
        pthread_mutex_t mu;
        pthread_cond_t cond; /* a flight ended */
        struct size_entry **hash;
        uint64_t mask;
        struct shoal_lru lru; /* the known sizes in the table */
        unsigned max;
        uint64_t stats;
};

static uint64_t kv_hash(const char *key, const char *version)
{
        uint64_t h = 0xcbf29ce484222325ULL;
        for (const char *p = key; *p; p++)
                h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
        h *= 0x100000001b3ULL; /* the NUL between key and version */
        for (const char *p = version; *p; p++)
                h = (h ^ (unsigned char)*p) * 0x100000001b3ULL;
        return h;
}

static bool entry_is(const struct size_entry *e, uint64_t h, const char *key, const char *version)
{
        return e->hash == h && !strcmp(e->kv, key) && !strcmp(e->kv + e->klen + 1, version);
}

static struct size_entry *find(struct shoal_store_sizes *c, uint64_t h, const char *key,
                               const char *version)
{
        for (struct size_entry *e = c->hash[h & c->mask]; e; e = e->hnext)
                if (entry_is(e, h, key, version))
                        return e;
        return NULL;
}

static void hash_unlink(struct shoal_store_sizes *c, struct size_entry *e)
{
        for (struct size_entry **pp = &c->hash[e->hash & c->mask]; *pp; pp = &(*pp)->hnext) {
                if (*pp == e) {
                        *pp = e->hnext;
                        break;
                }
        }
        e->hnext = NULL;
        e->linked = false;
}

static struct size_entry *entry_new(struct shoal_store_sizes *c, uint64_t h, const char *key,
                                    const char *version)
{
        size_t kl = strlen(key), vl = strlen(version);
        struct size_entry *e = calloc(1, sizeof(*e) + kl + vl + 2);
        if (!e)
                return NULL;
        shoal_list_init(&e->lru);
        e->hash = h;
        e->klen = kl;
        memcpy(e->kv, key, kl + 1);
        memcpy(e->kv + kl + 1, version, vl + 1);
        e->hnext = c->hash[h & c->mask];
        c->hash[h & c->mask] = e;
        e->linked = true;
        return e;
}

/* Drops an entry from the table; whoever still waits on it frees it. */
static void entry_drop(struct shoal_store_sizes *c, struct size_entry *e)
{
        hash_unlink(c, e);
        shoal_lru_del(&c->lru, &e->lru);
        if (!e->waiters)
                free(e);
}

static void evict(struct shoal_list *n, void *c)
{
        entry_drop(c, shoal_list_entry(n, struct size_entry, lru));
}

/* Records a known size (E pending or new) and evicts the least recently used beyond the bound. */
static void entry_known(struct shoal_store_sizes *c, struct size_entry *e, uint64_t size)
{
        e->pending = false;
        e->size = size;
        e->rc = 0;
        shoal_lru_add(&c->lru, &e->lru);
        shoal_lru_trim(&c->lru, c->max, evict, c);
}

struct shoal_store_sizes *shoal_store_sizes_create(struct shoal_store *st, unsigned max_entries)
{
        struct shoal_store_sizes *c = calloc(1, sizeof(*c));
        if (!c)
                return NULL;
        c->st = st;
        c->max = max_entries ? max_entries : 1;
        uint64_t buckets = 16;
        while (buckets < 2ULL * c->max)
                buckets <<= 1;
        c->hash = calloc(buckets, sizeof(*c->hash));
        if (!c->hash) {
                free(c);
                return NULL;
        }
        c->mask = buckets - 1;
        shoal_lru_init(&c->lru);
        pthread_mutex_init(&c->mu, NULL);
        pthread_cond_init(&c->cond, NULL);
        return c;
}

void shoal_store_sizes_destroy(struct shoal_store_sizes *c)
{
        if (!c)
                return;
        for (uint64_t i = 0; i <= c->mask; i++) {
                struct size_entry *e = c->hash[i];
                while (e) {
                        struct size_entry *next = e->hnext;
                        free(e);
                        e = next;
                }
        }
        pthread_cond_destroy(&c->cond);
        pthread_mutex_destroy(&c->mu);
        free(c->hash);
        free(c);
}

int shoal_store_sizes_peek(struct shoal_store_sizes *c, const char *key, const char *version,
                           uint64_t *size)
{
        uint64_t h = kv_hash(key, version);
        int rc = -ENOENT;
        pthread_mutex_lock(&c->mu);
        struct size_entry *e = find(c, h, key, version);
        if (e && !e->pending) {
                *size = e->size;
                rc = 0;
        }
        pthread_mutex_unlock(&c->mu);
        return rc;
}

/* Called with the lock held: waits for E's flight and takes its outcome. */
static int wait_flight(struct shoal_store_sizes *c, struct size_entry *e, uint64_t *size)
{
        e->waiters++;
        while (e->pending)
                pthread_cond_wait(&c->cond, &c->mu);
        int rc = e->rc;
        if (!rc)
                *size = e->size;
        if (--e->waiters == 0 && !e->linked)
                free(e);
        return rc;
}

/* Runs the stat for pending entry E (lock not held) and publishes the outcome. */
static int fly(struct shoal_store_sizes *c, struct size_entry *e, const char *key,
               const char *version, uint64_t *size)
{
        struct shoal_object *o = malloc(sizeof(*o));
        int rc = o ? shoal_store_stat(c->st, key, o) : -ENOMEM;
        pthread_mutex_lock(&c->mu);
        c->stats += o != NULL;
        if (!rc && !strcmp(o->version, version)) {
                entry_known(c, e, o->size);
                *size = o->size;
        } else {
                if (!rc) {
                        /* Another version: its size is a fact as well; the asker is stale. */
                        uint64_t h = kv_hash(key, o->version);
                        if (!find(c, h, key, o->version)) {
                                struct size_entry *other = entry_new(c, h, key, o->version);
                                if (other)
                                        entry_known(c, other, o->size);
                        }
                        rc = -ESTALE;
                }
                e->pending = false;
                e->rc = rc;
                entry_drop(c, e);
        }
        pthread_cond_broadcast(&c->cond);
        pthread_mutex_unlock(&c->mu);
        free(o);
        return rc;
}

int shoal_store_sizes_get(struct shoal_store_sizes *c, const char *key, const char *version,
                          uint64_t *size)
{
        if (!shoal_key_valid(key, strnlen(key, SHOAL_KEY_MAX + 1)) ||
            !shoal_version_valid(version, strnlen(version, SHOAL_VERSION_MAX + 1)))
                return -EINVAL;
        uint64_t h = kv_hash(key, version);
        pthread_mutex_lock(&c->mu);
        struct size_entry *e = find(c, h, key, version);
        if (e && !e->pending) {
                *size = e->size;
                shoal_lru_touch(&c->lru, &e->lru);
                pthread_mutex_unlock(&c->mu);
                return 0;
        }
        if (e) {
                int rc = wait_flight(c, e, size);
                pthread_mutex_unlock(&c->mu);
                return rc;
        }
        e = entry_new(c, h, key, version);
        if (!e) {
                pthread_mutex_unlock(&c->mu);
                return -ENOMEM;
        }
        e->pending = true;
        pthread_mutex_unlock(&c->mu);
        return fly(c, e, key, version, size);
}

uint64_t shoal_store_sizes_stat_count(struct shoal_store_sizes *c)
{
        pthread_mutex_lock(&c->mu);
        uint64_t n = c->stats;
        pthread_mutex_unlock(&c->mu);
        return n;
}
