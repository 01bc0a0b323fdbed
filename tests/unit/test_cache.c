#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include "cache/cache.h"
#include "cache/cache_format.h"
#include "cache/cache_internal.h"
#include "common/block.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "unit_skip.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#define KiB 1024u

/* Each test works in its own folder, removed (with anything mounted under it) at teardown. */
struct fx {
        char base[128];
        char mnt[160]; /* a tmpfs mounted by the test, or "" */
        struct shoal_volume vol;
};

/* snprintf for paths: a truncated path would make a test pass or fail for the wrong reason. */
static void pathf(char *out, size_t outlen, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void pathf(char *out, size_t outlen, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        int n = vsnprintf(out, outlen, fmt, ap);
        va_end(ap);
        assert_true(n >= 0 && (size_t)n < outlen);
}

static int rm_one(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
        (void)st;
        (void)flag;
        (void)ftw;
        remove(path);
        return 0;
}

static int setup(void **state)
{
        struct fx *f = calloc(1, sizeof(*f));
        assert_non_null(f);
        strcpy(f->base, "/tmp/shoal-test-cache.XXXXXX");
        assert_non_null(mkdtemp(f->base));
        assert_int_equal(shoal_volume_init(&f->vol, "file:///srv/data", 4 * SHOAL_MiB), 0);
        *state = f;
        return 0;
}

static int teardown(void **state)
{
        struct fx *f = *state;
        if (f->mnt[0])
                umount2(f->mnt, MNT_DETACH);
        nftw(f->base, rm_one, 16, FTW_DEPTH | FTW_PHYS);
        free(f);
        return 0;
}

static struct shoal_cache *open_cache(struct fx *f, const char *dirs, int64_t size, double ratio)
{
        char err[256] = "";
        struct shoal_cache_config cfg = {
                .dirs = dirs,
                .size_bytes = size,
                .free_space_ratio = ratio,
                .volume = &f->vol,
        };
        struct shoal_cache *c;
        if (shoal_cache_open(&cfg, &c, err, sizeof(err)))
                fail_msg("shoal_cache_open(%s): %s", dirs ? dirs : "(null)", err);
        return c;
}

static void block_id(struct fx *f, uint32_t i, struct shoal_block_id *id)
{
        shoal_block_id_derive(&f->vol, "dir/object.bin", "etag-1", i, id);
}

static void fill(void *buf, size_t len, uint32_t seed)
{
        uint64_t x = 0x9e3779b97f4a7c15ULL ^ ((uint64_t)seed * 0x100000001b3ULL + 1);
        unsigned char *p = buf;
        for (size_t i = 0; i < len; i++) {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                p[i] = (unsigned char)x;
        }
}

static uint64_t counter(enum shoal_metric_id id)
{
        struct shoal_metrics_snap s;
        assert_int_equal(shoal_metrics_snap_take(&s), 0);
        uint64_t v = s.counters[id];
        shoal_metrics_snap_free(&s);
        return v;
}

static bool path_exists(const char *p)
{
        struct stat st;
        return lstat(p, &st) == 0;
}

/* Inserts block I of LEN bytes (content seeded by I) and returns its id. */
static void insert_block(struct fx *f, struct shoal_cache *c, uint32_t i, uint32_t len,
                         struct shoal_block_id *id)
{
        void *data = malloc(len);
        assert_non_null(data);
        fill(data, len, i);
        block_id(f, i, id);
        assert_int_equal(shoal_cache_insert(c, id, data, len), 0);
        free(data);
}

/* Reads block I back whole and compares it with what insert_block wrote. */
static int read_back(struct fx *f, struct shoal_cache *c, uint32_t i, uint32_t len,
                     enum shoal_cache_read_mode mode)
{
        struct shoal_block_id id;
        struct shoal_cache_block b;
        size_t alen = (len + 4095u) / 4096u * 4096u;
        void *buf = NULL, *want = malloc(len);
        int ret;

        assert_non_null(want);
        assert_int_equal(posix_memalign(&buf, 4096, alen), 0);
        fill(want, len, i);
        block_id(f, i, &id);
        ret = shoal_cache_open_block(c, &id, len, &b);
        if (ret == 0) {
                assert_int_equal(b.len, len);
                ret = shoal_cache_block_read(c, &b, 0, len, buf, mode);
                if (ret == 0)
                        assert_memory_equal(buf, want, len);
                shoal_cache_block_close(c, &b);
        }
        free(buf);
        free(want);
        return ret;
}

static void file_patch(const char *path, off_t off, const void *data, size_t len)
{
        int fd = open(path, O_WRONLY);
        assert_true(fd >= 0);
        assert_int_equal(pwrite(fd, data, len, off), (ssize_t)len);
        close(fd);
}

static unsigned count_files(const char *dir)
{
        DIR *d = opendir(dir);
        struct dirent *de;
        unsigned n = 0;
        if (!d)
                return 0;
        while ((de = readdir(d)))
                if (strcmp(de->d_name, ".") && strcmp(de->d_name, ".."))
                        n++;
        closedir(d);
        return n;
}

static unsigned blocks_under(const char *root)
{
        char p[PATH_MAX];
        unsigned n = 0;
        pathf(p, sizeof(p), "%s/blocks", root);
        DIR *top = opendir(p);
        struct dirent *a, *b;
        if (!top)
                return 0;
        while ((a = readdir(top))) {
                if (a->d_name[0] == '.')
                        continue;
                char p2[PATH_MAX + 300];
                pathf(p2, sizeof(p2), "%s/%s", p, a->d_name);
                DIR *mid = opendir(p2);
                if (!mid)
                        continue;
                while ((b = readdir(mid))) {
                        if (b->d_name[0] == '.')
                                continue;
                        char p3[PATH_MAX + 600];
                        pathf(p3, sizeof(p3), "%s/%s", p2, b->d_name);
                        n += count_files(p3);
                }
                closedir(mid);
        }
        closedir(top);
        return n;
}

/* The per-volume folder under BASE. */
static void vol_root(struct fx *f, const char *base, char *out, size_t outlen)
{
        char fp[17];
        shoal_hex(f->vol.fp, 8, fp);
        pathf(out, outlen, "%s/shoal-%s", base, fp);
}

/* ---- tests ---- */

static void test_insert_read_buffered(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, 64 * (int64_t)SHOAL_MiB, 0);
        const uint32_t len = 5 * SHOAL_CHUNK_SIZE - 1000; /* the last chunk is short */
        struct shoal_block_id id;
        struct shoal_cache_block b;
        uint64_t writes = counter(SHOAL_M_blockcache_writes);
        uint64_t hits = counter(SHOAL_M_blockcache_hits);

        assert_true(shoal_cache_enabled(c));
        insert_block(f, c, 1, len, &id);
        assert_int_equal(counter(SHOAL_M_blockcache_writes), writes + 1);
        assert_true(shoal_cache_contains(c, &id));
        assert_int_equal(read_back(f, c, 1, len, SHOAL_CACHE_READ_BUFFERED), 0);
        assert_int_equal(counter(SHOAL_M_blockcache_hits), hits + 1);

        /* A middle range and the short tail, each verified against the header. */
        unsigned char *want = malloc(len), *buf = malloc(len);
        fill(want, len, 1);
        assert_int_equal(shoal_cache_open_block(c, &id, 0, &b), 0);
        assert_int_equal(b.data_off % 4096, 0);
        assert_int_equal(shoal_cache_block_read(c, &b, SHOAL_CHUNK_SIZE, 2 * SHOAL_CHUNK_SIZE, buf,
                                                SHOAL_CACHE_READ_BUFFERED),
                         0);
        assert_memory_equal(buf, want + SHOAL_CHUNK_SIZE, 2 * SHOAL_CHUNK_SIZE);
        assert_int_equal(shoal_cache_block_read(c, &b, 4 * SHOAL_CHUNK_SIZE,
                                                len - 4 * SHOAL_CHUNK_SIZE, buf,
                                                SHOAL_CACHE_READ_BUFFERED),
                         0);
        assert_memory_equal(buf, want + 4 * SHOAL_CHUNK_SIZE, len - 4 * SHOAL_CHUNK_SIZE);
        assert_true(shoal_cache_block_verify(&b, 0, len, want));
        want[7] ^= 1;
        assert_false(shoal_cache_block_verify(&b, 0, len, want));
        /* Unaligned ranges are refused, not rounded. */
        assert_int_equal(shoal_cache_block_read(c, &b, 100, 1000, buf, SHOAL_CACHE_READ_BUFFERED),
                         -EINVAL);
        assert_int_equal(shoal_cache_block_read(c, &b, 0, len + 1, buf, SHOAL_CACHE_READ_BUFFERED),
                         -EINVAL);
        shoal_cache_block_close(c, &b);

        struct shoal_cache_usage u;
        shoal_cache_usage(c, &u);
        assert_int_equal(u.blocks, 1);
        assert_int_equal(u.bytes, shoal_cache_hdr_len(len) + len);
        assert_int_equal(u.dirs, 1);
        assert_int_equal(u.dirs_failing, 0);

        /* Missing ids miss. */
        struct shoal_block_id other;
        block_id(f, 99, &other);
        assert_int_equal(shoal_cache_open_block(c, &other, 0, &b), -ENOENT);
        free(want);
        free(buf);
        shoal_cache_close(c);
}

