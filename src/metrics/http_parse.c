#include "metrics/http_parse.h"

#include <ctype.h>
#include <stddef.h>
#include <string.h>

bool shoal_http_head_complete(const char *buf)
{
        return strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n");
}

static bool token_is(const char *s, size_t len, const char *want)
{
        return len == strlen(want) && !memcmp(s, want, len);
}

int shoal_http_parse_request(const char *head, struct shoal_http_request *req)
{
        /* Exactly "METHOD SP TARGET SP HTTP/1.x" and the end of the line: a lenient parse would
         * serve lines no client writes ("GET/metrics", a version cut short). */
        size_t ml = strspn(head, "ABCDEFGHIJKLMNOPQRSTUVWXYZ");
        if (ml == 0 || head[ml] != ' ')
                return 400;
        const char *target = head + ml + 1;
        size_t tl = strcspn(target, " \r\n");
        if (tl == 0 || target[tl] != ' ')
                return 400;
        const char *v = target + tl + 1;
        if (strncmp(v, "HTTP/1.", 7) || !isdigit((unsigned char)v[7]) ||
            (v[8] != '\r' && v[8] != '\n'))
                return 400;
        bool is_head = token_is(head, ml, "HEAD");
        if (!is_head && !token_is(head, ml, "GET"))
                return 405;
        bool stats =
                token_is(target, tl, "/stats") || token_is(target, tl, "/metrics?format=stats");
        bool prom =
                !stats && (token_is(target, tl, "/metrics") || !strncmp(target, "/metrics?", 9));
        if (!stats && !prom)
                return 404;
        req->head = is_head;
        req->route = stats ? SHOAL_HTTP_ROUTE_STATS : SHOAL_HTTP_ROUTE_METRICS;
        return 0;
}
