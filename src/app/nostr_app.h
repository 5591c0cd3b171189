/* nostr_app — public discovery wired into the node (issue 16): the Nostr key, the discovery
 * subscription, publishing and its watchdog, --auto, GET /api/discover.
 *
 * Relays are contacted only when something asks for them: --publish or --auto at startup, or
 * the first GET /api/discover. */
#ifndef MESH_NOSTR_APP_H
#define MESH_NOSTR_APP_H

#include <jansson.h>
#include <stdbool.h>
#include <uv.h>

#include "auto_score.h"
#include "config.h"
#include "discovery.h"
#include "httpd.h"
#include "publisher.h"

#define AUTO_PROBE_BATCH 3 /* candidates probed at once */
#define AUTO_MAX_CANDIDATES 12
#define AUTO_SPEED_WAITS 100 /* x 100 ms: the longest --auto waits for the speed calibration */

/* What --auto asks of the node (given to nostr_app_init). */
typedef struct {
    /* --auto: join(t) enters the mesh of token t, or a new mesh of this node's own (t NULL). */
    int (*join)(void *data, const token_t *t, char *err, size_t errlen);
    /* a new mesh without a model: download ref (a catalog name) and serve it */
    int (*fetch_model)(void *data, const char *ref, char *err, size_t errlen);
    /* this node's measured speed (node/speed.h; 0 unknown), *pending while it is measured */
    uint32_t (*speed)(void *data, bool *pending);
    /* a catalog model's file is on disk already */
    bool (*on_disk)(void *data, const char *ref);
    /* ask the hub whether it can serve ref (node_dl_probe); 0: cb follows */
    int (*probe_hub)(void *data, const char *ref, void (*cb)(void *arg, int rc, const char *why),
                     void *arg);
    void *data;     /* the callbacks' */
    uint64_t offer; /* the memory this node offers (picks the model that fits) */
} nostr_app_deps_t;

typedef struct {
    uv_loop_t *loop;
    const config_t *cfg;
    const char *home;
    discovery_t *disc;
    const char *relays[CONFIG_MAX_RELAYS];
    char relay_buf[2048];
    size_t n_relays;
    uint8_t sk[32], pk[32];
    bool have_key;
    publisher_t pub;
    planner_t *plan;
    mesh_t *mesh;
    nostr_app_deps_t dep; /* nostr_app_init's */
    bool auto_pending;
    bool auto_listening; /* the relays answered with no mesh: listening a little longer */
    uv_timer_t auto_timer;
    bool auto_timer_open;
    uint64_t auto_deadline;
    char auto_note[1024]; /* what --auto decided, for the status */
    char auto_model[128]; /* the model --auto fetches for its new mesh ("" none) */
    size_t auto_listed;
    auto_pick_t pick;
    uint32_t mflops;
    unsigned speed_waits;
    bool stopped;
    /* the ranked candidates, health-probed AUTO_PROBE_BATCH at a time, best first */
    mesh_listing_t *cands;
    int64_t *scores;
    size_t n_cands, batch_start, batch_n, pending;
    int probe_rc[AUTO_PROBE_BATCH];
    double probe_rtt[AUTO_PROBE_BATCH];
    unsigned long probes, probes_ok;
    size_t (*passive)(void *data, uint64_t *vram_bytes); /* nostr_app_set_passive */
    void *passive_data;
} nostr_app_t;

/* Load the Nostr key and start discovery when --publish or --auto ask for it. */
int nostr_app_init(nostr_app_t *na, uv_loop_t *loop, const config_t *cfg, const char *home,
                   const nostr_app_deps_t *dep, char *err, size_t errlen);
/* The node is in a mesh now: publish (--publish) and watch the listing. */
void nostr_app_in_mesh(nostr_app_t *na, planner_t *plan, mesh_t *mesh);
/* Where the listing counts the passive nodes that check in with this node (publisher.h). */
void nostr_app_set_passive(nostr_app_t *na, size_t (*fn)(void *, uint64_t *), void *data);
/* Every member of a published mesh watches its listing (the publish watchdog): a node that
 * publishes or watches says so in its announcement ("nostr_published": true); a member that
 * sees it in a peer's announcement starts watching too (when it has relays). */
void nostr_app_fill_announcement(const nostr_app_t *na, json_t *ann);
/* Returns true when the announcement changed (this node started watching). */
bool nostr_app_peers_changed(nostr_app_t *na);
/* --auto: wait for the relays (bounded), rank the live meshes, health-probe the best (a QUIC
 * handshake + admission with the listed token, MESH_LLM_PROBE_MS, default 5 s; three at a time),
 * join the best that answers through join(); none: a new mesh of this node's own. */
void nostr_app_auto(nostr_app_t *na);
/* GET /api/discover[?region=R&model=M] */
void nostr_app_discover(nostr_app_t *na, httpd_req_t *req);
/* "nostr": {...} in the status document. */
json_t *nostr_app_status(nostr_app_t *na);
void nostr_app_stop(nostr_app_t *na);

/* A query parameter of a URL (plain characters only: letters, digits, . _ - :), "" when absent
 * or not plain. */
void nostr_app_query(const char *url, const char *name, char *out, size_t outlen);

#endif
