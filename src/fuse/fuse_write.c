/* The mount's write path [W1] — mountpoint-s3's model (docs/writes.md):
 *
 *   - open(O_CREAT) of a name that does not exist starts an upload; with --allow-overwrite,
 *     open(O_TRUNC) of an existing object starts one that replaces it at commit;
 *   - writes must come in order from offset 0 (EINVAL otherwise, and the upload is abandoned);
 *     ftruncate and fallocate may extend a file being written (fio lays out its files so): the
 *     extension reads as zeros, and the bytes up to it go to the store as zeros at commit;
 *   - close (the opener's flush) or fsync commits: it returns once the store has the whole
 *     object, or EIO — the name then shows what it showed before, never part of the new data;
 *   - a writer that dies from a signal commits nothing;
 *   - mkdir makes a folder that lives in this mount until a file in it reaches the store;
 *     unlink needs --allow-delete; rename, links and chmod are refused.
 *
 * The errno of each refusal follows mountpoint-s3 where it has one: EPERM for what the mount's
 * flags or the model forbid (overwrite, delete, reading a file being written), EINVAL for an
 * out-of-order write, ENOTSUP for operations an object store has no analog for (rename, links,
 * xattrs), EEXIST for O_EXCL on an existing name. Each refusal logs one line. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/falloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/node.h"
#include "client/push.h"
#include "common/log.h"
#include "common/util.h"
#include "fuse/fuse_internal.h"
#include "store/store.h"

#define STATS_NAME ".stats"

enum wstate {
        W_OPEN,
        W_DONE,
        W_FAILED
};

struct write_file {
        uint32_t kind;      /* SHOAL_FH_WRITE */
        pthread_mutex_t mu; /* one request at a time per handle */
        struct shoal_upload *up;
        struct shoal_push_stage *stage; /* write-through: pushed to the group at commit [W3] */
        enum wstate state;
        int err; /* errno for writes after the upload ended badly */
        uint64_t ino;
        uint64_t written;
        uint64_t size; /* >= written: the size ftruncate or fallocate gave it (zeros beyond) */
        pid_t tgid;    /* the opener's process: its close commits */
        bool flushed;  /* some close reached us: the file had a descriptor */
        char key[SHOAL_KEY_MAX + 1];
        char parent[SHOAL_KEY_MAX + 1];
        struct shoal_list link; /* f->writes */
};

static struct shoal_fuse *fs_of(fuse_req_t req)
{
        return fuse_req_userdata(req);
}

/* Every refusal gets its line, up to a burst per second; beyond it a loop of refused calls
 * cannot flood the log, and the next line says how many went unlogged. */
#define REFUSE_LINES_PER_S 50

static bool refuse_log_ok(unsigned *dropped)
{
        static long long window;
        static unsigned lines, skipped;
        static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
        long long now = (long long)(shoal_now_ns() / SHOAL_NS_PER_SEC);
        pthread_mutex_lock(&mu);
        if (now != window) {
                window = now;
                lines = 0;
        }
        bool ok = lines < REFUSE_LINES_PER_S;
        if (ok) {
                lines++;
                *dropped = skipped;
                skipped = 0;
        } else {
                skipped++;
        }
        pthread_mutex_unlock(&mu);
        return ok;
}

void shoal_fuse_refuse(fuse_req_t req, uint64_t t0, int err, const char *what, const char *name,
                       const char *why)
{
        struct shoal_fuse *f = fs_of(req);
        if (f->cfg.read_only) {
                err = EROFS;
                why = "read-only file system";
        }
        shoal_metric_inc(SHOAL_M_fuse_write_refused);
        unsigned dropped = 0;
        if (refuse_log_ok(&dropped)) {
                char more[64] = "";
                if (dropped)
                        snprintf(more, sizeof(more), " [%u refusals not logged before]", dropped);
                log_warn("fuse", "refused %s%s%s: %s (%s)%s", what, name ? " of " : "",
                         name ? name : "", why, strerror(err), more);
        }
        shoal_fuse_reply_err(req, t0, err);
}

/* The errno an application sees for a store error at begin. */
static int begin_errno(int rc)
{
        switch (rc) {
        case -EEXIST:
        case -ENOTDIR:
        case -EISDIR:
        case -EINVAL:
        case -EACCES:
        case -ENOSPC:
        case -EDQUOT:
        case -EROFS:
        case -ENOMEM:
                return -rc;
        default:
                return EIO;
        }
}

/* --- who is closing ------------------------------------------------------------------------ */

struct task_info {
        pid_t tgid; /* 0: unknown */
        bool exiting;
        int signal; /* the signal that is killing it, or 0 */
};

/* What the kernel says of thread PID (the sender of a FUSE request): its process, and whether it
 * is dying from a signal — then its files are being closed by the exit, not by the program. */
