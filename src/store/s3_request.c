/* Requests to an S3-compatible store (store_s3.c, s3_upload.c): the pool of libcurl easy handles,
 * SigV4 through libcurl, the payload hash, the deadline of the generic call on every request, and
 * the mapping of each outcome (a transport failure, an HTTP status and S3's error code) to the
 * error convention of store.h. */
#include "store/s3_request.h"

#include <ctype.h>
#include <errno.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "store/s3_parse.h"

/* SHA-256 of the empty payload: the hash S3 expects for GET, HEAD and list requests. */
#define S3_EMPTY_SHA256 "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"

/* The transport outcome of this thread's last request (shoal_s3_last_error). */
static _Thread_local CURLcode last_curl;
static _Thread_local char last_curl_msg[CURL_ERROR_SIZE];

CURLcode shoal_s3_last_error(const char **msg)
{
        *msg = last_curl_msg;
        return last_curl;
}

/* --- encoding ---------------------------------------------------------------------------- */

static bool unreserved(unsigned char c)
{
        return isalnum(c) || c == '-' || c == '.' || c == '_' || c == '~';
}

/* RFC 3986 percent-encoding as SigV4 wants it: everything but unreserved bytes (and '/' when
 * KEEP_SLASH, for object paths) becomes %XX with upper-case hex. Returns the length, or -1 when
 * OUT is too small. */
long shoal_s3_uri_encode(const char *in, bool keep_slash, char *out, size_t outlen)
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

static CURL *handle_get(struct shoal_s3_store *s)
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

static void handle_put(struct shoal_s3_store *s, CURL *h)
{
        pthread_mutex_lock(&s->pool_mu);
        if (s->npool < SHOAL_S3_POOL_MAX) {
                s->pool[s->npool++] = h;
                h = NULL;
        }
        pthread_mutex_unlock(&s->pool_mu);
        if (h)
                curl_easy_cleanup(h);
}

static int map_curl(struct shoal_s3_store *s, CURLcode c, const struct shoal_s3_resp *r,
                    const char *what, const char *key, const char *errbuf)
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

/* The errno of a 400 answer with S3's code CS (and message MSG, may be NULL). */
static int map_400(struct shoal_s3_store *s, const char *cs, const char *msg, const char *what,
                   const char *key)
{
        if (!strcmp(cs, "RequestTimeout"))
                return -ETIMEDOUT;
        if (!strcmp(cs, "ExpiredToken") || !strcmp(cs, "InvalidToken") ||
            !strcmp(cs, "AuthorizationHeaderMalformed")) {
                if (!atomic_exchange(&s->denied_logged, true))
                        log_error("s3",
                                  "%s %s: 400 %s%s%s — check AWS_SESSION_TOKEN and AWS_REGION",
                                  what, key, cs, msg ? ": " : "", msg ? msg : "");
                return -EACCES;
        }
        log_ratelimited(SHOAL_LOG_WARN, "s3", "%s %s: 400 %s%s%s", what, key, cs, msg ? ": " : "",
                        msg ? msg : "");
        return -EINVAL;
}

/* The errno of a 401 or 403 answer: logged as an error once, the store's words with it. */
static int map_denied(struct shoal_s3_store *s, long status, const char *cs, const char *msg,
                      const char *what, const char *key)
{
        if (!atomic_exchange(&s->denied_logged, true))
                log_error("s3",
                          "%s %s: %ld %s%s%s — check credentials (AWS_ACCESS_KEY_ID, "
                          "AWS_SECRET_ACCESS_KEY, AWS_SESSION_TOKEN), AWS_REGION and the bucket "
                          "policy",
                          what, key, status, *cs ? cs : "Forbidden", msg ? ": " : "",
                          msg ? msg : "");
        else
                log_debug("s3", "%s %s: %ld %s", what, key, status, cs);
        return -EACCES;
}

/* The errno of an answer that is not one of those map_status names by itself. */
static int map_other(const struct shoal_s3_resp *r, const char *cs, const char *what,
                     const char *key)
{
        if (r->status >= 500 && r->status <= 599)
                return -EAGAIN; /* 500 InternalError, 503 SlowDown and friends */
        log_ratelimited(SHOAL_LOG_WARN, "s3", "%s %s: unexpected HTTP %ld %s", what, key, r->status,
                        cs);
        return -EIO;
}

/* Maps a non-2xx answer. The error body (when there is one) names S3's code. */
int shoal_s3_map_status(struct shoal_s3_store *s, const struct shoal_s3_resp *r, const char *what,
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
                rc = map_denied(s, r->status, cs, msg, what, key);
                break;
        case 400:
                rc = map_400(s, cs, msg, what, key);
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
                rc = map_other(r, cs, what, key);
                break;
        }
        free(code);
        free(msg);
        return rc;
}

static size_t on_read(char *out, size_t size, size_t n, void *arg)
{
        struct shoal_s3_body *b = arg;
        size_t k = SHOAL_MIN(size * n, b->len - b->off);
        memcpy(out, b->data + b->off, k);
        b->off += k;
        return k;
}

/* libcurl rewinds the body when it must send it again on the same request (a redirect, a
 * connection that died before the answer). */
static int on_seek(void *arg, curl_off_t offset, int origin)
{
        struct shoal_s3_body *b = arg;
        if (origin != SEEK_SET || offset < 0 || (uint64_t)offset > b->len)
                return CURL_SEEKFUNC_CANTSEEK;
        b->off = (size_t)offset;
        return CURL_SEEKFUNC_OK;
}

