/* The settings layer (node/settings.h) that the command line and libshoal share: every setting
 * with good and bad values, the message in both spellings ("--cache-size" for the command line,
 * "cache-size" for the library), the defaults that differ by who the configuration is for, the
 * checks only the combination shows, and the group secret from a file, the library and the
 * environment. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "node/settings.h"
#include "common/block.h"
#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "server/server.h"

static const struct shoal_env no_env; /* nothing set */

static struct shoal_node_config build(struct shoal_settings *s)
{
        struct shoal_node_config cfg;
        char err[512] = "";
        if (shoal_settings_build(s, "file:///data", &no_env, &cfg, err, sizeof(err)))
                fail_msg("build: %s", err);
        return cfg;
}

static struct shoal_node_config build_one(enum shoal_settings_for who, enum shoal_setting id,
                                          const char *value)
{
        static struct shoal_settings s; /* the configuration points into it */
        char err[512] = "";
        shoal_settings_init(&s, who);
        if (shoal_settings_set(&s, id, value, err, sizeof(err)))
                fail_msg("%s %s: %s", shoal_setting_name(id), value, err);
        return build(&s);
}

static void test_names(void **state)
{
        (void)state;
        int n = 0;
        for (int i = SHOAL_SET_NONE + 1; i < SHOAL_SET__COUNT; i++, n++) {
                const char *name = shoal_setting_name((enum shoal_setting)i);
                assert_true(name[0]);
                assert_int_equal(shoal_setting_find(name), i);
        }
        assert_int_equal(n, SHOAL_SET__COUNT - 1);
        assert_int_equal(shoal_setting_find("no-such-setting"), SHOAL_SET_NONE);
        assert_int_equal(shoal_setting_find(NULL), SHOAL_SET_NONE);
        assert_string_equal(shoal_setting_name(SHOAL_SET_NONE), "");
        /* switches are flags without a value on the command line */
        assert_true(shoal_setting_is_switch(SHOAL_SET_NO_SHARING));
        assert_true(shoal_setting_is_switch(SHOAL_SET_USE_IORPC));
        assert_true(shoal_setting_is_switch(SHOAL_SET_CACHE_TRY_DIO));
        assert_false(shoal_setting_is_switch(SHOAL_SET_CACHE_SIZE));
        /* what a library client takes (docs/library.md "Settings"), and nothing that serves */
        static const char *const lib[] = {"meta",
                                          "cache-group",
                                          "cache-dir",
                                          "cache-size",
                                          "free-space-ratio",
                                          "block-size",
                                          "endpoint",
                                          "use-iorpc",
                                          "rdma-network",
                                          "rdma-provider",
                                          "buffer-size",
                                          "max-downloads",
                                          "prefetch",
                                          "group-secret-file",
                                          "metrics",
                                          "log-level",
                                          "log-file",
                                          "strict-group",
                                          "local-secret-file"};
        int nlib = 0;
        for (int i = SHOAL_SET_NONE + 1; i < SHOAL_SET__COUNT; i++)
                nlib += shoal_setting_for_library((enum shoal_setting)i);
        assert_int_equal(nlib, (int)SHOAL_ARRAY_SIZE(lib));
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(lib); i++)
                assert_true(shoal_setting_for_library(shoal_setting_find(lib[i])));
        assert_false(shoal_setting_for_library(SHOAL_SET_GROUP_WEIGHT));
        assert_false(shoal_setting_for_library(SHOAL_SET_IORPC_MODE));
}

