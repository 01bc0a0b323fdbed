/* The reader's half of the etcd backend: a mirror of the group's records, presence keys and
 * weights, read in full once (one range read of "members/" to "weights/", at one revision) and
 * then kept by a watch from the next revision on, so a listing in a quiet group costs etcd
 * nothing.
 *
 * The watch runs in its own thread with its own handle: POST /v3/watch streams one JSON object
 * a line, each applied to the mirror under the watch's lock as it arrives; sync only copies the
 * mirror out (and bumps the generation when it changed). A stream that ends or fails is opened
 * again from the last revision applied, with a backoff; one canceled because its revision was
 * compacted, or a mirror that missed anything, is read in full again. While no stream runs,
 * every sync reads in full: a listing is never older than its call without saying so.
 *
 * Everything etcd streams is hostile: each line is capped, each record goes through the
 * validating decoder and must carry the id of its key. */
#include "group/etcd_internal.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define WATCH_BACKOFF_MIN_MS 100
#define WATCH_BACKOFF_MAX_MS 5000
#define WATCH_CONNECT_MS     1000

/* ---- the mirror ---- */

static int ent_cmp(const void *key, const void *ent)
{
        return strcmp(key, ((const struct etcd_ent *)ent)->id);
}

/* The entry of ID (LEN bytes, valid), inserted in order when missing and CREATE. */
static struct etcd_ent *ent_get(struct etcd_mirror *mir, const char *id, size_t len, bool create,
                                int64_t now)
{
        char key[SHOAL_MEMBER_ID_LEN + 1];
        memcpy(key, id, len);
        key[len] = '\0';
        struct etcd_ent *e = mir->n ? bsearch(key, mir->v, mir->n, sizeof(*e), ent_cmp) : NULL;
        if (e || !create)
                return e;
        if (mir->n == mir->cap) {
                size_t cap = mir->cap ? mir->cap * 2 : 64;
                struct etcd_ent *v = realloc(mir->v, cap * sizeof(*v));
                if (!v)
                        return NULL;
                mir->v = v;
                mir->cap = cap;
        }
        size_t at = 0;
        while (at < mir->n && strcmp(mir->v[at].id, key) < 0)
                at++; /* (a join: rare next to the lookups) */
        memmove(&mir->v[at + 1], &mir->v[at], (mir->n - at) * sizeof(*e));
        mir->n++;
        e = &mir->v[at];
        memset(e, 0, sizeof(*e));
        memcpy(e->id, key, len + 1);
        e->lost_ns = now; /* a record without presence: away from the moment it is seen */
        return e;
}

static void ent_drop_if_empty(struct etcd_mirror *mir, struct etcd_ent *e)
{
        if (e->has_rec || e->present || e->weight_set)
                return;
        size_t at = (size_t)(e - mir->v);
        memmove(e, e + 1, (mir->n - at - 1) * sizeof(*e));
        mir->n--;
}

static void set_record(struct etcd_ent *e, const char *group, const char *val, size_t len)
{
        char key[SHOAL_MEMBER_ID_LEN + 8];
        e->has_rec = shoal_member_decode(val, len, &e->m) == 0 && !strcmp(e->m.id, e->id);
        if (!e->has_rec)
                log_ratelimited(SHOAL_LOG_WARN, "group",
                                "registry: skipping a malformed record in group \"%s\" (key %s)",
                                group,
                                shoal_group_printable(e->id, strlen(e->id), key, sizeof(key)));
}

static void set_weight(struct etcd_ent *e, const char *val, size_t len)
{
        char num[16];
        uint64_t w;
        e->weight_set = false;
        if (len == 0 || len >= sizeof(num))
                return;
        memcpy(num, val, len);
        num[len] = '\0';
        if (shoal_parse_u64(num, SHOAL_WEIGHT_MAX, &w) == 0) {
                e->weight = (uint32_t)w;
                e->weight_set = true;
        }
}

/* Applies one key ("members/<id>", "present/<id>", "weights/<id>" after the group's prefix) to
 * MIR. Returns 0 (other keys are ignored) or -ENOMEM. */
