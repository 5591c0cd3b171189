/* transport — the node's QUIC endpoint (ngtcp2 0.12 + GnuTLS) on the libuv loop.
 *
 * One UDP port per node. Connections are mutually authenticated: both sides present a
 * certificate made from their Ed25519 node key (tlsid); a dialer requires the key it dialled; an
 * acceptor learns the peer's id from its key. Then admission: the dialer opens the first stream
 * and sends [0x01][frame {"type":"admit","proof":HMAC(secret, dialer || acceptor)}]; the acceptor
 * checks it and answers with its own proof (reversed order) and a FIN. Each frame may also carry
 * "mesh": the mesh id its sender is in (optional, additive: older nodes send none), which the
 * other side reads with tp_conn_peer_mesh — the id comes from a peer that just proved it holds
 * the secret, so a token whose mesh id was altered is caught. A connection is "ready"
 * only once both proofs are checked; before that no other stream is accepted (a peer that tries
 * is disconnected). A connection that is not ready within the handshake timeout is closed.
 *
 * One connection per peer pair: when two ready connections to the same peer exist, the one
 * dialled by the larger node id wins (both sides apply the same rule); the loser takes no new
 * streams and is closed once its streams are done. Duplicates dialled by the same side (parallel
 * dials to several addresses) keep the first that became ready.
 *
 * Streams are bidirectional byte streams with half-close. Send side: tp_stream_write copies into
 * the stream's queue (freed as the peer acknowledges it); tp_stream_buffered tells the caller
 * when to stop producing; on_drain says when to resume. Receive side: the peer may send only as
 * far as the window the receiver opens, and the receiver opens it by calling tp_stream_consumed
 * for bytes it has passed on — that is the back-pressure into tunnels.
 *
 * Memory bounds. Send side, per stream: tp_stream_over_high_water turns true past high_water
 * bytes (or when the connection is past conn_high_water) and on_drain follows once it is below
 * half of both again; a writer that ignores it gets -EAGAIN once the stream holds more than
 * stream_max_buffer. Per connection: a write that would take the queued bytes of all its
 * streams past conn_max_buffer gets -ENOBUFS (nothing queued); tp_stream_open gets -EAGAIN
 * when max_pending_opens streams already wait for the peer's stream limit. Receive side: the
 * flow-control windows (stream_window per stream, 16 of them per connection).
 * Unadmitted connections: at most 64 at once (further Initials are dropped), each closed at
 * the handshake timeout; once retry_after of them exist, a new Initial is answered with a
 * Retry carrying an address-bound token (10 s, keyed by a per-process random secret), and only
 * an Initial with a valid token creates connection state (a spoofed source never gets one).
 *
 * Restarts: stateless reset tokens are derived from the node key and the connection id, so a
 * node restarted on the same port (same key) answers a packet of a connection its former
 * process had with a Stateless Reset (smaller than the packet, at most 100 a second): the
 * peer's connection ends at once (on_conn_closed, err -ECONNRESET) instead of at the idle
 * timeout, and the peer can dial the new process.
 *
 * Liveness: a connection with a stream open (a tunnel, an RPC tunnel, a route request, a gossip
 * message) is a connection the node waits on, so a silent peer there is found in seconds, not at
 * the idle timeout: once nothing has been heard from the peer for live_ms / 4, ngtcp2's
 * keep-alive sends a PING (a live peer acknowledges it within a round trip, a lost one is
 * retransmitted at the probe timeout), and once nothing has been heard for live_ms the
 * connection is closed with err -ETIMEDOUT ("peer silent ..."): its streams end with an error
 * at once. Idle connections (no stream) stay cheap: a PING every keepalive_ms, closed at the
 * idle timeout. A timer that fires late because this process stalled (the peer's packets may
 * be waiting in the socket) gives the peer another live_ms / 2 instead of closing.
 *
 * Lifetime: a stream is freed right after its on_close callback; a connection right after
 * on_conn_closed (both called once). Close/reset calls made from inside callbacks are deferred.
 */
#ifndef MESH_TRANSPORT_H
#define MESH_TRANSPORT_H

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/socket.h>
#include <uv.h>

#include "identity.h"

/* on_conn_closed's err on the dialer side when the acceptor refused our admission proof: it
 * uses another mesh secret (it is in another mesh, or our token's secret is wrong). */
#define TP_ERR_ADMISSION (-EKEYREJECTED)

typedef struct tp_endpoint tp_endpoint_t;
typedef struct tp_conn tp_conn_t;
typedef struct tp_stream tp_stream_t;

