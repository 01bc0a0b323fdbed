/* The request side of the metrics endpoint's HTTP (internal to src/metrics): pure functions on
 * the bytes a client sent, so that they can be fuzzed on their own (tests/fuzz/fuzz_http.c). */
#ifndef SHOAL_METRICS_HTTP_PARSE_H
#define SHOAL_METRICS_HTTP_PARSE_H

#include <stdbool.h>
#include <stddef.h>

enum shoal_http_route {
        SHOAL_HTTP_ROUTE_METRICS = 1, /* /metrics, /metrics?...: Prometheus text */
        SHOAL_HTTP_ROUTE_STATS = 2,   /* /stats, /metrics?format=stats: the .stats text */
};

struct shoal_http_request {
        bool head; /* HEAD: the answer's headers only */
        enum shoal_http_route route;
};

/* True when the NUL-terminated BUF holds a whole request head: it contains the blank line that
 * ends it ("\r\n\r\n", or "\n\n" from lenient clients). */
bool shoal_http_head_complete(const char *buf);

/* Parses the request line "METHOD SP TARGET SP HTTP/1.x" followed by CR or LF at the start of
 * the NUL-terminated request head HEAD. Returns 0 with *REQ filled, or the HTTP status to answer
 * instead: 400 (a malformed request line), 405 (a method other than GET and HEAD), 404 (another
 * target). Only the request line is read: what follows it never changes the result. */
int shoal_http_parse_request(const char *head, struct shoal_http_request *req);

/* The value of header NAME (matched without regard to case, followed directly by ':') in the
 * NUL-terminated request head HEAD, with blanks and the CR around it removed, copied
 * NUL-terminated into OUT (OUTLEN bytes). The request line is never taken for a header, and the
 * search stops at the blank line that ends the head. Returns 1 when the header is present once,
 * 0 when absent (OUT untouched), -1 when present twice or its value does not fit OUT. */
int shoal_http_header_value(const char *head, const char *name, char *out, size_t outlen);

/* Whether a request may be answered for the Host value HOST ("name[:port]", "[v6][:port]"): an
 * IP literal, "localhost" (a trailing dot allowed), or one of the N_NAMES NAMES (compared without
 * regard to case). Anything else, including a name with two colons or a bracket left open, is
 * refused: a browser that a hostile page made resolve its own name to this address (DNS
 * rebinding) sends that name. */
bool shoal_http_host_allowed(const char *host, const char (*names)[256], unsigned n_names);

#endif
