/* Uploads to an S3-compatible store [W2]: PUT, the multipart upload's requests, CopyObject and
 * UploadPartCopy. One request each: the generic layer (store.c, store_upload.c) retries them. */
#include "store/s3_upload.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "store/s3_parse.h"
#include "store/s3_request.h"

int shoal_s3_put(struct shoal_store *st, const char *key, const void *data, size_t len,
                 unsigned flags, char *version, size_t vlen)
{
        struct shoal_s3_store *s = st->impl;
        char url[SHOAL_S3_URL_MAX];
        if (shoal_s3_object_url(s, key, url, sizeof(url)))
                return -EINVAL;
        const char *extra[2] = {flags & SHOAL_UPLOAD_CREATE ? "If-None-Match: *" : NULL, NULL};
        struct shoal_s3_body b = {.data = data ? data : "", .len = len};
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc = shoal_s3_perform_req(s, "PUT", url, extra, &b, r, "PUT", key);
        if (!rc && r->status != 200)
                rc = shoal_s3_map_upload_status(s, r, flags, "PUT", key);
        if (!rc && shoal_s3_etag_version(r->etag, version, vlen)) {
                log_ratelimited(SHOAL_LOG_WARN, "s3", "PUT %s: answer without a usable ETag", key);
                rc = -EPROTO;
        }
        free(r);
        return rc;
}

