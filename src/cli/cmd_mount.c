/* shoal mount STORAGE MOUNTPOINT [C1] and shoal umount MOUNTPOINT. */
#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "cli/cli.h"
#include "cli/daemon.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "fuse/fuse_mount.h"

#define MOUNT_MAX_THREADS 32
#define SHOAL_FSTYPE      "fuse.shoal"
#define UMOUNT_WAIT_NS    (30 * SHOAL_NS_PER_SEC)

/* A mount's process is found by its mount's device numbers, unique while it is mounted:
 * /run/shoal/mount-MAJOR-MINOR.pid (root) or ~/.shoal/run/... holds its PID, so that `shoal
 * umount` can wait until the process that writes the cache has exited. CREATE makes the folder.
 * Returns 0 or -errno. */
static int pidfile_path(unsigned ma, unsigned mi, bool create, char *out, size_t outlen)
{
        char dir[PATH_MAX];
        if (geteuid() == 0) {
                shoal_strlcpy(dir, "/run/shoal", sizeof(dir));
        } else {
                const char *home = shoal_config_env()->home;
                if (!home || !*home)
                        return -ENOENT;
                if (snprintf(dir, sizeof(dir), "%s/.shoal", home) >= (int)sizeof(dir))
                        return -ENAMETOOLONG;
                if (create && mkdir(dir, 0700) && errno != EEXIST)
                        return -errno;
                strncat(dir, "/run", sizeof(dir) - strlen(dir) - 1);
        }
        if (create && mkdir(dir, 0755) && errno != EEXIST)
                return -errno;
        if (snprintf(out, outlen, "%s/mount-%u-%u.pid", dir, ma, mi) >= (int)outlen)
                return -ENAMETOOLONG;
        return 0;
}

/* Records this process as the one serving MP; OUT receives the file's path ("" when none). */
static void pidfile_write(const char *mp, char *out, size_t outlen)
{
        char type[64], tmp[PATH_MAX + 8];
        unsigned ma, mi;
        out[0] = '\0';
        int rc = shoal_fuse_mount_info(mp, type, sizeof(type), &ma, &mi);
        if (!rc)
                rc = pidfile_path(ma, mi, true, out, outlen);
        if (rc) {
                log_warn("mount",
                         "cannot record the mount's pid (shoal umount will not wait for "
                         "this process): %s",
                         strerror(-rc));
                out[0] = '\0';
                return;
        }
        /* written whole under another name and renamed: a reader never sees half a number */
        snprintf(tmp, sizeof(tmp), "%s.tmp", out);
        FILE *f = fopen(tmp, "w");
        if (!f || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) || rename(tmp, out)) {
                log_warn("mount", "cannot write %s: %s", out, strerror(errno));
                out[0] = '\0';
        }
}

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
        fc->attr_ttl_ns = (uint64_t)(ttl * (double)SHOAL_NS_PER_SEC);
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
        cfg.check_store = true; /* a mount of a store that does not answer is no mount */
        struct shoal_fuse_config fc = {0};
        if (parse_mount_flags(&cli, &fc))
                return 2;
        char mp[PATH_MAX];
        if (check_mountpoint(&cli, cli.pos[1], mp))
                return 2;
        fc.mountpoint = mp;

        if (shoal_cli_background(&cli))
                return 2;
        /* Every thread inherits this mask; shoal_fuse_loop takes the signals on this thread. */
        shoal_daemon_block_signals(NULL);

        char err[1024];
        struct shoal_node *node;
        rc = shoal_node_start(&cfg, &node, err, sizeof(err));
        if (rc)
                return shoal_daemon_report("mount", err, shoal_cli_start_code(rc));
        fc.node = node;
        struct shoal_fuse *f = shoal_fuse_mount(&fc, err, sizeof(err));
        if (!f) {
                shoal_node_stop(node);
                return shoal_daemon_report("mount", err, 1);
        }
        char pidfile[PATH_MAX];
        pidfile_write(mp, pidfile, sizeof(pidfile));
        log_info("mount", "%s mounted at %s (%s%s%s, attr cache %.3g s, max request %u, %s)",
                 cfg.storage, mp, cfg.cache_group ? "group " : "no group",
                 cfg.cache_group ? cfg.cache_group : "",
                 !cfg.cache_group ? ""
                 : node->server   ? ", sharing"
                                  : ", not sharing",
                 (double)fc.attr_ttl_ns / (double)SHOAL_NS_PER_SEC, fc.max_read,
                 fc.read_only                            ? "read-only"
                 : fc.allow_overwrite && fc.allow_delete ? "new files, overwrite, delete"
                 : fc.allow_overwrite                    ? "new files, overwrite"
                 : fc.allow_delete                       ? "new files, delete"
                                                         : "new files");
        shoal_daemon_ready();
        if (shoal_daemon_hup_start("mount"))
                log_warn("mount", "no SIGHUP thread: SIGHUP will not reopen the log");
        rc = shoal_fuse_loop(f);
        shoal_daemon_hup_stop();
        if (rc)
                log_error("mount", "FUSE loop failed: %s", strerror(-rc));
        log_info("mount", "unmounting %s", mp);
        shoal_fuse_destroy(f);
        shoal_node_stop(node);
        if (pidfile[0])
                unlink(pidfile);
        return rc ? 1 : 0;
}

