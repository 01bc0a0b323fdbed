/* Object-store interface [O1-O3].
 *
 * Backends (file://, s3://) implement struct shoal_store_ops with blocking, thread-safe calls;
 * callers run them on worker threads, never on an event-loop thread. The generic layer in
 * store.c picks a backend from the URL and wraps reads with the retry policy [O3] (jittered
 * exponential backoff on retryable errors, none on permanent ones, an overall deadline) and the
 * --max-downloads bound on concurrent reads.
 *
 * Error convention (negative errno):
 *   -ENOENT   no such object            (permanent)
 *   -ESTALE   the object's version is not the one asked for (permanent; the caller re-stats)
 *   -EACCES   denied (4xx auth)         (permanent)
 *   -EINVAL   bad key or range          (permanent)
 *   -EAGAIN   throttled / 5xx           (retryable)
 *   -ETIMEDOUT, -ECONNRESET, -EIO, -EPROTO (short or mismatching body)  (retryable)
 * Backends return these; the generic entry points retry the retryable ones and, once attempts
 * or the deadline run out, return -EIO (the last cause is logged). Uploads add:
 *   -EEXIST   the object exists and the upload was to create a new one (permanent)
 *   -EFBIG    the object outgrew what the store takes in one upload (permanent)
 */
#ifndef SHOAL_STORE_STORE_H
#define SHOAL_STORE_STORE_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "common/block.h"

struct shoal_store;

/* One listing entry. For a common prefix (a "directory" under the delimiter) IS_PREFIX is set,
 * KEY ends with the delimiter, and size/version are empty. */
struct shoal_list_entry {
        const char *key;
        bool is_prefix;
        uint64_t size;
        int64_t mtime_ns;
        const char *version;
};

/* Called once per entry in key order; return non-zero to stop (that value is returned by
 * list()). Strings are valid only during the call. */
typedef int (*shoal_list_cb)(void *arg, const struct shoal_list_entry *e);

struct shoal_store_ops {
        const char *scheme; /* "file", "s3" */
        /* Size, mtime and version of KEY. */
        int (*stat)(struct shoal_store *st, const char *key, struct shoal_object *out);
        /* Reads exactly LEN bytes at OFF of KEY into BUF, checking that the object still has
         * VERSION (NULL: any). A short read is -EPROTO, never a partial success. */
        int (*read)(struct shoal_store *st, const char *key, const char *version, uint64_t off,
                    size_t len, void *buf);
        /* Lists keys starting with PREFIX; with DELIM (e.g. "/") keys are grouped into common
         * prefixes as S3 does. START_AFTER (may be NULL) skips keys <= it. */
        int (*list)(struct shoal_store *st, const char *prefix, const char *delim,
                    const char *start_after, shoal_list_cb cb, void *arg);
        /* One cheap request that shows the store is there and answers (may be NULL: nothing to
         * check beyond open). Returns 0, or a negative errno with the cause in WHY. */
        int (*check)(struct shoal_store *st, char *why, size_t whylen);
        void (*close)(struct shoal_store *st);

        /* Uploads, in one of two shapes (store_upload.c drives them; see "Uploads" below).
         *
         * Streamed (file://): the backend takes the bytes as they come. stream_begin returns a
         * handle in *H, or an error (-EEXIST when FLAGS has SHOAL_UPLOAD_CREATE and KEY exists);
         * stream_commit makes the object visible under KEY in one step and fills *OUT as stat
         * would; stream_abort drops everything. Either of the last two frees H. */
        int (*stream_begin)(struct shoal_store *st, const char *key, unsigned flags, void **h);
        int (*stream_append)(struct shoal_store *st, void *h, const void *data, size_t len);
        int (*stream_commit)(struct shoal_store *st, void *h, struct shoal_object *out);
        void (*stream_abort)(struct shoal_store *st, void *h);

