/* gossip — mesh membership as a pure state machine (no I/O, time passed in, deterministic).
 *
 * Changes to the first draft of this header (made with the implementation, semantics kept):
 *  - Message schema written down (end of this comment); arrays are capped at GOSSIP_MAX_PEERS + 1
 *    entries (self + peers), not GOSSIP_MAX_PEERS, since a full digest lists self too.
 *  - Redundancy for one-shot notices, so that one lost message does not cost a heartbeat: a node
 *    that first learns a claim about a live peer (dead record, or "left") forwards it as
 *    "peer_down" to its two ring successors. Per death or leave this adds 2 messages per node.
 *  - Dead and left records travel in the same "dead" lists.
 *  - Probes are "ping" answered by "pong" (any direct message counts). A probe caused by a
 *    third party's claim carries that claim, so a live target refutes at once.
 *  - "dead_notice" carries the record [receiver, inc, "dead"]; it is the only message acted on
 *    from a peer held dead, and only for its records about the receiver.
 *  - A refutation "update" also carries the refuter's recent dead records: an informer that the
 *    refuter itself holds dead learns it and refutes in turn (partitions heal in one exchange).
 *  - "ack" is sent only when it says something: in steady state a node sends exactly `fanout`
 *    hb (+1 to a recently dead peer) per heartbeat and nothing else.
 *  - gossip_join retries the hello (join) every heartbeat until the seed is known alive.
 *  - An announcement of ourselves newer than our own (we restarted with a stale incarnation)
 *    makes us bump past it (it carries our own signature). An incarnation bump resets seq to 0.
 *  - A new ring predecessor is watched from the moment it becomes one (not from its last
 *    direct message, which may be old).
 *  - Departed (dead or left) records are gossiped for dead_retry_beats heartbeats and
 *    forgotten after twice that (GOSSIP_EV_FORGOTTEN; 60 min at the default heartbeat); at most
 * GOSSIP_MAX_DEPARTED are kept, the oldest goes first — so a churning mesh cannot grow a node's
 * view, its status or its metrics' peer series. Claims about peers never seen are dropped (a signed
 * leave is kept as a tombstone while the record lasts).
 *  - gossip_new: cfg may be NULL; zero fields take the defaults. Callbacks may use the read-only
 *    accessors and gossip_unreachable (which only flags the probe: it fails at the next tick,
 *    due at once), nothing else. A message passed to send() is never modified afterwards, so the
 *    I/O layer may serialize a broadcast once.
 *
 * The I/O layer (mesh.c) feeds in authenticated messages from peers (gossip_receive), the clock
 * (gossip_tick at or after gossip_next_deadline) and local changes (gossip_set_announcement,
 * gossip_join, gossip_leave). The state machine answers through the callbacks in gossip_io_t:
 * send a JSON control frame to a peer id (the I/O layer dials on demand), report membership
 * events, draw random numbers. A 100-node simulation drives it with a virtual clock and lossy,
 * delayed delivery (tests/unit/test_gossip.c).
 *
 * Model (SWIM-like, with the mesh-llm seeds' numbers):
 *  - Every node has an announcement (opaque JSON object, DESIGN.md §4 PeerAnnouncement) versioned
 *    by (incarnation, seq). A restart gets a higher incarnation; each change of the announcement
 *    bumps seq. Higher (inc, seq) supersedes.
 *  - Heartbeat: every heartbeat_ms a node sends "hb" (its digest: [id, inc, seq] of every live
 *    peer it knows, plus recent dead records) to at most `fanout` peers: its two ring successors
 *    (ids sorted, wrapping) and random others. The receiver answers "ack" with the announcements
 *    it has that are newer than the digest and the ids it wants; the sender answers "update"
 *    with the wanted ones. So a node sends O(fanout) messages per heartbeat, not O(N).
 *  - Failure detection: a node monitors its two ring predecessors. A predecessor silent (no
 *    direct message) for 2 heartbeats + a quarter (2.25 × heartbeat_ms) is probed ("ping" now and
 *    again at half the probe time); no direct message within probe_ms → dead: a dead record
 *    (id, inc) is kept and "peer_down" is sent to every live peer.
 *  - A receiver of peer_down (or of a dead record in gossip) for a peer it has alive at that
 *    incarnation probes it itself and drops it only if the probe fails (see Trust below).
 *  - "leaving" (clean shutdown, signed) drops the sender at once, no probe.
 *  - Dead records keyed by (id, inc) make stale gossip harmless: third-party announcements at an
 *    incarnation <= the dead one are ignored forever. A higher incarnation is accepted at once.
 *  - An incarnation change (restart, refutation) starts failure detection afresh: a new
 *    incarnation is watched from the moment it is learned and a probe of the old one ends, so
 *    it is never declared dead for the old incarnation's silence.
 *  - Refutation: a node that learns it is considered dead at its current incarnation (peer_down
 *    about itself, a dead record about itself in gossip, or a "dead_notice" reply) bumps its
 *    incarnation and sends its new announcement to every live peer and to the node that told it.
 *    A node receiving a direct message from a peer it holds dead at the same incarnation answers
 *    "dead_notice" and ignores the rest of the message.
 *  - Partitions heal: every heartbeat, a node also sends "hb" to one random peer it declared dead
 *    less than dead_retry_beats heartbeats ago (it still knows its announcement, hence its
 *    addresses); the two sides then refute each other and re-merge.
 *  - Joining: gossip_join(seed id) sends "hello" (own announcement); the seed answers "sync"
 *    (every live announcement and recent dead records). Every peer newly learned from anyone is
 *    sent "hello" directly (C joins via B, learns A, says hello to A), so a new node is known by
 *    everyone in one step.
 *
 * Trust: a member speaks for itself only. Everything a node says about itself that others relay
 * is signed by its Ed25519 key (its id is the hex of the public key): its announcements and its
 * leave. Relays keep the origin's signature, so a third party can pass them on but not alter or
 * invent them. Receivers verify a signature before using what it covers (an announcement that
 * is not newer than the one held is ignored unverified); a wrong one is refused (stats.bad_sig).
 *  - Third-party claims (peer_down, dead records in any list, a "left" record without the
 *    leaver's signature) are hints: they make the receiver probe the node itself; only its own
 *    failed probe makes it hold a live node dead. A "left" record that carries the leaver's own
 *    signature of its leave is a fact: the node is dropped at once and the record (with its
 *    signature) is passed on.
 *  - A claim never carries an incarnation above the highest one the node itself signed that the
 *    receiver has seen (its announcements' and leaves'): such a claim is not recorded (nor
 *    passed on, stats.unproven); at most it makes the receiver check the node with a plain ping
 *    (no claim inside, so a live node does not even refute). Claims about nodes never seen are
 *    dropped.
 *  - Incarnations are wall-clock milliseconds at start (identity.c), bumped by one per
 *    refutation. Any incarnation more than GOSSIP_MAX_AHEAD_MS past the receiver's wall clock
 *    (io.wall_ms) is refused wherever it appears (a message's "inc": the message is malformed;
 *    an announcement, digest entry or record: that item, stats.future).
 *  - A claim about ourselves at our current incarnation is refuted (bump + new signed
 *    announcement); one above it was never signed by us and is ignored. So a node still learns
 *    that it was declared dead (peer_down, dead records, dead_notice) and refutes, and
 *    partitions heal as before; a member can at worst make a live node refute (+1).
 *  - A message from an incarnation below the one we hold for its sender (a late one, or a
 *    process restarted with a stale incarnation: state lost, clock set back) is answered with
 *    the sender's own newer signed announcement (and our record of it if not alive): a live
 *    process verifies its own signature and bumps past it. Above our incarnation only our own
 *    signature (announcement, or a leave of ours) makes us bump.
 *
 * Signed byte forms (Ed25519, signature in the field "sig" as 128 lowercase hex chars):
 *  - announcement: "mesh-llm/1 announcement\n" followed by the announcement without its "sig"
 *    field as compact JSON with object keys sorted bytewise at every level, as jansson writes
 *    it with JSON_COMPACT | JSON_SORT_KEYS (no whitespace; strings UTF-8 with only '"', '\\'
 *    and control characters escaped; integers in decimal; reals "%.17g"). The id, incarnation
 *    and seq are inside, so a signature covers exactly one version. At most GOSSIP_MAX_ANN_BYTES
 *    of JSON are verified; a longer announcement is refused.
 *  - leave: "mesh-llm/1 leave\n" followed by {"id":"<id>","incarnation":<inc>} (the same
 *    canonical JSON).
 * The domain prefixes keep a signature of one kind from being taken for the other.
 *
 * Messages are JSON objects {"v":1,"type":…,"inc":<sender's incarnation>,…}; the sender's id is
 * the authenticated transport identity passed to gossip_receive, never a field. Malformed
 * messages are rejected with -EINVAL and change nothing. The I/O layer maps types to stream
 * type bytes: "peer_down" → PEER_DOWN (0x06), "leaving" → PEER_LEAVING (0x07), the rest → GOSSIP.
 *
 * Schema (ids: 64 lowercase hex chars; sig: 128; integers >= 0; ann: an announcement object with
 * at least "id", "incarnation", "seq" and "sig"; rec = [id, inc, "dead"|"left"] or
 * [id, inc, "left", sig of the leaver's leave]; unknown fields ignored, an unknown type is
 * malformed; "dead" (a list of rec) is allowed on every type):
 *   hb          digest: [[id, inc, seq]…] (self, then every live peer), dead: recent records
 *   ack         anns: [ann…] the receiver's newer or missing ones, want: [id…],
 *               dead: its records for digest entries
 *   update      anns, optional want and dead (records for announcements it refused as stale)
 *   hello       ann: the sender's own (id == sender, incarnation == inc), join: true → "sync"
 *   sync        anns: every live announcement and the seed's own, dead: recent records
 *   ping, pong  —
 *   peer_down   dead (required)
 *   leaving     sig: the sender's signature of its leave at inc (required)
 *   dead_notice dead: [[receiver, inc, "dead"]]
 */
