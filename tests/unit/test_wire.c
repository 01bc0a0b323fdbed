/* The wire codec (src/wire/wire.c): round trips of every message, golden bytes, a table of
 * malformed frames each rejected with the right error, truncation at every length, proofs. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/block.h"
#include "common/crc32c.h"
#include "wire/wire.h"

#define MiB (1024u * 1024u)

/* Test-only code for "the header CRC does not match" (shoal_wire_crc_ok is a predicate). */
#define E_CRC (-EBADMSG)

static const char KEY[] = "dir/obj.bin";
static const char VER[] = "\"etag-1\"";
/* 10 MiB + 100000 bytes in 4 MiB blocks: block 2 is 2 MiB + 100000 bytes (34 chunks, the last
 * one short). */
#define OBJ_SIZE (10ull * MiB + 100000)

static void le16(uint8_t *p, uint16_t v)
{
        p[0] = (uint8_t)v;
        p[1] = (uint8_t)(v >> 8);
}

static void le32(uint8_t *p, uint32_t v)
{
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static void le64(uint8_t *p, uint64_t v)
{
        for (int i = 0; i < 8; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t rdle32(const uint8_t *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- valid messages ---- */

static void mk_read(struct shoal_wire_read *m)
{
        memset(m, 0, sizeof(*m));
        m->view_version = 7;
        m->obj_size = OBJ_SIZE;
        m->block_size = 4 * MiB;
        m->block_index = 0;
        m->offset = SHOAL_CHUNK_SIZE;
        m->length = 2 * SHOAL_CHUNK_SIZE;
        m->key = KEY;
        m->key_len = (uint16_t)strlen(KEY);
        m->version = VER;
        m->version_len = (uint16_t)strlen(VER);
}

static void mk_hello(struct shoal_wire_hello *m)
{
        memset(m, 0, sizeof(*m));
        m->min_version = SHOAL_WIRE_VERSION;
        m->max_version = SHOAL_WIRE_VERSION;
        m->service = 2;
        for (int i = 0; i < SHOAL_WIRE_NONCE_LEN; i++)
                m->nonce[i] = (uint8_t)(i * 7 + 1);
}

static void mk_hello_ack(struct shoal_wire_hello_ack *m)
{
        memset(m, 0, sizeof(*m));
        m->version = SHOAL_WIRE_VERSION;
        for (int i = 0; i < SHOAL_WIRE_NONCE_LEN; i++)
                m->nonce[i] = (uint8_t)(255 - i);
        m->max_inflight = 2048;
        strcpy(m->member_id, "0123456789abcdefABCDEF-_.9876543"); /* the longest: 32 */
}

static void mk_info(struct shoal_wire_info *m, unsigned n_rdma)
{
        memset(m, 0, sizeof(*m));
        strcpy(m->tcp_addr, "10.0.0.1:4000");
        strcpy(m->iorpc_addr, "10.0.0.1:4001");
        m->n_rdma = (uint8_t)n_rdma;
        for (unsigned i = 0; i < n_rdma; i++)
                snprintf(m->rdma_addr[i], sizeof(m->rdma_addr[i]), "192.168.%u.1:%u", i, 5000 + i);
        m->block_size = 4 * MiB;
        strcpy(m->volume_url, "s3://bucket/prefix");
}

static struct shoal_block_id mk_block(void)
{
        struct shoal_block_id b;
        for (int i = 0; i < SHOAL_BLOCK_ID_LEN; i++)
                b.b[i] = (uint8_t)(0xa0 + i);
        return b;
}

/* ---- frames ---- */

struct frame {
        struct shoal_wire_hdr h;
        uint8_t hdr[SHOAL_WIRE_HDR_LEN];
        uint8_t body[8192];
        size_t body_len;
};

/* Header from F->h with body_len = F->body_len and a fresh CRC. */
static void seal(struct frame *f)
{
        f->h.body_len = (uint32_t)f->body_len;
        shoal_wire_hdr_encode(f->hdr, &f->h, f->body);
}

/* Keeps the raw header bytes (after a raw edit) but recomputes the CRC. */
static void recrc(struct frame *f)
{
        uint32_t crc = shoal_crc32c(0, f->hdr, SHOAL_WIRE_HDR_LEN - 4);
        crc = shoal_crc32c(crc, f->body, f->body_len);
        le32(f->hdr + 28, crc);
}

/* A valid frame of TYPE with a typical body. */
static void mk_frame(struct frame *f, uint8_t type)
{
        memset(f, 0, sizeof(*f));
        f->h.version = SHOAL_WIRE_VERSION;
        f->h.type = type;
        f->h.id = 0x1122334455667788ull;
        int n = 0;
        switch (type) {
        case SHOAL_MSG_HELLO: {
                struct shoal_wire_hello m;
                mk_hello(&m);
                n = shoal_wire_hello_encode(f->body, sizeof(f->body), &m);
                break;
        }
        case SHOAL_MSG_HELLO_ACK: {
                struct shoal_wire_hello_ack m;
                mk_hello_ack(&m);
                f->h.flags = SHOAL_WF_AUTH_REQUIRED;
                n = shoal_wire_hello_ack_encode(f->body, sizeof(f->body), &m);
                break;
        }
        case SHOAL_MSG_AUTH:
        case SHOAL_MSG_AUTH_OK: {
                struct shoal_wire_auth m;
                memset(m.proof, type == SHOAL_MSG_AUTH ? 0x33 : 0x44, sizeof(m.proof));
                n = shoal_wire_auth_encode(f->body, sizeof(f->body), &m);
                break;
        }
        case SHOAL_MSG_READ:
        case SHOAL_MSG_CORRUPT: {
                struct shoal_wire_read m;
                mk_read(&m);
                if (type == SHOAL_MSG_READ)
                        f->h.flags = SHOAL_WF_FILL;
                n = shoal_wire_read_encode(f->body, sizeof(f->body), &m);
                break;
        }
        case SHOAL_MSG_READ_RESP: {
                struct shoal_block_id b = mk_block();
                uint32_t crcs[2] = {0xdeadbeef, 0x01020304};
                n = shoal_wire_read_resp_encode(f->body, sizeof(f->body), &b, SHOAL_CHUNK_SIZE,
                                                2 * SHOAL_CHUNK_SIZE, crcs);
                f->h.payload_len = 2 * SHOAL_CHUNK_SIZE;
                break;
        }
        case SHOAL_MSG_ERROR:
                f->h.status = SHOAL_ST_NOT_OWNER;
                n = shoal_wire_error_encode(f->body, sizeof(f->body), "view 7 names member b");
                break;
        case SHOAL_MSG_PING:
        case SHOAL_MSG_PONG:
                memcpy(f->body, "12345678", 8);
                n = 8;
                break;
        case SHOAL_MSG_INFO_RESP: {
                struct shoal_wire_info m;
                mk_info(&m, 2);
                n = shoal_wire_info_encode(f->body, sizeof(f->body), &m);
                break;
        }
        default: /* INFO, GOAWAY: empty bodies */
                break;
        }
        assert_true(n >= 0);
        f->body_len = (size_t)n;
        seal(f);
}

static int decode_body(uint8_t type, const uint8_t *body, size_t len)
{
        switch (type) {
        case SHOAL_MSG_HELLO: {
                struct shoal_wire_hello m;
                return shoal_wire_hello_decode(body, len, &m);
        }
        case SHOAL_MSG_HELLO_ACK: {
                struct shoal_wire_hello_ack m;
                return shoal_wire_hello_ack_decode(body, len, &m);
        }
        case SHOAL_MSG_AUTH:
        case SHOAL_MSG_AUTH_OK: {
                struct shoal_wire_auth m;
                return shoal_wire_auth_decode(body, len, &m);
        }
        case SHOAL_MSG_READ:
        case SHOAL_MSG_CORRUPT: {
                struct shoal_wire_read m;
                return shoal_wire_read_decode(body, len, &m);
        }
        case SHOAL_MSG_READ_RESP: {
                struct shoal_wire_read_resp m;
                return shoal_wire_read_resp_decode(body, len, &m);
        }
        case SHOAL_MSG_ERROR: {
                char reason[256];
                return shoal_wire_error_decode(body, len, reason, sizeof(reason));
        }
        case SHOAL_MSG_INFO_RESP: {
                struct shoal_wire_info m;
                return shoal_wire_info_decode(body, len, &m);
        }
        default:
                return 0; /* opaque or empty bodies: the header's maximum is the check */
        }
}

/* What a receiver does: header, then CRC, then the body decoder. */
static int check_frame(const struct frame *f)
{
        struct shoal_wire_hdr h;
        int rc = shoal_wire_hdr_decode(f->hdr, &h);
        if (rc)
                return rc;
        if (h.body_len != f->body_len)
                return -EINVAL; /* a test bug, never an expected result */
        if (!shoal_wire_crc_ok(f->hdr, f->body, f->body_len))
                return E_CRC;
        return decode_body(h.type, f->body, f->body_len);
}

static const uint8_t ALL_TYPES[] = {
        SHOAL_MSG_HELLO,  SHOAL_MSG_HELLO_ACK, SHOAL_MSG_AUTH,      SHOAL_MSG_AUTH_OK,
        SHOAL_MSG_READ,   SHOAL_MSG_READ_RESP, SHOAL_MSG_ERROR,     SHOAL_MSG_PING,
        SHOAL_MSG_PONG,   SHOAL_MSG_INFO,      SHOAL_MSG_INFO_RESP, SHOAL_MSG_CORRUPT,
        SHOAL_MSG_GOAWAY,
};
#define N_TYPES (sizeof(ALL_TYPES) / sizeof(ALL_TYPES[0]))

/* ---- header ---- */

static void test_hdr_golden(void **state)
{
        (void)state;
        struct shoal_wire_hdr h = {.version = SHOAL_WIRE_VERSION,
                                   .type = SHOAL_MSG_READ_RESP,
                                   .flags = SHOAL_WF_RDMA_WRITTEN,
                                   .status = 0,
                                   .body_len = 3,
                                   .payload_len = 0,
                                   .id = 0x0102030405060708ull};
        uint8_t body[3] = {1, 2, 3};
        uint8_t out[SHOAL_WIRE_HDR_LEN];
        h.body_len = 3;
        shoal_wire_hdr_encode(out, &h, body);
        const uint8_t want[28] = {0x53, 0x48, 0x4c, 0x31, 2, 17, 4, 0, 0, 0, 0, 0, 3, 0,
                                  0,    0,    0,    0,    0, 0,  8, 7, 6, 5, 4, 3, 2, 1};
        assert_memory_equal(out, want, sizeof(want));
        uint32_t crc = shoal_crc32c(shoal_crc32c(0, want, 28), body, 3);
        assert_int_equal(rdle32(out + 28), crc);
        assert_true(shoal_wire_crc_ok(out, body, 3));
}

static void test_hdr_roundtrip_all_types(void **state)
{
        (void)state;
        for (size_t i = 0; i < N_TYPES; i++) {
                struct frame f;
                mk_frame(&f, ALL_TYPES[i]);
                struct shoal_wire_hdr h;
                assert_int_equal(shoal_wire_hdr_decode(f.hdr, &h), 0);
                assert_int_equal(h.version, SHOAL_WIRE_VERSION);
                assert_int_equal(h.type, ALL_TYPES[i]);
                assert_int_equal(h.flags, f.h.flags);
                assert_int_equal(h.status, f.h.status);
                assert_int_equal(h.body_len, f.body_len);
                assert_int_equal(h.payload_len, f.h.payload_len);
                assert_true(h.id == 0x1122334455667788ull);
                assert_true(h.body_len <= shoal_wire_body_max(h.type));
                assert_true(shoal_wire_crc_ok(f.hdr, f.body, f.body_len));
                assert_int_equal(check_frame(&f), 0);
        }
        /* Largest legal payload, and an RDMA-written answer with none. */
        struct frame f;
        mk_frame(&f, SHOAL_MSG_READ_RESP);
        f.h.payload_len = SHOAL_WIRE_PAYLOAD_MAX;
        seal(&f);
        assert_int_equal(check_frame(&f), 0);
        f.h.payload_len = 0;
        f.h.flags = SHOAL_WF_RDMA_WRITTEN;
        seal(&f);
        assert_int_equal(check_frame(&f), 0);
        /* Every status on an ERROR. */
        for (uint32_t st = 1; st < SHOAL_ST__MAX; st++) {
                mk_frame(&f, SHOAL_MSG_ERROR);
                f.h.status = st;
                seal(&f);
                assert_int_equal(check_frame(&f), 0);
        }
}

static void test_body_max(void **state)
{
        (void)state;
        const uint8_t tiny[] = {SHOAL_MSG_HELLO,   SHOAL_MSG_HELLO_ACK, SHOAL_MSG_AUTH,
                                SHOAL_MSG_AUTH_OK, SHOAL_MSG_PING,      SHOAL_MSG_PONG,
                                SHOAL_MSG_GOAWAY};
        for (size_t i = 0; i < sizeof(tiny); i++)
                assert_true(shoal_wire_body_max(tiny[i]) <= 128);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_HELLO), 35);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_HELLO_ACK), 70);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_AUTH), 32);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_AUTH_OK), 32);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_READ),
                         52 + SHOAL_KEY_MAX + SHOAL_VERSION_MAX);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_CORRUPT),
                         shoal_wire_body_max(SHOAL_MSG_READ));
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_READ_RESP), 28 + 4 * SHOAL_MAX_CHUNKS);
        assert_true(shoal_wire_body_max(SHOAL_MSG_ERROR) <= 256);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_INFO), 0);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_INFO_RESP), 1414);
        assert_int_equal(shoal_wire_body_max(0), 0);
        assert_int_equal(shoal_wire_body_max(5), 0);
        assert_int_equal(shoal_wire_body_max(255), 0);
}

