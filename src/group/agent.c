/* The group agent [G1, D1]: joins, heartbeats, judges liveness and publishes views.
 *
 * Liveness is judged on the reader's monotonic clock. For every record it lists, the agent keeps
 * the last heartbeat counter and the moment that counter last changed; a member is alive while
 * that moment is less than the timeout ago. Wall clocks of different hosts disagree, so wall time
 * is used only to place the first sighting of a record (a record whose updated_ms is already a
 * timeout old starts out dead), and never to delete one: a record is deleted only after this
 * reader itself has watched it stay silent for STALE_FACTOR timeouts. A member whose clock runs
 * an hour behind is therefore seen after its next heartbeat, not deleted over and over.
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
#include "common/util.h"
#include "metrics/metrics.h"

#define STALE_FACTOR          10
#define ERROR_LOG_INTERVAL_NS (30 * SHOAL_NS_PER_SEC)

struct seen {
        char id[SHOAL_MEMBER_ID_LEN + 1];
        uint64_t beat;
        int64_t changed_ns; /* monotonic; estimated from wall age at first sight */
        int64_t first_ns;   /* monotonic time of first sight */
};

struct shoal_group {
        struct shoal_registry *reg;
        char group[SHOAL_GROUP_NAME_MAX + 1];
        uint64_t heartbeat_ns, timeout_ns;
        pthread_t thread;
        void (*usage)(void *arg, uint64_t *bytes, uint64_t *capacity);
        void *usage_arg;

        /* Agent thread only (and start/stop around it). */
        struct shoal_member self;
        struct seen *seen;
        size_t n_seen;
        unsigned n_errors;
        uint64_t error_logged_ns;

        pthread_mutex_t lock; /* guards what follows */
        pthread_cond_t cond;
        bool stopping;
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
        return h;
}

