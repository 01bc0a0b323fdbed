/* The FUSE low-level operations: names and listings from the store (cached for the TTL), data
 * through the reader; writes and every other change go to fuse_write.c. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "node/node.h"
#include "client/reader.h"
#include "common/log.h"
#include "common/util.h"
#include "fuse/fuse_internal.h"
#include "store/store.h"

#define NAME_MAX_LEN 255
#define STATS_NAME   ".stats"

struct open_file {
        struct shoal_fuse_fh fh; /* SHOAL_FH_READ */
        pthread_mutex_t mu;      /* guards obj, which a stale read replaces */
        struct shoal_object obj;
        struct shoal_stream stream; /* a hint; racing readers of one handle cost speed only */
};

struct stats_handle {
        struct shoal_fuse_fh fh; /* SHOAL_FH_STATS */
        char *text;
        size_t len;
};

struct dir_handle {
        struct shoal_fuse_fh fh; /* SHOAL_FH_DIR */
        struct shoal_dirlist *list;
        uint64_t parent_ino;
        char path[SHOAL_KEY_MAX + 1];
};

struct thread_buf {
        size_t cap;
        void *mem;
};

/* Block pieces one read may reply from directly (1 MiB over 64 KiB blocks needs 17). */
#define PIN_MAX 24

static struct shoal_fuse *fs_of(fuse_req_t req)
{
        return fuse_req_userdata(req);
}

/* Puts H (of KIND) on the mount's list of open handles and into FI. */
static void fh_track(struct shoal_fuse *f, struct shoal_fuse_fh *h, uint32_t kind,
                     struct fuse_file_info *fi)
{
        h->kind = kind;
        pthread_mutex_lock(&f->handles_mu);
        shoal_list_push_front(&f->handles, &h->link);
        pthread_mutex_unlock(&f->handles_mu);
        fi->fh = (uint64_t)(uintptr_t)h;
}

/* Takes H off the list (a release, or an open whose answer nobody took). */
static void fh_untrack(struct shoal_fuse *f, struct shoal_fuse_fh *h)
{
        pthread_mutex_lock(&f->handles_mu);
        shoal_list_del(&h->link);
        pthread_mutex_unlock(&f->handles_mu);
}

/* Frees a handle that is off the list, whatever its kind. */
static void fh_free(struct shoal_fuse_fh *h)
{
        switch (h->kind) {
        case SHOAL_FH_READ: {
                struct open_file *o = (struct open_file *)h;
                pthread_mutex_destroy(&o->mu);
                free(o);
                break;
        }
        case SHOAL_FH_STATS: {
                struct stats_handle *sh = (struct stats_handle *)h;
                free(sh->text);
                free(sh);
                break;
        }
        case SHOAL_FH_DIR: {
                struct dir_handle *d = (struct dir_handle *)h;
                shoal_dirlist_put(d->list);
                free(d);
                break;
        }
        default:
                log_error("fuse", "handle of unknown kind 0x%x not freed", h->kind);
        }
}

void shoal_fuse_handles_free(struct shoal_fuse *f)
{
        unsigned n = 0;
        struct shoal_list *pos, *next;
        list_for_each (pos, next, &f->handles) {
                struct shoal_fuse_fh *h = shoal_list_entry(pos, struct shoal_fuse_fh, link);
                shoal_list_del(&h->link);
                fh_free(h);
                n++;
        }
        if (n)
                log_debug("fuse", "freed %u handles the kernel did not release before the end", n);
}

uint64_t shoal_fuse_op_begin(void)
{
        shoal_metric_inc(SHOAL_M_fuse_ops);
        return shoal_now_ns();
}

void shoal_fuse_op_end(uint64_t t0)
{
        shoal_metric_observe(SHOAL_M_fuse_op_dur, shoal_now_ns() - t0);
}

void shoal_fuse_reply_err(fuse_req_t req, uint64_t t0, int err)
{
        fuse_reply_err(req, err);
        shoal_fuse_op_end(t0);
}

void shoal_fuse_buf_free(void *p)
{
        struct thread_buf *b = p;
        if (!b)
                return;
        munmap(b->mem, b->cap);
        free(b);
}

/* This worker thread's buffer of at least NEED bytes. Allocated and faulted in once per thread
 * (DESIGN.md "Memory"), then reused by every request the thread serves. */
