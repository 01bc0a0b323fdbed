/* The IORPC client [R1, R3, R5]: many requests share a connection, matched by message id, and
 * answers come back in any order.
 *
 * The receive path is built for few wake-ups and one pass over the data while it is hot. There
 * is no receiver thread: the callers of a connection take turns reading it (leader/follower).
 * The caller that finds nobody reading becomes the reader; it reads frames through a small
 * staging buffer (a frame's header and body, often with the start of its payload, in one recv),
 * finds the waiting caller by id, checks the answer against the request, and receives the
 * payload straight into that caller's buffer in pieces of SHOAL_RPC_LOWAT_PIECE bytes with
 * SO_RCVLOWAT set: one wake-up per piece instead of one per segment. Each piece's chunk CRCs are
 * checked right after it landed, while it is still in this CPU's cache. When its own answer is
 * in, the reader hands the socket to the oldest caller still waiting (one futex wake-up) and
 * returns. A caller alone on its connection thus sleeps only in the kernel (recv, poll) and is
 * woken once its answer is there, as on a pool connection; a dedicated receiver thread cost a
 * second wake-up and a thread switch per answer, paid partly by the member on loopback (the profile
 * is in docs/benchmarks.md). Other callers sleep on a futex in their own waiter and are woken once,
 * with the verdict or with the reader's role. A caller that gives up (deadline) leaves its id in
 * a short "abandoned" list so that a late answer is drained instead of being taken for a protocol
 * error; any other unknown or mismatched answer resets the connection.
 *
 * Locks: cl->mu guards the peers and their connection lists (and is taken before an ic->mu);
 * ic->mu guards one connection's waiters and its reader role; ic->send_mu orders whole request
 * frames on its socket. Connection references and the in-flight count are atomics, so a request
 * takes cl->mu once.
 *
 * Connections per member scale with load: every grow period a member whose busiest connection
 * carries more than the grow thresholds gets one more connection; every shrink period a member
 * whose connections all stayed under the shrink thresholds loses one (never the last). */
#include "transport/clients.h"

#include <errno.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <poll.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/config.h"
#include "common/list.h"
#include "common/log.h"
#include "common/thread.h"
#include "common/util.h"
#include "metrics/metrics.h"
#include "transport/client_conn.h"
#include "transport/transport.h"

#define ABANDONED      256
#define MAX_PEERS      1024
#define STALL_NS       (10 * SHOAL_NS_PER_SEC)
#define RX_POLL_MS     200 /* a reader looks at its deadline and the flags this often when idle */
#define REQ_MAX        2048
#define RECV_NAP_NS    (100 * SHOAL_NS_PER_MS) /* a waiter for its payload looks this often */
#define GROW_WITHIN_NS (5 * SHOAL_NS_PER_SEC)  /* a connection the scaler adds connects in time */
#define PUT_IDLE       16                      /* idle put connections kept per member */
/* Staging holds any whole frame without its payload: the largest body is a READ_RESP naming the
 * CRCs of a 64 MiB block (28 + 4 x 1024 bytes). */
#define STAGE 16384

enum waiter_state {
        W_PENDING, /* among the waiters; the caller may still give up */
        W_LEAD,    /* among the waiters, and handed the reader's role by the last reader */
        W_RECV,    /* taken by the reader, which is filling the caller's buffer */
        W_DONE     /* RC is final; the reader no longer touches the waiter */
};

struct waiter {
        uint64_t id;
        void *dst;
        uint32_t off, len;
        struct shoal_block_id want;
        uint32_t state; /* futex word, enum waiter_state (atomic) */
        int rc;
        struct waiter *older, *newer; /* the connection's waiters, in the order sent */
};

struct peer;

struct iconn {
        int fd;
        struct peer *peer;
        struct shoal_iorpc *cl;
        pthread_mutex_t mu;      /* the waiters, inflight, the abandoned ids, reading */
        pthread_mutex_t send_mu; /* one whole request frame at a time */
        /* Answers come back nearly in order, so finding one from the oldest end is short, and
         * the oldest waiting caller is the one the reader's role passes to. */
        struct waiter *oldest, *newest;
        unsigned inflight; /* written under mu, read atomically by pick */
        uint32_t max_inflight;
        bool reading;  /* a caller holds the reader's role (the socket, the staging buffer) */
        bool broken;   /* atomic; set under cl->mu */
        bool draining; /* atomic; set under cl->mu */
        int refs;      /* atomic: the peer list, each request */
        uint64_t abandoned[ABANDONED];
        unsigned ab_next;
        uint64_t win_bytes, win_reqs;   /* since the last grow tick (atomics) */
        uint64_t long_bytes, long_reqs; /* since the last shrink tick */
        struct shoal_list link;         /* in its peer's conns (unlinked: draining or broken) */
        /* the reader's own, handed from reader to reader under mu */
        int lowat;
        size_t s_start, s_end;
        uint8_t stage[STAGE];
};

