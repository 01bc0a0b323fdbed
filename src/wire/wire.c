#include "wire/wire.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "common/crc32c.h"

/* Body sizes. Every body has exactly one encoding (lengths derived from content, no padding, no
 * optional fields), so a decoded message re-encodes to the same bytes; the fuzz target relies on
 * it. docs/iorpc-protocol.md has the byte-by-byte layouts. */
#define HELLO_LEN       (3 + SHOAL_WIRE_NONCE_LEN)
#define HELLO_ACK_FIXED (1 + SHOAL_WIRE_NONCE_LEN + 4 + 1)
#define HELLO_ACK_MAX   (HELLO_ACK_FIXED + SHOAL_WIRE_MEMBER_ID_MAX)
#define AUTH_LEN        SHOAL_WIRE_PROOF_LEN
#define READ_FIXED      52
#define READ_MAX        (READ_FIXED + SHOAL_KEY_MAX + SHOAL_VERSION_MAX)
#define READ_RESP_FIXED (SHOAL_BLOCK_ID_LEN + 12)
#define READ_RESP_MAX   (READ_RESP_FIXED + 4 * SHOAL_MAX_CHUNKS)
#define PUT_FIXED       28
#define PUT_MAX         (PUT_FIXED + SHOAL_KEY_MAX + SHOAL_VERSION_MAX)
#define ERROR_MAX       200
#define PING_MAX        64
#define INFO_ADDR_MAX   (sizeof(((struct shoal_wire_info *)0)->tcp_addr) - 1)
#define INFO_URL_MAX    (sizeof(((struct shoal_wire_info *)0)->volume_url) - 1)
#define INFO_RDMA_MAX   4
#define INFO_RESP_MAX   ((2 + INFO_RDMA_MAX) * (1 + INFO_ADDR_MAX) + 1 + 4 + 2 + INFO_URL_MAX)

#define HELLO_SERVICE_MAX SHOAL_SERVICE_RDMA

_Static_assert(INFO_RESP_MAX == 2 * (1 + 63) + 1 + 4 * (1 + 63) + 4 + 2 + 1023, "INFO_RESP layout");
_Static_assert(sizeof(((struct shoal_wire_info *)0)->rdma_addr) / 64 == INFO_RDMA_MAX,
               "rdma_addr count");
_Static_assert(INFO_URL_MAX < 0x10000, "volume_url length fits u16");

/* ---- little-endian helpers ---- */

static void put16(uint8_t *p, uint16_t v)
{
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
}

