/* shoal_readers — the battery's application: N threads reading blocks through the real read path
 * of one client node (buffer -> owner in the group -> object store), as a FUSE mount or `shoal
 * cat` would, each read checked byte for byte against the store's own files.
 *
 *   shoal_readers STORAGE --meta URL --cache-group G --verify-dir DIR [options]
 *     --block-size BYTES   the group's block size (default 4 MiB)
 *     --threads N          concurrent readers (default 16)
 *     --prefix P           read only the objects whose keys start with P (default: all)
 *     --exclude P          leave out the objects whose keys start with P
 *     --endpoint URL       S3 endpoint for s3:// storage
 *     --all                read every block of every object once (a verification pass), then stop
 *     --reads N            stop after N reads in all (random blocks)
 *     --seconds S          stop after S seconds (default 600, a bound for every mode)
 *     --until FILE         stop once FILE exists
 *     --use-iorpc          IORPC instead of the TCP pool
 *     --buffer-blocks N    block buffers in memory (default 2 per thread: mostly misses)
 *     --log-file F --log-level L
 *
 * A read is one whole block at a random (or, with --all, every) index of a random object under
 * the storage. An application-visible error is a read that returned an error or a short count;
 * a wrong read returned other bytes than the file under --verify-dir holds. Once a second it
 * prints "progress reads=N errors=E wrong=W fallbacks=F"; at the end one line
 *   result reads=N bytes=B errors=E wrong=W p50_ms=.. p99_ms=.. max_ms=.. remote=R
 *          remote_errors=RE fallbacks=F store_gets=G corrupt=C buffer_hits=H
 * (the last ones from this process's metrics) and exits 0 only when E and W are 0. SIGTERM or
 * SIGINT stops the reads the same way: the result line, then the exit status. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/node.h"
#include "client/reader.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "server/server.h"
#include "store/store.h"

#define MAX_LAT_PER_THREAD 400000

struct run {
        struct shoal_node *node;
        struct shoal_object *objs;
        size_t nobjs;
        uint32_t *first_block; /* per object: index of its first block in the flat numbering */
        uint64_t nblocks;
        const char *verify_dir;
        bool all;
        uint64_t max_reads;
        uint64_t deadline_ns;
        const char *until;
        uint64_t next;  /* atomic: next flat block (--all) or reads started */
        uint64_t reads; /* atomics */
        uint64_t bytes;
        uint64_t errors;
        uint64_t wrong;
        int stop; /* atomic */
};

struct thr {
        struct run *r;
        pthread_t th;
        uint64_t rng;
        uint64_t *lat;
        size_t nlat;
        char *buf, *want;
};

static uint64_t xorshift(uint64_t *s)
{
        uint64_t x = *s;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        return *s = x;
}

/* Object and block of flat block number B. */
static void locate(const struct run *r, uint64_t b, size_t *o, uint32_t *index)
{
        size_t lo = 0, hi = r->nobjs;
        while (hi - lo > 1) {
                size_t mid = (lo + hi) / 2;
                if (r->first_block[mid] <= b)
                        lo = mid;
                else
                        hi = mid;
        }
        *o = lo;
        *index = (uint32_t)(b - r->first_block[lo]);
}

static void report(const char *key, uint32_t index, const char *what)
{
        static unsigned shown; /* atomic */
        if (__atomic_fetch_add(&shown, 1, __ATOMIC_RELAXED) < 20)
                fprintf(stderr, "shoal_readers: read %s block %u: %s\n", key, index, what);
}

static bool expected(const struct run *r, const struct shoal_object *o, uint64_t off, size_t len,
                     char *want)
{
        char path[8192];
        snprintf(path, sizeof(path), "%s/%s", r->verify_dir, o->key);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return false;
        size_t done = 0;
        while (done < len) {
                ssize_t n = pread(fd, want + done, len - done, (off_t)(off + done));
                if (n <= 0)
                        break;
                done += (size_t)n;
        }
        close(fd);
        return done == len;
}

