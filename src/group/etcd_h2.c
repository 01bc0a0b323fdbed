/* etcd's LeaseKeepAlive over gRPC, the bytes only (pure, fuzzed by tests/fuzz/fuzz_h2ka.c): the
 * HTTP/2 frames a client sends to open one bidirectional stream and put keep-alives on it, and a
 * parser of everything the server may answer on that connection.
 *
 * Why not the v3 gateway: each POST to /v3/lease/keepalive opens, answers and closes a gRPC
 * stream inside etcd, about three times the CPU of one message on a stream held open
 * (docs/benchmarks.md, issue 33), and a member renews its presence every two seconds for as long
 * as it runs.
 *
 * Only what one client stream needs: no server push (disabled in our SETTINGS), no priorities,
 * no header decoding. The server's header blocks are skipped whole: HPACK's dynamic table only
 * matters to a decoder, and all we need from the server is DATA (the answers) and whether the
 * stream or the connection ended. Every length is checked against what is left before it is
 * used; anything that is not HTTP/2 as RFC 9113 allows it ends the connection (-EPROTO). */
#include <errno.h>
#include <string.h>

#include "group/group_internal.h"

enum {
        H2_DATA = 0,
        H2_HEADERS = 1,
        H2_PRIORITY = 2,
        H2_RST_STREAM = 3,
        H2_SETTINGS = 4,
        H2_PUSH_PROMISE = 5,
        H2_PING = 6,
        H2_GOAWAY = 7,
        H2_WINDOW_UPDATE = 8,
        H2_CONTINUATION = 9,
};

#define H2_END_STREAM  0x1
#define H2_ACK         0x1
#define H2_END_HEADERS 0x4
#define H2_PADDED      0x8
#define H2_PRIO        0x20

#define H2_STREAM             1u /* the one stream a connection carries */
#define H2_WINDOW_MAX         0x7fffffffLL
#define H2_SET_INITIAL_WINDOW 0x4

static void put24(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 16);
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)v;
}

