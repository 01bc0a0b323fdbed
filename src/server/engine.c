/* The request engine (server/engine.h): one request path for TCP and RDMA.
 *
 * Blocking work never runs on a transport's thread: opening and reading cache files runs on the
 * "disk" workers, filling a miss from the store on the "fill" workers. A request is one struct
 * shoal_req moving through them; the transport's DONE takes it back. A cache hit is never
 * checksummed here (the requester verifies every chunk against the CRCs of the file's verified
 * header, which the answer carries). At most max_inflight requests are processed at once in the
 * whole server; the rest wait in a FIFO for a slot [R4].
 *
 * Metrics keep the seeds' meanings [V2]: a request's stages (decode, process, write body) and
 * its slot (inflight, queued) are counted under mount_iorpc_* when it came over IORPC (TCP or
 * RDMA) and under remotecache_pool_* when it came over the TCP pool; the cap is one for both. */
#include "server/engine.h"

#include <errno.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/bufpool.h"
#include "common/log.h"
#include "common/util.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "server/mode.h"
#include "server/pipes.h"
#include "server/server_put.h"
#include "store/sizes.h"

#define DISK_WORKERS       16
#define FILL_WORKERS       64
#define DIO_BUFFERS        64
#define PIPE_CAP_MAX       (8u << 20)
#define SIZES_MAX          16384 /* object sizes remembered (a version's size never changes) */
#define CORRUPT_ACTIVE_MAX 4     /* CORRUPT notices being checked in the server (more dropped) */
/* An RDMA answer holds its buffer only until the write completes: it may wait this long. */
#define RDMA_BUF_WAIT_NS (2 * SHOAL_NS_PER_SEC)

/* The series one service's requests are counted in. */
struct svc_metrics {
        enum shoal_metric_id process, write_body, decode, inflight, queued, inflight_max,
                queued_max;
};

enum {
        SVC_M_POOL,
        SVC_M_IORPC,
        SVC_M__COUNT
};

static const struct svc_metrics svc_metrics[SVC_M__COUNT] = {
        [SVC_M_POOL] = {SHOAL_M_remotecache_pool_processRespDur,
                        SHOAL_M_remotecache_pool_writeBodyDur,
                        SHOAL_M_remotecache_pool_decodeBodyDur, SHOAL_M_remotecache_pool_inflight,
                        SHOAL_M_remotecache_pool_queued, SHOAL_M_remotecache_pool_inflight_max,
                        SHOAL_M_remotecache_pool_queued_max},
        [SVC_M_IORPC] = {SHOAL_M_mount_iorpc_processRespDur, SHOAL_M_mount_iorpc_writeBodyDur,
                         SHOAL_M_mount_iorpc_decodeBodyDur, SHOAL_M_mount_iorpc_inflight,
                         SHOAL_M_mount_iorpc_queued, SHOAL_M_mount_iorpc_inflight_max,
                         SHOAL_M_mount_iorpc_queued_max},
};

struct shoal_engine {
        struct shoal_engine_config cfg;
        struct shoal_workers *disk, *fill;
        struct shoal_bufpool *dio;
        struct shoal_pipes *pipes;       /* zero-copy answers (splice) */
        struct shoal_store_sizes *sizes; /* object sizes the member learned itself [S4] */
        struct shoal_put_srv *put;       /* write-through: pushed blocks [W3] */
        struct shoal_group *_Atomic group;
        _Atomic bool held_direct; /* the reader's buffers are registered for RDMA writes */
        pthread_mutex_t cap_mu;   /* guards the slot counts and the wait queue */
        bool stopping;
        unsigned active, queued; /* both services: the cap applies to their sum */
        unsigned svc_active[SVC_M__COUNT], svc_active_max[SVC_M__COUNT];
        unsigned svc_queued[SVC_M__COUNT], svc_queued_max[SVC_M__COUNT];
        struct shoal_list waitq;
        unsigned corrupt_active; /* atomic: CORRUPT notices being checked */
};

static int req_svc(const struct shoal_req *r)
{
        return r->via == SHOAL_VIA_POOL ? SVC_M_POOL : SVC_M_IORPC;
}

/* ---- slots [R4] --------------------------------------------------------------------------- */

/* Slot bookkeeping of one service's gauges; under cap_mu. */
static void svc_slot_take(struct shoal_engine *e, int svc)
{
        const struct svc_metrics *m = &svc_metrics[svc];
        shoal_metric_gauge_add(m->inflight, 1);
        if (++e->svc_active[svc] > e->svc_active_max[svc]) {
                e->svc_active_max[svc] = e->svc_active[svc];
                shoal_metric_gauge_set(m->inflight_max, e->svc_active_max[svc]);
        }
}

static void svc_slot_give(struct shoal_engine *e, int svc)
{
        e->svc_active[svc]--;
        shoal_metric_gauge_add(svc_metrics[svc].inflight, -1);
}

