/* The IORPC client [R1, R3, R5]: many requests share a connection, matched by message id, and
 * answers come back in any order. Each connection has a receiver thread that reads an answer's
 * header, finds the waiting caller by id and receives the payload straight into that caller's
 * buffer; the caller verifies the chunk CRCs on its own thread, so checksum work spreads over the
 * callers. A caller that gives up (deadline) leaves its id in a short "abandoned" list so that a
 * late answer is drained instead of being taken for a protocol error; any other unknown or
 * mismatched answer resets the connection.
 *
 * Connections per member scale with load: every grow period a member whose busiest connection
 * carries more than the grow thresholds gets one more connection; every shrink period a member
 * whose connections all stayed under the shrink thresholds loses one (never the last). */
#include "rpc/clients.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "rpc/client_conn.h"

#define WAIT_BUCKETS 256
#define ABANDONED    256
#define MAX_PEERS    1024
#define STALL_NS     (10ULL * 1000000000ULL)
#define RESP_MAX     (28 + 4 * SHOAL_MAX_CHUNKS)

enum waiter_state {
        W_PENDING,
        W_RECV,
        W_DONE
};

struct waiter {
        uint64_t id;
        void *dst;
        uint32_t len;
        enum waiter_state state;
        int rc;
        struct shoal_wire_hdr h;
        pthread_cond_t cond; /* signalled when state becomes W_DONE */
        struct waiter *next;
        uint8_t body[RESP_MAX];
};

struct peer;

struct iconn {
        int fd;
        struct peer *peer;
        struct shoal_iorpc *cl;
        pthread_t rx;
        pthread_mutex_t send_mu;
        struct waiter *table[WAIT_BUCKETS]; /* under cl->mu */
        unsigned inflight;                  /* under cl->mu */
        uint32_t max_inflight;
        bool broken, draining;
        int refs; /* under cl->mu: the peer list, the receiver, each request */
        uint64_t abandoned[ABANDONED];
        unsigned ab_next;
        uint64_t win_bytes, win_reqs;   /* since the last grow tick (atomics) */
        uint64_t long_bytes, long_reqs; /* since the last shrink tick */
        struct iconn *next;
};

struct peer {
        char addr[64];
        struct iconn *conns;
        unsigned nconns;
        bool connecting;
        bool logged;
};

struct shoal_iorpc {
        struct shoal_iorpc_config cfg;
        struct shoal_hs_key key;
        pthread_mutex_t mu;
        pthread_cond_t cond;          /* connection set-up and the scaler sleep here */
        pthread_condattr_t cond_attr; /* CLOCK_MONOTONIC, for every waiter's condition */
        struct peer *peers;
        unsigned npeers;
        uint64_t next_id;
        bool stop;
        unsigned nrx; /* receiver threads alive */
        pthread_t scaler;
        uint64_t last_shrink;
};

static void cond_wait_deadline(pthread_cond_t *c, pthread_mutex_t *mu, uint64_t deadline)
{
        struct timespec ts = {.tv_sec = (time_t)(deadline / 1000000000ULL),
                              .tv_nsec = (long)(deadline % 1000000000ULL)};
        pthread_cond_timedwait(c, mu, &ts);
}

static struct waiter **bucket(struct iconn *ic, uint64_t id)
{
        return &ic->table[(id ^ (id >> 8)) % WAIT_BUCKETS];
}

static struct waiter *waiter_find(struct iconn *ic, uint64_t id)
{
        for (struct waiter *w = *bucket(ic, id); w; w = w->next)
                if (w->id == id)
                        return w;
        return NULL;
}

static void waiter_unlink(struct iconn *ic, struct waiter *w)
{
        for (struct waiter **pp = bucket(ic, w->id); *pp; pp = &(*pp)->next) {
                if (*pp == w) {
                        *pp = w->next;
                        ic->inflight--;
                        return;
                }
        }
}

/* Drops a reference; the last one closes. Called with cl->mu held. */
static void iconn_put_locked(struct iconn *ic)
{
        if (--ic->refs)
                return;
        close(ic->fd);
        pthread_mutex_destroy(&ic->send_mu);
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        free(ic);
}

