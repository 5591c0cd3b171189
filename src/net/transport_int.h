/* transport internals shared by transport.c (endpoint, connections, packets, ngtcp2
 * callbacks, admission) and transport_stream.c (streams: the public stream API, send queues,
 * opening). Not for other modules. */
#ifndef MESH_TRANSPORT_INT_H
#define MESH_TRANSPORT_INT_H

#include <gnutls/gnutls.h>
#include <ngtcp2/ngtcp2.h>
#include <ngtcp2/ngtcp2_crypto.h>

#include "sendbuf.h"
#include "transport.h"
#include "util.h"
#include "wire.h"

#define ALPN "mesh-llm/1"
#define SCID_LEN 16
#define MAX_CIDS 10
#define CID_BUCKETS 4096
#define MAX_PKT 1452
#define BATCH 32
#define MAX_UNADMITTED 64   /* inbound connections not admitted yet: further Initials dropped */
#define RETRY_TOKEN_SECS 10 /* a Retry token's lifetime */
#define RBUF_SLOTS 32       /* datagrams per recvmmsg, each in a 64 KiB slot */
#define RBUF_SLOT 65536
/* Deferred flushes (transport_tx.c, "scheduling"): what reading stream data or consuming
 * bytes leaves ngtcp2 owing (ACKs, flow-control credit) waits up to ACK_DEFER_MS for stream
 * data to carry it, unless the peer may be waiting for it: the last datagram read was
 * full-sized (the peer had more to send: it may be congestion-window limited),
 * DEFER_MAX_BYTES arrived since the last flush (below the ~14.5 kB initial congestion window,
 * so a fresh connection's sender never stalls on a deferred ACK), or 1/CREDIT_EAGER_DIV of a
 * stream window was consumed. ACK_DEFER_MS stays inside the 25 ms max_ack_delay we advertise
 * (the peer's loss timers allow for it): a model streaming a token every 10 ms is
 * acknowledged every second token, a split's decode step is acknowledged by its answer. */
#define ACK_DEFER_MS 20
#define DEFER_MAX_BYTES 12288
#define CREDIT_EAGER_DIV 8
#define APP_ERR_ADMISSION 0x101
#define APP_ERR_DUPLICATE 0x102
#define APP_ERR_SHUTDOWN 0x103
/* transport_relay.c: datagrams that are not QUIC (both high bits of the first byte clear) */
#define TPI_RELAY_TYPE 0x3a
#define TPI_PUNCH_TYPE 0x3b
#define TPI_RELAY_HDR (2 + TP_SID_LEN) /* type, side, session id */
#define TP_MAX_ROUTES 64    /* relayed paths of this node (virtual addresses 0.0.0.1…) */
#define TP_MAX_SESSIONS 256 /* sessions this node relays for others */

#define TP_MAX_RAW 4          /* STUN/TURN servers whose datagrams go to a handler */
#define TP_MAX_TURN_ROUTES 64 /* peers over this node's TURN allocation (0.0.1.1…) */

typedef struct {
    bool used;
    uint8_t sid[TP_SID_LEN];
    uint8_t side; /* this node's side of the session (0: it asked) */
    struct sockaddr_storage relay;
} tp_route_t;

typedef struct {
    bool used;
    uint8_t sid[TP_SID_LEN];
    struct sockaddr_storage addr[2]; /* the members' addresses, from their connections to us */
    uint64_t rate, tokens, refill_ms, last_ms;
    uint64_t packets, bytes, dropped;
} tp_rsession_t;

/* transport_turn.c: STUN/TURN servers and TURN paths (allocated on first use) */
typedef struct {
    bool used;
    struct sockaddr_storage addr;
    tp_raw_cb cb;
    void *data;
} tpi_raw_t;

typedef struct {
    bool used;
    struct sockaddr_storage peer; /* the peer's address as the TURN server sees it */
    uint64_t last_ms;
} tpi_turn_route_t;

typedef struct {
    tpi_raw_t raw[TP_MAX_RAW];
    tpi_turn_route_t routes[TP_MAX_TURN_ROUTES];
    tp_turn_send_cb send;
    void *send_data;
} tpi_turn_t;

struct tp_stream {
    tp_conn_t *conn;
    struct tp_stream *prev, *next; /* conn->streams */
    struct tp_stream *sq_next;     /* conn->sendq */
    int64_t id;                    /* -1 until opened */
    const tp_stream_cb_t *cb;
    void *data;
    sendbuf_t out; /* bytes not yet acknowledged by the peer */
    bool in_sendq, blocked, fin_queued, fin_sent, above_hw, closed, internal, held, reset_pending;
    bool pending;    /* counted in conn->n_pending: waits for the peer's stream limit */
    buf_t held_data; /* bytes that arrived before the connection was ready (dialer side) */
    bool held_fin;
};