        /* Requests (s3://): one request each, which the generic layer retries, so each must be
         * idempotent. put writes a whole object; mpu_* are the multipart upload's steps. VERSION
         * receives what stat will report (the ETag); ID and ETAG are the store's strings. */
        int (*put)(struct shoal_store *st, const char *key, const void *data, size_t len,
                   unsigned flags, char *version, size_t vlen);
        int (*mpu_begin)(struct shoal_store *st, const char *key, char *id, size_t idlen);
        int (*mpu_part)(struct shoal_store *st, const char *key, const char *id, unsigned num,
                        const void *data, size_t len, char *etag, size_t etaglen);
        int (*mpu_complete)(struct shoal_store *st, const char *key, const char *id,
                            const char *const *etags, unsigned n, unsigned flags, char *version,
                            size_t vlen);
        int (*mpu_abort)(struct shoal_store *st, const char *key, const char *id);

        /* Deletes KEY; a missing object is 0 (S3 cannot tell them apart). */
        int (*remove)(struct shoal_store *st, const char *key);

        /* Optional: makes DST a copy of SRC inside the store, without the bytes passing here,
         * only while SRC still has VERSION (else -ESTALE); one request, idempotent. VERSION_OUT
         * receives DST's version. NULL where the store has no such request. */
        int (*copy)(struct shoal_store *st, const char *src, const char *version, const char *dst,
                    char *version_out, size_t vlen);
        /* Optional, with the mpu_* requests (S3 UploadPartCopy): part NUM of multipart upload ID
         * of DST becomes bytes [OFF, OFF+LEN) of SRC, copied inside the store, only while SRC
         * still has VERSION (else -ESTALE); ETAG receives the part's. -EOPNOTSUPP when the store
         * answers that it does not have the request. */
        int (*copy_part)(struct shoal_store *st, const char *dst, const char *id, unsigned num,
                         const char *src, const char *version, uint64_t off, uint64_t len,
                         char *etag, size_t etaglen);
};

#define SHOAL_STORE_PART_SIZE_DEFAULT (16ULL << 20)
#define SHOAL_STORE_PART_SIZE_MIN     (5ULL << 20) /* S3's smallest part but the last */
#define SHOAL_STORE_PART_SIZE_MAX     (5ULL << 30) /* and its largest */
#define SHOAL_STORE_MPU_PARTS_MAX     10000u       /* S3's limit on parts of one upload */

struct shoal_store_config {
        const char *url;              /* file:///dir or s3://bucket[/prefix] */
        const char *endpoint;         /* s3: --endpoint */
        unsigned max_downloads;       /* concurrent reads per process; 0 = unlimited */
        unsigned max_attempts;        /* read attempts on retryable errors (default 5, or
                                         SHOAL_STORE_ATTEMPTS) */
        uint64_t deadline_ns;         /* overall deadline of one call, retries included (60 s, or
                                         SHOAL_STORE_DEADLINE) */
        uint64_t backoff_base_ns;     /* first backoff (default 100 ms), doubled per attempt */
        uint64_t upload_part_size;    /* multipart part size (default 16 MiB; 5 MiB..5 GiB) */
        uint64_t upload_buffer_bytes; /* part buffers of all uploads (default 300 MiB) */
        unsigned upload_concurrency;  /* parts of one upload in flight (default 4) */
        uint64_t copy_max;            /* the largest object copied in one request (default and
                                         most SHOAL_STORE_COPY_MAX, or SHOAL_S3_COPY_MAX_MIB);
                                         larger ones are copied in parts */
};

struct shoal_store {
        const struct shoal_store_ops *ops;
        struct shoal_store_config cfg;
        /* generic layer state */
        unsigned inflight;
        unsigned waiting;
        void *lock;    /* pthread mutex+cond, opaque here */
        void *impl;    /* backend state */
        void *uploads; /* store_upload.c: part workers and the buffer budget */
};