/* An event loop opens a block only when nothing waits for the disk: a header dropped from the
 * page cache is -EAGAIN (no miss counted, the file kept), and the open that may wait brings it
 * back; a block not cached is -ENOENT without counting either. */
static void test_open_nowait(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, 64 * (int64_t)SHOAL_MiB, 0);
        struct shoal_block_id id, other;
        struct shoal_cache_block b;
        char path[PATH_MAX];
        const uint32_t len = 2 * SHOAL_CHUNK_SIZE;

        insert_block(f, c, 6, len, &id);
        assert_int_equal(shoal_cache_block_path(c, &id, path, sizeof(path)), 0);
        int fd = open(path, O_RDONLY);
        assert_true(fd >= 0);
        assert_int_equal(fdatasync(fd), 0); /* clean pages can be dropped */
        assert_int_equal(posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED), 0);
        uint64_t miss0 = counter(SHOAL_M_blockcache_miss);
        int rc = shoal_cache_open_block_nowait(c, &id, 0, &b);
        if (rc == 0) /* the kernel kept the pages after all (tmpfs): still sound */
                shoal_cache_block_close(c, &b);
        else
                assert_int_equal(rc, -EAGAIN);
        assert_int_equal(counter(SHOAL_M_blockcache_miss), miss0);
        assert_int_equal(shoal_cache_open_block(c, &id, len, &b), 0);
        shoal_cache_block_close(c, &b);
        assert_int_equal(shoal_cache_open_block_nowait(c, &id, len, &b), 0);
        assert_int_equal(b.len, len);
        shoal_cache_block_close(c, &b);
        block_id(f, 99, &other);
        assert_int_equal(shoal_cache_open_block_nowait(c, &other, 0, &b), -ENOENT);
        assert_int_equal(counter(SHOAL_M_blockcache_miss), miss0);
        close(fd);
        shoal_cache_close(c);
}

/* Drains LEN bytes from the pipe RD into OUT. */
static void pipe_drain(int rd, unsigned char *out, size_t len)
{
        size_t got = 0;
        while (got < len) {
                ssize_t n = read(rd, out + got, len - got);
                assert_true(n > 0);
                got += (size_t)n;
        }
}

/* A member answers from the cache without a CRC pass of its own (the requester verifies every
 * chunk against the header it sends): splice into a pipe (O_DIRECT head, buffered tail) and the
 * unverified read give the file's bytes, and a damaged chunk goes through them unchanged while a
 * verified read still catches it; a short file is refused by both. */
static void test_splice_unverified(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, 64 * (int64_t)SHOAL_MiB, 0);
        struct shoal_block_id id;
        struct shoal_cache_block b;
        const uint32_t len = 3 * SHOAL_CHUNK_SIZE + 777;
        unsigned char *want = malloc(len), *got = malloc(len), *buf = NULL;
        int p[2];
        char path[PATH_MAX];

        assert_int_equal(posix_memalign((void **)&buf, 4096, 4 * SHOAL_CHUNK_SIZE), 0);
        assert_int_equal(pipe(p), 0);
        assert_true(fcntl(p[1], F_SETPIPE_SZ, 1 << 20) >= (int)len);
        fill(want, len, 5);
        insert_block(f, c, 5, len, &id);
        assert_int_equal(shoal_cache_open_block(c, &id, len, &b), 0);
        for (int how = 0; how < 2; how++) {
                assert_int_equal(shoal_cache_block_splice(c, &b, 0, len, p[1], how), 0);
                pipe_drain(p[0], got, len);
                assert_memory_equal(got, want, len);
                assert_int_equal(shoal_cache_block_splice(c, &b, SHOAL_CHUNK_SIZE,
                                                          2 * SHOAL_CHUNK_SIZE, p[1], how),
                                 0);
                pipe_drain(p[0], got, 2 * SHOAL_CHUNK_SIZE);
                assert_memory_equal(got, want + SHOAL_CHUNK_SIZE, 2 * SHOAL_CHUNK_SIZE);
        }
        assert_int_equal(shoal_cache_block_splice(c, &b, 100, 1000, p[1], 0), -EINVAL);
        shoal_cache_block_close(c, &b);

        /* One flipped byte in chunk 1: passed through unverified, caught when verified. */
        assert_int_equal(shoal_cache_block_path(c, &id, path, sizeof(path)), 0);
        int fd = open(path, O_RDWR);
        assert_true(fd >= 0);
        struct stat st;
        assert_int_equal(fstat(fd, &st), 0);
        off_t at = st.st_size - len + SHOAL_CHUNK_SIZE + 9;
        unsigned char x = want[SHOAL_CHUNK_SIZE + 9] ^ 0x20;
        assert_int_equal(pwrite(fd, &x, 1, at), 1);
        assert_int_equal(shoal_cache_open_block(c, &id, len, &b), 0);
        assert_int_equal(shoal_cache_block_read_unverified(c, &b, 0, 2 * SHOAL_CHUNK_SIZE, buf,
                                                           SHOAL_CACHE_READ_DIRECT),
                         0);
        assert_int_equal(buf[SHOAL_CHUNK_SIZE + 9], x);
        assert_int_equal(shoal_cache_block_splice(c, &b, 0, 2 * SHOAL_CHUNK_SIZE, p[1],
                                                  SHOAL_CACHE_READ_DIRECT),
                         0);
        pipe_drain(p[0], got, 2 * SHOAL_CHUNK_SIZE);
        assert_int_equal(got[SHOAL_CHUNK_SIZE + 9], x);
        /* Truncated under an open block: both refuse the short file. */
        assert_int_equal(ftruncate(fd, st.st_size - 100), 0);
        assert_int_equal(shoal_cache_block_splice(c, &b, 3 * SHOAL_CHUNK_SIZE, 777, p[1],
                                                  SHOAL_CACHE_READ_BUFFERED),
                         -EBADMSG);
        close(fd);
        shoal_cache_block_close(c, &b);
        assert_int_equal(shoal_cache_open_block(c, &id, len, &b), -ENOENT);
        close(p[0]);
        close(p[1]);
        free(buf);
        free(got);
        free(want);
        shoal_cache_close(c);
}

