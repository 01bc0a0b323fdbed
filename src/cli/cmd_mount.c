/* shoal mount STORAGE MOUNTPOINT [C1] and shoal umount MOUNTPOINT. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/daemon.h"
#include "common/log.h"
#include "common/util.h"
#include "fuse/fuse_mount.h"
#include "store/store.h"

#define MOUNT_MAX_THREADS 32
#define SHOAL_FSTYPE      "fuse.shoal"

/* Resolves MP into OUT (PATH_MAX). Returns 0 or 2 after printing why the mount point is unusable
 * (a usage problem). */
static int check_mountpoint(const struct shoal_cli *cli, const char *mp, char *out)
{
        if (!realpath(mp, out)) {
                if (errno == ENOTCONN)
                        return shoal_cli_fail(cli,
                                              "mountpoint %s: a dead mount is there (run 'shoal "
                                              "umount %s' first)",
                                              mp, mp);
                return shoal_cli_fail(cli, "mountpoint %s: %s", mp, strerror(errno));
        }
        struct stat sb;
        if (stat(out, &sb))
                return shoal_cli_fail(cli, "mountpoint %s: %s", mp, strerror(errno));
        if (!S_ISDIR(sb.st_mode))
                return shoal_cli_fail(cli, "mountpoint %s is not a directory", mp);
        char type[64];
        unsigned ma, mi;
        if (!shoal_fuse_mount_info(out, type, sizeof(type), &ma, &mi) &&
            !strcmp(type, SHOAL_FSTYPE))
                return shoal_cli_fail(cli, "%s is already a shoal mount", mp);
        return 0;
}

static int parse_mount_flags(const struct shoal_cli *cli, struct shoal_fuse_config *fc)
{
        double ttl = 60;
        const char *v = cli->val[OPT_ATTR_CACHE];
        if (v) {
                char *end;
                errno = 0;
                ttl = strtod(v, &end);
                if (errno || end == v || *end || !(ttl >= 0 && ttl <= 86400))
                        return shoal_cli_fail(cli,
                                              "invalid --attr-cache %s: expected seconds from 0 "
                                              "to 86400",
                                              v);
        }
        fc->attr_ttl_ns = (uint64_t)(ttl * 1e9);
        int64_t mw = SHOAL_MiB;
        v = cli->val[OPT_MAX_WRITE];
        if (v && (shoal_parse_size(v, 1, false, &mw) || mw < 4096 || mw > (int64_t)SHOAL_MiB ||
                  mw % 4096))
                return shoal_cli_fail(cli,
                                      "invalid --max-write %s: expected 4K to 1M, a multiple of "
                                      "4K",
                                      v);
        fc->max_read = (uint32_t)mw;
        fc->max_threads = MOUNT_MAX_THREADS;
        fc->allow_other = geteuid() == 0;
        fc->read_only = cli->val[OPT_READ_ONLY] != NULL;
        fc->allow_overwrite = cli->val[OPT_ALLOW_OVERWRITE] != NULL;
        fc->allow_delete = cli->val[OPT_ALLOW_DELETE] != NULL;
        if (fc->read_only && (fc->allow_overwrite || fc->allow_delete))
                return shoal_cli_fail(cli, "--read-only cannot go with --allow-overwrite or "
                                           "--allow-delete");
        return 0;
}

/* --upload-part-size into CFG. Returns 0 or 2. */
static int parse_upload_flags(const struct shoal_cli *cli, struct shoal_node_config *cfg)
{
        const char *v = cli->val[OPT_UPLOAD_PART_SIZE];
        int64_t ps;
        if (v &&
            (shoal_parse_size(v, SHOAL_MiB, false, &ps) ||
             (uint64_t)ps < SHOAL_STORE_PART_SIZE_MIN || (uint64_t)ps > SHOAL_STORE_PART_SIZE_MAX))
                return shoal_cli_fail(cli,
                                      "invalid --upload-part-size %s: expected 5M to 5G (S3's "
                                      "limits on a part)",
                                      v);
        cfg->upload_part_size = v ? (uint64_t)ps : 0;
        return 0;
}

