/* The RDMA requester's links and channels as state machines. See rdma_chan.h. */
#include "transport/rdma_chan.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "common/log.h"
#include "common/util.h"
#include "metrics/metrics.h"

void shoal_rdma_link_init(struct shoal_rdma_link *l, const struct shoal_rdma_link_ops *ops,
                          void *env, const struct shoal_rdma_link_config *cfg, uint64_t now)
{
        memset(l, 0, sizeof(*l));
        l->ops = ops;
        l->env = env;
        l->cfg = *cfg;
        if (!l->cfg.max_chans || l->cfg.max_chans > SHOAL_RDMA_CHANS_MAX)
                l->cfg.max_chans = SHOAL_RDMA_CHANS_MAX;
        l->next_grow = now + l->cfg.grow_ns;
        l->next_shrink = now + l->cfg.shrink_ns;
        shoal_list_init(&l->waiting);
}

unsigned shoal_rdma_link_ready(const struct shoal_rdma_link *l)
{
        unsigned n = 0;
        for (unsigned i = 0; i < l->nchans; i++)
                n += l->chans[i]->state == SHOAL_RDMA_CHAN_READY && !l->chans[i]->draining;
        return n;
}

/* ---- channels ------------------------------------------------------------------------------ */

static void link_remove(struct shoal_rdma_link *l, struct shoal_rdma_chan *ch)
{
        for (unsigned i = 0; i < l->nchans; i++)
                if (l->chans[i] == ch) {
                        l->chans[i] = l->chans[--l->nchans];
                        l->chans[l->nchans] = NULL;
                        return;
                }
}

/* Shuts CH down (once): off its link, in-flight requests back with -ENOTCONN. The endpoint is
 * shut down first, so the member can no longer write into their buffers when they return. */
static void chan_down(struct shoal_rdma_chan *ch, uint64_t now)
{
        struct shoal_rdma_link *l = ch->link;
        if (ch->broken)
                return;
        ch->broken = true;
        ch->broken_at = now;
        if (ch->state == SHOAL_RDMA_CHAN_READY && !ch->draining) /* draining: already off */
                shoal_metric_gauge_add(SHOAL_M_rdma_channels, -1);
        link_remove(l, ch);
        l->ops->shutdown(l->env, ch);
        for (unsigned i = 0; i < ch->nrx; i++) {
                struct shoal_rdma_creq *r = ch->slots[i];
                if (!r)
                        continue;
                ch->slots[i] = NULL;
                r->ch = NULL;
                l->ops->complete(l->env, r, -ENOTCONN);
        }
        ch->inflight = 0;
}

/* CH failed: a channel carrying requests (or the link's only one) fails the member; one being
 * added for load, or draining, just goes. */
static void chan_failed(struct shoal_rdma_chan *ch, const char *why, uint64_t now)
{
        struct shoal_rdma_link *l = ch->link;
        if (ch->broken)
                return;
        bool others = false;
        for (unsigned i = 0; i < l->nchans; i++)
                if (l->chans[i] != ch && l->chans[i]->state == SHOAL_RDMA_CHAN_READY)
                        others = true;
        if (ch->draining || (ch->state != SHOAL_RDMA_CHAN_READY && others)) {
                log_debug("rdma", "channel to %s dropped: %s", ch->addr, why);
                chan_down(ch, now);
                return;
        }
        l->ops->fail(l->env, l, why, now); /* comes back as shoal_rdma_link_fail */
        chan_down(ch, now);
}

void shoal_rdma_chan_error(struct shoal_rdma_chan *ch, const char *why, uint64_t now)
{
        chan_failed(ch, why, now);
}

/* Longest pause between two tries of a refused connection. */
#define REFUSED_PAUSE_MAX_NS (200 * SHOAL_NS_PER_MS)