static void test_status_str(void **state)
{
        (void)state;
        assert_string_equal(shoal_status_str(SHOAL_ST_NOT_OWNER), "not owner");
        assert_string_equal(shoal_status_str(SHOAL_ST_RPC_DISABLED), "rpc disabled");
        assert_string_equal(shoal_status_str(SHOAL_ST__MAX), "unknown status");
        assert_string_equal(shoal_status_str(0xffffffffu), "unknown status");
        for (uint32_t st = 0; st < SHOAL_ST__MAX; st++) {
                assert_non_null(shoal_status_str(st));
                assert_string_not_equal(shoal_status_str(st), "unknown status");
        }
}

/* ---- body round trips ---- */

static void test_hello_roundtrip(void **state)
{
        (void)state;
        struct shoal_wire_hello m, d;
        uint8_t buf[64];
        mk_hello(&m);
        for (uint8_t svc = 1; svc <= 3; svc++) {
                m.service = svc;
                m.max_version = (uint8_t)(svc + 1);
                int n = shoal_wire_hello_encode(buf, sizeof(buf), &m);
                assert_int_equal(n, 35);
                assert_int_equal(shoal_wire_hello_decode(buf, (size_t)n, &d), 0);
                assert_memory_equal(&m, &d, sizeof(m));
        }
        assert_int_equal(shoal_wire_hello_encode(buf, 34, &m), -EMSGSIZE);
        m.service = 0;
        assert_int_equal(shoal_wire_hello_encode(buf, sizeof(buf), &m), -EMSGSIZE);
}

