/* libfabric helpers for IORPC over RDMA. See fabric.h and RDMA.md. */
#include "net/fabric.h"

#include <rdma/providers/fi_prov.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

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

/* ---- process set-up: environment and limits ---------------------------------------------- */

/* Bytes registered with a provider that pins them (see pins_memory), all interfaces together:
 * the kernel counts each registration against RLIMIT_MEMLOCK, twice for two interfaces. */
static _Atomic size_t pinned_bytes;

/* Before libfabric reads its parameters (at its first call; fabric.c makes every first call):
 * the MR cache registers every cached region with remote read and write whatever was asked
 * (verbs' vrb_mr_cache_add_region) and keeps regions registered after fi_close, so a closed
 * or local-only region would stay open to peers. We register pools once, where a cache gains
 * nothing, so it is turned off, overriding the environment. */
static void set_env(void)
{
        const char *v = shoal_config_env()->fi_mr_cache_max_count;
        if (v && *v && strcmp(v, "0"))
                log_warn("rdma",
                         "FI_MR_CACHE_MAX_COUNT=%s ignored: the MR cache widens the "
                         "access of registered memory; shoal turns it off",
                         v);
        setenv("FI_MR_CACHE_MAX_COUNT", "0", 1);
}

/* True when CAP_IPC_LOCK is in the process's effective set (/proc/self/status). */
static bool fab_cap_ipc_lock(void)
{
        FILE *f = fopen("/proc/self/status", "r");
        if (!f)
                return false;
        char line[256];
        unsigned long long cap = 0;
        bool found = false;
        while (!found && fgets(line, sizeof(line), f))
                found = sscanf(line, "CapEff: %llx", &cap) == 1;
        fclose(f);
        return found && (cap >> 14 & 1); /* CAP_IPC_LOCK */
}

int shoal_fab_raise_limits(struct shoal_fab_limits *out)
{
        struct rlimit fd, ml;
        int rc = 0;
        /* Unknown limits are no reason to refuse anything: the kernel still enforces them. */
        *out = (struct shoal_fab_limits){.nofile = SIZE_MAX, .memlock = SIZE_MAX};
        if (getrlimit(RLIMIT_NOFILE, &fd) || getrlimit(RLIMIT_MEMLOCK, &ml))
                return -errno;
        /* The soft limit up to the hard one; a huge hard limit (containers) capped, as some
         * libraries size tables by it. */
        rlim_t want = fd.rlim_max == RLIM_INFINITY || fd.rlim_max > SHOAL_FAB_NOFILE_CAP
                              ? SHOAL_FAB_NOFILE_CAP
                              : fd.rlim_max;
        if (fd.rlim_cur != RLIM_INFINITY && fd.rlim_cur < want) {
                struct rlimit n = {.rlim_cur = want, .rlim_max = fd.rlim_max};
                if (setrlimit(RLIMIT_NOFILE, &n) == 0)
                        fd.rlim_cur = want;
                else
                        rc = -errno;
        }
        if (ml.rlim_cur != ml.rlim_max) {
                struct rlimit n = {.rlim_cur = ml.rlim_max, .rlim_max = ml.rlim_max};
                if (setrlimit(RLIMIT_MEMLOCK, &n) == 0)
                        ml.rlim_cur = ml.rlim_max;
                else
                        rc = -errno;
        }
        out->nofile = fd.rlim_cur == RLIM_INFINITY ? SIZE_MAX : (size_t)fd.rlim_cur;
        out->memlock = ml.rlim_cur == RLIM_INFINITY ? SIZE_MAX : (size_t)ml.rlim_cur;
        out->cap_ipc_lock = fab_cap_ipc_lock();
        return rc;
}

unsigned shoal_fab_conn_budget(const struct shoal_fab_limits *l, size_t reserve)
{
        if (l->nofile <= reserve)
                return 0;
        size_t n = (l->nofile - reserve) / SHOAL_FAB_FDS_PER_CONN;
        return n > UINT32_MAX ? UINT32_MAX : (unsigned)n;
}

int shoal_fab_memlock_check(const struct shoal_fab_limits *l, size_t pinned, size_t len, char *msg,
                            size_t msglen)
{
        if (l->cap_ipc_lock || l->memlock == SIZE_MAX)
                return 0;
        if (pinned <= l->memlock && len <= l->memlock - pinned)
                return 0;
        snprintf(msg, msglen,
                 "registering %zu MiB more would pin %zu MiB in all, over RLIMIT_MEMLOCK (%zu "
                 "MiB): raise it (ulimit -l unlimited; LimitMEMLOCK=infinity in a systemd unit; "
                 "memlock in /etc/security/limits.conf) or run with CAP_IPC_LOCK",
                 len >> 20, (pinned + len) >> 20, l->memlock >> 20);
        return -ENOMEM;
}

static struct shoal_fab_limits limits = {.nofile = SIZE_MAX, .memlock = SIZE_MAX};

