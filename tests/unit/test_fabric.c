/* The libfabric wrapper (src/net/fabric.c), issue 14 findings 2, 7, 8, 9, 10:
 * - domain choice over scripted fi_getinfo answers and a scripted sysfs tree: verbs domains with
 *   and without a sysfs device link, bonds and VLANs (links through lower_*), -xrc and -dgram
 *   domains, a provider that did not filter by address, the mlx5_1 / mlx5_10 prefix trap;
 * - the real tcp provider on lo: FI_ORDER_SAW kept, MR cache off as libfabric sees it, random
 *   keys, MADV_DONTFORK (a forked child does not have registered pages), queue sizes cut to
 *   what the CQ holds;
 * - RLIMIT_NOFILE / RLIMIT_MEMLOCK raised, the fd budget, the memlock check and its message. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "net/fabric.h"

static char sysfs[256];

/* ---- scripted fi_getinfo answers --------------------------------------------------------------
 */

/* Appends an entry of provider PROV for domain DOM to *LIST: endpoint type TYPE, protocol PROTO,
 * source address SRC_IP (NULL: none). */
static void add(struct fi_info **list, const char *prov, const char *dom, enum fi_ep_type type,
                uint32_t proto, const char *src_ip)
{
        struct fi_info *i = fi_allocinfo();
        assert_non_null(i);
        i->fabric_attr->prov_name = strdup(prov);
        i->domain_attr->name = strdup(dom);
        i->ep_attr->type = type;
        i->ep_attr->protocol = proto;
        if (src_ip) {
                struct sockaddr_in *sa = calloc(1, sizeof(*sa));
                assert_non_null(sa);
                sa->sin_family = AF_INET;
                assert_int_equal(inet_pton(AF_INET, src_ip, &sa->sin_addr), 1);
                i->src_addr = sa;
                i->src_addrlen = sizeof(*sa);
        }
        struct fi_info **pp = list;
        while (*pp)
                pp = &(*pp)->next;
        *pp = i;
}

#define IP "10.9.8.7"

/* The domain picked for IFNAME from LIST ("" when refused), and how. */
static const char *pick(struct fi_info *list, const char *ifname, enum shoal_fab_pick_by *by,
                        char *why, size_t whylen)
{
        why[0] = '\0';
        const struct fi_info *i = shoal_fab_pick(list, ifname, IP, sysfs, by, why, whylen);
        if (!i) {
                assert_int_equal(*by, SHOAL_FAB_BY_NONE);
                assert_true(why[0] != '\0');
                return "";
        }
        return i->domain_attr->name;
}

static void mkdirs(const char *rel)
{
        char path[512], *p;
        snprintf(path, sizeof(path), "%s/%s", sysfs, rel);
        for (p = path + strlen(sysfs) + 1; (p = strchr(p, '/')); p++) {
                *p = '\0';
                mkdir(path, 0755);
                *p = '/';
        }
        assert_true(mkdir(path, 0755) == 0 || errno == EEXIST);
}

static void link_lower(const char *upper, const char *lower)
{
        char path[512], target[64];
        snprintf(path, sizeof(path), "%s/%s/lower_%s", sysfs, upper, lower);
        snprintf(target, sizeof(target), "../%s", lower);
        assert_int_equal(symlink(target, path), 0);
}

/* A /sys/class/net as the kernel shows it for: ib0 on mlx5_0; bond0 over eth2 and eth3 with
 * RoCE LAG (each slave shows mlx5_bond_0); eth0.100, a VLAN of eth0 on mlx5_1; ens1 on mlx5_1
 * too (the prefix trap); bond1 with no device links at all (no bonding module here, or a
 * driver that shows none); lo. */
static int setup(void **state)
{
        snprintf(sysfs, sizeof(sysfs), "/tmp/shoal-fabric-XXXXXX");
        if (!mkdtemp(sysfs))
                return -1;
        mkdirs("ib0/device/infiniband/mlx5_0");
        mkdirs("eth2/device/infiniband/mlx5_bond_0");
        mkdirs("eth3/device/infiniband/mlx5_bond_0");
        mkdirs("bond0");
        link_lower("bond0", "eth2");
        link_lower("bond0", "eth3");
        mkdirs("eth0/device/infiniband/mlx5_1");
        mkdirs("eth0.100");
        link_lower("eth0.100", "eth0");
        mkdirs("ens1/device/infiniband/mlx5_1");
        mkdirs("bond1");
        mkdirs("lo");
        return 0;
}

