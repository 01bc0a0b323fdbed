/* libFuzzer target: answers as the clients decode them (src/transport/client_conn.c and the three
 * clients that use it).
 *
 * A request is derived from the input the way the reader makes one (a valid block, a
 * chunk-aligned range of at most 3 chunks), then an answer stream is built and damaged:
 *
 *   byte 0      mode: bits 0-1 the answer (0 READ_RESP, 1 ERROR, 2 INFO_RESP, 3 raw: the rest of
 *               the input is the stream), bit 2 recompute the header CRC after the edits, bit 3
 *               recompute the chunk CRCs after the edits, bit 4 the RDMA path (a message, the
 *               payload already in the local buffer), bit 5 an unaligned requested range
 *   byte 1      block size: 64 KiB << (b % 7)
 *   u32 u32 u32 block length, block index, offset in the block (raw)
 *   u32         length (raw)
 *   u64         payload seed
 *   str str     key, version (sanitised into valid ones)
 *   u8          answer status (ERROR), or n_rdma (INFO_RESP)
 *   u8          edits: count (mod 9), then per edit u32 position (mod the stream) and u8 xor
 *   rest        raw: the stream; ERROR: the reason; INFO_RESP: its strings (fz_str each)
 *
 * The TCP clients read through a socketpair with the real shoal_rpc_recv_frame and
 * shoal_rpc_recv_all (deadline now: a short stream times out at once), then decode, check and
 * verify as the pool client's read_once and the IORPC client's request_once do (the IORPC client
 * also requires payload_len == len before it receives into the caller's buffer). The RDMA client
 * decodes one message (shoal_wire_msg_decode) and verifies the local buffer.
 *
 * Invariants: an accepted answer is for the requested block and range, its payload is exactly the
 * bytes that followed its body on the stream, and every chunk checks out against an independent
 * CRC; an undamaged answer is accepted; one damaged byte in header or body without a fixed CRC,
 * or in the payload without fixed chunk CRCs, is refused (-EPROTO, -EBADMSG). */
#include <errno.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/block.h"
#include "common/crc32c.h"
#include "common/log.h"
#include "common/util.h"
#include "fuzz_input.h"
#include "transport/client_conn.h"
#include "wire/wire.h"

#define MAX_LEN    (3u * SHOAL_CHUNK_SIZE)
#define STREAM_MAX (SHOAL_WIRE_HDR_LEN + 8192 + MAX_LEN)
#define POOL_BODY  (SHOAL_WIRE_HDR_LEN + 4 * SHOAL_MAX_CHUNKS + 64) /* pool_client read_once */
#define IORPC_BODY (28 + 4 * SHOAL_MAX_CHUNKS + 256)                /* iorpc_client rx_main */
#define RDMA_RESP  (28 + 4 * SHOAL_MAX_CHUNKS)                      /* rdma_client rreq */
#define INFO_BODY  2048                                             /* pool_client info */
#define ANSWER_ID  0x1122334455667788ull

enum {
        M_READ = 0,
        M_ERROR = 1,
        M_INFO = 2,
        M_RAW = 3
};

struct req {
        struct shoal_volume vol;
        struct shoal_object obj;
        uint32_t index, off, len;
        struct shoal_block_id id;
};

static uint8_t stream[STREAM_MAX];
static int verbose = -1; /* FUZZ_VERBOSE=1: one line per client verdict, to check seeds */

static void say(const char *path, int rc)
{
        if (verbose > 0)
                fprintf(stderr, "fuzz_answer: %s: %d\n", path, rc);
}
static uint8_t dst[MAX_LEN + SHOAL_CHUNK_SIZE];
static int sp[2] = {-1, -1};

static void put32(uint8_t *p, uint32_t v)
{
        for (int i = 0; i < 4; i++)
                p[i] = (uint8_t)(v >> (8 * i));
}

static uint32_t get32(const uint8_t *p)
{
        return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static void setup(void)
{
        if (sp[0] >= 0)
                return;
        shoal_log_set_level(-1);
        FZ_CHECK(!socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, sp));
        /* Room for a whole answer, so that one send() delivers it (root may exceed wmem_max). */
        int big = 4 << 20;
        if (setsockopt(sp[1], SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof(big)))
                setsockopt(sp[1], SOL_SOCKET, SO_SNDBUF, &big, sizeof(big));
}

static void drain(void)
{
        static uint8_t sink[65536];
        while (recv(sp[0], sink, sizeof(sink), MSG_DONTWAIT) > 0)
                ;
}

