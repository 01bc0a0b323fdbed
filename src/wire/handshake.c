/* The handshake state machine (wire/handshake.h). Pure: the only side effects are the CSPRNG at
 * start and one metric counter on an authentication failure. */
#include "wire/handshake.h"

#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>

#include "common/util.h"
#include "metrics/metrics.h"

enum hs_state {
        HS_IDLE = 0, /* not started */
        HS_REQ_WAIT_ACK,
        HS_REQ_WAIT_AUTH_OK,
        HS_SRV_WAIT_HELLO,
        HS_SRV_WAIT_AUTH,
        HS_DONE,
        HS_FAILED,
};

/* Domain separation: the group key is used for nothing but these proofs, and the two directions
 * have labels that differ (neither is a prefix of the other, NUL included). */
static const char KEY_LABEL[] = "shoal group key v2";
static const char LABEL_REQ[] = "shoal v2 requester proof";
static const char LABEL_SRV[] = "shoal v2 server proof";

_Static_assert(sizeof(((struct shoal_hs *)0)->hello) == 3 + SHOAL_WIRE_NONCE_LEN, "HELLO body");
_Static_assert(SHOAL_HS_FRAME_MAX >= SHOAL_WIRE_HDR_LEN + sizeof(((struct shoal_hs *)0)->ack),
               "HELLO_ACK fits the output frame");

int shoal_hs_key_init(struct shoal_hs_key *key, const struct shoal_secret *secret)
{
        memset(key, 0, sizeof(*key));
        if (!shoal_secret_set(secret))
                return 0;
        if (!secret->bytes || secret->len < SHOAL_SECRET_MIN || secret->len > SHOAL_SECRET_MAX)
                return -EINVAL;
        unsigned int md_len = 0;
        if (!HMAC(EVP_sha256(), secret->bytes, (int)secret->len, (const uint8_t *)KEY_LABEL,
                  sizeof(KEY_LABEL) - 1, key->k, &md_len) ||
            md_len != SHOAL_HS_KEY_LEN)
                /* Only a broken libcrypto gets here; going on without a key is not an option. */
                abort();
        key->set = true;
        return 0;
}

void shoal_hs_key_clear(struct shoal_hs_key *key)
{
        OPENSSL_cleanse(key, sizeof(*key));
}

/* HMAC(K, label ‖ u8 len(addr) ‖ addr ‖ HELLO body ‖ HELLO_ACK body). */
static void proof(const struct shoal_hs *hs, bool server, uint8_t out[SHOAL_WIRE_PROOF_LEN])
{
        const char *label = server ? LABEL_SRV : LABEL_REQ;
        size_t llen = server ? sizeof(LABEL_SRV) : sizeof(LABEL_REQ);
        uint8_t msg[sizeof(LABEL_REQ) + 1 + SHOAL_HS_ADDR_MAX + sizeof(hs->hello) +
                    sizeof(hs->ack)];
        size_t n = 0;
        memcpy(msg, label, llen);
        n += llen;
        msg[n++] = hs->addr_len;
        memcpy(msg + n, hs->addr, hs->addr_len);
        n += hs->addr_len;
        memcpy(msg + n, hs->hello, sizeof(hs->hello));
        n += sizeof(hs->hello);
        memcpy(msg + n, hs->ack, hs->ack_len);
        n += hs->ack_len;
        unsigned int md_len = 0;
        if (!HMAC(EVP_sha256(), hs->key->k, SHOAL_HS_KEY_LEN, msg, n, out, &md_len) ||
            md_len != SHOAL_WIRE_PROOF_LEN)
                abort(); /* a fixed fallback would be a proof anyone could send */
}

static bool has_key(const struct shoal_hs *hs)
{
        return hs->key && hs->key->set;
}

/* ADDR as "a.b.c.d:port" in OUT, the one spelling both ends produce. */
static int addr_canon(const char *addr, char out[SHOAL_HS_ADDR_MAX])
{
        char host[SHOAL_HS_ADDR_MAX];
        if (!addr || shoal_strlcpy(host, addr, sizeof(host)) >= sizeof(host))
                return -EINVAL;
        char *colon = strrchr(host, ':');
        if (!colon)
                return -EINVAL;
        *colon = '\0';
        uint64_t port;
        struct in_addr a;
        if (shoal_parse_u64(colon + 1, 65535, &port) || !port || inet_pton(AF_INET, host, &a) != 1)
                return -EINVAL;
        char ip[INET_ADDRSTRLEN];
        inet_ntop(AF_INET, &a, ip, sizeof(ip));
        snprintf(out, SHOAL_HS_ADDR_MAX, "%s:%u", ip, (unsigned)port);
        return 0;
}

