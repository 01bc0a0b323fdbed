/* Shared by the generic store layer (store.c) and the upload engine (store_upload.c); not for
 * other modules. */
#ifndef SHOAL_STORE_STORE_INTERNAL_H
#define SHOAL_STORE_STORE_INTERNAL_H

#include <stdint.h>

struct shoal_store;

/* Sets the deadline that shoal_store_deadline_ns() reports on this thread (0 clears it): the
 * upload engine runs its requests on its own threads, outside the generic calls. */
void shoal_store_deadline_set(uint64_t deadline_ns);

/* The end of a retried call: a retryable RC that outlasted the policy becomes -EIO, with the
 * cause logged (WHAT KEY failed after ATTEMPTS attempts since START); anything else is
 * returned as is. */
int shoal_store_give_up(int rc, const char *what, const char *key, unsigned attempts,
                        uint64_t start_ns);

/* Creates the upload pool of ST (no threads yet: they start with the first multipart part).
 * Returns 0 or -ENOMEM. */
int shoal_store_uploads_init(struct shoal_store *st);

#endif
