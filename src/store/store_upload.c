/* The upload engine [W1, W2]: one object from sequential bytes, over either backend shape of
 * store.h. A streamed backend (file://) gets the bytes as they come. For a request backend
 * (s3://) the bytes are cut into parts: an object under one part goes up in one PUT at commit;
 * a larger one becomes a multipart upload whose full parts are queued, while the writer goes on
 * appending, to a small pool of upload workers shared by the store. Every request runs under the
 * store's retry policy with a deadline of its own; part buffers are drawn from one byte budget.
 *
 * Locking: the pool mutex guards the queue, the budget and, per upload, the fields the workers
 * touch (inflight, held, err, the ETag table). The writer's own fields (cur, size, nparts) are
 * its alone: one thread at a time calls into one upload. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <openssl/evp.h>

#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "store/store.h"
#include "store/store_internal.h"

#define UPLOAD_WORKERS  8
#define UPLOAD_MAX_PART 10000 /* S3's limit on parts of one upload */
#define UPLOAD_ID_MAX   1024
#define UPLOAD_ETAG_MAX 136
/* The first buffer of an upload starts small and doubles: most objects are smaller than a part
 * and should not hold a whole part of the budget. */
#define UPLOAD_FIRST_BUF (256u * 1024u)

struct part {
        struct part *next;
        struct shoal_upload *u;
        unsigned num; /* 1-based */
        char *buf;
        size_t len, cap;
};

struct upload_pool {
        pthread_mutex_t mu;
        pthread_cond_t work; /* a part was queued, or stop */
        pthread_cond_t done; /* a part finished: budget and in-flight slots came free */
        struct part *head, *tail;
        pthread_t threads[UPLOAD_WORKERS];
        unsigned nthreads;
        bool stop;
        uint64_t used; /* bytes of part buffers held by every upload */
};

struct shoal_upload {
        struct shoal_store *st;
        char key[SHOAL_KEY_MAX + 1];
        unsigned flags;
        uint64_t size;
        uint64_t t0;
        void *stream; /* streamed backend's handle */
        int err;      /* sticky; written by workers under the pool lock */

        /* request backend */
        char *cur; /* the part being filled */
        size_t cur_len, cur_cap;
        uint64_t held;     /* bytes of buffers this upload holds (cur and parts in flight) */
        unsigned inflight; /* parts queued or being sent */
        unsigned nparts;   /* parts handed to the workers */
        bool mpu;
        char id[UPLOAD_ID_MAX];
        char (*etags)[UPLOAD_ETAG_MAX]; /* etags[num - 1] */
        unsigned etags_cap;
        /* MD5 of every byte appended, for complete_lost: a store that names a multipart object
         * by its content's MD5 (s3rver) instead of S3's MD5 of the part MD5s. NULL: none. */
        EVP_MD_CTX *md5;
};

static bool streamed(const struct shoal_store *st)
{
        return st->ops->stream_begin != NULL;
}

/* --- the pool and the budget ----------------------------------------------------------- */

static void *worker_main(void *arg);

int shoal_store_uploads_init(struct shoal_store *st)
{
        struct upload_pool *p = calloc(1, sizeof(*p));
        if (!p)
                return -ENOMEM;
        pthread_mutex_init(&p->mu, NULL);
        pthread_cond_init(&p->work, NULL);
        pthread_cond_init(&p->done, NULL);
        st->uploads = p;
        return 0;
}

/* Starts another worker when every one is busy (pool lock held). Failing to start one is fine
 * while at least one runs. */
static int pool_grow(struct upload_pool *p, unsigned queued)
{
        if (p->nthreads >= UPLOAD_WORKERS || (p->nthreads && queued <= 1))
                return 0;
        if (shoal_thread_create(&p->threads[p->nthreads], worker_main, p))
                return p->nthreads ? 0 : -ENOMEM;
        p->nthreads++;
        return 0;
}

void shoal_store_uploads_stop(struct shoal_store *st)
{
        struct upload_pool *p = st->uploads;
        if (!p)
                return;
        pthread_mutex_lock(&p->mu);
        p->stop = true;
        pthread_cond_broadcast(&p->work);
        pthread_mutex_unlock(&p->mu);
        for (unsigned i = 0; i < p->nthreads; i++)
                pthread_join(p->threads[i], NULL);
        pthread_cond_destroy(&p->work);
        pthread_cond_destroy(&p->done);
        pthread_mutex_destroy(&p->mu);
        free(p);
        st->uploads = NULL;
}

