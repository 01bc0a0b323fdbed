/* libFuzzer target: request heads as the metrics endpoint reads them (src/metrics/http_parse.c).
 *
 *   byte 0    bits 0..2: what is appended for the stability checks; bits 3..4: how many of the
 *             operator's names (SHOAL_METRICS_HOSTS and the machine's) the Host check knows
 *   byte 1..  what a client sent
 *
 * The request is cut to the endpoint's buffer (SHOAL_METRICS_HTTP_MAX_REQ bytes) and
 * NUL-terminated as client_read does, then checked for a complete head, parsed, and its Host
 * header looked up and checked as handle_request does.
 *
 * Invariants: the answer is 0 (serve), 400, 404 or 405; a served request starts with the method
 * GET or HEAD (the one it reports) and a space, and names one of the endpoint's targets; once the
 * request line has ended, nothing a client appends changes the answer (a body, more headers,
 * garbage); a complete head stays complete with bytes appended. A Host value found is a trimmed
 * piece of one header line that fits its buffer, and once the head is complete nothing appended
 * changes it. The Host check never allows a value with two colons outside brackets, allows a name
 * only when it (up to the port, one trailing dot aside) is an IP literal, localhost or one of the
 * names it was given, and knowing more names never refuses a value it allowed. */
#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <strings.h>

#include "fuzz_input.h"
#include "metrics/http.h"
#include "metrics/http_parse.h"

static char buf[SHOAL_METRICS_HTTP_MAX_REQ + 1];
static char more[SHOAL_METRICS_HTTP_MAX_REQ + 64];

static const char *const tails[] = {"", "\r\n", " x", "\r\nHost: a\r\n\r\n", "/", "?", "1", "\n\n"};

static const char names[3][256] = {"shoal-host", "Metrics.Example", "a"};

/* Whether NAME (LEN bytes) is one the check allows without a list: "localhost" or an IPv4 literal
 * that inet_pton takes. */
static bool builtin_name(const char *name, size_t len)
{
        char tmp[256];
        if (len >= sizeof(tmp))
                return false;
        memcpy(tmp, name, len);
        tmp[len] = '\0';
        if (len > 1 && tmp[len - 1] == '.')
                tmp[--len] = '\0';
        struct in_addr a4;
        return !strcasecmp(tmp, "localhost") || inet_pton(AF_INET, tmp, &a4) == 1;
}

static void check_host(const char *host, unsigned n_names)
{
        bool ok = shoal_http_host_allowed(host, names, n_names);
        FZ_CHECK(ok == shoal_http_host_allowed(host, names, n_names));
        if (ok)
                FZ_CHECK(shoal_http_host_allowed(host, names, 3));
        if (!ok || host[0] == '[') {
                if (ok) {
                        const char *close = strchr(host, ']');
                        FZ_CHECK(close && (!close[1] || close[1] == ':'));
                }
                return;
        }
        const char *colon = strchr(host, ':');
        FZ_CHECK(!colon || !strchr(colon + 1, ':'));
        size_t len = colon ? (size_t)(colon - host) : strlen(host);
        FZ_CHECK(len > 0);
        if (shoal_http_host_allowed(host, names, 0)) {
                FZ_CHECK(builtin_name(host, len));
                return;
        }
        bool listed = false;
        for (unsigned i = 0; i < n_names; i++) {
                size_t nl = strlen(names[i]);
                if ((len == nl || (len == nl + 1 && host[nl] == '.')) &&
                    !strncasecmp(host, names[i], nl))
                        listed = true;
        }
        FZ_CHECK(listed);
}

/* The Host header of HEAD, and its invariants. */
static void check_header(const char *head, bool complete, const char *with_tail, unsigned n_names)
{
        char host[300], again[300];
        memset(host, 0x5a, sizeof(host));
        int hv = shoal_http_header_value(head, "Host", host, sizeof(host));
        FZ_CHECK(hv == -1 || hv == 0 || hv == 1);
        if (hv == 0)
                FZ_CHECK((unsigned char)host[0] == 0x5a);
        if (complete) {
                int hv2 = shoal_http_header_value(with_tail, "Host", again, sizeof(again));
                FZ_CHECK(hv2 == hv);
                FZ_CHECK(hv != 1 || !strcmp(again, host));
        }
        if (hv != 1)
                return;
        size_t len = strlen(host);
        FZ_CHECK(len < sizeof(host));
        FZ_CHECK(!strchr(host, '\n'));
        if (len) {
                FZ_CHECK(host[0] != ' ' && host[0] != '\t');
                char last = host[len - 1];
                FZ_CHECK(last != ' ' && last != '\t' && last != '\r');
                /* A piece of a header line "Host:" starts after the request line. */
                const char *at = strstr(strchr(head, '\n'), host);
                FZ_CHECK(at);
        }
        check_host(host, n_names);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        /* The first byte picks what is appended for the stability check. */
        const char *tail = tails[data[0] % (sizeof(tails) / sizeof(tails[0]))];
        unsigned n_names = (data[0] >> 3) % 4;
        size_t n = size - 1 < SHOAL_METRICS_HTTP_MAX_REQ ? size - 1 : SHOAL_METRICS_HTTP_MAX_REQ;
        memcpy(buf, data + 1, n);
        buf[n] = '\0';

        bool complete = shoal_http_head_complete(buf);
        struct shoal_http_request req;
        memset(&req, 0xa5, sizeof(req));
        int code = shoal_http_parse_request(buf, &req);
        FZ_CHECK(code == 0 || code == 400 || code == 404 || code == 405);

        snprintf(more, sizeof(more), "%s%s", buf, tail);
        if (complete)
                FZ_CHECK(shoal_http_head_complete(more));
        if (strchr(buf, '\n')) {
                struct shoal_http_request again;
                FZ_CHECK(shoal_http_parse_request(more, &again) == code);
                FZ_CHECK(code || (again.head == req.head && again.route == req.route));
        }
        check_header(buf, complete, more, n_names);
        /* The Host check on its own, on the first line of what was sent. */
        char first[300];
        size_t ll = strcspn(buf, "\r\n");
        ll = ll < sizeof(first) - 1 ? ll : sizeof(first) - 1;
        memcpy(first, buf, ll);
        first[ll] = '\0';
        check_host(first, n_names);
        if (code)
                return 0;

        FZ_CHECK(req.route == SHOAL_HTTP_ROUTE_METRICS || req.route == SHOAL_HTTP_ROUTE_STATS);
        const char *m = req.head ? "HEAD " : "GET ";
        FZ_CHECK(!strncmp(buf, m, strlen(m)));
        const char *target = buf + strlen(m);
        FZ_CHECK(!strncmp(target, req.route == SHOAL_HTTP_ROUTE_STATS ? "/stats " : "/metrics",
                          req.route == SHOAL_HTTP_ROUTE_STATS ? 7 : 8) ||
                 !strncmp(target, "/metrics?format=stats ", 22));
        /* The request line holds exactly two spaces and ends the line. */
        size_t line = strcspn(buf, "\r\n");
        FZ_CHECK(buf[line] == '\r' || buf[line] == '\n');
        size_t spaces = 0;
        for (size_t i = 0; i < line; i++)
                spaces += buf[i] == ' ';
        FZ_CHECK(spaces == 2);
        return 0;
}
