#include "httpd_guard.h"

#include <arpa/inet.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

int guard_parse_origin(const char *origin, char *scheme, size_t scheme_len, char *host,
                       size_t host_len, int *port)
{
    if (!origin || strlen(origin) > GUARD_ORIGIN_MAX) return -EINVAL;
    const char *sep = strstr(origin, "://");
    if (!sep) return -EINVAL;
    size_t sl = (size_t)(sep - origin);
    int def_port;
    if (sl == 4 && strncasecmp(origin, "http", 4) == 0)
        def_port = 80;
    else if (sl == 5 && strncasecmp(origin, "https", 5) == 0)
        def_port = 443;
    else
        return -EINVAL;
    if (sl >= scheme_len) return -EINVAL;
    for (size_t i = 0; i < sl; i++)
        scheme[i] = (char)tolower((unsigned char)origin[i]);
    scheme[sl] = '\0';
    const char *h = sep + 3, *hend;
    const char *after;
    if (*h == '[') {
        hend = strchr(h, ']');
        if (!hend) return -EINVAL;
        after = hend + 1;
        h++;
    } else {
        hend = h + strcspn(h, ":");
        after = hend;
    }
    size_t hl = (size_t)(hend - h);
    if (hl == 0 || hl >= host_len) return -EINVAL;
    for (size_t i = 0; i < hl; i++) {
        unsigned char ch = (unsigned char)h[i];
        if (!(isalnum(ch) || ch == '-' || ch == '.' || ch == '_' || ch == ':')) return -EINVAL;
        host[i] = (char)tolower(ch);
    }
    host[hl] = '\0';
    *port = def_port;
    if (*after == ':') {
        char *end;
        long p = strtol(after + 1, &end, 10);
        if (end == after + 1 || *end || p < 1 || p > 65535 || !isdigit((unsigned char)after[1]))
            return -EINVAL;
        *port = (int)p;
    } else if (*after) {
        return -EINVAL; /* a path, a query, userinfo...: not an origin */
    }
    return 0;
}

bool guard_origin_valid(const char *origin)
{
    char scheme[8], host[GUARD_ORIGIN_MAX + 1];
    int port;
    return guard_parse_origin(origin, scheme, sizeof scheme, host, sizeof host, &port) == 0;
}

bool guard_loopback_name(const char *host)
{
    if (!host) return false;
    if (strcasecmp(host, "localhost") == 0 || strcmp(host, "::1") == 0 ||
        strcmp(host, "[::1]") == 0)
        return true;
    struct in_addr a;
    return inet_pton(AF_INET, host, &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
}

bool guard_loopback_host_header(const char *host)
{
    if (!host) return false;
    char name[GUARD_ORIGIN_MAX + 1];
    const char *end;
    if (*host == '[') {
        end = strchr(host, ']');
        if (!end) return false;
        end++;
    } else {
        end = host + strcspn(host, ":");
    }
    size_t n = (size_t)(end - host);
    if (n == 0 || n >= sizeof name) return false;
    if (*end && *end != ':') return false;
    memcpy(name, host, n);
    name[n] = '\0';
    return guard_loopback_name(name);
}

bool guard_same_origin(const char *origin, const char *local_host, int port)
{
    char scheme[8], host[GUARD_ORIGIN_MAX + 1];
    int oport;
    if (guard_parse_origin(origin, scheme, sizeof scheme, host, sizeof host, &oport) != 0)
        return false;
    if (strcmp(scheme, "http") != 0 || oport != port) return false;
    if (guard_loopback_name(host)) return true;
    return local_host && *local_host && strcasecmp(host, local_host) == 0;
}

bool guard_is_json(const char *ct)
{
    if (!ct) return false;
    while (*ct == ' ' || *ct == '\t')
        ct++;
    static const char want[] = "application/json";
    if (strncasecmp(ct, want, sizeof want - 1) != 0) return false;
    const char *rest = ct + sizeof want - 1;
    while (*rest == ' ' || *rest == '\t')
        rest++;
    return *rest == '\0' || *rest == ';';
}

bool guard_request_headers_ok(const char *list)
{
    if (!list || strlen(list) > 512) return false;
    for (const unsigned char *p = (const unsigned char *)list; *p; p++)
        if (!(isalnum(*p) || *p == '-' || *p == '_' || *p == ',' || *p == ' ')) return false;
    return true;
}

static bool allowed(const guard_req_t *in)
{
    for (size_t i = 0; in->origin && i < in->n_allowed; i++)
        if (strcasecmp(in->origin, in->allowed[i]) == 0) return true;
    return false;
}

static bool safe_method(const char *m)
{
    return strcmp(m, "GET") == 0 || strcmp(m, "HEAD") == 0;
}

/* Print at most 80 bytes of a client-supplied value, printable ASCII only. */
static void clean(const char *s, char *out, size_t outlen)
{
    size_t i = 0;
    for (; s && s[i] && i + 1 < outlen && i < 80; i++)
        out[i] = (s[i] >= 0x20 && s[i] < 0x7f) ? s[i] : '?';
    out[i] = '\0';
}

void guard_check(const guard_req_t *in, guard_result_t *out)
{
    out->verdict = GUARD_PASS;
    out->cors = false;
    out->why[0] = '\0';
    bool ok_origin = allowed(in);
    bool same = in->origin && !ok_origin && guard_same_origin(in->origin, in->local_host, in->port);
    const char *fs = in->fetch_site;
    bool fs_foreign = fs && (strcasecmp(fs, "cross-site") == 0 || strcasecmp(fs, "same-site") == 0);
    char o[96];
    clean(in->origin, o, sizeof o);

    if (strcmp(in->method, "OPTIONS") == 0) {
        if (in->origin && !ok_origin && !same) {
            out->verdict = GUARD_FORBIDDEN;
            snprintf(out->why, sizeof out->why,
                     "cross-origin requests from %s are not allowed; start the node with "
                     "--allow-origin %s to allow them",
                     o, o);
            return;
        }
        out->verdict = GUARD_PREFLIGHT;
        out->cors = ok_origin;
        return;
    }
    if (safe_method(in->method)) {
        out->cors = ok_origin;
        return;
    }
    if (!ok_origin && ((in->origin && !same) || (!in->origin && fs_foreign))) {
        out->verdict = GUARD_FORBIDDEN;
        if (in->origin)
            snprintf(out->why, sizeof out->why,
                     "cross-site request refused: this %s comes from a page of %s; start the "
                     "node with --allow-origin %s to allow that origin",
                     in->method, o, o);
        else
            snprintf(out->why, sizeof out->why,
                     "cross-site request refused: the browser says this %s request comes from "
                     "another site (Sec-Fetch-Site: %s)",
                     in->method, fs);
        return;
    }
    if (!guard_is_json(in->content_type)) {
        char ct[96];
        clean(in->content_type, ct, sizeof ct);
        out->verdict = GUARD_NOT_JSON;
        snprintf(out->why, sizeof out->why,
                 "%s requests must have 'Content-Type: application/json'%s%s%s", in->method,
                 in->content_type ? " (got '" : " (none given)", in->content_type ? ct : "",
                 in->content_type ? "')" : "");
        return;
    }
    out->cors = ok_origin;
}
