/* libFuzzer target for the handshake state machine (src/wire/handshake.c).
 *
 * A requester and a server run against each other in memory, with fixed nonces so that every
 * input replays exactly. The first input byte chooses who holds which secret and whether the
 * requester dialed the server's address; the rest is a script of operations:
 *   0  deliver the requester's pending frame to the server
 *   1  deliver the server's pending frame to the requester
 *   2  P B: deliver the requester's pending frame with byte P xor B (B 0: unchanged)
 *   3  P B: the same for the server's pending frame
 *   4  L ...: L raw bytes as a frame to the server
 *   5  L ...: L raw bytes as a frame to the requester
 * Invariants (any break aborts): every frame a side emits decodes and is of a type that side may
 * send; a failed side stays failed and emits nothing more; a server with a secret opens a session
 * only for a requester with the same secret that dialed its address; a requester with a secret
 * opens a session only after that very server did. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/secret.h"
#include "wire/handshake.h"
#include "wire/wire.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define CHECK(x)                                                                                   \
        do {                                                                                       \
                if (!(x)) {                                                                        \
                        fprintf(stderr, "fuzz_handshake: check failed at line %d: %s\n", __LINE__, \
                                #x);                                                               \
                        abort();                                                                   \
                }                                                                                  \
        } while (0)

static const uint8_t SECRET_A[32] = "fuzzing secret A, 32 bytes long";
static const uint8_t SECRET_B[32] = {0, 'f', 'u', 'z', 'z', ' ', 'B'};

struct side {
        struct shoal_hs hs;
        enum shoal_hs_verdict last;
        bool failed, done;
};

static void check_out(const struct side *s, bool server)
{
        if (!s->hs.out_len)
                return;
        struct shoal_wire_hdr h;
        CHECK(s->hs.out_len <= SHOAL_HS_FRAME_MAX);
        CHECK(!shoal_wire_msg_decode(s->hs.out, s->hs.out_len, &h));
        if (server)
                CHECK(h.type == SHOAL_MSG_HELLO_ACK || h.type == SHOAL_MSG_AUTH_OK ||
                      h.type == SHOAL_MSG_ERROR);
        else
                CHECK(h.type == SHOAL_MSG_HELLO || h.type == SHOAL_MSG_AUTH);
}

static void feed(struct side *to, bool server, const uint8_t *msg, size_t len)
{
        bool was_failed = to->failed;
        int old_error = to->hs.error;
        enum shoal_hs_verdict v = shoal_hs_step_msg(&to->hs, msg, len);
        if (was_failed || to->done) {
                /* Over: nothing more, and a failure keeps its first reason. */
                CHECK(v == SHOAL_HS_FAIL && to->hs.out_len == 0);
                if (was_failed)
                        CHECK(to->hs.error == old_error);
        }
        if (v == SHOAL_HS_FAIL)
                CHECK(to->hs.error < 0 && to->hs.why);
        if (!to->done && v == SHOAL_HS_DONE)
                to->done = true;
        if (v == SHOAL_HS_FAIL && !to->done)
                to->failed = true;
        to->last = v;
        check_out(to, server);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        uint8_t cfg = data[0];
        struct shoal_secret sa = {SECRET_A, sizeof(SECRET_A)}, sb = {SECRET_B, sizeof(SECRET_B)};
        struct shoal_hs_key rk, sk;
        CHECK(!shoal_hs_key_init(&rk, (cfg & 1) ? &sa : NULL));
        CHECK(!shoal_hs_key_init(&sk, (cfg & 2) ? ((cfg & 4) ? &sb : &sa) : NULL));
        bool same_key = rk.set && sk.set && !memcmp(rk.k, sk.k, sizeof(rk.k));
        const char *srv_addr = "10.1.2.3:4000";
        bool same_addr = !(cfg & 8);
        uint8_t rsvc = (uint8_t)(1 + ((cfg >> 4) & 1)), ssvc = (uint8_t)(1 + ((cfg >> 5) & 1));
        static const uint8_t nr[32] = {1, 2, 3}, ns[32] = {9, 8, 7};

        struct side req, srv;
        memset(&req, 0, sizeof(req));
        memset(&srv, 0, sizeof(srv));
        struct shoal_hs_config rc = {.role = SHOAL_HS_REQUESTER,
                                     .key = &rk,
                                     .service = rsvc,
                                     .addr = same_addr ? srv_addr : "10.9.9.9:4000",
                                     .nonce = nr};
        struct shoal_hs_config sc = {.role = SHOAL_HS_SERVER,
                                     .key = &sk,
                                     .service = ssvc,
                                     .addr = srv_addr,
                                     .member_id = (cfg & 64) ? "" : "member-1",
                                     .max_inflight = 1 + (cfg >> 7) * 1023,
                                     .nonce = ns};
        CHECK(!shoal_hs_start(&req.hs, &rc));
        CHECK(!shoal_hs_start(&srv.hs, &sc));
        check_out(&req, false);
        check_out(&srv, true);

        uint8_t buf[SHOAL_HS_FRAME_MAX + 256];
        size_t i = 1;
        while (i < size) {
                uint8_t op = data[i++] % 6;
                struct side *from = (op == 0 || op == 2) ? &req : &srv;
                struct side *to = from == &req ? &srv : &req;
                bool to_server = to == &srv;
                if (op <= 3) {
                        size_t len = from->hs.out_len;
                        memcpy(buf, from->hs.out, len);
                        if (op >= 2) {
                                if (i + 2 > size)
                                        break;
                                if (len)
                                        buf[data[i] % len] ^= data[i + 1];
                                i += 2;
                        }
                        feed(to, to_server, buf, len);
                } else {
                        if (i >= size)
                                break;
                        size_t len = data[i++];
                        if (len > size - i)
                                len = size - i;
                        memcpy(buf, data + i, len);
                        i += len;
                        feed(op == 4 ? &srv : &req, op == 4, buf, len);
                }
                /* The invariants that make this a security property. */
                if (srv.done && sk.set)
                        CHECK(same_key && same_addr && rsvc == ssvc);
                if (req.done && rk.set)
                        CHECK(srv.done && same_key && same_addr && rsvc == ssvc);
                if (req.done)
                        CHECK(req.hs.peer_max_inflight >= 1);
        }
        shoal_hs_key_clear(&rk);
        shoal_hs_key_clear(&sk);
        return 0;
}
