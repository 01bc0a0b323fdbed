/* Hostile and idle RDMA peers for the integration tests, over libfabric's tcp provider on
 * loopback (one process, one thread, polling):
 *
 *   rdma_peer flood ADDR SRC_IP N SECONDS STATS
 *       keeps N connections from SRC_IP open to a member's RDMA listener ADDR without ever
 *       sending a HELLO; reopens every one the member closes or refuses, until SECONDS passed.
 *   rdma_peer idle ADDR SECRET_FILE N SECONDS STATS
 *       N connections that authenticate (the group secret) and then only PING once a second, as
 *       idle requesters do.
 *   rdma_peer evil SECRET_FILE MEMBER_ID STORE_DIR URL BLOCK_SIZE DELAY_MS STATS
 *       a member holding the secret: listens on 127.0.0.1 (first line on stdout: the port),
 *       answers every READ honestly (the bytes of STORE_DIR/KEY, chunk CRCs right), and DELAY_MS
 *       after each answer writes 'Z's over the requester's buffer with the address and key the
 *       READ named. Every late write asks for delivery completion, so the peer learns whether the
 *       requester's side took it ("landed") or refused it ("refused").
 *   rdma_peer pipeclose ADDR SECRET_FILE BODIES PER_CONN STATS
 *       a requester holding the secret (SECRET_FILE "-": a member without one) that, one connection
 * after another, sends PER_CONN READs with FILL (the READ bodies in file BODIES, each a u32 length
 * and the body, as tests/integration/frames.py makes them) and closes the connection as soon as
 * they are sent, never waiting for an answer (the member's writes go to a buffer it never
 *       registered); a refused connection is retried. Exits when every body was sent.
 *
 * STATS is rewritten every 100 ms with "NAME N" lines (flood: connected, refused, closed; idle:
 * ready, pings, pongs; evil: conns, auths, reads, rewrites, landed, refused; pipeclose: conns,
 * reads, refused). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "common/block.h"
#include "common/secret.h"
#include "common/util.h"
#include "net/fabric.h"
#include "wire/handshake.h"
#include "wire/wire.h"

#define MAXC 1024
#define NRX  8
#define SLOT SHOAL_FAB_MSG_SLOT

enum {
        OP_RX,
        OP_TX,
        OP_DATA,
        OP_LATE
};

struct op {
        struct fi_context2 ctx; /* first */
        int kind;
        struct conn *c;
        char *buf; /* freed at completion (data and late writes) */
};

struct conn {
        struct fid_ep *ep;
        bool used, connected, ready;
        struct shoal_hs hs;
        char rx[NRX][SLOT];
        struct op rxop[NRX];
        uint64_t last_ping;
};

struct late {
        uint64_t due, raddr, rkey;
        uint32_t len;
        struct conn *c;
};

static struct fi_info *info;
static struct fid_fabric *fabric;
static struct fid_domain *domain;
static struct fid_eq *eq;
static struct fid_cq *cq;
static struct conn conns[MAXC];
static struct shoal_hs_key gkey;
static char addr_dialed[64];
static unsigned long st[8];
static const char *stats_path;
static const char *stat_names[8];
static struct late lates[4096];
static unsigned nlates;
static unsigned long tx_posted, tx_done; /* sends posted, their completions read */

static void die(const char *what, int rc)
{
        fprintf(stderr, "rdma_peer: %s: %s\n", what, fi_strerror(rc < 0 ? -rc : rc));
        exit(1);
}

static void write_stats(void)
{
        char tmp[512];
        snprintf(tmp, sizeof(tmp), "%s.tmp", stats_path);
        FILE *f = fopen(tmp, "w");
        if (!f)
                return;
        for (int i = 0; i < 8 && stat_names[i]; i++)
                fprintf(f, "%s %lu\n", stat_names[i], st[i]);
        fclose(f);
        rename(tmp, stats_path);
}

