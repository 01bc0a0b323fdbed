/* libFuzzer target: cache file headers (src/cache/cache_format.c) as shoal_cache_open_block reads
 * them from a cache disk, whose files anyone with access to the directory may have damaged.
 *
 *   byte 0   mode: bit 0 encode (else decode the rest as a header), bit 1 recompute the header
 *            CRC of the input before decoding (so that the fuzzer reaches past it), bit 2 use the
 *            id written in the header (else the id below)
 *   u32      expected length (0: any) — decode; data length — encode
 *   16 bytes a block id
 *   u32      which byte to flip afterwards (mod the header's checked bytes); u8 the flip mask
 *   rest     the header bytes (decode); the data seed (encode)
 *
 * Decode as cache_disk does: shoal_cache_hdr_peek_len on what one read brought, then
 * shoal_cache_hdr_decode on the whole header. Invariants: an accepted header has the length
 * shoal_cache_hdr_len gives for its data length, fits in what was read, belongs to the block and
 * the expected length asked for, and peek agrees; flipping any one byte it depends on makes it
 * refused. An encoded header decodes back with the CRC of every chunk of its data, and is refused
 * for another block, another length, or when cut short. */
#include <errno.h>

#include "cache/cache_format.h"
#include "common/block.h"
#include "common/crc32c.h"
#include "fuzz_input.h"

#define ENC_MAX (2u * SHOAL_CHUNK_SIZE + 1000)

static unsigned char hdr[SHOAL_CACHE_HDR_MAX];
static uint32_t crcs[SHOAL_MAX_CHUNKS];

static uint32_t get32(const unsigned char *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void put32(unsigned char *p, uint32_t v)
{
        for (int i = 0; i < 4; i++)
                p[i] = (unsigned char)(v >> (8 * i));
}

/* Decodes H[0, AVAIL) for ID and EXPECT; returns the header length or 0. */
static uint32_t decode(const unsigned char *h, size_t avail, const struct shoal_block_id *id,
                       uint32_t expect, uint32_t *dlen)
{
        uint32_t hlen = shoal_cache_hdr_peek_len(h, avail);
        if (!hlen || hlen > avail)
                return 0;
        uint32_t got_hlen = 0;
        if (shoal_cache_hdr_decode(h, hlen, id, expect, &got_hlen, dlen, crcs))
                return 0;
        FZ_CHECK(got_hlen == hlen);
        return hlen;
}

static void check_flip(unsigned char *h, uint32_t hlen, uint32_t dlen,
                       const struct shoal_block_id *id, uint32_t expect, uint32_t pos, uint8_t mask)
{
        /* Every byte up to the end of the CRC table is covered (the padding after it is not). */
        uint32_t covered = SHOAL_CACHE_HDR_FIXED + 4u * shoal_chunk_count(dlen);
        uint32_t p = pos % covered;
        uint8_t m = mask ? mask : 1;
        h[p] ^= m;
        uint32_t d2;
        FZ_CHECK(decode(h, hlen, id, expect, &d2) == 0);
        h[p] ^= m;
}

static void fuzz_decode(struct fz *in, uint8_t mode)
{
        uint32_t expect = (uint32_t)fz_u(in, 4);
        struct shoal_block_id id;
        for (int i = 0; i < SHOAL_BLOCK_ID_LEN; i++)
                id.b[i] = fz_u8(in);
        uint32_t pos = (uint32_t)fz_u(in, 4);
        uint8_t mask = fz_u8(in);
        size_t avail = in->n < sizeof(hdr) ? in->n : sizeof(hdr);
        /* A heap copy of exactly what was read, so that ASan sees a read past it. */
        unsigned char *h = malloc(avail ? avail : 1);
        FZ_CHECK(h);
        memcpy(h, in->p, avail);
        if (mode & 4 && avail >= 32)
                memcpy(id.b, h + 16, SHOAL_BLOCK_ID_LEN);
        if (mode & 2 && avail >= SHOAL_CACHE_HDR_FIXED) {
                uint32_t n = get32(h + 40);
                if ((size_t)SHOAL_CACHE_HDR_FIXED + 4u * (size_t)n <= avail) {
                        uint32_t crc = shoal_crc32c(0, h, 44);
                        put32(h + 44, shoal_crc32c(crc, h + 48, 4u * (size_t)n));
                }
        }
        uint32_t dlen = 0;
        uint32_t hlen = decode(h, avail, &id, expect, &dlen);
        if (hlen) {
                FZ_CHECK(dlen >= 1 && dlen <= SHOAL_BLOCK_SIZE_MAX);
                FZ_CHECK(hlen == shoal_cache_hdr_len(dlen) && hlen <= avail);
                FZ_CHECK(hlen % SHOAL_CACHE_HDR_ALIGN == 0 && hlen <= SHOAL_CACHE_HDR_MAX);
                FZ_CHECK(!expect || expect == dlen);
                FZ_CHECK(!memcmp(h + 16, id.b, SHOAL_BLOCK_ID_LEN));
                for (uint32_t i = 0; i < shoal_chunk_count(dlen); i++)
                        FZ_CHECK(crcs[i] == get32(h + 48 + 4 * i));
                check_flip(h, hlen, dlen, &id, expect, pos, mask);
        }
        free(h);
}

static void fuzz_encode(struct fz *in)
{
        static unsigned char data[ENC_MAX];
        uint32_t len = 1 + (uint32_t)fz_u(in, 4) % ENC_MAX;
        struct shoal_block_id id;
        for (int i = 0; i < SHOAL_BLOCK_ID_LEN; i++)
                id.b[i] = fz_u8(in);
        uint32_t pos = (uint32_t)fz_u(in, 4);
        uint8_t mask = fz_u8(in);
        fz_fill(data, len, fz_u(in, 8));

        uint32_t hlen = shoal_cache_hdr_encode(hdr, &id, data, len);
        FZ_CHECK(hlen == shoal_cache_hdr_len(len));
        uint32_t dlen = 0;
        FZ_CHECK(decode(hdr, hlen, &id, len, &dlen) == hlen && dlen == len);
        FZ_CHECK(decode(hdr, hlen, &id, 0, &dlen) == hlen);
        for (uint32_t i = 0; i < shoal_chunk_count(len); i++) {
                uint32_t off = i * SHOAL_CHUNK_SIZE;
                uint32_t clen = len - off < SHOAL_CHUNK_SIZE ? len - off : SHOAL_CHUNK_SIZE;
                FZ_CHECK(crcs[i] == shoal_chunk_crc(&id, i, data + off, clen));
        }
        FZ_CHECK(decode(hdr, hlen, &id, len + 1, &dlen) == 0);
        FZ_CHECK(decode(hdr, hlen - 1, &id, len, &dlen) == 0);
        struct shoal_block_id other = id;
        other.b[pos % SHOAL_BLOCK_ID_LEN] ^= mask ? mask : 1;
        FZ_CHECK(decode(hdr, hlen, &other, len, &dlen) == 0);
        check_flip(hdr, hlen, len, &id, len, pos, mask);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct fz in = {data, size};
        uint8_t mode = fz_u8(&in);
        if (mode & 1)
                fuzz_encode(&in);
        else
                fuzz_decode(&in, mode);
        return 0;
}
