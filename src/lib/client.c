/* libshoal clients and files: a node started as a consumer (no server, no listening socket), the
 * store for stat and listings, the reader for data; and what fork() does to them.
 *
 * fork(): the first library call installs pthread_atfork handlers. Before a fork they close the
 * fork gate (common/forkgate.h: calls in progress finish, new ones wait, background work that
 * holds process-wide locks is held off) and take the metrics registry lock; after it, the
 * parent reopens both and the child gets fresh ones and a new fork generation. A client whose
 * node belongs to an older generation starts a new node on its next call. The old node is
 * abandoned, not stopped: its threads do not exist in the child and its locks may have been held
 * by them, so nothing of it may run; its memory stays reachable (a leak checker sees it), its
 * read buffers are not even mapped in the child (MADV_DONTFORK: the fork copies no page tables
 * for them), and its descriptors stay open but unused until the child exits. */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "node/node.h"
#include "client/reader.h"
#include "common/forkgate.h"
#include "common/log.h"
#include "common/util.h"
#include "lib/lib.h"
#include "metrics/metrics.h"
#include "net/fabric.h"
#include "shoal/shoal.h"
#include "store/store.h"

#define MAX_PINS    64 /* pieces per shoal_pread_pinned call */
#define MAX_HINTED  16 /* blocks of one read or WILLNEED hinted to readahead at once */
#define LIB_VERSION "0.1.0"

struct shoal_client {
        pthread_mutex_t mu;      /* node (re)start, nfiles */
        struct shoal_node *node; /* atomic; NULL after a failed restart in a child */
        unsigned gen;            /* atomic: fork generation NODE was started in */
        unsigned open_gen;       /* generation the client was opened in */
        unsigned nfiles;         /* open files of generation files_gen (a forked child does
                                    not count the parent's) */
        unsigned files_gen;
        struct lib_config cfg;
};

struct shoal_file {
        struct shoal_client *c;
        unsigned gen; /* fork generation it was opened in */
        struct shoal_object obj;
        int advice; /* atomic */
        pthread_mutex_t mu;
        struct shoal_stream stream; /* under mu: a hint shared by the file's readers */
};

struct shoal_list {
        struct shoal_entry *e;
        char **strs;
        size_t n, cap, next;
};

/* Nodes left behind in a forked child, kept reachable on purpose. */
struct abandoned {
        struct abandoned *next;
        struct shoal_node *node;
};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static unsigned fork_gen;                                      /* atomic; bumped in each child */
static pthread_mutex_t globals_mu = PTHREAD_MUTEX_INITIALIZER; /* abandoned, log_file */
static struct abandoned *abandoned;
static char *log_file;

/* ---- fork ---------------------------------------------------------------------------------- */

static void before_fork(void)
{
        shoal_fork_gate_close();
        pthread_mutex_lock(&globals_mu);
        shoal_metrics_fork_prepare();
}

static void after_fork_parent(void)
{
        shoal_metrics_fork_done(false);
        pthread_mutex_unlock(&globals_mu);
        shoal_fork_gate_open();
}

static void after_fork_child(void)
{
        shoal_metrics_fork_done(true);
        pthread_mutex_init(&globals_mu, NULL);
        __atomic_add_fetch(&fork_gen, 1, __ATOMIC_RELEASE);
        shoal_fork_gate_reset_child();
}

static void lib_init(void)
{
        shoal_fork_gate_install();
        pthread_atfork(before_fork, after_fork_parent, after_fork_child);
}

/* ---- nodes --------------------------------------------------------------------------------- */

static void setup_log(const struct lib_config *cfg)
{
        shoal_log_set_level(cfg->log_level);
        if (!cfg->log_file)
                return;
        pthread_mutex_lock(&globals_mu);
        if (!log_file || strcmp(log_file, cfg->log_file)) {
                /* Process-wide, like the level: the last client to name a file wins. */
                if (shoal_log_open(cfg->log_file) == 0) {
                        free(log_file);
                        log_file = strdup(cfg->log_file);
                }
        }
        pthread_mutex_unlock(&globals_mu);
}

