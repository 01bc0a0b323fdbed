/* shoal warmup — fill the group's caches ahead of a job [C4, U2].
 *   shoal warmup MOUNTPOINT-PATH...          reads the files through the mount, so every block
 *                                            lands in its owner's cache (and the mount's)
 *   shoal warmup --storage S --prefix P ...  asks each block's owner for it directly; without
 *                                            --cache-group it fills the local disk cache
 *   shoal warmup --storage S --plan FILE     the same for the blocks of an access plan's items
 *                                            (docs/python.md), in order of first use, so that
 *                                            a cold first epoch overlaps its warmup
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
#include "common/thread.h"
#include "common/util.h"
#include "group/group.h"
#include "store/store.h"

#define MAX_FILES            10000000
#define FUSE_SUPER_MAGIC     0x65735546
#define MAX_ERROR_LINES      10 /* then only the count, in the last progress line */
#define WARM_THREADS_DEFAULT 16
#define WARM_FILE_BUF        (1 << 20)        /* a worker's buffer for files through the mount */
#define PROGRESS_EVERY_NS    SHOAL_NS_PER_SEC /* a progress line */
#define POLL_NS              (50 * SHOAL_NS_PER_MS)

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

/* ---- --plan FILE ----------------------------------------------------------------------------- */

/* The objects a plan names (stat'ed once each; NULL for one that failed) and the blocks already
 * queued, both in open-addressing sets that double when half full. */
struct plan_load {
        struct shoal_object **objs;
        size_t nobjs, ocap;
        uint32_t *ohash; /* object index + 1; 0 empty */
        size_t omask;
        uint64_t *seen; /* (object index + 1) << 32 | block; 0 empty */
        size_t smask, nseen;
};

static uint64_t mix64(uint64_t h)
{
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdULL;
        h ^= h >> 33;
        return h;
}

static uint64_t str_hash(const char *s)
{
        uint64_t h = 1469598103934665603ULL;
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        return h;
}

static int ohash_grow(struct plan_load *pl)
{
        size_t n = pl->omask ? 2 * (pl->omask + 1) : 1024;
        uint32_t *h = calloc(n, sizeof(*h));
        if (!h)
                return -ENOMEM;
        for (size_t i = 0; i < pl->nobjs; i++) {
                const char *key = pl->objs[i] ? pl->objs[i]->key : NULL;
                if (!key)
                        continue;
                size_t j = str_hash(key) & (n - 1);
                while (h[j])
                        j = (j + 1) & (n - 1);
                h[j] = (uint32_t)i + 1;
        }
        free(pl->ohash);
        pl->ohash = h;
        pl->omask = n - 1;
        return 0;
}

/* The index of KEY's object, stat'ed on first sight (*OBJ NULL when that failed: reported
 * once). Returns the index or a negative errno. */
static long plan_object(struct warm *w, struct plan_load *pl, const char *key)
{
        if (2 * (pl->nobjs + 1) > pl->omask + 1 && ohash_grow(pl))
                return -ENOMEM;
        size_t j = str_hash(key) & pl->omask;
        for (; pl->ohash[j]; j = (j + 1) & pl->omask) {
                struct shoal_object *o = pl->objs[pl->ohash[j] - 1];
                if (!strcmp(o->key, key))
                        return pl->ohash[j] - 1;
        }
        if (pl->nobjs == pl->ocap) {
                size_t cap = pl->ocap ? 2 * pl->ocap : 256;
                struct shoal_object **n = realloc(pl->objs, cap * sizeof(*n));
                if (!n)
                        return -ENOMEM;
                pl->objs = n;
                pl->ocap = cap;
        }
        struct shoal_object *o = calloc(1, sizeof(*o));
        if (!o)
                return -ENOMEM;
        int rc = shoal_store_stat(w->node->store, key, o);
        shoal_strlcpy(o->key, key, sizeof(o->key)); /* the set finds failed keys too */
        if (rc) {
                warm_error(w, "%s: %s", key, rc == -ENOENT ? "no such object" : strerror(-rc));
                o->size = 0; /* nothing of it is warmed */
        }
        pl->objs[pl->nobjs] = o;
        pl->ohash[j] = (uint32_t)pl->nobjs + 1;
        return (long)pl->nobjs++;
}

