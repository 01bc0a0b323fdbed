/* The read path on one node: random ranges byte-exact through buffers, local cache and store,
 * including partial fills of a block from the cache followed by reads of its other chunks, with
 * buffers evicted under pressure and several threads at once. */
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

#include "cache/cache.h"
#include "client/reader.h"
#include "client/reader_internal.h"
#include "client/spread.h"
#include "metrics/metrics.h"
#include "common/util.h"
#include "store/store.h"

#define OBJ_SIZE (10u * 1024 * 1024 + 4321)

struct env {
        char dir[64];
        char url[128];
        char cache_dir[128];
        struct shoal_volume vol;
        struct shoal_store *store;
        struct shoal_cache *cache;
        struct shoal_object obj;
        unsigned char *data;
};

static struct env *env_new(uint32_t block_size)
{
        struct env *e = calloc(1, sizeof(*e));
        snprintf(e->dir, sizeof(e->dir), "/tmp/shoal-reader.XXXXXX");
        assert_non_null(mkdtemp(e->dir));
        snprintf(e->url, sizeof(e->url), "file://%s/store", e->dir);
        snprintf(e->cache_dir, sizeof(e->cache_dir), "%s/cache", e->dir);
        char path[256];
        snprintf(path, sizeof(path), "%s/store", e->dir);
        assert_int_equal(mkdir(path, 0755), 0);
        snprintf(path, sizeof(path), "%s/store/obj", e->dir);
        e->data = malloc(OBJ_SIZE);
        assert_int_equal(shoal_random_bytes(e->data, OBJ_SIZE), 0);
        FILE *f = fopen(path, "wb");
        assert_non_null(f);
        assert_int_equal(fwrite(e->data, 1, OBJ_SIZE, f), OBJ_SIZE);
        fclose(f);
        assert_int_equal(shoal_volume_init(&e->vol, e->url, block_size), 0);
        char err[256];
        struct shoal_store_config sc = {.url = e->url};
        assert_int_equal(shoal_store_open(&sc, &e->store, err, sizeof(err)), 0);
        struct shoal_cache_config cc = {.dirs = e->cache_dir,
                                        .size_bytes = 1 << 30,
                                        .free_space_ratio = 0,
                                        .volume = &e->vol};
        assert_int_equal(shoal_cache_open(&cc, &e->cache, err, sizeof(err)), 0);
        assert_int_equal(shoal_store_stat(e->store, "obj", &e->obj), 0);
        return e;
}

static void env_free(struct env *e)
{
        shoal_cache_close(e->cache);
        shoal_store_close(e->store);
        char cmd[128];
        snprintf(cmd, sizeof(cmd), "rm -rf %s", e->dir);
        assert_int_equal(system(cmd), 0);
        free(e->data);
        free(e);
}

static struct shoal_reader *reader_new(struct env *e, uint64_t buffer_bytes, unsigned readahead)
{
        char err[256];
        struct shoal_reader_config rc = {.vol = &e->vol,
                                         .store = e->store,
                                         .cache = e->cache,
                                         .buffer_bytes = buffer_bytes,
                                         .readahead = readahead,
                                         .prefetch_threads = readahead ? 2 : 0};
        struct shoal_reader *r = shoal_reader_create(&rc, err, sizeof(err));
        assert_non_null(r);
        return r;
}

static void check_range(struct shoal_reader *r, struct env *e, uint64_t off, size_t len,
                        struct shoal_stream *s)
{
        unsigned char *buf = malloc(len + 1);
        long n = shoal_reader_read(r, &e->obj, off, len, buf, s);
        size_t want = off >= OBJ_SIZE ? 0 : (size_t)SHOAL_MIN((uint64_t)len, OBJ_SIZE - off);
        assert_int_equal(n, (long)want);
        if (want)
                assert_memory_equal(buf, e->data + off, want);
        free(buf);
}

