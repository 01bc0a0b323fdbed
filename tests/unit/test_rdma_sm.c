/* The RDMA state machines (src/server/rdma_conn.c: a member's connection;
 * src/transport/rdma_chan.c: a requester's link and channels) driven by scripted event orders,
 * without a fabric — issue 14 findings 1, 3 and 4, issue 11 finding 5, issue 15 [R5]:
 * - a receive before FI_CONNECTED (verbs can report the HELLO first), a late FI_CONNECTED;
 * - FI_SHUTDOWN twice; every posted operation flushed (FI_ECANCELED) in random order, each
 *   request and answer given back exactly once, the connection freed only when nothing is
 *   posted and nothing is in the engine;
 * - slot pressure with late send completions on both sides: the requester reuses a credit the
 *   moment it sees an answer, before the member's send completion — never a violation;
 * - nothing of the connection's own is registered before the requester authenticated, and a
 *   wrong proof leaves nothing registered;
 * - requests waiting for a credit are sent when one comes back (finding 4), and go to TCP after
 *   their wait time without failing the member;
 * - scaling: a busy channel makes the link grow, an idle period shrinks it back to one;
 * - a seeded random-order property test of each machine: every request completes exactly once,
 *   the posted count never goes below zero, never more requests in flight than credits, no post
 *   after shutdown. */
#include <errno.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "common/secret.h"
#include "metrics/metrics.h"
#include "wire/handshake.h"
#include "transport/rdma_chan.h"
#include "server/rdma_conn.h"
#include "wire/wire.h"

#define ADDR   "127.0.0.1:4000"
#define ID     "0123456789abcdef0123456789abcdef"
#define MS     1000000ULL
#define MAXOPS 4096

static const uint8_t SECRET[] = "a group secret of 32 bytes.....";
static struct shoal_hs_key KEY, NOKEY;

/* A tiny seeded generator, so a failing order can be replayed. */
static uint64_t rng = 1;
static uint64_t rnd(void)
{
        rng ^= rng << 13;
        rng ^= rng >> 7;
        rng ^= rng << 17;
        return rng;
}

/* The operations posted and not completed yet, in posting order. */
struct posted {
        struct shoal_fab_op *op[MAXOPS];
        size_t len[MAXOPS];
        unsigned n;
};

static void posted_add(struct posted *p, struct shoal_fab_op *op, size_t len)
{
        assert_true(p->n < MAXOPS);
        p->op[p->n] = op;
        p->len[p->n] = len;
        p->n++;
}

static void posted_del(struct posted *p, unsigned i)
{
        memmove(&p->op[i], &p->op[i + 1], (p->n - i - 1) * sizeof(p->op[0]));
        memmove(&p->len[i], &p->len[i + 1], (p->n - i - 1) * sizeof(p->len[0]));
        p->n--;
}

/* Index of the first posted operation of KIND, or -1. */
static int posted_first(const struct posted *p, enum shoal_fab_op_kind kind)
{
        for (unsigned i = 0; i < p->n; i++)
                if (p->op[i]->kind == kind)
                        return (int)i;
        return -1;
}

/* The value of gauge ID now (a gauge is one process-wide atomic). */
static int64_t gauge(enum shoal_metric_id id)
{
        struct shoal_metrics_snap snap;
        assert_int_equal(shoal_metrics_snap_take(&snap), 0);
        int64_t v = (int64_t)snap.counters[id];
        shoal_metrics_snap_free(&snap);
        return v;
}

/* ==== the member's connection ================================================================ */

struct srv {
        struct shoal_rdma_conn c;
        struct posted out;
        struct shoal_rdma_buf pool[4];
        char pool_mem[4][SHOAL_FAB_MSG_SLOT];
        struct shoal_rdma_buf *bufs;
        char *mem;
        struct shoal_rdma_req *reqs;
        unsigned want_rx, want_sb;
        int shutdowns, upgrades, pool_puts, answers_out, writes, eagain_send, eagain_write;
        bool shut; /* a post after this is a bug */
        struct shoal_rdma_req *engine[512];
        unsigned nengine;
        struct shoal_server_answer answers[512];
        unsigned nanswers;
        uint8_t last[SHOAL_FAB_MSG_SLOT]; /* the last frame sent */
        size_t last_len;
        uint64_t sent_ids[2048];
        unsigned nsent;
        uint8_t answer_frame[512][SHOAL_WIRE_HDR_LEN];
        char payload[65536];
        uint64_t now;
};

static int s_post_rx(void *env, struct shoal_rdma_conn *c, struct shoal_rdma_buf *b)
{
        struct srv *s = env;
        assert_false(s->shut);
        assert_int_equal(b->op.kind, SHOAL_FAB_OP_RX);
        posted_add(&s->out, &b->op, 0);
        return 0;
}

static int s_post_send(void *env, struct shoal_rdma_conn *c, struct shoal_rdma_buf *b, size_t len)
{
        struct srv *s = env;
        assert_false(s->shut);
        assert_int_equal(b->op.kind, SHOAL_FAB_OP_SEND);
        if (s->eagain_send) {
                s->eagain_send--;
                return -FI_EAGAIN;
        }
        memcpy(s->last, b->data, len);
        s->last_len = len;
        struct shoal_wire_hdr h;
        assert_int_equal(shoal_wire_msg_decode(s->last, len, &h), 0);
        if (s->nsent < 2048)
                s->sent_ids[s->nsent++] = h.id;
        posted_add(&s->out, &b->op, len);
        return 0;
}

static int s_post_write(void *env, struct shoal_rdma_conn *c, struct shoal_rdma_buf *b,
                        const void *data, size_t len, uint64_t raddr, uint64_t rkey)
{
        struct srv *s = env;
        assert_false(s->shut);
        if (s->eagain_write) {
                s->eagain_write--;
                return -FI_EAGAIN;
        }
        assert_non_null(data);
        s->writes++;
        return 0;
}

static void s_shutdown(void *env, struct shoal_rdma_conn *c)
{
        struct srv *s = env;
        s->shutdowns++;
        s->shut = true;
}

static int s_upgrade(void *env, struct shoal_rdma_conn *c)
{
        struct srv *s = env;
        s->upgrades++;
        unsigned n = s->want_rx + s->want_sb;
        s->bufs = calloc(n, sizeof(*s->bufs));
        s->mem = calloc(n, SHOAL_FAB_MSG_SLOT);
        s->reqs = calloc(c->max_inflight + 2, sizeof(*s->reqs));
        assert_non_null(s->bufs);
        for (unsigned i = 0; i < n; i++)
                s->bufs[i].data = s->mem + (size_t)i * SHOAL_FAB_MSG_SLOT;
        c->rx = s->bufs;
        c->nrx = s->want_rx;
        c->sb = s->bufs + s->want_rx;
        c->nsb = s->want_sb;
        c->req = s->reqs;
        c->nreq = c->max_inflight + 2;
        for (unsigned i = 0; i < c->nreq; i++)
                s->reqs[i].c = c;
        return 0;
}