static void peer_unlink_locked(struct iconn *ic)
{
        struct peer *p = ic->peer;
        for (struct iconn **pp = &p->conns; *pp; pp = &(*pp)->next) {
                if (*pp == ic) {
                        *pp = ic->next;
                        p->nconns--;
                        iconn_put_locked(ic);
                        return;
                }
        }
}

/* Marks IC broken: every waiter fails (retryable), no new request picks it. cl->mu held. */
static void iconn_break_locked(struct iconn *ic)
{
        if (ic->broken)
                return;
        ic->broken = true;
        shutdown(ic->fd, SHUT_RDWR);
        /* Pending callers fail now; one whose buffer the receiver is filling stays until the
         * receiver lets go of it (its recv fails at once on the shut-down socket). */
        for (unsigned b = 0; b < WAIT_BUCKETS; b++) {
                struct waiter **pp = &ic->table[b];
                while (*pp) {
                        struct waiter *w = *pp;
                        if (w->state == W_PENDING) {
                                w->state = W_DONE;
                                w->rc = -ECONNRESET;
                                pthread_cond_signal(&w->cond);
                                *pp = w->next;
                                ic->inflight--;
                        } else {
                                pp = &w->next;
                        }
                }
        }
        pthread_cond_broadcast(&ic->cl->cond);
        peer_unlink_locked(ic);
}

static bool was_abandoned(struct iconn *ic, uint64_t id)
{
        for (unsigned i = 0; i < ABANDONED; i++)
                if (ic->abandoned[i] == id && id)
                        return true;
        return false;
}

static int drain(int fd, uint32_t len)
{
        static _Thread_local char sink[65536];
        while (len) {
                uint32_t n = SHOAL_MIN(len, (uint32_t)sizeof(sink));
                int rc = shoal_rpc_recv_all(fd, sink, n, shoal_now_ns() + STALL_NS);
                if (rc)
                        return rc;
                len -= n;
        }
        return 0;
}

static void *rx_main(void *arg)
{
        struct iconn *ic = arg;
        struct shoal_iorpc *cl = ic->cl;
        uint8_t hdr[SHOAL_WIRE_HDR_LEN];
        static _Thread_local uint8_t body[RESP_MAX + 256];
        for (;;) {
                pthread_mutex_lock(&cl->mu);
                bool done = cl->stop || ic->broken || (ic->draining && !ic->inflight);
                pthread_mutex_unlock(&cl->mu);
                if (done)
                        break;
                int rc = shoal_rpc_wait_fd(ic->fd, POLLIN, shoal_now_ns() + 200000000ULL);
                if (rc == -ETIMEDOUT)
                        continue;
                struct shoal_wire_hdr h;
                if (!rc)
                        rc = shoal_rpc_recv_frame(ic->fd, &h, hdr, body, sizeof(body),
                                                  shoal_now_ns() + STALL_NS);
                if (rc)
                        break;
                pthread_mutex_lock(&cl->mu);
                struct waiter *w = waiter_find(ic, h.id);
                if (!w) {
                        bool ab = was_abandoned(ic, h.id);
                        pthread_mutex_unlock(&cl->mu);
                        if (ab && h.type == SHOAL_MSG_READ_RESP && !drain(ic->fd, h.payload_len))
                                continue;
                        if (ab && h.type == SHOAL_MSG_ERROR)
                                continue;
                        log_ratelimited(SHOAL_LOG_WARN, "iorpc",
                                        "answer with unknown id %llu from %s: resetting",
                                        (unsigned long long)h.id, ic->peer->addr);
                        break;
                }
                w->h = h;
                memcpy(w->body, body, SHOAL_MIN((size_t)h.body_len, sizeof(w->body)));
                if (h.type == SHOAL_MSG_ERROR) {
                        w->rc = shoal_rpc_status_errno(h.status);
                        w->state = W_DONE;
                        waiter_unlink(ic, w);
                        pthread_cond_signal(&w->cond);
                        pthread_mutex_unlock(&cl->mu);
                        continue;
                }
                if (h.type != SHOAL_MSG_READ_RESP || h.payload_len != w->len) {
                        pthread_mutex_unlock(&cl->mu);
                        break;
                }
                /* The caller cannot leave while its buffer is being filled. */
                w->state = W_RECV;
                pthread_mutex_unlock(&cl->mu);
                rc = shoal_rpc_recv_all(ic->fd, w->dst, w->len, shoal_now_ns() + STALL_NS);
                pthread_mutex_lock(&cl->mu);
                w->state = W_DONE;
                w->rc = rc;
                waiter_unlink(ic, w);
                __atomic_fetch_add(&ic->win_bytes, w->len, __ATOMIC_RELAXED);
                pthread_cond_signal(&w->cond);
                pthread_mutex_unlock(&cl->mu);
                if (rc)
                        break;
        }
        pthread_mutex_lock(&cl->mu);
        if (ic->draining && !ic->broken) {
                /* Scaled down: no waiter is left; just close. */
                ic->broken = true;
                shutdown(ic->fd, SHUT_RDWR);
        } else {
                iconn_break_locked(ic);
        }
        iconn_put_locked(ic);
        cl->nrx--;
        pthread_cond_broadcast(&cl->cond);
        pthread_mutex_unlock(&cl->mu);
        return NULL;
}

