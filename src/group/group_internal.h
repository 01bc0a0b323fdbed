/* Inside the group module: the registry backend interface, the record codec shared by every
 * backend, and the hashes behind placement and view versions. Not for other modules. */
#ifndef SHOAL_GROUP_GROUP_INTERNAL_H
#define SHOAL_GROUP_GROUP_INTERNAL_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/util.h"
#include "group/group.h"

#define SHOAL_GROUP_NAME_MAX 255
/* An encoded record never exceeds this (every string escaped at worst 3x, plus numbers). */
#define SHOAL_RECORD_MAX 8192

/* Called by a backend's list for each stored (id, record) pair; neither is NUL-terminated. A
 * nonzero return stops the listing and is returned by it. */
typedef int (*shoal_registry_visit_fn)(void *arg, const char *id, size_t id_len, const char *rec,
                                       size_t rec_len);

/* A backend. Every operation runs under the registry's lock, so backends need no locking of
 * their own. Operations return 0 or a negative errno. */
struct shoal_registry_ops {
        const char *scheme;
        /* Inserts or replaces the record of ID (RECORD is an encoded, NUL-terminated text). */
        int (*put)(struct shoal_registry *r, const char *id, const char *record);
        /* Deletes the record of ID; deleting a missing record is success. */
        int (*del)(struct shoal_registry *r, const char *id);
        /* Calls VISIT for every record of the group. */
        int (*list)(struct shoal_registry *r, shoal_registry_visit_fn visit, void *arg);
        /* Sets the weight override of ID to WEIGHT (decimal text), or deletes it (NULL). */
        int (*set_weight)(struct shoal_registry *r, const char *id, const char *weight);
        /* Calls VISIT for every (id, weight text) override of the group. */
        int (*list_weights)(struct shoal_registry *r, shoal_registry_visit_fn visit, void *arg);
        /* Frees the backend, including R itself. */
        void (*close)(struct shoal_registry *r);
};

/* The common head of every backend's registry; each backend embeds it first. */
struct shoal_registry {
        const struct shoal_registry_ops *ops;
        pthread_mutex_t lock;
        char group[SHOAL_GROUP_NAME_MAX + 1];
};

/* Backend constructors: REST is the URL after "scheme://". They fill (*OUT)->ops and their own
 * state (the caller fills the rest of the head). Return 0, or a negative errno with one line in
 * ERR as shoal_registry_open does (-EINVAL: the URL cannot work). */
int shoal_registry_sqlite_open(const char *rest, const char *group, struct shoal_registry **out,
                               char *err, size_t errlen);
int shoal_registry_redis_open(const char *rest, const char *group, struct shoal_registry **out,
                              char *err, size_t errlen);

/* A redis://[[user]:password@]host[:port][/db] meta URL, parsed. */
struct shoal_redis_url {
        char host[256];
        int port; /* 1..65535; 6379 when the URL names none */
        unsigned db;
        char user[128];
        char pass[256];
        bool has_pass;
};

/* Parses REST, the meta URL after "redis://", into *U (user and password percent-decoded).
 * Returns 0, or -EINVAL with one line in ERR. Pure: connects to nothing. */
int shoal_registry_redis_url_parse(const char *rest, struct shoal_redis_url *u, char *err,
                                   size_t errlen);

struct redisReply;
/* Calls VISIT for every (field, value) pair of REP, the reply to HGETALL, skipping pairs that are
 * not two strings. Returns 0, VISIT's nonzero return, or -EPROTO when REP is not a hash. */
int shoal_registry_redis_visit(const struct redisReply *rep, shoal_registry_visit_fn visit,
                               void *arg);

/* True when ID is a usable member id: 1..SHOAL_MEMBER_ID_LEN characters of [0-9A-Za-z._-]. */
bool shoal_member_id_valid(const char *id, size_t len);

/* Encodes M into OUT (OUTLEN >= SHOAL_RECORD_MAX is always enough). Returns the length, or
 * -EINVAL when M cannot be stored faithfully (bad id or role, unterminated string, n_rdma out of
 * range). */
int shoal_member_encode(const struct shoal_member *m, char *out, size_t outlen);
/* Decodes LEN bytes of REC (not necessarily NUL-terminated) into M, validating every field;
 * alive and age_ms are cleared. Returns 0 or -EINVAL for anything malformed. */
int shoal_member_decode(const char *rec, size_t len, struct shoal_member *m);

/* Copies LEN bytes of S (stopping at a NUL) into OUT for a log line or an error message, with
 * control characters replaced by '?': registry contents are not trusted to be one line. */
const char *shoal_group_printable(const char *s, size_t len, char *out, size_t outlen);

/* A fast, well-mixed 64-bit hash (not cryptographic). SEED chains several inputs. */
uint64_t shoal_group_hash64(const void *data, size_t len, uint64_t seed);

struct shoal_group;
/* Registry calls of G's agent that failed in a row, now (0 once a listing succeeds); a heartbeat
 * against a dead registry adds two (its write and its listing). For tests, which wait for an
 * outage to have lasted a number of heartbeats instead of sleeping. */
unsigned shoal_group_registry_failures(const struct shoal_group *g);

#define SHOAL_GROUP_HEARTBEAT_DEFAULT SHOAL_NS_PER_SEC
#define SHOAL_GROUP_TIMEOUT_DEFAULT   (5 * SHOAL_NS_PER_SEC)
#define SHOAL_GROUP_GRACE_DEFAULT     (60 * SHOAL_NS_PER_SEC)
/* A grace period longer than this in a record is read as this: a record cannot pin a place for
 * ever. */
#define SHOAL_GROUP_GRACE_MAX_MS (24 * 3600 * 1000ULL)
#define SHOAL_WEIGHT_MAX         1000000

#endif
