#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "common/util.h"
#include "metrics/metrics.h"

#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Metrics are process-global and cumulative, so every test measures the difference between a
 * snapshot taken at its start and one taken after its work. */
static void snap(struct shoal_metrics_snap *s)
{
        assert_int_equal(shoal_metrics_snap_take(s), 0);
        assert_non_null(s->hists);
}

static uint64_t delta(const struct shoal_metrics_snap *cur, const struct shoal_metrics_snap *base,
                      enum shoal_metric_id id)
{
        return cur->counters[id] - base->counters[id];
}

/* Deterministic generator so failures reproduce. */
static uint64_t lcg_state = 0x9e3779b97f4a7c15ULL;
static uint64_t lcg(void)
{
        lcg_state = lcg_state * 6364136223846793005ULL + 1442695040888963407ULL;
        return lcg_state >> 11;
}

static void test_defs_from_table(void **state)
{
        (void)state;
        assert_string_equal(shoal_metric_defs[SHOAL_M_fuse_ops].name, "fuse_ops");
        assert_int_equal(shoal_metric_defs[SHOAL_M_fuse_ops].kind, SHOAL_METRIC_COUNTER);
        assert_string_equal(shoal_metric_defs[SHOAL_M_mount_iorpc_processRespDur].name,
                            "mount_iorpc_processRespDur");
        assert_int_equal(shoal_metric_defs[SHOAL_M_mount_iorpc_processRespDur].kind,
                         SHOAL_METRIC_HIST);
        assert_int_equal(shoal_metric_defs[SHOAL_M_mount_iorpc_inflight].kind, SHOAL_METRIC_GAUGE);
        assert_string_equal(shoal_metric_defs[SHOAL_M__COUNT - 1].name, "object_put_bytes");
        for (unsigned i = 0; i < SHOAL_M__COUNT; i++) {
                assert_non_null(shoal_metric_defs[i].name);
                assert_non_null(shoal_metric_defs[i].help);
                assert_true(shoal_metric_defs[i].help[0] != '\0');
                for (unsigned j = 0; j < i; j++)
                        assert_string_not_equal(shoal_metric_defs[i].name,
                                                shoal_metric_defs[j].name);
        }
}

static void test_bucket_small_exact(void **state)
{
        (void)state;
        for (uint64_t v = 0; v < 2 * SHOAL_HIST_SUB; v++) {
                assert_int_equal(shoal_hist_bucket(v), v);
                assert_int_equal(shoal_hist_bucket_upper((unsigned)v), v);
        }
        assert_int_equal(shoal_hist_bucket(16), 16);
        assert_int_equal(shoal_hist_bucket(17), 16);
        assert_int_equal(shoal_hist_bucket(18), 17);
        assert_int_equal(shoal_hist_bucket_upper(16), 17);
}

static void check_value(uint64_t v)
{
        unsigned b = shoal_hist_bucket(v);
        assert_true(b < SHOAL_HIST_BUCKETS);
        uint64_t up = shoal_hist_bucket_upper(b);
        assert_true(v <= up);
        assert_true(up - v <= v / SHOAL_HIST_SUB);
        if (b > 0)
                assert_true(v > shoal_hist_bucket_upper(b - 1));
}

