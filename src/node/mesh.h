/* mesh — this node's membership in a mesh: the QUIC endpoint, the gossip state machine driven
 * by real time, dialling peers on demand, joining through invite tokens, the status document.
 * mesh.c holds the gossip I/O and the status, mesh_join.c dialling, joining and the merge rule
 * of two meshes that join each other, mesh_self.c this node's announcement and token,
 * mesh_peers.c the peer table and queues; every wait is bounded (mesh_int.h lists the files
 * and the bounds).
 *
 * Messages: one QUIC stream per gossip message ([type byte][frame], then FIN), so a lost or
 * refused message never blocks another. Streams of other types (tunnels, route requests) are
 * handed to mesh_opts_t.on_stream once their first frame is read (net/tunnels.h): the mesh
 * does membership only. Without a handler, when it refuses, or while the mesh is stopping they
 * are reset.
 */
#ifndef MESH_MESH_H
#define MESH_MESH_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "changes.h"
#include "identity.h"
#include "transport.h"
#include "view.h"

#define MESH_MAX_JOIN 16

typedef struct mesh mesh_t;

typedef struct {
    const char *home;      /* state directory ($MESH_LLM_HOME) */
    const char *bind_host; /* UDP bind address; NULL: every address (IPv6 and IPv4) */
    int bind_port;         /* 0 = any free */
    const token_t *joins;  /* --join tokens, tried in order */
    size_t n_joins;
    const char *mesh_name;   /* --mesh-name */
    const uint8_t *name_key; /* a named mesh's id derives from it: the Nostr public key (32) */
    uint64_t vram_bytes;     /* capacity announced */
    const char *role;        /* worker | host | client */
    int api_port, console_port;
    uint64_t heartbeat_ms;      /* MESH_LLM_HEARTBEAT_MS */
    const struct tunables *tun; /* QUIC settings (tunables_tp_config); NULL: the defaults */
    changes_t *changes;         /* notified when this node's announcement changes (NULL: none) */
    /* Called to fill the announcement's model fields (available_models, serving…). */
    void (*fill_announcement)(void *data, json_t *ann);
    /* A peer came up, changed its announcement, died or left. */
    void (*on_peers_changed)(void *data);
    /* Passive mode (seed 002; mesh_passive.c): start without gossip — no join, no heartbeat,
     * gossip from others ignored; the node only dials peers (mesh_conn) for ROUTE_REQUEST and
     * tunnels. ephemeral: a fresh key in memory, nothing written to `home` (a --client). */
    bool passive, ephemeral;
    void *data;
    /* A stream of another type than gossip that peer `from` opened, its first frame read
     * (frame: borrowed; rest: the n bytes after it, already acknowledged). false: the mesh
     * resets it. true: the handler took it over (set its own callbacks) or answered it on the
     * mesh's (which then drop whatever else comes). Called with stream_data (tunnels_take). */
    bool (*on_stream)(void *stream_data, tp_stream_t *s, int type, const char *from, json_t *frame,
                      const uint8_t *rest, size_t n);
    void *stream_data;
    /* --relay: forward the packets of two members that cannot reach each other (at most
     * relay_rate bytes a second per pair; 0: no cap) */
    bool relay;
    uint64_t relay_rate;
    /* ask the router to map the QUIC port (net/portmap.h; not for a passive node) */
    bool portmap;
} mesh_opts_t;

/* Load the identity, bind the endpoint, start gossiping and joining. err says what failed. */
int mesh_start(mesh_t **out, uv_loop_t *loop, const mesh_opts_t *opts, char *err, size_t errlen);
/* Announce PEER_LEAVING to every live peer, then close everything; cb when done (bounded). */
void mesh_stop(mesh_t *m, void (*cb)(void *data), void *data);
/* The announcement changed (models loaded/unloaded…): rebuild and gossip it. */
void mesh_announce_changed(mesh_t *m);

/* This node's role as announced and shown in the status: worker | host | client. */
void mesh_set_role(mesh_t *m, const char *role);
/* The ready connection to a peer; when there is none, a dial starts and NULL is returned. */
tp_conn_t *mesh_conn(mesh_t *m, const char *peer_id);
/* The live peers as typed views (view.h), in id order. Each announcement is decoded once,
 * when gossip reports it changed (core/view_set.h), not per call. *out (and the ids in the
 * views) are valid until mesh_peers_gen changes: the next gossip event that changes a peer, or
 * mesh_go_passive; consumers that keep them across loop turns compare the generation. */
size_t mesh_peers(mesh_t *m, const view_node_t **out);
uint64_t mesh_peers_gen(const mesh_t *m);
/* The announcements decoded so far (mesh_status "stats"."view_decodes"). */
uint64_t mesh_view_decodes(const mesh_t *m);
/* Every peer gossip holds (live, dead or left), for /metrics. state: "alive" | "dead" |
 * "left" (static); rtt_ms < 0: no connection. */
