/* Cache group membership [G1, G2, D1].
 *
 * A registry (sqlite3:///path/meta.db — the embedded default, several processes on one host — or
 * redis://[:password@]host:port/db) holds one record per member of a group. Each member's agent
 * thread joins, bumps its heartbeat counter every heartbeat interval, and re-reads the member
 * list; a member whose counter has not moved for the timeout (judged on the READER's monotonic
 * clock — wall time only decides whether a record seen for the first time is already stale) is
 * dropped from the view. Records silent for much longer are deleted by whoever notices.
 * On Redis (issue 33) the registry keeps leases on its own clock and a group version with a
 * change log instead: a heartbeat renews the lease, a process polls the version and reads only
 * the records that changed, and an expired lease or an old record is dealt with inside a poll.
 * Consumers are not members: they keep a presence apart and only read the members.
 *
 * Placement is weighted rendezvous hashing over the live providers of the view: each block is
 * owned by the member with the highest score -weight / ln(u), u = hash(member id, block id) in
 * (0,1). Weight 0 owns nothing (drain). A join or leave moves about 1/N of the blocks and only
 * those that the joining/leaving member gains/loses. */
#ifndef SHOAL_GROUP_GROUP_H
#define SHOAL_GROUP_GROUP_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"

#define SHOAL_MEMBER_ID_LEN 32 /* hex chars */
#define SHOAL_ADDR_LEN      64 /* "ip:port" */
#define SHOAL_RDMA_ADDRS    4

enum shoal_member_role {
        SHOAL_ROLE_PROVIDER = 0, /* shares its cache (serves) */
        SHOAL_ROLE_CONSUMER = 1, /* --no-sharing: reads only, owns nothing */
};

struct shoal_member {
        char id[SHOAL_MEMBER_ID_LEN + 1]; /* random per process start */
        char host[64];                    /* hostname, for display */
        char tcp_addr[SHOAL_ADDR_LEN];    /* TCP pool "ip:port"; empty for consumers */
        char iorpc_addr[SHOAL_ADDR_LEN];  /* IORPC on TCP "ip:port"; empty when disabled */
        char rdma_addr[SHOAL_RDMA_ADDRS][SHOAL_ADDR_LEN]; /* one per --rdma-network interface */
        unsigned n_rdma;
        uint32_t weight;
        enum shoal_member_role role;
        char volume_url[1024]; /* [D1]: every member must agree on volume and block size */
        uint32_t block_size;
        uint64_t cache_bytes;    /* disk cache use, updated with each heartbeat */
        uint64_t cache_capacity; /* UINT64_MAX = unlimited */
        uint64_t beat;           /* heartbeat counter, bumped by the member */
        int64_t updated_ms;      /* wall clock of the last heartbeat (first-sight staleness) */
        int64_t started_ms;      /* wall clock of join */
        char metrics_addr[SHOAL_ADDR_LEN]; /* metrics endpoint "ip:port"; empty when none (or
                                            * written by a version without it) */
        bool leaving;      /* said goodbye: serves nothing, keeps its place for its grace */
        uint64_t grace_ms; /* how long it keeps its place once away (0: none, or an older
                            * version: it leaves the ring when it is dropped from the view) */
        /* filled by the reader, not stored */
        bool alive;
        uint64_t age_ms;        /* since the reader last saw the counter move */
        uint64_t grace_left_ms; /* away members: how long it keeps its place still */
        bool weight_set;        /* the weight comes from `shoal group --set-weight` */
};

struct shoal_registry;

/* Opens the registry at URL for group GROUP (sqlite3:///path, redis://host:port/db) into *OUT.
 * Returns 0, or a negative errno with one line in ERR: -EINVAL when URL or GROUP cannot work
 * (empty, an unknown scheme, a malformed redis URL, a bad group name); any other errno is a
 * failure at run time (the database cannot be opened, the server cannot be reached or refuses
 * the password). */
int shoal_registry_open(const char *url, const char *group, struct shoal_registry **out, char *err,
                        size_t errlen);
void shoal_registry_close(struct shoal_registry *r);
/* Whether URL is a meta URL open could take (a scheme it knows, a path, a redis URL that parses)
 * without opening anything. Returns 0, or -EINVAL with the reason in ERR (no "registry:" tag). */
