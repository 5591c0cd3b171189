/* tunnel_call — one HTTP request through a TUNNEL_HTTP stream whose response bytes go to the
 * caller (not straight to the client). The node's relay (node/relay.h), the only forwarder,
 * uses it to watch a routed response: first-byte deadline, retry, and continuing a stream on
 * another replica when its host dies.
 *
 * The request sent is built by tunnel_http_request() ([0x04][frame {"v":1,"model"}], then
 * HTTP/1.1 with Connection: close and X-Mesh-Hop: 1, then half-close), with the method, URL and
 * Content-Type of req and the given body (the original, or a continuation). The route is noted
 * in req->mesh (peer, dispatch time) for tunnel_route_headers() and the metrics. The request
 * asks for the queued signal (tunnel.h, TUNNEL_QUEUED_HEADER): the signal bytes before the
 * response are taken out here and reported through on_queued. */
#ifndef MESH_TUNNEL_CALL_H
#define MESH_TUNNEL_CALL_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "httpd.h"
#include "transport.h"

typedef struct tunnel_call tunnel_call_t;

typedef struct {
    /* Response bytes; call tunnel_call_consumed(n) once they are passed on (flow control). */
    void (*on_data)(void *ud, const uint8_t *p, size_t n);
    /* The stream is over: fin = the host finished its response cleanly; err from the
     * transport (0 clean). The last callback: the call is freed when it returns. */
    void (*on_end)(void *ud, int err, bool fin);
    /* The host's admission queue holds the request (sent when queued, then every
     * TUNNEL_QUEUED_EVERY_MS); only before the first response byte. May be NULL; must not cancel
     * the call. */
    void (*on_queued)(void *ud);
} tunnel_sink_t;

/* Returns 0 with *out set, or a negative errno (nothing sent, no callback will run). */
int tunnel_call_open(tp_conn_t *conn, const char *model, httpd_req_t *req, const char *body,
                     size_t body_len, const tunnel_sink_t *sink, void *ud, tunnel_call_t **out);
void tunnel_call_consumed(tunnel_call_t *c, size_t n);
/* Reset the stream (the host stops generating); no callback runs after this. */
void tunnel_call_cancel(tunnel_call_t *c);

#endif