/* A block filled partly from the cache, then read elsewhere: never stale buffer bytes. */
static void test_partial_fill_from_cache(void **state)
{
        (void)state;
        struct env *e = env_new(4u << 20);
        struct shoal_reader *r = reader_new(e, 0, 0);
        check_range(r, e, 0, OBJ_SIZE, NULL); /* fills the cache */
        shoal_reader_destroy(r);
        /* Dirty every buffer with another object's bytes first: a new reader reuses them. */
        r = reader_new(e, 0, 0);
        check_range(r, e, (1u << 20) + 5, 70000, NULL);
        check_range(r, e, 0, 1u << 20, NULL);
        check_range(r, e, 3u << 20, 2u << 20, NULL);
        check_range(r, e, OBJ_SIZE - 10, 100, NULL);
        check_range(r, e, OBJ_SIZE, 100, NULL);
        shoal_reader_destroy(r);
        env_free(e);
}

#define CHUNK SHOAL_CHUNK_SIZE

static void mark(uint64_t *valid, uint32_t first, uint32_t end)
{
        for (uint32_t c = first; c < end; c++)
                valid[c / 64] |= 1ULL << (c % 64);
}

/* Every edge of the missing-range arithmetic: nothing it returns is empty, wraps or runs past the
 * block, whatever the bitmap says. */
static void test_missing_range_edges(void **state)
{
        (void)state;
        uint64_t valid[SHOAL_READER_VALID_WORDS] = {0};
        uint32_t moff = 7, mlen = 7;
        const uint32_t M4 = 4u << 20;

        /* Length 0, an empty block, a block past the largest, an unaligned start. */
        assert_int_equal(shoal_reader_missing_range(valid, M4, 0, 0, &moff, &mlen), -EINVAL);
        assert_int_equal(shoal_reader_missing_range(valid, M4, CHUNK, 0, &moff, &mlen), -EINVAL);
        assert_int_equal(shoal_reader_missing_range(valid, 0, 0, CHUNK, &moff, &mlen), -EINVAL);
        assert_int_equal(shoal_reader_missing_range(valid, SHOAL_BLOCK_SIZE_MAX + CHUNK, 0, CHUNK,
                                                    &moff, &mlen),
                         -EINVAL);
        assert_int_equal(shoal_reader_missing_range(valid, M4, 100, CHUNK, &moff, &mlen), -EINVAL);
        /* Past the end: a range of a longer block than this one (the short-claim attack), a
         * range ending mid-chunk before the block's end, a start past the end, and offsets
         * whose sum wraps 32 bits. */
        assert_int_equal(shoal_reader_missing_range(valid, CHUNK, 0, M4, &moff, &mlen), -EINVAL);
        assert_int_equal(shoal_reader_missing_range(valid, 100000, 0, 131072, &moff, &mlen),
                         -EINVAL);
        assert_int_equal(shoal_reader_missing_range(valid, M4, 0, 100, &moff, &mlen), -EINVAL);
        assert_int_equal(shoal_reader_missing_range(valid, M4, M4, CHUNK, &moff, &mlen), -EINVAL);
        assert_int_equal(
                shoal_reader_missing_range(valid, M4, UINT32_MAX - CHUNK + 1, CHUNK, &moff, &mlen),
                -EINVAL);
        assert_int_equal(shoal_reader_missing_range(valid, M4, CHUNK, UINT32_MAX, &moff, &mlen),
                         -EINVAL);
        assert_int_equal(moff, 7); /* nothing written on a refusal */
        assert_int_equal(mlen, 7);

        /* Chunk boundary: a one-chunk block, nothing valid. */
        assert_int_equal(shoal_reader_missing_range(valid, CHUNK, 0, CHUNK, &moff, &mlen), 0);
        assert_int_equal(moff, 0);
        assert_int_equal(mlen, CHUNK);
        /* A block ending mid-chunk, its first chunk valid: only the short last chunk. */
        mark(valid, 0, 1);
        assert_int_equal(shoal_reader_missing_range(valid, 100000, 0, 100000, &moff, &mlen), 0);
        assert_int_equal(moff, CHUNK);
        assert_int_equal(mlen, 100000 - CHUNK);
        /* Every chunk of it valid: nothing missing, and it says so rather than a 0-byte fill. */
        mark(valid, 1, 2);
        assert_int_equal(shoal_reader_missing_range(valid, 100000, 0, 100000, &moff, &mlen),
                         -ENODATA);
        assert_int_equal(
                shoal_reader_missing_range(valid, 100000, CHUNK, 100000 - CHUNK, &moff, &mlen),
                -ENODATA);
        /* Holes: the first run only, never across valid chunks (others may be reading them),
         * clipped to the asked range. */
        memset(valid, 0, sizeof(valid));
        mark(valid, 0, 64);
        valid[0] &= ~(1ULL << 5 | 1ULL << 9 | 1ULL << 10);
        assert_int_equal(shoal_reader_missing_range(valid, M4, 0, M4, &moff, &mlen), 0);
        assert_int_equal(moff, 5 * CHUNK);
        assert_int_equal(mlen, CHUNK);
        assert_int_equal(
                shoal_reader_missing_range(valid, M4, 6 * CHUNK, M4 - 6 * CHUNK, &moff, &mlen), 0);
        assert_int_equal(moff, 9 * CHUNK);
        assert_int_equal(mlen, 2 * CHUNK);
        assert_int_equal(shoal_reader_missing_range(valid, M4, 6 * CHUNK, 2 * CHUNK, &moff, &mlen),
                         -ENODATA);
        assert_int_equal(shoal_reader_missing_range(valid, M4, 6 * CHUNK, 4 * CHUNK, &moff, &mlen),
                         0);
        assert_int_equal(moff, 9 * CHUNK);
        assert_int_equal(mlen, CHUNK); /* clipped to the asked range */
        /* The last chunk of the largest block. */
        memset(valid, 0, sizeof(valid));
        mark(valid, 0, SHOAL_MAX_CHUNKS - 1);
        assert_int_equal(shoal_reader_missing_range(valid, SHOAL_BLOCK_SIZE_MAX, 0,
                                                    SHOAL_BLOCK_SIZE_MAX, &moff, &mlen),
                         0);
        assert_int_equal(moff, SHOAL_BLOCK_SIZE_MAX - CHUNK);
        assert_int_equal(mlen, CHUNK);
}

