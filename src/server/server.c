/* The member's server: TCP pool and IORPC listeners on event-loop threads.
 *
 * Each loop thread owns its listening sockets (SO_REUSEPORT spreads accepts), its connections and
 * their socket I/O. Blocking work never runs on a loop: opening and reading cache files runs on
 * the "disk" workers, filling a miss from the store on the "fill" workers; both post the finished
 * request back to the connection's loop, which writes the answer. A request is one struct srv_req
 * moving through explicit states; answers leave in completion order.
 *
 * Both services speak the same frames (wire/wire.h) and share one request path. The TCP pool
 * allows one request in flight per connection, IORPC multiplexes up to max_inflight. A cache hit
 * never passes through user memory on TCP and is never checksummed here (the requester verifies
 * every chunk against the CRCs of the file's verified header, which the answer carries): the pool
 * and --iorpc-mode pagecache answer with sendfile(2) from the page cache, dio (and the pool's
 * --cache-try-dio) with an O_DIRECT splice from the disk into a pipe, splice with a page-cache
 * splice into a pipe; the pipe then goes to the socket (hit_prepare). At most max_inflight
 * requests are processed at once in the whole server; the rest wait in a FIFO for a slot [R4].
 *
 * Metrics keep the seeds' meanings [V2]: a request's stages (decode, process, write body) and
 * its slot (inflight, queued) are counted under mount_iorpc_* when it came over IORPC (TCP or
 * RDMA) and under remotecache_pool_* when it came over the TCP pool; the cap is one for both. */
#include "server/server.h"

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/resource.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cache/cache.h"
#include "client/reader.h"
#include "common/bufpool.h"
#include "common/log.h"
#include "common/util.h"
#include "event/loop.h"
#include "group/group.h"
#include "metrics/metrics.h"
#include "wire/handshake.h"
#include "server/pipes.h"
#include "server/server_put.h"
#include "wire/wire.h"
#include "store/sizes.h"

#define MAX_LOOPS           8
#define HANDSHAKE_NS        (3ULL * 1000000000ULL) /* short: an honest handshake is two RTTs */
#define FRAME_STALL_NS      (10ULL * 1000000000ULL)
#define SEND_STALL_NS       (30ULL * 1000000000ULL)
#define MAX_CONNS           10000
#define IORPC_CONN_INFLIGHT 1024 /* advertised: ids a requester may have outstanding */
#define CONN_ACTIVE_MAX     64   /* IORPC requests read and not yet answered, per connection */
#define CONN_CORRUPT_MAX    2    /* CORRUPT notices being checked, per connection */
#define CORRUPT_ACTIVE_MAX  4    /* ... and in the whole server (more are dropped) */
#define SRC_BUCKETS         256
#define READ_BUDGET         32 /* frames handled per connection per loop round */
#define DIO_BUFFERS         64
#define PIPES               64 /* answers in pipes at once (2 fds each), at most */
#define PIPE_CAP_MAX        (8u << 20)
#define IN_MAX              (SHOAL_WIRE_HDR_LEN + 4096)
#define SIZES_MAX           16384 /* object sizes remembered (no expiry: a version's size is fixed) */

struct srv_loop;
struct conn;

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

enum req_src {
        SRC_NONE,
        SRC_FILE, /* sendfile from an open cache block */
        SRC_BUF,  /* from a server buffer (dio / pagecache read) */
        SRC_HELD, /* from a block held in the reader (miss fill) */
        SRC_PIPE, /* from a pipe the disk worker filled (dio, splice), then the file */
};

struct srv_req {
        struct shoal_work work;
        struct shoal_loop_task done;
        struct conn *c;
        struct shoal_server *s;
        uint64_t id;
        uint8_t type;
        uint16_t flags;
        struct shoal_object obj;
        uint32_t index, off, len;
        uint64_t t_start;
        /* result */
        uint32_t status;
        char reason[128];
        enum req_src src;
        struct shoal_cache_block cb;
        bool cb_open;
        char *buf;
        struct shoal_held_block hb;
        struct shoal_put_rx *put; /* PUT_BLOCK: the pushed block (server/server_put.h) */
        /* answer */
        uint8_t out[SHOAL_WIRE_HDR_LEN + 4 * SHOAL_MAX_CHUNKS + 64];
        size_t out_len, out_sent;
        uint64_t pay_sent;
        struct shoal_pipe *pipe; /* SRC_PIPE: the payload, or its first part */
        uint64_t pay_piped;      /* SRC_PIPE: bytes moved from the file into the pipe */
        uint64_t t_write;
        bool counted;      /* holds a server-wide processing slot */
        bool corrupt_slot; /* counted in corrupt_active */
        bool on_loop;      /* being answered on its loop, without a worker (req_try_on_loop) */
        int svc;           /* SVC_M_POOL or SVC_M_IORPC (RDMA requests are IORPC) */
        struct srv_req *next;
        /* RDMA requests (c == NULL): answered through this callback instead of a connection */
        shoal_server_answer_fn ext_fn;
        void *ext_arg;
        const _Atomic bool *ext_gone; /* the RDMA connection closed (NULL: never) */
        struct shoal_server_answer ans;
};

struct conn {
        struct shoal_loop_io io;
        struct srv_loop *lp;
        int service;
        char peer[64];
        enum {
                C_HELLO,
                C_AUTH,
                C_READY
        } state;
        bool closed;
        bool closing;       /* conn_close_later: closed once the loop's batch of events is done */
        bool gone;          /* closed, for worker threads (atomic) */
        int refs;           /* the loop's own reference + one per request outside the loop */
        struct shoal_hs hs; /* the handshake, until state is C_READY */
        uint8_t in[IN_MAX];
        size_t in_len;
        uint64_t frame_start; /* monotonic time the current partial frame began, 0 = none */
        uint64_t deadline;    /* handshake deadline */
        unsigned inflight;    /* answers owed (requests and control frames): ids[0..inflight) */
        unsigned nreq;        /* READ requests among them: bounded by conn_max_inflight */
        unsigned ncorrupt;    /* CORRUPT notices being checked (no answer) */
        uint64_t *ids;        /* in-flight ids, for the duplicate check */
        struct srv_req *sendq, *sendq_tail; /* answers ready, in completion order */
        uint64_t last_progress;
        struct src_count *preauth;      /* not authenticated yet: its source's count */
        struct conn *pa_prev, *pa_next; /* the loop's unauthenticated, oldest first */
        struct shoal_loop_task close_task;
        struct shoal_put_rx *put; /* a PUT_BLOCK whose payload is being received */
        unsigned nput;            /* PUT_BLOCKs received or being processed, not yet answered */
        uint64_t put_id;          /* the id of C->put */
        struct conn *prev, *next;
};

struct srv_listener {
        struct shoal_loop_io io;
        struct srv_loop *lp;
        int service;
};

struct srv_loop {
        struct shoal_server *s;
        struct shoal_loop *loop;
        pthread_t thread;
        struct srv_listener lis[2]; /* pool, iorpc */
        bool accept_paused;
        uint64_t accept_resume;
        struct conn *conns;
        struct conn *pa_head, *pa_tail; /* unauthenticated connections, oldest first */
        unsigned npreauth;
        struct src_count *src[SRC_BUCKETS]; /* unauthenticated connections per source */
};

/* Unauthenticated connections from one source address, on one loop. */
struct src_count {
        struct src_count *next;
        uint32_t ip;
        unsigned n;
};

struct shoal_server {
        struct shoal_server_config cfg;
        struct shoal_hs_key key; /* from cfg.secret; cfg.secret itself is not kept */
        char member_id[SHOAL_WIRE_MEMBER_ID_MAX + 1];
        bool stopping;
        struct srv_loop loops[MAX_LOOPS];
        unsigned nloops;
        struct shoal_workers *disk, *fill;
        struct shoal_bufpool *dio;
        struct shoal_pipes *pipes;       /* zero-copy answers (dio, splice) */
        struct shoal_store_sizes *sizes; /* object sizes the member learned itself [S4] */
        struct shoal_put_srv *put;       /* write-through: pushed blocks [W3] */
        char tcp_addr[64], iorpc_addr[64];
        pthread_mutex_t info_mu; /* the RDMA addresses, set after the loops started */
        char rdma_addr[4][64];
        unsigned n_rdma;
        _Atomic bool rdma_held_direct; /* the reader's buffers are registered for RDMA writes */
        struct shoal_group *_Atomic group;
        pthread_mutex_t cap_mu;  /* guards the slot counts and the wait queue */
        unsigned active, queued; /* both services: the cap applies to their sum */
        unsigned svc_active[SVC_M__COUNT], svc_active_max[SVC_M__COUNT];
        unsigned svc_queued[SVC_M__COUNT], svc_queued_max[SVC_M__COUNT];
        struct srv_req *waitq, *waitq_tail;
        unsigned nconns;
        /* Admission [S2], derived from RLIMIT_NOFILE at start (limits_derive). */
        unsigned conn_cap;             /* connections */
        unsigned npipes;               /* the pipe pool's bound, from the fds (limits_derive) */
        unsigned loop_preauth_cap;     /* ... not yet authenticated, on each loop */
        unsigned loop_preauth_per_src; /* ... from one source address, on each loop */
        unsigned corrupt_active;       /* atomic: CORRUPT notices being checked */
        bool iorpc_on;
        int iorpc_mode; /* effective mode (splice may have fallen back to dio) */
        long pipe_max;  /* fs.pipe-max-size */
};

static void conn_close(struct conn *c);
static void conn_kick_write(struct conn *c);
static void conn_update_events(struct conn *c);
static void req_dispatch(struct srv_req *r);
static void preauth_leave(struct conn *c);

/* ---- requests ---------------------------------------------------------------------------- */

static void conn_put(struct conn *c)
{
        if (--c->refs == 0) {
                free(c->ids);
                free(c);
        }
}

static void req_release_resources(struct srv_req *r)
{
        if (r->cb_open) {
                shoal_cache_block_close(r->s->cfg.cache, &r->cb);
                r->cb_open = false;
        }
        if (r->buf) {
                shoal_bufpool_put(r->s->dio, r->buf);
                r->buf = NULL;
        }
        if (r->hb.ref)
                shoal_reader_release(r->s->cfg.reader, &r->hb);
        if (r->pipe) {
                shoal_pipes_put(r->s->pipes, r->pipe);
                r->pipe = NULL;
        }
        shoal_put_free(r->s->put, r->put);
        r->put = NULL;
}

/* Slot bookkeeping of one service's gauges; under cap_mu. */
static void svc_slot_take(struct shoal_server *s, int svc)
{
        const struct svc_metrics *m = &svc_metrics[svc];
        shoal_metric_gauge_add(m->inflight, 1);
        if (++s->svc_active[svc] > s->svc_active_max[svc]) {
                s->svc_active_max[svc] = s->svc_active[svc];
                shoal_metric_gauge_set(m->inflight_max, s->svc_active_max[svc]);
        }
}