static void *thread_buf(struct shoal_fuse *f, size_t need)
{
        struct thread_buf *b = pthread_getspecific(f->buf_key);
        if (b && b->cap >= need)
                return b->mem;
        size_t cap = SHOAL_MAX(need, (size_t)f->cfg.max_read);
        cap = (cap + 4095) & ~(size_t)4095;
        void *mem = mmap(NULL, cap, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
        if (mem == MAP_FAILED)
                return NULL;
        shoal_mapped_fresh(mem, cap);
        if (!b) {
                b = calloc(1, sizeof(*b));
                if (!b || pthread_setspecific(f->buf_key, b)) {
                        free(b);
                        munmap(mem, cap);
                        return NULL;
                }
        } else {
                munmap(b->mem, b->cap);
        }
        b->mem = mem;
        b->cap = cap;
        return mem;
}

static void meta_done(uint64_t t0)
{
        shoal_metric_inc(SHOAL_M_meta_ops);
        shoal_metric_observe(SHOAL_M_meta_op_dur, shoal_now_ns() - t0);
}

void shoal_fuse_fill_stat(const struct shoal_fuse *f, uint64_t ino,
                          const struct shoal_inode_attr *a, struct stat *st)
{
        memset(st, 0, sizeof(*st));
        st->st_ino = ino;
        st->st_uid = f->uid;
        st->st_gid = f->gid;
        int64_t t = a->is_dir ? f->start_ns : a->mtime_ns;
        st->st_mtim.tv_sec = t / (int64_t)SHOAL_NS_PER_SEC;
        st->st_mtim.tv_nsec = t % (int64_t)SHOAL_NS_PER_SEC;
        st->st_atim = st->st_mtim;
        st->st_ctim = st->st_mtim;
        /* Tools size their buffers by st_blksize: ask for whole FUSE requests. */
        st->st_blksize = (blksize_t)f->cfg.max_read;
        /* Writable modes unless read-only: default_permissions makes the kernel check them. */
        mode_t w = f->cfg.read_only ? 0 : 0200;
        if (a->is_dir) {
                st->st_mode = S_IFDIR | 0555 | w;
                st->st_nlink = 2;
        } else {
                st->st_mode = S_IFREG | 0444 | w;
                st->st_nlink = 1;
                st->st_size = (off_t)a->size;
                st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
        }
}

static void stats_stat(const struct shoal_fuse *f, struct stat *st)
{
        struct shoal_inode_attr a = {.is_dir = false};
        a.mtime_ns = (int64_t)shoal_wall_ns();
        shoal_fuse_fill_stat(f, SHOAL_INO_STATS, &a, st);
}

static void attr_of_object(const struct shoal_object *o, struct shoal_inode_attr *a)
{
        memset(a, 0, sizeof(*a));
        a->size = o->size;
        a->mtime_ns = o->mtime_ns;
        shoal_strlcpy(a->version, o->version, sizeof(a->version));
}

static int store_stat(struct shoal_fuse *f, const char *key, struct shoal_object *o)
{
        uint64_t t0 = shoal_now_ns();
        int rc = shoal_store_stat(f->node->store, key, o);
        meta_done(t0);
        return rc == -EINVAL ? -ENOENT : rc;
}

struct list_ctx {
        struct shoal_dirlist *l;
        size_t prefix_len;
        bool root;
        bool any; /* probe: stop at the first entry */
        int err;
};

static int list_cb(void *arg, const struct shoal_list_entry *e)
{
        struct list_ctx *c = arg;
        if (c->any) {
                c->err = 1;
                return 1;
        }
        const char *name = e->key + c->prefix_len;
        size_t len = strlen(name);
        if (e->is_prefix && len)
                len--; /* drop the delimiter */
        /* Names a file system cannot show: a folder-marker object ("a/"), ".", "..", over-long
         * names, and .stats in the root, which the mount's own file takes. */
        if (!len || len > NAME_MAX_LEN || memchr(name, '/', len) || (len == 1 && name[0] == '.') ||
            (len == 2 && !memcmp(name, "..", 2)) ||
            (c->root && len == strlen(STATS_NAME) && !memcmp(name, STATS_NAME, len)))
                return 0;
        int rc = shoal_dirlist_add(c->l, name, len, e->is_prefix, e->size, e->mtime_ns, e->version);
        if (rc) {
                c->err = rc;
                return rc;
        }
        return 0;
}

/* Lists folder PATH ("" for the root) from the store and publishes it as INO's listing. Returns
 * the listing with a reference for the caller, or NULL with *ERR set. */
static struct shoal_dirlist *list_folder(struct shoal_fuse *f, uint64_t ino, const char *path,
                                         int *err)
{
        char prefix[SHOAL_KEY_MAX + 2];
        snprintf(prefix, sizeof(prefix), "%s%s", path, *path ? "/" : "");
        struct list_ctx c = {
                .l = shoal_dirlist_new(),
                .prefix_len = strlen(prefix),
                .root = !*path,
        };
        if (!c.l) {
                *err = -ENOMEM;
                return NULL;
        }
        uint64_t t0 = shoal_now_ns();
        int rc = shoal_store_list(f->node->store, prefix, "/", NULL, list_cb, &c);
        meta_done(t0);
        if (rc < 0 || c.err < 0) {
                log_ratelimited(SHOAL_LOG_WARN, "fuse", "listing %s failed: %s",
                                *prefix ? prefix : "/", strerror(c.err < 0 ? -c.err : -rc));
                shoal_dirlist_put(c.l);
                *err = -EIO;
                return NULL;
        }
        /* Folders made by mkdir are there until the store has them (or rmdir). */
        rc = shoal_fuse_local_dirs_list(f, path, c.l);
        if (rc) {
                shoal_dirlist_put(c.l);
                *err = rc;
                return NULL;
        }
        shoal_dirlist_seal(c.l);
        shoal_itable_dirlist_set(f->it, ino, c.l);
        return c.l;
}

static struct shoal_dirlist *folder_list(struct shoal_fuse *f, uint64_t ino, const char *path,
                                         int *err)
{
        struct shoal_dirlist *l = shoal_itable_dirlist_get(f->it, ino);
        return l ? l : list_folder(f, ino, path, err);
}

/* What PATH is, without a listing of its parent: an object, a folder (some key starts with
 * "PATH/"; a folder hides an object of the same name, as in listings), or -ENOENT. */
int shoal_fuse_probe(struct shoal_fuse *f, const char *path, struct shoal_inode_attr *a)
{
        struct shoal_object o;
        int src = store_stat(f, path, &o);
        char prefix[SHOAL_KEY_MAX + 2];
        snprintf(prefix, sizeof(prefix), "%s/", path);
        struct list_ctx c = {.any = true};
        uint64_t t0 = shoal_now_ns();
        int lrc = shoal_store_list(f->node->store, prefix, "/", NULL, list_cb, &c);
        meta_done(t0);
        if (c.err > 0) {
                memset(a, 0, sizeof(*a));
                a->is_dir = true;
                return 0;
        }
        if (!src) {
                attr_of_object(&o, a);
                return 0;
        }
        if (src != -ENOENT)
                return -EIO;
        return lrc < 0 && lrc != -EINVAL ? -EIO : -ENOENT;
}

int shoal_fuse_child_path(const char *parent, const char *name, char *out, size_t outlen)
{
        size_t nl = strlen(name);
        if (nl > NAME_MAX_LEN)
                return -ENAMETOOLONG;
        int n = snprintf(out, outlen, "%s%s%s", parent, *parent ? "/" : "", name);
        if (n < 0 || (size_t)n >= outlen || n > SHOAL_KEY_MAX)
                return -ENAMETOOLONG;
        if (!shoal_key_valid(out, (size_t)n))
                return -ENOENT;
        return 0;
}

/* Being written here: the writer's size, asked for again each time, and the name too, which an
 * abandoned upload takes away. */
static void reply_writing_entry(fuse_req_t req, struct shoal_fuse *f, struct fuse_entry_param *e,
                                uint64_t ino, const struct shoal_inode_attr *a)
{
        e->ino = ino;
        e->attr_timeout = 0;
        e->entry_timeout = 0;
        shoal_fuse_fill_stat(f, ino, a, &e->attr);
        if (fuse_reply_entry(req, e) == -ENOENT)
                shoal_itable_forget(f->it, ino, 1);
}

/* What NAME in folder PARENT (PATH in full) is: a folder made here, an entry of the folder's
 * listing when one is held, else what the store says. Returns 0 or a negative errno. */
static int lookup_attr(struct shoal_fuse *f, fuse_ino_t parent, const char *name, const char *path,
                       struct shoal_inode_attr *a)
{
        if (shoal_fuse_local_dir(f, path)) {
                memset(a, 0, sizeof(*a));
                a->is_dir = true;
                return 0;
        }
        struct shoal_dirlist *l = shoal_itable_dirlist_get(f->it, parent);
        if (!l)
                return shoal_fuse_probe(f, path, a);
        const struct shoal_dirent *d = shoal_dirlist_find(l, name);
        int rc = -ENOENT;
        if (d) {
                memset(a, 0, sizeof(*a));
                a->is_dir = d->is_dir;
                a->size = d->size;
                a->mtime_ns = d->mtime_ns;
                shoal_strlcpy(a->version, d->version, sizeof(a->version));
                rc = 0;
        }
        shoal_dirlist_put(l);
        return rc;
}

/* The path of NAME in folder PARENT into PATH (SHOAL_KEY_MAX + 1 bytes). Returns 0 or the errno
 * to reply (positive). */
static int lookup_path(struct shoal_fuse *f, fuse_ino_t parent, const char *name, char *path)
{
        char ppath[SHOAL_KEY_MAX + 1];
        bool is_dir = false;
        int rc = shoal_itable_path(f->it, parent, ppath, sizeof(ppath), &is_dir);
        if (rc)
                return rc == -ENOENT ? ESTALE : -rc;
        if (!is_dir)
                return ENOTDIR;
        rc = shoal_fuse_child_path(ppath, name, path, SHOAL_KEY_MAX + 1);
        return rc == -ENOENT ? -1 : rc ? -rc : 0; /* -1: no key can have it, a negative entry */
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        struct fuse_entry_param e;
        memset(&e, 0, sizeof(e));
        e.attr_timeout = f->ttl_s;
        e.entry_timeout = f->ttl_s;
        if (parent == SHOAL_INO_ROOT && !strcmp(name, STATS_NAME)) {
                e.ino = SHOAL_INO_STATS;
                e.attr_timeout = 0;
                stats_stat(f, &e.attr);
                fuse_reply_entry(req, &e);
                shoal_fuse_op_end(t0);
                return;
        }
        char path[SHOAL_KEY_MAX + 1];
        struct shoal_inode_attr a;
        uint64_t ino;
        int err = lookup_path(f, parent, name, path);
        int rc = err < 0 ? -ENOENT : 0;
        if (err > 0) {
                shoal_fuse_reply_err(req, t0, err);
                return;
        }
        if (!rc && !shoal_itable_ref_writing(f->it, path, &a, &ino)) {
                reply_writing_entry(req, f, &e, ino, &a);
                shoal_fuse_op_end(t0);
                return;
        }
        if (!rc)
                rc = lookup_attr(f, parent, name, path, &a);
        if (rc == -ENOENT) {
                /* A negative entry: the kernel remembers the absence for the TTL. */
                fuse_reply_entry(req, &e);
                shoal_fuse_op_end(t0);
                return;
        }
        if (!rc)
                rc = shoal_itable_ref(f->it, path, &a, &ino);
        if (rc) {
                shoal_fuse_reply_err(req, t0, -rc);
                return;
        }
        e.ino = ino;
        shoal_fuse_fill_stat(f, ino, &a, &e.attr);
        if (fuse_reply_entry(req, &e) == -ENOENT)
                shoal_itable_forget(f->it, ino, 1); /* the request was interrupted */
        shoal_fuse_op_end(t0);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
        uint64_t t0 = shoal_fuse_op_begin();
        shoal_itable_forget(fs_of(req)->it, ino, nlookup);
        fuse_reply_none(req);
        shoal_fuse_op_end(t0);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        for (size_t i = 0; i < count; i++)
                shoal_itable_forget(f->it, forgets[i].ino, forgets[i].nlookup);
        fuse_reply_none(req);
        shoal_fuse_op_end(t0);
}

/* Fresh attributes of INO: from the table within the TTL, else from a stat of the object. */
int shoal_fuse_fresh_attr(struct shoal_fuse *f, uint64_t ino, struct shoal_inode_attr *a,
                          char *path, size_t pathlen)
{
        bool fresh = false, is_dir = false;
        int rc = shoal_itable_getattr(f->it, ino, a, &fresh);
        if (rc)
                return rc;
        rc = shoal_itable_path(f->it, ino, path, pathlen, &is_dir);
        if (rc || fresh)
                return rc;
        struct shoal_object o;
        rc = store_stat(f, path, &o);
        if (rc)
                return rc == -ENOENT ? rc : -EIO;
        attr_of_object(&o, a);
        shoal_itable_setattr(f->it, ino, a);
        return 0;
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        struct stat st;
        if (ino == SHOAL_INO_STATS) {
                stats_stat(f, &st);
                fuse_reply_attr(req, &st, 0);
                shoal_fuse_op_end(t0);
                return;
        }
        struct shoal_inode_attr a;
        char path[SHOAL_KEY_MAX + 1];
        int rc = shoal_fuse_fresh_attr(f, ino, &a, path, sizeof(path));
        if (rc) {
                shoal_fuse_reply_err(req, t0, -rc);
                return;
        }
        shoal_fuse_fill_stat(f, ino, &a, &st);
        fuse_reply_attr(req, &st, f->ttl_s);
        shoal_fuse_op_end(t0);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                       struct fuse_file_info *fi)
{
        shoal_fuse_setattr(req, ino, attr, to_set, fi);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
        shoal_fuse_refuse(req, shoal_fuse_op_begin(), ENOTSUP, "mknod", name,
                          "only regular files, made with open(O_CREAT)");
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
        shoal_fuse_refuse(req, shoal_fuse_op_begin(), ENOTSUP, "symlink", name,
                          "an object store has no links");
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
                      const char *newname, unsigned int flags)
{
        shoal_fuse_refuse(req, shoal_fuse_op_begin(), ENOTSUP, "rename", name,
                          "objects cannot be renamed in place (copy, then delete)");
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
        shoal_fuse_refuse(req, shoal_fuse_op_begin(), ENOTSUP, "link", newname,
                          "an object store has no links");
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
                        size_t size, int flags)
{
        shoal_fuse_refuse(req, shoal_fuse_op_begin(), ENOTSUP, "setxattr", name,
                          "objects carry no extended attributes here");
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
        shoal_fuse_refuse(req, shoal_fuse_op_begin(), ENOTSUP, "removexattr", name,
                          "objects carry no extended attributes here");
}

static int open_stats(struct shoal_fuse *f, struct fuse_file_info *fi)
{
        struct shoal_metrics_snap cur;
        int rc = shoal_metrics_snap_take(&cur);
        if (rc)
                return rc;
        struct stats_handle *h = calloc(1, sizeof(*h));
        if (!h) {
                shoal_metrics_snap_free(&cur);
                return -ENOMEM;
        }
        pthread_mutex_lock(&f->stats_mu);
        h->text = shoal_metrics_render_stats(&cur, f->have_prev ? &f->stats_prev : NULL);
        if (f->have_prev)
                shoal_metrics_snap_free(&f->stats_prev);
        f->stats_prev = cur;
        f->have_prev = true;
        pthread_mutex_unlock(&f->stats_mu);
        if (!h->text) {
                free(h);
                return -ENOMEM;
        }
        h->len = strlen(h->text);
        /* direct_io: the kernel asks for the bytes whatever size getattr said (0). */
        fi->direct_io = 1;
        fh_track(f, &h->fh, SHOAL_FH_STATS, fi);
        return 0;
}

static void op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        if ((fi->flags & O_ACCMODE) != O_RDONLY || (fi->flags & O_TRUNC)) {
                shoal_fuse_open_write(req, ino, fi, t0);
                return;
        }
        int rc;
        if (ino == SHOAL_INO_STATS) {
                rc = open_stats(f, fi);
                if (rc) {
                        shoal_fuse_reply_err(req, t0, -rc);
                        return;
                }
                if (fuse_reply_open(req, fi) == -ENOENT) { /* interrupted: no release comes */
                        struct shoal_fuse_fh *h = (struct shoal_fuse_fh *)(uintptr_t)fi->fh;
                        fh_untrack(f, h);
                        fh_free(h);
                }
                shoal_fuse_op_end(t0);
                return;
        }
        /* The first open comes after INIT was answered, and the kernel sets a file's readahead
         * window after open returns: the right moment to raise it. */
        if (!__atomic_exchange_n(&f->ra_tuned, 1, __ATOMIC_RELAXED))
                shoal_fuse_tune_readahead(f);
        struct shoal_inode_attr a;
        char path[SHOAL_KEY_MAX + 1];
        rc = shoal_fuse_fresh_attr(f, ino, &a, path, sizeof(path));
        if (rc) {
                shoal_fuse_reply_err(req, t0, -rc);
                return;
        }
        if (a.is_dir) {
                shoal_fuse_reply_err(req, t0, EISDIR);
                return;
        }
        if (shoal_itable_is_writing(f->it, path)) {
                shoal_fuse_refuse(req, t0, EPERM, "open for reading", path,
                                  "it is being written; it can be read once it is closed");
                return;
        }
        struct open_file *h = calloc(1, sizeof(*h));
        if (!h) {
                shoal_fuse_reply_err(req, t0, ENOMEM);
                return;
        }
        pthread_mutex_init(&h->mu, NULL);
        shoal_strlcpy(h->obj.key, path, sizeof(h->obj.key));
        shoal_strlcpy(h->obj.version, a.version, sizeof(h->obj.version));
        h->obj.size = a.size;
        h->obj.mtime_ns = a.mtime_ns;
        fh_track(f, &h->fh, SHOAL_FH_READ, fi);
        /* Objects are immutable per version: the page cache stays valid while it is unchanged. */
        fi->keep_cache = shoal_itable_note_open(f->it, ino, a.version);
        fi->noflush = 1;
        if (fuse_reply_open(req, fi) == -ENOENT) {
                fh_untrack(f, &h->fh);
                fh_free(&h->fh);
        }
        shoal_fuse_op_end(t0);
}