struct peer {
        char addr[64];
        struct shoal_list conns; /* struct iconn */
        unsigned nconns;
        bool connecting;
        bool logged;
};

struct shoal_iorpc {
        struct shoal_iorpc_config cfg;
        struct shoal_hs_key key;
        pthread_mutex_t mu;
        pthread_cond_t cond;          /* connection set-up and the scaler sleep here */
        pthread_condattr_t cond_attr; /* CLOCK_MONOTONIC */
        struct peer *peers;
        unsigned npeers;
        uint64_t next_id;
        bool stop; /* atomic; set under mu */
        pthread_t scaler;
        uint64_t last_shrink;
};

static void cond_wait_deadline(pthread_cond_t *c, pthread_mutex_t *mu, uint64_t deadline)
{
        struct timespec ts = shoal_ns_timespec(deadline);
        pthread_cond_timedwait(c, mu, &ts);
}

static bool flag_is(const bool *flag)
{
        return __atomic_load_n(flag, __ATOMIC_ACQUIRE);
}

/* ---- waiters ------------------------------------------------------------------------------- */

/* Sleeps until W's state is no longer SEEN or the monotonic time UNTIL (spurious returns are
 * fine: callers loop). */
static void waiter_sleep(struct waiter *w, uint32_t seen, uint64_t until)
{
        struct timespec ts = shoal_ns_timespec(until);
        syscall(SYS_futex, &w->state, FUTEX_WAIT_BITSET_PRIVATE, seen, &ts, NULL,
                FUTEX_BITSET_MATCH_ANY);
}

static void waiter_set(struct waiter *w, uint32_t state, bool wake)
{
        __atomic_store_n(&w->state, state, __ATOMIC_RELEASE);
        if (wake)
                syscall(SYS_futex, &w->state, FUTEX_WAKE_PRIVATE, 1, NULL, NULL, 0);
}

/* Gives W its verdict RC and wakes its caller (unless WAKE is false: the reader's own). W must
 * be out of the waiters (or owned by the reader); after the store the caller may return at once,
 * so W is not touched again (waking a futex word that is gone is harmless: the kernel only uses
 * the address as a key). */
static void waiter_finish(struct waiter *w, int rc, bool wake)
{
        w->rc = rc;
        waiter_set(w, W_DONE, wake);
}

static struct waiter *waiter_find(struct iconn *ic, uint64_t id)
{
        for (struct waiter *w = ic->oldest; w; w = w->newer)
                if (w->id == id)
                        return w;
        return NULL;
}

/* ic->mu held. */
static void waiter_link(struct iconn *ic, struct waiter *w)
{
        w->older = ic->newest;
        w->newer = NULL;
        *(ic->newest ? &ic->newest->newer : &ic->oldest) = w;
        ic->newest = w;
        __atomic_store_n(&ic->inflight, ic->inflight + 1, __ATOMIC_RELAXED);
}

/* W is among the waiters (W_PENDING or W_LEAD): every unlink moves it on to W_RECV or W_DONE
 * under the same hold of ic->mu, so it is never unlinked twice. ic->mu held. */
static void waiter_unlink(struct iconn *ic, struct waiter *w)
{
        *(w->older ? &w->older->newer : &ic->oldest) = w->newer;
        *(w->newer ? &w->newer->older : &ic->newest) = w->older;
        __atomic_store_n(&ic->inflight, ic->inflight - 1, __ATOMIC_RELAXED);
}

/* The reader takes W out of the waiters to finish it after ic->mu is let go: W_RECV keeps its
 * caller from giving up meanwhile, and so from leaving while W is still to be written. ic->mu
 * held. */
static void waiter_take_locked(struct iconn *ic, struct waiter *w)
{
        waiter_unlink(ic, w);
        __atomic_store_n(&w->state, W_RECV, __ATOMIC_RELAXED);
}

/* W's caller gives up on its request: a late answer is drained. ic->mu held, W pending. */
static void waiter_abandon_locked(struct iconn *ic, struct waiter *w)
{
        waiter_unlink(ic, w);
        ic->abandoned[ic->ab_next++ % ABANDONED] = w->id;
        waiter_finish(w, -ETIMEDOUT, false);
}

/* ---- connections --------------------------------------------------------------------------- */

static void iconn_put(struct iconn *ic)
{
        if (__atomic_sub_fetch(&ic->refs, 1, __ATOMIC_ACQ_REL))
                return;
        close(ic->fd);
        pthread_mutex_destroy(&ic->mu);
        pthread_mutex_destroy(&ic->send_mu);
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, -1);
        free(ic);
}

static struct iconn *iconn_of(struct shoal_list *n)
{
        return shoal_list_entry(n, struct iconn, link);
}

/* Takes IC out of its peer's list (a no-op when it is out already). cl->mu held. */
static void peer_unlink_locked(struct iconn *ic)
{
        if (!shoal_list_linked(&ic->link))
                return;
        shoal_list_del(&ic->link);
        ic->peer->nconns--;
        iconn_put(ic);
}