/* Takes BYTES of the budget for U (pool lock held). Waits while the budget is spent and U has
 * parts in flight: those come back whatever happens to them, so the wait ends. An upload with
 * nothing in flight never waits, or two writers filling their first buffers could wait for each
 * other forever. */
static void budget_take(struct upload_pool *p, struct shoal_upload *u, uint64_t bytes)
{
        while (p->used + bytes > u->st->cfg.upload_buffer_bytes && u->inflight && !u->err)
                pthread_cond_wait(&p->done, &p->mu);
        p->used += bytes;
        u->held += bytes;
        shoal_metric_gauge_add(SHOAL_M_object_put_buffer_bytes, (int64_t)bytes);
}

static void budget_give(struct upload_pool *p, struct shoal_upload *u, uint64_t bytes)
{
        p->used -= bytes;
        u->held -= bytes;
        shoal_metric_gauge_add(SHOAL_M_object_put_buffer_bytes, -(int64_t)bytes);
        pthread_cond_broadcast(&p->done);
}

/* --- requests under the retry policy ---------------------------------------------------- */

static void note_retry(const char *what, const char *key, int rc, unsigned attempt)
{
        shoal_metric_inc(SHOAL_M_object_put_retries);
        log_ratelimited(SHOAL_LOG_WARN, "store", "%s %s failed: %s; retry %u", what, key,
                        strerror(-rc), attempt);
}

/* One store request of an upload; *FINAL set: its answer stands, whatever it is. */
typedef int (*upload_call)(struct shoal_upload *u, void *arg, bool *final);

/* Runs CALL until it succeeds, the store's retry policy gives up, or the store's deadline passes.
 * WHAT names it in the logs; NULL: no retries counted or logged, and the last error as it came
 * (for a best-effort abort). */
static int with_retries(struct shoal_upload *u, const char *what, upload_call call, void *arg)
{
        struct shoal_store *st = u->st;
        uint64_t start = shoal_now_ns();
        unsigned attempt;
        int rc;
        shoal_store_deadline_set(start + st->cfg.deadline_ns);
        for (attempt = 1;; attempt++) {
                bool final = false;
                rc = call(u, arg, &final);
                if (!rc || final || !shoal_store_retry_wait(st, rc, attempt))
                        break;
                if (what)
                        note_retry(what, u->key, rc, attempt);
        }
        shoal_store_deadline_set(0);
        return what ? shoal_store_give_up(rc, what, u->key, attempt, start) : rc;
}

/* A PUT of bytes (a part or the whole object), timed and counted. */
static int counted_put(int rc, uint64_t t0, size_t len)
{
        shoal_metric_inc(SHOAL_M_object_put_requests);
        shoal_metric_observe(SHOAL_M_object_put_dur, shoal_now_ns() - t0);
        if (!rc)
                shoal_metric_add(SHOAL_M_object_put_bytes, len);
        return rc;
}

struct part_call {
        const struct part *pt;
        char *etag;
};

static int call_part(struct shoal_upload *u, void *arg, bool *final)
{
        (void) final;
        const struct part_call *pc = arg;
        uint64_t t0 = shoal_now_ns();
        int rc = u->st->ops->mpu_part(u->st, u->key, u->id, pc->pt->num, pc->pt->buf, pc->pt->len,
                                      pc->etag, UPLOAD_ETAG_MAX);
        return counted_put(rc, t0, pc->pt->len);
}

static int part_send(struct shoal_upload *u, const struct part *pt, char *etag)
{
        char what[32];
        snprintf(what, sizeof(what), "upload part %u of", pt->num);
        struct part_call pc = {.pt = pt, .etag = etag};
        return with_retries(u, what, call_part, &pc);
}

struct version_out {
        char *version;
        size_t vlen;
};

static int call_put(struct shoal_upload *u, void *arg, bool *final)
{
        (void) final;
        const struct version_out *vo = arg;
        uint64_t t0 = shoal_now_ns();
        int rc =
                u->st->ops->put(u->st, u->key, u->cur, u->cur_len, u->flags, vo->version, vo->vlen);
        return counted_put(rc, t0, u->cur_len);
}

static int put_whole(struct shoal_upload *u, char *version, size_t vlen)
{
        struct version_out vo = {version, vlen};
        return with_retries(u, "put", call_put, &vo);
}

static int call_begin(struct shoal_upload *u, void *arg, bool *final)
{
        (void)arg;
        (void) final;
        return u->st->ops->mpu_begin(u->st, u->key, u->id, sizeof(u->id));
}