static void read_stats(fuse_req_t req, uint64_t t0, struct stats_handle *h, size_t size, off_t off)
{
        size_t o = (size_t)off < h->len ? (size_t)off : h->len;
        size_t n = SHOAL_MIN(size, h->len - o);
        /* The kernel may complete this read, and the reader close the file (release frees H),
         * while writev is still returning; answer from this thread's buffer, not from H. */
        char *buf = thread_buf(fs_of(req), n);
        if (!buf) {
                shoal_fuse_reply_err(req, t0, ENOMEM);
                return;
        }
        memcpy(buf, h->text + o, n);
        fuse_reply_buf(req, buf, n);
        shoal_fuse_op_end(t0);
}

/* Re-stats H's object after the reader said it changed. Returns 0 or a negative errno. */
static int restat(struct shoal_fuse *f, fuse_ino_t ino, struct open_file *h,
                  struct shoal_object *obj)
{
        struct shoal_object o;
        int rc = store_stat(f, obj->key, &o);
        if (rc)
                return rc;
        log_ratelimited(SHOAL_LOG_INFO, "fuse", "%s changed while open (version %s -> %s)",
                        obj->key, obj->version, o.version);
        pthread_mutex_lock(&h->mu);
        h->obj = o;
        pthread_mutex_unlock(&h->mu);
        *obj = o;
        struct shoal_inode_attr a;
        attr_of_object(&o, &a);
        shoal_itable_setattr(f->it, ino, &a);
        return 0;
}

