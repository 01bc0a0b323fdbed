/* s3://BUCKET[/PREFIX] — an S3-compatible object store over HTTP(S) with libcurl [O2, O3].
 *
 * Each call is one blocking request on an easy handle taken from a per-store pool, so a worker
 * thread reuses the connection its handle kept alive; DNS results and TLS sessions are shared
 * across handles. Requests are signed by libcurl (SigV4, CURLOPT_AWS_SIGV4). Every request is
 * bounded by the deadline of the generic call (store.c), so retries and a hung server together
 * never outlive it. The generic layer owns retries: this file only maps each outcome to the
 * error convention of store.h. */
#include "store/store.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <openssl/sha.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "store/s3_parse.h"

#define S3_POOL_MAX      64
#define UPLOAD_ID_MAX_S3 1024 /* as store_upload.c's buffer for it */
/* SHA-256 of the empty payload: the hash S3 expects for GET, HEAD and list requests. */
#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

struct s3_store {
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
        CURL *pool[S3_POOL_MAX];
        unsigned npool;
};

/* The transport failure of this thread's last request, as libcurl put it: the start-up check
 * names it (resolve, refuse, timeout), where the errno alone would not. */
static _Thread_local CURLcode last_curl;
static _Thread_local char last_curl_msg[CURL_ERROR_SIZE];

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

/* --- encoding ---------------------------------------------------------------------------- */

static bool unreserved(unsigned char c)
{
        return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

/* RFC 3986 percent-encoding as SigV4 wants it: everything but unreserved bytes (and '/' when
 * KEEP_SLASH, for object paths) becomes %XX with upper-case hex. Returns the length, or -1 when
 * OUT is too small. */
static long uri_encode(const char *in, bool keep_slash, char *out, size_t outlen)
{
        static const char hex[] = "0123456789ABCDEF";
        size_t o = 0;
        for (const unsigned char *p = (const unsigned char *)in; *p; p++) {
                if (unreserved(*p) || (keep_slash && *p == '/')) {
                        if (o + 1 >= outlen)
                                return -1;
                        out[o++] = (char)*p;
                } else {
                        if (o + 3 >= outlen)
                                return -1;
                        out[o++] = '%';
                        out[o++] = hex[*p >> 4];
                        out[o++] = hex[*p & 15];
                }
        }
        out[o] = '\0';
        return (long)o;
}

/* --- requests ---------------------------------------------------------------------------- */

static CURL *handle_get(struct s3_store *s)
{
        CURL *h = NULL;
        pthread_mutex_lock(&s->pool_mu);
        if (s->npool)
                h = s->pool[--s->npool];
        pthread_mutex_unlock(&s->pool_mu);
        if (h) {
                /* Keeps the handle's live connection; only the options go. */
                curl_easy_reset(h);
                return h;
        }
        return curl_easy_init();
}

static void handle_put(struct s3_store *s, CURL *h)
{
        pthread_mutex_lock(&s->pool_mu);
        if (s->npool < S3_POOL_MAX) {
                s->pool[s->npool++] = h;
                h = NULL;
        }
        pthread_mutex_unlock(&s->pool_mu);
        if (h)
                curl_easy_cleanup(h);
}

static int map_curl(struct s3_store *s, CURLcode c, const struct shoal_s3_resp *r, const char *what,
                    const char *key, const char *errbuf)
{
        switch (c) {
        case CURLE_OK:
                return 0;
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_COULDNT_CONNECT:
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                log_ratelimited(SHOAL_LOG_WARN, "s3", "%s %s: %s", what, key, errbuf);
                return -ECONNREFUSED;
        case CURLE_SEND_ERROR:
        case CURLE_RECV_ERROR:
        case CURLE_GOT_NOTHING:
        case CURLE_SSL_CONNECT_ERROR:
        case CURLE_HTTP2:
        case CURLE_HTTP2_STREAM:
                return -ECONNRESET;
        case CURLE_PARTIAL_FILE:
                return -EPROTO;
        case CURLE_WRITE_ERROR:
                return r->overflow ? -EPROTO : -EIO;
        case CURLE_OUT_OF_MEMORY:
                return -ENOMEM;
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CERTPROBLEM:
                /* A certificate the client does not trust is configuration, not weather. */
                if (!atomic_exchange(&s->config_logged, true))
                        log_error("s3",
                                  "%s %s: TLS: %s — check the endpoint's certificate or "
                                  "set SHOAL_S3_CA_FILE to the CA that signed it",
                                  what, key, errbuf);
                return -EACCES;
        case CURLE_URL_MALFORMAT:
                return -EINVAL;
        default:
                log_ratelimited(SHOAL_LOG_WARN, "s3", "%s %s: %s (%s)", what, key,
                                curl_easy_strerror(c), errbuf);
                return -EIO;
        }
}

/* Maps a non-2xx answer. The error body (when there is one) names S3's code. */
static int map_status(struct s3_store *s, const struct shoal_s3_resp *r, const char *what,
                      const char *key)
{
        const char *end = r->err + r->err_len;
        char *code = shoal_s3_xml_get(r->err, end, "Code");
        char *msg = shoal_s3_xml_get(r->err, end, "Message");
        const char *cs = code ? code : "";
        int rc;
        switch (r->status) {
        case 404:
                if (!strcmp(cs, "NoSuchBucket") && !atomic_exchange(&s->config_logged, true))
                        log_error("s3",
                                  "%s %s: 404 NoSuchBucket — bucket %s does not exist at "
                                  "this endpoint",
                                  what, key, s->bucket);
                rc = -ENOENT;
                break;
        case 412:
                rc = -ESTALE;
                break;
        case 401:
        case 403:
                if (!atomic_exchange(&s->denied_logged, true))
                        log_error("s3",
                                  "%s %s: %ld %s%s%s — check credentials "
                                  "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, "
                                  "AWS_SESSION_TOKEN), AWS_REGION and the bucket policy",
                                  what, key, r->status, *cs ? cs : "Forbidden", msg ? ": " : "",
                                  msg ? msg : "");
                else
                        log_debug("s3", "%s %s: %ld %s", what, key, r->status, cs);
                rc = -EACCES;
                break;
        case 400:
                if (!strcmp(cs, "RequestTimeout")) {
                        rc = -ETIMEDOUT;
                } else if (!strcmp(cs, "ExpiredToken") || !strcmp(cs, "InvalidToken") ||
                           !strcmp(cs, "AuthorizationHeaderMalformed")) {
                        if (!atomic_exchange(&s->denied_logged, true))
                                log_error("s3",
                                          "%s %s: 400 %s%s%s — check AWS_SESSION_TOKEN and "
                                          "AWS_REGION",
                                          what, key, cs, msg ? ": " : "", msg ? msg : "");
                        rc = -EACCES;
                } else {
                        log_ratelimited(SHOAL_LOG_WARN, "s3", "%s %s: 400 %s%s%s", what, key, cs,
                                        msg ? ": " : "", msg ? msg : "");
                        rc = -EINVAL;
                }
                break;
        case 416:
                rc = -EINVAL;
                break;
        case 301:
        case 307:
        case 308:
                if (!atomic_exchange(&s->config_logged, true))
                        log_error("s3",
                                  "%s %s: %ld %s — the bucket is in another region or needs "
                                  "another endpoint (set AWS_REGION or --endpoint)",
                                  what, key, r->status, *cs ? cs : "redirect");
                rc = -EINVAL;
                break;
        case 408:
                rc = -ETIMEDOUT;
                break;
        case 429:
                rc = -EAGAIN;
                break;
        default:
                if (r->status >= 500 && r->status <= 599) {
                        rc = -EAGAIN; /* 500 InternalError, 503 SlowDown and friends */
                } else {
                        log_ratelimited(SHOAL_LOG_WARN, "s3", "%s %s: unexpected HTTP %ld %s", what,
                                        key, r->status, cs);
                        rc = -EIO;
                }
                break;
        }
        free(code);
        free(msg);
        return rc;
}

/* A request body sent from memory (PUT, POST). */
struct s3_body {
        const char *data;
        size_t len;
        size_t off; /* sent so far */
};

static size_t on_read(char *out, size_t size, size_t n, void *arg)
{
        struct s3_body *b = arg;
        size_t k = SHOAL_MIN(size * n, b->len - b->off);
        memcpy(out, b->data + b->off, k);
        b->off += k;
        return k;
}

/* libcurl rewinds the body when it must send it again on the same request (a redirect, a
 * connection that died before the answer). */
static int on_seek(void *arg, curl_off_t offset, int origin)
{
        struct s3_body *b = arg;
        if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > b->len)
                return CURL_SEEKFUNC_CANTSEEK;
        b->off = (size_t)offset;
        return CURL_SEEKFUNC_OK;
}