int shoal_s3_mpu_begin(struct shoal_store *st, const char *key, char *id, size_t idlen)
{
        struct shoal_s3_store *s = st->impl;
        char url[SHOAL_S3_URL_MAX];
        /* "uploads=", not "uploads": libcurl signs the query as written, and S3 signs the
         * canonical form, where every name has an '='. */
        if (shoal_s3_object_url_q(s, key, "uploads=", url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        r->grow = true;
        static const char *const extra[] = {"Content-Type: application/octet-stream", NULL};
        int rc = shoal_s3_perform_req(s, "POST", url, extra, NULL, r, "CreateMultipartUpload", key);
        if (!rc && r->status != 200)
                rc = shoal_s3_map_upload_status(s, r, 0, "CreateMultipartUpload", key);
        if (!rc && !(rc = shoal_s3_body_error(r, "CreateMultipartUpload", key))) {
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
                if (shoal_s3_query_add(q, qlen, "partNumber", n))
                        return -EINVAL;
        }
        return shoal_s3_query_add(q, qlen, "uploadId", id) ? -EINVAL : 0;
}

int shoal_s3_mpu_part(struct shoal_store *st, const char *key, const char *id, unsigned num,
                      const void *data, size_t len, char *etag, size_t etaglen)
{
        struct shoal_s3_store *s = st->impl;
        char q[3 * SHOAL_S3_UPLOAD_ID_MAX + 64], url[SHOAL_S3_URL_MAX];
        if (upload_query(q, sizeof(q), num, id) ||
            shoal_s3_object_url_q(s, key, q, url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_body b = {.data = data, .len = len};
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc = shoal_s3_perform_req(s, "PUT", url, NULL, &b, r, "UploadPart", key);
        if (!rc && r->status != 200)
                rc = shoal_s3_map_upload_status(s, r, 0, "UploadPart", key);
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

int shoal_s3_mpu_complete(struct shoal_store *st, const char *key, const char *id,
                          const char *const *etags, unsigned n, unsigned flags, char *version,
                          size_t vlen)
{
        struct shoal_s3_store *s = st->impl;
        char q[3 * SHOAL_S3_UPLOAD_ID_MAX + 64], url[SHOAL_S3_URL_MAX];
        if (upload_query(q, sizeof(q), 0, id) || shoal_s3_object_url_q(s, key, q, url, sizeof(url)))
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
        struct shoal_s3_body b = {.data = xml, .len = blen};
        int rc = shoal_s3_perform_req(s, "POST", url, extra, &b, r, "CompleteMultipartUpload", key);
        if (!rc && r->status != 200)
                rc = shoal_s3_map_upload_status(s, r, flags, "CompleteMultipartUpload", key);
        if (!rc)
                rc = shoal_s3_body_error(r, "CompleteMultipartUpload", key);
        if (!rc) {
                char *etag = r->buf ? shoal_s3_xml_get(r->buf, r->buf + r->got, "ETag") : NULL;
                if (!etag || shoal_s3_etag_version(etag, version, vlen)) {
                        /* Some stores leave it out: the object's HEAD names it. */
                        struct shoal_object o;
                        rc = st->ops->stat(st, key, &o);
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

int shoal_s3_mpu_abort(struct shoal_store *st, const char *key, const char *id)
{
        struct shoal_s3_store *s = st->impl;
        char q[3 * SHOAL_S3_UPLOAD_ID_MAX + 64], url[SHOAL_S3_URL_MAX];
        if (upload_query(q, sizeof(q), 0, id) || shoal_s3_object_url_q(s, key, q, url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        int rc = shoal_s3_perform(s, "DELETE", url, NULL, r, "AbortMultipartUpload", key);
        if (!rc && r->status != 204 && r->status != 200 && r->status != 404)
                rc = shoal_s3_map_upload_status(s, r, 0, "AbortMultipartUpload", key);
        free(r);
        return rc;
}

struct shoal_s3_copy_req *shoal_s3_copy_req_new(const char *bucket, const char *prefix,
                                                const char *src, const char *version, uint64_t off,
                                                uint64_t len)
{
        char full[SHOAL_KEY_MAX * 2 + 2];
        int n = snprintf(full, sizeof(full), "%s%s", prefix, src);
        if (n < 0 || (size_t)n >= sizeof(full) || !version || strchr(version, '"'))
                return NULL;
        struct shoal_s3_copy_req *q = calloc(1, sizeof(*q));
        if (!q)
                return NULL;
        int l = snprintf(q->source, sizeof(q->source), "x-amz-copy-source: /%s/", bucket);
        if (l < 0 || (size_t)l >= sizeof(q->source) ||
            shoal_s3_uri_encode(full, true, q->source + l, sizeof(q->source) - (size_t)l) < 0) {
                free(q);
                return NULL;
        }
        snprintf(q->if_match, sizeof(q->if_match), "x-amz-copy-source-if-match: \"%s\"", version);
        q->extra[0] = q->source;
        q->extra[1] = q->if_match;
        if (len) {
                snprintf(q->range, sizeof(q->range),
                         "x-amz-copy-source-range: bytes=%" PRIu64 "-%" PRIu64, off, off + len - 1);
                q->extra[2] = q->range;
        }
        return q;
}

/* Performs copy request Q to URL (CopyObject or UploadPartCopy, WHAT) and takes the ETag of its
 * answer's XML into OUT ("" when it has none). A store without the request (501 NotImplemented)
 * is -EOPNOTSUPP, a source that changed -ESTALE; a 200 with an <Error> is an error too. */
static int copy_perform(struct shoal_s3_store *s, const struct shoal_s3_copy_req *q,
                        const char *url, const char *what, const char *dst, char *out,
                        size_t outlen)
{
        struct shoal_s3_resp *r = calloc(1, sizeof(*r));
        if (!r)
                return -ENOMEM;
        struct shoal_s3_body b = {.data = "", .len = 0};
        r->grow = true;
        int rc = shoal_s3_perform_req(s, "PUT", url, q->extra, &b, r, what, dst);
        if (!rc && r->status == 412) {
                rc = -ESTALE;
        } else if (!rc && r->status == 501) {
                log_info("s3", "%s %s: the store does not have this request (501)", what, dst);
                rc = -EOPNOTSUPP;
        } else if (!rc && r->status != 200) {
                rc = shoal_s3_map_upload_status(s, r, 0, what, dst);
        }
        if (!rc)
                rc = shoal_s3_body_error(r, what, dst);
        if (!rc) {
                char *etag = r->buf ? shoal_s3_xml_get(r->buf, r->buf + r->got, "ETag") : NULL;
                if (!etag || shoal_s3_etag_version(etag, out, outlen))
                        out[0] = '\0';
                free(etag);
        }
        free(r->buf);
        free(r);
        return rc;
}

/* CopyObject [W2]: DST becomes a copy of SRC made by the store, only while SRC still has
 * VERSION (x-amz-copy-source-if-match), so the copy is of the object the caller stat'ed. The
 * answer is 200 with a CopyObjectResult, or, like CompleteMultipartUpload, 200 with an <Error>. */
int shoal_s3_copy(struct shoal_store *st, const char *src, const char *version, const char *dst,
                  char *version_out, size_t vlen)
{
        struct shoal_s3_store *s = st->impl;
        char url[SHOAL_S3_URL_MAX];
        if (shoal_s3_object_url(s, dst, url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_copy_req *q =
                shoal_s3_copy_req_new(s->bucket, s->prefix, src, version, 0, 0);
        if (!q)
                return -EINVAL;
        /* No ETag in the answer: the caller's stat names the copy's version. */
        int rc = copy_perform(s, q, url, "CopyObject", dst, version_out, vlen);
        free(q);
        return rc;
}

/* UploadPartCopy: part NUM of multipart upload ID of DST is bytes [OFF, OFF+LEN) of SRC, copied
 * by the store while SRC still has VERSION. The part's ETag is in the CopyPartResult. */
int shoal_s3_copy_part(struct shoal_store *st, const char *dst, const char *id, unsigned num,
                       const char *src, const char *version, uint64_t off, uint64_t len, char *etag,
                       size_t etaglen)
{
        struct shoal_s3_store *s = st->impl;
        char q[3 * SHOAL_S3_UPLOAD_ID_MAX + 64], url[SHOAL_S3_URL_MAX];
        if (!len || upload_query(q, sizeof(q), num, id) ||
            shoal_s3_object_url_q(s, dst, q, url, sizeof(url)))
                return -EINVAL;
        struct shoal_s3_copy_req *cq =
                shoal_s3_copy_req_new(s->bucket, s->prefix, src, version, off, len);
        if (!cq)
                return -EINVAL;
        int rc = copy_perform(s, cq, url, "UploadPartCopy", dst, etag, etaglen);
        if (!rc && !etag[0]) {
                log_ratelimited(SHOAL_LOG_WARN, "s3", "UploadPartCopy %s #%u: no usable ETag", dst,
                                num);
                rc = -EPROTO;
        }
        free(cq);
        return rc;
}