static void test_hello_ack_roundtrip(void **state)
{
        (void)state;
        struct shoal_wire_hello_ack m, d;
        uint8_t buf[128];
        mk_hello_ack(&m);
        int n = shoal_wire_hello_ack_encode(buf, sizeof(buf), &m);
        assert_int_equal(n, 70);
        assert_int_equal(shoal_wire_hello_ack_decode(buf, (size_t)n, &d), 0);
        assert_int_equal(d.version, m.version);
        assert_memory_equal(d.nonce, m.nonce, sizeof(m.nonce));
        assert_int_equal(d.max_inflight, 2048);
        assert_string_equal(d.member_id, m.member_id);
        /* Layout: version, nonce, max_inflight, u8 id length, id. */
        assert_int_equal(buf[0], SHOAL_WIRE_VERSION);
        assert_int_equal(rdle32(buf + 33), 2048);
        assert_int_equal(buf[37], 32);
        assert_memory_equal(buf + 38, m.member_id, 32);
        assert_int_equal(shoal_wire_hello_ack_encode(buf, 69, &m), -EMSGSIZE);
        /* An empty member id is allowed: 38 bytes. */
        m.member_id[0] = '\0';
        n = shoal_wire_hello_ack_encode(buf, sizeof(buf), &m);
        assert_int_equal(n, 38);
        assert_int_equal(shoal_wire_hello_ack_decode(buf, (size_t)n, &d), 0);
        assert_string_equal(d.member_id, "");
        /* Ids the group would not make are refused both ways. */
        strcpy(m.member_id, "a b");
        assert_int_equal(shoal_wire_hello_ack_encode(buf, sizeof(buf), &m), -EMSGSIZE);
        strcpy(m.member_id, "ab");
        n = shoal_wire_hello_ack_encode(buf, sizeof(buf), &m);
        assert_int_equal(n, 40);
        buf[39] = '/';
        assert_int_equal(shoal_wire_hello_ack_decode(buf, (size_t)n, &d), -EPROTO);
        buf[39] = '\0';
        assert_int_equal(shoal_wire_hello_ack_decode(buf, (size_t)n, &d), -EPROTO);
        memset(m.member_id, 'x', sizeof(m.member_id)); /* 33 characters, unterminated */
        assert_int_equal(shoal_wire_hello_ack_encode(buf, sizeof(buf), &m), -EMSGSIZE);
        mk_hello_ack(&m);
        m.max_inflight = 0;
        assert_int_equal(shoal_wire_hello_ack_encode(buf, sizeof(buf), &m), -EMSGSIZE);
}

static void test_auth_roundtrip(void **state)
{
        (void)state;
        struct shoal_wire_auth m, d;
        uint8_t buf[64];
        for (int i = 0; i < SHOAL_WIRE_PROOF_LEN; i++)
                m.proof[i] = (uint8_t)i;
        assert_int_equal(shoal_wire_auth_encode(buf, sizeof(buf), &m), 32);
        assert_int_equal(shoal_wire_auth_decode(buf, 32, &d), 0);
        assert_memory_equal(&m, &d, sizeof(m));
        assert_int_equal(shoal_wire_auth_encode(buf, 31, &m), -EMSGSIZE);
}

static void assert_read_equal(const struct shoal_wire_read *a, const struct shoal_wire_read *b)
{
        assert_true(a->view_version == b->view_version);
        assert_true(a->obj_size == b->obj_size);
        assert_int_equal(a->block_size, b->block_size);
        assert_int_equal(a->block_index, b->block_index);
        assert_int_equal(a->offset, b->offset);
        assert_int_equal(a->length, b->length);
        assert_true(a->rdma_addr == b->rdma_addr);
        assert_true(a->rdma_key == b->rdma_key);
        assert_int_equal(a->key_len, b->key_len);
        assert_int_equal(a->version_len, b->version_len);
        assert_memory_equal(a->key, b->key, a->key_len);
        assert_memory_equal(a->version, b->version, a->version_len);
}

static void test_read_roundtrip(void **state)
{
        (void)state;
        static uint8_t buf[2048];
        static char longkey[SHOAL_KEY_MAX], longver[SHOAL_VERSION_MAX];
        struct shoal_wire_read m, d;

        mk_read(&m);
        int n = shoal_wire_read_encode(buf, sizeof(buf), &m);
        assert_int_equal(n, 52 + (int)strlen(KEY) + (int)strlen(VER));
        assert_int_equal(shoal_wire_read_decode(buf, (size_t)n, &d), 0);
        assert_read_equal(&m, &d);
        /* The decoded strings point into the body. */
        assert_ptr_equal(d.key, (const char *)buf + 52);

        /* RDMA target, last short block up to its end, largest key and version. */
        memset(longkey, 'k', sizeof(longkey));
        memset(longver, 'v', sizeof(longver));
        m.rdma_addr = 0x7f0012345000ull;
        m.rdma_key = 0xfeedfacecafebeefull;
        m.block_index = 2;
        m.offset = 32 * SHOAL_CHUNK_SIZE;
        m.length = 100000;
        m.key = longkey;
        m.key_len = SHOAL_KEY_MAX;
        m.version = longver;
        m.version_len = SHOAL_VERSION_MAX;
        n = shoal_wire_read_encode(buf, sizeof(buf), &m);
        assert_int_equal(n, (int)shoal_wire_body_max(SHOAL_MSG_READ));
        assert_int_equal(shoal_wire_read_decode(buf, (size_t)n, &d), 0);
        assert_read_equal(&m, &d);

        /* Whole largest block; a one-chunk object. */
        mk_read(&m);
        m.block_size = SHOAL_BLOCK_SIZE_MAX;
        m.obj_size = SHOAL_BLOCK_SIZE_MAX;
        m.offset = 0;
        m.length = SHOAL_BLOCK_SIZE_MAX;
        n = shoal_wire_read_encode(buf, sizeof(buf), &m);
        assert_true(n > 0);
        assert_int_equal(shoal_wire_read_decode(buf, (size_t)n, &d), 0);
        assert_read_equal(&m, &d);
        mk_read(&m);
        m.block_size = SHOAL_BLOCK_SIZE_MIN;
        m.obj_size = 1;
        m.offset = 0;
        m.length = 1;
        n = shoal_wire_read_encode(buf, sizeof(buf), &m);
        assert_true(n > 0);
        assert_int_equal(shoal_wire_read_decode(buf, (size_t)n, &d), 0);
        assert_read_equal(&m, &d);
        /* Highest block index that exists for a huge object. */
        mk_read(&m);
        m.block_size = SHOAL_BLOCK_SIZE_MAX;
        m.obj_size = UINT64_MAX;
        m.block_index = UINT32_MAX;
        m.offset = 0;
        m.length = SHOAL_CHUNK_SIZE;
        n = shoal_wire_read_encode(buf, sizeof(buf), &m);
        assert_true(n > 0);
        assert_int_equal(shoal_wire_read_decode(buf, (size_t)n, &d), 0);
        assert_read_equal(&m, &d);

        /* Encoders refuse what decoders would refuse, and short buffers. */
        mk_read(&m);
        assert_int_equal(shoal_wire_read_encode(buf, 52 + strlen(KEY) + strlen(VER) - 1, &m),
                         -EMSGSIZE);
        m.length = 0;
        assert_int_equal(shoal_wire_read_encode(buf, sizeof(buf), &m), -EMSGSIZE);
        mk_read(&m);
        m.key_len = 0;
        assert_int_equal(shoal_wire_read_encode(buf, sizeof(buf), &m), -EMSGSIZE);
        mk_read(&m);
        m.block_size = 3 * SHOAL_CHUNK_SIZE;
        assert_int_equal(shoal_wire_read_encode(buf, sizeof(buf), &m), -EMSGSIZE);
}

