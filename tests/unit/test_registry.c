/* Group registry and agent [G1, D1]: the record codec, both backends (SQLite on a temporary
 * file, Redis on a real redis-server started here), and agents joining, beating, expiring,
 * leaving and refusing a volume mismatch. Every wait is a poll against a deadline. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "group/group_internal.h"
#include "unit_skip.h"

#define MS               1000000ULL
#define HEARTBEAT_NS     (100 * MS)
#define TIMEOUT_NS       (500 * MS)
#define REDIS_PASSWORD   "s3cr|t pw"
#define REDIS_PASSWORD_Q "s3cr%7Ct%20pw" /* the same, percent-encoded for the URL */

static char tmpdir[64];
static char sqlite_url[256];
static unsigned url_seq;

/* ---- helpers ---- */

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        return remove(path);
}

static int64_t now_ms(void)
{
        return (int64_t)(shoal_wall_ns() / MS);
}

/* A fresh database file per test, in a folder that does not exist yet. */
static const char *new_sqlite_url(void)
{
        snprintf(sqlite_url, sizeof(sqlite_url), "sqlite3://%s/d%u/sub/meta.db", tmpdir, url_seq++);
        return sqlite_url;
}

static void fill_member(struct shoal_member *m, const char *id, unsigned seed)
{
        memset(m, 0, sizeof(*m));
        shoal_strlcpy(m->id, id, sizeof(m->id));
        snprintf(m->host, sizeof(m->host), "host|%u%%\n\t\x7f é", seed);
        snprintf(m->tcp_addr, sizeof(m->tcp_addr), "127.0.0.1:%u", 1000 + seed);
        snprintf(m->iorpc_addr, sizeof(m->iorpc_addr), "127.0.0.1:%u", 2000 + seed);
        m->n_rdma = 2;
        for (unsigned i = 0; i < SHOAL_RDMA_ADDRS; i++)
                snprintf(m->rdma_addr[i], sizeof(m->rdma_addr[i]), "10.0.%u.%u:%u", i, seed,
                         3000 + i);
        m->weight = 7 * seed + 1;
        m->role = seed % 2 ? SHOAL_ROLE_CONSUMER : SHOAL_ROLE_PROVIDER;
        snprintf(m->volume_url, sizeof(m->volume_url), "file:///vol|%u/a%%20b", seed);
        m->block_size = 4194304;
        m->cache_bytes = UINT64_MAX - seed;
        m->cache_capacity = UINT64_MAX;
        m->beat = 1000ULL * seed;
        m->updated_ms = -(int64_t)seed;
        m->started_ms = INT64_MAX - seed;
        snprintf(m->metrics_addr, sizeof(m->metrics_addr), "127.0.0.1:%u", 9567 + seed);
        m->leaving = seed % 3 == 1;
        m->grace_ms = 1000ULL * seed;
}

static void assert_member_equal(const struct shoal_member *a, const struct shoal_member *b)
{
        assert_string_equal(a->id, b->id);
        assert_string_equal(a->host, b->host);
        assert_string_equal(a->tcp_addr, b->tcp_addr);
        assert_string_equal(a->iorpc_addr, b->iorpc_addr);
        assert_int_equal(a->n_rdma, b->n_rdma);
        for (unsigned i = 0; i < SHOAL_RDMA_ADDRS; i++)
                assert_string_equal(a->rdma_addr[i], b->rdma_addr[i]);
        assert_int_equal(a->weight, b->weight);
        assert_int_equal(a->role, b->role);
        assert_string_equal(a->volume_url, b->volume_url);
        assert_int_equal(a->block_size, b->block_size);
        assert_true(a->cache_bytes == b->cache_bytes);
        assert_true(a->cache_capacity == b->cache_capacity);
        assert_true(a->beat == b->beat);
        assert_true(a->updated_ms == b->updated_ms);
        assert_true(a->started_ms == b->started_ms);
        assert_string_equal(a->metrics_addr, b->metrics_addr);
        assert_int_equal(a->leaving, b->leaving);
        assert_true(a->grace_ms == b->grace_ms);
}

static const struct shoal_member *find(const struct shoal_member *v, size_t n, const char *id);

/* The record of ID as R lists it (false when there is none). */
static bool record_get(struct shoal_registry *r, const char *id, struct shoal_member *out)
{
        struct shoal_member *v = NULL;
        size_t n = 0;
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        const struct shoal_member *m = find(v, n, id);
        if (m)
                *out = *m;
        free(v);
        return m != NULL;
}

static const struct shoal_member *find(const struct shoal_member *v, size_t n, const char *id)
{
        for (size_t i = 0; i < n; i++)
                if (!strcmp(v[i].id, id))
                        return &v[i];
        return NULL;
}

static size_t count_records(struct shoal_registry *r)
{
        struct shoal_member *v = NULL;
        size_t n = 0;
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        free(v);
        return n;
}

static bool record_exists(struct shoal_registry *r, const char *id)
{
        struct shoal_member *v = NULL;
        size_t n = 0;
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        bool found = find(v, n, id) != NULL;
        free(v);
        return found;
}

static bool view_has(struct shoal_group *g, const char *id)
{
        struct shoal_group_view *v = shoal_group_view_get(g);
        bool found = find(v->members, v->n, id) != NULL;
        shoal_group_view_put(v);
        return found;
}

static size_t view_size(struct shoal_group *g)
{
        struct shoal_group_view *v = shoal_group_view_get(g);
        size_t n = v->n;
        shoal_group_view_put(v);
        return n;
}

/* Polls COND every 20 ms until it holds or TIMEOUT_MS pass; true when it held. */
#define WAIT_UNTIL(cond, timeout_ms)                                        \
        ({                                                                  \
                uint64_t dl__ = shoal_now_ns() + (uint64_t)(timeout_ms)*MS; \
                bool ok__;                                                  \
                while (!(ok__ = (cond)) && shoal_now_ns() < dl__)           \
                        shoal_sleep_ns(20 * MS);                            \
                ok__;                                                       \
        })

static void agent_config(struct shoal_group_config *cfg, const char *url, const char *group,
                         const char *volume, uint32_t block_size)
{
        memset(cfg, 0, sizeof(*cfg));
        cfg->meta_url = url;
        cfg->group = group;
        cfg->heartbeat_ns = HEARTBEAT_NS;
        cfg->timeout_ns = TIMEOUT_NS;
        shoal_strlcpy(cfg->self.host, "testhost", sizeof(cfg->self.host));
        shoal_strlcpy(cfg->self.tcp_addr, "127.0.0.1:7000", sizeof(cfg->self.tcp_addr));
        shoal_strlcpy(cfg->self.volume_url, volume, sizeof(cfg->self.volume_url));
        cfg->self.block_size = block_size;
        cfg->self.weight = 100;
        cfg->self.role = SHOAL_ROLE_PROVIDER;
        cfg->self.cache_capacity = UINT64_MAX;
}

/* The registry at URL for GROUP, or NULL with ERR saying why. */
static struct shoal_registry *reg_open(const char *url, const char *group, char *err, size_t errlen)
{
        struct shoal_registry *r;
        if (shoal_registry_open(url, group, &r, err, errlen))
                return NULL;
        r->timeout_ns = TIMEOUT_NS; /* the leases of the records this test writes itself */
        return r;
}

/* The agent CFG starts, or NULL with ERR saying why. */
static struct shoal_group *group_start(const struct shoal_group_config *cfg, char *err,
                                       size_t errlen)
{
        struct shoal_group *g;
        return shoal_group_start(cfg, &g, err, errlen) ? NULL : g;
}

static struct shoal_group *start_agent(const char *url, const char *group)
{
        struct shoal_group_config cfg;
        char err[512] = "";

        agent_config(&cfg, url, group, "file:///data", 4194304);
        struct shoal_group *g = group_start(&cfg, err, sizeof(err));
        if (!g)
                fail_msg("shoal_group_start: %s", err);
        return g;
}

/* ---- codec ---- */

