/* libFuzzer target: request heads as the metrics endpoint reads them (src/metrics/http_parse.c).
 *
 * The input is what a client sent. It is cut to the endpoint's buffer (SHOAL_METRICS_HTTP_MAX_REQ
 * bytes) and NUL-terminated as read_head does, then checked for a complete head and parsed.
 *
 * Invariants: the answer is 0 (serve), 400, 404 or 405; a served request starts with the method
 * GET or HEAD (the one it reports) and a space, and names one of the endpoint's targets; once the
 * request line has ended, nothing a client appends changes the answer (a body, more headers,
 * garbage); a complete head stays complete with bytes appended. */
#include <ctype.h>

#include "fuzz_input.h"
#include "metrics/http.h"
#include "metrics/http_parse.h"

static char buf[SHOAL_METRICS_HTTP_MAX_REQ + 1];
static char more[SHOAL_METRICS_HTTP_MAX_REQ + 64];

static const char *const tails[] = {"", "\r\n", " x", "\r\nHost: a\r\n\r\n", "/", "?", "1", "\n\n"};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
        if (size < 1)
                return 0;
        /* The first byte picks what is appended for the stability check. */
        const char *tail = tails[data[0] % (sizeof(tails) / sizeof(tails[0]))];
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
