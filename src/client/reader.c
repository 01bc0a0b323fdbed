#include "client/reader.h"
#include "client/reader_internal.h"
#include "client/spread.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "cache/cache.h"
#include "common/bufpool.h"
#include "common/forkgate.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "transport/select.h"
#include "store/store.h"

#define VALID_WORDS    SHOAL_READER_VALID_WORDS
#define BUF_WAIT_NS    (30ULL * 1000000000ULL)
#define PREFETCH_QUEUE 64

struct mblock {
        struct shoal_block_id id;
        uint32_t len;
        bool used;        /* holds (part of) a block: in the hash table */
        bool filling;     /* one thread is filling missing chunks */
        bool peer_filled; /* (the filler's) the fill came from the owner, as the next member */
        bool copy;        /* a second copy (spread reads): never written to the disk cache */
        bool stale;       /* a copy of an older version of its object: dropped when unreferenced */
        uint64_t key_h, ver_h; /* of a copy: its object's key and version (shoal_spread_hash) */
        int refs;
        char *buf;
        uint64_t valid[VALID_WORDS];
        struct mblock *hnext;               /* hash chain */
        struct mblock *lru_prev, *lru_next; /* unreferenced blocks, least recent first */
};

struct prefetch_task {
        struct shoal_object obj;
        uint32_t index;
};

struct shoal_reader {
        struct shoal_reader_config cfg;
        struct shoal_bufpool *pool;
        struct shoal_spread *spread;
        struct mblock *blocks;
        unsigned nblocks;
        struct mblock **hash;
        unsigned hash_mask;
        struct mblock lru; /* sentinel */
        pthread_mutex_t mu;
        pthread_cond_t cond; /* a fill finished or a block became free */

        /* readahead */
        pthread_t *threads;
        unsigned nthreads;
        struct prefetch_task queue[PREFETCH_QUEUE];
        unsigned q_head, q_len;
        pthread_cond_t q_cond;
        bool stopping;
};

static void lru_unlink(struct mblock *mb)
{
        if (mb->lru_prev) {
                mb->lru_prev->lru_next = mb->lru_next;
                mb->lru_next->lru_prev = mb->lru_prev;
                mb->lru_prev = mb->lru_next = NULL;
        }
}

static void lru_push_tail(struct shoal_reader *r, struct mblock *mb)
{
        mb->lru_prev = r->lru.lru_prev;
        mb->lru_next = &r->lru;
        r->lru.lru_prev->lru_next = mb;
        r->lru.lru_prev = mb;
}

/* For a buffer that holds nothing worth keeping: it is reused first. */
static void lru_push_head(struct shoal_reader *r, struct mblock *mb)
{
        mb->lru_prev = &r->lru;
        mb->lru_next = r->lru.lru_next;
        r->lru.lru_next->lru_prev = mb;
        r->lru.lru_next = mb;
}

static struct mblock **hash_slot(struct shoal_reader *r, const struct shoal_block_id *id)
{
        return &r->hash[shoal_block_id_hash64(id) & r->hash_mask];
}

static struct mblock *hash_find(struct shoal_reader *r, const struct shoal_block_id *id)
{
        for (struct mblock *mb = *hash_slot(r, id); mb; mb = mb->hnext)
                if (shoal_block_id_eq(&mb->id, id))
                        return mb;
        return NULL;
}

/* buffer_used_bytes counts buffers that hold (or are being filled with) a block: claimed into
 * the hash table, until removed from it. */
static void buffer_gauge(struct shoal_reader *r, int sign)
{
        shoal_metric_gauge_add(SHOAL_M_buffer_used_bytes, sign * (int64_t)r->cfg.vol->block_size);
}

static void hash_remove(struct shoal_reader *r, struct mblock *mb)
{
        if (mb->used)
                buffer_gauge(r, -1);
        if (mb->copy)
                shoal_metric_gauge_add(SHOAL_M_group_spread_copies, -1);
        mb->copy = mb->stale = false;
        for (struct mblock **pp = hash_slot(r, &mb->id); *pp; pp = &(*pp)->hnext) {
                if (*pp == mb) {
                        *pp = mb->hnext;
                        break;
                }
        }
        mb->hnext = NULL;
        mb->used = false;
}

static bool chunk_valid(const uint64_t *valid, uint64_t c)
{
        return valid[c / 64] & (1ULL << (c % 64));
}

/* Chunks [*FIRST, *END) of the range [OFF, OFF+LEN), in 64 bits so nothing can wrap. */
static void chunk_span(uint32_t off, uint32_t len, uint64_t *first, uint64_t *end)
{
        *first = off / SHOAL_CHUNK_SIZE;
        *end = ((uint64_t)off + len + SHOAL_CHUNK_SIZE - 1) / SHOAL_CHUNK_SIZE;
}

/* Callers pass ranges checked against the block (shoal_range_valid), so the span stays inside
 * the bitmap. */