/* PUT_BLOCK [W3]: the body names a block of a committed object; the payload length follows from
 * it; the header takes a payload on PUT_BLOCK only, up to the largest block and its CRCs. */
static void test_put_roundtrip(void **state)
{
        (void)state;
        static uint8_t buf[2048];
        struct shoal_wire_put m = {.view_version = 9,
                                   .obj_size = 100000,
                                   .block_size = 65536,
                                   .block_index = 1,
                                   .key_len = 5,
                                   .version_len = 3,
                                   .key = "a/b.c",
                                   .version = "v-1"},
                              d;
        int n = shoal_wire_put_encode(buf, sizeof(buf), &m);
        assert_int_equal(n, 28 + 5 + 3);
        assert_int_equal(shoal_wire_put_decode(buf, (size_t)n, &d), 0);
        assert_true(d.view_version == 9 && d.obj_size == 100000 && d.block_size == 65536);
        assert_int_equal(d.block_index, 1);
        assert_memory_equal(d.key, "a/b.c", 5);
        assert_memory_equal(d.version, "v-1", 3);
        assert_ptr_equal(d.key, (const char *)buf + 28);
        /* The last, short block: one CRC and its 34464 bytes; a full one: one CRC and 64 KiB. */
        assert_int_equal(shoal_wire_put_payload_len(&d), 4 + 34464);
        d.block_index = 0;
        assert_int_equal(shoal_wire_put_payload_len(&d), 4 + 65536);
        /* A trailing byte, a short body, an index past the end, an empty object, a bad block
         * size, a control character in the key: all refused, by the encoder too. */
        assert_int_equal(shoal_wire_put_decode(buf, (size_t)n + 1, &d), -EPROTO);
        assert_int_equal(shoal_wire_put_decode(buf, (size_t)n - 1, &d), -EPROTO);
        struct shoal_wire_put bad = m;
        bad.block_index = 2;
        assert_int_equal(shoal_wire_put_encode(buf, sizeof(buf), &bad), -EMSGSIZE);
        le32(buf + 20, 2);
        assert_int_equal(shoal_wire_put_decode(buf, (size_t)n, &d), -EPROTO);
        le32(buf + 20, 1);
        bad = m;
        bad.obj_size = 0;
        bad.block_index = 0;
        assert_int_equal(shoal_wire_put_encode(buf, sizeof(buf), &bad), -EMSGSIZE);
        bad = m;
        bad.block_size = 65537;
        assert_int_equal(shoal_wire_put_encode(buf, sizeof(buf), &bad), -EMSGSIZE);
        buf[28] = '\n';
        assert_int_equal(shoal_wire_put_decode(buf, (size_t)n, &d), -EPROTO);
        assert_int_equal(shoal_wire_put_encode(buf, 10, &m), -EMSGSIZE);

        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_PUT_BLOCK),
                         28 + SHOAL_KEY_MAX + SHOAL_VERSION_MAX);
        assert_int_equal(shoal_wire_body_max(SHOAL_MSG_PUT_RESP), 0);
        struct shoal_wire_hdr h = {.version = SHOAL_WIRE_VERSION,
                                   .type = SHOAL_MSG_PUT_BLOCK,
                                   .payload_len = SHOAL_WIRE_PUT_PAYLOAD_MAX},
                              out;
        uint8_t hdr[SHOAL_WIRE_HDR_LEN];
        shoal_wire_hdr_encode(hdr, &h, NULL);
        assert_int_equal(shoal_wire_hdr_decode(hdr, &out), 0);
        assert_int_equal(out.payload_len, SHOAL_WIRE_PUT_PAYLOAD_MAX);
        h.payload_len++;
        shoal_wire_hdr_encode(hdr, &h, NULL);
        assert_int_equal(shoal_wire_hdr_decode(hdr, &out), -EMSGSIZE);
        h.payload_len = 5;
        h.flags = SHOAL_WF_FILL;
        shoal_wire_hdr_encode(hdr, &h, NULL);
        assert_int_equal(shoal_wire_hdr_decode(hdr, &out), -EPROTO);
        h.flags = 0;
        h.type = SHOAL_MSG_PUT_RESP;
        shoal_wire_hdr_encode(hdr, &h, NULL);
        assert_int_equal(shoal_wire_hdr_decode(hdr, &out), -EMSGSIZE);
        /* A whole message (RDMA) never carries a payload. */
        h.type = SHOAL_MSG_PUT_BLOCK;
        shoal_wire_hdr_encode(hdr, &h, NULL);
        assert_int_equal(shoal_wire_msg_decode(hdr, sizeof(hdr), &out), -EPROTO);
}

/* The server's reassembler: a payload follows a frame's body only on PUT_BLOCK and only after
 * authentication (PUT_PAYLOAD); everywhere else a header announcing one ends the stream. */
static void test_frame_need_payload(void **state)
{
        (void)state;
        static uint8_t f[SHOAL_WIRE_HDR_LEN + 64];
        uint8_t body[36];
        struct shoal_wire_put m = {.view_version = 1,
                                   .obj_size = 100000,
                                   .block_size = 65536,
                                   .key_len = 5,
                                   .version_len = 3,
                                   .key = "a/b.c",
                                   .version = "v-1"};
        int blen = shoal_wire_put_encode(body, sizeof(body), &m);
        assert_int_equal(blen, (int)sizeof(body));
        struct shoal_wire_hdr h = {.version = SHOAL_WIRE_VERSION,
                                   .type = SHOAL_MSG_PUT_BLOCK,
                                   .body_len = (uint32_t)blen,
                                   .payload_len = 4 + 65536,
                                   .id = 7},
                              out;
        shoal_wire_hdr_encode(f, &h, body);
        memcpy(f + SHOAL_WIRE_HDR_LEN, body, (size_t)blen);
        size_t len = SHOAL_WIRE_HDR_LEN + (size_t)blen;
        /* Authenticated: header and body are whole; the payload is the caller's to receive. */
        assert_int_equal(shoal_wire_frame_need(f, SHOAL_WIRE_HDR_LEN, 4096, true, &out), blen);
        assert_int_equal(shoal_wire_frame_need(f, len, 4096, true, &out), 0);
        assert_int_equal(out.payload_len, 4 + 65536);
        /* Before authentication, or for a type that takes none: refused. */
        assert_int_equal(shoal_wire_frame_need(f, len, 4096, false, &out), -EMSGSIZE);
        uint8_t rd[SHOAL_WIRE_HDR_LEN];
        h.type = SHOAL_MSG_READ;
        h.body_len = 0;
        h.payload_len = 1;
        shoal_wire_hdr_encode(rd, &h, NULL);
        int rc = shoal_wire_frame_need(rd, sizeof(rd), 4096, true, &out);
        assert_true(rc == -EMSGSIZE || rc == -EPROTO);
        /* Without a payload the same frame is whole either way. */
        h.type = SHOAL_MSG_PUT_BLOCK;
        h.body_len = (uint32_t)blen;
        h.payload_len = 0;
        shoal_wire_hdr_encode(f, &h, body);
        assert_int_equal(shoal_wire_frame_need(f, len, 4096, false, &out), 0);
}

