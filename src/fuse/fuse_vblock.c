/* Warm reads from the disk cache without a copy through user space [issue 31].
 *
 * A block of the disk cache that a read needs is mapped (read-only, shared) from its cache file,
 * locked in memory (mlock) and its chunk CRCs checked over the mapping once, on load. Requests are
 * then answered with a reply vector that points into the mapping: the kernel copies the cache
 * file's pages once, straight into the request's pages, and the bytes are never read into our
 * memory (no pread copy, no CRC pass per request). Why the bytes replied are the bytes checked:
 *
 *   - a rotten disk reaches memory only when a page is read from it; the pages checked are
 *     locked from before the check until the block leaves this table, so none of them is
 *     evicted and read again behind the check, and the reply reads those very pages;
 *   - a change through the kernel (a write, a truncate, the cache's own eviction, which unlinks)
 *     moves the file's ctime or size: every request compares them with their values at the
 *     check and, on a difference, drops the block and goes the copying way (which checks again);
 *     a truncate racing a reply makes the kernel's copy fault, and the request fails (EIO), it
 *     never carries other bytes;
 *   - shoal never writes a block file in place (inserts are renamed into place), so what is
 *     left is a writer outside shoal racing the microseconds between that comparison and the
 *     kernel's copy: outside the model, as is writing into the process's memory.
 *
 * Why not splice (libfuse's descriptor buffers with FUSE_CAP_SPLICE_WRITE): the copy count is the
 * same (the kernel copies pipe pages into the request as it copies mapped pages), and libfuse
 * needs a pipe larger than the request, which a 1 MiB request only gets past
 * fs.pipe-max-size (1 MiB by default) with CAP_SYS_RESOURCE; without it every reply would be
 * read into a buffer again.
 *
 * A check that fails removes the file (blockcache_checksum_errors) and the request goes the
 * copying way, which fills the block from the store. A file truncated under the check (SIGBUS on
 * the mapping) is caught the same way. Anything else that stops a block from being loaded here
 * (no memory to lock) leaves the request to that way too. */
#include <errno.h>
#include <pthread.h>
#include <setjmp.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include "cache/cache.h"
#include "client/reader.h"
#include "common/list.h"
#include "common/log.h"
#include "common/util.h"
#include "fuse/fuse_internal.h"
#include "node/node.h"

/* Blocks one request may span (1 MiB over 64 KiB blocks needs 17). */
#define VB_PIECES_MAX 24
#define VB_MIN_BLOCKS 8

struct vblock {
        struct shoal_list lru; /* f->vc.lru, most recent first */
        struct vblock *hnext;
        struct shoal_block_id id;
        int refs;
        bool loading; /* one thread is loading it; others wait on vc.cond */
        bool failed;  /* the load failed: waiters go the copying way */
        bool dead;    /* out of the table; freed by the last reference */
        void *map;
        size_t map_len;
        struct timespec ctim; /* of the file when it was checked */
        off_t size;
        struct shoal_cache_block cb;
};

struct shoal_fuse_vcache {
        pthread_mutex_t mu;
        pthread_cond_t cond;
        struct vblock **hash;
        unsigned mask;
        struct shoal_list lru;
        unsigned n, max;
        bool on;
        int lock_failed; /* atomic: mlock was refused once (logged once) */
};

static struct shoal_cache *cache_of(struct shoal_fuse *f)
{
        return shoal_reader_cache(f->node->reader);
}

/* --- SIGBUS while checking a mapping (the file was truncated under it) ---------------------- */

static __thread sigjmp_buf *bus_jmp;
static struct sigaction bus_prev;
static pthread_once_t bus_once = PTHREAD_ONCE_INIT;

