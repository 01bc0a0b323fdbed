/* CRC32C: every implementation the CPU runs (src/common/crc32c.c) against the original code,
 * kept here verbatim as the reference (one SSE4.2 stream, and the slicing-by-8 table), on random
 * data of random lengths, alignments and initial CRCs; and shoal_chunk_crc, the seeded per-chunk
 * CRC that every transport checks, against the reference. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/block.h"
#include "common/crc32c.h"
#include "common/util.h"

/* ---- the reference: the implementation before the interleaved and folding paths ----------- */

static uint32_t ref_table[8][256];

static void ref_init(void)
{
        for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;
                for (int k = 0; k < 8; k++)
                        c = (c & 1) ? (c >> 1) ^ 0x82F63B78u : c >> 1;
                ref_table[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++)
                for (int t = 1; t < 8; t++)
                        ref_table[t][i] = (ref_table[t - 1][i] >> 8) ^
                                          ref_table[0][ref_table[t - 1][i] & 0xff];
}

static uint32_t ref_sw(uint32_t crc, const unsigned char *p, size_t len)
{
        while (len && ((uintptr_t)p & 7)) {
                crc = ref_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
                len--;
        }
        while (len >= 8) {
                uint64_t w;
                memcpy(&w, p, 8);
                w ^= crc;
                crc = ref_table[7][w & 0xff] ^ ref_table[6][(w >> 8) & 0xff] ^
                      ref_table[5][(w >> 16) & 0xff] ^ ref_table[4][(w >> 24) & 0xff] ^
                      ref_table[3][(w >> 32) & 0xff] ^ ref_table[2][(w >> 40) & 0xff] ^
                      ref_table[1][(w >> 48) & 0xff] ^ ref_table[0][(w >> 56) & 0xff];
                p += 8;
                len -= 8;
        }
        while (len--)
                crc = ref_table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        return crc;
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t ref_hw(uint32_t crc, const unsigned char *p,
                                                         size_t len)
{
        uint64_t c = crc;
        while (len && ((uintptr_t)p & 7)) {
                c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
                len--;
        }
        while (len >= 32) {
                uint64_t a, b, d, e;
                memcpy(&a, p, 8);
                memcpy(&b, p + 8, 8);
                memcpy(&d, p + 16, 8);
                memcpy(&e, p + 24, 8);
                c = __builtin_ia32_crc32di(c, a);
                c = __builtin_ia32_crc32di(c, b);
                c = __builtin_ia32_crc32di(c, d);
                c = __builtin_ia32_crc32di(c, e);
                p += 32;
                len -= 32;
        }
        while (len >= 8) {
                uint64_t a;
                memcpy(&a, p, 8);
                c = __builtin_ia32_crc32di(c, a);
                p += 8;
                len -= 8;
        }
        while (len--)
                c = __builtin_ia32_crc32qi((uint32_t)c, *p++);
        return (uint32_t)c;
}
#endif

/* The reference CRC of [P, P+LEN) continuing CRC; the hardware reference is checked against
 * the table one on every call, so a fault in either shows. */
static uint32_t ref_crc(uint32_t crc, const void *p, size_t len)
{
        uint32_t sw = ~ref_sw(~crc, p, len);
#if defined(__x86_64__)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("sse4.2"))
                assert_int_equal(~ref_hw(~crc, p, len), sw);
#endif
        return sw;
}

/* ---- tests ----------------------------------------------------------------------------------- */

#define BUF_LEN (3u * 65536u + 4096u)

static unsigned char *buf;
static uint64_t rng = 0x9E3779B97F4A7C15ULL;

static uint64_t next_rand(void)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

static int setup(void **state)
{
        ref_init();
        buf = malloc(BUF_LEN + 64);
        if (!buf || shoal_random_bytes(&rng, sizeof(rng)) || shoal_random_bytes(buf, BUF_LEN + 64))
                return -1;
        rng |= 1;
        print_message("crc32c: seed 0x%016llx, active %s\n", (unsigned long long)rng,
                      shoal_crc32c_impl_name(shoal_crc32c_impl_active()));
        return 0;
}

static int teardown(void **state)
{
        free(buf);
        return 0;
}

/* Every available implementation, shoal_crc32c itself and the continuation of a CRC split in
 * two calls agree with the reference on [buf+OFF, +LEN) from CRC. */
static void check_all(uint32_t crc, size_t off, size_t len)
{
        const unsigned char *p = buf + off;
        uint32_t want = ref_crc(crc, p, len);
        for (int i = 0; i < SHOAL_CRC32C_NIMPL; i++) {
                if (!shoal_crc32c_impl_available(i))
                        continue;
                uint32_t got = shoal_crc32c_with(i, crc, p, len);
                if (got != want)
                        fail_msg("%s: len %zu off %zu crc %08x: got %08x want %08x",
                                 shoal_crc32c_impl_name(i), len, off, crc, got, want);
        }
        assert_int_equal(shoal_crc32c(crc, p, len), want);
        size_t cut = len ? next_rand() % (len + 1) : 0;
        assert_int_equal(shoal_crc32c(shoal_crc32c(crc, p, cut), p + cut, len - cut), want);
}

static void test_vectors(void **state)
{
        /* RFC 3720 B.4 and the classic check value. */
        unsigned char v[32];
        assert_int_equal(shoal_crc32c(0, "123456789", 9), 0xE3069283u);
        memset(v, 0, sizeof(v));
        assert_int_equal(shoal_crc32c(0, v, 32), 0x8A9136AAu);
        memset(v, 0xff, sizeof(v));
        assert_int_equal(shoal_crc32c(0, v, 32), 0x62A8AB43u);
        for (int i = 0; i < 32; i++)
                v[i] = (unsigned char)i;
        assert_int_equal(shoal_crc32c(0, v, 32), 0x46DD794Eu);
        for (int i = 0; i < SHOAL_CRC32C_NIMPL; i++)
                if (shoal_crc32c_impl_available(i))
                        assert_int_equal(shoal_crc32c_with(i, 0, "123456789", 9), 0xE3069283u);
        assert_int_equal(shoal_crc32c(0x1234, v, 0), 0x1234);
}

/* The hardware paths are the ones in use where the CPU has them: a silent fall back to the
 * table would cost 5x and hide here. */
static void test_dispatch(void **state)
{
        assert_true(shoal_crc32c_impl_available(SHOAL_CRC32C_TABLE));
        enum shoal_crc32c_impl a = shoal_crc32c_impl_active();
        for (int i = a + 1; i < SHOAL_CRC32C_NIMPL; i++)
                assert_false(shoal_crc32c_impl_available(i));
#if defined(__x86_64__)
        __builtin_cpu_init();
        if (__builtin_cpu_supports("sse4.2") && __builtin_cpu_supports("pclmul"))
                assert_true(a >= SHOAL_CRC32C_SSE42X3);
        if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq"))
                assert_int_equal(a, SHOAL_CRC32C_VPCLMUL);
#endif
        for (int i = 0; i < SHOAL_CRC32C_NIMPL; i++)
                print_message("crc32c: %-16s %s\n", shoal_crc32c_impl_name(i),
                              shoal_crc32c_impl_available(i) ? "available" : "-");
}

/* Every length up to 2 KiB (all the tails and the 256-byte and 768-byte thresholds) at every
 * alignment modulo 8 and a few more. */
static void test_small_lengths(void **state)
{
        for (size_t len = 0; len <= 2048; len++)
                for (size_t off = 0; off < 12; off++)
                        check_all((uint32_t)next_rand(), off + (off >= 8 ? 53 : 0), len);
}

/* The edges of each path's blocks: 3-stream rounds of 768 and 12288 bytes, 256-byte folding
 * strides, 64- and 16-byte steps, a 64 KiB chunk, plus and minus a little. */
static void test_edges(void **state)
{
        static const size_t base[] = {64,    128,   255,   256,    320,   512,   767,
                                      768,   1024,  1536,  4096,   8192,  12288, 24576,
                                      36864, 61440, 65536, 131072, 196608};
        for (size_t b = 0; b < sizeof(base) / sizeof(base[0]); b++)
                for (int d = -17; d <= 17; d++)
                        for (size_t off = 0; off < 64; off += 7)
                                if ((long)base[b] + d >= 0)
                                        check_all((uint32_t)next_rand(), off,
                                                  (size_t)((long)base[b] + d));
}

/* Random lengths, alignments and initial CRCs: mostly short, some up to three chunks. */
static void test_random(void **state)
{
        for (int i = 0; i < 6000; i++) {
                size_t max = (i % 10 == 0) ? BUF_LEN : 8192;
                size_t len = next_rand() % (max + 1);
                size_t off = next_rand() % 64;
                check_all((uint32_t)next_rand(), off, len);
        }
}

/* The same bytes with one bit flipped anywhere give a different CRC in every path (folding
 * constants that dropped a lane would not see flips in it). */
static void test_bit_flips(void **state)
{
        size_t len = 65536 + 300;
        uint32_t clean = ref_crc(0, buf, len);
        for (int i = 0; i < 2000; i++) {
                size_t bit = next_rand() % (len * 8);
                buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
                for (int k = 0; k < SHOAL_CRC32C_NIMPL; k++)
                        if (shoal_crc32c_impl_available(k))
                                assert_int_not_equal(shoal_crc32c_with(k, 0, buf, len), clean);
                buf[bit / 8] ^= (unsigned char)(1u << (bit % 8));
        }
        assert_int_equal(shoal_crc32c(0, buf, len), clean);
}

/* shoal_chunk_crc: the CRC seeded with block id and chunk index, over whole and short chunks at
 * any alignment, equals the reference computed the way the original code did. */
static void test_chunk_crc(void **state)
{
        for (int i = 0; i < 300; i++) {
                struct shoal_block_id id;
                for (size_t k = 0; k < sizeof(id.b); k++)
                        id.b[k] = (uint8_t)next_rand();
                uint32_t chunk = (uint32_t)(next_rand() % SHOAL_MAX_CHUNKS);
                size_t len = (i % 3) ? SHOAL_CHUNK_SIZE : next_rand() % (SHOAL_CHUNK_SIZE + 1);
                size_t off = next_rand() % 64;
                unsigned char seed[SHOAL_BLOCK_ID_LEN + 4];
                memcpy(seed, id.b, SHOAL_BLOCK_ID_LEN);
                for (int k = 0; k < 4; k++)
                        seed[SHOAL_BLOCK_ID_LEN + k] = (unsigned char)(chunk >> (8 * k));
                uint32_t want = ref_crc(ref_crc(0, seed, sizeof(seed)), buf + off, len);
                assert_int_equal(shoal_chunk_crc(&id, chunk, buf + off, len), want);
        }
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_vectors),       cmocka_unit_test(test_dispatch),
                cmocka_unit_test(test_small_lengths), cmocka_unit_test(test_edges),
                cmocka_unit_test(test_random),        cmocka_unit_test(test_bit_flips),
                cmocka_unit_test(test_chunk_crc),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
