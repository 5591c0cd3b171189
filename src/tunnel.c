#include "tunnel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "util.h"
#include "wire.h"

#define LINE_MAX_BYTES 8192
#define CLIENT_HIGH_WATER (1u << 20)

/* ---------------- requester side ---------------- */

typedef struct {
    httpd_req_t *req;  /* NULL once the client is gone */
    tp_stream_t *s;    /* NULL once closed */
    size_t got;        /* response bytes received */
    size_t unconsumed; /* written to the client, window not reopened yet */
    bool ended;
    void (*on_fail)(httpd_req_t *req, void *data, const char *why);
    void *data;
} fwd_t;

static void fwd_free_if_done(fwd_t *f)
{
    if (f->req || f->s) return;
    free(f->data); /* never handed to on_fail: ours to free */
    free(f);
}

static void fwd_client_abort(httpd_req_t *req)
{
    fwd_t *f = req->data;
    f->req = NULL;
    if (f->s) tp_stream_reset(f->s, 1);
    fwd_free_if_done(f);
}

static void fwd_client_drain(httpd_req_t *req)
{
    fwd_t *f = req->data;
    if (f->s && f->unconsumed) {
        tp_stream_consumed(f->s, f->unconsumed);
        f->unconsumed = 0;
    }
}

static void fwd_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    fwd_t *f = tp_stream_data(s);
    if (!f->req) {
        tp_stream_consumed(s, n);
        return;
    }
    f->got += n;
    httpd_write(f->req, p, n);
    if (httpd_write_queue(f->req) > CLIENT_HIGH_WATER)
        f->unconsumed += n; /* reopened by fwd_client_drain */
    else
        tp_stream_consumed(s, n);
}

static void fwd_fin(tp_stream_t *s)
{
    fwd_t *f = tp_stream_data(s);
    if (f->req && f->got) {
        httpd_end(f->req, false);
        f->ended = true;
    }
}

static void fwd_close(tp_stream_t *s, int err)
{
    fwd_t *f = tp_stream_data(s);
    f->s = NULL;
    if (f->req && !f->ended) {
        httpd_req_t *req = f->req;
        f->req = NULL;
        req->on_abort = NULL;
        req->on_drain = NULL;
        if (f->got) {
            httpd_abort(req); /* cut mid-response: the client must see it */
        } else if (f->on_fail) {
            void *data = f->data;
            f->data = NULL; /* on_fail owns it now */
            f->on_fail(req, data, err ? "the host closed the tunnel" : "empty answer");
        } else {
            httpd_respond_error(req, 502, "server_error", "upstream_failed",
                                "the node serving this model failed before answering");
        }
    } else if (f->req) {
        f->req->on_abort = NULL;
        f->req->on_drain = NULL;
        f->req = NULL;
    }
    fwd_free_if_done(f);
}

static const tp_stream_cb_t fwd_cb = {fwd_data, fwd_fin, NULL, fwd_close};

int tunnel_http_forward(tp_conn_t *conn, const char *model, httpd_req_t *req,
                        void (*on_fail)(httpd_req_t *req, void *data, const char *why), void *data)
{
    fwd_t *f = calloc(1, sizeof *f);
    if (!f) return -ENOMEM;
    f->req = req;
    f->on_fail = on_fail;
    f->data = data;
    buf_t b;
    buf_init(&b, WIRE_MAX_FRAME + (64u << 20));
    json_t *fr = json_pack("{s:i,s:s}", "v", 1, "model", model);
    int rc = fr ? wire_write(&b, WIRE_TUNNEL_HTTP, fr) : -ENOMEM;
    json_decref(fr);
    const char *ctype = httpd_header(req, "content-type");
    if (rc == 0)
        rc = buf_printf(&b,
                        "%s %s HTTP/1.1\r\nHost: mesh\r\nContent-Type: %s\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n%s: 1\r\n\r\n",
                        req->method_str, req->url, ctype ? ctype : "application/json",
                        req->body_len, TUNNEL_HOP_HEADER);
    if (rc == 0 && req->body_len) rc = buf_append(&b, req->body, req->body_len);
    if (rc == 0) rc = tp_stream_open(conn, &fwd_cb, f, &f->s);
    if (rc == 0) rc = tp_stream_write(f->s, b.data, b.len);
    buf_free(&b);
    if (rc) {
        f->data = NULL; /* still the caller's */
        if (f->s) {
            f->req = NULL; /* the caller answers */
            tp_stream_reset(f->s, 1);
        } else {
            free(f);
        }
        return rc;
    }
    tp_stream_shutdown(f->s);
    req->data = f;
    req->on_abort = fwd_client_abort;
    req->on_drain = fwd_client_drain;
    return 0;
}