/* Allocates a view with room for N members in the same block (one free). */
static struct shoal_group_view *view_alloc(size_t n)
{
        struct shoal_group_view *v = calloc(1, sizeof(*v) + n * sizeof(struct shoal_member));
        if (!v)
                return NULL;
        v->members = (struct shoal_member *)(v + 1);
        v->refs = 1;
        return v;
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

static void log_changes(const struct shoal_group *g, const struct shoal_group_view *old,
                        const struct shoal_group_view *cur)
{
        size_t i = 0, j = 0;

        while (i < old->n || j < cur->n) {
                int c = i == old->n   ? 1
                        : j == cur->n ? -1
                                      : strcmp(old->members[i].id, cur->members[j].id);
                const struct shoal_member *m = c < 0 ? &old->members[i] : &cur->members[j];
                char host[sizeof(m->host)], addr[sizeof(m->tcp_addr)];
                if (c != 0 && strcmp(m->id, g->self.id) != 0)
                        log_info(
                                "group", "member %s (%s %s, weight %" PRIu32 "%s) %s group \"%s\"",
                                m->id,
                                shoal_group_printable(m->host, sizeof(m->host), host, sizeof(host)),
                                m->tcp_addr[0]
                                        ? shoal_group_printable(m->tcp_addr, sizeof(m->tcp_addr),
                                                                addr, sizeof(addr))
                                        : "-",
                                m->weight, m->role == SHOAL_ROLE_CONSUMER ? ", consumer" : "",
                                c < 0 ? "left" : "joined", g->group);
                i += c <= 0;
                j += c >= 0;
        }
}

/* Folds listing LIST (sorted here) into the tracker, deletes records silent for long, and
 * publishes a new view. Returns 0 or -ENOMEM (the old view and tracker then stay). */
static int refresh(struct shoal_group *g, struct shoal_member *list, size_t n)
{
        int64_t now = (int64_t)shoal_now_ns();
        int64_t wnow = wall_ms();
        int64_t timeout = (int64_t)g->timeout_ns;
        struct seen *seen = calloc(n + 1, sizeof(*seen));
        struct shoal_group_view *v = view_alloc(n + 1);
        size_t n_seen = 0;
        bool self_listed = false;

        if (!seen || !v) {
                free(seen);
                free(v);
                return -ENOMEM;
        }
        if (n)
                qsort(list, n, sizeof(*list), cmp_member);
        for (size_t i = 0; i < n; i++) {
                struct shoal_member *m = &list[i];
                if (i > 0 && !strcmp(m->id, list[i - 1].id))
                        continue;
                if (!strcmp(m->id, g->self.id)) {
                        self_listed = true;
                        v->members[v->n++] = g->self;
                        continue;
                }
                struct seen key, *old, *s = &seen[n_seen++];
                shoal_strlcpy(key.id, m->id, sizeof(key.id));
                old = g->n_seen ? bsearch(&key, g->seen, g->n_seen, sizeof(*g->seen), cmp_seen)
                                : NULL;
                *s = key;
                s->beat = m->beat;
                if (old && old->beat == m->beat) {
                        s->changed_ns = old->changed_ns;
                        s->first_ns = old->first_ns;
                } else if (old) {
                        s->changed_ns = now;
                        s->first_ns = old->first_ns;
                } else {
                        s->changed_ns = first_sight_changed(now, wnow, m, g->timeout_ns);
                        s->first_ns = now;
                }
                int64_t silent = now - s->changed_ns;
                if (silent >= STALE_FACTOR * timeout &&
                    now - s->first_ns >= STALE_FACTOR * timeout) {
                        /* The member may have beaten since we listed; then it simply writes its
                         * record again with its next heartbeat. */
                        int ret = shoal_registry_delete(g->reg, m->id);
                        char host[sizeof(m->host)];
                        if (ret == 0) {
                                log_info("group",
                                         "deleted member %s (%s), silent for at least %" PRId64
                                         " s",
                                         m->id,
                                         shoal_group_printable(m->host, sizeof(m->host), host,
                                                               sizeof(host)),
                                         (int64_t)(silent / (int64_t)SHOAL_NS_PER_SEC));
                                n_seen--;
                                continue;
                        }
                        /* Still tracked, so the next heartbeat tries again without
                         * re-watching it for STALE_FACTOR timeouts. */
                }
                if (silent < timeout) {
                        m->alive = true;
                        m->age_ms = (uint64_t)silent / SHOAL_NS_PER_MS;
                        v->members[v->n++] = *m;
                }
        }
        if (!self_listed) {
                v->members[v->n++] = g->self;
                qsort(v->members, v->n, sizeof(*v->members), cmp_member);
        }
        v->version = view_version(v->members, v->n);
        shoal_group_view_index(v);

        free(g->seen);
        g->seen = seen;
        g->n_seen = n_seen;

        pthread_mutex_lock(&g->lock);
        struct shoal_group_view *old = g->view;
        g->view = v;
        pthread_mutex_unlock(&g->lock);
        shoal_metric_gauge_set(SHOAL_M_group_members_alive, (int64_t)v->n);
        if (old) {
                if (old->version != v->version)
                        log_changes(g, old, v);
                shoal_group_view_put(old);
        }
        return 0;
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
        pthread_mutex_unlock(&g->lock);
        g->self.beat++;
        g->self.updated_ms = wall_ms();

        ret = shoal_registry_put(g->reg, &g->self);
        if (ret < 0)
                note_error(g, "heartbeat", ret);
        ret = shoal_registry_list(g->reg, &list, &n);
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
        ret = refresh(g, list, n);
        if (ret < 0)
                note_error(g, "view update", ret);
        free(list);
}

static void *agent_main(void *arg)
{
        struct shoal_group *g = arg;
        uint64_t next = shoal_now_ns() + g->heartbeat_ns;

        pthread_mutex_lock(&g->lock);
        while (!g->stopping) {
                uint64_t now = shoal_now_ns();
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
                /* Keep the cadence, but after a slow registry call do not fire a burst. */
                next += g->heartbeat_ns;
                now = shoal_now_ns();
                if (next <= now)
                        next = now + g->heartbeat_ns;
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
                if (!strcmp(m->id, g->self.id) || volume_matches(m, &g->self))
                        continue;
                if (wnow - m->updated_ms < timeout_ms)
                        return m;
        }
        return NULL;
}

static void free_group(struct shoal_group *g)
{
        shoal_registry_close(g->reg);
        shoal_group_view_put(g->view);
        free(g->seen);
        pthread_cond_destroy(&g->cond);
        pthread_mutex_destroy(&g->lock);
        free(g);
}

/* Failures at run time never read as a bad configuration. */
static int runtime_err(int rc)
{
        return rc == -EINVAL ? -EIO : rc;
}

int shoal_group_start(const struct shoal_group_config *cfg, struct shoal_group **out, char *err,
                      size_t errlen)
{
        struct shoal_member *list = NULL;
        struct shoal_group *g;
        pthread_condattr_t ca;
        size_t n = 0;
        int ret;

        *out = NULL;
        if (!cfg || !cfg->meta_url || !cfg->group) {
                snprintf(err, errlen, "group: meta URL and group name are required");
                return -EINVAL;
        }
        g = calloc(1, sizeof(*g));
        if (!g) {
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
        /* The environment (tests, operators) wins over the caller's values. */
        const struct shoal_env *env = shoal_config_env();
        g->heartbeat_ns = env->group_heartbeat_ns ? env->group_heartbeat_ns
                          : cfg->heartbeat_ns     ? cfg->heartbeat_ns
                                                  : SHOAL_GROUP_HEARTBEAT_DEFAULT;
        g->timeout_ns = env->group_timeout_ns ? env->group_timeout_ns
                        : cfg->timeout_ns     ? cfg->timeout_ns
                                              : SHOAL_GROUP_TIMEOUT_DEFAULT;
        if (g->timeout_ns < 2 * g->heartbeat_ns)
                log_warn("group",
                         "group timeout %" PRIu64 " ms is less than two heartbeats (%" PRIu64
                         " ms): members may flap",
                         ns_to_ms(g->timeout_ns), ns_to_ms(g->heartbeat_ns));

        ret = shoal_registry_open(cfg->meta_url, cfg->group, &g->reg, err, errlen);
        if (ret)
                goto out_free;
        g->reg->lease_ns = g->timeout_ns; /* where records expire by themselves (etcd) */
        ret = shoal_registry_list(g->reg, &list, &n);
        if (ret < 0) {
                snprintf(err, errlen, "group \"%s\": cannot read the members from the registry: %s",
                         g->group, strerror(-ret));
                ret = runtime_err(ret);
                goto out_free;
        }
        const struct shoal_member *c = volume_conflict(g, list, n);
        if (c) {
                char mine[sizeof(c->volume_url)], theirs[sizeof(c->volume_url)];
                char host[sizeof(c->host)];
                snprintf(
                        err, errlen,
                        "volume mismatch: this member has %s (block size %" PRIu32
                        "), group \"%s\" has %s (block size %" PRIu32 ", member %s on %s)",
                        shoal_group_printable(g->self.volume_url, sizeof(mine), mine, sizeof(mine)),
                        g->self.block_size, g->group,
                        shoal_group_printable(c->volume_url, sizeof(theirs), theirs,
                                              sizeof(theirs)),
                        c->block_size, c->id,
                        c->host[0]
                                ? shoal_group_printable(c->host, sizeof(host), host, sizeof(host))
                                : "?");
                ret = -EINVAL;
                goto out_free;
        }

        g->self.beat = 1;
        g->self.started_ms = g->self.updated_ms = wall_ms();
        g->usage_bytes = g->self.cache_bytes;
        g->usage_capacity = g->self.cache_capacity;
        ret = shoal_registry_put(g->reg, &g->self);
        if (ret < 0) {
                snprintf(err, errlen, "group \"%s\": cannot register this member: %s", g->group,
                         ret == -EINVAL ? "invalid record" : strerror(-ret));
                ret = runtime_err(ret);
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
        ret = pthread_create(&g->thread, NULL, agent_main, g);
        if (ret) {
                snprintf(err, errlen, "group: cannot start the agent thread: %s", strerror(ret));
                ret = -ret;
                goto out_leave;
        }
        pthread_setname_np(g->thread, "shoal-group");
        free(list);
        log_info("group",
                 "joined group \"%s\" as %s (%s, weight %" PRIu32 "%s), heartbeat %" PRIu64
                 " ms, timeout %" PRIu64 " ms, %zu live members",
                 g->group, g->self.id, g->self.tcp_addr[0] ? g->self.tcp_addr : "no address",
                 g->self.weight, g->self.role == SHOAL_ROLE_CONSUMER ? ", consumer" : "",
                 ns_to_ms(g->heartbeat_ns), ns_to_ms(g->timeout_ns), live);
        *out = g;
        return 0;

out_leave:
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
        int ret = shoal_registry_delete(g->reg, g->self.id);
        if (ret < 0)
                log_warn("group",
                         "cannot delete member %s from group \"%s\": %s (it expires after the "
                         "timeout)",
                         g->self.id, g->group, strerror(-ret));
        else
                log_info("group", "left group \"%s\"", g->group);
        free_group(g);
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

int shoal_group_list_once(const char *meta_url, const char *group, uint64_t wait_ns,
                          struct shoal_member **out, size_t *n, char *err, size_t errlen)
{
        uint64_t timeout_ns = shoal_config_env()->group_timeout_ns
                                      ? shoal_config_env()->group_timeout_ns
                                      : SHOAL_GROUP_TIMEOUT_DEFAULT;
        struct shoal_member *first = NULL, *second = NULL;
        size_t n1 = 0, n2 = 0;
        int ret;

        struct shoal_registry *r;
        ret = shoal_registry_open(meta_url, group, &r, err, errlen);
        if (ret)
                return ret;
        ret = shoal_registry_list(r, &first, &n1);
        if (ret < 0)
                goto out_fail;
        if (wait_ns > 0) {
                shoal_sleep_ns(wait_ns);
                ret = shoal_registry_list(r, &second, &n2);
                if (ret < 0)
                        goto out_fail;
        } else {
                second = first;
                n2 = n1;
                first = NULL;
                n1 = 0;
        }
        if (n1)
                qsort(first, n1, sizeof(*first), cmp_member);
        if (n2)
                qsort(second, n2, sizeof(*second), cmp_member);
        int64_t wnow = wall_ms();
        for (size_t i = 0; i < n2; i++) {
                struct shoal_member *m = &second[i];
                struct shoal_member *old =
                        n1 ? bsearch(m, first, n1, sizeof(*first), cmp_member) : NULL;
                bool moved = old && old->beat != m->beat;
                uint64_t wall_age = m->updated_ms < wnow ? (uint64_t)(wnow - m->updated_ms) : 0;
                /* Watched for WAIT without a move, the member has been silent at least that
                 * long, whatever its clock says. */
                uint64_t silent_ms = moved ? 0 : SHOAL_MAX(wall_age, wait_ns / SHOAL_NS_PER_MS);
                m->alive = moved || silent_ms < timeout_ns / SHOAL_NS_PER_MS;
                m->age_ms = moved ? SHOAL_MIN(wall_age, wait_ns / SHOAL_NS_PER_MS) : silent_ms;
        }
        free(first);
        shoal_registry_close(r);
        *out = second;
        *n = n2;
        return 0;

out_fail:
        snprintf(err, errlen, "group \"%s\": cannot list the members: %s", group, strerror(-ret));
        free(first);
        free(second);
        shoal_registry_close(r);
        return ret;
}
