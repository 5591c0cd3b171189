#include "httpd.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "log.h"
#include "util.h"

#define LINGER_MS 2000

typedef enum {
    CONN_IDLE,     /* waiting for the first byte of a request */
    CONN_READING,  /* a request is arriving */
    CONN_HANDLING, /* dispatched; the handler owns the response */
    CONN_LINGER,   /* final response written; draining input before close */
    CONN_CLOSED,
} conn_state_t;

struct httpd_conn {
    uv_tcp_t tcp;
    uv_timer_t timer;
    httpd_t *server;
    httpd_conn_t *next, *prev;
    conn_state_t state;
    llhttp_t parser;
    llhttp_settings_t settings;
    buf_t url;
    buf_t hdr; /* "name\0value\0..." */
    buf_t body;
    buf_t path;
    buf_t pending; /* bytes received while a request is being handled */
    bool last_was_value;
    bool headers_done;
    bool reading;
    int parse_error_status; /* 413 when a limit was hit inside a callback */
    size_t wq;              /* bytes queued for writing */
    bool above_high;
    bool end_pending; /* response complete once the queue drains */
    bool end_keep_alive;
    int handles_open;
    httpd_req_t req;
    bool req_live; /* req handed to the handler and not yet ended/aborted */
};

typedef struct {
    uv_write_t w;
    httpd_conn_t *c;
    size_t len;
    char data[];
} wreq_t;

uint64_t httpd_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

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

static void conn_close(httpd_conn_t *c);
static void conn_process(httpd_conn_t *c);
static void conn_read_start(httpd_conn_t *c);

static void on_conn_handle_closed(uv_handle_t *h)
{
    httpd_conn_t *c = h->data;
    if (--c->handles_open > 0) return;
    buf_free(&c->url);
    buf_free(&c->hdr);
    buf_free(&c->body);
    buf_free(&c->path);
    buf_free(&c->pending);
    free(c);
}

static void conn_close(httpd_conn_t *c)
{
    if (c->state == CONN_CLOSED) return;
    c->state = CONN_CLOSED;
    if (c->req_live) {
        c->req_live = false;
        if (c->req.on_abort) c->req.on_abort(&c->req);
    }
    httpd_t *s = c->server;
    if (c->prev)
        c->prev->next = c->next;
    else
        s->conns = c->next;
    if (c->next) c->next->prev = c->prev;
    s->n_conns--;
    uv_timer_stop(&c->timer);
    uv_close((uv_handle_t *)&c->timer, on_conn_handle_closed);
    uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}

static void on_timer(uv_timer_t *t)
{
    httpd_conn_t *c = t->data;
    if (c->state == CONN_READING) {
        /* Slow client: answer 408 and close. */
        LOGD("httpd", "request read timeout; closing connection");
        const char *msg = "{\"error\":{\"message\":\"request not received in time\","
                          "\"type\":\"invalid_request_error\",\"code\":\"request_timeout\"}}";
        char head[256];
        int n = snprintf(head, sizeof head,
                         "HTTP/1.1 408 Request Timeout\r\nContent-Type: application/json\r\n"
                         "Content-Length: %zu\r\nConnection: close\r\n\r\n",
                         strlen(msg));
        uv_buf_t bufs[2] = {uv_buf_init(head, (unsigned)n), uv_buf_init((char *)msg, strlen(msg))};
        uv_try_write((uv_stream_t *)&c->tcp, bufs, 2);
    }
    conn_close(c);
}

static void timer_arm(httpd_conn_t *c, uint64_t ms)
{
    uv_timer_start(&c->timer, on_timer, ms, 0);
}

static void on_shutdown(uv_shutdown_t *sh, int status)
{
    (void)status;
    free(sh);
}

static void on_write(uv_write_t *w, int status)
{
    wreq_t *wr = (wreq_t *)w;
    httpd_conn_t *c = wr->c;
    c->wq -= wr->len;
    free(wr);
    if (c->state == CONN_CLOSED) return;
    if (status < 0) {
        LOGD("httpd", "write failed: %s", uv_strerror(status));
        conn_close(c);
        return;
    }
    if (c->req_live && c->above_high && c->wq < HTTPD_WRITE_LOW_WATER) {
        c->above_high = false;
        if (c->req.on_drain) c->req.on_drain(&c->req);
        if (c->state == CONN_CLOSED) return;
    }
    if (c->end_pending && c->wq == 0) {
        c->end_pending = false;
        if (!c->end_keep_alive) {
            c->state = CONN_LINGER;
            uv_shutdown_t *sh = malloc(sizeof *sh);
            if (sh && uv_shutdown(sh, (uv_stream_t *)&c->tcp, on_shutdown) != 0) free(sh);
            timer_arm(c, LINGER_MS);
            conn_read_start(c);
            return;
        }
        c->state = CONN_IDLE;
        timer_arm(c, c->server->opts.idle_timeout_ms);
        conn_read_start(c);
        conn_process(c);
    }
}