static void svc_queue_add(struct shoal_engine *e, int svc, int delta)
{
        const struct svc_metrics *m = &svc_metrics[svc];
        e->svc_queued[svc] = (unsigned)((int)e->svc_queued[svc] + delta);
        shoal_metric_gauge_add(m->queued, delta);
        if (e->svc_queued[svc] > e->svc_queued_max[svc]) {
                e->svc_queued_max[svc] = e->svc_queued[svc];
                shoal_metric_gauge_set(m->queued_max, e->svc_queued_max[svc]);
        }
}

/* Gives back R's processing slot; the next waiting request (of either service) takes it. */
static void slot_release(struct shoal_req *r)
{
        struct shoal_engine *e = r->e;
        struct shoal_req *next = NULL;
        pthread_mutex_lock(&e->cap_mu);
        svc_slot_give(e, req_svc(r));
        struct shoal_list *n = e->stopping ? NULL : shoal_list_first(&e->waitq);
        if (n) {
                next = shoal_list_entry(n, struct shoal_req, link);
                shoal_list_del(n);
                e->queued--;
                svc_queue_add(e, req_svc(next), -1);
                svc_slot_take(e, req_svc(next));
        } else {
                e->active--;
        }
        pthread_mutex_unlock(&e->cap_mu);
        if (next)
                shoal_workers_submit(e->disk, &next->work);
}

/* ---- requests ------------------------------------------------------------------------------ */

static void req_release_resources(struct shoal_req *r)
{
        struct shoal_engine *e = r->e;
        if (r->cb_open) {
                shoal_cache_block_close(e->cfg.cache, &r->cb);
                r->cb_open = false;
        }
        if (r->buf) {
                shoal_bufpool_put(e->dio, r->buf);
                r->buf = NULL;
        }
        if (r->hb.ref)
                shoal_reader_release(e->cfg.reader, &r->hb);
        if (r->pipe) {
                shoal_pipes_put(e->pipes, r->pipe);
                r->pipe = NULL;
        }
        shoal_put_free(e->put, r->put);
        r->put = NULL;
}

void shoal_engine_req_free(struct shoal_req *r)
{
        req_release_resources(r);
        if (r->corrupt_slot)
                __atomic_fetch_sub(&r->e->corrupt_active, 1, __ATOMIC_RELAXED);
        if (r->counted)
                slot_release(r);
        free(r);
}

struct shoal_req *shoal_engine_req_new(struct shoal_engine *e, enum shoal_req_via via, size_t size)
{
        struct shoal_req *r = calloc(1, SHOAL_MAX(size, sizeof(*r)));
        if (!r)
                return NULL;
        r->e = e;
        r->via = via;
        shoal_list_init(&r->link);
        r->t_start = shoal_now_ns();
        return r;
}

/* Whether R's connection has closed: its queued work is then dropped before it starts. A close
 * racing with this check only costs one piece of work whose answer is dropped. */
static bool req_orphaned(const struct shoal_req *r)
{
        return r->gone && atomic_load_explicit(r->gone, memory_order_acquire);
}

static void req_refuse(struct shoal_req *r, uint32_t status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void req_refuse(struct shoal_req *r, uint32_t status, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
        va_end(ap);
        r->status = status;
}

static void req_finish(struct shoal_req *r)
{
        r->done(r);
}

/* The block length R claims (the wire decoder checked that the index lies inside the claimed
 * object and the range inside this length). Only ever compared with what the member knows. */
static uint32_t req_claimed_len(const struct shoal_req *r)
{
        return shoal_block_len(r->obj.size, r->e->cfg.vol->block_size, r->index);
}

/* ---- the answer frame ---------------------------------------------------------------------- */

/* The CRCs of R's chunks: from the file's verified header, or computed over the held block. */
static uint32_t answer_crcs(const struct shoal_req *r, uint32_t crcs[SHOAL_MAX_CHUNKS])
{
        uint32_t first = r->off / SHOAL_CHUNK_SIZE;
        uint32_t nc = shoal_chunk_count(r->off + r->len) - first;
        for (uint32_t i = 0; i < nc; i++) {
                if (r->src != SHOAL_SRC_HELD) {
                        crcs[i] = r->cb.crcs[first + i];
                } else {
                        uint32_t coff = (first + i) * SHOAL_CHUNK_SIZE;
                        uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, r->hb.len - coff);
                        crcs[i] = shoal_chunk_crc(&r->hb.id, first + i, r->hb.data + coff, clen);
                }
        }
        return nc;
}

