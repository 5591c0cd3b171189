/* publisher — this node's part in its mesh's public listing: publishing (--publish) and the
 * watchdog (issue 16).
 *
 * A publishing node republishes the listing every MESH_LLM_PUBLISH_INTERVAL_MS (default 60 s)
 * with an expiry of MESH_LLM_PUBLISH_TTL_MS (default 120 s). Every node that watches listings
 * (--publish or --auto) and has seen its own mesh listed checks, every interval / 8, whether the
 * listing is still alive; once it has expired (older than the TTL), the live member with the
 * smallest node id takes over publishing. One publisher at a time: a publisher that sees a live
 * listing of its mesh by another node yields when that node's id is smaller, and a --publish
 * node that starts while another node publishes its mesh watches instead (the old publisher
 * yields when it returns). A publisher yields only to a listing by a live member (anyone can
 * sign a listing with the mesh's id). The decision is publisher_decide (pure, in the header),
 * the timer and I/O are the driver's. */
#ifndef MESH_PUBLISHER_H
#define MESH_PUBLISHER_H

#include <jansson.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "discovery.h"
#include "mesh.h"
#include "planner.h"

typedef enum { PUB_NOTHING = 0, PUB_PUBLISH, PUB_TAKE_OVER, PUB_YIELD } pub_action_t;

/* Pure. active: this node publishes; listed: a live listing of the mesh exists, by `lister`
 * when that is this node or a live member (NULL otherwise); seen: the mesh was seen listed before;
 * smallest: this node has the smallest id of the live members; due: the republish interval has
 * passed. */
pub_action_t publisher_decide(bool active, bool listed, const char *lister, const char *self,
                              bool seen, bool smallest, bool due);

typedef struct {
    uv_loop_t *loop;
    discovery_t *disc;
    planner_t *plan;
    mesh_t *mesh;
    uint8_t sk[32];
    char name[LISTING_NAME_MAX + 1];
    char region[LISTING_REGION_MAX + 1];
    bool active, seen, started;
    uint64_t interval_ms, ttl_ms, last_ms;
    unsigned long publishes, takeovers, yields;
    int listed;       /* what the log said last: 1 published, 0 not, -1 nothing yet */
    size_t relays_ok; /* relays that accepted the listing (at the last tick) */
    uv_timer_t timer;
    bool timer_open;
    /* Passive nodes (clients, standbys) are not gossip members: the ones that check in with
     * this node are counted in its listing through this (set after publisher_start; NULL: none).
     * Returns how many, and adds their memory to *vram_bytes. */
    size_t (*passive)(void *data, uint64_t *vram_bytes);
    void *passive_data;
} publisher_t;

/* want: --publish (publish unless another node already does). */
void publisher_start(publisher_t *p, uv_loop_t *loop, discovery_t *disc, planner_t *plan,
                     mesh_t *mesh, const uint8_t sk[32], const char *name, const char *region,
                     bool want);
void publisher_stop(publisher_t *p);
/* "publish": {...} in the status document. */
json_t *publisher_status(const publisher_t *p);

#endif
