#include "cli/cli.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/daemon.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/http.h"
#include "rpc/server.h"

#define COMMON (CMD_MOUNT | CMD_SERVE | CMD_CAT | CMD_WARMUP | CMD_BENCH)
#define ALL    0xffffu

struct opt_def {
        const char *name;
        char short_name;
        bool takes_arg;
        unsigned cmds;
        const char *metavar;
        const char *help;
};

static const struct opt_def opts[OPT__COUNT] = {
        [OPT_HELP] = {"help", 'h', false, ALL, NULL, "show this help"},
        [OPT_META] = {"meta", 0, true, COMMON | CMD_GROUP | CMD_PING, "URL",
                      "where group members meet: sqlite3:///path/meta.db (default "
                      "sqlite3:///var/lib/shoal/meta.db) or redis://host:port/db"},
        [OPT_CACHE_GROUP] = {"cache-group", 0, true, COMMON | CMD_GROUP | CMD_PING, "NAME",
                             "join the cache group NAME (default: no group)"},
        [OPT_CACHE_DIR] = {"cache-dir", 0, true, COMMON, "DIRS",
                           "cache folders, colon-separated, globs allowed (default "
                           "/var/cache/shoal)"},
        [OPT_CACHE_SIZE] = {"cache-size", 0, true, COMMON, "MiB",
                            "disk cache size: MiB or with a unit (1G); 0 = no disk cache; -1 = "
                            "unlimited (default 102400)"},
        [OPT_FREE_SPACE_RATIO] = {"free-space-ratio", 0, true, COMMON, "RATIO",
                                  "keep this fraction of each cache disk free (default 0.1)"},
        [OPT_NO_SHARING] = {"no-sharing", 0, false, COMMON, NULL,
                            "consume the group's caches but share nothing"},
        [OPT_GROUP_IP] = {"group-ip", 0, true, COMMON, "IP",
                          "address to listen on for the group (default 127.0.0.1)"},
        [OPT_GROUP_NETWORK] = {"group-network", 0, true, COMMON, "IFACE",
                               "listen on the IPv4 address of this interface"},
        [OPT_GROUP_PORT] = {"group-port", 0, true, COMMON, "PORT",
                            "TCP pool port (default: chosen by the system)"},
        [OPT_GROUP_WEIGHT] = {"group-weight", 0, true, COMMON, "N",
                              "share of blocks this member owns (default 100; 0 = drain)"},
        [OPT_GROUP_SECRET_FILE] = {"group-secret-file", 0, true, COMMON | CMD_PING, "PATH",
                                   "file holding the group secret (or SHOAL_GROUP_SECRET)"},
        [OPT_USE_IORPC] = {"use-iorpc", 0, false, COMMON, NULL,
                           "read from members over IORPC instead of the TCP pool"},
        [OPT_IORPC_MODE] = {"iorpc-mode", 0, true, COMMON, "MODE",
                            "how the IORPC server reads the cache: dio (default), pagecache, "
                            "splice, disable"},
        [OPT_CACHE_TRY_DIO] = {"cache-try-dio", 0, false, COMMON, NULL,
                               "TCP pool: read cached blocks with O_DIRECT instead of sendfile"},
        [OPT_RDMA_NETWORK] = {"rdma-network", 0, true, COMMON | CMD_PING, "IF1[:IF2...]",
                              "carry IORPC over RDMA on these interfaces"},
        [OPT_RDMA_PROVIDER] = {"rdma-provider", 0, true, COMMON | CMD_PING, "NAME",
                               "libfabric provider (default verbs, or FI_PROVIDER)"},
        [OPT_BUFFER_SIZE] = {"buffer-size", 0, true, COMMON, "MiB",
                             "memory for read buffers and readahead (default 300)"},
        [OPT_MAX_DOWNLOADS] = {"max-downloads", 0, true, COMMON, "N",
                               "concurrent object-store reads per process (default 200)"},
        [OPT_PREFETCH] = {"prefetch", 0, true, COMMON, "N",
                          "blocks to read ahead of a sequential reader (default 2)"},
        [OPT_METRICS] = {"metrics", 0, true, COMMON, "HOST:PORT",
                         "Prometheus endpoint (default 127.0.0.1:9567 or the next free port)"},
        [OPT_LOG_FILE] = {"log-file", 0, true, ALL, "PATH",
                          "log to PATH instead of stderr (with -d the default is "
                          "/var/log/shoal.log as root, ~/.shoal/shoal.log otherwise)"},
        [OPT_LOG_LEVEL] = {"log-level", 0, true, ALL, "LEVEL",
                           "error, warn, info, debug, trace (default: info for mount and serve, "
                           "warn for the other commands)"},
        [OPT_BLOCK_SIZE] = {"block-size", 0, true, COMMON, "KiB",
                            "block size: KiB or with a unit (4M); a power of two from 64K to 64M "
                            "(default 4096)"},
        [OPT_ENDPOINT] = {"endpoint", 0, true, COMMON, "URL", "S3 endpoint for s3:// storage"},
        [OPT_BACKGROUND] = {"background", 'd', false, CMD_MOUNT | CMD_SERVE, NULL,
                            "run in the background once ready, detached, logging to --log-file"},
        [OPT_OFFSET] = {"offset", 0, true, CMD_CAT, "N", "start at byte N (default 0)"},
        [OPT_LENGTH] = {"length", 0, true, CMD_CAT, "N", "read N bytes (default: to the end)"},
        [OPT_SUMMARY] = {"summary", 0, false, CMD_CAT, NULL,
                         "print where the bytes came from (buffer, cache, group, store) to "
                         "stderr"},
        [OPT_SCHEMA] = {"schema", 0, true, CMD_STATS, "LETTERS",
                        "sections: u usage, f fuse, m meta, c blockcache, r remotecache, e rdma, "
                        "o object (default ufmco)"},
        [OPT_INTERVAL] = {"interval", 0, true, CMD_STATS, "SECONDS",
                          "seconds between rows (default 1)"},
        [OPT_VERBOSITY] = {"verbosity", 'l', true, CMD_STATS, "0|1", "1 adds detail columns"},
        [OPT_COUNT] = {"count", 'c', true, CMD_STATS, "N", "print N rows, then exit"},
        [OPT_STORAGE] = {"storage", 0, true, CMD_WARMUP, "STORAGE",
                         "warm objects of this store (with --prefix)"},
        [OPT_PREFIX] = {"prefix", 0, true, CMD_WARMUP | CMD_BENCH, "P",
                        "objects under this prefix"},
        [OPT_THREADS] = {"threads", 'p', true, CMD_BENCH | CMD_WARMUP, "N",
                         "concurrent readers (default 16)"},
        [OPT_DURATION] = {"duration", 0, true, CMD_BENCH, "TIME", "how long to read (default 10s)"},
        [OPT_LINGER] = {"linger", 0, true, CMD_BENCH, "TIME",
                        "stay idle this long after reading, printing connections per member"},
        [OPT_RAMP] = {"ramp", 0, true, CMD_BENCH, "TIME",
                      "read this long before the timed part (IORPC connections grow with load)"},
        [OPT_WARM] = {"warm", 0, false, CMD_BENCH, NULL,
                      "read every block once first so that members have them cached"},
        [OPT_TIMEOUT] = {"timeout", 0, true, CMD_UMOUNT, "TIME",
                         "how long to wait for the mount process to exit (default 30s)"},
        [OPT_TRANSPORTS] = {"transports", 0, true, CMD_BENCH, "LIST",
                            "compare transports in one run: tcp,iorpc,rdma (rdma needs "
                            "--rdma-network)"},
        [OPT_ATTR_CACHE] = {"attr-cache", 0, true, CMD_MOUNT, "SECONDS",
                            "how long names, sizes and listings are cached (default 60)"},
        [OPT_MAX_WRITE] = {"max-write", 0, true, CMD_MOUNT, "BYTES",
                           "largest FUSE request (default 1M)"},
        [OPT_READ_ONLY] = {"read-only", 0, false, CMD_MOUNT, NULL,
                           "refuse every change with EROFS"},
        [OPT_ALLOW_OVERWRITE] = {"allow-overwrite", 0, false, CMD_MOUNT, NULL,
                                 "let open(O_TRUNC) replace an existing object"},
        [OPT_ALLOW_DELETE] = {"allow-delete", 0, false, CMD_MOUNT, NULL,
                              "let unlink delete objects from the store"},
        [OPT_UPLOAD_PART_SIZE] = {"upload-part-size", 0, true, CMD_MOUNT, "SIZE",
                                  "part size of s3:// multipart uploads, 5M to 5G (default "
                                  "16M)"},
};