static void test_bucket_monotonic(void **state)
{
        (void)state;
        unsigned last_b = 0;
        uint64_t last_up = 0;

        /* Every bucket boundary: upper bounds strictly rise and map back to their bucket. */
        for (unsigned b = 0; b < SHOAL_HIST_BUCKETS; b++) {
                uint64_t up = shoal_hist_bucket_upper(b);
                if (b > 0 && last_up == UINT64_MAX) {
                        assert_int_equal(up, UINT64_MAX);
                        continue;
                }
                if (b > 0)
                        assert_true(up > last_up);
                assert_int_equal(shoal_hist_bucket(up), b);
                if (up != UINT64_MAX)
                        assert_int_equal(shoal_hist_bucket(up + 1), b + 1);
                last_up = up;
        }
        assert_int_equal(shoal_hist_bucket_upper(shoal_hist_bucket(UINT64_MAX)), UINT64_MAX);

        /* Dense at the low end, then around every power of two, then random. */
        for (uint64_t v = 0; v < 100000; v++) {
                unsigned b = shoal_hist_bucket(v);
                assert_true(b >= last_b);
                last_b = b;
                check_value(v);
        }
        for (unsigned p = 1; p < 64; p++) {
                uint64_t v = 1ULL << p;
                check_value(v - 1);
                check_value(v);
                check_value(v + 1);
                assert_true(shoal_hist_bucket(v - 1) <= shoal_hist_bucket(v));
        }
        check_value(UINT64_MAX);
        for (int i = 0; i < 100000; i++) {
                uint64_t a = lcg() >> (lcg() % 53), b = lcg() >> (lcg() % 53);
                check_value(a);
                if (a <= b)
                        assert_true(shoal_hist_bucket(a) <= shoal_hist_bucket(b));
                else
                        assert_true(shoal_hist_bucket(a) >= shoal_hist_bucket(b));
        }
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

/* Observes VALS into ID and checks the quantiles of the window against the exact ones. */
static void check_distribution(enum shoal_metric_id id, uint64_t *vals, size_t n)
{
        static const double qs[] = {0.0, 0.01, 0.25, 0.5, 0.9, 0.99, 0.999, 1.0};
        struct shoal_metrics_snap base, cur;
        uint64_t sum = 0;

        snap(&base);
        for (size_t i = 0; i < n; i++) {
                shoal_metric_observe(id, vals[i]);
                sum += vals[i];
        }
        snap(&cur);
        const struct shoal_hist_snap *c = &cur.hists[id], *p = &base.hists[id];
        assert_int_equal(c->count - p->count, n);
        assert_int_equal(c->sum - p->sum, sum);

        qsort(vals, n, sizeof(*vals), cmp_u64);
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(qs); i++) {
                size_t rank = (size_t)ceil(qs[i] * (double)n);
                uint64_t truth = vals[rank ? rank - 1 : 0];
                uint64_t got = shoal_hist_quantile(c, p, qs[i]);
                if (got < truth || got - truth > truth / SHOAL_HIST_SUB)
                        fail_msg("q=%g: got %llu, true %llu", qs[i], (unsigned long long)got,
                                 (unsigned long long)truth);
        }
        uint64_t wmax = shoal_hist_window_max(c, p);
        assert_true(wmax >= vals[n - 1]);
        assert_true(wmax - vals[n - 1] <= vals[n - 1] / SHOAL_HIST_SUB);
        shoal_metrics_snap_free(&base);
        shoal_metrics_snap_free(&cur);
}

static void test_quantiles_known(void **state)
{
        (void)state;
        const size_t n = 100000;
        uint64_t *vals = malloc(n * sizeof(*vals));
        assert_non_null(vals);

        for (size_t i = 0; i < n; i++) /* uniform 1..n */
                vals[i] = i + 1;
        check_distribution(SHOAL_M_fuse_op_dur, vals, n);

        for (size_t i = 0; i < n; i++) /* log-uniform over 1 ns .. ~1 s */
                vals[i] = (uint64_t)exp((double)(lcg() % 20000) / 1000.0);
        check_distribution(SHOAL_M_fuse_op_dur, vals, n);

        for (size_t i = 0; i < n; i++) /* bimodal: 95% fast, 5% slow */
                vals[i] = i % 20 ? 50000 + lcg() % 1000 : 80000000 + lcg() % 1000000;
        check_distribution(SHOAL_M_fuse_op_dur, vals, n);

        for (size_t i = 0; i < 1000; i++) /* constant */
                vals[i] = 1234567;
        check_distribution(SHOAL_M_fuse_op_dur, vals, 1000);

        for (size_t i = 0; i < 100; i++) /* small exact values */
                vals[i] = i % 8;
        check_distribution(SHOAL_M_fuse_op_dur, vals, 100);
        free(vals);
}

