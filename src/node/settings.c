#include "node/settings.h"

#include <arpa/inet.h>
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
#include "group/group.h"
#include "metrics/http.h"
#include "server/server.h"
#include "store/store.h"

#define GROUP_NAME_CHARS "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_."
#define GROUP_NAME_MAX   64

enum kind {
        K_STRING,      /* anything non-empty */
        K_SIZE,        /* a size; a plain number counts in UNIT; "-1" when NEG1 */
        K_BLOCK_SIZE,  /* a size in KiB, a power of two from 64K to 64M */
        K_PART_SIZE,   /* a size in MiB, S3's part limits */
        K_COUNT,       /* a whole number from 0 to MAX */
        K_SWITCH,      /* 1/true/yes/on or 0/false/no/off */
        K_RATIO,       /* 0 to 0.9 */
        K_GROUP,       /* a cache group name */
        K_IPV4,        /* an IPv4 address */
        K_ADDR,        /* HOST:PORT */
        K_LEVEL,       /* a log level */
        K_IORPC_MODE,  /* checked at build: the seed falls back to dio with a warning */
        K_SECRET_FILE, /* read when set */
        K_META,        /* a meta URL the registry can open (checked, not opened) */
        K_HTTP_URL,    /* http:// or https:// and a host */
};

struct def {
        const char *name;
        enum kind kind;
        uint64_t unit; /* K_SIZE */
        uint64_t max;  /* K_COUNT */
        bool neg1;     /* K_SIZE */
        bool library;  /* libshoal takes it (shoal_setting_for_library) */
};

static const struct def defs[SHOAL_SET__COUNT] = {
        [SHOAL_SET_BLOCK_SIZE] = {.name = "block-size", .kind = K_BLOCK_SIZE, .library = true},
        [SHOAL_SET_CACHE_GROUP] = {.name = "cache-group", .kind = K_GROUP, .library = true},
        [SHOAL_SET_META] = {.name = "meta", .kind = K_META, .library = true},
        [SHOAL_SET_CACHE_DIR] = {.name = "cache-dir", .kind = K_STRING, .library = true},
        [SHOAL_SET_CACHE_SIZE] = {.name = "cache-size",
                                  .kind = K_SIZE,
                                  .unit = SHOAL_MiB,
                                  .neg1 = true,
                                  .library = true},
        [SHOAL_SET_FREE_SPACE_RATIO] = {.name = "free-space-ratio",
                                        .kind = K_RATIO,
                                        .library = true},
        [SHOAL_SET_NO_SHARING] = {.name = "no-sharing", .kind = K_SWITCH},
        [SHOAL_SET_GROUP_IP] = {.name = "group-ip", .kind = K_IPV4},
        [SHOAL_SET_GROUP_NETWORK] = {.name = "group-network", .kind = K_STRING},
        [SHOAL_SET_GROUP_PORT] = {.name = "group-port", .kind = K_COUNT, .max = 65535},
        [SHOAL_SET_GROUP_WEIGHT] = {.name = "group-weight", .kind = K_COUNT, .max = 1000000},
        [SHOAL_SET_GROUP_SECRET_FILE] = {.name = "group-secret-file",
                                         .kind = K_SECRET_FILE,
                                         .library = true},
        [SHOAL_SET_USE_IORPC] = {.name = "use-iorpc", .kind = K_SWITCH, .library = true},
        [SHOAL_SET_IORPC_MODE] = {.name = "iorpc-mode", .kind = K_IORPC_MODE},
        [SHOAL_SET_CACHE_TRY_DIO] = {.name = "cache-try-dio", .kind = K_SWITCH},
        [SHOAL_SET_RDMA_NETWORK] = {.name = "rdma-network", .kind = K_STRING, .library = true},
        [SHOAL_SET_RDMA_PROVIDER] = {.name = "rdma-provider", .kind = K_STRING, .library = true},
        [SHOAL_SET_RDMA_PREAUTH_PER_SOURCE] = {.name = "rdma-preauth-per-source",
                                               .kind = K_COUNT,
                                               .max = 64},
        [SHOAL_SET_BUFFER_SIZE] = {.name = "buffer-size",
                                   .kind = K_SIZE,
                                   .unit = SHOAL_MiB,
                                   .library = true},
        [SHOAL_SET_MAX_DOWNLOADS] = {.name = "max-downloads",
                                     .kind = K_COUNT,
                                     .max = 100000,
                                     .library = true},
        [SHOAL_SET_PREFETCH] = {.name = "prefetch", .kind = K_COUNT, .max = 64, .library = true},
        [SHOAL_SET_METRICS] = {.name = "metrics", .kind = K_ADDR, .library = true},
        [SHOAL_SET_ENDPOINT] = {.name = "endpoint", .kind = K_HTTP_URL, .library = true},
        [SHOAL_SET_UPLOAD_PART_SIZE] = {.name = "upload-part-size", .kind = K_PART_SIZE},
        [SHOAL_SET_LOG_LEVEL] = {.name = "log-level", .kind = K_LEVEL, .library = true},
        [SHOAL_SET_LOG_FILE] = {.name = "log-file", .kind = K_STRING, .library = true},
        [SHOAL_SET_STRICT_GROUP] = {.name = "strict-group", .kind = K_SWITCH, .library = true},
        [SHOAL_SET_LOCAL_SECRET_FILE] = {.name = "local-secret-file",
                                         .kind = K_STRING,
                                         .library = true},
};

