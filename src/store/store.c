#include "store/store.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "store/store_internal.h"

struct store_lock {
        pthread_mutex_t mu;
        pthread_cond_t cond;
};

static _Thread_local uint64_t call_deadline;

uint64_t shoal_store_deadline_ns(void)
{
        return call_deadline;
}

void shoal_store_deadline_set(uint64_t deadline_ns)
{
        call_deadline = deadline_ns;
}

/* Test and operator knobs: SHOAL_STORE_DEADLINE and SHOAL_STORE_ATTEMPTS override the defaults,
 * not values the caller set (shoal_config_pick). */
static void env_overrides(struct shoal_store_config *cfg)
{
        const struct shoal_env *env = shoal_config_env();
        cfg->deadline_ns = shoal_config_pick(cfg->deadline_ns, env->store_deadline_ns,
                                             SHOAL_STORE_DEADLINE_DEFAULT_NS);
        cfg->max_attempts = (unsigned)shoal_config_pick(cfg->max_attempts, env->store_attempts,
                                                        SHOAL_STORE_ATTEMPTS_DEFAULT);
        /* 0: the store's own limit (5 GiB on S3) */
        cfg->copy_max = shoal_config_pick(cfg->copy_max, (uint64_t)env->s3_copy_max_mib << 20, 0);
}

/* True for errors worth another attempt. */
static bool store_err_retryable(int err)
{
        switch (err) {
        case -EAGAIN:
        case -ETIMEDOUT:
        case -ECONNRESET:
        case -ECONNREFUSED:
        case -EIO:
        case -EPROTO:
        case -EPIPE:
                return true;
        default:
                return false;
        }
}

/* A retryable error that outlasted the attempts or the deadline is the end of the road: the
 * caller gets -EIO, never an -EAGAIN or -ETIMEDOUT that it might take for "try again" (a FUSE
 * read would spin on it), and the cause goes to the log. */
int shoal_store_give_up(int rc, const char *what, const char *key, unsigned attempts,
                        uint64_t start)
{
        if (!rc || !store_err_retryable(rc))
                return rc;
        log_ratelimited(SHOAL_LOG_WARN, "store", "%s %s failed after %u attempt%s in %llu ms: %s",
                        what, key, attempts, attempts == 1 ? "" : "s",
                        (unsigned long long)((shoal_now_ns() - start) / SHOAL_NS_PER_MS),
                        strerror(-rc));
        return -EIO;
}

int shoal_store_open(const struct shoal_store_config *cfg, struct shoal_store **out, char *err,
                     size_t errlen)
{
        *out = NULL;
        int rc = -ENOMEM;
        struct shoal_store *st = calloc(1, sizeof(*st));
        struct store_lock *lk = calloc(1, sizeof(*lk));
        if (!st || !lk) {
                snprintf(err, errlen, "out of memory");
                goto out_free;
        }
        st->cfg = *cfg;
        env_overrides(&st->cfg);
        if (!st->cfg.backoff_base_ns)
                st->cfg.backoff_base_ns = 100 * SHOAL_NS_PER_MS;
        if (!st->cfg.upload_part_size)
                st->cfg.upload_part_size = SHOAL_STORE_PART_SIZE_DEFAULT;
        if (st->cfg.upload_part_size < SHOAL_STORE_PART_SIZE_MIN ||
            st->cfg.upload_part_size > SHOAL_STORE_PART_SIZE_MAX) {
                snprintf(err, errlen, "upload part size %llu: expected 5 MiB to 5 GiB",
                         (unsigned long long)st->cfg.upload_part_size);
                rc = -EINVAL;
                goto out_free;
        }
        if (!st->cfg.upload_buffer_bytes)
                st->cfg.upload_buffer_bytes = 300ULL << 20;
        if (!st->cfg.upload_concurrency)
                st->cfg.upload_concurrency = 4;
        if (!st->cfg.copy_max || st->cfg.copy_max > SHOAL_STORE_COPY_MAX)
                st->cfg.copy_max = SHOAL_STORE_COPY_MAX;
        st->cfg.copy_max = SHOAL_MAX(st->cfg.copy_max, SHOAL_STORE_PART_SIZE_MIN);
        pthread_mutex_init(&lk->mu, NULL);
        pthread_cond_init(&lk->cond, NULL);
        st->lock = lk;
        if (shoal_store_uploads_init(st)) {
                snprintf(err, errlen, "out of memory");
                goto out_destroy;
        }

        /* The backends keep the convention: -EINVAL for a URL or setting that cannot work. */
        const char *url = cfg->url ? cfg->url : "";
        if (!strncmp(url, "file://", 7)) {
                rc = shoal_store_file_open(st, url, err, errlen);
        } else if (!strncmp(url, "s3://", 5)) {
                rc = shoal_store_s3_open(st, url, err, errlen);
        } else {
                snprintf(err, errlen,
                         "storage %s: unknown scheme (expected file:///DIR or "
                         "s3://BUCKET[/PREFIX])",
                         url);
                rc = -EINVAL;
        }
        if (rc)
                goto out_destroy;
        *out = st;
        return 0;

out_destroy:
        shoal_store_uploads_stop(st);
        pthread_mutex_destroy(&lk->mu);
        pthread_cond_destroy(&lk->cond);
out_free:
        free(lk);
        free(st);
        return rc;
}

