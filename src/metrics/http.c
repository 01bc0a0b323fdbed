#include "metrics/http.h"

#include <arpa/inet.h>
#include <ctype.h>
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
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "metrics/http_parse.h"
#include "metrics/metrics.h"

#define RING          (SHOAL_METRICS_WINDOW_S + 1)
#define GET_MAX_BODY  (16u << 20)
#define POLL_RETRY_NS (100 * SHOAL_NS_PER_MS) /* after a failed poll */

struct http_client;

struct shoal_metrics_http {
        int lfd;
        int wake_fd;
        pthread_t thread;
        char addr[80];
        char *labels;
        /* Names a request's Host may carry besides IP literals and localhost. */
        char hosts[SHOAL_METRICS_HTTP_MAX_HOSTS][256];
        unsigned n_hosts;
        uint64_t client_timeout_ns;  /* from accept to the answer's last byte */
        struct http_client *clients; /* SHOAL_METRICS_HTTP_MAX_CLIENTS */
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

/* One connection of the endpoint: its request head is read, then its whole answer (head and
 * body, rendered at once) written, both without blocking, before its deadline. */
struct http_client {
        int fd; /* -1: a free place */
        uint64_t deadline;
        size_t in_len;
        char in[SHOAL_METRICS_HTTP_MAX_REQ + 1];
        char *out; /* the answer, once the head was read */
        size_t out_len, out_sent;
};

static void client_close(struct http_client *c)
{
        /* Half-close first so a client still sending its head sees a clean end rather than a
         * reset that could discard our answer. */
        shutdown(c->fd, SHUT_WR);
        close(c->fd);
        c->fd = -1;
        free(c->out);
        c->out = NULL;
}

/* Makes C's answer: a status line, the headers, and BODY (not sent for HEAD). */
static void answer(struct http_client *c, int code, const char *reason, const char *ctype,
                   const char *body, size_t blen, bool head_only, const char *extra)
{
        char hdr[512];
        int n = snprintf(hdr, sizeof(hdr),
                         "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s"
                         "Connection: close\r\n\r\n",
                         code, reason, ctype, blen, extra ? extra : "");
        if (n < 0 || (size_t)n >= sizeof(hdr))
                n = 0;
        size_t send_body = head_only ? 0 : blen;
        c->out = malloc((size_t)n + send_body + 1);
        if (!c->out) {
                c->out_len = 0; /* closed without an answer: out of memory */
                return;
        }
        memcpy(c->out, hdr, (size_t)n);
        if (send_body)
                memcpy(c->out + n, body, send_body);
        c->out_len = (size_t)n + send_body;
        c->out_sent = 0;
}

static void answer_text(struct http_client *c, int code, const char *reason, const char *msg,
                        const char *extra)
{
        answer(c, code, reason, "text/plain; charset=utf-8", msg, strlen(msg), false, extra);
}

/* The request head of C is complete: decide the answer. */
static void handle_request(struct shoal_metrics_http *h, struct http_client *c)
{
        struct shoal_http_request req;
        char host[300];
        int code = shoal_http_parse_request(c->in, &req);
        if (code == 400) {
                answer_text(c, 400, "Bad Request", "malformed request line\n", NULL);
                return;
        }
        /* Host before method and target: a rebinding page learns nothing from 404 or 405. */
        int hv = shoal_http_header_value(c->in, "Host", host, sizeof(host));
        if (hv < 0) {
                answer_text(c, 400, "Bad Request", "malformed Host header\n", NULL);
                return;
        }
        if (hv > 0 && !shoal_http_host_allowed(host, h->hosts, h->n_hosts)) {
                answer_text(c, 403, "Forbidden",
                            "Host must be an IP address, localhost, this machine's name or one "
                            "in SHOAL_METRICS_HOSTS\n",
                            NULL);
                return;
        }
        if (code == 405) {
                answer_text(c, 405, "Method Not Allowed", "only GET and HEAD\n",
                            "Allow: GET, HEAD\r\n");
                return;
        }
        if (code) {
                answer_text(c, 404, "Not Found",
                            "shoal metrics: GET /metrics (Prometheus) or /stats\n", NULL);
                return;
        }
        bool head = req.head, stats = req.route == SHOAL_HTTP_ROUTE_STATS;
        struct shoal_metrics_snap cur;
        if (shoal_metrics_snap_take(&cur)) {
                answer_text(c, 503, "Service Unavailable", "out of memory\n", NULL);
                return;
        }
        const struct shoal_metrics_snap *prev = ring_window_start(h, cur.taken_ns);
        char *body = stats ? shoal_metrics_render_stats(&cur, prev)
                           : shoal_metrics_render_prometheus(&cur, prev, h->labels);
        shoal_metrics_snap_free(&cur);
        if (!body) {
                answer_text(c, 503, "Service Unavailable", "out of memory\n", NULL);
                return;
        }
        answer(c, 200, "OK",
               stats ? "text/plain; charset=utf-8" : "text/plain; version=0.0.4; charset=utf-8",
               body, strlen(body), head, NULL);
        free(body);
}

/* C is readable: takes what arrived; once the head is complete (or too large), the answer. */
static void client_read(struct shoal_metrics_http *h, struct http_client *c)
{
        size_t cap = sizeof(c->in) - 1;
        ssize_t n = recv(c->fd, c->in + c->in_len, cap - c->in_len, MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n <= 0) {
                client_close(c);
                return;
        }
        c->in_len += (size_t)n;
        c->in[c->in_len] = '\0';
        if (shoal_http_head_complete(c->in))
                handle_request(h, c);
        else if (c->in_len == cap)
                answer_text(c, 431, "Request Header Fields Too Large", "request head too large\n",
                            NULL);
        else
                return;
        if (!c->out)
                client_close(c);
}

/* C is writable: sends what the socket takes; closes once the answer is out. */
static void client_write(struct http_client *c)
{
        ssize_t n = send(c->fd, c->out + c->out_sent, c->out_len - c->out_sent,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return;
        if (n < 0) {
                client_close(c);
                return;
        }
        c->out_sent += (size_t)n;
        if (c->out_sent == c->out_len)
                client_close(c);
}

/* A place for a new connection: a free one, else the one closest to its deadline (a slow client
 * gives way to a new one rather than locking the endpoint). */
static struct http_client *client_slot(struct shoal_metrics_http *h)
{
        struct http_client *oldest = NULL;
        for (unsigned i = 0; i < SHOAL_METRICS_HTTP_MAX_CLIENTS; i++) {
                struct http_client *c = &h->clients[i];
                if (c->fd < 0)
                        return c;
                if (!oldest || c->deadline < oldest->deadline)
                        oldest = c;
        }
        log_ratelimited(SHOAL_LOG_INFO, "metrics",
                        "%u clients at once: closing the slowest for a new one",
                        SHOAL_METRICS_HTTP_MAX_CLIENTS);
        client_close(oldest);
        return oldest;
}

static void accept_clients(struct shoal_metrics_http *h)
{
        for (;;) {
                int fd = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE)
                                log_ratelimited(SHOAL_LOG_WARN, "metrics", "accept failed: %s",
                                                strerror(errno));
                        return;
                }
                struct http_client *c = client_slot(h);
                c->fd = fd;
                c->in_len = 0;
                c->deadline = shoal_now_ns() + h->client_timeout_ns;
        }
}