static void task_info(pid_t pid, struct task_info *ti)
{
        memset(ti, 0, sizeof(*ti));
        if (pid <= 0)
                return;
        char path[64], buf[1024];
        snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return;
        ssize_t n = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (n <= 0)
                return;
        buf[n] = '\0';
        /* Fields after the command's ')' (which may itself hold ')' and spaces): 3 state, ...
         * 9 flags, ..., 52 exit_code (the wait status once exiting; 0 without ptrace rights). */
        char *p = strrchr(buf, ')');
        unsigned long long flags = 0;
        long long exit_code = 0;
        int field = 2;
        char *save = NULL;
        for (char *tok = p ? strtok_r(p + 1, " ", &save) : NULL; tok;
             tok = strtok_r(NULL, " ", &save)) {
                field++;
                if (field == 9)
                        flags = strtoull(tok, NULL, 10);
                else if (field == 52)
                        exit_code = strtoll(tok, NULL, 10);
        }
        ti->exiting = flags & 0x4; /* PF_EXITING */
        int sig = (int)(exit_code & 0x7f);
        if (ti->exiting && sig && sig != 0x7f)
                ti->signal = sig;

        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
        FILE *fp = fopen(path, "re");
        if (!fp)
                return;
        char line[256];
        while (fgets(line, sizeof(line), fp))
                if (!strncmp(line, "Tgid:", 5)) {
                        ti->tgid = (pid_t)strtol(line + 5, NULL, 10);
                        break;
                }
        fclose(fp);
}

/* --- handles -------------------------------------------------------------------------------- */

static void parent_of(const char *path, char *out, size_t outlen)
{
        shoal_strlcpy(out, path, outlen);
        char *slash = strrchr(out, '/');
        if (slash)
                *slash = '\0';
        else
                out[0] = '\0';
}

static uint64_t parent_ino(struct shoal_fuse *f, const char *parent)
{
        return *parent ? shoal_itable_ino_of(f->it, parent) : SHOAL_INO_ROOT;
}

static struct write_file *handle_new(fuse_req_t req, const char *path, uint64_t ino,
                                     struct shoal_upload *up)
{
        struct shoal_fuse *f = fs_of(req);
        struct write_file *h = calloc(1, sizeof(*h));
        if (!h)
                return NULL;
        h->kind = SHOAL_FH_WRITE;
        pthread_mutex_init(&h->mu, NULL);
        h->up = up;
        h->ino = ino;
        shoal_strlcpy(h->key, path, sizeof(h->key));
        parent_of(path, h->parent, sizeof(h->parent));
        struct task_info ti;
        task_info(fuse_req_ctx(req)->pid, &ti);
        h->tgid = ti.tgid;
        pthread_mutex_lock(&f->writes_mu);
        shoal_list_push_front(&f->writes, &h->link);
        pthread_mutex_unlock(&f->writes_mu);
        return h;
}

static void handle_free(struct shoal_fuse *f, struct write_file *h)
{
        pthread_mutex_lock(&f->writes_mu);
        shoal_list_del(&h->link);
        pthread_mutex_unlock(&f->writes_mu);
        shoal_push_stage_abort(h->stage); /* never committed: nothing is pushed */
        pthread_mutex_destroy(&h->mu);
        free(h);
}

/* Ends H's upload without an object (H->mu held). */
static void abandon(struct shoal_fuse *f, struct write_file *h, int err, const char *why)
{
        if (h->up) {
                shoal_store_upload_abort(h->up);
                h->up = NULL;
        }
        shoal_push_stage_abort(h->stage);
        h->stage = NULL;
        h->state = W_FAILED;
        h->err = err;
        shoal_itable_set_writing(f->it, h->ino, false);
        shoal_itable_expire(f->it, h->ino);
        shoal_metric_inc(SHOAL_M_fuse_write_aborted);
        log_warn("fuse", "%s abandoned after %" PRIu64 " bytes: %s; no object was written", h->key,
                 h->written, why);
}

static int append_errno(int rc)
{
        return rc == -ENOSPC || rc == -EDQUOT || rc == -EFBIG || rc == -ENOMEM ? -rc : EIO;
}

/* Appends BUF to H's upload and staging file (H->mu held). On failure the upload is abandoned;
 * returns 0 or the errno the application gets. */
static int append(struct shoal_fuse *f, struct write_file *h, const char *buf, size_t size)
{
        int rc = shoal_store_upload_append(h->up, buf, size);
        if (rc) {
                int err = append_errno(rc);
                abandon(f, h, err, strerror(-rc));
                shoal_metric_inc(SHOAL_M_fuse_write_errors);
                return err;
        }
        shoal_push_stage_append(h->stage, buf, size);
        h->written += size;
        if (h->size < h->written)
                h->size = h->written;
        shoal_itable_write_size(f->it, h->ino, h->size);
        return 0;
}

/* The store has no holes: the bytes between what was written and END (a gap an extension left)
 * are written as the zeros they read as (H->mu held). Returns 0 or a positive errno. */
static int pad_to(struct shoal_fuse *f, struct write_file *h, uint64_t end)
{
        static const char zeros[64 * 1024];
        while (h->state == W_OPEN && h->written < end) {
                uint64_t n = end - h->written;
                int err = append(f, h, zeros, n < sizeof(zeros) ? (size_t)n : sizeof(zeros));
                if (err)
                        return err;
        }
        return h->state == W_OPEN ? 0 : h->err;
}