int shoal_registry_url_check(const char *url, char *err, size_t errlen);

/* Low-level record operations (each a few round trips; thread-safe through an internal lock).
 * They return 0 or a negative errno. put refuses with -EINVAL a record it could not read back as
 * it is: an id outside [0-9A-Za-z._-]{1,32}, a bad role or n_rdma, an unterminated string. list
 * skips (and logs) stored records that do not decode. */
int shoal_registry_put(struct shoal_registry *r, const struct shoal_member *m);
int shoal_registry_delete(struct shoal_registry *r, const char *id);
/* Reads every record of the group into a malloc'd array (*OUT, *N); alive/age_ms are not set.
 * A weight set through shoal_registry_set_weight replaces the record's (weight_set). */
int shoal_registry_list(struct shoal_registry *r, struct shoal_member **out, size_t *n);
/* Sets (WEIGHT >= 0) or clears (-1) the weight that listings give member ID, whatever its record
 * says: kept beside the records, so the member's own heartbeats do not overwrite it. */
int shoal_registry_set_weight(struct shoal_registry *r, const char *id, int64_t weight);

/* A member view: the live members at one moment, immutable and reference counted.
 *
 * A member that stops beating or says goodbye leaves MEMBERS at once (it serves nothing) but
 * keeps its place in the ring for its grace period: it is listed in AWAY, nothing of the
 * placement changes for anyone else, its blocks are served meanwhile by the next member in each
 * block's rendezvous order (the owner over MEMBERS), and they are its own again when it comes
 * back with the same id. PREV is the placement before the last change of it (join, leave,
 * weight), for a new owner to ask the old one before the store (shoal_group_prev_owner). */
struct shoal_group_view {
        uint64_t version; /* changes whenever the set of live providers or a weight changes */
        size_t n;
        struct shoal_member *members; /* live members, providers and consumers, sorted by id */
        int refs;                     /* internal */
        size_t n_away;
        struct shoal_member *away; /* in their grace period, not serving; sorted by id */
        size_t n_prev;
        struct shoal_member *prev;     /* the previous placement's providers (none when too old) */
        struct shoal_placement *place; /* internal: shoal_group_view_index's, or NULL */
};

struct shoal_group_config {
        const char *meta_url;     /* registry URL */
        const char *group;        /* --cache-group */
        struct shoal_member self; /* this member's record (id filled by start when empty) */
        uint64_t heartbeat_ns;    /* 0: SHOAL_GROUP_HEARTBEAT, else 1 s (shoal_config_pick) */
        uint64_t timeout_ns;      /* 0: SHOAL_GROUP_TIMEOUT, else 5 s (shoal_config_pick) */
        /* How long this member keeps its place in the ring once away (published in its
         * record): default 60 s; SHOAL_GROUP_GRACE wins over it (documented); NO_GRACE: none
         * (a stop deletes the record, as before). */
        uint64_t grace_ns;
        bool no_grace;
        /* Asked on the agent thread before every heartbeat for the cache use to publish [C7]
         * (*BYTES in use, *CAPACITY or UINT64_MAX). May be NULL: then the use given in SELF, or
         * the last shoal_group_set_usage, is published. Must not block for long, and must stay
         * callable until shoal_group_stop returns. */
        void (*usage)(void *arg, uint64_t *bytes, uint64_t *capacity);
        void *usage_arg;
};

struct shoal_group;

/* Joins into *OUT: writes the record and starts the agent thread. Returns 0, or a negative errno
 * with one line in ERR: -EINVAL when the configuration cannot work (no meta URL or group, a bad
 * member id, a registry URL that shoal_registry_open refuses, or a live member with another
 * volume URL or block size [D1], the message naming both); any other errno is a failure at run
 * time (the registry cannot be reached, read or written). */
int shoal_group_start(const struct shoal_group_config *cfg, struct shoal_group **out, char *err,
                      size_t errlen);
/* Says goodbye without stopping: the record says "leaving" from now on (written at once), so
 * that every reader stops sending requests here within a heartbeat while this member still
 * answers the ones in flight. Returns the time a reader needs to notice (a heartbeat and a half,
 * at most 3 s). */
uint64_t shoal_group_goodbye(struct shoal_group *g);
/* A member answered that it read a request under another view than ours (issue 33): list the
 * registry now rather than at the next heartbeat, at most once every SHOAL_GROUP_EARLY_MIN_NS
 * (a member whose own view is the one behind cannot make us poll in a loop). Any thread. */