void shoal_store_close(struct shoal_store *st)
{
        if (!st)
                return;
        shoal_store_uploads_stop(st);
        if (st->ops && st->ops->close)
                st->ops->close(st);
        struct store_lock *lk = st->lock;
        pthread_mutex_destroy(&lk->mu);
        pthread_cond_destroy(&lk->cond);
        free(lk);
        free(st);
}

#define BACKOFF_MAX_NS (5 * SHOAL_NS_PER_SEC)

/* Backoff before attempt N (1-based retry count): base * 2^(n-1), capped at 5 s, with "full
 * jitter" (uniform in [d/2, d]) so that many clients throttled together do not retry together. */
static uint64_t backoff_ns(const struct shoal_store *st, unsigned n)
{
        uint64_t d = st->cfg.backoff_base_ns;
        for (unsigned i = 1; i < n && d < BACKOFF_MAX_NS; i++)
                d *= 2;
        if (d > BACKOFF_MAX_NS)
                d = BACKOFF_MAX_NS;
        return d / 2 + shoal_rand64() % (d / 2 + 1);
}

/* Whether to retry after ERR on ATTEMPT; then *D is the backoff to sleep. No when ERR is final,
 * the attempts are used up or the backoff would pass DEADLINE (0: none). */
static bool retry_after(const struct shoal_store *st, int err, unsigned attempt, uint64_t deadline,
                        uint64_t *d)
{
        if (!store_err_retryable(err) || attempt >= st->cfg.max_attempts)
                return false;
        *d = backoff_ns(st, attempt);
        return !deadline || shoal_now_ns() + *d < deadline;
}

static void slot_acquire(struct shoal_store *st)
{
        if (!st->cfg.max_downloads)
                return;
        struct store_lock *lk = st->lock;
        pthread_mutex_lock(&lk->mu);
        while (st->inflight >= st->cfg.max_downloads) {
                st->waiting++;
                pthread_cond_wait(&lk->cond, &lk->mu);
                st->waiting--;
        }
        st->inflight++;
        pthread_mutex_unlock(&lk->mu);
}

static void slot_release(struct shoal_store *st)
{
        if (!st->cfg.max_downloads)
                return;
        struct store_lock *lk = st->lock;
        pthread_mutex_lock(&lk->mu);
        st->inflight--;
        if (st->waiting)
                pthread_cond_signal(&lk->cond);
        pthread_mutex_unlock(&lk->mu);
}

int shoal_store_stat(struct shoal_store *st, const char *key, struct shoal_object *out)
{
        if (!shoal_key_valid(key, strnlen(key, SHOAL_KEY_MAX + 1)))
                return -EINVAL;
        uint64_t start = shoal_now_ns();
        uint64_t deadline = start + st->cfg.deadline_ns;
        int rc;
        unsigned attempt;
        call_deadline = deadline;
        for (attempt = 1;; attempt++) {
                shoal_metric_inc(SHOAL_M_object_head_requests);
                rc = st->ops->stat(st, key, out);
                uint64_t d;
                if (!rc || !retry_after(st, rc, attempt, deadline, &d))
                        break;
                shoal_sleep_ns(d);
        }
        call_deadline = 0;
        return shoal_store_give_up(rc, "stat", key, attempt, start);
}

