/* api_events — GET /api/events on the console port: Server-Sent Events with the status document.
 *
 * A client gets the whole /api/status document (one "data:" line of JSON) when it connects,
 * then every period (MESH_LLM_EVENTS_MS, default 2 s) and soon after every change the node
 * reports through status_changed() (statgen.h): a burst of changes makes at most one snapshot
 * per EVENTS_MIN_GAP_MS. A comment line keeps idle proxies from closing the stream. One JSON
 * serialisation per snapshot is shared by every client (two when some may see the token and
 * some may not: the token is only for loopback clients, as in /api/status).
 *
 * Memory is bounded per client: a client whose untaken bytes (queued in the node plus those in
 * its socket's send queue, httpd_unsent) would pass MESH_LLM_EVENTS_MAX_QUEUE (default 256 KiB,
 * options.c) is dropped, so a client that does not read costs at most that much, never more. */
#ifndef MESH_API_EVENTS_H
#define MESH_API_EVENTS_H

#include <stdbool.h>
#include <jansson.h>

#include "api_mgmt.h"
#include "httpd.h"

#define EVENTS_MIN_GAP_MS 100
#define EVENTS_KEEPALIVE_MS 15000
#define EVENTS_MAX_CLIENTS 128

/* Answers req and returns true when it is for /api/events. */
bool api_events_handle(mgmt_t *g, httpd_req_t *req);
/* {"clients","dropped","snapshots"} into the status document's "events". */
void api_events_status(mgmt_t *g, json_t *st);
/* Close every stream and the timer (the management server is stopping). */
void api_events_stop(mgmt_t *g);

#endif