static int s_submit(void *env, struct shoal_rdma_conn *c, struct shoal_rdma_req *rq,
                    const struct shoal_wire_hdr *h, const uint8_t *body, uint32_t *status,
                    char *why, size_t whylen)
{
        struct srv *s = env;
        assert_true(s->nengine < 512);
        s->engine[s->nengine++] = rq;
        return 0;
}

static void s_answer_done(void *env, struct shoal_server_answer *a)
{
        struct srv *s = env;
        assert_non_null(a->ref); /* not given back twice */
        a->ref = NULL;
        s->answers_out--;
}

static void *s_wtest_get(void *env)
{
        return NULL;
}

static void s_wtest_put(void *env, void *buf)
{
}

static void s_pool_put(void *env, struct shoal_rdma_buf *b)
{
        struct srv *s = env;
        assert_true(b >= s->pool && b < s->pool + 4);
        assert_false(b->posted);
        s->pool_puts++;
}

static const struct shoal_rdma_conn_ops s_ops = {
        .post_rx = s_post_rx,
        .post_send = s_post_send,
        .post_write = s_post_write,
        .shutdown = s_shutdown,
        .upgrade = s_upgrade,
        .submit = s_submit,
        .answer_done = s_answer_done,
        .wtest_get = s_wtest_get,
        .wtest_put = s_wtest_put,
        .pool_put = s_pool_put,
};

static struct srv *srv_new(const struct shoal_hs_key *key, uint32_t max_inflight, unsigned nsb)
{
        struct srv *s = calloc(1, sizeof(*s));
        assert_non_null(s);
        s->now = 1000 * MS;
        s->want_rx = max_inflight + 2;
        s->want_sb = nsb;
        struct shoal_hs_config hc = {.role = SHOAL_HS_SERVER,
                                     .key = key,
                                     .service = SHOAL_SERVICE_RDMA,
                                     .addr = ADDR,
                                     .member_id = ID};
        shoal_rdma_conn_init(&s->c, &s_ops, s, &hc, max_inflight, 1 << 20, s->now);
        struct shoal_rdma_buf *pool[4];
        for (int i = 0; i < 4; i++) {
                s->pool[i].data = s->pool_mem[i];
                pool[i] = &s->pool[i];
        }
        assert_int_equal(shoal_rdma_conn_start(&s->c, pool), 0);
        assert_int_equal(s->c.posted, 2);
        return s;
}

static void srv_free(struct srv *s)
{
        free(s->bufs);
        free(s->mem);
        free(s->reqs);
        free(s);
}

/* The requester's next message lands in the first posted receive (receives match in order). */
static void srv_deliver(struct srv *s, const void *frame, size_t len)
{
        int i = posted_first(&s->out, SHOAL_FAB_OP_RX);
        assert_true(i >= 0);
        struct shoal_fab_op *op = s->out.op[i];
        struct shoal_rdma_buf *b = op->owner;
        memcpy(b->data, frame, len);
        posted_del(&s->out, (unsigned)i);
        s->now += MS;
        shoal_rdma_conn_completion(&s->c, op, len, 0, s->now);
}

/* Completes posted operation I (ERR 0: done; else an error completion). */
static void srv_complete(struct srv *s, unsigned i, int err)
{
        struct shoal_fab_op *op = s->out.op[i];
        posted_del(&s->out, i);
        s->now += MS;
        shoal_rdma_conn_completion(&s->c, op, 0, err, s->now);
}

static void srv_complete_sends(struct srv *s)
{
        int i;
        while ((i = posted_first(&s->out, SHOAL_FAB_OP_SEND)) >= 0)
                srv_complete(s, (unsigned)i, 0);
}

/* Runs the handshake from the requester's side (with KEY, or none); true when it opened. */
static bool srv_handshake(struct srv *s, const struct shoal_hs_key *key, bool connected_first)
{
        struct shoal_hs r;
        struct shoal_hs_config rc = {.role = SHOAL_HS_REQUESTER,
                                     .key = key,
                                     .service = SHOAL_SERVICE_RDMA,
                                     .addr = ADDR};
        assert_int_equal(shoal_hs_start(&r, &rc), 0);
        if (connected_first)
                shoal_rdma_conn_connected(&s->c, s->now);
        srv_deliver(s, r.out, r.out_len);
        while (!s->c.broken) {
                enum shoal_hs_verdict v = shoal_hs_step_msg(&r, s->last, s->last_len);
                if (v == SHOAL_HS_DONE)
                        return true;
                if (v == SHOAL_HS_FAIL)
                        return false;
                assert_true(r.out_len > 0);
                srv_deliver(s, r.out, r.out_len);
                if (s->c.state == SHOAL_RDMA_CONN_READY) {
                        v = shoal_hs_step_msg(&r, s->last, s->last_len);
                        return v == SHOAL_HS_DONE;
                }
        }
        return false;
}

/* A READ frame for id ID naming a remote buffer. */
static size_t read_frame(uint8_t *out, uint64_t id)
{
        struct shoal_wire_read rd = {.view_version = 1,
                                     .obj_size = 1 << 20,
                                     .block_size = 1 << 20,
                                     .block_index = 0,
                                     .offset = 0,
                                     .length = 65536,
                                     .rdma_addr = 0x1000,
                                     .rdma_key = 42,
                                     .key_len = 3,
                                     .version_len = 2,
                                     .key = "d/k",
                                     .version = "v1"};
        uint8_t body[512];
        int n = shoal_wire_read_encode(body, sizeof(body), &rd);
        assert_true(n > 0);
        return shoal_wire_frame_encode(out, SHOAL_MSG_READ, SHOAL_WF_FILL | SHOAL_WF_RDMA_TARGET, 0,
                                       id, body, (size_t)n);
}

static void srv_read(struct srv *s, uint64_t id)
{
        uint8_t f[1024];
        srv_deliver(s, f, read_frame(f, id));
}