/* The defaults, and the ones that differ for a member, a tool and a library client. */
static void test_defaults(void **state)
{
        (void)state;
        static const enum shoal_settings_for who[] = {SHOAL_SETTINGS_DAEMON, SHOAL_SETTINGS_TOOL,
                                                      SHOAL_SETTINGS_LIBRARY};
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(who); i++) {
                struct shoal_settings s;
                shoal_settings_init(&s, who[i]);
                struct shoal_node_config c = build(&s);
                bool lib = who[i] == SHOAL_SETTINGS_LIBRARY;
                assert_string_equal(c.storage, "file:///data");
                assert_null(c.endpoint);
                assert_int_equal(c.block_size, SHOAL_BLOCK_SIZE_DEFAULT);
                assert_null(c.cache_group);
                assert_non_null(strstr(c.meta_url, "sqlite3:///"));
                assert_non_null(strstr(c.meta_url, "/meta.db"));
                assert_non_null(c.cache_dir);
                /* a library's disk cache is opt-in */
                assert_int_equal(c.cache_size, lib ? 0 : 102400 * (int64_t)SHOAL_MiB);
                assert_true(c.free_space_ratio == 0.1);
                /* a member serves (and so has a metrics endpoint); a tool and a library not */
                assert_int_equal(c.serve, who[i] == SHOAL_SETTINGS_DAEMON);
                /* a library client is a consumer */
                assert_int_equal(c.no_sharing, lib);
                assert_int_equal(c.group_weight, lib ? 0 : 100);
                assert_null(c.group_ip);
                assert_null(c.group_network);
                assert_int_equal(c.group_port, 0);
                assert_false(shoal_secret_set(&c.group_secret));
                assert_false(c.use_iorpc);
                assert_int_equal(c.iorpc_mode, SHOAL_IORPC_DIO);
                assert_false(c.cache_try_dio);
                assert_null(c.rdma_network);
                assert_null(c.rdma_provider);
                assert_int_equal(c.buffer_size, 300 * SHOAL_MiB);
                assert_int_equal(c.max_downloads, 200);
                assert_int_equal(c.prefetch, 2);
                assert_int_equal(c.upload_part_size, 0);
                assert_null(c.metrics_addr);
                /* a member says what it does; tools and libraries only warn */
                assert_int_equal(shoal_settings_log_level(&s),
                                 who[i] == SHOAL_SETTINGS_DAEMON ? SHOAL_LOG_INFO : SHOAL_LOG_WARN);
        }
        /* Folders: system-wide for root, else under HOME. */
        struct shoal_env env = {.home = "/home/someone"};
        struct shoal_settings s;
        shoal_settings_init(&s, SHOAL_SETTINGS_TOOL);
        struct shoal_node_config c;
        char err[256];
        assert_int_equal(shoal_settings_build(&s, "file:///d", &env, &c, err, sizeof(err)), 0);
        if (geteuid() == 0) {
                assert_string_equal(c.meta_url, "sqlite3:///var/lib/shoal/meta.db");
                assert_string_equal(c.cache_dir, "/var/cache/shoal");
        } else {
                assert_string_equal(c.meta_url, "sqlite3:///home/someone/.shoal/meta.db");
                assert_string_equal(c.cache_dir, "/home/someone/.shoal/cache");
        }
}