static void one_read(struct thr *t, uint64_t b)
{
        struct run *r = t->r;
        size_t oi;
        uint32_t index;
        locate(r, b, &oi, &index);
        const struct shoal_object *o = &r->objs[oi];
        uint32_t bs = r->node->vol.block_size;
        uint64_t off = (uint64_t)index * bs;
        size_t len = shoal_block_len(o->size, bs, index);

        uint64_t t0 = shoal_now_ns();
        long n = shoal_reader_read(r->node->reader, o, off, len, t->buf, NULL);
        uint64_t dt = shoal_now_ns() - t0;
        if (t->nlat < MAX_LAT_PER_THREAD)
                t->lat[t->nlat++] = dt;
        __atomic_add_fetch(&r->reads, 1, __ATOMIC_RELAXED);
        if (n != (long)len) {
                __atomic_add_fetch(&r->errors, 1, __ATOMIC_RELAXED);
                report(o->key, index, n < 0 ? strerror((int)-n) : "short read");
                return;
        }
        __atomic_add_fetch(&r->bytes, len, __ATOMIC_RELAXED);
        if (!expected(r, o, off, len, t->want) || memcmp(t->want, t->buf, len)) {
                __atomic_add_fetch(&r->wrong, 1, __ATOMIC_RELAXED);
                report(o->key, index, "wrong bytes");
        }
}

static bool should_stop(struct run *r)
{
        if (__atomic_load_n(&r->stop, __ATOMIC_RELAXED))
                return true;
        if (shoal_now_ns() >= r->deadline_ns || (r->until && access(r->until, F_OK) == 0)) {
                __atomic_store_n(&r->stop, 1, __ATOMIC_RELAXED);
                return true;
        }
        return false;
}

