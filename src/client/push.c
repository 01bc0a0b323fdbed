/* Write-through into the group [W3] (client/push.h): stage locally, push after the commit. */
#include "client/push.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cache/cache.h"
#include "common/config.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "transport/put_client.h"
#include "transport/select.h"
#include "wire/wire.h"

#define THREADS_MAX 16
#define BUSY_TRIES  5
#define BUSY_NAP_US 20000u /* the first pause after a member said BUSY; doubled each time */

struct shoal_push {
        struct shoal_push_config cfg;
        struct shoal_remote *own_remote; /* when the caller gave none */
};

struct shoal_push_stage {
        struct shoal_push *p;
        int fd;
        uint64_t size;
        bool broken;
};

struct shoal_push *shoal_push_create(const struct shoal_push_config *cfg)
{
        struct shoal_push *p = calloc(1, sizeof(*p));
        if (!p)
                return NULL;
        p->cfg = *cfg;
        p->cfg.secret = (struct shoal_secret){0};
        if (!p->cfg.threads)
                p->cfg.threads = 4;
        p->cfg.threads = SHOAL_MIN(p->cfg.threads, THREADS_MAX);
        if (!p->cfg.remote) {
                struct shoal_remote_config rc = {.secret = cfg->secret};
                p->cfg.remote = p->own_remote = shoal_remote_create(&rc);
                if (!p->own_remote) {
                        free(p);
                        return NULL;
                }
        }
        return p;
}

void shoal_push_destroy(struct shoal_push *p)
{
        if (!p)
                return;
        shoal_remote_destroy(p->own_remote);
        free(p);
}

/* ---- staging ------------------------------------------------------------------------------ */

struct shoal_push_stage *shoal_push_stage_begin(struct shoal_push *p)
{
        if (!p)
                return NULL;
        const char *dir = shoal_config_env()->tmpdir;
        if (!dir)
                dir = "/tmp";
        int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) {
                log_ratelimited(SHOAL_LOG_WARN, "push",
                                "cannot stage a written object in %s (%s): it is written without "
                                "write-through",
                                dir, strerror(errno));
                return NULL;
        }
        struct shoal_push_stage *st = calloc(1, sizeof(*st));
        if (!st) {
                close(fd);
                return NULL;
        }
        st->p = p;
        st->fd = fd;
        return st;
}

void shoal_push_stage_append(struct shoal_push_stage *st, const void *data, size_t len)
{
        if (!st || st->broken)
                return;
        const char *b = data;
        while (len) {
                ssize_t n = pwrite(st->fd, b, len, (off_t)st->size);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0) {
                        log_ratelimited(SHOAL_LOG_WARN, "push",
                                        "staging a written object failed (%s): it is written "
                                        "without write-through",
                                        n < 0 ? strerror(errno) : "no space");
                        st->broken = true;
                        return;
                }
                b += n;
                len -= (size_t)n;
                st->size += (uint64_t)n;
        }
}

void shoal_push_stage_abort(struct shoal_push_stage *st)
{
        if (!st)
                return;
        close(st->fd);
        free(st);
}

/* ---- pushing ------------------------------------------------------------------------------- */

struct push_job {
        struct shoal_push *p;
        int fd; /* the staging file */
        const struct shoal_object *obj;
        struct shoal_group_view *view;
        const char *self_id;
        uint32_t nblocks;
        uint32_t next;   /* atomic: the next block to take */
        uint32_t cached; /* atomic */
};

struct push_thread {
        struct push_job *job;
        pthread_t tid;
        uint8_t *buf; /* CRCs then block bytes */
};

/* Pushes block INDEX (in T->buf) to member M through the selector (its connections, member
 * avoidance and deadline); a member out of put room (BUSY) is asked again a few times before
 * DEADLINE. Returns 0 or a negative errno. */
static int push_remote(struct push_thread *t, int m, uint32_t index, uint64_t deadline)
{
        struct push_job *job = t->job;
        const struct shoal_member *mb = &job->view->members[m];
        struct shoal_put_req rq = {.vol = job->p->cfg.vol,
                                   .obj = job->obj,
                                   .index = index,
                                   .payload = t->buf,
                                   .view_version = job->view->version,
                                   .deadline = deadline};
        int rc = -EIO;
        for (int attempt = 0; attempt < BUSY_TRIES; attempt++) {
                rc = shoal_remote_put(job->p->cfg.remote, mb, &rq);
                if (rc != -EREMOTEIO)
                        return rc;
                log_ratelimited(rq.status == SHOAL_ST_BUSY ? SHOAL_LOG_DEBUG : SHOAL_LOG_WARN,
                                "push", "member %s refused block %u of %s: %s", mb->tcp_addr, index,
                                job->obj->key, shoal_status_str(rq.status));
                if (rq.status != SHOAL_ST_BUSY || shoal_now_ns() > deadline)
                        return rc;
                usleep(BUSY_NAP_US << attempt); /* the member is out of put room for a moment */
        }
        return rc;
}

