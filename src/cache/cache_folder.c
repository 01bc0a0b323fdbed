/* Cache folders: the one-process lock and the member identity (cache_folder.h).
 *
 * The lock is flock(2) on FOLDER/.shoal-lock, taken without waiting before anything in the folder
 * is touched (start-up empties tmp/, which would delete another process's inserts in flight). The
 * kernel lets it go when the process ends, however it ends, so a kill -9 leaves nothing to clean
 * up. The holder writes its pid into the file after taking the lock, for the message another
 * process prints; the pid is only ever read for that message.
 *
 * The identity file is written once (temp file, fsync, rename) and then only read:
 *
 *   shoal-member 1
 *   id <member id>
 *   fingerprint <volume fingerprint, 32 hex>
 *   block_size <bytes>
 *   volume <url, for messages>
 *
 * The fingerprint (of URL and block size) decides whether the folder was made for this volume; a
 * mismatch is the user's to fix. */
#include "cache/cache_folder.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"

#define LOCK_NAME    ".shoal-lock"
#define ID_NAME      ".shoal-member"
#define ID_TMP_NAME  ".shoal-member.tmp"
#define ID_TAG       "shoal-member 1"
#define ID_FILE_MAX  4096
#define ID_LEN       32
#define PID_READ_TRY 20 /* the holder writes its pid just after it locks */

/* The pid written in the lock file FD, or 0 when there is none (yet). */
static long lock_holder(int fd)
{
        for (int i = 0; i < PID_READ_TRY; i++) {
                char buf[24] = {0};
                ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
                uint64_t pid;
                char *nl = n > 0 ? memchr(buf, '\n', (size_t)n) : NULL;
                if (nl) {
                        *nl = '\0';
                        if (!shoal_parse_u64(buf, INT32_MAX, &pid) && pid > 0)
                                return (long)pid;
                }
                shoal_sleep_ns(5 * SHOAL_NS_PER_MS);
        }
        return 0;
}

int shoal_cache_folder_lock(struct cache_folders *f, const char *path, char *err, size_t errlen)
{
        struct stat st;
        if (stat(path, &st))
                return -errno;
        for (unsigned i = 0; i < f->n; i++)
                if (f->v[i].dev == st.st_dev && f->v[i].ino == st.st_ino)
                        return 0;
        char lp[PATH_MAX];
        if ((size_t)snprintf(lp, sizeof(lp), "%s/%s", path, LOCK_NAME) >= sizeof(lp))
                return -ENAMETOOLONG;
        int fd = open(lp, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0) {
                int e = -errno;
                snprintf(err, errlen, "cache dir %s: cannot open its lock file: %s", path,
                         strerror(-e));
                return e;
        }
        if (flock(fd, LOCK_EX | LOCK_NB)) {
                int e = errno;
                long pid = e == EWOULDBLOCK ? lock_holder(fd) : 0;
                close(fd);
                if (e != EWOULDBLOCK) {
                        snprintf(err, errlen, "cache dir %s: cannot lock it: %s", path,
                                 strerror(e));
                        return -e;
                }
                if (pid)
                        snprintf(err, errlen,
                                 "cache dir %s is in use by process %ld (one process per cache "
                                 "folder: give this one its own --cache-dir)",
                                 path, pid);
                else
                        snprintf(err, errlen,
                                 "cache dir %s is in use by another process (one process per "
                                 "cache folder: give this one its own --cache-dir)",
                                 path);
                return -EBUSY;
        }
        char pidline[24];
        int n = snprintf(pidline, sizeof(pidline), "%ld\n", (long)getpid());
        if (ftruncate(fd, 0) || pwrite(fd, pidline, (size_t)n, 0) != n)
                log_warn("cache", "cache dir %s: cannot write the lock holder's pid: %s", path,
                         strerror(errno));
        void *nv = realloc(f->v, (f->n + 1) * sizeof(*f->v));
        if (!nv) {
                close(fd);
                return -ENOMEM;
        }
        f->v = nv;
        struct cache_folder *e = &f->v[f->n++];
        shoal_strlcpy(e->path, path, sizeof(e->path));
        e->lock_fd = fd;
        e->dev = st.st_dev;
        e->ino = st.st_ino;
        return 0;
}

