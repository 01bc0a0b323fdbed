/* Access plans from C, from several threads at once: two plans of one client, each over ITEMS
 * records of 64 KiB (or to the end of an object) in a random order of every object under
 * REFDIR, read by THREADS threads per plan that take the next item in turn (so reads come
 * roughly, not exactly, in plan order) and top the plan's queue up as they go; every read is
 * compared with the file in REFDIR. Then a plan that names a missing key reads -ENOENT at that
 * item only, and the client refuses to close while a plan is open. Built against the installed
 * library by tests/integration/test_lib.sh; ends with exit(), so a leak check covers plans.
 *
 * usage: plan_reads STORAGE REFDIR [-t THREADS] [-n ITEMS] [-o NAME=VALUE]...
 * prints "reads N", "plan_hits N", "plan_misses N", "plan_offplan N" on stdout. */
#define _GNU_SOURCE
#include <errno.h>
#include <ftw.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shoal/shoal.h>

#define RECORD   65536
#define MAX_OBJS 4096
#define MAX_THR  16
#define NPLANS   2

struct obj {
        char *key;
        char *ref;
        uint64_t size;
};

struct item {
        unsigned obj;
        uint64_t off;
};

struct run {
        struct shoal_plan *plan;
        struct item *items;
        size_t n;
        atomic_size_t next; /* next item to read */
        pthread_mutex_t mu; /* added */
        size_t added;
};

static struct obj objs[MAX_OBJS];
static size_t nobjs;
static const char *refdir;
static atomic_int failures;

static int walk(const char *path, const struct stat *st, int type, struct FTW *ftw)
{
        (void)ftw;
        if (type != FTW_F || nobjs == MAX_OBJS || !st->st_size)
                return 0;
        FILE *f = fopen(path, "rb");
        if (!f)
                return -1;
        struct obj *o = &objs[nobjs];
        o->size = (uint64_t)st->st_size;
        o->ref = malloc(o->size);
        o->key = strdup(path + strlen(refdir) + 1);
        if (!o->ref || !o->key || fread(o->ref, 1, o->size, f) != o->size) {
                fclose(f);
                return -1;
        }
        fclose(f);
        nobjs++;
        return 0;
}

static void top_up(struct run *r)
{
        pthread_mutex_lock(&r->mu);
        while (r->added < r->n) {
                const struct item *it = &r->items[r->added];
                /* Every third item to the end of its object, the others one record. */
                uint64_t len = r->added % 3 ? RECORD : SHOAL_PLAN_TO_END;
                int rc = shoal_plan_add(r->plan, objs[it->obj].key, it->off, len);
                if (rc == -EAGAIN)
                        break;
                if (rc) {
                        fprintf(stderr, "plan_reads: add: %s\n", shoal_errmsg());
                        atomic_fetch_add(&failures, 1);
                        break;
                }
                r->added++;
        }
        pthread_mutex_unlock(&r->mu);
}

static void *reader(void *arg)
{
        struct run *r = arg;
        char *buf = malloc(RECORD);
        size_t cap = RECORD;
        for (;;) {
                size_t i = atomic_fetch_add(&r->next, 1);
                if (i >= r->n)
                        break;
                top_up(r);
                const struct item *it = &r->items[i];
                const struct obj *o = &objs[it->obj];
                uint64_t want = i % 3 ? RECORD : o->size - it->off;
                if (want > o->size - it->off)
                        want = o->size - it->off;
                if (want > cap) {
                        char *nb = realloc(buf, want);
                        if (!nb)
                                break;
                        buf = nb;
                        cap = want;
                }
                ssize_t got = shoal_plan_pread(r->plan, o->key, buf, want, it->off);
                if (got != (ssize_t)want || memcmp(buf, o->ref + it->off, want)) {
                        fprintf(stderr, "plan_reads: %s at %llu: got %zd of %llu (%s)\n", o->key,
                                (unsigned long long)it->off, got, (unsigned long long)want,
                                got < 0 ? shoal_errmsg() : "bytes differ");
                        atomic_fetch_add(&failures, 1);
                }
        }
        free(buf);
        return NULL;
}

