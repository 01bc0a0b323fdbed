/* Admission of TCP connections [S2]: the limits a member derives from its open-file limit, and
 * per loop the unauthenticated connections counted per source address, with the rule for who
 * gives way to a newcomer. No I/O of its own: the connection module answers whether one of its
 * connections has been silent and closes the ones chosen to give way (struct shoal_adm_ops).
 * Everything is per loop (SO_REUSEPORT spreads accepts over the loops), so no lock is taken. */
#ifndef SHOAL_SERVER_ADMISSION_H
#define SHOAL_SERVER_ADMISSION_H

#include <stdbool.h>
#include <stdint.h>

#include "common/list.h"

#define SHOAL_ADM_BUCKETS 256 /* a power of two: the hash keeps the top 8 bits */

/* The member's limits, from RLIMIT_NOFILE (shoal_adm_limits_derive). */
struct shoal_server_limits {
        unsigned max_inflight;         /* in: the configured cap; out: what the fds allow */
        unsigned conn_cap;             /* connections */
        unsigned npipes;               /* the pipe pool's bound */
        unsigned loop_preauth_cap;     /* connections not yet authenticated, on each loop */
        unsigned loop_preauth_per_src; /* ... from one source address, on each loop */
};

/* Limits from the process's open-file limit (raising the soft limit to the hard one first) for
 * NLOOPS loops; SPLICE: hits may be answered through pipes. */
void shoal_adm_limits_derive(struct shoal_server_limits *l, unsigned nloops, bool splice);

/* Unauthenticated connections from one source address, on one loop. */
struct shoal_adm_src {
        struct shoal_adm_src *next;
        uint32_t ip;
        unsigned n;
};

/* A connection as admission sees it, embedded in the connection. */
struct shoal_adm_ent {
        struct shoal_list link;    /* the loop's unauthenticated ones, oldest first */
        struct shoal_adm_src *src; /* NULL: not counted (authenticated, closed) */
};

struct shoal_adm_ops {
        /* Whether E has sent nothing yet, not even bytes still unread in its socket. */
        bool (*silent)(struct shoal_adm_ent *e);
        /* Closes E after the loop's batch of events (it calls shoal_adm_leave at once). */
        void (*evict)(struct shoal_adm_ent *e);
        /* E's peer address, for logs. */
        const char *(*name)(struct shoal_adm_ent *e);
};

/* One loop's admission state. */
struct shoal_adm {
        const struct shoal_adm_ops *ops;
        const struct shoal_server_limits *lim;
        const unsigned *nconns; /* the server's connections (atomic) */
        struct shoal_list preauth;
        unsigned npreauth;
        struct shoal_adm_src *src[SHOAL_ADM_BUCKETS];
};

void shoal_adm_init(struct shoal_adm *a, const struct shoal_adm_ops *ops,
                    const struct shoal_server_limits *lim, const unsigned *nconns);
/* Whether a new connection from IP (network order; WHO for logs) may be admitted; on success
 * *OUT is its source's count, to pass to shoal_adm_enter or shoal_adm_unused, and *EVICTED tells
 * whether a connection was made to give way (accept no more until it has closed). */
bool shoal_adm_admit(struct shoal_adm *a, uint32_t ip, const char *who, struct shoal_adm_src **out,
                     bool *evicted);
/* E joins the unauthenticated connections (newest last), counted for SRC. */
void shoal_adm_enter(struct shoal_adm *a, struct shoal_adm_ent *e, struct shoal_adm_src *src);
/* E authenticated or closed: it no longer counts. A no-op when it does not count. */
void shoal_adm_leave(struct shoal_adm *a, struct shoal_adm_ent *e);
/* SRC from shoal_adm_admit was not used: freed when nothing counts under it. */
void shoal_adm_unused(struct shoal_adm *a, struct shoal_adm_src *src);

#endif