static void put32(uint8_t *p, uint32_t v)
{
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static void put64(uint8_t *p, uint64_t v)
{
        for (int i = 0; i < 8; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static uint16_t get16(const uint8_t *p)
{
        return (uint16_t)(p[0] | (uint16_t)p[1] << 8);
}

static uint32_t get32(const uint8_t *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint64_t get64(const uint8_t *p)
{
        return (uint64_t)get32(p) | (uint64_t)get32(p + 4) << 32;
}

/* A bounds-checked reader: every take() checks the remaining length first, and a short read
 * latches BAD so a decoder can test once at the end. */
struct rd {
        const uint8_t *p;
        size_t len, off;
        bool bad;
};

static const uint8_t *take(struct rd *r, size_t n)
{
        if (r->bad || !r->p || n > r->len - r->off) {
                r->bad = true;
                return NULL;
        }
        const uint8_t *p = r->p + r->off;
        r->off += n;
        return p;
}

static uint8_t rd8(struct rd *r)
{
        const uint8_t *p = take(r, 1);
        return p ? p[0] : 0;
}

static uint16_t rd16(struct rd *r)
{
        const uint8_t *p = take(r, 2);
        return p ? get16(p) : 0;
}

static uint32_t rd32(struct rd *r)
{
        const uint8_t *p = take(r, 4);
        return p ? get32(p) : 0;
}

static uint64_t rd64(struct rd *r)
{
        const uint8_t *p = take(r, 8);
        return p ? get64(p) : 0;
}

static void rdbytes(struct rd *r, void *out, size_t n)
{
        const uint8_t *p = take(r, n);
        if (p && n)
                memcpy(out, p, n);
}

/* 0 when every field was present and nothing trails them. */
static int rd_end(const struct rd *r)
{
        return !r->bad && r->off == r->len ? 0 : -EPROTO;
}

/* ---- header ---- */

/* Flags a frame of each type may carry; any other bit is a protocol error. */
static uint16_t flags_allowed(uint8_t type)
{
        switch (type) {
        case SHOAL_MSG_HELLO_ACK:
                return SHOAL_WF_AUTH_REQUIRED;
        case SHOAL_MSG_READ:
                return SHOAL_WF_RDMA_TARGET | SHOAL_WF_FILL;
        case SHOAL_MSG_READ_RESP:
                return SHOAL_WF_RDMA_WRITTEN;
        default:
                return 0;
        }
}

uint32_t shoal_wire_body_max(uint8_t type)
{
        switch (type) {
        case SHOAL_MSG_HELLO:
                return HELLO_LEN;
        case SHOAL_MSG_HELLO_ACK:
                return HELLO_ACK_MAX;
        case SHOAL_MSG_AUTH:
        case SHOAL_MSG_AUTH_OK:
                return AUTH_LEN;
        case SHOAL_MSG_READ:
        case SHOAL_MSG_CORRUPT:
                return READ_MAX;
        case SHOAL_MSG_READ_RESP:
                return READ_RESP_MAX;
        case SHOAL_MSG_ERROR:
                return ERROR_MAX;
        case SHOAL_MSG_PING:
        case SHOAL_MSG_PONG:
                return PING_MAX;
        case SHOAL_MSG_INFO:
                return 0;
        case SHOAL_MSG_INFO_RESP:
                return INFO_RESP_MAX;
        case SHOAL_MSG_GOAWAY:
                return 0;
        case SHOAL_MSG_PUT_BLOCK:
                return PUT_MAX;
        case SHOAL_MSG_PUT_RESP:
                return 0;
        default:
                return 0;
        }
}

static bool type_known(uint8_t type)
{
        switch (type) {
        case SHOAL_MSG_HELLO:
        case SHOAL_MSG_HELLO_ACK:
        case SHOAL_MSG_AUTH:
        case SHOAL_MSG_AUTH_OK:
        case SHOAL_MSG_READ:
        case SHOAL_MSG_READ_RESP:
        case SHOAL_MSG_ERROR:
        case SHOAL_MSG_PING:
        case SHOAL_MSG_PONG:
        case SHOAL_MSG_INFO:
        case SHOAL_MSG_INFO_RESP:
        case SHOAL_MSG_CORRUPT:
        case SHOAL_MSG_GOAWAY:
        case SHOAL_MSG_PUT_BLOCK:
        case SHOAL_MSG_PUT_RESP:
                return true;
        default:
                return false;
        }
}

const char *shoal_status_str(uint32_t status)
{
        switch (status) {
        case SHOAL_ST_OK:
                return "ok";
        case SHOAL_ST_NOT_FOUND:
                return "not found";
        case SHOAL_ST_STALE:
                return "stale";
        case SHOAL_ST_NOT_OWNER:
                return "not owner";
        case SHOAL_ST_MISS:
                return "miss";
        case SHOAL_ST_BAD_REQUEST:
                return "bad request";
        case SHOAL_ST_STORE_ERROR:
                return "store error";
        case SHOAL_ST_RPC_DISABLED:
                return "rpc disabled";
        case SHOAL_ST_AUTH_FAILED:
                return "auth failed";
        case SHOAL_ST_BUSY:
                return "busy";
        case SHOAL_ST_VOLUME:
                return "volume mismatch";
        case SHOAL_ST_INTERNAL:
                return "internal error";
        default:
                return "unknown status";
        }
}

static uint32_t frame_crc(const uint8_t *hdr, const void *body, size_t body_len)
{
        uint32_t crc = shoal_crc32c(0, hdr, SHOAL_WIRE_HDR_LEN - 4);
        if (body_len)
                crc = shoal_crc32c(crc, body, body_len);
        return crc;
}

void shoal_wire_hdr_encode(uint8_t out[SHOAL_WIRE_HDR_LEN], const struct shoal_wire_hdr *h,
                           const void *body)
{
        put32(out, SHOAL_WIRE_MAGIC);
        out[4] = h->version;
        out[5] = h->type;
        put16(out + 6, h->flags);
        put32(out + 8, h->status);
        put32(out + 12, h->body_len);
        put32(out + 16, h->payload_len);
        put64(out + 20, h->id);
        put32(out + 28, frame_crc(out, body, h->body_len));
}

size_t shoal_wire_frame_encode(uint8_t *out, uint8_t type, uint16_t flags, uint32_t status,
                               uint64_t id, const void *body, size_t body_len)
{
        struct shoal_wire_hdr h = {.version = SHOAL_WIRE_VERSION,
                                   .type = type,
                                   .flags = flags,
                                   .status = status,
                                   .body_len = (uint32_t)body_len,
                                   .id = id};
        if (body && body_len)
                memcpy(out + SHOAL_WIRE_HDR_LEN, body, body_len);
        shoal_wire_hdr_encode(out, &h, out + SHOAL_WIRE_HDR_LEN);
        return SHOAL_WIRE_HDR_LEN + body_len;
}

int shoal_wire_hdr_decode(const uint8_t in[SHOAL_WIRE_HDR_LEN], struct shoal_wire_hdr *h)
{
        memset(h, 0, sizeof(*h));
        if (get32(in) != SHOAL_WIRE_MAGIC || in[4] != SHOAL_WIRE_VERSION || !type_known(in[5]))
                return -EPROTO;
        uint8_t type = in[5];
        uint16_t flags = get16(in + 6);
        uint32_t status = get32(in + 8);
        uint32_t body_len = get32(in + 12);
        uint32_t payload_len = get32(in + 16);
        if (flags & ~flags_allowed(type))
                return -EPROTO;
        /* Only ERROR carries a status, and it is never OK there. */
        if (type == SHOAL_MSG_ERROR ? status == SHOAL_ST_OK || status >= SHOAL_ST__MAX
                                    : status != SHOAL_ST_OK)
                return -EPROTO;
        if (body_len > shoal_wire_body_max(type))
                return -EMSGSIZE;
        if (type == SHOAL_MSG_READ_RESP) {
                if (payload_len > SHOAL_WIRE_PAYLOAD_MAX)
                        return -EMSGSIZE;
                /* An RDMA-written answer has its data in the requester's buffer already. */
                if ((flags & SHOAL_WF_RDMA_WRITTEN) && payload_len != 0)
                        return -EPROTO;
        } else if (type == SHOAL_MSG_PUT_BLOCK) {
                /* Checked against the block the body names by the receiver (it knows the
                 * body then); here only against the largest block. */
                if (payload_len > SHOAL_WIRE_PUT_PAYLOAD_MAX)
                        return -EMSGSIZE;
        } else if (payload_len != 0) {
                return -EMSGSIZE;
        }
        h->version = in[4];
        h->type = type;
        h->flags = flags;
        h->status = status;
        h->body_len = body_len;
        h->payload_len = payload_len;
        h->id = get64(in + 20);
        return 0;
}

bool shoal_wire_crc_ok(const uint8_t in[SHOAL_WIRE_HDR_LEN], const void *body, size_t body_len)
{
        return frame_crc(in, body, body_len) == get32(in + 28);
}

int shoal_wire_frame_need(const uint8_t *in, size_t have, uint32_t body_max, bool put_payload,
                          struct shoal_wire_hdr *h)
{
        if (have < SHOAL_WIRE_HDR_LEN)
                return (int)(SHOAL_WIRE_HDR_LEN - have);
        if (shoal_wire_hdr_decode(in, h))
                return -EPROTO;
        bool payload_ok = put_payload && h->type == SHOAL_MSG_PUT_BLOCK;
        if ((h->payload_len && !payload_ok) || h->body_len > body_max)
                return -EMSGSIZE;
        size_t len = SHOAL_WIRE_HDR_LEN + (size_t)h->body_len;
        if (have > len)
                return -EINVAL;
        if (have < len)
                return (int)(len - have);
        return shoal_wire_crc_ok(in, in + SHOAL_WIRE_HDR_LEN, h->body_len) ? 0 : -EBADMSG;
}

/* ---- handshake ---- */

static bool hello_valid(const struct shoal_wire_hello *m)
{
        return m->min_version >= 1 && m->min_version <= m->max_version && m->service >= 1 &&
               m->service <= HELLO_SERVICE_MAX;
}

int shoal_wire_hello_encode(uint8_t *out, size_t outlen, const struct shoal_wire_hello *m)
{
        if (outlen < HELLO_LEN || !hello_valid(m))
                return -EMSGSIZE;
        out[0] = m->min_version;
        out[1] = m->max_version;
        out[2] = m->service;
        memcpy(out + 3, m->nonce, SHOAL_WIRE_NONCE_LEN);
        return HELLO_LEN;
}

int shoal_wire_hello_decode(const uint8_t *body, size_t len, struct shoal_wire_hello *m)
{
        struct rd r = {.p = body, .len = len};
        memset(m, 0, sizeof(*m));
        m->min_version = rd8(&r);
        m->max_version = rd8(&r);
        m->service = rd8(&r);
        rdbytes(&r, m->nonce, SHOAL_WIRE_NONCE_LEN);
        if (rd_end(&r) || !hello_valid(m))
                return -EPROTO;
        return 0;
}

/* A member id as the group makes them (group/registry.c): [0-9A-Za-z._-], at most 32. */
static bool member_id_valid(const char *s, size_t len)
{
        if (len > SHOAL_WIRE_MEMBER_ID_MAX)
                return false;
        for (size_t i = 0; i < len; i++) {
                char c = s[i];
                if (!((c >= '0' && c <= '9') || (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') ||
                      c == '.' || c == '_' || c == '-'))
                        return false;
        }
        return true;
}

int shoal_wire_hello_ack_encode(uint8_t *out, size_t outlen, const struct shoal_wire_hello_ack *m)
{
        size_t idlen = strnlen(m->member_id, sizeof(m->member_id));
        if (m->version < 1 || m->max_inflight < 1 || !member_id_valid(m->member_id, idlen) ||
            outlen < HELLO_ACK_FIXED + idlen)
                return -EMSGSIZE;
        out[0] = m->version;
        memcpy(out + 1, m->nonce, SHOAL_WIRE_NONCE_LEN);
        put32(out + 1 + SHOAL_WIRE_NONCE_LEN, m->max_inflight);
        out[HELLO_ACK_FIXED - 1] = (uint8_t)idlen;
        memcpy(out + HELLO_ACK_FIXED, m->member_id, idlen);
        return (int)(HELLO_ACK_FIXED + idlen);
}

int shoal_wire_hello_ack_decode(const uint8_t *body, size_t len, struct shoal_wire_hello_ack *m)
{
        struct rd r = {.p = body, .len = len};
        memset(m, 0, sizeof(*m));
        m->version = rd8(&r);
        rdbytes(&r, m->nonce, SHOAL_WIRE_NONCE_LEN);
        m->max_inflight = rd32(&r);
        uint8_t idlen = rd8(&r);
        const uint8_t *id = take(&r, idlen);
        if (rd_end(&r) || m->version < 1 || m->max_inflight < 1 ||
            !member_id_valid((const char *)id, idlen)) {
                memset(m, 0, sizeof(*m));
                return -EPROTO;
        }
        if (idlen)
                memcpy(m->member_id, id, idlen);
        return 0;
}

int shoal_wire_auth_encode(uint8_t *out, size_t outlen, const struct shoal_wire_auth *m)
{
        if (outlen < AUTH_LEN)
                return -EMSGSIZE;
        memcpy(out, m->proof, SHOAL_WIRE_PROOF_LEN);
        return AUTH_LEN;
}

int shoal_wire_auth_decode(const uint8_t *body, size_t len, struct shoal_wire_auth *m)
{
        struct rd r = {.p = body, .len = len};
        memset(m, 0, sizeof(*m));
        rdbytes(&r, m->proof, SHOAL_WIRE_PROOF_LEN);
        return rd_end(&r);
}

/* ---- READ (and CORRUPT) ---- */

static bool block_size_valid(uint32_t bs)
{
        return bs >= SHOAL_BLOCK_SIZE_MIN && bs <= SHOAL_BLOCK_SIZE_MAX && !(bs & (bs - 1));
}

/* The block a READ, CORRUPT or PUT_BLOCK names: a valid key and version, a valid block size, and
 * an index inside the object. */
static bool block_named_valid(const char *key, uint16_t key_len, const char *version,
                              uint16_t version_len, uint64_t obj_size, uint32_t block_size,
                              uint32_t block_index)
{
        if (!key || !version || !shoal_key_valid(key, key_len) ||
            !shoal_version_valid(version, version_len) || !block_size_valid(block_size))
                return false;
        /* index < 2^32 and block_size <= 2^26: the product fits in 64 bits. */
        return (uint64_t)block_index * block_size < obj_size;
}

static bool read_valid(const struct shoal_wire_read *m)
{
        if (!block_named_valid(m->key, m->key_len, m->version, m->version_len, m->obj_size,
                               m->block_size, m->block_index))
                return false;
        uint32_t blen = shoal_block_len(m->obj_size, m->block_size, m->block_index);
        return shoal_range_valid(blen, m->offset, m->length);
}

int shoal_wire_read_encode(uint8_t *out, size_t outlen, const struct shoal_wire_read *m)
{
        if (!read_valid(m))
                return -EMSGSIZE;
        size_t n = READ_FIXED + (size_t)m->key_len + m->version_len;
        if (outlen < n)
                return -EMSGSIZE;
        put64(out, m->view_version);
        put64(out + 8, m->obj_size);
        put32(out + 16, m->block_size);
        put32(out + 20, m->block_index);
        put32(out + 24, m->offset);
        put32(out + 28, m->length);
        put64(out + 32, m->rdma_addr);
        put64(out + 40, m->rdma_key);
        put16(out + 48, m->key_len);
        put16(out + 50, m->version_len);
        memcpy(out + READ_FIXED, m->key, m->key_len);
        memcpy(out + READ_FIXED + m->key_len, m->version, m->version_len);
        return (int)n;
}

int shoal_wire_read_decode(const uint8_t *body, size_t len, struct shoal_wire_read *m)
{
        struct rd r = {.p = body, .len = len};
        memset(m, 0, sizeof(*m));
        m->view_version = rd64(&r);
        m->obj_size = rd64(&r);
        m->block_size = rd32(&r);
        m->block_index = rd32(&r);
        m->offset = rd32(&r);
        m->length = rd32(&r);
        m->rdma_addr = rd64(&r);
        m->rdma_key = rd64(&r);
        m->key_len = rd16(&r);
        m->version_len = rd16(&r);
        m->key = (const char *)take(&r, m->key_len);
        m->version = (const char *)take(&r, m->version_len);
        if (rd_end(&r) || !read_valid(m)) {
                m->key = m->version = NULL;
                return -EPROTO;
        }
        return 0;
}

/* ---- PUT_BLOCK ---- */

static bool put_valid(const struct shoal_wire_put *m)
{
        return block_named_valid(m->key, m->key_len, m->version, m->version_len, m->obj_size,
                                 m->block_size, m->block_index);
}

int shoal_wire_put_encode(uint8_t *out, size_t outlen, const struct shoal_wire_put *m)
{
        if (!put_valid(m))
                return -EMSGSIZE;
        size_t n = PUT_FIXED + (size_t)m->key_len + m->version_len;
        if (outlen < n)
                return -EMSGSIZE;
        put64(out, m->view_version);
        put64(out + 8, m->obj_size);
        put32(out + 16, m->block_size);
        put32(out + 20, m->block_index);
        put16(out + 24, m->key_len);
        put16(out + 26, m->version_len);
        memcpy(out + PUT_FIXED, m->key, m->key_len);
        memcpy(out + PUT_FIXED + m->key_len, m->version, m->version_len);
        return (int)n;
}

int shoal_wire_put_decode(const uint8_t *body, size_t len, struct shoal_wire_put *m)
{
        struct rd r = {.p = body, .len = len};
        memset(m, 0, sizeof(*m));
        m->view_version = rd64(&r);
        m->obj_size = rd64(&r);
        m->block_size = rd32(&r);
        m->block_index = rd32(&r);
        m->key_len = rd16(&r);
        m->version_len = rd16(&r);
        m->key = (const char *)take(&r, m->key_len);
        m->version = (const char *)take(&r, m->version_len);
        if (rd_end(&r) || !put_valid(m)) {
                m->key = m->version = NULL;
                return -EPROTO;
        }
        return 0;
}

uint32_t shoal_wire_put_payload_len(const struct shoal_wire_put *m)
{
        uint32_t len = shoal_block_len(m->obj_size, m->block_size, m->block_index);
        return 4 * shoal_chunk_count(len) + len;
}

/* ---- READ_RESP ---- */

/* The answerer does not know the block's length here, only that the range starts on a chunk,
 * is not empty and stays inside the largest block; the requester checks the range against the
 * one it asked for. */
static bool resp_range_valid(uint32_t offset, uint32_t length)
{
        return length > 0 && offset % SHOAL_CHUNK_SIZE == 0 &&
               (uint64_t)offset + length <= SHOAL_BLOCK_SIZE_MAX;
}

int shoal_wire_read_resp_encode(uint8_t *out, size_t outlen, const struct shoal_block_id *block,
                                uint32_t offset, uint32_t length, const uint32_t *crcs)
{
        if (!resp_range_valid(offset, length))
                return -EMSGSIZE;
        uint32_t n = shoal_chunk_count(length);
        size_t total = READ_RESP_FIXED + 4 * (size_t)n;
        if (outlen < total)
                return -EMSGSIZE;
        memcpy(out, block->b, SHOAL_BLOCK_ID_LEN);
        put32(out + SHOAL_BLOCK_ID_LEN, offset);
        put32(out + SHOAL_BLOCK_ID_LEN + 4, length);
        put32(out + SHOAL_BLOCK_ID_LEN + 8, n);
        for (uint32_t i = 0; i < n; i++)
                put32(out + READ_RESP_FIXED + 4 * (size_t)i, crcs[i]);
        return (int)total;
}

int shoal_wire_read_resp_decode(const uint8_t *body, size_t len, struct shoal_wire_read_resp *m)
{
        struct rd r = {.p = body, .len = len};
        memset(m, 0, sizeof(*m));
        rdbytes(&r, m->block.b, SHOAL_BLOCK_ID_LEN);
        m->offset = rd32(&r);
        m->length = rd32(&r);
        m->n_crcs = rd32(&r);
        if (r.bad || !resp_range_valid(m->offset, m->length) ||
            m->n_crcs != shoal_chunk_count(m->length))
                goto bad;
        m->crcs = take(&r, 4 * (size_t)m->n_crcs);
        if (rd_end(&r))
                goto bad;
        return 0;
bad:
        memset(m, 0, sizeof(*m));
        return -EPROTO;
}

uint32_t shoal_wire_read_resp_crc(const struct shoal_wire_read_resp *m, uint32_t i)
{
        if (!m->crcs || i >= m->n_crcs)
                return 0;
        return get32(m->crcs + 4 * (size_t)i);
}

/* ---- INFO_RESP ---- */

/* Strings on the wire carry no NUL and no control characters (they end up in logs). */
static bool text_valid(const char *s, size_t len)
{
        for (size_t i = 0; i < len; i++) {
                unsigned char c = (unsigned char)s[i];
                if (c < 0x20 || c == 0x7f)
                        return false;
        }
        return true;
}

/* Length of the C string in a fixed array of CAP bytes, or -1 when it is unterminated, longer
 * than MAX or not valid text. */
static long field_len(const char *s, size_t cap, size_t max)
{
        size_t n = strnlen(s, cap);
        if (n == cap || n > max || !text_valid(s, n))
                return -1;
        return (long)n;
}

struct wr {
        uint8_t *p;
        size_t len, off;
        bool bad;
};

static uint8_t *put(struct wr *w, size_t n)
{
        if (w->bad || n > w->len - w->off) {
                w->bad = true;
                return NULL;
        }
        uint8_t *p = w->p + w->off;
        w->off += n;
        return p;
}

static void wr_str8(struct wr *w, const char *s, size_t cap)
{
        long n = field_len(s, cap, INFO_ADDR_MAX);
        uint8_t *p = n < 0 ? NULL : put(w, 1 + (size_t)n);
        if (!p) {
                w->bad = true;
                return;
        }
        p[0] = (uint8_t)n;
        memcpy(p + 1, s, (size_t)n);
}

static void rd_str(struct rd *r, size_t n, size_t max, char *out)
{
        const uint8_t *p = take(r, n);
        if (!p)
                return;
        if (n > max || !text_valid((const char *)p, n)) {
                r->bad = true;
                return;
        }
        memcpy(out, p, n);
        out[n] = '\0';
}

int shoal_wire_info_encode(uint8_t *out, size_t outlen, const struct shoal_wire_info *m)
{
        struct wr w = {.p = out, .len = outlen};
        if (m->n_rdma > INFO_RDMA_MAX || !block_size_valid(m->block_size))
                return -EMSGSIZE;
        wr_str8(&w, m->tcp_addr, sizeof(m->tcp_addr));
        wr_str8(&w, m->iorpc_addr, sizeof(m->iorpc_addr));
        uint8_t *p = put(&w, 1);
        if (p)
                p[0] = m->n_rdma;
        for (unsigned i = 0; i < m->n_rdma; i++)
                wr_str8(&w, m->rdma_addr[i], sizeof(m->rdma_addr[i]));
        p = put(&w, 4);
        if (p)
                put32(p, m->block_size);
        long n = field_len(m->volume_url, sizeof(m->volume_url), INFO_URL_MAX);
        p = n < 0 ? NULL : put(&w, 2 + (size_t)n);
        if (!p || w.bad)
                return -EMSGSIZE;
        put16(p, (uint16_t)n);
        memcpy(p + 2, m->volume_url, (size_t)n);
        return (int)w.off;
}

int shoal_wire_info_decode(const uint8_t *body, size_t len, struct shoal_wire_info *m)
{
        struct rd r = {.p = body, .len = len};
        memset(m, 0, sizeof(*m));
        rd_str(&r, rd8(&r), INFO_ADDR_MAX, m->tcp_addr);
        rd_str(&r, rd8(&r), INFO_ADDR_MAX, m->iorpc_addr);
        m->n_rdma = rd8(&r);
        if (m->n_rdma > INFO_RDMA_MAX)
                goto bad;
        for (unsigned i = 0; i < m->n_rdma; i++)
                rd_str(&r, rd8(&r), INFO_ADDR_MAX, m->rdma_addr[i]);
        m->block_size = rd32(&r);
        rd_str(&r, rd16(&r), INFO_URL_MAX, m->volume_url);
        if (rd_end(&r) || !block_size_valid(m->block_size))
                goto bad;
        return 0;
bad:
        memset(m, 0, sizeof(*m));
        return -EPROTO;
}

/* ---- ERROR ---- */

static bool reason_valid(const char *s, size_t len)
{
        if (len > ERROR_MAX)
                return false;
        for (size_t i = 0; i < len; i++)
                if ((unsigned char)s[i] < 0x20 || (unsigned char)s[i] > 0x7e)
                        return false;
        return true;
}

int shoal_wire_error_encode(uint8_t *out, size_t outlen, const char *reason)
{
        size_t n = reason ? strnlen(reason, ERROR_MAX + 1) : 0;
        if (!reason_valid(reason, n) || outlen < n)
                return -EMSGSIZE;
        if (n)
                memcpy(out, reason, n);
        return (int)n;
}

int shoal_wire_error_decode(const uint8_t *body, size_t len, char *reason, size_t reasonlen)
{
        if (reasonlen == 0)
                return -EMSGSIZE;
        reason[0] = '\0';
        if ((!body && len) || !reason_valid((const char *)body, len))
                return -EPROTO;
        /* The text is informational: a short buffer gets a truncated, terminated copy. */
        size_t n = len < reasonlen - 1 ? len : reasonlen - 1;
        if (n)
                memcpy(reason, body, n);
        reason[n] = '\0';
        return 0;
}

int shoal_wire_msg_decode(const uint8_t *msg, size_t len, struct shoal_wire_hdr *h)
{
        if (len < SHOAL_WIRE_HDR_LEN || shoal_wire_hdr_decode(msg, h) || h->payload_len ||
            SHOAL_WIRE_HDR_LEN + h->body_len != len ||
            !shoal_wire_crc_ok(msg, msg + SHOAL_WIRE_HDR_LEN, h->body_len))
                return -EPROTO;
        return 0;
}
