/* libshoal internals shared by its files (the public API is include/shoal/shoal.h). */
#ifndef SHOAL_LIB_LIB_H
#define SHOAL_LIB_LIB_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node/node.h"
#include "node/settings.h"

/* The settings behind shoal_options_set (node/settings.h, as for the command line), with the
 * library's own copies of the values they point to. */
struct shoal_options {
        struct shoal_settings set;   /* checked values, pointing into own[] */
        char *own[SHOAL_SET__COUNT]; /* copies of the values given */
};

/* Everything a client needs to start (and, in a forked child, restart) its node: a copy of its
 * options, the node configuration built from them and the log settings, all owned here. Must not
 * move once built: the configuration points into it. */
struct lib_config {
        struct shoal_options opts;
        char *storage;
        struct shoal_node_config node;
        int log_level;
        const char *log_file; /* NULL: stderr */
};

/* Builds CFG from STORAGE and O (NULL: defaults): reads the environment if nothing has yet
 * (common/config.h; a bad variable is an error here, never an exit), copies O and builds the node
 * configuration. Returns 0 or -EINVAL/-ENOMEM with the message set (lib_fail). */
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