/* Opens the store named by CFG->url into *OUT. Returns 0, or a negative errno with one line in
 * ERR: -EINVAL when the configuration cannot work (an unknown scheme, a malformed URL or
 * endpoint, a part size out of range, an access key without its secret: the user's to fix);
 * any other errno is a failure at run time (the folder cannot be opened, no memory, libcurl). */
int shoal_store_open(const struct shoal_store_config *cfg, struct shoal_store **out, char *err,
                     size_t errlen);
void shoal_store_close(struct shoal_store *st);

/* Asks the store once (s3: a LIST of one key, throttling and 5xx retried within 15 s) whether it
 * is there and answers. Returns 0, or a negative errno with one line in ERR naming the storage,
 * its endpoint and the cause (cannot resolve, refused, timed out, the HTTP status and S3 code). */
int shoal_store_check(struct shoal_store *st, char *err, size_t errlen);

/* Generic entry points: validate the key, count metrics, apply the retry policy (read and stat)
 * and the max-downloads bound (read). Return 0 or a negative errno as above. */
int shoal_store_stat(struct shoal_store *st, const char *key, struct shoal_object *out);
int shoal_store_read(struct shoal_store *st, const char *key, const char *version, uint64_t off,
                     size_t len, void *buf);
int shoal_store_list(struct shoal_store *st, const char *prefix, const char *delim,
                     const char *start_after, shoal_list_cb cb, void *arg);

/* Lists every object (no folders, no empty objects) under PREFIX, recursively, into a malloc'd
 * array *OUT of *N entries, stopping after MAX. Returns 0 or a negative errno. */
int shoal_store_list_objects(struct shoal_store *st, const char *prefix, size_t max,
                             struct shoal_object **out, size_t *n);

/* Monotonic deadline (shoal_now_ns() scale) of the generic call (stat, read, list) running on
 * this thread, retries included; 0 outside one. Backends bound each request by it, so one hung
 * request cannot outlive the caller's deadline. */
uint64_t shoal_store_deadline_ns(void);

/* For a backend whose one call makes several requests (a listing's pages): whether a request
 * that failed with ERR on attempt ATTEMPT (1-based) may be tried again under the store's policy
 * (retryable error, attempts and deadline left); if so, it has already slept the backoff. */
bool shoal_store_retry_wait(struct shoal_store *st, int err, unsigned attempt);

/* --- Uploads [W1, W2] ------------------------------------------------------------------------
 *
 * An upload writes one object from sequential bytes: begin, append any number of times, then
 * exactly one of commit or abort, which frees it. One thread at a time may call into one upload;
 * different uploads run independently. The calls block (disk, network): worker threads only.
 *
 * Visibility and durability: nothing appears under KEY before commit returns 0, and a failed or
 * aborted upload leaves nothing under KEY, not even part of the object (the previous object, if
 * there was one, is untouched). When commit returns 0 the store has confirmed the whole object —
 * file://: data fsynced, linked into place in one step, folder fsynced; s3://: the PUT or the
 * CompleteMultipartUpload answered 200 — and *OUT holds its size, mtime and version exactly as a
 * later stat reports them (the ETag for s3, size+mtime+inode+ctime for file://), so blocks can be
 * keyed by it.
 *
 * s3:// parts: the bytes are cut into parts of cfg.upload_part_size; an object smaller than one
 * part goes up in one PUT at commit, a larger one as a multipart upload whose parts go up while
 * the writer appends, cfg.upload_concurrency of them at once on the store's upload workers. Every
 * request is retried under the read policy (attempts, backoff, a deadline per request). Part
 * buffers come from one budget of cfg.upload_buffer_bytes for the whole store: append waits for
 * room, except that an upload holding no buffer always gets one, so uploads never deadlock (the
 * bound is then the budget or one part per upload, whichever is larger). A multipart upload that
 * fails or is aborted is aborted at the store (AbortMultipartUpload), so no parts linger.
 *
 * Errors: -EINVAL (bad key), -EEXIST (SHOAL_UPLOAD_CREATE and the object exists: at begin, or at
 * commit where the store can tell atomically — file://, and S3 stores that honour
 * If-None-Match), -EFBIG (more than 10000 parts), -ENOMEM, or -EIO when the store failed after
 * retries (the cause is logged). After an error from append the upload is dead: every further
 * append returns the same error and commit returns it too (and frees); abort is always allowed. */
