/* Admission [S2]: limits from the open files, and who gives way (server/admission.h). */
#include "server/admission.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <sys/resource.h>

#include "common/log.h"
#include "common/util.h"

#define MAX_CONNS  10000
#define PIPES      64 /* answers in pipes at once (2 fds each), at most */
#define FDS_MAX    ((uint64_t)1 << 20)
#define FDS_NO_LIM 1024 /* assumed when the limit cannot be read */

/* Limits from the process's open-file limit, so that connections can never take the fds the
 * member needs for its own work: a fixed base (stdio, log, registry, metrics, each loop's epoll,
 * eventfd and listeners, the pipe pool), a quarter of the rest for the store's connections and the
 * reader's own cache files (a mount in the same process), then half for requests in process (each
 * holds at most 3: a cache file and its O_DIRECT twin, or a store read and a cache insert) and half
 * for connections (1 each; the zero-copy pipes are a pool of their own in the base). The soft limit
 * is raised to the hard one first. */
static uint64_t open_files(void)
{
        struct rlimit rl;
        if (getrlimit(RLIMIT_NOFILE, &rl))
                return FDS_NO_LIM;
        rlim_t want = rl.rlim_max == RLIM_INFINITY ? (rlim_t)FDS_MAX : rl.rlim_max;
        if (want > (rlim_t)FDS_MAX)
                want = (rlim_t)FDS_MAX;
        if (rl.rlim_cur < want) {
                struct rlimit up = {.rlim_cur = want, .rlim_max = rl.rlim_max};
                if (!setrlimit(RLIMIT_NOFILE, &up))
                        rl.rlim_cur = want;
        }
        return rl.rlim_cur == RLIM_INFINITY ? FDS_MAX : (uint64_t)rl.rlim_cur;
}

void shoal_adm_limits_derive(struct shoal_server_limits *l, unsigned nloops, bool splice)
{
        uint64_t lim = open_files();
        /* Only splice mode answers through pipes (the engine's hit_prepare), and they are a
         * speed-up, not a need (without one a hit goes by sendfile): a 32nd of the fds at most,
         * so they never squeeze the connections and their per-address limits. */
        l->npipes = !splice ? 1 : (unsigned)SHOAL_MAX(SHOAL_MIN(lim / 32, (uint64_t)PIPES), 2);
        uint64_t base = 64 + 4ULL * nloops + 2ULL * l->npipes;
        uint64_t avail = lim > base ? lim - base : 0;
        uint64_t other = SHOAL_MAX(avail / 4, 32);
        uint64_t rest = avail > other ? avail - other : 0;
        uint64_t slots = SHOAL_MAX(rest / 2 / 3, 8);
        uint64_t conns = SHOAL_MAX(rest / 2, 8);
        l->max_inflight = (unsigned)SHOAL_MIN(slots, (uint64_t)l->max_inflight);
        l->conn_cap = (unsigned)SHOAL_MIN(conns, (uint64_t)MAX_CONNS);
        unsigned preauth = SHOAL_MAX(l->conn_cap / 2, 4u);
        unsigned per_src = SHOAL_MIN(SHOAL_MAX(preauth / 4, 16u), 256u);
        l->loop_preauth_cap = SHOAL_MAX(preauth / nloops, 4u);
        l->loop_preauth_per_src = SHOAL_MAX(per_src / nloops, 2u);
        log_info("server",
                 "open files: %llu; up to %u connections (%u unauthenticated, %u per address, "
                 "on each of %u loops), %u requests in process",
                 (unsigned long long)lim, l->conn_cap, l->loop_preauth_cap, l->loop_preauth_per_src,
                 nloops, l->max_inflight);
}

void shoal_adm_init(struct shoal_adm *a, const struct shoal_adm_ops *ops,
                    const struct shoal_server_limits *lim, const unsigned *nconns)
{
        a->ops = ops;
        a->lim = lim;
        a->nconns = nconns;
        shoal_list_init(&a->preauth);
}

/* ---- counts per source --------------------------------------------------------------------- */

static struct shoal_adm_src **src_slot(struct shoal_adm *a, uint32_t ip)
{
        struct shoal_adm_src **pp = &a->src[(ip * 0x9e3779b1u) >> 24]; /* 2^8 buckets */
        while (*pp && (*pp)->ip != ip)
                pp = &(*pp)->next;
        return pp;
}

/* The count of unauthenticated connections from IP, created at 0 if absent (NULL: no memory).
 * Callers give an unused one back with shoal_adm_unused. */
static struct shoal_adm_src *src_get(struct shoal_adm *a, uint32_t ip)
{
        struct shoal_adm_src **pp = src_slot(a, ip);
        if (!*pp) {
                *pp = calloc(1, sizeof(**pp));
                if (*pp)
                        (*pp)->ip = ip;
        }
        return *pp;
}

void shoal_adm_unused(struct shoal_adm *a, struct shoal_adm_src *sc)
{
        if (sc->n)
                return;
        struct shoal_adm_src **pp = src_slot(a, sc->ip);
        *pp = sc->next;
        free(sc);
}