/* One read of a file: the pieces pinned in the reader's buffers, then the rest copied into BUF. */
struct read_state {
        struct shoal_object obj;
        struct shoal_read_pin pins[PIN_MAX];
        unsigned np;
        size_t pinned, done;
};

/* Pins what the reader's buffers hold (or are filling) of the request: replied from where it
 * lies, one copy less than copying it into the thread's buffer. */
static void read_pin(struct shoal_fuse *f, struct open_file *h, struct read_state *rs, off_t off,
                     size_t size)
{
        rs->np = 0;
        rs->pinned = 0;
        long pn = shoal_reader_read_pinned(f->node->reader, &rs->obj, (uint64_t)off, size, rs->pins,
                                           PIN_MAX, &rs->np, &h->stream);
        if (pn > 0)
                rs->pinned = (size_t)pn;
        else
                rs->np = 0;
}

static bool read_short(const struct read_state *rs, off_t off, size_t size)
{
        return rs->pinned + rs->done < size && (uint64_t)off + rs->pinned + rs->done < rs->obj.size;
}

/* Copies the rest of the request into BUF. A short answer is end-of-file to the kernel, so the
 * request is filled completely (up to the end of the object) or fails; a busy buffer layer is
 * waited out, briefly. Returns the last result of the reader (negative: the request failed). */