/* Locked memory kept aside for what a pinning provider pins beside our registrations: its queues
 * (verbs pins every CQ and QP; a member's CQ per interface is ~83k entries), per open
 * interface. */
static _Atomic size_t queue_margin;

size_t shoal_fab_queue_margin(void)
{
        return atomic_load(&queue_margin);
}

bool shoal_fab_memlock_hint(int rc, bool pins, const char *call, char *msg, size_t msglen)
{
        if (!pins || (rc != -FI_ENOMEM && rc != -ENOMEM))
                return false;
        snprintf(msg, msglen,
                 "%s: out of memory, most likely locked memory: the provider pins its queues "
                 "(CQs, QPs) beside registered memory, against RLIMIT_MEMLOCK (%zu MiB, %zu MiB "
                 "registered): raise it (ulimit -l unlimited; LimitMEMLOCK=infinity in a systemd "
                 "unit) or run with CAP_IPC_LOCK",
                 call, limits.memlock == SIZE_MAX ? (size_t)0 : limits.memlock >> 20,
                 atomic_load(&pinned_bytes) >> 20);
        return true;
}

static int request_key(const struct shoal_fab *f, uint64_t *key);

/* Why RDMA is refused in this process because libfabric's MR cache is on ("" when it is off). */
static char mr_cache_why[400];

bool shoal_fab_libfabric_initialised(void)
{
        /* libfabric defines its core parameters at its first initialisation (fi_ini);
         * fi_param_get of one not defined yet answers -FI_ENOENT and initialises nothing. */
        size_t v;
        return fi_param_get(NULL, "mr_cache_max_count", &v) != -FI_ENOENT;
}

bool shoal_fab_env_cache_off(const char *max_count)
{
        /* What libfabric parses (strtol): a count of 0 makes ofi_mr_cache_init fail, and verbs
         * then registers uncached. (A size of 0 means its default, not off.) */
        return max_count && strtol(max_count, NULL, 0) == 0;
}

/* Before set_env: when libfabric was initialised by someone else (NCCL's OFI plugin, mpi4py),
 * it read FI_MR_CACHE_MAX_COUNT then, and our setenv comes too late. The environment as shoal
 * read it at start is taken for what it read (programs do not unset it). */
static void mr_cache_check_init_order(void)
{
        if (!shoal_fab_libfabric_initialised() ||
            shoal_fab_env_cache_off(shoal_config_env()->fi_mr_cache_max_count))
                return;
        snprintf(mr_cache_why, sizeof(mr_cache_why),
                 "libfabric's MR cache is on: libfabric was initialised before shoal (by another "
                 "library: NCCL's OFI plugin, mpi4py, ...) without FI_MR_CACHE_MAX_COUNT=0, and "
                 "a cached registration stays open to peers after it is closed; start the "
                 "process with FI_MR_CACHE_MAX_COUNT=0 in its environment (or open shoal first)");
}

/* At the first domain: one page registered twice. A provider that caches registrations
 * (verbs, efa) hands the second the first's region, so the same key; without a cache every
 * registration has its own (tcp takes the random keys we request; it never caches). */
static void mr_cache_check_keys(struct shoal_fab *f)
{
        long pg = sysconf(_SC_PAGESIZE);
        void *page =
                mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (page == MAP_FAILED)
                return;
        shoal_mapped_fresh(page, (size_t)pg);
        struct fid_mr *mr[2] = {NULL, NULL};
        uint64_t key[2] = {0, 0};
        int rc = 0;
        for (int i = 0; i < 2 && !rc; i++) {
                uint64_t want;
                if (!(rc = request_key(f, &want)))
                        rc = fi_mr_reg(f->domain, page, (size_t)pg, FI_SEND | FI_RECV, 0, want, 0,
                                       &mr[i], NULL);
                if (!rc)
                        key[i] = fi_mr_key(mr[i]);
        }
        for (int i = 0; i < 2; i++)
                if (mr[i])
                        fi_close(&mr[i]->fid);
        munmap(page, (size_t)pg);
        if (!rc && key[0] == key[1])
                snprintf(mr_cache_why, sizeof(mr_cache_why),
                         "libfabric's MR cache is on (provider %s returned the same key for two "
                         "registrations of one page), and a cached registration stays open to "
                         "peers after it is closed; start the process with "
                         "FI_MR_CACHE_MAX_COUNT=0 in its environment",
                         f->prov);
}

const char *shoal_fab_mr_cache_refusal(void)
{
        return mr_cache_why;
}

/* ---- fork ------------------------------------------------------------------------------------ */

/* The process that first opened a provider with device state, and which (copied into forked
 * children as they are). */
static pid_t devices_pid;
static char devices_prov[32];

bool shoal_fab_fork_safe_provider(const char *prov)
{
        /* Sockets only: a child's own fabric on them shares nothing with the parent's. Verbs
         * (librdmacm keeps the devices open for the process's life, and a child's contexts are
         * built on them), efa, psm and the rest keep device state. */
        return !strcmp(prov, "tcp") || !strcmp(prov, "sockets") || !strcmp(prov, "udp");
}

