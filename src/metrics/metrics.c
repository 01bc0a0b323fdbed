#include "metrics/metrics.h"

#include "common/list.h"
#include "common/util.h"

#include <assert.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

const struct shoal_metric_def shoal_metric_defs[SHOAL_M__COUNT] = {
#define DEF(id, kind, help) [SHOAL_M_##id] = {#id, SHOAL_METRIC_##kind, help},
        SHOAL_METRICS_TABLE(DEF)
#undef DEF
};

#define IS_HIST_COUNTER 0
#define IS_HIST_GAUGE   0
#define IS_HIST_HIST    1

/* Slot of each histogram in a thread's slab, computed from the table at compile time: every entry
 * declares HS_<id> (the number of HIST ids before it) and a throwaway HS_<id>_end that advances
 * the enum counter by one only for HIST ids. */
enum hist_slot {
#define SLOT(id, kind, help) HS_##id, HS_##id##_end = HS_##id + IS_HIST_##kind - 1,
        SHOAL_METRICS_TABLE(SLOT)
#undef SLOT
        NHIST
};

static const short hist_slot_of[SHOAL_M__COUNT] = {
#define SLOT_OF(id, kind, help) [SHOAL_M_##id] = IS_HIST_##kind ? HS_##id : -1,
        SHOAL_METRICS_TABLE(SLOT_OF)
#undef SLOT_OF
};

#define SUB_BITS 3
_Static_assert(SHOAL_HIST_SUB == 1 << SUB_BITS, "bucket math assumes 8 sub-buckets");
/* Values below 2 * SUB get one bucket each; above, msb 4..63 get SUB buckets each. */
#define BUCKET_LAST ((63 - 2) * SHOAL_HIST_SUB + SHOAL_HIST_SUB - 1)
_Static_assert(BUCKET_LAST < SHOAL_HIST_BUCKETS, "u64 range must fit the bucket array");

#define CACHELINE 64

/* One per thread that ever touched a counter or histogram. Only the owning thread writes it (no
 * read-modify-write atomics needed); readers hold slab_lock and use atomic loads so 64-bit values
 * are never torn. */
struct slab {
        struct shoal_list link; /* in slab_list, under slab_lock */
        uint64_t counters[SHOAL_M__COUNT];
        struct shoal_hist_snap hists[NHIST];
};

static pthread_mutex_t slab_lock = PTHREAD_MUTEX_INITIALIZER;
static struct shoal_list slab_list = SHOAL_LIST_INIT(slab_list);
/* Values of exited threads, and of threads that could not get a slab; under slab_lock. */
static struct slab retired;

static pthread_once_t key_once = PTHREAD_ONCE_INIT;
static pthread_key_t slab_key;
static bool key_ok;

static _Thread_local struct slab *my_slab;
/* Set once this thread's slab was folded at exit: later calls (from other TLS destructors) must
 * not allocate a slab that nothing would free. */
static _Thread_local bool my_slab_gone;

struct gauge {
        int64_t v;
} __attribute__((aligned(CACHELINE)));
/* Padded: unrelated gauges touched by different threads must not share a cache line. */
static struct gauge gauges[SHOAL_M__COUNT];

static inline unsigned bucket_of(uint64_t v)
{
        if (v < 2 * SHOAL_HIST_SUB)
                return (unsigned)v;
        unsigned msb = 63 - (unsigned)__builtin_clzll(v);
        unsigned shift = msb - SUB_BITS;
        return (msb - 2) * SHOAL_HIST_SUB + (unsigned)((v >> shift) & (SHOAL_HIST_SUB - 1));
}

unsigned shoal_hist_bucket(uint64_t value)
{
        return bucket_of(value);
}

uint64_t shoal_hist_bucket_upper(unsigned b)
{
        if (b < 2 * SHOAL_HIST_SUB)
                return b;
        if (b >= BUCKET_LAST)
                return UINT64_MAX;
        unsigned msb = b / SHOAL_HIST_SUB + 2;
        unsigned shift = msb - SUB_BITS;
        uint64_t lower = (uint64_t)(SHOAL_HIST_SUB + b % SHOAL_HIST_SUB) << shift;
        return lower + ((1ULL << shift) - 1);
}

static void slab_fold(struct slab *dst, const struct slab *src)
{
        for (unsigned i = 0; i < SHOAL_M__COUNT; i++)
                dst->counters[i] += src->counters[i];
        for (unsigned h = 0; h < NHIST; h++) {
                struct shoal_hist_snap *d = &dst->hists[h];
                const struct shoal_hist_snap *s = &src->hists[h];
                d->count += s->count;
                d->sum += s->sum;
                d->max = SHOAL_MAX(d->max, s->max);
                for (unsigned b = 0; b < SHOAL_HIST_BUCKETS; b++)
                        d->buckets[b] += s->buckets[b];
        }
}

