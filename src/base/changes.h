/* changes — "the node's status changed": a generation counter and its listeners (the change
 * bus).
 *
 * Drivers call changes_notify() when something /api/status shows has changed (a peer joined,
 * died, left or re-announced; a model or child process changed state; a request finished). The
 * listeners (the events stream, api_events.h) react, e.g. by pushing a fresh snapshot and
 * coalescing bursts; nobody diffs JSON documents. The bus is an object (one per node, owned by
 * the composition root and handed to the drivers), not process state. Single-threaded (the
 * event loop).
 *
 * Listeners may listen, unlisten (themselves or another) and notify from inside a
 * notification: a listener removed during a notification is not called after its removal, one
 * added during it is called from the next notification on. */
#ifndef MESH_CHANGES_H
#define MESH_CHANGES_H

#include <stddef.h>
#include <stdint.h>

#define CHANGES_MAX_LISTENERS 8

typedef struct {
    void (*fn)(void *data); /* NULL: removed during a notification (compacted after it) */
    void *data;
} changes_listener_t;

/* Zero-initialised is a bus with no listener at generation 0. */
typedef struct changes {
    uint64_t gen;
    changes_listener_t l[CHANGES_MAX_LISTENERS];
    size_t n;
    unsigned depth; /* notifications under way (a listener may notify) */
} changes_t;

/* Bump the generation and call every listener once, in the order they listened. c may be NULL
 * (no bus: nothing happens). */
void changes_notify(changes_t *c);
/* The current generation (starts at 0, only grows). */
uint64_t changes_gen(const changes_t *c);
/* Add a listener: 0, or -ENOSPC when CHANGES_MAX_LISTENERS are listening. */
int changes_listen(changes_t *c, void (*fn)(void *data), void *data);
/* Remove the listener (fn, data) (no-op when it is not listening). */
void changes_unlisten(changes_t *c, void (*fn)(void *data), void *data);

#endif