void shoal_rdma_chan_refused(struct shoal_rdma_chan *ch, const char *why, uint64_t now)
{
        struct shoal_rdma_link *l = ch->link;
        if (ch->broken)
                return;
        /* Only the link's only channel, refused before it connected, within the retry window:
         * a member at its pre-authentication limits admits the next requester in milliseconds,
         * which is no reason to read from it over TCP for the retry duration. */
        bool window = !l->refusals || now - l->refused_since < l->cfg.refused_ns;
        if (ch->state != SHOAL_RDMA_CHAN_CONNECTING || ch->draining || l->nchans != 1 ||
            !l->cfg.refused_ns || !l->cfg.refused_pause_ns || !window) {
                chan_failed(ch, why, now);
                return;
        }
        if (!l->refusals)
                l->refused_since = now;
        unsigned shift = l->refusals < 6 ? l->refusals : 6;
        l->refusals++;
        uint64_t d = SHOAL_MIN(l->cfg.refused_pause_ns << shift, REFUSED_PAUSE_MAX_NS);
        /* jitter: requesters refused together do not come back together */
        d = d / 2 + l->ops->rand(l->env) % (d / 2 + 1);
        l->retry_at = now + d;
        shoal_metric_inc(SHOAL_M_rdma_connect_retries);
        log_debug("rdma", "connection to %s refused (%s): try %u again in %llu ms", ch->addr, why,
                  l->refusals, (unsigned long long)(d / SHOAL_NS_PER_MS));
        chan_down(ch, now);
}

bool shoal_rdma_link_retry(struct shoal_rdma_link *l, uint64_t now)
{
        if (!l->retry_at || now < l->retry_at || l->nchans || l->growing)
                return false;
        l->retry_at = 0;
        if (l->ops->grow(l->env, l)) {
                l->ops->fail(l->env, l, "cannot open a channel", now);
                return false;
        }
        l->growing = true;
        return true;
}

static struct shoal_rdma_cbuf *sb_get(struct shoal_rdma_chan *ch)
{
        struct shoal_rdma_cbuf *b = ch->sb_free;
        if (b) {
                ch->sb_free = b->next;
                ch->nsb_free--;
        }
        return b;
}

static void sb_put(struct shoal_rdma_chan *ch, struct shoal_rdma_cbuf *b)
{
        b->next = ch->sb_free;
        ch->sb_free = b;
        ch->nsb_free++;
}

/* Sends LEN bytes already in B. Returns 0, -FI_EAGAIN (B back in the pool) or an error (B back
 * in the pool; the caller fails CH). */
static int chan_send(struct shoal_rdma_chan *ch, struct shoal_rdma_cbuf *b, size_t len)
{
        int rc = ch->link->ops->post_send(ch->link->env, ch, b, len);
        if (rc) {
                sb_put(ch, b);
                return rc;
        }
        b->posted = true;
        ch->posted++;
        return 0;
}

static bool chan_send_hs(struct shoal_rdma_chan *ch)
{
        struct shoal_rdma_cbuf *b = sb_get(ch);
        if (!b || ch->hs.out_len > SHOAL_FAB_MSG_SLOT) {
                if (b)
                        sb_put(ch, b);
                return false;
        }
        memcpy(b->data, ch->hs.out, ch->hs.out_len);
        return chan_send(ch, b, ch->hs.out_len) == 0;
}

int shoal_rdma_link_add(struct shoal_rdma_link *l, struct shoal_rdma_chan *ch, uint64_t now)
{
        l->growing = false;
        if (l->nchans >= l->cfg.max_chans)
                return -ENOSPC;
        ch->link = l;
        ch->state = SHOAL_RDMA_CHAN_CONNECTING;
        ch->deadline = now + l->cfg.connect_ns;
        ch->sb_free = NULL;
        ch->nsb_free = 0;
        for (unsigned i = ch->nsb; i-- > 0;) {
                struct shoal_rdma_cbuf *b = &ch->sb[i];
                b->ch = ch;
                b->op.kind = SHOAL_FAB_OP_SEND;
                b->op.owner = b;
                sb_put(ch, b);
        }
        for (unsigned i = 0; i < ch->nrx; i++) {
                struct shoal_rdma_cbuf *b = &ch->rx[i];
                b->ch = ch;
                b->op.kind = SHOAL_FAB_OP_RX;
                b->op.owner = b;
                int rc = l->ops->post_rx(l->env, ch, b);
                if (rc)
                        return rc;
                b->posted = true;
                ch->posted++;
        }
        l->chans[l->nchans++] = ch;
        return 0;
}

void shoal_rdma_link_grow_failed(struct shoal_rdma_link *l)
{
        l->growing = false;
}

