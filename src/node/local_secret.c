/* The host-local secret (node/local_secret.h). */
#include "node/local_secret.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"

#define FILE_LEN (SHOAL_LOCAL_SECRET_LEN + 1) /* the digits and a newline */

static int fail(char *err, size_t errlen, int rc, const char *path, const char *why)
{
        snprintf(err, errlen, "local secret %s: %s", path, why);
        return rc;
}

/* Reads FD's contents into OUT: exactly 64 hex digits, and an optional newline. */
static int read_digits(int fd, uint8_t out[SHOAL_LOCAL_SECRET_LEN])
{
        uint8_t buf[FILE_LEN + 1];
        size_t n = 0;
        while (n < sizeof(buf)) {
                ssize_t r = read(fd, buf + n, sizeof(buf) - n);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0) {
                        explicit_bzero(buf, sizeof(buf));
                        return -errno;
                }
                if (r == 0)
                        break;
                n += (size_t)r;
        }
        bool ok = n == SHOAL_LOCAL_SECRET_LEN || (n == FILE_LEN && buf[n - 1] == '\n');
        for (size_t i = 0; ok && i < SHOAL_LOCAL_SECRET_LEN; i++)
                ok = shoal_hexval(buf[i]) >= 0;
        if (ok)
                memcpy(out, buf, SHOAL_LOCAL_SECRET_LEN);
        explicit_bzero(buf, sizeof(buf));
        return ok ? 0 : -EINVAL;
}

/* Opens PATH without following a link at its end; checks it is a regular file nobody else may
 * write (and, for the member, owned by this user and unreadable by others). */
static int open_checked(const char *path, bool member, char *err, size_t errlen)
{
        int fd = open(path, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
        if (fd < 0)
                return -errno;
        struct stat st;
        const char *why = NULL;
        if (fstat(fd, &st))
                why = "cannot stat it";
        else if (!S_ISREG(st.st_mode))
                why = "not a regular file";
        else if (st.st_mode & 022)
                why = "writable by other users: remove it (the member makes a new one)";
        else if (member && st.st_uid != geteuid())
                why = "owned by another user: remove it (the member makes a new one)";
        else if (member && (st.st_mode & 007))
                why = "readable by every user: chmod 600 it, or remove it";
        if (why) {
                close(fd);
                return fail(err, errlen, -EPERM, path, why);
        }
        return fd;
}

/* The folder above PATH must not let another user replace the file: owned by root or us, and
 * not writable by others unless sticky (as /tmp is). */
static int check_parent(const char *path, char *err, size_t errlen)
{
        char dir[1024];
        if (shoal_strlcpy(dir, path, sizeof(dir)) >= sizeof(dir))
                return fail(err, errlen, -ENAMETOOLONG, path, "path too long");
        char *slash = strrchr(dir, '/');
        if (!slash)
                shoal_strlcpy(dir, ".", sizeof(dir));
        else if (slash == dir)
                dir[1] = '\0';
        else
                *slash = '\0';
        struct stat st;
        if (stat(dir, &st))
                return -errno;
        bool owner_ok = st.st_uid == 0 || st.st_uid == geteuid();
        bool swappable = (st.st_mode & 022) && !(st.st_mode & S_ISVTX);
        if (!S_ISDIR(st.st_mode) || !owner_ok || swappable)
                return fail(err, errlen, -EPERM, path,
                            "its folder lets another user replace it: give --local-secret-file "
                            "in a folder only this user or root may write");
        return 0;
}

/* mkdir -p of PATH's folders, 0755 (beside the registry, which makes them the same way). */
static void make_parents(const char *path)
{
        char buf[1024];
        if (shoal_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
                return;
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(buf, 0755) < 0 && errno != EEXIST)
                        return; /* the open below says why */
                *p = '/';
        }
}

/* Writes a fresh secret to a private temporary file and links it to PATH: two members starting
 * at once agree on one (link fails for the second, which reads the first's). Returns 0, -EEXIST
 * (someone else's is there now) or a negative errno. */
static int create_new(const char *path)
{
        char tmp[1100];
        if ((size_t)snprintf(tmp, sizeof(tmp), "%s.tmp.XXXXXX", path) >= sizeof(tmp))
                return -ENAMETOOLONG;
        int fd = mkostemp(tmp, O_CLOEXEC); /* 0600, O_EXCL */
        if (fd < 0)
                return -errno;
        uint8_t rnd[SHOAL_LOCAL_SECRET_LEN / 2];
        char text[FILE_LEN + 1];
        int rc = shoal_random_bytes(rnd, sizeof(rnd));
        if (!rc) {
                shoal_hex(rnd, sizeof(rnd), text);
                text[SHOAL_LOCAL_SECRET_LEN] = '\n';
                rc = shoal_write_all(fd, text, FILE_LEN);
        }
        explicit_bzero(rnd, sizeof(rnd));
        explicit_bzero(text, sizeof(text));
        if (!rc && fsync(fd))
                rc = -errno;
        close(fd);
        if (!rc && link(tmp, path))
                rc = -errno;
        unlink(tmp);
        return rc;
}

int shoal_local_secret_create(const char *path, uint8_t out[SHOAL_LOCAL_SECRET_LEN], char *err,
                              size_t errlen)
{
        make_parents(path);
        int rc = check_parent(path, err, errlen);
        if (rc == -EPERM)
                return rc;
        for (int attempt = 0; attempt < 3; attempt++) {
                int fd = open_checked(path, true, err, errlen);
                if (fd == -EPERM)
                        return fd;
                if (fd >= 0) {
                        rc = read_digits(fd, out);
                        close(fd);
                        if (rc == -EINVAL)
                                return fail(err, errlen, rc, path,
                                            "not 64 hex digits: remove it (the member makes a "
                                            "new one)");
                        if (rc)
                                return fail(err, errlen, rc, path, strerror(-rc));
                        return 0;
                }
                if (fd != -ENOENT)
                        return fail(err, errlen, fd, path, strerror(-fd));
                rc = create_new(path);
                if (rc && rc != -EEXIST)
                        return fail(err, errlen, rc, path, strerror(-rc));
        }
        return fail(err, errlen, -EAGAIN, path, "it keeps changing");
}

int shoal_local_secret_read(const char *path, uint8_t out[SHOAL_LOCAL_SECRET_LEN], char *err,
                            size_t errlen)
{
        int fd = open_checked(path, false, err, errlen);
        if (fd == -ENOENT || fd == -EACCES || fd == -ENOTDIR)
                return 1;
        if (fd == -EPERM)
                return fd;
        if (fd < 0)
                return fail(err, errlen, fd, path, strerror(-fd));
        int rc = read_digits(fd, out);
        close(fd);
        if (rc == -EINVAL)
                return fail(err, errlen, rc, path, "not 64 hex digits");
        if (rc)
                return fail(err, errlen, rc, path, strerror(-rc));
        return 0;
}