static void test_quantile_edges(void **state)
{
        (void)state;
        struct shoal_hist_snap *h = calloc(1, sizeof(*h));
        assert_non_null(h);
        assert_int_equal(shoal_hist_quantile(NULL, NULL, 0.5), 0);
        assert_int_equal(shoal_hist_quantile(h, NULL, 0.5), 0);
        assert_int_equal(shoal_hist_window_max(h, NULL), 0);

        h->buckets[shoal_hist_bucket(100)] = 3;
        h->buckets[shoal_hist_bucket(5000)] = 1;
        h->count = 4;
        h->max = 5000;
        assert_int_equal(shoal_hist_quantile(h, NULL, -1),
                         shoal_hist_bucket_upper(shoal_hist_bucket(100)));
        assert_int_equal(shoal_hist_quantile(h, NULL, NAN),
                         shoal_hist_bucket_upper(shoal_hist_bucket(100)));
        assert_int_equal(shoal_hist_quantile(h, NULL, 0.75),
                         shoal_hist_bucket_upper(shoal_hist_bucket(100)));
        /* Capped by the lifetime max, which is tighter than the bucket bound. */
        assert_int_equal(shoal_hist_quantile(h, NULL, 0.76), 5000);
        assert_int_equal(shoal_hist_quantile(h, NULL, 2), 5000);
        assert_int_equal(shoal_hist_window_max(h, NULL), 5000);
        /* An empty window and reversed snapshots both read as nothing observed. */
        assert_int_equal(shoal_hist_quantile(h, h, 0.5), 0);
        struct shoal_hist_snap *z = calloc(1, sizeof(*z));
        assert_non_null(z);
        assert_int_equal(shoal_hist_quantile(z, h, 0.5), 0);
        assert_int_equal(shoal_hist_window_max(z, h), 0);
        free(z);
        free(h);
}

static void test_window_quantile(void **state)
{
        (void)state;
        const enum shoal_metric_id id = SHOAL_M_meta_op_dur;
        struct shoal_metrics_snap base, prev, cur;

        snap(&base);
        for (int i = 0; i < 1000; i++)
                shoal_metric_observe(id, 5000);
        snap(&prev);
        for (int i = 0; i < 1000; i++)
                shoal_metric_observe(id, 2000000);
        snap(&cur);

        const struct shoal_hist_snap *c = &cur.hists[id];
        /* Only the second batch is in the window. */
        assert_int_equal(shoal_hist_quantile(c, &prev.hists[id], 0.0), 2000000);
        assert_int_equal(shoal_hist_quantile(c, &prev.hists[id], 0.5), 2000000);
        assert_int_equal(shoal_hist_window_max(c, &prev.hists[id]), 2000000);
        /* Since the base both batches count. */
        uint64_t lo = shoal_hist_quantile(c, &base.hists[id], 0.25);
        assert_true(lo >= 5000 && lo <= 5000 + 5000 / 8);
        assert_int_equal(shoal_hist_quantile(c, &base.hists[id], 0.75), 2000000);
        /* A window in which only small values arrive reports them, not the lifetime max. */
        shoal_metrics_snap_free(&prev);
        prev = cur;
        for (int i = 0; i < 10; i++)
                shoal_metric_observe(id, 900);
        snap(&cur);
        uint64_t m = shoal_hist_window_max(&cur.hists[id], &prev.hists[id]);
        assert_true(m >= 900 && m <= 900 + 900 / 8);
        shoal_metrics_snap_free(&base);
        shoal_metrics_snap_free(&prev);
        shoal_metrics_snap_free(&cur);
}

#define NTHREADS   8
#define PER_THREAD 100000

static pthread_barrier_t added, release;

static void *adder(void *arg)
{
        (void)arg;
        for (int i = 0; i < PER_THREAD; i++) {
                shoal_metric_inc(SHOAL_M_fuse_ops);
                shoal_metric_observe(SHOAL_M_rdma_write_dur, (uint64_t)i);
                shoal_metric_gauge_add(SHOAL_M_mount_iorpc_queued, 1);
        }
        for (int i = 0; i < PER_THREAD; i++)
                shoal_metric_gauge_add(SHOAL_M_mount_iorpc_queued, -1);
        shoal_metric_add(SHOAL_M_fuse_read_bytes, 3);
        pthread_barrier_wait(&added);
        pthread_barrier_wait(&release);
        return NULL;
}

static bool snapper_stop, snapper_failed;

/* cmocka's asserts must stay on the main thread; this one only records a failure. */
static void *snapper(void *arg)
{
        uint64_t last = 0, last_count = 0;
        (void)arg;
        while (!__atomic_load_n(&snapper_stop, __ATOMIC_ACQUIRE)) {
                struct shoal_metrics_snap s;
                if (shoal_metrics_snap_take(&s)) {
                        snapper_failed = true;
                        break;
                }
                const struct shoal_hist_snap *h = &s.hists[SHOAL_M_rdma_write_dur];
                uint64_t in_buckets = 0;
                for (unsigned b = 0; b < SHOAL_HIST_BUCKETS; b++)
                        in_buckets += h->buckets[b];
                /* Counters never go back; a value seen in a bucket is already in count. */
                if (s.counters[SHOAL_M_fuse_ops] < last || h->count < last_count ||
                    in_buckets > h->count)
                        snapper_failed = true;
                last = s.counters[SHOAL_M_fuse_ops];
                last_count = h->count;
                shoal_metrics_snap_free(&s);
        }
        return NULL;
}

