#include "metrics/http.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define RING         (SHOAL_METRICS_WINDOW_S + 1)
#define GET_MAX_BODY (16u << 20)

struct shoal_metrics_http {
        int lfd;
        int wake_fd;
        pthread_t thread;
        char addr[80];
        char *labels;
        /* Owned by the server thread once it runs. */
        struct shoal_metrics_snap ring[RING];
        unsigned ring_head, ring_len; /* head: the next slot to write */
};

int shoal_metrics_addr_parse(const char *s, char *host, size_t hostlen, uint16_t *port)
{
        const char *colon, *h = s;
        size_t hl;
        uint64_t p;

        if (!s)
                return -EINVAL;
        if (s[0] == '[') {
                const char *close = strchr(s, ']');
                if (!close || close[1] != ':')
                        return -EINVAL;
                h = s + 1;
                hl = (size_t)(close - h);
                colon = close + 1;
        } else {
                colon = strrchr(s, ':');
                if (!colon || memchr(s, ':', (size_t)(colon - s)))
                        return -EINVAL; /* an IPv6 literal needs brackets */
                hl = (size_t)(colon - s);
        }
        if (hl >= hostlen || !colon[1] || shoal_parse_u64(colon + 1, 65535, &p))
                return -EINVAL;
        for (size_t i = 0; i < hl; i++)
                if (h[i] <= ' ' || h[i] == '/' || h[i] == '[' || h[i] == ']' || h[i] == 0x7f)
                        return -EINVAL;
        memcpy(host, h, hl);
        host[hl] = '\0';
        *port = (uint16_t)p;
        return 0;
}

/* Label values may hold only escaped backslashes, quotes and newlines (exposition 0.0.4). */
static void label_append(char *out, size_t cap, size_t *len, const char *name, const char *val)
{
        int n = snprintf(out + *len, cap - *len, "%s%s=\"", *len ? "," : "", name);
        if (n < 0 || (size_t)n >= cap - *len)
                return;
        *len += (size_t)n;
        for (const char *v = val ? val : ""; *v && *len + 4 < cap; v++) {
                if (*v == '\\' || *v == '"' || *v == '\n') {
                        out[(*len)++] = '\\';
                        out[(*len)++] = *v == '\n' ? 'n' : *v;
                } else {
                        out[(*len)++] = *v;
                }
        }
        if (*len + 2 < cap)
                out[(*len)++] = '"';
        out[*len] = '\0';
}

static int listen_on(const char *host, uint16_t port, char *bound, size_t boundlen)
{
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_PASSIVE | AI_NUMERICSERV};
        struct addrinfo *res;
        char ports[8];
        int rc, fd = -1, one = 1;

        snprintf(ports, sizeof(ports), "%u", port);
        rc = getaddrinfo(*host ? host : NULL, ports, &hints, &res);
        if (rc)
                return rc == EAI_SYSTEM ? -errno : -EADDRNOTAVAIL;
        rc = -EADDRNOTAVAIL;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0) {
                        rc = -errno;
                        continue;
                }
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
                if (!bind(fd, ai->ai_addr, ai->ai_addrlen) && !listen(fd, 16))
                        break;
                rc = -errno;
                close(fd);
                fd = -1;
        }
        freeaddrinfo(res);
        if (fd < 0)
                return rc;

        struct sockaddr_storage ss;
        socklen_t sl = sizeof(ss);
        char ip[INET6_ADDRSTRLEN] = "?";
        if (getsockname(fd, (struct sockaddr *)&ss, &sl) == 0) {
                if (ss.ss_family == AF_INET6) {
                        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
                        inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
                        snprintf(bound, boundlen, "[%s]:%u", ip, ntohs(a->sin6_port));
                } else {
                        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
                        inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
                        snprintf(bound, boundlen, "%s:%u", ip, ntohs(a->sin_port));
                }
        }
        return fd;
}