bool shoal_fab_inherited_devices(char *prov, size_t provlen)
{
        pid_t p = __atomic_load_n(&devices_pid, __ATOMIC_ACQUIRE);
        if (!p || p == getpid())
                return false;
        shoal_strlcpy(prov, devices_prov, provlen);
        return true;
}

static void note_devices(const struct shoal_fab *f)
{
        if (shoal_fab_fork_safe_provider(f->prov) ||
            __atomic_load_n(&devices_pid, __ATOMIC_ACQUIRE))
                return;
        shoal_strlcpy(devices_prov, f->prov, sizeof(devices_prov));
        __atomic_store_n(&devices_pid, getpid(), __ATOMIC_RELEASE);
}

const struct shoal_fab_limits *shoal_fab_process_limits(void)
{
        return &limits;
}

static void process_setup(void)
{
        mr_cache_check_init_order();
        set_env();
        int rc = shoal_fab_raise_limits(&limits);
        if (rc)
                log_warn("rdma",
                         "cannot raise the soft RLIMIT_NOFILE/RLIMIT_MEMLOCK to the hard "
                         "limit: %s",
                         strerror(-rc));
        unsigned conns = shoal_fab_conn_budget(&limits, SHOAL_FAB_FD_RESERVE);
        if (conns < SHOAL_FAB_CONNS_WANTED)
                log_warn("rdma",
                         "open files limit %zu allows only about %u RDMA connections (%u fds "
                         "each, %u kept for cache files and the store): raise it (ulimit -n; "
                         "LimitNOFILE= in a systemd unit)",
                         limits.nofile, conns, SHOAL_FAB_FDS_PER_CONN, SHOAL_FAB_FD_RESERVE);
        if (limits.cap_ipc_lock || limits.memlock == SIZE_MAX)
                log_info("rdma", "open files limit %zu, locked memory unlimited%s", limits.nofile,
                         limits.cap_ipc_lock ? " (CAP_IPC_LOCK)" : "");
        else
                log_info("rdma", "open files limit %zu, locked memory limit %zu MiB", limits.nofile,
                         limits.memlock >> 20);
}

static pthread_once_t setup_once = PTHREAD_ONCE_INIT;

/* ---- choosing the domain (RDMA.md rule 5) --------------------------------------------------- */

static bool ends_with(const char *s, const char *suffix)
{
        size_t n = strlen(s), k = strlen(suffix);
        return n >= k && !strcmp(s + n - k, suffix);
}

/* True when ibv device DEV is IFNAME's own (SYSFS/IFNAME/device/infiniband/DEV) or, for a bond,
 * VLAN or other upper device, that of a device below it (SYSFS/IFNAME/lower_X), DEPTH levels
 * down at most. Mellanox RoCE LAG shows the bond's device under each slave. */
static bool sysfs_has_dev(const char *sysfs, const char *ifname, const char *dev, int depth)
{
        char path[512];
        if (strchr(ifname, '/') || strchr(dev, '/') || !strcmp(ifname, "..") || !*dev)
                return false;
        snprintf(path, sizeof(path), "%s/%s/device/infiniband/%s", sysfs, ifname, dev);
        if (access(path, F_OK) == 0)
                return true;
        if (depth <= 0)
                return false;
        snprintf(path, sizeof(path), "%s/%s", sysfs, ifname);
        DIR *d = opendir(path);
        if (!d)
                return false;
        bool found = false;
        struct dirent *de;
        while (!found && (de = readdir(d)))
                if (!strncmp(de->d_name, "lower_", 6))
                        found = sysfs_has_dev(sysfs, de->d_name + 6, dev, depth - 1);
        closedir(d);
        return found;
}

static bool src_is(const struct fi_info *i, const char *ip)
{
        const struct sockaddr_in *sa = i->src_addr;
        char s[INET_ADDRSTRLEN] = "";
        if (!sa || i->src_addrlen < sizeof(*sa) || sa->sin_family != AF_INET)
                return true; /* nothing to contradict the source we asked for */
        return inet_ntop(AF_INET, &sa->sin_addr, s, sizeof(s)) && !strcmp(s, ip);
}

static void add_name(char *list, size_t len, const char *name)
{
        size_t n = strlen(list);
        if (n + 2 < len)
                snprintf(list + n, len - n, "%s%s", n ? ", " : "", name);
}

