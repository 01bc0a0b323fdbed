#include "metrics/metrics.h"

#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

/* Growable output; the first failed allocation makes the whole render fail. */
struct sbuf {
        char *p;
        size_t len, cap;
        bool failed;
};

static bool sb_reserve(struct sbuf *sb, size_t more)
{
        if (sb->failed)
                return false;
        if (sb->len + more + 1 <= sb->cap)
                return true;
        size_t cap = sb->cap ? sb->cap : 4096;
        while (cap < sb->len + more + 1)
                cap *= 2;
        char *p = realloc(sb->p, cap);
        if (!p) {
                sb->failed = true;
                return false;
        }
        sb->p = p;
        sb->cap = cap;
        return true;
}

static void sb_printf(struct sbuf *sb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void sb_printf(struct sbuf *sb, const char *fmt, ...)
{
        va_list ap;
        char small[256];

        va_start(ap, fmt);
        int n = vsnprintf(small, sizeof(small), fmt, ap);
        va_end(ap);
        if (n < 0) {
                sb->failed = true;
                return;
        }
        if (!sb_reserve(sb, (size_t)n))
                return;
        if ((size_t)n < sizeof(small)) {
                memcpy(sb->p + sb->len, small, (size_t)n + 1);
        } else {
                va_start(ap, fmt);
                vsnprintf(sb->p + sb->len, (size_t)n + 1, fmt, ap);
                va_end(ap);
        }
        sb->len += (size_t)n;
}

static void sb_putc(struct sbuf *sb, char c)
{
        if (sb_reserve(sb, 1))
                sb->p[sb->len++] = c;
}

static char *sb_finish(struct sbuf *sb)
{
        if (!sb_reserve(sb, 0)) {
                free(sb->p);
                return NULL;
        }
        sb->p[sb->len] = '\0';
        return sb->p;
}

/* What every exporter shows of one histogram; durations are kept in ns until printed. */
struct hist_fig {
        uint64_t count, sum, tp50, tp90, tp99, max;
};

static void hist_figures(const struct shoal_metrics_snap *cur,
                         const struct shoal_metrics_snap *prev, unsigned id, struct hist_fig *f)
{
        memset(f, 0, sizeof(*f));
        if (!cur->hists)
                return;
        const struct shoal_hist_snap *c = &cur->hists[id];
        const struct shoal_hist_snap *p = prev && prev->hists ? &prev->hists[id] : NULL;
        f->count = c->count;
        f->sum = c->sum;
        f->tp50 = shoal_hist_quantile(c, p, 0.50);
        f->tp90 = shoal_hist_quantile(c, p, 0.90);
        f->tp99 = shoal_hist_quantile(c, p, 0.99);
        f->max = shoal_hist_window_max(c, p);
}

static double secs(uint64_t ns)
{
        return (double)ns / (double)SHOAL_NS_PER_SEC;
}

/* HELP text may hold only escaped backslashes and newlines (exposition format 0.0.4). */
static void prom_help(struct sbuf *sb, const char *name, const char *suffix, const char *help,
                      const char *extra)
{
        sb_printf(sb, "# HELP %s%s ", name, suffix);
        for (const char *t = help; *t; t++) {
                if (*t == '\\' || *t == '\n')
                        sb_putc(sb, '\\');
                sb_putc(sb, *t == '\n' ? 'n' : *t);
        }
        sb_printf(sb, "%s\n", extra);
}

/* Starts a family: HELP, TYPE, then the sample's name and labels up to the value. */
static void prom_family(struct sbuf *sb, const char *name, const char *suffix, const char *type,
                        const char *help, const char *extra, const char *labels)
{
        prom_help(sb, name, suffix, help, extra);
        sb_printf(sb, "# TYPE %s%s %s\n", name, suffix, type);
        if (*labels)
                sb_printf(sb, "%s%s{%s} ", name, suffix, labels);
        else
                sb_printf(sb, "%s%s ", name, suffix);
}

static void prom_secs(struct sbuf *sb, const char *name, const char *suffix, const char *help,
                      const char *extra, const char *labels, uint64_t ns)
{
        prom_family(sb, name, suffix, "gauge", help, extra, labels);
        sb_printf(sb, "%.9g\n", secs(ns));
}

/* The upper bounds (le) of the exported buckets: powers of two in ns, from about 1 us to about
 * 69 s. Each is one past the upper bound of an internal bucket, so the count at it is exact. */
#define PROM_LE_FIRST_SHIFT 10
#define PROM_LE_LAST_SHIFT  36

/* NAME as a Prometheus histogram: cumulative _bucket counts, _sum in seconds, _count. The
 * count is the buckets' total, so that +Inf and _count agree in one scrape. */
static void prom_histogram(struct sbuf *sb, const struct shoal_metric_def *d,
                           const struct shoal_metrics_snap *cur, unsigned id, const char *labels)
{
        static const struct shoal_hist_snap none;
        const struct shoal_hist_snap *h = cur->hists ? &cur->hists[id] : &none;
        prom_help(sb, d->name, "", d->help, " in seconds");
        sb_printf(sb, "# TYPE %s histogram\n", d->name);
        const char *sep = *labels ? "," : "";
        uint64_t seen = 0;
        unsigned b = 0;
        for (unsigned k = PROM_LE_FIRST_SHIFT; k <= PROM_LE_LAST_SHIFT; k++) {
                uint64_t le = 1ULL << k;
                for (; b < SHOAL_HIST_BUCKETS && shoal_hist_bucket_upper(b) < le; b++)
                        seen += h->buckets[b];
                sb_printf(sb, "%s_bucket{%s%sle=\"%.9g\"} %" PRIu64 "\n", d->name, labels, sep,
                          secs(le), seen);
        }
        for (; b < SHOAL_HIST_BUCKETS; b++)
                seen += h->buckets[b];
        sb_printf(sb, "%s_bucket{%s%sle=\"+Inf\"} %" PRIu64 "\n", d->name, labels, sep, seen);
        if (*labels) {
                sb_printf(sb, "%s_sum{%s} %.9g\n", d->name, labels, secs(h->sum));
                sb_printf(sb, "%s_count{%s} %" PRIu64 "\n", d->name, labels, seen);
        } else {
                sb_printf(sb, "%s_sum %.9g\n", d->name, secs(h->sum));
                sb_printf(sb, "%s_count %" PRIu64 "\n", d->name, seen);
        }
}

char *shoal_metrics_render_prometheus(const struct shoal_metrics_snap *cur,
                                      const struct shoal_metrics_snap *prev, const char *labels)
{
        struct sbuf sb = {0};
        struct shoal_process_stats ps;
        struct hist_fig f;

        if (!cur)
                return NULL;
        if (!labels)
                labels = "";
        for (unsigned i = 0; i < SHOAL_M__COUNT; i++) {
                const struct shoal_metric_def *d = &shoal_metric_defs[i];
                switch (d->kind) {
                case SHOAL_METRIC_COUNTER:
                        prom_family(&sb, d->name, "", "counter", d->help, "", labels);
                        sb_printf(&sb, "%" PRIu64 "\n", cur->counters[i]);
                        break;
                case SHOAL_METRIC_GAUGE:
                        prom_family(&sb, d->name, "", "gauge", d->help, "", labels);
                        sb_printf(&sb, "%" PRId64 "\n", (int64_t)cur->counters[i]);
                        break;
                case SHOAL_METRIC_HIST:
                        prom_histogram(&sb, d, cur, i, labels);
                        /* The seed's names beside it: windowed quantiles as gauges. */
                        hist_figures(cur, prev, i, &f);
                        prom_secs(&sb, d->name, "_tp50", d->help,
                                  ", 50th percentile over the last interval in seconds", labels,
                                  f.tp50);
                        prom_secs(&sb, d->name, "_tp90", d->help,
                                  ", 90th percentile over the last interval in seconds", labels,
                                  f.tp90);
                        prom_secs(&sb, d->name, "_tp99", d->help,
                                  ", 99th percentile over the last interval in seconds", labels,
                                  f.tp99);
                        prom_secs(&sb, d->name, "_max", d->help,
                                  ", maximum over the last interval in seconds", labels, f.max);
                        break;
                }
        }

        shoal_process_stats_read(&ps);
        prom_family(&sb, "process_cpu_seconds_total", "", "counter",
                    "Total user and system CPU time spent in seconds", "", labels);
        sb_printf(&sb, "%.9g\n", ps.cpu_seconds);
        prom_family(&sb, "process_resident_memory_bytes", "", "gauge",
                    "Resident memory size in bytes", "", labels);
        sb_printf(&sb, "%" PRIu64 "\n", ps.rss_bytes);
        prom_family(&sb, "process_threads", "", "gauge", "Number of OS threads in the process", "",
                    labels);
        sb_printf(&sb, "%u\n", ps.threads);
        prom_family(&sb, "process_open_fds", "", "gauge", "Number of open file descriptors", "",
                    labels);
        sb_printf(&sb, "%u\n", ps.open_fds);
        return sb_finish(&sb);
}

char *shoal_metrics_render_stats(const struct shoal_metrics_snap *cur,
                                 const struct shoal_metrics_snap *prev)
{
        struct sbuf sb = {0};
        struct shoal_process_stats ps;
        struct hist_fig f;

        if (!cur)
                return NULL;
        for (unsigned i = 0; i < SHOAL_M__COUNT; i++) {
                const struct shoal_metric_def *d = &shoal_metric_defs[i];
                switch (d->kind) {
                case SHOAL_METRIC_COUNTER:
                        sb_printf(&sb, "%s %" PRIu64 "\n", d->name, cur->counters[i]);
                        break;
                case SHOAL_METRIC_GAUGE:
                        sb_printf(&sb, "%s %" PRId64 "\n", d->name, (int64_t)cur->counters[i]);
                        break;
                case SHOAL_METRIC_HIST:
                        hist_figures(cur, prev, i, &f);
                        sb_printf(&sb, "%s_count %" PRIu64 "\n", d->name, f.count);
                        sb_printf(&sb, "%s_sum %.9g\n", d->name, secs(f.sum));
                        sb_printf(&sb, "%s_tp50 %.9g\n", d->name, secs(f.tp50));
                        sb_printf(&sb, "%s_tp90 %.9g\n", d->name, secs(f.tp90));
                        sb_printf(&sb, "%s_tp99 %.9g\n", d->name, secs(f.tp99));
                        sb_printf(&sb, "%s_max %.9g\n", d->name, secs(f.max));
                        break;
                }
        }

        shoal_process_stats_read(&ps);
        sb_printf(&sb, "cpu_seconds %.9g\n", ps.cpu_seconds);
        sb_printf(&sb, "rss_bytes %" PRIu64 "\n", ps.rss_bytes);
        sb_printf(&sb, "threads %u\n", ps.threads);
        sb_printf(&sb, "open_fds %u\n", ps.open_fds);
        return sb_finish(&sb);
}
