/* Whole responses on top of httpd_write/httpd_end: status texts, JSON bodies, OpenAI-shaped
 * errors, 405 with Allow, and the CORS headers of an allowed origin. */
#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "api_routes.h"
#include "httpd_guard.h"
#include "httpd_int.h"
#include "log.h"
#include "meshstat.h"

const char *httpd_status_text(int status)
{
    switch (status) {
    case 100:
        return "Continue";
    case 200:
        return "OK";
    case 201:
        return "Created";
    case 204:
        return "No Content";
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 405:
        return "Method Not Allowed";
    case 408:
        return "Request Timeout";
    case 409:
        return "Conflict";
    case 411:
        return "Length Required";
    case 413:
        return "Payload Too Large";
    case 414:
        return "URI Too Long";
    case 415:
        return "Unsupported Media Type";
    case 429:
        return "Too Many Requests";
    case 431:
        return "Request Header Fields Too Large";
    case 500:
        return "Internal Server Error";
    case 501:
        return "Not Implemented";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "Unknown";
    }
}

int httpd_cors_headers(const httpd_req_t *req, char *out, size_t outlen)
{
    if (!req->cors_origin) {
        if (outlen) out[0] = '\0';
        return 0;
    }
    /* a page of an allowed origin may read which node answered (the console's chat) */
    int n = snprintf(out, outlen,
                     "Access-Control-Allow-Origin: %s\r\nVary: Origin\r\n"
                     "Access-Control-Expose-Headers: X-Mesh-Node, X-Mesh-Route\r\n",
                     req->cors_origin);
    return n < 0 || (size_t)n >= outlen ? -ENOSPC : n;
}

int httpd_respond(httpd_req_t *req, int status, const char *content_type, const char *body,
                  size_t len, const char *extra_headers)
{
    char head[1792], cors[384], node[96] = "";
    bool ka = req->keep_alive && !req->server->closing;
    if (httpd_cors_headers(req, cors, sizeof cors) < 0) cors[0] = '\0';
    const char *self = meshstat_node(meshstat_of(req));
    if (req->mesh.model[0] && self[0]) /* a model request: who answered it */
        snprintf(node, sizeof node, "X-Mesh-Node: %s\r\n", self);
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s%s%s\r\n",
                     status, httpd_status_text(status), content_type, len,
                     ka ? "Connection: keep-alive\r\n" : "Connection: close\r\n",
                     extra_headers ? extra_headers : "", node, cors);
    if (n < 0 || (size_t)n >= sizeof head) return -EINVAL;
    int rc = httpd_write(req, head, (size_t)n);
    if (rc == 0 && len && req->method != HTTP_HEAD) rc = httpd_write(req, body, len);
    httpd_end(req, ka);
    return rc;
}

int httpd_stream_begin(httpd_req_t *req, int status, const char *content_type,
                       const char *extra_headers)
{
    char head[1536], cors[384];
    if (httpd_cors_headers(req, cors, sizeof cors) < 0) cors[0] = '\0';
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nCache-Control: no-cache\r\n"
                     "X-Accel-Buffering: no\r\n%s%sConnection: close\r\n\r\n",
                     status, httpd_status_text(status), content_type,
                     extra_headers ? extra_headers : "", cors);
    if (n < 0 || (size_t)n >= sizeof head) return -EINVAL;
    return httpd_write(req, head, (size_t)n);
}

static int respond_error_v(httpd_req_t *req, int status, const char *extra, const char *type,
                           const char *code, const char *fmt, va_list ap)
    __attribute__((format(printf, 6, 0)));
static int respond_error_v(httpd_req_t *req, int status, const char *extra, const char *type,
                           const char *code, const char *fmt, va_list ap)
{
    char msg[1024];
    vsnprintf(msg, sizeof msg, fmt, ap);
    json_t *o =
        req->error_shape == API_ERR_ANTHROPIC
            ? json_pack("{s:s,s:{s:s,s:s}}", "type", "error", "error", "type",
                        api_anthropic_error_type(status), "message", msg)
        : req->error_shape == API_ERR_OLLAMA
            ? json_pack("{s:s}", "error", msg)
            : json_pack("{s:{s:s,s:s,s:s?}}", "error", "message", msg, "type", type, "code", code);
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    int rc =
        httpd_respond(req, status, "application/json", js ? js : "{}", js ? strlen(js) : 2, extra);
    free(js);
    return rc;
}

