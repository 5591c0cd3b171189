/* tunnel — HTTP through the mesh (TUNNEL_HTTP streams).
 *
 * Requester side: tunnel_http_request() builds what the stream carries, for tunnel_call.h (the
 * node's relay, node/relay.h, the only forwarder): [0x04][frame {"v":1,"model":NAME}] followed
 * by the request as HTTP/1.1 bytes (Connection: close, X-Mesh-Hop: 1), then half-close; the
 * relay adds tunnel_route_headers() after the status line of the host's answer.
 *
 * Host side: tunnel_http_serve() takes over an incoming TUNNEL_HTTP stream and hands it to this
 * node's own API server in-process, over a socketpair (the API then routes it to the local
 * llama-server, loading the model if needed), both directions with back-pressure. Requests carrying
 * X-Mesh-Hop are never forwarded again (no loops).
 */
#ifndef MESH_TUNNEL_H
#define MESH_TUNNEL_H

#include <jansson.h>
#include <stdbool.h>
#include <uv.h>

#include "httpd.h"
#include "transport.h"
#include "util.h"
#include "wire.h"

#define TUNNEL_HOP_HEADER "x-mesh-hop"

/* The queued signal (additive, optional): a requester that sends this header (value 1) accepts
 * TUNNEL_QUEUED_BYTE bytes before the response's status line. A host whose admission queue holds
 * such a request sends one when it queues it and one every TUNNEL_QUEUED_EVERY_MS while it waits
 * (node/admission.c), so the requester knows the host is holding the request rather than stuck,
 * and restarts its first-byte deadline (node/relay.c). A host of an older version ignores the
 * header and sends none; a requester of an older version never sends it, so gets none. */
#define TUNNEL_QUEUED_HEADER "x-mesh-queued-signal"
#define TUNNEL_QUEUED_BYTE '\n'
#define TUNNEL_QUEUED_EVERY_MS 5000

/* Largest request a TUNNEL_HTTP stream opens with: the control frame, head and body. */
#define TUNNEL_REQUEST_MAX (WIRE_MAX_FRAME + (64u << 20))

/* Append to b what a TUNNEL_HTTP stream for req starts with: the control frame naming model,
 * then req's request line and head (with TUNNEL_QUEUED_HEADER when queued_signal), with body
 * (body_len bytes: the request's own body or a rewritten one) — the one builder of the requester
 * side (tunnel_call.h). Marks req's metrics record as tunnelled to conn's peer. 0 or a negative
 * errno. */
int tunnel_http_request(tp_conn_t *conn, const char *model, httpd_req_t *req, const char *body,
                        size_t body_len, bool queued_signal, buf_t *b);

/* The headers a node adds after the status line of a tunnelled answer (CORS for an allowed
 * origin, X-Mesh-Route, Server-Timing of the hop), from req->mesh. Returns the length or
 * -ENOSPC. */
int tunnel_route_headers(httpd_req_t *req, char *out, size_t outlen);

/* Serve an incoming TUNNEL_HTTP stream whose frame has been read; `rest` holds the bytes that
 * followed the frame. api is this node's API server, which serves the stream as
 * HTTPD_PEER_TUNNEL: every request on it is limited to the inference API (api_routes.h) and
 * needs no API key. Called by tunnels.h for incoming TUNNEL_HTTP streams. */
void tunnel_http_serve(uv_loop_t *loop, tp_stream_t *s, json_t *frame, const uint8_t *rest,
                       size_t rest_len, httpd_t *api);

#endif
