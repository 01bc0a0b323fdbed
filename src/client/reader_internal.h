/* Pure range arithmetic of the reader's block buffers, exposed for tests/unit/test_reader.c
 * (other modules go through reader.h). Kept apart because every edge of it (an empty range, a
 * chunk boundary, a block ending mid-chunk, a range past the end) must be driven by a unit test:
 * a wrong answer here once made a fill spin forever or read 4 GiB into one block. */
#ifndef SHOAL_CLIENT_READER_INTERNAL_H
#define SHOAL_CLIENT_READER_INTERNAL_H

#include <stdint.h>

#include "common/block.h"

#define SHOAL_READER_VALID_WORDS (SHOAL_MAX_CHUNKS / 64)

/* The first run of consecutive chunks of [OFF, OFF+LEN) of a block of BLOCK_LEN bytes that the
 * bitmap VALID (SHOAL_READER_VALID_WORDS words, bit c = chunk c) does not mark: the next range
 * to fill. Only a run, never a range spanning valid chunks, because other threads may be reading
 * valid chunks while it is filled. Returns 0 with the range in *MOFF, *MLEN (never empty, never
 * past BLOCK_LEN); -ENODATA when every chunk is valid; -EINVAL unless [OFF, OFF+LEN) is a valid
 * chunk range of the block (shoal_range_valid) and BLOCK_LEN is 1..SHOAL_BLOCK_SIZE_MAX. */
int shoal_reader_missing_range(const uint64_t *valid, uint32_t block_len, uint32_t off,
                               uint32_t len, uint32_t *moff, uint32_t *mlen);

#endif
