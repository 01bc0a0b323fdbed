/* CRC32C: a table for any CPU and three x86-64 hardware paths, identical results (tests compare
 * them with the original single-stream code on random inputs).
 *
 * Why several streams: one crc32 instruction has a latency of 3 cycles and a throughput of one
 * per cycle, so a single dependent chain uses a third of the unit (8 bytes per 3 cycles, about
 * 8 GB/s). Three independent chains over three adjacent blocks keep it busy; their results are
 * joined by "shifting" the earlier CRCs over the later blocks, a multiplication by x^(8n) modulo
 * the polynomial that one carry-less multiply does. Folding with VPCLMULQDQ goes further: it
 * keeps 4 x 512 bits of message and multiplies them forward 256 bytes at a time, so the
 * bandwidth is that of the vector unit, and only the last 16 bytes meet the crc32 instruction.
 *
 * Bit order: CRC32C is reflected. A 32-bit value r stands for the polynomial whose x^(31-i)
 * coefficient is bit i of r; 8 message bytes loaded little-endian stand for a polynomial of
 * degree 63 the same way. The carry-less product of a 64-bit and a 32-bit reflected value, read
 * as a reflected 128-bit value, is their polynomial product times x^33; hence the constants
 * x^(n-33) below. */
#include "common/crc32c.h"

#include <pthread.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#define POLY 0x82F63B78u /* reflected, without x^32 */

static uint32_t table[8][256];
static enum shoal_crc32c_impl active = SHOAL_CRC32C_TABLE;
static bool avail[SHOAL_CRC32C_NIMPL];

/* x^N mod P, reflected. */
static uint32_t xpow(unsigned n)
{
        uint32_t v = 0x80000000u; /* x^0 */
        while (n--)
                v = (v & 1) ? (v >> 1) ^ POLY : v >> 1;
        return v;
}

static void init_table(void)
{
        for (uint32_t i = 0; i < 256; i++) {
                uint32_t c = i;
                for (int k = 0; k < 8; k++)
                        c = (c & 1) ? (c >> 1) ^ POLY : c >> 1;
                table[0][i] = c;
        }
        for (uint32_t i = 0; i < 256; i++)
                for (int t = 1; t < 8; t++)
                        table[t][i] = (table[t - 1][i] >> 8) ^ table[0][table[t - 1][i] & 0xff];
}

static uint32_t crc_sw(uint32_t crc, const unsigned char *p, size_t len)
{
        while (len && ((uintptr_t)p & 7)) {
                crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
                len--;
        }
        while (len >= 8) {
                uint64_t w;
                memcpy(&w, p, 8);
                w ^= crc;
                crc = table[7][w & 0xff] ^ table[6][(w >> 8) & 0xff] ^ table[5][(w >> 16) & 0xff] ^
                      table[4][(w >> 24) & 0xff] ^ table[3][(w >> 32) & 0xff] ^
                      table[2][(w >> 40) & 0xff] ^ table[1][(w >> 48) & 0xff] ^
                      table[0][(w >> 56) & 0xff];
                p += 8;
                len -= 8;
        }
        while (len--)
                crc = table[0][(crc ^ *p++) & 0xff] ^ (crc >> 8);
        return crc;
}

#if defined(__x86_64__)

/* Block sizes of the three-stream path (bytes per stream per round) and their shift constants:
 * k[0] moves the first stream's CRC over two blocks, k[1] the second's over one. */
#define X3_LONG  4096
#define X3_SHORT 256
static uint64_t x3_long_k[2], x3_short_k[2];

/* Fold constants per distance D bits: lo multiplies the first 8 bytes of a 16-byte lane
 * (x^(D+64-33)), hi the last 8 (x^(D-33)). */
static uint64_t fold_k[5][2]; /* D = 2048, 512, 384, 256, 128 */
enum {
        F2048,
        F512,
        F384,
        F256,
        F128
};

static void init_consts(void)
{
        x3_long_k[0] = xpow(2 * X3_LONG * 8 - 33);
        x3_long_k[1] = xpow(X3_LONG * 8 - 33);
        x3_short_k[0] = xpow(2 * X3_SHORT * 8 - 33);
        x3_short_k[1] = xpow(X3_SHORT * 8 - 33);
        static const unsigned d[5] = {2048, 512, 384, 256, 128};
        for (int i = 0; i < 5; i++) {
                fold_k[i][0] = xpow(d[i] + 31);
                fold_k[i][1] = xpow(d[i] - 33);
        }
}

