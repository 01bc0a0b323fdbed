/* s3://BUCKET[/PREFIX] — an S3-compatible object store over HTTP(S) with libcurl [O2, O3].
 *
 * Each call is one blocking request on an easy handle taken from a per-store pool, so a worker
 * thread reuses the connection its handle kept alive; DNS results and TLS sessions are shared
 * across handles. Requests are signed by libcurl (SigV4, CURLOPT_AWS_SIGV4). Every request is
 * bounded by the deadline of the generic call (store.c), so retries and a hung server together
 * never outlive it. The generic layer owns retries: each request only maps its outcome to the
 * error convention of store.h. This file holds the reads, listings, deletes and the store's
 * opening; s3_request.c performs and maps the requests, s3_upload.c holds uploads and copies. */
#include "store/store.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "store/s3_parse.h"
#include "store/s3_request.h"
#include "store/s3_upload.h"

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static int s3_stat(struct shoal_store *st, const char *key, struct shoal_object *out)
{
        struct shoal_s3_store *s = st->impl;
        char url[6 * SHOAL_KEY_MAX + 1200]; /* a key and the prefix, each 3x when encoded */
        int rc = shoal_s3_object_url(s, key, url, sizeof(url));
        if (rc)
                return -EINVAL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        rc = shoal_s3_perform(s, "HEAD", url, NULL, r, "HEAD", key);
        if (rc)
                goto out;
        if (r->status != 200) {
                rc = shoal_s3_map_status(s, r, "HEAD", key);
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
        struct shoal_s3_store *s = st->impl;
        if (!len)
                return 0;
        char url[6 * SHOAL_KEY_MAX + 1200]; /* a key and the prefix, each 3x when encoded */
        if (shoal_s3_object_url(s, key, url, sizeof(url)))
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
        int rc = shoal_s3_perform(s, "GET", url, extra, r, "GET", key);
        if (rc)
                goto out;
        if (r->status != 206 && r->status != 200) {
                rc = shoal_s3_map_status(s, r, "GET", key);
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

static int s3_list(struct shoal_store *st, const char *prefix, const char *delim,
                   const char *start_after, shoal_list_cb cb, void *arg)
{
        struct shoal_s3_store *s = st->impl;
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
                if ((token && (rc = shoal_s3_query_add(q, qcap, "continuation-token", token))) ||
                    (delim && *delim && (rc = shoal_s3_query_add(q, qcap, "delimiter", delim))) ||
                    (rc = shoal_s3_query_add(q, qcap, "encoding-type", "url")) ||
                    (rc = shoal_s3_query_add(q, qcap, "list-type", "2")) ||
                    (rc = shoal_s3_query_add(q, qcap, "max-keys", max_keys)) ||
                    (rc = shoal_s3_query_add(q, qcap, "prefix", full_prefix)) ||
                    (!token && full_after[0] &&
                     (rc = shoal_s3_query_add(q, qcap, "start-after", full_after)))) {
                        rc = -EINVAL;
                        goto out;
                }
                snprintf(url, qcap + sizeof(s->list_path) + 2, "%s?%s", s->list_path, q);
                for (unsigned attempt = 1;; attempt++) {
                        free(r->buf);
                        memset(r, 0, sizeof(*r));
                        r->grow = true;
                        rc = shoal_s3_perform(s, "GET", url, NULL, r, "LIST", full_prefix);
                        if (!rc && r->status != 200)
                                rc = shoal_s3_map_status(s, r, "LIST", full_prefix);
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
        struct shoal_s3_store *s = st->impl;
        char why[512] = "";
        size_t whylen = sizeof(why);
        char q[3 * SHOAL_KEY_MAX + 128];
        q[0] = '\0';
        if (shoal_s3_query_add(q, sizeof(q), "list-type", "2") ||
            shoal_s3_query_add(q, sizeof(q), "max-keys", "1") ||
            shoal_s3_query_add(q, sizeof(q), "prefix", s->prefix))
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
                rc = shoal_s3_perform(s, "GET", url, NULL, r, "LIST", s->prefix);
                if (rc) {
                        const char *cmsg;
                        CURLcode c = shoal_s3_last_error(&cmsg);
                        snprintf(why, whylen, "%s (%s)", curl_cause(c), cmsg);
                } else if (r->status != 200) {
                        const char *end = r->err + r->err_len;
                        char *code = shoal_s3_xml_get(r->err, end, "Code");
                        char *msg = shoal_s3_xml_get(r->err, end, "Message");
                        snprintf(why, whylen, "HTTP %ld%s%s%s%s", r->status, code ? " " : "",
                                 code ? code : "", msg ? ": " : "", msg ? msg : "");
                        free(code);
                        free(msg);
                        rc = shoal_s3_map_status(s, r, "LIST", s->prefix);
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

/* --- deleting (uploads and copies: s3_upload.c) ------------------------------------------ */

static int s3_remove(struct shoal_store *st, const char *key)
{
        struct shoal_s3_store *s = st->impl;
        char url[SHOAL_S3_URL_MAX];
        if (shoal_s3_object_url(s, key, url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc = shoal_s3_perform(s, "DELETE", url, NULL, r, "DELETE", key);
        if (!rc && r->status != 204 && r->status != 200 && r->status != 404)
                rc = shoal_s3_map_status(s, r, "DELETE", key);
        free(r);
        return rc;
}

/* --- open and close ---------------------------------------------------------------------- */

static void share_lock(CURL *h, curl_lock_data data, curl_lock_access access, void *arg)
{
        struct shoal_s3_store *s = arg;
        pthread_mutex_lock(&s->share_mu[data]);
}

static void share_unlock(CURL *h, curl_lock_data data, void *arg)
{
        struct shoal_s3_store *s = arg;
        pthread_mutex_unlock(&s->share_mu[data]);
}

static void s3_free(struct shoal_s3_store *s)
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

static int build_base(struct shoal_s3_store *s, const char *endpoint, char *err, size_t errlen)
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

/* Bucket and prefix of URL (s3://BUCKET[/PREFIX]) into S. */
static int parse_url(struct shoal_s3_store *s, const char *url, char *err, size_t errlen)
{
        const char *b = url + strlen("s3://");
        const char *slash = strchr(b, '/');
        size_t bl = slash ? (size_t)(slash - b) : strlen(b);
        if (bl >= sizeof(s->bucket)) {
                snprintf(err, errlen, "storage %s: bucket name too long", url);
                return -EINVAL;
        }
        memcpy(s->bucket, b, bl);
        s->bucket[bl] = '\0';
        if (!bucket_ok(s->bucket)) {
                snprintf(err, errlen,
                         "storage %s: invalid bucket name (expected s3://BUCKET[/PREFIX])", url);
                return -EINVAL;
        }
        if (!slash)
                return 0;
        const char *p = slash + 1;
        size_t pl = strlen(p);
        while (pl && p[pl - 1] == '/')
                pl--;
        if (!pl)
                return 0;
        if (pl + 1 >= SHOAL_KEY_MAX || !shoal_key_valid(p, pl)) {
                snprintf(err, errlen, "storage %s: invalid prefix", url);
                return -EINVAL;
        }
        memcpy(s->prefix, p, pl);
        s->prefix[pl] = '/';
        s->prefix_len = pl + 1;
        return 0;
}

/* The credentials of ENV into S (none: unsigned requests), and the CA file. */
static int load_credentials(struct shoal_s3_store *s, const struct shoal_env *env, char *err,
                            size_t errlen)
{
        const char *ak = env->aws_access_key_id, *sk = env->aws_secret_access_key;
        const char *tok = env->aws_session_token;
        if (ak && !sk) {
                snprintf(err, errlen, "AWS_ACCESS_KEY_ID is set but AWS_SECRET_ACCESS_KEY is not");
                return -EINVAL;
        }
        if (ak) {
                s->access_key = strdup(ak);
                s->secret_key = strdup(sk);
                if (!s->access_key || !s->secret_key)
                        return -ENOMEM;
                if (tok) {
                        size_t tl = strlen(tok) + 32;
                        s->token_header = malloc(tl);
                        if (!s->token_header)
                                return -ENOMEM;
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
                return -ENOMEM;
        return 0;
}

/* The share of DNS results and TLS sessions across S's handles. */
static int share_init(struct shoal_s3_store *s)
{
        s->share = curl_share_init();
        if (!s->share)
                return -ENOMEM;
        curl_share_setopt(s->share, CURLSHOPT_LOCKFUNC, share_lock);
        curl_share_setopt(s->share, CURLSHOPT_UNLOCKFUNC, share_unlock);
        curl_share_setopt(s->share, CURLSHOPT_USERDATA, s);
        curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_DNS);
        curl_share_setopt(s->share, CURLSHOPT_SHARE, CURL_LOCK_DATA_SSL_SESSION);
        return 0;
}

static const struct shoal_store_ops s3_ops = {
        .scheme = "s3",
        .stat = s3_stat,
        .read = s3_read,
        .list = s3_list,
        .check = s3_check,
        .close = s3_close,
        .put = shoal_s3_put,
        .mpu_begin = shoal_s3_mpu_begin,
        .mpu_part = shoal_s3_mpu_part,
        .mpu_complete = shoal_s3_mpu_complete,
        .mpu_abort = shoal_s3_mpu_abort,
        .remove = s3_remove,
        .copy = shoal_s3_copy,
        .copy_part = shoal_s3_copy_part,
};

int shoal_store_s3_open(struct shoal_store *st, const char *url, char *err, size_t errlen)
{
        pthread_once(&curl_once, curl_init_once);
        if (curl_init_rc != CURLE_OK) {
                snprintf(err, errlen, "storage %s: libcurl: %s", url,
                         curl_easy_strerror(curl_init_rc));
                return -EIO;
        }
        struct shoal_s3_store *s = calloc(1, sizeof(*s));
        if (!s) {
                snprintf(err, errlen, "out of memory");
                return -ENOMEM;
        }
        pthread_mutex_init(&s->pool_mu, NULL);
        for (int i = 0; i < CURL_LOCK_DATA_LAST; i++)
                pthread_mutex_init(&s->share_mu[i], NULL);
        int rc = parse_url(s, url, err, errlen);
        if (rc)
                goto out_free;

        const struct shoal_env *env = shoal_config_env();
        /* config.c checked the region: at most 63 bytes, no ':', '/' or spaces */
        const char *region = env->aws_region ? env->aws_region : "us-east-1";
        shoal_strlcpy(s->region, region, sizeof(s->region));
        snprintf(s->sigv4, sizeof(s->sigv4), "aws:amz:%s:s3", s->region);
        const char *endpoint =
                st->cfg.endpoint && *st->cfg.endpoint ? st->cfg.endpoint : env->aws_endpoint_url;
        if ((rc = build_base(s, endpoint, err, errlen)) ||
            (rc = load_credentials(s, env, err, errlen)) || (rc = share_init(s)))
                goto out_free;
        s->list_max_keys = env->s3_list_max_keys ? env->s3_list_max_keys : 1000;

        log_info("s3", "storage %s: %s, region %s, %s", url, s->base, s->region,
                 s->access_key ? "signed (SigV4)" : "unsigned");
        st->ops = &s3_ops;
        st->impl = s;
        return 0;

out_free:
        if (rc == -ENOMEM)
                snprintf(err, errlen, "out of memory");
        s3_free(s);
        return rc;
}