/* Every setting with a good value lands in its field. */
static void test_good_values(void **state)
{
        (void)state;
        const enum shoal_settings_for T = SHOAL_SETTINGS_TOOL, D = SHOAL_SETTINGS_DAEMON;
        struct shoal_node_config c;
        c = build_one(T, SHOAL_SET_BLOCK_SIZE, "1M");
        assert_int_equal(c.block_size, 1 << 20);
        c = build_one(T, SHOAL_SET_BLOCK_SIZE, "64"); /* KiB */
        assert_int_equal(c.block_size, 64 << 10);
        c = build_one(T, SHOAL_SET_CACHE_GROUP, "train-1_a.b");
        assert_string_equal(c.cache_group, "train-1_a.b");
        c = build_one(T, SHOAL_SET_META, "redis://127.0.0.1:6379/1");
        assert_string_equal(c.meta_url, "redis://127.0.0.1:6379/1");
        c = build_one(T, SHOAL_SET_CACHE_DIR, "/a:/b*");
        assert_string_equal(c.cache_dir, "/a:/b*");
        c = build_one(T, SHOAL_SET_CACHE_SIZE, "2048"); /* MiB */
        assert_int_equal(c.cache_size, 2048 * (int64_t)SHOAL_MiB);
        c = build_one(T, SHOAL_SET_CACHE_SIZE, "1G");
        assert_int_equal(c.cache_size, (int64_t)SHOAL_GiB);
        c = build_one(T, SHOAL_SET_CACHE_SIZE, "-1");
        assert_int_equal(c.cache_size, -1);
        c = build_one(SHOAL_SETTINGS_LIBRARY, SHOAL_SET_CACHE_SIZE, "0");
        assert_int_equal(c.cache_size, 0);
        c = build_one(T, SHOAL_SET_FREE_SPACE_RATIO, "0.25");
        assert_true(c.free_space_ratio == 0.25);
        c = build_one(T, SHOAL_SET_FREE_SPACE_RATIO, "0");
        assert_true(c.free_space_ratio == 0);
        c = build_one(D, SHOAL_SET_NO_SHARING, "1");
        assert_true(c.no_sharing);
        c = build_one(D, SHOAL_SET_GROUP_IP, "10.1.2.3");
        assert_string_equal(c.group_ip, "10.1.2.3");
        c = build_one(D, SHOAL_SET_GROUP_NETWORK, "eth0");
        assert_string_equal(c.group_network, "eth0");
        c = build_one(D, SHOAL_SET_GROUP_PORT, "65535");
        assert_int_equal(c.group_port, 65535);
        c = build_one(D, SHOAL_SET_GROUP_WEIGHT, "0");
        assert_int_equal(c.group_weight, 0);
        c = build_one(D, SHOAL_SET_GROUP_WEIGHT, "1000000");
        assert_int_equal(c.group_weight, 1000000);
        c = build_one(T, SHOAL_SET_USE_IORPC, "1");
        assert_true(c.use_iorpc);
        c = build_one(D, SHOAL_SET_IORPC_MODE, "splice");
        assert_int_equal(c.iorpc_mode, SHOAL_IORPC_SPLICE);
        c = build_one(D, SHOAL_SET_IORPC_MODE, "disable");
        assert_int_equal(c.iorpc_mode, SHOAL_IORPC_DISABLE);
        c = build_one(D, SHOAL_SET_CACHE_TRY_DIO, "yes");
        assert_true(c.cache_try_dio);
        c = build_one(T, SHOAL_SET_RDMA_NETWORK, "ib0:ib1");
        assert_string_equal(c.rdma_network, "ib0:ib1");
        c = build_one(T, SHOAL_SET_BUFFER_SIZE, "64"); /* MiB */
        assert_int_equal(c.buffer_size, 64 * SHOAL_MiB);
        c = build_one(T, SHOAL_SET_MAX_DOWNLOADS, "100000");
        assert_int_equal(c.max_downloads, 100000);
        c = build_one(T, SHOAL_SET_PREFETCH, "0");
        assert_int_equal(c.prefetch, 0);
        c = build_one(T, SHOAL_SET_PREFETCH, "64");
        assert_int_equal(c.prefetch, 64);
        c = build_one(T, SHOAL_SET_METRICS, "127.0.0.1:9567");
        assert_string_equal(c.metrics_addr, "127.0.0.1:9567");
        c = build_one(T, SHOAL_SET_METRICS, ":0");
        assert_string_equal(c.metrics_addr, ":0");
        c = build_one(T, SHOAL_SET_ENDPOINT, "http://127.0.0.1:4568");
        assert_string_equal(c.endpoint, "http://127.0.0.1:4568");
        c = build_one(D, SHOAL_SET_UPLOAD_PART_SIZE, "5M");
        assert_int_equal(c.upload_part_size, 5 * SHOAL_MiB);
        c = build_one(D, SHOAL_SET_UPLOAD_PART_SIZE, "5G");
        assert_int_equal(c.upload_part_size, 5 * SHOAL_GiB);
        c = build_one(D, SHOAL_SET_UPLOAD_PART_SIZE, "16"); /* MiB */
        assert_int_equal(c.upload_part_size, 16 * SHOAL_MiB);

        struct shoal_settings s;
        char err[256];
        shoal_settings_init(&s, SHOAL_SETTINGS_DAEMON);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_LOG_FILE, "/tmp/x.log", err, sizeof(err)),
                         0);
        assert_string_equal(s.val[SHOAL_SET_LOG_FILE], "/tmp/x.log");
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_LOG_LEVEL, "debug", err, sizeof(err)), 0);
        assert_int_equal(shoal_settings_log_level(&s), SHOAL_LOG_DEBUG);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_LOG_LEVEL, "0", err, sizeof(err)), 0);
        assert_int_equal(shoal_settings_log_level(&s), SHOAL_LOG_ERROR);
        /* both RDMA settings together */
        shoal_settings_init(&s, SHOAL_SETTINGS_TOOL);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_RDMA_NETWORK, "lo", err, sizeof(err)), 0);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_RDMA_PROVIDER, "tcp", err, sizeof(err)),
                         0);
        c = build(&s);
        assert_string_equal(c.rdma_provider, "tcp");
        /* NULL restores the default */
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_RDMA_PROVIDER, NULL, err, sizeof(err)),
                         0);
        c = build(&s);
        assert_null(c.rdma_provider);
        /* a library client stays a consumer whatever it is given */
        shoal_settings_init(&s, SHOAL_SETTINGS_LIBRARY);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_GROUP_WEIGHT, "50", err, sizeof(err)), 0);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_NO_SHARING, "0", err, sizeof(err)), 0);
        c = build(&s);
        assert_int_equal(c.group_weight, 0);
        assert_true(c.no_sharing);
}

