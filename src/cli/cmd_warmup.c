/* shoal warmup — fill the group's caches ahead of a job [C4, U2].
 *   shoal warmup MOUNTPOINT-PATH...          reads the files through the mount, so every block
 *                                            lands in its owner's cache (and the mount's)
 *   shoal warmup --storage S --prefix P ...  asks each block's owner for it directly; without
 *                                            --cache-group it fills the local disk cache
 * Progress every second on stderr; exit 1 when any read failed. With --cache-group, a group with
 * no live member to ask is an error at start, and stops the run within a second or so when the
 * last member leaves. */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/vfs.h>
#include <unistd.h>

#include "cli/cli.h"
#include "client/reader.h"
#include "common/util.h"
#include "group/group.h"
#include "store/store.h"

#define MAX_FILES        10000000
#define FUSE_SUPER_MAGIC 0x65735546
#define MAX_ERROR_LINES  10 /* then only the count, in the last progress line */

struct item {
        char *path;               /* mount mode */
        struct shoal_object *obj; /* storage mode */
        uint32_t index;
};

struct warm {
        struct item *items;
        size_t n, cap;
        size_t next; /* atomic */
        struct shoal_node *node;
        size_t bufsize;
        uint64_t done_items, bytes, errors; /* atomics */
        bool finished;
};

static struct warm *walk_target;

/* Prints one failure, unless MAX_ERROR_LINES have been printed already; counts it either way. */
static void __attribute__((format(printf, 2, 3))) warm_error(struct warm *w, const char *fmt, ...)
{
        uint64_t n = __atomic_fetch_add(&w->errors, 1, __ATOMIC_RELAXED);
        if (n >= MAX_ERROR_LINES)
                return;
        char line[1024];
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(line, sizeof(line), fmt, ap);
        va_end(ap);
        fprintf(stderr, "shoal warmup: %s%s\n", line,
                n + 1 == MAX_ERROR_LINES ? " (further errors are only counted)" : "");
}

static size_t live_providers(struct shoal_node *n)
{
        struct shoal_group_view *v = shoal_group_view_get(n->group);
        size_t k = 0;
        for (size_t i = 0; i < v->n; i++)
                k += v->members[i].role == SHOAL_ROLE_PROVIDER && v->members[i].weight > 0;
        shoal_group_view_put(v);
        return k;
}

static int add_item(struct warm *w, struct item it)
{
        if (w->n == w->cap) {
                size_t cap = w->cap ? w->cap * 2 : 1024;
                struct item *n = realloc(w->items, cap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                w->items = n;
                w->cap = cap;
        }
        w->items[w->n++] = it;
        return 0;
}

static int walk_cb(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        (void)ftw;
        if (type != FTW_F || !S_ISREG(st->st_mode) || walk_target->n >= MAX_FILES)
                return 0;
        const char *base = strrchr(path, '/');
        if (base && !strcmp(base + 1, ".stats"))
                return 0;
        char *p = strdup(path);
        if (!p || add_item(walk_target, (struct item){.path = p}))
                return -1;
        return 0;
}

static void warm_file(struct warm *w, const char *path, char *buf)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                warm_error(w, "%s: %s", path, strerror(errno));
                return;
        }
        for (uint64_t off = 0;;) {
                long n = shoal_pread_full(fd, buf, w->bufsize, off);
                if (n < 0) {
                        warm_error(w, "%s at %llu: %s", path, (unsigned long long)off,
                                   strerror((int)-n));
                        break;
                }
                __atomic_fetch_add(&w->bytes, (uint64_t)n, __ATOMIC_RELAXED);
                off += (uint64_t)n;
                if ((size_t)n < w->bufsize)
                        break;
        }
        close(fd);
}

