/* Shared between the FUSE operations (fuse_ops.c) and the session set-up (mount.c). */
#ifndef SHOAL_FUSE_FUSE_INTERNAL_H
#define SHOAL_FUSE_FUSE_INTERNAL_H

/* 3.12 for fuse_loop_cfg_set_max_threads; the low-level operations are those of 3.5. */
#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdint.h>
#include <sys/stat.h>

#include "common/list.h"
#include "fuse/fuse_mount.h"
#include "fuse/inode.h"
#include "metrics/metrics.h"

/* The head of every read, folder and .stats handle (fi->fh): its kind word first (as every
 * handle has), then the links of the mount's list of open handles. A session that ends (SIGTERM,
 * an unmount) while files or folders are open, or before the kernel's asynchronous release of a
 * closed one arrives, gets no release for them: the mount frees what is left on the list. */
struct shoal_fuse_fh {
        uint32_t kind;
        struct shoal_list link;
};

struct shoal_fuse {
        struct shoal_fuse_config cfg;
        char mountpoint[4096];
        struct shoal_node *node;
        struct shoal_itable *it;
        struct fuse_session *se;
        bool mounted;
        double ttl_s;
        uint32_t block_size;
        int64_t start_ns; /* wall clock: the mtime of folders */
        uid_t uid;
        gid_t gid;
        pthread_key_t buf_key; /* per-thread read buffer */
        bool buf_key_ok;
        pthread_mutex_t stats_mu;
        struct shoal_metrics_snap stats_prev; /* the window of .stats quantiles */
        bool have_prev;
        int ra_tuned; /* atomic: the bdi readahead was raised */
        /* Folders made by mkdir that the store does not know yet (fuse_write.c). */
        pthread_mutex_t dirs_mu;
        char **dirs;
        size_t ndirs, dirs_cap;
        /* Files open for writing, so that a mount that stops with some still open abandons
         * their uploads (fuse_write.c). */
        pthread_mutex_t writes_mu;
        struct shoal_list writes;
        /* Read, folder and .stats handles the kernel holds (struct shoal_fuse_fh). */
        pthread_mutex_t handles_mu;
        struct shoal_list handles;
        /* Disk-cache blocks mapped, locked and checked for replies (fuse_vblock.c). */
        struct shoal_fuse_vcache *vc;
};

/* The first word of every file handle (fi->fh) says what it is. */
#define SHOAL_FH_READ  0x52454144u /* "READ" */
#define SHOAL_FH_WRITE 0x57524954u /* "WRIT" */
#define SHOAL_FH_STATS 0x53544154u /* "STAT" */
#define SHOAL_FH_DIR   0x44495220u /* "DIR " */

static inline uint32_t shoal_fh_kind(const struct fuse_file_info *fi)
{
        return fi->fh ? *(const uint32_t *)(uintptr_t)fi->fh : 0;
}

/* Kernel readahead of a mount (KiB): four 1 MiB requests in flight per sequential reader. */
#define SHOAL_FUSE_READAHEAD_KB 4096

extern const struct fuse_lowlevel_ops shoal_fuse_ops;

/* Destructor of the per-thread read buffer (for pthread_key_create). */
void shoal_fuse_buf_free(void *p);

/* Raises the kernel readahead of the mount (root only; failures are logged at debug). Call after
 * INIT was answered, before the first file is opened. */
void shoal_fuse_tune_readahead(struct shoal_fuse *f);

/* Warm reads from the disk cache's files, mapped, locked and checked once (fuse_vblock.c).
 * Init once the node is up; destroy after the loop ended. */
int shoal_fuse_vcache_init(struct shoal_fuse *f);
void shoal_fuse_vcache_destroy(struct shoal_fuse *f);
/* Answers the read of [OFF, OFF+SIZE) of OBJ when every block of it is in the disk cache and
 * passes its checks; returns false, having replied nothing, when the caller must read it the
 * copying way. */
struct shoal_object;
bool shoal_fuse_read_cached(fuse_req_t req, struct shoal_fuse *f, const struct shoal_object *obj,
                            uint64_t off, size_t size);

/* Helpers of fuse_ops.c that the write path shares. */
uint64_t shoal_fuse_op_begin(void);
void shoal_fuse_op_end(uint64_t t0);
/* Replies ERR (a positive errno) and ends the operation begun at T0. */
void shoal_fuse_reply_err(fuse_req_t req, uint64_t t0, int err);
void shoal_fuse_fill_stat(const struct shoal_fuse *f, uint64_t ino,
                          const struct shoal_inode_attr *a, struct stat *st);
/* "PARENT/NAME" into OUT. Returns 0, -ENAMETOOLONG, or -ENOENT for a name no key can have. */
int shoal_fuse_child_path(const char *parent, const char *name, char *out, size_t outlen);
/* What PATH is in the store: an object, a folder, -ENOENT or -EIO. */
int shoal_fuse_probe(struct shoal_fuse *f, const char *path, struct shoal_inode_attr *a);
/* INO's attributes (from the table within the TTL, else from a stat) and path. */
int shoal_fuse_fresh_attr(struct shoal_fuse *f, uint64_t ino, struct shoal_inode_attr *a,
                          char *path, size_t pathlen);

/* The write path (fuse_write.c) [W1]: mountpoint-s3's model. A new file (create) or, with
 * --allow-overwrite, an existing one opened with O_TRUNC is uploaded as it is written, in order
 * from offset 0; close (the opener's flush) or fsync returns once the store has the whole object.
 * Everything else that would change the volume is refused with one log line. */
void shoal_fuse_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
                       struct fuse_file_info *fi);
/* open(2) with O_WRONLY or O_RDWR of an existing file. */
void shoal_fuse_open_write(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi, uint64_t t0);
void shoal_fuse_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
                      struct fuse_file_info *fi);
void shoal_fuse_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi);
void shoal_fuse_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi);
/* Release of a write handle: a commit not done yet is done now (its outcome is only logged). */
void shoal_fuse_release_write(fuse_req_t req, struct fuse_file_info *fi, uint64_t t0);
void shoal_fuse_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *attr, int to_set,
                        struct fuse_file_info *fi);
/* fallocate: on a file being written, an extension of its size (zeros); refused otherwise. */
void shoal_fuse_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t offset, off_t length,
                          struct fuse_file_info *fi);
void shoal_fuse_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode);
void shoal_fuse_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name);
void shoal_fuse_unlink(fuse_req_t req, fuse_ino_t parent, const char *name);
/* Refuses an operation the model does not support (rename, links, xattrs): ERR and a log line
 * (EROFS on a --read-only mount). */
void shoal_fuse_refuse(fuse_req_t req, uint64_t t0, int err, const char *what, const char *name,
                       const char *why);

/* Folders made by mkdir: whether PATH is one, and adding the children of folder PATH to L. */
bool shoal_fuse_local_dir(struct shoal_fuse *f, const char *path);
int shoal_fuse_local_dirs_list(struct shoal_fuse *f, const char *path, struct shoal_dirlist *l);
void shoal_fuse_local_dirs_free(struct shoal_fuse *f);
/* At teardown, after the loop ended (no worker left): frees the read, folder and .stats handles
 * the kernel never released. */
void shoal_fuse_handles_free(struct shoal_fuse *f);
/* At teardown, after the loop ended: abandons the uploads of files still open for writing (the
 * kernel sends no release when the session ends first), so that none is left half-done. */
void shoal_fuse_writes_abandon(struct shoal_fuse *f);

#endif