static void open_fabric(const char *node, uint64_t flags)
{
        struct fi_info *hints = shoal_fab_hints("tcp");
        hints->domain_attr->mr_mode = 0;
        int rc = fi_getinfo(FI_VERSION(1, 9), node, "0", flags, hints, &info);
        fi_freeinfo(hints);
        if (rc)
                die("fi_getinfo", rc);
        if ((rc = fi_fabric(info->fabric_attr, &fabric, NULL)) ||
            (rc = fi_domain(fabric, info, &domain, NULL)))
                die("fi_fabric/fi_domain", rc);
        struct fi_eq_attr ea = {.wait_obj = FI_WAIT_UNSPEC};
        struct fi_cq_attr ca = {.size = 65536, .format = FI_CQ_FORMAT_MSG};
        if ((rc = fi_eq_open(fabric, &ea, &eq, NULL)) || (rc = fi_cq_open(domain, &ca, &cq, NULL)))
                die("fi_eq_open/fi_cq_open", rc);
}

static int post_rx(struct conn *c, int i)
{
        c->rxop[i] = (struct op){.kind = OP_RX, .c = c};
        return (int)fi_recv(c->ep, c->rx[i], SLOT, NULL, 0, &c->rxop[i].ctx);
}

static int send_frame(struct conn *c, const void *frame, size_t len)
{
        struct op *op = calloc(1, sizeof(*op));
        op->kind = OP_TX;
        op->c = c;
        op->buf = malloc(len);
        memcpy(op->buf, frame, len);
        int rc = (int)fi_send(c->ep, op->buf, len, NULL, 0, &op->ctx);
        if (rc) {
                free(op->buf);
                free(op);
        } else {
                tx_posted++;
        }
        return rc;
}

static void conn_close(struct conn *c)
{
        if (c->ep)
                fi_close(&c->ep->fid);
        memset(c, 0, sizeof(*c));
}

/* An endpoint from the fabric's source to DEST, connecting. */
static int conn_connect(struct conn *c, struct sockaddr_in *dest)
{
        struct fi_info *i = fi_dupinfo(info);
        free(i->dest_addr);
        i->dest_addr = malloc(sizeof(*dest));
        memcpy(i->dest_addr, dest, sizeof(*dest));
        i->dest_addrlen = sizeof(*dest);
        int rc = fi_endpoint(domain, i, &c->ep, c);
        fi_freeinfo(i);
        if (!rc)
                rc = fi_ep_bind(c->ep, &eq->fid, 0);
        if (!rc)
                rc = fi_ep_bind(c->ep, &cq->fid, FI_TRANSMIT | FI_RECV);
        if (!rc)
                rc = fi_enable(c->ep);
        for (int k = 0; !rc && k < NRX; k++)
                rc = post_rx(c, k);
        if (!rc)
                rc = fi_connect(c->ep, dest, NULL, 0);
        c->used = true;
        return rc;
}

static void load_key(const char *path)
{
        static uint8_t buf[SHOAL_SECRET_MAX + 1];
        FILE *f = fopen(path, "rb");
        if (!f) {
                perror(path);
                exit(1);
        }
        size_t n = fread(buf, 1, sizeof(buf), f);
        fclose(f);
        if (n && buf[n - 1] == '\n')
                n--;
        if (n && buf[n - 1] == '\r')
                n--;
        struct shoal_secret s = {.bytes = buf, .len = n};
        if (shoal_hs_key_init(&gkey, &s)) {
                fprintf(stderr, "rdma_peer: bad secret\n");
                exit(1);
        }
}

/* ---- evil: a member that rewrites requesters' buffers after answering ---- */

static const char *store_dir, *url;
static uint32_t block_size;
static uint64_t delay_ns;
static const char *member_id;