static void on_sigbus(int sig, siginfo_t *si, void *uc)
{
        if (bus_jmp)
                siglongjmp(*bus_jmp, 1);
        /* Not ours: what was there before (the default kills the process at the same access). */
        if (bus_prev.sa_flags & SA_SIGINFO && bus_prev.sa_sigaction) {
                bus_prev.sa_sigaction(sig, si, uc);
                return;
        }
        if (bus_prev.sa_handler != SIG_IGN && bus_prev.sa_handler != SIG_DFL &&
            bus_prev.sa_handler) {
                bus_prev.sa_handler(sig);
                return;
        }
        signal(SIGBUS, SIG_DFL);
}

static void bus_install(void)
{
        struct sigaction sa;
        memset(&sa, 0, sizeof(sa));
        sa.sa_sigaction = on_sigbus;
        sa.sa_flags = SA_SIGINFO | SA_NODEFER;
        sigemptyset(&sa.sa_mask);
        sigaction(SIGBUS, &sa, &bus_prev);
}

/* Checks B's chunk CRCs over DATA, a mapping of its file. False on a mismatch or a SIGBUS. */
static bool verify_mapped(const struct shoal_cache_block *b, const void *data)
{
        sigjmp_buf env;
        volatile bool ok = false;
        if (!sigsetjmp(env, 1)) {
                bus_jmp = &env;
                ok = shoal_cache_block_verify(b, 0, b->len, data);
        }
        bus_jmp = NULL;
        return ok;
}

/* --- the table ------------------------------------------------------------------------------ */

static struct vblock **slot_of(struct shoal_fuse_vcache *vc, const struct shoal_block_id *id)
{
        return &vc->hash[shoal_block_id_hash64(id) & vc->mask];
}

static struct vblock *find(struct shoal_fuse_vcache *vc, const struct shoal_block_id *id)
{
        for (struct vblock *vb = *slot_of(vc, id); vb; vb = vb->hnext)
                if (shoal_block_id_eq(&vb->id, id))
                        return vb;
        return NULL;
}

/* Takes VB out of the table (vc->mu held); the last reference frees it. */
static void unhash(struct shoal_fuse_vcache *vc, struct vblock *vb)
{
        for (struct vblock **pp = slot_of(vc, &vb->id); *pp; pp = &(*pp)->hnext) {
                if (*pp == vb) {
                        *pp = vb->hnext;
                        break;
                }
        }
        shoal_list_del(&vb->lru);
        vb->dead = true;
        vc->n--;
}

static void vb_free(struct shoal_fuse *f, struct vblock *vb)
{
        if (vb->map)
                munmap(vb->map, vb->map_len);
        if (vb->cb.fd >= 0)
                shoal_cache_block_close(cache_of(f), &vb->cb);
        free(vb);
}

/* Drops a reference (vc->mu held). Returns VB when the caller must free it (outside the lock). */
static struct vblock *put_locked(struct shoal_fuse_vcache *vc, struct vblock *vb)
{
        return --vb->refs == 0 && vb->dead ? vb : NULL;
}

static void put(struct shoal_fuse *f, struct vblock *vb)
{
        struct shoal_fuse_vcache *vc = f->vc;
        pthread_mutex_lock(&vc->mu);
        struct vblock *gone = put_locked(vc, vb);
        pthread_mutex_unlock(&vc->mu);
        if (gone)
                vb_free(f, gone);
}

/* Evicts unreferenced blocks beyond the table's size (vc->mu held); returns them in a chain
 * through hnext, to be freed outside the lock. */
static struct vblock *trim_locked(struct shoal_fuse_vcache *vc)
{
        struct vblock *out = NULL;
        struct shoal_list *pos, *next;
        for (pos = vc->lru.prev, next = pos->prev; pos != &vc->lru && vc->n > vc->max;
             pos = next, next = pos->prev) {
                struct vblock *vb = shoal_list_entry(pos, struct vblock, lru);
                if (vb->refs || vb->loading)
                        continue;
                unhash(vc, vb);
                vb->hnext = out;
                out = vb;
        }
        return out;
}

static void free_chain(struct shoal_fuse *f, struct vblock *vb)
{
        while (vb) {
                struct vblock *next = vb->hnext;
                vb_free(f, vb);
                vb = next;
        }
}

