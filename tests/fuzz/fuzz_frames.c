/* libFuzzer target: a byte stream as a member's TCP pool / IORPC server reads it.
 *
 * The server's conn_read (src/server/server.c) receives into a fixed buffer exactly the bytes that
 * shoal_wire_frame_need asks for, and hands each whole frame to the body decoder of its type.
 * This target drives shoal_wire_frame_need the same way over the input, without sockets:
 *
 *   byte 0    bit 0: before authentication (bodies up to 128 bytes) or after (up to 4096);
 *             bits 1..7: how the stream is cut into recv() results (0: exactly what was asked)
 *   byte 1..  the stream
 *
 * Invariants: the reassembler never asks for more than its buffer holds; it finds the same frames
 * and the same final error however the stream is cut, and the same as a plain walk over the
 * stream written here from the protocol page; every frame without payload it accepts is also a
 * valid RDMA message (shoal_wire_msg_decode), every frame re-encodes to the same header, and a
 * READ it accepts names a valid key, version and range. A payload is accepted only after
 * authentication and only on PUT_BLOCK; conn_read receives it after the body, so both walks skip
 * it (how many of its bytes the server keeps is shoal_put_begin's, not driven here). What
 * conn_frame then does with a frame (the handshake states, dispatch) is not driven here. */
#include <errno.h>

#include "common/block.h"
#include "common/util.h"
#include "fuzz_input.h"
#include "wire/wire.h"

#define BODY_PREAUTH 128u
#define BODY_READY   4096u
#define MAX_FRAMES   4096

struct outcome {
        size_t nframes;
        size_t start[MAX_FRAMES]; /* stream offset of each frame */
        int end;                  /* 0: waiting for more bytes when the stream ended; < 0: error */
};

static uint8_t buf[SHOAL_WIRE_HDR_LEN + BODY_READY];

/* The server's decoders for a frame it accepted. */
static void check_frame(const uint8_t *f, const struct shoal_wire_hdr *h, bool ready)
{
        size_t len = SHOAL_WIRE_HDR_LEN + h->body_len;
        struct shoal_wire_hdr h2;
        if (h->payload_len) {
                FZ_CHECK(ready && h->type == SHOAL_MSG_PUT_BLOCK);
        } else {
                FZ_CHECK(shoal_wire_msg_decode(f, len, &h2) == 0);
                FZ_CHECK(!memcmp(h, &h2, sizeof(h2)));
        }
        uint8_t again[SHOAL_WIRE_HDR_LEN];
        shoal_wire_hdr_encode(again, h, f + SHOAL_WIRE_HDR_LEN);
        FZ_CHECK(!memcmp(again, f, SHOAL_WIRE_HDR_LEN));

        const uint8_t *body = f + SHOAL_WIRE_HDR_LEN;
        switch (h->type) {
        case SHOAL_MSG_READ:
        case SHOAL_MSG_CORRUPT: {
                struct shoal_wire_read rd;
                if (shoal_wire_read_decode(body, h->body_len, &rd))
                        break;
                FZ_CHECK(shoal_key_valid(rd.key, rd.key_len));
                FZ_CHECK(shoal_version_valid(rd.version, rd.version_len));
                FZ_CHECK(rd.key_len <= SHOAL_KEY_MAX && rd.version_len <= SHOAL_VERSION_MAX);
                FZ_CHECK(rd.key >= (const char *)body &&
                         rd.version + rd.version_len <= (const char *)body + h->body_len);
                uint32_t blen = shoal_block_len(rd.obj_size, rd.block_size, rd.block_index);
                FZ_CHECK(shoal_range_valid(blen, rd.offset, rd.length));
                break;
        }
        case SHOAL_MSG_PUT_BLOCK: {
                struct shoal_wire_put m;
                (void)shoal_wire_put_decode(body, h->body_len, &m);
                break;
        }
        case SHOAL_MSG_HELLO: {
                struct shoal_wire_hello m;
                (void)shoal_wire_hello_decode(body, h->body_len, &m);
                break;
        }
        case SHOAL_MSG_AUTH: {
                struct shoal_wire_auth m;
                (void)shoal_wire_auth_decode(body, h->body_len, &m);
                break;
        }
        case SHOAL_MSG_INFO:
        case SHOAL_MSG_GOAWAY:
        case SHOAL_MSG_AUTH_OK:
                FZ_CHECK(h->body_len == 0);
                break;
        default:
                break;
        }
}