static void evil_read(struct conn *c, const struct shoal_wire_hdr *h, const uint8_t *body)
{
        struct shoal_wire_read rd;
        if (shoal_wire_read_decode(body, h->body_len, &rd) || rd.length > block_size ||
            rd.offset % SHOAL_CHUNK_SIZE)
                return;
        char key[SHOAL_KEY_MAX + 1], version[SHOAL_VERSION_MAX + 1], path[2048];
        memcpy(key, rd.key, rd.key_len);
        key[rd.key_len] = 0;
        memcpy(version, rd.version, rd.version_len);
        version[rd.version_len] = 0;
        snprintf(path, sizeof(path), "%s/%s", store_dir, key);
        char *data = calloc(1, rd.length ? rd.length : 1);
        int fd = open(path, O_RDONLY);
        ssize_t got =
                fd >= 0 ? pread(fd, data, rd.length, (off_t)rd.block_index * block_size + rd.offset)
                        : -1;
        if (fd >= 0)
                close(fd);
        if (got != (ssize_t)rd.length) {
                free(data);
                return;
        }
        struct shoal_volume vol;
        shoal_volume_init(&vol, url, block_size);
        struct shoal_block_id id;
        shoal_block_id_derive(&vol, key, version, rd.block_index, &id);
        uint32_t crcs[SHOAL_MAX_CHUNKS];
        uint32_t first = rd.offset / SHOAL_CHUNK_SIZE;
        for (uint32_t i = 0; i * SHOAL_CHUNK_SIZE < rd.length; i++) {
                uint32_t n = SHOAL_MIN(SHOAL_CHUNK_SIZE, rd.length - i * SHOAL_CHUNK_SIZE);
                crcs[i] = shoal_chunk_crc(&id, first + i, data + (size_t)i * SHOAL_CHUNK_SIZE, n);
        }
        uint8_t rb[SLOT], frame[SLOT];
        int n = shoal_wire_read_resp_encode(rb, sizeof(rb), &id, rd.offset, rd.length, crcs);
        struct op *w = calloc(1, sizeof(*w));
        *w = (struct op){.kind = OP_DATA, .c = c, .buf = data};
        if (n < 0 ||
            fi_write(c->ep, data, rd.length, NULL, 0, rd.rdma_addr, rd.rdma_key, &w->ctx)) {
                free(data);
                free(w);
                return;
        }
        size_t fl = shoal_wire_frame_encode(frame, SHOAL_MSG_READ_RESP, SHOAL_WF_RDMA_WRITTEN, 0,
                                            h->id, rb, (size_t)n);
        send_frame(c, frame, fl);
        st[2]++;
        if (nlates < 4096)
                lates[nlates++] = (struct late){.due = shoal_now_ns() + delay_ns,
                                                .raddr = rd.rdma_addr,
                                                .rkey = rd.rdma_key,
                                                .len = rd.length,
                                                .c = c};
}

static void evil_rewrites(void)
{
        uint64_t now = shoal_now_ns();
        for (unsigned i = 0; i < nlates;) {
                struct late *l = &lates[i];
                if (now < l->due) {
                        i++;
                        continue;
                }
                if (l->c->used && l->c->connected) {
                        struct op *w = calloc(1, sizeof(*w));
                        w->kind = OP_LATE;
                        w->c = l->c;
                        w->buf = malloc(l->len);
                        memset(w->buf, 'Z', l->len);
                        struct iovec iov = {.iov_base = w->buf, .iov_len = l->len};
                        struct fi_rma_iov rma = {.addr = l->raddr, .len = l->len, .key = l->rkey};
                        void *desc = NULL;
                        struct fi_msg_rma m = {.msg_iov = &iov,
                                               .desc = &desc,
                                               .iov_count = 1,
                                               .rma_iov = &rma,
                                               .rma_iov_count = 1,
                                               .context = &w->ctx};
                        if (fi_writemsg(l->c->ep, &m, FI_DELIVERY_COMPLETE | FI_COMPLETION)) {
                                free(w->buf);
                                free(w);
                        } else {
                                st[3]++;
                        }
                }
                lates[i] = lates[--nlates];
        }
}

