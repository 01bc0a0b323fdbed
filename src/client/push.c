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
#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "transport/select.h"
#include "transport/client_conn.h"
#include "wire/handshake.h"
#include "transport/put_client.h"
#include "wire/wire.h"

#define THREADS_MAX 16
#define CONNS_MAX   8 /* connections one push thread keeps (one per owner it talked to) */
#define BUSY_TRIES  5

struct shoal_push {
        struct shoal_push_config cfg;
        struct shoal_hs_key key;
        uint64_t next_id; /* atomic */
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
        if (!p->cfg.timeout_ns)
                p->cfg.timeout_ns = 10ULL * 1000000000ULL;
        if (!p->cfg.threads)
                p->cfg.threads = 4;
        p->cfg.threads = SHOAL_MIN(p->cfg.threads, THREADS_MAX);
        if (shoal_hs_key_init(&p->key, &cfg->secret) ||
            shoal_random_bytes(&p->next_id, sizeof(p->next_id))) {
                shoal_hs_key_clear(&p->key);
                free(p);
                return NULL;
        }
        return p;
}

void shoal_push_destroy(struct shoal_push *p)
{
        if (!p)
                return;
        shoal_hs_key_clear(&p->key);
        free(p);
}

/* ---- staging ------------------------------------------------------------------------------ */

struct shoal_push_stage *shoal_push_stage_begin(struct shoal_push *p)
{
        if (!p)
                return NULL;
        const char *dir = getenv("TMPDIR");
        if (!dir || !*dir)
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

struct conn_slot {
        int member; /* index into the view, -1: free */
        int fd;
};

struct push_thread {
        struct push_job *job;
        pthread_t tid;
        uint8_t *buf; /* CRCs then block bytes */
        struct conn_slot conns[CONNS_MAX];
};

/* A connection to member M of the view: kept per thread for the object's blocks. The member's
 * id is authenticated by the handshake, and must be the owner's (an address now used by another
 * process gets nothing). Returns the fd or a negative errno. */
static int conn_get(struct push_thread *t, int m, uint64_t deadline)
{
        struct conn_slot *free_slot = NULL;
        for (int i = 0; i < CONNS_MAX; i++) {
                if (t->conns[i].member == m)
                        return t->conns[i].fd;
                if (t->conns[i].member < 0 && !free_slot)
                        free_slot = &t->conns[i];
        }
        if (!free_slot) {
                free_slot = &t->conns[0];
                close(free_slot->fd);
                free_slot->member = -1;
        }
        const struct shoal_member *mb = &t->job->view->members[m];
        if (!shoal_remote_member_allowed(t->job->p->key.set, mb))
                return -EHOSTUNREACH; /* our bytes go to no member we cannot authenticate */
        bool iorpc = mb->iorpc_addr[0] != '\0';
        struct shoal_rpc_peer peer;
        int fd = shoal_rpc_connect(iorpc ? mb->iorpc_addr : mb->tcp_addr,
                                   iorpc ? SHOAL_SERVICE_IORPC : SHOAL_SERVICE_POOL,
                                   &t->job->p->key, deadline, &peer);
        if (fd < 0)
                return fd;
        if (strcmp(peer.member_id, mb->id)) {
                close(fd);
                log_ratelimited(SHOAL_LOG_WARN, "push", "%s answers as member %s, not %s",
                                mb->tcp_addr, peer.member_id, mb->id);
                return -EACCES;
        }
        free_slot->member = m;
        free_slot->fd = fd;
        return fd;
}

static void conn_drop(struct push_thread *t, int m)
{
        for (int i = 0; i < CONNS_MAX; i++)
                if (t->conns[i].member == m) {
                        close(t->conns[i].fd);
                        t->conns[i].member = -1;
                }
}

/* Pushes block INDEX (in T->buf) to member M. Returns 0 or a negative errno. */
static int push_remote(struct push_thread *t, int m, uint32_t index, uint64_t deadline)
{
        struct push_job *job = t->job;
        int rc = -EIO;
        for (int attempt = 0; attempt < BUSY_TRIES; attempt++) {
                int fd = conn_get(t, m, deadline);
                if (fd < 0)
                        return fd;
                uint32_t status = 0;
                uint64_t id = __atomic_fetch_add(&job->p->next_id, 1, __ATOMIC_RELAXED);
                rc = shoal_rpc_put_block(fd, id, job->p->cfg.vol, job->obj, index, t->buf,
                                         job->view->version, deadline, &status);
                if (!rc)
                        return 0;
                if (rc != -EREMOTEIO) {
                        conn_drop(t, m); /* the stream is out of step */
                        if (attempt)
                                return rc;
                        continue; /* a kept connection may have been closed by the member */
                }
                log_ratelimited(status == SHOAL_ST_BUSY ? SHOAL_LOG_DEBUG : SHOAL_LOG_WARN, "push",
                                "member %s refused block %u of %s: %s",
                                job->view->members[m].tcp_addr, index, job->obj->key,
                                shoal_status_str(status));
                if (status != SHOAL_ST_BUSY || shoal_now_ns() > deadline)
                        return rc;
                usleep(20000u << attempt); /* the member is out of put room for a moment */
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
        return push_remote(t, m, index, shoal_now_ns() + job->p->cfg.timeout_ns);
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
        for (int k = 0; k < CONNS_MAX; k++)
                if (t->conns[k].member >= 0)
                        close(t->conns[k].fd);
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
                for (int k = 0; k < CONNS_MAX; k++)
                        ts[i].conns[k].member = -1;
                ts[i].buf = malloc(buflen);
                if (!ts[i].buf)
                        break;
                /* The first runs on this thread: a one-block object starts no thread. */
                if (i && pthread_create(&ts[i].tid, NULL, push_main, &ts[i])) {
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
                 cached, job.nblocks, (shoal_now_ns() - t0) / 1000000);
        return cached;
}