/* Writes what the socket takes of S; returns how much that was. */
static size_t deliver(const uint8_t *s, size_t len)
{
        size_t done = 0;
        while (done < len) {
                ssize_t n = send(sp[1], s + done, len - done, MSG_DONTWAIT | MSG_NOSIGNAL);
                if (n <= 0)
                        break;
                done += (size_t)n;
        }
        return done;
}

static void sanitize(char *s, size_t cap, char lo, char fill)
{
        size_t n = strlen(s);
        for (size_t i = 0; i < n; i++)
                if ((unsigned char)s[i] < (unsigned char)lo || (unsigned char)s[i] == 0x7f)
                        s[i] = fill;
        if (!n) {
                s[0] = fill;
                s[1] = '\0';
        }
        (void)cap;
}

static void make_request(struct fz *in, bool unaligned, struct req *r)
{
        uint32_t bs = SHOAL_BLOCK_SIZE_MIN << (fz_u8(in) % 7);
        FZ_CHECK(!shoal_volume_init(&r->vol, "s3://fuzz-bucket/prefix", bs));
        uint32_t blen = 1 + (uint32_t)fz_u(in, 4) % bs;
        r->index = (uint32_t)fz_u(in, 4) % 100000;
        uint32_t roff = (uint32_t)fz_u(in, 4) % blen;
        uint32_t rlen = 1 + (uint32_t)fz_u(in, 4) % MAX_LEN;
        memset(&r->obj, 0, sizeof(r->obj));
        r->obj.size = (uint64_t)r->index * bs + blen;
        if (unaligned) {
                r->off = roff;
                r->len = SHOAL_MIN(rlen, blen - roff);
        } else {
                shoal_range_align(blen, roff, SHOAL_MIN(rlen, blen - roff), &r->off, &r->len);
                if (r->len > MAX_LEN)
                        r->len = MAX_LEN; /* still ends on a chunk boundary */
        }
        (void)fz_u(in, 8); /* the payload seed, read by the caller before */
}

static void crcs_of(const struct req *r, const uint8_t *payload, uint32_t *crcs)
{
        uint32_t first = r->off / SHOAL_CHUNK_SIZE;
        for (uint32_t i = 0; i < shoal_chunk_count(r->len); i++) {
                uint32_t coff = i * SHOAL_CHUNK_SIZE;
                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, r->len - coff);
                crcs[i] = shoal_chunk_crc(&r->id, first + i, payload + coff, clen);
        }
}

static void fix_hdr_crc(uint8_t *s, size_t total)
{
        uint32_t bl = get32(s + 12);
        if (total < SHOAL_WIRE_HDR_LEN || bl > total - SHOAL_WIRE_HDR_LEN)
                return;
        uint32_t crc = shoal_crc32c(0, s, 28);
        put32(s + 28, shoal_crc32c(crc, s + SHOAL_WIRE_HDR_LEN, bl));
}

struct built {
        size_t total;    /* stream bytes */
        size_t body_end; /* where header and body end (the payload starts) */
        uint32_t status; /* ERROR */
        struct shoal_wire_info info;
};

static int encode_frame(uint8_t type, uint16_t flags, uint32_t status, uint32_t payload_len,
                        const uint8_t *body, int body_len, struct built *b)
{
        if (body_len < 0)
                return -1;
        struct shoal_wire_hdr h = {.version = SHOAL_WIRE_VERSION,
                                   .type = type,
                                   .flags = flags,
                                   .status = status,
                                   .body_len = (uint32_t)body_len,
                                   .payload_len = payload_len,
                                   .id = ANSWER_ID};
        memmove(stream + SHOAL_WIRE_HDR_LEN, body, (size_t)body_len);
        shoal_wire_hdr_encode(stream, &h, stream + SHOAL_WIRE_HDR_LEN);
        b->body_end = SHOAL_WIRE_HDR_LEN + (size_t)body_len;
        b->total = b->body_end;
        return 0;
}

