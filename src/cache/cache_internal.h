/* Test hooks of the disk cache. Only tests/unit/test_cache.c uses these; other modules go through
 * cache.h. They exist because the failure paths they drive (I/O errors from a dying disk, time
 * passing) cannot be produced on demand in a unit test. */
#ifndef SHOAL_CACHE_CACHE_INTERNAL_H
#define SHOAL_CACHE_CACHE_INTERNAL_H

#include <stdint.h>

#include "cache/cache.h"

/* Records the I/O error ERR (a negative errno such as -EIO) on dir DIR (its index in the order the
 * dirs were configured and matched), exactly as a failed read or write there would. */
void shoal_cache_debug_dir_error(struct shoal_cache *c, unsigned dir, int err);

/* Sets how long a failing dir stays out of use before it is probed again (default 30 s). */
void shoal_cache_debug_set_down_ns(struct shoal_cache *c, uint64_t ns);

/* Moves the clock that dir health runs on NS forward (for C only), so a test sees a down time
 * end without waiting for it. */
void shoal_cache_debug_advance(struct shoal_cache *c, uint64_t ns);

#endif