static long read_rest(struct shoal_fuse *f, fuse_ino_t ino, struct open_file *h,
                      struct read_state *rs, off_t off, size_t size, char *buf)
{
        unsigned busy = 0;
        bool restated = false;
        long n = 0;
        rs->done = 0;
        while (read_short(rs, off, size)) {
                /* The pinned read already told readahead about this request. */
                uint64_t at = (uint64_t)off + rs->pinned + rs->done;
                n = shoal_reader_read(f->node->reader, &rs->obj, at, size - rs->pinned - rs->done,
                                      buf + rs->done, rs->pinned ? NULL : &h->stream);
                if (n > 0) {
                        rs->done += (size_t)n;
                        continue;
                }
                if (!n)
                        break;
                if (n == -ESTALE && !restated) {
                        restated = true;
                        if (restat(f, ino, h, &rs->obj))
                                break;
                        /* never mix two versions in one answer */
                        shoal_reader_unpin(f->node->reader, rs->pins, rs->np);
                        rs->np = 0;
                        rs->pinned = 0;
                        rs->done = 0;
                        continue;
                }
                if ((n == -EBUSY || n == -EAGAIN) && busy++ < 200) {
                        shoal_sleep_ns(SHOAL_NS_PER_MS);
                        continue;
                }
                break;
        }
        return n;
}

