/* The member's server (server/server.h): its start and stop, the event-loop threads, and the
 * hooks through which the RDMA server submits requests to the engine.
 *
 * The parts, each in its file: the request engine (engine.c: cache read by mode, single-flight
 * fill, processing cap [R4]) behind a submit/done interface that TCP and RDMA requests share;
 * TCP connections and their frames (conn.c), answers on a socket (answer.c), accepting
 * (accept.c) under the admission limits (admission.c), listening sockets (listen.c). The state
 * they share is in server_state.h. */
#include "server/server.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include "client/reader.h"
#include "common/bufpool.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "event/loop.h"
#include "metrics/metrics.h"
#include "server/accept.h"
#include "server/admission.h"
#include "server/conn.h"
#include "server/engine.h"
#include "server/listen.h"
#include "server/server_state.h"
#include "wire/handshake.h"
#include "wire/wire.h"

#define MAX_INFLIGHT_DEFAULT 2048
#define LOOP_TICK_NS         (250 * SHOAL_NS_PER_MS)
#define SPLICE_PIPE_MIN      (8L << 20) /* fs.pipe-max-size splice mode needs */

/* ---- loops --------------------------------------------------------------------------------- */

/* Loop tick: paused accepts, and the handshake, stalled-frame and stalled-send deadlines. */
static void loop_tick(void *arg)
{
        struct srv_loop *lp = arg;
        uint64_t now = shoal_now_ns();
        shoal_accept_resume(lp, now);
        shoal_conn_expire(lp, now);
}

static void *loop_main(void *arg)
{
        struct srv_loop *lp = arg;
        shoal_loop_run(lp->loop);
        return NULL;
}

static unsigned loop_count(const struct shoal_server_config *cfg)
{
        unsigned threads = cfg->threads;
        if (!threads) {
                long n = sysconf(_SC_NPROCESSORS_ONLN);
                threads = n > 0 ? (unsigned)n : 1;
        }
        return SHOAL_MIN(threads, (unsigned)SHOAL_SERVER_LOOPS_MAX);
}

/* Listens on LIS (the IP:*PORT of all loops' listeners of its service). */
static int listener_open(struct srv_listener *lis, const char *ip, uint16_t *port, bool first,
                         char *err, size_t errlen)
{
        int fd = shoal_listen_bind(ip, port, first, err, errlen);
        if (fd < 0)
                return -1;
        lis->io.fd = fd;
        shoal_loop_add(lis->lp->loop, &lis->io, EPOLLIN);
        return 0;
}

/* Creates NLOOPS loops, each with its listeners (IORPC only when on). */
static int loops_open(struct shoal_server *s, const char *ip, uint16_t pool_port, unsigned nloops,
                      char *err, size_t errlen)
{
        uint16_t rpc_port = 0;
        for (unsigned i = 0; i < nloops; i++) {
                struct srv_loop *lp = &s->loops[i];
                lp->loop = shoal_loop_create();
                if (!lp->loop) {
                        snprintf(err, errlen, "cannot create event loop");
                        return -1;
                }
                s->nloops++;
                if (listener_open(&lp->lis[0], ip, &pool_port, i == 0, err, errlen) ||
                    (s->iorpc_on && listener_open(&lp->lis[1], ip, &rpc_port, i == 0, err, errlen)))
                        return -1;
                shoal_loop_set_tick(lp->loop, LOOP_TICK_NS, loop_tick, lp);
        }
        snprintf(s->tcp_addr, sizeof(s->tcp_addr), "%s:%u", ip, pool_port);
        if (s->iorpc_on)
                snprintf(s->iorpc_addr, sizeof(s->iorpc_addr), "%s:%u", ip, rpc_port);
        return 0;
}

static int threads_start(struct shoal_server *s, char *err, size_t errlen)
{
        for (unsigned i = 0; i < s->nloops; i++) {
                struct srv_loop *lp = &s->loops[i];
                if (shoal_thread_create(&lp->thread, loop_main, lp)) {
                        snprintf(err, errlen, "cannot start loop thread");
                        return -1;
                }
                lp->running = true;
                pthread_setname_np(lp->thread, "shoal-loop");
        }
        return 0;
}

/* ---- start and stop ------------------------------------------------------------------------ */

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

/* The group key and this member's id; the secret itself is not kept. */
static int identity_set(struct shoal_server *s, const struct shoal_server_config *cfg, char *err,
                        size_t errlen)
{
        if (shoal_hs_key_init(&s->key, &cfg->secret) ||
            shoal_strlcpy(s->member_id, cfg->member_id ? cfg->member_id : "",
                          sizeof(s->member_id)) >= sizeof(s->member_id)) {
                snprintf(err, errlen,
                         "refusing a group secret shorter than %d bytes or a member id longer "
                         "than %d characters",
                         SHOAL_SECRET_MIN, SHOAL_WIRE_MEMBER_ID_MAX);
                return -1;
        }
        return 0;
}