static bool range_valid(const struct mblock *mb, uint32_t off, uint32_t len)
{
        uint64_t c, end;
        for (chunk_span(off, len, &c, &end); c < end; c++)
                if (!chunk_valid(mb->valid, c))
                        return false;
        return true;
}

static bool any_valid(const struct mblock *mb)
{
        for (unsigned i = 0; i < VALID_WORDS; i++)
                if (mb->valid[i])
                        return true;
        return false;
}

static void mark_valid(struct mblock *mb, uint32_t off, uint32_t len)
{
        uint64_t c, end;
        for (chunk_span(off, len, &c, &end); c < end; c++)
                mb->valid[c / 64] |= 1ULL << (c % 64);
}

int shoal_reader_missing_range(const uint64_t *valid, uint32_t block_len, uint32_t off,
                               uint32_t len, uint32_t *moff, uint32_t *mlen)
{
        if (!block_len || block_len > SHOAL_BLOCK_SIZE_MAX ||
            !shoal_range_valid(block_len, off, len))
                return -EINVAL;
        uint64_t c, end;
        chunk_span(off, len, &c, &end);
        while (c < end && chunk_valid(valid, c))
                c++;
        if (c == end)
                return -ENODATA;
        uint64_t first = c;
        while (c < end && !chunk_valid(valid, c))
                c++;
        /* first < c <= end <= chunks of the block: the start lies inside the block and the end
         * past the start, so the length is positive and fits the block. */
        uint64_t start = first * SHOAL_CHUNK_SIZE;
        uint64_t stop = SHOAL_MIN(c * SHOAL_CHUNK_SIZE, (uint64_t)block_len);
        *moff = (uint32_t)start;
        *mlen = (uint32_t)(stop - start);
        return 0;
}

static void cond_wait_until(pthread_cond_t *c, pthread_mutex_t *mu, uint64_t deadline)
{
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000ULL),
                              .tv_nsec = (long)(deadline % 1000000000ULL)};
        pthread_cond_timedwait(c, mu, &ts);
}

/* Finds or claims the in-memory block for ID of LEN bytes, with a reference, into *OUT. Called
 * with r->mu held. WAIT: whether to wait for an unreferenced block to come free. Returns 0;
 * -EBUSY when none did; -EINVAL for a length no block can have; -ESTALE when ID is held, by
 * someone, with another length. A block of a length other than the one asked is never handed out
 * (its chunks past the shorter length are not there); an unreferenced one is dropped instead, as
 * whoever made it had another idea of the object and nobody relies on it any more. */
static int mblock_get_locked(struct shoal_reader *r, const struct shoal_block_id *id, uint32_t len,
                             bool wait, struct mblock **out)
{
        if (!len || len > r->cfg.vol->block_size)
                return -EINVAL;
        uint64_t deadline = shoal_now_ns() + BUF_WAIT_NS;
        for (;;) {
                struct mblock *mb = hash_find(r, id);
                if (mb && mb->len != len) {
                        char hex[SHOAL_BLOCK_ID_HEX];
                        shoal_block_id_hex(id, hex);
                        log_ratelimited(SHOAL_LOG_WARN, "reader",
                                        "block %s asked with %u bytes, held with %u%s", hex, len,
                                        mb->len, mb->refs ? ": refused" : ": dropped");
                        if (mb->refs)
                                return -ESTALE;
                        lru_unlink(mb);
                        hash_remove(r, mb);
                        lru_push_head(r, mb);
                        mb = NULL;
                }
                if (mb) {
                        if (mb->refs++ == 0)
                                lru_unlink(mb);
                        *out = mb;
                        return 0;
                }
                mb = r->lru.lru_next;
                if (mb != &r->lru) {
                        lru_unlink(mb);
                        if (mb->used)
                                hash_remove(r, mb);
                        mb->id = *id;
                        mb->len = len;
                        mb->used = true;
                        buffer_gauge(r, 1);
                        mb->filling = false;
                        mb->copy = mb->stale = false;
                        mb->refs = 1;
                        memset(mb->valid, 0, sizeof(mb->valid));
                        struct mblock **slot = hash_slot(r, id);
                        mb->hnext = *slot;
                        *slot = mb;
                        *out = mb;
                        return 0;
                }
                if (!wait || shoal_now_ns() >= deadline)
                        return -EBUSY;
                cond_wait_until(&r->cond, &r->mu, deadline);
        }
}

static void mblock_put_locked(struct shoal_reader *r, struct mblock *mb)
{
        if (--mb->refs == 0) {
                /* A block that never became valid is worthless: reuse it first; so is a copy
                 * of a version of its object that is no longer read. */
                if (!any_valid(mb) || mb->stale) {
                        hash_remove(r, mb);
                        lru_push_head(r, mb);
                } else {
                        lru_push_tail(r, mb);
                }
                pthread_cond_broadcast(&r->cond);
        }
}

