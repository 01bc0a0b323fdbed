#include "client/plan.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "client/reader.h"
#include "common/block.h"
#include "common/forkgate.h"
#include "common/thread.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "store/store.h"

#define MATCH_SPAN    16u   /* items past the head that a read may skip to */
#define LAG_MAX       8u    /* items left behind a read before they count as skipped */
#define LOOK_MAX      1024u /* items past the walk searched for the next use of a victim */
#define LOOK_BLOCKS   64u   /* blocks of one item looked at in that search */
#define SPARE_MAX     1024u /* objects no item names any more, kept for their stat */
#define OBJ_HASH_BITS 13
#define NONE          UINT64_MAX

enum {
        POBJ_NEW,
        POBJ_STATING,
        POBJ_OK,
        POBJ_ERR
};

/* An object the plan names: stat'ed once, then every item and block of it points here. */
struct pobj {
        struct shoal_object obj; /* key from the first item; the rest from the stat */
        int state;
        int rc; /* POBJ_ERR: the stat's error */
        unsigned refs;
        uint64_t hash;
        struct pobj *hnext;
        struct pobj *prev, *next; /* spare list (refs == 0), oldest first */
};

struct pitem {
        struct pobj *o;
        uint64_t off, len;       /* LEN clipped to the object once resolved */
        uint32_t first, nblocks; /* the blocks it touches, once resolved */
        uint64_t fetched;        /* bytes fetched for it */
        bool resolved, read;
        bool done; /* read to its end (or failed): consumed once all before it are */
};

/* A block of the window: pinned in the reader's buffers while it holds one. */
struct pblock {
        struct pobj *o;
        uint32_t index;
        bool used, pinned;
        unsigned pending; /* fetches in flight */
        struct shoal_read_pin pin;
        uint64_t next_use; /* nearest unread walked item that uses it; NONE */
        uint64_t mark, found;
        struct pblock *hnext; /* hash chain, or free list */
};

struct shoal_planner {
        struct shoal_planner_config cfg;
        uint32_t bs;
        pthread_mutex_t mu;
        pthread_cond_t cond; /* the queue, a stat, a fetch or the window changed */
        bool stopping;

        struct pitem *items;
        unsigned cap;
        uint64_t head, tail; /* unread items: [head, tail) */
        uint64_t walk_q;     /* the item the threads are at ... */
        uint32_t walk_j;     /* ... and its next block */

        struct pobj *ohash[1u << OBJ_HASH_BITS];
        struct pobj spare; /* sentinel */
        unsigned nspare;

        struct pblock *blocks;
        unsigned nblocks, nused;
        struct pblock **bhash;
        unsigned bmask;
        struct pblock *bfree;
        uint64_t epoch;

        pthread_t *threads;
        unsigned nthreads;
        struct shoal_planner_stats st;
};

/* ---- objects ------------------------------------------------------------------------------ */

static uint64_t key_hash(const char *key)
{
        uint64_t h = 1469598103934665603ULL;
        for (const unsigned char *s = (const unsigned char *)key; *s; s++)
                h = (h ^ *s) * 1099511628211ULL;
        return h;
}

static void spare_unlink(struct shoal_planner *p, struct pobj *o)
{
        o->prev->next = o->next;
        o->next->prev = o->prev;
        o->prev = o->next = NULL;
        p->nspare--;
}

static void pobj_free(struct shoal_planner *p, struct pobj *o)
{
        for (struct pobj **pp = &p->ohash[o->hash >> (64 - OBJ_HASH_BITS)]; *pp;
             pp = &(*pp)->hnext) {
                if (*pp == o) {
                        *pp = o->hnext;
                        break;
                }
        }
        free(o);
}

/* The object of KEY with a reference, made (not yet stat'ed) if the plan has none. NULL when out
 * of memory. */