int shoal_hs_start(struct shoal_hs *hs, const struct shoal_hs_config *cfg)
{
        memset(hs, 0, sizeof(*hs));
        hs->state = HS_FAILED;
        hs->error = -EINVAL;
        hs->why = "bad handshake configuration";
        if (cfg->service < 1 || cfg->service > 3 || addr_canon(cfg->addr, hs->addr))
                return -EINVAL;
        hs->addr_len = (uint8_t)strlen(hs->addr);
        hs->role = (uint8_t)cfg->role;
        hs->service = cfg->service;
        hs->key = cfg->key;
        if (cfg->role == SHOAL_HS_SERVER) {
                const char *id = cfg->member_id ? cfg->member_id : "";
                struct shoal_wire_hello_ack probe = {.version = SHOAL_WIRE_VERSION,
                                                     .max_inflight = cfg->max_inflight};
                if (shoal_strlcpy(probe.member_id, id, sizeof(probe.member_id)) >=
                            sizeof(probe.member_id) ||
                    shoal_wire_hello_ack_encode(hs->ack, sizeof(hs->ack), &probe) < 0)
                        return -EINVAL; /* an id the wire cannot carry, or max_inflight 0 */
                memcpy(hs->member_id, probe.member_id, sizeof(hs->member_id));
                hs->max_inflight = cfg->max_inflight;
        }
        if (cfg->nonce) {
                memcpy(hs->nonce, cfg->nonce, sizeof(hs->nonce));
        } else {
                int rc = shoal_random_bytes(hs->nonce, sizeof(hs->nonce));
                if (rc) {
                        hs->error = rc;
                        hs->why = "no random bytes for a nonce";
                        return rc;
                }
        }
        hs->error = 0;
        hs->why = NULL;
        if (cfg->role == SHOAL_HS_SERVER) {
                hs->state = HS_SRV_WAIT_HELLO;
                return 0;
        }
        struct shoal_wire_hello hello = {.min_version = SHOAL_WIRE_VERSION,
                                         .max_version = SHOAL_WIRE_VERSION,
                                         .service = cfg->service};
        memcpy(hello.nonce, hs->nonce, sizeof(hello.nonce));
        if (shoal_wire_hello_encode(hs->hello, sizeof(hs->hello), &hello) != (int)sizeof(hs->hello))
                abort(); /* a fixed layout */
        hs->out_len = shoal_wire_frame_encode(hs->out, SHOAL_MSG_HELLO, 0, 0, SHOAL_HS_HELLO_ID,
                                              hs->hello, sizeof(hs->hello));
        hs->state = HS_REQ_WAIT_ACK;
        return 0;
}

bool shoal_hs_over(const struct shoal_hs *hs)
{
        return hs->state == HS_DONE || hs->state == HS_FAILED || hs->state == HS_IDLE;
}

static enum shoal_hs_verdict fail(struct shoal_hs *hs, int error, const char *why)
{
        hs->state = HS_FAILED;
        hs->error = error;
        hs->why = why;
        if (error == -EACCES)
                shoal_metric_inc(SHOAL_M_remotecache_auth_failures);
        return SHOAL_HS_FAIL;
}

/* Server: an ERROR answer to ID in OUT (the requester learns why), then fail. */
static enum shoal_hs_verdict fail_answer(struct shoal_hs *hs, uint64_t id, uint32_t status,
                                         const char *reason, int error, const char *why)
{
        uint8_t body[64];
        int n = shoal_wire_error_encode(body, sizeof(body), reason);
        if (n >= 0)
                hs->out_len = shoal_wire_frame_encode(hs->out, SHOAL_MSG_ERROR, 0, status, id, body,
                                                      (size_t)n);
        return fail(hs, error, why);
}

/* Requester: an ERROR answer to one of our frames. */
static enum shoal_hs_verdict fail_status(struct shoal_hs *hs, uint32_t status)
{
        switch (status) {
        case SHOAL_ST_RPC_DISABLED:
                return fail(hs, -ENOPROTOOPT, "the member does not offer this service");
        case SHOAL_ST_AUTH_FAILED:
                return fail(hs, -EACCES,
                            "the member refused our proof (another group secret, or a relay "
                            "through another address)");
        default:
                return fail(hs, -EREMOTEIO, "the member answered the handshake with an error");
        }
}

