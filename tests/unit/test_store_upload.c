/* Uploads to a file:// store [W1, W2]: the object appears only at commit, byte-exact, with the
 * version a later stat reports; nothing (no object, no hidden file, no folder) stays after an
 * abort; create-new refuses an existing name, overwrite replaces it atomically; folders are
 * made and unmade; hidden upload names are neither listed nor valid keys; delete removes the
 * object and the folders it empties; the root lists the same every time. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/util.h"
#include "store/store.h"

struct fixture {
        char dir[64];
        struct shoal_store *st;
};

static int setup(void **state)
{
        struct fixture *f = calloc(1, sizeof(*f));
        snprintf(f->dir, sizeof(f->dir), "/tmp/shoal-upload.XXXXXX");
        if (!mkdtemp(f->dir))
                return -1;
        char url[128], err[256];
        snprintf(url, sizeof(url), "file://%s", f->dir);
        struct shoal_store_config cfg = {.url = url};
        f->st = shoal_store_open(&cfg, err, sizeof(err));
        if (!f->st)
                return -1;
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fixture *f = *state;
        shoal_store_close(f->st);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", f->dir);
        if (system(cmd))
                return -1;
        free(f);
        return 0;
}

/* Entries of folder REL of the store, hidden ones included ("." and ".." not). */
static int count_entries(struct fixture *f, const char *rel)
{
        char p[256];
        snprintf(p, sizeof(p), "%s/%s", f->dir, rel);
        DIR *d = opendir(p);
        if (!d)
                return -1;
        int n = 0;
        struct dirent *e;
        while ((e = readdir(d)))
                if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
                        n++;
        closedir(d);
        return n;
}

static void fill(char *buf, size_t len, unsigned seed)
{
        for (size_t i = 0; i < len; i++)
                buf[i] = (char)((i * 131 + seed * 7) >> 3);
}

static void test_commit_is_atomic_and_exact(void **state)
{
        struct fixture *f = *state;
        size_t len = 3 * 1024 * 1024 + 17;
        char *data = malloc(len), *back = malloc(len);
        fill(data, len, 1);
        struct shoal_upload *u;
        assert_int_equal(shoal_store_upload_begin(f->st, "d1/d2/obj.bin", SHOAL_UPLOAD_CREATE, &u),
                         0);
        for (size_t off = 0; off < len; off += 100000)
                assert_int_equal(
                        shoal_store_upload_append(u, data + off, SHOAL_MIN(100000, len - off)), 0);
        assert_int_equal(shoal_store_upload_size(u), len);
        /* Before commit: no object, and no name in the folder at all (an unnamed file). */
        struct shoal_object o;
        assert_int_equal(shoal_store_stat(f->st, "d1/d2/obj.bin", &o), -ENOENT);
        assert_int_equal(count_entries(f, "d1/d2"), 0);
        struct shoal_object done;
        assert_int_equal(shoal_store_upload_commit(u, &done), 0);
        assert_int_equal(done.size, len);
        assert_int_equal(shoal_store_stat(f->st, "d1/d2/obj.bin", &o), 0);
        assert_string_equal(o.version, done.version);
        assert_int_equal(o.size, len);
        assert_true(o.mtime_ns == done.mtime_ns);
        assert_int_equal(shoal_store_read(f->st, "d1/d2/obj.bin", done.version, 0, len, back), 0);
        assert_memory_equal(data, back, len);
        assert_int_equal(count_entries(f, "d1/d2"), 1);
        free(data);
        free(back);
}

static void test_abort_leaves_nothing(void **state)
{
        struct fixture *f = *state;
        char buf[4096];
        fill(buf, sizeof(buf), 2);
        struct shoal_upload *u;
        assert_int_equal(shoal_store_upload_begin(f->st, "new/deep/x.bin", SHOAL_UPLOAD_CREATE, &u),
                         0);
        assert_int_equal(shoal_store_upload_append(u, buf, sizeof(buf)), 0);
        shoal_store_upload_abort(u);
        /* The folders it made are gone too: a folder store lists an empty folder as a prefix. */
        assert_int_equal(count_entries(f, ""), 0);

        /* An existing folder stays. */
        char p[256];
        snprintf(p, sizeof(p), "%s/keep", f->dir);
        assert_int_equal(mkdir(p, 0755), 0);
        assert_int_equal(shoal_store_upload_begin(f->st, "keep/sub/y.bin", 0, &u), 0);
        shoal_store_upload_abort(u);
        assert_int_equal(count_entries(f, ""), 1);
        assert_int_equal(count_entries(f, "keep"), 0);
}

static void put(struct fixture *f, const char *key, const char *text, unsigned flags, int want)
{
        struct shoal_upload *u;
        int rc = shoal_store_upload_begin(f->st, key, flags, &u);
        if (rc) {
                assert_int_equal(rc, want);
                return;
        }
        assert_int_equal(shoal_store_upload_append(u, text, strlen(text)), 0);
        struct shoal_object o;
        assert_int_equal(shoal_store_upload_commit(u, &o), want);
}

