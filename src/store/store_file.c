/* file:///DIR — a local folder as the object store [O1]. Keys are relative paths under DIR;
 * the version of an object is its size, mtime, inode and ctime [D2]. Keys are resolved with openat2
 * RESOLVE_BENEATH, so no key (or symlink inside the store) can reach outside DIR.
 *
 * Uploads [W1, W2] write an unnamed file (O_TMPFILE) in the object's folder, fsync it and link
 * it into place in one step, so a half-written object is never visible under any name, and a
 * writer that dies leaves nothing behind: the kernel frees an unnamed file with its last fd.
 * A new object is linked with link(2), which fails if the name exists (create-new is atomic);
 * a replacement is linked under a hidden name and renamed over the old one. On a file system
 * without O_TMPFILE the data goes to a hidden named file instead, which a killed writer leaves
 * behind. Hidden names start with ".shoal-upload-": listings skip them and no key may use them. */
#include "store/store.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <linux/openat2.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define TMP_PREFIX     ".shoal-upload-"
#define TMP_PREFIX_LEN (sizeof(TMP_PREFIX) - 1)

struct file_store {
        int root_fd;
        char root[4096];
};

/* Rules on top of shoal_key_valid: relative, no empty, "." or ".." components. */
static bool file_key_ok(const char *key)
{
        if (!*key || key[0] == '/')
                return false;
        const char *p = key;
        while (*p) {
                const char *slash = strchr(p, '/');
                size_t n = slash ? (size_t)(slash - p) : strlen(p);
                if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.'))
                        return false;
                if (n >= TMP_PREFIX_LEN && !memcmp(p, TMP_PREFIX, TMP_PREFIX_LEN))
                        return false; /* an upload's hidden name, never an object */
                if (!slash)
                        break;
                p = slash + 1;
                if (!*p)
                        return false; /* trailing slash: a directory, not an object */
        }
        return true;
}