static void test_counters_threads(void **state)
{
        (void)state;
        pthread_t th[NTHREADS], sn;
        struct shoal_metrics_snap base, live, done;
        const uint64_t n = (uint64_t)NTHREADS * PER_THREAD;
        const uint64_t sum = (uint64_t)NTHREADS * PER_THREAD * (PER_THREAD - 1) / 2;

        snap(&base);
        assert_int_equal(pthread_barrier_init(&added, NULL, NTHREADS + 1), 0);
        assert_int_equal(pthread_barrier_init(&release, NULL, NTHREADS + 1), 0);
        /* A concurrent reader exercises snapshots racing with the data path. */
        assert_int_equal(pthread_create(&sn, NULL, snapper, NULL), 0);
        for (int i = 0; i < NTHREADS; i++)
                assert_int_equal(pthread_create(&th[i], NULL, adder, NULL), 0);

        /* Every adder is alive: the totals come from their own slabs. */
        pthread_barrier_wait(&added);
        snap(&live);
        assert_int_equal(delta(&live, &base, SHOAL_M_fuse_ops), n);
        assert_int_equal(delta(&live, &base, SHOAL_M_fuse_read_bytes), 3 * NTHREADS);
        assert_int_equal(live.hists[SHOAL_M_rdma_write_dur].count -
                                 base.hists[SHOAL_M_rdma_write_dur].count,
                         n);
        assert_int_equal(live.hists[SHOAL_M_rdma_write_dur].sum -
                                 base.hists[SHOAL_M_rdma_write_dur].sum,
                         sum);
        assert_int_equal(delta(&live, &base, SHOAL_M_mount_iorpc_queued), 0);

        /* Every adder has exited: the same totals come from the retired slab. */
        pthread_barrier_wait(&release);
        for (int i = 0; i < NTHREADS; i++)
                assert_int_equal(pthread_join(th[i], NULL), 0);
        __atomic_store_n(&snapper_stop, true, __ATOMIC_RELEASE);
        assert_int_equal(pthread_join(sn, NULL), 0);
        assert_false(snapper_failed);
        snap(&done);
        assert_int_equal(delta(&done, &base, SHOAL_M_fuse_ops), n);
        assert_int_equal(delta(&done, &base, SHOAL_M_fuse_read_bytes), 3 * NTHREADS);
        assert_int_equal(done.hists[SHOAL_M_rdma_write_dur].count -
                                 base.hists[SHOAL_M_rdma_write_dur].count,
                         n);
        assert_int_equal(done.hists[SHOAL_M_rdma_write_dur].sum -
                                 base.hists[SHOAL_M_rdma_write_dur].sum,
                         sum);
        assert_int_equal(done.hists[SHOAL_M_rdma_write_dur].max, PER_THREAD - 1);
        for (unsigned b = 0; b < SHOAL_HIST_BUCKETS; b++)
                assert_int_equal(live.hists[SHOAL_M_rdma_write_dur].buckets[b],
                                 done.hists[SHOAL_M_rdma_write_dur].buckets[b]);

        pthread_barrier_destroy(&added);
        pthread_barrier_destroy(&release);
        shoal_metrics_snap_free(&base);
        shoal_metrics_snap_free(&live);
        shoal_metrics_snap_free(&done);
}

static pthread_key_t late_key;

/* Runs at thread exit, after the metrics module folded this thread's slab on glibc (keys'
 * destructors run in creation order); values recorded here must still count. */
static void late_destructor(void *arg)
{
        (void)arg;
        shoal_metric_add(SHOAL_M_object_put_bytes, 7);
        shoal_metric_observe(SHOAL_M_object_get_dur, 777);
}

static void *short_lived(void *arg)
{
        (void)arg;
        shoal_metric_add(SHOAL_M_object_get_bytes, 42);
        shoal_metric_observe(SHOAL_M_object_get_dur, 1000);
        pthread_setspecific(late_key, (void *)1);
        return NULL;
}