/* Waits until FD is ready for EVENTS or DEADLINE (monotonic ns) passes. 0, -ETIMEDOUT, -errno. */
static int wait_fd(int fd, short events, uint64_t deadline)
{
        for (;;) {
                uint64_t now = shoal_now_ns();
                if (now >= deadline)
                        return -ETIMEDOUT;
                struct pollfd p = {.fd = fd, .events = events};
                int ms = (int)((deadline - now + SHOAL_NS_PER_MS - 1) / SHOAL_NS_PER_MS);
                int n = poll(&p, 1, ms);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n > 0)
                        return 0;
        }
}

static int send_all_deadline(int fd, const char *p, size_t len, uint64_t deadline)
{
        while (len) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        int rc = wait_fd(fd, POLLOUT, deadline);
                        if (rc)
                                return rc;
                        continue;
                }
                if (n < 0)
                        return -errno;
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

/* ---- server ------------------------------------------------------------------------------ */

static void ring_tick(struct shoal_metrics_http *h)
{
        struct shoal_metrics_snap *slot = &h->ring[h->ring_head];
        struct shoal_metrics_snap fresh;

        if (shoal_metrics_snap_take(&fresh))
                return; /* out of memory: keep the old entry; quantiles use a wider window */
        if (h->ring_len == RING)
                shoal_metrics_snap_free(slot);
        else
                h->ring_len++;
        *slot = fresh;
        h->ring_head = (h->ring_head + 1) % RING;
}

/* The window start for a scrape at NOW: the newest entry at least WINDOW old, else the oldest. */
static const struct shoal_metrics_snap *ring_window_start(const struct shoal_metrics_http *h,
                                                          uint64_t now)
{
        const struct shoal_metrics_snap *best = NULL;
        uint64_t window = (uint64_t)SHOAL_METRICS_WINDOW_S * SHOAL_NS_PER_SEC;

        if (!h->ring_len)
                return NULL;
        unsigned oldest = (h->ring_head + RING - h->ring_len) % RING;
        for (unsigned i = 0; i < h->ring_len; i++) {
                const struct shoal_metrics_snap *s = &h->ring[(oldest + i) % RING];
                if (now >= s->taken_ns && now - s->taken_ns >= window)
                        best = s;
        }
        return best ? best : &h->ring[oldest];
}

static void respond(int fd, uint64_t deadline, int code, const char *reason, const char *ctype,
                    const char *body, size_t blen, bool head_only, const char *extra)
{
        char hdr[512];
        int n = snprintf(hdr, sizeof(hdr),
                         "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                         "Connection: close\r\n\r\n",
                         code, reason, ctype, blen, extra ? extra : "");
        if (n < 0 || (size_t)n >= sizeof(hdr))
                return;
        if (send_all_deadline(fd, hdr, (size_t)n, deadline))
                return;
        if (!head_only && blen)
                send_all_deadline(fd, body, blen, deadline);
}

static void respond_text(int fd, uint64_t deadline, int code, const char *reason, const char *msg,
                         const char *extra)
{
        respond(fd, deadline, code, reason, "text/plain; charset=utf-8", msg, strlen(msg), false,
                extra);
}

/* Reads the request head (up to the blank line) into BUF. Returns its length, or -errno
 * (-EMSGSIZE: larger than the buffer). The body of a GET is never read. */
static ssize_t read_head(int fd, char *buf, size_t cap, uint64_t deadline)
{
        size_t got = 0;
        for (;;) {
                ssize_t n = recv(fd, buf + got, cap - 1 - got, MSG_DONTWAIT);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0 && errno == EAGAIN) {
                        int rc = wait_fd(fd, POLLIN, deadline);
                        if (rc)
                                return rc;
                        continue;
                }
                if (n < 0)
                        return -errno;
                if (n == 0)
                        return -ECONNRESET;
                got += (size_t)n;
                buf[got] = '\0';
                if (strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n"))
                        return (ssize_t)got;
                if (got >= cap - 1)
                        return -EMSGSIZE;
        }
}

