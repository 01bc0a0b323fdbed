/* The TCP pool client [T1]: one request per connection at a time, a pool of idle connections per
 * member. The answer's payload is received straight into the caller's buffer and every chunk CRC
 * is checked before success is reported. A pooled connection that turns out dead is replaced once;
 * a payload that fails its checksum is reported to the member (CORRUPT) and asked for once more. */
#include "net/remote.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "rpc/client_conn.h"
#include "rpc/wire.h"

#define MAX_PEERS 1024

struct pconn {
        int fd;
        struct pconn *next;
};

struct peer {
        char addr[SHOAL_ADDR_LEN];
        struct pconn *idle;
        unsigned nidle;
};

struct avoid {
        char id[SHOAL_MEMBER_ID_LEN + 1];
        uint64_t until;
};

struct shoal_remote {
        struct shoal_remote_config cfg;
        pthread_mutex_t mu;
        struct peer *peers;
        unsigned npeers;
        struct avoid *avoids;
        unsigned navoids;
        uint64_t next_id;
};

static uint64_t env_duration(const char *name, uint64_t dflt)
{
        const char *v = getenv(name);
        uint64_t ns;
        if (v && !shoal_parse_duration(v, &ns) && ns)
                return ns;
        return dflt;
}

struct shoal_remote *shoal_remote_create(const struct shoal_remote_config *cfg)
{
        struct shoal_remote *rm = calloc(1, sizeof(*rm));
        if (!rm)
                return NULL;
        rm->cfg = *cfg;
        if (!rm->cfg.timeout_ns)
                rm->cfg.timeout_ns = 10ULL * 1000000000ULL;
        rm->cfg.timeout_ns = env_duration("SHOAL_REMOTE_TIMEOUT", rm->cfg.timeout_ns);
        if (!rm->cfg.avoid_ns)
                rm->cfg.avoid_ns = 10ULL * 1000000000ULL;
        rm->cfg.avoid_ns = env_duration("SHOAL_AVOID_DURATION", rm->cfg.avoid_ns);
        if (!rm->cfg.idle_per_peer)
                rm->cfg.idle_per_peer = 64;
        rm->peers = calloc(MAX_PEERS, sizeof(*rm->peers));
        rm->avoids = calloc(MAX_PEERS, sizeof(*rm->avoids));
        if (!rm->peers || !rm->avoids) {
                free(rm->peers);
                free(rm->avoids);
                free(rm);
                return NULL;
        }
        pthread_mutex_init(&rm->mu, NULL);
        shoal_random_bytes(&rm->next_id, sizeof(rm->next_id));
        return rm;
}

void shoal_remote_destroy(struct shoal_remote *rm)
{
        if (!rm)
                return;
        for (unsigned i = 0; i < rm->npeers; i++) {
                struct pconn *pc = rm->peers[i].idle;
                while (pc) {
                        struct pconn *next = pc->next;
                        close(pc->fd);
                        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
                        free(pc);
                        pc = next;
                }
        }
        pthread_mutex_destroy(&rm->mu);
        free(rm->peers);
        free(rm->avoids);
        free(rm);
}

bool shoal_remote_avoided(struct shoal_remote *rm, const char *member_id)
{
        bool avoided = false;
        uint64_t now = shoal_now_ns();
        pthread_mutex_lock(&rm->mu);
        for (unsigned i = 0; i < rm->navoids; i++) {
                if (!strcmp(rm->avoids[i].id, member_id)) {
                        avoided = now < rm->avoids[i].until;
                        break;
                }
        }
        pthread_mutex_unlock(&rm->mu);
        return avoided;
}

