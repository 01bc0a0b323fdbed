/* shoal cat STORAGE KEY — the scriptable client [C8]: one object through the whole read path to
 * stdout. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cli/cli.h"
#include "client/reader.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "store/store.h"

static void print_summary(uint64_t bytes)
{
        struct shoal_metrics_snap s;
        if (shoal_metrics_snap_take(&s))
                return;
        const uint64_t *c = s.counters;
        fprintf(stderr,
                "shoal cat: %llu bytes; buffer hits %llu; blockcache hits %llu (%llu bytes), "
                "misses %llu, writes %llu, corrupt %llu; remote %llu (%llu bytes), fallbacks "
                "%llu, auth failures %llu; object store GETs %llu (%llu bytes); tcp bytes %llu, "
                "iorpc bytes %llu, "
                "rdma bytes %llu\n",
                (unsigned long long)bytes, (unsigned long long)c[SHOAL_M_buffer_hits],
                (unsigned long long)c[SHOAL_M_blockcache_hits],
                (unsigned long long)c[SHOAL_M_blockcache_hit_bytes],
                (unsigned long long)c[SHOAL_M_blockcache_miss],
                (unsigned long long)c[SHOAL_M_blockcache_writes],
                (unsigned long long)c[SHOAL_M_blockcache_checksum_errors],
                (unsigned long long)c[SHOAL_M_remotecache_get_requests],
                (unsigned long long)c[SHOAL_M_remotecache_get_bytes],
                (unsigned long long)c[SHOAL_M_remotecache_fallbacks],
                (unsigned long long)c[SHOAL_M_remotecache_auth_failures],
                (unsigned long long)c[SHOAL_M_object_get_requests],
                (unsigned long long)c[SHOAL_M_object_get_bytes],
                (unsigned long long)c[SHOAL_M_remotecache_tcp_get_bytes],
                (unsigned long long)c[SHOAL_M_remotecache_iorpc_get_bytes],
                (unsigned long long)c[SHOAL_M_remotecache_rdma_get_bytes]);
        shoal_metrics_snap_free(&s);
}

/* The command line's KEY, --offset and --length; 0, or the exit code after one line. */
static int parse_range(struct shoal_cli *cli, const char **key, uint64_t *off, uint64_t *len)
{
        if (cli->npos != 2)
                return shoal_cli_fail(cli, "expected STORAGE KEY (see 'shoal cat --help')");
        *key = cli->pos[1];
        if (!shoal_key_valid(*key, strnlen(*key, SHOAL_KEY_MAX + 1)))
                return shoal_cli_fail(cli, "invalid KEY: 1-%d bytes without control characters",
                                      SHOAL_KEY_MAX);
        *off = 0;
        *len = UINT64_MAX;
        if (cli->val[OPT_OFFSET] && shoal_parse_u64(cli->val[OPT_OFFSET], UINT64_MAX / 2, off))
                return shoal_cli_fail(cli, "invalid --offset %s", cli->val[OPT_OFFSET]);
        if (cli->val[OPT_LENGTH] && shoal_parse_u64(cli->val[OPT_LENGTH], UINT64_MAX / 2, len))
                return shoal_cli_fail(cli, "invalid --length %s", cli->val[OPT_LENGTH]);
        return 0;
}

/* Copies LEN bytes of OBJ from OFF through the read path to stdout, a block at a time through
 * BUF (a block's size); *DONE counts what was written. Returns the exit code. */
static int copy_out(struct shoal_node *node, const char *key, const struct shoal_object *obj,
                    uint64_t off, uint64_t len, char *buf, uint64_t *done)
{
        size_t chunk = node->vol.block_size;
        int ret = 0;
        struct shoal_stream stream = {0};
        while (*done < len) {
                size_t want = (size_t)SHOAL_MIN((uint64_t)chunk, len - *done);
                long n = shoal_reader_read(node->reader, obj, off + *done, want, buf, &stream);
                if (n <= 0) {
                        fprintf(stderr, "shoal cat: %s: read at %llu failed: %s\n", key,
                                (unsigned long long)(off + *done),
                                n == 0 ? "unexpected end of object" : strerror((int)-n));
                        ret = 1;
                        break;
                }
                int rc = shoal_write_all(STDOUT_FILENO, buf, (size_t)n);
                if (rc) {
                        if (rc != -EPIPE)
                                fprintf(stderr, "shoal cat: write to stdout failed: %s\n",
                                        strerror(-rc));
                        ret = 1;
                        break;
                }
                *done += (uint64_t)n;
        }
        return ret;
}

/* Stats KEY and copies the range of it that exists. Returns the exit code. */
static int cat_object(struct shoal_cli *cli, struct shoal_node *node, const char *key, uint64_t off,
                      uint64_t len)
{
        struct shoal_object obj;
        int rc = shoal_store_stat(node->store, key, &obj);
        if (rc) {
                fprintf(stderr, "shoal cat: %s: %s\n", key,
                        rc == -ENOENT   ? "no such object"
                        : rc == -EINVAL ? "not a valid key for this store"
                                        : strerror(-rc));
                return rc == -EINVAL ? 2 : 1;
        }
        if (off > obj.size)
                off = obj.size;
        if (len > obj.size - off)
                len = obj.size - off;
        char *buf = malloc(node->vol.block_size);
        if (!buf) {
                fprintf(stderr, "shoal cat: out of memory\n");
                return 1;
        }
        uint64_t done = 0;
        int ret = copy_out(node, key, &obj, off, len, buf, &done);
        free(buf);
        if (cli->val[OPT_SUMMARY])
                print_summary(done);
        return ret;
}

int shoal_cmd_cat(int argc, char **argv)
{
        struct shoal_cli cli;
        int rc = shoal_cli_parse(&cli, CMD_CAT, "cat", argc, argv);
        if (rc)
                return rc == 1 ? 0 : 2;
        if (shoal_cli_setup_log(&cli))
                return 2;
        const char *key = NULL;
        uint64_t off = 0, len = 0;
        rc = parse_range(&cli, &key, &off, &len);
        if (rc)
                return rc;
        struct shoal_node_config cfg;
        if (shoal_cli_node_config(&cli, cli.pos[0], &cfg))
                return 2;
        char err[1024];
        struct shoal_node *node;
        rc = shoal_node_start(&cfg, &node, err, sizeof(err));
        if (rc) {
                fprintf(stderr, "shoal cat: %s\n", err);
                return shoal_cli_start_code(rc);
        }
        int ret = cat_object(&cli, node, key, off, len);
        shoal_node_stop(node);
        return ret;
}
