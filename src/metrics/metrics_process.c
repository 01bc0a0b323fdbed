#include "metrics/metrics.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

/* Reads a small /proc file into BUF (NUL-terminated). Returns the length or -errno. */
static ssize_t read_small(const char *path, char *buf, size_t len)
{
        size_t got = 0;
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
                return -errno;
        while (got < len - 1) {
                ssize_t n = read(fd, buf + got, len - 1 - got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0) {
                        int err = errno;
                        close(fd);
                        return -err;
                }
                if (n == 0)
                        break;
                got += (size_t)n;
        }
        close(fd);
        buf[got] = '\0';
        return (ssize_t)got;
}

static double cpu_seconds(void)
{
        struct rusage ru;
        if (getrusage(RUSAGE_SELF, &ru))
                return 0;
        return (double)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) +
               (double)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6;
}

static uint64_t rss_bytes(void)
{
        char buf[256];
        unsigned long long size, resident;
        long page = sysconf(_SC_PAGESIZE);

        if (read_small("/proc/self/statm", buf, sizeof(buf)) <= 0 || page <= 0)
                return 0;
        if (sscanf(buf, "%llu %llu", &size, &resident) != 2)
                return 0;
        return (uint64_t)resident * (uint64_t)page;
}

static unsigned thread_count(void)
{
        /* /proc/self/status is a few KiB; Threads: sits in the first half. */
        char buf[8192];
        unsigned n;

        if (read_small("/proc/self/status", buf, sizeof(buf)) <= 0)
                return 0;
        const char *p = strstr(buf, "\nThreads:");
        if (!p || sscanf(p + 9, "%u", &n) != 1)
                return 0;
        return n;
}

static unsigned fd_count(void)
{
        unsigned n = 0;
        DIR *d = opendir("/proc/self/fd");
        if (!d)
                return 0;
        /* The directory's own descriptor is listed too; it is not one of ours. */
        int self = dirfd(d);
        struct dirent *e;
        while ((e = readdir(d))) {
                if (e->d_name[0] == '.')
                        continue;
                if (atoi(e->d_name) == self)
                        continue;
                n++;
        }
        closedir(d);
        return n;
}

void shoal_process_stats_read(struct shoal_process_stats *ps)
{
        ps->cpu_seconds = cpu_seconds();
        ps->rss_bytes = rss_bytes();
        ps->threads = thread_count();
        ps->open_fds = fd_count();
}
