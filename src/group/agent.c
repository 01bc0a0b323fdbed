/* The group agent [G1, D1]: joins, heartbeats, judges liveness and publishes views.
 *
 * Liveness is judged on the reader's monotonic clock. For every record it lists, the agent keeps
 * the last heartbeat counter and the moment that counter last changed; a member is alive while
 * that moment is less than the timeout ago. Wall clocks of different hosts disagree, so wall time
 * is used only to place the first sighting of a record (a record whose updated_ms is already a
 * timeout old starts out dead), and never to delete one: a record is deleted only after this
 * reader itself has watched it stay silent for STALE_FACTOR timeouts (or its grace period and a
 * timeout, when longer). A member whose clock runs an hour behind is therefore seen after its
 * next heartbeat, not deleted over and over.
 *
 * A member that says goodbye (its record says leaving) or stops beating leaves the serving view
 * but keeps its place for the grace period its record carries: it is listed in the view's away
 * list, and since placement is rendezvous hashing over the serving members, the next member in
 * each of its blocks' order serves them and nothing else moves. The agent also keeps the
 * placement before the last change of it (the previous view's providers; at the join, the group
 * without this member) for shoal_group_prev_owner.
 *
 * Registry errors never stop the agent: the last view stays, the member keeps serving (it is
 * always in its own view), and the next heartbeat tries again. */
#include "group/group_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/config.h"
#include "common/forkgate.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define STALE_FACTOR          SHOAL_STALE_FACTOR
#define ERROR_LOG_INTERVAL_NS (30 * SHOAL_NS_PER_SEC)

/* The previous placement is asked for moved blocks only this long after it changed: past it,
 * what the old owners held has likely been read from the new ones (or evicted). */
#define PREV_WINDOW_NS (30 * 60 * SHOAL_NS_PER_SEC)
#define LINGER_MAX_NS  (3 * SHOAL_NS_PER_SEC)

struct seen {
        char id[SHOAL_MEMBER_ID_LEN + 1];
        uint64_t beat;
        int64_t started_ms; /* a restart with the same id is a change even at the same beat */
        int64_t changed_ns; /* monotonic; estimated from wall age at first sight */
        int64_t first_ns;   /* monotonic time of first sight */
};

struct shoal_group {
        struct shoal_registry *reg; /* NULL until a join that could not reach it opens it */
        char *meta_url;
        char group[SHOAL_GROUP_NAME_MAX + 1];
        uint64_t heartbeat_ns, timeout_ns, grace_ns;
        bool no_grace;
        pthread_t thread;
        void (*usage)(void *arg, uint64_t *bytes, uint64_t *capacity);
        void *usage_arg;

        /* Agent thread only (and start/stop around it). */
        struct shoal_member self;
        struct seen *seen;
        size_t n_seen;
        unsigned n_errors;
        uint64_t error_logged_ns;
        struct shoal_member *prev; /* the placement before the last change of it */
        size_t n_prev;
        int64_t prev_ns;    /* monotonic time of that change */
        bool joined;        /* the record is written (else: joining in the background) */
        bool join_given_up; /* the group refused this member (a volume mismatch) */
        unsigned join_tries;
        uint64_t join_next_ns;  /* monotonic time of the next try */
        uint64_t listed_gen;    /* the registry's listing generation the view was built of */
        unsigned same_listings; /* listings in a row that changed nothing */
        uint64_t presence_ns;   /* monotonic time a client's presence was last renewed */

        pthread_mutex_t lock; /* guards what follows */
        pthread_cond_t cond;
        bool stopping;
        bool leaving;      /* shoal_group_goodbye was called */
        bool wake;         /* beat now, not at the next heartbeat */
        uint64_t early_ns; /* monotonic time of the last shoal_group_refresh_soon that woke it */
        uint64_t usage_bytes, usage_capacity;
        struct shoal_group_view *view;
};

static uint64_t ns_to_ms(uint64_t ns)
{
        return ns / SHOAL_NS_PER_MS;
}

static int64_t wall_ms(void)
{
        return (int64_t)(shoal_wall_ns() / SHOAL_NS_PER_MS);
}

static int cmp_member(const void *a, const void *b)
{
        return strcmp(((const struct shoal_member *)a)->id, ((const struct shoal_member *)b)->id);
}

static int cmp_seen(const void *a, const void *b)
{
        return strcmp(((const struct seen *)a)->id, ((const struct seen *)b)->id);
}

/* Monotonic time at which a record first seen now probably last beat, from its wall age. */
static int64_t first_sight_changed(int64_t now, int64_t wall_now_ms, const struct shoal_member *m,
                                   uint64_t timeout_ns)
{
        int64_t age_ms = wall_now_ms - m->updated_ms;
        int64_t cap_ms = (int64_t)(timeout_ns / SHOAL_NS_PER_MS) * (STALE_FACTOR + 1);
        /* (grace_ms is bounded by the decoder) */
        cap_ms = SHOAL_MAX(cap_ms, (int64_t)m->grace_ms + (int64_t)(timeout_ns / SHOAL_NS_PER_MS));

        /* A clock ahead of ours gives a negative age; one far behind must not underflow. */
        if (m->updated_ms > wall_now_ms)
                age_ms = 0;
        if (age_ms > cap_ms)
                age_ms = cap_ms;
        return now - age_ms * (int64_t)SHOAL_NS_PER_MS;
}