static const struct {
        enum shoal_cmd cmd;
        const char *usage;
        const char *about;
} cmd_help[] = {
        {CMD_MOUNT, "shoal mount STORAGE MOUNTPOINT [flags]",
         "Mount the volume with FUSE; by default also a group member that shares its cache."},
        {CMD_SERVE, "shoal serve STORAGE [flags]", "Run a group member without a mount."},
        {CMD_STATS, "shoal stats MOUNTPOINT|HOST:PORT [flags]",
         "Show live metrics, a row per "
         "interval."},
        {CMD_WARMUP, "shoal warmup MOUNTPOINT-PATH... | --storage STORAGE --prefix P [flags]",
         "Fill the group's caches."},
        {CMD_BENCH, "shoal bench STORAGE [flags]", "Read benchmark through the group."},
        {CMD_PING, "shoal ping HOST[:PORT] [--meta URL --cache-group NAME] [flags]",
         "Check each transport to a member: its TCP pool at HOST:PORT, or, without PORT, the "
         "pool port its record in the group gives (HOST: IP, hostname or member id)."},
        {CMD_GROUP, "shoal group [--meta URL] --cache-group NAME",
         "List the members of a cache group."},
        {CMD_CAT, "shoal cat STORAGE KEY [--offset N] [--length N] [flags]",
         "Read one object through the whole read path to stdout."},
        {CMD_UMOUNT, "shoal umount MOUNTPOINT [--timeout 30s]",
         "Unmount a shoal mount and wait until its process has exited."},
};