/* The process serving the mount with device MA:MI, as a pidfd (so that a recycled PID cannot
 * fool the wait), or -1 when none is known. */
static int mount_process(unsigned ma, unsigned mi, pid_t *pid)
{
        char path[PATH_MAX], comm[32] = "";
        if (pidfile_path(ma, mi, false, path, sizeof(path)))
                return -1;
        FILE *f = fopen(path, "r");
        int p = 0;
        if (!f)
                return -1;
        if (fscanf(f, "%d", &p) != 1 || p <= 0)
                p = 0;
        fclose(f);
        if (!p)
                return -1;
        int fd = (int)syscall(SYS_pidfd_open, p, 0);
        if (fd < 0)
                return -1; /* gone already (a mount that crashed) */
        /* the PID is ours only while it names a shoal process */
        snprintf(path, sizeof(path), "/proc/%d/comm", p);
        f = fopen(path, "r");
        if (!f || !fgets(comm, sizeof(comm), f) || strncmp(comm, "shoal", 5)) {
                if (f)
                        fclose(f);
                close(fd);
                return -1;
        }
        fclose(f);
        *pid = p;
        return fd;
}

/* Waits until the process behind PIDFD has exited, at most TIMEOUT_NS. Returns true if it did. */
static bool wait_exit(int pidfd, uint64_t timeout_ns)
{
        uint64_t end = shoal_now_ns() + timeout_ns;
        for (;;) {
                uint64_t now = shoal_now_ns();
                if (now >= end)
                        return false;
                struct pollfd pfd = {.fd = pidfd, .events = POLLIN};
                int ms = (int)SHOAL_MIN((end - now) / SHOAL_NS_PER_MS + 1, 1000);
                int n = poll(&pfd, 1, ms);
                if (n > 0)
                        return true;
                if (n < 0 && errno != EINTR)
                        return false;
        }
}

/* Whether another mount namespace still has the mount with device MA:MI (a copy made by
 * `ip netns exec`, `unshare -m` or a container started while it was mounted, with private
 * propagation): the kernel then keeps its FUSE connection, and its process serving, after the
 * unmount here. WHO receives "PID (COMMAND)" of one process in such a namespace. */
