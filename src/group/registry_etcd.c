/* etcd registry backend: etcd://host[:port][,host[:port]...], through etcd's v3 HTTP gateway
 * (/v3/kv/..., /v3/lease/...). For large groups: a record lives under a lease, so a member that
 * dies leaves the registry when its lease runs out (the group timeout) without anyone deleting
 * it, and a listing is one range read.
 *
 * Each record is "shoal/<group>/members/<id>" (etcd_codec.c) holding the text of
 * shoal_member_encode; every value read back goes through the validating decoder. A put keeps
 * its writer's lease alive first and grants a new one when the old one is gone (the member was
 * silent past the timeout, or etcd lost it), so a member that comes back reappears with its next
 * heartbeat.
 *
 * Calls are synchronous with short timeouts (an agent thread makes them under the registry
 * lock). An endpoint that cannot be reached is left for the next one of the URL, in turn. */
#include "group/group_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

#define ETCD_TIMEOUT_MS         2000
#define ETCD_CONNECT_TIMEOUT_MS 1000
/* A range answer of 11,000 records is about 5 MB; anything far beyond is not etcd's. */
#define ETCD_BODY_MAX    (64u << 20)
#define ETCD_LEASES      16 /* ids whose leases this process keeps (its own, a tool's few) */
#define ETCD_LEASE_MIN_S 2  /* etcd refuses shorter leases */
#define ETCD_REQUEST_MAX (SHOAL_RECORD_MAX * 2 + SHOAL_ETCD_KEY_MAX * 3 + 256)

struct etcd_lease {
        char id[SHOAL_MEMBER_ID_LEN + 1];
        int64_t lease; /* 0: none */
};

struct etcd_registry {
        struct shoal_registry base;
        CURL *h;
        struct shoal_etcd_url u;
        unsigned cur;                     /* endpoint in use */
        char prefix[SHOAL_ETCD_KEY_MAX];  /* of member records */
        char wprefix[SHOAL_ETCD_KEY_MAX]; /* of weights set by `shoal group --set-weight` */
        int64_t revision;                 /* the store revision of the last answer */
        struct etcd_lease leases[ETCD_LEASES];
        unsigned next_lease; /* round-robin slot to reuse */
        char *body;
        size_t body_len, body_cap;
        bool body_overflow;
        char req[ETCD_REQUEST_MAX]; /* a put's request (calls run under the registry lock) */
};

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static CURLcode curl_init_rc;

static void curl_init_once(void)
{
        curl_init_rc = curl_global_init(CURL_GLOBAL_DEFAULT);
}

static size_t on_body(char *p, size_t size, size_t n, void *arg)
{
        struct etcd_registry *r = arg;
        size_t len = size * n;

        if (len > ETCD_BODY_MAX - r->body_len) {
                r->body_overflow = true;
                return 0; /* aborts the transfer */
        }
        if (r->body_len + len > r->body_cap) {
                size_t cap = r->body_cap ? r->body_cap : 4096;
                while (cap < r->body_len + len)
                        cap *= 2;
                char *b = realloc(r->body, cap);
                if (!b)
                        return 0;
                r->body = b;
                r->body_cap = cap;
        }
        memcpy(r->body + r->body_len, p, len);
        r->body_len += len;
        return len;
}

static int curl_errno(CURLcode c)
{
        switch (c) {
        case CURLE_OPERATION_TIMEDOUT:
                return -ETIMEDOUT;
        case CURLE_COULDNT_CONNECT:
                return -ECONNREFUSED;
        case CURLE_COULDNT_RESOLVE_HOST:
                return -EHOSTUNREACH;
        default:
                return -EIO;
        }
}

/* POSTs JSON to PATH on one endpoint. Returns 0 with the answer in r->body (any HTTP status: the
 * gateway puts its errors in the body), or a negative errno for a transport failure. */
