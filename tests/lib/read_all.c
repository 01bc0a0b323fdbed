/* Reads every object of a store through libshoal from several threads and compares each byte
 * with a reference copy of the tree. Built against the *installed* library (pkg-config shoal) by
 * tests/integration/test_lib.sh.
 *
 * usage: read_all STORAGE REFDIR [-t THREADS] [-n EXPECTED_OBJECTS] [-o NAME=VALUE]...
 *
 * Each object is read four ways: whole in one call, in block-sized steps, in odd-sized steps
 * from an odd offset, and through pinned pieces; stat, fstat and the listing must agree with the
 * reference file's size. Prints "objects N", "bytes N", "blocks N" and the process's counters
 * (object_get_requests, remotecache_get_requests) for the script; exits 1 on any difference. */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <shoal/shoal.h>

struct obj {
        char *key;
        uint64_t size;
};

static struct shoal_client *client;
static const char *refdir;
static struct obj *objs;
static size_t nobjs;
static atomic_size_t next_obj;
static atomic_int failures;
static atomic_ullong bytes_read;

static void failf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void failf(const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        fputs("read_all: ", stderr);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
        atomic_fetch_add(&failures, 1);
}

static char *load_ref(const char *key, uint64_t *size)
{
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", refdir, key);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        struct stat st;
        if (fd < 0 || fstat(fd, &st)) {
                failf("%s: reference %s: %s", key, path, strerror(errno));
                if (fd >= 0)
                        close(fd);
                return NULL;
        }
        char *buf = malloc((size_t)st.st_size + 1);
        size_t done = 0;
        while (buf && done < (size_t)st.st_size) {
                ssize_t n = pread(fd, buf + done, (size_t)st.st_size - done, (off_t)done);
                if (n <= 0)
                        break;
                done += (size_t)n;
        }
        close(fd);
        if (!buf || done != (size_t)st.st_size) {
                failf("%s: cannot read reference", key);
                free(buf);
                return NULL;
        }
        *size = (uint64_t)st.st_size;
        return buf;
}

/* Reads F in steps of STEP from START and compares with REF. */
static void read_steps(struct shoal_file *f, const char *key, const char *ref, uint64_t size,
                       uint64_t start, size_t step, char *buf)
{
        uint64_t off = start;
        while (off < size) {
                ssize_t n = shoal_pread(f, buf, step, off);
                size_t want = (size_t)(size - off < step ? size - off : step);
                if (n < 0) {
                        failf("%s: pread %zu at %llu: %s", key, step, (unsigned long long)off,
                              shoal_errmsg());
                        return;
                }
                if ((size_t)n != want || memcmp(buf, ref + off, want)) {
                        failf("%s: %zu bytes at %llu differ (got %zd)", key, want,
                              (unsigned long long)off, n);
                        return;
                }
                atomic_fetch_add(&bytes_read, (unsigned long long)n);
                off += (uint64_t)n;
        }
        if (shoal_pread(f, buf, step, size) != 0)
                failf("%s: a read at the end did not return 0", key);
}

static void read_pinned(struct shoal_file *f, const char *key, const char *ref, uint64_t size)
{
        uint64_t off = 0;
        struct shoal_piece pieces[8];
        while (off < size) {
                unsigned n = 0;
                ssize_t got = shoal_pread_pinned(f, off, (size_t)(size - off), pieces, 8, &n);
                if (got <= 0) {
                        failf("%s: pinned read at %llu: %zd %s", key, (unsigned long long)off, got,
                              got < 0 ? shoal_errmsg() : "(nothing)");
                        return;
                }
                uint64_t pos = off;
                for (unsigned i = 0; i < n; i++) {
                        if (pos + pieces[i].len > size ||
                            memcmp(pieces[i].data, ref + pos, pieces[i].len))
                                failf("%s: pinned piece at %llu differs", key,
                                      (unsigned long long)pos);
                        pos += pieces[i].len;
                }
                shoal_unpin(f, pieces, n);
                if (pos != off + (uint64_t)got)
                        failf("%s: pinned pieces hold %llu bytes, the call said %zd", key,
                              (unsigned long long)(pos - off), got);
                off += (uint64_t)got;
        }
}

static void check_object(const struct obj *o, char *buf, size_t bufsize)
{
        uint64_t size;
        char *ref = load_ref(o->key, &size);
        if (!ref)
                return;
        if (size != o->size)
                failf("%s: listed with %llu bytes, reference has %llu", o->key,
                      (unsigned long long)o->size, (unsigned long long)size);
        struct shoal_stat st;
        if (shoal_stat(client, o->key, &st) || st.size != size || !st.version[0])
                failf("%s: stat: %s (size %llu)", o->key, shoal_errmsg(),
                      (unsigned long long)st.size);
        struct shoal_file *f = shoal_open(client, o->key, SHOAL_RDONLY);
        if (!f) {
                failf("%s: open: %s", o->key, shoal_errmsg());
                free(ref);
                return;
        }
        struct shoal_stat fst;
        if (shoal_fstat(f, &fst) || fst.size != size || strcmp(fst.version, st.version))
                failf("%s: fstat disagrees with stat", o->key);
        read_steps(f, o->key, ref, size, 0, bufsize, buf);
        read_steps(f, o->key, ref, size, 0, st.block_size, buf);
        read_steps(f, o->key, ref, size, size > 7 ? 7 : 0, 1024 * 1024 + 17, buf);
        read_pinned(f, o->key, ref, size);
        if (shoal_close(f))
                failf("%s: close: %s", o->key, shoal_errmsg());
        free(ref);
}