static struct pobj *pobj_get(struct shoal_planner *p, const char *key)
{
        uint64_t h = key_hash(key);
        struct pobj **slot = &p->ohash[h >> (64 - OBJ_HASH_BITS)];
        for (struct pobj *o = *slot; o; o = o->hnext) {
                if (o->hash == h && !strcmp(o->obj.key, key)) {
                        if (!o->refs++)
                                spare_unlink(p, o);
                        return o;
                }
        }
        struct pobj *o = calloc(1, sizeof(*o));
        if (!o)
                return NULL;
        shoal_strlcpy(o->obj.key, key, sizeof(o->obj.key));
        o->hash = h;
        o->refs = 1;
        o->hnext = *slot;
        *slot = o;
        return o;
}

/* Drops a reference; an object nobody names is kept a while (its stat), the oldest freed. */
static void pobj_put(struct shoal_planner *p, struct pobj *o)
{
        if (--o->refs)
                return;
        o->prev = p->spare.prev;
        o->next = &p->spare;
        p->spare.prev->next = o;
        p->spare.prev = o;
        p->nspare++;
        /* One stuck in a stat by another thread stays (that thread still writes to it). */
        while (p->nspare > SPARE_MAX && p->spare.next->state != POBJ_STATING) {
                struct pobj *old = p->spare.next;
                spare_unlink(p, old);
                pobj_free(p, old);
        }
}

/* Stats O (state POBJ_NEW) with P->mu held, released meanwhile. GATED: pass the fork gate for
 * the store call (a planner thread); a refused entry leaves O new, to be tried again. */
static void pobj_stat_locked(struct shoal_planner *p, struct pobj *o, bool gated)
{
        o->state = POBJ_STATING;
        o->refs++;
        pthread_mutex_unlock(&p->mu);
        bool taken = false, may = true;
        if (gated)
                may = shoal_fork_gate_tryenter(&taken);
        /* O->obj.key is only read meanwhile (by matching reads); the rest is set under the lock. */
        struct shoal_object *tmp = may ? malloc(sizeof(*tmp)) : NULL;
        int rc = -ENOMEM;
        if (tmp)
                rc = shoal_store_stat(p->cfg.store, o->obj.key, tmp);
        if (gated)
                shoal_fork_gate_exit(taken);
        if (!may)
                shoal_sleep_ns(2 * SHOAL_NS_PER_MS);
        pthread_mutex_lock(&p->mu);
        if (!may) {
                o->state = POBJ_NEW;
        } else {
                if (!rc) {
                        shoal_strlcpy(tmp->key, o->obj.key, sizeof(tmp->key));
                        memcpy(&o->obj, tmp, sizeof(*tmp));
                }
                o->state = rc ? POBJ_ERR : POBJ_OK;
                o->rc = rc;
        }
        free(tmp);
        pobj_put(p, o);
        pthread_cond_broadcast(&p->cond);
}

/* ---- items -------------------------------------------------------------------------------- */

static struct pitem *item_at(struct shoal_planner *p, uint64_t seq)
{
        return &p->items[seq % p->cap];
}

/* The blocks of IT once its object is stat'ed (none for an error or an item past the end). */
static void item_resolve(struct shoal_planner *p, struct pitem *it)
{
        it->resolved = true;
        it->nblocks = 0;
        if (it->o->state != POBJ_OK)
                return;
        uint64_t size = it->o->obj.size;
        if (it->off >= size) {
                it->len = 0;
                return;
        }
        it->len = SHOAL_MIN(it->len, size - it->off);
        uint64_t first = it->off / p->bs, last = (it->off + it->len - 1) / p->bs;
        if (last >= shoal_block_count(size, p->bs)) /* cannot happen: clipped above */
                return;
        it->first = (uint32_t)first;
        it->nblocks = (uint32_t)(last - first + 1);
}