/* The engine answers its oldest request (or request I). */
static void srv_engine_answer(struct srv *s, unsigned i)
{
        assert_true(i < s->nengine);
        struct shoal_rdma_req *rq = s->engine[i];
        memmove(&s->engine[i], &s->engine[i + 1], (s->nengine - i - 1) * sizeof(s->engine[0]));
        s->nengine--;
        unsigned k = s->nanswers++ % 512;
        struct shoal_server_answer *a = &s->answers[k];
        /* the engine's READ_RESP names the request's id */
        shoal_wire_frame_encode(s->answer_frame[k], SHOAL_MSG_READ_RESP, SHOAL_WF_RDMA_WRITTEN, 0,
                                rq->id, NULL, 0);
        *a = (struct shoal_server_answer){.frame = s->answer_frame[k],
                                          .frame_len = SHOAL_WIRE_HDR_LEN,
                                          .data = s->payload,
                                          .len = 65536,
                                          .ref = a};
        s->answers_out++;
        s->now += MS;
        shoal_rdma_conn_answer(&s->c, rq, a, s->now);
}

/* Flushes every posted operation (FI_ECANCELED), in random order. */
static void srv_flush_all(struct srv *s)
{
        while (s->out.n)
                srv_complete(s, (unsigned)(rnd() % s->out.n), FI_ECANCELED);
}

static int pool_held(const struct srv *s)
{
        int n = 0;
        for (int i = 0; i < 4; i++)
                n += s->c.pool[i] != NULL;
        return n;
}

/* Finding 1: the HELLO completes before FI_CONNECTED; the late FI_CONNECTED changes nothing. */
static void test_srv_receive_before_connected(void **state)
{
        struct srv *s = srv_new(&KEY, 8, 20);
        assert_true(srv_handshake(s, &KEY, false));
        assert_int_equal(s->c.state, SHOAL_RDMA_CONN_READY);
        shoal_rdma_conn_connected(&s->c, s->now); /* the late event */
        assert_false(s->c.broken);
        assert_int_equal(s->c.state, SHOAL_RDMA_CONN_READY);
        srv_read(s, 77);
        srv_engine_answer(s, 0);
        assert_int_equal(s->sent_ids[s->nsent - 1], 77);
        assert_false(s->c.broken);
        srv_free(s);
}

/* Issue 11: nothing of the connection's own is registered before the requester proved the
 * secret; a wrong proof ends it with nothing registered and every pool buffer back. */
static void test_srv_register_after_auth(void **state)
{
        struct srv *s = srv_new(&KEY, 8, 20);
        struct shoal_hs r;
        struct shoal_hs_config rc = {.role = SHOAL_HS_REQUESTER,
                                     .key = &KEY,
                                     .service = SHOAL_SERVICE_RDMA,
                                     .addr = ADDR};
        assert_int_equal(shoal_hs_start(&r, &rc), 0);
        shoal_rdma_conn_connected(&s->c, s->now);
        srv_deliver(s, r.out, r.out_len);
        assert_int_equal(s->upgrades, 0); /* HELLO_ACK sent, nothing registered */
        assert_true(shoal_rdma_conn_preauth(&s->c));
        assert_int_equal(shoal_hs_step_msg(&r, s->last, s->last_len), SHOAL_HS_MORE);
        r.out[SHOAL_WIRE_HDR_LEN + 3] ^= 1; /* a wrong proof (CRC fixed below) */
        struct shoal_wire_hdr h;
        memset(&h, 0, sizeof(h));
        uint8_t f[256];
        size_t n =
                shoal_wire_frame_encode(f, SHOAL_MSG_AUTH, 0, 0, SHOAL_HS_AUTH_ID,
                                        r.out + SHOAL_WIRE_HDR_LEN, r.out_len - SHOAL_WIRE_HDR_LEN);
        srv_deliver(s, f, n);
        assert_true(s->c.broken);
        assert_int_equal(s->upgrades, 0);
        assert_int_equal(s->shutdowns, 1);
        srv_flush_all(s);
        assert_int_equal(s->c.posted, 0);
        shoal_rdma_conn_ep_closed(&s->c);
        assert_true(shoal_rdma_conn_can_free(&s->c));
        /* Two receives and the HELLO_ACK and ERROR sends came back; any unused one stays lent
         * until the owner frees the connection. */
        assert_int_equal(s->pool_puts + pool_held(s), 4);
        srv_free(s);
}

/* No secret: HELLO alone opens the session; the second pool receive stays posted and carries the
 * first request, then goes back to the pool instead of being reposted. */
static void test_srv_no_secret_pool_receive(void **state)
{
        struct srv *s = srv_new(&NOKEY, 4, 12);
        assert_true(srv_handshake(s, &NOKEY, true));
        assert_int_equal(s->upgrades, 1);
        assert_int_equal(s->c.posted, 1 + 6 + 1); /* pool rx, own rx, HELLO_ACK */
        srv_complete_sends(s);
        srv_read(s, 5); /* lands in the pool receive */
        assert_false(s->c.broken);
        srv_engine_answer(s, 0);
        srv_complete_sends(s);
        assert_int_equal(pool_held(s), 1); /* the send buffer a secret's AUTH_OK would use */
        assert_int_equal(s->c.posted, 6);  /* own receives only */
        assert_int_equal(s->pool_puts, 3);
        assert_int_equal(s->answers_out, 0);
        srv_free(s);
}

/* FI_SHUTDOWN twice, requests still in the engine, every posted op flushed in random order: one
 * shutdown, every answer given back once, freed only when nothing is left. */
static void test_srv_shutdown_twice_and_flush(void **state)
{
        for (uint64_t seed = 1; seed <= 20; seed++) {
                rng = seed * 7919;
                struct srv *s = srv_new(&KEY, 8, 20);
                assert_true(srv_handshake(s, &KEY, true));
                for (uint64_t id = 10; id < 18; id++)
                        srv_read(s, id);
                srv_engine_answer(s, 0);
                srv_engine_answer(s, 0); /* two answers posted, six in the engine */
                shoal_rdma_conn_break(&s->c, "peer shut down", s->now);
                shoal_rdma_conn_break(&s->c, "peer shut down", s->now);
                assert_int_equal(s->shutdowns, 1);
                assert_false(shoal_rdma_conn_can_free(&s->c));
                srv_flush_all(s);
                assert_int_equal(s->c.posted, 0);
                shoal_rdma_conn_ep_closed(&s->c);
                assert_false(shoal_rdma_conn_can_free(&s->c)); /* the engine still has six */
                while (s->nengine)
                        srv_engine_answer(s, (unsigned)(rnd() % s->nengine));
                assert_true(shoal_rdma_conn_can_free(&s->c));
                assert_int_equal(s->answers_out, 0);
                srv_free(s);
        }
}

