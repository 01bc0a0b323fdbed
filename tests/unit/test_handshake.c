/* The handshake state machine (src/wire/handshake.c) driven frame by frame, both ends in one
 * process: known-answer proofs (the definition in docs/iorpc-protocol.md), the four secret
 * combinations, every frame out of order on either side, wrong and replayed and reflected proofs,
 * a relay through another address, a tampered member id, a wrong service, secrets with NUL bytes,
 * short secrets, and a CSPRNG that fails (getrandom is wrapped at link time, see CMakeLists.txt).
 */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#include <cmocka.h>

#include "common/secret.h"
#include "metrics/metrics.h"
#include "wire/handshake.h"
#include "wire/wire.h"

/* ---- a CSPRNG that can fail (linked with -Wl,--wrap=getrandom) ---- */

ssize_t __real_getrandom(void *buf, size_t len, unsigned int flags);
ssize_t __wrap_getrandom(void *buf, size_t len, unsigned int flags);

static int random_errno; /* 0: the real getrandom */

ssize_t __wrap_getrandom(void *buf, size_t len, unsigned int flags)
{
        if (random_errno) {
                errno = random_errno;
                return -1;
        }
        return __real_getrandom(buf, len, flags);
}

/* ---- helpers ---- */

#define ADDR "127.0.0.1:4000"
#define ID   "0123456789abcdef0123456789abcdef"

static const uint8_t SECRET_A[] = "a group secret of 32 bytes.....";
static const uint8_t SECRET_B[] = "another secret, also 32 bytes..";

static struct shoal_hs_key key_of(const void *bytes, size_t len)
{
        struct shoal_hs_key k;
        struct shoal_secret s = {.bytes = bytes, .len = len};
        assert_int_equal(shoal_hs_key_init(&k, &s), 0);
        return k;
}

static struct shoal_hs_key KA, KB, NOKEY;

static int setup(void **state)
{
        (void)state;
        KA = key_of(SECRET_A, 32);
        KB = key_of(SECRET_B, 32);
        memset(&NOKEY, 0, sizeof(NOKEY));
        random_errno = 0;
        return 0;
}

static void start_req(struct shoal_hs *hs, const struct shoal_hs_key *key, const char *dialed,
                      uint8_t service)
{
        struct shoal_hs_config c = {
                .role = SHOAL_HS_REQUESTER, .key = key, .service = service, .addr = dialed};
        assert_int_equal(shoal_hs_start(hs, &c), 0);
        assert_true(hs->out_len > SHOAL_WIRE_HDR_LEN); /* the HELLO */
}

static void start_srv(struct shoal_hs *hs, const struct shoal_hs_key *key, const char *local,
                      uint8_t service, const char *id)
{
        struct shoal_hs_config c = {.role = SHOAL_HS_SERVER,
                                    .key = key,
                                    .service = service,
                                    .addr = local,
                                    .member_id = id,
                                    .max_inflight = 1024};
        assert_int_equal(shoal_hs_start(hs, &c), 0);
        assert_int_equal(hs->out_len, 0);
}

/* A frame as it left one end: a copy, so a later step cannot change it. */
struct frame {
        uint8_t b[SHOAL_HS_FRAME_MAX];
        size_t len;
};

static struct frame take(const struct shoal_hs *from)
{
        struct frame f;
        assert_true(from->out_len > 0 && from->out_len <= sizeof(f.b));
        memcpy(f.b, from->out, from->out_len);
        f.len = from->out_len;
        return f;
}

static enum shoal_hs_verdict give(struct shoal_hs *to, const struct frame *f)
{
        return shoal_hs_step_msg(to, f->b, f->len);
}

static struct frame mk(uint8_t type, uint16_t flags, uint32_t status, uint64_t id, const void *body,
                       size_t len)
{
        struct frame f;
        f.len = shoal_wire_frame_encode(f.b, type, flags, status, id, body, len);
        return f;
}

static uint8_t type_of(const struct frame *f)
{
        struct shoal_wire_hdr h;
        assert_int_equal(shoal_wire_msg_decode(f->b, f->len, &h), 0);
        return h.type;
}

static uint32_t status_of(const struct frame *f)
{
        struct shoal_wire_hdr h;
        assert_int_equal(shoal_wire_msg_decode(f->b, f->len, &h), 0);
        return h.status;
}

static uint64_t auth_failures(void)
{
        struct shoal_metrics_snap s;
        assert_int_equal(shoal_metrics_snap_take(&s), 0);
        uint64_t v = s.counters[SHOAL_M_remotecache_auth_failures];
        shoal_metrics_snap_free(&s);
        return v;
}