int httpd_respond_error(httpd_req_t *req, int status, const char *type, const char *code,
                        const char *fmt, ...)
{
    const char *extra = NULL;
    if (status == 503)
        extra = "Retry-After: 1\r\n";
    else if (status == 401)
        extra = "WWW-Authenticate: Bearer\r\n";
    va_list ap;
    va_start(ap, fmt);
    int rc = respond_error_v(req, status, extra, type, code, fmt, ap);
    va_end(ap);
    return rc;
}

static int respond_405(httpd_req_t *req, const char *extra, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int respond_405(httpd_req_t *req, const char *extra, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int rc =
        respond_error_v(req, 405, extra, "invalid_request_error", "method_not_allowed", fmt, ap);
    va_end(ap);
    return rc;
}

int httpd_respond_405(httpd_req_t *req, const char *allow)
{
    char extra[64];
    snprintf(extra, sizeof extra, "Allow: %s\r\n", allow);
    return respond_405(req, extra, "method %s not allowed on %s; use %s", req->method_str,
                       req->path, allow);
}

int httpd_respond_json(httpd_req_t *req, int status, json_t *o)
{
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    if (!s) return httpd_respond_error(req, 500, "server_error", "internal", "out of memory");
    int rc = httpd_respond(req, status, "application/json", s, strlen(s), NULL);
    free(s);
    return rc;
}

/* ---- the web guard ---- */

/* 204 to a CORS preflight (no body, no Content-Length). */
static void answer_preflight(httpd_req_t *r, bool cors)
{
    char head[1536], cors_h[384];
    const char *req_hdrs = httpd_header(r, "access-control-request-headers");
    if (!guard_request_headers_ok(req_hdrs)) req_hdrs = "Authorization, Content-Type";
    if (httpd_cors_headers(r, cors_h, sizeof cors_h) < 0) cors_h[0] = '\0';
    bool ka = r->keep_alive && !r->server->closing;
    int n;
    if (cors)
        n = snprintf(head, sizeof head,
                     "HTTP/1.1 204 No Content\r\n%sAccess-Control-Allow-Methods: GET, POST, "
                     "OPTIONS\r\nAccess-Control-Allow-Headers: %s\r\nAccess-Control-Max-Age: "
                     "600\r\nConnection: %s\r\n\r\n",
                     cors_h, req_hdrs, ka ? "keep-alive" : "close");
    else
        n = snprintf(head, sizeof head,
                     "HTTP/1.1 204 No Content\r\nAllow: GET, HEAD, POST, OPTIONS\r\nConnection: "
                     "%s\r\n\r\n",
                     ka ? "keep-alive" : "close");
    if (n > 0 && (size_t)n < sizeof head) httpd_write(r, head, (size_t)n);
    httpd_end(r, ka);
}

/* true when the guard answered the request */
bool httpd_guard_answer(httpd_req_t *r)
{
    const httpd_opts_t *o = &r->server->opts;
    char local[64] = "";
    const char *origin = httpd_header(r, "origin");
    if (origin) httpd_local_host(r, local, sizeof local);
    guard_req_t in = {
        .method = r->method_str,
        .origin = origin,
        .fetch_site = httpd_header(r, "sec-fetch-site"),
        .content_type = httpd_header(r, "content-type"),
        .local_host = local,
        .port = r->server->port,
        .allowed = o->allow_origins,
        .n_allowed = o->n_allow_origins,
    };
    guard_result_t g;
    guard_check(&in, &g);
    if (g.cors) r->cors_origin = origin;
    switch (g.verdict) {
    case GUARD_PASS:
        return false;
    case GUARD_PREFLIGHT:
        answer_preflight(r, g.cors);
        return true;
    case GUARD_FORBIDDEN:
        LOGD("httpd", "refused: %s", g.why);
        httpd_respond_error(r, 403, "invalid_request_error", "cross_site_request", "%s", g.why);
        return true;
    case GUARD_NOT_JSON:
        httpd_respond_error(r, 415, "invalid_request_error", "unsupported_media_type", "%s", g.why);
        return true;
    }
    return false;
}