void shoal_cli_usage(enum shoal_cmd cmd, const char *name, FILE *out)
{
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(cmd_help); i++) {
                if (cmd_help[i].cmd != cmd)
                        continue;
                fprintf(out, "usage: %s\n\n%s\n\nflags:\n", cmd_help[i].usage, cmd_help[i].about);
        }
        for (int i = 0; i < OPT__COUNT; i++) {
                const struct opt_def *d = &opts[i];
                if (!(d->cmds & cmd))
                        continue;
                char lhs[64];
                if (d->short_name)
                        snprintf(lhs, sizeof(lhs), "-%c, --%s%s%s", d->short_name, d->name,
                                 d->metavar ? " " : "", d->metavar ? d->metavar : "");
                else
                        snprintf(lhs, sizeof(lhs), "    --%s%s%s", d->name, d->metavar ? " " : "",
                                 d->metavar ? d->metavar : "");
                fprintf(out, "  %-32s %s\n", lhs, d->help);
        }
        (void)name;
}

int shoal_cli_fail(const struct shoal_cli *cli, const char *fmt, ...)
{
        char msg[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(msg, sizeof(msg), fmt, ap);
        va_end(ap);
        fprintf(stderr, "shoal %s: %s\n", cli->cmd_name, msg);
        return 2;
}

static int find_long(const char *name, size_t len)
{
        for (int i = 0; i < OPT__COUNT; i++)
                if (opts[i].name && strlen(opts[i].name) == len &&
                    !strncmp(opts[i].name, name, len))
                        return i;
        return -1;
}

static int find_short(char c)
{
        for (int i = 0; i < OPT__COUNT; i++)
                if (opts[i].short_name == c)
                        return i;
        return -1;
}

int shoal_cli_parse(struct shoal_cli *cli, enum shoal_cmd cmd, const char *name, int argc,
                    char **argv)
{
        memset(cli, 0, sizeof(*cli));
        cli->cmd = cmd;
        cli->cmd_name = name;
        bool only_pos = false;
        for (int i = 0; i < argc; i++) {
                const char *a = argv[i];
                if (only_pos || a[0] != '-' || !a[1] ||
                    (a[1] != '-' && a[1] >= '0' && a[1] <= '9')) {
                        if (cli->npos >= SHOAL_CLI_MAX_POS)
                                return shoal_cli_fail(cli, "too many arguments");
                        cli->pos[cli->npos++] = a;
                        continue;
                }
                if (!strcmp(a, "--")) {
                        only_pos = true;
                        continue;
                }
                int id;
                const char *val = NULL;
                if (a[1] == '-') {
                        const char *eq = strchr(a + 2, '=');
                        size_t len = eq ? (size_t)(eq - a - 2) : strlen(a + 2);
                        id = find_long(a + 2, len);
                        if (eq)
                                val = eq + 1;
                } else {
                        if (a[2]) {
                                id = find_short(a[1]);
                                if (id >= 0 && opts[id].takes_arg)
                                        val = a + 2; /* -c3 */
                                else
                                        id = -1;
                        } else {
                                id = find_short(a[1]);
                        }
                }
                if (id < 0 || !(opts[id].cmds & cmd))
                        return shoal_cli_fail(cli, "unknown flag %s (see 'shoal %s --help')", a,
                                              name);
                if (id == OPT_HELP) {
                        shoal_cli_usage(cmd, name, stdout);
                        return 1;
                }
                if (opts[id].takes_arg) {
                        if (!val) {
                                if (i + 1 >= argc)
                                        return shoal_cli_fail(cli, "flag --%s needs a value (%s)",
                                                              opts[id].name, opts[id].metavar);
                                val = argv[++i];
                        }
                } else {
                        if (val)
                                return shoal_cli_fail(cli, "flag --%s takes no value",
                                                      opts[id].name);
                        val = "1";
                }
                cli->val[id] = val;
        }
        /* The environment is parsed once, here, with the same verdict as a bad flag. */
        char err[512];
        if (shoal_config_load(err, sizeof(err)))
                return shoal_cli_fail(cli, "%s", err);
        return 0;
}

int shoal_cli_setup_log(const struct shoal_cli *cli)
{
        /* Daemons tell what they do; tools whose output is data stay quiet unless asked. */
        shoal_log_set_level((cli->cmd & (CMD_MOUNT | CMD_SERVE)) ? SHOAL_LOG_INFO : SHOAL_LOG_WARN);
        if (cli->val[OPT_LOG_LEVEL]) {
                int lvl = shoal_log_parse_level(cli->val[OPT_LOG_LEVEL]);
                if (lvl < 0)
                        return shoal_cli_fail(cli,
                                              "invalid --log-level %s: expected error, warn, info, "
                                              "debug or trace",
                                              cli->val[OPT_LOG_LEVEL]);
                shoal_log_set_level(lvl);
        }
        if (cli->val[OPT_LOG_FILE]) {
                int rc = shoal_log_open(cli->val[OPT_LOG_FILE]);
                if (rc)
                        return shoal_cli_fail(cli, "cannot open --log-file %s: %s",
                                              cli->val[OPT_LOG_FILE], strerror(-rc));
        }
        return 0;
}

int shoal_cli_background(const struct shoal_cli *cli)
{
        if (!cli->val[OPT_BACKGROUND])
                return 0;
        char path[4096];
        int rc = shoal_daemon_log_path(cli->val[OPT_LOG_FILE], path, sizeof(path));
        if (rc)
                return shoal_cli_fail(cli, "cannot choose a log file for -d: %s (give --log-file)",
                                      strerror(-rc));
        if (!cli->val[OPT_LOG_FILE] && (rc = shoal_log_open(path)))
                return shoal_cli_fail(cli, "cannot open the log %s: %s (give --log-file)", path,
                                      strerror(-rc));
        rc = shoal_daemon_start(cli->cmd_name, path);
        if (rc)
                return shoal_cli_fail(cli, "cannot fork into the background: %s", strerror(-rc));
        return 0;
}

static int size_flag(const struct shoal_cli *cli, enum shoal_opt id, uint64_t unit, bool neg1,
                     int64_t dflt, int64_t *out)
{
        if (!cli->val[id]) {
                *out = dflt;
                return 0;
        }
        if (shoal_parse_size(cli->val[id], unit, neg1, out))
                return shoal_cli_fail(cli, "invalid --%s %s: expected a size like 100, 4M or 1G%s",
                                      opts[id].name, cli->val[id], neg1 ? " (or -1)" : "");
        return 0;
}

static int uint_flag(const struct shoal_cli *cli, enum shoal_opt id, uint64_t max, uint64_t dflt,
                     uint64_t *out)
{
        if (!cli->val[id]) {
                *out = dflt;
                return 0;
        }
        if (shoal_parse_u64(cli->val[id], max, out))
                return shoal_cli_fail(cli,
                                      "invalid --%s %s: expected a whole number from 0 to %llu",
                                      opts[id].name, cli->val[id], (unsigned long long)max);
        return 0;
}

/* The secret's bytes live here for the process's life (configs point into it). */
static uint8_t secret_buf[SHOAL_SECRET_MAX + 1];

/* Reads the group secret [S1, S3]: the bytes of --group-secret-file, or of SHOAL_GROUP_SECRET.
 * Every byte counts, NUL included; one line ending at the very end of the file ("\n" or
 * "\r\n", as editors and `echo` leave it) is not part of the secret, so a file and the variable
 * holding the same text agree. Shorter than SHOAL_SECRET_MIN or a file longer than
 * SHOAL_SECRET_MAX bytes: one line, exit 2. */
static int load_secret(const struct shoal_cli *cli, struct shoal_secret *out)
{
        *out = (struct shoal_secret){0};
        const char *path = cli->val[OPT_GROUP_SECRET_FILE];
        size_t n;
        if (path) {
                FILE *f = fopen(path, "rb");
                if (!f)
                        return shoal_cli_fail(cli, "cannot read --group-secret-file %s: %s", path,
                                              strerror(errno));
                n = fread(secret_buf, 1, sizeof(secret_buf), f);
                bool bad = ferror(f);
                fclose(f);
                if (bad)
                        return shoal_cli_fail(cli, "cannot read --group-secret-file %s", path);
                if (n > SHOAL_SECRET_MAX)
                        return shoal_cli_fail(cli,
                                              "--group-secret-file %s: the secret must be at most "
                                              "%d bytes",
                                              path, SHOAL_SECRET_MAX);
                if (n && secret_buf[n - 1] == '\n') {
                        n--;
                        if (n && secret_buf[n - 1] == '\r')
                                n--;
                }
                if (n < SHOAL_SECRET_MIN)
                        return shoal_cli_fail(cli,
                                              "--group-secret-file %s: the secret must be at "
                                              "least %d bytes (it has %zu)",
                                              path, SHOAL_SECRET_MIN, n);
        } else {
                /* config.c checked its length */
                const struct shoal_env *env = shoal_config_env();
                if (!env->group_secret)
                        return 0;
                n = env->group_secret_len;
                memcpy(secret_buf, env->group_secret, n);
        }
        out->bytes = secret_buf;
        out->len = n;
        return 0;
}

static const char *default_dir(const char *system, const char *user_suffix, char *buf,
                               size_t buflen)
{
        if (geteuid() == 0)
                return system;
        const char *home = shoal_config_env()->home;
        snprintf(buf, buflen, "%s/%s", home && *home ? home : "/tmp", user_suffix);
        return buf;
}

int shoal_cli_node_config(const struct shoal_cli *cli, const char *storage,
                          struct shoal_node_config *cfg)
{
        static char cache_dir_buf[1024], meta_buf[1100];
        memset(cfg, 0, sizeof(*cfg));
        cfg->storage = storage;
        cfg->endpoint = cli->val[OPT_ENDPOINT];

        int64_t v;
        uint64_t u;
        if (size_flag(cli, OPT_BLOCK_SIZE, SHOAL_KiB, false, SHOAL_BLOCK_SIZE_DEFAULT, &v))
                return 2;
        if (v < SHOAL_BLOCK_SIZE_MIN || v > SHOAL_BLOCK_SIZE_MAX || (v & (v - 1)))
                return shoal_cli_fail(cli,
                                      "invalid --block-size %s: must be a power of two from 64K "
                                      "to 64M",
                                      cli->val[OPT_BLOCK_SIZE]);
        cfg->block_size = (uint32_t)v;

        cfg->cache_group = cli->val[OPT_CACHE_GROUP];
        if (cfg->cache_group &&
            (!*cfg->cache_group || strlen(cfg->cache_group) > 64 ||
             strspn(cfg->cache_group,
                    "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") !=
                     strlen(cfg->cache_group)))
                return shoal_cli_fail(cli,
                                      "invalid --cache-group %s: use 1-64 letters, digits, '-', "
                                      "'_' or '.'",
                                      cfg->cache_group);
        cfg->meta_url = cli->val[OPT_META];
        if (!cfg->meta_url) {
                char tmp[1024];
                const char *d = default_dir("/var/lib/shoal", ".shoal", tmp, sizeof(tmp));
                snprintf(meta_buf, sizeof(meta_buf), "sqlite3://%s/meta.db", d);
                cfg->meta_url = meta_buf;
        }
        cfg->cache_dir = cli->val[OPT_CACHE_DIR];
        if (!cfg->cache_dir)
                cfg->cache_dir = default_dir("/var/cache/shoal", ".shoal/cache", cache_dir_buf,
                                             sizeof(cache_dir_buf));
        if (size_flag(cli, OPT_CACHE_SIZE, SHOAL_MiB, true, 102400 * (int64_t)SHOAL_MiB, &v))
                return 2;
        cfg->cache_size = v;
        cfg->free_space_ratio = 0.1;
        if (cli->val[OPT_FREE_SPACE_RATIO]) {
                char *end;
                double r = strtod(cli->val[OPT_FREE_SPACE_RATIO], &end);
                if (*end || end == cli->val[OPT_FREE_SPACE_RATIO] || r < 0 || r > 0.9)
                        return shoal_cli_fail(cli,
                                              "invalid --free-space-ratio %s: expected a number "
                                              "from 0 to 0.9",
                                              cli->val[OPT_FREE_SPACE_RATIO]);
                cfg->free_space_ratio = r;
        }
        cfg->no_sharing = cli->val[OPT_NO_SHARING] != NULL;
        cfg->group_ip = cli->val[OPT_GROUP_IP];
        cfg->group_network = cli->val[OPT_GROUP_NETWORK];
        if (uint_flag(cli, OPT_GROUP_PORT, 65535, 0, &u))
                return 2;
        cfg->group_port = (uint16_t)u;
        if (uint_flag(cli, OPT_GROUP_WEIGHT, 1000000, 100, &u))
                return 2;
        cfg->group_weight = (uint32_t)u;
        if (load_secret(cli, &cfg->group_secret))
                return 2;

        cfg->use_iorpc = cli->val[OPT_USE_IORPC] != NULL;
        cfg->iorpc_mode = SHOAL_IORPC_DIO;
        if (cli->val[OPT_IORPC_MODE]) {
                int m = shoal_iorpc_mode_parse(cli->val[OPT_IORPC_MODE]);
                if (m < 0) {
                        log_warn("iorpc",
                                 "iorpc-mode should be one of dio, pagecache, splice, disable, "
                                 "but got %s, set to dio",
                                 cli->val[OPT_IORPC_MODE]);
                        m = SHOAL_IORPC_DIO;
                }
                cfg->iorpc_mode = m;
        }
        cfg->cache_try_dio = cli->val[OPT_CACHE_TRY_DIO] != NULL;
        cfg->rdma_network = cli->val[OPT_RDMA_NETWORK];
        cfg->rdma_provider = cli->val[OPT_RDMA_PROVIDER];
        if (cfg->rdma_provider && !cfg->rdma_network)
                return shoal_cli_fail(cli, "--rdma-provider needs --rdma-network IF1[:IF2...]");

        if (size_flag(cli, OPT_BUFFER_SIZE, SHOAL_MiB, false, 300 * (int64_t)SHOAL_MiB, &v))
                return 2;
        cfg->buffer_size = (uint64_t)v;
        if (uint_flag(cli, OPT_MAX_DOWNLOADS, 100000, 200, &u))
                return 2;
        cfg->max_downloads = (unsigned)u;
        if (uint_flag(cli, OPT_PREFETCH, 64, 2, &u))
                return 2;
        cfg->prefetch = (unsigned)u;
        cfg->metrics_addr = cli->val[OPT_METRICS];
        if (cfg->metrics_addr) {
                char host[256];
                uint16_t port;
                if (shoal_metrics_addr_parse(cfg->metrics_addr, host, sizeof(host), &port))
                        return shoal_cli_fail(cli,
                                              "invalid --metrics %s: expected HOST:PORT (e.g. "
                                              "127.0.0.1:9567)",
                                              cfg->metrics_addr);
        }
        if (!storage || !*storage)
                return shoal_cli_fail(cli, "missing STORAGE (e.g. file:///data)");
        return 0;
}
