/* The etcd registry's pure half (src/group/etcd_codec.c): base64 against RFC 4648's vectors,
 * key prefixes that keep groups apart, the etcd:// URL, and the gateway's answers — ids taken
 * only from keys under the prefix, error answers told apart, leases and TTLs read as int64
 * strings; and the gRPC keep-alive stream's bytes (etcd_h2.c): what we send, answers put together
 * across reads, what the server is owed, and hostile frames that end the connection. The backend
 * against a real etcd is tests/integration/test_etcd.sh. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "group/group_internal.h"

static void test_base64(void **state)
{
        static const char *plain[] = {"", "f", "fo", "foo", "foob", "fooba", "foobar"};
        static const char *coded[] = {"",         "Zg==",     "Zm8=",    "Zm9v",
                                      "Zm9vYg==", "Zm9vYmE=", "Zm9vYmFy"};
        char out[64];
        for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
                assert_int_equal(
                        shoal_etcd_b64_encode(plain[i], strlen(plain[i]), out, sizeof(out)),
                        strlen(coded[i]));
                assert_string_equal(out, coded[i]);
                long n = shoal_etcd_b64_decode(coded[i], strlen(coded[i]), out, sizeof(out));
                assert_int_equal(n, strlen(plain[i]));
                assert_memory_equal(out, plain[i], (size_t)n);
        }
        /* Not base64, or does not fit. */
        assert_int_equal(shoal_etcd_b64_decode("Zm9", 3, out, sizeof(out)), -1);
        assert_int_equal(shoal_etcd_b64_decode("Zm=v", 4, out, sizeof(out)), -1);
        assert_int_equal(shoal_etcd_b64_decode("Z=8=", 4, out, sizeof(out)), -1);
        assert_int_equal(shoal_etcd_b64_decode("Zg==Zg==", 8, out, sizeof(out)), -1);
        assert_int_equal(shoal_etcd_b64_decode("Zm9vYmFy", 8, out, 5), -1);
        assert_int_equal(shoal_etcd_b64_encode("foobar", 6, out, 8), -1);
}

static void test_prefix(void **state)
{
        char p[SHOAL_ETCD_KEY_MAX];
        assert_int_equal(shoal_etcd_prefix("g1", "members", p, sizeof(p)),
                         strlen("shoal/g1/members/"));
        assert_string_equal(p, "shoal/g1/members/");
        /* "a/members/x" must not be a key of group "a". */
        shoal_etcd_prefix("a/members/x", "members", p, sizeof(p));
        assert_string_equal(p, "shoal/a%2Fmembers%2Fx/members/");
        shoal_etcd_prefix("100%", "weights", p, sizeof(p));
        assert_string_equal(p, "shoal/100%25/weights/");
        char big[SHOAL_GROUP_NAME_MAX + 1];
        memset(big, '/', SHOAL_GROUP_NAME_MAX);
        big[SHOAL_GROUP_NAME_MAX] = '\0';
        assert_true(shoal_etcd_prefix(big, "members", p, sizeof(p)) > 0);
        assert_int_equal(shoal_etcd_prefix("g1", "members", p, 10), -EINVAL);
}

static void test_url(void **state)
{
        struct shoal_etcd_url u;
        char err[256];
        assert_int_equal(shoal_etcd_url_parse("h1:2380,10.0.0.2,[::1]:3000/", &u, err, sizeof(err)),
                         0);
        assert_int_equal(u.n, 3);
        assert_string_equal(u.ep[0].host, "h1");
        assert_int_equal(u.ep[0].port, 2380);
        assert_string_equal(u.ep[1].host, "10.0.0.2");
        assert_int_equal(u.ep[1].port, 2379);
        assert_string_equal(u.ep[2].host, "[::1]");
        assert_int_equal(u.ep[2].port, 3000);
        static const char *bad[] = {"",   "/",     "h:0",  "h:65536", "h:x",    "h:",  ",h",
                                    "h,", "u:p@h", "h/db", "[::1",    "[::1]x", "h h", "h:123456"};
        for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
                err[0] = '\0';
                assert_int_equal(shoal_etcd_url_parse(bad[i], &u, err, sizeof(err)), -EINVAL);
                assert_non_null(strstr(err, "etcd URL"));
        }
}

