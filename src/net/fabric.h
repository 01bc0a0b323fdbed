/* A thin libfabric wrapper for IORPC over RDMA (FI_EP_MSG): opening one interface's fabric and
 * domain, event queues and completion queues with wait fds, memory registration that obeys the
 * provider's mr_mode, and error printing with call, place and fi_strerror. RDMA.md has the facts
 * this code relies on (tcp provider in tests, verbs in production).
 *
 * Nothing here is thread-safe: one progress thread owns every object opened through it. */
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
        uint64_t next_key;       /* requested keys when the provider does not pick them */
};

/* The provider to use: FLAG when given, else $FI_PROVIDER, else "verbs" [M6]. */
const char *shoal_fab_provider(const char *flag);

/* Splits "IF1[:IF2...]" into at most SHOAL_FAB_MAX_IFACES names. Returns the count or -EINVAL
 * (empty name, too many, name too long). */
int shoal_fab_parse_ifaces(const char *list, char names[SHOAL_FAB_MAX_IFACES][32]);

/* Opens interface IFNAME on PROVIDER: resolves its IPv4, asks libfabric for an FI_EP_MSG
 * endpoint type with FI_MSG | FI_RMA sourced at that address, checks the domain (RDMA.md rule 5)
 * and opens fabric and domain. Returns 0 or a negative errno with one line in ERR. Undo with
 * shoal_fab_close (also after a failure). */
int shoal_fab_open(struct shoal_fab *f, const char *provider, const char *ifname, char *err,
                   size_t errlen);
void shoal_fab_close(struct shoal_fab *f);

/* An event queue / completion queue (FI_CQ_FORMAT_MSG) with FI_WAIT_FD; *FD receives its wait fd
 * for epoll. Return 0 or a negative errno (printed). */
int shoal_fab_eq_open(struct shoal_fab *f, struct fid_eq **eq, int *fd);
int shoal_fab_cq_open(struct shoal_fab *f, size_t size, struct fid_cq **cq, int *fd);

/* Registers [BUF, BUF+LEN) on F's domain with ACCESS (FI_SEND, FI_RECV, FI_WRITE,
 * FI_REMOTE_WRITE ...). Once per pool, never per request. Returns 0 or a negative errno. */
int shoal_fab_mr_reg(struct shoal_fab *f, void *buf, size_t len, uint64_t access,
                     struct fid_mr **mr);
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

#endif