static void test_exited_thread_retained(void **state)
{
        (void)state;
        struct shoal_metrics_snap base, cur;
        pthread_t th;

        shoal_metric_inc(SHOAL_M_object_list_requests); /* registers the metrics key first */
        assert_int_equal(pthread_key_create(&late_key, late_destructor), 0);
        snap(&base);
        for (int i = 0; i < 20; i++) {
                assert_int_equal(pthread_create(&th, NULL, short_lived, NULL), 0);
                assert_int_equal(pthread_join(th, NULL), 0);
        }
        snap(&cur);
        assert_int_equal(delta(&cur, &base, SHOAL_M_object_get_bytes), 20 * 42);
        assert_int_equal(delta(&cur, &base, SHOAL_M_object_put_bytes), 20 * 7);
        const struct shoal_hist_snap *c = &cur.hists[SHOAL_M_object_get_dur];
        const struct shoal_hist_snap *p = &base.hists[SHOAL_M_object_get_dur];
        assert_int_equal(c->count - p->count, 40);
        assert_int_equal(c->sum - p->sum, 20 * (1000 + 777));
        assert_int_equal(c->buckets[shoal_hist_bucket(1000)] - p->buckets[shoal_hist_bucket(1000)],
                         20);
        assert_int_equal(c->buckets[shoal_hist_bucket(777)] - p->buckets[shoal_hist_bucket(777)],
                         20);
        pthread_key_delete(late_key);
        shoal_metrics_snap_free(&base);
        shoal_metrics_snap_free(&cur);
}

static void test_gauges(void **state)
{
        (void)state;
        struct shoal_metrics_snap s;
        const enum shoal_metric_id id = SHOAL_M_remotecache_connections;

        shoal_metric_gauge_set(id, 5);
        shoal_metric_gauge_add(id, 3);
        snap(&s);
        assert_int_equal((int64_t)s.counters[id], 8);
        shoal_metrics_snap_free(&s);
        shoal_metric_gauge_add(id, -10);
        snap(&s);
        assert_int_equal((int64_t)s.counters[id], -2);
        shoal_metrics_snap_free(&s);
        shoal_metric_gauge_set(id, INT64_MAX);
        snap(&s);
        assert_int_equal((int64_t)s.counters[id], INT64_MAX);
        shoal_metrics_snap_free(&s);
        shoal_metric_gauge_set(id, 0);
}

/* A strict reader of exposition format 0.0.4, restricted to what we emit (counter, gauge,
 * histogram). */
struct family {
        char name[128];
        bool help, type;
        unsigned samples;
        bool hist;            /* samples: NAME_bucket... (le ascending, +Inf last), _sum, _count */
        unsigned buckets;     /* _bucket samples seen */
        double last_bucket;   /* the cumulative count of the last one */
        bool inf, sum, count; /* +Inf bucket, _sum and _count seen */
};

/* A sample of histogram family F: checks its name (NAME_bucket, _sum or _count), the order, the
 * le label after the family's LABELS, and that counts are cumulative and end in _count. */
static void check_hist_sample(struct family *f, const char *line, size_t len, const char *labels)
{
        size_t fl = strlen(f->name);
        const char *suffix = line + fl;
        char *end;
        double v = strtod(strrchr(line, ' ') + 1, &end);
        if (len <= fl || strncmp(line, f->name, fl))
                fail_msg("sample outside histogram %s: %s", f->name, line);
        if (!strncmp(suffix, "_bucket{", 8) && len == fl + 7) {
                if (f->inf || f->sum || f->count)
                        fail_msg("bucket after +Inf, _sum or _count: %s", line);
                char want[300];
                snprintf(want, sizeof(want), "{%s%sle=\"", labels, *labels ? "," : "");
                assert_memory_equal(line + len, want, strlen(want));
                const char *le = line + len + strlen(want);
                if (!strncmp(le, "+Inf\"}", 6))
                        f->inf = true;
                if (v < f->last_bucket)
                        fail_msg("buckets not cumulative: %s", line);
                f->last_bucket = v;
                f->buckets++;
        } else if (*labels && line[len] != '{') {
                fail_msg("no labels: %s", line);
        } else if (!*labels && line[len] != ' ') {
                fail_msg("labels where none are given: %s", line);
        } else if (!strncmp(suffix, "_sum", 4) && len == fl + 4) {
                if (!f->inf || f->sum)
                        fail_msg("_sum out of order: %s", line);
                f->sum = true;
        } else if (!strncmp(suffix, "_count", 6) && len == fl + 6) {
                if (!f->sum || f->count)
                        fail_msg("_count out of order: %s", line);
                if (v != f->last_bucket)
                        fail_msg("_count %g is not the +Inf bucket %g", v, f->last_bucket);
                f->count = true;
        } else {
                fail_msg("bad histogram sample: %s", line);
        }
}

