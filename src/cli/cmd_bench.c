/* shoal bench STORAGE --cache-group G — read benchmark through the group without FUSE [C5]:
 * N threads read whole blocks of the objects under --prefix from their owners over the chosen
 * transport (TCP pool, or IORPC with --use-iorpc), for --duration. Prints progress each second,
 * then throughput, latency percentiles and client CPU seconds per GiB. Server CPU is measured by
 * bench/ scripts from the members' processes. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "cli/cli.h"
#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "net/remote.h"
#include "store/store.h"

#define MAX_BLOCKS  200000
#define MAX_SAMPLES 200000

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
        uint64_t deadline;
        uint64_t bytes; /* atomics */
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
        while (shoal_now_ns() < b->deadline) {
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

static int run_threads(struct bench *b, unsigned nthreads, bool warm, struct worker *ws)
{
        for (unsigned t = 0; t < nthreads; t++) {
                ws[t].b = b;
                ws[t].idx = t;
                ws[t].nthreads = nthreads;
                ws[t].warm_only = warm;
                ws[t].nlat = 0;
                if (pthread_create(&ws[t].th, NULL, worker_main, &ws[t]))
                        return -EAGAIN;
        }
        return 0;
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
        uint64_t threads = 16, duration = 10ULL * 1000000000ULL, linger = 0;
        if (cli.val[OPT_THREADS] &&
            (shoal_parse_u64(cli.val[OPT_THREADS], 4096, &threads) || !threads))
                return shoal_cli_fail(&cli, "invalid --threads %s: 1 to 4096",
                                      cli.val[OPT_THREADS]);
        if (cli.val[OPT_DURATION] && shoal_parse_duration(cli.val[OPT_DURATION], &duration))
                return shoal_cli_fail(&cli, "invalid --duration %s (e.g. 10s)",
                                      cli.val[OPT_DURATION]);
        if (cli.val[OPT_LINGER] && shoal_parse_duration(cli.val[OPT_LINGER], &linger))
                return shoal_cli_fail(&cli, "invalid --linger %s (e.g. 30s)", cli.val[OPT_LINGER]);
        struct shoal_node_config cfg;
        if (shoal_cli_node_config(&cli, cli.pos[0], &cfg))
                return 2;
        if (!cfg.cache_group)
                return shoal_cli_fail(&cli, "bench reads through a group: give --cache-group");
        cfg.no_sharing = true;
        cfg.serve = false;
        cfg.cache_size = 0;
        char err[1024];
        int code;
        struct bench b = {0};
        b.node = shoal_node_start(&cfg, err, sizeof(err), &code);
        if (!b.node) {
                fprintf(stderr, "shoal bench: %s\n", err);
                return code;
        }
        int ret = 1;
        const char *prefix = cli.val[OPT_PREFIX] ? cli.val[OPT_PREFIX] : "";
        rc = shoal_store_list_objects(b.node->store, prefix, MAX_BLOCKS, &b.objs, &b.nobjs);
        if (rc < 0) {
                fprintf(stderr, "shoal bench: listing %s failed: %s\n", prefix, strerror(-rc));
                goto out;
        }
        for (size_t i = 0; i < b.nobjs; i++)
                b.nblocks += shoal_block_count(b.objs[i].size, b.node->vol.block_size);
        if (!b.nblocks) {
                fprintf(stderr, "shoal bench: no objects under '%s'\n", prefix);
                goto out;
        }
        if (b.nblocks > MAX_BLOCKS)
                b.nblocks = MAX_BLOCKS;
        b.blocks = calloc(b.nblocks, sizeof(*b.blocks));
        struct worker *ws = calloc(threads, sizeof(*ws));
        if (!b.blocks || !ws) {
                free(ws);
                goto out;
        }
        size_t k = 0;
        for (size_t i = 0; i < b.nobjs && k < b.nblocks; i++)
                for (uint32_t j = 0;
                     j < shoal_block_count(b.objs[i].size, b.node->vol.block_size) && k < b.nblocks;
                     j++)
                        b.blocks[k++] = (struct bblock){.obj = (uint32_t)i, .index = j};
        for (unsigned t = 0; t < threads; t++) {
                ws[t].buf = aligned_alloc(4096, b.node->vol.block_size);
                ws[t].lat = malloc(sizeof(uint64_t) * (MAX_SAMPLES / threads + 1));
                if (!ws[t].buf || !ws[t].lat) {
                        fprintf(stderr, "shoal bench: out of memory\n");
                        goto out_workers;
                }
                char rerr[256];
                if (shoal_remote_register(b.node->remote, ws[t].buf, b.node->vol.block_size, rerr,
                                          sizeof(rerr)))
                        fprintf(stderr, "shoal bench: %s (RDMA reads go through bounce buffers)\n",
                                rerr);
        }
        printf("bench: %zu objects, %zu blocks of %u KiB, %llu threads, %s\n", b.nobjs, b.nblocks,
               b.node->vol.block_size / 1024, (unsigned long long)threads,
               cfg.use_iorpc ? "iorpc" : "tcp pool");
        if (cli.val[OPT_WARM]) {
                run_threads(&b, (unsigned)threads, true, ws);
                for (unsigned t = 0; t < threads; t++)
                        pthread_join(ws[t].th, NULL);
                printf("warm: %zu blocks read once, %llu errors\n", b.nblocks,
                       (unsigned long long)b.errors);
                b.bytes = b.errors = b.reqs = 0;
        }
        double cpu0 = cpu_seconds();
        uint64_t t0 = shoal_now_ns();
        b.deadline = t0 + duration;
        if (run_threads(&b, (unsigned)threads, false, ws)) {
                fprintf(stderr, "shoal bench: cannot start threads\n");
                goto out_workers;
        }
        uint64_t last = 0;
        for (unsigned s = 1; shoal_now_ns() < b.deadline; s++) {
                uint64_t next = t0 + (uint64_t)s * 1000000000ULL;
                if (next > b.deadline)
                        next = b.deadline;
                while (shoal_now_ns() < next)
                        shoal_sleep_ns(SHOAL_MIN(next - shoal_now_ns(), 100000000ULL));
                uint64_t now_b = __atomic_load_n(&b.bytes, __ATOMIC_RELAXED);
                char pre[64];
                snprintf(pre, sizeof(pre), "t=%us %.2f GiB/s, ", s,
                         (double)(now_b - last) / (double)SHOAL_GiB);
                print_conns(&b, pre);
                last = now_b;
        }
        for (unsigned t = 0; t < threads; t++)
                pthread_join(ws[t].th, NULL);
        double secs = (double)(shoal_now_ns() - t0) / 1e9;
        double cpu = cpu_seconds() - cpu0;
        size_t nlat = 0;
        for (unsigned t = 0; t < threads; t++)
                nlat += ws[t].nlat;
        uint64_t *all = malloc(sizeof(uint64_t) * (nlat ? nlat : 1));
        size_t m = 0;
        for (unsigned t = 0; all && t < threads; t++)
                for (size_t i = 0; i < ws[t].nlat; i++)
                        all[m++] = ws[t].lat[i];
        if (all && m)
                qsort(all, m, sizeof(uint64_t), cmp_u64);
        double gib = (double)b.bytes / (double)SHOAL_GiB;
        printf("result: %.2f GiB in %.1f s = %.2f GiB/s, %llu requests, %llu errors, p50 %.2f ms, "
               "p99 %.2f ms, client cpu %.2f s/GiB\n",
               gib, secs, gib / secs, (unsigned long long)b.reqs, (unsigned long long)b.errors,
               m ? (double)all[m / 2] / 1e6 : 0.0, m ? (double)all[m * 99 / 100] / 1e6 : 0.0,
               gib > 0 ? cpu / gib : 0.0);
        fflush(stdout);
        free(all);
        for (uint64_t end = shoal_now_ns() + linger; shoal_now_ns() < end;) {
                shoal_sleep_ns(1000000000ULL);
                print_conns(&b, "idle: ");
        }
        ret = b.errors ? 1 : 0;
out_workers:
        for (unsigned t = 0; t < threads; t++) {
                free(ws[t].buf);
                free(ws[t].lat);
        }
        free(ws);
out:
        free(b.blocks);
        free(b.objs);
        shoal_node_stop(b.node);
        return ret;
}