/* Finding 3: the requester sees an answer (and reuses its credit) before the member's send
 * completion; with every credit in use and every send completion late the member queues
 * answers and never calls the connection broken. */
static void test_srv_slot_pressure_late_sends(void **state)
{
        const uint32_t credits = 6;
        struct srv *s = srv_new(&KEY, credits, 4); /* few send buffers: answers must queue */
        assert_true(srv_handshake(s, &KEY, true));
        srv_complete_sends(s);
        uint64_t id = 100;
        for (int round = 0; round < 5; round++) {
                for (uint32_t k = 0; k < credits; k++)
                        srv_read(s, id++);
                /* the engine answers all: 4 sends go out (4 buffers), 2 answers wait */
                while (s->nengine)
                        srv_engine_answer(s, 0);
                unsigned out = 0;
                for (unsigned i = 0; i < s->out.n; i++)
                        out += s->out.op[i]->kind == SHOAL_FAB_OP_SEND;
                assert_int_equal(out, 4);
                /* the requester saw those 4 answers and reuses their credits at once, before
                 * a single send completion came back */
                for (uint32_t k = 0; k < 4; k++)
                        srv_read(s, id++);
                assert_false(s->c.broken);
                while (s->nengine)
                        srv_engine_answer(s, 0);
                /* late completions release the waiting answers, in order */
                srv_complete_sends(s);
                assert_false(s->c.broken);
                assert_null(s->c.ready);
        }
        /* every id answered once, in order */
        unsigned first = s->nsent - 5 * (credits + 4);
        for (unsigned i = 0; i < 5 * (credits + 4); i++)
                assert_int_equal(s->sent_ids[first + i], 100 + i);
        assert_int_equal(s->answers_out, 0);
        /* a requester past its credits is a violation */
        for (uint32_t k = 0; k < credits + 2; k++)
                srv_read(s, id++);
        assert_false(s->c.broken); /* credits + the heartbeat's slot + one spare */
        srv_read(s, id++);
        assert_true(s->c.broken);
        srv_free(s);
}

/* A full send queue (-FI_EAGAIN) keeps the answer for the next completion or tick. */
static void test_srv_eagain(void **state)
{
        struct srv *s = srv_new(&KEY, 4, 12);
        assert_true(srv_handshake(s, &KEY, true));
        srv_complete_sends(s);
        srv_read(s, 1);
        s->eagain_write = 1;
        srv_engine_answer(s, 0);
        assert_non_null(s->c.ready);
        assert_int_equal(s->writes, 0);
        s->eagain_send = 1;
        shoal_rdma_conn_tick(&s->c, s->now + MS); /* the write goes, the send does not */
        assert_int_equal(s->writes, 1);
        assert_non_null(s->c.ready);
        shoal_rdma_conn_tick(&s->c, s->now + 2 * MS); /* the send alone: no second write */
        assert_int_equal(s->writes, 1);
        assert_null(s->c.ready);
        assert_int_equal(s->sent_ids[s->nsent - 1], 1);
        srv_complete_sends(s);
        assert_int_equal(s->answers_out, 0);
        assert_false(s->c.broken);
        srv_free(s);
}

/* Issue 32: -FI_EAGAIN while no send is out (verbs reports every post failure so) breaks the
 * connection after SHOAL_RDMA_IDLE_EAGAIN_MAX tries instead of holding the answer until the
 * requester's deadline; while sends are out it waits, however long. */
static void test_srv_eagain_idle(void **state)
{
        struct srv *s = srv_new(&KEY, 4, 12);
        assert_true(srv_handshake(s, &KEY, true));
        srv_complete_sends(s);
        srv_read(s, 1);
        s->eagain_send = 1000;
        srv_engine_answer(s, 0);
        for (int k = 1; k < SHOAL_RDMA_IDLE_EAGAIN_MAX - 1; k++)
                shoal_rdma_conn_tick(&s->c, s->now + (uint64_t)k * MS);
        assert_false(s->c.broken);
        assert_non_null(s->c.ready);
        shoal_rdma_conn_tick(&s->c, s->now + 100 * MS);
        assert_true(s->c.broken);
        srv_flush_all(s);
        srv_free(s);
        /* a send out: EAGAIN is a full queue, waited on */
        s = srv_new(&KEY, 4, 12);
        assert_true(srv_handshake(s, &KEY, true));
        srv_complete_sends(s);
        srv_read(s, 1);
        srv_read(s, 2);
        srv_engine_answer(s, 0); /* posted: its send is out */
        s->eagain_send = 1000;
        srv_engine_answer(s, 0); /* the second, now the oldest */
        for (int k = 1; k < 5 * SHOAL_RDMA_IDLE_EAGAIN_MAX; k++)
                shoal_rdma_conn_tick(&s->c, s->now + (uint64_t)k * MS);
        assert_false(s->c.broken);
        s->eagain_send = 0;
        srv_complete_sends(s);
        assert_null(s->c.ready);
        assert_false(s->c.broken);
        srv_complete_sends(s);
        srv_free(s);
}

/* Deadlines: the handshake must finish in SHOAL_RDMA_CONN_HS_NS; a silent session is idle. */
static void test_srv_deadlines(void **state)
{
        struct srv *s = srv_new(&KEY, 4, 12);
        shoal_rdma_conn_tick(&s->c, s->now + SHOAL_RDMA_CONN_HS_NS / 2);
        assert_false(s->c.broken);
        shoal_rdma_conn_tick(&s->c, s->now + SHOAL_RDMA_CONN_HS_NS + MS);
        assert_true(s->c.broken);
        assert_int_equal(s->upgrades, 0);
        srv_free(s);
        s = srv_new(&KEY, 4, 12);
        assert_true(srv_handshake(s, &KEY, true));
        shoal_rdma_conn_tick(&s->c, s->now + SHOAL_RDMA_CONN_IDLE_NS + MS);
        assert_true(s->c.broken);
        srv_free(s);
}

/* Property: random interleavings of requests within credits, engine answers, send completions
 * late or early, full queues, ticks; then a shutdown and a random flush. */
