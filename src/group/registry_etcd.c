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
 * A member (put_lease) holds two leases: its record's (the group timeout and its grace period)
 * and that of its presence key "shoal/<group>/present/<id>" (the timeout), kept alive together
 * by one keep-alive call per heartbeat. The record is written only when it changed, on the
 * first put and when its lease was lost, so a quiet group changes no revision. Readers keep a
 * mirror by a watch (etcd_watch.c): a member whose presence key expired is away for its grace
 * period, and gone when its record's lease runs out. Clients' records live under
 * "shoal/<group>/clients/<id>" with a lease of the timeout; a renewal is a keep-alive.
 *
 * Calls are synchronous with short timeouts (an agent thread makes them under the registry
 * lock). An endpoint that cannot be reached is left for the next one of the URL, in turn. */
#include "group/etcd_internal.h"

#include <curl/curl.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"

#define ETCD_CONNECT_TIMEOUT_MS 1000
#define ETCD_LEASE_MIN_S        2 /* etcd refuses shorter leases */

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
int shoal_etcd_post(struct etcd_registry *r, const char *path, const char *json, char *err,
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

static struct etcd_lease *lease_slot(struct etcd_registry *r, const char *id, bool client,
                                     bool create)
{
        for (unsigned i = 0; i < ETCD_LEASES; i++)
                if (r->leases[i].client == client && !strcmp(r->leases[i].id, id))
                        return &r->leases[i];
        if (!create)
                return NULL;
        struct etcd_lease *l = &r->leases[r->next_lease];
        r->next_lease = (r->next_lease + 1) % ETCD_LEASES;
        free(l->rec);
        memset(l, 0, sizeof(*l));
        shoal_strlcpy(l->id, id, sizeof(l->id));
        l->client = client;
        return l;
}

void shoal_etcd_warn(const char *what, const char *err)
{
        log_ratelimited(SHOAL_LOG_WARN, "group", "registry etcd %s: %s", what, err);
}

static int64_t ttl_s(uint64_t ns)
{
        int64_t s = (int64_t)((ns + SHOAL_NS_PER_SEC - 1) / SHOAL_NS_PER_SEC);
        return s < ETCD_LEASE_MIN_S ? ETCD_LEASE_MIN_S : s;
}

static int64_t lease_ttl_s(const struct etcd_registry *r)
{
        return ttl_s(r->base.lease_ns ? r->base.lease_ns : SHOAL_GROUP_TIMEOUT_DEFAULT);
}

static int64_t timeout_ttl_s(const struct etcd_registry *r)
{
        return ttl_s(r->base.timeout_ns ? r->base.timeout_ns : SHOAL_GROUP_TIMEOUT_DEFAULT);
}

static int grant(struct etcd_registry *r, int64_t ttl, int64_t *lease)
{
        char json[64], err[512];
        snprintf(json, sizeof(json), "{\"TTL\":%" PRId64 "}", ttl);
        int ret = shoal_etcd_post(r, "/v3/lease/grant", json, err, sizeof(err));
        if (ret == 0)
                ret = shoal_etcd_parse_grant(r->body, r->body_len, lease, err, sizeof(err));
        if (ret < 0)
                shoal_etcd_warn("lease grant", err);
        return ret;
}

static void revoke(struct etcd_registry *r, int64_t *lease)
{
        char json[64], err[512];
        if (!*lease)
                return;
        snprintf(json, sizeof(json), "{\"ID\":\"%" PRId64 "\"}", *lease);
        /* Best effort: an unrevoked lease only runs out by itself. */
        if (shoal_etcd_post(r, "/v3/lease/revoke", json, err, sizeof(err)) == 0)
                *lease = 0;
}

/* Keeps IDS alive on the gRPC stream: 1 when it did (TTLS filled), a negative errno when the
 * gateway must do it this time. A stream that failed is tried again 30 s later; each failure is
 * logged, so that a test sees a keep-alive that left the stream. */
static int keepalive_stream(struct etcd_registry *r, const int64_t *ids, int64_t *ttls, size_t n)
{
        char err[512];
        uint64_t now = shoal_now_ns();
        if (r->ka.retry_ns && now < r->ka.retry_ns)
                return -EAGAIN;
        int ret = shoal_etcd_ka_keepalive(r, ids, ttls, n, err, sizeof(err));
        if (ret < 0) {
                r->ka.retry_ns = now + 30 * SHOAL_NS_PER_SEC;
                log_ratelimited(SHOAL_LOG_WARN, "group",
                                "registry etcd %s; keep-alives go through the v3 gateway for 30 s",
                                err);
                return ret;
        }
        r->ka.retry_ns = 0;
        return 1;
}

/* Keeps L's leases alive in one call; a lease that has expired is set to 0. The record's lease
 * (of the timeout and the grace period) is in it when ALL is set or a third of it has passed;
 * the presence lease, which a killed member must lose within the timeout, always. */
static int keepalive(struct etcd_registry *r, struct etcd_lease *l, bool all)
{
        int64_t ids[2], ttls[2];
        size_t n = 0;
        char json[128], err[512];
        int o = 0;
        uint64_t now = shoal_now_ns();
        bool rec = l->lease &&
                   (all || !l->rec_renewed_ns ||
                    now - l->rec_renewed_ns >= (uint64_t)lease_ttl_s(r) * SHOAL_NS_PER_SEC / 3);

        if (rec)
                ids[n++] = l->lease;
        if (l->live)
                ids[n++] = l->live;
        if (n == 0)
                return 0;
        for (size_t i = 0; i < n; i++)
                o += snprintf(json + o, sizeof(json) - (size_t)o, "{\"ID\":\"%" PRId64 "\"}\n",
                              ids[i]);
        int ret = keepalive_stream(r, ids, ttls, n);
        if (ret < 0)
                ret = shoal_etcd_post(r, "/v3/lease/keepalive", json, err, sizeof(err));
        if (ret == 0)
                ret = shoal_etcd_parse_keepalives(r->body, r->body_len, ids, ttls, n, err,
                                                  sizeof(err));
        else if (ret == 1)
                ret = 0;
        if (ret < 0) {
                shoal_etcd_warn("keep-alive", err);
                return ret;
        }
        n = 0;
        /* Expired: this process was silent for longer than the lease (or etcd lost it). */
        if (rec && ttls[n++] <= 0)
                l->lease = 0;
        if (l->live && ttls[n] <= 0)
                l->live = 0;
        l->renewed_ns = now;
        if (rec)
                l->rec_renewed_ns = now;
        return 0;
}

/* Whether L's leases need a keep-alive now: a third of the presence lease TTL_S has passed
 * since the last one. Every heartbeat would cost etcd a keep-alive a second per member (the
 * gateway's ~1 ms each, docs/benchmarks.md); a third leaves two thirds of the lease as slack
 * for a late heartbeat, at least two heartbeats where the timeout is two or more. */
static bool renew_due(const struct etcd_lease *l, int64_t ttl_s)
{
        uint64_t third = (uint64_t)ttl_s * SHOAL_NS_PER_SEC / 3;
        return !l->renewed_ns || shoal_now_ns() - l->renewed_ns >= third;
}

/* Puts VALUE (LEN bytes) at PREFIX + ID under LEASE (0: none). -ENOENT: the lease is gone. */
static int put_kv(struct etcd_registry *r, const char *prefix, const char *id, const char *value,
                  size_t len, int64_t lease)
{
        char kb[SHOAL_ETCD_KEY_MAX * 2], vb[SHOAL_RECORD_MAX * 2], err[512];
        int ret = key_b64(prefix, id, kb, sizeof(kb));

        if (ret < 0 || shoal_etcd_b64_encode(value, len, vb, sizeof(vb)) < 0)
                return -EINVAL;
        snprintf(r->req, sizeof(r->req),
                 "{\"key\":\"%s\",\"value\":\"%s\",\"lease\":\"%" PRId64 "\"}", kb, vb, lease);
        ret = shoal_etcd_post(r, "/v3/kv/put", r->req, err, sizeof(err));
        if (ret == 0)
                ret = shoal_etcd_parse_status(r->body, r->body_len, &r->revision, err, sizeof(err));
        if (ret < 0 && ret != -ENOENT)
                shoal_etcd_warn("put", err);
        return ret;
}

/* Puts RECORD under L's record lease (TTL seconds), granting one when it has none; once more
 * with a new lease when it was lost between the keep-alive and the put. */
static int put_leased(struct etcd_registry *r, struct etcd_lease *l, const char *prefix,
                      const char *record, int64_t ttl)
{
        int ret = -ENOENT;
        for (int attempt = 0; attempt < 2 && ret == -ENOENT; attempt++) {
                if (!l->lease && (ret = grant(r, ttl, &l->lease)) < 0)
                        return ret;
                ret = put_kv(r, prefix, l->id, record, strlen(record), l->lease);
                if (ret == -ENOENT)
                        l->lease = 0;
        }
        l->written = ret == 0;
        return ret;
}

/* A tool's put (no presence): the record under a lease of the timeout and grace. */
static int etcd_put(struct shoal_registry *base, const char *id, const char *record)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        struct etcd_lease *l = lease_slot(r, id, false, true);
        int ret = keepalive(r, l, true);
        return ret < 0 ? ret : put_leased(r, l, r->prefix, record, lease_ttl_s(r));
}