/* A block is never handed out with a length other than the one asked: a holder with another
 * idea of the object gets -ESTALE (never a short buffer, never a spin), an unreferenced block of
 * another length is dropped, and reads with the true size stay exact. */
static void test_block_length_mismatch(void **state)
{
        (void)state;
        struct env *e = env_new(4u << 20);
        struct shoal_reader *r = reader_new(e, 8u << 20, 0);
        struct shoal_object shortobj = e->obj;
        struct shoal_held_block hb, hb2;

        /* Index 0 as a 64 KiB block (a claim ending on a chunk boundary) and index 1 as one
         * ending mid-chunk, held while the true size asks. */
        shortobj.size = CHUNK;
        assert_int_equal(shoal_reader_hold_block(r, &shortobj, 0, &hb), 0);
        assert_int_equal(hb.len, CHUNK);
        assert_memory_equal(hb.data, e->data, CHUNK);
        assert_int_equal(shoal_reader_hold_block(r, &e->obj, 0, &hb2), -ESTALE);
        unsigned char *buf = malloc(OBJ_SIZE);
        assert_int_equal(shoal_reader_read(r, &e->obj, 0, 3 * CHUNK, buf, NULL), -ESTALE);
        shoal_reader_release(r, &hb);
        /* Unreferenced now: the true size takes the block over and reads it whole. */
        assert_int_equal(shoal_reader_hold_block(r, &e->obj, 0, &hb2), 0);
        assert_int_equal(hb2.len, 4u << 20);
        assert_memory_equal(hb2.data, e->data, 4u << 20);
        shoal_reader_release(r, &hb2);

        shortobj.size = (4u << 20) + 100000;
        assert_int_equal(shoal_reader_hold_block(r, &shortobj, 1, &hb), 0);
        assert_int_equal(hb.len, 100000);
        assert_int_equal(shoal_reader_hold_block(r, &e->obj, 1, &hb2), -ESTALE);
        shoal_reader_release(r, &hb);
        check_range(r, e, 0, OBJ_SIZE, NULL);

        /* Past the end, and a length the store does not have (a longer claim): errors. */
        assert_int_equal(shoal_reader_hold_block(r, &e->obj, 3, &hb), -EINVAL);
        shortobj.size = OBJ_SIZE + (8u << 20);
        assert_int_not_equal(shoal_reader_hold_block(r, &shortobj, 2, &hb), 0);
        check_range(r, e, 0, OBJ_SIZE, NULL);
        free(buf);
        shoal_reader_destroy(r);
        env_free(e);
}