struct seen {
        char ids[8][64];
        size_t lens[8];
        unsigned n;
};

static int collect(void *arg, const char *id, size_t id_len, const char *rec, size_t rec_len)
{
        struct seen *s = arg;
        if (s->n == 8)
                return -E2BIG;
        snprintf(s->ids[s->n], sizeof(s->ids[0]), "%.*s", (int)id_len, id);
        s->lens[s->n++] = rec_len;
        return 0;
}

static void test_range(void **state)
{
        /* keys: shoal/g1/members/abc, shoal/g10/members/x (another group), shoal/g1/members/
         * (no id), shoal/g1/members/bad with a value that is not base64. */
        const char *body = "{\"header\":{\"revision\":\"42\"},\"kvs\":["
                           "{\"key\":\"c2hvYWwvZzEvbWVtYmVycy9hYmM=\",\"value\":\"bTF8eA==\"},"
                           "{\"key\":\"c2hvYWwvZzEwL21lbWJlcnMveA==\",\"value\":\"eA==\"},"
                           "{\"key\":\"c2hvYWwvZzEvbWVtYmVycy8=\",\"value\":\"eA==\"},"
                           "{\"key\":\"c2hvYWwvZzEvbWVtYmVycy9iYWQ=\",\"value\":\"!\"},"
                           "7],\"count\":\"5\"}";
        struct seen s = {0};
        int64_t rev = 0;
        char err[256];
        assert_int_equal(shoal_etcd_parse_range(body, strlen(body), "shoal/g1/members/", collect,
                                                &s, &rev, err, sizeof(err)),
                         0);
        assert_int_equal(rev, 42);
        assert_int_equal(s.n, 2);
        assert_string_equal(s.ids[0], "abc");
        assert_int_equal(s.lens[0], 4); /* "m1|x" */
        assert_string_equal(s.ids[1], "bad");
        assert_int_equal(s.lens[1], 0);

        const char *none = "{\"header\":{\"revision\":\"3\"}}";
        memset(&s, 0, sizeof(s));
        assert_int_equal(shoal_etcd_parse_range(none, strlen(none), "shoal/g1/members/", collect,
                                                &s, NULL, err, sizeof(err)),
                         0);
        assert_int_equal(s.n, 0);
        const char *notlist = "{\"kvs\":{}}";
        assert_int_equal(shoal_etcd_parse_range(notlist, strlen(notlist), "p/", collect, &s, NULL,
                                                err, sizeof(err)),
                         -EPROTO);
        assert_int_equal(
                shoal_etcd_parse_range("{\"kvs\":[", 8, "p/", collect, &s, NULL, err, sizeof(err)),
                -EPROTO);
}

static void test_answers(void **state)
{
        char err[256];
        int64_t v = 0;
        const char *grant = "{\"ID\":\"7587899292579016197\",\"TTL\":\"5\"}";
        assert_int_equal(shoal_etcd_parse_grant(grant, strlen(grant), &v, err, sizeof(err)), 0);
        assert_int_equal(v, 7587899292579016197LL);
        const char *zero = "{\"ID\":\"0\",\"TTL\":\"5\"}";
        assert_int_equal(shoal_etcd_parse_grant(zero, strlen(zero), &v, err, sizeof(err)), -EPROTO);
        const char *big = "{\"ID\":\"99999999999999999999\",\"TTL\":\"5\"}";
        assert_int_equal(shoal_etcd_parse_grant(big, strlen(big), &v, err, sizeof(err)), -EPROTO);
        const char *alive = "{\"result\":{\"ID\":\"1\",\"TTL\":\"4\"}}";
        int64_t one = 1;
        assert_int_equal(
                shoal_etcd_parse_keepalives(alive, strlen(alive), &one, &v, 1, err, sizeof(err)),
                0);
        assert_int_equal(v, 4);
        const char *gone = "{\"result\":{\"ID\":\"1\"}}";
        assert_int_equal(
                shoal_etcd_parse_keepalives(gone, strlen(gone), &one, &v, 1, err, sizeof(err)), 0);
        assert_int_equal(v, 0);
        const char *nolease = "{\"error\":\"etcdserver: requested lease not found\",\"code\":5}";
        assert_int_equal(shoal_etcd_parse_status(nolease, strlen(nolease), NULL, err, sizeof(err)),
                         -ENOENT);
        assert_non_null(strstr(err, "lease not found"));
        const char *other = "{\"error\":\"etcdserver: too many requests\",\"code\":8}";
        assert_int_equal(shoal_etcd_parse_status(other, strlen(other), NULL, err, sizeof(err)),
                         -EIO);
        assert_int_equal(shoal_etcd_parse_status("[]", 2, NULL, err, sizeof(err)), -EPROTO);
        const char *dup = "{\"ID\":\"1\",\"ID\":\"2\",\"TTL\":\"5\"}";
        assert_int_equal(shoal_etcd_parse_grant(dup, strlen(dup), &v, err, sizeof(err)), -EPROTO);
}