/* Switches take the usual spellings, either case. */
static void test_switches(void **state)
{
        (void)state;
        static const char *const on[] = {"1", "true", "yes", "on", "TRUE", "Yes", "ON"};
        static const char *const off[] = {"0", "false", "no", "off", "FALSE", "No", "Off"};
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(on); i++) {
                assert_true(
                        build_one(SHOAL_SETTINGS_LIBRARY, SHOAL_SET_USE_IORPC, on[i]).use_iorpc);
                assert_false(
                        build_one(SHOAL_SETTINGS_LIBRARY, SHOAL_SET_USE_IORPC, off[i]).use_iorpc);
        }
}

/* SET's bad value: -EINVAL, the command line's message (WANT, with "--NAME"), the library's
 * (the same without the dashes), one line, and the setting left as it was. */
static void expect_bad(enum shoal_setting id, const char *value, const char *want)
{
        static const enum shoal_settings_for who[] = {SHOAL_SETTINGS_TOOL, SHOAL_SETTINGS_LIBRARY};
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(who); i++) {
                struct shoal_settings s;
                char err[512] = "", expect[512];
                shoal_settings_init(&s, who[i]);
                int rc = shoal_settings_set(&s, id, value, err, sizeof(err));
                if (rc != -EINVAL)
                        fail_msg("%s %s: %d", shoal_setting_name(id), value, rc);
                if (who[i] == SHOAL_SETTINGS_TOOL) {
                        shoal_strlcpy(expect, want, sizeof(expect));
                } else {
                        /* the library spells names without the dashes */
                        const char *dash = strstr(want, "--");
                        assert_non_null(dash);
                        snprintf(expect, sizeof(expect), "%.*s%s", (int)(dash - want), want,
                                 dash + 2);
                }
                if (strcmp(err, expect))
                        fail_msg("%s %s: \"%s\", want \"%s\"", shoal_setting_name(id), value, err,
                                 expect);
                assert_null(s.val[id]);
                assert_false(s.secret_given);
        }
}