static int missing_key(struct shoal_client *c)
{
        struct shoal_plan *p = shoal_plan_create(c, 0, 2);
        if (!p)
                return 1;
        const struct obj *o = &objs[0];
        char b[16];
        int bad = shoal_plan_add(p, o->key, 0, 16) || shoal_plan_add(p, "no/such/key", 0, 16) ||
                  shoal_plan_add(p, o->key, 16, 16);
        bad |= shoal_plan_pread(p, o->key, b, 16, 0) != 16 || memcmp(b, o->ref, 16);
        bad |= shoal_plan_pread(p, "no/such/key", b, 16, 0) != -ENOENT;
        bad |= !strstr(shoal_errmsg(), "no such object");
        bad |= shoal_plan_pread(p, o->key, b, 16, 16) != 16 || memcmp(b, o->ref + 16, 16);
        bad |= shoal_client_close(c) != -EBUSY;
        shoal_plan_destroy(p);
        return bad;
}

int main(int argc, char **argv)
{
        if (argc < 3) {
                fprintf(stderr, "usage: plan_reads STORAGE REFDIR [-t N] [-n N] [-o N=V]...\n");
                return 2;
        }
        refdir = argv[2];
        unsigned threads = 4;
        size_t n = 20000;
        struct shoal_options *o = shoal_options_new();
        int opt;
        optind = 3;
        while ((opt = getopt(argc, argv, "t:n:o:")) != -1) {
                if (opt == 't')
                        threads = (unsigned)atoi(optarg);
                else if (opt == 'n')
                        n = (size_t)atol(optarg);
                else if (opt == 'o') {
                        char *eq = strchr(optarg, '=');
                        if (!eq)
                                return 2;
                        *eq = 0;
                        if (shoal_options_set(o, optarg, eq + 1)) {
                                fprintf(stderr, "plan_reads: %s\n", shoal_errmsg());
                                return 2;
                        }
                } else
                        return 2;
        }
        if (!threads || threads > MAX_THR || nftw(refdir, walk, 16, FTW_PHYS) || !nobjs)
                return 2;
        struct shoal_client *c = shoal_client_open(argv[1], o);
        shoal_options_free(o);
        if (!c) {
                fprintf(stderr, "plan_reads: %s\n", shoal_errmsg());
                return 1;
        }
        srand(30);
        struct run runs[NPLANS];
        pthread_t th[NPLANS][MAX_THR];
        for (int k = 0; k < NPLANS; k++) {
                struct run *r = &runs[k];
                memset(r, 0, sizeof(*r));
                pthread_mutex_init(&r->mu, NULL);
                r->n = n;
                r->items = calloc(n, sizeof(*r->items));
                /* Two plans of one client: half the buffers, then what plans may still take. */
                r->plan = shoal_plan_create(c, 0, 4);
                if (!r->items || !r->plan) {
                        fprintf(stderr, "plan_reads: plan %d: %s\n", k, shoal_errmsg());
                        return 1;
                }
                for (size_t i = 0; i < n; i++) {
                        unsigned ob = (unsigned)rand() % (unsigned)nobjs;
                        uint64_t nrec = (objs[ob].size + RECORD - 1) / RECORD;
                        r->items[i] = (struct item){ob, ((uint64_t)rand() % nrec) * RECORD};
                }
                top_up(r);
        }
        for (int k = 0; k < NPLANS; k++)
                for (unsigned t = 0; t < threads; t++)
                        pthread_create(&th[k][t], NULL, reader, &runs[k]);
        unsigned long long hits = 0, misses = 0, offplan = 0;
        for (int k = 0; k < NPLANS; k++) {
                for (unsigned t = 0; t < threads; t++)
                        pthread_join(th[k][t], NULL);
                struct shoal_plan_stats st;
                shoal_plan_stats(runs[k].plan, &st);
                if (st.window_bytes > st.window_max)
                        atomic_fetch_add(&failures, 1);
                hits += st.hits;
                misses += st.misses;
                offplan += st.offplan;
                shoal_plan_destroy(runs[k].plan);
                free(runs[k].items);
                pthread_mutex_destroy(&runs[k].mu);
        }
        if (missing_key(c)) {
                fprintf(stderr, "plan_reads: the missing-key plan misbehaved: %s\n",
                        shoal_errmsg());
                atomic_fetch_add(&failures, 1);
        }
        printf("reads %zu\nplan_hits %llu\nplan_misses %llu\nplan_offplan %llu\n", NPLANS * n, hits,
               misses, offplan);
        if (shoal_client_close(c))
                atomic_fetch_add(&failures, 1);
        for (size_t i = 0; i < nobjs; i++) {
                free(objs[i].key);
                free(objs[i].ref);
        }
        return atomic_load(&failures) ? 1 : 0;
}