/* --- loading a block ------------------------------------------------------------------------ */

static bool same_file(const struct vblock *vb, const struct stat *st)
{
        return st->st_ctim.tv_sec == vb->ctim.tv_sec && st->st_ctim.tv_nsec == vb->ctim.tv_nsec &&
               st->st_size == vb->size && st->st_nlink > 0;
}

/* Maps and locks VB's data. Returns 0, or -ENOMEM when the memory cannot be locked. */
static int map_locked(struct shoal_fuse *f, struct vblock *vb)
{
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        uint64_t moff = vb->cb.data_off / page * page;
        vb->map_len = (size_t)(vb->cb.data_off - moff) + vb->cb.len;
        void *m = mmap(NULL, vb->map_len, PROT_READ, MAP_SHARED | MAP_POPULATE, vb->cb.fd,
                       (off_t)moff);
        if (m == MAP_FAILED)
                return -errno;
        shoal_mapped_fresh(m, vb->map_len);
        vb->map = m;
        if (mlock(m, vb->map_len)) {
                int e = errno;
                /* A limit (not root): no point in trying block after block. */
                if (geteuid() != 0)
                        __atomic_store_n(&f->vc->on, false, __ATOMIC_RELAXED);
                if (!__atomic_exchange_n(&f->vc->lock_failed, 1, __ATOMIC_RELAXED))
                        log_info("fuse",
                                 "cannot lock cache pages in memory (%s; ulimit -l, or "
                                 "CAP_IPC_LOCK): warm reads copy from the cache files",
                                 strerror(e));
                return -ENOMEM;
        }
        return 0;
}

/* Opens block VB->id (LEN bytes) of the disk cache, locks and checks it. Returns 0 or a negative
 * errno; a block whose check failed is removed from the cache (-EBADMSG). */
static int load(struct shoal_fuse *f, struct vblock *vb, uint32_t len)
{
        struct shoal_cache *c = cache_of(f);
        int rc = shoal_cache_open_block(c, &vb->id, len, &vb->cb);
        if (rc) {
                vb->cb.fd = -1;
                return rc;
        }
        struct stat st;
        if (fstat(vb->cb.fd, &st))
                return -errno;
        if ((uint64_t)st.st_size < vb->cb.data_off + vb->cb.len) {
                shoal_cache_block_corrupt(c, &vb->cb, "short file");
                return -EBADMSG;
        }
        vb->ctim = st.st_ctim;
        vb->size = st.st_size;
        rc = map_locked(f, vb);
        if (rc)
                return rc;
        uint64_t t0 = shoal_now_ns();
        const char *data = (const char *)vb->map + (vb->map_len - vb->cb.len);
        if (!verify_mapped(&vb->cb, data)) {
                shoal_cache_block_corrupt(c, &vb->cb, "chunk checksum mismatch");
                return -EBADMSG;
        }
        /* Changed while it was checked: the copying way looks again. */
        if (fstat(vb->cb.fd, &st) || !same_file(vb, &st))
                return -EAGAIN;
        shoal_metric_observe(SHOAL_M_blockcache_read_dur, shoal_now_ns() - t0);
        return 0;
}

/* Waits for a load of VB by another thread (vc->mu held). Returns whether it succeeded. */
static bool wait_loaded(struct shoal_fuse_vcache *vc, struct vblock *vb)
{
        while (vb->loading)
                pthread_cond_wait(&vc->cond, &vc->mu);
        return !vb->failed;
}

/* Block ID (LEN bytes) checked and locked, with a reference; NULL when the request must go the
 * copying way (not cached, failed a check, cannot be locked). */