static void test_bad_values(void **state)
{
        (void)state;
        expect_bad(SHOAL_SET_BLOCK_SIZE, "big",
                   "invalid --block-size big: expected a size like 100, 4M or 1G");
        expect_bad(SHOAL_SET_BLOCK_SIZE, "3000",
                   "invalid --block-size 3000: must be a power of two from 64K to 64M");
        expect_bad(SHOAL_SET_BLOCK_SIZE, "32K",
                   "invalid --block-size 32K: must be a power of two from 64K to 64M");
        expect_bad(SHOAL_SET_BLOCK_SIZE, "128M",
                   "invalid --block-size 128M: must be a power of two from 64K to 64M");
        expect_bad(SHOAL_SET_BLOCK_SIZE, "-1",
                   "invalid --block-size -1: expected a size like 100, 4M or 1G");
        expect_bad(SHOAL_SET_CACHE_GROUP, "bad name!",
                   "invalid --cache-group bad name!: use 1-64 letters, digits, '-', '_' or '.'");
        char long_group[70];
        memset(long_group, 'g', 65);
        long_group[65] = '\0';
        char want[256];
        snprintf(want, sizeof(want),
                 "invalid --cache-group %s: use 1-64 letters, digits, '-', '_' or '.'", long_group);
        expect_bad(SHOAL_SET_CACHE_GROUP, long_group, want);
        expect_bad(SHOAL_SET_META, "", "invalid --meta: empty");
        expect_bad(SHOAL_SET_CACHE_DIR, "", "invalid --cache-dir: empty");
        expect_bad(SHOAL_SET_CACHE_SIZE, "lots",
                   "invalid --cache-size lots: expected a size like 100, 4M or 1G (or -1)");
        expect_bad(SHOAL_SET_CACHE_SIZE, "-2",
                   "invalid --cache-size -2: expected a size like 100, 4M or 1G (or -1)");
        expect_bad(SHOAL_SET_FREE_SPACE_RATIO, "0.95",
                   "invalid --free-space-ratio 0.95: expected a number from 0 to 0.9");
        expect_bad(SHOAL_SET_FREE_SPACE_RATIO, "-0.1",
                   "invalid --free-space-ratio -0.1: expected a number from 0 to 0.9");
        expect_bad(SHOAL_SET_FREE_SPACE_RATIO, "nan",
                   "invalid --free-space-ratio nan: expected a number from 0 to 0.9");
        expect_bad(SHOAL_SET_FREE_SPACE_RATIO, "0.1x",
                   "invalid --free-space-ratio 0.1x: expected a number from 0 to 0.9");
        expect_bad(SHOAL_SET_NO_SHARING, "maybe",
                   "invalid --no-sharing maybe: expected 1, true, yes, 0, false or no");
        expect_bad(SHOAL_SET_GROUP_IP, "0.0.0.0.0",
                   "invalid --group-ip 0.0.0.0.0: expected an IPv4 address");
        expect_bad(SHOAL_SET_GROUP_IP, "::1", "invalid --group-ip ::1: expected an IPv4 address");
        expect_bad(SHOAL_SET_GROUP_NETWORK, "", "invalid --group-network: empty");
        expect_bad(SHOAL_SET_GROUP_PORT, "65536",
                   "invalid --group-port 65536: expected a whole number from 0 to 65535");
        expect_bad(SHOAL_SET_GROUP_PORT, "-1",
                   "invalid --group-port -1: expected a whole number from 0 to 65535");
        expect_bad(SHOAL_SET_GROUP_WEIGHT, "1000001",
                   "invalid --group-weight 1000001: expected a whole number from 0 to 1000000");
        expect_bad(SHOAL_SET_GROUP_SECRET_FILE, "/nonexistent/secret",
                   "cannot read --group-secret-file /nonexistent/secret: No such file or "
                   "directory");
        expect_bad(SHOAL_SET_USE_IORPC, "maybe",
                   "invalid --use-iorpc maybe: expected 1, true, yes, 0, false or no");
        expect_bad(SHOAL_SET_IORPC_MODE, "", "invalid --iorpc-mode: empty");
        expect_bad(SHOAL_SET_CACHE_TRY_DIO, "2",
                   "invalid --cache-try-dio 2: expected 1, true, yes, 0, false or no");
        expect_bad(SHOAL_SET_RDMA_NETWORK, "", "invalid --rdma-network: empty");
        expect_bad(SHOAL_SET_RDMA_PROVIDER, "", "invalid --rdma-provider: empty");
        expect_bad(SHOAL_SET_BUFFER_SIZE, "-1",
                   "invalid --buffer-size -1: expected a size like 100, 4M or 1G");
        expect_bad(SHOAL_SET_BUFFER_SIZE, "1Q",
                   "invalid --buffer-size 1Q: expected a size like 100, 4M or 1G");
        expect_bad(SHOAL_SET_MAX_DOWNLOADS, "100001",
                   "invalid --max-downloads 100001: expected a whole number from 0 to 100000");
        expect_bad(SHOAL_SET_PREFETCH, "65",
                   "invalid --prefetch 65: expected a whole number from 0 to 64");
        expect_bad(SHOAL_SET_PREFETCH, "two",
                   "invalid --prefetch two: expected a whole number from 0 to 64");
        expect_bad(SHOAL_SET_METRICS, "nowhere",
                   "invalid --metrics nowhere: expected HOST:PORT (e.g. 127.0.0.1:9567)");
        expect_bad(SHOAL_SET_METRICS, "host:99999",
                   "invalid --metrics host:99999: expected HOST:PORT (e.g. 127.0.0.1:9567)");
        expect_bad(SHOAL_SET_ENDPOINT, "", "invalid --endpoint: empty");
        expect_bad(SHOAL_SET_UPLOAD_PART_SIZE, "4M",
                   "invalid --upload-part-size 4M: expected 5M to 5G (S3's limits on a part)");
        expect_bad(SHOAL_SET_UPLOAD_PART_SIZE, "6G",
                   "invalid --upload-part-size 6G: expected 5M to 5G (S3's limits on a part)");
        expect_bad(SHOAL_SET_UPLOAD_PART_SIZE, "x",
                   "invalid --upload-part-size x: expected 5M to 5G (S3's limits on a part)");
        expect_bad(SHOAL_SET_LOG_LEVEL, "loud",
                   "invalid --log-level loud: expected error, warn, info, debug or trace");
        expect_bad(SHOAL_SET_LOG_FILE, "", "invalid --log-file: empty");

        /* a bad value leaves the good one that was there */
        struct shoal_settings s;
        char err[256];
        shoal_settings_init(&s, SHOAL_SETTINGS_TOOL);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_PREFETCH, "4", err, sizeof(err)), 0);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_PREFETCH, "x", err, sizeof(err)),
                         -EINVAL);
        assert_int_equal(build(&s).prefetch, 4);
        /* no such setting */
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_NONE, "1", err, sizeof(err)), -EINVAL);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET__COUNT, "1", err, sizeof(err)), -EINVAL);
}