/* Feeds STREAM through shoal_wire_frame_need as conn_read does, each recv() returning at most
 * what CUT says (CUT 0: everything asked for). */
static void reassemble(const uint8_t *stream, size_t len, uint32_t body_max, uint8_t cut,
                       struct outcome *o)
{
        size_t have = 0, pos = 0, frame_at = 0;
        uint64_t st = cut;
        o->nframes = 0;
        for (;;) {
                struct shoal_wire_hdr h;
                bool ready = body_max == BODY_READY;
                int need = shoal_wire_frame_need(buf, have, body_max, ready, &h);
                if (need < 0) {
                        FZ_CHECK(need == -EPROTO || need == -EMSGSIZE || need == -EBADMSG);
                        o->end = need;
                        return;
                }
                if (need == 0) {
                        FZ_CHECK(have == SHOAL_WIRE_HDR_LEN + h.body_len);
                        FZ_CHECK(h.body_len <= body_max);
                        check_frame(buf, &h, ready);
                        if (o->nframes < MAX_FRAMES)
                                o->start[o->nframes] = frame_at;
                        o->nframes++;
                        have = 0;
                        if (len - pos < h.payload_len) { /* the payload, received apart */
                                o->end = 0;
                                return;
                        }
                        pos += h.payload_len;
                        frame_at = pos;
                        continue;
                }
                /* conn_read receives into c->in + c->in_len, WANT bytes: they must fit. */
                FZ_CHECK(have + (size_t)need <= sizeof(buf));
                FZ_CHECK(have + (size_t)need <= SHOAL_WIRE_HDR_LEN + body_max);
                if (pos == len) {
                        o->end = 0;
                        return;
                }
                size_t take = (size_t)need;
                if (cut) {
                        size_t piece = 1 + fz_prng(&st) % 48;
                        take = SHOAL_MIN(take, piece);
                }
                take = SHOAL_MIN(take, len - pos);
                memcpy(buf + have, stream + pos, take);
                have += take;
                pos += take;
        }
}

/* The same stream walked directly, frame after frame, from the rules of docs/iorpc-protocol.md. */
static void walk(const uint8_t *s, size_t len, uint32_t body_max, struct outcome *o)
{
        size_t off = 0;
        o->nframes = 0;
        for (;;) {
                size_t rem = len - off;
                if (rem < SHOAL_WIRE_HDR_LEN) {
                        o->end = 0;
                        return;
                }
                struct shoal_wire_hdr h;
                if (shoal_wire_hdr_decode(s + off, &h)) {
                        o->end = -EPROTO;
                        return;
                }
                bool put = body_max == BODY_READY && h.type == SHOAL_MSG_PUT_BLOCK;
                if ((h.payload_len && !put) || h.body_len > body_max) {
                        o->end = -EMSGSIZE;
                        return;
                }
                if (rem < SHOAL_WIRE_HDR_LEN + (size_t)h.body_len) {
                        o->end = 0;
                        return;
                }
                if (!shoal_wire_crc_ok(s + off, s + off + SHOAL_WIRE_HDR_LEN, h.body_len)) {
                        o->end = -EBADMSG;
                        return;
                }
                if (o->nframes < MAX_FRAMES)
                        o->start[o->nframes] = off;
                o->nframes++;
                if (rem - SHOAL_WIRE_HDR_LEN - h.body_len < h.payload_len) {
                        o->end = 0;
                        return;
                }
                off += SHOAL_WIRE_HDR_LEN + (size_t)h.body_len + h.payload_len;
        }
}

static void same(const struct outcome *a, const struct outcome *b)
{
        FZ_CHECK(a->end == b->end && a->nframes == b->nframes);
        size_t n = SHOAL_MIN(a->nframes, (size_t)MAX_FRAMES);
        for (size_t i = 0; i < n; i++)
                FZ_CHECK(a->start[i] == b->start[i]);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        static struct outcome whole, cut, ref;
        if (size < 1)
                return 0;
        uint32_t body_max = data[0] & 1 ? BODY_PREAUTH : BODY_READY;
        uint8_t c = data[0] >> 1;
        const uint8_t *s = data + 1;
        size_t len = size - 1;

        reassemble(s, len, body_max, 0, &whole);
        walk(s, len, body_max, &ref);
        same(&whole, &ref);
        if (c) {
                reassemble(s, len, body_max, c, &cut);
                same(&whole, &cut);
        }
        return 0;
}