static int mpu_begin(struct shoal_upload *u)
{
        int rc = with_retries(u, "start multipart upload of", call_begin, NULL);
        if (!rc) {
                u->mpu = true;
                shoal_metric_inc(SHOAL_M_object_multipart_uploads);
                log_debug("store", "multipart upload of %s started (id %s)", u->key, u->id);
        }
        return rc;
}

/* The ETag S3 gives the object this upload's parts make: the MD5 of the parts' binary MD5s (their
 * ETags), then "-N". Returns 0, or -EINVAL when a part's ETag is not an MD5 (encrypted with
 * SSE-KMS, or a store that names parts otherwise): then nothing can be checked. */
static int parts_etag(const struct shoal_upload *u, char *out, size_t outlen)
{
        EVP_MD_CTX *ctx = EVP_MD_CTX_new();
        if (!ctx || !EVP_DigestInit_ex(ctx, EVP_md5(), NULL)) {
                EVP_MD_CTX_free(ctx);
                return -ENOMEM;
        }
        int rc = 0;
        for (unsigned i = 0; !rc && i < u->nparts; i++) {
                const char *e = u->etags[i];
                uint8_t md5[16];
                if (strlen(e) != 32)
                        rc = -EINVAL;
                for (int k = 0; !rc && k < 16; k++) {
                        int hi = shoal_hexval(e[2 * k]), lo = shoal_hexval(e[2 * k + 1]);
                        if (hi < 0 || lo < 0)
                                rc = -EINVAL;
                        else
                                md5[k] = (uint8_t)(hi << 4 | lo);
                }
                if (!rc && !EVP_DigestUpdate(ctx, md5, sizeof(md5)))
                        rc = -ENOMEM;
        }
        uint8_t sum[16];
        unsigned slen = 0;
        if (!rc && (!EVP_DigestFinal_ex(ctx, sum, &slen) || slen != sizeof(sum)))
                rc = -ENOMEM;
        EVP_MD_CTX_free(ctx);
        if (rc)
                return rc;
        char hex[33];
        shoal_hex(sum, sizeof(sum), hex);
        snprintf(out, outlen, "%s-%u", hex, u->nparts);
        return 0;
}

/* A CompleteMultipartUpload whose answer was lost may have worked: a retry then finds no such
 * upload (-ENOENT) — ours or libcurl's own, which sends a request again when a reused
 * connection dies before the answer, so even a first attempt can see it. The object there is
 * taken as ours only when its ETag is the one our parts make (parts_etag), or the MD5 of our
 * bytes (what s3rver names a multipart object by): a same-size object
 * another writer put in between has another, and taking it would push our blocks under its
 * version, where every reader would get them. Anything else fails the write: nothing is
 * pushed, and the caller's error says the object's state is unknown. */
static int complete_lost(struct shoal_upload *u, char *version, size_t vlen)
{
        struct shoal_object o;
        char want[64];
        if (shoal_store_stat(u->st, u->key, &o) || o.size != u->size)
                return -EIO;
        char whole[33] = "";
        uint8_t sum[16];
        unsigned slen = 0;
        EVP_MD_CTX *c = EVP_MD_CTX_new(); /* a copy: the running one stays usable */
        if (c && EVP_MD_CTX_copy_ex(c, u->md5) && EVP_DigestFinal_ex(c, sum, &slen) &&
            slen == sizeof(sum))
                shoal_hex(sum, sizeof(sum), whole);
        EVP_MD_CTX_free(c);
        int rc = parts_etag(u, want, sizeof(want));
        if (rc && !strcasecmp(o.version, whole))
                rc = 0; /* (parts not named by MD5s, but the object is our bytes' MD5) */
        if (rc) {
                log_warn("store",
                         "complete %s: the upload was gone on retry and its parts' ETags are not "
                         "MD5s, so the object there cannot be told from another writer's: "
                         "failing the write",
                         u->key);
                return -EIO;
        }
        if (strcasecmp(o.version, want) && strcasecmp(o.version, whole)) {
                log_warn("store",
                         "complete %s: the upload was gone on retry and the object there has "
                         "ETag %s, not %s that our parts make (nor %s, our bytes' MD5): another "
                         "writer's, failing the write",
                         u->key, o.version, want, whole);
                return -EIO;
        }
        log_warn("store",
                 "complete %s: the upload was gone on retry; the object there has the ETag our "
                 "parts make (%s, or our bytes' MD5 %s), taken as ours",
                 u->key, want, whole);
        shoal_strlcpy(version, o.version, vlen);
        return 0;
}