static struct peer *peer_find_locked(struct shoal_iorpc *cl, const char *addr)
{
        for (unsigned i = 0; i < cl->npeers; i++)
                if (!strcmp(cl->peers[i].addr, addr))
                        return &cl->peers[i];
        if (cl->npeers == MAX_PEERS)
                return NULL;
        struct peer *p = &cl->peers[cl->npeers++];
        shoal_strlcpy(p->addr, addr, sizeof(p->addr));
        return p;
}

/* Opens one more connection to P (cl->mu held on entry and exit; dropped while connecting). */
static int add_conn_locked(struct shoal_iorpc *cl, struct peer *p, uint64_t deadline)
{
        p->connecting = true;
        pthread_mutex_unlock(&cl->mu);
        struct shoal_rpc_peer peer = {0};
        int fd = shoal_rpc_connect(p->addr, SHOAL_SERVICE_IORPC, &cl->key, deadline, &peer);
        struct iconn *ic = NULL;
        if (fd >= 0) {
                ic = calloc(1, sizeof(*ic));
                if (!ic)
                        close(fd);
        }
        pthread_mutex_lock(&cl->mu);
        p->connecting = false;
        pthread_cond_broadcast(&cl->cond);
        if (fd < 0)
                return fd;
        if (!ic)
                return -ENOMEM;
        ic->fd = fd;
        ic->peer = p;
        ic->cl = cl;
        ic->max_inflight = peer.max_inflight ? peer.max_inflight : 1;
        ic->refs = 2; /* the peer list and the receiver */
        pthread_mutex_init(&ic->send_mu, NULL);
        if (pthread_create(&ic->rx, NULL, rx_main, ic)) {
                pthread_mutex_destroy(&ic->send_mu);
                close(fd);
                free(ic);
                return -EAGAIN;
        }
        pthread_detach(ic->rx);
        cl->nrx++;
        ic->next = p->conns;
        p->conns = ic;
        p->nconns++;
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        if (!p->logged) {
                p->logged = true;
                log_info("iorpc", "iorpc client started, server address %s", p->addr);
        }
        return 0;
}

/* Picks the least loaded usable connection to ADDR, opening the first one if needed. Returns it
 * with a reference, or NULL with *ERR. */
static struct iconn *pick(struct shoal_iorpc *cl, const char *addr, uint64_t deadline, int *err)
{
        pthread_mutex_lock(&cl->mu);
        struct peer *p = peer_find_locked(cl, addr);
        struct iconn *best = NULL;
        while (p && !best) {
                for (struct iconn *ic = p->conns; ic; ic = ic->next)
                        if (!ic->broken && !ic->draining &&
                            (!best || ic->inflight < best->inflight))
                                best = ic;
                if (best)
                        break;
                if (p->connecting) {
                        if (shoal_now_ns() >= deadline) {
                                *err = -ETIMEDOUT;
                                break;
                        }
                        cond_wait_deadline(&cl->cond, &cl->mu, deadline);
                        continue;
                }
                int rc = add_conn_locked(cl, p, deadline);
                if (rc) {
                        *err = rc;
                        break;
                }
        }
        if (!p)
                *err = -ENOMEM;
        if (best)
                best->refs++;
        pthread_mutex_unlock(&cl->mu);
        return best;
}