static void on_frame(struct conn *c, const uint8_t *msg, size_t len, bool server)
{
        struct shoal_wire_hdr h;
        if (shoal_wire_msg_decode(msg, len, &h))
                return;
        const uint8_t *body = msg + SHOAL_WIRE_HDR_LEN;
        if (!c->ready) {
                enum shoal_hs_verdict v = shoal_hs_step(&c->hs, &h, body);
                if (c->hs.out_len)
                        send_frame(c, c->hs.out, c->hs.out_len);
                if (v == SHOAL_HS_DONE) {
                        c->ready = true;
                        st[server ? 1 : 0]++;
                }
                return;
        }
        if (server && h.type == SHOAL_MSG_READ)
                evil_read(c, &h, body);
        else if (server && h.type == SHOAL_MSG_PING) {
                uint8_t f[SLOT];
                send_frame(
                        c, f,
                        shoal_wire_frame_encode(f, SHOAL_MSG_PONG, 0, 0, h.id, body, h.body_len));
        } else if (!server && h.type == SHOAL_MSG_PONG) {
                st[2]++;
        }
}

static void poll_cq(bool server)
{
        struct fi_cq_msg_entry e[32];
        for (;;) {
                ssize_t n = fi_cq_read(cq, e, 32);
                if (n == -FI_EAVAIL) {
                        struct fi_cq_err_entry err;
                        memset(&err, 0, sizeof(err));
                        if (fi_cq_readerr(cq, &err, 0) != 1)
                                return;
                        struct op *op = err.op_context;
                        if (!op)
                                continue;
                        if (op->kind == OP_LATE)
                                st[5]++; /* refused */
                        if (op->kind == OP_TX)
                                tx_done++; /* flushed */
                        if (op->kind != OP_RX) {
                                free(op->buf);
                                free(op);
                        }
                        continue;
                }
                if (n <= 0)
                        return;
                for (ssize_t i = 0; i < n; i++) {
                        struct op *op = e[i].op_context;
                        if (op->kind == OP_RX) {
                                struct conn *c = op->c;
                                int k = (int)(op - c->rxop);
                                on_frame(c, (const uint8_t *)c->rx[k], e[i].len, server);
                                if (c->used && c->ep)
                                        post_rx(c, k);
                                continue;
                        }
                        if (op->kind == OP_LATE)
                                st[4]++; /* landed */
                        if (op->kind == OP_TX)
                                tx_done++;
                        free(op->buf);
                        free(op);
                }
        }
}

static void sleep_ms(unsigned ms)
{
        struct timespec ts = {.tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L};
        nanosleep(&ts, NULL);
}

