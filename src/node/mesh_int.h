/* mesh internals shared by the files of the mesh driver. Not for other modules. The files
 * call downwards only (no circle between them):
 *   mesh_passive.c  passive mode (going active or passive)
 *   mesh.c          gossip I/O (incoming message streams, gossip's callbacks), status, life cycle
 *   mesh_join.c     dialling, joining through invite tokens, the merge rule, the retry policy
 *   mesh_nat.c      candidate addresses beyond the interfaces, hole punching, relays
 *   mesh_self.c     this node's addresses, announcement, invite token and mesh credentials
 *   mesh_peers.c    the peer table and message queues, sending, the gossip timer, clock, random
 * The transport's callbacks for connections land in mesh_join.c, those for streams in mesh.c.
 *
 * Every "waiting for something" state of the driver is bounded (mesh_timing_t):
 *  - a dial: the transport's handshake timeout (at most max(2 heartbeats, 1 s), at most
 *    MESH_LLM_HANDSHAKE_MS) ends it with on_conn_closed; a watchdog (dial_deadline) forgets a
 *    dial whose end was never reported. A failed dial is retried with jittered exponential
 *    backoff (dial_base doubling, capped at dial_cap), driven by the next message for the peer;
 *  - a join: the join target's dial, plus a join timeout as a watchdog; then the next token,
 *    and after the last one a new round after a jittered backoff (same base and cap);
 *  - a lost connection to a peer that gossip still holds alive: dialled again at once (then
 *    with the dial backoff), and greeted with a hello when it is back, so that a restarted peer
 *    is learned in one exchange;
 *  - a probe: gossip's own probe timeout (probe_ms) declares the peer dead;
 *  - leaving: LEAVE_WAIT_MS.
 */
#ifndef MESH_MESH_INT_H
#define MESH_MESH_INT_H

#include "gossip.h"
#include "mesh.h"
#include "view_set.h"

#define MAX_QUEUE 64 /* messages waiting for a connection, per peer */
#define MAX_ADDRS 16
#define NAT_TICK_MS 1000 /* mesh_nat_tick's own clock (mesh.c's ntimer) */

typedef struct {
    uint64_t dial_timeout; /* one dial, handshake and admission included */
    uint64_t dial_base, dial_cap;
    uint64_t join_timeout; /* watchdog over one join attempt */
} mesh_timing_t;

typedef struct qmsg {
    uint8_t *p;
    size_t n;
} qmsg_t;

typedef struct mpeer {
    struct mpeer *next;
    char id[ID_HEX_LEN + 1];
    qmsg_t q[MAX_QUEUE];
    size_t nq;
    int dials;              /* outstanding dials (each ends in on_conn_ready or _closed) */
    uint64_t dial_deadline; /* watchdog: the outstanding dials are forgotten after it */
    uint64_t next_dial;     /* backoff after failed dials (loop ms) */
    unsigned fails;
    bool lost; /* its ready connection closed while it was alive: say hello when back */
    char addrs[MAX_ADDRS][TOKEN_ADDR_MAX]; /* from an invite token */
    size_t n_addrs;
    char last_err[160];
    uint64_t heard_inc; /* highest incarnation it spoke with (the "inc" of its messages) */
    uint64_t addrs_sig; /* a hash of its announced addresses (a change: dial again at once) */
    /* mesh_nat.c: how its connection was made, and the escalation when it cannot be dialled */
    char path[12];          /* direct | mapped | punched | relayed ("" before one) */
    uint8_t nat_stage;      /* MESH_NAT_* */
    uint64_t nat_at;        /* when the stage began (loop ms) */
    uint64_t punched_until; /* a connection ready before then came from a hole punch */
    bool has_route;         /* a relayed path to it (session sid through relay_id) */
    uint8_t sid[TP_SID_LEN];
    char relay_id[ID_HEX_LEN + 1];
} mpeer_t;

enum { MESH_NAT_NONE, MESH_NAT_PUNCH, MESH_NAT_RELAY, MESH_NAT_RELAYED };
enum { MESH_CAND_LOCAL, MESH_CAND_REFLEXIVE, MESH_CAND_MAPPED, MESH_CAND_RELAY };
#define MESH_MAX_EXTRA 6   /* reflexive, mapped and relay (TURN) candidates */
#define MESH_MAX_RSESS 256 /* sessions this node relays (as many as the transport holds) */

typedef struct {
    uint8_t sid[TP_SID_LEN];
    char a[ID_HEX_LEN + 1], b[ID_HEX_LEN + 1];
    uint64_t at;
} mesh_rsess_t;

