/* libfabric helpers for IORPC over RDMA. See fabric.h and RDMA.md. */
#include "net/fabric.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "common/config.h"
#include "common/log.h"
#include "common/util.h"
#include "net/iface.h"

#define FAB_VERSION FI_VERSION(1, 9)

const char *shoal_fab_provider(const char *flag)
{
        if (flag && *flag)
                return flag;
        const char *env = shoal_config_env()->fi_provider;
        return env ? env : "verbs";
}

int shoal_fab_parse_ifaces(const char *list, char names[SHOAL_FAB_MAX_IFACES][32])
{
        int n = 0;
        const char *p = list;
        for (;;) {
                const char *end = strchr(p, ':');
                size_t len = end ? (size_t)(end - p) : strlen(p);
                if (!len || len >= 32 || n == SHOAL_FAB_MAX_IFACES)
                        return -EINVAL;
                memcpy(names[n], p, len);
                names[n][len] = '\0';
                n++;
                if (!end)
                        return n;
                p = end + 1;
        }
}

void shoal_fab_log_err(const char *place, const char *call, int rc)
{
        log_ratelimited(SHOAL_LOG_WARN, "rdma", "%s at %s failed: %s (%d)", call, place,
                        fi_strerror(rc < 0 ? -rc : rc), rc);
}

void shoal_fab_addr_str(const void *sa, char *out, size_t outlen)
{
        const struct sockaddr_in *in = sa;
        char ip[INET_ADDRSTRLEN] = "?";
        inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
        snprintf(out, outlen, "%s:%u", ip, ntohs(in->sin_port));
}

struct sockaddr_in *shoal_fab_addr_parse(const char *addr)
{
        char host[64];
        shoal_strlcpy(host, addr, sizeof(host));
        char *colon = strrchr(host, ':');
        if (!colon)
                return NULL;
        *colon = '\0';
        uint64_t port;
        if (shoal_parse_u64(colon + 1, 65535, &port) || !port)
                return NULL;
        struct sockaddr_in *sa = calloc(1, sizeof(*sa));
        if (!sa)
                return NULL;
        sa->sin_family = AF_INET;
        sa->sin_port = htons((uint16_t)port);
        if (inet_pton(AF_INET, host, &sa->sin_addr) != 1) {
                free(sa);
                return NULL;
        }
        return sa;
}

/* RDMA.md rule 5: tcp names its domains after netdevs and ignores the domain hint; verbs names
 * them after the ibv device behind the netdev. Accept either for IFNAME. */
static bool domain_matches(const char *domain, const char *ifname)
{
        if (!strcmp(domain, ifname))
                return true;
        char path[128];
        snprintf(path, sizeof(path), "/sys/class/net/%s/device/infiniband", ifname);
        DIR *d = opendir(path);
        if (!d)
                return false;
        bool found = false;
        struct dirent *de;
        while (!found && (de = readdir(d)))
                found = de->d_name[0] != '.' && !strcmp(de->d_name, domain);
        closedir(d);
        return found;
}