/* Runs a whole handshake between REQ and SRV, checking each frame on the way. */
static void run_ok(struct shoal_hs *req, struct shoal_hs *srv)
{
        struct frame hello = take(req);
        enum shoal_hs_verdict v = give(srv, &hello);
        bool auth = srv->key && srv->key->set;
        assert_int_equal(v, auth ? SHOAL_HS_MORE : SHOAL_HS_DONE);
        struct frame ack = take(srv);
        assert_int_equal(type_of(&ack), SHOAL_MSG_HELLO_ACK);
        v = give(req, &ack);
        if (!auth) {
                assert_int_equal(v, SHOAL_HS_DONE);
                assert_int_equal(req->out_len, 0);
                return;
        }
        assert_int_equal(v, SHOAL_HS_MORE);
        struct frame a = take(req);
        assert_int_equal(type_of(&a), SHOAL_MSG_AUTH);
        assert_int_equal(give(srv, &a), SHOAL_HS_DONE);
        struct frame ok = take(srv);
        assert_int_equal(type_of(&ok), SHOAL_MSG_AUTH_OK);
        assert_int_equal(give(req, &ok), SHOAL_HS_DONE);
        assert_int_equal(req->out_len, 0);
}

/* ---- the happy paths ---- */

static void test_known_answer(void **state)
{
        (void)state;
        /* Computed in Python from docs/iorpc-protocol.md §4 (hmac, hashlib): a secret that
         * starts with NUL, K = HMAC(secret, "shoal group key v2"), proofs over label, address,
         * HELLO body and HELLO_ACK body. */
        uint8_t secret[32], nr[32], ns[32];
        secret[0] = 0;
        for (int i = 1; i < 32; i++)
                secret[i] = (uint8_t)i;
        for (int i = 0; i < 32; i++) {
                nr[i] = (uint8_t)i;
                ns[i] = (uint8_t)(100 + i);
        }
        struct shoal_hs_key k = key_of(secret, 32);
        static const uint8_t want_k[32] = {0x7e, 0x85, 0x9b, 0x38, 0x2f, 0x17, 0xc6, 0x9d,
                                           0x8f, 0x36, 0x28, 0xce, 0x8a, 0x1c, 0x35, 0x99,
                                           0xa0, 0xbc, 0xf8, 0x12, 0x00, 0x6a, 0x11, 0x5c,
                                           0x18, 0x19, 0xa4, 0x4d, 0xa9, 0x85, 0xcc, 0x2e};
        assert_memory_equal(k.k, want_k, 32);
        static const uint8_t want_r[32] = {0xc8, 0x84, 0x33, 0x69, 0xc9, 0x40, 0x3d, 0xef,
                                           0x0e, 0xbf, 0x82, 0x0b, 0x5b, 0x11, 0x93, 0x96,
                                           0x51, 0x30, 0x79, 0x71, 0x83, 0x9e, 0x77, 0x8c,
                                           0xfa, 0xc9, 0x81, 0xf9, 0xbb, 0xce, 0xfc, 0xb9};
        static const uint8_t want_s[32] = {0x97, 0xf7, 0xb7, 0xef, 0x71, 0x3a, 0x2b, 0x5f,
                                           0xd6, 0x49, 0x9e, 0xc1, 0x0c, 0x1a, 0x2c, 0x36,
                                           0x1f, 0xa6, 0x02, 0x0b, 0x71, 0xd0, 0x34, 0x72,
                                           0xf1, 0x01, 0x60, 0xdf, 0x6e, 0xf4, 0x78, 0x32};
        struct shoal_hs req, srv;
        struct shoal_hs_config rc = {.role = SHOAL_HS_REQUESTER,
                                     .key = &k,
                                     .service = 2,
                                     .addr = "127.0.0.1:4000",
                                     .nonce = nr};
        struct shoal_hs_config sc = {.role = SHOAL_HS_SERVER,
                                     .key = &k,
                                     .service = 2,
                                     .addr = "127.0.0.1:4000",
                                     .member_id = "m1",
                                     .max_inflight = 1024,
                                     .nonce = ns};
        assert_int_equal(shoal_hs_start(&req, &rc), 0);
        assert_int_equal(shoal_hs_start(&srv, &sc), 0);
        struct frame hello = take(&req);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_MORE);
        struct frame ack = take(&srv);
        assert_int_equal(give(&req, &ack), SHOAL_HS_MORE);
        struct frame auth = take(&req);
        assert_int_equal(auth.len, SHOAL_WIRE_HDR_LEN + 32);
        assert_memory_equal(auth.b + SHOAL_WIRE_HDR_LEN, want_r, 32);
        assert_int_equal(give(&srv, &auth), SHOAL_HS_DONE);
        struct frame ok = take(&srv);
        assert_int_equal(ok.len, SHOAL_WIRE_HDR_LEN + 32);
        assert_memory_equal(ok.b + SHOAL_WIRE_HDR_LEN, want_s, 32);
        assert_int_equal(give(&req, &ok), SHOAL_HS_DONE);
        assert_string_equal(req.peer_id, "m1");
        assert_int_equal(req.peer_max_inflight, 1024);
}

