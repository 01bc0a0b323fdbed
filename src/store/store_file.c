/* file:///DIR — a local folder as the object store [O1]. Keys are relative paths under DIR;
 * the version of an object is its size and mtime [D2]. Keys are resolved with openat2
 * RESOLVE_BENEATH, so no key (or symlink inside the store) can reach outside DIR. */
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
#include <unistd.h>

#include "common/util.h"

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

static void version_of(const struct stat *st, char *out, size_t outlen)
{
        snprintf(out, outlen, "%" PRIx64 "-%" PRIx64 ".%09ld", (uint64_t)st->st_size,
                 (uint64_t)st->st_mtim.tv_sec, (long)st->st_mtim.tv_nsec);
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
        if (fd < 0)
                return map_open_err(fd);
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
        out->mtime_ns = (int64_t)sb.st_mtim.tv_sec * 1000000000LL + sb.st_mtim.tv_nsec;
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

/* Lists folder REL ("" or ending in '/') in key order, recursing when there is no delimiter. */
static int list_dir(struct list_ctx *c, const char *rel)
{
        int dfd = *rel ? open_beneath(c->fs, rel, O_RDONLY | O_DIRECTORY) : dup(c->fs->root_fd);
        if (dfd < 0)
                return dfd == -ENOENT || dfd == -ENOTDIR ? 0 : -EIO;
        DIR *d = fdopendir(dfd);
        if (!d) {
                close(dfd);
                return -EIO;
        }
        /* A dup of root_fd shares its offset: the previous listing left it at the end. */
        rewinddir(d);
        size_t n = 0, cap = 64;
        struct dent *ents = malloc(cap * sizeof(*ents));
        int rc = 0;
        if (!ents) {
                closedir(d);
                return -ENOMEM;
        }
        size_t rel_len = strlen(rel);
        struct dirent *e;
        while ((e = readdir(d))) {
                if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
                        continue;
                struct stat sb;
                if (fstatat(dirfd(d), e->d_name, &sb, 0))
                        continue; /* vanished or a dangling link */
                if (!S_ISREG(sb.st_mode) && !S_ISDIR(sb.st_mode))
                        continue;
                /* Prune by prefix: the full key must start with the prefix, or (folders) the
                 * prefix must continue inside this folder. */
                size_t nl = strlen(e->d_name);
                char full[SHOAL_KEY_MAX + 2];
                if (rel_len + nl + 1 > SHOAL_KEY_MAX)
                        continue;
                memcpy(full, rel, rel_len);
                memcpy(full + rel_len, e->d_name, nl);
                size_t fl = rel_len + nl;
                if (S_ISDIR(sb.st_mode))
                        full[fl++] = '/';
                full[fl] = '\0';
                size_t cmp = SHOAL_MIN(fl, c->prefix_len);
                if (strncmp(full, c->prefix, cmp))
                        continue;
                if (!S_ISDIR(sb.st_mode) && fl < c->prefix_len)
                        continue;
                if (n == cap) {
                        cap *= 2;
                        struct dent *ne = realloc(ents, cap * sizeof(*ents));
                        if (!ne) {
                                rc = -ENOMEM;
                                break;
                        }
                        ents = ne;
                }
                ents[n].name = strdup(full + rel_len);
                ents[n].dir = S_ISDIR(sb.st_mode);
                ents[n].sb = sb;
                if (!ents[n].name) {
                        rc = -ENOMEM;
                        break;
                }
                n++;
        }
        closedir(d);
        if (!rc)
                qsort(ents, n, sizeof(*ents), dent_cmp);
        for (size_t i = 0; i < n && !rc; i++) {
                char full[SHOAL_KEY_MAX + 2];
                snprintf(full, sizeof(full), "%s%s", rel, ents[i].name);
                if (ents[i].dir) {
                        size_t fl = strlen(full);
                        /* With a delimiter, a folder past the prefix is a common prefix. */
                        if (c->delim && fl > c->prefix_len) {
                                if (c->start_after && strcmp(full, c->start_after) <= 0)
                                        continue;
                                struct shoal_list_entry le = {.key = full, .is_prefix = true};
                                rc = c->cb(c->arg, &le);
                                continue;
                        }
                        if (c->start_after && strcmp(full, c->start_after) < 0 &&
                            strncmp(c->start_after, full, fl))
                                continue; /* whole subtree sorts before start_after */
                        rc = list_dir(c, full);
                        continue;
                }
                if (c->start_after && strcmp(full, c->start_after) <= 0)
                        continue;
                char version[SHOAL_VERSION_MAX + 1];
                version_of(&ents[i].sb, version, sizeof(version));
                struct shoal_list_entry le = {
                        .key = full,
                        .size = (uint64_t)ents[i].sb.st_size,
                        .mtime_ns = (int64_t)ents[i].sb.st_mtim.tv_sec * 1000000000LL +
                                    ents[i].sb.st_mtim.tv_nsec,
                        .version = version,
                };
                rc = c->cb(c->arg, &le);
        }
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