/* The defaults, and the ones that differ by who the configuration is for. */
#define CACHE_SIZE_DEFAULT    (102400 * (int64_t)SHOAL_MiB)
#define BUFFER_SIZE_DEFAULT   (300 * (int64_t)SHOAL_MiB)
#define FREE_SPACE_DEFAULT    0.1
#define GROUP_WEIGHT_DEFAULT  100
#define MAX_DOWNLOADS_DEFAULT 200
#define PREFETCH_DEFAULT      2

static const struct profile {
        int64_t cache_size;
        int log_level;
        bool serve;    /* starts the server side; with it the metrics endpoint listens by default */
        bool consumer; /* reads from the group, never serves it, whatever the settings say */
} profiles[] = {
        /* A member shares its cache and says what it does; its metrics endpoint listens on
         * 127.0.0.1:9567 or the next free port (node.h) for Prometheus to find. */
        [SHOAL_SETTINGS_DAEMON] = {CACHE_SIZE_DEFAULT, SHOAL_LOG_INFO, true, false},
        /* A tool's output is data: warnings only. It serves nothing, so it has no metrics
         * endpoint unless --metrics asks for one. */
        [SHOAL_SETTINGS_TOOL] = {CACHE_SIZE_DEFAULT, SHOAL_LOG_WARN, false, false},
        /* A library client lives in someone else's process. The group is its cache: a disk cache
         * per process (and per forked DataLoader worker, each indexing the same folders with its
         * own accounting) is opt-in, so cache-size is 0. It is a consumer, so no server and no
         * metrics endpoint unless "metrics" asks for one; and the application's stderr gets
         * warnings only. */
        [SHOAL_SETTINGS_LIBRARY] = {0, SHOAL_LOG_WARN, false, true},
};

static const char *prefix(const struct shoal_settings *s)
{
        return s->who == SHOAL_SETTINGS_LIBRARY ? "" : "--";
}

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
        __attribute__((format(printf, 4, 5)));

static int fail(char *err, size_t errlen, int rc, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
        return rc;
}

void shoal_settings_init(struct shoal_settings *s, enum shoal_settings_for who)
{
        memset(s, 0, sizeof(*s));
        s->who = who;
}

static void secret_wipe(struct shoal_settings *s)
{
        explicit_bzero(s->secret, sizeof(s->secret));
        s->secret_len = 0;
        s->secret_given = false;
}

void shoal_settings_clear(struct shoal_settings *s)
{
        secret_wipe(s);
}

enum shoal_setting shoal_setting_find(const char *name)
{
        for (int i = SHOAL_SET_NONE + 1; name && i < SHOAL_SET__COUNT; i++)
                if (!strcmp(defs[i].name, name))
                        return (enum shoal_setting)i;
        return SHOAL_SET_NONE;
}

const char *shoal_setting_name(enum shoal_setting id)
{
        return id > SHOAL_SET_NONE && id < SHOAL_SET__COUNT ? defs[id].name : "";
}

bool shoal_setting_is_switch(enum shoal_setting id)
{
        return id > SHOAL_SET_NONE && id < SHOAL_SET__COUNT && defs[id].kind == K_SWITCH;
}

bool shoal_setting_for_library(enum shoal_setting id)
{
        return id > SHOAL_SET_NONE && id < SHOAL_SET__COUNT && defs[id].library;
}

static int parse_switch(const char *v, bool *out)
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

