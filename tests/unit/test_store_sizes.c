/* Object sizes a member learns itself [S4]: one stat per (key, version) however many ask at once,
 * remembered without expiry and bounded in entries, errors never remembered, another version's
 * size learned and the asker told it is stale. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "store/sizes.h"
#include "store/store.h"

struct env {
        char dir[64];
        char url[128];
        struct shoal_store *store;
};

static void put_object(struct env *e, const char *key, size_t size)
{
        char path[256];
        snprintf(path, sizeof(path), "%s/%s", e->dir, key);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        for (size_t i = 0; i < size; i++)
                fputc((int)(i * 7), f);
        fclose(f);
}

static struct env *env_new(void)
{
        struct env *e = calloc(1, sizeof(*e));
        snprintf(e->dir, sizeof(e->dir), "/tmp/shoal-sizes.XXXXXX");
        assert_non_null(mkdtemp(e->dir));
        snprintf(e->url, sizeof(e->url), "file://%s", e->dir);
        put_object(e, "a", 100);
        put_object(e, "b", 200000);
        put_object(e, "c", 0);
        char err[256];
        struct shoal_store_config sc = {.url = e->url};
        e->store = shoal_store_open(&sc, err, sizeof(err));
        assert_non_null(e->store);
        return e;
}

static void env_free(struct env *e)
{
        shoal_store_close(e->store);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
        assert_int_equal(system(cmd), 0);
        free(e);
}

static void version_of(struct env *e, const char *key, char *out)
{
        struct shoal_object o;
        assert_int_equal(shoal_store_stat(e->store, key, &o), 0);
        strcpy(out, o.version);
}

static void test_known_and_errors(void **state)
{
        (void)state;
        struct env *e = env_new();
        struct shoal_store_sizes *c = shoal_store_sizes_create(e->store, 16);
        char va[SHOAL_VERSION_MAX + 1], vb[SHOAL_VERSION_MAX + 1];
        uint64_t size = 1;
        version_of(e, "a", va);
        version_of(e, "b", vb);

        assert_int_equal(shoal_store_sizes_peek(c, "a", va, &size), -ENOENT);
        assert_int_equal(shoal_store_sizes_get(c, "a", va, &size), 0);
        assert_int_equal(size, 100);
        assert_int_equal(shoal_store_sizes_get(c, "a", va, &size), 0);
        assert_int_equal(shoal_store_sizes_peek(c, "a", va, &size), 0);
        assert_int_equal(size, 100);
        assert_int_equal(shoal_store_sizes_stat_count(c), 1);

        /* Another version: stale for the asker; the store's version is learned on the way. */
        assert_int_equal(shoal_store_sizes_get(c, "b", "1-1.000000000", &size), -ESTALE);
        assert_int_equal(shoal_store_sizes_peek(c, "b", "1-1.000000000", &size), -ENOENT);
        assert_int_equal(shoal_store_sizes_peek(c, "b", vb, &size), 0);
        assert_int_equal(size, 200000);
        assert_int_equal(shoal_store_sizes_stat_count(c), 2);

        /* Errors are not remembered: each ask goes to the store. */
        assert_int_equal(shoal_store_sizes_get(c, "nope", "1-1.000000000", &size), -ENOENT);
        assert_int_equal(shoal_store_sizes_get(c, "nope", "1-1.000000000", &size), -ENOENT);
        assert_int_equal(shoal_store_sizes_stat_count(c), 4);
        /* Keys and versions from the network are checked before any I/O. */
        assert_int_equal(shoal_store_sizes_get(c, "", va, &size), -EINVAL);
        assert_int_equal(shoal_store_sizes_get(c, "a\x01", va, &size), -EINVAL);
        assert_int_equal(shoal_store_sizes_get(c, "a", "", &size), -EINVAL);
        assert_int_equal(shoal_store_sizes_stat_count(c), 4);
        shoal_store_sizes_destroy(c);
        env_free(e);
}

static void test_bounded(void **state)
{
        (void)state;
        struct env *e = env_new();
        struct shoal_store_sizes *c = shoal_store_sizes_create(e->store, 2);
        char va[SHOAL_VERSION_MAX + 1], vb[SHOAL_VERSION_MAX + 1], vc[SHOAL_VERSION_MAX + 1];
        uint64_t size;
        version_of(e, "a", va);
        version_of(e, "b", vb);
        version_of(e, "c", vc);
        assert_int_equal(shoal_store_sizes_get(c, "a", va, &size), 0);
        assert_int_equal(shoal_store_sizes_get(c, "b", vb, &size), 0);
        assert_int_equal(shoal_store_sizes_get(c, "a", va, &size), 0); /* a is now the newest */
        assert_int_equal(shoal_store_sizes_get(c, "c", vc, &size), 0);
        assert_int_equal(size, 0);
        assert_int_equal(shoal_store_sizes_peek(c, "b", vb, &size), -ENOENT);
        assert_int_equal(shoal_store_sizes_peek(c, "a", va, &size), 0);
        assert_int_equal(shoal_store_sizes_peek(c, "c", vc, &size), 0);
        assert_int_equal(shoal_store_sizes_stat_count(c), 3);
        shoal_store_sizes_destroy(c);
        env_free(e);
}

struct asker {
        struct shoal_store_sizes *c;
        const char *version;
        pthread_barrier_t *go;
        int rc;
        uint64_t size;
};

static void *ask(void *arg)
{
        struct asker *a = arg;
        pthread_barrier_wait(a->go);
        a->rc = shoal_store_sizes_get(a->c, "b", a->version, &a->size);
        return NULL;
}

/* Many at once: one stat, the same answer for all. */
static void test_single_flight(void **state)
{
        (void)state;
        struct env *e = env_new();
        struct shoal_store_sizes *c = shoal_store_sizes_create(e->store, 16);
        char vb[SHOAL_VERSION_MAX + 1];
        version_of(e, "b", vb);
        enum {
                N = 16
        };
        pthread_t t[N];
        struct asker a[N];
        pthread_barrier_t go;
        for (int round = 0; round < 2; round++) {
                const char *v = round ? "1-1.000000000" : vb;
                pthread_barrier_init(&go, NULL, N);
                for (int i = 0; i < N; i++) {
                        a[i] = (struct asker){.c = c, .version = v, .go = &go};
                        assert_int_equal(pthread_create(&t[i], NULL, ask, &a[i]), 0);
                }
                for (int i = 0; i < N; i++) {
                        pthread_join(t[i], NULL);
                        if (!round) {
                                assert_int_equal(a[i].rc, 0);
                                assert_int_equal(a[i].size, 200000);
                        } else {
                                assert_int_equal(a[i].rc, -ESTALE);
                        }
                }
                pthread_barrier_destroy(&go);
                /* Round 0: whoever came during the stat waited for it, whoever came after
                 * found the size: one stat. Round 1: a stale version is never remembered, so
                 * only askers that overlapped shared a stat. */
                uint64_t n = shoal_store_sizes_stat_count(c);
                if (!round)
                        assert_int_equal(n, 1);
                else
                        assert_true(n >= 2 && n <= 1 + N);
        }
        shoal_store_sizes_destroy(c);
        env_free(e);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_known_and_errors),
                cmocka_unit_test(test_bounded),
                cmocka_unit_test(test_single_flight),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