void shoal_engine_answer_build(struct shoal_req *r)
{
        struct shoal_wire_hdr h = {.version = SHOAL_WIRE_VERSION, .id = r->id};
        uint8_t *body = r->out + SHOAL_WIRE_HDR_LEN;
        size_t cap = sizeof(r->out) - SHOAL_WIRE_HDR_LEN;
        int n;
        if (r->type == SHOAL_MSG_PUT_BLOCK && r->status == SHOAL_ST_OK) {
                r->out_len =
                        shoal_wire_frame_encode(r->out, SHOAL_MSG_PUT_RESP, 0, 0, r->id, NULL, 0);
                r->status = SHOAL_ST__MAX; /* no payload follows */
                return;
        }
        if (r->status == SHOAL_ST_OK) {
                uint32_t crcs[SHOAL_MAX_CHUNKS];
                answer_crcs(r, crcs);
                n = shoal_wire_read_resp_encode(body, cap,
                                                r->src == SHOAL_SRC_HELD ? &r->hb.id : &r->cb.id,
                                                r->off, r->len, crcs);
                h.type = SHOAL_MSG_READ_RESP;
                h.payload_len = r->len;
                if (r->via == SHOAL_VIA_RDMA) { /* the payload is RMA-written before the frame */
                        h.flags = SHOAL_WF_RDMA_WRITTEN;
                        h.payload_len = 0;
                }
        } else {
                n = shoal_wire_error_encode(body, cap,
                                            r->reason[0] ? r->reason : shoal_status_str(r->status));
                h.type = SHOAL_MSG_ERROR;
                h.status = r->status;
        }
        if (n < 0) { /* cannot happen with our own sizes; answer with a bare error */
                n = 0;
                h.type = SHOAL_MSG_ERROR;
                h.status = SHOAL_ST_INTERNAL;
                h.payload_len = 0;
        }
        h.body_len = (uint32_t)n;
        shoal_wire_hdr_encode(r->out, &h, body);
        r->out_len = SHOAL_WIRE_HDR_LEN + (size_t)n;
}

void shoal_engine_req_processed(struct shoal_req *r)
{
        shoal_metric_observe(svc_metrics[req_svc(r)].process, shoal_now_ns() - r->t_start);
}

void shoal_engine_req_sent(struct shoal_req *r, uint64_t now)
{
        if (r->type != SHOAL_MSG_READ)
                return; /* control frames (handshake, pong, info) are not requests served */
        shoal_metric_observe(svc_metrics[req_svc(r)].write_body, now - r->t_write);
        shoal_metric_observe(SHOAL_M_remotecache_serve_dur, now - r->t_start);
        if (r->status == SHOAL_ST_OK) {
                shoal_metric_inc(SHOAL_M_remotecache_serve_requests);
                shoal_metric_add(SHOAL_M_remotecache_serve_bytes, r->len);
                shoal_metric_add(r->via == SHOAL_VIA_POOL ? SHOAL_M_remotecache_tcp_serve_bytes
                                                          : SHOAL_M_remotecache_iorpc_serve_bytes,
                                 r->len);
        } else {
                shoal_metric_inc(SHOAL_M_remotecache_serve_errors);
        }
}

/* ---- ownership ----------------------------------------------------------------------------- */

static bool is_owner(struct shoal_engine *e, const struct shoal_block_id *id)
{
        struct shoal_group *g = atomic_load(&e->group);
        if (!g)
                return true;
        struct shoal_group_view *v = shoal_group_view_get(g);
        int o = shoal_group_owner(v, id);
        bool mine = o >= 0 && !strcmp(v->members[o].id, shoal_group_self_id(g));
        shoal_group_view_put(v);
        return mine;
}

static bool put_is_owner(void *arg, const struct shoal_block_id *id)
{
        return is_owner(arg, id);
}

/* Whether this member fills a missed block from the store for a requester: as its owner, or as
 * the next member in the block's order (the requester saw the owner away or could not reach
 * it; the reader asks the owner first) unless a fill of it is under way here already: that one
 * may be waiting for the very member asking now (a cycle would last until the deadlines). */
static bool may_fill(struct shoal_engine *e, const struct shoal_block_id *id)
{
        struct shoal_group *g = atomic_load(&e->group);
        if (!g)
                return true;
        struct shoal_group_view *v = shoal_group_view_get(g);
        int rank = shoal_group_rank(v, id, shoal_group_self_id(g));
        shoal_group_view_put(v);
        return rank == 0 || (rank == 1 && !shoal_reader_filling(e->cfg.reader, id));
}

/* Whether a READ made under view version VV was made under another view than this member's
 * (none of the two special versions: 0, no view; SHOAL_VIEW_COPY_ONLY). Views are hashes, so
 * this says "different", not "older": the requester lists its registry and finds out. */
static bool view_differs(struct shoal_engine *e, uint64_t vv, uint64_t *mine)
{
        struct shoal_group *g = atomic_load(&e->group);
        if (!g || vv == 0 || vv == SHOAL_VIEW_COPY_ONLY)
                return false;
        struct shoal_group_view *v = shoal_group_view_get(g);
        *mine = v->version;
        shoal_group_view_put(v);
        return *mine != vv;
}

/* A READ this member neither has nor fills: a miss, or not its block (saying so when the
 * requester's view differs from this member's: it refreshes at once). */
