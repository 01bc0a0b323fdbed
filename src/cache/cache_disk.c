/* The disk cache opened and closed: its folders locked (cache_folder.c), created and emptied of
 * unfinished inserts, then the index rebuilt from their files (cache_index.c). The design is in
 * cache.h; the files of the module and its locking in cache_internal.h. */
#include "cache/cache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <glob.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache_folder.h"
#include "cache/cache_internal.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define MOD "cache"

static void set_err(char *err, size_t errlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void set_err(char *err, size_t errlen, const char *fmt, ...)
{
        va_list ap;
        if (!err || !errlen)
                return;
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
}

static int mkdir_p(const char *path)
{
        char buf[PATH_MAX];
        struct stat st;
        if (shoal_strlcpy(buf, path, sizeof(buf)) >= sizeof(buf))
                return -ENAMETOOLONG;
        for (char *p = buf + 1; *p; p++) {
                if (*p != '/')
                        continue;
                *p = '\0';
                if (mkdir(buf, 0755) && errno != EEXIST)
                        return -errno;
                *p = '/';
        }
        if (mkdir(buf, 0755) && errno != EEXIST)
                return -errno;
        if (stat(buf, &st))
                return -errno;
        return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

static int open_own_dir(int parent, const char *name)
{
        if (mkdirat(parent, name, CACHE_DIR_MODE) && errno != EEXIST)
                return -errno;
        int fd = openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
        return fd < 0 ? -errno : fd;
}

/* Empties tmp/: anything there is an insert that a previous process never finished. */
static void clean_tmp(struct cache_dir *d)
{
        int fd = openat(d->tmp_fd, ".", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (fd < 0)
                return;
        DIR *dh = fdopendir(fd);
        if (!dh) {
                close(fd);
                return;
        }
        struct dirent *de;
        unsigned n = 0;
        while ((de = readdir(dh))) {
                if (de->d_type == DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
                        continue;
                if (unlinkat(d->tmp_fd, de->d_name, 0) == 0)
                        n++;
        }
        closedir(dh);
        if (n)
                log_info(MOD, "dir %s: removed %u unfinished temp files", d->root, n);
}

/* Adds BASE/shoal-<fp> as a dir, unless the same folder is already in use. */
static int dir_add(struct shoal_cache *c, const char *base, const struct shoal_volume *vol,
                   char *err, size_t errlen)
{
        char fp[17];
        struct cache_dir *d;
        struct stat st;
        int ret, root_fd;

        shoal_hex(vol->fp, 8, fp);
        if (c->ndirs % 8 == 0) {
                void *n = realloc(c->dirs, (c->ndirs + 8) * sizeof(*c->dirs));
                if (!n) {
                        set_err(err, errlen, "cache: out of memory");
                        return -ENOMEM;
                }
                c->dirs = n;
        }
        d = &c->dirs[c->ndirs];
        memset(d, 0, sizeof(*d));
        d->blocks_fd = d->tmp_fd = -1;
        if ((size_t)snprintf(d->root, sizeof(d->root), "%s/shoal-%s", base, fp) >=
            sizeof(d->root)) {
                set_err(err, errlen, "cache dir %s: path too long", base);
                return -ENAMETOOLONG;
        }
        if (mkdir(d->root, CACHE_DIR_MODE) && errno != EEXIST) {
                ret = -errno;
                goto out_err;
        }
        root_fd = open(d->root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
        if (root_fd < 0) {
                ret = -errno;
                goto out_err;
        }
        if (fstat(root_fd, &st)) {
                ret = -errno;
                close(root_fd);
                goto out_err;
        }
        for (unsigned i = 0; i < c->ndirs; i++) {
                if (c->dirs[i].dev == st.st_dev && c->dirs[i].ino == st.st_ino) {
                        close(root_fd);
                        return 0; /* listed twice (or by two globs) */
                }
        }
        d->dev = st.st_dev;
        d->ino = st.st_ino;
        d->blocks_fd = open_own_dir(root_fd, "blocks");
        d->tmp_fd = open_own_dir(root_fd, "tmp");
        close(root_fd);
        if (d->blocks_fd < 0 || d->tmp_fd < 0) {
                ret = d->blocks_fd < 0 ? d->blocks_fd : d->tmp_fd;
                goto out_close;
        }
        /* An unwritable dir must fail now, not turn every insert into an error later. */
        if (faccessat(d->tmp_fd, ".", W_OK, AT_EACCESS)) {
                ret = -errno;
                goto out_close;
        }
        d->fs = c->ndirs;
        for (unsigned i = 0; i < c->ndirs; i++) {
                if (c->dirs[i].dev == d->dev) {
                        d->fs = c->dirs[i].fs;
                        break;
                }
        }
        c->ndirs++;
        return 0;

out_close:
        if (d->blocks_fd >= 0)
                close(d->blocks_fd);
        if (d->tmp_fd >= 0)
                close(d->tmp_fd);
out_err:
        set_err(err, errlen, "cache dir %s: %s", d->root, strerror(-ret));
        return ret;
}

static int dirs_add_all(struct shoal_cache *c, const char *dirs, const struct shoal_volume *vol,
                        char *err, size_t errlen)
{
        char *copy = strdup(dirs), *save = NULL, *elem;
        int ret = 0;

        if (!copy) {
                set_err(err, errlen, "cache: out of memory");
                return -ENOMEM;
        }
        for (elem = strtok_r(copy, ":", &save); elem && !ret; elem = strtok_r(NULL, ":", &save)) {
                if (!strpbrk(elem, "*?[")) {
                        ret = mkdir_p(elem);
                        if (ret)
                                set_err(err, errlen, "cache dir %s: %s", elem, strerror(-ret));
                        else
                                ret = shoal_cache_folder_lock(&c->folders, elem, err, errlen);
                        if (!ret)
                                ret = dir_add(c, elem, vol, err, errlen);
                        continue;
                }
                glob_t g;
                int grc = glob(elem, GLOB_TILDE, NULL, &g);
                if (grc == GLOB_NOMATCH) {
                        log_warn(MOD, "cache dir pattern %s matches nothing", elem);
                        continue;
                }
                if (grc) {
                        set_err(err, errlen, "cache dir pattern %s: glob failed", elem);
                        ret = grc == GLOB_NOSPACE ? -ENOMEM : -EIO;
                        continue;
                }
                for (size_t i = 0; i < g.gl_pathc && !ret; i++) {
                        struct stat st;
                        if (stat(g.gl_pathv[i], &st) || !S_ISDIR(st.st_mode))
                                continue;
                        ret = shoal_cache_folder_lock(&c->folders, g.gl_pathv[i], err, errlen);
                        if (!ret)
                                ret = dir_add(c, g.gl_pathv[i], vol, err, errlen);
                }
                globfree(&g);
        }
        free(copy);
        return ret;
}

static void cache_free(struct shoal_cache *c)
{
        cache_index_free(c);
        for (unsigned i = 0; i < c->ndirs; i++) {
                close(c->dirs[i].blocks_fd);
                close(c->dirs[i].tmp_fd);
        }
        free(c->dirs);
        shoal_cache_folders_release(&c->folders);
        for (unsigned i = 0; i < CACHE_PATH_LOCKS; i++)
                pthread_mutex_destroy(&c->path_locks[i]);
        pthread_mutex_destroy(&c->lock);
        free(c);
}

/* Failures at run time never read as a bad configuration. */
static int runtime_err(int rc)
{
        return rc == -EINVAL ? -EIO : rc;
}

static int check_config(const struct shoal_cache_config *cfg, char *err, size_t errlen)
{
        if (cfg->size_bytes < -1) {
                set_err(err, errlen, "cache size must be -1, 0 or a number of bytes");
                return -EINVAL;
        }
        if (!(cfg->free_space_ratio >= 0 && cfg->free_space_ratio < 1)) {
                set_err(err, errlen, "free space ratio must be in [0, 1)");
                return -EINVAL;
        }
        return 0;
}

/* The folders of CFG, each locked, created and emptied of unfinished inserts, with their LRUs. */
static int dirs_open(struct shoal_cache *c, const struct shoal_cache_config *cfg, char *err,
                     size_t errlen)
{
        int ret = dirs_add_all(c, cfg->dirs, cfg->volume, err, errlen);
        if (ret) {
                /* A folder in use is the user's to fix, like a bad flag. */
                return ret == -EBUSY ? -EINVAL : runtime_err(ret);
        }
        if (c->ndirs == 0) {
                set_err(err, errlen, "cache dir %s: no dir matched", cfg->dirs);
                return -ENOENT;
        }
        /* Only now: the list heads point at themselves, and dir_add moves the array. */
        for (unsigned i = 0; i < c->ndirs; i++) {
                shoal_lru_init(&c->dirs[i].lru);
                clean_tmp(&c->dirs[i]);
        }
        return 0;
}

int shoal_cache_open(const struct shoal_cache_config *cfg, struct shoal_cache **out, char *err,
                     size_t errlen)
{
        struct shoal_cache *c = calloc(1, sizeof(*c));
        int ret;

        *out = NULL;
        if (!c) {
                set_err(err, errlen, "cache: out of memory");
                return -ENOMEM;
        }
        pthread_mutex_init(&c->lock, NULL);
        for (unsigned i = 0; i < CACHE_PATH_LOCKS; i++)
                pthread_mutex_init(&c->path_locks[i], NULL);
        ret = cache_index_init(c);
        if (ret) {
                set_err(err, errlen, "cache: out of memory");
                goto out_free;
        }
        ret = check_config(cfg, err, errlen);
        if (ret)
                goto out_free;
        c->capacity = cfg->size_bytes > 0 ? (uint64_t)cfg->size_bytes : UINT64_MAX;
        c->ratio = cfg->free_space_ratio;
        c->down_ns = CACHE_DIR_DOWN_NS;
        if (cfg->size_bytes == 0 || !cfg->dirs || !cfg->dirs[0]) {
                *out = c; /* no disk cache: every lookup misses */
                return 0;
        }
        ret = -EINVAL;
        if (!cfg->volume) {
                set_err(err, errlen, "cache: no volume");
                goto out_free;
        }
        c->volume = cfg->volume;
        ret = dirs_open(c, cfg, err, errlen);
        if (ret)
                goto out_free;
        ret = cache_index_rebuild(c);
        if (ret) {
                set_err(err, errlen, "cache: indexing failed: %s", strerror(-ret));
                ret = runtime_err(ret);
                goto out_free;
        }
        cache_index_shrink(c); /* configured smaller than last time: now, not at the first insert */
        for (unsigned i = 0; i < c->ndirs; i++)
                if (c->dirs[i].fs == i)
                        cache_fs_refresh(c, i);
        c->enabled = true;
        log_info(MOD, "%u dirs, %zu blocks, %llu bytes indexed", c->ndirs, c->count,
                 (unsigned long long)c->bytes);
        *out = c;
        return 0;

out_free:
        cache_free(c);
        return ret;
}

void shoal_cache_close(struct shoal_cache *c)
{
        if (!c)
                return;
        shoal_metric_gauge_add(SHOAL_M_blockcache_blocks, -(int64_t)c->count);
        shoal_metric_gauge_add(SHOAL_M_blockcache_bytes, -(int64_t)c->bytes);
        shoal_metric_gauge_add(SHOAL_M_blockcache_dirs, -(int64_t)(c->ndirs - c->dirs_down));
        shoal_metric_gauge_add(SHOAL_M_blockcache_dirs_down, -(int64_t)c->dirs_down);
        cache_free(c);
}

int shoal_cache_member_id(struct shoal_cache *c, char *id, size_t idlen, char *err, size_t errlen)
{
        if (!c || !c->folders.n || !c->volume)
                return -ENOENT;
        return shoal_cache_folders_member_id(&c->folders, c->volume, id, idlen, err, errlen);
}

bool shoal_cache_enabled(const struct shoal_cache *c)
{
        return c && c->enabled && atomic_load(&c->dirs_down) < c->ndirs;
}