/* Whether block INDEX of object OBJ was not queued yet (and now is marked). */
static int plan_first_use(struct plan_load *pl, size_t obj, uint32_t index, bool *first)
{
        if (2 * (pl->nseen + 1) > pl->smask + 1) {
                size_t n = pl->smask ? 2 * (pl->smask + 1) : 4096;
                uint64_t *h = calloc(n, sizeof(*h));
                if (!h)
                        return -ENOMEM;
                for (size_t i = 0; pl->seen && i <= pl->smask; i++) {
                        if (!pl->seen[i])
                                continue;
                        size_t j = mix64(pl->seen[i]) & (n - 1);
                        while (h[j])
                                j = (j + 1) & (n - 1);
                        h[j] = pl->seen[i];
                }
                free(pl->seen);
                pl->seen = h;
                pl->smask = n - 1;
        }
        uint64_t v = ((uint64_t)(obj + 1) << 32) | index;
        size_t j = mix64(v) & pl->smask;
        for (; pl->seen[j]; j = (j + 1) & pl->smask) {
                if (pl->seen[j] == v) {
                        *first = false;
                        return 0;
                }
        }
        pl->seen[j] = v;
        pl->nseen++;
        *first = true;
        return 0;
}

/* Splits LINE (no newline) into KEY and its range. Returns 0, 1 for an empty line, -EINVAL. */
static int plan_parse(char *line, const char **key, uint64_t *off, uint64_t *len)
{
        if (!*line)
                return 1;
        *key = line;
        *off = 0;
        *len = UINT64_MAX;
        char *t1 = strchr(line, '\t');
        if (!t1)
                return 0;
        *t1++ = 0;
        char *t2 = strchr(t1, '\t');
        if (!t2)
                return -EINVAL;
        *t2++ = 0;
        if (shoal_parse_u64(t1, UINT64_MAX, off) || shoal_parse_u64(t2, UINT64_MAX, len) || !*len)
                return -EINVAL;
        return 0;
}

/* Queues the blocks of the items of FILE, each on its first use. Returns 0, 2 after a bad line
 * or an unreadable file (printed), 1 when out of memory. Missing objects are counted errors. */
static int plan_read_file(struct shoal_cli *cli, struct warm *w, struct plan_load *pl,
                          const char *path)
{
        FILE *f = fopen(path, "re");
        if (!f)
                return shoal_cli_fail(cli, "--plan %s: %s", path, strerror(errno));
        char *line = NULL;
        size_t cap = 0;
        ssize_t n;
        unsigned long lineno = 0;
        uint32_t bs = w->node->vol.block_size;
        int rc = 0;
        while (!rc && (n = getline(&line, &cap, f)) >= 0) {
                lineno++;
                while (n > 0 && (line[n - 1] == '\n' || line[n - 1] == '\r'))
                        line[--n] = 0;
                const char *key;
                uint64_t off, len;
                int prc = plan_parse(line, &key, &off, &len);
                if (prc == 1)
                        continue;
                if (prc || strlen(key) > SHOAL_KEY_MAX) {
                        rc = shoal_cli_fail(cli,
                                            "--plan %s:%lu: expected KEY or "
                                            "KEY<TAB>OFFSET<TAB>LENGTH (LENGTH > 0)",
                                            path, lineno);
                        break;
                }
                long id = plan_object(w, pl, key);
                if (id < 0) {
                        rc = 1;
                        break;
                }
                struct shoal_object *o = pl->objs[id];
                if (off >= o->size)
                        continue; /* past the end, or a failed stat (counted): nothing to warm */
                uint64_t last = (off + SHOAL_MIN(len, o->size - off) - 1) / bs;
                for (uint64_t b = off / bs; !rc && b <= last; b++) {
                        bool first;
                        if (plan_first_use(pl, (size_t)id, (uint32_t)b, &first) ||
                            (first && add_item(w, (struct item){.obj = o, .index = (uint32_t)b})))
                                rc = 1;
                }
        }
        if (rc == 1)
                fprintf(stderr, "shoal warmup: out of memory reading the plan\n");
        else if (!rc && ferror(f))
                rc = shoal_cli_fail(cli, "--plan %s: read error", path);
        free(line);
        fclose(f);
        return rc;
}

