/* The on-disk format of one cached block file (internal to src/cache).
 *
 * A file is a header of HLEN bytes followed by the block's data. HLEN is the fixed part plus the
 * CRC table rounded up to 4096, so the data starts aligned for O_DIRECT. Every integer is
 * little-endian:
 *    0  magic "SHOALBLK"
 *    8  u32 format version (SHOAL_CACHE_FORMAT_VERSION)
 *   12  u32 header length HLEN
 *   16  block id (16 bytes)
 *   32  u32 data length (1..SHOAL_BLOCK_SIZE_MAX)
 *   36  u32 chunk size (SHOAL_CHUNK_SIZE)
 *   40  u32 chunk count
 *   44  u32 header CRC32C over bytes [0, 44) and then the CRC table
 *   48  u32 CRC per chunk (shoal_chunk_crc), then zeros up to HLEN
 * The functions here are pure (no I/O), so they can be fuzzed on their own. */
#ifndef SHOAL_CACHE_CACHE_FORMAT_H
#define SHOAL_CACHE_CACHE_FORMAT_H

#include <stddef.h>
#include <stdint.h>

#include "common/block.h"

#define SHOAL_CACHE_FORMAT_VERSION 1u
#define SHOAL_CACHE_HDR_FIXED      48u
#define SHOAL_CACHE_HDR_ALIGN      4096u
/* The largest header: SHOAL_MAX_CHUNKS CRCs after the fixed part, rounded up. */
#define SHOAL_CACHE_HDR_MAX                                                            \
        ((SHOAL_CACHE_HDR_FIXED + 4u * SHOAL_MAX_CHUNKS + SHOAL_CACHE_HDR_ALIGN - 1) / \
         SHOAL_CACHE_HDR_ALIGN * SHOAL_CACHE_HDR_ALIGN)

/* Header length of a block of DATA_LEN bytes (1..SHOAL_BLOCK_SIZE_MAX). */
uint32_t shoal_cache_hdr_len(uint32_t data_len);

/* Writes the header of block ID with LEN bytes of DATA into HDR (room for SHOAL_CACHE_HDR_MAX
 * bytes), computing every chunk CRC. Returns the header length. LEN must be in
 * 1..SHOAL_BLOCK_SIZE_MAX. */
uint32_t shoal_cache_hdr_encode(unsigned char *hdr, const struct shoal_block_id *id,
                                const void *data, uint32_t len);

/* Reads the header length out of the first AVAIL bytes of a file. Returns it, or 0 when those
 * bytes cannot start a valid header (too short, bad magic or version, inconsistent length). */
uint32_t shoal_cache_hdr_peek_len(const unsigned char *hdr, size_t avail);

/* Verifies a whole header of AVAIL bytes (at least its header length): magic, version, lengths,
 * that it belongs to block ID, the header CRC, and EXPECT_LEN (0: any). On success stores the
 * data length in *DATA_LEN, the header length in *HDR_LEN and the chunk CRCs in CRCS
 * (SHOAL_MAX_CHUNKS entries), and returns 0; -ERANGE when the header is sound but holds another
 * length than EXPECT_LEN; -EBADMSG when it is damaged. */
int shoal_cache_hdr_decode(const unsigned char *hdr, size_t avail, const struct shoal_block_id *id,
                           uint32_t expect_len, uint32_t *hdr_len, uint32_t *data_len,
                           uint32_t *crcs);

#endif