static void test_insert_read_direct(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, 64 * (int64_t)SHOAL_MiB, 0);
        struct shoal_block_id id;
        struct shoal_cache_block b;
        const uint32_t len = 3 * SHOAL_CHUNK_SIZE + 777;
        unsigned char *want = malloc(len), *buf = NULL;

        fill(want, len, 2);
        insert_block(f, c, 2, len, &id);
        assert_int_equal(read_back(f, c, 2, len, SHOAL_CACHE_READ_DIRECT), 0);

        assert_int_equal(posix_memalign((void **)&buf, 4096, 4 * SHOAL_CHUNK_SIZE + 4096), 0);
        assert_int_equal(shoal_cache_open_block(c, &id, len, &b), 0);
        /* The tail chunk ends mid-page: O_DIRECT reads a whole page and stops at EOF. */
        assert_int_equal(shoal_cache_block_read(c, &b, 3 * SHOAL_CHUNK_SIZE, 777, buf,
                                                SHOAL_CACHE_READ_DIRECT),
                         0);
        assert_memory_equal(buf, want + 3 * SHOAL_CHUNK_SIZE, 777);
        assert_int_equal(shoal_cache_block_read(c, &b, SHOAL_CHUNK_SIZE, SHOAL_CHUNK_SIZE, buf,
                                                SHOAL_CACHE_READ_DIRECT),
                         0);
        assert_memory_equal(buf, want + SHOAL_CHUNK_SIZE, SHOAL_CHUNK_SIZE);
        /* A misaligned buffer falls back to a buffered read instead of failing. */
        assert_int_equal(shoal_cache_block_read(c, &b, 0, SHOAL_CHUNK_SIZE, buf + 1,
                                                SHOAL_CACHE_READ_DIRECT),
                         0);
        assert_memory_equal(buf + 1, want, SHOAL_CHUNK_SIZE);
        /* Buffered and direct reads mix on one open block. */
        assert_int_equal(shoal_cache_block_read(c, &b, 0, len, buf, SHOAL_CACHE_READ_BUFFERED), 0);
        assert_memory_equal(buf, want, len);
        shoal_cache_block_close(c, &b);
        free(buf);
        free(want);
        shoal_cache_close(c);
}

static void test_wrong_expect_len(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, -1, 0);
        struct shoal_block_id id;
        struct shoal_cache_block b;

        insert_block(f, c, 3, 100 * KiB, &id);
        uint64_t bad = counter(SHOAL_M_blockcache_checksum_errors);
        /* Another length is the caller's claim, not damage: refused, and the file is kept. */
        assert_int_equal(shoal_cache_open_block(c, &id, 100 * KiB + 1, &b), -ERANGE);
        assert_int_equal(b.fd, -1);
        assert_true(shoal_cache_contains(c, &id));
        assert_int_equal(shoal_cache_open_block(c, &id, 64 * KiB, &b), -ERANGE);
        assert_true(shoal_cache_contains(c, &id));
        assert_int_equal(shoal_cache_open_block(c, &id, 0, &b), 0);
        assert_int_equal(b.len, 100 * KiB);
        shoal_cache_block_close(c, &b);
        assert_int_equal(shoal_cache_open_block(c, &id, 100 * KiB, &b), 0);
        shoal_cache_block_close(c, &b);
        assert_int_equal(counter(SHOAL_M_blockcache_checksum_errors), bad);
        shoal_cache_close(c);
}

/* Applies DAMAGE to the file of a fresh block and checks that the block is detected, removed,
 * counted, and never returns bytes. */
enum damage {
        FLIP_DATA,
        FLIP_HEADER,
        TRUNC_DATA,
        TRUNC_HEADER,
        ZERO_CHUNK,
        ZERO_ALL,
        EMPTY
};

static void damage_and_check(struct fx *f, struct shoal_cache *c, uint32_t i, enum damage how)
{
        const uint32_t len = 4 * SHOAL_CHUNK_SIZE + 12345;
        const uint32_t hlen = shoal_cache_hdr_len(len);
        struct shoal_block_id id;
        struct shoal_cache_block b;
        char path[PATH_MAX];
        unsigned char byte, *zero = calloc(1, hlen + len);

        insert_block(f, c, i, len, &id);
        assert_int_equal(shoal_cache_block_path(c, &id, path, sizeof(path)), 0);
        assert_true(path_exists(path));
        switch (how) {
        case FLIP_DATA:
        case FLIP_HEADER: {
                off_t off = how == FLIP_DATA ? hlen + 2 * SHOAL_CHUNK_SIZE + 17 : 20;
                int fd = open(path, O_RDWR);
                assert_int_equal(pread(fd, &byte, 1, off), 1);
                byte ^= 0x10;
                assert_int_equal(pwrite(fd, &byte, 1, off), 1);
                close(fd);
                break;
        }
        case TRUNC_DATA:
                assert_int_equal(truncate(path, hlen + len - 1), 0);
                break;
        case TRUNC_HEADER:
                assert_int_equal(truncate(path, 40), 0);
                break;
        case ZERO_CHUNK:
                file_patch(path, hlen + SHOAL_CHUNK_SIZE, zero, SHOAL_CHUNK_SIZE);
                break;
        case ZERO_ALL:
                file_patch(path, 0, zero, hlen + len);
                break;
        case EMPTY:
                assert_int_equal(truncate(path, 0), 0);
                break;
        }
        free(zero);

        uint64_t bad = counter(SHOAL_M_blockcache_checksum_errors);
        int ret = read_back(f, c, i, len, SHOAL_CACHE_READ_BUFFERED);
        assert_int_equal(ret, -EBADMSG);
        assert_int_equal(counter(SHOAL_M_blockcache_checksum_errors), bad + 1);
        assert_false(path_exists(path));
        assert_false(shoal_cache_contains(c, &id));
        assert_int_equal(shoal_cache_open_block(c, &id, len, &b), -ENOENT);
}

static void test_corruption_detected(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, -1, 0);
        uint64_t blocks_before;
        struct shoal_cache_usage u;

        damage_and_check(f, c, 10, FLIP_DATA);
        damage_and_check(f, c, 11, FLIP_HEADER);
        damage_and_check(f, c, 12, TRUNC_DATA);
        damage_and_check(f, c, 13, TRUNC_HEADER);
        damage_and_check(f, c, 14, ZERO_CHUNK);
        damage_and_check(f, c, 15, ZERO_ALL);
        damage_and_check(f, c, 16, EMPTY);
        shoal_cache_usage(c, &u);
        blocks_before = u.blocks;
        assert_int_equal(blocks_before, 0);
        assert_int_equal(u.bytes, 0);

        /* A re-insert after removal works again. */
        struct shoal_block_id id;
        insert_block(f, c, 10, 4 * SHOAL_CHUNK_SIZE + 12345, &id);
        assert_int_equal(read_back(f, c, 10, 4 * SHOAL_CHUNK_SIZE + 12345, SHOAL_CACHE_READ_DIRECT),
                         0);
        shoal_cache_close(c);
}

