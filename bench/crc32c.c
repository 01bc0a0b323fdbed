/* CRC32C throughput per core: every implementation the CPU runs, on one thread, over a 64 KiB
 * chunk (the unit every transport checks; hot in L2), a 4 MiB block and a 256 MiB buffer (cold:
 * memory bandwidth), plus shoal_chunk_crc (the active implementation) over a 4 MiB block the way
 * readers verify it. Prints GB/s (10^9 bytes per second) and the ratio to "sse4.2", the
 * single-stream code all transports used before. build-release/bench_crc32c [SECONDS per run,
 * default 0.2; best of 5 interleaved runs] docs/benchmarks.md has the numbers. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/block.h"
#include "common/crc32c.h"

static double now_s(void)
{
        struct timespec t;
        clock_gettime(CLOCK_MONOTONIC, &t);
        return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static volatile uint32_t sink;

/* GB/s of one run of SECS: IMPL (or shoal_chunk_crc when CHUNKED) over LEN bytes at P, back
 * to back. */
static double measure(int impl, bool chunked, const unsigned char *p, size_t len, double secs)
{
        size_t bytes = 0;
        uint32_t c = 0;
        double t0 = now_s(), t;
        do {
                if (chunked) {
                        struct shoal_block_id id;
                        memset(&id, (int)c, sizeof(id));
                        for (size_t off = 0; off < len; off += SHOAL_CHUNK_SIZE)
                                c ^= shoal_chunk_crc(&id, (uint32_t)(off / SHOAL_CHUNK_SIZE),
                                                     p + off, SHOAL_CHUNK_SIZE);
                } else {
                        c = shoal_crc32c_with(impl, c, p, len);
                }
                bytes += len;
                t = now_s();
        } while (t - t0 < secs);
        sink = c;
        return (double)bytes / (t - t0) / 1e9;
}

#define ROUNDS 5
#define NCOL   (SHOAL_CRC32C_NIMPL + 1) /* the last: shoal_chunk_crc */

int main(int argc, char **argv)
{
        double secs = argc > 1 ? atof(argv[1]) : 0.2;
        if (secs <= 0 || secs > 60) {
                fprintf(stderr, "usage: bench_crc32c [SECONDS per run, 0 < s <= 60]\n");
                return 2;
        }
        static const size_t sizes[] = {64u << 10, 4u << 20, 256u << 20};
        static const char *const what[] = {"64 KiB chunk", "4 MiB block", "256 MiB (cold)"};
        size_t max = sizes[2];
        unsigned char *buf = aligned_alloc(4096, max);
        if (!buf) {
                fprintf(stderr, "bench_crc32c: out of memory\n");
                return 1;
        }
        for (size_t i = 0; i < max; i++)
                buf[i] = (unsigned char)(i * 2654435761u >> 13);
        printf("crc32c, one thread; active implementation: %s\n",
               shoal_crc32c_impl_name(shoal_crc32c_impl_active()));
        printf("%-16s %-16s %8s %8s\n", "size", "implementation", "GB/s", "x sse4.2");
        /* Rounds interleave the implementations, best of ROUNDS each, so that load from other
         * processes on a shared machine hits all of them alike. */
        for (int s = 0; s < 3; s++) {
                double best[NCOL] = {0};
                for (int r = 0; r < ROUNDS; r++) {
                        for (int i = 0; i < NCOL; i++) {
                                if (i < SHOAL_CRC32C_NIMPL && !shoal_crc32c_impl_available(i))
                                        continue;
                                if (i == SHOAL_CRC32C_NIMPL && s != 1)
                                        continue;
                                double g = measure(i, i == SHOAL_CRC32C_NIMPL, buf, sizes[s], secs);
                                best[i] = g > best[i] ? g : best[i];
                        }
                }
                double base = best[SHOAL_CRC32C_SSE42];
                for (int i = 0; i < NCOL; i++)
                        if (best[i] > 0)
                                printf("%-16s %-16s %8.2f %8.2f\n", what[s],
                                       i < SHOAL_CRC32C_NIMPL ? shoal_crc32c_impl_name(i)
                                                              : "shoal_chunk_crc",
                                       best[i], base > 0 ? best[i] / base : 0.0);
        }
        free(buf);
        return 0;
}