/* The header that signs the payload: its SHA-256, so that the store refuses a body damaged on
 * the way (S3 answers XAmzContentSHA256Mismatch). */
static void payload_header(const struct s3_body *b, char *out, size_t outlen)
{
        if (!b || !b->len) {
                snprintf(out, outlen, "x-amz-content-sha256: " S3_EMPTY_SHA256);
                return;
        }
        unsigned char md[SHA256_DIGEST_LENGTH];
        char hex[2 * SHA256_DIGEST_LENGTH + 1];
        SHA256((const unsigned char *)b->data, b->len, md);
        shoal_hex(md, sizeof(md), hex);
        snprintf(out, outlen, "x-amz-content-sha256: %s", hex);
}

static int perform_req(struct s3_store *s, const char *method, const char *url,
                       const char *const *extra, struct s3_body *body, struct shoal_s3_resp *r,
                       const char *what, const char *key);

/* Performs one request without a body: METHOD ("GET", "HEAD" or "DELETE") of URL with extra
 * header lines EXTRA (NULL-terminated). Returns 0 when an HTTP answer arrived (its status is in
 * R; the caller maps it), or a negative errno for a transport failure. */
static int perform(struct s3_store *s, const char *method, const char *url,
                   const char *const *extra, struct shoal_s3_resp *r, const char *what,
                   const char *key)
{
        return perform_req(s, method, url, extra, NULL, r, what, key);
}