static bool says_goodbye(const char *record)
{
        struct shoal_member m;
        return shoal_member_decode(record, strlen(record), &m) == 0 && m.leaving;
}

/* A heartbeat is one keep-alive of both leases when one is due (renew_due), else nothing; the
 * record is written only when it changed, was never written, or its lease was lost (it expired
 * with it). */
static int etcd_put_lease(struct shoal_registry *base, const char *id, const char *record,
                          const struct shoal_lease_put *p)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        struct etcd_lease *l = lease_slot(r, id, false, true);
        int ret = 0;

        /* A change is put after a keep-alive: it learns whether the record's lease still runs;
         * so does a member whose presence lapsed (its record's lease may have too). */
        bool all = p->changed || !l->written || !l->lease || !l->live;
        if (all || renew_due(l, timeout_ttl_s(r)))
                ret = keepalive(r, l, all);
        if (ret < 0)
                return ret;
        /* Presence first: a reader never sees the new record without it (away, for a moment).
         * A goodbye, or a record written as already silent, ends it: the grace period counts
         * from now. */
        if (p->ttl_ms <= 0 || (p->changed && says_goodbye(record))) {
                revoke(r, &l->live);
        } else if (!l->live) {
                ret = grant(r, timeout_ttl_s(r), &l->live);
                if (ret == 0)
                        ret = put_kv(r, r->lprefix, id, "", 0, l->live);
                if (ret < 0) {
                        l->live = 0; /* the next heartbeat tries again */
                        return ret;
                }
        }
        if (p->changed || !l->written || !l->lease)
                ret = put_leased(r, l, r->prefix, record, lease_ttl_s(r));
        return ret;
}