/* The endpoint's thread: the window ring's tick and every connection, in one poll loop; no
 * connection is ever waited on. */
static void *http_main(void *arg)
{
        struct shoal_metrics_http *h = arg;
        struct pollfd p[2 + SHOAL_METRICS_HTTP_MAX_CLIENTS];
        struct http_client *who[2 + SHOAL_METRICS_HTTP_MAX_CLIENTS];
        uint64_t next_tick = shoal_now_ns();

        for (;;) {
                uint64_t now = shoal_now_ns();
                if (now >= next_tick) {
                        ring_tick(h);
                        next_tick += SHOAL_NS_PER_SEC;
                        /* After a stall (a suspended process) tick from now on rather than
                         * catching up with a burst of identical snapshots. */
                        if (next_tick <= now)
                                next_tick = now + SHOAL_NS_PER_SEC;
                }
                uint64_t wake = next_tick;
                nfds_t n = 0;
                p[n++] = (struct pollfd){.fd = h->wake_fd, .events = POLLIN};
                p[n++] = (struct pollfd){.fd = h->lfd, .events = POLLIN};
                for (unsigned i = 0; i < SHOAL_METRICS_HTTP_MAX_CLIENTS; i++) {
                        struct http_client *c = &h->clients[i];
                        if (c->fd < 0)
                                continue;
                        if (now >= c->deadline) {
                                client_close(c);
                                continue;
                        }
                        wake = SHOAL_MIN(wake, c->deadline);
                        who[n] = c;
                        p[n++] = (struct pollfd){.fd = c->fd, .events = c->out ? POLLOUT : POLLIN};
                }
                int ms = (int)((wake - SHOAL_MIN(now, wake) + SHOAL_NS_PER_MS - 1) /
                               SHOAL_NS_PER_MS);
                int rc = poll(p, n, ms);
                if (rc < 0 && errno != EINTR) {
                        log_ratelimited(SHOAL_LOG_WARN, "metrics", "poll failed: %s",
                                        strerror(errno));
                        shoal_sleep_ns(POLL_RETRY_NS);
                        continue;
                }
                if (rc <= 0)
                        continue;
                if (p[0].revents)
                        break;
                for (nfds_t i = 2; i < n; i++) {
                        struct http_client *c = who[i];
                        if (!p[i].revents || c->fd < 0)
                                continue;
                        if (c->out)
                                client_write(c);
                        else
                                client_read(h, c);
                }
                if (p[1].revents & POLLIN)
                        accept_clients(h);
        }
        for (unsigned i = 0; i < SHOAL_METRICS_HTTP_MAX_CLIENTS; i++)
                if (h->clients[i].fd >= 0)
                        client_close(&h->clients[i]);
        return NULL;
}