static void test_srv_random_orders(void **state)
{
        for (uint64_t seed = 1; seed <= 200; seed++) {
                rng = seed * 2654435761u;
                uint32_t credits = 1 + rnd() % 8;
                struct srv *s = srv_new(&KEY, credits, 2 + rnd() % (2 * credits + 4));
                assert_true(srv_handshake(s, &KEY, rnd() & 1));
                unsigned base = s->nsent; /* the handshake's frames */
                uint64_t id = 1, answered = 0;
                unsigned inflight = 0; /* the requester's view: sent, answer not seen */
                uint64_t seen = 0;
                for (int step = 0; step < 400 && !s->c.broken; step++) {
                        /* answers the requester has seen: sends posted so far */
                        unsigned sends_posted = s->nsent - base;
                        while (seen < sends_posted) {
                                seen++;
                                inflight--;
                        }
                        switch (rnd() % 6) {
                        case 0:
                        case 1:
                                if (inflight < credits) {
                                        srv_read(s, id++);
                                        inflight++;
                                }
                                break;
                        case 2:
                                if (s->nengine)
                                        srv_engine_answer(s, (unsigned)(rnd() % s->nengine));
                                break;
                        case 3: {
                                int i = posted_first(&s->out, SHOAL_FAB_OP_SEND);
                                if (i >= 0)
                                        srv_complete(s, (unsigned)i, 0);
                                break;
                        }
                        case 4:
                                s->eagain_send = rnd() % 2;
                                s->eagain_write = rnd() % 2;
                                break;
                        default:
                                s->now += MS;
                                shoal_rdma_conn_tick(&s->c, s->now);
                                break;
                        }
                        assert_true(s->c.posted >= 0);
                }
                assert_false(s->c.broken);
                answered = s->nsent - base;
                assert_true(answered <= id - 1);
                shoal_rdma_conn_break(&s->c, "test over", s->now);
                srv_flush_all(s);
                shoal_rdma_conn_ep_closed(&s->c);
                while (s->nengine)
                        srv_engine_answer(s, 0);
                assert_int_equal(s->c.posted, 0);
                assert_true(shoal_rdma_conn_can_free(&s->c));
                assert_int_equal(s->answers_out, 0);
                srv_free(s);
        }
}

/* ==== the requester's link =================================================================== */

struct cli {
        struct shoal_rdma_link l;
        struct shoal_rdma_chan ch[SHOAL_RDMA_CHANS_MAX];
        struct shoal_rdma_cbuf bufs[SHOAL_RDMA_CHANS_MAX][128];
        char mem[SHOAL_RDMA_CHANS_MAX][128][128];
        struct shoal_rdma_creq *slots[SHOAL_RDMA_CHANS_MAX][64];
        unsigned nch;
        struct posted out;
        struct shoal_rdma_creq req[512];
        int done[512], rc[512];
        int fails, grows, shutdowns, readies;
        uint64_t next_id, now;
        struct shoal_hs srv_hs[SHOAL_RDMA_CHANS_MAX];
        uint32_t srv_max_inflight;
};

static int c_post_rx(void *env, struct shoal_rdma_chan *ch, struct shoal_rdma_cbuf *b)
{
        struct cli *c = env;
        assert_false(ch->broken);
        posted_add(&c->out, &b->op, 0);
        return 0;
}

static int c_post_send(void *env, struct shoal_rdma_chan *ch, struct shoal_rdma_cbuf *b, size_t len)
{
        struct cli *c = env;
        assert_false(ch->broken);
        assert_true(len <= 128);
        posted_add(&c->out, &b->op, len);
        return 0;
}

static void c_shutdown(void *env, struct shoal_rdma_chan *ch)
{
        struct cli *c = env;
        c->shutdowns++;
}

static void c_complete(void *env, struct shoal_rdma_creq *r, int rc)
{
        struct cli *c = env;
        long i = r - c->req;
        assert_true(i >= 0 && i < 512);
        c->done[i]++;
        assert_int_equal(c->done[i], 1); /* exactly once */
        c->rc[i] = rc;
}

static int c_grow(void *env, struct shoal_rdma_link *l)
{
        struct cli *c = env;
        c->grows++;
        return 0;
}

static void c_fail(void *env, struct shoal_rdma_link *l, const char *why, uint64_t now)
{
        struct cli *c = env;
        c->fails++;
        shoal_rdma_link_fail(l, now); /* what the owner does: every link of the member */
}

static void c_ready(void *env, struct shoal_rdma_chan *ch)
{
        struct cli *c = env;
        c->readies++;
}

static uint64_t c_new_id(void *env)
{
        struct cli *c = env;
        return ++c->next_id + 1000000;
}

static uint64_t c_rand(void *env)
{
        return rnd();
}

static const struct shoal_rdma_link_ops c_ops = {
        .post_rx = c_post_rx,
        .post_send = c_post_send,
        .shutdown = c_shutdown,
        .complete = c_complete,
        .grow = c_grow,
        .fail = c_fail,
        .ready = c_ready,
        .new_id = c_new_id,
        .rand = c_rand,
};

static struct cli *cli_new(uint32_t srv_max_inflight, uint64_t max_chans)
{
        struct cli *c = calloc(1, sizeof(*c));
        assert_non_null(c);
        c->now = 1000 * MS;
        c->srv_max_inflight = srv_max_inflight;
        struct shoal_rdma_link_config cfg = {.key = &KEY,
                                             .hb_ns = 1000 * MS,
                                             .connect_ns = 3000 * MS,
                                             .wait_ns = 3000 * MS,
                                             .max_chans = (unsigned)max_chans,
                                             .grow_ns = 100 * MS,
                                             .shrink_ns = 6000 * MS,
                                             .grow_bytes = 1ULL << 30,
                                             .grow_qps = 5000,
                                             .shrink_bytes = 512ULL << 20,
                                             .shrink_qps = 2000};
        shoal_rdma_link_init(&c->l, &c_ops, c, &cfg, c->now);
        return c;
}

/* Adds channel K (NRX receives, NSB send buffers) in CONNECTING. */
static struct shoal_rdma_chan *cli_add(struct cli *c, unsigned nrx, unsigned nsb)
{
        unsigned k = c->nch++;
        struct shoal_rdma_chan *ch = &c->ch[k];
        memset(ch, 0, sizeof(*ch));
        for (unsigned i = 0; i < nrx + nsb; i++) {
                c->bufs[k][i].data = c->mem[k][i];
        }
        ch->rx = c->bufs[k];
        ch->nrx = nrx;
        ch->sb = c->bufs[k] + nrx;
        ch->nsb = nsb;
        ch->slots = c->slots[k];
        snprintf(ch->addr, sizeof(ch->addr), "%s", ADDR);
        assert_int_equal(shoal_rdma_link_add(&c->l, ch, c->now), 0);
        assert_int_equal(ch->posted, (int)nrx);
        return ch;
}