static enum shoal_hs_verdict srv_hello(struct shoal_hs *hs, const struct shoal_wire_hdr *h,
                                       const uint8_t *body)
{
        struct shoal_wire_hello hello;
        if (h->type != SHOAL_MSG_HELLO)
                return fail(hs, -EPROTO, "the first frame is not HELLO");
        if (shoal_wire_hello_decode(body, h->body_len, &hello))
                return fail(hs, -EPROTO, "malformed HELLO");
        if (hello.service != hs->service)
                return fail_answer(hs, h->id, SHOAL_ST_RPC_DISABLED, "service not offered here",
                                   -ENOPROTOOPT, "HELLO for a service not offered here");
        if (hello.min_version > SHOAL_WIRE_VERSION || hello.max_version < SHOAL_WIRE_VERSION)
                return fail_answer(hs, h->id, SHOAL_ST_BAD_REQUEST, "version", -EPROTO,
                                   "no common protocol version");
        memcpy(hs->hello, body, sizeof(hs->hello));
        struct shoal_wire_hello_ack ack = {.version = SHOAL_WIRE_VERSION,
                                           .max_inflight = hs->max_inflight};
        memcpy(ack.nonce, hs->nonce, sizeof(ack.nonce));
        memcpy(ack.member_id, hs->member_id, sizeof(ack.member_id));
        int n = shoal_wire_hello_ack_encode(hs->ack, sizeof(hs->ack), &ack);
        if (n < 0)
                abort(); /* checked at start */
        hs->ack_len = (size_t)n;
        bool auth = has_key(hs);
        hs->out_len = shoal_wire_frame_encode(hs->out, SHOAL_MSG_HELLO_ACK,
                                              auth ? SHOAL_WF_AUTH_REQUIRED : 0, 0, h->id, hs->ack,
                                              hs->ack_len);
        if (!auth) {
                hs->state = HS_DONE;
                return SHOAL_HS_DONE;
        }
        hs->state = HS_SRV_WAIT_AUTH;
        return SHOAL_HS_MORE;
}

static enum shoal_hs_verdict srv_auth(struct shoal_hs *hs, const struct shoal_wire_hdr *h,
                                      const uint8_t *body)
{
        struct shoal_wire_auth auth;
        if (h->type != SHOAL_MSG_AUTH)
                return fail(hs, -EPROTO, "a frame other than AUTH before authentication");
        if (shoal_wire_auth_decode(body, h->body_len, &auth))
                return fail(hs, -EPROTO, "malformed AUTH");
        uint8_t want[SHOAL_WIRE_PROOF_LEN];
        proof(hs, false, want);
        bool ok = CRYPTO_memcmp(want, auth.proof, sizeof(want)) == 0;
        OPENSSL_cleanse(want, sizeof(want));
        if (!ok)
                return fail_answer(hs, h->id, SHOAL_ST_AUTH_FAILED, "auth failed", -EACCES,
                                   "wrong proof (another group secret, or a handshake relayed "
                                   "from another address)");
        struct shoal_wire_auth mine;
        proof(hs, true, mine.proof);
        uint8_t b[SHOAL_WIRE_PROOF_LEN];
        if (shoal_wire_auth_encode(b, sizeof(b), &mine) != (int)sizeof(b))
                abort();
        hs->out_len =
                shoal_wire_frame_encode(hs->out, SHOAL_MSG_AUTH_OK, 0, 0, h->id, b, sizeof(b));
        hs->state = HS_DONE;
        return SHOAL_HS_DONE;
}

