/* Writes one object through libshoal's writer API from a local file. Built against the
 * *installed* library (pkg-config shoal) by tests/integration/test_lib.sh.
 *
 * usage: write_obj STORAGE KEY SRCFILE [-c CHUNK] [-w] [-a] [-o NAME=VALUE]...
 *   -c CHUNK  bytes per shoal_write call (default 1 MiB + 1, so calls straddle blocks)
 *   -w        SHOAL_WRITE_OVERWRITE
 *   -a        abort after writing instead of closing (nothing may appear)
 *
 * Prints "written N" and the process's counters remotecache_put_requests, remotecache_put_errors
 * and object_put_objects; on a failure prints the call, the errno name and shoal_errmsg() and
 * exits with the errno. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <shoal/shoal.h>

static struct shoal_client *client;
static struct shoal_writer *writer;

/* Reports the failed call, frees what is open (a leak checker watches) and returns the errno. */
static int die(const char *what, int rc)
{
        fprintf(stderr, "write_obj: %s: %s: %s\n", what, strerrorname_np(-rc), shoal_errmsg());
        shoal_write_abort(writer);
        shoal_client_close(client);
        return -rc;
}

static void counter(const char *name)
{
        uint64_t v = 0;
        if (shoal_counter(name, &v) == 0)
                printf("%s %llu\n", name, (unsigned long long)v);
}

int main(int argc, char **argv)
{
        size_t chunk = (1u << 20) + 1;
        int flags = 0, opt;
        bool abort_it = false;
        struct shoal_options *o = shoal_options_new();
        while ((opt = getopt(argc, argv, "c:wao:")) != -1) {
                char *eq;
                switch (opt) {
                case 'c':
                        chunk = strtoul(optarg, NULL, 10);
                        break;
                case 'w':
                        flags |= SHOAL_WRITE_OVERWRITE;
                        break;
                case 'a':
                        abort_it = true;
                        break;
                case 'o':
                        eq = strchr(optarg, '=');
                        if (!eq)
                                return 2;
                        *eq = '\0';
                        if (shoal_options_set(o, optarg, eq + 1))
                                return die("shoal_options_set", -EINVAL);
                        break;
                default:
                        return 2;
                }
        }
        if (argc - optind != 3 || !chunk)
                return 2;
        FILE *src = fopen(argv[optind + 2], "rb");
        if (!src)
                return 2;
        struct shoal_client *c = client = shoal_client_open(argv[optind], o);
        shoal_options_free(o);
        if (!c)
                return die("shoal_client_open", -errno);
        struct shoal_writer *w = writer = shoal_write_open(c, argv[optind + 1], flags);
        if (!w)
                return die("shoal_write_open", -errno);
        char *buf = malloc(chunk);
        unsigned long long total = 0;
        size_t n;
        while (buf && (n = fread(buf, 1, chunk, src)) > 0) {
                ssize_t got = shoal_write(w, buf, n);
                if (got < 0) {
                        free(buf);
                        fclose(src);
                        return die("shoal_write", (int)got);
                }
                if ((size_t)got != n)
                        return die("shoal_write (short)", -EIO);
                total += n;
        }
        free(buf);
        fclose(src);
        writer = NULL; /* closed or aborted here, whatever the outcome */
        if (abort_it) {
                shoal_write_abort(w);
        } else {
                int rc = shoal_write_close(w);
                if (rc)
                        return die("shoal_write_close", rc);
        }
        printf("written %llu\n", total);
        counter("remotecache_put_requests");
        counter("remotecache_put_errors");
        counter("object_put_objects");
        int rc = shoal_client_close(c);
        return rc ? die("shoal_client_close", rc) : 0;
}
