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
        assert_int_equal(shoal_etcd_parse_keepalive(alive, strlen(alive), &v, err, sizeof(err)), 0);
        assert_int_equal(v, 4);
        const char *gone = "{\"result\":{\"ID\":\"1\"}}";
        assert_int_equal(shoal_etcd_parse_keepalive(gone, strlen(gone), &v, err, sizeof(err)), 0);
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

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_base64),  cmocka_unit_test(test_prefix),
                cmocka_unit_test(test_url),     cmocka_unit_test(test_range),
                cmocka_unit_test(test_answers),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