/* One stream of 8-byte crc32 instructions: the original hardware path. */
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t crc, const unsigned char *p,
                                                         size_t len)
{
        uint64_t c = crc;
        while (len && ((uintptr_t)p & 7)) {
                c = _mm_crc32_u8((uint32_t)c, *p++);
                len--;
        }
        while (len >= 32) {
                uint64_t a, b, d, e;
                memcpy(&a, p, 8);
                memcpy(&b, p + 8, 8);
                memcpy(&d, p + 16, 8);
                memcpy(&e, p + 24, 8);
                c = _mm_crc32_u64(c, a);
                c = _mm_crc32_u64(c, b);
                c = _mm_crc32_u64(c, d);
                c = _mm_crc32_u64(c, e);
                p += 32;
                len -= 32;
        }
        while (len >= 8) {
                uint64_t a;
                memcpy(&a, p, 8);
                c = _mm_crc32_u64(c, a);
                p += 8;
                len -= 8;
        }
        while (len--)
                c = _mm_crc32_u8((uint32_t)c, *p++);
        return (uint32_t)c;
}

static inline uint64_t load64(const unsigned char *p)
{
        uint64_t w;
        memcpy(&w, p, 8);
        return w;
}

/* CRC R shifted over the bytes whose constant is K, as 64 bits for crc32_u64(0, .) to reduce. */
__attribute__((target("pclmul,sse4.2"))) static inline uint64_t shift_k(uint32_t r, uint64_t k)
{
        __m128i v = _mm_clmulepi64_si128(_mm_cvtsi32_si128((int)r), _mm_cvtsi64_si128((long long)k),
                                         0x00);
        return (uint64_t)_mm_cvtsi128_si64(v);
}

/* One round over three adjacent blocks of B bytes at P, register C in, register out. The
 * shifted CRCs of the first two blocks are XORed into the third block's last word: crc32 is
 * linear in that word, so this adds their contribution without extra reductions. */
__attribute__((target("pclmul,sse4.2"))) static inline uint64_t
x3_round(uint64_t c, const unsigned char *p, size_t b, const uint64_t k[2])
{
        uint64_t c1 = 0, c2 = 0;
        const unsigned char *p1 = p + b, *p2 = p + 2 * b;
        for (size_t i = 0; i < b - 8; i += 8) {
                c = _mm_crc32_u64(c, load64(p + i));
                c1 = _mm_crc32_u64(c1, load64(p1 + i));
                c2 = _mm_crc32_u64(c2, load64(p2 + i));
        }
        c = _mm_crc32_u64(c, load64(p + b - 8));
        c1 = _mm_crc32_u64(c1, load64(p1 + b - 8));
        uint64_t v = shift_k((uint32_t)c, k[0]) ^ shift_k((uint32_t)c1, k[1]);
        return _mm_crc32_u64(c2, load64(p2 + b - 8) ^ v);
}

__attribute__((target("pclmul,sse4.2"))) static uint32_t crc_x3(uint32_t crc,
                                                                const unsigned char *p, size_t len)
{
        uint64_t c = crc;
        while (len && ((uintptr_t)p & 7)) {
                c = _mm_crc32_u8((uint32_t)c, *p++);
                len--;
        }
        for (; len >= 3 * X3_LONG; p += 3 * X3_LONG, len -= 3 * X3_LONG)
                c = x3_round(c, p, X3_LONG, x3_long_k);
        for (; len >= 3 * X3_SHORT; p += 3 * X3_SHORT, len -= 3 * X3_SHORT)
                c = x3_round(c, p, X3_SHORT, x3_short_k);
        return crc_hw((uint32_t)c, p, len);
}

static inline __m128i k128(int i)
{
        return _mm_set_epi64x((long long)fold_k[i][1], (long long)fold_k[i][0]);
}

/* A 16-byte lane X moved forward by the distance of K, XORed with D. */
__attribute__((target("pclmul,sse4.2"))) static inline __m128i fold128(__m128i x, __m128i k,
                                                                       __m128i d)
{
        return _mm_xor_si128(
                _mm_xor_si128(_mm_clmulepi64_si128(x, k, 0x00), _mm_clmulepi64_si128(x, k, 0x11)),
                d);
}

__attribute__((target("avx512f,vpclmulqdq"))) static inline __m512i fold512(__m512i x, __m512i k,
                                                                            __m512i d)
{
        return _mm512_ternarylogic_epi64(_mm512_clmulepi64_epi128(x, k, 0x00),
                                         _mm512_clmulepi64_epi128(x, k, 0x11), d, 0x96);
}

__attribute__((target("avx512f,vpclmulqdq"))) static inline __m512i k512(int i)
{
        long long lo = (long long)fold_k[i][0], hi = (long long)fold_k[i][1];
        return _mm512_set_epi64(hi, lo, hi, lo, hi, lo, hi, lo);
}

/* Four 64-byte accumulators fold 256 bytes per step; they are then folded into one, its four
 * 16-byte lanes into one, the rest of the 16-byte lanes folded in, and the last 16 bytes of
 * "message" that result are reduced by two crc32 instructions (CRC with register 0 over them
 * equals the CRC of everything folded so far). */
