/* status_doc — the node's status document: what GET /api/status answers, what every
 * /api/events snapshot carries and what the console shows. It reads the management server's
 * state (api_mgmt.h) and calls neither the server nor the event streams: api_mgmt.c adds the
 * streams' own counters ("events", api_events_status) to each document it hands out. */
#ifndef MESH_STATUS_DOC_H
#define MESH_STATUS_DOC_H

#include <stdbool.h>
#include <jansson.h>

#include "api_mgmt.h"
#include "httpd.h"

/* The status document without "events"; NULL when out of memory. node.state: idle (no mesh
 * yet), joining (a join is under way; node.join_error says why the last attempt failed),
 * member, passive. */
json_t *status_doc(mgmt_t *g);
/* Whether a client may see the invite token (the mesh secret) in the status document: only one
 * on this machine that names it by a loopback host (Host header). */
bool mgmt_may_see_secrets(httpd_peer_t peer, const char *host_header);
/* The document as a client that may not see secrets gets it: node.token is null. */
void status_doc_hide_secrets(json_t *st);

#endif