static bool host_name_valid(const char *n, size_t len)
{
        if (!len || len >= 256)
                return false;
        for (size_t i = 0; i < len; i++)
                if (!isalnum((unsigned char)n[i]) && n[i] != '-' && n[i] != '.' && n[i] != '_')
                        return false;
        return true;
}

static void host_add(struct shoal_metrics_http *h, const char *n, size_t len)
{
        if (h->n_hosts < SHOAL_METRICS_HTTP_MAX_HOSTS && host_name_valid(n, len)) {
                memcpy(h->hosts[h->n_hosts], n, len);
                h->hosts[h->n_hosts++][len] = '\0';
        }
}

/* The names a Host header may carry besides IP literals and localhost: this machine's name, the
 * name --metrics was given (if a name), and SHOAL_METRICS_HOSTS (comma-separated). */
static int hosts_init(struct shoal_metrics_http *h, const char *addr, char *err, size_t errlen)
{
        char name[256];
        uint16_t port;
        if (!gethostname(name, sizeof(name) - 1)) {
                name[sizeof(name) - 1] = '\0';
                host_add(h, name, strlen(name));
        }
        if (addr && !shoal_metrics_addr_parse(addr, name, sizeof(name), &port))
                host_add(h, name, strlen(name));
        const char *env = shoal_config_env()->metrics_hosts;
        for (const char *p = env; p && *p;) {
                const char *end = strchr(p, ',');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                while (len && (*p == ' ' || *p == '\t'))
                        p++, len--;
                while (len && (p[len - 1] == ' ' || p[len - 1] == '\t'))
                        len--;
                if (len && !host_name_valid(p, len)) {
                        snprintf(err, errlen,
                                 "invalid SHOAL_METRICS_HOSTS: '%.*s' is not a host name",
                                 (int)SHOAL_MIN(len, 64), p);
                        return -EINVAL;
                }
                if (len)
                        host_add(h, p, len);
                p = end ? end + 1 : NULL;
        }
        return 0;
}