static void read_reply(fuse_req_t req, struct shoal_fuse *f, struct read_state *rs, size_t size,
                       char *buf)
{
        struct iovec iov[PIN_MAX + 1];
        for (unsigned i = 0; i < rs->np; i++)
                iov[i] = (struct iovec){.iov_base = (void *)rs->pins[i].data,
                                        .iov_len = rs->pins[i].len};
        iov[rs->np] = (struct iovec){.iov_base = buf, .iov_len = rs->done};
        shoal_metric_inc(SHOAL_M_fuse_reads);
        shoal_metric_add(SHOAL_M_fuse_read_bytes, rs->pinned + rs->done);
        if (size >= SHOAL_MiB)
                shoal_metric_inc(SHOAL_M_fuse_read_size_1m);
        fuse_reply_iov(req, iov, (int)rs->np + (rs->done ? 1 : 0));
        shoal_reader_unpin(f->node->reader, rs->pins, rs->np);
}

static void op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                    struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        if (ino == SHOAL_INO_STATS) {
                read_stats(req, t0, (struct stats_handle *)(uintptr_t)fi->fh, size, off);
                return;
        }
        if (shoal_fh_kind(fi) != SHOAL_FH_READ) {
                shoal_fuse_refuse(req, t0, EPERM, "read", NULL,
                                  "a file open for writing cannot be read until it is closed");
                return;
        }
        struct open_file *h = (struct open_file *)(uintptr_t)fi->fh;
        struct read_state rs;
        pthread_mutex_lock(&h->mu);
        rs.obj = h->obj;
        pthread_mutex_unlock(&h->mu);
        /* Warm: straight from the disk cache's locked pages, checked once per load. */
        if (shoal_fuse_read_cached(req, f, &rs.obj, (uint64_t)off, size)) {
                shoal_fuse_op_end(t0);
                return;
        }
        char *buf = thread_buf(f, size);
        if (!buf) {
                shoal_fuse_reply_err(req, t0, ENOMEM);
                return;
        }
        read_pin(f, h, &rs, off, size);
        long n = read_rest(f, ino, h, &rs, off, size, buf);
        if (n < 0 && read_short(&rs, off, size)) {
                shoal_reader_unpin(f->node->reader, rs.pins, rs.np);
                log_ratelimited(SHOAL_LOG_ERROR, "fuse", "read %s [%lld+%zu] failed: %s",
                                rs.obj.key, (long long)off, size, strerror((int)-n));
                shoal_fuse_reply_err(req, t0, EIO);
                return;
        }
        read_reply(req, f, &rs, size, buf);
        shoal_fuse_op_end(t0);
}