__attribute__((target("avx512f,vpclmulqdq,pclmul,sse4.2"))) static uint32_t
crc_vpclmul(uint32_t crc, const unsigned char *p, size_t len)
{
        if (len < 256)
                return crc_x3(crc, p, len);
        __m512i x0 = _mm512_loadu_si512(p), x1 = _mm512_loadu_si512(p + 64),
                x2 = _mm512_loadu_si512(p + 128), x3 = _mm512_loadu_si512(p + 192);
        x0 = _mm512_xor_si512(x0, _mm512_zextsi128_si512(_mm_cvtsi32_si128((int)crc)));
        p += 256;
        len -= 256;
        __m512i k = k512(F2048);
        for (; len >= 256; p += 256, len -= 256) {
                x0 = fold512(x0, k, _mm512_loadu_si512(p));
                x1 = fold512(x1, k, _mm512_loadu_si512(p + 64));
                x2 = fold512(x2, k, _mm512_loadu_si512(p + 128));
                x3 = fold512(x3, k, _mm512_loadu_si512(p + 192));
        }
        k = k512(F512);
        x0 = fold512(x0, k, x1);
        x0 = fold512(x0, k, x2);
        x0 = fold512(x0, k, x3);
        for (; len >= 64; p += 64, len -= 64)
                x0 = fold512(x0, k, _mm512_loadu_si512(p));
        __m128i a = _mm512_extracti32x4_epi32(x0, 3);
        a = fold128(_mm512_extracti32x4_epi32(x0, 2), k128(F128), a);
        a = fold128(_mm512_extracti32x4_epi32(x0, 1), k128(F256), a);
        a = fold128(_mm512_extracti32x4_epi32(x0, 0), k128(F384), a);
        for (; len >= 16; p += 16, len -= 16)
                a = fold128(a, k128(F128), _mm_loadu_si128((const __m128i *)p));
        uint64_t c = _mm_crc32_u64(0, (uint64_t)_mm_cvtsi128_si64(a));
        c = _mm_crc32_u64(c, (uint64_t)_mm_extract_epi64(a, 1));
        while (len--)
                c = _mm_crc32_u8((uint32_t)c, *p++);
        return (uint32_t)c;
}
#endif

static void detect(void)
{
        init_table();
        avail[SHOAL_CRC32C_TABLE] = true;
#if defined(__x86_64__)
        init_consts();
        __builtin_cpu_init();
        bool sse42 = __builtin_cpu_supports("sse4.2");
        bool pclmul = sse42 && __builtin_cpu_supports("pclmul");
        avail[SHOAL_CRC32C_SSE42] = sse42;
        avail[SHOAL_CRC32C_SSE42X3] = pclmul;
        /* __builtin_cpu_supports also checks that the OS saves the AVX-512 state (XCR0). */
        avail[SHOAL_CRC32C_VPCLMUL] =
                pclmul && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("vpclmulqdq");
#endif
        for (int i = 0; i < SHOAL_CRC32C_NIMPL; i++)
                if (avail[i])
                        active = (enum shoal_crc32c_impl)i;
}

static pthread_once_t once = PTHREAD_ONCE_INIT;

static uint32_t run(enum shoal_crc32c_impl impl, uint32_t crc, const unsigned char *p, size_t len)
{
        switch (impl) {
#if defined(__x86_64__)
        case SHOAL_CRC32C_VPCLMUL:
                return crc_vpclmul(crc, p, len);
        case SHOAL_CRC32C_SSE42X3:
                return crc_x3(crc, p, len);
        case SHOAL_CRC32C_SSE42:
                return crc_hw(crc, p, len);
#endif
        default:
                return crc_sw(crc, p, len);
        }
}

uint32_t shoal_crc32c(uint32_t crc, const void *data, size_t len)
{
        pthread_once(&once, detect);
        return ~run(active, ~crc, data, len);
}

bool shoal_crc32c_impl_available(enum shoal_crc32c_impl impl)
{
        pthread_once(&once, detect);
        return impl >= 0 && impl < SHOAL_CRC32C_NIMPL && avail[impl];
}

const char *shoal_crc32c_impl_name(enum shoal_crc32c_impl impl)
{
        static const char *const names[SHOAL_CRC32C_NIMPL] = {"table", "sse4.2", "sse4.2x3+pclmul",
                                                              "avx512-vpclmul"};
        return impl >= 0 && impl < SHOAL_CRC32C_NIMPL ? names[impl] : "?";
}

enum shoal_crc32c_impl shoal_crc32c_impl_active(void)
{
        pthread_once(&once, detect);
        return active;
}

uint32_t shoal_crc32c_with(enum shoal_crc32c_impl impl, uint32_t crc, const void *data, size_t len)
{
        if (!shoal_crc32c_impl_available(impl))
                impl = SHOAL_CRC32C_TABLE;
        return ~run(impl, ~crc, data, len);
}
