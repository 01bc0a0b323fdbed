/* Uploads and copies of an S3-compatible store (s3_upload.c): the store_ops requests of
 * store.h, for store_s3.c's table. */
#ifndef SHOAL_STORE_S3_UPLOAD_H
#define SHOAL_STORE_S3_UPLOAD_H

#include <stddef.h>
#include <stdint.h>

#include "common/block.h"
#include "store/store.h"

int shoal_s3_put(struct shoal_store *st, const char *key, const void *data, size_t len,
                 unsigned flags, char *version, size_t vlen);
int shoal_s3_mpu_begin(struct shoal_store *st, const char *key, char *id, size_t idlen);
int shoal_s3_mpu_part(struct shoal_store *st, const char *key, const char *id, unsigned num,
                      const void *data, size_t len, char *etag, size_t etaglen);
int shoal_s3_mpu_complete(struct shoal_store *st, const char *key, const char *id,
                          const char *const *etags, unsigned n, unsigned flags, char *version,
                          size_t vlen);
int shoal_s3_mpu_abort(struct shoal_store *st, const char *key, const char *id);
int shoal_s3_copy(struct shoal_store *st, const char *src, const char *version, const char *dst,
                  char *version_out, size_t vlen);
int shoal_s3_copy_part(struct shoal_store *st, const char *dst, const char *id, unsigned num,
                       const char *src, const char *version, uint64_t off, uint64_t len, char *etag,
                       size_t etaglen);

/* The header lines of a copy (CopyObject, or with LEN an UploadPartCopy of [OFF, OFF+LEN)):
 * the source /BUCKET/PREFIXSRC percent-encoded, the range, and the source's VERSION as
 * x-amz-copy-source-if-match. */
struct shoal_s3_copy_req {
        char source[3 * (2 * SHOAL_KEY_MAX + 2) + 96];
        char range[96];
        char if_match[SHOAL_VERSION_MAX + 48];
        const char *extra[4]; /* NULL-terminated: source, if-match, range (for a part) */
};

/* A copy request of SRC at VERSION from BUCKET with the store's PREFIX ("" or "P/"), for LEN
 * bytes at OFF (LEN 0: the whole object). NULL when the key is too long, VERSION is unusable or
 * memory ran out. free() it. */
struct shoal_s3_copy_req *shoal_s3_copy_req_new(const char *bucket, const char *prefix,
                                                const char *src, const char *version, uint64_t off,
                                                uint64_t len);

#endif