/* The part of block J of IT (resolved) that IT reads: block INDEX, [*BOFF, *BOFF + *BLEN). */
static void item_use(struct shoal_planner *p, const struct pitem *it, uint32_t j, uint32_t *index,
                     uint32_t *boff, uint32_t *blen)
{
        *index = it->first + j;
        uint64_t start = (uint64_t)*index * p->bs;
        uint64_t end = start + shoal_block_len(it->o->obj.size, p->bs, *index);
        uint64_t s = SHOAL_MAX(it->off, start), e = SHOAL_MIN(it->off + it->len, end);
        *boff = (uint32_t)(s - start);
        *blen = (uint32_t)(e - s);
}

/* ---- the window --------------------------------------------------------------------------- */

static unsigned bslot(const struct shoal_planner *p, const struct pobj *o, uint32_t index)
{
        uint64_t h = ((uint64_t)(uintptr_t)o >> 4) * 0x9E3779B97F4A7C15ULL ^ index;
        h *= 0xBF58476D1CE4E5B9ULL;
        return (unsigned)(h >> 32) & p->bmask;
}

static struct pblock *bfind(struct shoal_planner *p, const struct pobj *o, uint32_t index)
{
        for (struct pblock *b = p->bhash[bslot(p, o, index)]; b; b = b->hnext)
                if (b->o == o && b->index == index)
                        return b;
        return NULL;
}

static struct pblock *balloc(struct shoal_planner *p, struct pobj *o, uint32_t index)
{
        struct pblock *b = p->bfree;
        p->bfree = b->hnext;
        *b = (struct pblock){.o = o, .index = index, .used = true, .next_use = NONE};
        o->refs++;
        unsigned s = bslot(p, o, index);
        b->hnext = p->bhash[s];
        p->bhash[s] = b;
        p->nused++;
        p->st.window_bytes += p->bs;
        shoal_metric_gauge_add(SHOAL_M_plan_window_bytes, p->bs);
        return b;
}

static void bfree(struct shoal_planner *p, struct pblock *b)
{
        if (b->pinned)
                shoal_reader_unpin(p->cfg.reader, &b->pin, 1);
        for (struct pblock **pp = &p->bhash[bslot(p, b->o, b->index)]; *pp; pp = &(*pp)->hnext) {
                if (*pp == b) {
                        *pp = b->hnext;
                        break;
                }
        }
        pobj_put(p, b->o);
        b->used = b->pinned = false;
        b->hnext = p->bfree;
        p->bfree = b;
        p->nused--;
        p->st.window_bytes -= p->bs;
        shoal_metric_gauge_add(SHOAL_M_plan_window_bytes, -(int64_t)p->bs);
}

/* Whether item SEQ (resolved, walked up to WALK_J when it is the walk's item) uses B. */
static bool item_uses(const struct shoal_planner *p, uint64_t seq, const struct pitem *it,
                      const struct pblock *b)
{
        if (!it->resolved || it->o != b->o || b->index < it->first)
                return false;
        uint32_t n = seq == p->walk_q ? SHOAL_MIN(it->nblocks, p->walk_j) : it->nblocks;
        return b->index - it->first < n;
}

/* The nearest walked, unread item from FROM on that uses B; NONE. */
static uint64_t next_use(struct shoal_planner *p, const struct pblock *b, uint64_t from)
{
        uint64_t end = SHOAL_MIN(p->walk_q + 1, p->tail);
        for (uint64_t s = from; s < end; s++)
                if (item_uses(p, s, item_at(p, s), b))
                        return s;
        return NONE;
}

/* The block to give up for a new one: among those with no walked use (never one that a walked
 * item still needs) and no fetch in flight, the one used farthest ahead in the queue, or not at
 * all. NULL when there is none. */
