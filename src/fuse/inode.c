#include "fuse/inode.h"

#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "common/util.h"

struct inode {
        uint64_t ino;
        uint64_t path_hash;
        char *path;
        uint64_t nlookup;
        struct shoal_inode_attr attr;
        uint64_t attr_expiry_ns;
        char open_version[SHOAL_VERSION_MAX + 1];
        bool writing;
        struct shoal_dirlist *list;
        struct inode *next_by_path, *next_by_ino;
};

struct shoal_itable {
        pthread_mutex_t mu;
        uint64_t ttl_ns;
        uint64_t (*now_ns)(void); /* the clock TTLs run on (tests inject their own) */
        size_t n, nbuckets;       /* nbuckets is a power of two */
        struct inode **by_path, **by_ino;
        struct inode *root;
};

static uint64_t monotonic_ns(void)
{
        return shoal_now_ns();
}

static uint64_t hash_path(const char *p)
{
        uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a, then a finaliser to spread the bits */
        for (; *p; p++)
                h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
        return h;
}

static size_t slot(const struct shoal_itable *t, uint64_t h)
{
        return (size_t)(h & (t->nbuckets - 1));
}

static struct inode *find_ino(struct shoal_itable *t, uint64_t ino)
{
        for (struct inode *e = t->by_ino[slot(t, ino * 0x9e3779b97f4a7c15ull)]; e;
             e = e->next_by_ino)
                if (e->ino == ino)
                        return e;
        return NULL;
}

static struct inode *find_path(struct shoal_itable *t, const char *path, uint64_t h)
{
        for (struct inode *e = t->by_path[slot(t, h)]; e; e = e->next_by_path)
                if (e->path_hash == h && !strcmp(e->path, path))
                        return e;
        return NULL;
}

static void link_entry(struct shoal_itable *t, struct inode *e)
{
        size_t sp = slot(t, e->path_hash), si = slot(t, e->ino * 0x9e3779b97f4a7c15ull);
        e->next_by_path = t->by_path[sp];
        t->by_path[sp] = e;
        e->next_by_ino = t->by_ino[si];
        t->by_ino[si] = e;
}

static void unlink_entry(struct shoal_itable *t, struct inode *e)
{
        struct inode **pp = &t->by_path[slot(t, e->path_hash)];
        while (*pp != e)
                pp = &(*pp)->next_by_path;
        *pp = e->next_by_path;
        pp = &t->by_ino[slot(t, e->ino * 0x9e3779b97f4a7c15ull)];
        while (*pp != e)
                pp = &(*pp)->next_by_ino;
        *pp = e->next_by_ino;
}

static int grow(struct shoal_itable *t)
{
        size_t nb = t->nbuckets * 2;
        struct inode **bp = calloc(nb, sizeof(*bp)), **bi = calloc(nb, sizeof(*bi));
        if (!bp || !bi) {
                free(bp);
                free(bi);
                return -ENOMEM;
        }
        struct inode **op = t->by_path;
        size_t on = t->nbuckets;
        free(t->by_ino);
        t->by_path = bp;
        t->by_ino = bi;
        t->nbuckets = nb;
        for (size_t i = 0; i < on; i++) {
                struct inode *e = op[i];
                while (e) {
                        struct inode *next = e->next_by_path;
                        link_entry(t, e);
                        e = next;
                }
        }
        free(op);
        return 0;
}

/* The number PATH gets: its hash, moved past reserved numbers and past numbers other paths
 * hold. */
static uint64_t pick_ino(struct shoal_itable *t, uint64_t h)
{
        uint64_t ino = h;
        for (;;) {
                if (ino < SHOAL_INO_FIRST_HASHED)
                        ino = SHOAL_INO_FIRST_HASHED;
                if (!find_ino(t, ino))
                        return ino;
                ino++;
        }
}