/* The header that signs the payload: its SHA-256, so that the store refuses a body damaged on
 * the way (S3 answers XAmzContentSHA256Mismatch). */
static void payload_header(const struct shoal_s3_body *b, char *out, size_t outlen)
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

/* URL of object KEY (the bucket prefix added), or -ENAMETOOLONG. */
int shoal_s3_object_url(struct shoal_s3_store *s, const char *key, char *out, size_t outlen)
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
        if (shoal_s3_uri_encode(full, true, out + bl + 1, outlen - bl - 1) < 0)
                return -ENAMETOOLONG;
        return 0;
}

/* Appends "&NAME=ENCODED(VALUE)" (or without '&' first) to Q. */
int shoal_s3_query_add(char *q, size_t qlen, const char *name, const char *value)
{
        size_t l = strlen(q);
        int n = snprintf(q + l, qlen - l, "%s%s=", l ? "&" : "", name);
        if (n < 0 || (size_t)n >= qlen - l)
                return -ENAMETOOLONG;
        l += (size_t)n;
        return shoal_s3_uri_encode(value, false, q + l, qlen - l) < 0 ? -ENAMETOOLONG : 0;
}

/* Answers of the upload requests that map differently from reads'. */
int shoal_s3_map_upload_status(struct shoal_s3_store *s, const struct shoal_s3_resp *r,
                               unsigned flags, const char *what, const char *key)
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
        return shoal_s3_map_status(s, r, what, key);
}

/* URL of KEY with the query Q ("uploads", "uploadId=..."), already in canonical order. */
int shoal_s3_object_url_q(struct shoal_s3_store *s, const char *key, const char *q, char *out,
                          size_t outlen)
{
        if (shoal_s3_object_url(s, key, out, outlen))
                return -EINVAL;
        size_t l = strlen(out);
        int n = snprintf(out + l, outlen - l, "?%s", q);
        return n < 0 || (size_t)n >= outlen - l ? -EINVAL : 0;
}

/* A 2xx POST answer may still be an error: S3 can fail CompleteMultipartUpload after it sent
 * 200, and then the body is an <Error>. */
int shoal_s3_body_error(const struct shoal_s3_resp *r, const char *what, const char *key)
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

/* The header lines of one request: the payload hash, EXTRA (NULL-terminated) and the session
 * token. Only headers that are sent: libcurl signs every header in this list, and one that merely
 * removes a default ("Expect:") would be signed but never sent. NULL when out of memory. */
static struct curl_slist *request_headers(const struct shoal_s3_store *s, const char *const *extra,
                                          const struct shoal_s3_body *body)
{
        char payload[128];
        payload_header(body, payload, sizeof(payload));
        struct curl_slist *hdrs = curl_slist_append(NULL, payload), *t;
        for (const char *const *p = extra; hdrs && p && *p; p++) {
                if (!(t = curl_slist_append(hdrs, *p))) {
                        curl_slist_free_all(hdrs);
                        return NULL;
                }
                hdrs = t;
        }
        if (hdrs && s->token_header) {
                if (!(t = curl_slist_append(hdrs, s->token_header))) {
                        curl_slist_free_all(hdrs);
                        return NULL;
                }
                hdrs = t;
        }
        return hdrs;
}

/* The options every request has: URL, the headers, the answer into R, the timeouts, TLS and
 * the signature. */
static void common_options(struct shoal_s3_store *s, CURL *h, const char *url,
                           struct curl_slist *hdrs, struct shoal_s3_resp *r, char *errbuf,
                           long timeout_ms)
{
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
}

/* The options of METHOD, with BODY for PUT and POST. */
static void method_options(CURL *h, const char *method, struct shoal_s3_body *body)
{
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
}

int shoal_s3_perform(struct shoal_s3_store *s, const char *method, const char *url,
                     const char *const *extra, struct shoal_s3_resp *r, const char *what,
                     const char *key)
{
        return shoal_s3_perform_req(s, method, url, extra, NULL, r, what, key);
}

int shoal_s3_perform_req(struct shoal_s3_store *s, const char *method, const char *url,
                         const char *const *extra, struct shoal_s3_body *body,
                         struct shoal_s3_resp *r, const char *what, const char *key)
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
        struct curl_slist *hdrs = request_headers(s, extra, body);
        if (!hdrs) {
                handle_put(s, h);
                return -ENOMEM;
        }
        char errbuf[CURL_ERROR_SIZE] = "";
        int rc = 0;
        r->content_length = -1;
        common_options(s, h, url, hdrs, r, errbuf, timeout_ms);
        method_options(h, method, body);

        CURLcode c = curl_easy_perform(h);
        const char *cmsg = errbuf[0] ? errbuf : curl_easy_strerror(c);
        last_curl = c;
        shoal_strlcpy(last_curl_msg, cmsg, sizeof(last_curl_msg));
        if (c == CURLE_OK)
                curl_easy_getinfo(h, CURLINFO_RESPONSE_CODE, &r->status);
        else
                rc = map_curl(s, c, r, what, key, cmsg);
        if (rc)
                log_debug("s3", "%s %s: %s (%s)", what, key, strerror(-rc), cmsg);
        curl_slist_free_all(hdrs);
        /* Detach what lives on this stack before the handle goes back to the pool. */
        curl_easy_setopt(h, CURLOPT_ERRORBUFFER, NULL);
        curl_easy_setopt(h, CURLOPT_HTTPHEADER, NULL);
        if (c == CURLE_OK || c == CURLE_HTTP_RETURNED_ERROR)
                handle_put(s, h);
        else
                curl_easy_cleanup(h); /* its connection is in an unknown state */
        return rc;
}
