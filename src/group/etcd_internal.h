/* Inside the etcd backend: the registry's state, shared by registry_etcd.c (the HTTP calls,
 * leases, presence) and etcd_watch.c (the mirror kept by a watch, and sync). */
#ifndef SHOAL_GROUP_ETCD_INTERNAL_H
#define SHOAL_GROUP_ETCD_INTERNAL_H

#include <curl/curl.h>
#include <pthread.h>

#include "group/group_internal.h"

#define ETCD_TIMEOUT_MS 2000
/* A full read may wait behind a crowd's: giving up on it would only ask again. */
#define ETCD_FULL_READ_TIMEOUT_MS 10000
#define ETCD_LEASES               16 /* ids whose leases this process keeps (its own, a tool's few) */
#define ETCD_REQUEST_MAX          (SHOAL_RECORD_MAX * 2 + SHOAL_ETCD_KEY_MAX * 3 + 256)
/* A range answer of 11,000 records is about 5 MB; anything far beyond is not etcd's. */
#define ETCD_BODY_MAX (64u << 20)

struct etcd_lease {
        char id[SHOAL_MEMBER_ID_LEN + 1];
        bool client;
        bool written;            /* the record was put under LEASE */
        int64_t lease;           /* of the record (0: none) */
        int64_t live;            /* a member's: of its presence key, the group timeout (0: none) */
        char *rec;               /* a client's last record, put again when its lease was lost */
        uint64_t renewed_ns;     /* monotonic time of the last keep-alive etcd answered (0: none) */
        uint64_t rec_renewed_ns; /* ... that included the record's lease (0: none) */
};

/* What a reader knows of one id: its record, its presence key and its weight. */
struct etcd_ent {
        char id[SHOAL_MEMBER_ID_LEN + 1];
        bool has_rec; /* a record that decodes, filed under its own id */
        bool present; /* its presence key is there (its lease runs) */
        bool weight_set;
        uint32_t weight;
        int64_t lost_ns; /* when its presence was last seen gone (monotonic) */
        struct shoal_member m;
};

struct etcd_mirror {
        struct etcd_ent *v; /* sorted by id */
        size_t n, cap;
};

struct etcd_watch {
        pthread_t thread;
        bool started;
        CURL *h;
        pthread_mutex_t lock; /* everything below; the mirror's entries too */
        pthread_cond_t cond;
        bool stop;
        bool synced;  /* the mirror is the group as of REV */
        bool healthy; /* a stream runs from REV + 1 */
        bool dirty;   /* the mirror changed since the last sync */
        bool fallback_logged;
        uint64_t epoch; /* bumped when a full read went back in time: the stream restarts */
        int64_t rev;    /* of the last change applied */
        unsigned syncs; /* sync calls; the watch starts with the second */
        unsigned unhealthy_syncs; /* in a row, with the watch started but no stream */
        struct etcd_mirror mir;
        /* the watch thread's own */
        uint64_t stream_epoch;
        char *buf;
        size_t len, cap;
        bool failed; /* the stream said something that ends it */
};

/* The keep-alive stream (etcd_grpc.c). */
struct etcd_ka {
        int fd;            /* -1: no connection */
        uint64_t retry_ns; /* after a failure, keep-alives go through the gateway until then */
        struct shoal_h2ka h2;
};

struct etcd_registry {
        struct shoal_registry base;
        CURL *h;
        struct shoal_etcd_url u;
        unsigned cur;                     /* endpoint in use */
        char prefix[SHOAL_ETCD_KEY_MAX];  /* of member records */
        char wprefix[SHOAL_ETCD_KEY_MAX]; /* of weights set by `shoal group --set-weight` */
        char lprefix[SHOAL_ETCD_KEY_MAX]; /* of members' presence keys */
        char cprefix[SHOAL_ETCD_KEY_MAX]; /* of clients' records */
        char gprefix[SHOAL_ETCD_KEY_MAX]; /* "shoal/<group>/" */
        /* What readers watch: [prefix, wend) holds the members, presence keys and weights. */
        char wend[SHOAL_ETCD_KEY_MAX];
        int64_t revision; /* the store revision of the last answer */
        struct etcd_lease leases[ETCD_LEASES];
        unsigned next_lease; /* round-robin slot to reuse */
        char *body;
        size_t body_len, body_cap;
        bool body_overflow;
        char req[ETCD_REQUEST_MAX]; /* a put's request (calls run under the registry lock) */
        struct etcd_watch w;
        struct etcd_ka ka;
};

/* POSTs JSON to PATH, on the endpoint in use and then each other one while the failure is the
 * transport's. Returns 0 with the answer in R->body, or a negative errno with ERR. */
int shoal_etcd_post(struct etcd_registry *r, const char *path, const char *json, char *err,
                    size_t errlen);
/* The range request body of [FROM, TO) (both keys) into OUT; 0 or -EINVAL. REV > 0 reads at
 * that revision. */
int shoal_etcd_range_json(const char *from, const char *to, int64_t rev, char *out, size_t outlen);
void shoal_etcd_warn(const char *what, const char *err);

/* Keeps IDS[0..N) alive on the gRPC stream (N <= SHOAL_H2KA_IDS_MAX): TTLS[i] gets each lease's
 * TTL, 0 when it is gone. Returns 0, or a negative errno with ERR (the connection is closed then;
 * the next call opens a new one). close ends the connection. */
int shoal_etcd_ka_keepalive(struct etcd_registry *r, const int64_t *ids, int64_t *ttls, size_t n,
                            char *err, size_t errlen);
void shoal_etcd_ka_close(struct etcd_registry *r);

/* The watch half (etcd_watch.c). init: 0 or -ENOMEM; close stops and joins the thread. */
int shoal_etcd_watch_init(struct etcd_registry *r);
void shoal_etcd_watch_close(struct etcd_registry *r);
int shoal_etcd_sync(struct shoal_registry *base, const uint64_t *unless_gen,
                    struct shoal_member **out, size_t *n);

#endif