/* Whether a block read from the store should go into this process's disk cache: when this
 * process serves it (owner or alone), or when it only consumes and keeps a local cache. */
static bool should_cache_locally(struct shoal_reader *r, bool owner_is_self)
{
        if (!r->cfg.cache || !shoal_cache_enabled(r->cfg.cache))
                return false;
        if (!__atomic_load_n(&r->cfg.group, __ATOMIC_ACQUIRE))
                return true;
        return owner_is_self || !r->cfg.sharing;
}

/* AGAIN: the request counted its miss already (an owner's server looked first). */
static int read_local_cache(struct shoal_reader *r, struct mblock *mb, uint32_t off, uint32_t len,
                            bool again)
{
        struct shoal_cache *c = r->cfg.cache;
        if (!c || !shoal_cache_enabled(c))
                return -ENOENT;
        struct shoal_cache_block cb;
        int rc = again ? shoal_cache_open_block_again(c, &mb->id, mb->len, &cb)
                       : shoal_cache_open_block(c, &mb->id, mb->len, &cb);
        if (rc)
                return rc; /* counted as a miss by the cache, unless AGAIN */
        rc = shoal_cache_block_read(c, &cb, off, len, mb->buf + off, SHOAL_CACHE_READ_BUFFERED);
        shoal_cache_block_close(c, &cb);
        return rc;
}

static int read_store(struct shoal_reader *r, struct mblock *mb, const struct shoal_object *obj,
                      uint32_t index, uint32_t off, uint32_t len, bool cache_it)
{
        uint64_t base = (uint64_t)index * r->cfg.vol->block_size;
        int rc = shoal_store_read(r->cfg.store, obj->key, obj->version, base + off, len,
                                  mb->buf + off);
        if (rc)
                return rc;
        if (cache_it && off == 0 && len == mb->len) {
                int crc = shoal_cache_insert(r->cfg.cache, &mb->id, mb->buf, mb->len);
                if (crc && crc != -ENODEV)
                        log_ratelimited(SHOAL_LOG_WARN, "reader", "cache insert failed: %s",
                                        strerror(-crc));
        }
        return 0;
}

/* A block this member owns and misses may have moved here (a join, a drain, a weight change, a
 * return within the grace period): its owner in the previous view is asked before the store.
 * That member answers from its cache or refuses (it owns the block no more, so it does not fill
 * it), and only a member that still answers is asked (shoal_group_prev_owner). Fills the whole
 * of MB; returns 0 or the failure (then the store is read). */
static int read_prev_owner(struct shoal_reader *r, struct shoal_group *g, struct mblock *mb,
                           const struct shoal_object *obj, uint32_t index)
{
        struct shoal_group_view *v = shoal_group_view_get(g);
        const struct shoal_member *p;
        int rc = -ENOENT;
        if (shoal_group_prev_owner(v, &mb->id, &p) >= 0 && strcmp(p->id, shoal_group_self_id(g)) &&
            !shoal_remote_member_avoided(r->cfg.remote, p)) {
                rc = shoal_remote_read(r->cfg.remote, p, r->cfg.vol, obj, index, 0, mb->len,
                                       mb->buf, SHOAL_VIEW_COPY_ONLY);
                if (!rc) {
                        shoal_metric_inc(SHOAL_M_group_prev_owner_fetches);
                        log_debug("group", "copy %s [%llu+%u] from previous owner %s", obj->key,
                                  (unsigned long long)index * r->cfg.vol->block_size, mb->len,
                                  p->id);
                } else {
                        shoal_metric_inc(SHOAL_M_group_prev_owner_misses);
                        /* A refusal (not cached there) says nothing about the member. */
                        if (rc != -EREMOTEIO && rc != -ESTALE && rc != -ENOENT)
                                shoal_remote_avoid(r->cfg.remote, p->id);
                }
        }
        shoal_group_view_put(v);
        return rc;
}

/* One read of [OFF, OFF+LEN) of MB from member M of V. Returns 0 or the transport's error (a
 * failure that says nothing about the block avoids the member for a while). */
static int read_member(struct shoal_reader *r, struct shoal_group_view *v,
                       const struct shoal_member *m, struct mblock *mb,
                       const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len)
{
        shoal_spread_begin(r->spread, m->id);
        int rc = shoal_remote_read(r->cfg.remote, m, r->cfg.vol, obj, index, off, len,
                                   mb->buf + off, v->version);
        shoal_spread_end(r->spread, m->id);
        if (rc == -EXDEV) {
                /* A refusal like any NOT_OWNER, and a hint that our view is behind. */
                shoal_group_refresh_soon(__atomic_load_n(&r->cfg.group, __ATOMIC_ACQUIRE));
                return -EREMOTEIO;
        }
        if (rc && rc != -ESTALE && rc != -ENOENT) {
                log_ratelimited(SHOAL_LOG_WARN, "reader", "read from member %s (%s) failed: %s",
                                m->id, m->tcp_addr, strerror(-rc));
                if (rc != -EREMOTEIO)
                        shoal_remote_avoid(r->cfg.remote, m->id);
        }
        return rc;
}