int shoal_fab_open(struct shoal_fab *f, const char *provider, const char *ifname, char *err,
                   size_t errlen)
{
        memset(f, 0, sizeof(*f));
        shoal_strlcpy(f->ifname, ifname, sizeof(f->ifname));
        int rc = shoal_iface_ipv4(ifname, f->ip, sizeof(f->ip));
        if (rc) {
                snprintf(err, errlen, "--rdma-network %s: %s", ifname,
                         rc == -ENODEV ? "no such interface" : "it has no IPv4 address");
                return rc;
        }
        struct fi_info *hints = fi_allocinfo(), *list = NULL;
        if (!hints) {
                snprintf(err, errlen, "rdma: out of memory");
                return -ENOMEM;
        }
        hints->ep_attr->type = FI_EP_MSG;
        hints->caps = FI_MSG | FI_RMA;
        /* Every op context we post starts with a struct fi_context2. */
        hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
        hints->addr_format = FI_SOCKADDR_IN;
        /* Offer every mr_mode bit we honour; read back what the provider kept (rule 1). */
        hints->domain_attr->mr_mode =
                FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        hints->fabric_attr->prov_name = strdup(provider);
        rc = fi_getinfo(FAB_VERSION, f->ip, "0", FI_SOURCE, hints, &list);
        fi_freeinfo(hints);
        if (rc) {
                snprintf(err, errlen,
                         "--rdma-network %s: RDMA provider %s cannot start on %s: fi_getinfo: %s "
                         "(set --rdma-provider or FI_PROVIDER, e.g. tcp without RDMA hardware)",
                         ifname, provider, f->ip, fi_strerror(-rc));
                return rc < 0 ? rc : -ENODEV;
        }
        for (struct fi_info *i = list; i; i = i->next) {
                if (i->domain_attr && i->domain_attr->name &&
                    domain_matches(i->domain_attr->name, ifname)) {
                        f->info = fi_dupinfo(i);
                        break;
                }
        }
        /* tcp may also name a domain after itself: then the source address decides. */
        for (struct fi_info *i = list; i && !f->info; i = i->next) {
                const struct sockaddr_in *sa = i->src_addr;
                char ip[INET_ADDRSTRLEN] = "";
                if (sa && i->src_addrlen >= sizeof(*sa) && sa->sin_family == AF_INET &&
                    inet_ntop(AF_INET, &sa->sin_addr, ip, sizeof(ip)) && !strcmp(ip, f->ip) &&
                    i->fabric_attr && i->fabric_attr->prov_name &&
                    (!strcmp(i->fabric_attr->prov_name, "tcp") ||
                     !strcmp(i->fabric_attr->prov_name, "sockets")))
                        f->info = fi_dupinfo(i);
        }
        if (!f->info) {
                snprintf(err, errlen,
                         "--rdma-network %s: provider %s offers no domain for this interface "
                         "(first domain: %s)",
                         ifname, provider,
                         list->domain_attr && list->domain_attr->name ? list->domain_attr->name
                                                                      : "?");
                fi_freeinfo(list);
                return -ENODEV;
        }
        fi_freeinfo(list);
        shoal_strlcpy(f->prov, f->info->fabric_attr->prov_name, sizeof(f->prov));
        f->mr_mode = (uint64_t)f->info->domain_attr->mr_mode;
        f->key_size = f->info->domain_attr->mr_key_size;
        f->tx_size = f->info->tx_attr->size;
        f->rx_size = f->info->rx_attr->size;
        f->max_msg = f->info->ep_attr->max_msg_size;
        f->next_key = 1;
        rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL);
        if (rc) {
                snprintf(err, errlen, "--rdma-network %s: fi_fabric (%s): %s", ifname, f->prov,
                         fi_strerror(-rc));
                return rc;
        }
        rc = fi_domain(f->fabric, f->info, &f->domain, NULL);
        if (rc) {
                snprintf(err, errlen, "--rdma-network %s: fi_domain (%s): %s", ifname, f->prov,
                         fi_strerror(-rc));
                return rc;
        }
        if (f->key_size > 8 || !f->tx_size || !f->rx_size) {
                snprintf(err, errlen,
                         "--rdma-network %s: provider %s: unusable key size %zu or "
                         "queue sizes %zu/%zu",
                         ifname, f->prov, f->key_size, f->tx_size, f->rx_size);
                return -ENOTSUP;
        }
        return 0;
}

void shoal_fab_close(struct shoal_fab *f)
{
        if (f->domain)
                fi_close(&f->domain->fid);
        if (f->fabric)
                fi_close(&f->fabric->fid);
        if (f->info)
                fi_freeinfo(f->info);
        f->domain = NULL;
        f->fabric = NULL;
        f->info = NULL;
}