static void svc_slot_give(struct shoal_server *s, int svc)
{
        s->svc_active[svc]--;
        shoal_metric_gauge_add(svc_metrics[svc].inflight, -1);
}

static void svc_queue_add(struct shoal_server *s, int svc, int delta)
{
        const struct svc_metrics *m = &svc_metrics[svc];
        s->svc_queued[svc] = (unsigned)((int)s->svc_queued[svc] + delta);
        shoal_metric_gauge_add(m->queued, delta);
        if (s->svc_queued[svc] > s->svc_queued_max[svc]) {
                s->svc_queued_max[svc] = s->svc_queued[svc];
                shoal_metric_gauge_set(m->queued_max, s->svc_queued_max[svc]);
        }
}

/* Gives back R's processing slot; the next waiting request (of either service) takes it. */
static void slot_release(struct srv_req *r)
{
        struct shoal_server *s = r->s;
        pthread_mutex_lock(&s->cap_mu);
        svc_slot_give(s, r->svc);
        struct srv_req *next = s->stopping ? NULL : s->waitq;
        if (next) {
                s->waitq = next->next;
                if (!s->waitq)
                        s->waitq_tail = NULL;
                s->queued--;
                svc_queue_add(s, next->svc, -1);
                svc_slot_take(s, next->svc);
        } else {
                s->active--;
        }
        pthread_mutex_unlock(&s->cap_mu);
        if (next)
                shoal_workers_submit(s->disk, &next->work);
}

static void req_free(struct srv_req *r)
{
        req_release_resources(r);
        if (r->corrupt_slot)
                __atomic_fetch_sub(&r->s->corrupt_active, 1, __ATOMIC_RELAXED);
        if (r->counted)
                slot_release(r);
        free(r);
}

static void conn_forget_id(struct conn *c, uint64_t id, bool is_req)
{
        for (unsigned i = 0; i < c->inflight; i++) {
                if (c->ids[i] == id) {
                        c->ids[i] = c->ids[c->inflight - 1];
                        c->inflight--;
                        break;
                }
        }
        if (is_req)
                c->nreq--;
}