static void test_codec_roundtrip(void **state)
{
        struct shoal_member a, b;
        char buf[SHOAL_RECORD_MAX];

        fill_member(&a, "0123456789abcdef0123456789abcdef", 3);
        int len = shoal_member_encode(&a, buf, sizeof(buf));
        assert_true(len > 0);
        assert_int_equal((size_t)len, strlen(buf));
        assert_null(strchr(buf, '\n'));
        assert_int_equal(shoal_member_decode(buf, (size_t)len, &b), 0);
        assert_member_equal(&a, &b);
        assert_false(b.alive);

        /* Every string at its longest, made only of characters that need escaping. */
        memset(&a, 0, sizeof(a));
        memset(a.id, 'z', SHOAL_MEMBER_ID_LEN);
        memset(a.host, '|', sizeof(a.host) - 1);
        memset(a.tcp_addr, '%', sizeof(a.tcp_addr) - 1);
        memset(a.iorpc_addr, '\n', sizeof(a.iorpc_addr) - 1);
        for (unsigned i = 0; i < SHOAL_RDMA_ADDRS; i++)
                memset(a.rdma_addr[i], 1 + (int)i, sizeof(a.rdma_addr[i]) - 1);
        memset(a.volume_url, '|', sizeof(a.volume_url) - 1);
        memset(a.metrics_addr, '%', sizeof(a.metrics_addr) - 1);
        a.n_rdma = SHOAL_RDMA_ADDRS;
        a.weight = UINT32_MAX;
        a.block_size = UINT32_MAX;
        a.cache_bytes = a.cache_capacity = a.beat = UINT64_MAX;
        a.updated_ms = INT64_MIN;
        a.started_ms = INT64_MAX;
        len = shoal_member_encode(&a, buf, sizeof(buf));
        assert_true(len > 0);
        assert_int_equal(shoal_member_decode(buf, (size_t)len, &b), 0);
        assert_member_equal(&a, &b);

        /* Fields appended by a later version are ignored. */
        fill_member(&a, "abc", 2);
        len = shoal_member_encode(&a, buf, sizeof(buf));
        strcat(buf, "|future|fields");
        assert_int_equal(shoal_member_decode(buf, strlen(buf), &b), 0);
        assert_member_equal(&a, &b);

        /* A record of a version without the metrics address (nor goodbye and grace) reads with
         * them empty. */
        fill_member(&a, "old", 4);
        len = shoal_member_encode(&a, buf, sizeof(buf));
        for (int i = 0; i < 3; i++)
                *strrchr(buf, '|') = '\0';
        assert_int_equal(shoal_member_decode(buf, strlen(buf), &b), 0);
        a.metrics_addr[0] = '\0';
        a.leaving = false;
        a.grace_ms = 0;
        assert_member_equal(&a, &b);
        /* A goodbye flag is 0 or 1; a grace period is bounded. */
        fill_member(&a, "g", 2);
        len = shoal_member_encode(&a, buf, sizeof(buf));
        strcpy(strrchr(buf, '|'), "|99999999999999");
        assert_int_equal(shoal_member_decode(buf, strlen(buf), &b), 0);
        assert_true(b.grace_ms == 24 * 3600 * 1000ULL);
        *strrchr(buf, '|') = '\0';
        strcpy(strrchr(buf, '|'), "|2|0");
        assert_int_equal(shoal_member_decode(buf, strlen(buf), &b), -EINVAL);
}

static void test_codec_refuses_at_put(void **state)
{
        struct shoal_member m;
        char buf[SHOAL_RECORD_MAX];

        fill_member(&m, "", 1);
        assert_int_equal(shoal_member_encode(&m, buf, sizeof(buf)), -EINVAL);
        fill_member(&m, "bad|id", 1);
        assert_int_equal(shoal_member_encode(&m, buf, sizeof(buf)), -EINVAL);
        fill_member(&m, "bad id", 1);
        assert_int_equal(shoal_member_encode(&m, buf, sizeof(buf)), -EINVAL);
        fill_member(&m, "ok", 1);
        memset(m.id, 'a', sizeof(m.id)); /* unterminated */
        assert_int_equal(shoal_member_encode(&m, buf, sizeof(buf)), -EINVAL);
        fill_member(&m, "ok", 1);
        m.role = 7;
        assert_int_equal(shoal_member_encode(&m, buf, sizeof(buf)), -EINVAL);
        fill_member(&m, "ok", 1);
        m.n_rdma = SHOAL_RDMA_ADDRS + 1;
        assert_int_equal(shoal_member_encode(&m, buf, sizeof(buf)), -EINVAL);
        fill_member(&m, "ok", 1);
        memset(m.volume_url, 'v', sizeof(m.volume_url));
        assert_int_equal(shoal_member_encode(&m, buf, sizeof(buf)), -EINVAL);
        fill_member(&m, "ok", 1);
        assert_int_equal(shoal_member_encode(&m, buf, 16), -EINVAL);
}

static void test_codec_garbage(void **state)
{
        static const char *const bad[] = {
                "",
                "m1",
                "m2|a|h|t|i|0|||||1|0|v|4|0|0|0|0|0",
                "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0",            /* one field short */
                "m1||h|t|i|0|||||1|0|v|4|0|0|0|0|0",           /* empty id */
                "m1|a b|h|t|i|0|||||1|0|v|4|0|0|0|0|0",        /* bad id */
                "m1|a|h|t|i|5|||||1|0|v|4|0|0|0|0|0",          /* n_rdma > 4 */
                "m1|a|h|t|i|0|||||1|2|v|4|0|0|0|0|0",          /* role 2 */
                "m1|a|h|t|i|0|||||4294967296|0|v|4|0|0|0|0|0", /* weight > u32 */
                "m1|a|h|t|i|0|||||1|0|v|4|18446744073709551616|0|0|0|0",
                "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0|9223372036854775808",
                "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0|-9223372036854775809",
                "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0|",
                "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0|-",
                "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0|+1",
                "m1|a|h|t|i|0|||||1|0|v|4|0|0|0| 1|0",
                "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0x1|0",
                "m1|a|h%|t|i|0|||||1|0|v|4|0|0|0|0|0",    /* cut escape */
                "m1|a|h%G1|t|i|0|||||1|0|v|4|0|0|0|0|0",  /* bad escape */
                "m1|a|h%00|t|i|0|||||1|0|v|4|0|0|0|0|0",  /* escaped NUL */
                "m1|a|h\n|t|i|0|||||1|0|v|4|0|0|0|0|0",   /* raw control character */
                "m1|a%7Cb|h|t|i|0|||||1|0|v|4|0|0|0|0|0", /* id with a separator */
        };
        struct shoal_member m;

        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(bad); i++)
                if (shoal_member_decode(bad[i], strlen(bad[i]), &m) != -EINVAL)
                        fail_msg("decoded garbage #%zu: %s", i, bad[i]);
        /* The minimal valid record, to show the list above fails for the stated reason. */
        const char *good = "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0|-5";
        assert_int_equal(shoal_member_decode(good, strlen(good), &m), 0);
        assert_true(m.started_ms == -5);
        /* A NUL inside the bytes. */
        char nul[] = "m1|a|h|t|i|0|||||1|0|v|4|0|0|0|0|0";
        nul[6] = '\0';
        assert_int_equal(shoal_member_decode(nul, sizeof(nul) - 1, &m), -EINVAL);
        /* Too long a host. */
        char big[512];
        snprintf(big, sizeof(big), "m1|a|%0100d|t|i|0|||||1|0|v|4|0|0|0|0|0", 0);
        assert_int_equal(shoal_member_decode(big, strlen(big), &m), -EINVAL);

        /* Random mutations of a valid record never crash (ASan watches) and decode only into
         * records that encode again. */
        struct shoal_member a;
        char buf[SHOAL_RECORD_MAX], mut[SHOAL_RECORD_MAX], again[SHOAL_RECORD_MAX];
        fill_member(&a, "mutant", 5);
        int len = shoal_member_encode(&a, buf, sizeof(buf));
        assert_true(len > 0);
        for (int round = 0; round < 20000; round++) {
                size_t n = (size_t)len;
                memcpy(mut, buf, n);
                int flips = 1 + (int)(shoal_rand64() % 4);
                for (int f = 0; f < flips; f++)
                        mut[shoal_rand64() % n] = (char)(shoal_rand64() & 0xff);
                if (shoal_rand64() % 4 == 0)
                        n = shoal_rand64() % n;
                if (shoal_member_decode(mut, n, &m) == 0)
                        assert_true(shoal_member_encode(&m, again, sizeof(again)) > 0);
        }
}

/* ---- URLs ---- */

static void test_open_refuses_bad_urls(void **state)
{
        static const char *const urls[] = {
                "",
                "foo://x",
                "sqlite3://",
                "redis://",
                "redis://:pw@",
                "redis://host:0",
                "redis://host:99999",
                "redis://host:12x",
                "redis://host:6379/abc",
                "redis://host:6379/1?opt=1",
                "redis://password@host:6379",
                "redis://[::1:6379",
                "redis://:%zz@host:6379",
        };
        char err[256];

        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(urls); i++) {
                err[0] = '\0';
                struct shoal_registry *r = (struct shoal_registry *)1;
                /* a URL that cannot work is the user's to fix */
                int rc = shoal_registry_open(urls[i], "g", &r, err, sizeof(err));
                if (rc != -EINVAL || r)
                        fail_msg("\"%s\": %d", urls[i], rc);
                assert_true(err[0] != '\0');
                assert_null(strchr(err, '\n'));
        }
        err[0] = '\0';
        struct shoal_registry *r;
        assert_int_equal(shoal_registry_open(new_sqlite_url(), "", &r, err, sizeof(err)), -EINVAL);
        assert_true(err[0]);
        assert_int_equal(shoal_registry_open(new_sqlite_url(), "a\nb", &r, err, sizeof(err)),
                         -EINVAL);
        /* A file that is not a database. */
        char path[128];
        snprintf(path, sizeof(path), "%s/not-a-db", tmpdir);
        FILE *f = fopen(path, "w");
        assert_non_null(f);
        fputs("this is not a database, just some text that is long enough to be noticed\n", f);
        for (int i = 0; i < 100; i++)
                fputs("garbage garbage garbage garbage garbage garbage garbage garbage\n", f);
        fclose(f);
        char url[160];
        snprintf(url, sizeof(url), "sqlite3://%s", path);
        err[0] = '\0';
        /* ... and one that cannot be opened a failure at run time */
        assert_int_equal(shoal_registry_open(url, "g", &r, err, sizeof(err)), -EIO);
        assert_null(r);
        assert_non_null(strstr(err, path));
}