int shoal_fab_eq_open(struct shoal_fab *f, struct fid_eq **eq, int *fd)
{
        struct fi_eq_attr a = {.wait_obj = FI_WAIT_FD};
        int rc = fi_eq_open(f->fabric, &a, eq, NULL);
        if (rc) {
                shoal_fab_log_err(f->ifname, "fi_eq_open", rc);
                return rc;
        }
        rc = fi_control(&(*eq)->fid, FI_GETWAIT, fd);
        if (rc) {
                shoal_fab_log_err(f->ifname, "fi_control(eq, FI_GETWAIT)", rc);
                fi_close(&(*eq)->fid);
                *eq = NULL;
        }
        return rc;
}

int shoal_fab_cq_open(struct shoal_fab *f, size_t size, struct fid_cq **cq, int *fd)
{
        struct fi_cq_attr a = {.size = size, .format = FI_CQ_FORMAT_MSG, .wait_obj = FI_WAIT_FD};
        int rc = fi_cq_open(f->domain, &a, cq, NULL);
        if (rc) {
                shoal_fab_log_err(f->ifname, "fi_cq_open", rc);
                return rc;
        }
        rc = fi_control(&(*cq)->fid, FI_GETWAIT, fd);
        if (rc) {
                shoal_fab_log_err(f->ifname, "fi_control(cq, FI_GETWAIT)", rc);
                fi_close(&(*cq)->fid);
                *cq = NULL;
        }
        return rc;
}

int shoal_fab_mr_reg(struct shoal_fab *f, void *buf, size_t len, uint64_t access,
                     struct fid_mr **mr)
{
        uint64_t key = f->next_key++;
        int rc = fi_mr_reg(f->domain, buf, len, access, 0, key, 0, mr, NULL);
        if (rc)
                shoal_fab_log_err(f->ifname, "fi_mr_reg", rc);
        return rc;
}

void *shoal_fab_desc(const struct shoal_fab *f, struct fid_mr *mr)
{
        return (f->mr_mode & FI_MR_LOCAL) ? fi_mr_desc(mr) : NULL;
}

uint64_t shoal_fab_rma_addr(const struct shoal_fab *f, const void *base, const void *ptr)
{
        if (f->mr_mode & FI_MR_VIRT_ADDR)
                return (uint64_t)(uintptr_t)ptr;
        return (uint64_t)((const char *)ptr - (const char *)base);
}

int shoal_fab_cq_err(struct fid_cq *cq, const char *place, void **ctx)
{
        struct fi_cq_err_entry e;
        memset(&e, 0, sizeof(e));
        ssize_t n = fi_cq_readerr(cq, &e, 0);
        *ctx = NULL;
        if (n != 1) {
                shoal_fab_log_err(place, "fi_cq_readerr", (int)n);
                return FI_EOTHER;
        }
        *ctx = e.op_context;
        if (e.err != FI_ECANCELED) {
                char buf[128] = "";
                const char *pe = fi_cq_strerror(cq, e.prov_errno, e.err_data, buf, sizeof(buf));
                log_ratelimited(SHOAL_LOG_WARN, "rdma", "completion error at %s: %s (%d), %s",
                                place, fi_strerror(e.err), e.err, pe ? pe : "");
        }
        return e.err ? e.err : FI_EOTHER;
}

int shoal_fab_eq_err(struct fid_eq *eq, char *msg, size_t msglen)
{
        struct fi_eq_err_entry e;
        memset(&e, 0, sizeof(e));
        ssize_t n = fi_eq_readerr(eq, &e, 0);
        if (n != (ssize_t)sizeof(e)) {
                snprintf(msg, msglen, "fi_eq_readerr: %s", fi_strerror((int)-n));
                return FI_EOTHER;
        }
        char buf[128] = "";
        const char *pe = fi_eq_strerror(eq, e.prov_errno, e.err_data, buf, sizeof(buf));
        snprintf(msg, msglen, "%s (%d)%s%s", fi_strerror(e.err), e.err, pe && *pe ? ", " : "",
                 pe ? pe : "");
        return e.err ? e.err : FI_EOTHER;
}