const struct fi_info *shoal_fab_pick(const struct fi_info *list, const char *ifname, const char *ip,
                                     const char *sysfs, enum shoal_fab_pick_by *by, char *why,
                                     size_t whylen)
{
        const struct fi_info *best = NULL;
        enum shoal_fab_pick_by best_by = SHOAL_FAB_BY_NONE;
        const char *first = NULL;
        bool several = false;
        char seen[160] = "", skipped[160] = "";
        for (const struct fi_info *i = list; i; i = i->next) {
                const char *name = i->domain_attr ? i->domain_attr->name : NULL;
                if (!name || !i->ep_attr || i->ep_attr->type != FI_EP_MSG)
                        continue;
                /* XRC endpoints need shared receive contexts we do not use; "-dgram" domains
                 * are UD. Neither is a plain reliable connection. */
                if (i->ep_attr->protocol == FI_PROTO_RDMA_CM_IB_XRC || ends_with(name, "-xrc") ||
                    ends_with(name, "-dgram")) {
                        add_name(skipped, sizeof(skipped), name);
                        continue;
                }
                if (!src_is(i, ip)) {
                        add_name(skipped, sizeof(skipped), name);
                        continue;
                }
                add_name(seen, sizeof(seen), name);
                if (!first)
                        first = name;
                else if (strcmp(first, name))
                        several = true;
                enum shoal_fab_pick_by b = !strcmp(name, ifname) ? SHOAL_FAB_BY_NAME
                                           : sysfs_has_dev(sysfs, ifname, name, 2)
                                                   ? SHOAL_FAB_BY_SYSFS
                                                   : SHOAL_FAB_BY_SOURCE;
                if (b > best_by) {
                        best = i;
                        best_by = b;
                }
        }
        *by = best_by;
        if (best && (best_by != SHOAL_FAB_BY_SOURCE || !several))
                return best;
        if (best)
                snprintf(why, whylen,
                         "the provider offers several domains for %s (%s) and none is %s's by "
                         "name or in sysfs",
                         ip, seen, ifname);
        else
                snprintf(why, whylen, "the provider offers no usable domain for %s%s%s%s", ip,
                         *skipped ? " (skipped: " : "", skipped, *skipped ? ")" : "");
        *by = SHOAL_FAB_BY_NONE;
        return NULL;
}

static const char *by_str(enum shoal_fab_pick_by by)
{
        switch (by) {
        case SHOAL_FAB_BY_NAME:
                return "by name";
        case SHOAL_FAB_BY_SYSFS:
                return "by its sysfs device";
        case SHOAL_FAB_BY_SOURCE:
                return "by source address";
        default:
                return "-";
        }
}

/* A provider that pins registered memory (and counts it against RLIMIT_MEMLOCK): one that wants
 * registrations of allocated memory only, as hardware providers do; tcp and sockets do not. */
static bool pins_memory(const struct shoal_fab *f)
{
        return (f->mr_mode & FI_MR_ALLOCATED) && !shoal_config_env()->fi_verbs_use_odp;
}

struct fi_info *shoal_fab_hints(const char *provider)
{
        struct fi_info *hints = fi_allocinfo();
        if (!hints)
                return NULL;
        hints->ep_attr->type = FI_EP_MSG;
        hints->caps = FI_MSG | FI_RMA;
        /* Every op context we post starts with a struct fi_context2. */
        hints->mode = FI_CONTEXT | FI_CONTEXT2 | FI_RX_CQ_DATA;
        hints->addr_format = FI_SOCKADDR_IN;
        /* Registrations (the client's, per request, on the caller's thread) and endpoint
         * creation (on a connector thread: it blocks on verbs) run beside the progress thread's
         * completion reads. Verbs and tcp both offer it. */
        hints->domain_attr->threading = FI_THREAD_SAFE;
        /* The answer's send must not overtake its RMA write: the requester reads the payload as
         * soon as it sees the answer (RDMA.md). Verbs RC and tcp both keep it; asking makes a
         * provider that does not drop out here instead of handing out early answers. */
        hints->tx_attr->msg_order = FI_ORDER_SAW;
        hints->rx_attr->msg_order = FI_ORDER_SAW;
        /* Offer every mr_mode bit we honour; read back what the provider kept (rule 1). */
        hints->domain_attr->mr_mode =
                FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED | FI_MR_PROV_KEY;
        hints->fabric_attr->prov_name = strdup(provider);
        if (!hints->fabric_attr->prov_name) {
                fi_freeinfo(hints);
                return NULL;
        }
        return hints;
}

/* Whether this process may open RDMA at all: not with libfabric's MR cache on, nor in a child
 * forked from a process that holds device contexts. */
static int process_may_open(const char *ifname, char *err, size_t errlen)
{
        if (*mr_cache_why) {
                snprintf(err, errlen, "--rdma-network %s: %s", ifname, mr_cache_why);
                return -EPERM;
        }
        char parent_prov[32];
        if (shoal_fab_inherited_devices(parent_prov, sizeof(parent_prov))) {
                snprintf(err, errlen,
                         "--rdma-network %s: this process was forked from one that opened RDMA "
                         "provider %s, whose device contexts a child shares and must not use: "
                         "start workers with spawn or forkserver to read over RDMA",
                         ifname, parent_prov);
                return -EPERM;
        }
        return 0;
}

