/* The pure half of the etcd registry backend (registry_etcd.c): the etcd:// URL, base64, key
 * names and the JSON answers of etcd's v3 HTTP gateway. No I/O, so every function here is fuzzed
 * (tests/fuzz/fuzz_etcd.c): an etcd server is shared, and anyone who can write to it (or sit in
 * the path) may answer anything.
 *
 * The gateway encodes 64-bit integers as JSON strings and byte strings as base64; keys are
 *   shoal/<group>/clients/<id>   a client's record, under a lease of the timeout
 *   shoal/<group>/members/<id>   a member's record, under a lease of the timeout and grace
 *   shoal/<group>/present/<id>   a member's presence (empty), under a lease of the timeout
 *   shoal/<group>/weights/<id>   a weight set by `shoal group --set-weight` (no lease)
 * (in this order, so that [members/, weights0) is what a reader watches, without the clients)
 * with '%' and '/' of the group written as %25 and %2F, so that no group's prefix is another
 * group's key. */
#include "group/group_internal.h"

#include <errno.h>
#include <jansson.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

#define ETCD_DEFAULT_PORT 2379

static const char b64_alphabet[] =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

long shoal_etcd_b64_encode(const void *in, size_t len, char *out, size_t outlen)
{
        const unsigned char *p = in;
        size_t need = (len + 2) / 3 * 4;
        size_t o = 0;

        if (len > (SIZE_MAX - 3) / 4 * 3 || need + 1 > outlen)
                return -1;
        for (size_t i = 0; i < len; i += 3) {
                uint32_t v = (uint32_t)p[i] << 16;
                size_t left = len - i;
                if (left > 1)
                        v |= (uint32_t)p[i + 1] << 8;
                if (left > 2)
                        v |= p[i + 2];
                out[o++] = b64_alphabet[v >> 18 & 63];
                out[o++] = b64_alphabet[v >> 12 & 63];
                out[o++] = left > 1 ? b64_alphabet[v >> 6 & 63] : '=';
                out[o++] = left > 2 ? b64_alphabet[v & 63] : '=';
        }
        out[o] = '\0';
        return (long)o;
}

static int b64_val(unsigned char c)
{
        if (c >= 'A' && c <= 'Z')
                return c - 'A';
        if (c >= 'a' && c <= 'z')
                return c - 'a' + 26;
        if (c >= '0' && c <= '9')
                return c - '0' + 52;
        if (c == '+')
                return 62;
        if (c == '/')
                return 63;
        return -1;
}

long shoal_etcd_b64_decode(const char *in, size_t len, void *out, size_t outlen)
{
        unsigned char *o = out;
        size_t n = 0;

        if (len % 4)
                return -1;
        for (size_t i = 0; i < len; i += 4) {
                bool last = i + 4 == len;
                int pad = last ? (in[i + 3] == '=') + (in[i + 2] == '=' && in[i + 3] == '=') : 0;
                uint32_t v = 0;
                for (int k = 0; k < 4; k++) {
                        int d = k >= 4 - pad ? 0 : b64_val((unsigned char)in[i + k]);
                        if (d < 0)
                                return -1;
                        v = v << 6 | (uint32_t)d;
                }
                size_t bytes = 3 - (size_t)pad;
                if (outlen - n < bytes)
                        return -1;
                o[n++] = (unsigned char)(v >> 16);
                if (bytes > 1)
                        o[n++] = (unsigned char)(v >> 8);
                if (bytes > 2)
                        o[n++] = (unsigned char)v;
        }
        return (long)n;
}

int shoal_etcd_prefix(const char *group, const char *kind, char *out, size_t outlen)
{
        size_t o = 0;
        static const char head[] = "shoal/";

        if (outlen < sizeof(head))
                return -EINVAL;
        memcpy(out, head, sizeof(head) - 1);
        o = sizeof(head) - 1;
        for (const unsigned char *p = (const unsigned char *)group; *p; p++) {
                if (outlen - o < 4)
                        return -EINVAL;
                if (*p == '%' || *p == '/')
                        o += (size_t)snprintf(out + o, 4, "%%%02X", *p);
                else
                        out[o++] = (char)*p;
        }
        int n = snprintf(out + o, outlen - o, "/%s/", kind);
        if (n < 0 || (size_t)n >= outlen - o)
                return -EINVAL;
        return (int)(o + (size_t)n);
}