int shoal_fab_mep_alloc(struct shoal_fab_mep *m, struct shoal_fab *f, const char *peer,
                        unsigned nrx, unsigned nslots)
{
        memset(m, 0, sizeof(*m));
        m->fab = f;
        m->peer = peer;
        m->eq_fd = m->cq_fd = -1;
        m->nrx = nrx;
        m->nslots = nslots;
        size_t memlen = (size_t)(nrx + nslots) * SHOAL_FAB_MSG_SLOT;
        m->mem = aligned_alloc(4096, (memlen + 4095) / 4096 * 4096);
        m->rx = calloc(nrx, sizeof(*m->rx));
        if (!m->mem || !m->rx)
                return -ENOMEM;
        for (unsigned i = 0; i < nrx; i++) {
                m->rx[i].op.kind = SHOAL_FAB_OP_RX;
                m->rx[i].op.owner = &m->rx[i];
                m->rx[i].buf = m->mem + (size_t)i * SHOAL_FAB_MSG_SLOT;
        }
        return 0;
}

char *shoal_fab_mep_sbuf(const struct shoal_fab_mep *m, unsigned i)
{
        return m->mem + (size_t)(m->nrx + i) * SHOAL_FAB_MSG_SLOT;
}

void *shoal_fab_mep_desc(const struct shoal_fab_mep *m)
{
        return shoal_fab_desc(m->fab, m->mr);
}

int shoal_fab_mep_open(struct shoal_fab_mep *m, struct fi_info *info, void *ep_ctx, size_t cq_size,
                       const char **call)
{
        struct shoal_fab *f = m->fab;
        size_t memlen = (size_t)(m->nrx + m->nslots) * SHOAL_FAB_MSG_SLOT;
        int rc;
        *call = "fi_mr_reg";
        if ((rc = shoal_fab_mr_reg(f, m->mem, memlen, FI_SEND | FI_RECV, &m->mr)))
                return rc;
        *call = "fi_endpoint";
        if ((rc = fi_endpoint(f->domain, info, &m->ep, ep_ctx)))
                return rc;
        *call = "fi_eq_open";
        if ((rc = shoal_fab_eq_open(f, &m->eq, &m->eq_fd)))
                return rc;
        *call = "fi_cq_open";
        if ((rc = shoal_fab_cq_open(f, cq_size, &m->cq, &m->cq_fd)))
                return rc;
        *call = "fi_ep_bind(eq)";
        if ((rc = fi_ep_bind(m->ep, &m->eq->fid, 0)))
                return rc;
        *call = "fi_ep_bind(cq)";
        if ((rc = fi_ep_bind(m->ep, &m->cq->fid, FI_TRANSMIT | FI_RECV)))
                return rc;
        *call = "fi_enable";
        if ((rc = fi_enable(m->ep)))
                return rc;
        *call = "fi_recv";
        for (unsigned i = 0; i < m->nrx; i++)
                if ((rc = shoal_fab_mep_post_rx(m, &m->rx[i])))
                        return rc;
        return 0;
}

void shoal_fab_mep_watch(struct shoal_fab_mep *m, int epfd)
{
        struct epoll_event ev = {.events = EPOLLIN};
        epoll_ctl(epfd, EPOLL_CTL_ADD, m->eq_fd, &ev);
        epoll_ctl(epfd, EPOLL_CTL_ADD, m->cq_fd, &ev);
}

bool shoal_fab_mep_trywait(struct shoal_fab_mep *m)
{
        struct fid *fids[2] = {&m->eq->fid, &m->cq->fid};
        return fi_trywait(m->fab->fabric, fids, 2) == 0;
}

