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
 * Domains are opened FI_THREAD_SAFE: registrations and endpoint creation may run on other
 * threads than the one progress thread that posts operations and reads the queues. */
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
        size_t queue_margin;     /* locked memory kept for its queues (SHOAL_FAB_QUEUE_MARGIN) */
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
/* How many connections of SHOAL_FAB_FDS_PER_CONN fds the open-files limit allows after keeping
 * RESERVE fds for the rest: the cap a listener should derive its connection limit from. */
unsigned shoal_fab_conn_budget(const struct shoal_fab_limits *l, size_t reserve);
/* 0 when pinning LEN more bytes beside PINNED stays within L's locked-memory limit (or there is
 * none, or CAP_IPC_LOCK); else -ENOMEM with one line in MSG that says how to raise it. */
int shoal_fab_memlock_check(const struct shoal_fab_limits *l, size_t pinned, size_t len, char *msg,
                            size_t msglen);
/* The limits in force after the process set-up of the first shoal_fab_open (all unlimited
 * before it). */
const struct shoal_fab_limits *shoal_fab_process_limits(void);
/* libfabric's MR cache (issue 32): shoal turns it off by environment before libfabric reads its
 * parameters, which it does once, at its first initialisation. Another library that initialised
 * libfabric first (NCCL's OFI plugin) leaves it on, and a cached registration outlives its
 * fi_close. The first shoal_fab_open checks that libfabric was not initialised before it (or
 * that its environment turned the cache off then) and, at its first domain, that two
 * registrations of one page get two keys; either finding refuses every later open with -EPERM
 * and one line naming the cause and the fix. */
/* True once libfabric has initialised itself in this process (by anyone). Initialises nothing. */
bool shoal_fab_libfabric_initialised(void);
/* True when an FI_MR_CACHE_MAX_COUNT value (NULL: unset) turns the cache off. */
bool shoal_fab_env_cache_off(const char *max_count);
/* The refusal line when the MR cache was found on, else "". */
const char *shoal_fab_mr_cache_refusal(void);
/* fork (issue 32): a child never touches its parent's fabric (libshoal abandons the parent's
 * node in it). It may open its own only when no ancestor opened a provider with device state:
 * shoal_fab_open refuses with -EPERM in a child of a process that did (libshoal's child then
 * reads over IORPC on TCP, with one log line). */
/* True for the providers over plain sockets (tcp, sockets, udp), which keep no device state. */
bool shoal_fab_fork_safe_provider(const char *prov);
/* True (the provider's name in PROV) when this process descends from one that opened a provider
 * that is not fork-safe; false in that process itself and where none was opened. */
bool shoal_fab_inherited_devices(char *prov, size_t provlen);
/* Locked memory the RLIMIT_MEMLOCK pre-check keeps aside per interface open on a provider that
 * pins memory, for the queues it pins beside our registrations (verbs: a member interface's CQ
 * of ~83k entries is ~5 MiB, each connection's QP tens of KiB). */
#define SHOAL_FAB_QUEUE_MARGIN (16u << 20)
/* What is kept aside now, all interfaces. */
size_t shoal_fab_queue_margin(void);
/* For RC (a negative error) of CALL (fi_cq_open, fi_endpoint) on a provider that PINS memory:
 * when it is -ENOMEM, one line in MSG naming RLIMIT_MEMLOCK and how to raise it, and true. */
bool shoal_fab_memlock_hint(int rc, bool pins, const char *call, char *msg, size_t msglen);
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

/* "ip:port" of a sockaddr_in. */
void shoal_fab_addr_str(const void *sa, char *out, size_t outlen);
/* Parses "ip:port" into a freshly malloc'd sockaddr_in (for fi_info dest_addr). NULL on error. */
struct sockaddr_in *shoal_fab_addr_parse(const char *addr);

/* ---- endpoints on shared queues --------------------------------------------------------- */

/* What a posted operation was; libfabric hands back a pointer to CTX, which therefore comes
 * first. OWNER is the buffer the operation belongs to. Receives and sends are posted with a
 * completion; writes without one (FI_SELECTIVE_COMPLETION), so a write is never counted: its
 * send, posted after it on the same endpoint, completes after it. A failed write may still be
 * reported (tcp does, verbs does not). */
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

/* Opens another domain of F's fabric on F's fi_info (the client opens one per member and
 * interface: verbs scopes a remote key to its protection domain and tcp looks keys up per
 * domain, so a key made for one member is worth nothing on another member's connections).
 * Returns 0 or a negative errno (logged). */
int shoal_fab_domain_open(struct shoal_fab *f, struct fid_domain **dom);

/* shoal_fab_mr_reg on domain DOM (NULL: F's own), marking the pages MADV_DONTFORK only when
 * DONTFORK (memory the caller marked once already need not be marked per registration). */