static void test_with_secret(void **state)
{
        (void)state;
        for (uint8_t svc = 1; svc <= 3; svc++) {
                struct shoal_hs req, srv;
                start_req(&req, &KA, ADDR, svc);
                start_srv(&srv, &KA, ADDR, svc, ID);
                run_ok(&req, &srv);
                assert_string_equal(req.peer_id, ID);
                assert_int_equal(req.peer_max_inflight, 1024);
                assert_true(shoal_hs_over(&req) && shoal_hs_over(&srv));
        }
        /* The address is compared in one spelling: leading zeros do not matter. */
        struct shoal_hs req, srv;
        start_req(&req, &KA, "127.0.0.1:04000", 2);
        start_srv(&srv, &KA, ADDR, 2, "");
        run_ok(&req, &srv);
        assert_string_equal(req.peer_id, "");
}

static void test_without_secret(void **state)
{
        (void)state;
        struct shoal_hs req, srv;
        start_req(&req, &NOKEY, ADDR, 1);
        start_srv(&srv, NULL, ADDR, 1, ID);
        run_ok(&req, &srv);
        assert_string_equal(req.peer_id, ID);
}

/* ---- missing secrets ---- */

static void test_requester_with_secret_refuses_server_without(void **state)
{
        (void)state;
        uint64_t before = auth_failures();
        struct shoal_hs req, srv;
        start_req(&req, &KA, ADDR, 2);
        start_srv(&srv, &NOKEY, ADDR, 2, ID);
        struct frame hello = take(&req);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_DONE); /* the server thinks it is open */
        struct frame ack = take(&srv);
        assert_int_equal(give(&req, &ack), SHOAL_HS_FAIL);
        assert_int_equal(req.error, -EACCES);
        assert_int_equal(req.out_len, 0); /* it proves nothing to such a peer */
        assert_int_equal(auth_failures(), before + 1);

        /* A forged HELLO_ACK without AUTH_REQUIRED, from a peer that relays a real member's
         * nonce: the same refusal. */
        start_req(&req, &KA, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        hello = take(&req);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_MORE);
        ack = take(&srv);
        ack.b[6] = 0; /* flags: AUTH_REQUIRED cleared */
        struct shoal_wire_hdr h;
        assert_int_equal(shoal_wire_hdr_decode(ack.b, &h), 0);
        struct frame bare =
                mk(SHOAL_MSG_HELLO_ACK, 0, 0, h.id, ack.b + SHOAL_WIRE_HDR_LEN, h.body_len);
        assert_int_equal(give(&req, &bare), SHOAL_HS_FAIL);
        assert_int_equal(req.error, -EACCES);
}

static void test_requester_without_secret_refused(void **state)
{
        (void)state;
        struct shoal_hs req, srv;
        start_req(&req, NULL, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        struct frame hello = take(&req);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_MORE);
        struct frame ack = take(&srv);
        assert_int_equal(give(&req, &ack), SHOAL_HS_FAIL);
        assert_int_equal(req.error, -EACCES);
        assert_int_equal(req.out_len, 0);
        /* A peer that sends something else than AUTH gets closed. */
        struct frame rd = mk(SHOAL_MSG_PING, 0, 0, 9, "x", 1);
        assert_int_equal(give(&srv, &rd), SHOAL_HS_FAIL);
        assert_int_equal(srv.error, -EPROTO);
        assert_int_equal(srv.out_len, 0);
}

/* ---- wrong, replayed, reflected and relayed proofs ---- */

static void test_wrong_secret(void **state)
{
        (void)state;
        uint64_t before = auth_failures();
        struct shoal_hs req, srv;
        start_req(&req, &KB, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        struct frame hello = take(&req);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_MORE);
        struct frame ack = take(&srv);
        assert_int_equal(give(&req, &ack), SHOAL_HS_MORE);
        struct frame auth = take(&req);
        assert_int_equal(give(&srv, &auth), SHOAL_HS_FAIL);
        assert_int_equal(srv.error, -EACCES);
        /* The server answers ERROR(AUTH_FAILED) and nothing that proves anything. */
        struct frame err = take(&srv);
        assert_int_equal(type_of(&err), SHOAL_MSG_ERROR);
        assert_int_equal(status_of(&err), SHOAL_ST_AUTH_FAILED);
        assert_int_equal(give(&req, &err), SHOAL_HS_FAIL);
        assert_int_equal(req.error, -EACCES);
        assert_int_equal(auth_failures(), before + 2); /* one on each side */
        /* After a failure nothing more is accepted, and the first reason stays. */
        assert_int_equal(give(&srv, &auth), SHOAL_HS_FAIL);
        assert_int_equal(srv.error, -EACCES);
        assert_int_equal(srv.out_len, 0);
}

