/* tunnels — see tunnels.h. */
#include "tunnels.h"

#include <errno.h>

#include "tunnel.h"
#include "tunnel_rpc.h"
#include "util.h"
#include "wire.h"

/* One answer frame, then FIN; a stream whose answer cannot be written is reset. */
static void answer_route_request(tunnels_t *t, tp_stream_t *s, const char *from, json_t *frame)
{
    json_t *ans = t->route_request(t->data, from, frame);
    buf_t b;
    buf_init(&b, WIRE_MAX_FRAME + 8);
    int rc = ans ? wire_write(&b, -1, ans) : -EINVAL;
    if (rc == 0) rc = tp_stream_write(s, b.data, b.len);
    buf_free(&b);
    json_decref(ans);
    if (rc == 0) {
        t->route_in++;
        tp_stream_shutdown(s);
    } else {
        tp_stream_reset(s, 3);
    }
}

bool tunnels_take(void *tunnels, tp_stream_t *s, int type, const char *from, json_t *frame,
                  const uint8_t *rest, size_t n)
{
    tunnels_t *t = tunnels;
    if (type == WIRE_TUNNEL_HTTP && t->api) {
        /* the tunnel module takes the stream over, with the bytes after the frame */
        tunnel_http_serve(t->loop, s, frame, rest, n, t->api);
        return true;
    }
    if (type == WIRE_ROUTE_REQUEST && t->route_request) {
        answer_route_request(t, s, from, frame);
        return true;
    }
    if (type == WIRE_TUNNEL_RPC && t->rpc_port) {
        /* only the host of a plan this node works for reaches its rpc-server */
        const char *model = json_string_value(json_object_get(frame, "model"));
        tunnel_rpc_serve(t->loop, s, frame, rest, n, t->rpc_port(t->data, from, model ? model : ""),
                         t->rpc_opts, t->rpc_stats);
        return true;
    }
    return false;
}

uint64_t tunnels_route_requests(const tunnels_t *t)
{
    return t->route_in;
}