/* ---------------- host side ---------------- */

typedef struct {
    uv_loop_t *loop;
    tp_stream_t *s;
    uv_tcp_t tcp;
    uv_connect_t conn_req;
    bool tcp_open, connected, tcp_eof, stream_fin, reading_paused;
    buf_t pending; /* stream bytes before the TCP connection is up (bounded by the window) */
    buf_t line;    /* the request line, until checked */
    bool line_done;
    char *api_key;
    int api_port;
} srv_t;

typedef struct {
    uv_write_t w;
    srv_t *t;
    size_t n; /* stream bytes this write carries: the window reopens when it is done */
    char data[];
} wreq_t;

static void srv_try_free(srv_t *t);

static void tcp_closed(uv_handle_t *h)
{
    srv_t *t = h->data;
    t->tcp_open = false;
    srv_try_free(t);
}

static void srv_close_tcp(srv_t *t)
{
    if (t->tcp_open && !uv_is_closing((uv_handle_t *)&t->tcp))
        uv_close((uv_handle_t *)&t->tcp, tcp_closed);
}

static void srv_try_free(srv_t *t)
{
    if (t->s || t->tcp_open) return;
    buf_free(&t->pending);
    buf_free(&t->line);
    free(t->api_key);
    free(t);
}

static void srv_fail(srv_t *t)
{
    if (t->s) tp_stream_reset(t->s, 1);
    srv_close_tcp(t);
}

static void on_tcp_written(uv_write_t *w, int status)
{
    wreq_t *r = (wreq_t *)w;
    srv_t *t = r->t;
    if (t->s && r->n) tp_stream_consumed(t->s, r->n);
    free(r);
    if (status < 0) srv_fail(t);
}

static int tcp_send(srv_t *t, const void *p, size_t n, size_t stream_bytes)
{
    wreq_t *r = malloc(sizeof *r + n);
    if (!r) return -ENOMEM;
    r->t = t;
    r->n = stream_bytes;
    memcpy(r->data, p, n);
    uv_buf_t b = uv_buf_init(r->data, (unsigned)n);
    int rc = uv_write(&r->w, (uv_stream_t *)&t->tcp, &b, 1, on_tcp_written);
    if (rc) free(r);
    return rc;
}

/* The requester's FIN is not passed on as a TCP half-close: the request is delimited by its
 * Content-Length, and an HTTP server may take a half-close for a client that went away. The
 * local API closes the connection after its answer (Connection: close). */
static void maybe_shutdown_tcp(srv_t *t)
{
    (void)t;
}

/* The request line is checked (only /v1/ endpoints) and the node's API key added after it. */
static int forward_request_bytes(srv_t *t, const uint8_t *p, size_t n)
{
    if (t->line_done) return tcp_send(t, p, n, n);
    size_t take = 0;
    const uint8_t *nl = memchr(p, '\n', n);
    take = nl ? (size_t)(nl - p) + 1 : n;
    if (buf_append(&t->line, p, take) != 0) return -E2BIG;
    if (!nl) {
        tp_stream_consumed(t->s, take);
        return 0;
    }
    t->line_done = true;
    const char *l = t->line.data;
    bool ok = (strncmp(l, "POST /v1/", 9) == 0 || strncmp(l, "GET /v1/", 8) == 0) &&
              t->line.len >= 2 && l[t->line.len - 2] == '\r';
    if (!ok) return -EPERM;
    buf_t out;
    buf_init(&out, LINE_MAX_BYTES + 512);
    int rc = buf_append(&out, t->line.data, t->line.len);
    if (rc == 0 && t->api_key) rc = buf_printf(&out, "Authorization: Bearer %s\r\n", t->api_key);
    if (rc == 0) rc = tcp_send(t, out.data, out.len, take);
    buf_free(&out);
    if (rc == 0 && n > take) rc = tcp_send(t, p + take, n - take, n - take);
    return rc;
}