/* An unknown --iorpc-mode is what the seed does with it: a warning and dio. */
static void test_iorpc_mode_falls_back(void **state)
{
        (void)state;
        assert_int_equal(build_one(SHOAL_SETTINGS_DAEMON, SHOAL_SET_IORPC_MODE, "turbo").iorpc_mode,
                         SHOAL_IORPC_DIO);
}

/* What only the combination shows: both spellings. */
static void expect_build_fails(enum shoal_settings_for who, const char *storage,
                               enum shoal_setting a, const char *va, enum shoal_setting b,
                               const char *vb, const char *want)
{
        struct shoal_settings s;
        struct shoal_node_config c;
        char err[512] = "";
        shoal_settings_init(&s, who);
        if (a)
                assert_int_equal(shoal_settings_set(&s, a, va, err, sizeof(err)), 0);
        if (b)
                assert_int_equal(shoal_settings_set(&s, b, vb, err, sizeof(err)), 0);
        assert_int_equal(shoal_settings_build(&s, storage, &no_env, &c, err, sizeof(err)), -EINVAL);
        if (strcmp(err, want))
                fail_msg("\"%s\", want \"%s\"", err, want);
}

static void test_combinations(void **state)
{
        (void)state;
        const enum shoal_settings_for T = SHOAL_SETTINGS_TOOL, L = SHOAL_SETTINGS_LIBRARY;
        expect_build_fails(T, "file:///d", SHOAL_SET_RDMA_PROVIDER, "tcp", 0, NULL,
                           "--rdma-provider needs --rdma-network IF1[:IF2...]");
        expect_build_fails(L, "file:///d", SHOAL_SET_RDMA_PROVIDER, "tcp", 0, NULL,
                           "rdma-provider needs rdma-network IF1[:IF2...]");
        expect_build_fails(SHOAL_SETTINGS_DAEMON, "file:///d", SHOAL_SET_GROUP_IP, "127.0.0.1",
                           SHOAL_SET_GROUP_NETWORK, "lo",
                           "give --group-ip or --group-network, not both");
        expect_build_fails(T, NULL, 0, NULL, 0, NULL,
                           "missing STORAGE (e.g. file:///data or s3://bucket)");
        expect_build_fails(T, "", 0, NULL, 0, NULL,
                           "missing STORAGE (e.g. file:///data or s3://bucket)");
        expect_build_fails(L, NULL, 0, NULL, 0, NULL,
                           "missing storage (e.g. file:///data or s3://bucket)");
}