/* Commits H's upload (H->mu held). Returns 0 or a positive errno (EIO). */
static int commit(struct shoal_fuse *f, struct write_file *h)
{
        if (h->state == W_DONE)
                return 0;
        if (h->state == W_FAILED)
                return EIO;
        if (pad_to(f, h, h->size))
                return EIO;
        uint64_t t0 = shoal_now_ns();
        struct shoal_object o;
        int rc = shoal_store_upload_commit(h->up, &o);
        h->up = NULL;
        shoal_metric_observe(SHOAL_M_fuse_write_commit_dur, shoal_now_ns() - t0);
        shoal_itable_set_writing(f->it, h->ino, false);
        if (rc) {
                shoal_push_stage_abort(h->stage);
                h->stage = NULL;
                h->state = W_FAILED;
                h->err = EIO;
                shoal_itable_expire(f->it, h->ino);
                shoal_metric_inc(SHOAL_M_fuse_write_errors);
                log_error("fuse",
                          "close of %s failed: the store did not take it (%s); no object "
                          "was written, the application gets EIO",
                          h->key, strerror(-rc));
                return EIO;
        }
        h->state = W_DONE;
        /* Readers in this mount see the object from now: its attributes, and a new listing of
         * its folder. */
        struct shoal_inode_attr a = {.size = o.size, .mtime_ns = o.mtime_ns};
        shoal_strlcpy(a.version, o.version, sizeof(a.version));
        shoal_itable_setattr(f->it, h->ino, &a);
        shoal_itable_dirlist_drop(f->it, parent_ino(f, h->parent));
        shoal_metric_inc(SHOAL_M_fuse_write_files);
        log_info("fuse", "wrote %s: %" PRIu64 " bytes, version %s", h->key, o.size, o.version);
        /* Durable now; the group gets the blocks before close returns, so that readers on
         * other nodes that start when it returned find them cached. */
        shoal_push_stage_commit(h->stage, &o);
        h->stage = NULL;
        return 0;
}

/* --- create and open ------------------------------------------------------------------------ */

/* Starts the upload of PATH and marks its inode INO as being written. Returns the handle, or
 * NULL with *ERR set (a positive errno). */
static struct write_file *start(fuse_req_t req, const char *path, uint64_t ino, unsigned flags,
                                int *err)
{
        struct shoal_fuse *f = fs_of(req);
        struct shoal_upload *up;
        int rc = shoal_store_upload_begin(f->node->store, path, flags, &up);
        if (rc) {
                *err = begin_errno(rc);
                if (rc != -EEXIST)
                        log_warn("fuse", "cannot start writing %s: %s", path, strerror(-rc));
                return NULL;
        }
        if (shoal_itable_set_writing(f->it, ino, true)) {
                shoal_store_upload_abort(up);
                *err = EPERM;
                return NULL;
        }
        shoal_itable_write_size(f->it, ino, 0);
        struct write_file *h = handle_new(req, path, ino, up);
        if (!h) {
                shoal_itable_set_writing(f->it, ino, false);
                shoal_store_upload_abort(up);
                *err = ENOMEM;
                return NULL;
        }
        h->stage = shoal_push_stage_begin(f->node->push);
        return h;
}

/* Writes bypass the page cache: each comes to us as written (up to --max-write), in order. */
static void set_write_fi(struct fuse_file_info *fi, struct write_file *h)
{
        fi->fh = (uint64_t)(uintptr_t)h;
        fi->direct_io = 1;
        fi->keep_cache = 0;
        fi->noflush = 0;
}

/* Whether the object at PATH may be created or replaced by an open with OFLAGS: 0 with the
 * upload's flags in *FLAGS, or -1 once the refusal was replied. */
static int create_allowed(fuse_req_t req, uint64_t t0, const char *path, int oflags,
                          unsigned *flags)
{
        struct shoal_fuse *f = fs_of(req);
        /* What is there now: the kernel's negative entry may be older than the store. */
        struct shoal_inode_attr a = {.is_dir = true};
        int rc = shoal_fuse_local_dir(f, path) ? 0 : shoal_fuse_probe(f, path, &a);
        *flags = SHOAL_UPLOAD_CREATE | SHOAL_UPLOAD_CHECKED;
        if (rc == -ENOENT)
                return 0;
        if (rc) {
                shoal_fuse_reply_err(req, t0, EIO);
                return -1;
        }
        if (a.is_dir || (oflags & O_EXCL)) {
                shoal_fuse_reply_err(req, t0, a.is_dir ? EISDIR : EEXIST);
                return -1;
        }
        if (!f->cfg.allow_overwrite || !(oflags & O_TRUNC)) {
                shoal_fuse_refuse(req, t0, EPERM, "create", path,
                                  f->cfg.allow_overwrite
                                          ? "the object exists; open it with O_TRUNC to replace it"
                                          : "the object exists; mount with --allow-overwrite to "
                                            "replace it");
                return -1;
        }
        *flags = 0;
        return 0;
}

/* The path a create of NAME in PARENT writes, into PATH (SHOAL_KEY_MAX + 1 bytes). Returns 0,
 * or -1 once the refusal was replied. */