typedef struct {
    /* Peer sent bytes. Call tp_stream_consumed(s, n) once they are passed on. */
    void (*on_data)(tp_stream_t *s, const uint8_t *p, size_t n);
    /* Peer finished its direction. */
    void (*on_fin)(tp_stream_t *s);
    /* The send queue fell below the low-water mark after being above the high-water mark. */
    void (*on_drain)(tp_stream_t *s);
    /* Closed (both directions done, reset, or the connection went away; err 0 = clean). */
    void (*on_close)(tp_stream_t *s, int err);
} tp_stream_cb_t;

typedef struct {
    void *data;
    /* The connection is authenticated and admitted (tp_conn_peer_id is valid). */
    void (*on_conn_ready)(tp_endpoint_t *ep, tp_conn_t *c);
    /* The connection ended (was_ready false: the dial or the admission failed). */
    void (*on_conn_closed)(tp_endpoint_t *ep, tp_conn_t *c, bool was_ready, int err,
                           const char *why);
    /* The peer opened a stream on a ready connection: set callbacks with tp_stream_set_cb. */
    void (*on_stream)(tp_endpoint_t *ep, tp_conn_t *c, tp_stream_t *s);
} tp_callbacks_t;

typedef struct {
    uint64_t handshake_timeout_ms; /* dial + admission; default 5000 (MESH_LLM_HANDSHAKE_MS) */
    uint64_t idle_timeout_ms;      /* default 30000 (MESH_LLM_QUIC_IDLE_MS) */
    uint64_t keepalive_ms;         /* default idle / 3 */
    /* Liveness while streams are open (see "Liveness" above): a PING after live_ms / 4 of
     * silence, the connection closed (-ETIMEDOUT) after live_ms of it. Default 2000
     * (MESH_LLM_LIVE_MS); 0 = off (only the idle timeout; the variable takes >= 1). */
    uint64_t live_ms;
    size_t max_conns;     /* default 1024 */
    size_t stream_window; /* default 1 MiB */
    size_t high_water;    /* send queue: default 1 MiB */
    /* Send-side caps (see "Memory bounds" above). */
    size_t stream_max_buffer; /* writes refused (-EAGAIN) above this: default 8 x high_water */
    size_t conn_high_water;   /* every stream of the connection over high water: default 32 MiB */
    size_t conn_max_buffer;   /* a write past it refused (-ENOBUFS): default 128 MiB */
    size_t max_pending_opens; /* streams waiting for the peer's limit: default 256 */
    /* Retry (address validation) for new connections while this many are unadmitted:
     * default 16 (MESH_LLM_QUIC_RETRY_AFTER); 0 = always. */
    size_t retry_after;
    /* congestion control: NGTCP2_CC_ALGO_* value; default BBRv2 (MESH_LLM_QUIC_CC =
     * reno|cubic|bbr|bbr2) */
    int cc_algo;
} tp_config_t;

/* The defaults above; the environment is not read (the node applies its tunables over them:
 * node/tunables.c:tunables_tp_config). */
void tp_config_default(tp_config_t *cfg);
/* The NGTCP2_CC_ALGO_* value of "reno", "cubic", "bbr" or "bbr2"; def for any other name. */
int tp_cc_algo(const char *name, int def);

/* Bind UDP host:port (port 0 = any free) and accept connections. host NULL: every address,
 * IPv6 and IPv4 on one dual-stack socket where the machine has IPv6, else IPv4 alone; a
 * connection's addresses are AF_INET for IPv4 peers either way. */
int tp_endpoint_new(tp_endpoint_t **out, uv_loop_t *loop, const identity_t *id,
                    const uint8_t secret[32], const char *host, int port, const tp_config_t *cfg,
                    const tp_callbacks_t *cb);
int tp_endpoint_port(const tp_endpoint_t *ep);
/* Whether the socket speaks IPv6 (dual-stack or bound to an IPv6 address). */
bool tp_endpoint_ipv6(const tp_endpoint_t *ep);
/* Close every connection (sending CONNECTION_CLOSE) and the socket; cb runs when done. */
void tp_endpoint_close(tp_endpoint_t *ep, void (*cb)(void *data), void *data);
void *tp_endpoint_data(const tp_endpoint_t *ep);
/* The mesh secret for admissions from now on (both directions); ready connections stay. */
void tp_endpoint_set_secret(tp_endpoint_t *ep, const uint8_t secret[32]);
/* The mesh id this node sends in its admission frames from now on ("" or NULL: none). */
void tp_endpoint_set_mesh_id(tp_endpoint_t *ep, const char *mesh_id);

