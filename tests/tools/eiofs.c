/* shoal_eiofs — a failing disk for tests [RELIABILITY: disk I/O errors]: a FUSE filesystem that
 * passes everything through to a backing folder, except that operations on chosen files fail
 * with EIO, as a dying disk's would.
 *
 *   shoal_eiofs BACKING MOUNTPOINT CONTROL
 *
 * Runs in the foreground (one thread) until SIGTERM (then unmounts and exits 0). CONTROL is a file
 * re-read whenever it changes: one pattern per line; an operation on a path (relative to the mount,
 * without a leading '/') that contains any pattern fails with EIO, and "*" matches every path.
 * Failing operations: open, create, read, write, truncate, fsync, mkdir, unlink, rename; lookups
 * and listings keep working, so the files stay visible. At exit it prints "eiofs: N EIO" to
 * stderr. */
#define FUSE_USE_VERSION 31

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <fuse.h>
#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define MAX_PATTERNS 64

static char backing[PATH_MAX];
static const char *control;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static char patterns[MAX_PATTERNS][256];
static unsigned npatterns;
static struct timespec control_mtime;
static off_t control_size = -1;
static unsigned long eio_count; /* atomic */

/* Re-reads CONTROL when its mtime or size changed. mu held. */
static void reload_locked(void)
{
        struct stat st;
        if (stat(control, &st)) {
                npatterns = 0;
                control_size = -1;
                return;
        }
        if (st.st_size == control_size && st.st_mtim.tv_sec == control_mtime.tv_sec &&
            st.st_mtim.tv_nsec == control_mtime.tv_nsec)
                return;
        control_size = st.st_size;
        control_mtime = st.st_mtim;
        npatterns = 0;
        FILE *f = fopen(control, "r");
        if (!f)
                return;
        char line[256];
        while (npatterns < MAX_PATTERNS && fgets(line, sizeof(line), f)) {
                line[strcspn(line, "\r\n")] = '\0';
                if (line[0])
                        memcpy(patterns[npatterns++], line, sizeof(line));
        }
        fclose(f);
}

/* True (and counted) when PATH must fail. */
static bool fails(const char *path)
{
        const char *rel = path[0] == '/' ? path + 1 : path;
        bool hit = false;
        pthread_mutex_lock(&mu);
        reload_locked();
        for (unsigned i = 0; i < npatterns && !hit; i++)
                hit = !strcmp(patterns[i], "*") || strstr(rel, patterns[i]);
        pthread_mutex_unlock(&mu);
        if (hit)
                __atomic_add_fetch(&eio_count, 1, __ATOMIC_RELAXED);
        return hit;
}

static void real(const char *path, char *out)
{
        snprintf(out, PATH_MAX, "%s%s", backing, path);
}

static int e_getattr(const char *path, struct stat *st, struct fuse_file_info *fi)
{
        char p[PATH_MAX];
        if (fi)
                return fstat((int)fi->fh, st) ? -errno : 0;
        real(path, p);
        return lstat(p, st) ? -errno : 0;
}

static int e_readdir(const char *path, void *buf, fuse_fill_dir_t fill, off_t off,
                     struct fuse_file_info *fi, enum fuse_readdir_flags flags)
{
        char p[PATH_MAX];
        real(path, p);
        DIR *d = opendir(p);
        if (!d)
                return -errno;
        struct dirent *de;
        while ((de = readdir(d))) {
                struct stat st = {.st_ino = de->d_ino, .st_mode = (mode_t)de->d_type << 12};
                if (fill(buf, de->d_name, &st, 0, 0))
                        break;
        }
        closedir(d);
        return 0;
}

static int e_mkdir(const char *path, mode_t mode)
{
        char p[PATH_MAX];
        if (fails(path))
                return -EIO;
        real(path, p);
        return mkdir(p, mode) ? -errno : 0;
}

static int e_unlink(const char *path)
{
        char p[PATH_MAX];
        if (fails(path))
                return -EIO;
        real(path, p);
        return unlink(p) ? -errno : 0;
}

static int e_rmdir(const char *path)
{
        char p[PATH_MAX];
        real(path, p);
        return rmdir(p) ? -errno : 0;
}

static int e_rename(const char *from, const char *to, unsigned int flags)
{
        char a[PATH_MAX], b[PATH_MAX];
        if (flags)
                return -EINVAL;
        if (fails(from) || fails(to))
                return -EIO;
        real(from, a);
        real(to, b);
        return rename(a, b) ? -errno : 0;
}

static int e_truncate(const char *path, off_t size, struct fuse_file_info *fi)
{
        char p[PATH_MAX];
        if (fails(path))
                return -EIO;
        if (fi)
                return ftruncate((int)fi->fh, size) ? -errno : 0;
        real(path, p);
        return truncate(p, size) ? -errno : 0;
}