static void srv_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    srv_t *t = tp_stream_data(s);
    if (!t->connected) {
        if (buf_append(&t->pending, p, n) != 0) srv_fail(t);
        return;
    }
    int rc = forward_request_bytes(t, p, n);
    if (rc) {
        LOGD("tunnel", "refusing a tunnelled request: %s", strerror(-rc));
        srv_fail(t);
    }
}

static void srv_fin(tp_stream_t *s)
{
    srv_t *t = tp_stream_data(s);
    t->stream_fin = true;
    maybe_shutdown_tcp(t);
}

static void resume_read(srv_t *t);

static void srv_drain(tp_stream_t *s)
{
    resume_read(tp_stream_data(s));
}

static void srv_stream_close(tp_stream_t *s, int err)
{
    srv_t *t = tp_stream_data(s);
    t->s = NULL;
    srv_close_tcp(t); /* the requester went away: close upstream so generation stops */
    srv_try_free(t);
}

static const tp_stream_cb_t srv_cb = {srv_data, srv_fin, srv_drain, srv_stream_close};

static void tcp_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    static char buf[65536];
    b->base = buf;
    b->len = sizeof buf;
}

static void tcp_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    srv_t *t = st->data;
    if (n == 0) return;
    if (n < 0) {
        uv_read_stop(st);
        t->tcp_eof = true;
        if (t->s) tp_stream_shutdown(t->s);
        srv_close_tcp(t);
        return;
    }
    if (!t->s) return;
    tp_stream_write(t->s, b->base, (size_t)n);
    if (tp_stream_over_high_water(t->s)) {
        uv_read_stop(st);
        t->reading_paused = true;
    }
}

static void resume_read(srv_t *t)
{
    if (t->reading_paused && t->tcp_open && !t->tcp_eof) {
        t->reading_paused = false;
        uv_read_start((uv_stream_t *)&t->tcp, tcp_alloc, tcp_read);
    }
}

static void on_connected(uv_connect_t *c, int status)
{
    srv_t *t = c->data;
    if (status < 0 || !t->s) {
        srv_fail(t);
        return;
    }
    t->connected = true;
    uv_tcp_nodelay(&t->tcp, 1); /* small SSE chunks must not wait for Nagle */
    uv_read_start((uv_stream_t *)&t->tcp, tcp_alloc, tcp_read);
    if (t->pending.len) {
        size_t n = t->pending.len;
        int rc = forward_request_bytes(t, (const uint8_t *)t->pending.data, n);
        buf_reset(&t->pending);
        if (rc) {
            srv_fail(t);
            return;
        }
    }
    maybe_shutdown_tcp(t);
}

static void drop_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    tp_stream_consumed(s, n);
}

static const tp_stream_cb_t drop_cb = {drop_data, NULL, NULL, NULL};

void tunnel_http_serve(uv_loop_t *loop, tp_stream_t *s, json_t *frame, const uint8_t *rest,
                       size_t rest_len, int api_port, const char *api_key)
{
    srv_t *t = calloc(1, sizeof *t);
    if (!t) {
        tp_stream_set_cb(s, &drop_cb, NULL); /* the mesh's callbacks no longer apply */
        tp_stream_reset(s, 1);
        return;
    }
    t->loop = loop;
    t->s = s;
    t->api_port = api_port;
    t->api_key = api_key ? strdup(api_key) : NULL;
    buf_init(&t->pending, 4u << 20);
    buf_init(&t->line, LINE_MAX_BYTES);
    tp_stream_set_cb(s, &srv_cb, t);
    uv_tcp_init(loop, &t->tcp);
    t->tcp.data = t;
    t->tcp_open = true;
    struct sockaddr_in sa;
    uv_ip4_addr("127.0.0.1", api_port, &sa);
    t->conn_req.data = t;
    if (uv_tcp_connect(&t->conn_req, &t->tcp, (struct sockaddr *)&sa, on_connected) != 0) {
        srv_fail(t);
        return;
    }
    if (rest_len) srv_data(s, rest, rest_len);
    (void)frame;
}