static uint64_t view_version(const struct shoal_member *v, size_t n)
{
        uint64_t h = shoal_group_hash64(&n, sizeof(n), 0);

        for (size_t i = 0; i < n; i++) {
                const struct shoal_member *m = &v[i];
                uint32_t nums[3] = {m->weight, (uint32_t)m->role, m->n_rdma};
                h = shoal_group_hash64(m->id, strlen(m->id) + 1, h);
                h = shoal_group_hash64(nums, sizeof(nums), h);
                h = shoal_group_hash64(m->tcp_addr, strnlen(m->tcp_addr, SHOAL_ADDR_LEN), h);
                h = shoal_group_hash64(m->iorpc_addr, strnlen(m->iorpc_addr, SHOAL_ADDR_LEN), h);
                for (unsigned j = 0; j < m->n_rdma && j < SHOAL_RDMA_ADDRS; j++)
                        h = shoal_group_hash64(m->rdma_addr[j],
                                               strnlen(m->rdma_addr[j], SHOAL_ADDR_LEN), h);
        }
        return h == SHOAL_VIEW_COPY_ONLY ? h - 1 : h;
}

/* Allocates a view with room for N members, N_AWAY away and N_PREV of the previous placement
 * in the same block (one free). */
static struct shoal_group_view *view_alloc(size_t n, size_t n_away, size_t n_prev)
{
        struct shoal_group_view *v =
                calloc(1, sizeof(*v) + (n + n_away + n_prev) * sizeof(struct shoal_member));
        if (!v)
                return NULL;
        v->members = (struct shoal_member *)(v + 1);
        v->away = v->members + n;
        v->prev = v->away + n_away;
        v->refs = 1;
        return v;
}

/* What placement depends on: the providers that own blocks and their weights. */
static uint64_t placement_hash(const struct shoal_member *v, size_t n)
{
        uint64_t h = 0x706c6163656d656eULL;
        for (size_t i = 0; i < n; i++) {
                if (v[i].role != SHOAL_ROLE_PROVIDER || v[i].weight == 0)
                        continue;
                h = shoal_group_hash64(v[i].id, strlen(v[i].id) + 1, h);
                h = shoal_group_hash64(&v[i].weight, sizeof(v[i].weight), h);
        }
        return h;
}

static const struct shoal_member *find_member(const struct shoal_member *v, size_t n,
                                              const char *id)
{
        struct shoal_member key;
        shoal_strlcpy(key.id, id, sizeof(key.id));
        return n ? bsearch(&key, v, n, sizeof(*v), cmp_member) : NULL;
}

int shoal_group_prev_owner(const struct shoal_group_view *v, const struct shoal_block_id *id,
                           const struct shoal_member **out)
{
        *out = NULL;
        if (!v->n_prev)
                return -1;
        struct shoal_group_view pv = {.n = v->n_prev, .members = v->prev};
        int p = shoal_group_owner(&pv, id);
        int o = shoal_group_owner(v, id);
        if (p < 0 || (o >= 0 && !strcmp(v->members[o].id, v->prev[p].id)))
                return -1;
        const struct shoal_member *m = find_member(v->members, v->n, v->prev[p].id);
        if (m) {
                *out = m;
                return (int)(m - v->members);
        }
        /* One that said goodbye still answers while it beats (it lingers for that). */
        m = find_member(v->away, v->n_away, v->prev[p].id);
        if (m && m->alive) {
                *out = m;
                return (int)(v->n + (size_t)(m - v->away));
        }
        return -1;
}

void shoal_group_view_put(struct shoal_group_view *v)
{
        if (v && __atomic_sub_fetch(&v->refs, 1, __ATOMIC_ACQ_REL) == 0) {
                shoal_group_view_unindex(v);
                free(v);
        }
}

struct shoal_group_view *shoal_group_view_get(struct shoal_group *g)
{
        pthread_mutex_lock(&g->lock);
        struct shoal_group_view *v = g->view;
        __atomic_add_fetch(&v->refs, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&g->lock);
        return v;
}

enum mstate {
        M_NONE,
        M_SERVING,
        M_AWAY
};

static enum mstate state_in(const struct shoal_group_view *v, const char *id,
                            const struct shoal_member **m)
{
        if ((*m = find_member(v->members, v->n, id)))
                return M_SERVING;
        if ((*m = find_member(v->away, v->n_away, id)))
                return M_AWAY;
        return M_NONE;
}

/* One line per member whose place in the ring or whose service changed. "left group" is said
 * when a member stops serving (its blocks go to the next members), whether or not it keeps its
 * place; "out of the ring" when its grace period ends. */