static int conn_write(httpd_conn_t *c, const void *data, size_t len)
{
    if (c->state == CONN_CLOSED) return -EPIPE;
    if (len == 0) return 0;
    if (c->wq == 0) {
        /* Nothing queued: hand the bytes to the kernel now (no copy, no request, no callback,
         * no epoll re-arm) and queue only what the socket did not take. An error other than
         * EAGAIN is left to uv_write below, which reports it through on_write as before. */
        uv_buf_t b = uv_buf_init((char *)data, (unsigned)len);
        int n = uv_try_write((uv_stream_t *)&c->tcp, &b, 1);
        if (n > 0) {
            data = (const char *)data + n;
            len -= (size_t)n;
            if (len == 0) return 0;
        }
    }
    wreq_t *wr = malloc(sizeof *wr + len);
    if (!wr) return -ENOMEM;
    wr->c = c;
    wr->len = len;
    memcpy(wr->data, data, len);
    uv_buf_t b = uv_buf_init(wr->data, (unsigned)len);
    int rc = uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, on_write);
    if (rc < 0) {
        free(wr);
        return rc;
    }
    c->wq += len;
    if (c->wq >= HTTPD_WRITE_HIGH_WATER) c->above_high = true;
    return 0;
}

/* c->end_pending is set: finish the response in on_write once the queue is empty. With nothing
 * queued (written at once, or never) an empty write takes the same path, after the caller
 * returns. */
static void conn_end_when_written(httpd_conn_t *c)
{
    if (c->wq != 0 || c->state == CONN_CLOSED) return;
    wreq_t *wr = malloc(sizeof *wr);
    if (!wr) {
        conn_close(c);
        return;
    }
    wr->c = c;
    wr->len = 0;
    uv_buf_t b = uv_buf_init(wr->data, 0);
    if (uv_write(&wr->w, (uv_stream_t *)&c->tcp, &b, 1, on_write) < 0) {
        free(wr);
        conn_close(c);
    }
}

/* ---- parsing ---- */

static int cb_message_begin(llhttp_t *p)
{
    httpd_conn_t *c = p->data;
    buf_reset(&c->url);
    buf_reset(&c->hdr);
    buf_reset(&c->body);
    c->last_was_value = false;
    c->headers_done = false;
    return 0;
}

static int limit_hit(httpd_conn_t *c, int status)
{
    c->parse_error_status = status;
    return HPE_USER;
}

static int cb_url(llhttp_t *p, const char *at, size_t len)
{
    httpd_conn_t *c = p->data;
    if (c->url.len + c->hdr.len + len > c->server->opts.max_header_bytes ||
        buf_append(&c->url, at, len))
        return limit_hit(c, 413);
    return 0;
}

static int cb_header_field(llhttp_t *p, const char *at, size_t len)
{
    httpd_conn_t *c = p->data;
    if (c->last_was_value) {
        if (buf_append(&c->hdr, "", 1)) return limit_hit(c, 413);
        c->last_was_value = false;
    }
    if (c->url.len + c->hdr.len + len > c->server->opts.max_header_bytes ||
        buf_append(&c->hdr, at, len))
        return limit_hit(c, 413);
    return 0;
}

static int cb_header_value(llhttp_t *p, const char *at, size_t len)
{
    httpd_conn_t *c = p->data;
    if (!c->last_was_value) {
        if (buf_append(&c->hdr, "", 1)) return limit_hit(c, 413);
        c->last_was_value = true;
    }
    if (c->url.len + c->hdr.len + len > c->server->opts.max_header_bytes ||
        buf_append(&c->hdr, at, len))
        return limit_hit(c, 413);
    return 0;
}