/* ---- backend-independent checks, run on each backend ---- */

static void check_roundtrip(const char *url)
{
        char err[256] = "";
        struct shoal_registry *r = reg_open(url, "grp one", err, sizeof(err));
        struct shoal_registry *other = reg_open(url, "grp two", err, sizeof(err));
        struct shoal_member m[3], *v = NULL;
        size_t n = 0;

        if (!r || !other)
                fail_msg("open %s: %s", url, err);
        fill_member(&m[0], "aaaa", 1);
        fill_member(&m[1], "bbbb", 2);
        fill_member(&m[2], "cccc", 3);
        for (int i = 0; i < 3; i++)
                assert_int_equal(shoal_registry_put(r, &m[i]), 0);
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        assert_int_equal(n, 3);
        for (int i = 0; i < 3; i++) {
                const struct shoal_member *got = find(v, n, m[i].id);
                assert_non_null(got);
                assert_member_equal(&m[i], got);
        }
        free(v);

        /* Replace, delete, delete again; another group sees nothing of it. */
        m[1].beat++;
        m[1].weight = 0;
        assert_int_equal(shoal_registry_put(r, &m[1]), 0);
        assert_int_equal(shoal_registry_delete(r, "aaaa"), 0);
        assert_int_equal(shoal_registry_delete(r, "aaaa"), 0);
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        assert_int_equal(n, 2);
        assert_null(find(v, n, "aaaa"));
        assert_member_equal(&m[1], find(v, n, "bbbb"));
        free(v);
        assert_int_equal(count_records(other), 0);
        assert_int_equal(shoal_registry_delete(r, "bad id"), -EINVAL);
        struct shoal_member bad = m[0];
        bad.role = 9;
        assert_int_equal(shoal_registry_put(r, &bad), -EINVAL);

        /* A second connection sees the first one's writes, and the other way round. */
        struct shoal_registry *r2 = reg_open(url, "grp one", err, sizeof(err));
        if (!r2)
                fail_msg("open %s: %s", url, err);
        assert_int_equal(count_records(r2), 2);
        fill_member(&m[0], "dddd", 4);
        assert_int_equal(shoal_registry_put(r2, &m[0]), 0);
        assert_true(record_exists(r, "dddd"));
        assert_int_equal(shoal_registry_delete(r, "dddd"), 0);
        assert_false(record_exists(r2, "dddd"));
        assert_int_equal(shoal_registry_delete(r2, "bbbb"), 0);
        assert_int_equal(shoal_registry_delete(r2, "cccc"), 0);
        assert_int_equal(count_records(r), 0);

        shoal_registry_close(r2);
        shoal_registry_close(other);
        shoal_registry_close(r);
}