static int open_beneath(struct file_store *fs, const char *rel, int flags)
{
        struct open_how how = {
                .flags = (uint64_t)(flags | O_CLOEXEC),
                .resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS,
        };
        long fd = syscall(SYS_openat2, fs->root_fd, rel, &how, sizeof(how));
        if (fd < 0 && errno == ENOSYS)
                fd = openat(fs->root_fd, rel, flags | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        return (int)fd;
}

/* SIZE-MTIME.NS-INODE-CTIME.NS (hex seconds, decimal nanoseconds). Size and mtime alone are
 * shared by two writes of one size within one clock tick; each write through a temporary file
 * and a rename is another inode, and a write in place moves the ctime, so two writes get two
 * versions and their blocks two ids. */
static void version_of(const struct stat *st, char *out, size_t outlen)
{
        snprintf(out, outlen, "%" PRIx64 "-%" PRIx64 ".%09ld-%" PRIx64 "-%" PRIx64 ".%09ld",
                 (uint64_t)st->st_size, (uint64_t)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec,
                 (uint64_t)st->st_ino, (uint64_t)st->st_ctim.tv_sec, (long)st->st_ctim.tv_nsec);
}

static int map_open_err(int err)
{
        switch (err) {
        case -ENOENT:
        case -ENOTDIR:
        case -ELOOP:
        case -EXDEV: /* RESOLVE_BENEATH refused an escape */
                return -ENOENT;
        case -EACCES:
        case -EPERM:
                return -EACCES;
        case -EMFILE:
        case -ENFILE:
        case -ENOMEM:
                return -EAGAIN;
        default:
                return -EIO;
        }
}

/* Opens object KEY read-only beneath the root and stats it into *SB. Returns the fd, or -EINVAL
 * (bad key), -ENOENT (missing, or not a regular file), -EIO, or the mapped open error. */
static int open_object(struct shoal_store *st, const char *key, struct stat *sb)
{
        struct file_store *fs = st->impl;
        if (!file_key_ok(key))
                return -EINVAL;
        int fd = open_beneath(fs, key, O_RDONLY);
        if (fd < 0) {
                int mapped = map_open_err(fd);
                /* "No such object" that was not ENOENT: say what the kernel said (a folder in
                 * the key that is a file, a symlink loop, a symlink leading out of the store). */
                if (mapped == -ENOENT && fd != -ENOENT)
                        log_ratelimited(SHOAL_LOG_WARN, "store",
                                        "%s: open beneath the store failed with %s (errno %d); "
                                        "reported as no such object",
                                        key, strerror(-fd), -fd);
                return mapped;
        }
        int rc = fstat(fd, sb) ? -EIO : S_ISREG(sb->st_mode) ? 0 : -ENOENT;
        if (rc) {
                close(fd);
                return rc;
        }
        return fd;
}

static int file_stat(struct shoal_store *st, const char *key, struct shoal_object *out)
{
        struct stat sb;
        int fd = open_object(st, key, &sb);
        if (fd < 0)
                return fd;
        close(fd);
        memset(out, 0, sizeof(*out));
        shoal_strlcpy(out->key, key, sizeof(out->key));
        version_of(&sb, out->version, sizeof(out->version));
        out->size = (uint64_t)sb.st_size;
        out->mtime_ns = (int64_t)sb.st_mtim.tv_sec * (int64_t)SHOAL_NS_PER_SEC + sb.st_mtim.tv_nsec;
        return 0;
}

static int file_read(struct shoal_store *st, const char *key, const char *version, uint64_t off,
                     size_t len, void *buf)
{
        struct stat sb;
        int fd = open_object(st, key, &sb);
        if (fd < 0)
                return fd;
        int rc = 0;
        if (version) {
                char v[SHOAL_VERSION_MAX + 1];
                version_of(&sb, v, sizeof(v));
                if (strcmp(v, version)) {
                        rc = -ESTALE;
                        goto out_close;
                }
        }
        if (off + len > (uint64_t)sb.st_size) {
                rc = -EINVAL;
                goto out_close;
        }
        long n = shoal_pread_full(fd, buf, len, off);
        if (n < 0) {
                rc = -EIO;
        } else if ((size_t)n != len) {
                rc = -EPROTO; /* truncated under us: never a partial success */
        } else if (version) {
                /* A file rewritten while we read it would mix two versions: check again. */
                struct stat after;
                if (fstat(fd, &after) || after.st_size != sb.st_size ||
                    after.st_mtim.tv_sec != sb.st_mtim.tv_sec ||
                    after.st_mtim.tv_nsec != sb.st_mtim.tv_nsec)
                        rc = -ESTALE;
        }
out_close:
        close(fd);
        return rc;
}

struct list_ctx {
        struct file_store *fs;
        const char *prefix;
        size_t prefix_len;
        const char *delim;
        const char *start_after;
        shoal_list_cb cb;
        void *arg;
};

struct dent {
        char *name; /* with a trailing '/' for folders, so that sorting matches S3's key order */
        bool dir;
        struct stat sb;
};

static int dent_cmp(const void *a, const void *b)
{
        return strcmp(((const struct dent *)a)->name, ((const struct dent *)b)->name);
}

/* Appends entry NAME (stat SB) of folder REL to ENTS (N of CAP) when it can hold keys under the
 * prefix. Returns 0 (kept or skipped) or -ENOMEM. */
static int dent_add(const struct list_ctx *c, const char *rel, const char *name,
                    const struct stat *sb, struct dent **ents, size_t *n, size_t *cap)
{
        /* Prune by prefix: the full key must start with the prefix, or (folders) the prefix must
         * continue inside this folder. */
        size_t rel_len = strlen(rel), nl = strlen(name);
        char full[SHOAL_KEY_MAX + 2];
        if (rel_len + nl + 1 > SHOAL_KEY_MAX)
                return 0;
        memcpy(full, rel, rel_len);
        memcpy(full + rel_len, name, nl);
        size_t fl = rel_len + nl;
        if (S_ISDIR(sb->st_mode))
                full[fl++] = '/';
        full[fl] = '\0';
        if (strncmp(full, c->prefix, SHOAL_MIN(fl, c->prefix_len)) ||
            (!S_ISDIR(sb->st_mode) && fl < c->prefix_len))
                return 0;
        if (*n == *cap) {
                struct dent *ne = realloc(*ents, 2 * *cap * sizeof(**ents));
                if (!ne)
                        return -ENOMEM;
                *ents = ne;
                *cap *= 2;
        }
        struct dent *d = &(*ents)[*n];
        d->name = strdup(full + rel_len);
        d->dir = S_ISDIR(sb->st_mode);
        d->sb = *sb;
        if (!d->name)
                return -ENOMEM;
        (*n)++;
        return 0;
}

/* The entries of folder REL that can hold keys under the prefix, sorted, into *ENTS (*N). */
static int read_folder(struct list_ctx *c, const char *rel, struct dent **ents, size_t *n)
{
        /* Never dup(root_fd) here: a dup shares the directory's read offset, so a second
         * listing of the root would start at its end, and two at once would race. */
        int dfd = open_beneath(c->fs, *rel ? rel : ".", O_RDONLY | O_DIRECTORY);
        if (dfd < 0)
                return dfd == -ENOENT || dfd == -ENOTDIR ? 0 : -EIO;
        DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return -EIO;
        }
        /* A dup of root_fd shares its offset: the previous listing left it at the end. */
        rewinddir(d);
        size_t cap = 64;
        int rc = (*ents = malloc(cap * sizeof(**ents))) ? 0 : -ENOMEM;
        struct dirent *e;
        while (!rc && (e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, "..") ||
                    !strncmp(e->d_name, TMP_PREFIX, TMP_PREFIX_LEN))
                        continue;
                struct stat sb;
                if (fstatat(dirfd(d), e->d_name, &sb, 0))
                        continue; /* vanished or a dangling link */
                if (S_ISREG(sb.st_mode) || S_ISDIR(sb.st_mode))
                        rc = dent_add(c, rel, e->d_name, &sb, ents, n, &cap);
        }
        closedir(d);
        if (!rc)
                qsort(*ents, *n, sizeof(**ents), dent_cmp);
        return rc;
}