static int parse_ratio(const char *v, double *out)
{
        char *end;
        double r = strtod(v, &end);
        if (*end || end == v || !(r >= 0 && r <= 0.9))
                return -EINVAL;
        *out = r;
        return 0;
}

static bool group_name_valid(const char *g)
{
        size_t n = strlen(g);
        return n && n <= GROUP_NAME_MAX && strspn(g, GROUP_NAME_CHARS) == n;
}

/* http:// or https://, then a host: no spaces, query or fragment (the store adds its paths). */
static bool http_url_valid(const char *v)
{
        const char *host = !strncmp(v, "http://", 7)    ? v + 7
                           : !strncmp(v, "https://", 8) ? v + 8
                                                        : NULL;
        return host && *host && *host != '/' && *host != ':' && !strpbrk(v, " \t?#");
}

/* Reads the group secret [S1, S3] from PATH: every byte counts, NUL included; one line ending at
 * the very end of the file ("\n" or "\r\n", as editors and `echo` leave it) is not part of it,
 * so a file and SHOAL_GROUP_SECRET holding the same text agree. */
static int read_secret_file(struct shoal_settings *s, const char *path, char *err, size_t errlen)
{
        const char *p = prefix(s);
        uint8_t buf[SHOAL_SECRET_MAX + 1];
        FILE *f = fopen(path, "rbe");
        if (!f)
                return fail(err, errlen, -EINVAL, "cannot read %sgroup-secret-file %s: %s", p, path,
                            strerror(errno));
        size_t n = fread(buf, 1, sizeof(buf), f);
        bool bad = ferror(f);
        fclose(f);
        int rc = 0;
        if (bad) {
                rc = fail(err, errlen, -EINVAL, "cannot read %sgroup-secret-file %s", p, path);
                goto out_wipe;
        }
        if (n > SHOAL_SECRET_MAX) {
                rc = fail(err, errlen, -EINVAL,
                          "%sgroup-secret-file %s: the secret must be at most %d bytes", p, path,
                          SHOAL_SECRET_MAX);
                goto out_wipe;
        }
        if (n && buf[n - 1] == '\n') {
                n--;
                if (n && buf[n - 1] == '\r')
                        n--;
        }
        if (n < SHOAL_SECRET_MIN) {
                rc = fail(err, errlen, -EINVAL,
                          "%sgroup-secret-file %s: the secret must be at least %d bytes (it has "
                          "%zu)",
                          p, path, SHOAL_SECRET_MIN, n);
                goto out_wipe;
        }
        secret_wipe(s);
        memcpy(s->secret, buf, n);
        s->secret_len = n;
        s->secret_given = true;
out_wipe:
        explicit_bzero(buf, sizeof(buf));
        return rc;
}

/* What is wrong with V as a size of D's kind (a size, a block size, a part size), NULL when
 * nothing; WANT holds the text when it is built. */
static const char *size_problem(const struct def *d, const char *v, char *want, size_t wantlen)
{
        int64_t sv;
        switch (d->kind) {
        case K_SIZE:
                if (!shoal_parse_size(v, d->unit, d->neg1, &sv))
                        return NULL;
                snprintf(want, wantlen, "expected a size like 100, 4M or 1G%s",
                         d->neg1 ? " (or -1)" : "");
                return want;
        case K_BLOCK_SIZE:
                if (shoal_parse_size(v, SHOAL_KiB, false, &sv))
                        return "expected a size like 100, 4M or 1G";
                if (sv < SHOAL_BLOCK_SIZE_MIN || sv > SHOAL_BLOCK_SIZE_MAX || (sv & (sv - 1)))
                        return "must be a power of two from 64K to 64M";
                return NULL;
        default: /* K_PART_SIZE */
                if (shoal_parse_size(v, SHOAL_MiB, false, &sv) ||
                    (uint64_t)sv < SHOAL_STORE_PART_SIZE_MIN ||
                    (uint64_t)sv > SHOAL_STORE_PART_SIZE_MAX)
                        return "expected 5M to 5G (S3's limits on a part)";
                return NULL;
        }
}

/* What is wrong with V as a value of D's kind, NULL when nothing (the secret file and the meta
 * URL have their own checks); WANT holds the text when it is built. */