#define SHOAL_GROUP_EARLY_MIN_NS (250 * SHOAL_NS_PER_MS)
void shoal_group_refresh_soon(struct shoal_group *g);
/* Leaves and stops the agent: the record stays, saying "leaving", for the grace period (then
 * any reader deletes it); without a grace period it is deleted now. */
void shoal_group_stop(struct shoal_group *g);
/* Updates the cache use published with the next heartbeat (when the config has no usage
 * callback; with one, the callback's answer wins). */
void shoal_group_set_usage(struct shoal_group *g, uint64_t bytes, uint64_t capacity);
/* This member's id. */
const char *shoal_group_self_id(const struct shoal_group *g);

/* The current view, with a reference (release with shoal_group_view_put). Never NULL. */
struct shoal_group_view *shoal_group_view_get(struct shoal_group *g);
void shoal_group_view_put(struct shoal_group_view *v);

/* The owner of block ID among V's live providers with weight > 0: an index into V->members, or
 * -1 when there is none. Pure function of (V's providers, ID). */
int shoal_group_owner(const struct shoal_group_view *v, const struct shoal_block_id *id);

/* A view version no view has (versions are hashes; the agent never publishes this one): a read
 * sent with it asks only for a copy the member holds, never a fill (a new owner asking the
 * previous one, which must not ask back). */
#define SHOAL_VIEW_COPY_ONLY UINT64_MAX

/* Builds V's placement index (its providers' hashes, once) for faster shoal_group_owner; call
 * once V's members are final, before V is shared. Without memory V simply stays unindexed. The
 * owners are the same with and without it. unindex frees it (view_put does). */
void shoal_group_view_index(struct shoal_group_view *v);
void shoal_group_view_unindex(struct shoal_group_view *v);

/* The owner of block ID in V's previous placement, when that is another member than its owner
 * now and one that can still answer (live, or saying goodbye but still beating): an index into
 * V->members (or, for one saying goodbye, V->n + its index in V->away), else -1. A new owner
 * that misses a block asks it before the store: blocks that moved come from the group. */
int shoal_group_prev_owner(const struct shoal_group_view *v, const struct shoal_block_id *id,
                           const struct shoal_member **out);

/* Sets the weight of member MEMBER (an id, or a TCP pool or IORPC address as `shoal group`
 * prints it) of GROUP through the registry at META_URL: the member and every reader apply it
 * with their next listings. WEIGHT 0 drains it. *OUT (optional) gets the member's record as it
 * was. Returns 0, -ENOENT (no such member), -EINVAL (a consumer), or another negative errno, with
 * one line in ERR. */
int shoal_group_set_weight(const char *meta_url, const char *group, const char *member,
                           uint32_t weight, struct shoal_member *out, char *err, size_t errlen);

/* The block's rendezvous order: the indexes into V->members of its first K (at most
 * SHOAL_GROUP_RANK_MAX) live providers of weight > 0, best first (OUT[0] is shoal_group_owner's
 * answer). Returns how many were found. */
#define SHOAL_GROUP_RANK_MAX 4
unsigned shoal_group_owners(const struct shoal_group_view *v, const struct shoal_block_id *id,
                            int *out, unsigned k);
/* MEMBER_ID's place in the block's order in V: 0 for its owner, 1 for the next member (the one
 * that serves it while the owner is away or unreachable), -1 for anyone else. */
int shoal_group_rank(const struct shoal_group_view *v, const struct shoal_block_id *id,
                     const char *member_id);

/* Placement score of a member for a block (exposed for tests). */
double shoal_placement_score(const char *member_id, uint32_t weight,
                             const struct shoal_block_id *id);

/* Reads the members of GROUP once without joining (for `shoal group`): lists the records and
 * judges liveness by watching the counters for WAIT_NS (0: by updated_ms only). *OUT (malloc'd,
 * sorted by id, freed by the caller) holds every record, dead ones with alive == false. Returns
 * 0, or a negative errno with one line in ERR. */
int shoal_group_list_once(const char *meta_url, const char *group, uint64_t wait_ns,
                          struct shoal_member **out, size_t *n, char *err, size_t errlen);

#endif
