/* status_doc — the node's status document: what GET /api/status answers, what every
 * /api/events snapshot carries and what the console shows. It reads the management server's
 * state (api_mgmt.h) and calls neither the server nor the event streams: api_mgmt.c hands it
 * the streams' own counters ("events", api_events_status) for each document. It is the
 * document's one writer: every other module renders only its own parts (status_parts_t). */
#ifndef MESH_STATUS_DOC_H
#define MESH_STATUS_DOC_H

#include <stdbool.h>
#include <jansson.h>

#include "api_mgmt.h"
#include "httpd.h"
#include "passive.h"
#include "planner.h"
#include "route_serve.h"

/* The node's parts of the document, each rendered by the module that owns it (new values, NULL:
 * absent; status_doc_place takes them over). Where a part is a fact about another part's object
 * (a peer's speed, a standby that checks in, a counter in "stats", a flag of "node"), the part is
 * typed and status_doc.c puts it there: no module edits another's section. */
typedef struct status_parts {
    uint64_t route_requests; /* stats.route_requests (net/tunnels.h) */
    planner_status_t plan;   /* node.{memory,role,assignment,demand,speed}, catalog, plan,
                                rpc_tunnel, peers[].speed_mflops */
    bool passive;            /* a passive node: pas (its table), else rs (what it answers) */
    passive_status_t pas;    /* route; catalog (replaces the planner's) */
    route_serve_status_t rs; /* passive; peers[].state "standby"; stats.route_{answered,refused} */
    json_t *standby;         /* node.standby */
    json_t *admission;       /* admission */
    json_t *downloads, *download_errors; /* node_dl.h */
    json_t *nostr;                       /* nostr */
    json_t *devices;                     /* node.devices, node.llama_flavour (offer.h) */
} status_parts_t;

/* The status document, "events" last (taken over; NULL: no "events"); NULL when out of memory.
 * node.state: idle (no mesh yet), joining (a join is under way; node.join_error says why the
 * last attempt failed), member, passive. */
json_t *status_doc(mgmt_t *g, json_t *events);
/* Places the node's parts into st (a mesh's document: "node", "peers", "stats"), in the order
 * clients have always seen them, and releases the parts. */
void status_doc_place(json_t *st, status_parts_t *parts);
/* Whether a client may see the invite token (the mesh secret) in the status document: only one
 * on this machine that names it by a loopback host (Host header). */
bool mgmt_may_see_secrets(httpd_peer_t peer, const char *host_header);
/* The document as a client that may not see secrets gets it: node.token is null. */
void status_doc_hide_secrets(json_t *st);

#endif