typedef struct {
    char id[ID_HEX_LEN + 1];
    const char *state;
    double rtt_ms;
    char path[12]; /* direct | mapped | punched | relayed; "" when not connected */
} mesh_peer_state_t;
size_t mesh_peer_states(mesh_t *m, mesh_peer_state_t *out, size_t max);

/* Passive mode (mesh_passive.c). go_active: join gossip through the --join tokens (a promoted
 * standby); go_passive: leave gossip (signed "leaving": peers drop this node at once) and stop
 * gossiping, keeping the endpoint and its connections (a demoted node). Both are no-ops when
 * already in that mode. */
void mesh_go_active(mesh_t *m);
void mesh_go_passive(mesh_t *m);
bool mesh_is_passive(const mesh_t *m);
/* Addresses to dial `peer_id` at (a passive node learns them from routing tables); at most
 * 16, replacing the ones set before. Ignored for a peer gossip knows (its announcement's win). */
void mesh_set_peer_addrs(mesh_t *m, const char *peer_id, const char *const *addrs, size_t n);
/* The router's port mapping of this node's QUIC port ("ip:port"; NULL: none any more): a
 * candidate address, announced and put in the invite token. */
void mesh_set_mapped_addr(mesh_t *m, const char *addr);
/* A STUN server's answer: this node's QUIC port as the internet sees it ("ip:port"; NULL: none),
 * a reflexive candidate. */
void mesh_set_stun_addr(mesh_t *m, const char *addr);
/* This node's TURN relayed address ("ip:port"; NULL: none any more): a "relay" candidate. */
void mesh_set_turn_addr(mesh_t *m, const char *addr);
/* STUN and TURN servers (mesh_turn.c, docs/nat.md): from the QUIC socket, a STUN Binding to
 * each stun server at start and every 5 minutes (the answer: mesh_set_stun_addr), and a TURN
 * allocation on turn (refreshed; its relayed address: mesh_set_turn_addr) that peers' QUIC
 * packets reach this node through. Names are resolved once. The password is not kept past the
 * TURN client's copy and never logged. Stopped by mesh_servers_stop or mesh_stop. */
typedef struct {
    const char *const *stun; /* "HOST:PORT" each */
    size_t n_stun;
    const char *turn; /* "turn:HOST:PORT" (or "HOST:PORT"); NULL: none */
    const char *turn_user, *turn_password;
} mesh_servers_t;
/* 0, or -EINVAL with err (a malformed server, no user or password for turn). */
int mesh_servers_start(mesh_t *m, const mesh_servers_t *s, char *err, size_t errlen);
/* Deletes the TURN allocation (best effort: one Refresh 0) and stops; mesh_stop calls it right
 * after closing the endpoint's connections (their CONNECTION_CLOSE still goes over TURN). */
void mesh_servers_stop(mesh_t *m);
/* The ready connection to a peer, or NULL (no dial). */
tp_conn_t *mesh_find_conn(mesh_t *m, const char *peer_id);
/* This node's own announcement (borrowed; NULL when passive) and addresses. */
json_t *mesh_self_announcement(mesh_t *m);
size_t mesh_own_addrs(const mesh_t *m, const char **out, size_t max);
const char *mesh_node_id(const mesh_t *m);
const char *mesh_id(const mesh_t *m);
const char *mesh_token(const mesh_t *m);
int mesh_quic_port(const mesh_t *m);
/* In the mesh: joined through a token, or never asked to join (a mesh of its own). */
bool mesh_joined(const mesh_t *m);
/* Why the last join attempt failed ("" when none failed, or once joined). */
const char *mesh_join_error(const mesh_t *m);
/* A join under way that has reached no one (not a member, no live peer, not passive). */
bool mesh_join_stuck(const mesh_t *m);
/* Give up the stuck join's tokens and join through t instead (POST /api/join); -EBUSY when
 * the join is not stuck. */
int mesh_join_replace(mesh_t *m, const token_t *t);
/* {"node":{…},"peers":[…]} (caller owns). */
json_t *mesh_status(mesh_t *m);
/* A tunnel stream to peer_id failed (reset, refused, cut before its answer): probe the peer now
 * instead of waiting for its monitors (a live peer answers; a dead one is declared dead). */
void mesh_suspect(mesh_t *m, const char *peer_id);
/* Called when a connection to a peer ended because the peer went silent while streams were
 * open (transport.h "Liveness": about 2 s after a kill -9): a passive node, which has no
 * gossip, learns of a dead host from its own connection. One callback (NULL clears it). */
void mesh_on_silent(mesh_t *m, void (*cb)(void *data, const char *peer_id), void *data);

#endif
