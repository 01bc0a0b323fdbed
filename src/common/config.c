#include "common/config.h"

#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/secret.h"
#include "common/util.h"

enum kind {
        K_DURATION, /* a positive duration: 30s, 500ms, 5m, 1h */
        K_COUNT,    /* a whole number in [1, max] */
        K_SECRET,   /* at least 16 bytes */
        K_FILE,     /* a readable regular file */
        K_REGION,   /* 1-63 bytes without ':', '/' or spaces (it goes into the SigV4 scope) */
        K_STRING,   /* anything non-empty */
        K_RAW,      /* libfabric's own: as libfabric reads it, an empty value too (a count of 0) */
};

struct var {
        const char *name;
        enum kind kind;
        size_t off;   /* of the field in struct shoal_env */
        unsigned max; /* K_COUNT */
};

#define F(field) offsetof(struct shoal_env, field)

/* Documentation order: docs/operations.md has one row per entry (a unit test checks it), with
 * what each does and its default. */
static const struct var vars[] = {
        {"SHOAL_GROUP_SECRET", K_SECRET, F(group_secret), 0},
        {"SHOAL_LOCAL_SECRET_FILE", K_STRING, F(local_secret_file), 0},
        {"SHOAL_GROUP_HEARTBEAT", K_DURATION, F(group_heartbeat_ns), 0},
        {"SHOAL_GROUP_TIMEOUT", K_DURATION, F(group_timeout_ns), 0},
        {"SHOAL_GROUP_CLIENT_TTL", K_DURATION, F(group_client_ttl_ns), 0},
        {"SHOAL_GROUP_GRACE", K_DURATION, F(group_grace_ns), 0},
        {"SHOAL_REMOTE_TIMEOUT", K_DURATION, F(remote_timeout_ns), 0},
        {"SHOAL_AVOID_DURATION", K_DURATION, F(avoid_ns), 0},
        {"SHOAL_SPREAD_COPIES", K_COUNT, F(spread_copies), 2},
        {"SHOAL_SPREAD_BUSY", K_COUNT, F(spread_busy), 100000},
        {"SHOAL_IORPC_SCALE_PERIOD", K_DURATION, F(iorpc_scale_period_ns), 0},
        {"IORPC_RDMA_RETRY_DURATION", K_DURATION, F(rdma_retry_ns), 0},
        {"SHOAL_RDMA_HEARTBEAT", K_DURATION, F(rdma_heartbeat_ns), 0},
        {"SHOAL_RDMA_CHANNEL_WAIT", K_DURATION, F(rdma_channel_wait_ns), 0},
        {"SHOAL_IORPC_GROW_QPS", K_COUNT, F(iorpc_grow_qps), 100000000},
        {"SHOAL_IORPC_GROW_MIBPS", K_COUNT, F(iorpc_grow_mibps), 1048576},
        {"SHOAL_RDMA_GROW_QPS", K_COUNT, F(rdma_grow_qps), 100000000},
        {"SHOAL_RDMA_GROW_MIBPS", K_COUNT, F(rdma_grow_mibps), 1048576},
        {"FI_PROVIDER", K_STRING, F(fi_provider), 0},
        {"FI_MR_CACHE_MAX_COUNT", K_RAW, F(fi_mr_cache_max_count), 0},
        {"FI_VERBS_USE_ODP", K_STRING, F(fi_verbs_use_odp), 0},
        {"SHOAL_STORE_DEADLINE", K_DURATION, F(store_deadline_ns), 0},
        {"SHOAL_STORE_ATTEMPTS", K_COUNT, F(store_attempts), 1000},
        {"SHOAL_S3_LIST_MAX_KEYS", K_COUNT, F(s3_list_max_keys), 1000},
        {"SHOAL_S3_COPY_MAX_MIB", K_COUNT, F(s3_copy_max_mib), 5120},
        {"SHOAL_S3_CA_FILE", K_FILE, F(s3_ca_file), 0},
        {"AWS_ENDPOINT_URL", K_STRING, F(aws_endpoint_url), 0},
        {"AWS_REGION", K_REGION, F(aws_region), 0},
        {"AWS_DEFAULT_REGION", K_REGION, F(aws_region), 0},
        {"AWS_ACCESS_KEY_ID", K_STRING, F(aws_access_key_id), 0},
        {"AWS_SECRET_ACCESS_KEY", K_STRING, F(aws_secret_access_key), 0},
        {"AWS_SESSION_TOKEN", K_STRING, F(aws_session_token), 0},
        {"SHOAL_METRICS_HOSTS", K_STRING, F(metrics_hosts), 0},
        {"SHOAL_METRICS_CLIENT_TIMEOUT", K_DURATION, F(metrics_client_timeout_ns), 0},
        {"HOME", K_STRING, F(home), 0},
        {"TMPDIR", K_STRING, F(tmpdir), 0},
};

