/* shoal bench STORAGE --cache-group G — read benchmark through the group without FUSE [C5]:
 * N threads read whole blocks of the objects under --prefix from their owners over a transport
 * (TCP pool; IORPC with --use-iorpc; IORPC over RDMA with --rdma-network), for --duration.
 * Prints the transport that actually carried the reads, progress each second, then throughput,
 * latency percentiles, and CPU seconds per GiB on the client (this process) and on the servers
 * (the members' process_cpu_seconds_total, read from the metrics endpoints their group records
 * name). --transports tcp,iorpc,rdma runs once per transport and ends with a table.
 *
 * A group without a live member to read from is an error (exit 1) at start, and stops a run
 * within a second or so when the last member leaves. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/http.h"
#include "metrics/metrics.h"
#include "transport/select.h"
#include "store/store.h"

#define MAX_BLOCKS          200000
#define MAX_SAMPLES         200000
#define MAX_TRANSPORTS      3
#define SCRAPE_MS           2000
#define TICK_NS             (100 * SHOAL_NS_PER_MS) /* the longest sleep between checks */
#define DURATION_DEFAULT_NS (10 * SHOAL_NS_PER_SEC)

enum transport {
        TR_TCP,
        TR_IORPC,
        TR_RDMA,
};

static const char *const tr_flag[] = {"tcp", "iorpc", "rdma"};
static const char *const tr_name[] = {"tcp pool", "iorpc over tcp", "iorpc over rdma"};

struct bblock {
        uint32_t obj;
        uint32_t index;
};

struct bench {
        struct shoal_node *node;
        struct shoal_object *objs;
        size_t nobjs;
        struct bblock *blocks;
        size_t nblocks;
        uint64_t deadline; /* atomic: the progress loop cuts it short when the group empties */
        uint64_t bytes;    /* atomics */
        uint64_t errors;
        uint64_t reqs;
};

struct worker {
        struct bench *b;
        pthread_t th;
        unsigned idx, nthreads;
        char *buf;
        uint64_t *lat;
        size_t nlat;
        bool warm_only;
};

/* What the command line asked for, shared by every run. */
struct opts {
        const char *group;
        const char *prefix;
        unsigned threads;
        uint64_t duration, linger, ramp;
        bool warm;
};

struct result {
        enum transport asked;
        char carried[96]; /* the transport(s) that carried the timed reads */
        double secs, gib, p50_ms, p99_ms, client_cpu, server_cpu;
        bool server_cpu_known;
        uint64_t reqs, errors;
};

static int read_block(struct bench *b, const struct bblock *bb, char *buf)
{
        const struct shoal_object *o = &b->objs[bb->obj];
        int rc = shoal_node_read_from_owner(b->node, o, bb->index, buf);
        if (!rc)
                __atomic_fetch_add(&b->bytes,
                                   shoal_block_len(o->size, b->node->vol.block_size, bb->index),
                                   __ATOMIC_RELAXED);
        else
                __atomic_fetch_add(&b->errors, 1, __ATOMIC_RELAXED);
        __atomic_fetch_add(&b->reqs, 1, __ATOMIC_RELAXED);
        return rc;
}

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        struct bench *b = w->b;
        if (w->warm_only) {
                for (size_t i = w->idx; i < b->nblocks; i += w->nthreads)
                        read_block(b, &b->blocks[i], w->buf);
                return NULL;
        }
        size_t i = (size_t)w->idx * 7919 % b->nblocks;
        while (shoal_now_ns() < __atomic_load_n(&b->deadline, __ATOMIC_RELAXED)) {
                uint64_t t0 = shoal_now_ns();
                int rc = read_block(b, &b->blocks[i], w->buf);
                if (!rc && w->nlat < MAX_SAMPLES / w->nthreads + 1)
                        w->lat[w->nlat++] = shoal_now_ns() - t0;
                i = (i + w->nthreads) % b->nblocks;
        }
        return NULL;
}

static int cmp_u64(const void *a, const void *b)
{
        uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
        return x < y ? -1 : x > y;
}