static int apply_key(struct etcd_mirror *mir, const char *group, const char *key, size_t klen,
                     const char *val, size_t vlen, bool del, int64_t now)
{
        const char *slash = memchr(key, '/', klen);
        if (!slash)
                return 0;
        size_t kind = (size_t)(slash - key), idlen = klen - kind - 1;
        const char *id = slash + 1;
        int which = kind == 7 && !memcmp(key, "members", 7)   ? 0
                    : kind == 7 && !memcmp(key, "present", 7) ? 1
                    : kind == 7 && !memcmp(key, "weights", 7) ? 2
                                                              : -1;
        if (which < 0 || !shoal_member_id_valid(id, idlen))
                return 0;
        struct etcd_ent *e = ent_get(mir, id, idlen, !del, now);
        if (!e)
                return del ? 0 : -ENOMEM;
        if (which == 0 && del)
                e->has_rec = false;
        else if (which == 0)
                set_record(e, group, val, vlen);
        else if (which == 1 && del && e->present)
                e->present = false, e->lost_ns = now;
        else if (which == 1 && !del)
                e->present = true;
        else if (which == 2)
                set_weight(e, val, del ? 0 : vlen);
        ent_drop_if_empty(mir, e);
        return 0;
}

/* The mirror as a listing: liveness by presence, the grace period counted from its loss. */
static int mirror_list(const struct etcd_registry *r, struct shoal_member **out, size_t *n)
{
        const struct etcd_mirror *mir = &r->w.mir;
        struct shoal_member *v = malloc((mir->n + 1) * sizeof(*v));
        int64_t now = (int64_t)shoal_now_ns();
        uint64_t timeout = r->base.timeout_ns / SHOAL_NS_PER_MS;
        size_t k = 0;

        if (!v)
                return -ENOMEM;
        for (size_t i = 0; i < mir->n; i++) {
                const struct etcd_ent *e = &mir->v[i];
                if (!e->has_rec)
                        continue;
                struct shoal_member *m = &v[k++];
                *m = e->m;
                if (e->weight_set && m->role == SHOAL_ROLE_PROVIDER) {
                        m->weight = e->weight;
                        m->weight_set = true;
                }
                uint64_t since = e->present || now < e->lost_ns
                                         ? 0
                                         : (uint64_t)(now - e->lost_ns) / SHOAL_NS_PER_MS;
                m->alive = e->present;
                m->age_ms = e->present ? 0 : since + timeout;
                m->grace_left_ms = (e->present && !m->leaving) || m->grace_ms <= since
                                           ? 0
                                           : m->grace_ms - since;
        }
        *out = v;
        *n = k;
        return 0;
}

/* ---- the full read ---- */

struct full_ctx {
        struct etcd_registry *r;
        struct etcd_mirror mir;
        int64_t now;
};

static int full_visit(void *arg, const char *key, size_t klen, const char *val, size_t vlen)
{
        struct full_ctx *c = arg;
        return apply_key(&c->mir, c->r->base.group, key, klen, val, vlen, false, c->now);
}

/* Reads the group in full into a new mirror (under the registry's lock: R->h is its handle)
 * and puts it in place of the old one. */
static int full_read(struct etcd_registry *r)
{
        struct etcd_watch *w = &r->w;
        char json[SHOAL_ETCD_KEY_MAX * 5], err[512];
        struct full_ctx c = {.r = r, .now = (int64_t)shoal_now_ns()};
        int64_t rev = 0;

        int ret = shoal_etcd_range_json(r->prefix, r->wend, 0, json, sizeof(json));
        curl_easy_setopt(r->h, CURLOPT_TIMEOUT_MS, (long)ETCD_FULL_READ_TIMEOUT_MS);
        if (ret == 0)
                ret = shoal_etcd_post(r, "/v3/kv/range", json, err, sizeof(err));
        curl_easy_setopt(r->h, CURLOPT_TIMEOUT_MS, (long)ETCD_TIMEOUT_MS);
        if (ret == 0)
                ret = shoal_etcd_parse_range(r->body, r->body_len, r->gprefix, full_visit, &c, &rev,
                                             err, sizeof(err));
        if (ret == 0 && rev <= 0) {
                snprintf(err, sizeof(err), "etcd: range answer without a revision");
                ret = -EPROTO;
        }
        if (ret < 0) {
                shoal_etcd_warn("list", err);
                free(c.mir.v);
                return ret;
        }
        shoal_metric_inc(SHOAL_M_registry_full_reads);
        pthread_mutex_lock(&w->lock);
        for (size_t i = 0; i < c.mir.n; i++) {
                /* A presence already missing keeps the moment it went. */
                struct etcd_ent *e = &c.mir.v[i], *old;
                old = e->present ? NULL : ent_get(&w->mir, e->id, strlen(e->id), false, 0);
                e->lost_ns = old && !old->present ? old->lost_ns : c.now;
        }
        free(w->mir.v);
        w->mir = c.mir;
        if (rev < w->rev)
                __atomic_add_fetch(&w->epoch, 1,
                                   __ATOMIC_RELAXED); /* another endpoint, behind the stream: start
                                                         it again from here */
        w->rev = rev;
        w->synced = true;
        w->dirty = true;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
        return 0;
}

