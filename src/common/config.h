/* Environment overrides, in one place: every variable shoal reads is in one table (config.c),
 * parsed once at start-up with one error style, and documented in docs/operations.md
 * ("Environment"). A set variable with a bad value is an error naming it ("invalid NAME=VALUE:
 * expected ..."), which the command line turns into exit 2; it never quietly becomes a default.
 * An empty value counts as unset.
 *
 * Flags are parsed by src/cli/cli.c. Where a value can come from a flag (or a caller's field),
 * the environment and a default, one rule resolves it, shoal_config_pick: flag > environment >
 * default (a zero / NULL field here means "not set"). The defaults of the variables are named
 * below, once each (docs/operations.md gives them in its table). */
#ifndef SHOAL_COMMON_CONFIG_H
#define SHOAL_COMMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>

#include "common/util.h"

/* The defaults of the environment's durations and counts (docs/operations.md, "Environment").
 * The group's (SHOAL_GROUP_HEARTBEAT, _TIMEOUT, _GRACE) are group/group.h's
 * SHOAL_GROUP_*_DEFAULT. */
#define SHOAL_REMOTE_TIMEOUT_DEFAULT_NS     (10 * SHOAL_NS_PER_SEC)  /* SHOAL_REMOTE_TIMEOUT */
#define SHOAL_AVOID_DEFAULT_NS              (10 * SHOAL_NS_PER_SEC)  /* SHOAL_AVOID_DURATION */
#define SHOAL_IORPC_SCALE_PERIOD_DEFAULT_NS SHOAL_NS_PER_SEC         /* SHOAL_IORPC_SCALE_PERIOD */
#define SHOAL_RDMA_RETRY_DEFAULT_NS         (300 * SHOAL_NS_PER_SEC) /* IORPC_RDMA_RETRY_DURATION */
#define SHOAL_RDMA_HEARTBEAT_DEFAULT_NS     SHOAL_NS_PER_SEC         /* SHOAL_RDMA_HEARTBEAT */
#define SHOAL_RDMA_CHANNEL_WAIT_DEFAULT_NS  (3 * SHOAL_NS_PER_SEC)   /* SHOAL_RDMA_CHANNEL_WAIT */
#define SHOAL_STORE_DEADLINE_DEFAULT_NS     (60 * SHOAL_NS_PER_SEC)  /* SHOAL_STORE_DEADLINE */
#define SHOAL_STORE_ATTEMPTS_DEFAULT        5                        /* SHOAL_STORE_ATTEMPTS */

struct shoal_env {
        /* durations in ns; 0 = not set */
        uint64_t group_heartbeat_ns;        /* SHOAL_GROUP_HEARTBEAT */
        uint64_t group_timeout_ns;          /* SHOAL_GROUP_TIMEOUT */
        uint64_t group_client_ttl_ns;       /* SHOAL_GROUP_CLIENT_TTL */
        uint64_t group_grace_ns;            /* SHOAL_GROUP_GRACE */
        uint64_t remote_timeout_ns;         /* SHOAL_REMOTE_TIMEOUT */
        uint64_t avoid_ns;                  /* SHOAL_AVOID_DURATION */
        uint64_t iorpc_scale_period_ns;     /* SHOAL_IORPC_SCALE_PERIOD */
        uint64_t rdma_retry_ns;             /* IORPC_RDMA_RETRY_DURATION */
        uint64_t rdma_heartbeat_ns;         /* SHOAL_RDMA_HEARTBEAT */
        uint64_t rdma_channel_wait_ns;      /* SHOAL_RDMA_CHANNEL_WAIT */
        uint64_t store_deadline_ns;         /* SHOAL_STORE_DEADLINE */
        uint64_t metrics_client_timeout_ns; /* SHOAL_METRICS_CLIENT_TIMEOUT */
        /* counts; 0 = not set */
        unsigned store_attempts;   /* SHOAL_STORE_ATTEMPTS, 1..1000 */
        unsigned s3_list_max_keys; /* SHOAL_S3_LIST_MAX_KEYS, 1..1000 */
        unsigned spread_copies;    /* SHOAL_SPREAD_COPIES, 1..2 (1: no spread reads) */
        unsigned spread_busy;      /* SHOAL_SPREAD_BUSY, 1..100000 */