static struct pblock *pick_victim(struct shoal_planner *p)
{
        unsigned n = 0;
        struct pblock *any = NULL;
        uint64_t ep = ++p->epoch;
        for (unsigned i = 0; i < p->nblocks; i++) {
                struct pblock *b = &p->blocks[i];
                if (b->used && !b->pending && b->next_use == NONE) {
                        b->mark = ep;
                        b->found = NONE;
                        any = b;
                        n++;
                }
        }
        if (n <= 1)
                return any;
        unsigned left = n;
        uint64_t end = SHOAL_MIN(p->tail, p->walk_q + LOOK_MAX);
        for (uint64_t s = p->walk_q; s < end && left > 1; s++) {
                const struct pitem *it = item_at(p, s);
                const struct pobj *o = it->o;
                if (o->state != POBJ_OK || it->off >= o->obj.size)
                        continue;
                uint64_t len = SHOAL_MIN(it->len, o->obj.size - it->off);
                uint64_t first = it->off / p->bs, last = (it->off + len - 1) / p->bs;
                for (uint64_t i = first; i <= last && i - first < LOOK_BLOCKS && left > 1; i++) {
                        struct pblock *b = bfind(p, o, (uint32_t)i);
                        if (b && b->mark == ep && b->found == NONE) {
                                b->found = s;
                                left--;
                        }
                }
        }
        struct pblock *best = NULL;
        for (unsigned i = 0; i < p->nblocks; i++) {
                struct pblock *b = &p->blocks[i];
                if (b->used && b->mark == ep && (!best || b->found > best->found))
                        best = b;
        }
        return best;
}

/* Marks items [head, UPTO) read or skipped: their blocks' next uses move on. */
static void consume(struct shoal_planner *p, uint64_t upto)
{
        while (p->head < upto && p->head < p->tail) {
                uint64_t seq = p->head++;
                struct pitem *it = item_at(p, seq);
                for (uint32_t j = 0; it->resolved && j < it->nblocks; j++) {
                        struct pblock *b = bfind(p, it->o, it->first + j);
                        if (b && b->next_use == seq)
                                b->next_use = next_use(p, b, seq + 1);
                }
                if (!it->read) {
                        p->st.unused += it->fetched;
                        shoal_metric_add(SHOAL_M_plan_unused_bytes, it->fetched);
                }
                pobj_put(p, it->o);
                it->o = NULL;
        }
        if (p->walk_q < p->head) {
                p->walk_q = p->head;
                p->walk_j = 0;
        }
        pthread_cond_broadcast(&p->cond);
}

/* ---- the threads -------------------------------------------------------------------------- */

/* Fetches [BOFF, BOFF+BLEN) of block INDEX of O into B (a fetch counted in B->pending) for item
 * SEQ. Called with P->mu held, released meanwhile. */
static void fetch_locked(struct shoal_planner *p, struct pblock *b, uint32_t index, uint32_t boff,
                         uint32_t blen, uint64_t seq)
{
        const struct shoal_object *obj = &b->o->obj; /* fixed once stat'ed */
        pthread_mutex_unlock(&p->mu);
        struct shoal_read_pin pin;
        unsigned np = 0;
        long got = -EAGAIN;
        bool taken = false;
        /* Store calls hold process-wide locks: not across a fork (a dropped fetch is a miss). */
        if (!p->cfg.fork_gated || shoal_fork_gate_tryenter(&taken)) {
                got = shoal_reader_read_pinned(p->cfg.reader, obj, (uint64_t)index * p->bs + boff,
                                               blen, &pin, 1, &np, NULL);
                if (p->cfg.fork_gated)
                        shoal_fork_gate_exit(taken);
        }
        pthread_mutex_lock(&p->mu);
        b->pending--;
        bool ok = got == (long)blen && np == 1;
        if (np && (!ok || b->pinned))
                shoal_reader_unpin(p->cfg.reader, &pin, np);
        else if (ok)
                b->pin = pin, b->pinned = true;
        if (ok) {
                p->st.prefetched += blen;
                shoal_metric_add(SHOAL_M_plan_prefetch_bytes, blen);
                if (seq >= p->head)
                        item_at(p, seq)->fetched += blen;
        } else if (!b->pinned && !b->pending) {
                bfree(p, b); /* the read will fetch it itself and see the error */
        }
        pthread_cond_broadcast(&p->cond);
}