static struct shoal_node *node_start(struct shoal_client *c, bool child, int *rc)
{
        struct shoal_node_config nc = c->cfg.node;
        if (child) {
                nc.metrics_addr = NULL; /* the parent keeps the endpoint's port */
                /* ... and its cache folder, which it holds locked (one process per folder):
                 * the child reads through the group and the store without a disk cache. */
                nc.cache_size = 0;
        }
        char prov[32];
        if (child && nc.rdma_network && shoal_fab_inherited_devices(prov, sizeof(prov))) {
                /* The parent's device contexts are the child's too (net/fabric.h). */
                log_warn("rdma",
                         "forked process %d: its parent opened RDMA provider %s, whose devices a "
                         "child must not use; it reads over IORPC on TCP (start workers with "
                         "spawn or forkserver to read over RDMA)",
                         (int)getpid(), prov);
                nc.rdma_network = NULL;
                nc.rdma_provider = NULL;
                nc.use_iorpc = true;
        }
        char err[1024];
        struct shoal_node *n;
        /* -EINVAL: a bad setting (ValueError in Python); anything else failed at run time */
        int ret = shoal_node_start(&nc, &n, err, sizeof(err));
        if (ret) {
                *rc = lib_fail(ret, "%s", err);
                return NULL;
        }
        size_t len;
        void *base = shoal_reader_buffers(n->reader, &len);
        if (base && len)
                madvise(base, len, MADV_DONTFORK);
        return n;
}

static void abandon(struct shoal_node *n)
{
        struct abandoned *a = malloc(sizeof(*a));
        if (!a)
                return; /* unreachable then, but never touched either */
        a->node = n;
        pthread_mutex_lock(&globals_mu);
        a->next = abandoned;
        abandoned = a;
        pthread_mutex_unlock(&globals_mu);
}

/* C's node for this process, started anew in a forked child. NULL with *RC and the message set
 * when that start failed (the next call tries again). */
static struct shoal_node *client_node(struct shoal_client *c, int *rc)
{
        unsigned g = __atomic_load_n(&fork_gen, __ATOMIC_ACQUIRE);
        if (__atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) == g) {
                struct shoal_node *n = __atomic_load_n(&c->node, __ATOMIC_ACQUIRE);
                if (n)
                        return n;
        }
        pthread_mutex_lock(&c->mu);
        if (c->gen != g && c->node) {
                abandon(c->node);
                __atomic_store_n(&c->node, NULL, __ATOMIC_RELEASE);
        }
        struct shoal_node *n = c->node;
        if (!n) {
                n = node_start(c, g != c->open_gen, rc);
                __atomic_store_n(&c->node, n, __ATOMIC_RELEASE);
        }
        __atomic_store_n(&c->gen, g, __ATOMIC_RELEASE);
        pthread_mutex_unlock(&c->mu);
        return n;
}

/* ---- client -------------------------------------------------------------------------------- */

SHOAL_API const char *shoal_version(void)
{
        return LIB_VERSION;
}

SHOAL_API struct shoal_client *shoal_client_open(const char *storage, const struct shoal_options *o)
{
        pthread_once(&init_once, lib_init);
        struct shoal_client *c = calloc(1, sizeof(*c));
        if (!c) {
                lib_fail(-ENOMEM, "out of memory");
                errno = ENOMEM;
                return NULL;
        }
        /* Inside the gate: a fork waits until the environment is read and the node started. */
        bool t = shoal_fork_gate_enter();
        int rc = lib_config_build(&c->cfg, storage, o);
        if (rc)
                goto out_free;
        setup_log(&c->cfg);
        pthread_mutex_init(&c->mu, NULL);
        c->gen = c->open_gen = c->files_gen = __atomic_load_n(&fork_gen, __ATOMIC_ACQUIRE);
        c->node = node_start(c, false, &rc);
        if (!c->node)
                goto out_config;
        shoal_fork_gate_exit(t);
        return c;

out_config:
        pthread_mutex_destroy(&c->mu);
        lib_config_free(&c->cfg);
out_free:
        shoal_fork_gate_exit(t);
        free(c);
        errno = -rc;
        return NULL;
}

SHOAL_API int shoal_client_close(struct shoal_client *c)
{
        if (!c)
                return 0;
        bool t = shoal_fork_gate_enter();
        unsigned g = __atomic_load_n(&fork_gen, __ATOMIC_ACQUIRE);
        pthread_mutex_lock(&c->mu);
        unsigned nfiles = c->files_gen == g ? c->nfiles : 0;
        pthread_mutex_unlock(&c->mu);
        if (nfiles) {
                shoal_fork_gate_exit(t);
                return lib_fail(-EBUSY, "the client still has %u open files: close them first",
                                nfiles);
        }
        if (c->gen == g)
                shoal_node_stop(c->node); /* an older generation's node is not ours to stop */
        else if (c->node)
                abandon(c->node);
        shoal_fork_gate_exit(t);
        pthread_mutex_destroy(&c->mu);
        lib_config_free(&c->cfg);
        free(c);
        return 0;
}