static int list_dir(struct list_ctx *c, const char *rel);

/* Hands entry ENT of folder REL to the callback, or lists it when it is a folder to go into. */
static int list_entry(struct list_ctx *c, const char *rel, const struct dent *ent)
{
        char full[SHOAL_KEY_MAX + 2];
        snprintf(full, sizeof(full), "%s%s", rel, ent->name);
        if (ent->dir) {
                size_t fl = strlen(full);
                /* With a delimiter, a folder past the prefix is a common prefix. */
                if (c->delim && fl > c->prefix_len) {
                        if (c->start_after && strcmp(full, c->start_after) <= 0)
                                return 0;
                        struct shoal_list_entry le = {.key = full, .is_prefix = true};
                        return c->cb(c->arg, &le);
                }
                if (c->start_after && strcmp(full, c->start_after) < 0 &&
                    strncmp(c->start_after, full, fl))
                        return 0; /* whole subtree sorts before start_after */
                return list_dir(c, full);
        }
        if (c->start_after && strcmp(full, c->start_after) <= 0)
                return 0;
        char version[SHOAL_VERSION_MAX + 1];
        version_of(&ent->sb, version, sizeof(version));
        struct shoal_list_entry le = {
                .key = full,
                .size = (uint64_t)ent->sb.st_size,
                .mtime_ns = (int64_t)ent->sb.st_mtim.tv_sec * (int64_t)SHOAL_NS_PER_SEC +
                            ent->sb.st_mtim.tv_nsec,
                .version = version,
        };
        return c->cb(c->arg, &le);
}

/* Lists folder REL ("" or ending in '/') in key order, recursing when there is no delimiter. */
static int list_dir(struct list_ctx *c, const char *rel)
{
        struct dent *ents = NULL;
        size_t n = 0;
        int rc = read_folder(c, rel, &ents, &n);
        for (size_t i = 0; i < n && !rc; i++)
                rc = list_entry(c, rel, &ents[i]);
        for (size_t i = 0; i < n; i++)
                free(ents[i].name);
        free(ents);
        return rc;
}

static int file_list(struct shoal_store *st, const char *prefix, const char *delim,
                     const char *start_after, shoal_list_cb cb, void *arg)
{
        if (delim && strcmp(delim, "/"))
                return -EINVAL; /* folders make "/" the only delimiter a folder store has */
        struct list_ctx c = {
                .fs = st->impl,
                .prefix = prefix,
                .prefix_len = strlen(prefix),
                .delim = delim,
                .start_after = start_after && *start_after ? start_after : NULL,
                .cb = cb,
                .arg = arg,
        };
        if (prefix[0] == '/' || strstr(prefix, "../") || strstr(prefix, "/..") ||
            !strcmp(prefix, ".."))
                return -EINVAL;
        /* Start in the deepest folder the prefix names completely. */
        char rel[SHOAL_KEY_MAX + 1];
        const char *slash = strrchr(prefix, '/');
        size_t rl = slash ? (size_t)(slash - prefix) + 1 : 0;
        if (rl > SHOAL_KEY_MAX)
                return -EINVAL;
        memcpy(rel, prefix, rl);
        rel[rl] = '\0';
        return list_dir(&c, rel);
}

