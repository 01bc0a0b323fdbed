/* libFuzzer target: what an etcd server (or anyone on its port) answers the gRPC keep-alive
 * stream (src/group/etcd_h2.c): a byte stream of HTTP/2 frames, fed to shoal_h2ka_feed in pieces.
 *
 *   byte 0   how the rest is cut: pieces of (byte 0 & 63) + 1 bytes, times 256 when bit 6 is
 *            set (up to 16 KiB, what a recv gives); bit 7: what we owe the server is not
 *            taken away between pieces (a server that makes us owe more than fits, a flood)
 *   rest     the server's bytes
 *
 * Invariants: nothing crashes, leaks or reads out of bounds; a broken stream stays broken; the
 * frames owed to the server fit their buffer and are whole frames; the send windows stay within
 * HTTP/2's 2^31 - 1; every answer was a whole gRPC message (no more answers than the bytes allow);
 * a request frame is a well-formed DATA frame whose messages parse back to their ids. */
#include <errno.h>

#include "fuzz_input.h"
#include "group/group_internal.h"

struct seen {
        uint64_t n;
};

static void on_answer(void *arg, int64_t id, int64_t ttl)
{
        (void)id;
        (void)ttl;
        ((struct seen *)arg)->n++;
}

/* K->out holds whole frames: walk their heads. */
static void check_owed(const struct shoal_h2ka *k)
{
        FZ_CHECK(k->out_len <= sizeof(k->out));
        size_t o = 0;
        while (o < k->out_len) {
                FZ_CHECK(k->out_len - o >= 9);
                size_t len = (size_t)k->out[o] << 16 | (size_t)k->out[o + 1] << 8 | k->out[o + 2];
                FZ_CHECK(k->out_len - o - 9 >= len);
                o += 9 + len;
        }
}

static void request_round_trip(int64_t id)
{
        uint8_t req[9 + 16 * SHOAL_H2KA_IDS_MAX];
        int64_t ids[2] = {id, id ^ 0x5555};
        size_t len = shoal_h2ka_request(req, sizeof(req), ids, 2);
        FZ_CHECK(len > 9 && req[3] == 0 && req[8] == 1);
        size_t o = 9;
        for (int i = 0; i < 2; i++) {
                FZ_CHECK(len - o >= 5 && req[o] == 0);
                size_t ml = (size_t)req[o + 1] << 24 | (size_t)req[o + 2] << 16 |
                            (size_t)req[o + 3] << 8 | req[o + 4];
                FZ_CHECK(len - o - 5 >= ml);
                /* A request is the answer's field 1: parsed as an answer it has no ID or TTL. */
                int64_t aid, ttl;
                FZ_CHECK(shoal_h2ka_parse_answer(req + o + 5, ml, &aid, &ttl) == 0);
                o += 5 + ml;
        }
        FZ_CHECK(o == len);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        size_t piece = (size_t)(data[0] & 63) + 1;
        if (data[0] & 64)
                piece *= 256;
        bool keep_owed = data[0] & 128;
        data++;
        size--;
        struct shoal_h2ka *k = malloc(sizeof(*k));
        FZ_CHECK(k);
        shoal_h2ka_init(k);
        struct seen s = {0};
        bool broken = false;
        size_t fed = 0;
        while (fed < size) {
                size_t n = SHOAL_MIN(piece, size - fed);
                int rc = shoal_h2ka_feed(k, data + fed, n, on_answer, &s);
                FZ_CHECK(rc == 0 || rc == -EPROTO);
                if (broken)
                        FZ_CHECK(rc == -EPROTO);
                broken = rc != 0;
                FZ_CHECK(broken == k->broken);
                check_owed(k);
                if (!keep_owed)
                        k->out_len = 0; /* sent */
                FZ_CHECK(k->send_conn <= 0x7fffffffLL && k->send_stream <= 0x7fffffffLL);
                fed += n;
        }
        /* An answer takes at least a frame head and a message head. */
        FZ_CHECK(s.n * 5 <= size && s.n == k->answers);
        int64_t id = 0;
        memcpy(&id, data, SHOAL_MIN(size, sizeof(id)));
        request_round_trip(id);
        free(k);
        return 0;
}
