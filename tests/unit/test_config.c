/* The configuration layer: every environment variable parsed once, a bad value an error naming
 * it (never a silent default, never an exit), every variable documented in docs/operations.md;
 * and durations printed the way they are read (never "0s" below a second). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/util.h"

/* A fake environment: NAME=VALUE pairs, NULL-terminated. */
static const char *const *fake;

static const char *fake_get(const char *name)
{
        for (size_t i = 0; fake && fake[i]; i += 2)
                if (!strcmp(fake[i], name))
                        return fake[i + 1];
        return NULL;
}

static int parse(const char *const *vars, struct shoal_env *env, char *err, size_t errlen)
{
        fake = vars;
        err[0] = '\0';
        return shoal_config_parse(env, fake_get, err, errlen);
}

static void test_unset_is_zero(void **state)
{
        (void)state;
        struct shoal_env env;
        char err[256];
        const char *const none[] = {NULL};
        assert_int_equal(parse(none, &env, err, sizeof(err)), 0);
        assert_int_equal(env.remote_timeout_ns, 0);
        assert_int_equal(env.rdma_retry_ns, 0);
        assert_null(env.group_secret);
        assert_null(env.aws_region);
        /* an empty value is unset, as in a shell's VAR= */
        const char *const empty[] = {"SHOAL_REMOTE_TIMEOUT", "", "SHOAL_GROUP_SECRET", "", NULL};
        assert_int_equal(parse(empty, &env, err, sizeof(err)), 0);
        assert_int_equal(env.remote_timeout_ns, 0);
        assert_null(env.group_secret);
}

static void test_good_values(void **state)
{
        (void)state;
        struct shoal_env env;
        char err[256];
        const char *const good[] = {"SHOAL_REMOTE_TIMEOUT",
                                    "1500ms",
                                    "SHOAL_AVOID_DURATION",
                                    "2s",
                                    "IORPC_RDMA_RETRY_DURATION",
                                    "30s",
                                    "SHOAL_IORPC_SCALE_PERIOD",
                                    "100ms",
                                    "SHOAL_STORE_DEADLINE",
                                    "1h30m",
                                    "SHOAL_STORE_ATTEMPTS",
                                    "7",
                                    "SHOAL_GROUP_SECRET",
                                    "0123456789abcdef",
                                    "AWS_DEFAULT_REGION",
                                    "eu-west-1",
                                    "AWS_REGION",
                                    "us-west-2",
                                    "FI_PROVIDER",
                                    "tcp",
                                    "SHOAL_IORPC_GROW_QPS",
                                    "200",
                                    "SHOAL_RDMA_GROW_MIBPS",
                                    "64",
                                    NULL};
        assert_int_equal(parse(good, &env, err, sizeof(err)), 0);
        assert_int_equal(env.remote_timeout_ns, 1500000000ULL);
        assert_int_equal(env.avoid_ns, 2000000000ULL);
        assert_int_equal(env.rdma_retry_ns, 30000000000ULL);
        assert_int_equal(env.iorpc_scale_period_ns, 100000000ULL);
        assert_int_equal(env.store_deadline_ns, 5400000000000ULL);
        assert_int_equal(env.store_attempts, 7);
        assert_string_equal(env.group_secret, "0123456789abcdef");
        assert_int_equal(env.group_secret_len, 16);
        assert_string_equal(env.aws_region, "us-west-2"); /* AWS_REGION wins */
        assert_string_equal(env.fi_provider, "tcp");
        assert_int_equal(env.iorpc_grow_qps, 200);
        assert_int_equal(env.rdma_grow_mibps, 64);
        assert_int_equal(env.rdma_grow_qps, 0); /* not set: the seeds' threshold */
}

/* Each bad value: -EINVAL and one line naming the variable; never a default. */
static void expect_bad(const char *name, const char *value, const char *want_in_err)
{
        struct shoal_env env;
        char err[256];
        const char *const vars[] = {name, value, NULL};
        if (parse(vars, &env, err, sizeof(err)) != -EINVAL)
                fail_msg("%s=%s was accepted", name, value);
        if (!strstr(err, name) || !strstr(err, want_in_err) || strchr(err, '\n'))
                fail_msg("%s=%s: error \"%s\" lacks \"%s\"", name, value, err, want_in_err);
}