/* The last send posted on CH (its frame), or -1. */
static int cli_last_send(struct cli *c, struct shoal_rdma_chan *ch)
{
        for (int i = (int)c->out.n - 1; i >= 0; i--) {
                struct shoal_rdma_cbuf *b = c->out.op[i]->owner;
                if (c->out.op[i]->kind == SHOAL_FAB_OP_SEND && b->ch == ch)
                        return i;
        }
        return -1;
}

/* Delivers FRAME into CH's first posted receive. */
static void cli_deliver(struct cli *c, struct shoal_rdma_chan *ch, const void *frame, size_t len)
{
        for (unsigned i = 0; i < c->out.n; i++) {
                struct shoal_fab_op *op = c->out.op[i];
                struct shoal_rdma_cbuf *b = op->owner;
                if (op->kind != SHOAL_FAB_OP_RX || b->ch != ch)
                        continue;
                memcpy(b->data, frame, len);
                posted_del(&c->out, i);
                c->now += MS;
                shoal_rdma_chan_completion(ch, op, len, 0, c->now);
                return;
        }
        fail_msg("no receive posted");
}

static void cli_complete_op(struct cli *c, unsigned i, int err)
{
        struct shoal_fab_op *op = c->out.op[i];
        struct shoal_rdma_cbuf *b = op->owner;
        posted_del(&c->out, i);
        c->now += MS;
        shoal_rdma_chan_completion(b->ch, op, 0, err, c->now);
}

static void cli_complete_sends(struct cli *c)
{
        int i;
        while ((i = posted_first(&c->out, SHOAL_FAB_OP_SEND)) >= 0)
                cli_complete_op(c, (unsigned)i, 0);
}

/* FI_CONNECTED and the member's side of the handshake on CH. */
static void cli_open(struct cli *c, struct shoal_rdma_chan *ch)
{
        unsigned k = (unsigned)(ch - c->ch);
        struct shoal_hs *hs = &c->srv_hs[k];
        struct shoal_hs_config hc = {.role = SHOAL_HS_SERVER,
                                     .key = &KEY,
                                     .service = SHOAL_SERVICE_RDMA,
                                     .addr = ADDR,
                                     .member_id = ID,
                                     .max_inflight = c->srv_max_inflight};
        assert_int_equal(shoal_hs_start(hs, &hc), 0);
        shoal_rdma_chan_connected(ch, c->now);
        for (int round = 0; round < 2; round++) {
                int i = cli_last_send(c, ch);
                assert_true(i >= 0);
                struct shoal_rdma_cbuf *b = c->out.op[i]->owner;
                enum shoal_hs_verdict v = shoal_hs_step_msg(hs, (uint8_t *)b->data, c->out.len[i]);
                assert_int_not_equal(v, SHOAL_HS_FAIL);
                cli_deliver(c, ch, hs->out, hs->out_len);
                if (v == SHOAL_HS_DONE)
                        break;
        }
        assert_int_equal(ch->state, SHOAL_RDMA_CHAN_READY);
        cli_complete_sends(c);
}

static void cli_submit(struct cli *c, unsigned i)
{
        struct shoal_rdma_creq *r = &c->req[i];
        memset(r, 0, sizeof(*r));
        r->type = SHOAL_MSG_READ;
        r->id = 1 + i;
        r->len = 65536;
        r->deadline = c->now + 30000 * MS;
        static const uint8_t body[16];
        r->body = body;
        r->body_len = sizeof(body);
        shoal_rdma_link_submit(&c->l, r, c->now);
}

/* Answers the request that a send posted on CH carries (the member's READ_RESP). */
static void cli_answer(struct cli *c, struct shoal_rdma_chan *ch, uint64_t id)
{
        uint8_t f[SHOAL_WIRE_HDR_LEN];
        size_t n = shoal_wire_frame_encode(f, SHOAL_MSG_READ_RESP, SHOAL_WF_RDMA_WRITTEN, 0, id,
                                           NULL, 0);
        cli_deliver(c, ch, f, n);
}

/* Ids of the requests in flight on CH. */
static unsigned cli_inflight_ids(struct shoal_rdma_chan *ch, uint64_t *ids)
{
        unsigned n = 0;
        for (unsigned i = 0; i < ch->nrx; i++)
                if (ch->slots[i])
                        ids[n++] = ch->slots[i]->id;
        return n;
}

/* Finding 4: more requests than credits; each answer sends a waiting one at once (before the
 * fix they waited for the next submit, forever at the end of a run). */
static void test_cli_credit_wait(void **state)
{
        struct cli *c = cli_new(4, 1);
        struct shoal_rdma_chan *ch = cli_add(c, 16, 16);
        cli_open(c, ch);
        assert_int_equal(ch->credits, 4);
        for (unsigned i = 0; i < 10; i++)
                cli_submit(c, i);
        assert_int_equal(ch->inflight, 4);
        assert_int_equal(c->l.nwaiting, 6);
        uint64_t ids[64];
        for (int k = 0; k < 10; k++) {
                assert_true(cli_inflight_ids(ch, ids) > 0);
                cli_answer(c, ch, ids[0]);
                assert_true(ch->inflight <= ch->credits);
                cli_complete_sends(c);
        }
        for (unsigned i = 0; i < 10; i++) {
                assert_int_equal(c->done[i], 1);
                assert_int_equal(c->rc[i], 0);
        }
        assert_int_equal(c->fails, 0);
        free(c);
}

/* A request that waited its whole wait time goes to TCP (-ENOTCONN); the member is not failed. */
static void test_cli_wait_timeout(void **state)
{
        struct cli *c = cli_new(1, 1);
        struct shoal_rdma_chan *ch = cli_add(c, 16, 16);
        cli_open(c, ch);
        cli_submit(c, 0);
        cli_submit(c, 1);
        assert_int_equal(c->l.nwaiting, 1);
        shoal_rdma_link_tick(&c->l, c->now + 2000 * MS);
        assert_int_equal(c->done[1], 0);
        c->now += 3001 * MS;
        ch->last_rx = c->now; /* heartbeats were answered meanwhile */
        ch->ping_out = false;
        shoal_rdma_link_tick(&c->l, c->now);
        assert_int_equal(c->done[1], 1);
        assert_int_equal(c->rc[1], -ENOTCONN);
        assert_int_equal(c->fails, 0);
        assert_false(ch->broken);
        free(c);
}

/* Finding 3, requester side: credits free, send buffers held by late send completions: requests
 * wait for the buffers, one buffer always stays for the heartbeat. */