/* One step of the walk, with P->mu held: a stat, a fetch, or a wait. */
static void walk_step(struct shoal_planner *p)
{
        if (p->walk_q >= p->tail) {
                pthread_cond_wait(&p->cond, &p->mu);
                return;
        }
        uint64_t seq = p->walk_q;
        struct pitem *it = item_at(p, seq);
        struct pobj *o = it->o;
        if (o->state == POBJ_NEW) {
                pobj_stat_locked(p, o, p->cfg.fork_gated);
                return;
        }
        if (o->state == POBJ_STATING) {
                pthread_cond_wait(&p->cond, &p->mu);
                return;
        }
        if (!it->resolved)
                item_resolve(p, it);
        if (p->walk_j >= it->nblocks) {
                p->walk_q++;
                p->walk_j = 0;
                return;
        }
        uint32_t index, boff, blen;
        item_use(p, it, p->walk_j, &index, &boff, &blen);
        struct pblock *b = bfind(p, o, index);
        if (!b) {
                if (p->nused == p->nblocks) {
                        struct pblock *v = pick_victim(p);
                        if (!v) {
                                pthread_cond_wait(&p->cond, &p->mu);
                                return;
                        }
                        bfree(p, v);
                }
                b = balloc(p, o, index);
        }
        if (b->next_use == NONE || b->next_use > seq)
                b->next_use = seq;
        p->walk_j++;
        b->pending++;
        fetch_locked(p, b, index, boff, blen, seq);
}

static void *planner_main(void *arg)
{
        struct shoal_planner *p = arg;
        pthread_mutex_lock(&p->mu);
        while (!p->stopping)
                walk_step(p);
        pthread_mutex_unlock(&p->mu);
        return NULL;
}

/* ---- API ---------------------------------------------------------------------------------- */

int shoal_planner_create(const struct shoal_planner_config *cfg, struct shoal_planner **out)
{
        uint32_t bs = cfg->vol->block_size;
        if (!cfg->reader || !cfg->store || cfg->window_bytes < bs || !cfg->inflight ||
            cfg->inflight > SHOAL_PLANNER_INFLIGHT_MAX ||
            cfg->queue_items > SHOAL_PLANNER_QUEUE_MAX)
                return -EINVAL;
        struct shoal_planner *p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        p->cfg = *cfg;
        p->bs = bs;
        p->cap = cfg->queue_items ? cfg->queue_items : SHOAL_PLANNER_QUEUE_MAX;
        uint64_t nb = cfg->window_bytes / bs;
        p->nblocks = (unsigned)SHOAL_MIN(nb, (uint64_t)65536);
        unsigned hs = 1;
        while (hs < 2 * p->nblocks)
                hs <<= 1;
        p->bmask = hs - 1;
        p->items = calloc(p->cap, sizeof(*p->items));
        p->blocks = calloc(p->nblocks, sizeof(*p->blocks));
        p->bhash = calloc(hs, sizeof(*p->bhash));
        p->threads = calloc(cfg->inflight, sizeof(*p->threads));
        if (!p->items || !p->blocks || !p->bhash || !p->threads) {
                shoal_planner_destroy(p);
                return -ENOMEM;
        }
        for (unsigned i = p->nblocks; i-- > 0;) {
                p->blocks[i].hnext = p->bfree;
                p->bfree = &p->blocks[i];
        }
        p->spare.prev = p->spare.next = &p->spare;
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->cond, NULL);
        for (unsigned i = 0; i < cfg->inflight; i++) {
                if (shoal_thread_create(&p->threads[i], planner_main, p))
                        break;
                p->nthreads++;
        }
        if (!p->nthreads) {
                shoal_planner_destroy(p);
                return -EAGAIN;
        }
        *out = p;
        return 0;
}