static int del_key(struct etcd_registry *r, const char *prefix, const char *id)
{
        char kb[SHOAL_ETCD_KEY_MAX * 2], json[sizeof(kb) + 32], err[512];
        int ret = key_b64(prefix, id, kb, sizeof(kb));

        if (ret < 0)
                return ret;
        snprintf(json, sizeof(json), "{\"key\":\"%s\"}", kb);
        ret = shoal_etcd_post(r, "/v3/kv/deleterange", json, err, sizeof(err));
        if (ret == 0)
                ret = shoal_etcd_parse_status(r->body, r->body_len, &r->revision, err, sizeof(err));
        if (ret < 0)
                shoal_etcd_warn("delete", err);
        return ret;
}

static void forget(struct etcd_registry *r, struct etcd_lease *l)
{
        if (!l)
                return;
        revoke(r, &l->lease);
        revoke(r, &l->live);
        free(l->rec);
        memset(l, 0, sizeof(*l));
}

static int etcd_del(struct shoal_registry *base, const char *id)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        int ret = del_key(r, r->prefix, id);
        if (ret == 0)
                ret = del_key(r, r->lprefix, id);
        if (ret == 0)
                forget(r, lease_slot(r, id, false, false));
        return ret;
}

/* A client's presence: its record under a lease of the client TTL; RECORD NULL renews it (and
 * puts the last record again when the lease was lost). */
static int etcd_put_client(struct shoal_registry *base, const char *id, const char *record)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        struct etcd_lease *l = lease_slot(r, id, true, true);
        int ret = keepalive(r, l, true);

        if (ret < 0)
                return ret;
        if (record) {
                char *copy = strdup(record);
                if (!copy)
                        return -ENOMEM;
                free(l->rec);
                l->rec = copy;
        } else if (l->lease && l->written) {
                return 0;
        }
        if (!l->rec)
                return -ENOENT; /* nothing to put: the caller sends the record next time */
        return put_leased(r, l, r->cprefix, l->rec, ttl_s(shoal_registry_client_ttl_ns(base)));
}

static int etcd_del_client(struct shoal_registry *base, const char *id)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        int ret = del_key(r, r->cprefix, id);
        if (ret == 0)
                forget(r, lease_slot(r, id, true, false));
        return ret;
}

int shoal_etcd_range_json(const char *from, const char *to, int64_t rev, char *out, size_t outlen)
{
        char kb[SHOAL_ETCD_KEY_MAX * 2], eb[SHOAL_ETCD_KEY_MAX * 2];

        if (shoal_etcd_b64_encode(from, strlen(from), kb, sizeof(kb)) < 0 ||
            shoal_etcd_b64_encode(to, strlen(to), eb, sizeof(eb)) < 0)
                return -EINVAL;
        int n = rev > 0 ? snprintf(out, outlen,
                                   "{\"key\":\"%s\",\"range_end\":\"%s\",\"revision\":\"%" PRId64
                                   "\"}",
                                   kb, eb, rev)
                        : snprintf(out, outlen, "{\"key\":\"%s\",\"range_end\":\"%s\"}", kb, eb);
        return n < 0 || (size_t)n >= outlen ? -EINVAL : 0;
}