/* Dial peer `peer_id` (hex) at addr. The result arrives as on_conn_ready / on_conn_closed. */
int tp_dial(tp_endpoint_t *ep, const char *peer_id, const struct sockaddr *addr, tp_conn_t **out);
/* The ready, preferred connection to a peer, or NULL. */
tp_conn_t *tp_find(tp_endpoint_t *ep, const char *peer_id);
void tp_conn_close(tp_conn_t *c, int app_error, const char *why);
const char *tp_conn_peer_id(const tp_conn_t *c);
/* The mesh id the peer sent with its admission proof ("" when it sent none). */
const char *tp_conn_peer_mesh(const tp_conn_t *c);
bool tp_conn_is_ready(const tp_conn_t *c);
bool tp_conn_outbound(const tp_conn_t *c);
double tp_conn_rtt_ms(const tp_conn_t *c);
/* The lowest RTT measured on the connection so far (the path's latency without the queueing and
 * the event-loop delays a busy machine adds to the smoothed RTT); < 0 before the first sample. */
double tp_conn_min_rtt_ms(const tp_conn_t *c);
void tp_conn_set_data(tp_conn_t *c, void *data);
void *tp_conn_data(const tp_conn_t *c);

/* Open a stream on a ready connection (queued if the peer's stream limit is reached; -EAGAIN
 * when max_pending_opens are queued already). */
int tp_stream_open(tp_conn_t *c, const tp_stream_cb_t *cb, void *data, tp_stream_t **out);
void tp_stream_set_cb(tp_stream_t *s, const tp_stream_cb_t *cb, void *data);
void *tp_stream_data(const tp_stream_t *s);
tp_conn_t *tp_stream_conn(const tp_stream_t *s);
/* Queue bytes (copied). -EPIPE after shutdown/close; -EAGAIN when the stream holds more than
 * stream_max_buffer (the writer ignored tp_stream_over_high_water); -ENOBUFS when the
 * connection's queues would pass conn_max_buffer. Nothing is queued on error. */
int tp_stream_write(tp_stream_t *s, const void *p, size_t n);
size_t tp_stream_buffered(const tp_stream_t *s);
/* Stop producing (wait for on_drain): the stream or its connection holds too much. */
bool tp_stream_over_high_water(tp_stream_t *s);
size_t tp_conn_buffered(const tp_conn_t *c); /* send-queue bytes of all its streams */
/* Send FIN after the queued bytes. */
void tp_stream_shutdown(tp_stream_t *s);
/* Abort both directions. */
void tp_stream_reset(tp_stream_t *s, uint64_t app_error);
void tp_stream_consumed(tp_stream_t *s, size_t n);

typedef struct {
    uint64_t datagrams_in, datagrams_out, dropped, conns_accepted, conns_refused;
    uint64_t retries_sent, bad_tokens;       /* Retry packets; Initials with an invalid token */
    uint64_t migrations;                     /* peers followed to a new address */
    uint64_t writes_refused;                 /* tp_stream_write/open back-pressure errors */
    uint64_t punches_in, punches_out;        /* punch datagrams (tp_punch) */
    uint64_t relayed_in, relayed_out;        /* this node's packets over relayed paths */
    uint64_t relay_forwarded, relay_dropped; /* frames relayed for others; refused ones */

    uint64_t raw_in, raw_out;   /* STUN/TURN datagrams from and to servers (transport_turn.c) */
    uint64_t turn_in, turn_out; /* QUIC packets over TURN paths */
} tp_stats_t;
const tp_stats_t *tp_stats(const tp_endpoint_t *ep);

/* ---- Punching and relays (transport_relay.c) ----
 * The socket also carries two kinds of datagrams that are not QUIC (their first byte has both
 * high bits clear, which no QUIC packet has). A punch (tp_punch) is a small datagram sent to a
 * peer's candidate address to open this side's NAT for the peer's packets; it is dropped on
 * arrival. A relay frame is [0x3a][side][session id][QUIC packet]:
 *  - a relay (tp_relay_session_add) forwards the frames of a session between its two members'
 *    addresses (those of their own connections to the relay), only from those addresses, within
 *    rate_bytes_s (token bucket; 0: no cap); it cannot read them (end-to-end QUIC);
 *  - a member (tp_route_add) gets a virtual address for the session: tp_dial to it, or a peer's
 *    Initial arriving through the relay, makes a QUIC connection over the relayed path; packets
 *    to the virtual address go to the relay wrapped, the relay's frames arrive unwrapped.
 * A direct connection is preferred over a relayed one to the same peer (tp_find). */