static void refuse_miss(struct shoal_req *r)
{
        uint64_t mine = 0;
        if (!(r->flags & SHOAL_WF_FILL)) {
                r->status = SHOAL_ST_MISS;
        } else if (view_differs(r->e, r->view_version, &mine)) {
                shoal_metric_inc(SHOAL_M_group_view_differs_answers);
                req_refuse(r, SHOAL_ST_NOT_OWNER,
                           SHOAL_WIRE_VIEW_DIFFERS " (member %016llx, request %016llx)",
                           (unsigned long long)mine, (unsigned long long)r->view_version);
        } else {
                r->status = SHOAL_ST_NOT_OWNER;
        }
        req_finish(r);
}

/* ---- fill, put and corrupt work ------------------------------------------------------------ */

/* Fill worker: the object's size from the store (a stat shared by all who ask, remembered for the
 * version), checked against the claim, then the block through the reader's single-flight fill
 * with this member's own idea of the object [S4]. */
static void fill_work(struct shoal_work *w)
{
        struct shoal_req *r = (struct shoal_req *)w;
        struct shoal_engine *e = r->e;
        if (req_orphaned(r)) {
                req_finish(r);
                return;
        }
        uint64_t size;
        int rc = shoal_store_sizes_get(e->sizes, r->obj.key, r->obj.version, &size);
        if (!rc && size != r->obj.size) {
                req_refuse(r, SHOAL_ST_BAD_REQUEST, "%.60s is %llu bytes, not %llu", r->obj.key,
                           (unsigned long long)size, (unsigned long long)r->obj.size);
                req_finish(r);
                return;
        }
        if (!rc)
                rc = shoal_reader_hold_block(e->cfg.reader, &r->obj, r->index, &r->hb);
        shoal_metric_inc(SHOAL_M_remotecache_serve_miss);
        if (rc) {
                req_refuse(r,
                           rc == -ENOENT   ? SHOAL_ST_NOT_FOUND
                           : rc == -ESTALE ? SHOAL_ST_STALE
                           : rc == -EBUSY  ? SHOAL_ST_BUSY
                                           : SHOAL_ST_STORE_ERROR,
                           "fill %.60s block %u: %s", r->obj.key, r->index, strerror(-rc));
        } else if (e->cfg.cache &&
                   !shoal_cache_open_block_again(e->cfg.cache, &r->hb.id, r->hb.len, &r->cb)) {
                /* The fill put the block into the cache: answer from the file and give the
                 * in-memory block back at once, so slow readers do not pin fill buffers. */
                r->cb_open = true;
                r->src = SHOAL_SRC_FILE;
                shoal_reader_release(e->cfg.reader, &r->hb);
        } else {
                r->src = SHOAL_SRC_HELD; /* not cacheable (full disk, no cache): from memory */
        }
        req_finish(r);
}

/* Fill worker: checks and caches the pushed block (server/server_put.c), then answers. */
static void put_work(struct shoal_work *w)
{
        struct shoal_req *r = (struct shoal_req *)w;
        if (req_orphaned(r)) {
                req_finish(r);
                return;
        }
        r->status = shoal_put_apply(r->e->put, r->put, r->peer);
        if (r->status != SHOAL_ST_OK)
                shoal_strlcpy(r->reason, r->put->why, sizeof(r->reason));
        req_finish(r);
}

/* Disk worker: a requester saw a bad checksum. The member checks its own file against its own
 * header, chunk by chunk into a small buffer of its own (never a pool buffer: a disk worker must
 * not wait), and the cache removes it only if a chunk fails. The notice's claimed length only
 * decides whether the notice is about this file at all. */
static void corrupt_work(struct shoal_req *r, const struct shoal_block_id *id)
{
        struct shoal_engine *e = r->e;
        char *chunk = NULL;
        uint64_t known;
        if (!e->cfg.cache || shoal_cache_open_block(e->cfg.cache, id, 0, &r->cb))
                goto out;
        r->cb_open = true;
        if (r->cb.len != req_claimed_len(r) ||
            (!shoal_store_sizes_peek(e->sizes, r->obj.key, r->obj.version, &known) &&
             known != r->obj.size)) {
                log_ratelimited(SHOAL_LOG_INFO, "server",
                                "corrupt notice for %.60s/%u from %s names another length: ignored",
                                r->obj.key, r->index, r->peer);
                goto out;
        }
        chunk = malloc(SHOAL_CHUNK_SIZE);
        for (uint32_t off = 0; chunk && off < r->cb.len; off += SHOAL_CHUNK_SIZE) {
                uint32_t n = SHOAL_MIN(SHOAL_CHUNK_SIZE, r->cb.len - off);
                int rc = shoal_cache_block_read(e->cfg.cache, &r->cb, off, n, chunk,
                                                SHOAL_CACHE_READ_BUFFERED);
                if (rc == -EBADMSG)
                        log_warn("server", "block %.60s/%u reported corrupt by %s: removed",
                                 r->obj.key, r->index, r->peer);
                if (rc)
                        break;
        }
        free(chunk);
out:
        req_release_resources(r);
        req_finish(r);
}