int shoal_store_read(struct shoal_store *st, const char *key, const char *version, uint64_t off,
                     size_t len, void *buf)
{
        if (!shoal_key_valid(key, strnlen(key, SHOAL_KEY_MAX + 1)))
                return -EINVAL;
        uint64_t start = shoal_now_ns();
        uint64_t deadline = start + st->cfg.deadline_ns;
        int rc;
        unsigned attempt;
        slot_acquire(st);
        call_deadline = deadline;
        for (attempt = 1;; attempt++) {
                uint64_t t0 = shoal_now_ns();
                shoal_metric_inc(SHOAL_M_object_get_requests);
                log_debug("store", "get %s [%llu+%zu]", key, (unsigned long long)off, len);
                rc = st->ops->read(st, key, version, off, len, buf);
                shoal_metric_observe(SHOAL_M_object_get_dur, shoal_now_ns() - t0);
                if (!rc) {
                        shoal_metric_add(SHOAL_M_object_get_bytes, len);
                        break;
                }
                uint64_t d;
                if (!retry_after(st, rc, attempt, deadline, &d))
                        break;
                shoal_metric_inc(SHOAL_M_object_get_retries);
                log_ratelimited(SHOAL_LOG_WARN, "store", "read %s [%llu+%zu] failed: %s; retry %u",
                                key, (unsigned long long)off, len, strerror(-rc), attempt);
                shoal_sleep_ns(d);
        }
        call_deadline = 0;
        slot_release(st);
        rc = shoal_store_give_up(rc, "read", key, attempt, start);
        if (rc)
                shoal_metric_inc(SHOAL_M_object_get_errors);
        return rc;
}

int shoal_store_list(struct shoal_store *st, const char *prefix, const char *delim,
                     const char *start_after, shoal_list_cb cb, void *arg)
{
        shoal_metric_inc(SHOAL_M_object_list_requests);
        call_deadline = shoal_now_ns() + st->cfg.deadline_ns;
        int rc = st->ops->list(st, prefix ? prefix : "", delim, start_after, cb, arg);
        call_deadline = 0;
        return rc;
}

#define STORE_CHECK_DEADLINE_NS (15 * SHOAL_NS_PER_SEC)

int shoal_store_check(struct shoal_store *st, char *err, size_t errlen)
{
        if (!st->ops->check)
                return 0;
        char why[512] = "";
        uint64_t saved = call_deadline;
        call_deadline = shoal_now_ns() + STORE_CHECK_DEADLINE_NS;
        int rc = st->ops->check(st, why, sizeof(why));
        call_deadline = saved;
        if (rc)
                snprintf(err, errlen, "cannot use storage %s at %s", st->cfg.url, why);
        return rc;
}

bool shoal_store_retry_wait(struct shoal_store *st, int err, unsigned attempt)
{
        uint64_t d;
        if (!retry_after(st, err, attempt, call_deadline, &d))
                return false;
        shoal_sleep_ns(d);
        return true;
}

struct objlist {
        struct shoal_object *objs;
        size_t n, cap, max;
};

static int objlist_cb(void *arg, const struct shoal_list_entry *e)
{
        struct objlist *l = arg;
        if (e->is_prefix || !e->size)
                return 0;
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 256;
                struct shoal_object *o = realloc(l->objs, cap * sizeof(*o));
                if (!o)
                        return -ENOMEM;
                l->objs = o;
                l->cap = cap;
        }
        struct shoal_object *o = &l->objs[l->n++];
        memset(o, 0, sizeof(*o));
        shoal_strlcpy(o->key, e->key, sizeof(o->key));
        shoal_strlcpy(o->version, e->version ? e->version : "", sizeof(o->version));
        o->size = e->size;
        o->mtime_ns = e->mtime_ns;
        return l->n >= l->max ? 1 : 0;
}