static int cb_headers_complete(llhttp_t *p)
{
    httpd_conn_t *c = p->data;
    if (c->last_was_value && buf_append(&c->hdr, "", 1)) return limit_hit(c, 413);
    /* Index the "name\0value\0" pairs. */
    httpd_req_t *r = &c->req;
    r->n_headers = 0;
    const char *q = c->hdr.data, *end = c->hdr.data ? c->hdr.data + c->hdr.len : NULL;
    while (q && q < end) {
        const char *name = q;
        q += strlen(q) + 1;
        if (q >= end) break;
        const char *value = q;
        q += strlen(q) + 1;
        if (r->n_headers >= HTTPD_MAX_HEADERS) return limit_hit(c, 431);
        r->headers[r->n_headers].name = name;
        r->headers[r->n_headers].value = value;
        r->n_headers++;
    }
    c->headers_done = true;
    if ((p->flags & F_CONTENT_LENGTH) && p->content_length > c->server->opts.max_body_bytes)
        return limit_hit(c, 413);
    const char *expect = httpd_header(r, "expect");
    if (expect && strcasecmp(expect, "100-continue") == 0) {
        static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
        conn_write(c, cont, sizeof cont - 1);
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
    return HPE_PAUSED;
}

static void respond_and_close(httpd_conn_t *c, int status, const char *code, const char *msg)
{
    char body[512];
    json_t *o = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type",
                          "invalid_request_error", "code", code);
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    snprintf(body, sizeof body, "%s", js ? js : "{}");
    free(js);
    json_decref(o);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "Connection: close\r\n\r\n",
                     status, httpd_status_text(status), strlen(body));
    conn_write(c, head, (size_t)n);
    conn_write(c, body, strlen(body));
    c->state = CONN_HANDLING; /* stop parsing further input */
    c->end_pending = true;
    c->end_keep_alive = false;
    conn_end_when_written(c);
}

static void dispatch(httpd_conn_t *c)
{
    httpd_req_t *r = &c->req;
    llhttp_t *p = &c->parser;
    uv_timer_stop(&c->timer);
    c->state = CONN_HANDLING;
    r->server = c->server;
    r->conn = c;
    r->data = NULL;
    r->on_abort = NULL;
    r->on_drain = NULL;
    r->method = llhttp_get_method(p);
    r->method_str = llhttp_method_name((llhttp_method_t)r->method);
    r->url = c->url.data ? c->url.data : "";
    r->path = r->url;
    const char *qm = strchr(r->url, '?');
    if (qm) {
        buf_reset(&c->path);
        if (buf_append(&c->path, r->url, (size_t)(qm - r->url)) == 0) r->path = c->path.data;
    }
    r->body = c->body.data ? c->body.data : "";
    r->body_len = c->body.len;
    r->keep_alive = llhttp_should_keep_alive(p);
    r->start_ns = httpd_now_ns();
    c->end_pending = false;
    c->above_high = false;
    c->req_live = true;
    c->server->opts.handler(r);
}

/* Feed buffered input (c->pending) to the parser while the connection can take a request. */
static void conn_process(httpd_conn_t *c)
{
    while (c->state == CONN_IDLE || c->state == CONN_READING) {
        if (c->pending.len == 0) return;
        if (c->state == CONN_IDLE) {
            c->state = CONN_READING;
            timer_arm(c, c->server->opts.read_timeout_ms);
        }
        size_t n = c->pending.len;
        llhttp_errno_t err = llhttp_execute(&c->parser, c->pending.data, n);
        if (err == HPE_OK) {
            buf_reset(&c->pending);
            if (!c->headers_done && c->url.len + c->hdr.len > c->server->opts.max_header_bytes) {
                respond_and_close(c, 413, "header_too_large", "request header too large");
            }
            return;
        }
        if (err == HPE_PAUSED) {
            size_t used = (size_t)(llhttp_get_error_pos(&c->parser) - c->pending.data);
            llhttp_resume(&c->parser);
            /* Keep the rest (pipelined requests) for later; the request's strings live in the
             * url/hdr/body buffers, not in pending. */
            buf_consume(&c->pending, used);
            dispatch(c);
            return;
        }
        if (err == HPE_PAUSED_UPGRADE) {
            /* The request before asked for Upgrade (or was a CONNECT) and got a plain HTTP/1.1
             * answer: we never switch protocols, so what follows is the next request. */
            size_t used = (size_t)(llhttp_get_error_pos(&c->parser) - c->pending.data);
            llhttp_resume_after_upgrade(&c->parser);
            buf_consume(&c->pending, used);
            continue;
        }
        if (c->parse_error_status == 413) {
            char msg[128];
            if (c->headers_done)
                snprintf(msg, sizeof msg, "request body larger than the limit of %zu bytes",
                         c->server->opts.max_body_bytes);
            else
                snprintf(msg, sizeof msg, "request header larger than the limit of %zu bytes",
                         c->server->opts.max_header_bytes);
            respond_and_close(c, 413, c->headers_done ? "body_too_large" : "header_too_large", msg);
        } else if (c->parse_error_status == 431) {
            respond_and_close(c, 431, "too_many_headers", "too many request headers");
        } else {
            char msg[256];
            snprintf(msg, sizeof msg, "malformed HTTP request: %s",
                     llhttp_get_error_reason(&c->parser));
            respond_and_close(c, 400, "bad_request", msg);
        }
        buf_reset(&c->pending);
        return;
    }
}

