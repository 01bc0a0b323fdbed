/* etcd keep-alives on one gRPC stream held open (the socket; etcd_h2.c makes and reads the
 * bytes). A call sends one DATA frame with a request per lease and reads until each lease is
 * answered, within the registry's call timeout; anything else (a refused connection, a closed
 * stream, a protocol error, a timeout) closes the connection and the next call opens a new one.
 *
 * Calls run under the registry lock (an agent thread), so the socket is blocking in spirit: each
 * wait is a poll with the call's deadline. */
#include "group/etcd_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/util.h"

void shoal_etcd_ka_close(struct etcd_registry *r)
{
        if (r->ka.fd >= 0)
                close(r->ka.fd);
        r->ka.fd = -1;
}

static int send_all(int fd, const uint8_t *p, size_t len, uint64_t deadline)
{
        while (len) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
                if (n > 0) {
                        p += n;
                        len -= (size_t)n;
                        continue;
                }
                if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
                        return -errno;
                int rc = shoal_wait_fd(fd, POLLOUT, deadline);
                if (rc)
                        return rc;
        }
        return 0;
}

/* What the parser owes the server (acks, window updates). */
static int flush_owed(struct etcd_registry *r, uint64_t deadline)
{
        struct shoal_h2ka *k = &r->ka.h2;
        int rc = send_all(r->ka.fd, k->out, k->out_len, deadline);
        k->out_len = 0;
        return rc;
}

/* Keep-alive probes and a send timeout, so that a peer gone silent is noticed within seconds
 * even between calls, not after the kernel's minutes. */
static void tune(int fd)
{
        int one = 1, idle = 5, intvl = 2, cnt = 2;
        unsigned user_ms = 3000;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
        setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
        setsockopt(fd, IPPROTO_TCP, TCP_USER_TIMEOUT, &user_ms, sizeof(user_ms));
}

/* A non-blocking TCP connection to the address HOST (numeric: a name would need a lookup
 * without a deadline) and PORT within DEADLINE. Returns the socket or a negative errno. */
static int dial(const char *host, int port, uint64_t deadline)
{
        char ps[16];
        snprintf(ps, sizeof(ps), "%d", port);
        struct addrinfo hints = {.ai_family = AF_UNSPEC,
                                 .ai_socktype = SOCK_STREAM,
                                 .ai_flags = AI_NUMERICHOST | AI_NUMERICSERV};
        struct addrinfo *res = NULL;
        if (getaddrinfo(host, ps, &hints, &res) || !res)
                return -EHOSTUNREACH;
        int rc = -ECONNREFUSED;
        for (struct addrinfo *a = res; a; a = a->ai_next) {
                int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC,
                                a->ai_protocol);
                if (fd < 0) {
                        rc = -errno;
                        continue;
                }
                if (connect(fd, a->ai_addr, a->ai_addrlen) && errno != EINPROGRESS) {
                        rc = -errno;
                        close(fd);
                        continue;
                }
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                rc = shoal_wait_fd(fd, POLLOUT, deadline);
                if (!rc && getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) == 0 && soerr)
                        rc = -soerr;
                if (rc) {
                        close(fd);
                        continue;
                }
                tune(fd);
                freeaddrinfo(res);
                return fd;
        }
        freeaddrinfo(res);
        return rc;
}

static int ka_open(struct etcd_registry *r, uint64_t deadline)
{
        const struct shoal_etcd_endpoint *ep = &r->u.ep[r->cur];
        char authority[sizeof(ep->host) + 16];
        uint8_t open[SHOAL_H2KA_OPEN_MAX];
        snprintf(authority, sizeof(authority), "%s:%d", ep->host, ep->port);
        size_t len = shoal_h2ka_open(open, sizeof(open), authority);
        if (!len)
                return -EINVAL;
        /* The endpoint's address; for a name, the address libcurl resolved for the last gateway
         * call (its resolver keeps a deadline), which went to this endpoint: a failed call moves
         * r->cur on, a successful one leaves it. */
        char host[sizeof(ep->host)];
        size_t hl = strlen(ep->host);
        if (hl >= 2 && ep->host[0] == '[' && ep->host[hl - 1] == ']') {
                memcpy(host, ep->host + 1, hl - 2); /* a bracketed IPv6 address */
                host[hl - 2] = '\0';
        } else {
                shoal_strlcpy(host, ep->host, sizeof(host));
        }
        unsigned char a6[16];
        if (inet_pton(AF_INET, host, a6) != 1 && inet_pton(AF_INET6, host, a6) != 1) {
                char *ip = NULL;
                long port = 0;
                if (curl_easy_getinfo(r->h, CURLINFO_PRIMARY_IP, &ip) != CURLE_OK || !ip || !*ip ||
                    curl_easy_getinfo(r->h, CURLINFO_PRIMARY_PORT, &port) != CURLE_OK ||
                    port != ep->port)
                        return -EHOSTUNREACH;
                shoal_strlcpy(host, ip, sizeof(host));
        }
        int fd = dial(host, ep->port, deadline);
        if (fd < 0)
                return fd;
        r->ka.fd = fd;
        shoal_h2ka_init(&r->ka.h2);
        int rc = send_all(fd, open, len, deadline);
        if (rc)
                shoal_etcd_ka_close(r);
        return rc;
}

