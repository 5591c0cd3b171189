#include "tunnel.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "api_routes.h"
#include "log.h"
#include "meshstat.h"
#include "platform.h"
#include "util.h"
#include "wire.h"

#define LINE_MAX_BYTES 8192

/* ---------------- requester side ---------------- */

/* The headers this node adds to a tunnelled answer (CORS, route, hop timing). */
int tunnel_route_headers(httpd_req_t *req, char *out, size_t outlen)
{
    uint64_t now = httpd_now_ns();
    if (!req->mesh.head_ns) req->mesh.head_ns = now;
    char cors[384];
    if (httpd_cors_headers(req, cors, sizeof cors) < 0) cors[0] = '\0';
    double fb = req->mesh.dispatch_ns && now > req->mesh.dispatch_ns
                    ? (double)(now - req->mesh.dispatch_ns) / 1e6
                    : 0.0;
    int k =
        snprintf(out, outlen,
                 "%sX-Mesh-Route: tunnel:%s\r\nServer-Timing: tunnel;dur=%.1f;desc=\"%.12s\"\r\n",
                 cors, req->mesh.peer, fb, req->mesh.peer);
    return k < 0 || (size_t)k >= outlen ? -ENOSPC : k;
}

int tunnel_http_request(tp_conn_t *conn, const char *model, httpd_req_t *req, const char *body,
                        size_t body_len, bool queued_signal, buf_t *b)
{
    req->mesh.route = METRICS_ROUTE_TUNNEL;
    snprintf(req->mesh.peer, sizeof req->mesh.peer, "%s", tp_conn_peer_id(conn));
    req->mesh.dispatch_ns = httpd_now_ns();
    json_t *fr = json_pack("{s:i,s:s}", "v", 1, "model", model);
    int rc = fr ? wire_write(b, WIRE_TUNNEL_HTTP, fr) : -ENOMEM;
    json_decref(fr);
    const char *ctype = httpd_header(req, "content-type");
    if (rc == 0)
        rc = buf_printf(b,
                        "%s %s HTTP/1.1\r\nHost: mesh\r\nContent-Type: %s\r\n"
                        "Content-Length: %zu\r\nConnection: close\r\n%s: 1\r\n%s\r\n",
                        req->method_str, req->url, ctype ? ctype : "application/json", body_len,
                        TUNNEL_HOP_HEADER, queued_signal ? TUNNEL_QUEUED_HEADER ": 1\r\n" : "");
    if (rc == 0 && body_len) rc = buf_append(b, body, body_len);
    return rc;
}

/* ---------------- host side ----------------
 *
 * The request is handed to this node's own API server in-process: one end of a socketpair is
 * served by the API's httpd as if its listener had accepted it, the other end is relayed to the
 * stream. No loopback TCP connection (handshake, ephemeral port, TCP stack) per request. */

typedef struct {
    tp_stream_t *s;
    uv_pipe_t pipe;
    bool pipe_open, eof, reading_paused;
    buf_t line; /* the request line, until checked */
    bool line_done;
    meshstat_t *stat; /* the API server's: tunnel bytes */
} srv_t;

typedef struct {
    uv_write_t w;
    srv_t *t;
    size_t n; /* stream bytes this write carries: the window reopens when it is done */
    char data[];
} wreq_t;

static void srv_try_free(srv_t *t)
{
    if (t->s || t->pipe_open) return;
    buf_free(&t->line);
    free(t);
}

static void pipe_closed(uv_handle_t *h)
{
    srv_t *t = h->data;
    t->pipe_open = false;
    srv_try_free(t);
}

static void srv_close_pipe(srv_t *t)
{
    if (t->pipe_open && !uv_is_closing((uv_handle_t *)&t->pipe))
        uv_close((uv_handle_t *)&t->pipe, pipe_closed);
}

static void srv_fail(srv_t *t)
{
    if (t->s) tp_stream_reset(t->s, 1);
    srv_close_pipe(t);
}

static void on_written(uv_write_t *w, int status)
{
    wreq_t *r = (wreq_t *)w;
    srv_t *t = r->t;
    if (t->s && r->n) tp_stream_consumed(t->s, r->n);
    free(r);
    if (status < 0) srv_fail(t);
}

static int api_send(srv_t *t, const void *p, size_t n, size_t stream_bytes)
{
    uv_buf_t b = uv_buf_init((char *)p, (unsigned)n);
    int done = uv_try_write((uv_stream_t *)&t->pipe, &b, 1);
    if (done == (int)n) {
        if (t->s && stream_bytes) tp_stream_consumed(t->s, stream_bytes);
        return 0;
    }
    if (done < 0 && done != UV_EAGAIN) return done;
    if (done < 0) done = 0;
    wreq_t *r = malloc(sizeof *r + (n - (size_t)done));
    if (!r) return -ENOMEM;
    r->t = t;
    r->n = stream_bytes;
    memcpy(r->data, (const char *)p + done, n - (size_t)done);
    b = uv_buf_init(r->data, (unsigned)(n - (size_t)done));
    int rc = uv_write(&r->w, (uv_stream_t *)&t->pipe, &b, 1, on_written);
    if (rc) free(r);
    return rc;
}

