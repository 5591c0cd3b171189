#include "httpd.h"

#include <errno.h>
#include <jansson.h>
#include <llhttp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "httpd_guard.h"
#include "httpd_int.h"
#include "log.h"
#include "meshstat.h"
#include "platform.h"
#include "util.h"

#define LINGER_MS 2000
#define SHRINK_ABOVE (64u << 10) /* buffers larger than this are freed between requests */
#define STAGING_KEEP (16u << 10) /* an emptied input buffer larger than this is freed */

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

static void conn_close(httpd_conn_t *c);
static void conn_process(httpd_conn_t *c);
static void conn_read_start(httpd_conn_t *c);

/* ---- the buffer account (httpd_budget_t, shared by the servers given the same one) ---- */

static size_t conn_footprint(const httpd_conn_t *c)
{
    return c->url.cap_alloc + c->hdr.cap_alloc + c->body.cap_alloc + c->path.cap_alloc +
           c->pending.cap_alloc;
}

static void conn_account(httpd_conn_t *c)
{
    size_t now = conn_footprint(c);
    httpd_budget_t *b = c->server->budget;
    b->buffered = b->buffered - c->accounted + now;
    c->accounted = now;
}

/* Between requests: large buffers go back to the allocator (an idle keep-alive connection does
 * not hold a body's worth of memory). */
static void conn_shrink(httpd_conn_t *c)
{
    if (c->body.cap_alloc > SHRINK_ABOVE) buf_free(&c->body);
    if (c->pending.len == 0 && c->pending.cap_alloc > SHRINK_ABOVE) buf_free(&c->pending);
    conn_account(c);
}

static void on_conn_handle_closed(uv_handle_t *h)
{
    httpd_conn_t *c = h->data;
    if (--c->handles_open > 0) return;
    c->server->budget->buffered -= c->accounted;
    buf_free(&c->url);
    buf_free(&c->hdr);
    buf_free(&c->body);
    buf_free(&c->path);
    buf_free(&c->pending);
    free(c->req.tail);
    free(c);
}

static void req_finished(httpd_req_t *r)
{
    void (*f)(httpd_req_t *) = r->on_finish;
    r->on_finish = NULL;
    if (f) f(r);
    httpd_filter_t *flt = r->filter;
    if (flt && flt->done) flt->done(r); /* may free flt */
    r->filter = NULL;
}

/* The filter's end, once: whether it ran. */
static bool filter_end(httpd_req_t *r, bool complete, bool *keep_alive)
{
    httpd_filter_t *flt = r->filter;
    if (!flt || !flt->end) return false;
    void (*end)(httpd_req_t *, bool, bool *) = flt->end;
    flt->end = NULL;
    flt->write = NULL;
    end(r, complete, keep_alive);
    return true;
}

