/* shoal stats MOUNTPOINT|HOST:PORT — live metrics, one row per interval [C3, V4]. Reads the
 * mount's `.stats` file or a member's metrics endpoint (/stats), both the `name value` text of
 * shoal_metrics_render_stats, and prints rates between successive reads. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/util.h"
#include "metrics/http.h"
#include "metrics/metrics.h"
#include "metrics/stats_format.h"

#define HEADER_EVERY     30
#define MAX_SOURCE_BYTES (16u << 20)
#define HTTP_TIMEOUT_MS  5000
#define MAX_COLS         8
#define MAX_KEYS         128
#define NO_ID            (-1)

enum col_kind {
        COL_RATE,   /* counter: delta per second */
        COL_GAUGE,  /* current value */
        COL_HCOUNT, /* histogram: observations per second */
        COL_HLAT,   /* histogram: mean of the observations of the interval */
        COL_CPU,    /* cpu seconds per second */
};

struct col {
        const char *title;
        enum col_kind kind;
        enum shoal_stats_unit unit;
        int id;            /* enum shoal_metric_id, or NO_ID for a process figure */
        const char *pname; /* process figure's name in the .stats text */
        bool detail;       /* only with -l 1 */
};

struct section {
        char letter;
        const char *name;
        struct col cols[MAX_COLS + 1]; /* ends at a NULL title */
};

#define M(x) SHOAL_M_##x

static const struct section sections[] = {
        {'u',
         "usage",
         {{"cpu", COL_CPU, SHOAL_STATS_PERCENT, NO_ID, "cpu_seconds", false},
          {"mem", COL_GAUGE, SHOAL_STATS_BYTES, NO_ID, "rss_bytes", false},
          {"buf", COL_GAUGE, SHOAL_STATS_BYTES, M(buffer_used_bytes), NULL, false}}},
        {'f',
         "fuse",
         {{"ops", COL_RATE, SHOAL_STATS_COUNT, M(fuse_ops), NULL, false},
          {"lat", COL_HLAT, SHOAL_STATS_SECONDS, M(fuse_op_dur), NULL, false},
          {"read", COL_RATE, SHOAL_STATS_BYTES, M(fuse_read_bytes), NULL, false},
          {"write", COL_RATE, SHOAL_STATS_BYTES, M(fuse_write_bytes), NULL, false}}},
        {'m',
         "meta",
         {{"ops", COL_RATE, SHOAL_STATS_COUNT, M(meta_ops), NULL, false},
          {"lat", COL_HLAT, SHOAL_STATS_SECONDS, M(meta_op_dur), NULL, false}}},
        {'c',
         "blockcache",
         {{"read", COL_RATE, SHOAL_STATS_BYTES, M(blockcache_hit_bytes), NULL, false},
          {"write", COL_RATE, SHOAL_STATS_BYTES, M(blockcache_write_bytes), NULL, false},
          {"hits", COL_RATE, SHOAL_STATS_COUNT, M(blockcache_hits), NULL, true},
          {"miss", COL_RATE, SHOAL_STATS_COUNT, M(blockcache_miss), NULL, true},
          {"evict", COL_RATE, SHOAL_STATS_COUNT, M(blockcache_evictions), NULL, true}}},
        {'r',
         "remotecache",
         {{"read", COL_RATE, SHOAL_STATS_BYTES, M(remotecache_get_bytes), NULL, false},
          {"serve", COL_RATE, SHOAL_STATS_BYTES, M(remotecache_serve_bytes), NULL, false},
          {"db_c", COL_HCOUNT, SHOAL_STATS_COUNT, M(mount_iorpc_decodeBodyDur), NULL, true},
          {"lat", COL_HLAT, SHOAL_STATS_SECONDS, M(mount_iorpc_decodeBodyDur), NULL, true},
          {"pr_c", COL_HCOUNT, SHOAL_STATS_COUNT, M(mount_iorpc_processRespDur), NULL, true},
          {"lat", COL_HLAT, SHOAL_STATS_SECONDS, M(mount_iorpc_processRespDur), NULL, true},
          {"wb_c", COL_HCOUNT, SHOAL_STATS_COUNT, M(mount_iorpc_writeBodyDur), NULL, true},
          {"lat", COL_HLAT, SHOAL_STATS_SECONDS, M(mount_iorpc_writeBodyDur), NULL, true}}},
        {'e',
         "rdma",
         {{"write", COL_RATE, SHOAL_STATS_BYTES, M(rdma_write_bytes), NULL, false},
          {"read", COL_RATE, SHOAL_STATS_BYTES, M(rdma_read_bytes), NULL, false},
          {"w_ops", COL_RATE, SHOAL_STATS_COUNT, M(rdma_write_ops), NULL, false},
          {"lat", COL_HLAT, SHOAL_STATS_SECONDS, M(rdma_write_dur), NULL, false},
          {"recv", COL_RATE, SHOAL_STATS_BYTES, M(rdma_recv_bytes), NULL, false}}},
        {'o',
         "object",
         {{"get", COL_RATE, SHOAL_STATS_BYTES, M(object_get_bytes), NULL, false},
          {"get_c", COL_RATE, SHOAL_STATS_COUNT, M(object_get_requests), NULL, true},
          {"lat", COL_HLAT, SHOAL_STATS_SECONDS, M(object_get_dur), NULL, true},
          {"put", COL_RATE, SHOAL_STATS_BYTES, M(object_put_bytes), NULL, false},
          {"put_c", COL_RATE, SHOAL_STATS_COUNT, M(object_put_requests), NULL, true}}},
        {'p',
         "plan",
         {{"hits", COL_RATE, SHOAL_STATS_COUNT, M(plan_hits), NULL, false},
          {"miss", COL_RATE, SHOAL_STATS_COUNT, M(plan_misses), NULL, false},
          {"pref", COL_RATE, SHOAL_STATS_BYTES, M(plan_prefetch_bytes), NULL, false},
          {"win", COL_GAUGE, SHOAL_STATS_BYTES, M(plan_window_bytes), NULL, false},
          {"unused", COL_RATE, SHOAL_STATS_BYTES, M(plan_unused_bytes), NULL, true},
          {"off", COL_RATE, SHOAL_STATS_COUNT, M(plan_offplan_reads), NULL, true}}},
        {'g',
         "spread",
         {{"sprd", COL_RATE, SHOAL_STATS_COUNT, M(group_spread_reads), NULL, false},
          {"fill", COL_RATE, SHOAL_STATS_COUNT, M(group_peer_fills), NULL, false},
          {"copies", COL_GAUGE, SHOAL_STATS_COUNT, M(group_spread_copies), NULL, false}}},
};