struct seen_events {
        int n;
        char keys[4][64];
        char vals[4][64];
        bool del[4];
        int64_t rev[4];
        int stop_at; /* return 1 at this event (0: never) */
};

static int on_ev(void *arg, const struct shoal_etcd_event *ev)
{
        struct seen_events *s = arg;
        assert_true(s->n < 4);
        snprintf(s->keys[s->n], sizeof(s->keys[0]), "%.*s", (int)ev->key_len, ev->key);
        snprintf(s->vals[s->n], sizeof(s->vals[0]), "%.*s", (int)ev->val_len, ev->val);
        s->del[s->n] = ev->del;
        s->rev[s->n] = ev->mod_revision;
        return ++s->n == s->stop_at;
}

/* KEY and VALUE in base64 into an event object of TYPE (NULL: none, as the gateway writes PUT). */
static void event_json(char *out, size_t len, const char *type, const char *key, const char *value,
                       int rev)
{
        char kb[128], vb[128];
        assert_true(shoal_etcd_b64_encode(key, strlen(key), kb, sizeof(kb)) >= 0);
        assert_true(shoal_etcd_b64_encode(value, strlen(value), vb, sizeof(vb)) >= 0);
        char t[32] = "";
        if (type)
                snprintf(t, sizeof(t), "\"type\":\"%s\",", type);
        int n = snprintf(out, len,
                         "{%s\"kv\":{\"key\":\"%s\",\"mod_revision\":\"%d\",\"value\":\"%s\"}}", t,
                         kb, rev, vb);
        assert_true(n > 0 && (size_t)n < len); /* (and -Wformat-truncation sees it checked) */
}