static void log_member(const struct shoal_group *g, const struct shoal_member *m, enum mstate from,
                       enum mstate to, const struct shoal_member *was)
{
        char host[sizeof(m->host)], addr[sizeof(m->tcp_addr)], what[SHOAL_GROUP_NAME_MAX + 200];
        if (!strcmp(m->id, g->self.id))
                return;
        if (from == M_NONE && to == M_SERVING)
                snprintf(what, sizeof(what), "joined");
        else if (from == M_SERVING && to == M_AWAY)
                snprintf(what, sizeof(what),
                         "left group \"%s\" (%s; it keeps its place for %" PRIu64 " s)", g->group,
                         m->leaving ? "said goodbye" : "stopped beating", m->grace_left_ms / 1000);
        else if (from == M_SERVING && to == M_SERVING && was && was->weight != m->weight)
                snprintf(what, sizeof(what),
                         "of group \"%s\" now has weight %" PRIu32 " (was %" PRIu32 ")", g->group,
                         m->weight, was->weight);
        else if (from == M_SERVING)
                snprintf(what, sizeof(what), "left");
        else if (from == M_AWAY && to == M_SERVING)
                snprintf(what, sizeof(what),
                         "is back in group \"%s\" within its grace period: its blocks are its own "
                         "again",
                         g->group);
        else if (from == M_AWAY)
                snprintf(what, sizeof(what),
                         "is out of the ring of group \"%s\": its grace period is over", g->group);
        else
                return;
        bool plain = !strcmp(what, "joined") || !strcmp(what, "left");
        log_info("group", "member %s (%s %s, weight %" PRIu32 "%s) %s%s%s%s", m->id,
                 shoal_group_printable(m->host, sizeof(m->host), host, sizeof(host)),
                 m->tcp_addr[0] ? shoal_group_printable(m->tcp_addr, sizeof(m->tcp_addr), addr,
                                                        sizeof(addr))
                                : "-",
                 m->weight, m->role == SHOAL_ROLE_CONSUMER ? ", consumer" : "", what,
                 plain ? " group \"" : "", plain ? g->group : "", plain ? "\"" : "");
}

static void log_changes(const struct shoal_group *g, const struct shoal_group_view *old,
                        const struct shoal_group_view *cur)
{
        const struct shoal_member *lists[2][2] = {{old->members, old->away},
                                                  {cur->members, cur->away}};
        size_t ns[2][2] = {{old->n, old->n_away}, {cur->n, cur->n_away}};
        /* Everyone in the old view, then the newcomers of the new one. */
        for (int k = 0; k < 2; k++) {
                for (size_t i = 0; i < ns[0][k]; i++) {
                        const struct shoal_member *was = &lists[0][k][i], *now;
                        enum mstate to = state_in(cur, was->id, &now);
                        enum mstate from = k == 0 ? M_SERVING : M_AWAY;
                        if (to != from || (to == M_SERVING && now->weight != was->weight))
                                log_member(g, now ? now : was, from, to, was);
                }
        }
        for (size_t i = 0; i < cur->n; i++) {
                const struct shoal_member *was;
                if (state_in(old, cur->members[i].id, &was) == M_NONE)
                        log_member(g, &cur->members[i], M_NONE, M_SERVING, NULL);
        }
}

/* The self record of a listing brings a weight set by `shoal group --set-weight`: adopt it, so
 * that this member's record (read by every version) says it too. */
static void adopt_weight(struct shoal_group *g, const struct shoal_member *listed)
{
        if (!listed->weight_set || listed->weight == g->self.weight ||
            g->self.role != SHOAL_ROLE_PROVIDER)
                return;
        log_info("group", "weight of this member set to %" PRIu32 " (was %" PRIu32 ")%s",
                 listed->weight, g->self.weight,
                 listed->weight == 0 ? ": draining, its blocks go to the other members" : "");
        g->self.weight = listed->weight;
}

/* The previous placement for view V (whose old view is OLD): OLD's providers when the placement
 * changed, else the one kept, until it is too old to be worth asking. */
static void track_prev(struct shoal_group *g, const struct shoal_group_view *old,
                       const struct shoal_member *members, size_t n, int64_t now)
{
        /* At the join the previous placement is the group without this member: what a
         * newcomer, or a member back from a restart, now owns was served by others till now. */
        struct shoal_group_view without = {.members = (struct shoal_member *)members};
        if (!old) {
                struct shoal_member *p = malloc((n + 1) * sizeof(*p));
                if (!p)
                        return;
                for (size_t i = 0; i < n; i++)
                        if (strcmp(members[i].id, g->self.id))
                                p[without.n++] = members[i];
                without.members = p;
                old = &without;
        }
        if (placement_hash(old->members, old->n) != placement_hash(members, n)) {
                struct shoal_member *p = malloc((old->n + 1) * sizeof(*p));
                if (p) {
                        size_t k = 0;
                        for (size_t i = 0; i < old->n; i++)
                                if (old->members[i].role == SHOAL_ROLE_PROVIDER &&
                                    old->members[i].weight > 0)
                                        p[k++] = old->members[i];
                        free(g->prev);
                        g->prev = p;
                        g->n_prev = k;
                        g->prev_ns = now;
                }
        }
        if (g->prev && now - g->prev_ns > (int64_t)PREV_WINDOW_NS) {
                free(g->prev);
                g->prev = NULL;
                g->n_prev = 0;
        }
        if (old == &without)
                free(without.members);
}

/* Deletes a record silent for long (its grace period included). True when it is gone. */
static bool delete_stale(struct shoal_group *g, const struct shoal_member *m, const struct seen *s,
                         int64_t now)
{
        int64_t timeout = (int64_t)g->timeout_ns;
        int64_t limit = SHOAL_MAX(STALE_FACTOR * timeout,
                                  (int64_t)(m->grace_ms * SHOAL_NS_PER_MS) + timeout);
        int64_t silent = now - s->changed_ns;
        if (silent < limit || now - s->first_ns < STALE_FACTOR * timeout)
                return false;
        /* The member may have beaten since we listed; then it simply writes its record again
         * with its next heartbeat. */
        if (shoal_registry_delete(g->reg, m->id) != 0)
                return false; /* still tracked: the next heartbeat tries again */
        shoal_registry_set_weight(g->reg, m->id, -1);
        char host[sizeof(m->host)];
        log_info("group", "deleted member %s (%s), silent for at least %" PRId64 " s", m->id,
                 shoal_group_printable(m->host, sizeof(m->host), host, sizeof(host)),
                 (int64_t)(silent / (int64_t)SHOAL_NS_PER_SEC));
        return true;
}