#define SHOAL_UPLOAD_CREATE 1u /* a new object only: -EEXIST when KEY exists */
#define SHOAL_UPLOAD_CHECKED                                             \
        2u /* with CREATE: the caller has just seen KEY absent, so begin \
              does not ask the store again (commit still does) */

struct shoal_upload;

/* Starts an upload of KEY. Returns 0 with *OUT set, or a negative errno. */
int shoal_store_upload_begin(struct shoal_store *st, const char *key, unsigned flags,
                             struct shoal_upload **out);
/* Appends LEN bytes (copied before return). Returns 0 or a negative errno (see above). */
int shoal_store_upload_append(struct shoal_upload *u, const void *data, size_t len);
/* Finishes the object and frees U. Returns 0 with *OUT filled, or a negative errno (then nothing
 * was written under the key). */
int shoal_store_upload_commit(struct shoal_upload *u, struct shoal_object *out);
/* Drops the upload and frees U (waits for its parts in flight, then aborts it at the store). */
void shoal_store_upload_abort(struct shoal_upload *u);
/* Bytes appended so far. */
uint64_t shoal_store_upload_size(const struct shoal_upload *u);

/* Deletes object KEY (retried like a read). Returns 0 (also when it did not exist on a store that
 * cannot tell), -ENOENT (file://: no such object), -EINVAL, -EACCES or -EIO. */
int shoal_store_delete(struct shoal_store *st, const char *key);

/* The largest object the store copies in one request (S3 CopyObject: 5 GiB). */
#define SHOAL_STORE_COPY_MAX (5ULL << 30)
/* The largest part of a copy made in parts (the store's limit is 5 GiB). */
#define SHOAL_STORE_COPY_PART_MAX (512ULL << 20)

/* The part size of a copy in parts of an object of SIZE bytes when one request copies at most
 * COPY_MAX: COPY_MAX, at most SHOAL_STORE_COPY_PART_MAX, at least S3's 5 MiB, and large enough
 * that 10000 parts hold the object. */
uint64_t shoal_store_copy_part_size(uint64_t size, uint64_t copy_max);

/* Copies object SRC, which must still be SO (stat'ed by the caller), to DST inside the store
 * (retried like a read) and fills *OUT with DST as stat reports it. Up to cfg.copy_max in one
 * request (S3 CopyObject); above it as a multipart upload of parts copied by the store
 * (UploadPartCopy, parts of shoal_store_copy_part_size, each request retried with a deadline of
 * its own), aborted at the store if any part fails. Returns 0, -EOPNOTSUPP when the store cannot
 * copy by itself (no such request, or the store answered that it does not have it: the caller
 * copies the bytes instead), -ESTALE (SRC changed), -ENOENT, -EINVAL, -EACCES, -EFBIG or -EIO.
 * DST is replaced if it exists: a caller that wants a new object checks first. */
int shoal_store_copy(struct shoal_store *st, const char *src, const struct shoal_object *so,
                     const char *dst, struct shoal_object *out);

/* Stops the upload workers (store close calls it; every upload must be finished). */
void shoal_store_uploads_stop(struct shoal_store *st);

/* Backend constructors (store_file.c, store_s3.c). Each fills st->ops and st->impl, and returns
 * 0 or a negative errno as shoal_store_open does (-EINVAL: the URL or a setting cannot work). */
int shoal_store_file_open(struct shoal_store *st, const char *url, char *err, size_t errlen);
int shoal_store_s3_open(struct shoal_store *st, const char *url, char *err, size_t errlen);

#endif