/* Builds the answer of MODE into STREAM. Returns 0, or -1 when the input cannot make one. */
static int build(int mode, bool rdma, struct fz *in, const struct req *r, uint64_t seed,
                 uint8_t sel, struct built *b)
{
        static uint8_t body[8192];
        memset(b, 0, sizeof(*b));
        if (mode == M_READ) {
                static uint32_t crcs[SHOAL_MAX_CHUNKS];
                static uint8_t pl[MAX_LEN];
                fz_fill(pl, r->len, seed);
                crcs_of(r, pl, crcs);
                int n = shoal_wire_read_resp_encode(body, sizeof(body), &r->id, r->off, r->len,
                                                    crcs);
                if (encode_frame(SHOAL_MSG_READ_RESP, rdma ? SHOAL_WF_RDMA_WRITTEN : 0, 0,
                                 rdma ? 0 : r->len, body, n, b))
                        return -1;
                /* The payload follows the body: on the stream for TCP; for RDMA it stands for the
                 * local buffer the member wrote, kept here so that the edits reach it too. */
                memcpy(stream + b->body_end, pl, r->len);
                b->total = b->body_end + r->len;
                return 0;
        }
        if (mode == M_ERROR) {
                char reason[256];
                size_t rl = SHOAL_MIN(in->n, (size_t)200);
                memcpy(reason, in->p, rl);
                reason[rl] = '\0';
                sanitize(reason, sizeof(reason), ' ', '.');
                b->status = 1 + sel % (SHOAL_ST__MAX - 1);
                int n = shoal_wire_error_encode(body, sizeof(body), reason);
                return encode_frame(SHOAL_MSG_ERROR, 0, b->status, 0, body, n, b);
        }
        struct shoal_wire_info *info = &b->info;
        fz_str(in, info->tcp_addr, sizeof(info->tcp_addr));
        fz_str(in, info->iorpc_addr, sizeof(info->iorpc_addr));
        info->n_rdma = sel % 5;
        for (unsigned i = 0; i < info->n_rdma; i++)
                fz_str(in, info->rdma_addr[i], sizeof(info->rdma_addr[i]));
        fz_str(in, info->volume_url, sizeof(info->volume_url));
        info->block_size = r->vol.block_size;
        int n = shoal_wire_info_encode(body, sizeof(body), info);
        return encode_frame(SHOAL_MSG_INFO_RESP, 0, 0, 0, body, n, b);
}

/* The TCP path of pool_client read_once / iorpc_client rx_main + request_once. Returns the
 * client's verdict; *GOT_FRAME tells whether the frame itself was taken. */
static int tcp_read(const struct req *r, size_t body_cap, bool iorpc, struct shoal_wire_hdr *h,
                    struct shoal_wire_read_resp *resp, bool *got_frame)
{
        static uint8_t body[IORPC_BODY];
        uint8_t hdr[SHOAL_WIRE_HDR_LEN];
        uint64_t now = shoal_now_ns();
        *got_frame = false;
        int rc = shoal_rpc_recv_frame(sp[0], h, hdr, body, body_cap, now);
        if (rc)
                return rc;
        FZ_CHECK(h->body_len <= body_cap);
        *got_frame = true;
        if (h->id != ANSWER_ID)
                return -EPROTO;
        if (h->type == SHOAL_MSG_ERROR) {
                rc = shoal_rpc_status_errno(h->status);
                FZ_CHECK(rc == -ENOENT || rc == -ESTALE || rc == -EREMOTEIO);
                char reason[256];
                if (!shoal_wire_error_decode(body, h->body_len, reason, sizeof(reason)))
                        FZ_CHECK(strlen(reason) <= 200);
                return rc;
        }
        if (iorpc && (h->type != SHOAL_MSG_READ_RESP || h->payload_len != r->len))
                return -EPROTO;
        if (h->type != SHOAL_MSG_READ_RESP ||
            shoal_wire_read_resp_decode(body, h->body_len, resp) ||
            shoal_rpc_check_answer(&r->vol, &r->obj, r->index, r->off, r->len, h, resp))
                return -EPROTO;
        rc = shoal_rpc_recv_all(sp[0], dst, r->len, now);
        if (rc)
                return rc;
        return shoal_rpc_verify_payload(&r->vol, &r->obj, r->index, r->off, r->len, dst, resp);
}

/* The RDMA path of rdma_client on_message + shoal_rdma_read: the message is stream[0, msg_len),
 * the local buffer (written by the member) holds LOCAL. */