static void plan_load_free(struct plan_load *pl)
{
        for (size_t i = 0; i < pl->nobjs; i++)
                free(pl->objs[i]);
        free(pl->objs);
        free(pl->ohash);
        free(pl->seen);
}

/* What a run holds besides the queue: the listed objects and the plan's. */
struct warm_run {
        struct shoal_object *objs;
        size_t nobjs;
        struct plan_load plan;
        const char *unit; /* "blocks" or "files" */
};

/* Starts W's node on --storage: a reader that serves nothing; with a group, it must have a live
 * member. Returns 0 or the exit code (the node is then stopped). */
static int storage_node(struct shoal_cli *cli, struct warm *w)
{
        struct shoal_node_config cfg;
        if (shoal_cli_node_config(cli, cli->val[OPT_STORAGE], &cfg))
                return 2;
        cfg.serve = false;
        cfg.no_sharing = true;
        cfg.group_checked_by_caller = true;
        if (cfg.cache_group)
                cfg.cache_size = 0; /* the owners keep the blocks, not this process */
        char err[1024];
        int rc = shoal_node_start(&cfg, &w->node, err, sizeof(err));
        if (rc) {
                fprintf(stderr, "shoal warmup: %s\n", err);
                return shoal_cli_start_code(rc);
        }
        if (w->node->group && !live_providers(w->node)) {
                fprintf(stderr,
                        "shoal warmup: group %s has no live member to warm (see 'shoal "
                        "group --cache-group %s')\n",
                        cfg.cache_group, cfg.cache_group);
                shoal_node_stop(w->node);
                w->node = NULL;
                return 1;
        }
        return 0;
}

/* Queues every block of the objects under --prefix. Returns 0 or the exit code. */
static int queue_prefix(struct shoal_cli *cli, struct warm *w, struct warm_run *run)
{
        const char *prefix = cli->val[OPT_PREFIX] ? cli->val[OPT_PREFIX] : "";
        int rc = shoal_store_list_objects(w->node->store, prefix, MAX_FILES, &run->objs,
                                          &run->nobjs);
        if (rc) {
                fprintf(stderr, "shoal warmup: listing '%s' failed: %s\n", prefix, strerror(-rc));
                return 1;
        }
        if (!run->nobjs) {
                /* A mistyped prefix is not "0/0 blocks" and success. */
                fprintf(stderr,
                        "shoal warmup: nothing matched: no object (with data) under '%s' "
                        "in %s\n",
                        prefix, cli->val[OPT_STORAGE]);
                return 1;
        }
        uint32_t bs = w->node->vol.block_size;
        for (size_t i = 0; i < run->nobjs; i++)
                for (uint32_t b = 0; b < shoal_block_count(run->objs[i].size, bs); b++)
                        if (add_item(w, (struct item){.obj = &run->objs[i], .index = b}))
                                break;
        return 0;
}

/* --storage: the blocks of --plan's items or of the objects under --prefix, read from their
 * owners. Returns 0 or the exit code. */
static int queue_storage(struct shoal_cli *cli, struct warm *w, struct warm_run *run)
{
        if (cli->npos)
                return shoal_cli_fail(cli, "give paths or --storage, not both");
        const char *plan = cli->val[OPT_PLAN];
        if (plan && !*plan)
                return shoal_cli_fail(cli, "--plan needs a FILE");
        int rc = storage_node(cli, w);
        if (rc)
                return rc;
        if (plan && cli->val[OPT_PREFIX])
                return shoal_cli_fail(cli, "give --plan or --prefix, not both");
        rc = plan ? plan_read_file(cli, w, &run->plan, plan) : queue_prefix(cli, w, run);
        w->bufsize = w->node->vol.block_size;
        run->unit = "blocks";
        return rc;
}