static void free_entry(struct inode *e)
{
        if (e->list)
                shoal_dirlist_put(e->list);
        free(e->path);
        free(e);
}

struct shoal_itable *shoal_itable_create(uint64_t ttl_ns)
{
        struct shoal_itable *t = calloc(1, sizeof(*t));
        if (!t)
                return NULL;
        t->nbuckets = 1024;
        t->by_path = calloc(t->nbuckets, sizeof(*t->by_path));
        t->by_ino = calloc(t->nbuckets, sizeof(*t->by_ino));
        t->root = calloc(1, sizeof(*t->root));
        if (!t->by_path || !t->by_ino || !t->root || !(t->root->path = strdup("")))
                goto out_free;
        pthread_mutex_init(&t->mu, NULL);
        t->ttl_ns = ttl_ns;
        t->now_ns = monotonic_ns;
        t->root->ino = SHOAL_INO_ROOT;
        t->root->path_hash = hash_path("");
        t->root->attr.is_dir = true;
        t->root->nlookup = 1; /* the kernel holds the root without a lookup */
        link_entry(t, t->root);
        t->n = 1;
        return t;

out_free:
        if (t->root)
                free(t->root->path);
        free(t->root);
        free(t->by_path);
        free(t->by_ino);
        free(t);
        return NULL;
}

void shoal_itable_destroy(struct shoal_itable *t)
{
        if (!t)
                return;
        for (size_t i = 0; i < t->nbuckets; i++) {
                struct inode *e = t->by_path[i];
                while (e) {
                        struct inode *next = e->next_by_path;
                        free_entry(e);
                        e = next;
                }
        }
        free(t->by_path);
        free(t->by_ino);
        pthread_mutex_destroy(&t->mu);
        free(t);
}

int shoal_itable_path(struct shoal_itable *t, uint64_t ino, char *buf, size_t len, bool *is_dir)
{
        int rc = 0;
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (!e)
                rc = -ENOENT;
        else if (shoal_strlcpy(buf, e->path, len) >= len)
                rc = -ENAMETOOLONG;
        else
                *is_dir = e->attr.is_dir;
        pthread_mutex_unlock(&t->mu);
        return rc;
}

int shoal_itable_ref(struct shoal_itable *t, const char *path, const struct shoal_inode_attr *a,
                     uint64_t *ino)
{
        uint64_t h = hash_path(path);
        int rc = 0;
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_path(t, path, h);
        if (!e) {
                if (t->n >= t->nbuckets && grow(t)) {
                        rc = -ENOMEM;
                        goto out;
                }
                e = calloc(1, sizeof(*e));
                if (!e || !(e->path = strdup(path))) {
                        free(e);
                        rc = -ENOMEM;
                        goto out;
                }
                e->path_hash = h;
                e->ino = pick_ino(t, h);
                link_entry(t, e);
                t->n++;
        }
        if (e->attr.is_dir != a->is_dir && e->list) {
                /* A file became a folder or back: its old listing means nothing now. */
                shoal_dirlist_put(e->list);
                e->list = NULL;
        }
        if (!e->writing) { /* the writer's attributes win until the upload ends */
                e->attr = *a;
                e->attr_expiry_ns = t->now_ns() + t->ttl_ns;
        }
        e->nlookup++;
        *ino = e->ino;
out:
        pthread_mutex_unlock(&t->mu);
        return rc;
}

void shoal_itable_forget(struct shoal_itable *t, uint64_t ino, uint64_t n)
{
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e && e != t->root) {
                e->nlookup = e->nlookup > n ? e->nlookup - n : 0;
                if (!e->nlookup) {
                        unlink_entry(t, e);
                        t->n--;
                        free_entry(e);
                }
        }
        pthread_mutex_unlock(&t->mu);
}