static void serve_one(struct shoal_metrics_http *h, int fd)
{
        char req[SHOAL_METRICS_HTTP_MAX_REQ + 1];
        uint64_t deadline = shoal_now_ns() + SHOAL_METRICS_HTTP_TIMEOUT_MS * SHOAL_NS_PER_MS;
        ssize_t n = read_head(fd, req, sizeof(req), deadline);
        if (n == -EMSGSIZE) {
                respond_text(fd, deadline, 431, "Request Header Fields Too Large",
                             "request head too large\n", NULL);
                return;
        }
        if (n < 0)
                return;

        /* Request line: METHOD SP TARGET SP HTTP/1.x */
        char method[8], target[256], version[16];
        if (sscanf(req, "%7[A-Z] %255[^ \r\n] %15[^ \r\n]", method, target, version) != 3 ||
            strncmp(version, "HTTP/1.", 7)) {
                respond_text(fd, deadline, 400, "Bad Request", "malformed request line\n", NULL);
                return;
        }
        bool head = !strcmp(method, "HEAD");
        if (!head && strcmp(method, "GET")) {
                respond_text(fd, deadline, 405, "Method Not Allowed", "only GET and HEAD\n",
                             "Allow: GET, HEAD\r\n");
                return;
        }
        bool stats = !strcmp(target, "/stats") || !strcmp(target, "/metrics?format=stats");
        bool prom = !stats && (!strcmp(target, "/metrics") || !strncmp(target, "/metrics?", 9));
        if (!stats && !prom) {
                respond_text(fd, deadline, 404, "Not Found",
                             "shoal metrics: GET /metrics (Prometheus) or /stats\n", NULL);
                return;
        }

        struct shoal_metrics_snap cur;
        if (shoal_metrics_snap_take(&cur)) {
                respond_text(fd, deadline, 503, "Service Unavailable", "out of memory\n", NULL);
                return;
        }
        const struct shoal_metrics_snap *prev = ring_window_start(h, cur.taken_ns);
        char *body = stats ? shoal_metrics_render_stats(&cur, prev)
                           : shoal_metrics_render_prometheus(&cur, prev, h->labels);
        shoal_metrics_snap_free(&cur);
        if (!body) {
                respond_text(fd, deadline, 503, "Service Unavailable", "out of memory\n", NULL);
                return;
        }
        respond(fd, deadline, 200, "OK",
                stats ? "text/plain; charset=utf-8" : "text/plain; version=0.0.4; charset=utf-8",
                body, strlen(body), head, NULL);
        free(body);
}

static void *http_main(void *arg)
{
        struct shoal_metrics_http *h = arg;
        uint64_t next_tick = shoal_now_ns();

        for (;;) {
                uint64_t now = shoal_now_ns();
                if (now >= next_tick) {
                        ring_tick(h);
                        next_tick += SHOAL_NS_PER_SEC;
                        /* After a stall (a slow client, a suspended process) tick from now on
                         * rather than catching up with a burst of identical snapshots. */
                        if (next_tick <= now)
                                next_tick = now + SHOAL_NS_PER_SEC;
                }
                struct pollfd p[2] = {{.fd = h->lfd, .events = POLLIN},
                                      {.fd = h->wake_fd, .events = POLLIN}};
                int ms = (int)((next_tick - SHOAL_MIN(now, next_tick) + SHOAL_NS_PER_MS - 1) /
                               SHOAL_NS_PER_MS);
                int n = poll(p, 2, ms);
                if (n < 0 && errno != EINTR) {
                        log_ratelimited(SHOAL_LOG_WARN, "metrics", "poll failed: %s",
                                        strerror(errno));
                        shoal_sleep_ns(100 * SHOAL_NS_PER_MS);
                        continue;
                }
                if (n <= 0)
                        continue;
                if (p[1].revents)
                        break;
                if (!(p[0].revents & POLLIN))
                        continue;
                int fd = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE)
                                log_ratelimited(SHOAL_LOG_WARN, "metrics", "accept failed: %s",
                                                strerror(errno));
                        continue;
                }
                serve_one(h, fd);
                /* Half-close first so a client still sending its head sees a clean end rather
                 * than a reset that could discard our answer. */
                shutdown(fd, SHUT_WR);
                close(fd);
        }
        return NULL;
}

