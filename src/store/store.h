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
 * or the deadline run out, return -EIO (the last cause is logged).
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
        void (*close)(struct shoal_store *st);
};

struct shoal_store_config {
        const char *url;          /* file:///dir or s3://bucket[/prefix] */
        const char *endpoint;     /* s3: --endpoint */
        unsigned max_downloads;   /* concurrent reads per process; 0 = unlimited */
        unsigned max_attempts;    /* read attempts on retryable errors (default 5, or
                                     SHOAL_STORE_ATTEMPTS) */
        uint64_t deadline_ns;     /* overall deadline of one call, retries included (60 s, or
                                     SHOAL_STORE_DEADLINE) */
        uint64_t backoff_base_ns; /* first backoff (default 100 ms), doubled per attempt */
};

struct shoal_store {
        const struct shoal_store_ops *ops;
        struct shoal_store_config cfg;
        /* generic layer state */
        unsigned inflight;
        unsigned waiting;
        void *lock; /* pthread mutex+cond, opaque here */
        void *impl; /* backend state */
};

/* Opens the store named by CFG->url. On failure returns NULL and writes one line into ERR. */
struct shoal_store *shoal_store_open(const struct shoal_store_config *cfg, char *err,
                                     size_t errlen);
void shoal_store_close(struct shoal_store *st);

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

/* True for errors worth another attempt. */
bool shoal_store_err_retryable(int err);

/* Monotonic deadline (shoal_now_ns() scale) of the generic call (stat, read, list) running on
 * this thread, retries included; 0 outside one. Backends bound each request by it, so one hung
 * request cannot outlive the caller's deadline. */
uint64_t shoal_store_deadline_ns(void);

/* For a backend whose one call makes several requests (a listing's pages): whether a request
 * that failed with ERR on attempt ATTEMPT (1-based) may be tried again under the store's policy
 * (retryable error, attempts and deadline left); if so, it has already slept the backoff. */
bool shoal_store_retry_wait(struct shoal_store *st, int err, unsigned attempt);

/* Backend constructors (store_file.c, store_s3.c). Each fills st->ops and st->impl. */
int shoal_store_file_open(struct shoal_store *st, const char *url, char *err, size_t errlen);
int shoal_store_s3_open(struct shoal_store *st, const char *url, char *err, size_t errlen);

#endif
