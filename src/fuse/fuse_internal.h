/* Shared between the FUSE operations (fuse_ops.c) and the session set-up (mount.c). */
#ifndef SHOAL_FUSE_FUSE_INTERNAL_H
#define SHOAL_FUSE_FUSE_INTERNAL_H

/* 3.12 for fuse_loop_cfg_set_max_threads; the low-level operations are those of 3.5. */
#define FUSE_USE_VERSION 312

#include <fuse_lowlevel.h>
#include <pthread.h>
#include <stdint.h>

#include "fuse/fuse_mount.h"
#include "fuse/inode.h"
#include "metrics/metrics.h"

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
};

/* Kernel readahead of a mount (KiB): four 1 MiB requests in flight per sequential reader. */
#define SHOAL_FUSE_READAHEAD_KB 4096

extern const struct fuse_lowlevel_ops shoal_fuse_ops;

/* Destructor of the per-thread read buffer (for pthread_key_create). */
void shoal_fuse_buf_free(void *p);

/* Raises the kernel readahead of the mount (root only; failures are logged at debug). Call after
 * INIT was answered, before the first file is opened. */
void shoal_fuse_tune_readahead(struct shoal_fuse *f);

#endif