/* --- uploads ------------------------------------------------------------------------------ */

struct file_upload {
        int dfd; /* the object's folder (O_RDONLY, for fsync) */
        int fd;  /* the data: an unnamed file, or TMP (no O_TMPFILE) */
        unsigned flags;
        char name[256];                /* the object's last component */
        char tmp[TMP_PREFIX_LEN + 17]; /* hidden name in use, or "" */
        char key[SHOAL_KEY_MAX + 1];   /* for folders made by this upload */
        size_t made_from;              /* key length of the first folder it made; 0: none */
};

static void tmp_name(char *out, size_t outlen)
{
        snprintf(out, outlen, TMP_PREFIX "%016llx", (unsigned long long)shoal_rand64());
}

/* Opens the folder of KEY (its first KLEN bytes, "" for the root) beneath the root, making the
 * missing folders; *MADE_FROM gets the length of the first one it made. Returns the fd or a
 * negative errno (-ENOTDIR: an object stands where a folder must be). */
static int dir_make(struct file_store *fs, const char *key, size_t klen, size_t *made_from)
{
        char rel[SHOAL_KEY_MAX + 1];
        int dfd = dup(fs->root_fd);
        if (dfd < 0)
                return -errno;
        for (size_t i = 0; i < klen;) {
                const char *slash = memchr(key + i, '/', klen - i);
                size_t end = slash ? (size_t)(slash - key) : klen;
                memcpy(rel, key, end);
                rel[end] = '\0';
                const char *comp = rel + i;
                int nfd = open_beneath(fs, rel, O_RDONLY | O_DIRECTORY);
                if (nfd == -ENOENT) {
                        if (!mkdirat(dfd, comp, 0755)) {
                                if (!*made_from)
                                        *made_from = end;
                                nfd = open_beneath(fs, rel, O_RDONLY | O_DIRECTORY);
                        } else {
                                nfd = errno == EEXIST
                                              ? open_beneath(fs, rel, O_RDONLY | O_DIRECTORY)
                                              : -errno;
                        }
                }
                close(dfd);
                if (nfd < 0)
                        return nfd == -ENOTDIR || nfd == -EEXIST ? -ENOTDIR : nfd;
                dfd = nfd;
                i = end + 1;
        }
        return dfd;
}

/* Removes the folders an upload made (deepest first) while they are empty. */
static void dir_unmake(struct file_store *fs, const char *key, size_t klen, size_t made_from)
{
        if (!made_from)
                return;
        char rel[SHOAL_KEY_MAX + 1];
        memcpy(rel, key, klen);
        rel[klen] = '\0';
        while (strlen(rel) >= made_from) {
                char *slash = strrchr(rel, '/');
                const char *comp = slash ? slash + 1 : rel;
                int pfd;
                if (slash) {
                        *slash = '\0';
                        pfd = open_beneath(fs, rel, O_RDONLY | O_DIRECTORY);
                } else {
                        pfd = dup(fs->root_fd);
                }
                if (pfd < 0)
                        return;
                int rc = unlinkat(pfd, comp, AT_REMOVEDIR);
                close(pfd);
                if (rc || !slash)
                        return;
        }
}

static int map_write_err(int err)
{
        switch (err) {
        case -ENOSPC:
        case -EDQUOT:
        case -EFBIG:
        case -EROFS:
                return err; /* the store is full or frozen: no retry helps */
        case -EACCES:
        case -EPERM:
                return -EACCES;
        case -ENOENT:
        case -ENOTDIR:
        case -EEXIST:
        case -EISDIR:
        case -EINVAL:
                return err;
        default:
                return -EIO;
        }
}