/* A listing sorted into what the view is built of. */
struct sorted {
        struct seen *seen;
        struct shoal_member *serving, *away;
        size_t n_seen, n_serving, n_away;
};

/* Folds record M into S by the beat counters this reader watched (backends without leases);
 * deletes the record when it has been silent for long. */
static void sort_by_beats(struct shoal_group *g, struct sorted *s, struct shoal_member *m,
                          int64_t now, int64_t wnow)
{
        struct seen key, *old, *t = &s->seen[s->n_seen++];
        shoal_strlcpy(key.id, m->id, sizeof(key.id));
        old = g->n_seen ? bsearch(&key, g->seen, g->n_seen, sizeof(*g->seen), cmp_seen) : NULL;
        *t = key;
        t->beat = m->beat;
        t->started_ms = m->started_ms;
        if (old && old->beat == m->beat && old->started_ms == m->started_ms) {
                t->changed_ns = old->changed_ns;
                t->first_ns = old->first_ns;
        } else if (old) {
                t->changed_ns = now;
                t->first_ns = old->first_ns;
        } else {
                t->changed_ns = first_sight_changed(now, wnow, m, g->timeout_ns);
                t->first_ns = now;
        }
        if (delete_stale(g, m, t, now)) {
                s->n_seen--;
                return;
        }
        int64_t silent = now - t->changed_ns;
        int64_t grace = (int64_t)(m->grace_ms * SHOAL_NS_PER_MS);
        m->alive = silent < (int64_t)g->timeout_ns;
        m->age_ms = (uint64_t)silent / SHOAL_NS_PER_MS;
        if (m->alive && !m->leaving) {
                s->serving[s->n_serving++] = *m;
        } else if (silent < grace) {
                /* Its place is kept: it owns nothing meanwhile, so the next member in each of
                 * its blocks' order serves them. */
                m->grace_left_ms = (uint64_t)(grace - silent) / SHOAL_NS_PER_MS;
                s->away[s->n_away++] = *m;
        }
}

/* Folds record M into S by its lease (the listing says alive and the grace left). */
static void sort_by_lease(struct sorted *s, const struct shoal_member *m)
{
        if (m->alive && !m->leaving)
                s->serving[s->n_serving++] = *m;
        else if (m->alive || m->grace_left_ms > 0)
                s->away[s->n_away++] = *m;
}

/* Publishes the view of S (S->serving sorted, this member in it). Returns 0 or -ENOMEM. */
static int publish(struct shoal_group *g, struct sorted *s, int64_t now)
{
        pthread_mutex_lock(&g->lock);
        struct shoal_group_view *old = g->view;
        pthread_mutex_unlock(&g->lock);
        /* (OLD is replaced only on this thread, so reading it outside the lock is safe.) */
        track_prev(g, old, s->serving, s->n_serving, now);
        struct shoal_group_view *v = view_alloc(s->n_serving, s->n_away, g->n_prev);
        if (!v)
                return -ENOMEM;
        memcpy(v->members, s->serving, s->n_serving * sizeof(*s->serving));
        v->n = s->n_serving;
        if (s->n_away)
                memcpy(v->away, s->away, s->n_away * sizeof(*s->away));
        v->n_away = s->n_away;
        if (g->n_prev)
                memcpy(v->prev, g->prev, g->n_prev * sizeof(*g->prev));
        v->n_prev = g->n_prev;
        v->version = view_version(v->members, v->n);
        shoal_group_view_index(v);

        free(g->seen);
        g->seen = s->seen;
        s->seen = NULL;
        g->n_seen = s->n_seen;

        pthread_mutex_lock(&g->lock);
        g->view = v;
        pthread_mutex_unlock(&g->lock);
        shoal_metric_gauge_set(SHOAL_M_group_members_alive, (int64_t)v->n);
        shoal_metric_gauge_set(SHOAL_M_group_members_away, (int64_t)v->n_away);
        if (old) {
                log_changes(g, old, v);
                shoal_group_view_put(old);
        }
        return 0;
}

/* Folds listing LIST (sorted here) into the tracker, deletes records silent for long, and
 * publishes a new view: the members that serve, and those away but within their grace period.
 * Returns 0 or -ENOMEM (the old view and tracker then stay). */
static int refresh(struct shoal_group *g, struct shoal_member *list, size_t n)
{
        int64_t now = (int64_t)shoal_now_ns();
        int64_t wnow = wall_ms();
        bool leases = g->reg && shoal_registry_has_leases(g->reg);
        struct sorted s = {
                .seen = calloc(n + 1, sizeof(*s.seen)),
                .serving = calloc(n + 1, sizeof(*s.serving)),
                .away = calloc(n + 1, sizeof(*s.away)),
        };
        int ret = -ENOMEM;

        if (!s.seen || !s.serving || !s.away)
                goto out;
        if (n)
                qsort(list, n, sizeof(*list), cmp_member);
        for (size_t i = 0; i < n; i++) {
                struct shoal_member *m = &list[i];
                if (i > 0 && !strcmp(m->id, list[i - 1].id))
                        continue;
                if (!strcmp(m->id, g->self.id)) {
                        adopt_weight(g, m);
                        continue;
                }
                if (leases)
                        sort_by_lease(&s, m);
                else
                        sort_by_beats(g, &s, m, now, wnow);
        }
        /* always, listed or not (its write may not have landed) */
        s.serving[s.n_serving++] = g->self;
        qsort(s.serving, s.n_serving, sizeof(*s.serving), cmp_member);
        ret = publish(g, &s, now);
out:
        free(s.seen);
        free(s.serving);
        free(s.away);
        return ret;
}