static char tmpdir[] = "/tmp/shoal-settings.XXXXXX";

static const char *write_file(const char *name, const void *data, size_t len)
{
        static char path[256];
        snprintf(path, sizeof(path), "%s/%s", tmpdir, name);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(data, 1, len, f), len);
        fclose(f);
        return path;
}

/* The secret file as [S1, S3] read it: every byte counts, one line ending at the end does not. */
static void test_secret_file(void **state)
{
        (void)state;
        assert_non_null(mkdtemp(tmpdir));
        struct shoal_settings s;
        char err[512];
        shoal_settings_init(&s, SHOAL_SETTINGS_TOOL);
        static const char nul_secret[] = "0123456789\0abcdef"; /* 17 bytes with a NUL */
        const char *p = write_file("nul", nul_secret, sizeof(nul_secret) - 1);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_GROUP_SECRET_FILE, p, err, sizeof(err)),
                         0);
        struct shoal_node_config c = build(&s);
        assert_int_equal(c.group_secret.len, 17);
        assert_memory_equal(c.group_secret.bytes, nul_secret, 17);
        p = write_file("crlf", "0123456789abcdef\r\n", 18);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_GROUP_SECRET_FILE, p, err, sizeof(err)),
                         0);
        c = build(&s);
        assert_int_equal(c.group_secret.len, 16);
        assert_memory_equal(c.group_secret.bytes, "0123456789abcdef", 16);
        p = write_file("lf2", "0123456789abcdef\n\n", 18); /* only one line ending goes */
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_GROUP_SECRET_FILE, p, err, sizeof(err)),
                         0);
        assert_int_equal(build(&s).group_secret.len, 17);

        /* too short (after the line ending), too long: both spellings, the secret kept */
        char want[512];
        p = write_file("short", "0123456789abcde\n", 16);
        assert_int_equal(shoal_settings_set(&s, SHOAL_SET_GROUP_SECRET_FILE, p, err, sizeof(err)),
                         -EINVAL);
        snprintf(want, sizeof(want),
                 "--group-secret-file %s: the secret must be at least 16 bytes (it has 15)", p);
        assert_string_equal(err, want);
        assert_int_equal(build(&s).group_secret.len, 17);
        static char big[SHOAL_SECRET_MAX + 1];
        memset(big, 's', sizeof(big));
        p = write_file("big", big, sizeof(big));
        struct shoal_settings l;
        shoal_settings_init(&l, SHOAL_SETTINGS_LIBRARY);
        assert_int_equal(shoal_settings_set(&l, SHOAL_SET_GROUP_SECRET_FILE, p, err, sizeof(err)),
                         -EINVAL);
        snprintf(want, sizeof(want), "group-secret-file %s: the secret must be at most 4096 bytes",
                 p);
        assert_string_equal(err, want);
        assert_false(l.secret_given);
        p = write_file("max", big, SHOAL_SECRET_MAX);
        assert_int_equal(shoal_settings_set(&l, SHOAL_SET_GROUP_SECRET_FILE, p, err, sizeof(err)),
                         0);
        assert_int_equal(build(&l).group_secret.len, SHOAL_SECRET_MAX);
        /* a folder is no secret file */
        assert_int_equal(
                shoal_settings_set(&l, SHOAL_SET_GROUP_SECRET_FILE, tmpdir, err, sizeof(err)),
                -EINVAL);
        assert_non_null(strstr(err, "cannot read group-secret-file"));
        /* NULL removes the secret */
        assert_int_equal(
                shoal_settings_set(&l, SHOAL_SET_GROUP_SECRET_FILE, NULL, err, sizeof(err)), 0);
        c = build(&l);
        assert_false(shoal_secret_set(&c.group_secret));
        shoal_settings_clear(&s);
        shoal_settings_clear(&l);
        for (size_t i = 0; i < sizeof(s.secret); i++)
                assert_int_equal(s.secret[i], 0); /* wiped */
        static const char *const names[] = {"nul", "crlf", "lf2", "short", "big", "max"};
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(names); i++) {
                char path[256];
                snprintf(path, sizeof(path), "%s/%s", tmpdir, names[i]);
                unlink(path);
        }
        rmdir(tmpdir);
}