static void check_agents(const char *url)
{
        char err[512] = "";
        struct shoal_group *a = start_agent(url, "agents");
        struct shoal_group *b = start_agent(url, "agents");
        const char *ida = shoal_group_self_id(a), *idb = shoal_group_self_id(b);

        /* Generated ids: 32 hex characters, different. */
        assert_int_equal(strlen(ida), SHOAL_MEMBER_ID_LEN);
        assert_int_equal(strspn(ida, "0123456789abcdef"), SHOAL_MEMBER_ID_LEN);
        assert_string_not_equal(ida, idb);

        assert_true(WAIT_UNTIL(view_size(a) == 2 && view_size(b) == 2, 10000));
        struct shoal_group_view *va = shoal_group_view_get(a), *vb = shoal_group_view_get(b);
        assert_true(va->version == vb->version);
        assert_true(strcmp(va->members[0].id, va->members[1].id) < 0);
        for (size_t i = 0; i < va->n; i++)
                assert_true(va->members[i].alive);
        /* Both agree on every owner. */
        for (int i = 0; i < 200; i++) {
                struct shoal_block_id id;
                shoal_random_bytes(id.b, sizeof(id.b));
                int oa = shoal_group_owner(va, &id), ob = shoal_group_owner(vb, &id);
                assert_true(oa >= 0 && ob >= 0);
                assert_string_equal(va->members[oa].id, vb->members[ob].id);
        }
        shoal_group_view_put(vb);

        /* Cache use travels with the heartbeat into the registry (where `shoal group` reads
         * it; a view with leases changes only with the group's version). */
        shoal_group_set_usage(a, 12345, 67890);
        bool seen = WAIT_UNTIL(({
                                       struct shoal_member *l = NULL;
                                       size_t nl = 0;
                                       bool ok = shoal_group_list_once(url, "agents", 0, &l, &nl,
                                                                       err, sizeof(err)) == 0;
                                       const struct shoal_member *ma = ok ? find(l, nl, ida) : NULL;
                                       ok = ma && ma->cache_bytes == 12345 &&
                                            ma->cache_capacity == 67890;
                                       free(l);
                                       ok;
                               }),
                               2000);
        assert_true(seen);

        /* A clean leave: gone from the other's view at its next heartbeat. VA, held across the
         * change, stays readable. */
        char idb_copy[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(idb_copy, idb, sizeof(idb_copy));
        shoal_group_stop(b);
        assert_true(WAIT_UNTIL(!view_has(a, idb_copy), 1000));
        assert_non_null(find(va->members, va->n, idb_copy));
        shoal_group_view_put(va);

        /* A crash: a record that never beats again is alive at first sight, then dropped one
         * timeout after its last beat, but not deleted yet. */
        struct shoal_registry *r = reg_open(url, "agents", err, sizeof(err));
        if (!r)
                fail_msg("open: %s", err);
        struct shoal_member c;
        fill_member(&c, "crashed", 0);
        c.updated_ms = now_ms();
        c.beat = 1;
        uint64_t put_ns = shoal_now_ns();
        assert_int_equal(shoal_registry_put(r, &c), 0);
        assert_true(WAIT_UNTIL(view_has(a, "crashed"), 1000));
        assert_true(WAIT_UNTIL(!view_has(a, "crashed"), 1500));
        assert_true(shoal_now_ns() - put_ns >= TIMEOUT_NS - 50 * MS);
        assert_true(record_exists(r, "crashed"));
        /* It comes back when it beats again. */
        c.beat++;
        c.updated_ms = now_ms();
        assert_int_equal(shoal_registry_put(r, &c), 0);
        assert_true(WAIT_UNTIL(view_has(a, "crashed"), 1000));
        assert_int_equal(shoal_registry_delete(r, "crashed"), 0);

        /* The self record reads back, and list_once judges it alive by watching it beat. */
        struct shoal_member *v = NULL;
        size_t n = 0;
        assert_int_equal(shoal_group_list_once(url, "agents", 300 * MS, &v, &n, err, sizeof(err)),
                         0);
        /* B said goodbye: its record stays, leaving, for its grace period. */
        assert_int_equal(n, 2);
        const struct shoal_member *la = find(v, n, ida), *lb = find(v, n, idb_copy);
        assert_non_null(la);
        assert_non_null(lb);
        assert_true(la->alive);
        assert_true(la->cache_bytes == 12345);
        assert_false(lb->alive);
        assert_true(lb->leaving);
        assert_true(lb->grace_left_ms > 0 && lb->grace_left_ms <= 60000);
        free(v);

        char ida_copy[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(ida_copy, ida, sizeof(ida_copy));
        shoal_group_stop(a);
        struct shoal_member left = {0};
        assert_true(record_get(r, ida_copy, &left));
        assert_true(left.leaving);
        assert_true(left.grace_ms == 60000);
        assert_int_equal(shoal_registry_delete(r, ida_copy), 0);
        assert_int_equal(shoal_registry_delete(r, idb_copy), 0);
        shoal_registry_close(r);
}

static void check_volume_mismatch(const char *url)
{
        struct shoal_group_config cfg;
        char err[512];

        agent_config(&cfg, url, "d1", "file:///a", 4194304);
        err[0] = '\0';
        struct shoal_group *a = group_start(&cfg, err, sizeof(err));
        if (!a)
                fail_msg("start: %s", err);

        agent_config(&cfg, url, "d1", "file:///b", 1048576);
        err[0] = '\0';
        struct shoal_group *refused;
        /* [D1]: a volume that differs from the group's is the user's to fix */
        assert_int_equal(shoal_group_start(&cfg, &refused, err, sizeof(err)), -EINVAL);
        assert_null(refused);
        assert_non_null(strstr(err, "volume mismatch: this member has file:///b (block size "
                                    "1048576), group \"d1\" has file:///a (block size 4194304"));
        assert_null(strchr(err, '\n'));

        agent_config(&cfg, url, "d1", "file:///a", 1048576);
        err[0] = '\0';
        assert_int_equal(shoal_group_start(&cfg, &refused, err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "block size 1048576"));
        assert_non_null(strstr(err, "block size 4194304"));

        /* The refused members left nothing behind. */
        struct shoal_registry *r = reg_open(url, "d1", err, sizeof(err));
        assert_non_null(r);
        assert_int_equal(count_records(r), 1);

        /* A dead member on another volume does not block a join. */
        shoal_group_stop(a);
        struct shoal_member dead;
        fill_member(&dead, "dead", 0);
        shoal_strlcpy(dead.volume_url, "file:///old", sizeof(dead.volume_url));
        dead.updated_ms = now_ms() - 3600 * 1000;
        assert_int_equal(shoal_registry_put(r, &dead), 0);
        agent_config(&cfg, url, "d1", "file:///b", 1048576);
        struct shoal_group *b = group_start(&cfg, err, sizeof(err));
        if (!b)
                fail_msg("start: %s", err);
        assert_false(view_has(b, "dead"));
        shoal_group_stop(b);
        assert_int_equal(shoal_registry_delete(r, "dead"), 0);
        shoal_registry_close(r);
}

/* A record silent for 10 timeouts (as watched by the reader) is deleted. */
static void check_stale_deleted(const char *url)
{
        struct shoal_group_config cfg;
        char err[512] = "";

        struct shoal_registry *r = reg_open(url, "stale", err, sizeof(err));
        if (!r)
                fail_msg("open: %s", err);
        struct shoal_member old;
        fill_member(&old, "old", 0);
        old.updated_ms = now_ms() - 3600 * 1000;
        r->timeout_ns = 200 * MS; /* a writer with the agent's timeout (the lease's) */
        /* Before the put: on Redis the server counts the 10 timeouts from the put itself, and
         * a TSan run on a loaded machine once spent longer between the put and a clock read
         * after it than the test's poll took to see the deletion. */
        uint64_t t0 = shoal_now_ns();
        assert_int_equal(shoal_registry_put(r, &old), 0);

        agent_config(&cfg, url, "stale", "file:///data", 4194304);
        cfg.heartbeat_ns = 50 * MS;
        cfg.timeout_ns = 200 * MS;
        struct shoal_group *g = group_start(&cfg, err, sizeof(err));
        if (!g)
                fail_msg("start: %s", err);
        assert_false(view_has(g, "old"));
        assert_true(WAIT_UNTIL(!record_exists(r, "old"), 5000));
        /* Not before 10 timeouts (sqlite: the reader itself watched it that long). */
        assert_true(shoal_now_ns() - t0 >= 10 * cfg.timeout_ns);
        assert_false(view_has(g, "old"));
        shoal_group_stop(g);
        assert_int_equal(count_records(r), 1); /* G's own, saying goodbye for its grace */
        shoal_registry_close(r);
}

static void check_list_once(const char *url)
{
        char err[512] = "";
        struct shoal_registry *r = reg_open(url, "once", err, sizeof(err));
        struct shoal_member m, *v = NULL;
        size_t n = 0;

        if (!r)
                fail_msg("open: %s", err);
        fill_member(&m, "fresh", 0);
        m.updated_ms = now_ms();
        assert_int_equal(shoal_registry_put(r, &m), 0);
        fill_member(&m, "stale", 0);
        m.updated_ms = now_ms() - 60 * 1000;
        assert_int_equal(shoal_registry_put(r, &m), 0);
        assert_int_equal(shoal_group_list_once(url, "once", 0, &v, &n, err, sizeof(err)), 0);
        assert_int_equal(n, 2);
        assert_true(find(v, n, "fresh")->alive);
        assert_false(find(v, n, "stale")->alive);
        assert_true(find(v, n, "stale")->age_ms >= 59 * 1000);
        free(v);
        assert_int_equal(shoal_registry_delete(r, "fresh"), 0);
        assert_int_equal(shoal_registry_delete(r, "stale"), 0);
        shoal_registry_close(r);
}

/* ---- SQLite ---- */

/* [issue 33] A client (a consumer) is not a member: its agent writes a presence apart, which
 * `shoal group` lists, and is in nobody's view but its own. */
static void check_clients(const char *url, const char *group)
{
        char err[512] = "";
        struct shoal_group *a = start_agent(url, group);
        struct shoal_group_config cfg;
        agent_config(&cfg, url, group, "file:///data", 4194304);
        cfg.self.role = SHOAL_ROLE_CONSUMER;
        cfg.self.tcp_addr[0] = '\0';
        cfg.self.weight = 0;
        struct shoal_group *c = group_start(&cfg, err, sizeof(err));
        if (!c)
                fail_msg("start: %s", err);
        char idc[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(idc, shoal_group_self_id(c), sizeof(idc));
        /* the client sees the member; the member never sees the client */
        assert_true(WAIT_UNTIL(view_has(c, shoal_group_self_id(a)), 10000));
        shoal_sleep_ns(3 * HEARTBEAT_NS);
        assert_false(view_has(a, idc));
        struct shoal_registry *r = reg_open(url, group, err, sizeof(err));
        assert_non_null(r);
        assert_false(record_exists(r, idc));
        struct shoal_member *v = NULL;
        size_t n = 0;
        assert_int_equal(shoal_group_list_once(url, group, 0, &v, &n, err, sizeof(err)), 0);
        const struct shoal_member *lc = find(v, n, idc);
        assert_non_null(lc);
        assert_int_equal(lc->role, SHOAL_ROLE_CONSUMER);
        assert_true(lc->alive);
        assert_non_null(find(v, n, shoal_group_self_id(a)));
        free(v);
        /* a stop takes its presence away */
        shoal_group_stop(c);
        assert_int_equal(shoal_registry_list_clients(r, &v, &n), 0);
        assert_null(find(v, n, idc));
        free(v);
        char ida[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(ida, shoal_group_self_id(a), sizeof(ida));
        shoal_group_stop(a);
        assert_int_equal(shoal_registry_delete(r, ida), 0);
        shoal_registry_close(r);
}

static void test_sqlite_clients(void **state)
{
        (void)state;
        check_clients(new_sqlite_url(), "clients");
}

static void test_sqlite_roundtrip(void **state)
{
        const char *url = new_sqlite_url();
        check_roundtrip(url);
        /* The parent folders were created, and the database is in WAL mode. */
        struct stat st;
        assert_int_equal(stat(url + strlen("sqlite3://"), &st), 0);
        sqlite3 *db;
        sqlite3_stmt *q;
        assert_int_equal(sqlite3_open(url + strlen("sqlite3://"), &db), SQLITE_OK);
        assert_int_equal(sqlite3_prepare_v2(db, "PRAGMA journal_mode", -1, &q, NULL), SQLITE_OK);
        assert_int_equal(sqlite3_step(q), SQLITE_ROW);
        assert_string_equal((const char *)sqlite3_column_text(q, 0), "wal");
        sqlite3_finalize(q);
        sqlite3_close(db);
}

static void test_sqlite_garbage_skipped(void **state)
{
        const char *url = new_sqlite_url();
        char err[256] = "";
        struct shoal_registry *r = reg_open(url, "g", err, sizeof(err));
        struct shoal_member m, *v = NULL;
        size_t n = 0;
        sqlite3 *db;

        if (!r)
                fail_msg("open: %s", err);
        fill_member(&m, "good", 1);
        assert_int_equal(shoal_registry_put(r, &m), 0);
        assert_int_equal(sqlite3_open(url + strlen("sqlite3://"), &db), SQLITE_OK);
        sqlite3_busy_timeout(db, 5000);
        const char *sql = "INSERT INTO shoal_members VALUES ('g', 'junk', 'not a record');"
                          "INSERT INTO shoal_members VALUES ('g', 'blob', x'6d317c00');"
                          "INSERT INTO shoal_members VALUES ('g', 'num', 42);"
                          "INSERT INTO shoal_members VALUES ('g', 'other', "
                          "'m1|mismatch|h|t|i|0|||||1|0|v|4|0|0|0|0|0');";
        assert_int_equal(sqlite3_exec(db, sql, NULL, NULL, NULL), SQLITE_OK);
        sqlite3_close(db);
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        assert_int_equal(n, 1);
        assert_member_equal(&m, &v[0]);
        free(v);
        shoal_registry_close(r);
}

/* Several processes on one host write the same file at once. */
static void test_sqlite_concurrent_processes(void **state)
{
        const char *url = new_sqlite_url();
        enum {
                PROCS = 4,
                ROUNDS = 100
        };
        pid_t pids[PROCS];
        char err[256] = "";

        for (int p = 0; p < PROCS; p++) {
                pids[p] = fork();
                assert_true(pids[p] >= 0);
                if (pids[p] == 0) {
                        int bad = 0;
                        struct shoal_registry *r = reg_open(url, "g", err, sizeof(err));
                        if (!r)
                                _exit(10);
                        struct shoal_member m;
                        char id[16];
                        snprintf(id, sizeof(id), "proc%d", p);
                        fill_member(&m, id, (unsigned)p);
                        for (int i = 0; i < ROUNDS && !bad; i++) {
                                struct shoal_member *v = NULL;
                                size_t n = 0;
                                m.beat++;
                                bad |= shoal_registry_put(r, &m) != 0;
                                bad |= shoal_registry_list(r, &v, &n) != 0;
                                free(v);
                        }
                        shoal_registry_close(r);
                        _exit(bad ? 11 : 0);
                }
        }
        uint64_t deadline = shoal_now_ns() + 60000 * MS;
        for (int p = 0; p < PROCS; p++) {
                int status = 0;
                pid_t got;
                while ((got = waitpid(pids[p], &status, WNOHANG)) == 0 && shoal_now_ns() < deadline)
                        shoal_sleep_ns(10 * MS);
                if (got == 0) {
                        kill(pids[p], SIGKILL);
                        waitpid(pids[p], &status, 0);
                        fail_msg("writer %d did not finish", p);
                }
                assert_true(WIFEXITED(status));
                assert_int_equal(WEXITSTATUS(status), 0);
        }
        struct shoal_registry *r = reg_open(url, "g", err, sizeof(err));
        assert_non_null(r);
        struct shoal_member *v = NULL;
        size_t n = 0;
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        assert_int_equal(n, PROCS);
        for (size_t i = 0; i < n; i++)
                assert_true(v[i].beat == 1000ULL * (uint64_t)atoi(v[i].id + 4) + ROUNDS);
        free(v);
        shoal_registry_close(r);
}

static void test_sqlite_agents(void **state)
{
        check_agents(new_sqlite_url());
}

static void test_sqlite_volume_mismatch(void **state)
{
        check_volume_mismatch(new_sqlite_url());
}

static void test_sqlite_stale_deleted(void **state)
{
        check_stale_deleted(new_sqlite_url());
}

static void test_sqlite_list_once(void **state)
{
        check_list_once(new_sqlite_url());
}

static void test_env_overrides_heartbeat(void **state)
{
        const char *url = new_sqlite_url();
        struct shoal_group_config cfg;
        char err[512] = "";

        agent_config(&cfg, url, "env", "file:///data", 4194304);
        cfg.heartbeat_ns = 0; /* not given: the environment's, over the default (1 s) */
        cfg.timeout_ns = 7200 * 1000 * MS;
        setenv("SHOAL_GROUP_HEARTBEAT", "50ms", 1);
        assert_int_equal(shoal_config_load(err, sizeof(err)), 0); /* the CLI loads it once */
        struct shoal_group *g = group_start(&cfg, err, sizeof(err));
        unsetenv("SHOAL_GROUP_HEARTBEAT");
        assert_int_equal(shoal_config_load(err, sizeof(err)), 0);
        if (!g)
                fail_msg("start: %s", err);
        struct shoal_registry *r = reg_open(url, "env", err, sizeof(err));
        assert_non_null(r);
        bool moved = WAIT_UNTIL(({
                                        struct shoal_member *v = NULL;
                                        size_t n = 0;
                                        bool ok = shoal_registry_list(r, &v, &n) == 0 && n == 1 &&
                                                  v[0].beat >= 3;
                                        free(v);
                                        ok;
                                }),
                                2000);
        assert_true(moved);
        shoal_registry_close(r);
        shoal_group_stop(g);
}

/* ---- Redis ---- */

static pid_t redis_pid = -1;
static int redis_port;
static char redis_url[256];

static int free_port(void)
{
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
        socklen_t len = sizeof(sa);
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int port = -1;

        if (fd < 0)
                return -1;
        if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
            getsockname(fd, (struct sockaddr *)&sa, &len) == 0)
                port = ntohs(sa.sin_port);
        close(fd);
        return port;
}

static bool redis_answers(void)
{
        struct timeval tv = {0, 200000};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
        bool ok = false;

        if (c && !c->err) {
                redisReply *rep = redisCommand(c, "AUTH %s", REDIS_PASSWORD);
                if (rep)
                        freeReplyObject(rep);
                rep = redisCommand(c, "PING");
                ok = rep && rep->type == REDIS_REPLY_STATUS && !strcmp(rep->str, "PONG");
                if (rep)
                        freeReplyObject(rep);
        }
        if (c)
                redisFree(c);
        return ok;
}

/* redis-server as found on PATH (Debian puts it in /usr/bin, others elsewhere), or "" when absent.
 */
static char redis_server[4096];

static void find_redis_server(void)
{
        const char *path = getenv("PATH");
        redis_server[0] = '\0';
        while (path && *path) {
                const char *end = strchr(path, ':');
                size_t n = end ? (size_t)(end - path) : strlen(path);
                char cand[sizeof(redis_server)];
                if (n > 0 && n < sizeof(cand) - 16) {
                        snprintf(cand, sizeof(cand), "%.*s/redis-server", (int)n, path);
                        if (access(cand, X_OK) == 0) {
                                snprintf(redis_server, sizeof(redis_server), "%s", cand);
                                return;
                        }
                }
                path = end ? end + 1 : NULL;
        }
}

static int redis_start(void)
{
        char port[16];
        snprintf(port, sizeof(port), "%d", redis_port);
        pid_t pid = fork();
        if (pid < 0)
                return -errno;
        if (pid == 0) {
                /* Never outlive the test, even when it crashes. */
                prctl(PR_SET_PDEATHSIG, SIGKILL);
                int fd = open("/dev/null", O_RDWR);
                if (fd >= 0) {
                        dup2(fd, 0);
                        dup2(fd, 1);
                        dup2(fd, 2);
                }
                execl(redis_server, "redis-server", "--port", port, "--bind", "127.0.0.1", "--save",
                      "", "--appendonly", "no", "--dir", tmpdir, "--requirepass", REDIS_PASSWORD,
                      "--daemonize", "no", (char *)NULL);
                _exit(127);
        }
        redis_pid = pid;
        if (!WAIT_UNTIL(redis_answers(), 10000))
                return -ETIMEDOUT;
        return 0;
}

static void redis_stop(void)
{
        if (redis_pid > 0) {
                kill(redis_pid, SIGKILL);
                waitpid(redis_pid, NULL, 0);
                redis_pid = -1;
        }
}

static int redis_setup(void **state)
{
        find_redis_server();
        if (!redis_server[0])
                return 0; /* each test skips */
        redis_port = free_port();
        if (redis_port < 0 || redis_start() < 0) {
                redis_stop();
                return -1;
        }
        snprintf(redis_url, sizeof(redis_url), "redis://:%s@127.0.0.1:%d/3", REDIS_PASSWORD_Q,
                 redis_port);
        return 0;
}

static int redis_teardown(void **state)
{
        redis_stop();
        return 0;
}

static void need_redis(void)
{
        if (redis_pid <= 0)
                SHOAL_UNIT_SKIP("no redis-server on PATH");
}

/* A direct client on database 3, for checks behind the registry's back. */
static redisContext *redis_direct(void)
{
        struct timeval tv = {2, 0};
        redisContext *c = redisConnectWithTimeout("127.0.0.1", redis_port, tv);
        assert_non_null(c);
        assert_int_equal(c->err, 0);
        redisReply *rep = redisCommand(c, "AUTH %s", REDIS_PASSWORD);
        assert_non_null(rep);
        freeReplyObject(rep);
        rep = redisCommand(c, "SELECT 3");
        assert_non_null(rep);
        freeReplyObject(rep);
        return c;
}

static void test_redis_roundtrip(void **state)
{
        need_redis();
        check_roundtrip(redis_url);

        /* AUTH and SELECT were used: the hash lives in database 3 under the documented key. */
        char err[256] = "";
        struct shoal_registry *r = reg_open(redis_url, "keyed", err, sizeof(err));
        assert_non_null(r);
        struct shoal_member m;
        fill_member(&m, "k1", 1);
        assert_int_equal(shoal_registry_put(r, &m), 0);
        redisContext *c = redis_direct();
        redisReply *rep = redisCommand(c, "HEXISTS shoal:keyed:members k1");
        assert_non_null(rep);
        assert_int_equal(rep->type, REDIS_REPLY_INTEGER);
        assert_int_equal(rep->integer, 1);
        freeReplyObject(rep);
        redisFree(c);
        assert_int_equal(shoal_registry_delete(r, "k1"), 0);
        shoal_registry_close(r);
}

static void test_redis_bad_password(void **state)
{
        char url[256], err[256] = "";

        need_redis();
        snprintf(url, sizeof(url), "redis://:wrong@127.0.0.1:%d/3", redis_port);
        struct shoal_registry *r;
        /* the server's refusal is found at run time: not a bad URL */
        int rc = shoal_registry_open(url, "g", &r, err, sizeof(err));
        assert_true(rc < 0 && rc != -EINVAL);
        assert_non_null(strstr(err, "AUTH"));
        assert_null(strstr(err, "wrong"));
        /* Nobody listening. */
        snprintf(url, sizeof(url), "redis://127.0.0.1:%d", free_port());
        err[0] = '\0';
        assert_int_equal(shoal_registry_open(url, "g", &r, err, sizeof(err)), -ECONNREFUSED);
        assert_true(err[0]);
}

static void test_redis_garbage_skipped(void **state)
{
        char err[256] = "";

        need_redis();
        struct shoal_registry *r = reg_open(redis_url, "junk", err, sizeof(err));
        assert_non_null(r);
        struct shoal_member m, *v = NULL;
        size_t n = 0;
        fill_member(&m, "good", 1);
        assert_int_equal(shoal_registry_put(r, &m), 0);
        redisContext *c = redis_direct();
        static const char nul[] = "m1|a\0|h";
        redisReply *rep = redisCommand(c, "HSET shoal:junk:members bad %s", "not a record");
        freeReplyObject(rep);
        rep = redisCommand(c, "HSET shoal:junk:members nul %b", nul, sizeof(nul) - 1);
        freeReplyObject(rep);
        rep = redisCommand(c, "HSET shoal:junk:members other %s",
                           "m1|mismatch|h|t|i|0|||||1|0|v|4|0|0|0|0|0");
        freeReplyObject(rep);
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        assert_int_equal(n, 1);
        assert_member_equal(&m, &v[0]);
        free(v);

        /* The key holding another type is an error, not a crash. */
        rep = redisCommand(c, "SET shoal:junk:members scalar");
        freeReplyObject(rep);
        v = NULL;
        assert_true(shoal_registry_list(r, &v, &n) < 0);
        assert_null(v);
        rep = redisCommand(c, "DEL shoal:junk:members");
        freeReplyObject(rep);
        redisFree(c);
        assert_int_equal(count_records(r), 0);
        shoal_registry_close(r);
}

static void test_redis_reconnects(void **state)
{
        char err[256] = "";

        need_redis();
        struct shoal_registry *r = reg_open(redis_url, "re", err, sizeof(err));
        assert_non_null(r);
        struct shoal_member m;
        fill_member(&m, "m", 1);
        assert_int_equal(shoal_registry_put(r, &m), 0);

        /* The server dies: calls fail (no crash, no SIGPIPE), then succeed once it is back. */
        redis_stop();
        assert_true(shoal_registry_put(r, &m) < 0);
        assert_int_equal(redis_start(), 0);
        assert_int_equal(shoal_registry_put(r, &m), 0);
        /* Restarted while connected: the broken connection is replaced within the call. */
        redis_stop();
        assert_int_equal(redis_start(), 0);
        assert_int_equal(shoal_registry_put(r, &m), 0);
        assert_true(record_exists(r, "m"));
        assert_int_equal(shoal_registry_delete(r, "m"), 0);
        shoal_registry_close(r);
}

static void test_redis_agents(void **state)
{
        need_redis();
        check_agents(redis_url);
}

static void test_redis_volume_mismatch(void **state)
{
        need_redis();
        check_volume_mismatch(redis_url);
}

static void test_redis_stale_deleted(void **state)
{
        need_redis();
        check_stale_deleted(redis_url);
}

static void test_redis_list_once(void **state)
{
        need_redis();
        check_list_once(redis_url);
}

/* The registry goes away under two running agents: they keep serving with their last view,
 * and register again when it comes back (empty: this server keeps nothing on disk). */
static void test_redis_outage(void **state)
{
        char err[256] = "";

        need_redis();
        struct shoal_group *a = start_agent(redis_url, "outage");
        struct shoal_group *b = start_agent(redis_url, "outage");
        assert_true(WAIT_UNTIL(view_size(a) == 2 && view_size(b) == 2, 2000));
        redis_stop();
        /* Both agents go on beating against a dead registry for more than a timeout's worth of
         * heartbeats: a view judged by silence alone would have dropped everyone by then. */
        unsigned fails = 2 * ((unsigned)(TIMEOUT_NS / HEARTBEAT_NS) + 3); /* two per heartbeat */
        assert_true(WAIT_UNTIL(shoal_group_registry_failures(a) >= fails &&
                                       shoal_group_registry_failures(b) >= fails,
                               20000));
        assert_int_equal(view_size(a), 2);
        assert_true(view_has(b, shoal_group_self_id(b)));
        assert_int_equal(redis_start(), 0);
        struct shoal_registry *r = reg_open(redis_url, "outage", err, sizeof(err));
        assert_non_null(r);
        assert_true(WAIT_UNTIL(count_records(r) == 2, 2000));
        assert_true(WAIT_UNTIL(view_size(a) == 2 && view_size(b) == 2, 2000));
        shoal_group_stop(a);
        shoal_group_stop(b);
        assert_int_equal(count_records(r), 2); /* both say goodbye for their grace period */
        shoal_registry_close(r);
}

static const struct shoal_member *away_of(const struct shoal_group_view *v, const char *id)
{
        return find(v->away, v->n_away, id);
}

/* [issue 26] A member that stops beating leaves the serving view after the timeout but keeps its
 * place (listed away, with the grace left) until its grace period ends; back within it, it is
 * serving again. One that says goodbye leaves the serving view at once. */
static void check_grace(const char *url)
{
        char err[512] = "";
        struct shoal_group *a = start_agent(url, "grace");
        struct shoal_registry *r = reg_open(url, "grace", err, sizeof(err));
        if (!r)
                fail_msg("open: %s", err);
        struct shoal_member c;
        fill_member(&c, "crashy", 0);
        c.grace_ms = 1500;
        c.beat = 1;
        c.updated_ms = now_ms();
        assert_int_equal(shoal_registry_put(r, &c), 0);
        assert_true(WAIT_UNTIL(view_has(a, "crashy"), 1000));
        /* silent: away after the timeout, with its grace running */
        assert_true(WAIT_UNTIL(!view_has(a, "crashy"), 1500));
        struct shoal_group_view *v = shoal_group_view_get(a);
        const struct shoal_member *m = away_of(v, "crashy");
        assert_non_null(m);
        assert_false(m->alive);
        assert_true(m->grace_left_ms > 0 && m->grace_left_ms <= 1500);
        shoal_group_view_put(v);
        /* back within its grace: serving again */
        c.beat++;
        c.updated_ms = now_ms();
        assert_int_equal(shoal_registry_put(r, &c), 0);
        assert_true(WAIT_UNTIL(view_has(a, "crashy"), 1000));
        /* silent for good: out of the ring once the grace period is over */
        assert_true(WAIT_UNTIL(!view_has(a, "crashy"), 1500));
        bool gone = WAIT_UNTIL(({
                                       struct shoal_group_view *w = shoal_group_view_get(a);
                                       bool out = !away_of(w, "crashy") && !view_has(a, "crashy");
                                       shoal_group_view_put(w);
                                       out;
                               }),
                               3000);
        assert_true(gone);
        assert_int_equal(shoal_registry_delete(r, "crashy"), 0);

        /* A goodbye: gone from the serving view within a heartbeat or two, away meanwhile. */
        struct shoal_group *b = start_agent(url, "grace");
        char idb[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(idb, shoal_group_self_id(b), sizeof(idb));
        assert_true(WAIT_UNTIL(view_has(a, idb), 1000));
        uint64_t t0 = shoal_now_ns();
        shoal_group_stop(b);
        assert_true(WAIT_UNTIL(!view_has(a, idb), 1000));
        assert_true(shoal_now_ns() - t0 < TIMEOUT_NS);
        v = shoal_group_view_get(a);
        m = away_of(v, idb);
        assert_non_null(m);
        assert_true(m->leaving);
        shoal_group_view_put(v);
        assert_int_equal(shoal_registry_delete(r, idb), 0);
        char ida[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(ida, shoal_group_self_id(a), sizeof(ida));
        shoal_group_stop(a);
        assert_int_equal(shoal_registry_delete(r, ida), 0);
        shoal_registry_close(r);
}

/* [issue 26] A weight set through the registry reaches the member and its readers without a
 * restart; a consumer or an unknown member is refused. */
static void check_set_weight(const char *url)
{
        char err[512] = "";
        struct shoal_group *a = start_agent(url, "weights");
        struct shoal_group *b = start_agent(url, "weights");
        char ida[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(ida, shoal_group_self_id(a), sizeof(ida));
        assert_true(WAIT_UNTIL(view_size(a) == 2 && view_size(b) == 2, 2000));
        struct shoal_member was;
        assert_int_equal(shoal_group_set_weight(url, "weights", ida, 0, &was, err, sizeof(err)), 0);
        assert_int_equal(was.weight, 100);
        bool drained =
                WAIT_UNTIL(({
                                   struct shoal_group_view *w = shoal_group_view_get(b);
                                   const struct shoal_member *m = find(w->members, w->n, ida);
                                   struct shoal_group_view *x = shoal_group_view_get(a);
                                   const struct shoal_member *s = find(x->members, x->n, ida);
                                   bool ok = m && m->weight == 0 && s && s->weight == 0;
                                   shoal_group_view_put(w);
                                   shoal_group_view_put(x);
                                   ok;
                           }),
                           2000);
        assert_true(drained);
        /* by address (both agents publish the same one here: the one that beat last) */
        assert_int_equal(
                shoal_group_set_weight(url, "weights", "127.0.0.1:7000", 7, &was, err, sizeof(err)),
                0);
        assert_int_equal(
                shoal_group_set_weight(url, "weights", "nobody", 1, NULL, err, sizeof(err)),
                -ENOENT);
        assert_non_null(strstr(err, "nobody"));
        struct shoal_registry *r = reg_open(url, "weights", err, sizeof(err));
        assert_non_null(r);
        struct shoal_member c;
        fill_member(&c, "reader", 1); /* odd seed: a consumer */
        c.updated_ms = now_ms();
        assert_int_equal(shoal_registry_put(r, &c), 0);
        assert_int_equal(
                shoal_group_set_weight(url, "weights", "reader", 1, NULL, err, sizeof(err)),
                -EINVAL);
        assert_int_equal(shoal_registry_delete(r, "reader"), 0);
        char idb[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(idb, shoal_group_self_id(b), sizeof(idb));
        shoal_group_stop(a);
        shoal_group_stop(b);
        shoal_registry_delete(r, ida);
        shoal_registry_delete(r, idb);
        shoal_registry_set_weight(r, ida, -1);
        shoal_registry_set_weight(r, idb, -1);
        shoal_registry_close(r);
}

static void test_sqlite_grace(void **state)
{
        (void)state;
        check_grace(new_sqlite_url());
}

static void test_sqlite_set_weight(void **state)
{
        (void)state;
        check_set_weight(new_sqlite_url());
}

static void test_redis_grace(void **state)
{
        need_redis();
        check_grace(redis_url);
}

static void test_redis_set_weight(void **state)
{
        need_redis();
        check_set_weight(redis_url);
}

static void test_redis_clients(void **state)
{
        need_redis();
        check_clients(redis_url, "clients");
}

/* A client's presence on Redis lasts the client TTL, not the timeout, and is renewed every half
 * of it; a companion group (sqlite) keeps judging clients by the timeout. */
static void test_redis_client_ttl(void **state)
{
        need_redis();
        char err[512] = "";
        struct shoal_registry *r = reg_open(redis_url, "cttl", err, sizeof(err));
        if (!r)
                fail_msg("open: %s", err);
        r->timeout_ns = SHOAL_NS_PER_SEC;
        r->client_ttl_ns = 4 * SHOAL_NS_PER_SEC;
        assert_int_equal(shoal_registry_client_renew_ns(r), 2 * SHOAL_NS_PER_SEC);
        struct shoal_member m, *v = NULL;
        size_t n = 0;
        fill_member(&m, "ttl-client", 7);
        m.role = SHOAL_ROLE_CONSUMER;
        assert_int_equal(shoal_registry_put_client(r, &m), 0);
        /* two timeouts later: still there (the timeout would have ended it) */
        shoal_sleep_ns(2 * SHOAL_NS_PER_SEC);
        assert_int_equal(shoal_registry_list_clients(r, &v, &n), 0);
        assert_non_null(find(v, n, "ttl-client"));
        free(v);
        /* past the TTL: gone, nobody deleted it */
        shoal_sleep_ns(2500 * SHOAL_NS_PER_MS);
        assert_int_equal(shoal_registry_list_clients(r, &v, &n), 0);
        assert_null(find(v, n, "ttl-client"));
        free(v);
        shoal_registry_close(r);

        struct shoal_registry *q = reg_open(new_sqlite_url(), "cttl", err, sizeof(err));
        if (!q)
                fail_msg("open: %s", err);
        q->timeout_ns = SHOAL_NS_PER_SEC;
        q->client_ttl_ns = 4 * SHOAL_NS_PER_SEC;
        assert_int_equal(shoal_registry_client_renew_ns(q), SHOAL_NS_PER_SEC / 2);
        shoal_registry_close(q);
}

/* An integer (or a number held as a string) that a command on C answers; -1 for none. */
static long long redis_num(redisContext *c, const char *cmd, const char *arg)
{
        redisReply *rep = redisCommand(c, cmd, arg);
        long long v = -1;
        if (rep && rep->type == REDIS_REPLY_INTEGER)
                v = rep->integer;
        else if (rep && rep->type == REDIS_REPLY_STRING)
                v = strtoll(rep->str, NULL, 10);
        if (rep)
                freeReplyObject(rep);
        return v;
}

/* Calls of COMMAND (lower case) since the last CONFIG RESETSTAT, scripts' included. */
static long long redis_calls(redisContext *c, const char *command)
{
        redisReply *rep = redisCommand(c, "INFO commandstats");
        long long v = 0;
        char key[64];
        snprintf(key, sizeof(key), "cmdstat_%s:calls=", command);
        if (rep && rep->type == REDIS_REPLY_STRING) {
                const char *p = strstr(rep->str, key);
                if (p)
                        v = strtoll(p + strlen(key), NULL, 10);
        }
        if (rep)
                freeReplyObject(rep);
        return v;
}

/* [issue 33] The group's version changes with a join, a weight, an expiry and a leave, never
 * with a heartbeat or a client; a poll that finds it unchanged reads no record; a change is
 * read as the records of the ids it changed, never the whole group. */
static void test_redis_versions(void **state)
{
        char err[512] = "";
        need_redis();
        redisContext *c = redis_direct();
        struct shoal_group *a = start_agent(redis_url, "ver");
        struct shoal_group *b = start_agent(redis_url, "ver");
        char ida[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(ida, shoal_group_self_id(a), sizeof(ida));
        assert_true(WAIT_UNTIL(view_size(a) == 2 && view_size(b) == 2, 2000));
        /* (each agent's first poll after the group's first version reads everything: the
         * version counter's epoch is new to the one that joined first) */
        shoal_sleep_ns(3 * HEARTBEAT_NS);
        long long v0 = redis_num(c, "GET %s", "shoal:ver:version");
        assert_true(v0 >= 2);
        freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
        shoal_sleep_ns(6 * HEARTBEAT_NS);
        /* heartbeats: no version, no record read */
        assert_int_equal(redis_num(c, "GET %s", "shoal:ver:version"), v0);
        assert_true(redis_calls(c, "evalsha") >=
                    2); /* the polls ran (a busy machine may run fewer) */
        assert_int_equal(redis_calls(c, "hgetall"), 0);
        assert_int_equal(redis_calls(c, "hget"), 0);
        /* a client's join changes nothing of the members' version */
        struct shoal_group_config cfg;
        agent_config(&cfg, redis_url, "ver", "file:///data", 4194304);
        cfg.self.role = SHOAL_ROLE_CONSUMER;
        struct shoal_group *cl = group_start(&cfg, err, sizeof(err));
        assert_non_null(cl);
        assert_true(WAIT_UNTIL(view_size(cl) == 3, 10000)); /* a, b and itself */
        assert_int_equal(redis_num(c, "GET %s", "shoal:ver:version"), v0);
        assert_int_equal(redis_num(c, "HEXISTS shoal:ver:members %s", shoal_group_self_id(cl)), 0);
        assert_int_equal(redis_num(c, "HEXISTS shoal:ver:clients %s", shoal_group_self_id(cl)), 1);
        /* a weight: one version more, logged under the id, read as that record alone */
        freeReplyObject(redisCommand(c, "CONFIG RESETSTAT"));
        assert_int_equal(shoal_group_set_weight(redis_url, "ver", ida, 5, NULL, err, sizeof(err)),
                         0);
        bool seen = WAIT_UNTIL(({
                                       struct shoal_group_view *w = shoal_group_view_get(b);
                                       const struct shoal_member *m = find(w->members, w->n, ida);
                                       bool ok = m && m->weight == 5;
                                       shoal_group_view_put(w);
                                       ok;
                               }),
                               2000);
        assert_true(seen);
        long long v1 = redis_num(c, "GET %s", "shoal:ver:version");
        assert_true(v1 > v0);
        redisReply *rep = redisCommand(c, "LRANGE shoal:ver:log -1 -1");
        assert_true(rep && rep->type == REDIS_REPLY_ARRAY && rep->elements == 1);
        freeReplyObject(rep);
        /* (the one full read is set_weight's own handle: its first listing) */
        assert_true(redis_calls(c, "hgetall") <= 2);
        assert_true(redis_calls(c, "hget") >= 1);
        /* a member whose lease runs out: a version more, with nobody deleting its record */
        struct shoal_registry *r = reg_open(redis_url, "ver", err, sizeof(err));
        assert_non_null(r);
        struct shoal_member x;
        fill_member(&x, "expiring", 0);
        x.updated_ms = now_ms();
        x.grace_ms = 0;
        assert_int_equal(shoal_registry_put(r, &x), 0);
        assert_true(WAIT_UNTIL(view_has(a, "expiring"), 1000));
        long long v2 = redis_num(c, "GET %s", "shoal:ver:version");
        assert_true(WAIT_UNTIL(!view_has(a, "expiring") && !view_has(cl, "expiring"), 10000));
        assert_true(redis_num(c, "GET %s", "shoal:ver:version") > v2);
        assert_int_equal(redis_num(c, "HEXISTS shoal:ver:members %s", "expiring"), 1);
        shoal_group_stop(cl);
        char idb[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(idb, shoal_group_self_id(b), sizeof(idb));
        shoal_group_stop(a);
        shoal_group_stop(b);
        shoal_registry_delete(r, ida);
        shoal_registry_delete(r, idb);
        shoal_registry_delete(r, "expiring");
        shoal_registry_set_weight(r, ida, -1);
        shoal_registry_close(r);
        redisFree(c);
}

/* Every listing of R holds exactly the member "good" (and nothing crashed on the way). */
static void assert_only_good(struct shoal_registry *r, const struct shoal_member *good)
{
        struct shoal_member *v = NULL;
        size_t n = 0;
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        assert_int_equal(n, 1);
        assert_member_equal(good, &v[0]);
        free(v);
}

static void redis_do(redisContext *c, const char *cmd, const char *arg)
{
        redisReply *rep = arg ? redisCommand(c, cmd, arg) : redisCommand(c, cmd);
        assert_non_null(rep);
        freeReplyObject(rep);
}

/* [issue 33] Whoever can write to the registry may forge the change log and the version: a
 * reader re-reads the records the log names from the records themselves (never from the log),
 * so ids with no record, ids too long for a member, binary junk, a record under another id than
 * its key, a version that jumps ahead, runs back or is not a number, a lost epoch and a log of
 * the wrong type cost at most a full read, never a member that is not there, a failed listing
 * or a crash. */
static void test_redis_lying_log(void **state)
{
        char err[256] = "";
        need_redis();
        struct shoal_registry *r = reg_open(redis_url, "lie", err, sizeof(err));
        assert_non_null(r);
        struct shoal_member good;
        fill_member(&good, "good", 2);
        assert_int_equal(shoal_registry_put(r, &good), 0);
        assert_only_good(r, &good); /* synced: the next listings read deltas */
        redisContext *c = redis_direct();
        char longid[300];
        memset(longid, 'x', sizeof(longid) - 1);
        longid[sizeof(longid) - 1] = '\0';
        static const char junk[] = "\x01\xff\0id";
        redis_do(c, "RPUSH shoal:lie:log %s", longid);
        redis_do(c, "RPUSH shoal:lie:log ghost", NULL);
        redisReply *rep = redisCommand(c, "RPUSH shoal:lie:log %b", junk, sizeof(junk) - 1);
        freeReplyObject(rep);
        redis_do(c, "HSET shoal:lie:members liar m1|mismatch|h|t|i|0|||||1|0|v|4|0|0|0|0|0", NULL);
        redis_do(c, "ZADD shoal:lie:leases 99999999999999 liar", NULL);
        redis_do(c, "RPUSH shoal:lie:log liar", NULL);
        redis_do(c, "RPUSH shoal:lie:log good", NULL);
        redis_do(c, "INCRBY shoal:lie:version 5", NULL);
        assert_only_good(r, &good); /* a delta of forged ids */
        redis_do(c, "INCRBY shoal:lie:version 100000", NULL);
        assert_only_good(r, &good); /* a gap past the log: a full read */
        redis_do(c, "SET shoal:lie:version 1", NULL);
        assert_only_good(r, &good); /* backwards */
        redis_do(c, "SET shoal:lie:version notanumber", NULL);
        assert_only_good(r, &good);
        redis_do(c, "SET shoal:lie:scanned soon", NULL);
        assert_only_good(r, &good); /* the expiry scan's mark */
        redis_do(c, "SET shoal:lie:scanned 99999999999999999", NULL);
        assert_only_good(r, &good); /* a mark ahead of the clock */
        redis_do(c, "DEL shoal:lie:epoch", NULL);
        assert_only_good(r, &good); /* a new epoch: a full read */
        /* A log of another type: dropped, and read in full. */
        redis_do(c, "DEL shoal:lie:log", NULL);
        redis_do(c, "SET shoal:lie:log scalar", NULL);
        redis_do(c, "INCR shoal:lie:version", NULL);
        assert_only_good(r, &good);
        struct shoal_member *v = NULL;
        size_t n = 0;
        /* and the honest writer's next change still reaches the reader, even through a log
         * that was made a scalar again */
        redis_do(c, "DEL shoal:lie:log", NULL);
        redis_do(c, "SET shoal:lie:log scalar", NULL);
        struct shoal_member second;
        fill_member(&second, "second", 4);
        assert_int_equal(shoal_registry_put(r, &second), 0);
        assert_int_equal(shoal_registry_list(r, &v, &n), 0);
        assert_int_equal(n, 2);
        free(v);
        shoal_registry_delete(r, "good");
        shoal_registry_delete(r, "second");
        shoal_registry_delete(r, "liar");
        redis_do(c, "DEL shoal:lie:members", NULL);
        redisFree(c);
        shoal_registry_close(r);
}

/* [issue 33] A start that cannot reach the registry does not fail: the process is alone in its
 * view (it reads from the store) and joins in the background once the registry answers. */
static void test_redis_background_join(void **state)
{
        char err[512] = "";
        need_redis();
        redis_stop();
        struct shoal_group_config cfg;
        agent_config(&cfg, redis_url, "late", "file:///data", 4194304);
        struct shoal_group *g = group_start(&cfg, err, sizeof(err));
        if (!g)
                fail_msg("start: %s", err);
        assert_int_equal(view_size(g), 1);
        assert_int_equal(redis_start(), 0);
        struct shoal_group *h = start_agent(redis_url, "late");
        assert_true(WAIT_UNTIL(view_size(g) == 2 && view_size(h) == 2, 10000));
        struct shoal_registry *r = reg_open(redis_url, "late", err, sizeof(err));
        assert_non_null(r);
        assert_true(record_exists(r, shoal_group_self_id(g)));
        /* a configuration that cannot work still fails at once */
        agent_config(&cfg, redis_url, "late", "file:///other", 4194304);
        struct shoal_group *refused;
        assert_int_equal(shoal_group_start(&cfg, &refused, err, sizeof(err)), -EINVAL);
        char idg[SHOAL_MEMBER_ID_LEN + 1], idh[SHOAL_MEMBER_ID_LEN + 1];
        shoal_strlcpy(idg, shoal_group_self_id(g), sizeof(idg));
        shoal_strlcpy(idh, shoal_group_self_id(h), sizeof(idh));
        shoal_group_stop(g);
        shoal_group_stop(h);
        shoal_registry_delete(r, idg);
        shoal_registry_delete(r, idh);
        shoal_registry_close(r);
}

static int global_setup(void)
{
        snprintf(tmpdir, sizeof(tmpdir), "/tmp/shoal-test-registry-XXXXXX");
        if (!mkdtemp(tmpdir))
                return -1;
        unsetenv("SHOAL_GROUP_TIMEOUT");
        unsetenv("SHOAL_GROUP_HEARTBEAT");
        char err[256];
        return shoal_config_load(err, sizeof(err)) ? -1 : 0;
}

int main(void)
{
        const struct CMUnitTest local[] = {
                cmocka_unit_test(test_codec_roundtrip),
                cmocka_unit_test(test_codec_refuses_at_put),
                cmocka_unit_test(test_codec_garbage),
                cmocka_unit_test(test_open_refuses_bad_urls),
                cmocka_unit_test(test_sqlite_roundtrip),
                cmocka_unit_test(test_sqlite_garbage_skipped),
                cmocka_unit_test(test_sqlite_concurrent_processes),
                cmocka_unit_test(test_sqlite_agents),
                cmocka_unit_test(test_sqlite_volume_mismatch),
                cmocka_unit_test(test_sqlite_stale_deleted),
                cmocka_unit_test(test_sqlite_list_once),
                cmocka_unit_test(test_sqlite_grace),
                cmocka_unit_test(test_sqlite_set_weight),
                cmocka_unit_test(test_sqlite_clients),
                cmocka_unit_test(test_env_overrides_heartbeat),
        };
        const struct CMUnitTest redis[] = {
                cmocka_unit_test(test_redis_roundtrip),
                cmocka_unit_test(test_redis_bad_password),
                cmocka_unit_test(test_redis_garbage_skipped),
                cmocka_unit_test(test_redis_reconnects),
                cmocka_unit_test(test_redis_agents),
                cmocka_unit_test(test_redis_volume_mismatch),
                cmocka_unit_test(test_redis_stale_deleted),
                cmocka_unit_test(test_redis_list_once),
                cmocka_unit_test(test_redis_outage),
                cmocka_unit_test(test_redis_grace),
                cmocka_unit_test(test_redis_set_weight),
                cmocka_unit_test(test_redis_clients),
                cmocka_unit_test(test_redis_client_ttl),
                cmocka_unit_test(test_redis_versions),
                cmocka_unit_test(test_redis_lying_log),
                cmocka_unit_test(test_redis_background_join),
        };
        int failed;

        if (global_setup() < 0) {
                perror("mkdtemp");
                return 1;
        }
        failed = cmocka_run_group_tests_name("registry_sqlite", local, NULL, NULL);
        failed += cmocka_run_group_tests_name("registry_redis", redis, redis_setup, redis_teardown);
        redis_stop();
        nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
        return failed ? 1 : 0;
}