static void test_swapped_files_detected(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, -1, 0);
        const uint32_t len = 2 * SHOAL_CHUNK_SIZE;
        struct shoal_block_id a, b2, x, y;
        char pa[PATH_MAX], pb[PATH_MAX], px[PATH_MAX], py[PATH_MAX];
        uint64_t bad = counter(SHOAL_M_blockcache_checksum_errors);

        /* Moved: A's file renamed over B's name. */
        insert_block(f, c, 20, len, &a);
        insert_block(f, c, 21, len, &b2);
        assert_int_equal(shoal_cache_block_path(c, &a, pa, sizeof(pa)), 0);
        assert_int_equal(shoal_cache_block_path(c, &b2, pb, sizeof(pb)), 0);
        assert_int_equal(rename(pa, pb), 0);
        assert_int_equal(read_back(f, c, 21, len, SHOAL_CACHE_READ_BUFFERED), -EBADMSG);
        assert_int_equal(read_back(f, c, 20, len, SHOAL_CACHE_READ_BUFFERED), -ENOENT);
        assert_false(shoal_cache_contains(c, &a));
        assert_false(shoal_cache_contains(c, &b2));

        /* Copied: X's bytes over Y's file, same length. */
        insert_block(f, c, 22, len, &x);
        insert_block(f, c, 23, len, &y);
        assert_int_equal(shoal_cache_block_path(c, &x, px, sizeof(px)), 0);
        assert_int_equal(shoal_cache_block_path(c, &y, py, sizeof(py)), 0);
        char cmd[3 * PATH_MAX];
        pathf(cmd, sizeof(cmd), "cp '%s' '%s'", px, py);
        assert_int_equal(system(cmd), 0);
        assert_int_equal(read_back(f, c, 23, len, SHOAL_CACHE_READ_BUFFERED), -EBADMSG);
        assert_int_equal(read_back(f, c, 22, len, SHOAL_CACHE_READ_BUFFERED), 0);

        /* Only the data copied (header of Y kept): the CRCs are seeded with the id. */
        insert_block(f, c, 23, len, &y);
        unsigned char *data = malloc(len);
        fill(data, len, 22);
        file_patch(py, shoal_cache_hdr_len(len), data, len);
        free(data);
        assert_int_equal(read_back(f, c, 23, len, SHOAL_CACHE_READ_BUFFERED), -EBADMSG);

        assert_int_equal(counter(SHOAL_M_blockcache_checksum_errors), bad + 3);
        shoal_cache_close(c);
}

static void test_restart_keeps_cache(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, -1, 0);
        struct shoal_cache_usage u1, u2;
        struct shoal_block_id id;

        for (uint32_t i = 0; i < 5; i++)
                insert_block(f, c, 30 + i, 64 * KiB + i * 1000, &id);
        shoal_cache_usage(c, &u1);
        shoal_cache_close(c);

        c = open_cache(f, f->base, -1, 0);
        shoal_cache_usage(c, &u2);
        assert_int_equal(u2.blocks, 5);
        assert_int_equal(u2.bytes, u1.bytes);
        for (uint32_t i = 0; i < 5; i++) {
                block_id(f, 30 + i, &id);
                assert_true(shoal_cache_contains(c, &id));
                assert_int_equal(
                        read_back(f, c, 30 + i, 64 * KiB + i * 1000,
                                  i % 2 ? SHOAL_CACHE_READ_DIRECT : SHOAL_CACHE_READ_BUFFERED),
                        0);
        }
        shoal_cache_close(c);
}

static void test_capacity_lru(void **state)
{
        struct fx *f = *state;
        const uint32_t len = 256 * KiB;
        const uint64_t fsize = shoal_cache_hdr_len(len) + len;
        const uint64_t cap = 8 * fsize;
        struct shoal_cache *c = open_cache(f, f->base, (int64_t)cap, 0);
        struct shoal_cache_usage u;
        struct shoal_cache_block b;
        struct shoal_block_id id, keep;
        uint64_t ev = counter(SHOAL_M_blockcache_evictions);

        block_id(f, 0, &keep);
        for (uint32_t i = 0; i < 50; i++) {
                insert_block(f, c, i, len, &id);
                shoal_cache_usage(c, &u);
                assert_true(u.bytes <= cap);
                assert_int_equal(u.capacity, cap);
                /* Block 0 is read after every insert, so LRU must keep it. */
                assert_int_equal(shoal_cache_open_block(c, &keep, len, &b), 0);
                shoal_cache_block_close(c, &b);
        }
        shoal_cache_usage(c, &u);
        assert_int_equal(u.blocks, 8);
        assert_int_equal(u.bytes, cap);
        assert_int_equal(counter(SHOAL_M_blockcache_evictions), ev + 42);
        assert_int_equal(read_back(f, c, 0, len, SHOAL_CACHE_READ_BUFFERED), 0);
        for (uint32_t i = 1; i < 43; i++) {
                block_id(f, i, &id);
                assert_false(shoal_cache_contains(c, &id));
        }
        for (uint32_t i = 43; i < 50; i++)
                assert_int_equal(read_back(f, c, i, len, SHOAL_CACHE_READ_BUFFERED), 0);

        char root[PATH_MAX];
        vol_root(f, f->base, root, sizeof(root));
        assert_int_equal(blocks_under(root), 8);

        /* A block larger than the whole cache is refused, and evicts nothing. */
        void *big = calloc(1, 4 * SHOAL_MiB);
        block_id(f, 1000, &id);
        assert_int_equal(shoal_cache_insert(c, &id, big, 4 * SHOAL_MiB), -ENOSPC);
        free(big);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.blocks, 8);

        /* Re-inserting a cached id replaces it and counts it once. */
        insert_block(f, c, 0, len, &id);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.blocks, 8);
        assert_int_equal(u.bytes, cap);
        shoal_cache_close(c);

        /* Reopened with a smaller limit, the cache shrinks at once. */
        c = open_cache(f, f->base, (int64_t)(4 * fsize), 0);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.blocks, 4);
        assert_int_equal(blocks_under(root), 4);
        insert_block(f, c, 60, len, &id);
        shoal_cache_usage(c, &u);
        assert_true(u.bytes <= 4 * fsize);
        assert_true(shoal_cache_contains(c, &id));
        shoal_cache_close(c);
}

static void test_disabled(void **state)
{
        struct fx *f = *state;
        struct shoal_block_id id;
        struct shoal_cache_block b;
        struct shoal_cache_usage u;
        char data[100] = {0};
        const char *dirs[] = {f->base, NULL, ""};
        const int64_t sizes[] = {0, 1 << 20, 1 << 20};

        block_id(f, 1, &id);
        for (unsigned k = 0; k < 3; k++) {
                struct shoal_cache *c = open_cache(f, dirs[k], sizes[k], 0.1);
                assert_false(shoal_cache_enabled(c));
                assert_int_equal(shoal_cache_insert(c, &id, data, sizeof(data)), -ENODEV);
                assert_int_equal(shoal_cache_open_block(c, &id, 0, &b), -ENOENT);
                assert_false(shoal_cache_contains(c, &id));
                assert_int_equal(shoal_cache_remove(c, &id), -ENOENT);
                shoal_cache_usage(c, &u);
                assert_int_equal(u.blocks, 0);
                assert_int_equal(u.dirs, 0);
                shoal_cache_close(c);
        }
        /* Size 0 touches nothing on disk. */
        assert_int_equal(count_files(f->base), 0);

        /* Bad configs are one-line errors. */
        char err[256] = "";
        struct shoal_cache_config cfg = {.dirs = f->base, .size_bytes = -2, .volume = &f->vol};
        struct shoal_cache *c = (struct shoal_cache *)1;
        /* a size that cannot work is a bad configuration ... */
        assert_int_equal(shoal_cache_open(&cfg, &c, err, sizeof(err)), -EINVAL);
        assert_null(c);
        assert_true(err[0] != '\0');
        char pat[PATH_MAX];
        pathf(pat, sizeof(pat), "%s/nothing*", f->base);
        cfg.dirs = pat;
        cfg.size_bytes = -1;
        err[0] = '\0';
        /* ... a glob that matches nothing a failure at run time (the folders may appear) */
        assert_int_equal(shoal_cache_open(&cfg, &c, err, sizeof(err)), -ENOENT);
        assert_null(c);
        assert_non_null(strstr(err, "no dir matched"));
}

