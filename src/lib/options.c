/* Settings of a library client: the command line's settings by name (node/settings.c checks
 * them and gives the defaults, including the ones that differ for a library), with copies of the
 * values kept here. */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "lib/lib.h"
#include "shoal/shoal.h"

static _Thread_local char errbuf[1024];

int lib_fail(int rc, const char *fmt, ...)
{
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(errbuf, sizeof(errbuf), fmt, ap);
        va_end(ap);
        return rc;
}

SHOAL_API const char *shoal_errmsg(void)
{
        return errbuf;
}

static void options_init(struct shoal_options *o)
{
        memset(o, 0, sizeof(*o));
        shoal_settings_init(&o->set, SHOAL_SETTINGS_LIBRARY);
}

static void options_clear(struct shoal_options *o)
{
        for (int i = 0; i < SHOAL_SET__COUNT; i++)
                free(o->own[i]);
        shoal_settings_clear(&o->set);
        memset(o->own, 0, sizeof(o->own));
}

/* DST (uninitialised) becomes a copy of SRC (NULL: the defaults) with values of its own. */
static int options_copy(struct shoal_options *dst, const struct shoal_options *src)
{
        options_init(dst);
        if (!src)
                return 0;
        dst->set = src->set;
        for (int i = 0; i < SHOAL_SET__COUNT; i++) {
                if (!src->own[i])
                        continue;
                dst->own[i] = strdup(src->own[i]);
                if (!dst->own[i]) {
                        options_clear(dst);
                        return lib_fail(-ENOMEM, "out of memory");
                }
                dst->set.val[i] = dst->own[i];
        }
        return 0;
}

SHOAL_API struct shoal_options *shoal_options_new(void)
{
        struct shoal_options *o = malloc(sizeof(*o));
        if (!o) {
                lib_fail(-ENOMEM, "out of memory");
                return NULL;
        }
        options_init(o);
        return o;
}

SHOAL_API void shoal_options_free(struct shoal_options *o)
{
        if (!o)
                return;
        options_clear(o);
        free(o);
}

SHOAL_API int shoal_options_set(struct shoal_options *o, const char *name, const char *value)
{
        if (!o || !name)
                return lib_fail(-EINVAL, "shoal_options_set: no options or no name");
        enum shoal_setting id = shoal_setting_find(name);
        if (id == SHOAL_SET_NONE)
                return lib_fail(-EINVAL, "unknown setting %s", name);
        if (!shoal_setting_for_library(id))
                return lib_fail(-EINVAL,
                                "setting %s is for a member that serves (shoal serve, shoal "
                                "mount): a library client only reads",
                                name);
        char *copy = NULL;
        if (value && !(copy = strdup(value)))
                return lib_fail(-ENOMEM, "out of memory");
        char err[1024];
        int rc = shoal_settings_set(&o->set, id, copy, err, sizeof(err));
        if (rc) {
                free(copy);
                return lib_fail(rc, "%s", err);
        }
        free(o->own[id]);
        o->own[id] = copy;
        return 0;
}

SHOAL_API int shoal_options_set_secret(struct shoal_options *o, const void *secret, size_t len)
{
        if (!o || (!secret && len))
                return lib_fail(-EINVAL, "shoal_options_set_secret: no options or no secret");
        char err[256];
        int rc = shoal_settings_set_secret(&o->set, secret, len, err, sizeof(err));
        return rc ? lib_fail(rc, "%s", err) : 0;
}

int lib_config_build(struct lib_config *cfg, const char *storage, const struct shoal_options *o)
{
        memset(cfg, 0, sizeof(*cfg));
        char err[1024];
        /* The environment is read by the first open; a bad variable fails this open, and only
         * it: the host process carries on. */
        int rc = shoal_config_ensure(err, sizeof(err));
        if (rc)
                return lib_fail(rc, "%s", err);
        rc = options_copy(&cfg->opts, o);
        if (rc)
                return rc;
        if (storage && !(cfg->storage = strdup(storage))) {
                rc = lib_fail(-ENOMEM, "out of memory");
                goto out_free;
        }
        rc = shoal_settings_build(&cfg->opts.set, cfg->storage, shoal_config_env(), &cfg->node, err,
                                  sizeof(err));
        if (rc) {
                lib_fail(rc, "%s", err);
                goto out_free;
        }
        cfg->log_level = shoal_settings_log_level(&cfg->opts.set);
        cfg->log_file = cfg->opts.set.val[SHOAL_SET_LOG_FILE];
        return 0;

out_free:
        lib_config_free(cfg);
        return rc;
}

void lib_config_free(struct lib_config *cfg)
{
        options_clear(&cfg->opts);
        free(cfg->storage);
        memset(cfg, 0, sizeof(*cfg));
}