/* Like perform, with BODY (may be NULL) sent for "PUT" and "POST". */
static int perform_req(struct s3_store *s, const char *method, const char *url,
                       const char *const *extra, struct s3_body *body, struct shoal_s3_resp *r,
                       const char *what, const char *key)
{
        uint64_t deadline = shoal_store_deadline_ns();
        uint64_t now = shoal_now_ns();
        long timeout_ms = 60000;
        if (deadline) {
                if (now >= deadline)
                        return -ETIMEDOUT;
                timeout_ms = (long)((deadline - now + SHOAL_NS_PER_MS - 1) / SHOAL_NS_PER_MS);
        }
        CURL *h = handle_get(s);
        if (!h)
                return -ENOMEM;
        struct curl_slist *hdrs = NULL, *t;
        int rc = 0;
        /* Only headers that are sent: libcurl signs every header in this list, and one that
         * merely removes a default ("Expect:") would be signed but never sent. */
        char payload[128];
        payload_header(body, payload, sizeof(payload));
        if (!(t = curl_slist_append(hdrs, payload)))
                goto out_nomem;
        hdrs = t;
        for (const char *const *p = extra; p && *p; p++) {
                if (!(t = curl_slist_append(hdrs, *p)))
                        goto out_nomem;
                hdrs = t;
        }
        if (s->token_header) {
                if (!(t = curl_slist_append(hdrs, s->token_header)))
                        goto out_nomem;
                hdrs = t;
        }

        char errbuf[CURL_ERROR_SIZE] = "";
        r->content_length = -1;
        curl_easy_setopt(h, CURLOPT_URL, url);
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, errbuf);
        curl_easy_setopt(h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(h, CURLOPT_HTTP_VERSION, (long)CURL_HTTP_VERSION_1_1);
        /* Keys may hold "./" or "//": they are names, not paths to normalise. */
        curl_easy_setopt(h, CURLOPT_PATH_AS_IS, 1L);
        curl_easy_setopt(h, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(h, CURLOPT_PROTOCOLS_STR, "http,https");
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, hdrs);
        curl_easy_setopt(h, CURLOPT_HEADERFUNCTION, shoal_s3_on_header);
        curl_easy_setopt(h, CURLOPT_HEADERDATA, r);
        curl_easy_setopt(h, CURLOPT_WRITEFUNCTION, shoal_s3_on_body);
        curl_easy_setopt(h, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(h, CURLOPT_TIMEOUT_MS, timeout_ms);
        curl_easy_setopt(h, CURLOPT_CONNECTTIMEOUT_MS, SHOAL_MIN(timeout_ms, 10000L));
        /* A stalled transfer is cut well before a long deadline, leaving time to retry. */
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_LIMIT, 1024L);
        curl_easy_setopt(h, CURLOPT_LOW_SPEED_TIME, 15L);
        curl_easy_setopt(h, CURLOPT_SHARE, s->share);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYPEER, 1L);
        curl_easy_setopt(h, CURLOPT_SSL_VERIFYHOST, 2L);
        if (s->ca_file)
                curl_easy_setopt(h, CURLOPT_CAINFO, s->ca_file);
        if (s->access_key) {
                curl_easy_setopt(h, CURLOPT_AWS_SIGV4, s->sigv4);
                curl_easy_setopt(h, CURLOPT_USERNAME, s->access_key);
                curl_easy_setopt(h, CURLOPT_PASSWORD, s->secret_key);
        }
        if (!strcmp(method, "HEAD")) {
                curl_easy_setopt(h, CURLOPT_NOBODY, 1L);
        } else if (!strcmp(method, "PUT")) {
                /* Streamed from the caller's buffer: no copy into libcurl. */
                curl_easy_setopt(h, CURLOPT_UPLOAD, 1L);
                curl_easy_setopt(h, CURLOPT_READFUNCTION, on_read);
                curl_easy_setopt(h, CURLOPT_READDATA, body);
                curl_easy_setopt(h, CURLOPT_SEEKFUNCTION, on_seek);
                curl_easy_setopt(h, CURLOPT_SEEKDATA, body);
                curl_easy_setopt(h, CURLOPT_INFILESIZE_LARGE, (curl_off_t)body->len);
        } else if (!strcmp(method, "POST")) {
                curl_easy_setopt(h, CURLOPT_POST, 1L);
                curl_easy_setopt(h, CURLOPT_POSTFIELDS, body ? body->data : "");
                curl_easy_setopt(h, CURLOPT_POSTFIELDSIZE_LARGE,
                                 (curl_off_t)(body ? body->len : 0));
        } else if (strcmp(method, "GET")) {
                curl_easy_setopt(h, CURLOPT_CUSTOMREQUEST, method);
        }

        CURLcode c = curl_easy_perform(h);
        last_curl = c;
        shoal_strlcpy(last_curl_msg, errbuf[0] ? errbuf : curl_easy_strerror(c),
                      sizeof(last_curl_msg));
        if (c == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
        else
                rc = map_curl(s, c, r, what, key, errbuf[0] ? errbuf : curl_easy_strerror(c));
        if (rc)
                log_debug("s3", "%s %s: %s (%s)", what, key, strerror(-rc),
                          errbuf[0] ? errbuf : curl_easy_strerror(c));
        curl_slist_free_all(hdrs);
        /* Detach what lives on this stack before the handle goes back to the pool. */
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        if (c == CURLE_OK || c == CURLE_HTTP_RETURNED_ERROR)
                handle_put(s, h);
        else
                curl_easy_cleanup(h); /* its connection is in an unknown state */
        return rc;

out_nomem:
        curl_slist_free_all(hdrs);
        handle_put(s, h);
        return -ENOMEM;
}

/* URL of object KEY (the bucket prefix added), or -ENAMETOOLONG. */
static int object_url(struct s3_store *s, const char *key, char *out, size_t outlen)
{
        char full[SHOAL_KEY_MAX * 2 + 2];
        int n = snprintf(full, sizeof(full), "%s%s", s->prefix, key);
        if (n < 0 || (size_t)n >= sizeof(full))
                return -ENAMETOOLONG;
        size_t bl = strlen(s->base);
        if (bl + 1 >= outlen)
                return -ENAMETOOLONG;
        memcpy(out, s->base, bl);
        out[bl] = '/';
        if (uri_encode(full, true, out + bl + 1, outlen - bl - 1) < 0)
                return -ENAMETOOLONG;
        return 0;
}

static int s3_stat(struct shoal_store *st, const char *key, struct shoal_object *out)
{
        struct s3_store *s = st->impl;
        char url[6 * SHOAL_KEY_MAX + 1200]; /* a key and the prefix, each 3x when encoded */
        int rc = object_url(s, key, url, sizeof(url));
        if (rc)
                return -EINVAL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        rc = perform(s, "HEAD", url, NULL, r, "HEAD", key);
        if (rc)
                goto out;
        if (r->status != 200) {
                rc = map_status(s, r, "HEAD", key);
                goto out;
        }
        memset(out, 0, sizeof(*out));
        if (r->content_length < 0 ||
            shoal_s3_etag_version(r->etag, out->version, sizeof(out->version))) {
                log_ratelimited(SHOAL_LOG_WARN, "s3",
                                "HEAD %s: answer without a usable Content-Length or ETag", key);
                rc = -EPROTO;
                goto out;
        }
        shoal_strlcpy(out->key, key, sizeof(out->key));
        out->size = (uint64_t)r->content_length;
        time_t mt = r->last_modified[0] ? curl_getdate(r->last_modified, NULL) : -1;
        out->mtime_ns = mt > 0 ? (int64_t)mt * (int64_t)SHOAL_NS_PER_SEC : 0;
out:
        free(r);
        return rc;
}

