/* A program that uses libfabric before libshoal, as a PyTorch process does when NCCL's OFI
 * plugin initialised libfabric first (issue 32): then shoal's FI_MR_CACHE_MAX_COUNT=0 comes too
 * late, and a client with --rdma-network must be refused with one line that names the cause and
 * the fix.
 *
 *   mrcache_first first|shoal STORAGE IF PROVIDER
 *
 * "first": fi_getinfo and fi_fabric on PROVIDER (what the other library does), then
 * shoal_client_open with rdma-network IF; "shoal": shoal_client_open only. Prints "opened", or
 * "refused: ERRNO: MESSAGE", and exits 0 either way (the test reads the line); 1 when the
 * program itself could not run. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>

#include "shoal/shoal.h"

static int init_libfabric(const char *provider)
{
        struct fi_info *hints = fi_allocinfo(), *info = NULL;
        struct fid_fabric *fabric = NULL;
        if (!hints)
                return -1;
        hints->ep_attr->type = FI_EP_MSG;
        hints->caps = FI_MSG;
        hints->fabric_attr->prov_name = strdup(provider);
        int rc = fi_getinfo(FI_VERSION(1, 9), NULL, NULL, 0, hints, &info);
        fi_freeinfo(hints);
        if (rc) {
                fprintf(stderr, "fi_getinfo(%s): %s\n", provider, fi_strerror(-rc));
                return -1;
        }
        rc = fi_fabric(info->fabric_attr, &fabric, NULL);
        fi_freeinfo(info);
        if (rc) {
                fprintf(stderr, "fi_fabric(%s): %s\n", provider, fi_strerror(-rc));
                return -1;
        }
        /* the other library keeps its fabric for the life of the process */
        return fi_close(&fabric->fid) ? -1 : 0;
}

int main(int argc, char **argv)
{
        if (argc != 5 || (strcmp(argv[1], "first") && strcmp(argv[1], "shoal"))) {
                fprintf(stderr, "usage: %s first|shoal STORAGE IF PROVIDER\n", argv[0]);
                return 2;
        }
        if (!strcmp(argv[1], "first") && init_libfabric(argv[4]))
                return 1;
        struct shoal_options *o = shoal_options_new();
        if (!o || shoal_options_set(o, "rdma-network", argv[3]) ||
            shoal_options_set(o, "rdma-provider", argv[4])) {
                fprintf(stderr, "options: %s\n", shoal_errmsg());
                return 1;
        }
        struct shoal_client *c = shoal_client_open(argv[2], o);
        int err = errno;
        shoal_options_free(o);
        if (!c) {
                printf("refused: %s: %s\n", strerror(err), shoal_errmsg());
                return 0;
        }
        printf("opened\n");
        return shoal_client_close(c) ? 1 : 0;
}
