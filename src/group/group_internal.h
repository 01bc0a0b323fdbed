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

struct shoal_lease_put {
        bool changed;    /* a field of the view changed (join, address, weight, goodbye) */
        int64_t ttl_ms;  /* lease left; <= 0: the record is written already expired */
        int64_t keep_ms; /* the record is deleted this long from now, unless written again */
};

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

        /* Optional, together (Redis): a backend with leases and a versioned change log. put_lease
         * replaces put: it stores the record, renews its lease (P->ttl_ms, none when <= 0) and
         * the time of its deletion (P->keep_ms from now), and changes the group version when
         * P->changed or the member was not leased. sync replaces list: it polls the version and
         * reads only the changes (everything at the first call or after a gap) into a mirror,
         * and gives back the mirror with alive, age_ms and grace_left_ms filled by the leases
         * (nothing, returning 1, when UNLESS_GEN is given and the generation is still that).
         * del and set_weight change the version too. */
        int (*put_lease)(struct shoal_registry *r, const char *id, const char *record,
                         const struct shoal_lease_put *p);
        int (*sync)(struct shoal_registry *r, const uint64_t *unless_gen, struct shoal_member **out,
                    size_t *n);
        /* Optional: client presence kept apart from the members (RECORD NULL: renew only).
         * Without them the front end keeps clients in a companion group of the same backend. */
        int (*put_client)(struct shoal_registry *r, const char *id, const char *record);
        int (*del_client)(struct shoal_registry *r, const char *id);
        /* Calls VISIT for every live client's record. */
        int (*list_clients)(struct shoal_registry *r, shoal_registry_visit_fn visit, void *arg);
};