static void test_create_new_and_overwrite(void **state)
{
        struct fixture *f = *state;
        put(f, "a.txt", "first", SHOAL_UPLOAD_CREATE, 0);
        put(f, "a.txt", "second", SHOAL_UPLOAD_CREATE, -EEXIST); /* refused at begin */

        /* Refused at commit: the name appeared while the upload ran. */
        struct shoal_upload *u;
        assert_int_equal(shoal_store_upload_begin(f->st, "b.txt", SHOAL_UPLOAD_CREATE, &u), 0);
        assert_int_equal(shoal_store_upload_append(u, "mine", 4), 0);
        put(f, "b.txt", "theirs", SHOAL_UPLOAD_CREATE, 0);
        struct shoal_object o;
        assert_int_equal(shoal_store_upload_commit(u, &o), -EEXIST);
        char back[16] = "";
        assert_int_equal(shoal_store_stat(f->st, "b.txt", &o), 0);
        assert_int_equal(shoal_store_read(f->st, "b.txt", NULL, 0, o.size, back), 0);
        assert_string_equal(back, "theirs");

        /* Overwrite replaces, with a new version. */
        struct shoal_object before;
        assert_int_equal(shoal_store_stat(f->st, "a.txt", &before), 0);
        put(f, "a.txt", "replaced!", 0, 0);
        assert_int_equal(shoal_store_stat(f->st, "a.txt", &o), 0);
        assert_string_not_equal(o.version, before.version);
        memset(back, 0, sizeof(back));
        assert_int_equal(shoal_store_read(f->st, "a.txt", o.version, 0, o.size, back), 0);
        assert_string_equal(back, "replaced!");
        assert_int_equal(count_entries(f, ""), 2); /* no hidden name left by the replace */

        /* An empty object is an object. */
        put(f, "empty", "", SHOAL_UPLOAD_CREATE, 0);
        assert_int_equal(shoal_store_stat(f->st, "empty", &o), 0);
        assert_int_equal(o.size, 0);
}

static void test_names(void **state)
{
        struct fixture *f = *state;
        struct shoal_upload *u;
        assert_int_equal(shoal_store_upload_begin(f->st, "../escape", 0, &u), -EINVAL);
        assert_int_equal(shoal_store_upload_begin(f->st, "a/./b", 0, &u), -EINVAL);
        assert_int_equal(shoal_store_upload_begin(f->st, "dir/", 0, &u), -EINVAL);
        assert_int_equal(shoal_store_upload_begin(f->st, ".shoal-upload-0123", 0, &u), -EINVAL);
        /* An object where a folder must be, and a folder where the object must be. */
        put(f, "file", "x", SHOAL_UPLOAD_CREATE, 0);
        assert_int_equal(shoal_store_upload_begin(f->st, "file/under", 0, &u), -ENOTDIR);
        put(f, "folder/inside", "x", SHOAL_UPLOAD_CREATE, 0);
        assert_int_equal(shoal_store_upload_begin(f->st, "folder", 0, &u), -EISDIR);

        /* A hidden upload file left by a crash on a file system without O_TMPFILE: never an
         * object, never listed. */
        char p[256];
        snprintf(p, sizeof(p), "%s/.shoal-upload-00000000deadbeef", f->dir);
        FILE *fp = fopen(p, "w");
        assert_non_null(fp);
        fputs("partial", fp);
        fclose(fp);
        struct shoal_object *objs;
        size_t n;
        assert_int_equal(shoal_store_list_objects(f->st, "", 100, &objs, &n), 0);
        assert_int_equal(n, 2); /* file, folder/inside */
        free(objs);
}

static void test_delete(void **state)
{
        struct fixture *f = *state;
        put(f, "x/y/z.bin", "data", SHOAL_UPLOAD_CREATE, 0);
        put(f, "x/other", "data", SHOAL_UPLOAD_CREATE, 0);
        assert_int_equal(shoal_store_delete(f->st, "x/y/z.bin"), 0);
        struct shoal_object o;
        assert_int_equal(shoal_store_stat(f->st, "x/y/z.bin", &o), -ENOENT);
        assert_int_equal(count_entries(f, "x"), 1); /* y went with its last object */
        assert_int_equal(shoal_store_delete(f->st, "x/y/z.bin"), -ENOENT);
        assert_int_equal(shoal_store_delete(f->st, "x"), -ENOENT); /* a folder is no object */
        assert_int_equal(shoal_store_delete(f->st, "x/other"), 0);
        assert_int_equal(count_entries(f, ""), 0);
}

/* A listing of the root must not depend on the one before (the root fd's offset once leaked
 * from one listing into the next, so the second saw nothing). */
static void test_list_root_twice(void **state)
{
        struct fixture *f = *state;
        put(f, "one", "1", SHOAL_UPLOAD_CREATE, 0);
        put(f, "two", "2", SHOAL_UPLOAD_CREATE, 0);
        for (int i = 0; i < 3; i++) {
                struct shoal_object *objs;
                size_t n;
                assert_int_equal(shoal_store_list_objects(f->st, "", 100, &objs, &n), 0);
                assert_int_equal(n, 2);
                free(objs);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test_setup_teardown(test_commit_is_atomic_and_exact, setup, teardown),
                cmocka_unit_test_setup_teardown(test_abort_leaves_nothing, setup, teardown),
                cmocka_unit_test_setup_teardown(test_create_new_and_overwrite, setup, teardown),
                cmocka_unit_test_setup_teardown(test_names, setup, teardown),
                cmocka_unit_test_setup_teardown(test_delete, setup, teardown),
                cmocka_unit_test_setup_teardown(test_list_root_twice, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