int shoal_itable_getattr(struct shoal_itable *t, uint64_t ino, struct shoal_inode_attr *a,
                         bool *fresh)
{
        int rc = 0;
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e) {
                *a = e->attr;
                /* Folders have no attributes of their own in an object store; a file being
                 * written has the writer's. */
                *fresh = e->attr.is_dir || e->writing || t->now_ns() < e->attr_expiry_ns;
        } else {
                rc = -ENOENT;
        }
        pthread_mutex_unlock(&t->mu);
        return rc;
}

void shoal_itable_setattr(struct shoal_itable *t, uint64_t ino, const struct shoal_inode_attr *a)
{
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e && e->attr.is_dir == a->is_dir && !e->writing) {
                e->attr = *a;
                e->attr_expiry_ns = t->now_ns() + t->ttl_ns;
        }
        pthread_mutex_unlock(&t->mu);
}

int shoal_itable_set_writing(struct shoal_itable *t, uint64_t ino, bool on)
{
        int rc = 0;
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (!e)
                rc = on ? -ENOENT : 0;
        else if (on && e->writing)
                rc = -EBUSY;
        else
                e->writing = on;
        pthread_mutex_unlock(&t->mu);
        return rc;
}

int shoal_itable_ref_writing(struct shoal_itable *t, const char *path, struct shoal_inode_attr *a,
                             uint64_t *ino)
{
        uint64_t h = hash_path(path);
        int rc = -ENOENT;
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_path(t, path, h);
        if (e && e->writing) {
                e->nlookup++;
                *a = e->attr;
                *ino = e->ino;
                rc = 0;
        }
        pthread_mutex_unlock(&t->mu);
        return rc;
}

bool shoal_itable_is_writing(struct shoal_itable *t, const char *path)
{
        uint64_t h = hash_path(path);
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_path(t, path, h);
        bool w = e && e->writing;
        pthread_mutex_unlock(&t->mu);
        return w;
}

bool shoal_itable_writing_under(struct shoal_itable *t, const char *prefix)
{
        size_t pl = strlen(prefix);
        bool found = false;
        pthread_mutex_lock(&t->mu);
        for (size_t i = 0; i < t->nbuckets && !found; i++)
                for (struct inode *e = t->by_path[i]; e && !found; e = e->next_by_path)
                        found = e->writing &&
                                (!pl || (!strncmp(e->path, prefix, pl) && e->path[pl] == '/'));
        pthread_mutex_unlock(&t->mu);
        return found;
}

void shoal_itable_write_size(struct shoal_itable *t, uint64_t ino, uint64_t size)
{
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e && e->writing) {
                e->attr.size = size;
                e->attr.mtime_ns = (int64_t)shoal_wall_ns();
        }
        pthread_mutex_unlock(&t->mu);
}

void shoal_itable_expire(struct shoal_itable *t, uint64_t ino)
{
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e)
                e->attr_expiry_ns = 0;
        pthread_mutex_unlock(&t->mu);
}

void shoal_itable_dirlist_drop(struct shoal_itable *t, uint64_t ino)
{
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e && e->list) {
                shoal_dirlist_put(e->list);
                e->list = NULL;
        }
        pthread_mutex_unlock(&t->mu);
}

bool shoal_itable_note_open(struct shoal_itable *t, uint64_t ino, const char *version)
{
        bool same = false;
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e) {
                same = e->open_version[0] && !strcmp(e->open_version, version);
                shoal_strlcpy(e->open_version, version, sizeof(e->open_version));
        }
        pthread_mutex_unlock(&t->mu);
        return same;
}

uint64_t shoal_itable_ino_of(struct shoal_itable *t, const char *path)
{
        uint64_t h = hash_path(path);
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_path(t, path, h);
        uint64_t ino = e ? e->ino : pick_ino(t, h);
        pthread_mutex_unlock(&t->mu);
        return ino;
}

static void dirlist_get(struct shoal_dirlist *l);

