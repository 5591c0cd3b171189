/* join_policy — what POST /api/join does, given where this node is (pure).
 *
 * An idle node (no mesh yet) starts joining the token's mesh. A node that is in a mesh, or is
 * joining one, stays there: the same mesh again is answered "already" (idempotent, nothing
 * changes); another mesh is a conflict (leaving a mesh at runtime is not supported: restart the
 * node with --join, or without arguments to be idle again). A node's own token is refused.
 * Except: a join that has got nowhere (still joining, no live peer: an unreachable address, a
 * wrong secret) has nothing to leave, so any new token replaces it (issue 33 item 3). */
#ifndef MESH_JOIN_POLICY_H
#define MESH_JOIN_POLICY_H

#include <stdbool.h>

typedef enum {
    JOIN_START = 0,  /* idle: join the token's mesh now (202) */
    JOIN_ALREADY,    /* already in (or joining) the token's mesh: nothing to do (200) */
    JOIN_OTHER_MESH, /* in (or joining) another mesh (409) */
    JOIN_OWN_TOKEN,  /* the token names this node itself (400) */
    JOIN_REPLACE,    /* joining, alone: the new token replaces the failing one (202) */
} join_decision_t;

/* own_id: this node's id ("" when not known yet); cur_mesh: the mesh it is in or joining, NULL
 * when idle; stuck: a join is under way that has reached no one yet (not a member, no live
 * peer); tok_id, tok_mesh: the token's node and mesh. */
join_decision_t join_decide(const char *own_id, const char *cur_mesh, bool stuck,
                            const char *tok_id, const char *tok_mesh);
/* The HTTP status that answers a decision. */
int join_http_status(join_decision_t d);

#endif