void shoal_rdma_chan_connected(struct shoal_rdma_chan *ch, uint64_t now)
{
        if (ch->broken || ch->state != SHOAL_RDMA_CHAN_CONNECTING)
                return;
        /* The proofs bind the address we dialed (wire/handshake.h). */
        struct shoal_hs_config hc = {.role = SHOAL_HS_REQUESTER,
                                     .key = ch->link->cfg.key,
                                     .service = SHOAL_SERVICE_RDMA,
                                     .addr = ch->addr};
        if (shoal_hs_start(&ch->hs, &hc)) {
                chan_failed(ch, ch->hs.why ? ch->hs.why : "cannot start the handshake", now);
                return;
        }
        if (!chan_send_hs(ch)) {
                chan_failed(ch, "cannot send HELLO", now);
                return;
        }
        ch->state = SHOAL_RDMA_CHAN_HELLO;
        ch->deadline = now + ch->link->cfg.connect_ns;
}

/* ---- requests ------------------------------------------------------------------------------ */

/* A channel with room for one more request: a random idle one, else a random one with a free
 * credit; one send buffer always stays for the heartbeat. */
static struct shoal_rdma_chan *pick(struct shoal_rdma_link *l)
{
        struct shoal_rdma_chan *idle[SHOAL_RDMA_CHANS_MAX], *open[SHOAL_RDMA_CHANS_MAX];
        unsigned ni = 0, no = 0;
        for (unsigned i = 0; i < l->nchans; i++) {
                struct shoal_rdma_chan *ch = l->chans[i];
                if (ch->state != SHOAL_RDMA_CHAN_READY || ch->draining ||
                    ch->inflight >= ch->credits || ch->nsb_free < 2)
                        continue;
                if (!ch->inflight)
                        idle[ni++] = ch;
                open[no++] = ch;
        }
        if (ni)
                return idle[l->ops->rand(l->env) % ni];
        return no ? open[l->ops->rand(l->env) % no] : NULL;
}

/* Sends R on CH. Returns 0, -FI_EAGAIN or another error. */
static int chan_post(struct shoal_rdma_chan *ch, struct shoal_rdma_creq *r)
{
        struct shoal_rdma_cbuf *b = sb_get(ch);
        if (!b)
                return -FI_EAGAIN;
        if (SHOAL_WIRE_HDR_LEN + r->body_len > SHOAL_FAB_MSG_SLOT) {
                sb_put(ch, b);
                return -EMSGSIZE;
        }
        size_t len = shoal_wire_frame_encode((uint8_t *)b->data, r->type, r->flags, 0, r->id,
                                             r->body, r->body_len);
        int rc = chan_send(ch, b, len);
        if (rc)
                return rc;
        for (unsigned i = 0; i < ch->nrx; i++)
                if (!ch->slots[i]) {
                        ch->slots[i] = r;
                        break;
                }
        ch->inflight++;
        r->ch = ch;
        return 0;
}

static void waiting_push_front(struct shoal_rdma_link *l, struct shoal_rdma_creq *r)
{
        shoal_list_push_front(&l->waiting, &r->wait);
        l->nwaiting++;
}

static void waiting_del(struct shoal_rdma_link *l, struct shoal_rdma_creq *r)
{
        shoal_list_del(&r->wait);
        l->nwaiting--;
}

static struct shoal_rdma_creq *waiting_pop(struct shoal_rdma_link *l)
{
        if (shoal_list_empty(&l->waiting))
                return NULL;
        struct shoal_rdma_creq *r = shoal_list_entry(l->waiting.next, struct shoal_rdma_creq, wait);
        waiting_del(l, r);
        return r;
}

/* Sends waiting requests while channels have room. */
static void dispatch(struct shoal_rdma_link *l, uint64_t now)
{
        while (!shoal_list_empty(&l->waiting)) {
                struct shoal_rdma_chan *ch = pick(l);
                if (!ch)
                        return;
                struct shoal_rdma_creq *r = waiting_pop(l);
                int rc = chan_post(ch, r);
                if (!rc)
                        continue;
                waiting_push_front(l, r);
                if (rc != -FI_EAGAIN)
                        chan_failed(ch, "cannot send a request", now);
                return; /* a full queue: the next completion or tick retries */
        }
}