static void test_glob_dirs_spread(void **state)
{
        struct fx *f = *state;
        char p[PATH_MAX], pat[1024], root[PATH_MAX];
        struct shoal_block_id id;
        struct shoal_cache_usage u;
        const uint32_t nblocks = 150;

        /* Eleven dirs: more than the dir array's first allocation. */
        for (int i = 0; i < 10; i++) {
                pathf(p, sizeof(p), "%s/cache%d", f->base, i);
                assert_int_equal(mkdir(p, 0755), 0);
        }
        pathf(p, sizeof(p), "%s/cachefile", f->base); /* matches, not a dir: skipped */
        close(open(p, O_CREAT | O_WRONLY, 0644));
        /* A glob plus a plain dir that does not exist yet (created), plus a repeat. */
        pathf(pat, sizeof(pat), "%s/cache*:%s/extra/sub:%s/cache1", f->base, f->base, f->base);
        struct shoal_cache *c = open_cache(f, pat, -1, 0);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs, 11);

        for (uint32_t i = 0; i < nblocks; i++)
                insert_block(f, c, i, 64 * KiB, &id);
        unsigned total = 0;
        for (int i = 0; i <= 10; i++) {
                if (i < 10)
                        pathf(p, sizeof(p), "%s/cache%d", f->base, i);
                else
                        pathf(p, sizeof(p), "%s/extra/sub", f->base);
                vol_root(f, p, root, sizeof(root));
                unsigned n = blocks_under(root);
                assert_true(n > 0);
                total += n;
        }
        assert_int_equal(total, nblocks);
        for (uint32_t i = 0; i < nblocks; i++)
                assert_int_equal(read_back(f, c, i, 64 * KiB, SHOAL_CACHE_READ_BUFFERED), 0);
        shoal_cache_close(c);

        /* Reopened with the dirs in another order, every block is still found. */
        pathf(pat, sizeof(pat), "%s/extra/sub:%s/cache[5-9]:%s/cache?", f->base, f->base, f->base);
        c = open_cache(f, pat, -1, 0);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs, 11);
        assert_int_equal(u.blocks, nblocks);
        for (uint32_t i = 0; i < nblocks; i++)
                assert_int_equal(read_back(f, c, i, 64 * KiB, SHOAL_CACHE_READ_DIRECT), 0);
        /* Eviction works across all of them. */
        shoal_cache_close(c);
        c = open_cache(f, pat, (int64_t)(10 * (shoal_cache_hdr_len(64 * KiB) + 64 * KiB)), 0);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.blocks, 10);
        insert_block(f, c, 1000, 64 * KiB, &id);
        assert_int_equal(read_back(f, c, 1000, 64 * KiB, SHOAL_CACHE_READ_BUFFERED), 0);
        shoal_cache_close(c);
}

/* Writes a valid block file for id I into PATH (outside the cache), as the cache would. */
static void write_block_file(struct fx *f, uint32_t i, uint32_t len, const char *path)
{
        static unsigned char hdr[SHOAL_CACHE_HDR_MAX];
        struct shoal_block_id id;
        unsigned char *data = malloc(len);
        fill(data, len, i);
        block_id(f, i, &id);
        uint32_t hlen = shoal_cache_hdr_encode(hdr, &id, data, len);
        int fd = open(path, O_CREAT | O_TRUNC | O_WRONLY, 0644);
        assert_true(fd >= 0);
        assert_int_equal(write(fd, hdr, hlen), (ssize_t)hlen);
        assert_int_equal(write(fd, data, len), (ssize_t)len);
        close(fd);
        free(data);
}

static void leaf_path(struct fx *f, const char *root, uint32_t i, char *out, size_t outlen,
                      bool mkdirs)
{
        struct shoal_block_id id;
        char hex[SHOAL_BLOCK_ID_HEX], p[PATH_MAX];
        block_id(f, i, &id);
        shoal_block_id_hex(&id, hex);
        if (mkdirs) {
                pathf(p, sizeof(p), "%s/blocks/%.2s", root, hex);
                mkdir(p, 0700);
                pathf(p, sizeof(p), "%s/blocks/%.2s/%.2s", root, hex, hex + 2);
                mkdir(p, 0700);
        }
        pathf(out, outlen, "%s/blocks/%.2s/%.2s/%s", root, hex, hex + 2, hex);
}

static void test_garbage_and_symlinks_ignored(void **state)
{
        struct fx *f = *state;
        char root[512], p[PATH_MAX], q[PATH_MAX + 64], outside[512];
        const uint32_t len = 64 * KiB;
        struct shoal_block_id id;
        struct shoal_cache_usage u;
        struct stat st;

        struct shoal_cache *c = open_cache(f, f->base, -1, 0);
        insert_block(f, c, 40, len, &id);
        shoal_cache_close(c);

        vol_root(f, f->base, root, sizeof(root));
        pathf(outside, sizeof(outside), "%s/outside", f->base);
        assert_int_equal(mkdir(outside, 0755), 0);

        /* Garbage names at every level. */
        pathf(p, sizeof(p), "%s/blocks/zz", root);
        mkdir(p, 0700);
        pathf(q, sizeof(q), "%s/blocks/zz/file", root);
        close(open(q, O_CREAT | O_WRONLY, 0644));
        pathf(q, sizeof(q), "%s/blocks/README", root);
        close(open(q, O_CREAT | O_WRONLY, 0644));
        leaf_path(f, root, 41, p, sizeof(p), true);
        pathf(q, sizeof(q), "%s.partial", p);
        write_block_file(f, 41, len, q);
        pathf(q, sizeof(q), "%s", p);
        for (char *s = q + strlen(q) - 32; *s; s++) /* uppercase hex: not our name */
                if (*s >= 'a' && *s <= 'f')
                        *s = (char)(*s - 'a' + 'A');
        write_block_file(f, 41, len, q);
        /* A valid block in the wrong fan-out folder. */
        leaf_path(f, root, 42, p, sizeof(p), false);
        pathf(q, sizeof(q), "%s/blocks/00", root);
        mkdir(q, 0700);
        pathf(q, sizeof(q), "%s/blocks/00/00", root);
        mkdir(q, 0700);
        pathf(q, sizeof(q), "%s/blocks/00/00/%s", root, p + strlen(p) - 32);
        write_block_file(f, 42, len, q);

        /* A symlink under a valid block name, to a valid block file outside the cache. */
        char target[PATH_MAX + 16];
        pathf(target, sizeof(target), "%s/b43", outside);
        write_block_file(f, 43, len, target);
        leaf_path(f, root, 43, p, sizeof(p), true);
        assert_int_equal(symlink(target, p), 0);
        /* A symlinked fan-out folder leading to a valid block outside. */
        struct shoal_block_id id44;
        char hex[SHOAL_BLOCK_ID_HEX];
        block_id(f, 44, &id44);
        shoal_block_id_hex(&id44, hex);
        pathf(q, sizeof(q), "%s/%.2s", outside, hex + 2);
        mkdir(q, 0755);
        pathf(target, sizeof(target), "%s/%.2s/%s", outside, hex + 2, hex);
        write_block_file(f, 44, len, target);
        pathf(p, sizeof(p), "%s/blocks/%.2s", root, hex);
        if (lstat(p, &st) == 0) /* shares a fan-out folder with a real block: skip this one */
                hex[0] = '\0';
        else
                assert_int_equal(symlink(outside, p), 0);
        /* A FIFO under a valid block name. */
        leaf_path(f, root, 45, p, sizeof(p), true);
        assert_int_equal(mkfifo(p, 0600), 0);
        /* A leftover temp file. */
        pathf(q, sizeof(q), "%s/tmp/leftover.123", root);
        close(open(q, O_CREAT | O_WRONLY, 0644));

        c = open_cache(f, f->base, -1, 0);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.blocks, 1);
        assert_int_equal(read_back(f, c, 40, len, SHOAL_CACHE_READ_BUFFERED), 0);
        for (uint32_t i = 41; i <= 45; i++) {
                block_id(f, i, &id);
                assert_false(shoal_cache_contains(c, &id));
                assert_int_equal(read_back(f, c, i, len, SHOAL_CACHE_READ_BUFFERED), -ENOENT);
        }
        assert_false(path_exists(q)); /* tmp/ emptied */
        pathf(target, sizeof(target), "%s/b43", outside);
        assert_int_equal(stat(target, &st), 0);
        assert_int_equal(st.st_size, shoal_cache_hdr_len(len) + len);

        /* An indexed block replaced by a symlink later is refused, and the target survives. */
        block_id(f, 40, &id);
        assert_int_equal(shoal_cache_block_path(c, &id, p, sizeof(p)), 0);
        pathf(target, sizeof(target), "%s/b40", outside);
        write_block_file(f, 40, len, target);
        assert_int_equal(unlink(p), 0);
        assert_int_equal(symlink(target, p), 0);
        assert_int_equal(read_back(f, c, 40, len, SHOAL_CACHE_READ_BUFFERED), -EBADMSG);
        assert_int_equal(stat(target, &st), 0);
        assert_false(shoal_cache_contains(c, &id));
        shoal_cache_close(c);
}