static int rdma_read(const struct req *r, const uint8_t *msg, size_t msg_len,
                     struct shoal_wire_hdr *h, struct shoal_wire_read_resp *resp)
{
        static uint8_t rbody[RDMA_RESP];
        if (shoal_wire_msg_decode(msg, msg_len, h))
                return -ENOTCONN;
        bool fits = (h->type == SHOAL_MSG_READ_RESP && (h->flags & SHOAL_WF_RDMA_WRITTEN)) ||
                    h->type == SHOAL_MSG_ERROR;
        if (!fits || h->body_len > sizeof(rbody) || h->id != ANSWER_ID)
                return -ENOTCONN;
        memcpy(rbody, msg + SHOAL_WIRE_HDR_LEN, h->body_len);
        if (h->type == SHOAL_MSG_ERROR)
                return shoal_rpc_status_errno(h->status);
        if (shoal_wire_read_resp_decode(rbody, h->body_len, resp) ||
            shoal_rpc_check_answer(&r->vol, &r->obj, r->index, r->off, r->len, h, resp))
                return -ENOTCONN;
        return shoal_rpc_verify_payload(&r->vol, &r->obj, r->index, r->off, r->len, dst, resp);
}

/* What an accepted READ_RESP must satisfy, whoever built it. */
static void check_accepted(const struct req *r, const struct shoal_wire_read_resp *resp,
                           const uint8_t *payload_on_stream)
{
        FZ_CHECK(shoal_block_id_eq(&resp->block, &r->id));
        FZ_CHECK(resp->offset == r->off && resp->length == r->len);
        FZ_CHECK(r->off % SHOAL_CHUNK_SIZE == 0);
        FZ_CHECK(resp->n_crcs == shoal_chunk_count(r->len));
        if (payload_on_stream)
                FZ_CHECK(!memcmp(dst, payload_on_stream, r->len));
        uint32_t first = r->off / SHOAL_CHUNK_SIZE;
        for (uint32_t i = 0; i < resp->n_crcs; i++) {
                uint32_t coff = i * SHOAL_CHUNK_SIZE;
                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, r->len - coff);
                FZ_CHECK(shoal_chunk_crc(&r->id, first + i, dst + coff, clen) ==
                         shoal_wire_read_resp_crc(resp, i));
        }
}