static void warm_block(struct warm *w, const struct item *it, char *buf)
{
        struct shoal_node *n = w->node;
        uint32_t len = shoal_block_len(it->obj->size, n->vol.block_size, it->index);
        int rc;
        if (n->group) {
                rc = shoal_node_read_from_owner(n, it->obj, it->index, buf);
        } else {
                long got =
                        shoal_reader_read(n->reader, it->obj,
                                          (uint64_t)it->index * n->vol.block_size, len, buf, NULL);
                rc = got == (long)len ? 0 : got < 0 ? (int)got : -EIO;
        }
        if (rc) {
                warm_error(w, "%s block %u: %s", it->obj->key, it->index, strerror(-rc));
                return;
        }
        __atomic_fetch_add(&w->bytes, len, __ATOMIC_RELAXED);
}

static void *worker_main(void *arg)
{
        struct warm *w = arg;
        char *buf = aligned_alloc(4096, w->bufsize);
        if (!buf)
                return NULL;
        for (;;) {
                size_t i = __atomic_fetch_add(&w->next, 1, __ATOMIC_RELAXED);
                if (i >= w->n)
                        break;
                if (w->items[i].path)
                        warm_file(w, w->items[i].path, buf);
                else
                        warm_block(w, &w->items[i], buf);
                __atomic_fetch_add(&w->done_items, 1, __ATOMIC_RELAXED);
        }
        free(buf);
        return NULL;
}

static void progress(struct warm *w, const char *unit, uint64_t t0, bool last)
{
        uint64_t done = __atomic_load_n(&w->done_items, __ATOMIC_RELAXED);
        uint64_t bytes = __atomic_load_n(&w->bytes, __ATOMIC_RELAXED);
        char b[32];
        shoal_format_bytes(bytes, b, sizeof(b));
        double secs = (double)(shoal_now_ns() - t0) / (double)SHOAL_NS_PER_SEC;
        fprintf(stderr, "%swarmup: %llu/%zu %s, %s in %.1f s (%.0f MiB/s), %llu errors%s",
                isatty(STDERR_FILENO) && !last ? "\r" : "", (unsigned long long)done, w->n, unit, b,
                secs, secs > 0 ? (double)bytes / (double)SHOAL_MiB / secs : 0.0,
                (unsigned long long)__atomic_load_n(&w->errors, __ATOMIC_RELAXED),
                isatty(STDERR_FILENO) && !last ? "" : "\n");
}