/* The common head of every backend's registry; each backend embeds it first. */
struct shoal_registry {
        const struct shoal_registry_ops *ops;
        pthread_mutex_t lock;
        char group[SHOAL_GROUP_NAME_MAX + 8];
        /* Leases (put_lease): how long a member's lease lasts past its last put (its record
         * is deleted once silent for STALE_FACTOR of them, or its grace period); set by open
         * from the environment or the default timeout, by the agent to its own timeout. */
        uint64_t timeout_ns;
        /* Bumped by every listing that may differ from the one before (sync: only when the
         * mirror changed), for a reader to skip rebuilding what it built from the last one. */
        uint64_t generation;
        /* The view fields' hash of the last record put, and its id (changes of the version). */
        uint64_t put_hash;
        char put_id[SHOAL_MEMBER_ID_LEN + 1];
        /* Clients where the backend keeps no presence of its own: a companion group. */
        char *url;
        struct shoal_registry *clients;
        /* How long a record outlives its writer's last put where the backend expires records
         * itself (etcd leases); 0: SHOAL_GROUP_TIMEOUT_DEFAULT. Set by the agent after open. */
        uint64_t lease_ns;
        /* How long a client's presence outlives its last renewal where the backend expires it
         * (put_client: Redis, etcd); read through shoal_registry_client_ttl_ns, never less than
         * the timeout. Set by open. A client renews
         * it every half of this, not with every poll: presence only feeds `shoal group`'s
         * count, so a killed client may be counted this long, and its renewals cost the
         * registry TTL/2 times less than a heartbeat's. */
        uint64_t client_ttl_ns;
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

/* Client presence (consumers, which are not members): put writes or renews the record of a
 * client (M->role is a consumer), delete removes it, list reads the live ones (alive set on the
 * backends with leases; judged by updated_ms elsewhere). Return 0 or a negative errno. */
int shoal_registry_put_client(struct shoal_registry *r, const struct shoal_member *m);
int shoal_registry_delete_client(struct shoal_registry *r, const char *id);
int shoal_registry_list_clients(struct shoal_registry *r, struct shoal_member **out, size_t *n);
/* As shoal_registry_list, but on a backend with leases returns 1 and no listing when nothing
 * changed since the listing of generation *GEN; *GEN gets the generation of this one. */
int shoal_registry_list_since(struct shoal_registry *r, uint64_t *gen, struct shoal_member **out,
                              size_t *n);
/* True when R's listings carry liveness from leases (alive, age_ms, grace_left_ms filled). */
bool shoal_registry_has_leases(const struct shoal_registry *r);
/* The client TTL in force: R's, or its timeout where that is longer. */
uint64_t shoal_registry_client_ttl_ns(const struct shoal_registry *r);
/* How often a client renews its presence in R: half the client TTL where the backend expires
 * presence itself, else half the timeout (a companion group judges clients by their age). */
uint64_t shoal_registry_client_renew_ns(const struct shoal_registry *r);

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

/* ---- etcd (etcd_codec.c: pure, fuzzed; registry_etcd.c: the HTTP calls) ---- */

#define SHOAL_ETCD_ENDPOINTS 8
/* A key: "shoal/" + the group with '%' and '/' escaped (3x at worst) + "/members/" + an id. */
#define SHOAL_ETCD_KEY_MAX (6 + 3 * SHOAL_GROUP_NAME_MAX + 9 + SHOAL_MEMBER_ID_LEN + 1)

struct shoal_etcd_endpoint {
        char host[256]; /* a name, an IPv4 address or a bracketed IPv6 address */
        int port;       /* 2379 when the URL names none */
};

/* An etcd://host[:port][,host[:port]...] meta URL, parsed. */
struct shoal_etcd_url {
        struct shoal_etcd_endpoint ep[SHOAL_ETCD_ENDPOINTS];
        unsigned n;
};

int shoal_registry_etcd_open(const char *rest, const char *group, struct shoal_registry **out,
                             char *err, size_t errlen);
/* Parses REST, the meta URL after "etcd://". Returns 0, or -EINVAL with one line in ERR. */
int shoal_etcd_url_parse(const char *rest, struct shoal_etcd_url *u, char *err, size_t errlen);
/* The key prefix "shoal/<GROUP>/<KIND>/" of GROUP's records of KIND ("members", "weights") into
 * OUT (SHOAL_ETCD_KEY_MAX is enough). Returns its length or -EINVAL. */
int shoal_etcd_prefix(const char *group, const char *kind, char *out, size_t outlen);
/* Standard base64 with padding. Encode returns the length written (NUL-terminated) and decode
 * the bytes written; both -1 when OUT is too small or (decode) IN is not canonical base64. */
long shoal_etcd_b64_encode(const void *in, size_t len, char *out, size_t outlen);
long shoal_etcd_b64_decode(const char *in, size_t len, void *out, size_t outlen);
/* Answers of the v3 gateway. Each returns 0; -ENOENT (an error answer about a missing lease),
 * -EIO (another error answer) or -EPROTO (not what that call answers), with one line in ERR.
 * REVISION (may be NULL) gets the header's store revision when there is one. */
int shoal_etcd_parse_status(const char *body, size_t len, int64_t *revision, char *err,
                            size_t errlen);
int shoal_etcd_parse_grant(const char *body, size_t len, int64_t *lease, char *err, size_t errlen);
/* Calls VISIT(id, record) for every kv whose key lies under PREFIX (others are ignored), in
 * the answer's order; a value that is not base64 is passed as an empty record. Returns VISIT's
 * nonzero return as it is. */
int shoal_etcd_parse_range(const char *body, size_t len, const char *prefix,
                           shoal_registry_visit_fn visit, void *arg, int64_t *revision, char *err,
                           size_t errlen);

/* Watches (etcd_watch.c). The gateway streams one JSON object a line: the length of the first
 * complete line of BUF (its '\n' included), 0 when BUF holds none yet. */
size_t shoal_etcd_next_line(const char *buf, size_t len);
/* A keep-alive of N leases in one call answers one object a line: TTLS[i] gets the TTL of
 * IDS[i]'s answer, 0 when it has none (expired, or not answered). Returns 0, or load's errors. */
int shoal_etcd_parse_keepalives(const char *body, size_t len, const int64_t *ids, int64_t *ttls,
                                size_t n, char *err, size_t errlen);

/* One change a watch reports. KEY is what follows the watched prefix ("members/<id>"), VAL the
 * decoded value (empty for a DELETE or a value that is not base64); both point into the
 * parser's buffers and live only during the callback. */
struct shoal_etcd_event {
        bool del;
        const char *key, *val;
        size_t key_len, val_len;
        int64_t mod_revision;
};
/* A nonzero return stops the parse and is returned by it. */
typedef int (*shoal_etcd_event_fn)(void *arg, const struct shoal_etcd_event *ev);
struct shoal_etcd_watch_msg {
        bool created, canceled;
        int64_t revision;         /* of the header; 0 when none */
        int64_t compact_revision; /* > 0: the watch's start revision is compacted away */
        int64_t last_revision;    /* the highest mod_revision of an event passed on; 0: none */
        size_t n_events;          /* the events passed on */
};
/* Parses MSG, one object of a watch stream: fills *OUT and calls FN for each event whose key
 * lies under PREFIX, in order (others are skipped). Returns 0, FN's nonzero return, or as
 * load: -EIO for an error answer, -EPROTO for anything but a watch answer, with ERR. */
int shoal_etcd_parse_watch(const char *msg, size_t len, const char *prefix, shoal_etcd_event_fn fn,
                           void *arg, struct shoal_etcd_watch_msg *out, char *err, size_t errlen);

/* etcd's LeaseKeepAlive over gRPC on HTTP/2 (etcd_h2.c: pure, fuzzed; etcd_grpc.c: the socket).
 * One connection carries one bidirectional stream (id 1) for as long as it lasts. */
#define SHOAL_H2_FRAME_MAX  16384 /* the default SETTINGS_MAX_FRAME_SIZE, which ours keep */
#define SHOAL_H2KA_MSG_MAX  1024  /* an answer is a few dozen bytes */
#define SHOAL_H2KA_IDS_MAX  4     /* leases one call keeps alive */
#define SHOAL_H2KA_OPEN_MAX 512   /* what shoal_h2ka_open writes, at most */

/* Called for each LeaseKeepAliveResponse: its ID and TTL (0 when the lease is gone). */
typedef void (*shoal_h2ka_answer_fn)(void *arg, int64_t id, int64_t ttl);

struct shoal_h2ka {
        uint8_t frame[9 + SHOAL_H2_FRAME_MAX]; /* the frame being read */
        size_t frame_len;
        uint8_t msg[5 + SHOAL_H2KA_MSG_MAX]; /* the gRPC message being assembled */
        size_t msg_len;
        uint8_t out[1024]; /* frames we owe the server (acks, window updates), to be sent */
        size_t out_len;
        int64_t send_conn, send_stream; /* what the server lets us send */
        uint32_t peer_initial_window;
        uint32_t taken; /* DATA bytes read since our last window update */
        bool in_headers, end_after_headers;
        bool ended;    /* the stream or the connection is over: open a new one */
        bool draining; /* GOAWAY: this call's answers still come; do not reuse */
        bool broken;   /* the server broke the protocol: close */
        uint64_t answers;
};

/* The client's opening (preface, SETTINGS, the request's HEADERS) for AUTHORITY ("host:port")
 * into OUT (OUTLEN >= SHOAL_H2KA_OPEN_MAX). Returns its length, 0 if AUTHORITY is too long. */
size_t shoal_h2ka_open(uint8_t *out, size_t outlen, const char *authority);
/* One DATA frame of stream 1 with a LeaseKeepAliveRequest for each of IDS[0..N) (N <=
 * SHOAL_H2KA_IDS_MAX; OUTLEN >= 9 + 16 N). Returns its length (its payload is 9 less). */
size_t shoal_h2ka_request(uint8_t *out, size_t outlen, const int64_t *ids, size_t n);
void shoal_h2ka_init(struct shoal_h2ka *k);
/* Takes LEN received bytes: calls FN for each answer, queues what the server is owed in K->out
 * and updates the send windows. Returns 0, or -EPROTO (K is broken from then on: close). */
int shoal_h2ka_feed(struct shoal_h2ka *k, const uint8_t *in, size_t len, shoal_h2ka_answer_fn fn,
                    void *arg);
/* The ID and TTL of a LeaseKeepAliveResponse (LEN bytes of protobuf). 0 or -EPROTO. */
int shoal_h2ka_parse_answer(const uint8_t *pb, size_t len, int64_t *id, int64_t *ttl);

#define SHOAL_GROUP_HEARTBEAT_DEFAULT  SHOAL_NS_PER_SEC
#define SHOAL_GROUP_TIMEOUT_DEFAULT    (5 * SHOAL_NS_PER_SEC)
#define SHOAL_GROUP_GRACE_DEFAULT      (60 * SHOAL_NS_PER_SEC)
#define SHOAL_GROUP_CLIENT_TTL_DEFAULT (60 * SHOAL_NS_PER_SEC)
/* A grace period longer than this in a record is read as this: a record cannot pin a place for
 * ever. */
#define SHOAL_GROUP_GRACE_MAX_MS (24 * 3600 * 1000ULL)
#define SHOAL_WEIGHT_MAX         1000000
/* A record silent for this many timeouts (or its grace period and one) is deleted. */
#define SHOAL_STALE_FACTOR 10

#endif