static void note_error(struct shoal_group *g, const char *what, int err)
{
        uint64_t now = shoal_now_ns();
        /* Atomic: shoal_group_registry_failures reads it from other threads. */
        unsigned n = __atomic_add_fetch(&g->n_errors, 1, __ATOMIC_RELAXED);

        if (n == 1 || now - g->error_logged_ns >= ERROR_LOG_INTERVAL_NS) {
                log_warn("group",
                         "registry %s for group \"%s\" failed: %s (%u times in a row; the last "
                         "view is kept)",
                         what, g->group, strerror(-err), n);
                g->error_logged_ns = now;
        }
}

/* Writes this process's record: a member's into the group, a client's presence apart. */
static int put_self(struct shoal_group *g)
{
        return g->self.role == SHOAL_ROLE_CONSUMER ? shoal_registry_put_client(g->reg, &g->self)
                                                   : shoal_registry_put(g->reg, &g->self);
}

static int join_once(struct shoal_group *g, struct shoal_member **list, size_t *n, char *err,
                     size_t errlen);

/* The next try of a join that could not reach the registry: a heartbeat and a random part of
 * up to 16 more, growing with each try, so that a crowd started at once spreads out. */
static void join_later(struct shoal_group *g)
{
        unsigned shift = SHOAL_MIN(g->join_tries, 4u);
        g->join_tries++;
        uint64_t span = g->heartbeat_ns << shift;
        g->join_next_ns = shoal_now_ns() + g->heartbeat_ns / 2 + shoal_rand64() % span;
}

/* One background try at joining (the start could not reach the registry). */
static void join_tick(struct shoal_group *g)
{
        struct shoal_member *list = NULL;
        size_t n = 0;
        char err[1024];

        if (g->join_given_up || shoal_now_ns() < g->join_next_ns)
                return;
        int ret = join_once(g, &list, &n, err, sizeof(err));
        if (ret == -EINVAL) {
                log_error("group",
                          "%s: this process stays out of the group (it reads from the "
                          "store)",
                          err);
                g->join_given_up = true;
                return;
        }
        if (ret < 0) {
                log_ratelimited(SHOAL_LOG_WARN, "group", "%s (try %u; trying again)", err,
                                g->join_tries + 1);
                join_later(g);
                return;
        }
        g->joined = true;
        if (refresh(g, list, n) < 0)
                note_error(g, "view update", -ENOMEM);
        free(list);
        log_info("group", "joined group \"%s\" as %s after %u tries, %zu live members", g->group,
                 g->self.id, g->join_tries + 1, g->view->n);
}

static void tick(struct shoal_group *g)
{
        struct shoal_member *list = NULL;
        size_t n = 0;
        int ret;

        if (g->usage) {
                /* Asked here, not pushed by the cache: the record carries the use of the moment
                 * it is written, and the data path pays nothing for it. */
                uint64_t bytes = 0, capacity = UINT64_MAX;
                g->usage(g->usage_arg, &bytes, &capacity);
                shoal_group_set_usage(g, bytes, capacity);
        }
        pthread_mutex_lock(&g->lock);
        g->self.cache_bytes = g->usage_bytes;
        g->self.cache_capacity = g->usage_capacity;
        g->self.leaving = g->leaving;
        pthread_mutex_unlock(&g->lock);
        if (!g->joined) {
                join_tick(g);
                return;
        }
        g->self.beat++;
        g->self.updated_ms = wall_ms();

        /* A client's presence is renewed twice a client TTL (or timeout), not with every poll. */
        uint64_t now = shoal_now_ns();
        if (g->self.role != SHOAL_ROLE_CONSUMER ||
            now - g->presence_ns >= shoal_registry_client_renew_ns(g->reg)) {
                ret = put_self(g);
                if (ret < 0)
                        note_error(g, "heartbeat", ret);
                else
                        g->presence_ns = now;
        }
        /* With leases a listing that changed nothing changes no view and is not even copied
         * (unless members are away: their grace runs out on their own; and every minute or so
         * all the same, for the previous placement's window). */
        bool rebuild = g->view->n_away > 0 || ++g->same_listings >= 60;
        uint64_t gen = rebuild ? UINT64_MAX : g->listed_gen;
        ret = shoal_registry_list_since(g->reg, &gen, &list, &n);
        if (ret < 0) {
                note_error(g, "list", ret);
                return;
        }
        unsigned failures = __atomic_load_n(&g->n_errors, __ATOMIC_RELAXED);
        if (failures) {
                log_info("group", "registry for group \"%s\" is reachable again after %u failures",
                         g->group, failures);
                __atomic_store_n(&g->n_errors, 0, __ATOMIC_RELAXED);
        }
        if (ret == 0) {
                g->same_listings = 0;
                g->listed_gen = gen;
                ret = refresh(g, list, n);
                if (ret < 0)
                        note_error(g, "view update", ret);
        }
        free(list);
}