static int e_open(const char *path, struct fuse_file_info *fi)
{
        char p[PATH_MAX];
        if (fails(path))
                return -EIO;
        real(path, p);
        int fd = open(p, fi->flags & ~O_DIRECT);
        if (fd < 0)
                return -errno;
        fi->fh = (uint64_t)fd;
        return 0;
}

static int e_create(const char *path, mode_t mode, struct fuse_file_info *fi)
{
        char p[PATH_MAX];
        if (fails(path))
                return -EIO;
        real(path, p);
        int fd = open(p, fi->flags & ~O_DIRECT, mode);
        if (fd < 0)
                return -errno;
        fi->fh = (uint64_t)fd;
        return 0;
}

static int e_read(const char *path, char *buf, size_t size, off_t off, struct fuse_file_info *fi)
{
        if (fails(path))
                return -EIO;
        ssize_t n = pread((int)fi->fh, buf, size, off);
        return n < 0 ? -errno : (int)n;
}

static int e_write(const char *path, const char *buf, size_t size, off_t off,
                   struct fuse_file_info *fi)
{
        if (fails(path))
                return -EIO;
        ssize_t n = pwrite((int)fi->fh, buf, size, off);
        return n < 0 ? -errno : (int)n;
}

static int e_fsync(const char *path, int datasync, struct fuse_file_info *fi)
{
        if (fails(path))
                return -EIO;
        return (datasync ? fdatasync((int)fi->fh) : fsync((int)fi->fh)) ? -errno : 0;
}

static int e_release(const char *path, struct fuse_file_info *fi)
{
        close((int)fi->fh);
        return 0;
}

static int e_statfs(const char *path, struct statvfs *st)
{
        return statvfs(backing, st) ? -errno : 0;
}

static int e_utimens(const char *path, const struct timespec tv[2], struct fuse_file_info *fi)
{
        char p[PATH_MAX];
        if (fi)
                return futimens((int)fi->fh, tv) ? -errno : 0;
        real(path, p);
        return utimensat(AT_FDCWD, p, tv, AT_SYMLINK_NOFOLLOW) ? -errno : 0;
}

static int e_chmod(const char *path, mode_t mode, struct fuse_file_info *fi)
{
        char p[PATH_MAX];
        if (fi)
                return fchmod((int)fi->fh, mode) ? -errno : 0;
        real(path, p);
        return chmod(p, mode) ? -errno : 0;
}

static void *e_init(struct fuse_conn_info *conn, struct fuse_config *cfg)
{
        /* Every operation reaches us: no attribute or entry caching, no page cache kept. */
        cfg->use_ino = 1;
        cfg->entry_timeout = 0;
        cfg->attr_timeout = 0;
        cfg->negative_timeout = 0;
        cfg->direct_io = 0;
        cfg->kernel_cache = 0;
        return NULL;
}

static const struct fuse_operations ops = {
        .init = e_init,
        .getattr = e_getattr,
        .readdir = e_readdir,
        .mkdir = e_mkdir,
        .unlink = e_unlink,
        .rmdir = e_rmdir,
        .rename = e_rename,
        .truncate = e_truncate,
        .open = e_open,
        .create = e_create,
        .read = e_read,
        .write = e_write,
        .fsync = e_fsync,
        .release = e_release,
        .statfs = e_statfs,
        .utimens = e_utimens,
        .chmod = e_chmod,
};

int main(int argc, char **argv)
{
        if (argc != 4) {
                fprintf(stderr, "usage: shoal_eiofs BACKING MOUNTPOINT CONTROL\n");
                return 2;
        }
        if (!realpath(argv[1], backing)) {
                fprintf(stderr, "shoal_eiofs: %s: %s\n", argv[1], strerror(errno));
                return 2;
        }
        control = argv[3];
        char *fargv[] = {argv[0], "-o", "fsname=shoal_eiofs", NULL};
        struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
        struct fuse *f = fuse_new(&args, &ops, sizeof(ops), NULL);
        if (!f)
                return 1;
        int rc = 1;
        if (fuse_mount(f, argv[2]) == 0) {
                struct fuse_session *se = fuse_get_session(f);
                if (fuse_set_signal_handlers(se) == 0) {
                        /* One thread is plenty for a test; the loop ends on SIGTERM/SIGINT/SIGHUP
                         * with that signal's number as its error. */
                        rc = fuse_loop(f);
                        if (rc == SIGTERM || rc == SIGINT || rc == SIGHUP || rc == -SIGTERM ||
                            rc == -SIGINT || rc == -SIGHUP)
                                rc = 0;
                        fuse_remove_signal_handlers(se);
                }
                fuse_unmount(f);
        }
        fuse_destroy(f);
        fuse_opt_free_args(&args);
        fprintf(stderr, "eiofs: %lu EIO\n", __atomic_load_n(&eio_count, __ATOMIC_RELAXED));
        return rc ? 1 : 0;
}
