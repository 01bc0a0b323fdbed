/* The metrics endpoint [V2]: a small HTTP/1.1 server on its own thread that answers
 *   GET /metrics               Prometheus text (0.0.4), labels cache_group, role, volume
 *   GET /stats                 the `.stats` text [V3] (also /metrics?format=stats)
 * and a matching client for `shoal stats HOST:PORT`.
 *
 * Histogram quantiles (NAME_tp50/_tp90/_tp99/_max) cover a sliding window: the server thread
 * takes a snapshot of every metric once a second into a ring, and a scrape compares a fresh
 * snapshot with the newest ring entry at least SHOAL_METRICS_WINDOW_S old (the oldest one while
 * the process is younger than that). The window therefore does not depend on who scrapes or how
 * often, and two scrapers never shorten each other's window.
 *
 * Bounds: up to SHOAL_METRICS_HTTP_MAX_CLIENTS connections at once, served together by one
 * thread that never waits on any of them (a slow client delays no other; when all places are
 * taken the one closest to its deadline gives way); a request head of at most
 * SHOAL_METRICS_HTTP_MAX_REQ bytes; SHOAL_METRICS_HTTP_TIMEOUT_MS (SHOAL_METRICS_CLIENT_TIMEOUT)
 * from accept to the last byte of the answer, then the connection is closed (Connection: close).
 * The data path is never touched: rendering only reads the per-thread counters.
 *
 * DNS rebinding: a request's Host must be an IP literal, "localhost", this machine's name, the
 * name --metrics was given, or one listed in SHOAL_METRICS_HOSTS (comma-separated); any other is
 * answered 403, so a web page that makes a browser resolve its own name to this address cannot
 * read the metrics. A request without Host (HTTP/1.0) is answered. */
#ifndef SHOAL_METRICS_HTTP_H
#define SHOAL_METRICS_HTTP_H

#include <stddef.h>
#include <stdint.h>

#define SHOAL_METRICS_DEFAULT_HOST     "127.0.0.1"
#define SHOAL_METRICS_DEFAULT_PORT     9567
#define SHOAL_METRICS_PORT_TRIES       100 /* default address: 9567..9666, first free one */
#define SHOAL_METRICS_WINDOW_S         15
#define SHOAL_METRICS_HTTP_MAX_REQ     8192
#define SHOAL_METRICS_HTTP_TIMEOUT_MS  2000
#define SHOAL_METRICS_HTTP_MAX_CLIENTS 32
#define SHOAL_METRICS_HTTP_MAX_HOSTS   16

struct shoal_metrics_http_config {
        const char *addr;        /* HOST:PORT (port 0: chosen by the system); NULL: default */
        const char *cache_group; /* label value; NULL: "" */
        const char *role;        /* label value, "Provider" or "Consumer"; NULL: "" */
        const char *volume;      /* label value; NULL: no volume label */
};

struct shoal_metrics_http;

/* Binds the address (an explicit one exactly; the default 127.0.0.1:9567 or the next free port of
 * SHOAL_METRICS_PORT_TRIES), logs "prometheus metrics listening on IP:PORT" and starts the thread.
 * Returns the server, or NULL with one line in ERR (also for an invalid SHOAL_METRICS_HOSTS).
 * The config's strings are copied. */
struct shoal_metrics_http *shoal_metrics_http_start(const struct shoal_metrics_http_config *cfg,
                                                    char *err, size_t errlen);
/* The bound address as "IP:PORT"; valid until stop. */
const char *shoal_metrics_http_addr(const struct shoal_metrics_http *h);
/* Stops the thread (at most one request's timeout later), closes the socket, frees H. NULL is a
 * no-op. */
void shoal_metrics_http_stop(struct shoal_metrics_http *h);

/* Splits "HOST:PORT" ("[V6]:PORT" for IPv6; an empty HOST means every interface) into HOST (at
 * most HOSTLEN-1 bytes) and PORT. Returns 0 or -EINVAL. Does not resolve HOST. */
int shoal_metrics_addr_parse(const char *s, char *host, size_t hostlen, uint16_t *port);

/* Client: GET PATH from ADDR ("HOST:PORT") with a total deadline of TIMEOUT_MS. On success
 * returns 0 and *BODY (malloc'd, NUL-terminated, caller frees) with *LEN bytes; otherwise a
 * negative errno (-ECONNREFUSED, -ETIMEDOUT, -EPROTO for a non-200 or malformed answer, -EFBIG
 * past 16 MiB, -EINVAL for a bad ADDR) with one line in ERR. */
int shoal_metrics_http_get(const char *addr, const char *path, unsigned timeout_ms, char **body,
                           size_t *len, char *err, size_t errlen);

#endif