static void test_bad_values(void **state)
{
        (void)state;
        /* Each duration variable: a typo, zero, a negative, a unit that does not exist. */
        static const char *const durations[] = {
                "SHOAL_GROUP_HEARTBEAT", "SHOAL_GROUP_TIMEOUT",      "SHOAL_REMOTE_TIMEOUT",
                "SHOAL_AVOID_DURATION",  "SHOAL_IORPC_SCALE_PERIOD", "IORPC_RDMA_RETRY_DURATION",
                "SHOAL_RDMA_HEARTBEAT",  "SHOAL_STORE_DEADLINE"};
        for (size_t i = 0; i < SHOAL_ARRAY_SIZE(durations); i++) {
                expect_bad(durations[i], "5 minutes", "positive duration");
                expect_bad(durations[i], "0", "positive duration");
                expect_bad(durations[i], "-1s", "positive duration");
                expect_bad(durations[i], "10x", "positive duration");
        }
        expect_bad("SHOAL_STORE_ATTEMPTS", "0", "1 to 1000");
        expect_bad("SHOAL_STORE_ATTEMPTS", "1001", "1 to 1000");
        expect_bad("SHOAL_S3_LIST_MAX_KEYS", "many", "1 to 1000");
        expect_bad("SHOAL_IORPC_GROW_QPS", "0", "1 to 100000000");
        expect_bad("SHOAL_RDMA_GROW_QPS", "fast", "1 to 100000000");
        expect_bad("SHOAL_IORPC_GROW_MIBPS", "1048577", "1 to 1048576");
        expect_bad("SHOAL_RDMA_GROW_MIBPS", "-5", "1 to 1048576");
        expect_bad("SHOAL_GROUP_SECRET", "short", "16 to 4096 bytes");
        expect_bad("SHOAL_S3_CA_FILE", "/nonexistent/ca.pem", "readable file");
        expect_bad("SHOAL_S3_CA_FILE", "/", "readable file");
        expect_bad("AWS_REGION", "eu west", "region");
        expect_bad("AWS_DEFAULT_REGION", "a/b", "region");
        /* a secret is never echoed */
        struct shoal_env env;
        char err[256];
        const char *const sec[] = {"SHOAL_GROUP_SECRET", "hunter2", NULL};
        assert_int_equal(parse(sec, &env, err, sizeof(err)), -EINVAL);
        assert_null(strstr(err, "hunter2"));
}

/* Every variable of the table has a row in docs/operations.md's environment table. */
static void test_documented(void **state)
{
        (void)state;
        char path[4096];
        snprintf(path, sizeof(path), "%s", __FILE__);
        char *slash = strrchr(path, '/');
        assert_non_null(slash);
        snprintf(slash, sizeof(path) - (size_t)(slash - path), "/../../docs/operations.md");
        FILE *f = fopen(path, "r");
        if (!f)
                fail_msg("cannot open %s", path);
        static char doc[1 << 20];
        size_t n = fread(doc, 1, sizeof(doc) - 1, f);
        fclose(f);
        doc[n] = '\0';
        size_t count = 0;
        for (const char *name; (name = shoal_config_var_name(count)); count++) {
                char row[96];
                snprintf(row, sizeof(row), "| `%s` |", name);
                if (!strstr(doc, row))
                        fail_msg("docs/operations.md has no row \"%s\"", row);
        }
        assert_true(count >= 19);
}

static void expect_dur(uint64_t ns, const char *want)
{
        char out[32];
        shoal_format_duration(ns, out, sizeof(out));
        if (strcmp(out, want))
                fail_msg("format_duration(%llu) = \"%s\", want \"%s\"", (unsigned long long)ns, out,
                         want);
        uint64_t back;
        assert_int_equal(shoal_parse_duration(out, &back), 0);
}