static void test_watch(void **state)
{
        struct shoal_etcd_watch_msg m;
        struct seen_events s = {0};
        char err[256], e1[256], e2[256], e3[256], e4[256], msg[2048];
        (void)state;

        const char *created = "{\"result\":{\"header\":{\"revision\":\"7\"},\"created\":true}}\n";
        assert_int_equal(shoal_etcd_parse_watch(created, strlen(created), "shoal/g/", on_ev, &s, &m,
                                                err, sizeof(err)),
                         0);
        assert_true(m.created && !m.canceled);
        assert_int_equal(m.revision, 7);
        assert_int_equal(m.n_events, 0);

        event_json(e1, sizeof(e1), NULL, "shoal/g/members/a", "rec-a", 8);
        event_json(e2, sizeof(e2), "DELETE", "shoal/g/present/b", "", 9);
        event_json(e3, sizeof(e3), NULL, "shoal/h/members/c", "other group", 10);
        event_json(e4, sizeof(e4), "BOGUS", "shoal/g/members/d", "odd type", 11);
        snprintf(msg, sizeof(msg),
                 "{\"result\":{\"header\":{\"revision\":\"11\"},\"events\":[%s,%s,%s,%s,7]}}", e1,
                 e2, e3, e4);
        assert_int_equal(shoal_etcd_parse_watch(msg, strlen(msg), "shoal/g/", on_ev, &s, &m, err,
                                                sizeof(err)),
                         0);
        assert_int_equal(s.n, 2);
        assert_string_equal(s.keys[0], "members/a");
        assert_string_equal(s.vals[0], "rec-a");
        assert_false(s.del[0]);
        assert_string_equal(s.keys[1], "present/b");
        assert_string_equal(s.vals[1], "");
        assert_true(s.del[1]);
        assert_int_equal(s.rev[1], 9);
        assert_int_equal(m.n_events, 2);
        assert_int_equal(m.last_revision, 9);

        /* A nonzero return of the callback stops the parse and comes back. */
        struct seen_events s2 = {.stop_at = 1};
        assert_int_equal(shoal_etcd_parse_watch(msg, strlen(msg), "shoal/g/", on_ev, &s2, &m, err,
                                                sizeof(err)),
                         1);
        assert_int_equal(s2.n, 1);

        const char *compacted = "{\"result\":{\"header\":{},\"canceled\":true,"
                                "\"compact_revision\":\"5\"}}";
        assert_int_equal(shoal_etcd_parse_watch(compacted, strlen(compacted), "shoal/g/", on_ev, &s,
                                                &m, err, sizeof(err)),
                         0);
        assert_true(m.canceled);
        assert_int_equal(m.compact_revision, 5);

        /* A value that is not base64 is an empty value; a key that is not base64 is skipped. */
        struct seen_events s3 = {0};
        const char *bad =
                "{\"result\":{\"events\":[{\"kv\":{\"key\":\"c2hvYWwvZy9tZW1iZXJzL3g=\","
                "\"mod_revision\":\"3\",\"value\":\"!!!\"}},{\"kv\":{\"key\":\"%%%\","
                "\"mod_revision\":\"4\"}},{\"kv\":{\"key\":\"c2hvYWwvZy9tZW1iZXJzL3k=\"}}]}}";
        assert_int_equal(shoal_etcd_parse_watch(bad, strlen(bad), "shoal/g/", on_ev, &s3, &m, err,
                                                sizeof(err)),
                         0);
        assert_int_equal(s3.n, 1);
        assert_string_equal(s3.keys[0], "members/x");
        assert_string_equal(s3.vals[0], "");

        const char *notlist = "{\"result\":{\"events\":{}}}";
        assert_int_equal(shoal_etcd_parse_watch(notlist, strlen(notlist), "shoal/g/", on_ev, &s, &m,
                                                err, sizeof(err)),
                         -EPROTO);
        const char *noresult = "{\"header\":{}}";
        assert_int_equal(shoal_etcd_parse_watch(noresult, strlen(noresult), "shoal/g/", on_ev, &s,
                                                &m, err, sizeof(err)),
                         -EPROTO);
        const char *error = "{\"error\":{\"grpc_code\":14,\"message\":\"unavailable\"}}";
        assert_int_equal(shoal_etcd_parse_watch(error, strlen(error), "shoal/g/", on_ev, &s, &m,
                                                err, sizeof(err)),
                         -EIO);
        assert_int_equal(shoal_etcd_parse_watch("{\"result\":", 10, "shoal/g/", on_ev, &s, &m, err,
                                                sizeof(err)),
                         -EPROTO);
}

static void test_lines_and_keepalives(void **state)
{
        char err[256];
        int64_t ids[3] = {11, 22, 33}, ttls[3];
        (void)state;

        assert_int_equal(shoal_etcd_next_line("{}\n{", 4), 3);
        assert_int_equal(shoal_etcd_next_line("{\"a\":1}", 7), 0);
        assert_int_equal(shoal_etcd_next_line("", 0), 0);

        /* 11 alive, 22 expired (no TTL), 33 not answered; an unknown id is ignored. */
        const char *body = "{\"result\":{\"ID\":\"11\",\"TTL\":\"5\"}}\n"
                           "{\"result\":{\"ID\":\"22\"}}\n\n"
                           "{\"result\":{\"ID\":\"44\",\"TTL\":\"9\"}}";
        assert_int_equal(
                shoal_etcd_parse_keepalives(body, strlen(body), ids, ttls, 3, err, sizeof(err)), 0);
        assert_int_equal(ttls[0], 5);
        assert_int_equal(ttls[1], 0);
        assert_int_equal(ttls[2], 0);
        const char *garbage = "{\"result\":{\"ID\":\"11\",\"TTL\":\"5\"}}\nnot json\n";
        assert_int_equal(shoal_etcd_parse_keepalives(garbage, strlen(garbage), ids, ttls, 3, err,
                                                     sizeof(err)),
                         -EPROTO);
        const char *lost = "{\"error\":\"etcdserver: requested lease not found\",\"code\":5}";
        assert_int_equal(
                shoal_etcd_parse_keepalives(lost, strlen(lost), ids, ttls, 3, err, sizeof(err)),
                -ENOENT);
}