static void slab_release(void *arg)
{
        struct slab *s = arg;

        pthread_mutex_lock(&slab_lock);
        shoal_list_del(&s->link);
        slab_fold(&retired, s);
        pthread_mutex_unlock(&slab_lock);
        my_slab = NULL;
        my_slab_gone = true;
        free(s);
}

static void key_init(void)
{
        key_ok = pthread_key_create(&slab_key, slab_release) == 0;
}

static struct slab *slab_attach(void)
{
        struct slab *s;
        void *mem;

        if (my_slab_gone)
                return NULL;
        pthread_once(&key_once, key_init);
        if (!key_ok)
                return NULL;
        /* Aligned so that two threads' hot counters never share a cache line. */
        if (posix_memalign(&mem, CACHELINE, sizeof(*s)))
                return NULL;
        s = memset(mem, 0, sizeof(*s));
        if (pthread_setspecific(slab_key, s)) {
                free(s);
                return NULL;
        }
        pthread_mutex_lock(&slab_lock);
        shoal_list_push_back(&slab_list, &s->link);
        pthread_mutex_unlock(&slab_lock);
        my_slab = s;
        return s;
}

/* Single writer: a load and a store, atomic only so a concurrent reader never sees half. */
static inline void own_add(uint64_t *p, uint64_t v)
{
        __atomic_store_n(p, __atomic_load_n(p, __ATOMIC_RELAXED) + v, __ATOMIC_RELAXED);
}

static inline void hist_record(struct shoal_hist_snap *h, uint64_t value, bool owned)
{
        unsigned b = bucket_of(value);

        if (!owned) {
                h->count++;
                h->sum += value;
                h->max = SHOAL_MAX(h->max, value);
                h->buckets[b]++;
                return;
        }
        if (value > __atomic_load_n(&h->max, __ATOMIC_RELAXED))
                __atomic_store_n(&h->max, value, __ATOMIC_RELAXED);
        own_add(&h->sum, value);
        own_add(&h->count, 1);
        /* Release pairs with the snapshot's acquire load of the buckets: a reader that sees this
         * value in a bucket also sees it in max, so capping quantiles at max stays an upper
         * bound. */
        __atomic_store_n(&h->buckets[b], __atomic_load_n(&h->buckets[b], __ATOMIC_RELAXED) + 1,
                         __ATOMIC_RELEASE);
}

/* First call on this thread, or a thread past its exit: kept out of line so the fast path stays
 * a TLS load and an add. */
static __attribute__((noinline)) void add_slow(enum shoal_metric_id id, uint64_t v)
{
        struct slab *s = slab_attach();
        if (s) {
                own_add(&s->counters[id], v);
                return;
        }
        pthread_mutex_lock(&slab_lock);
        retired.counters[id] += v;
        pthread_mutex_unlock(&slab_lock);
}

void shoal_metric_add(enum shoal_metric_id id, uint64_t v)
{
        assert((unsigned)id < SHOAL_M__COUNT);
        assert(shoal_metric_defs[id].kind == SHOAL_METRIC_COUNTER);
        struct slab *s = my_slab;
        if (__builtin_expect(s != NULL, 1))
                own_add(&s->counters[id], v);
        else
                add_slow(id, v);
}

static __attribute__((noinline)) void observe_slow(int slot, uint64_t value)
{
        struct slab *s = slab_attach();
        if (s) {
                hist_record(&s->hists[slot], value, true);
                return;
        }
        pthread_mutex_lock(&slab_lock);
        hist_record(&retired.hists[slot], value, false);
        pthread_mutex_unlock(&slab_lock);
}

void shoal_metric_observe(enum shoal_metric_id id, uint64_t value)
{
        assert((unsigned)id < SHOAL_M__COUNT);
        int slot = hist_slot_of[id];
        assert(slot >= 0);
        /* Without asserts a wrong id is dropped rather than corrupting another histogram. */
        if (slot < 0)
                return;
        struct slab *s = my_slab;
        if (__builtin_expect(s != NULL, 1))
                hist_record(&s->hists[slot], value, true);
        else
                observe_slow(slot, value);
}

void shoal_metric_gauge_add(enum shoal_metric_id id, int64_t delta)
{
        assert((unsigned)id < SHOAL_M__COUNT);
        assert(shoal_metric_defs[id].kind == SHOAL_METRIC_GAUGE);
        __atomic_fetch_add(&gauges[id].v, delta, __ATOMIC_RELAXED);
}

void shoal_metric_gauge_set(enum shoal_metric_id id, int64_t v)
{
        assert((unsigned)id < SHOAL_M__COUNT);
        assert(shoal_metric_defs[id].kind == SHOAL_METRIC_GAUGE);
        __atomic_store_n(&gauges[id].v, v, __ATOMIC_RELAXED);
}