static void test_format_duration(void **state)
{
        (void)state;
        expect_dur(0, "0ns");
        expect_dur(250, "250ns");
        expect_dur(250000, "250us");
        expect_dur(1500000, "1.5ms");
        expect_dur(200000000, "200ms");
        expect_dur(999000000, "999ms");
        expect_dur(1000000000, "1s");
        expect_dur(1500000000, "1.5s");
        expect_dur(30000000000ULL, "30s");
        expect_dur(300000000000ULL, "5m");
        expect_dur(123250000000ULL, "2m3.25s");
        expect_dur(5400000000000ULL, "1h30m");
        expect_dur(3600000000000ULL, "1h");
        char tiny[4];
        shoal_format_duration(5400000000000ULL, tiny, sizeof(tiny));
        assert_true(strlen(tiny) < sizeof(tiny));
}

/* One precedence rule: a flag (or a caller's field) > the environment > the default. */
static void test_pick(void **state)
{
        (void)state;
        assert_int_equal(shoal_config_pick(5, 7, 9), 5);
        assert_int_equal(shoal_config_pick(0, 7, 9), 7);
        assert_int_equal(shoal_config_pick(0, 0, 9), 9);
        assert_int_equal(shoal_config_pick(5, 0, 9), 5);
}

/* libfabric's FI_MR_CACHE_MAX_COUNT keeps an empty value (libfabric reads it as 0); shoal's own
 * variables take empty as unset, SHOAL_METRICS_HOSTS included. */
static void test_libfabric_empty(void **state)
{
        (void)state;
        struct shoal_env env;
        char err[256];
        const char *const vars[] = {"FI_MR_CACHE_MAX_COUNT", "", "SHOAL_METRICS_HOSTS", "", NULL};
        assert_int_equal(parse(vars, &env, err, sizeof(err)), 0);
        assert_non_null(env.fi_mr_cache_max_count);
        assert_string_equal(env.fi_mr_cache_max_count, "");
        assert_null(env.metrics_hosts);
        const char *const hosts[] = {"SHOAL_METRICS_HOSTS", "a.example, b.example", NULL};
        assert_int_equal(parse(hosts, &env, err, sizeof(err)), 0);
        assert_string_equal(env.metrics_hosts, "a.example, b.example");
        assert_null(env.fi_mr_cache_max_count);
}

/* A bad variable never ends the process (a library's host must survive it): the lazy load
 * logs it and reads every variable as unset, the library's load returns it, and a corrected
 * environment loads on the next try. */
static void test_bad_environment_never_exits(void **state)
{
        (void)state;
        setenv("IORPC_RDMA_RETRY_DURATION", "5 minutes", 1);
        setenv("SHOAL_STORE_ATTEMPTS", "3", 1);
        const struct shoal_env *env = shoal_config_env();
        assert_int_equal(env->rdma_retry_ns, 0);
        assert_int_equal(env->store_attempts, 0); /* all or nothing */
        char err[256] = "";
        assert_int_equal(shoal_config_ensure(err, sizeof(err)), -EINVAL);
        assert_non_null(strstr(err, "invalid IORPC_RDMA_RETRY_DURATION=5 minutes"));
        assert_int_equal(shoal_config_ensure(err, sizeof(err)), -EINVAL);
        setenv("IORPC_RDMA_RETRY_DURATION", "30s", 1);
        assert_int_equal(shoal_config_ensure(err, sizeof(err)), 0);
        env = shoal_config_env();
        assert_int_equal(env->rdma_retry_ns, 30000000000ULL);
        assert_int_equal(env->store_attempts, 3);
        /* loaded: a later bad value is not read again (threads may be reading the table) */
        setenv("IORPC_RDMA_RETRY_DURATION", "soon", 1);
        assert_int_equal(shoal_config_ensure(err, sizeof(err)), 0);
        assert_int_equal(shoal_config_env()->rdma_retry_ns, 30000000000ULL);
        unsetenv("IORPC_RDMA_RETRY_DURATION");
        unsetenv("SHOAL_STORE_ATTEMPTS");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_unset_is_zero),
                cmocka_unit_test(test_good_values),
                cmocka_unit_test(test_bad_values),
                cmocka_unit_test(test_documented),
                cmocka_unit_test(test_format_duration),
                cmocka_unit_test(test_pick),
                cmocka_unit_test(test_libfabric_empty),
                cmocka_unit_test(test_bad_environment_never_exits),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