/* host[:port] of one endpoint; an IPv6 address in brackets. */
static int parse_endpoint(const char *s, size_t len, struct shoal_etcd_endpoint *ep, char *err,
                          size_t errlen)
{
        const char *colon = NULL;
        size_t hlen = len;

        if (len && s[0] == '[') {
                const char *rb = memchr(s, ']', len);
                if (!rb)
                        goto bad;
                if ((size_t)(rb - s) + 1 < len) {
                        if (rb[1] != ':')
                                goto bad;
                        colon = rb + 1;
                }
                hlen = (size_t)(rb - s) + 1;
        } else {
                colon = memchr(s, ':', len);
                if (colon)
                        hlen = (size_t)(colon - s);
        }
        if (hlen == 0 || hlen >= sizeof(ep->host))
                goto bad;
        for (size_t i = 0; i < hlen; i++) {
                unsigned char c = (unsigned char)s[i];
                bool ok = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
                          (c >= 'A' && c <= 'Z') || c == '.' || c == '-' || c == '_' || c == ':' ||
                          c == '[' || c == ']';
                if (!ok)
                        goto bad;
        }
        memcpy(ep->host, s, hlen);
        ep->host[hlen] = '\0';
        ep->port = ETCD_DEFAULT_PORT;
        if (colon) {
                size_t plen = len - (size_t)(colon + 1 - s);
                long port = 0;
                if (plen == 0 || plen > 5)
                        goto bad;
                for (size_t i = 0; i < plen; i++) {
                        char c = colon[1 + i];
                        if (c < '0' || c > '9')
                                goto bad;
                        port = port * 10 + (c - '0');
                }
                if (port < 1 || port > 65535)
                        goto bad;
                ep->port = (int)port;
        }
        return 0;
bad:
        snprintf(err, errlen,
                 "registry: etcd URL: bad endpoint \"%.*s\" (use host[:port] or [v6addr][:port])",
                 (int)SHOAL_MIN(len, 200), s);
        return -EINVAL;
}

int shoal_etcd_url_parse(const char *rest, struct shoal_etcd_url *u, char *err, size_t errlen)
{
        size_t len = strlen(rest);

        memset(u, 0, sizeof(*u));
        /* A trailing '/' is allowed; anything after it (a path, credentials) is not. */
        if (len && rest[len - 1] == '/')
                len--;
        if (len == 0) {
                snprintf(err, errlen, "registry: etcd URL names no endpoint (etcd://host:port)");
                return -EINVAL;
        }
        if (memchr(rest, '@', len) || memchr(rest, '/', len)) {
                /* (Not echoed: what stands before an '@' may be a password.) */
                snprintf(err, errlen,
                         "registry: etcd URL: credentials and paths are not supported "
                         "(etcd://host:port[,host:port...])");
                return -EINVAL;
        }
        const char *p = rest, *end = rest + len;
        while (p <= end) {
                const char *comma = memchr(p, ',', (size_t)(end - p));
                const char *stop = comma ? comma : end;
                if (u->n == SHOAL_ETCD_ENDPOINTS) {
                        snprintf(err, errlen, "registry: etcd URL: more than %d endpoints",
                                 SHOAL_ETCD_ENDPOINTS);
                        return -EINVAL;
                }
                int ret = parse_endpoint(p, (size_t)(stop - p), &u->ep[u->n], err, errlen);
                if (ret < 0)
                        return ret;
                u->n++;
                if (!comma)
                        break;
                p = comma + 1;
        }
        return 0;
}

/* A gateway int64: a JSON string of decimal digits (or, from other gateways, an integer). */
static bool get_int64(const json_t *v, int64_t *out)
{
        if (json_is_integer(v)) {
                *out = (int64_t)json_integer_value(v);
                return true;
        }
        if (!json_is_string(v))
                return false;
        const char *s = json_string_value(v);
        size_t n = json_string_length(v);
        if (n == 0 || n > 20)
                return false;
        char *end;
        errno = 0;
        long long x = strtoll(s, &end, 10);
        if (errno || end != s + n || (s[0] != '-' && (s[0] < '0' || s[0] > '9')))
                return false;
        *out = x;
        return true;
}

/* Parses BODY; an error answer ({"error": ..., "code": N}) is -ENOENT for a missing lease and
 * -EIO otherwise, with its message in ERR. */
