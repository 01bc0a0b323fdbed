/* Command-line parsing shared by every subcommand: one table of flags (name, argument, which
 * commands take it, help), parsed into struct shoal_cli. Flags that configure a node are
 * settings (node/settings.h, shared with libshoal): their names and checks come from there,
 * and they are checked when parsed. Every problem is one line on stderr and exit code 2. */
#ifndef SHOAL_CLI_CLI_H
#define SHOAL_CLI_CLI_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "node/node.h"
#include "node/settings.h"

enum shoal_cmd {
        CMD_MOUNT = 1u << 0,
        CMD_SERVE = 1u << 1,
        CMD_STATS = 1u << 2,
        CMD_WARMUP = 1u << 3,
        CMD_BENCH = 1u << 4,
        CMD_PING = 1u << 5,
        CMD_GROUP = 1u << 6,
        CMD_CAT = 1u << 7,
        CMD_UMOUNT = 1u << 8,
};

#define SHOAL_CLI_MAX_POS 16

/* Flags by id; the table in cli.c gives each its name and help. */
enum shoal_opt {
        OPT_HELP,
        OPT_META,
        OPT_CACHE_GROUP,
        OPT_CACHE_DIR,
        OPT_CACHE_SIZE,
        OPT_FREE_SPACE_RATIO,
        OPT_NO_SHARING,
        OPT_GROUP_IP,
        OPT_GROUP_NETWORK,
        OPT_GROUP_PORT,
        OPT_GROUP_WEIGHT,
        OPT_GROUP_SECRET_FILE,
        OPT_LOCAL_SECRET_FILE,
        OPT_USE_IORPC,
        OPT_IORPC_MODE,
        OPT_CACHE_TRY_DIO,
        OPT_RDMA_NETWORK,
        OPT_RDMA_PROVIDER,
        OPT_RDMA_PREAUTH_PER_SOURCE,
        OPT_BUFFER_SIZE,
        OPT_MAX_DOWNLOADS,
        OPT_PREFETCH,
        OPT_METRICS,
        OPT_LOG_FILE,
        OPT_LOG_LEVEL,
        OPT_BLOCK_SIZE,
        OPT_ENDPOINT,
        OPT_BACKGROUND,
        OPT_OFFSET,
        OPT_LENGTH,
        OPT_SCHEMA,
        OPT_INTERVAL,
        OPT_VERBOSITY,
        OPT_COUNT,
        OPT_STORAGE,
        OPT_PREFIX,
        OPT_ATTR_CACHE,
        OPT_MAX_WRITE,
        OPT_SUMMARY,
        OPT_THREADS,
        OPT_DURATION,
        OPT_LINGER,
        OPT_RAMP,
        OPT_WARM,
        OPT_TIMEOUT,
        OPT_TRANSPORTS,
        OPT_READ_ONLY,
        OPT_ALLOW_OVERWRITE,
        OPT_ALLOW_DELETE,
        OPT_UPLOAD_PART_SIZE,
        OPT_GROUP_GRACE,
        OPT_SET_WEIGHT,
        OPT_STRICT_GROUP,
        OPT_PLAN,
        OPT__COUNT
};

struct shoal_cli {
        enum shoal_cmd cmd;
        const char *cmd_name;
        const char *val[OPT__COUNT]; /* NULL when not given; "1" for a given switch */
        const char *pos[SHOAL_CLI_MAX_POS];
        int npos;
        struct shoal_settings set; /* the settings among the flags, checked */
};

/* Parses ARGV (after the subcommand word; ARGV must outlive CLI), then the environment
 * (common/config.h), then checks every setting given (reading --group-secret-file). Returns 0, 1
 * when --help was printed (exit 0), or 2 after printing one error line (exit 2). */
int shoal_cli_parse(struct shoal_cli *cli, enum shoal_cmd cmd, const char *name, int argc,
                    char **argv);

/* Prints "shoal NAME: MSG" to stderr; returns 2. */
int shoal_cli_fail(const struct shoal_cli *cli, const char *fmt, ...)
        __attribute__((format(printf, 2, 3)));

/* Builds the node configuration of the object store STORAGE from the settings among the flags
 * (shoal_settings_build: mount and serve are members that serve, the other commands tools). CFG
 * points into CLI, which must stay in place while CFG is used. Returns 0 or 2 (after printing
 * the error). */
int shoal_cli_node_config(struct shoal_cli *cli, const char *storage,
                          struct shoal_node_config *cfg);
/* The exit code for a failed shoal_node_start that returned RC: 2 for a usage problem (-EINVAL),
 * 1 for a runtime failure. */
int shoal_cli_start_code(int rc);
/* Applies --log-file / --log-level (default: info for mount and serve, warn for the tools).
 * Returns 0 or 2. */
int shoal_cli_setup_log(const struct shoal_cli *cli);
/* With -d: opens the background log (--log-file, else the default of shoal_daemon_log_path) and
 * forks (shoal_daemon_start); the caller continues in the child. Without -d: nothing. Returns 0,
 * or 2 after printing why. Call after shoal_cli_setup_log, before any thread starts. */
int shoal_cli_background(const struct shoal_cli *cli);

/* Subcommands. Each returns the process exit code. */
int shoal_cmd_cat(int argc, char **argv);
int shoal_cmd_serve(int argc, char **argv);
int shoal_cmd_group(int argc, char **argv);
int shoal_cmd_mount(int argc, char **argv);
int shoal_cmd_umount(int argc, char **argv);
int shoal_cmd_stats(int argc, char **argv);
int shoal_cmd_warmup(int argc, char **argv);
int shoal_cmd_bench(int argc, char **argv);
int shoal_cmd_ping(int argc, char **argv);

#endif