int shoal_cmd_warmup(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_WARMUP, "warmup", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        uint64_t threads = 16;
        if (cli.val[OPT_THREADS] &&
            (shoal_parse_u64(cli.val[OPT_THREADS], 1024, &threads) || !threads))
                return shoal_cli_fail(&cli, "invalid --threads %s: 1 to 1024",
                                      cli.val[OPT_THREADS]);
        struct warm w = {0};
        struct shoal_object *objs = NULL;
        size_t nobjs = 0;
        const char *unit;
        if (cli.val[OPT_STORAGE]) {
                if (cli.npos)
                        return shoal_cli_fail(&cli, "give paths or --storage, not both");
                struct shoal_node_config cfg;
                if (shoal_cli_node_config(&cli, cli.val[OPT_STORAGE], &cfg))
                        return 2;
                cfg.serve = false;
                cfg.no_sharing = true;
                cfg.group_checked_by_caller = true;
                if (cfg.cache_group)
                        cfg.cache_size = 0; /* the owners keep the blocks, not this process */
                char err[1024];
                rc = shoal_node_start(&cfg, &w.node, err, sizeof(err));
                if (rc) {
                        fprintf(stderr, "shoal warmup: %s\n", err);
                        return shoal_cli_start_code(rc);
                }
                if (w.node->group && !live_providers(w.node)) {
                        fprintf(stderr,
                                "shoal warmup: group %s has no live member to warm (see 'shoal "
                                "group --cache-group %s')\n",
                                cfg.cache_group, cfg.cache_group);
                        shoal_node_stop(w.node);
                        return 1;
                }
                const char *prefix = cli.val[OPT_PREFIX] ? cli.val[OPT_PREFIX] : "";
                rc = shoal_store_list_objects(w.node->store, prefix, MAX_FILES, &objs, &nobjs);
                if (rc) {
                        fprintf(stderr, "shoal warmup: listing '%s' failed: %s\n", prefix,
                                strerror(-rc));
                        shoal_node_stop(w.node);
                        return 1;
                }
                if (!nobjs) {
                        /* A mistyped prefix is not "0/0 blocks" and success. */
                        fprintf(stderr,
                                "shoal warmup: nothing matched: no object (with data) under '%s' "
                                "in %s\n",
                                prefix, cli.val[OPT_STORAGE]);
                        shoal_node_stop(w.node);
                        return 1;
                }
                for (size_t i = 0; i < nobjs; i++)
                        for (uint32_t b = 0;
                             b < shoal_block_count(objs[i].size, w.node->vol.block_size); b++)
                                if (add_item(&w, (struct item){.obj = &objs[i], .index = b}))
                                        break;
                w.bufsize = w.node->vol.block_size;
                unit = "blocks";
        } else {
                if (!cli.npos)
                        return shoal_cli_fail(&cli, "expected MOUNTPOINT-PATH... or --storage "
                                                    "STORAGE --prefix P");
                if (cli.val[OPT_PREFIX])
                        return shoal_cli_fail(&cli, "--prefix goes with --storage");
                walk_target = &w;
                for (int i = 0; i < cli.npos; i++) {
                        struct stat st;
                        if (stat(cli.pos[i], &st))
                                return shoal_cli_fail(&cli, "%s: %s", cli.pos[i], strerror(errno));
                        /* Reading files elsewhere warms nothing: say so instead of "done". */
                        struct statfs sf;
                        if (statfs(cli.pos[i], &sf) || sf.f_type != FUSE_SUPER_MAGIC)
                                return shoal_cli_fail(&cli,
                                                      "%s is not inside a shoal mount (to warm "
                                                      "without one: --storage STORAGE --prefix P)",
                                                      cli.pos[i]);
                        if (nftw(cli.pos[i], walk_cb, 64, FTW_PHYS) < 0)
                                return shoal_cli_fail(&cli, "cannot walk %s", cli.pos[i]);
                }
                w.bufsize = 1 << 20;
                unit = "files";
        }
        pthread_t *th = calloc(threads, sizeof(*th));
        uint64_t t0 = shoal_now_ns();
        unsigned started = 0;
        for (unsigned t = 0; th && t < threads; t++)
                if (!pthread_create(&th[t], NULL, worker_main, &w))
                        started++;
        uint64_t next_print = t0 + SHOAL_NS_PER_SEC;
        bool emptied = false;
        while (__atomic_load_n(&w.done_items, __ATOMIC_RELAXED) < w.n && started) {
                shoal_sleep_ns(50 * SHOAL_NS_PER_MS);
                if (shoal_now_ns() >= next_print) {
                        if (w.node && w.node->group && !live_providers(w.node)) {
                                /* the workers take no new item; what is in flight finishes */
                                __atomic_store_n(&w.next, w.n, __ATOMIC_RELAXED);
                                emptied = true;
                                break;
                        }
                        progress(&w, unit, t0, false);
                        next_print += SHOAL_NS_PER_SEC;
                }
        }
        for (unsigned t = 0; t < started; t++)
                pthread_join(th[t], NULL);
        progress(&w, unit, t0, true);
        if (emptied)
                fprintf(stderr, "shoal warmup: the group has no live member left to warm; "
                                "stopped\n");
        free(th);
        for (size_t i = 0; i < w.n; i++)
                free(w.items[i].path);
        free(w.items);
        free(objs);
        if (w.node)
                shoal_node_stop(w.node);
        return w.errors || emptied || !started ? 1 : 0;
}