struct shoal_metrics_http *shoal_metrics_http_start(const struct shoal_metrics_http_config *cfg,
                                                    char *err, size_t errlen)
{
        char host[256], labels[1024];
        size_t ll = 0;
        uint16_t port;
        int fd = -EADDRINUSE;

        struct shoal_metrics_http *h = calloc(1, sizeof(*h));
        if (!h) {
                snprintf(err, errlen, "out of memory");
                return NULL;
        }
        labels[0] = '\0';
        label_append(labels, sizeof(labels), &ll, "cache_group", cfg->cache_group);
        label_append(labels, sizeof(labels), &ll, "role", cfg->role);
        if (cfg->volume)
                label_append(labels, sizeof(labels), &ll, "volume", cfg->volume);
        h->labels = strdup(labels);
        if (!h->labels) {
                snprintf(err, errlen, "out of memory");
                goto out_free;
        }

        if (cfg->addr) {
                if (shoal_metrics_addr_parse(cfg->addr, host, sizeof(host), &port)) {
                        snprintf(err, errlen, "invalid --metrics %s: expected HOST:PORT",
                                 cfg->addr);
                        goto out_labels;
                }
                fd = listen_on(host, port, h->addr, sizeof(h->addr));
                if (fd < 0) {
                        snprintf(err, errlen, "cannot listen for metrics on %s: %s", cfg->addr,
                                 strerror(-fd));
                        goto out_labels;
                }
        } else {
                for (unsigned i = 0; i < SHOAL_METRICS_PORT_TRIES && fd < 0; i++) {
                        fd = listen_on(SHOAL_METRICS_DEFAULT_HOST,
                                       (uint16_t)(SHOAL_METRICS_DEFAULT_PORT + i), h->addr,
                                       sizeof(h->addr));
                        if (fd < 0 && fd != -EADDRINUSE)
                                break;
                }
                if (fd < 0) {
                        snprintf(err, errlen,
                                 "cannot listen for metrics on %s:%u..%u: %s (use --metrics "
                                 "HOST:PORT)",
                                 SHOAL_METRICS_DEFAULT_HOST, SHOAL_METRICS_DEFAULT_PORT,
                                 SHOAL_METRICS_DEFAULT_PORT + SHOAL_METRICS_PORT_TRIES - 1,
                                 strerror(-fd));
                        goto out_labels;
                }
        }
        h->lfd = fd;
        h->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (h->wake_fd < 0) {
                snprintf(err, errlen, "metrics: eventfd: %s", strerror(errno));
                goto out_close;
        }
        int rc = pthread_create(&h->thread, NULL, http_main, h);
        if (rc) {
                snprintf(err, errlen, "metrics: cannot start a thread: %s", strerror(rc));
                goto out_wake;
        }
        log_info("metrics", "prometheus metrics listening on %s", h->addr);
        return h;

out_wake:
        close(h->wake_fd);
out_close:
        close(h->lfd);
out_labels:
        free(h->labels);
out_free:
        free(h);
        return NULL;
}

const char *shoal_metrics_http_addr(const struct shoal_metrics_http *h)
{
        return h->addr;
}

void shoal_metrics_http_stop(struct shoal_metrics_http *h)
{
        uint64_t one = 1;

        if (!h)
                return;
        while (write(h->wake_fd, &one, sizeof(one)) < 0 && errno == EINTR)
                ;
        pthread_join(h->thread, NULL);
        close(h->wake_fd);
        close(h->lfd);
        for (unsigned i = 0; i < RING; i++)
                shoal_metrics_snap_free(&h->ring[i]);
        free(h->labels);
        free(h);
}

/* ---- client ------------------------------------------------------------------------------ */