static struct vblock *get(struct shoal_fuse *f, const struct shoal_block_id *id, uint32_t len)
{
        struct shoal_fuse_vcache *vc = f->vc;
        pthread_mutex_lock(&vc->mu);
        struct vblock *vb = find(vc, id);
        if (vb) {
                vb->refs++;
                bool ok = wait_loaded(vc, vb) && vb->cb.len == len;
                if (ok)
                        shoal_list_move_front(&vc->lru, &vb->lru);
                struct vblock *gone = ok ? NULL : put_locked(vc, vb);
                pthread_mutex_unlock(&vc->mu);
                if (gone)
                        vb_free(f, gone);
                return ok ? vb : NULL;
        }
        pthread_mutex_unlock(&vc->mu);
        /* No I/O for what the index does not hold: the copying way fills it. */
        if (!shoal_cache_contains(cache_of(f), id))
                return NULL;
        vb = calloc(1, sizeof(*vb));
        if (!vb)
                return NULL;
        vb->id = *id;
        vb->cb.fd = -1;
        vb->refs = 1;
        vb->loading = true;
        shoal_list_init(&vb->lru);
        pthread_mutex_lock(&vc->mu);
        if (find(vc, id)) { /* another thread started it meanwhile: take that one */
                pthread_mutex_unlock(&vc->mu);
                free(vb);
                return get(f, id, len);
        }
        struct vblock **slot = slot_of(vc, id);
        vb->hnext = *slot;
        *slot = vb;
        shoal_list_push_front(&vc->lru, &vb->lru);
        vc->n++;
        pthread_mutex_unlock(&vc->mu);

        int rc = load(f, vb, len);

        pthread_mutex_lock(&vc->mu);
        vb->loading = false;
        vb->failed = rc != 0;
        if (rc)
                unhash(vc, vb);
        pthread_cond_broadcast(&vc->cond);
        struct vblock *trimmed = trim_locked(vc);
        struct vblock *gone = rc ? put_locked(vc, vb) : NULL;
        pthread_mutex_unlock(&vc->mu);
        free_chain(f, trimmed);
        if (gone)
                vb_free(f, gone);
        return rc ? NULL : vb;
}

/* VB may still be trusted: its file is the one checked. Else it leaves the table. */
static bool still_same(struct shoal_fuse *f, struct vblock *vb)
{
        struct stat st;
        if (!fstat(vb->cb.fd, &st) && same_file(vb, &st))
                return true;
        pthread_mutex_lock(&f->vc->mu);
        if (!vb->dead)
                unhash(f->vc, vb);
        pthread_mutex_unlock(&f->vc->mu);
        return false;
}

/* --- the read ------------------------------------------------------------------------------- */

struct vb_read {
        struct vblock *vbs[VB_PIECES_MAX];
        unsigned n;
};

static void release_all(struct shoal_fuse *f, struct vb_read *r)
{
        for (unsigned i = 0; i < r->n; i++)
                put(f, r->vbs[i]);
        r->n = 0;
}

/* Gathers the blocks of [OFF, END) of OBJ into R and IOV. Returns false (nothing held) when
 * one of them must go the copying way. */
static bool gather(struct shoal_fuse *f, const struct shoal_object *obj, uint64_t off, uint64_t end,
                   struct vb_read *r, struct iovec *iov)
{
        uint32_t bs = f->block_size;
        for (uint64_t pos = off; pos < end;) {
                uint32_t index = (uint32_t)(pos / bs);
                uint32_t boff = (uint32_t)(pos % bs);
                uint32_t blen = shoal_block_len(obj->size, bs, index);
                size_t n = (size_t)SHOAL_MIN((uint64_t)(blen - boff), end - pos);
                struct shoal_block_id id;
                shoal_block_id_derive(&f->node->vol, obj->key, obj->version, index, &id);
                struct vblock *vb = r->n < VB_PIECES_MAX ? get(f, &id, blen) : NULL;
                if (vb && !still_same(f, vb)) {
                        /* Changed since its check: checked again, from its pages now. */
                        put(f, vb);
                        vb = get(f, &id, blen);
                        if (vb && !still_same(f, vb)) {
                                put(f, vb);
                                vb = NULL;
                        }
                }
                if (!vb) {
                        release_all(f, r);
                        return false;
                }
                r->vbs[r->n++] = vb;
                const char *data = (const char *)vb->map + (vb->map_len - vb->cb.len);
                iov[r->n - 1] = (struct iovec){.iov_base = (void *)(data + boff), .iov_len = n};
                pos += n;
        }
        return true;
}