static int request_once(struct shoal_iorpc *cl, const char *addr, const struct shoal_volume *vol,
                        const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                        void *dst, uint64_t view_version, uint64_t deadline, bool *conn_fault)
{
        int err = 0;
        struct iconn *ic = pick(cl, addr, deadline, &err);
        if (!ic) {
                *conn_fault = true;
                return err;
        }
        uint8_t b[2048];
        int n = shoal_rpc_encode_read(b, sizeof(b), vol, obj, index, off, len, view_version);
        struct waiter wait_slot;
        struct waiter *w = &wait_slot;
        if (n < 0) {
                pthread_mutex_lock(&cl->mu);
                iconn_put_locked(ic);
                pthread_mutex_unlock(&cl->mu);
                return -EINVAL;
        }
        memset(w, 0, offsetof(struct waiter, body));
        pthread_cond_init(&w->cond, &cl->cond_attr);
        w->id = __atomic_add_fetch(&cl->next_id, 1, __ATOMIC_RELAXED);
        w->dst = dst;
        w->len = len;
        w->state = W_PENDING;
        pthread_mutex_lock(&cl->mu);
        int rc = 0;
        if (ic->broken) {
                rc = -ECONNRESET;
        } else {
                struct waiter **bk = bucket(ic, w->id);
                w->next = *bk;
                *bk = w;
                ic->inflight++;
        }
        pthread_mutex_unlock(&cl->mu);
        if (!rc) {
                pthread_mutex_lock(&ic->send_mu);
                rc = shoal_rpc_send_frame(ic->fd, SHOAL_MSG_READ, SHOAL_WF_FILL, w->id, b,
                                          (size_t)n, deadline);
                pthread_mutex_unlock(&ic->send_mu);
                __atomic_fetch_add(&ic->win_reqs, 1, __ATOMIC_RELAXED);
        }
        pthread_mutex_lock(&cl->mu);
        if (rc) {
                /* A half-sent frame leaves the stream out of sync: the connection is done. */
                if (!ic->broken)
                        iconn_break_locked(ic);
        } else {
                while (w->state != W_DONE) {
                        if (shoal_now_ns() >= deadline && w->state == W_PENDING) {
                                waiter_unlink(ic, w);
                                ic->abandoned[ic->ab_next++ % ABANDONED] = w->id;
                                w->state = W_DONE;
                                w->rc = -ETIMEDOUT;
                                break;
                        }
                        cond_wait_deadline(&w->cond, &cl->mu,
                                           w->state == W_RECV ? shoal_now_ns() + 100000000ULL
                                                              : deadline);
                }
                rc = w->rc;
        }
        *conn_fault = rc == -ECONNRESET || rc == -EPROTO;
        if (!rc) {
                struct shoal_wire_read_resp resp;
                if (shoal_rpc_decode_answer(SHOAL_SERVICE_IORPC, w->body, w->h.body_len, &resp) ||
                    shoal_rpc_check_answer(vol, obj, index, off, len, &w->h, &resp)) {
                        rc = -EPROTO;
                        iconn_break_locked(ic);
                        *conn_fault = true;
                } else {
                        pthread_mutex_unlock(&cl->mu);
                        rc = shoal_rpc_verify_payload(vol, obj, index, off, len, dst, &resp);
                        if (rc == -EBADMSG) {
                                pthread_mutex_lock(&ic->send_mu);
                                shoal_rpc_send_frame(ic->fd, SHOAL_MSG_CORRUPT, 0, 0, b, (size_t)n,
                                                     deadline);
                                pthread_mutex_unlock(&ic->send_mu);
                        }
                        pthread_mutex_lock(&cl->mu);
                }
        }
        iconn_put_locked(ic);
        pthread_mutex_unlock(&cl->mu);
        pthread_cond_destroy(&w->cond);
        return rc;
}

