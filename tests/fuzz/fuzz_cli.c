/* libFuzzer target: the values a user gives on the command line or in the environment — sizes,
 * durations, numbers, addresses, the storage URL and the --meta URL.
 *
 *   byte 0   which parser (mod 9); byte 1 a parameter for it; the rest is the text (cut at a NUL,
 *            as an argv string would be)
 *     0  shoal_parse_u64 (max from byte 1)        4  shoal_registry_redis_url_parse
 *     1  shoal_parse_size (unit, -1 from byte 1)  5  shoal_store_open of "s3://" + text (byte 1
 *     2  shoal_parse_duration                        bit 0: the text after a '\n' is --endpoint)
 *     3  shoal_metrics_addr_parse                 6  shoal_volume_init (block size from byte 1)
 *                                                 7  shoal_log_parse_level, shoal_iorpc_mode_parse
 *     8  shoal_config_parse: the text, cut at each '\n', gives the environment variables'
 *        values in table order (byte 1: how many variables to skip first)
 *
 * Invariants: every accepted value is within its documented bounds and reads back the same from
 * its canonical text (a number, "NB", "Nns", "host:port", a redis URL rebuilt from its parts);
 * only digits make a number; a redis user or password is accepted only with well-formed %XX
 * escapes, and decodes as a strict decoder written here does; a storage URL is accepted only
 * with a valid bucket name; a volume's URL is the input without trailing slashes; a parsed
 * environment holds only values within their documented bounds. */
#include <ctype.h>
#include <errno.h>

#include "common/block.h"
#include "common/config.h"
#include "common/log.h"
#include "common/secret.h"
#include "common/util.h"
#include "fuzz_input.h"
#include "group/group_internal.h"
#include "metrics/http.h"
#include "server/server.h"
#include "store/store.h"

#define TWO53 (1ull << 53)

static void fuzz_u64(const char *s, uint8_t p)
{
        static const uint64_t maxes[] = {65535, 1000, 100000, UINT64_MAX, 0, 1};
        uint64_t max = maxes[p % (sizeof(maxes) / sizeof(maxes[0]))], v, v2;
        if (shoal_parse_u64(s, max, &v))
                return;
        FZ_CHECK(v <= max && *s && strspn(s, "0123456789") == strlen(s));
        char buf[32];
        snprintf(buf, sizeof(buf), "%llu", (unsigned long long)v);
        FZ_CHECK(!shoal_parse_u64(buf, max, &v2) && v2 == v);
}

static void fuzz_size(const char *s, uint8_t p)
{
        static const uint64_t units[] = {1, SHOAL_KiB, SHOAL_MiB, SHOAL_GiB};
        bool neg1 = p & 4;
        int64_t v, v2;
        if (shoal_parse_size(s, units[p & 3], neg1, &v))
                return;
        if (v == -1) {
                FZ_CHECK(neg1 && !strcmp(s, "-1"));
                return;
        }
        FZ_CHECK(v >= 0 && (double)v <= 9.0e18 && isdigit((unsigned char)s[0]));
        if ((uint64_t)v < TWO53) {
                char buf[32];
                snprintf(buf, sizeof(buf), "%lldB", (long long)v);
                FZ_CHECK(!shoal_parse_size(buf, SHOAL_MiB, false, &v2) && v2 == v);
        }
}

static void fuzz_duration(const char *s)
{
        uint64_t ns, ns2;
        if (shoal_parse_duration(s, &ns))
                return;
        FZ_CHECK(ns <= 1000000000000000000ull && *s);
        if (ns < TWO53) {
                char buf[32];
                snprintf(buf, sizeof(buf), "%lluns", (unsigned long long)ns);
                FZ_CHECK(!shoal_parse_duration(buf, &ns2) && ns2 == ns);
        }
}

static void fuzz_addr(const char *s)
{
        char host[256], host2[256], buf[300];
        uint16_t port, port2;
        if (shoal_metrics_addr_parse(s, host, sizeof(host), &port))
                return;
        for (const char *p = host; *p; p++)
                FZ_CHECK(*p > ' ' && *p != '/' && *p != '[' && *p != ']' && *p != 0x7f);
        snprintf(buf, sizeof(buf), strchr(host, ':') ? "[%s]:%u" : "%s:%u", host, port);
        FZ_CHECK(!shoal_metrics_addr_parse(buf, host2, sizeof(host2), &port2));
        FZ_CHECK(!strcmp(host, host2) && port == port2);
}