/* Builds the answer frame of R into R->out. */
static void req_build_answer(struct srv_req *r)
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
                uint32_t first = r->off / SHOAL_CHUNK_SIZE;
                uint32_t nc = shoal_chunk_count(r->off + r->len) - first;
                for (uint32_t i = 0; i < nc; i++) {
                        if (r->src != SRC_HELD) {
                                crcs[i] = r->cb.crcs[first + i];
                        } else {
                                uint32_t coff = (first + i) * SHOAL_CHUNK_SIZE;
                                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, r->hb.len - coff);
                                crcs[i] = shoal_chunk_crc(&r->hb.id, first + i, r->hb.data + coff,
                                                          clen);
                        }
                }
                n = shoal_wire_read_resp_encode(body, cap,
                                                r->src == SRC_HELD ? &r->hb.id : &r->cb.id, r->off,
                                                r->len, crcs);
                h.type = SHOAL_MSG_READ_RESP;
                h.payload_len = r->len;
                if (!r->c) { /* RDMA: the payload is RMA-written before this frame is sent */
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

/* Loop thread: R's answer joins its connection's queue (answers leave in completion order). */
static void req_queue_answer(struct srv_req *r)
{
        struct conn *c = r->c;
        req_build_answer(r);
        shoal_metric_observe(svc_metrics[r->svc].process, shoal_now_ns() - r->t_start);
        r->next = NULL;
        if (c->sendq_tail)
                c->sendq_tail->next = r;
        else
                c->sendq = r;
        c->sendq_tail = r;
}

/* Loop thread: a request came back from the workers. */
static void req_done_on_loop(void *arg)
{
        struct srv_req *r = arg;
        struct conn *c = r->c;
        if (c->closed) {
                conn_put(c);
                req_free(r);
                return;
        }
        conn_put(c); /* the loop's own reference keeps it now */
        if (r->type == SHOAL_MSG_PUT_BLOCK)
                c->nput--;
        if (r->type == SHOAL_MSG_CORRUPT) {
                c->ncorrupt--;
                req_free(r);
                conn_update_events(c);
                return;
        }
        req_queue_answer(r);
        conn_kick_write(c);
}

static void ext_finish(struct srv_req *r);

static void req_finish(struct srv_req *r)
{
        if (!r->c) {
                ext_finish(r);
        } else if (r->on_loop) {
                /* Answered inside its connection's read handler, which sends after reading. */
                conn_put(r->c);
                req_queue_answer(r);
        } else {
                shoal_loop_post(r->c->lp->loop, &r->done);
        }
}

/* Whether R's connection has closed: its queued work is then dropped before it starts. Read on
 * worker threads, so the flag is atomic; a close racing with this check only costs one piece of
 * work whose answer is dropped on the loop. */
static bool req_orphaned(const struct srv_req *r)
{
        if (!r->c)
                return r->ext_gone && atomic_load_explicit(r->ext_gone, memory_order_acquire);
        return __atomic_load_n(&r->c->gone, __ATOMIC_ACQUIRE);
}

static void req_refuse(struct srv_req *r, uint32_t status, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
static void req_refuse(struct srv_req *r, uint32_t status, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(r->reason, sizeof(r->reason), fmt, ap);
        va_end(ap);
        r->status = status;
}

/* The block length R claims (the wire decoder checked that the index lies inside the claimed
 * object and the range inside this length). Only ever compared with what the member knows. */
static uint32_t req_claimed_len(const struct srv_req *r)
{
        return shoal_block_len(r->obj.size, r->s->cfg.vol->block_size, r->index);
}

/* Fill worker: the object's size from the store (a stat shared by all who ask, remembered for the
 * version), checked against the claim, then the block through the reader's single-flight fill
 * with this member's own idea of the object [S4]. */
static void fill_work(struct shoal_work *w)
{
        struct srv_req *r = (struct srv_req *)w;
        struct shoal_server *s = r->s;
        if (req_orphaned(r)) {
                req_finish(r);
                return;
        }
        uint64_t size;
        int rc = shoal_store_sizes_get(s->sizes, r->obj.key, r->obj.version, &size);
        if (!rc && size != r->obj.size) {
                req_refuse(r, SHOAL_ST_BAD_REQUEST, "%.60s is %llu bytes, not %llu", r->obj.key,
                           (unsigned long long)size, (unsigned long long)r->obj.size);
                req_finish(r);
                return;
        }
        if (!rc)
                rc = shoal_reader_hold_block(s->cfg.reader, &r->obj, r->index, &r->hb);
        shoal_metric_inc(SHOAL_M_remotecache_serve_miss);
        if (rc) {
                req_refuse(r,
                           rc == -ENOENT   ? SHOAL_ST_NOT_FOUND
                           : rc == -ESTALE ? SHOAL_ST_STALE
                           : rc == -EBUSY  ? SHOAL_ST_BUSY
                                           : SHOAL_ST_STORE_ERROR,
                           "fill %.60s block %u: %s", r->obj.key, r->index, strerror(-rc));
        } else if (s->cfg.cache &&
                   !shoal_cache_open_block_again(s->cfg.cache, &r->hb.id, r->hb.len, &r->cb)) {
                /* The fill put the block into the cache: answer from the file and give the
                 * in-memory block back at once, so slow readers do not pin fill buffers. */
                r->cb_open = true;
                r->src = SRC_FILE;
                shoal_reader_release(s->cfg.reader, &r->hb);
        } else {
                r->src = SRC_HELD; /* not cacheable (full disk, no cache): send from memory */
        }
        req_finish(r);
}

static bool is_owner(struct shoal_server *s, const struct shoal_block_id *id)
{
        struct shoal_group *g = atomic_load(&s->group);
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
static bool may_fill(struct shoal_server *s, const struct shoal_block_id *id)
{
        struct shoal_group *g = atomic_load(&s->group);
        if (!g)
                return true;
        struct shoal_group_view *v = shoal_group_view_get(g);
        int rank = shoal_group_rank(v, id, shoal_group_self_id(g));
        shoal_group_view_put(v);
        return rank == 0 || (rank == 1 && !shoal_reader_filling(s->cfg.reader, id));
}

/* Disk worker: a requester saw a bad checksum. The member checks its own file against its own
 * header, chunk by chunk into a small buffer of its own (never a pool buffer: a disk worker must
 * not wait), and the cache removes it only if a chunk fails. The notice's claimed length only
 * decides whether the notice is about this file at all. */
static void corrupt_work(struct srv_req *r, const struct shoal_block_id *id)
{
        struct shoal_server *s = r->s;
        char *chunk = NULL;
        uint64_t known;
        if (!s->cfg.cache || shoal_cache_open_block(s->cfg.cache, id, 0, &r->cb))
                goto out;
        r->cb_open = true;
        if (r->cb.len != req_claimed_len(r) ||
            (!shoal_store_sizes_peek(s->sizes, r->obj.key, r->obj.version, &known) &&
             known != r->obj.size)) {
                log_ratelimited(SHOAL_LOG_INFO, "server",
                                "corrupt notice for %.60s/%u from %s names another length: ignored",
                                r->obj.key, r->index, r->c ? r->c->peer : "rdma");
                goto out;
        }
        chunk = malloc(SHOAL_CHUNK_SIZE);
        for (uint32_t off = 0; chunk && off < r->cb.len; off += SHOAL_CHUNK_SIZE) {
                uint32_t n = SHOAL_MIN(SHOAL_CHUNK_SIZE, r->cb.len - off);
                int rc = shoal_cache_block_read(s->cfg.cache, &r->cb, off, n, chunk,
                                                SHOAL_CACHE_READ_BUFFERED);
                if (rc == -EBADMSG)
                        log_warn("server", "block %.60s/%u reported corrupt by %s: removed",
                                 r->obj.key, r->index, r->c ? r->c->peer : "rdma");
                if (rc)
                        break;
        }
        free(chunk);
out:
        req_release_resources(r);
        req_finish(r);
}

/* How R's service reads a hit: the TCP pool by sendfile (or O_DIRECT with --cache-try-dio),
 * IORPC by its mode. */
static int hit_mode(const struct srv_req *r)
{
        struct shoal_server *s = r->s;
        if (r->c && r->c->service == SHOAL_SERVICE_POOL)
                return s->cfg.cache_try_dio ? SHOAL_IORPC_DIO : SHOAL_IORPC_PAGECACHE;
        return s->iorpc_mode;
}

/* The answer no longer needs R's cache file (its CRCs stay in R->cb): the fds go back. */
static void hit_close_file(struct srv_req *r)
{
        shoal_cache_block_close(r->s->cfg.cache, &r->cb);
        r->cb_open = false;
}

/* Moves R's range (or as much as a pipe holds) from the page cache into a pool pipe, by
 * reference to the page-cache pages, unverified: the requester checks every chunk against the
 * header's CRCs, which the answer carries. The loop sends the pipe and moves the rest, if any.
 * Returns 0 (R->src is SRC_PIPE), -EAGAIN when no pipe is free (nothing happened), or the cache's
 * error (-EBADMSG, -EIO). */
static int hit_fill_pipe(struct srv_req *r)
{
        struct shoal_server *s = r->s;
        struct shoal_pipe *p = shoal_pipes_get(s->pipes, SHOAL_MIN(r->len, SHOAL_CHUNK_SIZE));
        if (!p)
                return -EAGAIN;
        /* A chunk-aligned part that fits: the pipe's capacity rounded down to chunks. */
        uint32_t first =
                (uint32_t)SHOAL_MIN((size_t)r->len, p->cap / SHOAL_CHUNK_SIZE * SHOAL_CHUNK_SIZE);
        int rc = shoal_cache_block_splice(s->cfg.cache, &r->cb, r->off, first, p->wr,
                                          SHOAL_CACHE_READ_BUFFERED);
        if (rc) {
                p->bytes = 1; /* unknown: closed, not reused */
                shoal_pipes_put(s->pipes, p);
                return rc == -EBADMSG || rc == -EIO ? rc : -EAGAIN;
        }
        p->bytes = first;
        r->pipe = p;
        r->pay_piped = first;
        r->src = SRC_PIPE;
        if (first == r->len)
                hit_close_file(r);
        return 0;
}

/* Reads R's range into a dio buffer, unverified (as hit_fill_pipe). Never waits for a buffer:
 * answers waiting for slow readers hold them, and a blocked disk worker would stall every
 * connection. Returns 0 (R->src is SRC_BUF), -EAGAIN without a buffer, or the cache's error. */
static int hit_read_buf(struct srv_req *r, enum shoal_cache_read_mode how)
{
        struct shoal_server *s = r->s;
        r->buf = shoal_bufpool_get(s->dio, 0);
        if (!r->buf)
                return -EAGAIN;
        int rc = shoal_cache_block_read_unverified(s->cfg.cache, &r->cb, r->off, r->len, r->buf,
                                                   how);
        if (rc)
                return rc;
        hit_close_file(r);
        r->src = SRC_BUF;
        return 0;
}

/* Disk worker: how R's hit is answered, cheapest first. The requester verifies the chunk CRCs
 * of the file's verified header either way, so the member reads the data unverified and, where
 * it can, without touching it: sendfile from the page cache (pagecache, the pool), a pipe filled
 * from the page cache (splice), by reference to the page-cache pages both. dio reads by O_DIRECT
 * into a dio buffer and sends from it: an O_DIRECT splice into a pipe avoids that copy but pays
 * a page allocation per 4 KiB instead, which cost as much on loopback (docs/benchmarks.md).
 * Without a pipe or a buffer free, sendfile. RDMA answers need a registered buffer (ext_finish
 * fills one when this could not). Returns false when the read failed (a miss). */
static bool hit_prepare(struct srv_req *r)
{
        int mode = hit_mode(r), rc = -EAGAIN;
        if (mode == SHOAL_IORPC_SPLICE && r->c)
                rc = hit_fill_pipe(r);
        else if (mode == SHOAL_IORPC_DIO || !r->c)
                rc = hit_read_buf(r, mode == SHOAL_IORPC_DIO ? SHOAL_CACHE_READ_DIRECT
                                                             : SHOAL_CACHE_READ_BUFFERED);
        if (rc == -EAGAIN) {
                r->src = SRC_FILE; /* sendfile */
                rc = 0;
        }
        if (rc)
                return false;
        if (r->src == SRC_FILE) {
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
static bool hit_work(struct srv_req *r)
{
        struct shoal_server *s = r->s;
        uint64_t known;
        bool size_known = !shoal_store_sizes_peek(s->sizes, r->obj.key, r->obj.version, &known);
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
        struct srv_req *r = (struct srv_req *)w;
        struct shoal_server *s = r->s;
        struct shoal_block_id id;
        /* A CORRUPT notice is checked even when its sender has gone (a requester reports and
         * then drops the connection that gave it a bad answer): the check is for the member's
         * own cache, and corrupt_active bounds it. */
        if (r->type != SHOAL_MSG_CORRUPT && req_orphaned(r)) {
                req_finish(r);
                return;
        }
        shoal_block_id_derive(s->cfg.vol, r->obj.key, r->obj.version, r->index, &id);
        if (r->type == SHOAL_MSG_CORRUPT) {
                corrupt_work(r, &id);
                return;
        }
        if (s->cfg.cache && !shoal_cache_open_block(s->cfg.cache, &id, 0, &r->cb)) {
                r->cb_open = true;
                if (hit_work(r))
                        return;
        }
        /* A miss: only the owner (or the next member in the block's order) fills from the
         * store, so that a member with a stale view does not download blocks another member
         * owns. */
        if (!(r->flags & SHOAL_WF_FILL) || !may_fill(s, &id)) {
                r->status = (r->flags & SHOAL_WF_FILL) ? SHOAL_ST_NOT_OWNER : SHOAL_ST_MISS;
                req_finish(r);
                return;
        }
        r->work.fn = fill_work;
        shoal_workers_submit(s->fill, &r->work);
}

/* Loop thread: answers R's hit on the loop when nothing in it waits for the disk: a READ over TCP
 * whose answer goes out by reference to the page cache (sendfile, a page-cache splice), from a
 * file whose name and header the kernel has cached (shoal_cache_open_block_nowait). Two thread
 * hand-offs per request (loop, disk worker, loop) cost more than the whole open. Returns true
 * when R was answered (queued on its connection); false when a disk worker must take it: dio,
 * RDMA, a miss, a CORRUPT notice, a file or header not in the kernel's caches. */
static bool req_try_on_loop(struct srv_req *r)
{
        struct shoal_server *s = r->s;
        int mode = hit_mode(r);
        struct shoal_block_id id;
        if (!r->c || r->type != SHOAL_MSG_READ || !s->cfg.cache ||
            (mode != SHOAL_IORPC_PAGECACHE && mode != SHOAL_IORPC_SPLICE))
                return false;
        shoal_block_id_derive(s->cfg.vol, r->obj.key, r->obj.version, r->index, &id);
        if (shoal_cache_open_block_nowait(s->cfg.cache, &id, 0, &r->cb))
                return false;
        r->cb_open = true;
        r->on_loop = true;
        if (hit_work(r))
                return true;
        r->on_loop = false; /* not a plain hit: the worker looks again and decides */
        return false;
}

/* Loop thread: admit R under the server-wide processing cap, or queue it [R4]. */
static void req_dispatch(struct srv_req *r)
{
        struct shoal_server *s = r->s;
        if (r->c)
                r->c->refs++;
        r->work.fn = disk_work;
        r->counted = true;
        pthread_mutex_lock(&s->cap_mu);
        bool run = s->active < s->cfg.max_inflight;
        if (run) {
                s->active++;
                svc_slot_take(s, r->svc);
        } else {
                r->next = NULL;
                if (s->waitq_tail)
                        s->waitq_tail->next = r;
                else
                        s->waitq = r;
                s->waitq_tail = r;
                s->queued++;
                svc_queue_add(s, r->svc, 1);
        }
        pthread_mutex_unlock(&s->cap_mu);
        if (run && !req_try_on_loop(r))
                shoal_workers_submit(s->disk, &r->work);
}

/* ---- writing ------------------------------------------------------------------------------ */

/* SRC_PIPE: moves pipe bytes into the socket; when the pipe is empty and the answer is longer
 * than a pipe (splice mode, page cache only), first refills it from the cache file. Returns bytes
 * sent to the socket, -1 with errno (EAGAIN: wait for EPOLLOUT), or -2 when the connection was
 * closed. */
static ssize_t pipe_send(struct conn *c, struct srv_req *r, size_t left)
{
        struct shoal_pipe *p = r->pipe;
        uint64_t unpiped = r->len - r->pay_piped;
        if (!p->bytes && unpiped) {
                loff_t off = (loff_t)(r->cb.data_off + r->off + r->pay_piped);
                ssize_t n = splice(r->cb.fd, &off, p->wr, NULL, (size_t)SHOAL_MIN(unpiped, p->cap),
                                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n <= 0) {
                        log_warn("server", "splice from the cache file of %s/%u failed: %s",
                                 r->obj.key, r->index, n == 0 ? "file truncated" : strerror(errno));
                        conn_close(c);
                        return -2;
                }
                p->bytes += (size_t)n;
                r->pay_piped += (uint64_t)n;
        }
        ssize_t n =
                splice(p->rd, NULL, c->io.fd, NULL, SHOAL_MIN(p->bytes, left),
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK | (left > p->bytes ? SPLICE_F_MORE : 0));
        if (n > 0)
                p->bytes -= (size_t)n;
        return n;
}

/* A send, sendfile or splice returned -1: wait for EPOLLOUT when the socket is only full, else
 * the connection is done. Returns what conn_write returns. */
static bool send_failed(struct conn *c)
{
        if (errno == EAGAIN || errno == EINTR)
                return true;
        conn_close(c);
        return false;
}

/* A memory answer (a dio buffer, a held block): what is left of its header and payload in one
 * sendmsg. Returns what sendmsg returns. */
static ssize_t send_mem(struct conn *c, const struct srv_req *r)
{
        const char *base = r->src == SRC_BUF ? r->buf : r->hb.data + r->off;
        struct iovec iov[2];
        int n = 0;
        if (r->out_sent < r->out_len)
                iov[n++] = (struct iovec){(void *)(r->out + r->out_sent), r->out_len - r->out_sent};
        iov[n++] = (struct iovec){(void *)(base + r->pay_sent), (size_t)(r->len - r->pay_sent)};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        return sendmsg(c->io.fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* SRC_FILE: sendfile from the cache file. Returns bytes sent, -1 with errno, or -2 when C was
 * closed (the file was truncated under us: the requester would wait for bytes that never
 * come). */
static ssize_t send_file(struct conn *c, const struct srv_req *r)
{
        off_t off = (off_t)(r->cb.data_off + r->off + r->pay_sent);
        ssize_t n = sendfile(c->io.fd, r->cb.fd, &off, (size_t)(r->len - r->pay_sent));
        if (n == 0) {
                log_warn("server", "cache file of %s/%u truncated while sending to %s", r->obj.key,
                         r->index, c->peer);
                conn_close(c);
                return -2;
        }
        return n;
}

/* Whether all of R's frame (header and body, then its payload on success) has gone. */
static bool answer_sent(const struct srv_req *r)
{
        uint64_t pay = r->status == SHOAL_ST_OK ? r->len : 0;
        return r->out_sent == r->out_len && r->pay_sent >= pay;
}

/* Sends the next part of R: the header (corked with MSG_MORE before a payload), then the payload
 * by its source; a memory answer both at once. Returns bytes sent, -1 with errno, or -2 when C
 * was closed. */
static ssize_t answer_send(struct conn *c, struct srv_req *r)
{
        bool ok = r->status == SHOAL_ST_OK;
        if (ok && (r->src == SRC_BUF || r->src == SRC_HELD))
                return send_mem(c, r);
        if (r->out_sent < r->out_len)
                return send(c->io.fd, r->out + r->out_sent, r->out_len - r->out_sent,
                            MSG_NOSIGNAL | MSG_DONTWAIT | (ok ? MSG_MORE : 0));
        if (r->src == SRC_PIPE)
                return pipe_send(c, r, (size_t)(r->len - r->pay_sent));
        return send_file(c, r);
}

/* N bytes of R went: the header's first, then the payload's. */
static void answer_advance(struct srv_req *r, size_t n)
{
        size_t h = SHOAL_MIN(n, r->out_len - r->out_sent);
        r->out_sent += h;
        r->pay_sent += n - h;
}

/* R, first in C's queue, has gone: counted, forgotten, freed. */
static void answer_done(struct conn *c, struct srv_req *r)
{
        c->sendq = r->next;
        if (!c->sendq)
                c->sendq_tail = NULL;
        uint64_t now = shoal_now_ns();
        if (r->type == SHOAL_MSG_READ) {
                /* Control frames (handshake, pong, info) are not requests served. */
                shoal_metric_observe(svc_metrics[r->svc].write_body, now - r->t_write);
                shoal_metric_observe(SHOAL_M_remotecache_serve_dur, now - r->t_start);
                if (r->status == SHOAL_ST_OK) {
                        shoal_metric_inc(SHOAL_M_remotecache_serve_requests);
                        shoal_metric_add(SHOAL_M_remotecache_serve_bytes, r->len);
                        shoal_metric_add(c->service == SHOAL_SERVICE_POOL
                                                 ? SHOAL_M_remotecache_tcp_serve_bytes
                                                 : SHOAL_M_remotecache_iorpc_serve_bytes,
                                         r->len);
                } else {
                        shoal_metric_inc(SHOAL_M_remotecache_serve_errors);
                }
        }
        conn_forget_id(c, r->id, r->type == SHOAL_MSG_READ);
        req_free(r);
}

/* Sends as much of the queued answers as the socket takes. Returns false when C was closed. */
static bool conn_write(struct conn *c)
{
        while (c->sendq) {
                struct srv_req *r = c->sendq;
                if (!r->t_write)
                        r->t_write = shoal_now_ns();
                if (!answer_sent(r)) {
                        ssize_t n = answer_send(c, r);
                        if (n == -2)
                                return false;
                        if (n < 0)
                                return send_failed(c);
                        answer_advance(r, (size_t)n);
                        c->last_progress = shoal_now_ns();
                        continue;
                }
                answer_done(c, r);
        }
        return true;
}

static unsigned conn_max_inflight(const struct conn *c)
{
        return c->service == SHOAL_SERVICE_POOL ? 1 : IORPC_CONN_INFLIGHT;
}

/* Requests read from the connection and not yet fully answered. A request holds its answer (a
 * cache-file fd, a buffer) until the peer has read it, so this also bounds what a peer that
 * never reads can hold; the peer may have more outstanding (conn_max_inflight), which wait in
 * the socket buffers. */
static unsigned conn_active_max(const struct conn *c)
{
        return c->service == SHOAL_SERVICE_POOL ? 1 : CONN_ACTIVE_MAX;
}

/* Stops reading while the connection is at its limits: the peer's excess waits in the socket
 * buffers (backpressure, not memory, and not a refusal). */
static bool conn_can_read(const struct conn *c)
{
        if (c->put)
                return true; /* a payload is half read: the stream must move on */
        return c->nreq < conn_active_max(c) && c->inflight < conn_active_max(c) + 8 &&
               c->ncorrupt < CONN_CORRUPT_MAX && c->nput < SHOAL_PUT_CONN_MAX;
}

static void conn_update_events(struct conn *c)
{
        if (c->closed)
                return;
        /* RDHUP always: a peer that closed must be noticed even while its requests are not
         * being read, so that its queued work is dropped before it starts. */
        uint32_t ev = EPOLLRDHUP | (conn_can_read(c) ? EPOLLIN : 0);
        if (c->sendq)
                ev |= EPOLLOUT;
        shoal_loop_mod(c->lp->loop, &c->io, ev);
}

static void conn_kick_write(struct conn *c)
{
        if (conn_write(c))
                conn_update_events(c);
}

/* Queues a small control frame (handshake, error, pong) as a pseudo-request. */
static bool conn_send_ctrl(struct conn *c, uint8_t type, uint16_t flags, uint32_t status,
                           uint64_t id, const uint8_t *body, size_t body_len)
{
        struct srv_req *r = calloc(1, sizeof(*r));
        if (!r)
                return false;
        r->s = c->lp->s;
        r->c = c;
        r->svc = c->service == SHOAL_SERVICE_POOL ? SVC_M_POOL : SVC_M_IORPC;
        r->id = id;
        r->type = type;
        r->status = SHOAL_ST__MAX; /* not OK: no payload */
        r->out_len = shoal_wire_frame_encode(r->out, type, flags, status, id, body, body_len);
        r->t_start = shoal_now_ns();
        r->next = NULL;
        if (c->sendq_tail)
                c->sendq_tail->next = r;
        else
                c->sendq = r;
        c->sendq_tail = r;
        c->ids[c->inflight++] = id; /* conn_write forgets it when sent */
        return true;
}

static void conn_send_error(struct conn *c, uint64_t id, uint32_t status, const char *reason)
{
        uint8_t body[256];
        int n = shoal_wire_error_encode(body, sizeof(body), reason);
        conn_send_ctrl(c, SHOAL_MSG_ERROR, 0, status, id, body, n > 0 ? (size_t)n : 0);
}

/* ---- reading ------------------------------------------------------------------------------ */

/* ---- handshake ---------------------------------------------------------------------------- */

/* Starts the handshake of the accepted connection C on FD (wire/handshake.h): the proofs bind the
 * address the requester dialed, which is this socket's local address. Returns 0 or -errno (no
 * address, no randomness): the caller closes. */
static int conn_handshake_start(struct conn *c, int fd)
{
        struct shoal_server *s = c->lp->s;
        struct sockaddr_in la;
        socklen_t ll = sizeof(la);
        char ip[INET_ADDRSTRLEN], local[SHOAL_HS_ADDR_MAX];
        if (getsockname(fd, (struct sockaddr *)&la, &ll) || la.sin_family != AF_INET ||
            !inet_ntop(AF_INET, &la.sin_addr, ip, sizeof(ip)))
                return -EADDRNOTAVAIL;
        snprintf(local, sizeof(local), "%s:%u", ip, ntohs(la.sin_port));
        struct shoal_hs_config hc = {.role = SHOAL_HS_SERVER,
                                     .key = &s->key,
                                     .service = (uint8_t)c->service,
                                     .addr = local,
                                     .member_id = s->member_id,
                                     .max_inflight = conn_max_inflight(c)};
        int rc = shoal_hs_start(&c->hs, &hc);
        if (rc)
                log_ratelimited(SHOAL_LOG_ERROR, "server", "closing %s: %s", c->peer,
                                c->hs.why ? c->hs.why : strerror(-rc));
        return rc;
}

/* Queues the whole frame FRAME (an answer to ID) like a control frame. */
static bool conn_send_raw(struct conn *c, uint64_t id, const uint8_t *frame, size_t len)
{
        struct srv_req *r = calloc(1, sizeof(*r));
        if (!r || len > sizeof(r->out)) {
                free(r);
                return false;
        }
        r->s = c->lp->s;
        r->c = c;
        r->id = id;
        r->type = frame[5];
        r->status = SHOAL_ST__MAX; /* not OK: no payload */
        memcpy(r->out, frame, len);
        r->out_len = len;
        r->t_start = shoal_now_ns();
        if (c->sendq_tail)
                c->sendq_tail->next = r;
        else
                c->sendq = r;
        c->sendq_tail = r;
        c->ids[c->inflight++] = id; /* conn_write forgets it when sent */
        return true;
}

/* One frame while the session is not open. Returns false when the connection was closed. */
static bool conn_handshake_frame(struct conn *c, const struct shoal_wire_hdr *h,
                                 const uint8_t *body)
{
        enum shoal_hs_verdict v = shoal_hs_step(&c->hs, h, body);
        if (v == SHOAL_HS_FAIL) {
                log_ratelimited(c->hs.error == -EACCES ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "server",
                                "peer %s failed the handshake: %s", c->peer, c->hs.why);
                /* The reason, best effort and only in order: nothing else may be queued. */
                if (c->hs.out_len && !c->sendq &&
                    send(c->io.fd, c->hs.out, c->hs.out_len, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
                        /* the peer learns it from the close */
                }
                conn_close(c);
                return false;
        }
        if (c->hs.out_len && !conn_send_raw(c, h->id, c->hs.out, c->hs.out_len)) {
                conn_close(c);
                return false;
        }
        if (v == SHOAL_HS_DONE) {
                c->state = C_READY;
                c->deadline = 0;
        } else {
                c->state = C_AUTH;
        }
        return true;
}

/* Decodes and checks the body of a READ or CORRUPT (TCP and RDMA alike) and makes the request,
 * counted in the series of SVC (SVC_M_POOL or SVC_M_IORPC). RDMA: it arrived on an RDMA
 * connection (which needs SHOAL_WF_RDMA_TARGET; TCP refuses it). Returns the request, or NULL
 * with the ERROR status and reason in *STATUS and WHY. */
static struct srv_req *req_from_read(struct shoal_server *s, int svc, uint8_t type, uint64_t id,
                                     uint16_t flags, const uint8_t *body, size_t body_len,
                                     bool rdma, uint32_t *status, char *why, size_t whylen)
{
        uint64_t t0 = shoal_now_ns();
        struct shoal_wire_read rd;
        int rc = shoal_wire_read_decode(body, body_len, &rd);
        shoal_metric_observe(svc_metrics[svc].decode, shoal_now_ns() - t0);
        if (rc) {
                *status = SHOAL_ST_BAD_REQUEST;
                snprintf(why, whylen, "malformed read request");
                return NULL;
        }
        if (rd.block_size != s->cfg.vol->block_size) {
                *status = SHOAL_ST_VOLUME;
                snprintf(why, whylen, "block size %u, this member has %u", rd.block_size,
                         s->cfg.vol->block_size);
                return NULL;
        }
        if (!rdma && (flags & SHOAL_WF_RDMA_TARGET)) {
                *status = SHOAL_ST_BAD_REQUEST;
                snprintf(why, whylen, "RDMA target on a TCP connection");
                return NULL;
        }
        struct srv_req *r = calloc(1, sizeof(*r));
        if (!r) {
                *status = SHOAL_ST_BUSY;
                snprintf(why, whylen, "out of memory");
                return NULL;
        }
        r->s = s;
        r->svc = svc;
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
        return r;
}

/* READ (an answer is owed) or CORRUPT (a notice, never answered). */
static bool conn_on_read(struct conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        bool is_read = h->type == SHOAL_MSG_READ;
        for (unsigned i = 0; is_read && i < c->inflight; i++) {
                if (c->ids[i] == h->id) {
                        log_ratelimited(SHOAL_LOG_WARN, "server",
                                        "peer %s reused in-flight id %llu: closing", c->peer,
                                        (unsigned long long)h->id);
                        conn_close(c);
                        return false;
                }
        }
        uint32_t status;
        char why[128];
        int svc = c->service == SHOAL_SERVICE_POOL ? SVC_M_POOL : SVC_M_IORPC;
        struct srv_req *r = req_from_read(c->lp->s, svc, h->type, h->id, h->flags, body,
                                          h->body_len, false, &status, why, sizeof(why));
        if (!r) {
                if (is_read) /* a CORRUPT notice is never answered */
                        conn_send_error(c, h->id, status, why);
                return true;
        }
        r->c = c;
        r->done.fn = req_done_on_loop;
        r->done.arg = r;
        if (is_read) {
                c->ids[c->inflight++] = h->id;
                c->nreq++;
        } else {
                /* A check reads a whole block: a flood of notices must not take the disk
                 * workers from reads. The requester already fell back; a corrupt file is
                 * reported again by the next one who reads it. */
                struct shoal_server *s = c->lp->s;
                if (__atomic_fetch_add(&s->corrupt_active, 1, __ATOMIC_RELAXED) >=
                    CORRUPT_ACTIVE_MAX) {
                        __atomic_fetch_sub(&s->corrupt_active, 1, __ATOMIC_RELAXED);
                        log_ratelimited(SHOAL_LOG_INFO, "server",
                                        "%u corrupt notices being checked: dropping one from %s",
                                        CORRUPT_ACTIVE_MAX, c->peer);
                        free(r);
                        return true;
                }
                r->corrupt_slot = true;
                c->ncorrupt++;
        }
        req_dispatch(r);
        return true;
}

static bool conn_on_info(struct conn *c, const struct shoal_wire_hdr *h)
{
        struct shoal_server *s = c->lp->s;
        if (!s->iorpc_on) {
                /* [R2]: a member with IORPC disabled tells clients so; they stay on the TCP
                 * pool. */
                conn_send_error(c, h->id, SHOAL_ST_RPC_DISABLED, "rpc disabled");
                return true;
        }
        struct shoal_wire_info info;
        memset(&info, 0, sizeof(info));
        shoal_strlcpy(info.tcp_addr, s->tcp_addr, sizeof(info.tcp_addr));
        shoal_strlcpy(info.iorpc_addr, s->iorpc_addr, sizeof(info.iorpc_addr));
        pthread_mutex_lock(&s->info_mu);
        info.n_rdma = (uint8_t)s->n_rdma;
        for (unsigned i = 0; i < s->n_rdma; i++)
                shoal_strlcpy(info.rdma_addr[i], s->rdma_addr[i], sizeof(info.rdma_addr[i]));
        pthread_mutex_unlock(&s->info_mu);
        info.block_size = s->cfg.vol->block_size;
        shoal_strlcpy(info.volume_url, s->cfg.vol->url, sizeof(info.volume_url));
        uint8_t b[2048];
        int n = shoal_wire_info_encode(b, sizeof(b), &info);
        if (n < 0) {
                conn_close(c);
                return false;
        }
        conn_send_ctrl(c, SHOAL_MSG_INFO_RESP, 0, 0, h->id, b, (size_t)n);
        return true;
}

/* ---- write-through: PUT_BLOCK (the checks are server/server_put.c's) ------------------------ */

/* Fill worker: checks and caches the pushed block, then answers. */
static void put_work(struct shoal_work *w)
{
        struct srv_req *r = (struct srv_req *)w;
        if (req_orphaned(r)) {
                req_finish(r);
                return;
        }
        r->status = shoal_put_apply(r->s->put, r->put, r->c->peer);
        if (r->status != SHOAL_ST_OK)
                shoal_strlcpy(r->reason, r->put->why, sizeof(r->reason));
        req_finish(r);
}

/* The payload of the put in C->put has arrived (or was dropped): refuse it, or hand it to a
 * fill worker (it may ask the store). Returns false when C was closed. */
static bool conn_put_received(struct conn *c)
{
        struct shoal_server *s = c->lp->s;
        struct shoal_put_rx *rx = c->put;
        c->put = NULL;
        c->frame_start = 0;
        struct srv_req *r = rx->status == SHOAL_ST_OK ? calloc(1, sizeof(*r)) : NULL;
        if (!r) {
                if (rx->status == SHOAL_ST_OK)
                        snprintf(rx->why, sizeof(rx->why), "out of memory");
                rx->status = rx->status == SHOAL_ST_OK ? SHOAL_ST_BUSY : rx->status;
                shoal_put_refused(s->put, rx, c->peer);
                conn_send_error(c, c->put_id, rx->status, rx->why);
                shoal_put_free(s->put, rx);
                c->nput--;
                return true;
        }
        r->s = s;
        r->c = c;
        r->svc = c->service == SHOAL_SERVICE_POOL ? SVC_M_POOL : SVC_M_IORPC;
        r->id = c->put_id;
        r->type = SHOAL_MSG_PUT_BLOCK;
        r->t_start = shoal_now_ns();
        r->put = rx;
        r->done.fn = req_done_on_loop;
        r->done.arg = r;
        r->work.fn = put_work;
        c->ids[c->inflight++] = r->id;
        c->refs++;
        shoal_workers_submit(s->fill, &r->work);
        return true;
}

/* PUT_BLOCK: its payload follows on the stream, and is read next (conn_put_payload). */
static bool conn_on_put(struct conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        for (unsigned i = 0; i < c->inflight; i++) {
                if (c->ids[i] == h->id) {
                        log_ratelimited(SHOAL_LOG_WARN, "server",
                                        "peer %s reused in-flight id %llu: closing", c->peer,
                                        (unsigned long long)h->id);
                        conn_close(c);
                        return false;
                }
        }
        c->put = shoal_put_begin(c->lp->s->put, h, body, c->peer);
        if (!c->put) {
                conn_close(c);
                return false;
        }
        c->put_id = h->id;
        c->nput++;
        c->frame_start = shoal_now_ns();
        return c->put->len ? true : conn_put_received(c);
}

/* Reads payload bytes of C->put from the socket (into its buffer, or dropped). Returns false
 * when the socket is empty or C was closed. */
static bool conn_put_payload(struct conn *c)
{
        struct shoal_put_rx *rx = c->put;
        uint8_t scratch[16384];
        size_t want = rx->len - rx->got;
        uint8_t *dst = rx->buf ? rx->buf + rx->got : scratch;
        if (!rx->buf && want > sizeof(scratch))
                want = sizeof(scratch);
        ssize_t n = recv(c->io.fd, dst, want, MSG_DONTWAIT);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EINTR)) {
                conn_close(c);
                return false;
        }
        if (n < 0)
                return false;
        rx->got += (uint32_t)n;
        c->frame_start = shoal_now_ns(); /* a stall is no progress for FRAME_STALL_NS */
        return rx->got < rx->len || conn_put_received(c);
}

/* Handles one complete, CRC-checked frame. Returns false when the connection was closed. */
static bool conn_frame(struct conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        if (c->state != C_READY) {
                bool open = conn_handshake_frame(c, h, body);
                if (open && c->state == C_READY)
                        preauth_leave(c);
                return open;
        }
        switch (h->type) {
        case SHOAL_MSG_READ:
        case SHOAL_MSG_CORRUPT:
                return conn_on_read(c, h, body);
        case SHOAL_MSG_PING:
                conn_send_ctrl(c, SHOAL_MSG_PONG, 0, 0, h->id, body, h->body_len);
                return true;
        case SHOAL_MSG_INFO:
                return conn_on_info(c, h);
        case SHOAL_MSG_PUT_BLOCK:
                return conn_on_put(c, h, body);
        case SHOAL_MSG_GOAWAY:
                conn_close(c);
                return false;
        default:
                /* A type valid on the wire but not from a requester (answers, handshake). */
                log_ratelimited(SHOAL_LOG_WARN, "server", "peer %s sent message type %u: closing",
                                c->peer, h->type);
                conn_close(c);
                return false;
        }
}

/* Reads and handles frames until the socket is empty, the connection is at its limits, or
 * READ_BUDGET frames were handled: a peer that keeps sending (frames that cost nothing to drop,
 * such as surplus CORRUPT notices) must not keep the loop from its other connections; the loop
 * is level-triggered, so the rest is read on its next round. */
static void conn_read(struct conn *c)
{
        for (unsigned handled = 0; handled < READ_BUDGET;) {
                struct shoal_wire_hdr h;
                if (c->put) {
                        if (!conn_put_payload(c))
                                return;
                        handled++;
                        continue;
                }
                /* Before authentication only the small handshake bodies are taken. */
                uint32_t body_max = c->state != C_READY ? 128 : IN_MAX - SHOAL_WIRE_HDR_LEN;
                int need =
                        shoal_wire_frame_need(c->in, c->in_len, body_max, c->state == C_READY, &h);
                if (need == -EPROTO)
                        log_ratelimited(SHOAL_LOG_WARN, "server",
                                        "bad frame header from %s: closing", c->peer);
                else if (need == -EBADMSG)
                        log_ratelimited(SHOAL_LOG_WARN, "server",
                                        "frame checksum mismatch from %s: closing", c->peer);
                if (need < 0) {
                        conn_close(c);
                        return;
                }
                if (need == 0) {
                        c->in_len = 0;
                        c->frame_start = 0;
                        if (!conn_frame(c, &h, c->in + SHOAL_WIRE_HDR_LEN))
                                return;
                        handled++;
                        continue;
                }
                size_t want = (size_t)need;
                if (c->state == C_READY && !conn_can_read(c)) {
                        conn_update_events(c);
                        return;
                }
                ssize_t n = recv(c->io.fd, c->in + c->in_len, want, MSG_DONTWAIT);
                if (n == 0) {
                        conn_close(c);
                        return;
                }
                if (n < 0) {
                        if (errno != EAGAIN && errno != EINTR)
                                conn_close(c);
                        return;
                }
                if (c->in_len == 0)
                        c->frame_start = shoal_now_ns();
                c->in_len += (size_t)n;
        }
}

static void conn_event(void *arg, uint32_t events)
{
        struct conn *c = arg;
        if (c->closing)
                return; /* evicted: closed after this batch (conn_close_later) */
        c->refs++;
        if (events & (EPOLLERR | EPOLLHUP)) {
                conn_close(c);
        } else if ((events & EPOLLRDHUP) && !conn_can_read(c)) {
                /* The peer ended its stream, which closes the connection when read (its answers
                 * are never sent): do it now, so that its queued work does not start. */
                conn_close(c);
        } else {
                if ((events & EPOLLOUT) && !c->closed)
                        conn_kick_write(c);
                if ((events & (EPOLLIN | EPOLLRDHUP)) && !c->closed)
                        conn_read(c);
                if (!c->closed)
                        conn_kick_write(c);
        }
        conn_put(c);
}

static void conn_close(struct conn *c)
{
        if (c->closed)
                return;
        c->closed = true;
        __atomic_store_n(&c->gone, true, __ATOMIC_RELEASE);
        struct srv_loop *lp = c->lp;
        shoal_loop_del(lp->loop, &c->io);
        close(c->io.fd);
        c->io.fd = -1;
        while (c->sendq) {
                struct srv_req *r = c->sendq;
                c->sendq = r->next;
                req_free(r);
        }
        c->sendq_tail = NULL;
        shoal_put_free(lp->s->put, c->put);
        c->put = NULL;
        if (c->prev)
                c->prev->next = c->next;
        else
                lp->conns = c->next;
        if (c->next)
                c->next->prev = c->prev;
        preauth_leave(c);
        __atomic_fetch_sub(&lp->s->nconns, 1, __ATOMIC_RELAXED);
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        conn_put(c); /* the loop's reference; workers may still hold theirs */
}

/* ---- admission [S2] ------------------------------------------------------------------------ */

static struct src_count **src_slot(struct srv_loop *lp, uint32_t ip)
{
        struct src_count **pp = &lp->src[(ip * 0x9e3779b1u) >> 24]; /* SRC_BUCKETS = 2^8 */
        while (*pp && (*pp)->ip != ip)
                pp = &(*pp)->next;
        return pp;
}

/* The count of unauthenticated connections from IP on LP, created at 0 if absent (NULL: no
 * memory). Callers give an unused one back with src_drop_if_unused. */
static struct src_count *src_get(struct srv_loop *lp, uint32_t ip)
{
        struct src_count **pp = src_slot(lp, ip);
        if (!*pp) {
                *pp = calloc(1, sizeof(**pp));
                if (*pp)
                        (*pp)->ip = ip;
        }
        return *pp;
}

static void src_drop_if_unused(struct srv_loop *lp, struct src_count *sc)
{
        if (sc->n)
                return;
        struct src_count **pp = src_slot(lp, sc->ip);
        *pp = sc->next;
        free(sc);
}

static void conn_close_task(void *arg)
{
        struct conn *c = arg;
        conn_close(c);
        conn_put(c);
}

/* Closes C from the handler of another connection's event. C may have an event of its own later
 * in the same batch of the loop, whose handler must not find it freed: it stops counting at once
 * and is closed (and freed) by a task that runs after the batch. */
static void conn_close_later(struct conn *c)
{
        if (c->closing || c->closed)
                return;
        c->closing = true;
        preauth_leave(c);
        c->refs++;
        c->close_task.fn = conn_close_task;
        c->close_task.arg = c;
        shoal_loop_post(c->lp->loop, &c->close_task);
}

/* C joins its loop's unauthenticated connections (newest last), counted for its source SC. */
static void preauth_enter(struct conn *c, struct src_count *sc)
{
        struct srv_loop *lp = c->lp;
        c->preauth = sc;
        sc->n++;
        lp->npreauth++;
        c->pa_prev = lp->pa_tail;
        c->pa_next = NULL;
        if (lp->pa_tail)
                lp->pa_tail->pa_next = c;
        else
                lp->pa_head = c;
        lp->pa_tail = c;
}

/* C authenticated or closed: it no longer counts against the pre-auth limits. */
static void preauth_leave(struct conn *c)
{
        struct srv_loop *lp = c->lp;
        struct src_count *sc = c->preauth;
        if (!sc)
                return;
        c->preauth = NULL;
        if (c->pa_prev)
                c->pa_prev->pa_next = c->pa_next;
        else
                lp->pa_head = c->pa_next;
        if (c->pa_next)
                c->pa_next->pa_prev = c->pa_prev;
        else
                lp->pa_tail = c->pa_prev;
        c->pa_prev = c->pa_next = NULL;
        lp->npreauth--;
        sc->n--;
        src_drop_if_unused(lp, sc);
}

/* The oldest unauthenticated connection of the source that has the most of them on LP. */
static struct conn *preauth_victim(struct srv_loop *lp)
{
        struct conn *v = NULL;
        for (struct conn *c = lp->pa_head; c; c = c->pa_next)
                if (!v || c->preauth->n > v->preauth->n)
                        v = c;
        return v;
}

/* Whether C has sent nothing yet, not even bytes still unread in its socket (or is gone). */
static bool conn_silent(const struct conn *c)
{
        if (c->state != C_HELLO)
                return false;
        char b;
        return recv(c->io.fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

/* The connection of source SC to give way to a newcomer from it: its oldest that has sent
 * nothing (silence is all a flood can do without the secret, while an honest requester sends its
 * HELLO as soon as it connects, so its bytes wait in the socket even before this loop reads
 * them, and its AUTH one round trip later), else its oldest. */
static struct conn *src_victim(struct srv_loop *lp, const struct src_count *sc)
{
        struct conn *oldest = NULL;
        for (struct conn *c = lp->pa_head; c; c = c->pa_next) {
                if (c->preauth != sc)
                        continue;
                if (conn_silent(c))
                        return c;
                if (!oldest)
                        oldest = c;
        }
        return oldest;
}

/* The source IP (network order) counts under: every loopback address is one source, since every
 * local process can connect from any of 127.0.0.0/8 (the servers listen on IPv4 only, so there
 * is no IPv6 prefix to group). */
static uint32_t src_key(uint32_t ip)
{
        return (ntohl(ip) >> 24) == 127 ? htonl(0x7f000000u) : ip;
}

/* Whether a new connection from IP may be admitted on LP; on success *OUT is its source's count.
 * Unauthenticated connections are limited per source (src_key) and in all. A newcomer is never
 * refused for its own source's limit: that source's oldest silent connection gives way
 * (src_victim), so a flood from an address an honest client shares (every local process shares
 * loopback) cannot lock that client out; it can only keep cycling its own connections. At the
 * overall limit, room is made by closing the oldest unauthenticated connection of the heaviest
 * source, but only when that is the newcomer's own source or one that would still hold more
 * than the newcomer's: a flood from a few sources cannot push out an honest peer's handshake
 * (it would need about as many sources as there are places), and a newcomer never displaces a
 * source lighter than its own. Everything is per loop (SO_REUSEPORT spreads accepts over the
 * loops), so no lock is taken. */
static bool admit(struct srv_loop *lp, uint32_t ip, const char *who, struct src_count **out,
                  bool *evicted)
{
        *evicted = false;
        struct shoal_server *s = lp->s;
        uint32_t key = src_key(ip);
        struct src_count *sc = src_get(lp, key);
        if (!sc)
                return false;
        struct conn *v = NULL;
        if (sc->n >= s->loop_preauth_per_src) {
                v = src_victim(lp, sc);
                if (!v)
                        return false; /* (every one it counts is on the list) */
        } else if (__atomic_load_n(&s->nconns, __ATOMIC_RELAXED) >= s->conn_cap ||
                   lp->npreauth >= s->loop_preauth_cap) {
                v = preauth_victim(lp);
                if (v && v->preauth == sc)
                        v = src_victim(lp, sc);
                else if (v && v->preauth->n <= sc->n + 1)
                        v = NULL;
                if (!v) {
                        log_ratelimited(SHOAL_LOG_WARN, "server",
                                        "refusing %s: %u connections, %u on this loop not "
                                        "authenticated",
                                        who, __atomic_load_n(&s->nconns, __ATOMIC_RELAXED),
                                        lp->npreauth);
                        src_drop_if_unused(lp, sc);
                        return false;
                }
        }
        if (v) {
                log_ratelimited(SHOAL_LOG_WARN, "server",
                                "closing unauthenticated %s (%u from its source) to admit %s",
                                v->peer, v->preauth->n, who);
                conn_close_later(v); /* may free SC when V was its last connection */
                *evicted = true;
                sc = src_get(lp, key);
                if (!sc)
                        return false;
        }
        *out = sc;
        return true;
}

/* Limits from the process's open-file limit, so that connections can never take the fds the
 * member needs for its own work: a fixed base (stdio, log, registry, metrics, each loop's epoll,
 * eventfd and listeners, the pipe pool), a quarter of the rest for the store's connections and the
 * reader's own cache files (a mount in the same process), then half for requests in process (each
 * holds at most 3: a cache file and its O_DIRECT twin, or a store read and a cache insert) and half
 * for connections (1 each; the zero-copy pipes are a pool of their own in the base). The soft limit
 * is raised to the hard one first. */
static void limits_derive(struct shoal_server *s, unsigned nloops)
{
        struct rlimit rl;
        uint64_t lim = 1024;
        if (!getrlimit(RLIMIT_NOFILE, &rl)) {
                rlim_t want = rl.rlim_max == RLIM_INFINITY ? (rlim_t)1 << 20 : rl.rlim_max;
                if (want > ((rlim_t)1 << 20))
                        want = (rlim_t)1 << 20;
                if (rl.rlim_cur < want) {
                        struct rlimit up = {.rlim_cur = want, .rlim_max = rl.rlim_max};
                        if (!setrlimit(RLIMIT_NOFILE, &up))
                                rl.rlim_cur = want;
                }
                lim = rl.rlim_cur == RLIM_INFINITY ? (uint64_t)1 << 20 : (uint64_t)rl.rlim_cur;
        }
        /* Only splice mode answers through pipes (hit_prepare), and they are a speed-up, not a
         * need (without one a hit goes by sendfile): a 32nd of the fds at most, so they never
         * squeeze the connections and their per-address limits. */
        s->npipes = s->iorpc_mode != SHOAL_IORPC_SPLICE
                            ? 1
                            : (unsigned)SHOAL_MAX(SHOAL_MIN(lim / 32, (uint64_t)PIPES), 2);
        uint64_t base = 64 + 4ULL * nloops + 2ULL * s->npipes;
        uint64_t avail = lim > base ? lim - base : 0;
        uint64_t other = SHOAL_MAX(avail / 4, 32);
        uint64_t rest = avail > other ? avail - other : 0;
        uint64_t slots = SHOAL_MAX(rest / 2 / 3, 8);
        uint64_t conns = SHOAL_MAX(rest / 2, 8);
        s->cfg.max_inflight = (unsigned)SHOAL_MIN(slots, (uint64_t)s->cfg.max_inflight);
        s->conn_cap = (unsigned)SHOAL_MIN(conns, (uint64_t)MAX_CONNS);
        unsigned preauth = SHOAL_MAX(s->conn_cap / 2, 4u);
        unsigned per_src = SHOAL_MIN(SHOAL_MAX(preauth / 4, 16u), 256u);
        s->loop_preauth_cap = SHOAL_MAX(preauth / nloops, 4u);
        s->loop_preauth_per_src = SHOAL_MAX(per_src / nloops, 2u);
        log_info("server",
                 "open files: %llu; up to %u connections (%u unauthenticated, %u per address, "
                 "on each of %u loops), %u requests in process",
                 (unsigned long long)lim, s->conn_cap, s->loop_preauth_cap, s->loop_preauth_per_src,
                 nloops, s->cfg.max_inflight);
}

/* ---- accepting ---------------------------------------------------------------------------- */

static void accept_event(void *arg, uint32_t events)
{
        struct srv_listener *lis = arg;
        struct shoal_loop_io *lio = &lis->io;
        struct srv_loop *lp = lis->lp;
        int service = lis->service;
        struct shoal_server *srv = lp->s;
        (void)events;
        for (int i = 0; i < 64; i++) {
                struct sockaddr_in sa;
                socklen_t sl = sizeof(sa);
                int fd =
                        accept4(lio->fd, (struct sockaddr *)&sa, &sl, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                        if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
                            errno == ENOMEM) {
                                /* Out of fds: stop accepting for a moment instead of spinning
                                 * on a listener that stays readable. */
                                log_ratelimited(SHOAL_LOG_WARN, "server",
                                                "accept: %s; pausing accepts", strerror(errno));
                                for (int k = 0; k < 2; k++)
                                        if (lp->lis[k].io.fd >= 0)
                                                shoal_loop_del(lp->loop, &lp->lis[k].io);
                                lp->accept_paused = true;
                                lp->accept_resume = shoal_now_ns() + 200000000ULL;
                        }
                        return;
                }
                char ip[INET_ADDRSTRLEN], who[64];
                inet_ntop(AF_INET, &sa.sin_addr, ip, sizeof(ip));
                snprintf(who, sizeof(who), "%s:%u", ip, ntohs(sa.sin_port));
                struct src_count *sc;
                bool evicted;
                if (!admit(lp, sa.sin_addr.s_addr, who, &sc, &evicted)) {
                        close(fd);
                        continue;
                }
                struct conn *c = calloc(1, sizeof(*c));
                uint64_t *ids = calloc(CONN_ACTIVE_MAX + 16, sizeof(uint64_t));
                if (!c || !ids) {
                        src_drop_if_unused(lp, sc);
                        free(c);
                        free(ids);
                        close(fd);
                        continue;
                }
                int one = 1;
                setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
                c->ids = ids;
                c->io.fd = fd;
                c->io.fn = conn_event;
                c->io.arg = c;
                c->lp = lp;
                c->service = service;
                c->refs = 1;
                c->state = C_HELLO;
                c->deadline = shoal_now_ns() + HANDSHAKE_NS;
                c->last_progress = shoal_now_ns();
                shoal_strlcpy(c->peer, who, sizeof(c->peer));
                if (conn_handshake_start(c, fd)) {
                        src_drop_if_unused(lp, sc);
                        close(fd);
                        free(ids);
                        free(c);
                        continue;
                }
                if (shoal_loop_add(lp->loop, &c->io, EPOLLIN | EPOLLRDHUP)) {
                        src_drop_if_unused(lp, sc);
                        close(fd);
                        free(ids);
                        free(c);
                        continue;
                }
                preauth_enter(c, sc);
                c->next = lp->conns;
                if (lp->conns)
                        lp->conns->prev = c;
                lp->conns = c;
                __atomic_fetch_add(&srv->nconns, 1, __ATOMIC_RELAXED);
                shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
                /* The connection that gave way closes after this batch: accept no more until it
                 * has, so that a flood's churn never holds more fds than the limits allow (the
                 * listener is level-triggered, the next accept comes with the next wait). */
                if (evicted)
                        return;
        }
}

/* Loop tick: handshake and stalled-frame deadlines, stalled senders, paused accepts. */
static void loop_tick(void *arg)
{
        struct srv_loop *lp = arg;
        uint64_t now = shoal_now_ns();
        if (lp->accept_paused && now >= lp->accept_resume) {
                lp->accept_paused = false;
                for (int k = 0; k < 2; k++)
                        if (lp->lis[k].io.fd >= 0)
                                shoal_loop_add(lp->loop, &lp->lis[k].io, EPOLLIN);
        }
        struct conn *c = lp->conns;
        while (c) {
                struct conn *next = c->next;
                bool expired = (c->deadline && now > c->deadline) ||
                               (c->frame_start && now - c->frame_start > FRAME_STALL_NS) ||
                               (c->sendq && now - c->last_progress > SEND_STALL_NS);
                if (expired) {
                        log_ratelimited(SHOAL_LOG_INFO, "server",
                                        "closing %s: handshake, frame or send deadline passed",
                                        c->peer);
                        conn_close(c);
                }
                c = next;
        }
}

static void *loop_main(void *arg)
{
        struct srv_loop *lp = arg;
        shoal_loop_run(lp->loop);
        return NULL;
}

/* SO_REUSEPORT lets another process of the same user bind a port we listen on and take half of
 * its connections: before the first listener on a fixed port (--group-port), a probe without it
 * must be able to bind there. */
static int port_free(const struct sockaddr_in *sa)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        if (fd < 0)
                return -errno;
        int one = 1, rc = 0;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, (const struct sockaddr *)sa, sizeof(*sa)))
                rc = -errno;
        close(fd);
        return rc;
}

static int bind_listener(const char *ip, uint16_t *port, bool first, char *err, size_t errlen)
{
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
                snprintf(err, errlen, "socket: %s", strerror(errno));
                return -1;
        }
        int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        setsockopt(fd, SOL_SOCKET, SO_REUSEPORT, &one, sizeof(one));
        struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(*port)};
        if (inet_pton(AF_INET, ip, &sa.sin_addr) != 1) {
                snprintf(err, errlen, "invalid listen address %s", ip);
                close(fd);
                return -1;
        }
        int rc = first && *port ? port_free(&sa) : 0;
        if (rc || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) || listen(fd, 1024)) {
                snprintf(err, errlen, "cannot listen on %s:%u: %s", ip, *port,
                         strerror(rc ? -rc : errno));
                close(fd);
                return -1;
        }
        socklen_t sl = sizeof(sa);
        getsockname(fd, (struct sockaddr *)&sa, &sl);
        *port = ntohs(sa.sin_port);
        return fd;
}

static long read_pipe_max(void)
{
        FILE *f = fopen("/proc/sys/fs/pipe-max-size", "r");
        long v = 0;
        if (f) {
                if (fscanf(f, "%ld", &v) != 1)
                        v = 0;
                fclose(f);
        }
        return v;
}

static bool is_loopback(const char *ip)
{
        return !strncmp(ip, "127.", 4);
}

struct shoal_server *shoal_server_start(const struct shoal_server_config *cfg, char *err,
                                        size_t errlen)
{
        if (!is_loopback(cfg->listen_ip) && !shoal_secret_set(&cfg->secret)) {
                snprintf(err, errlen,
                         "refusing to listen on %s without a group secret: set "
                         "--group-secret-file or SHOAL_GROUP_SECRET (or use --group-ip "
                         "127.0.0.1)",
                         cfg->listen_ip);
                return NULL;
        }
        struct shoal_server *s = calloc(1, sizeof(*s));
        if (!s) {
                snprintf(err, errlen, "out of memory");
                return NULL;
        }
        if (shoal_hs_key_init(&s->key, &cfg->secret) ||
            shoal_strlcpy(s->member_id, cfg->member_id ? cfg->member_id : "",
                          sizeof(s->member_id)) >= sizeof(s->member_id)) {
                snprintf(err, errlen,
                         "refusing a group secret shorter than %d bytes or a member id longer "
                         "than %d characters",
                         SHOAL_SECRET_MIN, SHOAL_WIRE_MEMBER_ID_MAX);
                free(s);
                return NULL;
        }
        s->cfg = *cfg;
        s->cfg.secret = (struct shoal_secret){0};
        s->cfg.member_id = s->member_id;
        if (!s->cfg.max_inflight)
                s->cfg.max_inflight = 2048;
        unsigned threads = cfg->threads;
        if (!threads) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                threads = n > 0 ? (unsigned)n : 1;
        }
        if (threads > MAX_LOOPS)
                threads = MAX_LOOPS;
        pthread_mutex_init(&s->cap_mu, NULL);
        pthread_mutex_init(&s->info_mu, NULL);
        s->iorpc_on = cfg->iorpc_mode != SHOAL_IORPC_DISABLE;
        s->iorpc_mode = cfg->iorpc_mode;
        s->pipe_max = read_pipe_max();
        if (s->iorpc_mode == SHOAL_IORPC_SPLICE && (s->pipe_max < (8L << 20) || cfg->rdma)) {
                log_warn("server",
                         "splice iorpc is disabled since max pipe size is %ld or RDMA is "
                         "enabled, use dio instead",
                         s->pipe_max);
                s->iorpc_mode = SHOAL_IORPC_DIO;
        }
        limits_derive(s, threads);
        /* The cap in force: limits_derive may have lowered it to what the fds allow. */
        shoal_metric_gauge_set(SHOAL_M_remotecache_inflight_limit, s->cfg.max_inflight);
        s->disk = shoal_workers_create(16, "disk");
        s->fill = shoal_workers_create(64, "fill");
        s->dio = shoal_bufpool_create(cfg->vol->block_size, DIO_BUFFERS);
        s->pipes = shoal_pipes_create(s->npipes, SHOAL_MIN(cfg->vol->block_size, PIPE_CAP_MAX));
        s->sizes = shoal_store_sizes_create(shoal_reader_store(cfg->reader), SIZES_MAX);
        struct shoal_put_srv_config pc = {.vol = cfg->vol,
                                          .cache = cfg->cache,
                                          .sizes = s->sizes,
                                          .is_owner = put_is_owner,
                                          .owner_arg = s};
        s->put = s->sizes ? shoal_put_srv_create(&pc) : NULL;
        if (!s->disk || !s->fill || !s->dio || !s->pipes || !s->sizes || !s->put) {
                snprintf(err, errlen, "cannot start server workers");
                goto out_fail;
        }
        uint16_t pool_port = cfg->tcp_port, rpc_port = 0;
        for (unsigned i = 0; i < threads; i++) {
                struct srv_loop *lp = &s->loops[i];
                lp->s = s;
                for (int k = 0; k < 2; k++) {
                        lp->lis[k].io.fd = -1;
                        lp->lis[k].io.fn = accept_event;
                        lp->lis[k].io.arg = &lp->lis[k];
                        lp->lis[k].lp = lp;
                        lp->lis[k].service = k == 0 ? SHOAL_SERVICE_POOL : SHOAL_SERVICE_IORPC;
                }
                lp->loop = shoal_loop_create();
                if (!lp->loop) {
                        snprintf(err, errlen, "cannot create event loop");
                        goto out_fail;
                }
                s->nloops++;
                int fd = bind_listener(cfg->listen_ip, &pool_port, i == 0, err, errlen);
                if (fd < 0)
                        goto out_fail;
                lp->lis[0].io.fd = fd;
                shoal_loop_add(lp->loop, &lp->lis[0].io, EPOLLIN);
                if (s->iorpc_on) {
                        fd = bind_listener(cfg->listen_ip, &rpc_port, i == 0, err, errlen);
                        if (fd < 0)
                                goto out_fail;
                        lp->lis[1].io.fd = fd;
                        shoal_loop_add(lp->loop, &lp->lis[1].io, EPOLLIN);
                }
                shoal_loop_set_tick(lp->loop, 250000000ULL, loop_tick, lp);
        }
        snprintf(s->tcp_addr, sizeof(s->tcp_addr), "%s:%u", cfg->listen_ip, pool_port);
        if (s->iorpc_on)
                snprintf(s->iorpc_addr, sizeof(s->iorpc_addr), "%s:%u", cfg->listen_ip, rpc_port);
        for (unsigned i = 0; i < s->nloops; i++) {
                if (pthread_create(&s->loops[i].thread, NULL, loop_main, &s->loops[i])) {
                        snprintf(err, errlen, "cannot start loop thread");
                        for (unsigned j = 0; j < i; j++) {
                                shoal_loop_stop(s->loops[j].loop);
                                pthread_join(s->loops[j].thread, NULL);
                        }
                        s->nloops = i; /* only these ran; all are stopped */
                        goto out_fail_noloops;
                }
                pthread_setname_np(s->loops[i].thread, "shoal-loop");
        }
        log_info("server", "max pipe size: %ld, iorpc: %s, tcp pool: %s", s->pipe_max,
                 s->iorpc_on ? shoal_iorpc_mode_name(s->iorpc_mode) : "disable",
                 cfg->cache_try_dio ? "dio" : "sendfile");
        log_info("server", "tcp pool listening on %s%s%s", s->tcp_addr,
                 s->iorpc_on ? ", iorpc on " : "", s->iorpc_on ? s->iorpc_addr : "");
        return s;

out_fail_noloops:
out_fail:
        for (unsigned i = 0; i < MAX_LOOPS; i++) {
                struct srv_loop *lp = &s->loops[i];
                for (int k = 0; k < 2; k++)
                        if (lp->lis[k].io.fd > 0)
                                close(lp->lis[k].io.fd);
                if (lp->loop)
                        shoal_loop_destroy(lp->loop);
        }
        shoal_workers_destroy(s->disk);
        shoal_workers_destroy(s->fill);
        shoal_bufpool_destroy(s->dio);
        shoal_pipes_destroy(s->pipes);
        shoal_put_srv_destroy(s->put);
        shoal_store_sizes_destroy(s->sizes);
        pthread_mutex_destroy(&s->cap_mu);
        pthread_mutex_destroy(&s->info_mu);
        shoal_hs_key_clear(&s->key);
        free(s);
        return NULL;
}