/* ---- the gRPC keep-alive stream's bytes (etcd_h2.c) ---- */

static size_t h2_frame(uint8_t *p, uint8_t type, uint8_t flags, uint32_t stream, const void *pl,
                       size_t len)
{
        p[0] = (uint8_t)(len >> 16);
        p[1] = (uint8_t)(len >> 8);
        p[2] = (uint8_t)len;
        p[3] = type;
        p[4] = flags;
        p[5] = (uint8_t)(stream >> 24);
        p[6] = (uint8_t)(stream >> 16);
        p[7] = (uint8_t)(stream >> 8);
        p[8] = (uint8_t)stream;
        if (len)
                memcpy(p + 9, pl, len);
        return 9 + len;
}

/* A gRPC message holding LeaseKeepAliveResponse{header{revision 5}, ID, TTL} (TTL 0: left out). */
static size_t h2_answer(uint8_t *p, uint8_t id, uint8_t ttl)
{
        uint8_t pb[16];
        size_t n = 0;
        pb[n++] = 0x0a; /* header, 2 bytes: revision (field 3) = 5 */
        pb[n++] = 2;
        pb[n++] = 0x18;
        pb[n++] = 5;
        pb[n++] = 0x10;
        pb[n++] = id;
        if (ttl) {
                pb[n++] = 0x18;
                pb[n++] = ttl;
        }
        p[0] = 0;
        p[1] = p[2] = p[3] = 0;
        p[4] = (uint8_t)n;
        memcpy(p + 5, pb, n);
        return 5 + n;
}

struct h2_got {
        int64_t id[8], ttl[8];
        unsigned n;
};

static void h2_on(void *arg, int64_t id, int64_t ttl)
{
        struct h2_got *g = arg;
        if (g->n < 8) {
                g->id[g->n] = id;
                g->ttl[g->n] = ttl;
        }
        g->n++;
}