int shoal_cmd_mount(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_MOUNT, "mount", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        if (cli.npos != 2)
                return shoal_cli_fail(&cli, "expected STORAGE MOUNTPOINT (see 'shoal mount "
                                            "--help')");
        struct shoal_node_config cfg;
        if (shoal_cli_node_config(&cli, cli.pos[0], &cfg))
                return 2;
        /* A mount is a member that shares its cache unless --no-sharing (or no group). */
        cfg.serve = true;
        struct shoal_fuse_config fc = {0};
        if (parse_mount_flags(&cli, &fc) || parse_upload_flags(&cli, &cfg))
                return 2;
        char mp[PATH_MAX];
        if (check_mountpoint(&cli, cli.pos[1], mp))
                return 2;
        fc.mountpoint = mp;

        if (cli.val[OPT_BACKGROUND] && shoal_daemon_start())
                return shoal_cli_fail(&cli, "cannot fork into the background");
        /* Every thread inherits this mask; shoal_fuse_loop takes the signals on this thread. */
        shoal_daemon_block_signals(NULL);

        char err[1024];
        int code;
        struct shoal_node *node = shoal_node_start(&cfg, err, sizeof(err), &code);
        if (!node)
                return shoal_daemon_report("mount", err, code);
        fc.node = node;
        struct shoal_fuse *f = shoal_fuse_mount(&fc, err, sizeof(err));
        if (!f) {
                shoal_node_stop(node);
                return shoal_daemon_report("mount", err, 1);
        }
        log_info("mount", "%s mounted at %s (%s%s%s, attr cache %.3g s, max request %u, %s)",
                 cfg.storage, mp, cfg.cache_group ? "group " : "no group",
                 cfg.cache_group ? cfg.cache_group : "",
                 !cfg.cache_group ? ""
                 : node->server   ? ", sharing"
                                  : ", not sharing",
                 (double)fc.attr_ttl_ns / 1e9, fc.max_read,
                 fc.read_only                            ? "read-only"
                 : fc.allow_overwrite && fc.allow_delete ? "new files, overwrite, delete"
                 : fc.allow_overwrite                    ? "new files, overwrite"
                 : fc.allow_delete                       ? "new files, delete"
                                                         : "new files");
        shoal_daemon_ready();
        rc = shoal_fuse_loop(f);
        if (rc)
                log_error("mount", "FUSE loop failed: %s", strerror(-rc));
        log_info("mount", "unmounting %s", mp);
        shoal_fuse_destroy(f);
        shoal_node_stop(node);
        return rc ? 1 : 0;
}

/* fusermount3 -u MP, for users who may not call umount2. Returns its exit code. */
static int run_fusermount(const char *mp)
{
        pid_t pid = fork();
        if (pid < 0)
                return 1;
        if (!pid) {
                execlp("fusermount3", "fusermount3", "-u", mp, (char *)NULL);
                fprintf(stderr, "shoal umount: cannot run fusermount3: %s\n", strerror(errno));
                _exit(127);
        }
        int st = 0;
        while (waitpid(pid, &st, 0) < 0 && errno == EINTR)
                ;
        return WIFEXITED(st) ? WEXITSTATUS(st) : 1;
}

int shoal_cmd_umount(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_UMOUNT, "umount", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        if (cli.npos != 1)
                return shoal_cli_fail(&cli, "expected MOUNTPOINT (see 'shoal umount --help')");
        char mp[PATH_MAX];
        /* realpath fails on a dead mount (ENOTCONN): then use the path as given, made absolute. */
        if (!realpath(cli.pos[0], mp)) {
                if (cli.pos[0][0] == '/') {
                        shoal_strlcpy(mp, cli.pos[0], sizeof(mp));
                } else {
                        char cwd[PATH_MAX];
                        if (!getcwd(cwd, sizeof(cwd)) ||
                            snprintf(mp, sizeof(mp), "%s/%s", cwd, cli.pos[0]) >= (int)sizeof(mp))
                                return shoal_cli_fail(&cli, "mountpoint %s: path too long",
                                                      cli.pos[0]);
                }
        }
        char type[64];
        unsigned ma, mi;
        rc = shoal_fuse_mount_info(mp, type, sizeof(type), &ma, &mi);
        if (rc == -ENOENT) {
                fprintf(stderr, "shoal umount: %s is not mounted\n", cli.pos[0]);
                return 1;
        }
        if (!rc && strcmp(type, SHOAL_FSTYPE))
                return shoal_cli_fail(&cli, "%s is a %s mount, not a shoal mount", cli.pos[0],
                                      type);
        if (geteuid() != 0)
                return run_fusermount(mp) ? 1 : 0;
        if (umount2(mp, UMOUNT_NOFOLLOW)) {
                if (errno == EBUSY)
                        fprintf(stderr,
                                "shoal umount: %s is busy: close the files open there (or use "
                                "umount -l)\n",
                                cli.pos[0]);
                else
                        fprintf(stderr, "shoal umount: %s: %s\n", cli.pos[0], strerror(errno));
                return 1;
        }
        return 0;
}
