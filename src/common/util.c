#include "common/util.h"

#include <ctype.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

int shoal_parse_u64(const char *s, uint64_t max, uint64_t *out)
{
        if (!s || !isdigit((unsigned char)s[0]))
                return -EINVAL;
        errno = 0;
        char *end;
        unsigned long long v = strtoull(s, &end, 10);
        if (errno || *end != '\0' || v > max)
                return -EINVAL;
        *out = v;
        return 0;
}

int shoal_parse_size(const char *s, uint64_t default_unit, bool allow_neg1, int64_t *out)
{
        if (!s || !*s)
                return -EINVAL;
        if (!strcmp(s, "-1")) {
                if (!allow_neg1)
                        return -EINVAL;
                *out = -1;
                return 0;
        }
        if (!isdigit((unsigned char)s[0]))
                return -EINVAL;
        errno = 0;
        char *end;
        double v = strtod(s, &end);
        if (errno || end == s || v < 0)
                return -EINVAL;
        uint64_t unit = default_unit;
        if (*end) {
                switch (toupper((unsigned char)*end)) {
                case 'B':
                        unit = 1;
                        break;
                case 'K':
                        unit = SHOAL_KiB;
                        break;
                case 'M':
                        unit = SHOAL_MiB;
                        break;
                case 'G':
                        unit = SHOAL_GiB;
                        break;
                case 'T':
                        unit = SHOAL_GiB * 1024;
                        break;
                default:
                        return -EINVAL;
                }
                end++;
                if (unit != 1) {
                        if (*end == 'i' || *end == 'I')
                                end++;
                        if (*end == 'B' || *end == 'b')
                                end++;
                }
                if (*end)
                        return -EINVAL;
        }
        double bytes = v * (double)unit;
        if (bytes > 9.0e18)
                return -EINVAL;
        *out = (int64_t)bytes;
        return 0;
}

int shoal_parse_duration(const char *s, uint64_t *out_ns)
{
        if (!s || !*s)
                return -EINVAL;
        uint64_t total = 0;
        const char *p = s;
        bool any = false;
        while (*p) {
                if (!isdigit((unsigned char)*p) && *p != '.')
                        return -EINVAL;
                errno = 0;
                char *end;
                double v = strtod(p, &end);
                if (errno || end == p || v < 0)
                        return -EINVAL;
                double unit;
                if (!*end) {
                        if (any)
                                return -EINVAL; /* "1h30" is ambiguous */
                        unit = 1e9;
                } else if (!strncmp(end, "ms", 2)) {
                        unit = 1e6;
                        end += 2;
                } else if (!strncmp(end, "us", 2)) {
                        unit = 1e3;
                        end += 2;
                } else if (!strncmp(end, "ns", 2)) {
                        unit = 1;
                        end += 2;
                } else if (*end == 's') {
                        unit = 1e9;
                        end++;
                } else if (*end == 'm') {
                        unit = 60e9;
                        end++;
                } else if (*end == 'h') {
                        unit = 3600e9;
                        end++;
                } else if (*end == 'd') {
                        unit = 86400e9;
                        end++;
                } else {
                        return -EINVAL;
                }
                double ns = v * unit;
                if (ns > 1.0e18 || (double)total + ns > 1.0e18)
                        return -EINVAL;
                total += (uint64_t)ns;
                any = true;
                p = end;
        }
        *out_ns = total;
        return 0;
}

void shoal_hex(const void *data, size_t len, char *out)
{
        static const char digits[] = "0123456789abcdef";
        const unsigned char *d = data;
        for (size_t i = 0; i < len; i++) {
                out[2 * i] = digits[d[i] >> 4];
                out[2 * i + 1] = digits[d[i] & 15];
        }
        out[2 * len] = '\0';
}

void shoal_format_bytes(uint64_t bytes, char *out, size_t outlen)
{
        static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
        double v = (double)bytes;
        size_t u = 0;
        while (v >= 1024 && u + 1 < SHOAL_ARRAY_SIZE(units)) {
                v /= 1024;
                u++;
        }
        if (u == 0)
                snprintf(out, outlen, "%llu B", (unsigned long long)bytes);
        else
                snprintf(out, outlen, "%.1f %s", v, units[u]);
}