bool shoal_engine_corrupt_slot(struct shoal_engine *e, struct shoal_req *r)
{
        /* A check reads a whole block: a flood of notices must not take the disk workers from
         * reads. The requester already fell back; a corrupt file is reported again by the next
         * one who reads it. */
        if (__atomic_fetch_add(&e->corrupt_active, 1, __ATOMIC_RELAXED) >= CORRUPT_ACTIVE_MAX) {
                __atomic_fetch_sub(&e->corrupt_active, 1, __ATOMIC_RELAXED);
                log_ratelimited(SHOAL_LOG_INFO, "server",
                                "%u corrupt notices being checked: dropping one from %s",
                                CORRUPT_ACTIVE_MAX, r->peer);
                return false;
        }
        r->corrupt_slot = true;
        return true;
}

/* ---- hits: the cache read by mode ---------------------------------------------------------- */

/* How R's transport reads a hit: the TCP pool by sendfile (or O_DIRECT with --cache-try-dio),
 * IORPC by its mode. */
static int hit_mode(const struct shoal_req *r)
{
        struct shoal_engine *e = r->e;
        if (r->via == SHOAL_VIA_POOL)
                return e->cfg.cache_try_dio ? SHOAL_IORPC_DIO : SHOAL_IORPC_PAGECACHE;
        return e->cfg.iorpc_mode;
}

/* The answer no longer needs R's cache file (its CRCs stay in R->cb): the fds go back. */
static void hit_close_file(struct shoal_req *r)
{
        shoal_cache_block_close(r->e->cfg.cache, &r->cb);
        r->cb_open = false;
}

/* Moves R's range (or as much as a pipe holds) from the page cache into a pool pipe, by
 * reference to the page-cache pages, unverified: the requester checks every chunk against the
 * header's CRCs, which the answer carries. The transport sends the pipe and moves the rest, if
 * any. Returns 0 (R->src is SHOAL_SRC_PIPE), -EAGAIN when no pipe is free (nothing happened), or
 * the cache's error (-EBADMSG, -EIO). */
static int hit_fill_pipe(struct shoal_req *r)
{
        struct shoal_engine *e = r->e;
        struct shoal_pipe *p = shoal_pipes_get(e->pipes, SHOAL_MIN(r->len, SHOAL_CHUNK_SIZE));
        if (!p)
                return -EAGAIN;
        /* A chunk-aligned part that fits: the pipe's capacity rounded down to chunks. */
        uint32_t first =
                (uint32_t)SHOAL_MIN((size_t)r->len, p->cap / SHOAL_CHUNK_SIZE * SHOAL_CHUNK_SIZE);
        int rc = shoal_cache_block_splice(e->cfg.cache, &r->cb, r->off, first, p->wr,
                                          SHOAL_CACHE_READ_BUFFERED);
        if (rc) {
                p->bytes = 1; /* unknown: closed, not reused */
                shoal_pipes_put(e->pipes, p);
                return rc == -EBADMSG || rc == -EIO ? rc : -EAGAIN;
        }
        p->bytes = first;
        r->pipe = p;
        r->pay_piped = first;
        r->src = SHOAL_SRC_PIPE;
        if (first == r->len)
                hit_close_file(r);
        return 0;
}

/* Reads R's range into a dio buffer, unverified (as hit_fill_pipe). Never waits for a buffer:
 * answers waiting for slow readers hold them, and a blocked disk worker would stall every
 * connection. Returns 0 (R->src is SHOAL_SRC_BUF), -EAGAIN without a buffer, or the cache's
 * error. */
static int hit_read_buf(struct shoal_req *r, enum shoal_cache_read_mode how)
{
        struct shoal_engine *e = r->e;
        r->buf = shoal_bufpool_get(e->dio, 0);
        if (!r->buf)
                return -EAGAIN;
        int rc = shoal_cache_block_read_unverified(e->cfg.cache, &r->cb, r->off, r->len, r->buf,
                                                   how);
        if (rc)
                return rc;
        hit_close_file(r);
        r->src = SHOAL_SRC_BUF;
        return 0;
}

/* Disk worker: how R's hit is answered, cheapest first. The requester verifies the chunk CRCs
 * of the file's verified header either way, so the member reads the data unverified and, where
 * it can, without touching it: sendfile from the page cache (pagecache, the pool), a pipe filled
 * from the page cache (splice), by reference to the page-cache pages both. dio reads by O_DIRECT
 * into a dio buffer and sends from it: an O_DIRECT splice into a pipe avoids that copy but pays
 * a page allocation per 4 KiB instead, which cost as much on loopback (docs/benchmarks.md).
 * Without a pipe or a buffer free, sendfile. RDMA answers need a registered buffer
 * (shoal_engine_answer_registered fills one when this could not). Returns false when the read
 * failed (a miss). */