struct complete_call {
        const char **etags;
        struct version_out vo;
};

static int call_complete(struct shoal_upload *u, void *arg, bool *final)
{
        const struct complete_call *cc = arg;
        int rc = u->st->ops->mpu_complete(u->st, u->key, u->id, cc->etags, u->nparts, u->flags,
                                          cc->vo.version, cc->vo.vlen);
        if (rc == -ENOENT) {
                *final = true;
                rc = complete_lost(u, cc->vo.version, cc->vo.vlen);
        }
        return rc;
}

static int mpu_complete(struct shoal_upload *u, char *version, size_t vlen)
{
        const char **etags = malloc(u->nparts * sizeof(*etags));
        if (!etags)
                return -ENOMEM;
        for (unsigned i = 0; i < u->nparts; i++)
                etags[i] = u->etags[i];
        struct complete_call cc = {.etags = etags, .vo = {version, vlen}};
        int rc = with_retries(u, "complete", call_complete, &cc);
        free(etags);
        return rc;
}

static int call_abort(struct shoal_upload *u, void *arg, bool *final)
{
        (void)arg;
        (void) final;
        return u->st->ops->mpu_abort(u->st, u->key, u->id);
}

/* Best effort: a failed abort leaves parts that the bucket's lifecycle rule must collect; it is
 * logged so that an operator knows. */
static void mpu_abort(struct shoal_upload *u)
{
        int rc = with_retries(u, NULL, call_abort, NULL);
        shoal_metric_inc(SHOAL_M_object_multipart_aborts);
        if (rc)
                log_error("store",
                          "abort of multipart upload %s of %s failed: %s; its parts stay until "
                          "the bucket's lifecycle rule removes them",
                          u->id, u->key, strerror(-rc));
        else
                log_info("store", "multipart upload of %s aborted (id %s)", u->key, u->id);
}

/* --- workers ------------------------------------------------------------------------------ */

static void *worker_main(void *arg)
{
        struct upload_pool *p = arg;
        pthread_mutex_lock(&p->mu);
        for (;;) {
                while (!p->head && !p->stop)
                        pthread_cond_wait(&p->work, &p->mu);
                struct part *pt = p->head;
                if (!pt)
                        break;
                p->head = pt->next;
                if (!p->head)
                        p->tail = NULL;
                struct shoal_upload *u = pt->u;
                int rc = u->err; /* a sibling failed: do not send more for a dead upload */
                pthread_mutex_unlock(&p->mu);

                char etag[UPLOAD_ETAG_MAX] = "";
                if (!rc)
                        rc = part_send(u, pt, etag);

                pthread_mutex_lock(&p->mu);
                if (rc && !u->err)
                        u->err = rc;
                if (!rc)
                        memcpy(u->etags[pt->num - 1], etag, sizeof(etag));
                u->inflight--;
                budget_give(p, u, pt->cap);
                /* U may be freed as soon as the lock is dropped: nothing of it is touched after. */
                pthread_mutex_unlock(&p->mu);
                free(pt->buf);
                free(pt);
                pthread_mutex_lock(&p->mu);
        }
        pthread_mutex_unlock(&p->mu);
        return NULL;
}

/* Hands the full buffer CUR to the workers as the next part. */
static int part_queue(struct shoal_upload *u)
{
        struct upload_pool *p = u->st->uploads;
        if (u->nparts >= UPLOAD_MAX_PART) {
                log_error("store",
                          "upload of %s: more than %u parts of %llu bytes; raise "
                          "--upload-part-size for objects this large",
                          u->key, UPLOAD_MAX_PART, (unsigned long long)u->st->cfg.upload_part_size);
                return -EFBIG;
        }
        struct part *pt = calloc(1, sizeof(*pt));
        if (!pt)
                return -ENOMEM;
        pt->u = u;
        pt->buf = u->cur;
        pt->len = u->cur_len;
        pt->cap = u->cur_cap;

        pthread_mutex_lock(&p->mu);
        if (u->nparts >= u->etags_cap) {
                unsigned cap = u->etags_cap ? u->etags_cap * 2 : 64;
                void *ne = realloc(u->etags, (size_t)cap * UPLOAD_ETAG_MAX);
                if (!ne) {
                        pthread_mutex_unlock(&p->mu);
                        free(pt);
                        return -ENOMEM;
                }
                u->etags = ne;
                u->etags_cap = cap;
        }
        /* Several parts in flight per upload, not more: the others' turn, and bounded memory. */
        while (u->inflight >= u->st->cfg.upload_concurrency && !u->err)
                pthread_cond_wait(&p->done, &p->mu);
        int rc = u->err;
        if (!rc)
                rc = pool_grow(p, u->inflight + 1);
        if (rc) {
                pthread_mutex_unlock(&p->mu);
                free(pt);
                return rc;
        }
        pt->num = ++u->nparts;
        u->inflight++;
        if (p->tail)
                p->tail->next = pt;
        else
                p->head = pt;
        p->tail = pt;
        pthread_cond_signal(&p->work);
        pthread_mutex_unlock(&p->mu);
        u->cur = NULL;
        u->cur_len = u->cur_cap = 0;
        return 0;
}

