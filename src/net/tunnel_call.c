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
    bool answering;   /* a response byte came: no more queued signals */
    meshstat_t *stat; /* the stat of the server holding the request: tunnel bytes */
};

static void call_data(tp_stream_t *s, const uint8_t *p, size_t n)
{
    tunnel_call_t *c = tp_stream_data(s);
    if (!c->sink) {
        tp_stream_consumed(s, n);
        return;
    }
    metrics_tunnel_bytes(meshstat_metrics(c->stat), false, n);
    size_t sig = 0;
    while (!c->answering && sig < n && p[sig] == TUNNEL_QUEUED_BYTE)
        sig++;
    if (sig) {
        tp_stream_consumed(s, sig);
        if (c->sink->on_queued) c->sink->on_queued(c->ud);
        if (sig == n) return;
        p += sig;
        n -= sig;
    }
    c->answering = true;
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
    c->stat = meshstat_of(req);
    buf_t b;
    buf_init(&b, TUNNEL_REQUEST_MAX);
    int rc = tunnel_http_request(conn, model, req, body, body_len, true, &b);
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