static bool mounted_elsewhere(unsigned ma, unsigned mi, char *who, size_t wholen)
{
        struct stat self;
        if (stat("/proc/self/ns/mnt", &self))
                return false;
        DIR *d = opendir("/proc");
        if (!d)
                return false;
        ino_t seen[64];
        size_t nseen = 0;
        char want[32];
        snprintf(want, sizeof(want), " %u:%u ", ma, mi);
        bool found = false;
        struct dirent *e;
        while (!found && (e = readdir(d))) {
                if (e->d_name[0] < '1' || e->d_name[0] > '9')
                        continue;
                char path[64];
                struct stat ns;
                snprintf(path, sizeof(path), "/proc/%.20s/ns/mnt", e->d_name);
                if (stat(path, &ns) || ns.st_ino == self.st_ino)
                        continue;
                bool again = false;
                for (size_t i = 0; i < nseen && !again; i++)
                        again = seen[i] == ns.st_ino;
                if (again)
                        continue;
                if (nseen < sizeof(seen) / sizeof(seen[0]))
                        seen[nseen++] = ns.st_ino;
                snprintf(path, sizeof(path), "/proc/%.20s/mountinfo", e->d_name);
                FILE *f = fopen(path, "re");
                if (!f)
                        continue;
                char line[4096];
                while (!found && fgets(line, sizeof(line), f))
                        found = strstr(line, want) != NULL;
                fclose(f);
                if (!found)
                        continue;
                char comm[64] = "?";
                snprintf(path, sizeof(path), "/proc/%.20s/comm", e->d_name);
                f = fopen(path, "re");
                if (f) {
                        if (fgets(comm, sizeof(comm), f))
                                comm[strcspn(comm, "\n")] = '\0';
                        fclose(f);
                }
                snprintf(who, wholen, "%.20s (%.60s)", e->d_name, comm);
        }
        closedir(d);
        return found;
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

/* MP: the mountpoint ARG made absolute; realpath fails on a dead mount (ENOTCONN), and then
 * the path as given is used, made absolute. Returns 0 or the exit code after one line. */
static int mountpoint_path(const struct shoal_cli *cli, const char *arg, char *mp, size_t mplen)
{
        if (realpath(arg, mp))
                return 0;
        if (arg[0] == '/') {
                shoal_strlcpy(mp, arg, mplen);
                return 0;
        }
        char cwd[PATH_MAX];
        if (!getcwd(cwd, sizeof(cwd)) || snprintf(mp, mplen, "%s/%s", cwd, arg) >= (int)mplen)
                return shoal_cli_fail(cli, "mountpoint %s: path too long", arg);
        return 0;
}

/* Detaches MP: fusermount3 for users, umount2 for root. Returns 0 or the exit code. */
static int detach(const char *mp, const char *arg)
{
        if (geteuid() != 0)
                return run_fusermount(mp) ? 1 : 0;
        if (!umount2(mp, UMOUNT_NOFOLLOW))
                return 0;
        if (errno == EBUSY)
                fprintf(stderr,
                        "shoal umount: %s is busy: close the files open there (or use "
                        "umount -l)\n",
                        arg);
        else
                fprintf(stderr, "shoal umount: %s: %s\n", arg, strerror(errno));
        return 1;
}

/* After the detach: waits up to TIMEOUT for the mount's process PID (PIDFD, closed here) of
 * the mount MA:MI to exit. Returns the exit code. */
static int wait_mount_process(const char *arg, unsigned ma, unsigned mi, int pidfd, pid_t pid,
                              uint64_t timeout)
{
        /* Its process ends when the kernel ends the connection: not while a copy of the mount
         * lives on in another mount namespace. Waiting for it then would only time out. */
        char who[128];
        if (mounted_elsewhere(ma, mi, who, sizeof(who))) {
                close(pidfd);
                fprintf(stderr,
                        "shoal umount: %s unmounted here, but another mount namespace still has "
                        "it (that of process %s): its process %d serves it there until it is "
                        "unmounted there or those processes end\n",
                        arg, who, (int)pid);
                return 1;
        }
        bool gone = wait_exit(pidfd, timeout);
        close(pidfd);
        char d[32];
        shoal_format_duration(timeout, d, sizeof(d));
        if (!gone) {
                fprintf(stderr,
                        "shoal umount: %s unmounted, but its process %d is still running after "
                        "%s (see its log)\n",
                        arg, (int)pid, d);
                return 1;
        }
        printf("shoal umount: %s unmounted; its process %d has exited\n", arg, (int)pid);
        return 0;
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
        uint64_t timeout = UMOUNT_WAIT_NS;
        if (cli.val[OPT_TIMEOUT] && shoal_parse_duration(cli.val[OPT_TIMEOUT], &timeout))
                return shoal_cli_fail(&cli, "invalid --timeout %s: expected a duration like 30s",
                                      cli.val[OPT_TIMEOUT]);
        const char *arg = cli.pos[0];
        char mp[PATH_MAX];
        rc = mountpoint_path(&cli, arg, mp, sizeof(mp));
        if (rc)
                return rc;
        char type[64];
        unsigned ma, mi;
        rc = shoal_fuse_mount_info(mp, type, sizeof(type), &ma, &mi);
        if (rc == -ENOENT) {
                fprintf(stderr, "shoal umount: %s is not mounted\n", arg);
                return 1;
        }
        if (!rc && strcmp(type, SHOAL_FSTYPE))
                return shoal_cli_fail(&cli, "%s is a %s mount, not a shoal mount", arg, type);
        pid_t pid = 0;
        int pidfd = rc ? -1 : mount_process(ma, mi, &pid);
        if (detach(mp, arg)) {
                if (pidfd >= 0)
                        close(pidfd);
                return 1;
        }
        if (pidfd < 0) {
                printf("shoal umount: %s unmounted (no running mount process to wait for)\n", arg);
                return 0;
        }
        return wait_mount_process(arg, ma, mi, pidfd, pid, timeout);
}