struct shoal_dirlist *shoal_itable_dirlist_get(struct shoal_itable *t, uint64_t ino)
{
        struct shoal_dirlist *l = NULL;
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e && e->list && t->now_ns() < e->list->expiry_ns) {
                l = e->list;
                dirlist_get(l);
        }
        pthread_mutex_unlock(&t->mu);
        return l;
}

void shoal_itable_dirlist_set(struct shoal_itable *t, uint64_t ino, struct shoal_dirlist *l)
{
        l->expiry_ns = t->now_ns() + t->ttl_ns;
        pthread_mutex_lock(&t->mu);
        struct inode *e = find_ino(t, ino);
        if (e && e->attr.is_dir) {
                if (e->list)
                        shoal_dirlist_put(e->list);
                dirlist_get(l);
                e->list = l;
        }
        pthread_mutex_unlock(&t->mu);
}

struct shoal_dirlist *shoal_dirlist_new(void)
{
        struct shoal_dirlist *l = calloc(1, sizeof(*l));
        if (l)
                l->refs = 1;
        return l;
}

int shoal_dirlist_add(struct shoal_dirlist *l, const char *name, size_t name_len, bool is_dir,
                      uint64_t size, int64_t mtime_ns, const char *version)
{
        if (l->n == l->cap) {
                size_t cap = l->cap ? l->cap * 2 : 64;
                struct shoal_dirent *ne = realloc(l->ents, cap * sizeof(*ne));
                if (!ne)
                        return -ENOMEM;
                l->ents = ne;
                l->cap = cap;
        }
        struct shoal_dirent *d = &l->ents[l->n];
        d->name = strndup(name, name_len);
        d->version = strdup(version ? version : "");
        if (!d->name || !d->version) {
                free(d->name);
                free(d->version);
                return -ENOMEM;
        }
        d->is_dir = is_dir;
        d->size = size;
        d->mtime_ns = mtime_ns;
        l->n++;
        return 0;
}

static int dirent_cmp(const void *a, const void *b)
{
        const struct shoal_dirent *x = a, *y = b;
        int c = strcmp(x->name, y->name);
        if (c)
                return c;
        return (int)y->is_dir - (int)x->is_dir; /* the folder first */
}

void shoal_dirlist_seal(struct shoal_dirlist *l)
{
        if (!l->n)
                return;
        qsort(l->ents, l->n, sizeof(*l->ents), dirent_cmp);
        size_t w = 1;
        for (size_t i = 1; i < l->n; i++) {
                if (!strcmp(l->ents[i].name, l->ents[w - 1].name)) {
                        free(l->ents[i].name);
                        free(l->ents[i].version);
                        continue;
                }
                l->ents[w++] = l->ents[i];
        }
        l->n = w;
}

static void dirlist_get(struct shoal_dirlist *l)
{
        __atomic_add_fetch(&l->refs, 1, __ATOMIC_RELAXED);
}

void shoal_dirlist_put(struct shoal_dirlist *l)
{
        if (!l || __atomic_sub_fetch(&l->refs, 1, __ATOMIC_ACQ_REL))
                return;
        for (size_t i = 0; i < l->n; i++) {
                free(l->ents[i].name);
                free(l->ents[i].version);
        }
        free(l->ents);
        free(l);
}

const struct shoal_dirent *shoal_dirlist_find(const struct shoal_dirlist *l, const char *name)
{
        size_t lo = 0, hi = l->n;
        while (lo < hi) {
                size_t mid = lo + (hi - lo) / 2;
                int c = strcmp(name, l->ents[mid].name);
                if (!c)
                        return &l->ents[mid];
                if (c < 0)
                        hi = mid;
                else
                        lo = mid + 1;
        }
        return NULL;
}

void shoal_itable_set_clock(struct shoal_itable *t, uint64_t (*now_ns)(void))
{
        pthread_mutex_lock(&t->mu);
        t->now_ns = now_ns ? now_ns : monotonic_ns;
        pthread_mutex_unlock(&t->mu);
}