static bool usable(struct shoal_reader *r, const struct shoal_member *m, const char *self)
{
        return r->cfg.remote && strcmp(m->id, self) &&
               !shoal_remote_member_avoided(r->cfg.remote, m);
}

/* A spread read (issue 29): with the block's owner O busy for this process, the next member NEXT
 * reads it instead (it fills it from O and keeps a copy). Returns 0, -ESTALE or -ENOENT as
 * read_member, or -EAGAIN when the owner is to be asked as usual (not busy, NEXT unusable, or
 * NEXT failed or refused: a spread read never makes a read fail). */
static int read_spread(struct shoal_reader *r, struct shoal_group_view *v,
                       const struct shoal_member *o, const struct shoal_member *next,
                       struct mblock *mb, const struct shoal_object *obj, uint32_t index,
                       uint32_t off, uint32_t len, const char *self)
{
        if (!next || !usable(r, next, self) ||
            !shoal_spread_choose_next(r->spread, o->id, next->id))
                return -EAGAIN;
        shoal_metric_inc(SHOAL_M_group_spread_reads);
        int rc = read_member(r, v, next, mb, obj, index, off, len);
        return !rc || rc == -ESTALE || rc == -ENOENT ? rc : -EAGAIN;
}

/* Where a block comes from in the group, for FILL. Sets *OWNER_IS_SELF (this process caches what
 * it reads from the store: it owns the block, or serves it in place of an owner that is away or
 * unreachable). Returns 0 when the group delivered [OFF, OFF+LEN), -ESTALE or -ENOENT from a
 * member (the object changed or is gone), else a failure after which the store is read.
 *
 * A client asks the block's owner (or, when the owner is busy, the next member: read_spread),
 * then, if that fails, the next member in the block's rendezvous order, which fills it in the
 * owner's place. A member answering a peer (ALLOW_REMOTE false) that is that next member asks the
 * owner first: the requester's view had the owner away while this one still sees it (views change
 * a heartbeat apart), or the requester found the owner busy. What it gets from the owner is a
 * peer fill (MB->peer_filled): a second copy, kept in memory only. */
static int fill_from_group(struct shoal_reader *r, struct shoal_group *g, struct mblock *mb,
                           const struct shoal_object *obj, uint32_t index, uint32_t off,
                           uint32_t len, bool allow_remote, bool *owner_is_self)
{
        struct shoal_group_view *v = shoal_group_view_get(g);
        const char *self = shoal_group_self_id(g);
        int top[2];
        unsigned nt = shoal_group_owners(v, &mb->id, top, 2);
        int rc = -EHOSTUNREACH;
        *owner_is_self = false;
        if (nt == 0)
                goto out;
        const struct shoal_member *o = &v->members[top[0]];
        const struct shoal_member *next = nt > 1 ? &v->members[top[1]] : NULL;
        if (!strcmp(o->id, self)) {
                *owner_is_self = true;
                goto out;
        }
        bool substitute = next && !strcmp(next->id, self);
        if (!allow_remote && !substitute)
                goto out;
        if (allow_remote && usable(r, o, self)) {
                rc = read_spread(r, v, o, next, mb, obj, index, off, len, self);
                if (rc != -EAGAIN)
                        goto out;
        }
        if (usable(r, o, self)) {
                rc = read_member(r, v, o, mb, obj, index, off, len);
                if (!allow_remote && !rc) {
                        mb->peer_filled = true;
                        shoal_metric_inc(SHOAL_M_group_peer_fills);
                        log_debug("group", "peer fill %s [%llu+%u] from owner %s", obj->key,
                                  (unsigned long long)index * r->cfg.vol->block_size + off, len,
                                  o->id);
                }
                if (!rc || rc == -ESTALE || rc == -ENOENT)
                        goto out;
                if (allow_remote) /* the owner failed a client: the next member, else the store */
                        shoal_metric_inc(SHOAL_M_remotecache_fallbacks);
        }
        if (substitute) {
                *owner_is_self = true; /* from the store, kept here */
                goto out;
        }
        if (allow_remote && next && usable(r, next, self)) {
                rc = read_member(r, v, next, mb, obj, index, off, len);
                if (!rc || rc == -ESTALE || rc == -ENOENT)
                        goto out;
        }
out:
        shoal_group_view_put(v);
        return rc;
}

/* Fills [off, off+len) of MB (chunk-aligned, none of it valid yet) from the layers below the
 * buffer. ALLOW_REMOTE: false on an owner answering a peer (it must not bounce the request). */