int shoal_fab_mep_post_rx(struct shoal_fab_mep *m, struct shoal_fab_rx *rx)
{
        ssize_t rc =
                fi_recv(m->ep, rx->buf, SHOAL_FAB_MSG_SLOT, shoal_fab_mep_desc(m), 0, &rx->op.ctx);
        if (rc) {
                shoal_fab_log_err(m->peer, "fi_recv", (int)rc);
                return (int)rc;
        }
        m->posted++;
        return 0;
}

int shoal_fab_mep_send(struct shoal_fab_mep *m, const void *buf, size_t len,
                       struct shoal_fab_op *op)
{
        ssize_t rc = fi_send(m->ep, buf, len, shoal_fab_mep_desc(m), 0, &op->ctx);
        if (rc) {
                shoal_fab_log_err(m->peer, "fi_send", (int)rc);
                return (int)rc;
        }
        m->posted++;
        return 0;
}

int shoal_fab_mep_write(struct shoal_fab_mep *m, const void *buf, size_t len, void *desc,
                        uint64_t raddr, uint64_t rkey, struct shoal_fab_op *op)
{
        ssize_t rc = fi_write(m->ep, buf, len, desc, 0, raddr, rkey, &op->ctx);
        if (rc) {
                shoal_fab_log_err(m->peer, "fi_write", (int)rc);
                return (int)rc;
        }
        m->posted++;
        return 0;
}

int shoal_fab_mep_eq_read(struct shoal_fab_mep *m, uint32_t *event, char *msg, size_t msglen)
{
        struct fi_eq_cm_entry entry;
        ssize_t n = fi_eq_read(m->eq, event, &entry, sizeof(entry), 0);
        if (n == -FI_EAGAIN)
                return 0;
        if (n == -FI_EAVAIL) {
                shoal_fab_eq_err(m->eq, msg, msglen);
                return -FI_EAVAIL;
        }
        if (n < 0) {
                shoal_fab_log_err(m->peer, "fi_eq_read", (int)n);
                return (int)n;
        }
        return 1;
}

ssize_t shoal_fab_mep_cq_read(struct shoal_fab_mep *m, struct fi_cq_msg_entry *e, size_t count,
                              void **err_ctx)
{
        ssize_t n = fi_cq_read(m->cq, e, count);
        if (n == -FI_EAGAIN)
                return 0;
        if (n == -FI_EAVAIL) {
                shoal_fab_cq_err(m->cq, m->peer, err_ctx);
                if (*err_ctx)
                        m->posted--;
                return -FI_EAVAIL;
        }
        if (n < 0) {
                shoal_fab_log_err(m->peer, "fi_cq_read", (int)n);
                return n;
        }
        m->posted -= (int)n;
        return n;
}

void shoal_fab_mep_shutdown(struct shoal_fab_mep *m)
{
        if (!m->ep)
                return;
        int rc = fi_shutdown(m->ep, 0);
        if (rc && rc != -FI_ENOTCONN)
                shoal_fab_log_err(m->peer, "fi_shutdown", rc);
}

void shoal_fab_mep_close_ep(struct shoal_fab_mep *m, int epfd)
{
        if (m->eq_fd >= 0)
                epoll_ctl(epfd, EPOLL_CTL_DEL, m->eq_fd, NULL);
        if (m->cq_fd >= 0)
                epoll_ctl(epfd, EPOLL_CTL_DEL, m->cq_fd, NULL);
        m->eq_fd = m->cq_fd = -1;
        if (m->ep)
                fi_close(&m->ep->fid);
        m->ep = NULL;
}

void shoal_fab_mep_close(struct shoal_fab_mep *m, int epfd)
{
        shoal_fab_mep_close_ep(m, epfd);
        if (m->cq)
                fi_close(&m->cq->fid);
        if (m->eq)
                fi_close(&m->eq->fid);
        if (m->mr)
                fi_close(&m->mr->fid);
        free(m->mem);
        free(m->rx);
        m->cq = NULL;
        m->eq = NULL;
        m->mr = NULL;
        m->mem = NULL;
        m->rx = NULL;
}
