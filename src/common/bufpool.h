/* A pool of equal, 4096-aligned buffers carved from one mapping [L4]. Buffers are faulted in on
 * first use (with transparent huge pages where the kernel gives them), and then reused for ever:
 * the data path never allocates or frees data memory. Thread-safe. */
#ifndef SHOAL_COMMON_BUFPOOL_H
#define SHOAL_COMMON_BUFPOOL_H

#include <stddef.h>
#include <stdint.h>

struct shoal_bufpool;

/* Creates a pool of COUNT buffers of SIZE bytes (SIZE rounded up to 4096). NULL on failure. */
struct shoal_bufpool *shoal_bufpool_create(size_t size, unsigned count);
void shoal_bufpool_destroy(struct shoal_bufpool *p);

/* Takes a free buffer, waiting up to TIMEOUT_NS (0: do not wait). NULL when none came free. */
void *shoal_bufpool_get(struct shoal_bufpool *p, uint64_t timeout_ns);
/* Returns BUF to the pool. */
void shoal_bufpool_put(struct shoal_bufpool *p, void *buf);

size_t shoal_bufpool_bufsize(const struct shoal_bufpool *p);
/* Base and length of the whole mapping (for RDMA registration). */
void *shoal_bufpool_base(const struct shoal_bufpool *p, size_t *len);

#endif
