/* libFuzzer target: what an S3 server sends back, as src/store/s3_parse.c reads it.
 *
 *   byte 0   mode % 5:
 *     0  a ListObjectsV2 page. byte 1: the bucket prefix ("", "data/", "a b/", "x%/"), byte 2:
 *        the callback stops after that many entries (0: never); the rest is the page.
 *     1  response headers. u64 offset, u16 length (the range asked for); the rest is cut into
 *        header lines at each '\n' and given to the header callback as libcurl does.
 *     2  a response body. u16 status, byte: bit 0 a growing buffer (listing), u16 capacity; byte:
 *        the seed that cuts the rest into the pieces libcurl hands over.
 *     3  XML text: the rest decoded as it is, and escaped in ways the seed byte picks, decoded
 *        back.
 *     4  url-encoded text, the same way.
 *
 * Invariants: listed entries come in key order, each a valid key (version valid, or NULL for a
 * common prefix), with the bucket prefix cut off — and a page read under a prefix gives exactly
 * the entries of the same page read without one that start with it; a truncated page always has
 * a token; a callback's stop is returned as is. Header fields stay NUL-terminated inside their
 * arrays, an accepted ETag is a valid version. A body never passes its capacity, lands in the
 * right sink byte for byte, and an error body stays within SHOAL_S3_ERRBODY_MAX. Escaped text
 * decodes back to itself; decoded text is never longer than its source. */
#include <errno.h>

#include "common/block.h"
#include "common/util.h"
#include "fuzz_input.h"
#include "store/s3_parse.h"

/* ---- listing ---- */

#define MAX_ENTRIES 2048

struct listing {
        size_t n, stop_after, calls;
        char *key[MAX_ENTRIES];
        bool is_prefix[MAX_ENTRIES];
        char *version[MAX_ENTRIES];
        uint64_t size[MAX_ENTRIES];
};

static int on_entry(void *arg, const struct shoal_list_entry *e)
{
        struct listing *l = arg;
        size_t kl = strlen(e->key);
        FZ_CHECK(shoal_key_valid(e->key, kl));
        if (e->is_prefix) {
                FZ_CHECK(e->version == NULL);
        } else {
                FZ_CHECK(e->version && shoal_version_valid(e->version, strlen(e->version)));
        }
        if (l->n)
                FZ_CHECK(strcmp(l->key[l->n - 1], e->key) <= 0);
        l->calls++;
        if (l->n < MAX_ENTRIES) {
                l->key[l->n] = strdup(e->key);
                l->version[l->n] = e->version ? strdup(e->version) : NULL;
                l->is_prefix[l->n] = e->is_prefix;
                l->size[l->n] = e->size;
                l->n++;
        }
        return l->stop_after && l->calls == l->stop_after ? 7 : 0;
}

static void listing_free(struct listing *l)
{
        for (size_t i = 0; i < l->n && i < MAX_ENTRIES; i++) {
                free(l->key[i]);
                free(l->version[i]);
        }
        l->n = l->calls = 0;
}

static int list(const char *prefix, const char *body, size_t blen, struct listing *l)
{
        char *next = (char *)1;
        int rc = shoal_s3_list_page(prefix, strlen(prefix), body, blen, on_entry, l, &next);
        FZ_CHECK(rc == 0 || rc == 7 || rc == -EPROTO || rc == -ENOMEM);
        if (rc == 7)
                FZ_CHECK(l->stop_after && l->calls == l->stop_after);
        if (rc) {
                FZ_CHECK(next == NULL);
        } else if (next) {
                FZ_CHECK(*next);
        }
        free(next);
        return rc;
}

