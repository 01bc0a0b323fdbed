/* shoal_node_start's typed errors: everything the user must fix is -EINVAL (the command line's
 * exit 2, libshoal's ValueError), every failure at run time another errno (exit 1, OSError), and
 * the message says which setting. A failed start leaves *OUT NULL and nothing running (the
 * sanitizers' leak check sees the rest). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "node/node.h"
#include "common/block.h"
#include "common/log.h"
#include "server/server.h"

static char tmpdir[] = "/tmp/shoal-test-node.XXXXXX";
static char storage[128], other_storage[128], meta[160], cache_dir[128];

static int setup(void **state)
{
        (void)state;
        shoal_log_set_level(SHOAL_LOG_ERROR);
        if (!mkdtemp(tmpdir))
                return -1;
        snprintf(storage, sizeof(storage), "file://%s", tmpdir);
        snprintf(other_storage, sizeof(other_storage), "file://%s/other", tmpdir);
        snprintf(meta, sizeof(meta), "sqlite3://%s/meta.db", tmpdir);
        snprintf(cache_dir, sizeof(cache_dir), "%s/cache", tmpdir);
        char path[160];
        snprintf(path, sizeof(path), "%s/other", tmpdir);
        return mkdir(path, 0700);
}

static int teardown(void **state)
{
        (void)state;
        char cmd[200];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmpdir);
        return system(cmd) == 0 ? 0 : -1;
}

/* A client of the store with no disk cache, no group and no server: the smallest node. */
static struct shoal_node_config base(void)
{
        return (struct shoal_node_config){
                .storage = storage,
                .block_size = SHOAL_BLOCK_SIZE_DEFAULT,
                .meta_url = meta,
                .cache_dir = cache_dir,
                .free_space_ratio = 0.1,
                .iorpc_mode = SHOAL_IORPC_DIO,
                .buffer_size = 8 * (uint64_t)SHOAL_BLOCK_SIZE_DEFAULT,
                .max_downloads = 4,
        };
}

/* Starts CFG, expecting RC and (for a failure) WANT in the message and nothing started. */
static void expect(const struct shoal_node_config *cfg, int rc, const char *want)
{
        struct shoal_node *n = (struct shoal_node *)1;
        char err[1024] = "";
        int got = shoal_node_start(cfg, &n, err, sizeof(err));
        if (got != rc)
                fail_msg("expected %d, got %d (%s)", rc, got, err);
        if (rc == 0) {
                assert_non_null(n);
                shoal_node_stop(n);
                return;
        }
        assert_null(n);
        assert_null(strchr(err, '\n'));
        if (!strstr(err, want))
                fail_msg("\"%s\" not in \"%s\"", want, err);
}

static void test_starts(void **state)
{
        (void)state;
        struct shoal_node_config cfg = base();
        expect(&cfg, 0, NULL);
        cfg.cache_group = "g";
        expect(&cfg, 0, NULL); /* a consumer of the group */
}

static void test_bad_settings_are_einval(void **state)
{
        (void)state;
        struct shoal_node_config cfg = base();
        cfg.storage = "bogus://x";
        expect(&cfg, -EINVAL, "bogus://x: unknown scheme");

        cfg = base();
        cfg.block_size = 3000;
        expect(&cfg, -EINVAL, "block size 3000");

        cfg = base();
        cfg.group_ip = "127.0.0.1";
        cfg.group_network = "lo";
        expect(&cfg, -EINVAL, "not both");

        cfg = base();
        cfg.group_network = "no-such-if0";
        expect(&cfg, -EINVAL, "--group-network no-such-if0: no such interface");

        cfg = base();
        cfg.rdma_network = "a:b:c:d:e:f:g:h:i";
        expect(&cfg, -EINVAL, "invalid --rdma-network");

        /* [S1]: a member that would listen beyond loopback without a secret */
        cfg = base();
        cfg.cache_group = "g";
        cfg.serve = true;
        cfg.group_ip = "0.0.0.0";
        expect(&cfg, -EINVAL, "refusing to listen on 0.0.0.0 without a group secret");

        cfg = base();
        cfg.group_secret = (struct shoal_secret){.bytes = (const uint8_t *)"short", .len = 5};
        expect(&cfg, -EINVAL, "the group secret must be at least");

        cfg = base();
        cfg.cache_group = "g";
        cfg.meta_url = "nosuch://x";
        expect(&cfg, -EINVAL, "unsupported meta URL");

        cfg = base();
        cfg.upload_part_size = 1;
        expect(&cfg, -EINVAL, "upload part size");
}

/* [D1]: a volume that differs from the live group's is the user's to fix. (The group is its
 * sharing members: a consumer writes no member record, so the first node serves.) */
static void test_volume_mismatch_is_einval(void **state)
{
        (void)state;
        struct shoal_node_config cfg = base();
        cfg.cache_group = "d1";
        cfg.serve = true;
        cfg.group_ip = "127.0.0.1";
        struct shoal_node *a;
        char err[1024];
        if (shoal_node_start(&cfg, &a, err, sizeof(err)))
                fail_msg("start: %s", err);
        cfg.storage = other_storage;
        expect(&cfg, -EINVAL, "volume mismatch"); /* a second member */
        cfg.serve = false;
        cfg.group_ip = NULL;
        expect(&cfg, -EINVAL, "volume mismatch"); /* a consumer */
        shoal_node_stop(a);
}

static void test_runtime_failures_are_not_einval(void **state)
{
        (void)state;
        char missing[160];
        snprintf(missing, sizeof(missing), "file://%s/missing", tmpdir);
        struct shoal_node_config cfg = base();
        cfg.storage = missing;
        expect(&cfg, -ENOENT, "cannot open");

        cfg = base();
        cfg.cache_size = 1 << 30;
        char glob[160];
        snprintf(glob, sizeof(glob), "%s/nothing*", tmpdir);
        cfg.cache_dir = glob;
        expect(&cfg, -ENOENT, "no dir matched");

        cfg = base();
        cfg.cache_group = "g";
        cfg.meta_url = "sqlite3:///proc/no/such/dir/m.db";
        struct shoal_node *n;
        char err[1024] = "";
        int rc = shoal_node_start(&cfg, &n, err, sizeof(err));
        assert_true(rc < 0 && rc != -EINVAL);
        assert_non_null(strstr(err, "m.db"));

        /* a port in use */
        cfg = base();
        cfg.cache_group = "ports";
        cfg.serve = true;
        cfg.metrics_addr = "127.0.0.1:0";
        struct shoal_node *a;
        if (shoal_node_start(&cfg, &a, err, sizeof(err)))
                fail_msg("start: %s", err);
        char tcp[64], iorpc[64];
        shoal_server_addrs(a->server, tcp, iorpc);
        cfg.group_port = (uint16_t)atoi(strrchr(tcp, ':') + 1);
        rc = shoal_node_start(&cfg, &n, err, sizeof(err));
        shoal_node_stop(a);
        if (rc >= 0 || rc == -EINVAL)
                fail_msg("a taken port: %d (%s)", rc, err);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_starts),
                cmocka_unit_test(test_bad_settings_are_einval),
                cmocka_unit_test(test_volume_mismatch_is_einval),
                cmocka_unit_test(test_runtime_failures_are_not_einval),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
