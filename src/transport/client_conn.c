/* Client-side connection helpers shared by the TCP pool and IORPC clients: deadline-bounded
 * socket I/O, the handshake, request encoding and answer checking. */
#include "transport/client_conn.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

int shoal_rpc_send_all(int fd, const void *buf, size_t len, uint64_t deadline)
{
        const char *p = buf;
        while (len) {
                ssize_t n = send(fd, p, len, MSG_NOSIGNAL | MSG_DONTWAIT);
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN)
                                return -ECONNRESET;
                        int rc = shoal_wait_fd(fd, POLLOUT, deadline);
                        if (rc)
                                return rc;
                        continue;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

int shoal_rpc_recv_all(int fd, void *buf, size_t len, uint64_t deadline)
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
                        int rc = shoal_wait_fd(fd, POLLIN, deadline);
                        if (rc)
                                return rc;
                        continue;
                }
                p += n;
                len -= (size_t)n;
        }
        return 0;
}

/* Receives a payload of LEN bytes into BUF with few wake-ups. By default every segment that
 * arrives wakes the receiver (and on loopback the sender pays for each wake-up in its own
 * context); SO_RCVLOWAT tells the kernel to wake us only when a large piece is queued. The low
 * mark is never above the bytes still owed, or the last piece would never wake us, and it is
 * back at 1 on return, so that the next small frame header wakes us at once. */
int shoal_rpc_recv_payload(int fd, void *buf, size_t len, uint64_t deadline)
{
        char *p = buf;
        int lowat = 1, rc = 0;
        while (len) {
                int want = (int)SHOAL_MIN(len, (size_t)SHOAL_RPC_LOWAT_PIECE);
                if (want != lowat && (want < lowat || len >= SHOAL_RPC_LOWAT_MIN)) {
                        setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want));
                        lowat = want;
                }
                ssize_t n = recv(fd, p, len, MSG_DONTWAIT);
                if (n == 0) {
                        rc = -ECONNRESET;
                        break;
                }
                if (n < 0) {
                        if (errno == EINTR)
                                continue;
                        if (errno != EAGAIN) {
                                rc = -ECONNRESET;
                                break;
                        }
                        rc = shoal_wait_fd(fd, POLLIN, deadline);
                        if (rc)
                                break;
                        continue;
                }
                p += n;
                len -= (size_t)n;
        }
        if (lowat != 1) {
                int one = 1;
                setsockopt(fd, SOL_SOCKET, SO_RCVLOWAT, &one, sizeof(one));
        }
        return rc;
}

/* Receives one frame's header and body (at most BODY_CAP bytes). Returns 0 or -errno. */
int shoal_rpc_recv_frame(int fd, struct shoal_wire_hdr *h, uint8_t *hdr, uint8_t *body,
                         size_t body_cap, uint64_t deadline)
{
        int rc = shoal_rpc_recv_all(fd, hdr, SHOAL_WIRE_HDR_LEN, deadline);
        if (rc)
                return rc;
        if (shoal_wire_hdr_decode(hdr, h) || h->body_len > body_cap)
                return -EPROTO;
        rc = shoal_rpc_recv_all(fd, body, h->body_len, deadline);
        if (rc)
                return rc;
        if (!shoal_wire_crc_ok(hdr, body, h->body_len))
                return -EPROTO;
        return 0;
}

int shoal_rpc_send_frame(int fd, uint8_t type, uint16_t flags, uint64_t id, const uint8_t *body,
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
        if (body_len)
                memcpy(buf + SHOAL_WIRE_HDR_LEN, body, body_len);
        shoal_wire_hdr_encode(buf, &h, body);
        return shoal_rpc_send_all(fd, buf, SHOAL_WIRE_HDR_LEN + body_len, deadline);
}

/* Sends the handshake's pending frame, if any. */
static int hs_send(int fd, struct shoal_hs *hs, uint64_t deadline)
{
        if (!hs->out_len)
                return 0;
        return shoal_rpc_send_all(fd, hs->out, hs->out_len, deadline);
}

/* Starts HS for a connection to ADDR: before the connect, so that the HELLO leaves the moment
 * the connection is up (a member under a flood of silent connections closes its oldest silent
 * one to admit a newcomer, and a requester that has already spoken is never that one). */
static int handshake_start(struct shoal_hs *hs, const char *addr, uint8_t service,
                           const struct shoal_hs_key *key)
{
        struct shoal_hs_config cfg = {
                .role = SHOAL_HS_REQUESTER, .key = key, .service = service, .addr = addr};
        int rc = shoal_hs_start(hs, &cfg);
        if (rc)
                log_ratelimited(SHOAL_LOG_ERROR, "remote", "handshake with %s: %s", addr,
                                hs->why ? hs->why : strerror(-rc));
        return rc;
}

static int handshake(int fd, struct shoal_hs *hs, const char *addr, uint64_t deadline,
                     struct shoal_rpc_peer *peer)
{
        int rc;
        enum shoal_hs_verdict v = SHOAL_HS_MORE;
        while (v == SHOAL_HS_MORE) {
                if ((rc = hs_send(fd, hs, deadline)))
                        return rc;
                uint8_t hdr[SHOAL_WIRE_HDR_LEN], body[256];
                struct shoal_wire_hdr h;
                if ((rc = shoal_rpc_recv_frame(fd, &h, hdr, body, sizeof(body), deadline)))
                        return rc;
                v = shoal_hs_step(hs, &h, body);
        }
        if (v == SHOAL_HS_FAIL) {
                log_ratelimited(hs->error == -EACCES ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "remote",
                                "handshake with member %s failed: %s", addr, hs->why);
                return hs->error;
        }
        if (peer) {
                peer->max_inflight = hs->peer_max_inflight;
                memcpy(peer->member_id, hs->peer_id, sizeof(peer->member_id));
        }
        return 0;
}

