#include "metrics/http_parse.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <netinet/in.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

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

int shoal_http_header_value(const char *head, const char *name, char *out, size_t outlen)
{
        size_t nl = strlen(name);
        int found = 0;
        const char *p = strchr(head, '\n'); /* skip the request line */
        while (p && p[1] && p[1] != '\r' && p[1] != '\n') {
                const char *line = p + 1;
                p = strchr(line, '\n');
                if (strncasecmp(line, name, nl) || line[nl] != ':')
                        continue;
                if (found++)
                        return -1;
                const char *v = line + nl + 1, *end = p ? p : line + strlen(line);
                while (v < end && (*v == ' ' || *v == '\t'))
                        v++;
                while (end > v && (end[-1] == '\r' || end[-1] == ' ' || end[-1] == '\t'))
                        end--;
                if ((size_t)(end - v) >= outlen)
                        return -1;
                memcpy(out, v, (size_t)(end - v));
                out[end - v] = '\0';
        }
        return found;
}

bool shoal_http_host_allowed(const char *host, const char (*names)[256], unsigned n_names)
{
        char name[256];
        const char *end;
        if (host[0] == '[') {
                end = strchr(host, ']');
                if (!end || (end[1] && end[1] != ':') || (size_t)(end - host - 1) >= sizeof(name))
                        return false;
                memcpy(name, host + 1, (size_t)(end - host - 1));
                name[end - host - 1] = '\0';
                struct in6_addr a6;
                return inet_pton(AF_INET6, name, &a6) == 1;
        }
        end = strchr(host, ':');
        size_t len = end ? (size_t)(end - host) : strlen(host);
        if (!len || len >= sizeof(name) || (end && strchr(end + 1, ':')))
                return false;
        memcpy(name, host, len);
        name[len] = '\0';
        if (len > 1 && name[len - 1] == '.')
                name[--len] = '\0'; /* "localhost." is "localhost" */
        struct in_addr a4;
        if (inet_pton(AF_INET, name, &a4) == 1 || !strcasecmp(name, "localhost"))
                return true;
        for (unsigned i = 0; i < n_names; i++)
                if (!strcasecmp(name, names[i]))
                        return true;
        return false;
}