static bool key_ok(const char *key)
{
        return key && shoal_key_valid(key, strnlen(key, SHOAL_KEY_MAX + 1));
}

static int stat_fail(int rc, const char *key)
{
        switch (rc) {
        case -ENOENT:
                return lib_fail(rc, "no such object: %s", key);
        case -EINVAL:
                return lib_fail(rc, "not a valid key for this store: %s", key);
        case -EACCES:
                return lib_fail(rc, "%s: access denied by the object store", key);
        case -EIO:
                return lib_fail(rc, "%s: the object store failed (see the log)", key);
        default:
                return lib_fail(rc, "%s: %s", key, strerror(-rc));
        }
}

/* Stats KEY into OBJ through C's store. The caller is inside the fork gate. */
static int stat_object(struct shoal_client *c, const char *key, struct shoal_object *obj)
{
        if (!c)
                return lib_fail(-EINVAL, "no client");
        if (!key_ok(key))
                return lib_fail(-EINVAL, "invalid key: 1-%d bytes without control characters",
                                SHOAL_KEY_MAX);
        int rc;
        struct shoal_node *n = client_node(c, &rc);
        if (n) {
                rc = shoal_store_stat(n->store, key, obj);
                if (rc)
                        stat_fail(rc, key);
        }
        return rc;
}

static void fill_stat(const struct shoal_client *c, const struct shoal_object *obj,
                      struct shoal_stat *st)
{
        memset(st, 0, sizeof(*st));
        st->size = obj->size;
        st->mtime_ns = obj->mtime_ns;
        st->block_size = c->cfg.node.block_size;
        shoal_strlcpy(st->version, obj->version, sizeof(st->version));
}

SHOAL_API int shoal_stat(struct shoal_client *c, const char *key, struct shoal_stat *st)
{
        if (!st)
                return lib_fail(-EINVAL, "shoal_stat: no result buffer");
        struct shoal_object *obj = malloc(sizeof(*obj));
        if (!obj)
                return lib_fail(-ENOMEM, "out of memory");
        bool t = shoal_fork_gate_enter();
        int rc = stat_object(c, key, obj);
        shoal_fork_gate_exit(t);
        if (!rc)
                fill_stat(c, obj, st);
        free(obj);
        return rc;
}

/* ---- listing ------------------------------------------------------------------------------- */

static int list_add(void *arg, const struct shoal_list_entry *le)
{
        struct shoal_list *l = arg;
        if (l->n == l->cap) {
                size_t cap = l->cap ? 2 * l->cap : 64;
                struct shoal_entry *e = realloc(l->e, cap * sizeof(*e));
                if (!e)
                        return -ENOMEM;
                l->e = e;
                char **s = realloc(l->strs, 2 * cap * sizeof(*s));
                if (!s)
                        return -ENOMEM;
                l->strs = s;
                l->cap = cap;
        }
        char *key = strdup(le->key);
        char *ver = strdup(le->version ? le->version : "");
        if (!key || !ver) {
                free(key);
                free(ver);
                return -ENOMEM;
        }
        l->strs[2 * l->n] = key;
        l->strs[2 * l->n + 1] = ver;
        l->e[l->n] = (struct shoal_entry){
                .key = key,
                .flags = le->is_prefix ? SHOAL_ENTRY_PREFIX : 0,
                .size = le->is_prefix ? 0 : le->size,
                .mtime_ns = le->is_prefix ? 0 : le->mtime_ns,
                .version = ver,
        };
        l->n++;
        return 0;
}