/* ---- the watch thread ---- */

struct line_ctx {
        struct etcd_registry *r;
        int64_t now;
};

static int on_event(void *arg, const struct shoal_etcd_event *ev)
{
        struct line_ctx *c = arg;
        struct etcd_watch *w = &c->r->w;
        if (ev->mod_revision <= w->rev)
                return 0; /* in the mirror already (a full read passed the stream) */
        int ret = apply_key(&w->mir, c->r->base.group, ev->key, ev->key_len, ev->val, ev->val_len,
                            ev->del, c->now);
        w->dirty = true;
        return ret;
}

/* One line of the stream, under the watch's lock. False: end the stream. */
static bool stream_line_locked(struct etcd_registry *r, const char *line, size_t len)
{
        struct etcd_watch *w = &r->w;
        struct shoal_etcd_watch_msg msg;
        struct line_ctx c = {r, (int64_t)shoal_now_ns()};
        char err[512];

        if (w->stop || w->epoch != w->stream_epoch)
                return false;
        int ret =
                shoal_etcd_parse_watch(line, len, r->gprefix, on_event, &c, &msg, err, sizeof(err));
        if (ret < 0) {
                shoal_etcd_warn("watch", err);
                return false;
        }
        if (msg.last_revision > w->rev)
                w->rev = msg.last_revision;
        if (msg.n_events)
                shoal_metric_add(SHOAL_M_registry_watch_events, msg.n_events);
        if (msg.canceled) {
                w->healthy = false;
                if (msg.compact_revision > 0) {
                        log_info("group",
                                 "registry etcd: the watch of group \"%s\" fell behind a "
                                 "compaction (revision %" PRId64 "): reading the group again",
                                 r->base.group, msg.compact_revision);
                        w->synced = false;
                }
                return false;
        }
        if (msg.created && !w->healthy) {
                w->healthy = true;
                if (w->fallback_logged)
                        log_info("group", "registry etcd: the watch of group \"%s\" runs again",
                                 r->base.group);
                w->fallback_logged = false;
        }
        return true;
}

static size_t on_stream(char *p, size_t size, size_t n, void *arg)
{
        struct etcd_registry *r = arg;
        struct etcd_watch *w = &r->w;
        size_t len = size * n, off = 0, l;

        if (len > ETCD_BODY_MAX - w->len) {
                shoal_etcd_warn("watch", "a line of the stream is too long");
                return 0;
        }
        if (w->len + len > w->cap) {
                size_t cap = w->cap ? w->cap : 16384;
                while (cap < w->len + len)
                        cap *= 2;
                char *b = realloc(w->buf, cap);
                if (!b)
                        return 0;
                w->buf = b;
                w->cap = cap;
        }
        memcpy(w->buf + w->len, p, len);
        w->len += len;
        pthread_mutex_lock(&w->lock);
        bool ok = true;
        while (ok && (l = shoal_etcd_next_line(w->buf + off, w->len - off)) > 0) {
                ok = stream_line_locked(r, w->buf + off, l);
                off += l;
        }
        pthread_mutex_unlock(&w->lock);
        memmove(w->buf, w->buf + off, w->len - off);
        w->len -= off;
        return ok ? len : 0;
}