static int teardown(void **state)
{
        char cmd[300];
        snprintf(cmd, sizeof(cmd), "rm -rf '%s'", sysfs);
        return system(cmd) == 0 ? 0 : -1;
}

static void test_pick_verbs_sysfs(void **state)
{
        struct fi_info *l = NULL;
        enum shoal_fab_pick_by by;
        char why[400];
        /* verbs lists the XRC flavour of the same device too. */
        add(&l, "verbs", "mlx5_0-xrc", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_XRC, IP);
        add(&l, "verbs", "mlx5_0", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        assert_string_equal(pick(l, "ib0", &by, why, sizeof(why)), "mlx5_0");
        assert_int_equal(by, SHOAL_FAB_BY_SYSFS);
        fi_freeinfo(l);
}

static void test_pick_bond_and_vlan(void **state)
{
        struct fi_info *l = NULL;
        enum shoal_fab_pick_by by;
        char why[400];
        /* An unfiltered list: the bond's device is found through its slaves. */
        add(&l, "verbs", "mlx5_0", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        add(&l, "verbs", "mlx5_bond_0", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        assert_string_equal(pick(l, "bond0", &by, why, sizeof(why)), "mlx5_bond_0");
        assert_int_equal(by, SHOAL_FAB_BY_SYSFS);
        fi_freeinfo(l);

        l = NULL;
        add(&l, "verbs", "mlx5_1", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        assert_string_equal(pick(l, "eth0.100", &by, why, sizeof(why)), "mlx5_1");
        assert_int_equal(by, SHOAL_FAB_BY_SYSFS);
        fi_freeinfo(l);
}

/* The old code refused these: no /sys/class/net/IF/device/infiniband. verbs filtered its list by
 * the device rdma_cm bound the address to, so the one domain left is the interface's. */
static void test_pick_no_sysfs_link(void **state)
{
        struct fi_info *l = NULL;
        enum shoal_fab_pick_by by;
        char why[400];
        add(&l, "verbs", "mlx5_bond_0-xrc", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_XRC, IP);
        add(&l, "verbs", "mlx5_bond_0", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        assert_string_equal(pick(l, "bond1", &by, why, sizeof(why)), "mlx5_bond_0");
        assert_int_equal(by, SHOAL_FAB_BY_SOURCE);
        /* Not even a folder for the interface. */
        assert_string_equal(pick(l, "vlan7", &by, why, sizeof(why)), "mlx5_bond_0");
        assert_int_equal(by, SHOAL_FAB_BY_SOURCE);
        fi_freeinfo(l);
}

/* Several devices and nothing that ties one to the interface: the provider did not filter by
 * the address; guessing could put traffic on the wrong port. */
static void test_pick_ambiguous(void **state)
{
        struct fi_info *l = NULL;
        enum shoal_fab_pick_by by;
        char why[400];
        add(&l, "verbs", "mlx5_0", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        add(&l, "verbs", "mlx5_1", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        assert_string_equal(pick(l, "bond1", &by, why, sizeof(why)), "");
        assert_non_null(strstr(why, "mlx5_0, mlx5_1"));
        assert_non_null(strstr(why, "bond1"));
        /* ... but a link in sysfs settles it. */
        assert_string_equal(pick(l, "ib0", &by, why, sizeof(why)), "mlx5_0");
        fi_freeinfo(l);
}

static void test_pick_xrc_dgram_only(void **state)
{
        struct fi_info *l = NULL;
        enum shoal_fab_pick_by by;
        char why[400];
        add(&l, "verbs", "mlx5_0-xrc", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_XRC, IP);
        add(&l, "verbs", "mlx5_0-dgram", FI_EP_DGRAM, FI_PROTO_IB_UD, IP);
        /* A provider naming an XRC domain without the protocol. */
        add(&l, "verbs", "mlx5_1-xrc", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        assert_string_equal(pick(l, "ib0", &by, why, sizeof(why)), "");
        assert_non_null(strstr(why, "skipped: mlx5_0-xrc, mlx5_1-xrc"));
        fi_freeinfo(l);
}

/* strncmp-style matching (libfabric 1.17's own filter) takes mlx5_10 for mlx5_1. */
static void test_pick_prefix_trap(void **state)
{
        struct fi_info *l = NULL;
        enum shoal_fab_pick_by by;
        char why[400];
        add(&l, "verbs", "mlx5_10", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        add(&l, "verbs", "mlx5_1", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        assert_string_equal(pick(l, "ens1", &by, why, sizeof(why)), "mlx5_1");
        assert_int_equal(by, SHOAL_FAB_BY_SYSFS);
        fi_freeinfo(l);
}

static void test_pick_tcp(void **state)
{
        struct fi_info *l = NULL;
        enum shoal_fab_pick_by by;
        char why[400];
        add(&l, "tcp", "lo", FI_EP_MSG, FI_PROTO_SOCK_TCP, IP);
        assert_string_equal(pick(l, "lo", &by, why, sizeof(why)), "lo");
        assert_int_equal(by, SHOAL_FAB_BY_NAME);
        fi_freeinfo(l);

        /* Sourced at another address: never ours, even by name. */
        l = NULL;
        add(&l, "tcp", "lo", FI_EP_MSG, FI_PROTO_SOCK_TCP, "127.0.0.1");
        assert_string_equal(pick(l, "lo", &by, why, sizeof(why)), "");
        fi_freeinfo(l);

        /* Names from the provider never leave the sysfs folder. */
        l = NULL;
        add(&l, "verbs", "../../etc", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, IP);
        add(&l, "verbs", "../../etc", FI_EP_MSG, FI_PROTO_RDMA_CM_IB_RC, NULL);
        assert_string_equal(pick(l, "..", &by, why, sizeof(why)), "../../etc");
        assert_int_equal(by, SHOAL_FAB_BY_SOURCE);
        fi_freeinfo(l);
        assert_null(shoal_fab_pick(NULL, "lo", IP, sysfs, &by, why, sizeof(why)));
}

/* ---- the real tcp provider on lo ---------------------------------------------------------- */

static void open_lo(struct shoal_fab *f)
{
        char err[512] = "";
        int rc = shoal_fab_open(f, "tcp", "lo", err, sizeof(err));
        if (rc)
                fail_msg("shoal_fab_open(tcp, lo): %d %s", rc, err);
}

static void test_open_lo(void **state)
{
        /* Finding 9: asked for, so a provider that cannot keep it is not offered at all. */
        struct fi_info *hints = shoal_fab_hints("verbs");
        assert_non_null(hints);
        assert_true(hints->tx_attr->msg_order & FI_ORDER_SAW);
        assert_true(hints->rx_attr->msg_order & FI_ORDER_SAW);
        assert_int_equal(hints->ep_attr->type, FI_EP_MSG);
        assert_string_equal(hints->fabric_attr->prov_name, "verbs");
        fi_freeinfo(hints);

        struct shoal_fab f;
        open_lo(&f);
        assert_string_equal(f.info->domain_attr->name, "lo");
        assert_true(f.info->tx_attr->msg_order & FI_ORDER_SAW);
        /* libfabric read its parameters after fabric.c turned the MR cache off. */
        struct fi_param *params;
        int n = 0;
        assert_int_equal(fi_getparams(&params, &n), 0);
        const char *v = NULL;
        for (int i = 0; i < n; i++)
                if (!strcmp(params[i].name, "FI_MR_CACHE_MAX_COUNT"))
                        v = params[i].value;
        assert_non_null(v);
        assert_string_equal(v, "0");
        fi_freeparams(params);
        shoal_fab_close(&f);

        char err[512];
        assert_int_equal(shoal_fab_open(&f, "tcp", "nosuch0", err, sizeof(err)), -ENODEV);
        assert_non_null(strstr(err, "no such interface"));
        shoal_fab_close(&f);
}

/* Keys the peer must not guess: random, not a counter, under a provider that takes requests. */
static void test_random_keys(void **state)
{
        struct shoal_fab f;
        open_lo(&f);
        if (f.mr_mode & FI_MR_PROV_KEY)
                fail_msg("tcp picks its own keys; this test needs requested keys");
        enum {
                N = 8
        };
        struct fid_mr *mr[N];
        uint64_t key[N];
        char *buf =
                mmap(NULL, N * 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(buf != MAP_FAILED);
        bool big = false, consecutive = true;
        for (int i = 0; i < N; i++) {
                assert_int_equal(
                        shoal_fab_mr_reg(&f, buf + i * 4096, 4096, FI_REMOTE_WRITE, &mr[i]), 0);
                key[i] = fi_mr_key(mr[i]);
                big |= key[i] > UINT32_MAX;
                for (int k = 0; k < i; k++)
                        assert_true(key[k] != key[i]);
                if (i && key[i] != key[i - 1] + 1)
                        consecutive = false;
        }
        assert_true(big);
        assert_false(consecutive);
        for (int i = 0; i < N; i++)
                shoal_fab_mr_close(&f, mr[i], 4096);
        assert_int_equal(shoal_fab_pinned(), 0); /* tcp pins nothing */
        munmap(buf, N * 4096);
        shoal_fab_close(&f);
}

/* In a forked child, whether [P, P+1) is mapped: /proc/self/maps read with plain syscalls
 * (the parent may have threads; the child stays async-signal-safe). Exits 1 mapped, 0 not. */
static void child_check_mapped(const void *p)
{
        static char maps[1 << 20];
        int fd = open("/proc/self/maps", O_RDONLY);
        size_t n = 0;
        ssize_t r;
        if (fd < 0)
                _exit(2);
        while (n < sizeof(maps) - 1 && (r = read(fd, maps + n, sizeof(maps) - 1 - n)) > 0)
                n += (size_t)r;
        close(fd);
        maps[n] = '\0';
        uintptr_t a = (uintptr_t)p;
        for (char *line = maps; *line;) {
                char *end;
                uintptr_t lo = strtoul(line, &end, 16);
                uintptr_t hi = strtoul(end + 1, NULL, 16);
                if (a >= lo && a < hi)
                        _exit(1);
                char *nl = strchr(line, '\n');
                if (!nl)
                        break;
                line = nl + 1;
        }
        _exit(0);
}

static int mapped_in_child(const void *p)
{
        pid_t pid = fork();
        assert_true(pid >= 0);
        if (!pid)
                child_check_mapped(p);
        int st;
        assert_int_equal(waitpid(pid, &st, 0), pid);
        assert_true(WIFEXITED(st));
        return WEXITSTATUS(st);
}

/* Finding 8: the pages the NIC was given stay the parent's alone; a fork (libfuse runs
 * fusermount3 after the reader pool was registered) does not share them copy-on-write. */
static void test_dontfork(void **state)
{
        struct shoal_fab f;
        open_lo(&f);
        size_t len = 16 * 4096;
        char *reg = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        char *other = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        assert_true(reg != MAP_FAILED && other != MAP_FAILED);
        memset(reg, 1, len);
        memset(other, 1, len);
        assert_int_equal(mapped_in_child(reg), 1); /* the check sees ordinary memory */
        struct fid_mr *mr;
        assert_int_equal(shoal_fab_mr_reg(&f, reg, len, FI_RECV | FI_REMOTE_WRITE, &mr), 0);
        assert_int_equal(mapped_in_child(reg), 0);
        assert_int_equal(mapped_in_child(reg + len - 1), 0);
        assert_int_equal(mapped_in_child(other), 1);
        shoal_fab_mr_close(&f, mr, len);
        munmap(reg, len);
        munmap(other, len);
        shoal_fab_close(&f);
}

/* Finding 10: the endpoint's queues are cut to what the caller posts (verbs reserves
 * rx_attr->size CQ entries at bind, none when the CQ is smaller); message slots are pages of
 * their own that a child does not get. */
static void test_ep_queue_sizes(void **state)
{
        struct shoal_fab f;
        open_lo(&f);
        struct shoal_fab_slots s;
        struct fi_info *info = fi_dupinfo(f.info);
        assert_non_null(info);
        info->rx_attr->size = 384; /* verbs' default receive queue */
        info->tx_attr->size = 384;
        assert_int_equal(shoal_fab_slots_open(&f, NULL, 12, &s), 0);
        assert_int_equal(s.len % 4096, 0);
        assert_true(s.len >= 12 * SHOAL_FAB_MSG_SLOT);
        assert_ptr_equal(shoal_fab_slot(&s, 1), s.mem + SHOAL_FAB_MSG_SLOT);
        assert_int_equal(mapped_in_child(s.mem), 0);
        struct fid_ep *ep = NULL;
        assert_int_equal(shoal_fab_ep_create(f.domain, info, 0, 16, NULL, &ep), -EINVAL);
        assert_int_equal(shoal_fab_ep_create(f.domain, info, 8, 16, NULL, &ep), 0);
        assert_int_equal(info->rx_attr->size, 8);
        assert_int_equal(info->tx_attr->size, 16);
        /* Never more than offered. */
        struct fi_info *small = fi_dupinfo(f.info);
        small->rx_attr->size = 4;
        small->tx_attr->size = 4;
        struct fid_ep *ep2 = NULL;
        assert_int_equal(shoal_fab_ep_create(f.domain, small, 8, 16, NULL, &ep2), 0);
        assert_int_equal(small->rx_attr->size, 4);
        assert_int_equal(small->tx_attr->size, 4);
        fi_close(&ep2->fid);
        fi_freeinfo(small);
        /* Bound to an EQ and a CQ it can be enabled and take receives. */
        struct fid_eq *eq;
        struct fid_cq *cq;
        int eq_fd, cq_fd;
        const char *call = "";
        assert_int_equal(shoal_fab_eq_open(&f, &eq, &eq_fd), 0);
        assert_int_equal(shoal_fab_cq_open(&f, 24, &cq, &cq_fd), 0);
        assert_int_equal(shoal_fab_ep_bind(ep, eq, cq, &call), 0);
        struct shoal_fab_op op = {.kind = SHOAL_FAB_OP_RX};
        assert_int_equal(shoal_fab_post_rx(ep, "test", shoal_fab_slot(&s, 0), s.desc, &op), 0);
        fi_close(&ep->fid);
        fi_close(&cq->fid);
        fi_close(&eq->fid);
        shoal_fab_slots_close(&f, &s);
        shoal_fab_slots_close(&f, &s); /* twice: harmless */
        fi_freeinfo(info);
        shoal_fab_close(&f);
}

/* ---- a key is worth nothing on another domain's connections (issue 11 finding 6) ------------ */

/* The queues and endpoints of the test: a server (one domain) and a client with two. */
struct iso {
        struct fid_eq *seq, *ceq;
        struct fid_cq *scq, *ccq[2];
        struct fid_ep *se[2], *ce[2];
        int write_ok, write_err;
};

/* One round of progress on every queue of T (progress is manual on tcp). */
static void iso_poll_once(struct iso *t)
{
        struct fi_cq_msg_entry e[8];
        ssize_t n;
        while ((n = fi_cq_read(t->scq, e, 8)) > 0)
                t->write_ok += (int)n;
        if (n == -FI_EAVAIL) {
                struct fi_cq_err_entry ee;
                memset(&ee, 0, sizeof(ee));
                if (fi_cq_readerr(t->scq, &ee, 0) == 1)
                        t->write_err++;
        }
        for (int c = 0; c < 2 && t->ccq[c]; c++) {
                while (fi_cq_read(t->ccq[c], e, 8) > 0)
                        ;
                struct fi_cq_err_entry ee;
                memset(&ee, 0, sizeof(ee));
                fi_cq_readerr(t->ccq[c], &ee, 0);
        }
}

/* Progress until the server's write completed (or failed), 5 s at most. */
static void iso_wait_write(struct iso *t)
{
        for (int k = 0; k < 5000 && t->write_ok + t->write_err == 0; k++) {
                iso_poll_once(t);
                usleep(1000);
        }
}

/* Waits for a connection request on EQ (the server's); returns its info. */
static struct fi_info *iso_event(struct iso *t, struct fid_eq *eq, uint32_t want)
{
        for (int k = 0; k < 5000; k++) {
                uint32_t ev;
                struct fi_eq_cm_entry entry;
                ssize_t n = fi_eq_read(eq, &ev, &entry, sizeof(entry), 0);
                if (n > 0 && ev == want)
                        return entry.info;
                uint32_t cev;
                struct fi_eq_cm_entry centry; /* the client side's connect progresses here */
                fi_eq_read(t->ceq, &cev, &centry, sizeof(centry), 0);
                iso_poll_once(t);
                usleep(1000);
        }
        fail_msg("no event %u", want);
        return NULL;
}

/* Reads both EQs until each side reported FI_CONNECTED. */
static void iso_connected(struct iso *t)
{
        bool srv = false, cli = false;
        for (int k = 0; k < 5000 && !(srv && cli); k++) {
                uint32_t ev;
                struct fi_eq_cm_entry entry;
                if (fi_eq_read(t->seq, &ev, &entry, sizeof(entry), 0) > 0 && ev == FI_CONNECTED)
                        srv = true;
                if (fi_eq_read(t->ceq, &ev, &entry, sizeof(entry), 0) > 0 && ev == FI_CONNECTED)
                        cli = true;
                iso_poll_once(t);
                usleep(1000);
        }
        assert_true(srv && cli);
}

/* A client with one domain per member: a buffer registered for remote writes on the domain of
 * member A's connection takes A's write, and the same address and key sent over the connection of
 * another domain (member B) is refused, the buffer untouched. */
static void test_domain_isolation(void **state)
{
        struct shoal_fab f;
        open_lo(&f);
        struct iso t;
        memset(&t, 0, sizeof(t));
        int fd;
        assert_int_equal(shoal_fab_eq_open(&f, &t.seq, &fd), 0);
        assert_int_equal(shoal_fab_eq_open(&f, &t.ceq, &fd), 0);
        assert_int_equal(shoal_fab_cq_open(&f, 64, &t.scq, &fd), 0);
        struct fid_pep *pep;
        assert_int_equal(fi_passive_ep(f.fabric, f.info, &pep, NULL), 0);
        assert_int_equal(fi_pep_bind(pep, &t.seq->fid, 0), 0);
        assert_int_equal(fi_listen(pep), 0);
        struct sockaddr_in sa;
        size_t sl = sizeof(sa);
        assert_int_equal(fi_getname(&pep->fid, &sa, &sl), 0);
        struct fid_domain *dom[2];
        for (int k = 0; k < 2; k++) {
                assert_int_equal(shoal_fab_domain_open(&f, &dom[k]), 0);
                struct fi_cq_attr ca = {.size = 64, .format = FI_CQ_FORMAT_MSG};
                assert_int_equal(fi_cq_open(dom[k], &ca, &t.ccq[k], NULL), 0);
                struct fi_info *info = fi_dupinfo(f.info);
                free(info->dest_addr);
                info->dest_addr = malloc(sizeof(sa));
                memcpy(info->dest_addr, &sa, sizeof(sa));
                info->dest_addrlen = sizeof(sa);
                const char *call;
                assert_int_equal(shoal_fab_ep_create(dom[k], info, 4, 4, NULL, &t.ce[k]), 0);
                assert_int_equal(shoal_fab_ep_bind(t.ce[k], t.ceq, t.ccq[k], &call), 0);
                assert_int_equal(fi_connect(t.ce[k], &sa, NULL, 0), 0);
                struct fi_info *req = iso_event(&t, t.seq, FI_CONNREQ);
                assert_int_equal(shoal_fab_ep_create(f.domain, req, 4, 4, NULL, &t.se[k]), 0);
                assert_int_equal(fi_ep_bind(t.se[k], &t.seq->fid, 0), 0);
                assert_int_equal(fi_ep_bind(t.se[k], &t.scq->fid, FI_TRANSMIT | FI_RECV), 0);
                assert_int_equal(fi_enable(t.se[k]), 0);
                assert_int_equal(fi_accept(t.se[k], NULL, 0), 0);
                fi_freeinfo(req);
                iso_connected(&t);
                fi_freeinfo(info);
        }
        static char target[4096] __attribute__((aligned(4096)));
        static char src[4096];
        struct fid_mr *mr;
        assert_int_equal(shoal_fab_mr_reg_dom(&f, dom[0], target, sizeof(target), FI_REMOTE_WRITE,
                                              false, &mr),
                         0);
        uint64_t raddr = shoal_fab_rma_addr(&f, target, target), rkey = fi_mr_key(mr);
        struct iovec iov = {.iov_base = src, .iov_len = sizeof(src)};
        struct fi_rma_iov rma = {.addr = raddr, .len = sizeof(src), .key = rkey};
        void *desc = NULL;
        struct fi_context2 ctx;
        struct fi_msg_rma m = {.msg_iov = &iov,
                               .desc = &desc,
                               .iov_count = 1,
                               .rma_iov = &rma,
                               .rma_iov_count = 1,
                               .context = &ctx};
        /* member A, over the connection of the domain the buffer is registered on */
        memset(src, 'A', sizeof(src));
        assert_int_equal(fi_writemsg(t.se[0], &m, FI_DELIVERY_COMPLETE | FI_COMPLETION), 0);
        iso_wait_write(&t);
        assert_int_equal(t.write_ok, 1);
        assert_int_equal(target[0], 'A');
        assert_int_equal(target[sizeof(target) - 1], 'A');
        /* member B, the same address and key over its own connection */
        t.write_ok = t.write_err = 0;
        memset(src, 'B', sizeof(src));
        assert_int_equal(fi_writemsg(t.se[1], &m, FI_DELIVERY_COMPLETE | FI_COMPLETION), 0);
        iso_wait_write(&t);
        assert_int_equal(t.write_ok, 0);
        assert_int_equal(t.write_err, 1);
        for (size_t i = 0; i < sizeof(target); i++)
                assert_int_equal(target[i], 'A');
        shoal_fab_mr_close(&f, mr, sizeof(target));
        for (int k = 0; k < 2; k++) {
                fi_close(&t.ce[k]->fid);
                fi_close(&t.se[k]->fid);
                fi_close(&t.ccq[k]->fid);
                fi_close(&dom[k]->fid);
        }
        fi_close(&pep->fid);
        fi_close(&t.scq->fid);
        fi_close(&t.seq->fid);
        fi_close(&t.ceq->fid);
        shoal_fab_close(&f);
}

/* ---- limits --------------------------------------------------------------------------------- */

static void test_raise_limits(void **state)
{
        struct rlimit fd0, ml0;
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &fd0), 0);
        assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &ml0), 0);
        struct rlimit low = {.rlim_cur = 64, .rlim_max = fd0.rlim_max};
        if (fd0.rlim_max < 64)
                fail_msg("hard RLIMIT_NOFILE below 64");
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
        struct rlimit mlow = {.rlim_cur = 0, .rlim_max = ml0.rlim_max};
        assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &mlow), 0);

        struct shoal_fab_limits l;
        assert_int_equal(shoal_fab_raise_limits(&l), 0);
        struct rlimit fd, ml;
        assert_int_equal(getrlimit(RLIMIT_NOFILE, &fd), 0);
        assert_int_equal(getrlimit(RLIMIT_MEMLOCK, &ml), 0);
        rlim_t want = fd0.rlim_max == RLIM_INFINITY || fd0.rlim_max > SHOAL_FAB_NOFILE_CAP
                              ? SHOAL_FAB_NOFILE_CAP
                              : fd0.rlim_max;
        assert_int_equal(fd.rlim_cur, want);
        assert_int_equal(l.nofile, (size_t)want);
        assert_true(ml.rlim_cur == ml0.rlim_max);
        assert_int_equal(l.memlock,
                         ml0.rlim_max == RLIM_INFINITY ? SIZE_MAX : (size_t)ml0.rlim_max);
        assert_int_equal(setrlimit(RLIMIT_NOFILE, &fd0), 0);
        assert_int_equal(setrlimit(RLIMIT_MEMLOCK, &ml0), 0);
}

static void test_conn_budget(void **state)
{
        struct shoal_fab_limits l = {.nofile = 1024};
        assert_int_equal(shoal_fab_conn_budget(&l, SHOAL_FAB_FD_RESERVE), 0);
        l.nofile = 100;
        assert_int_equal(shoal_fab_conn_budget(&l, SHOAL_FAB_FD_RESERVE), 0);
        l.nofile = SHOAL_FAB_FD_RESERVE + 1024 * SHOAL_FAB_FDS_PER_CONN;
        assert_int_equal(shoal_fab_conn_budget(&l, SHOAL_FAB_FD_RESERVE), 1024);
        l.nofile = SIZE_MAX;
        assert_int_equal(shoal_fab_conn_budget(&l, 0), UINT32_MAX);
}

static void test_memlock_check(void **state)
{
        const size_t mib = 1u << 20;
        char msg[400] = "";
        struct shoal_fab_limits l = {.nofile = 1024, .memlock = 8 * mib};
        assert_int_equal(shoal_fab_memlock_check(&l, 0, 8 * mib, msg, sizeof(msg)), 0);
        assert_int_equal(shoal_fab_memlock_check(&l, 4 * mib, 4 * mib, msg, sizeof(msg)), 0);
        assert_int_equal(shoal_fab_memlock_check(&l, 6 * mib, 4 * mib, msg, sizeof(msg)), -ENOMEM);
        assert_non_null(strstr(msg, "RLIMIT_MEMLOCK (8 MiB)"));
        assert_non_null(strstr(msg, "pin 10 MiB"));
        assert_non_null(strstr(msg, "ulimit -l"));
        /* Already past the limit (someone else pinned): no wrap-around. */
        assert_int_equal(shoal_fab_memlock_check(&l, 9 * mib, 0, msg, sizeof(msg)), -ENOMEM);
        assert_int_equal(shoal_fab_memlock_check(&l, 0, SIZE_MAX, msg, sizeof(msg)), -ENOMEM);
        l.cap_ipc_lock = true;
        assert_int_equal(shoal_fab_memlock_check(&l, 9 * mib, 1u << 30, msg, sizeof(msg)), 0);
        l.cap_ipc_lock = false;
        l.memlock = SIZE_MAX;
        assert_int_equal(shoal_fab_memlock_check(&l, 9 * mib, 1u << 30, msg, sizeof(msg)), 0);
}

/* Issue 32: ENOMEM from CQ or endpoint creation on a pinning provider names RLIMIT_MEMLOCK; the
 * MR-cache environment is read as libfabric reads it; only socket providers are fork-safe. */
static void test_issue32_helpers(void **state)
{
        char msg[400] = "";
        assert_false(shoal_fab_memlock_hint(-FI_ENOMEM, false, "fi_cq_open", msg, sizeof(msg)));
        assert_false(shoal_fab_memlock_hint(-FI_EINVAL, true, "fi_cq_open", msg, sizeof(msg)));
        assert_true(shoal_fab_memlock_hint(-FI_ENOMEM, true, "fi_cq_open", msg, sizeof(msg)));
        assert_non_null(strstr(msg, "fi_cq_open: out of memory"));
        assert_non_null(strstr(msg, "RLIMIT_MEMLOCK"));
        assert_non_null(strstr(msg, "ulimit -l"));
        assert_true(shoal_fab_env_cache_off("0"));
        assert_true(shoal_fab_env_cache_off(""));
        assert_false(shoal_fab_env_cache_off(NULL));
        assert_false(shoal_fab_env_cache_off("1024"));
        assert_true(shoal_fab_fork_safe_provider("tcp"));
        assert_true(shoal_fab_fork_safe_provider("sockets"));
        assert_false(shoal_fab_fork_safe_provider("verbs"));
        assert_false(shoal_fab_fork_safe_provider("efa"));
        char prov[32];
        assert_false(shoal_fab_inherited_devices(prov, sizeof(prov))); /* tcp only, here */
        assert_int_equal(shoal_fab_queue_margin(), 0);                 /* tcp pins nothing */
        assert_true(shoal_fab_libfabric_initialised()); /* the tests above opened it */
        assert_string_equal(shoal_fab_mr_cache_refusal(), "");
}

int main(void)
{
        const struct CMUnitTest tests[] = {
                cmocka_unit_test(test_pick_verbs_sysfs),
                cmocka_unit_test(test_pick_bond_and_vlan),
                cmocka_unit_test(test_pick_no_sysfs_link),
                cmocka_unit_test(test_pick_ambiguous),
                cmocka_unit_test(test_pick_xrc_dgram_only),
                cmocka_unit_test(test_pick_prefix_trap),
                cmocka_unit_test(test_pick_tcp),
                cmocka_unit_test(test_open_lo),
                cmocka_unit_test(test_random_keys),
                cmocka_unit_test(test_dontfork),
                cmocka_unit_test(test_ep_queue_sizes),
                cmocka_unit_test(test_domain_isolation),
                cmocka_unit_test(test_raise_limits),
                cmocka_unit_test(test_conn_budget),
                cmocka_unit_test(test_memlock_check),
                cmocka_unit_test(test_issue32_helpers),
        };
        return cmocka_run_group_tests(tests, setup, teardown);
}