static bool hit_prepare(struct shoal_req *r)
{
        int mode = hit_mode(r), rc = -EAGAIN;
        bool rdma = r->via == SHOAL_VIA_RDMA;
        if (mode == SHOAL_IORPC_SPLICE && !rdma)
                rc = hit_fill_pipe(r);
        else if (mode == SHOAL_IORPC_DIO || rdma)
                rc = hit_read_buf(r, mode == SHOAL_IORPC_DIO ? SHOAL_CACHE_READ_DIRECT
                                                             : SHOAL_CACHE_READ_BUFFERED);
        if (rc == -EAGAIN) {
                r->src = SHOAL_SRC_FILE; /* sendfile */
                rc = 0;
        }
        if (rc)
                return false;
        if (r->src == SHOAL_SRC_FILE) {
                /* reads into a buffer or a pipe counted theirs in the cache module */
                shoal_metric_inc(SHOAL_M_blockcache_hits);
                shoal_metric_add(SHOAL_M_blockcache_hit_bytes, r->len);
        }
        return true;
}

/* Disk worker: R's block is cached as R->cb (open, its length from its own header). Serves it
 * when the claim agrees with what the member knows, else refuses. Returns false when R is to be
 * treated as a miss instead (the file is released): a claim that the member knows to be right
 * while the file holds another length, or one it cannot judge without the store while R may fill
 * — the fill workers then ask the store, and the reader's fill replaces a file the store proves
 * wrong. A requester's claim alone never removes a file. */
static bool hit_work(struct shoal_req *r)
{
        struct shoal_engine *e = r->e;
        uint64_t known;
        bool size_known = !shoal_store_sizes_peek(e->sizes, r->obj.key, r->obj.version, &known);
        if (size_known && known != r->obj.size) {
                req_refuse(r, SHOAL_ST_BAD_REQUEST, "%.60s is %llu bytes, not %llu", r->obj.key,
                           (unsigned long long)known, (unsigned long long)r->obj.size);
                req_release_resources(r);
                req_finish(r);
                return true;
        }
        if (r->cb.len != req_claimed_len(r) || !shoal_range_valid(r->cb.len, r->off, r->len)) {
                /* The claim is right (size known) and the file is not, or nobody knows yet:
                 * either way the file stays unless the store proves it wrong (fill path). */
                req_release_resources(r);
                if (size_known || (r->flags & SHOAL_WF_FILL))
                        return false;
                req_refuse(r, SHOAL_ST_BAD_REQUEST, "block %u of %.60s is %u bytes, not %u",
                           r->index, r->obj.key, r->cb.len, req_claimed_len(r));
                req_finish(r);
                return true;
        }
        if (!hit_prepare(r)) { /* the read failed (the file was removed if corrupt): a miss */
                req_release_resources(r);
                return false;
        }
        req_finish(r);
        return true;
}

/* Disk worker: answer from the cache, or pass a miss to the fill workers. */
static void disk_work(struct shoal_work *w)
{
        struct shoal_req *r = (struct shoal_req *)w;
        struct shoal_engine *e = r->e;
        struct shoal_block_id id;
        /* A CORRUPT notice is checked even when its sender has gone (a requester reports and
         * then drops the connection that gave it a bad answer): the check is for the member's
         * own cache, and corrupt_active bounds it. */
        if (r->type != SHOAL_MSG_CORRUPT && req_orphaned(r)) {
                req_finish(r);
                return;
        }
        shoal_block_id_derive(e->cfg.vol, r->obj.key, r->obj.version, r->index, &id);
        if (r->type == SHOAL_MSG_CORRUPT) {
                corrupt_work(r, &id);
                return;
        }
        if (e->cfg.cache && !shoal_cache_open_block(e->cfg.cache, &id, 0, &r->cb)) {
                r->cb_open = true;
                if (hit_work(r))
                        return;
        }
        /* A miss: only the owner (or the next member in the block's order) fills from the
         * store, so that a member with a stale view does not download blocks another member
         * owns. */
        if (!(r->flags & SHOAL_WF_FILL) || !may_fill(e, &id)) {
                refuse_miss(r);
                return;
        }
        r->work.fn = fill_work;
        shoal_workers_submit(e->fill, &r->work);
}

/* Submitter's thread: answers R's hit at once when nothing in it waits for the disk: a READ over
 * TCP whose answer goes out by reference to the page cache (sendfile, a page-cache splice), from
 * a file whose name and header the kernel has cached (shoal_cache_open_block_nowait). Two thread
 * hand-offs per request (loop, disk worker, loop) cost more than the whole open. Returns true
 * when R was answered (DONE ran, R->done_inline set); false when a disk worker must take it: dio,
 * RDMA, a miss, a CORRUPT notice, a file or header not in the kernel's caches. */
