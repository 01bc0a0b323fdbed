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

#define COMMON (CMD_MOUNT | CMD_SERVE | CMD_CAT | CMD_WARMUP | CMD_BENCH)
#define ALL    0xffffu

#define GROUP_GRACE_MAX_NS (24 * 3600 * SHOAL_NS_PER_SEC) /* --group-grace: up to a day */

/* A flag that is a setting gives only .setting: its name and whether it takes a value come
 * from node/settings.c. */
struct opt_def {
        const char *name;
        char short_name;
        bool takes_arg;
        unsigned cmds;
        const char *metavar;
        const char *help;
        enum shoal_setting setting;
};

static const struct opt_def opts[OPT__COUNT] = {
        [OPT_HELP] = {"help", 'h', false, ALL, NULL, "show this help"},
        [OPT_META] = {.setting = SHOAL_SET_META,
                      .cmds = COMMON | CMD_GROUP | CMD_PING,
                      .metavar = "URL",
                      .help = "where group members meet: sqlite3:///path/meta.db (default "
                              "sqlite3:///var/lib/shoal/meta.db), redis://host:port/db or "
                              "etcd://host:port[,host:port]"},
        [OPT_CACHE_GROUP] = {.setting = SHOAL_SET_CACHE_GROUP,
                             .cmds = COMMON | CMD_GROUP | CMD_PING,
                             .metavar = "NAME",
                             .help = "join the cache group NAME (default: no group)"},
        [OPT_CACHE_DIR] = {.setting = SHOAL_SET_CACHE_DIR,
                           .cmds = COMMON,
                           .metavar = "DIRS",
                           .help = "cache folders, colon-separated, globs allowed (default "
                                   "/var/cache/shoal)"},
        [OPT_CACHE_SIZE] =
                {.setting = SHOAL_SET_CACHE_SIZE,
                 .cmds = COMMON,
                 .metavar = "MiB",
                 .help = "disk cache size: MiB or with a unit (1G); 0 = no disk cache; -1 = "
                         "unlimited (default 102400)"},
        [OPT_FREE_SPACE_RATIO] =
                {.setting = SHOAL_SET_FREE_SPACE_RATIO,
                 .cmds = COMMON,
                 .metavar = "RATIO",
                 .help = "keep this fraction of each cache disk free (default 0.1)"},
        [OPT_NO_SHARING] = {.setting = SHOAL_SET_NO_SHARING,
                            .cmds = COMMON,
                            .help = "consume the group's caches but share nothing"},
        [OPT_GROUP_IP] = {.setting = SHOAL_SET_GROUP_IP,
                          .cmds = COMMON,
                          .metavar = "IP",
                          .help = "address to listen on for the group (default 127.0.0.1)"},
        [OPT_GROUP_NETWORK] = {.setting = SHOAL_SET_GROUP_NETWORK,
                               .cmds = COMMON,
                               .metavar = "IFACE",
                               .help = "listen on the IPv4 address of this interface"},
        [OPT_GROUP_PORT] = {.setting = SHOAL_SET_GROUP_PORT,
                            .cmds = COMMON,
                            .metavar = "PORT",
                            .help = "TCP pool port (default: chosen by the system)"},
        [OPT_GROUP_WEIGHT] = {.setting = SHOAL_SET_GROUP_WEIGHT,
                              .cmds = COMMON,
                              .metavar = "N",
                              .help = "share of blocks this member owns (default 100; 0 = drain)"},
        [OPT_GROUP_SECRET_FILE] = {.setting = SHOAL_SET_GROUP_SECRET_FILE,
                                   .cmds = COMMON | CMD_PING,
                                   .metavar = "PATH",
                                   .help = "file holding the group secret (or SHOAL_GROUP_SECRET)"},
        [OPT_LOCAL_SECRET_FILE] =
                {.setting = SHOAL_SET_LOCAL_SECRET_FILE,
                 .cmds = COMMON | CMD_PING,
                 .metavar = "PATH|off",
                 .help = "without a group secret: the host-local secret a member makes and "
                         "local clients read (default /var/lib/shoal/local.secret as root, "
                         "~/.shoal/local.secret otherwise); off: none"},
        [OPT_USE_IORPC] = {.setting = SHOAL_SET_USE_IORPC,
                           .cmds = COMMON,
                           .help = "read from members over IORPC instead of the TCP pool"},
        [OPT_IORPC_MODE] =
                {.setting = SHOAL_SET_IORPC_MODE,
                 .cmds = COMMON,
                 .metavar = "MODE",
                 .help = "how the IORPC server reads the cache: dio (default), pagecache, "
                         "splice, disable"},
        [OPT_CACHE_TRY_DIO] =
                {.setting = SHOAL_SET_CACHE_TRY_DIO,
                 .cmds = COMMON,
                 .help = "TCP pool: read cached blocks with O_DIRECT instead of sendfile"},
        [OPT_RDMA_NETWORK] = {.setting = SHOAL_SET_RDMA_NETWORK,
                              .cmds = COMMON | CMD_PING,
                              .metavar = "IF1[:IF2...]",
                              .help = "carry IORPC over RDMA on these interfaces"},
        [OPT_RDMA_PROVIDER] = {.setting = SHOAL_SET_RDMA_PROVIDER,
                               .cmds = COMMON | CMD_PING,
                               .metavar = "NAME",
                               .help = "libfabric provider (default verbs, or FI_PROVIDER)"},
        [OPT_RDMA_PREAUTH_PER_SOURCE] = {.setting = SHOAL_SET_RDMA_PREAUTH_PER_SOURCE,
                                         .cmds = COMMON,
                                         .metavar = "N",
                                         .help = "member: RDMA connections one host may have "
                                                 "authenticating at once (default 8, at most "
                                                 "64): the worker processes a host starts "
                                                 "together"},
        [OPT_BUFFER_SIZE] = {.setting = SHOAL_SET_BUFFER_SIZE,
                             .cmds = COMMON,
                             .metavar = "MiB",
                             .help = "memory for read buffers and readahead (default 300)"},
        [OPT_MAX_DOWNLOADS] = {.setting = SHOAL_SET_MAX_DOWNLOADS,
                               .cmds = COMMON,
                               .metavar = "N",
                               .help = "concurrent object-store reads per process (default "
                                       "200; 0 = no limit)"},
        [OPT_PREFETCH] = {.setting = SHOAL_SET_PREFETCH,
                          .cmds = COMMON,
                          .metavar = "N",
                          .help = "blocks to read ahead of a sequential reader (default 2)"},
        [OPT_METRICS] =
                {.setting = SHOAL_SET_METRICS,
                 .cmds = COMMON,
                 .metavar = "HOST:PORT",
                 .help = "Prometheus endpoint (default 127.0.0.1:9567 or the next free port)"},
        [OPT_LOG_FILE] = {.setting = SHOAL_SET_LOG_FILE,
                          .cmds = ALL,
                          .metavar = "PATH",
                          .help = "log to PATH instead of stderr (with -d the default is "
                                  "/var/log/shoal.log as root, ~/.shoal/shoal.log otherwise)"},
        [OPT_LOG_LEVEL] =
                {.setting = SHOAL_SET_LOG_LEVEL,
                 .cmds = ALL,
                 .metavar = "LEVEL",
                 .help = "error, warn, info, debug, trace (default: info for mount and serve, "
                         "warn for the other commands)"},
        [OPT_BLOCK_SIZE] =
                {.setting = SHOAL_SET_BLOCK_SIZE,
                 .cmds = COMMON,
                 .metavar = "KiB",
                 .help = "block size: KiB or with a unit (4M); a power of two from 64K to 64M "
                         "(default 4096)"},
        [OPT_ENDPOINT] = {.setting = SHOAL_SET_ENDPOINT,
                          .cmds = COMMON,
                          .metavar = "URL",
                          .help = "S3 endpoint for s3:// storage"},
        [OPT_BACKGROUND] = {"background", 'd', false, CMD_MOUNT | CMD_SERVE, NULL,
                            "run in the background once ready, detached, logging to --log-file"},
        [OPT_OFFSET] = {"offset", 0, true, CMD_CAT, "N", "start at byte N (default 0)"},
        [OPT_LENGTH] = {"length", 0, true, CMD_CAT, "N", "read N bytes (default: to the end)"},
        [OPT_SUMMARY] = {"summary", 0, false, CMD_CAT, NULL,
                         "print where the bytes came from (buffer, cache, group, store) to "
                         "stderr"},
        [OPT_SCHEMA] = {"schema", 0, true, CMD_STATS, "LETTERS",
                        "sections: u usage, f fuse, m meta, c blockcache, r remotecache, e rdma, "
                        "o object, p plan (default ufmco)"},
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
        [OPT_UPLOAD_PART_SIZE] = {.setting = SHOAL_SET_UPLOAD_PART_SIZE,
                                  .cmds = CMD_MOUNT,
                                  .metavar = "SIZE",
                                  .help = "part size of s3:// multipart uploads, 5M to 5G (default "
                                          "16M)"},
        [OPT_GROUP_GRACE] = {"group-grace", 0, true, CMD_MOUNT | CMD_SERVE, "TIME",
                             "how long this member keeps its place in the group once away or "
                             "stopped (default 60s; SHOAL_GROUP_GRACE)"},
        [OPT_SET_WEIGHT] = {"set-weight", 0, true, CMD_GROUP, "MEMBER",
                            "set the weight of MEMBER (an id or an address as listed) to the "
                            "WEIGHT that follows; 0 drains it"},
        [OPT_STRICT_GROUP] = {.setting = SHOAL_SET_STRICT_GROUP,
                              .cmds = COMMON,
                              .help = "fail instead of warn when the group cannot share (no "
                                      "live member, a new registry)"},
        [OPT_PLAN] = {"plan", 0, true, CMD_WARMUP, "FILE",
                      "with --storage: warm the items of an access plan in order of first use "
                      "(a line: KEY, or KEY<TAB>OFFSET<TAB>LENGTH)"},
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

static const char *opt_name(int id)
{
        return opts[id].setting ? shoal_setting_name(opts[id].setting) : opts[id].name;
}

static bool opt_takes_arg(int id)
{
        return opts[id].setting ? !shoal_setting_is_switch(opts[id].setting) : opts[id].takes_arg;
}

static void cli_usage(enum shoal_cmd cmd, const char *name, FILE *out)
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
                        snprintf(lhs, sizeof(lhs), "-%c, --%s%s%s", d->short_name, opt_name(i),
                                 d->metavar ? " " : "", d->metavar ? d->metavar : "");
                else
                        snprintf(lhs, sizeof(lhs), "    --%s%s%s", opt_name(i),
                                 d->metavar ? " " : "", d->metavar ? d->metavar : "");
                /* serve and group cannot go without a group: their help says so. */
                const char *help = d->help;
                if (i == OPT_CACHE_GROUP && (cmd & (CMD_SERVE | CMD_GROUP)))
                        help = "the cache group NAME (required)";
                else if (i == OPT_CACHE_GROUP && cmd == CMD_PING)
                        help = "find HOST among the members of the cache group NAME";
                fprintf(out, "  %-32s %s\n", lhs, help);
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
                if (strlen(opt_name(i)) == len && !strncmp(opt_name(i), name, len))
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

/* Hands every setting among the given flags to the settings module, in the settings' order (so
 * that the first bad one reported is the one it always was). */
static int check_settings(struct shoal_cli *cli)
{
        shoal_settings_init(&cli->set, (cli->cmd & (CMD_MOUNT | CMD_SERVE)) ? SHOAL_SETTINGS_DAEMON
                                                                            : SHOAL_SETTINGS_TOOL);
        for (int id = SHOAL_SET_NONE + 1; id < SHOAL_SET__COUNT; id++) {
                for (int i = 0; i < OPT__COUNT; i++) {
                        if (opts[i].setting != (enum shoal_setting)id || !cli->val[i])
                                continue;
                        char err[512];
                        if (shoal_settings_set(&cli->set, opts[i].setting, cli->val[i], err,
                                               sizeof(err)))
                                return shoal_cli_fail(cli, "%s", err);
                }
        }
        return 0;
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
                                if (id >= 0 && opt_takes_arg(id))
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
                        cli_usage(cmd, name, stdout);
                        return 1;
                }
                if (opt_takes_arg(id)) {
                        if (!val) {
                                if (i + 1 >= argc)
                                        return shoal_cli_fail(cli, "flag --%s needs a value (%s)",
                                                              opt_name(id), opts[id].metavar);
                                val = argv[++i];
                        }
                } else {
                        if (val)
                                return shoal_cli_fail(cli, "flag --%s takes no value",
                                                      opt_name(id));
                        val = "1";
                }
                cli->val[id] = val;
        }
        /* The environment is parsed once, here, with the same verdict as a bad flag. */
        char err[512];
        if (shoal_config_load(err, sizeof(err)))
                return shoal_cli_fail(cli, "%s", err);
        return check_settings(cli);
}

int shoal_cli_setup_log(const struct shoal_cli *cli)
{
        /* checked by the parse: the level or the command's default (node/settings.c) */
        shoal_log_set_level(shoal_settings_log_level(&cli->set));
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

int shoal_cli_node_config(struct shoal_cli *cli, const char *storage, struct shoal_node_config *cfg)
{
        char err[512];
        if (shoal_settings_build(&cli->set, storage, shoal_config_env(), cfg, err, sizeof(err)))
                return shoal_cli_fail(cli, "%s", err);
        const char *grace = cli->val[OPT_GROUP_GRACE];
        if (grace && (shoal_parse_duration(grace, &cfg->group_grace_ns) ||
                      cfg->group_grace_ns > GROUP_GRACE_MAX_NS))
                return shoal_cli_fail(cli, "invalid --group-grace %s: expected a duration up to 1d",
                                      grace);
        cfg->group_no_grace = grace && cfg->group_grace_ns == 0;
        return 0;
}

int shoal_cli_start_code(int rc)
{
        return rc == -EINVAL ? 2 : 1;
}