/* Calls VISIT for every key under PREFIX: one range read. */
static int range(struct etcd_registry *r, const char *prefix, shoal_registry_visit_fn visit,
                 void *arg)
{
        size_t plen = strlen(prefix);
        char end[SHOAL_ETCD_KEY_MAX], json[SHOAL_ETCD_KEY_MAX * 5], err[512];

        /* The range [prefix, prefix with its last byte + 1): the prefix ends in '/', so '0'. */
        memcpy(end, prefix, plen + 1);
        end[plen - 1]++;
        if (shoal_etcd_range_json(prefix, end, 0, json, sizeof(json)) < 0)
                return -EINVAL;
        int ret = shoal_etcd_post(r, "/v3/kv/range", json, err, sizeof(err));
        if (ret == 0)
                ret = shoal_etcd_parse_range(r->body, r->body_len, prefix, visit, arg, &r->revision,
                                             err, sizeof(err));
        if (ret < 0)
                shoal_etcd_warn("list", err);
        return ret;
}

static int etcd_list_clients(struct shoal_registry *base, shoal_registry_visit_fn visit, void *arg)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        return range(r, r->cprefix, visit, arg);
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
                ret = shoal_etcd_post(r, "/v3/kv/put", json, err, sizeof(err));
        } else {
                snprintf(json, sizeof(json), "{\"key\":\"%s\"}", kb);
                ret = shoal_etcd_post(r, "/v3/kv/deleterange", json, err, sizeof(err));
        }
        if (ret == 0)
                ret = shoal_etcd_parse_status(r->body, r->body_len, &r->revision, err, sizeof(err));
        if (ret < 0)
                shoal_etcd_warn("set weight", err);
        return ret;
}

static void etcd_close(struct shoal_registry *base)
{
        struct etcd_registry *r = (struct etcd_registry *)base;

        shoal_etcd_watch_close(r);
        shoal_etcd_ka_close(r);
        for (unsigned i = 0; i < ETCD_LEASES; i++)
                free(r->leases[i].rec);
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
        .put_lease = etcd_put_lease,
        .sync = shoal_etcd_sync,
        .put_client = etcd_put_client,
        .del_client = etcd_del_client,
        .list_clients = etcd_list_clients,
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
        r->ka.fd = -1;
        ret = shoal_etcd_url_parse(rest, &r->u, err, errlen);
        if (ret < 0)
                goto out_free;
        if (shoal_etcd_prefix(group, "members", r->prefix, sizeof(r->prefix)) < 0 ||
            shoal_etcd_prefix(group, "weights", r->wprefix, sizeof(r->wprefix)) < 0 ||
            shoal_etcd_prefix(group, "present", r->lprefix, sizeof(r->lprefix)) < 0 ||
            shoal_etcd_prefix(group, "clients", r->cprefix, sizeof(r->cprefix)) < 0) {
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
        /* "shoal/<group>/": the members prefix without its kind. */
        memcpy(r->gprefix, r->prefix, strlen(r->prefix) - strlen("members/"));
        memcpy(r->wend, r->wprefix, sizeof(r->wend));
        r->wend[strlen(r->wend) - 1]++; /* "weights/" -> "weights0" */
        if (shoal_etcd_watch_init(r) < 0) {
                snprintf(err, errlen, "registry: out of memory");
                ret = -ENOMEM;
                goto out_free;
        }
        /* Reach the server now, so that a wrong address is reported at start, not as a stream
         * of heartbeat warnings. */
        char json[SHOAL_ETCD_KEY_MAX * 2 + 32], kb[SHOAL_ETCD_KEY_MAX * 2];
        if (shoal_etcd_b64_encode(r->prefix, strlen(r->prefix), kb, sizeof(kb)) < 0) {
                ret = -EINVAL;
                goto out_free;
        }
        snprintf(json, sizeof(json), "{\"key\":\"%s\",\"count_only\":true}", kb);
        ret = shoal_etcd_post(r, "/v3/kv/range", json, cerr, sizeof(cerr));
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
        shoal_etcd_watch_close(r);
        shoal_etcd_ka_close(r);
        if (r->h)
                curl_easy_cleanup(r->h);
        free(r->body);
        free(r);
        return ret;
}