/* F->info: PROVIDER's domain for IFNAME's IPv4 address (RDMA.md rule 5). */
static int choose_domain(struct shoal_fab *f, const char *provider, const char *ifname,
                         enum shoal_fab_pick_by *by, char *err, size_t errlen)
{
        int rc = shoal_iface_ipv4(ifname, f->ip, sizeof(f->ip));
        if (rc) {
                snprintf(err, errlen, "--rdma-network %s: %s", ifname,
                         rc == -ENODEV ? "no such interface" : "it has no IPv4 address");
                return rc;
        }
        struct fi_info *hints = shoal_fab_hints(provider), *list = NULL;
        if (!hints) {
                snprintf(err, errlen, "rdma: out of memory");
                return -ENOMEM;
        }
        /* The interface's address as source: verbs binds it with rdma_cm and keeps only the
         * device behind it (bonds and VLANs included); tcp keeps the interface's own domain. */
        rc = fi_getinfo(FAB_VERSION, f->ip, "0", FI_SOURCE, hints, &list);
        fi_freeinfo(hints);
        if (rc) {
                snprintf(err, errlen,
                         "--rdma-network %s: RDMA provider %s cannot start on %s: fi_getinfo: %s "
                         "(set --rdma-provider or FI_PROVIDER, e.g. tcp without RDMA hardware)",
                         ifname, provider, f->ip, fi_strerror(-rc));
                return rc < 0 ? rc : -ENODEV;
        }
        char why[400];
        const struct fi_info *pick =
                shoal_fab_pick(list, ifname, f->ip, SHOAL_FAB_SYSFS_NET, by, why, sizeof(why));
        if (pick && !(f->info = fi_dupinfo(pick))) {
                fi_freeinfo(list);
                snprintf(err, errlen, "rdma: out of memory");
                return -ENOMEM;
        }
        fi_freeinfo(list);
        if (!f->info) {
                snprintf(err, errlen, "--rdma-network %s: provider %s: %s", ifname, provider, why);
                return -ENODEV;
        }
        return 0;
}

/* What F keeps of the chosen domain's attributes; the answer's ordering is required. */
static int read_attrs(struct shoal_fab *f, char *err, size_t errlen)
{
        shoal_strlcpy(f->prov, f->info->fabric_attr->prov_name, sizeof(f->prov));
        f->mr_mode = (uint64_t)f->info->domain_attr->mr_mode;
        f->key_size = f->info->domain_attr->mr_key_size;
        f->tx_size = f->info->tx_attr->size;
        f->rx_size = f->info->rx_attr->size;
        f->max_msg = f->info->ep_attr->max_msg_size;
        if (!(f->info->tx_attr->msg_order & FI_ORDER_SAW)) {
                snprintf(err, errlen,
                         "--rdma-network %s: provider %s does not keep a send behind an earlier "
                         "RMA write (FI_ORDER_SAW)",
                         f->ifname, f->prov);
                return -ENOTSUP;
        }
        return 0;
}

/* Opens the fabric and the domain; the first domain of the process probes the MR cache. */
static int open_domain(struct shoal_fab *f, char *err, size_t errlen)
{
        int rc = fi_fabric(f->info->fabric_attr, &f->fabric, NULL);
        if (rc) {
                snprintf(err, errlen, "--rdma-network %s: fi_fabric (%s): %s", f->ifname, f->prov,
                         fi_strerror(-rc));
                return rc;
        }
        rc = fi_domain(f->fabric, f->info, &f->domain, NULL);
        if (rc) {
                snprintf(err, errlen, "--rdma-network %s: fi_domain (%s): %s", f->ifname, f->prov,
                         fi_strerror(-rc));
                return rc;
        }
        static atomic_flag keys_probed = ATOMIC_FLAG_INIT;
        if (!atomic_flag_test_and_set(&keys_probed))
                mr_cache_check_keys(f);
        if (*mr_cache_why) {
                snprintf(err, errlen, "--rdma-network %s: %s", f->ifname, mr_cache_why);
                return -EPERM;
        }
        if (f->key_size > 8 || !f->tx_size || !f->rx_size) {
                snprintf(err, errlen,
                         "--rdma-network %s: provider %s: unusable key size %zu or "
                         "queue sizes %zu/%zu",
                         f->ifname, f->prov, f->key_size, f->tx_size, f->rx_size);
                return -ENOTSUP;
        }
        return 0;
}