int shoal_iorpc_read(struct shoal_iorpc *cl, const char *addr, const struct shoal_volume *vol,
                     const struct shoal_object *obj, uint32_t index, uint32_t off, uint32_t len,
                     void *dst, uint64_t view_version, uint64_t deadline)
{
        int rc = -EIO;
        unsigned resets = 0, corrupt = 0;
        for (;;) {
                bool conn_fault = false;
                rc = request_once(cl, addr, vol, obj, index, off, len, dst, view_version, deadline,
                                  &conn_fault);
                if (!rc)
                        return 0;
                if (rc == -EBADMSG) {
                        log_ratelimited(SHOAL_LOG_WARN, "iorpc",
                                        "checksum mismatch in %s/%u from %s; reported", obj->key,
                                        index, addr);
                        if (++corrupt > 1)
                                return rc;
                        continue;
                }
                /* A connection reset under many requests is retried once on another
                 * connection before the member is blamed. */
                if (!conn_fault || rc == -ETIMEDOUT || ++resets > 1 || shoal_now_ns() >= deadline)
                        return rc;
        }
}

/* Grow: one more connection when the busiest one carried more than the grow thresholds over the
 * last grow period. Shrink: when every connection stayed under the shrink thresholds over the
 * shrink period, close connections down to what the total load needs at the shrink thresholds
 * (at least one). cl->mu held; dropped while connecting. */
static void scale_tick(struct shoal_iorpc *cl, bool shrink_time)
{
        double gsecs = (double)cl->cfg.grow_period_ns / 1e9;
        double ssecs = (double)cl->cfg.shrink_period_ns / 1e9;
        for (unsigned i = 0; i < cl->npeers; i++) {
                struct peer *p = &cl->peers[i];
                bool grow = false, all_low = true;
                unsigned usable = 0;
                double tot_bytes = 0, tot_reqs = 0;
                for (struct iconn *ic = p->conns; ic; ic = ic->next) {
                        if (ic->broken || ic->draining)
                                continue;
                        usable++;
                        uint64_t bytes = __atomic_exchange_n(&ic->win_bytes, 0, __ATOMIC_RELAXED);
                        uint64_t reqs = __atomic_exchange_n(&ic->win_reqs, 0, __ATOMIC_RELAXED);
                        ic->long_bytes += bytes;
                        ic->long_reqs += reqs;
                        if ((double)bytes / gsecs > (double)cl->cfg.grow_bytes_per_s ||
                            (double)reqs / gsecs > (double)cl->cfg.grow_qps)
                                grow = true;
                        if (shrink_time) {
                                double br = (double)ic->long_bytes / ssecs;
                                double qr = (double)ic->long_reqs / ssecs;
                                if (br >= (double)cl->cfg.shrink_bytes_per_s ||
                                    qr >= (double)cl->cfg.shrink_qps)
                                        all_low = false;
                                tot_bytes += br;
                                tot_reqs += qr;
                                ic->long_bytes = ic->long_reqs = 0;
                        }
                }
                if (grow && usable && usable < cl->cfg.max_conns && !p->connecting) {
                        if (!add_conn_locked(cl, p, shoal_now_ns() + 5000000000ULL))
                                log_debug("iorpc", "%s: grew to %u connections", p->addr,
                                          p->nconns);
                        continue;
                }
                if (!shrink_time || !all_low || usable <= 1)
                        continue;
                unsigned need = (unsigned)(tot_bytes / (double)cl->cfg.shrink_bytes_per_s) + 1;
                unsigned need_q = (unsigned)(tot_reqs / (double)cl->cfg.shrink_qps) + 1;
                if (need_q > need)
                        need = need_q;
                while (usable > need) {
                        struct iconn *victim = NULL;
                        for (struct iconn *ic = p->conns; ic; ic = ic->next)
                                if (!ic->broken && !ic->draining &&
                                    (!victim || ic->inflight < victim->inflight))
                                        victim = ic;
                        if (!victim)
                                break;
                        victim->draining = true;
                        peer_unlink_locked(victim); /* no new requests; closes when idle */
                        usable--;
                }
                log_debug("iorpc", "%s: shrank to %u connections", p->addr, p->nconns);
        }
}