static const char *value_problem(const struct def *d, const char *v, char *want, size_t wantlen)
{
        uint64_t uv;
        bool b;
        double r;
        struct in_addr a;
        char host[256];
        uint16_t port;
        switch (d->kind) {
        case K_SIZE:
        case K_BLOCK_SIZE:
        case K_PART_SIZE:
                return size_problem(d, v, want, wantlen);
        case K_COUNT:
                if (!shoal_parse_u64(v, d->max, &uv))
                        return NULL;
                snprintf(want, wantlen, "expected a whole number from 0 to %llu",
                         (unsigned long long)d->max);
                return want;
        case K_SWITCH:
                return parse_switch(v, &b) ? "expected 1, true, yes, 0, false or no" : NULL;
        case K_RATIO:
                return parse_ratio(v, &r) ? "expected a number from 0 to 0.9" : NULL;
        case K_GROUP:
                if (group_name_valid(v))
                        return NULL;
                snprintf(want, wantlen, "use 1-%d letters, digits, '-', '_' or '.'",
                         GROUP_NAME_MAX);
                return want;
        case K_IPV4:
                return inet_pton(AF_INET, v, &a) != 1 ? "expected an IPv4 address" : NULL;
        case K_ADDR:
                return shoal_metrics_addr_parse(v, host, sizeof(host), &port)
                               ? "expected HOST:PORT (e.g. 127.0.0.1:9567)"
                               : NULL;
        case K_LEVEL:
                return shoal_log_parse_level(v) < 0 ? "expected error, warn, info, debug or trace"
                                                    : NULL;
        case K_HTTP_URL:
                return http_url_valid(v) ? NULL
                                         : "expected http://HOST[:PORT] or https://HOST[:PORT]";
        case K_STRING:
        case K_IORPC_MODE:
        case K_SECRET_FILE:
        case K_META:
                return NULL;
        }
        return NULL;
}

/* A meta URL the registry could open; a redis password is not repeated back (the line may
 * reach a log). */
static int check_meta(const char *p, const struct def *d, const char *v, char *err, size_t errlen)
{
        char why[256];
        if (!shoal_registry_url_check(v, why, sizeof(why)))
                return 0;
        const char *at = strrchr(v, '@');
        const char *colon = strstr(v, "://");
        if (at && colon && colon < at)
                return fail(err, errlen, -EINVAL, "invalid %s%s %.*s://...@%s: %s", p, d->name,
                            (int)(colon - v), v, at + 1, why);
        return fail(err, errlen, -EINVAL, "invalid %s%s %s: %s", p, d->name, v, why);
}

/* Checks VALUE for setting ID; the message names the setting as the front end spells it. */
static int check(struct shoal_settings *s, enum shoal_setting id, const char *v, char *err,
                 size_t errlen)
{
        const struct def *d = &defs[id];
        const char *p = prefix(s);
        if (!*v)
                return fail(err, errlen, -EINVAL, "invalid %s%s: empty", p, d->name);
        if (d->kind == K_SECRET_FILE)
                return read_secret_file(s, v, err, errlen);
        if (d->kind == K_META)
                return check_meta(p, d, v, err, errlen);
        char want[128];
        const char *why = value_problem(d, v, want, sizeof(want));
        return why ? fail(err, errlen, -EINVAL, "invalid %s%s %s: %s", p, d->name, v, why) : 0;
}

int shoal_settings_set(struct shoal_settings *s, enum shoal_setting id, const char *value,
                       char *err, size_t errlen)
{
        if (id <= SHOAL_SET_NONE || id >= SHOAL_SET__COUNT)
                return fail(err, errlen, -EINVAL, "no such setting");
        if (value) {
                int rc = check(s, id, value, err, errlen);
                if (rc)
                        return rc;
        } else if (id == SHOAL_SET_GROUP_SECRET_FILE) {
                secret_wipe(s);
        }
        s->val[id] = value;
        return 0;
}

int shoal_settings_set_secret(struct shoal_settings *s, const void *bytes, size_t len, char *err,
                              size_t errlen)
{
        if (!bytes) {
                secret_wipe(s);
                return 0;
        }
        if (len < SHOAL_SECRET_MIN || len > SHOAL_SECRET_MAX)
                return fail(err, errlen, -EINVAL,
                            "the group secret must be %d to %d bytes, not %zu", SHOAL_SECRET_MIN,
                            SHOAL_SECRET_MAX, len);
        secret_wipe(s);
        memcpy(s->secret, bytes, len);
        s->secret_len = len;
        s->secret_given = true;
        return 0;
}

int shoal_settings_log_level(const struct shoal_settings *s)
{
        const char *v = s->val[SHOAL_SET_LOG_LEVEL];
        return v ? shoal_log_parse_level(v) : profiles[s->who].log_level;
}