/* A strict %XX decoder: two hex digits, never a NUL. Returns the length or -1. */
static int strict_pct(const char *s, size_t len, char *out, size_t cap)
{
        size_t o = 0;
        for (size_t i = 0; i < len; i++) {
                int c = (unsigned char)s[i];
                if (c == '%') {
                        if (len - i < 3 || shoal_hexval((unsigned char)s[i + 1]) < 0 ||
                            shoal_hexval((unsigned char)s[i + 2]) < 0)
                                return -1;
                        c = shoal_hexval((unsigned char)s[i + 1]) << 4 |
                            shoal_hexval((unsigned char)s[i + 2]);
                        if (!c)
                                return -1;
                        i += 2;
                }
                if (o + 1 >= cap)
                        return -1;
                out[o++] = (char)c;
        }
        out[o] = '\0';
        return (int)o;
}

static void pct_encode(const char *s, char *out)
{
        static const char hex[] = "0123456789ABCDEF";
        for (; *s; s++) {
                unsigned char c = (unsigned char)*s;
                if (isalnum(c)) {
                        *out++ = (char)c;
                } else {
                        *out++ = '%';
                        *out++ = hex[c >> 4];
                        *out++ = hex[c & 15];
                }
        }
        *out = '\0';
}

static void fuzz_redis_url(const char *s)
{
        static struct shoal_redis_url u, u2;
        static char user[128], pass[256], url[4096], eu[400], ep[800];
        char err[256];
        if (shoal_registry_redis_url_parse(s, &u, err, sizeof(err))) {
                FZ_CHECK(strlen(err) > 0);
                return;
        }
        FZ_CHECK(u.port >= 1 && u.port <= 65535 && u.db <= 100000 && u.host[0]);
        FZ_CHECK(!strchr(u.host, '/') && !strchr(u.host, '@') && !strchr(u.host, '?'));
        if (u.has_pass) {
                const char *at = strrchr(s, '@');
                const char *colon = memchr(s, ':', (size_t)(at - s));
                FZ_CHECK(at && colon);
                FZ_CHECK(strict_pct(s, (size_t)(colon - s), user, sizeof(user)) >= 0);
                FZ_CHECK(strict_pct(colon + 1, (size_t)(at - colon - 1), pass, sizeof(pass)) >= 0);
                FZ_CHECK(!strcmp(user, u.user) && !strcmp(pass, u.pass));
        }
        /* Rebuilt from its parts, the URL parses to the same parts. */
        pct_encode(u.user, eu);
        pct_encode(u.pass, ep);
        bool brackets = strchr(u.host, ':') || u.host[0] == '[';
        snprintf(url, sizeof(url), "%s%s%s%s%s%s%s:%d/%u", u.has_pass ? eu : "",
                 u.has_pass ? ":" : "", u.has_pass ? ep : "", u.has_pass ? "@" : "",
                 brackets ? "[" : "", u.host, brackets ? "]" : "", u.port, u.db);
        FZ_CHECK(!shoal_registry_redis_url_parse(url, &u2, err, sizeof(err)));
        FZ_CHECK(!strcmp(u.host, u2.host) && u.port == u2.port && u.db == u2.db);
        FZ_CHECK(u.has_pass == u2.has_pass && !strcmp(u.user, u2.user));
        FZ_CHECK(!strcmp(u.pass, u2.pass));
}

static void fuzz_store(const char *s, uint8_t p)
{
        static char url[8192];
        char *nl = strchr(s, '\n');
        const char *endpoint = NULL;
        size_t ul = nl ? (size_t)(nl - s) : strlen(s);
        if (nl && (p & 1))
                endpoint = nl + 1;
        snprintf(url, sizeof(url), "s3://%.*s", (int)ul, s);
        struct shoal_store_config cfg = {.url = url, .endpoint = endpoint};
        char err[512];
        struct shoal_store *st = NULL;
        int rc = shoal_store_open(&cfg, &st, err, sizeof(err));
        if (rc) {
                FZ_CHECK(rc < 0 && !st && strlen(err) > 0);
                return;
        }
        const char *b = url + 5;
        size_t bl = strcspn(b, "/");
        FZ_CHECK(bl >= 3 && bl <= 63);
        for (size_t i = 0; i < bl; i++)
                FZ_CHECK(isalnum((unsigned char)b[i]) || strchr("-._", b[i]));
        shoal_store_close(st);
}

