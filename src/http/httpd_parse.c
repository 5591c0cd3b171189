/* httpd_parse.c — llhttp's callbacks for one connection: the request line, headers (capped
 * together by max_header_bytes; chunked trailers counted and dropped) and body (capped by
 * max_body_bytes), indexed into the connection's httpd_req_t. A limit hit inside a callback
 * stops the parser with the status to answer (413/414/431); limits that are not about memory
 * (URL length, header count, one long header line) mark the request to be answered with an
 * error once it is read whole. */
#include <llhttp.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <strings.h>

#include "httpd_int.h"

static int cb_message_begin(llhttp_t *p)
{
    httpd_conn_t *c = p->data;
    buf_reset(&c->url);
    buf_reset(&c->hdr);
    buf_reset(&c->body);
    c->last_was_value = false;
    c->headers_done = false;
    c->trailer_bytes = 0;
    c->reject_status = 0;
    return 0;
}

static int limit_hit(httpd_conn_t *c, int status)
{
    c->parse_error_status = status;
    return HPE_USER;
}

/* The request line and headers together exceed max_header_bytes: 414 while the URL is still
 * arriving, 431 once headers are. */
static int header_bytes_hit(httpd_conn_t *c)
{
    return limit_hit(c, c->hdr.len == 0 ? 414 : 431);
}

static int cb_url(llhttp_t *p, const char *at, size_t len)
{
    httpd_conn_t *c = p->data;
    if (c->url.len + c->hdr.len + len > c->server->opts.max_header_bytes ||
        buf_append(&c->url, at, len))
        return header_bytes_hit(c);
    return 0;
}

/* Trailer fields of a chunked body arrive through the header callbacks after the headers were
 * indexed: appending them to hdr could move it under the request's header pointers, so they
 * are only counted (against the same cap) and dropped — nothing downstream reads trailers. */
static int trailer(httpd_conn_t *c, size_t len)
{
    c->trailer_bytes += len;
    return c->trailer_bytes > c->server->opts.max_header_bytes ? limit_hit(c, 431) : 0;
}

static int cb_header_field(llhttp_t *p, const char *at, size_t len)
{
    httpd_conn_t *c = p->data;
    if (c->headers_done) return trailer(c, len);
    if (c->last_was_value) {
        if (buf_append(&c->hdr, "", 1)) return header_bytes_hit(c);
        c->last_was_value = false;
    }
    if (c->url.len + c->hdr.len + len > c->server->opts.max_header_bytes ||
        buf_append(&c->hdr, at, len))
        return limit_hit(c, 431);
    return 0;
}

static int cb_header_value(llhttp_t *p, const char *at, size_t len)
{
    httpd_conn_t *c = p->data;
    if (c->headers_done) return trailer(c, len);
    if (!c->last_was_value) {
        if (buf_append(&c->hdr, "", 1)) return limit_hit(c, 431);
        c->last_was_value = true;
    }
    if (c->url.len + c->hdr.len + len > c->server->opts.max_header_bytes ||
        buf_append(&c->hdr, at, len))
        return limit_hit(c, 431);
    return 0;
}

static void reject(httpd_conn_t *c, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static void reject(httpd_conn_t *c, int status, const char *code, const char *fmt, ...)
{
    c->reject_status = status;
    c->reject_code = code;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(c->reject_msg, sizeof c->reject_msg, fmt, ap);
    va_end(ap);
}

static int cb_headers_complete(llhttp_t *p)
{
    httpd_conn_t *c = p->data;
    const httpd_opts_t *o = &c->server->opts;
    if (c->last_was_value && buf_append(&c->hdr, "", 1)) return limit_hit(c, 431);
    /* Index the "name\0value\0" pairs; note a line the upstream would refuse. */
    httpd_req_t *r = &c->req;
    r->n_headers = 0;
    const char *q = c->hdr.data, *end = c->hdr.data ? c->hdr.data + c->hdr.len : NULL;
    const char *long_name = NULL;
    size_t long_len = 0;
    while (q && q < end) {
        const char *name = q;
        size_t nl = strlen(q);
        q += nl + 1;
        if (q >= end) break;
        const char *value = q;
        size_t vl = strlen(q);
        q += vl + 1;
        if (r->n_headers >= HTTPD_MAX_HEADERS) return limit_hit(c, 431);
        if (!long_name && nl + vl + 4 > o->max_header_line) {
            long_name = name;
            long_len = nl + vl + 4;
        }
        r->headers[r->n_headers].name = name;
        r->headers[r->n_headers].value = value;
        r->n_headers++;
    }
    c->headers_done = true;
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > o->max_body_bytes)
        return limit_hit(c, 413);
    /* Limits that are not about memory: the request is read to its end and answered in turn,
     * so the connection stays usable (unless the client said Connection: close). */
    if (c->url.len > o->max_url_bytes)
        reject(c, 414, "uri_too_long", "request URI is %zu bytes; at most %zu", c->url.len,
               o->max_url_bytes);
    else if (r->n_headers > o->max_header_count)
        reject(c, 431, "too_many_headers", "%zu request headers; at most %zu", r->n_headers,
               o->max_header_count);
    else if (long_name)
        reject(c, 431, "header_too_large",
               "request header '%.40s' is %zu bytes; at most %zu per "
               "header line",
               long_name, long_len, o->max_header_line);
    const char *expect = httpd_header(r, "expect");
    if (!c->reject_status && expect && strcasecmp(expect, "100-continue") == 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        httpd_conn_write(c, cont, sizeof cont - 1);
    }
    return 0;
}

static int cb_body(llhttp_t *p, const char *at, size_t len)
{
    httpd_conn_t *c = p->data;
    if (c->body.len + len > c->server->opts.max_body_bytes || buf_append(&c->body, at, len))
        return limit_hit(c, 413);
    return 0;
}

static int cb_message_complete(llhttp_t *p)
{
    (void)p;
    return HPE_PAUSED;
}

void httpd_parse_settings(llhttp_settings_t *s)
{
    llhttp_settings_init(s);
    s->on_message_begin = cb_message_begin;
    s->on_url = cb_url;
    s->on_header_field = cb_header_field;
    s->on_header_value = cb_header_value;
    s->on_headers_complete = cb_headers_complete;
    s->on_body = cb_body;
    s->on_message_complete = cb_message_complete;
}