static void *agent_main(void *arg)
{
        struct shoal_group *g = arg;
        uint64_t next = shoal_now_ns() + g->heartbeat_ns;

        pthread_mutex_lock(&g->lock);
        while (!g->stopping) {
                uint64_t now = shoal_now_ns();
                if (g->wake) {
                        g->wake = false;
                        next = now;
                }
                if (now < next) {
                        struct timespec ts = shoal_ns_timespec(next);
                        pthread_cond_timedwait(&g->cond, &g->lock, &ts);
                        continue;
                }
                pthread_mutex_unlock(&g->lock);
                /* The registry (SQLite) holds process-wide locks: not across a fork of a library
                 * user. A pending fork skips this beat; the next one follows a beat later. */
                bool taken;
                if (shoal_fork_gate_tryenter(&taken)) {
                        tick(g);
                        shoal_fork_gate_exit(taken);
                }
                pthread_mutex_lock(&g->lock);
                /* Keep the cadence; after a registry call slower than a heartbeat the next one
                 * follows at once (one at a time, never a burst to catch up). */
                next += g->heartbeat_ns;
                now = shoal_now_ns();
                if (next <= now)
                        next = now;
        }
        pthread_mutex_unlock(&g->lock);
        return NULL;
}

static bool volume_matches(const struct shoal_member *a, const struct shoal_member *b)
{
        return a->block_size == b->block_size &&
               strncmp(a->volume_url, b->volume_url, sizeof(a->volume_url)) == 0;
}

/* [D1]: the first live member (other than ourselves) on another volume, or NULL. */
static const struct shoal_member *volume_conflict(const struct shoal_group *g,
                                                  const struct shoal_member *list, size_t n)
{
        int64_t wnow = wall_ms();
        int64_t timeout_ms = (int64_t)(g->timeout_ns / SHOAL_NS_PER_MS);

        for (size_t i = 0; i < n; i++) {
                const struct shoal_member *m = &list[i];
                if (!strcmp(m->id, g->self.id) || volume_matches(m, &g->self) || m->leaving)
                        continue;
                if (wnow - m->updated_ms < timeout_ms)
                        return m;
        }
        return NULL;
}

static void free_group(struct shoal_group *g)
{
        shoal_registry_close(g->reg);
        free(g->meta_url);
        shoal_group_view_put(g->view);
        free(g->seen);
        free(g->prev);
        pthread_cond_destroy(&g->cond);
        pthread_mutex_destroy(&g->lock);
        free(g);
}

/* Failures at run time never read as a bad configuration. */
static int runtime_err(int rc)
{
        return rc == -EINVAL ? -EIO : rc;
}

/* Allocates G for CFG: its id (drawn when empty), heartbeat, timeout and grace. Returns 0 or a
 * negative errno with one line in ERR (G freed). */
static int group_new(const struct shoal_group_config *cfg, struct shoal_group **out, char *err,
                     size_t errlen)
{
        pthread_condattr_t ca;
        int ret;

        struct shoal_group *g = calloc(1, sizeof(*g));
        if (!g || !(g->meta_url = strdup(cfg->meta_url))) {
                free(g);
                snprintf(err, errlen, "group: out of memory");
                return -ENOMEM;
        }
        pthread_mutex_init(&g->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&g->cond, &ca);
        pthread_condattr_destroy(&ca);
        shoal_strlcpy(g->group, cfg->group, sizeof(g->group));
        g->self = cfg->self;
        g->self.alive = true;
        g->self.age_ms = 0;
        g->usage = cfg->usage;
        g->usage_arg = cfg->usage_arg;
        if (g->usage)
                g->usage(g->usage_arg, &g->self.cache_bytes, &g->self.cache_capacity);
        if (!g->self.id[0]) {
                unsigned char rnd[SHOAL_MEMBER_ID_LEN / 2];
                ret = shoal_random_bytes(rnd, sizeof(rnd));
                if (ret < 0) {
                        snprintf(err, errlen, "group: cannot draw a member id: %s", strerror(-ret));
                        goto out_free;
                }
                shoal_hex(rnd, sizeof(rnd), g->self.id);
        }
        if (!memchr(g->self.id, '\0', sizeof(g->self.id)) ||
            !shoal_member_id_valid(g->self.id, strlen(g->self.id))) {
                snprintf(err, errlen,
                         "group: invalid member id (1..%d characters of 0-9 A-Z a-z . _ -)",
                         SHOAL_MEMBER_ID_LEN);
                ret = -EINVAL;
                goto out_free;
        }
        const struct shoal_env *env = shoal_config_env();
        g->heartbeat_ns = shoal_config_pick(cfg->heartbeat_ns, env->group_heartbeat_ns,
                                            SHOAL_GROUP_HEARTBEAT_DEFAULT);
        g->timeout_ns = shoal_config_pick(cfg->timeout_ns, env->group_timeout_ns,
                                          SHOAL_GROUP_TIMEOUT_DEFAULT);
        g->no_grace = cfg->no_grace;
        /* Documented the other way round (docs/operations.md): SHOAL_GROUP_GRACE wins over
         * --group-grace. */
        g->grace_ns = g->no_grace ? 0
                                  : shoal_config_pick(env->group_grace_ns, cfg->grace_ns,
                                                      SHOAL_GROUP_GRACE_DEFAULT);
        if (g->grace_ns > SHOAL_GROUP_GRACE_MAX_MS * SHOAL_NS_PER_MS)
                g->grace_ns = SHOAL_GROUP_GRACE_MAX_MS * SHOAL_NS_PER_MS;
        g->self.grace_ms = ns_to_ms(g->grace_ns);
        g->self.leaving = false;
        if (g->timeout_ns < 2 * g->heartbeat_ns)
                log_warn("group",
                         "group timeout %" PRIu64 " ms is less than two heartbeats (%" PRIu64
                         " ms): members may flap",
                         ns_to_ms(g->timeout_ns), ns_to_ms(g->heartbeat_ns));
        *out = g;
        return 0;

out_free:
        free_group(g);
        return ret;
}