SHOAL_API struct shoal_list *shoal_list_open(struct shoal_client *c, const char *prefix, int flags)
{
        int rc;
        if (!c || (flags & ~SHOAL_LIST_RECURSIVE)) {
                errno = EINVAL;
                lib_fail(-EINVAL, "shoal_list_open: no client or unknown flags %#x", flags);
                return NULL;
        }
        if (!prefix)
                prefix = "";
        if (strnlen(prefix, SHOAL_KEY_MAX + 1) > SHOAL_KEY_MAX) {
                errno = EINVAL;
                lib_fail(-EINVAL, "prefix longer than %d bytes", SHOAL_KEY_MAX);
                return NULL;
        }
        struct shoal_list *l = calloc(1, sizeof(*l));
        if (!l) {
                errno = ENOMEM;
                lib_fail(-ENOMEM, "out of memory");
                return NULL;
        }
        bool t = shoal_fork_gate_enter();
        struct shoal_node *n = client_node(c, &rc);
        if (n) {
                rc = shoal_store_list(n->store, prefix, flags & SHOAL_LIST_RECURSIVE ? NULL : "/",
                                      NULL, list_add, l);
                if (rc < 0)
                        lib_fail(rc, "listing \"%s\" failed: %s", prefix,
                                 rc == -EINVAL ? "not a valid prefix for this store"
                                 : rc == -EIO  ? "the object store failed (see the log)"
                                               : strerror(-rc));
        }
        shoal_fork_gate_exit(t);
        if (rc < 0) {
                shoal_list_close(l);
                errno = -rc;
                return NULL;
        }
        return l;
}

SHOAL_API const struct shoal_entry *shoal_list_next(struct shoal_list *l)
{
        if (!l || l->next >= l->n)
                return NULL;
        return &l->e[l->next++];
}

SHOAL_API void shoal_list_close(struct shoal_list *l)
{
        if (!l)
                return;
        for (size_t i = 0; i < 2 * l->n; i++)
                free(l->strs[i]);
        free(l->strs);
        free(l->e);
        free(l);
}

/* ---- files --------------------------------------------------------------------------------- */

SHOAL_API struct shoal_file *shoal_open(struct shoal_client *c, const char *key, int flags)
{
        if (flags != SHOAL_RDONLY) {
                errno = EINVAL;
                lib_fail(-EINVAL,
                         "unsupported open flags %#x: objects are read-only (SHOAL_RDONLY)", flags);
                return NULL;
        }
        struct shoal_file *f = calloc(1, sizeof(*f));
        if (!f) {
                errno = ENOMEM;
                lib_fail(-ENOMEM, "out of memory");
                return NULL;
        }
        /* The count too is updated inside the gate: a fork never copies c->mu held. */
        bool t = shoal_fork_gate_enter();
        int rc = stat_object(c, key, &f->obj);
        if (!rc) {
                f->c = c;
                f->gen = __atomic_load_n(&fork_gen, __ATOMIC_ACQUIRE);
                pthread_mutex_init(&f->mu, NULL);
                pthread_mutex_lock(&c->mu);
                if (c->files_gen != f->gen) {
                        c->files_gen = f->gen;
                        c->nfiles = 0;
                }
                c->nfiles++;
                pthread_mutex_unlock(&c->mu);
        }
        shoal_fork_gate_exit(t);
        if (rc) {
                free(f);
                errno = -rc;
                return NULL;
        }
        return f;
}

/* ---- hooks for write.c (lib/lib.h) ---- */

struct shoal_node *lib_client_node(struct shoal_client *c, int *rc)
{
        return client_node(c, rc);
}

unsigned lib_fork_gen(void)
{
        return __atomic_load_n(&fork_gen, __ATOMIC_ACQUIRE);
}

unsigned lib_file_opened(struct shoal_client *c)
{
        unsigned g = lib_fork_gen();
        pthread_mutex_lock(&c->mu);
        if (c->files_gen != g) {
                c->files_gen = g;
                c->nfiles = 0;
        }
        c->nfiles++;
        pthread_mutex_unlock(&c->mu);
        return g;
}

void lib_file_closed(struct shoal_client *c, unsigned gen)
{
        pthread_mutex_lock(&c->mu);
        if (c->files_gen == gen)
                c->nfiles--;
        pthread_mutex_unlock(&c->mu);
}

SHOAL_API int shoal_fstat(struct shoal_file *f, struct shoal_stat *st)
{
        if (!f || !st)
                return lib_fail(-EINVAL, "shoal_fstat: no file or no result buffer");
        fill_stat(f->c, &f->obj, st);
        return 0;
}

SHOAL_API int shoal_close(struct shoal_file *f)
{
        if (!f)
                return 0;
        bool t = shoal_fork_gate_enter();
        pthread_mutex_lock(&f->c->mu);
        if (f->c->files_gen == f->gen)
                f->c->nfiles--;
        pthread_mutex_unlock(&f->c->mu);
        shoal_fork_gate_exit(t);
        pthread_mutex_destroy(&f->mu);
        free(f);
        return 0;
}

