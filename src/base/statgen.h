/* statgen — "the node's status changed": a generation counter and one listener.
 *
 * Drivers call status_changed() when something /api/status shows has changed (a peer joined,
 * died, left or re-announced; a model or child process changed state; a request finished). The
 * events stream (api_events.h) listens and pushes a fresh snapshot, coalescing bursts; nobody
 * diffs JSON documents. Single-threaded (the event loop). */
#ifndef MESH_STATGEN_H
#define MESH_STATGEN_H

#include <stdint.h>

/* Bump the generation and tell the listener (if any). */
void status_changed(void);
/* The current generation (starts at 0, only grows). */
uint64_t status_gen(void);
/* The one listener (NULL to remove). */
void status_listen(void (*fn)(void *data), void *data);

#endif
