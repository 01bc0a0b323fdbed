/* The etcd registry's pure half (src/group/etcd_codec.c): base64 against RFC 4648's vectors,
 * key prefixes that keep groups apart, the etcd:// URL, and the gateway's answers — ids taken
 * only from keys under the prefix, error answers told apart, leases and TTLs read as int64
 * strings. The backend against a real etcd is tests/integration/test_etcd.sh. */
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
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