#ifndef MESH_GOSSIP_H
#define MESH_GOSSIP_H

#include <jansson.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define GOSSIP_ID_LEN 64           /* hex of a 32-byte Ed25519 public key */
#define GOSSIP_MAX_PEERS 1024      /* live + dead records; beyond it the oldest dead record goes */
#define GOSSIP_MAX_DEPARTED 64     /* dead + left records kept; beyond it the oldest goes */
#define GOSSIP_MAX_ANN_BYTES 65536 /* canonical JSON of one announcement */
#define GOSSIP_MAX_AHEAD_MS (24ULL * 3600 * 1000) /* incarnations past the wall clock + this */
/* The default probe's cap: a peer suspected (a failed stream, a claim from a third party) is
 * declared dead after at most this long without an answer; with the transport's 2 s liveness
 * bound, a kill -9 is agreed mesh-wide within about 2 s + this (docs/timings.md). A live peer
 * answers a ping in a round trip, so a slow link (50 ms, loss) stays far inside it. */
#define GOSSIP_PROBE_MAX_MS 2000

typedef enum {
    GOSSIP_ALIVE = 0,
    GOSSIP_DEAD, /* declared dead (failure detection) */
    GOSSIP_LEFT, /* announced its clean shutdown */
} gossip_state_t;