static void *worker(void *arg)
{
        size_t bufsize = *(size_t *)arg;
        char *buf = malloc(bufsize);
        if (!buf) {
                failf("out of memory");
                return NULL;
        }
        for (;;) {
                size_t i = atomic_fetch_add(&next_obj, 1);
                if (i >= nobjs)
                        break;
                check_object(&objs[i], buf, bufsize);
        }
        free(buf);
        return NULL;
}

static void print_counter(const char *name)
{
        uint64_t v;
        if (shoal_counter(name, &v)) {
                failf("counter %s: %s", name, shoal_errmsg());
                return;
        }
        printf("%s %llu\n", name, (unsigned long long)v);
}

int main(int argc, char **argv)
{
        int threads = 8;
        long expect = -1;
        struct shoal_options *o = shoal_options_new();
        int c;
        while ((c = getopt(argc, argv, "t:n:o:")) != -1) {
                switch (c) {
                case 't':
                        threads = atoi(optarg);
                        break;
                case 'n':
                        expect = atol(optarg);
                        break;
                case 'o': {
                        char *eq = strchr(optarg, '=');
                        if (!eq) {
                                fprintf(stderr, "read_all: -o NAME=VALUE\n");
                                shoal_options_free(o);
                                return 2;
                        }
                        *eq = '\0';
                        if (shoal_options_set(o, optarg, eq + 1)) {
                                fprintf(stderr, "read_all: %s\n", shoal_errmsg());
                                shoal_options_free(o);
                                return 2;
                        }
                        break;
                }
                default:
                        return 2;
                }
        }
        if (argc - optind != 2 || threads < 1 || threads > 64) {
                fprintf(stderr, "usage: read_all STORAGE REFDIR [-t N] [-n N] [-o K=V]...\n");
                return 2;
        }
        refdir = argv[optind + 1];
        client = shoal_client_open(argv[optind], o);
        shoal_options_free(o);
        if (!client) {
                fprintf(stderr, "read_all: open: %s\n", shoal_errmsg());
                return 1;
        }

        struct shoal_list *l = shoal_list_open(client, "", SHOAL_LIST_RECURSIVE);
        if (!l) {
                fprintf(stderr, "read_all: list: %s\n", shoal_errmsg());
                return 1;
        }
        const struct shoal_entry *e;
        size_t cap = 0;
        uint64_t total = 0, blocks = 0;
        uint32_t bs = 0;
        while ((e = shoal_list_next(l))) {
                if (e->flags & SHOAL_ENTRY_PREFIX)
                        continue;
                if (nobjs == cap) {
                        cap = cap ? 2 * cap : 256;
                        objs = realloc(objs, cap * sizeof(*objs));
                }
                objs[nobjs].key = strdup(e->key);
                objs[nobjs].size = e->size;
                total += e->size;
                nobjs++;
        }
        shoal_list_close(l);
        if (expect >= 0 && (long)nobjs != expect) {
                fprintf(stderr, "read_all: listed %zu objects, expected %ld\n", nobjs, expect);
                return 1;
        }
        if (nobjs) {
                struct shoal_stat st;
                if (shoal_stat(client, objs[0].key, &st) == 0)
                        bs = st.block_size;
        }
        for (size_t i = 0; bs && i < nobjs; i++)
                blocks += (objs[i].size + bs - 1) / bs;

        size_t bufsize = 4u << 20;
        pthread_t th[64];
        for (int i = 0; i < threads; i++)
                if (pthread_create(&th[i], NULL, worker, &bufsize)) {
                        fprintf(stderr, "read_all: pthread_create failed\n");
                        return 1;
                }
        for (int i = 0; i < threads; i++)
                pthread_join(th[i], NULL);

        printf("objects %zu\nbytes %llu\nblocks %llu\nread %llu\n", nobjs,
               (unsigned long long)total, (unsigned long long)blocks,
               (unsigned long long)atomic_load(&bytes_read));
        print_counter("object_get_requests");
        print_counter("remotecache_get_requests");
        print_counter("remotecache_fallbacks");
        for (size_t i = 0; i < nobjs; i++)
                free(objs[i].key);
        free(objs);
        if (shoal_client_close(client)) {
                fprintf(stderr, "read_all: close: %s\n", shoal_errmsg());
                return 1;
        }
        if (atomic_load(&failures)) {
                fprintf(stderr, "read_all: %d failures\n", atomic_load(&failures));
                return 1;
        }
        return 0;
}