static int connect_to(const char *host, uint16_t port, uint64_t deadline)
{
        struct addrinfo hints = {
                .ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
        struct addrinfo *res;
        char ports[8];
        int rc;

        snprintf(ports, sizeof(ports), "%u", port);
        rc = getaddrinfo(*host ? host : "127.0.0.1", ports, &hints, &res);
        if (rc)
                return rc == EAI_SYSTEM ? -errno : -EHOSTUNREACH;
        rc = -EHOSTUNREACH;
        for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
                int fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
                if (fd < 0) {
                        rc = -errno;
                        continue;
                }
                if (connect(fd, ai->ai_addr, ai->ai_addrlen) == 0) {
                        freeaddrinfo(res);
                        return fd;
                }
                rc = -errno;
                if (errno == EINPROGRESS) {
                        rc = wait_fd(fd, POLLOUT, deadline);
                        int soerr = 0;
                        socklen_t sl = sizeof(soerr);
                        if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl))
                                soerr = errno;
                        if (!rc && !soerr) {
                                freeaddrinfo(res);
                                return fd;
                        }
                        if (!rc)
                                rc = -soerr;
                }
                close(fd);
        }
        freeaddrinfo(res);
        return rc;
}

int shoal_metrics_http_get(const char *addr, const char *path, unsigned timeout_ms, char **body,
                           size_t *len, char *err, size_t errlen)
{
        char host[256], req[512];
        uint16_t port;
        uint64_t deadline = shoal_now_ns() + (uint64_t)timeout_ms * SHOAL_NS_PER_MS;
        char *buf = NULL;
        size_t got = 0, cap = 0;
        int rc;

        *body = NULL;
        *len = 0;
        if (shoal_metrics_addr_parse(addr, host, sizeof(host), &port)) {
                snprintf(err, errlen, "invalid address %s: expected HOST:PORT", addr);
                return -EINVAL;
        }
        int fd = connect_to(host, port, deadline);
        if (fd < 0) {
                snprintf(err, errlen, "cannot connect to %s: %s", addr, strerror(-fd));
                return fd;
        }
        int n = snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: shoal\r\nConnection: "
                         "close\r\n\r\n",
                         path, addr);
        if (n < 0 || (size_t)n >= sizeof(req)) {
                rc = -EINVAL;
                snprintf(err, errlen, "request too long");
                goto out_close;
        }
        rc = send_all_deadline(fd, req, (size_t)n, deadline);
        if (rc) {
                snprintf(err, errlen, "cannot send to %s: %s", addr, strerror(-rc));
                goto out_close;
        }
        for (;;) {
                if (cap - got < 4096) {
                        if (cap >= GET_MAX_BODY) {
                                rc = -EFBIG;
                                snprintf(err, errlen, "answer from %s is larger than %u bytes",
                                         addr, GET_MAX_BODY);
                                goto out_close;
                        }
                        size_t ncap = cap ? cap * 2 : 65536;
                        char *p = realloc(buf, ncap + 1);
                        if (!p) {
                                rc = -ENOMEM;
                                snprintf(err, errlen, "out of memory");
                                goto out_close;
                        }
                        buf = p;
                        cap = ncap;
                }
                ssize_t r = recv(fd, buf + got, cap - got, MSG_DONTWAIT);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0 && errno == EAGAIN) {
                        rc = wait_fd(fd, POLLIN, deadline);
                        if (rc) {
                                snprintf(err, errlen, "no answer from %s: %s", addr, strerror(-rc));
                                goto out_close;
                        }
                        continue;
                }
                if (r < 0) {
                        rc = -errno;
                        snprintf(err, errlen, "cannot read from %s: %s", addr, strerror(-rc));
                        goto out_close;
                }
                if (r == 0)
                        break;
                got += (size_t)r;
        }
        close(fd);
        if (!buf) {
                snprintf(err, errlen, "empty answer from %s", addr);
                return -EPROTO;
        }
        buf[got] = '\0';

        int code = 0;
        char *sep = strstr(buf, "\r\n\r\n");
        if (sscanf(buf, "HTTP/1.%*[01] %d", &code) != 1 || !sep) {
                snprintf(err, errlen, "%s did not answer with HTTP (is it a shoal metrics port?)",
                         addr);
                free(buf);
                return -EPROTO;
        }
        if (code != 200) {
                snprintf(err, errlen, "%s answered HTTP %d for %s", addr, code, path);
                free(buf);
                return -EPROTO;
        }
        sep += 4;
        *len = got - (size_t)(sep - buf);
        memmove(buf, sep, *len + 1);
        *body = buf;
        return 0;

out_close:
        close(fd);
        free(buf);
        return rc;
}