static enum shoal_hs_verdict req_ack(struct shoal_hs *hs, const struct shoal_wire_hdr *h,
                                     const uint8_t *body)
{
        if (h->type == SHOAL_MSG_ERROR && h->id == SHOAL_HS_HELLO_ID)
                return fail_status(hs, h->status);
        struct shoal_wire_hello_ack ack;
        if (h->type != SHOAL_MSG_HELLO_ACK || h->id != SHOAL_HS_HELLO_ID)
                return fail(hs, -EPROTO, "unexpected answer to HELLO");
        if (shoal_wire_hello_ack_decode(body, h->body_len, &ack) || h->body_len > sizeof(hs->ack))
                return fail(hs, -EPROTO, "malformed HELLO_ACK");
        if (ack.version != SHOAL_WIRE_VERSION)
                return fail(hs, -EPROTO, "the member chose a version we did not offer");
        memcpy(hs->ack, body, h->body_len);
        hs->ack_len = h->body_len;
        hs->peer_max_inflight = ack.max_inflight;
        memcpy(hs->peer_id, ack.member_id, sizeof(hs->peer_id));
        bool auth = h->flags & SHOAL_WF_AUTH_REQUIRED;
        if (has_key(hs) && !auth)
                return fail(hs, -EACCES,
                            "the member does not ask for the group secret, so it does not hold "
                            "it: refusing it");
        if (!has_key(hs) && auth)
                return fail(hs, -EACCES,
                            "the member requires the group secret; set --group-secret-file or "
                            "SHOAL_GROUP_SECRET");
        if (!auth) {
                hs->state = HS_DONE;
                return SHOAL_HS_DONE;
        }
        struct shoal_wire_auth mine;
        proof(hs, false, mine.proof);
        uint8_t b[SHOAL_WIRE_PROOF_LEN];
        if (shoal_wire_auth_encode(b, sizeof(b), &mine) != (int)sizeof(b))
                abort();
        hs->out_len = shoal_wire_frame_encode(hs->out, SHOAL_MSG_AUTH, 0, 0, SHOAL_HS_AUTH_ID, b,
                                              sizeof(b));
        hs->state = HS_REQ_WAIT_AUTH_OK;
        return SHOAL_HS_MORE;
}

static enum shoal_hs_verdict req_auth_ok(struct shoal_hs *hs, const struct shoal_wire_hdr *h,
                                         const uint8_t *body)
{
        if (h->type == SHOAL_MSG_ERROR && h->id == SHOAL_HS_AUTH_ID)
                return fail_status(hs, h->status);
        struct shoal_wire_auth theirs;
        if (h->type != SHOAL_MSG_AUTH_OK || h->id != SHOAL_HS_AUTH_ID)
                return fail(hs, -EPROTO, "unexpected answer to AUTH");
        if (shoal_wire_auth_decode(body, h->body_len, &theirs))
                return fail(hs, -EPROTO, "malformed AUTH_OK");
        uint8_t want[SHOAL_WIRE_PROOF_LEN];
        proof(hs, true, want);
        bool ok = CRYPTO_memcmp(want, theirs.proof, sizeof(want)) == 0;
        OPENSSL_cleanse(want, sizeof(want));
        if (!ok)
                return fail(hs, -EACCES,
                            "the member's proof is wrong: it does not hold the "
                            "group secret");
        hs->state = HS_DONE;
        return SHOAL_HS_DONE;
}

enum shoal_hs_verdict shoal_hs_step(struct shoal_hs *hs, const struct shoal_wire_hdr *h,
                                    const uint8_t *body)
{
        hs->out_len = 0;
        if (!body && h->body_len)
                return fail(hs, -EPROTO, "no body");
        switch (hs->state) {
        case HS_SRV_WAIT_HELLO:
                return srv_hello(hs, h, body);
        case HS_SRV_WAIT_AUTH:
                return srv_auth(hs, h, body);
        case HS_REQ_WAIT_ACK:
                return req_ack(hs, h, body);
        case HS_REQ_WAIT_AUTH_OK:
                return req_auth_ok(hs, h, body);
        default:
                /* Not started, or over: nothing more belongs to the handshake. Keep the first
                 * failure's reason. */
                if (hs->state != HS_FAILED)
                        return fail(hs, -EPROTO, "a frame after the handshake was over");
                return SHOAL_HS_FAIL;
        }
}

enum shoal_hs_verdict shoal_hs_step_msg(struct shoal_hs *hs, const uint8_t *msg, size_t len)
{
        struct shoal_wire_hdr h;
        if (shoal_wire_msg_decode(msg, len, &h)) {
                hs->out_len = 0;
                if (hs->state == HS_FAILED)
                        return SHOAL_HS_FAIL; /* keep the first reason */
                return fail(hs, -EPROTO, "a frame that does not decode");
        }
        return shoal_hs_step(hs, &h, msg + SHOAL_WIRE_HDR_LEN);
}