/* The first request line is checked (only the model endpoints of api_routes.h, GET /v1/models and
 * GET /health) so that anything else is
 * refused before the API sees it. Every request on the connection, pipelined ones included, is
 * limited to the inference API by the API itself: the connection is served as HTTPD_PEER_TUNNEL.
 * That is also what admits it without the node's API key (the mesh admitted the member). The
 * requester's FIN is not passed on as a half-close: the request is delimited by its
 * Content-Length, and the API closes the connection after its answer (Connection: close). */
static int forward_request_bytes(srv_t *t, const uint8_t *p, size_t n)
{
    if (t->line_done) return api_send(t, p, n, n);
    const uint8_t *nl = memchr(p, '\n', n);
    size_t take = nl ? (size_t)(nl - p) + 1 : n;
    if (buf_append(&t->line, p, take) != 0) return -E2BIG;
    if (!nl) {
        tp_stream_consumed(t->s, take);
        return 0;
    }
    t->line_done = true;
    const char *l = t->line.data;
    bool ok = t->line.len >= 2 && l[t->line.len - 2] == '\r' &&
              api_route_tunnel_line_allowed(l, t->line.len - 2);
    if (!ok) return -EPERM;
    int rc = api_send(t, t->line.data, t->line.len, take);
    if (rc == 0 && n > take) rc = api_send(t, p + take, n - take, n - take);
    return rc;
}

static void srv_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    srv_t *t = tp_stream_data(s);
    int rc = t->pipe_open ? forward_request_bytes(t, p, n) : -EPIPE;
    if (rc) {
        LOGD("tunnel", "refusing a tunnelled request: %s", strerror(-rc));
        srv_fail(t);
    }
}

static void resume_read(srv_t *t);

static void srv_drain(tp_stream_t *s)
{
    resume_read(tp_stream_data(s));
}

static void srv_stream_close(tp_stream_t *s, int err)
{
    (void)err;
    srv_t *t = tp_stream_data(s);
    t->s = NULL;
    srv_close_pipe(t); /* the requester went away: the API closes upstream, generation stops */
    srv_try_free(t);
}

static const tp_stream_cb_t srv_cb = {srv_data, NULL, srv_drain, srv_stream_close};

static void pipe_alloc(uv_handle_t *h, size_t sz, uv_buf_t *b)
{
    (void)h;
    (void)sz;
    static char buf[65536];
    b->base = buf;
    b->len = sizeof buf;
}

static void pipe_read(uv_stream_t *st, ssize_t n, const uv_buf_t *b)
{
    srv_t *t = st->data;
    if (n == 0) return;
    if (n < 0) {
        uv_read_stop(st);
        t->eof = true;
        if (t->s) tp_stream_shutdown(t->s);
        srv_close_pipe(t);
        return;
    }
    if (!t->s) return;
    metrics_tunnel_bytes(meshstat_metrics(t->stat), true, (uint64_t)n);
    int rc = tp_stream_write(t->s, b->base, (size_t)n);
    if (rc) { /* reading stops at the high-water mark: only the connection's cap gets here */
        LOGD("tunnel", "tunnelled answer cut: %s", strerror(-rc));
        srv_fail(t);
        return;
    }
    if (tp_stream_over_high_water(t->s)) {
        uv_read_stop(st);
        t->reading_paused = true;
    }
}

static void resume_read(srv_t *t)
{
    if (t->reading_paused && t->pipe_open && !t->eof) {
        t->reading_paused = false;
        uv_read_start((uv_stream_t *)&t->pipe, pipe_alloc, pipe_read);
    }
}

static void drop_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    (void)p;
    tp_stream_consumed(s, n);
}

static const tp_stream_cb_t drop_cb = {drop_data, NULL, NULL, NULL};

static void refuse(tp_stream_t *s)
{
    tp_stream_set_cb(s, &drop_cb, NULL); /* the mesh's callbacks no longer apply */
    tp_stream_reset(s, 1);
}

void tunnel_http_serve(uv_loop_t *loop, tp_stream_t *s, json_t *frame, const uint8_t *rest,
                       size_t rest_len, httpd_t *api)
{
    (void)frame; /* tunnelled requests are admitted as HTTPD_PEER_TUNNEL, not by an API key */
    int sv[2];
    int prc = plat_socketpair(AF_UNIX, SOCK_STREAM, sv);
    if (prc != 0) {
        LOGW("tunnel", "cannot serve a tunnelled request: socketpair: %s", strerror(-prc));
        refuse(s);
        return;
    }
    srv_t *t = calloc(1, sizeof *t);
    if (!t || uv_pipe_init(loop, &t->pipe, 0) != 0) {
        free(t);
        close(sv[0]);
        close(sv[1]);
        refuse(s);
        return;
    }
    t->pipe.data = t;
    t->pipe_open = true;
    t->s = s;
    t->stat = api->opts.stat;
    buf_init(&t->line, LINE_MAX_BYTES);
    tp_stream_set_cb(s, &srv_cb, t);
    if (uv_pipe_open(&t->pipe, sv[0]) != 0) {
        close(sv[0]);
        close(sv[1]);
        srv_fail(t);
        return;
    }
    if (httpd_serve_fd(api, sv[1], HTTPD_PEER_TUNNEL) != 0) { /* takes sv[1], also on failure */
        srv_fail(t);
        return;
    }
    uv_read_start((uv_stream_t *)&t->pipe, pipe_alloc, pipe_read);
    if (rest_len) srv_data(s, rest, rest_len);
}