static void test_random_ranges(void **state)
{
        (void)state;
        struct env *e = env_new(1u << 20);
        /* 4 buffers (the minimum) for 11 blocks: constant eviction. */
        struct shoal_reader *r = reader_new(e, 0, 0);
        for (int i = 0; i < 400; i++) {
                uint64_t off = shoal_rand64() % (OBJ_SIZE + 1000);
                size_t len = 1 + shoal_rand64() % (3u << 20);
                check_range(r, e, off, len, NULL);
        }
        shoal_reader_destroy(r);
        env_free(e);
}

static void test_sequential_readahead(void **state)
{
        (void)state;
        struct env *e = env_new(1u << 20);
        struct shoal_reader *r = reader_new(e, 8u << 20, 3);
        struct shoal_stream s = {0};
        for (uint64_t off = 0; off < OBJ_SIZE; off += 131072)
                check_range(r, e, off, 131072, &s);
        shoal_reader_destroy(r);
        env_free(e);
}

/* Pinned reads hand out the block buffers themselves: the pieces, in order, are the bytes. */
static void test_pinned(void **state)
{
        (void)state;
        struct env *e = env_new(1u << 20);
        struct shoal_reader *r = reader_new(e, 4u << 20, 0); /* 4 buffers */
        for (int i = 0; i < 300; i++) {
                uint64_t off = shoal_rand64() % OBJ_SIZE;
                size_t len = 1 + shoal_rand64() % (3u << 20);
                struct shoal_read_pin pins[8];
                unsigned np = 0;
                long n = shoal_reader_read_pinned(r, &e->obj, off, len, pins, 3, &np, NULL);
                assert_true(n > 0);
                assert_true(np >= 1 && np <= 3);
                size_t at = 0;
                for (unsigned k = 0; k < np; k++) {
                        assert_memory_equal(pins[k].data, e->data + off + at, pins[k].len);
                        at += pins[k].len;
                }
                assert_int_equal(at, (size_t)n);
                /* The rest is read by copy while the pins are still held (buffers may be short:
                 * then a short count, never a wait that could deadlock). */
                if ((uint64_t)n < len && off + (uint64_t)n < OBJ_SIZE)
                        check_range(r, e, off + (uint64_t)n, 4096, NULL);
                shoal_reader_unpin(r, pins, np);
        }
        shoal_reader_destroy(r);
        env_free(e);
}

struct thr {
        struct shoal_reader *r;
        struct env *e;
};

static void *reader_thread(void *arg)
{
        struct thr *t = arg;
        struct shoal_stream s = {0};
        for (int i = 0; i < 150; i++) {
                uint64_t off = shoal_rand64() % OBJ_SIZE;
                size_t len = 1 + shoal_rand64() % (2u << 20);
                check_range(t->r, t->e, off, len, i % 2 ? &s : NULL);
        }
        return NULL;
}

static void test_concurrent(void **state)
{
        (void)state;
        struct env *e = env_new(1u << 20);
        struct shoal_reader *r = reader_new(e, 6u << 20, 2);
        pthread_t th[8];
        struct thr t = {r, e};
        for (int i = 0; i < 8; i++)
                pthread_create(&th[i], NULL, reader_thread, &t);
        for (int i = 0; i < 8; i++)
                pthread_join(th[i], NULL);
        shoal_reader_destroy(r);
        env_free(e);
}

static uint64_t counter(enum shoal_metric_id id)
{
        struct shoal_metrics_snap s;
        assert_int_equal(shoal_metrics_snap_take(&s), 0);
        uint64_t v = s.counters[id];
        shoal_metrics_snap_free(&s);
        return v;
}

struct flight {
        struct shoal_reader *r;
        struct env *e;
        pthread_barrier_t *go;
        uint64_t off;
};

static void *flight_thread(void *arg)
{
        struct flight *f = arg;
        pthread_barrier_wait(f->go);
        check_range(f->r, f->e, f->off, 1u << 20, NULL);
        return NULL;
}