/* H's labels (cache_group, role and volume) and its client slots, all free. */
static int labels_and_slots(struct shoal_metrics_http *h,
                            const struct shoal_metrics_http_config *cfg, char *err, size_t errlen)
{
        char labels[1024];
        size_t ll = 0;
        labels[0] = '\0';
        label_append(labels, sizeof(labels), &ll, "cache_group", cfg->cache_group);
        label_append(labels, sizeof(labels), &ll, "role", cfg->role);
        if (cfg->volume)
                label_append(labels, sizeof(labels), &ll, "volume", cfg->volume);
        h->labels = strdup(labels);
        h->clients = calloc(SHOAL_METRICS_HTTP_MAX_CLIENTS, sizeof(*h->clients));
        if (!h->labels || !h->clients) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        for (unsigned i = 0; i < SHOAL_METRICS_HTTP_MAX_CLIENTS; i++)
                h->clients[i].fd = -1;
        return 0;
}

/* The listening socket on --metrics ADDR, or on the default host's first free port from the
 * default one; its address goes to H->addr. Returns the fd, or a negative errno with ERR. */
static int listen_where(struct shoal_metrics_http *h, const char *addr, char *err, size_t errlen)
{
        char host[256];
        uint16_t port;
        int fd = -EADDRINUSE;
        if (addr) {
                if (shoal_metrics_addr_parse(addr, host, sizeof(host), &port)) {
                        snprintf(err, errlen, "invalid --metrics %s: expected HOST:PORT", addr);
                        return -EINVAL;
                }
                fd = listen_on(host, port, h->addr, sizeof(h->addr));
                if (fd < 0)
                        snprintf(err, errlen, "cannot listen for metrics on %s: %s", addr,
                                 strerror(-fd));
                return fd;
        }
        for (unsigned i = 0; i < SHOAL_METRICS_PORT_TRIES && fd < 0; i++) {
                fd = listen_on(SHOAL_METRICS_DEFAULT_HOST,
                               (uint16_t)(SHOAL_METRICS_DEFAULT_PORT + i), h->addr,
                               sizeof(h->addr));
                if (fd < 0 && fd != -EADDRINUSE)
                        break;
        }
        if (fd < 0)
                snprintf(err, errlen,
                         "cannot listen for metrics on %s:%u..%u: %s (use --metrics HOST:PORT)",
                         SHOAL_METRICS_DEFAULT_HOST, SHOAL_METRICS_DEFAULT_PORT,
                         SHOAL_METRICS_DEFAULT_PORT + SHOAL_METRICS_PORT_TRIES - 1, strerror(-fd));
        return fd;
}

/* The wake-up eventfd and the server thread. */
static int start_thread(struct shoal_metrics_http *h, char *err, size_t errlen)
{
        h->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
        if (h->wake_fd < 0) {
                int e = errno;
                snprintf(err, errlen, "metrics: eventfd: %s", strerror(e));
                return -e;
        }
        int rc = shoal_thread_create(&h->thread, http_main, h);
        if (rc) {
                snprintf(err, errlen, "metrics: cannot start a thread: %s", strerror(rc));
                close(h->wake_fd);
                return -rc;
        }
        return 0;
}