static int post_once(struct etcd_registry *r, const char *path, const char *json, char *err,
                     size_t errlen)
{
        const struct shoal_etcd_endpoint *ep = &r->u.ep[r->cur];
        char url[sizeof(ep->host) + 64];
        char cerr[CURL_ERROR_SIZE] = "";

        snprintf(url, sizeof(url), "http://%s:%d%s", ep->host, ep->port, path);
        r->body_len = 0;
        r->body_overflow = false;
        curl_easy_setopt(r->h, CURLOPT_URL, url);
        curl_easy_setopt(r->h, CURLOPT_POSTFIELDS, json);
        curl_easy_setopt(r->h, CURLOPT_ERRORBUFFER, cerr);
        CURLcode c = curl_easy_perform(r->h);
        if (c != CURLE_OK) {
                snprintf(err, errlen, "%s:%d: %s", ep->host, ep->port,
                         r->body_overflow ? "answer too large"
                         : cerr[0]        ? cerr
                                          : curl_easy_strerror(c));
                return r->body_overflow ? -EPROTO : curl_errno(c);
        }
        long status = 0;
        curl_easy_getinfo(r->h, CURLINFO_RESPONSE_CODE, &status);
        if (status != 200 && (r->body_len == 0 || r->body[0] != '{')) {
                snprintf(err, errlen, "%s:%d: HTTP status %ld", ep->host, ep->port, status);
                return -EIO;
        }
        return 0;
}

/* post_once on the endpoint in use, then on each other one while the failure is the
 * transport's. */
static int post(struct etcd_registry *r, const char *path, const char *json, char *err,
                size_t errlen)
{
        int ret = -EIO;

        for (unsigned tries = 0; tries < r->u.n; tries++) {
                ret = post_once(r, path, json, err, errlen);
                if (ret == 0 || ret == -EPROTO)
                        return ret;
                r->cur = (r->cur + 1) % r->u.n;
        }
        return ret;
}

static int key_b64(const char *prefix, const char *id, char *out, size_t outlen)
{
        char key[SHOAL_ETCD_KEY_MAX];
        int n = snprintf(key, sizeof(key), "%s%s", prefix, id);
        if (n < 0 || (size_t)n >= sizeof(key))
                return -EINVAL;
        return shoal_etcd_b64_encode(key, (size_t)n, out, outlen) < 0 ? -EINVAL : 0;
}

static struct etcd_lease *lease_slot(struct etcd_registry *r, const char *id, bool create)
{
        for (unsigned i = 0; i < ETCD_LEASES; i++)
                if (!strcmp(r->leases[i].id, id))
                        return &r->leases[i];
        if (!create)
                return NULL;
        struct etcd_lease *l = &r->leases[r->next_lease];
        r->next_lease = (r->next_lease + 1) % ETCD_LEASES;
        shoal_strlcpy(l->id, id, sizeof(l->id));
        l->lease = 0;
        return l;
}

static int64_t lease_ttl_s(const struct etcd_registry *r)
{
        uint64_t ns = r->base.lease_ns ? r->base.lease_ns : SHOAL_GROUP_TIMEOUT_DEFAULT;
        int64_t s = (int64_t)((ns + SHOAL_NS_PER_SEC - 1) / SHOAL_NS_PER_SEC);
        return s < ETCD_LEASE_MIN_S ? ETCD_LEASE_MIN_S : s;
}

static void warn(const char *what, const char *err)
{
        log_ratelimited(SHOAL_LOG_WARN, "group", "registry etcd %s: %s", what, err);
}

/* Keeps L's lease alive, or grants a new one when it is gone. */
static int lease_ensure(struct etcd_registry *r, struct etcd_lease *l)
{
        char json[128], err[512];
        int ret;

        if (l->lease) {
                int64_t ttl = 0;
                snprintf(json, sizeof(json), "{\"ID\":\"%" PRId64 "\"}", l->lease);
                ret = post(r, "/v3/lease/keepalive", json, err, sizeof(err));
                if (ret == 0)
                        ret = shoal_etcd_parse_keepalive(r->body, r->body_len, &ttl, err,
                                                         sizeof(err));
                if (ret < 0) {
                        warn("keep-alive", err);
                        return ret;
                }
                if (ttl > 0)
                        return 0;
                l->lease = 0; /* expired: this member was silent for longer than the lease */
        }
        snprintf(json, sizeof(json), "{\"TTL\":%" PRId64 "}", lease_ttl_s(r));
        ret = post(r, "/v3/lease/grant", json, err, sizeof(err));
        if (ret == 0)
                ret = shoal_etcd_parse_grant(r->body, r->body_len, &l->lease, err, sizeof(err));
        if (ret < 0)
                warn("lease grant", err);
        return ret;
}