void shoal_rdma_link_submit(struct shoal_rdma_link *l, struct shoal_rdma_creq *r, uint64_t now)
{
        r->ch = NULL;
        r->wait_until = now + l->cfg.wait_ns;
        if (r->deadline && r->deadline < r->wait_until)
                r->wait_until = r->deadline;
        shoal_list_push_back(&l->waiting, &r->wait);
        l->nwaiting++;
        dispatch(l, now);
}

/* ---- answers -------------------------------------------------------------------------------- */

static bool on_handshake(struct shoal_rdma_chan *ch, const struct shoal_wire_hdr *h,
                         const uint8_t *body, uint64_t now)
{
        struct shoal_rdma_link *l = ch->link;
        enum shoal_hs_verdict v = shoal_hs_step(&ch->hs, h, body);
        if (v == SHOAL_HS_FAIL) {
                log_ratelimited(ch->hs.error == -EACCES ? SHOAL_LOG_WARN : SHOAL_LOG_INFO, "rdma",
                                "handshake with member %s failed: %s", ch->addr, ch->hs.why);
                return false;
        }
        if (v == SHOAL_HS_MORE) {
                if (!chan_send_hs(ch))
                        return false;
                ch->state = SHOAL_RDMA_CHAN_AUTH;
                return true;
        }
        /* Answers need receives: the requests in flight and the heartbeat. */
        ch->credits = SHOAL_MIN(ch->hs.peer_max_inflight, ch->nrx - 2);
        if (ch->credits < 1 || ch->nsb < 2)
                return false;
        ch->state = SHOAL_RDMA_CHAN_READY;
        l->refusals = 0;
        ch->last_rx = ch->last_ping = now;
        shoal_metric_gauge_add(SHOAL_M_rdma_channels, 1);
        l->ops->ready(l->env, ch);
        return true;
}

static struct shoal_rdma_creq *slot_take(struct shoal_rdma_chan *ch, uint64_t id)
{
        for (unsigned i = 0; i < ch->nrx; i++) {
                struct shoal_rdma_creq *r = ch->slots[i];
                if (r && r->id == id) {
                        ch->slots[i] = NULL;
                        ch->inflight--;
                        r->ch = NULL;
                        return r;
                }
        }
        return NULL;
}

static bool answer_fits(const struct shoal_rdma_creq *r, const struct shoal_wire_hdr *h)
{
        if (h->body_len > SHOAL_RDMA_RESP_MAX)
                return false;
        if (r->type == SHOAL_MSG_PING)
                return h->type == SHOAL_MSG_PONG;
        return (h->type == SHOAL_MSG_READ_RESP && (h->flags & SHOAL_WF_RDMA_WRITTEN)) ||
               h->type == SHOAL_MSG_ERROR;
}

/* One received message. False when it does not fit: the channel fails. */
static bool on_message(struct shoal_rdma_chan *ch, const uint8_t *msg, size_t len, uint64_t now)
{
        struct shoal_rdma_link *l = ch->link;
        struct shoal_wire_hdr h;
        if (shoal_wire_msg_decode(msg, len, &h))
                return false;
        const uint8_t *body = msg + SHOAL_WIRE_HDR_LEN;
        if (ch->state == SHOAL_RDMA_CHAN_CONNECTING)
                return false; /* the member speaks only after our HELLO */
        if (ch->state != SHOAL_RDMA_CHAN_READY)
                return on_handshake(ch, &h, body, now);
        if (ch->ping_out && h.id == ch->ping_id) {
                ch->ping_out = false;
                return h.type == SHOAL_MSG_PONG;
        }
        struct shoal_rdma_creq *r = slot_take(ch, h.id);
        if (!r)
                return false; /* an answer nobody asked for: never guess */
        if (!answer_fits(r, &h)) {
                l->ops->complete(l->env, r, -ENOTCONN);
                return false;
        }
        r->h = h;
        memcpy(r->resp, body, h.body_len);
        ch->win_ops++;
        if (h.type == SHOAL_MSG_READ_RESP)
                ch->win_bytes += r->len;
        l->ops->complete(l->env, r, 0);
        return true;
}