static int create_path(fuse_req_t req, uint64_t t0, fuse_ino_t parent, const char *name, char *path)
{
        struct shoal_fuse *f = fs_of(req);
        if (f->cfg.read_only) {
                shoal_fuse_refuse(req, t0, EROFS, "create", name, "");
                return -1;
        }
        char ppath[SHOAL_KEY_MAX + 1];
        bool is_dir = false;
        int rc = shoal_itable_path(f->it, parent, ppath, sizeof(ppath), &is_dir);
        if (rc || !is_dir) {
                shoal_fuse_reply_err(req, t0, rc ? ESTALE : ENOTDIR);
                return -1;
        }
        if (parent == SHOAL_INO_ROOT && !strcmp(name, STATS_NAME)) {
                shoal_fuse_reply_err(req, t0, EEXIST);
                return -1;
        }
        rc = shoal_fuse_child_path(ppath, name, path, SHOAL_KEY_MAX + 1);
        if (rc) {
                shoal_fuse_refuse(req, t0, rc == -ENAMETOOLONG ? ENAMETOOLONG : EINVAL, "create",
                                  name, "no object key can have this name");
                return -1;
        }
        if (shoal_itable_is_writing(f->it, path)) {
                shoal_fuse_refuse(req, t0, EPERM, "create", path,
                                  "it is being written through another handle");
                return -1;
        }
        return 0;
}

/* Answers a create that started H on inode INO (attributes NA). */
static void create_reply(fuse_req_t req, struct write_file *h, uint64_t ino,
                         struct shoal_inode_attr *na, struct fuse_file_info *fi)
{
        struct shoal_fuse *f = fs_of(req);
        set_write_fi(fi, h);
        struct fuse_entry_param e;
        memset(&e, 0, sizeof(e));
        e.ino = ino;
        /* The size grows: ask us, not a copy; and the name goes if the upload is abandoned, so
         * that a rerun of the writer creates the file again rather than open a name now gone. */
        e.entry_timeout = 0;
        e.attr_timeout = 0;
        shoal_itable_getattr(f->it, ino, na, &(bool){false});
        shoal_fuse_fill_stat(f, ino, na, &e.attr);
        if (fuse_reply_create(req, &e, fi) == -ENOENT) {
                /* Interrupted: the kernel never saw the handle. */
                pthread_mutex_lock(&h->mu);
                abandon(f, h, EINTR, "create was interrupted");
                pthread_mutex_unlock(&h->mu);
                handle_free(f, h);
                shoal_itable_forget(f->it, ino, 1);
        }
}

void shoal_fuse_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                       struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        char path[SHOAL_KEY_MAX + 1];
        unsigned flags;
        if (create_path(req, t0, parent, name, path) ||
            create_allowed(req, t0, path, fi->flags, &flags))
                return;
        struct shoal_inode_attr na = {.mtime_ns = (int64_t)shoal_wall_ns()};
        uint64_t ino;
        if (shoal_itable_ref(f->it, path, &na, &ino)) {
                shoal_fuse_reply_err(req, t0, ENOMEM);
                return;
        }
        int err = 0;
        struct write_file *h = start(req, path, ino, flags, &err);
        if (!h) {
                shoal_itable_forget(f->it, ino, 1);
                if (err == EEXIST)
                        log_warn("fuse", "refused create of %s: it appeared in the store (%s)",
                                 path, strerror(err));
                shoal_fuse_reply_err(req, t0, err);
                return;
        }
        log_debug("fuse", "create %s%s", path, flags ? "" : " (replacing the object)");
        create_reply(req, h, ino, &na, fi);
        shoal_fuse_op_end(t0);
}

void shoal_fuse_open_write(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, uint64_t t0)
{
        struct shoal_fuse *f = fs_of(req);
        if (f->cfg.read_only || ino == SHOAL_INO_STATS) {
                shoal_fuse_refuse(req, t0, f->cfg.read_only ? EROFS : EPERM, "open for writing",
                                  ino == SHOAL_INO_STATS ? STATS_NAME : NULL,
                                  "the mount's statistics are read-only");
                return;
        }
        struct shoal_inode_attr a;
        char path[SHOAL_KEY_MAX + 1];
        int rc = shoal_fuse_fresh_attr(f, ino, &a, path, sizeof(path));
        if (rc) {
                shoal_fuse_reply_err(req, t0, -rc);
                return;
        }
        if (a.is_dir) {
                shoal_fuse_reply_err(req, t0, EISDIR);
                return;
        }
        const char *why = NULL;
        if (shoal_itable_is_writing(f->it, path))
                why = "it is being written through another handle";
        else if (!f->cfg.allow_overwrite)
                why = "the object exists; mount with --allow-overwrite to replace it";
        else if (!(fi->flags & O_TRUNC) || (fi->flags & O_ACCMODE) == O_RDONLY)
                why = "objects are replaced whole: open with O_TRUNC (and for writing)";
        if (why) {
                shoal_fuse_refuse(req, t0, EPERM, "open for writing", path, why);
                return;
        }
        int err = 0;
        struct write_file *h = start(req, path, ino, 0, &err);
        if (!h) {
                shoal_fuse_reply_err(req, t0, err);
                return;
        }
        set_write_fi(fi, h);
        log_debug("fuse", "open %s with O_TRUNC: replacing the object", path);
        if (fuse_reply_open(req, fi) == -ENOENT) {
                pthread_mutex_lock(&h->mu);
                abandon(f, h, EINTR, "open was interrupted");
                pthread_mutex_unlock(&h->mu);
                handle_free(f, h);
        }
        shoal_fuse_op_end(t0);
}