static int etcd_put(struct shoal_registry *base, const char *id, const char *record)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        char *json = r->req;
        char kb[SHOAL_ETCD_KEY_MAX * 2], vb[SHOAL_RECORD_MAX * 2], err[512];
        struct etcd_lease *l = lease_slot(r, id, true);
        int ret = key_b64(r->prefix, id, kb, sizeof(kb));

        if (ret < 0 || shoal_etcd_b64_encode(record, strlen(record), vb, sizeof(vb)) < 0)
                return -EINVAL;
        for (int attempt = 0; attempt < 2; attempt++) {
                ret = lease_ensure(r, l);
                if (ret < 0)
                        return ret;
                snprintf(json, sizeof(r->req),
                         "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}", kb, vb,
                         l->lease);
                ret = post(r, "/v3/kv/put", json, err, sizeof(err));
                if (ret == 0)
                        ret = shoal_etcd_parse_status(r->body, r->body_len, &r->revision, err,
                                                      sizeof(err));
                if (ret != -ENOENT)
                        break;
                l->lease = 0; /* revoked or expired between the keep-alive and the put */
        }
        if (ret < 0)
                warn("put", err);
        return ret;
}

static int etcd_del(struct shoal_registry *base, const char *id)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        char kb[SHOAL_ETCD_KEY_MAX * 2], json[sizeof(kb) + 32], err[512];
        struct etcd_lease *l = lease_slot(r, id, false);
        int ret = key_b64(r->prefix, id, kb, sizeof(kb));

        if (ret < 0)
                return ret;
        snprintf(json, sizeof(json), "{\"key\":\"%s\"}", kb);
        ret = post(r, "/v3/kv/deleterange", json, err, sizeof(err));
        if (ret == 0)
                ret = shoal_etcd_parse_status(r->body, r->body_len, &r->revision, err, sizeof(err));
        if (ret == 0 && l && l->lease) {
                char rj[64];
                snprintf(rj, sizeof(rj), "{\"ID\":\"%" PRId64 "\"}", l->lease);
                /* Best effort: an unrevoked lease only runs out by itself. */
                if (post(r, "/v3/lease/revoke", rj, err, sizeof(err)) == 0)
                        l->lease = 0;
        }
        if (l)
                l->id[0] = '\0';
        if (ret < 0)
                warn("delete", err);
        return ret;
}

/* Calls VISIT for every key under PREFIX: one range read. */
static int range(struct etcd_registry *r, const char *prefix, shoal_registry_visit_fn visit,
                 void *arg)
{
        size_t plen = strlen(prefix);
        char kb[SHOAL_ETCD_KEY_MAX * 2], eb[SHOAL_ETCD_KEY_MAX * 2], end[SHOAL_ETCD_KEY_MAX];
        char json[sizeof(kb) * 2 + 64], err[512];

        /* The range [prefix, prefix with its last byte + 1): the prefix ends in '/', so '0'. */
        memcpy(end, prefix, plen + 1);
        end[plen - 1]++;
        if (shoal_etcd_b64_encode(prefix, plen, kb, sizeof(kb)) < 0 ||
            shoal_etcd_b64_encode(end, plen, eb, sizeof(eb)) < 0)
                return -EINVAL;
        snprintf(json, sizeof(json), "{\"key\":\"%s\",\"range_end\":\"%s\"}", kb, eb);
        int ret = post(r, "/v3/kv/range", json, err, sizeof(err));
        if (ret == 0)
                ret = shoal_etcd_parse_range(r->body, r->body_len, prefix, visit, arg, &r->revision,
                                             err, sizeof(err));
        if (ret < 0)
                warn("list", err);
        return ret;
}

static int etcd_list(struct shoal_registry *base, shoal_registry_visit_fn visit, void *arg)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        return range(r, r->prefix, visit, arg);
}

static int etcd_list_weights(struct shoal_registry *base, shoal_registry_visit_fn visit, void *arg)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        return range(r, r->wprefix, visit, arg);
}