static int load(const char *body, size_t len, json_t **root, char *err, size_t errlen)
{
        json_error_t jerr;

        *root = json_loadb(body, len, JSON_REJECT_DUPLICATES, &jerr);
        if (!*root || !json_is_object(*root)) {
                snprintf(err, errlen, "etcd: malformed answer (%s)",
                         *root ? "not an object" : jerr.text);
                json_decref(*root);
                *root = NULL;
                return -EPROTO;
        }
        const json_t *e = json_object_get(*root, "error");
        if (!e)
                return 0;
        const char *msg = json_is_string(e) ? json_string_value(e) : "(no message)";
        snprintf(err, errlen, "etcd: %.200s", msg);
        int ret = strstr(msg, "lease not found") ? -ENOENT : -EIO;
        json_decref(*root);
        *root = NULL;
        return ret;
}

static void header_revision(const json_t *obj, int64_t *revision)
{
        const json_t *h = json_object_get(obj, "header");
        int64_t rev;
        if (revision && json_is_object(h) && get_int64(json_object_get(h, "revision"), &rev))
                *revision = rev;
}

int shoal_etcd_parse_status(const char *body, size_t len, int64_t *revision, char *err,
                            size_t errlen)
{
        json_t *root;
        int ret = load(body, len, &root, err, errlen);
        if (ret < 0)
                return ret;
        header_revision(root, revision);
        json_decref(root);
        return 0;
}

int shoal_etcd_parse_grant(const char *body, size_t len, int64_t *lease, char *err, size_t errlen)
{
        json_t *root;
        int ret = load(body, len, &root, err, errlen);
        if (ret < 0)
                return ret;
        int64_t id = 0, ttl = 0;
        if (!get_int64(json_object_get(root, "ID"), &id) || id <= 0 ||
            !get_int64(json_object_get(root, "TTL"), &ttl) || ttl <= 0) {
                snprintf(err, errlen, "etcd: lease grant answer without a lease");
                ret = -EPROTO;
        } else {
                *lease = id;
        }
        json_decref(root);
        return ret;
}

/* One kv of a range answer: its key must lie under PREFIX; the rest of it is the member id. */
static int visit_kv(const json_t *kv, const char *prefix, size_t plen,
                    shoal_registry_visit_fn visit, void *arg)
{
        char key[SHOAL_ETCD_KEY_MAX], val[SHOAL_RECORD_MAX];
        const json_t *k = json_object_get(kv, "key"), *v = json_object_get(kv, "value");

        if (!json_is_string(k))
                return 0;
        long klen = shoal_etcd_b64_decode(json_string_value(k), json_string_length(k), key,
                                          sizeof(key));
        if (klen < 0 || (size_t)klen <= plen || memcmp(key, prefix, plen) != 0)
                return 0;
        long vlen = 0;
        if (json_is_string(v)) {
                vlen = shoal_etcd_b64_decode(json_string_value(v), json_string_length(v), val,
                                             sizeof(val));
        } else if (v) {
                vlen = -1;
        }
        if (vlen < 0)
                vlen = 0; /* undecodable: an empty record, which the front end skips and logs */
        return visit(arg, key + plen, (size_t)klen - plen, val, (size_t)vlen);
}

int shoal_etcd_parse_range(const char *body, size_t len, const char *prefix,
                           shoal_registry_visit_fn visit, void *arg, int64_t *revision, char *err,
                           size_t errlen)
{
        json_t *root;
        int ret = load(body, len, &root, err, errlen);
        if (ret < 0)
                return ret;
        header_revision(root, revision);
        const json_t *kvs = json_object_get(root, "kvs");
        size_t plen = strlen(prefix), i;
        const json_t *kv;
        if (kvs && !json_is_array(kvs)) {
                snprintf(err, errlen, "etcd: range answer with kvs not a list");
                ret = -EPROTO;
                goto out;
        }
        json_array_foreach(kvs, i, kv)
        {
                if (!json_is_object(kv))
                        continue;
                ret = visit_kv(kv, prefix, plen, visit, arg);
                if (ret)
                        goto out;
        }
out:
        json_decref(root);
        return ret;
}

size_t shoal_etcd_next_line(const char *buf, size_t len)
{
        const char *nl = memchr(buf, '\n', len);
        return nl ? (size_t)(nl - buf) + 1 : 0;
}

/* LINE without its trailing blanks: empty lines between a stream's objects are skipped. */
static bool blank(const char *line, size_t len)
{
        for (size_t i = 0; i < len; i++)
                if (line[i] != ' ' && line[i] != '\t' && line[i] != '\r' && line[i] != '\n')
                        return false;
        return true;
}