/* --- write, flush, fsync, release --------------------------------------------------------------
 */

/* Whether a write at OFF may go on (H->mu held): 0, or the errno to reply (an out-of-order write
 * abandons the upload). */
static int write_check(struct shoal_fuse *f, struct write_file *h, off_t off)
{
        if (h->state == W_DONE) {
                log_warn("fuse", "refused write to %s: already committed by fsync or close (%s)",
                         h->key, strerror(EPERM));
                return EPERM;
        }
        if (h->state == W_FAILED)
                return h->err;
        /* At the end, or into the zeros of an extension (they go first, in order). */
        if ((uint64_t)off == h->written || ((uint64_t)off > h->written && (uint64_t)off <= h->size))
                return 0;
        char why[128];
        snprintf(why, sizeof(why), "out-of-order write at offset %lld, expected %" PRIu64,
                 (long long)off, h->written);
        shoal_metric_inc(SHOAL_M_fuse_write_refused);
        log_warn("fuse", "refused write to %s: %s (shoal writes objects sequentially) (%s)", h->key,
                 why, strerror(EINVAL));
        abandon(f, h, EINVAL, why);
        return EINVAL;
}

/* A write is answered as soon as it is taken, before its bytes go to the store: the writer
 * prepares its next write while this one is copied into the store's file (one copy at a time
 * otherwise: the kernel's into our buffer, then ours into the file). H->mu stays held until the
 * bytes are in, so the next write, flush or fsync waits for them; a store error abandons the
 * upload, and the next write or the close gets it — as a part that fails on s3:// does. */
void shoal_fuse_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                      struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        if (shoal_fh_kind(fi) != SHOAL_FH_WRITE) {
                shoal_fuse_reply_err(req, t0, EBADF);
                return;
        }
        struct write_file *h = (struct write_file *)(uintptr_t)fi->fh;
        pthread_mutex_lock(&h->mu);
        int err = write_check(f, h, off);
        if (err) {
                pthread_mutex_unlock(&h->mu);
                shoal_fuse_reply_err(req, t0, err);
                return;
        }
        /* The size the kernel gives the file once the write returns. */
        if (h->size < (uint64_t)off + size)
                h->size = (uint64_t)off + size;
        shoal_itable_write_size(f->it, h->ino, h->size);
        shoal_metric_inc(SHOAL_M_fuse_write_requests);
        shoal_metric_add(SHOAL_M_fuse_write_bytes, size);
        fuse_reply_write(req, size);
        if (!pad_to(f, h, (uint64_t)off))
                append(f, h, buf, size);
        pthread_mutex_unlock(&h->mu);
        shoal_fuse_op_end(t0);
}

/* close(2) of one descriptor of the file. The opener's close commits and returns the outcome —
 * but not for a file still empty, nor for another process's close (a shell's redirection, a
 * forked child), nor for a writer that a signal is killing: those leave it to release (the last
 * descriptor going), which commits — or, for the killed writer, abandons. */
void shoal_fuse_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        if (shoal_fh_kind(fi) != SHOAL_FH_WRITE) {
                shoal_fuse_reply_err(req, t0, 0);
                return;
        }
        struct write_file *h = (struct write_file *)(uintptr_t)fi->fh;
        struct task_info ti;
        task_info(fuse_req_ctx(req)->pid, &ti);
        pthread_mutex_lock(&h->mu);
        h->flushed = true;
        int err = 0;
        if (h->state == W_FAILED) {
                err = EIO;
        } else if (h->state == W_OPEN && ti.signal) {
                char why[64];
                snprintf(why, sizeof(why), "the writer was killed by signal %d", ti.signal);
                abandon(f, h, EIO, why);
        } else if (h->state == W_OPEN && ti.tgid && ti.tgid == h->tgid && h->size) {
                err = commit(f, h);
        }
        pthread_mutex_unlock(&h->mu);
        shoal_fuse_reply_err(req, t0, err);
}

void shoal_fuse_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        if (shoal_fh_kind(fi) != SHOAL_FH_WRITE) {
                shoal_fuse_reply_err(req, t0, 0); /* objects in the store are durable */
                return;
        }
        struct write_file *h = (struct write_file *)(uintptr_t)fi->fh;
        pthread_mutex_lock(&h->mu);
        int err = commit(f, h);
        pthread_mutex_unlock(&h->mu);
        shoal_fuse_reply_err(req, t0, err);
}