int shoal_fab_mr_reg_dom(struct shoal_fab *f, struct fid_domain *dom, void *buf, size_t len,
                         uint64_t access, bool dontfork, struct fid_mr **mr);

/* N message buffers of SHOAL_FAB_MSG_SLOT bytes in whole pages of their own, registered for
 * sends and receives (local access only). */
struct shoal_fab_slots {
        char *mem;
        size_t len;
        struct fid_mr *mr;
        void *desc; /* to pass with every buffer of it (NULL unless FI_MR_LOCAL) */
        unsigned n;
};

/* Maps and registers S with N buffers on DOM (NULL: F's domain). Returns 0 or a negative errno
 * (logged); undo with shoal_fab_slots_close (also after a failure). */
int shoal_fab_slots_open(struct shoal_fab *f, struct fid_domain *dom, unsigned n,
                         struct shoal_fab_slots *s);
/* Buffer I (< S->n) of S. */
char *shoal_fab_slot(const struct shoal_fab_slots *s, unsigned i);
/* Deregisters and unmaps S (zeroed: closing twice is harmless). No endpoint may still have one
 * of its buffers posted. */
void shoal_fab_slots_close(struct shoal_fab *f, struct shoal_fab_slots *s);

/* fi_endpoint on DOM for INFO (context CTX) with its queues cut to RX receives and TX sends and
 * writes (never more than INFO offers): the CQ the caller binds must hold RX + TX entries for it
 * (verbs reserves rx_attr->size entries of the CQ at bind). On verbs an active endpoint (INFO
 * with a destination) resolves the address and route here, which can block for up to about 2 s:
 * call it off the progress thread. Returns 0 or a negative errno (not logged). */
int shoal_fab_ep_create(struct fid_domain *dom, struct fi_info *info, size_t rx, size_t tx,
                        void *ctx, struct fid_ep **ep);
/* Binds EP to EQ and to CQ for receives and transmits (FI_SELECTIVE_COMPLETION) and enables it;
 * what is left is posting receives and fi_connect or fi_accept. Returns 0 or a negative errno
 * with the failed call's name in *CALL (not logged). */
int shoal_fab_ep_bind(struct fid_ep *ep, struct fid_eq *eq, struct fid_cq *cq, const char **call);

/* Post a receive into BUF (SHOAL_FAB_MSG_SLOT bytes), a send of [BUF, BUF+LEN) with a
 * completion, or a write of [BUF, BUF+LEN) to RADDR/RKEY without one (FI_MORE: a send follows
 * at once; one doorbell where the provider honours it). DESC is the local descriptor; OP comes
 * back with the completion. Each returns 0, -FI_EAGAIN when the queues are full for now (not
 * logged: post again after reading completions), or another negative error (logged with PEER). */
int shoal_fab_post_rx(struct fid_ep *ep, const char *peer, void *buf, void *desc,
                      struct shoal_fab_op *op);
int shoal_fab_post_send(struct fid_ep *ep, const char *peer, const void *buf, size_t len,
                        void *desc, struct shoal_fab_op *op);
int shoal_fab_post_write(struct fid_ep *ep, const char *peer, const void *buf, size_t len,
                         void *desc, uint64_t raddr, uint64_t rkey, struct shoal_fab_op *op);

/* What a completion of an op is handed to: its length (0 on error) and its positive error code
 * (0 on success). */
typedef void (*shoal_fab_done_fn)(struct shoal_fab_op *op, size_t len, int err, uint64_t now);
/* Hands the completions queued on CQ to DONE, up to BUDGET of them (one queue must not keep its
 * thread from the others). Returns true when the budget ran out: more may be queued. */
bool shoal_fab_cq_drain(struct fid_cq *cq, const char *place, int budget, shoal_fab_done_fn done,
                        uint64_t now);

/* One event of an EQ that several endpoints (and a listener) share. */
struct shoal_fab_event {
        uint32_t event;       /* FI_CONNREQ, FI_CONNECTED, FI_SHUTDOWN, ...; 0 for an error */
        void *ctx;            /* the context of the endpoint it concerns (fid->context) */
        struct fi_info *info; /* FI_CONNREQ: the request (the caller frees it) */
        int err;              /* an error entry's positive error code */
        char msg[200];        /* an error entry's text */
};

/* Reads one event of EQ into *EV. Returns 1, 0 when none is queued, or a negative error
 * (logged with PLACE). An error entry is returned as an event with err set. */
int shoal_fab_eq_next(struct fid_eq *eq, const char *place, struct shoal_fab_event *ev);

/* fi_trywait on one object of F's fabric: true when its wait fd may be slept on. */
bool shoal_fab_trywait(struct shoal_fab *f, struct fid *fid);

/* fi_shutdown of EP (once connected; errors of an endpoint that never connected ignored). */
void shoal_fab_ep_shutdown(struct fid_ep *ep, const char *peer);

#endif
