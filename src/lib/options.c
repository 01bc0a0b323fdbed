/* Settings of a library client: the command line's flags by name, checked when set, with the
 * command line's defaults except where a library differs (no local disk cache unless asked, no
 * metrics endpoint unless asked, warnings only in the log). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/block.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "lib/lib.h"
#include "metrics/http.h"
#include "rpc/server.h"
#include "shoal/shoal.h"

#define SECRET_MIN SHOAL_SECRET_MIN
#define SECRET_MAX SHOAL_SECRET_MAX

enum kind {
        K_STR,
        K_SIZE,  /* arg: default unit; "-1" allowed when neg1 */
        K_U64,   /* arg: maximum */
        K_BOOL,  /* "1"/"0" once stored */
        K_RATIO, /* 0 .. 0.9 */
        K_GROUP, /* cache group name */
        K_ADDR,  /* HOST:PORT */
        K_LEVEL, /* log level */
        K_SECRET_FILE,
};

static const struct {
        const char *name;
        enum kind kind;
        uint64_t arg;
        bool neg1;
} defs[LOPT__COUNT] = {
        [LOPT_META] = {"meta", K_STR, 0, false},
        [LOPT_CACHE_GROUP] = {"cache-group", K_GROUP, 0, false},
        [LOPT_CACHE_DIR] = {"cache-dir", K_STR, 0, false},
        [LOPT_CACHE_SIZE] = {"cache-size", K_SIZE, SHOAL_MiB, true},
        [LOPT_FREE_SPACE_RATIO] = {"free-space-ratio", K_RATIO, 0, false},
        [LOPT_BLOCK_SIZE] = {"block-size", K_SIZE, SHOAL_KiB, false},
        [LOPT_ENDPOINT] = {"endpoint", K_STR, 0, false},
        [LOPT_USE_IORPC] = {"use-iorpc", K_BOOL, 0, false},
        [LOPT_RDMA_NETWORK] = {"rdma-network", K_STR, 0, false},
        [LOPT_RDMA_PROVIDER] = {"rdma-provider", K_STR, 0, false},
        [LOPT_BUFFER_SIZE] = {"buffer-size", K_SIZE, SHOAL_MiB, false},
        [LOPT_MAX_DOWNLOADS] = {"max-downloads", K_U64, 100000, false},
        [LOPT_PREFETCH] = {"prefetch", K_U64, 64, false},
        [LOPT_GROUP_SECRET_FILE] = {"group-secret-file", K_SECRET_FILE, 0, false},
        [LOPT_METRICS] = {"metrics", K_ADDR, 0, false},
        [LOPT_LOG_LEVEL] = {"log-level", K_LEVEL, 0, false},
        [LOPT_LOG_FILE] = {"log-file", K_STR, 0, false},
};

static _Thread_local char errbuf[1024];

int lib_fail(int rc, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
        va_end(ap);
        return rc;
}

SHOAL_API const char *shoal_errmsg(void)
{
        return errbuf;
}

SHOAL_API struct shoal_options *shoal_options_new(void)
{
        struct shoal_options *o = calloc(1, sizeof(*o));
        if (!o)
                lib_fail(-ENOMEM, "out of memory");
        return o;
}

static void secret_clear(struct shoal_options *o)
{
        if (o->secret) {
                explicit_bzero(o->secret, o->secret_len);
                free(o->secret);
        }
        o->secret = NULL;
        o->secret_len = 0;
}

SHOAL_API void shoal_options_free(struct shoal_options *o)
{
        if (!o)
                return;
        for (int i = 0; i < LOPT__COUNT; i++)
                free(o->val[i]);
        secret_clear(o);
        free(o);
}

static int secret_store(struct shoal_options *o, const void *secret, size_t len)
{
        unsigned char *copy = malloc(len);
        if (!copy)
                return lib_fail(-ENOMEM, "out of memory");
        memcpy(copy, secret, len);
        secret_clear(o);
        o->secret = copy;
        o->secret_len = len;
        return 0;
}