void shoal_fuse_release_write(fuse_req_t req, struct fuse_file_info *fi, uint64_t t0)
{
        struct shoal_fuse *f = fs_of(req);
        struct write_file *h = (struct write_file *)(uintptr_t)fi->fh;
        pthread_mutex_lock(&h->mu);
        if (h->state == W_OPEN && !h->flushed && !h->size)
                /* No close ever came: the file never reached a descriptor (its opener died
                 * during open), so nobody asked for this object, not even an empty one. */
                abandon(f, h, EIO, "its opener never had it open");
        else if (h->state == W_OPEN)
                commit(f, h); /* nobody waits for this answer: the outcome is in the log */
        pthread_mutex_unlock(&h->mu);
        handle_free(f, h);
        shoal_fuse_reply_err(req, t0, 0);
}

void shoal_fuse_writes_abandon(struct shoal_fuse *f)
{
        struct shoal_list *pos, *next;
        list_for_each (pos, next, &f->writes) {
                struct write_file *h = shoal_list_entry(pos, struct write_file, link);
                if (h->state == W_OPEN)
                        abandon(f, h, EIO, "the mount stopped while it was open");
                handle_free(f, h);
        }
}

/* --- attributes -------------------------------------------------------------------------- */

/* ftruncate or fallocate of H to SIZE while it is written: up from what was written is an
 * extension (zeros, written at commit or before a write beyond them); below it is refused, and
 * the upload abandoned: the application asked for an object the model cannot give it, and a
 * writer that failed leaves no object. Returns 0 or the errno; *WHY names a refusal. */
static int resize(struct shoal_fuse *f, struct write_file *h, uint64_t size, const char **why)
{
        int err = 0;
        pthread_mutex_lock(&h->mu);
        if (h->state != W_OPEN) {
                err = h->state == W_DONE ? EPERM : h->err;
                *why = "the file was already committed or abandoned";
        } else if (size < h->written) {
                err = EPERM;
                *why = "a file being written cannot be cut below what was written";
                abandon(f, h, EPERM, "truncated below what was written");
        } else {
                h->size = size;
                shoal_itable_write_size(f->it, h->ino, size);
        }
        pthread_mutex_unlock(&h->mu);
        return err;
}

static struct write_file *write_handle(struct fuse_file_info *fi)
{
        return fi && shoal_fh_kind(fi) == SHOAL_FH_WRITE ? (struct write_file *)(uintptr_t)fi->fh
                                                         : NULL;
}

void shoal_fuse_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                          struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        struct write_file *h = write_handle(fi);
        if (!h || (mode & ~FALLOC_FL_KEEP_SIZE)) {
                shoal_fuse_refuse(req, t0, ENOTSUP, "fallocate", h ? h->key : NULL,
                                  h ? "only an allocation that extends a file being written"
                                    : "objects are written sequentially, not allocated");
                return;
        }
        if (offset < 0 || length <= 0 || offset > INT64_MAX - length) {
                shoal_fuse_reply_err(req, t0, EINVAL);
                return;
        }
        /* KEEP_SIZE reserves room, which an object store has no notion of: nothing to do. */
        uint64_t end = (uint64_t)offset + (uint64_t)length;
        const char *why = NULL;
        int err = 0;
        if (!(mode & FALLOC_FL_KEEP_SIZE)) {
                pthread_mutex_lock(&h->mu);
                uint64_t cur = h->size;
                pthread_mutex_unlock(&h->mu);
                if (end > cur)
                        err = resize(f, h, end, &why);
        }
        if (err && why) {
                shoal_fuse_refuse(req, t0, err, "fallocate", h->key, why);
                return;
        }
        shoal_fuse_reply_err(req, t0, err);
}

void shoal_fuse_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                        struct fuse_file_info *fi)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        struct shoal_inode_attr a;
        char path[SHOAL_KEY_MAX + 1];
        int rc = ino == SHOAL_INO_STATS ? -EPERM
                                        : shoal_fuse_fresh_attr(f, ino, &a, path, sizeof(path));
        if (rc) {
                shoal_fuse_reply_err(req, t0, -rc);
                return;
        }
        /* A file being written, or a folder made here, is still ours: its times may be set (and
         * are ignored: the store stamps the object). */
        bool fresh =
                a.is_dir ? shoal_fuse_local_dir(f, path) : shoal_itable_is_writing(f->it, path);
        struct stat cur;
        shoal_fuse_fill_stat(f, ino, &a, &cur);
        const int times = FUSE_SET_ATTR_ATIME | FUSE_SET_ATTR_MTIME | FUSE_SET_ATTR_ATIME_NOW |
                          FUSE_SET_ATTR_MTIME_NOW | FUSE_SET_ATTR_CTIME;
        const char *why = NULL;
        /* An owner or mode equal to the one shown changes nothing, and saying so keeps `tar -x`
         * and `cp -p` working; any other is refused. */
        if (((to_set & FUSE_SET_ATTR_MODE) && (attr->st_mode & 07777) != (cur.st_mode & 07777)) ||
            ((to_set & FUSE_SET_ATTR_UID) && attr->st_uid != cur.st_uid) ||
            ((to_set & FUSE_SET_ATTR_GID) && attr->st_gid != cur.st_gid))
                why = "objects have no owner or mode to change";
        else if ((to_set & times) && !fresh)
                why = "the times of a stored object are the store's";
        struct write_file *h = write_handle(fi);
        if ((to_set & FUSE_SET_ATTR_SIZE) && attr->st_size < 0) {
                shoal_fuse_reply_err(req, t0, EINVAL);
                return;
        }
        if (!why && (to_set & FUSE_SET_ATTR_SIZE) && h && h->ino == ino) {
                int err = resize(f, h, (uint64_t)attr->st_size, &why);
                if (err) {
                        shoal_fuse_refuse(req, t0, err, "setattr", path, why);
                        return;
                }
                a.size = (uint64_t)attr->st_size;
                shoal_fuse_fill_stat(f, ino, &a, &cur);
        } else if ((to_set & FUSE_SET_ATTR_SIZE) &&
                   (a.is_dir || !fresh || (uint64_t)attr->st_size != a.size)) {
                why = "objects cannot be truncated or extended (replace them with O_TRUNC)";
        }
        if (why) {
                shoal_fuse_refuse(req, t0, EPERM, "setattr", path, why);
                return;
        }
        fuse_reply_attr(req, &cur, fresh && !a.is_dir ? 0 : f->ttl_s);
        shoal_fuse_op_end(t0);
}