static void test_remove(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, -1, 0);
        struct shoal_block_id id;
        struct shoal_cache_usage u;
        char path[PATH_MAX];

        insert_block(f, c, 50, 70 * KiB, &id);
        assert_int_equal(shoal_cache_block_path(c, &id, path, sizeof(path)), 0);
        assert_int_equal(shoal_cache_block_path(c, &id, path, 10), -ENAMETOOLONG);
        assert_int_equal(shoal_cache_block_path(c, &id, path, sizeof(path)), 0);
        assert_int_equal(shoal_cache_remove(c, &id), 0);
        assert_false(path_exists(path));
        assert_false(shoal_cache_contains(c, &id));
        assert_int_equal(shoal_cache_remove(c, &id), -ENOENT);
        assert_int_equal(shoal_cache_block_path(c, &id, path, sizeof(path)), -ENOENT);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.blocks, 0);
        assert_int_equal(u.bytes, 0);

        /* A file deleted behind the cache's back is a plain miss and leaves the index. */
        insert_block(f, c, 51, 70 * KiB, &id);
        assert_int_equal(shoal_cache_block_path(c, &id, path, sizeof(path)), 0);
        assert_int_equal(unlink(path), 0);
        assert_int_equal(read_back(f, c, 51, 70 * KiB, SHOAL_CACHE_READ_BUFFERED), -ENOENT);
        assert_false(shoal_cache_contains(c, &id));
        shoal_cache_close(c);
}

/* An open block stays readable after eviction or removal: the fd holds the file. */
static void test_read_after_remove(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, -1, 0);
        const uint32_t len = 2 * SHOAL_CHUNK_SIZE;
        struct shoal_block_id id;
        struct shoal_cache_block b;
        unsigned char *buf = NULL, *want = malloc(len);

        assert_int_equal(posix_memalign((void **)&buf, 4096, len), 0);
        fill(want, len, 52);
        insert_block(f, c, 52, len, &id);
        assert_int_equal(shoal_cache_open_block(c, &id, len, &b), 0);
        assert_int_equal(shoal_cache_remove(c, &id), 0);
        assert_int_equal(shoal_cache_block_read(c, &b, 0, len, buf, SHOAL_CACHE_READ_DIRECT), 0);
        assert_memory_equal(buf, want, len);
        shoal_cache_block_close(c, &b);
        free(buf);
        free(want);
        shoal_cache_close(c);
}

static bool mount_tmpfs(struct fx *f, const char *size)
{
        char opts[64];
        if (geteuid() != 0)
                return false;
        pathf(f->mnt, sizeof(f->mnt), "%s/mnt", f->base);
        assert_int_equal(mkdir(f->mnt, 0755), 0);
        pathf(opts, sizeof(opts), "size=%s", size);
        if (mount("tmpfs", f->mnt, "tmpfs", 0, opts)) {
                f->mnt[0] = '\0';
                return false;
        }
        return true;
}

static void test_full_disk(void **state)
{
        struct fx *f = *state;
        const uint32_t len = 256 * KiB;
        struct shoal_block_id id;
        char root[PATH_MAX], p[PATH_MAX + 8];
        int ret = 0;
        uint32_t n;

        if (!mount_tmpfs(f, "2m"))
                SHOAL_UNIT_SKIP("a full disk needs root to mount a 2 MiB tmpfs");
        struct shoal_cache *c = open_cache(f, f->mnt, -1, 0);
        uint64_t errs = counter(SHOAL_M_blockcache_write_errors);
        unsigned char *data = malloc(len);
        for (n = 0; n < 100; n++) {
                fill(data, len, n);
                block_id(f, n, &id);
                ret = shoal_cache_insert(c, &id, data, len);
                if (ret)
                        break;
        }
        free(data);
        assert_int_equal(ret, -ENOSPC);
        assert_true(n >= 2);
        assert_int_equal(counter(SHOAL_M_blockcache_write_errors), errs + 1);
        vol_root(f, f->mnt, root, sizeof(root));
        pathf(p, sizeof(p), "%s/tmp", root);
        assert_int_equal(count_files(p), 0);
        block_id(f, n, &id);
        assert_false(shoal_cache_contains(c, &id));
        char bp[PATH_MAX];
        leaf_path(f, root, n, bp, sizeof(bp), false);
        assert_false(path_exists(bp));

        /* What is still indexed reads back; some room was made for later inserts. */
        unsigned kept = 0;
        for (uint32_t i = 0; i < n; i++) {
                block_id(f, i, &id);
                if (!shoal_cache_contains(c, &id))
                        continue;
                kept++;
                assert_int_equal(read_back(f, c, i, len, SHOAL_CACHE_READ_BUFFERED), 0);
        }
        assert_true(kept > 0);
        assert_true(kept < n);
        assert_int_equal(blocks_under(root), kept);
        insert_block(f, c, n, len, &id);
        assert_int_equal(read_back(f, c, n, len, SHOAL_CACHE_READ_DIRECT), 0);
        shoal_cache_close(c);
}

