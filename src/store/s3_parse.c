/* Parsing what an S3 server sends back; see s3_parse.h. Moved out of store_s3.c unchanged, so
 * that it can be fuzzed without a server. */
#include "store/s3_parse.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>

#include "common/util.h"

/* --- XML and url-encoded text ------------------------------------------------------------ */

/* In-place decoding of encoding-type=url values (S3 writes a space as '+'). */
int shoal_s3_url_decode(char *s)
{
        char *o = s;
        for (char *p = s; *p; p++) {
                if (*p == '+') {
                        *o++ = ' ';
                } else if (*p == '%') {
                        int h = shoal_hexval((unsigned char)p[1]);
                        int l = h < 0 ? -1 : shoal_hexval((unsigned char)p[2]);
                        if (l < 0)
                                return -EPROTO;
                        *o++ = (char)(h << 4 | l);
                        p += 2;
                } else {
                        *o++ = *p;
                }
        }
        *o = '\0';
        return 0;
}

/* Appends code point CP as UTF-8; returns bytes written or -1. */
static int utf8_put(uint32_t cp, char *out)
{
        if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff) || cp > 0x10ffff)
                return -1;
        if (cp < 0x80) {
                out[0] = (char)cp;
                return 1;
        }
        if (cp < 0x800) {
                out[0] = (char)(0xc0 | cp >> 6);
                out[1] = (char)(0x80 | (cp & 0x3f));
                return 2;
        }
        if (cp < 0x10000) {
                out[0] = (char)(0xe0 | cp >> 12);
                out[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
                out[2] = (char)(0x80 | (cp & 0x3f));
                return 3;
        }
        out[0] = (char)(0xf0 | cp >> 18);
        out[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        out[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        out[3] = (char)(0x80 | (cp & 0x3f));
        return 4;
}

/* Decodes the XML text [S, S+LEN) (the five named entities and numeric references) into a new
 * NUL-terminated string. The decoded form is never longer than the source. NULL on a malformed
 * reference or out of memory. */
char *shoal_s3_xml_text(const char *s, size_t len)
{
        char *out = malloc(len + 1);
        if (!out)
                return NULL;
        size_t o = 0;
        for (size_t i = 0; i < len;) {
                if (s[i] != '&') {
                        out[o++] = s[i++];
                        continue;
                }
                const char *semi = memchr(s + i, ';', SHOAL_MIN(len - i, (size_t)12));
                if (!semi)
                        goto bad;
                const char *ent = s + i + 1;
                size_t el = (size_t)(semi - ent);
                static const struct {
                        const char *name;
                        char c;
                } named[] = {{"amp", '&'}, {"lt", '<'}, {"gt", '>'}, {"quot", '"'}, {"apos", '\''}};
                bool done = false;
                for (size_t k = 0; k < SHOAL_ARRAY_SIZE(named); k++) {
                        if (el == strlen(named[k].name) && !memcmp(ent, named[k].name, el)) {
                                out[o++] = named[k].c;
                                done = true;
                                break;
                        }
                }
                if (!done) {
                        if (el < 2 || ent[0] != '#')
                                goto bad;
                        bool hexa = ent[1] == 'x' || ent[1] == 'X';
                        size_t k = hexa ? 2 : 1;
                        if (k >= el)
                                goto bad;
                        uint32_t cp = 0;
                        for (; k < el; k++) {
                                int v = hexa ? shoal_hexval((unsigned char)ent[k])
                                             : (isdigit((unsigned char)ent[k]) ? ent[k] - '0' : -1);
                                if (v < 0 || cp > 0x10ffff)
                                        goto bad;
                                cp = cp * (hexa ? 16u : 10u) + (uint32_t)v;
                        }
                        /* "&#N;" is at least 4 bytes and UTF-8 at most 4: it never grows. */
                        int n = utf8_put(cp, out + o);
                        if (n < 0)
                                goto bad;
                        o += (size_t)n;
                }
                i = (size_t)(semi - s) + 1;
        }
        out[o] = '\0';
        return out;
bad:
        free(out);
        return NULL;
}

/* Finds the element <TAG>...</TAG> (or <TAG/>) in [P, END) and returns its text range. S3
 * writes these elements without attributes; markup inside text is always escaped, so a literal
 * "<TAG>" is a tag. */
static bool s3_xml_find(const char *p, const char *end, const char *tag, const char **text,
                        size_t *len, const char **after)
{
        char open[64], close[64], empty[64];
        snprintf(open, sizeof(open), "<%s>", tag);
        snprintf(close, sizeof(close), "</%s>", tag);
        snprintf(empty, sizeof(empty), "<%s/>", tag);
        const char *o = memmem(p, (size_t)(end - p), open, strlen(open));
        const char *e = memmem(p, (size_t)(end - p), empty, strlen(empty));
        if (e && (!o || e < o)) {
                *text = e;
                *len = 0;
                if (after)
                        *after = e + strlen(empty);
                return true;
        }
        if (!o)
                return false;
        const char *t = o + strlen(open);
        const char *c = memmem(t, (size_t)(end - t), close, strlen(close));
        if (!c)
                return false;
        *text = t;
        *len = (size_t)(c - t);
        if (after)
                *after = c + strlen(close);
        return true;
}

/* The decoded text of <TAG> in [P, END), or NULL (absent or malformed). */
char *shoal_s3_xml_get(const char *p, const char *end, const char *tag)
{
        const char *t;
        size_t l;
        if (!s3_xml_find(p, end, tag, &t, &l, NULL))
                return NULL;
        return shoal_s3_xml_text(t, l);
}

/* --- headers and bodies ------------------------------------------------------------------ */

size_t shoal_s3_on_header(char *data, size_t size, size_t n, void *arg)
{
        struct shoal_s3_resp *r = arg;
        size_t len = size * n;
        if (len >= 5 && !memcmp(data, "HTTP/", 5)) {
                /* A new status line (after a 100 Continue, say) starts a new response. The line
                 * is not NUL-terminated: the three digits of the code are read within it. */
                const char *sp = memchr(data, ' ', len);
                long status = 0;
                for (size_t i = sp ? (size_t)(sp - data) + 1 : len, k = 0;
                     i < len && k < 3 && isdigit((unsigned char)data[i]); i++, k++)
                        status = status * 10 + (data[i] - '0');
                r->status = status;
                r->content_length = -1;
                r->etag[0] = r->last_modified[0] = r->content_range[0] = '\0';
                return len;
        }
        const char *colon = memchr(data, ':', len);
        if (!colon)
                return len;
        size_t nl = (size_t)(colon - data);
        const char *v = colon + 1;
        const char *ve = data + len;
        while (v < ve && (*v == ' ' || *v == '\t'))
                v++;
        while (ve > v && (ve[-1] == '\r' || ve[-1] == '\n' || ve[-1] == ' ' || ve[-1] == '\t'))
                ve--;
        size_t vl = (size_t)(ve - v);
        char *dst = NULL;
        size_t dl = 0;
        if (nl == 14 && !strncasecmp(data, "content-length", nl)) {
                char tmp[32];
                if (vl && vl < sizeof(tmp)) {
                        memcpy(tmp, v, vl);
                        tmp[vl] = '\0';
                        char *endp;
                        long long cl = strtoll(tmp, &endp, 10);
                        r->content_length = (*endp || cl < 0) ? -1 : cl;
                }
        } else if (nl == 4 && !strncasecmp(data, "etag", nl)) {
                dst = r->etag;
                dl = sizeof(r->etag);
        } else if (nl == 13 && !strncasecmp(data, "last-modified", nl)) {
                dst = r->last_modified;
                dl = sizeof(r->last_modified);
        } else if (nl == 13 && !strncasecmp(data, "content-range", nl)) {
                dst = r->content_range;
                dl = sizeof(r->content_range);
        } else if (nl == 16 && !strncasecmp(data, "x-amz-request-id", nl)) {
                dst = r->request_id;
                dl = sizeof(r->request_id);
        }
        if (dst) {
                if (vl >= dl)
                        vl = dl - 1; /* an over-long ETag then fails validation */
                memcpy(dst, v, vl);
                dst[vl] = '\0';
        }
        return len;
}

size_t shoal_s3_on_body(char *data, size_t size, size_t n, void *arg)
{
        struct shoal_s3_resp *r = arg;
        size_t len = size * n;
        if (r->status < 200 || r->status > 299) {
                size_t k = SHOAL_MIN(len, SHOAL_S3_ERRBODY_MAX - r->err_len);
                memcpy(r->err + r->err_len, data, k);
                r->err_len += k;
                r->err[r->err_len] = '\0';
                return len;
        }
        if (r->got + len > r->cap) {
                if (!r->grow || r->got + len > SHOAL_S3_LIST_BODY_MAX) {
                        r->overflow = true;
                        return 0; /* more than asked for: abort, never a partial success */
                }
                size_t ncap = SHOAL_MAX(r->cap * 2, r->got + len);
                char *nb = realloc(r->buf, ncap + 1);
                if (!nb) {
                        r->overflow = true;
                        return 0;
                }
                r->buf = nb;
                r->cap = ncap;
        }
        memcpy(r->buf + r->got, data, len);
        r->got += len;
        return len;
}

/* ETag without its quotes (and without a weak "W/" mark), checked as a version. */
int shoal_s3_etag_version(const char *etag, char *out, size_t outlen)
{
        const char *p = etag;
        if (!strncmp(p, "W/", 2))
                p += 2;
        size_t l = strlen(p);
        if (l >= 2 && p[0] == '"' && p[l - 1] == '"') {
                p++;
                l -= 2;
        }
        if (!l || l >= outlen || !shoal_version_valid(p, l))
                return -EPROTO;
        memcpy(out, p, l);
        out[l] = '\0';
        return 0;
}

/* "bytes FIRST-LAST/TOTAL" must name exactly the range asked for. */
bool shoal_s3_content_range_ok(const char *cr, uint64_t off, size_t len)
{
        unsigned long long first, last;
        if (sscanf(cr, "bytes %llu-%llu/", &first, &last) != 2)
                return false;
        return first == off && last == off + len - 1;
}

/* --- listing ----------------------------------------------------------------------------- */

struct list_item {
        char *key; /* without the bucket prefix */
        bool is_prefix;
        uint64_t size;
        int64_t mtime_ns;
        char *version;
};

static int item_cmp(const void *a, const void *b)
{
        return strcmp(((const struct list_item *)a)->key, ((const struct list_item *)b)->key);
}

/* "2009-10-12T17:50:30.000Z" as nanoseconds since the epoch; 0 when unreadable. */
static int64_t iso8601_ns(const char *s)
{
        struct tm tm = {0};
        int frac_digits = 0;
        long frac = 0;
        const char *p = strptime(s, "%Y-%m-%dT%H:%M:%S", &tm);
        if (!p)
                return 0;
        if (*p == '.') {
                for (p++; isdigit((unsigned char)*p); p++) {
                        if (frac_digits < 9) {
                                frac = frac * 10 + (*p - '0');
                                frac_digits++;
                        }
                }
        }
        while (frac_digits && frac_digits < 9) {
                frac *= 10;
                frac_digits++;
        }
        time_t t = timegm(&tm);
        if (t < 0 || t >= INT64_MAX / 1000000000LL)
                return 0; /* before 1970 or after 2262: not a time in nanoseconds */
        return (int64_t)t * 1000000000LL + frac;
}

static void items_free(struct list_item *it, size_t n)
{
        for (size_t i = 0; i < n; i++) {
                free(it[i].key);
                free(it[i].version);
        }
        free(it);
}

/* Takes one <Contents> or <CommonPrefixes> block [P, END) into IT. Returns 0, 1 to skip it
 * (outside the prefix, or a key shoal cannot name), or a negative errno. */
static int parse_item(const char *prefix, size_t prefix_len, const char *p, const char *end,
                      bool is_prefix, bool url_encoded, struct list_item *it)
{
        memset(it, 0, sizeof(*it));
        char *k = shoal_s3_xml_get(p, end, is_prefix ? "Prefix" : "Key");
        if (!k)
                return -EPROTO;
        if (url_encoded && shoal_s3_url_decode(k)) {
                free(k);
                return -EPROTO;
        }
        size_t kl = strlen(k);
        if (kl <= prefix_len || strncmp(k, prefix, prefix_len) ||
            !shoal_key_valid(k + prefix_len, kl - prefix_len)) {
                free(k);
                return 1;
        }
        memmove(k, k + prefix_len, kl - prefix_len + 1);
        it->key = k;
        it->is_prefix = is_prefix;
        if (is_prefix)
                return 0;
        char *size = shoal_s3_xml_get(p, end, "Size");
        char *etag = shoal_s3_xml_get(p, end, "ETag");
        char *lm = shoal_s3_xml_get(p, end, "LastModified");
        int rc = 0;
        char *endp = NULL;
        unsigned long long sz = size ? strtoull(size, &endp, 10) : 0;
        char v[SHOAL_VERSION_MAX + 1];
        if (!size || !*size || *endp || !etag || shoal_s3_etag_version(etag, v, sizeof(v))) {
                rc = -EPROTO;
        } else {
                it->size = sz;
                it->mtime_ns = lm ? iso8601_ns(lm) : 0;
                it->version = strdup(v);
                if (!it->version)
                        rc = -ENOMEM;
        }
        free(size);
        free(etag);
        free(lm);
        if (rc) {
                free(it->key);
                it->key = NULL;
        }
        return rc;
}

/* Parses one ListObjectsV2 page: delivers its entries in key order, and returns the next
 * continuation token in *NEXT (NULL when the listing is complete). */
int shoal_s3_list_page(const char *prefix, size_t prefix_len, const char *body, size_t blen,
                       shoal_list_cb cb, void *arg, char **next)
{
        const char *end = body + blen;
        *next = NULL;
        if (!memmem(body, blen, "<ListBucketResult", 17))
                return -EPROTO;
        char *enc = shoal_s3_xml_get(body, end, "EncodingType");
        bool url_encoded = enc && !strcmp(enc, "url");
        free(enc);

        size_t n = 0, cap = 0;
        struct list_item *items = NULL;
        int rc = 0;
        /* The next <Contents> and the next <CommonPrefixes>, each searched again only once
         * it has been taken, so that a page is parsed in one pass. */
        const char *ct = NULL, *pt = NULL, *ca = body, *pa = body;
        size_t cl = 0, pl = 0;
        bool hc = s3_xml_find(body, end, "Contents", &ct, &cl, &ca);
        bool hp = s3_xml_find(body, end, "CommonPrefixes", &pt, &pl, &pa);
        while (hc || hp) {
                bool is_prefix = hp && (!hc || pt < ct);
                const char *t = is_prefix ? pt : ct;
                size_t tl = is_prefix ? pl : cl;
                if (is_prefix)
                        hp = s3_xml_find(pa, end, "CommonPrefixes", &pt, &pl, &pa);
                else
                        hc = s3_xml_find(ca, end, "Contents", &ct, &cl, &ca);
                if (n == cap) {
                        cap = cap ? cap * 2 : 256;
                        struct list_item *ni = realloc(items, cap * sizeof(*ni));
                        if (!ni) {
                                rc = -ENOMEM;
                                goto out;
                        }
                        items = ni;
                }
                int pr = parse_item(prefix, prefix_len, t, t + tl, is_prefix, url_encoded,
                                    &items[n]);
                if (pr < 0) {
                        rc = pr;
                        goto out;
                }
                if (pr == 0)
                        n++;
        }
        char *trunc = shoal_s3_xml_get(body, end, "IsTruncated");
        bool truncated = trunc && !strcmp(trunc, "true");
        free(trunc);
        if (truncated) {
                *next = shoal_s3_xml_get(body, end, "NextContinuationToken");
                if (!*next || !**next) {
                        free(*next);
                        *next = NULL;
                        rc = -EPROTO; /* truncated without a way on: never a silent short list */
                        goto out;
                }
        }
        /* S3 sends objects and common prefixes in two runs; callers want one key order. */
        if (n)
                qsort(items, n, sizeof(*items), item_cmp);
        for (size_t i = 0; i < n && !rc; i++) {
                struct shoal_list_entry e = {
                        .key = items[i].key,
                        .is_prefix = items[i].is_prefix,
                        .size = items[i].size,
                        .mtime_ns = items[i].mtime_ns,
                        .version = items[i].version,
                };
                rc = cb(arg, &e);
        }
        if (rc) {
                free(*next);
                *next = NULL;
        }
out:
        items_free(items, n);
        return rc;
}