static void info_read(const struct built *b, bool edited, size_t delivered)
{
        uint8_t hdr[SHOAL_WIRE_HDR_LEN];
        static uint8_t body[INFO_BODY];
        static struct shoal_wire_info info;
        struct shoal_wire_hdr h;
        int rc = shoal_rpc_recv_frame(sp[0], &h, hdr, body, sizeof(body), shoal_now_ns());
        if (!rc && h.id != ANSWER_ID)
                rc = -EPROTO;
        if (!rc && h.type == SHOAL_MSG_ERROR)
                rc = h.status == SHOAL_ST_RPC_DISABLED ? -ENOPROTOOPT : -EREMOTEIO;
        else if (!rc &&
                 (h.type != SHOAL_MSG_INFO_RESP || shoal_wire_info_decode(body, h.body_len, &info)))
                rc = -EPROTO;
        say("info", rc);
        if (!rc && h.type == SHOAL_MSG_INFO_RESP) {
                FZ_CHECK(info.n_rdma <= 4);
                FZ_CHECK(strlen(info.tcp_addr) < sizeof(info.tcp_addr));
                FZ_CHECK(strlen(info.volume_url) < sizeof(info.volume_url));
        }
        if (!edited && delivered == b->total && b->total) {
                FZ_CHECK(rc == 0);
                FZ_CHECK(!strcmp(info.tcp_addr, b->info.tcp_addr));
                FZ_CHECK(!strcmp(info.iorpc_addr, b->info.iorpc_addr));
                FZ_CHECK(info.n_rdma == b->info.n_rdma);
                FZ_CHECK(!strcmp(info.volume_url, b->info.volume_url));
        }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        setup();
        if (verbose < 0)
                verbose = getenv("FUZZ_VERBOSE") != NULL;
        struct fz in = {data, size};
        uint8_t mode = fz_u8(&in);
        int kind = mode & 3;
        bool fix_hdr = mode & 4, fix_chunks = mode & 8, rdma = mode & 16, unaligned = mode & 32;
        if (kind == M_INFO)
                rdma = false;

        static struct req r;
        struct fz peek = in;
        fz_skip(&peek, 1 + 4 + 4 + 4 + 4);
        uint64_t seed = fz_u(&peek, 8);
        make_request(&in, unaligned, &r);
        fz_str(&in, r.obj.key, sizeof(r.obj.key));
        fz_str(&in, r.obj.version, sizeof(r.obj.version));
        sanitize(r.obj.key, sizeof(r.obj.key), ' ', 'k');
        sanitize(r.obj.version, sizeof(r.obj.version), '!', 'v');
        for (char *p = r.obj.version; *p; p++)
                if (*p == 0x7f || (unsigned char)*p > 0x7e || *p == ' ')
                        *p = 'v';
        shoal_block_id_derive(&r.vol, r.obj.key, r.obj.version, r.index, &r.id);
        uint8_t sel = fz_u8(&in);

        /* The edits come before the rest; read them now, apply them once the stream is built. */
        uint8_t nedits = fz_u8(&in) % 9;
        uint32_t epos[8];
        uint8_t exor[8];
        for (unsigned i = 0; i < nedits; i++) {
                epos[i] = (uint32_t)fz_u(&in, 4);
                exor[i] = fz_u8(&in);
                if (!exor[i])
                        exor[i] = 1;
        }

        struct built b;
        if (kind == M_RAW) {
                memset(&b, 0, sizeof(b));
                b.total = SHOAL_MIN(in.n, sizeof(stream));
                memcpy(stream, in.p, b.total);
                b.body_end = b.total;
                nedits = 0;
                if (rdma) /* the message is what a receive brought; the buffer stays as it was */
                        fz_fill(dst, r.len, seed);
        } else if (build(kind, rdma, &in, &r, seed, sel, &b)) {
                return 0;
        }
        if (!b.total)
                return 0;

        /* Damage, then optionally make the checksums fit the damage again. */
        size_t in_hdr_body = 0, in_payload = 0;
        for (unsigned i = 0; i < nedits; i++) {
                size_t p = epos[i] % b.total;
                stream[p] ^= exor[i];
                if (p < b.body_end)
                        in_hdr_body++;
                else
                        in_payload++;
        }
        if (fix_chunks && kind == M_READ && b.body_end >= SHOAL_WIRE_HDR_LEN + 28) {
                static uint32_t crcs[SHOAL_MAX_CHUNKS];
                crcs_of(&r, stream + b.body_end, crcs);
                uint32_t n = shoal_chunk_count(r.len);
                for (uint32_t i = 0; i < n; i++)
                        put32(stream + SHOAL_WIRE_HDR_LEN + 28 + 4 * i, crcs[i]);
        }
        if (fix_hdr)
                fix_hdr_crc(stream, b.body_end);
        bool pristine = nedits == 0 && kind != M_RAW;
        bool frame_hit = nedits == 1 && in_hdr_body == 1 && !fix_hdr && !fix_chunks;
        bool payload_hit = nedits == 1 && in_payload == 1 && !fix_chunks;

        struct shoal_wire_hdr h;
        struct shoal_wire_read_resp resp;
        if (rdma) {
                if (kind == M_READ || kind == M_RAW) {
                        if (kind == M_READ)
                                memcpy(dst, stream + b.body_end, r.len);
                        int rc = rdma_read(&r, stream, b.body_end, &h, &resp);
                        say("rdma", rc);
                        if (!rc)
                                check_accepted(&r, &resp, NULL);
                        if (pristine)
                                FZ_CHECK(rc == 0);
                        if (frame_hit)
                                FZ_CHECK(rc != 0);
                        if (payload_hit)
                                FZ_CHECK(rc == -EBADMSG);
                } else {
                        int rc = rdma_read(&r, stream, b.body_end, &h, &resp);
                        say("rdma", rc);
                        if (pristine)
                                FZ_CHECK(rc == shoal_rpc_status_errno(b.status));
                }
                return 0;
        }

        size_t delivered = deliver(stream, b.total);
        if (kind == M_INFO) {
                info_read(&b, nedits != 0, delivered);
                drain();
                return 0;
        }
        for (int client = 0; client < 2; client++) {
                bool iorpc = client == 1;
                bool got_frame;
                int rc = tcp_read(&r, iorpc ? IORPC_BODY : POOL_BODY, iorpc, &h, &resp, &got_frame);
                say(iorpc ? "iorpc" : "pool", rc);
                if (!rc) {
                        FZ_CHECK(h.type == SHOAL_MSG_READ_RESP);
                        size_t at = SHOAL_WIRE_HDR_LEN + h.body_len;
                        FZ_CHECK(at + r.len <= delivered);
                        check_accepted(&r, &resp, stream + at);
                }
                bool whole = delivered == b.total;
                if (pristine && whole)
                        FZ_CHECK(kind == M_READ ? rc == 0 : rc == shoal_rpc_status_errno(b.status));
                if (frame_hit)
                        FZ_CHECK(rc != 0);
                if (payload_hit && whole)
                        FZ_CHECK(rc == -EBADMSG);
                drain();
                if (client == 0)
                        delivered = deliver(stream, b.total);
        }
        return 0;
}
