/* Access plans: a reader that is told the order in which it will read (a training job's sampler
 * order) and fetches ahead in that order.
 *
 * A planner holds a bounded queue of items (KEY, OFF, LEN), appended as the job goes (a plan of
 * millions of records is never in memory at once), and a window: blocks of the reader's own
 * buffers, pinned, at most WINDOW_BYTES of them. INFLIGHT threads walk the queue in order, stat
 * each object once (a missing key becomes an error of the items that name it, found when they
 * are reached), and fetch each use's range of its block through the ordinary read path (buffers,
 * local cache, owner in the group, store), pinning the block. A block with a use in the part of
 * the queue already walked is never given up; when the window is full, the block given up is
 * the one whose next use is farthest in the queue (or absent). Reads go through the reader as
 * always: a read that follows the plan finds its blocks pinned (a hit), one that comes before
 * its fetch landed shares the fill in progress (a miss), and a read of anything else (off the
 * plan) works as without a plan. Thread-safe. */
#ifndef SHOAL_CLIENT_PLAN_H
#define SHOAL_CLIENT_PLAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define SHOAL_PLANNER_TO_END       UINT64_MAX /* an item's length: to the end of the object */
#define SHOAL_PLANNER_QUEUE_MAX    4096u      /* items added and not yet read, at most */
#define SHOAL_PLANNER_INFLIGHT     8u         /* default fetches at once */
#define SHOAL_PLANNER_INFLIGHT_MAX 64u

struct shoal_reader;
struct shoal_store;
struct shoal_volume;

struct shoal_planner_config {
        struct shoal_reader *reader;
        struct shoal_store *store;
        const struct shoal_volume *vol;
        uint64_t window_bytes; /* at least one block; blocks of the reader's buffers */
        unsigned inflight;     /* 1..SHOAL_PLANNER_INFLIGHT_MAX fetches at once */
        unsigned queue_items;  /* 1..SHOAL_PLANNER_QUEUE_MAX; 0: the maximum */
        /* Whether the planner's threads must pass the fork gate (common/forkgate.h) for store
         * calls: true in a library, where the process may fork. */
        bool fork_gated;
};

struct shoal_planner_stats {
        uint64_t hits;         /* reads following the plan whose fetches had all landed */
        uint64_t misses;       /* reads following the plan that came before their fetch */
        uint64_t offplan;      /* reads of nothing the queue held near its head */
        uint64_t prefetched;   /* bytes fetched ahead */
        uint64_t unused;       /* of those, bytes of items skipped or never read */
        uint64_t window_bytes; /* buffer bytes the window holds now */
        uint64_t queued;       /* items added and not yet read */
};

struct shoal_planner;

/* Returns 0 and the planner in *OUT, -EINVAL for a bad configuration, -ENOMEM, or -EAGAIN when
 * no thread could be started. */
int shoal_planner_create(const struct shoal_planner_config *cfg, struct shoal_planner **out);
/* Stops the threads, gives up the window and frees P (NULL is fine). Items never read count as
 * unused. Never called while a read of P is in progress. */
void shoal_planner_destroy(struct shoal_planner *p);

/* Appends the item KEY (any string up to SHOAL_KEY_MAX bytes: an invalid or missing key is an
 * error of this item when it is reached), [OFF, OFF+LEN) (LEN SHOAL_PLANNER_TO_END: to the end
 * of the object; clipped to the object). Returns 0, -EAGAIN while the queue is full (read
 * first), -EINVAL for a key too long or a zero LEN. */
int shoal_planner_add(struct shoal_planner *p, const char *key, uint64_t off, uint64_t len);

/* Reads up to LEN bytes at OFF of KEY (a valid key) into DST: the version the plan saw first for
 * KEY (a later change reads -ESTALE). A read starting exactly at one of the next 16 items not yet
 * done, or inside one whose reading began, follows the plan; one that reaches the end of its item
 * makes it done. Items more than 8 behind the one read count as skipped.
 * Returns the bytes read (short only at the end of the object) or a negative errno: the item's
 * own error (-ENOENT, -EINVAL, -EACCES, -EIO from the stat) or the read's. The caller passes the
 * fork gate. */
long shoal_planner_read(struct shoal_planner *p, const char *key, uint64_t off, size_t len,
                        void *dst);

void shoal_planner_stats(struct shoal_planner *p, struct shoal_planner_stats *st);

#endif
