/* api_events — GET /api/events on the console port: Server-Sent Events with the status document.
 *
 * A client gets the whole /api/status document (one "data:" line of JSON) when it connects,
 * then every period (MESH_LLM_EVENTS_MS, default 2 s) and soon after every change the node
 * reports on its change bus (changes.h): a burst of changes makes at most one snapshot
 * per EVENTS_MIN_GAP_MS. A comment line keeps idle proxies from closing the stream. One JSON
 * serialisation per snapshot is shared by every client (two when some may see the token and
 * some may not: the token is only for loopback clients, as in /api/status).
 *
 * Memory is bounded per client: a client whose untaken bytes (queued in the node plus those in
 * its socket's send queue, httpd_unsent) would pass MESH_LLM_EVENTS_MAX_QUEUE (default 256 KiB,
 * options.c) is dropped, so a client that does not read costs at most that much, never more.
 *
 * The streams know nothing of the management server: the document comes from the snapshot
 * callback (doc) given to api_events_init (api_mgmt.c's: status_doc.h plus api_events_status). */
#ifndef MESH_API_EVENTS_H
#define MESH_API_EVENTS_H

#include <stdbool.h>
#include <jansson.h>
#include <uv.h>

#include "changes.h"
#include "httpd.h"

#define EVENTS_MIN_GAP_MS 100
#define EVENTS_KEEPALIVE_MS 15000
#define EVENTS_MAX_CLIENTS 128

typedef struct events events_t;

/* The event streams of one server on loop, listening on the change bus changes (NULL: the
 * period only). doc returns the whole status document (a new reference; NULL: no snapshot this
 * time), with the invite token in it: the streams hide it from clients that may not see it.
 * period_ms (MESH_LLM_EVENTS_MS, at least EVENTS_MIN_GAP_MS) and max_queue (bytes,
 * MESH_LLM_EVENTS_MAX_QUEUE) come from the node's tunables.
 * 0, -ENOMEM, or -ENOSPC (the bus has no room for another listener). */
int api_events_init(events_t **out, uv_loop_t *loop, changes_t *changes, json_t *(*doc)(void *data),
                    void *data, uint64_t period_ms, uint64_t max_queue);
/* Answers req and returns true when it is for /api/events. */
bool api_events_handle(events_t *ev, httpd_req_t *req);
/* The status document's "events": {"clients","dropped","snapshots"} (ev NULL: zeros). */
json_t *api_events_status(const events_t *ev);
/* Close every stream and the timer (the server is stopping); ev is freed once the timer is
 * closed. */
void api_events_stop(events_t *ev);

#endif
