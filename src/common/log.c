#include "common/log.h"

#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

int shoal_log_level_cur = SHOAL_LOG_INFO;
static int log_fd = STDERR_FILENO;
static char log_path[4096]; /* the file shoal_log_open opened, for a reopen; "" for stderr */

static const char *const level_names[] = {"ERROR", "WARNING", "INFO", "DEBUG", "TRACE"};

int shoal_log_open(const char *path)
{
        if (!path || !*path) {
                log_fd = STDERR_FILENO;
                log_path[0] = '\0';
                return 0;
        }
        if (strlen(path) >= sizeof(log_path))
                return -ENAMETOOLONG;
        int fd = open(path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        if (log_fd != STDERR_FILENO)
                close(log_fd);
        log_fd = fd;
        memcpy(log_path, path, strlen(path) + 1);
        return 0;
}

int shoal_log_reopen(void)
{
        if (!log_path[0])
                return 0;
        int fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
        if (fd < 0)
                return -errno;
        /* stderr follows when it was the log (a background process's): libraries and
         * sanitizers write there. */
        struct stat lf, ef;
        bool err_too = !fstat(log_fd, &lf) && !fstat(STDERR_FILENO, &ef) &&
                       lf.st_dev == ef.st_dev && lf.st_ino == ef.st_ino;
        /* Onto the same descriptor number: a line being written goes to one file or the
         * other, never to a closed descriptor. */
        int rc = dup3(fd, log_fd, O_CLOEXEC) < 0 ? -errno : 0;
        if (!rc && err_too)
                dup2(fd, STDERR_FILENO);
        close(fd);
        return rc;
}

int shoal_log_fd(void)
{
        return log_fd;
}

int shoal_log_parse_level(const char *s)
{
        static const char *const names[] = {"error", "warn", "info", "debug", "trace"};
        for (int i = 0; i < 5; i++)
                if (!strcasecmp(s, names[i]))
                        return i;
        if (!strcasecmp(s, "warning"))
                return SHOAL_LOG_WARN;
        if (s[0] >= '0' && s[0] <= '4' && s[1] == '\0')
                return s[0] - '0';
        return -1;
}

void shoal_log_set_level(int level)
{
        shoal_log_level_cur = level;
}

bool shoal_log_ratelimit_ok(long long *last_s)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
        long long now = ts.tv_sec;
        long long prev = __atomic_load_n(last_s, __ATOMIC_RELAXED);
        if (now == prev)
                return false;
        return __atomic_compare_exchange_n(last_s, &prev, now, false, __ATOMIC_RELAXED,
                                           __ATOMIC_RELAXED);
}

void shoal_log_write(int level, const char *mod, const char *fmt, ...)
{
        char line[2048];
        struct timeval tv;
        struct tm tm;
        gettimeofday(&tv, NULL);
        localtime_r(&tv.tv_sec, &tm);
        if (level < 0)
                level = 0;
        if (level > SHOAL_LOG_TRACE)
                level = SHOAL_LOG_TRACE;
        int n = snprintf(line, sizeof(line),
                         "%04d/%02d/%02d %02d:%02d:%02d.%06ld shoal[%d] <%s>: %s%s",
                         tm.tm_year + 1900, tm.tm_mon + 1, tm.tm_mday, tm.tm_hour, tm.tm_min,
                         tm.tm_sec, (long)tv.tv_usec, (int)getpid(), level_names[level],
                         mod ? mod : "", mod ? ": " : "");
        if (n < 0)
                return;
        if ((size_t)n >= sizeof(line))
                n = sizeof(line) - 1;
        va_list ap;
        va_start(ap, fmt);
        int m = vsnprintf(line + n, sizeof(line) - (size_t)n - 1, fmt, ap);
        va_end(ap);
        if (m < 0)
                m = 0;
        n += m;
        if ((size_t)n > sizeof(line) - 2)
                n = sizeof(line) - 2;
        line[n++] = '\n';
        ssize_t w = write(log_fd, line, (size_t)n);
        (void)w;
}