/* Marks IC broken: every waiter not being filled fails (retryable), no new request picks it. The
 * one whose buffer the reader is filling is finished by the reader (its recv fails at once on
 * the shut-down socket), and so is the reader's own. cl->mu held. */
static void iconn_break_locked(struct iconn *ic)
{
        if (flag_is(&ic->broken))
                return;
        __atomic_store_n(&ic->broken, true, __ATOMIC_RELEASE);
        shutdown(ic->fd, SHUT_RDWR);
        pthread_mutex_lock(&ic->mu);
        for (struct waiter *w = ic->oldest, *nx; w; w = nx) {
                nx = w->newer;
                uint32_t st = __atomic_load_n(&w->state, __ATOMIC_RELAXED);
                if (st == W_PENDING || st == W_LEAD) {
                        waiter_unlink(ic, w);
                        waiter_finish(w, -ECONNRESET, true);
                }
        }
        pthread_mutex_unlock(&ic->mu);
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

/* ---- the reader ---------------------------------------------------------------------------- */

static bool rx_should_stop(struct iconn *ic)
{
        return flag_is(&ic->cl->stop) || flag_is(&ic->broken);
}

/* One recv. Without MSG_DONTWAIT in FLAGS it sleeps until something is queued, at most
 * RX_POLL_MS (SO_RCVTIMEO): a reader between frames waits there, woken once per frame. Returns
 * the bytes received, 0 when none are queued, or -ECONNRESET. */
static ssize_t rx_recv(struct iconn *ic, void *buf, size_t len, int flags)
{
        ssize_t n = recv(ic->fd, buf, len, flags);
        if (n > 0)
                return n;
        if (n < 0 && (errno == EAGAIN || errno == EINTR))
                return 0;
        return -ECONNRESET;
}

/* Sleeps until the socket is readable or MS milliseconds passed. */
static void rx_poll(struct iconn *ic, int ms)
{
        struct pollfd pfd = {.fd = ic->fd, .events = POLLIN};
        poll(&pfd, 1, ms);
}

static void rx_lowat(struct iconn *ic, int want)
{
        if (want != ic->lowat && !setsockopt(ic->fd, SOL_SOCKET, SO_RCVLOWAT, &want, sizeof(want)))
                ic->lowat = want;
}

/* Makes at least N bytes available in the staging buffer. IDLE: between frames, where waiting
 * is normal: returns -EAGAIN after a quiet poll period so that the reader can look at its
 * deadline. Inside a frame a peer that stalls for STALL_NS is dropped. Returns 0 or -errno. */
static int stage_need(struct iconn *ic, size_t n, bool idle)
{
        uint64_t t0 = 0;
        while (ic->s_end - ic->s_start < n) {
                if (ic->s_start + n > STAGE) {
                        memmove(ic->stage, ic->stage + ic->s_start, ic->s_end - ic->s_start);
                        ic->s_end -= ic->s_start;
                        ic->s_start = 0;
                }
                ssize_t got = rx_recv(ic, ic->stage + ic->s_end, STAGE - ic->s_end, 0);
                if (got < 0)
                        return (int)got;
                if (got > 0) {
                        ic->s_end += (size_t)got;
                        continue;
                }
                if (rx_should_stop(ic))
                        return -ECONNRESET;
                if (idle && ic->s_end == ic->s_start)
                        return -EAGAIN;
                uint64_t now = shoal_now_ns();
                if (!t0)
                        t0 = now;
                else if (now - t0 > STALL_NS)
                        return -ETIMEDOUT;
        }
        return 0;
}

/* Splits LEFT payload bytes into equal pieces of at most SHOAL_RPC_LOWAT_PIECE (the last one up
 * to a few bytes shorter) and sets the low mark to the smallest: one setsockopt serves every
 * piece of the payload. Returns the piece size. */
static uint32_t rx_pieces(struct iconn *ic, uint32_t left)
{
        uint32_t n = (left + SHOAL_RPC_LOWAT_PIECE - 1) / SHOAL_RPC_LOWAT_PIECE;
        uint32_t piece = (left + n - 1) / n;
        uint32_t smallest = left - (n - 1) * piece;
        rx_lowat(ic, smallest >= SHOAL_RPC_LOWAT_MIN ? (int)smallest : 1);
        return piece;
}

/* Moves LEN payload bytes into DST (NULL: drop them): first what the staging buffer holds, then
 * straight from the socket in pieces, calling CHECK after each piece. Returns 0 or -errno. */
static int rx_payload(struct iconn *ic, char *dst, uint32_t len, void (*check)(void *, uint32_t),
                      void *arg)
{
        static _Thread_local char sink[SHOAL_RPC_LOWAT_PIECE];
        uint32_t got = (uint32_t)SHOAL_MIN((size_t)len, ic->s_end - ic->s_start);
        if (dst)
                memcpy(dst, ic->stage + ic->s_start, got);
        ic->s_start += got;
        if (check)
                check(arg, got);
        uint64_t last = shoal_now_ns();
        int rc = 0;
        uint32_t piece = got < len ? rx_pieces(ic, len - got) : 0;
        while (got < len) {
                uint32_t want = SHOAL_MIN(len - got, piece);
                if (ic->lowat > (int)want) /* only after a short receive: never above the want */
                        rx_lowat(ic, want >= SHOAL_RPC_LOWAT_MIN ? (int)want : 1);
                /* Never a blocking recv here: one that has taken part of a piece sleeps until
                 * the queue alone reaches the low mark again, which the rest of the piece never
                 * does. poll wakes once the low mark is queued, and the recv then takes it (and
                 * whatever else of the payload is queued) without sleeping. */
                ssize_t n =
                        rx_recv(ic, dst ? dst + got : sink, dst ? len - got : want, MSG_DONTWAIT);
                if (n < 0) {
                        rc = (int)n;
                        break;
                }
                if (n == 0) {
                        if (rx_should_stop(ic)) {
                                rc = -ECONNRESET;
                                break;
                        }
                        if (shoal_now_ns() - last > STALL_NS) {
                                rc = -ETIMEDOUT;
                                break;
                        }
                        rx_poll(ic, RX_POLL_MS);
                        continue;
                }
                got += (uint32_t)n;
                last = shoal_now_ns();
                if (check)
                        check(arg, got);
        }
        rx_lowat(ic, 1);
        return rc;
}

/* The chunk checks of one payload, piece by piece as it lands. */
struct verify {
        const struct waiter *w;
        const struct shoal_wire_read_resp *resp;
        uint32_t checked; /* payload bytes verified so far (chunk-aligned, or all) */
        bool bad;
};

static void verify_upto(void *arg, uint32_t got)
{
        struct verify *v = arg;
        uint32_t upto = got == v->w->len ? got : got / SHOAL_CHUNK_SIZE * SHOAL_CHUNK_SIZE;
        if (upto <= v->checked)
                return;
        if (!v->bad && !shoal_rpc_verify_chunks(&v->w->want, v->w->dst, v->checked, upto, v->resp))
                v->bad = true;
        v->checked = upto;
}

/* An answer nobody waits for: dropped when its caller gave up on it, else the stream is not the
 * one we think it is. Returns 0 or -errno. */
static int rx_orphan(struct iconn *ic, const struct shoal_wire_hdr *h, bool abandoned)
{
        if (!abandoned) {
                log_ratelimited(SHOAL_LOG_WARN, "iorpc",
                                "answer with unknown id %llu from %s: resetting",
                                (unsigned long long)h->id, ic->peer->addr);
                return -EPROTO;
        }
        return h->payload_len ? rx_payload(ic, NULL, h->payload_len, NULL, NULL) : 0;
}

/* A READ_RESP whose header and body (BODY, checked) are in the staging buffer; ME is the
 * reader's own waiter (finished without a wake-up). */
static int rx_read_resp(struct iconn *ic, const struct shoal_wire_hdr *h, const uint8_t *body,
                        const struct waiter *me)
{
        struct shoal_wire_read_resp resp;
        if (shoal_rpc_decode_answer(SHOAL_SERVICE_IORPC, body, h->body_len, &resp))
                return -EPROTO;
        pthread_mutex_lock(&ic->mu);
        struct waiter *w = waiter_find(ic, h->id);
        if (!w) {
                bool ab = was_abandoned(ic, h->id);
                pthread_mutex_unlock(&ic->mu);
                return rx_orphan(ic, h, ab);
        }
        /* (No waiter is W_LEAD while a reader reads: the role is handed over only when the
         * reader stops.) */
        waiter_take_locked(ic, w);
        pthread_mutex_unlock(&ic->mu);
        if (h->payload_len != w->len ||
            shoal_rpc_check_answer_id(&w->want, w->off, w->len, h, &resp)) {
                waiter_finish(w, -EPROTO, w != me);
                return -EPROTO;
        }
        struct verify v = {.w = w, .resp = &resp};
        int rc = rx_payload(ic, w->dst, w->len, verify_upto, &v);
        __atomic_fetch_add(&ic->win_bytes, w->len, __ATOMIC_RELAXED);
        waiter_finish(w, rc ? rc : v.bad ? -EBADMSG : 0, w != me);
        return rc;
}

static int rx_error(struct iconn *ic, const struct shoal_wire_hdr *h, const uint8_t *body,
                    const struct waiter *me)
{
        pthread_mutex_lock(&ic->mu);
        struct waiter *w = waiter_find(ic, h->id);
        bool ab = !w && was_abandoned(ic, h->id);
        if (w)
                waiter_take_locked(ic, w);
        pthread_mutex_unlock(&ic->mu);
        if (!w)
                return rx_orphan(ic, h, ab);
        waiter_finish(w, shoal_rpc_error_errno(h->status, body, h->body_len), w != me);
        return 0;
}

/* Receives and dispatches one frame. Returns 0, -EAGAIN (nothing arrived for a poll period) or
 * another -errno: the connection is done. */
static int rx_frame(struct iconn *ic, const struct waiter *me)
{
        int rc = stage_need(ic, SHOAL_WIRE_HDR_LEN, true);
        if (rc)
                return rc;
        struct shoal_wire_hdr h;
        if (shoal_wire_hdr_decode(ic->stage + ic->s_start, &h) ||
            h.body_len > STAGE - SHOAL_WIRE_HDR_LEN)
                return -EPROTO;
        if ((rc = stage_need(ic, SHOAL_WIRE_HDR_LEN + h.body_len, false)))
                return rc;
        const uint8_t *hdr = ic->stage + ic->s_start;
        if (!shoal_wire_crc_ok(hdr, hdr + SHOAL_WIRE_HDR_LEN, h.body_len))
                return -EPROTO;
        /* The frame stays in the buffer until the next stage_need; only its payload follows. */
        ic->s_start += SHOAL_WIRE_HDR_LEN + h.body_len;
        switch (h.type) {
        case SHOAL_MSG_READ_RESP:
                return rx_read_resp(ic, &h, hdr + SHOAL_WIRE_HDR_LEN, me);
        case SHOAL_MSG_ERROR:
                return rx_error(ic, &h, hdr + SHOAL_WIRE_HDR_LEN, me);
        default:
                log_ratelimited(SHOAL_LOG_WARN, "iorpc", "message type %u from %s: resetting",
                                h.type, ic->peer->addr);
                return -EPROTO;
        }
}

/* Gives up the reader's role: to the oldest caller still waiting, whose answer is likely the
 * next one, or to nobody (the next caller takes it). */
static void reader_leave(struct iconn *ic)
{
        pthread_mutex_lock(&ic->mu);
        struct waiter *next = NULL;
        if (!flag_is(&ic->broken))
                for (struct waiter *w = ic->oldest; w && !next; w = w->newer)
                        if (__atomic_load_n(&w->state, __ATOMIC_RELAXED) == W_PENDING)
                                next = w;
        ic->reading = next != NULL;
        if (next)
                waiter_set(next, W_LEAD, true);
        pthread_mutex_unlock(&ic->mu);
}

/* Takes the reader's role for ME if nobody holds it (or it was handed to ME). ic->mu held. */
static bool reader_take_locked(struct iconn *ic, struct waiter *me)
{
        uint32_t st = __atomic_load_n(&me->state, __ATOMIC_RELAXED);
        if (st == W_LEAD) {
                __atomic_store_n(&me->state, W_PENDING, __ATOMIC_RELAXED);
                return true;
        }
        if (st != W_PENDING || ic->reading || flag_is(&ic->broken))
                return false;
        ic->reading = true;
        return true;
}

/* ME reads the connection until its own answer is in, its DEADLINE passes (checked between
 * frames: a reader kept busy by other callers' answers still gives up in time), or the
 * connection fails; then hands the role on. */
static void reader_run(struct iconn *ic, struct waiter *me, uint64_t deadline)
{
        while (__atomic_load_n(&me->state, __ATOMIC_ACQUIRE) != W_DONE) {
                int rc = rx_frame(ic, me);
                if (rc && rc != -EAGAIN) {
                        pthread_mutex_lock(&ic->cl->mu);
                        iconn_break_locked(ic); /* fails ME too, unless it is done */
                        pthread_mutex_unlock(&ic->cl->mu);
                        break;
                }
                if (__atomic_load_n(&me->state, __ATOMIC_ACQUIRE) == W_DONE ||
                    shoal_now_ns() < deadline)
                        continue;
                pthread_mutex_lock(&ic->mu);
                if (__atomic_load_n(&me->state, __ATOMIC_RELAXED) == W_PENDING)
                        waiter_abandon_locked(ic, me);
                pthread_mutex_unlock(&ic->mu);
        }
        reader_leave(ic);
}

/* Waits for W's verdict, reading the connection whenever nobody else does. A caller past
 * DEADLINE whose request nobody has taken yet gives up; one whose buffer is being filled waits
 * for the reader, which is bounded by STALL_NS. */
static int waiter_wait(struct iconn *ic, struct waiter *w, uint64_t deadline)
{
        for (;;) {
                uint32_t st = __atomic_load_n(&w->state, __ATOMIC_ACQUIRE);
                if (st == W_DONE)
                        return w->rc;
                if (st != W_RECV) {
                        pthread_mutex_lock(&ic->mu);
                        bool lead = reader_take_locked(ic, w);
                        pthread_mutex_unlock(&ic->mu);
                        if (lead) {
                                reader_run(ic, w, deadline);
                                continue;
                        }
                }
                uint64_t now = shoal_now_ns();
                if (st == W_PENDING && now >= deadline) {
                        pthread_mutex_lock(&ic->mu);
                        if (__atomic_load_n(&w->state, __ATOMIC_RELAXED) == W_PENDING)
                                waiter_abandon_locked(ic, w);
                        pthread_mutex_unlock(&ic->mu);
                        continue;
                }
                waiter_sleep(w, st, st == W_RECV ? now + RECV_NAP_NS : deadline);
        }
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
        shoal_list_init(&p->conns);
        return p;
}

/* The socket of a connection: reads between frames sleep in recv and time out every RX_POLL_MS
 * (everything else passes MSG_DONTWAIT and waits in poll). Returns 0 or -errno. */
static int iconn_socket(int fd)
{
        struct timeval tv = {.tv_sec = 0, .tv_usec = RX_POLL_MS * 1000};
        int fl = fcntl(fd, F_GETFL);
        if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) ||
            setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)))
                return -errno;
        return 0;
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
                int rc = iconn_socket(fd);
                ic = rc ? NULL : calloc(1, sizeof(*ic));
                if (!ic) {
                        close(fd);
                        fd = rc ? rc : -ENOMEM;
                }
        }
        pthread_mutex_lock(&cl->mu);
        p->connecting = false;
        pthread_cond_broadcast(&cl->cond);
        if (fd < 0)
                return fd;
        ic->fd = fd;
        ic->peer = p;
        ic->cl = cl;
        ic->lowat = 1;
        ic->max_inflight = peer.max_inflight ? peer.max_inflight : 1;
        ic->refs = 1; /* the peer list */
        pthread_mutex_init(&ic->mu, NULL);
        pthread_mutex_init(&ic->send_mu, NULL);
        shoal_list_push_front(&p->conns, &ic->link);
        p->nconns++;
        shoal_metric_gauge_add(SHOAL_M_remotecache_connections, 1);
        if (!p->logged) {
                p->logged = true;
                log_info("iorpc", "iorpc client started, server address %s", p->addr);
        }
        return 0;
}

