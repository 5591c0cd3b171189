/* The web guard: what a web page in a browser may ask of the node's HTTP servers.
 *
 * A page on another site can make the browser send "simple" requests (form posts, fetch with
 * text/plain) to 127.0.0.1 without asking first. So every state-changing request (anything but
 * GET, HEAD and OPTIONS; inference POSTs too, since they can load models):
 *   - is refused (403) when its Origin is another site's, or Sec-Fetch-Site says cross-site or
 *     same-site, unless the Origin is one of the allowed ones (--allow-origin);
 *   - must carry Content-Type: application/json (415 otherwise), which a page can only send
 *     after a CORS preflight.
 * Preflights (OPTIONS) from an allowed or same origin get the Access-Control-* answer; from any
 * other origin a 403. Same origin = http://HOST:PORT of this server, HOST a loopback name or the
 * address the client reached it at (a DNS name never is: DNS rebinding).
 *
 * Pure functions; httpd.c applies them when httpd_opts_t.web_guard is set. */
#ifndef MESH_HTTPD_GUARD_H
#define MESH_HTTPD_GUARD_H

#include <stdbool.h>
#include <stddef.h>

#define GUARD_ORIGIN_MAX 256

typedef enum {
    GUARD_PASS = 0,        /* hand the request to the handler */
    GUARD_PREFLIGHT = 204, /* answer the OPTIONS request with 204 (+ CORS headers when cors) */
    GUARD_FORBIDDEN = 403,
    GUARD_NOT_JSON = 415,
} guard_verdict_t;

typedef struct {
    const char *method;       /* "GET", "POST", ... */
    const char *origin;       /* the Origin header, or NULL */
    const char *fetch_site;   /* the Sec-Fetch-Site header, or NULL */
    const char *content_type; /* the Content-Type header, or NULL */
    const char *local_host;   /* the address the client reached us at (IP literal), or NULL */
    int port;                 /* this server's port */
    const char *const *allowed;
    size_t n_allowed;
} guard_req_t;

typedef struct {
    guard_verdict_t verdict;
    bool cors;     /* respond with Access-Control-Allow-Origin: <origin> */
    char why[384]; /* for 403 / 415: the message */
} guard_result_t;

void guard_check(const guard_req_t *in, guard_result_t *out);

/* "scheme://host[:port]" with scheme http or https, nothing after; host lowercased into host
 * (IPv6 without brackets), port defaulted from the scheme. 0 or -EINVAL. */
int guard_parse_origin(const char *origin, char *scheme, size_t scheme_len, char *host,
                       size_t host_len, int *port);
/* An --allow-origin value: a valid origin as above, at most GUARD_ORIGIN_MAX bytes. */
bool guard_origin_valid(const char *origin);
bool guard_same_origin(const char *origin, const char *local_host, int port);
/* "application/json", any case, with or without parameters. */
bool guard_is_json(const char *content_type);
/* A host that only this machine can be: "localhost", 127.0.0.0/8, ::1 (also "[::1]"). */
bool guard_loopback_name(const char *host);
/* A Host header ("name[:port]") that names this machine by a loopback name; false for NULL. */
bool guard_loopback_host_header(const char *host);
/* Access-Control-Request-Headers worth echoing: tokens and commas only, bounded. */
bool guard_request_headers_ok(const char *list);

#endif