/* The mode in force, the limits the fds allow for NLOOPS loops, and the engine under them. */
static int engine_open(struct shoal_server *s, const struct shoal_server_config *cfg,
                       unsigned nloops, char *err, size_t errlen)
{
        s->iorpc_on = cfg->iorpc_mode != SHOAL_IORPC_DISABLE;
        s->iorpc_mode = cfg->iorpc_mode;
        s->pipe_max = read_pipe_max();
        if (s->iorpc_mode == SHOAL_IORPC_SPLICE && (s->pipe_max < SPLICE_PIPE_MIN || cfg->rdma)) {
                log_warn("server",
                         "splice iorpc is disabled since max pipe size is %ld or RDMA is "
                         "enabled, use dio instead",
                         s->pipe_max);
                s->iorpc_mode = SHOAL_IORPC_DIO;
        }
        s->lim.max_inflight = cfg->max_inflight ? cfg->max_inflight : MAX_INFLIGHT_DEFAULT;
        shoal_adm_limits_derive(&s->lim, nloops, s->iorpc_mode == SHOAL_IORPC_SPLICE);
        /* The cap in force: the fds may have lowered it. */
        shoal_metric_gauge_set(SHOAL_M_remotecache_inflight_limit, s->lim.max_inflight);
        struct shoal_engine_config ec = {.vol = cfg->vol,
                                         .reader = cfg->reader,
                                         .cache = cfg->cache,
                                         .cache_try_dio = cfg->cache_try_dio,
                                         .iorpc_mode = s->iorpc_mode,
                                         .max_inflight = s->lim.max_inflight,
                                         .npipes = s->lim.npipes};
        s->engine = shoal_engine_create(&ec);
        if (!s->engine) {
                snprintf(err, errlen, "cannot start server workers");
                return -1;
        }
        return 0;
}

/* A server with nothing started: every part is absent, which shoal_server_stop knows. */
static struct shoal_server *server_new(const struct shoal_server_config *cfg)
{
        struct shoal_server *s = calloc(1, sizeof(*s));
        if (!s)
                return NULL;
        s->vol = cfg->vol;
        s->reader = cfg->reader;
        pthread_mutex_init(&s->info_mu, NULL);
        for (unsigned i = 0; i < SHOAL_SERVER_LOOPS_MAX; i++) {
                struct srv_loop *lp = &s->loops[i];
                lp->s = s;
                shoal_list_init(&lp->conns);
                shoal_adm_init(&lp->adm, &shoal_conn_adm_ops, &s->lim, &s->nconns);
                for (int k = 0; k < 2; k++) {
                        lp->lis[k].io.fd = -1;
                        lp->lis[k].io.fn = shoal_accept_event;
                        lp->lis[k].io.arg = &lp->lis[k];
                        lp->lis[k].lp = lp;
                        lp->lis[k].service = k == 0 ? SHOAL_SERVICE_POOL : SHOAL_SERVICE_IORPC;
                }
        }
        return s;
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
        struct shoal_server *s = server_new(cfg);
        if (!s) {
                snprintf(err, errlen, "out of memory");
                return NULL;
        }
        unsigned nloops = loop_count(cfg);
        if (identity_set(s, cfg, err, errlen) || engine_open(s, cfg, nloops, err, errlen) ||
            loops_open(s, cfg->listen_ip, cfg->tcp_port, nloops, err, errlen) ||
            threads_start(s, err, errlen)) {
                shoal_server_stop(s);
                return NULL;
        }
        log_info("server", "max pipe size: %ld, iorpc: %s, tcp pool: %s", s->pipe_max,
                 s->iorpc_on ? shoal_iorpc_mode_name(s->iorpc_mode) : "disable",
                 cfg->cache_try_dio ? "dio" : "sendfile");
        log_info("server", "tcp pool listening on %s%s%s", s->tcp_addr,
                 s->iorpc_on ? ", iorpc on " : "", s->iorpc_on ? s->iorpc_addr : "");
        return s;
}

void shoal_server_set_group(struct shoal_server *s, struct shoal_group *g)
{
        shoal_engine_set_group(s->engine, g);
}

void shoal_server_addrs(const struct shoal_server *s, char tcp[64], char iorpc[64])
{
        shoal_strlcpy(tcp, s->tcp_addr, 64);
        shoal_strlcpy(iorpc, s->iorpc_addr, 64);
}

