/* The FUSE mount [C1]: the volume's objects as files, "/"-separated prefixes as folders, and a
 * `.stats` file in the root [V3]. New files are written sequentially and uploaded as whole
 * objects [W1] (docs/writes.md). Built on libfuse3's low-level API with a
 * multi-threaded session loop; reads go through the node's reader (buffer, local cache, group,
 * store) into one buffer per FUSE worker thread, allocated once. */
#ifndef SHOAL_FUSE_FUSE_MOUNT_H
#define SHOAL_FUSE_FUSE_MOUNT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct shoal_node;

struct shoal_fuse_config {
        const char *mountpoint; /* an existing folder (absolute path) */
        struct shoal_node *node;
        uint64_t attr_ttl_ns; /* --attr-cache: names, sizes and listings (kernel and ours) */
        uint32_t max_read;    /* --max-write: largest request, 4 KiB..1 MiB, a page multiple */
        unsigned max_threads; /* FUSE worker threads at most */
        bool allow_other;     /* let other users in (root only) */
        bool read_only;       /* --read-only: every change is EROFS */
        bool allow_overwrite; /* --allow-overwrite: O_TRUNC replaces an existing object */
        bool allow_delete;    /* --allow-delete: unlink deletes the object */
};

struct shoal_fuse;

/* Creates the session and mounts it at CFG->mountpoint (the node must outlive the mount). On
 * failure returns NULL with one line in ERR. Call with SIGINT, SIGTERM and SIGHUP blocked in every
 * thread; shoal_fuse_loop takes them. */
struct shoal_fuse *shoal_fuse_mount(const struct shoal_fuse_config *cfg, char *err, size_t errlen);

/* Serves requests on worker threads until the file system is unmounted (shoal umount,
 * fusermount3 -u) or SIGINT/SIGTERM arrives; the calling thread takes those signals while it
 * runs (SIGHUP stays blocked: the caller's to take). Returns 0, or a negative errno when the loop
 * failed. */
int shoal_fuse_loop(struct shoal_fuse *f);

/* Unmounts (when still mounted) and frees everything. F may be NULL. */
void shoal_fuse_destroy(struct shoal_fuse *f);

/* The line of /proc/self/mountinfo for MOUNTPOINT (the last mount there): writes its file system
 * type ("fuse.shoal") into FSTYPE and its device numbers into MAJOR and MINOR. Returns 0, -ENOENT
 * when nothing is mounted there, or -errno. */
int shoal_fuse_mount_info(const char *mountpoint, char *fstype, size_t fstype_len, unsigned *major,
                          unsigned *minor);

#endif