int shoal_fab_open(struct shoal_fab *f, const char *provider, const char *ifname, char *err,
                   size_t errlen)
{
        memset(f, 0, sizeof(*f));
        shoal_strlcpy(f->ifname, ifname, sizeof(f->ifname));
        pthread_once(&setup_once, process_setup);
        enum shoal_fab_pick_by by = SHOAL_FAB_BY_NONE;
        int rc = process_may_open(ifname, err, errlen);
        if (!rc)
                rc = choose_domain(f, provider, ifname, &by, err, errlen);
        if (!rc)
                rc = read_attrs(f, err, errlen);
        if (!rc)
                rc = open_domain(f, err, errlen);
        if (rc)
                return rc;
        note_devices(f);
        if (pins_memory(f)) {
                f->queue_margin = SHOAL_FAB_QUEUE_MARGIN;
                atomic_fetch_add(&queue_margin, f->queue_margin);
        }
        log_info("rdma", "%s (%s): provider %s, domain %s (chosen %s), queues %zu/%zu, %s", ifname,
                 f->ip, f->prov, f->info->domain_attr->name, by_str(by), f->tx_size, f->rx_size,
                 pins_memory(f) ? "registrations pinned" : "nothing pinned");
        return 0;
}

void shoal_fab_close(struct shoal_fab *f)
{
        if (f->queue_margin)
                atomic_fetch_sub(&queue_margin, f->queue_margin);
        f->queue_margin = 0;
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
                char msg[400];
                if (shoal_fab_memlock_hint(rc, pins_memory(f), "fi_cq_open", msg, sizeof(msg)))
                        log_ratelimited(SHOAL_LOG_WARN, "rdma", "--rdma-network %s: %s", f->ifname,
                                        msg);
                else
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

/* The key to request: the provider's own under FI_MR_PROV_KEY (the request is ignored), else a
 * random one of key_size bytes, so that a peer cannot guess the keys of other regions. */
static int request_key(const struct shoal_fab *f, uint64_t *key)
{
        *key = 0;
        if (f->mr_mode & FI_MR_PROV_KEY)
                return 0;
        /* The client registers per request: draw keys from the CSPRNG 64 at a time (one
         * system call), each used once, never from a predictable generator. */
        static _Thread_local uint64_t keys[64];
        static _Thread_local unsigned nkeys;
        if (!nkeys) {
                if (shoal_random_bytes(keys, sizeof(keys)))
                        return -EIO; /* no guessable fallback */
                nkeys = 64;
        }
        *key = keys[--nkeys];
        keys[nkeys] = 0;
        if (f->key_size < 8)
                *key &= (1ULL << (8 * f->key_size)) - 1;
        return 0;
}

void shoal_fab_dontfork(void *buf, size_t len)
{
        long pg = sysconf(_SC_PAGESIZE);
        uintptr_t a = (uintptr_t)buf & ~((uintptr_t)pg - 1);
        uintptr_t e = ((uintptr_t)buf + len + (uintptr_t)pg - 1) & ~((uintptr_t)pg - 1);
        if (len && madvise((void *)a, e - a, MADV_DONTFORK))
                log_ratelimited(SHOAL_LOG_WARN, "rdma",
                                "madvise(MADV_DONTFORK) of %zu bytes: %s; a fork may move "
                                "registered pages on kernels before 5.13",
                                len, strerror(errno));
}

int shoal_fab_mr_reg(struct shoal_fab *f, void *buf, size_t len, uint64_t access,
                     struct fid_mr **mr)
{
        return shoal_fab_mr_reg_dom(f, NULL, buf, len, access, true, mr);
}

int shoal_fab_mr_reg_dom(struct shoal_fab *f, struct fid_domain *dom, void *buf, size_t len,
                         uint64_t access, bool dontfork, struct fid_mr **mr)
{
        bool pins = pins_memory(f);
        if (pins) {
                char msg[400];
                size_t held = atomic_load(&pinned_bytes) + atomic_load(&queue_margin);
                int rc = shoal_fab_memlock_check(&limits, held, len, msg, sizeof(msg));
                if (rc) {
                        /* per-request registrations can meet it at any rate */
                        log_ratelimited(SHOAL_LOG_WARN, "rdma", "--rdma-network %s: %s", f->ifname,
                                        msg);
                        return rc;
                }
        }
        /* Registered pages must stay where the NIC was told they are: without this a fork
         * (libfuse runs fusermount3) makes them copy-on-write and the parent's next write moves
         * them on kernels before 5.13. Pools are page-aligned; the child never uses them. */
        if (dontfork)
                shoal_fab_dontfork(buf, len);
        int rc;
        for (int tries = 0;; tries++) {
                uint64_t key;
                if ((rc = request_key(f, &key)))
                        break;
                rc = fi_mr_reg(dom ? dom : f->domain, buf, len, access, 0, key, 0, mr, NULL);
                if (rc != -FI_ENOKEY || tries == 3 || (f->mr_mode & FI_MR_PROV_KEY))
                        break; /* a random key that is taken: draw another */
        }
        if (rc) {
                shoal_fab_log_err(f->ifname, "fi_mr_reg", rc);
                return rc;
        }
        if (pins)
                atomic_fetch_add(&pinned_bytes, len);
        return 0;
}

void shoal_fab_mr_close(struct shoal_fab *f, struct fid_mr *mr, size_t len)
{
        if (!mr)
                return;
        fi_close(&mr->fid);
        if (pins_memory(f))
                atomic_fetch_sub(&pinned_bytes, len);
}

size_t shoal_fab_pinned(void)
{
        return atomic_load(&pinned_bytes);
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

static int fab_cq_err(struct fid_cq *cq, const char *place, void **ctx)
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

int shoal_fab_domain_open(struct shoal_fab *f, struct fid_domain **dom)
{
        int rc = fi_domain(f->fabric, f->info, dom, NULL);
        if (rc) {
                shoal_fab_log_err(f->ifname, "fi_domain", rc);
                *dom = NULL;
        }
        return rc;
}

int shoal_fab_slots_open(struct shoal_fab *f, struct fid_domain *dom, unsigned n,
                         struct shoal_fab_slots *s)
{
        memset(s, 0, sizeof(*s));
        /* Whole pages of its own (mmap): MADV_DONTFORK at registration then touches nothing
         * else, and nothing of it returns to the heap with the flag set. */
        size_t len = (size_t)n * SHOAL_FAB_MSG_SLOT;
        s->len = (len + 4095) / 4096 * 4096;
        s->mem = mmap(NULL, s->len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (s->mem == MAP_FAILED) {
                s->mem = NULL;
                return -ENOMEM;
        }
        shoal_mapped_fresh(s->mem, s->len);
        s->n = n;
        int rc = shoal_fab_mr_reg_dom(f, dom, s->mem, s->len, FI_SEND | FI_RECV, true, &s->mr);
        if (rc)
                return rc;
        s->desc = shoal_fab_desc(f, s->mr);
        return 0;
}

char *shoal_fab_slot(const struct shoal_fab_slots *s, unsigned i)
{
        return s->mem + (size_t)i * SHOAL_FAB_MSG_SLOT;
}

void shoal_fab_slots_close(struct shoal_fab *f, struct shoal_fab_slots *s)
{
        shoal_fab_mr_close(f, s->mr, s->len);
        if (s->mem)
                munmap(s->mem, s->len);
        memset(s, 0, sizeof(*s));
}

int shoal_fab_ep_create(struct fid_domain *dom, struct fi_info *info, size_t rx, size_t tx,
                        void *ctx, struct fid_ep **ep)
{
        /* The queues hold what we post and the CQ all of it: verbs reserves rx_attr->size CQ
         * entries for receives at bind time (and reserves none, with a warning, when the CQ is
         * short of them: then sends can overrun the CQ, which kills the QP); its default
         * receive queue (384) is larger than we ever post. */
        if (!rx || !tx)
                return -EINVAL;
        if (info->rx_attr)
                info->rx_attr->size = SHOAL_MIN(info->rx_attr->size, rx);
        if (info->tx_attr)
                info->tx_attr->size = SHOAL_MIN(info->tx_attr->size, tx);
        int rc = fi_endpoint(dom, info, ep, ctx);
        if (rc) {
                *ep = NULL;
                char msg[400];
                bool pins = info->domain_attr && (info->domain_attr->mr_mode & FI_MR_ALLOCATED) &&
                            !shoal_config_env()->fi_verbs_use_odp;
                if (shoal_fab_memlock_hint(rc, pins, "fi_endpoint", msg, sizeof(msg)))
                        log_ratelimited(SHOAL_LOG_WARN, "rdma", "%s", msg);
        }
        return rc;
}

int shoal_fab_ep_bind(struct fid_ep *ep, struct fid_eq *eq, struct fid_cq *cq, const char **call)
{
        int rc;
        *call = "fi_ep_bind(eq)";
        if ((rc = fi_ep_bind(ep, &eq->fid, 0)))
                return rc;
        *call = "fi_ep_bind(cq)";
        if ((rc = fi_ep_bind(ep, &cq->fid, FI_TRANSMIT | FI_RECV | FI_SELECTIVE_COMPLETION)))
                return rc;
        *call = "fi_enable";
        return fi_enable(ep);
}

int shoal_fab_post_rx(struct fid_ep *ep, const char *peer, void *buf, void *desc,
                      struct shoal_fab_op *op)
{
        struct iovec iov = {.iov_base = buf, .iov_len = SHOAL_FAB_MSG_SLOT};
        struct fi_msg msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .context = &op->ctx};
        ssize_t rc = fi_recvmsg(ep, &msg, FI_COMPLETION);
        if (rc && rc != -FI_EAGAIN)
                shoal_fab_log_err(peer, "fi_recv", (int)rc);
        return (int)rc;
}

int shoal_fab_post_send(struct fid_ep *ep, const char *peer, const void *buf, size_t len,
                        void *desc, struct shoal_fab_op *op)
{
        struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
        struct fi_msg msg = {.msg_iov = &iov, .desc = &desc, .iov_count = 1, .context = &op->ctx};
        ssize_t rc = fi_sendmsg(ep, &msg, FI_COMPLETION);
        if (rc && rc != -FI_EAGAIN)
                shoal_fab_log_err(peer, "fi_send", (int)rc);
        return (int)rc;
}

int shoal_fab_post_write(struct fid_ep *ep, const char *peer, const void *buf, size_t len,
                         void *desc, uint64_t raddr, uint64_t rkey, struct shoal_fab_op *op)
{
        struct iovec iov = {.iov_base = (void *)buf, .iov_len = len};
        struct fi_rma_iov rma = {.addr = raddr, .len = len, .key = rkey};
        struct fi_msg_rma msg = {.msg_iov = &iov,
                                 .desc = &desc,
                                 .iov_count = 1,
                                 .rma_iov = &rma,
                                 .rma_iov_count = 1,
                                 .context = &op->ctx};
        /* No FI_COMPLETION: the send that follows on this endpoint stands for it. */
        ssize_t rc = fi_writemsg(ep, &msg, FI_MORE);
        if (rc && rc != -FI_EAGAIN)
                shoal_fab_log_err(peer, "fi_write", (int)rc);
        return (int)rc;
}

/* Reads up to COUNT completions of CQ into E. Returns their number, 0 when none is queued,
 * -FI_EAVAIL after reading one error entry (logged unless FI_ECANCELED, with PLACE): its op
 * context in *ERR_CTX (NULL when unknown) and its positive error code in *ERR; or another
 * negative error (logged). */
static ssize_t cq_next(struct fid_cq *cq, const char *place, struct fi_cq_msg_entry *e,
                       size_t count, void **err_ctx, int *err)
{
        ssize_t n = fi_cq_read(cq, e, count);
        if (n == -FI_EAGAIN)
                return 0;
        if (n == -FI_EAVAIL) {
                *err = fab_cq_err(cq, place, err_ctx);
                return -FI_EAVAIL;
        }
        if (n < 0)
                shoal_fab_log_err(place, "fi_cq_read", (int)n);
        return n;
}

bool shoal_fab_cq_drain(struct fid_cq *cq, const char *place, int budget, shoal_fab_done_fn done,
                        uint64_t now)
{
        struct fi_cq_msg_entry e[32];
        for (int got = 0; got < budget;) {
                void *ctx = NULL;
                int err = 0;
                ssize_t n = cq_next(cq, place, e, sizeof(e) / sizeof(e[0]), &ctx, &err);
                if (n == -FI_EAVAIL) {
                        if (ctx)
                                done(ctx, 0, err, now);
                        got++;
                        continue;
                }
                if (n <= 0)
                        return false;
                for (ssize_t i = 0; i < n; i++)
                        done(e[i].op_context, e[i].len, 0, now);
                got += (int)n;
        }
        return true;
}

int shoal_fab_eq_next(struct fid_eq *eq, const char *place, struct shoal_fab_event *ev)
{
        struct fi_eq_cm_entry entry;
        memset(ev, 0, sizeof(*ev));
        memset(&entry, 0, sizeof(entry));
        ssize_t n = fi_eq_read(eq, &ev->event, &entry, sizeof(entry), 0);
        if (n == -FI_EAGAIN)
                return 0;
        if (n == -FI_EAVAIL) {
                struct fi_eq_err_entry e;
                memset(&e, 0, sizeof(e));
                n = fi_eq_readerr(eq, &e, 0);
                if (n != (ssize_t)sizeof(e)) {
                        shoal_fab_log_err(place, "fi_eq_readerr", (int)n);
                        return n < 0 ? (int)n : -FI_EOTHER;
                }
                char buf[128] = "";
                const char *pe = fi_eq_strerror(eq, e.prov_errno, e.err_data, buf, sizeof(buf));
                snprintf(ev->msg, sizeof(ev->msg), "%s (%d)%s%s", fi_strerror(e.err), e.err,
                         pe && *pe ? ", " : "", pe ? pe : "");
                ev->event = 0;
                ev->err = e.err ? e.err : FI_EOTHER;
                ev->ctx = e.fid ? e.fid->context : e.context;
                return 1;
        }
        if (n < 0) {
                shoal_fab_log_err(place, "fi_eq_read", (int)n);
                return (int)n;
        }
        if (n >= (ssize_t)offsetof(struct fi_eq_cm_entry, info)) {
                ev->ctx = entry.fid ? entry.fid->context : NULL;
                if (n >= (ssize_t)sizeof(entry))
                        ev->info = entry.info;
        }
        return 1;
}

bool shoal_fab_trywait(struct shoal_fab *f, struct fid *fid)
{
        return fi_trywait(f->fabric, &fid, 1) == 0;
}

void shoal_fab_ep_shutdown(struct fid_ep *ep, const char *peer)
{
        if (!ep)
                return;
        int rc = fi_shutdown(ep, 0);
        if (rc && rc != -FI_ENOTCONN && rc != -FI_EINVAL && rc != -FI_EOPBADSTATE)
                shoal_fab_log_err(peer, "fi_shutdown", rc);
}