static struct family *find_family(struct family *f, unsigned n, const char *name)
{
        for (unsigned i = 0; i < n; i++)
                if (!strcmp(f[i].name, name))
                        return &f[i];
        return NULL;
}

static bool valid_name(const char *s, size_t len)
{
        if (!len)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                bool alpha =
                        (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || c == ':';
                if (!alpha && !(i > 0 && c >= '0' && c <= '9'))
                        return false;
        }
        return true;
}

/* Returns the number of families, failing the test on any violation. */
static unsigned check_prometheus(const char *text, const char *labels, struct family *fam,
                                 unsigned max_fam)
{
        regex_t re;
        unsigned nfam = 0;
        struct family *cur = NULL;
        char want_labels[256];

        assert_int_equal(regcomp(&re,
                                 "^[a-zA-Z_:][a-zA-Z0-9_:]*(\\{[^}]*\\})? [-+0-9.eE]+(Inf|NaN)?$",
                                 REG_EXTENDED | REG_NOSUB),
                         0);
        snprintf(want_labels, sizeof(want_labels), "{%s}", labels);
        assert_true(text[0] != '\0');
        assert_int_equal(text[strlen(text) - 1], '\n');

        char *copy = strdup(text), *save = NULL;
        assert_non_null(copy);
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (line[0] == '#') {
                        bool is_help = !strncmp(line, "# HELP ", 7);
                        bool is_type = !strncmp(line, "# TYPE ", 7);
                        if (!is_help && !is_type)
                                fail_msg("stray comment: %s", line);
                        const char *name = line + 7;
                        const char *sp = strchr(name, ' ');
                        assert_non_null(sp);
                        size_t len = (size_t)(sp - name);
                        assert_true(valid_name(name, len));
                        assert_true(len < sizeof(fam[0].name));
                        char nm[128];
                        memcpy(nm, name, len);
                        nm[len] = '\0';
                        struct family *f = find_family(fam, nfam, nm);
                        if (!f) {
                                assert_true(nfam < max_fam);
                                f = &fam[nfam++];
                                memset(f, 0, sizeof(*f));
                                strcpy(f->name, nm);
                        } else if (f != cur) {
                                fail_msg("family %s resumed after another began", nm);
                        }
                        if (f->samples)
                                fail_msg("%s metadata after its samples", nm);
                        if (is_help) {
                                if (f->help)
                                        fail_msg("second HELP for %s", nm);
                                f->help = true;
                        } else {
                                if (f->type)
                                        fail_msg("second TYPE for %s", nm);
                                if (strcmp(sp + 1, "counter") && strcmp(sp + 1, "gauge") &&
                                    strcmp(sp + 1, "histogram"))
                                        fail_msg("bad type: %s", line);
                                f->type = true;
                                f->hist = !strcmp(sp + 1, "histogram");
                        }
                        cur = f;
                        continue;
                }
                if (regexec(&re, line, 0, NULL, 0))
                        fail_msg("bad sample line: '%s'", line);
                size_t len = strcspn(line, "{ ");
                char nm[128];
                assert_true(len < sizeof(nm));
                memcpy(nm, line, len);
                nm[len] = '\0';
                if (cur && cur->hist && cur->type && cur->help) {
                        check_hist_sample(cur, line, len, labels);
                        cur->samples++;
                        goto value;
                }
                if (!cur || strcmp(cur->name, nm) || !cur->type || !cur->help)
                        fail_msg("sample %s outside its declared family", nm);
                cur->samples++;
                if (*labels)
                        assert_memory_equal(line + len, want_labels, strlen(want_labels));
                else
                        assert_int_equal(line[len], ' ');
value:;
                char *end;
                const char *val = strrchr(line, ' ') + 1;
                double v = strtod(val, &end);
                assert_true(*end == '\0' && isfinite(v));
        }
        free(copy);
        regfree(&re);
        for (unsigned i = 0; i < nfam; i++) {
                if (fam[i].hist && (!fam[i].inf || !fam[i].sum || !fam[i].count))
                        fail_msg("histogram %s lacks +Inf, _sum or _count", fam[i].name);
                if (!fam[i].hist && fam[i].samples != 1)
                        fail_msg("%s has %u samples", fam[i].name, fam[i].samples);
        }
        return nfam;
}