static void test_read_resp_roundtrip(void **state)
{
        (void)state;
        static uint8_t buf[8192];
        static uint32_t crcs[SHOAL_MAX_CHUNKS];
        struct shoal_block_id b = mk_block();
        struct shoal_wire_read_resp d;
        for (uint32_t i = 0; i < SHOAL_MAX_CHUNKS; i++)
                crcs[i] = 0x9e3779b9u * (i + 1);

        /* One byte, a short last chunk, whole chunks, the largest block. */
        const uint32_t cases[][2] = {{0, 1},
                                     {32 * SHOAL_CHUNK_SIZE, 100000},
                                     {SHOAL_CHUNK_SIZE, 2 * SHOAL_CHUNK_SIZE},
                                     {0, SHOAL_BLOCK_SIZE_MAX},
                                     {SHOAL_BLOCK_SIZE_MAX - SHOAL_CHUNK_SIZE, SHOAL_CHUNK_SIZE}};
        for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
                uint32_t off = cases[c][0], len = cases[c][1];
                uint32_t nc = shoal_chunk_count(len);
                int n = shoal_wire_read_resp_encode(buf, sizeof(buf), &b, off, len, crcs);
                assert_int_equal(n, 28 + 4 * (int)nc);
                assert_true((uint32_t)n <= shoal_wire_body_max(SHOAL_MSG_READ_RESP));
                assert_int_equal(shoal_wire_read_resp_decode(buf, (size_t)n, &d), 0);
                assert_memory_equal(d.block.b, b.b, SHOAL_BLOCK_ID_LEN);
                assert_int_equal(d.offset, off);
                assert_int_equal(d.length, len);
                assert_int_equal(d.n_crcs, nc);
                for (uint32_t i = 0; i < nc; i++)
                        assert_int_equal(shoal_wire_read_resp_crc(&d, i), crcs[i]);
                assert_int_equal(shoal_wire_read_resp_crc(&d, nc), 0);
                assert_int_equal(
                        shoal_wire_read_resp_encode(buf, (size_t)n - 1, &b, off, len, crcs),
                        -EMSGSIZE);
        }
        assert_int_equal(shoal_wire_read_resp_encode(buf, sizeof(buf), &b, 0, 0, crcs), -EMSGSIZE);
        assert_int_equal(shoal_wire_read_resp_encode(buf, sizeof(buf), &b, 1, 1, crcs), -EMSGSIZE);
        assert_int_equal(
                shoal_wire_read_resp_encode(buf, sizeof(buf), &b, SHOAL_BLOCK_SIZE_MAX, 1, crcs),
                -EMSGSIZE);
}

static void test_info_roundtrip(void **state)
{
        (void)state;
        static uint8_t buf[2048];
        struct shoal_wire_info m, d;
        for (unsigned k = 0; k <= 4; k++) {
                mk_info(&m, k);
                int n = shoal_wire_info_encode(buf, sizeof(buf), &m);
                assert_true(n > 0);
                assert_int_equal(shoal_wire_info_decode(buf, (size_t)n, &d), 0);
                assert_memory_equal(&m, &d, sizeof(m));
                assert_int_equal(shoal_wire_info_encode(buf, (size_t)n - 1, &m), -EMSGSIZE);
        }
        /* Empty addresses (no IORPC service), and every string at its largest. */
        mk_info(&m, 0);
        memset(m.iorpc_addr, 0, sizeof(m.iorpc_addr));
        int n = shoal_wire_info_encode(buf, sizeof(buf), &m);
        assert_true(n > 0);
        assert_int_equal(shoal_wire_info_decode(buf, (size_t)n, &d), 0);
        assert_memory_equal(&m, &d, sizeof(m));
        mk_info(&m, 4);
        memset(m.tcp_addr, 'a', 63);
        memset(m.iorpc_addr, 'b', 63);
        for (int i = 0; i < 4; i++)
                memset(m.rdma_addr[i], 'c' + i, 63);
        memset(m.volume_url, 'u', 1023);
        n = shoal_wire_info_encode(buf, sizeof(buf), &m);
        assert_int_equal(n, (int)shoal_wire_body_max(SHOAL_MSG_INFO_RESP));
        assert_int_equal(shoal_wire_info_decode(buf, (size_t)n, &d), 0);
        assert_memory_equal(&m, &d, sizeof(m));
        /* Encoder refusals: unterminated string, too many RDMA addresses, bad block size,
         * control character. */
        m.tcp_addr[63] = 'x';
        assert_int_equal(shoal_wire_info_encode(buf, sizeof(buf), &m), -EMSGSIZE);
        mk_info(&m, 0);
        m.n_rdma = 5;
        assert_int_equal(shoal_wire_info_encode(buf, sizeof(buf), &m), -EMSGSIZE);
        mk_info(&m, 0);
        m.block_size = 0;
        assert_int_equal(shoal_wire_info_encode(buf, sizeof(buf), &m), -EMSGSIZE);
        mk_info(&m, 0);
        m.volume_url[3] = '\n';
        assert_int_equal(shoal_wire_info_encode(buf, sizeof(buf), &m), -EMSGSIZE);
}

static void test_error_roundtrip(void **state)
{
        (void)state;
        uint8_t buf[512];
        char reason[256], longr[201];
        assert_int_equal(shoal_wire_error_encode(buf, sizeof(buf), ""), 0);
        assert_int_equal(shoal_wire_error_decode(buf, 0, reason, sizeof(reason)), 0);
        assert_string_equal(reason, "");
        int n = shoal_wire_error_encode(buf, sizeof(buf), "not owner under view 9");
        assert_int_equal(n, 22);
        assert_int_equal(shoal_wire_error_decode(buf, (size_t)n, reason, sizeof(reason)), 0);
        assert_string_equal(reason, "not owner under view 9");
        /* A short buffer gets a truncated, terminated copy. */
        assert_int_equal(shoal_wire_error_decode(buf, (size_t)n, reason, 4), 0);
        assert_string_equal(reason, "not");
        assert_int_equal(shoal_wire_error_decode(buf, (size_t)n, reason, 0), -EMSGSIZE);
        memset(longr, 'r', 200);
        longr[200] = '\0';
        n = shoal_wire_error_encode(buf, sizeof(buf), longr);
        assert_int_equal(n, 200);
        assert_int_equal(shoal_wire_error_decode(buf, (size_t)n, reason, sizeof(reason)), 0);
        assert_string_equal(reason, longr);
        /* Refusals: 201 bytes, a control character, a short buffer. */
        char too_long[202];
        memset(too_long, 'r', 201);
        too_long[201] = '\0';
        assert_int_equal(shoal_wire_error_encode(buf, sizeof(buf), too_long), -EMSGSIZE);
        assert_int_equal(shoal_wire_error_encode(buf, sizeof(buf), "a\tb"), -EMSGSIZE);
        assert_int_equal(shoal_wire_error_encode(buf, 3, "abcd"), -EMSGSIZE);
}

/* ---- the malformed table ---- */

/* READ body offsets. */
enum {
        R_VIEW = 0,
        R_OBJSIZE = 8,
        R_BS = 16,
        R_INDEX = 20,
        R_OFF = 24,
        R_LEN = 28,
        R_KEYLEN = 48,
        R_VERLEN = 50,
        R_KEY = 52
};

/* Rebuilds a READ body with raw KEY/VERSION bytes (the encoder would refuse them). */
static void read_raw(struct frame *f, const void *key, size_t klen, const void *ver, size_t vlen)
{
        le16(f->body + R_KEYLEN, (uint16_t)klen);
        le16(f->body + R_VERLEN, (uint16_t)vlen);
        memcpy(f->body + R_KEY, key, klen);
        memcpy(f->body + R_KEY + klen, ver, vlen);
        f->body_len = R_KEY + klen + vlen;
        seal(f);
}