static void test_wrong_server_proof(void **state)
{
        (void)state;
        struct shoal_hs req, srv;
        start_req(&req, &KA, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        struct frame hello = take(&req);
        give(&srv, &hello);
        struct frame ack = take(&srv);
        give(&req, &ack);
        struct frame auth = take(&req);
        /* A fake that cannot make the server's proof: zeros, the requester's own proof
         * reflected, one bit off the real one. */
        uint8_t zeros[32] = {0};
        struct frame f = mk(SHOAL_MSG_AUTH_OK, 0, 0, SHOAL_HS_AUTH_ID, zeros, 32);
        struct shoal_hs r2 = req;
        assert_int_equal(give(&r2, &f), SHOAL_HS_FAIL);
        assert_int_equal(r2.error, -EACCES);
        f = mk(SHOAL_MSG_AUTH_OK, 0, 0, SHOAL_HS_AUTH_ID, auth.b + SHOAL_WIRE_HDR_LEN, 32);
        r2 = req;
        assert_int_equal(give(&r2, &f), SHOAL_HS_FAIL);
        assert_int_equal(r2.error, -EACCES);
        assert_int_equal(give(&srv, &auth), SHOAL_HS_DONE);
        struct frame ok = take(&srv);
        for (size_t i = SHOAL_WIRE_HDR_LEN; i < ok.len; i++) {
                uint8_t body[32];
                memcpy(body, ok.b + SHOAL_WIRE_HDR_LEN, 32);
                body[i - SHOAL_WIRE_HDR_LEN] ^= 0x01;
                f = mk(SHOAL_MSG_AUTH_OK, 0, 0, SHOAL_HS_AUTH_ID, body, 32);
                r2 = req;
                assert_int_equal(give(&r2, &f), SHOAL_HS_FAIL);
        }
        r2 = req;
        assert_int_equal(give(&r2, &ok), SHOAL_HS_DONE);
}

static void test_replayed_proofs(void **state)
{
        (void)state;
        /* Session 1, recorded. */
        struct shoal_hs req, srv;
        start_req(&req, &KA, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        struct frame hello1 = take(&req);
        give(&srv, &hello1);
        struct frame ack1 = take(&srv);
        give(&req, &ack1);
        struct frame auth1 = take(&req);
        assert_int_equal(give(&srv, &auth1), SHOAL_HS_DONE);
        struct frame ok1 = take(&srv);
        assert_int_equal(give(&req, &ok1), SHOAL_HS_DONE);

        /* A recorded requester replays HELLO and AUTH to a new server connection. */
        start_srv(&srv, &KA, ADDR, 2, ID);
        assert_int_equal(give(&srv, &hello1), SHOAL_HS_MORE);
        assert_int_equal(give(&srv, &auth1), SHOAL_HS_FAIL);
        assert_int_equal(srv.error, -EACCES);

        /* A recorded server replays HELLO_ACK and AUTH_OK to a new requester. */
        start_req(&req, &KA, ADDR, 2);
        assert_int_equal(give(&req, &ack1), SHOAL_HS_MORE);
        assert_int_equal(give(&req, &ok1), SHOAL_HS_FAIL);
        assert_int_equal(req.error, -EACCES);
}

static void test_relay_through_another_address(void **state)
{
        (void)state;
        /* The requester dialed a fake at 10.0.0.9:5000; the fake relays to the member at
         * 127.0.0.1:4000 byte for byte. The member refuses the proof: it was made for the
         * fake's address, and the member proves nothing. */
        uint64_t before = auth_failures();
        struct shoal_hs req, srv;
        start_req(&req, &KA, "10.0.0.9:5000", 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        struct frame hello = take(&req);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_MORE);
        struct frame ack = take(&srv);
        assert_int_equal(give(&req, &ack), SHOAL_HS_MORE);
        struct frame auth = take(&req);
        assert_int_equal(give(&srv, &auth), SHOAL_HS_FAIL);
        assert_int_equal(srv.error, -EACCES);
        struct frame err = take(&srv);
        assert_int_equal(type_of(&err), SHOAL_MSG_ERROR);
        assert_int_equal(auth_failures(), before + 1);
        /* Another port on the same host is another address too. */
        start_req(&req, &KA, "127.0.0.1:4001", 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        hello = take(&req);
        give(&srv, &hello);
        ack = take(&srv);
        give(&req, &ack);
        auth = take(&req);
        assert_int_equal(give(&srv, &auth), SHOAL_HS_FAIL);
}

static void test_tampered_identity(void **state)
{
        (void)state;
        /* A member id changed in flight (to pose as another member) breaks both proofs. */
        struct shoal_hs req, srv;
        start_req(&req, &KA, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        struct frame hello = take(&req);
        give(&srv, &hello);
        struct frame ack = take(&srv);
        struct shoal_wire_hdr h;
        assert_int_equal(shoal_wire_msg_decode(ack.b, ack.len, &h), 0);
        uint8_t body[80];
        memcpy(body, ack.b + SHOAL_WIRE_HDR_LEN, h.body_len);
        body[38] = 'f'; /* first character of the id */
        struct frame forged = mk(SHOAL_MSG_HELLO_ACK, h.flags, 0, h.id, body, h.body_len);
        assert_int_equal(give(&req, &forged), SHOAL_HS_MORE);
        assert_int_equal(req.peer_id[0], 'f');
        struct frame auth = take(&req);
        assert_int_equal(give(&srv, &auth), SHOAL_HS_FAIL);
        assert_int_equal(srv.error, -EACCES);
        /* Same for max_inflight and the server nonce. */
        const size_t offs[] = {1, 33};
        for (size_t i = 0; i < 2; i++) {
                start_req(&req, &KA, ADDR, 2);
                start_srv(&srv, &KA, ADDR, 2, ID);
                hello = take(&req);
                give(&srv, &hello);
                ack = take(&srv);
                memcpy(body, ack.b + SHOAL_WIRE_HDR_LEN, h.body_len);
                body[offs[i]] ^= 0x01;
                forged = mk(SHOAL_MSG_HELLO_ACK, h.flags, 0, h.id, body, h.body_len);
                assert_int_equal(give(&req, &forged), SHOAL_HS_MORE);
                auth = take(&req);
                assert_int_equal(give(&srv, &auth), SHOAL_HS_FAIL);
        }
}

static void test_wrong_service(void **state)
{
        (void)state;
        struct shoal_hs req, srv;
        start_req(&req, &KA, ADDR, 1);
        start_srv(&srv, &KA, ADDR, 2, ID);
        struct frame hello = take(&req);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_FAIL);
        assert_int_equal(srv.error, -ENOPROTOOPT);
        struct frame err = take(&srv);
        assert_int_equal(status_of(&err), SHOAL_ST_RPC_DISABLED);
        assert_int_equal(give(&req, &err), SHOAL_HS_FAIL);
        assert_int_equal(req.error, -ENOPROTOOPT);
        /* A HELLO whose service byte was changed in flight: the proofs bind the HELLO body. */
        start_req(&req, &KA, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 3, ID);
        hello = take(&req);
        uint8_t body[35];
        memcpy(body, hello.b + SHOAL_WIRE_HDR_LEN, 35);
        body[2] = 3;
        struct frame forged = mk(SHOAL_MSG_HELLO, 0, 0, SHOAL_HS_HELLO_ID, body, 35);
        assert_int_equal(give(&srv, &forged), SHOAL_HS_MORE);
        struct frame ack = take(&srv);
        assert_int_equal(give(&req, &ack), SHOAL_HS_MORE);
        struct frame auth = take(&req);
        assert_int_equal(give(&srv, &auth), SHOAL_HS_FAIL);
        assert_int_equal(srv.error, -EACCES);
}

static void test_versions(void **state)
{
        (void)state;
        struct shoal_hs req, srv;
        uint8_t body[35] = {SHOAL_WIRE_VERSION + 1, SHOAL_WIRE_VERSION + 2, 2};
        struct frame hello = mk(SHOAL_MSG_HELLO, 0, 0, 1, body, 35);
        start_srv(&srv, &KA, ADDR, 2, ID);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_FAIL);
        struct frame err = take(&srv);
        assert_int_equal(status_of(&err), SHOAL_ST_BAD_REQUEST);
        body[0] = 1;
        body[1] = 1;
        hello = mk(SHOAL_MSG_HELLO, 0, 0, 1, body, 35);
        start_srv(&srv, &KA, ADDR, 2, ID);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_FAIL);
        /* An answer naming a version we did not offer. */
        start_req(&req, &KA, ADDR, 2);
        struct shoal_wire_hello_ack a = {.version = 1, .max_inflight = 4};
        uint8_t ab[80];
        int n = shoal_wire_hello_ack_encode(ab, sizeof(ab), &a);
        assert_true(n > 0);
        struct frame ack = mk(SHOAL_MSG_HELLO_ACK, SHOAL_WF_AUTH_REQUIRED, 0, 1, ab, (size_t)n);
        assert_int_equal(give(&req, &ack), SHOAL_HS_FAIL);
        assert_int_equal(req.error, -EPROTO);
}

/* ---- frames out of order ---- */

static void test_server_order(void **state)
{
        (void)state;
        uint8_t proof[32] = {1};
        uint8_t ackbody[80];
        struct shoal_wire_hello_ack a = {.version = SHOAL_WIRE_VERSION, .max_inflight = 4};
        int n = shoal_wire_hello_ack_encode(ackbody, sizeof(ackbody), &a);
        assert_true(n > 0);
        const struct frame first[] = {
                mk(SHOAL_MSG_AUTH, 0, 0, 2, proof, 32),
                mk(SHOAL_MSG_AUTH_OK, 0, 0, 2, proof, 32),
                mk(SHOAL_MSG_HELLO_ACK, 0, 0, 1, ackbody, (size_t)n),
                mk(SHOAL_MSG_PING, 0, 0, 3, "p", 1),
                mk(SHOAL_MSG_INFO, 0, 0, 3, NULL, 0),
                mk(SHOAL_MSG_GOAWAY, 0, 0, 0, NULL, 0),
                mk(SHOAL_MSG_ERROR, 0, SHOAL_ST_BUSY, 1, NULL, 0),
                mk(SHOAL_MSG_PONG, 0, 0, 3, NULL, 0),
        };
        for (size_t i = 0; i < sizeof(first) / sizeof(first[0]); i++) {
                for (int keyed = 0; keyed < 2; keyed++) {
                        struct shoal_hs srv;
                        start_srv(&srv, keyed ? &KA : NULL, ADDR, 2, ID);
                        assert_int_equal(give(&srv, &first[i]), SHOAL_HS_FAIL);
                        assert_int_equal(srv.error, -EPROTO);
                        assert_int_equal(srv.out_len, 0);
                }
        }
        /* After HELLO, only AUTH: a second HELLO, a READ-like frame, an answer type. */
        struct shoal_hs req, srv;
        start_req(&req, &KA, ADDR, 2);
        struct frame hello = take(&req);
        const struct frame second[] = {hello, first[1], first[2], first[3], first[4], first[5]};
        for (size_t i = 0; i < sizeof(second) / sizeof(second[0]); i++) {
                start_srv(&srv, &KA, ADDR, 2, ID);
                assert_int_equal(give(&srv, &hello), SHOAL_HS_MORE);
                assert_int_equal(give(&srv, &second[i]), SHOAL_HS_FAIL);
                assert_int_equal(srv.error, -EPROTO);
        }
        /* AUTH with a body of the wrong length does not decode. */
        start_srv(&srv, &KA, ADDR, 2, ID);
        give(&srv, &hello);
        struct frame shortauth = mk(SHOAL_MSG_AUTH, 0, 0, 2, proof, 31);
        assert_int_equal(give(&srv, &shortauth), SHOAL_HS_FAIL);
        /* After DONE nothing belongs to the handshake any more. */
        start_req(&req, &KA, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        run_ok(&req, &srv);
        hello = mk(SHOAL_MSG_HELLO, 0, 0, 1, NULL, 0);
        assert_int_equal(give(&srv, &hello), SHOAL_HS_FAIL);
        assert_int_equal(give(&req, &first[1]), SHOAL_HS_FAIL);
        /* A frame that does not decode (bad CRC). */
        start_srv(&srv, &KA, ADDR, 2, ID);
        start_req(&req, &KA, ADDR, 2);
        hello = take(&req);
        hello.b[SHOAL_WIRE_HDR_LEN + 5] ^= 1;
        assert_int_equal(give(&srv, &hello), SHOAL_HS_FAIL);
        /* A step before start fails too. */
        struct shoal_hs idle;
        memset(&idle, 0, sizeof(idle));
        assert_int_equal(give(&idle, &first[0]), SHOAL_HS_FAIL);
}

static void test_requester_order(void **state)
{
        (void)state;
        uint8_t proof[32] = {7};
        struct shoal_hs req, srv;
        /* Waiting for HELLO_ACK: anything else, or a HELLO_ACK with another id. */
        start_req(&req, &KA, ADDR, 2);
        start_srv(&srv, &KA, ADDR, 2, ID);
        struct frame hello = take(&req);
        give(&srv, &hello);
        struct frame ack = take(&srv);
        struct shoal_wire_hdr h;
        assert_int_equal(shoal_wire_msg_decode(ack.b, ack.len, &h), 0);
        const struct frame wrong[] = {
                mk(SHOAL_MSG_AUTH_OK, 0, 0, SHOAL_HS_HELLO_ID, proof, 32),
                mk(SHOAL_MSG_PONG, 0, 0, SHOAL_HS_HELLO_ID, NULL, 0),
                mk(SHOAL_MSG_HELLO, 0, 0, SHOAL_HS_HELLO_ID, hello.b + SHOAL_WIRE_HDR_LEN, 35),
                mk(SHOAL_MSG_AUTH, 0, 0, SHOAL_HS_HELLO_ID, proof, 32),
                mk(SHOAL_MSG_HELLO_ACK, h.flags, 0, 77, ack.b + SHOAL_WIRE_HDR_LEN, h.body_len),
                mk(SHOAL_MSG_ERROR, 0, SHOAL_ST_BUSY, 77, NULL, 0),
        };
        for (size_t i = 0; i < sizeof(wrong) / sizeof(wrong[0]); i++) {
                start_req(&req, &KA, ADDR, 2);
                assert_int_equal(give(&req, &wrong[i]), SHOAL_HS_FAIL);
                assert_int_equal(req.error, -EPROTO);
                assert_int_equal(req.out_len, 0);
        }
        /* An ERROR to the HELLO: its status decides. */
        start_req(&req, &KA, ADDR, 2);
        struct frame busy = mk(SHOAL_MSG_ERROR, 0, SHOAL_ST_BUSY, SHOAL_HS_HELLO_ID, NULL, 0);
        assert_int_equal(give(&req, &busy), SHOAL_HS_FAIL);
        assert_int_equal(req.error, -EREMOTEIO);
        /* Waiting for AUTH_OK: a second HELLO_ACK, a PONG, an AUTH_OK with another id. */
        const struct frame wrong2[] = {
                ack,
                mk(SHOAL_MSG_PONG, 0, 0, SHOAL_HS_AUTH_ID, NULL, 0),
                mk(SHOAL_MSG_AUTH_OK, 0, 0, 99, proof, 32),
                mk(SHOAL_MSG_AUTH_OK, 0, 0, SHOAL_HS_AUTH_ID, proof, 16),
        };
        for (size_t i = 0; i < sizeof(wrong2) / sizeof(wrong2[0]); i++) {
                start_req(&req, &KA, ADDR, 2);
                start_srv(&srv, &KA, ADDR, 2, ID);
                hello = take(&req);
                give(&srv, &hello);
                struct frame a = take(&srv);
                assert_int_equal(give(&req, &a), SHOAL_HS_MORE);
                assert_int_equal(give(&req, &wrong2[i]), SHOAL_HS_FAIL);
                assert_int_equal(req.error, -EPROTO);
        }
}

/* ---- secrets ---- */

static void test_secret_bytes(void **state)
{
        (void)state;
        /* Two 32-byte secrets that both start with NUL are two different secrets. */
        uint8_t s1[32], s2[32];
        memset(s1, 0, sizeof(s1));
        memset(s2, 0, sizeof(s2));
        for (int i = 1; i < 32; i++) {
                s1[i] = (uint8_t)(0x10 + i);
                s2[i] = (uint8_t)(0x90 + i);
        }
        struct shoal_hs_key k1 = key_of(s1, 32), k2 = key_of(s2, 32);
        assert_memory_not_equal(k1.k, k2.k, 32);
        struct shoal_hs req, srv;
        start_req(&req, &k1, ADDR, 2);
        start_srv(&srv, &k2, ADDR, 2, ID);
        struct frame hello = take(&req);
        give(&srv, &hello);
        struct frame ack = take(&srv);
        give(&req, &ack);
        struct frame auth = take(&req);
        assert_int_equal(give(&srv, &auth), SHOAL_HS_FAIL);
        /* The same bytes do authenticate. */
        struct shoal_hs_key k1b = key_of(s1, 32);
        start_req(&req, &k1b, ADDR, 2);
        start_srv(&srv, &k1, ADDR, 2, ID);
        run_ok(&req, &srv);
        /* A secret and its prefix differ. */
        struct shoal_hs_key kp = key_of(s1, 31);
        assert_memory_not_equal(kp.k, k1.k, 32);
        /* Limits: 15 bytes and 4097 bytes are refused, 16 and 4096 accepted, empty is none. */
        static uint8_t big[SHOAL_SECRET_MAX + 1];
        struct shoal_hs_key k;
        struct shoal_secret s = {.bytes = big, .len = SHOAL_SECRET_MIN - 1};
        assert_int_equal(shoal_hs_key_init(&k, &s), -EINVAL);
        assert_false(k.set);
        s.len = SHOAL_SECRET_MIN;
        assert_int_equal(shoal_hs_key_init(&k, &s), 0);
        assert_true(k.set);
        s.len = SHOAL_SECRET_MAX;
        assert_int_equal(shoal_hs_key_init(&k, &s), 0);
        s.len = SHOAL_SECRET_MAX + 1;
        assert_int_equal(shoal_hs_key_init(&k, &s), -EINVAL);
        s.len = 0;
        assert_int_equal(shoal_hs_key_init(&k, &s), 0);
        assert_false(k.set);
        assert_int_equal(shoal_hs_key_init(&k, NULL), 0);
        assert_false(k.set);
        s = (struct shoal_secret){.bytes = NULL, .len = 20};
        assert_int_equal(shoal_hs_key_init(&k, &s), -EINVAL);
        shoal_hs_key_clear(&k1);
        assert_false(k1.set);
}

static void test_bad_config(void **state)
{
        (void)state;
        struct shoal_hs hs;
        const char *bad_addrs[] = {
                NULL,      "",         "127.0.0.1", "127.0.0.1:0",  "127.0.0.1:65536",
                "host:80", "1.2.3:80", "::1:80",    "127.0.0.1:8x", "999.0.0.1:80"};
        for (size_t i = 0; i < sizeof(bad_addrs) / sizeof(bad_addrs[0]); i++) {
                struct shoal_hs_config c = {
                        .role = SHOAL_HS_REQUESTER, .key = &KA, .service = 2, .addr = bad_addrs[i]};
                assert_int_equal(shoal_hs_start(&hs, &c), -EINVAL);
                assert_true(shoal_hs_over(&hs));
        }
        struct shoal_hs_config c = {.role = SHOAL_HS_SERVER,
                                    .key = &KA,
                                    .service = 4,
                                    .addr = ADDR,
                                    .member_id = ID,
                                    .max_inflight = 1};
        assert_int_equal(shoal_hs_start(&hs, &c), -EINVAL);
        c.service = 2;
        c.member_id = "has space";
        assert_int_equal(shoal_hs_start(&hs, &c), -EINVAL);
        c.member_id = ID "x"; /* 33 characters */
        assert_int_equal(shoal_hs_start(&hs, &c), -EINVAL);
        c.member_id = ID;
        c.max_inflight = 0;
        assert_int_equal(shoal_hs_start(&hs, &c), -EINVAL);
}

static void test_no_randomness(void **state)
{
        (void)state;
        struct shoal_hs hs;
        random_errno = ENOSYS;
        struct shoal_hs_config c = {
                .role = SHOAL_HS_REQUESTER, .key = &KA, .service = 2, .addr = ADDR};
        assert_int_equal(shoal_hs_start(&hs, &c), -ENOSYS);
        assert_int_equal(hs.out_len, 0); /* no HELLO with a predictable nonce */
        struct frame any = mk(SHOAL_MSG_HELLO_ACK, 0, 0, 1, NULL, 0);
        assert_int_equal(give(&hs, &any), SHOAL_HS_FAIL);
        c = (struct shoal_hs_config){.role = SHOAL_HS_SERVER,
                                     .key = &KA,
                                     .service = 2,
                                     .addr = ADDR,
                                     .member_id = ID,
                                     .max_inflight = 8};
        random_errno = EIO;
        assert_int_equal(shoal_hs_start(&hs, &c), -EIO);
        random_errno = 0;
        struct shoal_hs req;
        start_req(&req, &KA, ADDR, 2);
        struct frame hello = take(&req);
        assert_int_equal(give(&hs, &hello), SHOAL_HS_FAIL);
        assert_int_equal(hs.out_len, 0);
        /* Fresh nonces differ from one handshake to the next. */
        struct shoal_hs r1, r2;
        start_req(&r1, &KA, ADDR, 2);
        start_req(&r2, &KA, ADDR, 2);
        assert_memory_not_equal(r1.out + SHOAL_WIRE_HDR_LEN + 3, r2.out + SHOAL_WIRE_HDR_LEN + 3,
                                SHOAL_WIRE_NONCE_LEN);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup(test_known_answer, setup),
                cmocka_unit_test_setup(test_with_secret, setup),
                cmocka_unit_test_setup(test_without_secret, setup),
                cmocka_unit_test_setup(test_requester_with_secret_refuses_server_without, setup),
                cmocka_unit_test_setup(test_requester_without_secret_refused, setup),
                cmocka_unit_test_setup(test_wrong_secret, setup),
                cmocka_unit_test_setup(test_wrong_server_proof, setup),
                cmocka_unit_test_setup(test_replayed_proofs, setup),
                cmocka_unit_test_setup(test_relay_through_another_address, setup),
                cmocka_unit_test_setup(test_tampered_identity, setup),
                cmocka_unit_test_setup(test_wrong_service, setup),
                cmocka_unit_test_setup(test_versions, setup),
                cmocka_unit_test_setup(test_server_order, setup),
                cmocka_unit_test_setup(test_requester_order, setup),
                cmocka_unit_test_setup(test_secret_bytes, setup),
                cmocka_unit_test_setup(test_bad_config, setup),
                cmocka_unit_test_setup(test_no_randomness, setup),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