static void fuzz_volume(const char *s, uint8_t p)
{
        uint32_t bs = p & 0x80 ? (uint32_t)p << 12 : SHOAL_BLOCK_SIZE_MIN << (p % 12);
        static struct shoal_volume v, v2;
        if (shoal_volume_init(&v, s, bs))
                return;
        size_t n = strlen(v.url);
        FZ_CHECK(n > 0 && n < sizeof(v.url) && !strncmp(v.url, s, n));
        for (size_t i = n; s[i]; i++)
                FZ_CHECK(s[i] == '/');
        FZ_CHECK(bs >= SHOAL_BLOCK_SIZE_MIN && bs <= SHOAL_BLOCK_SIZE_MAX && !(bs & (bs - 1)));
        FZ_CHECK(!shoal_volume_init(&v2, v.url, bs));
        FZ_CHECK(!strcmp(v.url, v2.url) && !memcmp(v.fp, v2.fp, sizeof(v.fp)));
}

/* ---- the environment ---- */

#define ENV_MAX 64

static const char *env_names[ENV_MAX];
static const char *env_values[ENV_MAX];
static size_t env_n;

static const char *fake_getenv(const char *name)
{
        for (size_t i = 0; i < env_n; i++)
                if (env_names[i] && !strcmp(env_names[i], name))
                        return env_values[i];
        return NULL;
}

static void fuzz_env(char *s, uint8_t p)
{
        size_t skip = p % 8, i = 0;
        env_n = 0;
        for (char *line = s; line && env_n < ENV_MAX; i++) {
                const char *name = shoal_config_var_name(i);
                if (!name)
                        break;
                if (i < skip)
                        continue;
                char *nl = strchr(line, '\n');
                if (nl)
                        *nl = '\0';
                env_names[env_n] = name;
                env_values[env_n++] = line;
                line = nl ? nl + 1 : NULL;
        }
        struct shoal_env env;
        char err[512];
        memset(&env, 0xa5, sizeof(env));
        if (shoal_config_parse(&env, fake_getenv, err, sizeof(err))) {
                FZ_CHECK(strlen(err) > 0);
                return;
        }
        const uint64_t durations[] = {env.group_heartbeat_ns,    env.group_timeout_ns,
                                      env.remote_timeout_ns,     env.avoid_ns,
                                      env.iorpc_scale_period_ns, env.rdma_retry_ns,
                                      env.rdma_heartbeat_ns,     env.store_deadline_ns};
        for (size_t k = 0; k < sizeof(durations) / sizeof(durations[0]); k++)
                FZ_CHECK(durations[k] <= 1000000000000000000ull);
        FZ_CHECK(env.store_attempts <= 1000 && env.s3_list_max_keys <= 1000);
        if (env.group_secret)
                FZ_CHECK(env.group_secret_len >= SHOAL_SECRET_MIN &&
                         env.group_secret_len <= SHOAL_SECRET_MAX);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        shoal_log_set_level(-1);
        struct fz in = {data, size};
        uint8_t mode = fz_u8(&in), p = fz_u8(&in);
        char *s = fz_rest_str(&in, NULL);
        switch (mode % 9) {
        case 0:
                fuzz_u64(s, p);
                break;
        case 1:
                fuzz_size(s, p);
                break;
        case 2:
                fuzz_duration(s);
                break;
        case 3:
                fuzz_addr(s);
                break;
        case 4:
                fuzz_redis_url(s);
                break;
        case 5:
                fuzz_store(s, p);
                break;
        case 6:
                fuzz_volume(s, p);
                break;
        case 8:
                fuzz_env(s, p);
                break;
        default: {
                int l = shoal_log_parse_level(s);
                FZ_CHECK(l >= -1 && l <= SHOAL_LOG_TRACE);
                (void)shoal_iorpc_mode_parse(s);
                break;
        }
        }
        free(s);
        return 0;
}