struct shoal_metrics_http *shoal_metrics_http_start(const struct shoal_metrics_http_config *cfg,
                                                    char *err, size_t errlen)
{
        struct shoal_metrics_http *h = calloc(1, sizeof(*h));
        if (!h) {
                snprintf(err, errlen, "out of memory");
                return NULL;
        }
        h->client_timeout_ns =
                shoal_config_pick(0, shoal_config_env()->metrics_client_timeout_ns,
                                  (uint64_t)SHOAL_METRICS_HTTP_TIMEOUT_MS * SHOAL_NS_PER_MS);
        if (labels_and_slots(h, cfg, err, errlen) || hosts_init(h, cfg->addr, err, errlen))
                goto out_labels;
        h->lfd = listen_where(h, cfg->addr, err, errlen);
        if (h->lfd < 0)
                goto out_labels;
        if (start_thread(h, err, errlen))
                goto out_close;
        log_info("metrics", "prometheus metrics listening on %s", h->addr);
        return h;

out_close:
        close(h->lfd);
out_labels:
        free(h->clients);
        free(h->labels);
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
        free(h->clients);
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

/* Reads FD until the peer closes it into *BUF (NUL-terminated, *GOT bytes; the caller frees
 * it, also on failure). Returns 0 or a negative errno with ERR. */
static int read_to_close(int fd, const char *addr, uint64_t deadline, char **buf, size_t *got,
                         char *err, size_t errlen)
{
        size_t cap = 0;
        for (;;) {
                if (cap - *got < 4096) {
                        if (cap >= GET_MAX_BODY) {
                                snprintf(err, errlen, "answer from %s is larger than %u bytes",
                                         addr, GET_MAX_BODY);
                                return -EFBIG;
                        }
                        size_t ncap = cap ? cap * 2 : 65536;
                        char *p = realloc(*buf, ncap + 1);
                        if (!p) {
                                snprintf(err, errlen, "out of memory");
                                return -ENOMEM;
                        }
                        *buf = p;
                        cap = ncap;
                }
                ssize_t r = recv(fd, *buf + *got, cap - *got, MSG_DONTWAIT);
                if (r < 0 && errno == EINTR)
                        continue;
                if (r < 0 && errno == EAGAIN) {
                        int rc = wait_fd(fd, POLLIN, deadline);
                        if (rc) {
                                snprintf(err, errlen, "no answer from %s: %s", addr, strerror(-rc));
                                return rc;
                        }
                        continue;
                }
                if (r < 0) {
                        int rc = -errno;
                        snprintf(err, errlen, "cannot read from %s: %s", addr, strerror(-rc));
                        return rc;
                }
                if (r == 0)
                        break;
                *got += (size_t)r;
        }
        if (!*buf) {
                snprintf(err, errlen, "empty answer from %s", addr);
                return -EPROTO;
        }
        (*buf)[*got] = '\0';
        return 0;
}

/* Sends GET PATH to ADDR over FD and reads the whole answer into *BUF (*GOT bytes). */
static int exchange(int fd, const char *addr, const char *path, uint64_t deadline, char **buf,
                    size_t *got, char *err, size_t errlen)
{
        char req[512];
        int n = snprintf(req, sizeof(req),
                         "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: shoal\r\nConnection: "
                         "close\r\n\r\n",
                         path, addr);
        if (n < 0 || (size_t)n >= sizeof(req)) {
                snprintf(err, errlen, "request too long");
                return -EINVAL;
        }
        int rc = send_all_deadline(fd, req, (size_t)n, deadline);
        if (rc) {
                snprintf(err, errlen, "cannot send to %s: %s", addr, strerror(-rc));
                return rc;
        }
        return read_to_close(fd, addr, deadline, buf, got, err, errlen);
}

/* An answer BUF of GOT bytes: 200 and its body moved to the front (*LEN bytes), or -EPROTO. */
static int take_body(char *buf, size_t got, const char *addr, const char *path, size_t *len,
                     char *err, size_t errlen)
{
        int code = 0;
        char *sep = strstr(buf, "\r\n\r\n");
        if (sscanf(buf, "HTTP/1.%*[01] %d", &code) != 1 || !sep) {
                snprintf(err, errlen, "%s did not answer with HTTP (is it a shoal metrics port?)",
                         addr);
                return -EPROTO;
        }
        if (code != 200) {
                snprintf(err, errlen, "%s answered HTTP %d for %s", addr, code, path);
                return -EPROTO;
        }
        sep += 4;
        *len = got - (size_t)(sep - buf);
        memmove(buf, sep, *len + 1);
        return 0;
}

int shoal_metrics_http_get(const char *addr, const char *path, unsigned timeout_ms, char **body,
                           size_t *len, char *err, size_t errlen)
{
        char host[256];
        uint16_t port;
        uint64_t deadline = shoal_now_ns() + (uint64_t)timeout_ms * SHOAL_NS_PER_MS;
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
        char *buf = NULL;
        size_t got = 0;
        int rc = exchange(fd, addr, path, deadline, &buf, &got, err, errlen);
        close(fd);
        if (!rc)
                rc = take_body(buf, got, addr, path, len, err, errlen);
        if (rc) {
                free(buf);
                return rc;
        }
        *body = buf;
        return 0;
}
