/* Requests to an S3-compatible store, shared by the backend's reads and listings (store_s3.c) and
 * its uploads and copies (s3_upload.c); not for other modules. */
#ifndef SHOAL_STORE_S3_REQUEST_H
#define SHOAL_STORE_S3_REQUEST_H

#include <curl/curl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>

#include "store/s3_parse.h"
#include "store/store.h"

#define SHOAL_S3_POOL_MAX      64
#define SHOAL_S3_UPLOAD_ID_MAX 1024                       /* as store_upload.c's buffer for it */
#define SHOAL_S3_URL_MAX       (6 * SHOAL_KEY_MAX + 4096) /* an object URL and an upload query */

/* One store's state (st->impl). */
struct shoal_s3_store {
        char bucket[64];
        char prefix[SHOAL_KEY_MAX + 1]; /* "" or "PREFIX/" */
        size_t prefix_len;
        char base[1024];      /* scheme://host[:port][/bucket]: object URLs append "/KEY" */
        char list_path[1100]; /* base as it is written before "?list-type=2..." */
        char region[64];
        char sigv4[128];
        char *access_key;
        char *secret_key;
        char *token_header; /* "x-amz-security-token: ..." or NULL */
        char *ca_file;
        unsigned list_max_keys;
        atomic_bool denied_logged;
        atomic_bool config_logged;

        CURLSH *share;
        pthread_mutex_t share_mu[CURL_LOCK_DATA_LAST];
        pthread_mutex_t pool_mu;
        CURL *pool[SHOAL_S3_POOL_MAX];
        unsigned npool;
};

/* A request body sent from memory (PUT, POST). */
struct shoal_s3_body {
        const char *data;
        size_t len;
        size_t off; /* sent so far */
};

/* Performs one request: METHOD ("GET", "HEAD", "DELETE", "PUT" or "POST") of URL with extra header
 * lines EXTRA (NULL-terminated), BODY (may be NULL) sent for PUT and POST, signed over its
 * SHA-256. Returns 0 when an HTTP answer arrived (its status is in R; the caller maps it), or a
 * negative errno for a transport failure. WHAT and KEY name the request in the log. */
int shoal_s3_perform_req(struct shoal_s3_store *s, const char *method, const char *url,
                         const char *const *extra, struct shoal_s3_body *body,
                         struct shoal_s3_resp *r, const char *what, const char *key);
/* shoal_s3_perform_req without a body. */
int shoal_s3_perform(struct shoal_s3_store *s, const char *method, const char *url,
                     const char *const *extra, struct shoal_s3_resp *r, const char *what,
                     const char *key);
/* The transport outcome of this thread's last request and libcurl's words for it (*MSG): the
 * start-up check names it (resolve, refuse, timeout), where the errno alone would not. */
CURLcode shoal_s3_last_error(const char **msg);

/* Maps a non-2xx answer R (the error body names S3's code) to store.h's errno. */
int shoal_s3_map_status(struct shoal_s3_store *s, const struct shoal_s3_resp *r, const char *what,
                        const char *key);
/* Like shoal_s3_map_status, for the upload requests (FLAGS: the upload's SHOAL_UPLOAD_*). */
int shoal_s3_map_upload_status(struct shoal_s3_store *s, const struct shoal_s3_resp *r,
                               unsigned flags, const char *what, const char *key);
/* A 2xx answer may still be an error: S3 can fail CompleteMultipartUpload (and a copy) after
 * it sent 200, and then the body is an <Error>. Returns 0, -EAGAIN or -EIO. */
int shoal_s3_body_error(const struct shoal_s3_resp *r, const char *what, const char *key);

/* RFC 3986 percent-encoding as SigV4 wants it: everything but unreserved bytes (and '/' when
 * KEEP_SLASH, for object paths) becomes %XX with upper-case hex. Returns the length, or -1 when
 * OUT is too small. */
long shoal_s3_uri_encode(const char *in, bool keep_slash, char *out, size_t outlen);
/* Appends "&NAME=ENCODED(VALUE)" (or without '&' first) to Q. */
int shoal_s3_query_add(char *q, size_t qlen, const char *name, const char *value);
/* URL of object KEY (the bucket prefix added), or -ENAMETOOLONG. */
int shoal_s3_object_url(struct shoal_s3_store *s, const char *key, char *out, size_t outlen);
/* URL of KEY with the query Q ("uploads", "uploadId=..."), already in canonical order. */
int shoal_s3_object_url_q(struct shoal_s3_store *s, const char *key, const char *q, char *out,
                          size_t outlen);

#endif