SHOAL_API int shoal_options_set_secret(struct shoal_options *o, const void *secret, size_t len)
{
        if (!o || (!secret && len))
                return lib_fail(-EINVAL, "shoal_options_set_secret: no options or no secret");
        if (!secret) {
                secret_clear(o);
                return 0;
        }
        if (len < SECRET_MIN || len > SECRET_MAX)
                return lib_fail(-EINVAL, "the group secret must be %d to %d bytes, not %zu",
                                SECRET_MIN, SECRET_MAX, len);
        return secret_store(o, secret, len);
}

/* Reads the secret file as the command line does: every byte counts, except one line ending at
 * the very end ("\n" or "\r\n"). */
static int secret_file(struct shoal_options *o, const char *path)
{
        unsigned char buf[SECRET_MAX + 1];
        FILE *f = fopen(path, "rbe");
        if (!f)
                return lib_fail(-EINVAL, "cannot read group-secret-file %s: %s", path,
                                strerror(errno));
        size_t n = fread(buf, 1, sizeof(buf), f);
        bool bad = ferror(f);
        fclose(f);
        if (bad)
                return lib_fail(-EINVAL, "cannot read group-secret-file %s", path);
        if (n && n <= SECRET_MAX && buf[n - 1] == '\n') {
                n--;
                if (n && buf[n - 1] == '\r')
                        n--;
        }
        int rc = 0;
        if (n < SECRET_MIN || n > SECRET_MAX)
                rc = lib_fail(-EINVAL, "group-secret-file %s: the secret must be %d to %d bytes",
                              path, SECRET_MIN, SECRET_MAX);
        else
                rc = secret_store(o, buf, n);
        explicit_bzero(buf, sizeof(buf));
        return rc;
}

static int parse_bool(const char *v, bool *out)
{
        static const char *const yes[] = {"1", "true", "yes", "on"};
        static const char *const no[] = {"0", "false", "no", "off"};
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(yes); i++) {
                if (!strcasecmp(v, yes[i])) {
                        *out = true;
                        return 0;
                }
                if (!strcasecmp(v, no[i])) {
                        *out = false;
                        return 0;
                }
        }
        return -EINVAL;
}

