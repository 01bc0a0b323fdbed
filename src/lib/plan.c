/* libshoal access plans (include/shoal/shoal.h, "access plans"): the C API over client/plan.h.
 *
 * The window of a plan is carved from its client's read buffers, so the plans of one node
 * together may hold at most the buffers less 4 blocks (what other reads always keep); a small
 * table here counts what each node's plans hold. A plan belongs to the process that made it: its
 * threads do not exist in a forked child, where every call refuses it. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "node/node.h"
#include "client/plan.h"
#include "common/forkgate.h"
#include "common/util.h"
#include "lib/lib.h"
#include "shoal/shoal.h"

#define RESERVED_BLOCKS 4 /* buffers that plans never take */

struct shoal_plan {
        struct shoal_client *c;
        struct shoal_node *node;
        unsigned gen;      /* fork generation it was made in */
        unsigned file_gen; /* lib_file_opened's answer */
        uint64_t window;
        struct shoal_planner *pl;
};

/* Window bytes held by the plans of each node. */
struct node_use {
        struct node_use *next;
        const struct shoal_node *node;
        uint64_t bytes;
};
static pthread_mutex_t use_mu = PTHREAD_MUTEX_INITIALIZER;
static struct node_use *uses;

static struct node_use **use_find(const struct shoal_node *n)
{
        struct node_use **pp = &uses;
        while (*pp && (*pp)->node != n)
                pp = &(*pp)->next;
        return pp;
}

/* Reserves a window for a plan of N: WANT bytes (0: half the buffers, or what is left). Returns
 * 0 with the size in *GOT, -EINVAL or -EBUSY with the message set. */
static int window_reserve(const struct shoal_node *n, uint64_t want, uint64_t *got)
{
        uint64_t bs = n->vol.block_size;
        uint64_t nbuf = SHOAL_MAX(n->cfg.buffer_size / bs, (uint64_t)4);
        uint64_t limit = nbuf > RESERVED_BLOCKS ? (nbuf - RESERVED_BLOCKS) * bs : 0;
        if (want > limit || limit < bs)
                return lib_fail(-EINVAL,
                                "a plan window of %llu bytes does not fit buffer-size %llu: at "
                                "most %llu (the buffers less %d blocks of %llu)",
                                (unsigned long long)want, (unsigned long long)n->cfg.buffer_size,
                                (unsigned long long)limit, RESERVED_BLOCKS, (unsigned long long)bs);
        pthread_mutex_lock(&use_mu);
        struct node_use **pp = use_find(n);
        uint64_t held = *pp ? (*pp)->bytes : 0;
        uint64_t left = limit > held ? limit - held : 0;
        uint64_t w = want ? want : SHOAL_MIN(SHOAL_MAX(nbuf * bs / 2, bs), left);
        w -= w % bs;
        int rc = 0;
        if (w < bs || w > left) {
                rc = lib_fail(-EBUSY,
                              "the client's other plans hold %llu of the %llu bytes of buffers "
                              "that plans may use: destroy them or raise buffer-size",
                              (unsigned long long)held, (unsigned long long)limit);
        } else if (!*pp && !(*pp = calloc(1, sizeof(**pp)))) {
                rc = lib_fail(-ENOMEM, "out of memory");
        } else {
                (*pp)->node = n;
                (*pp)->bytes += w;
                *got = w;
        }
        pthread_mutex_unlock(&use_mu);
        return rc;
}

static void window_release(const struct shoal_node *n, uint64_t w)
{
        pthread_mutex_lock(&use_mu);
        struct node_use **pp = use_find(n);
        if (*pp) {
                (*pp)->bytes -= SHOAL_MIN(w, (*pp)->bytes);
                if (!(*pp)->bytes) {
                        struct node_use *u = *pp;
                        *pp = u->next;
                        free(u);
                }
        }
        pthread_mutex_unlock(&use_mu);
}

static struct shoal_plan *plan_fail(int rc)
{
        errno = -rc;
        return NULL;
}

SHOAL_API struct shoal_plan *shoal_plan_create(struct shoal_client *c, uint64_t window_bytes,
                                               unsigned inflight)
{
        if (!c)
                return plan_fail(lib_fail(-EINVAL, "shoal_plan_create: no client"));
        if (inflight > SHOAL_PLANNER_INFLIGHT_MAX)
                return plan_fail(lib_fail(-EINVAL, "shoal_plan_create: inflight %u over %u",
                                          inflight, SHOAL_PLANNER_INFLIGHT_MAX));
        struct shoal_plan *p = calloc(1, sizeof(*p));
        if (!p)
                return plan_fail(lib_fail(-ENOMEM, "out of memory"));
        int rc;
        bool t = shoal_fork_gate_enter();
        struct shoal_node *n = lib_client_node(c, &rc);
        if (n)
                rc = window_reserve(n, window_bytes, &p->window);
        if (!rc) {
                struct shoal_planner_config pc = {
                        .reader = n->reader,
                        .store = n->store,
                        .vol = &n->vol,
                        .window_bytes = p->window,
                        .inflight = inflight ? inflight : SHOAL_PLANNER_INFLIGHT,
                        .fork_gated = true,
                };
                rc = shoal_planner_create(&pc, &p->pl);
                if (rc) {
                        window_release(n, p->window);
                        lib_fail(rc, "cannot start a plan: %s", strerror(-rc));
                }
        }
        if (!rc) {
                p->c = c;
                p->node = n;
                p->gen = lib_fork_gen();
                p->file_gen = lib_file_opened(c);
        }
        shoal_fork_gate_exit(t);
        if (rc) {
                free(p);
                return plan_fail(rc);
        }
        return p;
}