static void *scaler_main(void *arg)
{
        struct shoal_iorpc *cl = arg;
        pthread_mutex_lock(&cl->mu);
        uint64_t next = shoal_now_ns() + cl->cfg.grow_period_ns;
        cl->last_shrink = shoal_now_ns();
        while (!cl->stop) {
                cond_wait_deadline(&cl->cond, &cl->mu, next);
                uint64_t now = shoal_now_ns();
                if (cl->stop)
                        break;
                if (now < next)
                        continue;
                bool shrink = now - cl->last_shrink >= cl->cfg.shrink_period_ns;
                if (shrink)
                        cl->last_shrink = now;
                scale_tick(cl, shrink);
                next = now + cl->cfg.grow_period_ns;
        }
        pthread_mutex_unlock(&cl->mu);
        return NULL;
}

struct shoal_iorpc *shoal_iorpc_create(const struct shoal_iorpc_config *cfg)
{
        struct shoal_iorpc *cl = calloc(1, sizeof(*cl));
        if (!cl)
                return NULL;
        cl->cfg = *cfg;
        if (!cl->cfg.grow_period_ns)
                cl->cfg.grow_period_ns = 1000000000ULL;
        if (shoal_config_env()->iorpc_scale_period_ns)
                cl->cfg.grow_period_ns = shoal_config_env()->iorpc_scale_period_ns;
        if (!cl->cfg.shrink_period_ns)
                cl->cfg.shrink_period_ns = 60 * cl->cfg.grow_period_ns;
        if (!cl->cfg.grow_bytes_per_s)
                cl->cfg.grow_bytes_per_s = 300 * SHOAL_MiB;
        if (!cl->cfg.grow_qps)
                cl->cfg.grow_qps = 1000;
        if (!cl->cfg.shrink_bytes_per_s)
                cl->cfg.shrink_bytes_per_s = 100 * SHOAL_MiB;
        if (!cl->cfg.shrink_qps)
                cl->cfg.shrink_qps = 500;
        if (!cl->cfg.max_conns)
                cl->cfg.max_conns = 16;
        cl->peers = calloc(MAX_PEERS, sizeof(*cl->peers));
        /* Ids only need to be unique per connection; see pool_client.c. */
        if (!cl->peers || shoal_hs_key_init(&cl->key, &cfg->secret) ||
            shoal_random_bytes(&cl->next_id, sizeof(cl->next_id)))
                goto out_free;
        pthread_mutex_init(&cl->mu, NULL);
        pthread_condattr_init(&cl->cond_attr);
        pthread_condattr_setclock(&cl->cond_attr, CLOCK_MONOTONIC);
        pthread_cond_init(&cl->cond, &cl->cond_attr);
        cl->next_id >>= 1; /* never wraps to 0 in practice; 0 marks an empty abandoned slot */
        if (pthread_create(&cl->scaler, NULL, scaler_main, cl)) {
                pthread_mutex_destroy(&cl->mu);
                pthread_cond_destroy(&cl->cond);
                goto out_free;
        }
        return cl;
out_free:
        free(cl->peers);
        shoal_hs_key_clear(&cl->key);
        free(cl);
        return NULL;
}

void shoal_iorpc_destroy(struct shoal_iorpc *cl)
{
        if (!cl)
                return;
        pthread_mutex_lock(&cl->mu);
        cl->stop = true;
        pthread_cond_broadcast(&cl->cond);
        for (unsigned i = 0; i < cl->npeers; i++)
                while (cl->peers[i].conns)
                        iconn_break_locked(cl->peers[i].conns);
        pthread_mutex_unlock(&cl->mu);
        pthread_join(cl->scaler, NULL);
        /* Receivers hold their own references and leave within their poll period. */
        pthread_mutex_lock(&cl->mu);
        while (cl->nrx)
                cond_wait_deadline(&cl->cond, &cl->mu, shoal_now_ns() + 100000000ULL);
        pthread_mutex_unlock(&cl->mu);
        pthread_mutex_destroy(&cl->mu);
        pthread_cond_destroy(&cl->cond);
        pthread_condattr_destroy(&cl->cond_attr);
        free(cl->peers);
        shoal_hs_key_clear(&cl->key);
        free(cl);
}

unsigned shoal_iorpc_conns(struct shoal_iorpc *cl, const char *addr)
{
        unsigned n = 0;
        pthread_mutex_lock(&cl->mu);
        for (unsigned i = 0; i < cl->npeers; i++)
                if (!strcmp(cl->peers[i].addr, addr))
                        n = cl->peers[i].nconns;
        pthread_mutex_unlock(&cl->mu);
        return n;
}