static void test_free_space_ratio(void **state)
{
        struct fx *f = *state;
        const uint32_t len = 128 * KiB;
        struct shoal_block_id id;
        struct statvfs sv;

        if (!mount_tmpfs(f, "4m"))
                SHOAL_UNIT_SKIP("the free-space ratio needs root to mount a 4 MiB tmpfs");
        struct shoal_cache *c = open_cache(f, f->mnt, -1, 0.5);
        uint64_t ev = counter(SHOAL_M_blockcache_evictions);
        for (uint32_t i = 0; i < 40; i++) {
                insert_block(f, c, i, len, &id);
                assert_int_equal(statvfs(f->mnt, &sv), 0);
                double free_ratio = (double)sv.f_bavail / (double)sv.f_blocks;
                assert_true(free_ratio >= 0.45);
        }
        assert_true(counter(SHOAL_M_blockcache_evictions) > ev);
        for (uint32_t i = 36; i < 40; i++)
                assert_int_equal(read_back(f, c, i, len, SHOAL_CACHE_READ_BUFFERED), 0);
        shoal_cache_close(c);
}

/* Which configured dir (0 or 1, by path prefix) holds block I. */
static int dir_of(struct fx *f, struct shoal_cache *c, uint32_t i, const char *root0)
{
        struct shoal_block_id id;
        char p[PATH_MAX];
        block_id(f, i, &id);
        assert_int_equal(shoal_cache_block_path(c, &id, p, sizeof(p)), 0);
        return strncmp(p, root0, strlen(root0)) == 0 ? 0 : 1;
}

static void test_failing_dir(void **state)
{
        struct fx *f = *state;
        char dirs[512], d0[256], root0[512];
        struct shoal_block_id id;
        struct shoal_cache_usage u;
        const uint32_t len = 64 * KiB;
        int in0 = -1, in1 = -1;

        pathf(d0, sizeof(d0), "%s/a", f->base);
        pathf(dirs, sizeof(dirs), "%s/a:%s/b", f->base, f->base);
        vol_root(f, d0, root0, sizeof(root0));
        struct shoal_cache *c = open_cache(f, dirs, -1, 0);
        for (uint32_t i = 0; i < 20; i++) {
                insert_block(f, c, i, len, &id);
                if (dir_of(f, c, i, root0) == 0)
                        in0 = (int)i;
                else
                        in1 = (int)i;
        }
        assert_true(in0 >= 0 && in1 >= 0);

        /* Two errors are tolerated; the third within the window takes dir 0 out of use. */
        shoal_cache_debug_dir_error(c, 0, -EIO);
        shoal_cache_debug_dir_error(c, 0, -EIO);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs_failing, 0);
        shoal_cache_debug_dir_error(c, 0, -EIO);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs, 1);
        assert_int_equal(u.dirs_failing, 1);
        assert_true(shoal_cache_enabled(c));

        /* Its blocks miss (without being forgotten); new inserts all go to dir 1. */
        block_id(f, (uint32_t)in0, &id);
        assert_false(shoal_cache_contains(c, &id));
        assert_int_equal(read_back(f, c, (uint32_t)in0, len, SHOAL_CACHE_READ_BUFFERED), -ENOENT);
        assert_int_equal(read_back(f, c, (uint32_t)in1, len, SHOAL_CACHE_READ_BUFFERED), 0);
        for (uint32_t i = 100; i < 120; i++) {
                insert_block(f, c, i, len, &id);
                assert_int_equal(dir_of(f, c, i, root0), 1);
        }

        /* Every dir out of use: the cache drops inserts and misses, it never fails reads. */
        for (int k = 0; k < 3; k++)
                shoal_cache_debug_dir_error(c, 1, -EIO);
        assert_false(shoal_cache_enabled(c));
        block_id(f, 200, &id);
        char data[64] = {0};
        assert_int_equal(shoal_cache_insert(c, &id, data, sizeof(data)), -ENODEV);
        assert_int_equal(read_back(f, c, (uint32_t)in1, len, SHOAL_CACHE_READ_BUFFERED), -ENOENT);

        /* More errors on a dir already out of use change nothing. */
        shoal_cache_debug_dir_error(c, 0, -EIO);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs_failing, 2);
        shoal_cache_close(c);

        /* After the down time both dirs are probed, and their blocks are found again. */
        c = open_cache(f, dirs, -1, 0);
        /* An hour down, on the cache's own clock: time is moved, not waited for, and the margins
         * (minutes) leave no room for a race with the real clock. */
        shoal_cache_debug_set_down_ns(c, 3600 * 1000000000ULL);
        for (int k = 0; k < 3; k++) {
                shoal_cache_debug_dir_error(c, 0, -EIO);
                shoal_cache_debug_dir_error(c, 1, -EIO);
        }
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs_failing, 2);
        shoal_cache_debug_advance(c, 3000 * 1000000000ULL);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs_failing, 2);
        shoal_cache_debug_advance(c, 700 * 1000000000ULL);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs, 2);
        assert_int_equal(u.dirs_failing, 0);
        assert_true(shoal_cache_enabled(c));
        /* A success while probing makes dir 0 healthy: one error no longer takes it out. */
        assert_int_equal(read_back(f, c, (uint32_t)in0, len, SHOAL_CACHE_READ_DIRECT), 0);
        shoal_cache_debug_dir_error(c, 0, -EIO);
        /* Dir 1 is still probing: a single error takes it out again. */
        shoal_cache_debug_dir_error(c, 1, -EIO);
        shoal_cache_usage(c, &u);
        assert_int_equal(u.dirs, 1);
        assert_int_equal(u.dirs_failing, 1);
        assert_int_equal(read_back(f, c, (uint32_t)in0, len, SHOAL_CACHE_READ_BUFFERED), 0);
        assert_int_equal(read_back(f, c, (uint32_t)in1, len, SHOAL_CACHE_READ_BUFFERED), -ENOENT);
        shoal_cache_close(c);
}

/* The largest block has a two-page header (more CRCs than fit in 4096 bytes). */
static void test_largest_block(void **state)
{
        struct fx *f = *state;
        struct shoal_cache *c = open_cache(f, f->base, -1, 0);
        const uint32_t len = SHOAL_BLOCK_SIZE_MAX;
        struct shoal_block_id id;
        struct shoal_cache_block b;
        unsigned char *buf = NULL, *want = malloc(len);

        assert_int_equal(shoal_cache_hdr_len(len), 8192);
        insert_block(f, c, 300, len, &id);
        fill(want, len, 300);
        assert_int_equal(posix_memalign((void **)&buf, 4096, 2 * SHOAL_CHUNK_SIZE), 0);
        assert_int_equal(shoal_cache_open_block(c, &id, len, &b), 0);
        assert_int_equal(b.data_off, 8192);
        assert_int_equal(shoal_cache_block_read(c, &b, len - 2 * SHOAL_CHUNK_SIZE,
                                                2 * SHOAL_CHUNK_SIZE, buf, SHOAL_CACHE_READ_DIRECT),
                         0);
        assert_memory_equal(buf, want + len - 2 * SHOAL_CHUNK_SIZE, 2 * SHOAL_CHUNK_SIZE);
        shoal_cache_block_close(c, &b);
        assert_int_equal(read_back(f, c, 300, len, SHOAL_CACHE_READ_BUFFERED), 0);
        free(buf);
        free(want);
        shoal_cache_close(c);
}

/* ---- concurrency ---- */

struct worker {
        struct fx *f;
        struct shoal_cache *c;
        unsigned seed;
        unsigned reads_ok;
};