typedef enum {
    GOSSIP_EV_UP = 0,    /* a peer became known/alive (new, restarted, or refuted its death) */
    GOSSIP_EV_UPDATED,   /* a live peer's announcement changed */
    GOSSIP_EV_DEAD,      /* declared dead */
    GOSSIP_EV_LEFT,      /* left cleanly */
    GOSSIP_EV_FORGOTTEN, /* a departed record dropped (too old, or over GOSSIP_MAX_DEPARTED) */
} gossip_event_t;

typedef struct {
    char id[GOSSIP_ID_LEN + 1];
    uint64_t inc;
    uint64_t seq;
    gossip_state_t state;
    json_t *ann;          /* last announcement known (kept for dead peers: their addresses) */
    uint64_t last_direct; /* ms: last direct message from it (0 never) */
    uint64_t changed_at;  /* ms: last state/announcement change */
    bool probing;
} gossip_peer_t;

typedef struct {
    uint64_t heartbeat_ms;     /* default 60000 */
    uint64_t probe_ms;         /* default min(heartbeat_ms / 4, GOSSIP_PROBE_MAX_MS), >= 50 */
    unsigned fanout;           /* default 5 */
    unsigned dead_retry_beats; /* default 30 */
} gossip_cfg_t;

typedef struct {
    void *data;
    /* Send msg (not consumed; serialize or incref it) to peer `to`. */
    void (*send)(void *data, const char *to, json_t *msg);
    /* Membership change; `peer` is valid only during the call. */
    void (*event)(void *data, gossip_event_t ev, const gossip_peer_t *peer);
    /* Uniform 64-bit random number (the simulation seeds it). */
    uint64_t (*random)(void *data);
    /* Sign len bytes with this node's Ed25519 key (the one whose public key is self_id):
     * a detached signature into sig. Every own announcement and leave is signed. */
    void (*sign)(void *data, const uint8_t *msg, size_t len, uint8_t sig[64]);
    /* Wall clock in ms since the epoch (incarnations are wall-clock ms). */
    uint64_t (*wall_ms)(void *data);
} gossip_io_t;