typedef struct {
    uint64_t coord_window, coord_count; /* punch coordinations in this second */
    uint64_t punch_asked, punches, punched_conns, relay_asked, relayed_conns, coordinated;
    uint64_t relayed, upgrades;
    bool symmetric;   /* peers see this node at one address with several ports */
    uint64_t scan_at; /* the interfaces last read (loop ms) */
    mesh_rsess_t sessions[MESH_MAX_RSESS];
    size_t n_sessions;
    char stun_addr[TOKEN_ADDR_MAX]; /* the STUN server's answer (mesh_set_stun_addr), "" none */
    uint64_t turn_conns;            /* connections made over a TURN relay (ours or the peer's) */
} mesh_nat_t;

struct mesh {
    uv_loop_t *loop;
    mesh_opts_t o;
    char home[4096];
    identity_t id;
    mesh_cred_t cred; /* the mesh we are in (or trying to join): the endpoint's secret */
    mesh_cred_t own;  /* the mesh this node created, when it has one (merge candidate) */
    bool has_own;
    tp_endpoint_t *ep;
    gossip_t *g;
    uv_timer_t gtimer, jtimer, stimer;
    uv_timer_t ntimer; /* every NAT_TICK_MS: mesh_nat_tick, whatever gossip does */
    mpeer_t *peers;
    void (*on_silent)(void *data, const char *peer_id); /* mesh_on_silent */
    void *silent_data;
    char token[TOKEN_MAX_LEN + 1];
    char role[16];
    char addrs[MAX_ADDRS][TOKEN_ADDR_MAX];
    size_t n_addrs;
    struct {
        char addr[TOKEN_ADDR_MAX];
        int kind; /* MESH_CAND_* */
        uint64_t at;
    } extra[MESH_MAX_EXTRA]; /* candidates beyond the interfaces (mesh_nat.c) */
    size_t n_extra;
    mesh_nat_t nat;
    struct mesh_turn *turn;       /* --stun / --turn (mesh_turn.c); NULL: none */
    struct portmap *pm;           /* the router's mapping of the QUIC port (mesh.c) */
    token_t joins[MESH_MAX_JOIN]; /* a merge replaces a token's mesh with the winning one */
    size_t n_joins, join_idx;
    unsigned join_rounds;
    bool joined, joining;
    bool join_refused;  /* the last join attempt failed on admission (another mesh's secret) */
    char join_err[512]; /* and why */
    bool stopping;
    bool passive;     /* no gossip (mesh_passive.c) */
    unsigned n_ready; /* ready connections */
    mesh_timing_t tm;
    int leave_streams;
    int handles_open;
    void (*stop_cb)(void *data);
    void *stop_data;
    uint64_t msgs_in, msgs_bad;
    uint64_t msgs_dropped; /* outgoing gossip refused by the transport's back-pressure */
    uint64_t leave_deadline;
    view_set_t views; /* the live peers' announcements, decoded once per change (mesh_peers) */
    rtt_entry_t rtt_ann[RTT_MAX_ENTRIES]; /* the rtt_ms of its last announcement (mesh_self.c) */
    size_t n_rtt_ann;
    uint64_t rtt_ann_at; /* when it was made (loop ms) */
    /* after each gossip tick (mesh_peers.c): mesh_rtt_check, set by mesh.c (a hook, not a call
     * up from the peers' timer into the announcement) */
    void (*after_tick)(struct mesh *m);
    /* a hole punch to these addresses is under way (mesh_nat.c): mesh_turn_permit_sa while a TURN
     * allocation exists (a hook: mesh_turn.c calls into mesh_nat.c, not the other way) */
    void (*punch_hook)(struct mesh *m, const struct sockaddr_storage *a, size_t n);
};

/* mesh_peers.c */
uint64_t mesh_now(mesh_t *m);
uint64_t mesh_random(void);
mpeer_t *mesh_peer_get(mesh_t *m, const char *id, bool create);
void mesh_queue_drop(mpeer_t *p);
/* Free the entry of a peer that is no gossip member and holds nothing (no queued message, no
 * dial, no address to dial it at): a passive node whose connection closed. */
void mesh_peer_forget(mesh_t *m, mpeer_t *p);
/* One message, one stream on c (leaving: PEER_LEAVING, waited for by mesh_stop); a message the
 * connection pushes back is dropped and counted (msgs_dropped). 0 or a negative errno. */
int mesh_send_on(mesh_t *m, tp_conn_t *c, const uint8_t *p, size_t n, bool leaving);
void mesh_flush_queue(mesh_t *m, mpeer_t *p);
/* (Re)arm the gossip timer at gossip's next deadline. */
void mesh_gossip_arm(mesh_t *m);