static void op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        if (shoal_fh_kind(fi) == SHOAL_FH_WRITE) {
                shoal_fuse_release_write(req, fi, t0);
                return;
        }
        struct shoal_fuse_fh *h = (struct shoal_fuse_fh *)(uintptr_t)fi->fh;
        if (h) {
                fh_untrack(fs_of(req), h);
                fh_free(h);
        }
        fuse_reply_err(req, 0);
        shoal_fuse_op_end(t0);
}

static void op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        struct dir_handle *h = calloc(1, sizeof(*h));
        if (!h) {
                shoal_fuse_reply_err(req, t0, ENOMEM);
                return;
        }
        bool is_dir = false;
        int rc = shoal_itable_path(f->it, ino, h->path, sizeof(h->path), &is_dir);
        if (!rc && !is_dir)
                rc = -ENOTDIR;
        if (!rc)
                h->list = folder_list(f, ino, h->path, &rc);
        if (rc) {
                free(h);
                {
                        shoal_fuse_reply_err(req, t0, -rc);
                        return;
                }
        }
        char parent[SHOAL_KEY_MAX + 1];
        shoal_strlcpy(parent, h->path, sizeof(parent));
        char *slash = strrchr(parent, '/');
        if (slash)
                *slash = '\0';
        else
                parent[0] = '\0';
        h->parent_ino = *h->path ? shoal_itable_ino_of(f->it, parent) : SHOAL_INO_ROOT;
        fh_track(f, &h->fh, SHOAL_FH_DIR, fi);
        if (fuse_reply_open(req, fi) == -ENOENT) {
                fh_untrack(f, &h->fh);
                fh_free(&h->fh);
        }
        shoal_fuse_op_end(t0);
}