struct ka_wait {
        const int64_t *ids;
        int64_t *ttls;
        bool *got;
        size_t n, left;
};

static void on_answer(void *arg, int64_t id, int64_t ttl)
{
        struct ka_wait *w = arg;
        for (size_t i = 0; i < w->n; i++) {
                if (!w->got[i] && w->ids[i] == id) {
                        w->got[i] = true;
                        w->ttls[i] = ttl < 0 ? 0 : ttl;
                        w->left--;
                        return;
                }
        }
        /* Not one we asked for in this call: ignored. */
}

/* Reads and feeds the parser once (waiting until DEADLINE), then sends what it owes. */
static int read_some(struct etcd_registry *r, struct ka_wait *w, uint64_t deadline)
{
        uint8_t buf[16384];
        int rc = shoal_wait_fd(r->ka.fd, POLLIN, deadline);
        if (rc)
                return rc;
        ssize_t n = recv(r->ka.fd, buf, sizeof(buf), 0);
        if (n == 0)
                return -ECONNRESET;
        if (n < 0)
                return errno == EAGAIN || errno == EINTR ? 0 : -errno;
        rc = shoal_h2ka_feed(&r->ka.h2, buf, (size_t)n, on_answer, w);
        if (!rc)
                rc = flush_owed(r, deadline);
        if (!rc && r->ka.h2.ended && w->left)
                rc = -ECONNRESET;
        return rc;
}

static int ka_call(struct etcd_registry *r, struct ka_wait *w, uint64_t deadline)
{
        uint8_t req[9 + 16 * SHOAL_H2KA_IDS_MAX];
        size_t len = shoal_h2ka_request(req, sizeof(req), w->ids, w->n);
        if (!len)
                return -EINVAL;
        int rc = 0;
        if (r->ka.fd < 0 && (rc = ka_open(r, deadline)))
                return rc;
        struct shoal_h2ka *k = &r->ka.h2;
        /* Flow control: what the server let us send (its window updates come as it reads). */
        while (!rc && (k->send_conn < (int64_t)(len - 9) || k->send_stream < (int64_t)(len - 9)))
                rc = read_some(r, w, deadline);
        if (!rc)
                rc = send_all(r->ka.fd, req, len, deadline);
        if (rc)
                return rc;
        k->send_conn -= (int64_t)(len - 9);
        k->send_stream -= (int64_t)(len - 9);
        while (!rc && w->left)
                rc = read_some(r, w, deadline);
        return rc;
}

int shoal_etcd_ka_keepalive(struct etcd_registry *r, const int64_t *ids, int64_t *ttls, size_t n,
                            char *err, size_t errlen)
{
        bool got[SHOAL_H2KA_IDS_MAX] = {false};
        if (n == 0 || n > SHOAL_H2KA_IDS_MAX)
                return -EINVAL;
        struct ka_wait w = {.ids = ids, .ttls = ttls, .got = got, .n = n, .left = n};
        /* Half the call timeout: a stream that fails leaves the gateway time before the
         * presence lease (the timeout, renewed every third of it) runs out. */
        uint64_t deadline = shoal_now_ns() + ETCD_TIMEOUT_MS / 2 * SHOAL_NS_PER_MS;
        /* A stream the server ended or is draining (GOAWAY) since the last call is not used
         * again. */
        struct shoal_h2ka *k = &r->ka.h2;
        if (r->ka.fd >= 0 && (k->ended || k->broken || k->draining))
                shoal_etcd_ka_close(r);
        bool reused = r->ka.fd >= 0;
        int rc = ka_call(r, &w, deadline);
        if (rc && reused && rc != -ETIMEDOUT) {
                /* A connection that sat idle between calls may have been closed by the server
                 * (or by a middlebox): once more on a new one. A keep-alive sent twice renews
                 * twice, which is harmless. */
                shoal_etcd_ka_close(r);
                memset(got, 0, sizeof(got));
                w.left = n;
                rc = ka_call(r, &w, deadline);
        }
        if (rc) {
                const struct shoal_etcd_endpoint *ep = &r->u.ep[r->cur];
                snprintf(err, errlen, "%s:%d: gRPC keep-alive stream: %s", ep->host, ep->port,
                         rc == -EPROTO ? "the server broke HTTP/2 or gRPC"
                         : r->ka.fd >= 0 && k->ended
                                 ? "the server ended the stream (GOAWAY, RST_STREAM or an error)"
                                 : strerror(-rc));
                shoal_etcd_ka_close(r);
        }
        return rc;
}
