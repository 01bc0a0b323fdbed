#include "metrics/http_parse.h"

#include <stdio.h>
#include <string.h>

bool shoal_http_head_complete(const char *buf)
{
        return strstr(buf, "\r\n\r\n") || strstr(buf, "\n\n");
}

int shoal_http_parse_request(const char *head, struct shoal_http_request *req)
{
        char method[8], target[256], version[16];
        if (sscanf(head, "%7[A-Z] %255[^ \r\n] %15[^ \r\n]", method, target, version) != 3 ||
            strncmp(version, "HTTP/1.", 7))
                return 400;
        bool is_head = !strcmp(method, "HEAD");
        if (!is_head && strcmp(method, "GET"))
                return 405;
        bool stats = !strcmp(target, "/stats") || !strcmp(target, "/metrics?format=stats");
        bool prom = !stats && (!strcmp(target, "/metrics") || !strncmp(target, "/metrics?", 9));
        if (!stats && !prom)
                return 404;
        req->head = is_head;
        req->route = stats ? SHOAL_HTTP_ROUTE_STATS : SHOAL_HTTP_ROUTE_METRICS;
        return 0;
}