static void test_cli_slot_pressure_late_sends(void **state)
{
        struct cli *c = cli_new(32, 1);
        struct shoal_rdma_chan *ch = cli_add(c, 40, 4);
        cli_open(c, ch);
        for (unsigned i = 0; i < 8; i++)
                cli_submit(c, i);
        assert_int_equal(ch->inflight, 3); /* 4 buffers, one kept */
        uint64_t ids[64];
        unsigned n = cli_inflight_ids(ch, ids);
        for (unsigned k = 0; k < n; k++)
                cli_answer(c, ch, ids[k]); /* answers before the send completions */
        assert_int_equal(ch->inflight, 0);
        assert_int_equal(c->l.nwaiting, 5);              /* credits free, buffers not */
        shoal_rdma_link_tick(&c->l, c->now + 1000 * MS); /* the heartbeat takes the last one */
        assert_true(ch->ping_out);
        for (int k = 0; k < 4; k++) { /* the late completions: the waiting ones go */
                int i = posted_first(&c->out, SHOAL_FAB_OP_SEND);
                assert_true(i >= 0);
                cli_complete_op(c, (unsigned)i, 0);
        }
        assert_int_equal(ch->inflight, 3);
        assert_int_equal(c->l.nwaiting, 2);
        assert_int_equal(c->fails, 0);
        free(c);
}

/* FI_SHUTDOWN twice and a flush of every posted operation in random order: requests come back
 * once, the posted count never goes negative, nothing is posted after the shutdown. */
static void test_cli_shutdown_twice_and_flush(void **state)
{
        for (uint64_t seed = 1; seed <= 20; seed++) {
                rng = seed * 104729;
                struct cli *c = cli_new(8, 2);
                struct shoal_rdma_chan *ch = cli_add(c, 16, 16);
                cli_open(c, ch);
                for (unsigned i = 0; i < 12; i++)
                        cli_submit(c, i);
                shoal_rdma_chan_error(ch, "the member shut the connection down", c->now);
                shoal_rdma_chan_error(ch, "the member shut the connection down", c->now);
                assert_int_equal(c->fails, 1);
                assert_int_equal(c->shutdowns, 1);
                for (unsigned i = 0; i < 12; i++) {
                        assert_int_equal(c->done[i], 1);
                        assert_int_equal(c->rc[i], -ENOTCONN);
                }
                while (c->out.n) {
                        cli_complete_op(c, (unsigned)(rnd() % c->out.n), FI_ECANCELED);
                        assert_true(ch->posted >= 0);
                }
                assert_false(shoal_rdma_chan_can_free(ch));
                shoal_rdma_chan_ep_closed(ch);
                assert_true(shoal_rdma_chan_can_free(ch));
                free(c);
        }
}

/* A channel added for load that fails to connect is dropped; the member is not failed. A
 * failing only channel fails the member. */
static void test_cli_grow_failure(void **state)
{
        struct cli *c = cli_new(8, 4);
        struct shoal_rdma_chan *a = cli_add(c, 16, 16);
        cli_open(c, a);
        struct shoal_rdma_chan *b = cli_add(c, 16, 16);
        shoal_rdma_chan_error(b, "connection refused", c->now);
        assert_int_equal(c->fails, 0);
        assert_true(b->broken);
        assert_false(a->broken);
        assert_int_equal(c->l.nchans, 1);
        shoal_rdma_chan_error(a, "connection reset", c->now);
        assert_int_equal(c->fails, 1);
        free(c);
}

/* Issue 32: the only channel refused before it connected is tried again after milliseconds
 * (doubling pauses), its waiting request kept and sent once a retry gets in, the member not
 * failed; refusals past the window, or of a channel that was up, fail it as before. */
static void test_cli_refused_retry(void **state)
{
        struct cli *c = cli_new(8, 4);
        c->l.cfg.refused_pause_ns = 5 * MS;
        c->l.cfg.refused_ns = 10000 * MS;
        struct shoal_rdma_chan *ch = cli_add(c, 16, 16);
        cli_submit(c, 0);
        assert_int_equal(c->l.nwaiting, 1);
        uint64_t pause[4];
        for (int k = 0; k < 4; k++) {
                shoal_rdma_chan_refused(ch, "connection refused", c->now);
                assert_int_equal(c->fails, 0);
                assert_true(ch->broken);
                assert_int_equal(c->l.nchans, 0);
                assert_int_equal(c->l.nwaiting, 1); /* still waiting for a channel */
                pause[k] = c->l.retry_at - c->now;
                assert_true(pause[k] >= (5 * MS << k) / 2 && pause[k] <= 5 * MS << k);
                assert_false(shoal_rdma_link_retry(&c->l, c->now + pause[k] - 1));
                int grows = c->grows;
                c->now += pause[k];
                assert_true(shoal_rdma_link_retry(&c->l, c->now));
                assert_int_equal(c->grows, grows + 1);
                assert_false(shoal_rdma_link_retry(&c->l, c->now)); /* one at a time */
                ch = cli_add(c, 16, 16);                            /* the channel asked for */
        }
        cli_open(c, ch);
        assert_int_equal(c->l.refusals, 0);
        shoal_rdma_link_tick(&c->l, c->now);
        uint64_t ids[64];
        assert_int_equal(cli_inflight_ids(ch, ids), 1); /* sent on the channel that got in */
        cli_answer(c, ch, ids[0]);
        assert_int_equal(c->done[0], 1);
        assert_int_equal(c->rc[0], 0);
        assert_int_equal(c->fails, 0);
        /* a channel that was up and is refused later is a failure */
        shoal_rdma_chan_refused(ch, "connection refused", c->now);
        assert_int_equal(c->fails, 1);
        /* refusals past the window fail the member */
        struct cli *d = cli_new(8, 4);
        d->l.cfg.refused_pause_ns = 5 * MS;
        d->l.cfg.refused_ns = 100 * MS;
        struct shoal_rdma_chan *x = cli_add(d, 16, 16);
        shoal_rdma_chan_refused(x, "connection refused", d->now);
        d->now += 101 * MS;
        assert_true(shoal_rdma_link_retry(&d->l, d->now));
        x = cli_add(d, 16, 16);
        shoal_rdma_chan_refused(x, "connection refused", d->now);
        assert_int_equal(d->fails, 1);
        free(c);
        free(d);
}

/* [R5]: a busy channel grows the link (one at a time), an idle shrink period drains it back to
 * one, a drained channel shuts down once idle without failing the member. */