static void op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
                       struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        struct dir_handle *h = (struct dir_handle *)(uintptr_t)fi->fh;
        char *buf = thread_buf(f, size);
        if (!buf) {
                shoal_fuse_reply_err(req, t0, ENOMEM);
                return;
        }
        size_t pos = 0;
        /* Offsets: 0 ".", 1 "..", 2 + i the i-th child of the listing taken at opendir. */
        for (uint64_t i = (uint64_t)off; i < h->list->n + 2; i++) {
                struct stat st;
                memset(&st, 0, sizeof(st));
                const char *name;
                char path[SHOAL_KEY_MAX + NAME_MAX_LEN + 2];
                if (i < 2) {
                        name = i ? ".." : ".";
                        st.st_ino = i ? h->parent_ino : ino;
                        st.st_mode = S_IFDIR;
                } else {
                        const struct shoal_dirent *d = &h->list->ents[i - 2];
                        name = d->name;
                        snprintf(path, sizeof(path), "%s%s%s", h->path, *h->path ? "/" : "", name);
                        st.st_ino = shoal_itable_ino_of(f->it, path);
                        st.st_mode = d->is_dir ? S_IFDIR : S_IFREG;
                }
                size_t n = fuse_add_direntry(req, buf + pos, size - pos, name, &st, (off_t)(i + 1));
                if (n > size - pos)
                        break;
                pos += n;
        }
        fuse_reply_buf(req, buf, pos);
        shoal_fuse_op_end(t0);
}

static void op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse_fh *h = (struct shoal_fuse_fh *)(uintptr_t)fi->fh;
        if (h) {
                fh_untrack(fs_of(req), h);
                fh_free(h);
        }
        fuse_reply_err(req, 0);
        shoal_fuse_op_end(t0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        struct statvfs st;
        memset(&st, 0, sizeof(st));
        st.f_bsize = f->block_size;
        st.f_frsize = f->block_size;
        st.f_namemax = NAME_MAX_LEN;
        st.f_flag = f->cfg.read_only ? ST_RDONLY : 0;
        fuse_reply_statfs(req, &st);
        shoal_fuse_op_end(t0);
}

static void op_init(void *userdata, struct fuse_conn_info *conn)
{
        struct shoal_fuse *f = userdata;
        uint32_t mr = f->cfg.max_read;
        log_debug("fuse", "kernel offers protocol %u.%u, max_readahead %u, capable 0x%x",
                  conn->proto_major, conn->proto_minor, conn->max_readahead, conn->capable);
        conn->max_write = mr;
        conn->max_read = mr;
        /* The kernel only lets us lower this; mount.c raises the bdi's read_ahead_kb. */
        conn->max_readahead = SHOAL_MIN(conn->max_readahead, 4u * SHOAL_MiB);
        /* Enough background requests for readahead and async direct I/O of many streams. */
        conn->max_background = 64;
        conn->congestion_threshold = 48;
        conn->want &=
                ~(unsigned)(FUSE_CAP_SPLICE_READ | FUSE_CAP_SPLICE_WRITE | FUSE_CAP_SPLICE_MOVE |
                            FUSE_CAP_READDIRPLUS | FUSE_CAP_WRITEBACK_CACHE);
        if (conn->capable & FUSE_CAP_ASYNC_READ)
                conn->want |= FUSE_CAP_ASYNC_READ;
        /* O_TRUNC arrives with open instead of as a truncate before it: an overwrite is then
         * one open that the write path can judge. */
        if (conn->capable & FUSE_CAP_ATOMIC_O_TRUNC)
                conn->want |= FUSE_CAP_ATOMIC_O_TRUNC;
        if (conn->capable & FUSE_CAP_ASYNC_DIO)
                conn->want |= FUSE_CAP_ASYNC_DIO;
        if (conn->capable & FUSE_CAP_PARALLEL_DIROPS)
                conn->want |= FUSE_CAP_PARALLEL_DIROPS;
}

const struct fuse_lowlevel_ops shoal_fuse_ops = {
        .init = op_init,
        .lookup = op_lookup,
        .forget = op_forget,
        .forget_multi = op_forget_multi,
        .getattr = op_getattr,
        .setattr = op_setattr,
        .mknod = op_mknod,
        .mkdir = shoal_fuse_mkdir,
        .unlink = shoal_fuse_unlink,
        .rmdir = shoal_fuse_rmdir,
        .symlink = op_symlink,
        .rename = op_rename,
        .link = op_link,
        .open = op_open,
        .read = op_read,
        .write = shoal_fuse_write,
        .flush = shoal_fuse_flush,
        .fsync = shoal_fuse_fsync,
        .release = op_release,
        .opendir = op_opendir,
        .readdir = op_readdir,
        .releasedir = op_releasedir,
        .statfs = op_statfs,
        .setxattr = op_setxattr,
        .removexattr = op_removexattr,
        .create = shoal_fuse_create,
        .fallocate = shoal_fuse_fallocate,
};