struct tp_conn {
    tp_endpoint_t *ep;
    struct tp_conn *prev, *next;
    struct tp_conn *dirty_next;
    bool dirty;
    bool urgent;             /* in the dirty list for more than datagrams read */
    bool lazy;               /* a deferred flush is owed: by lazy_until at the latest */
    bool rx_last_full;       /* the last datagram read was full-sized */
    bool rx_data;            /* stream frames read since the last flush (an ACK is owed) */
    uint64_t lazy_until;     /* loop time, ms */
    size_t rx_unflushed;     /* datagram bytes read since the last flush */
    size_t credit_unflushed; /* stream bytes consumed since the last flush */
    ngtcp2_conn *q;
    gnutls_session_t tls;
    ngtcp2_crypto_conn_ref ref;
    uv_timer_t timer;
    struct sockaddr_storage remote;
    socklen_t remote_len;
    ngtcp2_cid cids[MAX_CIDS];
    size_t n_cids;
    bool outbound, handshake_done, ready, closing, close_requested, freed, open_pending;
    uint64_t created_ms, ready_seq;
    /* liveness (transport.h "Liveness"), loop ms: the last packet read from the peer, when
     * streams were last opened on an idle connection, when the timer is due */
    uint64_t last_rx_ms, busy_since, timer_due;
    bool busy; /* a stream is open: short keep-alive, silence closes */
    char peer_id[ID_HEX_LEN + 1];
    char peer_mesh[MESH_ID_MAX + 1]; /* from its admission frame, "" if none */
    char seen[64];                   /* our address as the peer sees it ("seen"), "" if none */
    uint8_t peer_pk[32];
    tp_stream_t *streams;
    tp_stream_t *sendq_head, *sendq_tail;
    size_t queued;    /* send-queue bytes of all streams (conn_max_buffer) */
    size_t n_pending; /* streams waiting for the peer's stream limit (max_pending_opens) */
    bool drain_wait;  /* a stream's on_drain waits for queued to fall to conn_high_water / 2 */
    tp_stream_t *admit;
    wire_reader_t admit_rd;
    ngtcp2_connection_close_error ccerr;
    int close_err;
    char close_why[160];
    void *data;
};

typedef struct cid_ent {
    struct cid_ent *next;
    ngtcp2_cid cid;
    tp_conn_t *c;
} cid_ent_t;

struct tp_endpoint {
    uv_loop_t *loop;
    int fd;         /* the UDP socket */
    uv_poll_t poll; /* readable: recvmmsg */
    uv_idle_t idle;
    const identity_t *id;
    uint8_t secret[32];
    char mesh_id[MESH_ID_MAX + 1]; /* sent in admission frames ("" none) */
    uint8_t reset_key[32]; /* stateless reset tokens: derived from the node key (restarts) */
    uint64_t reset_window, resets_sent; /* rate limit: per-second window (loop ms), count */
    uint8_t retry_secret[32];           /* Retry tokens: random per endpoint (process) */
    gnutls_certificate_credentials_t cred;
    tp_config_t cfg;
    tp_callbacks_t cb;
    struct sockaddr_storage local; /* the socket's address ([::]:port when dual-stack) */
    socklen_t local_len;
    struct sockaddr_storage local4; /* the local end of IPv4 paths (0.0.0.0:port) */
    bool dual;                      /* an IPv6 socket that carries IPv4 too */
    int port;
    tp_conn_t *conns;
    size_t n_conns;
    tp_conn_t *dirty;
    cid_ent_t *buckets[CID_BUCKETS];
    uint64_t ready_counter;
    tp_stats_t stats;
    uint8_t *rbuf; /* RBUF_SLOTS datagrams per recvmmsg */
    uint8_t sbuf[BATCH][MAX_PKT];
    size_t slen[BATCH];
    bool closing, no_gso;
    tp_route_t routes[TP_MAX_ROUTES]; /* relayed paths (transport_relay.c) */
    tp_rsession_t *sessions;          /* relayed for others: TP_MAX_SESSIONS once the first */
    tpi_turn_t *turn;                 /* STUN/TURN servers, TURN paths (transport_turn.c) */
    int pending_closes;
    void (*close_cb)(void *data);
    void *close_data;
};

static inline uint64_t tpi_now_ns(void)
{
    return uv_hrtime();
}