static int file_stream_begin(struct shoal_store *st, const char *key, unsigned flags, void **h)
{
        struct file_store *fs = st->impl;
        if (!file_key_ok(key))
                return -EINVAL;
        const char *slash = strrchr(key, '/');
        const char *name = slash ? slash + 1 : key;
        size_t dlen = slash ? (size_t)(slash - key) : 0;
        if (strlen(name) >= 256)
                return -EINVAL;
        struct file_upload *u = calloc(1, sizeof(*u));
        if (!u)
                return -ENOMEM;
        u->fd = -1;
        u->flags = flags;
        shoal_strlcpy(u->name, name, sizeof(u->name));
        shoal_strlcpy(u->key, key, sizeof(u->key));
        int rc = dir_make(fs, key, dlen, &u->made_from);
        if (rc < 0)
                goto out_free;
        u->dfd = rc;
        struct stat sb;
        if (!fstatat(u->dfd, name, &sb, AT_SYMLINK_NOFOLLOW)) {
                /* Early: commit checks again, atomically. */
                if (S_ISDIR(sb.st_mode)) {
                        rc = -EISDIR;
                        goto out_dir;
                }
                if (flags & SHOAL_UPLOAD_CREATE) {
                        rc = -EEXIST;
                        goto out_dir;
                }
        }
        u->fd = openat(u->dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);
        if (u->fd < 0 && (errno == EOPNOTSUPP || errno == EISDIR || errno == EINVAL)) {
                tmp_name(u->tmp, sizeof(u->tmp));
                u->fd = openat(u->dfd, u->tmp, O_CREAT | O_EXCL | O_WRONLY | O_CLOEXEC, 0644);
                if (u->fd < 0)
                        u->tmp[0] = '\0';
        }
        if (u->fd < 0) {
                rc = map_write_err(-errno);
                goto out_dir;
        }
        *h = u;
        return 0;

out_dir:
        close(u->dfd);
        dir_unmake(fs, key, dlen, u->made_from);
out_free:
        free(u);
        return map_write_err(rc);
}

static int file_stream_append(struct shoal_store *st, void *h, const void *data, size_t len)
{
        struct file_upload *u = h;
        int rc = shoal_write_all(u->fd, data, len);
        return rc ? map_write_err(rc) : 0;
}

static void upload_free(struct shoal_store *st, struct file_upload *u, bool drop_dirs)
{
        if (u->fd >= 0)
                close(u->fd);
        if (u->tmp[0])
                unlinkat(u->dfd, u->tmp, 0);
        close(u->dfd);
        if (drop_dirs) {
                const char *slash = strrchr(u->key, '/');
                dir_unmake(st->impl, u->key, slash ? (size_t)(slash - u->key) : 0, u->made_from);
        }
        free(u);
}

/* Gives the unnamed file the hidden name U->TMP (a link through /proc, which needs no
 * privilege; AT_EMPTY_PATH where /proc is missing). */
static int link_tmpfile(struct file_upload *u, const char *as)
{
        char proc[64];
        snprintf(proc, sizeof(proc), "/proc/self/fd/%d", u->fd);
        if (!linkat(AT_FDCWD, proc, u->dfd, as, AT_SYMLINK_FOLLOW))
                return 0;
        if (errno == ENOENT && !linkat(u->fd, "", u->dfd, as, AT_EMPTY_PATH))
                return 0;
        return -errno;
}

/* Puts the written file under U->NAME: atomically refusing an existing name for a new object,
 * atomically replacing it otherwise. */
static int link_into_place(struct file_upload *u)
{
        bool create = u->flags & SHOAL_UPLOAD_CREATE;
        if (!u->tmp[0]) {
                if (create)
                        return link_tmpfile(u, u->name);
                tmp_name(u->tmp, sizeof(u->tmp));
                int rc = link_tmpfile(u, u->tmp);
                if (rc) {
                        u->tmp[0] = '\0';
                        return rc;
                }
        }
        if (create) {
                if (!renameat2(u->dfd, u->tmp, u->dfd, u->name, RENAME_NOREPLACE))
                        goto out_named;
                if (errno != EINVAL && errno != ENOSYS)
                        return -errno;
                /* No RENAME_NOREPLACE here: link refuses an existing name as well. */
                if (linkat(u->dfd, u->tmp, u->dfd, u->name, 0))
                        return -errno;
                unlinkat(u->dfd, u->tmp, 0);
                goto out_named;
        }
        if (renameat(u->dfd, u->tmp, u->dfd, u->name))
                return -errno;
out_named:
        u->tmp[0] = '\0';
        return 0;
}