static void conn_close(httpd_conn_t *c)
{
    if (c->state == CONN_CLOSED) return;
    c->state = CONN_CLOSED;
    if (c->req_live) {
        c->req_live = false;
        if (c->req.on_abort) c->req.on_abort(&c->req);
        meshstat_req_done(c->server->opts.stat, &c->req, httpd_now_ns());
        req_finished(&c->req);
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
    if (!c->reset_on_close || uv_tcp_close_reset(&c->tcp, on_conn_handle_closed) != 0)
        uv_close((uv_handle_t *)&c->tcp, on_conn_handle_closed);
}

static void on_timer(uv_timer_t *t);

static void timer_arm(httpd_conn_t *c, uint64_t ms)
{
    uv_timer_start(&c->timer, on_timer, ms, 0);
}

/* While a request is handled, the timer watches whether the client takes the response: the
 * bytes it has taken are those handed to the kernel minus those still in the socket's send
 * queue (SIOCOUTQ: unacknowledged for TCP, unread for a socketpair) — the kernel's buffers can
 * hold a whole generation, so the node's own queue alone says nothing. A client that takes no
 * bytes for write_timeout_ms while some wait is cut off (RST), which aborts its request: the
 * proxy closes its upstream connection, so llama-server cancels the generation and frees the
 * slot. Checked a few times per timeout, never per byte. */
static uint64_t watch_period(const httpd_conn_t *c)
{
    uint64_t p = c->server->opts.write_timeout_ms / 4;
    return p < 10 ? 10 : p;
}

static size_t kernel_unsent(httpd_conn_t *c)
{
    uv_os_fd_t fd;
    return uv_fileno((uv_handle_t *)&c->tcp, &fd) == 0 ? plat_sock_unsent(fd) : 0;
}

static void write_watch(httpd_conn_t *c)
{
    uint64_t now = uv_now(c->server->loop);
    size_t unsent = kernel_unsent(c);
    uint64_t delivered = c->handed - (unsent < c->handed ? unsent : c->handed);
    if (unsent + c->wq == 0 || delivered != c->delivered_seen) {
        c->delivered_seen = delivered;
        c->progress_ms = now;
    } else if (now - c->progress_ms >= c->server->opts.write_timeout_ms) {
        LOGW("httpd",
             "port %d: a client has taken none of its response for %llu ms (%zu bytes "
             "waiting); closing its connection and cancelling its request",
             c->server->port, (unsigned long long)(now - c->progress_ms), unsent + c->wq);
        c->reset_on_close = true;
        conn_close(c);
        return;
    }
    timer_arm(c, watch_period(c));
}

static void on_timer(uv_timer_t *t)
{
    httpd_conn_t *c = t->data;
    if (c->state == CONN_HANDLING) {
        write_watch(c);
        return;
    }
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

static void on_shutdown(uv_shutdown_t *sh, int status)
{
    (void)status;
    free(sh);
}

static void on_write(uv_write_t *w, int status)
{
    wreq_t *wr = (wreq_t *)w;
    httpd_conn_t *c = wr->c;
    size_t len = wr->len;
    c->wq -= len;
    free(wr);
    if (c->state == CONN_CLOSED) return;
    if (status < 0) {
        LOGD("httpd", "write failed: %s", uv_strerror(status));
        conn_close(c);
        return;
    }
    c->handed += len;
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
        conn_shrink(c);
        timer_arm(c, c->server->opts.idle_timeout_ms);
        conn_read_start(c);
        conn_process(c);
    }
}

int httpd_conn_write(httpd_conn_t *c, const void *data, size_t len)
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
            c->handed += (size_t)n;
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

static void respond_and_close(httpd_conn_t *c, int status, const char *code, const char *msg)
{
    char body[512];
    json_t *o = json_pack("{s:{s:s,s:s,s:s}}", "error", "message", msg, "type",
                          status == 503 ? "server_error" : "invalid_request_error", "code", code);
    char *js = o ? json_dumps(o, JSON_COMPACT) : NULL;
    snprintf(body, sizeof body, "%s", js ? js : "{}");
    free(js);
    json_decref(o);
    char head[256];
    int n = snprintf(head, sizeof head,
                     "HTTP/1.1 %d %s\r\nContent-Type: application/json\r\nContent-Length: %zu\r\n"
                     "%sConnection: close\r\n\r\n",
                     status, httpd_status_text(status), strlen(body),
                     status == 503 ? "Retry-After: 1\r\n" : "");
    httpd_conn_write(c, head, (size_t)n);
    httpd_conn_write(c, body, strlen(body));
    c->state = CONN_HANDLING; /* stop parsing further input */
    c->end_pending = true;
    c->end_keep_alive = false;
    conn_end_when_written(c);
}

/* ---- the web guard ---- */

void httpd_local_host(const httpd_req_t *req, char *out, size_t outlen)
{
    out[0] = '\0';
    if (req->peer == HTTPD_PEER_TUNNEL) return;
    struct sockaddr_storage ss;
    int len = sizeof ss;
    if (uv_tcp_getsockname(&req->conn->tcp, (struct sockaddr *)&ss, &len) != 0) return;
    if (ss.ss_family == AF_INET)
        uv_ip4_name((struct sockaddr_in *)&ss, out, outlen);
    else if (ss.ss_family == AF_INET6)
        uv_ip6_name((struct sockaddr_in6 *)&ss, out, outlen);
}

static void dispatch(httpd_conn_t *c)
{
    httpd_req_t *r = &c->req;
    llhttp_t *p = &c->parser;
    c->state = CONN_HANDLING;
    r->server = c->server;
    r->conn = c;
    r->data = NULL;
    r->on_abort = NULL;
    r->on_drain = NULL;
    r->on_finish = NULL;
    r->finish_data = NULL;
    r->tag = 0;
    r->keep_tail = false;
    r->filter = NULL;
    free(r->tail);
    r->tail = NULL;
    r->tail_len = 0;
    r->peer = c->peer;
    r->cors_origin = NULL;
    r->error_shape = 0;
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
    metrics_req_init(&r->mesh, r->start_ns);
    r->rq_ok = false;
    c->end_pending = false;
    c->above_high = false;
    c->req_live = true;
    c->delivered_seen = UINT64_MAX; /* the first check counts as progress */
    c->progress_ms = uv_now(c->server->loop);
    timer_arm(c, watch_period(c));
    if (c->reject_status) {
        httpd_respond_error(r, c->reject_status, "invalid_request_error", c->reject_code, "%s",
                            c->reject_msg);
        return;
    }
    if (c->server->opts.web_guard && httpd_guard_answer(r)) return;
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
        const httpd_opts_t *o = &c->server->opts;
        char msg[128];
        if (c->parse_error_status == 413) {
            snprintf(msg, sizeof msg, "request body larger than the limit of %zu bytes",
                     o->max_body_bytes);
            respond_and_close(c, 413, "body_too_large", msg);
        } else if (c->parse_error_status == 414) {
            snprintf(msg, sizeof msg, "request URI larger than the limit of %zu bytes",
                     o->max_header_bytes);
            respond_and_close(c, 414, "uri_too_long", msg);
        } else if (c->parse_error_status == 431) {
            if (c->headers_done || c->req.n_headers >= HTTPD_MAX_HEADERS)
                snprintf(msg, sizeof msg, "more than %d request headers", HTTPD_MAX_HEADERS);
            else
                snprintf(msg, sizeof msg, "request headers larger than the limit of %zu bytes",
                         o->max_header_bytes);
            respond_and_close(c, 431, "header_too_large", msg);
        } else {
            char why[256];
            snprintf(why, sizeof why, "malformed HTTP request: %s",
                     llhttp_get_error_reason(&c->parser));
            respond_and_close(c, 400, "bad_request", why);
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
    bool over_conn = c->pending.len + (size_t)nread > cap;
    const httpd_budget_t *bud = c->server->budget;
    size_t cap_all = bud->cap ? bud->cap : HTTPD_DEFAULT_BUFFER_CAP;
    bool over_all = bud->buffered + (size_t)nread > cap_all;
    if (over_conn || over_all) {
        if (c->state == CONN_HANDLING) {
            uv_read_stop(st); /* a pipelining client far ahead of us: wait */
            c->reading = false;
        } else if (over_conn) {
            respond_and_close(c, 413, "body_too_large", "request too large");
        } else {
            LOGW("httpd", "port %d: %zu bytes of requests buffered (cap %zu); answering 503",
                 c->server->port, bud->buffered, cap_all);
            respond_and_close(c, 503, "server_busy",
                              "the server is holding too much request data right now; retry "
                              "shortly");
        }
        return;
    }
    buf_append(&c->pending, b->base, (size_t)nread);
    if (c->state != CONN_HANDLING) conn_process(c);
    if (c->state == CONN_CLOSED) return;
    if (c->pending.len == 0 && c->pending.cap_alloc > STAGING_KEEP) buf_free(&c->pending);
    conn_account(c);
}

static void conn_read_start(httpd_conn_t *c)
{
    if (!c->reading && c->state != CONN_CLOSED) {
        if (uv_read_start((uv_stream_t *)&c->tcp, on_alloc, on_read) == 0) c->reading = true;
    }
}

/* A connection object on s (counted, linked); its tcp handle is initialized but not yet open. */
static httpd_conn_t *conn_new(httpd_t *s, httpd_peer_t peer)
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
    c->peer = peer;
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
        /* a clear answer, not a silent close (best effort: the socket's buffer is empty) */
        static const char body[] =
            "{\"error\":{\"message\":\"too many connections to this node; retry shortly\","
            "\"type\":\"unavailable\",\"code\":\"too_many_connections\"}}";
        char head[192];
        int n = snprintf(head, sizeof head,
                         "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
                         "Retry-After: 1\r\nConnection: close\r\nContent-Length: %zu\r\n\r\n",
                         sizeof body - 1);
        LOGW("httpd", "too many connections (%u); refusing one", s->n_conns - 1);
        uv_buf_t b[2] = {uv_buf_init(head, (unsigned)n),
                         uv_buf_init((char *)body, sizeof body - 1)};
        uv_try_write((uv_stream_t *)&c->tcp, b, 2);
        /* a lingering close, so a request the client already sent does not turn into a reset
         * that destroys the answer before it is read */
        c->state = CONN_LINGER;
        uv_shutdown_t *sh = malloc(sizeof *sh);
        if (sh && uv_shutdown(sh, (uv_stream_t *)&c->tcp, on_shutdown) != 0) free(sh);
        timer_arm(c, LINGER_MS);
        conn_read_start(c);
        return -EMFILE;
    }
    uv_tcp_nodelay(&c->tcp, 1);
    httpd_parse_settings(&c->settings);
    llhttp_init(&c->parser, HTTP_REQUEST, &c->settings);
    c->parser.data = c;
    timer_arm(c, s->opts.idle_timeout_ms);
    conn_read_start(c);
    return 0;
}