/* The values below were checked when set: parsing them again cannot fail. */
static int64_t size_val(const struct shoal_settings *s, enum shoal_setting id, int64_t dflt)
{
        int64_t v;
        const char *str = s->val[id];
        uint64_t unit = defs[id].kind == K_BLOCK_SIZE  ? SHOAL_KiB
                        : defs[id].kind == K_PART_SIZE ? SHOAL_MiB
                                                       : defs[id].unit;
        return str && !shoal_parse_size(str, unit, defs[id].neg1, &v) ? v : dflt;
}

static uint64_t count_val(const struct shoal_settings *s, enum shoal_setting id, uint64_t dflt)
{
        uint64_t v;
        const char *str = s->val[id];
        return str && !shoal_parse_u64(str, defs[id].max, &v) ? v : dflt;
}

static bool switch_val(const struct shoal_settings *s, enum shoal_setting id)
{
        bool b = false;
        return s->val[id] && !parse_switch(s->val[id], &b) && b;
}

/* The command line's default folders: system-wide for root, else under $HOME (or /tmp). */
static void default_dir(const struct shoal_env *env, const char *system, const char *user_suffix,
                        char *buf, size_t buflen)
{
        if (geteuid() == 0) {
                shoal_strlcpy(buf, system, buflen);
                return;
        }
        const char *home = env->home;
        snprintf(buf, buflen, "%s/%s", home && *home ? home : "/tmp", user_suffix);
}

/* --iorpc-mode as the seed takes it: an unknown mode is a warning, and dio. */
static int iorpc_mode(const struct shoal_settings *s)
{
        const char *v = s->val[SHOAL_SET_IORPC_MODE];
        if (!v)
                return SHOAL_IORPC_DIO;
        int m = shoal_iorpc_mode_parse(v);
        if (m < 0) {
                log_warn("iorpc",
                         "iorpc-mode should be one of dio, pagecache, splice, disable, but got %s, "
                         "set to dio",
                         v);
                m = SHOAL_IORPC_DIO;
        }
        return m;
}

/* What only the combination of settings shows. */
static int check_combination(const struct shoal_settings *s, const char *storage, char *err,
                             size_t errlen)
{
        const char *p = prefix(s);
        if (s->val[SHOAL_SET_RDMA_PROVIDER] && !s->val[SHOAL_SET_RDMA_NETWORK])
                return fail(err, errlen, -EINVAL,
                            "%srdma-provider needs %srdma-network IF1[:IF2...]", p, p);
        if (s->val[SHOAL_SET_GROUP_IP] && s->val[SHOAL_SET_GROUP_NETWORK])
                return fail(err, errlen, -EINVAL, "give %sgroup-ip or %sgroup-network, not both", p,
                            p);
        if (!storage || !*storage)
                return fail(err, errlen, -EINVAL, "missing %s (e.g. file:///data or s3://bucket)",
                            s->who == SHOAL_SETTINGS_LIBRARY ? "storage" : "STORAGE");
        /* "s3://" alone would reach the store as "s3:" once its slashes are trimmed. */
        if (!strncmp(storage, "s3://", 5) && !storage[5 + strspn(storage + 5, "/")])
                return fail(err, errlen, -EINVAL,
                            "storage %s: no bucket (expected s3://BUCKET[/PREFIX])", storage);
        if (!strncmp(storage, "file://", 7) && !storage[7 + strspn(storage + 7, "/")] &&
            strcmp(storage, "file:///"))
                return fail(err, errlen, -EINVAL,
                            "storage %s: no folder (expected file:///ABSOLUTE/DIR)", storage);
        return 0;
}

/* The group secret: the one given, else SHOAL_GROUP_SECRET (config.c checked its length). */
static struct shoal_secret secret_val(struct shoal_settings *s, const struct shoal_env *env)
{
        if (!s->secret_given) {
                s->secret_len = 0;
                if (env->group_secret) {
                        s->secret_len = SHOAL_MIN(env->group_secret_len, sizeof(s->secret));
                        memcpy(s->secret, env->group_secret, s->secret_len);
                }
        }
        return (struct shoal_secret){.bytes = s->secret_len ? s->secret : NULL,
                                     .len = s->secret_len};
}

/* The host-local secret's file (node/local_secret.h): the one given, else
 * SHOAL_LOCAL_SECRET_FILE, else local.secret in the default registry's folder; NULL for "off". */
