/* Reads of an open block (cache_block.c opened it and verified its header): into a buffer with
 * or without the chunk CRC pass, or spliced into a pipe. With SHOAL_CACHE_READ_DIRECT a second fd
 * with O_DIRECT is opened by the first direct read, on the same inode; a file system that refuses
 * O_DIRECT (at open or at read) is read through the page cache instead. A short file is corrupt
 * (removed); an I/O error counts against the folder's health. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cache/cache_internal.h"
#include "common/util.h"
#include "metrics/metrics.h"

#define DIO_ALIGN 4096u

bool shoal_cache_block_verify(const struct shoal_cache_block *b, uint32_t off, uint32_t len,
                              const void *buf)
{
        const unsigned char *p = buf;
        if (!shoal_range_valid(b->len, off, len))
                return false;
        for (uint32_t done = 0; done < len; done += SHOAL_CHUNK_SIZE) {
                uint32_t chunk = (off + done) / SHOAL_CHUNK_SIZE;
                uint32_t clen = SHOAL_MIN(SHOAL_CHUNK_SIZE, len - done);
                if (shoal_chunk_crc(&b->id, chunk, p + done, clen) != b->crcs[chunk])
                        return false;
        }
        return true;
}

/* A second fd on the same open file, with O_DIRECT. Reopening through /proc keeps it the same
 * inode even if the name was replaced or unlinked since open_block. */
static int open_direct(struct shoal_cache *c, const struct shoal_cache_block *b)
{
        char p[64];
        struct stat a, s;
        int fd;

        snprintf(p, sizeof(p), "/proc/self/fd/%d", b->fd);
        fd = open(p, O_RDONLY | O_DIRECT | O_CLOEXEC);
        if (fd >= 0)
                return fd;
        if (errno == EINVAL)
                return CACHE_DFD_NO; /* the filesystem has no O_DIRECT */
        fd = cache_block_open_file(&c->dirs[b->dir], &b->id,
                                   O_RDONLY | O_DIRECT | O_CLOEXEC | O_NONBLOCK);
        if (fd < 0)
                return CACHE_DFD_NO;
        if (fstat(fd, &a) || fstat(b->fd, &s) || a.st_dev != s.st_dev || a.st_ino != s.st_ino ||
            fcntl(fd, F_SETFL, O_DIRECT)) {
                close(fd);
                return CACHE_DFD_NO;
        }
        return fd;
}

/* Reads with O_DIRECT when it works, else through the page cache. Returns the bytes read (at most
 * LEN; short only at the end of the file) or -errno. */
static long read_range(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                       uint32_t len, void *buf, enum shoal_cache_read_mode mode)
{
        uint64_t pos = b->data_off + off;

        if (mode == SHOAL_CACHE_READ_DIRECT && !((uintptr_t)buf % DIO_ALIGN)) {
                if (b->dfd == CACHE_DFD_NONE)
                        b->dfd = open_direct(c, b);
                if (b->dfd >= 0) {
                        size_t alen = ((size_t)len + DIO_ALIGN - 1) / DIO_ALIGN * DIO_ALIGN;
                        long n = shoal_pread_full(b->dfd, buf, alen, pos);
                        if (n != -EINVAL)
                                return n < 0 ? n : SHOAL_MIN(n, (long)len);
                        /* Accepted at open, refused at read (alignment rules of this fs). */
                        close(b->dfd);
                        b->dfd = CACHE_DFD_NO;
                }
        }
        return shoal_pread_full(b->fd, buf, len, pos);
}

/* A read of B failed: an I/O error marks the dir, a short file is corrupt. Returns -EIO or
 * -EBADMSG. */
static int read_failed(struct shoal_cache *c, struct shoal_cache_block *b, long n, const char *why)
{
        unsigned di = (unsigned)b->dir;
        if (n < 0) {
                shoal_metric_inc(SHOAL_M_blockcache_read_errors);
                if (cache_dir_failure((int)n))
                        cache_dir_io_error(c, di, (int)n);
                return -EIO;
        }
        struct stat st;
        bool known = fstat(b->fd, &st) == 0;
        cache_block_corrupt(c, &b->id, di, known ? &st : NULL, why);
        return -EBADMSG;
}