/* The [D1] refusal of C into ERR. */
static void conflict_message(const struct shoal_group *g, const struct shoal_member *c, char *err,
                             size_t errlen)
{
        char mine[sizeof(c->volume_url)], theirs[sizeof(c->volume_url)], host[sizeof(c->host)];
        snprintf(err, errlen,
                 "volume mismatch: this member has %s (block size %" PRIu32
                 "), group \"%s\" has %s (block size %" PRIu32 ", member %s on %s)",
                 shoal_group_printable(g->self.volume_url, sizeof(mine), mine, sizeof(mine)),
                 g->self.block_size, g->group,
                 shoal_group_printable(c->volume_url, sizeof(theirs), theirs, sizeof(theirs)),
                 c->block_size, c->id,
                 c->host[0] ? shoal_group_printable(c->host, sizeof(host), host, sizeof(host))
                            : "?");
}

/* Clients kept in a companion group (no leases) leave their record behind when killed: the
 * next client to join deletes those silent for long (a wrong guess costs one heartbeat). */
static void sweep_clients(struct shoal_group *g)
{
        struct shoal_member *c = NULL;
        size_t n = 0;
        if (shoal_registry_has_leases(g->reg) || shoal_registry_list_clients(g->reg, &c, &n) < 0)
                return;
        int64_t limit = (int64_t)ns_to_ms(g->timeout_ns) * STALE_FACTOR, now = wall_ms();
        for (size_t i = 0; i < n; i++)
                if (strcmp(c[i].id, g->self.id) && now - c[i].updated_ms > limit)
                        shoal_registry_delete_client(g->reg, c[i].id);
        free(c);
}

/* One try at joining: opens the registry (when not yet open), reads the group into *LIST, *N,
 * refuses a volume mismatch, writes this process's record. Returns 0, or a negative errno with
 * one line in ERR (-EINVAL: the configuration cannot work). */
static int join_once(struct shoal_group *g, struct shoal_member **list, size_t *n, char *err,
                     size_t errlen)
{
        int ret;

        *list = NULL;
        *n = 0;
        if (!g->reg) {
                ret = shoal_registry_open(g->meta_url, g->group, &g->reg, err, errlen);
                if (ret)
                        return ret;
                /* Where records expire by themselves (etcd): a silent record must outlive the
                 * timeout and this member's grace period, during which it keeps its place. */
                g->reg->lease_ns = g->timeout_ns + g->grace_ns;
                g->reg->timeout_ns = g->timeout_ns;
        }
        ret = shoal_registry_list(g->reg, list, n);
        if (ret < 0) {
                snprintf(err, errlen, "group \"%s\": cannot read the members from the registry: %s",
                         g->group, strerror(-ret));
                return runtime_err(ret);
        }
        /* A weight set for this member while it was away: from its first record on. */
        for (size_t i = 0; i < *n; i++)
                if (!strcmp((*list)[i].id, g->self.id))
                        adopt_weight(g, &(*list)[i]);
        const struct shoal_member *c = volume_conflict(g, *list, *n);
        if (c) {
                conflict_message(g, c, err, errlen);
                ret = -EINVAL;
                goto out_free;
        }
        g->self.beat++;
        g->self.started_ms = g->self.updated_ms = wall_ms();
        ret = put_self(g);
        g->presence_ns = shoal_now_ns();
        if (ret < 0) {
                snprintf(err, errlen, "group \"%s\": cannot register this member: %s", g->group,
                         ret == -EINVAL ? "invalid record" : strerror(-ret));
                ret = runtime_err(ret);
                goto out_free;
        }
        if (g->self.role == SHOAL_ROLE_CONSUMER)
                sweep_clients(g);
        return 0;

out_free:
        free(*list);
        *list = NULL;
        *n = 0;
        return ret;
}

/* Whether a join that failed with RC is worth trying again in the background: a registry on
 * the network that did not answer (a crowd, a restart); not a configuration, nor a local file. */
static bool join_retryable(const struct shoal_group *g, int rc)
{
        if (!strncmp(g->meta_url, "sqlite3://", 10))
                return false;
        return rc == -ECONNREFUSED || rc == -ETIMEDOUT || rc == -EIO || rc == -ECONNRESET ||
               rc == -EHOSTUNREACH || rc == -ENETUNREACH || rc == -EAGAIN || rc == -EBUSY;
}