bool shoal_fuse_read_cached(fuse_req_t req, struct shoal_fuse *f, const struct shoal_object *obj,
                            uint64_t off, size_t size)
{
        if (!f->vc || !__atomic_load_n(&f->vc->on, __ATOMIC_RELAXED) || off >= obj->size || !size)
                return false;
        uint64_t end = off + SHOAL_MIN((uint64_t)size, obj->size - off);
        struct iovec iov[VB_PIECES_MAX];
        struct vb_read r = {.n = 0};
        if (!gather(f, obj, off, end, &r, iov))
                return false;
        size_t len = (size_t)(end - off);
        shoal_metric_inc(SHOAL_M_fuse_reads);
        shoal_metric_add(SHOAL_M_fuse_read_bytes, len);
        if (size >= SHOAL_MiB)
                shoal_metric_inc(SHOAL_M_fuse_read_size_1m);
        /* Served from the cache files' pages, as a copying read from them would be. */
        shoal_metric_add(SHOAL_M_blockcache_hits, r.n);
        shoal_metric_add(SHOAL_M_blockcache_hit_bytes, len);
        int rc = fuse_reply_iov(req, iov, (int)r.n);
        if (rc && rc != -ENOENT)
                log_ratelimited(SHOAL_LOG_WARN, "fuse", "reply of %s [%llu+%zu] failed: %s",
                                obj->key, (unsigned long long)off, len, strerror(-rc));
        release_all(f, &r);
        return true;
}

/* --- set-up --------------------------------------------------------------------------------- */

int shoal_fuse_vcache_init(struct shoal_fuse *f)
{
        struct shoal_fuse_vcache *vc = calloc(1, sizeof(*vc));
        if (!vc)
                return -ENOMEM;
        pthread_mutex_init(&vc->mu, NULL);
        pthread_cond_init(&vc->cond, NULL);
        shoal_list_init(&vc->lru);
        f->vc = vc;
        struct shoal_cache *c = cache_of(f);
        if (!c || !shoal_cache_enabled(c))
                return 0;
        /* The locked blocks take the place of the reader's buffers: as many as --buffer-size,
         * and within what this process may lock. */
        uint64_t nb = SHOAL_MAX(f->node->cfg.buffer_size / f->block_size, (uint64_t)VB_MIN_BLOCKS);
        struct rlimit rl;
        if (geteuid() != 0 && !getrlimit(RLIMIT_MEMLOCK, &rl) && rl.rlim_cur != RLIM_INFINITY)
                nb = SHOAL_MIN(nb, (uint64_t)rl.rlim_cur / 2 / f->block_size);
        if (nb < 2) {
                log_info("fuse", "too little lockable memory (ulimit -l): warm reads copy from "
                                 "the cache files");
                return 0;
        }
        vc->max = (unsigned)SHOAL_MIN(nb, (uint64_t)4096);
        unsigned hs = 16;
        while (hs < 2 * vc->max)
                hs <<= 1;
        vc->hash = calloc(hs, sizeof(*vc->hash));
        if (!vc->hash)
                return -ENOMEM;
        vc->mask = hs - 1;
        pthread_once(&bus_once, bus_install);
        vc->on = true;
        return 0;
}

void shoal_fuse_vcache_destroy(struct shoal_fuse *f)
{
        struct shoal_fuse_vcache *vc = f->vc;
        if (!vc)
                return;
        struct shoal_list *pos, *next;
        list_for_each (pos, next, &vc->lru) {
                struct vblock *vb = shoal_list_entry(pos, struct vblock, lru);
                shoal_list_del(&vb->lru);
                vb_free(f, vb);
        }
        free(vc->hash);
        pthread_mutex_destroy(&vc->mu);
        pthread_cond_destroy(&vc->cond);
        free(vc);
        f->vc = NULL;
}