/* Makes room in CUR for more bytes: the first buffer grows by doubling up to a part, later ones
 * are whole parts from the start. */
static int cur_grow(struct shoal_upload *u)
{
        struct upload_pool *p = u->st->uploads;
        uint64_t ps = u->st->cfg.upload_part_size;
        size_t ncap;
        if (!u->cur)
                ncap = u->nparts ? ps : SHOAL_MIN(ps, (uint64_t)UPLOAD_FIRST_BUF);
        else
                ncap = SHOAL_MIN(ps, (uint64_t)u->cur_cap * 2);
        pthread_mutex_lock(&p->mu);
        budget_take(p, u, ncap - u->cur_cap);
        int rc = u->err;
        pthread_mutex_unlock(&p->mu);
        char *nb = rc ? NULL : realloc(u->cur, ncap);
        if (!nb) {
                pthread_mutex_lock(&p->mu);
                budget_give(p, u, ncap - u->cur_cap);
                pthread_mutex_unlock(&p->mu);
                return rc ? rc : -ENOMEM;
        }
        u->cur = nb;
        u->cur_cap = ncap;
        return 0;
}

static int wait_parts(struct shoal_upload *u)
{
        struct upload_pool *p = u->st->uploads;
        if (!p)
                return 0;
        pthread_mutex_lock(&p->mu);
        while (u->inflight)
                pthread_cond_wait(&p->done, &p->mu);
        int rc = u->err;
        pthread_mutex_unlock(&p->mu);
        return rc;
}

/* --- the interface -------------------------------------------------------------------------- */

int shoal_store_upload_begin(struct shoal_store *st, const char *key, unsigned flags,
                             struct shoal_upload **out)
{
        *out = NULL;
        if (!shoal_key_valid(key, strnlen(key, SHOAL_KEY_MAX + 1)))
                return -EINVAL;
        if (!streamed(st) && !st->ops->put)
                return -EOPNOTSUPP;
        struct shoal_upload *u = calloc(1, sizeof(*u));
        if (!u)
                return -ENOMEM;
        u->st = st;
        u->flags = flags;
        u->t0 = shoal_now_ns();
        shoal_strlcpy(u->key, key, sizeof(u->key));
        int rc;
        if (streamed(st)) {
                rc = st->ops->stream_begin(st, key, flags, &u->stream);
        } else if (!(u->md5 = EVP_MD_CTX_new()) || !EVP_DigestInit_ex(u->md5, EVP_md5(), NULL)) {
                rc = -ENOMEM;
        } else if ((flags & SHOAL_UPLOAD_CREATE) && !(flags & SHOAL_UPLOAD_CHECKED)) {
                /* Early and cheap; commit asks the store again atomically where it can. */
                struct shoal_object o;
                rc = shoal_store_stat(st, key, &o);
                rc = !rc ? -EEXIST : rc == -ENOENT ? 0 : rc;
        } else {
                rc = 0;
        }
        if (rc) {
                EVP_MD_CTX_free(u->md5);
                free(u);
                return rc;
        }
        log_debug("store", "upload of %s begun%s", key,
                  flags & SHOAL_UPLOAD_CREATE ? " (new object)" : "");
        *out = u;
        return 0;
}

uint64_t shoal_store_upload_size(const struct shoal_upload *u)
{
        return u->size;
}