/* The library's secret bytes, and SHOAL_GROUP_SECRET when nothing else gave one. */
static void test_secret_sources(void **state)
{
        (void)state;
        struct shoal_settings s;
        struct shoal_node_config c;
        char err[256];
        shoal_settings_init(&s, SHOAL_SETTINGS_LIBRARY);
        assert_int_equal(shoal_settings_set_secret(&s, "short", 5, err, sizeof(err)), -EINVAL);
        assert_string_equal(err, "the group secret must be 16 to 4096 bytes, not 5");
        assert_false(s.secret_given);
        struct shoal_env env = {.group_secret = "from-the-environment", .group_secret_len = 20};
        assert_int_equal(shoal_settings_build(&s, "file:///d", &env, &c, err, sizeof(err)), 0);
        assert_int_equal(c.group_secret.len, 20);
        assert_memory_equal(c.group_secret.bytes, "from-the-environment", 20);
        /* the one given wins */
        assert_int_equal(shoal_settings_set_secret(&s, "given\0given\0given", 17, err, sizeof(err)),
                         0);
        assert_int_equal(shoal_settings_build(&s, "file:///d", &env, &c, err, sizeof(err)), 0);
        assert_int_equal(c.group_secret.len, 17);
        assert_memory_equal(c.group_secret.bytes, "given\0given\0given", 17);
        /* removed: the environment's again, then none */
        assert_int_equal(shoal_settings_set_secret(&s, NULL, 0, err, sizeof(err)), 0);
        assert_int_equal(shoal_settings_build(&s, "file:///d", &env, &c, err, sizeof(err)), 0);
        assert_int_equal(c.group_secret.len, 20);
        c = build(&s);
        assert_false(shoal_secret_set(&c.group_secret));
        assert_null(c.group_secret.bytes);
}

int main(void)
{
        shoal_log_set_level(SHOAL_LOG_ERROR); /* the iorpc-mode warning is expected */
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_names),          cmocka_unit_test(test_defaults),
                cmocka_unit_test(test_good_values),    cmocka_unit_test(test_switches),
                cmocka_unit_test(test_bad_values),     cmocka_unit_test(test_iorpc_mode_falls_back),
                cmocka_unit_test(test_combinations),   cmocka_unit_test(test_secret_file),
                cmocka_unit_test(test_secret_sources),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