static int fill(struct shoal_reader *r, struct mblock *mb, const struct shoal_object *obj,
                uint32_t index, uint32_t off, uint32_t len, bool allow_remote, bool whole,
                uint32_t *filled_off, uint32_t *filled_len)
{
        *filled_off = off;
        *filled_len = len;
        /* (An owner answering a peer: its server's disk lookup counted the miss.) */
        int rc = read_local_cache(r, mb, off, len, !allow_remote);
        if (!rc)
                return 0;

        struct shoal_group *g = __atomic_load_n(&r->cfg.group, __ATOMIC_ACQUIRE);
        bool owner_is_self = !g;
        if (g) {
                rc = fill_from_group(r, g, mb, obj, index, off, len, allow_remote, &owner_is_self);
                if (!rc) {
                        if ((!r->cfg.sharing || owner_is_self) && off == 0 && len == mb->len &&
                            should_cache_locally(r, owner_is_self))
                                shoal_cache_insert(r->cfg.cache, &mb->id, mb->buf, mb->len);
                        return 0;
                }
                if (rc == -ESTALE || rc == -ENOENT)
                        return rc;
        }
        /* From the store: the whole block when nothing of it is held yet, so that it can be
         * cached; only the missing range otherwise (valid chunks are never rewritten). */
        if (whole) {
                off = 0;
                len = mb->len;
        }
        if (whole && owner_is_self && g && r->cfg.remote && r->cfg.sharing &&
            !read_prev_owner(r, g, mb, obj, index)) {
                if (should_cache_locally(r, true))
                        shoal_cache_insert(r->cfg.cache, &mb->id, mb->buf, mb->len);
                *filled_off = 0;
                *filled_len = mb->len;
                return 0;
        }
        rc = read_store(r, mb, obj, index, off, len, should_cache_locally(r, owner_is_self));
        *filled_off = off;
        *filled_len = len;
        return rc;
}

bool shoal_reader_filling(struct shoal_reader *r, const struct shoal_block_id *id)
{
        pthread_mutex_lock(&r->mu);
        struct mblock *mb = hash_find(r, id);
        bool filling = mb && mb->filling;
        pthread_mutex_unlock(&r->mu);
        return filling;
}

/* MB (held, just filled whole from its owner by a peer fill) becomes a second copy. Copies of
 * other versions of its object are dropped (at once, or when their last reader lets go): they
 * could never be read again, as a block's id names its version, but they hold buffers. */
static void mark_copy_locked(struct shoal_reader *r, struct mblock *mb,
                             const struct shoal_object *obj)
{
        if (mb->copy || !range_valid(mb, 0, mb->len))
                return;
        mb->copy = true;
        mb->key_h = shoal_spread_hash(obj->key);
        mb->ver_h = shoal_spread_hash(obj->version);
        shoal_metric_gauge_add(SHOAL_M_group_spread_copies, 1);
        for (unsigned i = 0; i < r->nblocks; i++) {
                struct mblock *o = &r->blocks[i];
                if (!o->used || !o->copy || o->key_h != mb->key_h || o->ver_h == mb->ver_h)
                        continue;
                if (o->refs) {
                        o->stale = true;
                        continue;
                }
                lru_unlink(o);
                hash_remove(r, o);
                lru_push_head(r, o);
        }
}

/* Makes [off, off+len) of block INDEX valid in MB (held), sharing fills with other threads. */
static int ensure_range(struct shoal_reader *r, struct mblock *mb, const struct shoal_object *obj,
                        uint32_t index, uint32_t off, uint32_t len, bool allow_remote)
{
        /* MB->len is fixed while it is referenced, so this check holds for the whole fill. */
        if (!shoal_range_valid(mb->len, off, len))
                return -EINVAL;
        int rc = 0;
        pthread_mutex_lock(&r->mu);
        while (!range_valid(mb, off, len)) {
                if (mb->filling) {
                        pthread_cond_wait(&r->cond, &r->mu);
                        continue;
                }
                uint32_t moff, mlen;
                rc = shoal_reader_missing_range(mb->valid, mb->len, off, len, &moff, &mlen);
                if (rc)
                        break; /* cannot happen after the checks above; never spin on it */
                bool whole = !any_valid(mb);
                mb->filling = true;
                mb->peer_filled = false;
                pthread_mutex_unlock(&r->mu);
                uint32_t foff, flen;
                rc = fill(r, mb, obj, index, moff, mlen, allow_remote, whole, &foff, &flen);
                pthread_mutex_lock(&r->mu);
                mb->filling = false;
                if (!rc)
                        mark_valid(mb, foff, flen); /* exactly what was filled, never more */
                if (!rc && mb->peer_filled)
                        mark_copy_locked(r, mb, obj);
                pthread_cond_broadcast(&r->cond);
                if (rc)
                        break;
        }
        pthread_mutex_unlock(&r->mu);
        return rc;
}