int shoal_etcd_parse_keepalives(const char *body, size_t len, const int64_t *ids, int64_t *ttls,
                                size_t n, char *err, size_t errlen)
{
        for (size_t i = 0; i < n; i++)
                ttls[i] = 0;
        while (len) {
                size_t l = shoal_etcd_next_line(body, len);
                if (l == 0)
                        l = len; /* the last object, without its newline */
                if (!blank(body, l)) {
                        int64_t id = 0, ttl = 0;
                        json_t *root;
                        int ret = load(body, l, &root, err, errlen);
                        if (ret < 0)
                                return ret;
                        const json_t *res = json_object_get(root, "result");
                        if (json_is_object(res) && get_int64(json_object_get(res, "ID"), &id) &&
                            get_int64(json_object_get(res, "TTL"), &ttl) && ttl > 0)
                                for (size_t i = 0; i < n; i++)
                                        if (ids[i] == id)
                                                ttls[i] = ttl;
                        json_decref(root);
                }
                body += l;
                len -= l;
        }
        return 0;
}

/* One event of a watch answer; anything that does not read as one is skipped. */
static int watch_event(const json_t *ev, const char *prefix, size_t plen, shoal_etcd_event_fn fn,
                       void *arg, struct shoal_etcd_watch_msg *out)
{
        char key[SHOAL_ETCD_KEY_MAX], val[SHOAL_RECORD_MAX];
        const json_t *type = json_object_get(ev, "type"), *kv = json_object_get(ev, "kv");
        struct shoal_etcd_event e = {.key = key + plen, .val = val};

        if (!json_is_object(kv))
                return 0;
        /* The gateway leaves the default (PUT) out. */
        if (type &&
            (!json_is_string(type) || (strcmp(json_string_value(type), "PUT") &&
                                       !(e.del = !strcmp(json_string_value(type), "DELETE")))))
                return 0;
        const json_t *k = json_object_get(kv, "key"), *v = json_object_get(kv, "value");
        if (!json_is_string(k) || !get_int64(json_object_get(kv, "mod_revision"), &e.mod_revision))
                return 0;
        long klen = shoal_etcd_b64_decode(json_string_value(k), json_string_length(k), key,
                                          sizeof(key));
        if (klen < 0 || (size_t)klen <= plen || memcmp(key, prefix, plen) != 0)
                return 0;
        e.key_len = (size_t)klen - plen;
        long vlen = -1;
        if (!e.del && json_is_string(v))
                vlen = shoal_etcd_b64_decode(json_string_value(v), json_string_length(v), val,
                                             sizeof(val));
        e.val_len = vlen < 0 ? 0 : (size_t)vlen; /* undecodable: an empty value */
        if (e.mod_revision > out->last_revision)
                out->last_revision = e.mod_revision;
        out->n_events++;
        return fn(arg, &e);
}

int shoal_etcd_parse_watch(const char *msg, size_t len, const char *prefix, shoal_etcd_event_fn fn,
                           void *arg, struct shoal_etcd_watch_msg *out, char *err, size_t errlen)
{
        json_t *root;
        int ret;

        memset(out, 0, sizeof(*out));
        ret = load(msg, len, &root, err, errlen);
        if (ret < 0)
                return ret;
        const json_t *res = json_object_get(root, "result");
        if (!json_is_object(res)) {
                snprintf(err, errlen, "etcd: watch answer without a result");
                ret = -EPROTO;
                goto out;
        }
        header_revision(res, &out->revision);
        out->created = json_is_true(json_object_get(res, "created"));
        out->canceled = json_is_true(json_object_get(res, "canceled"));
        if (!get_int64(json_object_get(res, "compact_revision"), &out->compact_revision) ||
            out->compact_revision < 0)
                out->compact_revision = 0;
        const json_t *evs = json_object_get(res, "events"), *ev;
        size_t plen = strlen(prefix), i;
        if (evs && !json_is_array(evs)) {
                snprintf(err, errlen, "etcd: watch answer with events not a list");
                ret = -EPROTO;
                goto out;
        }
        json_array_foreach(evs, i, ev)
        {
                if (json_is_object(ev) && (ret = watch_event(ev, prefix, plen, fn, arg, out)))
                        goto out;
        }
out:
        json_decref(root);
        return ret;
}