static int push_block(struct push_thread *t, uint32_t index)
{
        struct push_job *job = t->job;
        const struct shoal_volume *vol = job->p->cfg.vol;
        uint32_t len = shoal_block_len(job->obj->size, vol->block_size, index);
        uint32_t ncrc = shoal_chunk_count(len);
        uint8_t *data = t->buf + 4 * (size_t)ncrc;
        off_t off = (off_t)((uint64_t)index * vol->block_size);
        for (uint32_t got = 0; got < len;) {
                ssize_t n = pread(job->fd, data + got, len - got, off + got);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n <= 0)
                        return n < 0 ? -errno : -EIO;
                got += (uint32_t)n;
        }
        struct shoal_block_id id;
        shoal_block_id_derive(vol, job->obj->key, job->obj->version, index, &id);
        int m = shoal_group_owner(job->view, &id);
        if (m < 0)
                return -EHOSTUNREACH;
        if (!strcmp(job->view->members[m].id, job->self_id)) {
                /* This process owns it: straight into its own cache. */
                struct shoal_cache *c = job->p->cfg.cache;
                return c && shoal_cache_enabled(c) ? shoal_cache_insert(c, &id, data, len)
                                                   : -ENODEV;
        }
        shoal_put_payload_crcs(&id, t->buf, len);
        return push_remote(t, m, index, shoal_remote_deadline(job->p->cfg.remote));
}

static void *push_main(void *arg)
{
        struct push_thread *t = arg;
        struct push_job *job = t->job;
        for (;;) {
                uint32_t i = __atomic_fetch_add(&job->next, 1, __ATOMIC_RELAXED);
                if (i >= job->nblocks)
                        break;
                uint32_t len = shoal_block_len(job->obj->size, job->p->cfg.vol->block_size, i);
                shoal_metric_inc(SHOAL_M_remotecache_put_requests);
                int rc = push_block(t, i);
                if (rc) {
                        shoal_metric_inc(SHOAL_M_remotecache_put_errors);
                        log_ratelimited(SHOAL_LOG_WARN, "push",
                                        "block %u of %s was not cached in the group: %s", i,
                                        job->obj->key, strerror(-rc));
                        continue;
                }
                shoal_metric_add(SHOAL_M_remotecache_put_bytes, len);
                __atomic_fetch_add(&job->cached, 1, __ATOMIC_RELAXED);
        }
        return NULL;
}

unsigned shoal_push_stage_commit(struct shoal_push_stage *st, const struct shoal_object *obj)
{
        if (!st)
                return 0;
        struct shoal_push *p = st->p;
        unsigned cached = 0;
        if (!obj->size) { /* an empty object has no block */
                shoal_push_stage_abort(st);
                return 0;
        }
        if (st->broken || st->size != obj->size) {
                if (!st->broken)
                        log_warn("push",
                                 "%s: staged %" PRIu64 " bytes, the store has %" PRIu64
                                 ": not pushed",
                                 obj->key, st->size, obj->size);
                shoal_push_stage_abort(st);
                return 0;
        }
        uint64_t t0 = shoal_now_ns();
        struct push_job job = {.p = p,
                               .fd = st->fd,
                               .obj = obj,
                               .view = shoal_group_view_get(p->cfg.group),
                               .self_id = shoal_group_self_id(p->cfg.group),
                               .nblocks = shoal_block_count(obj->size, p->cfg.vol->block_size)};
        unsigned nt = SHOAL_MIN(p->cfg.threads, job.nblocks);
        struct push_thread *ts = calloc(nt ? nt : 1, sizeof(*ts));
        size_t buflen = 4 * (size_t)SHOAL_MAX_CHUNKS + p->cfg.vol->block_size;
        unsigned started = 0;
        for (unsigned i = 0; ts && i < nt; i++) {
                ts[i].job = &job;
                ts[i].buf = malloc(buflen);
                if (!ts[i].buf)
                        break;
                /* The first runs on this thread: a one-block object starts no thread. */
                if (i && shoal_thread_create(&ts[i].tid, push_main, &ts[i])) {
                        free(ts[i].buf);
                        ts[i].buf = NULL;
                        break;
                }
                started++;
        }
        if (started)
                push_main(&ts[0]);
        for (unsigned i = 1; i < started; i++)
                pthread_join(ts[i].tid, NULL);
        for (unsigned i = 0; ts && i < nt; i++)
                free(ts[i].buf);
        free(ts);
        cached = job.cached;
        if (cached < job.nblocks)
                shoal_metric_add(SHOAL_M_remotecache_put_errors,
                                 started ? 0 : job.nblocks); /* nothing ran: out of memory */
        shoal_group_view_put(job.view);
        shoal_push_stage_abort(st);
        shoal_metric_observe(SHOAL_M_remotecache_put_dur, shoal_now_ns() - t0);
        log_info("push", "%s: %u of %u blocks cached in the group in %" PRIu64 " ms", obj->key,
                 cached, job.nblocks, (uint64_t)((shoal_now_ns() - t0) / SHOAL_NS_PER_MS));
        return cached;
}