static void *thread_main(void *arg)
{
        struct thr *t = arg;
        struct run *r = t->r;
        while (!should_stop(r)) {
                uint64_t k = __atomic_fetch_add(&r->next, 1, __ATOMIC_RELAXED);
                if (r->all) {
                        if (k >= r->nblocks)
                                break;
                        one_read(t, k);
                } else {
                        if (r->max_reads && k >= r->max_reads)
                                break;
                        one_read(t, xorshift(&t->rng) % r->nblocks);
                }
        }
        return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static int usage(const char *msg)
{
        fprintf(stderr, "shoal_readers: %s (see the comment at the top of tests/tools/readers.c)\n",
                msg);
        return 2;
}

int main(int argc, char **argv)
{
        struct shoal_node_config cfg = {
                .block_size = SHOAL_BLOCK_SIZE_DEFAULT,
                .cache_size = 0,
                .no_sharing = true,
                .group_weight = 100,
                .iorpc_mode = SHOAL_IORPC_DIO,
                .max_downloads = 200,
                .prefetch = 0,
        };
        struct run r = {.max_reads = 0};
        unsigned threads = 16, buffer_blocks = 0;
        uint64_t seconds = 600;
        const char *log_file = NULL, *log_level = "warn", *prefix = "", *exclude = NULL;
        char cache_dir[] = "/tmp/shoal-readers.XXXXXX";

        if (argc < 2 || argv[1][0] == '-')
                return usage("expected STORAGE first");
        cfg.storage = argv[1];
        /* SHOAL_GROUP_SECRET, as the command line takes it (members beyond loopback need it). */
        const struct shoal_env *env = shoal_config_env();
        if (env->group_secret)
                cfg.group_secret = (struct shoal_secret){
                        .bytes = (const uint8_t *)env->group_secret, .len = env->group_secret_len};
        /* The host-local secret as the command line finds it (node/local_secret.h): members
         * started without a group secret refuse a client without it. */
        char lsec[1100];
        const char *ls_env = getenv("SHOAL_LOCAL_SECRET_FILE");
        if (ls_env && *ls_env) {
                cfg.local_secret_file = strcmp(ls_env, "off") ? ls_env : NULL;
        } else {
                const char *home = getenv("HOME");
                if (geteuid() == 0)
                        snprintf(lsec, sizeof(lsec), "/var/lib/shoal/local.secret");
                else
                        snprintf(lsec, sizeof(lsec), "%s/.shoal/local.secret",
                                 home && *home ? home : "/tmp");
                cfg.local_secret_file = lsec;
        }
        for (int i = 2; i < argc; i++) {
                const char *a = argv[i];
                const char *v = i + 1 < argc ? argv[i + 1] : NULL;
                bool has = true;
                if (!strcmp(a, "--all")) {
                        r.all = true;
                        has = false;
                } else if (!strcmp(a, "--use-iorpc")) {
                        cfg.use_iorpc = true;
                        has = false;
                } else if (!v) {
                        return usage("a flag lacks its value");
                } else if (!strcmp(a, "--meta")) {
                        cfg.meta_url = v;
                } else if (!strcmp(a, "--cache-group")) {
                        cfg.cache_group = v;
                } else if (!strcmp(a, "--prefix")) {
                        prefix = v;
                } else if (!strcmp(a, "--exclude")) {
                        exclude = v;
                } else if (!strcmp(a, "--endpoint")) {
                        cfg.endpoint = v;
                } else if (!strcmp(a, "--verify-dir")) {
                        r.verify_dir = v;
                } else if (!strcmp(a, "--block-size")) {
                        int64_t bs;
                        if (shoal_parse_size(v, 1, false, &bs) || bs < 65536 || bs > (1 << 26))
                                return usage("bad --block-size");
                        cfg.block_size = (uint32_t)bs;
                } else if (!strcmp(a, "--threads")) {
                        threads = (unsigned)strtoul(v, NULL, 10);
                } else if (!strcmp(a, "--reads")) {
                        r.max_reads = strtoull(v, NULL, 10);
                } else if (!strcmp(a, "--seconds")) {
                        seconds = strtoull(v, NULL, 10);
                } else if (!strcmp(a, "--until")) {
                        r.until = v;
                } else if (!strcmp(a, "--buffer-blocks")) {
                        buffer_blocks = (unsigned)strtoul(v, NULL, 10);
                } else if (!strcmp(a, "--log-file")) {
                        log_file = v;
                } else if (!strcmp(a, "--log-level")) {
                        log_level = v;
                } else {
                        return usage("unknown flag");
                }
                i += has;
        }
        if (!cfg.meta_url || !cfg.cache_group || !r.verify_dir || threads < 1 || threads > 256)
                return usage("need --meta, --cache-group, --verify-dir and 1-256 --threads");
        if (shoal_log_open(log_file) || shoal_log_parse_level(log_level) < 0)
                return usage("bad --log-file or --log-level");
        shoal_log_set_level(shoal_log_parse_level(log_level));
        /* Every thread inherits the mask; the main loop takes SIGTERM/SIGINT as a stop. (Some
         * libraries pulled in by libfabric install handlers that would exit mid-read.) */
        sigset_t sigs;
        sigemptyset(&sigs);
        sigaddset(&sigs, SIGTERM);
        sigaddset(&sigs, SIGINT);
        pthread_sigmask(SIG_BLOCK, &sigs, NULL);
        if (!mkdtemp(cache_dir))
                return usage("cannot make a temporary folder");
        cfg.cache_dir = cache_dir;
        cfg.buffer_size = (uint64_t)(buffer_blocks ? buffer_blocks : 2 * threads) * cfg.block_size;

        char err[1024];
        int ret = 1;
        struct shoal_node *node;
        int code = shoal_node_start(&cfg, &node, err, sizeof(err));
        if (code) {
                fprintf(stderr, "shoal_readers: %s\n", err);
                rmdir(cache_dir);
                return code == -EINVAL ? 2 : 1;
        }
        r.node = node;
        int rc = shoal_store_list_objects(node->store, prefix, 1000000, &r.objs, &r.nobjs);
        size_t kept = 0;
        for (size_t i = 0; !rc && i < r.nobjs; i++)
                if (!exclude || strncmp(r.objs[i].key, exclude, strlen(exclude)))
                        r.objs[kept++] = r.objs[i];
        r.nobjs = kept;
        if (rc || !r.nobjs) {
                fprintf(stderr, "shoal_readers: no objects to read (%s)\n", strerror(-rc));
                goto out;
        }
        r.first_block = calloc(r.nobjs, sizeof(*r.first_block));
        struct thr *ts = calloc(threads, sizeof(*ts));
        if (!r.first_block || !ts) {
                fprintf(stderr, "shoal_readers: out of memory\n");
                free(ts);
                goto out;
        }
        for (size_t i = 0; i < r.nobjs; i++) {
                r.first_block[i] = (uint32_t)r.nblocks;
                r.nblocks += shoal_block_count(r.objs[i].size, cfg.block_size);
        }
        r.deadline_ns = shoal_now_ns() + seconds * 1000000000ULL;

        unsigned started = 0;
        for (; started < threads; started++) {
                struct thr *t = &ts[started];
                t->r = &r;
                t->rng = 0x9e3779b97f4a7c15ULL * (started + 1) ^ shoal_rand64();
                t->lat = malloc(MAX_LAT_PER_THREAD * sizeof(*t->lat));
                t->buf = malloc(cfg.block_size);
                t->want = malloc(cfg.block_size);
                if (!t->lat || !t->buf || !t->want ||
                    pthread_create(&t->th, NULL, thread_main, t)) {
                        fprintf(stderr, "shoal_readers: cannot start thread %u\n", started);
                        __atomic_store_n(&r.stop, 1, __ATOMIC_RELAXED);
                        free(t->lat);
                        free(t->buf);
                        free(t->want);
                        break;
                }
        }
        /* Progress once a second until every thread is done. */
        uint64_t last = shoal_now_ns();
        for (;;) {
                bool done = r.all ? __atomic_load_n(&r.next, __ATOMIC_RELAXED) >= r.nblocks
                                  : (r.max_reads &&
                                     __atomic_load_n(&r.next, __ATOMIC_RELAXED) >= r.max_reads);
                if (done || should_stop(&r) || started < threads)
                        break;
                struct timespec tick = {0, 20 * 1000000L};
                if (sigtimedwait(&sigs, NULL, &tick) > 0)
                        __atomic_store_n(&r.stop, 1, __ATOMIC_RELAXED);
                if (shoal_now_ns() - last >= 1000000000ULL) {
                        last = shoal_now_ns();
                        struct shoal_metrics_snap ps;
                        uint64_t fb = 0;
                        if (!shoal_metrics_snap_take(&ps)) {
                                fb = ps.counters[SHOAL_M_remotecache_fallbacks];
                                shoal_metrics_snap_free(&ps);
                        }
                        printf("progress reads=%llu errors=%llu wrong=%llu fallbacks=%llu\n",
                               (unsigned long long)__atomic_load_n(&r.reads, __ATOMIC_RELAXED),
                               (unsigned long long)__atomic_load_n(&r.errors, __ATOMIC_RELAXED),
                               (unsigned long long)__atomic_load_n(&r.wrong, __ATOMIC_RELAXED),
                               (unsigned long long)fb);
                        fflush(stdout);
                }
        }
        size_t nlat = 0;
        for (unsigned i = 0; i < started; i++) {
                pthread_join(ts[i].th, NULL);
                nlat += ts[i].nlat;
        }
        uint64_t *lat = malloc((nlat + 1) * sizeof(*lat));
        size_t k = 0;
        for (unsigned i = 0; i < started; i++) {
                if (lat)
                        memcpy(lat + k, ts[i].lat, ts[i].nlat * sizeof(*lat));
                k += ts[i].nlat;
                free(ts[i].lat);
                free(ts[i].buf);
                free(ts[i].want);
        }
        free(ts);
        double p50 = 0, p99 = 0, mx = 0;
        if (lat && nlat) {
                qsort(lat, nlat, sizeof(*lat), cmp_u64);
                p50 = (double)lat[nlat / 2] / 1e6;
                p99 = (double)lat[nlat * 99 / 100] / 1e6;
                mx = (double)lat[nlat - 1] / 1e6;
        }
        free(lat);
        struct shoal_metrics_snap s;
        if (shoal_metrics_snap_take(&s)) {
                fprintf(stderr, "shoal_readers: no metrics\n");
                goto out;
        }
        const uint64_t *c = s.counters;
        printf("result reads=%llu bytes=%llu errors=%llu wrong=%llu p50_ms=%.1f p99_ms=%.1f "
               "max_ms=%.1f remote=%llu remote_errors=%llu fallbacks=%llu store_gets=%llu "
               "corrupt=%llu buffer_hits=%llu\n",
               (unsigned long long)r.reads, (unsigned long long)r.bytes,
               (unsigned long long)r.errors, (unsigned long long)r.wrong, p50, p99, mx,
               (unsigned long long)c[SHOAL_M_remotecache_get_requests],
               (unsigned long long)c[SHOAL_M_remotecache_get_errors],
               (unsigned long long)c[SHOAL_M_remotecache_fallbacks],
               (unsigned long long)c[SHOAL_M_object_get_requests],
               (unsigned long long)c[SHOAL_M_blockcache_checksum_errors],
               (unsigned long long)c[SHOAL_M_buffer_hits]);
        fflush(stdout);
        shoal_metrics_snap_free(&s);
        ret = r.errors || r.wrong || started < threads || (r.all && r.reads != r.nblocks) ? 1 : 0;
out:
        free(r.first_block);
        free(r.objs);
        shoal_node_stop(node);
        rmdir(cache_dir);
        return ret;
}