int httpd_serve_fd(httpd_t *s, uv_os_sock_t fd, httpd_peer_t peer)
{
    httpd_conn_t *c = s->closing ? NULL : conn_new(s, peer);
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
    s->lfd = s->reserve_fd = -1;
    httpd_opts_t *o = &s->opts;
    if (!o->max_header_bytes) o->max_header_bytes = 64 * 1024;
    if (!o->max_header_line) o->max_header_line = HTTPD_DEFAULT_MAX_HEADER_LINE;
    if (!o->max_header_count) o->max_header_count = HTTPD_DEFAULT_MAX_HEADER_COUNT;
    if (!o->max_url_bytes) o->max_url_bytes = HTTPD_DEFAULT_MAX_URL;
    if (!o->max_body_bytes) o->max_body_bytes = 8 * 1024 * 1024;
    if (!o->idle_timeout_ms) o->idle_timeout_ms = 60000;
    if (!o->read_timeout_ms) o->read_timeout_ms = 30000;
    if (!o->write_timeout_ms) o->write_timeout_ms = 30000;
    if (!o->max_conns) o->max_conns = 4096;
    s->budget = o->budget ? o->budget : &s->own_budget;
    s->data = opts->data;
    return httpd_listen_open(s, opts->host, opts->port);
}

void httpd_stop(httpd_t *s)
{
    if (s->closing) return;
    s->closing = true;
    httpd_listen_close(s);
    while (s->conns)
        conn_close(s->conns);
}