static void test_h2_open_and_request(void **state)
{
        (void)state;
        uint8_t out[SHOAL_H2KA_OPEN_MAX];
        size_t n = shoal_h2ka_open(out, sizeof(out), "127.0.0.1:2379");
        assert_true(n > 24);
        assert_memory_equal(out, "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 24);
        /* SETTINGS (no push), then HEADERS of stream 1, END_HEADERS, with the exact HPACK block:
         * indexed :method POST and :scheme http, literals without indexing for :path and
         * :authority (names 4 and 1), content-type (name 31: 0x0f 0x10) and te (a new name). */
        const uint8_t settings[] = {0, 0, 6, 4, 0, 0, 0, 0, 0, 0, 2, 0, 0, 0, 0};
        assert_memory_equal(out + 24, settings, sizeof(settings));
        uint8_t block[160];
        size_t b = 0;
        block[b++] = 0x83;
        block[b++] = 0x86;
        block[b++] = 0x04;
        block[b++] = 34;
        memcpy(block + b, "/etcdserverpb.Lease/LeaseKeepAlive", 34);
        b += 34;
        block[b++] = 0x01;
        block[b++] = 14;
        memcpy(block + b, "127.0.0.1:2379", 14);
        b += 14;
        memcpy(block + b,
               "\x0f\x10\x10"
               "application/grpc"
               "\x00\x02te\x08trailers",
               3 + 16 + 13);
        b += 3 + 16 + 13;
        const uint8_t *h = out + 24 + sizeof(settings);
        assert_int_equal(n, 24 + sizeof(settings) + 9 + b);
        assert_int_equal((size_t)h[0] << 16 | (size_t)h[1] << 8 | h[2], b);
        assert_int_equal(h[3], 1);   /* HEADERS */
        assert_int_equal(h[4], 0x4); /* END_HEADERS, not END_STREAM */
        assert_int_equal(h[8], 1);
        assert_memory_equal(h + 9, block, b);
        char big[200];
        memset(big, 'a', sizeof(big) - 1);
        big[sizeof(big) - 1] = '\0';
        assert_int_equal(shoal_h2ka_open(out, sizeof(out), big), 0);

        uint8_t req[9 + 16 * SHOAL_H2KA_IDS_MAX];
        int64_t ids[2] = {300, 7};
        n = shoal_h2ka_request(req, sizeof(req), ids, 2);
        /* DATA of stream 1: [0, len 3, 08 ac 02] [0, len 2, 08 07] */
        const uint8_t want[] = {0, 0, 15,   0,    0,    0, 0, 0, 1, 0, 0,    0,
                                0, 3, 0x08, 0xac, 0x02, 0, 0, 0, 0, 2, 0x08, 0x07};
        assert_int_equal(n, sizeof(want));
        assert_memory_equal(req, want, sizeof(want));
        assert_int_equal(shoal_h2ka_request(req, sizeof(req), ids, 0), 0);
}

static void test_h2_answers(void **state)
{
        (void)state;
        static struct shoal_h2ka k;
        shoal_h2ka_init(&k);
        uint8_t in[512], msg[64];
        size_t n = 0;
        const uint8_t set[] = {0, 4, 0, 0x40, 0, 0}; /* INITIAL_WINDOW_SIZE 4 MiB */
        n += h2_frame(in + n, 4, 0, 0, set, sizeof(set));
        n += h2_frame(in + n, 6, 0, 0, "pingpong", 8);
        n += h2_frame(in + n, 1, 0x4, 1, "\x88", 1); /* response headers, skipped */
        size_t m = h2_answer(msg, 41, 3);
        m += h2_answer(msg + m, 42, 0);
        n += h2_frame(in + n, 0, 0, 1, msg, m);
        struct h2_got g = {0};
        /* In pieces of 3 bytes: frames and messages are put together across reads. */
        for (size_t o = 0; o < n; o += 3)
                assert_int_equal(shoal_h2ka_feed(&k, in + o, n - o < 3 ? n - o : 3, h2_on, &g), 0);
        assert_int_equal(g.n, 2);
        assert_int_equal(g.id[0], 41);
        assert_int_equal(g.ttl[0], 3);
        assert_int_equal(g.id[1], 42);
        assert_int_equal(g.ttl[1], 0); /* gone */
        assert_int_equal(k.send_stream, 4 << 20);
        assert_int_equal(k.send_conn, 65535);
        /* Owed: the SETTINGS ack, then the PING ack with its payload. */
        assert_int_equal(k.out_len, 9 + 17);
        assert_int_equal(k.out[3], 4);
        assert_int_equal(k.out[4], 1);
        assert_int_equal(k.out[9 + 3], 6);
        assert_int_equal(k.out[9 + 4], 1);
        assert_memory_equal(k.out + 18, "pingpong", 8);
        assert_false(k.ended);
        k.out_len = 0;

        /* 40 KiB of DATA taken: a window update for the connection and the stream. */
        static uint8_t data[9 + 16384];
        size_t dl = 0;
        for (int i = 0; i < 3; i++) {
                memset(data, 0, sizeof(data));
                dl = 0;
                uint8_t body[14000];
                size_t bl = 0;
                while (bl + 13 <= sizeof(body))
                        bl += h2_answer(body + bl, 1, 1);
                dl = h2_frame(data, 0, 0, 1, body, bl);
                assert_int_equal(shoal_h2ka_feed(&k, data, dl, NULL, NULL), 0);
        }
        assert_int_equal(k.out_len, 2 * 13);
        assert_int_equal(k.out[3], 8);
        assert_int_equal(k.out[13 + 3], 8);
        assert_int_equal(k.out[13 + 8], 1);

        /* Trailers: the call is over. */
        n = h2_frame(in, 1, 0x5, 1, "\x40", 1);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), 0);
        assert_true(k.ended);
}