void shoal_server_set_group(struct shoal_server *s, struct shoal_group *g)
{
        atomic_store(&s->group, g);
}

void shoal_server_addrs(const struct shoal_server *s, char tcp[64], char iorpc[64])
{
        shoal_strlcpy(tcp, s->tcp_addr, 64);
        shoal_strlcpy(iorpc, s->iorpc_addr, 64);
}

static void close_all_task(void *arg)
{
        struct srv_loop *lp = arg;
        while (lp->conns)
                conn_close(lp->conns);
}

void shoal_server_stop(struct shoal_server *s)
{
        if (!s)
                return;
        /* Stop the loops first, then drain the workers (their completions are posted to loops
         * that no longer run, so each loop frees its leftovers below). */
        for (unsigned i = 0; i < s->nloops; i++) {
                struct srv_loop *lp = &s->loops[i];
                shoal_loop_stop(lp->loop);
                pthread_join(lp->thread, NULL);
        }
        pthread_mutex_lock(&s->cap_mu);
        s->stopping = true;
        struct srv_req *waiting = s->waitq;
        s->waitq = s->waitq_tail = NULL;
        s->queued = 0;
        for (int k = 0; k < SVC_M__COUNT; k++)
                svc_queue_add(s, k, -(int)s->svc_queued[k]);
        pthread_mutex_unlock(&s->cap_mu);
        while (waiting) {
                struct srv_req *next = waiting->next;
                waiting->counted = false;
                if (waiting->c) {
                        conn_put(waiting->c);
                        req_free(waiting);
                } else {
                        /* The RDMA server stops first and waits for its requests, so this
                         * only answers one that raced with the stop. */
                        waiting->status = SHOAL_ST_BUSY;
                        ext_finish(waiting);
                }
                waiting = next;
        }
        shoal_workers_destroy(s->disk);
        shoal_workers_destroy(s->fill);
        s->disk = s->fill = NULL;
        for (unsigned i = 0; i < s->nloops; i++) {
                struct srv_loop *lp = &s->loops[i];
                close_all_task(lp);
                /* Run what workers posted after the loop stopped. */
                shoal_loop_run_pending(lp->loop);
                for (int k = 0; k < 2; k++)
                        if (lp->lis[k].io.fd >= 0)
                                close(lp->lis[k].io.fd);
                shoal_loop_destroy(lp->loop);
        }
        shoal_bufpool_destroy(s->dio);
        shoal_pipes_destroy(s->pipes);
        shoal_put_srv_destroy(s->put);
        shoal_store_sizes_destroy(s->sizes);
        pthread_mutex_destroy(&s->cap_mu);
        pthread_mutex_destroy(&s->info_mu);
        shoal_hs_key_clear(&s->key);
        free(s);
}

