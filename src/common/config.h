/* Environment overrides, in one place: every variable shoal reads is in one table (config.c),
 * parsed once at start-up with one error style, and documented in docs/operations.md
 * ("Environment"). A set variable with a bad value is an error naming it ("invalid NAME=VALUE:
 * expected ..."), which the command line turns into exit 2; it never quietly becomes a default.
 * An empty value counts as unset.
 *
 * Flags are parsed by src/cli/cli.c; a flag, where both exist, wins over its variable (the
 * callers decide that: a zero / NULL field here means "not set, use your default"). */
#ifndef SHOAL_COMMON_CONFIG_H
#define SHOAL_COMMON_CONFIG_H

#include <stddef.h>
#include <stdint.h>

struct shoal_env {
        /* durations in ns; 0 = not set */
        uint64_t group_heartbeat_ns;    /* SHOAL_GROUP_HEARTBEAT */
        uint64_t group_timeout_ns;      /* SHOAL_GROUP_TIMEOUT */
        uint64_t group_grace_ns;        /* SHOAL_GROUP_GRACE */
        uint64_t remote_timeout_ns;     /* SHOAL_REMOTE_TIMEOUT */
        uint64_t avoid_ns;              /* SHOAL_AVOID_DURATION */
        uint64_t iorpc_scale_period_ns; /* SHOAL_IORPC_SCALE_PERIOD */
        uint64_t rdma_retry_ns;         /* IORPC_RDMA_RETRY_DURATION */
        uint64_t rdma_heartbeat_ns;     /* SHOAL_RDMA_HEARTBEAT */
        uint64_t store_deadline_ns;     /* SHOAL_STORE_DEADLINE */
        /* counts; 0 = not set */
        unsigned store_attempts;   /* SHOAL_STORE_ATTEMPTS, 1..1000 */
        unsigned s3_list_max_keys; /* SHOAL_S3_LIST_MAX_KEYS, 1..1000 */
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
};

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