static void m_magic(struct frame *f)
{
        f->hdr[0] ^= 0x01;
        recrc(f);
}
static void m_magic_next(struct frame *f)
{
        f->hdr[3] = '2';
        recrc(f);
}
static void m_version0(struct frame *f)
{
        f->h.version = 0;
        seal(f);
}
static void m_version_next(struct frame *f)
{
        f->h.version = SHOAL_WIRE_VERSION + 1;
        seal(f);
}
static void m_version_prev(struct frame *f)
{
        f->h.version = SHOAL_WIRE_VERSION - 1; /* version 1 peers are refused, not misread */
        seal(f);
}
static void m_type0(struct frame *f)
{
        f->h.type = 0;
        seal(f);
}
static void m_type_gap(struct frame *f)
{
        f->h.type = 5;
        seal(f);
}
static void m_type255(struct frame *f)
{
        f->h.type = 255;
        seal(f);
}
static void m_flag_unknown(struct frame *f)
{
        f->h.flags |= 1u << 8;
        seal(f);
}
static void m_flag_wrong_type(struct frame *f)
{
        f->h.flags |= SHOAL_WF_AUTH_REQUIRED;
        seal(f);
}
static void m_rdma_written_payload(struct frame *f)
{
        f->h.flags = SHOAL_WF_RDMA_WRITTEN;
        seal(f);
}
static void m_status_on_request(struct frame *f)
{
        f->h.status = SHOAL_ST_BUSY;
        seal(f);
}
static void m_error_status0(struct frame *f)
{
        f->h.status = 0;
        seal(f);
}
static void m_error_status_max(struct frame *f)
{
        f->h.status = SHOAL_ST__MAX;
        seal(f);
}
static void m_body_past_max(struct frame *f)
{
        f->h.body_len = shoal_wire_body_max(f->h.type) + 1;
        shoal_wire_hdr_encode(f->hdr, &f->h, f->body);
        f->body_len = f->h.body_len;
}
static void m_body_huge(struct frame *f)
{
        le32(f->hdr + 12, UINT32_MAX); /* the CRC goes stale, but the length fails first */
        f->body_len = UINT32_MAX;
}
static void m_payload(struct frame *f)
{
        f->h.payload_len = 1;
        seal(f);
}
static void m_payload_past_max(struct frame *f)
{
        f->h.payload_len = SHOAL_WIRE_PAYLOAD_MAX + 1;
        seal(f);
}
static void m_flip_hdr_id(struct frame *f)
{
        f->hdr[21] ^= 0x10;
}
static void m_flip_hdr_len(struct frame *f)
{
        f->hdr[12] ^= 0x01; /* body_len 71 -> 70: still legal, so only the CRC can tell */
        f->body_len ^= 1;
}
static void m_flip_body(struct frame *f)
{
        f->body[f->body_len / 2] ^= 0x04;
}
static void m_flip_crc(struct frame *f)
{
        f->hdr[31] ^= 0x80;
}
static void m_hello_min0(struct frame *f)
{
        f->body[0] = 0;
        seal(f);
}
static void m_hello_min_gt_max(struct frame *f)
{
        f->body[0] = 3;
        f->body[1] = 2;
        seal(f);
}
static void m_hello_service0(struct frame *f)
{
        f->body[2] = 0;
        seal(f);
}
static void m_hello_service4(struct frame *f)
{
        f->body[2] = 4;
        seal(f);
}
static void m_ack_version0(struct frame *f)
{
        f->body[0] = 0;
        seal(f);
}
static void m_ack_inflight0(struct frame *f)
{
        le32(f->body + 33, 0);
        seal(f);
}
static void m_ack_idlen_past_body(struct frame *f)
{
        f->body[37] = 33;
        seal(f);
}
static void m_ack_id_slash(struct frame *f)
{
        f->body[40] = '/';
        seal(f);
}
static void m_short_by_one(struct frame *f)
{
        f->body_len--;
        seal(f);
}
static void m_empty_body(struct frame *f)
{
        f->body_len = 0;
        seal(f);
}
static void m_trailing(struct frame *f)
{
        f->body[f->body_len++] = 0;
        seal(f);
}
static void m_key_empty(struct frame *f)
{
        read_raw(f, "", 0, VER, strlen(VER));
}
static void m_key_nul(struct frame *f)
{
        read_raw(f, "dir\0obj", 7, VER, strlen(VER));
}
static void m_key_newline(struct frame *f)
{
        read_raw(f, "dir/\nobj", 8, VER, strlen(VER));
}
static void m_key_del(struct frame *f)
{
        read_raw(f, "dir/\x7fobj", 8, VER, strlen(VER));
}
static void m_key_too_long(struct frame *f)
{
        static char k[SHOAL_KEY_MAX + 1];
        memset(k, 'k', sizeof(k));
        read_raw(f, k, sizeof(k), "v", 1);
}
static void m_keylen_past_body(struct frame *f)
{
        le16(f->body + R_KEYLEN, 500);
        seal(f);
}
static void m_verlen_past_body(struct frame *f)
{
        le16(f->body + R_VERLEN, 0xffff);
        seal(f);
}
static void m_version_empty(struct frame *f)
{
        read_raw(f, KEY, strlen(KEY), "", 0);
}
static void m_version_space(struct frame *f)
{
        read_raw(f, KEY, strlen(KEY), "etag 1", 6);
}
static void m_version_high(struct frame *f)
{
        read_raw(f, KEY, strlen(KEY), "etag\xc3\xa9", 6);
}
static void m_version_too_long(struct frame *f)
{
        static char v[SHOAL_VERSION_MAX + 1];
        memset(v, 'v', sizeof(v));
        read_raw(f, KEY, strlen(KEY), v, sizeof(v));
}
static void set32(struct frame *f, size_t off, uint32_t v)
{
        le32(f->body + off, v);
        seal(f);
}
static void m_bs0(struct frame *f)
{
        set32(f, R_BS, 0);
}
static void m_bs_not_pow2(struct frame *f)
{
        set32(f, R_BS, 3 * SHOAL_CHUNK_SIZE);
}
static void m_bs_small(struct frame *f)
{
        set32(f, R_BS, SHOAL_BLOCK_SIZE_MIN / 2);
}
static void m_bs_big(struct frame *f)
{
        set32(f, R_BS, SHOAL_BLOCK_SIZE_MAX * 2);
}
static void m_index_at_end(struct frame *f)
{
        set32(f, R_INDEX, 3); /* 10 MiB + 100000 in 4 MiB blocks: blocks 0..2 */
}
static void m_index_huge(struct frame *f)
{
        set32(f, R_INDEX, UINT32_MAX);
}
static void m_obj_empty(struct frame *f)
{
        le64(f->body + R_OBJSIZE, 0);
        seal(f);
}
static void m_off_unaligned(struct frame *f)
{
        set32(f, R_OFF, SHOAL_CHUNK_SIZE + 4096);
}
static void m_len0(struct frame *f)
{
        set32(f, R_LEN, 0);
}
static void m_len_unaligned(struct frame *f)
{
        set32(f, R_LEN, SHOAL_CHUNK_SIZE + 1); /* ends mid-chunk, not at the block end */
}
static void m_range_past_block(struct frame *f)
{
        set32(f, R_LEN, 4 * MiB); /* offset 64 KiB + 4 MiB > 4 MiB */
}
static void m_range_past_last_block(struct frame *f)
{
        le32(f->body + R_INDEX, 2);
        le32(f->body + R_OFF, 32 * SHOAL_CHUNK_SIZE);
        set32(f, R_LEN, 100001); /* block 2 ends 100000 bytes after that */
}
static void m_range_wraps(struct frame *f)
{
        le32(f->body + R_OFF, 0xffff0000u);
        set32(f, R_LEN, 0x20000);
}
static void m_resp_ncrcs_plus(struct frame *f)
{
        /* Three CRCs for a two-chunk range, the body long enough for three. */
        le32(f->body + 24, 3);
        le32(f->body + f->body_len, 0);
        f->body_len += 4;
        seal(f);
}
static void m_resp_ncrcs_minus(struct frame *f)
{
        le32(f->body + 24, 1);
        f->body_len -= 4;
        seal(f);
}
static void m_resp_ncrcs_huge(struct frame *f)
{
        le32(f->body + 24, 0x40000000u); /* 4 * n wraps a 32-bit size */
        seal(f);
}
static void m_resp_len0(struct frame *f)
{
        le32(f->body + 20, 0);
        le32(f->body + 24, 0);
        f->body_len = 28;
        seal(f);
}
static void m_resp_off_unaligned(struct frame *f)
{
        set32(f, 16, 100);
}
static void m_resp_past_max_block(struct frame *f)
{
        set32(f, 16, SHOAL_BLOCK_SIZE_MAX - SHOAL_CHUNK_SIZE); /* + 2 chunks > 64 MiB */
}
/* INFO_RESP from mk_info(2): [13]"10.0.0.1:4000" [13]"10.0.0.1:4001" n=2 ... */
static void m_info_addr_past_body(struct frame *f)
{
        f->body[0] = 60;
        f->body_len = 20;
        seal(f);
}
static void m_info_addr_nul(struct frame *f)
{
        f->body[3] = '\0';
        seal(f);
}
static void m_info_addr_ctl(struct frame *f)
{
        f->body[3] = '\r';
        seal(f);
}
static void m_info_addr64(struct frame *f)
{
        /* A 64-byte address fits the body but not the 63-byte field. */
        memset(f->body, 0, 80);
        f->body[0] = 64;
        memset(f->body + 1, 'a', 64);
        f->body[65] = 0; /* iorpc "" */
        f->body[66] = 0; /* n_rdma */
        le32(f->body + 67, 4 * MiB);
        le16(f->body + 71, 0);
        f->body_len = 73;
        seal(f);
}
static void m_info_nrdma5(struct frame *f)
{
        f->body[28] = 5;
        seal(f);
}
static void m_info_bs(struct frame *f)
{
        /* block_size after the two RDMA addresses; find it from the end: u32 bs, u16 len, url. */
        size_t url = strlen("s3://bucket/prefix");
        le32(f->body + f->body_len - url - 2 - 4, 12345);
        seal(f);
}
static void m_info_url_past_body(struct frame *f)
{
        size_t url = strlen("s3://bucket/prefix");
        le16(f->body + f->body_len - url - 2, (uint16_t)(url + 1));
        seal(f);
}
static void m_info_url_too_long(struct frame *f)
{
        /* Rebuild: empty addresses, no RDMA, a 1024-byte URL (the field holds 1023). */
        f->body[0] = 0;
        f->body[1] = 0;
        f->body[2] = 0;
        le32(f->body + 3, 4 * MiB);
        le16(f->body + 7, 1024);
        memset(f->body + 9, 'u', 1024);
        f->body_len = 9 + 1024;
        seal(f);
}
static void m_error_ctl(struct frame *f)
{
        f->body[2] = '\x1b';
        seal(f);
}
static void m_error_nul(struct frame *f)
{
        f->body[2] = '\0';
        seal(f);
}
static void m_error_high(struct frame *f)
{
        f->body[2] = (uint8_t)0xff;
        seal(f);
}