void shoal_remote_avoid(struct shoal_remote *rm, const char *member_id)
{
        uint64_t until = shoal_now_ns() + rm->cfg.avoid_ns;
        pthread_mutex_lock(&rm->mu);
        unsigned i;
        for (i = 0; i < rm->navoids; i++)
                if (!strcmp(rm->avoids[i].id, member_id))
                        break;
        if (i == rm->navoids) {
                /* Reuse an expired slot before growing. */
                uint64_t now = shoal_now_ns();
                for (i = 0; i < rm->navoids && rm->avoids[i].until > now; i++)
                        ;
                if (i == rm->navoids && rm->navoids < MAX_PEERS)
                        rm->navoids++;
                if (i >= MAX_PEERS)
                        i = 0;
        }
        shoal_strlcpy(rm->avoids[i].id, member_id, sizeof(rm->avoids[i].id));
        rm->avoids[i].until = until;
        pthread_mutex_unlock(&rm->mu);
}

/* ---- blocking socket I/O with a deadline --------------------------------------------------- */

static int wait_fd(int fd, short events, uint64_t deadline)
{
        for (;;) {
                uint64_t now = shoal_now_ns();
                if (now >= deadline)
                        return -ETIMEDOUT;
                int ms = (int)((deadline - now + 999999) / 1000000);
                struct pollfd p = {.fd = fd, .events = events};
                int n = poll(&p, 1, ms);
                if (n > 0)
                        return 0;
                if (n < 0 && errno != EINTR)
                        return -errno;
        }
}

