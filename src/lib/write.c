/* libshoal writers (include/shoal/shoal.h, "writing"): the mount's write model [W1, W2] without
 * FUSE — one upload through the store's upload API, committed at shoal_write_close — and
 * write-through into the group [W3] through the node's push (client/push.h). */
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "node/node.h"
#include "client/push.h"
#include "common/forkgate.h"
#include "common/log.h"
#include "common/util.h"
#include "lib/lib.h"
#include "shoal/shoal.h"
#include "store/store.h"

struct shoal_writer {
        struct shoal_client *c;
        unsigned gen; /* fork generation it was opened in */
        struct shoal_upload *up;
        struct shoal_push_stage *stage;
        int err; /* latched: the upload was abandoned with this error */
        uint64_t written;
        char key[SHOAL_KEY_MAX + 1];
};

/* The errno a caller sees for an upload error. */
static int upload_errno(int rc)
{
        switch (rc) {
        case -EEXIST:
        case -EINVAL:
        case -EACCES:
        case -ENOSPC:
        case -EDQUOT:
        case -EFBIG:
        case -ENOMEM:
                return rc;
        default:
                return -EIO;
        }
}

SHOAL_API struct shoal_writer *shoal_write_open(struct shoal_client *c, const char *key, int flags)
{
        int rc;
        if (!c || !key || !shoal_key_valid(key, strnlen(key, SHOAL_KEY_MAX + 1)) ||
            (flags & ~SHOAL_WRITE_OVERWRITE)) {
                rc = lib_fail(-EINVAL, "shoal_write_open: %s",
                              !c || !key                         ? "no client or no key"
                              : (flags & ~SHOAL_WRITE_OVERWRITE) ? "unknown flags"
                                                                 : "not a valid object key");
                errno = -rc;
                return NULL;
        }
        struct shoal_writer *w = calloc(1, sizeof(*w));
        if (!w) {
                errno = ENOMEM;
                lib_fail(-ENOMEM, "out of memory");
                return NULL;
        }
        shoal_strlcpy(w->key, key, sizeof(w->key));
        bool t = shoal_fork_gate_enter();
        struct shoal_node *n = lib_client_node(c, &rc);
        if (n) {
                unsigned uf = flags & SHOAL_WRITE_OVERWRITE ? 0 : SHOAL_UPLOAD_CREATE;
                rc = shoal_store_upload_begin(n->store, key, uf, &w->up);
                if (rc) {
                        rc = upload_errno(rc);
                        lib_fail(rc, "cannot write %s: %s", key,
                                 rc == -EEXIST ? "the object exists (SHOAL_WRITE_OVERWRITE "
                                                 "replaces it)"
                                               : strerror(-rc));
                }
        }
        if (n && !rc) {
                w->stage = shoal_push_stage_begin(n->push);
                w->c = c;
                w->gen = lib_file_opened(c);
        }
        shoal_fork_gate_exit(t);
        if (rc) {
                free(w);
                errno = -rc;
                return NULL;
        }
        return w;
}

/* Ends W's upload without an object (its error latched as ERR). */
static void abandon(struct shoal_writer *w, int err)
{
        shoal_store_upload_abort(w->up);
        w->up = NULL;
        shoal_push_stage_abort(w->stage);
        w->stage = NULL;
        w->err = err;
        log_warn("lib", "%s abandoned after %llu bytes: %s; no object was written", w->key,
                 (unsigned long long)w->written, strerror(-err));
}

static bool foreign(const struct shoal_writer *w)
{
        return w->gen != lib_fork_gen();
}

SHOAL_API ssize_t shoal_write(struct shoal_writer *w, const void *buf, size_t len)
{
        if (!w || (!buf && len) || len > SSIZE_MAX)
                return lib_fail(-EINVAL, "shoal_write: no writer, no buffer or a length past "
                                         "SSIZE_MAX");
        if (foreign(w))
                return lib_fail(-EBADF,
                                "shoal_write: the writer of %s belongs to the parent "
                                "process",
                                w->key);
        if (w->err)
                return lib_fail(w->err, "writing %s failed before: %s", w->key, strerror(-w->err));
        if (!len)
                return 0;
        bool t = shoal_fork_gate_enter();
        int rc = shoal_store_upload_append(w->up, buf, len);
        if (rc) {
                rc = upload_errno(rc);
                abandon(w, rc);
                lib_fail(rc, "writing %s failed: %s", w->key, strerror(-rc));
        } else {
                shoal_push_stage_append(w->stage, buf, len);
                w->written += len;
        }
        shoal_fork_gate_exit(t);
        return rc ? rc : (ssize_t)len;
}

