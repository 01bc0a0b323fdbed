/* Settings: the one place where (name, value) pairs become a struct shoal_node_config. The
 * command line's flag table (cli/cli.c) and libshoal's shoal_options_set (lib/options.c) both
 * hand their values here; every value is checked when it is set, the combinations when the
 * configuration is built, and every problem is a negative errno with one line naming the setting
 * as its front end spells it ("--cache-size" on the command line, "cache-size" in the library).
 * The front ends only present it: one line and exit 2, or the errno with shoal_errmsg()
 * (ValueError in Python).
 *
 * Environment overrides are not settings: common/config.c parses them; the build reads the two
 * that fill settings (SHOAL_GROUP_SECRET, HOME for the default folders) from the struct shoal_env
 * it is given.
 *
 * Ownership: a struct shoal_settings borrows every value string it is given (the command line's
 * argv, the library's own copies) and owns the rest: the secret's bytes and the default folders.
 * A configuration built from it points into both, so it is valid while the settings and the
 * value strings are, and the settings must not be moved or copied after a build. Not
 * thread-safe; one settings object per configuration. */
#ifndef SHOAL_CLIENT_SETTINGS_H
#define SHOAL_CLIENT_SETTINGS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "node/node.h"
#include "common/secret.h"

struct shoal_env;

/* Every setting, in the order the command line has always checked them (the first bad one is the
 * one reported). SHOAL_SET_NONE is not a setting: flags that configure no node use it. */
enum shoal_setting {
        SHOAL_SET_NONE = 0,
        SHOAL_SET_BLOCK_SIZE,
        SHOAL_SET_CACHE_GROUP,
        SHOAL_SET_META,
        SHOAL_SET_CACHE_DIR,
        SHOAL_SET_CACHE_SIZE,
        SHOAL_SET_FREE_SPACE_RATIO,
        SHOAL_SET_NO_SHARING,
        SHOAL_SET_GROUP_IP,
        SHOAL_SET_GROUP_NETWORK,
        SHOAL_SET_GROUP_PORT,
        SHOAL_SET_GROUP_WEIGHT,
        SHOAL_SET_GROUP_SECRET_FILE,
        SHOAL_SET_USE_IORPC,
        SHOAL_SET_IORPC_MODE,
        SHOAL_SET_CACHE_TRY_DIO,
        SHOAL_SET_RDMA_NETWORK,
        SHOAL_SET_RDMA_PROVIDER,
        SHOAL_SET_RDMA_PREAUTH_PER_SOURCE,
        SHOAL_SET_BUFFER_SIZE,
        SHOAL_SET_MAX_DOWNLOADS,
        SHOAL_SET_PREFETCH,
        SHOAL_SET_METRICS,
        SHOAL_SET_ENDPOINT,
        SHOAL_SET_UPLOAD_PART_SIZE,
        SHOAL_SET_LOG_LEVEL,
        SHOAL_SET_LOG_FILE,
        SHOAL_SET_STRICT_GROUP,
        SHOAL_SET_LOCAL_SECRET_FILE,
        SHOAL_SET__COUNT
};

/* Who the configuration is for. The defaults that differ between them are in one table in
 * settings.c, each with its reason. */
enum shoal_settings_for {
        SHOAL_SETTINGS_DAEMON,  /* shoal mount, shoal serve: a member that may share its cache */
        SHOAL_SETTINGS_TOOL,    /* shoal cat, warmup, bench, ping, group, stats, umount */
        SHOAL_SETTINGS_LIBRARY, /* a libshoal client: a consumer inside someone's process */
};

struct shoal_settings {
        enum shoal_settings_for who;
        const char *val[SHOAL_SET__COUNT]; /* checked values (borrowed); NULL: the default */
        /* The group secret's bytes: from the secret file, shoal_settings_set_secret, or (at
         * build, when neither gave one) SHOAL_GROUP_SECRET. */
        uint8_t secret[SHOAL_SECRET_MAX];
        size_t secret_len;
        bool secret_given;
        char meta_default[1100]; /* sqlite3://<dir>/meta.db, filled by the build */
        char cache_dir_default[1024];
        char local_secret_default[1024]; /* <dir>/local.secret, filled by the build */
};

/* Empties S for WHO: every setting at its default. Messages spell names as WHO's front end does:
 * "--cache-size" and "STORAGE" for the command line, "cache-size" and "storage" for the
 * library. */
void shoal_settings_init(struct shoal_settings *s, enum shoal_settings_for who);
/* Wipes the secret's bytes (the value strings are the caller's). */
void shoal_settings_clear(struct shoal_settings *s);

/* The setting called NAME ("cache-size"), or SHOAL_SET_NONE when there is none. */
enum shoal_setting shoal_setting_find(const char *name);
/* The name of setting ID ("cache-size"). */
const char *shoal_setting_name(enum shoal_setting id);
/* True for an on/off setting: on the command line a flag without a value. */
bool shoal_setting_is_switch(enum shoal_setting id);
/* True when a client that only reads (libshoal) takes setting ID; the others configure a member's
 * server, the log of a command, or uploads. */
bool shoal_setting_for_library(enum shoal_setting id);

/* Checks VALUE for setting ID and keeps it (borrowed: it must outlive S and what is built from
 * it); VALUE NULL restores the default. Switches take 1/true/yes/on or 0/false/no/off. The
 * secret file is read here (its secret replaces any other). Returns 0, or -EINVAL with one line
 * in ERR naming the setting and the value; S is then unchanged. */
int shoal_settings_set(struct shoal_settings *s, enum shoal_setting id, const char *value,
                       char *err, size_t errlen);
/* Sets the group secret to the LEN bytes at BYTES (copied; every byte counts, NUL included), or
 * removes it when BYTES is NULL. Returns 0 or -EINVAL (not SHOAL_SECRET_MIN..MAX bytes). */
int shoal_settings_set_secret(struct shoal_settings *s, const void *bytes, size_t len, char *err,
                              size_t errlen);

/* The log level S asks for: the log-level setting, else WHO's default. */
int shoal_settings_log_level(const struct shoal_settings *s);

/* Builds CFG for the object store STORAGE from S and ENV (the parsed environment: HOME and
 * SHOAL_GROUP_SECRET), checking what only the combination shows. CFG points into S, STORAGE and
 * the value strings. Returns 0, or -EINVAL with one line in ERR. */
int shoal_settings_build(struct shoal_settings *s, const char *storage, const struct shoal_env *env,
                         struct shoal_node_config *cfg, char *err, size_t errlen);

#endif