static void test_cli_scaling(void **state)
{
        int64_t g0 = gauge(SHOAL_M_rdma_channels);
        struct cli *c = cli_new(60, 4);
        struct shoal_rdma_chan *a = cli_add(c, 64, 64);
        cli_open(c, a);
        assert_int_equal(gauge(SHOAL_M_rdma_channels), g0 + 1);
        a->win_ops = 600; /* 6000/s over the 100 ms period */
        shoal_rdma_link_tick(&c->l, c->now + 100 * MS);
        assert_int_equal(c->grows, 1);
        a->win_ops = 600;
        shoal_rdma_link_tick(&c->l, c->now + 200 * MS);
        assert_int_equal(c->grows, 1); /* one at a time */
        c->now += 200 * MS;
        struct shoal_rdma_chan *b = cli_add(c, 64, 64);
        cli_open(c, b);
        a->last_rx = b->last_rx = c->now;
        assert_int_equal(shoal_rdma_link_ready(&c->l), 2);
        assert_int_equal(gauge(SHOAL_M_rdma_channels), g0 + 2);
        /* quiet for a whole shrink period */
        for (int k = 0; k < 70; k++) {
                c->now += 100 * MS;
                a->last_rx = b->last_rx = c->now;
                a->ping_out = b->ping_out = false;
                a->last_ping = b->last_ping = c->now;
                shoal_rdma_link_tick(&c->l, c->now);
        }
        assert_int_equal(shoal_rdma_link_ready(&c->l), 1);
        assert_int_equal(c->l.nchans, 1);
        assert_int_equal(c->fails, 0);
        assert_int_equal(c->shutdowns, 1);
        /* the drained channel left the gauge once (when it stopped taking requests) */
        assert_int_equal(gauge(SHOAL_M_rdma_channels), g0 + 1);
        /* never below one */
        for (int k = 0; k < 70; k++) {
                c->now += 100 * MS;
                c->l.chans[0]->last_rx = c->l.chans[0]->last_ping = c->now;
                c->l.chans[0]->ping_out = false;
                shoal_rdma_link_tick(&c->l, c->now);
        }
        assert_int_equal(c->l.nchans, 1);
        shoal_rdma_link_fail(&c->l, c->now);
        assert_int_equal(gauge(SHOAL_M_rdma_channels), g0);
        free(c);
}

/* Property: random interleavings of submissions, answers, late send completions and ticks over
 * up to three channels. */
static void test_cli_random_orders(void **state)
{
        for (uint64_t seed = 1; seed <= 200; seed++) {
                rng = seed * 6364136223846793005ULL + 1;
                struct cli *c = cli_new(1 + rnd() % 8, 3);
                unsigned nch = 1 + rnd() % 3;
                for (unsigned k = 0; k < nch; k++)
                        cli_open(c, cli_add(c, 4 + rnd() % 12, 3 + rnd() % 12));
                unsigned next = 0;
                for (int step = 0; step < 600; step++) {
                        unsigned k = (unsigned)(rnd() % nch);
                        struct shoal_rdma_chan *ch = &c->ch[k];
                        switch (rnd() % 5) {
                        case 0:
                        case 1:
                                if (next < 512)
                                        cli_submit(c, next++);
                                break;
                        case 2: {
                                uint64_t ids[64];
                                unsigned n = ch->broken ? 0 : cli_inflight_ids(ch, ids);
                                if (n)
                                        cli_answer(c, ch, ids[rnd() % n]);
                                break;
                        }
                        case 3: {
                                int i = posted_first(&c->out, SHOAL_FAB_OP_SEND);
                                if (i >= 0)
                                        cli_complete_op(c, (unsigned)i, 0);
                                break;
                        }
                        default:
                                for (unsigned j = 0; j < nch; j++) {
                                        c->ch[j].last_rx = c->now;
                                        c->ch[j].ping_out = false;
                                }
                                shoal_rdma_link_tick(&c->l, c->now);
                                break;
                        }
                        for (unsigned j = 0; j < nch; j++) {
                                assert_true(c->ch[j].posted >= 0);
                                assert_true(c->ch[j].inflight <= c->ch[j].credits);
                                assert_true(c->ch[j].nsb_free <= c->ch[j].nsb);
                        }
                }
                assert_int_equal(c->fails, 0);
                /* drain: answer everything in flight, complete every send, wait out the rest */
                for (int round = 0; round < 2000 && (c->l.nwaiting || c->out.n); round++) {
                        bool any = false;
                        for (unsigned j = 0; j < nch; j++) {
                                uint64_t ids[64];
                                unsigned n = cli_inflight_ids(&c->ch[j], ids);
                                for (unsigned q = 0; q < n; q++)
                                        cli_answer(c, &c->ch[j], ids[q]);
                                any |= n > 0;
                        }
                        cli_complete_sends(c);
                        if (!any && !c->l.nwaiting)
                                break;
                }
                for (unsigned i = 0; i < next; i++)
                        assert_int_equal(c->done[i], 1);
                shoal_rdma_link_fail(&c->l, c->now);
                while (c->out.n)
                        cli_complete_op(c, (unsigned)(rnd() % c->out.n), FI_ECANCELED);
                for (unsigned j = 0; j < nch; j++) {
                        assert_int_equal(c->ch[j].posted, 0);
                        shoal_rdma_chan_ep_closed(&c->ch[j]);
                        assert_true(shoal_rdma_chan_can_free(&c->ch[j]));
                }
                free(c);
        }
}

static int setup(void **state)
{
        struct shoal_secret s = {.bytes = SECRET, .len = sizeof(SECRET) - 1};
        assert_int_equal(shoal_hs_key_init(&KEY, &s), 0);
        assert_int_equal(shoal_hs_key_init(&NOKEY, NULL), 0);
        return 0;
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_srv_receive_before_connected),
                cmocka_unit_test(test_srv_register_after_auth),
                cmocka_unit_test(test_srv_no_secret_pool_receive),
                cmocka_unit_test(test_srv_shutdown_twice_and_flush),
                cmocka_unit_test(test_srv_slot_pressure_late_sends),
                cmocka_unit_test(test_srv_eagain),
                cmocka_unit_test(test_srv_eagain_idle),
                cmocka_unit_test(test_srv_deadlines),
                cmocka_unit_test(test_srv_random_orders),
                cmocka_unit_test(test_cli_credit_wait),
                cmocka_unit_test(test_cli_wait_timeout),
                cmocka_unit_test(test_cli_slot_pressure_late_sends),
                cmocka_unit_test(test_cli_shutdown_twice_and_flush),
                cmocka_unit_test(test_cli_grow_failure),
                cmocka_unit_test(test_cli_refused_retry),
                cmocka_unit_test(test_cli_scaling),
                cmocka_unit_test(test_cli_random_orders),
        };
        return cmocka_run_group_tests(tests, setup, NULL);
}