/* transport_tx.c: scheduling and sending */
void tpi_mark_dirty(tp_conn_t *c);   /* flush this connection in the loop's idle phase */
void tpi_mark_lazy(tp_conn_t *c);    /* flush it with the next data, within ACK_DEFER_MS */
void tpi_conn_enqueue(tp_conn_t *c); /* flush in the idle phase, deferrable if only ACKs owed */
void tpi_dirty_unlink(tp_conn_t *c);
void tpi_conn_request_close(tp_conn_t *c, int err, const char *why); /* closed after callbacks */

/* transport.c: connections */
void tpi_conn_read(tp_conn_t *c, const struct sockaddr *from, const uint8_t *data, size_t n);
/* odcid: the original destination id from a verified Retry token (NULL: no Retry) */
void tpi_accept_conn(tp_endpoint_t *ep, const ngtcp2_pkt_hd *hd, const ngtcp2_cid *odcid,
                     const struct sockaddr *addr);
size_t tpi_unadmitted(const tp_endpoint_t *ep); /* inbound connections not ready yet */
void tpi_conn_close_now(tp_conn_t *c); /* callbacks run, CONNECTION_CLOSE sent unless draining */

/* transport_ep.c: endpoint */
tp_conn_t *tpi_cid_find(tp_endpoint_t *ep, const uint8_t *p, size_t n);
int tpi_cid_add(tp_conn_t *c, const ngtcp2_cid *cid);
void tpi_cid_remove(tp_conn_t *c, const ngtcp2_cid *cid);
void tpi_send_batch(tp_endpoint_t *ep, tp_conn_t *c, size_t n); /* ep->sbuf[0..n) to c's peer */
void tpi_ep_release(tp_endpoint_t *ep); /* a pending handle close finished */
/* The stateless reset token of one of our connection ids: a function of the node key and the
 * id, so that this node restarted (same key) can still end its peers' stale connections. */
void tpi_reset_token(const tp_endpoint_t *ep, const ngtcp2_cid *cid, uint8_t *token);

/* transport_ep.c: the length of a sockaddr_in or _in6; whether b is the address in a */
socklen_t tpi_addr_len(const struct sockaddr *a);
/* One datagram to a real address (an IPv4 one on a dual-stack socket too: plat_udp_send maps
 * it); whether it went. */
bool tpi_send_one(tp_endpoint_t *ep, const uint8_t *pkt, size_t n, const struct sockaddr *addr);
/* Whether this endpoint's socket can send to remote's family. */
bool tpi_family_ok(const tp_endpoint_t *ep, const struct sockaddr *remote);
/* The local end of a path to remote (IPv4 paths on a dual-stack socket: 0.0.0.0:port). */
ngtcp2_addr tpi_local_for(tp_endpoint_t *ep, const struct sockaddr *remote);
bool tpi_same_addr(const struct sockaddr_storage *a, const struct sockaddr *b);
/* transport_ep.c: a QUIC datagram from `from` (a real or a relayed path's virtual address) */
void tpi_quic_datagram(tp_endpoint_t *ep, const struct sockaddr *from, const uint8_t *data,
                       size_t n);

/* transport_relay.c */
/* A datagram whose first byte is not QUIC's: a punch or a relay frame. */
void tpi_special_datagram(tp_endpoint_t *ep, const struct sockaddr *from, const uint8_t *d,
                          size_t n);
/* ep->sbuf[0..n) to the relayed path `to`, each in a relay frame, in one batch (sendmmsg). */
void tpi_relay_send(tp_endpoint_t *ep, const struct sockaddr *to, size_t n);

/* transport_turn.c */
/* A datagram from a registered STUN/TURN server that is STUN or ChannelData: handled (true). */
bool tpi_turn_datagram(tp_endpoint_t *ep, const struct sockaddr *from, const uint8_t *d, size_t n);
/* `to` is a TURN path's virtual address: p handed to the TURN sender, or dropped (true). */
bool tpi_turn_wrap(tp_endpoint_t *ep, const struct sockaddr *to, const uint8_t *p, size_t n);

/* transport_stream.c */
tp_stream_t *tpi_stream_new(tp_conn_t *c, int64_t id);
void tpi_stream_free(tp_stream_t *s);
void tpi_stream_finish(tp_stream_t *s, int err); /* on_close once, then free */
void tpi_sendq_push(tp_stream_t *s);
tp_stream_t *tpi_sendq_pop(tp_conn_t *c);
void tpi_open_pending_streams(tp_conn_t *c);
void tpi_drain_waiters(tp_conn_t *c); /* on_drain for streams held back by the connection cap */
void tpi_stream_check_drain(tp_stream_t *s); /* after acknowledgements: on_drain when below */

#endif
