/* A minimal read-only passthrough FUSE file system for bench/fuse.sh: the yardstick that shoal's
 * mount is measured against. Low-level API, multi-threaded loop with clone_fd, 1 MiB requests,
 * and one read buffer per worker thread, allocated and faulted in once (DESIGN.md "Memory") —
 * the same request path as shoal's mount, minus the cache.
 *
 *   cc -O2 passthrough_min.c $(pkg-config --cflags --libs fuse3) -o passthrough_min
 *   passthrough_min SOURCE_DIR MOUNTPOINT     (foreground; unmount with fusermount3 -u)
 *
 * Inodes are kept in a small table that is never pruned: enough for a benchmark's few files. */
#define FUSE_USE_VERSION 312
#define _GNU_SOURCE

#include <errno.h>
#include <fcntl.h>
#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#define MAX_REQ (1u << 20)

struct node {
        char *path; /* relative to the source folder; "." for the root */
};

static int src_fd;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static struct node *nodes;
static size_t nnodes, cap;
static __thread char *tbuf;

/* The inode number of PATH (index + 1), added when new. */
static fuse_ino_t ino_of(const char *path)
{
        pthread_mutex_lock(&mu);
        for (size_t i = 0; i < nnodes; i++) {
                if (!strcmp(nodes[i].path, path)) {
                        pthread_mutex_unlock(&mu);
                        return i + 1;
                }
        }
        if (nnodes == cap) {
                cap = cap ? cap * 2 : 64;
                nodes = realloc(nodes, cap * sizeof(*nodes));
                if (!nodes)
                        abort();
        }
        nodes[nnodes].path = strdup(path);
        fuse_ino_t ino = ++nnodes;
        pthread_mutex_unlock(&mu);
        return ino;
}

static const char *path_of(fuse_ino_t ino)
{
        pthread_mutex_lock(&mu);
        const char *p = ino >= 1 && ino <= nnodes ? nodes[ino - 1].path : NULL;
        pthread_mutex_unlock(&mu);
        return p;
}

static void pt_init(void *ud, struct fuse_conn_info *conn)
{
        conn->max_write = MAX_REQ;
        conn->max_read = MAX_REQ;
        conn->max_background = 64;
        conn->want &= ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE |
                                  FUSE_CAP_SPLICE_MOVE | FUSE_CAP_READDIRPLUS);
}

static void pt_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
        const char *pp = path_of(parent);
        if (!pp) {
                fuse_reply_err(req, ENOENT);
                return;
        }
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", pp, name);
        struct fuse_entry_param e;
        memset(&e, 0, sizeof(e));
        if (fstatat(src_fd, path, &e.attr, AT_SYMLINK_NOFOLLOW)) {
                fuse_reply_err(req, errno);
                return;
        }
        e.ino = ino_of(path);
        e.attr.st_ino = e.ino;
        e.attr_timeout = e.entry_timeout = 60;
        fuse_reply_entry(req, &e);
}

static void pt_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        const char *p = path_of(ino);
        struct stat st;
        if (!p || fstatat(src_fd, p, &st, AT_SYMLINK_NOFOLLOW)) {
                fuse_reply_err(req, p ? errno : ENOENT);
                return;
        }
        st.st_ino = ino;
        fuse_reply_attr(req, &st, 60);
}

static void pt_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        const char *p = path_of(ino);
        if ((fi->flags & O_ACCMODE) != O_RDONLY) {
                fuse_reply_err(req, EROFS);
                return;
        }
        int fd = p ? openat(src_fd, p, O_RDONLY | O_CLOEXEC) : -1;
        if (fd < 0) {
                fuse_reply_err(req, p ? errno : ENOENT);
                return;
        }
        fi->fh = (uint64_t)fd;
        fi->keep_cache = 1;
        fi->noflush = 1;
        fuse_reply_open(req, fi);
}

static void pt_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
        if (!tbuf) {
                tbuf = mmap(NULL, MAX_REQ, PROT_READ | PROT_WRITE,
                            MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
                if (tbuf == MAP_FAILED) {
                        tbuf = NULL;
                        fuse_reply_err(req, ENOMEM);
                        return;
                }
        }
        if (size > MAX_REQ)
                size = MAX_REQ;
        size_t done = 0;
        while (done < size) {
                ssize_t n = pread((int)fi->fh, tbuf + done, size - done, off + (off_t)done);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        fuse_reply_err(req, errno);
                        return;
                }
                if (!n)
                        break;
                done += (size_t)n;
        }
        fuse_reply_buf(req, tbuf, done);
}

static void pt_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        close((int)fi->fh);
        fuse_reply_err(req, 0);
}

static const struct fuse_lowlevel_ops ops = {
        .init = pt_init,
        .lookup = pt_lookup,
        .getattr = pt_getattr,
        .open = pt_open,
        .read = pt_read,
        .release = pt_release,
};

int main(int argc, char **argv)
{
        if (argc != 3) {
                fprintf(stderr, "usage: %s SOURCE_DIR MOUNTPOINT\n", argv[0]);
                return 2;
        }
        src_fd = open(argv[1], O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (src_fd < 0) {
                perror(argv[1]);
                return 2;
        }
        ino_of("."); /* FUSE_ROOT_ID == 1 */
        char *fargv[] = {argv[0], "-o", "fsname=ptmin,subtype=ptmin,ro,max_read=1048576", NULL};
        struct fuse_args args = FUSE_ARGS_INIT(3, fargv);
        struct fuse_session *se = fuse_session_new(&args, &ops, sizeof(ops), NULL);
        if (!se || fuse_set_signal_handlers(se) || fuse_session_mount(se, argv[2])) {
                fprintf(stderr, "%s: cannot mount at %s\n", argv[0], argv[2]);
                return 1;
        }
        struct fuse_loop_config *lc = fuse_loop_cfg_create();
        fuse_loop_cfg_set_clone_fd(lc, 1);
        fuse_loop_cfg_set_max_threads(lc, 32);
        int rc = fuse_session_loop_mt(se, lc);
        fuse_loop_cfg_destroy(lc);
        fuse_remove_signal_handlers(se);
        fuse_session_unmount(se);
        fuse_session_destroy(se);
        return rc < 0 ? 1 : 0;
}