static const char *sample_value(const char *text, const char *name)
{
        size_t len = strlen(name);
        for (const char *p = text; (p = strstr(p, name)); p++)
                if ((p == text || p[-1] == '\n') && (p[len] == '{' || p[len] == ' '))
                        return strchr(p, ' ') + 1;
        return NULL;
}

static void test_prometheus_format(void **state)
{
        (void)state;
        static const char *const suffixes[] = {"", "_tp50", "_tp90", "_tp99", "_max"};
        static const char *const labelsets[] = {"cache_group=\"g1\",role=\"Provider\"", ""};
        struct family fam[512];
        struct shoal_metrics_snap prev, cur;
        char nm[160];

        snap(&prev);
        for (int i = 0; i < 1000; i++)
                shoal_metric_observe(SHOAL_M_mount_iorpc_processRespDur, 250000);
        shoal_metric_add(SHOAL_M_blockcache_hits, 11);
        shoal_metric_gauge_set(SHOAL_M_mount_iorpc_inflight, -3);
        snap(&cur);

        for (size_t l = 0; l < SHOAL_ARRAY_SIZE(labelsets); l++) {
                char *text = shoal_metrics_render_prometheus(&cur, &prev, labelsets[l]);
                assert_non_null(text);
                unsigned nfam = check_prometheus(text, labelsets[l], fam, 512);

                for (unsigned i = 0; i < SHOAL_M__COUNT; i++) {
                        const struct shoal_metric_def *d = &shoal_metric_defs[i];
                        if (d->kind != SHOAL_METRIC_HIST) {
                                assert_non_null(find_family(fam, nfam, d->name));
                                continue;
                        }
                        for (size_t s = 0; s < SHOAL_ARRAY_SIZE(suffixes); s++) {
                                snprintf(nm, sizeof(nm), "%s%s", d->name, suffixes[s]);
                                assert_non_null(find_family(fam, nfam, nm));
                        }
                }
                assert_non_null(find_family(fam, nfam, "process_cpu_seconds_total"));
                assert_non_null(find_family(fam, nfam, "process_resident_memory_bytes"));
                assert_non_null(find_family(fam, nfam, "process_threads"));
                assert_non_null(find_family(fam, nfam, "process_open_fds"));

                const char *v = sample_value(text, "mount_iorpc_processRespDur_tp99");
                assert_non_null(v);
                double tp99 = strtod(v, NULL);
                assert_true(tp99 >= 0.00025 && tp99 <= 0.00025 * 1.125);
                v = sample_value(text, "mount_iorpc_processRespDur_max");
                assert_non_null(v);
                double max = strtod(v, NULL);
                assert_true(max >= 0.00025 && max <= 0.00025 * 1.125);
                /* 250 us: under the bucket at 2^18 ns (262 us), over the one at 2^17. */
                struct family *h = find_family(fam, nfam, "mount_iorpc_processRespDur");
                assert_true(h && h->hist && h->buckets == 28);
                v = strstr(text, "mount_iorpc_processRespDur_bucket");
                assert_non_null(v);
                assert_non_null(strstr(v, "le=\"0.000131072\"} 0\n"));
                v = strstr(v, "le=\"0.000262144\"} ");
                assert_non_null(v);
                assert_int_equal(strtoull(strchr(v, ' ') + 1, NULL, 10),
                                 cur.hists[SHOAL_M_mount_iorpc_processRespDur].count);
                v = sample_value(text, "mount_iorpc_processRespDur_count");
                assert_int_equal(strtoull(v, NULL, 10),
                                 cur.hists[SHOAL_M_mount_iorpc_processRespDur].count);
                v = sample_value(text, "mount_iorpc_inflight");
                assert_int_equal(strtoll(v, NULL, 10), -3);
                v = sample_value(text, "blockcache_hits");
                assert_int_equal(strtoull(v, NULL, 10), cur.counters[SHOAL_M_blockcache_hits]);
                v = sample_value(text, "process_threads");
                assert_true(strtoul(v, NULL, 10) >= 1);
                free(text);
        }

        /* NULL labels and no previous snapshot are allowed. */
        char *text = shoal_metrics_render_prometheus(&cur, NULL, NULL);
        assert_non_null(text);
        check_prometheus(text, "", fam, 512);
        free(text);
        shoal_metric_gauge_set(SHOAL_M_mount_iorpc_inflight, 0);
        shoal_metrics_snap_free(&prev);
        shoal_metrics_snap_free(&cur);
}

