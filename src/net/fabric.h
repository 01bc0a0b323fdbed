/* A thin libfabric wrapper for IORPC over RDMA (FI_EP_MSG): opening one interface's fabric and
 * domain, event queues and completion queues with wait fds, memory registration that obeys the
 * provider's mr_mode, and error printing with call, place and fi_strerror. RDMA.md has the facts
 * this code relies on (tcp provider in tests, verbs in production); docs/rdma.md the deployment
 * checklist these choices imply.
 *
 * Process-wide, once, at the first shoal_fab_open (before libfabric reads its parameters): the
 * MR cache is turned off (FI_MR_CACHE_MAX_COUNT=0: it registers every cached region with remote
 * read and write access, and keeps closed ones registered), and the soft RLIMIT_NOFILE and
 * RLIMIT_MEMLOCK are raised to the hard limits, with a warning when the fds allow few
 * connections. Registrations are MADV_DONTFORK and checked against RLIMIT_MEMLOCK first.
 *
 * Objects are not thread-safe: one progress thread owns every object opened through it. */
#ifndef SHOAL_NET_FABRIC_H
#define SHOAL_NET_FABRIC_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_cm.h>
#include <rdma/fi_domain.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_eq.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define SHOAL_FAB_MAX_IFACES 4
/* One message (header + largest body) rounded up: sends and receives use slots of this size. */
#define SHOAL_FAB_MSG_SLOT 4224

/* One --rdma-network interface opened on one provider. */
struct shoal_fab {
        char ifname[32];
        char ip[64];          /* the interface's IPv4 */
        char prov[32];        /* provider name as libfabric reports it */
        struct fi_info *info; /* src_addr = ip:0 (listeners and active endpoints alike) */
        struct fid_fabric *fabric;
        struct fid_domain *domain;
        uint64_t mr_mode;        /* what the provider kept of what we offered */
        size_t key_size;         /* bytes of a remote key */
        size_t tx_size, rx_size; /* queue sizes read back from the provider */
        size_t max_msg;          /* largest single message or RMA */
};

/* ---- process limits ------------------------------------------------------------------------ */

/* Open files one verbs connection costs (EQ and CQ wait fds, the rdma_cm and completion
 * channels, uverbs): about 7; counted as 8. */
#define SHOAL_FAB_FDS_PER_CONN 8
/* Open files kept for everything else (cache files, store, registry, clients, logs). */
#define SHOAL_FAB_FD_RESERVE 1024
/* Fewer connections than this allowed by RLIMIT_NOFILE draws a warning at start. */
#define SHOAL_FAB_CONNS_WANTED 1024
/* The soft RLIMIT_NOFILE is raised at most this far. */
#define SHOAL_FAB_NOFILE_CAP (1u << 20)
/* Where the tests put their own interface tree; production reads the system's. */
#define SHOAL_FAB_SYSFS_NET "/sys/class/net"

struct shoal_fab_limits {
        size_t nofile;     /* soft RLIMIT_NOFILE, SIZE_MAX for none */
        size_t memlock;    /* soft RLIMIT_MEMLOCK in bytes, SIZE_MAX for none */
        bool cap_ipc_lock; /* the process may lock memory past the limit */
};

/* Raises the soft RLIMIT_NOFILE to the hard limit (at most SHOAL_FAB_NOFILE_CAP) and the soft
 * RLIMIT_MEMLOCK to the hard limit, and reports the limits now in force in *OUT. Returns 0, or
 * a negative errno when a limit could not be raised (*OUT is still filled). */
int shoal_fab_raise_limits(struct shoal_fab_limits *out);
/* True when CAP_IPC_LOCK is in the process's effective set (/proc/self/status). */
bool shoal_fab_cap_ipc_lock(void);
/* How many connections of SHOAL_FAB_FDS_PER_CONN fds the open-files limit allows after keeping
 * RESERVE fds for the rest: the cap a listener should derive its connection limit from. */
