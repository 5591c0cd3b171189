/* tunnel_rpc — llama.cpp RPC through the mesh (TUNNEL_RPC streams).
 *
 * A split-model host runs `llama-server --rpc 127.0.0.1:P1,…`. Each Pi is a listener of this
 * module (tunnel_rpc_listen, 127.0.0.1 only): every TCP connection llama-server makes to it gets
 * its own QUIC stream to one worker node, [0x02][frame {"v":1,"model":NAME}], then raw bytes in
 * both directions with half-close. The worker (tunnel_rpc_serve, called by tunnels.h for incoming
 * TUNNEL_RPC streams) connects the stream to its local ggml-rpc-server on 127.0.0.1 and relays.
 *
 * Relays stream both ways with back-pressure: TCP reading stops while the stream's send queue is
 * over its high-water mark and resumes on drain; stream bytes are acknowledged (which reopens the
 * peer's flow-control window) only once the TCP socket has taken them, so at most one stream
 * window per relay is ever buffered. TCP EOF becomes a stream FIN and a stream FIN a TCP
 * shutdown; a reset stream or a lost connection closes the TCP side and a TCP error resets the
 * stream. TCP_NODELAY on both TCP sides: llama.cpp RPC is request/response, latency bound.
 * The host side counts request/response turns per stream (tunnel_rpc_stats_t.host_turns).
 *
 * Lifetime: everything is freed from close callbacks; tunnel_rpc_close may be called from any
 * callback (including get_conn) and tears down the listener and every relay it started.
 */
#ifndef MESH_TUNNEL_RPC_H
#define MESH_TUNNEL_RPC_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "transport.h"

#define TUNNEL_RPC_RETRY_MS 50
/* Coalescing of the bytes read from llama-server / rpc-server into one write per burst
 * (rpc_frame.h): held bytes wait at most this long (1-2 ms: loop time) for the rest of their
 * burst, which in the pinned llama.cpp always comes at once. tunnel_rpc_opts_t.coalesce false
 * turns coalescing off (each read is written at once). */
#define TUNNEL_RPC_HOLD_MS 1
#define TUNNEL_RPC_MAX_LINKS 256 /* per listener; more connections are closed at once */

typedef struct rpc_fwd rpc_fwd_t;

/* The counters of the node's RPC tunnels (in /api/status "rpc_tunnel" and /metrics), owned by
 * the node and handed to both sides. */
typedef struct {
    uint64_t host_tx, host_rx;     /* host side: bytes TCP->stream (to workers), stream->TCP */
    uint64_t worker_rx, worker_tx; /* worker side: bytes stream->rpc-server, rpc-server->stream */
    uint64_t links_opened, links_failed;   /* host side: TCP connections that got a stream / not */
    uint64_t worker_opened, worker_failed; /* worker side: connected to rpc-server / reset */
    uint64_t links_active;                 /* relays alive now (both sides) */
    uint64_t read_pauses; /* TCP reads stopped because the stream was over high water */
    /* host side: request/response turns (rpc_turns.h: bytes to a worker, then its reply), the
     * round trips llama.cpp RPC waited for; turns per decoded token = round trips per token */
    uint64_t host_turns;
    /* both sides: bursts written to the stream (rpc_frame.h coalescing: a burst ends where the
     * other side must answer, or when no more bytes came within TUNNEL_RPC_HOLD_MS — those
     * are counted in hold_expired too) */
    uint64_t bursts, hold_expired;
    uint64_t suspects; /* host side: workers suspected (tunnel_rpc_on_suspect) */
} tunnel_rpc_stats_t;
/* The node fills these from its tunables (MESH_LLM_RPC_*); NULL where taken: the defaults. */
typedef struct {
    uint64_t connect_ms; /* a host-side link waits this long for get_conn (default 5000) */
    uint64_t quiet_ms;   /* a reply overdue this long: suspect (default TUNNEL_RPC_QUIET_MS) */
    bool coalesce;       /* coalesce reads into one write per burst (default true) */
} tunnel_rpc_opts_t;
void tunnel_rpc_opts_default(tunnel_rpc_opts_t *o);

/* Host side. Listen on 127.0.0.1:0. Each accepted TCP connection gets a TUNNEL_RPC stream to
 * peer `peer_id` (get_conn(data, peer_id) returns the ready tp_conn_t* or NULL while a dial is
 * under way — then it is asked again every TUNNEL_RPC_RETRY_MS for up to connect_ms, after which
 * the TCP connection is closed) and the bytes are relayed both ways until either side closes.
 * get_conn is called from the loop (accept and timer callbacks), never from inside this call.
 * 0 or negative errno. */
int tunnel_rpc_listen(uv_loop_t *loop, const char *peer_id, const char *model,
                      tp_conn_t *(*get_conn)(void *data, const char *peer_id), void *data,
                      const tunnel_rpc_opts_t *opts, rpc_fwd_t **out);
int tunnel_rpc_port(const rpc_fwd_t *f);
/* Host side: cb(data, peer_id, why) (data: tunnel_rpc_listen's) when a link to the worker
 * fails — its stream is reset or closed before llama-server closed it, its connection is lost,
 * no connection came in time — or when bytes went to the worker and no reply came for
 * quiet_ms (again every as long while it lasts). A hint, not a verdict: a reply may
 * just take long; the caller probes the worker (mesh_suspect). Never called from inside a
 * tunnel_rpc_* call; links accepted before this call are not watched. */
#define TUNNEL_RPC_QUIET_MS 2000
typedef void (*tunnel_rpc_suspect_cb)(void *data, const char *peer_id, const char *why);
void tunnel_rpc_on_suspect(rpc_fwd_t *f, tunnel_rpc_suspect_cb cb);
/* Host side: cb(data, f, ms) (data: this call's) for every observed stage of the
 * worker: ms from the end of a GRAPH_COMPUTE / GRAPH_RECOMPUTE command read from llama-server
 * (rpc_frame.h computes) to the first byte of the worker's next reply (its output tensor: the
 * worker computed its layers meanwhile, rpc-server runs commands in order), network time
 * included (stage.h subtracts the RTT). Only with coalescing (the framing sees the commands).
 * Called from the relay's stream callback: cb must not close the listener. */
typedef void (*tunnel_rpc_stage_cb)(void *data, rpc_fwd_t *f, double ms);
void tunnel_rpc_on_stage(rpc_fwd_t *f, tunnel_rpc_stage_cb cb, void *data);
/* Close the listener and every relay it started (deferred frees, safe from callbacks). */
void tunnel_rpc_close(rpc_fwd_t *f);

/* Worker side: take over an incoming TUNNEL_RPC stream whose frame has been read (`rest` = bytes
 * after the frame) and connect it to 127.0.0.1:rpc_port (rpc_port <= 0: reset the stream).
 * A frame without a non-empty "model" string resets the stream. As mesh's stream reader does,
 * the caller has already acknowledged (tp_stream_consumed) every byte it read, `rest` included;
 * later bytes are acknowledged here as rpc-server takes them. `frame` is only borrowed.
 * opts: its coalesce (NULL: the default). stats: the node's counters (NULL: not counted). */
void tunnel_rpc_serve(uv_loop_t *loop, tp_stream_t *s, json_t *frame, const uint8_t *rest,
                      size_t rest_len, int rpc_port, const tunnel_rpc_opts_t *opts,
                      tunnel_rpc_stats_t *stats);

/* Host side: the links the listener accepts from now on count into stats (the node's; NULL:
 * not counted). */
void tunnel_rpc_set_stats(rpc_fwd_t *f, tunnel_rpc_stats_t *stats);

#endif