static void prefetch_enqueue(struct shoal_reader *r, const struct shoal_object *obj, uint32_t index)
{
        pthread_mutex_lock(&r->mu);
        struct shoal_block_id id;
        shoal_block_id_derive(r->cfg.vol, obj->key, obj->version, index, &id);
        struct mblock *mb = hash_find(r, &id);
        bool have = mb && (mb->filling || range_valid(mb, 0, mb->len));
        if (!have && r->q_len < PREFETCH_QUEUE) {
                struct prefetch_task *t = &r->queue[(r->q_head + r->q_len) % PREFETCH_QUEUE];
                t->obj = *obj;
                t->index = index;
                r->q_len++;
                pthread_cond_signal(&r->q_cond);
        }
        pthread_mutex_unlock(&r->mu);
}

static void *prefetch_main(void *arg)
{
        struct shoal_reader *r = arg;
        /* On the stack: an allocation here is outside the fork gate (common/thread.h). */
        struct shoal_object objbuf, *obj = &objbuf;
        pthread_mutex_lock(&r->mu);
        for (;;) {
                while (!r->q_len && !r->stopping)
                        pthread_cond_wait(&r->q_cond, &r->mu);
                if (r->stopping)
                        break;
                struct prefetch_task *t = &r->queue[r->q_head];
                *obj = t->obj;
                uint32_t index = t->index;
                r->q_head = (r->q_head + 1) % PREFETCH_QUEUE;
                r->q_len--;
                uint32_t len = shoal_block_len(obj->size, r->cfg.vol->block_size, index);
                struct shoal_block_id id;
                shoal_block_id_derive(r->cfg.vol, obj->key, obj->version, index, &id);
                /* Readahead never waits for a buffer: it only uses spare ones. */
                struct mblock *mb;
                if (mblock_get_locked(r, &id, len, false, &mb))
                        continue;
                pthread_mutex_unlock(&r->mu);
                /* Store calls hold process-wide locks (libcurl, OpenSSL): not across a fork of a
                 * library user. Readahead is a hint, so a pending fork just drops it. */
                bool taken;
                if (shoal_fork_gate_tryenter(&taken)) {
                        if (!ensure_range(r, mb, obj, index, 0, len, true))
                                shoal_metric_inc(SHOAL_M_readahead_blocks);
                        shoal_fork_gate_exit(taken);
                }
                pthread_mutex_lock(&r->mu);
                mblock_put_locked(r, mb);
        }
        pthread_mutex_unlock(&r->mu);
        return NULL;
}

struct shoal_reader *shoal_reader_create(const struct shoal_reader_config *cfg, char *err,
                                         size_t errlen)
{
        struct shoal_reader *r = calloc(1, sizeof(*r));
        if (!r) {
                snprintf(err, errlen, "out of memory");
                return NULL;
        }
        r->cfg = *cfg;
        uint32_t bs = cfg->vol->block_size;
        uint64_t n = cfg->buffer_bytes / bs;
        if (n < 4)
                n = 4;
        if (n > 65536)
                n = 65536;
        r->nblocks = (unsigned)n;
        r->pool = shoal_bufpool_create(bs, r->nblocks);
        r->spread = shoal_spread_create(cfg->spread_copies, cfg->spread_busy);
        r->blocks = calloc(r->nblocks, sizeof(*r->blocks));
        unsigned hs = 1;
        while (hs < 2 * r->nblocks)
                hs <<= 1;
        r->hash = calloc(hs, sizeof(*r->hash));
        r->hash_mask = hs - 1;
        if (!r->pool || !r->spread || !r->blocks || !r->hash) {
                snprintf(err, errlen, "cannot allocate %u block buffers of %u bytes", r->nblocks,
                         bs);
                goto out_free;
        }
        r->lru.lru_prev = r->lru.lru_next = &r->lru;
        for (unsigned i = 0; i < r->nblocks; i++) {
                r->blocks[i].buf = shoal_bufpool_get(r->pool, 0);
                lru_push_tail(r, &r->blocks[i]);
        }
        pthread_mutex_init(&r->mu, NULL);
        pthread_condattr_t ca;
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&r->cond, &ca);
        pthread_condattr_destroy(&ca);
        pthread_cond_init(&r->q_cond, NULL);
        if (cfg->readahead && cfg->prefetch_threads) {
                r->threads = calloc(cfg->prefetch_threads, sizeof(pthread_t));
                for (unsigned i = 0; r->threads && i < cfg->prefetch_threads; i++) {
                        if (shoal_thread_create(&r->threads[i], prefetch_main, r))
                                break;
                        r->nthreads++;
                }
        }
        shoal_metric_gauge_set(SHOAL_M_buffer_used_bytes, 0);
        return r;

out_free:
        shoal_bufpool_destroy(r->pool);
        shoal_spread_destroy(r->spread);
        free(r->blocks);
        free(r->hash);
        free(r);
        return NULL;
}