static void on_recv(struct shoal_rdma_chan *ch, struct shoal_rdma_cbuf *b, size_t len, int err,
                    uint64_t now)
{
        if (ch->broken)
                return;
        if (err) {
                chan_failed(ch, err == FI_ECANCELED ? "receive flushed" : "receive failed", now);
                return;
        }
        ch->last_rx = now;
        if (!on_message(ch, (const uint8_t *)b->data, len, now)) {
                chan_failed(ch, "bad or unexpected answer", now);
                return;
        }
        if (ch->broken)
                return;
        int rc = ch->link->ops->post_rx(ch->link->env, ch, b);
        if (rc) {
                chan_failed(ch, "cannot post a receive", now);
                return;
        }
        b->posted = true;
        ch->posted++;
        dispatch(ch->link, now);
}

void shoal_rdma_chan_completion(struct shoal_rdma_chan *ch, struct shoal_fab_op *op, size_t len,
                                int err, uint64_t now)
{
        struct shoal_rdma_cbuf *b = op->owner;
        if (!b->posted) {
                log_ratelimited(SHOAL_LOG_WARN, "rdma",
                                "channel to %s: a completion for a "
                                "buffer that was not posted",
                                ch->addr);
                chan_failed(ch, "unexpected completion", now);
                return;
        }
        b->posted = false;
        ch->posted--;
        if (op->kind == SHOAL_FAB_OP_RX) {
                on_recv(ch, b, len, err, now);
                return;
        }
        sb_put(ch, b);
        if (ch->broken)
                return;
        if (err)
                chan_failed(ch, err == FI_ECANCELED ? "send flushed" : "send failed", now);
        else
                dispatch(ch->link, now);
}

void shoal_rdma_chan_ep_closed(struct shoal_rdma_chan *ch)
{
        ch->ep_closed = true;
}

bool shoal_rdma_chan_can_free(const struct shoal_rdma_chan *ch)
{
        return ch->broken && ch->ep_closed && ch->posted == 0;
}

/* ---- time ----------------------------------------------------------------------------------- */

/* Deadlines and the heartbeat of CH. False when CH (and maybe the member) failed. */
static bool chan_tick(struct shoal_rdma_chan *ch, uint64_t now)
{
        struct shoal_rdma_link *l = ch->link;
        if (ch->state != SHOAL_RDMA_CHAN_READY) {
                if (now <= ch->deadline)
                        return true;
                char why[128], d[32];
                shoal_format_duration(l->cfg.connect_ns, d, sizeof(d));
                snprintf(why, sizeof(why), "no connection to %s within %s", ch->addr, d);
                chan_failed(ch,
                            ch->state == SHOAL_RDMA_CHAN_CONNECTING ? why : "handshake deadline",
                            now);
                return false;
        }
        if (ch->ping_out && now - ch->last_rx > 3 * l->cfg.hb_ns) {
                chan_failed(ch, "no heartbeat answer", now);
                return false;
        }
        for (unsigned i = 0; i < ch->nrx; i++)
                if (ch->slots[i] && now > ch->slots[i]->deadline) {
                        chan_failed(ch, "a request passed its deadline", now);
                        return false;
                }
        if (ch->draining && !ch->inflight) {
                chan_down(ch, now); /* graceful: nothing in flight, the member loses nothing */
                return false;
        }
        if (ch->ping_out || now - ch->last_ping < l->cfg.hb_ns || ch->nsb_free < 1)
                return true;
        struct shoal_rdma_cbuf *b = sb_get(ch);
        ch->ping_id = l->ops->new_id(l->env);
        size_t n = shoal_wire_frame_encode((uint8_t *)b->data, SHOAL_MSG_PING, 0, 0, ch->ping_id,
                                           &now, sizeof(now));
        int rc = chan_send(ch, b, n);
        if (rc == -FI_EAGAIN)
                return true;
        if (rc) {
                chan_failed(ch, "cannot send a heartbeat", now);
                return false;
        }
        ch->ping_out = true;
        ch->last_ping = now;
        return true;
}