static void test_stats_text(void **state)
{
        (void)state;
        struct shoal_metrics_snap prev, cur;
        regex_t re;
        unsigned lines = 0;

        snap(&prev);
        for (int i = 0; i < 1000; i++)
                shoal_metric_observe(SHOAL_M_mount_iorpc_processRespDur, 3000000);
        snap(&cur);
        char *text = shoal_metrics_render_stats(&cur, &prev);
        assert_non_null(text);

        assert_int_equal(
                regcomp(&re, "^[a-zA-Z_:][a-zA-Z0-9_:]* [-+0-9.eE]+$", REG_EXTENDED | REG_NOSUB),
                0);
        char *copy = strdup(text), *save = NULL;
        assert_non_null(copy);
        for (char *line = strtok_r(copy, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
                if (regexec(&re, line, 0, NULL, 0))
                        fail_msg("bad stats line: '%s'", line);
                lines++;
        }
        free(copy);
        regfree(&re);
        unsigned nhist = 0;
        for (unsigned i = 0; i < SHOAL_M__COUNT; i++)
                nhist += shoal_metric_defs[i].kind == SHOAL_METRIC_HIST;
        assert_int_equal(lines, SHOAL_M__COUNT + 5 * nhist + 4);

        const char *v = sample_value(text, "mount_iorpc_processRespDur_tp99");
        assert_non_null(v);
        double tp99 = strtod(v, NULL);
        assert_true(tp99 >= 0.003 && tp99 <= 0.003 * 1.125);
        assert_non_null(sample_value(text, "mount_iorpc_processRespDur_count"));
        assert_non_null(sample_value(text, "remotecache_connections"));
        assert_non_null(sample_value(text, "cpu_seconds"));
        assert_non_null(sample_value(text, "rss_bytes"));
        assert_non_null(sample_value(text, "open_fds"));
        v = sample_value(text, "threads");
        assert_non_null(v);
        assert_true(strtoul(v, NULL, 10) >= 1);
        free(text);
        shoal_metrics_snap_free(&prev);
        shoal_metrics_snap_free(&cur);
}

static void *parked(void *arg)
{
        pthread_barrier_wait(arg);
        pthread_barrier_wait(arg);
        return NULL;
}

static void test_process_stats(void **state)
{
        (void)state;
        struct shoal_process_stats a, b;
        pthread_barrier_t bar;
        pthread_t th;

        shoal_process_stats_read(&a);
        assert_true(a.cpu_seconds >= 0);
        assert_true(a.rss_bytes > 0);
        assert_true(a.threads >= 1);
        assert_true(a.open_fds >= 1);

        int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        assert_true(fd >= 0);
        assert_int_equal(pthread_barrier_init(&bar, NULL, 2), 0);
        assert_int_equal(pthread_create(&th, NULL, parked, &bar), 0);
        pthread_barrier_wait(&bar);
        shoal_process_stats_read(&b);
        assert_int_equal(b.open_fds, a.open_fds + 1);
        assert_int_equal(b.threads, a.threads + 1);
        pthread_barrier_wait(&bar);
        assert_int_equal(pthread_join(th, NULL), 0);
        pthread_barrier_destroy(&bar);
        close(fd);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_defs_from_table),
                cmocka_unit_test(test_bucket_small_exact),
                cmocka_unit_test(test_bucket_monotonic),
                cmocka_unit_test(test_quantiles_known),
                cmocka_unit_test(test_quantile_edges),
                cmocka_unit_test(test_window_quantile),
                cmocka_unit_test(test_counters_threads),
                cmocka_unit_test(test_exited_thread_retained),
                cmocka_unit_test(test_gauges),
                cmocka_unit_test(test_prometheus_format),
                cmocka_unit_test(test_stats_text),
                cmocka_unit_test(test_process_stats),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