#define TP_SID_LEN 16
int tp_punch(tp_endpoint_t *ep, const struct sockaddr *to);
/* The route for session sid, side 0 or 1, through the relay at `relay`: its virtual address in
 * *virt. Again for the same sid: updated. -ENOSPC: 64 routes in use. */
int tp_route_add(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN], int side,
                 const struct sockaddr *relay, struct sockaddr_storage *virt);
void tp_route_del(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN]);
/* The relay's address behind a virtual address (-ENOENT: none). */
int tp_route_relay(tp_endpoint_t *ep, const struct sockaddr *virt, struct sockaddr_storage *relay);
/* Whether an address is a relayed path's virtual address (0.0.0.0/8). */
bool tp_addr_virtual(const struct sockaddr *a);
/* Relay for session sid between a (side 0) and b (side 1). -ENOSPC: 256 sessions in use. */
int tp_relay_session_add(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN], const struct sockaddr *a,
                         const struct sockaddr *b, uint64_t rate_bytes_s);
void tp_relay_session_del(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN]);
typedef struct {
    uint64_t packets, bytes, dropped, last_ms; /* last_ms: loop time of the last frame */
} tp_relay_info_t;
int tp_relay_session_info(tp_endpoint_t *ep, const uint8_t sid[TP_SID_LEN], tp_relay_info_t *out);
size_t tp_relay_session_count(const tp_endpoint_t *ep);
/* The peer's address as this node sees it (a virtual one for a relayed path). */
void tp_conn_remote(const tp_conn_t *c, struct sockaddr_storage *out);
/* This node's address as the peer says it sees it (its admission frame's "seen"; "" when it
 * sent none or the path is relayed). */
const char *tp_conn_seen(const tp_conn_t *c);
size_t tp_conn_count(const tp_endpoint_t *ep);

/* ---- STUN and TURN servers (transport_turn.c) ----
 * The socket also talks to STUN/TURN servers (RFC 8489/8656) for the node's NAT driver: a
 * datagram from a registered server address that is a STUN message or ChannelData goes to the
 * server's handler, before QUIC sees it (ChannelData's first byte looks like a QUIC short
 * header; a server never sends QUIC). tp_send_raw sends any datagram from the socket (the
 * server then sees the QUIC port's NAT mapping).
 * TURN paths: a peer that reaches this node through its TURN allocation (its packets arrive
 * unwrapped by the driver: tp_turn_deliver) gets a virtual address 0.0.1.x, one per peer
 * address as the server sees it; ngtcp2 sees the connection on that address, and packets to it
 * go to the driver's sender (tp_turn_set_sender), which wraps them for the server. At most
 * TP_MAX_TURN_ROUTES; a full table reuses the least recent route no connection uses. */
typedef void (*tp_raw_cb)(void *data, const struct sockaddr *from, const uint8_t *p, size_t n);
/* cb for datagrams from server (NULL: none any more). -ENOSPC: 4 servers registered. */
int tp_set_raw_handler(tp_endpoint_t *ep, const struct sockaddr *server, tp_raw_cb cb, void *data);
/* One datagram from the endpoint's socket: 0, -EINVAL (no socket, a virtual address), -EIO. */
int tp_send_raw(tp_endpoint_t *ep, const struct sockaddr *to, const void *p, size_t n);
typedef void (*tp_turn_send_cb)(void *data, const struct sockaddr *peer, const uint8_t *p,
                                size_t n);
/* Who sends packets for TURN paths (NULL: none; packets to TURN paths are dropped). */
void tp_turn_set_sender(tp_endpoint_t *ep, tp_turn_send_cb cb, void *data);
/* A QUIC packet that peer sent through this node's allocation: to QUIC, from the peer's
 * virtual address (made here). 0, -ENOSPC (routes full), -EINVAL (not a QUIC packet). */
int tp_turn_deliver(tp_endpoint_t *ep, const struct sockaddr *peer, const uint8_t *p, size_t n);
/* Whether virt is a TURN path's virtual address; the peer's address behind it in *peer. */
bool tp_turn_peer(const tp_endpoint_t *ep, const struct sockaddr *virt,
                  struct sockaddr_storage *peer);
/* The allocation is gone: every TURN route goes (their connections time out or move). */
void tp_turn_routes_clear(tp_endpoint_t *ep);

#endif