static int connect_once(const struct sockaddr_in *sa, const char *addr, uint8_t service,
                        const struct shoal_hs_key *key, uint64_t deadline,
                        struct shoal_rpc_peer *peer)
{
        struct shoal_hs hs;
        int rc = handshake_start(&hs, addr, service, key);
        if (rc)
                return rc;
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1;
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        if (connect(fd, (const struct sockaddr *)sa, sizeof(*sa))) {
                if (errno != EINPROGRESS) {
                        rc = -errno;
                        goto out_close;
                }
                rc = shoal_wait_fd(fd, POLLOUT, deadline);
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
        rc = handshake(fd, &hs, addr, deadline, peer);
        if (rc)
                goto out_close;
        return fd;

out_close:
        close(fd);
        return rc;
}

int shoal_rpc_connect(const char *addr, uint8_t service, const struct shoal_hs_key *key,
                      uint64_t deadline, struct shoal_rpc_peer *peer)
{
        char host[64];
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
        /* A connection the member closed before answering (it made room for a newcomer, or was
         * at its limit) is tried once more: a reset costs a round trip, a fallback a store GET. */
        int rc = connect_once(&sa, addr, service, key, deadline, peer);
        if ((rc == -ECONNRESET || rc == -EPIPE) && shoal_now_ns() < deadline)
                rc = connect_once(&sa, addr, service, key, deadline, peer);
        return rc;
}

int shoal_rpc_encode_read(uint8_t *b, size_t cap, const struct shoal_volume *vol,
                          const struct shoal_object *obj, uint32_t index, uint32_t off,
                          uint32_t len, uint64_t view_version)
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

int shoal_rpc_status_errno(uint32_t st)
{
        switch (st) {
        case SHOAL_ST_NOT_FOUND:
                return -ENOENT;
        case SHOAL_ST_STALE:
                return -ESTALE;
        default:
                return -EREMOTEIO;
        }
}

int shoal_rpc_error_errno(uint32_t status, const uint8_t *body, size_t body_len)
{
        char why[sizeof(SHOAL_WIRE_VIEW_DIFFERS)];
        if (status == SHOAL_ST_NOT_OWNER &&
            shoal_wire_error_decode(body, body_len, why, sizeof(why)) == 0 &&
            !strcmp(why, SHOAL_WIRE_VIEW_DIFFERS))
                return -EXDEV;
        return shoal_rpc_status_errno(status);
}

int shoal_rpc_check_answer_id(const struct shoal_block_id *want, uint32_t off, uint32_t len,
                              const struct shoal_wire_hdr *h,
                              const struct shoal_wire_read_resp *resp)
{
        bool rdma = h->flags & SHOAL_WF_RDMA_WRITTEN;
        if (h->type != SHOAL_MSG_READ_RESP || resp->offset != off || resp->length != len ||
            h->payload_len != (rdma ? 0 : len) || !shoal_block_id_eq(&resp->block, want))
                return -EPROTO;
        return 0;
}

int shoal_rpc_check_answer(const struct shoal_volume *vol, const struct shoal_object *obj,
                           uint32_t index, uint32_t off, uint32_t len,
                           const struct shoal_wire_hdr *h, const struct shoal_wire_read_resp *resp)
{
        struct shoal_block_id want;
        shoal_block_id_derive(vol, obj->key, obj->version, index, &want);
        return shoal_rpc_check_answer_id(&want, off, len, h, resp);
}

bool shoal_rpc_verify_chunks(const struct shoal_block_id *id, const void *data, uint32_t from,
                             uint32_t to, const struct shoal_wire_read_resp *resp)
{
        uint32_t first = resp->offset / SHOAL_CHUNK_SIZE;
        for (uint32_t at = from; at < to; at += SHOAL_CHUNK_SIZE) {
                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, to - at);
                uint32_t i = at / SHOAL_CHUNK_SIZE;
                if (i >= resp->n_crcs || shoal_chunk_crc(id, first + i, (const char *)data + at,
                                                         clen) != shoal_wire_read_resp_crc(resp, i))
                        return false;
        }
        return true;
}

int shoal_rpc_verify_payload(const struct shoal_volume *vol, const struct shoal_object *obj,
                             uint32_t index, uint32_t off, uint32_t len, const void *dst,
                             const struct shoal_wire_read_resp *resp)
{
        struct shoal_block_id id;
        shoal_block_id_derive(vol, obj->key, obj->version, index, &id);
        uint32_t first = off / SHOAL_CHUNK_SIZE;
        for (uint32_t i = 0; i < resp->n_crcs; i++) {
                uint32_t coff = (first + i) * SHOAL_CHUNK_SIZE - off;
                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, len - coff);
                if (shoal_chunk_crc(&id, first + i, (const char *)dst + coff, clen) !=
                    shoal_wire_read_resp_crc(resp, i))
                        return -EBADMSG;
        }
        return 0;
}

int shoal_rpc_decode_answer(uint8_t service, const uint8_t *body, size_t len,
                            struct shoal_wire_read_resp *resp)
{
        uint64_t t0 = shoal_now_ns();
        int rc = shoal_wire_read_resp_decode(body, len, resp);
        shoal_metric_observe(service == SHOAL_SERVICE_POOL ? SHOAL_M_remotecache_pool_decodeBodyDur
                                                           : SHOAL_M_mount_iorpc_decodeBodyDur,
                             shoal_now_ns() - t0);
        return rc;
}