static bool req_try_inline(struct shoal_req *r)
{
        struct shoal_engine *e = r->e;
        int mode = hit_mode(r);
        struct shoal_block_id id;
        if (r->via == SHOAL_VIA_RDMA || r->type != SHOAL_MSG_READ || !e->cfg.cache ||
            (mode != SHOAL_IORPC_PAGECACHE && mode != SHOAL_IORPC_SPLICE))
                return false;
        shoal_block_id_derive(e->cfg.vol, r->obj.key, r->obj.version, r->index, &id);
        if (shoal_cache_open_block_nowait(e->cfg.cache, &id, 0, &r->cb))
                return false;
        r->cb_open = true;
        r->done_inline = true;
        if (hit_work(r))
                return true;
        r->done_inline = false; /* not a plain hit: the worker looks again and decides */
        return false;
}

void shoal_engine_submit(struct shoal_engine *e, struct shoal_req *r)
{
        if (r->type == SHOAL_MSG_PUT_BLOCK) {
                /* May ask the store: a fill worker; the put budget bounds these, not the cap. */
                r->work.fn = put_work;
                shoal_workers_submit(e->fill, &r->work);
                return;
        }
        r->work.fn = disk_work;
        r->counted = true;
        pthread_mutex_lock(&e->cap_mu);
        bool run = e->active < e->cfg.max_inflight;
        if (run) {
                e->active++;
                svc_slot_take(e, req_svc(r));
        } else {
                shoal_list_push_back(&e->waitq, &r->link);
                e->queued++;
                svc_queue_add(e, req_svc(r), 1);
        }
        pthread_mutex_unlock(&e->cap_mu);
        if (run && !req_try_inline(r))
                shoal_workers_submit(e->disk, &r->work);
}

/* ---- decoding ------------------------------------------------------------------------------ */

struct shoal_req *shoal_engine_req_read(struct shoal_engine *e, enum shoal_req_via via, size_t size,
                                        uint8_t type, uint64_t id, uint16_t flags,
                                        const uint8_t *body, size_t body_len, uint32_t *status,
                                        char *why, size_t whylen)
{
        uint64_t t0 = shoal_now_ns();
        struct shoal_wire_read rd;
        int rc = shoal_wire_read_decode(body, body_len, &rd);
        shoal_metric_observe(svc_metrics[via == SHOAL_VIA_POOL ? SVC_M_POOL : SVC_M_IORPC].decode,
                             shoal_now_ns() - t0);
        if (rc) {
                *status = SHOAL_ST_BAD_REQUEST;
                snprintf(why, whylen, "malformed read request");
                return NULL;
        }
        if (rd.block_size != e->cfg.vol->block_size) {
                *status = SHOAL_ST_VOLUME;
                snprintf(why, whylen, "block size %u, this member has %u", rd.block_size,
                         e->cfg.vol->block_size);
                return NULL;
        }
        if (via != SHOAL_VIA_RDMA && (flags & SHOAL_WF_RDMA_TARGET)) {
                *status = SHOAL_ST_BAD_REQUEST;
                snprintf(why, whylen, "RDMA target on a TCP connection");
                return NULL;
        }
        struct shoal_req *r = shoal_engine_req_new(e, via, size);
        if (!r) {
                *status = SHOAL_ST_BUSY;
                snprintf(why, whylen, "out of memory");
                return NULL;
        }
        r->id = id;
        r->type = type;
        r->flags = flags;
        /* A new owner asking for its previous owner's copy: a hit or a miss, never a fill (it
         * would ask the new owner back). */
        if (rd.view_version == SHOAL_VIEW_COPY_ONLY)
                r->flags &= (uint16_t)~SHOAL_WF_FILL;
        r->t_start = t0;
        memcpy(r->obj.key, rd.key, rd.key_len);
        r->obj.key[rd.key_len] = '\0';
        memcpy(r->obj.version, rd.version, rd.version_len);
        r->obj.version[rd.version_len] = '\0';
        r->obj.size = rd.obj_size;
        r->index = rd.block_index;
        r->off = rd.offset;
        r->len = rd.length;
        r->view_version = rd.view_version;
        return r;
}

/* ---- RDMA answers -------------------------------------------------------------------------- */

/* An OK answer not in a registered buffer yet (a cache file, a held block): copied into a dio
 * buffer here, off the progress thread. */
static void answer_to_buffer(struct shoal_req *r)
{
        struct shoal_engine *e = r->e;
        /* RDMA answers hold a buffer only until the write completes, so waiting a little here
         * does not tie the pool to slow readers as on TCP. */
        r->buf = shoal_bufpool_get(e->dio, RDMA_BUF_WAIT_NS);
        if (!r->buf) {
                r->status = SHOAL_ST_BUSY;
        } else if (r->src == SHOAL_SRC_HELD) {
                shoal_engine_answer_build(r); /* CRCs from the held block, before it goes */
                memcpy(r->buf, r->hb.data + r->off, r->len);
                shoal_reader_release(e->cfg.reader, &r->hb);
                r->src = SHOAL_SRC_BUF;
        } else if (shoal_cache_block_read_unverified(e->cfg.cache, &r->cb, r->off, r->len, r->buf,
                                                     e->cfg.iorpc_mode == SHOAL_IORPC_PAGECACHE
                                                             ? SHOAL_CACHE_READ_BUFFERED
                                                             : SHOAL_CACHE_READ_DIRECT)) {
                r->status = SHOAL_ST_INTERNAL;
                snprintf(r->reason, sizeof(r->reason), "cache read of %.60s/%u failed", r->obj.key,
                         r->index);
        } else {
                r->src = SHOAL_SRC_BUF;
        }
}