int shoal_store_list_objects(struct shoal_store *st, const char *prefix, size_t max,
                             struct shoal_object **out, size_t *n)
{
        struct objlist l = {.max = max ? max : SIZE_MAX};
        int rc = shoal_store_list(st, prefix, NULL, NULL, objlist_cb, &l);
        if (rc < 0) {
                free(l.objs);
                return rc;
        }
        *out = l.objs;
        *n = l.n;
        return 0;
}

int shoal_store_delete(struct shoal_store *st, const char *key)
{
        if (!shoal_key_valid(key, strnlen(key, SHOAL_KEY_MAX + 1)))
                return -EINVAL;
        if (!st->ops->remove)
                return -EOPNOTSUPP;
        uint64_t start = shoal_now_ns();
        uint64_t deadline = start + st->cfg.deadline_ns;
        int rc;
        unsigned attempt;
        call_deadline = deadline;
        for (attempt = 1;; attempt++) {
                shoal_metric_inc(SHOAL_M_object_delete_requests);
                rc = st->ops->remove(st, key);
                uint64_t d;
                if (!rc || !retry_after(st, rc, attempt, deadline, &d))
                        break;
                shoal_sleep_ns(d);
        }
        call_deadline = 0;
        if (!rc)
                log_info("store", "deleted %s", key);
        return shoal_store_give_up(rc, "delete", key, attempt, start);
}

uint64_t shoal_store_copy_part_size(uint64_t size, uint64_t copy_max)
{
        uint64_t part = SHOAL_MIN(copy_max, SHOAL_STORE_COPY_PART_MAX);
        part = SHOAL_MAX(part, SHOAL_STORE_PART_SIZE_MIN);
        uint64_t least = (size + SHOAL_STORE_MPU_PARTS_MAX - 1) / SHOAL_STORE_MPU_PARTS_MAX;
        part = SHOAL_MAX(part, least);
        const uint64_t mib = 1ULL << 20;
        return (part + mib - 1) / mib * mib; /* whole MiB */
}

/* One request of a copy in parts (which part, or the upload's beginning, end or abort). */
struct copy_call {
        const char *src, *dst;
        const struct shoal_object *so;
        char id[1024];
        unsigned num; /* part, from 1 */
        uint64_t off, len;
        char (*etags)[SHOAL_VERSION_MAX + 1];
        unsigned nparts;
        char version[SHOAL_VERSION_MAX + 1];
};

enum copy_step {
        COPY_BEGIN,
        COPY_PART,
        COPY_COMPLETE,
        COPY_ABORT
};

static int copy_step_once(struct shoal_store *st, enum copy_step step, struct copy_call *cc)
{
        switch (step) {
        case COPY_BEGIN:
                return st->ops->mpu_begin(st, cc->dst, cc->id, sizeof(cc->id));
        case COPY_PART:
                return st->ops->copy_part(st, cc->dst, cc->id, cc->num, cc->src, cc->so->version,
                                          cc->off, cc->len, cc->etags[cc->num - 1],
                                          sizeof(cc->etags[0]));
        case COPY_COMPLETE: {
                const char **etags = malloc(cc->nparts * sizeof(*etags));
                if (!etags)
                        return -ENOMEM;
                for (unsigned i = 0; i < cc->nparts; i++)
                        etags[i] = cc->etags[i];
                int rc = st->ops->mpu_complete(st, cc->dst, cc->id, etags, cc->nparts, 0,
                                               cc->version, sizeof(cc->version));
                free(etags);
                return rc;
        }
        case COPY_ABORT:
                return st->ops->mpu_abort(st, cc->dst, cc->id);
        }
        return -EINVAL;
}

/* STEP under the retry policy, with a deadline of its own (a part of 512 MiB may take a while;
 * the whole copy has no overall deadline, as an upload has none). */
