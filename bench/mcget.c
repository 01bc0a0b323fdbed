/* mcget: N connections, each looping `get KEY` against memcached for a duration, so memcached's
 * serving of large values can be compared with shoal's transports in one run.
 *   mcget HOST PORT KEY VALUE_BYTES CONNECTIONS SECONDS
 * Prints: bytes seconds gib_per_s client_cpu_s p50_ms p99_ms */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static const char *host, *key;
static int port;
static size_t vlen;
static double seconds;
static unsigned long long total;
#define MAX_LAT (1 << 20)
static double *lat;
static unsigned long long nlat;

static double now(void)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int recv_full(int fd, char *buf, size_t len)
{
        size_t got = 0;
        while (got < len) {
                ssize_t n = recv(fd, buf + got, len - got, 0);
                if (n <= 0)
                        return -1;
                got += (size_t)n;
        }
        return 0;
}

static void *worker(void *arg)
{
        (void)arg;
        int fd = socket(AF_INET, SOCK_STREAM, 0);
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        inet_pton(AF_INET, host, &sa.sin_addr);
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
                perror("connect");
                exit(1);
        }
        char req[512], line[512];
        int rl = snprintf(req, sizeof(req), "get %s\r\n", key);
        size_t hdr = (size_t)snprintf(line, sizeof(line), "VALUE %s 0 %zu\r\n", key, vlen);
        size_t want = hdr + vlen + 2 + 5; /* data, \r\n, END\r\n */
        char *buf = malloc(want);
        unsigned long long mine = 0;
        double end = now() + seconds;
        while (now() < end) {
                double t0 = now();
                if (send(fd, req, (size_t)rl, 0) != rl || recv_full(fd, buf, want)) {
                        fprintf(stderr, "mcget: short answer\n");
                        exit(1);
                }
                if (memcmp(buf, line, hdr)) {
                        fprintf(stderr, "mcget: unexpected answer\n");
                        exit(1);
                }
                mine += vlen;
                unsigned long long k = __atomic_fetch_add(&nlat, 1, __ATOMIC_RELAXED);
                if (k < MAX_LAT)
                        lat[k] = now() - t0;
        }
        __atomic_fetch_add(&total, mine, __ATOMIC_RELAXED);
        free(buf);
        close(fd);
        return NULL;
}

static int cmp_double(const void *a, const void *b)
{
        double x = *(const double *)a, y = *(const double *)b;
        return x < y ? -1 : x > y;
}

int main(int argc, char **argv)
{
        if (argc != 7) {
                fprintf(stderr, "usage: mcget HOST PORT KEY VALUE_BYTES CONNECTIONS SECONDS\n");
                return 2;
        }
        host = argv[1];
        port = atoi(argv[2]);
        key = argv[3];
        vlen = strtoull(argv[4], NULL, 10);
        int n = atoi(argv[5]);
        seconds = atof(argv[6]);
        pthread_t *t = calloc((size_t)n, sizeof(*t));
        lat = calloc(MAX_LAT, sizeof(*lat));
        double t0 = now();
        for (int i = 0; i < n; i++)
                pthread_create(&t[i], NULL, worker, NULL);
        for (int i = 0; i < n; i++)
                pthread_join(t[i], NULL);
        double dt = now() - t0;
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        double cpu = (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec / 1e6 +
                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec / 1e6;
        unsigned long long m = nlat < MAX_LAT ? nlat : MAX_LAT;
        qsort(lat, m, sizeof(*lat), cmp_double);
        printf("%llu %.3f %.3f %.3f %.2f %.2f\n", total, dt, (double)total / dt / (1 << 30), cpu,
               m ? lat[m / 2] * 1e3 : 0.0, m ? lat[m * 99 / 100] * 1e3 : 0.0);
        return 0;
}