static void test_h2_hostile(void **state)
{
        (void)state;
        static struct shoal_h2ka k;
        uint8_t in[64], msg[32];
        size_t n;
        /* A frame longer than our SETTINGS_MAX_FRAME_SIZE. */
        shoal_h2ka_init(&k);
        const uint8_t head[9] = {0, 0x40, 0x01, 0, 0, 0, 0, 0, 1};
        assert_int_equal(shoal_h2ka_feed(&k, head, 9, NULL, NULL), -EPROTO);
        assert_int_equal(shoal_h2ka_feed(&k, (const uint8_t *)"x", 1, NULL, NULL), -EPROTO);
        /* A compressed message (none was offered). */
        shoal_h2ka_init(&k);
        size_t m = h2_answer(msg, 1, 1);
        msg[0] = 1;
        n = h2_frame(in, 0, 0, 1, msg, m);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), -EPROTO);
        /* A message longer than an answer can be. */
        shoal_h2ka_init(&k);
        const uint8_t huge[5] = {0, 0, 0, 0x10, 0};
        n = h2_frame(in, 0, 0, 1, huge, 5);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), -EPROTO);
        /* DATA on another stream, a push, padding longer than the frame. */
        shoal_h2ka_init(&k);
        n = h2_frame(in, 0, 0, 3, msg, 4);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), -EPROTO);
        shoal_h2ka_init(&k);
        n = h2_frame(in, 5, 0x4, 1, "\0\0\0\2", 4);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), -EPROTO);
        shoal_h2ka_init(&k);
        n = h2_frame(in, 0, 0x8, 1, "\x09xyz", 4);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), -EPROTO);
        /* A window past 2^31 - 1, and a zero increment. */
        shoal_h2ka_init(&k);
        n = h2_frame(in, 8, 0, 0, "\x7f\xff\xff\xff", 4);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), -EPROTO);
        shoal_h2ka_init(&k);
        n = h2_frame(in, 8, 0, 1, "\0\0\0\0", 4);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), -EPROTO);
        /* Something between a header block and its CONTINUATION. */
        shoal_h2ka_init(&k);
        n = h2_frame(in, 1, 0, 1, "\x88", 1);
        n += h2_frame(in + n, 6, 0, 0, "pingpong", 8);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), -EPROTO);
        /* A protobuf field whose length runs past the message. */
        int64_t id, ttl;
        assert_int_equal(shoal_h2ka_parse_answer((const uint8_t *)"\x0a\x05\x01", 3, &id, &ttl),
                         -EPROTO);
        assert_int_equal(shoal_h2ka_parse_answer((const uint8_t *)"\x10\x80", 2, &id, &ttl),
                         -EPROTO);
        /* Unknown frame types are ignored. A GOAWAY that lets stream 1 finish (a graceful stop)
         * drains: the answers still come, the connection is not reused; one below it ends. */
        shoal_h2ka_init(&k);
        n = h2_frame(in, 0xfa, 0, 0, "ab", 2);
        n += h2_frame(in + n, 7, 0, 0, "\x7f\xff\xff\xff\0\0\0\0", 8);
        m = h2_answer(msg, 9, 4);
        n += h2_frame(in + n, 0, 0, 1, msg, m);
        struct h2_got g = {0};
        assert_int_equal(shoal_h2ka_feed(&k, in, n, h2_on, &g), 0);
        assert_true(k.draining);
        assert_false(k.ended);
        assert_int_equal(g.n, 1);
        shoal_h2ka_init(&k);
        n = h2_frame(in, 7, 0, 0, "\0\0\0\0\0\0\0\2", 8);
        assert_int_equal(shoal_h2ka_feed(&k, in, n, NULL, NULL), 0);
        assert_true(k.ended);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_base64),
                cmocka_unit_test(test_prefix),
                cmocka_unit_test(test_url),
                cmocka_unit_test(test_range),
                cmocka_unit_test(test_answers),
                cmocka_unit_test(test_watch),
                cmocka_unit_test(test_lines_and_keepalives),
                cmocka_unit_test(test_h2_open_and_request),
                cmocka_unit_test(test_h2_answers),
                cmocka_unit_test(test_h2_hostile),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