/* ---- IORPC over RDMA hooks ---------------------------------------------------------------- */

/* Worker thread: an RDMA answer must come from a registered buffer, so cache-file and held-block
 * answers are moved into a dio buffer here (off the progress thread), then handed over. */
static void ext_finish(struct srv_req *r)
{
        struct shoal_server *s = r->s;
        if (r->status == SHOAL_ST_OK && req_orphaned(r)) {
                /* Nobody will read it (the connection only gives the answer back): no copy. */
                req_release_resources(r);
                req_refuse(r, SHOAL_ST_BUSY, "connection closed");
        }
        /* A held block whose memory is registered is written from where it is, held until
         * shoal_server_answer_done: one pass over it (the CRCs) instead of two. */
        bool direct =
                r->status == SHOAL_ST_OK && r->src == SRC_HELD && atomic_load(&s->rdma_held_direct);
        if (direct) {
                req_build_answer(r);
        } else if (r->status == SHOAL_ST_OK && r->src != SRC_BUF) {
                /* RDMA answers hold a buffer only until the write completes, so waiting a little
                 * here does not tie the pool to slow readers as on TCP. */
                r->buf = shoal_bufpool_get(s->dio, 2ULL * 1000000000ULL);
                if (!r->buf) {
                        r->status = SHOAL_ST_BUSY;
                } else if (r->src == SRC_HELD) {
                        req_build_answer(r); /* CRCs from the held block, before it goes */
                        memcpy(r->buf, r->hb.data + r->off, r->len);
                        shoal_reader_release(s->cfg.reader, &r->hb);
                        r->src = SRC_BUF;
                } else if (shoal_cache_block_read_unverified(s->cfg.cache, &r->cb, r->off, r->len,
                                                             r->buf,
                                                             s->iorpc_mode == SHOAL_IORPC_PAGECACHE
                                                                     ? SHOAL_CACHE_READ_BUFFERED
                                                                     : SHOAL_CACHE_READ_DIRECT)) {
                        r->status = SHOAL_ST_INTERNAL;
                        snprintf(r->reason, sizeof(r->reason), "cache read of %.60s/%u failed",
                                 r->obj.key, r->index);
                } else {
                        r->src = SRC_BUF;
                }
        }
        if (!direct && (r->status != SHOAL_ST_OK || r->src != SRC_BUF || !r->out_len))
                req_build_answer(r);
        shoal_metric_observe(svc_metrics[r->svc].process, shoal_now_ns() - r->t_start);
        r->ans.frame = r->out;
        r->ans.frame_len = r->out_len;
        r->ans.status = r->status;
        r->ans.data = r->status != SHOAL_ST_OK ? NULL : direct ? r->hb.data + r->off : r->buf;
        r->ans.len = r->status == SHOAL_ST_OK ? r->len : 0;
        r->ans.ref = r;
        r->ext_fn(r->ext_arg, &r->ans);
}