const char *shoal_engine_answer_registered(struct shoal_req *r)
{
        struct shoal_engine *e = r->e;
        if (r->status == SHOAL_ST_OK && req_orphaned(r)) {
                /* Nobody will read it (the connection only gives the answer back): no copy. */
                req_release_resources(r);
                req_refuse(r, SHOAL_ST_BUSY, "connection closed");
        }
        /* A held block whose memory is registered is written from where it is, held until the
         * answer is freed: one pass over it (the CRCs) instead of two. */
        bool direct = r->status == SHOAL_ST_OK && r->src == SHOAL_SRC_HELD &&
                      atomic_load(&e->held_direct);
        if (direct)
                shoal_engine_answer_build(r);
        else if (r->status == SHOAL_ST_OK && r->src != SHOAL_SRC_BUF)
                answer_to_buffer(r);
        if (!direct && (r->status != SHOAL_ST_OK || r->src != SHOAL_SRC_BUF || !r->out_len))
                shoal_engine_answer_build(r);
        shoal_engine_req_processed(r);
        if (r->status != SHOAL_ST_OK)
                return NULL;
        return direct ? r->hb.data + r->off : r->buf;
}

/* ---- the engine ---------------------------------------------------------------------------- */

struct shoal_engine *shoal_engine_create(const struct shoal_engine_config *cfg)
{
        struct shoal_engine *e = calloc(1, sizeof(*e));
        if (!e)
                return NULL;
        e->cfg = *cfg;
        pthread_mutex_init(&e->cap_mu, NULL);
        shoal_list_init(&e->waitq);
        e->disk = shoal_workers_create(DISK_WORKERS, "disk");
        e->fill = shoal_workers_create(FILL_WORKERS, "fill");
        e->dio = shoal_bufpool_create(cfg->vol->block_size, DIO_BUFFERS);
        e->pipes = shoal_pipes_create(cfg->npipes, SHOAL_MIN(cfg->vol->block_size, PIPE_CAP_MAX));
        e->sizes = shoal_store_sizes_create(shoal_reader_store(cfg->reader), SIZES_MAX);
        struct shoal_put_srv_config pc = {.vol = cfg->vol,
                                          .cache = cfg->cache,
                                          .sizes = e->sizes,
                                          .is_owner = put_is_owner,
                                          .owner_arg = e};
        e->put = e->sizes ? shoal_put_srv_create(&pc) : NULL;
        if (!e->disk || !e->fill || !e->dio || !e->pipes || !e->sizes || !e->put) {
                shoal_engine_destroy(e);
                return NULL;
        }
        return e;
}

void shoal_engine_stop(struct shoal_engine *e)
{
        if (!e)
                return;
        struct shoal_list waiting;
        shoal_list_init(&waiting);
        pthread_mutex_lock(&e->cap_mu);
        e->stopping = true;
        while (!shoal_list_empty(&e->waitq)) {
                struct shoal_list *n = shoal_list_first(&e->waitq);
                shoal_list_del(n);
                shoal_list_push_back(&waiting, n);
        }
        e->queued = 0;
        for (int k = 0; k < SVC_M__COUNT; k++)
                svc_queue_add(e, k, -(int)e->svc_queued[k]);
        pthread_mutex_unlock(&e->cap_mu);
        struct shoal_list *n, *next;
        list_for_each (n, next, &waiting) {
                struct shoal_req *r = shoal_list_entry(n, struct shoal_req, link);
                shoal_list_del(n);
                r->counted = false;
                r->status = SHOAL_ST_BUSY;
                req_finish(r);
        }
        shoal_workers_destroy(e->disk);
        shoal_workers_destroy(e->fill);
        e->disk = e->fill = NULL;
}

void shoal_engine_destroy(struct shoal_engine *e)
{
        if (!e)
                return;
        shoal_engine_stop(e);
        shoal_bufpool_destroy(e->dio);
        shoal_pipes_destroy(e->pipes);
        shoal_put_srv_destroy(e->put);
        shoal_store_sizes_destroy(e->sizes);
        pthread_mutex_destroy(&e->cap_mu);
        free(e);
}

void shoal_engine_set_group(struct shoal_engine *e, struct shoal_group *g)
{
        atomic_store(&e->group, g);
}

void shoal_engine_held_direct(struct shoal_engine *e)
{
        atomic_store(&e->held_direct, true);
}

struct shoal_bufpool *shoal_engine_dio(struct shoal_engine *e)
{
        return e->dio;
}

struct shoal_put_srv *shoal_engine_put(struct shoal_engine *e)
{
        return e->put;
}
