/* tunnel_call — see tunnel_call.h. */
#include "tunnel_call.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>

#include "meshstat.h"
#include "tunnel.h"
#include "util.h"
#include "wire.h"

struct tunnel_call {
    tp_stream_t *s;
    const tunnel_sink_t *sink; /* NULL once cancelled */
    void *ud;
    bool fin;
};

static void call_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    tunnel_call_t *c = tp_stream_data(s);
    if (!c->sink) {
        tp_stream_consumed(s, n);
        return;
    }
    metrics_tunnel_bytes(meshstat(), false, n);
    c->sink->on_data(c->ud, p, n);
}

static void call_fin(tp_stream_t *s)
{
    tunnel_call_t *c = tp_stream_data(s);
    c->fin = true;
}

static void call_close(tp_stream_t *s, int err)
{
    tunnel_call_t *c = tp_stream_data(s);
    c->s = NULL;
    if (c->sink) c->sink->on_end(c->ud, err, c->fin);
    free(c);
}

static const tp_stream_cb_t call_cb = {call_data, call_fin, NULL, call_close};

int tunnel_call_open(tp_conn_t *conn, const char *model, httpd_req_t *req, const char *body,
                     size_t body_len, const tunnel_sink_t *sink, void *ud, tunnel_call_t **out)
{
    tunnel_call_t *c = calloc(1, sizeof *c);
    if (!c) return -ENOMEM;
    c->sink = sink;
    c->ud = ud;
    req->mesh.route = METRICS_ROUTE_TUNNEL;
    snprintf(req->mesh.peer, sizeof req->mesh.peer, "%s", tp_conn_peer_id(conn));
    req->mesh.dispatch_ns = httpd_now_ns();
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
                        req->method_str, req->url, ctype ? ctype : "application/json", body_len,
                        TUNNEL_HOP_HEADER);
    if (rc == 0 && body_len) rc = buf_append(&b, body, body_len);
    if (rc == 0) rc = tp_stream_open(conn, &call_cb, c, &c->s);
    if (rc == 0) rc = tp_stream_write(c->s, b.data, b.len);
    buf_free(&b);
    if (rc) {
        if (c->s) {
            c->sink = NULL; /* freed by call_close */
            tp_stream_reset(c->s, 1);
        } else {
            free(c);
        }
        return rc;
    }
    tp_stream_shutdown(c->s);
    *out = c;
    return 0;
}

void tunnel_call_consumed(tunnel_call_t *c, size_t n)
{
    if (c->s && n) tp_stream_consumed(c->s, n);
}

void tunnel_call_cancel(tunnel_call_t *c)
{
    c->sink = NULL;
    if (c->s) tp_stream_reset(c->s, 1);
}