/* [R5]: the decision, as transport/iorpc_client.c makes it for TCP. */
static void scale(struct shoal_rdma_link *l, uint64_t now)
{
        if (now < l->next_grow)
                return;
        bool shrink_time = now >= l->next_shrink;
        double gsecs = (double)l->cfg.grow_ns / (double)SHOAL_NS_PER_SEC,
               ssecs = (double)l->cfg.shrink_ns / (double)SHOAL_NS_PER_SEC;
        bool grow = false, all_low = true;
        unsigned usable = 0, pending = 0;
        double tot_bytes = 0, tot_ops = 0;
        for (unsigned i = 0; i < l->nchans; i++) {
                struct shoal_rdma_chan *ch = l->chans[i];
                if (ch->state != SHOAL_RDMA_CHAN_READY) {
                        pending++;
                        continue;
                }
                if (ch->draining)
                        continue;
                usable++;
                ch->long_bytes += ch->win_bytes;
                ch->long_ops += ch->win_ops;
                if ((double)ch->win_bytes / gsecs > (double)l->cfg.grow_bytes ||
                    (double)ch->win_ops / gsecs > (double)l->cfg.grow_qps)
                        grow = true;
                ch->win_bytes = ch->win_ops = 0;
                if (!shrink_time)
                        continue;
                double br = (double)ch->long_bytes / ssecs, qr = (double)ch->long_ops / ssecs;
                if (br >= (double)l->cfg.shrink_bytes || qr >= (double)l->cfg.shrink_qps)
                        all_low = false;
                tot_bytes += br;
                tot_ops += qr;
                ch->long_bytes = ch->long_ops = 0;
        }
        l->next_grow = now + l->cfg.grow_ns;
        if (shrink_time)
                l->next_shrink = now + l->cfg.shrink_ns;
        if (grow && usable && !pending && !l->growing && l->nchans < l->cfg.max_chans) {
                if (!l->ops->grow(l->env, l))
                        l->growing = true;
                return;
        }
        if (!shrink_time || !all_low || usable <= 1)
                return;
        unsigned need = (unsigned)(tot_bytes / (double)l->cfg.shrink_bytes) + 1;
        unsigned need_ops = (unsigned)(tot_ops / (double)l->cfg.shrink_qps) + 1;
        need = need_ops > need ? need_ops : need;
        while (usable > need) {
                struct shoal_rdma_chan *victim = NULL;
                for (unsigned i = 0; i < l->nchans; i++) {
                        struct shoal_rdma_chan *ch = l->chans[i];
                        if (ch->state == SHOAL_RDMA_CHAN_READY && !ch->draining &&
                            (!victim || ch->inflight < victim->inflight))
                                victim = ch;
                }
                if (!victim)
                        break;
                victim->draining = true; /* no new requests; shut down once idle */
                shoal_metric_gauge_add(SHOAL_M_rdma_channels, -1);
                usable--;
        }
}

void shoal_rdma_link_tick(struct shoal_rdma_link *l, uint64_t now)
{
        struct shoal_rdma_chan *chans[SHOAL_RDMA_CHANS_MAX];
        unsigned n = l->nchans;
        memcpy(chans, l->chans, n * sizeof(chans[0]));
        for (unsigned i = 0; i < n; i++) {
                if (chans[i]->broken)
                        continue; /* gone with the member failing */
                chan_tick(chans[i], now);
        }
        /* Requests that waited for a credit too long go by TCP; the member is not failed. */
        struct shoal_list *pos, *next;
        list_for_each (pos, next, &l->waiting) {
                struct shoal_rdma_creq *r = shoal_list_entry(pos, struct shoal_rdma_creq, wait);
                if (now < r->wait_until)
                        continue;
                waiting_del(l, r);
                shoal_metric_inc(SHOAL_M_rdma_wait_spills);
                log_debug("rdma", "request %llu waited too long for a channel (%u up): by TCP",
                          (unsigned long long)r->id, l->nchans);
                l->ops->complete(l->env, r, -ENOTCONN);
        }
        dispatch(l, now);
        scale(l, now);
}

void shoal_rdma_link_fail(struct shoal_rdma_link *l, uint64_t now)
{
        while (l->nchans)
                chan_down(l->chans[0], now);
        struct shoal_rdma_creq *r;
        while ((r = waiting_pop(l)))
                l->ops->complete(l->env, r, -ENOTCONN);
        l->growing = false;
        l->retry_at = 0;
        l->refusals = 0;
}