void shoal_cache_folders_release(struct cache_folders *f)
{
        for (unsigned i = 0; i < f->n; i++)
                close(f->v[i].lock_fd); /* lets go of the lock */
        free(f->v);
        f->v = NULL;
        f->n = 0;
}

struct identity {
        char id[ID_LEN + 1];
        char fp[33];
        uint64_t block_size;
        char volume[1024];
};

/* The value after "NAME " on one of the lines of BUF, copied into OUT; false when missing. */
static bool field(const char *buf, const char *name, char *out, size_t outlen)
{
        size_t nl = strlen(name);
        for (const char *p = buf; p && *p; p = strchr(p, '\n') ? strchr(p, '\n') + 1 : NULL) {
                if (strncmp(p, name, nl) || p[nl] != ' ')
                        continue;
                const char *v = p + nl + 1, *end = strchr(v, '\n');
                size_t len = end ? (size_t)(end - v) : strlen(v);
                if (len >= outlen)
                        return false;
                memcpy(out, v, len);
                out[len] = '\0';
                return true;
        }
        return false;
}

static bool id_chars_ok(const char *s, size_t want_len, bool hex_only)
{
        if (strlen(s) != want_len)
                return false;
        for (const char *p = s; *p; p++) {
                bool hex = (*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f');
                if (!hex && (hex_only || !(*p >= 'A' && *p <= 'Z')))
                        return false;
        }
        return true;
}

/* Reads FOLDER's identity into *ID. Returns 1 when read, 0 when there is none, or -EINVAL with
 * ERR for a file that is not one this code wrote. */
static int identity_read(const char *folder, struct identity *id, char *err, size_t errlen)
{
        char p[PATH_MAX], buf[ID_FILE_MAX + 1], num[24];
        if ((size_t)snprintf(p, sizeof(p), "%s/%s", folder, ID_NAME) >= sizeof(p))
                return -ENAMETOOLONG;
        int fd = open(p, O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0) {
                if (errno == ENOENT)
                        return 0;
                snprintf(err, errlen, "member identity %s: %s", p, strerror(errno));
                return -errno;
        }
        ssize_t n = read(fd, buf, ID_FILE_MAX);
        close(fd);
        if (n < 0) {
                snprintf(err, errlen, "member identity %s: %s", p, strerror(errno));
                return -EIO;
        }
        buf[n] = '\0';
        memset(id, 0, sizeof(*id));
        if (strncmp(buf, ID_TAG "\n", strlen(ID_TAG) + 1) ||
            !field(buf, "id", id->id, sizeof(id->id)) || !id_chars_ok(id->id, ID_LEN, true) ||
            !field(buf, "fingerprint", id->fp, sizeof(id->fp)) || !id_chars_ok(id->fp, 32, true) ||
            !field(buf, "block_size", num, sizeof(num)) ||
            shoal_parse_u64(num, UINT32_MAX, &id->block_size)) {
                snprintf(err, errlen,
                         "member identity %s is malformed (remove it to give this folder a new "
                         "member id)",
                         p);
                return -EINVAL;
        }
        if (!field(buf, "volume", id->volume, sizeof(id->volume)))
                shoal_strlcpy(id->volume, "?", sizeof(id->volume));
        return 1;
}

static int identity_write(const char *folder, const struct identity *id)
{
        char tmp[PATH_MAX], dst[PATH_MAX], buf[ID_FILE_MAX];
        if ((size_t)snprintf(tmp, sizeof(tmp), "%s/%s", folder, ID_TMP_NAME) >= sizeof(tmp) ||
            (size_t)snprintf(dst, sizeof(dst), "%s/%s", folder, ID_NAME) >= sizeof(dst))
                return -ENAMETOOLONG;
        int len = snprintf(buf, sizeof(buf),
                           "%s\nid %s\nfingerprint %s\nblock_size %" PRIu64 "\nvolume %s\n", ID_TAG,
                           id->id, id->fp, id->block_size, id->volume);
        if (len < 0 || (size_t)len >= sizeof(buf))
                return -EINVAL;
        unlink(tmp);
        int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
        if (fd < 0)
                return -errno;
        int ret = 0;
        if (write(fd, buf, (size_t)len) != len || fsync(fd))
                ret = errno ? -errno : -EIO;
        close(fd);
        if (!ret && rename(tmp, dst))
                ret = -errno;
        if (ret)
                unlink(tmp);
        return ret;
}

/* The volume's URL as one printable line. */
static void printable_url(const char *url, char *out, size_t outlen)
{
        size_t o = 0;
        for (const char *p = url; *p && o + 1 < outlen; p++)
                out[o++] = (unsigned char)*p < 0x20 || *p == 0x7f ? '?' : *p;
        out[o] = '\0';
}

int shoal_cache_folders_member_id(struct cache_folders *f, const struct shoal_volume *vol, char *id,
                                  size_t idlen, char *err, size_t errlen)
{
        struct identity mine = {0}, got;
        const char *from = NULL;
        bool *missing = calloc(f->n + 1, sizeof(*missing));
        int ret = 0;

        if (!missing)
                return -ENOMEM;
        if (idlen < ID_LEN + 1) {
                free(missing);
                return -EINVAL;
        }
        shoal_hex(vol->fp, sizeof(vol->fp), mine.fp);
        mine.block_size = vol->block_size;
        printable_url(vol->url, mine.volume, sizeof(mine.volume));
        for (unsigned i = 0; i < f->n; i++) {
                int rc = identity_read(f->v[i].path, &got, err, errlen);
                if (rc < 0) {
                        ret = rc == -EINVAL ? -EINVAL : rc;
                        goto out;
                }
                if (rc == 0) {
                        missing[i] = true;
                        continue;
                }
                if (strcmp(got.fp, mine.fp) || got.block_size != mine.block_size) {
                        snprintf(err, errlen,
                                 "cache dir %s holds member %s of volume %s (block size %" PRIu64
                                 "), not of %s (block size %" PRIu32
                                 "): give each volume's members their own --cache-dir",
                                 f->v[i].path, got.id, got.volume, got.block_size, mine.volume,
                                 vol->block_size);
                        ret = -EINVAL;
                        goto out;
                }
                if (from && strcmp(got.id, mine.id)) {
                        snprintf(err, errlen,
                                 "cache dirs %s and %s hold different member ids (%s, %s): a "
                                 "folder belongs to one member",
                                 from, f->v[i].path, mine.id, got.id);
                        ret = -EINVAL;
                        goto out;
                }
                if (!from) {
                        shoal_strlcpy(mine.id, got.id, sizeof(mine.id));
                        from = f->v[i].path;
                }
        }
        if (!from) {
                unsigned char rnd[ID_LEN / 2];
                ret = shoal_random_bytes(rnd, sizeof(rnd));
                if (ret) {
                        snprintf(err, errlen, "cannot draw a member id: %s", strerror(-ret));
                        goto out;
                }
                shoal_hex(rnd, sizeof(rnd), mine.id);
                log_info("cache", "new member id %s, kept in %s", mine.id,
                         f->n ? f->v[0].path : "-");
        }
        /* Every folder holds it, so that a member whose first disk was replaced keeps its id. */
        for (unsigned i = 0; i < f->n; i++) {
                if (!missing[i])
                        continue;
                int rc = identity_write(f->v[i].path, &mine);
                if (rc)
                        log_warn("cache", "cannot keep member id %s in %s: %s", mine.id,
                                 f->v[i].path, strerror(-rc));
        }
        shoal_strlcpy(id, mine.id, idlen);
out:
        free(missing);
        return ret;
}