/* flood and idle: connect N (reopening what closes), authenticate in idle mode. */
static int run_clients(const char *addr, const char *src, unsigned n, unsigned secs, bool auth)
{
        struct sockaddr_in *dest = shoal_fab_addr_parse(addr);
        if (!dest || n > MAXC) {
                fprintf(stderr, "rdma_peer: bad address or count\n");
                return 2;
        }
        shoal_strlcpy(addr_dialed, addr, sizeof(addr_dialed));
        open_fabric(src, FI_SOURCE);
        uint64_t end = shoal_now_ns() + (uint64_t)secs * 1000000000ULL, last = 0;
        while (shoal_now_ns() < end) {
                for (unsigned i = 0; i < n; i++)
                        if (!conns[i].used && conn_connect(&conns[i], dest))
                                conn_close(&conns[i]);
                uint32_t event;
                struct fi_eq_cm_entry entry;
                ssize_t rd;
                while ((rd = fi_eq_read(eq, &event, &entry, sizeof(entry), 0)) != -FI_EAGAIN) {
                        struct conn *c = NULL;
                        if (rd == -FI_EAVAIL) {
                                struct fi_eq_err_entry ee;
                                memset(&ee, 0, sizeof(ee));
                                fi_eq_readerr(eq, &ee, 0);
                                c = ee.fid ? ee.fid->context : NULL;
                                if (c && c->used) {
                                        if (!auth)
                                                st[c->connected ? 2 : 1]++;
                                        conn_close(c);
                                }
                                continue;
                        }
                        if (rd < 0)
                                break;
                        c = entry.fid ? entry.fid->context : NULL;
                        if (!c || !c->used)
                                continue;
                        if (event == FI_CONNECTED) {
                                c->connected = true;
                                st[auth ? 3 : 0]++;
                                if (auth) {
                                        struct shoal_hs_config hc = {.role = SHOAL_HS_REQUESTER,
                                                                     .key = &gkey,
                                                                     .service = 3,
                                                                     .addr = addr_dialed};
                                        shoal_hs_start(&c->hs, &hc);
                                        send_frame(c, c->hs.out, c->hs.out_len);
                                }
                        } else if (event == FI_SHUTDOWN) {
                                if (!auth)
                                        st[c->connected ? 2 : 1]++;
                                conn_close(c);
                        }
                }
                poll_cq(false);
                uint64_t now = shoal_now_ns();
                for (unsigned i = 0; auth && i < n; i++) {
                        struct conn *c = &conns[i];
                        if (c->ready && now - c->last_ping >= 1000000000ULL) {
                                uint8_t f[64];
                                send_frame(c, f,
                                           shoal_wire_frame_encode(f, SHOAL_MSG_PING, 0, 0, 1 + i,
                                                                   &now, 8));
                                c->last_ping = now;
                                st[1]++;
                        }
                }
                if (now - last > 100000000ULL) {
                        write_stats();
                        last = now;
                }
                sleep_ms(1);
        }
        write_stats();
        for (unsigned i = 0; i < n; i++)
                conn_close(&conns[i]);
        free(dest);
        fi_close(&cq->fid);
        fi_close(&eq->fid);
        fi_close(&domain->fid);
        fi_close(&fabric->fid);
        fi_freeinfo(info);
        return 0;
}

/* pipeclose: reads every event of the EQ; true once C is connected, false when it failed. */
static bool wait_connected(struct conn *c, uint64_t until)
{
        while (shoal_now_ns() < until) {
                uint32_t event;
                struct fi_eq_cm_entry entry;
                ssize_t rd = fi_eq_read(eq, &event, &entry, sizeof(entry), 0);
                if (rd == -FI_EAVAIL) {
                        struct fi_eq_err_entry ee;
                        memset(&ee, 0, sizeof(ee));
                        fi_eq_readerr(eq, &ee, 0);
                        return false;
                }
                if (rd > 0 && event == FI_CONNECTED && entry.fid == &c->ep->fid)
                        return true;
                poll_cq(false);
                sleep_ms(1);
        }
        return false;
}