static int plan_check(const struct shoal_plan *p, const char *fn)
{
        if (!p)
                return lib_fail(-EINVAL, "%s: no plan", fn);
        if (p->gen != lib_fork_gen())
                return lib_fail(-EINVAL,
                                "%s: this plan belongs to the process that made it (make plans "
                                "after fork)",
                                fn);
        return 0;
}

SHOAL_API int shoal_plan_add(struct shoal_plan *p, const char *key, uint64_t off, uint64_t len)
{
        int rc = plan_check(p, "shoal_plan_add");
        if (rc)
                return rc;
        rc = shoal_planner_add(p->pl, key, off, len);
        if (rc == -EAGAIN)
                return lib_fail(rc, "the plan holds %u items not yet read: read first",
                                SHOAL_PLANNER_QUEUE_MAX);
        if (rc == -EINVAL)
                return lib_fail(rc, "shoal_plan_add: %s",
                                !key   ? "no key"
                                : !len ? "length 0"
                                       : "key over 1024 bytes");
        if (rc)
                return lib_fail(rc, "shoal_plan_add: %s", strerror(-rc));
        return 0;
}

static int read_fail(const char *key, int rc)
{
        switch (rc) {
        case -ENOENT:
                return lib_fail(rc, "no such object: %s", key);
        case -EINVAL:
                return lib_fail(rc, "not a valid key for this store: %s", key);
        case -ESTALE:
                return lib_fail(rc, "%s changed since the plan first read it", key);
        case -EACCES:
                return lib_fail(rc, "%s: access denied by the object store", key);
        case -EIO:
                return lib_fail(rc, "reading %s failed: the object store failed (see the log)",
                                key);
        case -EBUSY:
                return lib_fail(rc,
                                "reading %s: no read buffer came free in time (raise "
                                "buffer-size, or give plans smaller windows)",
                                key);
        default:
                return lib_fail(rc, "reading %s failed: %s", key, strerror(-rc));
        }
}

SHOAL_API ssize_t shoal_plan_pread(struct shoal_plan *p, const char *key, void *buf, size_t len,
                                   uint64_t off)
{
        int rc = plan_check(p, "shoal_plan_pread");
        if (rc)
                return rc;
        if (!key || (!buf && len))
                return lib_fail(-EINVAL, "shoal_plan_pread: no key or no buffer");
        /* Only the length here: an invalid key the plan names is that item's error (the store
         * says -EINVAL when the plan stats it), and the read still moves the plan on. */
        if (strnlen(key, SHOAL_KEY_MAX + 1) > SHOAL_KEY_MAX)
                return lib_fail(-EINVAL, "invalid key: over %d bytes", SHOAL_KEY_MAX);
        len = SHOAL_MIN(len, (size_t)SSIZE_MAX);
        bool t = shoal_fork_gate_enter();
        long got = shoal_planner_read(p->pl, key, off, len, buf);
        shoal_fork_gate_exit(t);
        if (got < 0)
                return read_fail(key, (int)got);
        return (ssize_t)got;
}

SHOAL_API int shoal_plan_stats(const struct shoal_plan *p, struct shoal_plan_stats *st)
{
        int rc = plan_check(p, "shoal_plan_stats");
        if (rc)
                return rc;
        if (!st)
                return lib_fail(-EINVAL, "shoal_plan_stats: no result buffer");
        struct shoal_planner_stats s;
        shoal_planner_stats(p->pl, &s);
        memset(st, 0, sizeof(*st));
        st->hits = s.hits;
        st->misses = s.misses;
        st->offplan = s.offplan;
        st->prefetched = s.prefetched;
        st->unused = s.unused;
        st->window_bytes = s.window_bytes;
        st->window_max = p->window;
        st->queued = s.queued;
        return 0;
}

SHOAL_API void shoal_plan_destroy(struct shoal_plan *p)
{
        if (!p || p->gen != lib_fork_gen())
                return; /* a parent's plan in a child: its threads are not here; left alone */
        /* Inside the gate: the planner's threads leave it, and a fork waits for the unpinning. */
        bool t = shoal_fork_gate_enter();
        shoal_planner_destroy(p->pl);
        window_release(p->node, p->window);
        lib_file_closed(p->c, p->file_gen);
        shoal_fork_gate_exit(t);
        free(p);
}