/* MOUNTPOINT-PATH...: every file under the paths, read through the mount. Returns 0 or the exit
 * code. */
static int queue_paths(struct shoal_cli *cli, struct warm *w, struct warm_run *run)
{
        if (!cli->npos)
                return shoal_cli_fail(cli, "expected MOUNTPOINT-PATH... or --storage "
                                           "STORAGE --prefix P");
        if (cli->val[OPT_PREFIX] || cli->val[OPT_PLAN])
                return shoal_cli_fail(cli, "--%s goes with --storage",
                                      cli->val[OPT_PREFIX] ? "prefix" : "plan");
        walk_target = w;
        for (int i = 0; i < cli->npos; i++) {
                struct stat st;
                if (stat(cli->pos[i], &st))
                        return shoal_cli_fail(cli, "%s: %s", cli->pos[i], strerror(errno));
                /* Reading files elsewhere warms nothing: say so instead of "done". */
                struct statfs sf;
                if (statfs(cli->pos[i], &sf) || sf.f_type != FUSE_SUPER_MAGIC)
                        return shoal_cli_fail(cli,
                                              "%s is not inside a shoal mount (to warm "
                                              "without one: --storage STORAGE --prefix P)",
                                              cli->pos[i]);
                if (nftw(cli->pos[i], walk_cb, 64, FTW_PHYS) < 0)
                        return shoal_cli_fail(cli, "cannot walk %s", cli->pos[i]);
        }
        w->bufsize = WARM_FILE_BUF;
        run->unit = "files";
        return 0;
}

/* Runs THREADS workers over W's queue, printing progress every second; with a group, stops
 * taking items when its last member leaves. Returns the exit code. */
static int run_workers(struct warm *w, uint64_t threads, const char *unit)
{
        pthread_t *th = calloc(threads, sizeof(*th));
        uint64_t t0 = shoal_now_ns();
        unsigned started = 0;
        for (unsigned t = 0; th && t < threads; t++)
                if (!shoal_thread_create(&th[t], worker_main, w))
                        started++;
        uint64_t next_print = t0 + PROGRESS_EVERY_NS;
        bool emptied = false;
        while (__atomic_load_n(&w->done_items, __ATOMIC_RELAXED) < w->n && started) {
                shoal_sleep_ns(POLL_NS);
                if (shoal_now_ns() < next_print)
                        continue;
                if (w->node && w->node->group && !live_providers(w->node)) {
                        /* the workers take no new item; what is in flight finishes */
                        __atomic_store_n(&w->next, w->n, __ATOMIC_RELAXED);
                        emptied = true;
                        break;
                }
                progress(w, unit, t0, false);
                next_print += PROGRESS_EVERY_NS;
        }
        for (unsigned t = 0; t < started; t++)
                pthread_join(th[t], NULL);
        progress(w, unit, t0, true);
        if (emptied)
                fprintf(stderr, "shoal warmup: the group has no live member left to warm; "
                                "stopped\n");
        free(th);
        return w->errors || emptied || !started ? 1 : 0;
}

static void warm_free(struct warm *w, struct warm_run *run)
{
        for (size_t i = 0; i < w->n; i++)
                free(w->items[i].path);
        free(w->items);
        free(run->objs);
        plan_load_free(&run->plan);
        if (w->node)
                shoal_node_stop(w->node);
}

int shoal_cmd_warmup(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_WARMUP, "warmup", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        uint64_t threads = WARM_THREADS_DEFAULT;
        if (cli.val[OPT_THREADS] &&
            (shoal_parse_u64(cli.val[OPT_THREADS], 1024, &threads) || !threads))
                return shoal_cli_fail(&cli, "invalid --threads %s: 1 to 1024",
                                      cli.val[OPT_THREADS]);
        struct warm w = {0};
        struct warm_run run = {0};
        rc = cli.val[OPT_STORAGE] ? queue_storage(&cli, &w, &run) : queue_paths(&cli, &w, &run);
        if (!rc)
                rc = run_workers(&w, threads, run.unit);
        warm_free(&w, &run);
        return rc;
}