static int s3_read(struct shoal_store *st, const char *key, const char *version, uint64_t off,
                   size_t len, void *buf)
{
        struct s3_store *s = st->impl;
        if (!len)
                return 0;
        char url[6 * SHOAL_KEY_MAX + 1200]; /* a key and the prefix, each 3x when encoded */
        if (object_url(s, key, url, sizeof(url)))
                return -EINVAL;
        char range[96], ifmatch[SHOAL_VERSION_MAX + 16];
        snprintf(range, sizeof(range), "Range: bytes=%" PRIu64 "-%" PRIu64, off,
                 off + (uint64_t)len - 1);
        const char *extra[3] = {range, NULL, NULL};
        if (version) {
                snprintf(ifmatch, sizeof(ifmatch), "If-Match: \"%s\"", version);
                extra[1] = ifmatch;
        }
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->buf = buf;
        r->cap = len;
        int rc = perform(s, "GET", url, extra, r, "GET", key);
        if (rc)
                goto out;
        if (r->status != 206 && r->status != 200) {
                rc = map_status(s, r, "GET", key);
                goto out;
        }
        /* Exactly the range asked for, or nothing: a 200 carries the whole object, which is our
         * range only when it starts at 0 and is LEN bytes long. */
        if (r->got != len || r->overflow ||
            (r->content_length >= 0 && (uint64_t)r->content_length != len) ||
            (r->status == 206 && !shoal_s3_content_range_ok(r->content_range, off, len)) ||
            (r->status == 200 && off != 0)) {
                log_ratelimited(SHOAL_LOG_WARN, "s3",
                                "GET %s [%" PRIu64 "+%zu]: got %zu bytes (HTTP %ld, %s), "
                                "discarded",
                                key, off, len, r->got, r->status,
                                r->content_range[0] ? r->content_range : "no Content-Range");
                rc = -EPROTO;
                goto out;
        }
        /* Servers that ignore If-Match still name the version they sent. */
        if (version && r->etag[0]) {
                char v[SHOAL_VERSION_MAX + 1];
                if (shoal_s3_etag_version(r->etag, v, sizeof(v)) || strcmp(v, version)) {
                        rc = -ESTALE;
                        goto out;
                }
        }
out:
        free(r);
        return rc;
}

/* --- listing ----------------------------------------------------------------------------- */

/* Appends "&NAME=ENCODED(VALUE)" (or without '&' first) to Q. */
static int query_add(char *q, size_t qlen, const char *name, const char *value)
{
        size_t l = strlen(q);
        int n = snprintf(q + l, qlen - l, "%s%s=", l ? "&" : "", name);
        if (n < 0 || (size_t)n >= qlen - l)
                return -ENAMETOOLONG;
        l += (size_t)n;
        return uri_encode(value, false, q + l, qlen - l) < 0 ? -ENAMETOOLONG : 0;
}

static int s3_list(struct shoal_store *st, const char *prefix, const char *delim,
                   const char *start_after, shoal_list_cb cb, void *arg)
{
        struct s3_store *s = st->impl;
        char full_prefix[2 * SHOAL_KEY_MAX + 2], full_after[2 * SHOAL_KEY_MAX + 2];
        snprintf(full_prefix, sizeof(full_prefix), "%s%s", s->prefix, prefix);
        if (start_after && *start_after)
                snprintf(full_after, sizeof(full_after), "%s%s", s->prefix, start_after);
        else
                full_after[0] = '\0';
        char max_keys[16];
        snprintf(max_keys, sizeof(max_keys), "%u", s->list_max_keys);

        size_t qcap = 16 * SHOAL_KEY_MAX + 4096;
        char *url = malloc(qcap + sizeof(s->list_path) + 2);
        char *q = malloc(qcap);
        char *token = NULL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        int rc = 0;
        if (!url || !q || !r) {
                rc = -ENOMEM;
                goto out;
        }
        for (;;) {
                /* Parameters in byte order of their names: the query string as sent is then
                 * already the canonical one that SigV4 signs. */
                q[0] = '\0';
                if ((token && (rc = query_add(q, qcap, "continuation-token", token))) ||
                    (delim && *delim && (rc = query_add(q, qcap, "delimiter", delim))) ||
                    (rc = query_add(q, qcap, "encoding-type", "url")) ||
                    (rc = query_add(q, qcap, "list-type", "2")) ||
                    (rc = query_add(q, qcap, "max-keys", max_keys)) ||
                    (rc = query_add(q, qcap, "prefix", full_prefix)) ||
                    (!token && full_after[0] &&
                     (rc = query_add(q, qcap, "start-after", full_after)))) {
                        rc = -EINVAL;
                        goto out;
                }
                snprintf(url, qcap + sizeof(s->list_path) + 2, "%s?%s", s->list_path, q);
                for (unsigned attempt = 1;; attempt++) {
                        free(r->buf);
                        memset(r, 0, sizeof(*r));
                        r->grow = true;
                        rc = perform(s, "GET", url, NULL, r, "LIST", full_prefix);
                        if (!rc && r->status != 200)
                                rc = map_status(s, r, "LIST", full_prefix);
                        if (!rc || !shoal_store_retry_wait(st, rc, attempt))
                                break;
                }
                if (rc)
                        goto out;
                char *next = NULL;
                rc = shoal_s3_list_page(s->prefix, s->prefix_len, r->buf ? r->buf : "", r->got, cb,
                                        arg, &next);
                free(token);
                token = next;
                if (rc || !token)
                        goto out;
        }
out:
        if (r)
                free(r->buf);
        free(r);
        free(token);
        free(q);
        free(url);
        return rc;
}

/* The cause of a failed transport, in the words an operator looks for. */
static const char *curl_cause(CURLcode c)
{
        switch (c) {
        case CURLE_COULDNT_RESOLVE_HOST:
        case CURLE_COULDNT_RESOLVE_PROXY:
                return "cannot resolve the host";
        case CURLE_COULDNT_CONNECT:
                return "connection refused or unreachable";
        case CURLE_OPERATION_TIMEDOUT:
                return "timed out";
        case CURLE_PEER_FAILED_VERIFICATION:
        case CURLE_SSL_CACERT_BADFILE:
        case CURLE_SSL_CERTPROBLEM:
        case CURLE_SSL_CONNECT_ERROR:
                return "TLS failed";
        default:
                return "transport error";
        }
}

/* One LIST of at most one key under the prefix: the bucket is there, and answers us. WHY gets
 * "BASE: CAUSE", the bucket's address naming the endpoint. */
