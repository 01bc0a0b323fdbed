/* libshoal internals shared by its files (the public API is include/shoal/shoal.h). */
#ifndef SHOAL_LIB_LIB_H
#define SHOAL_LIB_LIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "client/node.h"

/* Library settings by id; options.c's table gives each its name and parser. */
enum lib_opt {
        LOPT_META,
        LOPT_CACHE_GROUP,
        LOPT_CACHE_DIR,
        LOPT_CACHE_SIZE,
        LOPT_FREE_SPACE_RATIO,
        LOPT_BLOCK_SIZE,
        LOPT_ENDPOINT,
        LOPT_USE_IORPC,
        LOPT_RDMA_NETWORK,
        LOPT_RDMA_PROVIDER,
        LOPT_BUFFER_SIZE,
        LOPT_MAX_DOWNLOADS,
        LOPT_PREFETCH,
        LOPT_GROUP_SECRET_FILE,
        LOPT_METRICS,
        LOPT_LOG_LEVEL,
        LOPT_LOG_FILE,
        LOPT__COUNT
};

struct shoal_options {
        char *val[LOPT__COUNT]; /* as given (checked), or NULL for the default */
        unsigned char *secret;  /* from shoal_options_set_secret or the secret file */
        size_t secret_len;
};

/* Everything a client needs to start (and, in a forked child, restart) its node: the node
 * configuration and the strings it points into, owned here. */
struct lib_config {
        struct shoal_node_config node;
        char *strs[LOPT__COUNT + 2]; /* owned copies behind node's pointers */
        uint8_t *secret;             /* a copy of the secret's bytes, or NULL */
        size_t secret_len;
        int log_level;
        char *log_file;
};

/* Builds CFG from STORAGE and O (NULL: defaults); every value was checked when set, the rest is
 * checked here. Returns 0 or -EINVAL/-ENOMEM with the message set (lib_fail). */
int lib_config_build(struct lib_config *cfg, const char *storage, const struct shoal_options *o);
void lib_config_free(struct lib_config *cfg);

/* ---- client.c's hooks for write.c ---- */

struct shoal_client;

/* C's node for this process (started anew in a forked child); NULL with *RC and the message set
 * when that failed. Call inside the fork gate. */
struct shoal_node *lib_client_node(struct shoal_client *c, int *rc);
/* Counts an open file of C (shoal_client_close refuses while any is open) and returns the fork
 * generation it belongs to; lib_file_closed with that generation uncounts it. Inside the gate. */
unsigned lib_file_opened(struct shoal_client *c);
void lib_file_closed(struct shoal_client *c, unsigned gen);
/* The current fork generation (a handle from an older one belongs to the parent). */
unsigned lib_fork_gen(void);

/* Records the calling thread's error message (printf-style) and returns RC (a negative errno). */
int lib_fail(int rc, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

#endif