/* Undoes a start, however far it got. */
void shoal_server_stop(struct shoal_server *s)
{
        if (!s)
                return;
        /* Stop the loops first, then the engine (its completions are posted to loops that no
         * longer run, so each loop frees its leftovers below). */
        for (unsigned i = 0; i < s->nloops; i++) {
                struct srv_loop *lp = &s->loops[i];
                if (lp->running) {
                        shoal_loop_stop(lp->loop);
                        pthread_join(lp->thread, NULL);
                        lp->running = false;
                }
        }
        shoal_engine_stop(s->engine);
        for (unsigned i = 0; i < s->nloops; i++) {
                struct srv_loop *lp = &s->loops[i];
                shoal_conn_close_all(lp);
                /* Run what workers posted after the loop stopped. */
                shoal_loop_run_pending(lp->loop);
                for (int k = 0; k < 2; k++)
                        if (lp->lis[k].io.fd >= 0)
                                close(lp->lis[k].io.fd);
                shoal_loop_destroy(lp->loop);
        }
        shoal_engine_destroy(s->engine);
        pthread_mutex_destroy(&s->info_mu);
        shoal_hs_key_clear(&s->key);
        free(s);
}

/* ---- IORPC over RDMA hooks ----------------------------------------------------------------- */

/* An RDMA request: the engine's request first, then what the RDMA server gets back. */
struct rdma_req {
        struct shoal_req base;
        shoal_server_answer_fn fn;
        void *arg;
        struct shoal_server_answer ans;
};

/* The engine's DONE for an RDMA request (worker thread): the answer from a registered buffer. */
static void rdma_done(struct shoal_req *r)
{
        struct rdma_req *q = (struct rdma_req *)r;
        const char *data = shoal_engine_answer_registered(r);
        q->ans = (struct shoal_server_answer){.frame = r->out,
                                              .frame_len = r->out_len,
                                              .data = data,
                                              .len = data ? r->len : 0,
                                              .status = r->status,
                                              .ref = q};
        q->fn(q->arg, &q->ans);
}

int shoal_server_submit_rdma(struct shoal_server *s, uint64_t id, uint16_t flags,
                             const uint8_t *body, size_t body_len, shoal_server_answer_fn fn,
                             void *arg, const _Atomic bool *gone, uint32_t *status, char *why,
                             size_t whylen)
{
        struct shoal_req *r = shoal_engine_req_read(s->engine, SHOAL_VIA_RDMA,
                                                    sizeof(struct rdma_req), SHOAL_MSG_READ, id,
                                                    flags, body, body_len, status, why, whylen);
        if (!r)
                return *status == SHOAL_ST_VOLUME ? -EXDEV
                       : *status == SHOAL_ST_BUSY ? -ENOMEM
                                                  : -EPROTO;
        struct rdma_req *q = (struct rdma_req *)r;
        q->fn = fn;
        q->arg = arg;
        r->owner = q;
        r->peer = "rdma";
        r->gone = gone;
        r->done = rdma_done;
        shoal_engine_submit(s->engine, r);
        return 0;
}

void shoal_server_answer_done(struct shoal_server *s, struct shoal_server_answer *a)
{
        (void)s;
        shoal_engine_req_free(&((struct rdma_req *)a->ref)->base);
}

void *shoal_server_dio_region(struct shoal_server *s, size_t *len)
{
        return shoal_bufpool_base(shoal_engine_dio(s->engine), len);
}

void *shoal_server_held_region(struct shoal_server *s, size_t *len)
{
        return shoal_reader_buffers(s->reader, len);
}

void shoal_server_rdma_held_direct(struct shoal_server *s)
{
        shoal_engine_held_direct(s->engine);
}

void *shoal_server_dio_get(struct shoal_server *s, uint64_t timeout_ns)
{
        return shoal_bufpool_get(shoal_engine_dio(s->engine), timeout_ns);
}

void shoal_server_dio_put(struct shoal_server *s, void *buf)
{
        shoal_bufpool_put(shoal_engine_dio(s->engine), buf);
}

void shoal_server_set_rdma_addrs(struct shoal_server *s, char addrs[][64], unsigned n)
{
        /* The loops already run (the RDMA server needs the started server's buffers), and an
         * INFO may be answered at any time: publish under the lock the INFO handler takes. */
        pthread_mutex_lock(&s->info_mu);
        s->n_rdma = SHOAL_MIN(n, (unsigned)SHOAL_SERVER_RDMA_MAX);
        for (unsigned i = 0; i < s->n_rdma; i++)
                shoal_strlcpy(s->rdma_addr[i], addrs[i], sizeof(s->rdma_addr[i]));
        pthread_mutex_unlock(&s->info_mu);
}