int shoal_group_start(const struct shoal_group_config *cfg, struct shoal_group **out, char *err,
                      size_t errlen)
{
        struct shoal_member *list = NULL;
        struct shoal_group *g;
        size_t n = 0;
        int ret;

        *out = NULL;
        if (!cfg || !cfg->meta_url || !cfg->group) {
                snprintf(err, errlen, "group: meta URL and group name are required");
                return -EINVAL;
        }
        ret = group_new(cfg, &g, err, errlen);
        if (ret)
                return ret;
        g->self.beat = 0;
        ret = join_once(g, &list, &n, err, errlen);
        if (ret == 0) {
                g->joined = true;
        } else if (join_retryable(g, ret)) {
                /* A crowd started at once, or a registry restarting: read from the store
                 * meanwhile (this process alone in its view) and join in the background. */
                log_warn("group", "%s: joining in the background (reads go to the store meanwhile)",
                         err);
                join_later(g);
        } else {
                goto out_free;
        }
        ret = refresh(g, list, n);
        if (ret < 0) {
                snprintf(err, errlen, "group: out of memory");
                ret = -ENOMEM;
                goto out_leave;
        }
        /* Read before the agent runs: it replaces (and frees) the view under g->lock. */
        size_t live = g->view->n;
        ret = shoal_thread_create(&g->thread, agent_main, g);
        if (ret) {
                snprintf(err, errlen, "group: cannot start the agent thread: %s", strerror(ret));
                ret = -ret;
                goto out_leave;
        }
        pthread_setname_np(g->thread, "shoal-group");
        free(list);
        if (g->joined)
                log_info("group",
                         "joined group \"%s\" as %s (%s, weight %" PRIu32 "%s), heartbeat %" PRIu64
                         " ms, timeout %" PRIu64 " ms, grace %" PRIu64 " ms, %zu live members",
                         g->group, g->self.id,
                         g->self.tcp_addr[0] ? g->self.tcp_addr : "no address", g->self.weight,
                         g->self.role == SHOAL_ROLE_CONSUMER ? ", consumer" : "",
                         ns_to_ms(g->heartbeat_ns), ns_to_ms(g->timeout_ns), ns_to_ms(g->grace_ns),
                         live);
        *out = g;
        return 0;

out_leave:
        if (g->joined && g->self.role == SHOAL_ROLE_CONSUMER)
                shoal_registry_delete_client(g->reg, g->self.id);
        else if (g->joined)
                shoal_registry_delete(g->reg, g->self.id);
out_free:
        free(list);
        free_group(g);
        return ret;
}

void shoal_group_stop(struct shoal_group *g)
{
        if (!g)
                return;
        pthread_mutex_lock(&g->lock);
        g->stopping = true;
        pthread_cond_signal(&g->cond);
        pthread_mutex_unlock(&g->lock);
        pthread_join(g->thread, NULL);
        shoal_metric_gauge_set(SHOAL_M_group_members_alive, 0);
        shoal_metric_gauge_set(SHOAL_M_group_members_away, 0);
        int ret;
        if (!g->joined) {
                log_info("group", "left group \"%s\" (it had not joined yet)", g->group);
                free_group(g);
                return;
        }
        if (g->self.role == SHOAL_ROLE_CONSUMER) {
                ret = shoal_registry_delete_client(g->reg, g->self.id);
        } else if (g->grace_ns) {
                /* The record stays, saying goodbye: readers stop asking here at once, and the
                 * place is kept for the grace period (a restart with the same folder is back in
                 * it); then whoever notices deletes the record. */
                g->self.leaving = true;
                g->self.beat++;
                g->self.updated_ms = wall_ms();
                ret = shoal_registry_put(g->reg, &g->self);
        } else {
                ret = shoal_registry_delete(g->reg, g->self.id);
        }
        if (ret < 0)
                log_warn("group",
                         "cannot write the leave of member %s to group \"%s\": %s (it expires "
                         "after the timeout)",
                         g->self.id, g->group, strerror(-ret));
        else if (g->grace_ns && g->self.role == SHOAL_ROLE_PROVIDER)
                log_info("group", "left group \"%s\" (its place is kept for %" PRIu64 " s)",
                         g->group, (uint64_t)(g->grace_ns / SHOAL_NS_PER_SEC));
        else
                log_info("group", "left group \"%s\"", g->group);
        free_group(g);
}

uint64_t shoal_group_goodbye(struct shoal_group *g)
{
        if (!g)
                return 0;
        pthread_mutex_lock(&g->lock);
        g->leaving = true;
        g->wake = true;
        pthread_cond_signal(&g->cond);
        pthread_mutex_unlock(&g->lock);
        log_info("group", "saying goodbye to group \"%s\"", g->group);
        /* Every reader lists within a heartbeat of the write. */
        return SHOAL_MIN(g->heartbeat_ns + g->heartbeat_ns / 2, LINGER_MAX_NS);
}

void shoal_group_refresh_soon(struct shoal_group *g)
{
        if (!g)
                return;
        uint64_t now = shoal_now_ns();
        pthread_mutex_lock(&g->lock);
        bool go = !g->wake && (!g->early_ns || now - g->early_ns >= SHOAL_GROUP_EARLY_MIN_NS);
        if (go) {
                g->early_ns = now;
                g->wake = true;
                pthread_cond_signal(&g->cond);
        }
        pthread_mutex_unlock(&g->lock);
        if (go) {
                shoal_metric_inc(SHOAL_M_group_view_early_refreshes);
                log_debug("group", "a member read under another view: listing group \"%s\" now",
                          g->group);
        }
}

void shoal_group_set_usage(struct shoal_group *g, uint64_t bytes, uint64_t capacity)
{
        pthread_mutex_lock(&g->lock);
        g->usage_bytes = bytes;
        g->usage_capacity = capacity;
        pthread_mutex_unlock(&g->lock);
}

const char *shoal_group_self_id(const struct shoal_group *g)
{
        return g->self.id;
}

unsigned shoal_group_registry_failures(const struct shoal_group *g)
{
        return __atomic_load_n(&g->n_errors, __ATOMIC_RELAXED);
}