static int s3_check(struct shoal_store *st, char *out, size_t outlen)
{
        struct s3_store *s = st->impl;
        char why[512] = "";
        size_t whylen = sizeof(why);
        char q[3 * SHOAL_KEY_MAX + 128];
        q[0] = '\0';
        if (query_add(q, sizeof(q), "list-type", "2") || query_add(q, sizeof(q), "max-keys", "1") ||
            query_add(q, sizeof(q), "prefix", s->prefix))
                return -EINVAL;
        size_t ulen = strlen(s->list_path) + strlen(q) + 2;
        char *url = malloc(ulen);
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        int rc = -ENOMEM;
        if (!url || !r)
                goto out;
        snprintf(url, ulen, "%s?%s", s->list_path, q);
        for (unsigned attempt = 1;; attempt++) {
                free(r->buf);
                memset(r, 0, sizeof(*r));
                r->grow = true;
                rc = perform(s, "GET", url, NULL, r, "LIST", s->prefix);
                if (rc) {
                        snprintf(why, whylen, "%s (%s)", curl_cause(last_curl), last_curl_msg);
                } else if (r->status != 200) {
                        const char *end = r->err + r->err_len;
                        char *code = shoal_s3_xml_get(r->err, end, "Code");
                        char *msg = shoal_s3_xml_get(r->err, end, "Message");
                        snprintf(why, whylen, "HTTP %ld%s%s%s%s", r->status, code ? " " : "",
                                 code ? code : "", msg ? ": " : "", msg ? msg : "");
                        free(code);
                        free(msg);
                        rc = map_status(s, r, "LIST", s->prefix);
                        if (!rc)
                                rc = -EIO;
                }
                /* Throttling and a busy store pass; a store that is not there does not. */
                if (!rc || (rc != -EAGAIN && rc != -ECONNRESET) ||
                    !shoal_store_retry_wait(st, rc, attempt))
                        break;
        }
out:
        if (r)
                free(r->buf);
        free(r);
        free(url);
        /* The store's message is the store's: no control byte of it reaches the one line. */
        for (char *p = why; *p; p++)
                if ((unsigned char)*p < 0x20 || *p == 0x7f)
                        *p = '?';
        if (rc)
                snprintf(out, outlen, "%s: %s", s->base, why[0] ? why : strerror(-rc));
        return rc;
}

/* --- uploads [W2] ------------------------------------------------------------------------- */

/* Answers of the upload requests that map differently from reads'. */
static int map_upload_status(struct s3_store *s, const struct shoal_s3_resp *r, unsigned flags,
                             const char *what, const char *key)
{
        if (r->status == 412 && (flags & SHOAL_UPLOAD_CREATE))
                return -EEXIST; /* If-None-Match: * found the object */
        if (r->status == 409)
                return -EAGAIN; /* ConditionalRequestConflict: a racing write; try again */
        if (r->status == 400) {
                char *code = shoal_s3_xml_get(r->err, r->err + r->err_len, "Code");
                bool damaged =
                        code && (!strcmp(code, "XAmzContentSHA256Mismatch") ||
                                 !strcmp(code, "BadDigest") || !strcmp(code, "IncompleteBody"));
                free(code);
                if (damaged) {
                        log_ratelimited(SHOAL_LOG_WARN, "s3",
                                        "%s %s: the store got a damaged body; sending again", what,
                                        key);
                        return -EPROTO;
                }
        }
        return map_status(s, r, what, key);
}

/* URL of KEY with the query Q ("uploads", "uploadId=..."), already in canonical order. */
static int object_url_q(struct s3_store *s, const char *key, const char *q, char *out,
                        size_t outlen)
{
        if (object_url(s, key, out, outlen))
                return -EINVAL;
        size_t l = strlen(out);
        int n = snprintf(out + l, outlen - l, "?%s", q);
        return n < 0 || (size_t)n >= outlen - l ? -EINVAL : 0;
}

#define S3_URL_MAX (6 * SHOAL_KEY_MAX + 4096) /* an object URL and an upload query */

/* A 2xx POST answer may still be an error: S3 can fail CompleteMultipartUpload after it sent
 * 200, and then the body is an <Error>. */
static int body_error(const struct shoal_s3_resp *r, const char *what, const char *key)
{
        const char *b = r->buf ? r->buf : "";
        const char *end = b + r->got;
        if (!memmem(b, r->got, "<Error>", 7))
                return 0;
        char *code = shoal_s3_xml_get(b, end, "Code");
        int rc = code && (!strcmp(code, "InternalError") || !strcmp(code, "SlowDown") ||
                          !strcmp(code, "ServiceUnavailable"))
                         ? -EAGAIN
                         : -EIO;
        log_ratelimited(SHOAL_LOG_WARN, "s3", "%s %s: 200 with error %s", what, key,
                        code ? code : "(no code)");
        free(code);
        return rc;
}

static int s3_put(struct shoal_store *st, const char *key, const void *data, size_t len,
                  unsigned flags, char *version, size_t vlen)
{
        struct s3_store *s = st->impl;
        char url[S3_URL_MAX];
        if (object_url(s, key, url, sizeof(url)))
                return -EINVAL;
        const char *extra[2] = {flags & SHOAL_UPLOAD_CREATE ? "If-None-Match: *" : NULL, NULL};
        struct s3_body b = {.data = data ? data : "", .len = len};
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc = perform_req(s, "PUT", url, extra, &b, r, "PUT", key);
        if (!rc && r->status != 200)
                rc = map_upload_status(s, r, flags, "PUT", key);
        if (!rc && shoal_s3_etag_version(r->etag, version, vlen)) {
                log_ratelimited(SHOAL_LOG_WARN, "s3", "PUT %s: answer without a usable ETag", key);
                rc = -EPROTO;
        }
        free(r);
        return rc;
}