static void on_alloc(uv_handle_t *h, size_t suggested, uv_buf_t *b)
{
    static char slab[65536]; /* single-threaded loop: read callbacks never overlap */
    (void)h;
    (void)suggested;
    *b = uv_buf_init(slab, sizeof slab);
}

static void on_read(uv_stream_t *st, ssize_t nread, const uv_buf_t *b)
{
    httpd_conn_t *c = st->data;
    if (nread == 0) return;
    if (nread < 0) {
        conn_close(c); /* EOF or error: the client is gone (aborts an in-flight request) */
        return;
    }
    if (c->state == CONN_LINGER || c->state == CONN_CLOSED) return; /* discard */
    size_t cap = c->server->opts.max_header_bytes + c->server->opts.max_body_bytes + 65536;
    if (c->pending.len + (size_t)nread > cap) {
        if (c->state == CONN_HANDLING) {
            uv_read_stop(st); /* a pipelining client far ahead of us: wait */
            c->reading = false;
        } else {
            respond_and_close(c, 413, "body_too_large", "request too large");
        }
        return;
    }
    buf_append(&c->pending, b->base, (size_t)nread);
    if (c->state == CONN_HANDLING) return;
    conn_process(c);
}

static void conn_read_start(httpd_conn_t *c)
{
    if (!c->reading && c->state != CONN_CLOSED) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
    }
}

/* A connection object on s (counted, linked); its tcp handle is initialized but not yet open. */
static httpd_conn_t *conn_new(httpd_t *s)
{
    httpd_conn_t *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    uv_tcp_init(s->loop, &c->tcp);
    c->tcp.data = c;
    c->handles_open = 2;
    uv_timer_init(s->loop, &c->timer);
    c->timer.data = c;
    c->server = s;
    c->state = CONN_IDLE;
    buf_init(&c->url, s->opts.max_header_bytes + 1024);
    buf_init(&c->hdr, s->opts.max_header_bytes + 1024);
    buf_init(&c->body, s->opts.max_body_bytes);
    buf_init(&c->path, s->opts.max_header_bytes + 1024);
    buf_init(&c->pending, s->opts.max_header_bytes + s->opts.max_body_bytes + 65536);
    c->next = s->conns;
    if (s->conns) s->conns->prev = c;
    s->conns = c;
    s->n_conns++;
    return c;
}

