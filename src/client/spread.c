#include "client/spread.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/config.h"
#include "common/util.h"
#include "group/group.h"

#define MAX_TRACKED 256

struct tracked {
        char id[SHOAL_MEMBER_ID_LEN + 1];
        unsigned inflight;
};

struct shoal_spread {
        unsigned copies, busy;
        pthread_mutex_t mu;
        struct tracked members[MAX_TRACKED];
        unsigned n;
};

struct shoal_spread *shoal_spread_create(unsigned copies, unsigned busy)
{
        struct shoal_spread *sp = calloc(1, sizeof(*sp));
        if (!sp)
                return NULL;
        const struct shoal_env *env = shoal_config_env();
        if (!copies)
                copies = env->spread_copies ? env->spread_copies : SHOAL_SPREAD_COPIES_DEFAULT;
        if (!busy)
                busy = env->spread_busy ? env->spread_busy : SHOAL_SPREAD_BUSY_DEFAULT;
        sp->copies = SHOAL_MIN(copies, (unsigned)SHOAL_SPREAD_COPIES_MAX);
        sp->busy = busy;
        pthread_mutex_init(&sp->mu, NULL);
        return sp;
}

void shoal_spread_destroy(struct shoal_spread *sp)
{
        if (!sp)
                return;
        pthread_mutex_destroy(&sp->mu);
        free(sp);
}

unsigned shoal_spread_copies(const struct shoal_spread *sp)
{
        return sp->copies;
}

/* Member ID's count, created on first sight (an idle slot is reused when the table is full: a
 * member with nothing in flight has nothing to remember). sp->mu held; NULL if none is free. */
static struct tracked *tracked_locked(struct shoal_spread *sp, const char *id, bool create)
{
        struct tracked *idle = NULL;
        for (unsigned i = 0; i < sp->n; i++) {
                if (!strcmp(sp->members[i].id, id))
                        return &sp->members[i];
                if (!sp->members[i].inflight && !idle)
                        idle = &sp->members[i];
        }
        if (!create)
                return NULL;
        struct tracked *t = sp->n < MAX_TRACKED ? &sp->members[sp->n++] : idle;
        if (t) {
                shoal_strlcpy(t->id, id, sizeof(t->id));
                t->inflight = 0;
        }
        return t;
}

void shoal_spread_begin(struct shoal_spread *sp, const char *id)
{
        pthread_mutex_lock(&sp->mu);
        struct tracked *t = tracked_locked(sp, id, true);
        if (t)
                t->inflight++;
        pthread_mutex_unlock(&sp->mu);
}

void shoal_spread_end(struct shoal_spread *sp, const char *id)
{
        pthread_mutex_lock(&sp->mu);
        struct tracked *t = tracked_locked(sp, id, false);
        if (t && t->inflight)
                t->inflight--;
        pthread_mutex_unlock(&sp->mu);
}

unsigned shoal_spread_inflight(struct shoal_spread *sp, const char *id)
{
        pthread_mutex_lock(&sp->mu);
        struct tracked *t = tracked_locked(sp, id, false);
        unsigned n = t ? t->inflight : 0;
        pthread_mutex_unlock(&sp->mu);
        return n;
}

bool shoal_spread_choose_next(struct shoal_spread *sp, const char *owner, const char *next)
{
        if (sp->copies < 2)
                return false;
        pthread_mutex_lock(&sp->mu);
        struct tracked *o = tracked_locked(sp, owner, false);
        struct tracked *x = tracked_locked(sp, next, false);
        unsigned on = o ? o->inflight : 0, xn = x ? x->inflight : 0;
        pthread_mutex_unlock(&sp->mu);
        /* This read would be the owner's (on + 1)-th; BUSY 1 spreads every read (tests). */
        return on + 1 >= sp->busy && (xn < on || sp->busy == 1);
}

uint64_t shoal_spread_hash(const char *s)
{
        uint64_t h = 1469598103934665603ULL; /* FNV-1a */
        for (; *s; s++)
                h = (h ^ (unsigned char)*s) * 1099511628211ULL;
        return h;
}