static double cpu_seconds(void)
{
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
               (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
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

static void print_conns(struct bench *b, const char *prefix)
{
        struct shoal_group_view *v = shoal_group_view_get(b->node->group);
        printf("%sconnections per member:", prefix);
        for (size_t i = 0; i < v->n; i++)
                if (v->members[i].role == SHOAL_ROLE_PROVIDER)
                        printf(" %s=%u", v->members[i].tcp_addr,
                               shoal_remote_conns(b->node->remote, &v->members[i]));
        printf("\n");
        fflush(stdout);
        shoal_group_view_put(v);
}

static int run_threads(struct bench *b, unsigned nthreads, bool warm, struct worker *ws,
                       unsigned *started)
{
        for (*started = 0; *started < nthreads; (*started)++) {
                struct worker *w = &ws[*started];
                w->b = b;
                w->idx = *started;
                w->nthreads = nthreads;
                w->warm_only = warm;
                w->nlat = 0;
                if (shoal_thread_create(&w->th, worker_main, w))
                        return -EAGAIN;
        }
        return 0;
}

static void join_threads(struct worker *ws, unsigned n)
{
        for (unsigned t = 0; t < n; t++)
                pthread_join(ws[t].th, NULL);
}

/* ---- server CPU from the members' metrics endpoints ---- */

struct server_cpu {
        size_t n;
        char addr[64][SHOAL_ADDR_LEN];
        double start[64];
        bool ok;
};

/* The value of the first sample of NAME in the Prometheus text BODY. */
static int prom_value(const char *body, const char *name, double *out)
{
        size_t len = strlen(name);
        for (const char *p = body, *eol; *p; p = eol + 1) {
                eol = strchr(p, '\n');
                if (!eol)
                        eol = p + strlen(p) - 1; /* the last line: the loop ends after it */
                if (strncmp(p, name, len) || (p[len] != '{' && p[len] != ' '))
                        continue;
                const char *sp = p + len;
                if (*sp == '{') {
                        sp = strchr(sp, '}');
                        if (!sp || sp > eol)
                                return -EPROTO;
                        sp++;
                }
                char *end;
                *out = strtod(sp, &end);
                return end == sp ? -EPROTO : 0;
        }
        return -ENOENT;
}

static int scrape_cpu(const char *addr, double *cpu)
{
        char *body = NULL, err[256];
        size_t len;
        int rc = shoal_metrics_http_get(addr, "/metrics", SCRAPE_MS, &body, &len, err, sizeof(err));
        if (!rc)
                rc = prom_value(body, "process_cpu_seconds_total", cpu);
        free(body);
        if (rc)
                log_warn("bench", "server cpu: %s: %s", addr,
                         rc == -ENOENT ? "no process_cpu_seconds_total" : err);
        return rc;
}

/* The metrics endpoint of member M, reachable from here: one that listens on every interface
 * is asked at the member's pool IP. Returns false when the member names none. */
static bool member_metrics(const struct shoal_member *m, char *out)
{
        const char *colon = strrchr(m->metrics_addr, ':');
        if (!m->metrics_addr[0] || !colon)
                return false;
        size_t hl = (size_t)(colon - m->metrics_addr);
        bool any = !hl || (hl == 7 && !strncmp(m->metrics_addr, "0.0.0.0", 7));
        const char *tc = strrchr(m->tcp_addr, ':');
        if (any && tc)
                snprintf(out, SHOAL_ADDR_LEN, "%.*s%s", (int)(tc - m->tcp_addr), m->tcp_addr,
                         colon);
        else
                shoal_strlcpy(out, m->metrics_addr, SHOAL_ADDR_LEN);
        return true;
}

static void server_cpu_start(struct shoal_node *n, struct server_cpu *sc)
{
        sc->n = 0;
        sc->ok = true;
        struct shoal_group_view *v = shoal_group_view_get(n->group);
        for (size_t i = 0; i < v->n && sc->ok; i++) {
                const struct shoal_member *m = &v->members[i];
                if (m->role != SHOAL_ROLE_PROVIDER)
                        continue;
                if (sc->n == SHOAL_ARRAY_SIZE(sc->addr) || !member_metrics(m, sc->addr[sc->n]) ||
                    scrape_cpu(sc->addr[sc->n], &sc->start[sc->n]))
                        sc->ok = false;
                else
                        sc->n++;
        }
        shoal_group_view_put(v);
}

/* CPU seconds the members spent since server_cpu_start, or a negative number when unknown. */
static double server_cpu_end(struct server_cpu *sc)
{
        double sum = 0;
        for (size_t i = 0; i < sc->n && sc->ok; i++) {
                double now;
                if (scrape_cpu(sc->addr[i], &now))
                        sc->ok = false;
                else
                        sum += now - sc->start[i];
        }
        return sc->ok && sc->n ? sum : -1;
}

/* ---- which transport carried the reads ---- */

struct carried {
        uint64_t tcp, iorpc, rdma;
};

static void carried_now(struct carried *c)
{
        struct shoal_metrics_snap s;
        memset(c, 0, sizeof(*c));
        if (shoal_metrics_snap_take(&s))
                return;
        c->tcp = s.counters[SHOAL_M_remotecache_tcp_get_bytes];
        c->iorpc = s.counters[SHOAL_M_remotecache_iorpc_get_bytes];
        c->rdma = s.counters[SHOAL_M_remotecache_rdma_get_bytes];
        shoal_metrics_snap_free(&s);
}

/* Names what carried the bytes between A and B: one transport, or the shares of several. */
static void carried_name(const struct carried *a, const struct carried *b, char *out, size_t outlen)
{
        uint64_t d[3] = {b->tcp - a->tcp, b->iorpc - a->iorpc, b->rdma - a->rdma};
        uint64_t total = d[0] + d[1] + d[2];
        out[0] = '\0';
        if (!total) {
                snprintf(out, outlen, "none (no block was read from a member)");
                return;
        }
        size_t at = 0;
        for (int t = 2; t >= 0; t--) {
                if (!d[t])
                        continue;
                if (d[t] == total) {
                        snprintf(out, outlen, "%s", tr_name[t]);
                        return;
                }
                int n = snprintf(out + at, outlen - at, "%s%s %.0f%%", at ? ", " : "", tr_name[t],
                                 100.0 * (double)d[t] / (double)total);
                if (n < 0 || (size_t)n >= outlen - at)
                        return;
                at += (size_t)n;
        }
}

/* ---- one run ---- */

static int load_blocks(struct bench *b, const char *prefix)
{
        int rc = shoal_store_list_objects(b->node->store, prefix, MAX_BLOCKS, &b->objs, &b->nobjs);
        if (rc < 0) {
                fprintf(stderr, "shoal bench: listing '%s' failed: %s\n", prefix, strerror(-rc));
                return 1;
        }
        for (size_t i = 0; i < b->nobjs; i++)
                b->nblocks += shoal_block_count(b->objs[i].size, b->node->vol.block_size);
        if (!b->nblocks) {
                fprintf(stderr, "shoal bench: no objects under '%s'\n", prefix);
                return 1;
        }
        if (b->nblocks > MAX_BLOCKS)
                b->nblocks = MAX_BLOCKS;
        b->blocks = calloc(b->nblocks, sizeof(*b->blocks));
        if (!b->blocks) {
                fprintf(stderr, "shoal bench: out of memory\n");
                return 1;
        }
        size_t k = 0;
        for (size_t i = 0; i < b->nobjs && k < b->nblocks; i++)
                for (uint32_t j = 0;
                     j < shoal_block_count(b->objs[i].size, b->node->vol.block_size) &&
                     k < b->nblocks;
                     j++)
                        b->blocks[k++] = (struct bblock){.obj = (uint32_t)i, .index = j};
        return 0;
}

static int alloc_workers(struct bench *b, unsigned threads, struct worker *ws)
{
        for (unsigned t = 0; t < threads; t++) {
                ws[t].buf = aligned_alloc(4096, b->node->vol.block_size);
                ws[t].lat = malloc(sizeof(uint64_t) * (MAX_SAMPLES / threads + 1));
                if (!ws[t].buf || !ws[t].lat) {
                        fprintf(stderr, "shoal bench: out of memory\n");
                        return 1;
                }
                char rerr[256];
                if (shoal_remote_register(b->node->remote, ws[t].buf, b->node->vol.block_size, rerr,
                                          sizeof(rerr)))
                        log_warn("bench", "%s (RDMA reads go through bounce buffers)", rerr);
        }
        return 0;
}

/* The timed part: threads read until the deadline; progress each second; the run stops early
 * when the group has no live member left. Returns 0, or 1 after printing why. */
static int timed_run(struct bench *b, const struct opts *o, struct worker *ws, struct result *r)
{
        struct server_cpu sc;
        server_cpu_start(b->node, &sc);
        struct carried c0, c1;
        carried_now(&c0);
        double cpu0 = cpu_seconds();
        uint64_t t0 = shoal_now_ns();
        b->bytes = b->errors = b->reqs = 0;
        b->deadline = t0 + o->duration;
        unsigned started;
        int rc = run_threads(b, o->threads, false, ws, &started);
        bool emptied = false;
        uint64_t last = 0;
        for (unsigned s = 1; !rc && shoal_now_ns() < b->deadline; s++) {
                uint64_t next = SHOAL_MIN(t0 + (uint64_t)s * SHOAL_NS_PER_SEC, b->deadline);
                while (shoal_now_ns() < next)
                        shoal_sleep_ns(SHOAL_MIN(next - shoal_now_ns(), TICK_NS));
                if (!live_providers(b->node)) {
                        emptied = true;
                        __atomic_store_n(&b->deadline, 0, __ATOMIC_RELAXED);
                        break;
                }
                uint64_t now_b = __atomic_load_n(&b->bytes, __ATOMIC_RELAXED);
                char pre[64];
                snprintf(pre, sizeof(pre), "t=%us %.2f GiB/s, ", s,
                         (double)(now_b - last) / (double)SHOAL_GiB);
                print_conns(b, pre);
                last = now_b;
        }
        join_threads(ws, started);
        if (rc) {
                fprintf(stderr, "shoal bench: cannot start threads\n");
                return 1;
        }
        if (emptied) {
                fprintf(stderr,
                        "shoal bench: group %s has no live member left to read from; stopped\n",
                        o->group);
                return 1;
        }
        r->secs = (double)(shoal_now_ns() - t0) / (double)SHOAL_NS_PER_SEC;
        r->client_cpu = cpu_seconds() - cpu0;
        double scpu = server_cpu_end(&sc);
        r->server_cpu_known = scpu >= 0;
        r->server_cpu = scpu;
        carried_now(&c1);
        carried_name(&c0, &c1, r->carried, sizeof(r->carried));
        size_t nlat = 0;
        for (unsigned t = 0; t < o->threads; t++)
                nlat += ws[t].nlat;
        uint64_t *all = malloc(sizeof(uint64_t) * (nlat ? nlat : 1));
        size_t m = 0;
        for (unsigned t = 0; all && t < o->threads; t++)
                for (size_t i = 0; i < ws[t].nlat; i++)
                        all[m++] = ws[t].lat[i];
        if (all && m)
                qsort(all, m, sizeof(uint64_t), cmp_u64);
        r->p50_ms = m ? (double)all[m / 2] / (double)SHOAL_NS_PER_MS : 0;
        r->p99_ms = m ? (double)all[m * 99 / 100] / (double)SHOAL_NS_PER_MS : 0;
        free(all);
        r->gib = (double)b->bytes / (double)SHOAL_GiB;
        r->reqs = b->reqs;
        r->errors = b->errors;
        return 0;
}

static void print_result(const struct result *r)
{
        char scpu[48] = "n/a (a member has no metrics endpoint)";
        if (r->server_cpu_known && r->gib > 0)
                snprintf(scpu, sizeof(scpu), "%.2f s/GiB", r->server_cpu / r->gib);
        printf("result: %.2f GiB in %.1f s = %.2f GiB/s, %llu requests, %llu errors, p50 %.2f ms, "
               "p99 %.2f ms, client cpu %.2f s/GiB, server cpu %s\n",
               r->gib, r->secs, r->secs > 0 ? r->gib / r->secs : 0.0, (unsigned long long)r->reqs,
               (unsigned long long)r->errors, r->p50_ms, r->p99_ms,
               r->gib > 0 ? r->client_cpu / r->gib : 0.0, scpu);
        fflush(stdout);
}

/* Starts a node for transport T, reads, and fills R. Returns the exit code. */
static int bench_one(struct shoal_node_config cfg, enum transport t, const struct opts *o,
                     bool first, struct result *r)
{
        cfg.use_iorpc = t != TR_TCP;
        if (t != TR_RDMA) {
                cfg.rdma_network = NULL;
                cfg.rdma_provider = NULL;
        }
        memset(r, 0, sizeof(*r));
        r->asked = t;
        char err[1024];
        struct bench b = {0};
        int rc = shoal_node_start(&cfg, &b.node, err, sizeof(err));
        if (rc) {
                fprintf(stderr, "shoal bench: %s\n", err);
                return shoal_cli_start_code(rc);
        }
        int ret = 1;
        struct worker *ws = NULL;
        if (!live_providers(b.node)) {
                fprintf(stderr,
                        "shoal bench: group %s has no live member to read from (see 'shoal group "
                        "--cache-group %s')\n",
                        o->group, o->group);
                goto out;
        }
        if (load_blocks(&b, o->prefix))
                goto out;
        ws = calloc(o->threads, sizeof(*ws));
        if (!ws || alloc_workers(&b, o->threads, ws))
                goto out;
        /* Warm (all blocks once) or probe (one block): either also shows which transport
         * carries the reads before the header names it. */
        struct carried c0, c1;
        carried_now(&c0);
        if (o->warm && first) {
                unsigned started;
                run_threads(&b, o->threads, true, ws, &started);
                join_threads(ws, started);
        } else {
                read_block(&b, &b.blocks[0], ws[0].buf);
        }
        carried_now(&c1);
        char carried[96];
        carried_name(&c0, &c1, carried, sizeof(carried));
        printf("bench: %zu objects, %zu blocks of %u KiB, %u threads, transport: %s%s%s\n", b.nobjs,
               b.nblocks, b.node->vol.block_size / 1024, o->threads, carried,
               strcmp(carried, tr_name[t]) ? "; asked for " : "",
               strcmp(carried, tr_name[t]) ? tr_name[t] : "");
        if (o->warm && first)
                printf("warm: %zu blocks read once, %llu errors\n", b.nblocks,
                       (unsigned long long)b.errors);
        if (o->ramp) {
                /* Untimed reading at full depth: IORPC grows its connections with the load, one
                 * per grow period [R5], and the timed part should see the steady state. */
                unsigned started;
                b.deadline = shoal_now_ns() + o->ramp;
                run_threads(&b, o->threads, false, ws, &started);
                join_threads(ws, started);
                print_conns(&b, "ramp done: ");
        }
        if (timed_run(&b, o, ws, r))
                goto out;
        print_result(r);
        for (uint64_t end = shoal_now_ns() + o->linger; shoal_now_ns() < end;) {
                shoal_sleep_ns(SHOAL_NS_PER_SEC);
                print_conns(&b, "idle: ");
        }
        ret = r->errors ? 1 : 0;
out:
        for (unsigned t2 = 0; ws && t2 < o->threads; t2++) {
                free(ws[t2].buf);
                free(ws[t2].lat);
        }
        free(ws);
        free(b.blocks);
        free(b.objs);
        shoal_node_stop(b.node);
        return ret;
}

/* Parses --transports LIST into TS. Returns the count, or -1 after printing why. */
static int parse_transports(const struct shoal_cli *cli, const struct shoal_node_config *cfg,
                            enum transport *ts)
{
        const char *list = cli->val[OPT_TRANSPORTS];
        if (!list) {
                ts[0] = cfg->rdma_network ? TR_RDMA : cfg->use_iorpc ? TR_IORPC : TR_TCP;
                return 1;
        }
        int n = 0;
        for (const char *p = list;;) {
                size_t len = strcspn(p, ",");
                int t = -1;
                for (int i = 0; i < MAX_TRANSPORTS; i++)
                        if (strlen(tr_flag[i]) == len && !strncmp(p, tr_flag[i], len))
                                t = i;
                for (int i = 0; t >= 0 && i < n; i++)
                        if (ts[i] == (enum transport)t)
                                t = -1;
                if (t < 0) {
                        shoal_cli_fail(cli,
                                       "invalid --transports %s: expected tcp, iorpc and/or rdma, "
                                       "each once, separated by commas",
                                       list);
                        return -1;
                }
                if (t == TR_RDMA && !cfg->rdma_network) {
                        shoal_cli_fail(cli, "--transports rdma needs --rdma-network IF1[:IF2...]");
                        return -1;
                }
                ts[n++] = (enum transport)t;
                if (!p[len])
                        return n;
                p += len + 1;
        }
}

static void print_table(const struct result *rs, int n)
{
        printf("\n%-16s %8s %9s %9s %14s %14s  %s\n", "transport", "GiB/s", "p50 ms", "p99 ms",
               "client s/GiB", "server s/GiB", "carried by");
        for (int i = 0; i < n; i++) {
                const struct result *r = &rs[i];
                char scpu[32] = "n/a";
                if (r->server_cpu_known && r->gib > 0)
                        snprintf(scpu, sizeof(scpu), "%.2f", r->server_cpu / r->gib);
                printf("%-16s %8.2f %9.2f %9.2f %14.2f %14s  %s\n", tr_name[r->asked],
                       r->secs > 0 ? r->gib / r->secs : 0.0, r->p50_ms, r->p99_ms,
                       r->gib > 0 ? r->client_cpu / r->gib : 0.0, scpu, r->carried);
        }
        fflush(stdout);
}

int shoal_cmd_bench(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_BENCH, "bench", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        if (cli.npos != 1)
                return shoal_cli_fail(&cli, "expected STORAGE (see 'shoal bench --help')");
        struct opts o = {.threads = 16, .duration = DURATION_DEFAULT_NS};
        uint64_t threads = o.threads;
        if (cli.val[OPT_THREADS] &&
            (shoal_parse_u64(cli.val[OPT_THREADS], 4096, &threads) || !threads))
                return shoal_cli_fail(&cli, "invalid --threads %s: 1 to 4096",
                                      cli.val[OPT_THREADS]);
        o.threads = (unsigned)threads;
        if (cli.val[OPT_DURATION] && shoal_parse_duration(cli.val[OPT_DURATION], &o.duration))
                return shoal_cli_fail(&cli, "invalid --duration %s (e.g. 10s)",
                                      cli.val[OPT_DURATION]);
        if (cli.val[OPT_LINGER] && shoal_parse_duration(cli.val[OPT_LINGER], &o.linger))
                return shoal_cli_fail(&cli, "invalid --linger %s (e.g. 30s)", cli.val[OPT_LINGER]);
        if (cli.val[OPT_RAMP] && shoal_parse_duration(cli.val[OPT_RAMP], &o.ramp))
                return shoal_cli_fail(&cli, "invalid --ramp %s (e.g. 3s)", cli.val[OPT_RAMP]);
        o.warm = cli.val[OPT_WARM] != NULL;
        o.prefix = cli.val[OPT_PREFIX] ? cli.val[OPT_PREFIX] : "";
        struct shoal_node_config cfg;
        if (shoal_cli_node_config(&cli, cli.pos[0], &cfg))
                return 2;
        if (!cfg.cache_group)
                return shoal_cli_fail(&cli, "bench reads through a group: give --cache-group");
        o.group = cfg.cache_group;
        cfg.no_sharing = true;
        cfg.serve = false;
        cfg.group_checked_by_caller = true;
        cfg.cache_size = 0;
        enum transport ts[MAX_TRANSPORTS];
        int nts = parse_transports(&cli, &cfg, ts);
        if (nts < 0)
                return 2;
        struct result rs[MAX_TRANSPORTS];
        int ret = 0;
        for (int i = 0; i < nts; i++) {
                if (nts > 1)
                        printf("%s== %s\n", i ? "\n" : "", tr_name[ts[i]]);
                int code = bench_one(cfg, ts[i], &o, i == 0, &rs[i]);
                if (code && !rs[i].reqs)
                        return code; /* it did not run: no table */
                ret |= code;
        }
        if (nts > 1)
                print_table(rs, nts);
        return ret;
}