/* env_cur is written by shoal_config_load before threads start (the command line), or under
 * env_mu before env_loaded is published (shoal_config_ensure, the lazy load). */
static struct shoal_env env_cur;
static const struct shoal_env env_unset;
static bool env_loaded; /* atomic */
static bool env_failed; /* atomic: the lazy load found a bad value (logged once) */
static pthread_mutex_t env_mu = PTHREAD_MUTEX_INITIALIZER;

static int bad(const struct var *v, const char *val, char *err, size_t errlen, const char *want)
{
        snprintf(err, errlen, "invalid %s=%.64s%s: expected %s", v->name, val,
                 strlen(val) > 64 ? "..." : "", want);
        return -EINVAL;
}

static int parse_one(const struct var *v, const char *val, struct shoal_env *env, char *err,
                     size_t errlen)
{
        char *field = (char *)env + v->off;
        switch (v->kind) {
        case K_DURATION: {
                uint64_t ns;
                if (shoal_parse_duration(val, &ns) || !ns)
                        return bad(v, val, err, errlen,
                                   "a positive duration like 500ms, 30s, 5m or 1h");
                memcpy(field, &ns, sizeof(ns));
                return 0;
        }
        case K_COUNT: {
                uint64_t n;
                if (shoal_parse_u64(val, v->max, &n) || !n) {
                        char want[64];
                        snprintf(want, sizeof(want), "a whole number from 1 to %u", v->max);
                        return bad(v, val, err, errlen, want);
                }
                unsigned u = (unsigned)n;
                memcpy(field, &u, sizeof(u));
                return 0;
        }
        case K_SECRET:
                if (strlen(val) < SHOAL_SECRET_MIN || strlen(val) > SHOAL_SECRET_MAX) {
                        /* never echo a secret, not even a short one */
                        snprintf(err, errlen,
                                 "invalid %s: the secret must be %d to %d bytes (it has %zu)",
                                 v->name, SHOAL_SECRET_MIN, SHOAL_SECRET_MAX, strlen(val));
                        return -EINVAL;
                }
                env->group_secret_len = strlen(val);
                break;
        case K_FILE: {
                struct stat sb;
                if (stat(val, &sb) || !S_ISREG(sb.st_mode) || access(val, R_OK))
                        return bad(v, val, err, errlen, "a readable file");
                break;
        }
        case K_REGION:
                if (strlen(val) > 63 || strpbrk(val, ":/ \t"))
                        return bad(v, val, err, errlen,
                                   "a region name like eu-west-1 (no ':', '/' or spaces)");
                /* AWS_REGION wins over AWS_DEFAULT_REGION, which comes after it in the table */
                if (*(const char **)field)
                        return 0;
                break;
        case K_STRING:
        case K_RAW:
                break;
        }
        memcpy(field, &val, sizeof(val));
        return 0;
}

int shoal_config_parse(struct shoal_env *env, const char *(*get)(const char *name), char *err,
                       size_t errlen)
{
        memset(env, 0, sizeof(*env));
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(vars); i++) {
                const char *val = get(vars[i].name);
                if (!val || (!*val && vars[i].kind != K_RAW))
                        continue;
                int rc = parse_one(&vars[i], val, env, err, errlen);
                if (rc)
                        return rc;
        }
        return 0;
}

static const char *get_env(const char *name)
{
        return getenv(name);
}

int shoal_config_load(char *err, size_t errlen)
{
        struct shoal_env e;
        int rc = shoal_config_parse(&e, get_env, err, errlen);
        if (rc)
                return rc;
        env_cur = e;
        __atomic_store_n(&env_loaded, true, __ATOMIC_RELEASE);
        return 0;
}

int shoal_config_ensure(char *err, size_t errlen)
{
        if (__atomic_load_n(&env_loaded, __ATOMIC_ACQUIRE))
                return 0;
        pthread_mutex_lock(&env_mu);
        int rc = 0;
        if (!env_loaded)
                rc = shoal_config_load(err, errlen);
        pthread_mutex_unlock(&env_mu);
        return rc;
}

const struct shoal_env *shoal_config_env(void)
{
        if (__atomic_load_n(&env_loaded, __ATOMIC_ACQUIRE))
                return &env_cur;
        if (__atomic_load_n(&env_failed, __ATOMIC_ACQUIRE))
                return &env_unset;
        char err[256];
        pthread_mutex_lock(&env_mu);
        bool ok = env_loaded || !shoal_config_load(err, sizeof(err));
        if (!ok && !env_failed) {
                __atomic_store_n(&env_failed, true, __ATOMIC_RELEASE);
                log_error("config", "%s; every environment override is ignored", err);
        }
        pthread_mutex_unlock(&env_mu);
        return ok ? &env_cur : &env_unset;
}

const char *shoal_config_var_name(size_t i)
{
        return i < SHOAL_ARRAY_SIZE(vars) ? vars[i].name : NULL;
}