unsigned shoal_fab_conn_budget(const struct shoal_fab_limits *l, size_t reserve);
/* 0 when pinning LEN more bytes beside PINNED stays within L's locked-memory limit (or there is
 * none, or CAP_IPC_LOCK); else -ENOMEM with one line in MSG that says how to raise it. */
int shoal_fab_memlock_check(const struct shoal_fab_limits *l, size_t pinned, size_t len, char *msg,
                            size_t msglen);
/* Bytes this process has registered with providers that pin memory (all interfaces). */
size_t shoal_fab_pinned(void);

/* ---- choosing the domain ------------------------------------------------------------------- */

/* How shoal_fab_pick recognised the domain, best last. */
enum shoal_fab_pick_by {
        SHOAL_FAB_BY_NONE,
        SHOAL_FAB_BY_SOURCE, /* the only domain the provider offers for the source address:
                                verbs binds the address with rdma_cm and keeps the device
                                behind it, bonds and VLANs included */
        SHOAL_FAB_BY_SYSFS,  /* SYSFS/IF/device/infiniband/DOMAIN, or that of a lower device
                                (bond slave, VLAN parent), two levels down at most */
        SHOAL_FAB_BY_NAME    /* the domain is named after the interface (tcp, sockets) */
};

/* The entry of LIST (fi_getinfo's answer for FI_EP_MSG with interface IFNAME's IPv4 IP as
 * source) to open for IFNAME, or NULL with one line in WHY. Entries that are not FI_EP_MSG,
 * XRC ("-xrc", FI_PROTO_RDMA_CM_IB_XRC), "-dgram", or sourced at another address are skipped;
 * of the rest the best by *BY wins, the first of equals. A domain known only by the source
 * address is refused when the provider offered several (it did not filter by the address).
 * SYSFS is the folder of network interfaces (SHOAL_FAB_SYSFS_NET). The result points into
 * LIST. */
const struct fi_info *shoal_fab_pick(const struct fi_info *list, const char *ifname, const char *ip,
                                     const char *sysfs, enum shoal_fab_pick_by *by, char *why,
                                     size_t whylen);

/* The provider to use: FLAG when given, else $FI_PROVIDER, else "verbs" [M6]. */
const char *shoal_fab_provider(const char *flag);

/* Splits "IF1[:IF2...]" into at most SHOAL_FAB_MAX_IFACES names. Returns the count or -EINVAL
 * (empty name, too many, name too long). */
int shoal_fab_parse_ifaces(const char *list, char names[SHOAL_FAB_MAX_IFACES][32]);

/* The fi_getinfo hints shoal_fab_open uses for PROVIDER (fi_freeinfo them), NULL without
 * memory. */
struct fi_info *shoal_fab_hints(const char *provider);
/* Opens interface IFNAME on PROVIDER: resolves its IPv4, asks libfabric for an FI_EP_MSG
 * endpoint type with FI_MSG | FI_RMA and FI_ORDER_SAW (a send is not seen before an earlier RMA
 * write) sourced at that address, picks the domain (shoal_fab_pick, RDMA.md rule 5) and opens
 * fabric and domain. The first call also sets up the process (see the top of this file).
 * Returns 0 or a negative errno with one line in ERR. Undo with shoal_fab_close (also after a
 * failure). */
int shoal_fab_open(struct shoal_fab *f, const char *provider, const char *ifname, char *err,
                   size_t errlen);
void shoal_fab_close(struct shoal_fab *f);

/* An event queue / completion queue (FI_CQ_FORMAT_MSG) with FI_WAIT_FD; *FD receives its wait fd
 * for epoll. Return 0 or a negative errno (printed). */
int shoal_fab_eq_open(struct shoal_fab *f, struct fid_eq **eq, int *fd);
int shoal_fab_cq_open(struct shoal_fab *f, size_t size, struct fid_cq **cq, int *fd);