/* --- folders ------------------------------------------------------------------------------ */

bool shoal_fuse_local_dir(struct shoal_fuse *f, const char *path)
{
        bool found = false;
        pthread_mutex_lock(&f->dirs_mu);
        for (size_t i = 0; i < f->ndirs && !found; i++)
                found = !strcmp(f->dirs[i], path);
        pthread_mutex_unlock(&f->dirs_mu);
        return found;
}

int shoal_fuse_local_dirs_list(struct shoal_fuse *f, const char *path, struct shoal_dirlist *l)
{
        size_t pl = strlen(path);
        int rc = 0;
        pthread_mutex_lock(&f->dirs_mu);
        for (size_t i = 0; i < f->ndirs && !rc; i++) {
                const char *d = f->dirs[i];
                if (pl && (strncmp(d, path, pl) || d[pl] != '/'))
                        continue;
                const char *name = d + (pl ? pl + 1 : 0);
                if (!strchr(name, '/'))
                        rc = shoal_dirlist_add(l, name, strlen(name), true, 0, 0, "");
        }
        pthread_mutex_unlock(&f->dirs_mu);
        return rc;
}

static bool local_dir_has_children(struct shoal_fuse *f, const char *path)
{
        size_t pl = strlen(path);
        bool found = false;
        pthread_mutex_lock(&f->dirs_mu);
        for (size_t i = 0; i < f->ndirs && !found; i++)
                found = !strncmp(f->dirs[i], path, pl) && f->dirs[i][pl] == '/';
        pthread_mutex_unlock(&f->dirs_mu);
        return found;
}

static int local_dir_add(struct shoal_fuse *f, const char *path)
{
        char *copy = strdup(path);
        if (!copy)
                return -ENOMEM;
        pthread_mutex_lock(&f->dirs_mu);
        if (f->ndirs == f->dirs_cap) {
                size_t cap = f->dirs_cap ? f->dirs_cap * 2 : 16;
                char **nd = realloc(f->dirs, cap * sizeof(*nd));
                if (!nd) {
                        pthread_mutex_unlock(&f->dirs_mu);
                        free(copy);
                        return -ENOMEM;
                }
                f->dirs = nd;
                f->dirs_cap = cap;
        }
        f->dirs[f->ndirs++] = copy;
        pthread_mutex_unlock(&f->dirs_mu);
        return 0;
}

static void local_dir_remove(struct shoal_fuse *f, const char *path)
{
        pthread_mutex_lock(&f->dirs_mu);
        for (size_t i = 0; i < f->ndirs; i++) {
                if (strcmp(f->dirs[i], path))
                        continue;
                free(f->dirs[i]);
                f->dirs[i] = f->dirs[--f->ndirs];
                break;
        }
        pthread_mutex_unlock(&f->dirs_mu);
}

void shoal_fuse_local_dirs_free(struct shoal_fuse *f)
{
        for (size_t i = 0; i < f->ndirs; i++)
                free(f->dirs[i]);
        free(f->dirs);
        f->dirs = NULL;
        f->ndirs = f->dirs_cap = 0;
}

/* PATH of child NAME of folder PARENT into PATH. Returns 0 or a positive errno. */
static int child_of(struct shoal_fuse *f, fuse_ino_t parent, const char *name, char *path,
                    size_t len)
{
        char ppath[SHOAL_KEY_MAX + 1];
        bool is_dir = false;
        int rc = shoal_itable_path(f->it, parent, ppath, sizeof(ppath), &is_dir);
        if (rc)
                return ESTALE;
        if (!is_dir)
                return ENOTDIR;
        rc = shoal_fuse_child_path(ppath, name, path, len);
        return rc == -ENAMETOOLONG ? ENAMETOOLONG : rc ? EINVAL : 0;
}