static int on_xfer(void *arg, curl_off_t dt, curl_off_t dn, curl_off_t ut, curl_off_t un)
{
        struct etcd_watch *w = arg;
        (void)dt, (void)dn, (void)ut, (void)un;
        return __atomic_load_n(&w->stop, __ATOMIC_RELAXED) ||
               __atomic_load_n(&w->epoch, __ATOMIC_RELAXED) != w->stream_epoch;
}

/* One stream from START on endpoint EP, until it ends. */
static void stream(struct etcd_registry *r, int64_t start, unsigned ep)
{
        struct etcd_watch *w = &r->w;
        char kb[SHOAL_ETCD_KEY_MAX * 2], eb[SHOAL_ETCD_KEY_MAX * 2], json[SHOAL_ETCD_KEY_MAX * 5],
                url[320];

        if (shoal_etcd_b64_encode(r->prefix, strlen(r->prefix), kb, sizeof(kb)) < 0 ||
            shoal_etcd_b64_encode(r->wend, strlen(r->wend), eb, sizeof(eb)) < 0)
                return;
        snprintf(json, sizeof(json),
                 "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\",\"start_revision\":"
                 "\"%" PRId64 "\"}}",
                 kb, eb, start);
        snprintf(url, sizeof(url), "http://%s:%d/v3/watch", r->u.ep[ep].host, r->u.ep[ep].port);
        w->len = 0;
        curl_easy_setopt(w->h, CURLOPT_URL, url);
        curl_easy_setopt(w->h, CURLOPT_POSTFIELDS, json);
        CURLcode c = curl_easy_perform(w->h);
        if (c != CURLE_OK && c != CURLE_ABORTED_BY_CALLBACK && c != CURLE_WRITE_ERROR)
                log_ratelimited(SHOAL_LOG_INFO, "group", "registry etcd: watch on %s:%d: %s",
                                r->u.ep[ep].host, r->u.ep[ep].port, curl_easy_strerror(c));
}

static void wait_ms(struct etcd_watch *w, unsigned ms)
{
        struct timespec ts;
        clock_gettime(CLOCK_MONOTONIC, &ts);
        ts.tv_sec += ms / 1000;
        ts.tv_nsec += (long)(ms % 1000) * 1000000L;
        if (ts.tv_nsec >= 1000000000L) {
                ts.tv_sec++;
                ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&w->cond, &w->lock, &ts);
}

static void *watch_main(void *arg)
{
        struct etcd_registry *r = arg;
        struct etcd_watch *w = &r->w;
        unsigned backoff = WATCH_BACKOFF_MIN_MS, ep = 0;
        uint64_t quick_ns = 0;

        pthread_mutex_lock(&w->lock);
        while (!w->stop) {
                if (!w->synced) {
                        pthread_cond_wait(&w->cond, &w->lock);
                        continue;
                }
                int64_t start = w->rev + 1;
                w->stream_epoch = w->epoch;
                pthread_mutex_unlock(&w->lock);
                stream(r, start, ep);
                pthread_mutex_lock(&w->lock);
                bool was_healthy = w->healthy;
                w->healthy = false;
                if (w->stop || w->epoch != w->stream_epoch)
                        continue;
                if (was_healthy) {
                        backoff = WATCH_BACKOFF_MIN_MS;
                        /* At once (the mirror is current only while a stream runs), but not
                         * twice a second: a stream that ends as it starts is no stream. */
                        uint64_t now = shoal_now_ns();
                        if (now - quick_ns >= SHOAL_NS_PER_SEC) {
                                quick_ns = now;
                                continue;
                        }
                } else {
                        ep = (ep + 1) % r->u.n;
                        backoff = SHOAL_MIN(backoff * 2, WATCH_BACKOFF_MAX_MS);
                }
                wait_ms(w, backoff);
        }
        pthread_mutex_unlock(&w->lock);
        return NULL;
}