static int run_pipeclose(const char *addr, bool with_key, const char *bodies_path,
                         unsigned per_conn)
{
        static uint8_t bodies[1 << 22];
        FILE *f = fopen(bodies_path, "rb");
        size_t blen = f ? fread(bodies, 1, sizeof(bodies), f) : 0;
        if (f)
                fclose(f);
        struct sockaddr_in *dest = shoal_fab_addr_parse(addr);
        if (!dest || !blen || !per_conn) {
                fprintf(stderr, "rdma_peer: bad address, bodies or count\n");
                return 2;
        }
        shoal_strlcpy(addr_dialed, addr, sizeof(addr_dialed));
        open_fabric("127.0.0.1", FI_SOURCE);
        size_t pos = 0;
        while (pos + 4 <= blen) {
                struct conn *c = &conns[0];
                uint64_t until = shoal_now_ns() + 30000000000ULL;
                /* A member at its connection cap refuses until the last one is freed. */
                while (conn_connect(c, dest) || !wait_connected(c, until)) {
                        conn_close(c);
                        if (shoal_now_ns() >= until) {
                                fprintf(stderr, "rdma_peer: cannot connect to %s\n", addr);
                                return 1;
                        }
                        st[2]++;
                        sleep_ms(20);
                }
                struct shoal_hs_config hc = {.role = SHOAL_HS_REQUESTER,
                                             .key = with_key ? &gkey : NULL,
                                             .service = 3,
                                             .addr = addr_dialed};
                shoal_hs_start(&c->hs, &hc);
                send_frame(c, c->hs.out, c->hs.out_len);
                while (!c->ready && shoal_now_ns() < until) {
                        poll_cq(false);
                        sleep_ms(1);
                }
                if (!c->ready) {
                        fprintf(stderr, "rdma_peer: no handshake with %s\n", addr);
                        return 1;
                }
                /* (on_frame counted the connection.) Never more than the member's credits: past
                 * them it would close at once. */
                unsigned n = SHOAL_MIN(per_conn, c->hs.peer_max_inflight);
                for (unsigned k = 0; k < n && pos + 4 <= blen; k++) {
                        uint32_t len;
                        memcpy(&len, bodies + pos, 4);
                        if (len > SLOT - SHOAL_WIRE_HDR_LEN || pos + 4 + len > blen)
                                return 2;
                        uint8_t fr[SLOT];
                        size_t fl = shoal_wire_frame_encode(fr, SHOAL_MSG_READ,
                                                            SHOAL_WF_FILL | SHOAL_WF_RDMA_TARGET, 0,
                                                            100 + k, bodies + pos + 4, len);
                        int rc;
                        while ((rc = send_frame(c, fr, fl)) == -FI_EAGAIN && shoal_now_ns() < until)
                                poll_cq(false); /* the send queue is full for now */
                        if (rc) {
                                fprintf(stderr, "rdma_peer: send: %s\n", fi_strerror(-rc));
                                break;
                        }
                        pos += 4 + len;
                        st[1]++;
                }
                /* Sent means its completion was read (tcp moves the bytes inside fi_cq_read). */
                while (tx_done < tx_posted && shoal_now_ns() < until) {
                        poll_cq(false);
                        sleep_ms(1);
                }
                conn_close(c);
                poll_cq(false);
                write_stats();
        }
        write_stats();
        printf("pipelined %lu reads on %lu connections and closed each\n", st[1], st[0]);
        free(dest);
        return 0;
}