/* The least loaded usable connection of P, or NULL. cl->mu held. */
static struct iconn *least_loaded_locked(struct peer *p)
{
        struct iconn *best = NULL;
        unsigned best_n = 0;
        struct shoal_list *pos, *next;
        list_for_each (pos, next, &p->conns) {
                struct iconn *ic = iconn_of(pos);
                unsigned n = __atomic_load_n(&ic->inflight, __ATOMIC_RELAXED);
                if (!flag_is(&ic->broken) && !flag_is(&ic->draining) && (!best || n < best_n)) {
                        best = ic;
                        best_n = n;
                }
        }
        return best;
}

/* Whether IC's member closed it: one that restarted (or stopped) closed them all. An answer
 * already coming is not a hang-up. */
static bool iconn_hung_up(const struct iconn *ic)
{
        struct pollfd pfd = {.fd = ic->fd, .events = POLLRDHUP};
        return poll(&pfd, 1, 0) > 0 && (pfd.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

/* Drops P's connections that carry no request (nobody reads those) and that their member hung
 * up on. cl->mu held. */
static void drop_hung_up_locked(struct peer *p)
{
        struct shoal_list *pos, *next;
        list_for_each (pos, next, &p->conns) {
                struct iconn *ic = iconn_of(pos);
                if (!__atomic_load_n(&ic->inflight, __ATOMIC_RELAXED) && iconn_hung_up(ic))
                        iconn_break_locked(ic);
        }
}

/* After a connection to ADDR failed: the retry must not fail on another dead one. */
static void drop_hung_up(struct shoal_iorpc *cl, const char *addr)
{
        pthread_mutex_lock(&cl->mu);
        struct peer *p = peer_find_locked(cl, addr);
        if (p)
                drop_hung_up_locked(p);
        pthread_mutex_unlock(&cl->mu);
}

/* Picks the least loaded usable connection to ADDR, opening the first one if needed. Returns it
 * with a reference, or NULL with *ERR. */
static struct iconn *pick(struct shoal_iorpc *cl, const char *addr, uint64_t deadline, int *err)
{
        pthread_mutex_lock(&cl->mu);
        struct peer *p = peer_find_locked(cl, addr);
        struct iconn *best = NULL;
        while (p && !(best = least_loaded_locked(p))) {
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
                __atomic_add_fetch(&best->refs, 1, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&cl->mu);
        return best;
}

static void conn_fail(struct shoal_iorpc *cl, struct iconn *ic)
{
        pthread_mutex_lock(&cl->mu);
        iconn_break_locked(ic);
        pthread_mutex_unlock(&cl->mu);
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
        uint8_t frame[SHOAL_WIRE_HDR_LEN + REQ_MAX];
        int n = shoal_rpc_encode_read(frame + SHOAL_WIRE_HDR_LEN, REQ_MAX, vol, obj, index, off,
                                      len, view_version);
        if (n < 0) {
                iconn_put(ic);
                return -EINVAL;
        }
        struct waiter w = {.id = __atomic_add_fetch(&cl->next_id, 1, __ATOMIC_RELAXED),
                           .dst = dst,
                           .off = off,
                           .len = len,
                           .state = W_PENDING};
        shoal_block_id_derive(vol, obj->key, obj->version, index, &w.want);
        size_t flen = shoal_wire_frame_encode(frame, SHOAL_MSG_READ, SHOAL_WF_FILL, 0, w.id, NULL,
                                              (size_t)n);
        int rc = 0;
        pthread_mutex_lock(&ic->mu);
        if (flag_is(&ic->broken))
                rc = -ECONNRESET;
        else
                waiter_link(ic, &w);
        pthread_mutex_unlock(&ic->mu);
        if (!rc) {
                pthread_mutex_lock(&ic->send_mu);
                int src = shoal_rpc_send_all(ic->fd, frame, flen, deadline);
                pthread_mutex_unlock(&ic->send_mu);
                __atomic_fetch_add(&ic->win_reqs, 1, __ATOMIC_RELAXED);
                /* A half-sent frame leaves the stream out of sync: the connection is done (which
                 * also fails our waiter, unless its answer came already). */
                if (src)
                        conn_fail(cl, ic);
                rc = waiter_wait(ic, &w, deadline);
        }
        *conn_fault = rc == -ECONNRESET || rc == -EPROTO;
        if (rc == -EPROTO)
                conn_fail(cl, ic);
        if (rc == -EBADMSG) {
                /* The same body, as a notice: the member checks its copy (no answer comes). */
                flen = shoal_wire_frame_encode(frame, SHOAL_MSG_CORRUPT, 0, 0, 0, NULL, (size_t)n);
                pthread_mutex_lock(&ic->send_mu);
                shoal_rpc_send_all(ic->fd, frame, flen, deadline);
                pthread_mutex_unlock(&ic->send_mu);
        }
        iconn_put(ic);
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
                drop_hung_up(cl, addr);
        }
}

/* Every grow period, first: connections nobody reads that their member closed are closed here
 * (a member that restarts listens on another port: they would never be used again).
 * Grow: one more connection when the busiest one carried more than the grow thresholds over the
 * last grow period. Shrink: when every connection stayed under the shrink thresholds over the
 * shrink period, close connections down to what the total load needs at the shrink thresholds
 * (at least one). cl->mu held; dropped while connecting. */
static void scale_tick(struct shoal_iorpc *cl, bool shrink_time)
{
        double gsecs = (double)cl->cfg.grow_period_ns / (double)SHOAL_NS_PER_SEC;
        double ssecs = (double)cl->cfg.shrink_period_ns / (double)SHOAL_NS_PER_SEC;
        for (unsigned i = 0; i < cl->npeers; i++) {
                struct peer *p = &cl->peers[i];
                drop_hung_up_locked(p);
                bool grow = false, all_low = true;
                unsigned usable = 0;
                double tot_bytes = 0, tot_reqs = 0;
                struct shoal_list *pos, *next;
                list_for_each (pos, next, &p->conns) {
                        struct iconn *ic = iconn_of(pos);
                        if (flag_is(&ic->broken) || flag_is(&ic->draining))
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
                        if (!add_conn_locked(cl, p, shoal_now_ns() + GROW_WITHIN_NS))
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
                        list_for_each (pos, next, &p->conns) {
                                struct iconn *ic = iconn_of(pos);
                                if (!flag_is(&ic->broken) && !flag_is(&ic->draining) &&
                                    (!victim ||
                                     __atomic_load_n(&ic->inflight, __ATOMIC_RELAXED) <
                                             __atomic_load_n(&victim->inflight, __ATOMIC_RELAXED)))
                                        victim = ic;
                        }
                        if (!victim)
                                break;
                        __atomic_store_n(&victim->draining, true, __ATOMIC_RELEASE);
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

/* SHOAL_IORPC_GROW_QPS / _MIBPS (tests, unusual loads) replace the grow thresholds; a shrink
 * threshold is lowered to half of its grow one, so that a connection can still be found idle. */
static void iorpc_env_thresholds(struct shoal_iorpc_config *c)
{
        const struct shoal_env *env = shoal_config_env();
        if (env->iorpc_grow_qps) {
                c->grow_qps = env->iorpc_grow_qps;
                c->shrink_qps = SHOAL_MIN(c->shrink_qps, SHOAL_MAX(c->grow_qps / 2, 1));
        }
        if (env->iorpc_grow_mibps) {
                c->grow_bytes_per_s = (uint64_t)env->iorpc_grow_mibps * SHOAL_MiB;
                c->shrink_bytes_per_s = SHOAL_MIN(c->shrink_bytes_per_s, c->grow_bytes_per_s / 2);
        }
}

struct shoal_iorpc *shoal_iorpc_create(const struct shoal_iorpc_config *cfg)
{
        struct shoal_iorpc *cl = calloc(1, sizeof(*cl));
        if (!cl)
                return NULL;
        cl->cfg = *cfg;
        cl->cfg.grow_period_ns =
                shoal_config_pick(cfg->grow_period_ns, shoal_config_env()->iorpc_scale_period_ns,
                                  SHOAL_IORPC_SCALE_PERIOD_DEFAULT_NS);
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
        iorpc_env_thresholds(&cl->cfg);
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
        if (shoal_thread_create(&cl->scaler, scaler_main, cl)) {
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
        __atomic_store_n(&cl->stop, true, __ATOMIC_RELEASE);
        pthread_cond_broadcast(&cl->cond);
        for (unsigned i = 0; i < cl->npeers; i++)
                while (!shoal_list_empty(&cl->peers[i].conns))
                        iconn_break_locked(iconn_of(cl->peers[i].conns.next));
        pthread_mutex_unlock(&cl->mu);
        pthread_join(cl->scaler, NULL);
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

unsigned shoal_iorpc_inflight(struct shoal_iorpc *cl, const char *addr)
{
        unsigned n = 0;
        pthread_mutex_lock(&cl->mu);
        struct shoal_list *pos, *next;
        for (unsigned i = 0; i < cl->npeers; i++)
                if (!strcmp(cl->peers[i].addr, addr))
                        list_for_each (pos, next, &cl->peers[i].conns)
                                n += __atomic_load_n(&iconn_of(pos)->inflight, __ATOMIC_RELAXED);
        pthread_mutex_unlock(&cl->mu);
        return n;
}

/* ---- IORPC as a transport (transport/transport.h) ------------------------------------------ */

struct iorpc_transport {
        struct shoal_transport base;
        struct shoal_iorpc *c;   /* reads; NULL: this client reads over the pool */
        struct shoal_pool *puts; /* stop-and-wait PUT_BLOCKs to members' IORPC ports */
};

static struct iorpc_transport *it_of(struct shoal_transport *t)
{
        return (struct iorpc_transport *)t;
}

static int it_read(struct shoal_transport *t, const struct shoal_route *to,
                   struct shoal_read_req *rq)
{
        struct iorpc_transport *it = it_of(t);
        if (!it->c || !to->iorpc_addr[0])
                return -ENOPROTOOPT;
        return shoal_iorpc_read(it->c, to->iorpc_addr, rq->vol, rq->obj, rq->index, rq->off,
                                rq->len, rq->dst, rq->view_version, rq->deadline);
}

static int it_put(struct shoal_transport *t, const struct shoal_route *to, struct shoal_put_req *rq)
{
        if (!to->iorpc_addr[0])
                return -ENOPROTOOPT;
        return shoal_pool_put(it_of(t)->puts, to->iorpc_addr, to->m->id, rq);
}

static int it_conns(struct shoal_transport *t, const struct shoal_route *to)
{
        struct iorpc_transport *it = it_of(t);
        if (!it->c || !to->iorpc_addr[0])
                return -ENOTCONN;
        return (int)shoal_iorpc_conns(it->c, to->iorpc_addr);
}

static unsigned it_inflight(struct shoal_transport *t, const struct shoal_route *to)
{
        struct iorpc_transport *it = it_of(t);
        return it->c && to->iorpc_addr[0] ? shoal_iorpc_inflight(it->c, to->iorpc_addr) : 0;
}

static void it_destroy(struct shoal_transport *t)
{
        struct iorpc_transport *it = it_of(t);
        shoal_iorpc_destroy(it->c);
        shoal_pool_destroy(it->puts);
        free(it);
}

static const struct shoal_transport_ops iorpc_ops = {
        .name = "iorpc",
        .bytes_metric = SHOAL_M_remotecache_iorpc_get_bytes,
        .wants_iorpc_addr = true,
        .read = it_read,
        .put = it_put,
        .conns = it_conns,
        .inflight = it_inflight,
        .destroy = it_destroy,
};

/* Without --use-iorpc: puts only (reads never ask a member for its IORPC address). */
static const struct shoal_transport_ops iorpc_put_ops = {
        .name = "iorpc",
        .bytes_metric = SHOAL_M_remotecache_iorpc_get_bytes,
        .read = it_read,
        .put = it_put,
        .conns = it_conns,
        .inflight = it_inflight,
        .destroy = it_destroy,
};

struct shoal_transport *shoal_transport_iorpc_create(const struct shoal_secret *secret, bool reads)
{
        struct iorpc_transport *it = calloc(1, sizeof(*it));
        if (!it)
                return NULL;
        it->base.ops = reads ? &iorpc_ops : &iorpc_put_ops;
        it->puts = shoal_pool_create(secret, PUT_IDLE, SHOAL_SERVICE_IORPC);
        if (reads) {
                struct shoal_iorpc_config ic = {.secret = *secret};
                it->c = shoal_iorpc_create(&ic);
        }
        if (!it->puts || (reads && !it->c)) {
                it_destroy(&it->base);
                return NULL;
        }
        return &it->base;
}