        unsigned s3_copy_max_mib; /* SHOAL_S3_COPY_MAX_MIB, 1..5120 */
        /* connection growth thresholds (per second, over a grow period); 0 = the seeds' */
        unsigned iorpc_grow_qps;   /* SHOAL_IORPC_GROW_QPS */
        unsigned iorpc_grow_mibps; /* SHOAL_IORPC_GROW_MIBPS, MiB/s */
        unsigned rdma_grow_qps;    /* SHOAL_RDMA_GROW_QPS */
        unsigned rdma_grow_mibps;  /* SHOAL_RDMA_GROW_MIBPS, MiB/s */
        /* strings (pointing into the environment); NULL = not set */
        const char *group_secret; /* SHOAL_GROUP_SECRET, SHOAL_SECRET_MIN..MAX bytes */
        size_t group_secret_len;
        const char *fi_provider;           /* FI_PROVIDER */
        const char *fi_mr_cache_max_count; /* FI_MR_CACHE_MAX_COUNT (libfabric's; shoal sets 0) */
        const char *fi_verbs_use_odp;      /* FI_VERBS_USE_ODP (libfabric's) */
        const char *home;                  /* HOME: ~/.shoal for users other than root */
        const char *tmpdir;                /* TMPDIR: where a writer stages write-through */
        const char *local_secret_file;     /* SHOAL_LOCAL_SECRET_FILE: PATH or "off" */
        const char *s3_ca_file;            /* SHOAL_S3_CA_FILE, a readable regular file */
        const char *aws_endpoint_url;      /* AWS_ENDPOINT_URL */
        const char *aws_region;            /* AWS_REGION, else AWS_DEFAULT_REGION */
        const char *aws_access_key_id;     /* AWS_ACCESS_KEY_ID */
        const char *aws_secret_access_key; /* AWS_SECRET_ACCESS_KEY */
        const char *aws_session_token;     /* AWS_SESSION_TOKEN */
        const char *metrics_hosts; /* SHOAL_METRICS_HOSTS: names, checked by metrics/http.c */
};

/* The one precedence rule: the value a flag or the caller gave (0 = not given) wins over the
 * environment's (0 = not set), which wins over DFLT. */
static inline uint64_t shoal_config_pick(uint64_t given, uint64_t env, uint64_t dflt)
{
        return given ? given : env ? env : dflt;
}

/* Parses every variable of the table, reading each value with GET (getenv in production; NULL
 * or "" = not set), into ENV. Returns 0, or -EINVAL with one line in ERR naming the first bad
 * variable, its value and what was expected. */
int shoal_config_parse(struct shoal_env *env, const char *(*get)(const char *name), char *err,
                       size_t errlen);

/* Parses the process environment into the process-wide configuration (again, when called
 * again). The command line calls it once, before any thread that reads it starts. Returns 0 or
 * -EINVAL with one line in ERR; the process-wide configuration is then left as it was. */
int shoal_config_load(char *err, size_t errlen);

/* Loads the process-wide configuration unless a load already succeeded: libshoal calls it at
 * every client open, so that a bad value fails that open instead of anything later. Thread-safe.
 * Returns 0 or -EINVAL with one line in ERR; after a failure nothing is loaded, so a later call
 * with a corrected environment succeeds. */
int shoal_config_ensure(char *err, size_t errlen);

/* The process-wide configuration. Never NULL, and never ends the process: a program that loaded
 * nothing first (a unit test, a test tool) gets it loaded by the first call; if that finds a bad
 * value, the error is logged once and every variable reads as unset. The command line and the
 * library load first and report a bad value themselves, so they never get here with one. */
const struct shoal_env *shoal_config_env(void);

/* The name of entry I of the table of every variable shoal reads (documentation order), or NULL
 * past the end. */
const char *shoal_config_var_name(size_t i);

#endif