static _Noreturn void run_evil(void)
{
        open_fabric("127.0.0.1", FI_SOURCE);
        struct fid_pep *pep;
        int rc = fi_passive_ep(fabric, info, &pep, NULL);
        if (!rc)
                rc = fi_pep_bind(pep, &eq->fid, 0);
        if (!rc)
                rc = fi_listen(pep);
        struct sockaddr_in sa;
        size_t sl = sizeof(sa);
        if (!rc)
                rc = fi_getname(&pep->fid, &sa, &sl);
        if (rc)
                die("listen", rc);
        shoal_fab_addr_str(&sa, addr_dialed, sizeof(addr_dialed));
        printf("%u\n", ntohs(sa.sin_port));
        fflush(stdout);
        uint64_t last = 0;
        for (;;) {
                uint32_t event;
                struct fi_eq_cm_entry entry;
                ssize_t rd;
                while ((rd = fi_eq_read(eq, &event, &entry, sizeof(entry), 0)) != -FI_EAGAIN) {
                        if (rd == -FI_EAVAIL) {
                                struct fi_eq_err_entry ee;
                                memset(&ee, 0, sizeof(ee));
                                fi_eq_readerr(eq, &ee, 0);
                                continue;
                        }
                        if (rd < 0)
                                break;
                        if (event == FI_CONNREQ) {
                                struct conn *c = NULL;
                                for (int i = 0; i < MAXC && !c; i++)
                                        if (!conns[i].used)
                                                c = &conns[i];
                                if (!c || fi_endpoint(domain, entry.info, &c->ep, c) ||
                                    fi_ep_bind(c->ep, &eq->fid, 0) ||
                                    fi_ep_bind(c->ep, &cq->fid, FI_TRANSMIT | FI_RECV) ||
                                    fi_enable(c->ep)) {
                                        fi_reject(pep, entry.info->handle, NULL, 0);
                                } else {
                                        c->used = true;
                                        for (int k = 0; k < NRX; k++)
                                                post_rx(c, k);
                                        struct shoal_hs_config hc = {.role = SHOAL_HS_SERVER,
                                                                     .key = &gkey,
                                                                     .service = 3,
                                                                     .addr = addr_dialed,
                                                                     .member_id = member_id,
                                                                     .max_inflight = NRX - 2};
                                        shoal_hs_start(&c->hs, &hc);
                                        fi_accept(c->ep, NULL, 0);
                                }
                                fi_freeinfo(entry.info);
                                continue;
                        }
                        struct conn *c = entry.fid ? entry.fid->context : NULL;
                        if (!c || !c->used)
                                continue;
                        if (event == FI_CONNECTED) {
                                c->connected = true;
                                st[0]++;
                        } else if (event == FI_SHUTDOWN) {
                                c->connected = false;
                        }
                }
                poll_cq(true);
                evil_rewrites();
                uint64_t now = shoal_now_ns();
                if (now - last > 100000000ULL) {
                        write_stats();
                        last = now;
                }
                sleep_ms(1);
        }
}

int main(int argc, char **argv)
{
        if (argc >= 7 && !strcmp(argv[1], "flood")) {
                stats_path = argv[6];
                stat_names[0] = "connected";
                stat_names[1] = "refused";
                stat_names[2] = "closed";
                return run_clients(argv[2], argv[3], (unsigned)atoi(argv[4]),
                                   (unsigned)atoi(argv[5]), false);
        }
        if (argc >= 7 && !strcmp(argv[1], "idle")) {
                stats_path = argv[6];
                stat_names[0] = "ready";
                stat_names[1] = "pings";
                stat_names[2] = "pongs";
                stat_names[3] = "connected";
                load_key(argv[3]);
                return run_clients(argv[2], "127.0.0.1", (unsigned)atoi(argv[4]),
                                   (unsigned)atoi(argv[5]), true);
        }
        if (argc >= 7 && !strcmp(argv[1], "pipeclose")) {
                stats_path = argv[6];
                stat_names[0] = "conns";
                stat_names[1] = "reads";
                stat_names[2] = "refused";
                bool with_key = strcmp(argv[3], "-") != 0;
                if (with_key)
                        load_key(argv[3]);
                return run_pipeclose(argv[2], with_key, argv[4], (unsigned)atoi(argv[5]));
        }
        if (argc >= 9 && !strcmp(argv[1], "evil")) {
                load_key(argv[2]);
                member_id = argv[3];
                store_dir = argv[4];
                url = argv[5];
                block_size = (uint32_t)atoi(argv[6]);
                delay_ns = (uint64_t)atoi(argv[7]) * 1000000ULL;
                stats_path = argv[8];
                stat_names[0] = "conns";
                stat_names[1] = "auths";
                stat_names[2] = "reads";
                stat_names[3] = "rewrites";
                stat_names[4] = "landed";
                stat_names[5] = "refused";
                run_evil();
        }
        fprintf(stderr, "usage: rdma_peer flood ADDR SRC_IP N SECONDS STATS\n"
                        "       rdma_peer idle ADDR SECRET_FILE N SECONDS STATS\n"
                        "       rdma_peer evil SECRET_FILE MEMBER_ID STORE URL BS DELAY_MS STATS\n"
                        "       rdma_peer pipeclose ADDR SECRET_FILE BODIES PER_CONN STATS\n");
        return 2;
}