/* Appends "%u" UNIT when V is non-zero. */
static size_t dur_part(char *out, size_t outlen, size_t at, uint64_t v, const char *unit)
{
        if (!v || at >= outlen)
                return at;
        int n = snprintf(out + at, outlen - at, "%llu%s", (unsigned long long)v, unit);
        return n < 0 ? at : at + (size_t)n;
}

void shoal_format_duration(uint64_t ns, char *out, size_t outlen)
{
        if (!outlen)
                return;
        if (ns < SHOAL_NS_PER_US) {
                snprintf(out, outlen, "%lluns", (unsigned long long)ns);
                return;
        }
        if (ns < SHOAL_NS_PER_MS) {
                snprintf(out, outlen, "%.3gus", (double)ns / (double)SHOAL_NS_PER_US);
                return;
        }
        if (ns < SHOAL_NS_PER_SEC) {
                snprintf(out, outlen, "%.3gms", (double)ns / (double)SHOAL_NS_PER_MS);
                return;
        }
        uint64_t ms = ns / SHOAL_NS_PER_MS, s = ms / 1000;
        size_t at = dur_part(out, outlen, 0, s / 3600, "h");
        at = dur_part(out, outlen, at, s / 60 % 60, "m");
        if (at < outlen && ms % 60000) {
                unsigned sec = (unsigned)(s % 60), frac = (unsigned)(ms % 1000);
                if (frac)
                        snprintf(out + at, outlen - at, "%u.%03u", sec, frac);
                else
                        snprintf(out + at, outlen - at, "%u", sec);
                /* trailing zeros of the fraction say nothing */
                size_t len = strlen(out);
                while (frac && len && out[len - 1] == '0')
                        out[--len] = '\0';
                if (len + 1 < outlen) {
                        out[len] = 's';
                        out[len + 1] = '\0';
                }
        }
}

size_t shoal_strlcpy(char *out, const char *src, size_t outlen)
{
        size_t n = strlen(src);
        if (outlen) {
                size_t c = n < outlen - 1 ? n : outlen - 1;
                memcpy(out, src, c);
                out[c] = '\0';
        }
        return n;
}

int shoal_random_bytes(void *buf, size_t len)
{
        unsigned char *p = buf;
        while (len) {
                ssize_t n = getrandom(p, len, 0);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

uint64_t shoal_rand64(void)
{
        static _Thread_local uint64_t state;
        if (!state) {
                if (shoal_random_bytes(&state, sizeof(state)) || !state)
                        state = 0x9e3779b97f4a7c15ULL ^ shoal_now_ns();
        }
        uint64_t x = state;
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        state = x;
        return x * 0x2545f4914f6cdd1dULL;
}

void shoal_sleep_ns(uint64_t ns)
{
        struct timespec ts = shoal_ns_timespec(ns);
        while (nanosleep(&ts, &ts) == -1 && errno == EINTR)
                ;
}

int shoal_wait_fd(int fd, short events, uint64_t deadline)
{
        for (;;) {
                uint64_t now = shoal_now_ns();
                if (now >= deadline)
                        return -ETIMEDOUT;
                uint64_t ms = (deadline - now + SHOAL_NS_PER_MS - 1) / SHOAL_NS_PER_MS;
                struct pollfd p = {.fd = fd, .events = events};
                int n = poll(&p, 1, (int)SHOAL_MIN(ms, 60000ULL));
                if (n > 0)
                        return 0;
                if (n < 0 && errno != EINTR)
                        return -errno;
        }
}

int shoal_write_all(int fd, const void *buf, size_t len)
{
        const char *p = buf;
        while (len) {
                ssize_t n = write(fd, p, len);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

long shoal_pread_full(int fd, void *buf, size_t len, uint64_t off)
{
        char *p = buf;
        size_t done = 0;
        while (done < len) {
                ssize_t n = pread(fd, p + done, len - done, (off_t)(off + done));
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        return -errno;
                }
                if (n == 0)
                        break;
                done += (size_t)n;
        }
        return (long)done;
}

int shoal_hexval(int c)
{
        if (c >= '0' && c <= '9')
                return c - '0';
        if (c >= 'a' && c <= 'f')
                return c - 'a' + 10;
        if (c >= 'A' && c <= 'F')
                return c - 'A' + 10;
        return -1;
}