static const char *local_secret_path(struct shoal_settings *s, const struct shoal_env *env)
{
        const char *v = s->val[SHOAL_SET_LOCAL_SECRET_FILE];
        if (!v)
                v = env->local_secret_file;
        if (v)
                return strcmp(v, "off") ? v : NULL;
        default_dir(env, "/var/lib/shoal", ".shoal", s->local_secret_default,
                    sizeof(s->local_secret_default));
        size_t n = strlen(s->local_secret_default);
        snprintf(s->local_secret_default + n, sizeof(s->local_secret_default) - n, "/local.secret");
        return s->local_secret_default;
}

int shoal_settings_build(struct shoal_settings *s, const char *storage, const struct shoal_env *env,
                         struct shoal_node_config *cfg, char *err, size_t errlen)
{
        const struct profile *pr = &profiles[s->who];
        memset(cfg, 0, sizeof(*cfg));
        int rc = check_combination(s, storage, err, errlen);
        if (rc)
                return rc;
        const char *const *v = s->val;
        cfg->storage = storage;
        cfg->endpoint = v[SHOAL_SET_ENDPOINT];
        cfg->block_size = (uint32_t)size_val(s, SHOAL_SET_BLOCK_SIZE, SHOAL_BLOCK_SIZE_DEFAULT);
        cfg->cache_group = v[SHOAL_SET_CACHE_GROUP];
        cfg->meta_url = v[SHOAL_SET_META];
        if (!cfg->meta_url) {
                char dir[1024];
                default_dir(env, "/var/lib/shoal", ".shoal", dir, sizeof(dir));
                snprintf(s->meta_default, sizeof(s->meta_default), "sqlite3://%s/meta.db", dir);
                cfg->meta_url = s->meta_default;
        }
        cfg->cache_dir = v[SHOAL_SET_CACHE_DIR];
        if (!cfg->cache_dir) {
                default_dir(env, "/var/cache/shoal", ".shoal/cache", s->cache_dir_default,
                            sizeof(s->cache_dir_default));
                cfg->cache_dir = s->cache_dir_default;
        }
        cfg->cache_size = size_val(s, SHOAL_SET_CACHE_SIZE, pr->cache_size);
        cfg->free_space_ratio = FREE_SPACE_DEFAULT;
        if (v[SHOAL_SET_FREE_SPACE_RATIO])
                parse_ratio(v[SHOAL_SET_FREE_SPACE_RATIO], &cfg->free_space_ratio);
        cfg->serve = pr->serve;
        cfg->no_sharing = pr->consumer || switch_val(s, SHOAL_SET_NO_SHARING);
        cfg->strict_group = switch_val(s, SHOAL_SET_STRICT_GROUP);
        cfg->group_ip = v[SHOAL_SET_GROUP_IP];
        cfg->group_network = v[SHOAL_SET_GROUP_NETWORK];
        cfg->group_port = (uint16_t)count_val(s, SHOAL_SET_GROUP_PORT, 0);
        cfg->group_weight =
                pr->consumer ? 0
                             : (uint32_t)count_val(s, SHOAL_SET_GROUP_WEIGHT, GROUP_WEIGHT_DEFAULT);
        cfg->group_secret = secret_val(s, env);
        cfg->use_iorpc = switch_val(s, SHOAL_SET_USE_IORPC);
        cfg->iorpc_mode = iorpc_mode(s);
        cfg->cache_try_dio = switch_val(s, SHOAL_SET_CACHE_TRY_DIO);
        cfg->rdma_network = v[SHOAL_SET_RDMA_NETWORK];
        cfg->rdma_provider = v[SHOAL_SET_RDMA_PROVIDER];
        cfg->rdma_preauth_per_source = (unsigned)count_val(s, SHOAL_SET_RDMA_PREAUTH_PER_SOURCE, 0);
        cfg->buffer_size = (uint64_t)size_val(s, SHOAL_SET_BUFFER_SIZE, BUFFER_SIZE_DEFAULT);
        cfg->max_downloads = (unsigned)count_val(s, SHOAL_SET_MAX_DOWNLOADS, MAX_DOWNLOADS_DEFAULT);
        cfg->prefetch = (unsigned)count_val(s, SHOAL_SET_PREFETCH, PREFETCH_DEFAULT);
        cfg->upload_part_size = (uint64_t)size_val(s, SHOAL_SET_UPLOAD_PART_SIZE, 0);
        cfg->metrics_addr = v[SHOAL_SET_METRICS];
        cfg->local_secret_file = local_secret_path(s, env);
        return 0;
}