static void fuzz_list(struct fz *in)
{
        static const char *const prefixes[] = {"", "data/", "a b/", "x%/"};
        static struct listing with, without;
        const char *prefix = prefixes[fz_u8(in) % 4];
        size_t stop = fz_u8(in);
        size_t blen;
        char *body = fz_rest_str(in, &blen);

        with.stop_after = stop;
        int rc = list(prefix, body, blen, &with);
        if (*prefix && !stop) {
                /* The same page without a bucket prefix: ours is its subset, prefix cut. */
                without.stop_after = 0;
                int rc0 = list("", body, blen, &without);
                if (!rc && !rc0) {
                        size_t pl = strlen(prefix), k = 0;
                        for (size_t i = 0; i < without.n; i++) {
                                const char *key = without.key[i];
                                if (strncmp(key, prefix, pl) || strlen(key) <= pl)
                                        continue;
                                FZ_CHECK(k < with.n);
                                FZ_CHECK(!strcmp(with.key[k], key + pl));
                                FZ_CHECK(with.is_prefix[k] == without.is_prefix[i]);
                                FZ_CHECK(with.size[k] == without.size[i]);
                                k++;
                        }
                        FZ_CHECK(k == with.n);
                }
                listing_free(&without);
        }
        listing_free(&with);
        free(body);
}

/* ---- headers ---- */

static void fields_terminated(const struct shoal_s3_resp *r)
{
        FZ_CHECK(strnlen(r->etag, sizeof(r->etag)) < sizeof(r->etag));
        FZ_CHECK(strnlen(r->last_modified, sizeof(r->last_modified)) < sizeof(r->last_modified));
        FZ_CHECK(strnlen(r->content_range, sizeof(r->content_range)) < sizeof(r->content_range));
        FZ_CHECK(strnlen(r->request_id, sizeof(r->request_id)) < sizeof(r->request_id));
        FZ_CHECK(r->content_length >= -1);
}

static void fuzz_headers(struct fz *in)
{
        uint64_t off = fz_u(in, 8);
        size_t len = 1 + (size_t)fz_u(in, 2);
        static struct shoal_s3_resp r;
        memset(&r, 0, sizeof(r));
        r.content_length = -1;
        while (in->n) {
                const uint8_t *nl = memchr(in->p, '\n', in->n);
                size_t ll = nl ? (size_t)(nl - in->p) + 1 : in->n;
                /* A heap copy of exactly the line, as libcurl's buffer would end there. */
                char *line = malloc(ll ? ll : 1);
                FZ_CHECK(line);
                memcpy(line, in->p, ll);
                FZ_CHECK(shoal_s3_on_header(line, 1, ll, &r) == ll);
                free(line);
                fz_skip(in, ll);
                fields_terminated(&r);
        }
        char v[SHOAL_VERSION_MAX + 1];
        if (!shoal_s3_etag_version(r.etag, v, sizeof(v)))
                FZ_CHECK(shoal_version_valid(v, strlen(v)));
        if (shoal_s3_content_range_ok(r.content_range, off, len))
                FZ_CHECK(!strncmp(r.content_range, "bytes ", 6));
}

/* ---- bodies ---- */

static void fuzz_body(struct fz *in)
{
        static struct shoal_s3_resp r;
        static char fixed[65536];
        memset(&r, 0, sizeof(r));
        r.status = (long)fz_u(in, 2);
        r.grow = fz_u8(in) & 1;
        r.cap = (size_t)fz_u(in, 2);
        r.buf = r.grow ? NULL : fixed;
        if (r.grow)
                r.cap = 0;
        uint64_t st = fz_u8(in);
        bool ok = r.status >= 200 && r.status <= 299;
        size_t fed = 0;
        const uint8_t *all = in->p;
        while (in->n) {
                size_t piece = 1 + fz_prng(&st) % 300;
                piece = piece < in->n ? piece : in->n;
                char *chunk = malloc(piece);
                FZ_CHECK(chunk);
                memcpy(chunk, in->p, piece);
                size_t took = shoal_s3_on_body(chunk, 1, piece, &r);
                free(chunk);
                FZ_CHECK(took == piece || (took == 0 && ok && r.overflow));
                if (!took)
                        break;
                fz_skip(in, piece);
                fed += piece;
        }
        if (ok) {
                FZ_CHECK(r.got <= r.cap && r.got <= fed && r.err_len == 0);
                FZ_CHECK(r.got <= SHOAL_S3_LIST_BODY_MAX);
                FZ_CHECK(!r.got || !memcmp(r.buf, all, r.got));
                if (!r.overflow)
                        FZ_CHECK(r.got == fed);
        } else {
                FZ_CHECK(r.got == 0 && r.err_len <= SHOAL_S3_ERRBODY_MAX);
                FZ_CHECK(r.err_len == (fed < SHOAL_S3_ERRBODY_MAX ? fed : SHOAL_S3_ERRBODY_MAX));
                FZ_CHECK(!memcmp(r.err, all, r.err_len) && r.err[r.err_len] == '\0');
                /* What map_status reads out of an error body. */
                char *code = shoal_s3_xml_get(r.err, r.err + r.err_len, "Code");
                char *msg = shoal_s3_xml_get(r.err, r.err + r.err_len, "Message");
                FZ_CHECK(!code || strlen(code) <= r.err_len);
                FZ_CHECK(!msg || strlen(msg) <= r.err_len);
                free(code);
                free(msg);
        }
        if (r.grow)
                free(r.buf);
}