static bool group_name_valid(const char *g)
{
        size_t n = strlen(g);
        return n && n <= 64 &&
               strspn(g, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == n;
}

/* Checks VALUE for setting I; on success *STORE is what to keep ("1"/"0" for switches). */
static int check(int i, const char *value, const char **store, struct shoal_options *o)
{
        const char *name = defs[i].name;
        int64_t sv;
        uint64_t uv;
        bool b;
        *store = value;
        switch (defs[i].kind) {
        case K_STR:
                if (!*value)
                        return lib_fail(-EINVAL, "invalid %s: empty", name);
                return 0;
        case K_SIZE:
                if (shoal_parse_size(value, defs[i].arg, defs[i].neg1, &sv))
                        return lib_fail(-EINVAL,
                                        "invalid %s %s: expected a size like 100, 4M or 1G%s", name,
                                        value, defs[i].neg1 ? " (or -1)" : "");
                if (i == LOPT_BLOCK_SIZE &&
                    (sv < SHOAL_BLOCK_SIZE_MIN || sv > SHOAL_BLOCK_SIZE_MAX || (sv & (sv - 1))))
                        return lib_fail(-EINVAL,
                                        "invalid block-size %s: must be a power of two from 64K "
                                        "to 64M",
                                        value);
                return 0;
        case K_U64:
                if (shoal_parse_u64(value, defs[i].arg, &uv))
                        return lib_fail(-EINVAL,
                                        "invalid %s %s: expected a whole number from 0 to %llu",
                                        name, value, (unsigned long long)defs[i].arg);
                return 0;
        case K_BOOL:
                if (parse_bool(value, &b))
                        return lib_fail(-EINVAL,
                                        "invalid %s %s: expected 1, true, yes, 0, false or no",
                                        name, value);
                *store = b ? "1" : "0";
                return 0;
        case K_RATIO: {
                char *end;
                double r = strtod(value, &end);
                if (*end || end == value || r < 0 || r > 0.9)
                        return lib_fail(-EINVAL, "invalid %s %s: expected a number from 0 to 0.9",
                                        name, value);
                return 0;
        }
        case K_GROUP:
                if (!group_name_valid(value))
                        return lib_fail(-EINVAL,
                                        "invalid cache-group %s: use 1-64 letters, digits, '-', "
                                        "'_' or '.'",
                                        value);
                return 0;
        case K_ADDR: {
                char host[256];
                uint16_t port;
                if (shoal_metrics_addr_parse(value, host, sizeof(host), &port))
                        return lib_fail(-EINVAL,
                                        "invalid %s %s: expected HOST:PORT (e.g. 127.0.0.1:9567)",
                                        name, value);
                return 0;
        }
        case K_LEVEL:
                if (shoal_log_parse_level(value) < 0)
                        return lib_fail(-EINVAL,
                                        "invalid log-level %s: expected error, warn, info, debug "
                                        "or trace",
                                        value);
                return 0;
        case K_SECRET_FILE:
                return secret_file(o, value);
        }
        return lib_fail(-EINVAL, "invalid %s", name);
}

SHOAL_API int shoal_options_set(struct shoal_options *o, const char *name, const char *value)
{
        if (!o || !name)
                return lib_fail(-EINVAL, "shoal_options_set: no options or no name");
        int i;
        for (i = 0; i < LOPT__COUNT; i++)
                if (!strcmp(defs[i].name, name))
                        break;
        if (i == LOPT__COUNT)
                return lib_fail(-EINVAL, "unknown setting %s", name);
        const char *store = NULL;
        if (value) {
                int rc = check(i, value, &store, o);
                if (rc)
                        return rc;
        } else if (i == LOPT_GROUP_SECRET_FILE) {
                secret_clear(o);
        }
        char *copy = store ? strdup(store) : NULL;
        if (store && !copy)
                return lib_fail(-ENOMEM, "out of memory");
        free(o->val[i]);
        o->val[i] = copy;
        return 0;
}

static const char *val(const struct shoal_options *o, int i)
{
        return o ? o->val[i] : NULL;
}

static int64_t size_val(const struct shoal_options *o, int i, int64_t dflt)
{
        int64_t v;
        const char *s = val(o, i);
        if (!s || shoal_parse_size(s, defs[i].arg, defs[i].neg1, &v))
                return dflt;
        return v;
}

static uint64_t u64_val(const struct shoal_options *o, int i, uint64_t dflt)
{
        uint64_t v;
        const char *s = val(o, i);
        if (!s || shoal_parse_u64(s, defs[i].arg, &v))
                return dflt;
        return v;
}

/* The command line's default folders: system-wide for root, else under $HOME. */
static void default_dir(const char *system, const char *user_suffix, char *buf, size_t buflen)
{
        if (geteuid() == 0) {
                shoal_strlcpy(buf, system, buflen);
                return;
        }
        const char *home = getenv("HOME");
        snprintf(buf, buflen, "%s/%s", home && *home ? home : "/tmp", user_suffix);
}

/* Keeps a copy of S in CFG and returns it (NULL stays NULL). */
static const char *own(struct lib_config *cfg, int slot, const char *s, int *rc)
{
        if (!s)
                return NULL;
        cfg->strs[slot] = strdup(s);
        if (!cfg->strs[slot])
                *rc = lib_fail(-ENOMEM, "out of memory");
        return cfg->strs[slot];
}

int lib_config_build(struct lib_config *cfg, const char *storage, const struct shoal_options *o)
{
        memset(cfg, 0, sizeof(*cfg));
        /* The environment is read by the first open; a bad variable fails this open, and only
         * it: the host process carries on. */
        char err[1024];
        int erc = shoal_config_ensure(err, sizeof(err));
        if (erc)
                return lib_fail(erc, "%s", err);
        if (!storage || !*storage)
                return lib_fail(-EINVAL, "missing storage (e.g. file:///data or s3://bucket)");
        if (val(o, LOPT_RDMA_PROVIDER) && !val(o, LOPT_RDMA_NETWORK))
                return lib_fail(-EINVAL, "rdma-provider needs rdma-network IF1[:IF2...]");
        struct shoal_node_config *n = &cfg->node;
        int rc = 0;
        char meta[1100], dir[1024];
        int slot = 0;
        n->storage = own(cfg, slot++, storage, &rc);
        n->endpoint = own(cfg, slot++, val(o, LOPT_ENDPOINT), &rc);
        n->block_size = (uint32_t)size_val(o, LOPT_BLOCK_SIZE, SHOAL_BLOCK_SIZE_DEFAULT);
        n->cache_group = own(cfg, slot++, val(o, LOPT_CACHE_GROUP), &rc);
        if (val(o, LOPT_META)) {
                shoal_strlcpy(meta, val(o, LOPT_META), sizeof(meta));
        } else {
                default_dir("/var/lib/shoal", ".shoal", dir, sizeof(dir));
                snprintf(meta, sizeof(meta), "sqlite3://%s/meta.db", dir);
        }
        n->meta_url = own(cfg, slot++, meta, &rc);
        if (val(o, LOPT_CACHE_DIR))
                shoal_strlcpy(dir, val(o, LOPT_CACHE_DIR), sizeof(dir));
        else
                default_dir("/var/cache/shoal", ".shoal/cache", dir, sizeof(dir));
        n->cache_dir = own(cfg, slot++, dir, &rc);
        /* The group is this process's cache; a disk cache per process (and per forked worker)
         * is opt-in. */
        n->cache_size = size_val(o, LOPT_CACHE_SIZE, 0);
        n->free_space_ratio = 0.1;
        if (val(o, LOPT_FREE_SPACE_RATIO))
                n->free_space_ratio = strtod(val(o, LOPT_FREE_SPACE_RATIO), NULL);
        n->no_sharing = true;
        n->serve = false;
        n->group_weight = 0;
        n->use_iorpc = val(o, LOPT_USE_IORPC) && !strcmp(val(o, LOPT_USE_IORPC), "1");
        n->iorpc_mode = SHOAL_IORPC_DIO;
        n->rdma_network = own(cfg, slot++, val(o, LOPT_RDMA_NETWORK), &rc);
        n->rdma_provider = own(cfg, slot++, val(o, LOPT_RDMA_PROVIDER), &rc);
        n->buffer_size = (uint64_t)size_val(o, LOPT_BUFFER_SIZE, 300 * (int64_t)SHOAL_MiB);
        n->max_downloads = (unsigned)u64_val(o, LOPT_MAX_DOWNLOADS, 200);
        n->prefetch = (unsigned)u64_val(o, LOPT_PREFETCH, 2);
        n->metrics_addr = own(cfg, slot++, val(o, LOPT_METRICS), &rc);
        if (rc)
                goto out_free;

        const void *secret = o && o->secret ? o->secret : NULL;
        size_t secret_len = secret ? o->secret_len : 0;
        const char *env = getenv("SHOAL_GROUP_SECRET");
        if (!secret && env && *env) {
                secret_len = strlen(env);
                if (secret_len < SECRET_MIN || secret_len > SECRET_MAX) {
                        rc = lib_fail(-EINVAL,
                                      "SHOAL_GROUP_SECRET must be %d to %d bytes (it has %zu)",
                                      SECRET_MIN, SECRET_MAX, secret_len);
                        goto out_free;
                }
                secret = env;
        }
        if (secret) {
                cfg->secret = malloc(secret_len);
                if (!cfg->secret) {
                        rc = lib_fail(-ENOMEM, "out of memory");
                        goto out_free;
                }
                memcpy(cfg->secret, secret, secret_len);
                cfg->secret_len = secret_len;
        }
        n->group_secret = (struct shoal_secret){.bytes = cfg->secret, .len = cfg->secret_len};

        cfg->log_level = SHOAL_LOG_WARN;
        if (val(o, LOPT_LOG_LEVEL))
                cfg->log_level = shoal_log_parse_level(val(o, LOPT_LOG_LEVEL));
        if (val(o, LOPT_LOG_FILE)) {
                cfg->log_file = strdup(val(o, LOPT_LOG_FILE));
                if (!cfg->log_file) {
                        rc = lib_fail(-ENOMEM, "out of memory");
                        goto out_free;
                }
        }
        return 0;

out_free:
        lib_config_free(cfg);
        return rc;
}

void lib_config_free(struct lib_config *cfg)
{
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(cfg->strs); i++)
                free(cfg->strs[i]);
        if (cfg->secret) {
                explicit_bzero(cfg->secret, cfg->secret_len);
                free(cfg->secret);
        }
        free(cfg->log_file);
        memset(cfg, 0, sizeof(*cfg));
}
