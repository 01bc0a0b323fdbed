/* Sending one answer on a socket (server/answer.h). */
#include "server/answer.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/sendfile.h>
#include <sys/socket.h>
#include <sys/uio.h>

#include "common/log.h"
#include "common/util.h"
#include "server/engine.h"
#include "server/pipes.h"

/* SHOAL_SRC_PIPE: moves pipe bytes into the socket; when the pipe is empty and the answer is
 * longer than a pipe (splice mode, page cache only), first refills it from the cache file. */
static ssize_t pipe_send(int fd, struct shoal_req *r, size_t left)
{
        struct shoal_pipe *p = r->pipe;
        uint64_t unpiped = r->len - r->pay_piped;
        if (!p->bytes && unpiped) {
                loff_t off = (loff_t)(r->cb.data_off + r->off + r->pay_piped);
                ssize_t n = splice(r->cb.fd, &off, p->wr, NULL, (size_t)SHOAL_MIN(unpiped, p->cap),
                                   SPLICE_F_MOVE | SPLICE_F_NONBLOCK);
                if (n <= 0) {
                        log_warn("server", "splice from the cache file of %s/%u failed: %s",
                                 r->obj.key, r->index, n == 0 ? "file truncated" : strerror(errno));
                        return SHOAL_ANSWER_BROKEN;
                }
                p->bytes += (size_t)n;
                r->pay_piped += (uint64_t)n;
        }
        ssize_t n =
                splice(p->rd, NULL, fd, NULL, SHOAL_MIN(p->bytes, left),
                       SPLICE_F_MOVE | SPLICE_F_NONBLOCK | (left > p->bytes ? SPLICE_F_MORE : 0));
        if (n > 0)
                p->bytes -= (size_t)n;
        return n;
}

/* A memory answer (a dio buffer, a held block): what is left of its header and payload in one
 * sendmsg. */
static ssize_t send_mem(int fd, const struct shoal_req *r)
{
        const char *base = r->src == SHOAL_SRC_BUF ? r->buf : r->hb.data + r->off;
        struct iovec iov[2];
        int n = 0;
        if (r->out_sent < r->out_len)
                iov[n++] = (struct iovec){(void *)(r->out + r->out_sent), r->out_len - r->out_sent};
        iov[n++] = (struct iovec){(void *)(base + r->pay_sent), (size_t)(r->len - r->pay_sent)};
        struct msghdr m = {.msg_iov = iov, .msg_iovlen = (size_t)n};
        return sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT);
}

/* SHOAL_SRC_FILE: sendfile from the cache file. */
static ssize_t send_file(int fd, const char *peer, const struct shoal_req *r)
{
        off_t off = (off_t)(r->cb.data_off + r->off + r->pay_sent);
        ssize_t n = sendfile(fd, r->cb.fd, &off, (size_t)(r->len - r->pay_sent));
        if (n == 0) {
                log_warn("server", "cache file of %s/%u truncated while sending to %s", r->obj.key,
                         r->index, peer);
                return SHOAL_ANSWER_BROKEN;
        }
        return n;
}

bool shoal_answer_sent(const struct shoal_req *r)
{
        uint64_t pay = r->status == SHOAL_ST_OK ? r->len : 0;
        return r->out_sent == r->out_len && r->pay_sent >= pay;
}

ssize_t shoal_answer_send(int fd, const char *peer, struct shoal_req *r)
{
        bool ok = r->status == SHOAL_ST_OK;
        if (ok && (r->src == SHOAL_SRC_BUF || r->src == SHOAL_SRC_HELD))
                return send_mem(fd, r);
        if (r->out_sent < r->out_len)
                return send(fd, r->out + r->out_sent, r->out_len - r->out_sent,
                            MSG_NOSIGNAL | MSG_DONTWAIT | (ok ? MSG_MORE : 0));
        if (r->src == SHOAL_SRC_PIPE)
                return pipe_send(fd, r, (size_t)(r->len - r->pay_sent));
        return send_file(fd, peer, r);
}

void shoal_answer_advance(struct shoal_req *r, size_t n)
{
        size_t h = SHOAL_MIN(n, r->out_len - r->out_sent);
        r->out_sent += h;
        r->pay_sent += n - h;
}