/* Registers [BUF, BUF+LEN) on F's domain with exactly ACCESS (FI_SEND, FI_RECV, FI_WRITE,
 * FI_REMOTE_WRITE ...; no MR cache widens it) under a random key where the provider does not
 * pick keys itself (FI_MR_PROV_KEY). Where the provider pins memory, refuses with -ENOMEM and a
 * logged line when RLIMIT_MEMLOCK would be exceeded. The pages are marked MADV_DONTFORK (so
 * BUF, LEN should cover whole pages of their own; a child process cannot touch them). Returns 0
 * or a negative errno (logged). Undo with shoal_fab_mr_close. */
int shoal_fab_mr_reg(struct shoal_fab *f, void *buf, size_t len, uint64_t access,
                     struct fid_mr **mr);
/* Closes MR (NULL: nothing) of LEN bytes registered on F. */
void shoal_fab_mr_close(struct shoal_fab *f, struct fid_mr *mr, size_t len);
/* madvise(MADV_DONTFORK) of the pages holding [BUF, BUF+LEN); a failure is logged. */
void shoal_fab_dontfork(void *buf, size_t len);
/* The descriptor to pass with local buffers of MR (NULL unless the provider kept FI_MR_LOCAL). */
void *shoal_fab_desc(const struct shoal_fab *f, struct fid_mr *mr);
/* The address a peer must use for PTR inside the registration starting at BASE: the virtual
 * address with FI_MR_VIRT_ADDR, else the offset. */
uint64_t shoal_fab_rma_addr(const struct shoal_fab *f, const void *base, const void *ptr);

/* Logs "rdma: CALL at PLACE failed: fi_strerror(-RC) (RC)" at warning level (rate-limited). */
void shoal_fab_log_err(const char *place, const char *call, int rc);
/* Reads and logs one CQ error entry; returns its error code (positive, e.g. FI_ECANCELED) and
 * the op's context in *CTX. */
int shoal_fab_cq_err(struct fid_cq *cq, const char *place, void **ctx);
/* Reads one EQ error entry; returns its error code (positive) and writes a line into MSG. */
int shoal_fab_eq_err(struct fid_eq *eq, char *msg, size_t msglen);

/* "ip:port" of a sockaddr_in. */
void shoal_fab_addr_str(const void *sa, char *out, size_t outlen);
/* Parses "ip:port" into a freshly malloc'd sockaddr_in (for fi_info dest_addr). NULL on error. */
struct sockaddr_in *shoal_fab_addr_parse(const char *addr);

/* ---- message endpoint --------------------------------------------------------------------- */

/* What a posted operation was; libfabric hands back a pointer to CTX, which therefore comes
 * first. OWNER is the receive buffer or the caller's slot the operation belongs to. */
enum shoal_fab_op_kind {
        SHOAL_FAB_OP_RX,
        SHOAL_FAB_OP_SEND,
        SHOAL_FAB_OP_WRITE
};

struct shoal_fab_op {
        struct fi_context2 ctx; /* first */
        enum shoal_fab_op_kind kind;
        void *owner;
};

/* One posted receive buffer of SHOAL_FAB_MSG_SLOT bytes. */
struct shoal_fab_rx {
        struct shoal_fab_op op; /* owner = this */
        char *buf;
};

/* The part of an FI_EP_MSG connection both IORPC sides share: one registered region holding
 * NRX receive buffers and then NSLOTS send buffers, the endpoint with its own EQ and CQ, and the
 * count of posted operations. What a send slot carries besides its buffer is the caller's.
 * Posted buffers belong to the provider until their completion was read or the endpoint was
 * closed. */
struct shoal_fab_mep {
        struct shoal_fab *fab;
        const char *peer; /* for log lines; the caller's string, valid as long as this */
        struct fid_ep *ep;
        struct fid_eq *eq;
        struct fid_cq *cq;
        int eq_fd, cq_fd; /* -1: not open, or not to be taken out of epoll */
        struct fid_mr *mr;
        char *mem; /* MEMLEN bytes, whole pages */
        size_t memlen;
        struct shoal_fab_rx *rx;
        unsigned nrx, nslots;
        int posted; /* operations posted whose completion was not read yet */
};