#undef M

/* One shown column, resolved to the keys it reads from the source text. */
struct shown {
        const struct col *col;
        int key_a; /* counter, gauge or NAME_count */
        int key_b; /* NAME_sum for COL_HLAT; -1 otherwise */
};

struct view {
        const struct section *secs[SHOAL_ARRAY_SIZE(sections)];
        unsigned nsecs;
        struct shown shown[SHOAL_ARRAY_SIZE(sections) * MAX_COLS];
        unsigned nshown;
        unsigned sec_first[SHOAL_ARRAY_SIZE(sections)]; /* index into shown */
        unsigned sec_ncols[SHOAL_ARRAY_SIZE(sections)];
        char keys[MAX_KEYS][96];
        unsigned nkeys;
        bool color;
};

struct reading {
        uint64_t at_ns;
        double v[MAX_KEYS];
};

struct source {
        bool http;
        char addr[300];
        char path[4200];
};

static int key_of(struct view *vw, const char *name, const char *suffix)
{
        char k[96];
        snprintf(k, sizeof(k), "%s%s", name, suffix);
        for (unsigned i = 0; i < vw->nkeys; i++)
                if (!strcmp(vw->keys[i], k))
                        return (int)i;
        if (vw->nkeys >= MAX_KEYS)
                return -1; /* cannot happen with the table above */
        shoal_strlcpy(vw->keys[vw->nkeys], k, sizeof(vw->keys[0]));
        return (int)vw->nkeys++;
}

static void view_add(struct view *vw, const struct section *sec, bool detail)
{
        vw->secs[vw->nsecs] = sec;
        vw->sec_first[vw->nsecs] = vw->nshown;
        unsigned n = 0;
        for (const struct col *c = sec->cols; c->title; c++) {
                if (c->detail && !detail)
                        continue;
                const char *name = c->id == NO_ID ? c->pname : shoal_metric_defs[c->id].name;
                struct shown *s = &vw->shown[vw->nshown++];
                s->col = c;
                s->key_b = -1;
                if (c->kind == COL_HCOUNT || c->kind == COL_HLAT)
                        s->key_a = key_of(vw, name, "_count");
                else
                        s->key_a = key_of(vw, name, "");
                if (c->kind == COL_HLAT)
                        s->key_b = key_of(vw, name, "_sum");
                n++;
        }
        vw->sec_ncols[vw->nsecs++] = n;
}