static void writer_free(struct shoal_writer *w)
{
        lib_file_closed(w->c, w->gen);
        free(w);
}

SHOAL_API int shoal_write_close(struct shoal_writer *w)
{
        if (!w)
                return lib_fail(-EINVAL, "shoal_write_close: no writer");
        if (foreign(w)) /* the parent's: its upload is not ours to commit or abort */
                return lib_fail(-EBADF,
                                "shoal_write_close: the writer of %s belongs to the "
                                "parent process",
                                w->key);
        bool t = shoal_fork_gate_enter();
        int rc = w->err;
        if (!rc) {
                struct shoal_object o;
                rc = shoal_store_upload_commit(w->up, &o);
                w->up = NULL;
                if (rc) {
                        rc = upload_errno(rc);
                        shoal_push_stage_abort(w->stage);
                        log_error("lib", "commit of %s failed: %s; no object was written", w->key,
                                  strerror(-rc));
                        lib_fail(rc, "the store did not take %s: %s", w->key, strerror(-rc));
                } else {
                        log_info("lib", "wrote %s: %llu bytes, version %s", w->key,
                                 (unsigned long long)o.size, o.version);
                        shoal_push_stage_commit(w->stage, &o);
                }
                w->stage = NULL;
        } else {
                lib_fail(rc, "writing %s failed before: %s", w->key, strerror(-rc));
        }
        writer_free(w);
        shoal_fork_gate_exit(t);
        return rc;
}

SHOAL_API void shoal_write_abort(struct shoal_writer *w)
{
        if (!w || foreign(w))
                return;
        bool t = shoal_fork_gate_enter();
        shoal_store_upload_abort(w->up);
        shoal_push_stage_abort(w->stage);
        writer_free(w);
        shoal_fork_gate_exit(t);
}

/* ---- deleting and copying ------------------------------------------------------------------ */

#define COPY_CHUNK (8u << 20)

static bool key_arg_ok(const char *key)
{
        return key && shoal_key_valid(key, strnlen(key, SHOAL_KEY_MAX + 1));
}

/* The caller's errno for a failed store call on KEY, with the message set. */
static int store_fail(int rc, const char *what, const char *key)
{
        switch (rc) {
        case -ENOENT:
                return lib_fail(rc, "%s: no such object: %s", what, key);
        case -EEXIST:
                return lib_fail(rc, "%s: %s exists", what, key);
        case -EINVAL:
                return lib_fail(rc, "%s: not a valid key for this store: %s", what, key);
        case -EACCES:
                return lib_fail(rc, "%s %s: access denied by the object store", what, key);
        case -ESTALE:
                return lib_fail(rc, "%s: %s changed during the copy", what, key);
        case -ENOMEM:
                return lib_fail(rc, "out of memory");
        default:
                return lib_fail(-EIO, "%s %s: the object store failed (%s; see the log)", what, key,
                                strerror(-rc));
        }
}

SHOAL_API int shoal_delete(struct shoal_client *c, const char *key)
{
        if (!c || !key_arg_ok(key))
                return lib_fail(-EINVAL, "shoal_delete: %s",
                                c ? "not a valid object key" : "no client");
        int rc;
        bool t = shoal_fork_gate_enter();
        struct shoal_node *n = lib_client_node(c, &rc);
        if (n) {
                rc = shoal_store_delete(n->store, key);
                if (rc)
                        rc = store_fail(rc, "delete", key);
        }
        shoal_fork_gate_exit(t);
        return rc;
}

/* The store's own copy of SRC to DST, or -EOPNOTSUPP (nothing done, no message) when the store
 * cannot make this one. SO[0] receives SRC as stat'ed, SO[1] the copy, with an empty key when
 * there is nothing to write through (no copy made, or no group). Inside the fork gate. */