void shoal_reader_destroy(struct shoal_reader *r)
{
        if (!r)
                return;
        pthread_mutex_lock(&r->mu);
        r->stopping = true;
        pthread_cond_broadcast(&r->q_cond);
        pthread_mutex_unlock(&r->mu);
        for (unsigned i = 0; i < r->nthreads; i++)
                pthread_join(r->threads[i], NULL);
        free(r->threads);
        for (unsigned i = 0; i < r->nblocks; i++) {
                if (r->blocks[i].used)
                        buffer_gauge(r, -1);
                if (r->blocks[i].copy)
                        shoal_metric_gauge_add(SHOAL_M_group_spread_copies, -1);
        }
        pthread_mutex_destroy(&r->mu);
        pthread_cond_destroy(&r->cond);
        pthread_cond_destroy(&r->q_cond);
        shoal_bufpool_destroy(r->pool);
        shoal_spread_destroy(r->spread);
        free(r->blocks);
        free(r->hash);
        free(r);
}

int shoal_reader_prefetch(struct shoal_reader *r, const struct shoal_object *obj, uint32_t index)
{
        if (!r->nthreads)
                return -EOPNOTSUPP;
        if (index >= shoal_block_count(obj->size, r->cfg.vol->block_size))
                return -EINVAL;
        prefetch_enqueue(r, obj, index);
        return 0;
}

void shoal_reader_set_group(struct shoal_reader *r, struct shoal_group *g)
{
        __atomic_store_n(&r->cfg.group, g, __ATOMIC_RELEASE);
}

struct shoal_cache *shoal_reader_cache(struct shoal_reader *r)
{
        return r->cfg.cache;
}

struct shoal_store *shoal_reader_store(struct shoal_reader *r)
{
        return r->cfg.store;
}

static void readahead(struct shoal_reader *r, const struct shoal_object *obj, uint64_t off,
                      size_t len, struct shoal_stream *s)
{
        if (!s)
                return;
        uint32_t bs = r->cfg.vol->block_size;
        if (off == s->next_off && off != 0)
                s->seq_reads++;
        else if (off != s->next_off)
                s->seq_reads = 0, s->ra_next = 0;
        s->next_off = off + len;
        if (!r->nthreads || s->seq_reads < 1)
                return;
        uint32_t cur = (uint32_t)(off / bs);
        uint32_t nblocks = shoal_block_count(obj->size, bs);
        uint32_t from = SHOAL_MAX(cur + 1, s->ra_next);
        uint32_t to = SHOAL_MIN(nblocks, cur + 1 + r->cfg.readahead);
        for (uint32_t b = from; b < to; b++)
                prefetch_enqueue(r, obj, b);
        if (to > s->ra_next)
                s->ra_next = to;
}

/* The loop behind shoal_reader_read and shoal_reader_read_pinned: copies into DST, or (PINS set)
 * hands out the held blocks themselves. A pinning caller already holding a block never waits for
 * a free buffer, so readers that pin cannot deadlock each other; it gets a short count instead. */
static long read_range(struct shoal_reader *r, const struct shoal_object *obj, uint64_t off,
                       size_t len, void *dst, struct shoal_read_pin *pins, unsigned max,
                       unsigned *npins, struct shoal_stream *s)
{
        if (npins)
                *npins = 0;
        if (off >= obj->size || !len)
                return 0;
        if (len > obj->size - off)
                len = (size_t)(obj->size - off);
        readahead(r, obj, off, len, s);
        uint32_t bs = r->cfg.vol->block_size;
        size_t done = 0;
        while (done < len) {
                if (pins && *npins == max)
                        break;
                uint64_t pos = off + done;
                uint32_t index = (uint32_t)(pos / bs);
                uint32_t boff = (uint32_t)(pos % bs);
                uint32_t blen = shoal_block_len(obj->size, bs, index);
                uint32_t n = (uint32_t)SHOAL_MIN((uint64_t)(blen - boff), (uint64_t)(len - done));
                uint32_t aoff, alen;
                shoal_range_align(blen, boff, n, &aoff, &alen);
                struct shoal_block_id id;
                shoal_block_id_derive(r->cfg.vol, obj->key, obj->version, index, &id);

                pthread_mutex_lock(&r->mu);
                struct mblock *mb;
                int grc = mblock_get_locked(r, &id, blen, !(pins && *npins > 0), &mb);
                bool hit = !grc && range_valid(mb, aoff, alen);
                pthread_mutex_unlock(&r->mu);
                if (grc)
                        return done ? (long)done : grc;
                int rc = hit ? 0 : ensure_range(r, mb, obj, index, aoff, alen, true);
                if (!rc && hit) {
                        shoal_metric_inc(SHOAL_M_buffer_hits);
                        shoal_metric_add(SHOAL_M_buffer_hit_bytes, n);
                }
                if (!rc && pins) {
                        /* Valid chunks are never rewritten while referenced: safe to hand out. */
                        pins[*npins] = (struct shoal_read_pin){
                                .data = mb->buf + boff, .len = n, .ref = mb};
                        (*npins)++;
                        done += n;
                        continue;
                }
                if (!rc)
                        memcpy((char *)dst + done, mb->buf + boff, n);
                pthread_mutex_lock(&r->mu);
                mblock_put_locked(r, mb);
                pthread_mutex_unlock(&r->mu);
                if (rc)
                        return done ? (long)done : rc;
                done += n;
        }
        return (long)done;
}