/* The tcp handle is open: enforce the connection cap, set up the parser, start reading. */
static int conn_begin(httpd_conn_t *c)
{
    httpd_t *s = c->server;
    if (s->n_conns > s->opts.max_conns) {
        LOGW("httpd", "too many connections (%u); refusing one", s->n_conns - 1);
        conn_close(c);
        return -EMFILE;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    llhttp_settings_init(&c->settings);
    c->settings.on_message_begin = cb_message_begin;
    c->settings.on_url = cb_url;
    c->settings.on_header_field = cb_header_field;
    c->settings.on_header_value = cb_header_value;
    c->settings.on_headers_complete = cb_headers_complete;
    c->settings.on_body = cb_body;
    c->settings.on_message_complete = cb_message_complete;
    llhttp_init(&c->parser, HTTP_REQUEST, &c->settings);
    c->parser.data = c;
    timer_arm(c, s->opts.idle_timeout_ms);
    conn_read_start(c);
    return 0;
}

static void on_connection(uv_stream_t *ls, int status)
{
    httpd_t *s = ls->data;
    if (status < 0) {
        LOGW("httpd", "accept error: %s", uv_strerror(status));
        return;
    }
    httpd_conn_t *c = conn_new(s);
    if (!c) return;
    if (uv_accept(ls, (uv_stream_t *)&c->tcp) != 0) {
        conn_close(c);
        return;
    }
    conn_begin(c);
}

int httpd_serve_fd(httpd_t *s, uv_os_sock_t fd)
{
    httpd_conn_t *c = s->closing ? NULL : conn_new(s);
    if (!c) {
        close(fd);
        return s->closing ? -ESHUTDOWN : -ENOMEM;
    }
    int rc = uv_tcp_open(&c->tcp, fd);
    if (rc) {
        conn_close(c);
        close(fd);
        return rc;
    }
    return conn_begin(c);
}

int httpd_start(httpd_t *s, uv_loop_t *loop, const httpd_opts_t *opts)
{
    memset(s, 0, sizeof *s);
    s->loop = loop;
    s->opts = *opts;
    if (!s->opts.max_header_bytes) s->opts.max_header_bytes = 64 * 1024;
    if (!s->opts.max_body_bytes) s->opts.max_body_bytes = 8 * 1024 * 1024;
    if (!s->opts.idle_timeout_ms) s->opts.idle_timeout_ms = 60000;
    if (!s->opts.read_timeout_ms) s->opts.read_timeout_ms = 30000;
    if (!s->opts.max_conns) s->opts.max_conns = 4096;
    s->data = opts->data;
    struct sockaddr_storage ss;
    int rc = uv_ip4_addr(opts->host, opts->port, (struct sockaddr_in *)&ss);
    if (rc) rc = uv_ip6_addr(opts->host, opts->port, (struct sockaddr_in6 *)&ss);
    if (rc) return rc;
    uv_tcp_init(loop, &s->listener);
    s->listener.data = s;
    rc = uv_tcp_bind(&s->listener, (struct sockaddr *)&ss, 0);
    if (rc == 0) rc = uv_listen((uv_stream_t *)&s->listener, 1024, on_connection);
    if (rc) {
        uv_close((uv_handle_t *)&s->listener, NULL);
        return rc;
    }
    int len = sizeof ss;
    uv_tcp_getsockname(&s->listener, (struct sockaddr *)&ss, &len);
    s->port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
    return 0;
}

void httpd_stop(httpd_t *s)
{
    if (s->closing) return;
    s->closing = true;
    uv_close((uv_handle_t *)&s->listener, NULL);
    while (s->conns)
        conn_close(s->conns);
}

const char *httpd_header(const httpd_req_t *req, const char *name)
{
    for (size_t i = 0; i < req->n_headers; i++)
        if (strcasecmp(req->headers[i].name, name) == 0) return req->headers[i].value;
    return NULL;
}

int httpd_write(httpd_req_t *req, const void *data, size_t len)
{
    httpd_conn_t *c = req->conn;
    if (!c->req_live) return -EPIPE;
    return conn_write(c, data, len);
}

size_t httpd_write_queue(const httpd_req_t *req)
{
    return req->conn->wq;
}

void httpd_end(httpd_req_t *req, bool keep_alive)
{
    httpd_conn_t *c = req->conn;
    if (!c->req_live) return;
    c->req_live = false;
    c->end_keep_alive = keep_alive && req->keep_alive && !c->server->closing;
    c->end_pending = true;
    conn_end_when_written(c);
}

void httpd_abort(httpd_req_t *req)
{
    httpd_conn_t *c = req->conn;
    c->req_live = false;
    conn_close(c);
}

int httpd_respond(httpd_req_t *req, int status, const char *content_type, const char *body,
                  size_t len, const char *extra_headers)
{
    char head[1024];
    bool ka = req->keep_alive && !req->server->closing;
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n%s%s\r\n",
                     status, httpd_status_text(status), content_type, len,
                     ka ? "Connection: keep-alive\r\n" : "Connection: close\r\n",
                     extra_headers ? extra_headers : "");
    if (n < 0 || (size_t)n >= sizeof head) return -EINVAL;
    int rc = httpd_write(req, head, (size_t)n);
    if (rc == 0 && len && req->method != HTTP_HEAD) rc = httpd_write(req, body, len);
    httpd_end(req, ka);
    return rc;
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
        json_pack("{s:{s:s,s:s,s:s?}}", "error", "message", msg, "type", type, "code", code);
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