static void *worker_main(void *arg)
{
        struct worker *w = arg;
        const uint32_t len = 2 * SHOAL_CHUNK_SIZE + 100;
        unsigned char *buf, *want = malloc(len), *data = malloc(len);
        struct shoal_block_id id;
        struct shoal_cache_block b;

        if (posix_memalign((void **)&buf, 4096, 3 * SHOAL_CHUNK_SIZE))
                abort();
        for (int op = 0; op < 600; op++) {
                w->seed = w->seed * 1103515245u + 12345u;
                uint32_t i = (w->seed >> 8) % 32, kind = (w->seed >> 20) % 10;
                block_id(w->f, i, &id);
                if (kind < 4) {
                        fill(data, len, i);
                        int ret = shoal_cache_insert(w->c, &id, data, len);
                        if (ret && ret != -ENOSPC)
                                fail_msg("insert: %d", ret);
                } else if (kind < 9) {
                        if (shoal_cache_open_block(w->c, &id, len, &b))
                                continue;
                        fill(want, len, i);
                        int ret = shoal_cache_block_read(w->c, &b, 0, len, buf,
                                                         kind % 2 ? SHOAL_CACHE_READ_DIRECT
                                                                  : SHOAL_CACHE_READ_BUFFERED);
                        shoal_cache_block_close(w->c, &b);
                        if (ret)
                                fail_msg("read: %d", ret);
                        if (memcmp(buf, want, len))
                                fail_msg("wrong bytes for block %u", i);
                        w->reads_ok++;
                } else {
                        shoal_cache_remove(w->c, &id);
                }
        }
        free(buf);
        free(want);
        free(data);
        return NULL;
}

static void test_concurrent(void **state)
{
        struct fx *f = *state;
        const uint64_t fsize =
                shoal_cache_hdr_len(2 * SHOAL_CHUNK_SIZE + 100) + 2 * SHOAL_CHUNK_SIZE + 100;
        const uint64_t cap = 10 * fsize;
        struct shoal_cache *c = open_cache(f, f->base, (int64_t)cap, 0);
        struct worker w[6];
        pthread_t t[6];
        struct shoal_cache_usage u;
        unsigned reads = 0;

        for (int i = 0; i < 6; i++) {
                w[i] = (struct worker){.f = f, .c = c, .seed = 77u + (unsigned)i};
                assert_int_equal(pthread_create(&t[i], NULL, worker_main, &w[i]), 0);
        }
        for (int i = 0; i < 6; i++) {
                pthread_join(t[i], NULL);
                reads += w[i].reads_ok;
        }
        assert_true(reads > 0);
        shoal_cache_usage(c, &u);
        assert_true(u.bytes <= cap);
        char root[PATH_MAX];
        vol_root(f, f->base, root, sizeof(root));
        assert_int_equal(blocks_under(root), u.blocks);
        shoal_cache_close(c);

        /* The index rebuilt from disk agrees with the one that was kept in memory. */
        c = open_cache(f, f->base, (int64_t)cap, 0);
        struct shoal_cache_usage u2;
        shoal_cache_usage(c, &u2);
        assert_int_equal(u2.blocks, u.blocks);
        assert_int_equal(u2.bytes, u.bytes);
        shoal_cache_close(c);
}

static void test_format_roundtrip(void **state)
{
        (void)state;
        static unsigned char hdr[SHOAL_CACHE_HDR_MAX];
        static uint32_t crcs[SHOAL_MAX_CHUNKS];
        struct shoal_block_id id = {{1, 2, 3}}, other = {{1, 2, 4}};
        uint32_t hlen, dlen;
        const uint32_t lens[] = {1, SHOAL_CHUNK_SIZE, 4 * SHOAL_MiB, SHOAL_BLOCK_SIZE_MAX};
        unsigned char *data = calloc(1, SHOAL_BLOCK_SIZE_MAX);

        assert_int_equal(shoal_cache_hdr_len(SHOAL_BLOCK_SIZE_MAX), 8192);
        assert_int_equal(shoal_cache_hdr_len(4 * SHOAL_MiB), 4096);
        for (unsigned k = 0; k < SHOAL_ARRAY_SIZE(lens); k++) {
                uint32_t n = shoal_cache_hdr_encode(hdr, &id, data, lens[k]);
                assert_int_equal(n % 4096, 0);
                assert_int_equal(n, shoal_cache_hdr_len(lens[k]));
                assert_int_equal(shoal_cache_hdr_peek_len(hdr, 48), n);
                assert_int_equal(shoal_cache_hdr_decode(hdr, n, &id, 0, &hlen, &dlen, crcs), 0);
                assert_int_equal(dlen, lens[k]);
                assert_int_equal(hlen, n);
                assert_int_equal(crcs[0], shoal_chunk_crc(&id, 0, data,
                                                          SHOAL_MIN(lens[k], SHOAL_CHUNK_SIZE)));
                assert_int_equal(shoal_cache_hdr_decode(hdr, n, &other, 0, &hlen, &dlen, crcs),
                                 -EBADMSG);
                assert_int_equal(shoal_cache_hdr_decode(hdr, n, &id,
                                                        lens[k] - 1 + (lens[k] == 1) * 2, &hlen,
                                                        &dlen, crcs),
                                 -ERANGE);
                assert_int_equal(shoal_cache_hdr_decode(hdr, n - 1, &id, 0, &hlen, &dlen, crcs),
                                 -EBADMSG);
                /* Little-endian on disk, whatever the host. */
                assert_int_equal(hdr[32] | hdr[33] << 8 | hdr[34] << 16 | (uint32_t)hdr[35] << 24,
                                 lens[k]);
                /* Every single bit of the meaningful header is covered. */
                for (uint32_t bit = 0; bit < 8 * (48 + 4); bit++) {
                        hdr[bit / 8] ^= (unsigned char)(1u << bit % 8);
                        assert_int_not_equal(
                                shoal_cache_hdr_decode(hdr, n, &id, 0, &hlen, &dlen, crcs), 0);
                        hdr[bit / 8] ^= (unsigned char)(1u << bit % 8);
                }
        }
        free(data);
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_format_roundtrip),
                cmocka_unit_test_setup_teardown(test_insert_read_buffered, setup, teardown),
                cmocka_unit_test_setup_teardown(test_insert_read_direct, setup, teardown),
                cmocka_unit_test_setup_teardown(test_wrong_expect_len, setup, teardown),
                cmocka_unit_test_setup_teardown(test_corruption_detected, setup, teardown),
                cmocka_unit_test_setup_teardown(test_swapped_files_detected, setup, teardown),
                cmocka_unit_test_setup_teardown(test_restart_keeps_cache, setup, teardown),
                cmocka_unit_test_setup_teardown(test_capacity_lru, setup, teardown),
                cmocka_unit_test_setup_teardown(test_disabled, setup, teardown),
                cmocka_unit_test_setup_teardown(test_glob_dirs_spread, setup, teardown),
                cmocka_unit_test_setup_teardown(test_garbage_and_symlinks_ignored, setup, teardown),
                cmocka_unit_test_setup_teardown(test_remove, setup, teardown),
                cmocka_unit_test_setup_teardown(test_read_after_remove, setup, teardown),
                cmocka_unit_test_setup_teardown(test_full_disk, setup, teardown),
                cmocka_unit_test_setup_teardown(test_free_space_ratio, setup, teardown),
                cmocka_unit_test_setup_teardown(test_failing_dir, setup, teardown),
                cmocka_unit_test_setup_teardown(test_largest_block, setup, teardown),
                cmocka_unit_test_setup_teardown(test_concurrent, setup, teardown),
                cmocka_unit_test_setup_teardown(test_splice_unverified, setup, teardown),
                cmocka_unit_test_setup_teardown(test_open_nowait, setup, teardown),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