struct mcase {
        const char *name;
        uint8_t type;
        void (*mutate)(struct frame *f);
        int want;
};

#define C(type, fn, want)                                 \
        {                                                 \
#type " " #fn, SHOAL_MSG_##type, fn, want \
        }

static const struct mcase MALFORMED[] = {
        /* header: identity */
        C(READ, m_magic, -EPROTO),
        C(HELLO, m_magic_next, -EPROTO),
        C(READ, m_version0, -EPROTO),
        C(HELLO, m_version_next, -EPROTO),
        C(HELLO, m_version_prev, -EPROTO),
        C(READ, m_type0, -EPROTO),
        C(READ, m_type_gap, -EPROTO),
        C(READ, m_type255, -EPROTO),
        C(READ, m_flag_unknown, -EPROTO),
        C(READ, m_flag_wrong_type, -EPROTO),
        C(READ_RESP, m_rdma_written_payload, -EPROTO),
        C(READ, m_status_on_request, -EPROTO),
        C(READ_RESP, m_status_on_request, -EPROTO),
        C(ERROR, m_error_status0, -EPROTO),
        C(ERROR, m_error_status_max, -EPROTO),
        /* header: lengths */
        C(HELLO, m_body_past_max, -EMSGSIZE),
        C(HELLO_ACK, m_body_past_max, -EMSGSIZE),
        C(AUTH, m_body_past_max, -EMSGSIZE),
        C(AUTH_OK, m_body_past_max, -EMSGSIZE),
        C(READ, m_body_past_max, -EMSGSIZE),
        C(READ_RESP, m_body_past_max, -EMSGSIZE),
        C(ERROR, m_body_past_max, -EMSGSIZE),
        C(PING, m_body_past_max, -EMSGSIZE),
        C(PONG, m_body_past_max, -EMSGSIZE),
        C(INFO, m_body_past_max, -EMSGSIZE),
        C(INFO_RESP, m_body_past_max, -EMSGSIZE),
        C(CORRUPT, m_body_past_max, -EMSGSIZE),
        C(GOAWAY, m_body_past_max, -EMSGSIZE),
        C(READ, m_body_huge, -EMSGSIZE),
        C(READ, m_payload, -EMSGSIZE),
        C(PING, m_payload, -EMSGSIZE),
        C(HELLO, m_payload, -EMSGSIZE),
        C(READ_RESP, m_payload_past_max, -EMSGSIZE),
        /* header CRC */
        C(READ, m_flip_hdr_id, E_CRC),
        C(READ, m_flip_hdr_len, E_CRC),
        C(READ, m_flip_body, E_CRC),
        C(READ_RESP, m_flip_body, E_CRC),
        C(HELLO, m_flip_crc, E_CRC),
        /* handshake bodies */
        C(HELLO, m_hello_min0, -EPROTO),
        C(HELLO, m_hello_min_gt_max, -EPROTO),
        C(HELLO, m_hello_service0, -EPROTO),
        C(HELLO, m_hello_service4, -EPROTO),
        C(HELLO, m_short_by_one, -EPROTO),
        C(HELLO, m_empty_body, -EPROTO),
        C(HELLO_ACK, m_ack_version0, -EPROTO),
        C(HELLO_ACK, m_ack_inflight0, -EPROTO),
        C(HELLO_ACK, m_short_by_one, -EPROTO),
        C(HELLO_ACK, m_ack_idlen_past_body, -EPROTO),
        C(HELLO_ACK, m_ack_id_slash, -EPROTO),
        C(HELLO_ACK, m_trailing, -EMSGSIZE),
        C(AUTH_OK, m_short_by_one, -EPROTO),
        C(AUTH_OK, m_empty_body, -EPROTO),
        C(AUTH, m_short_by_one, -EPROTO),
        C(AUTH, m_empty_body, -EPROTO),
        /* READ: key, version */
        C(READ, m_key_empty, -EPROTO),
        C(READ, m_key_nul, -EPROTO),
        C(READ, m_key_newline, -EPROTO),
        C(READ, m_key_del, -EPROTO),
        C(READ, m_key_too_long, -EPROTO),
        C(READ, m_keylen_past_body, -EPROTO),
        C(READ, m_verlen_past_body, -EPROTO),
        C(READ, m_version_empty, -EPROTO),
        C(READ, m_version_space, -EPROTO),
        C(READ, m_version_high, -EPROTO),
        C(READ, m_version_too_long, -EPROTO),
        /* READ: geometry and range */
        C(READ, m_bs0, -EPROTO),
        C(READ, m_bs_not_pow2, -EPROTO),
        C(READ, m_bs_small, -EPROTO),
        C(READ, m_bs_big, -EPROTO),
        C(READ, m_index_at_end, -EPROTO),
        C(READ, m_index_huge, -EPROTO),
        C(READ, m_obj_empty, -EPROTO),
        C(READ, m_off_unaligned, -EPROTO),
        C(READ, m_len0, -EPROTO),
        C(READ, m_len_unaligned, -EPROTO),
        C(READ, m_range_past_block, -EPROTO),
        C(READ, m_range_past_last_block, -EPROTO),
        C(READ, m_range_wraps, -EPROTO),
        C(READ, m_trailing, -EPROTO),
        C(READ, m_empty_body, -EPROTO),
        C(CORRUPT, m_key_nul, -EPROTO),
        C(CORRUPT, m_off_unaligned, -EPROTO),
        C(CORRUPT, m_trailing, -EPROTO),
        /* READ_RESP */
        C(READ_RESP, m_resp_ncrcs_plus, -EPROTO),
        C(READ_RESP, m_resp_ncrcs_minus, -EPROTO),
        C(READ_RESP, m_resp_ncrcs_huge, -EPROTO),
        C(READ_RESP, m_resp_len0, -EPROTO),
        C(READ_RESP, m_resp_off_unaligned, -EPROTO),
        C(READ_RESP, m_resp_past_max_block, -EPROTO),
        C(READ_RESP, m_short_by_one, -EPROTO),
        C(READ_RESP, m_trailing, -EPROTO),
        C(READ_RESP, m_empty_body, -EPROTO),
        /* INFO_RESP */
        C(INFO_RESP, m_info_addr_past_body, -EPROTO),
        C(INFO_RESP, m_info_addr_nul, -EPROTO),
        C(INFO_RESP, m_info_addr_ctl, -EPROTO),
        C(INFO_RESP, m_info_addr64, -EPROTO),
        C(INFO_RESP, m_info_nrdma5, -EPROTO),
        C(INFO_RESP, m_info_bs, -EPROTO),
        C(INFO_RESP, m_info_url_past_body, -EPROTO),
        C(INFO_RESP, m_info_url_too_long, -EPROTO),
        C(INFO_RESP, m_short_by_one, -EPROTO),
        C(INFO_RESP, m_trailing, -EPROTO),
        C(INFO_RESP, m_empty_body, -EPROTO),
        /* ERROR */
        C(ERROR, m_error_ctl, -EPROTO),
        C(ERROR, m_error_nul, -EPROTO),
        C(ERROR, m_error_high, -EPROTO),
};

