/* libFuzzer target for the wire codec (src/wire/wire.c).
 *
 * The input is read four ways:
 *  1. as a frame, 32-byte header then body: header decode, CRC check, the body decoder for the
 *     header's type (on the body bytes present, CRC good or not, so the fuzzer reaches the body
 *     decoders without forging CRCs);
 *  2. as a bare body handed to every body decoder;
 *  3. as the fields of a message handed to every encoder;
 *  4. as one RDMA message (shoal_wire_msg_decode), which must agree with the stream reassembler.
 * Whatever decodes must re-encode to exactly the input bytes (every message has one encoding)
 * and decode again to the same values; whatever encodes must decode back to what was encoded.
 * Any mismatch aborts. */
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/block.h"
#include "wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                   \
        do {                                                                                       \
                if (!(x)) {                                                                        \
                        fprintf(stderr, "fuzz_wire: check failed at line %d: %s\n", __LINE__, #x); \
                        abort();                                                                   \
                }                                                                                  \
        } while (0)

static uint8_t out[8192];
static uint8_t out2[8192];

static void same_read(const struct shoal_wire_read *a, const struct shoal_wire_read *b)
{
        CHECK(a->view_version == b->view_version && a->obj_size == b->obj_size);
        CHECK(a->block_size == b->block_size && a->block_index == b->block_index);
        CHECK(a->offset == b->offset && a->length == b->length);
        CHECK(a->rdma_addr == b->rdma_addr && a->rdma_key == b->rdma_key);
        CHECK(a->key_len == b->key_len && a->version_len == b->version_len);
        CHECK(!memcmp(a->key, b->key, a->key_len));
        CHECK(!memcmp(a->version, b->version, a->version_len));
        /* What a server relies on after a successful decode. */
        CHECK(shoal_key_valid(a->key, a->key_len));
        CHECK(shoal_version_valid(a->version, a->version_len));
        uint32_t blen = shoal_block_len(a->obj_size, a->block_size, a->block_index);
        CHECK(blen > 0 && shoal_range_valid(blen, a->offset, a->length));
}

static void same_resp(const struct shoal_wire_read_resp *a, const struct shoal_wire_read_resp *b)
{
        CHECK(shoal_block_id_eq(&a->block, &b->block));
        CHECK(a->offset == b->offset && a->length == b->length && a->n_crcs == b->n_crcs);
        CHECK(a->n_crcs == shoal_chunk_count(a->length) && a->n_crcs <= SHOAL_MAX_CHUNKS);
        CHECK(a->offset % SHOAL_CHUNK_SIZE == 0 &&
              (uint64_t)a->offset + a->length <= SHOAL_BLOCK_SIZE_MAX);
        for (uint32_t i = 0; i < a->n_crcs; i++)
                CHECK(shoal_wire_read_resp_crc(a, i) == shoal_wire_read_resp_crc(b, i));
}

static void same_info(const struct shoal_wire_info *a, const struct shoal_wire_info *b)
{
        CHECK(!strcmp(a->tcp_addr, b->tcp_addr) && !strcmp(a->iorpc_addr, b->iorpc_addr));
        CHECK(a->n_rdma == b->n_rdma && a->n_rdma <= 4);
        for (unsigned i = 0; i < a->n_rdma; i++)
                CHECK(!strcmp(a->rdma_addr[i], b->rdma_addr[i]));
        CHECK(a->block_size == b->block_size && !strcmp(a->volume_url, b->volume_url));
}

/* Re-encoding a decoded body must give back exactly IN[0..LEN). */
static void same_bytes(int n, const uint8_t *in, size_t len)
{
        CHECK(n >= 0 && (size_t)n == len);
        CHECK(!memcmp(out, in, len));
}

/* Every body decoder on BODY; the one for TYPE (0: all) is the one a receiver would run. */
static void decode_bodies(const uint8_t *body, size_t len)
{
        struct shoal_wire_hello hello, hello2;
        if (!shoal_wire_hello_decode(body, len, &hello)) {
                same_bytes(shoal_wire_hello_encode(out, sizeof(out), &hello), body, len);
                CHECK(!shoal_wire_hello_decode(out, len, &hello2));
                CHECK(!memcmp(&hello, &hello2, sizeof(hello)));
                CHECK(len <= shoal_wire_body_max(SHOAL_MSG_HELLO));
        }

        struct shoal_wire_hello_ack ack, ack2;
        if (!shoal_wire_hello_ack_decode(body, len, &ack)) {
                same_bytes(shoal_wire_hello_ack_encode(out, sizeof(out), &ack), body, len);
                CHECK(!shoal_wire_hello_ack_decode(out, len, &ack2));
                CHECK(ack.version == ack2.version && ack.max_inflight == ack2.max_inflight);
                CHECK(!memcmp(ack.nonce, ack2.nonce, sizeof(ack.nonce)));
                CHECK(!strcmp(ack.member_id, ack2.member_id));
                CHECK(strlen(ack.member_id) <= SHOAL_WIRE_MEMBER_ID_MAX);
                CHECK(strcspn(ack.member_id, "/ \\:") == strlen(ack.member_id));
                CHECK(len <= shoal_wire_body_max(SHOAL_MSG_HELLO_ACK));
        }

        struct shoal_wire_auth auth, auth2;
        if (!shoal_wire_auth_decode(body, len, &auth)) {
                same_bytes(shoal_wire_auth_encode(out, sizeof(out), &auth), body, len);
                CHECK(!shoal_wire_auth_decode(out, len, &auth2));
                CHECK(!memcmp(&auth, &auth2, sizeof(auth)));
        }

        struct shoal_wire_read rd, rd2;
        if (!shoal_wire_read_decode(body, len, &rd)) {
                same_read(&rd, &rd);
                CHECK(rd.key >= (const char *)body &&
                      rd.key + rd.key_len <= (const char *)body + len);
                same_bytes(shoal_wire_read_encode(out, sizeof(out), &rd), body, len);
                CHECK(!shoal_wire_read_decode(out, len, &rd2));
                same_read(&rd, &rd2);
                CHECK(len <= shoal_wire_body_max(SHOAL_MSG_READ));
        }

        struct shoal_wire_put pu, pu2;
        if (!shoal_wire_put_decode(body, len, &pu)) {
                CHECK(pu.key >= (const char *)body &&
                      pu.key + pu.key_len <= (const char *)body + len);
                CHECK(shoal_wire_put_payload_len(&pu) <= SHOAL_WIRE_PUT_PAYLOAD_MAX);
                same_bytes(shoal_wire_put_encode(out, sizeof(out), &pu), body, len);
                CHECK(!shoal_wire_put_decode(out, len, &pu2));
                CHECK(pu.obj_size == pu2.obj_size && pu.block_index == pu2.block_index &&
                      pu.key_len == pu2.key_len && pu.version_len == pu2.version_len);
                CHECK(len <= shoal_wire_body_max(SHOAL_MSG_PUT_BLOCK));
        }

        struct shoal_wire_read_resp rr, rr2;
        if (!shoal_wire_read_resp_decode(body, len, &rr)) {
                static uint32_t crcs[SHOAL_MAX_CHUNKS];
                for (uint32_t i = 0; i < rr.n_crcs; i++)
                        crcs[i] = shoal_wire_read_resp_crc(&rr, i);
                same_bytes(shoal_wire_read_resp_encode(out, sizeof(out), &rr.block, rr.offset,
                                                       rr.length, crcs),
                           body, len);
                CHECK(!shoal_wire_read_resp_decode(out, len, &rr2));
                same_resp(&rr, &rr2);
                CHECK(len <= shoal_wire_body_max(SHOAL_MSG_READ_RESP));
        }

        static struct shoal_wire_info info, info2;
        if (!shoal_wire_info_decode(body, len, &info)) {
                same_bytes(shoal_wire_info_encode(out, sizeof(out), &info), body, len);
                CHECK(!shoal_wire_info_decode(out, len, &info2));
                same_info(&info, &info2);
                CHECK(len <= shoal_wire_body_max(SHOAL_MSG_INFO_RESP));
        }

        char reason[256], reason2[256];
        if (!shoal_wire_error_decode(body, len, reason, sizeof(reason))) {
                CHECK(strlen(reason) == len);
                same_bytes(shoal_wire_error_encode(out, sizeof(out), reason), body, len);
                CHECK(!shoal_wire_error_decode(out, len, reason2, sizeof(reason2)));
                CHECK(!strcmp(reason, reason2));
                CHECK(len <= shoal_wire_body_max(SHOAL_MSG_ERROR));
        }
}

static void decode_frame(const uint8_t *data, size_t size)
{
        struct shoal_wire_hdr h, h2;
        int rc = shoal_wire_hdr_decode(data, &h);
        CHECK(rc == 0 || rc == -EPROTO || rc == -EMSGSIZE);
        if (rc)
                return;
        CHECK(h.body_len <= shoal_wire_body_max(h.type));
        CHECK(h.payload_len <= (h.type == SHOAL_MSG_PUT_BLOCK ? SHOAL_WIRE_PUT_PAYLOAD_MAX
                                                              : SHOAL_WIRE_PAYLOAD_MAX));
        CHECK(h.type == SHOAL_MSG_READ_RESP || h.type == SHOAL_MSG_PUT_BLOCK || h.payload_len == 0);

        const uint8_t *body = data + SHOAL_WIRE_HDR_LEN;
        size_t avail = size - SHOAL_WIRE_HDR_LEN;
        size_t blen = avail < h.body_len ? avail : h.body_len;
        bool complete = avail >= h.body_len;
        bool crc = complete && shoal_wire_crc_ok(data, body, h.body_len);

        /* The header re-encodes to the same 28 bytes, and to the same CRC when it was right. */
        if (complete) {
                shoal_wire_hdr_encode(out2, &h, body);
                CHECK(!memcmp(out2, data, crc ? SHOAL_WIRE_HDR_LEN : SHOAL_WIRE_HDR_LEN - 4));
                CHECK(shoal_wire_crc_ok(out2, body, h.body_len));
                CHECK(!shoal_wire_hdr_decode(out2, &h2));
                CHECK(h.version == h2.version && h.type == h2.type && h.flags == h2.flags &&
                      h.status == h2.status && h.body_len == h2.body_len &&
                      h.payload_len == h2.payload_len && h.id == h2.id);
        }

        /* The decoder a receiver runs for this type. */
        switch (h.type) {
        case SHOAL_MSG_HELLO: {
                struct shoal_wire_hello m;
                (void)shoal_wire_hello_decode(body, blen, &m);
                break;
        }
        case SHOAL_MSG_HELLO_ACK: {
                struct shoal_wire_hello_ack m;
                (void)shoal_wire_hello_ack_decode(body, blen, &m);
                break;
        }
        case SHOAL_MSG_AUTH:
        case SHOAL_MSG_AUTH_OK: {
                struct shoal_wire_auth m;
                (void)shoal_wire_auth_decode(body, blen, &m);
                break;
        }
        case SHOAL_MSG_READ:
        case SHOAL_MSG_CORRUPT: {
                struct shoal_wire_read m;
                if (!shoal_wire_read_decode(body, blen, &m))
                        same_read(&m, &m);
                break;
        }
        case SHOAL_MSG_PUT_BLOCK: {
                struct shoal_wire_put m;
                if (!shoal_wire_put_decode(body, blen, &m))
                        CHECK(shoal_wire_put_payload_len(&m) <= SHOAL_WIRE_PUT_PAYLOAD_MAX);
                break;
        }
        case SHOAL_MSG_READ_RESP: {
                struct shoal_wire_read_resp m;
                if (!shoal_wire_read_resp_decode(body, blen, &m))
                        same_resp(&m, &m);
                break;
        }
        case SHOAL_MSG_ERROR: {
                char reason[16]; /* small on purpose: the truncating path */
                if (!shoal_wire_error_decode(body, blen, reason, sizeof(reason)))
                        CHECK(strlen(reason) < sizeof(reason));
                break;
        }
        case SHOAL_MSG_INFO_RESP: {
                static struct shoal_wire_info m;
                (void)shoal_wire_info_decode(body, blen, &m);
                break;
        }
        default:
                break;
        }
}

/* ---- encoders driven by the input ---- */

struct src {
        const uint8_t *p;
        size_t len;
};

static uint64_t take_u(struct src *s, int bytes)
{
        uint64_t v = 0;
        for (int i = 0; i < bytes && s->len; i++, s->p++, s->len--)
                v |= (uint64_t)s->p[0] << (8 * i);
        return v;
}

/* Fields whose interesting values are few: pick among them with one byte. */
static uint32_t pick_block_size(struct src *s)
{
        uint8_t b = (uint8_t)take_u(s, 1);
        if (b < 200)
                return SHOAL_BLOCK_SIZE_MIN << (b % 11); /* 64 KiB .. 64 MiB */
        return (uint32_t)take_u(s, 4);
}

static void encode_fields(const uint8_t *data, size_t size)
{
        struct src s = {data, size};
        static char key[SHOAL_KEY_MAX + 8], ver[SHOAL_VERSION_MAX + 8];

        struct shoal_wire_read m, d;
        memset(&m, 0, sizeof(m));
        m.view_version = take_u(&s, 8);
        m.obj_size = take_u(&s, 8);
        m.block_size = pick_block_size(&s);
        m.block_index = (uint32_t)take_u(&s, 4);
        m.offset = (uint32_t)take_u(&s, 4);
        m.length = (uint32_t)take_u(&s, 4);
        m.rdma_addr = take_u(&s, 8);
        m.rdma_key = take_u(&s, 8);
        m.key_len = (uint16_t)(take_u(&s, 2) % (SHOAL_KEY_MAX + 2));
        m.version_len = (uint16_t)(take_u(&s, 1) % (SHOAL_VERSION_MAX + 2));
        for (size_t i = 0; i < m.key_len; i++)
                key[i] = (char)(take_u(&s, 1) | (s.len ? 0 : 'k'));
        for (size_t i = 0; i < m.version_len; i++)
                ver[i] = (char)(take_u(&s, 1) | (s.len ? 0 : 'v'));
        m.key = key;
        m.version = ver;
        int n = shoal_wire_read_encode(out, sizeof(out), &m);
        CHECK(n == -EMSGSIZE || (n > 0 && (uint32_t)n <= shoal_wire_body_max(SHOAL_MSG_READ)));
        if (n > 0) {
                CHECK(!shoal_wire_read_decode(out, (size_t)n, &d));
                same_read(&m, &d);
        }

        /* READ_RESP from the same offset and length. */
        static uint32_t crcs[SHOAL_MAX_CHUNKS];
        for (uint32_t i = 0; i < SHOAL_MAX_CHUNKS; i++)
                crcs[i] = (uint32_t)(m.view_version * (i + 1));
        struct shoal_block_id id;
        memcpy(id.b, &m.rdma_addr, 8);
        memcpy(id.b + 8, &m.rdma_key, 8);
        n = shoal_wire_read_resp_encode(out, sizeof(out), &id, m.offset, m.length, crcs);
        CHECK(n == -EMSGSIZE || (n > 0 && (uint32_t)n <= shoal_wire_body_max(SHOAL_MSG_READ_RESP)));
        if (n > 0) {
                struct shoal_wire_read_resp r;
                CHECK(!shoal_wire_read_resp_decode(out, (size_t)n, &r));
                CHECK(shoal_block_id_eq(&r.block, &id) && r.offset == m.offset &&
                      r.length == m.length);
                for (uint32_t i = 0; i < r.n_crcs; i++)
                        CHECK(shoal_wire_read_resp_crc(&r, i) == crcs[i]);
        }

        /* INFO_RESP: strings cut from the key bytes (may hold anything, NUL included). */
        static struct shoal_wire_info info, info2;
        memset(&info, 0, sizeof(info));
        size_t k = 0;
#define FILL(field, cap)                                                                    \
        do {                                                                                \
                size_t want_ = m.key_len ? (size_t)(uint8_t)key[k % m.key_len] % (cap) : 0; \
                for (size_t i_ = 0; i_ < want_ && k < m.key_len; i_++)                      \
                        (field)[i_] = key[k++];                                             \
        } while (0)
        FILL(info.tcp_addr, sizeof(info.tcp_addr));
        FILL(info.iorpc_addr, sizeof(info.iorpc_addr));
        info.n_rdma = (uint8_t)(m.version_len % 6);
        for (int i = 0; i < 4; i++)
                FILL(info.rdma_addr[i], sizeof(info.rdma_addr[i]));
        FILL(info.volume_url, sizeof(info.volume_url));
#undef FILL
        info.block_size = m.block_size;
        n = shoal_wire_info_encode(out, sizeof(out), &info);
        CHECK(n == -EMSGSIZE || (n > 0 && (uint32_t)n <= shoal_wire_body_max(SHOAL_MSG_INFO_RESP)));
        if (n > 0) {
                CHECK(!shoal_wire_info_decode(out, (size_t)n, &info2));
                same_info(&info, &info2);
        }

        /* ERROR from the version bytes, NUL-terminated. */
        char reason[SHOAL_VERSION_MAX + 8], back[256];
        memcpy(reason, ver, m.version_len);
        reason[m.version_len] = '\0';
        n = shoal_wire_error_encode(out, sizeof(out), reason);
        CHECK(n == -EMSGSIZE || (n >= 0 && (uint32_t)n <= shoal_wire_body_max(SHOAL_MSG_ERROR)));
        if (n >= 0) {
                CHECK(!shoal_wire_error_decode(out, (size_t)n, back, sizeof(back)));
                CHECK(!strcmp(back, reason));
        }

        /* Handshake bodies from the first bytes. */
        struct shoal_wire_hello hello, hello2;
        memset(&hello, 0, sizeof(hello));
        hello.min_version = (uint8_t)(m.view_version & 3);
        hello.max_version = (uint8_t)((m.view_version >> 8) & 3);
        hello.service = (uint8_t)((m.view_version >> 16) & 7);
        memcpy(hello.nonce, key, m.key_len < 32 ? m.key_len : 32);
        n = shoal_wire_hello_encode(out, sizeof(out), &hello);
        CHECK(n == -EMSGSIZE || n == (int)shoal_wire_body_max(SHOAL_MSG_HELLO));
        if (n > 0) {
                CHECK(!shoal_wire_hello_decode(out, (size_t)n, &hello2));
                CHECK(!memcmp(&hello, &hello2, sizeof(hello)));
        }
        struct shoal_wire_hello_ack ack, ack2;
        memset(&ack, 0, sizeof(ack));
        ack.version = (uint8_t)(m.obj_size & 3);
        ack.max_inflight = (uint32_t)(m.obj_size >> 8) & 0xfff;
        memcpy(ack.nonce, hello.nonce, 32);
        /* The member id from the key bytes: any text, the encoder decides what is valid. */
        size_t idn = m.key_len < sizeof(ack.member_id) ? m.key_len : sizeof(ack.member_id) - 1;
        memcpy(ack.member_id, key, idn);
        n = shoal_wire_hello_ack_encode(out, sizeof(out), &ack);
        CHECK(n == -EMSGSIZE ||
              (n >= 38 && (uint32_t)n <= shoal_wire_body_max(SHOAL_MSG_HELLO_ACK)));
        if (n > 0) {
                CHECK(!shoal_wire_hello_ack_decode(out, (size_t)n, &ack2));
                CHECK(ack.version == ack2.version && ack.max_inflight == ack2.max_inflight &&
                      !memcmp(ack.nonce, ack2.nonce, 32) && !strcmp(ack.member_id, ack2.member_id));
        }
}

/* The whole input as one RDMA message: accepted exactly when it is one whole frame without
 * payload that the stream reassembler would also take. */
static void decode_message(const uint8_t *data, size_t size)
{
        struct shoal_wire_hdr h, h2;
        if (shoal_wire_msg_decode(data, size, &h))
                return;
        CHECK(size == SHOAL_WIRE_HDR_LEN + h.body_len && h.payload_len == 0);
        CHECK(shoal_wire_crc_ok(data, data + SHOAL_WIRE_HDR_LEN, h.body_len));
        CHECK(shoal_wire_frame_need(data, size, h.body_len, false, &h2) == 0);
        CHECK(!memcmp(&h, &h2, sizeof(h)));
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        decode_message(data, size);
        if (size >= SHOAL_WIRE_HDR_LEN)
                decode_frame(data, size);
        decode_bodies(data, size);
        encode_fields(data, size);
        return 0;
}