static int send_all(int fd, const void *buf, size_t len, uint64_t deadline)
{
        const char *p = buf;
        while (len) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                return -ECONNRESET;
                        int rc = wait_fd(fd, POLLOUT, deadline);
                        if (rc)
                                return rc;
                        continue;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

static int recv_all(int fd, void *buf, size_t len, uint64_t deadline)
{
        char *p = buf;
        while (len) {
                ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
                if (n == 0)
                        return -ECONNRESET;
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                return -ECONNRESET;
                        int rc = wait_fd(fd, POLLIN, deadline);
                        if (rc)
                                return rc;
                        continue;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

/* Receives one frame's header and body (at most BODY_CAP bytes). Returns 0 or -errno. */
static int recv_frame(int fd, struct shoal_wire_hdr *h, uint8_t *hdr, uint8_t *body,
                      size_t body_cap, uint64_t deadline)
{
        int rc = recv_all(fd, hdr, SHOAL_WIRE_HDR_LEN, deadline);
        if (rc)
                return rc;
        if (shoal_wire_hdr_decode(hdr, h) || h->body_len > body_cap)
                return -EPROTO;
        rc = recv_all(fd, body, h->body_len, deadline);
        if (rc)
                return rc;
        if (!shoal_wire_crc_ok(hdr, body, h->body_len))
                return -EPROTO;
        return 0;
}

static int send_frame(int fd, uint8_t type, uint16_t flags, uint64_t id, const uint8_t *body,
                      size_t body_len, uint64_t deadline)
{
        uint8_t buf[SHOAL_WIRE_HDR_LEN + 2048];
        if (body_len > sizeof(buf) - SHOAL_WIRE_HDR_LEN)
                return -EMSGSIZE;
        struct shoal_wire_hdr h = {.version = SHOAL_WIRE_VERSION,
                                   .type = type,
                                   .flags = flags,
                                   .body_len = (uint32_t)body_len,
                                   .id = id};
        memcpy(buf + SHOAL_WIRE_HDR_LEN, body, body_len);
        shoal_wire_hdr_encode(buf, &h, buf + SHOAL_WIRE_HDR_LEN);
        return send_all(fd, buf, SHOAL_WIRE_HDR_LEN + body_len, deadline);
}

int shoal_rpc_connect(const char *addr, uint8_t service, const char *secret, uint64_t deadline,
                      uint32_t *max_inflight)
{
        char host[SHOAL_ADDR_LEN];
        shoal_strlcpy(host, addr, sizeof(host));
        char *colon = strrchr(host, ':');
        if (!colon)
                return -EINVAL;
        *colon = '\0';
        uint64_t port;
        if (shoal_parse_u64(colon + 1, 65535, &port) || !port)
                return -EINVAL;
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
        if (inet_pton(AF_INET, host, &sa.sin_addr) != 1)
                return -EINVAL;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        int rc = 0;
        if (connect(fd, (struct sockaddr *)&sa, sizeof(sa))) {
                if (errno != EINPROGRESS) {
                        rc = -errno;
                        goto out_close;
                }
                rc = wait_fd(fd, POLLOUT, deadline);
                if (rc)
                        goto out_close;
                int soerr = 0;
                socklen_t sl = sizeof(soerr);
                getsockopt(fd, SOL_SOCKET, SO_ERROR, &soerr, &sl);
                if (soerr) {
                        rc = -soerr;
                        goto out_close;
                }
        }
        struct shoal_wire_hello hello = {.min_version = SHOAL_WIRE_VERSION,
                                         .max_version = SHOAL_WIRE_VERSION,
                                         .service = service};
        shoal_random_bytes(hello.nonce, sizeof(hello.nonce));
        uint8_t b[256], hdr[SHOAL_WIRE_HDR_LEN];
        int n = shoal_wire_hello_encode(b, sizeof(b), &hello);
        if (n < 0 || (rc = send_frame(fd, SHOAL_MSG_HELLO, 0, 1, b, (size_t)n, deadline)))
                goto out_proto;
        struct shoal_wire_hdr h;
        if ((rc = recv_frame(fd, &h, hdr, b, sizeof(b), deadline)))
                goto out_close;
        if (h.type == SHOAL_MSG_ERROR) {
                rc = -EREMOTEIO;
                goto out_close;
        }
        struct shoal_wire_hello_ack ack;
        if (h.type != SHOAL_MSG_HELLO_ACK || shoal_wire_hello_ack_decode(b, h.body_len, &ack))
                goto out_proto;
        if (secret) {
                /* Mutual: the server proves it knows the secret before we prove we do. */
                uint8_t want[SHOAL_WIRE_PROOF_LEN];
                shoal_wire_proof(secret, strlen(secret), true, hello.nonce, ack.nonce, want);
                if (!shoal_wire_proof_eq(want, ack.proof)) {
                        log_ratelimited(SHOAL_LOG_WARN, "remote",
                                        "member %s failed to prove the group secret", addr);
                        rc = -EACCES;
                        goto out_close;
                }
        }
        if (h.flags & SHOAL_WF_AUTH_REQUIRED) {
                if (!secret) {
                        log_ratelimited(SHOAL_LOG_WARN, "remote",
                                        "member %s requires the group secret; set "
                                        "--group-secret-file or SHOAL_GROUP_SECRET",
                                        addr);
                        rc = -EACCES;
                        goto out_close;
                }
                struct shoal_wire_auth auth;
                shoal_wire_proof(secret, strlen(secret), false, ack.nonce, hello.nonce, auth.proof);
                n = shoal_wire_auth_encode(b, sizeof(b), &auth);
                if (n < 0 || (rc = send_frame(fd, SHOAL_MSG_AUTH, 0, 2, b, (size_t)n, deadline)))
                        goto out_proto;
                if ((rc = recv_frame(fd, &h, hdr, b, sizeof(b), deadline)))
                        goto out_close;
                if (h.type != SHOAL_MSG_AUTH_OK) {
                        rc = -EACCES;
                        goto out_close;
                }
        }
        if (max_inflight)
                *max_inflight = ack.max_inflight;
        return fd;

out_proto:
        if (!rc)
                rc = -EPROTO;
out_close:
        close(fd);
        return rc;
}

/* ---- the pool ------------------------------------------------------------------------------ */

static struct peer *peer_find_locked(struct shoal_remote *rm, const char *addr)
{
        for (unsigned i = 0; i < rm->npeers; i++)
                if (!strcmp(rm->peers[i].addr, addr))
                        return &rm->peers[i];
        if (rm->npeers == MAX_PEERS)
                return NULL;
        struct peer *p = &rm->peers[rm->npeers++];
        shoal_strlcpy(p->addr, addr, sizeof(p->addr));
        return p;
}

static struct pconn *pool_get(struct shoal_remote *rm, const char *addr, bool *pooled,
                              uint64_t deadline, int *err)
{
        pthread_mutex_lock(&rm->mu);
        struct peer *p = peer_find_locked(rm, addr);
        struct pconn *pc = p ? p->idle : NULL;
        if (pc) {
                p->idle = pc->next;
                p->nidle--;
        }
        pthread_mutex_unlock(&rm->mu);
        if (pc) {
                *pooled = true;
                return pc;
        }
        *pooled = false;
        int fd = shoal_rpc_connect(addr, SHOAL_SERVICE_POOL, rm->cfg.secret, deadline, NULL);
        if (fd < 0) {
                *err = fd;
                return NULL;
        }
        pc = calloc(1, sizeof(*pc));
        if (!pc) {
                close(fd);
                *err = -ENOMEM;
                return NULL;
        }
        pc->fd = fd;
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        return pc;
}

static void pool_put(struct shoal_remote *rm, const char *addr, struct pconn *pc, bool healthy)
{
        if (healthy) {
                pthread_mutex_lock(&rm->mu);
                struct peer *p = peer_find_locked(rm, addr);
                if (p && p->nidle < rm->cfg.idle_per_peer) {
                        pc->next = p->idle;
                        p->idle = pc;
                        p->nidle++;
                        pc = NULL;
                }
                pthread_mutex_unlock(&rm->mu);
        }
        if (pc) {
                close(pc->fd);
                shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
                free(pc);
        }
}

static int encode_read(uint8_t *b, size_t cap, const struct shoal_volume *vol,
                       const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                       uint64_t view_version)
{
        struct shoal_wire_read rd = {
                .view_version = view_version,
                .obj_size = obj->size,
                .block_size = vol->block_size,
                .block_index = index,
                .offset = off,
                .length = len,
                .key_len = (uint16_t)strlen(obj->key),
                .version_len = (uint16_t)strlen(obj->version),
                .key = obj->key,
                .version = obj->version,
        };
        return shoal_wire_read_encode(b, cap, &rd);
}

static uint32_t status_errno(uint32_t st)
{
        switch (st) {
        case SHOAL_ST_NOT_FOUND:
                return ENOENT;
        case SHOAL_ST_STALE:
                return ESTALE;
        default:
                return EREMOTEIO;
        }
}

/* One attempt on connection FD. Returns 0, -EBADMSG (payload failed its checksum: the frame
 * stream is still in sync), or another -errno (the connection must be dropped). */
static int read_once(struct shoal_remote *rm, int fd, const struct shoal_volume *vol,
                     const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                     void *dst, uint64_t view_version, uint64_t deadline, uint32_t *remote_status)
{
        uint8_t b[SHOAL_WIRE_HDR_LEN + 4 * SHOAL_MAX_CHUNKS + 64];
        uint8_t hdr[SHOAL_WIRE_HDR_LEN];
        int n = encode_read(b, sizeof(b), vol, obj, index, off, len, view_version);
        if (n < 0)
                return -EINVAL;
        pthread_mutex_lock(&rm->mu);
        uint64_t id = ++rm->next_id;
        pthread_mutex_unlock(&rm->mu);
        int rc = send_frame(fd, SHOAL_MSG_READ, SHOAL_WF_FILL, id, b, (size_t)n, deadline);
        if (rc)
                return rc;
        struct shoal_wire_hdr h;
        rc = recv_frame(fd, &h, hdr, b, sizeof(b), deadline);
        if (rc)
                return rc;
        if (h.id != id)
                return -EPROTO; /* an answer to something we did not ask: out of sync */
        if (h.type == SHOAL_MSG_ERROR) {
                *remote_status = h.status;
                return -(int)status_errno(h.status); /* the connection stays usable */
        }
        struct shoal_wire_read_resp resp;
        struct shoal_block_id want;
        shoal_block_id_derive(vol, obj->key, obj->version, index, &want);
        if (h.type != SHOAL_MSG_READ_RESP || shoal_wire_read_resp_decode(b, h.body_len, &resp) ||
            resp.offset != off || resp.length != len || h.payload_len != len ||
            !shoal_block_id_eq(&resp.block, &want))
                return -EPROTO;
        rc = recv_all(fd, dst, len, deadline);
        if (rc)
                return rc;
        uint32_t first = off / SHOAL_CHUNK_SIZE;
        for (uint32_t i = 0; i < resp.n_crcs; i++) {
                uint32_t coff = (first + i) * SHOAL_CHUNK_SIZE - off;
                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, len - coff);
                if (shoal_chunk_crc(&want, first + i, (const char *)dst + coff, clen) !=
                    shoal_wire_read_resp_crc(&resp, i))
                        return -EBADMSG;
        }
        return 0;
}

static void report_corrupt(struct shoal_remote *rm, int fd, const struct shoal_volume *vol,
                           const struct shoal_object *obj, uint32_t index, uint32_t off,
                           uint32_t len, uint64_t deadline)
{
        uint8_t b[2048];
        int n = encode_read(b, sizeof(b), vol, obj, index, off, len, 0);
        if (n > 0)
                send_frame(fd, SHOAL_MSG_CORRUPT, 0, 0, b, (size_t)n, deadline);
}

int shoal_remote_read(struct shoal_remote *rm, const struct shoal_member *m,
                      const struct shoal_volume *vol, const struct shoal_object *obj,
                      uint32_t index, uint32_t off, uint32_t len, void *dst, uint64_t view_version)
{
        if (!m->tcp_addr[0])
                return -EHOSTUNREACH;
        uint64_t t0 = shoal_now_ns();
        uint64_t deadline = t0 + rm->cfg.timeout_ns;
        int rc = -EIO;
        unsigned fresh_tries = 0, corrupt_tries = 0;
        shoal_metric_inc(SHOAL_M_remotecache_get_requests);
        for (unsigned attempt = 0; attempt < 4; attempt++) {
                bool pooled;
                int err = 0;
                struct pconn *pc = pool_get(rm, m->tcp_addr, &pooled, deadline, &err);
                if (!pc) {
                        rc = err;
                        break;
                }
                uint32_t st = 0;
                rc = read_once(rm, pc->fd, vol, obj, index, off, len, dst, view_version, deadline,
                               &st);
                if (!rc) {
                        pool_put(rm, m->tcp_addr, pc, true);
                        break;
                }
                if (st) {
                        /* An error answer: the connection is fine, the request is not. */
                        pool_put(rm, m->tcp_addr, pc, true);
                        log_debug("remote", "member %s answered %s for %s/%u", m->tcp_addr,
                                  shoal_status_str(st), obj->key, index);
                        break;
                }
                if (rc == -EBADMSG) {
                        shoal_metric_inc(SHOAL_M_blockcache_checksum_errors);
                        log_ratelimited(SHOAL_LOG_WARN, "remote",
                                        "checksum mismatch in %s/%u from %s; reported", obj->key,
                                        index, m->tcp_addr);
                        report_corrupt(rm, pc->fd, vol, obj, index, off, len, deadline);
                        pool_put(rm, m->tcp_addr, pc, false);
                        if (++corrupt_tries > 1)
                                break;
                        continue;
                }
                pool_put(rm, m->tcp_addr, pc, false);
                /* A pooled connection may have died while idle (member restarted): one fresh
                 * connection is worth trying; a failure on a fresh one is the member's. */
                if (!pooled || rc == -ETIMEDOUT || ++fresh_tries > 1)
                        break;
        }
        uint64_t dt = shoal_now_ns() - t0;
        shoal_metric_observe(SHOAL_M_remotecache_get_dur, dt);
        if (!rc) {
                shoal_metric_add(SHOAL_M_remotecache_get_bytes, len);
                shoal_metric_add(SHOAL_M_remotecache_tcp_get_bytes, len);
        } else {
                shoal_metric_inc(SHOAL_M_remotecache_get_errors);
        }
        return rc;
}