static int s3_mpu_begin(struct shoal_store *st, const char *key, char *id, size_t idlen)
{
        struct s3_store *s = st->impl;
        char url[S3_URL_MAX];
        /* "uploads=", not "uploads": libcurl signs the query as written, and S3 signs the
         * canonical form, where every name has an '='. */
        if (object_url_q(s, key, "uploads=", url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->grow = true;
        static const char *const extra[] = {"Content-Type: application/octet-stream", NULL};
        int rc = perform_req(s, "POST", url, extra, NULL, r, "CreateMultipartUpload", key);
        if (!rc && r->status != 200)
                rc = map_upload_status(s, r, 0, "CreateMultipartUpload", key);
        if (!rc && !(rc = body_error(r, "CreateMultipartUpload", key))) {
                char *v = r->buf ? shoal_s3_xml_get(r->buf, r->buf + r->got, "UploadId") : NULL;
                if (!v || !*v || strlen(v) >= idlen || !shoal_key_valid(v, strlen(v)))
                        rc = -EPROTO;
                else
                        shoal_strlcpy(id, v, idlen);
                free(v);
        }
        free(r->buf);
        free(r);
        return rc;
}

/* "partNumber=N&uploadId=ID" (names in byte order: the canonical query SigV4 signs). */
static int upload_query(char *q, size_t qlen, unsigned num, const char *id)
{
        q[0] = '\0';
        if (num) {
                char n[16];
                snprintf(n, sizeof(n), "%u", num);
                if (query_add(q, qlen, "partNumber", n))
                        return -EINVAL;
        }
        return query_add(q, qlen, "uploadId", id) ? -EINVAL : 0;
}

static int s3_mpu_part(struct shoal_store *st, const char *key, const char *id, unsigned num,
                       const void *data, size_t len, char *etag, size_t etaglen)
{
        struct s3_store *s = st->impl;
        char q[3 * UPLOAD_ID_MAX_S3 + 64], url[S3_URL_MAX];
        if (upload_query(q, sizeof(q), num, id) || object_url_q(s, key, q, url, sizeof(url)))
                return -EINVAL;
        struct s3_body b = {.data = data, .len = len};
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc = perform_req(s, "PUT", url, NULL, &b, r, "UploadPart", key);
        if (!rc && r->status != 200)
                rc = map_upload_status(s, r, 0, "UploadPart", key);
        char v[SHOAL_VERSION_MAX + 1];
        if (!rc && (shoal_s3_etag_version(r->etag, v, sizeof(v)) || strlen(v) >= etaglen)) {
                log_ratelimited(SHOAL_LOG_WARN, "s3", "UploadPart %s #%u: no usable ETag", key,
                                num);
                rc = -EPROTO;
        }
        if (!rc)
                shoal_strlcpy(etag, v, etaglen);
        free(r);
        return rc;
}

/* Appends S to the growing string *B (of *LEN bytes, *CAP allocated), XML-escaped when ESC. */
static int buf_put(char **b, size_t *len, size_t *cap, const char *s, bool esc)
{
        size_t need = strlen(s) * (esc ? 6 : 1) + 1;
        if (*len + need > *cap) {
                size_t nc = SHOAL_MAX(*cap * 2, *len + need + 4096);
                char *nb = realloc(*b, nc);
                if (!nb)
                        return -ENOMEM;
                *b = nb;
                *cap = nc;
        }
        for (const char *p = s; *p; p++) {
                const char *rep = NULL;
                if (esc)
                        rep = *p == '&'   ? "&amp;"
                              : *p == '<' ? "&lt;"
                              : *p == '>' ? "&gt;"
                              : *p == '"' ? "&quot;"
                                          : NULL;
                if (rep) {
                        memcpy(*b + *len, rep, strlen(rep));
                        *len += strlen(rep);
                } else {
                        (*b)[(*len)++] = *p;
                }
        }
        (*b)[*len] = '\0';
        return 0;
}

static char *complete_body(const char *const *etags, unsigned n, size_t *blen)
{
        char *b = NULL;
        size_t len = 0, cap = 0;
        int rc = buf_put(&b, &len, &cap, "<CompleteMultipartUpload>", false);
        for (unsigned i = 0; i < n && !rc; i++) {
                char num[64];
                snprintf(num, sizeof(num), "<Part><PartNumber>%u</PartNumber><ETag>\"", i + 1);
                rc = buf_put(&b, &len, &cap, num, false);
                if (!rc)
                        rc = buf_put(&b, &len, &cap, etags[i], true);
                if (!rc)
                        rc = buf_put(&b, &len, &cap, "\"</ETag></Part>", false);
        }
        if (!rc)
                rc = buf_put(&b, &len, &cap, "</CompleteMultipartUpload>", false);
        if (rc) {
                free(b);
                return NULL;
        }
        *blen = len;
        return b;
}

static int s3_mpu_complete(struct shoal_store *st, const char *key, const char *id,
                           const char *const *etags, unsigned n, unsigned flags, char *version,
                           size_t vlen)
{
        struct s3_store *s = st->impl;
        char q[3 * UPLOAD_ID_MAX_S3 + 64], url[S3_URL_MAX];
        if (upload_query(q, sizeof(q), 0, id) || object_url_q(s, key, q, url, sizeof(url)))
                return -EINVAL;
        size_t blen;
        char *xml = complete_body(etags, n, &blen);
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!xml || !r) {
                free(xml);
                free(r);
                return -ENOMEM;
        }
        r->grow = true;
        const char *extra[3] = {"Content-Type: application/xml",
                                flags & SHOAL_UPLOAD_CREATE ? "If-None-Match: *" : NULL, NULL};
        struct s3_body b = {.data = xml, .len = blen};
        int rc = perform_req(s, "POST", url, extra, &b, r, "CompleteMultipartUpload", key);
        if (!rc && r->status != 200)
                rc = map_upload_status(s, r, flags, "CompleteMultipartUpload", key);
        if (!rc)
                rc = body_error(r, "CompleteMultipartUpload", key);
        if (!rc) {
                char *etag = r->buf ? shoal_s3_xml_get(r->buf, r->buf + r->got, "ETag") : NULL;
                if (!etag || shoal_s3_etag_version(etag, version, vlen)) {
                        /* Some stores leave it out: the object's HEAD names it. */
                        struct shoal_object o;
                        rc = s3_stat(st, key, &o);
                        if (!rc && o.size == 0 && n)
                                rc = -EPROTO;
                        if (!rc)
                                shoal_strlcpy(version, o.version, vlen);
                }
                free(etag);
        }
        free(r->buf);
        free(r);
        free(xml);
        return rc;
}

static int s3_mpu_abort(struct shoal_store *st, const char *key, const char *id)
{
        struct s3_store *s = st->impl;
        char q[3 * UPLOAD_ID_MAX_S3 + 64], url[S3_URL_MAX];
        if (upload_query(q, sizeof(q), 0, id) || object_url_q(s, key, q, url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc = perform(s, "DELETE", url, NULL, r, "AbortMultipartUpload", key);
        if (!rc && r->status != 204 && r->status != 200 && r->status != 404)
                rc = map_upload_status(s, r, 0, "AbortMultipartUpload", key);
        free(r);
        return rc;
}

static int s3_remove(struct shoal_store *st, const char *key)
{
        struct s3_store *s = st->impl;
        char url[S3_URL_MAX];
        if (object_url(s, key, url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc = perform(s, "DELETE", url, NULL, r, "DELETE", key);
        if (!rc && r->status != 204 && r->status != 200 && r->status != 404)
                rc = map_status(s, r, "DELETE", key);
        free(r);
        return rc;
}

/* CopyObject [W2]: DST becomes a copy of SRC made by the store, only while SRC still has
 * VERSION (x-amz-copy-source-if-match), so the copy is of the object the caller stat'ed. The
 * answer is 200 with a CopyObjectResult, or, like CompleteMultipartUpload, 200 with an <Error>. */
static int s3_copy(struct shoal_store *st, const char *src, const char *version, const char *dst,
                   char *version_out, size_t vlen)
{
        struct s3_store *s = st->impl;
        char url[S3_URL_MAX], full[SHOAL_KEY_MAX * 2 + 2], ifmatch[SHOAL_VERSION_MAX + 48];
        int n = snprintf(full, sizeof(full), "%s%s", s->prefix, src);
        if (n < 0 || (size_t)n >= sizeof(full) || object_url(s, dst, url, sizeof(url)))
                return -EINVAL;
        size_t hlen = 3 * sizeof(full) + sizeof(s->bucket) + 32;
        char *hsrc = malloc(hlen);
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!hsrc || !r) {
                free(hsrc);
                free(r);
                return -ENOMEM;
        }
        int l = snprintf(hsrc, hlen, "x-amz-copy-source: /%s/", s->bucket);
        int rc = uri_encode(full, true, hsrc + l, hlen - (size_t)l) < 0 ? -EINVAL : 0;
        snprintf(ifmatch, sizeof(ifmatch), "x-amz-copy-source-if-match: \"%s\"", version);
        const char *extra[3] = {hsrc, ifmatch, NULL};
        struct s3_body b = {.data = "", .len = 0};
        r->grow = true;
        if (!rc)
                rc = perform_req(s, "PUT", url, extra, &b, r, "CopyObject", dst);
        if (!rc && r->status == 412)
                rc = -ESTALE;
        else if (!rc && r->status != 200)
                rc = map_upload_status(s, r, 0, "CopyObject", dst);
        if (!rc)
                rc = body_error(r, "CopyObject", dst);
        if (!rc) {
                char *etag = r->buf ? shoal_s3_xml_get(r->buf, r->buf + r->got, "ETag") : NULL;
                if (!etag || shoal_s3_etag_version(etag, version_out, vlen))
                        version_out[0] = '\0'; /* the caller's stat names it */
                free(etag);
        }
        free(r->buf);
        free(r);
        free(hsrc);
        return rc;
}

/* --- open and close ---------------------------------------------------------------------- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
        struct s3_store *s = arg;
        pthread_mutex_lock(&s->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *arg)
{
        struct s3_store *s = arg;
        pthread_mutex_unlock(&s->share_mu[data]);
}

static void s3_free(struct s3_store *s)
{
        for (unsigned i = 0; i < s->npool; i++)
                curl_easy_cleanup(s->pool[i]);
        if (s->share)
                curl_share_cleanup(s->share);
        for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
                pthread_mutex_destroy(&s->share_mu[i]);
        pthread_mutex_destroy(&s->pool_mu);
        free(s->access_key);
        if (s->secret_key) {
                explicit_bzero(s->secret_key, strlen(s->secret_key));
                free(s->secret_key);
        }
        if (s->token_header) {
                explicit_bzero(s->token_header, strlen(s->token_header));
                free(s->token_header);
        }
        free(s->ca_file);
        free(s);
}

static void s3_close(struct shoal_store *st)
{
        if (st->impl)
                s3_free(st->impl);
        st->impl = NULL;
}

/* Bucket names as S3 allows them (with the legacy upper case and '_' some stores accept). */
static bool bucket_ok(const char *b)
{
        size_t l = strlen(b);
        if (l < 3 || l > 63)
                return false;
        for (const char *p = b; *p; p++)
                if (!isalnum((unsigned char)*p) && *p != '-' && *p != '.' && *p != '_')
                        return false;
        return true;
}

/* A bucket that can be a DNS label under TLS: no dots (they break the wildcard certificate). */
static bool bucket_vhost_ok(const char *b)
{
        for (const char *p = b; *p; p++)
                if (!(islower((unsigned char)*p) || isdigit((unsigned char)*p) || *p == '-'))
                        return false;
        return true;
}

static int build_base(struct s3_store *s, const char *endpoint, char *err, size_t errlen)
{
        char ep[900];
        if (!endpoint) {
                snprintf(ep, sizeof(ep), "https://s3.%s.amazonaws.com", s->region);
        } else if (strstr(endpoint, "://")) {
                if (strncmp(endpoint, "http://", 7) && strncmp(endpoint, "https://", 8)) {
                        snprintf(err, errlen, "invalid --endpoint %s: expected http:// or https://",
                                 endpoint);
                        return -EINVAL;
                }
                shoal_strlcpy(ep, endpoint, sizeof(ep));
        } else {
                snprintf(ep, sizeof(ep), "https://%s", endpoint);
        }
        /* Trailing slashes go, but never into the scheme: "http://" and "//" have no host. */
        const char *host = strstr(ep, "://") + 3;
        size_t l = strlen(ep);
        while (ep + l > host && ep[l - 1] == '/')
                ep[--l] = '\0';
        if (!*host || strchr(host, '?') || strchr(host, '#') || strchr(host, ' ')) {
                snprintf(err, errlen, "invalid --endpoint %s", endpoint ? endpoint : ep);
                return -EINVAL;
        }
        /* AWS itself wants virtual-hosted addressing; every other store gets path style. */
        const char *slash = strchr(host, '/');
        size_t hl = slash ? (size_t)(slash - host) : strlen(host);
        const char *colon = memchr(host, ':', hl);
        size_t name_len = colon ? (size_t)(colon - host) : hl;
        bool aws = name_len > 14 && !memcmp(host + name_len - 14, ".amazonaws.com", 14);
        int n;
        if (aws && !slash && bucket_vhost_ok(s->bucket)) {
                n = snprintf(s->base, sizeof(s->base), "%.*s%s.%s", (int)(host - ep), ep, s->bucket,
                             host);
                if (n > 0 && (size_t)n < sizeof(s->base))
                        snprintf(s->list_path, sizeof(s->list_path), "%s/", s->base);
        } else {
                n = snprintf(s->base, sizeof(s->base), "%s/%s", ep, s->bucket);
                if (n > 0 && (size_t)n < sizeof(s->base))
                        snprintf(s->list_path, sizeof(s->list_path), "%s", s->base);
        }
        if (n < 0 || (size_t)n >= sizeof(s->base)) {
                snprintf(err, errlen, "--endpoint is too long");
                return -EINVAL;
        }
        return 0;
}

int shoal_store_s3_open(struct shoal_store *st, const char *url, char *err, size_t errlen)
{
        pthread_once(&curl_once, curl_init_once);
        if (curl_init_rc != CURLE_OK) {
                snprintf(err, errlen, "storage %s: libcurl: %s", url,
                         curl_easy_strerror(curl_init_rc));
                return -EIO;
        }
        struct s3_store *s = calloc(1, sizeof(*s));
        if (!s) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        pthread_mutex_init(&s->pool_mu, NULL);
        for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
                pthread_mutex_init(&s->share_mu[i], NULL);
        int rc = -EINVAL;

        const char *b = url + strlen("s3://");
        const char *slash = strchr(b, '/');
        size_t bl = slash ? (size_t)(slash - b) : strlen(b);
        if (bl >= sizeof(s->bucket)) {
                snprintf(err, errlen, "storage %s: bucket name too long", url);
                goto out_free;
        }
        memcpy(s->bucket, b, bl);
        s->bucket[bl] = '\0';
        if (!bucket_ok(s->bucket)) {
                snprintf(err, errlen,
                         "storage %s: invalid bucket name (expected s3://BUCKET[/PREFIX])", url);
                goto out_free;
        }
        if (slash) {
                const char *p = slash + 1;
                size_t pl = strlen(p);
                while (pl && p[pl - 1] == '/')
                        pl--;
                if (pl) {
                        if (pl + 1 >= SHOAL_KEY_MAX || !shoal_key_valid(p, pl)) {
                                snprintf(err, errlen, "storage %s: invalid prefix", url);
                                goto out_free;
                        }
                        memcpy(s->prefix, p, pl);
                        s->prefix[pl] = '/';
                        s->prefix_len = pl + 1;
                }
        }

        const struct shoal_env *env = shoal_config_env();
        /* config.c checked the region: at most 63 bytes, no ':', '/' or spaces */
        const char *region = env->aws_region ? env->aws_region : "us-east-1";
        shoal_strlcpy(s->region, region, sizeof(s->region));
        snprintf(s->sigv4, sizeof(s->sigv4), "aws:amz:%s:s3", s->region);

        const char *endpoint =
                st->cfg.endpoint && *st->cfg.endpoint ? st->cfg.endpoint : env->aws_endpoint_url;
        if (build_base(s, endpoint, err, errlen))
                goto out_free;

        rc = -ENOMEM;
        const char *ak = env->aws_access_key_id, *sk = env->aws_secret_access_key;
        const char *tok = env->aws_session_token;
        if (ak && !sk) {
                snprintf(err, errlen, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
                rc = -EINVAL;
                goto out_free;
        }
        if (ak) {
                s->access_key = strdup(ak);
                s->secret_key = strdup(sk);
                if (!s->access_key || !s->secret_key)
                        goto out_nomem;
                if (tok) {
                        size_t tl = strlen(tok) + 32;
                        s->token_header = malloc(tl);
                        if (!s->token_header)
                                goto out_nomem;
                        snprintf(s->token_header, tl, "x-amz-security-token: %s", tok);
                }
        } else {
                log_info("s3",
                         "no AWS_ACCESS_KEY_ID: requests to %s go unsigned (public "
                         "buckets only)",
                         s->bucket);
        }

        /* config.c checked that it is a readable file */
        if (env->s3_ca_file && !(s->ca_file = strdup(env->s3_ca_file)))
                goto out_nomem;
        s->list_max_keys = env->s3_list_max_keys ? env->s3_list_max_keys : 1000;

        s->share = curl_share_init();
        if (!s->share)
                goto out_nomem;
        curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
        curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);

        log_info("s3", "storage %s: %s, region %s, %s", url, s->base, s->region,
                 s->access_key ? "signed (SigV4)" : "unsigned");
        static const struct shoal_store_ops s3_ops = {
                .scheme = "s3",
                .stat = s3_stat,
                .read = s3_read,
                .list = s3_list,
                .check = s3_check,
                .close = s3_close,
                .put = s3_put,
                .mpu_begin = s3_mpu_begin,
                .mpu_part = s3_mpu_part,
                .mpu_complete = s3_mpu_complete,
                .mpu_abort = s3_mpu_abort,
                .remove = s3_remove,
                .copy = s3_copy,
        };
        st->ops = &s3_ops;
        st->impl = s;
        return 0;

out_nomem:
        snprintf(err, errlen, "out of memory");
out_free:
        s3_free(s);
        return rc;
}