static int copy_in_store(struct shoal_client *c, const char *src, const char *dst, int flags,
                         struct shoal_object *so)
{
        int rc;
        struct shoal_node *n = lib_client_node(c, &rc);
        if (!n)
                return rc;
        struct shoal_object *out = so + 1;
        out->key[0] = '\0';
        rc = shoal_store_stat(n->store, src, so);
        if (rc)
                goto out;
        if (!strcmp(src, dst))
                goto out; /* already a copy of itself */
        if (!(flags & SHOAL_WRITE_OVERWRITE)) {
                rc = shoal_store_stat(n->store, dst, out);
                rc = !rc ? -EEXIST : rc == -ENOENT ? 0 : rc;
                if (rc) {
                        rc = store_fail(rc, "copy", dst);
                        goto out_quiet;
                }
        }
        rc = shoal_store_copy(n->store, src, so, dst, out);
        if (!rc && !n->push)
                out->key[0] = '\0'; /* no group: nothing to write through */
        if (!rc)
                log_info("lib", "copied %s to %s in the store: %llu bytes, version %s", src, dst,
                         (unsigned long long)out->size, out->version);
out:
        if (rc && rc != -EOPNOTSUPP)
                rc = store_fail(rc, "copy", src);
out_quiet:
        return rc;
}

/* Write-through of an in-store copy [W3]: the bytes of SO (the source, read through the client,
 * where the group most likely has them) staged and pushed to the owners of the copy COPY's
 * blocks, so that its first readers in the group need no store GET either. Best effort, as for
 * a writer: a failure here is logged, never the copy's outcome. */
static void copy_push(struct shoal_client *c, const struct shoal_object *so,
                      const struct shoal_object *copy)
{
        struct shoal_file *f = shoal_open(c, so->key, SHOAL_RDONLY);
        struct shoal_stat *st = malloc(sizeof(*st));
        char *buf = malloc(COPY_CHUNK);
        struct shoal_push_stage *stage = NULL;
        int rc = f && st && buf ? 0 : -ENOMEM;
        if (!rc) {
                shoal_fstat(f, st);
                bool t = shoal_fork_gate_enter();
                struct shoal_node *n = lib_client_node(c, &rc);
                if (n && n->push && !strcmp(st->version, so->version))
                        stage = shoal_push_stage_begin(n->push);
                shoal_fork_gate_exit(t);
        }
        for (uint64_t off = 0; stage;) {
                ssize_t got = shoal_pread(f, buf, COPY_CHUNK, off);
                bool t = shoal_fork_gate_enter();
                if (got > 0)
                        shoal_push_stage_append(stage, buf, (size_t)got);
                else if (got == 0)
                        shoal_push_stage_commit(stage, copy);
                else
                        shoal_push_stage_abort(stage);
                shoal_fork_gate_exit(t);
                if (got <= 0)
                        break;
                off += (uint64_t)got;
        }
        free(buf);
        free(st);
        shoal_close(f);
}

/* SRC's bytes read through the client (its cache and group) and written to DST by a writer. */
static int copy_through(struct shoal_client *c, const char *src, const char *dst, int flags)
{
        struct shoal_file *f = shoal_open(c, src, SHOAL_RDONLY);
        if (!f)
                return -errno;
        int rc = 0;
        struct shoal_writer *w = shoal_write_open(c, dst, flags);
        char *buf = w ? malloc(COPY_CHUNK) : NULL;
        if (!w || !buf) {
                rc = w ? lib_fail(-ENOMEM, "out of memory") : -errno;
                goto out;
        }
        for (uint64_t off = 0;; off += (uint64_t)rc) {
                ssize_t got = shoal_pread(f, buf, COPY_CHUNK, off);
                if (got <= 0) {
                        rc = (int)got;
                        break;
                }
                rc = (int)shoal_write(w, buf, (size_t)got);
                if (rc < 0)
                        break;
        }
        if (!rc) {
                rc = shoal_write_close(w);
                w = NULL;
        }
out:
        shoal_write_abort(w);
        free(buf);
        shoal_close(f);
        return rc;
}

SHOAL_API int shoal_copy(struct shoal_client *c, const char *src, const char *dst, int flags)
{
        if (!c || !key_arg_ok(src) || !key_arg_ok(dst) || (flags & ~SHOAL_WRITE_OVERWRITE))
                return lib_fail(-EINVAL, "shoal_copy: %s",
                                !c                                 ? "no client"
                                : (flags & ~SHOAL_WRITE_OVERWRITE) ? "unknown flags"
                                                                   : "not a valid object key");
        struct shoal_object *so = malloc(2 * sizeof(*so));
        if (!so)
                return lib_fail(-ENOMEM, "out of memory");
        bool t = shoal_fork_gate_enter();
        int rc = copy_in_store(c, src, dst, flags, so);
        shoal_fork_gate_exit(t);
        if (rc == -EOPNOTSUPP)
                rc = copy_through(c, src, dst, flags);
        else if (!rc && so[1].key[0])
                copy_push(c, &so[0], &so[1]);
        free(so);
        return rc;
}