void shoal_fuse_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        char path[SHOAL_KEY_MAX + 1];
        int err = f->cfg.read_only ? EROFS : child_of(f, parent, name, path, sizeof(path));
        if (err == EROFS) {
                shoal_fuse_refuse(req, t0, EROFS, "mkdir", name, "");
                return;
        }
        if (err) {
                shoal_fuse_reply_err(req, t0, err);
                return;
        }
        struct shoal_inode_attr a;
        if ((parent == SHOAL_INO_ROOT && !strcmp(name, STATS_NAME)) ||
            shoal_fuse_local_dir(f, path) || shoal_itable_is_writing(f->it, path)) {
                shoal_fuse_reply_err(req, t0, EEXIST);
                return;
        }
        int rc = shoal_fuse_probe(f, path, &a);
        if (rc != -ENOENT) {
                shoal_fuse_reply_err(req, t0, rc ? EIO : EEXIST);
                return;
        }
        /* As in mountpoint-s3: a folder of this mount only, until a file in it is written. */
        memset(&a, 0, sizeof(a));
        a.is_dir = true;
        uint64_t ino;
        if (local_dir_add(f, path) || shoal_itable_ref(f->it, path, &a, &ino)) {
                local_dir_remove(f, path);
                shoal_fuse_reply_err(req, t0, ENOMEM);
                return;
        }
        shoal_itable_dirlist_drop(f->it, parent);
        struct fuse_entry_param e;
        memset(&e, 0, sizeof(e));
        e.ino = ino;
        e.entry_timeout = f->ttl_s;
        e.attr_timeout = f->ttl_s;
        shoal_fuse_fill_stat(f, ino, &a, &e.attr);
        log_debug("fuse", "mkdir %s (in this mount until a file in it is written)", path);
        if (fuse_reply_entry(req, &e) == -ENOENT)
                shoal_itable_forget(f->it, ino, 1);
        shoal_fuse_op_end(t0);
}

/* Whether the store has any key under folder PATH. Returns 1, 0 or a negative errno. */
static int store_has_children(struct shoal_fuse *f, const char *path)
{
        struct shoal_inode_attr a;
        int rc = shoal_fuse_probe(f, path, &a);
        if (rc == -ENOENT)
                return 0;
        return rc ? rc : a.is_dir;
}

void shoal_fuse_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        char path[SHOAL_KEY_MAX + 1];
        int err = f->cfg.read_only ? EROFS : child_of(f, parent, name, path, sizeof(path));
        if (err == EROFS) {
                shoal_fuse_refuse(req, t0, EROFS, "rmdir", name, "");
                return;
        }
        if (err) {
                shoal_fuse_reply_err(req, t0, err);
                return;
        }
        int has = store_has_children(f, path);
        if (has < 0) {
                shoal_fuse_reply_err(req, t0, EIO);
                return;
        }
        if (has || local_dir_has_children(f, path) || shoal_itable_writing_under(f->it, path)) {
                shoal_fuse_reply_err(req, t0, ENOTEMPTY);
                return;
        }
        if (!shoal_fuse_local_dir(f, path)) {
                shoal_fuse_reply_err(req, t0, ENOENT);
                return;
        }
        local_dir_remove(f, path);
        shoal_itable_dirlist_drop(f->it, parent);
        log_debug("fuse", "rmdir %s", path);
        shoal_fuse_reply_err(req, t0, 0);
}

void shoal_fuse_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
        uint64_t t0 = shoal_fuse_op_begin();
        struct shoal_fuse *f = fs_of(req);
        char path[SHOAL_KEY_MAX + 1];
        int err = f->cfg.read_only ? EROFS : child_of(f, parent, name, path, sizeof(path));
        if (err == EROFS || (!err && !f->cfg.allow_delete)) {
                shoal_fuse_refuse(req, t0, EPERM, "unlink", err ? name : path,
                                  "deleting objects needs --allow-delete");
                return;
        }
        if (err) {
                shoal_fuse_reply_err(req, t0, err);
                return;
        }
        if (parent == SHOAL_INO_ROOT && !strcmp(name, STATS_NAME)) {
                shoal_fuse_refuse(req, t0, EPERM, "unlink", name, "the mount's own statistics");
                return;
        }
        if (shoal_itable_is_writing(f->it, path)) {
                shoal_fuse_refuse(req, t0, EPERM, "unlink", path,
                                  "it is being written; delete it once it is closed");
                return;
        }
        uint64_t m0 = shoal_now_ns();
        int rc = shoal_store_delete(f->node->store, path);
        shoal_metric_inc(SHOAL_M_meta_ops);
        shoal_metric_observe(SHOAL_M_meta_op_dur, shoal_now_ns() - m0);
        if (rc && rc != -ENOENT) {
                log_error("fuse", "unlink of %s failed: %s", path, strerror(-rc));
                shoal_fuse_reply_err(req, t0, rc == -EACCES ? EACCES : EIO);
                return;
        }
        shoal_itable_expire(f->it, shoal_itable_ino_of(f->it, path));
        shoal_itable_dirlist_drop(f->it, parent);
        shoal_fuse_reply_err(req, t0, rc ? ENOENT : 0);
}