/* Readers of one block in one process share one fill (single flight): eight threads that ask for
 * the same block at the same moment cost one store read, whatever the cache (none here). */
static void test_single_flight(void **state)
{
        (void)state;
        struct env *e = env_new(1u << 20);
        char err[256];
        struct shoal_reader_config rc = {
                .vol = &e->vol, .store = e->store, .buffer_bytes = 8u << 20};
        struct shoal_reader *r = shoal_reader_create(&rc, err, sizeof(err));
        assert_non_null(r);
        for (uint64_t round = 0; round < 4; round++) {
                pthread_barrier_t go;
                pthread_barrier_init(&go, NULL, 8);
                struct flight f = {r, e, &go, (round + 3) << 20};
                pthread_t th[8];
                uint64_t before = counter(SHOAL_M_object_get_requests);
                for (int i = 0; i < 8; i++)
                        pthread_create(&th[i], NULL, flight_thread, &f);
                for (int i = 0; i < 8; i++)
                        pthread_join(th[i], NULL);
                assert_int_equal(counter(SHOAL_M_object_get_requests) - before, 1);
                pthread_barrier_destroy(&go);
        }
        shoal_reader_destroy(r);
        env_free(e);
}

/* When a block's owner counts as busy (client/spread.h): from the BUSY-th read in flight to it,
 * and only towards a next member with fewer; never with one copy; BUSY 1 always. */
static void test_spread_choice(void **state)
{
        (void)state;
        struct shoal_spread *sp = shoal_spread_create(2, 3);
        assert_non_null(sp);
        assert_int_equal(shoal_spread_copies(sp), 2);
        assert_false(shoal_spread_choose_next(sp, "o", "n"));
        shoal_spread_begin(sp, "o");
        assert_false(shoal_spread_choose_next(sp, "o", "n")); /* would be the 2nd */
        shoal_spread_begin(sp, "o");
        assert_true(shoal_spread_choose_next(sp, "o", "n")); /* would be the 3rd */
        shoal_spread_begin(sp, "n");
        shoal_spread_begin(sp, "n");
        assert_false(shoal_spread_choose_next(sp, "o", "n")); /* the next is as busy */
        shoal_spread_end(sp, "n");
        assert_true(shoal_spread_choose_next(sp, "o", "n"));
        assert_int_equal(shoal_spread_inflight(sp, "o"), 2);
        shoal_spread_end(sp, "o");
        shoal_spread_end(sp, "o");
        shoal_spread_end(sp, "o"); /* never below zero */
        assert_int_equal(shoal_spread_inflight(sp, "o"), 0);
        assert_false(shoal_spread_choose_next(sp, "o", "n"));
        /* more members than the table holds: idle ones make room, counts stay right */
        char id[16];
        for (int i = 0; i < 1000; i++) {
                snprintf(id, sizeof(id), "m%d", i);
                shoal_spread_begin(sp, id);
                shoal_spread_end(sp, id);
        }
        assert_int_equal(shoal_spread_inflight(sp, "n"), 1);
        shoal_spread_destroy(sp);

        sp = shoal_spread_create(1, 1); /* one copy: never */
        assert_false(shoal_spread_choose_next(sp, "o", "n"));
        shoal_spread_destroy(sp);
        sp = shoal_spread_create(5, 1); /* at most 2; BUSY 1: every read */
        assert_int_equal(shoal_spread_copies(sp), SHOAL_SPREAD_COPIES_MAX);
        assert_true(shoal_spread_choose_next(sp, "o", "n"));
        shoal_spread_destroy(sp);
        assert_int_not_equal(shoal_spread_hash("v1"), shoal_spread_hash("v2"));
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_partial_fill_from_cache),
                cmocka_unit_test(test_missing_range_edges),
                cmocka_unit_test(test_block_length_mismatch),
                cmocka_unit_test(test_random_ranges),
                cmocka_unit_test(test_sequential_readahead),
                cmocka_unit_test(test_concurrent),
                cmocka_unit_test(test_pinned),
                cmocka_unit_test(test_single_flight),
                cmocka_unit_test(test_spread_choice),
        };
        return cmocka_run_group_tests(tests, NULL, NULL);
}