/* ---- text round trips ---- */

static char *escape_xml(const char *s, uint64_t seed)
{
        size_t n = strlen(s);
        char *out = malloc(12 * n + 1);
        FZ_CHECK(out);
        size_t o = 0;
        uint64_t st = seed;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                unsigned pick = (unsigned)(fz_prng(&st) % 4);
                const char *named = c == '&'    ? "&amp;"
                                    : c == '<'  ? "&lt;"
                                    : c == '>'  ? "&gt;"
                                    : c == '"'  ? "&quot;"
                                    : c == '\'' ? "&apos;"
                                                : NULL;
                if (c < 0x80 && pick == 1)
                        o += (size_t)sprintf(out + o, "&#%u;", c);
                else if (c < 0x80 && pick == 2)
                        o += (size_t)sprintf(out + o, "&#x%X;", c);
                else if (named)
                        o += (size_t)sprintf(out + o, "%s", named);
                else
                        out[o++] = (char)c;
        }
        out[o] = '\0';
        return out;
}

static void fuzz_xml(struct fz *in)
{
        uint64_t seed = fz_u8(in) + 1;
        size_t len;
        char *s = fz_rest_str(in, &len);
        char *d = shoal_s3_xml_text(s, len);
        if (d) {
                FZ_CHECK(strlen(d) <= len);
                if (!memchr(s, '&', len))
                        FZ_CHECK(!memcmp(d, s, len));
                free(d);
        }
        char *e = escape_xml(s, seed);
        d = shoal_s3_xml_text(e, strlen(e));
        FZ_CHECK(d && !strcmp(d, s));
        free(d);
        free(e);
        free(s);
}

static void fuzz_url(struct fz *in)
{
        static const char hex[] = "0123456789ABCDEF";
        uint64_t st = fz_u8(in) + 1;
        size_t len;
        char *s = fz_rest_str(in, &len);
        char *d = strdup(s);
        FZ_CHECK(d);
        if (!shoal_s3_url_decode(d))
                FZ_CHECK(strlen(d) <= strlen(s));
        free(d);

        size_t n = strlen(s);
        char *e = malloc(3 * n + 1);
        FZ_CHECK(e);
        size_t o = 0;
        for (size_t i = 0; i < n; i++) {
                unsigned char c = (unsigned char)s[i];
                unsigned pick = (unsigned)(fz_prng(&st) % 3);
                if (c == ' ' && pick == 0) {
                        e[o++] = '+';
                } else if (c == '%' || c == '+' || pick) {
                        e[o++] = '%';
                        e[o++] = hex[c >> 4];
                        e[o++] = (char)(pick == 2 ? hex[c & 15] | 0x20 : hex[c & 15]);
                } else {
                        e[o++] = (char)c;
                }
        }
        e[o] = '\0';
        FZ_CHECK(!shoal_s3_url_decode(e));
        FZ_CHECK(!strcmp(e, s));
        free(e);
        free(s);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        struct fz in = {data, size};
        switch (fz_u8(&in) % 5) {
        case 0:
                fuzz_list(&in);
                break;
        case 1:
                fuzz_headers(&in);
                break;
        case 2:
                fuzz_body(&in);
                break;
        case 3:
                fuzz_xml(&in);
                break;
        default:
                fuzz_url(&in);
                break;
        }
        return 0;
}