static void test_malformed_table(void **state)
{
        (void)state;
        size_t n = sizeof(MALFORMED) / sizeof(MALFORMED[0]);
        assert_true(n >= 40);
        for (size_t i = 0; i < n; i++) {
                const struct mcase *c = &MALFORMED[i];
                struct frame f;
                mk_frame(&f, c->type);
                assert_int_equal(check_frame(&f), 0); /* the starting point is valid */
                c->mutate(&f);
                int rc = check_frame(&f);
                if (rc != c->want)
                        fail_msg("case %zu (%s): got %d, want %d", i, c->name, rc, c->want);
        }
}

/* Every proper prefix of every decodable body is refused, and so is one byte more. */
static void test_truncated_every_length(void **state)
{
        (void)state;
        const uint8_t types[] = {SHOAL_MSG_HELLO,     SHOAL_MSG_HELLO_ACK, SHOAL_MSG_AUTH,
                                 SHOAL_MSG_AUTH_OK,   SHOAL_MSG_READ,      SHOAL_MSG_READ_RESP,
                                 SHOAL_MSG_INFO_RESP, SHOAL_MSG_CORRUPT};
        for (size_t t = 0; t < sizeof(types); t++) {
                struct frame f;
                mk_frame(&f, types[t]);
                size_t full = f.body_len;
                for (size_t len = 0; len < full; len++) {
                        f.body_len = len;
                        seal(&f);
                        int rc = check_frame(&f);
                        if (rc != -EPROTO)
                                fail_msg("type %u truncated to %zu: got %d", types[t], len, rc);
                        /* The decoders on their own, without a header, agree. */
                        assert_int_equal(decode_body(types[t], f.body, len), -EPROTO);
                }
                f.body_len = full + 1;
                f.body[full] = 'x';
                seal(&f);
                int want = full + 1 > shoal_wire_body_max(types[t]) ? -EMSGSIZE : -EPROTO;
                assert_int_equal(check_frame(&f), want);
                assert_int_equal(decode_body(types[t], f.body, full + 1), -EPROTO);
        }
}

/* A decoder never reads past LEN: the body sits at the very end of a page-sized buffer that
 * ASan watches, for every prefix length. */
static void test_decoders_stay_in_bounds(void **state)
{
        (void)state;
        const uint8_t types[] = {SHOAL_MSG_HELLO,     SHOAL_MSG_HELLO_ACK, SHOAL_MSG_AUTH,
                                 SHOAL_MSG_AUTH_OK,   SHOAL_MSG_READ,      SHOAL_MSG_READ_RESP,
                                 SHOAL_MSG_INFO_RESP, SHOAL_MSG_ERROR};
        for (size_t t = 0; t < sizeof(types); t++) {
                struct frame f;
                mk_frame(&f, types[t]);
                for (size_t len = 0; len <= f.body_len; len++) {
                        uint8_t *copy = malloc(len ? len : 1);
                        assert_non_null(copy);
                        memcpy(copy, f.body, len);
                        (void)decode_body(types[t], copy, len);
                        free(copy);
                }
        }
        /* NULL bodies of length 0. */
        struct shoal_wire_read r;
        assert_int_equal(shoal_wire_read_decode(NULL, 0, &r), -EPROTO);
        struct shoal_wire_info in;
        assert_int_equal(shoal_wire_info_decode(NULL, 0, &in), -EPROTO);
        char reason[8];
        assert_int_equal(shoal_wire_error_decode(NULL, 0, reason, sizeof(reason)), 0);
        assert_string_equal(reason, "");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_hdr_golden),
                cmocka_unit_test(test_hdr_roundtrip_all_types),
                cmocka_unit_test(test_body_max),
                cmocka_unit_test(test_status_str),
                cmocka_unit_test(test_hello_roundtrip),
                cmocka_unit_test(test_hello_ack_roundtrip),
                cmocka_unit_test(test_auth_roundtrip),
                cmocka_unit_test(test_read_roundtrip),
                cmocka_unit_test(test_put_roundtrip),
                cmocka_unit_test(test_frame_need_payload),
                cmocka_unit_test(test_read_resp_roundtrip),
                cmocka_unit_test(test_info_roundtrip),
                cmocka_unit_test(test_error_roundtrip),
                cmocka_unit_test(test_malformed_table),
                cmocka_unit_test(test_truncated_every_length),
                cmocka_unit_test(test_decoders_stay_in_bounds),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