void shoal_adm_enter(struct shoal_adm *a, struct shoal_adm_ent *e, struct shoal_adm_src *sc)
{
        e->src = sc;
        sc->n++;
        a->npreauth++;
        shoal_list_push_back(&a->preauth, &e->link);
}

void shoal_adm_leave(struct shoal_adm *a, struct shoal_adm_ent *e)
{
        struct shoal_adm_src *sc = e->src;
        if (!sc)
                return;
        e->src = NULL;
        shoal_list_del(&e->link);
        a->npreauth--;
        sc->n--;
        shoal_adm_unused(a, sc);
}

/* ---- who gives way ------------------------------------------------------------------------- */

static struct shoal_adm_ent *ent_of(struct shoal_list *n)
{
        return shoal_list_entry(n, struct shoal_adm_ent, link);
}

/* The oldest unauthenticated connection of the source that has the most of them. */
static struct shoal_adm_ent *preauth_victim(struct shoal_adm *a)
{
        struct shoal_adm_ent *v = NULL;
        struct shoal_list *n, *next;
        list_for_each (n, next, &a->preauth) {
                struct shoal_adm_ent *e = ent_of(n);
                if (!v || e->src->n > v->src->n)
                        v = e;
        }
        return v;
}

/* The connection of source SC to give way to a newcomer from it: its oldest that has sent
 * nothing (silence is all a flood can do without the secret, while an honest requester sends its
 * HELLO as soon as it connects, so its bytes wait in the socket even before this loop reads
 * them, and its AUTH one round trip later), else its oldest. */
static struct shoal_adm_ent *src_victim(struct shoal_adm *a, const struct shoal_adm_src *sc)
{
        struct shoal_adm_ent *oldest = NULL;
        struct shoal_list *n, *next;
        list_for_each (n, next, &a->preauth) {
                struct shoal_adm_ent *e = ent_of(n);
                if (e->src != sc)
                        continue;
                if (a->ops->silent(e))
                        return e;
                if (!oldest)
                        oldest = e;
        }
        return oldest;
}

/* The source IP (network order) counts under: every loopback address is one source, since every
 * local process can connect from any of 127.0.0.0/8 (the servers listen on IPv4 only, so there
 * is no IPv6 prefix to group). */
static uint32_t src_key(uint32_t ip)
{
        return (ntohl(ip) >> 24) == 127 ? htonl(0x7f000000u) : ip;
}

/* At the overall limit: the connection to close for a newcomer from SC, or NULL (refuse it). */
static struct shoal_adm_ent *full_victim(struct shoal_adm *a, const struct shoal_adm_src *sc)
{
        struct shoal_adm_ent *v = preauth_victim(a);
        if (v && v->src == sc)
                return src_victim(a, sc);
        if (v && v->src->n <= sc->n + 1)
                return NULL;
        return v;
}

/* Unauthenticated connections are limited per source (src_key) and in all. A newcomer is never
 * refused for its own source's limit: that source's oldest silent connection gives way
 * (src_victim), so a flood from an address an honest client shares (every local process shares
 * loopback) cannot lock that client out; it can only keep cycling its own connections. At the
 * overall limit, room is made by closing the oldest unauthenticated connection of the heaviest
 * source, but only when that is the newcomer's own source or one that would still hold more
 * than the newcomer's: a flood from a few sources cannot push out an honest peer's handshake
 * (it would need about as many sources as there are places), and a newcomer never displaces a
 * source lighter than its own. */
bool shoal_adm_admit(struct shoal_adm *a, uint32_t ip, const char *who, struct shoal_adm_src **out,
                     bool *evicted)
{
        *evicted = false;
        uint32_t key = src_key(ip);
        struct shoal_adm_src *sc = src_get(a, key);
        if (!sc)
                return false;
        struct shoal_adm_ent *v = NULL;
        unsigned nconns = __atomic_load_n(a->nconns, __ATOMIC_RELAXED);
        if (sc->n >= a->lim->loop_preauth_per_src) {
                v = src_victim(a, sc);
                if (!v)
                        return false; /* (every one it counts is on the list) */
        } else if (nconns >= a->lim->conn_cap || a->npreauth >= a->lim->loop_preauth_cap) {
                v = full_victim(a, sc);
                if (!v) {
                        log_ratelimited(SHOAL_LOG_WARN, "server",
                                        "refusing %s: %u connections, %u on this loop not "
                                        "authenticated",
                                        who, nconns, a->npreauth);
                        shoal_adm_unused(a, sc);
                        return false;
                }
        }
        if (v) {
                log_ratelimited(SHOAL_LOG_WARN, "server",
                                "closing unauthenticated %s (%u from its source) to admit %s",
                                a->ops->name(v), v->src->n, who);
                a->ops->evict(v); /* may free SC when V was its last connection */
                *evicted = true;
                sc = src_get(a, key);
                if (!sc)
                        return false;
        }
        *out = sc;
        return true;
}