/* Zeroes M and allocates its region and receive buffers for F (nothing registered or opened
 * yet). Returns 0 or -ENOMEM; undo with shoal_fab_mep_close (also after a failure). */
int shoal_fab_mep_alloc(struct shoal_fab_mep *m, struct shoal_fab *f, const char *peer,
                        unsigned nrx, unsigned nslots);
/* Send buffer I (< nslots) of M's region. */
char *shoal_fab_mep_sbuf(const struct shoal_fab_mep *m, unsigned i);
/* The descriptor to pass with buffers of M's region. */
void *shoal_fab_mep_desc(const struct shoal_fab_mep *m);
/* Registers M's region, opens the endpoint for INFO (context EP_CTX), its EQ and a CQ of
 * CQ_SIZE entries (> nrx), binds and enables it and posts every receive: what is left is
 * fi_connect or fi_accept. INFO's queue sizes are cut to what fits the CQ first: the receive
 * queue to nrx, the transmit queue to CQ_SIZE - nrx (so CQ_SIZE must cover every send and write
 * the caller keeps posted, plus nrx). Returns 0, or a negative error with the failed call's name
 * in *CALL (not logged); undo with shoal_fab_mep_close. */
int shoal_fab_mep_open(struct shoal_fab_mep *m, struct fi_info *info, void *ep_ctx, size_t cq_size,
                       const char **call);
/* Adds M's EQ and CQ fds to EPFD for reading. */
void shoal_fab_mep_watch(struct shoal_fab_mep *m, int epfd);
/* True when neither queue of M has work pending, so the caller may sleep in epoll (fi_trywait). */
bool shoal_fab_mep_trywait(struct shoal_fab_mep *m);

/* Post a receive, a send of [BUF, BUF+LEN) from M's region, or an RMA write of [BUF, BUF+LEN)
 * (DESC its local descriptor) to RADDR/RKEY; OP comes back with the completion. Each returns 0
 * (M->posted counts it) or the negative error, logged with M's peer. */
int shoal_fab_mep_post_rx(struct shoal_fab_mep *m, struct shoal_fab_rx *rx);
int shoal_fab_mep_send(struct shoal_fab_mep *m, const void *buf, size_t len,
                       struct shoal_fab_op *op);
int shoal_fab_mep_write(struct shoal_fab_mep *m, const void *buf, size_t len, void *desc,
                        uint64_t raddr, uint64_t rkey, struct shoal_fab_op *op);

/* Reads one CM event of M's EQ into *EVENT. Returns 1, 0 when none is queued, -FI_EAVAIL with
 * the error entry's line in MSG, or another negative error (logged). */
int shoal_fab_mep_eq_read(struct shoal_fab_mep *m, uint32_t *event, char *msg, size_t msglen);
/* Reads up to COUNT completions of M's CQ into E and takes them off M->posted. Returns their
 * number, 0 when none is queued, -FI_EAVAIL after reading (and logging, unless FI_ECANCELED)
 * one error entry whose op context is in *ERR_CTX (taken off M->posted when not NULL), or
 * another negative error (logged). */
ssize_t shoal_fab_mep_cq_read(struct shoal_fab_mep *m, struct fi_cq_msg_entry *e, size_t count,
                              void **err_ctx);

/* fi_shutdown of M's endpoint (call once connected); the peer sees FI_SHUTDOWN. */
void shoal_fab_mep_shutdown(struct shoal_fab_mep *m);
/* Takes M's fds out of EPFD and closes the endpoint: the provider touches no buffer of M after
 * this and reports no more completions (posted ones are simply dropped). */
void shoal_fab_mep_close_ep(struct shoal_fab_mep *m, int epfd);
/* shoal_fab_mep_close_ep, then closes the queues, deregisters and frees the region. */
void shoal_fab_mep_close(struct shoal_fab_mep *m, int epfd);

#endif