void shoal_cache_block_corrupt(struct shoal_cache *c, struct shoal_cache_block *b, const char *why)
{
        read_failed(c, b, 0, why);
}

static void read_done(uint32_t len, uint64_t t0)
{
        shoal_metric_inc(SHOAL_M_blockcache_hits);
        shoal_metric_add(SHOAL_M_blockcache_hit_bytes, len);
        shoal_metric_observe(SHOAL_M_blockcache_read_dur, shoal_now_ns() - t0);
}

static int block_read(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                      uint32_t len, void *buf, enum shoal_cache_read_mode mode, bool verify)
{
        uint64_t t0 = shoal_now_ns();
        long n;

        if (!buf || b->fd < 0 || !shoal_range_valid(b->len, off, len))
                return -EINVAL;
        n = read_range(c, b, off, len, buf, mode);
        if (n < (long)len)
                return read_failed(c, b, n, "short read");
        if (verify && !shoal_cache_block_verify(b, off, len, buf))
                return read_failed(c, b, n, "chunk checksum mismatch");
        read_done(len, t0);
        return 0;
}

int shoal_cache_block_read(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                           uint32_t len, void *buf, enum shoal_cache_read_mode mode)
{
        return block_read(c, b, off, len, buf, mode, true);
}

int shoal_cache_block_read_unverified(struct shoal_cache *c, struct shoal_cache_block *b,
                                      uint32_t off, uint32_t len, void *buf,
                                      enum shoal_cache_read_mode mode)
{
        return block_read(c, b, off, len, buf, mode, false);
}

/* Splices LEN bytes of FD from POS into the pipe PIPE_WR. Returns the bytes moved (short only
 * at the end of the file) or -errno. */
static long splice_full(int fd, uint64_t pos, size_t len, int pipe_wr)
{
        size_t done = 0;
        while (done < len) {
                loff_t o = (loff_t)(pos + done);
                ssize_t n = splice(fd, &o, pipe_wr, NULL, len - done, SPLICE_F_MOVE);
                if (n < 0 && errno == EINTR)
                        continue;
                if (n < 0)
                        return -errno;
                if (n == 0)
                        break;
                done += (size_t)n;
        }
        return (long)done;
}

/* The O_DIRECT part of a splice: the 4096-aligned head of [OFF, OFF+LEN) from the direct fd,
 * straight from the disk into the pipe's own pages. Returns the bytes moved (0: no O_DIRECT on
 * this file, all goes through the page cache) or -errno. */
static long splice_direct(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                          uint32_t len, int pipe_wr)
{
        size_t alen = len / DIO_ALIGN * DIO_ALIGN;
        if (!alen)
                return 0;
        if (b->dfd == CACHE_DFD_NONE)
                b->dfd = open_direct(c, b);
        if (b->dfd < 0)
                return 0;
        long n = splice_full(b->dfd, b->data_off + off, alen, pipe_wr);
        if (n == -EINVAL && b->dfd >= 0) { /* refused at read (alignment rules of this fs) */
                close(b->dfd);
                b->dfd = CACHE_DFD_NO;
                return 0;
        }
        return n;
}

int shoal_cache_block_splice(struct shoal_cache *c, struct shoal_cache_block *b, uint32_t off,
                             uint32_t len, int pipe_wr, enum shoal_cache_read_mode mode)
{
        uint64_t t0 = shoal_now_ns();
        long n = 0, m;

        if (pipe_wr < 0 || b->fd < 0 || !shoal_range_valid(b->len, off, len))
                return -EINVAL;
        if (mode == SHOAL_CACHE_READ_DIRECT)
                n = splice_direct(c, b, off, len, pipe_wr);
        if (n >= 0 && (uint32_t)n < len) {
                m = splice_full(b->fd, b->data_off + off + (uint64_t)n, len - (size_t)n, pipe_wr);
                n = m < 0 ? m : n + m;
        }
        if (n == -EAGAIN || n == -EPIPE || n == -EBADF)
                return (int)n; /* the pipe's fault (full, closed), not the file's */
        if (n < (long)len)
                return read_failed(c, b, n, "short read");
        read_done(len, t0);
        return 0;
}