static void put32(uint8_t *p, uint32_t v)
{
        p[0] = (uint8_t)(v >> 24);
        p[1] = (uint8_t)(v >> 16);
        p[2] = (uint8_t)(v >> 8);
        p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
        return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static size_t frame_head(uint8_t *p, uint32_t len, uint8_t type, uint8_t flags, uint32_t stream)
{
        put24(p, len);
        p[3] = type;
        p[4] = flags;
        put32(p + 5, stream & 0x7fffffffu);
        return 9;
}

/* An HPACK string literal, not Huffman-coded (RFC 7541 5.2); LEN < 127. */
static size_t hpack_str(uint8_t *p, const char *s, size_t len)
{
        p[0] = (uint8_t)len;
        memcpy(p + 1, s, len);
        return 1 + len;
}

size_t shoal_h2ka_open(uint8_t *out, size_t outlen, const char *authority)
{
        static const char preface[] = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        static const char path[] = "/etcdserverpb.Lease/LeaseKeepAlive";
        size_t alen = strlen(authority);
        if (alen == 0 || alen > 126 || outlen < SHOAL_H2KA_OPEN_MAX)
                return 0;
        size_t o = 0;
        memcpy(out, preface, sizeof(preface) - 1);
        o += sizeof(preface) - 1;
        /* SETTINGS: no push. The server's DATA is a few dozen bytes an answer; the windows are
         * opened as they are used (shoal_h2ka_feed asks for WINDOW_UPDATEs). */
        o += frame_head(out + o, 6, H2_SETTINGS, 0, 0);
        out[o++] = 0;
        out[o++] = 0x2; /* SETTINGS_ENABLE_PUSH */
        put32(out + o, 0);
        o += 4;
        /* HEADERS of stream 1, the request's; every field a literal without indexing, so that
         * our encoder keeps no table either. */
        size_t h = o;
        o += 9;
        out[o++] = 0x83; /* :method: POST (static table 3) */
        out[o++] = 0x86; /* :scheme: http (static table 6) */
        out[o++] = 0x04; /* :path, name from static table 4 */
        o += hpack_str(out + o, path, sizeof(path) - 1);
        out[o++] = 0x01; /* :authority, name from static table 1 */
        o += hpack_str(out + o, authority, alen);
        out[o++] = 0x0f; /* content-type (static table 31 = 15 + 16) */
        out[o++] = 0x10;
        o += hpack_str(out + o, "application/grpc", 16);
        out[o++] = 0x00; /* te: trailers, a new name */
        o += hpack_str(out + o, "te", 2);
        o += hpack_str(out + o, "trailers", 8);
        frame_head(out + h, (uint32_t)(o - h - 9), H2_HEADERS, H2_END_HEADERS, H2_STREAM);
        return o;
}

static size_t varint(uint8_t *p, uint64_t v)
{
        size_t n = 0;
        do {
                uint8_t b = v & 0x7f;
                v >>= 7;
                p[n++] = v ? (b | 0x80) : b;
        } while (v);
        return n;
}

size_t shoal_h2ka_request(uint8_t *out, size_t outlen, const int64_t *ids, size_t n)
{
        if (n == 0 || n > SHOAL_H2KA_IDS_MAX || outlen < 9 + n * 16)
                return 0;
        size_t o = 9;
        for (size_t i = 0; i < n; i++) {
                /* A gRPC message: uncompressed, its length, then LeaseKeepAliveRequest{ID = 1}. */
                uint8_t pb[11];
                pb[0] = 0x08;
                size_t pl = 1 + varint(pb + 1, (uint64_t)ids[i]);
                out[o++] = 0;
                put32(out + o, (uint32_t)pl);
                o += 4;
                memcpy(out + o, pb, pl);
                o += pl;
        }
        frame_head(out, (uint32_t)(o - 9), H2_DATA, 0, H2_STREAM);
        return o;
}

void shoal_h2ka_init(struct shoal_h2ka *k)
{
        memset(k, 0, sizeof(*k));
        /* RFC 9113 6.9.2: both windows start at 65,535 until SETTINGS say otherwise. */
        k->send_conn = 65535;
        k->send_stream = 65535;
        k->peer_initial_window = 65535;
}

static uint64_t get_varint(const uint8_t **p, const uint8_t *end, bool *ok)
{
        uint64_t v = 0;
        for (unsigned shift = 0; shift < 64; shift += 7) {
                if (*p == end) {
                        *ok = false;
                        return 0;
                }
                uint8_t b = *(*p)++;
                v |= (uint64_t)(b & 0x7f) << shift;
                if (!(b & 0x80))
                        return v;
        }
        *ok = false; /* more than ten bytes */
        return 0;
}

int shoal_h2ka_parse_answer(const uint8_t *pb, size_t len, int64_t *id, int64_t *ttl)
{
        const uint8_t *p = pb, *end = pb + len;
        bool ok = true;
        *id = 0;
        *ttl = 0; /* proto3 leaves out a zero: an expired lease answers no TTL at all */
        while (p < end && ok) {
                uint64_t tag = get_varint(&p, end, &ok);
                if (!ok)
                        break;
                uint64_t v;
                switch (tag & 7) {
                case 0:
                        v = get_varint(&p, end, &ok);
                        if (tag >> 3 == 2)
                                *id = (int64_t)v;
                        else if (tag >> 3 == 3)
                                *ttl = (int64_t)v;
                        break;
                case 1:
                        if ((size_t)(end - p) < 8)
                                return -EPROTO;
                        p += 8;
                        break;
                case 2:
                        v = get_varint(&p, end, &ok);
                        if (ok && v > (uint64_t)(end - p))
                                return -EPROTO;
                        p += ok ? v : 0;
                        break;
                case 5:
                        if ((size_t)(end - p) < 4)
                                return -EPROTO;
                        p += 4;
                        break;
                default:
                        return -EPROTO;
                }
        }
        return ok ? 0 : -EPROTO;
}

/* Queues a frame of ours (an acknowledgement or a window update) for the caller to send. */
static int queue(struct shoal_h2ka *k, uint8_t type, uint8_t flags, uint32_t stream,
                 const uint8_t *payload, uint32_t len)
{
        if (sizeof(k->out) - k->out_len < 9 + (size_t)len)
                return -EPROTO; /* a peer that makes us owe this much is flooding us */
        k->out_len += frame_head(k->out + k->out_len, len, type, flags, stream);
        if (len)
                memcpy(k->out + k->out_len, payload, len);
        k->out_len += len;
        return 0;
}

/* The gRPC messages in D (LEN bytes of stream 1's DATA), assembled across frames. */
static int take_data(struct shoal_h2ka *k, const uint8_t *d, size_t len, shoal_h2ka_answer_fn fn,
                     void *arg)
{
        while (len) {
                size_t want = k->msg_len < 5 ? 5 : 5 + (size_t)get32(k->msg + 1);
                size_t n = SHOAL_MIN(len, want - k->msg_len);
                memcpy(k->msg + k->msg_len, d, n);
                k->msg_len += n;
                d += n;
                len -= n;
                if (k->msg_len == 5) {
                        /* No compression was offered; an answer is a few dozen bytes. */
                        if (k->msg[0] != 0 || get32(k->msg + 1) > SHOAL_H2KA_MSG_MAX)
                                return -EPROTO;
                }
                if (k->msg_len >= 5 && k->msg_len == 5 + (size_t)get32(k->msg + 1)) {
                        int64_t id, ttl;
                        if (shoal_h2ka_parse_answer(k->msg + 5, k->msg_len - 5, &id, &ttl))
                                return -EPROTO;
                        k->msg_len = 0;
                        k->answers++;
                        if (fn)
                                fn(arg, id, ttl);
                }
        }
        return 0;
}

/* Window updates for DATA taken: ours are opened again once half of the initial 65,535 is used,
 * so the server never waits on us. */
static int credit(struct shoal_h2ka *k, uint32_t len)
{
        k->taken += len;
        if (k->taken < 32768)
                return 0;
        uint8_t inc[4];
        put32(inc, k->taken);
        k->taken = 0;
        int rc = queue(k, H2_WINDOW_UPDATE, 0, 0, inc, 4);
        return rc ? rc : queue(k, H2_WINDOW_UPDATE, 0, H2_STREAM, inc, 4);
}

static int settings(struct shoal_h2ka *k, const uint8_t *p, uint32_t len, uint8_t flags)
{
        if (flags & H2_ACK)
                return len ? -EPROTO : 0;
        if (len % 6)
                return -EPROTO;
        for (uint32_t i = 0; i < len; i += 6) {
                uint16_t id = (uint16_t)(p[i] << 8 | p[i + 1]);
                uint32_t v = get32(p + i + 2);
                if (id == H2_SET_INITIAL_WINDOW) {
                        if (v > H2_WINDOW_MAX)
                                return -EPROTO;
                        /* RFC 9113 6.9.2: the change applies to the open stream's window,
                         * which may not pass 2^31 - 1 (checked before it is taken). */
                        int64_t w = k->send_stream + (int64_t)v - k->peer_initial_window;
                        if (w > H2_WINDOW_MAX)
                                return -EPROTO;
                        k->send_stream = w;
                        k->peer_initial_window = v;
                }
        }
        return queue(k, H2_SETTINGS, H2_ACK, 0, NULL, 0);
}

static int window_update(struct shoal_h2ka *k, const uint8_t *p, uint32_t len, uint32_t stream)
{
        if (len != 4)
                return -EPROTO;
        uint32_t inc = get32(p) & 0x7fffffffu;
        int64_t *w = stream == 0 ? &k->send_conn : &k->send_stream;
        if (inc == 0 || (stream != 0 && stream != H2_STREAM) || *w + inc > H2_WINDOW_MAX)
                return -EPROTO;
        *w += inc;
        return 0;
}

/* Strips the padding of a DATA or HEADERS payload; -EPROTO when it does not fit. */
static int unpad(const uint8_t **p, uint32_t *len, uint8_t flags)
{
        if (!(flags & H2_PADDED))
                return 0;
        if (*len < 1 || (*p)[0] >= *len)
                return -EPROTO;
        uint32_t pad = (*p)[0];
        (*p)++;
        *len -= 1 + pad;
        return 0;
}

static int frame(struct shoal_h2ka *k, uint8_t type, uint8_t flags, uint32_t stream,
                 const uint8_t *p, uint32_t len, shoal_h2ka_answer_fn fn, void *arg)
{
        /* A header block must go on in CONTINUATION frames of its stream, and nothing between. */
        if (k->in_headers && (type != H2_CONTINUATION || stream != H2_STREAM))
                return -EPROTO;
        switch (type) {
        case H2_DATA: {
                if (stream != H2_STREAM)
                        return -EPROTO;
                int rc = credit(k, len);
                if (!rc)
                        rc = unpad(&p, &len, flags);
                if (!rc)
                        rc = take_data(k, p, len, fn, arg);
                if (!rc && (flags & H2_END_STREAM))
                        k->ended = true;
                return rc;
        }
        case H2_HEADERS:
                if (stream != H2_STREAM || unpad(&p, &len, flags) || ((flags & H2_PRIO) && len < 5))
                        return -EPROTO;
                /* Skipped whole. END_STREAM here is the trailers: the call is over. */
                k->in_headers = !(flags & H2_END_HEADERS);
                k->end_after_headers = flags & H2_END_STREAM;
                if (!k->in_headers && k->end_after_headers)
                        k->ended = true;
                return 0;
        case H2_CONTINUATION:
                if (!k->in_headers)
                        return -EPROTO;
                if (flags & H2_END_HEADERS) {
                        k->in_headers = false;
                        if (k->end_after_headers)
                                k->ended = true;
                }
                return 0;
        case H2_SETTINGS:
                return stream ? -EPROTO : settings(k, p, len, flags);
        case H2_PING:
                if (stream || len != 8)
                        return -EPROTO;
                return (flags & H2_ACK) ? 0 : queue(k, H2_PING, H2_ACK, 0, p, 8);
        case H2_WINDOW_UPDATE:
                return window_update(k, p, len, stream);
        case H2_RST_STREAM:
                if (stream == 0 || len != 4)
                        return -EPROTO;
                if (stream == H2_STREAM)
                        k->ended = true;
                return 0;
        case H2_GOAWAY:
                if (stream || len < 8)
                        return -EPROTO;
                /* RFC 9113 6.8: streams up to the last id the server names still complete (a
                 * graceful stop names 2^31 - 1): this call's answers come, the connection is not
                 * used again. */
                if ((get32(p) & 0x7fffffffu) >= H2_STREAM)
                        k->draining = true;
                else
                        k->ended = true;
                return 0;
        case H2_PUSH_PROMISE:
                return -EPROTO; /* refused in our SETTINGS */
        case H2_PRIORITY:
        default:
                return 0; /* RFC 9113 4.1: unknown types are ignored */
        }
}

int shoal_h2ka_feed(struct shoal_h2ka *k, const uint8_t *in, size_t len, shoal_h2ka_answer_fn fn,
                    void *arg)
{
        if (k->broken)
                return -EPROTO;
        while (len) {
                /* The frame's head, then its payload, gathered in K->frame. */
                size_t need = 9;
                if (k->frame_len >= 9) {
                        uint32_t flen = (uint32_t)k->frame[0] << 16 | (uint32_t)k->frame[1] << 8 |
                                        k->frame[2];
                        need = 9 + flen;
                }
                size_t n = SHOAL_MIN(len, need - k->frame_len);
                memcpy(k->frame + k->frame_len, in, n);
                k->frame_len += n;
                in += n;
                len -= n;
                if (k->frame_len == 9) {
                        uint32_t flen = (uint32_t)k->frame[0] << 16 | (uint32_t)k->frame[1] << 8 |
                                        k->frame[2];
                        /* Our SETTINGS keep the default SETTINGS_MAX_FRAME_SIZE. */
                        if (flen > SHOAL_H2_FRAME_MAX) {
                                k->broken = true;
                                return -EPROTO;
                        }
                        need = 9 + flen;
                }
                if (k->frame_len < 9 || k->frame_len < need)
                        continue;
                uint32_t stream = get32(k->frame + 5) & 0x7fffffffu;
                int rc = frame(k, k->frame[3], k->frame[4], stream, k->frame + 9,
                               (uint32_t)(k->frame_len - 9), fn, arg);
                k->frame_len = 0;
                if (rc) {
                        k->broken = true;
                        return rc;
                }
        }
        return 0;
}