static int file_stream_commit(struct shoal_store *st, void *h, struct shoal_object *out)
{
        struct file_upload *u = h;
        struct stat sb;
        int rc = 0;
        /* The version is size+mtime, and the kernel stamps mtime from a coarse clock (a tick
         * of milliseconds): an object replaced, or deleted and written again, with the same size
         * within one tick would get the old version, and the group would serve the old blocks
         * as the new object's. A stamp from the fine clock makes each commit's version its own. */
        struct timespec ts[2] = {{.tv_nsec = UTIME_OMIT}, {0}};
        clock_gettime(CLOCK_REALTIME, &ts[1]);
        if (futimens(u->fd, ts) || fsync(u->fd) || fstat(u->fd, &sb))
                rc = -errno;
        for (int tries = 0; !rc; tries++) {
                rc = link_into_place(u);
                if (rc != -ENOENT || u->tmp[0] || tries == 3)
                        break;
                /* A delete emptied our folder and removed it: an unnamed file can be linked
                 * into the folder made again. */
                const char *slash = strrchr(u->key, '/');
                int nd = dir_make(st->impl, u->key, slash ? (size_t)(slash - u->key) : 0,
                                  &u->made_from);
                if (nd < 0) {
                        rc = nd;
                        break;
                }
                close(u->dfd);
                u->dfd = nd;
                rc = 0;
        }
        if (rc) {
                if (rc != -EEXIST)
                        log_ratelimited(SHOAL_LOG_WARN, "store", "upload of %s: %s", u->key,
                                        strerror(-rc));
                upload_free(st, u, true);
                return map_write_err(rc == -ENOTEMPTY ? -EISDIR : rc);
        }
        /* The version is taken once the name is in place: linking and renaming move the ctime
         * that it carries (version_of). A rename of another writer's that replaced ours in
         * between leaves this version naming an inode the store no longer holds, which is what
         * keeps our pushes out of the cache. */
        if (fstat(u->fd, &sb))
                rc = map_write_err(-errno);
        /* The name is durable only once its folder is. */
        if (!rc && fsync(u->dfd))
                rc = map_write_err(-errno);
        memset(out, 0, sizeof(*out));
        shoal_strlcpy(out->key, u->key, sizeof(out->key));
        version_of(&sb, out->version, sizeof(out->version));
        out->size = (uint64_t)sb.st_size;
        out->mtime_ns = (int64_t)sb.st_mtim.tv_sec * (int64_t)SHOAL_NS_PER_SEC + sb.st_mtim.tv_nsec;
        upload_free(st, u, false);
        return rc;
}

static void file_stream_abort(struct shoal_store *st, void *h)
{
        upload_free(st, h, true);
}

/* Deletes an object and then the folders it leaves empty, as a prefix vanishes in S3. */
static int file_remove(struct shoal_store *st, const char *key)
{
        struct file_store *fs = st->impl;
        if (!file_key_ok(key))
                return -EINVAL;
        const char *slash = strrchr(key, '/');
        size_t dlen = slash ? (size_t)(slash - key) : 0;
        char dir[SHOAL_KEY_MAX + 1];
        memcpy(dir, key, dlen);
        dir[dlen] = '\0';
        int dfd = dlen ? open_beneath(fs, dir, O_RDONLY | O_DIRECTORY) : dup(fs->root_fd);
        if (dfd < 0)
                return map_open_err(dfd);
        int rc = unlinkat(dfd, slash ? slash + 1 : key, 0) ? -errno : 0;
        if (!rc)
                fsync(dfd);
        close(dfd);
        if (rc)
                return rc == -EISDIR || rc == -EPERM ? -ENOENT : map_open_err(rc);
        if (dlen)
                dir_unmake(fs, key, dlen, 1);
        return 0;
}

static void file_close(struct shoal_store *st)
{
        struct file_store *fs = st->impl;
        if (fs) {
                close(fs->root_fd);
                free(fs);
        }
}

static const struct shoal_store_ops file_ops = {
        .scheme = "file",
        .stat = file_stat,
        .read = file_read,
        .list = file_list,
        .close = file_close,
        .stream_begin = file_stream_begin,
        .stream_append = file_stream_append,
        .stream_commit = file_stream_commit,
        .stream_abort = file_stream_abort,
        .remove = file_remove,
};

int shoal_store_file_open(struct shoal_store *st, const char *url, char *err, size_t errlen)
{
        const char *path = url + strlen("file://");
        if (path[0] != '/') {
                snprintf(err, errlen, "storage %s: expected file:///ABSOLUTE/DIR", url);
                return -EINVAL;
        }
        struct file_store *fs = calloc(1, sizeof(*fs));
        if (!fs) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        shoal_strlcpy(fs->root, path, sizeof(fs->root));
        fs->root_fd = open(fs->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fs->root_fd < 0) {
                int e = errno;
                snprintf(err, errlen, "storage %s: cannot open %s: %s", url, fs->root, strerror(e));
                free(fs);
                return -e;
        }
        st->ops = &file_ops;
        st->impl = fs;
        return 0;
}