static void snap_add_slab(struct shoal_metrics_snap *snap, const struct slab *s)
{
        for (unsigned i = 0; i < SHOAL_M__COUNT; i++) {
                int slot = hist_slot_of[i];
                if (slot < 0) {
                        snap->counters[i] += __atomic_load_n(&s->counters[i], __ATOMIC_RELAXED);
                        continue;
                }
                struct shoal_hist_snap *d = &snap->hists[i];
                const struct shoal_hist_snap *h = &s->hists[slot];
                /* Buckets first (acquire), then the totals: see hist_record. */
                for (unsigned b = 0; b < SHOAL_HIST_BUCKETS; b++)
                        d->buckets[b] += __atomic_load_n(&h->buckets[b], __ATOMIC_ACQUIRE);
                d->count += __atomic_load_n(&h->count, __ATOMIC_RELAXED);
                d->sum += __atomic_load_n(&h->sum, __ATOMIC_RELAXED);
                d->max = SHOAL_MAX(d->max, __atomic_load_n(&h->max, __ATOMIC_RELAXED));
        }
}

void shoal_metrics_fork_prepare(void)
{
        pthread_mutex_lock(&slab_lock);
}

void shoal_metrics_fork_done(bool child)
{
        if (child)
                pthread_mutex_init(&slab_lock, NULL); /* its owner is not in the child */
        else
                pthread_mutex_unlock(&slab_lock);
}

int shoal_metrics_snap_take(struct shoal_metrics_snap *snap)
{
        memset(snap, 0, sizeof(*snap));
        snap->hists = calloc(SHOAL_M__COUNT, sizeof(*snap->hists));
        if (!snap->hists)
                return -ENOMEM;

        pthread_mutex_lock(&slab_lock);
        snap_add_slab(snap, &retired);
        for (const struct shoal_list *l = slab_list.next; l != &slab_list; l = l->next)
                snap_add_slab(snap, shoal_list_entry(l, const struct slab, link));
        pthread_mutex_unlock(&slab_lock);

        for (unsigned i = 0; i < SHOAL_M__COUNT; i++)
                if (shoal_metric_defs[i].kind == SHOAL_METRIC_GAUGE)
                        snap->counters[i] =
                                (uint64_t)__atomic_load_n(&gauges[i].v, __ATOMIC_RELAXED);
        snap->taken_ns = shoal_now_ns();
        return 0;
}

void shoal_metrics_snap_free(struct shoal_metrics_snap *snap)
{
        free(snap->hists);
        snap->hists = NULL;
}

static inline uint64_t bucket_delta(const struct shoal_hist_snap *cur,
                                    const struct shoal_hist_snap *prev, unsigned b)
{
        uint64_t c = cur->buckets[b];
        uint64_t p = prev ? prev->buckets[b] : 0;
        /* Snapshots passed in the wrong order must not wrap into huge counts. */
        return c > p ? c - p : 0;
}

/* Bucket bounds overshoot the true value by up to 1/8; the lifetime max is a tighter upper bound
 * whenever it is smaller, and is never below any value in the window. */
static inline uint64_t cap_at_max(const struct shoal_hist_snap *cur, uint64_t upper)
{
        return cur->max && cur->max < upper ? cur->max : upper;
}

uint64_t shoal_hist_quantile(const struct shoal_hist_snap *cur, const struct shoal_hist_snap *prev,
                             double q)
{
        uint64_t total = 0, rank, seen = 0;

        if (!cur)
                return 0;
        for (unsigned b = 0; b < SHOAL_HIST_BUCKETS; b++)
                total += bucket_delta(cur, prev, b);
        if (!total)
                return 0;
        /* Nearest rank: the smallest value with at least q*total values at or below it. */
        if (!(q > 0)) /* also NaN */
                rank = 1;
        else if (q >= 1)
                rank = total;
        else {
                double r = q * (double)total;
                rank = r >= (double)total ? total : (uint64_t)r;
                if ((double)rank < r)
                        rank++;
                rank = SHOAL_MAX(rank, 1);
        }
        for (unsigned b = 0; b < SHOAL_HIST_BUCKETS; b++) {
                seen += bucket_delta(cur, prev, b);
                if (seen >= rank)
                        return cap_at_max(cur, shoal_hist_bucket_upper(b));
        }
        return cap_at_max(cur, UINT64_MAX); /* not reached: seen ends at total */
}

uint64_t shoal_hist_window_max(const struct shoal_hist_snap *cur,
                               const struct shoal_hist_snap *prev)
{
        if (!cur)
                return 0;
        for (unsigned b = SHOAL_HIST_BUCKETS; b-- > 0;)
                if (bucket_delta(cur, prev, b))
                        return cap_at_max(cur, shoal_hist_bucket_upper(b));
        return 0;
}
