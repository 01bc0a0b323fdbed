/* What the requester's per-request exposure costs (issue 11 finding 6,
 * src/transport/rdma_client.c): every RDMA read registers its buffer for remote writes on the
 * member's domain and closes the registration when the answer is back. This measures one fi_mr_reg
 * + fi_close per buffer size, on one core, for a provider and interface, and says what share of a
 * core that costs at a given read rate. Run it on the hardware you deploy on (verbs pins pages and
 * programs the NIC at each registration; tcp only fills a table):
 *
 *   build-release/bench_mr_reg IFACE [PROVIDER] [GB_PER_S]
 *     e.g. bench_mr_reg ib0 verbs 60        (PROVIDER default: $FI_PROVIDER, else verbs)
 *
 * For each size (64 KiB, 1 MiB, 4 MiB) it prints microseconds per register+close, the
 * registrations one core does per second, and the cores needed to expose GB_PER_S (default 60,
 * the seeds' per-client figure) in blocks of that size. Buffers are touched first (resident),
 * as the reader's block buffers are. Numbers only from a Release build. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "common/util.h"
#include "net/fabric.h"

int main(int argc, char **argv)
{
        if (argc < 2) {
                fprintf(stderr, "usage: bench_mr_reg IFACE [PROVIDER] [GB_PER_S]\n");
                return 2;
        }
        const char *prov = shoal_fab_provider(argc > 2 ? argv[2] : NULL);
        double gbps = argc > 3 ? atof(argv[3]) : 60.0;
        struct shoal_fab f;
        char err[512];
        if (shoal_fab_open(&f, prov, argv[1], err, sizeof(err))) {
                fprintf(stderr, "%s\n", err);
                return 1;
        }
        struct fid_domain *dom;
        if (shoal_fab_domain_open(&f, &dom))
                return 1;
        const size_t max = 4u << 20;
        char *buf = mmap(NULL, max, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (buf == MAP_FAILED)
                return 1;
        memset(buf, 1, max);
        shoal_fab_dontfork(buf, max);
        printf("provider %s, interface %s (%s), mr_mode 0x%llx\n", f.prov, f.ifname, f.ip,
               (unsigned long long)f.mr_mode);
        printf("%10s %14s %14s %22s\n", "size", "us/reg+close", "regs/s/core",
               "cores at GB/s given");
        const size_t sizes[] = {64u << 10, 1u << 20, 4u << 20};
        for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
                size_t len = sizes[s];
                uint64_t n = 0, t0 = shoal_now_ns(), t;
                do {
                        struct fid_mr *mr;
                        if (shoal_fab_mr_reg_dom(&f, dom, buf, len, FI_REMOTE_WRITE, false, &mr)) {
                                fprintf(stderr, "registration failed\n");
                                return 1;
                        }
                        shoal_fab_mr_close(&f, mr, len);
                        n++;
                        t = shoal_now_ns();
                } while (t - t0 < 1000000000ULL);
                double us = (double)(t - t0) / 1e3 / (double)n;
                double per_s = 1e6 / us;
                double need = gbps * 1e9 / (double)len; /* registrations per second needed */
                printf("%9zuK %14.2f %14.0f %22.3f\n", len >> 10, us, per_s, need / per_s);
        }
        munmap(buf, max);
        fi_close(&dom->fid);
        shoal_fab_close(&f);
        return 0;
}
