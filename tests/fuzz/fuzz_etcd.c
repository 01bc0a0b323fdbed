/* libFuzzer target: what an etcd server (or anyone who can write to it, or sits in the path)
 * answers the etcd registry backend (src/group/etcd_codec.c), and the etcd:// URL.
 *
 *   byte 0   mode % 8:
 *     0  the rest is a range answer: shoal_etcd_parse_range under the prefix of group "g/1%"
 *     1  the rest is a lease grant answer
 *     2  the rest is a keep-alive answer (of lease 1)
 *     3  the rest is a status answer (put, delete)
 *     4  the rest is base64 text: decoded, and if it decodes, encoded back to the same text
 *     5  the rest is the URL after "etcd://"
 *     6  the rest is a watch stream: split into lines, each parsed by shoal_etcd_parse_watch
 *        under the group prefix of "g/1%"
 *     7  the rest is the answer to a keep-alive of three leases (ids 1, 2, 3)
 *
 * Invariants: no answer crashes, leaks or reads out of bounds; every (id, record) visited lies
 * inside the buffers the parser owns and every id came from a key under the prefix; a lease is
 * positive; base64 round-trips canonically; a watch event's key and value lie in the parser's
 * buffers, its revision is at most the message's last_revision, and n_events counts them; a
 * TTL is never negative; a parsed URL has 1..8 endpoints with ports in
 * 1..65535. */
#include <errno.h>

#include "fuzz_input.h"
#include "group/group_internal.h"

static int visit(void *arg, const char *id, size_t id_len, const char *rec, size_t rec_len)
{
        size_t *count = arg;
        FZ_CHECK(id_len > 0 && id_len < SHOAL_ETCD_KEY_MAX);
        FZ_CHECK(rec_len <= SHOAL_RECORD_MAX);
        /* Touch every byte: ASan checks the bounds. */
        volatile char sink = 0;
        for (size_t i = 0; i < id_len; i++)
                sink ^= id[i];
        for (size_t i = 0; i < rec_len; i++)
                sink ^= rec[i];
        (void)sink;
        /* The front end would decode it: it must survive anything. */
        struct shoal_member m;
        (void)shoal_member_decode(rec, rec_len, &m);
        return ++*count > 100000;
}

struct watch_seen {
        size_t n;
        int64_t max_rev;
};

static int on_event(void *arg, const struct shoal_etcd_event *ev)
{
        struct watch_seen *w = arg;
        FZ_CHECK(ev->key_len > 0 && ev->key_len < SHOAL_ETCD_KEY_MAX);
        FZ_CHECK(ev->val_len <= SHOAL_RECORD_MAX && (!ev->del || ev->val_len == 0));
        volatile char sink = 0;
        for (size_t i = 0; i < ev->key_len; i++)
                sink ^= ev->key[i];
        for (size_t i = 0; i < ev->val_len; i++)
                sink ^= ev->val[i];
        (void)sink;
        struct shoal_member m;
        (void)shoal_member_decode(ev->val, ev->val_len, &m);
        if (ev->mod_revision > w->max_rev)
                w->max_rev = ev->mod_revision;
        w->n++;
        return 0;
}

/* Every line of BODY as one object of a watch stream, as the watch thread reads them. */
static void watch_stream(const char *body, size_t len)
{
        char prefix[SHOAL_ETCD_KEY_MAX], err[512];
        FZ_CHECK(shoal_etcd_prefix("g/1%", "members", prefix, sizeof(prefix)) > 0);
        prefix[strlen(prefix) - strlen("members/")] = '\0';
        while (len) {
                size_t l = shoal_etcd_next_line(body, len);
                FZ_CHECK(l <= len);
                if (l == 0)
                        l = len;
                struct watch_seen w = {0};
                struct shoal_etcd_watch_msg msg;
                int ret = shoal_etcd_parse_watch(body, l, prefix, on_event, &w, &msg, err,
                                                 sizeof(err));
                FZ_CHECK(ret <= 0);
                if (ret == 0) {
                        FZ_CHECK(msg.n_events == w.n);
                        FZ_CHECK(msg.last_revision >= w.max_rev);
                        FZ_CHECK(msg.compact_revision >= 0);
                }
                body += l;
                len -= l;
        }
}

static void b64_round_trip(const char *s, size_t len)
{
        size_t cap = len / 4 * 3 + 3;
        unsigned char *bin = malloc(cap);
        char *back = malloc(len + 5);
        FZ_CHECK(bin && back);
        long n = shoal_etcd_b64_decode(s, len, bin, cap);
        if (n >= 0) {
                long m = shoal_etcd_b64_encode(bin, (size_t)n, back, len + 5);
                FZ_CHECK(m >= 0 && (size_t)m == len);
                /* Decoding ignores the unused low bits of the last digit; so compare decodes. */
                unsigned char *bin2 = malloc(cap);
                FZ_CHECK(bin2);
                FZ_CHECK(shoal_etcd_b64_decode(back, (size_t)m, bin2, cap) == n);
                FZ_CHECK(memcmp(bin, bin2, (size_t)n) == 0);
                free(bin2);
        }
        free(bin);
        free(back);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct fz in = {data, size};
        unsigned mode = fz_u8(&in) % 8;
        size_t len;
        char *body = fz_rest_str(&in, &len);
        char err[512], prefix[SHOAL_ETCD_KEY_MAX];
        int64_t v = 0, rev = 0;
        size_t count = 0;

        switch (mode) {
        case 0:
                FZ_CHECK(shoal_etcd_prefix("g/1%", "members", prefix, sizeof(prefix)) > 0);
                (void)shoal_etcd_parse_range(body, len, prefix, visit, &count, &rev, err,
                                             sizeof(err));
                break;
        case 1:
                if (shoal_etcd_parse_grant(body, len, &v, err, sizeof(err)) == 0)
                        FZ_CHECK(v > 0);
                break;
        case 2: {
                int64_t one = 1;
                if (shoal_etcd_parse_keepalives(body, len, &one, &v, 1, err, sizeof(err)) == 0)
                        FZ_CHECK(v >= 0);
                break;
        }
        case 3:
                (void)shoal_etcd_parse_status(body, len, &rev, err, sizeof(err));
                break;
        case 4:
                b64_round_trip(body, len);
                break;
        case 6:
                watch_stream(body, len);
                break;
        case 7: {
                int64_t ids[3] = {1, 2, 3}, ttls[3];
                if (shoal_etcd_parse_keepalives(body, len, ids, ttls, 3, err, sizeof(err)) == 0)
                        for (int i = 0; i < 3; i++)
                                FZ_CHECK(ttls[i] >= 0);
                break;
        }
        default: {
                struct shoal_etcd_url u;
                if (shoal_etcd_url_parse(body, &u, err, sizeof(err)) == 0) {
                        FZ_CHECK(u.n >= 1 && u.n <= SHOAL_ETCD_ENDPOINTS);
                        for (unsigned i = 0; i < u.n; i++)
                                FZ_CHECK(u.ep[i].port >= 1 && u.ep[i].port <= 65535 &&
                                         u.ep[i].host[0]);
                }
                break;
        }
        }
        free(body);
        return 0;
}