static int append_parts(struct shoal_upload *u, const char *data, size_t len)
{
        while (len) {
                if (u->cur_len == u->st->cfg.upload_part_size) {
                        /* A full part goes only once more bytes come, so the last part is
                         * always sent by commit, never an empty one. */
                        int rc = u->mpu ? 0 : mpu_begin(u);
                        if (!rc)
                                rc = part_queue(u);
                        if (rc)
                                return rc;
                }
                if (u->cur_len == u->cur_cap) {
                        int rc = cur_grow(u);
                        if (rc)
                                return rc;
                }
                size_t n = SHOAL_MIN(len, u->cur_cap - u->cur_len);
                memcpy(u->cur + u->cur_len, data, n);
                u->cur_len += n;
                data += n;
                len -= n;
        }
        return 0;
}

int shoal_store_upload_append(struct shoal_upload *u, const void *data, size_t len)
{
        if (u->err)
                return u->err;
        int rc;
        if (streamed(u->st)) {
                rc = u->st->ops->stream_append(u->st, u->stream, data, len);
                if (!rc)
                        shoal_metric_add(SHOAL_M_object_put_bytes, len);
        } else {
                rc = append_parts(u, data, len);
                if (!rc && !EVP_DigestUpdate(u->md5, data, len))
                        rc = -ENOMEM;
        }
        if (rc) {
                if (!u->err)
                        u->err = rc;
                return u->err;
        }
        u->size += len;
        return 0;
}

static void upload_free(struct shoal_upload *u)
{
        struct upload_pool *p = u->st->uploads;
        if (u->cur) {
                free(u->cur);
                pthread_mutex_lock(&p->mu);
                budget_give(p, u, u->cur_cap);
                pthread_mutex_unlock(&p->mu);
        }
        free(u->etags);
        EVP_MD_CTX_free(u->md5);
        free(u);
}

static int commit_parts(struct shoal_upload *u, struct shoal_object *out)
{
        int rc = u->err;
        if (!rc && !u->mpu) {
                rc = put_whole(u, out->version, sizeof(out->version));
        } else if (!rc) {
                if (u->cur_len)
                        rc = part_queue(u);
                int wrc = wait_parts(u);
                if (!rc)
                        rc = wrc;
                if (!rc)
                        rc = mpu_complete(u, out->version, sizeof(out->version));
        }
        if (rc && u->mpu) {
                wait_parts(u);
                mpu_abort(u);
        }
        if (!rc) {
                shoal_strlcpy(out->key, u->key, sizeof(out->key));
                out->size = u->size;
                /* The store's own time comes with the next stat; readers key by version. */
                out->mtime_ns = (int64_t)shoal_wall_ns();
        }
        return rc;
}

int shoal_store_upload_commit(struct shoal_upload *u, struct shoal_object *out)
{
        struct shoal_store *st = u->st;
        uint64_t t0 = shoal_now_ns();
        memset(out, 0, sizeof(*out));
        int rc;
        if (streamed(st)) {
                if (u->err) {
                        st->ops->stream_abort(st, u->stream);
                        rc = u->err;
                } else {
                        shoal_metric_inc(SHOAL_M_object_put_requests);
                        rc = st->ops->stream_commit(st, u->stream, out);
                }
        } else {
                rc = commit_parts(u, out);
        }
        uint64_t now = shoal_now_ns();
        shoal_metric_observe(SHOAL_M_object_put_commit_dur, now - t0);
        if (rc) {
                shoal_metric_inc(SHOAL_M_object_put_errors);
                log_error("store", "upload of %s failed: %s; nothing was written under the key",
                          u->key, strerror(-rc));
        } else {
                shoal_metric_inc(SHOAL_M_object_put_objects);
                char parts[32] = "";
                if (u->mpu)
                        snprintf(parts, sizeof(parts), " in %u parts", u->nparts);
                log_info("store", "uploaded %s: %llu bytes%s in %llu ms, version %s", u->key,
                         (unsigned long long)u->size, parts,
                         (unsigned long long)((now - u->t0) / SHOAL_NS_PER_MS), out->version);
        }
        if (!streamed(st))
                upload_free(u);
        else
                free(u);
        return rc;
}

void shoal_store_upload_abort(struct shoal_upload *u)
{
        struct shoal_store *st = u->st;
        log_info("store", "upload of %s abandoned after %llu bytes", u->key,
                 (unsigned long long)u->size);
        if (streamed(st)) {
                st->ops->stream_abort(st, u->stream);
                free(u);
                return;
        }
        if (u->mpu) {
                struct upload_pool *p = st->uploads;
                pthread_mutex_lock(&p->mu);
                if (!u->err)
                        u->err = -ECANCELED; /* queued parts are dropped, not sent */
                pthread_mutex_unlock(&p->mu);
                wait_parts(u);
                mpu_abort(u);
        }
        upload_free(u);
}