/* mesh_self.c */
/* "local" | "reflexive" | "mapped" | "relay" (MESH_CAND_*). */
const char *mesh_cand_kind_name(int kind);
/* a is one of this node's addresses (m->addrs). */
bool mesh_own_addr(const mesh_t *m, const char *a);
/* This node's addresses: the bind address, or every IPv4 interface and 127.0.0.1. */
void mesh_addrs_init(mesh_t *m);
/* This node's announcement (new reference; NULL: out of memory). */
json_t *mesh_announcement(mesh_t *m);
/* The invite token from the identity, the current mesh and the addresses: 0 or < 0. */
int mesh_token_encode(mesh_t *m);
/* The current mesh changed (a merge): endpoint secret, token and announcement follow. */
void mesh_set_cred(mesh_t *m, const mesh_cred_t *cred);
/* From the gossip timer: announce again when the RTTs it would announce (rtt.h steps) differ
 * from the last announcement's, at most once per RTT_ANNOUNCE_MS(heartbeat). */
void mesh_rtt_check(mesh_t *m);

/* mesh_nat.c */
/* This node's addresses: mesh_addrs_init's, then the reflexive and mapped candidates. */
void mesh_nat_addrs(mesh_t *m);
/* A WIRE_NAT message from `from` on c. */
void mesh_nat_receive(mesh_t *m, tp_conn_t *c, const char *from, json_t *f);
/* Dialling p failed: punch, then relay (see the file's comment). */
void mesh_nat_unreachable(mesh_t *m, mpeer_t *p);
/* A dial to p starts: when both it and this node are behind NATs, punch at once (beside the
 * dial, as ICE tries its candidates together) instead of after the dial's timeout. */
void mesh_nat_dialing(mesh_t *m, mpeer_t *p);
void mesh_nat_conn_ready(mesh_t *m, tp_conn_t *c, mpeer_t *p);
void mesh_nat_conn_closed(mesh_t *m, tp_conn_t *c, mpeer_t *p);
void mesh_nat_tick(mesh_t *m);
/* A peer's {"path", "via", "addr"} for the status; the node's "nat" object. */
json_t *mesh_nat_peer_json(mesh_t *m, const char *id);
json_t *mesh_nat_status(mesh_t *m);

/* mesh_turn.c: STUN and TURN servers (--stun, --turn) */
/* Permissions on our TURN allocation for these peer addresses (no-op without one). */
void mesh_turn_permit_sa(mesh_t *m, const struct sockaddr_storage *a, size_t n);
/* ... for the addresses of a peer's announcement. */
void mesh_turn_permit_ann(mesh_t *m, json_t *ann);
/* Adds "stun", "turn" and "turn_conns" to the node's "nat" object (mesh.c's status). */
void mesh_turn_status(mesh_t *m, json_t *nat);

/* mesh.c */
/* A gossip state machine for this node at `incarnation`, with its current announcement. */
gossip_t *mesh_gossip_new(mesh_t *m, uint64_t incarnation);
/* Bring the typed peers (views) in line with gossip's live peers: after every gossip event and
 * when the gossip state machine is replaced. */
void mesh_views_sync(mesh_t *m);

/* mesh_join.c: the driver */
void mesh_dial(mesh_t *m, mpeer_t *p); /* no-op while a dial is out or backing off */
void mesh_join_start(mesh_t *m);       /* first join attempt (mesh_start) */
/* A peer died or left: alone again → back to the invite tokens. */
void mesh_peer_gone(mesh_t *m);
void mesh_on_conn_ready(tp_endpoint_t *ep, tp_conn_t *c);
void mesh_on_conn_closed(tp_endpoint_t *ep, tp_conn_t *c, bool was_ready, int err, const char *why);

/* mesh_join.c: pure decisions (unit-tested) */
void mesh_timing_init(mesh_timing_t *t, uint64_t heartbeat_ms, uint64_t handshake_ms);
/* Exponential backoff base·2^attempt capped at cap, minus up to half of it (jitter from rnd):
 * in [d/2, d]. */
uint64_t mesh_retry_delay(unsigned attempt, uint64_t base, uint64_t cap, uint64_t rnd);
/* Mesh ids compared as hex numbers (longer is larger, then lexicographic). */
int mesh_id_cmp(const char *a, const char *b);
/* The merge rule's next step: the index of the smallest id in ids[] larger than cur, -1 when
 * none (then cur stays). */
int mesh_merge_next(const char *cur, const char *const *ids, size_t n);

#endif