void shoal_planner_destroy(struct shoal_planner *p)
{
        if (!p)
                return;
        if (p->threads && p->nthreads) {
                pthread_mutex_lock(&p->mu);
                p->stopping = true;
                pthread_cond_broadcast(&p->cond);
                pthread_mutex_unlock(&p->mu);
                for (unsigned i = 0; i < p->nthreads; i++)
                        pthread_join(p->threads[i], NULL);
        }
        if (p->items && p->nthreads) {
                pthread_mutex_lock(&p->mu);
                consume(p, p->tail);
                for (unsigned i = 0; i < p->nblocks; i++)
                        if (p->blocks[i].used)
                                bfree(p, &p->blocks[i]);
                while (p->spare.next != &p->spare) {
                        struct pobj *o = p->spare.next;
                        spare_unlink(p, o);
                        pobj_free(p, o);
                }
                pthread_mutex_unlock(&p->mu);
                pthread_mutex_destroy(&p->mu);
                pthread_cond_destroy(&p->cond);
        }
        free(p->threads);
        free(p->items);
        free(p->blocks);
        free(p->bhash);
        free(p);
}

int shoal_planner_add(struct shoal_planner *p, const char *key, uint64_t off, uint64_t len)
{
        if (!key || strnlen(key, SHOAL_KEY_MAX + 1) > SHOAL_KEY_MAX || !len)
                return -EINVAL;
        pthread_mutex_lock(&p->mu);
        int rc = -EAGAIN;
        if (p->tail - p->head < p->cap) {
                struct pobj *o = pobj_get(p, key);
                rc = -ENOMEM;
                if (o) {
                        struct pitem *it = item_at(p, p->tail++);
                        /* LEN past the end is clipped once the size is known. */
                        *it = (struct pitem){.o = o, .off = off, .len = len};
                        rc = 0;
                        pthread_cond_broadcast(&p->cond);
                }
        }
        pthread_mutex_unlock(&p->mu);
        return rc;
}

/* The item a read of KEY at OFF follows: one of the next few items not yet done that the read
 * starts exactly at, or falls inside once the item is being read (the head, or one that a read
 * started: an item read in pieces); NONE (off the plan). Only exact starts otherwise, so that a
 * read elsewhere in an object the plan names later does not move the plan on. */
static uint64_t match(struct shoal_planner *p, const char *key, uint64_t off)
{
        uint64_t end = SHOAL_MIN(p->tail, p->head + MATCH_SPAN);
        for (uint64_t s = p->head; s < end; s++) {
                const struct pitem *it = item_at(p, s);
                if (it->done || strcmp(it->o->obj.key, key))
                        continue;
                bool started = s == p->head || it->read;
                if (off == it->off || (started && off > it->off && off - it->off < it->len))
                        return s;
        }
        return NONE;
}

/* Item SEQ is being read in pieces, now at OFF: its blocks wholly before OFF are no longer its
 * own next use, so that an item larger than the window (a whole shard) streams through it. */
static void item_passed(struct shoal_planner *p, uint64_t seq, uint64_t off)
{
        struct pitem *it = item_at(p, seq);
        for (uint32_t j = 0; it->resolved && j < it->nblocks; j++) {
                uint32_t index = it->first + j;
                if ((uint64_t)index + 1 > off / p->bs)
                        break;
                struct pblock *b = bfind(p, it->o, index);
                if (b && b->next_use == seq)
                        b->next_use = next_use(p, b, seq + 1);
        }
        pthread_cond_broadcast(&p->cond);
}

/* Whether the blocks of [OFF, OFF+LEN) of item SEQ (resolved; the range inside it) are in the
 * window with their fetch for this item landed: a read of them copies from memory. */
static bool read_hit(struct shoal_planner *p, uint64_t seq, uint64_t off, uint64_t len)
{
        const struct pitem *it = item_at(p, seq);
        if (!len || !it->nblocks)
                return true; /* nothing to fetch */
        uint64_t first = SHOAL_MAX(off / p->bs, (uint64_t)it->first);
        uint64_t last = SHOAL_MIN((off + len - 1) / p->bs, (uint64_t)it->first + it->nblocks - 1);
        for (uint64_t i = first; i <= last; i++) {
                uint32_t j = (uint32_t)(i - it->first);
                bool walked = seq < p->walk_q || (seq == p->walk_q && j < p->walk_j);
                const struct pblock *b = walked ? bfind(p, it->o, (uint32_t)i) : NULL;
                if (!b || !b->pinned || b->pending)
                        return false;
        }
        return true;
}