static int copy_step(struct shoal_store *st, enum copy_step step, struct copy_call *cc)
{
        static const char *const what[] = {"CreateMultipartUpload", "UploadPartCopy",
                                           "CompleteMultipartUpload", "AbortMultipartUpload"};
        uint64_t start = shoal_now_ns();
        uint64_t deadline = start + st->cfg.deadline_ns;
        int rc;
        unsigned attempt;
        call_deadline = deadline;
        for (attempt = 1;; attempt++) {
                rc = copy_step_once(st, step, cc);
                uint64_t d;
                if (!rc || !retry_after(st, rc, attempt, deadline, &d))
                        break;
                shoal_sleep_ns(d);
        }
        call_deadline = 0;
        return shoal_store_give_up(rc, what[step], cc->dst, attempt, start);
}

/* SRC (SO) copied to DST in parts by the store: its version into VERSION. */
static int copy_in_parts(struct shoal_store *st, const char *src, const struct shoal_object *so,
                         const char *dst, char *version, size_t vlen)
{
        uint64_t part = shoal_store_copy_part_size(so->size, st->cfg.copy_max);
        uint64_t nparts = (so->size + part - 1) / part;
        if (nparts > SHOAL_STORE_MPU_PARTS_MAX)
                return -EFBIG;
        struct copy_call *cc = calloc(1, sizeof(*cc));
        char(*etags)[SHOAL_VERSION_MAX + 1] = calloc(nparts, sizeof(*etags));
        if (!cc || !etags) {
                free(cc);
                free(etags);
                return -ENOMEM;
        }
        *cc = (struct copy_call){
                .src = src, .dst = dst, .so = so, .etags = etags, .nparts = (unsigned)nparts};
        int rc = copy_step(st, COPY_BEGIN, cc);
        for (unsigned i = 0; !rc && i < cc->nparts; i++) {
                cc->num = i + 1;
                cc->off = i * part;
                cc->len = SHOAL_MIN(part, so->size - cc->off);
                rc = copy_step(st, COPY_PART, cc);
        }
        if (!rc)
                rc = copy_step(st, COPY_COMPLETE, cc);
        else if (cc->id[0])
                copy_step(st, COPY_ABORT, cc); /* no parts left at the store */
        if (!rc) {
                shoal_strlcpy(version, cc->version, vlen);
                log_info("store", "copied %s to %s in %u parts of %llu MiB", src, dst, cc->nparts,
                         (unsigned long long)(part >> 20));
        }
        free(cc->etags);
        free(cc);
        return rc;
}

/* SRC (SO) copied to DST in one request: its version into VERSION. */
static int copy_whole(struct shoal_store *st, const char *src, const struct shoal_object *so,
                      const char *dst, char *version, size_t vlen)
{
        uint64_t start = shoal_now_ns();
        uint64_t deadline = start + st->cfg.deadline_ns;
        int rc;
        unsigned attempt;
        call_deadline = deadline;
        for (attempt = 1;; attempt++) {
                rc = st->ops->copy(st, src, so->version, dst, version, vlen);
                uint64_t d;
                if (!rc || !retry_after(st, rc, attempt, deadline, &d))
                        break;
                shoal_sleep_ns(d);
        }
        call_deadline = 0;
        return shoal_store_give_up(rc, "copy", src, attempt, start);
}

int shoal_store_copy(struct shoal_store *st, const char *src, const struct shoal_object *so,
                     const char *dst, struct shoal_object *out)
{
        if (!shoal_key_valid(src, strnlen(src, SHOAL_KEY_MAX + 1)) ||
            !shoal_key_valid(dst, strnlen(dst, SHOAL_KEY_MAX + 1)))
                return -EINVAL;
        bool parts = so->size > st->cfg.copy_max;
        if (!st->ops->copy || (parts && !st->ops->copy_part))
                return -EOPNOTSUPP;
        char version[SHOAL_VERSION_MAX + 1] = "";
        int rc = parts ? copy_in_parts(st, src, so, dst, version, sizeof(version))
                       : copy_whole(st, src, so, dst, version, sizeof(version));
        if (rc)
                return rc;
        /* The size and mtime come from the store; the version must be the copy's own. */
        rc = shoal_store_stat(st, dst, out);
        if (!rc && version[0] && strcmp(out->version, version))
                log_info("store", "copy %s -> %s: the copy was replaced already (%s, not %s)", src,
                         dst, out->version, version);
        if (!rc && !parts)
                log_info("store", "copied %s to %s", src, dst);
        return rc;
}
