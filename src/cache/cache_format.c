#include "cache/cache_format.h"

#include <errno.h>
#include <string.h>

#include "common/crc32c.h"

static const char hdr_magic[8] = {'S', 'H', 'O', 'A', 'L', 'B', 'L', 'K'};

enum {
        OFF_MAGIC = 0,
        OFF_VERSION = 8,
        OFF_HLEN = 12,
        OFF_ID = 16,
        OFF_LEN = 32,
        OFF_CHUNK = 36,
        OFF_NCHUNKS = 40,
        OFF_HCRC = 44,
        OFF_CRCS = 48,
};

static void put_le32(unsigned char *p, uint32_t v)
{
        p[0] = (unsigned char)v;
        p[1] = (unsigned char)(v >> 8);
        p[2] = (unsigned char)(v >> 16);
        p[3] = (unsigned char)(v >> 24);
}

static uint32_t get_le32(const unsigned char *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static uint32_t hdr_len_for_chunks(uint32_t n)
{
        uint32_t raw = SHOAL_CACHE_HDR_FIXED + 4u * n;
        return (raw + SHOAL_CACHE_HDR_ALIGN - 1) / SHOAL_CACHE_HDR_ALIGN * SHOAL_CACHE_HDR_ALIGN;
}

/* The CRC field itself is left out rather than zeroed, so the check never depends on what a
 * damaged file holds there. */
static uint32_t hdr_crc(const unsigned char *hdr, uint32_t n_chunks)
{
        uint32_t crc = shoal_crc32c(0, hdr, OFF_HCRC);
        return shoal_crc32c(crc, hdr + OFF_CRCS, 4u * (size_t)n_chunks);
}

uint32_t shoal_cache_hdr_len(uint32_t data_len)
{
        return hdr_len_for_chunks(shoal_chunk_count(data_len));
}

uint32_t shoal_cache_hdr_encode(unsigned char *hdr, const struct shoal_block_id *id,
                                const void *data, uint32_t len)
{
        const unsigned char *p = data;
        uint32_t n = shoal_chunk_count(len);
        uint32_t hlen = hdr_len_for_chunks(n);

        memset(hdr, 0, hlen);
        memcpy(hdr + OFF_MAGIC, hdr_magic, sizeof(hdr_magic));
        put_le32(hdr + OFF_VERSION, SHOAL_CACHE_FORMAT_VERSION);
        put_le32(hdr + OFF_HLEN, hlen);
        memcpy(hdr + OFF_ID, id->b, SHOAL_BLOCK_ID_LEN);
        put_le32(hdr + OFF_LEN, len);
        put_le32(hdr + OFF_CHUNK, SHOAL_CHUNK_SIZE);
        put_le32(hdr + OFF_NCHUNKS, n);
        for (uint32_t i = 0; i < n; i++) {
                uint32_t off = i * SHOAL_CHUNK_SIZE;
                uint32_t clen = len - off < SHOAL_CHUNK_SIZE ? len - off : SHOAL_CHUNK_SIZE;
                put_le32(hdr + OFF_CRCS + 4u * i, shoal_chunk_crc(id, i, p + off, clen));
        }
        put_le32(hdr + OFF_HCRC, hdr_crc(hdr, n));
        return hlen;
}

uint32_t shoal_cache_hdr_peek_len(const unsigned char *hdr, size_t avail)
{
        if (avail < SHOAL_CACHE_HDR_FIXED)
                return 0;
        if (memcmp(hdr + OFF_MAGIC, hdr_magic, sizeof(hdr_magic)) ||
            get_le32(hdr + OFF_VERSION) != SHOAL_CACHE_FORMAT_VERSION)
                return 0;
        uint32_t n = get_le32(hdr + OFF_NCHUNKS);
        uint32_t hlen = get_le32(hdr + OFF_HLEN);
        if (n == 0 || n > SHOAL_MAX_CHUNKS || hlen != hdr_len_for_chunks(n))
                return 0;
        return hlen;
}

int shoal_cache_hdr_decode(const unsigned char *hdr, size_t avail, const struct shoal_block_id *id,
                           uint32_t expect_len, uint32_t *hdr_len, uint32_t *data_len,
                           uint32_t *crcs)
{
        uint32_t hlen = shoal_cache_hdr_peek_len(hdr, avail);
        if (!hlen || avail < hlen)
                return -EBADMSG;
        uint32_t n = get_le32(hdr + OFF_NCHUNKS);
        uint32_t len = get_le32(hdr + OFF_LEN);
        if (len == 0 || len > SHOAL_BLOCK_SIZE_MAX || shoal_chunk_count(len) != n ||
            get_le32(hdr + OFF_CHUNK) != SHOAL_CHUNK_SIZE)
                return -EBADMSG;
        if (memcmp(hdr + OFF_ID, id->b, SHOAL_BLOCK_ID_LEN))
                return -EBADMSG;
        if (get_le32(hdr + OFF_HCRC) != hdr_crc(hdr, n))
                return -EBADMSG;
        /* A sound header of another length is not damage: only the caller's idea of the block
         * differs, and a caller's idea is no evidence against the file. */
        if (expect_len && expect_len != len)
                return -ERANGE;
        for (uint32_t i = 0; i < n; i++)
                crcs[i] = get_le32(hdr + OFF_CRCS + 4u * i);
        *hdr_len = hlen;
        *data_len = len;
        return 0;
}