typedef struct gossip gossip_t;

/* Fill cfg with defaults for heartbeat_ms (0 → 60000). gossip_new also takes defaults for zero
 * fields. */
void gossip_cfg_default(gossip_cfg_t *cfg, uint64_t heartbeat_ms);

/* self_ann is the node's announcement (reference taken); its "id", "incarnation", "seq" and
 * "sig" fields are set by the state machine. io->send, random, sign and wall_ms are required.
 * NULL on allocation failure, bad id or missing callback. */
gossip_t *gossip_new(const char *self_id, uint64_t incarnation, json_t *self_ann,
                     const gossip_cfg_t *cfg, const gossip_io_t *io, uint64_t now);
void gossip_free(gossip_t *g);

/* Replace the own announcement (reference taken): bumps seq and sends it ("update") to every
 * live peer. */
void gossip_set_announcement(gossip_t *g, json_t *ann, uint64_t now);
/* The current own announcement (borrowed), with id/incarnation/seq/sig filled in. */
json_t *gossip_self(gossip_t *g);
uint64_t gossip_incarnation(const gossip_t *g);

/* Join through a peer we know only by id (from an invite token): send it "hello". */
void gossip_join(gossip_t *g, const char *peer_id, uint64_t now);

/* A message from authenticated peer `from` (not consumed; announcements are copied). 0, or
 * -EINVAL for a malformed message or sender id (ignored, counted in stats.rejected) or for a
 * hello/leaving whose signature of the sender's own statement is wrong (stats.bad_sig). */
int gossip_receive(gossip_t *g, const char *from, json_t *msg, uint64_t now);

/* Local evidence that `id` may be gone (a tunnel stream to it failed, a dial to it failed):
 * probe it now; a failed probe declares it dead and tells every live peer, as a monitor's does.
 * Nothing happens if it is not alive or already probed. Deferred to the next tick (due at once),
 * so it is safe to call from inside send(). */
void gossip_suspect(gossip_t *g, const char *id, uint64_t now);

/* The transport heard nothing from `id` for its liveness bound while it waited on it (streams
 * open, its PINGs unanswered): that was a probe, and it failed. At the next tick (due at once)
 * `id` is declared dead and every live peer is told ("peer_down"); they do not take it on trust
 * but probe it themselves (a claim is a hint), so a peer that is only slow towards this node
 * stays alive for the others and refutes (a higher incarnation) when it hears of it. Nothing
 * happens if it is not alive. Safe to call from inside send(). */
void gossip_silent(gossip_t *g, const char *id, uint64_t now);

/* The transport could not reach `id` (dial failed, connection lost): a probe in progress for it
 * fails at the next tick, which is due at once (gossip_next_deadline returns 0). Safe to call
 * from inside the send callback. Optional; probes also time out by themselves. */
void gossip_unreachable(gossip_t *g, const char *id, uint64_t now);

/* Run timers. Call at or after gossip_next_deadline() (calling early is harmless). */
void gossip_tick(gossip_t *g, uint64_t now);
uint64_t gossip_next_deadline(const gossip_t *g);

/* Clean shutdown: send "leaving" (signed) to every live peer. */
void gossip_leave(gossip_t *g, uint64_t now);

/* Peers (not including self), live and dead records, in no particular order. */
size_t gossip_peer_count(const gossip_t *g);
const gossip_peer_t *gossip_peer_at(const gossip_t *g, size_t i);
const gossip_peer_t *gossip_find(const gossip_t *g, const char *id);
size_t gossip_alive_count(const gossip_t *g);

/* Counters for tests and /api/status. */
typedef struct {
    uint64_t sent;     /* every message */
    uint64_t sent_hb;  /* hb + ack + update (the per-heartbeat traffic) */
    uint64_t received; /* every gossip_receive call */
    uint64_t rejected; /* malformed */
    uint64_t bad_sig;  /* announcements/leaves refused: signature wrong (or oversized) */
    uint64_t future;   /* items refused: incarnation more than GOSSIP_MAX_AHEAD_MS ahead */
    uint64_t unproven; /* claims not recorded: incarnation above what the node signed, unknown
                        * node, "left" without the leaver's signature (then only a hint) */
    uint64_t probes;
    uint64_t refutations; /* own incarnation bumps */
} gossip_stats_t;
const gossip_stats_t *gossip_stats(const gossip_t *g);

#endif