/* Reads at most MAX_SOURCE_BYTES of PATH; `.stats` on FUSE may report size 0, so read to EOF. */
static int read_file_text(const char *path, char **out, char *err, size_t errlen)
{
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0) {
                int e = errno;
                snprintf(err, errlen, "cannot read %s: %s", path, strerror(e));
                return -e;
        }
        size_t cap = 65536, got = 0;
        char *buf = malloc(cap + 1);
        int rc = 0;
        if (!buf) {
                rc = -ENOMEM;
                snprintf(err, errlen, "out of memory");
                goto out_close;
        }
        for (;;) {
                if (got == cap) {
                        if (cap >= MAX_SOURCE_BYTES) {
                                rc = -EFBIG;
                                snprintf(err, errlen, "%s is larger than %u bytes", path,
                                         MAX_SOURCE_BYTES);
                                goto out_free;
                        }
                        char *p = realloc(buf, cap * 2 + 1);
                        if (!p) {
                                rc = -ENOMEM;
                                snprintf(err, errlen, "out of memory");
                                goto out_free;
                        }
                        buf = p;
                        cap *= 2;
                }
                ssize_t n = read(fd, buf + got, cap - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        rc = -errno;
                        snprintf(err, errlen, "cannot read %s: %s", path, strerror(-rc));
                        goto out_free;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        buf[got] = '\0';
        close(fd);
        *out = buf;
        return 0;

out_free:
        free(buf);
out_close:
        close(fd);
        return rc;
}

static int source_read(const struct view *vw, const struct source *src, struct reading *rd,
                       char *err, size_t errlen)
{
        char *text;
        size_t len;
        int rc = src->http ? shoal_metrics_http_get(src->addr, "/stats", HTTP_TIMEOUT_MS, &text,
                                                    &len, err, errlen)
                           : read_file_text(src->path, &text, err, errlen);
        if (rc)
                return rc;
        rd->at_ns = shoal_now_ns();
        for (unsigned i = 0; i < vw->nkeys; i++)
                rd->v[i] = NAN;
        unsigned found = 0;
        for (char *line = text, *next; line && *line; line = next) {
                next = strchr(line, '\n');
                if (next)
                        *next++ = '\0';
                char *sp = strchr(line, ' ');
                if (!sp)
                        continue;
                *sp = '\0';
                for (unsigned i = 0; i < vw->nkeys; i++) {
                        if (strcmp(vw->keys[i], line))
                                continue;
                        char *end;
                        double d = strtod(sp + 1, &end);
                        if (end != sp + 1) {
                                rd->v[i] = d;
                                found++;
                        }
                        break;
                }
        }
        free(text);
        if (!found) {
                snprintf(err, errlen, "%s holds no shoal metrics",
                         src->http ? src->addr : src->path);
                return -EPROTO;
        }
        return 0;
}

static double value_of(const struct shown *s, const struct reading *prev, const struct reading *cur)
{
        double dt = (double)(cur->at_ns - prev->at_ns) / (double)SHOAL_NS_PER_SEC;
        double a = cur->v[s->key_a], pa = prev->v[s->key_a];
        /* A value missing from the source, or a counter that went back (the process
         * restarted), shows as zero for this row rather than as a huge or negative rate. */
        double da = isnan(a) || isnan(pa) || a < pa ? 0 : a - pa;

        switch (s->col->kind) {
        case COL_GAUGE:
                return isnan(a) ? 0 : a;
        case COL_RATE:
        case COL_HCOUNT:
        case COL_CPU:
                return dt > 0 ? da / dt : 0;
        case COL_HLAT: {
                double b = cur->v[s->key_b], pb = prev->v[s->key_b];
                double db = isnan(b) || isnan(pb) || b < pb ? 0 : b - pb;
                return da > 0 ? db / da : 0;
        }
        }
        return 0;
}

#define C_RESET "\033[0m"
#define C_TITLE "\033[1;34m"
#define C_NAMES "\033[1;37m"
#define C_SEP   "\033[34m"

static const char *tone_color(enum shoal_stats_tone t)
{
        switch (t) {
        case SHOAL_STATS_TONE_ZERO:
                return "\033[1;30m";
        case SHOAL_STATS_TONE_LOW:
                return "\033[32m";
        case SHOAL_STATS_TONE_MID:
                return "\033[33m";
        case SHOAL_STATS_TONE_HIGH:
                return "\033[31m";
        case SHOAL_STATS_TONE_TOP:
                return "\033[35m";
        }
        return "";
}

static void print_header(const struct view *vw)
{
        char title[MAX_COLS * (SHOAL_STATS_CELL + 1) + 1];
        for (unsigned s = 0; s < vw->nsecs; s++) {
                size_t width = vw->sec_ncols[s] * (SHOAL_STATS_CELL + 1) - 1;
                shoal_stats_section_title(vw->secs[s]->name, width, title);
                printf("%s%s%s%s", s ? " " : "", vw->color ? C_TITLE : "", title,
                       vw->color ? C_RESET : "");
        }
        putchar('\n');
        for (unsigned s = 0; s < vw->nsecs; s++) {
                if (s)
                        printf("%s|%s", vw->color ? C_SEP : "", vw->color ? C_RESET : "");
                for (unsigned c = 0; c < vw->sec_ncols[s]; c++) {
                        const struct shown *sh = &vw->shown[vw->sec_first[s] + c];
                        /* Short names sit over the digits, as the unit column is narrow. */
                        printf("%s%s%*s%s%s", c ? " " : "", vw->color ? C_NAMES : "",
                               SHOAL_STATS_CELL - 1, sh->col->title,
                               strlen(sh->col->title) < SHOAL_STATS_CELL ? " " : "",
                               vw->color ? C_RESET : "");
                }
        }
        putchar('\n');
}

static void print_row(const struct view *vw, const struct reading *prev, const struct reading *cur)
{
        char cell[SHOAL_STATS_CELL + 1];
        for (unsigned s = 0; s < vw->nsecs; s++) {
                if (s)
                        printf("%s|%s", vw->color ? C_SEP : "", vw->color ? C_RESET : "");
                for (unsigned c = 0; c < vw->sec_ncols[s]; c++) {
                        const struct shown *sh = &vw->shown[vw->sec_first[s] + c];
                        enum shoal_stats_tone t =
                                shoal_stats_format(value_of(sh, prev, cur), sh->col->unit, cell);
                        printf("%s%s%s%s", c ? " " : "", vw->color ? tone_color(t) : "", cell,
                               vw->color ? C_RESET : "");
                }
        }
        putchar('\n');
}

/* MOUNTPOINT (a directory) or HOST:PORT. Returns 0, or 1 after printing why not. */
static int source_resolve(const struct shoal_cli *cli, const char *arg, struct source *src)
{
        struct stat st;
        char host[256];
        uint16_t port;

        memset(src, 0, sizeof(*src));
        if (stat(arg, &st) == 0) {
                if (!S_ISDIR(st.st_mode)) {
                        shoal_cli_fail(cli, "%s is not a mount point (a directory) nor HOST:PORT",
                                       arg);
                        return 1;
                }
                if ((size_t)snprintf(src->path, sizeof(src->path), "%s/.stats", arg) >=
                    sizeof(src->path)) {
                        shoal_cli_fail(cli, "path too long: %s", arg);
                        return 1;
                }
                if (access(src->path, R_OK)) {
                        shoal_cli_fail(cli, "%s is not a shoal mount (cannot read %s: %s)", arg,
                                       src->path, strerror(errno));
                        return 1;
                }
                return 0;
        }
        if (!shoal_metrics_addr_parse(arg, host, sizeof(host), &port)) {
                src->http = true;
                shoal_strlcpy(src->addr, arg, sizeof(src->addr));
                return 0;
        }
        shoal_cli_fail(cli, "%s: no such mount point, and not HOST:PORT", arg);
        return 1;
}

#define INTERVAL_MAX_S (24 * 3600) /* --interval: at most a day */

static int parse_interval(const char *s, uint64_t *ns)
{
        char *end;
        double secs = strtod(s, &end);
        if (end != s && !*end) {
                if (!(secs > 0) || secs > INTERVAL_MAX_S)
                        return -EINVAL;
                *ns = (uint64_t)(secs * (double)SHOAL_NS_PER_SEC);
                return 0;
        }
        if (shoal_parse_duration(s, ns) || !*ns || *ns > INTERVAL_MAX_S * SHOAL_NS_PER_SEC)
                return -EINVAL;
        return 0;
}

static void sleep_until(uint64_t deadline_ns)
{
        struct timespec ts = shoal_ns_timespec(deadline_ns);
        while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
                ;
}

/* What the command line asks for besides the source. */
struct stats_opts {
        const char *schema;
        bool detail;
        uint64_t interval_ns;
        uint64_t count; /* rows; 0 = no limit */
};

/* Reads --schema, -l, --interval and -c into O. Returns 0 or the exit code after one line. */
static int parse_opts(const struct shoal_cli *cli, struct stats_opts *o)
{
        o->schema = cli->val[OPT_SCHEMA] ? cli->val[OPT_SCHEMA] : "ufmco";
        if (!*o->schema)
                return shoal_cli_fail(cli, "empty --schema: give letters from ufmcreopg");
        o->detail = false;
        const char *l = cli->val[OPT_VERBOSITY];
        if (l) {
                if (strcmp(l, "0") && strcmp(l, "1"))
                        return shoal_cli_fail(cli, "invalid -l %s: expected 0 or 1", l);
                o->detail = l[0] == '1';
        }
        o->interval_ns = SHOAL_NS_PER_SEC;
        if (cli->val[OPT_INTERVAL] && parse_interval(cli->val[OPT_INTERVAL], &o->interval_ns))
                return shoal_cli_fail(cli,
                                      "invalid --interval %s: expected seconds (e.g. 1, 0.5, "
                                      "2s), more than 0 and at most a day",
                                      cli->val[OPT_INTERVAL]);
        o->count = 0;
        if (cli->val[OPT_COUNT] && shoal_parse_u64(cli->val[OPT_COUNT], 1000000000, &o->count))
                return shoal_cli_fail(cli,
                                      "invalid -c %s: expected a number of rows (0 = no limit)",
                                      cli->val[OPT_COUNT]);
        return 0;
}

/* VW: the sections O's schema names, each once, in its order; an unknown letter is a warning.
 * Returns 0 or the exit code after one line (no section at all). */
static int build_view(const struct shoal_cli *cli, const struct stats_opts *o, struct view *vw)
{
        memset(vw, 0, sizeof(*vw));
        bool used[SHOAL_ARRAY_SIZE(sections)] = {false};
        for (const char *p = o->schema; *p; p++) {
                size_t i;
                for (i = 0; i < SHOAL_ARRAY_SIZE(sections); i++)
                        if (sections[i].letter == *p)
                                break;
                if (i == SHOAL_ARRAY_SIZE(sections)) {
                        fprintf(stderr,
                                "shoal stats: warning: unknown --schema letter '%c' ignored "
                                "(letters: ufmcreopg)\n",
                                *p);
                        continue;
                }
                if (used[i])
                        continue;
                used[i] = true;
                view_add(vw, &sections[i], o->detail);
        }
        if (!vw->nsecs)
                return shoal_cli_fail(cli,
                                      "--schema %s names no section: give letters from "
                                      "ufmcreopg",
                                      o->schema);
        vw->color = isatty(STDOUT_FILENO);
        return 0;
}

/* Reads SRC every interval and prints a row of rates per reading (a header every
 * HEADER_EVERY rows), O->count rows or until stdout closes. Returns the exit code. */
static int print_rows(const struct view *vw, const struct source *src, const struct stats_opts *o)
{
        static struct reading r[2];
        char err[8192]; /* room for a full source path and a reason */
        if (source_read(vw, src, &r[0], err, sizeof(err))) {
                fprintf(stderr, "shoal stats: %s\n", err);
                return 1;
        }
        uint64_t next = r[0].at_ns;
        for (uint64_t row = 0; !o->count || row < o->count; row++) {
                struct reading *prev = &r[row % 2], *cur = &r[(row + 1) % 2];
                next += o->interval_ns;
                sleep_until(next);
                if (source_read(vw, src, cur, err, sizeof(err))) {
                        fflush(stdout);
                        fprintf(stderr, "shoal stats: %s\n", err);
                        return 1;
                }
                /* A slow source must not make the next rows catch up in a burst. */
                if (cur->at_ns > next + o->interval_ns)
                        next = cur->at_ns;
                if (row % HEADER_EVERY == 0)
                        print_header(vw);
                print_row(vw, prev, cur);
                if (fflush(stdout) || ferror(stdout))
                        return errno == EPIPE ? 0 : 1;
        }
        return 0;
}

int shoal_cmd_stats(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_STATS, "stats", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        if (cli.npos != 1)
                return shoal_cli_fail(&cli, "expected MOUNTPOINT or HOST:PORT (see 'shoal stats "
                                            "--help')");
        struct stats_opts o;
        static struct view vw;
        rc = parse_opts(&cli, &o);
        if (!rc)
                rc = build_view(&cli, &o, &vw);
        if (rc)
                return rc;
        struct source src;
        if (source_resolve(&cli, cli.pos[0], &src))
                return 1;
        return print_rows(&vw, &src, &o);
}