static int read_fail(const struct shoal_file *f, int rc)
{
        switch (rc) {
        case -ESTALE:
                return lib_fail(rc, "%s changed since it was opened: open it again", f->obj.key);
        case -ENOENT:
                return lib_fail(rc, "%s no longer exists", f->obj.key);
        case -EIO:
                return lib_fail(rc, "reading %s failed: the object store failed (see the log)",
                                f->obj.key);
        case -EBUSY:
                return lib_fail(rc,
                                "reading %s: no read buffer came free in time (raise "
                                "buffer-size, or unpin pieces sooner)",
                                f->obj.key);
        default:
                return lib_fail(rc, "reading %s failed: %s", f->obj.key, strerror(-rc));
        }
}

/* The file's stream hint for a read at OFF into *S (false: no readahead for this file). */
static bool stream_load(struct shoal_file *f, uint64_t off, struct shoal_stream *s)
{
        int advice = __atomic_load_n(&f->advice, __ATOMIC_RELAXED);
        if (advice == SHOAL_ADVICE_RANDOM)
                return false;
        pthread_mutex_lock(&f->mu);
        *s = f->stream;
        pthread_mutex_unlock(&f->mu);
        if (advice == SHOAL_ADVICE_SEQUENTIAL && s->next_off != off) {
                /* Look like the second read of a stream, so that readahead starts now. */
                s->next_off = off;
                s->seq_reads = 1;
                s->ra_next = 0;
        }
        return true;
}

static void stream_store(struct shoal_file *f, const struct shoal_stream *s)
{
        pthread_mutex_lock(&f->mu);
        f->stream = *s;
        pthread_mutex_unlock(&f->mu);
}

/* Hints blocks FIRST..LAST of F (at most MAX_HINTED, fewer with few buffers) to readahead. */
static void hint_blocks(struct shoal_node *n, struct shoal_file *f, uint64_t first, uint64_t last)
{
        uint64_t nbuf = n->cfg.buffer_size / n->vol.block_size;
        uint64_t max = SHOAL_MIN((uint64_t)MAX_HINTED, nbuf / 4);
        for (uint64_t b = first; b <= last && b - first < max; b++)
                if (shoal_reader_prefetch(n->reader, &f->obj, (uint32_t)b))
                        break;
}

SHOAL_API ssize_t shoal_pread(struct shoal_file *f, void *buf, size_t len, uint64_t off)
{
        if (!f || (!buf && len))
                return lib_fail(-EINVAL, "shoal_pread: no file or no buffer");
        if (off >= f->obj.size || !len)
                return 0;
        len = (size_t)SHOAL_MIN((uint64_t)len, f->obj.size - off);
        len = SHOAL_MIN(len, (size_t)SSIZE_MAX);
        int rc;
        bool t = shoal_fork_gate_enter();
        struct shoal_node *n = client_node(f->c, &rc);
        if (!n) {
                shoal_fork_gate_exit(t);
                return rc;
        }
        struct shoal_stream s;
        bool streamed = stream_load(f, off, &s);
        uint32_t bs = n->vol.block_size;
        /* Every block of a large read is wanted: let the readahead workers fetch the later ones
         * while this thread reads the first. */
        if (off / bs != (off + len - 1) / bs)
                hint_blocks(n, f, off / bs + 1, (off + len - 1) / bs);
        size_t done = 0;
        long got = 0;
        while (done < len) {
                /* One block per call, so that the stream (and its readahead) moves along. */
                uint64_t pos = off + done;
                size_t want = (size_t)SHOAL_MIN((uint64_t)(len - done), bs - pos % bs);
                got = shoal_reader_read(n->reader, &f->obj, pos, want, (char *)buf + done,
                                        streamed ? &s : NULL);
                if (got <= 0)
                        break;
                done += (size_t)got;
        }
        if (streamed)
                stream_store(f, &s);
        shoal_fork_gate_exit(t);
        if (got < 0 && !done)
                return read_fail(f, (int)got);
        return (ssize_t)done;
}