int shoal_server_submit_rdma(struct shoal_server *s, uint64_t id, uint16_t flags,
                             const uint8_t *body, size_t body_len, shoal_server_answer_fn fn,
                             void *arg, const _Atomic bool *gone, uint32_t *status, char *why,
                             size_t whylen)
{
        struct srv_req *r = req_from_read(s, SVC_M_IORPC, SHOAL_MSG_READ, id, flags, body, body_len,
                                          true, status, why, whylen);
        if (!r)
                return *status == SHOAL_ST_VOLUME ? -EXDEV
                       : *status == SHOAL_ST_BUSY ? -ENOMEM
                                                  : -EPROTO;
        r->ext_fn = fn;
        r->ext_arg = arg;
        r->ext_gone = gone;
        req_dispatch(r);
        return 0;
}

void shoal_server_answer_done(struct shoal_server *s, struct shoal_server_answer *a)
{
        (void)s;
        req_free(a->ref);
}

void *shoal_server_dio_region(struct shoal_server *s, size_t *len)
{
        return shoal_bufpool_base(s->dio, len);
}

void *shoal_server_held_region(struct shoal_server *s, size_t *len)
{
        return shoal_reader_buffers(s->cfg.reader, len);
}

void shoal_server_rdma_held_direct(struct shoal_server *s)
{
        atomic_store(&s->rdma_held_direct, true);
}

void *shoal_server_dio_get(struct shoal_server *s, uint64_t timeout_ns)
{
        return shoal_bufpool_get(s->dio, timeout_ns);
}

void shoal_server_dio_put(struct shoal_server *s, void *buf)
{
        shoal_bufpool_put(s->dio, buf);
}

void shoal_server_set_rdma_addrs(struct shoal_server *s, char addrs[][64], unsigned n)
{
        /* The loops already run (the RDMA server needs the started server's buffers), and an
         * INFO may be answered at any time: publish under the lock the INFO handler takes. */
        pthread_mutex_lock(&s->info_mu);
        s->n_rdma = n > 4 ? 4 : n;
        for (unsigned i = 0; i < s->n_rdma; i++)
                shoal_strlcpy(s->rdma_addr[i], addrs[i], sizeof(s->rdma_addr[i]));
        pthread_mutex_unlock(&s->info_mu);
}