const char *httpd_header(const httpd_req_t *req, const char *name)
{
    for (size_t i = 0; i < req->n_headers; i++)
        if (strcasecmp(req->headers[i].name, name) == 0) return req->headers[i].value;
    return NULL;
}

/* The last HTTPD_TAIL_BYTES bytes written (req->keep_tail); out of memory: no tail. */
static void keep_tail(httpd_req_t *req, const char *p, size_t n)
{
    if (!req->tail && !(req->tail = malloc(HTTPD_TAIL_BYTES))) return;
    if (n >= HTTPD_TAIL_BYTES) {
        memcpy(req->tail, p + n - HTTPD_TAIL_BYTES, HTTPD_TAIL_BYTES);
        req->tail_len = HTTPD_TAIL_BYTES;
        return;
    }
    if (req->tail_len + n > HTTPD_TAIL_BYTES) {
        size_t drop = req->tail_len + n - HTTPD_TAIL_BYTES;
        memmove(req->tail, req->tail + drop, req->tail_len - drop);
        req->tail_len -= drop;
    }
    memcpy(req->tail + req->tail_len, p, n);
    req->tail_len += n;
}

int httpd_write(httpd_req_t *req, const void *data, size_t len)
{
    httpd_conn_t *c = req->conn;
    if (!c->req_live) return -EPIPE;
    if (req->keep_tail && len) keep_tail(req, data, len);
    if (req->filter && req->filter->write) return req->filter->write(req, data, len);
    return httpd_write_through(req, data, len);
}

int httpd_write_through(httpd_req_t *req, const void *data, size_t len)
{
    httpd_conn_t *c = req->conn;
    if (!c->req_live) return -EPIPE;
    if (!req->mesh.status && len >= 12 && memcmp(data, "HTTP/1.", 7) == 0) {
        const char *d = (const char *)data + 9; /* "HTTP/1.1 200 ..." */
        if (d[0] >= '1' && d[0] <= '5' && d[1] >= '0' && d[1] <= '9' && d[2] >= '0' && d[2] <= '9')
            req->mesh.status = (d[0] - '0') * 100 + (d[1] - '0') * 10 + (d[2] - '0');
    }
    return httpd_conn_write(c, data, len);
}

size_t httpd_write_queue(const httpd_req_t *req)
{
    return req->conn->wq;
}

size_t httpd_unsent(const httpd_req_t *req)
{
    return req->conn->wq + kernel_unsent(req->conn);
}

void httpd_end(httpd_req_t *req, bool keep_alive)
{
    httpd_conn_t *c = req->conn;
    if (!c->req_live) return;
    filter_end(req, true, &keep_alive);
    c->req_live = false;
    meshstat_req_done(c->server->opts.stat, req, httpd_now_ns());
    c->end_keep_alive = keep_alive && req->keep_alive && !c->server->closing;
    c->end_pending = true;
    req_finished(req);
    conn_end_when_written(c);
}

void httpd_abort(httpd_req_t *req)
{
    httpd_conn_t *c = req->conn;
    bool live = c->req_live;
    bool ka = false;
    if (live && filter_end(req, false, &ka)) { /* the filter ended the answer: let it out */
        httpd_end(req, false);
        return;
    }
    if (live) meshstat_req_done(c->server->opts.stat, req, httpd_now_ns());
    c->req_live = false;
    if (live) req_finished(req);
    conn_close(c);
}