SHOAL_API ssize_t shoal_pread_pinned(struct shoal_file *f, uint64_t off, size_t len,
                                     struct shoal_piece *pieces, unsigned max, unsigned *npieces)
{
        if (npieces)
                *npieces = 0;
        if (!f || !pieces || !max || !npieces)
                return lib_fail(-EINVAL, "shoal_pread_pinned: no file, pieces or count");
        if (off >= f->obj.size || !len)
                return 0;
        max = SHOAL_MIN(max, (unsigned)MAX_PINS);
        int rc;
        bool t = shoal_fork_gate_enter();
        struct shoal_node *n = client_node(f->c, &rc);
        if (!n) {
                shoal_fork_gate_exit(t);
                return rc;
        }
        unsigned gen = __atomic_load_n(&f->c->gen, __ATOMIC_ACQUIRE);
        struct shoal_stream s;
        bool streamed = stream_load(f, off, &s);
        struct shoal_read_pin pins[MAX_PINS];
        unsigned np = 0;
        long got = shoal_reader_read_pinned(n->reader, &f->obj, off, len, pins, max, &np,
                                            streamed ? &s : NULL);
        if (streamed)
                stream_store(f, &s);
        shoal_fork_gate_exit(t);
        if (got < 0)
                return read_fail(f, (int)got);
        for (unsigned i = 0; i < np; i++)
                pieces[i] = (struct shoal_piece){.data = pins[i].data,
                                                 .len = pins[i].len,
                                                 .ref = {pins[i].ref, (void *)(uintptr_t)gen}};
        *npieces = np;
        return got;
}

SHOAL_API void shoal_unpin(struct shoal_file *f, struct shoal_piece *pieces, unsigned n)
{
        if (!f || !pieces || !n)
                return;
        bool t = shoal_fork_gate_enter();
        unsigned g = __atomic_load_n(&fork_gen, __ATOMIC_ACQUIRE);
        struct shoal_client *c = f->c;
        struct shoal_node *node = __atomic_load_n(&c->node, __ATOMIC_ACQUIRE);
        struct shoal_read_pin pins[MAX_PINS];
        unsigned np = 0;
        for (unsigned i = 0; i < n; i++) {
                /* Pieces pinned before a fork belong to the parent's buffers. */
                if ((uintptr_t)pieces[i].ref[1] != g || !node ||
                    __atomic_load_n(&c->gen, __ATOMIC_ACQUIRE) != g)
                        continue;
                pins[np++] = (struct shoal_read_pin){.data = pieces[i].data,
                                                     .len = (uint32_t)pieces[i].len,
                                                     .ref = pieces[i].ref[0]};
                if (np == MAX_PINS) {
                        shoal_reader_unpin(node->reader, pins, np);
                        np = 0;
                }
        }
        shoal_reader_unpin(node ? node->reader : NULL, pins, np);
        shoal_fork_gate_exit(t);
}

SHOAL_API int shoal_advise(struct shoal_file *f, uint64_t off, uint64_t len, int advice)
{
        if (!f)
                return lib_fail(-EINVAL, "shoal_advise: no file");
        switch (advice) {
        case SHOAL_ADVICE_NORMAL:
        case SHOAL_ADVICE_SEQUENTIAL:
        case SHOAL_ADVICE_RANDOM:
                __atomic_store_n(&f->advice, advice, __ATOMIC_RELAXED);
                return 0;
        case SHOAL_ADVICE_WILLNEED:
                break;
        default:
                return lib_fail(-EINVAL, "shoal_advise: unknown advice %d", advice);
        }
        if (off >= f->obj.size)
                return 0;
        if (!len || len > f->obj.size - off)
                len = f->obj.size - off;
        int rc;
        bool t = shoal_fork_gate_enter();
        struct shoal_node *n = client_node(f->c, &rc);
        if (n)
                hint_blocks(n, f, off / n->vol.block_size, (off + len - 1) / n->vol.block_size);
        shoal_fork_gate_exit(t);
        return n ? 0 : rc;
}

/* ---- figures ------------------------------------------------------------------------------- */

SHOAL_API int shoal_counter(const char *name, uint64_t *value)
{
        if (!name || !value)
                return lib_fail(-EINVAL, "shoal_counter: no name or no result");
        for (unsigned i = 0; i < SHOAL_M__COUNT; i++) {
                if (strcmp(shoal_metric_defs[i].name, name) ||
                    shoal_metric_defs[i].kind != SHOAL_METRIC_COUNTER)
                        continue;
                struct shoal_metrics_snap s;
                if (shoal_metrics_snap_take(&s))
                        return lib_fail(-ENOMEM, "out of memory");
                *value = s.counters[i];
                shoal_metrics_snap_free(&s);
                return 0;
        }
        return lib_fail(-ENOENT, "no counter named %s", name);
}