/* A weight outlives the member's leases (it is the operator's, kept until cleared). */
static int etcd_set_weight(struct shoal_registry *base, const char *id, const char *weight)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        char kb[SHOAL_ETCD_KEY_MAX * 2], vb[64], json[sizeof(kb) + sizeof(vb) + 64], err[512];
        int ret = key_b64(r->wprefix, id, kb, sizeof(kb));

        if (ret < 0)
                return ret;
        if (weight) {
                if (shoal_etcd_b64_encode(weight, strlen(weight), vb, sizeof(vb)) < 0)
                        return -EINVAL;
                snprintf(json, sizeof(json), "{\"key\":\"%s\",\"value\":\"%s\"}", kb, vb);
                ret = post(r, "/v3/kv/put", json, err, sizeof(err));
        } else {
                snprintf(json, sizeof(json), "{\"key\":\"%s\"}", kb);
                ret = post(r, "/v3/kv/deleterange", json, err, sizeof(err));
        }
        if (ret == 0)
                ret = shoal_etcd_parse_status(r->body, r->body_len, &r->revision, err, sizeof(err));
        if (ret < 0)
                warn("set weight", err);
        return ret;
}

static void etcd_close(struct shoal_registry *base)
{
        struct etcd_registry *r = (struct etcd_registry *)base;

        if (r->h)
                curl_easy_cleanup(r->h);
        free(r->body);
        free(r);
}

static const struct shoal_registry_ops etcd_ops = {
        .scheme = "etcd",
        .put = etcd_put,
        .del = etcd_del,
        .list = etcd_list,
        .set_weight = etcd_set_weight,
        .list_weights = etcd_list_weights,
        .close = etcd_close,
};

static void setup_handle(struct etcd_registry *r)
{
        curl_easy_setopt(r->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(r->h, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(r->h, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(r->h, CURLOPT_TIMEOUT_MS, (long)ETCD_TIMEOUT_MS);
        curl_easy_setopt(r->h, CURLOPT_CONNECTTIMEOUT_MS, (long)ETCD_CONNECT_TIMEOUT_MS);
        curl_easy_setopt(r->h, CURLOPT_WRITEFUNCTION, on_body);
        curl_easy_setopt(r->h, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(r->h, CURLOPT_TCP_KEEPALIVE, 1L);
}

int shoal_registry_etcd_open(const char *rest, const char *group, struct shoal_registry **out,
                             char *err, size_t errlen)
{
        struct etcd_registry *r = calloc(1, sizeof(*r));
        char cerr[512];
        int ret;

        *out = NULL;
        if (!r) {
                snprintf(err, errlen, "registry: out of memory");
                return -ENOMEM;
        }
        r->base.ops = &etcd_ops;
        ret = shoal_etcd_url_parse(rest, &r->u, err, errlen);
        if (ret < 0)
                goto out_free;
        if (shoal_etcd_prefix(group, "members", r->prefix, sizeof(r->prefix)) < 0 ||
            shoal_etcd_prefix(group, "weights", r->wprefix, sizeof(r->wprefix)) < 0) {
                snprintf(err, errlen, "registry: group name too long for etcd");
                ret = -EINVAL;
                goto out_free;
        }
        pthread_once(&curl_once, curl_init_once);
        r->h = curl_init_rc == CURLE_OK ? curl_easy_init() : NULL;
        if (!r->h) {
                snprintf(err, errlen, "registry: cannot initialise libcurl");
                ret = -ENOMEM;
                goto out_free;
        }
        setup_handle(r);
        /* Reach the server now, so that a wrong address is reported at start, not as a stream
         * of heartbeat warnings. */
        char json[SHOAL_ETCD_KEY_MAX * 2 + 32], kb[SHOAL_ETCD_KEY_MAX * 2];
        if (shoal_etcd_b64_encode(r->prefix, strlen(r->prefix), kb, sizeof(kb)) < 0) {
                ret = -EINVAL;
                goto out_free;
        }
        snprintf(json, sizeof(json), "{\"key\":\"%s\",\"count_only\":true}", kb);
        ret = post(r, "/v3/kv/range", json, cerr, sizeof(cerr));
        if (ret == 0)
                ret = shoal_etcd_parse_status(r->body, r->body_len, &r->revision, cerr,
                                              sizeof(cerr));
        if (ret < 0) {
                snprintf(err, errlen, "registry: etcd %s", cerr);
                if (ret == -EINVAL)
                        ret = -EIO;
                goto out_free;
        }
        *out = &r->base;
        return 0;

out_free:
        if (r->h)
                curl_easy_cleanup(r->h);
        free(r->body);
        free(r);
        return ret;
}
