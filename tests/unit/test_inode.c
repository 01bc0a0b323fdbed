/* The mount's inode table: stable numbers, lookup counting and forget, attribute TTL, listings
 * (sorted, a folder wins over a file of the same name, references), open-version tracking. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "common/util.h"
#include "fuse/inode.h"

static struct shoal_inode_attr file_attr(uint64_t size, const char *version)
{
        struct shoal_inode_attr a;
        memset(&a, 0, sizeof(a));
        a.size = size;
        a.mtime_ns = 1234567890123LL;
        shoal_strlcpy(a.version, version, sizeof(a.version));
        return a;
}

static void test_numbers_and_paths(void **state)
{
        (void)state;
        struct shoal_itable *t = shoal_itable_create(1000000000ULL);
        assert_non_null(t);
        char path[256];
        bool is_dir;
        assert_int_equal(shoal_itable_path(t, SHOAL_INO_ROOT, path, sizeof(path), &is_dir), 0);
        assert_string_equal(path, "");
        assert_true(is_dir);

        struct shoal_inode_attr a = file_attr(10, "v1");
        uint64_t ino, ino2;
        assert_int_equal(shoal_itable_ref(t, "a/b/c.bin", &a, &ino), 0);
        assert_true(ino >= SHOAL_INO_FIRST_HASHED);
        assert_int_equal(shoal_itable_ino_of(t, "a/b/c.bin"), ino);
        assert_int_equal(shoal_itable_path(t, ino, path, sizeof(path), &is_dir), 0);
        assert_string_equal(path, "a/b/c.bin");
        assert_false(is_dir);
        assert_int_equal(shoal_itable_path(t, ino, path, 4, &is_dir), -ENAMETOOLONG);

        /* Two lookups need two forgets; the number stays the same after the entry is gone. */
        assert_int_equal(shoal_itable_ref(t, "a/b/c.bin", &a, &ino2), 0);
        assert_int_equal(ino2, ino);
        shoal_itable_forget(t, ino, 1);
        assert_int_equal(shoal_itable_path(t, ino, path, sizeof(path), &is_dir), 0);
        shoal_itable_forget(t, ino, 1);
        assert_int_equal(shoal_itable_path(t, ino, path, sizeof(path), &is_dir), -ENOENT);
        assert_int_equal(shoal_itable_ino_of(t, "a/b/c.bin"), ino);
        shoal_itable_forget(t, 987654321, 5); /* unknown: ignored */

        /* Many paths, all distinct numbers, none reserved. */
        uint64_t seen[2000];
        for (int i = 0; i < 2000; i++) {
                char p[64];
                snprintf(p, sizeof(p), "dir%d/file%d", i % 37, i);
                assert_int_equal(shoal_itable_ref(t, p, &a, &seen[i]), 0);
                assert_true(seen[i] >= SHOAL_INO_FIRST_HASHED);
                for (int k = 0; k < i; k++)
                        assert_true(seen[k] != seen[i]);
        }
        shoal_itable_destroy(t);
}

/* The tables' clock in these tests: it moves only when a test says so. */
static uint64_t fake_now;

static uint64_t fake_clock(void)
{
        return fake_now;
}

static void test_attr_ttl_and_open_version(void **state)
{
        (void)state;
        struct shoal_itable *t = shoal_itable_create(400000000ULL); /* 400 ms */
        shoal_itable_set_clock(t, fake_clock);
        struct shoal_inode_attr a = file_attr(10, "v1"), got;
        uint64_t ino;
        bool fresh;
        assert_int_equal(shoal_itable_ref(t, "x", &a, &ino), 0);
        assert_int_equal(shoal_itable_getattr(t, ino, &got, &fresh), 0);
        assert_true(fresh);
        assert_int_equal(got.size, 10);
        assert_string_equal(got.version, "v1");
        fake_now += 399999999ULL; /* 1 ns before the TTL ends */
        assert_int_equal(shoal_itable_getattr(t, ino, &got, &fresh), 0);
        assert_true(fresh);
        fake_now += 1;
        assert_int_equal(shoal_itable_getattr(t, ino, &got, &fresh), 0);
        assert_false(fresh);
        struct shoal_inode_attr b = file_attr(20, "v2");
        shoal_itable_setattr(t, ino, &b);
        assert_int_equal(shoal_itable_getattr(t, ino, &got, &fresh), 0);
        assert_true(fresh);
        assert_int_equal(got.size, 20);
        assert_int_equal(shoal_itable_getattr(t, 999999, &got, &fresh), -ENOENT);

        assert_false(shoal_itable_note_open(t, ino, "v2")); /* first open */
        assert_true(shoal_itable_note_open(t, ino, "v2"));  /* same version: keep page cache */
        assert_false(shoal_itable_note_open(t, ino, "v3")); /* changed */
        shoal_itable_destroy(t);
}

static void test_dirlist(void **state)
{
        (void)state;
        struct shoal_itable *t = shoal_itable_create(400000000ULL);
        shoal_itable_set_clock(t, fake_clock);
        struct shoal_dirlist *l = shoal_dirlist_new();
        assert_non_null(l);
        assert_int_equal(shoal_dirlist_add(l, "zeta", 4, false, 1, 0, "v"), 0);
        assert_int_equal(shoal_dirlist_add(l, "alpha", 5, false, 2, 0, "v"), 0);
        assert_int_equal(shoal_dirlist_add(l, "mid", 3, false, 3, 0, "v"), 0);
        assert_int_equal(shoal_dirlist_add(l, "mid", 3, true, 0, 0, ""), 0);
        shoal_dirlist_seal(l);
        assert_int_equal(l->n, 3);
        assert_string_equal(l->ents[0].name, "alpha");
        assert_string_equal(l->ents[1].name, "mid");
        assert_true(l->ents[1].is_dir); /* the folder wins over the file of the same name */
        assert_string_equal(l->ents[2].name, "zeta");
        assert_non_null(shoal_dirlist_find(l, "zeta"));
        assert_null(shoal_dirlist_find(l, "nope"));

        assert_null(shoal_itable_dirlist_get(t, SHOAL_INO_ROOT));
        shoal_itable_dirlist_set(t, SHOAL_INO_ROOT, l);
        shoal_dirlist_put(l); /* the table holds its own reference */
        struct shoal_dirlist *g = shoal_itable_dirlist_get(t, SHOAL_INO_ROOT);
        assert_ptr_equal(g, l);
        fake_now += 399999999ULL;
        struct shoal_dirlist *g2 = shoal_itable_dirlist_get(t, SHOAL_INO_ROOT);
        assert_ptr_equal(g2, l); /* still within the TTL */
        shoal_dirlist_put(g2);
        fake_now += 1;
        assert_null(shoal_itable_dirlist_get(t, SHOAL_INO_ROOT)); /* expired */
        assert_int_equal(g->n, 3);                                /* a held reference stays valid */
        shoal_dirlist_put(g);
        shoal_itable_destroy(t);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_numbers_and_paths),
                cmocka_unit_test(test_attr_ttl_and_open_version),
                cmocka_unit_test(test_dirlist),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