long shoal_reader_read(struct shoal_reader *r, const struct shoal_object *obj, uint64_t off,
                       size_t len, void *dst, struct shoal_stream *s)
{
        return read_range(r, obj, off, len, dst, NULL, 0, NULL, s);
}

long shoal_reader_read_pinned(struct shoal_reader *r, const struct shoal_object *obj, uint64_t off,
                              size_t len, struct shoal_read_pin *pins, unsigned max,
                              unsigned *npins, struct shoal_stream *s)
{
        long n = read_range(r, obj, off, len, NULL, pins, max, npins, s);
        if (n < 0)
                shoal_reader_unpin(r, pins, *npins);
        return n;
}

void shoal_reader_unpin(struct shoal_reader *r, struct shoal_read_pin *pins, unsigned n)
{
        if (!n)
                return;
        pthread_mutex_lock(&r->mu);
        for (unsigned i = 0; i < n; i++)
                mblock_put_locked(r, pins[i].ref);
        pthread_mutex_unlock(&r->mu);
}

/* Whether this member owns block ID in its current view (or is not in a group). */
static bool owned_here(struct shoal_reader *r, const struct shoal_block_id *id)
{
        struct shoal_group *g = __atomic_load_n(&r->cfg.group, __ATOMIC_ACQUIRE);
        if (!g)
                return true;
        struct shoal_group_view *v = shoal_group_view_get(g);
        bool mine = shoal_group_rank(v, id, shoal_group_self_id(g)) == 0;
        shoal_group_view_put(v);
        return mine;
}

/* MB (held, valid) is a second copy: when this member has become the block's owner (its owner
 * left), it is an owned block from now on (written to the disk cache by the caller). Returns
 * whether MB is still a copy. */
static bool still_copy(struct shoal_reader *r, struct mblock *mb, const struct shoal_block_id *id)
{
        pthread_mutex_lock(&r->mu);
        bool copy = mb->copy;
        pthread_mutex_unlock(&r->mu);
        if (!copy || !owned_here(r, id))
                return copy;
        pthread_mutex_lock(&r->mu);
        if (mb->copy)
                shoal_metric_gauge_add(SHOAL_M_group_spread_copies, -1);
        mb->copy = false;
        pthread_mutex_unlock(&r->mu);
        return false;
}

int shoal_reader_hold_block(struct shoal_reader *r, const struct shoal_object *obj, uint32_t index,
                            struct shoal_held_block *hb)
{
        uint32_t len = shoal_block_len(obj->size, r->cfg.vol->block_size, index);
        if (!len)
                return -EINVAL;
        struct shoal_block_id id;
        shoal_block_id_derive(r->cfg.vol, obj->key, obj->version, index, &id);
        pthread_mutex_lock(&r->mu);
        struct mblock *mb;
        int rc = mblock_get_locked(r, &id, len, true, &mb);
        bool was_valid = !rc && range_valid(mb, 0, len);
        pthread_mutex_unlock(&r->mu);
        if (rc)
                return rc;
        rc = ensure_range(r, mb, obj, index, 0, len, false);
        if (rc) {
                pthread_mutex_lock(&r->mu);
                mblock_put_locked(r, mb);
                pthread_mutex_unlock(&r->mu);
                return rc;
        }
        /* Held in memory but gone from the disk cache (removed as corrupt on a peer's report, or
         * evicted): write it back, or the owner would serve it from memory only and fetch it
         * from the store again once the buffer is reused. A fill just inserted it already. A
         * second copy stays in memory only, unless this member owns the block now. */
        if (was_valid && !still_copy(r, mb, &id) && r->cfg.sharing && r->cfg.cache &&
            shoal_cache_enabled(r->cfg.cache) && !shoal_cache_contains(r->cfg.cache, &id))
                shoal_cache_insert(r->cfg.cache, &id, mb->buf, len);
        hb->data = mb->buf;
        hb->len = mb->len;
        hb->id = id;
        hb->ref = mb;
        return 0;
}

void shoal_reader_release(struct shoal_reader *r, struct shoal_held_block *hb)
{
        pthread_mutex_lock(&r->mu);
        mblock_put_locked(r, hb->ref);
        pthread_mutex_unlock(&r->mu);
        hb->ref = NULL;
}

void *shoal_reader_buffers(struct shoal_reader *r, size_t *len)
{
        return shoal_bufpool_base(r->pool, len);
}
