/* gossip_int — what gossip.c (peer table, timers, API) and gossip_recv.c (messages received:
 * signature checks, merging announcements and claims) share. Private to gossip. */
#ifndef MESH_GOSSIP_INT_H
#define MESH_GOSSIP_INT_H

#include <stdbool.h>
#include <stdint.h>

#include "gossip.h"
#include "gossip_msg.h"

#define MAX_FANOUT 64

/* why a peer is probed: silence (a failure declares it dead to all), a third party's claim at
 * its incarnation (the ping shows the claim, so a live peer refutes it), or a claim beyond what
 * it signed (a plain ping) */
enum { PR_SUSPECT = 1, PR_CLAIM, PR_CHECK };

struct peer {
    gossip_peer_t pub;
    uint64_t watch_since; /* monitoring baseline: when it became a predecessor or came alive */
    uint64_t probe_start;
    bool ping2_sent, unreachable;
    bool suspect_req; /* gossip_suspect: probe at the next tick */
    bool silent_req;  /* gossip_silent: and that probe fails at once */
    int probe_reason;
    uint64_t dg_gen, dg_inc, dg_seq;  /* scratch: its entry in the digest being answered */
    char leave_sig[GMSG_SIG_HEX + 1]; /* LEFT: its signature of its leave at pub.inc */
};

struct gossip {
    char id[GOSSIP_ID_LEN + 1];
    uint64_t inc, seq;
    json_t *ann; /* immutable once published: changes make a new copy */
    gossip_cfg_t cfg;
    gossip_io_t io;
    struct peer **v; /* sorted by id */
    size_t n, cap;
    uint64_t next_hb;
    char pred[2][GOSSIP_ID_LEN + 1];
    char join_id[GOSSIP_ID_LEN + 1];
    bool left;
    uint64_t gen;
    uint64_t max_inc; /* incarnations above it are refused (wall clock + GOSSIP_MAX_AHEAD_MS) */
    gossip_stats_t st;
};

size_t gsp_lower_bound(const gossip_t *g, const char *id);
struct peer *gsp_find(const gossip_t *g, const char *id);
void gsp_remove_at(gossip_t *g, size_t i);
struct peer *gsp_insert(gossip_t *g, const char *id, uint64_t now);
bool gsp_newer(uint64_t inc, uint64_t seq, uint64_t inc2, uint64_t seq2);
void gsp_emit(gossip_t *g, gossip_event_t ev, struct peer *p);
void gsp_prune_departed(gossip_t *g, uint64_t now);
json_t *gsp_new_msg(const gossip_t *g, int type);
void gsp_send_free(gossip_t *g, const char *to, json_t *m);
json_t *gsp_dead_rec(const char *id, uint64_t inc, gossip_state_t st);
json_t *gsp_peer_rec(const struct peer *p);
json_t *gsp_recent_dead(const gossip_t *g, uint64_t now);
void gsp_send_hello(gossip_t *g, const char *to, bool join);
void gsp_forward_claim(gossip_t *g, struct peer *p, const char *informer);
void gsp_refute(gossip_t *g, const char *informer, uint64_t min_inc, uint64_t now);
void gsp_start_probe(gossip_t *g, struct peer *p, int reason, uint64_t now);
void gsp_mark(gossip_t *g, struct peer *p, gossip_state_t st, uint64_t inc, uint64_t now);
int gsp_set_alive(gossip_t *g, struct peer *p, json_t *ann, uint64_t inc, uint64_t seq,
                  uint64_t now);
uint64_t gsp_inc_limit(const gossip_t *g);

#endif