/* Item SEQ is done: the head moves past every done item. */
static void item_done(struct shoal_planner *p, uint64_t seq)
{
        item_at(p, seq)->done = true;
        while (p->head < p->tail && item_at(p, p->head)->done)
                consume(p, p->head + 1);
}

/* Reads through the reader, one block per call (as shoal_pread does). */
static long read_obj(struct shoal_planner *p, const struct shoal_object *obj, uint64_t off,
                     size_t len, void *dst)
{
        if (off >= obj->size)
                return 0;
        len = (size_t)SHOAL_MIN((uint64_t)len, obj->size - off);
        size_t done = 0;
        while (done < len) {
                uint64_t pos = off + done;
                size_t want = (size_t)SHOAL_MIN((uint64_t)(len - done), p->bs - pos % p->bs);
                long got =
                        shoal_reader_read(p->cfg.reader, obj, pos, want, (char *)dst + done, NULL);
                if (got < 0)
                        return done ? (long)done : got;
                if (!got)
                        break;
                done += (size_t)got;
        }
        return (long)done;
}

long shoal_planner_read(struct shoal_planner *p, const char *key, uint64_t off, size_t len,
                        void *dst)
{
        pthread_mutex_lock(&p->mu);
        uint64_t seq = match(p, key, off);
        struct pobj *o;
        if (seq != NONE) {
                /* Readers in several threads come a little out of order: the items just before
                 * this one may still be read. Those further behind were skipped. */
                if (seq > p->head + LAG_MAX)
                        consume(p, seq - LAG_MAX);
                struct pitem *it = item_at(p, seq);
                it->read = true;
                o = it->o;
                o->refs++;
        } else {
                o = pobj_get(p, key);
                if (!o) {
                        pthread_mutex_unlock(&p->mu);
                        return -ENOMEM;
                }
        }
        while (o->state == POBJ_NEW || o->state == POBJ_STATING) {
                if (o->state == POBJ_NEW)
                        pobj_stat_locked(p, o, false); /* the caller is inside the gate */
                else
                        pthread_cond_wait(&p->cond, &p->mu);
        }
        bool hit = false;
        uint64_t item_end = 0;
        if (seq != NONE && seq >= p->head) {
                struct pitem *it = item_at(p, seq);
                if (!it->resolved)
                        item_resolve(p, it);
                item_end = it->off + it->len;
                hit = o->state == POBJ_OK &&
                      read_hit(p, seq, off,
                               item_end > off ? SHOAL_MIN((uint64_t)len, item_end - off) : 0);
        }
        pthread_mutex_unlock(&p->mu);

        long rc = o->state == POBJ_ERR ? o->rc : read_obj(p, &o->obj, off, len, dst);

        pthread_mutex_lock(&p->mu);
        if (seq == NONE) {
                p->st.offplan++;
                shoal_metric_inc(SHOAL_M_plan_offplan_reads);
        } else if (hit) {
                p->st.hits++;
                shoal_metric_inc(SHOAL_M_plan_hits);
        } else {
                p->st.misses++;
                shoal_metric_inc(SHOAL_M_plan_misses);
        }
        /* An item is done once read to its end (or failed): its blocks may go. */
        if (seq != NONE && seq >= p->head && (rc < 0 || item_end <= off || len >= item_end - off))
                item_done(p, seq);
        else if (seq != NONE && seq >= p->head && rc > 0)
                item_passed(p, seq, off + (uint64_t)rc);
        pobj_put(p, o);
        pthread_mutex_unlock(&p->mu);
        return rc;
}

void shoal_planner_stats(struct shoal_planner *p, struct shoal_planner_stats *st)
{
        pthread_mutex_lock(&p->mu);
        *st = p->st;
        st->queued = p->tail - p->head;
        pthread_mutex_unlock(&p->mu);
}