static void start_thread(struct etcd_registry *r)
{
        struct etcd_watch *w = &r->w;
        int rc = shoal_thread_create(&w->thread, watch_main, r);
        if (rc) {
                log_ratelimited(SHOAL_LOG_WARN, "group",
                                "registry etcd: cannot start the watch thread: %s", strerror(rc));
                return;
        }
        pthread_mutex_lock(&w->lock);
        w->started = true;
        pthread_mutex_unlock(&w->lock);
}

/* ---- sync, init, close ---- */

int shoal_etcd_sync(struct shoal_registry *base, const uint64_t *unless_gen,
                    struct shoal_member **out, size_t *n)
{
        struct etcd_registry *r = (struct etcd_registry *)base;
        struct etcd_watch *w = &r->w;
        int ret = 0;

        pthread_mutex_lock(&w->lock);
        bool full = !w->synced || !w->healthy;
        bool start = !w->started && ++w->syncs >= 2;
        /* (A watch just started may take a listing or two to run.) */
        w->unhealthy_syncs = full && w->started && w->synced ? w->unhealthy_syncs + 1 : 0;
        if (w->unhealthy_syncs >= 3 && !w->fallback_logged) {
                log_warn("group",
                         "registry etcd: the watch of group \"%s\" has no stream: reading the "
                         "whole group with every listing until it runs again",
                         base->group);
                w->fallback_logged = true;
        }
        pthread_mutex_unlock(&w->lock);
        if (start)
                start_thread(r);
        if (full && (ret = full_read(r)) < 0)
                return ret;
        pthread_mutex_lock(&w->lock);
        if (w->dirty) {
                base->generation++;
                w->dirty = false;
        }
        if (unless_gen && *unless_gen == base->generation) {
                *out = NULL;
                *n = 0;
                ret = 1;
        } else {
                ret = mirror_list(r, out, n);
        }
        pthread_mutex_unlock(&w->lock);
        return ret;
}

int shoal_etcd_watch_init(struct etcd_registry *r)
{
        struct etcd_watch *w = &r->w;
        pthread_condattr_t ca;

        w->h = curl_easy_init();
        if (!w->h)
                return -ENOMEM;
        pthread_mutex_init(&w->lock, NULL);
        pthread_condattr_init(&ca);
        pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
        pthread_cond_init(&w->cond, &ca);
        pthread_condattr_destroy(&ca);
        curl_easy_setopt(w->h, CURLOPT_NOSIGNAL, 1L);
        curl_easy_setopt(w->h, CURLOPT_PROTOCOLS_STR, "http");
        curl_easy_setopt(w->h, CURLOPT_FOLLOWLOCATION, 0L);
        curl_easy_setopt(w->h, CURLOPT_CONNECTTIMEOUT_MS, (long)WATCH_CONNECT_MS);
        curl_easy_setopt(w->h, CURLOPT_WRITEFUNCTION, on_stream);
        curl_easy_setopt(w->h, CURLOPT_WRITEDATA, r);
        curl_easy_setopt(w->h, CURLOPT_NOPROGRESS, 0L);
        curl_easy_setopt(w->h, CURLOPT_XFERINFOFUNCTION, on_xfer);
        curl_easy_setopt(w->h, CURLOPT_XFERINFODATA, w);
        /* A stream is silent while nothing changes: a dead peer is found by TCP keep-alives. */
        curl_easy_setopt(w->h, CURLOPT_TCP_KEEPALIVE, 1L);
        curl_easy_setopt(w->h, CURLOPT_TCP_KEEPIDLE, 5L);
        curl_easy_setopt(w->h, CURLOPT_TCP_KEEPINTVL, 2L);
        return 0;
}

void shoal_etcd_watch_close(struct etcd_registry *r)
{
        struct etcd_watch *w = &r->w;

        if (!w->h)
                return;
        pthread_mutex_lock(&w->lock);
        __atomic_store_n(&w->stop, true, __ATOMIC_RELAXED);
        bool started = w->started;
        pthread_cond_signal(&w->cond);
        pthread_mutex_unlock(&w->lock);
        if (started)
                pthread_join(w->thread, NULL);
        curl_easy_cleanup(w->h);
        w->h = NULL;
        pthread_cond_destroy(&w->cond);
        pthread_mutex_destroy(&w->lock);
        free(w->mir.v);
        free(w->buf);
}
